//! The OpenAPI 3 document, derived from the handlers' annotations and the wire types.

use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

use crate::api::{
    BatchCancelOutcome, BatchSubmission, BatchSubmitted, BatchView, CancelOutcome, Health,
    InFlightView, JudgeOptionsBody, StateCounts, Submitted, TaskStateView, TaskSubmission,
    TaskView, WorkerView,
};
use crate::error::{ErrorBody, ErrorDetail};

#[derive(OpenApi)]
#[openapi(
    info(title = "Crucible", description = "The kernel judge as a service: queue evaluations, read verdicts."),
    paths(
        crate::routes::submit_task,
        crate::routes::submit_batch,
        crate::routes::get_task,
        crate::routes::cancel_task,
        crate::routes::get_batch,
        crate::routes::cancel_batch,
        crate::events::batch_events,
        crate::routes::list_workers,
        crate::routes::healthz,
        crate::metrics::metrics,
    ),
    components(schemas(
        TaskSubmission, JudgeOptionsBody, BatchSubmission, Submitted, BatchSubmitted, TaskView,
        TaskStateView, StateCounts, BatchView, CancelOutcome, BatchCancelOutcome, WorkerView, InFlightView, Health,
        ErrorBody, ErrorDetail
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
        }
    }
}

/// The document as served at `/v1/openapi.json`, with this server's own limits filled in.
pub fn document(limits: &crate::Limits) -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let wait_max = limits.max_wait.as_secs_f64();
    if let Some(params) = doc
        .pointer_mut("/paths/~1v1~1tasks~1{id}/get/parameters")
        .and_then(|p| p.as_array_mut())
    {
        for param in params.iter_mut().filter(|p| p["name"] == "wait") {
            param["schema"]["maximum"] = serde_json::json!(wait_max);
            param["description"] = serde_json::json!(format!(
                "Hold the request until the task is terminal or this many seconds passed (0..={wait_max})."
            ));
        }
    }
    doc
}
