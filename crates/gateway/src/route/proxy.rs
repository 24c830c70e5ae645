//! The request path, one step after another: credential → tenant → cell and
//! subset → target check → body set-up → member → attempt → outcome. `route`
//! reads as that list; each step is a function or method named for it
//! (`tenant`, `Snapshot::tenant_route`, `target_allowed`, `deadline`,
//! `body_refusal`, `outgoing` and `receive_body`, then the attempts, set up
//! by `attempts` and one level down in [`crate::route::attempts`]:
//! `Attempts::member`, `Attempts::start` and `send`, then `outcome` here,
//! which has `Attempts::judge` judge the result and streams an answer back
//! (`stream_back`) or opens its tunnel, or `Attempts::unanswered` there).
//! The gateway's own error answers are [`crate::route::refusal`]'s.
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

use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use hyper::body::Body;
use placement::ShardIndex;
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::cell::TenantRoute;
use crate::config::GatewayConfig;
use crate::limit::{Refusal, TenantInFlight, TenantLimit};
use crate::protocol::wire::{Fields, RequestHead};
use crate::route::admission;
use crate::route::attempt::Failure;
use crate::route::attempts::{Attempt, Attempts};
use crate::route::body_setup::{Outgoing, receive_body, stated};
use crate::route::grpc::{self, Kind};
use crate::route::peer::Peer;
use crate::route::record::{
    Logged, Served, client_fault, log_request, noted, records, trace_request,
};
use crate::route::refusal::{error_response, json_error, refuse};
use crate::route::response::{InFlight, ResponseBody};
use crate::route::tunnel;
use crate::state::{Gateway, Snapshot};
use crate::syntax::grpc::Code;
use crate::telemetry::traces::Trace;
use crate::tenants::Tenant;
use crate::trust::credential::{self, AuthError};
use crate::trust::target;
use crate::upstream::UpstreamBody;
use crate::upstream::body::{ClientBody, RequestBody};

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
    let mut trace = None;
    let (mut response, served) = route(
        &gateway,
        request,
        fields,
        peer,
        started,
        &mut body,
        websocket,
        kind,
        (&mut log, &mut trace),
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
            (peer.addr, started, elapsed),
            (body.as_ref(), trace.as_deref()),
        );
    }
    if let Some(trace) = trace {
        trace_request(
            &gateway,
            *trace,
            served.as_ref(),
            (status, grpc_status),
            (peer.addr, elapsed),
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
                .map_or("", |tenant| tenant.id());
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
    (log, trace): (&mut Option<Box<Logged>>, &mut Option<Box<Trace>>),
) -> (Response<ResponseBody>, Option<Served>) {
    if request.method() == Method::CONNECT {
        return (connect_refused(), None);
    }
    let snapshot = gateway.snapshot();
    let config = &snapshot.config;
    records(config, &request, fields, (peer, started), (log, trace));
    if request.version() == http::Version::HTTP_2
        && let Some(refused) = http2_refusal(&request, fields, config, kind)
    {
        return (noted(refused, trace, "bad_request"), None);
    }

    // Credential → tenant.
    let tenant = match tenant(&snapshot, fields, peer) {
        Ok(tenant) => tenant,
        Err(error) => return (unauthorized(kind, &error, trace), None),
    };

    // Tenant → cell and subset (computed once per tenant and snapshot).
    let Some(route) = snapshot.tenant_route(tenant) else {
        // Cannot happen: the tenant was found in this very snapshot.
        return (no_route(kind), None);
    };
    let mut served = Served::new(&snapshot, route.cell, tenant.slot());

    // The tenant's limits (one branch for a tenant without any).
    let mut tenant_in_flight = None;
    if let Some(limit) = snapshot.limits.of(tenant.slot()) {
        let (id, cell) = (tenant.id(), route.cell);
        let admitted = admission::admit_tenant(gateway, &snapshot, limit, id, cell, started).await;
        match admitted {
            Ok(guard) => tenant_in_flight = guard,
            Err(refusal) => return (limited(kind, limit, &refusal, trace), Some(served)),
        }
    }

    // The target check, then the deadline.
    if !target_allowed(&snapshot, route.cell, request.uri()) {
        return (target_refused(kind, trace), Some(served));
    }
    let deadline = match deadline(config, kind, fields, started) {
        Ok(deadline) => deadline,
        Err(refused) => return (noted(refused, trace, "bad_request"), Some(served)),
    };

    // The body set-up: refuse what is too large, decide what passes and
    // whether it may be repeated, buffer what may be replayed.
    let (parts, incoming) = request.into_parts();
    let declared_length = incoming.size_hint().exact();
    if let Some(refused) = body_refusal(config, kind, declared_length, &incoming, &websocket) {
        return (noted(refused, trace, "body_refused"), Some(served));
    }
    let (request_id, logged_tried) = Logged::for_attempts(log.as_deref_mut());
    let context = (request_id, trace.as_deref());
    let outgoing = outgoing(&snapshot, route, fields, peer, &parts, kind, context);
    // One clock read per attempt serves health, the deadline and timing.
    let (body, now) = if incoming.is_end_stream() {
        // No body (most requests): nothing to read, wait for or time.
        (RequestBody::Buffered(Bytes::new()), started)
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
            Ok(received) => received,
            Err(fault) => return (client_fault(kind, fault, trace), Some(served)),
        }
    };
    *request_body = Some(body.clone());
    gateway.budget.record_request(started);

    // Member → attempt → outcome, until one answers or nothing may be tried.
    let mut attempts = attempts(
        gateway,
        &snapshot,
        (route, tenant),
        (&parts, fields, &outgoing),
        (&body, declared_length, websocket.is_some()),
        (deadline, now, kind),
        (logged_tried, trace.as_deref_mut()),
    );
    loop {
        let Some(member) = attempts.member() else {
            // With `[fleet]`, one leaving its first members asks the fleet.
            if attempts.wants_fleet() {
                Box::pin(attempts.consult_fleet()).await;
                continue;
            }
            break;
        };
        if let Some(backoff) = member.backoff.filter(|backoff| !backoff.is_zero()) {
            tokio::time::sleep(backoff).await;
        }
        let Some(attempt) = attempts.start(member, &mut served.attempts) else {
            attempts.out_of_time = true;
            break;
        };
        let result = if attempt.operator_failed() {
            // An operator's failed shard fails as a refused connection
            // would (only possible with failover off), touching nothing.
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
            attempts.trace_client_fault();
            let response = attempt.client_fault(kind, fault, attempts.cell_name());
            return (response, Some(served));
        }
        if let Some(response) = outcome(
            &mut attempts,
            attempt,
            result,
            &mut websocket,
            &mut tenant_in_flight,
            gateway,
        ) {
            served.answered_at = Some(attempts.now);
            return (response, Some(served));
        }
        // The rest of a strike made as the attempt was judged (boxed: with
        // `[fleet]` it waits on the store).
        if attempts.struck_pending() {
            Box::pin(attempts.crashed()).await;
        }
    }
    (held(attempts.unanswered(), tenant_in_flight), Some(served))
}

