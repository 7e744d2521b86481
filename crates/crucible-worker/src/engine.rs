//! The engine a worker judges with: several evaluations at once on one device, on harness
//! processes started ahead of time, with exclusive use of the GPU for the timed phases and a
//! cache of reference timings.
//!
//! Blocking: [`Engine::evaluate`] runs one evaluation on the calling thread, and up to
//! `concurrency` threads may call it at once (more wait their turn). What overlaps: start-up,
//! the verifier, loading, Triton compilation and the correctness trials of several candidates.
//! What does not: the timed phases (timing, profile, timed output), which hold a file lock per
//! GPU that every worker process on the machine shares.

mod control;
mod gpu_lock;
mod leftovers;
mod options;
mod pool;
mod probe;
mod reaper;
mod reference_cache;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, RwLock, TryLockError};
use std::time::{Duration, Instant};

use crucible_judge::{
    Device, DeviceFacts, DeviceSharing, EvalConfig, InfraError, Runtime, StageLimits,
    judge_ran_out_of_memory, memory_held_elsewhere,
};
use crucible_result::{EvalResult, FailureClass, Finding, Severity, Verdict};
use sha2::{Digest, Sha256};

pub use control::Control;
pub use gpu_lock::{GpuLock, Held, LargeEvaluation};
pub use options::{JudgeOptions, MAX_TRIALS, OptionsError, check as check_options};
pub use pool::{Forking, POOL_NICE, WarmPool};
pub use probe::{EngineEvent, Probe};
pub use reference_cache::{ReferenceCache, ReferencePolicy};

/// The switches of the service contract; each one off gives the plain judge's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Evaluations at once on this device.
    pub concurrency: usize,
    /// Keep harness processes started ahead of the evaluations.
    pub warm_pool: bool,
    /// Share reference timings between evaluations (re-measured on a schedule).
    pub reference_cache: bool,
    /// Hold the GPU's lock during timed phases.
    pub exclusive_timing: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            concurrency: 4,
            warm_pool: true,
            reference_cache: true,
            exclusive_timing: true,
        }
    }
}

impl EngineOptions {
    /// One evaluation at a time, each on freshly started processes, the reference timed every
    /// time: what `crucible eval` does per task.
    pub fn plain() -> EngineOptions {
        EngineOptions {
            concurrency: 1,
            warm_pool: false,
            reference_cache: false,
            exclusive_timing: false,
        }
    }
}

/// Settings below the contract's switches; the defaults suit a service worker.
#[derive(Clone, Default)]
pub struct Tuning {
    /// Pairs kept started ahead; default twice `concurrency` on a GPU (a pair takes ~9 s to be
    /// ready there: importing torch, the CUDA context, the profiler's start-up), `concurrency`
    /// on the CPU (where starting more only competes with the evaluations for the cores).
    pub pool_depth: Option<usize>,
    /// Where per-GPU lock files live; default `<cache>/locks`.
    pub lock_dir: Option<PathBuf>,
    /// This lock file instead of the GPU's own (also on the CPU, where none is used otherwise).
    pub lock_file: Option<PathBuf>,
    pub reference_policy: ReferencePolicy,
    /// The configuration every evaluation starts from (timed iterations, sandbox, stage
    /// deadlines...); default the judge's for the device. A job's options apply on top; the
    /// engine sets the gate and the cache itself.
    pub base: Option<EvalConfig>,
    pub probe: Option<Probe>,
    /// How much lower than the judge's the CPU priority of pairs waiting in the pool is
    /// (default [`POOL_NICE`]; 0 keeps the judge's).
    pub pool_nice: Option<i32>,
    /// At most this many evaluations' untimed GPU work (trials, building models, the precision
    /// measurement) at once on the GPU; the rest wait (`None`: no limit). Needs the GPU lock.
    pub gpu_slots: Option<usize>,
    /// Prestarted candidate processes do not start the profiler ahead; one whose first trial
    /// passed begins it then, on a thread. One H200 (N 4, K 8): 0.8 CPU-s less before a pair
    /// was taken, 0.5 s more wait in `profiler-start`, 3900 against 4052 an hour: off.
    pub cold_profiler: bool,
    /// The pool starts every referee (and candidate process) as a fresh interpreter instead of
    /// forking it from a zygote that has imported torch, triton and numpy
    /// (`crucible_judge::HarnessZygote`).
    pub fresh_referees: bool,
    /// The pool starts every candidate process as a fresh interpreter (confined between fork
    /// and exec) instead of forking it from the zygote (confined by the same code after the
    /// fork).
    pub fresh_candidates: bool,
    /// The pool does not warm its referees up (`crucible_judge::Workers::warm_referee`), so
    /// each pays its first uses of the trial's kernels and of cuBLAS in its first trial.
    pub cold_referees: bool,
    /// An evaluation waiting for the GPU's large-evaluation claim keeps its slot, so other
    /// tasks' evaluations do not run in its place meanwhile (as before 2026-12-07).
    pub keep_slots_while_waiting: bool,
    /// The evaluation holding the GPU's large-evaluation claim queues for its shares behind
    /// waiting timed phases like any other (as before 2026-12-07) instead of going ahead of
    /// them (`GpuLock::share_ahead`).
    pub large_evaluation_waits_in_line: bool,
    /// A share held across several pieces of untimed work is held to its end even while a
    /// timed phase waits for it (as before 2026-12-07, session 54), instead of letting the
    /// phase go first between two pieces (`TimedPhaseGate::timed_phase_waiting`).
    pub shares_never_yield: bool,
    /// Shares race the engine's timed phases for the GPU as `flock` has them, instead of
    /// waiting while one waits for it or holds it (`GpuLock::in_any_order`; the lock before
    /// 2026-12-07, session 54).
    pub timed_phases_in_any_order: bool,
}

