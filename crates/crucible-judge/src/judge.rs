//! One evaluation: verify, start the referee and a fresh candidate process, run the seeded
//! trials, time, profile, and assemble the result document.
//!
//! The referee's failures are the judge's (`infra_error`); the candidate's failures are
//! classified by stage. Nothing the candidate process reports is taken as a verdict: the
//! referee compares outputs, and this module does the arithmetic.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crucible_result::{
    AutotuneBudget, EvalResult, Failure, FailureClass, FileRef, Finding, Launch, Precision,
    Profile, SCHEMA, Seeds, Severity, Stage, StageStatus, Timing, Tolerance, Trial, Verdict,
};

use crate::device::Device;
use crate::error::InfraError;
use crate::precision;
use crate::process::{HarnessProcess, Spawn};
use crate::protocol::{Hello, HelloFailure, Reply, Tolerances, parse_reply};
use crate::runtime::{Runtime, harness_env, hex, referee_env, triton_cache_dir};
use crate::sandbox::Sandbox;
use crate::triton_seed::{LauncherSignatures, TritonSeed};
use crate::zygote::HarnessZygote;

mod calls;
mod generalize;
mod hooks;
mod record;
mod session;
pub use generalize::{Generalize, SHAPE_SPECIALIZED};
pub use hooks::{
    Abort, LargeTasks, ReferenceKey, ReferenceTiming, ReferenceTimingCache, StageObserver,
    Teardown, TimedPhaseGate, TimedPhaseGuard,
};

/// Module name the candidate harness imports the candidate file as; launches of kernels
/// defined there are the candidate's own.
const CANDIDATE_MODULE: &str = "crucible_candidate";

/// Coverage below this is flagged: most GPU time is spent outside the candidate's kernels.
pub const LOW_COVERAGE: f64 = 0.5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToleranceProfile {
    /// atol = rtol = 1e-2 for every dtype (what Dr. Kernel trained with).
    KbV0,
    /// 1e-4 for fp32, 1e-2 for fp16/bf16 (current KernelBench).
    Strict,
}

impl ToleranceProfile {
    pub fn parse(name: &str) -> Option<ToleranceProfile> {
        match name {
            "kb-v0" => Some(ToleranceProfile::KbV0),
            "strict" => Some(ToleranceProfile::Strict),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ToleranceProfile::KbV0 => "kb-v0",
            ToleranceProfile::Strict => "strict",
        }
    }

    /// The (atol, rtol) pairs the referee applies, per output precision.
    pub(crate) fn referee_tolerances(self) -> Tolerances {
        let full = self.full_precision();
        Tolerances {
            fp32: [full, full],
            half: [1e-2, 1e-2],
        }
    }

    /// (atol, rtol) for fp32 and wider outputs.
    fn full_precision(self) -> f64 {
        match self {
            ToleranceProfile::KbV0 => 1e-2,
            ToleranceProfile::Strict => 1e-4,
        }
    }
}

/// Who else of the caller's holds memory on an evaluation's device (`EvalConfig::device_sharing`).
/// A measurement the judge cannot make for want of memory is the task's size only when nobody
/// does: left undone there, it would let through a candidate only it refuses (a softmax scaled
/// by 1.5, which atol passes, was `correct` on an 80 GiB H100 with twelve waiting pairs beside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSharing {
    /// Nothing else: a shortage is the task's.
    #[default]
    Nobody,
    /// Processes whose memory stays put (a warm pool's waiting pairs, each with its CUDA
    /// context): waiting does not help; a run with them gone does.
    WaitingProcesses,
    /// Other evaluations, whose memory comes and goes: a shortage may pass after a pause.
    Evaluations,
}

impl DeviceSharing {
    /// Who, for messages: "... while {who} shared the device".
    pub fn who(self) -> &'static str {
        match self {
            DeviceSharing::Nobody => "nothing else",
            DeviceSharing::WaitingProcesses => "the warm pool's waiting processes",
            DeviceSharing::Evaluations => "other evaluations",
        }
    }
}

/// How the referee shares tensors with the candidate process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// CUDA IPC on a GPU, shared-memory files on the CPU.
    Auto,
    /// Shared-memory files (on a GPU, staged through host memory).
    Shm,
    CudaIpc,
}

#[derive(Debug, Clone)]
pub struct TimingConfig {
    pub warmup: u32,
    pub iters: u32,
    pub flush_bytes: u64,
    /// The CPU priority (nice value) of the referee's and the candidate's processes while the
    /// timed phases run; `None` leaves it. A timed sample spans the forward's Python launch path,
    /// so a timed process that waits for a CPU behind other evaluations' compiles measures
    /// slower (see `session::TimedPriority`).
    pub nice: Option<i32>,
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            warmup: 5,
            iters: 100,
            flush_bytes: 256 << 20,
            nice: Some(TIMED_NICE),
        }
    }
}

/// The timed processes' nice value during the timed phases: ahead of every other process at
/// the default 0 (the judge runs as root, so it may raise them).
pub const TIMED_NICE: i32 = -10;

/// Deadlines per stage. The first trial includes Triton compilation.
#[derive(Debug, Clone)]
pub struct StageLimits {
    pub start: Duration,
    pub load: Duration,
    pub trial: Duration,
    pub timing: Duration,
}

