//! What a long-lived caller (a service worker) can hand an evaluation to share work between
//! evaluations without sharing any state the candidate can reach: a gate around the timed
//! phases (exclusive use of the GPU while timing) and a cache of reference timings.
//!
//! Both are optional; without them an evaluation behaves exactly as a standalone one.

use std::fmt::Debug;

use crucible_result::PrecisionClass;

use super::Workers;

/// Held for the duration of an evaluation's timed phases (`timing`, `profile`,
/// `timed-output`); dropping it lets the next evaluation's timed phases in.
pub type TimedPhaseGuard = Box<dyn Send>;

/// Grants exclusive use of the device for one evaluation's timed phases, so the CPU work of
/// other evaluations (start-up, verify, load, compilation, trials) overlaps while the numbers
/// stay clean. Entered only when the timed phases will run (a correct candidate on a GPU).
///
/// Untimed work that runs on the device (building the reference and the candidate's model,
/// each trial, the precision measurement, the generalization trial) holds a shared claim
/// (`share`): any number at once, never during another evaluation's timed phases, whose
/// kernels would otherwise share the GPU with the timed ones. Measured on an H200 with six
/// evaluations at once: timings moved by up to half between GPUs, and honest candidates were
/// rejected for timing contradictions, while trials ran beside timed phases.
pub trait TimedPhaseGate: Send + Sync + Debug {
    /// Blocks until this evaluation may time; the phases end when the guard is dropped.
    fn enter(&self) -> TimedPhaseGuard;

    /// Blocks while another evaluation times (and, so that timed phases are not starved, while
    /// one waits to); the untimed work ends when the guard is dropped.
    fn share(&self) -> TimedPhaseGuard;
}

/// Everything a reference timing depends on besides the trusted referee's own code. Timings
/// under an equal key are interchangeable (see ARCHITECTURE.md, "Reference timing cache").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReferenceKey {
    /// sha256 of the task file.
    pub task_sha256: String,
    /// The size profile the referee resolved (`full`, `small`, ...).
    pub size_profile: String,
    /// The GPU model as the referee reported it.
    pub device_name: String,
    /// crucible, harness, torch, triton, CUDA and driver versions.
    pub versions: String,
    pub warmup: u32,
    pub iters: u32,
    pub flush_bytes: u64,
    /// `None`: the reference as the task runs it; else at the candidate's measured class.
    pub precision: Option<PrecisionClass>,
}

/// One reference timing as the referee measured it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceTiming {
    pub samples_ms: Vec<f64>,
    pub io_bytes: f64,
}

/// Reference timings shared between evaluations. `lookup` decides the schedule: returning
/// `None` (a miss, or an entry due for re-measurement) makes the evaluation time the reference
/// itself and `store` the new measurement.
pub trait ReferenceTimingCache: Send + Sync + Debug {
    fn lookup(&self, key: &ReferenceKey) -> Option<ReferenceTiming>;
    fn store(&self, key: ReferenceKey, timing: ReferenceTiming);
}

/// Takes an evaluation's processes once they have been sent `SIGKILL`: waiting for them to exit
/// (a process with a CUDA context takes a while) and removing their scratch directories are
/// then off the evaluation's critical path. Dropping the [`Workers`] does both.
pub trait Teardown: Send + Sync + Debug {
    fn retire(&self, workers: Workers);
}