/// One evaluation to run.
#[derive(Debug, Clone)]
pub struct Job {
    /// The task's name (display; the task file is named after it).
    pub task_name: String,
    pub task_source: String,
    pub candidate_source: String,
    pub options: JudgeOptions,
    /// Past it, the candidate's stages get no more time (a `timeout`); the queue turns a task
    /// past its deadline into a `timeout` result before it reaches the engine.
    pub deadline: Option<Instant>,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot ask the harness interpreter about {device}: {source}")]
    Probe { device: Device, source: InfraError },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

/// The shortest stage deadline a near deadline leaves a candidate.
const LEAST_STAGE_LIMIT: Duration = Duration::from_secs(1);
/// How long a retry alone waits for the killed evaluations' processes to be gone.
const SETTLE_WITHIN: Duration = Duration::from_secs(30);

pub struct Engine {
    runtime: Runtime,
    device: Device,
    options: EngineOptions,
    /// The configuration every evaluation starts from (a job's options are applied to a copy).
    base: EvalConfig,
    facts: DeviceFacts,
    versions: String,
    pool: Option<WarmPool>,
    lock: Option<Arc<GpuLock>>,
    slots: Arc<Slots>,
    /// Whether an evaluation waiting for the large-evaluation claim lends its slot.
    lends_slots: bool,
    tasks: TaskFiles,
    probe: Option<Probe>,
    /// Evaluations share the device (read); a retry after a shared-device fault, and every
    /// evaluation of a task in `alone_tasks`, runs alone (write).
    alone: RwLock<()>,
    /// Tasks (by task file and size profile) whose evaluations run alone from the start: one of
    /// them ran out of memory beside others while its own trials were large work. The warm
    /// pool's waiting pairs stay beside them ([`Alone::AmongEvaluations`]) unless the task is
    /// in `clearing_tasks` too.
    alone_tasks: crucible_judge::LargeTasks,
    /// Tasks of `alone_tasks` whose evaluation ran out of memory again beside the pool's
    /// waiting pairs: they clear the device of those too ([`Alone::ClearDevice`]).
    clearing_tasks: crucible_judge::LargeTasks,
    /// Large tasks whose evaluation ran out of memory beside other evaluations once: theirs run
    /// one at a time (each holds `one_large_at_a_time` from taking its processes to its end),
    /// beside other tasks' evaluations. Two of them at once are what a device holds least
    /// well: a 23_Softmax evaluation keeps its kept outputs and shared tensors between its
    /// large phases, which the gate's large share bounds one at a time. One that runs out of
    /// memory again this way joins `alone_tasks`.
    one_at_a_time_tasks: crucible_judge::LargeTasks,
    one_large_at_a_time: Mutex<()>,
    reaper: Arc<reaper::Reaper>,
}

/// An evaluation's run, given how it takes its processes (after the static verifier).
type RunTaking<'a> =
    dyn Fn(&EvalConfig, &mut dyn FnMut() -> Option<crucible_judge::Workers>) -> EvalResult + 'a;

/// How much of the device an evaluation that runs alone has to itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alone {
    /// No other evaluation runs; the warm pool's waiting pairs stay (on an H200 a 23_Softmax
    /// fits beside them, and killing them cost the next evaluations their start-up).
    AmongEvaluations,
    /// Nor any waiting pair of the pool: each holds two CUDA contexts (a retry alone, and a
    /// task that ran out of memory beside them, as 23_Softmax did on an 80 GiB H100).
    ClearDevice,
}

/// Held while an evaluation runs alone; the pool starts pairs again first, then evaluations.
struct AloneGuard<'a> {
    _made_way: Option<pool::MadeWay<'a>>,
    _evaluations: std::sync::LockResult<std::sync::RwLockWriteGuard<'a, ()>>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // No scratch directory or unreaped process outlives the engine.
        self.reaper.finish();
    }
}

impl Engine {
    pub fn new(
        runtime: Runtime,
        device: Device,
        options: EngineOptions,
    ) -> Result<Engine, EngineError> {
        Engine::with_tuning(runtime, device, options, Tuning::default())
    }

