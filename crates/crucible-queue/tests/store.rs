//! One behaviour suite, run against both backends: a real SQLite file in a temp dir, and a real
//! `redis-server` started per test on a free port (skipped, with a message, when absent).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crucible_queue::{
    Lease, QueueError, RetryOutcome, Store, StoreConfig, TaskSpec, TaskStage, TaskState,
    WorkerInfo, now_unix,
};
use crucible_testkit::RedisServer;
use serde_json::json;

/// A backend to open stores on; what keeps it alive (temp dir, server) lives here.
enum Fixture {
    Sqlite(tempfile::TempDir),
    Redis(RedisServer),
}

impl Fixture {
    fn sqlite() -> Option<Fixture> {
        Some(Fixture::Sqlite(tempfile::tempdir().expect("temp dir")))
    }

    fn redis() -> Option<Fixture> {
        RedisServer::start().map(Fixture::Redis)
    }

    fn url(&self) -> String {
        match self {
            Fixture::Sqlite(dir) => format!("sqlite://{}/queue.db", dir.path().display()),
            Fixture::Redis(server) => server.url(0),
        }
    }

    fn open(&self) -> Store {
        self.open_with(StoreConfig::default())
    }

    fn open_with(&self, config: StoreConfig) -> Store {
        Store::open_with(&self.url(), config).expect("open store")
    }
}

fn spec(name: &str, client: &str, priority: i32) -> TaskSpec {
    let mut spec = TaskSpec::new(name, format!("task {name}"), format!("candidate {name}"));
    spec.client = client.to_string();
    spec.priority = priority;
    spec
}

fn worker(id: &str) -> WorkerInfo {
    WorkerInfo {
        id: id.to_string(),
        device: "cpu".into(),
        gpu_model: None,
        versions: "test-versions-1".into(),
        current_task: None,
        stage: None,
        in_flight: Vec::new(),
    }
}

fn result(verdict: &str, stages: &[(&str, f64)]) -> serde_json::Value {
    let stages: Vec<_> = stages
        .iter()
        .map(|(name, d)| json!({"name": name, "status": "ok", "duration_s": d}))
        .collect();
    json!({"schema": "crucible.result/1", "verdict": verdict, "stages": stages})
}

const LEASE: Duration = Duration::from_secs(60);

fn claim(store: &Store, who: &str) -> Option<Lease> {
    store.claim(&worker(who), LEASE).expect("claim")
}

fn state_of(store: &Store, id: &str) -> TaskState {
    store.task(id).expect("task").expect("known task").state
}

// ---------------------------------------------------------------------------------------------

fn submit_claim_complete(f: &Fixture) {
    let store = f.open();
    let mut s = spec("01_relu", "alice", 0);
    s.labels.insert("step".into(), json!(7));
    let ids = store.submit(Some("b1"), vec![s.clone()]).unwrap();
    assert_eq!(ids.len(), 1);
    let record = store.task(&ids[0]).unwrap().unwrap();
    assert_eq!(record.state, TaskState::Queued);
    assert_eq!(record.labels["step"], json!(7));
    let lease = claim(&store, "w1").expect("a task");
    assert_eq!(lease.task_id, ids[0]);
    assert_eq!(lease.spec, s);
    assert_eq!(lease.attempt, 1);
    assert_eq!(state_of(&store, &ids[0]), TaskState::Running);
    assert!(claim(&store, "w2").is_none(), "only one task was queued");
    assert!(store.renew(&lease, LEASE).unwrap());
    assert!(store.complete(&lease, result("correct", &[])).unwrap());
    assert!(
        !store.complete(&lease, result("correct", &[])).unwrap(),
        "twice"
    );
    let done = store.task(&ids[0]).unwrap().unwrap();
    assert_eq!(done.state, TaskState::Done);
    assert_eq!(done.result.unwrap()["verdict"], "correct");
    assert_eq!(done.worker.as_deref(), Some("w1"));
    assert!(done.finished_at.is_some() && done.started_at.is_some());
    assert_eq!(store.batch("b1").unwrap().len(), 1);
    assert!(store.task("no-such-task").unwrap().is_none());
    let both = store
        .tasks(&[ids[0].clone(), "no-such-task".into(), ids[0].clone()])
        .unwrap();
    assert_eq!(both.len(), 2, "unknown ids are left out");
    assert!(store.batch("no-such-batch").unwrap().is_empty());
    assert!(store.tasks(&[]).unwrap().is_empty());
    assert!(both.iter().all(|r| r.id == ids[0]));
    assert!(
        !store.renew(&lease, LEASE).unwrap(),
        "a finished task's lease is stale"
    );
}

