//! `crucible bench-throughput`: evaluations per hour on one device for a fixed mixed set of
//! candidates, with the service engine's warm pool, caches and concurrency ON, and OFF (a fresh
//! Python per task, the reference timed every time, one at a time), in one run.
//!
//! The set: `tasks` tasks × `per_task` candidates, built from honest solutions: per task, in the
//! pattern C I C F C I C F, correct copies (each textually distinct), incorrect ones (the
//! honest output times 1.5) and failing ones (a Triton compile error; a syntax error on even
//! tasks, a runtime error on odd ones). Jobs run task-interleaved. OFF judges a stratified
//! subset (every `off_every`-th candidate, offset per task, so it has the same mix) when
//! judging all of them twice would not fit the time available.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use crucible_judge::{Device, EvalConfig, Runtime, TimingConfig};
use crucible_result::{EvalResult, Stats, Verdict};
use crucible_worker::engine::{Control, EngineEvent, Probe};
use crucible_worker::{Engine, EngineOptions, Job, JudgeOptions, Tuning};

use crate::gpu_busy::{GpuBusy, GpuBusySampler};

/// The KernelBench tasks of the GPU set (level, name): those with honest solutions under
/// `examples/kernelbench`, memory-heavy ones kept to one so concurrent evaluations fit.
const KERNELBENCH_SET: &[(&str, &str)] = &[
    ("level1", "1_Square_matrix_multiplication_"),
    ("level2", "12_Gemm_Multiply_LeakyReLU"),
    ("level1", "23_Softmax"),
    ("level1", "2_Standard_matrix_multiplication_"),
    ("level2", "76_Gemm_Add_ReLU"),
    ("level1", "6_Matmul_with_large_K_dimension_"),
    ("level1", "8_Matmul_with_irregular_shapes_"),
    ("level1", "10_3D_tensor_matrix_multiplication"),
];

/// The builtin tasks of the CPU set (small size profiles run through Triton's interpreter).
const BUILTIN_SET: &[&str] = &[
    "01_relu",
    "06_softmax",
    "04_row_sum",
    "16_swish",
    "02_gelu_tanh",
    "07_rmsnorm",
    "03_bias_add_mul",
    "08_layernorm",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CandidateSet {
    /// KernelBench level-1 and level-2 tasks (`--kernelbench`), full sizes: for a GPU.
    Kernelbench,
    /// The builtin tasks at their small sizes: for the CPU.
    Builtin,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Modes {
    Both,
    On,
    Off,
}

#[derive(clap::Args)]
pub struct ThroughputArgs {
    /// `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: Device,
    /// Candidate set; default `kernelbench` on a GPU, `builtin` on the CPU.
    #[arg(long, value_enum)]
    set: Option<CandidateSet>,
    /// A KernelBench checkout (the directory holding level1/ and level2/).
    #[arg(long, env = "KERNELBENCH")]
    kernelbench: Option<PathBuf>,
    /// The repository root (examples/, tasks/).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=8))]
    tasks: u32,
    /// Candidates per task (pattern C I C F C I C F, cut to this length).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    per_task: u32,
    /// Evaluations at once with the engine ON.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Harness pairs the ON engine keeps started ahead (default: the engine's own).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pool_depth: Option<u32>,
    /// How much lower than the judge's the CPU priority (nice) of the ON engine's waiting
    /// pairs is (default: the engine's own, 10; 0 gives them the judge's).
    #[arg(long, allow_hyphen_values = true)]
    pool_nice: Option<i32>,
    /// At most this many ON evaluations' untimed GPU work (trials, building models, the
    /// precision measurement) at once; the rest wait (default: no limit).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    gpu_slots: Option<u32>,
    /// Timed iterations per side (and warm-up iterations before them).
    #[arg(long, default_value_t = 30)]
    iters: u32,
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// Nice value of the timed processes during the timed phases (0 leaves them at the
    /// judge's own where it runs at 0).
    #[arg(long, default_value_t = crucible_judge::TIMED_NICE, allow_hyphen_values = true,
          value_parser = clap::value_parser!(i32).range(-20..=19))]
    timed_nice: i32,
    #[command(flatten)]
    autotune: crate::eval_cmd::AutotuneArg,
    /// Correctness trials per candidate.
    #[arg(long, default_value_t = 5)]
    trials: u32,
    /// OFF judges every N-th candidate (stratified: the same mix); 1 judges them all.
    #[arg(long, default_value_t = 4)]
    off_every: u32,
    #[arg(long, value_enum, default_value = "both")]
    modes: Modes,
    /// Pause this long before each evaluation, so the pool is full when it starts: measures the
    /// overhead with warm workers apart from CPU saturation (the rate then counts the pauses).
    #[arg(long, default_value_t = 0.0)]
    pace_s: f64,
    /// Prestarted candidate processes do not start the profiler ahead of their evaluation; those
    /// whose first trial passed begin it then, on a thread (measured on an H200: no faster).
    #[arg(long)]
    cold_profiler: bool,
    /// The warm pool starts every referee as a fresh interpreter instead of forking it from a
    /// zygote that has imported torch, triton and numpy.
    #[arg(long)]
    fresh_referees: bool,
    /// The warm pool starts every candidate process as a fresh interpreter, confined between
    /// fork and exec, instead of forking it from the zygote and confining it there.
    #[arg(long)]
    fresh_candidates: bool,
    /// The warm pool does not warm its referees up before their evaluation (a first use of the
    /// trial's kernels and of cuBLAS, under a share): each pays for it in its first trial.
    #[arg(long)]
    cold_referees: bool,
    /// An evaluation waiting for the GPU's large-evaluation claim keeps its slot instead of
    /// lending it to another task's evaluation meanwhile (the engine before 2026-12-07).
    #[arg(long)]
    keep_slots_while_waiting: bool,
    /// The evaluation holding the GPU's large-evaluation claim queues for its shares behind
    /// waiting timed phases instead of going ahead of them (the engine before 2026-12-07).
    #[arg(long)]
    large_evaluation_waits_in_line: bool,
    /// A share held across several pieces of untimed work (a later trial's prepare, run and
    /// check; the autotuner's benchmarks) is held to its end while a timed phase waits for it,
    /// instead of letting the phase go first between two pieces (the engine before session 54).
    #[arg(long)]
    shares_never_yield: bool,
    /// Shares race the engine's timed phases for the GPU as `flock` has them, instead of
    /// waiting while one waits or holds it, so timed phases queued behind one another each
    /// wait for the shares that got in between (the engine before session 54).
    #[arg(long)]
    timed_phases_in_any_order: bool,
    /// The precision measurement's float64 forwards run in its own stage, after the trials,
    /// instead of on the referee during trial 0 (to measure what running them ahead gains).
    #[arg(long)]
    precision_behind: bool,
    /// ON: a correct candidate's repeat and precision measurement have the GPU to themselves
    /// (the timed phases' exclusive lock) instead of sharing its time slices.
    #[arg(long)]
    exclusive_checks: bool,
    /// Leaves this task out of the set (repeatable; its name as the set lists it, e.g.
    /// `23_Softmax`): a diagnostic of what one task costs the rate, never the goal's set.
    #[arg(long = "without-task", value_name = "NAME")]
    without_tasks: Vec<String>,
    /// Both modes: share every trial's inputs and output slots anew, instead of the default
    /// standing shares (a small trial's, written again by the referee and mapped once by the
    /// candidate's process).
    #[arg(long)]
    fresh_shares: bool,
    /// The GPU lock on this file instead of the GPU's own; with it the lock also works on the
    /// CPU (where nothing is timed, but trials still take their shares).
    #[arg(long)]
    lock_file: Option<PathBuf>,
    /// Per-evaluation rows as JSON lines.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the candidate set (task and candidate files, manifest.jsonl) into this directory
    /// and judge nothing: the fixed set for runs through the service (scripts/multi-gpu-run).
    #[arg(long)]
    write_set: Option<PathBuf>,
    #[command(flatten)]
    sandbox: crate::sandbox_cmd::SandboxArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Correct,
    Incorrect,
    Failing,
}

struct Case {
    task: usize,
    kind: Kind,
    job: Job,
}

pub fn run(args: ThroughputArgs) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::discover()?;
    let set = args.set.unwrap_or(if args.device.is_gpu() {
        CandidateSet::Kernelbench
    } else {
        CandidateSet::Builtin
    });
    let cases = build_set(&args, set)?;
    if let Some(dir) = &args.write_set {
        write_set(dir, &cases)?;
        println!("wrote {} candidates to {}", cases.len(), dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let base = base_config(&args);
    let all: Vec<&Case> = cases.iter().collect();
    let tasks = cases.iter().map(|case| case.task + 1).max().unwrap_or(0) as u32;
    let sample = off_sample(&cases, tasks, args.off_every);
    let without = if args.without_tasks.is_empty() {
        String::new()
    } else {
        format!(" (without {})", args.without_tasks.join(", "))
    };
    println!(
        "bench-throughput on {}: {} candidates over {} tasks{without} ({}); timing {} warm-up + \
         {} timed iterations per side, {} trials, autotuner budget {} ms",
        args.device,
        cases.len(),
        tasks,
        mix(&all),
        args.warmup,
        args.iters,
        args.trials,
        base.autotune
    );
    let mut json = match &args.json {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?,
        ),
        None => None,
    };
    let mut comparison = Comparison::default();
    for (name, on) in [("ON", true), ("OFF", false)] {
        if (on && args.modes == Modes::Off) || (!on && args.modes == Modes::On) {
            continue;
        }
        let chosen = if on { &all } else { &sample };
        print_mode_header(&args, name, on, chosen);
        let measured = run_mode(&runtime, &args, &base, on, chosen)?;
        measured.print(args.trials);
        if let Some(file) = json.as_mut() {
            measured.write_json(name, chosen, file)?;
        }
        comparison.add(name, chosen, &measured);
    }
    comparison.print();
    Ok(ExitCode::SUCCESS)
}

/// The judge configuration both modes share.
fn base_config(args: &ThroughputArgs) -> EvalConfig {
    let mut base = EvalConfig::new(args.device);
    base.trials = args.trials;
    base.timing = Some(TimingConfig {
        warmup: args.warmup,
        iters: args.iters,
        nice: Some(args.timed_nice),
        ..TimingConfig::default()
    });
    args.autotune.apply(&mut base);
    args.sandbox.apply(&mut base);
    base.precision_ahead = !args.precision_behind;
    base.exclusive_checks = args.exclusive_checks;
    base.standing_shares = !args.fresh_shares;
    base
}

/// What OFF judges: every `off_every`-th candidate, offset per task, so that the subset has
/// the whole set's mix of tasks and kinds.
fn off_sample(cases: &[Case], tasks: u32, off_every: u32) -> Vec<&Case> {
    cases
        .iter()
        .enumerate()
        .filter(|(i, c)| (i / tasks as usize + c.task).is_multiple_of(off_every.max(1) as usize))
        .map(|(_, c)| c)
        .collect()
}

