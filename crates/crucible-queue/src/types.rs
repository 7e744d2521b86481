//! The values the store takes and hands back (the contract's "Types" section).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A task's id: a UUID v7 string (time-ordered).
pub type TaskId = String;
/// A batch's id: a UUID v7 string, or whatever the submitter chose.
pub type BatchId = String;

/// How the judge should run one evaluation. Every field is optional: `None` means the judge's
/// default. Part of the cache key, so two submissions differing only here are judged apart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JudgeOptions {
    /// Correctness trials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials: Option<u32>,
    /// Base seed (replays an earlier evaluation exactly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Task size profile (`small`, `full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_profile: Option<String>,
    /// Whether to time a correct candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<bool>,
    /// Static verifier policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_policy: Option<String>,
    /// Tolerance profile (`kb-v0`, `strict`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<String>,
    /// Generalization trial: `auto`, `on` or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generalize: Option<String>,
}

fn default_client() -> String {
    "anonymous".to_string()
}

fn default_true() -> bool {
    true
}

/// One evaluation to run: a task, a candidate, and how to judge and schedule it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// The task's name, e.g. `01_relu` (for display).
    pub task_name: String,
    /// The KernelBench-format task file's text.
    pub task_source: String,
    /// The candidate file's text.
    pub candidate_source: String,
    /// How to judge it.
    #[serde(default)]
    pub options: JudgeOptions,
    /// The fair-share key (the API fills it from the token); default `anonymous`.
    #[serde(default = "default_client")]
    pub client: String,
    /// Higher runs first; default 0.
    #[serde(default)]
    pub priority: i32,
    /// Seconds after submission after which the task ends `timeout` (never a hang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<f64>,
    /// Whether a result found by content (or an identical task in flight) may stand in for a
    /// fresh evaluation. Default true.
    #[serde(default = "default_true")]
    pub cache: bool,
    /// Opaque to the store; returned as given.
    #[serde(default)]
    pub labels: serde_json::Map<String, serde_json::Value>,
}

impl TaskSpec {
    /// A spec with every scheduling field at its default.
    pub fn new(
        task_name: impl Into<String>,
        task_source: impl Into<String>,
        candidate_source: impl Into<String>,
    ) -> TaskSpec {
        TaskSpec {
            task_name: task_name.into(),
            task_source: task_source.into(),
            candidate_source: candidate_source.into(),
            options: JudgeOptions::default(),
            client: default_client(),
            priority: 0,
            deadline_s: None,
            cache: true,
            labels: serde_json::Map::new(),
        }
    }
}

/// Where a task is in its life. `done`, `cancelled` and `timeout` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Queued,
    Running,
    Done,
    Cancelled,
    Timeout,
}

impl TaskState {
    /// Every state, in life order.
    pub const ALL: [TaskState; 5] = [
        TaskState::Queued,
        TaskState::Running,
        TaskState::Done,
        TaskState::Cancelled,
        TaskState::Timeout,
    ];

    /// The JSON (and storage) spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Done => "done",
            TaskState::Cancelled => "cancelled",
            TaskState::Timeout => "timeout",
        }
    }

    /// Parses the storage spelling.
    pub fn parse(text: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether nothing more will happen to the task.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Done | TaskState::Cancelled | TaskState::Timeout
        )
    }
}

/// What the store knows about one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub id: TaskId,
    pub batch: Option<BatchId>,
    pub state: TaskState,
    pub task_name: String,
    pub client: String,
    pub priority: i32,
    /// Unix seconds.
    pub submitted_at: f64,
    /// When the (last) attempt started, unix seconds.
    pub started_at: Option<f64>,
    /// When the task became terminal, unix seconds.
    pub finished_at: Option<f64>,
    /// Deliveries to a worker so far.
    pub attempts: u32,
    /// The worker of the last attempt.
    pub worker: Option<String>,
    /// True when the result was reused from the cache by content (no evaluation ran for it).
    pub cached: bool,
    /// The identical in-flight task whose evaluation this one shares.
    pub shared_with: Option<TaskId>,
    /// The `crucible.result/1` document, once `done` or `timeout`.
    pub result: Option<serde_json::Value>,
    pub labels: serde_json::Map<String, serde_json::Value>,
    /// Absolute deadline, unix seconds (submitted_at + deadline_s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<f64>,
}