fn priorities_and_fair_share(f: &Fixture) {
    let store = f.open();
    // alice floods priority 0 first; bob submits later; one urgent task at priority 5.
    let alice: Vec<_> = (0..6).map(|i| spec(&format!("a{i}"), "alice", 0)).collect();
    store.submit(None, alice).unwrap();
    let bob: Vec<_> = (0..3).map(|i| spec(&format!("b{i}"), "bob", 0)).collect();
    store.submit(None, bob).unwrap();
    store
        .submit(None, vec![spec("urgent", "carol", 5)])
        .unwrap();
    let mut order = Vec::new();
    while let Some(lease) = claim(&store, "w") {
        order.push(lease.spec.task_name.clone());
        // Complete at once: nobody has anything in flight, so fairness is by last served.
        assert!(store.complete(&lease, result("correct", &[])).unwrap());
    }
    assert_eq!(order[0], "urgent", "{order:?}");
    // alice and bob alternate while both have work, each in submission order.
    assert_eq!(
        &order[1..7],
        &["a0", "b0", "a1", "b1", "a2", "b2"].map(String::from),
        "{order:?}"
    );
    assert_eq!(&order[7..], &["a3", "a4", "a5"].map(String::from));
}

fn fewest_in_flight_first(f: &Fixture) {
    let store = f.open();
    store
        .submit(
            None,
            (0..4).map(|i| spec(&format!("a{i}"), "alice", 0)).collect(),
        )
        .unwrap();
    store
        .submit(
            None,
            (0..4).map(|i| spec(&format!("b{i}"), "bob", 0)).collect(),
        )
        .unwrap();
    // Four workers claim without completing: two tasks each, never three of one client.
    let clients: Vec<String> = (0..4)
        .map(|i| claim(&store, &format!("w{i}")).unwrap().spec.client)
        .collect();
    let alice = clients.iter().filter(|c| *c == "alice").count();
    assert_eq!(alice, 2, "{clients:?}");
}

fn lease_expiry_redelivers_and_refuses_stale_complete(f: &Fixture) {
    let store = f.open();
    let ids = store.submit(None, vec![spec("t", "c", 0)]).unwrap();
    let dead = store
        .claim(&worker("dead"), Duration::from_millis(50))
        .unwrap()
        .unwrap();
    assert!(claim(&store, "other").is_none(), "leased, not claimable");
    std::thread::sleep(Duration::from_millis(120));
    let report = store.sweep(now_unix()).unwrap();
    assert_eq!(report.requeued, 1, "{report:?}");
    let alive = claim(&store, "alive").expect("re-delivered");
    assert_eq!(alive.task_id, ids[0]);
    assert_eq!(alive.attempt, 2);
    assert_ne!(alive.token, dead.token);
    assert!(!store.renew(&dead, LEASE).unwrap(), "stale renew");
    assert!(
        !store.complete(&dead, result("incorrect", &[])).unwrap(),
        "stale"
    );
    assert!(store.complete(&alive, result("correct", &[])).unwrap());
    let done = store.task(&ids[0]).unwrap().unwrap();
    assert_eq!(done.result.unwrap()["verdict"], "correct");
    assert_eq!(done.attempts, 2);
    assert_eq!(store.stats().unwrap().evaluations_completed, 1);
}

fn claim_reclaims_expired_leases_by_itself(f: &Fixture) {
    let store = f.open();
    let ids = store.submit(None, vec![spec("t", "c", 0)]).unwrap();
    store
        .claim(&worker("dead"), Duration::from_millis(50))
        .unwrap()
        .unwrap();
    // No sweep: a fresh handle's first claim looks for expired leases itself.
    std::thread::sleep(Duration::from_millis(120));
    let other = f.open();
    let lease = claim(&other, "alive").expect("re-delivered without a sweep");
    assert_eq!(lease.task_id, ids[0]);
}

fn cancel(f: &Fixture) {
    let store = f.open();
    let ids = store
        .submit(None, vec![spec("a", "c", 0), spec("b", "c", 0)])
        .unwrap();
    assert!(store.cancel(&ids[0]).unwrap());
    assert!(!store.cancel(&ids[0]).unwrap(), "already cancelled");
    assert!(!store.cancel("unknown").unwrap());
    let lease = claim(&store, "w").unwrap();
    assert_eq!(
        lease.task_id, ids[1],
        "the cancelled task is never delivered"
    );
    assert!(
        store.cancel(&ids[1]).unwrap(),
        "running tasks can be cancelled"
    );
    assert!(!store.complete(&lease, result("correct", &[])).unwrap());
    assert_eq!(state_of(&store, &ids[1]), TaskState::Cancelled);
    assert!(claim(&store, "w").is_none());
    let stats = store.stats().unwrap();
    assert_eq!((stats.cancelled, stats.queued, stats.running), (2, 0, 0));
}

