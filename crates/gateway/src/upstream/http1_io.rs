//! HTTP/1.1 on a shard connection, as reads and writes: the request's
//! framing, its head written (and whether any of it left), a streamed body
//! uploaded, and a response head read, shared by the pool's exchange
//! ([`crate::upstream`]), the upgrade ([`crate::upstream::upgrade`]) and
//! the response body's reads. A leaf, so that each of those can use it
//! without importing the others.

use std::io;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use http::Method;
use hyper::body::Body;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::protocol::wire::{self, RequestFraming, RequestHead, Stated, WireError};
use crate::trust::headers::{self, Inbound};
use crate::upstream::body::AttemptBody;
use crate::upstream::exchange::ExchangeError;
use crate::upstream::transport::Transport;

/// Bytes a read asks for at least: responses that fit come in one read.
pub(super) const READ_SIZE: usize = 8 * 1024;

/// How the request body goes out, and the `Content-Length` to add, if any.
/// The framing the proxy stated for a streamed body (`Transfer-Encoding:
/// chunked`, or the client's `Content-Length`, which hyper has held the
/// client to) is kept; a buffered body without one gets its length; a
/// streamed body without one is chunked. An empty `POST`, `PUT` or `PATCH` says
/// `Content-Length: 0`, which some servers insist on.
pub(super) fn request_framing(
    request: &RequestHead<'_>,
    body: &AttemptBody,
) -> (RequestFraming, Option<u64>) {
    let forwards_length = || {
        request.fields.iter().any(|(name, _)| {
            name.eq_ignore_ascii_case(b"content-length") && request.inbound.forwards(name)
        })
    };
    match request.stated {
        // A streamed body kept whole and sent again: its length is known
        // now.
        Some(Stated::Chunked) if let AttemptBody::Buffered(bytes) = body => {
            return (
                RequestFraming::Length,
                Some(bytes.as_ref().map_or(0, Bytes::len) as u64),
            );
        }
        Some(Stated::Chunked) => return (RequestFraming::Chunked, None),
        // The client's own length goes out when it may; else the gateway
        // states it.
        Some(Stated::Length(length)) => {
            return (
                RequestFraming::Length,
                (!forwards_length()).then_some(length),
            );
        }
        None => {}
    }
    if forwards_length() {
        return (RequestFraming::Length, None);
    }
    let length = match body {
        AttemptBody::Buffered(bytes) => bytes.as_ref().map_or(0, Bytes::len) as u64,
        AttemptBody::Done => 0,
        AttemptBody::Waiting(_) | AttemptBody::Streaming(..) => {
            return (RequestFraming::Chunked, None);
        }
    };
    let says_length =
        length > 0 || matches!(*request.method, Method::POST | Method::PUT | Method::PATCH);
    (RequestFraming::Length, says_length.then_some(length))
}

/// How far a failed first write got.
pub(super) enum Written {
    /// Not a byte: the backend received nothing of this request.
    Nothing,
    /// Some bytes left before the failure.
    Some(io::Error),
}

/// Writes the request head (and a coalesced body).
pub(super) async fn write_head(stream: &mut Transport, bytes: &[u8]) -> Result<(), Written> {
    let mut written = 0;
    while written < bytes.len() {
        match stream.write(&bytes[written..]).await {
            Ok(0) if written == 0 => return Err(Written::Nothing),
            Ok(0) => return Err(Written::Some(io::ErrorKind::WriteZero.into())),
            Ok(n) => written += n,
            Err(_) if written == 0 => return Err(Written::Nothing),
            Err(error) => return Err(Written::Some(error)),
        }
    }
    Ok(())
}

/// Streams the client's body to the backend, chunked or as is. The
/// client's trailers cross the same boundary its header fields did
/// ([`headers::request_trailer_passes`]).
pub(super) async fn upload<W: AsyncWrite + Unpin>(
    writer: &mut W,
    body: &mut AttemptBody,
    framing: RequestFraming,
    inbound: &Inbound,
    scratch: &mut Vec<u8>,
) -> Result<(), ExchangeError> {
    let chunked = framing == RequestFraming::Chunked;
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await;
        scratch.clear();
        let last = match frame {
            None if chunked => {
                wire::encode_last_chunk(scratch, None);
                true
            }
            None => return Ok(()),
            Some(Err(error)) => return Err(ExchangeError::Body(error)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if data.is_empty() => continue,
                Ok(data) if chunked => {
                    wire::encode_chunk(scratch, &data);
                    false
                }
                Ok(data) => {
                    writer.write_all(&data).await.map_err(ExchangeError::Io)?;
                    continue;
                }
                Err(frame) => match frame.into_trailers() {
                    Ok(trailers) if chunked => {
                        let trailers = headers::filter_trailers(trailers, |name| {
                            headers::request_trailer_passes(inbound, name)
                        });
                        wire::encode_last_chunk(scratch, Some(&trailers));
                        true
                    }
                    // Trailers cannot travel with a Content-Length body.
                    _ => continue,
                },
            },
        };
        writer.write_all(scratch).await.map_err(ExchangeError::Io)?;
        if last {
            return Ok(());
        }
    }
}

/// Reads until `parse` finds a whole response head (after any 1xx) in
/// `read` ([`wire::parse_response_head`], or its upgrading twin).
pub(super) async fn read_head<R: AsyncRead + Unpin>(
    reader: &mut R,
    read: &mut BytesMut,
    method: &Method,
    parse: impl Fn(&mut BytesMut, &Method) -> Result<Option<wire::ResponseHead>, WireError>,
) -> Result<wire::ResponseHead, ExchangeError> {
    let mut answered = !read.is_empty();
    loop {
        if answered && let Some(head) = parse(read, method)? {
            return Ok(head);
        }
        make_room(read);
        match reader.read_buf(read).await {
            Ok(0) if answered => return Err(ExchangeError::Truncated),
            Ok(0) => return Err(ExchangeError::ClosedBeforeAnswer),
            Ok(_) => answered = true,
            Err(error) if !answered && is_reset(&error) => {
                return Err(ExchangeError::ClosedBeforeAnswer);
            }
            Err(error) => return Err(ExchangeError::Io(error)),
        }
    }
}

/// Room for one more read of [`READ_SIZE`].
pub(super) fn make_room(read: &mut BytesMut) {
    if read.capacity() - read.len() < READ_SIZE / 8 {
        read.reserve(READ_SIZE);
    }
}

/// Whether a shard's TLS refused the session: a fatal alert (a
/// certificate it does not accept, or none where it requires one) where
/// the response should be. Under TLS 1.3 a shard judges the gateway's
/// certificate after the gateway's side of the handshake has ended, so
/// this is how a refused client certificate arrives; a shard that refused
/// the session never handed the request to its application.
pub(super) fn refused_session(error: &ExchangeError) -> bool {
    let ExchangeError::Io(error) = error else {
        return false;
    };
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|error| matches!(error, rustls::Error::AlertReceived(_)))
}

fn is_reset(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}
