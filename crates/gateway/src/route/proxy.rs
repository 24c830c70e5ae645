//! The request path, one step after another: credential → tenant → cell and
//! subset → target check → body set-up → member → attempt → outcome. `route`
//! reads as that list; each step is a function or method named for it
//! (`tenant`, `Snapshot::tenant_route`, `target_allowed`, `Outgoing` and
//! `receive_body`, `Attempts::member`, `Attempts::start` and `send`,
//! `Attempts::judge`, `stream_back` and `Attempts::unanswered`).
//!
//! Failover rules: a connection failure (nothing sent) always moves on to
//! another member; a timeout, reset or retryable status moves on only when
//! the request is safe to repeat (an idempotent method or an
//! `Idempotency-Key`) and its body can still be sent again. Each shard is
//! tried at most once, so at most `k` attempts are made; attempts after a
//! request may have reached a backend draw on the shared retry budget and
//! are spaced by a short jittered backoff; and everything happens inside the
//! overall request deadline.
//!
//! Survivor protection: a member at its in-flight cap is skipped, and a
//! request whose every remaining member is at its cap is shed (`503`),
//! which is no shard's failure. Poison containment: every crash-like
//! failure (reset, or the per-try timeout, unless the member is failing
//! other tenants too) is a strike against the tenant, shared by all its
//! requests and read before every attempt; a tenant whose strikes reach
//! `routing.poison_after` members is made suspect and the request that got
//! there stopped (`502`); a suspect tenant is served only by the members it
//! struck, and fails over only when nothing was sent
//! ([`crate::health::quarantine`] has the rules). With
//! `routing.poison_spread = "contained"` every tenant's attempts in flight
//! span at most `routing.poison_after` members, struck ones counted, before
//! any strike too ([`crate::health::spread`]).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Body;
use placement::ShardIndex;
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::cell::TenantRoute;
use crate::config::tenants::TenantRecord;
use crate::config::{AccessLog, GatewayConfig, PoisonSpread};
use crate::health::quarantine::{Begun, Marked, Rules, Struck, Suspects};
use crate::health::spread::{Flight, Full, Members};
use crate::limit::{Refusal, TenantLimit};
use crate::protocol::client_wire::json_error_body;
use crate::protocol::wire::{Fields, RequestHead, Stated};
use crate::route::admission;
use crate::route::attempt::{self, Failure};
use crate::route::grpc::{self, Kind};
use crate::route::member::{self, Narrowed, Pick};
use crate::route::response::{InFlight, ResponseBody, full};
use crate::route::tunnel;
use crate::state::{Gateway, ShardRuntime, Snapshot};
use crate::syntax::grpc::Code;
use crate::telemetry::metrics::Metrics;
use crate::trust::client_cert::CertificateTenant;
use crate::trust::credential::{self, AuthError};
use crate::trust::headers::{self, Added, Inbound};
use crate::trust::target;
use crate::upstream::UpstreamBody;
use crate::upstream::body::{ClientBody, ClientBodyError, ClientFault, RequestBody};

/// Who a request was served for, for metrics and logs.
struct Served {
    /// The snapshot the request was routed with (its cell index means
    /// something only there).
    snapshot: Arc<Snapshot>,
    cell: usize,
    /// The tenant's position in the snapshot's tenants file.
    tenant: usize,
    attempts: usize,
    /// When a backend's answer was taken, if one was: the clock read that
    /// ended the attempt also ends the request (what is left is
    /// bookkeeping), saving a read per request.
    answered_at: Option<Instant>,
}

impl Served {
    /// A request routed with `snapshot` to `cell` for the tenant at
    /// `tenant`, before any attempt.
    fn new(snapshot: &Arc<Snapshot>, cell: usize, tenant: usize) -> Self {
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
struct Logged {
    format: AccessLog,
    /// The request's id, sent to every shard tried as `x-request-id`.
    request_id: HeaderValue,
    method: Method,
    /// The path, without the query (which can carry secrets).
    path: String,
    /// When the head had been read, by the wall clock.
    time: std::time::SystemTime,
    /// The shards tried, in order.
    tried: SmallVec<[ShardIndex; 8]>,
}

impl Logged {
    #[cold]
    #[inline(never)]
    fn new(format: AccessLog, request: &Request<ClientBody>, fields: &Fields) -> Box<Self> {
        Box::new(Self {
            format,
            request_id: headers::request_id(fields),
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            time: std::time::SystemTime::now(),
            tried: SmallVec::new(),
        })
    }
}

/// The client connection a request came on, as the request path needs it.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// The client's address as an `x-forwarded-for` value, formatted once
    /// per connection rather than per request.
    pub forwarded_for: Option<HeaderValue>,
    /// What the connection's verified client certificate says about its
    /// tenant (TLS with `[auth.mtls]` only).
    pub certificate: Option<Arc<CertificateTenant>>,
}

impl Peer {
    /// The connection from `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            forwarded_for: headers::forwarded_for(addr.ip()),
            certificate: None,
        }
    }

    /// The connection from `addr` that presented a verified client
    /// certificate.
    pub fn with_certificate(addr: SocketAddr, certificate: CertificateTenant) -> Self {
        Self {
            certificate: Some(Arc::new(certificate)),
            ..Self::new(addr)
        }
    }
}