fn cancel_batch(f: &Fixture) {
    let store = f.open();
    // a (will run), b (will be done), c, y, and y again: a duplicate following y in the batch.
    let names = ["a", "b", "c", "y", "y"];
    let ids = store
        .submit(Some("b"), names.iter().map(|n| spec(n, "c", 0)).collect())
        .unwrap();
    // Another batch's duplicate of `a` follows it.
    let elsewhere = store.submit(Some("o"), vec![spec("a", "d", 0)]).unwrap();
    let running = claim(&store, "w").unwrap();
    assert_eq!(running.task_id, ids[0]);
    let finished = claim(&store, "w").unwrap();
    assert_eq!(finished.task_id, ids[1]);
    assert!(store.complete(&finished, result("correct", &[])).unwrap());

    assert_eq!(store.cancel_batch("b").unwrap(), 4, "a, c and both y");
    let states: Vec<_> = ids.iter().map(|id| state_of(&store, id)).collect();
    use TaskState::{Cancelled, Done};
    assert_eq!(states, [Cancelled, Done, Cancelled, Cancelled, Cancelled]);
    assert!(
        !store.complete(&running, result("correct", &[])).unwrap(),
        "a cancelled task's worker has its result refused"
    );
    assert_eq!(
        store.cancel_batch("b").unwrap(),
        0,
        "nothing left to cancel"
    );
    assert_eq!(store.cancel_batch("no-such-batch").unwrap(), 0);

    // The other batch's task took over from its cancelled leader and is judged.
    let lease = claim(&store, "w").expect("the duplicate elsewhere leads now");
    assert_eq!(lease.task_id, elsewhere[0]);
    assert!(
        claim(&store, "w").is_none(),
        "nothing of batch b is delivered"
    );
    assert!(store.complete(&lease, result("correct", &[])).unwrap());
    assert_eq!(state_of(&store, &elsewhere[0]), Done);
    let stats = store.stats().unwrap();
    assert_eq!((stats.cancelled, stats.queued, stats.running), (4, 0, 0));
}

fn deadline_gives_timeout_result(f: &Fixture) {
    let store = f.open();
    // Deadlines long enough that a loaded machine still claims before them.
    let mut queued = spec("queued", "c", 0);
    queued.deadline_s = Some(0.3);
    let mut running = spec("running", "c", 1);
    running.deadline_s = Some(0.3);
    let ids = store.submit(None, vec![queued, running]).unwrap();
    let lease = claim(&store, "w").unwrap();
    assert_eq!(lease.task_id, ids[1]);
    assert!(lease.deadline_at.is_some());
    std::thread::sleep(Duration::from_millis(350));
    let report = store.sweep(now_unix()).unwrap();
    assert_eq!(report.timed_out, 2, "{report:?}");
    for id in &ids {
        let record = store.task(id).unwrap().unwrap();
        assert_eq!(record.state, TaskState::Timeout);
        let doc = record.result.expect("a timeout has a result document");
        let parsed: crucible_result::EvalResult = serde_json::from_value(doc).unwrap();
        assert_eq!(parsed.verdict, crucible_result::Verdict::Timeout);
        let failure = parsed.failure.unwrap();
        assert_eq!(failure.class, crucible_result::FailureClass::Timeout);
        assert!(failure.message.contains("deadline"), "{}", failure.message);
    }
    assert!(
        !store.complete(&lease, result("correct", &[])).unwrap(),
        "too late"
    );
    assert_eq!(store.stats().unwrap().verdicts["timeout"], 2);
}

fn overdue_task_is_never_delivered(f: &Fixture) {
    let store = f.open();
    let mut s = spec("late", "c", 0);
    s.deadline_s = Some(0.01);
    let ids = store.submit(None, vec![s]).unwrap();
    std::thread::sleep(Duration::from_millis(40));
    assert!(
        claim(&store, "w").is_none(),
        "past its deadline before any sweep"
    );
    assert_eq!(state_of(&store, &ids[0]), TaskState::Timeout);
}

fn retries_end_in_infra_error(f: &Fixture) {
    let store = f.open();
    let ids = store.submit(None, vec![spec("flaky", "c", 0)]).unwrap();
    for attempt in 1..=2 {
        let lease = claim(&store, "w").unwrap();
        assert_eq!(lease.attempt, attempt);
        assert_eq!(
            store.retry(&lease, "harness died").unwrap(),
            RetryOutcome::Requeued
        );
        assert_eq!(store.retry(&lease, "again").unwrap(), RetryOutcome::Refused);
        assert_eq!(state_of(&store, &ids[0]), TaskState::Queued);
    }
    let last = claim(&store, "w").unwrap();
    assert_eq!(last.attempt, 3);
    assert_eq!(
        store.retry(&last, "harness died").unwrap(),
        RetryOutcome::Exhausted
    );
    let record = store.task(&ids[0]).unwrap().unwrap();
    assert_eq!(record.state, TaskState::Done);
    let doc: crucible_result::EvalResult = serde_json::from_value(record.result.unwrap()).unwrap();
    assert_eq!(doc.verdict, crucible_result::Verdict::InfraError);
    assert!(doc.failure.unwrap().message.contains("harness died"));
    assert!(claim(&store, "w").is_none());
    // An infra_error is never cached: an identical task is evaluated again.
    let again = store.submit(None, vec![spec("flaky", "c", 0)]).unwrap();
    assert_eq!(state_of(&store, &again[0]), TaskState::Queued);
}

