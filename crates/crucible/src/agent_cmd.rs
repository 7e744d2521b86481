//! `crucible bench`, `crucible rollout` and `crucible distill`: a model against a suite, turn
//! after turn, judged in-process or on a running `crucible serve` (`--service`). All three run
//! the same episodes into a run directory (`--out`, resumable) and differ in what they write
//! from them: the Fast@p report, RL trajectories, or an SFT set.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use crucible_agent::client::{ClientConfig, Sampling};
use crucible_agent::engine::{self, InProcessJudge, Judge, Progress, RunConfig, RunSpec};
use crucible_agent::episode::History;
use crucible_agent::store::Episodes;
use crucible_agent::{distill, metrics, report, rollout, suite};
use crucible_judge::{Device, EvalConfig, Runtime, ToleranceProfile};
use crucible_rl::reward::SpeedupBasis;
use crucible_rl::{Estimator, Recipe};

use crate::service_judge::ServiceJudge;

#[derive(clap::Args)]
pub struct RunArgs {
    /// `builtin`, `kernelbench:levelN` (with --kernelbench), or a directory of task files.
    #[arg(long)]
    suite: String,
    /// A KernelBench checkout (holding `levelN/` or `KernelBench/levelN/`).
    #[arg(long, env = "CRUCIBLE_KERNELBENCH")]
    kernelbench: Option<PathBuf>,
    /// Only the first N tasks of the suite.
    #[arg(long)]
    limit: Option<usize>,
    /// The OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1.
    #[arg(long)]
    model: String,
    /// The served model's name (default: the first the server lists).
    #[arg(long)]
    model_name: Option<String>,
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The run directory: records, candidates and outputs; rerun with it to resume.
    #[arg(long)]
    out: PathBuf,
    /// Turns per episode (default 5; 10 iterations with --history best-window).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    turns: Option<u32>,
    /// Episodes per task.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    samples: u32,
    /// Earlier turns each prompt shows: all, last-k, or best-window (the --window consecutive
    /// turns with the highest summed reward: sequential test-time scaling).
    #[arg(long, default_value = "all", value_parser = ["all", "last-k", "best-window"])]
    history: String,
    /// k of last-k and best-window.
    #[arg(long, default_value_t = History::BEST_WINDOW)]
    window: u32,
    #[arg(long, default_value_t = 0.7)]
    temperature: f64,
    #[arg(long, default_value_t = 0.95)]
    top_p: f64,
    #[arg(long, default_value_t = 4096)]
    max_tokens: u32,
    /// Do not ask the server for token log-probs.
    #[arg(long)]
    no_logprobs: bool,
    /// Token budget of one feedback note.
    #[arg(long, default_value_t = 512)]
    feedback_tokens: usize,
    /// Reward recipe scoring each turn (best-window ranks by it).
    #[arg(long, default_value = "drkernel", value_parser = Recipe::NAMES)]
    recipe: String,
    /// Model requests in flight at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Retries of a failed request (connection, timeout, 429, 5xx), with doubling backoff.
    #[arg(long, default_value_t = 4)]
    retries: u32,
    /// Deadline of one model request, in seconds.
    #[arg(long, default_value_t = 600.0)]
    request_timeout: f64,
    /// Evaluations at once (default 1; with --service, --concurrency: the service's workers
    /// set how many run).
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    /// `cpu` (correctness only) or `cuda:N`; default: cuda:0 if a GPU exists.
    #[arg(long, conflicts_with = "service")]
    device: Option<String>,
    /// Judge on a running `crucible serve` at this URL (e.g. http://127.0.0.1:8000) instead of
    /// in this process: its warm workers and caches, on its devices.
    #[arg(long, env = "CRUCIBLE_SERVICE")]
    service: Option<String>,
    /// The service's bearer token.
    #[arg(
        long,
        env = "CRUCIBLE_TOKEN",
        hide_env_values = true,
        requires = "service"
    )]
    token: Option<String>,
    /// With --service: seconds after which the service ends a task as `timeout` (not judged,
    /// scored by no recipe).
    #[arg(long, default_value_t = 3600.0, requires = "service")]
    service_deadline: f64,
    /// With --service: seconds the service may not answer at all before a turn is left
    /// unjudged (an unscored `infra_error`).
    #[arg(long, default_value_t = 120.0, requires = "service")]
    service_unreachable: f64,
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    trials: u32,
    #[arg(long, default_value = "kb-v0", value_parser = ["kb-v0", "strict"])]
    tolerance: String,
    /// Task size profile (`small`, `full`); default: `small` on the CPU when the task has one.
    #[arg(long)]
    profile: Option<String>,
    /// Static verifier preset (`strict`, `kernelbench`, `lenient`) or `off`.
    #[arg(long, default_value = "strict")]
    verify_policy: String,
    /// Correctness only: no timing on a GPU.
    #[arg(long)]
    no_timing: bool,
    /// Do not start the next evaluation's processes ahead of time.
    #[arg(long, conflicts_with = "service")]
    no_prewarm: bool,
}

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args)]
pub struct RolloutArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Trajectory file (`.parquet` or `.jsonl`); default OUT/trajectories.parquet.
    #[arg(long)]
    trajectories: Option<PathBuf>,
    #[arg(long, default_value = "trloo", value_parser = Estimator::NAMES)]
    estimator: String,
    /// Discount (default: the estimator's).
    #[arg(long)]
    gamma: Option<f64>,
}

