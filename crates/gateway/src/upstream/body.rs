//! Request bodies: a client's body that can be offered to a second shard
//! when it is safe to. (Response bodies are [`crate::route::response`]'s.)
//!
//! A request body is either *buffered* (small enough, and the request safe
//! to replay: every attempt gets the same bytes) or *taken once*: the
//! client's stream sits in a shared [`Upload`] and the first attempt that
//! actually polls it takes it. An attempt whose connection failed never
//! polled its body, so the stream is still there and the request can go to
//! another shard; once taken, it cannot, and the proxy knows that because
//! the slot is empty.
//!
//! A streamed body is also where the client's part of a failed attempt
//! shows: the stream enforces `limits.max_body_bytes` as the bytes pass
//! (a chunked body declares no length up front), and it records whether the
//! client's body broke off or was still awaited when time ran out, so the
//! proxy answers the client (413, 400, 408) instead of blaming the shard.
//!
//! A body read from an HTTP/2 stream also runs the client body timeout
//! ([`ClientBody::timed`]): the mirror of the backend-idle timer, for a
//! client that stops sending its body. It lives in the body itself, so it
//! runs in whichever task polls the body, and only while that task waits
//! on the client.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::watch;

use crate::upstream::idle::IdleTimer;

/// A client's request body as the request path receives it: none at all
/// (a request the connection's own fast path read, which never has one), or
/// the stream hyper decodes.
#[derive(Debug)]
pub enum ClientBody {
    /// No body: the head said so.
    Empty,
    /// The body hyper reads from the connection.
    Streamed(Incoming),
    /// The body hyper reads from an HTTP/2 stream, under the client body
    /// timeout. Boxed: only requests that have a body pay for the timer.
    Timed(Box<Timed>),
}

/// A client's body under `limits.client_body_timeout_ms`.
#[derive(Debug)]
pub struct Timed {
    incoming: Incoming,
    /// Runs while the body's reader waits on the client, from the start of
    /// each wait: time the reader spends elsewhere (waiting on its backend)
    /// never counts against the client.
    timer: IdleTimer,
    /// `shuffle_stream_timeouts_total{side="client"}`.
    expired: Counter,
    /// The timer fired: the body has failed for good.
    failed: bool,
}

/// Why a client's body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// hyper could not read it: the client went away or broke the framing.
    #[error("reading the client's request body failed")]
    Read(#[source] hyper::Error),
    /// The client sent nothing of it for the client body timeout. The
    /// source is HTTP/2's `CANCEL`: hyper resets a stream whose body failed
    /// with the reason it finds among the error's sources, so an HTTP/2
    /// shard's stream, and the client's stream once its answer has begun,
    /// are reset with `CANCEL` (no longer wanted), not `INTERNAL_ERROR`.
    #[error(
        "the client sent nothing of its request body for limits.client_body_timeout_ms; raise it for clients that pause their uploads"
    )]
    Stalled(#[source] h2::Error),
}

impl ClientBodyError {
    fn stalled() -> Self {
        ClientBodyError::Stalled(h2::Reason::CANCEL.into())
    }
}

impl ClientBody {
    /// `incoming` under the client body timeout `limit`: a body still
    /// open that sends nothing while its reader waits for `limit` fails
    /// with [`ClientBodyError::Stalled`] (counted in `expired`). A request
    /// that has no body gets no timer.
    pub fn timed(incoming: Incoming, limit: std::time::Duration, expired: &Counter) -> Self {
        if incoming.is_end_stream() {
            return ClientBody::Streamed(incoming);
        }
        ClientBody::Timed(Box::new(Timed {
            incoming,
            timer: IdleTimer::new(limit),
            expired: expired.clone(),
            failed: false,
        }))
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        match self.get_mut() {
            ClientBody::Empty => Poll::Ready(None),
            ClientBody::Streamed(incoming) => Pin::new(incoming)
                .poll_frame(cx)
                .map_err(ClientBodyError::Read),
            ClientBody::Timed(timed) => timed.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Empty => true,
            ClientBody::Streamed(incoming) => incoming.is_end_stream(),
            ClientBody::Timed(timed) => !timed.failed && timed.incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Empty => SizeHint::with_exact(0),
            ClientBody::Streamed(incoming) => incoming.size_hint(),
            ClientBody::Timed(timed) => timed.incoming.size_hint(),
        }
    }
}

