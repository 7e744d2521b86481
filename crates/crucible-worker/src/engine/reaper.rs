//! Reaps finished evaluations' processes and removes their scratch on a thread of its own.
//!
//! The judge has already sent both process groups `SIGKILL`; what is left (waiting for a
//! process with a CUDA context to go, removing directories of shared tensors) would otherwise
//! sit on the next result's critical path.

use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

use crucible_judge::{Teardown, Workers};

use super::probe::{EngineEvent, Probe};

pub struct Reaper {
    sender: Mutex<Option<Sender<Workers>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Told each evaluation's processes' CPU use before they are killed (read only when set).
    probe: Option<Probe>,
}

impl std::fmt::Debug for Reaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reaper")
    }
}

impl Reaper {
    pub fn start(probe: Option<Probe>) -> std::io::Result<Reaper> {
        let (sender, receiver) = channel::<Workers>();
        let thread = std::thread::Builder::new()
            .name("crucible-reaper".into())
            .spawn(move || {
                // Dropping a pair waits for its processes and removes its directories.
                for workers in receiver {
                    drop(workers);
                }
            })?;
        Ok(Reaper {
            sender: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
            probe,
        })
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
            Some(sender) => drop(sender.send(workers)),
            None => drop(workers),
        }
    }
}
