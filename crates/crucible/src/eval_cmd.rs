//! `crucible eval`: one candidate against one task, or a directory of each paired by file name.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::{Context, bail};
use crucible_judge::{
    Device, DeviceSharing, EvalConfig, Generalize, HarnessZygote, Prestart, Runtime, StageLimits,
    TimingConfig, ToleranceProfile, Transport, Workers,
};
use crucible_result::{EvalResult, Finding, Severity, Verdict};
use crucible_worker::engine::{ReferenceCache, ReferencePolicy};

#[derive(clap::Args)]
pub struct EvalArgs {
    /// A KernelBench-format task file (`Model`, `get_inputs`, `get_init_inputs`).
    #[arg(long, conflicts_with = "task_dir", requires = "candidate")]
    task: Option<PathBuf>,
    /// A candidate solution file defining `ModelNew`.
    #[arg(long, conflicts_with = "candidate_dir")]
    candidate: Option<PathBuf>,
    /// Directory of task files; paired with --candidate-dir by file name.
    #[arg(long, requires = "candidate_dir")]
    task_dir: Option<PathBuf>,
    /// Directory of candidate files named like the tasks they solve.
    #[arg(long)]
    candidate_dir: Option<PathBuf>,
    /// `cpu` (Triton interpreter, correctness only) or `cuda:N`; default: cuda:0 if a GPU exists.
    #[arg(long)]
    device: Option<String>,
    /// Print the result document as JSON (one line per evaluation in batch mode).
    #[arg(long)]
    json: bool,
    /// Also write every result, one JSON document per line, to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Base seed of an earlier evaluation, to replay it exactly.
    #[arg(long)]
    seed: Option<u64>,
    /// Correctness trials, each with fresh inputs.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    trials: u32,
    /// Tolerance profile: `kb-v0` (atol=rtol=1e-2) or `strict` (1e-4 fp32, 1e-2 fp16/bf16).
    #[arg(long, default_value = "kb-v0", value_parser = ["kb-v0", "strict"])]
    tolerance: String,
    /// Task size profile (`small`, `full`); default: `small` on the CPU when the task has one.
    #[arg(long)]
    profile: Option<String>,
    /// One more trial with the task's size constants changed (odd, smaller sizes): a candidate
    /// that fails it is flagged `shape-specialized`. `auto`: for tasks that declare `GENERALIZE`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    generalize: String,
    /// Skip timing and profiling on a GPU (correctness only).
    #[arg(long)]
    no_timing: bool,
    /// Timed iterations per side.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    iters: u32,
    /// Warm-up iterations per side.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Nice value of the timed processes during the timed phases (-20..19; 0 where the judge
    /// runs at 0 leaves them as they are).
    #[arg(long, default_value_t = crucible_judge::TIMED_NICE, allow_hyphen_values = true,
          value_parser = clap::value_parser!(i32).range(-20..=19))]
    timed_nice: i32,
    #[command(flatten)]
    autotune: AutotuneArg,
    /// One deadline in seconds for every candidate stage (default: per stage and device).
    #[arg(long)]
    stage_timeout: Option<f64>,
    /// How tensors travel between referee and candidate: auto, shm, cuda-ipc.
    #[arg(long, default_value = "auto", value_parser = ["auto", "shm", "cuda-ipc"])]
    transport: String,
    /// Static verifier preset run first (`strict`, `kernelbench`, `lenient`), or `off`.
    #[arg(long, default_value = "strict")]
    verify_policy: String,
    /// Static verifier policy file (TOML: `preset = "..."` plus `[severity]` overrides).
    #[arg(long, conflicts_with = "verify_policy")]
    verify_policy_file: Option<PathBuf>,
    /// Draw inputs on the CPU and copy them to the device, as KernelBench does (to measure it).
    #[arg(long, hide = true)]
    inputs_on_host: bool,
    /// Share every trial's inputs and output slots anew, instead of the default standing shares
    /// (a small trial's, written again by the referee and mapped once by the candidate's
    /// process); to compare the two.
    #[arg(long, hide = true)]
    fresh_shares: bool,
    #[command(flatten)]
    sandbox: crate::sandbox_cmd::SandboxArgs,
    /// In batch mode, do not start the next evaluation's processes while one runs.
    #[arg(long)]
    no_prewarm: bool,
    /// Evaluations to run at once in batch mode.
    #[arg(long, short = 'j', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    jobs: u32,
    /// In batch mode, time each task's reference once and serve that timing to its later
    /// candidates, as the service does (measured again after 32 uses or 10 minutes); by
    /// default every candidate's evaluation times the reference itself.
    #[arg(long)]
    reference_cache: bool,
}