impl Timed {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        if self.failed {
            // Failed for good: never mistaken for a body that ended.
            return Poll::Ready(Some(Err(ClientBodyError::stalled())));
        }
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(polled) => {
                // Data, trailers or the end: the client is moving.
                self.timer.progressed();
                Poll::Ready(polled.map(|frame| frame.map_err(ClientBodyError::Read)))
            }
            Poll::Pending => {
                // The timer is armed by the first wait after progress, so
                // it measures this wait alone.
                std::task::ready!(self.timer.poll_expired(cx));
                self.failed = true;
                self.expired.inc();
                tracing::debug!(
                    "a client sent nothing of its request body for limits.client_body_timeout_ms"
                );
                Poll::Ready(Some(Err(ClientBodyError::stalled())))
            }
        }
    }
}

/// How the client's own body made an attempt fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFault {
    /// The body grew past `limits.max_body_bytes` while streaming.
    TooLarge,
    /// The body could not be read: the client went away or broke the
    /// framing mid-body.
    Broken,
    /// The client stopped sending its body and time ran out waiting for it.
    Stalled,
}

/// Why an attempt's body stopped early.
#[derive(Debug, thiserror::Error)]
pub enum AttemptBodyError {
    /// The client's body is larger than the limit; the rest is not sent.
    #[error("the request body is larger than limits.max_body_bytes")]
    TooLarge,
    /// Reading the client's body failed, or it stalled.
    #[error("reading the client's request body failed")]
    Client(#[source] ClientBodyError),
}

/// The client's body, shared by the attempts of one request.
#[derive(Clone, Debug)]
pub enum RequestBody {
    /// Every attempt sends these bytes.
    Buffered(Bytes),
    /// The first attempt to poll takes the stream.
    Once(Arc<Upload>),
}

/// A client's streamed body and what became of it.
#[derive(Debug)]
pub struct Upload {
    slot: Mutex<Option<ClientBody>>,
    limit: u64,
    /// How much of the body is kept as it passes, so that the request can
    /// be sent again once the stream is gone (0: nothing is kept).
    keep: usize,
    progress: Mutex<Progress>,
    finished: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct Progress {
    received: u64,
    /// The last poll of the client's stream found nothing ready: the
    /// upload is waiting on the client, not on the backend.
    waiting_on_client: bool,
    fault: Option<ClientFault>,
    kept: Kept,
}

/// What a streamed body keeps of itself: a copy of its data as it passes,
/// while it fits, so a request safe to repeat whose body had ended when an
/// attempt failed can go to another member (as Envoy's retry buffer does).
/// A body that says no length (every gRPC call) is streamed, not buffered
/// up front, since waiting for its end would hold a streaming call whose
/// client waits for an answer before it sends more.
#[derive(Debug, Default)]
enum Kept {
    /// Nothing is kept: the request is not safe to repeat, or its body
    /// outgrew `routing.max_replay_body_bytes`, carried trailers (which a
    /// kept body cannot send again) or broke off.
    #[default]
    Nothing,
    /// The data so far.
    Passing(BytesMut),
    /// The whole body, read to its end.
    Whole(Bytes),
}

impl Kept {
    /// Keeps `frame`'s data, if it fits within `keep` bytes in all.
    fn pass(&mut self, frame: &Frame<Bytes>, keep: usize) {
        if let Kept::Passing(kept) = self {
            match frame.data_ref() {
                Some(data) if kept.len() + data.len() <= keep => kept.extend_from_slice(data),
                _ => *self = Kept::Nothing,
            }
        }
    }

    /// The body has ended: what was kept is all of it.
    fn finish(&mut self) {
        if let Kept::Passing(kept) = self {
            *self = Kept::Whole(std::mem::take(kept).freeze());
        }
    }
}

impl Upload {
    /// Whether no attempt has taken the client's stream yet.
    pub(crate) fn untaken(&self) -> bool {
        self.slot.lock().expect("body slot").is_some()
    }

    /// The whole body, if it was kept and has ended.
    fn whole(&self) -> Option<Bytes> {
        match &self.progress.lock().expect("upload progress").kept {
            Kept::Whole(whole) => Some(whole.clone()),
            Kept::Nothing | Kept::Passing(_) => None,
        }
    }

