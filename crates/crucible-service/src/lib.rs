//! The HTTP API over the queue, versioned under `/v1`: submit one task or a batch, read results
//! by long-poll or by a server-sent event stream, cancel, list workers; `/healthz`, `/metrics`
//! and the OpenAPI document at `/v1/openapi.json`.
//!
//! An API server holds no state of its own: every request reads or writes the [`Store`], so any
//! number of servers can stand in front of one Redis queue. Handlers call the synchronous store
//! on tokio's blocking pool.

pub mod api;
mod auth;
pub mod error;
mod events;
mod limits;
mod metrics;
pub mod openapi;
mod routes;
mod store;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use crucible_queue::Store;

pub use auth::Token;
pub use limits::Limits;
pub use routes::CLIENT_HEADER;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    store: store::StoreHandle,
    limits: Arc<Limits>,
    token: Option<Token>,
    http: metrics::HttpMetrics,
}

/// How a server is set up.
#[derive(Clone, Default)]
pub struct ServiceConfig {
    pub limits: Limits,
    /// The bearer token; required by [`check_bind`] on any non-loopback address.
    pub token: Option<String>,
    /// Pages served beside the API (the dashboard), which check the token themselves.
    pub pages: Option<Router>,
}

/// Why a server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("binding {0} (not loopback) needs a bearer token: pass --token or set CRUCIBLE_TOKEN")]
    TokenRequired(SocketAddr),
    #[error("the token is empty")]
    EmptyToken,
    #[error("cannot serve on {addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
}

/// Refuses an open door: a non-loopback bind without a token.
pub fn check_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), ServiceError> {
    match token {
        Some(t) if t.trim().is_empty() => Err(ServiceError::EmptyToken),
        Some(_) => Ok(()),
        None if addr.ip().is_loopback() => Ok(()),
        None => Err(ServiceError::TokenRequired(addr)),
    }
}

/// The whole API as one router.
pub fn router(store: Arc<Store>, config: ServiceConfig) -> Router {
    let state = AppState {
        store: store::StoreHandle::new(store),
        token: config.token.as_deref().map(Token::new),
        limits: Arc::new(config.limits.clone()),
        http: metrics::HttpMetrics::default(),
    };
    let doc = openapi::document(&config.limits);
    let task_limit = DefaultBodyLimit::max(config.limits.max_task_body_bytes());
    let batch_limit = DefaultBodyLimit::max(config.limits.max_batch_bytes);
    let api = Router::new()
        .route("/v1/tasks", post(routes::submit_task).layer(task_limit))
        .route("/v1/batches", post(routes::submit_batch).layer(batch_limit))
        .route("/v1/tasks/{id}", get(routes::get_task))
        .route("/v1/tasks/{id}/cancel", post(routes::cancel_task))
        .route("/v1/batches/{id}", get(routes::get_batch))
        .route("/v1/batches/{id}/cancel", post(routes::cancel_batch))
        .route("/v1/batches/{id}/events", get(events::batch_events))
        .route("/v1/workers", get(routes::list_workers))
        .route(
            "/v1/openapi.json",
            get(move || async move { axum::Json(doc.clone()) }),
        )
        .route("/healthz", get(routes::healthz))
        .route("/metrics", get(metrics::metrics))
        .fallback(routes::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::count_requests,
        ))
        .with_state(state);
    match config.pages {
        Some(pages) => api.merge(pages),
        None => api,
    }
}

/// Serves until `shutdown` resolves, then finishes the requests in flight.
pub async fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<Store>,
    config: ServiceConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServiceError> {
    let addr = listener.local_addr().map_err(|source| ServiceError::Io {
        addr: "listener".into(),
        source,
    })?;
    check_bind(addr, config.token.as_deref())?;
    let app = router(store, config);
    let (fired, shutting_down) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = fired.send(());
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(signal);
    // Event streams (a dashboard left open, a batch's results) and long polls never end by
    // themselves: after the signal they get a moment, then the server stops anyway.
    let cut_off = async move {
        match shutting_down.await {
            Ok(()) => tokio::time::sleep(SHUTDOWN_GRACE).await,
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        served = server => served.map_err(|source| ServiceError::Io {
            addr: addr.to_string(),
            source,
        }),
        () = cut_off => {
            tracing::info!("connections still open {SHUTDOWN_GRACE:?} after the shutdown signal were closed");
            Ok(())
        }
    }
}

/// How long open connections may take to finish after the shutdown signal.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);