    pub fn with_tuning(
        runtime: Runtime,
        device: Device,
        options: EngineOptions,
        tuning: Tuning,
    ) -> Result<Engine, EngineError> {
        let facts = crucible_judge::device_facts(&runtime, device)
            .map_err(|source| EngineError::Probe { device, source })?;
        let lock = gpu_lock(device, options, &tuning, &facts)?;
        let reference_cache = options.reference_cache.then(|| {
            Arc::new(ReferenceCache::new(
                tuning.reference_policy,
                tuning.probe.clone(),
            ))
        });
        let mut base = tuning
            .base
            .clone()
            .unwrap_or_else(|| EvalConfig::new(device));
        base.device = device;
        let versions = versions(&runtime, &facts, &base);
        if let Some(memory) = facts.memory_bytes {
            base.large_work_bytes = crucible_judge::large_work_bytes_for(memory);
            base.device_memory_bytes = Some(memory);
            base.large_tasks = Some(Arc::new(crucible_judge::LargeTasks::new()));
        }
        if device.is_gpu() {
            base.launchers = Some(Arc::new(crucible_judge::LauncherSignatures::new()));
        }
        let reaper = Arc::new(
            reaper::Reaper::start(tuning.probe.clone()).map_err(|source| EngineError::Io {
                what: "starting the reaper thread",
                source,
            })?,
        );
        base.teardown = Some(Arc::clone(&reaper) as Arc<dyn crucible_judge::Teardown>);
        base.timed_phases = lock.clone().map(|lock| {
            Arc::new(gpu_lock::Gate {
                lock,
                holder_ahead: !tuning.large_evaluation_waits_in_line,
                shares_yield: !tuning.shares_never_yield,
            }) as Arc<dyn crucible_judge::TimedPhaseGate>
        });
        base.reference_timings =
            reference_cache.map(|c| c as Arc<dyn crucible_judge::ReferenceTimingCache>);
        let concurrency = options.concurrency.max(1);
        let pool = if options.warm_pool {
            Some(start_pool(&runtime, &base, concurrency, &tuning)?)
        } else {
            None
        };
        let tasks = TaskFiles::new().map_err(|source| EngineError::Io {
            what: "creating the task directory",
            source,
        })?;
        // Only a lock's large-evaluation claim is waited for with nothing to do, and only
        // beside other evaluations.
        let lends_slots = concurrency > 1 && lock.is_some() && !tuning.keep_slots_while_waiting;
        Ok(Engine {
            runtime,
            device,
            options: EngineOptions {
                concurrency,
                ..options
            },
            base,
            facts,
            versions,
            pool,
            lock,
            slots: Arc::new(Slots::new(concurrency)),
            lends_slots,
            tasks,
            probe: tuning.probe,
            alone: RwLock::new(()),
            alone_tasks: crucible_judge::LargeTasks::new(),
            clearing_tasks: crucible_judge::LargeTasks::new(),
            one_at_a_time_tasks: crucible_judge::LargeTasks::new(),
            one_large_at_a_time: Mutex::new(()),
            reaper,
        })
    }

