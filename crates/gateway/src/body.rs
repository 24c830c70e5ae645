//! Request and response bodies: a request body that can be offered to a
//! second shard when it is safe to, and response bodies that stream.
//!
//! A request body is either *buffered* (small enough, and the request safe
//! to replay: every attempt gets the same bytes) or *taken once*: the
//! client's stream sits in a shared slot and the first attempt that actually
//! polls it takes it. An attempt whose connection failed never polled its
//! body, so the stream is still in the slot and the request can go to
//! another shard; once taken, it cannot, and the proxy knows that because
//! the slot is empty.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// The body type of responses the gateway sends.
pub type ResponseBody = BoxBody<Bytes, hyper::Error>;

/// A complete response body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// The client's body, shared by the attempts of one request.
#[derive(Clone, Debug)]
pub enum RequestBody {
    /// Every attempt sends these bytes.
    Buffered(Bytes),
    /// The first attempt to poll takes the stream.
    Once(Arc<Mutex<Option<Incoming>>>),
}

impl RequestBody {
    /// A body that streams the client's body to the first attempt that reads
    /// it.
    pub fn once(incoming: Incoming) -> Self {
        RequestBody::Once(Arc::new(Mutex::new(Some(incoming))))
    }

    /// Whether another attempt can still send this body.
    pub fn replayable(&self) -> bool {
        match self {
            RequestBody::Buffered(_) => true,
            RequestBody::Once(slot) => slot.lock().expect("body slot").is_some(),
        }
    }

    /// The body for one attempt.
    pub fn for_attempt(&self) -> AttemptBody {
        match self {
            RequestBody::Buffered(bytes) => AttemptBody::Buffered(Some(bytes.clone())),
            RequestBody::Once(slot) => AttemptBody::Waiting(Arc::clone(slot)),
        }
    }
}

/// The body of one attempt.
#[derive(Debug)]
pub enum AttemptBody {
    /// Bytes not yet sent (`None` once sent).
    Buffered(Option<Bytes>),
    /// The client's stream, not yet taken from the slot.
    Waiting(Arc<Mutex<Option<Incoming>>>),
    /// The client's stream, taken by this attempt.
    Streaming(Incoming),
    /// Nothing left.
    Done,
}

impl Body for AttemptBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        loop {
            match this {
                AttemptBody::Buffered(bytes) => {
                    return Poll::Ready(
                        bytes
                            .take()
                            .filter(|b| !b.is_empty())
                            .map(|b| Ok(Frame::data(b))),
                    );
                }
                AttemptBody::Waiting(slot) => {
                    let taken = slot.lock().expect("body slot").take();
                    *this = match taken {
                        Some(incoming) => AttemptBody::Streaming(incoming),
                        // Another attempt took it first: this one has nothing to send.
                        None => AttemptBody::Done,
                    };
                }
                AttemptBody::Streaming(incoming) => return Pin::new(incoming).poll_frame(cx),
                AttemptBody::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            AttemptBody::Buffered(bytes) => bytes.as_ref().is_none_or(Bytes::is_empty),
            AttemptBody::Waiting(_) => false,
            AttemptBody::Streaming(incoming) => incoming.is_end_stream(),
            AttemptBody::Done => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AttemptBody::Buffered(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            AttemptBody::Streaming(incoming) => incoming.size_hint(),
            _ => SizeHint::default(),
        }
    }
}

/// A response body that runs a closure when it is dropped: the end of the
/// response, whether it completed or the client went away. Used to keep a
/// shard's in-flight count honest for the whole response.
pub struct OnDrop<B, F: FnOnce()> {
    inner: B,
    on_drop: Option<F>,
}

impl<B, F: FnOnce()> OnDrop<B, F> {
    /// Wraps `inner`, calling `on_drop` exactly once when dropped.
    pub fn new(inner: B, on_drop: F) -> Self {
        Self {
            inner,
            on_drop: Some(on_drop),
        }
    }
}

impl<B, F: FnOnce()> Drop for OnDrop<B, F> {
    fn drop(&mut self) {
        if let Some(on_drop) = self.on_drop.take() {
            on_drop();
        }
    }
}

impl<B: Body + Unpin, F: FnOnce() + Unpin> Body for OnDrop<B, F> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
