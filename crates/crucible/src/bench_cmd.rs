//! `crucible bench-overhead`: what one evaluation costs beyond compiling and running kernels.
//!
//! Runs the same evaluation several times and splits its wall time by stage. Overhead is wall
//! time minus the candidate's compile time (first trial minus a warm trial) minus GPU work (the
//! timed iterations of both sides). The baseline, measured in the same run, is a bare interpreter
//! importing torch and triton: the floor for any design that starts a fresh process.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use crucible_judge::{EvalConfig, Runtime};
use crucible_result::{EvalResult, Stats};

use crate::throughput_cmd::{first_trial_compile, median};

#[derive(clap::Args)]
pub struct BenchArgs {
    #[arg(long)]
    task: PathBuf,
    #[arg(long)]
    candidate: PathBuf,
    /// `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: crucible_judge::Device,
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Timed iterations per side on a GPU.
    #[arg(long, default_value_t = 100)]
    iters: u32,
    #[command(flatten)]
    sandbox: crate::sandbox_cmd::SandboxArgs,
}

fn stage_s(result: &EvalResult, name: &str) -> f64 {
    result
        .stages
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.duration_s)
        .sum()
}

/// The columns of the table, in [`overhead_row`]'s order.
const COLUMNS: [&str; 9] = [
    "wall",
    "start (spawn + import torch/triton, both processes)",
    "reference (build model)",
    "load (import candidate, build ModelNew)",
    "trials (excluding compile)",
    "compile (first trial - warm trial)",
    "timing + profile (GPU)",
    "teardown and scratch",
    "overhead = wall - compile - GPU work",
];

/// The column of the overhead itself.
const OVERHEAD: usize = 8;

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::discover()?;
    let task_src = std::fs::read(&args.task)
        .with_context(|| format!("cannot read task {}", args.task.display()))?;
    let candidate_src = std::fs::read(&args.candidate)
        .with_context(|| format!("cannot read candidate {}", args.candidate.display()))?;
    let mut cfg = EvalConfig::new(args.device);
    if let Some(timing) = cfg.timing.as_mut() {
        timing.iters = args.iters;
    }
    args.sandbox.apply(&mut cfg);

    let baseline = import_baseline(&runtime, args.runs);
    let rows = (0..args.runs)
        .map(|_| {
            let result = crucible_judge::evaluate(
                &runtime,
                &args.task,
                &task_src,
                &args.candidate,
                &candidate_src,
                &cfg,
            );
            overhead_row(&result)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    print_table(&args, &rows, baseline);
    Ok(ExitCode::SUCCESS)
}

/// The median wall of a bare interpreter importing torch and triton, `runs` times: the floor
/// of any design that starts a fresh process.
fn import_baseline(runtime: &Runtime, runs: u32) -> f64 {
    let walls: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            let status = std::process::Command::new(&runtime.python)
                .args(["-c", "import torch, triton"])
                .status();
            status
                .map(|_| start.elapsed().as_secs_f64())
                .unwrap_or(f64::NAN)
        })
        .collect();
    median(&walls)
}

/// One evaluation split into [`COLUMNS`]; an error unless it was correct, since only a correct
/// candidate runs every stage.
fn overhead_row(r: &EvalResult) -> anyhow::Result<[f64; 9]> {
    if !r.correct {
        anyhow::bail!(
            "the benchmark candidate must be correct; got {}: {:?}",
            r.verdict.as_str(),
            r.failure
        );
    }
    let trials: Vec<f64> = r
        .stages
        .iter()
        .filter(|s| s.name.starts_with("trial_"))
        .map(|s| s.duration_s)
        .collect();
    if trials.is_empty() {
        anyhow::bail!("the evaluation ran no trial");
    }
    let compile = first_trial_compile(&trials);
    let gpu_work = r.timing.as_ref().map_or(0.0, |t| {
        let side = |s: &Stats| s.mean_ms * f64::from(s.n + t.warmup) / 1e3;
        side(&t.reference) + side(&t.candidate)
    });
    let staged: f64 = r.stages.iter().map(|s| s.duration_s).sum();
    Ok([
        r.wall_s,
        stage_s(r, "start"),
        stage_s(r, "reference"),
        stage_s(r, "load"),
        trials.iter().sum::<f64>() - compile,
        compile,
        stage_s(r, "timed-inputs")
            + stage_s(r, "timing")
            + stage_s(r, "profile")
            + stage_s(r, "timing-recheck"),
        r.wall_s - staged,
        r.wall_s - compile - gpu_work,
    ])
}

/// Each column's median over the runs, and the overhead against the import baseline.
fn print_table(args: &BenchArgs, rows: &[[f64; 9]], baseline: f64) {
    let column = |i: usize| median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>());
    println!(
        "judge overhead on {} ({} runs, medians; task {}):",
        args.device,
        args.runs,
        args.task.display()
    );
    for (i, name) in COLUMNS.iter().enumerate() {
        println!("  {:<55} {:>9.3} s", name, column(i));
    }
    println!(
        "  {:<55} {:>9.3} s",
        "baseline: bare `python -c 'import torch, triton'`", baseline
    );
    println!("  overhead / baseline: {:.2}x", column(OVERHEAD) / baseline);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_results::result_with_stages;
    use crucible_result::Verdict;

    /// A correct result that started in 0.5 s and ran these trials.
    fn correct_result(trials: &[f64]) -> EvalResult {
        let names: Vec<String> = (0..trials.len()).map(|i| format!("trial_{i}")).collect();
        let stages: Vec<(&str, f64, &str)> = std::iter::once(("start", 0.5, "ok"))
            .chain(
                names
                    .iter()
                    .zip(trials)
                    .map(|(n, s)| (n.as_str(), *s, "ok")),
            )
            .collect();
        result_with_stages(Verdict::Correct, &stages)
    }

    #[test]
    fn compile_is_the_first_trial_beyond_the_median_later_one() {
        let row = overhead_row(&correct_result(&[5.0, 1.0, 1.2, 2.0])).expect("correct");
        // 5.0 - median(1.0, 1.2, 2.0) = 3.8 s of compiling (the mean would say 3.6); 9.2 s of
        // trials less that.
        assert!((row[5] - 3.8).abs() < 1e-9, "{row:?}");
        assert!((row[4] - 5.4).abs() < 1e-9, "{row:?}");
        // Nothing staged beyond start and the trials: 10 - 0.5 - 9.2 s outside the stages.
        assert!((row[7] - 0.3).abs() < 1e-9, "{row:?}");
        assert!((row[OVERHEAD] - 6.2).abs() < 1e-9, "{row:?}");
        let one = overhead_row(&correct_result(&[5.0])).expect("correct");
        assert_eq!(one[5], 0.0, "no warm trial to compare: nothing split off");
        assert!(overhead_row(&correct_result(&[])).is_err());
    }

    #[test]
    fn only_a_correct_evaluation_is_measured() {
        let mut result = correct_result(&[1.0, 1.0]);
        result.correct = false;
        result.verdict = Verdict::Incorrect;
        let error = overhead_row(&result).expect_err("incorrect").to_string();
        assert!(error.contains("must be correct"), "{error}");
    }
}
