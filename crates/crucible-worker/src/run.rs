//! The worker loop: claim a task with a lease, judge it, complete it (or hand an infrastructure
//! fault back with `retry`), while one housekeeping thread sends heartbeats, renews the leases of
//! the evaluations in flight and, where asked, sweeps the store. `concurrency` claim threads run
//! at once; each holds at most one lease. The heartbeat carries each evaluation's judge stage;
//! an evaluation whose task was cancelled (or whose lease was lost) is stopped, its processes
//! killed, and nothing is written for it. When `stop` is set the claim threads take nothing new
//! and finish what they hold (graceful drain), and the loop returns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crucible_queue::{
    Lease, QueueError, RetryOutcome, Store, TaskId, TaskStage, TaskState, WorkerInfo, now_unix,
};
use crucible_result::{EvalResult, Verdict};

use crate::Control;

/// What judges one claimed task. `crucible_worker::Engine` is the real one; tests plug in
/// others to drive the loop without Python.
pub trait Evaluator: Send + Sync {
    /// The versions string that goes into every cache key (judge, harness, device, torch).
    fn versions(&self) -> String;
    /// Judges the lease's task; should return by `deadline` (the store times the task out
    /// anyway). `Err` is an infrastructure fault of the evaluator's own (no result document).
    fn evaluate(&self, lease: &Lease, deadline: Option<Instant>) -> Result<EvalResult, String>;
    /// [`Evaluator::evaluate`], watched and stoppable through `control`: the loop reads the
    /// judge's stage for its heartbeats, and cancels when the task no longer wants a result.
    /// By default neither happens (a cancelled evaluation runs to its end, unrecorded).
    fn evaluate_controlled(
        &self,
        lease: &Lease,
        deadline: Option<Instant>,
        control: &Control,
    ) -> Result<EvalResult, String> {
        let _ = control;
        self.evaluate(lease, deadline)
    }

    /// How many claim threads keep this evaluator busy when it judges `concurrency` at once.
    fn claimers(&self, concurrency: usize) -> usize {
        concurrency
    }

    /// Waits until an evaluation claimed now could start, so a claim thread holds no task it
    /// cannot judge yet; `false` once `stop` is set first.
    fn wait_for_room(&self, stop: &AtomicBool) -> bool {
        !stop.load(Ordering::SeqCst)
    }
}

impl Evaluator for crate::Engine {
    fn versions(&self) -> String {
        crate::Engine::versions(self)
    }

    fn evaluate(&self, lease: &Lease, deadline: Option<Instant>) -> Result<EvalResult, String> {
        Evaluator::evaluate_controlled(self, lease, deadline, &Control::new())
    }

    fn evaluate_controlled(
        &self,
        lease: &Lease,
        deadline: Option<Instant>,
        control: &Control,
    ) -> Result<EvalResult, String> {
        let job = crate::Job {
            task_name: lease.spec.task_name.clone(),
            task_source: lease.spec.task_source.clone(),
            candidate_source: lease.spec.candidate_source.clone(),
            options: lease.spec.options.clone(),
            deadline,
        };
        Ok(crate::Engine::evaluate_controlled(self, &job, control))
    }

    /// More threads than slots where waiting evaluations lend theirs ([`crate::Engine::callers`]).
    fn claimers(&self, concurrency: usize) -> usize {
        concurrency.max(crate::Engine::callers(self))
    }

    fn wait_for_room(&self, stop: &AtomicBool) -> bool {
        self.wait_for_a_free_slot(&|| stop.load(Ordering::SeqCst))
    }
}

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Who this worker is (id, device, GPU model); versions are filled from the evaluator.
    pub worker: WorkerInfo,
    /// Claims in flight at once (the engine's concurrency).
    pub concurrency: usize,
    /// How long a claim holds before another worker may take the task over.
    pub lease: Duration,
    /// Between heartbeats (and lease renewals, which also run at a third of the lease).
    pub heartbeat: Duration,
    /// How long an idle claim thread waits before asking again.
    pub idle_poll: Duration,
    /// How often the tasks in flight are checked (a read) for having been cancelled, which
    /// stops their evaluations; a changed judge stage is sent with the next such check.
    pub cancel_poll: Duration,
    /// Also sweep the store (expired leases, deadlines, retention) this often. Redis workers
    /// do, so that no single API server is needed for it.
    pub sweep_every: Option<Duration>,
}