fn mix(cases: &[&Case]) -> String {
    let count = |kind| cases.iter().filter(|c| c.kind == kind).count();
    format!(
        "{} correct, {} incorrect, {} failing",
        count(Kind::Correct),
        count(Kind::Incorrect),
        count(Kind::Failing)
    )
}

fn print_mode_header(args: &ThroughputArgs, name: &str, on: bool, chosen: &[&Case]) {
    println!("\n== {name}: {} candidates ({})", chosen.len(), mix(chosen));
    if on {
        let depth = args
            .pool_depth
            .map_or_else(|| "the engine's".to_string(), |n| n.to_string());
        let slots = args
            .gpu_slots
            .map_or_else(|| "no limit".to_string(), |n| n.to_string());
        println!(
            "  {} evaluations at once, pool depth {depth}, GPU slots {slots}",
            args.concurrency.max(1)
        );
    }
    if args.pace_s > 0.0 {
        println!(
            "  paced: {} s before each evaluation (the rate counts the pauses)",
            args.pace_s
        );
    }
}

/// The modes' figures side by side: rates, the GPU ceiling, and whether the candidates both
/// modes judged got the same verdicts.
#[derive(Default)]
struct Comparison {
    rates: BTreeMap<&'static str, f64>,
    ceilings: BTreeMap<&'static str, f64>,
    /// Per mode, each judged candidate's source and verdict.
    verdicts: BTreeMap<&'static str, Vec<(String, Verdict)>>,
}

impl Comparison {
    fn add(&mut self, mode: &'static str, chosen: &[&Case], measured: &Measured) {
        self.rates.insert(mode, measured.per_hour());
        if let Some(ceiling) = measured
            .gpu
            .and_then(|gpu| gpu.ceiling_per_hour(measured.rows.len()))
        {
            self.ceilings.insert(mode, ceiling);
        }
        let verdicts = chosen
            .iter()
            .zip(&measured.rows)
            .map(|(c, r)| (c.job.candidate_source.clone(), r.verdict))
            .collect();
        self.verdicts.insert(mode, verdicts);
    }

    /// Prints nothing unless both modes ran.
    fn print(&self) {
        let (Some(on), Some(off)) = (self.rates.get("ON"), self.rates.get("OFF")) else {
            return;
        };
        println!(
            "\nthroughput ON / OFF: {:.1}x ({on:.0} vs {off:.0} evaluations/hour)",
            on / off
        );
        if let Some(ceiling) = self.ceilings.get("ON") {
            println!(
                "GPU ceiling: ON's kernel time per evaluation allows at most {ceiling:.0} \
                 evaluations/hour, {:.1}x OFF",
                ceiling / off
            );
        }
        let (Some(on_judged), Some(off_judged)) =
            (self.verdicts.get("ON"), self.verdicts.get("OFF"))
        else {
            return;
        };
        let on_verdicts: BTreeMap<&String, Verdict> =
            on_judged.iter().map(|(s, v)| (s, *v)).collect();
        let differing = off_judged
            .iter()
            .filter(|(s, v)| on_verdicts.get(s) != Some(v))
            .count();
        println!(
            "verdicts: {differing} of {} candidates judged in both modes differ",
            off_judged.len()
        );
    }
}

/// The set as files: `tasks/NAME.py`, `candidates/NNN_NAME.py` and one manifest line per
/// candidate (`task_name`, `task_file`, `candidate_file`, `kind`).
fn write_set(dir: &std::path::Path, cases: &[Case]) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    std::fs::create_dir_all(dir.join("tasks"))?;
    std::fs::create_dir_all(dir.join("candidates"))?;
    let mut manifest = String::new();
    for (i, case) in cases.iter().enumerate() {
        let job = &case.job;
        let task_file = format!("tasks/{}.py", job.task_name);
        let candidate_file = format!("candidates/{i:03}_{}.py", job.task_name);
        std::fs::write(dir.join(&task_file), &job.task_source)?;
        std::fs::write(dir.join(&candidate_file), &job.candidate_source)?;
        let line = serde_json::json!({
            "task_name": job.task_name,
            "task_file": task_file,
            "candidate_file": candidate_file,
            "kind": format!("{:?}", case.kind).to_lowercase(),
        });
        writeln!(manifest, "{line}")?;
    }
    std::fs::write(dir.join("manifest.jsonl"), manifest)?;
    Ok(())
}

/// The candidate set, task-interleaved: job k is candidate k / tasks of task k % tasks.
fn build_set(args: &ThroughputArgs, set: CandidateSet) -> anyhow::Result<Vec<Case>> {
    let pairs: Vec<(String, PathBuf, PathBuf)> = match set {
        CandidateSet::Kernelbench => {
            let kb = args
                .kernelbench
                .clone()
                .context("the KernelBench set needs --kernelbench DIR (or $KERNELBENCH)")?;
            kept(KERNELBENCH_SET, |(_, name)| name, &args.without_tasks)?
                .into_iter()
                .take(args.tasks as usize)
                .map(|(level, name)| {
                    (
                        name.to_string(),
                        kb.join(level).join(format!("{name}.py")),
                        args.repo
                            .join("examples/kernelbench")
                            .join(level)
                            .join(format!("{name}.py")),
                    )
                })
                .collect()
        }
        CandidateSet::Builtin => kept(BUILTIN_SET, |name| name, &args.without_tasks)?
            .into_iter()
            .take(args.tasks as usize)
            .map(|name| {
                (
                    name.to_string(),
                    args.repo.join("tasks/builtin").join(format!("{name}.py")),
                    args.repo
                        .join("examples/solutions")
                        .join(format!("{name}.py")),
                )
            })
            .collect(),
    };
    let read = |path: &Path| {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
    };
    let mut sources = Vec::new();
    for (name, task, solution) in &pairs {
        sources.push((name.clone(), read(task)?, read(solution)?));
    }
    let mut cases = Vec::new();
    for variant in 0..args.per_task as usize {
        for (task, (name, task_src, solution)) in sources.iter().enumerate() {
            let (kind, candidate) = derive(solution, task, variant);
            cases.push(Case {
                task,
                kind,
                job: Job {
                    task_name: name.clone(),
                    task_source: task_src.clone(),
                    candidate_source: candidate,
                    options: JudgeOptions {
                        seed: Some(1000 + (variant * 100 + task) as u64),
                        ..JudgeOptions::default()
                    },
                    deadline: None,
                },
            });
        }
    }
    Ok(cases)
}

/// The entries of `set` whose name is not in `without`; a name in `without` that the set does
/// not hold is an error (a typo would otherwise measure the whole set under a wrong label).
fn kept<'a, T>(
    set: &'a [T],
    name: impl Fn(&'a T) -> &'a str,
    without: &[String],
) -> anyhow::Result<Vec<&'a T>> {
    if let Some(unknown) = without
        .iter()
        .find(|w| !set.iter().any(|e| name(e) == w.as_str()))
    {
        let names: Vec<&str> = set.iter().map(&name).collect();
        anyhow::bail!(
            "--without-task {unknown}: not a task of this set ({})",
            names.join(", ")
        );
    }
    Ok(set
        .iter()
        .filter(|e| !without.iter().any(|w| w == name(e)))
        .collect())
}

/// The honest class, renamed so a derived `ModelNew` can build on it.
const HONEST: &str = "_HonestModelNew";

