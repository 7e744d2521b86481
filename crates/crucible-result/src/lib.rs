//! The result document of one judge evaluation (`crucible.result/1`).
//!
//! Everything downstream of the judge (rewards, advantages, batches, reports) reads this one
//! type and nothing else. It is serialized once, as JSON, with no rounding: every number is the
//! `f64` the judge measured. Fields are only ever added within a schema version; a field that
//! changes meaning gets a new version string. This crate does no I/O.

use serde::{Deserialize, Serialize};

/// The schema tag written into every result.
pub const SCHEMA: &str = "crucible.result/1";

/// The one-word outcome of an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Correct,
    Incorrect,
    /// The static verifier (or a runtime defense) refused the candidate.
    Rejected,
    CompileError,
    RuntimeError,
    Timeout,
    Crashed,
    /// The judge itself failed; never charged to the candidate.
    InfraError,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Correct => "correct",
            Verdict::Incorrect => "incorrect",
            Verdict::Rejected => "rejected",
            Verdict::CompileError => "compile_error",
            Verdict::RuntimeError => "runtime_error",
            Verdict::Timeout => "timeout",
            Verdict::Crashed => "crashed",
            Verdict::InfraError => "infra_error",
        }
    }
}

/// The finer failure class behind a non-correct verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    SyntaxError,
    ImportError,
    MissingModelNew,
    TritonCompileError,
    RuntimeError,
    CudaError,
    OutOfMemory,
    Incorrect,
    Rejected,
    Timeout,
    Crashed,
    InfraError,
}

impl FailureClass {
    /// The verdict a failure of this class produces.
    pub fn verdict(self) -> Verdict {
        match self {
            FailureClass::SyntaxError
            | FailureClass::ImportError
            | FailureClass::MissingModelNew
            | FailureClass::TritonCompileError => Verdict::CompileError,
            FailureClass::RuntimeError | FailureClass::CudaError | FailureClass::OutOfMemory => {
                Verdict::RuntimeError
            }
            FailureClass::Incorrect => Verdict::Incorrect,
            FailureClass::Rejected => Verdict::Rejected,
            FailureClass::Timeout => Verdict::Timeout,
            FailureClass::Crashed => Verdict::Crashed,
            FailureClass::InfraError => Verdict::InfraError,
        }
    }
}

/// Why the evaluation did not end `correct`: the class, the stage it happened in, and a
/// diagnostic written so that a model can act on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub class: FailureClass,
    pub stage: String,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Flag,
    Reject,
}

/// One observation by the verifier or a runtime defense.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable identifier, e.g. `torch-compute-in-forward` or `no-triton-launch`.
    pub code: String,
    pub severity: Severity,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
}

impl Finding {
    /// A finding with no source position (a runtime observation).
    pub fn new(code: &str, severity: Severity, message: impl Into<String>) -> Finding {
        Finding {
            code: code.to_string(),
            severity,
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    Ok,
    Failed,
    Skipped,
}

/// One step of the pipeline (verify, referee, import, init, trial_N, timing, profile, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub name: String,
    pub status: StageStatus,
    pub duration_s: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<String>,
}

/// The seeds that replay an evaluation exactly (`--seed <base>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seeds {
    pub base: u64,
    /// Seed set before building `Model` and before building `ModelNew`.
    pub init: u64,
    /// One input seed per correctness trial.
    pub trials: Vec<u64>,
    /// Inputs of the timed phase, fresh so that nothing seen in the trials can be replayed.
    #[serde(default)]
    pub timing: u64,
}

/// Error statistics of one output tensor against the reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputError {
    pub index: u32,
    pub shape: Vec<i64>,
    pub dtype: String,
    pub max_abs: f64,
    pub mean_abs: f64,
    pub max_rel: f64,
    pub mean_rel: f64,
    /// Elements outside `atol + rtol * |expected|`.
    pub mismatched: u64,
    pub numel: u64,
}

/// One correctness trial: fresh inputs from `seed`, one candidate forward, compared by the referee.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub seed: u64,
    pub passed: bool,
    pub outputs: Vec<OutputError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Set on the extra run that repeats an earlier trial's inputs (nondeterminism and
    /// call-count caching show there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_of: Option<u32>,
}

