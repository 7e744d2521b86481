//! The worker loop against a real SQLite store, with a stand-in evaluator (no Python): leases are
//! renewed while an evaluation outlives them, an `infra_error` goes back to the queue and is
//! retried, `concurrency` evaluations run at once, a stop drains what is in flight, and a
//! cancelled task's evaluation is told to stop while the heartbeat shows its stage.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crucible_queue::{Lease, Store, TaskSpec, TaskState, WorkerInfo};
use crucible_result::{EvalResult, Verdict};
use crucible_testkit::RedisServer;
use crucible_worker::{Control, Evaluator, LoopConfig, run_worker};

/// A real result document (from the dashboard's fixtures), re-labelled per call.
fn sample_result() -> EvalResult {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crucible-dashboard/tests/fixtures/gpu_correct.json"
    );
    let text = std::fs::read_to_string(path).expect("read the fixture result");
    serde_json::from_str(&text).expect("a crucible.result/1 document")
}

/// Sleeps `work` per task; the first `infra_faults` calls report an `infra_error`.
struct Fake {
    work: Duration,
    infra_faults: AtomicUsize,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
    calls: AtomicUsize,
    template: EvalResult,
}

impl Evaluator for Fake {
    fn versions(&self) -> String {
        "fake-1".into()
    }

    fn evaluate(&self, _lease: &Lease, _deadline: Option<Instant>) -> Result<EvalResult, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.work);
        self.running.fetch_sub(1, Ordering::SeqCst);
        let mut result = self.template.clone();
        let fault = self
            .infra_faults
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        result.verdict = if fault {
            Verdict::InfraError
        } else {
            Verdict::Correct
        };
        Ok(result)
    }
}

fn spec(i: usize) -> TaskSpec {
    TaskSpec::new(
        format!("t{i}"),
        "class Model: pass\n",
        format!("# candidate {i}\n"),
    )
}

#[test]
fn leases_outlived_faults_retried_concurrency_kept_and_stop_drains() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("q.db").display());
    let store = Store::open(&url).expect("open the store");
    let ids = store
        .submit(None, (0..4).map(spec).collect())
        .expect("submit");
    let fake = Fake {
        // Longer than the lease: only renewal keeps the claims.
        work: Duration::from_millis(4000),
        infra_faults: AtomicUsize::new(1),
        running: AtomicUsize::new(0),
        most_at_once: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
        template: sample_result(),
    };
    let worker = WorkerInfo {
        id: "test:cpu".into(),
        device: "cpu".into(),
        ..WorkerInfo::default()
    };
    let mut config = LoopConfig::new(worker, 2);
    config.lease = Duration::from_millis(2500);
    config.heartbeat = Duration::from_millis(200);
    config.idle_poll = Duration::from_millis(50);
    let stop = Arc::new(AtomicBool::new(false));

    let report = std::thread::scope(|scope| {
        let running = scope.spawn(|| run_worker(&store, &fake, &config, &stop));
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            // Something else sweeps meanwhile, as `serve` does: expired leases would be taken.
            store.sweep(crucible_queue::now_unix()).expect("sweep");
            let records: Vec<_> = ids
                .iter()
                .map(|id| store.task(id).expect("read").expect("known"))
                .collect();
            if records.iter().all(|r| r.state.is_terminal()) {
                break;
            }
            assert!(Instant::now() < until, "tasks not finished: {records:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::SeqCst);
        running.join().expect("loop thread").expect("loop result")
    });

    for id in &ids {
        let record = store.task(id).expect("read").expect("known");
        assert_eq!(record.state, TaskState::Done);
        assert_eq!(
            record.result.as_ref().and_then(|r| r["verdict"].as_str()),
            Some("correct"),
            "{record:?}"
        );
    }
    let retried: Vec<_> = ids
        .iter()
        .filter_map(|id| store.task(id).ok().flatten())
        .filter(|r| r.attempts == 2)
        .collect();
    assert_eq!(retried.len(), 1, "one infra fault, retried once");
    assert_eq!(report.completed, 4);
    assert_eq!(report.retried, 1);
    assert_eq!(report.refused, 0, "no lease expired under a live worker");
    assert_eq!(fake.calls.load(Ordering::SeqCst), 5);
    assert_eq!(fake.most_at_once.load(Ordering::SeqCst), 2);
    let workers = store.workers().expect("workers");
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0].versions, "fake-1");
}