/// `source` with every identifier `from` (not a part of a longer name) spelled `to`.
fn rename_identifier(source: &str, from: &str, to: &str) -> String {
    let is_ident = |c: char| c == '_' || c.is_alphanumeric();
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find(from) {
        let (before, after) = (&rest[..at], &rest[at + from.len()..]);
        let joined_before = before
            .chars()
            .next_back()
            .or_else(|| out.chars().next_back())
            .is_some_and(is_ident);
        let joined_after = after.chars().next().is_some_and(is_ident);
        out.push_str(before);
        out.push_str(if joined_before || joined_after {
            from
        } else {
            to
        });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Candidate `variant` of a task, from its honest solution (pattern C I C F C I C F).
fn derive(solution: &str, task: usize, variant: usize) -> (Kind, String) {
    // Every mention: a solution's own `super(ModelNew, self).__init__()` would otherwise name
    // the derived subclass, and `__init__` would call itself until Python's recursion limit (on
    // 6 of the 8 KernelBench examples every incorrect variant failed that way before this).
    let renamed = || rename_identifier(solution, "ModelNew", HONEST);
    match variant % 8 {
        1 | 5 => (
            Kind::Incorrect,
            format!(
                "{}\n\nclass ModelNew({HONEST}):\n    # bench variant {variant}: a wrong scale\n    \
                 def forward(self, *args):\n        return super().forward(*args) * 1.5\n",
                renamed()
            ),
        ),
        3 => (
            Kind::Failing,
            format!(
                "{}\n\n@triton.jit\ndef _bench_broken_kernel(x_ptr):\n    \
                 # not a power of two: Triton's compiler refuses it\n    \
                 offs = tl.arange(0, 3)\n    tl.store(x_ptr + offs, tl.load(x_ptr + offs))\n\n\n\
                 class ModelNew({HONEST}):\n    def forward(self, *args):\n        \
                 scratch = torch.zeros(4, device=args[0].device)\n        \
                 _bench_broken_kernel[(1,)](scratch)\n        return super().forward(*args)\n",
                renamed()
            ),
        ),
        7 if task.is_multiple_of(2) => (
            Kind::Failing,
            format!("{solution}\n\ndef _bench_variant_{variant}(:\n    pass\n"),
        ),
        7 => (
            Kind::Failing,
            format!(
                "{}\n\nclass ModelNew({HONEST}):\n    def forward(self, *args):\n        \
                 # bench variant {variant}: a TypeError at run time\n        \
                 return super().forward(*args, \"one argument too many\")\n",
                renamed()
            ),
        ),
        _ => (
            Kind::Correct,
            format!("{solution}\n# bench variant {variant}\n"),
        ),
    }
}

thread_local! {
    /// The job the current thread evaluates, for the probe.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
    /// Its evaluation's control, which knows the judge's current stage.
    static CONTROL: RefCell<Option<Control>> = const { RefCell::new(None) };
}

/// The judge stage the current thread's evaluation is in.
fn current_stage() -> Option<String> {
    CONTROL.with(|c| c.borrow().as_ref().and_then(Control::stage))
}

/// Whether the current thread's evaluation is in a correctness trial; which one.
fn current_trial() -> Option<String> {
    current_stage().filter(|stage| stage.starts_with("trial_"))
}

/// The name a stage is summed under: every correctness trial as `trials`.
fn stage_group(name: &str) -> &str {
    if name.starts_with("trial_") {
        "trials"
    } else {
        name
    }
}

/// What the probe saw of one job.
#[derive(Default, Clone)]
struct Seen {
    lock_wait_s: f64,
    /// The part of `lock_wait_s` spent inside each correctness trial (`trial_0`, ...): the
    /// compile estimate (first trial minus the later ones) must not count it as compiling.
    trial_lock_wait_s: BTreeMap<String, f64>,
    /// Time the correctness trials held a share of the GPU (the referee's prepare and check,
    /// the candidate's forward; not its compiles, during which the share is let go).
    trial_share_s: f64,
    /// The first trial's part of it: the candidate's first launches and autotuning runs
    /// (Triton benchmarks every config on the GPU), which the later trials do not repeat.
    first_trial_share_s: f64,
    /// Each share the first trial held, in order: the referee's prepare, the candidate's run
    /// (one share before its first compile, one after each), the referee's check.
    first_trial_shares: Vec<f64>,
    /// Each later trial's shares in order (`trial_1`, ...): the referee's prepare, the
    /// candidate's run, the referee's check, where a later trial compiled nothing.
    later_trial_shares: BTreeMap<String, Vec<f64>>,
    /// Per stage (the trials as `trials`, see [`stage_group`]): `[time under a share of
    /// the GPU, time waiting for the GPU lock]`, what a stage's time is made of beside its own
    /// CPU work and round trips.
    stage_gpu_s: BTreeMap<String, [f64; 2]>,
    /// Reference-cache lookups in order: the plain reference, then the matched class.
    cache_hits: Vec<bool>,
    prestarted: bool,
    /// The prestarted pair had said hello when taken (no start-up to wait for).
    said_hello: bool,
    /// CPU seconds the taken pairs had used when taken, `[referee, candidate]` (their
    /// start-up, paid in the pool).
    start_cpu_s: [f64; 2],
    /// CPU seconds the evaluation's processes used in all (summed over a retry's two runs).
    cpu_s: Option<[f64; 2]>,
    /// Waiting pairs the pool killed to make way for its run alone (a retry, or `ran-alone`).
    pairs_dropped_to_run_alone: Option<usize>,
    /// Every hold of the GPU lock, in the order they ended: what a timed phase's wait was
    /// made of (the shares it drained, the timed phases before it) is read from these.
    lock_spans: Vec<LockSpan>,
}

/// One hold of the GPU lock: asked for, entered, left; in `stage` when it was let go.
#[derive(Clone)]
struct LockSpan {
    exclusive: bool,
    asked: Instant,
    entered: Instant,
    left: Instant,
    stage: Option<String>,
}

impl LockSpan {
    /// `[mode, asked, entered, left, stage]`, the times in seconds since `origin`: `x` a timed
    /// phase, `s` a share.
    fn json(&self, origin: Instant) -> serde_json::Value {
        let since = |t: Instant| t.saturating_duration_since(origin).as_secs_f64();
        serde_json::json!([
            if self.exclusive { "x" } else { "s" },
            since(self.asked),
            since(self.entered),
            since(self.left),
            self.stage,
        ])
    }
}

impl Seen {
    /// A share of the GPU held for `held_s` during `stage` (the trials' figures count only
    /// the trials).
    fn add_share(&mut self, stage: Option<&str>, held_s: f64) {
        if let Some(stage) = stage {
            self.stage_gpu_s
                .entry(stage_group(stage).to_string())
                .or_default()[0] += held_s;
        }
        match stage {
            Some("trial_0") => {
                self.trial_share_s += held_s;
                self.first_trial_share_s += held_s;
                self.first_trial_shares.push(held_s);
            }
            Some(stage) if stage.starts_with("trial_") => {
                self.trial_share_s += held_s;
                self.later_trial_shares
                    .entry(stage.to_string())
                    .or_default()
                    .push(held_s);
            }
            _ => {}
        }
    }
}

struct Row {
    verdict: Verdict,
    kind: Kind,
    wall_s: f64,
    compile_s: f64,
    gpu_s: f64,
    lock_wait_s: f64,
    /// The correctness trials' time under a GPU share, and waiting for one.
    trial_share_s: f64,
    first_trial_share_s: f64,
    /// Where a passed first trial held its shares: see [`FirstTrialShares`].
    first_trial_parts: Option<FirstTrialShares>,
    /// Each later trial's three shares `[prepare, run, check]`, for the trials that held
    /// exactly those (a run alone's trials come after its first attempt's, so none).
    later_trial_parts: Vec<[f64; 3]>,
    trial_lock_wait_s: f64,
    overhead_s: f64,
    overhead_outside_trials_s: f64,
    /// What every evaluation pays whatever the candidate does: the static checks, waiting for
    /// the processes, building the reference, loading the candidate, set-up and teardown.
    fixed_s: f64,
    stages: BTreeMap<String, f64>,
    /// Per stage, `[under a share of the GPU, waiting for the GPU lock]` (see [`Seen`]).
    stage_gpu_s: BTreeMap<String, [f64; 2]>,
    /// Why it was not correct, and its reject and flag findings: what a verdict that differs
    /// between the modes is read from.
    failure: Option<crucible_result::Failure>,
    findings: Vec<String>,
    prestarted: bool,
    said_hello: bool,
    /// Run a second time alone after a fault that sharing the device can cause (the
    /// `retried-alone` finding): its wall holds both runs.
    retried_alone: bool,
    /// Waiting pairs the pool killed to make way for its run alone (see [`Seen`]).
    pairs_dropped_to_run_alone: Option<usize>,
    /// Run alone from the start (`ran-alone`: its task ran out of memory beside others before).
    ran_alone: bool,
    /// Run with no other large task's evaluation beside it (`ran-one-large-at-a-time`: its
    /// task ran out of memory beside others once).
    ran_one_large_at_a_time: bool,
    /// CPU seconds of its processes, `[referee, candidate]`: in all, and the part they had
    /// used when taken from the pool (their start-up).
    cpu_s: Option<[f64; 2]>,
    start_cpu_s: [f64; 2],
    /// The claimed median against the outside witnesses, `[back to back, synchronized]`, where
    /// it was timed: how near an honest claim comes to their bounds (0.75, and 0.85 or 0.6)
    /// beside other evaluations.
    claim_over_witness: [Option<f64>; 2],
    /// Its outside witnesses were measured again (`timing-rechecked`).
    timing_rechecked: bool,
    lock_spans: Vec<LockSpan>,
    /// Seconds its precision measurement's float64 forwards took on the referee during trial
    /// 0, where they ran there (`precision.forwards_ahead_s`).
    precision_ahead_s: Option<f64>,
}

/// The claimed median over each outside witness, `[back to back, synchronized]`.
fn claim_over_witness(timing: Option<&crucible_result::Timing>) -> [Option<f64>; 2] {
    let Some(t) = timing else {
        return [None, None];
    };
    let over = |witness: Option<f64>| {
        witness
            .filter(|w| w.is_finite() && *w > 0.0)
            .map(|w| t.candidate.median_ms / w)
    };
    [over(t.outside_forward_ms), over(t.synced_forward_ms)]
}

struct Measured {
    engine_start_s: f64,
    /// Prestarted pairs when the clock started, and the pool's depth.
    pool_at_start: (usize, usize),
    /// When the batch's clock started: the origin of the lock spans' times.
    started: Instant,
    batch_s: f64,
    rows: Vec<Row>,
    intervals: Vec<(Instant, Instant)>,
    /// When untimed GPU work (trials, model builds) held its share of the GPU.
    untimed: Vec<(Instant, Instant)>,
    cache: (usize, usize),
    /// Kernel launchers the candidates' processes named (kept for Triton's seed) by the end of
    /// the batch, and how many of them the newest seed was built with.
    launchers: (usize, usize),
    /// The machine's CPU use over the batch, where /proc/stat can be read.
    cpu: Option<CpuUse>,
    /// How much of the batch the machine's CPU was saturated (from readings every
    /// `CPU_SAMPLE`).
    saturation: Option<Saturation>,
    /// The GPU's kernel time over the batch, where `nvidia-smi` could say.
    gpu: Option<GpuBusy>,
}

/// How many intervals were open at once: what the GPU's time slicing depends on (every process
/// with work on the GPU lengthens the others' waits for their results).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Occupancy {
    /// Seconds during which at least one was open.
    held_s: f64,
    /// The time-weighted mean number open, over `held_s`.
    mean_while_held: f64,
    most: usize,
}

impl Occupancy {
    /// `None` for no intervals (or none of positive length).
    fn of(intervals: &[(Instant, Instant)]) -> Option<Occupancy> {
        // +1 at each start, -1 at each end; ends sort before starts at the same instant.
        let mut edges: Vec<(Instant, i64)> = intervals
            .iter()
            .filter(|(a, b)| a < b)
            .flat_map(|&(a, b)| [(a, 1), (b, -1)])
            .collect();
        edges.sort();
        let (mut open, mut most, mut held_s, mut weighted) = (0i64, 0i64, 0.0, 0.0);
        for pair in edges.windows(2) {
            let ((at, step), (next, _)) = (pair[0], pair[1]);
            open += step;
            most = most.max(open);
            let span = (next - at).as_secs_f64();
            if open > 0 {
                held_s += span;
                weighted += span * open as f64;
            }
        }
        (held_s > 0.0).then(|| Occupancy {
            held_s,
            mean_while_held: weighted / held_s,
            most: most as usize,
        })
    }
}

/// The share of the evaluations' summed wall that their candidates spent compiling (`None`
/// without wall time).
fn compile_share(rows: &[Row]) -> Option<f64> {
    let wall: f64 = rows.iter().map(|r| r.wall_s).sum();
    (wall > 0.0).then(|| rows.iter().map(|r| r.compile_s).sum::<f64>() / wall)
}

/// Machine-wide CPU time between two readings of /proc/stat: whether the batch was CPU-bound.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CpuUse {
    /// Core-seconds spent busy (user, nice, system, irq, softirq, steal).
    busy_s: f64,
    /// Core-seconds in all (busy plus idle and I/O wait).
    total_s: f64,
}

/// The aggregate `cpu` line of /proc/stat, in clock ticks: (busy, total).
fn cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice, already in user/nice]
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

