//! Referee and candidate processes started ahead of the evaluations that will use them.
//!
//! A background thread keeps `depth` pairs started (each pair spawned fresh with fork + exec
//! from this process, which never initialises CUDA, so nothing CUDA-related is forked). An
//! evaluation takes one pair and owns it: the candidate process serves that one candidate and
//! is killed at the end, never returned. Pairs that died while waiting are dropped on take;
//! a pair that has said hello goes before an older one still starting. Referees are forked from
//! a zygote that imported torch, triton and numpy once (`HarnessZygote`), unless the pool was
//! told to start them fresh; candidate processes are always started fresh, in their sandbox.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crucible_judge::{
    EvalConfig, HarnessZygote, Prestart, Runtime, TimedPhaseGate, TritonSeed, Workers,
};

/// After a failed start, the refill waits this long before trying again (a broken install must
/// not spin).
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// How much lower than the judge's the CPU priority (nice) of a pair still waiting in the pool
/// is. Starting a pair (importing torch twice, the CUDA contexts, the profiler's start-up) is
/// most of a warm worker's CPU use; at a lower priority it takes only what the evaluations in
/// flight (compiling, running trials) leave, and a pair gets the judge's priority when taken.
pub const POOL_NICE: i32 = 10;

/// How often the seed's thread looks whether the pool is stopping, while it waits for launchers.
const SEED_POLL: Duration = Duration::from_secs(1);

struct State {
    ready: VecDeque<Workers>,
    /// Pairs out of `ready` while their referee warms up (they count towards the depth).
    warming: usize,
    /// Pairs being spawned (outside the lock), until they are in `ready` or, spawned while
    /// the pool made way, killed.
    spawning: usize,
    /// An evaluation has the device to itself ([`WarmPool::make_way`]): nothing is started or
    /// warmed up, and a pair whose warm-up ends meanwhile is dropped.
    making_way: bool,
    stopping: bool,
}

