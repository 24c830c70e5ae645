//! One attempt: send the request to one shard with a timeout and classify
//! what happened, which decides whether the request may fail over.

use std::time::Duration;

use http::{Response, Uri};
use tokio::time::Instant;

use crate::protocol::wire::RequestHead;
use crate::state::ShardRuntime;
use crate::syntax::grpc::Code;
use crate::trust::target::backend_target;
use crate::upstream::body::RequestBody;
use crate::upstream::{SendError, Timeouts, UpstreamBody};

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
    /// The connection carrying the request closed without an answer and
    /// the shard then refused the resend's connection: it went down with
    /// the request in it. Failover treats it as a refused connection (it
    /// was resent already, so the request is safe to repeat, and a shard
    /// killed as a pooled connection is reused costs no retry budget);
    /// poison containment as a crash.
    Vanished,
    /// The backend answered with a status configured as retryable.
    Status(u16),
    /// A gRPC call's shard answered with a `grpc-status` configured as
    /// retryable (`routing.retry_on_grpc_status`) in its head.
    GrpcStatus(Code),
}

impl Failure {
    /// Whether the backend may have received the request.
    pub fn maybe_sent(self) -> bool {
        !matches!(self, Failure::Connect | Failure::Vanished)
    }

    /// Whether it looks like the request may have crashed the shard: the
    /// connection broke before a complete answer, or no answer came in
    /// the per-try timeout (poison containment counts these).
    pub fn crash_like(self) -> bool {
        matches!(self, Failure::Reset | Failure::Timeout | Failure::Vanished)
    }

    /// A short lowercase name for metrics.
    pub fn name(self) -> &'static str {
        match self {
            Failure::Connect | Failure::Vanished => "connect",
            Failure::Timeout => "timeout",
            Failure::Reset => "reset",
            Failure::Status(_) | Failure::GrpcStatus(_) => "status",
        }
    }
}

/// How many times one attempt may be resent because the connection it went
/// out on was closed by the backend before any answer. One is enough for
/// the keep-alive race (the dead connection is retired, and connections a
/// backend closes together are noticed together) and bounds what a backend
/// that always closes without answering receives to two copies; beyond
/// that, the usual failover rules (and the retry budget) apply.
const MAX_STALE_RESENDS: usize = 1;

/// When an attempt started and how long it may run.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// When the attempt started: a clock reading the caller already took.
    pub started: Instant,
    /// The per-try timeout.
    pub per_try: Duration,
    /// The request's overall deadline.
    pub deadline: Instant,
    /// How long the response body may wait for the backend's next bytes.
    pub body_idle: Duration,
    /// How long the response body may wait on the backend in all, if
    /// limited.
    pub body_total: Option<Duration>,
}

/// Sends one attempt of the client's request to `uri`: `client` is its
/// head as every attempt sends it, to which this shard's target, `Host` and
/// `x-shuffle-shard` are set here.
///
/// The per-try timeout runs from the moment the whole request body has been
/// read from the client (the attempt's start, for a buffered body), so a
/// long upload is not taken for a slow backend; the request's deadline
/// bounds everything.
///
/// When the request may be repeated (`safe_to_repeat`) and its body can be
/// sent again, a request that meets a connection the backend closed before
/// answering anything (an idle pooled connection the backend had just
/// dropped, or closed as the request arrived) is resent on another
/// connection to the same shard. That is not a failover and is not counted
/// as one: the backend never answered, and a keep-alive race is not a
/// failing shard.
pub async fn send(
    shard: &ShardRuntime,
    client: RequestHead<'_>,
    uri: &Uri,
    body: &RequestBody,
    timing: Timing,
    safe_to_repeat: bool,
) -> Result<Response<UpstreamBody>, Failure> {
    let target = backend_target(&shard.path_prefix, uri);
    let request = for_shard(shard, client, &target);
    let timeouts = timing.timeouts();
    let mut resends = 0;
    // The request went out on a connection the backend then closed
    // without answering, and is being resent.
    let mut closed_on_it = false;
    loop {
        let result = tokio::select! {
            // The exchange first: polling in a fixed order spares drawing a
            // random one on every poll, and a response that is ready wins.
            biased;
            result = shard.upstream.send(request, body.for_attempt(), timeouts, timing.started) => result,
            () = time_limit(body, timing) => return Err(Failure::Timeout),
        };
        let error = match result {
            Ok(response) => return Ok(response),
            // Refused right after closing a connection that carried the
            // request: not a keep-alive race but a shard that went down
            // with the request in it, which is what a crash looks like
            // (and the request may have reached it).
            Err(SendError::Connect) if closed_on_it => return Err(Failure::Vanished),
            Err(SendError::Connect) => return Err(Failure::Connect),
            Err(SendError::NotSent) => {
                // A brand-new connection that closed before taking the
                // request: the backend accepts connections and drops them,
                // which is as good as refusing them.
                if resends >= MAX_STALE_RESENDS {
                    return Err(if closed_on_it {
                        Failure::Vanished
                    } else {
                        Failure::Connect
                    });
                }
                resends += 1;
                continue;
            }
            Err(SendError::Exchange(error)) => error,
        };
        if safe_to_repeat
            && resends < MAX_STALE_RESENDS
            && error.closed_before_answering()
            && body.replayable()
        {
            resends += 1;
            closed_on_it = true;
            tracing::debug!(shard = %shard.id, resends, "backend closed the connection before answering; resending on another connection");
            continue;
        }
        return Err(Failure::Reset);
    }
}