/// Handles one client request and records its outcome.
pub async fn handle(
    gateway: Arc<Gateway>,
    mut request: Request<ClientBody>,
    fields: &Fields,
    peer: &Peer,
) -> Response<ResponseBody> {
    let started = Instant::now();
    let had_body = !request.body().is_end_stream();
    let mut body = None;
    let kind = Kind::of(request.method(), fields);
    let websocket = tunnel::requested(&mut request, fields);
    let upgrading = websocket.is_some();
    let mut log = None;
    let (mut response, served) = route(
        &gateway, request, fields, peer, started, &mut body, websocket, kind, &mut log,
    )
    .await;
    if had_body && body.as_ref().is_none_or(|body| !body.fully_read()) {
        // Answered without reading the whole request body (401, 413, 408,
        // a backend that answered early, ...): the rest of it is still on
        // the connection, so the connection cannot carry another request.
        // hyper closes it, but only notices after the head is written; say
        // so in the head, or a keep-alive client sends its next request
        // into a connection that is closing.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let now = served
        .as_ref()
        .and_then(|served| served.answered_at)
        .unwrap_or_else(Instant::now);
    let elapsed = now.saturating_duration_since(started);
    let status = response.status();
    // A gRPC call's answer counts as the HTTP error the gateway's own
    // stands for (it is a 200 on the wire), and by the gRPC status its head
    // shows, if any.
    let counted = response
        .extensions()
        .get::<grpc::StandsFor>()
        .map_or(status, |stands_for| stands_for.0);
    let outcome = crate::telemetry::metrics::request_outcome(counted);
    let grpc_status = match kind {
        Kind::Http => None,
        Kind::Grpc => Some(grpc::status_in_head(&response)),
    };
    if let Some(logged) = log {
        log_request(
            &gateway,
            *logged,
            served.as_ref(),
            &mut response,
            (status, grpc_status),
            (peer, started, elapsed),
            body.as_ref(),
        );
    }
    if upgrading {
        let cell = served.as_ref().map_or("", |served| {
            served.snapshot.config.cells[served.cell].name.as_str()
        });
        gateway.metrics.websockets.upgrade(cell, status);
    }
    match served {
        Some(served) => {
            let tenant = served
                .snapshot
                .tenants
                .at(served.tenant)
                .map_or("", |tenant| tenant.id.as_str());
            served
                .snapshot
                .cell_metrics(served.cell, &gateway.metrics)
                .request(outcome, elapsed);
            // A tenant's experienced availability: anything but a server
            // error counts as served, and for a gRPC call anything but a
            // status that says the service failed it.
            let failed = counted.is_server_error()
                || grpc_status
                    .flatten()
                    .is_some_and(|status| status.is_failure());
            gateway.tenant_windows.record(tenant, !failed, now);
            let cell = &served.snapshot.config.cells[served.cell].name;
            if let Some(grpc_status) = grpc_status {
                gateway.metrics.grpc_request(cell, grpc_status);
            }
            // The body reports how it ends; the references move with it.
            response.body_mut().settle_with(gateway);
        }
        None => {
            gateway.metrics.request("", outcome, elapsed);
            if let Some(grpc_status) = grpc_status {
                gateway.metrics.grpc_request("", grpc_status);
            }
        }
    }
    response
}

/// Writes the access log's record of a request that got `response`
/// (`status`, and the gRPC status its head showed for a gRPC call) from
/// `peer`, `elapsed` after it `started`: a `tracing` event now (text, for
/// requests that reached a tenant), or a JSON line when the response ends.
#[cold]
#[inline(never)]
fn log_request(
    gateway: &Arc<Gateway>,
    logged: Logged,
    served: Option<&Served>,
    response: &mut Response<ResponseBody>,
    (status, grpc_status): (StatusCode, Option<Option<Code>>),
    (peer, started, elapsed): (&Peer, Instant, Duration),
    body: Option<&RequestBody>,
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
                tenant: tenant.map(|tenant| tenant.id.clone()),
                cell: cell.map(str::to_owned),
                shards,
                status: status.as_u16(),
                grpc_status,
                attempts,
                method: logged.method.to_string(),
                path: logged.path,
                client: peer.addr,
                bytes_in: body.map_or(0, RequestBody::received),
                bytes_out: 0,
            });
            response.body_mut().log_on_end(record, gateway);
        }
        AccessLog::Text => {
            let (Some(tenant), Some(cell)) = (tenant, cell) else {
                // The text log has always shown requests that reached a
                // tenant; the others are counted by outcome.
                return;
            };
            tracing::info!(
                request_id = %request_id,
                tenant = %tenant.id,
                method = %logged.method,
                path = %logged.path,
                cell = %cell,
                shards = %shards.join(","),
                status = status.as_u16(),
                grpc_status,
                attempts,
                // Rounded to microseconds, so that it reads as written.
                elapsed_ms = elapsed.as_micros() as f64 / 1000.0,
                client = %peer.addr,
                "request"
            );
        }
        AccessLog::Off => {}
    }
}

