//! An upgrade toward a shard: the upgrade request on a connection of its
//! own, and the shard's answer. A `101 Switching Protocols` hands the
//! connection over for good ([`UpstreamBody::into_switched`]); any other
//! answer is an ordinary response, read and pooled like every other.
//!
//! The connection is always a new one. A pooled connection the shard has
//! just closed would fail the upgrade only after its request went out, when
//! no other member may be tried any more (the shard may have switched);
//! a new connection can only fail to connect, before anything is sent,
//! where failing over is always safe. An upgrade is rare and long-lived, so
//! the connect costs nothing that matters, and the pool keeps its
//! connections for the requests that return them.

use std::sync::Arc;

use tokio::time::Instant;

use bytes::BytesMut;
use http::{Response, StatusCode};

use crate::protocol::wire::{self, Fields, RequestHead, WireError};
use crate::upstream::http1_io::{Written, read_head, write_head};
use crate::upstream::transport::Transport;
use crate::upstream::{
    BodyState, Connection, ExchangeError, SendError, Timeouts, Upstream, UpstreamBody,
};

/// A shard connection that switched protocols, out of the pool for good.
#[derive(Debug)]
pub(crate) struct Switched {
    /// The connection, speaking the new protocol.
    pub(crate) stream: Transport,
    /// What the shard sent right behind its 101 head (read with it): the
    /// new protocol's first bytes, owed to the client before anything else.
    pub(crate) early: BytesMut,
}

impl Upstream {
    /// Sends `request` (a head without a body) asking to upgrade to
    /// `protocol`, on a new connection made within `timeouts.connect`, and
    /// returns the shard's answer once its head has arrived. A 101 that
    /// does not name `protocol` in its `Upgrade` is a protocol error: the
    /// shard would be speaking something nobody asked for.
    pub(crate) async fn upgrade(
        self: &Arc<Self>,
        request: RequestHead<'_>,
        protocol: &[u8],
        timeouts: Timeouts,
    ) -> Result<Response<UpstreamBody>, SendError> {
        if self.speaks_http2() {
            // HTTP/2 has no Upgrade (its connection-specific fields never
            // go out): the shard gets the request as a plain one, and its
            // answer, never a 101, goes back as any other.
            let now = Instant::now();
            return self
                .send(
                    request,
                    crate::upstream::body::AttemptBody::Done,
                    timeouts,
                    now,
                )
                .await;
        }
        let deadline = Instant::now() + timeouts.connect;
        let mut connection = self.connect(deadline).await?;
        // A new connection's write buffer is empty.
        wire::encode_upgrade_request_head(&mut connection.write, &request, protocol);
        let Connection {
            stream,
            read,
            write,
            ..
        } = &mut connection;
        match write_head(stream, write).await {
            Ok(()) => {}
            Err(Written::Nothing) => return Err(SendError::NotSent),
            Err(Written::Some(error)) => return Err(SendError::Exchange(ExchangeError::Io(error))),
        }
        let head = read_head(
            stream,
            read,
            request.method,
            wire::parse_upgrade_response_head,
        )
        .await
        .map_err(SendError::Exchange)?;
        if head.status == StatusCode::SWITCHING_PROTOCOLS && !names(&head.fields, protocol) {
            return Err(SendError::Exchange(ExchangeError::Protocol(
                WireError::Upgrade,
            )));
        }
        Ok(self.response(connection, head, true, timeouts))
    }
}

/// Whether a 101's `Upgrade` fields name `protocol` (any case), and only it.
fn names(fields: &Fields, protocol: &[u8]) -> bool {
    let mut named = false;
    for (name, value) in fields.iter() {
        if name.eq_ignore_ascii_case(b"upgrade") {
            for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if !token.eq_ignore_ascii_case(protocol) {
                    return false;
                }
                named = true;
            }
        }
    }
    named
}

impl UpstreamBody {
    /// The connection of a 101 answer to [`Upstream::upgrade`], with the
    /// bytes the shard sent behind its head; `None` for any other response.
    /// (A 101's body runs until the connection closes, see
    /// [`wire::parse_upgrade_response_head`], and nothing of it has been
    /// read: what has arrived is still in the read buffer.)
    pub(crate) fn into_switched(mut self) -> Option<Switched> {
        if !matches!(self.state, BodyState::UntilClose) {
            return None;
        }
        let Connection { stream, read, .. } = self.connection.take()?;
        Some(Switched {
            stream,
            early: read,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(lines: &str) -> Fields {
        let mut buf = BytesMut::from(format!("HTTP/1.1 101 Switching\r\n{lines}\r\n").as_str());
        wire::parse_upgrade_response_head(&mut buf, &http::Method::GET)
            .unwrap()
            .unwrap()
            .fields
    }

    #[test]
    fn a_switch_must_name_the_protocol_asked_and_nothing_else() {
        assert!(names(&fields("Upgrade: websocket\r\n"), b"websocket"));
        assert!(names(&fields("upgrade: WebSocket\r\n"), b"websocket"));
        assert!(!names(&fields("Connection: upgrade\r\n"), b"websocket"));
        assert!(!names(&fields("Upgrade: h2c\r\n"), b"websocket"));
        assert!(!names(&fields("Upgrade: websocket, h2c\r\n"), b"websocket"));
        assert!(!names(
            &fields("Upgrade: websocket\r\nUpgrade: h2c\r\n"),
            b"websocket"
        ));
    }
}