/// The tenant → cell step's answer when the tenant has no route.
#[cold]
fn no_route(kind: Kind) -> Response<ResponseBody> {
    refuse(
        kind,
        StatusCode::INTERNAL_SERVER_ERROR,
        Code::Internal,
        "tenant has no route",
    )
}

/// The request's deadline: `routing.request_timeout_ms` after it
/// `started`, or a gRPC call's own deadline when it sets a shorter one (a
/// malformed `grpc-timeout` is refused).
#[inline]
#[expect(
    clippy::result_large_err,
    reason = "inlined into `route`, which returns the refusal as it is: boxing it would allocate"
)]
fn deadline(
    config: &GatewayConfig,
    kind: Kind,
    fields: &Fields,
    started: Instant,
) -> Result<Instant, Response<ResponseBody>> {
    let deadline = started + config.routing.request_timeout;
    if kind != Kind::Grpc {
        return Ok(deadline);
    }
    grpc::deadline(fields, started, deadline).map_err(|error| {
        let message = format!("malformed grpc-timeout: {error}");
        refuse(kind, StatusCode::BAD_REQUEST, Code::Internal, &message)
    })
}

/// The body set-up's refusals, before anything of the body is read: a
/// declared length over `limits.max_body_bytes`, and a WebSocket upgrade
/// request (`websocket`) that carries a body.
#[inline]
fn body_refusal(
    config: &GatewayConfig,
    kind: Kind,
    declared_length: Option<u64>,
    incoming: &ClientBody,
    websocket: &Option<tunnel::Requested>,
) -> Option<Response<ResponseBody>> {
    if declared_length.is_some_and(|length| length > config.limits.max_body_bytes) {
        return Some(refuse(
            kind,
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::ResourceExhausted,
            "request body too large",
        ));
    }
    if websocket.is_some() && !incoming.is_end_stream() {
        // Where a body would end and the new protocol begin is anyone's
        // guess: a smuggling opportunity, and no WebSocket client sends one.
        return Some(refuse(
            kind,
            StatusCode::BAD_REQUEST,
            Code::Internal,
            "a WebSocket upgrade request must not carry a body",
        ));
    }
    None
}

