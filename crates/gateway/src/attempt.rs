//! One attempt: send the request to one shard with a timeout and classify
//! what happened, which decides whether the request may fail over.

use std::time::Duration;

use http::request::Parts;
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::body::RequestBody;
use crate::state::BackendClient;

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

/// The backend URI for a request: the shard's base URL (with any path
/// prefix) followed by the request's path and query.
pub fn backend_uri(base: &Uri, request: &Uri) -> Result<Uri, http::Error> {
    let prefix = base.path().trim_end_matches('/');
    let path_and_query = request.path_and_query().map_or("/", |pq| pq.as_str());
    let mut parts = http::uri::Parts::default();
    parts.scheme = base.scheme().cloned();
    parts.authority = base.authority().cloned();
    parts.path_and_query = Some(format!("{prefix}{path_and_query}").parse()?);
    Ok(Uri::from_parts(parts)?)
}

/// How many times one attempt may be resent because the connection it went
/// out on was closed by the backend before any answer. One is enough for
/// the keep-alive race (the dead connection is retired, and connections a
/// backend closes together are noticed together) and bounds what a backend
/// that always closes without answering receives to two copies; beyond
/// that, the usual failover rules (and the retry budget) apply.
const MAX_STALE_RESENDS: usize = 1;

/// Sends one attempt. `parts` is the prepared request head (headers
/// already cleaned); the caller sets the shard header.
///
/// The per-try timeout runs from the moment the whole request body has been
/// read from the client (at once for a buffered body), so a long upload is
/// not taken for a slow backend; `deadline` (the request's) bounds
/// everything.
///
/// When the request may be repeated (`safe_to_repeat`) and its body can be
/// sent again, a request that meets a connection the backend closed before
/// answering anything (an idle pooled connection the backend had just
/// dropped, or closed as the request arrived) is resent on another
/// connection to the same shard. That is not a failover and is not counted
/// as one: the backend never answered, and a keep-alive race is not a
/// failing shard.
pub async fn send(
    client: &BackendClient,
    base: &Uri,
    parts: &Parts,
    body: &RequestBody,
    per_try_timeout: Duration,
    deadline: Instant,
    safe_to_repeat: bool,
) -> Result<Response<Incoming>, Failure> {
    let uri = backend_uri(base, &parts.uri).map_err(|_| Failure::Connect)?;
    let mut resends = 0;
    loop {
        let mut request = Request::new(body.for_attempt());
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = uri.clone();
        *request.headers_mut() = parts.headers.clone();
        let result = tokio::select! {
            result = client.request(request) => result,
            () = time_limit(body, per_try_timeout, deadline) => return Err(Failure::Timeout),
        };
        let error = match result {
            Ok(response) => return Ok(response),
            Err(error) => error,
        };
        if error.is_connect() {
            // Also after a resend: the backend closed its connection without
            // answering and now refuses new ones, so it is down (a killed
            // process), and a request that may be repeated anyway fails
            // over as it would on any refused connection.
            return Err(Failure::Connect);
        }
        if safe_to_repeat
            && resends < MAX_STALE_RESENDS
            && closed_before_answering(&error)
            && body.replayable()
        {
            resends += 1;
            tracing::debug!(%uri, resends, "backend closed the connection before answering; resending on another connection");
            continue;
        }
        return Err(Failure::Reset);
    }
}

/// Completes when an attempt has run out of time: `per_try` after the
/// client's body has been read, or at `deadline`, whichever is first. One
/// timer is armed at a time; a buffered body has been read already, so it
/// needs only one.
async fn time_limit(body: &RequestBody, per_try: Duration, deadline: Instant) {
    if !body.is_buffered() {
        tokio::select! {
            () = body.uploaded() => {}
            () = tokio::time::sleep_until(deadline) => return,
        }
    }
    let per_try_deadline = Instant::now().checked_add(per_try).unwrap_or(deadline);
    tokio::time::sleep_until(per_try_deadline.min(deadline)).await;
}

/// Whether the backend closed the connection (EOF or reset) before sending
/// any of its response, as opposed to failing mid-response, the client's
/// body failing, or a protocol error.
fn closed_before_answering(error: &hyper_util::client::legacy::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(hyper_error) = cause.downcast_ref::<hyper::Error>() {
            if hyper_error.is_user() {
                // The request body (the client's) failed, not the connection.
                return false;
            }
            if hyper_error.is_incomplete_message() {
                return true;
            }
        }
        if let Some(io_error) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io_error.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        source = cause.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_uris_keep_prefix_path_and_query() {
        let base: Uri = "http://127.0.0.1:9100".parse().unwrap();
        let request: Uri = "/v1/items?x=1".parse().unwrap();
        assert_eq!(
            backend_uri(&base, &request).unwrap(),
            "http://127.0.0.1:9100/v1/items?x=1"
        );
        let prefixed: Uri = "http://127.0.0.1:9100/api/".parse().unwrap();
        assert_eq!(
            backend_uri(&prefixed, &request).unwrap(),
            "http://127.0.0.1:9100/api/v1/items?x=1"
        );
    }
}
