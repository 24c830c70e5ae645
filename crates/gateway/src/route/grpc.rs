//! gRPC calls on the request path: which requests are gRPC calls, the
//! deadline a `grpc-timeout` sets, the gateway's own errors as answers a
//! gRPC client can read, the status an answer shows in its head, and when
//! a call may go to another member.
//!
//! A gRPC client reads an HTTP error with an HTML or JSON body as a broken
//! call (`UNKNOWN` or `INTERNAL`, the reason lost), so every error the
//! gateway itself produces for a gRPC call is a trailers-only answer: HTTP
//! 200, `content-type: application/grpc`, `grpc-status` and a
//! percent-encoded `grpc-message` in the head, and no body (over HTTP/2,
//! a HEADERS frame that ends the stream).
//!
//! Failover is stricter than for HTTP requests, because every call is a
//! `POST` and its failure travels in a status, not in a broken exchange
//! ([`may_fail_over`]).

use std::time::Duration;

use http::{HeaderValue, Method, Response, StatusCode, header};
use tokio::time::Instant;

use crate::route::response::{ResponseBody, full};
use crate::syntax::fields::Fields;
use crate::syntax::grpc::{self, Code, CodeSet, MethodPattern, TimeoutError};

/// What kind of request the gateway is answering, which decides the shape
/// of its own errors and the failover rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Any HTTP request but a gRPC call.
    Http,
    /// A gRPC call: a `POST` whose `content-type` is `application/grpc`,
    /// alone or followed by `+` or `;`.
    Grpc,
}

impl Kind {
    /// The kind of a request with `method` and the header `fields`. Every
    /// gRPC call is a `POST`, so a `GET` is told apart by one comparison
    /// before any field is looked at.
    #[inline]
    pub fn of(method: &Method, fields: &Fields) -> Kind {
        if method == Method::POST
            && fields
                .get("content-type")
                .is_some_and(grpc::is_grpc_content_type)
        {
            Kind::Grpc
        } else {
            Kind::Http
        }
    }
}

/// A gRPC call's deadline: `deadline` (`routing.request_timeout_ms` after
/// `started`), or sooner if the client's `grpc-timeout` says so. A
/// malformed `grpc-timeout` is an error: gRPC servers refuse the call
/// (grpc-go answers `INTERNAL`, the code the gRPC spec maps HTTP 400 to).
pub fn deadline(
    fields: &Fields,
    started: Instant,
    deadline: Instant,
) -> Result<Instant, TimeoutError> {
    let Some(value) = fields.get("grpc-timeout") else {
        return Ok(deadline);
    };
    let timeout = grpc::parse_timeout(value)?;
    Ok(started
        .checked_add(timeout)
        .map_or(deadline, |client| client.min(deadline)))
}

/// The `grpc-timeout` an attempt tells its shard: the time from `now` to
/// `until`, the moment the gateway stops waiting for the attempt.
pub fn remaining(until: Instant, now: Instant) -> grpc::PackedTimeout {
    grpc::pack_timeout(until.saturating_duration_since(now))
}

/// The HTTP status a gateway error sent as a gRPC answer stands for, kept
/// in the response's extensions so that metrics count the outcome as they
/// would for an HTTP request (`shuffle_requests_total{outcome}`), not as
/// the 200 it is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandsFor(pub StatusCode);

/// A gateway error as a trailers-only gRPC answer with `code` and
/// `message`, standing for the HTTP error `status`.
pub fn error(code: Code, message: &str, status: StatusCode) -> Response<ResponseBody> {
    let mut response = Response::new(full(bytes::Bytes::new()));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert(GRPC_STATUS, HeaderValue::from_static(code.field_value()));
    // Percent-encoded, it is printable ASCII: always a valid value.
    if let Ok(message) = HeaderValue::from_str(&grpc::percent_encode_message(message)) {
        headers.insert(GRPC_MESSAGE, message);
    }
    response.extensions_mut().insert(StandsFor(status));
    response
}

/// `grpc-status`.
const GRPC_STATUS: header::HeaderName = header::HeaderName::from_static("grpc-status");

/// `grpc-message`.
const GRPC_MESSAGE: header::HeaderName = header::HeaderName::from_static("grpc-message");

/// The gRPC status a response shows in its head, if it does: the
/// gateway's own errors, and a shard's trailers-only answers. (The status
/// of a call that streamed a body comes in trailers, after the request's
/// metrics were counted.)
pub fn status_in_head(response: &Response<ResponseBody>) -> Option<Code> {
    if let Some(own) = response.headers().get(GRPC_STATUS) {
        return Code::from_field(own.as_bytes());
    }
    response
        .body()
        .backend_fields()
        .and_then(|fields| status_in_fields(response.status(), fields))
}