    /// What a result by this engine depends on besides the task, candidate and options: the
    /// crucible version, the harness files' hash, the GPU model, torch, triton, CUDA, driver,
    /// Python. Part of the result cache's key.
    pub fn versions(&self) -> String {
        self.versions.clone()
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn options(&self) -> EngineOptions {
        self.options
    }

    /// The GPU model (`None` on the CPU), for the worker's registration.
    pub fn gpu_model(&self) -> Option<&str> {
        self.facts.device_name.as_deref()
    }

    /// The GPU's UUID as torch reports it (`None` on the CPU, or where torch does not say).
    pub fn gpu_uuid(&self) -> Option<&str> {
        self.facts.uuid.as_deref()
    }

    /// The lock the timed phases hold, if any.
    pub fn gpu_lock(&self) -> Option<&GpuLock> {
        self.lock.as_deref()
    }

    /// Prestarted pairs waiting right now that have said hello (ready to take).
    pub fn warm(&self) -> usize {
        self.pool.as_ref().map_or(0, WarmPool::ready)
    }

    /// Prestarted pairs waiting right now, ready or still starting.
    pub fn started(&self) -> usize {
        self.pool.as_ref().map_or(0, WarmPool::started)
    }

    /// Kernel launchers the candidates' processes named so far (kept for Triton's seed; 0 on
    /// the CPU).
    pub fn launchers_named(&self) -> usize {
        self.base.launchers.as_ref().map_or(0, |l| l.len())
    }

    /// How many of those the newest Triton seed was built with (0 without one).
    pub fn launchers_seeded(&self) -> usize {
        self.pool.as_ref().map_or(0, WarmPool::launchers_seeded)
    }

    /// How many threads should ask this engine for evaluations at once to keep its slots busy:
    /// `concurrency`, and as many again where an evaluation waiting for the large-evaluation
    /// claim lends its slot (a thread of its own waits in it). The threads beyond the slots
    /// wait in [`Engine::evaluate`]; a queue's claim threads wait first
    /// ([`Engine::wait_for_a_free_slot`]) so as to hold no task they cannot start.
    pub fn callers(&self) -> usize {
        if self.lends_slots {
            self.options.concurrency.saturating_mul(2)
        } else {
            self.options.concurrency
        }
    }

    /// Waits until an evaluation would find a slot free (one may take it first); `false` once
    /// `stop` said so first.
    pub fn wait_for_a_free_slot(&self, stop: &dyn Fn() -> bool) -> bool {
        self.slots.wait_until_free(stop)
    }

    /// Prestarted pairs the pool holds when idle (0 without a warm pool).
    pub fn pool_depth(&self) -> usize {
        self.pool.as_ref().map_or(0, WarmPool::depth)
    }

    /// Judges one job; never fails (a fault of the judge's own is an `infra_error` result,
    /// which the worker loop retries).
    pub fn evaluate(&self, job: &Job) -> EvalResult {
        self.evaluate_controlled(job, &Control::new())
    }

    /// [`Engine::evaluate`], watched and stoppable through `control`: it shows the judge's
    /// current stage, and a cancel kills the evaluation's processes and ends it `infra_error`.
    pub fn evaluate_controlled(&self, job: &Job, control: &Control) -> EvalResult {
        let _slot = self.slots.acquire();
        let candidate_path = PathBuf::from(format!("{}-candidate.py", safe_name(&job.task_name)));
        let (task_src, candidate_src) =
            (job.task_source.as_bytes(), job.candidate_source.as_bytes());
        let mut cfg = self.base.clone();
        let task_path = match self.configure(job, control, &mut cfg) {
            Ok(task_path) => task_path,
            Err(error) => {
                let task_path = PathBuf::from(format!("{}.py", safe_name(&job.task_name)));
                return crucible_judge::infra_error_result(
                    &self.runtime,
                    (&task_path, task_src),
                    (&candidate_path, candidate_src),
                    &cfg,
                    "setup",
                    error,
                );
            }
        };
        let run = |cfg: &EvalConfig, take: &mut dyn FnMut() -> Option<crucible_judge::Workers>| {
            let files = (
                (task_path.as_path(), task_src),
                (candidate_path.as_path(), candidate_src),
            );
            crucible_judge::evaluate_taking(&self.runtime, files, cfg, take)
        };
        let shared_device = self.options.concurrency > 1;
        let task_sha256 = crucible_judge::file_ref(&task_path, task_src).sha256;
        let profile = cfg.size_profile.clone();
        let task = (task_sha256.as_str(), profile.as_deref());
        if shared_device && self.alone_tasks.contains(task.0, task.1) {
            return self.run_task_alone(&cfg, &run, task, control);
        }
        cfg.device_sharing = if shared_device {
            DeviceSharing::Evaluations
        } else {
            self.waiting_pairs_sharing()
        };
        let one_at_a_time = shared_device && self.one_at_a_time_tasks.contains(task.0, task.1);
        let Some(shared) = unless_cancelled(control, || taken(self.alone.try_read())) else {
            // Cancelled while a run alone held the device: the judge never started.
            let files = (
                (task_path.as_path(), task_src),
                (candidate_path.as_path(), candidate_src),
            );
            let aborted = InfraError::Aborted;
            return crucible_judge::infra_error_result(
                &self.runtime,
                files.0,
                files.1,
                &cfg,
                "setup",
                aborted,
            );
        };
        let mut one_at_a_time_guard = None;
        let mut result = run(&cfg, &mut || {
            // Taken with the processes (after the static verifier), never before the read
            // claim above: a run alone waits for this evaluation, not the other way round.
            if one_at_a_time && one_at_a_time_guard.is_none() {
                // Cancelled while waiting: no processes (the judge sees the cancel, starts none).
                let one = &self.one_large_at_a_time;
                one_at_a_time_guard = Some(unless_cancelled(control, || taken(one.try_lock()))?);
            }
            self.take_workers()
        });
        let ran_one_at_a_time = one_at_a_time_guard.take().is_some();
        drop(shared);
        // The judge says so itself where the task's shapes made it wait as well.
        let said = |result: &EvalResult| {
            (result.findings.iter())
                .any(|f| f.code == crucible_judge::error::RAN_ONE_LARGE_AT_A_TIME)
        };
        if ran_one_at_a_time && !said(&result) {
            result.findings.push(Finding::new(
                crucible_judge::error::RAN_ONE_LARGE_AT_A_TIME,
                Severity::Info,
                "an earlier evaluation of this task ran out of device memory beside other \
                 evaluations (its trials' tensors are large for this device), so this one ran \
                 with no other evaluation of such a task beside it",
            ));
        }
        if control.is_cancelled() {
            return result;
        }
        self.retry_what_sharing_failed(&cfg, &run, task, control, result, ran_one_at_a_time)
    }

    /// Makes `cfg` the judge's configuration for `job` (its options, its deadline, this
    /// evaluation's observer and abort) and writes the task's file; its path, or why the job
    /// cannot be judged.
    fn configure(
        &self,
        job: &Job,
        control: &Control,
        cfg: &mut EvalConfig,
    ) -> Result<PathBuf, InfraError> {
        cfg.stage_observer = Some(control.observer());
        cfg.abort = Some(control.abort());
        if self.lends_slots {
            cfg.timed_phases = (cfg.timed_phases.take()).map(|gate| {
                Arc::new(LendingGate {
                    gate,
                    slots: Arc::clone(&self.slots),
                }) as Arc<dyn crucible_judge::TimedPhaseGate>
            });
        }
        options::apply(&job.options, cfg)
            .map_err(|e| InfraError::Setup(format!("bad judge options: {e}")))?;
        let task_path = self
            .tasks
            .path_for(&job.task_name, &job.task_source)
            .map_err(|e| InfraError::Setup(format!("cannot write the task file: {e}")))?;
        if let Some(deadline) = job.deadline {
            cap_limits(&mut cfg.limits, deadline);
        }
        Ok(task_path)
    }

    /// `result` of an evaluation run beside others (as `cfg.device_sharing` says;
    /// `ran_one_at_a_time`: with no other evaluation of a task so marked beside it), or, where
    /// what it ran beside may have failed it, the evaluation run again with fewer beside it.
    fn retry_what_sharing_failed(
        &self,
        cfg: &EvalConfig,
        run: &RunTaking<'_>,
        task: (&str, Option<&str>),
        control: &Control,
        result: EvalResult,
        ran_one_at_a_time: bool,
    ) -> EvalResult {
        match cfg.device_sharing {
            DeviceSharing::WaitingProcesses if judge_ran_out_of_memory(&result) => {
                // One evaluation at a time, but the pool's waiting pairs held part of the
                // device when the judge's own measurement found no room: once more with them
                // gone.
                let failed = vec![(result, BESIDE_POOL)];
                self.run_alone_escalating(cfg, run, Alone::ClearDevice, task, control, failed)
                    .0
            }
            DeviceSharing::Evaluations if crucible_judge::shared_device_fault(&result) => {
                // The engine, not the candidate, put several evaluations on one device. A task
                // whose own work is large there will not fit beside others next time either,
                // and its first attempts fail the evaluations beside them too (an 80 GiB H100:
                // with each correct 23_Softmax, the three matmuls beside it ran out of memory).
                // First one large task's evaluation at a time, beside the others; alone once
                // that ran out of memory too.
                let large = self.is_large(task);
                if large && ran_out_of_memory(&result) {
                    if ran_one_at_a_time {
                        self.alone_tasks.insert(task.0, task.1);
                    } else {
                        self.one_at_a_time_tasks.insert(task.0, task.1);
                    }
                }
                // A small task failed beside a large one: the pool's pairs never were the
                // trouble, and killing them costs the next evaluations their start-up (an 80
                // GiB H100: six matmuls retried after one 23_Softmax, and 31 of 64 evaluations
                // then started their own processes).
                let alone = if large {
                    Alone::ClearDevice
                } else {
                    Alone::AmongEvaluations
                };
                let failed = vec![(result, BESIDE_EVALUATIONS)];
                self.run_alone_escalating(cfg, run, alone, task, control, failed)
                    .0
            }
            _ => result,
        }
    }

    /// What shares the device with an evaluation that no other evaluation runs beside: the
    /// warm pool's waiting pairs, where there is a pool.
    fn waiting_pairs_sharing(&self) -> DeviceSharing {
        if self.pool.is_some() {
            DeviceSharing::WaitingProcesses
        } else {
            DeviceSharing::Nobody
        }
    }

    /// Whether the task's trials were large work for this device (`EvalConfig::large_tasks`).
    fn is_large(&self, (task_sha256, profile): (&str, Option<&str>)) -> bool {
        self.base
            .large_tasks
            .as_ref()
            .is_some_and(|large| large.contains(task_sha256, profile))
    }

    /// An evaluation of a task in `alone_tasks`: alone among evaluations, or with the pool's
    /// waiting pairs gone too where that did not fit before (`clearing_tasks`).
    fn run_task_alone(
        &self,
        cfg: &EvalConfig,
        run: &RunTaking<'_>,
        task: (&str, Option<&str>),
        control: &Control,
    ) -> EvalResult {
        let alone = if self.clearing_tasks.contains(task.0, task.1) {
            Alone::ClearDevice
        } else {
            Alone::AmongEvaluations
        };
        let (mut result, entered) =
            self.run_alone_escalating(cfg, run, alone, task, control, Vec::new());
        // A candidate the static verifier refused never took the device.
        if let Some(alone) = entered {
            result.findings.push(Finding::new(
                "ran-alone",
                Severity::Info,
                format!(
                    "earlier evaluations of this task ran out of device memory beside other \
                     evaluations, the last with no other large task's beside it (its trials' \
                     tensors are large for this device), so this one ran with {}",
                    match alone {
                        Alone::AmongEvaluations => "no other evaluation beside it",
                        Alone::ClearDevice =>
                            "the device to itself (the warm pool's waiting processes too)",
                    }
                ),
            ));
        }
        result
    }

    /// [`Engine::run_alone`]; where that was beside the pool's waiting pairs, failed as sharing
    /// may cause, and the task is (by now) known to be large or the judge itself found no
    /// memory, once more with the device cleared, and its task clears it from then on if it
    /// ran out of memory beside the pairs (unless the memory proved held by something else).
    /// A small task's second failure of its own is its result: beside no other evaluation, the
    /// pairs' contexts leave it most of the device. The result says why it was retried:
    /// `failed` holds the attempts before this one (each with what it ran beside), first to
    /// last.
    fn run_alone_escalating(
        &self,
        cfg: &EvalConfig,
        run: &RunTaking<'_>,
        alone: Alone,
        task: (&str, Option<&str>),
        control: &Control,
        mut failed: Vec<(EvalResult, &'static str)>,
    ) -> (EvalResult, Option<Alone>) {
        let (mut result, mut entered) = self.run_alone(cfg, run, alone);
        if alone == Alone::AmongEvaluations
            && crucible_judge::shared_device_fault(&result)
            && !control.is_cancelled()
            && (self.is_large(task) || judge_ran_out_of_memory(&result))
        {
            let (cleared, cleared_entered) = self.run_alone(cfg, run, Alone::ClearDevice);
            // Not where the memory proved to be held by something clearing does not remove (a
            // candidate that fills the device itself): it must not make its task's every later
            // evaluation kill the pool's pairs.
            if ran_out_of_memory(&result) && !memory_held_elsewhere(&cleared) {
                self.clearing_tasks.insert(task.0, task.1);
            }
            failed.push((std::mem::replace(&mut result, cleared), BESIDE_POOL));
            entered = cleared_entered;
        }
        for (attempt, beside) in &failed {
            note_retry(&mut result, attempt, beside);
        }
        (result, entered)
    }

    /// Runs an evaluation alone. It enters only once it is about to take its processes (after
    /// the static verifier): then it waits until the evaluations in flight ended, and for
    /// [`Alone::ClearDevice`] has the pool kill its waiting pairs, and until their processes
    /// are gone, while new evaluations wait. Says whether it entered.
    fn run_alone(
        &self,
        cfg: &EvalConfig,
        run: &RunTaking<'_>,
        alone: Alone,
    ) -> (EvalResult, Option<Alone>) {
        let mut cfg = cfg.clone();
        cfg.device_sharing = match alone {
            Alone::AmongEvaluations => self.waiting_pairs_sharing(),
            Alone::ClearDevice => DeviceSharing::Nobody,
        };
        let mut held = None;
        let result = run(&cfg, &mut || {
            held = Some(self.enter_alone(alone));
            self.take_workers()
        });
        let entered = held.is_some().then_some(alone);
        drop(held);
        (result, entered)
    }

    fn enter_alone(&self, alone: Alone) -> AloneGuard<'_> {
        let evaluations = self.alone.write();
        let made_way = match alone {
            Alone::ClearDevice => self.pool.as_ref().map(WarmPool::make_way),
            Alone::AmongEvaluations => None,
        };
        if let (Some(probe), Some(made_way)) = (&self.probe, &made_way) {
            probe(EngineEvent::MadeWay {
                dropped: made_way.dropped(),
            });
        }
        // Nothing else runs now, but the ended evaluations' processes may still be exiting.
        let settled = self.reaper.settle(SETTLE_WITHIN)
            && self
                .facts
                .uuid
                .as_deref()
                .is_none_or(|uuid| leftovers::wait_until_released(uuid, SETTLE_WITHIN));
        if !settled {
            tracing::warn!(
                "running alone while earlier evaluations' processes may still hold the device"
            );
        }
        AloneGuard {
            _made_way: made_way,
            _evaluations: evaluations,
        }
    }

    /// A prestarted pair from the pool, or `None` (the judge then starts one itself).
    fn take_workers(&self) -> Option<crucible_judge::Workers> {
        let (workers, said_hello) = self.pool.as_ref().and_then(WarmPool::take)?;
        if let Some(probe) = &self.probe {
            probe(EngineEvent::WorkersTaken {
                candidate_pid: workers.candidate_pid(),
                prestarted: true,
                said_hello,
                cpu_s: workers.cpu_seconds(),
            });
        }
        Some(workers)
    }
}

/// `crucible <version> <harness dir> torch .. triton .. cuda .. driver .. python .. gpu ..
/// autotune W/R`: the autotuner's budget shapes what a candidate's timing measures.
fn versions(runtime: &Runtime, facts: &DeviceFacts, base: &EvalConfig) -> String {
    let harness = runtime
        .harness_root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
    format!(
        "crucible {} {harness} torch {} triton {} cuda {} driver {} python {} gpu {} autotune {}",
        env!("CARGO_PKG_VERSION"),
        facts.torch,
        or_none(&facts.triton),
        or_none(&facts.cuda),
        or_none(&facts.driver),
        facts.python,
        facts.device_name.clone().unwrap_or_else(|| "cpu".into()),
        base.autotune,
    )
}

/// The lock for the timed phases: the GPU's own, named after its UUID (else its PCI bus id),
/// unless a file is given; none on the CPU or with `exclusive_timing` off.
fn gpu_lock(
    device: Device,
    options: EngineOptions,
    tuning: &Tuning,
    facts: &DeviceFacts,
) -> Result<Option<Arc<GpuLock>>, EngineError> {
    if !options.exclusive_timing {
        return Ok(None);
    }
    let path = match (&tuning.lock_file, device.is_gpu()) {
        (Some(path), _) => path.clone(),
        (None, false) => return Ok(None),
        (None, true) => {
            let dir = tuning
                .lock_dir
                .clone()
                .unwrap_or_else(|| crucible_judge::runtime::cache_dir().join("locks"));
            let id = facts
                .uuid
                .clone()
                .or_else(|| facts.pci_bus_id.clone())
                .unwrap_or_else(|| format!("index-{device}"));
            GpuLock::path_for(&dir, &id)
        }
    };
    let lock = GpuLock::new(path, tuning.probe.clone()).map_err(|source| EngineError::Io {
        what: "opening the GPU lock file",
        source,
    })?;
    let lock = lock.with_slots(tuning.gpu_slots.unwrap_or(0));
    Ok(Some(Arc::new(if tuning.timed_phases_in_any_order {
        lock.in_any_order()
    } else {
        lock
    })))
}

/// What `try_take` gives once it gives something; `None` once `control` is cancelled first (the
/// worker loop cancels an evaluation past its task's deadline too). Polled, as std's locks
/// have no wait that can be given up; what is waited for (another evaluation's end, a run
/// alone's) takes seconds. Polling takes nothing from anyone's turn: neither lock orders its
/// waiters, and a read lock's `try_read` still refuses while a writer waits.
fn unless_cancelled<G>(control: &Control, mut try_take: impl FnMut() -> Option<G>) -> Option<G> {
    loop {
        if let Some(taken) = try_take() {
            return Some(taken);
        }
        if control.is_cancelled() {
            return None;
        }
        std::thread::sleep(CANCEL_POLL);
    }
}

/// A lock's `try_*` as [`unless_cancelled`] takes it: held or poisoned (nothing it guards can be
/// left half-done), else `None`.
fn taken<G>(attempt: Result<G, TryLockError<G>>) -> Option<G> {
    match attempt {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// How often an evaluation waiting for its turn beside others looks at its cancel.
const CANCEL_POLL: Duration = Duration::from_millis(10);

/// No candidate stage may run past the deadline (but each gets a moment, so a deadline that is
/// already near ends in a `timeout`, not in a start-up failure).
fn cap_limits(limits: &mut StageLimits, deadline: Instant) {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(LEAST_STAGE_LIMIT);
    for limit in [&mut limits.load, &mut limits.trial, &mut limits.timing] {
        *limit = (*limit).min(left);
    }
}

/// The warm pool for `concurrency` evaluations at once: `tuning`'s depth, else two waiting
/// pairs per evaluation on a GPU (K = 2N, the default the design notes' measurements kept) and
/// one on the CPU.
fn start_pool(
    runtime: &Runtime,
    base: &EvalConfig,
    concurrency: usize,
    tuning: &Tuning,
) -> Result<WarmPool, EngineError> {
    let ahead = if base.device.is_gpu() { 2 } else { 1 };
    let depth = tuning.pool_depth.unwrap_or(concurrency * ahead);
    WarmPool::start(
        runtime.clone(),
        base.clone(),
        depth,
        !tuning.cold_profiler,
        tuning.pool_nice.unwrap_or(POOL_NICE),
        match (tuning.fresh_referees, tuning.fresh_candidates) {
            (true, _) => Forking::Nothing,
            (false, true) => Forking::Referees,
            (false, false) => Forking::Both,
        },
        !tuning.cold_referees,
    )
    .map_err(|source| EngineError::Io {
        what: "starting the warm pool",
        source,
    })
}

/// Whether the device ran out of memory: the candidate's (`out_of_memory`), or the judge's side
/// (an `infra_error` saying so: torch's `OutOfMemoryError`, cuBLAS failing to allocate).
fn ran_out_of_memory(result: &EvalResult) -> bool {
    result.failure.as_ref().is_some_and(failed_for_memory)
}

fn failed_for_memory(f: &crucible_result::Failure) -> bool {
    match f.class {
        FailureClass::OutOfMemory => true,
        FailureClass::InfraError => InfraError::is_out_of_memory(&f.message),
        _ => false,
    }
}

/// What a failed attempt ran beside, for its `retried-alone` finding.
const BESIDE_EVALUATIONS: &str = "while sharing the device with other evaluations";
const BESIDE_POOL: &str =
    "with no other evaluation beside it but the warm pool's waiting processes";

/// Says in the retried result why it was retried and what the failed attempt got.
fn note_retry(result: &mut EvalResult, first: &EvalResult, beside: &str) {
    let (stage, message) = first
        .failure
        .as_ref()
        .map(|f| (f.stage.as_str(), f.message.lines().next().unwrap_or("")))
        .unwrap_or_default();
    result.findings.push(Finding::new(
        "retried-alone",
        Severity::Info,
        format!(
            "{} in `{stage}` {beside} ({message}); this result comes from running it again \
             alone",
            match first.verdict {
                Verdict::InfraError => "the judge failed",
                _ => "ran out of memory",
            }
        ),
    ));
    debug_assert!(first.verdict != Verdict::Correct);
}

/// File-name-safe version of a task name.
fn safe_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if safe.is_empty() { "task".into() } else { safe }
}

/// Task files by content: the referee loads a task from a path, and one written file serves
/// every evaluation of that task.
struct TaskFiles {
    dir: tempfile::TempDir,
}

impl TaskFiles {
    fn new() -> std::io::Result<TaskFiles> {
        let dir = tempfile::Builder::new()
            .prefix("crucible-tasks-")
            .tempdir()?;
        Ok(TaskFiles { dir })
    }

    fn path_for(&self, name: &str, source: &str) -> std::io::Result<PathBuf> {
        let digest = Sha256::digest(source.as_bytes());
        let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let dir = self.dir.path().join(hash);
        let path = dir.join(format!("{}.py", safe_name(name)));
        if path.is_file() {
            return Ok(path);
        }
        std::fs::create_dir_all(&dir)?;
        write_atomically(&path, source.as_bytes())?;
        Ok(path)
    }
}

/// Concurrent writers of the same content never leave a reader a half-written file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let staged = tempfile::NamedTempFile::new_in(dir)?;
    std::fs::write(staged.path(), bytes)?;
    staged.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A counting semaphore: at most `concurrency` evaluations at once doing their work. An
/// evaluation that waits for a turn it cannot use its slot in (the large-evaluation claim)
/// lends it meanwhile ([`Slots::lend`]) and takes it back without waiting once its turn came,
/// so the count may stand below zero for a while: the evaluations that run in lent slots then
/// hand theirs to nobody until it is back at zero.
#[derive(Debug)]
struct Slots {
    free: Mutex<isize>,
    freed: Condvar,
}

struct Slot<'a>(&'a Slots);

/// A slot lent by a waiting evaluation; dropping it takes the slot back, at once.
struct Lent<'a>(&'a Slots);