impl LoopConfig {
    pub fn new(worker: WorkerInfo, concurrency: usize) -> LoopConfig {
        LoopConfig {
            worker,
            concurrency: concurrency.max(1),
            lease: Duration::from_secs(60),
            heartbeat: Duration::from_secs(5),
            idle_poll: Duration::from_millis(200),
            cancel_poll: Duration::from_secs(1),
            sweep_every: None,
        }
    }
}

/// What the loop did, for its final log line and for tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoopReport {
    /// Results the store accepted.
    pub completed: u64,
    /// Infrastructure faults handed back with `retry`.
    pub retried: u64,
    /// Results the store refused (the lease went stale: cancelled, timed out or re-delivered).
    pub refused: u64,
    /// Evaluations stopped because their task was cancelled or their lease lost while they
    /// ran; nothing was written for them.
    pub stopped: u64,
}

#[derive(Default)]
struct Counters {
    completed: AtomicU64,
    retried: AtomicU64,
    refused: AtomicU64,
    stopped: AtomicU64,
}

/// One claimed task being evaluated.
#[derive(Clone)]
struct Flight {
    lease: Lease,
    control: Control,
    claimed: Instant,
}

/// The leases being evaluated, for renewal, cancellation and the heartbeat's tasks.
#[derive(Default)]
struct InFlight {
    flights: Mutex<HashMap<TaskId, Flight>>,
}

impl InFlight {
    fn insert(&self, lease: &Lease, control: &Control) {
        if let Ok(mut map) = self.flights.lock() {
            let flight = Flight {
                lease: lease.clone(),
                control: control.clone(),
                claimed: Instant::now(),
            };
            map.insert(lease.task_id.clone(), flight);
        }
    }
    /// Removes this lease's entry only: a task handed back with `retry` may already have been
    /// claimed again by another claim thread, whose entry must stay (and be renewed).
    fn remove(&self, lease: &Lease) {
        if let Ok(mut map) = self.flights.lock()
            && map
                .get(&lease.task_id)
                .is_some_and(|f| f.lease.token == lease.token)
        {
            map.remove(&lease.task_id);
        }
    }
    /// Oldest claim first.
    fn snapshot(&self) -> Vec<Flight> {
        let mut flights: Vec<Flight> = self
            .flights
            .lock()
            .map(|map| map.values().cloned().collect())
            .unwrap_or_default();
        flights.sort_by_key(|f| f.claimed);
        flights
    }
}

/// Runs until `stop` is set and every evaluation in flight has been completed.
pub fn run_worker(
    store: &Store,
    evaluator: &dyn Evaluator,
    config: &LoopConfig,
    stop: &AtomicBool,
) -> Result<LoopReport, QueueError> {
    let mut worker = config.worker.clone();
    worker.versions = evaluator.versions();
    store.heartbeat(&worker)?;
    tracing::info!(worker = %worker.id, device = %worker.device, concurrency = config.concurrency, "worker started");
    let in_flight = InFlight::default();
    let counters = Counters::default();
    let claimers_done = AtomicBool::new(false);
    let worker = Arc::new(worker);
    std::thread::scope(|scope| {
        let housekeeping = scope.spawn(|| {
            housekeep(store, &worker, config, &in_flight, stop, &claimers_done);
        });
        let claimers: Vec<_> = (0..evaluator.claimers(config.concurrency))
            .map(|_| {
                scope.spawn(|| {
                    claim_loop(
                        store, evaluator, &worker, config, &in_flight, &counters, stop,
                    );
                })
            })
            .collect();
        for claimer in claimers {
            if claimer.join().is_err() {
                tracing::error!("a claim thread panicked");
            }
        }
        claimers_done.store(true, Ordering::SeqCst);
        if housekeeping.join().is_err() {
            tracing::error!("the housekeeping thread panicked");
        }
    });
    let report = LoopReport {
        completed: counters.completed.load(Ordering::SeqCst),
        retried: counters.retried.load(Ordering::SeqCst),
        refused: counters.refused.load(Ordering::SeqCst),
        stopped: counters.stopped.load(Ordering::SeqCst),
    };
    tracing::info!(?report, "worker drained");
    Ok(report)
}

