//! How much one request may carry, and how long one may wait.

use std::time::Duration;

/// Request size limits; anything over them is a 413 with a JSON error.
#[derive(Debug, Clone)]
pub struct Limits {
    /// One task or candidate source file.
    pub max_source_bytes: usize,
    /// The labels of one task, as JSON.
    pub max_labels_bytes: usize,
    /// The body of `POST /v1/batches`.
    pub max_batch_bytes: usize,
    /// Tasks in one batch.
    pub max_batch_tasks: usize,
    /// The longest `?wait=` a long-poll may ask for.
    pub max_wait: Duration,
    /// How often a waiting request (long-poll, event stream) looks at the store.
    pub poll_interval: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_source_bytes: 1 << 20,
            max_labels_bytes: 16 << 10,
            max_batch_bytes: 64 << 20,
            max_batch_tasks: 10_000,
            max_wait: Duration::from_secs(300),
            poll_interval: Duration::from_millis(100),
        }
    }
}

impl Limits {
    /// A single-task body holds two sources, each of which JSON escaping can at most double
    /// (newlines, quotes), plus labels and options.
    pub fn max_task_body_bytes(&self) -> usize {
        4 * self.max_source_bytes + 4 * self.max_labels_bytes + (64 << 10)
    }
}
