//! The Redis backend: Redis Streams with a consumer group, task and result records in hashes.
//! The data layout and every state change are in `redis_lua.rs`; this side computes what Lua
//! cannot (sha256 content keys, result documents) and reads records back.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redis::{Connection, ConnectionLike, Value};

use crate::content::{
    cache_key, dedup_key, infra_error_result, is_cacheable, stages_of, timeout_result, verdict_of,
};
use crate::redis_lua::Scripts;
use crate::sqlite::apply_counter;
use crate::types::*;
use crate::{QueueError, Result, new_id, now_unix};

/// Tasks per submit script call: big enough to amortize the call, small enough that one call
/// never holds Redis for long.
const SUBMIT_CHUNK: usize = 500;
/// Tasks a batch cancel ends in one script.
const CANCEL_SLICE: usize = 500;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for one reply (a 10k-task submit pipeline takes about a second).
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How often (seconds) `claim` itself looks for expired leases.
const RECLAIM_EVERY_S: f64 = 1.0;
/// Pending entries idle this long are checked for orphans (their task no longer runs on them).
const ORPHAN_IDLE_MS: u64 = 10 * 60 * 1000;
/// How often (seconds) `sweep` looks for orphans.
const ORPHAN_CHECK_EVERY_S: f64 = 60.0;

/// The fields `TaskRecord` is read from, in this order.
const RECORD_FIELDS: [&str; 16] = [
    "id",
    "batch",
    "state",
    "task_name",
    "client",
    "priority",
    "submitted_at",
    "started_at",
    "finished_at",
    "attempts",
    "worker",
    "cached",
    "shared_with",
    "result",
    "labels",
    "deadline_at",
];

/// The Redis backend (see the module docs). Open it through [`crate::Store::open`].
pub struct RedisStore {
    client: redis::Client,
    /// Idle connections; a call takes one (or opens one) and gives it back.
    pool: Mutex<Vec<Connection>>,
    scripts: Scripts,
    config: StoreConfig,
    last_reclaim: Mutex<f64>,
    /// When this handle last looked for orphaned pending entries (one XAUTOCLAIM per stream).
    last_orphan_check: Mutex<f64>,
}

/// A pooled connection, returned to the pool when dropped.
struct Pooled<'a> {
    store: &'a RedisStore,
    con: Option<Connection>,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.con.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.con.as_mut().expect("present until drop")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let (Some(con), Ok(mut pool)) = (self.con.take(), self.store.pool.lock())
            && con.is_open()
        {
            pool.push(con);
        }
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
    .filter(|s| !s.is_empty())
}

fn number<T: std::str::FromStr>(value: Option<&Value>) -> Option<T> {
    text(value)?.parse().ok()
}

fn record_from_fields(values: &[Value]) -> Result<Option<TaskRecord>> {
    let at = |i: usize| values.get(i);
    let Some(id) = text(at(0)) else {
        return Ok(None);
    };
    let state_text = text(at(2)).unwrap_or_default();
    let state = TaskState::parse(&state_text)
        .ok_or_else(|| QueueError::Corrupt(format!("task {id} has state `{state_text}`")))?;
    let result = text(at(13)).map(|t| serde_json::from_str(&t)).transpose()?;
    let labels = match text(at(14)) {
        Some(t) => serde_json::from_str(&t)?,
        None => serde_json::Map::new(),
    };
    Ok(Some(TaskRecord {
        id,
        batch: text(at(1)),
        state,
        task_name: text(at(3)).unwrap_or_default(),
        client: text(at(4)).unwrap_or_default(),
        priority: number(at(5)).unwrap_or(0),
        submitted_at: number(at(6)).unwrap_or(0.0),
        started_at: number(at(7)),
        finished_at: number(at(8)),
        attempts: number(at(9)).unwrap_or(0),
        worker: text(at(10)),
        cached: text(at(11)).as_deref() == Some("1"),
        shared_with: text(at(12)),
        result,
        labels,
        deadline_at: number(at(15)),
    }))
}

