//! What the engine reports as it works, to whoever wants to watch (tests, the benchmark).

use std::sync::Arc;
use std::time::{Duration, Instant};

/// One observation.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    /// An evaluation got its processes: prestarted by the pool, or started on the spot.
    WorkersTaken {
        candidate_pid: u32,
        prestarted: bool,
    },
    /// How long an evaluation waited for the GPU lock.
    GpuLockWait(Duration),
    /// An evaluation held the GPU from `entered` to `left` (reported before release).
    TimedPhases { entered: Instant, left: Instant },
    /// A reference timing came from the cache (`hit`) or was measured.
    ReferenceTiming { hit: bool },
}

/// Called from any thread; keep it cheap.
pub type Probe = Arc<dyn Fn(EngineEvent) + Send + Sync>;
