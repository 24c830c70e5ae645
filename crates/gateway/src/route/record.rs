//! What the request path keeps of a request for its metrics, its access
//! log and its trace: who it was served for ([`Served`]), what the log
//! notes as the request goes ([`Logged`]), the log's record, written when
//! the response is ready ([`log_request`]), and the trace's start and end
//! ([`begin_trace`], [`trace_request`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, Request, Response, StatusCode};
use placement::ShardIndex;
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::config::{AccessLog, ShardProtocol};
use crate::protocol::wire::Fields;
use crate::route::response::ResponseBody;
use crate::state::{Gateway, Snapshot};
use crate::syntax::grpc::Code;
use crate::telemetry::traces::{RequestLine, RequestView, ShardView, Trace, TraceSettings};
use crate::tenants::TenantSlot;
use crate::trust::headers;
use crate::upstream::body::{ClientBody, RequestBody};

/// Who a request was served for, for metrics and logs.
pub(super) struct Served {
    /// The snapshot the request was routed with (its cell index means
    /// something only there).
    pub(super) snapshot: Arc<Snapshot>,
    pub(super) cell: usize,
    /// The tenant's slot in the snapshot's registry.
    pub(super) tenant: TenantSlot,
    pub(super) attempts: usize,
    /// When a backend's answer was taken, if one was: the clock read that
    /// ended the attempt also ends the request (what is left is
    /// bookkeeping), saving a read per request.
    pub(super) answered_at: Option<Instant>,
}

impl Served {
    /// A request routed with `snapshot` to `cell` for the tenant at
    /// `tenant`, before any attempt.
    #[inline]
    pub(super) fn new(snapshot: &Arc<Snapshot>, cell: usize, tenant: TenantSlot) -> Self {
        Self {
            snapshot: Arc::clone(snapshot),
            cell,
            tenant,
            attempts: 0,
            answered_at: None,
        }
    }
}

/// What the access log keeps of a request as it goes (only when
/// `logging.access_log` is on; boxed, so that a request without it carries
/// one pointer).
pub(super) struct Logged {
    format: AccessLog,
    /// The request's id, sent to every shard tried as `x-request-id`.
    pub(super) request_id: HeaderValue,
    method: Method,
    /// The path, without the query (which can carry secrets).
    path: String,
    /// When the head had been read, by the wall clock.
    time: std::time::SystemTime,
    /// The shards tried, in order.
    pub(super) tried: SmallVec<[ShardIndex; 8]>,
}

impl Logged {
    #[cold]
    #[inline(never)]
    pub(super) fn new(
        format: AccessLog,
        request: &Request<ClientBody>,
        fields: &Fields,
    ) -> Box<Self> {
        Box::new(Self {
            format,
            request_id: headers::request_id(fields),
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            time: std::time::SystemTime::now(),
            tried: SmallVec::new(),
        })
    }

    /// With the access log on (`log`): the request id every attempt sends,
    /// and where the shards tried are noted (the log stays the caller's).
    #[inline]
    pub(super) fn for_attempts(
        log: Option<&mut Self>,
    ) -> (Option<&HeaderValue>, Option<&mut SmallVec<[ShardIndex; 8]>>) {
        match log {
            Some(Self {
                request_id, tried, ..
            }) => (Some(&*request_id), Some(tried)),
            None => (None, None),
        }
    }
}

/// Writes the access log's record of a request that got `response`
/// (`status`, and the gRPC status its head showed for a gRPC call) from
/// `client`, `elapsed` after it `started`: a `tracing` event now (text, for
/// requests that reached a tenant), or a JSON line when the response ends.
#[cold]
#[inline(never)]
pub(super) fn log_request(
    gateway: &Arc<Gateway>,
    logged: Logged,
    served: Option<&Served>,
    response: &mut Response<ResponseBody>,
    (status, grpc_status): (StatusCode, Option<Option<Code>>),
    (client, started, elapsed): (SocketAddr, Instant, Duration),
    (body, trace): (Option<&RequestBody>, Option<&Trace>),
) {
    let cell = served.map(|served| served.snapshot.config.cells[served.cell].name.as_str());
    let tenant = served.and_then(|served| served.snapshot.tenants.at(served.tenant));
    let shards: Vec<String> = served.map_or_else(Vec::new, |served| {
        logged
            .tried
            .iter()
            .filter_map(|&index| served.snapshot.shards[served.cell].get(index as usize))
            .map(|shard| shard.id.clone())
            .collect()
    });
    let grpc_status = grpc_status.map(|status| status.map_or("unseen", Code::name));
    let request_id = String::from_utf8_lossy(logged.request_id.as_bytes()).into_owned();
    let attempts = served.map_or(0, |served| served.attempts);
    match logged.format {
        AccessLog::Json => {
            let record = Box::new(crate::telemetry::access_log::Record {
                time: logged.time,
                started,
                request_id,
                tenant: tenant.map(|tenant| tenant.id().to_owned()),
                cell: cell.map(str::to_owned),
                shards,
                status: status.as_u16(),
                grpc_status,
                attempts,
                method: logged.method.to_string(),
                path: logged.path,
                client,
                bytes_in: body.map_or(0, RequestBody::received),
                bytes_out: 0,
                trace_id: trace.map(|trace| text::hex(trace.trace_id())),
            });
            response.body_mut().log_on_end(record, gateway);
        }
        AccessLog::Text => {
            let (Some(tenant), Some(cell)) = (tenant, cell) else {
                // The text log has always shown requests that reached a
                // tenant; the others are counted by outcome.
                return;
            };
            // The text log's target is the one it has always had, so that
            // a filter (`RUST_LOG=gateway::route::proxy=info`) still finds it.
            tracing::info!(
                target: "gateway::route::proxy",
                request_id = %request_id,
                tenant = %tenant.id(),
                method = %logged.method,
                path = %logged.path,
                cell = %cell,
                shards = %shards.join(","),
                status = status.as_u16(),
                grpc_status,
                attempts,
                // Rounded to microseconds, so that it reads as written.
                elapsed_ms = elapsed.as_micros() as f64 / 1000.0,
                client = %client,
                "request"
            );
        }
        AccessLog::Off => {}
    }
}

