//! The judge: evaluates one candidate `ModelNew` against one KernelBench-format task.
//!
//! A trusted referee process builds the reference, draws seeded inputs on the target device and
//! holds the expected outputs; a fresh, sandboxed candidate process per evaluation maps the
//! referee's input and output buffers, runs forward and never sees the expected values. This
//! crate starts and supervises both over private channels, enforces per-stage deadlines,
//! classifies every failure, and assembles the `crucible.result/1` document. It does not know
//! about rewards, queues or HTTP.

pub mod audit;
mod bytecode;
pub mod device;
pub mod error;
pub mod judge;
pub mod precision;
pub mod process;
pub mod protocol;
pub mod runtime;
pub use crucible_sandbox as sandbox;
mod timing;
pub mod triton_seed;
pub mod zygote;

pub use crucible_result::AutotuneBudget;
pub use crucible_verify::Policy as VerifyPolicy;
pub use device::{Device, DeviceError};
pub use error::{InfraError, judge_ran_out_of_memory, memory_held_elsewhere, shared_device_fault};
pub use judge::{
    Abort, DeviceSharing, EvalConfig, Generalize, LargeTasks, Prestart, ReferenceKey,
    ReferenceTiming, ReferenceTimingCache, SourceFile, StageLimits, StageObserver, TIMED_NICE,
    Teardown, TimedPhaseGate, TimedPhaseGuard, TimingConfig, ToleranceProfile, Transport, Workers,
    evaluate, evaluate_taking, evaluate_with, file_ref, infra_error_result, large_work_bytes_for,
};
pub use runtime::{DeviceFacts, REFEREE_MEMORY_TRACE_ENV, Runtime, device_facts};
pub use sandbox::Sandbox;
pub use triton_seed::{LauncherSignatures, TritonSeed};
pub use zygote::HarnessZygote;
