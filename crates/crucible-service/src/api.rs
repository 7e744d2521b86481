//! The wire types of `/v1`: what clients send and what they get back. The OpenAPI document is
//! derived from these (utoipa), so the document and the server cannot disagree.

use crucible_queue::{JudgeOptions, TaskRecord, TaskSpec, TaskState};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::limits::Limits;

/// The client name used when neither the body nor `X-Crucible-Client` names one.
pub const ANONYMOUS: &str = "anonymous";
/// Priorities run from -10 (last) to 10 (first).
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -10..=10;
/// The longest deadline a task may ask for: a week.
pub const MAX_DEADLINE_S: f64 = 7.0 * 24.0 * 3600.0;
const MAX_NAME_CHARS: usize = 128;

/// Judge options; every field is optional and an absent one means the judge's default.
#[derive(Debug, Default, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JudgeOptionsBody {
    /// Correctness trials, each with fresh inputs (1..=100; default 5).
    #[schema(minimum = 1, maximum = 100)]
    pub trials: Option<u32>,
    /// Base seed, to replay an earlier evaluation.
    pub seed: Option<u64>,
    /// Task size profile: `small` or `full`.
    pub size_profile: Option<String>,
    /// Time and profile the candidate on a GPU (default true).
    pub timing: Option<bool>,
    /// Static verifier preset: `strict`, `kernelbench`, `lenient` or `off`.
    pub verify_policy: Option<String>,
    /// Tolerance profile: `kb-v0` or `strict`.
    pub tolerance: Option<String>,
    /// Generalization trial: `auto`, `on` or `off`.
    pub generalize: Option<String>,
}

/// One evaluation to queue: a KernelBench-format task and a candidate solving it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSubmission {
    /// Display name and part of the cache key, e.g. `01_relu` (default `task`).
    #[schema(pattern = r"^[A-Za-z0-9_.:/@-]{1,128}$")]
    pub task_name: Option<String>,
    /// The task file's text (`Model`, `get_inputs`, `get_init_inputs`); at most 1 MiB.
    #[schema(pattern = r"^[^\x00]*\S[^\x00]*$", max_length = 1048576)]
    pub task_source: String,
    /// The candidate file's text (`ModelNew`); at most 1 MiB.
    #[schema(pattern = r"^[^\x00]*\S[^\x00]*$", max_length = 1048576)]
    pub candidate_source: String,
    #[serde(default)]
    pub options: Option<JudgeOptionsBody>,
    /// Fair-share key; overrides the `X-Crucible-Client` header (default `anonymous`).
    #[schema(pattern = r"^[A-Za-z0-9_.:/@-]{1,128}$")]
    pub client: Option<String>,
    /// -10..=10, higher first (default 0).
    #[schema(minimum = -10, maximum = 10)]
    pub priority: Option<i32>,
    /// Seconds after submission; past it the task ends with a `timeout` result.
    #[schema(exclusive_minimum = 0.0, maximum = 604800.0)]
    pub deadline_s: Option<f64>,
    /// Reuse an earlier result for the same content (default true).
    pub cache: Option<bool>,
    /// Opaque labels, returned as given (at most 16 KiB as JSON).
    #[schema(value_type = Option<Object>)]
    pub labels: Option<Map<String, Value>>,
}

/// Many evaluations in one call; the batch's `client` and `priority` apply to tasks that set none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchSubmission {
    #[schema(min_items = 1)]
    pub tasks: Vec<TaskSubmission>,
    #[schema(pattern = r"^[A-Za-z0-9_.:/@-]{1,128}$")]
    pub client: Option<String>,
    #[schema(minimum = -10, maximum = 10)]
    pub priority: Option<i32>,
}

/// The id of a queued task.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Submitted {
    pub id: String,
}

/// The ids of a queued batch, in submission order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchSubmitted {
    pub batch_id: String,
    pub task_ids: Vec<String>,
}

/// Where a task is. `done`, `cancelled` and `timeout` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStateView {
    Queued,
    Running,
    Done,
    Cancelled,
    Timeout,
}

impl From<TaskState> for TaskStateView {
    fn from(state: TaskState) -> TaskStateView {
        match state {
            TaskState::Queued => TaskStateView::Queued,
            TaskState::Running => TaskStateView::Running,
            TaskState::Done => TaskStateView::Done,
            TaskState::Cancelled => TaskStateView::Cancelled,
            TaskState::Timeout => TaskStateView::Timeout,
        }
    }
}

impl TaskStateView {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStateView::Done | TaskStateView::Cancelled | TaskStateView::Timeout
        )
    }
}