/// One module-level size constant of the task, as the generalization trial changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerturbedConstant {
    pub name: String,
    /// The value in the size profile the trials used.
    pub from: i64,
    pub to: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GeneralizationStatus {
    Passed,
    /// The candidate failed at the perturbed sizes: the finding `shape-specialized` says how.
    Failed,
    /// No trial ran (the task opts out, or its reference fails at the perturbed sizes);
    /// `message` says why. Never the candidate's fault.
    Skipped,
}

/// The generalization trial: after the correctness trials passed, one more trial with the
/// task's module-level size constants changed (odd, smaller sizes), in the same candidate
/// process with a second `ModelNew`. Failing it is a flag (`shape-specialized`), never a
/// reject: KernelBench fixes the shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generalization {
    pub status: GeneralizationStatus,
    /// `auto` (values computed by the referee) or `task` (the task's own `GENERALIZE`).
    pub source: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constants: Vec<PerturbedConstant>,
    /// The trial itself (absent when skipped, or when the candidate failed before it ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<Trial>,
    /// Why it was skipped, or what failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Summary statistics of one timed series, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: u32,
    pub median_ms: f64,
    pub mean_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// Interquartile range (q3 - q1).
    pub iqr_ms: f64,
    /// Coefficient of variation (std / mean).
    pub cv: f64,
    /// The samples themselves, in the order measured (for plots and re-analysis); empty in
    /// documents written before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples_ms: Vec<f64>,
}

impl Stats {
    /// Computes the summary of `samples` (milliseconds). Returns `None` for an empty series.
    pub fn from_samples(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let mean = sorted.iter().sum::<f64>() / n as f64;
        let var = sorted.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        Some(Stats {
            n: n as u32,
            median_ms: quantile(&sorted, 0.5),
            mean_ms: mean,
            min_ms: sorted[0],
            max_ms: sorted[n - 1],
            iqr_ms: quantile(&sorted, 0.75) - quantile(&sorted, 0.25),
            cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
            samples_ms: samples.to_vec(),
        })
    }
}

/// Linear-interpolated quantile of an ascending, non-empty slice.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Timing of reference and candidate on the same GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub reference: Stats,
    pub candidate: Stats,
    pub warmup: u32,
    pub l2_flush_bytes: u64,
    /// Wall time of the candidate's timed phase, measured by the judge from outside the
    /// candidate process.
    pub candidate_phase_wall_s: f64,
    /// Witness: the least GPU busy time of one profiled forward (the union of its device
    /// activity intervals), from the profiler's device records. `null` when not profiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiled_busy_ms: Option<f64>,
    /// Witness: the least outside cost of one forward, from batches of back-to-back forwards
    /// timed by the judge (less the cost of an empty request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_forward_ms: Option<f64>,
    /// Forwards per outside-timed batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_batch_forwards: Option<u32>,
    /// Witness: the least outside cost of one forward followed by a device synchronize, from
    /// batches timed by the judge like `outside_forward_ms`: what a timed iteration's window
    /// holds, launch and synchronize included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_forward_ms: Option<f64>,
    /// The reference timed a second time at the candidate's measured precision class
    /// (`reference_matched_class`), with the same inputs, warmup, iterations and L2 flush; only
    /// when that class differs from the reference's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_matched: Option<Stats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_matched_class: Option<PrecisionClass>,
    /// The budget Triton's autotuner had to choose the candidate's configs with (absent in
    /// results from before it was set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autotune: Option<AutotuneBudget>,
}

/// How long Triton's autotuner benchmarks each config of a candidate's `@triton.autotune`
/// kernel (its `do_bench` warm-up and repetition budgets, in ms). Triton's own are 25 and 100:
/// about 0.13 s of GPU time per config at every cache miss, so a six-config matmul solution
/// spends most of an evaluation's kernel time choosing its tiles, GPU time a warm worker's
/// other evaluations wait for. The judge times the chosen config afterwards either way; a
/// smaller budget only makes the choice from fewer repetitions. The default is `FAST`: it gave a
/// warm H200 worker 37 % more evaluations an hour, the configs it chose ran as fast (profiled
/// GPU busy time 0.97-1.01 of Triton's budget's, 8 tasks, two calls), and the candidates' timed
/// medians did not move beyond the judge's noise between fresh processes (fast / triton, geometric
/// mean over the 8 tasks: 0.99, 0.99 and 1.04 in three one-round runs, each task anywhere from
/// 0.85 to 1.16; docs/design-notes.md). A candidate that passes its own `do_bench`, `warmup` or
/// `rep` to the autotuner keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutotuneBudget {
    pub warmup_ms: u32,
    pub rep_ms: u32,
}