/// What the request's head decides for every attempt ([`Outgoing`]), with
/// the access log's `request_id`, when it is on, sent in place of the
/// client's, and a gRPC call's repeat-safety by its method.
#[inline]
fn outgoing<'a>(
    snapshot: &'a Snapshot,
    route: &'a TenantRoute,
    fields: &'a Fields,
    peer: &'a Peer,
    parts: &Parts,
    kind: Kind,
    (request_id, trace): (Option<&'a HeaderValue>, Option<&Trace>),
) -> Outgoing<'a> {
    let config = &snapshot.config;
    let mut outgoing = Outgoing::new(
        config,
        snapshot.prefixed[route.cell],
        route,
        fields,
        peer.forwarded_for.as_ref(),
        &parts.method,
    );
    if let Some(request_id) = request_id {
        // The gateway's id goes to the shard in place of the client's.
        outgoing.added.request_id = Some(request_id);
        outgoing.inbound.replace_request_id();
    }
    if let Some(trace) = trace {
        // The gateway's `traceparent` goes in place of the client's.
        outgoing.inbound.trace(trace.passes_tracestate());
    }
    if kind == Kind::Grpc {
        // Every call is a POST: a call is safe to repeat when its method
        // is configured so (or, as any request, by an idempotency key).
        outgoing.safe_to_repeat |=
            grpc::repeat_safe_method(&config.routing.grpc_idempotent_methods, parts.uri.path());
    }
    outgoing
}

/// The attempts of a request for `tenant` on its `route`, before the
/// first: the request as every attempt sends it, its body (`websocket`
/// when it asks to upgrade), its deadline, the clock read `now` and its
/// `kind`, and where the access log notes the shards tried.
// Always inlined: the attempts are built where the request's future keeps
// them, not built here and copied there.
#[inline(always)]
fn attempts<'a>(
    gateway: &'a Arc<Gateway>,
    snapshot: &'a Snapshot,
    (route, tenant): (&'a TenantRoute, Tenant<'a>),
    (parts, fields, outgoing): (&'a Parts, &'a Fields, &'a Outgoing<'a>),
    (body, declared_length, websocket): (&'a RequestBody, Option<u64>, bool),
    (deadline, now, kind): (Instant, Instant, Kind),
    (logged_tried, trace): (
        Option<&'a mut SmallVec<[ShardIndex; 8]>>,
        Option<&'a mut Trace>,
    ),
) -> Attempts<'a> {
    let cell = route.cell;
    Attempts {
        gateway,
        config: &snapshot.config,
        shards: &snapshot.shards[cell],
        cell,
        subset: route.subset.as_slice(),
        lookback: &route.lookback,
        lookback_window: snapshot.lookback.as_deref(),
        missed: None,
        tenant: tenant.id(),
        tenant_hash: tenant.id_hash(),
        // The head as every attempt sends it; each sets its shard's target,
        // `Host` and `x-shuffle-shard`.
        client: RequestHead {
            method: &parts.method,
            target: "",
            fields,
            inbound: &outgoing.inbound,
            stated: stated(body, declared_length),
            added: outgoing.added,
            host: None,
            shard: None,
        },
        uri: &parts.uri,
        body,
        // Once an upgrade request may have reached a shard, the shard may
        // have switched: only a connection never made fails over.
        safe_to_repeat: outgoing.safe_to_repeat && !websocket,
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
        trace,
    }
}

