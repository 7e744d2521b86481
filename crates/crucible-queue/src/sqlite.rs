//! The SQLite backend: one file in WAL mode, shared by every process that opens it.
//!
//! `tasks` holds every task (rowid `seq` = submission order); `queue` holds only the claimable
//! ones, keyed (priority, client, seq), so that picking the next task is three index lookups
//! however many tasks wait. Every write runs in a `BEGIN IMMEDIATE` transaction: SQLite
//! serializes them across processes, which is what makes a claim and a complete atomic.

mod listing;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};

use crate::content::{
    cache_key, dedup_key, infra_error_result, is_cacheable, stages_of, timeout_result, verdict_of,
};
use crate::types::*;
use crate::{QueueError, Result, new_id, now_unix};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    batch TEXT,
    state TEXT NOT NULL,
    task_name TEXT NOT NULL,
    client TEXT NOT NULL,
    priority INTEGER NOT NULL,
    spec TEXT NOT NULL,
    labels TEXT NOT NULL,
    cache INTEGER NOT NULL,
    dedup_key TEXT,
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    deadline_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    token TEXT,
    lease_expires REAL,
    versions TEXT,
    cached INTEGER NOT NULL DEFAULT 0,
    shared_with TEXT,
    result TEXT
);
CREATE INDEX IF NOT EXISTS tasks_batch ON tasks(batch, seq) WHERE batch IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state, priority, client);
CREATE INDEX IF NOT EXISTS tasks_lease ON tasks(lease_expires) WHERE state = 'running';
-- Fair share counts each client's running tasks at every claim: this keeps that count to the
-- client's own entries instead of every running task's.
CREATE INDEX IF NOT EXISTS tasks_running_client ON tasks(client)
    WHERE state = 'running' AND shared_with IS NULL;
CREATE INDEX IF NOT EXISTS tasks_deadline ON tasks(deadline_at)
    WHERE deadline_at IS NOT NULL AND state IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS tasks_finished ON tasks(finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_dedup ON tasks(dedup_key)
    WHERE dedup_key IS NOT NULL AND shared_with IS NULL AND state IN ('queued', 'running');
CREATE INDEX IF NOT EXISTS tasks_followers ON tasks(shared_with) WHERE shared_with IS NOT NULL;
-- The dashboard's verdict counts of a time window, answered from the index alone.
CREATE INDEX IF NOT EXISTS tasks_finished_verdict ON tasks(finished_at, json_extract(result, '$.verdict'), state, cached, shared_with)
    WHERE finished_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS queue (
    priority INTEGER NOT NULL,
    client TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (priority, client, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS clients (client TEXT PRIMARY KEY, served INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, result TEXT NOT NULL, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS results_age ON results(created_at);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS workers (
    id TEXT PRIMARY KEY,
    info TEXT NOT NULL,
    versions TEXT NOT NULL,
    last_seen REAL NOT NULL,
    restarts INTEGER NOT NULL DEFAULT 0
);
";

const TASK_COLUMNS: &str = "id, batch, state, task_name, client, priority, submitted_at, \
    started_at, finished_at, attempts, worker, cached, shared_with, result, labels, deadline_at";

/// How often (seconds) `claim` itself looks for expired leases.
const RECLAIM_EVERY_S: f64 = 1.0;

/// The SQLite backend (see the module docs). Open it through [`crate::Store::open`].
pub struct SqliteStore {
    /// Every write goes through this one (SQLite admits one writer at a time anyway).
    conn: Mutex<Connection>,
    /// Reads use their own connection: in WAL mode they need not wait for a write (a 10k-task
    /// submit, say) in this process.
    reader: Mutex<Connection>,
    config: StoreConfig,
    last_reclaim: Mutex<f64>,
}

/// One connection to the database file, set up for sharing it with other processes.
fn connect(path: &str) -> Result<Connection> {
    let conn = Connection::open(path)?;
    // Several processes share the file: wait for a writer rather than fail at once.
    conn.busy_timeout(Duration::from_secs(30))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // WAL + NORMAL: a committed transaction survives a process crash (kill -9); only an OS
    // crash or power loss can lose the last transactions.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// The columns of a task that the state machine needs.
struct TaskRow {
    seq: i64,
    id: String,
    state: TaskState,
    client: String,
    priority: i32,
    spec: String,
    submitted_at: f64,
    started_at: Option<f64>,
    deadline_at: Option<f64>,
    attempts: u32,
    token: Option<String>,
    shared_with: Option<String>,
}

impl TaskRow {
    const COLUMNS: &str = "seq, id, state, client, priority, spec, submitted_at, started_at, \
        deadline_at, attempts, token, shared_with";

    fn from_row(row: &Row<'_>) -> rusqlite::Result<TaskRow> {
        let state: String = row.get(2)?;
        Ok(TaskRow {
            seq: row.get(0)?,
            id: row.get(1)?,
            state: parse_state(&state)?,
            client: row.get(3)?,
            priority: row.get(4)?,
            spec: row.get(5)?,
            submitted_at: row.get(6)?,
            started_at: row.get(7)?,
            deadline_at: row.get(8)?,
            attempts: row.get(9)?,
            token: row.get(10)?,
            shared_with: row.get(11)?,
        })
    }

    fn spec(&self) -> Result<TaskSpec> {
        Ok(serde_json::from_str(&self.spec)?)
    }
}

fn parse_state(text: &str) -> rusqlite::Result<TaskState> {
    TaskState::parse(text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            2,
            rusqlite::types::Type::Text,
            format!("unknown task state `{text}`").into(),
        )
    })
}

fn parse_json_column<T: serde::de::DeserializeOwned>(
    index: usize,
    text: &str,
) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, e.into())
    })
}

