//! Exclusive use of one GPU during timed phases, across threads and processes.
//!
//! A file lock (`flock`) on a file named after the GPU's UUID: every worker process on the
//! machine that times on that GPU opens the same file, whatever its `CUDA_VISIBLE_DEVICES`
//! numbering. `flock` locks belong to an open file description, so each entry opens the file
//! afresh: two threads of one process then exclude each other like two processes do.
//!
//! Timed phases lock it exclusively; untimed GPU work (trials, building models) shares it.
//! `flock` favours neither side, so a stream of untimed work could keep a timed phase out for
//! good: a second file is the turnstile. A timed phase holds the turnstile exclusively while it
//! waits for the GPU; untimed work passes through the turnstile (a shared lock, dropped at once)
//! before it asks for its share, so none starts while a timed phase waits.
//!
//! Within one process, timed phases also go first: a share asked for while one of the process's
//! timed phases waits for the GPU or holds it waits for its end (a condition variable, before the
//! turnstile), so timed phases that queue behind one another run back to back, and the second
//! need not wait for shares that queued behind the first to drain. `flock` alone wakes all
//! waiters at a release, and the shares often won.
//!
//! Optionally, at most N shares at once (`slots`): N more files, each locked exclusively by one
//! share, taken before the turnstile. Every process with work on a GPU makes every other one's
//! waits for a result longer (the GPU time-slices between contexts, 2 to 3 ms per busy process
//! on an H200, `scripts/probe/sync_latency.py`), so fewer at once can finish sooner in all.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crucible_judge::{TimedPhaseGate, TimedPhaseGuard};

use super::probe::{EngineEvent, Probe};

/// The gate the judge enters before an evaluation's timed phases.
pub struct GpuLock {
    path: PathBuf,
    probe: Option<Probe>,
    /// At most this many shares at once (0: no limit).
    slots: usize,
    /// This process's timed phases go first (`None`: shares race them, as `flock` has them).
    order: Option<Arc<TimedOrder>>,
}

/// This process's timed phases that wait for the GPU or hold it; shares wait while any do.
#[derive(Default)]
struct TimedOrder {
    phases: Mutex<usize>,
    ended: Condvar,
}

impl TimedOrder {
    fn phases(&self) -> MutexGuard<'_, usize> {
        // A count only: a thread that panicked holding it left it consistent.
        self.phases
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// One more timed phase, from its ask to its release ([`TimedPhase`]'s drop).
    fn begin(self: &Arc<Self>) -> TimedPhase {
        *self.phases() += 1;
        TimedPhase(Arc::clone(self))
    }