fn expired_leases_count_as_attempts(f: &Fixture) {
    let store = f.open();
    let ids = store.submit(None, vec![spec("poison", "c", 0)]).unwrap();
    for _ in 0..3 {
        store
            .claim(&worker("w"), Duration::from_millis(20))
            .unwrap()
            .expect("delivered");
        std::thread::sleep(Duration::from_millis(40));
        store.sweep(now_unix()).unwrap();
    }
    let record = store.task(&ids[0]).unwrap().unwrap();
    assert_eq!(
        record.state,
        TaskState::Done,
        "a task that kills workers ends"
    );
    assert_eq!(record.result.unwrap()["verdict"], "infra_error");
}

fn cache_hit_on_resubmit(f: &Fixture) {
    let store = f.open();
    let w = worker("w");
    store.heartbeat(&w).unwrap();
    let first = store.submit(None, vec![spec("t", "c", 0)]).unwrap();
    let lease = store.claim(&w, LEASE).unwrap().unwrap();
    assert!(
        store
            .complete(&lease, result("correct", &[("verify", 0.5)]))
            .unwrap()
    );
    let again = store
        .submit(None, vec![spec("t", "other-client", 3)])
        .unwrap();
    let record = store.task(&again[0]).unwrap().unwrap();
    assert_eq!(record.state, TaskState::Done, "answered at submit");
    assert!(record.cached);
    assert_eq!(record.result.unwrap()["verdict"], "correct");
    let mut no_cache = spec("t", "c", 0);
    no_cache.cache = false;
    let fresh = store.submit(None, vec![no_cache]).unwrap();
    assert_eq!(state_of(&store, &fresh[0]), TaskState::Queued);
    let stats = store.stats().unwrap();
    assert_eq!(stats.cache_hits, 1);
    assert_eq!(stats.verdicts["correct"], 2);
    assert_eq!(stats.evaluations_completed, 1);
    assert_ne!(first[0], again[0]);
}

fn claim_answers_from_cache_when_result_appeared(f: &Fixture) {
    let store = f.open();
    // No live worker at submit, so no cache lookup: both identical tasks queue (the first
    // opted out of caching, so the second does not follow it)...
    let mut a = spec("t", "c", 0);
    a.cache = false;
    let ids = store.submit(None, vec![a, spec("t", "c", 0)]).unwrap();
    assert_eq!(state_of(&store, &ids[1]), TaskState::Queued);
    // ...the uncached one runs and fills the cache; the second is answered when claimed.
    let lease = claim(&store, "w").unwrap();
    assert_eq!(lease.task_id, ids[0]);
    assert!(store.complete(&lease, result("incorrect", &[])).unwrap());
    assert!(
        claim(&store, "w").is_none(),
        "answered from the cache instead"
    );
    let record = store.task(&ids[1]).unwrap().unwrap();
    assert!(record.cached);
    assert_eq!(record.result.unwrap()["verdict"], "incorrect");
}

fn in_flight_duplicate_shares_one_evaluation(f: &Fixture) {
    let store = f.open();
    let ids = store
        .submit(None, vec![spec("t", "alice", 0), spec("t", "alice", 0)])
        .unwrap();
    let later = store.submit(None, vec![spec("t", "bob", 0)]).unwrap();
    let follower = store.task(&ids[1]).unwrap().unwrap();
    assert_eq!(follower.shared_with.as_deref(), Some(ids[0].as_str()));
    let lease = claim(&store, "w").unwrap();
    assert_eq!(lease.task_id, ids[0]);
    assert!(
        claim(&store, "w").is_none(),
        "duplicates are never delivered"
    );
    assert_eq!(
        state_of(&store, &later[0]),
        TaskState::Running,
        "mirrors its leader"
    );
    assert!(
        store
            .complete(&lease, result("correct", &[("timing", 2.0)]))
            .unwrap()
    );
    for id in [&ids[1], &later[0]] {
        let record = store.task(id).unwrap().unwrap();
        assert_eq!(record.state, TaskState::Done);
        assert_eq!(record.result.unwrap()["verdict"], "correct");
    }
    let stats = store.stats().unwrap();
    assert_eq!(stats.duplicates_shared, 2);
    assert_eq!(stats.evaluations_completed, 1);
    assert_eq!(stats.stages["timing"].count, 1);
}

fn cancelled_leader_releases_its_duplicates(f: &Fixture) {
    let store = f.open();
    let ids = store
        .submit(
            None,
            vec![spec("t", "c", 0), spec("t", "c", 0), spec("t", "c", 0)],
        )
        .unwrap();
    assert!(store.cancel(&ids[0]).unwrap());
    let lease = claim(&store, "w").expect("a follower takes over");
    assert_eq!(lease.task_id, ids[1]);
    assert!(claim(&store, "w").is_none());
    assert!(store.complete(&lease, result("correct", &[])).unwrap());
    assert_eq!(state_of(&store, &ids[2]), TaskState::Done);
    assert_eq!(state_of(&store, &ids[0]), TaskState::Cancelled);
}