fn record_from_row(row: &Row<'_>) -> rusqlite::Result<TaskRecord> {
    let state: String = row.get(2)?;
    let result: Option<String> = row.get(13)?;
    let labels: String = row.get(14)?;
    Ok(TaskRecord {
        id: row.get(0)?,
        batch: row.get(1)?,
        state: parse_state(&state)?,
        task_name: row.get(3)?,
        client: row.get(4)?,
        priority: row.get(5)?,
        submitted_at: row.get(6)?,
        started_at: row.get(7)?,
        finished_at: row.get(8)?,
        attempts: row.get(9)?,
        worker: row.get(10)?,
        cached: row.get(11)?,
        shared_with: row.get(12)?,
        result: result
            .map(|text| parse_json_column(13, &text))
            .transpose()?,
        labels: parse_json_column(14, &labels)?,
        deadline_at: row.get(15)?,
    })
}

fn add_counter(tx: &Transaction<'_>, name: &str, by: f64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO counters(name, value) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
    )?
    .execute(params![name, by])?;
    Ok(())
}

/// Counts `count` results with this document's verdict.
fn count_verdict(tx: &Transaction<'_>, result: &serde_json::Value, count: u64) -> Result<()> {
    if count > 0 {
        let verdict = verdict_of(result).unwrap_or("unknown");
        add_counter(tx, &format!("verdict:{verdict}"), count as f64)?;
    }
    Ok(())
}

fn load_row(tx: &Transaction<'_>, id: &str) -> Result<Option<TaskRow>> {
    let sql = format!("SELECT {} FROM tasks WHERE id = ?1", TaskRow::COLUMNS);
    Ok(tx
        .prepare_cached(&sql)?
        .query_row([id], TaskRow::from_row)
        .optional()?)
}

fn load_row_by_seq(tx: &Transaction<'_>, seq: i64) -> Result<Option<TaskRow>> {
    let sql = format!("SELECT {} FROM tasks WHERE seq = ?1", TaskRow::COLUMNS);
    Ok(tx
        .prepare_cached(&sql)?
        .query_row([seq], TaskRow::from_row)
        .optional()?)
}

fn enqueue(tx: &Transaction<'_>, row: &TaskRow) -> Result<()> {
    tx.prepare_cached("INSERT OR IGNORE INTO queue(priority, client, seq) VALUES (?1, ?2, ?3)")?
        .execute(params![row.priority, row.client, row.seq])?;
    Ok(())
}

fn dequeue(tx: &Transaction<'_>, row: &TaskRow) -> Result<()> {
    tx.prepare_cached("DELETE FROM queue WHERE priority = ?1 AND client = ?2 AND seq = ?3")?
        .execute(params![row.priority, row.client, row.seq])?;
    Ok(())
}

/// Makes a task terminal. The caller has checked that it was not.
fn finish(
    tx: &Transaction<'_>,
    row: &TaskRow,
    state: TaskState,
    result: Option<&str>,
    now: f64,
) -> Result<()> {
    dequeue(tx, row)?;
    tx.prepare_cached(
        "UPDATE tasks SET state = ?2, result = ?3, finished_at = ?4, token = NULL,
         lease_expires = NULL WHERE seq = ?1",
    )?
    .execute(params![row.seq, state.as_str(), result, now])?;
    Ok(())
}

