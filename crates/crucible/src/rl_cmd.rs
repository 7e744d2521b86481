//! `crucible reward` and `crucible advantages`: thin glue over `crucible-rl`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use crucible_result::EvalResult;
use crucible_rl::advantage::{Config, Estimator};
use crucible_rl::reward::{Hierarchical, Recipe, SpeedupBasis};
use crucible_rl::sampling::{GroupFilter, Mrs, Prs, PrsMode};
use crucible_rl::{Error, io, record};

/// Exit status of `crucible reward` for an `infra_error` result: there is no reward, and the
/// caller must drop the sample.
const EXIT_INFRA: u8 = 3;

/// Parameters that tune a recipe; each applies to one recipe only, but `--speedup`.
#[derive(clap::Args)]
struct RecipeParams {
    /// Which speedup to score: `matched` (against the reference run at the candidate's measured
    /// precision class; the plain speedup when a result has none) or `fp32` (the plain
    /// `speedup`) [default: matched].
    #[arg(long, value_name = "BASIS", value_parser = SpeedupBasis::NAMES)]
    speedup: Option<String>,
    /// weighted: coverage weight w [default: 0.5].
    #[arg(long, value_name = "W")]
    coverage_weight: Option<f64>,
    /// hierarchical: plan weight α in [0, 1] [default: 0.5].
    #[arg(long, value_name = "A")]
    alpha: Option<f64>,
    /// hierarchical: text that ends the plan segment [default: </think>].
    #[arg(long, value_name = "TEXT")]
    boundary: Option<String>,
    /// Any recipe: subtract P from a correct result flagged `shape-specialized` (it failed the
    /// judge's generalization trial at other task sizes) [default: 0, off].
    #[arg(long, value_name = "P")]
    shape_specialized_penalty: Option<f64>,
}

#[derive(clap::Args)]
pub struct RewardArgs {
    /// One judge result document (`crucible eval --json` output).
    result: PathBuf,
    /// drkernel, weighted, tiered or hierarchical.
    #[arg(long, value_name = "NAME")]
    recipe: String,
    #[command(flatten)]
    params: RecipeParams,
    /// hierarchical: the response text, to report where its code segment starts.
    #[arg(long, value_name = "FILE")]
    response: Option<PathBuf>,
    /// Print a JSON object instead of the bare number. An infra_error result prints
    /// `"reward": null` and exits with status 3 either way: drop that sample.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct AdvantagesArgs {
    /// Trajectory batch (.parquet or .jsonl; see docs/trajectory-schema.md).
    #[arg(long = "in", value_name = "FILE")]
    input: PathBuf,
    /// Where to write the batch with rewards, returns, advantages and masks (.parquet or .jsonl).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// grpo, rloo, trloo or kevin.
    #[arg(long, value_parser = Estimator::NAMES)]
    estimator: String,
    /// Discount γ in [0, 1] [default: 1, or 0.4 for kevin].
    #[arg(long, value_name = "G")]
    gamma: Option<f64>,
    /// grpo: subtract the group mean only, without dividing by the std.
    #[arg(long)]
    no_std: bool,
    /// Recompute rewards from judge_result with this recipe; without it the reward column is
    /// used as given.
    #[arg(long, value_name = "NAME")]
    recipe: Option<String>,
    #[command(flatten)]
    params: RecipeParams,
    /// Profiling-based rejection sampling of correct turns with low Triton coverage.
    #[arg(long)]
    prs: bool,
    /// PRS draws once per `turn`, or once per `trajectory` (geometric mean of its turns).
    #[arg(long, value_parser = ["turn", "trajectory"], default_value = "turn", requires = "prs")]
    prs_mode: String,
    /// Mismatch rejection sampling; needs the train_logprobs column.
    #[arg(long)]
    mrs: bool,
    /// Drop prompts whose last-turn rewards are flat (std < 1e-3) or whose samples are all
    /// truncated.
    #[arg(long)]
    group_filter: bool,
    /// Take rejected turns out of the baselines as well (by default they stay in, with weight 0).
    #[arg(long)]
    drop_rejected_from_baseline: bool,
    /// Seed of the PRS draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn build_recipe(name: &str, p: &RecipeParams) -> anyhow::Result<Recipe> {
    let mut recipe = Recipe::from_name(name)?;
    let only = |flag: &str, recipe: &str| format!("{flag} applies only to --recipe {recipe}");
    match &mut recipe {
        Recipe::Weighted(w) => {
            if let Some(v) = p.coverage_weight {
                w.coverage_weight = v;
            }
        }
        _ if p.coverage_weight.is_some() => bail!(only("--coverage-weight", "weighted")),
        _ => {}
    }
    match &mut recipe {
        Recipe::Hierarchical(h) => {
            if let Some(a) = p.alpha {
                h.alpha = a;
            }
            if let Some(b) = &p.boundary {
                h.boundary.clone_from(b);
            }
        }
        _ if p.alpha.is_some() => bail!(only("--alpha", "hierarchical")),
        _ if p.boundary.is_some() => bail!(only("--boundary", "hierarchical")),
        _ => {}
    }
    if let Some(penalty) = p.shape_specialized_penalty {
        recipe.set_shape_specialized_penalty(penalty);
    }
    if let Some(name) = &p.speedup {
        let basis = SpeedupBasis::from_name(name)
            .with_context(|| format!("unknown speedup basis {name}"))?;
        recipe.set_speedup_basis(basis);
    }
    recipe.validate()?;
    Ok(recipe)
}