impl State {
    /// The pair `take` gives next: the oldest whose referee has warmed up, else the oldest that
    /// has said hello, else the oldest still starting (it is ready soonest).
    fn next(&self) -> Option<usize> {
        let warmed = |w: &Workers| w.said_hello() && w.referee_warmed();
        self.ready
            .iter()
            .position(warmed)
            .or_else(|| self.ready.iter().position(Workers::said_hello))
            .or((!self.ready.is_empty()).then_some(0))
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    runtime: Runtime,
    /// What the pairs are started for: device, sandbox, transport, whether to warm the profiler.
    cfg: EvalConfig,
    depth: usize,
    warm_profiler: bool,
    /// Waiting pairs' nice value above the judge's.
    nice: i32,
    /// What is forked from a zygote rather than started fresh.
    forking: Forking,
    /// Triton's seed for every candidate's cache (GPU only: its CUDA utilities, its key, the
    /// launchers candidates named so far), once built: pairs started before that build their
    /// own. Replaced whole when a build with more launchers is done.
    triton_seed: RwLock<Option<Arc<TritonSeed>>>,
}

impl Shared {
    /// The seed new candidate processes start with, if one was built.
    fn triton_seed(&self) -> Option<Arc<TritonSeed>> {
        match self.triton_seed.read() {
            Ok(seed) => seed.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set_triton_seed(&self, seed: Arc<TritonSeed>) {
        match self.triton_seed.write() {
            Ok(mut slot) => *slot = Some(seed),
            Err(poisoned) => *poisoned.into_inner() = Some(seed),
        }
    }

    fn stopping(&self) -> bool {
        self.state.lock().map_or(true, |state| state.stopping)
    }
}

pub struct WarmPool {
    shared: Arc<Shared>,
    /// The refill thread and, on a GPU with a gate, the referees' warm-up thread.
    threads: [Option<JoinHandle<()>>; 2],
}

impl WarmPool {
    /// How many launchers the newest Triton seed was built with (0 before the first build).
    pub fn launchers_seeded(&self) -> usize {
        self.shared
            .triton_seed()
            .map_or(0, |seed| seed.launchers().len())
    }

    /// Starts the refill thread; the first pairs start at once. `warm_profiler`: candidate
    /// processes start the profiler before their hello (when correct ones will be timed on a
    /// GPU). `nice`: how much lower than the judge's the waiting pairs' CPU priority is
    /// ([`POOL_NICE`] by default). `forking`: what is forked from a zygote (a zygote that cannot
    /// start is logged, and everything starts fresh). `warm_referees`: on a GPU
    /// with a gate (`EvalConfig::timed_phases`), each referee warms up once it said hello
    /// (`Workers::warm_referee`), under a share.
    pub fn start(
        runtime: Runtime,
        cfg: EvalConfig,
        depth: usize,
        warm_profiler: bool,
        nice: i32,
        forking: Forking,
        warm_referees: bool,
    ) -> std::io::Result<WarmPool> {
        // A pair lowered without the right to raise it again would run its whole evaluation,
        // timed phases included, below the judge.
        let nice = if nice > 0 && !crucible_judge::process::can_raise_priority() {
            tracing::info!(
                "the warm pool keeps the judge's CPU priority: without CAP_SYS_NICE it could not \
                 give a taken pair its priority back"
            );
            0
        } else {
            nice
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                ready: VecDeque::new(),
                warming: 0,
                spawning: 0,
                making_way: false,
                stopping: false,
            }),
            wake: Condvar::new(),
            runtime,
            cfg,
            depth: depth.max(1),
            warm_profiler,
            nice,
            forking,
            triton_seed: RwLock::new(None),
        });
        {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("crucible-triton-seed".into())
                .spawn(move || keep_triton_seed(&shared))?;
        }
        let refill = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("crucible-pool".into())
                .spawn(move || refill(&shared))?
        };
        // Only under a share of the GPU: without a gate nothing keeps the warm-up's kernels
        // away from a timed phase, and the first trial pays for those first uses as before.
        let warm_up = match (&shared.cfg.timed_phases, shared.cfg.device.is_gpu()) {
            (Some(gate), true) if warm_referees => {
                let (shared, gate) = (Arc::clone(&shared), Arc::clone(gate));
                Some(
                    std::thread::Builder::new()
                        .name("crucible-pool-warm".into())
                        .spawn(move || warm_up_referees(&shared, gate.as_ref()))?,
                )
            }
            _ => None,
        };
        Ok(WarmPool {
            shared,
            threads: [Some(refill), warm_up],
        })
    }

    /// A started pair, if the pool holds one: the oldest whose referee has warmed up, else the
    /// oldest that has said hello, else the oldest still starting (it is ready soonest); `None`
    /// makes the evaluation start its own. The flag says whether the pair had said hello.
    pub fn take(&self) -> Option<(Workers, bool)> {
        let mut state = self.shared.state.lock().ok()?;
        state.ready.retain_mut(|workers| {
            let alive = workers.alive();
            if !alive {
                tracing::warn!(
                    "a prestarted harness pair died while waiting; dropped: {}",
                    workers.death_note()
                );
            }
            alive
        });
        let taken = state.next().and_then(|index| state.ready.remove(index));
        let taken = taken.map(|workers| {
            let said_hello = workers.said_hello();
            (workers, said_hello)
        });
        self.shared.wake.notify_all();
        drop(state);
        // Only a pool that lowered its pairs gives the priority back (`start` checked it may).
        if let Some((workers, _)) = &taken
            && self.shared.nice != 0
            && let Err(error) = workers.set_priority(0)
        {
            tracing::warn!("cannot give a prestarted pair the judge's priority: {error}");
        }
        taken
    }

    /// Makes way for an evaluation that must have the device to itself (a large task's retry
    /// alone, or a task that ran out of memory beside the pool's pairs): kills every waiting
    /// pair but the one [`WarmPool::take`] gives next, waits for any pair still being spawned
    /// or warmed up to be killed too, and starts and warms up none until the guard is dropped.
    /// Each waiting pair holds two CUDA contexts and what its referee's warm-up left cached
    /// (0.5-0.7 GiB a process on an H100, 16 processes at N 4, K 8): beside them, a correct
    /// 23_Softmax (6 GiB tensors) ran out of memory again when retried alone on an 80 GiB
    /// H100, and was an `infra_error`, where a fresh process judged it correct.
    pub fn make_way(&self) -> MadeWay<'_> {
        let dropped: Vec<Workers> = match self.shared.state.lock() {
            Ok(mut state) => {
                state.making_way = true;
                let kept = state.next().and_then(|index| state.ready.remove(index));
                let dropped = std::mem::take(&mut state.ready);
                state.ready.extend(kept);
                dropped.into()
            }
            Err(_) => Vec::new(),
        };
        let count = dropped.len();
        // Killed and waited for here, outside the lock (each pair kills its processes when
        // dropped); the driver gives their memory back a moment later (`super::leftovers`).
        drop(dropped);
        // A pair that was being spawned or warmed up is killed as soon as that ends (`refill`,
        // `warm_up_referees`): the evaluation starts once none is left (under load a spawn
        // still in flight left one beside a retry alone).
        if let Ok(state) = self.shared.state.lock() {
            let waited = self
                .shared
                .wake
                .wait_timeout_while(state, WARM_UP_LIMIT, |s| s.spawning + s.warming > 0);
            if let Ok((state, timeout)) = waited
                && timeout.timed_out()
            {
                tracing::warn!(
                    "making way: {} pairs still starting or warming up after {WARM_UP_LIMIT:?}",
                    state.spawning + state.warming
                );
            }
        }
        MadeWay {
            shared: &self.shared,
            dropped: count,
        }
    }

    /// Pairs waiting that have said hello (taking one waits for no start-up).
    pub fn ready(&self) -> usize {
        self.shared
            .state
            .lock()
            .map(|s| s.ready.iter().filter(|w| w.said_hello()).count())
            .unwrap_or(0)
    }

    /// Pairs waiting, started or still starting (warming up too).
    pub fn started(&self) -> usize {
        self.shared
            .state
            .lock()
            .map(|s| s.ready.len() + s.warming)
            .unwrap_or(0)
    }

    /// Pairs the pool keeps started when nobody takes any.
    pub fn depth(&self) -> usize {
        self.shared.depth
    }
}

