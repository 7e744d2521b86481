//! The `/v1` handlers. Each parses and checks its input, makes one or a few store calls, and
//! shapes the answer; none keeps state between requests.

use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use crucible_queue::{BatchId, TaskId};
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::api::{
    ANONYMOUS, BatchCancelOutcome, BatchSubmission, BatchSubmitted, BatchView, CancelOutcome,
    Health, StateCounts, Submitted, TaskSubmission, TaskView, WaitQuery, WorkerView, check_name,
    to_spec,
};
use crate::error::{ApiError, ErrorBody};

/// The header that names the fair-share client when the body does not.
pub const CLIENT_HEADER: &str = "x-crucible-client";

fn parse_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::from_json(&e))
}

fn header_client(headers: &HeaderMap) -> Result<String, ApiError> {
    match headers.get(CLIENT_HEADER) {
        None => Ok(ANONYMOUS.to_string()),
        Some(value) => {
            let name = value
                .to_str()
                .map_err(|_| ApiError::invalid("X-Crucible-Client is not ASCII"))?;
            check_name("X-Crucible-Client", name)?;
            Ok(name.to_string())
        }
    }
}

/// Ids are uuids; a string that could not be one names nothing: a 404 without a store call.
pub fn parse_id(kind: &str, path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let Path(raw) = path?;
    let plausible =
        (1..=64).contains(&raw.len()) && raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if plausible {
        Ok(raw)
    } else {
        Err(ApiError::not_found(format!("no {kind} {raw:?}")))
    }
}

fn parse_task_id(path: Result<Path<String>, PathRejection>) -> Result<TaskId, ApiError> {
    parse_id("task", path)
}

fn parse_batch_id(path: Result<Path<String>, PathRejection>) -> Result<BatchId, ApiError> {
    parse_id("batch", path)
}

/// Queue one evaluation; answers with its id at once.
#[utoipa::path(post, path = "/v1/tasks", request_body = TaskSubmission,
    params(("X-Crucible-Client" = Option<String>, Header, description = "fair-share client name", pattern = r"^[A-Za-z0-9_.:/@-]{1,128}$")),
    responses(
        (status = 202, description = "queued", body = Submitted),
        (status = 400, description = "not JSON", body = ErrorBody),
        (status = 413, description = "too large", body = ErrorBody),
        (status = 422, description = "invalid field", body = ErrorBody),
        (status = 401, description = "missing or wrong bearer token", body = ErrorBody),
        (status = 503, description = "store unavailable", body = ErrorBody)),
    tag = "tasks")]
pub async fn submit_task(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Submitted>), ApiError> {
    let submission: TaskSubmission = parse_body(body)?;
    let client = header_client(&headers)?;
    let spec = to_spec(submission, &client, None, &app.limits)?;
    let ids = app.store.submit(None, vec![spec]).await?;
    let id = ids
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::store("submit returned no id"))?;
    Ok((StatusCode::ACCEPTED, Json(Submitted { id: id.to_string() })))
}

/// Queue many evaluations in one call (one store transaction).
#[utoipa::path(post, path = "/v1/batches", request_body = BatchSubmission,
    params(("X-Crucible-Client" = Option<String>, Header, description = "fair-share client name", pattern = r"^[A-Za-z0-9_.:/@-]{1,128}$")),
    responses(
        (status = 202, description = "queued", body = BatchSubmitted),
        (status = 400, description = "not JSON", body = ErrorBody),
        (status = 413, description = "too large", body = ErrorBody),
        (status = 422, description = "invalid field", body = ErrorBody),
        (status = 401, description = "missing or wrong bearer token", body = ErrorBody),
        (status = 503, description = "store unavailable", body = ErrorBody)),
    tag = "batches")]
pub async fn submit_batch(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<BatchSubmitted>), ApiError> {
    let batch: BatchSubmission = parse_body(body)?;
    if batch.tasks.is_empty() {
        return Err(ApiError::invalid("tasks is empty"));
    }
    if batch.tasks.len() > app.limits.max_batch_tasks {
        return Err(ApiError::too_large(format!(
            "{} tasks in one batch; the limit is {}",
            batch.tasks.len(),
            app.limits.max_batch_tasks
        )));
    }
    let client = match batch.client {
        Some(name) => {
            check_name("client", &name)?;
            name
        }
        None => header_client(&headers)?,
    };
    let specs = batch
        .tasks
        .into_iter()
        .enumerate()
        .map(|(i, task)| {
            to_spec(task, &client, batch.priority, &app.limits).map_err(|mut e| {
                e.message = format!("tasks[{i}]: {}", e.message);
                e
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let batch_id: BatchId = crucible_queue::new_id();
    let ids = app.store.submit(Some(batch_id.clone()), specs).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(BatchSubmitted {
            batch_id: batch_id.to_string(),
            task_ids: ids.iter().map(ToString::to_string).collect(),
        }),
    ))
}

/// A task's state and result; with `?wait=S`, held until it is terminal or S seconds passed.
#[utoipa::path(get, path = "/v1/tasks/{id}",
    params(("id" = String, Path, description = "task id"), WaitQuery),
    responses(
        (status = 200, description = "the task", body = TaskView),
        (status = 400, description = "bad wait", body = ErrorBody),
        (status = 404, description = "no such task", body = ErrorBody),
        (status = 401, description = "missing or wrong bearer token", body = ErrorBody),
        (status = 503, description = "store unavailable", body = ErrorBody)),
    tag = "tasks")]