impl StageLimits {
    pub fn for_device(device: Device) -> StageLimits {
        let cpu = !device.is_gpu();
        StageLimits {
            start: Duration::from_secs(120),
            load: Duration::from_secs(60),
            trial: Duration::from_secs(if cpu { 120 } else { 60 }),
            timing: Duration::from_secs(180),
        }
    }

    /// The same deadline for every candidate stage (start-up excluded: importing torch is the
    /// judge's cost, not the candidate's).
    pub fn uniform(device: Device, stage: Duration) -> StageLimits {
        StageLimits {
            load: stage,
            trial: stage,
            timing: stage,
            ..StageLimits::for_device(device)
        }
    }
}

#[derive(Debug, Clone)]
pub struct EvalConfig {
    pub device: Device,
    /// Replays an earlier evaluation; fresh randomness when `None`.
    pub seed: Option<u64>,
    pub trials: u32,
    pub tolerance: ToleranceProfile,
    /// Task size profile; `None` picks `small` on the CPU when the task has one, else `full`.
    pub size_profile: Option<String>,
    pub timing: Option<TimingConfig>,
    pub limits: StageLimits,
    pub transport: Transport,
    pub sandbox: Option<Sandbox>,
    /// Draw inputs on the CPU and copy them over, as KernelBench does (only to measure it).
    pub inputs_on_host: bool,
    /// Static verifier policy for the first stage; `None` skips it (to test runtime defenses).
    pub verify_policy: Option<crucible_verify::Policy>,
    /// The generalization trial at perturbed task sizes (a `shape-specialized` flag).
    pub generalize: Generalize,
    /// Held around the timed phases (exclusive use of the GPU); `None`: nothing to wait for.
    pub timed_phases: Option<Arc<dyn TimedPhaseGate>>,
    /// Reference timings shared between evaluations; `None`: the reference is timed every time.
    pub reference_timings: Option<Arc<dyn ReferenceTimingCache>>,
    /// Takes the killed processes (to reap them and remove their scratch off the critical
    /// path); `None`: the evaluation waits for that itself.
    pub teardown: Option<Arc<dyn Teardown>>,
    /// Told each stage as it starts; `None`: nobody watches.
    pub stage_observer: Option<Arc<dyn StageObserver>>,
    /// Lets the caller stop the evaluation and kill its processes; `None`: it runs to the end.
    pub abort: Option<Abort>,
    /// What else of the caller's holds memory on the device beside this evaluation: where
    /// anything does, the judge's running out of device memory is an `infra_error` the caller
    /// can retry with the device cleared, not a property of the task.
    pub device_sharing: DeviceSharing,
    /// Untimed device work estimated at this many bytes or more takes the gate's large share
    /// ([`TimedPhaseGate::share_large`]): a precision measurement, and the trials once one
    /// trial's tensors reach it (every claim, for a task in `large_tasks`). 16 GiB by default;
    /// a service engine sets it from the GPU's memory ([`large_work_bytes_for`]).
    pub large_work_bytes: u64,
    /// Tasks an earlier evaluation found large, shared between evaluations; `None`: each
    /// evaluation finds out in its first trial.
    pub large_tasks: Option<Arc<LargeTasks>>,
    /// The device's memory, where the caller knows it (a service engine sets it with
    /// `large_work_bytes`). With evaluations beside this one (`device_sharing`), the referee
    /// sizes the trials from the task's shapes before the first is drawn: large ones take the
    /// large share from the first claim on, and where the trials and the precision measurement
    /// would need more than half of this, the evaluation holds the gate's large-evaluation claim
    /// ([`TimedPhaseGate::large_evaluation`]) from then to its end. `None`: neither.
    pub device_memory_bytes: Option<u64>,
    /// Where the launchers candidates' processes built are named, for the next Triton seed
    /// (a service engine's pool on a GPU); `None`: not kept.
    pub launchers: Option<Arc<LauncherSignatures>>,
    /// The autotuner's benchmark budget in the candidate process (GPU only; Triton's
    /// interpreter is left as it is).
    pub autotune: AutotuneBudget,
    /// The referee runs the precision measurement's float64 forwards while the candidate runs
    /// trial 0 (where their copies fit), instead of in the precision stage; the same numbers.
    pub precision_ahead: bool,
    /// The repeat and the precision measurement run with the device to the evaluation itself
    /// (the timed phases' exclusive claim on `timed_phases`, where there is one) instead of
    /// under a share beside other evaluations' work, whose time slices every wait for a result
    /// there otherwise waits for.
    pub exclusive_checks: bool,
    /// A small trial's shared inputs and output slots are the memory the trial before shared,
    /// written again by the referee, and the candidate's process keeps its mapping of them
    /// instead of opening one each trial (over CUDA IPC an open and a close, each a wait for
    /// the device beside other evaluations' time slices). On by default since an H100 run
    /// (2026-12-06) put a correct candidate's later trial at 0.024 s median with it against
    /// 0.109-0.124 s without, at 4 evaluations at once, every verdict the same.
    pub standing_shares: bool,
}

/// The large-work size for a device with `memory_bytes`: an eighth of it (about 17 GiB on an
/// H200's 139 GiB, where two 23_Softmax precision measurements of about 60 GB each, or three of its
/// 25.6 GB trials beside their kept trials, ran the device out of memory).
pub fn large_work_bytes_for(memory_bytes: u64) -> u64 {
    memory_bytes / 8
}