/// While alive, the pool starts no pair ([`WarmPool::make_way`]).
pub struct MadeWay<'a> {
    shared: &'a Shared,
    dropped: usize,
}

impl MadeWay<'_> {
    /// How many waiting pairs were killed to make way.
    pub fn dropped(&self) -> usize {
        self.dropped
    }
}

impl Drop for MadeWay<'_> {
    fn drop(&mut self) {
        if let Ok(mut state) = self.shared.state.lock() {
            state.making_way = false;
        }
        self.shared.wake.notify_all();
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        if let Ok(mut state) = self.shared.state.lock() {
            state.stopping = true;
            // Killed now (each pair kills its processes when dropped).
            state.ready.clear();
        }
        self.shared.wake.notify_all();
        for thread in self.threads.iter_mut().filter_map(Option::take) {
            let _ = thread.join();
        }
    }
}

/// What the pool forks from a zygote that imported torch, triton and numpy once
/// ([`HarnessZygote`]) instead of starting a fresh interpreter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forking {
    /// Nothing: every referee and candidate process starts fresh.
    Nothing,
    /// Referees; candidate processes start fresh.
    Referees,
    /// Referees and candidate processes, each candidate confined as a spawned one is.
    Both,
}

/// Keeps `depth` pairs started until the pool stops.
fn refill(shared: &Shared) {
    // Started on this thread, which lives as long as the pool: a process's parent-death signal
    // follows the thread that started it, and the zygote's children die with it.
    let zygote = if shared.forking == Forking::Nothing {
        None
    } else {
        HarnessZygote::start(&shared.runtime, shared.cfg.device)
            .inspect_err(|error| tracing::warn!("pairs start fresh: no zygote: {error}"))
            .ok()
    };
    loop {
        {
            let Ok(mut state) = shared.state.lock() else {
                return;
            };
            while !state.stopping
                && (state.making_way || state.ready.len() + state.warming >= shared.depth)
            {
                state = match shared.wake.wait(state) {
                    Ok(state) => state,
                    Err(_) => return,
                };
            }
            if state.stopping {
                return;
            }
            state.spawning += 1;
        }
        // Spawned outside the lock: taking a pair never waits for a spawn.
        let seed = shared.triton_seed();
        let prestart = Prestart {
            warm_profiler: shared.warm_profiler,
            zygote: zygote.as_ref(),
            fork_candidates: shared.forking == Forking::Both,
            triton_seed: seed.as_deref(),
        };
        let spawned = Workers::spawn_with(&shared.runtime, &shared.cfg, &prestart);
        if let Ok(workers) = &spawned
            && shared.nice != 0
            && let Err(error) = workers.set_priority(shared.nice)
        {
            tracing::debug!("cannot lower a prestarted pair's priority: {error}");
        }
        let Ok(mut state) = shared.state.lock() else {
            return;
        };
        match spawned {
            Ok(workers) if state.stopping || state.making_way => {
                // Spawned while the pool made way: it must not hold the device beside the
                // evaluation either. Killed outside the lock, and counted as spawning until
                // then, so `make_way` waits for it to be gone.
                drop(state);
                drop(workers);
                let Ok(mut state) = shared.state.lock() else {
                    return;
                };
                state.spawning -= 1;
                shared.wake.notify_all();
                if state.stopping {
                    return;
                }
            }
            Ok(workers) => {
                state.spawning -= 1;
                state.ready.push_back(workers);
            }
            Err(error) => {
                state.spawning -= 1;
                shared.wake.notify_all();
                tracing::error!("cannot prestart harness processes: {error}");
                let _ = shared.wake.wait_timeout(state, RETRY_AFTER);
            }
        }
    }
}

