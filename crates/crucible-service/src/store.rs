//! The API's only door to the queue: every call is a blocking store operation run on tokio's
//! blocking pool, so a slow disk or a Redis round trip never stalls the async workers.

use std::sync::Arc;

use crucible_queue::{BatchId, QueueStats, Store, TaskId, TaskRecord, TaskSpec, WorkerStatus};

use crate::error::ApiError;

/// A shared handle on the store.
#[derive(Clone)]
pub struct StoreHandle {
    store: Arc<Store>,
}

impl StoreHandle {
    pub fn new(store: Arc<Store>) -> StoreHandle {
        StoreHandle { store }
    }

    async fn call<T, F>(&self, op: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T, crucible_queue::QueueError> + Send + 'static,
    {
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || op(&store)).await {
            Ok(result) => result.map_err(ApiError::store),
            Err(join) => Err(ApiError::store(format!("store call panicked: {join}"))),
        }
    }

    pub async fn submit(
        &self,
        batch: Option<BatchId>,
        specs: Vec<TaskSpec>,
    ) -> Result<Vec<TaskId>, ApiError> {
        self.call(move |s| s.submit(batch.as_deref(), specs)).await
    }

    pub async fn task(&self, id: TaskId) -> Result<Option<TaskRecord>, ApiError> {
        self.call(move |s| s.task(&id)).await
    }

    pub async fn batch(&self, id: BatchId) -> Result<Vec<TaskRecord>, ApiError> {
        self.call(move |s| s.batch(&id)).await
    }

    pub async fn cancel(&self, id: TaskId) -> Result<bool, ApiError> {
        self.call(move |s| s.cancel(&id)).await
    }

    pub async fn cancel_batch(&self, id: BatchId) -> Result<u64, ApiError> {
        self.call(move |s| s.cancel_batch(&id)).await
    }

    pub async fn workers(&self) -> Result<Vec<WorkerStatus>, ApiError> {
        self.call(|s| s.workers()).await
    }

    pub async fn stats(&self) -> Result<QueueStats, ApiError> {
        self.call(|s| s.stats()).await
    }
}