    /// Records one poll of the client's stream, enforcing the size limit.
    fn observe(
        &self,
        polled: Poll<Option<Result<Frame<Bytes>, ClientBodyError>>>,
        at_end: bool,
    ) -> Poll<Option<Result<Frame<Bytes>, AttemptBodyError>>> {
        let mut progress = self.progress.lock().expect("upload progress");
        progress.waiting_on_client = polled.is_pending();
        let outcome = match polled {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => None,
            Poll::Ready(Some(Err(error))) => {
                progress.fault = Some(match error {
                    ClientBodyError::Stalled(_) => ClientFault::Stalled,
                    ClientBodyError::Read(_) => ClientFault::Broken,
                });
                progress.kept = Kept::Nothing;
                Some(Err(AttemptBodyError::Client(error)))
            }
            Poll::Ready(Some(Ok(frame))) => {
                progress.received += frame.data_ref().map_or(0, |data| data.len() as u64);
                if progress.received > self.limit {
                    progress.fault = Some(ClientFault::TooLarge);
                    progress.kept = Kept::Nothing;
                    Some(Err(AttemptBodyError::TooLarge))
                } else {
                    progress.kept.pass(&frame, self.keep);
                    Some(Ok(frame))
                }
            }
        };
        let finished = match &outcome {
            None => true,
            Some(Ok(_)) => at_end,
            Some(Err(_)) => false,
        };
        if finished {
            progress.kept.finish();
            self.finished.send_replace(true);
        }
        Poll::Ready(outcome)
    }
}

impl RequestBody {
    /// A body that streams the client's body to the first attempt that reads
    /// it, cut off (and the request failed) once it exceeds `limit` bytes,
    /// keeping up to `keep` bytes of it as it passes (0: nothing): if the
    /// whole body fit and had ended when an attempt failed, later attempts
    /// send the copy.
    pub fn once(incoming: ClientBody, limit: u64, keep: usize) -> Self {
        let kept = if keep > 0 {
            Kept::Passing(BytesMut::new())
        } else {
            Kept::Nothing
        };
        RequestBody::Once(Arc::new(Upload {
            slot: Mutex::new(Some(incoming)),
            limit,
            keep,
            progress: Mutex::new(Progress {
                kept,
                ..Progress::default()
            }),
            finished: watch::Sender::new(false),
        }))
    }

    /// Whether every attempt gets the same bytes, already read.
    pub fn is_buffered(&self) -> bool {
        matches!(self, RequestBody::Buffered(_))
    }

    /// Whether another attempt can still send this body.
    pub fn replayable(&self) -> bool {
        match self {
            RequestBody::Buffered(_) => true,
            RequestBody::Once(upload) => upload.untaken() || upload.whole().is_some(),
        }
    }

    /// Whether the client's body has been read to its end.
    pub fn fully_read(&self) -> bool {
        match self {
            RequestBody::Buffered(_) => true,
            RequestBody::Once(upload) => *upload.finished.borrow(),
        }
    }

    /// The body's bytes received from the client so far (for the access
    /// log).
    pub fn received(&self) -> u64 {
        match self {
            RequestBody::Buffered(bytes) => bytes.len() as u64,
            RequestBody::Once(upload) => {
                upload
                    .progress
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .received
            }
        }
    }

    /// The body for one attempt.
    pub fn for_attempt(&self) -> AttemptBody {
        match self {
            RequestBody::Buffered(bytes) => AttemptBody::Buffered(Some(bytes.clone())),
            RequestBody::Once(upload) => match upload.whole() {
                // Taken and ended, and kept whole: sent again from the copy.
                Some(whole) if !upload.untaken() => AttemptBody::Buffered(Some(whole)),
                _ => AttemptBody::Waiting(Arc::clone(upload)),
            },
        }
    }

    /// Completes once the whole body has been read from the client (at once
    /// for a buffered body). An attempt's per-try timeout starts here, so a
    /// long upload is not mistaken for a slow backend.
    pub fn uploaded(&self) -> impl Future<Output = ()> + Send + 'static {
        let finished = match self {
            RequestBody::Buffered(_) => None,
            RequestBody::Once(upload) => Some(upload.finished.subscribe()),
        };
        async move {
            if let Some(mut finished) = finished {
                // The sender lives as long as the body; if it is gone, so is
                // the attempt waiting here.
                let _ = finished.wait_for(|done| *done).await;
            }
        }
    }

