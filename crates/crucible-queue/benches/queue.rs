//! Store throughput with 100k queued tasks, on both backends: batch submits/s, single-task
//! submit latency (p50/p99), and claim+complete/s with the queue full against the same with a
//! small queue (so "no slowdown at 100k" is measured, not assumed), and one `stats()` call (what
//! `/metrics` costs) at 100k. Redis runs on a
//! redis-server this benchmark starts on a free loopback port (skipped when absent).
//!
//! Run: `cargo bench -p crucible-queue --bench queue` (or `--profile device` for a quicker build).

use std::cell::Cell;
use std::time::{Duration, Instant};

use crucible_queue::{Store, TaskSpec, WorkerInfo};
use crucible_testkit::{AppendFsync, RedisServer};

const QUEUED: usize = 100_000;
const BATCH: usize = 1_000;
const SINGLE_SUBMITS: usize = 2_000;
const CLAIMS: usize = 5_000;

/// A task of realistic size: a 1 KB task file and a 2 KB candidate, unique per index.
fn spec(i: usize) -> TaskSpec {
    let task = format!("# task {}\n{}", i % 50, "x = 1\n".repeat(170));
    let candidate = format!("# candidate {i}\n{}", "y = 2\n".repeat(340));
    let mut spec = TaskSpec::new(format!("task_{}", i % 50), task, candidate);
    spec.client = format!("client{}", i % 8);
    spec.priority = (i % 3) as i32;
    spec
}

fn worker() -> WorkerInfo {
    WorkerInfo {
        id: "bench".into(),
        device: "cpu".into(),
        versions: "bench-versions".into(),
        ..WorkerInfo::default()
    }
}

fn result(i: usize) -> serde_json::Value {
    serde_json::json!({"schema": "crucible.result/1", "verdict": "correct",
        "stages": [{"name": "verify", "status": "ok", "duration_s": 0.01 * i as f64}]})
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Submits `QUEUED` tasks in batches; returns tasks/s.
fn batch_submits(store: &Store) -> f64 {
    let started = Instant::now();
    for chunk in 0..QUEUED / BATCH {
        let specs = (0..BATCH).map(|j| spec(chunk * BATCH + j)).collect();
        store.submit(None, specs).expect("submit");
    }
    QUEUED as f64 / started.elapsed().as_secs_f64()
}

/// One task per call, on top of the full queue: (calls/s, p50, p99).
fn single_submits(store: &Store) -> (f64, Duration, Duration) {
    let mut latencies = Vec::with_capacity(SINGLE_SUBMITS);
    let started = Instant::now();
    for i in 0..SINGLE_SUBMITS {
        let call = Instant::now();
        store.submit(None, vec![spec(QUEUED + i)]).expect("submit");
        latencies.push(call.elapsed());
    }
    let rate = SINGLE_SUBMITS as f64 / started.elapsed().as_secs_f64();
    latencies.sort();
    (rate, quantile(&latencies, 0.5), quantile(&latencies, 0.99))
}

/// Claims and completes `CLAIMS` tasks; returns pairs/s.
fn claim_complete(store: &Store) -> f64 {
    let worker = worker();
    let started = Instant::now();
    for i in 0..CLAIMS {
        let lease = store
            .claim(&worker, Duration::from_secs(60))
            .expect("claim")
            .expect("a queued task");
        assert!(store.complete(&lease, result(i)).expect("complete"));
    }
    CLAIMS as f64 / started.elapsed().as_secs_f64()
}

fn run(name: &str, open: impl Fn() -> Store) {
    let store = open();
    let submit_rate = batch_submits(&store);
    let (single_rate, p50, p99) = single_submits(&store);
    let full = claim_complete(&store);
    let timed = Instant::now();
    let stats = store.stats().expect("stats");
    let stats_ms = timed.elapsed().as_secs_f64() * 1e3;
    let small = open_small(&open);
    println!(
        "{name:6}: batch submit {submit_rate:8.0} tasks/s | single submit {single_rate:6.0}/s \
         p50 {:.2} ms p99 {:.2} ms | claim+complete {full:6.0}/s with {} queued, {small:6.0}/s \
         with {} queued | stats() {stats_ms:.1} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        stats.queued + CLAIMS as u64,
        CLAIMS
    );
}

/// Claim+complete/s on a fresh store holding only `CLAIMS` tasks (the baseline).
fn open_small(open: &impl Fn() -> Store) -> f64 {
    let store = open();
    let specs = (0..CLAIMS).map(|i| spec(10_000_000 + i)).collect();
    store.submit(None, specs).expect("submit");
    claim_complete(&store)
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = Cell::new(0);
    run("sqlite", || {
        n.set(n.get() + 1);
        let path = dir.path().join(format!("bench{}.db", n.get()));
        Store::open(&format!("sqlite://{}", path.display())).expect("open sqlite")
    });
    if let Some(server) = RedisServer::start_with(AppendFsync::EverySec) {
        let db = Cell::new(0);
        run("redis", || {
            db.set(db.get() + 1);
            Store::open(&server.url(db.get())).expect("open redis")
        });
    }
}