pub async fn get_task(
    State(app): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> Result<Json<TaskView>, ApiError> {
    let id = parse_task_id(path)?;
    let Query(query) = query?;
    let wait = match query.wait {
        None => 0.0,
        Some(w) if w.is_finite() && (0.0..=app.limits.max_wait.as_secs_f64()).contains(&w) => w,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_wait",
                format!(
                    "wait must be 0..={} seconds (this server's limit)",
                    app.limits.max_wait.as_secs_f64()
                ),
            ));
        }
    };
    let until = Instant::now() + std::time::Duration::from_secs_f64(wait);
    loop {
        let view: TaskView = app
            .store
            .task(id.clone())
            .await?
            .ok_or_else(|| ApiError::not_found(format!("no task {id}")))?
            .into();
        let now = Instant::now();
        if view.state.is_terminal() || now >= until {
            return Ok(Json(view));
        }
        tokio::time::sleep(app.limits.poll_interval.min(until - now)).await;
    }
}

/// Cancel a queued or running task; a terminal one stays as it is.
#[utoipa::path(post, path = "/v1/tasks/{id}/cancel",
    params(("id" = String, Path, description = "task id")),
    responses(
        (status = 200, description = "the outcome", body = CancelOutcome),
        (status = 404, description = "no such task", body = ErrorBody),
        (status = 401, description = "missing or wrong bearer token", body = ErrorBody),
        (status = 503, description = "store unavailable", body = ErrorBody)),
    tag = "tasks")]
pub async fn cancel_task(
    State(app): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<CancelOutcome>, ApiError> {
    let id = parse_task_id(path)?;
    if app.store.task(id.clone()).await?.is_none() {
        return Err(ApiError::not_found(format!("no task {id}")));
    }
    let cancelled = app.store.cancel(id.clone()).await?;
    let record = app
        .store
        .task(id.clone())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no task {id}")))?;
    Ok(Json(CancelOutcome {
        id: id.to_string(),
        cancelled,
        state: record.state.into(),
    }))
}

pub async fn batch_tasks(app: &AppState, id: &BatchId) -> Result<Vec<TaskView>, ApiError> {
    let records = app.store.batch(id.clone()).await?;
    if records.is_empty() {
        return Err(ApiError::not_found(format!("no batch {id}")));
    }
    Ok(records.into_iter().map(TaskView::from).collect())
}

/// A batch's states and results.
#[utoipa::path(get, path = "/v1/batches/{id}",
    params(("id" = String, Path, description = "batch id")),
    responses(
        (status = 200, description = "the batch", body = BatchView),
        (status = 404, description = "no such batch", body = ErrorBody),
        (status = 401, description = "missing or wrong bearer token", body = ErrorBody),
        (status = 503, description = "store unavailable", body = ErrorBody)),
    tag = "batches")]
pub async fn get_batch(
    State(app): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<BatchView>, ApiError> {
    let id = parse_batch_id(path)?;
    let tasks = batch_tasks(&app, &id).await?;
    let counts = StateCounts::of(&tasks);
    Ok(Json(BatchView {
        id: id.to_string(),
        total: tasks.len() as u64,
        finished: tasks.iter().all(|t| t.state.is_terminal()),
        counts,
        tasks,
    }))
}

/// Cancel every queued or running task of a batch; terminal ones stay as they are.
#[utoipa::path(post, path = "/v1/batches/{id}/cancel",
    params(("id" = String, Path, description = "batch id")),
    responses(
        (status = 200, description = "the outcome", body = BatchCancelOutcome),
        (status = 404, description = "no such batch", body = ErrorBody),
        (status = 401, description = "missing or wrong bearer token", body = ErrorBody),
        (status = 503, description = "store unavailable", body = ErrorBody)),
    tag = "batches")]
pub async fn cancel_batch(
    State(app): State<AppState>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<BatchCancelOutcome>, ApiError> {
    let id = parse_batch_id(path)?;
    // An unknown batch cancels nothing, and then reads as a 404.
    let cancelled = app.store.cancel_batch(id.clone()).await?;
    let tasks = batch_tasks(&app, &id).await?;
    Ok(Json(BatchCancelOutcome {
        id: id.to_string(),
        cancelled,
        counts: StateCounts::of(&tasks),
    }))
}

/// The workers that reported to the store.
#[utoipa::path(get, path = "/v1/workers",
    responses(
        (status = 200, description = "the workers", body = Vec<WorkerView>),
        (status = 401, description = "missing or wrong bearer token", body = ErrorBody),
        (status = 503, description = "store unavailable", body = ErrorBody)),
    tag = "workers")]
pub async fn list_workers(State(app): State<AppState>) -> Result<Json<Vec<WorkerView>>, ApiError> {
    let workers = app.store.workers().await?;
    Ok(Json(
        workers.into_iter().map(crate::views::worker).collect(),
    ))
}

/// Store reachable, live workers, queue depth; 503 when the store is down.
#[utoipa::path(get, path = "/healthz", security(()),
    responses(
        (status = 200, description = "serving", body = Health),
        (status = 503, description = "store unreachable", body = Health)),
    tag = "service")]
pub async fn healthz(State(app): State<AppState>) -> Response {
    let (stats, workers) = match (app.store.stats().await, app.store.workers().await) {
        (Ok(stats), Ok(workers)) => (stats, workers),
        (Err(e), _) | (_, Err(e)) => {
            let health = Health {
                status: "down".into(),
                store: false,
                workers_live: 0,
                queue_depth: 0,
                running: 0,
                error: Some(e.message),
            };
            return (StatusCode::SERVICE_UNAVAILABLE, Json(health)).into_response();
        }
    };
    let live = workers
        .into_iter()
        .map(crate::views::worker)
        .filter(|w| w.live)
        .count() as u64;
    let health = Health {
        status: if live > 0 { "ok" } else { "degraded" }.into(),
        store: true,
        workers_live: live,
        queue_depth: crate::views::queue_depth(&stats),
        running: crate::views::running(&stats),
        error: None,
    };
    Json(health).into_response()
}

pub async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}
