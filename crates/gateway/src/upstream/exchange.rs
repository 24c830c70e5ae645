//! What an exchange with a shard can fail with, and how long it may wait:
//! the types the HTTP/1.1 pool ([`crate::upstream`]) and the HTTP/2 one
//! ([`crate::upstream::h2`]) share. A leaf of its own, so that neither
//! imports the other to name them.

use std::io;
use std::time::Duration;

use crate::protocol::wire::WireError;
use crate::syntax::fields::InvalidField;
use crate::upstream::body::AttemptBodyError;

/// Why a request could not be exchanged.
#[derive(Debug)]
pub enum SendError {
    /// No connection could be made (refused, unreachable, timed out, or the
    /// shard's URL names no address): nothing was sent.
    Connect,
    /// The connection closed before it took the request: nothing was sent
    /// (and the body was not touched), so it may go again as it is.
    NotSent,
    /// The exchange failed after the request may have been sent.
    Exchange(ExchangeError),
}

/// How an exchange (or the response body after it) failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The backend closed the connection (or reset it) before sending any
    /// of its response.
    #[error("the backend closed the connection before answering")]
    ClosedBeforeAnswer,
    /// The backend closed the connection in the middle of its response.
    #[error("the backend closed the connection in the middle of its response")]
    Truncated,
    /// Reading from or writing to the backend failed.
    #[error("the connection to the backend failed")]
    Io(#[source] io::Error),
    /// The backend's response broke HTTP/1.1.
    #[error(transparent)]
    Protocol(#[from] WireError),
    /// The client's request body failed while it was being sent.
    #[error("the request body could not be sent")]
    Body(#[source] AttemptBodyError),
    /// The backend sent nothing for `limits.backend_idle_timeout_ms` while
    /// its response body was awaited.
    #[error("the backend's response body stalled for longer than limits.backend_idle_timeout_ms")]
    Stalled,
    /// The response body waited on the backend for longer than
    /// `limits.backend_body_timeout_ms` in all (a body that trickles).
    #[error(
        "the backend's response body waited on the backend for longer than limits.backend_body_timeout_ms in all"
    )]
    TooSlow,
    /// An HTTP/2 stream (or its connection) to the backend failed.
    #[error("the HTTP/2 stream to the backend failed")]
    Http2(#[source] hyper::Error),
    /// A request field could not be put in an HTTP/2 header map.
    #[error(transparent)]
    Field(#[from] InvalidField),
}

/// How long an exchange may wait.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// To make a new connection (a TLS handshake included), counted from
    /// the clock reading the exchange is given: an attempt's per-try limit
    /// runs out at the same instant, and a connection still being made
    /// then is a connect failure (nothing was sent), not a timeout.
    pub connect: Duration,
    /// For the next bytes of a response body that has begun
    /// (`limits.backend_idle_timeout_ms`).
    pub body_idle: Duration,
    /// For all of a response body's waits on the backend together
    /// (`limits.backend_body_timeout_ms`); `None` for no limit.
    pub body_total: Option<Duration>,
}

impl ExchangeError {
    /// Whether the backend closed the connection before sending any of its
    /// response, as opposed to failing mid-response, the client's body
    /// failing, or a protocol error: the one case where resending a
    /// repeatable request on another connection is not a failover.
    pub fn closed_before_answering(&self) -> bool {
        matches!(self, ExchangeError::ClosedBeforeAnswer)
    }
}