impl AutotuneBudget {
    /// Triton's own budgets (`triton.testing.do_bench`'s defaults).
    pub const TRITON: AutotuneBudget = AutotuneBudget {
        warmup_ms: 25,
        rep_ms: 100,
    };

    /// The judge's default: a fifth of Triton's warm-up and a quarter of its repetitions.
    pub const FAST: AutotuneBudget = AutotuneBudget {
        warmup_ms: 5,
        rep_ms: 25,
    };

    /// `fast` (5/25, the default), `triton` (Triton's own 25/100), or `WARMUP/REP` in milliseconds
    /// (REP at least 1).
    pub fn parse(text: &str) -> Result<AutotuneBudget, String> {
        match text.trim() {
            "triton" => return Ok(AutotuneBudget::TRITON),
            "fast" => return Ok(AutotuneBudget::FAST),
            _ => {}
        }
        let (warmup, rep) = text.split_once('/').ok_or_else(|| {
            format!("`{text}`: expected `triton`, `fast` or WARMUP/REP in ms, e.g. 5/25")
        })?;
        let ms = |what: &str, value: &str| {
            value
                .trim()
                .parse::<u32>()
                .map_err(|e| format!("`{text}`: {what} `{value}`: {e}"))
        };
        let budget = AutotuneBudget {
            warmup_ms: ms("warm-up", warmup)?,
            rep_ms: ms("repetitions", rep)?,
        };
        if budget.rep_ms == 0 {
            return Err(format!(
                "`{text}`: the repetition budget must be at least 1 ms"
            ));
        }
        Ok(budget)
    }
}

impl std::fmt::Display for AutotuneBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.warmup_ms, self.rep_ms)
    }
}

/// A precision class, measured from a computation's error against a float64 reference
/// (never from the tolerance profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrecisionClass {
    /// 23 mantissa bits: float32 arithmetic.
    Fp32,
    /// 10 mantissa bits, operands truncated from fp32 (tensor cores reading fp32 registers:
    /// Triton's default `tl.dot`), or a 10-bit error without the fingerprint of a rounding.
    Tf32,
    /// 10 mantissa bits, rounded to nearest: fp16 casts (TF32 rounded to nearest, as cuBLAS
    /// does, looks the same).
    Fp16,
    /// 7 mantissa bits.
    Bf16,
}

impl PrecisionClass {
    pub fn as_str(self) -> &'static str {
        match self {
            PrecisionClass::Fp32 => "fp32",
            PrecisionClass::Tf32 => "tf32",
            PrecisionClass::Fp16 => "fp16",
            PrecisionClass::Bf16 => "bf16",
        }
    }

    /// Explicit mantissa bits: what orders classes by precision (tf32 and fp16 tie).
    pub fn mantissa_bits(self) -> u32 {
        match self {
            PrecisionClass::Fp32 => 23,
            PrecisionClass::Tf32 | PrecisionClass::Fp16 => 10,
            PrecisionClass::Bf16 => 7,
        }
    }
}

/// One output's error against the float64 reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorVsF64 {
    /// ||x − ref64||₂ / ||ref64||₂; `None` when not finite.
    pub rel_rms: Option<f64>,
    /// max |x − ref64| / rms(ref64); `None` when not finite.
    pub max_norm: Option<f64>,
}

/// The float64 reference computed once more with a known rounding (see docs/result-schema.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Emulation {
    /// `rn10`, `rn10+out`, `out10`, `rz10`, `rn7`, `rn7+out` or `out7`.
    pub name: String,
    /// The emulation's own error against float64.
    pub rel_rms: Option<f64>,
    /// How much of the candidate's error is this rounding.
    pub candidate: Fingerprint,
    /// The same for the reference's own error.
    pub reference: Fingerprint,
}