/// The request path proper, one step after another; returns the response
/// and, once the tenant is known, who it was for. `request_body` receives
/// the request body once it is set up, so the caller can tell whether it
/// was read to the end. A WebSocket upgrade (`websocket`) takes the same
/// steps, and ends in a tunnel when a shard switches ([`tunnel`]). The
/// request's `kind` shapes the gateway's own errors ([`refuse`]) and, for
/// a gRPC call, sets its deadline and failover rules ([`grpc`]).
#[expect(
    clippy::too_many_arguments,
    reason = "the request path's one entry: each argument is a different part of the request"
)]
async fn route(
    gateway: &Arc<Gateway>,
    request: Request<ClientBody>,
    fields: &Fields,
    peer: &Peer,
    started: Instant,
    request_body: &mut Option<RequestBody>,
    mut websocket: Option<tunnel::Requested>,
    kind: Kind,
    log: &mut Option<Box<Logged>>,
) -> (Response<ResponseBody>, Option<Served>) {
    if request.method() == Method::CONNECT {
        return (connect_refused(), None);
    }
    let snapshot = gateway.snapshot();
    let config = &snapshot.config;
    if config.access_log != AccessLog::Off {
        *log = Some(Logged::new(config.access_log, &request, fields));
    }
    if request.version() == http::Version::HTTP_2
        && let Some(refused) = http2_refusal(&request, fields, config, kind)
    {
        return (refused, None);
    }
    let mut deadline = started + config.routing.request_timeout;

    // Credential → tenant.
    let tenant = match tenant(&snapshot, fields, peer) {
        Ok(tenant) => tenant,
        Err(error) => return (unauthorized(kind, &error), None),
    };

    // Tenant → cell and subset (computed once per tenant and snapshot).
    let Some(route) = snapshot.tenant_route(tenant) else {
        // Cannot happen: the tenant was found in this very snapshot.
        return (
            refuse(
                kind,
                StatusCode::INTERNAL_SERVER_ERROR,
                Code::Internal,
                "tenant has no route",
            ),
            None,
        );
    };
    let cell = route.cell;
    let mut served = Served::new(&snapshot, cell, tenant.position);

    // The tenant's limits (one branch for a tenant without any); the
    // global bucket's call is boxed, so that requests without it do not
    // carry its state.
    let mut tenant_in_flight = None;
    if let Some(limit) = snapshot.limits.of(tenant.position) {
        let admitted = match snapshot.limits.store() {
            Some(store) if limit.rate.is_some() => {
                Box::pin(admission::admit_global(
                    gateway, &snapshot, store, limit, &tenant.id, cell, started,
                ))
                .await
            }
            _ => admission::admit(gateway, &snapshot, limit, cell, started),
        };
        match admitted {
            Ok(guard) => tenant_in_flight = guard,
            Err(refusal) => return (limited(kind, limit, &refusal), Some(served)),
        }
    }

    // The target check.
    if !target_allowed(&snapshot, cell, request.uri()) {
        return (target_refused(kind), Some(served));
    }

    // A gRPC call's own deadline, when it sets a shorter one.
    if kind == Kind::Grpc {
        match grpc::deadline(fields, started, deadline) {
            Ok(sooner) => deadline = sooner,
            Err(error) => {
                let message = format!("malformed grpc-timeout: {error}");
                return (
                    refuse(kind, StatusCode::BAD_REQUEST, Code::Internal, &message),
                    Some(served),
                );
            }
        }
    }

    // The body set-up: refuse what is too large, decide what passes and
    // whether it may be repeated, buffer what may be replayed.
    let (parts, incoming) = request.into_parts();
    let declared_length = incoming.size_hint().exact();
    if declared_length.is_some_and(|length| length > config.limits.max_body_bytes) {
        return (
            refuse(
                kind,
                StatusCode::PAYLOAD_TOO_LARGE,
                Code::ResourceExhausted,
                "request body too large",
            ),
            Some(served),
        );
    }
    if websocket.is_some() && !incoming.is_end_stream() {
        // Where a body would end and the new protocol begin is anyone's
        // guess: a smuggling opportunity, and no WebSocket client sends one.
        return (
            refuse(
                kind,
                StatusCode::BAD_REQUEST,
                Code::Internal,
                "a WebSocket upgrade request must not carry a body",
            ),
            Some(served),
        );
    }
    // With the access log on: the request id every attempt sends, and
    // where the shards tried are noted (the log stays the caller's).
    let (request_id, logged_tried) = match log.as_deref_mut() {
        Some(Logged {
            request_id, tried, ..
        }) => (Some(&*request_id), Some(tried)),
        None => (None, None),
    };
    let mut outgoing = Outgoing::new(
        config,
        snapshot.prefixed[cell],
        route,
        fields,
        peer,
        &parts.method,
    );
    if let Some(request_id) = request_id {
        // The gateway's id goes to the shard in place of the client's.
        outgoing.added.request_id = Some(request_id);
        outgoing.inbound.replace_request_id();
    }
    if kind == Kind::Grpc {
        // Every call is a POST: a call is safe to repeat when its method
        // is configured so (or, as any request, by an idempotency key).
        outgoing.safe_to_repeat |=
            grpc::repeat_safe_method(&config.routing.grpc_idempotent_methods, parts.uri.path());
    }
    // One clock read per attempt serves health, the deadline and timing.
    let mut now = started;
    let body = if incoming.is_end_stream() {
        // No body (most requests): nothing to read, wait for or time.
        RequestBody::Buffered(Bytes::new())
    } else {
        let received = receive_body(
            incoming,
            declared_length,
            outgoing.safe_to_repeat,
            config,
            started,
            deadline,
        );
        match received.await {
            Ok((body, read)) => {
                now = read;
                body
            }
            Err(fault) => return (client_fault_response(kind, fault), Some(served)),
        }
    };
    *request_body = Some(body.clone());
    gateway.budget.record_request(started);

    // Member → attempt → outcome, until one answers or nothing may be tried.
    let mut attempts = Attempts {
        gateway,
        config,
        shards: &snapshot.shards[cell],
        cell,
        subset: route.subset.as_slice(),
        tenant: &tenant.id,
        // The head as every attempt sends it; each sets its shard's target,
        // `Host` and `x-shuffle-shard`.
        client: RequestHead {
            method: &parts.method,
            target: "",
            fields,
            inbound: &outgoing.inbound,
            stated: stated(&body, declared_length),
            added: outgoing.added,
            host: None,
            shard: None,
        },
        uri: &parts.uri,
        body: &body,
        // Once an upgrade request may have reached a shard, the shard may
        // have switched: only a connection never made fails over.
        safe_to_repeat: outgoing.safe_to_repeat && websocket.is_none(),
        deadline,
        now,
        tried: SmallVec::new(),
        last_failure: None,
        kind,
        out_of_time: false,
        caps: snapshot.caps[cell].as_deref(),
        containment: None,
        shed: false,
        spread_full: false,
        logged_tried,
    };
    while let Some(member) = attempts.member() {
        if let Some(backoff) = member.backoff {
            tokio::time::sleep(backoff).await;
        }
        let Some(attempt) = attempts.start(member, &mut served) else {
            attempts.out_of_time = true;
            break;
        };
        let result = if attempt.operator_failed() {
            // A shard an operator failed is down as far as the gateway is
            // concerned: an attempt on it (only possible with failover off)
            // fails as a refused connection would, without touching the
            // backend.
            Err(Failure::Connect)
        } else if websocket.is_some() {
            attempts.upgrade(&attempt).await
        } else {
            attempts.send(&attempt).await
        };
        // The client's body, not the shard, ended the attempt: answer the
        // client, and neither blame the shard nor try another.
        if let Err(failure) = &result
            && let Some(fault) = body.client_fault(*failure == Failure::Timeout)
        {
            return (
                attempt.client_fault(kind, fault, attempts.cell_name()),
                Some(served),
            );
        }
        match (attempts.judge(&attempt, &result), result) {
            (None, Ok(response)) => {
                served.answered_at = Some(attempts.now);
                if attempts.containment.is_some() {
                    attempts.answered();
                }
                if response.status() == StatusCode::SWITCHING_PROTOCOLS
                    && let Some(client) = websocket.take()
                {
                    let cell = attempts.cell_name();
                    // The tunnel holds the tenant's in-flight place as it
                    // holds the shard's, until both directions end.
                    let tunnel = tunnel::open(
                        response,
                        client,
                        (attempt.in_flight, tenant_in_flight),
                        gateway,
                        (cell, &tenant.id),
                        attempt.shard,
                    );
                    let response = tunnel.unwrap_or_else(|| {
                        refuse(
                            kind,
                            StatusCode::BAD_GATEWAY,
                            Code::Unavailable,
                            "the backend failed",
                        )
                    });
                    return (response, Some(served));
                }
                // The common case returns the response where it is built.
                let mut response = stream_back(response, attempt.in_flight);
                if let Some(guard) = tenant_in_flight {
                    response.body_mut().hold(guard);
                }
                return (response, Some(served));
            }
            (Some(failure), result) => {
                if failure.crash_like() {
                    attempts.crashed(attempt.shard_index, failure, attempt.started);
                }
                // Its probe, if any, ends only now: a strike it made is
                // recorded first, so the member is never left uncounted.
                drop(attempt);
                attempts.last_failure = Some((failure, result.ok()));
            }
            (None, Err(_)) => unreachable!("an error always has a failure"),
        }
    }
    let mut response = attempts.unanswered();
    if let Some(guard) = tenant_in_flight {
        response.body_mut().hold(guard);
    }
    (response, Some(served))
}

/// The answer to a request its tenant's limits refused: `429` with
/// `Retry-After`, or a trailers-only `RESOURCE_EXHAUSTED`.
#[inline(never)]
fn limited(kind: Kind, limit: &TenantLimit, refusal: &Refusal) -> Response<ResponseBody> {
    let status = StatusCode::TOO_MANY_REQUESTS;
    let mut response = match kind {
        // A flood is mostly refusals: its body was written with the
        // snapshot, so a refusal formats nothing.
        Kind::Http => json_error(status, limit.refusal_body(refusal)),
        Kind::Grpc => grpc::error(Code::ResourceExhausted, &refusal.message(), status),
    };
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(refusal.retry_after_seconds()),
    );
    response
}

