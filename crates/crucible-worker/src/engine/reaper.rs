//! Reaps finished evaluations' processes and removes their scratch on a thread of its own.
//!
//! The judge has already sent both process groups `SIGKILL`; what is left (waiting for a
//! process with a CUDA context to go, removing directories of shared tensors) would otherwise
//! sit on the next result's critical path.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crucible_judge::{Teardown, Workers};

use super::probe::{EngineEvent, Probe};

pub struct Reaper {
    sender: Mutex<Option<Sender<Workers>>>,
    /// Pairs handed over and pairs reaped so far, for [`Reaper::settle`].
    progress: Arc<(Mutex<Progress>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Told each evaluation's processes' CPU use before they are killed (read only when set).
    probe: Option<Probe>,
}

#[derive(Default)]
struct Progress {
    retired: u64,
    reaped: u64,
}

impl std::fmt::Debug for Reaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reaper")
    }
}

impl Reaper {
    pub fn start(probe: Option<Probe>) -> std::io::Result<Reaper> {
        let (sender, receiver) = channel::<Workers>();
        let progress = Arc::new((Mutex::new(Progress::default()), Condvar::new()));
        let reaped = Arc::clone(&progress);
        let thread = std::thread::Builder::new()
            .name("crucible-reaper".into())
            .spawn(move || {
                // Dropping a pair waits for its processes and removes its directories.
                for workers in receiver {
                    drop(workers);
                    let (counts, changed) = &*reaped;
                    if let Ok(mut counts) = counts.lock() {
                        counts.reaped += 1;
                    }
                    changed.notify_all();
                }
            })?;
        Ok(Reaper {
            sender: Mutex::new(Some(sender)),
            progress,
            thread: Mutex::new(Some(thread)),
            probe,
        })
    }

    /// Waits (at most `limit`) until every pair handed over before the call has been reaped,
    /// its processes gone. A retry that runs alone after running out of device memory starts
    /// only then (and once the driver has their memory back, `super::leftovers`). Returns
    /// whether they were.
    pub fn settle(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let (counts, changed) = &*self.progress;
        let Ok(mut counts) = counts.lock() else {
            return false;
        };
        let target = counts.retired;
        while counts.reaped < target {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            counts = match changed.wait_timeout(counts, left) {
                Ok((counts, _)) => counts,
                Err(_) => return false,
            };
        }
        true
    }

    /// Waits until everything handed over so far is reaped; later pairs are reaped inline.
    pub fn finish(&self) {
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
        if let Some(thread) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = thread.join();
        }
    }
}

impl Teardown for Reaper {
    fn before_kill(&self, workers: &Workers) {
        if let Some(probe) = &self.probe {
            probe(EngineEvent::ProcessCpu {
                cpu_s: workers.cpu_seconds(),
            });
        }
    }

    fn retire(&self, workers: Workers) {
        let sender = self.sender.lock().ok().and_then(|s| s.clone());
        match sender {
            // A send fails only when the thread is gone; the pair is then dropped here.
            Some(sender) => match sender.send(workers) {
                Ok(()) => {
                    if let Ok(mut counts) = self.progress.0.lock() {
                        counts.retired += 1;
                    }
                }
                Err(unsent) => drop(unsent.0),
            },
            None => drop(workers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_judge::{Device, EvalConfig, Runtime};

    #[test]
    fn settle_returns_once_the_pairs_handed_over_are_gone() {
        let Ok(runtime) = Runtime::discover() else {
            eprintln!("SKIPPED: no judge Python runtime; set CRUCIBLE_PYTHON");
            return;
        };
        let reaper = Reaper::start(None).unwrap();
        assert!(
            reaper.settle(Duration::ZERO),
            "nothing handed over: settled at once"
        );
        let cfg = EvalConfig::new(Device::Cpu);
        let pairs: Vec<Workers> = (0..2)
            .map(|_| Workers::spawn(&runtime, &cfg, false).unwrap())
            .collect();
        let pids: Vec<u32> = pairs
            .iter()
            .flat_map(|w| [w.referee_pid(), w.candidate_pid()])
            .collect();
        for workers in pairs {
            reaper.retire(workers);
        }
        assert!(reaper.settle(Duration::from_secs(60)));
        for pid in pids {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            assert!(state.is_empty(), "process {pid} still there: {state}");
        }
        reaper.finish();
    }
}
