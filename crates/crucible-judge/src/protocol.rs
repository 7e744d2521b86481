//! The harness protocol: every request the judge sends to a harness process and every reply it
//! accepts, in one place.
//!
//! Messages are one JSON object per line on the process's private channel (a socket passed
//! across exec). A request is tagged by `op`. A reply is `{"ok": true, ...fields}` or a
//! failure: the referee's `{"ok": false, "error", "traceback"}` (the judge's fault), the
//! candidate's `{"ok": false, "class", "message"}` (charged to the candidate). Replies are parsed
//! strictly: a missing field, an unexpected one or a wrong type is a protocol error, never a
//! default. From the referee (trusted) that is an `infra_error`; from the candidate process,
//! which runs hostile code that can write anything to its channel, it is the candidate's crash.
//!
//! Notes: during a `run` request (and only then) the candidate process sends
//! `{"note": "compiling"}` before Triton compiles a kernel and `{"note": "compiled"}` after, and
//! waits for `{"resumed": true}`: the judge lets its share of the GPU go while the compiler runs
//! (other evaluations' timed phases need not wait for it) and takes it back before answering, so
//! no kernel of the candidate runs without it. A note anywhere else is a protocol error. A
//! `compiling` note before a kernel's launcher is built also names the launcher's argument
//! types (`"launcher": ["*fp32", "i32", "constexpr"]`), which the judge may build into the next
//! Triton seed (`triton_seed.rs`). Between two of its autotuner's config benchmarks the candidate
//! process sends `{"note": "yield"}` and waits for `{"resumed": true}` too: where a timed phase of
//! another evaluation waits for the device, the judge lets its share go first and answers once
//! it holds one again, so that phase waits for one config's benchmark, not for all of them.
//! [`NOTE_COMPILING`], [`NOTE_COMPILED`], [`NOTE_YIELD`], [`resumed`].
//!
//! The same shapes are written to `python/crucible_harness/protocol.json` as JSON Schema
//! ([`document`]); the harness checks every request it receives and every reply it sends against
//! it, and a test here fails when the checked-in file and these types drift apart.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The candidate process is about to compile a Triton kernel (a note, see the module's doc).
pub(crate) const NOTE_COMPILING: &str = "compiling";
/// The compile is over; the candidate process waits for [`resumed`] before it goes on.
pub(crate) const NOTE_COMPILED: &str = "compiled";

/// Between two pieces of the candidate's GPU work (the autotuner's config benchmarks): the
/// candidate process waits for [`resumed`], which may come after a waiting timed phase.
pub(crate) const NOTE_YIELD: &str = "yield";

/// The judge's answer to [`NOTE_COMPILED`] and [`NOTE_YIELD`]: the candidate process may use
/// the GPU again.
pub(crate) fn resumed() -> Value {
    serde_json::json!({"resumed": true})
}

/// Which prepared input set a request is about: `trial_0`…, `repeat`, `timing`, `generalize`.
pub(crate) type TrialKey = String;

/// (atol, rtol) per output precision.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Tolerances {
    pub fp32: [f64; 2],
    pub half: [f64; 2],
}

