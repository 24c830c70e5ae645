//! One attempt: send the request to one shard with a timeout and classify
//! what happened, which decides whether the request may fail over.

use std::borrow::Cow;
use std::time::Duration;

use http::{Response, Uri};
use tokio::time::Instant;

use crate::body::RequestBody;
use crate::state::ShardRuntime;
use crate::upstream::{SendError, Timeouts, UpstreamBody};
use crate::wire::RequestHead;

/// How an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No connection could be made: nothing was sent, so any request may go
    /// to another shard.
    Connect,
    /// No response head within the per-try timeout.
    Timeout,
    /// The connection broke after the request started.
    Reset,
    /// The backend answered with a status configured as retryable.
    Status(u16),
}

impl Failure {
    /// Whether the backend may have received the request.
    pub fn maybe_sent(self) -> bool {
        !matches!(self, Failure::Connect)
    }

    /// A short lowercase name for metrics.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Timeout => "timeout",
            Failure::Reset => "reset",
            Failure::Status(_) => "status",
        }
    }
}

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

/// How many times one attempt may be resent because the connection it went
/// out on was closed by the backend before any answer. One is enough for
/// the keep-alive race (the dead connection is retired, and connections a
/// backend closes together are noticed together) and bounds what a backend
/// that always closes without answering receives to two copies; beyond
/// that, the usual failover rules (and the retry budget) apply.
const MAX_STALE_RESENDS: usize = 1;

/// When an attempt started and how long it may run.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// When the attempt started: a clock reading the caller already took.
    pub started: Instant,
    /// The per-try timeout.
    pub per_try: Duration,
    /// The request's overall deadline.
    pub deadline: Instant,
    /// How long the response body may wait for the backend's next bytes.
    pub body_idle: Duration,
    /// How long the response body may wait on the backend in all, if
    /// limited.
    pub body_total: Option<Duration>,
}

/// Sends one attempt of the client's request to `uri`: `client` is its
/// head as every attempt sends it, to which this shard's target, `Host` and
/// `x-shuffle-shard` are set here.
///
/// The per-try timeout runs from the moment the whole request body has been
/// read from the client (the attempt's start, for a buffered body), so a
/// long upload is not taken for a slow backend; the request's deadline
/// bounds everything.
///
/// When the request may be repeated (`safe_to_repeat`) and its body can be
/// sent again, a request that meets a connection the backend closed before
/// answering anything (an idle pooled connection the backend had just
/// dropped, or closed as the request arrived) is resent on another
/// connection to the same shard. That is not a failover and is not counted
/// as one: the backend never answered, and a keep-alive race is not a
/// failing shard.
pub async fn send(
    shard: &ShardRuntime,
    client: RequestHead<'_>,
    uri: &Uri,
    body: &RequestBody,
    timing: Timing,
    safe_to_repeat: bool,
) -> Result<Response<UpstreamBody>, Failure> {
    let target = backend_target(&shard.path_prefix, uri);
    let request = RequestHead {
        target: &target,
        host: shard.host_header.as_ref(),
        shard: shard.id_header.as_ref(),
        ..client
    };
    let timeouts = Timeouts {
        connect: timing.per_try,
        body_idle: timing.body_idle,
        body_total: timing.body_total,
    };
    let mut resends = 0;
    loop {
        let result = tokio::select! {
            // The exchange first: polling in a fixed order spares drawing a
            // random one on every poll, and a response that is ready wins.
            biased;
            result = shard.upstream.send(request, body.for_attempt(), timeouts, timing.started) => result,
            () = time_limit(body, timing) => return Err(Failure::Timeout),
        };
        let error = match result {
            Ok(response) => return Ok(response),
            Err(SendError::Connect) => return Err(Failure::Connect),
            Err(SendError::NotSent) => {
                // A brand-new connection that closed before taking the
                // request: the backend accepts connections and drops them,
                // which is as good as refusing them.
                if resends >= MAX_STALE_RESENDS {
                    return Err(Failure::Connect);
                }
                resends += 1;
                continue;
            }
            Err(SendError::Exchange(error)) => error,
        };
        if safe_to_repeat
            && resends < MAX_STALE_RESENDS
            && error.closed_before_answering()
            && body.replayable()
        {
            resends += 1;
            tracing::debug!(shard = %shard.id, resends, "backend closed the connection before answering; resending on another connection");
            continue;
        }
        return Err(Failure::Reset);
    }
}

/// Completes when an attempt has run out of time: the per-try timeout
/// after the client's body has been read (for a buffered body, which has
/// been read already, after the attempt's start), or at the request's
/// deadline, whichever is first. One timer is armed at a time.
async fn time_limit(body: &RequestBody, timing: Timing) {
    let Timing {
        started,
        per_try,
        deadline,
        ..
    } = timing;
    let uploaded = if body.is_buffered() {
        started
    } else {
        tokio::select! {
            () = body.uploaded() => {}
            () = tokio::time::sleep_until(deadline) => return,
        }
        Instant::now()
    };
    let per_try_deadline = uploaded.checked_add(per_try).unwrap_or(deadline);
    tokio::time::sleep_until(per_try_deadline.min(deadline)).await;
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
