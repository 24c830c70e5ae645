//! The response body of an exchange, as the client takes it: read off the
//! shard's connection (length, chunked or until close) or an HTTP/2
//! stream, under the idle and total timers, and the connection given back
//! to the pool when the body has been read to its end.
//!
//! The type and its states are the pool's ([`crate::upstream`] makes
//! them); this is how they are read.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use crate::protocol::wire::{Decoded, Fields};
use crate::upstream::exchange::ExchangeError;
use crate::upstream::http1_io::make_room;
use crate::upstream::idle::Expired;
use crate::upstream::{BodyState, UpstreamBody};

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl UpstreamBody {
    /// The response's header fields, as the backend sent them.
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    /// The body ended: the connection goes back if it can carry another
    /// exchange (bytes beyond the response mean it cannot).
    pub(super) fn finish(&mut self) {
        self.state = BodyState::Done;
        if let Some(connection) = self.connection.take()
            && self.reusable
        {
            if connection.read.is_empty() {
                self.upstream.checkin(connection);
            } else {
                // Bytes beyond the response's end came with it.
                drop(connection);
                self.upstream.caught_sending_unasked(Instant::now());
            }
        }
    }

    /// The next frame of an HTTP/2 response body, under the same idle and
    /// total timers as an HTTP/1.1 one.
    fn poll_http2(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        let BodyState::Http2(stream) = &mut self.state else {
            return Poll::Ready(None);
        };
        let Poll::Ready(polled) = stream.poll_frame(cx) else {
            let error = match ready!(self.idle.poll_expired(cx)) {
                Expired::Idle => ExchangeError::Stalled,
                Expired::Budget => ExchangeError::TooSlow,
            };
            // Dropping the stream resets it.
            self.state = BodyState::Done;
            return Poll::Ready(Some(Err(error)));
        };
        self.idle.progressed();
        match polled {
            None => {
                self.state = BodyState::Done;
                Poll::Ready(None)
            }
            Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
            Some(Err(error)) => {
                self.state = BodyState::Done;
                Poll::Ready(Some(Err(ExchangeError::Http2(error))))
            }
        }
    }

    /// The body failed: the connection is closed.
    fn fail(&mut self, error: ExchangeError) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        self.state = BodyState::Done;
        self.connection = None;
        Poll::Ready(Some(Err(error)))
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = ExchangeError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ExchangeError>>> {
        let this = &mut *self;
        if matches!(this.state, BodyState::Http2(_)) {
            return this.poll_http2(cx);
        }
        loop {
            let Some(connection) = this.connection.as_mut() else {
                return Poll::Ready(None);
            };
            let read = &mut connection.read;
            match &mut this.state {
                BodyState::Done => return Poll::Ready(None),
                BodyState::Length(0) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                BodyState::Length(left) => {
                    if !read.is_empty() {
                        let take = usize::try_from(*left).unwrap_or(usize::MAX).min(read.len());
                        *left -= take as u64;
                        let data = read.split_to(take).freeze();
                        if *left == 0 {
                            this.finish();
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                BodyState::Chunked(decoder) => match decoder.decode(read) {
                    Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    Ok(Decoded::Trailers(trailers)) => {
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    Ok(Decoded::End) => {
                        this.finish();
                        return Poll::Ready(None);
                    }
                    Ok(Decoded::NeedMore) => {}
                    Err(error) => return this.fail(error.into()),
                },
                BodyState::UntilClose => {
                    if !read.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(read.split().freeze()))));
                    }
                }
                // Polled above.
                BodyState::Http2(_) => return Poll::Ready(None),
            }
            make_room(read);
            let polled = tokio_util::io::poll_read_buf(Pin::new(&mut connection.stream), cx, read);
            if polled.is_pending() {
                let error = match ready!(this.idle.poll_expired(cx)) {
                    Expired::Idle => ExchangeError::Stalled,
                    Expired::Budget => ExchangeError::TooSlow,
                };
                return this.fail(error);
            }
            this.idle.progressed();
            match ready!(polled) {
                Ok(0) if matches!(this.state, BodyState::UntilClose) => {
                    this.state = BodyState::Done;
                    this.connection = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(ExchangeError::Truncated),
                Ok(_) => {}
                Err(error) => return this.fail(ExchangeError::Io(error)),
            }
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match &self.state {
            BodyState::Done | BodyState::Length(0) => true,
            BodyState::Http2(stream) => stream.is_end_stream(),
            _ => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            BodyState::Length(left) => SizeHint::with_exact(*left),
            BodyState::Done => SizeHint::with_exact(0),
            BodyState::Http2(stream) => stream.size_hint(),
            _ => SizeHint::default(),
        }
    }
}