impl EvalConfig {
    pub fn new(device: Device) -> EvalConfig {
        EvalConfig {
            device,
            seed: None,
            trials: 5,
            tolerance: ToleranceProfile::KbV0,
            size_profile: None,
            timing: Some(TimingConfig::default()),
            limits: StageLimits::for_device(device),
            transport: Transport::Auto,
            sandbox: Some(Sandbox::default()),
            inputs_on_host: false,
            verify_policy: Some(crucible_verify::Policy::default()),
            generalize: Generalize::Auto,
            timed_phases: None,
            reference_timings: None,
            teardown: None,
            stage_observer: None,
            abort: None,
            device_sharing: DeviceSharing::Nobody,
            large_work_bytes: 16 << 30,
            large_tasks: None,
            device_memory_bytes: None,
            launchers: None,
            autotune: AutotuneBudget::FAST,
            precision_ahead: true,
            exclusive_checks: false,
            standing_shares: true,
        }
    }

    /// Whether this configuration times (and profiles) correct candidates.
    pub fn times(&self) -> bool {
        self.is_gpu() && self.timing.is_some()
    }

    fn is_gpu(&self) -> bool {
        self.device.is_gpu()
    }

    fn transport_name(&self) -> &'static str {
        match (self.transport, self.is_gpu()) {
            (Transport::Auto, true) | (Transport::CudaIpc, _) => "cuda_ipc",
            _ => "shm",
        }
    }
}

/// Seeds derived from one base seed, so `--seed BASE` replays an evaluation exactly.
pub fn derive_seeds(base: u64, trials: u32) -> Seeds {
    // Seeds stay below 2^53 so every JSON reader holds them exactly.
    let mask = (1u64 << 53) - 1;
    let mut state = base;
    let mut next = || splitmix64(&mut state) & mask;
    let init = next();
    let trials = (0..trials).map(|_| next()).collect();
    Seeds {
        base,
        init,
        trials,
        timing: next(),
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A fresh base seed from the OS.
pub fn fresh_seed() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n == 8 {
        u64::from_le_bytes(bytes) & ((1u64 << 53) - 1)
    } else {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        splitmix64(&mut (nanos ^ u64::from(std::process::id()))) & ((1u64 << 53) - 1)
    }
}

pub fn file_ref(path: &Path, bytes: &[u8]) -> FileRef {
    use sha2::{Digest, Sha256};
    FileRef {
        name: path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        path: path.display().to_string(),
        sha256: hex(&Sha256::digest(bytes)),
    }
}

/// Why an evaluation stopped early.
enum Stop {
    Candidate(Failure),
    Infra(InfraError),
}

/// Everything one evaluation has found so far: the stages fill it in, and [`assemble`] turns
/// it into the result document.
struct Evaluation<'a> {
    runtime: &'a Runtime,
    cfg: &'a EvalConfig,
    seeds: Seeds,
    stages: Vec<Stage>,
    findings: Vec<Finding>,
    trials: Vec<Trial>,
    launches: Vec<Launch>,
    env: crucible_result::Env,
    size_profile: String,
    /// The task file's sha256 (a reference timing's cache key).
    task_sha256: String,
    generalization: Option<crucible_result::Generalization>,
    /// Why timing could not run although the candidate is correct.
    timing_blocked: Option<String>,
    timing: Option<Timing>,
    profile: Option<Profile>,
    /// Measured on trial 0's inputs once every trial passed.
    precision: Option<Precision>,
    /// A trial's tensors reached the large-work size: the rest of the evaluation's untimed
    /// device work takes the gate's large share (see `session::trial_work_is_large`).
    large_device_work: bool,
    /// The evaluation holds the gate's exclusive claim (`EvalConfig::exclusive_checks`): its
    /// untimed device work needs no share meanwhile.
    holds_device: bool,
    /// The share held for a whole trial (`Session::trial_under_one_share`): the trial's
    /// requests take none of their own meanwhile, and it is let go and taken again between
    /// two of them where a timed phase waits (`session::yield_share`).
    trial_share: Option<TimedPhaseGuard>,
    /// The gate's large-evaluation claim, held to the evaluation's end once taken (see
    /// `EvalConfig::device_memory_bytes`).
    large_claim: Option<TimedPhaseGuard>,
}

impl Evaluation<'_> {
    /// Records a runtime finding once, however many trials show it.
    fn add_once(&mut self, finding: Finding) {
        if !self.findings.iter().any(|f| f.code == finding.code) {
            self.findings.push(finding);
        }
    }

    fn stage<T>(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut Self) -> Result<T, Stop>,
    ) -> Result<T, Stop> {
        if let Some(observer) = &self.cfg.stage_observer {
            observer.stage_started(name);
        }
        let start = Instant::now();
        let outcome = f(self);
        let (status, diagnostics) = match &outcome {
            Ok(_) => (StageStatus::Ok, vec![]),
            Err(Stop::Candidate(failure)) => (StageStatus::Failed, vec![failure.message.clone()]),
            Err(Stop::Infra(error)) => (StageStatus::Failed, vec![error.to_string()]),
        };
        self.stages.push(Stage {
            name: name.to_string(),
            status,
            duration_s: start.elapsed().as_secs_f64(),
            diagnostics,
        });
        outcome
    }
}