/// `--autotune-budget`, on `eval`, `serve`, `worker` and `bench-throughput`.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct AutotuneArg {
    /// Benchmark budget of Triton's autotuner in each candidate process: `fast` (5/25 ms, the
    /// default), `triton` (Triton's own 25/100) or WARMUP/REP in ms (GPU only; part of the
    /// result cache's key).
    #[arg(long, value_parser = crucible_judge::AutotuneBudget::parse)]
    pub autotune_budget: Option<crucible_judge::AutotuneBudget>,
}

impl AutotuneArg {
    pub fn apply(&self, cfg: &mut EvalConfig) {
        if let Some(budget) = self.autotune_budget {
            cfg.autotune = budget;
        }
    }
}

fn config(args: &EvalArgs) -> anyhow::Result<EvalConfig> {
    let device = match &args.device {
        Some(name) => name.parse::<Device>().context("--device")?,
        None => Device::detect(),
    };
    let mut cfg = EvalConfig::new(device);
    cfg.seed = args.seed;
    cfg.trials = args.trials;
    cfg.tolerance = ToleranceProfile::parse(&args.tolerance)
        .with_context(|| format!("unknown tolerance profile `{}`", args.tolerance))?;
    cfg.size_profile = args.profile.clone();
    cfg.generalize = Generalize::parse(&args.generalize)
        .with_context(|| format!("unknown --generalize `{}`", args.generalize))?;
    cfg.timing = (!args.no_timing).then(|| TimingConfig {
        warmup: args.warmup,
        iters: args.iters,
        nice: Some(args.timed_nice),
        ..TimingConfig::default()
    });
    args.autotune.apply(&mut cfg);
    if let Some(secs) = args.stage_timeout {
        if !(secs.is_finite() && secs > 0.0) {
            bail!("--stage-timeout must be a positive number of seconds");
        }
        cfg.limits = StageLimits::uniform(device, Duration::from_secs_f64(secs));
    }
    cfg.transport = match args.transport.as_str() {
        "shm" => Transport::Shm,
        "cuda-ipc" => Transport::CudaIpc,
        _ => Transport::Auto,
    };
    args.sandbox.apply(&mut cfg);
    cfg.inputs_on_host = args.inputs_on_host;
    cfg.standing_shares = !args.fresh_shares;
    cfg.reference_timings = args.reference_cache.then(|| {
        Arc::new(ReferenceCache::new(ReferencePolicy::default(), None))
            as Arc<dyn crucible_judge::ReferenceTimingCache>
    });
    cfg.verify_policy = match (&args.verify_policy_file, args.verify_policy.as_str()) {
        (Some(path), _) => Some(crucible_judge::VerifyPolicy::from_file(path)?),
        (None, "off") => None,
        (None, name) => Some(crucible_judge::VerifyPolicy::preset(name)?),
    };
    Ok(cfg)
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

pub fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let cfg = config(&args)?;
    if args.jobs > 1 && cfg.device.is_gpu() && cfg.timing.is_some() {
        bail!(
            "-j {} would time several candidates at once on one GPU, and each would slow the \
             others; use -j 1, or --no-timing for correctness only",
            args.jobs
        );
    }
    let pairs = match (
        &args.task,
        &args.candidate,
        &args.task_dir,
        &args.candidate_dir,
    ) {
        (Some(task), Some(candidate), None, None) => vec![(task.clone(), candidate.clone())],
        (None, None, Some(tasks), Some(candidates)) => pair_by_name(tasks, candidates)?,
        _ => bail!(
            "give either --task and --candidate, or --task-dir and --candidate-dir (see --help)"
        ),
    };
    let sources = pairs
        .iter()
        .map(|(t, c)| Ok((read(t, "task")?, read(c, "candidate")?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let runtime = Runtime::discover()?;
    let batch = args.task_dir.is_some();
    let out = match &args.out {
        Some(p) => Some(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        ),
        None => None,
    };

    // Each result is written the moment it exists: an interrupted batch keeps what it judged.
    let sink = Mutex::new(out);
    let results = if batch {
        run_batch(&runtime, &cfg, &pairs, &sources, &args, &sink)
    } else {
        let (task, candidate) = &pairs[0];
        let (task_src, candidate_src) = &sources[0];
        let result =
            crucible_judge::evaluate(&runtime, task, task_src, candidate, candidate_src, &cfg);
        append_result(&sink, &result);
        vec![result]
    };
    if batch {
        if !args.json {
            print_table(&results);
        }
    } else if args.json {
        println!("{}", serde_json::to_string_pretty(&results[0])?);
    } else {
        print_summary(&results[0]);
    }
    let infra = results.iter().any(|r| r.verdict == Verdict::InfraError);
    Ok(if infra {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// Pairs `candidates/NAME.py` with `tasks/NAME.py`; a candidate without a task is an error.
fn pair_by_name(tasks: &Path, candidates: &Path) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let list = |dir: &Path| -> anyhow::Result<Vec<PathBuf>> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "py"))
            .collect();
        files.sort();
        Ok(files)
    };
    let mut pairs = Vec::new();
    let mut orphans = Vec::new();
    for candidate in list(candidates)? {
        let Some(name) = candidate.file_name() else {
            continue;
        };
        let task = tasks.join(name);
        if task.is_file() {
            pairs.push((task, candidate));
        } else {
            orphans.push(candidate.display().to_string());
        }
    }
    if !orphans.is_empty() {
        bail!(
            "no task in {} for: {}; candidates are paired with tasks by file name",
            tasks.display(),
            orphans.join(", ")
        );
    }
    if pairs.is_empty() {
        bail!("no candidate .py files in {}", candidates.display());
    }
    Ok(pairs)
}

fn append_result(sink: &Mutex<Option<std::fs::File>>, result: &EvalResult) {
    use std::io::Write;
    let Ok(mut sink) = sink.lock() else { return };
    let Some(file) = sink.as_mut() else { return };
    let written = serde_json::to_writer(&mut *file, result)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(file))
        .and_then(|()| file.flush());
    if let Err(err) = written {
        tracing::error!("cannot write the result of {}: {err}", result.task.name);
    }
}

fn run_batch(
    runtime: &Runtime,
    cfg: &EvalConfig,
    pairs: &[(PathBuf, PathBuf)],
    sources: &[(Vec<u8>, Vec<u8>)],
    args: &EvalArgs,
    sink: &Mutex<Option<std::fs::File>>,
) -> Vec<EvalResult> {
    let prewarm = !args.no_prewarm;
    let bar = indicatif::ProgressBar::new(pairs.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let concurrent = args.jobs > 1 && pairs.len() > 1;
    // Referees and candidate processes are forked from one zygote, as the service's pool forks
    // them: the same processes without their interpreter's imports each time. Started on this thread, which outlives the
    // batch: a process's parent-death signal follows the thread that started it.
    let zygote = if prewarm && pairs.len() > 1 {
        HarnessZygote::start(runtime, cfg.device)
            .inspect_err(|error| tracing::warn!("pairs start fresh: no zygote: {error}"))
            .ok()
    } else {
        None
    };
    let batch = Batch {
        runtime,
        cfg,
        prestart: Prestart {
            warm_profiler: cfg.times(),
            zygote: zygote.as_ref(),
            fork_candidates: true,
            triton_seed: None,
        },
        pairs,
        sources,
        jobs: args.jobs,
        concurrent,
        prewarm,
        json: args.json,
        device_share: RwLock::new(()),
        next: Mutex::new(0),
        results: Mutex::new(vec![None; pairs.len()]),
        bar,
        sink,
    };
    std::thread::scope(|scope| {
        for _ in 0..batch.jobs.min(pairs.len() as u32) {
            scope.spawn(|| batch.work());
        }
    });
    batch.bar.finish_and_clear();
    batch
        .results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .collect()
}

/// One `eval` batch, shared by its `jobs` threads.
struct Batch<'a> {
    runtime: &'a Runtime,
    cfg: &'a EvalConfig,
    prestart: Prestart<'a>,
    pairs: &'a [(PathBuf, PathBuf)],
    sources: &'a [(Vec<u8>, Vec<u8>)],
    jobs: u32,
    concurrent: bool,
    prewarm: bool,
    json: bool,
    /// Evaluations share the device (read); a retry after an out-of-memory failure runs alone
    /// (write), since the judge, not the candidate, put several evaluations on one device.
    device_share: RwLock<()>,
    next: Mutex<usize>,
    results: Mutex<Vec<Option<EvalResult>>>,
    bar: indicatif::ProgressBar,
    sink: &'a Mutex<Option<std::fs::File>>,
}

impl Batch<'_> {
    /// One thread's loop: the next pair until none is left, the next evaluation's processes
    /// starting while this one runs.
    fn work(&self) {
        let mut warm: Option<Workers> = None;
        while let Some((index, more)) = self.take_index() {
            let current = warm.take();
            if self.prewarm && more {
                warm = Workers::spawn_with(self.runtime, self.cfg, &self.prestart)
                    .inspect_err(|e| tracing::warn!("cannot prestart workers: {e}"))
                    .ok();
            }
            let result = self.evaluate(index, current, &mut warm);
            self.report(index, result);
        }
    }

    /// The next pair's index and whether another comes after it; `None` when none is left.
    fn take_index(&self) -> Option<(usize, bool)> {
        let mut next = self.next.lock().ok()?;
        let index = *next;
        *next += 1;
        (index < self.pairs.len()).then_some((index, *next < self.pairs.len()))
    }

    /// Judges pair `index`, again alone when sharing the device may have been the cause of a
    /// failure: with other evaluations, or (one at a time) with this thread's next pair, which
    /// `waiting` holds and the retry lets go.
    fn evaluate(
        &self,
        index: usize,
        prestarted: Option<Workers>,
        waiting: &mut Option<Workers>,
    ) -> EvalResult {
        let (task, candidate) = &self.pairs[index];
        let (task_src, candidate_src) = &self.sources[index];
        let evaluate = |cfg, prestarted| {
            crucible_judge::evaluate_with(
                self.runtime,
                task,
                task_src,
                candidate,
                candidate_src,
                cfg,
                prestarted,
            )
        };
        let sharing = if self.concurrent {
            DeviceSharing::Evaluations
        } else if waiting.is_some() {
            DeviceSharing::WaitingProcesses
        } else {
            DeviceSharing::Nobody
        };
        let shared = self.device_share.read();
        let first_cfg = self.with_sharing(sharing);
        let first = evaluate(&first_cfg, prestarted);
        drop(shared);
        let retry = match sharing {
            DeviceSharing::Evaluations => crucible_judge::shared_device_fault(&first),
            DeviceSharing::WaitingProcesses => crucible_judge::judge_ran_out_of_memory(&first),
            DeviceSharing::Nobody => false,
        };
        if !retry {
            return first;
        }
        *waiting = None;
        // The other threads' next pairs still wait on the device.
        let beside = if self.prewarm && self.jobs > 1 {
            DeviceSharing::WaitingProcesses
        } else {
            DeviceSharing::Nobody
        };
        let alone_cfg = self.with_sharing(beside);
        let alone = self.device_share.write();
        let mut result = evaluate(&alone_cfg, None);
        drop(alone);
        note_retry(&mut result, &first, sharing);
        result
    }

    fn with_sharing(&self, device_sharing: DeviceSharing) -> EvalConfig {
        EvalConfig {
            device_sharing,
            ..self.cfg.clone()
        }
    }

    /// The progress bar, `--json`'s line, the results file, and the batch's slot.
    fn report(&self, index: usize, result: EvalResult) {
        let bar = &self.bar;
        bar.set_message(format!("{} {}", result.task.name, result.verdict.as_str()));
        bar.inc(1);
        if self.json {
            bar.suspend(|| {
                if let Ok(line) = serde_json::to_string(&result) {
                    println!("{line}");
                }
            });
        }
        append_result(self.sink, &result);
        if let Ok(mut results) = self.results.lock() {
            results[index] = Some(result);
        }
    }
}