    /// Blocks while one of the process's timed phases waits or holds the GPU.
    fn wait_for_none(&self) {
        let mut phases = self.phases();
        while *phases > 0 {
            phases = self
                .ended
                .wait(phases)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    fn any(&self) -> bool {
        *self.phases() > 0
    }
}

/// A timed phase counted in its process's [`TimedOrder`] until dropped.
struct TimedPhase(Arc<TimedOrder>);

impl Drop for TimedPhase {
    fn drop(&mut self) {
        let mut phases = self.0.phases();
        *phases = phases.saturating_sub(1);
        if *phases == 0 {
            self.0.ended.notify_all();
        }
    }
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
        Ok(GpuLock {
            path,
            probe,
            slots: 0,
            order: Some(Arc::default()),
        })
    }

    /// Shares race this process's timed phases for the GPU as `flock` has them, instead of
    /// waiting while one waits or holds it (the lock before 2026-12-07, session 54).
    pub fn in_any_order(mut self) -> GpuLock {
        self.order = None;
        self
    }

    /// At most `slots` shares at once, across every thread and process that uses the same
    /// setting on this lock (0: no limit).
    pub fn with_slots(mut self, slots: usize) -> GpuLock {
        self.slots = slots;
        self
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
        let counted = self.order.as_ref().map(TimedOrder::begin);
        let file = self.turnstile().and_then(|turnstile| {
            turnstile.lock()?;
            let file = open(&self.path)?;
            file.lock()?;
            // Dropping the turnstile (closing it) lets untimed work queue behind this phase.
            Ok(file)
        });
        let mut held = self.held(file, asked, Mode::Exclusive);
        held.counted = counted;
        held
    }

    /// Blocks while a timed phase holds the GPU or waits for it; then holds a share of it,
    /// beside other untimed work, until the guard drops.
    pub fn share(&self) -> Held {
        self.share_asked_at(Instant::now())
    }

    /// [`GpuLock::share`], its wait counted from `asked`.
    fn share_asked_at(&self, asked: Instant) -> Held {
        self.share_through(asked, Turnstile::Pass)
    }

    /// A share, its wait counted from `asked`, through the turnstile or past it.
    fn share_through(&self, asked: Instant, turnstile: Turnstile) -> Held {
        // Behind this process's timed phases; ahead of none past the turnstile.
        if let (Some(order), Turnstile::Pass) = (&self.order, turnstile) {
            order.wait_for_none();
        }
        // The slot first: a share waiting for one holds nothing a timed phase waits for.
        let slot = self.taken_slot();
        let file = (|| {
            if turnstile == Turnstile::Pass {
                self.turnstile()?.lock_shared()?;
            }
            let file = open(&self.path)?;
            file.lock_shared()?;
            Ok(file)
        })();
        let mut held = self.held(file, asked, Mode::Shared);
        held.slot = slot;
        held
    }

    /// Like [`GpuLock::share`], after taking this GPU's large-memory file exclusively: at most
    /// one such share at a time, across threads and processes. Taken first, like a slot, so a
    /// share waiting for it holds nothing a timed phase or another share waits for.
    pub fn share_large(&self) -> Held {
        let asked = Instant::now();
        let large = self.lock_beside("large", "large-memory");
        let mut held = self.share_asked_at(asked);
        held.large = large;
        held
    }

    /// [`GpuLock::share_large`] for the holder of the large-evaluation claim, which does not
    /// queue behind timed phases that wait for the GPU: it passes no turnstile, so it waits only
    /// while a timed phase holds the GPU, not while one waits for the shares before it to end.
    /// One evaluation at a time holds the claim, and every other evaluation of a task too large
    /// to fit twice waits for its end, so its waits are theirs too: on an 80 GiB H100 the eight
    /// 23_Softmax evaluations of the benchmark ran one after another and set the batch's
    /// length, 1.9 s of a correct one's 5.8 s of trials waiting for the lock. A timed phase then
    /// waits for at most this one share more (`flock` favours no waiter, so it gets in at the
    /// first instant no share is held); never beside it.
    pub fn share_ahead(&self) -> Held {
        let asked = Instant::now();
        let large = self.lock_beside("large", "large-memory");
        let mut held = self.share_through(asked, Turnstile::Skip);
        held.large = large;
        held
    }

    /// Blocks while another evaluation holds this GPU's large-evaluation file, then holds it
    /// exclusively until the claim drops ([`TimedPhaseGate::large_evaluation`]), across threads
    /// and processes. A file of its own: held through an evaluation's timed phases and shares,
    /// it never waits for either.
    pub fn large_evaluation(&self) -> LargeEvaluation {
        // Never stopped, so never `None`.
        (self.large_evaluation_unless(&|| false)).unwrap_or(LargeEvaluation(None))
    }

    /// [`GpuLock::large_evaluation`], given up once `stop` says so while another evaluation
    /// holds the claim (`None`): a cancelled evaluation, or one past its deadline, leaves the
    /// queue of large ones at once instead of after the evaluation before it. Polled, like the
    /// slots; `flock`'s own wait is no fairer.
    pub fn large_evaluation_unless(&self, stop: &dyn Fn() -> bool) -> Option<LargeEvaluation> {
        let what = "large-evaluation";
        let file = open(&self.path.with_extension(what)).and_then(|file| {
            loop {
                match file.try_lock() {
                    Ok(()) => return Ok(Some(file)),
                    Err(std::fs::TryLockError::WouldBlock) if stop() => return Ok(None),
                    Err(std::fs::TryLockError::WouldBlock) => std::thread::sleep(CLAIM_POLL),
                    Err(std::fs::TryLockError::Error(error)) => return Err(error),
                }
            }
        });
        match file {
            Ok(file) => file.map(|file| LargeEvaluation(Some(file))),
            Err(error) => {
                self.claim_lost(what, &error);
                Some(LargeEvaluation(None))
            }
        }
    }

    /// The file beside the lock with `extension`, locked exclusively once no one else holds
    /// it; `None` (logged: the `what` claim is lost) where it cannot be.
    fn lock_beside(&self, extension: &str, what: &str) -> Option<File> {
        let file = open(&self.path.with_extension(extension)).and_then(|file| {
            file.lock()?;
            Ok(file)
        });
        file.inspect_err(|error| self.claim_lost(what, error)).ok()
    }

    fn claim_lost(&self, what: &str, error: &std::io::Error) {
        // Costs only the bound on memory, never the exclusion of timed phases.
        tracing::warn!(
            "cannot take the {what} claim beside {} ({error})",
            self.path.display()
        );
    }

    /// [`GpuLock::slot`], `None` (logged) where it cannot be taken: that costs only the limit,
    /// never the exclusion of timed phases.
    fn taken_slot(&self) -> Option<File> {
        self.slot().unwrap_or_else(|error| {
            tracing::warn!(
                "cannot take a GPU slot beside {} ({error})",
                self.path.display()
            );
            None
        })
    }

    /// One of the slots, locked (`None` without a limit). Polled: `flock` has no way to wait
    /// for the first of several files. Not fair: an evaluation that gives its slot back and
    /// asks again at once (a trial's prepare, forward, check) usually gets it back before a
    /// waiter looks again, so an evaluation tends to keep its slot through its GPU work and
    /// loses it while it compiles (the share is let go then); waiters get slots in no set
    /// order.
    fn slot(&self) -> std::io::Result<Option<File>> {
        if self.slots == 0 {
            return Ok(None);
        }
        let mut files = (0..self.slots)
            .map(|i| open(&self.path.with_extension(format!("slot-{i}"))))
            .collect::<std::io::Result<Vec<File>>>()?;
        loop {
            for i in 0..files.len() {
                match files[i].try_lock() {
                    Ok(()) => return Ok(Some(files.swap_remove(i))),
                    Err(std::fs::TryLockError::WouldBlock) => {}
                    Err(std::fs::TryLockError::Error(error)) => return Err(error),
                }
            }
            std::thread::sleep(SLOT_POLL);
        }
    }

    /// Whether a timed phase waits for the GPU now: it holds the turnstile exclusively from
    /// its ask to its entry, and nothing else does ([`GpuLock::acquire`]), so a shared lock of
    /// the turnstile that cannot be had at once means one waits. Asked by a holder of a share,
    /// which no timed phase can be inside beside. `false` where the turnstile cannot be read.
    pub fn timed_phase_waiting(&self) -> bool {
        // This process's own: a share holder asks, so any counted one waits.
        if self.order.as_ref().is_some_and(|order| order.any()) {
            return true;
        }
        let Ok(turnstile) = self.turnstile() else {
            return false;
        };
        match turnstile.try_lock_shared() {
            Ok(()) => false,
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(_)) => false,
        }
    }

