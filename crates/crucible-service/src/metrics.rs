//! `GET /metrics` in Prometheus text format. Queue figures come from the store at scrape time
//! (every API server reports the same shared truth); HTTP request counts are this server's own.

use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::AppState;
use crate::error::ApiError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
}

/// This server's own counters.
#[derive(Clone, Default)]
pub struct HttpMetrics {
    pub requests: Family<HttpLabels, Counter>,
}

/// Counts every request by method, route template (never the raw path: ids would explode the
/// label set) and status.
pub async fn count_requests(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    app.http
        .requests
        .get_or_create(&HttpLabels {
            method,
            route,
            status: response.status().as_u16(),
        })
        .inc();
    response
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Priority {
    priority: i64,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Stage {
    stage: String,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    verdict: String,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabel {
    worker: String,
}

/// Prometheus metrics: queue depth by priority, per-stage latency, verdicts, restarts, cache.
#[utoipa::path(get, path = "/metrics",
    responses(
        (status = 200, description = "Prometheus text format", content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String),
        (status = 401, description = "missing or wrong bearer token", body = crate::error::ErrorBody),
        (status = 503, description = "store unavailable", body = crate::error::ErrorBody)),
    tag = "service")]
pub async fn metrics(State(app): State<AppState>) -> Result<Response, ApiError> {
    let stats = app.store.stats().await?;
    let workers = app.store.workers().await?;
    let mut registry = Registry::with_prefix("crucible");
    queue_metrics(&mut registry, &stats);
    worker_metrics(&mut registry, &workers);
    registry.register(
        "http_requests",
        "HTTP requests served by this API server",
        app.http.requests.clone(),
    );
    let mut text = String::new();
    encode(&mut text, &registry).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "encode_failed",
            e.to_string(),
        )
    })?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

fn gauge_family<L>(registry: &mut Registry, name: &str, help: &str, rows: Vec<(L, f64)>)
where
    L: Clone + std::fmt::Debug + std::hash::Hash + Eq + EncodeLabelSet + Send + Sync + 'static,
{
    let family = Family::<L, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    for (labels, value) in rows {
        family.get_or_create(&labels).set(value);
    }
    registry.register(name, help, family);
}

fn counter_family<L>(registry: &mut Registry, name: &str, help: &str, rows: Vec<(L, u64)>)
where
    L: Clone + std::fmt::Debug + std::hash::Hash + Eq + EncodeLabelSet + Send + Sync + 'static,
{
    let family = Family::<L, Counter>::default();
    for (labels, value) in rows {
        family.get_or_create(&labels).inc_by(value);
    }
    registry.register(name, help, family);
}

fn single_counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let counter = Counter::<u64>::default();
    counter.inc_by(value);
    registry.register(name, help, counter);
}

fn queue_metrics(registry: &mut Registry, stats: &crucible_queue::QueueStats) {
    let state = |state: &str| StateLabel {
        state: state.into(),
    };
    let queued = stats.queued_by_priority.iter().map(|(priority, n)| {
        let priority = i64::from(*priority);
        (Priority { priority }, *n as f64)
    });
    gauge_family(
        registry,
        "queue_depth",
        "Queued tasks by priority",
        queued.collect(),
    );
    gauge_family(
        registry,
        "tasks_running",
        "Tasks being evaluated",
        vec![(state("running"), stats.running as f64)],
    );
    counter_family(
        registry,
        "tasks_finished",
        "Tasks that reached a terminal state, by state",
        vec![
            (state("done"), stats.done),
            (state("cancelled"), stats.cancelled),
            (state("timeout"), stats.timeout),
        ],
    );
    counter_family(
        registry,
        "verdicts",
        "Results by verdict",
        stats
            .verdicts
            .iter()
            .map(|(v, n)| (VerdictLabel { verdict: v.clone() }, *n))
            .collect(),
    );
    gauge_family(
        registry,
        "stage_seconds_sum",
        "Seconds spent in each judge stage, summed over completed results",
        stats
            .stages
            .iter()
            .map(|(s, l)| (Stage { stage: s.clone() }, l.sum_s))
            .collect(),
    );
    gauge_family(
        registry,
        "stage_seconds_count",
        "Completed results that ran each judge stage",
        stats
            .stages
            .iter()
            .map(|(s, l)| (Stage { stage: s.clone() }, l.count as f64))
            .collect(),
    );
    single_counter(
        registry,
        "cache_hits",
        "Tasks answered from the result cache",
        stats.cache_hits,
    );
    single_counter(
        registry,
        "duplicates_shared",
        "Tasks that shared an in-flight duplicate's evaluation",
        stats.duplicates_shared,
    );
    single_counter(
        registry,
        "evaluations",
        "Evaluations completed by workers",
        stats.evaluations_completed,
    );
}

fn worker_metrics(registry: &mut Registry, workers: &[crucible_queue::WorkerStatus]) {
    let views: Vec<_> = workers.iter().cloned().map(crate::views::worker).collect();
    counter_family(
        registry,
        "worker_restarts",
        "Times a worker process was restarted by its supervisor",
        views
            .iter()
            .map(|w| {
                (
                    WorkerLabel {
                        worker: w.id.clone(),
                    },
                    w.restarts,
                )
            })
            .collect(),
    );
    gauge_family(
        registry,
        "workers_live",
        "Workers that sent a heartbeat recently",
        vec![(
            StateLabel {
                state: "live".into(),
            },
            views.iter().filter(|w| w.live).count() as f64,
        )],
    );
}
