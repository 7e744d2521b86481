//! Exclusive use of one GPU during timed phases, across threads and processes.
//!
//! A file lock (`flock`) on a file named after the GPU's UUID: every worker process on the
//! machine that times on that GPU opens the same file, whatever its `CUDA_VISIBLE_DEVICES`
//! numbering. `flock` locks belong to an open file description, so each entry opens the file
//! afresh: two threads of one process then exclude each other like two processes do.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crucible_judge::{TimedPhaseGate, TimedPhaseGuard};

use super::probe::{EngineEvent, Probe};

/// The gate the judge enters before an evaluation's timed phases.
pub struct GpuLock {
    path: PathBuf,
    probe: Option<Probe>,
}

impl std::fmt::Debug for GpuLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuLock")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl GpuLock {
    /// A lock on `path` (created if missing; its directory must be writable).
    pub fn new(path: PathBuf, probe: Option<Probe>) -> std::io::Result<GpuLock> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        open(&path)?;
        Ok(GpuLock { path, probe })
    }

    /// The lock file for a GPU, keyed by its UUID (else its PCI bus id), under `dir`.
    pub fn path_for(dir: &Path, gpu_id: &str) -> PathBuf {
        let name: String = gpu_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        dir.join(format!("gpu-{name}.lock"))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Blocks until this thread holds the GPU; released when the guard drops.
    pub fn acquire(&self) -> Held {
        let asked = Instant::now();
        let file = match open(&self.path).and_then(|file| file.lock().map(|()| file)) {
            Ok(file) => Some(file),
            Err(error) => {
                // Never a reason to fail an evaluation, but the numbers are no longer exclusive.
                tracing::error!(
                    "cannot lock {} ({error}); timing without exclusive use of the GPU",
                    self.path.display()
                );
                None
            }
        };
        let entered = Instant::now();
        if let Some(probe) = &self.probe {
            probe(EngineEvent::GpuLockWait(entered - asked));
        }
        Held {
            file,
            entered,
            probe: self.probe.clone(),
        }
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// The GPU, held; dropping it lets the next one in.
pub struct Held {
    file: Option<File>,
    entered: Instant,
    probe: Option<Probe>,
}

impl Held {
    pub fn held_for(&self) -> Duration {
        self.entered.elapsed()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Reported while still held, so intervals from the probe can be checked for overlap.
        if let Some(probe) = &self.probe {
            probe(EngineEvent::TimedPhases {
                entered: self.entered,
                left: Instant::now(),
            });
        }
        if let Some(file) = self.file.take() {
            let _ = file.unlock();
        }
    }
}

/// The judge's view of the lock.
#[derive(Debug, Clone)]
pub(crate) struct Gate(pub Arc<GpuLock>);

impl TimedPhaseGate for Gate {
    fn enter(&self) -> TimedPhaseGuard {
        Box::new(self.0.acquire())
    }
}
