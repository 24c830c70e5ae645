//! Request targets toward a shard: the shard's path prefix put before the
//! client's path, and the check that keeps a target under that prefix.

use std::borrow::Cow;

use http::Uri;

/// The origin-form target a backend receives: the shard's path prefix
/// (its URL's path without the trailing `/`) followed by the request's path
/// and query.
pub fn backend_target<'a>(prefix: &str, request: &'a Uri) -> Cow<'a, str> {
    let path_and_query = request.path_and_query().map_or("/", |pq| pq.as_str());
    if prefix.is_empty() {
        // The common case: the request's own path and query, borrowed.
        Cow::Borrowed(path_and_query)
    } else {
        Cow::Owned(format!("{prefix}{path_and_query}"))
    }
}

/// Whether a request target can be put behind a shard's path prefix
/// without leaving it: an origin-form (or absolute-form) target whose path
/// has no dot-segment, raw or percent-encoded in any case, with `/`, `\`,
/// `%2f` and `%5c` all taken as separators, as some backends take them.
/// `/api` + `/../admin` is `/admin` to any backend that resolves
/// dot-segments, and `*` or an authority-form target has no path to put
/// the prefix before. (nginx answers such targets 400 too.) The query is
/// not a path and is not looked at.
pub fn stays_under_prefix(request: &Uri) -> bool {
    let Some(path_and_query) = request.path_and_query() else {
        // Authority-form (`host:port`): no path at all.
        return request.scheme().is_some();
    };
    let path = path_and_query.path();
    if !path.starts_with('/') {
        // `*` and anything else that is not a path.
        return false;
    }
    if !path.contains(['.', '%']) {
        return true;
    }
    if has_ambiguous_escape(path) {
        return false;
    }
    let decoded = decode_separators_and_dots(path);
    // Servlet containers (Tomcat, Jetty) and Spring drop a segment's
    // `;parameters` before resolving it: `/..;/` is `/../` to them.
    !decoded
        .split(['/', '\\'])
        .map(|segment| segment.split(';').next().unwrap_or(segment))
        .any(|segment| segment == "." || segment == "..")
}

/// Whether `path` holds an escape some backend decodes into a dot or a
/// separator that a single decoding does not show: an escaped `%`
/// (`%252e`, for a backend that decodes twice), a NUL (`%00`, which ends a
/// path in C), IIS's `%u002e`, or an overlong UTF-8 sequence (`%c0%ae`,
/// `%e0%80%ae`, `%f0%80%80%ae`), which old decoders took for `.`. A path
/// that needs any of these has no business under a prefix.
fn has_ambiguous_escape(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    ["%25", "%00", "%u", "%c0", "%c1", "%e0%8", "%e0%9", "%f0%8"]
        .iter()
        .any(|escape| lower.contains(escape))
}

/// `path` with `%2e`, `%2f`, `%5c` and `%3b` (any case) decoded: the only
/// escapes that can make a dot-segment, a separator or the start of a
/// segment's parameters.
fn decode_separators_and_dots(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut decoded = String::with_capacity(path.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' && at + 2 < bytes.len() {
            let escaped = match (bytes[at + 1], bytes[at + 2].to_ascii_lowercase()) {
                (b'2', b'e') => Some('.'),
                (b'2', b'f') => Some('/'),
                (b'5', b'c') => Some('\\'),
                (b'3', b'b') => Some(';'),
                _ => None,
            };
            if let Some(escaped) = escaped {
                decoded.push(escaped);
                at += 3;
                continue;
            }
        }
        decoded.push(char::from(bytes[at]));
        at += 1;
    }
    decoded
}

/// A shard URL's path prefix, as [`backend_target`] takes it.
pub fn path_prefix(base: &Uri) -> &str {
    base.path().trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_targets_keep_prefix_path_and_query() {
        let request: Uri = "/v1/items?x=1".parse().unwrap();
        assert_eq!(backend_target("", &request), "/v1/items?x=1");
        let prefixed: Uri = "http://127.0.0.1:9100/api/".parse().unwrap();
        assert_eq!(path_prefix(&prefixed), "/api");
        assert_eq!(
            backend_target(path_prefix(&prefixed), &request),
            "/api/v1/items?x=1"
        );
        // An absolute-form request target still reaches the backend in
        // origin form.
        let absolute: Uri = "http://gateway.example/v1/items?x=1".parse().unwrap();
        assert_eq!(backend_target("", &absolute), "/v1/items?x=1");
        let bare: Uri = "http://gateway.example".parse().unwrap();
        assert_eq!(backend_target("", &bare), "/");
        assert_eq!(backend_target("/api", &bare), "/api/");
    }

    #[test]
    fn targets_that_would_leave_a_prefix_are_refused() {
        for bad in [
            "/../admin/secret",
            "/a/../../admin",
            "/%2e%2e/admin",
            "/%2E%2e/admin",
            "/.%2e/admin",
            "/./x",
            "/a/%2e/b",
            "/a/.",
            "/..%2fadmin",
            "/..%2Fadmin",
            "/..%5cadmin",
            "/..;/admin",
            "/a/..;/admin",
            "/.;/admin",
            "/..%3b/admin",
            "/%252e%252e/admin",
            "/%c0%ae%c0%ae/admin",
            "/%e0%80%ae%e0%80%ae/admin",
            "/%u002e%u002e/admin",
            "/..%00/admin",
            "*",
            "127.0.0.1:80",
        ] {
            let uri: Uri = bad.parse().unwrap();
            assert!(!stays_under_prefix(&uri), "{bad} was accepted");
        }
        for good in [
            "/",
            "/v1/items?x=..%2f",
            "/a..b/c",
            "/.well-known/x",
            "/a/...",
            "/a;b/c",
            "/%e0%a4%85/x",
            "/caf%c3%a9",
            "/..a;/b",
            "/%2e%2e%2e/x",
            "/%41",
            "/trailing%2",
            "http://gateway.example/v1",
        ] {
            let uri: Uri = good.parse().unwrap();
            assert!(stays_under_prefix(&uri), "{good} was refused");
        }
    }
}