/// Sends one attempt of a WebSocket upgrade request (`client`, which has
/// no body) to `uri`; the answer is the shard's 101, whose body holds the
/// switched connection, or any other response.
///
/// Only a connection that could not be made (or closed before it took the
/// request) may fail over: once the request may have reached the shard,
/// the shard may have switched, so nothing is resent, whatever the method
/// says. The per-try timeout bounds the wait for the answer.
pub async fn upgrade(
    shard: &ShardRuntime,
    client: RequestHead<'_>,
    uri: &Uri,
    timing: Timing,
) -> Result<Response<UpstreamBody>, Failure> {
    let target = backend_target(&shard.path_prefix, uri);
    let request = for_shard(shard, client, &target);
    let answer = shard
        .upstream
        .upgrade(request, WEBSOCKET, timing.timeouts());
    let per_try = timing.started.checked_add(timing.per_try);
    let limit = per_try.map_or(timing.deadline, |limit| limit.min(timing.deadline));
    match tokio::time::timeout_at(limit, answer).await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(SendError::Connect | SendError::NotSent)) => Err(Failure::Connect),
        Ok(Err(SendError::Exchange(error))) => {
            tracing::debug!(shard = %shard.id, %error, "the upgrade request failed");
            Err(Failure::Reset)
        }
        Err(_elapsed) => Err(Failure::Timeout),
    }
}

/// The one protocol the gateway upgrades to.
const WEBSOCKET: &[u8] = b"websocket";

/// The client's head as it goes to `shard`, at `target`, with the shard's
/// own `Host` and `x-shuffle-shard`.
fn for_shard<'a>(
    shard: &'a ShardRuntime,
    client: RequestHead<'a>,
    target: &'a str,
) -> RequestHead<'a> {
    RequestHead {
        target,
        host: shard.host_header.as_ref(),
        shard: shard.id_header.as_ref(),
        ..client
    }
}

impl Timing {
    /// What the exchange itself may wait for (the connect is bounded by
    /// the per-try timeout).
    fn timeouts(self) -> Timeouts {
        Timeouts {
            connect: self.per_try,
            body_idle: self.body_idle,
            body_total: self.body_total,
        }
    }
}

/// Completes when an attempt has run out of time: the per-try timeout
/// after the client's body has been read (for a buffered body, which has
/// been read already, after the attempt's start), or at the request's
/// deadline, whichever is first. One timer is armed at a time.
async fn time_limit(body: &RequestBody, timing: Timing) {
    let Timing {
        started,
        per_try,
        deadline,
        ..
    } = timing;
    let uploaded = if body.is_buffered() {
        started
    } else {
        tokio::select! {
            () = body.uploaded() => {}
            () = tokio::time::sleep_until(deadline) => return,
        }
        Instant::now()
    };
    let per_try_deadline = uploaded.checked_add(per_try).unwrap_or(deadline);
    tokio::time::sleep_until(per_try_deadline.min(deadline)).await;
}