/// Evaluates `candidate_src` (read from `candidate_path`) against the task file at `task_path`.
///
/// Never fails: every problem, the judge's own included, becomes a verdict in the result.
pub fn evaluate(
    runtime: &Runtime,
    task_path: &Path,
    task_src: &[u8],
    candidate_path: &Path,
    candidate_src: &[u8],
    cfg: &EvalConfig,
) -> EvalResult {
    evaluate_with(
        runtime,
        task_path,
        task_src,
        candidate_path,
        candidate_src,
        cfg,
        None,
    )
}

/// A file the evaluation reads: its path (for the result and the referee) and its bytes.
pub type SourceFile<'a> = (&'a Path, &'a [u8]);

/// [`evaluate`], on processes started earlier with [`Workers::start`] (a rejected candidate
/// leaves them unused; they are killed when dropped).
pub fn evaluate_with(
    runtime: &Runtime,
    task_path: &Path,
    task_src: &[u8],
    candidate_path: &Path,
    candidate_src: &[u8],
    cfg: &EvalConfig,
    prestarted: Option<Workers>,
) -> EvalResult {
    let files = ((task_path, task_src), (candidate_path, candidate_src));
    evaluate_taking(runtime, files, cfg, move || prestarted)
}

/// [`evaluate`], on processes from `take` (prestarted ones, or `None` to start them here),
/// asked for only once the static verifier has passed: a rejected candidate uses none up.
pub fn evaluate_taking(
    runtime: &Runtime,
    ((task_path, task_src), (candidate_path, candidate_src)): (SourceFile<'_>, SourceFile<'_>),
    cfg: &EvalConfig,
    take: impl FnOnce() -> Option<Workers>,
) -> EvalResult {
    let started = Instant::now();
    let mut eval = Evaluation::new(runtime, cfg, task_path, task_src);
    let aborted = || cfg.abort.as_ref().is_some_and(Abort::is_aborted);
    let outcome = verify_stage(&mut eval, candidate_src).and_then(|()| {
        if aborted() {
            // An evaluation stopped before its processes start starts none.
            return Err(Stop::Infra(InfraError::Aborted));
        }
        let prestarted = take();
        if aborted() {
            // Nor one stopped while `take` waited (for a claim of its caller's): the pair it
            // took, if any, is killed unused.
            return Err(Stop::Infra(InfraError::Aborted));
        }
        session::run(&mut eval, prestarted, task_path, candidate_src)
    });
    // Whatever the killed processes looked like to the stages, it was not the candidate's doing.
    let outcome = if aborted() {
        Err(Stop::Infra(InfraError::Aborted))
    } else {
        outcome
    };
    let files = (
        file_ref(task_path, task_src),
        file_ref(candidate_path, candidate_src),
    );
    assemble(eval, outcome, files, started)
}

impl<'a> Evaluation<'a> {
    /// Nothing found yet.
    fn new(
        runtime: &'a Runtime,
        cfg: &'a EvalConfig,
        task_path: &Path,
        task_src: &[u8],
    ) -> Evaluation<'a> {
        let task_sha256 = file_ref(task_path, task_src).sha256;
        let large_device_work = cfg
            .large_tasks
            .as_ref()
            .is_some_and(|large| large.contains(&task_sha256, cfg.size_profile.as_deref()));
        Evaluation {
            runtime,
            cfg,
            seeds: derive_seeds(cfg.seed.unwrap_or_else(fresh_seed), cfg.trials.max(1)),
            stages: Vec::new(),
            findings: Vec::new(),
            trials: Vec::new(),
            launches: Vec::new(),
            env: crucible_result::Env {
                device: cfg.device.to_string(),
                crucible: env!("CARGO_PKG_VERSION").to_string(),
                triton_interpret: !cfg.is_gpu(),
                ..Default::default()
            },
            size_profile: cfg.size_profile.clone().unwrap_or_else(|| "auto".into()),
            task_sha256,
            generalization: None,
            timing_blocked: None,
            timing: None,
            profile: None,
            precision: None,
            large_device_work,
            holds_device: false,
            trial_share: None,
            large_claim: None,
        }
    }
}

/// The result of an evaluation its caller could not set up (`stage` names what failed):
/// `infra_error`, never charged to the candidate.
pub fn infra_error_result(
    runtime: &Runtime,
    (task_path, task_src): SourceFile<'_>,
    (candidate_path, candidate_src): SourceFile<'_>,
    cfg: &EvalConfig,
    stage: &str,
    error: InfraError,
) -> EvalResult {
    let started = Instant::now();
    let mut eval = Evaluation::new(runtime, cfg, task_path, task_src);
    let outcome = eval.stage(stage, |_| Err::<(), _>(Stop::Infra(error)));
    let files = (
        file_ref(task_path, task_src),
        file_ref(candidate_path, candidate_src),
    );
    assemble(eval, outcome, files, started)
}