#[derive(clap::Args)]
pub struct DistillArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Least speedup of a kept final kernel; 0 keeps untimed (CPU) results too.
    #[arg(long, default_value_t = 1.0)]
    min_speedup: f64,
    #[arg(long, default_value = "matched", value_parser = SpeedupBasis::NAMES)]
    speedup_basis: String,
    /// Most examples per task.
    #[arg(long, default_value_t = 4)]
    per_task: usize,
}

fn judge(args: &RunArgs) -> anyhow::Result<Arc<dyn Judge>> {
    if let Some(service) = &args.service {
        let options = crucible_queue::JudgeOptions {
            trials: Some(args.trials),
            size_profile: args.profile.clone(),
            timing: Some(!args.no_timing),
            verify_policy: Some(args.verify_policy.clone()),
            tolerance: Some(args.tolerance.clone()),
            ..Default::default()
        };
        let judge = ServiceJudge::connect(
            service,
            args.token.clone(),
            options,
            args.service_deadline,
            args.service_unreachable,
        )?;
        return Ok(Arc::new(judge));
    }
    let device = match &args.device {
        Some(name) => name.parse::<Device>().context("--device")?,
        None => Device::detect(),
    };
    let mut cfg = EvalConfig::new(device);
    cfg.trials = args.trials;
    cfg.tolerance = ToleranceProfile::parse(&args.tolerance)
        .with_context(|| format!("unknown tolerance profile `{}`", args.tolerance))?;
    cfg.size_profile = args.profile.clone();
    if args.no_timing {
        cfg.timing = None;
    }
    cfg.verify_policy = match args.verify_policy.as_str() {
        "off" => None,
        name => Some(crucible_judge::VerifyPolicy::preset(name)?),
    };
    Ok(Arc::new(InProcessJudge::new(
        Runtime::discover()?,
        cfg,
        !args.no_prewarm,
    )))
}

fn spec(args: &RunArgs) -> anyhow::Result<RunSpec> {
    let history = History::parse(&args.history, args.window)
        .with_context(|| format!("unknown --history `{}`", args.history))?;
    let turns = args.turns.unwrap_or(match history {
        History::BestWindow(_) => History::BEST_WINDOW_ITERATIONS,
        _ => 5,
    });
    if !(args.request_timeout.is_finite() && args.request_timeout > 0.0) {
        bail!("--request-timeout must be a positive number of seconds");
    }
    let mut tasks = suite::resolve(&args.suite, args.kernelbench.as_deref(), &args.out)?;
    if let Some(n) = args.limit {
        tasks.truncate(n);
    }
    let mut client = ClientConfig::new(args.model.clone());
    client.model = args.model_name.clone();
    client.api_key = args.api_key.clone();
    client.concurrency = args.concurrency.max(1);
    client.retries = args.retries;
    client.timeout = Duration::from_secs_f64(args.request_timeout);
    Ok(RunSpec {
        client,
        run: RunConfig {
            turns,
            samples: args.samples,
            history,
            sampling: Sampling {
                temperature: args.temperature,
                top_p: args.top_p,
                max_tokens: args.max_tokens,
                logprobs: !args.no_logprobs,
            },
            feedback_tokens: args.feedback_tokens,
            recipe: Recipe::from_name(&args.recipe)?,
            episodes: args.concurrency.max(1),
            judge_jobs: args
                .jobs
                .unwrap_or(if args.service.is_some() {
                    args.concurrency
                } else {
                    1
                })
                .max(1),
            candidates_dir: args.out.join("candidates"),
        },
        out_dir: args.out.clone(),
        suite: args.suite.clone(),
        tasks,
    })
}