fn retention_drops_old_finished_tasks(f: &Fixture) {
    let config = StoreConfig {
        retention: Duration::from_secs(3600),
        ..StoreConfig::default()
    };
    let store = f.open_with(config);
    let ids = store
        .submit(None, vec![spec("done", "c", 0), spec("waiting", "c", 0)])
        .unwrap();
    let lease = claim(&store, "w").unwrap();
    assert!(store.complete(&lease, result("correct", &[])).unwrap());
    let report = store.sweep(now_unix() + 1800.0).unwrap();
    assert_eq!(report.purged, 0, "not old enough yet");
    let report = store.sweep(now_unix() + 7200.0).unwrap();
    assert_eq!(report.purged, 1, "{report:?}");
    assert!(store.task(&ids[0]).unwrap().is_none());
    assert_eq!(
        state_of(&store, &ids[1]),
        TaskState::Queued,
        "unfinished tasks stay"
    );
    // The cached result went with it: an identical task is evaluated again.
    store.heartbeat(&worker("w")).unwrap();
    let again = store.submit(None, vec![spec("done", "c", 0)]).unwrap();
    assert_eq!(state_of(&store, &again[0]), TaskState::Queued);
    assert_eq!(
        store.stats().unwrap().verdicts["correct"],
        1,
        "totals survive"
    );
}

fn reopen_loses_nothing(f: &Fixture) {
    let (queued, done) = {
        let store = f.open();
        let ids = store
            .submit(Some("keep"), vec![spec("a", "c", 0), spec("b", "c", 0)])
            .unwrap();
        let lease = claim(&store, "w").unwrap();
        assert!(store.complete(&lease, result("correct", &[])).unwrap());
        (ids[1].clone(), ids[0].clone())
    };
    // A new handle, as a restarted process opens it (the Redis server itself restarting is
    // `redis_restart`).
    let store = f.open();
    assert_eq!(state_of(&store, &done), TaskState::Done);
    assert_eq!(store.batch("keep").unwrap().len(), 2);
    let lease = claim(&store, "w").expect("the queued task survived");
    assert_eq!(lease.task_id, queued);
}

fn redis_server_restart_loses_nothing() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (queued, done) = {
        let store = Store::open(&server.url(0)).unwrap();
        let ids = store
            .submit(Some("keep"), vec![spec("a", "c", 0), spec("b", "c", 0)])
            .unwrap();
        let lease = claim(&store, "w").unwrap();
        assert!(store.complete(&lease, result("correct", &[])).unwrap());
        (ids[1].clone(), ids[0].clone())
    };
    server.restart();
    let store = Store::open(&server.url(0)).unwrap();
    assert_eq!(state_of(&store, &done), TaskState::Done);
    let lease = claim(&store, "w").expect("the queued task survived");
    assert_eq!(lease.task_id, queued);
    assert!(store.complete(&lease, result("correct", &[])).unwrap());
}

fn batch_of_10k(f: &Fixture) {
    let store = f.open();
    let specs: Vec<_> = (0..10_000)
        .map(|i| spec(&format!("t{i}"), &format!("client{}", i % 7), i % 3))
        .collect();
    let started = Instant::now();
    let ids = store.submit(Some("big"), specs).unwrap();
    let took = started.elapsed();
    eprintln!("{}: 10k submit in {took:?}", store.backend());
    assert_eq!(ids.len(), 10_000);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 10_000);
    assert!(took < Duration::from_secs(10), "{took:?}");
    let stats = store.stats().unwrap();
    assert_eq!(stats.queued, 10_000);
    assert_eq!(stats.queued_by_priority[&2], 3_333);
    assert_eq!(stats.queued_by_client["client0"], 1_429);
    let batch = store.batch("big").unwrap();
    assert_eq!(batch.len(), 10_000);
    assert_eq!(batch[0].id, ids[0]);
    assert_eq!(batch[9_999].id, ids[9_999]);
    assert_eq!(claim(&store, "w").unwrap().spec.priority, 2);
}

fn concurrent_claimers_never_share_a_task(f: &Fixture) {
    const TASKS: usize = 400;
    let store = f.open();
    let specs: Vec<_> = (0..TASKS)
        .map(|i| spec(&format!("t{i}"), &format!("c{}", i % 3), (i % 2) as i32))
        .collect();
    store.submit(None, specs).unwrap();
    // Four threads, each with its own store handle (its own connection, as separate processes
    // have), claim and complete until the queue is empty.
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let store = Arc::new(f.open());
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                while let Some(lease) = claim(&store, &format!("w{t}")) {
                    assert!(store.complete(&lease, result("correct", &[])).unwrap());
                    mine.push(lease.task_id);
                }
                mine
            })
        })
        .collect();
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.join().expect("claimer thread"));
    }
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), TASKS, "every task claimed once");
    assert_eq!(unique.len(), TASKS, "no task claimed twice");
    assert_eq!(store.stats().unwrap().done, TASKS as u64);
}

