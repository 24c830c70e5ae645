//! The listener: accepts connections, applies the transport limits (header
//! size, header-read timeout), serves each request through the proxy, and
//! shuts down gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::proxy;
use crate::state::Gateway;

/// hyper refuses read buffers smaller than this.
const MIN_BUFFER: usize = 8192;

/// Serves the data listener until `shutdown` completes, then stops
/// accepting (the listener is closed at once, so new clients are refused
/// rather than left in the accept queue), gives in-flight requests the
/// configured grace period, and closes whatever is still open after it.
///
/// At most `limits.max_connections` client connections (read at start) are
/// served at once. Beyond that the gateway stops accepting, as nginx's
/// `worker_connections` and HAProxy's `maxconn` do: new clients wait in the
/// kernel's listen queue, and are taken as soon as a connection closes,
/// instead of each costing a task, buffers and a file descriptor.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let capacity = gateway.snapshot().config.limits.max_connections;
    let slots = Arc::new(Semaphore::new(capacity));
    tokio::pin!(shutdown);
    loop {
        // A free slot first, then a connection to fill it.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot,
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let Ok(slot) = slot else {
            // The semaphore is never closed.
            break;
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
            // Reap finished connections so the set stays small.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(connection) => connection,
            Err(error) => {
                // Running out of file descriptors is the usual cause; back
                // off briefly instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = builder(&gateway).serve_connection(
            TokioIo::new(Lingering::new(stream)),
            service(Arc::clone(&gateway), peer),
        );
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            // Errors here are the client's doing (a reset, a bad request,
            // a header timeout); hyper has already answered what it could.
            let _ = connection.await;
            // The slot is free once the connection is gone.
            drop(slot);
        });
    }
    drop(listener);
    let grace = gateway.snapshot().config.limits.shutdown_grace;
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            open = connections.len(),
            "in-flight requests did not finish within the shutdown grace period; closing them"
        );
    }
    // Whatever outlived the grace period (a response that never ends) is
    // closed now rather than left running after shutdown returns.
    connections.shutdown().await;
}

fn builder(gateway: &Gateway) -> http1::Builder {
    let limits = gateway.snapshot().config.limits.clone();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // The head limit itself; the buffer bound below keeps memory per
        // connection small but cannot go under hyper's minimum, so on its
        // own it would let heads up to 8 KiB through whatever the limit.
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes.max(MIN_BUFFER))
        .keep_alive(true);
    builder
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
struct Lingering {
    stream: Option<TcpStream>,
    /// The client has closed its side: nothing is left to drain.
    client_closed: bool,
}

impl Lingering {
    fn new(stream: TcpStream) -> Self {
        Self {
            stream: Some(stream),
            client_closed: false,
        }
    }

    fn stream(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(self.stream.as_mut().expect("open until dropped"))
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(mut stream) = self.stream.take() else {
            return;
        };
        if self.client_closed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            // Usually hyper has already shut the write side down; if not
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
    ) -> Poll<std::io::Result<()>> {
        let (before, room) = (buf.filled().len(), buf.remaining());
        let polled = self.stream().poll_read(cx, buf);
        if room > 0 && matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() == before {
            // End of stream: the client closed its side.
            self.client_closed = true;
        }
        polled
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.stream().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.stream().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream
            .as_ref()
            .is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }
}

fn service(
    gateway: Arc<Gateway>,
    peer: SocketAddr,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = http::Response<crate::body::ResponseBody>,
    Error = std::convert::Infallible,
    Future = impl Future<
        Output = Result<http::Response<crate::body::ResponseBody>, std::convert::Infallible>,
    > + Send,
> + Clone {
    let peer = proxy::Peer::new(peer);
    service_fn(move |request| {
        let gateway = Arc::clone(&gateway);
        let peer = peer.clone();
        async move { Ok(proxy::handle(gateway, request, &peer).await) }
    })
}
