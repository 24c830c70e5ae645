//! A client's socket as every connection is served over it: it holds the
//! connection's slot, fails writes the client stops accepting
//! (`limits.client_write_timeout_ms`), counts the bytes both ways, and
//! lingers when the gateway closes before the client has finished sending.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::state::Gateway;
use crate::upstream::idle::IdleTimer;

/// A client's socket as every connection is served over it: holding its
/// slot, under the client write timeout, lingering when closed early.
pub(crate) fn client_io(
    gateway: &Gateway,
    stream: TcpStream,
    slot: OwnedSemaphorePermit,
) -> Lingering {
    let write_timeout = WriteTimeout {
        timer: IdleTimer::new(gateway.snapshot().config.limits.client_write_timeout),
        expired: gateway.metrics.client_stalls.clone(),
    };
    let bytes = ByteCounts {
        read: 0,
        written: 0,
        into: gateway.metrics.client_bytes_in.clone(),
        out: gateway.metrics.client_bytes_out.clone(),
    };
    Lingering::new(stream, slot, write_timeout, bytes)
}

/// How long a closed connection keeps reading what the client still sends.
const LINGER_TIME: Duration = Duration::from_secs(2);

/// How much it reads (and discards) at most while lingering.
const LINGER_BYTES: usize = 16 * 1024 * 1024;

/// A client connection that, when the gateway closes it before the client
/// has finished sending (a 413, 431 or 408 answered without reading the
/// rest of the request), lingers: it stops writing, then reads and discards
/// what is still arriving for a short while before closing.
///
/// Closing a TCP socket with unread data makes the kernel send a reset,
/// and a reset can destroy the answer the client has not read yet: the
/// client would see a broken connection instead of the 413. (nginx and
/// Apache do the same; it is nginx's `lingering_close`.)
pub(crate) struct Lingering {
    stream: Option<TcpStream>,
    /// The client has closed its side: nothing is left to drain.
    client_closed: bool,
    /// The client stopped reading: the socket is closed with a reset, so
    /// that nothing the client will never read stays queued in the kernel
    /// (nginx's `reset_timedout_connection`).
    reset: bool,
    /// The connection's place under `limits.max_connections`, held until
    /// the socket is closed, lingering included: otherwise a flood of
    /// requests answered early would hold sockets beyond the cap.
    slot: Option<OwnedSemaphorePermit>,
    /// Writes that wait on the client too long fail.
    write_timeout: WriteTimeout,
    /// Bytes read and written, not yet added to the shared counters.
    bytes: ByteCounts,
}

/// A connection's bytes in and out, added to
/// `shuffle_client_bytes_total` every [`ByteCounts::FLUSH_AT`] bytes and
/// when the connection closes: plain additions per read and write, and a
/// shared atomic only now and then.
struct ByteCounts {
    read: u64,
    written: u64,
    into: prometheus_client::metrics::counter::Counter,
    out: prometheus_client::metrics::counter::Counter,
}

impl ByteCounts {
    const FLUSH_AT: u64 = 64 * 1024;

    #[inline(always)]
    fn read(&mut self, bytes: usize) {
        self.read += bytes as u64;
        if self.read >= Self::FLUSH_AT {
            self.into.inc_by(std::mem::take(&mut self.read));
        }
    }

    #[inline(always)]
    fn written(&mut self, bytes: usize) {
        self.written += bytes as u64;
        if self.written >= Self::FLUSH_AT {
            self.out.inc_by(std::mem::take(&mut self.written));
        }
    }

    fn flush(&mut self) {
        if self.read > 0 {
            self.into.inc_by(std::mem::take(&mut self.read));
        }
        if self.written > 0 {
            self.out.inc_by(std::mem::take(&mut self.written));
        }
    }
}

/// `limits.client_write_timeout_ms`: a client that accepts no bytes of its
/// response for this long has its connection closed, which drops the
/// response and with it the backend's connection and the shard's
/// in-flight count. Otherwise a client that stops reading would pin both
/// for as long as it likes.
struct WriteTimeout {
    timer: IdleTimer,
    /// `shuffle_stream_timeouts_total{side="client"}`.
    expired: prometheus_client::metrics::counter::Counter,
}

impl Lingering {
    fn new(
        stream: TcpStream,
        slot: OwnedSemaphorePermit,
        write_timeout: WriteTimeout,
        bytes: ByteCounts,
    ) -> Self {
        Self {
            stream: Some(stream),
            client_closed: false,
            reset: false,
            slot: Some(slot),
            write_timeout,
            bytes,
        }
    }

    /// What a write to the client that made `progress` (or is still
    /// waiting) comes to under the write timeout.
    #[inline(always)]
    fn timed<T>(
        &mut self,
        cx: &mut Context<'_>,
        progress: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if progress.is_ready() {
            self.write_timeout.timer.progressed();
            return progress;
        }
        // No budget is set on this timer: it can only idle out.
        ready!(self.write_timeout.timer.poll_expired(cx));
        self.write_timeout.expired.inc();
        // Nothing more is read from or written to a client that stopped
        // reading: no lingering either, and what is queued for it is
        // dropped with a reset when the connection closes.
        self.client_closed = true;
        self.reset = true;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client accepted nothing for limits.client_write_timeout_ms",
        )))
    }

    /// The socket itself, for what only it can do (a peek at whether the
    /// client hung up).
    pub(crate) fn tcp(&self) -> &TcpStream {
        self.stream.as_ref().expect("open until dropped")
    }

    fn stream(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(self.stream.as_mut().expect("open until dropped"))
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        self.bytes.flush();
        let Some(mut stream) = self.stream.take() else {
            return;
        };
        if self.reset {
            // SO_LINGER 0: the close sends RST and frees the send buffer at
            // once, instead of the kernel holding it (up to megabytes,
            // outside `limits.max_connections`) while it retries a peer
            // that reads nothing.
            let _ = stream.set_zero_linger();
            return;
        }
        if self.client_closed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let slot = self.slot.take();
        runtime.spawn(async move {
            let _slot = slot;
            // Usually the write side has been shut down already; if not
            // (an aborted connection), the client learns it here.
            let _ = stream.shutdown().await;
            let mut discard = vec![0_u8; 16 * 1024];
            let mut drained = 0;
            let _ = tokio::time::timeout(LINGER_TIME, async {
                while drained < LINGER_BYTES {
                    match stream.read(&mut discard).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => drained += n,
                    }
                }
            })
            .await;
        });
    }
}

impl AsyncRead for Lingering {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let (before, room) = (buf.filled().len(), buf.remaining());
        let polled = self.stream().poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) {
            let read = buf.filled().len() - before;
            if room > 0 && read == 0 {
                // End of stream: the client closed its side.
                self.client_closed = true;
            }
            self.bytes.read(read);
        }
        polled
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let progress = self.stream().poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = progress {
            self.bytes.written(written);
        }
        self.timed(cx, progress)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let progress = self.stream().poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(written)) = progress {
            self.bytes.written(written);
        }
        self.timed(cx, progress)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream
            .as_ref()
            .is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }
}