impl RedisStore {
    /// Connects to the Redis a `redis://host:port/db` URL names.
    pub fn open(url: &str, config: StoreConfig) -> Result<RedisStore> {
        let client = redis::Client::open(url)?;
        let store = RedisStore {
            client,
            pool: Mutex::new(Vec::new()),
            scripts: Scripts::new(),
            config,
            last_reclaim: Mutex::new(0.0),
            last_orphan_check: Mutex::new(0.0),
        };
        // Fail at open, not at the first request, when the server is unreachable.
        let mut con = store.con()?;
        redis::cmd("PING").query::<String>(&mut *con)?;
        drop(con);
        Ok(store)
    }

    fn con(&self) -> Result<Pooled<'_>> {
        let idle = self.pool.lock().ok().and_then(|mut pool| pool.pop());
        let con = match idle {
            Some(con) => con,
            None => {
                // A Redis that went away must fail the call, not hang the caller's thread.
                let con = self.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
                con.set_read_timeout(Some(IO_TIMEOUT))?;
                con.set_write_timeout(Some(IO_TIMEOUT))?;
                con
            }
        };
        Ok(Pooled {
            store: self,
            con: Some(con),
        })
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.config.redis_prefix)
    }

    fn prefix(&self) -> &str {
        &self.config.redis_prefix
    }

    fn live_versions(&self, con: &mut Connection, now: f64) -> Result<Vec<String>> {
        let seen: HashMap<String, f64> = redis::cmd("HGETALL")
            .arg(self.key("worker_seen"))
            .query(con)?;
        let since = now - self.config.worker_ttl.as_secs_f64();
        let live: Vec<&String> = seen
            .iter()
            .filter(|(_, at)| **at >= since)
            .map(|(id, _)| id)
            .collect();
        if live.is_empty() {
            return Ok(Vec::new());
        }
        let infos: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.key("workers"))
            .arg(&live)
            .query(con)?;
        let mut versions: Vec<String> = infos
            .into_iter()
            .flatten()
            .filter_map(|json| serde_json::from_str::<WorkerInfo>(&json).ok())
            .map(|info| info.versions)
            .collect();
        versions.sort();
        versions.dedup();
        Ok(versions)
    }

    /// See [`crate::Store::submit`].
    pub fn submit(&self, batch: Option<&str>, specs: Vec<TaskSpec>) -> Result<Vec<TaskId>> {
        let now = now_unix();
        let mut con = self.con()?;
        let versions = self.live_versions(&mut con, now)?;
        let ids: Vec<TaskId> = specs.iter().map(|_| new_id()).collect();
        let mut pipe = redis::pipe();
        for (chunk_specs, chunk_ids) in specs.chunks(SUBMIT_CHUNK).zip(ids.chunks(SUBMIT_CHUNK)) {
            let call = pipe
                .cmd("EVALSHA")
                .arg(self.scripts.submit.get_hash())
                .arg(0)
                .arg(self.prefix())
                .arg(now)
                .arg(batch.unwrap_or(""));
            for (spec, id) in chunk_specs.iter().zip(chunk_ids) {
                let keys: Vec<String> = if spec.cache {
                    versions.iter().map(|v| cache_key(spec, v)).collect()
                } else {
                    Vec::new()
                };
                call.arg(id)
                    .arg(&spec.task_name)
                    .arg(&spec.client)
                    .arg(spec.priority)
                    .arg(serde_json::to_string(spec)?)
                    .arg(serde_json::to_string(&spec.labels)?)
                    .arg(if spec.cache {
                        dedup_key(spec)
                    } else {
                        String::new()
                    })
                    .arg(
                        spec.deadline_s
                            .map(|d| (now + d.max(0.0)).to_string())
                            .unwrap_or_default(),
                    )
                    .arg(keys.join(","));
            }
            call.ignore();
        }
        match pipe.query::<()>(&mut *con) {
            // A fresh (or restarted) server has no scripts cached: then no call ran.
            Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
                self.scripts.submit.load(&mut *con)?;
                pipe.query::<()>(&mut *con)?;
            }
            other => other?,
        }
        Ok(ids)
    }

    fn records(&self, con: &mut Connection, ids: &[String]) -> Result<Vec<TaskRecord>> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET")
                .arg(self.key(&format!("task:{id}")))
                .arg(&RECORD_FIELDS[..]);
        }
        let rows: Vec<Vec<Value>> = pipe.query(con)?;
        let mut records = Vec::with_capacity(rows.len());
        for row in rows {
            records.extend(record_from_fields(&row)?);
        }
        Ok(records)
    }

    /// See [`crate::Store::task`].
    pub fn task(&self, id: &str) -> Result<Option<TaskRecord>> {
        let mut con = self.con()?;
        Ok(self.records(&mut con, &[id.to_string()])?.pop())
    }

    /// See [`crate::Store::tasks`].
    pub fn tasks(&self, ids: &[TaskId]) -> Result<Vec<TaskRecord>> {
        let mut con = self.con()?;
        self.records(&mut con, ids)
    }

    /// See [`crate::Store::batch`].
    pub fn batch(&self, id: &str) -> Result<Vec<TaskRecord>> {
        let mut con = self.con()?;
        let ids = self.batch_ids(&mut con, id)?;
        self.records(&mut con, &ids)
    }

    /// A batch's task ids, in submission order.
    fn batch_ids(&self, con: &mut Connection, id: &str) -> Result<Vec<String>> {
        Ok(redis::cmd("ZRANGE")
            .arg(self.key(&format!("batch:{id}")))
            .arg(0)
            .arg(-1)
            .query(&mut *con)?)
    }

    /// Ends an unfinished task without an evaluation (cancel, timeout, infra_error).
    fn finish(
        &self,
        con: &mut Connection,
        id: &str,
        token: &str,
        state: TaskState,
        result: Option<&serde_json::Value>,
    ) -> Result<bool> {
        let verdict = result.and_then(verdict_of).unwrap_or("");
        let ended: i64 = self
            .scripts
            .finish
            .prepare_invoke()
            .arg(self.prefix())
            .arg(id)
            .arg(token)
            .arg(now_unix())
            .arg(state.as_str())
            .arg(result.map(|r| r.to_string()).unwrap_or_default())
            .arg(verdict)
            .invoke(con)?;
        Ok(ended == 1)
    }

    /// See [`crate::Store::cancel`].
    pub fn cancel(&self, id: &str) -> Result<bool> {
        let mut con = self.con()?;
        self.finish(&mut con, id, "", TaskState::Cancelled, None)
    }

    /// See [`crate::Store::cancel_batch`]. One script per slice of the batch, so a batch of
    /// many thousands never holds the server for long; each task's cancel is atomic.
    pub fn cancel_batch(&self, id: &str) -> Result<u64> {
        let mut con = self.con()?;
        let ids = self.batch_ids(&mut con, id)?;
        let mut cancelled = 0;
        for slice in ids.chunks(CANCEL_SLICE) {
            let ended: u64 = self
                .scripts
                .cancel_many
                .prepare_invoke()
                .arg(self.prefix())
                .arg(now_unix())
                .arg(slice)
                .invoke(&mut *con)?;
            cancelled += ended;
        }
        Ok(cancelled)
    }

    /// See [`crate::Store::claim`].
    pub fn claim(&self, worker: &WorkerInfo, lease: Duration) -> Result<Option<Lease>> {
        let mut con = self.con()?;
        self.reclaim_now_and_then(&mut con)?;
        loop {
            let now = now_unix();
            let token = new_id();
            let expires_at = now + lease.as_secs_f64();
            let claimed: Option<Vec<String>> = self
                .scripts
                .claim
                .prepare_invoke()
                .arg(self.prefix())
                .arg(&worker.id)
                .arg(&token)
                .arg(now)
                .arg(expires_at)
                .arg(&worker.versions)
                .invoke(&mut *con)?;
            let Some(fields) = claimed else {
                return Ok(None);
            };
            let [task_id, spec, attempt, deadline] = <[String; 4]>::try_from(fields)
                .map_err(|f| QueueError::Corrupt(format!("claim script returned {f:?}")))?;
            let lease = Lease {
                task_id,
                token,
                attempt: attempt.parse().unwrap_or(1),
                spec: serde_json::from_str(&spec)?,
                expires_at,
                worker: worker.id.clone(),
                versions: worker.versions.clone(),
                deadline_at: deadline.parse().ok(),
            };
            if !self.answered_without_worker(&mut con, &lease, now)? {
                return Ok(Some(lease));
            }
        }
    }

    /// A claimed task past its deadline times out; one whose result is cached is answered.
    fn answered_without_worker(
        &self,
        con: &mut Connection,
        lease: &Lease,
        now: f64,
    ) -> Result<bool> {
        if let Some(deadline) = lease.deadline_at.filter(|d| *d <= now) {
            let waited = now - (deadline - lease.spec.deadline_s.unwrap_or(0.0));
            let result = timeout_result(&lease.spec, waited, false);
            self.finish(
                con,
                &lease.task_id,
                &lease.token,
                TaskState::Timeout,
                Some(&result),
            )?;
            return Ok(true);
        }
        if !lease.spec.cache {
            return Ok(false);
        }
        let cached: Option<String> = redis::cmd("GET")
            .arg(self.key(&format!(
                "cache:{}",
                cache_key(&lease.spec, &lease.versions)
            )))
            .query(con)?;
        let Some(text) = cached else {
            return Ok(false);
        };
        let result: serde_json::Value = serde_json::from_str(&text)?;
        self.store_result(con, lease, &result, false)?;
        Ok(true)
    }

    fn reclaim_now_and_then(&self, con: &mut Connection) -> Result<()> {
        let now = now_unix();
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
        self.reclaim_expired(con, now)?;
        Ok(())
    }

    /// See [`crate::Store::renew`].
    pub fn renew(&self, lease: &Lease, duration: Duration) -> Result<bool> {
        let mut con = self.con()?;
        let renewed: i64 = self
            .scripts
            .renew
            .prepare_invoke()
            .arg(self.prefix())
            .arg(&lease.task_id)
            .arg(&lease.token)
            .arg(now_unix() + duration.as_secs_f64())
            .invoke(&mut *con)?;
        Ok(renewed == 1)
    }

    /// Runs the complete script: `evaluated` false = answered from the cache.
    fn store_result(
        &self,
        con: &mut Connection,
        lease: &Lease,
        result: &serde_json::Value,
        evaluated: bool,
    ) -> Result<bool> {
        let cache_under = if evaluated && is_cacheable(result) {
            cache_key(&lease.spec, &lease.versions)
        } else {
            String::new()
        };
        let mut call = self.scripts.complete.prepare_invoke();
        call.arg(self.prefix())
            .arg(&lease.task_id)
            .arg(&lease.token)
            .arg(now_unix())
            .arg(result.to_string())
            .arg(verdict_of(result).unwrap_or("unknown"))
            .arg(cache_under)
            .arg(self.config.retention.as_secs().max(1))
            .arg(if evaluated { "1" } else { "0" });
        if evaluated {
            for (stage, seconds) in stages_of(result) {
                call.arg(stage).arg(seconds);
            }
        }
        let stored: i64 = call.invoke(con)?;
        Ok(stored == 1)
    }

    /// See [`crate::Store::complete`].
    pub fn complete(&self, lease: &Lease, result: serde_json::Value) -> Result<bool> {
        let mut con = self.con()?;
        self.store_result(&mut con, lease, &result, true)
    }

    /// See [`crate::Store::retry`].
    pub fn retry(&self, lease: &Lease, reason: &str) -> Result<RetryOutcome> {
        let mut con = self.con()?;
        self.requeue(&mut con, &lease.task_id, &lease.token, reason, false)
    }

    /// Puts a running task back in the queue, or writes its `infra_error` result when it had
    /// its last attempt. `expired_only`: only if its lease has expired (the reaper).
    fn requeue(
        &self,
        con: &mut Connection,
        id: &str,
        token: &str,
        reason: &str,
        expired_only: bool,
    ) -> Result<RetryOutcome> {
        let outcome: String = self
            .scripts
            .requeue
            .prepare_invoke()
            .arg(self.prefix())
            .arg(id)
            .arg(token)
            .arg(now_unix())
            .arg(self.config.max_attempts)
            .arg(if expired_only { "1" } else { "0" })
            .invoke(con)?;
        match outcome.as_str() {
            "requeued" => {
                tracing::info!(task = %id, reason, "task re-queued");
                Ok(RetryOutcome::Requeued)
            }
            "exhausted" => {
                let (spec, attempts, started) = self.spec_attempts_started(con, id)?;
                let wall = now_unix() - started;
                let result = infra_error_result(&spec, attempts, reason, wall);
                if self.finish(con, id, token, TaskState::Done, Some(&result))? {
                    Ok(RetryOutcome::Exhausted)
                } else {
                    Ok(RetryOutcome::Refused)
                }
            }
            _ => Ok(RetryOutcome::Refused),
        }
    }

    fn spec_attempts_started(
        &self,
        con: &mut Connection,
        id: &str,
    ) -> Result<(TaskSpec, u32, f64)> {
        let (spec, attempts, started, submitted): (
            Option<String>,
            Option<u32>,
            Option<String>,
            Option<String>,
        ) = redis::cmd("HMGET")
            .arg(self.key(&format!("task:{id}")))
            .arg(&["spec", "attempts", "started_at", "submitted_at"][..])
            .query(con)?;
        let spec = spec.ok_or_else(|| QueueError::Corrupt(format!("task {id} has no spec")))?;
        let at = |t: Option<String>| t.and_then(|t| t.parse::<f64>().ok());
        let started = at(started).or(at(submitted)).unwrap_or_else(now_unix);
        Ok((serde_json::from_str(&spec)?, attempts.unwrap_or(0), started))
    }

    /// Re-queues (or exhausts) every running task whose lease expired before `now`.
    fn reclaim_expired(&self, con: &mut Connection, now: f64) -> Result<(u64, u64)> {
        let expired: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.key("leases"))
            .arg("-inf")
            .arg(now)
            .query(con)?;
        let (mut requeued, mut exhausted) = (0, 0);
        for id in expired {
            let token: Option<String> = redis::cmd("HGET")
                .arg(self.key(&format!("task:{id}")))
                .arg("token")
                .query(con)?;
            let Some(token) = token.filter(|t| !t.is_empty()) else {
                redis::cmd("ZREM")
                    .arg(self.key("leases"))
                    .arg(&id)
                    .query::<()>(con)?;
                continue;
            };
            let reason = "the worker's lease expired (it died or stopped renewing)";
            match self.requeue(con, &id, &token, reason, true)? {
                RetryOutcome::Requeued => requeued += 1,
                RetryOutcome::Exhausted => exhausted += 1,
                RetryOutcome::Refused => {}
            }
        }
        Ok((requeued, exhausted))
    }

    /// Whether a minute has passed since this handle last looked for orphans.
    fn orphan_check_due(&self, now: f64) -> Result<bool> {
        let mut last = self
            .last_orphan_check
            .lock()
            .map_err(|_| QueueError::Corrupt("orphan clock poisoned".into()))?;
        if now - *last < ORPHAN_CHECK_EVERY_S {
            return Ok(false);
        }
        *last = now;
        Ok(true)
    }

    /// XAUTOCLAIMs pending entries idle past `ORPHAN_IDLE_MS` in every stream and drops those
    /// whose task no longer runs under them, so pending lists cannot grow without bound.
    fn drop_orphans(&self, con: &mut Connection) -> Result<()> {
        let streams: Vec<String> = redis::cmd("SMEMBERS").arg(self.key("streams")).query(con)?;
        for stream in streams {
            let mut cursor = "0-0".to_string();
            loop {
                let reply: Value = redis::cmd("XAUTOCLAIM")
                    .arg(&stream)
                    .arg("workers")
                    .arg("reaper")
                    .arg(ORPHAN_IDLE_MS)
                    .arg(&cursor)
                    .arg("COUNT")
                    .arg(100)
                    .query(con)?;
                let (next, entries) = autoclaim_entries(&reply);
                for (entry, task) in entries {
                    self.scripts
                        .drop_orphan
                        .prepare_invoke()
                        .arg(self.prefix())
                        .arg(&stream)
                        .arg(entry)
                        .arg(task)
                        .invoke::<i64>(con)?;
                }
                match next {
                    Some(n) if n != "0-0" => cursor = n,
                    _ => break,
                }
            }
        }
        Ok(())
    }

    /// See [`crate::Store::sweep`].
    pub fn sweep(&self, now: f64) -> Result<SweepReport> {
        let mut con = self.con()?;
        let (requeued, exhausted) = self.reclaim_expired(&mut con, now)?;
        let timed_out = self.time_out_overdue(&mut con, now)?;
        let cutoff = now - self.config.retention.as_secs_f64();
        let purged = self.purge_finished(&mut con, cutoff)?;
        self.purge_cached(&mut con, cutoff)?;
        if self.orphan_check_due(now)? {
            self.drop_orphans(&mut con)?;
        }
        Ok(SweepReport {
            requeued,
            exhausted,
            timed_out,
            purged,
        })
    }

    fn time_out_overdue(&self, con: &mut Connection, now: f64) -> Result<u64> {
        let overdue: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.key("deadlines"))
            .arg("-inf")
            .arg(now)
            .query(con)?;
        let mut count = 0;
        for id in overdue {
            let (spec, state, submitted): (Option<String>, Option<String>, Option<f64>) =
                redis::cmd("HMGET")
                    .arg(self.key(&format!("task:{id}")))
                    .arg(&["spec", "state", "submitted_at"][..])
                    .query(con)?;
            let Some(spec) = spec else {
                redis::cmd("ZREM")
                    .arg(self.key("deadlines"))
                    .arg(&id)
                    .query::<()>(con)?;
                continue;
            };
            let spec: TaskSpec = serde_json::from_str(&spec)?;
            let running = state.as_deref() == Some("running");
            let result = timeout_result(&spec, now - submitted.unwrap_or(now), running);
            if self.finish(con, &id, "", TaskState::Timeout, Some(&result))? {
                count += 1;
            }
        }
        Ok(count)
    }

    fn purge_finished(&self, con: &mut Connection, cutoff: f64) -> Result<u64> {
        let mut purged = 0;
        loop {
            let old: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                .arg(self.key("finished"))
                .arg("-inf")
                .arg(format!("({cutoff}"))
                .arg("LIMIT")
                .arg(0)
                .arg(1000)
                .query(con)?;
            if old.is_empty() {
                return Ok(purged);
            }
            let n: u64 = self
                .scripts
                .purge
                .prepare_invoke()
                .arg(self.prefix())
                .arg(&old)
                .invoke(con)?;
            purged += n;
        }
    }

    fn purge_cached(&self, con: &mut Connection, cutoff: f64) -> Result<()> {
        loop {
            let old: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                .arg(self.key("cached"))
                .arg("-inf")
                .arg(format!("({cutoff}"))
                .arg("LIMIT")
                .arg(0)
                .arg(1000)
                .query(con)?;
            if old.is_empty() {
                return Ok(());
            }
            let mut pipe = redis::pipe();
            for key in &old {
                pipe.del(self.key(&format!("cache:{key}"))).ignore();
            }
            pipe.zrem(self.key("cached"), &old).ignore();
            pipe.query::<()>(con)?;
        }
    }

    /// See [`crate::Store::heartbeat`].
    pub fn heartbeat(&self, worker: &WorkerInfo) -> Result<()> {
        let mut con = self.con()?;
        redis::pipe()
            .hset(
                self.key("workers"),
                &worker.id,
                serde_json::to_string(worker)?,
            )
            .ignore()
            .hset(self.key("worker_seen"), &worker.id, now_unix())
            .ignore()
            .query::<()>(&mut *con)?;
        Ok(())
    }

    /// See [`crate::Store::workers`].
    pub fn workers(&self) -> Result<Vec<WorkerStatus>> {
        let mut con = self.con()?;
        let (infos, seen, restarts): (
            HashMap<String, String>,
            HashMap<String, f64>,
            HashMap<String, u64>,
        ) = redis::pipe()
            .hgetall(self.key("workers"))
            .hgetall(self.key("worker_seen"))
            .hgetall(self.key("restarts"))
            .query(&mut *con)?;
        let mut ids: Vec<&String> = infos.keys().chain(restarts.keys()).collect();
        ids.sort();
        ids.dedup();
        Ok(ids
            .into_iter()
            .map(|id| {
                let info = infos
                    .get(id)
                    .and_then(|json| serde_json::from_str::<WorkerInfo>(json).ok())
                    .unwrap_or_default();
                WorkerStatus {
                    id: id.clone(),
                    device: info.device,
                    gpu_model: info.gpu_model,
                    versions: info.versions,
                    current_task: info.current_task,
                    stage: info.stage,
                    in_flight: info.in_flight,
                    last_seen: seen.get(id).copied().unwrap_or(0.0),
                    restarts: restarts.get(id).copied().unwrap_or(0),
                }
            })
            .collect())
    }

    /// See [`crate::Store::note_restart`].
    pub fn note_restart(&self, worker_id: &str) -> Result<()> {
        let mut con = self.con()?;
        redis::cmd("HINCRBY")
            .arg(self.key("restarts"))
            .arg(worker_id)
            .arg(1)
            .query::<()>(&mut *con)?;
        Ok(())
    }

    /// See [`crate::Store::stats`].
    pub fn stats(&self) -> Result<QueueStats> {
        let mut con = self.con()?;
        type Totals = (
            HashMap<String, i64>,
            HashMap<String, f64>,
            HashMap<String, u64>,
            Vec<i32>,
        );
        let (states, counters, restarts, prios): Totals = redis::pipe()
            .hgetall(self.key("statecount"))
            .hgetall(self.key("counters"))
            .hgetall(self.key("restarts"))
            .zrange(self.key("prios"), 0, -1)
            .query(&mut *con)?;
        let mut stats = QueueStats::default();
        let get = |s: TaskState| states.get(s.as_str()).copied().unwrap_or(0).max(0) as u64;
        stats.queued = get(TaskState::Queued);
        stats.running = get(TaskState::Running);
        stats.done = get(TaskState::Done);
        stats.cancelled = get(TaskState::Cancelled);
        stats.timeout = get(TaskState::Timeout);
        for (name, value) in &counters {
            apply_counter(&mut stats, name, *value);
        }
        stats.worker_restarts = restarts.values().sum();
        for priority in prios {
            let depth: HashMap<String, u64> = redis::cmd("HGETALL")
                .arg(self.key(&format!("depth:{priority}")))
                .query(&mut *con)?;
            for (client, n) in depth {
                *stats.queued_by_priority.entry(priority).or_default() += n;
                *stats.queued_by_client.entry(client).or_default() += n;
            }
        }
        Ok(stats)
    }
}