/// The result document, from everything the stages recorded and how the last one ended.
fn assemble(
    eval: Evaluation<'_>,
    outcome: Result<(), Stop>,
    (task, candidate): (FileRef, FileRef),
    started: Instant,
) -> EvalResult {
    let cfg = eval.cfg;
    let (verdict, failure) = verdict(&eval, outcome);
    let correct = verdict == Verdict::Correct;
    let (timing, profile) = (eval.timing, eval.profile);
    let timing_skipped = timing
        .is_none()
        .then(|| why_untimed(cfg, correct, eval.timing_blocked.clone()));
    let speedup = timing
        .as_ref()
        .filter(|_| correct)
        .map(|t: &Timing| t.reference.median_ms / t.candidate.median_ms);
    let coverage = profile
        .as_ref()
        .filter(|p: &&Profile| p.total_gpu_us > 0.0)
        .map(|p| p.candidate_triton_us / p.total_gpu_us);
    let matched = precision::matched_speedup(speedup, timing.as_ref(), eval.precision.as_ref());
    EvalResult {
        schema: SCHEMA.to_string(),
        verdict,
        correct,
        speedup,
        speedup_matched: matched.map(|(s, _)| s),
        speedup_matched_class: matched.map(|(_, c)| c),
        timing,
        timing_skipped,
        coverage,
        precision: eval.precision,
        profile,
        failure,
        findings: eval.findings,
        stages: eval.stages,
        seeds: eval.seeds,
        tolerance: Tolerance {
            profile: cfg.tolerance.name().to_string(),
            atol: cfg.tolerance.full_precision(),
            rtol: cfg.tolerance.full_precision(),
        },
        size_profile: eval.size_profile,
        trials: eval.trials,
        generalization: eval.generalization,
        launches: eval.launches,
        task,
        candidate,
        env: eval.env,
        wall_s: started.elapsed().as_secs_f64(),
    }
}

/// The verdict, and the failure behind it: how the last stage ended, else the reject findings.
fn verdict(eval: &Evaluation<'_>, outcome: Result<(), Stop>) -> (Verdict, Option<Failure>) {
    let failure = match outcome {
        Ok(()) => None,
        Err(Stop::Candidate(failure)) => Some(failure),
        Err(Stop::Infra(error)) => Some(Failure {
            class: FailureClass::InfraError,
            stage: eval
                .stages
                .last()
                .map(|s| s.name.clone())
                .unwrap_or_default(),
            message: error.to_string(),
        }),
    };
    let rejects: Vec<&str> = eval
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Reject)
        .map(|f| f.message.as_str())
        .collect();
    match failure {
        Some(failure) => (failure.class.verdict(), Some(failure)),
        None if rejects.is_empty() => (Verdict::Correct, None),
        None => (
            Verdict::Rejected,
            Some(Failure {
                class: FailureClass::Rejected,
                stage: "runtime-checks".into(),
                message: rejects.join("\n"),
            }),
        ),
    }
}

/// Why a result carries no timing.
fn why_untimed(cfg: &EvalConfig, correct: bool, blocked: Option<String>) -> String {
    if !cfg.is_gpu() {
        return "no GPU: the candidate ran through Triton's interpreter on the CPU, which gives a \
                correctness-only verdict"
            .to_string();
    }
    if cfg.timing.is_none() {
        return "timing was turned off".to_string();
    }
    match blocked {
        Some(why) if correct => why,
        _ => "timing runs only for correct candidates".to_string(),
    }
}

/// The static verifier, before any process starts: a `reject` ends the evaluation here.
fn verify_stage(eval: &mut Evaluation<'_>, candidate_src: &[u8]) -> Result<(), Stop> {
    let Some(policy) = eval.cfg.verify_policy.as_ref() else {
        return Ok(());
    };
    eval.stage("verify", |eval| {
        let Ok(source) = std::str::from_utf8(candidate_src) else {
            return Err(Stop::Candidate(Failure {
                class: FailureClass::SyntaxError,
                stage: "verify".into(),
                message: "the candidate file is not valid UTF-8".into(),
            }));
        };
        let report = crucible_verify::verify(source, policy);
        eval.findings.extend(report.findings);
        let located = |f: &Finding| match (f.line, f.column) {
            (Some(line), Some(col)) => format!("line {line}, column {col}: {}", f.message),
            (Some(line), None) => format!("line {line}: {}", f.message),
            _ => f.message.clone(),
        };
        if let Some(syntax) = eval.findings.iter().find(|f| f.code == "syntax-error") {
            return Err(Stop::Candidate(Failure {
                class: FailureClass::SyntaxError,
                stage: "verify".into(),
                message: located(syntax),
            }));
        }
        let rejects: Vec<String> = eval
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Reject)
            .map(|f| format!("[{}] {}", f.code, located(f)))
            .collect();
        if rejects.is_empty() {
            Ok(())
        } else {
            Err(Stop::Candidate(Failure {
                class: FailureClass::Rejected,
                stage: "verify".into(),
                message: rejects.join("\n"),
            }))
        }
    })
}

/// What a long-lived caller (the warm pool) shares among the harness processes it starts ahead.
#[derive(Clone, Copy, Default)]
pub struct Prestart<'a> {
    /// Candidate processes start the profiler before their hello (see [`Workers::start`]).
    pub warm_profiler: bool,
    /// Referees are forked from this zygote (for the evaluation's device) instead of started
    /// fresh: the same referee without its interpreter's imports. A zygote that cannot fork is
    /// logged and the referee started fresh.
    pub zygote: Option<&'a HarnessZygote>,
    /// Candidate processes are forked from `zygote` too, each confined as a spawned one is
    /// ([`HarnessZygote`] says how); one that cannot be forked is logged and spawned fresh.
    pub fork_candidates: bool,
    /// Each candidate process's Triton cache starts with a copy of these CUDA utilities, so it
    /// does not compile them again, and it is given Triton's key (see [`TritonSeed`]).
    pub triton_seed: Option<&'a TritonSeed>,
}

