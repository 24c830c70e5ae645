//! The HTTP client the drill's API clients share (the gateway's admin API,
//! a test shard's control API): one base URL, each call answered with its
//! status and whole body, and its failures told apart so that each client
//! words them for its own flag.

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// An HTTP API at one base URL.
#[derive(Clone)]
pub(crate) struct Api {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// Why a call got no whole answer.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The base URL and path make no valid request.
    Request(http::Error),
    /// Nothing answered (refused, reset, no such host).
    Unreachable(hyper_util::client::legacy::Error),
    /// The answer's body broke off.
    Body(hyper::Error),
    /// No whole answer within [`CALL_TIMEOUT`]: a stalled API must not
    /// stall whoever waits on it (a rollout holding a wave drained).
    Timeout,
}

/// The longest one call may take, answer and body.
pub(crate) const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

impl Api {
    /// The API at `base` (e.g. `http://127.0.0.1:9901`; a trailing `/` is
    /// dropped, since every path starts with one).
    pub(crate) fn new(base: &Uri) -> Self {
        Self {
            base: base.to_string().trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// The base URL, without a trailing `/`.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// `method` on `path` (from `/`) with one `header` and `body`: the
    /// status and the whole body.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        header: (&str, &str),
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), CallError> {
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(header.0, header.1)
            .body(Full::new(body))
            .map_err(CallError::Request)?;
        let whole = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(CallError::Unreachable)?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(CallError::Body)?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(CALL_TIMEOUT, whole)
            .await
            .unwrap_or(Err(CallError::Timeout))
    }
}