/// What the timing requests share (both sides time the same loop).
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimedLoop {
    pub seed: u64,
    pub warmup: u32,
    pub iters: u32,
    pub flush_bytes: u64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum RefereeRequest {
    /// Load the task, build the reference model.
    Init {
        task_path: PathBuf,
        /// A size profile name, or `auto`.
        profile: String,
        device: String,
        /// `shm` or `cuda_ipc`.
        transport: String,
        /// Where shared tensors live (the candidate may write there).
        shared_dir: PathBuf,
        init_seed: u64,
        inputs_on_host: bool,
        tolerance: Tolerances,
        /// The trials share the same memory from one to the next (`EvalConfig::standing_shares`).
        standing_shares: bool,
        /// Reply with what a trial will hold, from the task's shapes (`InitReply::sizes`).
        size_trials: bool,
    },
    /// Draw seeded inputs, compute the expected outputs, share inputs and NaN-poisoned slots.
    Prepare { trial: TrialKey, seed: u64 },
    /// Compare the slots with the expected outputs (the candidate is frozen meanwhile).
    Check {
        trial: TrialKey,
        /// Keep this trial's outputs for a later `against_kept` comparison.
        keep: bool,
        /// Also compare with the kept outputs (the repeat run).
        against_kept: bool,
        /// Keep this trial's inputs and outputs for `measure_precision`.
        precision: bool,
    },
    /// Time the reference on fresh inputs: as the task runs it, or (`precision`, a measured
    /// class) at the candidate's precision.
    TimeReference {
        #[serde(flatten)]
        timed: TimedLoop,
        precision: Option<String>,
    },
    /// Begin `measure_precision`'s float64 forwards on this trial's inputs on a thread of the
    /// referee, where their copies fit `max_bytes`; the reply comes at once.
    StartPrecision {
        trial: TrialKey,
        /// Bytes the float64 copies may hold until the measurement.
        max_bytes: u64,
        /// `measure_precision`'s budget, which the forwards are judged by.
        budget_s: f64,
    },
    /// Wait until the forwards `start_precision` began are done.
    AwaitPrecision,
    /// Before any `init`: a first use, on small tensors, of what every trial runs (drawing,
    /// a matmul, the comparison), so that loading those kernels and creating cuBLAS's handle
    /// happen while the process waits in the warm pool, not in its evaluation's first trial.
    WarmUp,
    /// The candidate's and the reference's errors against a float64 copy of the reference, on
    /// the trial kept for it.
    MeasurePrecision {
        /// Seconds the measurement may take; past it, it is reported unmeasured.
        budget_s: f64,
    },
    /// Whether and how to run the generalization trial.
    GeneralizePlan {
        /// `auto`, `on` or `off`.
        mode: String,
    },
    /// Load the task again at the planned sizes and build its reference.
    Generalize {
        task_path: PathBuf,
        init_seed: u64,
        seed: u64,
    },
    /// `prepare`, on the generalized task.
    PrepareGeneralized { trial: TrialKey, seed: u64 },
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum CandidateRequest {
    /// Import the candidate file and build `ModelNew(*init_inputs)`.
    Load {
        candidate_path: PathBuf,
        device: String,
        init_seed: u64,
        /// The referee's init inputs, pickled and base64-encoded.
        init_inputs: String,
        /// The autotuner's benchmark budget, `[warm-up, repetitions]` in ms.
        autotune_ms: [u32; 2],
    },
    /// Build a second `ModelNew` from other init inputs (the generalization trial).
    Reload {
        stage: String,
        init_seed: u64,
        init_inputs: String,
    },
    /// One forward on shared inputs; outputs are copied into the shared slots.
    Run {
        stage: String,
        trial: TrialKey,
        payload: String,
        grad: bool,
    },
    /// `run`, with the model built by `reload`.
    RunGeneralized {
        stage: String,
        trial: TrialKey,
        payload: String,
        grad: bool,
    },
    /// Map the timed phase's inputs and slots (outside the measured window).
    TimeOpen { stage: String, payload: String },
    /// The timed loop; the output of iteration `check_iteration` is kept.
    Time {
        stage: String,
        #[serde(flatten)]
        timed: TimedLoop,
        check_iteration: u64,
    },
    /// Copy the kept output into the slots.
    TimeDeliver { stage: String },
    /// `count` forwards back to back, then one synchronize (timed from outside); with
    /// `synchronize_each`, a synchronize after every forward, as in a timed iteration.
    TimeBatch {
        stage: String,
        count: u32,
        synchronize_each: bool,
    },
    /// Begin the profiler's start-up (CUPTI's, seconds) on a thread of the candidate process
    /// and answer at once: sent once the first trial passed, to a process that did not warm it
    /// ahead, so that its later stages overlap it and a failing candidate never pays it.
    WarmProfiler { stage: String },
    /// Start the profiler once (CUPTI's start-up, or waiting for the `warm_profiler` thread),
    /// so the profile stage does not pay it while the GPU is held exclusively; about a
    /// millisecond where it already ran.
    StartProfiler { stage: String },
    /// Profiled forwards.
    Profile {
        stage: String,
        payload: String,
        forwards: u32,
    },
}

/// The first message of every harness process.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hello {
    pub ready: bool,
}

/// A harness process that cannot start says why instead of hello.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HelloFailure {
    pub error: String,
}

