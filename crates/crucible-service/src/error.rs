//! The one error shape every endpoint answers with: `{"error": {"code", "message"}}`.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// A machine-readable code and a sentence for people.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, snake_case: `malformed_json`, `invalid_field`, `payload_too_large`, `not_found`,
    /// `unauthorized`, `store_unavailable`, ...
    pub code: String,
    pub message: String,
}

/// An HTTP error answer; bad input is always a 4xx, only the store being down is a 5xx.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_field", message)
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid `Authorization: Bearer <token>` header is required",
        )
    }

    pub fn store(err: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("the queue store failed: {err}"),
        )
    }

    /// A JSON body that does not parse is a 400; one that parses but has a wrong or unknown
    /// field is a 422.
    pub fn from_json(err: &serde_json::Error) -> ApiError {
        match err.classify() {
            serde_json::error::Category::Data => ApiError::invalid(err.to_string()),
            _ => ApiError::bad_request("malformed_json", format!("the body is not JSON: {err}")),
        }
    }

    /// axum's own extractor failures (body too large, bad path or query) keep their status.
    pub fn from_rejection(status: StatusCode, text: String) -> ApiError {
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid_field",
            s if s.is_client_error() => "bad_request",
            _ => "request_failed",
        };
        ApiError::new(status, code, text)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::BytesRejection) -> ApiError {
        ApiError::from_rejection(rejection.status(), rejection.body_text())
    }
}

impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::PathRejection) -> ApiError {
        ApiError::from_rejection(rejection.status(), rejection.body_text())
    }
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> ApiError {
        ApiError::from_rejection(StatusCode::BAD_REQUEST, rejection.body_text())
    }
}