/// Workers that die (drop their lease) now and then, while a sweeper re-queues expired leases:
/// every task still ends with exactly one accepted `complete`.
fn exactly_once_under_dying_workers(f: &Fixture) {
    const TASKS: usize = 120;
    let config = StoreConfig {
        max_attempts: 1000,
        ..StoreConfig::default()
    };
    let store = f.open_with(config.clone());
    let specs: Vec<_> = (0..TASKS).map(|i| spec(&format!("t{i}"), "c", 0)).collect();
    let ids = store.submit(None, specs).unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeper = {
        let store = f.open_with(config.clone());
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                store.sweep(now_unix()).unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let store = f.open_with(config.clone());
            let ids = ids.clone();
            std::thread::spawn(move || {
                let mut accepted = Vec::new();
                let mut turn = 0usize;
                loop {
                    let Some(lease) = store
                        .claim(&worker(&format!("w{w}")), Duration::from_millis(40))
                        .unwrap()
                    else {
                        let records = store.tasks(&ids).unwrap();
                        if records.iter().all(|r| r.state.is_terminal()) {
                            return accepted;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    turn += 1;
                    if turn % 4 == w {
                        continue; // dies: never completes, never renews
                    }
                    if store.complete(&lease, result("correct", &[])).unwrap() {
                        accepted.push(lease.task_id);
                    }
                }
            })
        })
        .collect();
    let mut accepted = Vec::new();
    for worker in workers {
        accepted.extend(worker.join().expect("worker thread"));
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    sweeper.join().expect("sweeper thread");
    assert_eq!(accepted.len(), TASKS, "one accepted complete per task");
    assert_eq!(accepted.iter().collect::<HashSet<_>>().len(), TASKS);
    let stats = store.stats().unwrap();
    assert_eq!(
        (stats.done, stats.evaluations_completed),
        (TASKS as u64, TASKS as u64)
    );
    assert!(
        store.tasks(&ids).unwrap().iter().any(|r| r.attempts > 1),
        "some task was re-delivered (the test exercised expiry)"
    );
}

fn workers_heartbeats_and_restarts(f: &Fixture) {
    let store = f.open();
    let mut w = worker("host:cuda:0");
    w.current_task = Some("t1".into());
    w.stage = Some("timing".into());
    store.heartbeat(&w).unwrap();
    store.note_restart("host:cuda:0").unwrap();
    store.note_restart("host:cuda:0").unwrap();
    store.note_restart("host:cuda:1").unwrap();
    let workers = store.workers().unwrap();
    assert_eq!(workers.len(), 2);
    let first = workers.iter().find(|w| w.id == "host:cuda:0").unwrap();
    assert_eq!(first.restarts, 2);
    assert_eq!(first.stage.as_deref(), Some("timing"));
    assert!(first.last_seen > 0.0);
    assert_eq!(store.stats().unwrap().worker_restarts, 3);
}

fn heartbeats_carry_every_task_in_flight_with_its_stage(f: &Fixture) {
    let store = f.open();
    let mut w = worker("host:cuda:0");
    let in_flight = vec![
        TaskStage {
            task: "t1".into(),
            stage: Some("profile".into()),
        },
        TaskStage {
            task: "t2".into(),
            stage: Some("trial_3".into()),
        },
        TaskStage {
            task: "t3".into(),
            stage: None,
        },
    ];
    w.current_task = Some("t1".into());
    w.stage = Some("profile".into());
    w.in_flight = in_flight.clone();
    store.heartbeat(&w).unwrap();
    let seen = |store: &Store| {
        store
            .workers()
            .unwrap()
            .into_iter()
            .find(|s| s.id == "host:cuda:0")
            .expect("the worker")
    };
    let status = seen(&store);
    assert_eq!(status.in_flight, in_flight);
    assert_eq!(status.stage.as_deref(), Some("profile"));
    // The next heartbeat replaces the list: an idle worker shows none.
    w.current_task = None;
    w.stage = None;
    w.in_flight.clear();
    store.heartbeat(&w).unwrap();
    let status = seen(&store);
    assert!(status.in_flight.is_empty(), "{:?}", status.in_flight);
    assert_eq!(status.current_task, None);
    // A record written before the field existed still reads (as no task in flight).
    let old: WorkerInfo =
        serde_json::from_str(r#"{"id":"old","device":"cpu","gpu_model":null,"versions":"v"}"#)
            .unwrap();
    assert!(old.in_flight.is_empty());
}

fn stage_latencies_and_verdicts(f: &Fixture) {
    let store = f.open();
    store
        .submit(None, vec![spec("a", "c", 0), spec("b", "c", 0)])
        .unwrap();
    let l1 = claim(&store, "w").unwrap();
    let l2 = claim(&store, "w").unwrap();
    let r1 = result("correct", &[("verify", 0.25), ("timing", 1.0)]);
    let r2 = result("compile_error", &[("verify", 0.5)]);
    assert!(store.complete(&l1, r1).unwrap());
    assert!(store.complete(&l2, r2).unwrap());
    let stats = store.stats().unwrap();
    assert_eq!(stats.stages["verify"].count, 2);
    assert!((stats.stages["verify"].sum_s - 0.75).abs() < 1e-9);
    assert_eq!(stats.stages["timing"].count, 1);
    assert_eq!(stats.verdicts["correct"], 1);
    assert_eq!(stats.verdicts["compile_error"], 1);
    assert_eq!(stats.done, 2);
}

fn wait_terminal_returns_when_done(f: &Fixture) {
    let store = Arc::new(f.open());
    let ids = store.submit(None, vec![spec("a", "c", 0)]).unwrap();
    let timed = Instant::now();
    let records = store
        .wait_terminal(&ids, Duration::from_millis(100))
        .unwrap();
    assert_eq!(records[0].state, TaskState::Queued, "timed out waiting");
    assert!(timed.elapsed() >= Duration::from_millis(100));
    let worker_store = Arc::new(f.open());
    let finisher = std::thread::spawn(move || {
        let lease = claim(&worker_store, "w").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            worker_store
                .complete(&lease, result("correct", &[]))
                .unwrap()
        );
    });
    let records = store.wait_terminal(&ids, Duration::from_secs(10)).unwrap();
    assert_eq!(records[0].state, TaskState::Done);
    finisher.join().unwrap();
}

/// Set in a child process started by the multi-process tests: what to do, on which store.
const CHILD_ROLE: &str = "CRUCIBLE_QUEUE_TEST_ROLE";
const CHILD_URL: &str = "CRUCIBLE_QUEUE_TEST_URL";
const CHILD_OUT: &str = "CRUCIBLE_QUEUE_TEST_OUT";
/// The lease of the child that is killed: long enough that the parent sees it still held.
const CHILD_LEASE: Duration = Duration::from_millis(1500);

/// Starts this test binary again as a child running `child_entry` with a role.
fn spawn_child(role: &str, url: &str, out: &Path) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "child_entry",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ROLE, role)
        .env(CHILD_URL, url)
        .env(CHILD_OUT, out)
        .stdout(Stdio::null())
        .spawn()
        .expect("start child test process")
}