/// How much of an error (d = x − ref64) is an emulated rounding's (d_e). `None` where undefined.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Fingerprint {
    /// ⟨d, d_e⟩ / ⟨d_e, d_e⟩: 1 when the error contains that rounding (whatever else it adds,
    /// such as accumulation error), 0 when unrelated.
    pub coefficient: Option<f64>,
    /// The coefficient's standard error: ||d − coefficient·d_e|| / (||d_e||·√(n−1)).
    pub coefficient_noise: Option<f64>,
    /// ||d − d_e|| / ||d||: near 0 when the error is that rounding and nothing else.
    pub unexplained: Option<f64>,
}

/// The precision measurement of one floating-point output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputPrecision {
    pub index: u32,
    /// The reference output's dtype (`float32`, `float16`, ...).
    pub dtype: String,
    /// Elements finite in the reference, its float64 copy and the candidate's output.
    pub elements: u64,
    pub candidate: ErrorVsF64,
    /// The reference's own error, at the task's precision.
    pub reference: ErrorVsF64,
    pub emulations: Vec<Emulation>,
    /// Equivalent mantissa bits: 10 + log2(rel_rms(`rn10+out`) / candidate rel_rms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_bits: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_bits: Option<f64>,
    pub class: PrecisionClass,
    pub reference_class: PrecisionClass,
    /// What decided `class`: `exact`, `emulation:<name>`, `matches-reference` or `magnitude`.
    pub evidence: String,
}

/// The measured precision of a candidate (trial 0's inputs), next to the reference's own.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Precision {
    /// The trial whose inputs were measured.
    pub trial: u32,
    /// The lowest class over the floating-point outputs; `None` when unmeasured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<PrecisionClass>,
    /// The reference's own class, as the task runs it (the task's precision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_class: Option<PrecisionClass>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<OutputPrecision>,
    /// Why nothing was measured (never the candidate's fault, never an `infra_error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmeasured: Option<String>,
    /// Seconds the float64 forwards took on the referee while the candidate ran the measured
    /// trial (they need none of its outputs); absent where this stage ran them (outputs too
    /// large to hold that long, or the forwards failed ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwards_ahead_s: Option<f64>,
}

/// GPU time of one kernel (by exact name) in the profiled forward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelTime {
    pub name: String,
    pub calls: u32,
    pub gpu_time_us: f64,
    /// Launched through Triton from the candidate's own `@triton.jit` functions.
    pub candidate_triton: bool,
}

/// Where the GPU time of one forward went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub kernels: Vec<KernelTime>,
    pub candidate_triton_us: f64,
    pub total_gpu_us: f64,
}

/// A Triton kernel the candidate launched, and the autotune config used, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    pub kernel: String,
    pub calls: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autotune_config: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Env {
    /// `cuda:0`, `cpu`, ...
    pub device: String,
    pub device_name: Option<String>,
    pub torch: Option<String>,
    pub triton: Option<String>,
    pub cuda: Option<String>,
    pub driver: Option<String>,
    pub python: Option<String>,
    pub crucible: String,
    /// `true` when kernels ran through Triton's interpreter on the CPU.
    pub triton_interpret: bool,
}

/// A file the evaluation read, identified by content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRef {
    pub name: String,
    pub path: String,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    /// `kb-v0` or `strict`.
    pub profile: String,
    pub atol: f64,
    pub rtol: f64,
}