/// Says in the retried result why it was retried and what the first attempt got.
fn note_retry(result: &mut EvalResult, first: &EvalResult, sharing: DeviceSharing) {
    let (class, stage) = first
        .failure
        .as_ref()
        .map(|f| (format!("{:?}", f.class), f.stage.as_str()))
        .unwrap_or_default();
    result.findings.push(Finding::new(
        "retried-alone",
        Severity::Info,
        format!(
            "the first attempt ran beside {} on this device and ended with {class} in stage \
             `{stage}` (seed {}); this verdict comes from a run alone, so memory the judge gave \
             to other processes is never charged to the candidate",
            sharing.who(),
            first.seeds.base
        ),
    ));
}

fn fmt_opt(value: Option<f64>, f: impl Fn(f64) -> String) -> String {
    value.map(f).unwrap_or_else(|| "-".into())
}

/// The measured precision class, `-` when there is none.
fn precision_class(r: &EvalResult) -> &'static str {
    r.precision
        .as_ref()
        .and_then(|p| p.class)
        .map_or("-", |c| c.as_str())
}

pub fn print_table(results: &[EvalResult]) {
    println!(
        "{:<40} {:<14} {:>5} {:>8} {:>8} {:>8} {:>10} {:>10} {:>7} {:>8}",
        "task",
        "verdict",
        "prec",
        "speedup",
        "matched",
        "coverage",
        "ref ms",
        "cand ms",
        "cv",
        "wall s"
    );
    for r in results {
        let timing = r.timing.as_ref();
        println!(
            "{:<40} {:<14} {:>5} {:>8} {:>8} {:>8} {:>10} {:>10} {:>7} {:>8.2}",
            r.task.name,
            r.verdict.as_str(),
            precision_class(r),
            fmt_opt(r.speedup, |s| format!("{s:.3}x")),
            fmt_opt(r.speedup_matched, |s| format!("{s:.3}x")),
            fmt_opt(r.coverage, |c| format!("{:.1}%", c * 100.0)),
            fmt_opt(timing.map(|t| t.reference.median_ms), |v| format!("{v:.4}")),
            fmt_opt(timing.map(|t| t.candidate.median_ms), |v| format!("{v:.4}")),
            fmt_opt(timing.map(|t| t.candidate.cv), |v| format!(
                "{:.1}%",
                v * 100.0
            )),
            r.wall_s
        );
    }
    let correct = results.iter().filter(|r| r.correct).count();
    println!("{correct}/{} correct", results.len());
}