/// A worker's hold on one claimed task. Only the holder of the current lease may complete,
/// renew or retry it: a stale lease (expired and re-delivered, or the task ended) is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub task_id: TaskId,
    /// Unique to this delivery; what makes a stale worker's `complete` fail.
    pub token: String,
    /// Which delivery this is (1 = first).
    pub attempt: u32,
    pub spec: TaskSpec,
    /// Unix seconds; renew before then.
    pub expires_at: f64,
    /// The worker holding it.
    pub worker: String,
    /// The claiming worker's versions string (part of the cache key of the result).
    pub versions: String,
    /// Absolute deadline of the task, unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<f64>,
}

/// Who is claiming: one worker process on one device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Stable per worker slot (e.g. `host:cuda:0`), so restarts are counted against it.
    pub id: String,
    /// `cuda:0`, `cpu`, ...
    pub device: String,
    pub gpu_model: Option<String>,
    /// The judge's versions string (crucible version + harness hash + GPU model + torch/triton),
    /// part of every cache key.
    pub versions: String,
    /// The task being evaluated now, for `workers()`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_task: Option<TaskId>,
    /// Its stage, for `workers()`: the judge's (`start`, `trial_1`, `timing`, ...) while it
    /// runs, else the worker's own (`draining`, `stopped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Every evaluation in flight with its judge stage (a worker runs several at once;
    /// `current_task` and `stage` are the oldest one's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_flight: Vec<TaskStage>,
}

/// One evaluation a worker has in flight, and the stage the judge is in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStage {
    pub task: TaskId,
    /// `None` until the judge starts its first stage.
    pub stage: Option<String>,
}

/// A worker as last seen by the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub id: String,
    pub device: String,
    pub gpu_model: Option<String>,
    pub versions: String,
    pub current_task: Option<TaskId>,
    pub stage: Option<String>,
    /// Every evaluation in flight with its judge stage.
    #[serde(default)]
    pub in_flight: Vec<TaskStage>,
    /// Unix seconds of the last heartbeat.
    pub last_seen: f64,
    /// Restarts noted by the supervisor (`note_restart`).
    pub restarts: u64,
}

/// What `retry` did with an infrastructure fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOutcome {
    /// Back in the queue for another attempt.
    Requeued,
    /// Out of attempts: the task is `done` with an `infra_error` result.
    Exhausted,
    /// The lease was stale (or the task terminal): nothing changed.
    Refused,
}

/// What one `sweep` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    /// Tasks whose lease expired (dead workers) put back in the queue.
    pub requeued: u64,
    /// Tasks whose lease expired on their last allowed attempt: `infra_error` results.
    pub exhausted: u64,
    /// Tasks past their deadline, now `timeout`.
    pub timed_out: u64,
    /// Finished tasks older than the retention period, deleted.
    pub purged: u64,
}

/// Sum and count of one stage's durations over the completed results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StageLatency {
    pub sum_s: f64,
    pub count: u64,
}

/// Queue and result statistics for `/metrics`. Task counts by state are the tasks the store
/// holds now; verdicts, cache hits, duplicates, stages, evaluations and restarts are totals since
/// the store was created (they survive retention).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Tasks in state `queued` (includes in-flight duplicates waiting on their leader).
    pub queued: u64,
    /// Claimable tasks by priority (duplicates waiting on a leader not included).
    pub queued_by_priority: BTreeMap<i32, u64>,
    /// Claimable tasks by client (duplicates waiting on a leader not included).
    pub queued_by_client: BTreeMap<String, u64>,
    pub running: u64,
    pub done: u64,
    pub cancelled: u64,
    pub timeout: u64,
    /// Results by verdict (every `done` or `timeout` result, cached or shared ones included).
    pub verdicts: BTreeMap<String, u64>,
    /// Tasks answered from the result cache.
    pub cache_hits: u64,
    /// Tasks answered by an identical task's evaluation while in flight.
    pub duplicates_shared: u64,
    /// Per stage name, from the `stages` of evaluated (not cached or shared) results.
    pub stages: BTreeMap<String, StageLatency>,
    /// Evaluations a worker completed (cached and shared answers not included).
    pub evaluations_completed: u64,
    /// Sum of `restarts` over the workers.
    pub worker_restarts: u64,
}

/// Tunables of a store. The defaults suit the embedded server.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// Finished tasks older than this are deleted by `sweep`; so are cached results.
    pub retention: Duration,
    /// Deliveries before an infrastructure fault becomes an `infra_error` result.
    pub max_attempts: u32,
    /// A worker seen within this long is live: its versions string is used for cache lookups
    /// at submit.
    pub worker_ttl: Duration,
    /// Key prefix (Redis) so that several deployments can share one database.
    pub redis_prefix: String,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            retention: Duration::from_secs(7 * 24 * 3600),
            max_attempts: 3,
            worker_ttl: Duration::from_secs(120),
            redis_prefix: "crucible:".to_string(),
        }
    }
}
