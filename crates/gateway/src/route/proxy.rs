//! The request path, one step after another: credential → tenant → cell →
//! subset → member → attempt → outcome.
//!
//! Failover rules: a connection failure (nothing sent) always moves on to
//! another member; a timeout, reset or retryable status moves on only when
//! the request is safe to repeat (an idempotent method or an
//! `Idempotency-Key`) and its body can still be sent again. Each shard is
//! tried at most once, so at most `k` attempts are made; attempts after a
//! request may have reached a backend draw on the shared retry budget and
//! are spaced by a short jittered backoff; and everything happens inside the
//! overall request deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Body;
use placement::ShardIndex;
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::ops::metrics::Metrics;
use crate::protocol::wire::{Fields, RequestHead, Stated};
use crate::route::attempt::{self, Failure};
use crate::route::member::{self, Pick};
use crate::route::response::{InFlight, ResponseBody, full};
use crate::state::{Gateway, Snapshot};
use crate::trust::credential;
use crate::trust::headers;
use crate::upstream::UpstreamBody;
use crate::upstream::body::{ClientBody, ClientFault, RequestBody};

/// Who a request was served for, for metrics and logs.
struct Served {
    /// The snapshot the request was routed with (its cell index means
    /// something only there).
    snapshot: Arc<Snapshot>,
    cell: usize,
    /// The tenant's position in the snapshot's tenants file.
    tenant: usize,
    attempts: usize,
    /// The method and path (without the query, which can carry secrets),
    /// kept only when the access log is on.
    request_line: Option<(Method, String)>,
    /// When a backend's answer was taken, if one was: the clock read that
    /// ended the attempt also ends the request (what is left is
    /// bookkeeping), saving a read per request.
    answered_at: Option<Instant>,
}

/// The client connection a request came on, as the request path needs it.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// The client's address as an `x-forwarded-for` value, formatted once
    /// per connection rather than per request.
    pub forwarded_for: Option<HeaderValue>,
}

impl Peer {
    /// The connection from `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            forwarded_for: headers::forwarded_for(addr.ip()),
        }
    }
}

/// Handles one client request and records its outcome.
pub async fn handle(
    gateway: Arc<Gateway>,
    request: Request<ClientBody>,
    fields: &Fields,
    peer: &Peer,
) -> Response<ResponseBody> {
    let started = Instant::now();
    let had_body = !request.body().is_end_stream();
    let mut body = None;
    let (mut response, served) = route(&gateway, request, fields, peer, started, &mut body).await;
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
    let outcome = crate::ops::metrics::request_outcome(status);
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
            // error counts as served.
            gateway
                .tenant_windows
                .record(tenant, !status.is_server_error(), now);
            if let Some((method, path)) = &served.request_line {
                tracing::info!(
                    tenant = %tenant,
                    method = %method,
                    path = %path,
                    cell = %served.snapshot.config.cells[served.cell].name,
                    status = status.as_u16(),
                    attempts = served.attempts,
                    elapsed_ms = elapsed.as_secs_f64() * 1000.0,
                    "request"
                );
            }
            // The body reports how it ends; the references move with it.
            response.body_mut().settle_with(gateway);
        }
        None => gateway.metrics.request("", outcome, elapsed),
    }
    response
}