/// The child side of the multi-process tests (run only by `spawn_child`).
#[test]
#[ignore = "entry point of the child processes that the multi-process tests start"]
fn child_entry() {
    let role = std::env::var(CHILD_ROLE).expect("started by spawn_child");
    let store = Store::open(&std::env::var(CHILD_URL).unwrap()).unwrap();
    let out = std::env::var(CHILD_OUT).unwrap();
    let me = format!("pid{}", std::process::id());
    match role.as_str() {
        // Claims and completes until the queue is empty; writes the task ids it completed.
        "drain" => {
            // Start together: say we are ready, then wait for the parent's `go` file next to
            // our output.
            std::fs::write(format!("{out}.ready"), "").unwrap();
            let go = Path::new(&out).with_file_name("go");
            while !go.exists() {
                std::thread::sleep(Duration::from_millis(2));
            }
            let mut mine = Vec::new();
            while let Some(lease) = claim(&store, &me) {
                assert!(store.complete(&lease, result("correct", &[])).unwrap());
                if mine.is_empty() {
                    wait_for_every_sibling_claim(Path::new(&out), &go);
                }
                mine.push(lease.task_id);
            }
            std::fs::write(&out, mine.join("\n")).unwrap();
        }
        // Claims one task with a short lease, says which, and hangs until killed.
        "claim_and_hang" => {
            let lease = store.claim(&worker(&me), CHILD_LEASE).unwrap().unwrap();
            std::fs::write(&out, &lease.task_id).unwrap();
            std::thread::sleep(Duration::from_secs(600));
        }
        other => panic!("unknown role {other}"),
    }
}