    fn turnstile(&self) -> std::io::Result<File> {
        open(&self.path.with_extension("turnstile"))
    }

    fn held(&self, file: std::io::Result<File>, asked: Instant, mode: Mode) -> Held {
        let file = match file {
            Ok(file) => Some(file),
            Err(error) => {
                // Never a reason to fail an evaluation, but the numbers are no longer exclusive.
                tracing::error!(
                    "cannot lock {} ({error}); the GPU is no longer exclusive during timing",
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
            slot: None,
            large: None,
            counted: None,
            asked,
            entered,
            mode,
            probe: self.probe.clone(),
        }
    }
}

/// Whether a share passes through the turnstile (and so waits behind a timed phase that
/// waits for the GPU) or skips it ([`GpuLock::share_ahead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turnstile {
    Pass,
    Skip,
}

/// How a [`Held`] holds the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A timed phase: nothing else runs on the GPU.
    Exclusive,
    /// Untimed work, beside other untimed work.
    Shared,
}

/// How often a share waiting for a slot looks again: small beside a trial's forward.
const SLOT_POLL: Duration = Duration::from_millis(2);

/// How often an evaluation waiting for the large-evaluation claim looks again (and at its
/// cancel): small beside the seconds an evaluation holds it.
const CLAIM_POLL: Duration = Duration::from_millis(10);

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// The large-evaluation claim ([`GpuLock::large_evaluation`]); dropping it lets the next in.
pub struct LargeEvaluation(Option<File>);

