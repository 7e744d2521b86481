//! What the engine reports as it works, to whoever wants to watch (tests, the benchmark).

use std::sync::Arc;
use std::time::{Duration, Instant};

/// One observation.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    /// An evaluation got a prestarted pair from the pool (`prestarted` true; `said_hello`
    /// when both processes were ready, so the evaluation waited for no start-up); one that
    /// finds the pool empty starts its own inside the judge, which is not reported.
    WorkersTaken {
        candidate_pid: u32,
        prestarted: bool,
        said_hello: bool,
        /// CPU seconds the pair had used when taken, `[referee, candidate]`: its start-up
        /// (importing torch, the device, the profiler's first start), paid in the pool.
        cpu_s: [f64; 2],
    },
    /// An evaluation's processes are about to be killed: the CPU seconds they used in all,
    /// `[referee, candidate]` (start-up included; the candidate's with its compilers).
    ProcessCpu { cpu_s: [f64; 2] },
    /// How long an evaluation waited for the GPU lock (for its timed phases or, shared, for
    /// untimed GPU work).
    GpuLockWait(Duration),
    /// An evaluation held the GPU from `entered` to `left` (reported before release), having
    /// asked for it at `asked`.
    TimedPhases {
        asked: Instant,
        entered: Instant,
        left: Instant,
    },
    /// An evaluation's untimed GPU work (a trial, building a model...) held a share of the GPU
    /// from `entered` to `left`, asked for at `asked`; it must not overlap any `TimedPhases`.
    UntimedGpuWork {
        asked: Instant,
        entered: Instant,
        left: Instant,
    },
    /// An evaluation is about to run with the device cleared (a large task's retry, or its
    /// `ran-alone` run), and the warm pool made way for it: it killed `dropped` waiting pairs
    /// and starts none until that run ends.
    MadeWay { dropped: usize },
    /// A reference timing came from the cache (`hit`) or was measured.
    ReferenceTiming { hit: bool },
}

/// Called from any thread; keep it cheap.
pub type Probe = Arc<dyn Fn(EngineEvent) + Send + Sync>;