/// What the request's access log and trace keep of it, begun when they
/// are on: with neither (the default), two branches.
#[inline]
pub(super) fn records(
    config: &crate::config::GatewayConfig,
    request: &Request<ClientBody>,
    fields: &Fields,
    (peer, started): (&crate::route::peer::Peer, Instant),
    (log, trace): (&mut Option<Box<Logged>>, &mut Option<Box<Trace>>),
) {
    if config.access_log != AccessLog::Off {
        *log = Some(Logged::new(config.access_log, request, fields));
    }
    if let Some(tracing) = &config.tracing {
        *trace = Some(begin_trace(tracing, request, fields, peer.tls, started));
    }
}

/// The answer to a request whose body the client failed to send
/// (`fault`), noted on its trace.
#[cold]
pub(super) fn client_fault(
    kind: crate::route::grpc::Kind,
    fault: crate::upstream::body::ClientFault,
    trace: &mut Option<Box<Trace>>,
) -> Response<ResponseBody> {
    noted(
        crate::route::refusal::client_fault_response(kind, fault),
        trace,
        "client_fault",
    )
}

/// `response`, the gateway's own answer for `outcome`, noted on the
/// request's trace if it has one.
#[inline]
pub(super) fn noted(
    response: Response<ResponseBody>,
    trace: &mut Option<Box<Trace>>,
    outcome: &'static str,
) -> Response<ResponseBody> {
    if let Some(trace) = trace {
        trace.note_outcome(outcome);
    }
    response
}

/// The trace of a request (`[tracing]` is on) that came over TLS or not
/// and whose head was read at `started`.
#[inline(never)]
fn begin_trace(
    settings: &TraceSettings,
    request: &Request<ClientBody>,
    fields: &Fields,
    tls: bool,
    started: Instant,
) -> Box<Trace> {
    Trace::begin(settings, fields, started, || RequestLine {
        method: request.method().as_str().to_owned(),
        // The path only: a query can carry secrets.
        path: request.uri().path().to_owned(),
        scheme: if tls { "https" } else { "http" },
        protocol: if request.version() == http::Version::HTTP_2 {
            "2"
        } else {
            "1.1"
        },
    })
}

/// Hands the spans of a sampled request's `trace` (`served`, answered
/// with `status` and for a gRPC call `grpc_status`, from `client`,
/// `elapsed` after its head was read) to the export queue.
#[inline(never)]
pub(super) fn trace_request(
    gateway: &Arc<Gateway>,
    trace: Trace,
    served: Option<&Served>,
    (status, grpc_status): (StatusCode, Option<Option<Code>>),
    (client, elapsed): (SocketAddr, Duration),
) {
    if !trace.sampled() {
        return;
    }
    let snapshot = served.map(|served| (&served.snapshot, served.cell));
    let request = RequestView {
        client,
        tenant: served
            .and_then(|served| served.snapshot.tenants.at(served.tenant))
            .map(|tenant| tenant.id()),
        cell: snapshot.map(|(snapshot, cell)| snapshot.config.cells[cell].name.as_str()),
        status: status.as_u16(),
        grpc_status: grpc_status.flatten().map(|code| i64::from(code as i32)),
        elapsed,
    };
    let shard = |index: u32| {
        let (snapshot, cell) = snapshot?;
        let runtime = snapshot.shards[cell].get(index as usize)?;
        let protocol = match snapshot.config.cells[cell]
            .shards
            .get(index as usize)?
            .protocol
        {
            ShardProtocol::Http1 => "1.1",
            _ => "2",
        };
        Some(ShardView {
            id: &runtime.id,
            zone: runtime.zone.as_deref(),
            scheme: runtime.url.scheme_str().unwrap_or("http"),
            host: runtime.url.host().unwrap_or_default(),
            port: runtime
                .url
                .port_u16()
                .unwrap_or(if runtime.url.scheme_str() == Some("https") {
                    443
                } else {
                    80
                }),
            prefix: runtime.url.path(),
            protocol,
        })
    };
    if let Some(finished) = trace.finish(request, shard) {
        gateway.traces.offer(finished);
    }
}