impl Slots {
    fn new(count: usize) -> Slots {
        Slots {
            free: Mutex::new(isize::try_from(count).unwrap_or(isize::MAX)),
            freed: Condvar::new(),
        }
    }

    fn count(&self) -> std::sync::MutexGuard<'_, isize> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn acquire(&self) -> Slot<'_> {
        let mut free = self.count();
        while *free <= 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        Slot(self)
    }

    /// Gives one slot to whoever waits for one, until the guard drops.
    fn lend(&self) -> Lent<'_> {
        self.release();
        Lent(self)
    }

    /// Waits until a slot is free, without taking it; `false` where `stop` says so first
    /// (asked before the slots are looked at, too).
    fn wait_until_free(&self, stop: &dyn Fn() -> bool) -> bool {
        let mut free = self.count();
        loop {
            if stop() {
                return false;
            }
            if *free > 0 {
                return true;
            }
            (free, _) = (self.freed)
                .wait_timeout(free, ROOM_POLL)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    fn release(&self) {
        *self.count() += 1;
        // Every waiter looks: `acquire` and `wait_until_free` both wait on it.
        self.freed.notify_all();
    }
}

/// How often a wait for a free slot asks its caller whether to stop.
const ROOM_POLL: Duration = Duration::from_millis(50);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        *self.0.count() -= 1;
    }
}

