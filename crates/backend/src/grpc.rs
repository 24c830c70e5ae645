//! The backend as a gRPC shard (`--protocol grpc`): HTTP/2 with prior
//! knowledge (h2c) serving the standard `grpc.health.v1.Health` service and
//! a small demo service, `shuffle.demo.Echo`, whose messages and service
//! are written by hand (prost derive, tonic's server machinery), so no
//! `protoc` and no build script are needed:
//!
//! ```proto
//! package shuffle.demo;
//! message Note { string text = 1; }
//! message Answer { string shard = 1; string tenant = 2; string text = 3; uint32 index = 4; }
//! message CountRequest { uint32 n = 1; }
//! service Echo {
//!   rpc Unary(Note) returns (Answer);                 // one answer, naming the shard
//!   rpc Count(CountRequest) returns (stream Answer);  // n answers, index 0..n
//! }
//! ```
//!
//! The modes act out what makes sense for gRPC ([`Protocol::acts_out`]):
//! `killed`, `flapping` and `crash-on-poison` (the `x-poison` metadata) as
//! for HTTP, since the supervisor owns the listener; `blackhole` and
//! `slow` on every call, health checks included; `errors:STATUS:RATE`
//! answers that share of calls (health checks included) with the gRPC
//! status the gRPC spec maps the HTTP status to (503 → `UNAVAILABLE`);
//! `reset` sends a call's head and then resets its stream; `unread` holds
//! connections unread. The byte-level HTTP/1.1 modes (stalled and trickled
//! bodies, broken health answers) are refused.

use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{Request, Response};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use thiserror::Error;
use tokio::net::TcpStream;
use tonic::codegen::{BoxFuture, Service};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

use crate::{Mode, POISON_HEADER, Seen, Shared};

/// What a backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// HTTP/1.1: every request answered with a small JSON body.
    #[default]
    Http1,
    /// gRPC over h2c: the health service and `shuffle.demo.Echo`.
    Grpc,
}

/// The `--protocol` spellings, for help texts and error messages.
pub const PROTOCOL_SYNTAX: &str = "http1, grpc";

impl Protocol {
    /// Whether a backend speaking this protocol can act `mode` out.
    pub fn acts_out(self, mode: &Mode) -> bool {
        match self {
            Self::Http1 => true,
            // The data store is HTTP's methods on paths: no gRPC call is one.
            Self::Grpc => (!mode.is_raw() && *mode != Mode::DataStore) || *mode == Mode::Unread,
        }
    }
}

/// A protocol name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0:?} is not a protocol; use one of {PROTOCOL_SYNTAX}")]
pub struct ParseProtocolError(String);

impl FromStr for Protocol {
    type Err = ParseProtocolError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "http1" => Ok(Self::Http1),
            "grpc" => Ok(Self::Grpc),
            _ => Err(ParseProtocolError(text.to_owned())),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Http1 => "http1",
            Self::Grpc => "grpc",
        })
    }
}

/// A mode a gRPC backend cannot act out.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "mode {mode} is HTTP/1.1 byte-level misbehaviour a gRPC backend cannot act out; \
     with --protocol grpc use healthy, killed, blackhole, slow:MS, errors:STATUS:RATE, \
     flapping:MS, reset, unread or crash-on-poison[:MS]"
)]
pub struct UnsupportedMode {
    /// The mode's spelling.
    pub mode: String,
}

// ---- The demo service's messages -------------------------------------------

/// `shuffle.demo.Note`: what `Unary` takes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Note {
    /// Echoed back in the answer.
    #[prost(string, tag = "1")]
    pub text: String,
}

/// `shuffle.demo.Answer`: what the demo service answers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Answer {
    /// The shard that answered.
    #[prost(string, tag = "1")]
    pub shard: String,
    /// The tenant the gateway said it was serving (`x-shuffle-tenant`).
    #[prost(string, tag = "2")]
    pub tenant: String,
    /// The request's text.
    #[prost(string, tag = "3")]
    pub text: String,
    /// The answer's position in a `Count` stream (0 for `Unary`).
    #[prost(uint32, tag = "4")]
    pub index: u32,
}