fn read_cpu_ticks() -> Option<(u64, u64)> {
    cpu_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

impl CpuUse {
    /// From two readings; USER_HZ is 100 on every Linux ABI this runs on.
    fn between(before: (u64, u64), after: (u64, u64)) -> Option<CpuUse> {
        const TICKS_PER_S: f64 = 100.0;
        let busy = after.0.checked_sub(before.0)?;
        let total = after.1.checked_sub(before.1)?;
        (total > 0).then(|| CpuUse {
            busy_s: busy as f64 / TICKS_PER_S,
            total_s: total as f64 / TICKS_PER_S,
        })
    }

    /// The most evaluations an hour this machine's cores could judge at the batch's CPU time
    /// per evaluation, were they always busy: the measured rate over the busy share.
    fn ceiling_per_hour(&self, per_hour: f64) -> Option<f64> {
        (self.busy_s > 0.0).then(|| per_hour * self.total_s / self.busy_s)
    }
}

/// How often the CPU sampler reads /proc/stat during a batch.
const CPU_SAMPLE: std::time::Duration = std::time::Duration::from_millis(250);

/// Reads the machine's CPU counters when started, every [`CPU_SAMPLE`] on a thread of its own,
/// and when finished: the batch's whole use is its first and last reading.
struct CpuSampler {
    first: Option<(u64, u64)>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// `None` when no thread could be started: then only the first and last readings.
    thread: Option<std::thread::JoinHandle<Vec<(u64, u64)>>>,
}

impl CpuSampler {
    fn start() -> CpuSampler {
        let first = read_cpu_ticks();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("cpu-sampler".into())
            .spawn(move || {
                let mut readings = Vec::new();
                while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(CPU_SAMPLE);
                    readings.extend(read_cpu_ticks());
                }
                readings
            })
            .ok();
        CpuSampler {
            first,
            stop,
            thread,
        }
    }

    /// Every reading, the first and a last one taken now included.
    fn finish(self) -> Vec<(u64, u64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let between = self
            .thread
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default();
        self.first
            .into_iter()
            .chain(between)
            .chain(read_cpu_ticks())
            .collect()
    }
}

/// The share of a batch's time the whole machine's CPU was at least 90% and 75% busy.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Saturation {
    at_90: f64,
    at_75: f64,
}

impl Saturation {
    /// From successive (busy, total) readings: each interval weighs by its length.
    fn of(readings: &[(u64, u64)]) -> Option<Saturation> {
        let (mut all, mut at_90, mut at_75) = (0.0, 0.0, 0.0);
        for pair in readings.windows(2) {
            let Some(used) = CpuUse::between(pair[0], pair[1]) else {
                continue;
            };
            all += used.total_s;
            if used.busy_s >= 0.9 * used.total_s {
                at_90 += used.total_s;
            }
            if used.busy_s >= 0.75 * used.total_s {
                at_75 += used.total_s;
            }
        }
        (all > 0.0).then(|| Saturation {
            at_90: at_90 / all,
            at_75: at_75 / all,
        })
    }
}

/// How long a run waits for its warm pool to fill before it starts the clock anyway.
const POOL_FILL_LIMIT: std::time::Duration = std::time::Duration::from_secs(180);

/// Waits until the engine's pool holds its depth of pairs that said hello, or `limit` passed (the
/// report says how many were ready).
fn wait_for_full_pool(engine: &Engine, limit: std::time::Duration) {
    let until = Instant::now() + limit;
    while engine.warm() < engine.pool_depth() && Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// When something held the GPU, from entering to leaving.
type Intervals = Vec<(Instant, Instant)>;

/// What the engine's probe saw over one mode's batch, each event charged to the job its thread
/// runs (`CURRENT`).
#[derive(Clone)]
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// When timed phases held the GPU lock.
    timed: Arc<Mutex<Intervals>>,
    /// When untimed GPU work held its share.
    untimed: Arc<Mutex<Intervals>>,
}