impl Drop for LargeEvaluation {
    fn drop(&mut self) {
        if let Some(file) = self.0.take() {
            let _ = file.unlock();
        }
    }
}

/// The GPU, held; dropping it lets the next one in.
pub struct Held {
    file: Option<File>,
    /// The slot this share holds, where shares are limited.
    slot: Option<File>,
    /// The large-memory claim ([`GpuLock::share_large`]).
    large: Option<File>,
    /// A timed phase's count in its process's order, dropped after the GPU itself.
    counted: Option<TimedPhase>,
    asked: Instant,
    entered: Instant,
    mode: Mode,
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
            let (asked, entered, left) = (self.asked, self.entered, Instant::now());
            probe(match self.mode {
                Mode::Exclusive => EngineEvent::TimedPhases {
                    asked,
                    entered,
                    left,
                },
                Mode::Shared => EngineEvent::UntimedGpuWork {
                    asked,
                    entered,
                    left,
                },
            });
        }
        if let Some(file) = self.file.take() {
            let _ = file.unlock();
        }
        // After the GPU itself: the next share in finds it free.
        if let Some(slot) = self.slot.take() {
            let _ = slot.unlock();
        }
        if let Some(large) = self.large.take() {
            let _ = large.unlock();
        }
        // Last: the shares it let wait find the GPU free.
        drop(self.counted.take());
    }
}

/// The judge's view of the lock.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    pub lock: Arc<GpuLock>,
    /// The large-evaluation claim's holder shares ahead of waiting timed phases
    /// ([`GpuLock::share_ahead`]); else it queues like any large share.
    pub holder_ahead: bool,
    /// A share held across several pieces of untimed work lets a waiting timed phase go first
    /// between two of them ([`TimedPhaseGate::timed_phase_waiting`]); else it is held to its end.
    pub shares_yield: bool,
}

impl TimedPhaseGate for Gate {
    fn enter(&self) -> TimedPhaseGuard {
        Box::new(self.lock.acquire())
    }

    fn share(&self) -> TimedPhaseGuard {
        Box::new(self.lock.share())
    }

    fn share_large(&self) -> TimedPhaseGuard {
        Box::new(self.lock.share_large())
    }

    fn share_ahead(&self) -> TimedPhaseGuard {
        Box::new(if self.holder_ahead {
            self.lock.share_ahead()
        } else {
            self.lock.share_large()
        })
    }

    fn large_evaluation(&self, stop: &dyn Fn() -> bool) -> Option<TimedPhaseGuard> {
        let claim = self.lock.large_evaluation_unless(stop)?;
        Some(Box::new(claim))
    }