/// `(next cursor, [(entry id, task id)])` of an XAUTOCLAIM reply.
fn autoclaim_entries(reply: &Value) -> (Option<String>, Vec<(String, String)>) {
    let Value::Array(parts) = reply else {
        return (None, Vec::new());
    };
    let next = text(parts.first());
    let mut entries = Vec::new();
    if let Some(Value::Array(claimed)) = parts.get(1) {
        for entry in claimed {
            let Value::Array(pair) = entry else { continue };
            let (Some(id), Some(Value::Array(fields))) = (text(pair.first()), pair.get(1)) else {
                continue;
            };
            if let Some(task) = text(fields.get(1)) {
                entries.push((id, task));
            }
        }
    }
    (next, entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn xautoclaim_replies_give_cursor_entries_and_task_ids() {
        // Redis 7: [next cursor, [[entry id, [field, value, ...]], ...], [deleted ids]].
        let reply = Value::Array(vec![
            bulk("1700000000000-5"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk("1700000000000-1"),
                    Value::Array(vec![bulk("id"), bulk("task-a")]),
                ]),
                // An entry deleted meanwhile comes back as nil fields: skipped.
                Value::Array(vec![bulk("1700000000000-2"), Value::Nil]),
            ]),
            Value::Array(vec![]),
        ]);
        let (next, entries) = autoclaim_entries(&reply);
        assert_eq!(next.as_deref(), Some("1700000000000-5"));
        assert_eq!(
            entries,
            vec![("1700000000000-1".to_string(), "task-a".to_string())]
        );
        assert_eq!(autoclaim_entries(&Value::Nil), (None, Vec::new()));
    }
}
