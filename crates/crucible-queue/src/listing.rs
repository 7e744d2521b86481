//! Listings for people (the dashboard): recent tasks as one-line summaries, and a task's spec.
//!
//! A summary carries what a table row shows, read from the stored result without parsing the
//! whole document, so that a page of 10,000 evaluations stays cheap.

use serde::{Deserialize, Serialize};

use crate::{QueueError, Result, Store, TaskSpec, TaskState};

/// Which tasks [`Store::recent`] lists, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Listing {
    /// At most this many rows.
    pub limit: usize,
    /// Only tasks of this task name.
    pub task_name: Option<String>,
    /// Only tasks that finished at or after this time (unix seconds).
    pub finished_since: Option<f64>,
    /// Only tasks whose result has a finding of severity `reject` or `flag`.
    pub with_findings: bool,
}

/// One finding of a listed result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindingSummary {
    pub code: String,
    /// `info`, `flag` or `reject`.
    pub severity: String,
    pub message: String,
    pub line: Option<u32>,
}

/// One task as a table row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskSummary {
    pub id: String,
    pub task_name: String,
    pub client: String,
    pub state: TaskState,
    pub submitted_at: f64,
    pub finished_at: Option<f64>,
    pub cached: bool,
    pub verdict: Option<String>,
    pub speedup: Option<f64>,
    pub speedup_matched: Option<f64>,
    pub findings: Vec<FindingSummary>,
    /// The verifier policy the submission asked for (`None`: the judge's default).
    pub verify_policy: Option<String>,
}

/// Finished tasks of a window, counted by verdict (the state for tasks without a result).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FinishedCounts {
    /// (verdict or state, answered from the cache or a shared evaluation, count)
    pub rows: Vec<(String, bool, u64)>,
}

impl Store {
    /// Tasks finished at or after `since` (unix seconds), counted in the store.
    pub fn finished_counts(&self, since: f64) -> Result<FinishedCounts> {
        match self {
            Store::Sqlite(store) => store.finished_counts(since),
            Store::Redis(_) => Err(QueueError::Unsupported(
                "counting finished tasks by verdict needs the SQLite store",
            )),
        }
    }

    /// Tasks as summaries, newest first (see [`Listing`]).
    pub fn recent(&self, listing: &Listing) -> Result<Vec<TaskSummary>> {
        match self {
            Store::Sqlite(store) => store.recent(listing),
            Store::Redis(_) => Err(QueueError::Unsupported(
                "listing tasks (the dashboard's tables) needs the SQLite store",
            )),
        }
    }

    /// What was submitted for task `id`, sources included.
    pub fn spec(&self, id: &str) -> Result<Option<TaskSpec>> {
        match self {
            Store::Sqlite(store) => store.spec(id),
            Store::Redis(_) => Err(QueueError::Unsupported(
                "reading a task's sources back needs the SQLite store",
            )),
        }
    }
}
