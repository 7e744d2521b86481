//! What a long-lived caller (a service worker) can hand an evaluation to share work between
//! evaluations without sharing any state the candidate can reach: a gate around the timed
//! phases (exclusive use of the GPU while timing), a cache of reference timings, a watcher of
//! the stages and a way to stop the evaluation.
//!
//! Both are optional; without them an evaluation behaves exactly as a standalone one.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use crucible_result::PrecisionClass;

use super::Workers;

/// Held for the duration of an evaluation's timed phases (`timing`, `profile`); dropping it
/// lets the next evaluation's timed phases in.
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

    /// A share for untimed work that needs a large part of the device's memory (the precision
    /// measurement of a task with gigabyte outputs, the trials of a task with gigabyte
    /// tensors): besides what `share` waits for, it waits
    /// while another such share is held, so no two of them together run the device out of
    /// memory. Two 23_Softmax measurements at once (about 60 GB each on an H200) did, and the
    /// engine's retry alone of the one that lost stalled every other evaluation.
    fn share_large(&self) -> TimedPhaseGuard {
        self.share()
    }

    /// The share for untimed work of the evaluation that holds the large-evaluation claim
    /// ([`TimedPhaseGate::large_evaluation`]): a large share that waits while a timed phase
    /// holds the device but not while one waits for it. Every evaluation of a task too large to
    /// fit twice waits for the holder's end, so the holder's waits are theirs too. By default
    /// the large share.
    fn share_ahead(&self) -> TimedPhaseGuard {
        self.share_large()
    }

    /// Blocks while another evaluation holds this claim, then holds it until the guard is
    /// dropped, at the evaluation's end; `None` where `stop` (asked while waiting) said to give
    /// up the wait (the evaluation was cancelled): taken by an evaluation whose trials and precision
    /// measurement, estimated from the task's shapes before its first trial, would need more
    /// than half of the device's memory, so that no two such evaluations are on the device at
    /// once (`EvalConfig::device_memory_bytes`). Between their large shares two 23_Softmax
    /// evaluations keep their trials' tensors, and one's precision measurement beside the
    /// other's trial ran an 80 GiB H100 out of memory. By default nothing to wait for.
    fn large_evaluation(&self, stop: &dyn Fn() -> bool) -> Option<TimedPhaseGuard> {
        let _ = stop;
        Some(Box::new(()))
    }

    /// Whether a timed phase waits for the device now, for the shares held to end. An
    /// evaluation that holds a share across several pieces of untimed work (a later trial's
    /// prepare, run and check; the autotuner's benchmarks, config after config) asks between
    /// two of them, and where one waits lets its share go and asks again behind it: the phase
    /// then waits for one piece, not all of them. By default none ever waits.
    fn timed_phase_waiting(&self) -> bool {
        false
    }
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

/// The tasks whose device work an evaluation found large (a trial's tensors of
/// `EvalConfig::large_work_bytes` or more), by task file and requested size profile, so that
/// later evaluations of them take the gate's large share from their first claim on the device
/// instead of from the second half of their first trial. Trial 0's inputs and expected outputs
/// were otherwise drawn under an ordinary share: on an H200 at eight evaluations at once, a
/// 23_Softmax referee held 24.6 GiB that way beside another's 72.7 GiB precision measurement
/// and about thirty smaller processes, and the device ran out of memory.
#[derive(Debug, Default)]
pub struct LargeTasks(Mutex<HashSet<(String, Option<String>)>>);

impl LargeTasks {
    pub fn new() -> LargeTasks {
        LargeTasks::default()
    }

    pub fn contains(&self, task_sha256: &str, size_profile: Option<&str>) -> bool {
        let key = (task_sha256.to_string(), size_profile.map(str::to_string));
        self.lock().contains(&key)
    }

    pub fn insert(&self, task_sha256: &str, size_profile: Option<&str>) {
        let key = (task_sha256.to_string(), size_profile.map(str::to_string));
        self.lock().insert(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, Option<String>)>> {
        // A set of keys stays whole whatever panicked while holding it.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Takes an evaluation's processes once they have been sent `SIGKILL`: waiting for them to exit
/// (a process with a CUDA context takes a while) and removing their scratch directories are
/// then off the evaluation's critical path. Dropping the [`Workers`] does both.
pub trait Teardown: Send + Sync + Debug {
    fn retire(&self, workers: Workers);

    /// Called once the evaluation's stages are over, just before its processes are killed (what
    /// they used is still there to read, e.g. [`Workers::cpu_seconds`]).
    fn before_kill(&self, _workers: &Workers) {}
}

/// Told the name of each stage as it starts (`verify`, `start`, `reference`, `load`,
/// `trial_N`, `repeat`, `precision`, `generalize`, `profiler-start`, `timed-inputs`, `timing`,
/// `profile`, `timing-recheck`, `timed-output`), so a long-lived caller can say what an
/// evaluation is doing. Called on the evaluation's thread.
pub trait StageObserver: Send + Sync + Debug {
    fn stage_started(&self, name: &str);
}

/// Stops an evaluation from another thread (its task was cancelled): [`Abort::abort`] sends
/// both of its process groups `SIGKILL` at once, or as soon as it has processes, and the
/// evaluation ends `infra_error` ([`InfraError::Aborted`]), never charged to the candidate.
///
/// The groups are only ever signalled while the evaluation owns its processes, which it reaps
/// only after detaching them here, so a recycled process id is never hit.
///
/// [`InfraError::Aborted`]: crate::InfraError::Aborted
#[derive(Debug, Clone, Default)]
pub struct Abort(Arc<Mutex<AbortState>>);

#[derive(Debug, Default)]
struct AbortState {
    requested: bool,
    /// Process groups of the processes the evaluation owns now.
    groups: Vec<libc::pid_t>,
}

impl Abort {
    pub fn new() -> Abort {
        Abort::default()
    }

    /// Stops the evaluation (idempotent).
    pub fn abort(&self) {
        let mut state = self.lock();
        state.requested = true;
        kill_groups(&state.groups);
    }

    pub fn is_aborted(&self) -> bool {
        self.lock().requested
    }

    /// Lets `abort` reach these processes until the guard drops (killing them now if the
    /// abort came first).
    pub(crate) fn attach(&self, workers: &Workers) -> Attached<'_> {
        let mut state = self.lock();
        state.groups = workers.process_groups().to_vec();
        if state.requested {
            kill_groups(&state.groups);
        }
        Attached(self)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AbortState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// While it lives, an [`Abort`] may signal the evaluation's processes.
pub(crate) struct Attached<'a>(&'a Abort);

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.0.lock().groups.clear();
    }
}

fn kill_groups(groups: &[libc::pid_t]) {
    for &group in groups {
        // SAFETY: plain syscall; each harness process called setsid, so its pid is its group's
        // id, and it has not been reaped while it is attached.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}