    /// The client's part in a failed attempt, if it had one: its body was
    /// too large or broke off, or (when the attempt ran out of time) the
    /// gateway was still waiting for it.
    pub fn client_fault(&self, timed_out: bool) -> Option<ClientFault> {
        let RequestBody::Once(upload) = self else {
            return None;
        };
        let progress = upload.progress.lock().expect("upload progress");
        progress.fault.or_else(|| {
            (timed_out && progress.waiting_on_client && !*upload.finished.borrow())
                .then_some(ClientFault::Stalled)
        })
    }
}

/// The body of one attempt.
#[derive(Debug)]
pub enum AttemptBody {
    /// Bytes not yet sent (`None` once sent).
    Buffered(Option<Bytes>),
    /// The client's stream, not yet taken from the slot.
    Waiting(Arc<Upload>),
    /// The client's stream, taken by this attempt.
    Streaming(ClientBody, Arc<Upload>),
    /// Nothing left.
    Done,
}

impl AttemptBody {
    /// The client's stream this body sends, if it sends one: whether it
    /// has been taken says whether the body could go out again.
    pub(crate) fn upload(&self) -> Option<Arc<Upload>> {
        match self {
            AttemptBody::Waiting(upload) | AttemptBody::Streaming(_, upload) => {
                Some(Arc::clone(upload))
            }
            AttemptBody::Buffered(_) | AttemptBody::Done => None,
        }
    }
}

impl Body for AttemptBody {
    type Data = Bytes;
    type Error = AttemptBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, AttemptBodyError>>> {
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
                AttemptBody::Waiting(upload) => {
                    let taken = upload.slot.lock().expect("body slot").take();
                    *this = match taken {
                        Some(incoming) => AttemptBody::Streaming(incoming, Arc::clone(upload)),
                        // Another attempt took it first: this one has nothing to send.
                        None => AttemptBody::Done,
                    };
                }
                AttemptBody::Streaming(incoming, upload) => {
                    let polled = Pin::new(&mut *incoming).poll_frame(cx);
                    let observed = upload.observe(polled, incoming.is_end_stream());
                    if matches!(observed, Poll::Ready(None | Some(Err(_)))) {
                        *this = AttemptBody::Done;
                    }
                    return observed;
                }
                AttemptBody::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            AttemptBody::Buffered(bytes) => bytes.as_ref().is_none_or(Bytes::is_empty),
            AttemptBody::Waiting(_) => false,
            AttemptBody::Streaming(incoming, _) => incoming.is_end_stream(),
            AttemptBody::Done => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            AttemptBody::Buffered(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            AttemptBody::Streaming(incoming, _) => incoming.size_hint(),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(bytes: &'static [u8]) -> Frame<Bytes> {
        Frame::data(Bytes::from_static(bytes))
    }

    #[test]
    fn a_body_that_fits_is_kept_whole_once_it_ends() {
        let mut kept = Kept::Passing(BytesMut::new());
        kept.pass(&data(b"abc"), 6);
        kept.pass(&data(b"def"), 6);
        assert!(matches!(&kept, Kept::Passing(so_far) if so_far[..] == b"abcdef"[..]));
        kept.finish();
        assert!(matches!(&kept, Kept::Whole(whole) if whole[..] == b"abcdef"[..]));
    }

    #[test]
    fn a_body_that_outgrows_the_limit_or_carries_trailers_is_not_kept() {
        let mut kept = Kept::Passing(BytesMut::new());
        kept.pass(&data(b"abcd"), 6);
        kept.pass(&data(b"efg"), 6);
        kept.finish();
        assert!(matches!(kept, Kept::Nothing));

        let mut kept = Kept::Passing(BytesMut::new());
        kept.pass(&data(b"abc"), 6);
        kept.pass(&Frame::trailers(http::HeaderMap::new()), 6);
        kept.finish();
        assert!(matches!(kept, Kept::Nothing));

        // A request that keeps nothing never starts to.
        let mut kept = Kept::Nothing;
        kept.pass(&data(b"abc"), 6);
        kept.finish();
        assert!(matches!(kept, Kept::Nothing));
    }
}
