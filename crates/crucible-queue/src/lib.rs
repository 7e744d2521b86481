//! The durable task queue and result store of the Crucible service.
//!
//! One blocking API over two backends, chosen by URL:
//! - `sqlite:///abs/path.db` or `sqlite://relative.db`: one SQLite file in WAL mode, the embedded
//!   default. Several processes (the API server and its `crucible worker` children) may open the
//!   same file at once.
//! - `redis://host:port/db`: Redis Streams with a consumer group, for scale-out; API servers
//!   hold no state of their own.
//!
//! Both give the same guarantees: a task is completed exactly once (a stale lease's `complete`
//! is refused; a dead worker's task is re-delivered once its lease expires), deadlines end in a
//! `timeout` result, infrastructure faults are retried up to `max_attempts` and then end in an
//! `infra_error` result, and nothing queued or finished is lost when a process restarts.
//!
//! A [`Store`] is `Send + Sync`: share one behind an `Arc` and call it from blocking threads.

mod content;
mod listing;
mod redis_lua;
mod redis_store;
mod sqlite;
mod types;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use content::{cache_key, dedup_key, infra_error_result, not_judged_result, timeout_result};
pub use listing::{FindingSummary, FinishedCounts, Listing, TaskSummary};
pub use redis_store::RedisStore;
pub use sqlite::SqliteStore;
pub use types::*;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The URL names no backend this crate knows.
    #[error(
        "unsupported queue URL `{0}`: expected sqlite:///path.db, sqlite://path.db or redis://host:port/db"
    )]
    BadUrl(String),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("stored JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The stored data contradicts itself (e.g. an unknown state string).
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// The backend cannot do this operation.
    #[error("not supported by this backend: {0}")]
    Unsupported(&'static str),
    #[error("creating the store's directory {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = QueueError> = std::result::Result<T, E>;

/// The queue and result store, on one of its backends.
// One store per process, behind an Arc: the variants' size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Store {
    Sqlite(SqliteStore),
    Redis(RedisStore),
}

/// Calls the same method on whichever backend the store is.
macro_rules! dispatch {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            Store::Sqlite($store) => $call,
            Store::Redis($store) => $call,
        }
    };
}

impl Store {
    /// Opens (creating if needed) the store a URL names, with the default configuration.
    pub fn open(url: &str) -> Result<Store> {
        Store::open_with(url, StoreConfig::default())
    }