/// Cancels one task unless it is unknown or terminal; a leader's followers get a new leader.
fn cancel_one(tx: &Transaction<'_>, id: &str, now: f64) -> Result<bool> {
    let Some(row) = load_row(tx, id)? else {
        return Ok(false);
    };
    if row.state.is_terminal() {
        return Ok(false);
    }
    finish(tx, &row, TaskState::Cancelled, None, now)?;
    if row.shared_with.is_none() {
        release_followers(tx, &row.id)?;
    }
    Ok(true)
}

/// The followers of a leader that are still waiting on it, in submission order.
fn followers(tx: &Transaction<'_>, leader: &str) -> Result<Vec<TaskRow>> {
    let sql = format!(
        "SELECT {} FROM tasks WHERE shared_with = ?1 AND state IN ('queued', 'running') ORDER BY seq",
        TaskRow::COLUMNS
    );
    let rows = tx
        .prepare_cached(&sql)?
        .query_map([leader], TaskRow::from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Gives the leader's result to every task waiting on it.
fn fill_followers(
    tx: &Transaction<'_>,
    leader: &str,
    result: &serde_json::Value,
    text: &str,
    now: f64,
) -> Result<u64> {
    let waiting = followers(tx, leader)?;
    for follower in &waiting {
        finish(tx, follower, TaskState::Done, Some(text), now)?;
    }
    let count = waiting.len() as u64;
    if count > 0 {
        add_counter(tx, "duplicates_shared", count as f64)?;
        count_verdict(tx, result, count)?;
    }
    Ok(count)
}

/// The leader ended without a result to share: its first follower becomes a leader of its own
/// (back in the queue) and the others follow that one.
fn release_followers(tx: &Transaction<'_>, leader: &str) -> Result<()> {
    let waiting = followers(tx, leader)?;
    let Some(first) = waiting.first() else {
        return Ok(());
    };
    tx.prepare_cached(
        "UPDATE tasks SET shared_with = NULL, state = 'queued', started_at = NULL WHERE seq = ?1",
    )?
    .execute([first.seq])?;
    enqueue(tx, first)?;
    tx.prepare_cached("UPDATE tasks SET shared_with = ?2, state = 'queued' WHERE shared_with = ?1 AND state IN ('queued', 'running')")?
        .execute(params![leader, first.id])?;
    Ok(())
}

/// Followers mirror their leader's queued/running state.
fn mirror_followers(tx: &Transaction<'_>, leader: &str, state: TaskState, now: f64) -> Result<()> {
    tx.prepare_cached(
        "UPDATE tasks SET state = ?2, started_at = ?3
         WHERE shared_with = ?1 AND state IN ('queued', 'running')",
    )?
    .execute(params![leader, state.as_str(), now])?;
    Ok(())
}

impl SqliteStore {
    /// Opens (creating it and its directory if needed) the database at `path`.
    pub fn open(path: &str, config: StoreConfig) -> Result<SqliteStore> {
        if let Some(dir) = Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|source| QueueError::Io {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let conn = connect(path)?;
        conn.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} COMMIT;"))?;
        let reader = connect(path)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            reader: Mutex::new(reader),
            config,
            last_reclaim: Mutex::new(0.0),
        })
    }

    /// Runs `work` in one `BEGIN IMMEDIATE` transaction, committed when it returns `Ok`.
    fn write<T>(&self, work: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self
            .conn
            .lock()
            .map_err(|_| QueueError::Corrupt("a thread panicked holding the connection".into()))?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = work(&tx)?;
        tx.commit()?;
        Ok(value)
    }

    /// Runs read-only `work` in one read transaction (one consistent snapshot).
    fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut conn = self
            .reader
            .lock()
            .map_err(|_| QueueError::Corrupt("a thread panicked holding the connection".into()))?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
        let value = work(&tx)?;
        tx.finish()?;
        Ok(value)
    }

    fn live_versions(&self, tx: &Transaction<'_>, now: f64) -> Result<Vec<String>> {
        let since = now - self.config.worker_ttl.as_secs_f64();
        let versions = tx
            .prepare_cached("SELECT DISTINCT versions FROM workers WHERE last_seen >= ?1")?
            .query_map([since], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(versions)
    }

    /// See [`crate::Store::submit`].
    pub fn submit(&self, batch: Option<&str>, specs: Vec<TaskSpec>) -> Result<Vec<TaskId>> {
        let now = now_unix();
        self.write(|tx| {
            let versions = self.live_versions(tx, now)?;
            let mut leaders: HashMap<String, (String, TaskState)> = HashMap::new();
            specs
                .iter()
                .map(|spec| insert_task(tx, batch, spec, &versions, &mut leaders, now))
                .collect()
        })
    }

    /// See [`crate::Store::task`].
    pub fn task(&self, id: &str) -> Result<Option<TaskRecord>> {
        self.read(|conn| {
            let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1");
            Ok(conn
                .prepare_cached(&sql)?
                .query_row([id], record_from_row)
                .optional()?)
        })
    }

    /// See [`crate::Store::tasks`].
    pub fn tasks(&self, ids: &[TaskId]) -> Result<Vec<TaskRecord>> {
        self.read(|conn| {
            let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1");
            let mut statement = conn.prepare_cached(&sql)?;
            let mut records = Vec::with_capacity(ids.len());
            for id in ids {
                records.extend(statement.query_row([id], record_from_row).optional()?);
            }
            Ok(records)
        })
    }

    /// See [`crate::Store::batch`].
    pub fn batch(&self, id: &str) -> Result<Vec<TaskRecord>> {
        self.read(|conn| {
            let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE batch = ?1 ORDER BY seq");
            let records = conn
                .prepare_cached(&sql)?
                .query_map([id], record_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(records)
        })
    }

    /// See [`crate::Store::cancel`].
    pub fn cancel(&self, id: &str) -> Result<bool> {
        let now = now_unix();
        self.write(|tx| cancel_one(tx, id, now))
    }

    /// See [`crate::Store::cancel_batch`]. One transaction for the whole batch.
    pub fn cancel_batch(&self, id: &str) -> Result<u64> {
        let now = now_unix();
        self.write(|tx| {
            let ids = tx
                .prepare_cached(
                    "SELECT id FROM tasks WHERE batch = ?1 AND state IN ('queued', 'running')
                     ORDER BY seq",
                )?
                .query_map([id], |row| row.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut cancelled = 0;
            // One at a time, each read again: cancelling a leader hands its followers (some
            // of them perhaps later in this batch) to the first of them.
            for task in &ids {
                cancelled += u64::from(cancel_one(tx, task, now)?);
            }
            Ok(cancelled)
        })
    }

    /// See [`crate::Store::claim`].
    pub fn claim(&self, worker: &WorkerInfo, lease: Duration) -> Result<Option<Lease>> {
        let now = now_unix();
        self.reclaim_now_and_then(now)?;
        loop {
            let outcome = self.write(|tx| claim_one(tx, worker, lease, now))?;
            match outcome {
                Claimed::Lease(lease) => return Ok(Some(*lease)),
                Claimed::Empty => return Ok(None),
                Claimed::AnsweredWithoutWorker => continue,
            }
        }
    }

    fn reclaim_now_and_then(&self, now: f64) -> Result<()> {
        {
            let mut last = self
                .last_reclaim
                .lock()
                .map_err(|_| QueueError::Corrupt("reclaim clock poisoned".into()))?;
            if now - *last < RECLAIM_EVERY_S {
                return Ok(());
            }
            *last = now;
        }
        self.write(|tx| self.reclaim_expired(tx, now))?;
        Ok(())
    }

    /// See [`crate::Store::renew`].
    pub fn renew(&self, lease: &Lease, duration: Duration) -> Result<bool> {
        let expires = now_unix() + duration.as_secs_f64();
        self.write(|tx| {
            let changed = tx
                .prepare_cached(
                    "UPDATE tasks SET lease_expires = ?3
                     WHERE id = ?1 AND token = ?2 AND state = 'running'",
                )?
                .execute(params![lease.task_id, lease.token, expires])?;
            Ok(changed == 1)
        })
    }

    /// See [`crate::Store::complete`].
    pub fn complete(&self, lease: &Lease, result: serde_json::Value) -> Result<bool> {
        let now = now_unix();
        let text = serde_json::to_string(&result)?;
        self.write(|tx| {
            let Some(row) = load_row(tx, &lease.task_id)? else {
                return Ok(false);
            };
            if row.state != TaskState::Running || row.token.as_deref() != Some(&lease.token) {
                return Ok(false);
            }
            finish(tx, &row, TaskState::Done, Some(&text), now)?;
            add_counter(tx, "evaluations", 1.0)?;
            count_verdict(tx, &result, 1)?;
            for (stage, seconds) in stages_of(&result) {
                add_counter(tx, &format!("stage_sum:{stage}"), seconds)?;
                add_counter(tx, &format!("stage_count:{stage}"), 1.0)?;
            }
            if is_cacheable(&result) {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO results(key, result, created_at) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![
                    cache_key(&lease.spec, &lease.versions),
                    text,
                    now
                ])?;
            }
            if verdict_of(&result) == Some("infra_error") {
                release_followers(tx, &row.id)?;
            } else {
                fill_followers(tx, &row.id, &result, &text, now)?;
            }
            Ok(true)
        })
    }

    /// See [`crate::Store::retry`].
    pub fn retry(&self, lease: &Lease, reason: &str) -> Result<RetryOutcome> {
        let now = now_unix();
        self.write(|tx| {
            let Some(row) = load_row(tx, &lease.task_id)? else {
                return Ok(RetryOutcome::Refused);
            };
            if row.state != TaskState::Running || row.token.as_deref() != Some(&lease.token) {
                return Ok(RetryOutcome::Refused);
            }
            self.requeue_or_exhaust(tx, &row, reason, now)
        })
    }

    /// An attempt ended without a result: back to the queue, or `infra_error` when it was the
    /// last one allowed.
    fn requeue_or_exhaust(
        &self,
        tx: &Transaction<'_>,
        row: &TaskRow,
        reason: &str,
        now: f64,
    ) -> Result<RetryOutcome> {
        if row.attempts >= self.config.max_attempts {
            let spec = row.spec()?;
            let wall = now - row.started_at.unwrap_or(row.submitted_at);
            let result = infra_error_result(&spec, row.attempts, reason, wall);
            finish(tx, row, TaskState::Done, Some(&result.to_string()), now)?;
            count_verdict(tx, &result, 1)?;
            release_followers(tx, &row.id)?;
            return Ok(RetryOutcome::Exhausted);
        }
        tx.prepare_cached(
            "UPDATE tasks SET state = 'queued', token = NULL, lease_expires = NULL WHERE seq = ?1",
        )?
        .execute([row.seq])?;
        enqueue(tx, row)?;
        mirror_followers(tx, &row.id, TaskState::Queued, now)?;
        tracing::info!(task = %row.id, attempt = row.attempts, reason, "task re-queued");
        Ok(RetryOutcome::Requeued)
    }

    /// Re-queues (or exhausts) every running task whose lease expired before `now`.
    fn reclaim_expired(&self, tx: &Transaction<'_>, now: f64) -> Result<(u64, u64)> {
        let sql = format!(
            "SELECT {} FROM tasks WHERE state = 'running' AND lease_expires < ?1",
            TaskRow::COLUMNS
        );
        let expired = tx
            .prepare_cached(&sql)?
            .query_map([now], TaskRow::from_row)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let (mut requeued, mut exhausted) = (0, 0);
        for row in &expired {
            let reason = "the worker's lease expired (it died or stopped renewing)";
            match self.requeue_or_exhaust(tx, row, reason, now)? {
                RetryOutcome::Requeued => requeued += 1,
                RetryOutcome::Exhausted => exhausted += 1,
                RetryOutcome::Refused => {}
            }
        }
        Ok((requeued, exhausted))
    }

    /// See [`crate::Store::sweep`].
    pub fn sweep(&self, now: f64) -> Result<SweepReport> {
        let cutoff = now - self.config.retention.as_secs_f64();
        self.write(|tx| {
            let (requeued, exhausted) = self.reclaim_expired(tx, now)?;
            let timed_out = time_out_overdue(tx, now)?;
            let purged = tx
                .prepare_cached(
                    "DELETE FROM tasks WHERE finished_at IS NOT NULL AND finished_at < ?1",
                )?
                .execute([cutoff])? as u64;
            tx.prepare_cached("DELETE FROM results WHERE created_at < ?1")?
                .execute([cutoff])?;
            Ok(SweepReport {
                requeued,
                exhausted,
                timed_out,
                purged,
            })
        })
    }

    /// See [`crate::Store::heartbeat`].
    pub fn heartbeat(&self, worker: &WorkerInfo) -> Result<()> {
        let info = serde_json::to_string(worker)?;
        let now = now_unix();
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT INTO workers(id, info, versions, last_seen) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET info = excluded.info,
                 versions = excluded.versions, last_seen = excluded.last_seen",
            )?
            .execute(params![worker.id, info, worker.versions, now])?;
            Ok(())
        })
    }

    /// See [`crate::Store::workers`].
    pub fn workers(&self) -> Result<Vec<WorkerStatus>> {
        self.read(|conn| {
            let mut statement =
                conn.prepare_cached("SELECT info, last_seen, restarts FROM workers ORDER BY id")?;
            let rows = statement
                .query_map([], |r| {
                    let info: String = r.get(0)?;
                    let info: WorkerInfo = parse_json_column(0, &info)?;
                    Ok(WorkerStatus {
                        id: info.id,
                        device: info.device,
                        gpu_model: info.gpu_model,
                        versions: info.versions,
                        current_task: info.current_task,
                        stage: info.stage,
                        in_flight: info.in_flight,
                        last_seen: r.get(1)?,
                        restarts: r.get(2)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
    }

    /// See [`crate::Store::note_restart`].
    pub fn note_restart(&self, worker_id: &str) -> Result<()> {
        let info = serde_json::to_string(&WorkerInfo {
            id: worker_id.to_string(),
            ..WorkerInfo::default()
        })?;
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT INTO workers(id, info, versions, last_seen, restarts)
                 VALUES (?1, ?2, '', 0, 1)
                 ON CONFLICT(id) DO UPDATE SET restarts = restarts + 1",
            )?
            .execute(params![worker_id, info])?;
            Ok(())
        })
    }

    /// See [`crate::Store::stats`].
    pub fn stats(&self) -> Result<QueueStats> {
        self.read(|conn| {
            let mut stats = QueueStats::default();
            state_counts(conn, &mut stats)?;
            counter_totals(conn, &mut stats)?;
            stats.worker_restarts = conn
                .prepare_cached("SELECT COALESCE(SUM(restarts), 0) FROM workers")?
                .query_row([], |r| r.get(0))?;
            Ok(stats)
        })
    }
}

/// What one claim transaction did.
enum Claimed {
    Lease(Box<Lease>),
    /// Nothing claimable.
    Empty,
    /// The task it took ended without a worker (cached result, or its deadline passed): try again.
    AnsweredWithoutWorker,
}

fn claim_one(
    tx: &Transaction<'_>,
    worker: &WorkerInfo,
    lease: Duration,
    now: f64,
) -> Result<Claimed> {
    let Some(seq) = pick_next(tx)? else {
        return Ok(Claimed::Empty);
    };
    let Some(row) = load_row_by_seq(tx, seq)? else {
        return Err(QueueError::Corrupt(format!("queued seq {seq} has no task")));
    };
    dequeue(tx, &row)?;
    let spec = row.spec()?;
    if row.deadline_at.is_some_and(|d| d <= now) {
        time_out(tx, &row, &spec, now)?;
        return Ok(Claimed::AnsweredWithoutWorker);
    }
    if spec.cache && answer_from_cache(tx, &row, &spec, &worker.versions, now)? {
        return Ok(Claimed::AnsweredWithoutWorker);
    }
    let token = new_id();
    let attempt = row.attempts + 1;
    let expires_at = now + lease.as_secs_f64();
    tx.prepare_cached(
        "UPDATE tasks SET state = 'running', started_at = ?2, attempts = ?3, worker = ?4,
         token = ?5, lease_expires = ?6, versions = ?7 WHERE seq = ?1",
    )?
    .execute(params![
        row.seq,
        now,
        attempt,
        worker.id,
        token,
        expires_at,
        worker.versions
    ])?;
    tx.prepare_cached(
        "INSERT INTO clients(client, served) VALUES (?1, (SELECT COALESCE(MAX(served), 0) + 1 FROM clients))
         ON CONFLICT(client) DO UPDATE SET served = excluded.served",
    )?
    .execute([&row.client])?;
    mirror_followers(tx, &row.id, TaskState::Running, now)?;
    Ok(Claimed::Lease(Box::new(Lease {
        task_id: row.id,
        token,
        attempt,
        spec,
        expires_at,
        worker: worker.id.clone(),
        versions: worker.versions.clone(),
        deadline_at: row.deadline_at,
    })))
}

/// Each client with a task queued at priority ?1: how recently it was served and how many of its
/// tasks are running. A skip scan over the queue's (priority, client, seq) key, one index probe
/// per distinct client; the running count reads `tasks_running_client`, the client's own running
/// tasks.
const FAIR_SHARE_CLIENTS: &str = "WITH RECURSIVE c(client) AS (
        SELECT (SELECT MIN(client) FROM queue WHERE priority = ?1)
        UNION ALL
        SELECT (SELECT MIN(client) FROM queue WHERE priority = ?1 AND client > c.client)
        FROM c WHERE c.client IS NOT NULL)
     SELECT c.client, COALESCE(s.served, 0),
            (SELECT COUNT(*) FROM tasks t WHERE t.state = 'running' AND t.client = c.client
             AND t.shared_with IS NULL)
     FROM c LEFT JOIN clients s ON s.client = c.client WHERE c.client IS NOT NULL";

/// The next claimable task's seq: highest priority; among its clients the fewest running, then
/// the least recently served; that client's oldest.
fn pick_next(tx: &Transaction<'_>) -> Result<Option<i64>> {
    let priority: Option<i32> = tx
        .prepare_cached("SELECT MAX(priority) FROM queue")?
        .query_row([], |r| r.get(0))?;
    let Some(priority) = priority else {
        return Ok(None);
    };
    let clients = tx
        .prepare_cached(FAIR_SHARE_CLIENTS)?
        .query_map([priority], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let Some((client, _, _)) = clients
        .into_iter()
        .min_by_key(|(client, served, running)| (*running, *served, client.clone()))
    else {
        return Ok(None);
    };
    let seq = tx
        .prepare_cached(
            "SELECT seq FROM queue WHERE priority = ?1 AND client = ?2 ORDER BY seq LIMIT 1",
        )?
        .query_row(params![priority, client], |r| r.get(0))
        .optional()?;
    Ok(seq)
}

/// Completes a task from the result cache if its result is there under these versions.
fn answer_from_cache(
    tx: &Transaction<'_>,
    row: &TaskRow,
    spec: &TaskSpec,
    versions: &str,
    now: f64,
) -> Result<bool> {
    let cached: Option<String> = tx
        .prepare_cached("SELECT result FROM results WHERE key = ?1")?
        .query_row([cache_key(spec, versions)], |r| r.get(0))
        .optional()?;
    let Some(text) = cached else {
        return Ok(false);
    };
    let result: serde_json::Value = serde_json::from_str(&text)?;
    finish(tx, row, TaskState::Done, Some(&text), now)?;
    tx.prepare_cached("UPDATE tasks SET cached = 1 WHERE seq = ?1")?
        .execute([row.seq])?;
    add_counter(tx, "cache_hits", 1.0)?;
    count_verdict(tx, &result, 1)?;
    fill_followers(tx, &row.id, &result, &text, now)?;
    Ok(true)
}

/// Ends a task `timeout` with its result document.
fn time_out(tx: &Transaction<'_>, row: &TaskRow, spec: &TaskSpec, now: f64) -> Result<()> {
    let result = timeout_result(
        spec,
        now - row.submitted_at,
        row.state == TaskState::Running,
    );
    finish(tx, row, TaskState::Timeout, Some(&result.to_string()), now)?;
    count_verdict(tx, &result, 1)?;
    if row.shared_with.is_none() {
        release_followers(tx, &row.id)?;
    }
    Ok(())
}

/// Times out every unfinished task whose deadline passed.
fn time_out_overdue(tx: &Transaction<'_>, now: f64) -> Result<u64> {
    let sql = format!(
        "SELECT {} FROM tasks WHERE deadline_at IS NOT NULL AND state IN ('queued', 'running')
         AND deadline_at <= ?1",
        TaskRow::COLUMNS
    );
    let overdue = tx
        .prepare_cached(&sql)?
        .query_map([now], TaskRow::from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut count = 0;
    for listed in overdue {
        // An earlier iteration may have released or ended this one: act on its state now.
        let Some(row) = load_row_by_seq(tx, listed.seq)? else {
            continue;
        };
        if row.state.is_terminal() {
            continue;
        }
        time_out(tx, &row, &row.spec()?, now)?;
        count += 1;
    }
    Ok(count)
}

/// Inserts one submitted task: answered from the cache, following an identical task in flight,
/// or queued.
fn insert_task(
    tx: &Transaction<'_>,
    batch: Option<&str>,
    spec: &TaskSpec,
    versions: &[String],
    leaders: &mut HashMap<String, (String, TaskState)>,
    now: f64,
) -> Result<TaskId> {
    let id = new_id();
    let spec_text = serde_json::to_string(spec)?;
    let labels = serde_json::to_string(&spec.labels)?;
    let deadline_at = spec.deadline_s.map(|d| now + d.max(0.0));
    let dedup = spec.cache.then(|| dedup_key(spec));
    tx.prepare_cached(
        "INSERT INTO tasks(id, batch, state, task_name, client, priority, spec, labels, cache,
         dedup_key, submitted_at, deadline_at) VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        id,
        batch,
        spec.task_name,
        spec.client,
        spec.priority,
        spec_text,
        labels,
        spec.cache,
        dedup,
        now,
        deadline_at
    ])?;
    let row = load_row_by_seq(tx, tx.last_insert_rowid())?
        .ok_or_else(|| QueueError::Corrupt("inserted task vanished".into()))?;
    let Some(dedup) = dedup else {
        enqueue(tx, &row)?;
        return Ok(id);
    };
    for version in versions {
        if answer_from_cache(tx, &row, spec, version, now)? {
            return Ok(id);
        }
    }
    if let Some((leader, state)) = find_leader(tx, &dedup, row.seq, leaders)? {
        tx.prepare_cached("UPDATE tasks SET shared_with = ?2, state = ?3 WHERE seq = ?1")?
            .execute(params![row.seq, leader, state.as_str()])?;
        return Ok(id);
    }
    leaders.insert(dedup, (id.clone(), TaskState::Queued));
    enqueue(tx, &row)?;
    Ok(id)
}

/// An unfinished task with this content that leads its duplicates.
fn find_leader(
    tx: &Transaction<'_>,
    dedup: &str,
    own_seq: i64,
    leaders: &HashMap<String, (String, TaskState)>,
) -> Result<Option<(String, TaskState)>> {
    if let Some(found) = leaders.get(dedup) {
        return Ok(Some(found.clone()));
    }
    let found = tx
        .prepare_cached(
            "SELECT id, state FROM tasks WHERE dedup_key = ?1 AND shared_with IS NULL
             AND state IN ('queued', 'running') AND seq <> ?2 ORDER BY seq LIMIT 1",
        )?
        .query_row(params![dedup, own_seq], |r| {
            let state: String = r.get(1)?;
            Ok((r.get::<_, String>(0)?, parse_state(&state)?))
        })
        .optional()?;
    Ok(found)
}

fn state_counts(conn: &Connection, stats: &mut QueueStats) -> Result<()> {
    let mut statement = conn.prepare_cached("SELECT state, COUNT(*) FROM tasks GROUP BY state")?;
    let rows = statement.query_map([], |r| {
        let state: String = r.get(0)?;
        Ok((parse_state(&state)?, r.get::<_, u64>(1)?))
    })?;
    for row in rows {
        let (state, count) = row?;
        match state {
            TaskState::Queued => stats.queued += count,
            TaskState::Running => stats.running += count,
            TaskState::Done => stats.done += count,
            TaskState::Cancelled => stats.cancelled += count,
            TaskState::Timeout => stats.timeout += count,
        }
    }
    let mut statement = conn
        .prepare_cached("SELECT priority, client, COUNT(*) FROM queue GROUP BY priority, client")?;
    let rows = statement.query_map([], |r| {
        Ok((
            r.get::<_, i32>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, u64>(2)?,
        ))
    })?;
    for row in rows {
        let (priority, client, count) = row?;
        *stats.queued_by_priority.entry(priority).or_default() += count;
        *stats.queued_by_client.entry(client).or_default() += count;
    }
    Ok(())
}

fn counter_totals(conn: &Connection, stats: &mut QueueStats) -> Result<()> {
    let mut statement = conn.prepare_cached("SELECT name, value FROM counters")?;
    let rows = statement.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?)))?;
    for row in rows {
        let (name, value) = row?;
        apply_counter(stats, &name, value);
    }
    Ok(())
}