/// Versions and device, as the referee saw them.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HarnessEnv {
    pub device: String,
    pub torch: String,
    pub python: String,
    #[serde(deserialize_with = "present")]
    pub cuda: Option<String>,
    #[serde(deserialize_with = "present")]
    pub device_name: Option<String>,
    #[serde(deserialize_with = "present")]
    pub driver: Option<String>,
    #[serde(deserialize_with = "present")]
    pub triton: Option<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InitReply {
    pub env: HarnessEnv,
    pub init_inputs: String,
    /// The size profile the task was loaded with.
    pub profile: String,
    /// What each trial will hold, from the task's shapes alone (asked for with `size_trials`);
    /// `None` where not asked or where the task's code cannot run on shapes alone.
    #[serde(deserialize_with = "present")]
    pub sizes: Option<TrialSizes>,
}

/// A trial's size, known before it is drawn.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrialSizes {
    /// What `PrepareReply::tensor_bytes` will be.
    pub trial_bytes: u64,
    /// The elements of the outputs, together.
    pub output_elements: u64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PrepareReply {
    /// Descriptors of the shared inputs and slots, pickled and base64-encoded.
    pub payload: String,
    /// Bytes of the tensors the referee holds for the trial: the inputs, their pristine copy,
    /// the expected outputs and the output slots.
    pub tensor_bytes: u64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartPrecisionReply {
    /// Whether the forwards began (not where their float64 copies would exceed `max_bytes`).
    pub started: bool,
    /// The bytes those copies hold.
    pub held_bytes: u64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AwaitPrecisionReply {
    /// Whether the forwards are ready for the measurement; where they failed, it runs them
    /// again itself and reports the failure as it always did.
    pub precomputed: bool,
    /// Their wall time on the referee's thread.
    pub seconds: f64,
    /// Why they failed.
    #[serde(deserialize_with = "present")]
    pub error: Option<String>,
}

/// Error statistics of one output against the expected one.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputStats {
    pub index: u32,
    pub shape: Vec<i64>,
    /// Without the `torch.` prefix: `float32`.
    pub dtype: String,
    pub numel: u64,
    pub max_abs: f64,
    pub mean_abs: f64,
    pub max_rel: f64,
    pub mean_rel: f64,
    pub mismatched: u64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckReply {
    pub outputs: Vec<OutputStats>,
    pub problems: Vec<String>,
    pub mutated_inputs: Vec<u32>,
    pub changed_after_return: Vec<u32>,
    pub repeat_problems: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeReferenceReply {
    pub samples_ms: Vec<f64>,
    /// Bytes of every input and output: the least traffic any implementation needs.
    pub io_bytes: f64,
}

/// One output's error against the float64 reference.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MeasuredError {
    /// ||x − ref64||₂ / ||ref64||₂; null when not finite.
    #[serde(deserialize_with = "present")]
    pub rel_rms: Option<f64>,
    /// max |x − ref64| / rms(ref64); null when not finite.
    #[serde(deserialize_with = "present")]
    pub max_norm: Option<f64>,
}

/// How much of an error is an emulated rounding's; null where undefined.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MeasuredFingerprint {
    #[serde(deserialize_with = "present")]
    pub coefficient: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub coefficient_noise: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub unexplained: Option<f64>,
}

/// The float64 reference once more with a known rounding.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MeasuredEmulation {
    pub name: String,
    #[serde(deserialize_with = "present")]
    pub rel_rms: Option<f64>,
    pub candidate: MeasuredFingerprint,
    pub reference: MeasuredFingerprint,
}