/// The gRPC status a shard's answer with `status` and head `fields` shows
/// in its head: only an HTTP 200 carries a gRPC status.
pub fn status_in_fields(status: StatusCode, fields: &Fields) -> Option<Code> {
    if status != StatusCode::OK {
        return None;
    }
    fields.get("grpc-status").and_then(Code::from_field)
}

/// Whether a gRPC call to `path` may reach a shard more than once without
/// an idempotency key: its method is one of `routing.grpc_idempotent_methods`.
pub fn repeat_safe_method(methods: &[MethodPattern], path: &str) -> bool {
    methods.iter().any(|method| method.matches(path))
}

/// What [`may_fail_over`] decides from: how the last attempt ended, and
/// what the call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// The last attempt may have reached its shard (anything but a
    /// connection that was never made).
    pub sent: bool,
    /// The call may be repeated: its method is in
    /// `routing.grpc_idempotent_methods`, or it carries an idempotency key.
    pub repeat_safe: bool,
    /// Its request body can be sent again: buffered whole, a stream no
    /// attempt has taken yet, or one that had ended and was kept whole. A
    /// streaming body whose first message went out and that had not ended
    /// cannot.
    pub body_replayable: bool,
    /// The status the attempt ended with as a client would see it: the
    /// `grpc-status` in the head of the shard's answer (a trailers-only
    /// answer), `UNAVAILABLE` for a connection that broke before an answer,
    /// `DEADLINE_EXCEEDED` for a per-try timeout.
    pub answer: Option<Code>,
    /// `routing.retry_on_grpc_status`.
    pub retry_on: CodeSet,
}

/// Whether a gRPC call may go to another member after an attempt failed
/// (the retry budget, the deadline and failover being on are the caller's
/// to check, as for any request):
///
/// - never when its body cannot be sent again (a client-streaming or bidi
///   call whose first message went out);
/// - always when nothing was sent (the connection was never made);
/// - after sending, only when the call is safe to repeat *and* what it met
///   counts as a status in `routing.retry_on_grpc_status`: the shard's
///   `grpc-status` in its head, or, for a connection that broke before an
///   answer, `UNAVAILABLE`, and for a per-try timeout, `DEADLINE_EXCEEDED`
///   (what a gRPC client sees for them, and what gRPC's own retry policy
///   retries on); a call that is not safe to repeat is never sent twice.
pub fn may_fail_over(retry: Retry) -> bool {
    if !retry.body_replayable {
        return false;
    }
    if !retry.sent {
        return true;
    }
    retry.repeat_safe
        && retry
            .answer
            .is_some_and(|status| retry.retry_on.contains(status))
}

