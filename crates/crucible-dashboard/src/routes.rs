//! The dashboard's routes. Store calls are blocking; each runs on tokio's blocking pool.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION, SET_COOKIE,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Router, extract::Request};
use crucible_queue::{Listing, Store, TaskSummary, now_unix};
use crucible_result::EvalResult;
use futures_util::Stream;
use maud::{Markup, html};
use serde::Deserialize;

use crate::{auth, pages, view};

/// What the dashboard needs: the store, and the token the API requires (if any).
#[derive(Clone)]
pub struct Dashboard {
    pub store: Arc<Store>,
    pub token: Option<String>,
}

/// Rows the home page's "latest" table shows.
const LATEST: usize = 20;
/// Rows the integrity page lists.
const INTEGRITY_ROWS: usize = 200;
/// The most rows one list page renders.
const MAX_ROWS: usize = 10_000;
/// How often the live sections are sent again.
const LIVE_EVERY: Duration = Duration::from_secs(1);

/// The dashboard's routes: `/`, `/evaluations[/ID]`, `/integrity`, `/tasks[/NAME]`, `/login`, and
/// under `/dashboard/` its event stream and assets. Every route but `/login` and the assets
/// needs the token when the server has one.
pub fn router(dashboard: Dashboard) -> Router {
    let guarded = Router::new()
        .route("/", get(home))
        .route("/evaluations", get(evaluations))
        .route("/evaluations/{id}", get(evaluation))
        .route("/integrity", get(integrity))
        .route("/tasks", get(tasks))
        .route("/tasks/{name}", get(task))
        .route("/dashboard/events", get(events))
        .route_layer(middleware::from_fn_with_state(
            dashboard.clone(),
            require_token,
        ));
    Router::new()
        .merge(guarded)
        .route("/login", get(login))
        .route("/dashboard/assets/{file}", get(asset))
        .layer(middleware::from_fn(security_headers))
        .with_state(dashboard)
}

async fn require_token(State(d): State<Dashboard>, request: Request, next: Next) -> Response {
    if auth::allowed(request.headers(), d.token.as_deref()) {
        return next.run(request).await;
    }
    let page = pages::layout(
        "Token required",
        false,
        html! {
            p { "This server requires its bearer token." }
            form method="get" action="/login" {
                input type="password" name="token" placeholder="token" autofocus;
                button { "Sign in" }
            }
        },
    );
    (StatusCode::UNAUTHORIZED, page).into_response()
}

/// Scripts only from this server, no inline script, no framing: a hostile string that slipped
/// past escaping still could not run.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    );
    response
}

#[derive(Deserialize)]
struct LoginQuery {
    token: String,
}

async fn login(State(d): State<Dashboard>, Query(q): Query<LoginQuery>) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(LOCATION, HeaderValue::from_static("/"));
    if d.token
        .as_deref()
        .is_some_and(|token| crucible_service::Token::new(token).matches(&q.token))
        && let Ok(cookie) = HeaderValue::from_str(&format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            auth::COOKIE_NAME,
            q.token
        ))
    {
        headers.insert(SET_COOKIE, cookie);
    }
    (StatusCode::SEE_OTHER, headers).into_response()
}

async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "dashboard.js" => (include_str!("../assets/dashboard.js"), "text/javascript"),
        "dashboard.css" => (include_str!("../assets/dashboard.css"), "text/css"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(CONTENT_TYPE, kind), (CACHE_CONTROL, "max-age=300")], body).into_response()
}

/// A store failure, shown as a page (never a panic, never a blank 500).
fn store_error(error: impl std::fmt::Display) -> Response {
    let page = pages::layout(
        "Store unavailable",
        false,
        html! { p { "The store did not answer: " (error.to_string()) } },
    );
    (StatusCode::SERVICE_UNAVAILABLE, page).into_response()
}

/// Runs blocking store work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> crucible_queue::Result<T> + Send + 'static,
) -> Result<T, Response> {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(store_error(error)),
        Err(join) => Err(store_error(join)),
    }
}

fn listing(limit: usize) -> Listing {
    Listing {
        limit,
        ..Listing::default()
    }
}

async fn home_sections(d: &Dashboard) -> Result<pages::HomeSections, Response> {
    let store = d.store.clone();
    blocking(move || {
        let now = now_unix();
        let stats = store.stats()?;
        let workers = store.workers()?;
        // On a store that cannot list (Redis), the live page still shows the queue and workers.
        let hour =
            view::Window::from_counts(&unless_unsupported(store.finished_counts(now - 3600.0))?);
        let latest: Vec<TaskSummary> = unless_unsupported(store.recent(&listing(LATEST)))?;
        Ok(pages::HomeSections::render(
            &stats, &workers, &hour, &latest, now,
        ))
    })
    .await
}