/// Adds one stored counter (`verdict:correct`, `stage_sum:timing`, ...) to the stats.
pub(crate) fn apply_counter(stats: &mut QueueStats, name: &str, value: f64) {
    let count = value.max(0.0).round() as u64;
    if let Some(verdict) = name.strip_prefix("verdict:") {
        *stats.verdicts.entry(verdict.to_string()).or_default() += count;
    } else if let Some(stage) = name.strip_prefix("stage_sum:") {
        stats.stages.entry(stage.to_string()).or_default().sum_s += value;
    } else if let Some(stage) = name.strip_prefix("stage_count:") {
        stats.stages.entry(stage.to_string()).or_default().count += count;
    } else {
        match name {
            "cache_hits" => stats.cache_hits += count,
            "duplicates_shared" => stats.duplicates_shared += count,
            "evaluations" => stats.evaluations_completed += count,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every claim counts each waiting client's running tasks; without the partial index that
    /// count walked every running task (1,000 running made a claim 4-15 times slower in
    /// `crucible bench-load`).
    #[test]
    fn fair_share_counts_running_tasks_through_their_own_index() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("q.db");
        let store =
            SqliteStore::open(&path.display().to_string(), StoreConfig::default()).expect("store");
        let conn = store.conn.lock().expect("connection");
        let plan = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {FAIR_SHARE_CLIENTS}"))
            .expect("plan")
            .query_map([0], |r| r.get::<_, String>(3))
            .expect("rows")
            .collect::<rusqlite::Result<Vec<_>>>()
            .expect("details");
        assert!(
            plan.iter().any(|d| d.contains("tasks_running_client")),
            "the running count does not use tasks_running_client: {plan:#?}"
        );
    }
}