/// The result of evaluating one candidate against one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalResult {
    pub schema: String,
    pub verdict: Verdict,
    pub correct: bool,
    /// Reference median / candidate median; `None` when no timing was taken.
    pub speedup: Option<f64>,
    /// Speedup against the reference run at the candidate's measured precision class
    /// (`speedup_matched_class`); equal to `speedup` when that class is the reference's own.
    /// `None` without timing or without a precision measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_matched: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup_matched_class: Option<PrecisionClass>,
    pub timing: Option<Timing>,
    /// Why `timing` is null, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing_skipped: Option<String>,
    /// Candidate Triton GPU time / all GPU time in one profiled forward.
    pub coverage: Option<f64>,
    /// The candidate's precision, measured against a float64 reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    pub findings: Vec<Finding>,
    pub stages: Vec<Stage>,
    pub seeds: Seeds,
    pub tolerance: Tolerance,
    /// Size profile of the task's inputs (`full` is the file as written).
    pub size_profile: String,
    pub trials: Vec<Trial>,
    /// The generalization trial; absent when it was not asked for (`--generalize off`, or
    /// `auto` for a task that declares no `GENERALIZE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generalization: Option<Generalization>,
    pub launches: Vec<Launch>,
    pub task: FileRef,
    pub candidate: FileRef,
    pub env: Env,
    pub wall_s: f64,
}

/// The failure stages of the `timeout` result the service writes when a task's deadline passed
/// before any worker started it, and while a worker was evaluating it. Either way the candidate
/// was not judged. The judge's own stages (docs/result-schema.md) never take these names.
pub const DEADLINE_STAGE_QUEUED: &str = "queue";
pub const DEADLINE_STAGE_RUNNING: &str = "evaluation";

impl EvalResult {
    /// Whether this is the service's `timeout` for a task whose deadline passed: no verdict on
    /// the candidate (like an `infra_error`, it has no reward), unlike a `timeout` of the judge's
    /// own stage deadlines, which the candidate's code ran into.
    pub fn deadline_passed(&self) -> bool {
        self.verdict == Verdict::Timeout
            && self.failure.as_ref().is_some_and(|f| {
                f.class == FailureClass::Timeout
                    && [DEADLINE_STAGE_QUEUED, DEADLINE_STAGE_RUNNING].contains(&f.stage.as_str())
            })
    }