    fn timed_phase_waiting(&self) -> bool {
        self.shares_yield && self.lock.timed_phase_waiting()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    type Intervals = Arc<Mutex<Vec<(Mode, Instant, Instant)>>>;

    fn lock_with_log(dir: &Path) -> (Arc<GpuLock>, Intervals) {
        lock_with_slots(dir, 0)
    }

    fn lock_with_slots(dir: &Path, slots: usize) -> (Arc<GpuLock>, Intervals) {
        let log: Intervals = Arc::default();
        let probe: Probe = {
            let log = Arc::clone(&log);
            Arc::new(move |event| {
                let entry = match event {
                    EngineEvent::TimedPhases { entered, left, .. } => {
                        (Mode::Exclusive, entered, left)
                    }
                    EngineEvent::UntimedGpuWork { entered, left, .. } => {
                        (Mode::Shared, entered, left)
                    }
                    _ => return,
                };
                log.lock().expect("log").push(entry);
            })
        };
        let lock = GpuLock::new(dir.join("gpu-test.lock"), Some(probe))
            .expect("lock file")
            .with_slots(slots);
        (Arc::new(lock), log)
    }

    /// Six threads, four rounds each, 15 ms per hold: thread `w` uses `locks[w % len]` and times
    /// (holds exclusively) in the rounds where `(w + round) % timed_every == 0`, else shares.
    fn contend(locks: &[Arc<GpuLock>], timed_every: usize) {
        std::thread::scope(|scope| {
            for worker in 0..6 {
                let lock = &locks[worker % locks.len()];
                scope.spawn(move || {
                    for round in 0..4 {
                        let held = if (worker + round) % timed_every == 0 {
                            lock.acquire()
                        } else {
                            lock.share()
                        };
                        std::thread::sleep(Duration::from_millis(15));
                        drop(held);
                    }
                });
            }
        });
    }

    fn overlap((_, a, b): &(Mode, Instant, Instant), (_, c, d): &(Mode, Instant, Instant)) -> bool {
        a < d && c < b
    }

    #[test]
    fn untimed_work_shares_the_gpu_but_never_with_a_timed_phase() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (lock, log) = lock_with_log(dir.path());
        contend(&[lock], 3);
        let log = log.lock().expect("log");
        let (timed, untimed): (Vec<_>, Vec<_>) = log
            .iter()
            .copied()
            .partition(|(mode, ..)| *mode == Mode::Exclusive);
        assert_eq!(timed.len() + untimed.len(), 24);
        for t in &timed {
            let beside: Vec<_> = log.iter().filter(|o| *o != t && overlap(t, o)).collect();
            assert!(beside.is_empty(), "{t:?} overlapped {beside:?}");
        }
        let shared_overlaps = untimed
            .iter()
            .enumerate()
            .filter(|(i, u)| untimed[i + 1..].iter().any(|o| overlap(u, o)))
            .count();
        assert!(shared_overlaps > 0, "untimed work never ran side by side");
    }