/// An attempt's outcome, as `attempts` judges its `result`: an answer is
/// the client's response (`None` when the attempt failed, which is noted
/// for the next). A WebSocket upgrade a shard switched becomes a tunnel,
/// which takes the client's `websocket` and the tenant's in-flight place.
// Always inlined, as `attempts`: the answer is not copied out of a frame.
#[inline(always)]
fn outcome<'a>(
    attempts: &mut Attempts<'a>,
    attempt: Attempt<'a>,
    result: Result<Response<UpstreamBody>, Failure>,
    websocket: &mut Option<tunnel::Requested>,
    tenant_in_flight: &mut Option<TenantInFlight>,
    gateway: &Arc<Gateway>,
) -> Option<Response<ResponseBody>> {
    match (attempts.judge(&attempt, &result), result) {
        // During a lookback window a new member may not hold the tenant's
        // data yet: its `404` to a read is a miss, and the next member is
        // asked (one comparison for every other answer).
        (None, Ok(response))
            if response.status() == StatusCode::NOT_FOUND && attempts.may_miss() =>
        {
            attempts.missed(response);
            None
        }
        (None, Ok(response)) => {
            if attempts.containment.is_some() {
                attempts.answered();
            }
            if response.status() == StatusCode::SWITCHING_PROTOCOLS
                && let Some(client) = websocket.take()
            {
                // The tunnel holds the tenant's in-flight place as it
                // holds the shard's, until both directions end.
                let tunnel = tunnel::open(
                    response,
                    client,
                    (attempt.in_flight, tenant_in_flight.take()),
                    gateway,
                    (attempts.cell_name(), attempts.tenant),
                    attempt.shard,
                );
                return Some(tunnel.unwrap_or_else(|| {
                    if let Some(trace) = &mut attempts.trace {
                        trace.note_outcome("tunnel_failed");
                    }
                    refuse(
                        attempts.kind,
                        StatusCode::BAD_GATEWAY,
                        Code::Unavailable,
                        "the backend failed",
                    )
                }));
            }
            // The common case returns the response where it is built.
            let response = stream_back(response, attempt.in_flight);
            Some(held(response, tenant_in_flight.take()))
        }
        (Some(failure), result) => {
            // Its probe, if any, ends only now: a strike it made was
            // recorded as it was judged, so the member is never left
            // uncounted.
            drop(attempt);
            attempts.last_failure = Some((failure, result.ok()));
            None
        }
        (None, Err(_)) => unreachable!("an error always has a failure"),
    }
}

/// `response`, holding the tenant's in-flight place (when its in-flight
/// requests are limited) until its body ends.
#[inline(always)]
fn held(
    mut response: Response<ResponseBody>,
    tenant_in_flight: Option<TenantInFlight>,
) -> Response<ResponseBody> {
    if let Some(guard) = tenant_in_flight {
        response.body_mut().hold(guard);
    }
    response
}

/// The answer to a request its tenant's limits refused: `429` with
/// `Retry-After`, or a trailers-only `RESOURCE_EXHAUSTED`.
#[inline(never)]
fn limited(
    kind: Kind,
    limit: &TenantLimit,
    refusal: &Refusal,
    trace: &mut Option<Box<Trace>>,
) -> Response<ResponseBody> {
    if let Some(trace) = trace {
        trace.note_limit(refusal.kind());
    }
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
    snapshot: &'s Arc<Snapshot>,
    fields: &Fields,
    peer: &Peer,
) -> Result<Tenant<'s>, AuthError> {
    if let Some(certificate) = &peer.certificate {
        return snapshot.authenticator.authenticate_with_certificate(
            certificate,
            fields,
            &snapshot.tenants,
        );
    }
    let jwt_enabled = snapshot.authenticator.jwt_enabled();
    let credential = credential::present(fields, jwt_enabled)?;
    // An API key this connection already authenticated in this snapshot
    // names the same tenant: no second SHA-256 ([`KeyMemo`]).
    let key = credential.api_key(jwt_enabled).map(str::as_bytes);
    if let Some(key) = key
        && let Some(slot) = peer.keys.recall(snapshot, key)
        && let Some(tenant) = snapshot.tenants.at(slot)
    {
        return Ok(tenant);
    }
    let tenant = snapshot
        .authenticator
        .authenticate_presented(credential, &snapshot.tenants)?;
    if let Some(key) = key {
        peer.keys.remember(snapshot, key, tenant.slot());
    }
    Ok(tenant)
}

/// The answer to a request whose credential named no tenant.
fn unauthorized(
    kind: Kind,
    error: &AuthError,
    trace: &mut Option<Box<Trace>>,
) -> Response<ResponseBody> {
    if let Some(trace) = trace {
        trace.note_outcome("unauthorized");
    }
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
fn target_refused(kind: Kind, trace: &mut Option<Box<Trace>>) -> Response<ResponseBody> {
    if let Some(trace) = trace {
        trace.note_outcome("target_refused");
    }
    refuse(
        kind,
        StatusCode::BAD_REQUEST,
        Code::PermissionDenied,
        "the request target has a dot-segment (\"/./\" or \"/../\", also percent-encoded) or is not a path; send a normalised absolute path",
    )
}

/// Streams a backend response to the client, keeping the shard's in-flight
/// count until the body ends. (The backend's header fields go out filtered
/// by [`headers::outbound`] when the response is written.)
fn stream_back(response: Response<UpstreamBody>, in_flight: InFlight) -> Response<ResponseBody> {
    let (head, body) = response.into_parts();
    Response::from_parts(head, ResponseBody::backend(body, Some(in_flight)))
}
