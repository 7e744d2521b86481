//! The API's bearer-token rule, for a browser: the token comes as `Authorization: Bearer …` or
//! as the `crucible_token` cookie that `/login` sets.

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
    [bearer, cookie]
        .into_iter()
        .flatten()
        .any(|given| same(given.as_bytes(), token.as_bytes()))
}

/// Compares in time that depends only on the lengths, not on where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