/// `shuffle.demo.CountRequest`: what `Count` takes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CountRequest {
    /// How many answers to stream.
    #[prost(uint32, tag = "1")]
    pub n: u32,
}

/// The unary method's path.
pub const UNARY: &str = "/shuffle.demo.Echo/Unary";
/// The server-streaming method's path.
pub const COUNT: &str = "/shuffle.demo.Echo/Count";
/// The most answers one `Count` streams, so a call cannot ask for a flood.
pub const MAX_COUNT: u32 = 10_000;

/// The tenant the gateway named in a call's metadata.
fn tenant_of(metadata: &tonic::metadata::MetadataMap) -> String {
    metadata
        .get("x-shuffle-tenant")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

struct Unary(Arc<Shared>);

impl tonic::server::UnaryService<Note> for Unary {
    type Response = Answer;
    type Future = BoxFuture<tonic::Response<Answer>, Status>;

    fn call(&mut self, request: tonic::Request<Note>) -> Self::Future {
        let shard = self.0.id.clone();
        Box::pin(async move {
            let tenant = tenant_of(request.metadata());
            let text = request.into_inner().text;
            Ok(tonic::Response::new(Answer {
                shard,
                tenant,
                text,
                index: 0,
            }))
        })
    }
}

type Answers = Pin<Box<dyn futures_util::Stream<Item = Result<Answer, Status>> + Send + 'static>>;

struct Count(Arc<Shared>);

impl tonic::server::ServerStreamingService<CountRequest> for Count {
    type Response = Answer;
    type ResponseStream = Answers;
    type Future = BoxFuture<tonic::Response<Answers>, Status>;

    fn call(&mut self, request: tonic::Request<CountRequest>) -> Self::Future {
        let shard = self.0.id.clone();
        Box::pin(async move {
            let tenant = tenant_of(request.metadata());
            let n = request.into_inner().n;
            if n > MAX_COUNT {
                return Err(Status::invalid_argument(format!(
                    "n = {n} is more than the {MAX_COUNT} answers one Count streams; ask for fewer"
                )));
            }
            let answers = futures_util::stream::iter((0..n).map(move |index| {
                Ok(Answer {
                    shard: shard.clone(),
                    tenant: tenant.clone(),
                    text: String::new(),
                    index,
                })
            }));
            Ok(tonic::Response::new(Box::pin(answers) as Answers))
        })
    }
}

// ---- Serving ------------------------------------------------------------------

/// Serves one connection as h2c: the mode first, then the health service,
/// the demo service, or `UNIMPLEMENTED`.
pub(crate) async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let (reporter, health) = tonic_health::server::health_reporter();
    // The empty service name is the whole server, which the gateway's
    // `health.grpc` check asks about; the demo service by name as well.
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("shuffle.demo.Echo", tonic_health::ServingStatus::Serving)
        .await;
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (shared, health) = (Arc::clone(&shared), health.clone());
        handle(shared, health, request)
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn handle<H>(
    shared: Arc<Shared>,
    mut health: H,
    request: Request<Incoming>,
) -> Result<Response<tonic::body::Body>, Infallible>
where
    H: Service<Request<Incoming>, Response = Response<tonic::body::Body>, Error = Infallible>,
{
    let path = request.uri().path().to_owned();
    let is_health = path.starts_with("/grpc.health.v1.Health/");
    if !is_health {
        shared.note(|| Seen {
            method: request.method().to_string(),
            path: path.clone(),
            headers: request
                .headers()
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            // The body is tonic's to read, message by message.
            body_len: 0,
        });
    }
    match shared.mode() {
        Mode::CrashOnPoison(_) if !is_health && request.headers().contains_key(POISON_HEADER) => {
            shared.crash().await;
        }
        Mode::Blackhole => std::future::pending::<()>().await,
        Mode::Slow(delay) => tokio::time::sleep(delay).await,
        Mode::Errors { status, rate } if fastrand::f64() < rate => {
            let code = code_for_http_status(status);
            return Ok(
                Status::new(code, format!("injected: HTTP {status} as {code:?}")).into_http(),
            );
        }
        Mode::ResetMidResponse if !is_health => {
            // The head goes out, then the body fails: hyper resets the
            // stream (RST_STREAM), as a shard that breaks mid-call would.
            let mut response = Response::new(tonic::body::Body::new(BrokenBody));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            return Ok(response);
        }
        _ => {}
    }
    if is_health {
        return health.call(request).await;
    }
    Ok(match path.as_str() {
        UNARY => {
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Answer, Note>::default());
            grpc.unary(Unary(shared), request).await
        }
        COUNT => {
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Answer, CountRequest>::default());
            grpc.server_streaming(Count(shared), request).await
        }
        _ => Status::unimplemented(format!(
            "{path} is not served here; this backend serves {UNARY}, {COUNT} and grpc.health.v1.Health"
        ))
        .into_http(),
    })
}

