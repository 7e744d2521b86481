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

fn median(values: &[f64]) -> f64 {
    Stats::from_samples(values).map_or(f64::NAN, |s| s.median_ms)
}

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

    let baseline: Vec<f64> = (0..args.runs)
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

    let mut rows: Vec<[f64; 9]> = Vec::new();
    for _ in 0..args.runs {
        let r = crucible_judge::evaluate(
            &runtime,
            &args.task,
            &task_src,
            &args.candidate,
            &candidate_src,
            &cfg,
        );
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
        let warm_trial = median(&trials[1..]);
        let compile = (trials[0] - warm_trial).max(0.0);
        let gpu_work = r.timing.as_ref().map_or(0.0, |t| {
            let side = |s: &Stats| s.mean_ms * f64::from(s.n + t.warmup) / 1e3;
            side(&t.reference) + side(&t.candidate)
        });
        let staged: f64 = r.stages.iter().map(|s| s.duration_s).sum();
        rows.push([
            r.wall_s,
            stage_s(&r, "start"),
            stage_s(&r, "reference"),
            stage_s(&r, "load"),
            trials.iter().sum::<f64>() - compile,
            compile,
            stage_s(&r, "timing") + stage_s(&r, "profile"),
            r.wall_s - staged,
            r.wall_s - compile - gpu_work,
        ]);
    }
    let column = |i: usize| median(&rows.iter().map(|r| r[i]).collect::<Vec<_>>());
    let names = [
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
    println!(
        "judge overhead on {} ({} runs, medians; task {}):",
        args.device,
        args.runs,
        args.task.display()
    );
    for (i, name) in names.iter().enumerate() {
        println!("  {:<55} {:>9.3} s", name, column(i));
    }
    let base = median(&baseline);
    println!(
        "  {:<55} {:>9.3} s",
        "baseline: bare `python -c 'import torch, triton'`", base
    );
    println!("  overhead / baseline: {:.2}x", column(8) / base);
    Ok(ExitCode::SUCCESS)
}