/// Holds a draining child after its first task until every sibling has one too. SQLite's lock
/// is not fair: on a loaded machine one process could take every task while the other waits in
/// its busy handler, and the test would then prove nothing about two claimers at once.
fn wait_for_every_sibling_claim(out: &Path, go: &Path) {
    let mut first = out.as_os_str().to_owned();
    first.push(".first");
    std::fs::write(&first, "").unwrap();
    let siblings: usize = std::fs::read_to_string(go).unwrap().trim().parse().unwrap();
    let dir = out.parent().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let claimed = std::fs::read_dir(dir)
            .unwrap()
            .filter(|entry| {
                let entry = entry.as_ref().unwrap();
                entry.file_name().to_string_lossy().ends_with(".first")
            })
            .count();
        if claimed >= siblings {
            return;
        }
        assert!(Instant::now() < deadline, "a sibling never got a task");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn two_processes_never_claim_the_same_task(f: &Fixture) {
    const TASKS: usize = 300;
    let store = f.open();
    let specs: Vec<_> = (0..TASKS)
        .map(|i| spec(&format!("t{i}"), &format!("c{}", i % 3), (i % 2) as i32))
        .collect();
    let ids: HashSet<String> = store.submit(None, specs).unwrap().into_iter().collect();
    let dir = tempfile::tempdir().unwrap();
    let outs: Vec<_> = (0..2).map(|i| dir.path().join(format!("out{i}"))).collect();
    let children: Vec<_> = outs
        .iter()
        .map(|out| spawn_child("drain", &f.url(), out))
        .collect();
    // Both must have opened the store before either starts, or on a loaded machine one can
    // drain the queue before the other is up (a fixed pause was not enough on two busy cores).
    let ready = |out: &PathBuf| {
        let mut name = out.clone().into_os_string();
        name.push(".ready");
        PathBuf::from(name).exists()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !outs.iter().all(ready) {
        assert!(
            std::time::Instant::now() < deadline,
            "the children did not start"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Written whole, then renamed into place: a child that sees `go` reads the sibling count.
    let go_partial = dir.path().join("go.partial");
    std::fs::write(&go_partial, outs.len().to_string()).unwrap();
    std::fs::rename(&go_partial, dir.path().join("go")).unwrap();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "child failed");
    }
    let mut all = Vec::new();
    for out in &outs {
        let text = std::fs::read_to_string(out).unwrap();
        let mine: Vec<String> = text.lines().map(String::from).collect();
        assert!(!mine.is_empty(), "both processes got work");
        all.extend(mine);
    }
    assert_eq!(all.len(), TASKS, "every task completed once");
    assert_eq!(
        all.into_iter().collect::<HashSet<_>>(),
        ids,
        "no task twice"
    );
}

fn killed_worker_process_task_completes_once(f: &Fixture) {
    let store = f.open();
    let ids = store.submit(None, vec![spec("t", "c", 0)]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("claimed");
    let mut child = spawn_child("claim_and_hang", &f.url(), &out);
    let give_up = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&out).map_or(true, |t| t.is_empty()) {
        assert!(Instant::now() < give_up, "child never claimed");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap(), ids[0]);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(
        claim(&store, "survivor").is_none(),
        "the dead worker's lease still holds"
    );
    std::thread::sleep(CHILD_LEASE);
    assert_eq!(store.sweep(now_unix()).unwrap().requeued, 1);
    let lease = claim(&store, "survivor").expect("re-delivered");
    assert_eq!(
        (lease.task_id.as_str(), lease.attempt),
        (ids[0].as_str(), 2)
    );
    assert!(store.complete(&lease, result("correct", &[])).unwrap());
    assert!(claim(&store, "survivor").is_none());
    let stats = store.stats().unwrap();
    assert_eq!((stats.done, stats.evaluations_completed), (1, 1));
}

fn bad_urls_are_refused() {
    for url in ["postgres://x", "sqlite://", "queue.db"] {
        assert!(
            matches!(Store::open(url), Err(QueueError::BadUrl(_))),
            "{url}"
        );
    }
}

#[test]
fn unknown_urls() {
    bad_urls_are_refused();
}

#[test]
fn unreachable_redis_fails_at_open() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let url = format!("redis://127.0.0.1:{port}/0");
    let started = Instant::now();
    assert!(matches!(Store::open(&url), Err(QueueError::Redis(_))));
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn redis_restart() {
    redis_server_restart_loses_nothing();
}

/// Runs each named scenario against a fresh fixture of each backend.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() {
                if let Some(fixture) = super::Fixture::sqlite() { super::$name(&fixture) }
            } )*
        }
        mod redis {
            $( #[test] fn $name() {
                if let Some(fixture) = super::Fixture::redis() { super::$name(&fixture) }
            } )*
        }
    };
}

suite!(
    submit_claim_complete,
    priorities_and_fair_share,
    fewest_in_flight_first,
    lease_expiry_redelivers_and_refuses_stale_complete,
    claim_reclaims_expired_leases_by_itself,
    cancel,
    cancel_batch,
    deadline_gives_timeout_result,
    overdue_task_is_never_delivered,
    retries_end_in_infra_error,
    expired_leases_count_as_attempts,
    cache_hit_on_resubmit,
    claim_answers_from_cache_when_result_appeared,
    in_flight_duplicate_shares_one_evaluation,
    cancelled_leader_releases_its_duplicates,
    retention_drops_old_finished_tasks,
    reopen_loses_nothing,
    batch_of_10k,
    concurrent_claimers_never_share_a_task,
    workers_heartbeats_and_restarts,
    heartbeats_carry_every_task_in_flight_with_its_stage,
    stage_latencies_and_verdicts,
    wait_terminal_returns_when_done,
    two_processes_never_claim_the_same_task,
    killed_worker_process_task_completes_once,
    exactly_once_under_dying_workers,
);
