//! The request path's body set-up, the step between the target check and
//! the attempts: what the request's head decides for every attempt
//! ([`Outgoing`]: which fields pass, what the gateway adds, whether the
//! request may be repeated), the body read whole or streamed
//! ([`receive_body`]), and the framing stated for it ([`stated`]).

use http::{HeaderValue, Method};
use http_body_util::{BodyExt, Limited};
use tokio::time::Instant;

use crate::cell::TenantRoute;
use crate::config::GatewayConfig;
use crate::protocol::wire::{Fields, Stated};
use crate::trust::headers::{self, Added, Inbound};
use crate::upstream::body::{ClientBody, ClientBodyError, ClientFault, RequestBody};

/// What the request's head decides for every attempt, as part of the body
/// set-up.
pub(super) struct Outgoing<'a> {
    /// Which of the client's fields pass.
    pub(super) inbound: Inbound,
    /// What the gateway adds to them.
    pub(super) added: Added<'a>,
    /// Whether the request may reach a backend more than once.
    pub(super) safe_to_repeat: bool,
}

impl<'a> Outgoing<'a> {
    /// Decides from the client's `fields` and `method`, for the tenant's
    /// `route` in a cell that is `prefixed` or not, for a client whose address
    /// as an `x-forwarded-for` value is `forwarded_for`.
    #[inline]
    pub(super) fn new(
        config: &'a GatewayConfig,
        prefixed: bool,
        route: &'a TenantRoute,
        fields: &'a Fields,
        forwarded_for: Option<&'a HeaderValue>,
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
            forwarded_for,
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
pub(super) async fn receive_body(
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
pub(super) fn stated(body: &RequestBody, declared_length: Option<u64>) -> Option<Stated> {
    match (body, declared_length) {
        (RequestBody::Once(_), Some(length)) => Some(Stated::Length(length)),
        (RequestBody::Once(_), None) => Some(Stated::Chunked),
        (RequestBody::Buffered(_), _) => None,
    }
}