/// Sleeps up to `total`, waking early when `flag` is set.
fn sleep_unless(flag: &AtomicBool, total: Duration) {
    let until = Instant::now() + total;
    while !flag.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(50)));
    }
}

fn claim_loop(
    store: &Store,
    evaluator: &dyn Evaluator,
    worker: &WorkerInfo,
    config: &LoopConfig,
    in_flight: &InFlight,
    counters: &Counters,
    stop: &AtomicBool,
) {
    let mut backoff = config.idle_poll;
    while evaluator.wait_for_room(stop) {
        match store.claim(worker, config.lease) {
            Ok(Some(lease)) => {
                backoff = config.idle_poll;
                let control = Control::new();
                in_flight.insert(&lease, &control);
                judge_one(store, evaluator, &lease, &control, counters);
                in_flight.remove(&lease);
            }
            Ok(None) => sleep_unless(stop, config.idle_poll),
            Err(err) => {
                tracing::warn!(error = %err, "claim failed; backing off");
                sleep_unless(stop, backoff);
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// The task's deadline as a local instant, if it has one.
fn deadline_of(lease: &Lease) -> Option<Instant> {
    lease.deadline_at.map(|at| {
        let left = (at - now_unix()).max(0.0);
        Instant::now() + Duration::from_secs_f64(left.min(1e9))
    })
}

fn judge_one(
    store: &Store,
    evaluator: &dyn Evaluator,
    lease: &Lease,
    control: &Control,
    counters: &Counters,
) {
    tracing::info!(task = %lease.task_id, name = %lease.spec.task_name, attempt = lease.attempt, "evaluating");
    let result = evaluator.evaluate_controlled(lease, deadline_of(lease), control);
    if control.is_cancelled() {
        // Nobody wants this result, and the store would refuse it; nothing is anyone's fault.
        counters.stopped.fetch_add(1, Ordering::SeqCst);
        tracing::info!(task = %lease.task_id, "evaluation stopped: its task was cancelled or its lease lost");
        return;
    }
    let result = match result {
        Ok(result) if result.verdict == Verdict::InfraError => Err(result
            .failure
            .as_ref()
            .map_or_else(|| "infra_error".to_string(), |f| f.message.clone())),
        other => other,
    };
    let result = match result {
        Ok(result) => result,
        Err(reason) => {
            hand_back(store, lease, &reason, counters);
            return;
        }
    };
    complete(store, lease, &result, counters);
}

fn hand_back(store: &Store, lease: &Lease, reason: &str, counters: &Counters) {
    match with_retries(|| store.retry(lease, reason)) {
        Some(RetryOutcome::Refused) => counters.refused.fetch_add(1, Ordering::SeqCst),
        Some(_) => counters.retried.fetch_add(1, Ordering::SeqCst),
        None => 0,
    };
    tracing::warn!(task = %lease.task_id, %reason, "infrastructure fault: handed back");
}

fn complete(store: &Store, lease: &Lease, result: &EvalResult, counters: &Counters) {
    let document = match serde_json::to_value(result) {
        Ok(doc) => doc,
        Err(err) => {
            tracing::error!(error = %err, "result does not serialize");
            return;
        }
    };
    match with_retries(|| store.complete(lease, document.clone())) {
        Some(true) => {
            counters.completed.fetch_add(1, Ordering::SeqCst);
            tracing::info!(task = %lease.task_id, verdict = result.verdict.as_str(), "completed");
        }
        Some(false) => {
            counters.refused.fetch_add(1, Ordering::SeqCst);
            tracing::info!(task = %lease.task_id, "result refused: the lease went stale");
        }
        None => {}
    }
}

/// A store call that failed is tried again a few times: a result is worth waiting a little for,
/// and if the store stays down the lease expires and the task is re-delivered anyway.
fn with_retries<T>(mut op: impl FnMut() -> Result<T, QueueError>) -> Option<T> {
    let mut pause = Duration::from_millis(100);
    for attempt in 1..=6 {
        match op() {
            Ok(value) => return Some(value),
            Err(err) => {
                tracing::warn!(error = %err, attempt, "store call failed");
                std::thread::sleep(pause);
                pause *= 2;
            }
        }
    }
    None
}

fn housekeep(
    store: &Store,
    worker: &WorkerInfo,
    config: &LoopConfig,
    in_flight: &InFlight,
    stop: &AtomicBool,
    claimers_done: &AtomicBool,
) {
    let renew_every = config.heartbeat.min(config.lease / 3);
    let poll = config.cancel_poll.min(renew_every);
    let mut last_renewal: Option<Instant> = None;
    let mut last_beat: Option<(Instant, WorkerInfo)> = None;
    let mut last_sweep = Instant::now();
    loop {
        let flights = in_flight.snapshot();
        if last_renewal.is_none_or(|at| at.elapsed() >= renew_every) {
            last_renewal = Some(Instant::now());
            renew(store, &flights, config.lease);
        } else {
            stop_unwanted(store, &flights);
        }
        let status = status_of(worker, &flights, stop.load(Ordering::SeqCst));
        let beat_due = last_beat
            .as_ref()
            .is_none_or(|(at, sent)| at.elapsed() >= renew_every || *sent != status);
        if beat_due {
            match store.heartbeat(&status) {
                Ok(()) => last_beat = Some((Instant::now(), status)),
                Err(err) => tracing::warn!(error = %err, "heartbeat failed"),
            }
        }
        if let Some(every) = config.sweep_every
            && last_sweep.elapsed() >= every
        {
            last_sweep = Instant::now();
            match store.sweep(now_unix()) {
                Ok(report) => tracing::debug!(?report, "swept"),
                Err(err) => tracing::warn!(error = %err, "sweep failed"),
            }
        }
        if claimers_done.load(Ordering::SeqCst) {
            let mut last = worker.clone();
            last.stage = Some("stopped".into());
            let _ = store.heartbeat(&last);
            return;
        }
        sleep_unless(claimers_done, poll);
    }
}

/// Renews every lease in flight; one the store refuses is lost, and its evaluation stopped.
fn renew(store: &Store, flights: &[Flight], lease: Duration) {
    for flight in flights {
        match store.renew(&flight.lease, lease) {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(task = %flight.lease.task_id, "lease lost (cancelled, timed out or re-delivered): stopping its evaluation");
                flight.control.cancel();
            }
            Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
        }
    }
}

/// Stops the evaluations whose task no longer wants this lease's result: cancelled, timed out,
/// gone, or delivered again elsewhere. One read for them all, so it can run more often than
/// renewals.
fn stop_unwanted(store: &Store, flights: &[Flight]) {
    let watched: Vec<&Flight> = flights
        .iter()
        .filter(|f| !f.control.is_cancelled())
        .collect();
    if watched.is_empty() {
        return;
    }
    let ids: Vec<TaskId> = watched.iter().map(|f| f.lease.task_id.clone()).collect();
    let records = match store.tasks(&ids) {
        Ok(records) => records,
        Err(err) => {
            tracing::warn!(error = %err, "checking the tasks in flight failed");
            return;
        }
    };
    for flight in watched {
        let lease = &flight.lease;
        let wanted = records.iter().any(|r| {
            r.id == lease.task_id && r.state == TaskState::Running && r.attempts == lease.attempt
        });
        if !wanted {
            tracing::info!(task = %lease.task_id, "task cancelled or taken over: stopping its evaluation");
            flight.control.cancel();
        }
    }
}

/// The heartbeat: every task in flight with its judge stage, the oldest as the current one.
fn status_of(worker: &WorkerInfo, flights: &[Flight], draining: bool) -> WorkerInfo {
    let mut status = worker.clone();
    status.in_flight = flights
        .iter()
        .map(|f| TaskStage {
            task: f.lease.task_id.clone(),
            stage: f.control.stage(),
        })
        .collect();
    let oldest = status.in_flight.first();
    status.current_task = oldest.map(|t| t.task.clone());
    status.stage = match (draining, oldest) {
        (true, _) => Some("draining".into()),
        (false, None) => None,
        (false, Some(task)) => Some(task.stage.clone().unwrap_or_else(|| "evaluating".into())),
    };
    status
}