impl Prestart<'_> {
    /// Whether the candidate process starts the profiler before its hello: asked for, and the
    /// evaluation will time on a GPU.
    fn profiler_ahead(&self, cfg: &EvalConfig) -> bool {
        self.warm_profiler && cfg.times()
    }
}

/// A referee and a candidate harness process with their scratch directories, started before
/// they are needed: interpreter start-up (importing torch, bringing up the device) is most of an
/// evaluation's fixed cost, and a batch overlaps it with the previous evaluation.
pub struct Workers {
    referee: HarnessProcess,
    candidate: HarnessProcess,
    candidate_dir: tempfile::TempDir,
    shared_dir: PathBuf,
    missing_sandbox: Vec<&'static str>,
    device: Device,
    /// The candidate process starts the profiler before its hello.
    profiler_ahead: bool,
    /// The referee's hello was read ahead (by [`Workers::warm_referee`]).
    referee_greeted: bool,
    /// The referee ran its warm-up ([`Workers::warm_referee`]).
    referee_warmed: bool,
    // Dropped last: the processes map files inside it.
    _referee_dir: tempfile::TempDir,
}

impl Workers {
    /// Spawns both processes ahead of their evaluation and returns without waiting for them to
    /// be ready. When correct candidates will be timed on a GPU, the candidate process also
    /// starts the profiler once before its hello (CUPTI's start-up, ~4 s on an H200), which a
    /// prestarted process pays off the critical path.
    pub fn start(runtime: &Runtime, cfg: &EvalConfig) -> Result<Workers, InfraError> {
        Workers::spawn(runtime, cfg, cfg.times())
    }

    /// Spawns both processes; `warm_profiler` as in [`Workers::start`] (it has an effect only
    /// when correct candidates will be timed on a GPU). An evaluation that starts its own
    /// processes does not warm it: most candidates are never profiled, and they would wait.
    pub fn spawn(
        runtime: &Runtime,
        cfg: &EvalConfig,
        warm_profiler: bool,
    ) -> Result<Workers, InfraError> {
        let prestart = Prestart {
            warm_profiler,
            ..Prestart::default()
        };
        Workers::spawn_with(runtime, cfg, &prestart)
    }

    /// [`Workers::spawn`] with what a long-lived caller shares among the pairs it starts.
    pub fn spawn_with(
        runtime: &Runtime,
        cfg: &EvalConfig,
        prestart: &Prestart,
    ) -> Result<Workers, InfraError> {
        let io = InfraError::io;
        let scratch = Scratch::create()?;
        let candidate_sandbox = cfg
            .sandbox
            .clone()
            .map(|sandbox| scratch.candidate_sandbox(sandbox, runtime, cfg));
        let missing_sandbox = candidate_sandbox
            .as_ref()
            .map(Sandbox::missing_features)
            .unwrap_or_default();
        let referee_env = referee_env(runtime, cfg.device, scratch.referee.path())?;
        let candidate_env = scratch.candidate_env(runtime, cfg, prestart)?;
        let spawn = |module, dir: &Path, env, sandbox: Option<Sandbox>| {
            HarnessProcess::spawn(Spawn {
                python: runtime.python.clone(),
                module,
                env,
                cwd: dir.to_path_buf(),
                sandbox,
            })
        };
        let forked = prestart.zygote.and_then(|zygote| {
            zygote
                .fork(scratch.referee.path(), &referee_env)
                .inspect_err(|error| {
                    tracing::warn!("starting a fresh referee: the zygote could not fork: {error}")
                })
                .ok()
        });
        let referee = match forked {
            Some(referee) => referee,
            None => spawn(
                "crucible_harness.referee",
                scratch.referee.path(),
                referee_env,
                None,
            )
            .map_err(io("starting the referee"))?,
        };
        let forked = match prestart.zygote {
            Some(zygote) if prestart.fork_candidates && zygote.forks_candidates() => zygote
                .fork_candidate(
                    scratch.candidate.path(),
                    &candidate_env,
                    candidate_sandbox.as_ref(),
                )
                .inspect_err(|error| {
                    tracing::warn!(
                        "starting a fresh candidate process: the zygote could not fork: {error}"
                    )
                })
                .ok(),
            _ => None,
        };
        let candidate = match forked {
            Some(candidate) => candidate,
            None => spawn(
                "crucible_harness.candidate",
                scratch.candidate.path(),
                candidate_env,
                candidate_sandbox,
            )
            .map_err(io("starting the candidate process"))?,
        };
        Ok(Workers {
            referee,
            candidate,
            candidate_dir: scratch.candidate,
            shared_dir: scratch.shared,
            missing_sandbox,
            device: cfg.device,
            profiler_ahead: prestart.profiler_ahead(cfg),
            referee_greeted: false,
            referee_warmed: false,
            _referee_dir: scratch.referee,
        })
    }

    /// Sends both process groups `SIGKILL` without waiting for them to go: nothing they run
    /// gets another instruction, and reaping them can happen elsewhere.
    pub(crate) fn kill_now(&self) {
        self.candidate.kill_group();
        self.referee.kill_group();
    }

