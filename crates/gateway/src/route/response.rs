//! Response bodies: one the gateway wrote itself, or a backend's streaming
//! through, which holds its shard's in-flight count until it ends and
//! reports how it ended to outlier detection.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use crate::limit::TenantInFlight;
use crate::state::{Gateway, ShardRuntime};
use crate::syntax::fields::Fields;
use crate::telemetry::access_log::Record;
use crate::trust::headers;
use crate::upstream::{ExchangeError, UpstreamBody};

/// The body of a response the gateway sends: one it wrote itself, or a
/// backend's, streaming through.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per response, never moved in a loop: boxing the backend's body would cost an allocation per request"
)]
pub enum ResponseBody {
    /// A complete body, sent at once (`None` once sent).
    Full(Option<Bytes>),
    /// A backend's body, with the backend's header fields still to be
    /// written (through [`crate::trust::headers::outbound`]).
    Backend(BackendBody),
}

/// A backend's response body on its way to the client.
#[derive(Debug)]
pub struct BackendBody {
    body: UpstreamBody,
    /// Released when the body ends or is dropped.
    in_flight: Option<InFlight>,
    /// The tenant's in-flight count, when its requests are limited:
    /// released with the body, like the shard's.
    tenant: Option<TenantInFlight>,
    /// Where the body's end is reported, once the request path has handed
    /// the response over ([`ResponseBody::settle_with`]).
    settle: Option<Arc<Gateway>>,
    /// The JSON access log's record, written when the body ends (or is
    /// dropped), with the bytes sent counted as they pass.
    log: Option<Box<Record>>,
}

/// How a backend's body ended is judged. The attempt's head came back
/// fine, but that is not yet a success: a body that stalls, breaks off or
/// is malformed is the shard failing (and counts towards its ejection, so
/// a shard that answers heads and then hangs is taken out like one that
/// refuses connections), and only a body that ends cleanly breaks a run of
/// failures. A body its client abandons is nobody's verdict on the shard.
impl BackendBody {
    /// The body has ended (`Ok`) or failed: judge the shard, once.
    fn settle(&mut self, ended: Result<(), &ExchangeError>) {
        let Some(gateway) = self.settle.take() else {
            return;
        };
        if self.log.is_some() {
            self.write_log(&gateway);
        }
        if let Err(error) = ended {
            if matches!(error, ExchangeError::Stalled | ExchangeError::TooSlow) {
                gateway.metrics.backend_stalls.inc();
            }
            if let Some(InFlight(shard)) = &self.in_flight {
                tracing::debug!(cell = %shard.cell, shard = %shard.id, %error, "the backend's response body failed");
            }
        }
        // A response without an in-flight guard was judged already (a
        // retryable status passed on as the last answer).
        let Some(InFlight(shard)) = &self.in_flight else {
            return;
        };
        match ended {
            Ok(()) => Gateway::record_success(shard),
            // The outlier settings in force now: a failure is rare enough
            // to look them up, and a success needs none.
            Err(_) => {
                gateway.record_failure(&gateway.snapshot().config.outlier, shard, Instant::now())
            }
        }
    }
}

impl Drop for BackendBody {
    fn drop(&mut self) {
        // A body with nothing left (a 204, a HEAD answer, one read whole
        // with its head) may never be polled to its end.
        if self.body.is_end_stream() {
            self.settle(Ok(()));
        }
        // A body its client abandoned is logged with what was sent.
        if self.log.is_some()
            && let Some(gateway) = self.settle.take()
        {
            self.write_log(&gateway);
        }
    }
}

impl BackendBody {
    /// Writes the access log's record, the body having ended now.
    #[cold]
    #[inline(never)]
    fn write_log(&mut self, gateway: &Gateway) {
        if let Some(record) = self.log.take() {
            gateway.access_log.write(&record, Instant::now());
        }
    }
}

/// A request counted in a shard's in-flight requests until dropped: an
/// attempt, and then its response until the body has been sent, keeps the
/// shard busy; a request cancelled anywhere on the way (its client hung
/// up) releases it all the same.
#[derive(Debug)]
pub struct InFlight(Arc<ShardRuntime>);