/// What HTTP/2 alone can get wrong before a request is routed: a `host`
/// field that names another host than `:authority`, or a header list over
/// `limits.max_header_bytes` (hyper lets through up to twice that, so that
/// the answer is the gateway's own: a gRPC call gets `RESOURCE_EXHAUSTED`
/// it can read rather than a bare 431).
#[inline(never)]
fn http2_refusal(
    request: &Request<ClientBody>,
    fields: &Fields,
    config: &GatewayConfig,
    kind: Kind,
) -> Option<Response<ResponseBody>> {
    if !authority_agrees(request.uri(), fields) {
        return Some(refuse(
            kind,
            StatusCode::BAD_REQUEST,
            Code::Internal,
            "the host field and :authority name different hosts",
        ));
    }
    if fields.list_size() > config.limits.max_header_bytes {
        return Some(refuse(
            kind,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Code::ResourceExhausted,
            "request header fields too large (limits.max_header_bytes)",
        ));
    }
    None
}

/// The answer to `CONNECT`: a tunnel is not a request a shard can serve,
/// and a backend that said yes would turn the connection into a pipe no
/// rule watches.
fn connect_refused() -> Response<ResponseBody> {
    let mut response = error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        "CONNECT is not supported: the gateway routes requests, it does not open tunnels",
    );
    response.headers_mut().insert(
        header::ALLOW,
        HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    );
    response
}

// The steps every request takes are `#[inline]`: `route` is polled from the
// listener's code, and without the hint they stayed out of line (measured:
// about 190 more instructions per proxied GET under callgrind).

/// Credential → tenant: the credential in the request's `fields`, and the
/// tenant of `snapshot` it names.
#[inline]
fn tenant<'s>(
    snapshot: &'s Snapshot,
    fields: &Fields,
    peer: &Peer,
) -> Result<&'s TenantRecord, AuthError> {
    if let Some(certificate) = &peer.certificate {
        return snapshot.authenticator.authenticate_with_certificate(
            certificate,
            fields,
            &snapshot.tenants,
        );
    }
    let credential = credential::extract(fields, snapshot.authenticator.jwt_enabled())?;
    snapshot
        .authenticator
        .authenticate(&credential, &snapshot.tenants)
}

/// The answer to a request whose credential named no tenant.
fn unauthorized(kind: Kind, error: &AuthError) -> Response<ResponseBody> {
    let mut response = refuse(
        kind,
        StatusCode::UNAUTHORIZED,
        Code::Unauthenticated,
        error.public_message(),
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The target check: where `cell` has a shard under a path prefix, a
/// request target must stay under it.
#[inline]
fn target_allowed(snapshot: &Snapshot, cell: usize, uri: &Uri) -> bool {
    !snapshot.prefixed[cell] || target::stays_under_prefix(uri)
}

/// Whether an HTTP/2 request's `host` field, if any, names the host its
/// `:authority` does (RFC 9113 section 8.3.1: a server should refuse one
/// that does not). Which of the two a shard's software believes is
/// anyone's guess, so the gateway never passes on a request where they
/// differ.
fn authority_agrees(uri: &Uri, fields: &Fields) -> bool {
    match (uri.authority(), fields.get("host")) {
        (Some(authority), Some(host)) => authority.as_str().as_bytes().eq_ignore_ascii_case(host),
        _ => true,
    }
}

/// The answer to a target the check refused.
fn target_refused(kind: Kind) -> Response<ResponseBody> {
    refuse(
        kind,
        StatusCode::BAD_REQUEST,
        Code::PermissionDenied,
        "the request target has a dot-segment (\"/./\" or \"/../\", also percent-encoded) or is not a path; send a normalised absolute path",
    )
}

/// What the request's head decides for every attempt, as part of the body
/// set-up.
struct Outgoing<'a> {
    /// Which of the client's fields pass.
    inbound: Inbound,
    /// What the gateway adds to them.
    added: Added<'a>,
    /// Whether the request may reach a backend more than once.
    safe_to_repeat: bool,
}

impl<'a> Outgoing<'a> {
    /// Decides from the client's `fields` and `method`, for the tenant's
    /// `route` in a cell that is `prefixed` or not.
    #[inline]
    fn new(
        config: &'a GatewayConfig,
        prefixed: bool,
        route: &'a TenantRoute,
        fields: &'a Fields,
        peer: &'a Peer,
        method: &Method,
    ) -> Self {
        // What may pass is decided before anything is decided from the
        // fields: a header the client named in `Connection` (`Connection:
        // Idempotency-Key`) is hop-by-hop and never reaches the backend, so
        // it cannot make the request safe to repeat either.
        let inbound = Inbound::new(fields, config.forwarding.x_forwarded_for, prefixed);
        let added = Added::new(
            &config.forwarding,
            fields,
            peer.forwarded_for.as_ref(),
            route.tenant_header.as_ref(),
        );
        let safe_to_repeat = headers::is_idempotent(method) || inbound.idempotency_key();
        Self {
            inbound,
            added,
            safe_to_repeat,
        }
    }
}

/// The body set-up for a request that has a body, and when it ended: read
/// whole (and the clock read then) when the request may be repeated and its
/// declared length allows a replay, else streamed as attempts send it
/// (`started`, nothing having been waited for).
async fn receive_body(
    incoming: ClientBody,
    declared_length: Option<u64>,
    safe_to_repeat: bool,
    config: &GatewayConfig,
    started: Instant,
    deadline: Instant,
) -> Result<(RequestBody, Instant), ClientFault> {
    if safe_to_repeat
        && declared_length
            .is_some_and(|length| length <= config.routing.max_replay_body_bytes as u64)
    {
        // A client that sends its head and then stalls its body must not
        // hold the request (and its connection) open for ever.
        let collected = tokio::time::timeout_at(
            deadline,
            Limited::new(incoming, config.routing.max_replay_body_bytes).collect(),
        )
        .await;
        match collected {
            Ok(Ok(collected)) => {
                // Reading the body took time the attempt must not be
                // charged with.
                let now = Instant::now();
                Ok((RequestBody::Buffered(collected.to_bytes()), now))
            }
            // An HTTP/2 stream's body that sent nothing for the client
            // body timeout is a stall, like one the deadline ran out on.
            Ok(Err(error))
                if matches!(
                    error.downcast_ref::<ClientBodyError>(),
                    Some(ClientBodyError::Stalled(_))
                ) =>
            {
                Err(ClientFault::Stalled)
            }
            Ok(Err(_)) => Err(ClientFault::Broken),
            Err(_elapsed) => Err(ClientFault::Stalled),
        }
    } else {
        // Streamed: a chunked body declares no length, so the limit is
        // enforced as the bytes pass. One safe to repeat that states no
        // length (every gRPC call) is kept as it passes, if it fits, so it
        // can still go to another member once it has ended.
        let keep = if safe_to_repeat && declared_length.is_none() {
            config.routing.max_replay_body_bytes
        } else {
            0
        };
        Ok((
            RequestBody::once(incoming, config.limits.max_body_bytes, keep),
            started,
        ))
    }
}

/// The framing the gateway states for `body`. A streamed body's framing is
/// the gateway's to state: the client's `Transfer-Encoding` is hop-by-hop
/// and never passes, its `Content-Length` may have been named in
/// `Connection`, and without either the backend client sends a GET's body
/// as no body at all.
fn stated(body: &RequestBody, declared_length: Option<u64>) -> Option<Stated> {
    match (body, declared_length) {
        (RequestBody::Once(_), Some(length)) => Some(Stated::Length(length)),
        (RequestBody::Once(_), None) => Some(Stated::Chunked),
        (RequestBody::Buffered(_), _) => None,
    }
}

/// The attempts of one request: what each of them sends and may take, and
/// what the earlier ones left.
struct Attempts<'a> {
    gateway: &'a Gateway,
    config: &'a GatewayConfig,
    /// The tenant's cell and its shards.
    cell: usize,
    shards: &'a [Arc<ShardRuntime>],
    /// The tenant's subset.
    subset: &'a [ShardIndex],
    /// The tenant's id.
    tenant: &'a str,
    /// The client's head, the target and the body every attempt sends.
    client: RequestHead<'a>,
    uri: &'a Uri,
    body: &'a RequestBody,
    /// Whether the request may reach a backend more than once.
    safe_to_repeat: bool,
    /// The request's overall deadline.
    deadline: Instant,
    /// The last clock reading.
    now: Instant,
    /// The shards tried so far.
    tried: SmallVec<[ShardIndex; 8]>,
    /// How the last attempt failed, with the backend's response when it
    /// answered with a retryable status.
    last_failure: Option<(Failure, Option<Response<UpstreamBody>>)>,
    /// A gRPC call or any other request.
    kind: Kind,
    /// The deadline passed before another attempt could start.
    out_of_time: bool,
    /// Each shard's in-flight cap by index, when the cell has any.
    caps: Option<&'a [u64]>,
    /// Poison containment's state for this request, once it has any (a
    /// crash-like failure, or a tenant with strikes or suspect): boxed, so
    /// that the request's future does not grow by what it rarely needs.
    containment: Option<Box<Containment>>,
    /// Every member left was at its in-flight cap.
    shed: bool,
    /// The tenant's attempts in flight were on `routing.poison_after`
    /// members, none of which this request could use
    /// (`routing.poison_spread = "contained"`).
    spread_full: bool,
    /// Where the access log notes the shards tried, when it is on.
    logged_tried: Option<&'a mut SmallVec<[ShardIndex; 8]>>,
}