#[test]
fn a_stop_mid_evaluation_finishes_the_task_before_returning() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("q.db").display());
    let store = Store::open(&url).expect("open the store");
    let ids = store.submit(None, vec![spec(0), spec(1)]).expect("submit");
    let fake = Fake {
        work: Duration::from_millis(800),
        infra_faults: AtomicUsize::new(0),
        running: AtomicUsize::new(0),
        most_at_once: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
        template: sample_result(),
    };
    let config = LoopConfig::new(
        WorkerInfo {
            id: "drain:cpu".into(),
            device: "cpu".into(),
            ..WorkerInfo::default()
        },
        1,
    );
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        let running = scope.spawn(|| run_worker(&store, &fake, &config, &stop));
        while fake.running.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::SeqCst);
        running.join().expect("loop thread").expect("loop result")
    });
    assert_eq!(report.completed, 1, "the task in flight was finished");
    let states: Vec<_> = ids
        .iter()
        .map(|id| store.task(id).expect("read").expect("known").state)
        .collect();
    assert_eq!(states.iter().filter(|s| **s == TaskState::Done).count(), 1);
    assert_eq!(
        states.iter().filter(|s| **s == TaskState::Queued).count(),
        1,
        "nothing new was claimed after the stop"
    );
}

/// Sets the loop's stop flag when dropped, so a failed assertion inside the thread scope ends
/// the loop (after its evaluation in flight) instead of waiting for it forever.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Tasks named `stubborn` work until told to stop (as a hanging candidate would), in a stage
/// of their own; others return at once.
struct Stubborn {
    started: AtomicBool,
    told_to_stop_after: Mutex<Option<Duration>>,
    template: EvalResult,
}

impl Evaluator for Stubborn {
    fn versions(&self) -> String {
        "stubborn-1".into()
    }

    fn evaluate(&self, lease: &Lease, deadline: Option<Instant>) -> Result<EvalResult, String> {
        self.evaluate_controlled(lease, deadline, &Control::new())
    }

    fn evaluate_controlled(
        &self,
        lease: &Lease,
        _deadline: Option<Instant>,
        control: &Control,
    ) -> Result<EvalResult, String> {
        if lease.spec.task_name == "stubborn" {
            control.set_stage("trial_0");
            self.started.store(true, Ordering::SeqCst);
            let began = Instant::now();
            while !control.is_cancelled() && began.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(5));
            }
            *self.told_to_stop_after.lock().unwrap() = Some(began.elapsed());
        }
        Ok(self.template.clone())
    }
}

#[test]
fn a_cancelled_task_stops_its_evaluation_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    cancel_stops_the_evaluation(&format!("sqlite://{}", dir.path().join("q.db").display()));
}

#[test]
fn a_cancelled_task_stops_its_evaluation_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    cancel_stops_the_evaluation(&redis.url(0));
}

/// A cancelled task's evaluation is told to stop, nothing is written for it, and the next task
/// is taken; meanwhile the heartbeat shows the evaluation's stage.
fn cancel_stops_the_evaluation(url: &str) {
    let store = Store::open(url).expect("open the store");
    let stubborn = store
        .submit(
            None,
            vec![TaskSpec::new(
                "stubborn",
                "class Model: pass\n",
                "# hangs\n",
            )],
        )
        .expect("submit")
        .remove(0);
    let evaluator = Stubborn {
        started: AtomicBool::new(false),
        told_to_stop_after: Mutex::new(None),
        template: sample_result(),
    };
    let mut config = LoopConfig::new(
        WorkerInfo {
            id: "cancel:cpu".into(),
            device: "cpu".into(),
            ..WorkerInfo::default()
        },
        1,
    );
    config.cancel_poll = Duration::from_millis(200);
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        let running = scope.spawn(|| run_worker(&store, &evaluator, &config, &stop));
        let _stop = StopOnDrop(&stop);
        // The heartbeat shows the evaluator's stage for the task.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let workers = store.workers().expect("workers");
            let shown = workers.first().and_then(|w| w.in_flight.first().cloned());
            if let Some(flight) = shown.filter(|f| f.stage.as_deref() == Some("trial_0")) {
                assert_eq!(flight.task, stubborn);
                assert_eq!(workers[0].stage.as_deref(), Some("trial_0"));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no heartbeat showed the stage: {workers:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(store.cancel(&stubborn).expect("cancel"));
        let next = store.submit(None, vec![spec(1)]).expect("submit").remove(0);
        let done = store
            .wait_terminal(std::slice::from_ref(&next), Duration::from_secs(10))
            .expect("wait")
            .remove(0);
        assert_eq!(done.state, TaskState::Done, "the next task was taken");
        stop.store(true, Ordering::SeqCst);
        running.join().expect("loop thread").expect("loop result")
    });
    let after = evaluator
        .told_to_stop_after
        .lock()
        .unwrap()
        .expect("it ran");
    assert!(
        after < Duration::from_secs(5),
        "told to stop after {after:?}"
    );
    assert_eq!(
        (
            report.stopped,
            report.completed,
            report.retried,
            report.refused
        ),
        (1, 1, 0, 0)
    );
    let record = store.task(&stubborn).expect("read").expect("known");
    assert_eq!(record.state, TaskState::Cancelled);
    assert!(record.result.is_none());
}