    /// Opens (creating if needed) the store a URL names.
    pub fn open_with(url: &str, config: StoreConfig) -> Result<Store> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(QueueError::BadUrl(url.to_string()));
            }
            return Ok(Store::Sqlite(SqliteStore::open(path, config)?));
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            return Ok(Store::Redis(RedisStore::open(url, config)?));
        }
        Err(QueueError::BadUrl(url.to_string()))
    }

    /// `sqlite` or `redis`.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "sqlite",
            Store::Redis(_) => "redis",
        }
    }

    /// Enqueues tasks (all in one transaction / pipeline) and returns their ids in order. A task
    /// whose result is cached under a live worker's versions is `done` at once (`cached`); one
    /// identical to a task in flight follows it (`shared_with`).
    pub fn submit(&self, batch: Option<&str>, specs: Vec<TaskSpec>) -> Result<Vec<TaskId>> {
        dispatch!(self, s => s.submit(batch, specs))
    }

    /// One task, if the store still holds it.
    pub fn task(&self, id: &str) -> Result<Option<TaskRecord>> {
        dispatch!(self, s => s.task(id))
    }

    /// Several tasks in one round trip (one snapshot on SQLite, one pipeline on Redis), in the
    /// order asked; unknown ids are left out.
    pub fn tasks(&self, ids: &[TaskId]) -> Result<Vec<TaskRecord>> {
        dispatch!(self, s => s.tasks(ids))
    }

    /// The tasks of a batch, in submission order.
    pub fn batch(&self, id: &str) -> Result<Vec<TaskRecord>> {
        dispatch!(self, s => s.batch(id))
    }

    /// Cancels a queued or running task. False when it is unknown or already terminal. A
    /// running task's worker has its `complete` refused.
    pub fn cancel(&self, id: &str) -> Result<bool> {
        dispatch!(self, s => s.cancel(id))
    }

    /// Cancels every queued or running task of a batch, as [`Store::cancel`] does each, in
    /// submission order; returns how many. Terminal tasks stay as they are; a cancelled
    /// leader's duplicates in other batches get a new leader. 0 for an unknown batch.
    pub fn cancel_batch(&self, id: &str) -> Result<u64> {
        dispatch!(self, s => s.cancel_batch(id))
    }

    /// Takes the next task for a worker: highest priority first; among the clients of that
    /// priority the one with the fewest tasks running, then the one served least recently;
    /// that client's oldest task. Also re-queues tasks whose lease expired (at most once a
    /// second per store handle) and answers tasks from the cache when their result appeared
    /// meanwhile.
    pub fn claim(&self, worker: &WorkerInfo, lease: Duration) -> Result<Option<Lease>> {
        dispatch!(self, s => s.claim(worker, lease))
    }

    /// Extends a lease. False when it is stale (the task was re-delivered, cancelled or ended).
    pub fn renew(&self, lease: &Lease, duration: Duration) -> Result<bool> {
        dispatch!(self, s => s.renew(lease, duration))
    }

    /// Stores a task's result, exactly once: false when the lease is stale or the task already
    /// terminal. Fills every in-flight duplicate sharing the task and caches the result by
    /// content (unless it is an `infra_error` or `timeout`).
    pub fn complete(&self, lease: &Lease, result: serde_json::Value) -> Result<bool> {
        dispatch!(self, s => s.complete(lease, result))
    }

    /// An infrastructure fault (never the candidate's): the task goes back to the queue, or after
    /// `max_attempts` deliveries ends `done` with an `infra_error` result.
    pub fn retry(&self, lease: &Lease, reason: &str) -> Result<RetryOutcome> {
        dispatch!(self, s => s.retry(lease, reason))
    }

    /// Housekeeping at time `now` (unix seconds): re-queues expired leases (dead workers), times
    /// out tasks past their deadline, deletes finished tasks and cached results older than the
    /// retention period.
    pub fn sweep(&self, now: f64) -> Result<SweepReport> {
        dispatch!(self, s => s.sweep(now))
    }

    /// Records that a worker is alive (and what it is doing, and its versions string).
    pub fn heartbeat(&self, worker: &WorkerInfo) -> Result<()> {
        dispatch!(self, s => s.heartbeat(worker))
    }

    /// Every worker that ever sent a heartbeat, by id.
    pub fn workers(&self) -> Result<Vec<WorkerStatus>> {
        dispatch!(self, s => s.workers())
    }

    /// Counts one restart of a worker (by its supervisor).
    pub fn note_restart(&self, worker_id: &str) -> Result<()> {
        dispatch!(self, s => s.note_restart(worker_id))
    }

    /// Queue depth, state counts, verdicts, cache hits, shared duplicates, stage latencies.
    pub fn stats(&self) -> Result<QueueStats> {
        dispatch!(self, s => s.stats())
    }

    /// Waits (polling) until every listed task is terminal or unknown, or `timeout` passes;
    /// returns the records found at the end, in the order asked.
    pub fn wait_terminal(&self, ids: &[TaskId], timeout: Duration) -> Result<Vec<TaskRecord>> {
        let give_up = std::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(5);
        loop {
            let records = self.tasks(ids)?;
            let all_done = records.iter().all(|r| r.state.is_terminal());
            if all_done || std::time::Instant::now() >= give_up {
                return Ok(records);
            }
            std::thread::sleep(pause.min(give_up - std::time::Instant::now()));
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }
}

/// Unix seconds now.
pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A fresh UUID v7 string (task ids, batch ids, lease tokens).
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