    /// Both processes' group ids (each is its group's leader).
    pub(crate) fn process_groups(&self) -> [libc::pid_t; 2] {
        [self.candidate.pid(), self.referee.pid()].map(|pid| pid as libc::pid_t)
    }

    /// CPU seconds each side has used so far, `[referee, candidate]`: every process of its
    /// group with the children it waited for (the candidate's compilers); see
    /// [`Teardown::before_kill`] for the whole evaluation's.
    pub fn cpu_seconds(&self) -> [f64; 2] {
        let [candidate, referee] = self.process_groups();
        [
            crate::process::group_cpu_seconds(referee),
            crate::process::group_cpu_seconds(candidate),
        ]
    }

    /// Whether the candidate process started the profiler before its hello.
    pub(crate) fn profiler_started_ahead(&self) -> bool {
        self.profiler_ahead
    }

    /// The candidate process's pid (as the judge sees it, outside its PID namespace).
    pub fn candidate_pid(&self) -> u32 {
        self.candidate.pid()
    }

    /// The referee's pid.
    pub fn referee_pid(&self) -> u32 {
        self.referee.pid()
    }

    /// Whether both processes are still running (a pooled pair may have died while it waited).
    pub fn alive(&mut self) -> bool {
        self.referee.running() && self.candidate.running()
    }

    /// Which of the two processes ended and the tail of what it printed: why a pooled pair
    /// died while it waited.
    pub fn death_note(&mut self) -> String {
        let mut notes = Vec::new();
        for (who, process) in [
            ("referee", &mut self.referee),
            ("candidate process", &mut self.candidate),
        ] {
            if !process.running() {
                let tail = process.log_tail(600);
                notes.push(format!("the {who} ended; it printed: {}", tail.trim()));
            }
        }
        notes.join("; ")
    }

    /// Sets both processes' CPU priority, every thread of their process groups, to the judge's
    /// own nice value plus `above_judge` (positive: lower priority). The warm pool starts its
    /// pairs below the evaluations in flight and gives them the judge's priority when taken.
    pub fn set_priority(&self, above_judge: i32) -> std::io::Result<()> {
        let nice = crate::process::own_nice().saturating_add(above_judge);
        for group in self.process_groups() {
            crate::process::set_group_nice(group, nice)?;
        }
        Ok(())
    }

    /// Whether both processes have said something (their hello: nothing else comes before it),
    /// so that taking this pair waits for no start-up. A pair that died also counts; `alive`
    /// tells them apart.
    pub fn said_hello(&self) -> bool {
        (self.referee_greeted || self.referee.has_message()) && self.candidate.has_message()
    }

    /// Whether the referee has said hello on a GPU and not yet run its warm-up.
    pub fn referee_awaits_warm_up(&self) -> bool {
        self.device.is_gpu() && !self.referee_greeted && self.referee.has_message()
    }

    /// Whether the referee ran its warm-up.
    pub fn referee_warmed(&self) -> bool {
        self.referee_warmed
    }

    /// Reads the referee's hello and has it run, under `share` (a claim on the device for
    /// untimed work, taken once the hello is in), a first use on small tensors of what every
    /// trial runs: a process's first launch of each kernel loads its module and its first matmul
    /// creates cuBLAS's handle (0.25-0.55 s of a fresh referee's first trial on an H200,
    /// `scripts/probe/referee_first_trial.py`), which a pair waiting in the warm pool then pays
    /// instead of its evaluation's first trial.
    ///
    /// `waiting_nice`: the pair's CPU priority below the judge's while it waits (the pool's).
    /// The referee has the judge's own for the warm-up: at a waiting pair's lower priority the
    /// share would keep timed phases out for as long as the CPU is busy elsewhere (one H200,
    /// N 4: the evaluations' GPU-lock waits doubled, 42 s against 21 without the warm-up).
    pub fn warm_referee(
        &mut self,
        share: &dyn Fn() -> Option<TimedPhaseGuard>,
        timeout: Duration,
        waiting_nice: i32,
    ) -> Result<(), InfraError> {
        self.greet_referee(timeout)?;
        let group = self.referee.pid() as libc::pid_t;
        let judge_nice = crate::process::own_nice();
        let _share = share();
        if waiting_nice != 0 {
            crate::process::set_group_nice(group, judge_nice).map_err(InfraError::io(
                "giving the referee the judge's priority for its warm-up",
            ))?;
        }
        let request = crate::protocol::RefereeRequest::WarmUp;
        let warmed = calls::referee_call(&mut self.referee, &request, timeout).map_err(|stop| {
            match stop {
                Stop::Infra(error) => error,
                // The referee's replies are never charged to a candidate.
                Stop::Candidate(failure) => InfraError::Protocol {
                    who: "referee",
                    detail: failure.message,
                },
            }
        });
        if waiting_nice != 0 {
            crate::process::set_group_nice(group, judge_nice.saturating_add(waiting_nice))
                .map_err(InfraError::io(
                    "lowering the warmed referee's priority again",
                ))?;
        }
        let crate::protocol::Done {} = warmed?;
        self.referee_warmed = true;
        Ok(())
    }

