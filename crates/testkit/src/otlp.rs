//! An OTLP/HTTP trace receiver for tests: what a collector would be to the
//! gateway's exporter, with the controls a test needs to make it fail.
//!
//! It serves `POST /v1/traces` on `127.0.0.1` with HTTP/1.1 (hyper, as the
//! gateway serves), decodes each protobuf `ExportTraceServiceRequest` and
//! keeps every span flattened with its resource's `service.name`, so a test
//! reads spans without walking resource and scope levels. Every POST's raw
//! body is kept as well (whatever the mode), so a test can scan the exact
//! bytes that left the gateway for secrets.
//!
//! How it answers depends on its [`Mode`], switchable at run time:
//! [`Mode::Accept`] as a healthy collector does, [`Mode::Fail`] with an
//! error status, [`Mode::Stall`] never (it reads the request and holds the
//! connection open). Only spans of accepted exports are kept in
//! [`OtlpReceiver::spans`]: the spans of a failed export are the exporter's
//! to count as dropped, and a test must be able to tell them apart.
//!
//! Anything but `POST /v1/traces` is answered `404`, and a body that is not
//! protobuf (`content-type` other than `application/x-protobuf`, or bytes
//! that do not decode) `400`; both are recorded in
//! [`OtlpReceiver::rejected`], so a test can assert the exporter spoke the
//! protocol it was told to.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
// Re-exported so that tests compare kinds and statuses without depending
// on opentelemetry-proto themselves.
pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
pub use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

/// The path OTLP/HTTP exporters POST traces to.
pub const TRACES_PATH: &str = "/v1/traces";

/// How the receiver answers an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `200` with an encoded, empty `ExportTraceServiceResponse` (full
    /// success); the spans are kept.
    Accept,
    /// This status with an empty body; the spans are not kept.
    Fail(u16),
    /// Reads the whole request, then never answers while the mode stays
    /// `Stall`, holding the connection open (a collector that hangs). A
    /// request held when the mode changes is answered as the new mode
    /// says, so a test can release it.
    Stall,
}

/// One attribute's value, as the exporter encoded it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `string_value`.
    Str(String),
    /// `int_value`.
    Int(i64),
    /// `bool_value`.
    Bool(bool),
    /// `double_value`.
    Double(f64),
    /// Anything else (arrays, maps, bytes, no value at all), in its debug
    /// form: no attribute of the contract is one, so it is only shown.
    Other(String),
}

impl Value {
    fn of(value: Option<&AnyValue>) -> Self {
        match value.and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => Self::Str(s.clone()),
            Some(any_value::Value::IntValue(i)) => Self::Int(*i),
            Some(any_value::Value::BoolValue(b)) => Self::Bool(*b),
            Some(any_value::Value::DoubleValue(d)) => Self::Double(*d),
            other => Self::Other(format!("{other:?}")),
        }
    }
}

/// A span link: the trace and span it points at, as lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
}

/// One received span, flattened out of its resource and scope. Ids are
/// lowercase hex, as they appear in a `traceparent` header, so a test
/// compares them with what a shard saw without converting.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The resource's `service.name`, when it had one.
    pub service_name: Option<String>,
    /// The instrumentation scope's name ("" when none was sent).
    pub scope: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits, or "" for a root span.
    pub parent_span_id: String,
    /// The W3C `tracestate` recorded on the span.
    pub trace_state: String,
    /// The span's name.
    pub name: String,
    /// Its kind (`Unspecified` for a value this version does not know).
    pub kind: SpanKind,
    /// Its status code (`Unset` when no status was sent).
    pub status: SpanStatus,
    /// Its attributes, in the order sent.
    pub attributes: Vec<(String, Value)>,
    /// Its links.
    pub links: Vec<Link>,
    /// Start and end, in nanoseconds since the Unix epoch.
    pub start_unix_nano: u64,
    /// See `start_unix_nano`.
    pub end_unix_nano: u64,
}

impl Span {
    /// The value of the attribute `key`, if the span has it.
    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// The string attribute `key`; `None` when it is missing or not a
    /// string (an int sent as a string must not pass as one, nor the
    /// reverse).
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.attr(key)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer attribute `key`; `None` when it is missing or not an
    /// integer.
    pub fn int(&self, key: &str) -> Option<i64> {
        match self.attr(key)? {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// Whether the span has the attribute `key` at all.
    pub fn has(&self, key: &str) -> bool {
        self.attr(key).is_some()
    }

    /// Whether it is a `SPAN_KIND_SERVER` span.
    pub fn is_server(&self) -> bool {
        self.kind == SpanKind::Server
    }

    /// Whether it is a `SPAN_KIND_CLIENT` span.
    pub fn is_client(&self) -> bool {
        self.kind == SpanKind::Client
    }

    /// Whether its status is `STATUS_CODE_ERROR`.
    pub fn is_error(&self) -> bool {
        self.status == SpanStatus::Error
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The string value of `key` among `attributes`, if there is one.
fn string_attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match Value::of(kv.value.as_ref()) {
            Value::Str(s) => Some(s),
            _ => None,
        })
}

/// Every span of `request`, flattened.
fn flatten(request: ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let service_name = resource_spans
            .resource
            .as_ref()
            .and_then(|r| string_attribute(&r.attributes, "service.name"));
        for scope_spans in resource_spans.scope_spans {
            let scope = scope_spans
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for span in scope_spans.spans {
                out.push(Span {
                    service_name: service_name.clone(),
                    scope: scope.clone(),
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    trace_state: span.trace_state,
                    name: span.name,
                    kind: SpanKind::try_from(span.kind).unwrap_or(SpanKind::Unspecified),
                    status: span
                        .status
                        .and_then(|s| SpanStatus::try_from(s.code).ok())
                        .unwrap_or(SpanStatus::Unset),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), Value::of(kv.value.as_ref())))
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|l| Link {
                            trace_id: hex(&l.trace_id),
                            span_id: hex(&l.span_id),
                        })
                        .collect(),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                });
            }
        }
    }
    out
}