/// What poison containment knows about one request.
#[derive(Debug, Default)]
struct Containment {
    /// The tenant is suspect.
    suspect: bool,
    /// The only members the next attempt may go to (in the subset), when
    /// the tenant is narrowed: a suspect's struck members (none of them in
    /// the subset now: not narrowed), or those a tenant with strikes has
    /// struck or is being tried on once they number `poison_after`.
    pinned: Option<SmallVec<[ShardIndex; 8]>>,
    /// The members this request failed crash-like on, as the tenant's own.
    crashed: SmallVec<[ShardIndex; 8]>,
    /// The token naming this request's strikes (0: none asked for yet).
    request: u64,
    /// The request was stopped: no member more is tried.
    stopped: bool,
}

/// An attempt's probe of a member its tenant has not struck, while the
/// tenant has strikes ([`Suspects::begin`]); ends with the attempt, however
/// it ends (a client that hangs up drops it too).
struct Probe<'a> {
    suspects: &'a Suspects,
    tenant: &'a str,
    shard: &'a str,
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        self.suspects.end(self.tenant, self.shard, Instant::now());
    }
}

/// What an attempt holds for poison containment until it ends.
enum Hold<'a> {
    /// A probe in the tenant's strikes (`routing.poison_spread = "free"`).
    Probe(#[allow(dead_code)] Probe<'a>),
    /// Its place among the members the tenant is on (`"contained"`).
    Flight(#[allow(dead_code)] Flight<'a>),
}

/// A member as [`crate::health::spread`] names it: its run-time state's
/// address, which the request holds while its attempt is counted there.
#[inline]
fn member_key(shard: &Arc<ShardRuntime>) -> usize {
    Arc::as_ptr(shard) as usize
}

/// How many times one attempt's member is chosen again because racing
/// requests of its tenant took the last member it could try first: each
/// time the tenant's standing is read afresh and narrows the choice, so a
/// second pick almost always stands.
const PROBE_RACES: usize = 4;

/// The member the next attempt goes to.
struct Member<'a> {
    index: ShardIndex,
    /// It is outside the subset.
    spill: bool,
    /// A member of the subset not yet tried was out of rotation.
    steered: bool,
    /// How long to wait before the attempt (after a failed one).
    backoff: Option<Duration>,
    /// Its in-flight place, taken already under its cap.
    reserved: Option<InFlight>,
    /// Its probe, when the tenant has strikes and had not struck it, or its
    /// place among the members the tenant is on.
    hold: Option<Hold<'a>>,
}

/// One attempt under way.
struct Attempt<'a> {
    shard: &'a Arc<ShardRuntime>,
    /// The shard's index in its cell.
    shard_index: usize,
    started: Instant,
    /// Counted until the response has been sent, or until this request is
    /// dropped (a client that hangs up cancels it mid-attempt).
    in_flight: InFlight,
    /// Poison containment's hold on the member, if any.
    _hold: Option<Hold<'a>>,
}