/// The measurement of one floating-point output.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MeasuredOutput {
    pub index: u32,
    pub dtype: String,
    /// Elements finite in the reference, its float64 copy and the candidate's output.
    pub elements: u64,
    pub candidate: MeasuredError,
    pub reference: MeasuredError,
    pub emulations: Vec<MeasuredEmulation>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MeasurePrecisionReply {
    /// Null when unmeasured.
    #[serde(deserialize_with = "present")]
    pub outputs: Option<Vec<MeasuredOutput>>,
    /// Why nothing was measured (never the candidate's fault, never an `infra_error`).
    #[serde(deserialize_with = "present")]
    pub unmeasured: Option<String>,
    /// Each floating-point output's relative RMS error against float64, for as many outputs
    /// as the float64 reference got to (also when the rest is unmeasured).
    pub errors: Vec<OutputErrors>,
    /// Unmeasured because the device ran out of memory (on a shared device, the judge retries
    /// alone instead of leaving it unmeasured).
    #[serde(default)]
    pub out_of_memory: bool,
    /// When it ran out of memory on a GPU: the device memory in use that the referee's own
    /// allocator does not hold (its CUDA context, the candidate's process, anything else).
    #[serde(default)]
    pub held_elsewhere_bytes: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputErrors {
    pub index: u32,
    /// The candidate's ||x − ref64||₂ / ||ref64||₂; null when not finite.
    #[serde(deserialize_with = "present")]
    pub candidate: Option<f64>,
    /// The reference's own; null when not finite.
    #[serde(deserialize_with = "present")]
    pub reference: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PerturbedConstant {
    pub name: String,
    pub from: i64,
    pub to: i64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GeneralizePlanReply {
    /// Whether the trial was asked for at all (`auto` runs it only for tasks declaring it).
    pub requested: bool,
    /// `task` (the task's own `GENERALIZE` values) or `auto`; null when not requested.
    #[serde(deserialize_with = "present")]
    pub source: Option<String>,
    pub constants: Vec<PerturbedConstant>,
    /// Why the trial cannot run, if it cannot.
    #[serde(deserialize_with = "present")]
    pub skip: Option<String>,
    /// The task declares `GENERALIZE = False`.
    pub opted_out: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GeneralizeReply {
    /// Why the trial cannot run at these sizes (the reference fails there, say).
    #[serde(deserialize_with = "present")]
    pub skip: Option<String>,
    /// The generalized task's init inputs; null when skipped.
    #[serde(deserialize_with = "present")]
    pub init_inputs: Option<String>,
}

/// The audit process's one request: the null candidates against one task.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum AuditRequest {
    Audit {
        task_path: PathBuf,
        profile: String,
        device: String,
        init_seed: u64,
        /// One seed per trial; a null passes only if it passes all of them.
        seeds: Vec<u64>,
        tolerance: Tolerances,
        nulls: Vec<String>,
    },
}

/// Shape and dtype of one reference output.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutputShape {
    pub shape: Vec<i64>,
    pub dtype: String,
}

/// How one null candidate did on one task.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NullReport {
    pub name: String,
    pub passed: bool,
    pub trials_run: u32,
    pub trials_passed: u32,
    /// Why this null could not be built for the task.
    #[serde(deserialize_with = "present")]
    pub skipped: Option<String>,
    /// The comparison's complaint on the first failing trial.
    #[serde(deserialize_with = "present")]
    pub message: Option<String>,
    #[serde(deserialize_with = "present")]
    pub max_abs: Option<f64>,
    #[serde(deserialize_with = "present")]
    pub mismatched_fraction: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditReply {
    pub profile: String,
    pub env: HarnessEnv,
    pub outputs: Vec<OutputShape>,
    pub nulls: Vec<NullReport>,
}

/// The audit process could not audit this task (it is trusted: the task's fault or ours).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditFailure {
    pub stage: String,
    pub error: String,
    pub traceback: String,
    /// The process's CUDA context may be broken: start a fresh one.
    pub restart: bool,
}

/// A reply that carries nothing but success.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Done {}

/// Launches of one `@triton.jit` function during a run.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LaunchReport {
    pub kernel: String,
    /// The Python module that defines it (`crucible_candidate` for the candidate's own).
    pub module: String,
    pub calls: u32,
    pub compiled_names: Vec<String>,
    #[serde(deserialize_with = "present")]
    pub autotune_config: Option<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunReply {
    /// Indices of outputs that are one of the inputs (same storage).
    pub aliased_outputs: Vec<u32>,
    /// What is wrong with the outputs (count, type, shape, dtype, device), if anything.
    #[serde(deserialize_with = "present")]
    pub problem: Option<String>,
    pub launches: Vec<LaunchReport>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeReply {
    pub samples_ms: Vec<f64>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeDeliverReply {
    #[serde(deserialize_with = "present")]
    pub problem: Option<String>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KernelReport {
    pub name: String,
    pub calls: u32,
    pub gpu_time_us: f64,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileReply {
    /// Per kernel name, from the first profiled forward.
    pub kernels: Vec<KernelReport>,
    /// Each profiled forward's GPU busy time (union of its device activity), µs.
    pub busy_us: Vec<f64>,
    pub launches: Vec<LaunchReport>,
}

/// The referee's failure reply: the judge's fault.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefereeFailure {
    pub error: String,
    pub traceback: String,
}

/// The candidate process's failure reply: charged to the candidate.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CandidateFailure {
    /// A failure class name; anything but the classes a candidate may claim becomes a runtime
    /// error.
    pub class: String,
    pub message: String,
}

/// A field that may be null but must be there: serde would read a missing `Option` as `None`,
/// which is exactly the silent default this protocol refuses.
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(deserializer)
}

/// One reply, split into success (its fields) or failure.
pub(crate) enum Reply<T, F> {
    Ok(T),
    Failed(F),
}

/// Parses a reply strictly. `Err` holds what is wrong with it.
pub(crate) fn parse_reply<T: DeserializeOwned, F: DeserializeOwned>(
    mut reply: Value,
) -> Result<Reply<T, F>, String> {
    let Some(fields) = reply.as_object_mut() else {
        return Err(format!("a reply must be a JSON object, not {reply:.200}"));
    };
    let ok = match fields.remove("ok") {
        Some(Value::Bool(ok)) => ok,
        Some(other) => return Err(format!("`ok` must be true or false, not {other}")),
        None => return Err("the reply has no `ok` field".into()),
    };
    let parsed = if ok {
        serde_json::from_value(reply).map(Reply::Ok)
    } else {
        serde_json::from_value(reply).map(Reply::Failed)
    };
    parsed.map_err(|e| e.to_string())
}

/// Every request the judge sends and the reply each one gets, as JSON Schema: what the harness
/// checks its side against (`python/crucible_harness/protocol.json`).
pub fn document() -> Value {
    use schemars::schema_for;
    let replies = |pairs: &[(&str, Value)]| -> Value {
        Value::Object(
            pairs
                .iter()
                .map(|(op, s)| (op.to_string(), s.clone()))
                .collect(),
        )
    };
    let schema = |s: schemars::Schema| every_field_required(s.to_value());
    serde_json::json!({
        "about": "Generated from crates/crucible-judge/src/protocol.rs; do not edit. \
                  `cargo test -p crucible-judge protocol` rewrites it with UPDATE_PROTOCOL=1.",
        "hello": schema(schema_for!(Hello)),
        "hello_failure": schema(schema_for!(HelloFailure)),
        "referee": {
            "request": schema(schema_for!(RefereeRequest)),
            "failure": schema(schema_for!(RefereeFailure)),
            "replies": replies(&[
                ("init", schema(schema_for!(InitReply))),
                ("prepare", schema(schema_for!(PrepareReply))),
                ("check", schema(schema_for!(CheckReply))),
                ("time_reference", schema(schema_for!(TimeReferenceReply))),
                ("start_precision", schema(schema_for!(StartPrecisionReply))),
                ("await_precision", schema(schema_for!(AwaitPrecisionReply))),
                ("warm_up", schema(schema_for!(Done))),
                ("measure_precision", schema(schema_for!(MeasurePrecisionReply))),
                ("generalize_plan", schema(schema_for!(GeneralizePlanReply))),
                ("generalize", schema(schema_for!(GeneralizeReply))),
                ("prepare_generalized", schema(schema_for!(PrepareReply))),
            ]),
        },
        "audit": {
            "request": schema(schema_for!(AuditRequest)),
            "failure": schema(schema_for!(AuditFailure)),
            "replies": replies(&[("audit", schema(schema_for!(AuditReply)))]),
        },
        "candidate": {
            "request": schema(schema_for!(CandidateRequest)),
            "failure": schema(schema_for!(CandidateFailure)),
            "replies": replies(&[
                ("load", schema(schema_for!(Done))),
                ("reload", schema(schema_for!(Done))),
                ("run", schema(schema_for!(RunReply))),
                ("run_generalized", schema(schema_for!(RunReply))),
                ("time_open", schema(schema_for!(Done))),
                ("time", schema(schema_for!(TimeReply))),
                ("time_deliver", schema(schema_for!(TimeDeliverReply))),
                ("time_batch", schema(schema_for!(Done))),
                ("warm_profiler", schema(schema_for!(Done))),
                ("start_profiler", schema(schema_for!(Done))),
                ("profile", schema(schema_for!(ProfileReply))),
            ]),
        },
    })
}

/// Every field of every message is required, nullable ones included (see [`present`]); the
/// schema generator leaves an `Option` field out of `required`, so it is put back here.
fn every_field_required(mut schema: Value) -> Value {
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(properties)) = map.get("properties") {
                    let names = properties.keys().cloned().map(Value::String).collect();
                    map.insert("required".into(), Value::Array(names));
                }
                map.values_mut().for_each(walk);
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut schema);
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(request_schema: &Value) -> Vec<String> {
        let mut ops: Vec<String> = request_schema["oneOf"]
            .as_array()
            .expect("a tagged enum is a oneOf")
            .iter()
            .filter_map(|v| v["properties"]["op"]["const"].as_str().map(str::to_string))
            .collect();
        ops.sort();
        ops
    }

    /// Every request has a reply shape, and nothing else does.
    #[test]
    fn every_op_has_exactly_one_reply_shape() {
        let doc = document();
        for side in ["referee", "candidate", "audit"] {
            let mut replies: Vec<String> = doc[side]["replies"]
                .as_object()
                .expect("replies")
                .keys()
                .cloned()
                .collect();
            replies.sort();
            assert_eq!(ops(&doc[side]["request"]), replies, "{side}");
        }
    }

    /// The harness checks its side against the checked-in schema; it must be this one.
    #[test]
    fn the_harness_schema_is_generated_from_these_types() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../python/crucible_harness/protocol.json");
        let generated = serde_json::to_string_pretty(&document()).expect("json") + "\n";
        if std::env::var_os("UPDATE_PROTOCOL").is_some() {
            std::fs::write(&path, &generated).expect("write protocol.json");
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "python/crucible_harness/protocol.json is out of date: rerun this test with \
             UPDATE_PROTOCOL=1"
        );
    }

    #[test]
    fn a_missing_field_is_an_error_not_a_default() {
        let reply = serde_json::json!({"ok": true, "samples_ms": [1.0]});
        let err = parse_reply::<TimeReferenceReply, RefereeFailure>(reply)
            .err()
            .expect("a missing field");
        assert!(err.contains("io_bytes"), "{err}");
    }

    #[test]
    fn an_unexpected_field_is_an_error() {
        let reply = serde_json::json!({"ok": true, "payload": "x", "extra": 1});
        let err = parse_reply::<PrepareReply, RefereeFailure>(reply)
            .err()
            .expect("an unknown field");
        assert!(err.contains("extra"), "{err}");
    }

    #[test]
    fn a_nullable_field_must_still_be_present() {
        let reply = serde_json::json!({"ok": true});
        assert!(parse_reply::<TimeDeliverReply, CandidateFailure>(reply).is_err());
        let reply = serde_json::json!({"ok": true, "problem": null});
        assert!(matches!(
            parse_reply::<TimeDeliverReply, CandidateFailure>(reply),
            Ok(Reply::Ok(TimeDeliverReply { problem: None }))
        ));
    }

    #[test]
    fn failures_parse_as_failures() {
        let reply = serde_json::json!({"ok": false, "error": "E", "traceback": "T"});
        assert!(matches!(
            parse_reply::<Done, RefereeFailure>(reply),
            Ok(Reply::Failed(RefereeFailure { .. }))
        ));
    }
}