fn print_summary(r: &EvalResult) {
    let passed = r.trials.iter().filter(|t| t.passed).count();
    println!(
        "{} vs {}: {} ({passed}/{} trials run passed, tolerance {}, size profile {}, device {})",
        r.task.name,
        r.candidate.path,
        r.verdict.as_str().to_uppercase(),
        r.trials.len(),
        r.tolerance.profile,
        r.size_profile,
        r.env.device
    );
    if let Some(t) = &r.timing {
        println!(
            "  speedup {}  reference {:.4} ms  candidate {:.4} ms (cv {:.1}%)  coverage {}",
            fmt_opt(r.speedup, |s| format!("{s:.3}x")),
            t.reference.median_ms,
            t.candidate.median_ms,
            t.candidate.cv * 100.0,
            fmt_opt(r.coverage, |c| format!("{:.1}%", c * 100.0)),
        );
    }
    if let Some(g) = &r.generalization {
        let sizes: Vec<String> = g
            .constants
            .iter()
            .map(|c| format!("{} {} -> {}", c.name, c.from, c.to))
            .collect();
        println!(
            "  generalization: {:?} ({})",
            g.status,
            g.message
                .as_deref()
                .map(|m| m.lines().next().unwrap_or("").to_string())
                .unwrap_or_else(|| sizes.join(", "))
        );
    }
    if let Some(reason) = &r.timing_skipped {
        println!("  timing: none ({reason})");
    }
    if let Some(p) = &r.precision {
        match (&p.unmeasured, p.class, p.reference_class) {
            (Some(reason), _, _) => println!("  precision: unmeasured ({reason})"),
            (None, Some(class), Some(reference)) => println!(
                "  precision: {} (reference {}), speedup at that precision {}",
                class.as_str(),
                reference.as_str(),
                fmt_opt(r.speedup_matched, |s| format!("{s:.3}x")),
            ),
            _ => {}
        }
    }
    if let Some(f) = &r.failure {
        println!(
            "  failure: {:?} in stage `{}`:\n    {}",
            f.class,
            f.stage,
            f.message.replace('\n', "\n    ")
        );
    }
    for f in &r.findings {
        let at = f.line.map(|l| format!(" (line {l})")).unwrap_or_default();
        println!("  finding [{:?}] {}{at}: {}", f.severity, f.code, f.message);
    }
    for l in &r.launches {
        let config = l
            .autotune_config
            .as_deref()
            .map(|c| format!(", autotune config {c}"))
            .unwrap_or_default();
        println!("  launched {} x{}{config}", l.kernel, l.calls);
    }
    println!(
        "  seed {} (replay with --seed {}), wall {:.2} s",
        r.seeds.base, r.seeds.base, r.wall_s
    );
}
