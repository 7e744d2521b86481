//! Bearer-token check. The token is compared in constant time: both sides are hashed first, so
//! neither the content nor the length of the expected token leaks through timing.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::error::ApiError;

/// Paths anyone may read: load balancers probe health, and the API's description is public.
const OPEN_PATHS: &[&str] = &["/healthz", "/v1/openapi.json"];

/// The expected token, kept only as its digest.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl Token {
    pub fn new(secret: &str) -> Token {
        Token {
            digest: Sha256::digest(secret.as_bytes()).into(),
        }
    }

    /// Constant time in the presented value: every byte of both digests is looked at.
    pub fn matches(&self, presented: &str) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let diff = self
            .digest
            .iter()
            .zip(presented.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

pub async fn require_token(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let Some(token) = &app.token else {
        return next.run(request).await;
    };
    if OPEN_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(value) if token.matches(value) => next.run(request).await,
        _ => ApiError::unauthorized().into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::Token;

    #[test]
    fn only_the_exact_token_matches() {
        let token = Token::new("s3cret");
        assert!(token.matches("s3cret"));
        assert!(!token.matches("s3cre"));
        assert!(!token.matches("s3cret "));
        assert!(!token.matches(""));
    }
}