/// A task and, once it is terminal, its `crucible.result/1` document.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TaskView {
    pub id: String,
    pub batch: Option<String>,
    pub state: TaskStateView,
    pub task_name: String,
    pub client: String,
    pub priority: i32,
    /// Unix seconds.
    pub submitted_at: f64,
    pub started_at: Option<f64>,
    pub finished_at: Option<f64>,
    /// Evaluations started for it (more than one after an infrastructure retry).
    pub attempts: u32,
    pub worker: Option<String>,
    /// The result was reused from an earlier evaluation of the same content.
    pub cached: bool,
    /// The in-flight duplicate whose evaluation this task shares.
    pub shared_with: Option<String>,
    /// The result document (`crucible.result/1`); for `timeout` its verdict is `timeout`.
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    #[schema(value_type = Object)]
    pub labels: Map<String, Value>,
}

impl From<TaskRecord> for TaskView {
    fn from(record: TaskRecord) -> TaskView {
        TaskView {
            id: record.id.to_string(),
            batch: record.batch.map(|b| b.to_string()),
            state: record.state.into(),
            task_name: record.task_name,
            client: record.client,
            priority: record.priority,
            submitted_at: record.submitted_at,
            started_at: record.started_at,
            finished_at: record.finished_at,
            attempts: record.attempts,
            worker: record.worker,
            cached: record.cached,
            shared_with: record.shared_with.map(|t| t.to_string()),
            result: record.result,
            labels: record.labels,
        }
    }
}

/// How many of a batch's tasks are in each state.
#[derive(Debug, Default, Clone, Serialize, Deserialize, ToSchema)]
pub struct StateCounts {
    pub queued: u64,
    pub running: u64,
    pub done: u64,
    pub cancelled: u64,
    pub timeout: u64,
}

impl StateCounts {
    pub fn of(tasks: &[TaskView]) -> StateCounts {
        let mut counts = StateCounts::default();
        for task in tasks {
            let slot = match task.state {
                TaskStateView::Queued => &mut counts.queued,
                TaskStateView::Running => &mut counts.running,
                TaskStateView::Done => &mut counts.done,
                TaskStateView::Cancelled => &mut counts.cancelled,
                TaskStateView::Timeout => &mut counts.timeout,
            };
            *slot += 1;
        }
        counts
    }
}

/// A batch: its tasks' states and results.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchView {
    pub id: String,
    pub total: u64,
    pub counts: StateCounts,
    /// Every task is terminal.
    pub finished: bool,
    pub tasks: Vec<TaskView>,
}

/// The answer to a cancel.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CancelOutcome {
    pub id: String,
    /// False when the task was already terminal.
    pub cancelled: bool,
    pub state: TaskStateView,
}

/// The answer to a batch's cancel.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchCancelOutcome {
    pub id: String,
    /// How many of its tasks this call cancelled (queued or running ones; the rest were
    /// already terminal).
    pub cancelled: u64,
    /// Its tasks' states afterwards.
    pub counts: StateCounts,
}

/// `?wait=SECONDS`: hold the request until the task is terminal or this long has passed.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// 0..=300 seconds (default 0: answer at once).
    #[param(minimum = 0.0, maximum = 300.0)]
    pub wait: Option<f64>,
}

/// A worker process as it last reported itself.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkerView {
    pub id: String,
    pub device: String,
    pub gpu_model: Option<String>,
    /// The task it is evaluating now (the oldest, when it runs several).
    pub current_task: Option<String>,
    /// That task's judge stage (`start`, `trial_1`, `timing`, ...), or `draining`/`stopped`.
    pub stage: Option<String>,
    /// Every evaluation in flight, oldest first, with its judge stage.
    pub in_flight: Vec<InFlightView>,
    /// The judge's versions string (part of every cache key).
    pub versions: String,
    /// Unix seconds of the last heartbeat.
    pub last_seen: f64,
    pub live: bool,
    pub restarts: u64,
}

/// One evaluation a worker has in flight.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct InFlightView {
    pub task: String,
    /// The judge's stage; `null` until its first stage starts.
    pub stage: Option<String>,
}

/// The server's real state.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, `degraded` (no live worker) or `down` (store unreachable).
    pub status: String,
    pub store: bool,
    pub workers_live: u64,
    pub queue_depth: u64,
    pub running: u64,
    pub error: Option<String>,
}

