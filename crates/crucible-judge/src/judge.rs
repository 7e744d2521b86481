//! One evaluation: verify, start the referee and a fresh candidate process, run the seeded
//! trials, time, profile, and assemble the result document.
//!
//! The referee's failures are the judge's (`infra_error`); the candidate's failures are
//! classified by stage. Nothing the candidate process reports is taken as a verdict: the
//! referee compares outputs, and this module does the arithmetic.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crucible_result::{
    EvalResult, Failure, FailureClass, FileRef, Finding, KernelTime, Launch, OutputError,
    Precision, Profile, SCHEMA, Seeds, Severity, Stage, StageStatus, Stats, Timing, Tolerance,
    Trial, Verdict,
};
use serde_json::{Value, json};

use crate::precision;
use crate::process::{ChannelError, HarnessProcess, Spawn};
use crate::runtime::{Runtime, hex};
use crate::sandbox::Sandbox;
use crate::timing::{TimingEvidence, timing_findings};

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
    pub(crate) fn referee_json(self) -> Value {
        let full = self.full_precision();
        json!({"fp32": [full, full], "half": [1e-2, 1e-2]})
    }

    /// (atol, rtol) for fp32 and wider outputs.
    fn full_precision(self) -> f64 {
        match self {
            ToleranceProfile::KbV0 => 1e-2,
            ToleranceProfile::Strict => 1e-4,
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
}

impl Default for TimingConfig {
    fn default() -> Self {
        TimingConfig {
            warmup: 5,
            iters: 100,
            flush_bytes: 256 << 20,
        }
    }
}

/// Deadlines per stage. The first trial includes Triton compilation.
#[derive(Debug, Clone)]
pub struct StageLimits {
    pub start: Duration,
    pub load: Duration,
    pub trial: Duration,
    pub timing: Duration,
}

impl StageLimits {
    pub fn for_device(device: &str) -> StageLimits {
        let cpu = device == "cpu";
        StageLimits {
            start: Duration::from_secs(120),
            load: Duration::from_secs(60),
            trial: Duration::from_secs(if cpu { 120 } else { 60 }),
            timing: Duration::from_secs(180),
        }
    }

    /// The same deadline for every candidate stage (start-up excluded: importing torch is the
    /// judge's cost, not the candidate's).
    pub fn uniform(device: &str, stage: Duration) -> StageLimits {
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
    /// `cpu` or `cuda:N`.
    pub device: String,
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
}

impl EvalConfig {
    pub fn new(device: &str) -> EvalConfig {
        EvalConfig {
            device: device.to_string(),
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
        }
    }

    fn is_gpu(&self) -> bool {
        self.device.starts_with("cuda")
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
    Infra(String),
}

struct Evaluation<'a> {
    runtime: &'a Runtime,
    cfg: &'a EvalConfig,
    stages: Vec<Stage>,
    findings: Vec<Finding>,
    trials: Vec<Trial>,
    launches: Vec<Launch>,
    env: crucible_result::Env,
    size_profile: String,
    /// Measured on trial 0's inputs once every trial passed.
    precision: Option<Precision>,
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
        let start = Instant::now();
        let outcome = f(self);
        let (status, diagnostics) = match &outcome {
            Ok(_) => (StageStatus::Ok, vec![]),
            Err(Stop::Candidate(failure)) => (StageStatus::Failed, vec![failure.message.clone()]),
            Err(Stop::Infra(msg)) => (StageStatus::Failed, vec![msg.clone()]),
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

/// Sends a request to the referee; any failure is the judge's.
fn referee_call(
    referee: &mut HarnessProcess,
    msg: Value,
    timeout: Duration,
) -> Result<Value, Stop> {
    match referee.request(&msg, timeout) {
        Ok(reply) if reply["ok"] == json!(true) => Ok(reply),
        Ok(reply) => Err(Stop::Infra(format!(
            "referee failed: {}\n{}",
            reply["error"].as_str().unwrap_or("?"),
            reply["traceback"].as_str().unwrap_or("")
        ))),
        Err(e) => Err(Stop::Infra(format!(
            "referee {e}\n{}",
            referee.log_tail(4000)
        ))),
    }
}

/// Sends a request to the candidate; failures are classified and charged to it.
fn candidate_call(
    candidate: &mut HarnessProcess,
    stage: &str,
    msg: Value,
    timeout: Duration,
) -> Result<Value, Stop> {
    let failure = |class, message: String| {
        Stop::Candidate(Failure {
            class,
            stage: stage.to_string(),
            message,
        })
    };
    match candidate.request(&msg, timeout) {
        Ok(reply) if reply["ok"] == json!(true) => Ok(reply),
        Ok(reply) => {
            let class = candidate_class(reply["class"].as_str().unwrap_or(""));
            let message = reply["message"].as_str().unwrap_or("").to_string();
            Err(failure(class, message))
        }
        Err(ChannelError::Timeout(limit)) => Err(failure(
            FailureClass::Timeout,
            format!(
                "stage `{stage}` did not finish within {:.0} s; look for an infinite loop, a \
                 deadlock or a grid that launches far too many programs",
                limit.as_secs_f64()
            ),
        )),
        Err(ChannelError::Exited(exit)) => Err(failure(
            FailureClass::Crashed,
            format!(
                "the candidate process {exit} during stage `{stage}`\n{}",
                candidate.log_tail(2000)
            ),
        )),
        Err(ChannelError::Protocol(msg)) => Err(failure(
            FailureClass::Crashed,
            format!("the candidate process corrupted the judge's channel: {msg}"),
        )),
        Err(ChannelError::Io(e)) => Err(Stop::Infra(format!("candidate channel I/O: {e}"))),
    }
}

/// The candidate can only charge itself: a claimed `infra_error` (or anything unknown)
/// becomes a runtime error.
fn candidate_class(name: &str) -> FailureClass {
    match name {
        "syntax_error" => FailureClass::SyntaxError,
        "import_error" => FailureClass::ImportError,
        "missing_model_new" => FailureClass::MissingModelNew,
        "triton_compile_error" => FailureClass::TritonCompileError,
        "cuda_error" => FailureClass::CudaError,
        "out_of_memory" => FailureClass::OutOfMemory,
        _ => FailureClass::RuntimeError,
    }
}

/// The whole environment of a harness process (referee, candidate or audit), built from
/// nothing: the caller's own environment never leaks into it.
pub(crate) fn harness_env(runtime: &Runtime, device: &str, home: &Path) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "PYTHONPATH".to_string(),
            runtime.harness_root.display().to_string(),
        ),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        // The working directory (a scratch directory) is not on sys.path: nothing planted there
        // is ever imported.
        ("PYTHONSAFEPATH".into(), "1".into()),
        ("PYTHONUNBUFFERED".into(), "1".into()),
        ("HOME".into(), home.display().to_string()),
        (
            "TRITON_CACHE_DIR".into(),
            home.join("triton").display().to_string(),
        ),
        ("TMPDIR".into(), home.display().to_string()),
        ("CRUCIBLE_DEVICE".into(), device.to_string()),
    ];
    // Only what the runtimes need to find their libraries and devices; tokens, queue URLs
    // and the rest of the judge's environment never reach the harness.
    for key in [
        "PATH",
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_HOME",
        "LANG",
        "OMP_NUM_THREADS",
    ] {
        if let Ok(value) = std::env::var(key) {
            env.push((key.to_string(), value));
        }
    }
    if device == "cpu" {
        env.push(("TRITON_INTERPRET".into(), "1".into()));
        env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
    }
    env
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
    let started = Instant::now();
    let seeds = derive_seeds(cfg.seed.unwrap_or_else(fresh_seed), cfg.trials.max(1));
    let mut eval = Evaluation {
        runtime,
        cfg,
        stages: Vec::new(),
        findings: Vec::new(),
        trials: Vec::new(),
        launches: Vec::new(),
        env: crucible_result::Env {
            device: cfg.device.clone(),
            crucible: env!("CARGO_PKG_VERSION").to_string(),
            triton_interpret: !cfg.is_gpu(),
            ..Default::default()
        },
        size_profile: cfg.size_profile.clone().unwrap_or_else(|| "auto".into()),
        precision: None,
    };
    let mut timing = None;
    let mut profile = None;
    let outcome = verify_stage(&mut eval, candidate_src).and_then(|()| {
        run(
            &mut eval,
            task_path,
            candidate_src,
            &seeds,
            prestarted,
            &mut timing,
            &mut profile,
        )
    });
    let failure = match outcome {
        Ok(()) => None,
        Err(Stop::Candidate(failure)) => Some(failure),
        Err(Stop::Infra(message)) => Some(Failure {
            class: FailureClass::InfraError,
            stage: eval
                .stages
                .last()
                .map(|s| s.name.clone())
                .unwrap_or_default(),
            message,
        }),
    };
    let rejected = eval.findings.iter().any(|f| f.severity == Severity::Reject);
    let verdict = match &failure {
        Some(f) => f.class.verdict(),
        None if rejected => Verdict::Rejected,
        None => Verdict::Correct,
    };
    let failure = failure.or_else(|| {
        rejected.then(|| Failure {
            class: FailureClass::Rejected,
            stage: "runtime-checks".into(),
            message: eval
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Reject)
                .map(|f| f.message.clone())
                .collect::<Vec<_>>()
                .join("\n"),
        })
    });
    let correct = verdict == Verdict::Correct;
    let timing_skipped = match (&timing, cfg.is_gpu()) {
        (Some(_), _) => None,
        (None, false) => Some(
            "no GPU: the candidate ran through Triton's interpreter on the CPU, which gives a \
             correctness-only verdict"
                .to_string(),
        ),
        (None, true) if cfg.timing.is_none() => Some("timing was turned off".to_string()),
        (None, true) => Some("timing runs only for correct candidates".to_string()),
    };
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
        seeds,
        tolerance: Tolerance {
            profile: cfg.tolerance.name().to_string(),
            atol: cfg.tolerance.full_precision(),
            rtol: cfg.tolerance.full_precision(),
        },
        size_profile: eval.size_profile,
        trials: eval.trials,
        launches: eval.launches,
        task: file_ref(task_path, task_src),
        candidate: file_ref(candidate_path, candidate_src),
        env: eval.env,
        wall_s: started.elapsed().as_secs_f64(),
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

/// A referee and a candidate harness process with their scratch directories, started before
/// they are needed: interpreter start-up (importing torch, bringing up the device) is most of an
/// evaluation's fixed cost, and a batch overlaps it with the previous evaluation.
pub struct Workers {
    referee: HarnessProcess,
    candidate: HarnessProcess,
    candidate_dir: tempfile::TempDir,
    shared_dir: PathBuf,
    missing_sandbox: Vec<&'static str>,
    device: String,
    // Dropped last: the processes map files inside it.
    _referee_dir: tempfile::TempDir,
}

impl Workers {
    /// Spawns both processes and returns without waiting for them to be ready.
    pub fn start(runtime: &Runtime, cfg: &EvalConfig) -> Result<Workers, String> {
        fn io(what: &'static str) -> impl Fn(std::io::Error) -> String {
            move |e| format!("{what}: {e}")
        }
        // Scratch lives on tmpfs when there is one: the shared tensors are mapped files.
        let scratch_parent = Some(Path::new("/dev/shm"))
            .filter(|p| p.is_dir())
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        let scratch = |prefix: &str| {
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in(&scratch_parent)
        };
        let referee_dir =
            scratch("crucible-ref-").map_err(io("creating the referee's scratch directory"))?;
        let candidate_dir =
            scratch("crucible-cand-").map_err(io("creating the candidate's scratch directory"))?;
        // The referee shares tensors in a directory of their own: its HOME and caches, which it
        // loads code from, stay out of the sandboxed candidate's reach.
        let shared_dir = referee_dir.path().join("shared");
        std::fs::create_dir(&shared_dir).map_err(io("creating the shared-tensor directory"))?;
        let candidate_sandbox = cfg.sandbox.clone().map(|sandbox| {
            // It writes its outputs into the referee's files; with CUDA IPC, torch keeps
            // reference counts in files it creates in /dev/shm.
            let mut shared = vec![shared_dir.as_path()];
            if cfg.transport_name() == "cuda_ipc" {
                shared.push(Path::new("/dev/shm"));
            }
            sandbox.for_candidate(
                &runtime.harness_root,
                candidate_dir.path(),
                &shared,
                cfg.is_gpu(),
            )
        });
        let missing_sandbox = candidate_sandbox
            .as_ref()
            .map(Sandbox::missing_features)
            .unwrap_or_default();
        let spawn = |module, dir: &Path, sandbox: Option<Sandbox>| {
            HarnessProcess::spawn(Spawn {
                python: runtime.python.clone(),
                module,
                env: harness_env(runtime, &cfg.device, dir),
                cwd: dir.to_path_buf(),
                sandbox,
            })
        };
        let referee = spawn("crucible_harness.referee", referee_dir.path(), None)
            .map_err(io("starting the referee"))?;
        let candidate = spawn(
            "crucible_harness.candidate",
            candidate_dir.path(),
            candidate_sandbox,
        )
        .map_err(io("starting the candidate process"))?;
        Ok(Workers {
            referee,
            candidate,
            candidate_dir,
            shared_dir,
            missing_sandbox,
            device: cfg.device.clone(),
            _referee_dir: referee_dir,
        })
    }

    /// Waits for both hellos. Failures before the candidate file is even loaded are the judge's.
    fn ready(&mut self, timeout: Duration) -> Result<(), Stop> {
        for (who, process) in [
            ("referee", &mut self.referee),
            ("candidate harness", &mut self.candidate),
        ] {
            match process.receive(timeout) {
                Ok(hello) if hello["ok"] == json!(true) => {}
                Ok(hello) => {
                    return Err(Stop::Infra(format!(
                        "{who} could not start: {}",
                        hello["error"].as_str().unwrap_or("?")
                    )));
                }
                Err(e) => {
                    return Err(Stop::Infra(format!(
                        "{who} did not start: {e}\n{}",
                        process.log_tail(4000)
                    )));
                }
            }
        }
        Ok(())
    }
}

fn run(
    eval: &mut Evaluation<'_>,
    task_path: &Path,
    candidate_src: &[u8],
    seeds: &Seeds,
    prestarted: Option<Workers>,
    timing_out: &mut Option<Timing>,
    profile_out: &mut Option<Profile>,
) -> Result<(), Stop> {
    let cfg = eval.cfg;
    let runtime = eval.runtime;
    // Workers started for another device (or configuration) are not used.
    let prestarted = prestarted.filter(|w| w.device == cfg.device);
    let mut workers = eval.stage("start", |_| {
        let mut workers = match prestarted {
            Some(workers) => workers,
            None => Workers::start(runtime, cfg).map_err(Stop::Infra)?,
        };
        workers.ready(cfg.limits.start)?;
        Ok(workers)
    })?;
    if !workers.missing_sandbox.is_empty() {
        eval.findings.push(Finding::new(
            "sandbox-degraded",
            Severity::Info,
            format!(
                "the candidate ran in a partial sandbox, without: {}",
                workers.missing_sandbox.join("; ")
            ),
        ));
    }
    let infra = |what: &str, e: std::io::Error| Stop::Infra(format!("{what}: {e}"));
    let candidate_file = workers.candidate_dir.path().join("solution.py");
    std::fs::write(&candidate_file, candidate_src)
        .map_err(|e| infra("writing the candidate file", e))?;
    let task_abs = std::fs::canonicalize(task_path).map_err(|e| infra("reading the task", e))?;
    let shared_dir = workers.shared_dir.clone();
    let outcome = run_started(
        eval,
        &mut workers.referee,
        &mut workers.candidate,
        &task_abs,
        &shared_dir,
        &candidate_file,
        seeds,
        timing_out,
        profile_out,
    );
    workers.candidate.kill();
    workers.referee.kill();
    outcome
}

#[allow(clippy::too_many_arguments)]
fn run_started(
    eval: &mut Evaluation<'_>,
    referee: &mut HarnessProcess,
    candidate: &mut HarnessProcess,
    task_abs: &Path,
    referee_dir: &Path,
    candidate_file: &Path,
    seeds: &Seeds,
    timing_out: &mut Option<Timing>,
    profile_out: &mut Option<Profile>,
) -> Result<(), Stop> {
    let cfg = eval.cfg;
    let init = eval.stage("reference", |eval| {
        let reply = referee_call(
            referee,
            json!({
                "op": "init",
                "task_path": task_abs,
                "profile": eval.size_profile,
                "device": cfg.device,
                "transport": cfg.transport_name(),
                "scratch": referee_dir,
                "init_seed": seeds.init,
                "inputs_on_host": cfg.inputs_on_host,
                "tolerance": cfg.tolerance.referee_json(),
            }),
            cfg.limits.load + cfg.limits.trial,
        )?;
        let env = &reply["env"];
        let text = |k: &str| env[k].as_str().map(str::to_string);
        eval.env.device_name = text("device_name");
        eval.env.torch = text("torch");
        eval.env.triton = text("triton");
        eval.env.cuda = text("cuda");
        eval.env.driver = text("driver");
        eval.env.python = text("python");
        if let Some(p) = reply["profile"].as_str() {
            eval.size_profile = p.to_string();
        }
        Ok(reply["init_inputs"].clone())
    })?;

    eval.stage("load", |_| {
        candidate_call(
            candidate,
            "load",
            json!({
                "op": "load",
                "candidate_path": candidate_file,
                "device": cfg.device,
                "init_seed": seeds.init,
                "init_inputs": init,
            }),
            cfg.limits.load,
        )
    })?;

    let mut all_launches: Vec<Launch> = Vec::new();
    let mut launch_free: Vec<String> = Vec::new();
    // One trial: fresh inputs from the referee, one forward, and the referee's comparison while
    // the candidate is frozen.
    let mut trial = |index: usize, seed: u64, name: &str, check: Value| {
        let prepared = referee_call(
            referee,
            json!({"op": "prepare", "trial": index, "seed": seed}),
            cfg.limits.trial,
        )?;
        let ran = candidate_call(
            candidate,
            name,
            json!({
                "op": "run",
                "stage": name,
                "trial": index,
                "payload": prepared["payload"],
                "grad": check["grad"] == json!(true),
            }),
            cfg.limits.trial,
        )?;
        let mut request = json!({"op": "check", "trial": index});
        if let (Some(request), Some(extra)) = (request.as_object_mut(), check.as_object()) {
            request.extend(extra.clone());
        }
        candidate.freeze(true);
        let checked = referee_call(referee, request, cfg.limits.trial);
        candidate.freeze(false);
        let checked = checked?;
        let launches = parse_launches(&ran["launches"]);
        if launches.is_empty() {
            launch_free.push(name.to_string());
        }
        merge_launches(&mut all_launches, launches);
        Ok::<_, Stop>((ran, checked))
    };
    for (index, &seed) in seeds.trials.iter().enumerate() {
        let name = format!("trial_{index}");
        let passed = eval.stage(&name, |eval| {
            let check = json!({"keep": index == 0, "precision": index == 0});
            let (ran, checked) = trial(index, seed, &name, check)?;
            Ok(record_trial(eval, seed, &ran, &checked))
        })?;
        if !passed {
            return Err(incorrect(eval, name));
        }
    }
    // Trial 0's inputs once more: a candidate that caches by call count, or whose results
    // depend on more than its inputs, shows here.
    let repeated = eval.stage("repeat", |eval| {
        let (index, seed) = (seeds.trials.len(), seeds.trials[0]);
        // With autograd on, unlike the trials: a candidate that does its own work in only
        // one grad mode shows here.
        let check = json!({"against_kept": true, "grad": true});
        let (ran, checked) = trial(index, seed, "repeat", check)?;
        let disagreements: Vec<String> = strings(&checked["repeat_problems"]);
        if !disagreements.is_empty() {
            eval.findings.push(Finding::new(
                "nondeterministic",
                Severity::Flag,
                format!(
                    "two runs on the same inputs disagree beyond the tolerance: {}",
                    disagreements.join("; ")
                ),
            ));
        }
        let passed = record_trial(eval, seed, &ran, &checked);
        if let Some(last) = eval.trials.last_mut() {
            last.repeat_of = Some(0);
        }
        Ok(passed)
    })?;
    if !repeated {
        return Err(incorrect(eval, "repeat".into()));
    }
    eval.launches = all_launches;
    if !launch_free.is_empty() {
        eval.findings.push(Finding::new(
            "no-triton-launch",
            Severity::Reject,
            format!(
                "forward returned correct outputs but launched none of the file's own \
                 @triton.jit kernels in {} (the repeat runs with autograd on); the work must be \
                 done by your Triton kernels",
                launch_free.join(", ")
            ),
        ));
        return Ok(());
    }
    measure_precision(eval, referee)?;

    let Some(timing_cfg) = cfg.timing.as_ref().filter(|_| cfg.is_gpu()) else {
        return Ok(());
    };
    let matched_class = eval.precision.as_ref().and_then(precision::matched_class);
    let timing = eval.stage("timing", |_| {
        let request = |op: &str| {
            json!({
                "op": op,
                "seed": seeds.timing,
                "trial": "timing",
                "warmup": timing_cfg.warmup,
                "iters": timing_cfg.iters,
                "flush_bytes": timing_cfg.flush_bytes,
            })
        };
        let reference = referee_call(referee, request("time_reference"), cfg.limits.timing)?;
        // The same request at the candidate's measured precision class (same inputs, warmup,
        // iterations and flush), when it is not the reference's own.
        let matched = match matched_class {
            Some(class) => {
                let mut msg = request("time_reference");
                msg["precision"] = json!(class.as_str());
                let reply = referee_call(referee, msg, cfg.limits.timing)?;
                Some((class, samples(&reply)?))
            }
            None => None,
        };
        // The timed inputs are shared like a trial's, and their expected outputs kept for the
        // timed-output check.
        let prepared = referee_call(referee, request("prepare"), cfg.limits.timing)?;
        // Mapping (and, with `shm`, staging) the inputs is a request of its own: the measured
        // window below holds the timed loop alone, like the referee's.
        let open = json!({"op": "time_open", "stage": "timing", "payload": prepared["payload"]});
        candidate_call(candidate, "timing", open, cfg.limits.timing)?;
        let mut msg = request("time");
        msg["stage"] = json!("timing");
        // One timed iteration, unknown to the candidate until now, has its output checked.
        msg["check_iteration"] = json!(fresh_seed() % u64::from(timing_cfg.iters.max(1)));
        let phase = Instant::now();
        let timed = candidate_call(candidate, "timing", msg, cfg.limits.timing)?;
        let phase_wall_s = phase.elapsed().as_secs_f64();
        let candidate_samples = samples(&timed)?;
        let deliver = json!({"op": "time_deliver", "stage": "timing"});
        let delivered = candidate_call(candidate, "timing", deliver, cfg.limits.timing)?;
        Ok((
            reference,
            candidate_samples,
            phase_wall_s,
            prepared["payload"].clone(),
            delivered["problem"].as_str().map(str::to_string),
            matched,
        ))
    })?;
    let (reference_reply, candidate_samples, phase_wall_s, payload, timed_problem, matched) =
        timing;
    let reference = samples(&reference_reply)?;
    eval.findings.extend(timing_findings(&TimingEvidence {
        reference: &reference,
        reference_phase_s: reference_reply["phase_s"].as_f64().unwrap_or(f64::NAN),
        candidate: &candidate_samples,
        candidate_phase_s: phase_wall_s,
        warmup: timing_cfg.warmup,
        io_bytes: reference_reply["io_bytes"].as_f64().unwrap_or(0.0),
        device_name: eval.env.device_name.as_deref().unwrap_or(""),
    }));
    let (Some(reference), Some(candidate_stats)) = (
        Stats::from_samples(&reference),
        Stats::from_samples(&candidate_samples),
    ) else {
        return Err(Stop::Infra("timing returned no samples".into()));
    };
    *timing_out = Some(Timing {
        reference,
        candidate: candidate_stats,
        warmup: timing_cfg.warmup,
        l2_flush_bytes: timing_cfg.flush_bytes,
        candidate_phase_wall_s: phase_wall_s,
        reference_matched: matched
            .as_ref()
            .and_then(|(_, samples)| Stats::from_samples(samples)),
        reference_matched_class: matched.map(|(class, _)| class),
    });

    let profiled = eval.stage("profile", |_| {
        candidate_call(
            candidate,
            "profile",
            json!({"op": "profile", "stage": "profile", "payload": payload}),
            cfg.limits.timing,
        )
    })?;
    let profile = build_profile(&profiled);
    let coverage = if profile.total_gpu_us > 0.0 {
        profile.candidate_triton_us / profile.total_gpu_us
    } else {
        0.0
    };
    if coverage < LOW_COVERAGE {
        eval.findings.push(Finding::new(
            "low-coverage",
            Severity::Flag,
            format!(
                "only {:.1}% of the forward's GPU time is spent in your own Triton kernels; move \
                 the remaining work into them",
                coverage * 100.0
            ),
        ));
    }
    *profile_out = Some(profile);

    // Last, since the profile still maps the timing buffers: was the timed output right?
    let checked = eval.stage("timed-output", |_| {
        candidate.freeze(true);
        let checked = referee_call(
            referee,
            json!({"op": "check", "trial": "timing"}),
            cfg.limits.timing,
        );
        candidate.freeze(false);
        checked
    })?;
    let problems = timed_problem
        .into_iter()
        .chain(strings(&checked["problems"]))
        .collect::<Vec<_>>();
    if !problems.is_empty() {
        eval.findings.push(Finding::new(
            "timed-output-mismatch",
            Severity::Reject,
            format!(
                "the output of a timed iteration is wrong although the correctness trials \
                 passed (cached, replayed or skipped work while being timed): {}",
                problems.join("; ")
            ),
        ));
    }
    Ok(())
}

/// The candidate's precision against a float64 copy of the reference, on the trial the referee
/// kept (trial 0: its inputs, expected and actual outputs), measured once every trial passed.
/// Whatever stops the measurement leaves it unmeasured; only a referee that stops answering is
/// the judge's failure.
fn measure_precision(eval: &mut Evaluation<'_>, referee: &mut HarnessProcess) -> Result<(), Stop> {
    let limit = eval.cfg.limits.trial;
    let measured = eval.stage("precision", |_| {
        // The referee gives up (unmeasured) when the float64 forwards would exceed the budget;
        // the deadline leaves room for a forward that started just inside it.
        let msg = json!({"op": "measure_precision", "budget_s": limit.as_secs_f64() / 2.0});
        referee_call(referee, msg, limit * 2)
    })?;
    let measured = precision::from_reply(&measured, 0);
    if let Some(finding) = precision::downgrade_finding(&measured) {
        eval.add_once(finding);
    }
    eval.precision = Some(measured);
    Ok(())
}

/// The failure for the trial just recorded.
fn incorrect(eval: &Evaluation<'_>, stage: String) -> Stop {
    let message = eval
        .trials
        .last()
        .and_then(|t| t.message.clone())
        .unwrap_or_default();
    Stop::Candidate(Failure {
        class: FailureClass::Incorrect,
        stage,
        message,
    })
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn samples(reply: &Value) -> Result<Vec<f64>, Stop> {
    reply["samples_ms"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .ok_or_else(|| Stop::Infra("timing reply without samples".into()))
}

/// Records one trial; returns whether it passed.
fn record_trial(eval: &mut Evaluation<'_>, seed: u64, ran: &Value, checked: &Value) -> bool {
    let outputs: Vec<OutputError> = checked["outputs"]
        .as_array()
        .map(|outs| {
            outs.iter()
                .map(|o| OutputError {
                    index: o["index"].as_u64().unwrap_or(0) as u32,
                    shape: o["shape"]
                        .as_array()
                        .map(|s| s.iter().filter_map(Value::as_i64).collect())
                        .unwrap_or_default(),
                    dtype: o["dtype"].as_str().unwrap_or("").to_string(),
                    max_abs: o["max_abs"].as_f64().unwrap_or(f64::NAN),
                    mean_abs: o["mean_abs"].as_f64().unwrap_or(f64::NAN),
                    max_rel: o["max_rel"].as_f64().unwrap_or(f64::NAN),
                    mean_rel: o["mean_rel"].as_f64().unwrap_or(f64::NAN),
                    mismatched: o["mismatched"].as_u64().unwrap_or(0),
                    numel: o["numel"].as_u64().unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut problems: Vec<String> = Vec::new();
    if let Some(p) = ran["problem"].as_str() {
        problems.push(p.to_string());
    } else if let Some(ps) = checked["problems"].as_array() {
        problems.extend(ps.iter().filter_map(Value::as_str).map(str::to_string));
    }
    let mutated: Vec<u64> = checked["mutated_inputs"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    if !mutated.is_empty() {
        eval.add_once(Finding::new(
            "input-mutated",
            Severity::Reject,
            format!(
                "forward modified its input tensor(s) {mutated:?}; inputs are read-only, write \
                 results into freshly allocated outputs"
            ),
        ));
    }
    let changed = checked["changed_after_return"]
        .as_array()
        .is_some_and(|c| !c.is_empty());
    if changed {
        eval.add_once(Finding::new(
            "output-changed-after-return",
            Severity::Reject,
            "the outputs changed after forward returned (a background thread or \
                      unfinished device work); forward must finish its work before returning",
        ));
    }
    let aliased = ran["meta"]
        .as_array()
        .is_some_and(|m| m.iter().any(|o| o["aliases_input"] == json!(true)));
    if aliased {
        eval.add_once(Finding::new(
            "output-aliases-input",
            Severity::Reject,
            "forward returned one of its inputs as an output; allocate a new output tensor",
        ));
    }
    let passed = problems.is_empty();
    eval.trials.push(Trial {
        seed,
        passed,
        outputs,
        message: (!passed).then(|| problems.join("\n")),
        repeat_of: None,
    });
    passed
}

/// Adds one run's launches to the evaluation's totals.
fn merge_launches(total: &mut Vec<Launch>, run: Vec<Launch>) {
    for launch in run {
        match total.iter_mut().find(|l| l.kernel == launch.kernel) {
            Some(known) => {
                known.calls += launch.calls;
                if launch.autotune_config.is_some() {
                    known.autotune_config = launch.autotune_config;
                }
            }
            None => total.push(launch),
        }
    }
}

fn parse_launches(report: &Value) -> Vec<Launch> {
    report
        .as_array()
        .map(|launches| {
            launches
                .iter()
                .filter(|l| l["module"] == json!(CANDIDATE_MODULE))
                .filter_map(|l| {
                    Some(Launch {
                        kernel: l["kernel"].as_str()?.to_string(),
                        calls: l["calls"].as_u64().unwrap_or(0) as u32,
                        autotune_config: l["autotune_config"].as_str().map(str::to_string),
                    })
                })
                .filter(|l| l.calls > 0)
                .collect()
        })
        .unwrap_or_default()
}

/// Attributes profiled GPU time to the candidate's kernels by exact compiled-kernel name.
fn build_profile(reply: &Value) -> Profile {
    let own_names: std::collections::HashSet<String> = reply["launches"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["module"] == json!(CANDIDATE_MODULE))
        .flat_map(|l| {
            l["compiled_names"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    let kernels: Vec<KernelTime> = reply["kernels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|k| {
            let name = k["name"].as_str()?.to_string();
            Some(KernelTime {
                candidate_triton: own_names.contains(&name),
                name,
                calls: k["calls"].as_u64().unwrap_or(0) as u32,
                gpu_time_us: k["gpu_time_us"].as_f64().unwrap_or(0.0),
            })
        })
        .collect();
    let total_gpu_us = kernels.iter().map(|k| k.gpu_time_us).sum();
    let candidate_triton_us = kernels
        .iter()
        .filter(|k| k.candidate_triton)
        .map(|k| k.gpu_time_us)
        .sum();
    Profile {
        kernels,
        candidate_triton_us,
        total_gpu_us,
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
    fn candidate_cannot_claim_an_infra_error() {
        assert_eq!(candidate_class("infra_error"), FailureClass::RuntimeError);
        assert_eq!(candidate_class("syntax_error"), FailureClass::SyntaxError);
    }
}