impl Recorder {
    fn new(jobs: usize) -> Recorder {
        Recorder {
            seen: Arc::new(Mutex::new(vec![Seen::default(); jobs])),
            timed: Arc::new(Mutex::new(Vec::new())),
            untimed: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn probe(&self) -> Probe {
        let recorder = self.clone();
        Arc::new(move |event| recorder.record(event))
    }

    fn record(&self, event: EngineEvent) {
        let Some(index) = CURRENT.with(Cell::get) else {
            return;
        };
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        let Some(job) = seen.get_mut(index) else {
            return;
        };
        match event {
            EngineEvent::GpuLockWait(waited) => {
                job.lock_wait_s += waited.as_secs_f64();
                if let Some(stage) = current_stage() {
                    job.stage_gpu_s
                        .entry(stage_group(&stage).to_string())
                        .or_default()[1] += waited.as_secs_f64();
                }
                if let Some(trial) = current_trial() {
                    *job.trial_lock_wait_s.entry(trial).or_default() += waited.as_secs_f64();
                }
            }
            EngineEvent::ReferenceTiming { hit } => job.cache_hits.push(hit),
            EngineEvent::MadeWay { dropped } => job.pairs_dropped_to_run_alone = Some(dropped),
            EngineEvent::WorkersTaken {
                prestarted,
                said_hello,
                cpu_s,
                ..
            } => {
                job.prestarted |= prestarted;
                job.said_hello |= said_hello;
                job.start_cpu_s = add2(job.start_cpu_s, cpu_s);
            }
            EngineEvent::ProcessCpu { cpu_s } => {
                job.cpu_s = Some(add2(job.cpu_s.unwrap_or_default(), cpu_s));
            }
            EngineEvent::TimedPhases {
                asked,
                entered,
                left,
            } => {
                job.lock_spans.push(LockSpan {
                    exclusive: true,
                    asked,
                    entered,
                    left,
                    stage: current_stage(),
                });
                if let Ok(mut timed) = self.timed.lock() {
                    timed.push((entered, left));
                }
            }
            EngineEvent::UntimedGpuWork {
                asked,
                entered,
                left,
            } => {
                let stage = current_stage();
                job.add_share(stage.as_deref(), (left - entered).as_secs_f64());
                job.lock_spans.push(LockSpan {
                    exclusive: false,
                    asked,
                    entered,
                    left,
                    stage,
                });
                if let Ok(mut untimed) = self.untimed.lock() {
                    untimed.push((entered, left));
                }
            }
        }
    }

    /// What was recorded: per job, the timed phases, the untimed shares.
    fn recorded(&self) -> (Vec<Seen>, Intervals, Intervals) {
        let copy =
            |intervals: &Mutex<Intervals>| intervals.lock().map(|i| i.clone()).unwrap_or_default();
        let seen = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        (seen, copy(&self.timed), copy(&self.untimed))
    }
}

/// The engine of one mode: ON with the args' concurrency, pool and gate; OFF a plain one.
fn engine_for(
    runtime: &Runtime,
    args: &ThroughputArgs,
    base: &EvalConfig,
    on: bool,
    probe: Probe,
) -> anyhow::Result<Engine> {
    let options = if on {
        EngineOptions {
            concurrency: args.concurrency.max(1),
            ..EngineOptions::default()
        }
    } else {
        EngineOptions::plain()
    };
    let tuning = Tuning {
        base: Some(base.clone()),
        probe: Some(probe),
        cold_profiler: args.cold_profiler,
        fresh_referees: args.fresh_referees,
        fresh_candidates: args.fresh_candidates,
        cold_referees: args.cold_referees,
        keep_slots_while_waiting: args.keep_slots_while_waiting,
        large_evaluation_waits_in_line: args.large_evaluation_waits_in_line,
        shares_never_yield: args.shares_never_yield,
        timed_phases_in_any_order: args.timed_phases_in_any_order,
        lock_file: args.lock_file.clone(),
        pool_depth: args.pool_depth.map(|n| n as usize),
        pool_nice: args.pool_nice,
        gpu_slots: args.gpu_slots.map(|n| n as usize),
        ..Tuning::default()
    };
    Ok(Engine::with_tuning(
        runtime.clone(),
        args.device,
        options,
        tuning,
    )?)
}

fn run_mode(
    runtime: &Runtime,
    args: &ThroughputArgs,
    base: &EvalConfig,
    on: bool,
    cases: &[&Case],
) -> anyhow::Result<Measured> {
    let recorder = Recorder::new(cases.len());
    let created = Instant::now();
    let engine = engine_for(runtime, args, base, on, recorder.probe())?;
    // A worker is started once and serves for hours: the rate is its steady state, with the
    // pool as full as an idle worker keeps it, not the minute after a cold start.
    wait_for_full_pool(&engine, POOL_FILL_LIMIT);
    let engine_start_s = created.elapsed().as_secs_f64();
    let pool_at_start = (engine.warm(), engine.pool_depth());
    let started = Instant::now();
    let sampler = CpuSampler::start();
    let gpu_sampler = engine.gpu_uuid().and_then(GpuBusySampler::start);
    let pace = std::time::Duration::from_secs_f64(args.pace_s.max(0.0));
    let results = evaluate_tagged(&engine, cases, pace);
    let batch_s = started.elapsed().as_secs_f64();
    let gpu = gpu_sampler.and_then(GpuBusySampler::finish);
    let readings = sampler.finish();
    let launchers = (engine.launchers_named(), engine.launchers_seeded());
    drop(engine);
    let (seen, intervals, untimed) = recorder.recorded();
    let cache_hits = seen.iter().flat_map(|s| &s.cache_hits);
    let hits = cache_hits.clone().filter(|hit| **hit).count();
    let misses = cache_hits.filter(|hit| !**hit).count();
    let rows = results
        .iter()
        .zip(cases)
        .zip(&seen)
        .map(|((result, case), seen)| row(result, case.kind, seen, on))
        .collect();
    Ok(Measured {
        engine_start_s,
        pool_at_start,
        started,
        batch_s,
        rows,
        intervals,
        untimed,
        cache: (hits, misses),
        launchers,
        cpu: readings
            .first()
            .zip(readings.last())
            .and_then(|(before, after)| CpuUse::between(*before, *after)),
        saturation: Saturation::of(&readings),
        gpu,
    })
}

/// `evaluate_all`, with each thread's current job known to the probe.
fn evaluate_tagged(engine: &Engine, cases: &[&Case], pace: std::time::Duration) -> Vec<EvalResult> {
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<EvalResult>>> = Mutex::new(vec![None; cases.len()]);
    let bar = indicatif::ProgressBar::new(cases.len() as u64);
    std::thread::scope(|scope| {
        for _ in 0..engine.callers().min(cases.len()) {
            scope.spawn(|| {
                loop {
                    let index = {
                        let Ok(mut next) = next.lock() else { return };
                        *next += 1;
                        *next - 1
                    };
                    let Some(case) = cases.get(index) else { return };
                    std::thread::sleep(pace);
                    let control = Control::new();
                    CURRENT.with(|c| c.set(Some(index)));
                    CONTROL.with(|c| *c.borrow_mut() = Some(control.clone()));
                    let result = engine.evaluate_controlled(&case.job, &control);
                    CURRENT.with(|c| c.set(None));
                    CONTROL.with(|c| *c.borrow_mut() = None);
                    bar.set_message(format!(
                        "{} {}",
                        case.job.task_name,
                        result.verdict.as_str()
                    ));
                    bar.inc(1);
                    if let Ok(mut results) = results.lock() {
                        results[index] = Some(result);
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .collect()
}

/// One evaluation's figures. `overhead = wall − compile − GPU work − GPU-lock wait`, where
/// compile is the candidate's Triton compilation (see [`compile_time`]), GPU work is the timed
/// iterations (warm-up included) of the candidate and of every reference timing measured in
/// this evaluation (a cached one costs nothing), and the lock wait is time spent queued behind
/// other evaluations' timed phases. `overhead_outside_trials` leaves the correctness trials
/// out altogether (their forwards, autotuning runs and transfers are GPU work, and under
/// concurrency their wall time is mostly the GPU's time slicing between processes).
fn row(result: &EvalResult, kind: Kind, seen: &Seen, on: bool) -> Row {
    let mut stages: BTreeMap<String, f64> = BTreeMap::new();
    for stage in &result.stages {
        *stages
            .entry(stage_group(&stage.name).to_string())
            .or_default() += stage.duration_s;
    }
    let staged: f64 = result.stages.iter().map(|s| s.duration_s).sum();
    stages.insert("(outside stages)".into(), (result.wall_s - staged).max(0.0));
    // Each trial's own time, without its waits for the GPU lock (counted apart).
    let trials: Vec<f64> = result
        .stages
        .iter()
        .filter(|s| s.name.starts_with("trial_") && s.status == crucible_result::StageStatus::Ok)
        .map(|s| s.duration_s - seen.trial_lock_wait_s.get(&s.name).copied().unwrap_or(0.0))
        .collect();
    let trials_s = stages.get("trials").copied().unwrap_or(0.0);
    let compile_s = compile_time(trials_s, &trials, seen);
    let outside_trials_lock_wait_s =
        seen.lock_wait_s - seen.trial_lock_wait_s.values().sum::<f64>();
    let gpu_s = result.timing.as_ref().map_or(0.0, |t| {
        let side = |s: &Stats| s.mean_ms * f64::from(s.n + t.warmup) / 1e3;
        // OFF measures every reference timing; ON only the cache misses.
        let measured = |i: usize| !on || seen.cache_hits.get(i) == Some(&false);
        let mut gpu = side(&t.candidate);
        if measured(0) {
            gpu += side(&t.reference);
        }
        if let (Some(matched), true) = (&t.reference_matched, measured(1)) {
            gpu += side(matched);
        }
        gpu
    });
    let retried_alone = result.findings.iter().any(|f| f.code == "retried-alone");
    let fixed_s = ["verify", "start", "reference", "load", "(outside stages)"]
        .iter()
        .filter_map(|name| stages.get(*name))
        .sum();
    Row {
        verdict: result.verdict,
        fixed_s,
        kind,
        wall_s: result.wall_s,
        compile_s,
        gpu_s,
        lock_wait_s: seen.lock_wait_s,
        trial_share_s: seen.trial_share_s,
        first_trial_share_s: seen.first_trial_share_s,
        // Passed (trial 1 ran), and run once: a retry alone's shares follow the first run's.
        first_trial_parts: (result.stages.iter().any(|s| s.name == "trial_1") && !retried_alone)
            .then(|| FirstTrialShares::split(&seen.first_trial_shares))
            .flatten(),
        later_trial_parts: if retried_alone {
            Vec::new()
        } else {
            later_trial_parts(&seen.later_trial_shares)
        },
        trial_lock_wait_s: seen.trial_lock_wait_s.values().sum(),
        overhead_s: result.wall_s - compile_s - gpu_s - seen.lock_wait_s,
        overhead_outside_trials_s: result.wall_s - trials_s - gpu_s - outside_trials_lock_wait_s,
        stages,
        stage_gpu_s: seen.stage_gpu_s.clone(),
        prestarted: seen.prestarted,
        said_hello: seen.said_hello,
        retried_alone,
        pairs_dropped_to_run_alone: seen.pairs_dropped_to_run_alone,
        ran_alone: result.findings.iter().any(|f| f.code == "ran-alone"),
        ran_one_large_at_a_time: result
            .findings
            .iter()
            .any(|f| f.code == "ran-one-large-at-a-time"),
        claim_over_witness: claim_over_witness(result.timing.as_ref()),
        timing_rechecked: result.findings.iter().any(|f| f.code == "timing-rechecked"),
        lock_spans: seen.lock_spans.clone(),
        precision_ahead_s: result.precision.as_ref().and_then(|p| p.forwards_ahead_s),
        cpu_s: seen.cpu_s,
        start_cpu_s: seen.start_cpu_s,
        failure: result.failure.clone(),
        findings: result
            .findings
            .iter()
            // The retries' notes say why an evaluation took twice its time.
            .filter(|f| {
                f.severity >= crucible_result::Severity::Flag
                    || matches!(
                        f.code.as_str(),
                        "retried-alone"
                            | "ran-alone"
                            | "ran-one-large-at-a-time"
                            | "precision-retried"
                            | "timing-rechecked"
                    )
            })
            .map(|f| format!("{:?} {}: {}", f.severity, f.code, f.message))
            .collect(),
    }
}

/// A passed first trial's shares of the GPU, in the order the judge takes them: the referee
/// draws the inputs and runs the reference (`prepare`); the candidate's forward runs up to its
/// first compile (`run_before_compile`: its Python and torch work, and the wait for the
/// precision forwards begun meanwhile), then after each compile (`run_after_compiles`, summed
/// over `compiles` shares: the first launches and the autotuner's benchmarks); the referee
/// compares (`check`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct FirstTrialShares {
    prepare: f64,
    run_before_compile: f64,
    run_after_compiles: f64,
    compiles: usize,
    check: f64,
}

impl FirstTrialShares {
    /// None unless the shares are at least a prepare, a run and a check.
    fn split(shares: &[f64]) -> Option<FirstTrialShares> {
        let (&prepare, rest) = shares.split_first()?;
        let (&check, run) = rest.split_last()?;
        let (&run_before_compile, after) = run.split_first()?;
        Some(FirstTrialShares {
            prepare,
            run_before_compile,
            run_after_compiles: after.iter().sum(),
            compiles: after.len(),
            check,
        })
    }
}

/// The later trials whose shares were exactly a prepare, a run and a check, as
/// `[prepare, run, check]` (a trial that compiled again holds more, one that failed fewer).
fn later_trial_parts(shares: &BTreeMap<String, Vec<f64>>) -> Vec<[f64; 3]> {
    shares
        .values()
        .filter_map(|held| <[f64; 3]>::try_from(held.as_slice()).ok())
        .collect()
}

/// The candidate's compile time. With a GPU gate, the time its trials ran without a share of
/// the GPU and without waiting for one: the judge lets the share go exactly while Triton
/// compiles (the harness's `compiling` / `compiled` notes), so this is every compile, also of
/// a candidate that failed in its first trial, and none of its autotuning's GPU runs. Without
/// a gate (the CPU), the first trial less the median later trial, each without its lock waits.
/// `trials_s`: every trial stage's time, passed or not; `passed`: each passed trial's own time.
fn compile_time(trials_s: f64, passed: &[f64], seen: &Seen) -> f64 {
    if seen.trial_share_s > 0.0 {
        let waits: f64 = seen.trial_lock_wait_s.values().sum();
        return (trials_s - seen.trial_share_s - waits).max(0.0);
    }
    first_trial_compile(passed)
}

/// The first of these trial times less the median of the rest (never below zero): the compile
/// a first trial carries beyond a warm one. 0 with fewer than two trials, nothing to compare.
pub(crate) fn first_trial_compile(trials: &[f64]) -> f64 {
    match trials.split_first() {
        Some((first, rest)) if !rest.is_empty() => (first - median(rest)).max(0.0),
        _ => 0.0,
    }
}

/// What one correctness trial of each correct candidate cost, and what that figure is: under
/// shares of the GPU, its later trials' time under them, each (trial 0 also autotunes); without
/// (OFF, or no lock), its trials' stage less the candidate's compile, over every trial. Beside
/// other evaluations every wait for the device also waits for their time slices, so the two
/// differ most where the evaluations at once are many.
fn trial_cost(rows: &[Row], trials: u32) -> (&'static str, Vec<f64>) {
    let correct = rows.iter().filter(|r| r.verdict == Verdict::Correct);
    if rows.iter().any(|r| r.trial_share_s > 0.0) {
        let later = f64::from(trials.saturating_sub(1).max(1));
        let each = correct
            .map(|r| (r.trial_share_s - r.first_trial_share_s) / later)
            .collect();
        ("a later trial under its shares", each)
    } else {
        let all = f64::from(trials.max(1));
        let each = correct
            .filter_map(|r| r.stages.get("trials").map(|t| (t - r.compile_s) / all))
            .collect();
        (
            "a trial (the trials' stage less the candidate's compile, over all of them)",
            each,
        )
    }
}

pub(crate) fn median(values: &[f64]) -> f64 {
    Stats::from_samples(values).map_or(f64::NAN, |s| s.median_ms)
}

impl Measured {
    fn per_hour(&self) -> f64 {
        self.rows.len() as f64 / self.batch_s * 3600.0
    }

    fn print(&self, trials: u32) {
        let n = self.rows.len();
        println!(
            "  engine start-up (device probe, pool filled; once per worker, not in the rate): \
             {:.2} s, {} of {} prestarted pairs ready (said hello) when the clock started",
            self.engine_start_s, self.pool_at_start.0, self.pool_at_start.1
        );
        println!(
            "  batch wall {:.1} s for {n} evaluations: {:.0} evaluations/hour ({:.2} s each)",
            self.batch_s,
            self.per_hour(),
            self.batch_s / n.max(1) as f64
        );
        let mut verdicts: BTreeMap<&str, usize> = BTreeMap::new();
        for row in &self.rows {
            *verdicts.entry(row.verdict.as_str()).or_default() += 1;
        }
        println!("  verdicts: {verdicts:?}");
        self.print_machine();
        self.print_stages();
        self.print_overhead();
        // Also on the CPU with `--lock-file` (the lock's own behaviour, without a GPU).
        self.print_gpu_lock();
        self.print_witnesses();
        self.print_precision_ahead();
        self.print_first_trial_shares();
        self.print_later_trial_shares();
        self.print_trial_cost(trials);
    }

    /// What one correctness trial of a correct candidate cost ([`trial_cost`]).
    fn print_trial_cost(&self, trials: u32) {
        let (what, each) = trial_cost(&self.rows, trials);
        if let Some(s) = Stats::from_samples(&each) {
            println!(
                "  {what}, each, over the {} correct: {:.3} s median, {:.3} to {:.3} s",
                s.n, s.median_ms, s.min_ms, s.max_ms
            );
        }
    }

    /// Where the first trial's shares of the GPU went, over the evaluations that passed it.
    fn print_first_trial_shares(&self) {
        let parts: Vec<FirstTrialShares> = self
            .rows
            .iter()
            .filter_map(|r| r.first_trial_parts)
            .collect();
        if parts.is_empty() {
            return;
        }
        let med =
            |f: fn(&FirstTrialShares) -> f64| median(&parts.iter().map(f).collect::<Vec<_>>());
        println!(
            "  trial 0 under a share, median over the {} that passed it: prepare {:.3} s, the \
             candidate's run before its first compile {:.3} s, after its compiles {:.3} s ({} \
             compiles median), check {:.3} s",
            parts.len(),
            med(|p| p.prepare),
            med(|p| p.run_before_compile),
            med(|p| p.run_after_compiles),
            med(|p| p.compiles as f64),
            med(|p| p.check),
        );
    }

    /// Where a later trial's shares of the GPU went: the referee's two requests and the
    /// candidate's run between them (its time alone is about 0.02 s in all, session 39).
    fn print_later_trial_shares(&self) {
        let parts: Vec<[f64; 3]> = self
            .rows
            .iter()
            .flat_map(|r| r.later_trial_parts.iter().copied())
            .collect();
        if parts.is_empty() {
            return;
        }
        let med = |i: usize| median(&parts.iter().map(|p| p[i]).collect::<Vec<_>>());
        println!(
            "  a later trial under its shares, median over {} trials: prepare {:.3} s, the \
             candidate's run {:.3} s, check {:.3} s",
            parts.len(),
            med(0),
            med(1),
            med(2),
        );
    }

    /// How many precision measurements had their float64 forwards run during trial 0, and
    /// what the stage still took for those.
    fn print_precision_ahead(&self) {
        let measured: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| r.stages.contains_key("precision"))
            .collect();
        if measured.is_empty() {
            return;
        }
        let ahead: Vec<f64> = measured
            .iter()
            .filter_map(|r| r.precision_ahead_s)
            .collect();
        let stage: Vec<f64> = measured
            .iter()
            .filter(|r| r.precision_ahead_s.is_some())
            .filter_map(|r| r.stages.get("precision").copied())
            .collect();
        if ahead.is_empty() {
            println!(
                "  precision: float64 forwards run in the stage for all {} measurements",
                measured.len()
            );
            return;
        }
        println!(
            "  precision: float64 forwards run during trial 0 for {} of {} measurements ({:.3} s \
             median there, {:.2} s in all); the stage itself then {:.3} s median",
            ahead.len(),
            measured.len(),
            median(&ahead),
            ahead.iter().sum::<f64>(),
            median(&stage),
        );
    }

    /// How near the timed claims came to the outside witnesses' bounds, and how many were
    /// measured again.
    fn print_witnesses(&self) {
        let ratios = |side: usize| -> Vec<f64> {
            self.rows
                .iter()
                .filter_map(|r| r.claim_over_witness[side])
                .collect()
        };
        let (back_to_back, synced) = (ratios(0), ratios(1));
        if back_to_back.is_empty() && synced.is_empty() {
            return;
        }
        let least = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let rechecked: Vec<&Row> = self.rows.iter().filter(|r| r.timing_rechecked).collect();
        println!(
            "  timing witnesses ({} timed): claim / back-to-back witness {:.3} at least, {:.3} \
             median (bound 0.75); claim / synchronized witness {:.3} at least, {:.3} median \
             (bound 0.85 launch-bound, else 0.6); measured again: {} ({} of them correct)",
            back_to_back.len().max(synced.len()),
            least(&back_to_back),
            median(&back_to_back),
            least(&synced),
            median(&synced),
            rechecked.len(),
            rechecked
                .iter()
                .filter(|r| r.verdict == Verdict::Correct)
                .count()
        );
    }

    /// The machine's CPU use, the pool's and the reference cache's part.
    fn print_machine(&self) {
        let n = self.rows.len();
        if let Some(cpu) = self.cpu {
            println!(
                "  CPU (whole machine, {:.0} cores): {:.0}% busy over the batch, {:.0} core-s, {:.1} \
                 core-s per evaluation; with that much CPU work each, this machine judges at \
                 most {:.0} evaluations/hour",
                cpu.total_s / self.batch_s,
                100.0 * cpu.busy_s / cpu.total_s,
                cpu.busy_s,
                cpu.busy_s / n.max(1) as f64,
                cpu.ceiling_per_hour(self.per_hour())
                    .unwrap_or(f64::INFINITY)
            );
        }
        if let Some(saturation) = self.saturation {
            println!(
                "    saturated: at least 90% busy for {:.0}% of the batch, at least 75% for {:.0}% \
                 ({} ms readings)",
                100.0 * saturation.at_90,
                100.0 * saturation.at_75,
                CPU_SAMPLE.as_millis()
            );
        }
        if let Some(gpu) = self.gpu {
            println!(
                "  GPU (nvidia-smi, {} readings): kernels ran {:.1} s of the batch's {:.1} s \
                 ({:.0}%), {:.2} s per evaluation; with that much GPU work each, one GPU \
                 judges at most {:.0} evaluations/hour",
                gpu.samples,
                gpu.busy_s,
                gpu.span_s,
                100.0 * gpu.busy_s / gpu.span_s,
                gpu.busy_s / n.max(1) as f64,
                gpu.ceiling_per_hour(n).unwrap_or(f64::INFINITY)
            );
        }
        let prestarted = self.rows.iter().filter(|r| r.prestarted).count();
        let said_hello = self.rows.iter().filter(|r| r.said_hello).count();
        let retried = self.rows.iter().filter(|r| r.retried_alone).count();
        let ran_alone = self.rows.iter().filter(|r| r.ran_alone).count();
        let apart = self
            .rows
            .iter()
            .filter(|r| r.ran_one_large_at_a_time)
            .count();
        println!(
            "  prestarted pairs used: {prestarted}/{n} ({said_hello} had said hello when taken); \
             reference cache: {} hits, {} measured; retried alone after a shared-device fault: \
             {retried}; ran alone from the start (their task ran out of memory beside others \
             before): {ran_alone}; ran with no other large task's evaluation beside them: \
             {apart}",
            self.cache.0, self.cache.1
        );
        if self.launchers.0 > 0 {
            println!(
                "  kernel launchers named by candidates' processes: {}, of which the newest \
                 Triton seed was built with {}",
                self.launchers.0, self.launchers.1
            );
        }
        self.print_process_cpu();
    }

    /// Where the CPU goes: each side's processes, start-up (in the pool) apart.
    fn print_process_cpu(&self) {
        let measured: Vec<&Row> = self.rows.iter().filter(|r| r.cpu_s.is_some()).collect();
        if measured.is_empty() {
            return;
        }
        let n = measured.len() as f64;
        let mean = |f: &dyn Fn(&Row) -> f64| measured.iter().map(|r| f(r)).sum::<f64>() / n;
        let total = |side: usize| mean(&|r: &Row| r.cpu_s.map_or(0.0, |c| c[side]));
        let start = |side: usize| mean(&|r: &Row| r.start_cpu_s[side]);
        println!(
            "  CPU of the evaluations' own processes (mean over the {} that had them): referee \
             {:.2} s ({:.2} s of it before it was taken from the pool), candidate {:.2} s \
             ({:.2} s before; with its compilers)",
            measured.len(),
            total(0),
            start(0),
            total(1),
            start(1),
        );
        if let Some(cpu) = self.cpu {
            let per_eval = cpu.busy_s / self.rows.len().max(1) as f64;
            let own = (total(0) + total(1)) * n / self.rows.len().max(1) as f64;
            println!(
                "    the rest of the machine's busy CPU: {:.2} core-s per evaluation (the judge, \
                 pairs started for later or that died, everything else running; pairs ready \
                 when the clock started count above but were started before it)",
                per_eval - own
            );
        }
    }

    /// Each judge stage: median over the evaluations that ran it, sum over all; then the
    /// correct evaluations' stages alone, each split into its time under a share of the GPU,
    /// its waits for the GPU lock and the rest (the judge's and the processes' own work and
    /// round trips): where a correct evaluation's overhead goes.
    fn print_stages(&self) {
        println!("  per stage (median over the evaluations that ran it / sum over all):");
        for name in self.stage_names(|_| true) {
            let values: Vec<f64> = self
                .rows
                .iter()
                .filter_map(|r| r.stages.get(name).copied())
                .collect();
            println!(
                "    {:<18} {:>8.3} s median {:>9.2} s sum  ({} evaluations)",
                name,
                median(&values),
                values.iter().sum::<f64>(),
                values.len()
            );
        }
        let correct = |r: &Row| r.kind == Kind::Correct && r.verdict == Verdict::Correct;
        if !self.rows.iter().any(correct) {
            return;
        }
        println!(
            "  the correct evaluations' stages, median: stage / under a GPU share / waiting for \
             the GPU lock / the rest"
        );
        let rows: Vec<&Row> = self.rows.iter().filter(|r| correct(r)).collect();
        for name in self.stage_names(correct) {
            let of = |f: &dyn Fn(&Row) -> Option<f64>| {
                median(&rows.iter().filter_map(|r| f(r)).collect::<Vec<f64>>())
            };
            let gpu = |r: &Row, i: usize| r.stage_gpu_s.get(name).map_or(0.0, |g| g[i]);
            println!(
                "    {:<18} {:>8.3} s {:>8.3} s {:>8.3} s {:>8.3} s",
                name,
                of(&|r| r.stages.get(name).copied()),
                of(&|r| r.stages.contains_key(name).then(|| gpu(r, 0))),
                of(&|r| r.stages.contains_key(name).then(|| gpu(r, 1))),
                of(&|r| r.stages.get(name).map(|s| s - gpu(r, 0) - gpu(r, 1))),
            );
        }
    }

    /// The stages the chosen rows ran, in the order they run.
    fn stage_names(&self, chosen: impl Fn(&Row) -> bool) -> Vec<&String> {
        let mut names: Vec<&String> = self
            .rows
            .iter()
            .filter(|r| chosen(r))
            .flat_map(|r| r.stages.keys())
            .collect();
        names.sort_by_key(|name| (stage_order(name), name.as_str()));
        names.dedup();
        names
    }

    /// Where the wall time went, the judge's overhead among it, per kind of candidate too.
    fn print_overhead(&self) {
        let column = |f: &dyn Fn(&Row) -> f64| -> (f64, f64) {
            let values: Vec<f64> = self.rows.iter().map(f).collect();
            // `+ 0.0`: f64's `sum` starts from -0.0, which would print as "-0.00".
            (median(&values), values.iter().sum::<f64>() + 0.0)
        };
        for (label, (med, sum)) in [
            ("wall", column(&|r| r.wall_s)),
            ("candidate compile", column(&|r| r.compile_s)),
            ("GPU work (timed iterations run)", column(&|r| r.gpu_s)),
            ("GPU-lock wait", column(&|r| r.lock_wait_s)),
            ("trials: under a GPU share", column(&|r| r.trial_share_s)),
            (
                "  of which trial 0 (autotuning, first launches)",
                column(&|r| r.first_trial_share_s),
            ),
            (
                "trials: waiting for a share",
                column(&|r| r.trial_lock_wait_s),
            ),
            ("judge overhead", column(&|r| r.overhead_s)),
            (
                "judge overhead outside the trials",
                column(&|r| r.overhead_outside_trials_s),
            ),
            (
                "fixed part (verify+start+reference+load+outside)",
                column(&|r| r.fixed_s),
            ),
        ] {
            println!("    {label:<50} {med:>8.3} s median {sum:>9.2} s sum");
        }
        type Measure = fn(&Row) -> f64;
        let measures: [(&str, Measure); 2] = [
            ("judge overhead", |r| r.overhead_s),
            ("outside the trials", |r| r.overhead_outside_trials_s),
        ];
        for (label, measure) in measures {
            for kind in [Kind::Correct, Kind::Incorrect, Kind::Failing] {
                let values: Vec<f64> = self
                    .rows
                    .iter()
                    .filter(|r| r.kind == kind)
                    .map(measure)
                    .collect();
                if !values.is_empty() {
                    println!(
                        "    {label}, {:<10} {:>8.3} s median {:>8.3} s mean",
                        format!("{kind:?}").to_lowercase(),
                        median(&values),
                        values.iter().sum::<f64>() / values.len() as f64
                    );
                }
            }
        }
        println!(
            "  judge overhead = wall - candidate compile (on a GPU: the trials' time without a \
             GPU share, which the judge lets go exactly while Triton compiles; on the CPU: first \
             trial - median later trial, each without its GPU-lock waits) - GPU work (timed \
             iterations incl. warm-up of the candidate and of each reference timing measured, \
             not cached) - GPU-lock wait (queued behind other evaluations' timed phases); \
             outside the trials = wall - the trials - GPU work - GPU-lock wait outside the trials"
        );
        if let Some(share) = compile_share(&self.rows) {
            println!(
                "  the evaluations' wall: {:.0}% of it the candidates' own compiles, during which \
                 an evaluation counts among the evaluations at once (on a GPU without a share \
                 of it)",
                100.0 * share
            );
        }
    }

    /// How the exclusive lock was held by timed phases, and whether untimed work ran beside.
    fn print_gpu_lock(&self) {
        if !self.intervals.is_empty() {
            let mut intervals = self.intervals.clone();
            intervals.sort();
            let overlaps = intervals.windows(2).filter(|w| w[1].0 < w[0].1).count();
            let held: f64 = intervals.iter().map(|(a, b)| (*b - *a).as_secs_f64()).sum();
            let beside_timed = self
                .untimed
                .iter()
                .filter(|(a, b)| intervals.iter().any(|(c, d)| a < d && c < b))
                .count();
            println!(
                "  timed phases: {} under the GPU lock, {held:.1} s held, {overlaps} overlapping; \
                 untimed GPU work: {} shares, {beside_timed} during a timed phase",
                intervals.len(),
                self.untimed.len()
            );
        }
        if let Some(at_once) = Occupancy::of(&self.untimed) {
            println!(
                "  untimed GPU work at once (shares held): {:.2} on average while any was held, \
                 {} at most; some held for {:.1} s of the {:.1} s batch",
                at_once.mean_while_held, at_once.most, at_once.held_s, self.batch_s
            );
        }
    }

    fn write_json(
        &self,
        mode: &str,
        cases: &[&Case],
        file: &mut std::fs::File,
    ) -> anyhow::Result<()> {
        use std::io::Write;
        for (row, case) in self.rows.iter().zip(cases) {
            let line = serde_json::json!({
                "mode": mode,
                "task": case.job.task_name,
                "kind": format!("{:?}", row.kind).to_lowercase(),
                "verdict": row.verdict.as_str(),
                "wall_s": row.wall_s,
                "compile_s": row.compile_s,
                "gpu_s": row.gpu_s,
                "lock_wait_s": row.lock_wait_s,
                "trial_share_s": row.trial_share_s,
                "first_trial_share_s": row.first_trial_share_s,
                "first_trial_parts": row.first_trial_parts.map(|p| serde_json::json!({
                    "prepare_s": p.prepare,
                    "run_before_compile_s": p.run_before_compile,
                    "run_after_compiles_s": p.run_after_compiles,
                    "compiles": p.compiles,
                    "check_s": p.check,
                })),
                "later_trial_parts": row.later_trial_parts.iter().map(|[prepare, run, check]| {
                    serde_json::json!({"prepare_s": prepare, "run_s": run, "check_s": check})
                }).collect::<Vec<_>>(),
                "trial_lock_wait_s": row.trial_lock_wait_s,
                "overhead_s": row.overhead_s,
                "overhead_outside_trials_s": row.overhead_outside_trials_s,
                "fixed_s": row.fixed_s,
                "prestarted": row.prestarted,
                "said_hello": row.said_hello,
                "retried_alone": row.retried_alone,
                "pairs_dropped_to_run_alone": row.pairs_dropped_to_run_alone,
                "ran_alone": row.ran_alone,
                "ran_one_large_at_a_time": row.ran_one_large_at_a_time,
                "cpu_s": row.cpu_s,
                "start_cpu_s": row.start_cpu_s,
                "stages": row.stages,
                "stage_gpu_s": row.stage_gpu_s,
                "failure": row.failure,
                "findings": row.findings,
                "claim_over_back_to_back": row.claim_over_witness[0],
                "claim_over_synced": row.claim_over_witness[1],
                "timing_rechecked": row.timing_rechecked,
                "precision_ahead_s": row.precision_ahead_s,
                "locks": row.lock_spans.iter().map(|span| span.json(self.started)).collect::<Vec<_>>(),
            });
            writeln!(file, "{line}")?;
        }
        Ok(())
    }
}

/// Two `[referee, candidate]` figures added side by side.
fn add2(a: [f64; 2], b: [f64; 2]) -> [f64; 2] {
    [a[0] + b[0], a[1] + b[1]]
}

/// Stages in the order they run.
fn stage_order(name: &str) -> usize {
    const ORDER: &[&str] = &[
        "verify",
        "setup",
        "start",
        "reference",
        "large-claim",
        "load",
        "trials",
        "profiler-warm-up",
        "repeat",
        "precision",
        "generalize",
        "profiler-start",
        "timed-inputs",
        "timing",
        "profile",
        "timing-recheck",
        "timed-output",
        "precision-candidate-stopped",
        "(outside stages)",
    ];
    ORDER.iter().position(|n| *n == name).unwrap_or(ORDER.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_results::result_with_stages;

    #[test]
    fn a_task_left_out_is_named_as_the_set_names_it() {
        let without = vec!["23_Softmax".to_string()];
        let left = kept(KERNELBENCH_SET, |(_, name)| name, &without).expect("a task of the set");
        assert_eq!(left.len(), KERNELBENCH_SET.len() - 1);
        assert!(left.iter().all(|(_, name)| *name != "23_Softmax"));
        let typo = vec!["23_softmax".to_string()];
        let err = kept(KERNELBENCH_SET, |(_, name)| name, &typo)
            .expect_err("not a task of the set")
            .to_string();
        assert!(
            err.contains("--without-task 23_softmax: not a task of this set"),
            "{err}"
        );
    }

    /// Without a GPU gate (no share seen): a first trial that waited 3 s for the GPU lock
    /// compiled for 0.9 s, not 3.9 s: the wait is taken off once, as a lock wait.
    #[test]
    fn lock_waits_inside_a_trial_are_not_counted_as_compiling() {
        let result = result_with_stages(
            Verdict::Incorrect,
            &[
                ("start", 0.5, "ok"),
                ("trial_0", 5.0, "ok"),
                ("trial_1", 1.0, "ok"),
                ("trial_2", 1.2, "ok"),
            ],
        );
        let seen = Seen {
            lock_wait_s: 3.0,
            trial_lock_wait_s: BTreeMap::from([("trial_0".to_string(), 3.0)]),
            ..Seen::default()
        };
        let row = row(&result, Kind::Incorrect, &seen, true);
        assert!((row.compile_s - 0.9).abs() < 1e-9, "{}", row.compile_s);
        assert!((row.overhead_s - 6.1).abs() < 1e-9, "{}", row.overhead_s);
        // 10 - 7.2 s of trials, no GPU work, no lock wait outside the trials.
        assert!(
            (row.overhead_outside_trials_s - 2.8).abs() < 1e-9,
            "{}",
            row.overhead_outside_trials_s
        );
        // Two such evaluations: 1.8 s of compiling in 20 s of wall.
        let twice = [row, super::row(&result, Kind::Incorrect, &seen, true)];
        let share = compile_share(&twice).expect("wall time");
        assert!((share - 0.09).abs() < 1e-9, "{share}");
        assert_eq!(compile_share(&[]), None);
    }

    /// Shares held in the first trial count twice: in the trials' sum and on their own.
    #[test]
    fn the_first_trials_share_is_counted_apart() {
        let mut seen = Seen::default();
        seen.add_share(Some("trial_0"), 2.0);
        seen.add_share(Some("trial_3"), 0.5);
        seen.add_share(Some("precision"), 4.0);
        seen.add_share(None, 1.0);
        let row = row(
            &result_with_stages(Verdict::Incorrect, &[("trial_0", 3.0, "ok")]),
            Kind::Correct,
            &seen,
            true,
        );
        assert_eq!((row.trial_share_s, row.first_trial_share_s), (2.5, 2.0));
        // Per stage too, the trials summed under one name; a share outside any stage nowhere.
        let held = |name: &str| row.stage_gpu_s.get(name).map(|g| g[0]);
        assert_eq!((held("trials"), held("precision")), (Some(2.5), Some(4.0)));
        assert_eq!(row.stage_gpu_s.len(), 2);
    }

    /// A first trial's shares split into prepare, the run before and after its compiles, and
    /// check; fewer than three shares (a run that failed before its check) split into nothing.
    #[test]
    fn the_first_trials_shares_split_into_their_parts() {
        let parts = FirstTrialShares::split(&[0.1, 0.2, 0.3, 0.4, 0.5]).expect("five shares");
        assert_eq!(
            parts,
            FirstTrialShares {
                prepare: 0.1,
                run_before_compile: 0.2,
                run_after_compiles: 0.7,
                compiles: 2,
                check: 0.5,
            }
        );
        let mut seen = Seen::default();
        for held_s in [0.1, 0.2, 0.3, 0.4, 0.5] {
            seen.add_share(Some("trial_0"), held_s);
        }
        let passed = [("trial_0", 1.5, "ok"), ("trial_1", 0.5, "ok")];
        let row_parts = |stages: &[(&str, f64, &str)]| {
            row(
                &result_with_stages(Verdict::Incorrect, stages),
                Kind::Correct,
                &seen,
                true,
            )
            .first_trial_parts
        };
        assert_eq!(row_parts(&passed), Some(parts));
        assert_eq!(row_parts(&passed[..1]), None, "trial 0 did not pass");
        let uncompiled = FirstTrialShares::split(&[0.1, 0.2, 0.3]).expect("three shares");
        assert_eq!(
            (uncompiled.run_after_compiles, uncompiled.compiles),
            (0.0, 0)
        );
        assert_eq!(FirstTrialShares::split(&[0.1, 0.2]), None);
    }

    /// A later trial's three shares are its prepare, run and check; a later trial that held
    /// more (it compiled again) or fewer (it failed before its check) gives none.
    #[test]
    fn a_later_trials_shares_are_its_prepare_run_and_check() {
        let mut seen = Seen::default();
        for (stage, held_s) in [
            ("trial_0", 0.9),
            ("trial_1", 0.01),
            ("trial_1", 0.15),
            ("trial_1", 0.04),
            ("trial_2", 0.02),
            ("trial_2", 0.1),
            ("trial_2", 0.3),
            ("trial_2", 0.05),
            ("trial_3", 0.02),
            ("trial_3", 0.2),
        ] {
            seen.add_share(Some(stage), held_s);
        }
        let result = result_with_stages(Verdict::Correct, &[("trial_0", 1.5, "ok")]);
        let row = row(&result, Kind::Correct, &seen, true);
        assert_eq!(row.later_trial_parts, vec![[0.01, 0.15, 0.04]]);
        assert!((row.first_trial_share_s - 0.9).abs() < 1e-9);
    }

    /// A result the engine ran again alone says so (its info finding), and the row counts it
    /// and keeps why; other info findings stay out of the row.
    #[test]
    fn a_retry_alone_is_counted_from_its_finding() {
        let mut result = result_with_stages(Verdict::Incorrect, &[("start", 0.5, "ok")]);
        let seen = Seen::default();
        assert!(!row(&result, Kind::Correct, &seen, true).retried_alone);
        result.findings.push(crucible_result::Finding::new(
            "retried-alone",
            crucible_result::Severity::Info,
            "the judge failed in `precision` while sharing the device",
        ));
        result.findings.push(crucible_result::Finding::new(
            "sandbox-degraded",
            crucible_result::Severity::Info,
            "no minimal root",
        ));
        let row = row(&result, Kind::Correct, &seen, true);
        assert!(row.retried_alone);
        assert_eq!(
            row.findings,
            ["Info retried-alone: the judge failed in `precision` while sharing the device"]
        );
    }

    /// A timed result gives its claim over each outside witness, and a recheck of them is
    /// counted and kept among the row's findings.
    #[test]
    fn a_timed_row_gives_its_claim_over_the_witnesses() {
        let mut result = result_with_stages(Verdict::Correct, &[("timing", 0.2, "ok")]);
        let seen = Seen::default();
        assert_eq!(
            row(&result, Kind::Correct, &seen, true).claim_over_witness,
            [None, None]
        );
        let stats = |samples: &[f64]| Stats::from_samples(samples).expect("samples");
        result.timing = Some(crucible_result::Timing {
            reference: stats(&[1.0]),
            candidate: stats(&[0.30, 0.31, 0.29]),
            warmup: 3,
            l2_flush_bytes: 0,
            candidate_phase_wall_s: 0.1,
            profiled_busy_ms: Some(0.15),
            outside_forward_ms: Some(0.15),
            outside_batch_forwards: Some(60),
            synced_forward_ms: Some(0.36),
            reference_matched: None,
            reference_matched_class: None,
            autotune: None,
        });
        result.findings.push(crucible_result::Finding::new(
            "timing-rechecked",
            crucible_result::Severity::Info,
            "measured again",
        ));
        let row = row(&result, Kind::Correct, &seen, true);
        let [back_to_back, synced] = row.claim_over_witness;
        assert!((back_to_back.expect("timed") - 2.0).abs() < 1e-9);
        assert!((synced.expect("timed") - 0.30 / 0.36).abs() < 1e-9);
        assert!(row.timing_rechecked);
        assert_eq!(row.findings, ["Info timing-rechecked: measured again"]);
    }

    /// With a GPU gate, compiling is the trials' time without a share and without waiting for
    /// one, also for a candidate whose only trial failed (no later trial to compare with).
    #[test]
    fn on_a_gpu_compiling_is_the_trials_time_without_a_share() {
        let result = result_with_stages(
            Verdict::Incorrect,
            &[("start", 0.5, "ok"), ("trial_0", 6.0, "failed")],
        );
        let seen = Seen {
            lock_wait_s: 1.5,
            trial_lock_wait_s: BTreeMap::from([("trial_0".to_string(), 1.0)]),
            trial_share_s: 1.5,
            ..Seen::default()
        };
        let row = row(&result, Kind::Incorrect, &seen, true);
        // 6 s in the trial: 1.5 under a share, 1 waiting for one, 3.5 compiling.
        assert!((row.compile_s - 3.5).abs() < 1e-9, "{}", row.compile_s);
        assert!((row.overhead_s - 5.0).abs() < 1e-9, "{}", row.overhead_s);
        assert!(
            (row.overhead_outside_trials_s - 3.5).abs() < 1e-9,
            "{}",
            row.overhead_outside_trials_s
        );
    }

    /// Under shares a correct candidate's later trials are what a trial costs; without, the
    /// trials less the compile, over all of them; only correct candidates count.
    #[test]
    fn a_trials_cost_is_its_later_shares_or_its_stage_less_the_compile() {
        let result = result_with_stages(Verdict::Correct, &[("trial_0", 2.0, "ok")]);
        let shared = Seen {
            trial_share_s: 1.4,
            first_trial_share_s: 0.6,
            ..Seen::default()
        };
        let rows = [
            row(&result, Kind::Correct, &shared, true),
            row(
                &result_with_stages(Verdict::Incorrect, &[("trial_0", 2.0, "failed")]),
                Kind::Incorrect,
                &shared,
                true,
            ),
        ];
        let (what, each) = trial_cost(&rows, 5);
        assert_eq!(what, "a later trial under its shares");
        assert_eq!(each.len(), 1);
        assert!((each[0] - 0.2).abs() < 1e-9, "{each:?}");
        let mut alone = row(&result, Kind::Correct, &Seen::default(), false);
        alone.stages.insert("trials".into(), 3.0);
        alone.compile_s = 2.0;
        let (what, each) = trial_cost(&[alone], 5);
        assert!(what.starts_with("a trial (the trials' stage"), "{what}");
        assert!((each[0] - 0.2).abs() < 1e-9, "{each:?}");
    }

    #[test]
    fn occupancy_weighs_how_many_were_open_by_how_long() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
        // 0-100 one open, 100-200 two, 200-300 one, 300-400 none, 400-500 one (touching ends
        // at 500 do not overlap the next start).
        let intervals = [
            (at(0), at(200)),
            (at(100), at(300)),
            (at(400), at(500)),
            (at(500), at(600)),
        ];
        let o = Occupancy::of(&intervals).expect("some held");
        assert!((o.held_s - 0.5).abs() < 1e-9, "{o:?}");
        // (100*1 + 100*2 + 100*1 + 100*1 + 100*1) / 500
        assert!((o.mean_while_held - 1.2).abs() < 1e-9, "{o:?}");
        assert_eq!(o.most, 2);
        assert_eq!(Occupancy::of(&[]), None);
        assert_eq!(Occupancy::of(&[(at(5), at(5))]), None);
    }

    #[test]
    fn cpu_use_counts_idle_and_io_wait_as_not_busy() {
        let before = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        let after = "cpu  400 10 90 1400 100 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        let (before, after) = (cpu_ticks(before).unwrap(), cpu_ticks(after).unwrap());
        assert_eq!(before, (150, 1000));
        let used = CpuUse::between(before, after).unwrap();
        // 350 busy ticks of 1000: 3.5 of 10 core-seconds.
        assert_eq!(
            used,
            CpuUse {
                busy_s: 3.5,
                total_s: 10.0
            }
        );
        // 1000 an hour at 35% busy: at most 1000 / 0.35 with every core busy.
        let ceiling = used.ceiling_per_hour(1000.0).expect("busy time");
        assert!((ceiling - 1000.0 / 0.35).abs() < 1e-6, "{ceiling}");
        assert_eq!(
            CpuUse {
                busy_s: 0.0,
                total_s: 10.0
            }
            .ceiling_per_hour(1000.0),
            None
        );
        assert_eq!(cpu_ticks("intr 1 2 3\n"), None);
        assert_eq!(CpuUse::between(after, before), None);
    }

    #[test]
    fn saturation_weighs_each_interval_by_its_length() {
        // Three intervals: 95 of 100 ticks busy, 80 of 100, 10 of 200.
        let readings = [(0, 0), (95, 100), (175, 200), (185, 400)];
        let saturation = Saturation::of(&readings).unwrap();
        assert_eq!(saturation.at_90, 0.25);
        assert_eq!(saturation.at_75, 0.5);
        assert_eq!(Saturation::of(&readings[..1]), None);
    }

    fn repo(path: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Whether the static verifier (the judge's default policy) rejects a source.
    fn rejected(source: &str) -> bool {
        let report = crucible_verify::verify(source, &crucible_verify::Policy::default());
        report
            .findings
            .iter()
            .any(|f| f.severity == crucible_result::Severity::Reject)
    }

    #[test]
    fn rename_identifier_leaves_longer_names_alone() {
        assert_eq!(
            rename_identifier(
                "class ModelNew(nn.Module):\n    super(ModelNew, self).f(ModelNewer, _ModelNew)",
                "ModelNew",
                "_H"
            ),
            "class _H(nn.Module):\n    super(_H, self).f(ModelNewer, _ModelNew)"
        );
    }

    #[test]
    fn derived_candidates_reach_the_stage_they_are_meant_to_fail_in() {
        // Every variant but the syntax error must get past the static verifier, or the set
        // would measure the verifier, not the judge.
        let solutions = [
            "examples/kernelbench/level1/1_Square_matrix_multiplication_.py",
            "examples/kernelbench/level1/23_Softmax.py",
            "examples/kernelbench/level2/12_Gemm_Multiply_LeakyReLU.py",
            "examples/solutions/06_softmax.py",
        ];
        for solution in solutions.map(repo) {
            assert!(!rejected(&solution));
            let mut kinds = Vec::new();
            for task in 0..2 {
                for variant in 0..8 {
                    let (kind, source) = derive(&solution, task, variant);
                    kinds.push(kind);
                    let syntax_error = variant == 7 && task == 0;
                    assert_eq!(
                        rejected(&source),
                        syntax_error,
                        "task {task} variant {variant}:\n{source}"
                    );
                }
            }
            // The honest part names only itself: `ModelNew` is the derived class alone.
            let (_, incorrect) = derive(&solution, 0, 1);
            let honest_part = &incorrect[..incorrect.rfind("class ModelNew(").unwrap()];
            assert_eq!(rename_identifier(honest_part, "ModelNew", "X"), honest_part);
            let count = |kind| kinds.iter().filter(|k| **k == kind).count();
            assert_eq!(
                (
                    count(Kind::Correct),
                    count(Kind::Incorrect),
                    count(Kind::Failing)
                ),
                (8, 4, 4)
            );
        }
    }
}