/// The gRPC status the gRPC spec's HTTP-to-gRPC mapping gives an HTTP
/// status (`doc/http-grpc-status-mapping.md`), so `errors:503:RATE` means
/// the same shard trouble over either protocol.
pub fn code_for_http_status(status: u16) -> Code {
    match status {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502..=504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// A body that fails at once, after the head went out.
struct BrokenBody;

impl hyper::body::Body for BrokenBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::other("injected reset"))))
    }
}

// ---- A client for the demo service ---------------------------------------------

/// Calls `Unary` with `request` on `channel`.
pub async fn unary(
    channel: tonic::transport::Channel,
    request: tonic::Request<Note>,
) -> Result<Answer, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(format!("cannot reach the server: {e}")))?;
    grpc.unary(
        request,
        PathAndQuery::from_static(UNARY),
        ProstCodec::<Note, Answer>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// Calls `Count` with `request` on `channel`: the answers as they stream.
pub async fn count(
    channel: tonic::transport::Channel,
    request: tonic::Request<CountRequest>,
) -> Result<tonic::Streaming<Answer>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(format!("cannot reach the server: {e}")))?;
    grpc.server_streaming(
        request,
        PathAndQuery::from_static(COUNT),
        ProstCodec::<CountRequest, Answer>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_round_trip_and_bad_ones_say_which_are_valid() {
        for protocol in [Protocol::Http1, Protocol::Grpc] {
            assert_eq!(protocol.to_string().parse::<Protocol>(), Ok(protocol));
        }
        let error = "h2".parse::<Protocol>().unwrap_err().to_string();
        assert!(
            error.contains("\"h2\"") && error.contains("grpc"),
            "{error}"
        );
    }

    #[test]
    fn grpc_refuses_only_the_byte_level_modes() {
        for mode in [
            "healthy",
            "killed",
            "blackhole",
            "slow:5",
            "errors:503:1",
            "reset",
            "unread",
            "crash-on-poison",
            "flapping:100",
        ] {
            assert!(Protocol::Grpc.acts_out(&mode.parse().unwrap()), "{mode}");
        }
        for mode in [
            "stall-body",
            "trickle:5",
            "close-after-head",
            "health-no-head",
            "health-stall",
            "health-huge:5",
            "health-garbage",
            "health-trickle:5",
        ] {
            assert!(!Protocol::Grpc.acts_out(&mode.parse().unwrap()), "{mode}");
            assert!(Protocol::Http1.acts_out(&mode.parse().unwrap()), "{mode}");
        }
    }

    #[test]
    fn http_statuses_map_as_the_grpc_spec_says() {
        assert_eq!(code_for_http_status(503), Code::Unavailable);
        assert_eq!(code_for_http_status(429), Code::Unavailable);
        assert_eq!(code_for_http_status(401), Code::Unauthenticated);
        assert_eq!(code_for_http_status(500), Code::Unknown);
    }
}