/// How long a referee's hello and warm-up may take before the pair is dropped (a fresh one
/// takes about half a second; the pool's CPU priority is low).
const WARM_UP_LIMIT: Duration = Duration::from_secs(20);

/// How often the warm-up thread looks for a referee that has said hello.
const WARM_UP_POLL: Duration = Duration::from_millis(20);

/// Builds Triton's seed, then builds it again, from a copy of the last, whenever candidates'
/// processes named launchers it lacks (`EvalConfig::launchers`), until the pool stops.
fn keep_triton_seed(shared: &Shared) {
    let Some(mut seed) = TritonSeed::build(&shared.runtime, shared.cfg.device).map(Arc::new) else {
        return;
    };
    shared.set_triton_seed(Arc::clone(&seed));
    let Some(launchers) = shared.cfg.launchers.clone() else {
        return;
    };
    while !shared.stopping() {
        let Some(listed) = launchers.wait_for_new(SEED_POLL) else {
            continue;
        };
        let rebuilt = TritonSeed::rebuild(&shared.runtime, shared.cfg.device, Some(&seed), &listed);
        if let Some(rebuilt) = rebuilt {
            seed = Arc::new(rebuilt);
            shared.set_triton_seed(Arc::clone(&seed));
        }
    }
}

/// Runs each waiting referee's warm-up ([`Workers::warm_referee`]) once it has said hello, under
/// a share of the GPU from `gate`, so its kernels never run beside a timed phase. The pair is
/// out of the pool meanwhile (an evaluation takes another) and goes back first in line; one
/// whose warm-up fails is dropped (its processes are killed) and the refill starts another.
fn warm_up_referees(shared: &Shared, gate: &dyn TimedPhaseGate) {
    loop {
        let mut workers = {
            let Ok(mut state) = shared.state.lock() else {
                return;
            };
            loop {
                if state.stopping {
                    return;
                }
                if !state.making_way
                    && let Some(index) =
                        state.ready.iter().position(Workers::referee_awaits_warm_up)
                    && let Some(workers) = state.ready.remove(index)
                {
                    state.warming += 1;
                    break workers;
                }
                state = match shared.wake.wait_timeout(state, WARM_UP_POLL) {
                    Ok((state, _)) => state,
                    Err(_) => return,
                };
            }
        };
        let warmed = workers.warm_referee(&|| Some(gate.share()), WARM_UP_LIMIT, shared.nice);
        let Ok(mut state) = shared.state.lock() else {
            return;
        };
        // A pair that warmed up while an evaluation has the device to itself goes too: killed
        // after the lock is let go (dropping it kills and waits for its processes), and counted
        // as warming until then, so `make_way` waits for it to be gone.
        let failed = match warmed {
            Ok(()) if !state.stopping && !state.making_way => {
                state.warming -= 1;
                state.ready.push_front(workers);
                shared.wake.notify_all();
                continue;
            }
            Ok(()) => None,
            Err(error) => Some(error),
        };
        drop(state);
        if let Some(error) = failed {
            // What the processes printed (read outside the lock: it waits for their last
            // bytes): two of three benchmark calls on the GPU lost one referee here, at the first
            // run's start, with nothing but "ended with an unknown status" to go on.
            tracing::warn!(
                "a prestarted referee's warm-up failed; dropped: {error}; {}",
                workers.death_note()
            );
        }
        drop(workers);
        let Ok(mut state) = shared.state.lock() else {
            return;
        };
        state.warming -= 1;
        shared.wake.notify_all();
    }
}
