//! The API's bearer-token rule, for a browser: the token comes as `Authorization: Bearer …` or
//! as the `crucible_token` cookie that `/login` sets; compared as the API compares it
//! ([`crucible_service::Token`]).

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};

pub const COOKIE_NAME: &str = "crucible_token";

/// Whether `headers` carry `token` (always true when the server has none).
pub fn allowed(headers: &HeaderMap, token: Option<&str>) -> bool {
    let Some(token) = token else {
        return true;
    };
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let cookie = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(COOKIE_NAME)?.strip_prefix('='))
        .next();
    let token = crucible_service::Token::new(token);
    [bearer, cookie]
        .into_iter()
        .flatten()
        .any(|given| token.matches(given))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(name: axum::http::HeaderName, value: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(name, HeaderValue::from_str(value).unwrap());
        map
    }

    #[test]
    fn token_by_header_or_cookie() {
        assert!(allowed(&HeaderMap::new(), None));
        assert!(!allowed(&HeaderMap::new(), Some("s3cret")));
        assert!(allowed(
            &headers(AUTHORIZATION, "Bearer s3cret"),
            Some("s3cret")
        ));
        assert!(!allowed(
            &headers(AUTHORIZATION, "Bearer s3cre"),
            Some("s3cret")
        ));
        assert!(allowed(
            &headers(COOKIE, "a=1; crucible_token=s3cret"),
            Some("s3cret")
        ));
        assert!(!allowed(
            &headers(COOKIE, "crucible_token=nope"),
            Some("s3cret")
        ));
    }
}