#[derive(Default)]
struct Store {
    spans: Vec<Span>,
    posts: usize,
    raw_bodies: Vec<Bytes>,
    /// What was refused, and why, one line each.
    rejected: Vec<String>,
}

struct Shared {
    store: Mutex<Store>,
    /// The mode; stalled requests wait on it to change.
    mode: watch::Sender<Mode>,
    /// Every connection's task, aborted when the receiver is dropped so a
    /// stalled one does not outlive the test's receiver.
    connections: Mutex<Vec<AbortHandle>>,
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        // A test that panicked while holding it has failed already; the
        // state is still readable.
        self.store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The receiver: serves on `127.0.0.1` until dropped.
pub struct OtlpReceiver {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.accept.abort();
        let connections = self
            .shared
            .connections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for connection in connections.iter() {
            connection.abort();
        }
    }
}

impl OtlpReceiver {
    /// Starts one on a free port, in [`Mode::Accept`].
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            mode: watch::channel(Mode::Accept).0,
            connections: Mutex::new(Vec::new()),
        });
        let serving = shared.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = serving.clone();
                let task = tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(answer(&shared, request).await) }
                    });
                    // An exporter that gives up on a stalled export closes
                    // its connection: an error here, and expected.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                let mut connections = serving
                    .connections
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                connections.retain(|c| !c.is_finished());
                connections.push(task.abort_handle());
            }
        });
        Self {
            addr,
            shared,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`: the `otlp_endpoint` to configure (the
    /// exporter appends `/v1/traces`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Changes how later exports (and those held by [`Mode::Stall`]) are
    /// answered.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.mode.send_replace(mode);
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.shared.mode.borrow()
    }

    /// Every span of every accepted export so far, in arrival order.
    pub fn spans(&self) -> Vec<Span> {
        self.shared.store().spans.clone()
    }

    /// How many `POST`s to `/v1/traces` arrived, whatever they were
    /// answered (stalled ones included, as soon as their body was read).
    pub fn posts(&self) -> usize {
        self.shared.store().posts
    }

    /// Every such `POST`'s body, exactly as received.
    pub fn raw_bodies(&self) -> Vec<Bytes> {
        self.shared.store().raw_bodies.clone()
    }

    /// Requests that were refused (wrong path or method, not protobuf, not
    /// decodable), one line each saying why.
    pub fn rejected(&self) -> Vec<String> {
        self.shared.store().rejected.clone()
    }

    /// Polls every 20 ms until `condition` holds over the spans received
    /// so far, or `within` passes; whether it held. Tests give generous
    /// limits: exports are batched and timed by the exporter.
    pub async fn wait_for(
        &self,
        mut condition: impl FnMut(&[Span]) -> bool,
        within: Duration,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if condition(&self.shared.store().spans) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn status_only(status: u16) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response
}

/// A refusal, recorded with its reason.
fn reject(shared: &Shared, status: u16, why: String) -> Response<Full<Bytes>> {
    shared.store().rejected.push(why);
    status_only(status)
}

async fn answer(shared: &Shared, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        // The exporter went away mid-body: there is nobody to answer.
        return status_only(400);
    };
    if parts.method != hyper::Method::POST || parts.uri.path() != TRACES_PATH {
        return reject(shared, 404, format!("{} {}", parts.method, parts.uri));
    }
    {
        let mut store = shared.store();
        store.posts += 1;
        store.raw_bodies.push(body.clone());
    }
    let content_type = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // Parameters (`; charset=...`) are not part of the type.
    if content_type.split(';').next().map(str::trim) != Some("application/x-protobuf") {
        return reject(shared, 400, format!("content-type {content_type:?}"));
    }
    // The mode is read after the body: a stalled collector still takes
    // the request off the wire, as a hung process behind a live socket
    // does.
    let mut mode = shared.mode.subscribe();
    let current = *mode.borrow_and_update();
    let current = if current == Mode::Stall {
        // Held until the mode changes; `wait_for` errs only when the
        // receiver is gone, and then so is this connection.
        let released = mode.wait_for(|m| *m != Mode::Stall).await.map(|m| *m);
        match released {
            Ok(m) => m,
            Err(_) => std::future::pending().await,
        }
    } else {
        current
    };
    match current {
        Mode::Fail(status) => status_only(status),
        Mode::Stall | Mode::Accept => match ExportTraceServiceRequest::decode(body) {
            Ok(request) => {
                let spans = flatten(request);
                shared.store().spans.extend(spans);
                let mut response = Response::new(Full::new(Bytes::from(
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )));
                response.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("application/x-protobuf"),
                );
                response
            }
            Err(e) => reject(
                shared,
                400,
                format!("not an ExportTraceServiceRequest: {e}"),
            ),
        },
    }
}