    /// The most severe finding, if any.
    pub fn worst_severity(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    /// Whether any finding says the candidate hacked or dodged the task.
    pub fn has_reject_or_flag(&self) -> bool {
        self.worst_severity() >= Some(Severity::Flag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autotune_budgets_parse_by_name_or_in_milliseconds() {
        assert_eq!(AutotuneBudget::parse("triton"), Ok(AutotuneBudget::TRITON));
        assert_eq!(AutotuneBudget::parse("fast"), Ok(AutotuneBudget::FAST));
        let budget = AutotuneBudget::parse("2/10").expect("valid");
        assert_eq!((budget.warmup_ms, budget.rep_ms), (2, 10));
        assert_eq!(budget.to_string(), "2/10");
        for bad in ["", "default", "5", "5/0", "a/25", "5/-1", "5/25/1"] {
            assert!(AutotuneBudget::parse(bad).is_err(), "{bad}");
        }
        let json = serde_json::to_value(AutotuneBudget::FAST).expect("json");
        assert_eq!(json, serde_json::json!({"warmup_ms": 5, "rep_ms": 25}));
    }

    #[test]
    fn stats_match_hand_computed_values() {
        let s = Stats::from_samples(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.n, 4);
        assert_eq!(s.median_ms, 2.5);
        assert_eq!(s.mean_ms, 2.5);
        assert_eq!(s.min_ms, 1.0);
        assert_eq!(s.max_ms, 4.0);
        assert_eq!(s.iqr_ms, 3.25 - 1.75);
        assert!((s.cv - (1.25f64).sqrt() / 2.5).abs() < 1e-12);
        assert!(Stats::from_samples(&[]).is_none());
    }

    /// A document written before the generalization trial existed (no `generalization`).
    const OLD_DOCUMENT: &str = r#"{"schema":"crucible.result/1","verdict":"correct","correct":true,
        "speedup":null,"timing":null,"coverage":null,"findings":[],"stages":[],
        "seeds":{"base":1,"init":2,"trials":[3],"timing":4},
        "tolerance":{"profile":"kb-v0","atol":0.01,"rtol":0.01},"size_profile":"small",
        "trials":[{"seed":3,"passed":true,"outputs":[]}],"launches":[],
        "task":{"name":"t","path":"t.py","sha256":"0"},
        "candidate":{"name":"c","path":"c.py","sha256":"0"},
        "env":{"device":"cpu","device_name":null,"torch":null,"triton":null,"cuda":null,
               "driver":null,"python":null,"crucible":"0","triton_interpret":true},
        "wall_s":1.0}"#;

    #[test]
    fn documents_without_a_generalization_trial_still_parse() {
        let old: EvalResult = serde_json::from_str(OLD_DOCUMENT).unwrap();
        assert_eq!(old.generalization, None);
        let text = serde_json::to_string(&old).unwrap();
        assert!(!text.contains("generalization"), "absent, not null: {text}");
    }

    #[test]
    fn a_generalization_trial_round_trips() {
        let mut doc: EvalResult = serde_json::from_str(OLD_DOCUMENT).unwrap();
        doc.generalization = Some(Generalization {
            status: GeneralizationStatus::Failed,
            source: "auto".into(),
            constants: vec![PerturbedConstant {
                name: "dim".into(),
                from: 64,
                to: 63,
            }],
            trial: Some(Trial {
                seed: 9,
                passed: false,
                outputs: vec![],
                message: Some("output 0: 3 of 189 elements differ".into()),
                repeat_of: None,
            }),
            message: Some("output 0: 3 of 189 elements differ".into()),
        });
        let text = serde_json::to_string(&doc).unwrap();
        assert!(text.contains(r#""status":"failed""#), "{text}");
        let back: EvalResult = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn precision_fields_are_optional_and_round_trip() {
        let class = serde_json::to_string(&PrecisionClass::Tf32).unwrap();
        assert_eq!(class, "\"tf32\"");
        let timing: Timing = serde_json::from_str(
            r#"{"reference": {"n": 1, "median_ms": 1.0, "mean_ms": 1.0, "min_ms": 1.0,
                "max_ms": 1.0, "iqr_ms": 0.0, "cv": 0.0},
                "candidate": {"n": 1, "median_ms": 1.0, "mean_ms": 1.0, "min_ms": 1.0,
                "max_ms": 1.0, "iqr_ms": 0.0, "cv": 0.0},
                "warmup": 5, "l2_flush_bytes": 0, "candidate_phase_wall_s": 0.1}"#,
        )
        .unwrap();
        assert!(timing.reference_matched.is_none());
        let text = serde_json::to_string(&timing).unwrap();
        assert!(!text.contains("reference_matched"), "{text}");
        let unmeasured = Precision {
            unmeasured: Some("no float64".into()),
            ..Precision::default()
        };
        let text = serde_json::to_string(&unmeasured).unwrap();
        assert_eq!(text, r#"{"trial":0,"unmeasured":"no float64"}"#);
        assert_eq!(
            serde_json::from_str::<Precision>(&text).unwrap(),
            unmeasured
        );
        assert!(PrecisionClass::Fp16.mantissa_bits() < PrecisionClass::Fp32.mantissa_bits());
    }

    #[test]
    fn failure_classes_map_to_contract_verdicts() {
        assert_eq!(FailureClass::SyntaxError.verdict(), Verdict::CompileError);
        assert_eq!(FailureClass::OutOfMemory.verdict(), Verdict::RuntimeError);
        assert_eq!(FailureClass::InfraError.verdict(), Verdict::InfraError);
        let json = serde_json::to_string(&Verdict::CompileError).unwrap();
        assert_eq!(json, "\"compile_error\"");
    }
}

#[cfg(test)]
mod float_tests {
    /// Results are never rounded, also not by a trip through JSON: serde_json's default float
    /// parser may be off by one ulp (its `float_roundtrip` feature makes it exact). A stage
    /// duration of 2.9006116090000003 s came back different in a Python test.
    #[test]
    fn floats_survive_json_exactly() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut differ = Vec::new();
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Durations and timings: positive values from microseconds to hours.
            let value =
                (state >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((state % 9) as i32 - 4);
            let text = serde_json::to_string(&value).expect("serialize");
            let back: f64 = serde_json::from_str(&text).expect("parse");
            if back.to_bits() != value.to_bits() {
                differ.push(text);
            }
        }
        assert!(
            differ.is_empty(),
            "{} values changed, e.g. {:?}",
            differ.len(),
            &differ[..differ.len().min(3)]
        );
    }
}