/// The request path proper; returns the response and, once the tenant is
/// known, who it was for. `request_body` receives the request body once it
/// is set up, so the caller can tell whether it was read to the end.
async fn route(
    gateway: &Arc<Gateway>,
    request: Request<ClientBody>,
    fields: &Fields,
    peer: &Peer,
    started: Instant,
    request_body: &mut Option<RequestBody>,
) -> (Response<ResponseBody>, Option<Served>) {
    gateway.stats.requests.fetch_add(1, Ordering::Relaxed);
    if request.method() == Method::CONNECT {
        // A tunnel is not a request a shard can serve, and a backend that
        // said yes would turn the connection into a pipe no rule watches.
        let mut response = error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "CONNECT is not supported: the gateway routes requests, it does not open tunnels",
        );
        response.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
        );
        return (response, None);
    }
    let snapshot = gateway.snapshot();
    let config = &snapshot.config;
    let deadline = started + config.routing.request_timeout;

    // Credential → tenant.
    let tenant = match credential::extract(fields, snapshot.authenticator.jwt_enabled()).and_then(
        |credential| {
            snapshot
                .authenticator
                .authenticate(&credential, &snapshot.tenants)
        },
    ) {
        Ok(tenant) => tenant,
        Err(error) => {
            gateway.stats.unauthorized.fetch_add(1, Ordering::Relaxed);
            let mut response = error_response(StatusCode::UNAUTHORIZED, error.public_message());
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return (response, None);
        }
    };

    // Tenant → cell → subset (computed once per tenant and snapshot).
    let Some(route) = snapshot.tenant_route(tenant) else {
        // Cannot happen: the tenant was found in this very snapshot.
        return (
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "tenant has no route"),
            None,
        );
    };
    let (cell, subset) = (route.cell, route.subset.as_slice());

    let shards = &snapshot.shards[cell];
    let cell_name = snapshot.config.cells[cell].name.as_str();
    let mut served = Served {
        snapshot: Arc::clone(&snapshot),
        cell,
        tenant: tenant.position,
        attempts: 0,
        request_line: None,
        answered_at: None,
    };

    if snapshot.prefixed[cell] && !crate::trust::target::stays_under_prefix(request.uri()) {
        return (
            error_response(
                StatusCode::BAD_REQUEST,
                "the request target has a dot-segment (\"/./\" or \"/../\", also percent-encoded) or is not a path; send a normalised absolute path",
            ),
            Some(served),
        );
    }

    // The body: refuse what is too large, buffer what may be replayed.
    let (parts, incoming) = request.into_parts();
    if config.access_log {
        served.request_line = Some((parts.method.clone(), parts.uri.path().to_owned()));
    }
    let declared_length = incoming.size_hint().exact();
    if declared_length.is_some_and(|length| length > config.limits.max_body_bytes) {
        return (
            error_response(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
            Some(served),
        );
    }
    // What may pass is decided before anything is decided from the fields:
    // a header the client named in `Connection` (`Connection:
    // Idempotency-Key`) is hop-by-hop and never reaches the backend, so it
    // cannot make the request safe to repeat either.
    let inbound = headers::Inbound::new(
        fields,
        config.forwarding.x_forwarded_for,
        snapshot.prefixed[cell],
    );
    let added = headers::Added::new(
        &config.forwarding,
        fields,
        peer.forwarded_for.as_ref(),
        route.tenant_header.as_ref(),
    );
    let safe_to_repeat = headers::is_idempotent(&parts.method) || inbound.idempotency_key();
    // One clock read per attempt serves health, the deadline and timing.
    let mut now = started;
    let body = if incoming.is_end_stream() {
        // No body (most requests): nothing to read, wait for or time.
        RequestBody::Buffered(Bytes::new())
    } else if safe_to_repeat
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
                now = Instant::now();
                RequestBody::Buffered(collected.to_bytes())
            }
            Ok(Err(_)) => return (client_fault_response(ClientFault::Broken), Some(served)),
            Err(_elapsed) => return (client_fault_response(ClientFault::Stalled), Some(served)),
        }
    } else {
        // Streamed: a chunked body declares no length, so the limit is
        // enforced as the bytes pass.
        RequestBody::once(incoming, config.limits.max_body_bytes)
    };
    // A streamed body's framing is the gateway's to state: the client's
    // `Transfer-Encoding` is hop-by-hop and never passes, its
    // `Content-Length` may have been named in `Connection`, and without
    // either the backend client sends a GET's body as no body at all.
    let stated = match (&body, declared_length) {
        (RequestBody::Once(_), Some(length)) => Some(Stated::Length(length)),
        (RequestBody::Once(_), None) => Some(Stated::Chunked),
        (RequestBody::Buffered(_), _) => None,
    };
    // The head as every attempt sends it; each sets its shard's target,
    // `Host` and `x-shuffle-shard`.
    let client = RequestHead {
        method: &parts.method,
        target: "",
        fields,
        inbound: &inbound,
        stated,
        added,
        host: None,
        shard: None,
    };
    *request_body = Some(body.clone());
    gateway.budget.record_request(started);

    // Member → attempt → outcome, until one answers or nothing may be tried.
    let mut tried: SmallVec<[ShardIndex; 8]> = SmallVec::new();
    let mut last_failure: Option<(Failure, Option<Response<UpstreamBody>>)> = None;
    loop {
        let choice = member::pick(subset, &tried, shards, config, now);
        let (index, spill) = match choice.pick {
            Pick::Member(index) => (index, false),
            Pick::Spill(index) => (index, true),
            Pick::Exhausted => break,
        };
        if !tried.is_empty() {
            // Without failover (a drill's control experiment) one attempt
            // is all a request gets.
            if !config.routing.failover {
                break;
            }
            let may_have_reached = last_failure
                .as_ref()
                .is_some_and(|(failure, _)| failure.maybe_sent());
            if may_have_reached {
                if !(safe_to_repeat && body.replayable()) {
                    break;
                }
                if !gateway.budget.try_withdraw(Instant::now()) {
                    gateway
                        .stats
                        .budget_exhausted
                        .fetch_add(1, Ordering::Relaxed);
                    Metrics::cell_event(&gateway.metrics.budget_exhausted, cell_name);
                    break;
                }
            } else if !body.replayable() {
                break;
            }
            gateway.stats.failovers.fetch_add(1, Ordering::Relaxed);
            gateway.metrics.failover(cell_name, "retry");
            let backoff = backoff(
                tried.len(),
                config.routing.backoff_base,
                config.routing.backoff_max,
            );
            if Instant::now() + backoff >= deadline {
                break;
            }
            tokio::time::sleep(backoff).await;
        }
        if tried.is_empty() && choice.steered {
            // The tenant is being steered around a member that is out: a
            // failover that happens before any attempt fails.
            gateway.stats.reroutes.fetch_add(1, Ordering::Relaxed);
            gateway.metrics.failover(cell_name, "reroute");
        }
        if spill {
            // Counted only now that the attempt will really be made.
            gateway.stats.spills.fetch_add(1, Ordering::Relaxed);
            Metrics::cell_event(&gateway.metrics.spills, cell_name);
        }
        tried.push(index);
        let attempt_started = if served.attempts == 0 {
            now
        } else {
            Instant::now()
        };
        if attempt_started >= deadline {
            break;
        }
        let shard = &shards[index as usize];
        shard.attempts.fetch_add(1, Ordering::Relaxed);
        // Counted until the response has been sent, or until this request
        // is dropped (a client that hangs up cancels it mid-attempt).
        let in_flight = InFlight::start(Arc::clone(shard));
        served.attempts += 1;
        // A shard an operator failed is down as far as the gateway is
        // concerned: an attempt on it (only possible with failover off)
        // fails as a refused connection would, without touching the backend.
        let operator_failed = shard.health.lock().expect("health lock").failed;
        let result = if operator_failed {
            Err(Failure::Connect)
        } else {
            attempt::send(
                shard,
                client,
                &parts.uri,
                &body,
                attempt::Timing {
                    started: attempt_started,
                    per_try: config.routing.per_try_timeout,
                    deadline,
                    body_idle: config.limits.backend_idle_timeout,
                    body_total: config.limits.backend_body_timeout,
                },
                safe_to_repeat,
            )
            .await
        };
        // The client's body, not the shard, ended the attempt: answer the
        // client, and neither blame the shard nor try another.
        if let Err(failure) = &result
            && let Some(fault) = body.client_fault(*failure == Failure::Timeout)
        {
            drop(in_flight);
            tracing::debug!(cell = %cell_name, shard = %shard.id, ?fault, "the client's request body ended the attempt");
            return (client_fault_response(fault), Some(served));
        }
        let failure = match &result {
            Err(failure) => Some(*failure),
            Ok(response)
                if config
                    .routing
                    .retry_on_status
                    .contains(&response.status().as_u16()) =>
            {
                Some(Failure::Status(response.status().as_u16()))
            }
            Ok(_) => None,
        };
        now = Instant::now();
        shard.metrics(&gateway.metrics).attempt(
            failure.map_or("ok", Failure::name),
            now.saturating_duration_since(attempt_started),
        );
        gateway
            .shard_windows
            .record(shard.window_key(), failure.is_none(), now);
        // A failure counts now; a success only once its body has ended
        // cleanly (see `body::BackendBody`): a shard that answers heads and
        // then stalls must not have each head forgive its last stall.
        if failure.is_some() {
            gateway.record_failure(&config.outlier, shard, now);
        }
        match (result, failure) {
            (Ok(response), None) => {
                served.answered_at = Some(now);
                return (stream_back(response, in_flight), Some(served));
            }
            (result, Some(failure)) => {
                drop(in_flight);
                last_failure = Some((failure, result.ok()));
            }
            (Err(_), None) => unreachable!("an error always has a failure"),
        }
    }

    // Nothing (more) to try: answer with the last backend response if there
    // was one, else say why.
    let response = match last_failure {
        Some((_, Some(response))) => {
            let (head, body) = response.into_parts();
            Response::from_parts(head, ResponseBody::backend(body, None))
        }
        Some((Failure::Timeout, None)) => error_response(
            StatusCode::GATEWAY_TIMEOUT,
            "the backend did not answer in time",
        ),
        Some((Failure::Reset | Failure::Status(_), None)) => {
            error_response(StatusCode::BAD_GATEWAY, "the backend failed")
        }
        // Nothing was tried, or every member refused the connection: the
        // subset is out, and the client should come back later.
        None | Some((Failure::Connect, None)) => {
            gateway.stats.exhausted.fetch_add(1, Ordering::Relaxed);
            let mut response = error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "no healthy shard is available for this tenant",
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(config.routing.retry_after_seconds),
            );
            response
        }
    };
    (response, Some(served))
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
fn client_fault_response(fault: ClientFault) -> Response<ResponseBody> {
    match fault {
        ClientFault::TooLarge => {
            error_response(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
        }
        ClientFault::Broken => {
            error_response(StatusCode::BAD_REQUEST, "could not read the request body")
        }
        ClientFault::Stalled => error_response(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive in time",
        ),
    }
}

/// A JSON error response.
pub fn error_response(status: StatusCode, message: &str) -> Response<ResponseBody> {
    let body = serde_json::json!({ "error": message, "status": status.as_u16() }).to_string();
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