impl<'a> Attempts<'a> {
    /// The cell's name, for metrics and logs.
    fn cell_name(&self) -> &'a str {
        &self.config.cells[self.cell].name
    }

    /// The member step: the shard the next attempt goes to, if another
    /// attempt may be made.
    #[inline]
    fn member(&mut self) -> Option<Member<'a>> {
        // Poison containment reads the tenant's strikes before every
        // attempt: one load while no tenant has any (almost always), and
        // no lock for a tenant without any while others have some.
        if self.gateway.suspects.any() || self.containment.is_some() {
            self.contain();
        }
        let routing = &self.config.routing;
        let contained =
            routing.poison_after != 0 && routing.poison_spread == PoisonSpread::Contained;
        let mut races = 0;
        // The members the tenant is on or struck, once an attempt found it
        // at `poison_after` of them (`"contained"`): the next pick is among
        // them.
        let mut reached: Option<SmallVec<[ShardIndex; 8]>> = None;
        let (choice, index, spill, hold) = loop {
            let mut narrowed = Narrowed {
                caps: self.caps,
                pinned: None,
            };
            if let Some(containment) = &self.containment {
                if containment.stopped {
                    return None;
                }
                narrowed.pinned = containment.pinned.as_deref();
            }
            if let Some(reached) = &reached {
                narrowed.pinned = Some(reached);
            }
            let choice = member::pick(
                self.subset,
                &self.tried,
                self.shards,
                self.config,
                self.now,
                narrowed,
            );
            let (index, spill) = match choice.pick {
                Pick::Member(index) => (index, false),
                Pick::Spill(index) => (index, true),
                Pick::Exhausted => {
                    self.shed |= choice.full;
                    self.spread_full |= reached.is_some();
                    return None;
                }
            };
            if contained {
                match self.flight(index) {
                    Ok(flight) => break (choice, index, spill, Some(Hold::Flight(flight))),
                    // The tenant is on `poison_after` members already (or
                    // racing requests got it there): join one of them.
                    Err(full) if races < PROBE_RACES => {
                        races += 1;
                        reached = Some(self.among(&full.reached));
                    }
                    Err(_) => {
                        self.spread_full = true;
                        return None;
                    }
                }
                continue;
            }
            if self.containment.is_none() {
                break (choice, index, spill, None);
            }
            match self.probe(index) {
                Ok(probe) => break (choice, index, spill, probe.map(Hold::Probe)),
                // Racing requests of the tenant took the last member it
                // could try first: read its standing again.
                Err(()) if races < PROBE_RACES => {
                    races += 1;
                    self.contain();
                }
                Err(()) => return None,
            }
        };
        let backoff = if self.tried.is_empty() {
            None
        } else {
            Some(self.failover()?)
        };
        Some(Member {
            index,
            spill,
            steered: choice.steered,
            backoff,
            reserved: choice.reserved,
            hold,
        })
    }

    /// Poison containment with `routing.poison_spread = "contained"`, as an
    /// attempt on the shard at `index` begins: its place among the members
    /// the tenant is on, or, when the tenant is on (or struck)
    /// `routing.poison_after` others, those members.
    #[inline]
    fn flight(&self, index: ShardIndex) -> Result<Flight<'a>, Full> {
        let (gateway, shards) = (self.gateway, self.shards);
        let tenant = gateway.spread.tenant(self.tenant);
        let cap = self.config.routing.poison_after as usize;
        gateway
            .spread
            .join(tenant, member_key(&shards[index as usize]), cap, || {
                // One load while no tenant has strikes.
                if !gateway.suspects.any() {
                    return None;
                }
                self.struck()
            })
    }

    /// The members the tenant has struck, as [`member_key`]s of its cell.
    #[cold]
    #[inline(never)]
    fn struck(&self) -> Option<Members> {
        let struck = self.gateway.suspects.struck(self.tenant, self.now)?;
        Some(
            self.shards
                .iter()
                .filter(|shard| struck.contains(&shard.id))
                .map(member_key)
                .collect(),
        )
    }

    /// The members of the subset among `reached` ([`member_key`]s) that
    /// the tenant may use (a suspect only those it struck).
    #[cold]
    #[inline(never)]
    fn among(&self, reached: &Members) -> SmallVec<[ShardIndex; 8]> {
        let pinned = self.containment.as_ref().and_then(|c| c.pinned.as_deref());
        self.subset
            .iter()
            .copied()
            .filter(|&index| reached.contains(&member_key(&self.shards[index as usize])))
            .filter(|index| pinned.is_none_or(|pinned| pinned.contains(index)))
            .collect()
    }

    /// Poison containment before an attempt: where the tenant's strikes
    /// or quarantine let it be served now (shared by all its requests, so
    /// read afresh every time).
    #[cold]
    #[inline(never)]
    fn contain(&mut self) {
        let poison_after = self.config.routing.poison_after as usize;
        let standing = if poison_after == 0 {
            None
        } else {
            self.gateway
                .suspects
                .standing(self.tenant, self.now, poison_after)
        };
        let Some(standing) = standing else {
            if let Some(containment) = &mut self.containment {
                containment.suspect = false;
                containment.pinned = None;
            }
            return;
        };
        let shards = self.shards;
        let pinned = standing.only.map(|only| {
            self.subset
                .iter()
                .copied()
                .filter(|&index| only.contains(&shards[index as usize].id))
                .collect::<SmallVec<[ShardIndex; 8]>>()
        });
        let containment = self.containment.get_or_insert_with(Box::default);
        containment.suspect = standing.suspect;
        // A suspect none of whose struck members is in its subset now (a
        // reload moved it) is not narrowed: nowhere else is safer.
        containment.pinned = pinned.filter(|pinned| !(standing.suspect && pinned.is_empty()));
    }

    /// Poison containment as an attempt on the shard at `index` begins:
    /// its probe when the tenant has strikes and had not struck it, or
    /// `Err` when racing requests of the tenant have reached
    /// `routing.poison_after` members meanwhile.
    #[cold]
    #[inline(never)]
    fn probe(&self, index: ShardIndex) -> Result<Option<Probe<'a>>, ()> {
        let suspects = &self.gateway.suspects;
        let shard = self.shards[index as usize].id.as_str();
        let poison_after = self.config.routing.poison_after as usize;
        if poison_after == 0 {
            return Ok(None);
        }
        match suspects.begin(self.tenant, shard, self.now, poison_after) {
            Begun::Free => Ok(None),
            Begun::Probe => Ok(Some(Probe {
                suspects,
                tenant: self.tenant,
                shard,
            })),
            Begun::Refused => Err(()),
        }
    }

    /// Poison containment when an attempt was answered after this request
    /// struck: what a member answered was not poison, so its strikes are
    /// taken back.
    #[cold]
    #[inline(never)]
    fn answered(&self) {
        if let Some(containment) = &self.containment
            && containment.request != 0
        {
            self.gateway
                .suspects
                .withdraw(self.tenant, containment.request, self.now);
        }
    }

    /// Poison containment after a crash-like `failure` on the shard at
    /// `index`: unless the member is timing out other tenants too (its
    /// fault, not the tenant's), records the tenant's strike at once (its
    /// other requests see it before their next attempt), stops the request
    /// at `routing.poison_after` members of its own or when the strike made
    /// the tenant suspect, and extends a suspect's quarantine.
    #[cold]
    #[inline(never)]
    fn crashed(&mut self, index: usize, failure: Failure, sent: Instant) {
        let (gateway, routing) = (self.gateway, &self.config.routing);
        if routing.poison_after == 0 {
            return;
        }
        let shard = &self.shards[index];
        let cell = &self.config.cells[self.cell].name;
        let now = Instant::now();
        // A member that was already failing other tenants when this
        // attempt was sent is what fails. Only failures seen before the
        // attempt began count: requests in flight before a hanging poison
        // time out before it does, and must not excuse it. Only a timeout
        // is excused so: a crash breaks every request the member holds, the
        // poison's among them, and a tenant whose request is answered
        // elsewhere takes its strike back (`answered`).
        // A hung member fails others only as their attempts time out, one
        // per try at most: a failure within the longest a request lasts
        // before this one was sent still says it was failing.
        let window = routing.request_timeout;
        if gateway
            .suspects
            .shared_fault(shard.window_key(), self.tenant, (sent, now), window)
            && failure == Failure::Timeout
        {
            tracing::debug!(cell = %cell, shard = %shard.id, "a per-try timeout on a shard that is failing other tenants too: no strike");
            return;
        }
        let containment = self.containment.get_or_insert_with(Box::default);
        containment.crashed.push(index as ShardIndex);
        if containment.request == 0 {
            containment.request = gateway.suspects.request();
        }
        let own_stop = containment.crashed.len() >= routing.poison_after as usize;
        let marked = gateway.suspects.record(
            Struck {
                cell,
                tenant: self.tenant,
                shard: &shard.id,
                request: containment.request,
                stopped: own_stop,
            },
            now,
            Rules {
                poison_after: routing.poison_after as usize,
                strike_life: routing.request_timeout,
                quarantine: routing.quarantine,
            },
        );
        let new_suspect = marked == Some(Marked::New);
        let stopped = own_stop || new_suspect;
        containment.stopped |= stopped;
        // A request of a suspect obeys its containment from now on.
        containment.suspect |= marked.is_some();
        if stopped {
            Metrics::cell_event(&gateway.metrics.poison_stops, cell);
        }
        if new_suspect {
            Metrics::cell_event(&gateway.metrics.suspects_marked, cell);
        }
        if stopped || new_suspect {
            // One line for both: they are usually the same moment.
            let what = match (own_stop, new_suspect) {
                (true, true) => {
                    "a request failed crash-like on routing.poison_after members: no further member is tried, and its tenant is suspect (served only by the members it struck, without failover after a request was sent)"
                }
                (true, false) => {
                    "a request failed crash-like on routing.poison_after members: no further member is tried"
                }
                _ => {
                    "tenant is suspect of poisoning its shards: its requests failed crash-like on routing.poison_after members together; it is served only by the members it struck, without failover after a request was sent"
                }
            };
            tracing::warn!(
                cell = %cell,
                tenant = %self.tenant,
                members = containment.crashed.len(),
                quarantine_seconds = routing.quarantine.as_secs(),
                "{what}"
            );
        }
    }

    /// Whether the request may fail over after a failed attempt, and the
    /// backoff before it does (the rules are the module's).
    fn failover(&self) -> Option<Duration> {
        let (gateway, routing) = (self.gateway, &self.config.routing);
        // Without failover (a drill's control experiment) one attempt is
        // all a request gets.
        if !routing.failover {
            return None;
        }
        let may_have_reached = self
            .last_failure
            .as_ref()
            .is_some_and(|(failure, _)| failure.maybe_sent());
        // A suspect tenant's request that may have reached a shard stays
        // there: the next member could be its next victim.
        if let Some(containment) = &self.containment
            && containment.suspect
            && self
                .last_failure
                .as_ref()
                .is_some_and(|(failure, _)| failure.maybe_sent() || failure.crash_like())
        {
            return None;
        }
        if self.kind == Kind::Grpc {
            // What a gRPC client would have seen: a connection that broke
            // is `UNAVAILABLE` to it, a per-try timeout `DEADLINE_EXCEEDED`
            // (as gRPC's own retry policy sees transport failures).
            let answer = match &self.last_failure {
                Some((Failure::GrpcStatus(status), _)) => Some(*status),
                Some((Failure::Reset, _)) => Some(Code::Unavailable),
                Some((Failure::Timeout, _)) => Some(Code::DeadlineExceeded),
                _ => None,
            };
            let retry = grpc::Retry {
                sent: may_have_reached,
                repeat_safe: self.safe_to_repeat,
                body_replayable: self.body.replayable(),
                answer,
                retry_on: routing.retry_on_grpc_status,
            };
            if !grpc::may_fail_over(retry) {
                return None;
            }
        }
        if may_have_reached {
            if !(self.safe_to_repeat && self.body.replayable()) {
                return None;
            }
            if !gateway.budget.try_withdraw(Instant::now()) {
                Metrics::cell_event(&gateway.metrics.budget_exhausted, self.cell_name());
                return None;
            }
        } else if !self.body.replayable() {
            return None;
        }
        gateway.metrics.failover(self.cell_name(), "retry");
        let backoff = backoff(self.tried.len(), routing.backoff_base, routing.backoff_max);
        if Instant::now() + backoff >= self.deadline {
            return None;
        }
        Some(backoff)
    }

    /// The attempt step begins: counts the attempt on `member` and starts
    /// its clock, unless the deadline has passed.
    #[inline]
    fn start(&mut self, member: Member<'a>, served: &mut Served) -> Option<Attempt<'a>> {
        let gateway = self.gateway;
        if self.tried.is_empty() && member.steered {
            // The tenant is being steered around a member that is out: a
            // failover that happens before any attempt fails.
            gateway.metrics.failover(self.cell_name(), "reroute");
        }
        if member.spill {
            // Counted only now that the attempt will really be made.
            Metrics::cell_event(&gateway.metrics.spills, self.cell_name());
        }
        self.tried.push(member.index);
        if let Some(tried) = &mut self.logged_tried {
            tried.push(member.index);
        }
        let started = if served.attempts == 0 {
            self.now
        } else {
            Instant::now()
        };
        if started >= self.deadline {
            return None;
        }
        let shard = &self.shards[member.index as usize];
        shard.attempts.fetch_add(1, Ordering::Relaxed);
        let in_flight = match member.reserved {
            Some(place) => place,
            None => InFlight::start(Arc::clone(shard)),
        };
        served.attempts += 1;
        Some(Attempt {
            shard,
            shard_index: member.index as usize,
            started,
            in_flight,
            _hold: member.hold,
        })
    }

    /// The attempt's exchange with its shard. (A plain function returning
    /// the exchange, inlined so that `route` builds the exchange's future
    /// in place, a few kilobytes not copied, and awaits it with no layer
    /// between.)
    #[inline(always)]
    fn send(
        &self,
        attempt: &Attempt<'a>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, Failure>> + use<'a> {
        let client = match self.kind {
            Kind::Grpc => self.grpc_head(attempt),
            Kind::Http => self.client,
        };
        attempt::send(
            attempt.shard,
            client,
            self.uri,
            self.body,
            self.timing(attempt),
            self.safe_to_repeat,
        )
    }

    /// The head a gRPC call's attempt sends: the shard is told what is left
    /// when the attempt goes out, until the per-try timeout when it already
    /// runs (a buffered body), else until the request's deadline.
    #[inline(never)]
    fn grpc_head(&self, attempt: &Attempt<'a>) -> RequestHead<'a> {
        let mut client = self.client;
        let timing = self.timing(attempt);
        let per_try = self.body.is_buffered().then_some(timing.per_try);
        let until = grpc::attempt_limit(timing.deadline, timing.started, per_try);
        client.added.grpc_timeout = Some(grpc::remaining(until, Instant::now()));
        client
    }

    /// The attempt's exchange for a WebSocket upgrade; boxed, so that the
    /// futures of ordinary requests do not grow by it.
    fn upgrade(
        &self,
        attempt: &Attempt<'a>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, Failure>> + Send + 'a>> {
        Box::pin(attempt::upgrade(
            attempt.shard,
            self.client,
            self.uri,
            self.timing(attempt),
        ))
    }

    /// When the attempt started and how long it may run.
    fn timing(&self, attempt: &Attempt<'a>) -> attempt::Timing {
        let limits = &self.config.limits;
        attempt::Timing {
            started: attempt.started,
            per_try: self.config.routing.per_try_timeout,
            deadline: self.deadline,
            body_idle: limits.backend_idle_timeout,
            body_total: limits.backend_body_timeout,
        }
    }

    /// The outcome of an attempt the client's body did not end: how it
    /// failed, if it did (a retryable status is a failure too), recorded
    /// for the shard.
    #[inline]
    fn judge(
        &mut self,
        attempt: &Attempt<'a>,
        result: &Result<Response<UpstreamBody>, Failure>,
    ) -> Option<Failure> {
        let (gateway, config, shard) = (self.gateway, self.config, attempt.shard);
        let failure = match result {
            Err(failure) => Some(*failure),
            Ok(response)
                if config
                    .routing
                    .retry_on_status
                    .contains(&response.status().as_u16()) =>
            {
                Some(Failure::Status(response.status().as_u16()))
            }
            Ok(response) if self.kind == Kind::Grpc => {
                grpc::status_in_fields(response.status(), response.body().fields())
                    .filter(|status| config.routing.retry_on_grpc_status.contains(*status))
                    .map(Failure::GrpcStatus)
            }
            Ok(_) => None,
        };
        let now = Instant::now();
        self.now = now;
        let elapsed = now.saturating_duration_since(attempt.started);
        shard
            .metrics(&gateway.metrics)
            .attempt(failure.map_or("ok", Failure::name), elapsed);
        gateway
            .shard_windows
            .record(shard.window_key(), (failure.is_none(), elapsed), now);
        // A failure counts now; a success only once its body has ended
        // cleanly (see `body::BackendBody`): a shard that answers heads and
        // then stalls must not have each head forgive its last stall.
        if failure.is_some() {
            gateway.record_failure(&config.outlier, shard, now);
        }
        failure
    }

    /// The outcome when nothing (more) may be tried: the last backend
    /// response if there was one, else why there is none.
    fn unanswered(self) -> Response<ResponseBody> {
        let kind = self.kind;
        if self.containment.as_ref().is_some_and(|c| c.stopped) {
            return refuse(
                kind,
                StatusCode::BAD_GATEWAY,
                Code::Unavailable,
                "the request failed as if it crashed the shards it reached (routing.poison_after); \
                 no further shard is tried and the tenant is quarantined for a while; \
                 do not resend this request, and ask the operator if it is a valid one",
            );
        }
        match self.last_failure {
            Some((_, Some(response))) => {
                let (head, body) = response.into_parts();
                Response::from_parts(head, ResponseBody::backend(body, None))
            }
            Some((Failure::Timeout, None)) => refuse(
                kind,
                StatusCode::GATEWAY_TIMEOUT,
                Code::DeadlineExceeded,
                "the backend did not answer in time",
            ),
            Some((Failure::Reset | Failure::Status(_) | Failure::GrpcStatus(_), None)) => refuse(
                kind,
                StatusCode::BAD_GATEWAY,
                Code::Unavailable,
                "the backend failed",
            ),
            // A gRPC call's deadline (often its own, short `grpc-timeout`)
            // ran out before a member could be tried: that is what its
            // client asked to be told.
            None | Some((Failure::Connect | Failure::Vanished, None))
                if kind == Kind::Grpc && self.out_of_time =>
            {
                refuse(
                    kind,
                    StatusCode::GATEWAY_TIMEOUT,
                    Code::DeadlineExceeded,
                    "the deadline passed before a shard could be tried",
                )
            }
            // Nothing was tried, or every member refused the connection:
            // the subset is out, and the client should come back later.
            None | Some((Failure::Connect | Failure::Vanished, None)) => {
                let message = if self.shed {
                    Metrics::cell_event(&self.gateway.metrics.shed, self.cell_name());
                    "every shard serving this tenant is at its in-flight limit; retry after the time in Retry-After"
                } else if self
                    .containment
                    .as_ref()
                    .is_some_and(|containment| containment.suspect)
                {
                    "this tenant is quarantined after its requests crashed shards, and the shards it may use now are unavailable; retry later"
                } else if self.spread_full {
                    "this tenant's requests in flight already use routing.poison_after shards of its subset and none of those could take this one; retry after the time in Retry-After, or ask the operator about routing.poison_spread"
                } else {
                    "no healthy shard is available for this tenant"
                };
                let mut response = refuse(
                    kind,
                    StatusCode::SERVICE_UNAVAILABLE,
                    Code::Unavailable,
                    message,
                );
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(self.config.routing.retry_after_seconds),
                );
                response
            }
        }
    }
}

impl Attempt<'_> {
    /// Whether an operator failed the shard.
    #[inline]
    fn operator_failed(&self) -> bool {
        self.shard.health.lock().expect("health lock").failed
    }

    /// The outcome when the client's body ended the attempt.
    fn client_fault(
        self,
        kind: Kind,
        fault: ClientFault,
        cell_name: &str,
    ) -> Response<ResponseBody> {
        drop(self.in_flight);
        tracing::debug!(cell = %cell_name, shard = %self.shard.id, ?fault, "the client's request body ended the attempt");
        client_fault_response(kind, fault)
    }
}

/// Streams a backend response to the client, keeping the shard's in-flight
/// count until the body ends. (The backend's header fields go out filtered
/// by [`headers::outbound`] when the response is written.)
fn stream_back(response: Response<UpstreamBody>, in_flight: InFlight) -> Response<ResponseBody> {
    let (head, body) = response.into_parts();
    Response::from_parts(head, ResponseBody::backend(body, Some(in_flight)))
}

/// Exponential backoff with full jitter: a random wait up to
/// `base × 2^(attempt−1)`, capped.
fn backoff(attempt: usize, base: Duration, max: Duration) -> Duration {
    let nominal = base
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(max);
    nominal.mul_f64(fastrand::f64())
}

/// The answer when the client's own body failed the request.
fn client_fault_response(kind: Kind, fault: ClientFault) -> Response<ResponseBody> {
    match fault {
        ClientFault::TooLarge => refuse(
            kind,
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::ResourceExhausted,
            "request body too large",
        ),
        ClientFault::Broken => refuse(
            kind,
            StatusCode::BAD_REQUEST,
            Code::Internal,
            "could not read the request body",
        ),
        ClientFault::Stalled => refuse(
            kind,
            StatusCode::REQUEST_TIMEOUT,
            Code::DeadlineExceeded,
            "the request body did not arrive in time",
        ),
    }
}

/// Every error the gateway itself answers a request with, shaped for its
/// `kind`: for an HTTP request the JSON error of `status`
/// ([`error_response`]); for a gRPC call a trailers-only answer with `code`
/// ([`grpc::error`]), which a gRPC client can read where it could not read
/// an error page. `message` is the same either way.
pub fn refuse(kind: Kind, status: StatusCode, code: Code, message: &str) -> Response<ResponseBody> {
    match kind {
        Kind::Http => error_response(status, message),
        Kind::Grpc => grpc::error(code, message, status),
    }
}

/// A JSON error response.
pub fn error_response(status: StatusCode, message: &str) -> Response<ResponseBody> {
    json_error(status, json_error_body(status, message))
}

/// A JSON error response whose body is already written.
fn json_error(status: StatusCode, body: Bytes) -> Response<ResponseBody> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