/// Turns one submission into the queue's task, or says which field is wrong.
pub fn to_spec(
    body: TaskSubmission,
    default_client: &str,
    default_priority: Option<i32>,
    limits: &Limits,
) -> Result<TaskSpec, ApiError> {
    check_source("task_source", &body.task_source, limits)?;
    check_source("candidate_source", &body.candidate_source, limits)?;
    let task_name = body.task_name.unwrap_or_else(|| "task".to_string());
    check_name("task_name", &task_name)?;
    let client = body.client.unwrap_or_else(|| default_client.to_string());
    check_name("client", &client)?;
    let priority = body.priority.or(default_priority).unwrap_or(0);
    if !PRIORITY_RANGE.contains(&priority) {
        return Err(ApiError::invalid(format!(
            "priority {priority} is outside -10..=10"
        )));
    }
    if let Some(deadline) = body.deadline_s
        && !(deadline.is_finite() && deadline > 0.0 && deadline <= MAX_DEADLINE_S)
    {
        return Err(ApiError::invalid(
            "deadline_s must be a number of seconds in (0, 604800]",
        ));
    }
    let labels = body.labels.unwrap_or_default();
    let labels_len = serde_json::to_vec(&labels).map_or(usize::MAX, |v| v.len());
    if labels_len > limits.max_labels_bytes {
        return Err(ApiError::too_large(format!(
            "labels take {labels_len} bytes as JSON; the limit is {}",
            limits.max_labels_bytes
        )));
    }
    Ok(TaskSpec {
        task_name,
        task_source: body.task_source,
        candidate_source: body.candidate_source,
        options: to_options(body.options.unwrap_or_default())?,
        client,
        priority,
        deadline_s: body.deadline_s,
        cache: body.cache.unwrap_or(true),
        labels,
    })
}

fn to_options(body: JudgeOptionsBody) -> Result<JudgeOptions, ApiError> {
    if let Some(trials) = body.trials
        && !(1..=100).contains(&trials)
    {
        return Err(ApiError::invalid("options.trials must be in 1..=100"));
    }
    one_of(
        "options.size_profile",
        &body.size_profile,
        &["small", "full"],
    )?;
    one_of(
        "options.verify_policy",
        &body.verify_policy,
        &["strict", "kernelbench", "lenient", "off"],
    )?;
    one_of("options.tolerance", &body.tolerance, &["kb-v0", "strict"])?;
    one_of(
        "options.generalize",
        &body.generalize,
        &["auto", "on", "off"],
    )?;
    Ok(JudgeOptions {
        trials: body.trials,
        seed: body.seed,
        size_profile: body.size_profile,
        timing: body.timing,
        verify_policy: body.verify_policy,
        tolerance: body.tolerance,
        generalize: body.generalize,
    })
}

fn one_of(field: &str, value: &Option<String>, allowed: &[&str]) -> Result<(), ApiError> {
    match value {
        Some(v) if !allowed.contains(&v.as_str()) => Err(ApiError::invalid(format!(
            "{field} must be one of {allowed:?}, not {v:?}"
        ))),
        _ => Ok(()),
    }
}

fn check_source(field: &str, text: &str, limits: &Limits) -> Result<(), ApiError> {
    if text.len() > limits.max_source_bytes {
        return Err(ApiError::too_large(format!(
            "{field} is {} bytes; the limit is {}",
            text.len(),
            limits.max_source_bytes
        )));
    }
    if text.trim().is_empty() {
        return Err(ApiError::invalid(format!("{field} is empty")));
    }
    if text.contains('\0') {
        return Err(ApiError::invalid(format!("{field} contains a NUL byte")));
    }
    Ok(())
}

/// The characters a name may hold.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '@')
}

/// Names are keys in the store and in metrics: printable ASCII words only.
pub fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name.chars().all(is_name_char);
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "{field} must be 1..={MAX_NAME_CHARS} characters of [A-Za-z0-9_.:/@-]"
        )))
    }
}

/// `name` as a name the API takes: every other character `_`, cut to the longest allowed, `_`
/// for an empty one (a task file's stem may hold spaces or any Unicode).
pub fn to_name(name: &str) -> String {
    let name: String = name
        .chars()
        .take(MAX_NAME_CHARS)
        .map(|c| if is_name_char(c) { c } else { '_' })
        .collect();
    if name.is_empty() {
        "_".to_string()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn any_text_becomes_a_name_the_api_takes() {
        for raw in ["01_relu", "my task (v2)", "", "ü", &"x".repeat(300)] {
            let name = super::to_name(raw);
            assert!(
                super::check_name("task_name", &name).is_ok(),
                "{raw:?} -> {name:?}"
            );
        }
        assert_eq!(super::to_name("01_relu"), "01_relu");
        assert_eq!(super::to_name("a b"), "a_b");
    }
}