/// The GPU's gate as one evaluation sees it: while it waits for the large-evaluation claim
/// (another evaluation of a task too large to fit twice holds it, for 7-15 s with a
/// KernelBench 23_Softmax), its slot goes to another task's evaluation, which would otherwise
/// wait for nothing it needs: an RL batch's group of samples of one such task took every slot
/// of a worker with it, so one evaluation ran at a time. The claim's holder takes its slot back
/// without waiting, so a run of large evaluations never waits for a small one to end.
#[derive(Debug)]
struct LendingGate {
    gate: Arc<dyn crucible_judge::TimedPhaseGate>,
    slots: Arc<Slots>,
}

impl crucible_judge::TimedPhaseGate for LendingGate {
    fn enter(&self) -> crucible_judge::TimedPhaseGuard {
        self.gate.enter()
    }

    fn share(&self) -> crucible_judge::TimedPhaseGuard {
        self.gate.share()
    }

    fn share_large(&self) -> crucible_judge::TimedPhaseGuard {
        self.gate.share_large()
    }

    fn share_ahead(&self) -> crucible_judge::TimedPhaseGuard {
        self.gate.share_ahead()
    }

    fn large_evaluation(&self, stop: &dyn Fn() -> bool) -> Option<crucible_judge::TimedPhaseGuard> {
        // Free now: nothing to wait for, so nothing lent (a slot lent for an instant could
        // start one more evaluation than the slots allow).
        if let Some(claim) = self.gate.large_evaluation(&|| true) {
            return Some(claim);
        }
        let _lent = self.slots.lend();
        self.gate.large_evaluation(stop)
    }
}