fn unless_unsupported<T: Default>(outcome: crucible_queue::Result<T>) -> crucible_queue::Result<T> {
    match outcome {
        Err(crucible_queue::QueueError::Unsupported(_)) => Ok(T::default()),
        other => other,
    }
}

async fn home(State(d): State<Dashboard>) -> Response {
    match home_sections(&d).await {
        Ok(sections) => pages::home(&sections).into_response(),
        Err(response) => response,
    }
}

async fn events(State(d): State<Dashboard>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = futures_util::stream::unfold((d, true), |(d, first)| async move {
        if !first {
            tokio::time::sleep(LIVE_EVERY).await;
        }
        let event = match home_sections(&d).await {
            Ok(sections) => Event::default()
                .event("home")
                .data(sections.to_json().to_string()),
            Err(_) => Event::default()
                .event("unavailable")
                .data("the store did not answer"),
        };
        Some((Ok(event), (d, false)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(Deserialize)]
struct Rows {
    limit: Option<usize>,
}

async fn evaluations(State(d): State<Dashboard>, Query(q): Query<Rows>) -> Response {
    let limit = q.limit.unwrap_or(500).clamp(1, MAX_ROWS);
    let store = d.store.clone();
    match blocking(move || store.recent(&listing(limit))).await {
        Ok(rows) => pages::evaluations(&rows, now_unix(), limit).into_response(),
        Err(response) => response,
    }
}

async fn evaluation(State(d): State<Dashboard>, Path(id): Path<String>) -> Response {
    let store = d.store.clone();
    let found = blocking(move || Ok((store.task(&id)?, store.spec(&id).ok().flatten()))).await;
    match found {
        Ok((Some(record), spec)) => {
            let result: Option<EvalResult> = record
                .result
                .clone()
                .and_then(|doc| serde_json::from_value(doc).ok());
            pages::evaluation(&record, spec.as_ref(), result.as_ref()).into_response()
        }
        Ok((None, _)) => not_found("No such evaluation."),
        Err(response) => response,
    }
}

fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        pages::layout("Not found", false, html! { p { (what) } }),
    )
        .into_response()
}

async fn integrity(State(d): State<Dashboard>) -> Response {
    let store = d.store.clone();
    let found = blocking(move || {
        let rows = store.recent(&Listing {
            limit: INTEGRITY_ROWS,
            with_findings: true,
            ..Listing::default()
        })?;
        let lines = offending_lines(&store, &rows)?;
        Ok((rows, lines))
    })
    .await;
    match found {
        Ok((rows, lines)) => {
            pages::integrity(&rows, &view::findings_by_code(&rows), &lines).into_response()
        }
        Err(response) => response,
    }
}

/// The source lines the findings point at, keyed by (task id, line).
fn offending_lines(
    store: &Store,
    rows: &[TaskSummary],
) -> crucible_queue::Result<BTreeMap<(String, u32), String>> {
    let mut lines = BTreeMap::new();
    for row in rows {
        let wanted: Vec<u32> = view::integrity_findings(row)
            .filter_map(|f| f.line)
            .collect();
        if wanted.is_empty() {
            continue;
        }
        let Some(spec) = store.spec(&row.id)? else {
            continue;
        };
        let source: Vec<&str> = spec.candidate_source.lines().collect();
        for line in wanted {
            if let Some(text) = source.get(line.saturating_sub(1) as usize) {
                lines.insert((row.id.clone(), line), text.trim_end().to_string());
            }
        }
    }
    Ok(lines)
}

async fn tasks(State(d): State<Dashboard>) -> Response {
    let store = d.store.clone();
    match blocking(move || store.recent(&listing(usize::MAX))).await {
        Ok(rows) => pages::tasks(&view::standings(&rows)).into_response(),
        Err(response) => response,
    }
}

async fn task(State(d): State<Dashboard>, Path(name): Path<String>) -> Response {
    let store = d.store.clone();
    let wanted = name.clone();
    let found = blocking(move || {
        store.recent(&Listing {
            limit: usize::MAX,
            task_name: Some(wanted),
            ..Listing::default()
        })
    })
    .await;
    match found {
        Ok(rows) => {
            let standings = view::standings(&rows);
            let board = view::leaderboard(&rows);
            page_or_404(
                &rows,
                pages::task(&name, &board, standings.get(&name), now_unix()),
            )
        }
        Err(response) => response,
    }
}

fn page_or_404(rows: &[TaskSummary], page: Markup) -> Response {
    if rows.is_empty() {
        not_found("No evaluation of this task yet.")
    } else {
        page.into_response()
    }
}
