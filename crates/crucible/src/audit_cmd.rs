//! `crucible audit SUITE`: runs null candidates (zeros, ones, an input copy, a broadcast mean,
//! and the reference in disguise) against every task of a suite and lists the degenerate tasks,
//! the ones a null passes. Rows are printed as tasks finish, so a long GPU run shows progress and
//! a killed run still leaves its rows; `--out` gets the whole report as one JSON document.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use crucible_judge::audit::{AuditConfig, AuditReport, NULLS, TaskAudit, audit, discover_tasks};
use crucible_judge::{Device, Runtime, ToleranceProfile};

#[derive(clap::Args)]
pub struct AuditArgs {
    /// A directory of KernelBench-format task files, or one task file.
    suite: PathBuf,
    /// `cpu` or `cuda:N`; default: cuda:0 if a GPU exists.
    #[arg(long)]
    device: Option<String>,
    /// Correctness trials per task; a null passes only if it passes all of them.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    trials: u32,
    /// Base seed (default: fresh; the report records it).
    #[arg(long)]
    seed: Option<u64>,
    /// Tolerance profile: `kb-v0` (atol=rtol=1e-2) or `strict` (1e-4 fp32, 1e-2 fp16/bf16).
    #[arg(long, default_value = "kb-v0", value_parser = ["kb-v0", "strict"])]
    tolerance: String,
    /// Task size profile (`small`, `full`); default: `small` on the CPU when the task has one.
    #[arg(long)]
    profile: Option<String>,
    /// Skip the reference in disguise (a full judge evaluation per task).
    #[arg(long)]
    no_disguise: bool,
    /// Audit at most this many tasks, in suite order.
    #[arg(long)]
    limit: Option<usize>,
    /// Leave out the first N tasks in suite order (to resume a run split over several calls).
    #[arg(long, default_value_t = 0)]
    skip: usize,
    /// Start no new task after this many seconds; the report says how many were done.
    #[arg(long)]
    time_budget: Option<f64>,
    /// Deadline for one task's nulls, in seconds; a task past it is an error.
    #[arg(long, default_value_t = 300.0)]
    task_timeout: f64,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Exit 1 when a task is degenerate or the judge accepts a reference in disguise (for CI).
    #[arg(long)]
    fail_on_degenerate: bool,
}

fn seconds(value: f64, flag: &str) -> anyhow::Result<Duration> {
    if !(value.is_finite() && value >= 0.0) {
        bail!("{flag} must be a non-negative number of seconds");
    }
    Ok(Duration::from_secs_f64(value))
}

fn config(args: &AuditArgs) -> anyhow::Result<AuditConfig> {
    let device = match &args.device {
        Some(name) => name.parse::<Device>().context("--device")?,
        None => Device::detect(),
    };
    let mut cfg = AuditConfig::new(device);
    cfg.trials = args.trials;
    cfg.seed = args.seed;
    cfg.tolerance = ToleranceProfile::parse(&args.tolerance)
        .with_context(|| format!("unknown tolerance profile `{}`", args.tolerance))?;
    cfg.size_profile = args.profile.clone();
    cfg.disguise = !args.no_disguise;
    cfg.limit = args.limit;
    cfg.time_budget = args
        .time_budget
        .map(|s| seconds(s, "--time-budget"))
        .transpose()?;
    cfg.task_timeout = seconds(args.task_timeout, "--task-timeout")?;
    Ok(cfg)
}

fn header() -> String {
    let nulls: Vec<String> = NULLS.iter().map(|n| format!("{n:>14}")).collect();
    format!(
        "{:<44} {} {:>11} {:>7}",
        "task",
        nulls.join(" "),
        "disguise",
        "wall s"
    )
}

fn row(t: &TaskAudit) -> String {
    let mut cells = Vec::new();
    for name in NULLS {
        let cell = match (&t.error, t.nulls.iter().find(|n| n.name == name)) {
            (Some(_), _) | (None, None) => "-".to_string(),
            (None, Some(n)) if n.passed => "PASS".to_string(),
            (None, Some(n)) if n.skipped.is_some() => "skip".to_string(),
            // The mismatched fraction tells a near miss (0.1%) from a clear failure.
            (None, Some(n)) => match n.mismatched_fraction {
                Some(f) if f < 0.01 => format!("fail {:.3}%", f * 100.0),
                Some(f) => format!("fail {:.1}%", f * 100.0),
                None => "fail".into(),
            },
        };
        cells.push(format!("{cell:>14}"));
    }
    // Which layer refused the disguise: the static verifier, the runtime checks (judged
    // without the verifier), both, or neither.
    let disguise = match &t.disguise {
        None => "-",
        Some(d) => match (
            d.judge.stage.as_deref() == Some("verify"),
            d.runtime_only.caught,
        ) {
            _ if !d.judge.caught => "MISSED",
            (true, true) => "static+run",
            (true, false) => "static only",
            (false, true) => "runtime",
            (false, false) => "MISSED",
        },
    };
    // KernelBench names run to 90 characters; the numeric prefix keeps clipped ones distinct.
    let name: String = if t.task.chars().count() > 44 {
        t.task.chars().take(43).chain(['~']).collect()
    } else {
        t.task.clone()
    };
    let mut line = format!(
        "{name:<44} {} {disguise:>11} {:>7.2}",
        cells.join(" "),
        t.wall_s
    );
    if let Some(err) = &t.error {
        let first = err.lines().next().unwrap_or("");
        line.push_str(&format!("\n    error: {first:.200}"));
    }
    line
}

fn print_summary(report: &AuditReport) {
    let list = |names: &[String]| {
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    println!(
        "{} of {} tasks audited on {} (tolerance {}, {} trials, seed {}) in {:.1} s",
        report.tasks_done,
        report.tasks_total,
        report.device,
        report.tolerance,
        report.trials,
        report.seeds.base,
        report.wall_s
    );
    if let Some(why) = &report.stopped {
        println!("stopped early: {why}");
    }
    println!("degenerate tasks: {}", list(&report.degenerate));
    if report.disguise {
        println!("disguise missed: {}", list(&report.disguise_missed));
    }
    println!("errors: {}", list(&report.errors));
}

pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let cfg = config(&args)?;
    let mut tasks = discover_tasks(&args.suite)?;
    if args.skip > 0 {
        eprintln!(
            "leaving out the first {} of {} tasks (--skip)",
            args.skip.min(tasks.len()),
            tasks.len()
        );
        tasks.drain(..args.skip.min(tasks.len()));
    }
    let runtime = Runtime::discover()?;
    // With --json the table goes to stderr, so stdout stays one JSON document.
    let table = |line: String| {
        if args.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
            let _ = std::io::stdout().flush();
        }
    };
    table(header());
    let report = audit(&runtime, &args.suite, &tasks, &cfg, |t| table(row(t)))?;
    if let Some(path) = &args.out {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    if let Some(failure) = &report.failure {
        bail!(
            "the audit stopped after {} tasks: {failure}",
            report.tasks_done
        );
    }
    let bad = !report.degenerate.is_empty() || !report.disguise_missed.is_empty();
    Ok(if args.fail_on_degenerate && bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