/// Runs `jobs` on `engine` from [`Engine::callers`] threads; results in job order.
pub fn evaluate_all(engine: &Engine, jobs: &[Job]) -> Vec<EvalResult> {
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<EvalResult>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..engine.callers().min(jobs.len()) {
            scope.spawn(|| {
                loop {
                    let index = {
                        let mut next = next.lock().unwrap_or_else(|p| p.into_inner());
                        let index = *next;
                        *next += 1;
                        index
                    };
                    let Some(job) = jobs.get(index) else { return };
                    let result = engine.evaluate(job);
                    results.lock().unwrap_or_else(|p| p.into_inner())[index] = Some(result);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_result::Failure;

    fn failure(class: FailureClass, message: &str) -> Failure {
        Failure {
            class,
            stage: "trial_0".into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_lent_slot_starts_one_more_and_is_taken_back_without_waiting() {
        let slots = Slots::new(1);
        // A stop that lets a wait look once, then ends it.
        let once = || {
            let asked = std::cell::Cell::new(0);
            move || {
                asked.set(asked.get() + 1);
                asked.get() > 1
            }
        };
        let first = slots.acquire();
        assert!(!slots.wait_until_free(&once()), "the one slot is taken");
        let lent = slots.lend();
        assert!(slots.wait_until_free(&|| false));
        let second = slots.acquire();
        // Taken back while the second runs in it: the count stands below zero.
        drop(lent);
        assert_eq!(*slots.count(), -1);
        drop(second);
        assert!(
            !slots.wait_until_free(&once()),
            "the lender runs in its slot again"
        );
        drop(first);
        assert!(slots.wait_until_free(&|| false));
        assert!(
            !slots.wait_until_free(&|| true),
            "a stop ends the wait before it looks"
        );
        assert_eq!(*slots.count(), 1);
    }

    #[test]
    fn only_a_failure_for_memory_marks_a_task_to_run_alone() {
        // As the H100's referees reported them.
        let referee =
            "referee failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB.";
        let cublas = "referee failed: RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when \
                      calling `cublasCreate(handle)`";
        assert!(failed_for_memory(&failure(
            FailureClass::InfraError,
            referee
        )));
        assert!(failed_for_memory(&failure(
            FailureClass::InfraError,
            cublas
        )));
        assert!(failed_for_memory(&failure(FailureClass::OutOfMemory, "")));
        let died = "referee the process ended: ended with an unknown status";
        assert!(!failed_for_memory(&failure(FailureClass::InfraError, died)));
        assert!(!failed_for_memory(&failure(
            FailureClass::RuntimeError,
            referee
        )));
    }
}