/// How long before `deadline` an attempt that started at `started` and may
/// run for `per_try` (when that is known: a buffered body) must end.
pub fn attempt_limit(deadline: Instant, started: Instant, per_try: Option<Duration>) -> Instant {
    per_try
        .and_then(|per_try| started.checked_add(per_try))
        .map_or(deadline, |limit| limit.min(deadline))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn fields(pairs: &[(&'static str, &'static str)]) -> Fields {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        Fields::from_header_map(&headers)
    }

    #[test]
    fn only_posts_with_a_grpc_content_type_are_grpc_calls() {
        let grpc = fields(&[("content-type", "application/grpc+proto")]);
        assert_eq!(Kind::of(&Method::POST, &grpc), Kind::Grpc);
        assert_eq!(Kind::of(&Method::GET, &grpc), Kind::Http);
        assert_eq!(Kind::of(&Method::PUT, &grpc), Kind::Http);
        let json = fields(&[("content-type", "application/json")]);
        assert_eq!(Kind::of(&Method::POST, &json), Kind::Http);
        assert_eq!(Kind::of(&Method::POST, &fields(&[])), Kind::Http);
    }

    #[test]
    fn grpc_timeout_shortens_the_deadline_and_never_lengthens_it() {
        let started = Instant::now();
        let request = started + Duration::from_secs(10);
        let with =
            |value: &'static str| deadline(&fields(&[("grpc-timeout", value)]), started, request);
        assert_eq!(deadline(&fields(&[]), started, request), Ok(request));
        assert_eq!(with("200m"), Ok(started + Duration::from_millis(200)));
        assert_eq!(with("1H"), Ok(request));
        assert_eq!(with("99999999H"), Ok(request));
        assert_eq!(with("0n"), Ok(started));
        assert_eq!(with("2 S"), Err(TimeoutError::NotDecimal));
        assert_eq!(with("2s"), Err(TimeoutError::Unit));
    }

    #[test]
    fn a_gateway_error_is_a_trailers_only_answer() {
        let response = error(
            Code::Unauthenticated,
            "no credential\r\nx: 100%",
            StatusCode::UNAUTHORIZED,
        );
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/grpc");
        assert_eq!(response.headers()["grpc-status"], "16");
        assert_eq!(
            response.headers()["grpc-message"],
            "no credential%0D%0Ax: 100%25"
        );
        assert!(hyper::body::Body::is_end_stream(response.body()));
        assert_eq!(
            response.extensions().get::<StandsFor>(),
            Some(&StandsFor(StatusCode::UNAUTHORIZED))
        );
        assert_eq!(status_in_head(&response), Some(Code::Unauthenticated));
    }

    #[test]
    fn a_shards_status_counts_only_in_a_200_head() {
        let unavailable = fields(&[("grpc-status", "14")]);
        assert_eq!(
            status_in_fields(StatusCode::OK, &unavailable),
            Some(Code::Unavailable)
        );
        assert_eq!(
            status_in_fields(StatusCode::BAD_GATEWAY, &unavailable),
            None
        );
        assert_eq!(status_in_fields(StatusCode::OK, &fields(&[])), None);
        assert_eq!(
            status_in_fields(StatusCode::OK, &fields(&[("grpc-status", "x")])),
            None
        );
    }

    /// The retry rules as a table: every combination that matters, and
    /// what is decided.
    #[test]
    fn the_failover_rules_for_grpc_calls() {
        let retry_on = CodeSet::of([Code::Unavailable]);
        let u = Some(Code::Unavailable);
        /// (case, sent, repeat_safe, body_replayable, answer, may fail over)
        type Case = (&'static str, bool, bool, bool, Option<Code>, bool);
        let cases: [Case; 12] = [
            ("connect failure, any call", false, false, true, None, true),
            ("connect failure, safe call", false, true, true, None, true),
            (
                "connect failure, stream already taken",
                false,
                true,
                false,
                None,
                false,
            ),
            ("UNAVAILABLE, safe method", true, true, true, u, true),
            ("UNAVAILABLE, not safe", true, false, true, u, false),
            (
                "UNAVAILABLE, safe but streaming body sent",
                true,
                true,
                false,
                u,
                false,
            ),
            (
                "INTERNAL, safe method",
                true,
                true,
                true,
                Some(Code::Internal),
                false,
            ),
            (
                "DEADLINE_EXCEEDED, safe method",
                true,
                true,
                true,
                Some(Code::DeadlineExceeded),
                false,
            ),
            ("OK, safe method", true, true, true, Some(Code::Ok), false),
            (
                "timeout or reset, safe method",
                true,
                true,
                true,
                None,
                false,
            ),
            ("timeout or reset, not safe", true, false, true, None, false),
            (
                "nothing sent, nothing replayable",
                false,
                false,
                false,
                None,
                false,
            ),
        ];
        for (case, sent, repeat_safe, body_replayable, answer, want) in cases {
            let decided = may_fail_over(Retry {
                sent,
                repeat_safe,
                body_replayable,
                answer,
                retry_on,
            });
            assert_eq!(decided, want, "{case}");
        }
        // The statuses are the configuration's.
        let aborted = Retry {
            sent: true,
            repeat_safe: true,
            body_replayable: true,
            answer: Some(Code::Aborted),
            retry_on,
        };
        assert!(!may_fail_over(aborted));
        assert!(may_fail_over(Retry {
            retry_on: CodeSet::of([Code::Aborted]),
            ..aborted
        }));
        assert!(!may_fail_over(Retry {
            answer: u,
            retry_on: CodeSet::EMPTY,
            ..aborted
        }));
    }

    #[test]
    fn repeat_safe_methods_come_from_the_configured_patterns() {
        let methods = [
            MethodPattern::parse("/pkg.Service/Get*").unwrap(),
            MethodPattern::parse("/pkg.Service/List").unwrap(),
        ];
        assert!(repeat_safe_method(&methods, "/pkg.Service/GetUser"));
        assert!(repeat_safe_method(&methods, "/pkg.Service/List"));
        assert!(!repeat_safe_method(&methods, "/pkg.Service/ListMore"));
        assert!(!repeat_safe_method(&methods, "/pkg.Service/Delete"));
        assert!(!repeat_safe_method(&[], "/pkg.Service/GetUser"));
    }

    #[test]
    fn an_attempt_ends_at_its_per_try_limit_or_the_deadline() {
        let now = Instant::now();
        let deadline = now + Duration::from_secs(1);
        assert_eq!(attempt_limit(deadline, now, None), deadline);
        assert_eq!(
            attempt_limit(deadline, now, Some(Duration::from_millis(300))),
            now + Duration::from_millis(300)
        );
        assert_eq!(
            attempt_limit(deadline, now, Some(Duration::from_secs(5))),
            deadline
        );
        assert_eq!(remaining(now, deadline).encoded().as_bytes(), b"0n");
    }
}