    /// Waits for both hellos (the referee's unless it was read ahead). Failures before the
    /// candidate file is even loaded are the judge's.
    fn ready(&mut self, timeout: Duration) -> Result<(), Stop> {
        self.greet_referee(timeout).map_err(Stop::Infra)?;
        hello("candidate harness", &mut self.candidate, timeout).map_err(Stop::Infra)
    }

    /// Reads the referee's hello, once.
    fn greet_referee(&mut self, timeout: Duration) -> Result<(), InfraError> {
        if !self.referee_greeted {
            hello("referee", &mut self.referee, timeout)?;
            self.referee_greeted = true;
        }
        Ok(())
    }
}

/// Reads one harness process's hello: it is ready, or says why it cannot start.
fn hello(
    who: &'static str,
    process: &mut HarnessProcess,
    timeout: Duration,
) -> Result<(), InfraError> {
    let hello = process
        .receive(timeout)
        .map_err(|channel| InfraError::DidNotStart {
            who,
            channel,
            log: process.log_tail(4000),
        })?;
    let protocol = |detail| InfraError::Protocol { who, detail };
    match parse_reply::<Hello, HelloFailure>(hello).map_err(protocol)? {
        Reply::Ok(Hello { ready: true }) => Ok(()),
        Reply::Ok(Hello { ready: false }) => Err(protocol("the hello says it is not ready".into())),
        Reply::Failed(HelloFailure { error }) => {
            Err(InfraError::CannotStart { who, reason: error })
        }
    }
}

/// The scratch directories of one referee + candidate pair.
struct Scratch {
    referee: tempfile::TempDir,
    candidate: tempfile::TempDir,
    /// Inside the referee's: the tensors it shares with the candidate.
    shared: PathBuf,
}

impl Scratch {
    fn create() -> Result<Scratch, InfraError> {
        let io = InfraError::io;
        // Scratch lives on tmpfs when there is one: the shared tensors are mapped files.
        let parent = Some(Path::new("/dev/shm"))
            .filter(|p| p.is_dir())
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        let scratch = |prefix: &str| tempfile::Builder::new().prefix(prefix).tempdir_in(&parent);
        let referee =
            scratch("crucible-ref-").map_err(io("creating the referee's scratch directory"))?;
        let candidate =
            scratch("crucible-cand-").map_err(io("creating the candidate's scratch directory"))?;
        // The referee shares tensors in a directory of their own: its HOME and caches, which it
        // loads code from, stay out of the sandboxed candidate's reach.
        let shared = referee.path().join("shared");
        std::fs::create_dir(&shared).map_err(io("creating the shared-tensor directory"))?;
        Ok(Scratch {
            referee,
            candidate,
            shared,
        })
    }

    /// `sandbox` narrowed to what the candidate process may touch.
    fn candidate_sandbox(&self, sandbox: Sandbox, runtime: &Runtime, cfg: &EvalConfig) -> Sandbox {
        // It writes its outputs into the referee's files; with CUDA IPC, torch keeps reference
        // counts in files it creates in /dev/shm.
        let mut shared = vec![self.shared.as_path()];
        if cfg.transport_name() == "cuda_ipc" {
            shared.push(Path::new("/dev/shm"));
        }
        // The harness and the compiled bytecode it imports: read, never written.
        let mut code = vec![runtime.harness_root.as_path()];
        code.extend(runtime.bytecode.as_deref());
        sandbox.for_candidate(&code, self.candidate.path(), &shared, cfg.is_gpu())
    }

    /// The candidate's environment, with its Triton cache seeded where the caller has a seed.
    fn candidate_env(
        &self,
        runtime: &Runtime,
        cfg: &EvalConfig,
        prestart: &Prestart,
    ) -> Result<Vec<(String, String)>, InfraError> {
        let mut env = harness_env(runtime, cfg.device, self.candidate.path())?;
        if let Some(seed) = prestart.triton_seed
            && let Err(error) = seed.plant(&triton_cache_dir(self.candidate.path()))
        {
            // Only a lost head start: the candidate process builds its own, as without a seed.
            tracing::warn!("cannot copy Triton's CUDA utilities for a candidate: {error}");
        }
        if let Some(key) = prestart.triton_seed.and_then(TritonSeed::key) {
            env.push(("CRUCIBLE_TRITON_KEY".into(), key.into()));
        }
        if prestart.profiler_ahead(cfg) {
            env.push(("CRUCIBLE_WARM_PROFILER".into(), "1".into()));
        }
        Ok(env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_reproducible_and_distinct() {
        let a = derive_seeds(42, 5);
        assert_eq!(a, derive_seeds(42, 5));
        assert_ne!(a, derive_seeds(43, 5));
        let mut all = a.trials.clone();
        all.push(a.init);
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 6);
        assert!(all.iter().all(|s| *s < 1 << 53));
    }

    #[test]
    fn an_h200_keeps_23_softmax_apart_and_matmuls_together() {
        // An H200 as lent here: about 139 GiB.
        let h200 = large_work_bytes_for(139 << 30);
        let softmax_trial = 4 * 4096 * 393_216 * 4;
        assert!(softmax_trial >= h200);
        let matmul_trial = 2 * (8205 * 2949 + 2949 * 5921) * 4 + 2 * 8205 * 5921 * 4;
        assert!(matmul_trial < h200);
        // A 40 GB card keeps a 5 GB trial apart.
        assert!(large_work_bytes_for(40 << 30) <= 5 << 30);
    }
}
