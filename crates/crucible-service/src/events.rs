//! `GET /v1/batches/{id}/events`: a server-sent event per task as it reaches a terminal state
//! (`event: task`, the task as JSON), then one `event: end` with the batch's counts. The stream
//! polls the store, so any API server can serve any batch.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};

use axum::response::sse::{Event, KeepAlive, Sse};
use crucible_queue::BatchId;
use futures_util::Stream;

use crate::AppState;
use crate::api::{StateCounts, TaskView};
use crate::error::ApiError;
use crate::routes::batch_tasks;

struct Follow {
    app: AppState,
    batch: BatchId,
    reported: HashSet<String>,
    pending: VecDeque<Event>,
    ended: bool,
    first: bool,
}

/// The batch's results as they come.
#[utoipa::path(get, path = "/v1/batches/{id}/events",
    params(("id" = String, Path, description = "batch id")),
    responses(
        (status = 200, description = "`text/event-stream`: `task` events, then `end`", content_type = "text/event-stream", body = String),
        (status = 404, description = "no such batch", body = crate::error::ErrorBody),
        (status = 401, description = "missing or wrong bearer token", body = crate::error::ErrorBody),
        (status = 503, description = "store unavailable", body = crate::error::ErrorBody)),
    tag = "batches")]
pub async fn batch_events(
    State(app): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let batch: BatchId = crate::routes::parse_id("batch", path)?;
    // Fail with a status, not an empty stream, when the batch does not exist.
    batch_tasks(&app, &batch).await?;
    let follow = Follow {
        app,
        batch,
        reported: HashSet::new(),
        pending: VecDeque::new(),
        ended: false,
        first: true,
    };
    let stream = futures_util::stream::unfold(follow, |mut follow| async move {
        loop {
            if let Some(event) = follow.pending.pop_front() {
                return Some((Ok(event), follow));
            }
            if follow.ended {
                return None;
            }
            if !follow.first {
                tokio::time::sleep(follow.app.limits.poll_interval).await;
            }
            follow.first = false;
            follow.poll().await;
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

impl Follow {
    async fn poll(&mut self) {
        let tasks = match batch_tasks(&self.app, &self.batch).await {
            Ok(tasks) => tasks,
            Err(err) => {
                self.pending.push_back(
                    Event::default()
                        .event("error")
                        .data(format!("{}: {}", err.code, err.message)),
                );
                self.ended = true;
                return;
            }
        };
        for task in tasks.iter().filter(|t| t.state.is_terminal()) {
            if self.reported.insert(task.id.clone()) {
                self.pending.push_back(task_event(task));
            }
        }
        if tasks.iter().all(|t| t.state.is_terminal()) {
            let counts = StateCounts::of(&tasks);
            let end = Event::default()
                .event("end")
                .json_data(&counts)
                .unwrap_or_else(|_| Event::default().event("end"));
            self.pending.push_back(end);
            self.ended = true;
        }
    }
}

fn task_event(task: &TaskView) -> Event {
    Event::default()
        .event("task")
        .id(task.id.clone())
        .json_data(task)
        .unwrap_or_else(|e| Event::default().event("error").data(e.to_string()))
}
