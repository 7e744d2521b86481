//! Shapes the store's records for the API.

use crucible_queue::{QueueStats, WorkerStatus};

use crate::api::{InFlightView, WorkerView};

/// A worker is live when its last heartbeat is this recent.
pub const LIVE_WITHIN_S: f64 = 30.0;

pub fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub fn worker(status: WorkerStatus) -> WorkerView {
    let live = now_unix() - status.last_seen <= LIVE_WITHIN_S;
    WorkerView {
        id: status.id,
        device: status.device,
        gpu_model: status.gpu_model,
        current_task: status.current_task,
        stage: status.stage,
        in_flight: status
            .in_flight
            .into_iter()
            .map(|t| InFlightView {
                task: t.task,
                stage: t.stage,
            })
            .collect(),
        versions: status.versions,
        last_seen: status.last_seen,
        live,
        restarts: status.restarts,
    }
}

pub fn queue_depth(stats: &QueueStats) -> u64 {
    stats.queued_by_priority.values().sum()
}

pub fn running(stats: &QueueStats) -> u64 {
    stats.running
}
