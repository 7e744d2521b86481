//! The Redis backend (in progress).

use std::time::Duration;

use crate::types::*;
use crate::{QueueError, Result};

/// The Redis backend. Open it through [`crate::Store::open`].
pub struct RedisStore {
    _config: StoreConfig,
}

fn pending() -> QueueError {
    QueueError::Corrupt("the Redis backend is not written yet".into())
}

impl RedisStore {
    pub fn open(_url: &str, _config: StoreConfig) -> Result<RedisStore> {
        Err(pending())
    }
    pub fn submit(&self, _batch: Option<&str>, _specs: Vec<TaskSpec>) -> Result<Vec<TaskId>> {
        Err(pending())
    }
    pub fn task(&self, _id: &str) -> Result<Option<TaskRecord>> {
        Err(pending())
    }
    pub fn batch(&self, _id: &str) -> Result<Vec<TaskRecord>> {
        Err(pending())
    }
    pub fn cancel(&self, _id: &str) -> Result<bool> {
        Err(pending())
    }
    pub fn claim(&self, _worker: &WorkerInfo, _lease: Duration) -> Result<Option<Lease>> {
        Err(pending())
    }
    pub fn renew(&self, _lease: &Lease, _duration: Duration) -> Result<bool> {
        Err(pending())
    }
    pub fn complete(&self, _lease: &Lease, _result: serde_json::Value) -> Result<bool> {
        Err(pending())
    }
    pub fn retry(&self, _lease: &Lease, _reason: &str) -> Result<RetryOutcome> {
        Err(pending())
    }
    pub fn sweep(&self, _now: f64) -> Result<SweepReport> {
        Err(pending())
    }
    pub fn heartbeat(&self, _worker: &WorkerInfo) -> Result<()> {
        Err(pending())
    }
    pub fn workers(&self) -> Result<Vec<WorkerStatus>> {
        Err(pending())
    }
    pub fn note_restart(&self, _worker_id: &str) -> Result<()> {
        Err(pending())
    }
    pub fn stats(&self) -> Result<QueueStats> {
        Err(pending())
    }
}