/// Runs (or resumes) the episodes with a progress bar.
fn run_episodes(args: &RunArgs) -> anyhow::Result<(Episodes, RunSpec)> {
    let spec = spec(args)?;
    let kept = RunSpec {
        client: spec.client.clone(),
        run: spec.run.clone(),
        out_dir: spec.out_dir.clone(),
        suite: spec.suite.clone(),
        tasks: Vec::new(),
    };
    let judge = judge(args)?;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} turns {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let shown = bar.clone();
    let episodes = engine::execute(spec, judge, move |event| match event {
        Progress::Start { done, total } => {
            shown.set_length(total);
            shown.set_position(done);
        }
        Progress::Turn(t) => {
            let what = match (&t.result, &t.error) {
                (_, Some(_)) => "model error",
                (Some(r), None) => r.verdict.as_str(),
                (None, None) => "no code",
            };
            shown.set_message(format!("{} s{} t{}: {what}", t.task, t.sample, t.turn));
            shown.inc(1);
        }
    })?;
    bar.finish_and_clear();
    Ok((episodes, kept))
}

pub fn run_bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let (episodes, spec) = run_episodes(&args.run)?;
    let summary = metrics::report(&episodes);
    let title = format!("crucible bench: {} on {}", args.run.model, spec.suite);
    let written = report::write_all(&spec.out_dir, &title, &episodes, &summary)?;
    print_metrics(&summary);
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_metrics(r: &metrics::Report) {
    let rows = std::iter::once(("all", &r.overall))
        .chain(r.per_level.iter().map(|(l, m)| (l.as_str(), m)));
    print!("{:<12} {:>7} {:>8}", "level", "samples", "correct");
    for p in metrics::P {
        print!(" {:>8}", format!("fast_{p}"));
    }
    println!(
        " {:>9} {:>9} {:>6} {:>6}",
        "geo fp32", "geo match", "hack", "flag"
    );
    for (level, m) in rows {
        print!(
            "{level:<12} {:>7} {:>7.1}%",
            m.samples,
            100.0 * m.correct_rate
        );
        for v in &m.fast_p.all {
            print!(" {:>7.1}%", 100.0 * v);
        }
        let geo = |g: Option<f64>| g.map_or("-".to_string(), |v| format!("{v:.3}x"));
        println!(
            " {:>9} {:>9} {:>5.1}% {:>5.1}%",
            geo(m.geomean_speedup_fp32),
            geo(m.geomean_speedup_matched),
            100.0 * m.hack_rate,
            100.0 * m.flag_rate
        );
    }
}

pub fn run_rollout(args: RolloutArgs) -> anyhow::Result<ExitCode> {
    let (episodes, spec) = run_episodes(&args.run)?;
    let estimator = Estimator::from_name(&args.estimator)
        .with_context(|| format!("unknown estimator `{}`", args.estimator))?;
    let mut cfg = crucible_rl::Config::new(estimator);
    if let Some(g) = args.gamma {
        cfg.gamma = g;
    }
    cfg.validate()?;
    let out = args
        .trajectories
        .unwrap_or_else(|| spec.out_dir.join("trajectories.parquet"));
    let (rows, summary) = rollout::write(&episodes, &spec.run.recipe, &cfg, &out)?;
    println!(
        "wrote {} turns of {} episodes to {} (kept {}, masked {}, rejected {})",
        rows.len(),
        episodes.len(),
        out.display(),
        summary.kept,
        summary.masked,
        summary.rejected
    );
    Ok(ExitCode::SUCCESS)
}

pub fn run_distill(args: DistillArgs) -> anyhow::Result<ExitCode> {
    let basis = SpeedupBasis::from_name(&args.speedup_basis)
        .with_context(|| format!("unknown --speedup-basis `{}`", args.speedup_basis))?;
    if !args.min_speedup.is_finite() {
        bail!("--min-speedup must be a number");
    }
    let (episodes, spec) = run_episodes(&args.run)?;
    let filter = distill::Filter {
        min_speedup: args.min_speedup,
        basis,
        per_task: args.per_task,
    };
    let (examples, tally) = distill::select(&episodes, &filter);
    let jsonl = spec.out_dir.join("sft.jsonl");
    let parquet = spec.out_dir.join("sft.parquet");
    distill::write_jsonl(&jsonl, &examples)?;
    distill::write_parquet(&parquet, &examples)?;
    println!("{}", serde_json::to_string(&tally)?);
    println!("wrote {} and {}", jsonl.display(), parquet.display());
    Ok(ExitCode::SUCCESS)
}