fn read_result(path: &Path) -> anyhow::Result<EvalResult> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read judge result {}", path.display()))?;
    let lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    serde_json::from_str(&text).with_context(|| {
        let hint = if lines > 1 {
            format!(" (it has {lines} non-empty lines; pass one document per call)")
        } else {
            String::new()
        };
        format!("{} is not a crucible.result document{hint}", path.display())
    })
}

pub fn run_reward(args: RewardArgs) -> anyhow::Result<ExitCode> {
    let recipe = build_recipe(&args.recipe, &args.params)?;
    if args.response.is_some() && !matches!(recipe, Recipe::Hierarchical(_)) {
        bail!("--response applies only to --recipe hierarchical");
    }
    let result = read_result(&args.result)?;
    let outcome = match recipe.outcome(&result) {
        Ok(o) => o,
        Err(Error::InfraError) => {
            if args.json {
                let v = serde_json::json!({
                    "recipe": recipe.name(),
                    "reward": null,
                    "verdict": result.verdict.as_str(),
                    "dropped": "the judge failed (infra_error); drop this sample",
                });
                println!("{v}");
            }
            eprintln!(
                "{}: verdict infra_error: the judge failed, so there is no reward; drop this sample",
                args.result.display()
            );
            return Ok(ExitCode::from(EXIT_INFRA));
        }
        Err(e) => return Err(e.into()),
    };
    let reward = recipe.score(&outcome);
    let mut json = serde_json::json!({
        "recipe": recipe.name(),
        "reward": reward,
        "verdict": result.verdict.as_str(),
        "speedup_basis": recipe.speedup_basis().name(),
        "speedup": outcome.speedup,
    });
    let mut text = format!("{reward}");
    if let Recipe::Hierarchical(h) = &recipe {
        let seg = h.segments(&outcome);
        json["plan"] = seg.plan.into();
        json["code"] = seg.code.into();
        json["alpha"] = h.alpha.into();
        text = format!(
            "{reward} (plan {}, code {}, alpha {})",
            seg.plan, seg.code, h.alpha
        );
        if let Some(path) = &args.response {
            let response = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read response {}", path.display()))?;
            json["code_start_byte"] = code_start(h, &response).into();
        }
    }
    if args.json {
        println!("{json}");
    } else {
        println!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the code segment starts; the whole response is code when there is no boundary.
fn code_start(h: &Hierarchical, response: &str) -> usize {
    h.split(response).unwrap_or(0)
}

pub fn run_advantages(args: AdvantagesArgs) -> anyhow::Result<ExitCode> {
    // Refuse a bad output path before doing any work.
    io::Format::from_path(&args.out)?;
    let mut estimator = Estimator::from_name(&args.estimator)
        .with_context(|| format!("unknown estimator {}", args.estimator))?;
    if args.no_std {
        match &mut estimator {
            Estimator::Grpo { normalize_std } => *normalize_std = false,
            _ => bail!("--no-std applies only to --estimator grpo"),
        }
    }
    let recipe = match &args.recipe {
        Some(name) => Some(build_recipe(name, &args.params)?),
        None if args.params.coverage_weight.is_some()
            || args.params.alpha.is_some()
            || args.params.boundary.is_some()
            || args.params.shape_specialized_penalty.is_some()
            || args.params.speedup.is_some() =>
        {
            bail!("recipe parameters need --recipe")
        }
        None => None,
    };
    let mut cfg = Config::new(estimator);
    cfg.gamma = args.gamma.unwrap_or(cfg.gamma);
    cfg.rejected_in_baseline = !args.drop_rejected_from_baseline;
    cfg.seed = args.seed;
    cfg.group_filter = args.group_filter.then(GroupFilter::default);
    cfg.mrs = args.mrs.then(Mrs::default);
    cfg.prs = args.prs.then(|| Prs {
        mode: if args.prs_mode == "trajectory" {
            PrsMode::PerTrajectory
        } else {
            PrsMode::PerTurn
        },
        ..Prs::default()
    });

    let loaded = io::read(&args.input)?;
    if !loaded.ignored_columns.is_empty() {
        eprintln!(
            "warning: {}: ignoring columns not in the trajectory schema (not written to {}): {}",
            args.input.display(),
            args.out.display(),
            loaded.ignored_columns.join(", ")
        );
    }
    let mut records = loaded.records;
    let summary = record::process(&mut records, recipe.as_ref(), &cfg)
        .with_context(|| format!("{}", args.input.display()))?;
    io::write(&args.out, &records)?;
    println!("{summary}; wrote {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    enum Cli {
        Reward(RewardArgs),
        Advantages(AdvantagesArgs),
    }

    /// A scratch directory removed on drop (no tempfile dependency in this crate).
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("crucible-rl-cmd-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("scratch dir");
            Scratch(dir)
        }
        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn result_json(verdict: &str, speedup: Option<f64>) -> String {
        serde_json::json!({
            "schema": "crucible.result/1", "verdict": verdict, "correct": verdict == "correct",
            "speedup": speedup, "timing": null, "coverage": 0.8, "findings": [], "stages": [],
            "seeds": {"base": 0, "init": 0, "trials": []},
            "tolerance": {"profile": "kb-v0", "atol": 0.01, "rtol": 0.01},
            "size_profile": "full", "trials": [], "launches": [],
            "task": {"name": "t", "path": "t", "sha256": "0"},
            "candidate": {"name": "c", "path": "c", "sha256": "0"},
            "env": {"device": "cpu", "device_name": null, "torch": null, "triton": null,
                    "cuda": null, "driver": null, "python": null, "crucible": "0",
                    "triton_interpret": true},
            "wall_s": 1.0
        })
        .to_string()
    }

    fn no_params() -> RecipeParams {
        RecipeParams {
            speedup: None,
            coverage_weight: None,
            alpha: None,
            boundary: None,
            shape_specialized_penalty: None,
        }
    }

    fn reward(args: &[&str]) -> anyhow::Result<ExitCode> {
        match Cli::try_parse_from([&["x", "reward"], args].concat())? {
            Cli::Reward(a) => run_reward(a),
            Cli::Advantages(_) => unreachable!(),
        }
    }

    fn advantages(args: &[&str]) -> anyhow::Result<ExitCode> {
        match Cli::try_parse_from([&["x", "advantages"], args].concat())? {
            Cli::Advantages(a) => run_advantages(a),
            Cli::Reward(_) => unreachable!(),
        }
    }

    #[test]
    fn reward_command_scores_and_refuses_infra_errors() {
        let dir = Scratch::new("reward");
        let ok = dir.path("ok.json");
        std::fs::write(&ok, result_json("correct", Some(2.0))).unwrap();
        let ok = ok.to_str().unwrap();
        assert_eq!(
            reward(&["--recipe", "drkernel", ok]).unwrap(),
            ExitCode::SUCCESS
        );
        assert_eq!(
            reward(&["--recipe", "hierarchical", "--alpha", "0.2", "--json", ok]).unwrap(),
            ExitCode::SUCCESS
        );
        let infra = dir.path("infra.json");
        std::fs::write(&infra, result_json("infra_error", None)).unwrap();
        assert_eq!(
            reward(&["--recipe", "tiered", infra.to_str().unwrap()]).unwrap(),
            ExitCode::from(EXIT_INFRA)
        );
        // The matched speedup is scored unless `--speedup fp32` asks for the plain one.
        let matched = dir.path("matched.json");
        let mut doc: serde_json::Value =
            serde_json::from_str(&result_json("correct", Some(5.0))).unwrap();
        doc["speedup_matched"] = 0.5.into();
        doc["speedup_matched_class"] = "fp16".into();
        std::fs::write(&matched, doc.to_string()).unwrap();
        let matched = matched.to_str().unwrap();
        assert_eq!(
            reward(&["--recipe", "tiered", matched]).unwrap(),
            ExitCode::SUCCESS
        );
        let fp32 = build_recipe(
            "tiered",
            &RecipeParams {
                speedup: Some("fp32".into()),
                ..no_params()
            },
        )
        .unwrap();
        let parsed = read_result(Path::new(matched)).unwrap();
        assert_eq!(fp32.reward(&parsed).unwrap(), 1.0);
        let default = build_recipe("tiered", &no_params()).unwrap();
        assert_eq!(default.reward(&parsed).unwrap(), -0.1);
        assert!(reward(&["--recipe", "tiered", "--speedup", "fp16", matched]).is_err());
        let e = reward(&["--recipe", "tiered", "--alpha", "0.2", ok]).unwrap_err();
        assert!(e.to_string().contains("--alpha applies only"), "{e}");
        let e = reward(&["--recipe", "nope", ok]).unwrap_err();
        assert!(e.to_string().contains("unknown reward recipe"), "{e}");
        let bad = dir.path("bad.json");
        std::fs::write(&bad, "{}\n{}\n").unwrap();
        let e = format!(
            "{:#}",
            reward(&["--recipe", "tiered", bad.to_str().unwrap()]).unwrap_err()
        );
        assert!(
            e.contains("bad.json") && e.contains("2 non-empty lines"),
            "{e}"
        );
    }

    #[test]
    fn the_shape_specialized_penalty_applies_to_any_recipe_and_needs_one() {
        let params = |penalty| RecipeParams {
            shape_specialized_penalty: penalty,
            ..no_params()
        };
        for name in Recipe::NAMES {
            let recipe = build_recipe(name, &params(Some(0.25))).unwrap();
            assert_eq!(recipe.shape_specialized_penalty(), 0.25, "{name}");
            let default = build_recipe(name, &params(None)).unwrap();
            assert_eq!(default.shape_specialized_penalty(), 0.0, "{name}");
        }
        assert!(build_recipe("tiered", &params(Some(-1.0))).is_err());
        let e = advantages(&[
            "--in",
            "t.jsonl",
            "--out",
            "b.jsonl",
            "--estimator",
            "grpo",
            "--shape-specialized-penalty",
            "0.5",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("need --recipe"), "{e}");
    }

    #[test]
    fn advantages_command_writes_the_batch() {
        let dir = Scratch::new("adv");
        let input = dir.path("traj.jsonl");
        let mut lines = String::new();
        for (sample, verdict, speedup) in [(0, "correct", Some(2.0)), (1, "incorrect", None)] {
            let rec = serde_json::json!({
                "prompt_id": "p", "sample": sample, "turn": 0,
                "judge_result": result_json(verdict, speedup),
            });
            lines += &format!("{rec}\n");
        }
        std::fs::write(&input, lines).unwrap();
        let out = dir.path("batch.parquet");
        let (i, o) = (input.to_str().unwrap(), out.to_str().unwrap());
        let code = advantages(&[
            "--in",
            i,
            "--out",
            o,
            "--estimator",
            "trloo",
            "--recipe",
            "tiered",
            "--prs",
        ])
        .unwrap();
        assert_eq!(code, ExitCode::SUCCESS);
        let recs = io::read(&out).unwrap().records;
        // tiered: correct at 2x → 0.8, incorrect → −0.3; TRLOO: ±1.1.
        assert_eq!(recs[0].reward, Some(0.8));
        assert!((recs[0].advantage.unwrap() - 1.1).abs() < 1e-12);
        assert!((recs[1].advantage.unwrap() + 1.1).abs() < 1e-12);

        // Without a recipe the reward column must be there; the error names the file.
        let e = advantages(&["--in", i, "--out", o, "--estimator", "grpo"]).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.contains("traj.jsonl") && msg.contains("reward is null"),
            "{msg}"
        );
        let e = advantages(&["--in", i, "--out", "x.csv", "--estimator", "grpo"]).unwrap_err();
        assert!(e.to_string().contains("x.csv"), "{e}");
        let e =
            advantages(&["--in", i, "--out", o, "--estimator", "rloo", "--no-std"]).unwrap_err();
        assert!(e.to_string().contains("--no-std"), "{e}");
        assert!(
            advantages(&[
                "--in",
                i,
                "--out",
                o,
                "--estimator",
                "trloo",
                "--prs-mode",
                "turn"
            ])
            .is_err()
        );
    }
}
