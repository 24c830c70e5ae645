//! One attempt: send the request to one shard with a timeout and classify
//! what happened, which decides whether the request may fail over.

use std::time::Duration;

use http::request::Parts;
use http::{Request, Response, Uri};
use hyper::body::Incoming;

use crate::body::AttemptBody;
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

/// Sends one attempt. `parts` is the prepared request head (headers
/// already cleaned); the caller sets the shard header.
pub async fn send(
    client: &BackendClient,
    base: &Uri,
    parts: &Parts,
    body: AttemptBody,
    timeout: Duration,
) -> Result<Response<Incoming>, Failure> {
    let uri = backend_uri(base, &parts.uri).map_err(|_| Failure::Connect)?;
    let mut request = Request::new(body);
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = uri;
    *request.headers_mut() = parts.headers.clone();
    match tokio::time::timeout(timeout, client.request(request)).await {
        Err(_elapsed) => Err(Failure::Timeout),
        Ok(Err(error)) if error.is_connect() => Err(Failure::Connect),
        Ok(Err(_)) => Err(Failure::Reset),
        Ok(Ok(response)) => Ok(response),
    }
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