    #[test]
    fn a_waiting_timed_phase_holds_back_new_untimed_work() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (lock, log) = lock_with_log(dir.path());
        let first = lock.share();
        std::thread::scope(|scope| {
            let timed = scope.spawn(|| {
                let held = lock.acquire();
                std::thread::sleep(Duration::from_millis(20));
                drop(held);
            });
            // The timed phase is waiting for `first` by now; untimed work that comes later
            // must wait for it rather than keep it out.
            std::thread::sleep(Duration::from_millis(100));
            let later = scope.spawn(|| drop(lock.share()));
            std::thread::sleep(Duration::from_millis(100));
            drop(first);
            timed.join().expect("timed thread");
            later.join().expect("later thread");
        });
        let log = log.lock().expect("log");
        let order: Vec<Mode> = log.iter().map(|(mode, ..)| *mode).collect();
        // Reported on release: the first share, the timed phase, then the later share.
        assert_eq!(order, [Mode::Shared, Mode::Exclusive, Mode::Shared]);
    }

    /// The large-evaluation claim's holder shares ahead of a timed phase that waits for the GPU
    /// (where an ordinary share, above, waits behind it), but never beside one that holds it.
    #[test]
    fn the_claim_holders_share_goes_ahead_of_a_waiting_timed_phase_never_beside_a_held_one() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().expect("temp dir");
        let (lock, log) = lock_with_log(dir.path());
        let first = lock.share();
        let ahead_done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let timed = scope.spawn(|| {
                let held = lock.acquire();
                std::thread::sleep(Duration::from_millis(100));
                drop(held);
            });
            std::thread::sleep(Duration::from_millis(100));
            // The timed phase waits for `first`: the holder's share goes in beside `first`.
            let ahead = scope.spawn(|| {
                drop(lock.share_ahead());
                ahead_done.store(true, Ordering::SeqCst);
            });
            let waited = Instant::now();
            while !ahead_done.load(Ordering::SeqCst) && waited.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let went_ahead = ahead_done.load(Ordering::SeqCst);
            drop(first);
            ahead.join().expect("ahead thread");
            assert!(
                went_ahead,
                "the holder's share waited behind the waiting timed phase"
            );
            // The timed phase holds the GPU now: the holder's next share waits for its end.
            std::thread::sleep(Duration::from_millis(30));
            drop(lock.share_ahead());
            timed.join().expect("timed thread");
        });
        let log = log.lock().expect("log");
        let order: Vec<Mode> = log.iter().map(|(mode, ..)| *mode).collect();
        // Reported on release: the share ahead, the first share, the timed phase, the second
        // share ahead.
        assert_eq!(
            order,
            [Mode::Shared, Mode::Shared, Mode::Exclusive, Mode::Shared]
        );
        let (_, _, timed_left) = log[2];
        let (_, after_entered, _) = log[3];
        assert!(
            after_entered >= timed_left,
            "a share ahead beside a timed phase"
        );
    }

    #[test]
    fn a_share_holder_sees_a_timed_phase_wait_and_lets_it_go_first() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (lock, log) = lock_with_log(dir.path());
        // Another worker process's view of the same files.
        let (other, _) = lock_with_log(dir.path());
        let mut share = Some(lock.share());
        assert!(!other.timed_phase_waiting(), "nothing waits yet");
        std::thread::scope(|scope| {
            let timed = scope.spawn(|| drop(other.acquire()));
            let asked = Instant::now();
            while !lock.timed_phase_waiting() && asked.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(
                lock.timed_phase_waiting(),
                "the waiting timed phase went unseen"
            );
            // Let go and asked again: the share now waits for the phase's end.
            drop(share.take());
            share = Some(lock.share());
            timed.join().expect("timed thread");
        });
        assert!(!lock.timed_phase_waiting(), "the timed phase has ended");
        drop(share);
        let order: Vec<Mode> = log.lock().expect("log").iter().map(|(m, ..)| *m).collect();
        assert_eq!(order, [Mode::Shared, Mode::Shared], "this lock's own holds");
    }

    /// A timed phase holds the GPU; a share queues behind it, then a second timed phase: the
    /// second timed phase's hold, and the share's, as logged `(entered, left)`.
    fn a_share_between_two_timed_phases(
        lock: &Arc<GpuLock>,
        log: &Intervals,
    ) -> [(Instant, Instant); 2] {
        let first = lock.acquire();
        std::thread::scope(|scope| {
            scope.spawn(|| drop(lock.share()));
            std::thread::sleep(Duration::from_millis(50));
            scope.spawn(|| {
                let second = lock.acquire();
                std::thread::sleep(Duration::from_millis(30));
                drop(second);
            });
            std::thread::sleep(Duration::from_millis(50));
            drop(first);
        });
        let log = log.lock().expect("log");
        let hold = |mode: Mode| {
            log.iter()
                .filter(|(m, ..)| *m == mode)
                .map(|(_, entered, left)| (*entered, *left))
                .next_back()
                .expect("a hold")
        };
        [hold(Mode::Exclusive), hold(Mode::Shared)]
    }

    #[test]
    fn timed_phases_queued_behind_one_another_go_before_the_shares_between_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (lock, log) = lock_with_log(dir.path());
        let [(_, second_left), (share_entered, _)] = a_share_between_two_timed_phases(&lock, &log);
        assert!(
            share_entered >= second_left,
            "the share got in between the two timed phases"
        );
    }

    #[test]
    fn slots_bound_the_shares_at_once_and_timed_phases_stay_alone() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (lock, log) = lock_with_slots(dir.path(), 2);
        // A second lock on the same files, as another worker process would open them.
        let (other, other_log) = lock_with_slots(dir.path(), 2);
        contend(&[lock, other], 4);
        let mut all = log.lock().expect("log").clone();
        all.extend(other_log.lock().expect("log").iter().copied());
        assert_eq!(all.len(), 24);
        for t in all.iter().filter(|(mode, ..)| *mode == Mode::Exclusive) {
            let beside = all.iter().filter(|o| *o != t && overlap(t, o)).count();
            assert_eq!(beside, 0, "a timed phase ran beside other work");
        }
        // The most shares held at any moment: at every share's start, how many others overlap it.
        let untimed: Vec<_> = all
            .iter()
            .filter(|(mode, ..)| *mode == Mode::Shared)
            .collect();
        let most = untimed
            .iter()
            .map(|(_, start, _)| {
                untimed
                    .iter()
                    .filter(|(_, a, b)| a <= start && start < b)
                    .count()
            })
            .max()
            .unwrap_or(0);
        assert_eq!(most, 2, "shares at once");
    }

    /// A large share waits for another large one (here held by a second lock on the same
    /// files, as another worker process would hold it), never for ordinary shares, which run
    /// beside it.
    #[test]
    fn large_shares_take_turns_and_ordinary_shares_pass() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().expect("temp dir");
        let (lock, _) = lock_with_log(dir.path());
        let (other, _) = lock_with_log(dir.path());
        let first = lock.share_large();
        let entered = Arc::new(AtomicBool::new(false));
        let second = {
            let entered = Arc::clone(&entered);
            std::thread::spawn(move || {
                let held = other.share_large();
                entered.store(true, Ordering::SeqCst);
                drop(held);
            })
        };
        // An ordinary share returns while the first large one is held...
        drop(lock.share());
        std::thread::sleep(Duration::from_millis(200));
        // ...the second large one does not.
        assert!(!entered.load(Ordering::SeqCst), "two large shares at once");
        drop(first);
        second.join().expect("second large share");
        assert!(entered.load(Ordering::SeqCst));
    }

    /// A large-evaluation claim waits for another (held here by a second lock on the same
    /// files, as another worker process would hold it), and neither a timed phase nor a share
    /// of any kind waits for it: its holder times and claims large shares while holding it.
    #[test]
    fn large_evaluations_take_turns_and_nothing_else_waits_for_them() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().expect("temp dir");
        let (lock, _) = lock_with_log(dir.path());
        let (other, _) = lock_with_log(dir.path());
        let first = lock.large_evaluation();
        let entered = Arc::new(AtomicBool::new(false));
        let second = {
            let entered = Arc::clone(&entered);
            std::thread::spawn(move || {
                let held = other.large_evaluation();
                entered.store(true, Ordering::SeqCst);
                drop(held);
            })
        };
        drop(lock.acquire());
        drop(lock.share());
        drop(lock.share_large());
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !entered.load(Ordering::SeqCst),
            "two large evaluations at once"
        );
        drop(first);
        second.join().expect("second large evaluation");
        assert!(entered.load(Ordering::SeqCst));
    }

    /// A wait for the large-evaluation claim ends without it once its caller says stop (a
    /// cancel), and the claim stays with its holder.
    #[test]
    fn a_large_evaluation_claim_is_given_up_when_its_waiter_stops() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().expect("temp dir");
        let (lock, _) = lock_with_log(dir.path());
        let (other, _) = lock_with_log(dir.path());
        let held = lock.large_evaluation();
        let stop = Arc::new(AtomicBool::new(false));
        let waiter = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let claim = other.large_evaluation_unless(&|| stop.load(Ordering::SeqCst));
                (claim.is_some(), Instant::now())
            })
        };
        std::thread::sleep(Duration::from_millis(200));
        assert!(!waiter.is_finished(), "the waiter took a held claim");
        let stopped = Instant::now();
        stop.store(true, Ordering::SeqCst);
        let (claimed, ended) = waiter.join().expect("the waiter");
        assert!(!claimed, "the waiter was told to stop, yet claimed");
        assert!(
            ended - stopped < Duration::from_millis(500),
            "{:?}",
            ended - stopped
        );
        // The holder still holds it: a third waiter that never stops would wait.
        let (third, _) = lock_with_log(dir.path());
        let asked = Instant::now();
        let late = std::thread::spawn(move || {
            drop(third.large_evaluation());
            Instant::now()
        });
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
        let entered = late.join().expect("the third waiter");
        assert!(entered - asked >= Duration::from_millis(200));
    }
}