impl InFlight {
    /// Counts one more request in flight on `shard`, until dropped.
    pub fn start(shard: Arc<ShardRuntime>) -> Self {
        shard.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(shard)
    }

    /// Counts one more request in flight on `shard` if fewer than `cap`
    /// are: compared and incremented as one step, so requests racing for
    /// the last place never take the shard past its cap.
    pub fn try_start(shard: &Arc<ShardRuntime>, cap: u64) -> Option<Self> {
        shard
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |count| {
                (count < cap).then_some(count + 1)
            })
            .ok()?;
        Some(Self(Arc::clone(shard)))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Any error a response body can end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A complete response body from bytes.
pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    let bytes = bytes.into();
    ResponseBody::Full((!bytes.is_empty()).then_some(bytes))
}

impl ResponseBody {
    /// A backend's body, holding its shard's in-flight count if given.
    pub fn backend(body: UpstreamBody, in_flight: Option<InFlight>) -> Self {
        ResponseBody::Backend(BackendBody {
            body,
            in_flight,
            tenant: None,
            settle: None,
            log: None,
        })
    }

    /// Writes `record` to the JSON access log when the body ends: at once
    /// for a body of the gateway's own (its length known now), when the
    /// last byte has passed for a backend's. Call before
    /// [`ResponseBody::settle_with`].
    pub fn log_on_end(&mut self, mut record: Box<Record>, gateway: &Gateway) {
        match self {
            ResponseBody::Full(bytes) => {
                record.bytes_out = bytes.as_ref().map_or(0, |bytes| bytes.len() as u64);
                gateway.access_log.write(&record, Instant::now());
            }
            ResponseBody::Backend(backend) => backend.log = Some(record),
        }
    }

    /// Keeps the tenant's in-flight count until a backend's body ends; a
    /// body of the gateway's own is sent at once, and releases it now.
    pub fn hold(&mut self, tenant: TenantInFlight) {
        if let ResponseBody::Backend(backend) = self {
            backend.tenant = Some(tenant);
        }
    }

    /// How a backend's body ends is reported to `gateway`; nothing for a
    /// body of the gateway's own. The request path hands over the reference
    /// it holds anyway, so this costs no reference count.
    pub fn settle_with(&mut self, gateway: Arc<Gateway>) {
        if let ResponseBody::Backend(backend) = self {
            backend.settle = Some(gateway);
        }
    }

    /// The backend's header fields, for a backend's body.
    pub fn backend_fields(&self) -> Option<&Fields> {
        match self {
            ResponseBody::Full(_) => None,
            ResponseBody::Backend(backend) => Some(backend.body.fields()),
        }
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ResponseBody::Full(bytes) => {
                Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes))))
            }
            ResponseBody::Backend(backend) => {
                let polled = ready!(Pin::new(&mut backend.body).poll_frame(cx));
                Poll::Ready(match polled {
                    None => {
                        backend.settle(Ok(()));
                        None
                    }
                    Some(Err(error)) => {
                        backend.settle(Err(&error));
                        Some(Err(BoxError::from(error)))
                    }
                    Some(Ok(frame)) => Some(Ok(match frame.into_trailers() {
                        Err(frame) if backend.log.is_some() => {
                            if let (Some(record), Some(data)) = (&mut backend.log, frame.data_ref())
                            {
                                record.bytes_out += data.len() as u64;
                            }
                            frame
                        }
                        // The backend's trailers cross the same boundary as
                        // its header fields did.
                        Ok(trailers) => Frame::trailers(headers::filter_trailers(
                            trailers,
                            headers::response_trailer_passes,
                        )),
                        Err(frame) => frame,
                    })),
                })
            }
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Full(bytes) => bytes.is_none(),
            ResponseBody::Backend(backend) => backend.body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |bytes| bytes.len() as u64))
            }
            ResponseBody::Backend(backend) => backend.body.size_hint(),
        }
    }
}
