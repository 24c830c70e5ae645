//! The listener: accepts connections, applies the transport limits (header
//! size, header-read timeout), serves each request through the proxy, and
//! shuts down gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::proxy;
use crate::state::Gateway;

/// hyper refuses read buffers smaller than this.
const MIN_BUFFER: usize = 8192;

/// Serves the data listener until `shutdown` completes, then stops
/// accepting and gives in-flight requests the configured grace period.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(connection) => connection,
            Err(error) => {
                // Running out of file descriptors is the usual cause; back
                // off briefly instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = builder(&gateway)
            .serve_connection(TokioIo::new(stream), service(Arc::clone(&gateway), peer));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // Errors here are the client's doing (a reset, a bad request,
            // a header timeout); hyper has already answered what it could.
            let _ = connection.await;
        });
    }
    let grace = gateway.snapshot().config.limits.shutdown_grace;
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "in-flight requests did not finish within the shutdown grace period"
        );
    }
}

fn builder(gateway: &Gateway) -> http1::Builder {
    let limits = gateway.snapshot().config.limits.clone();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(MIN_BUFFER))
        .keep_alive(true);
    builder
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
    service_fn(move |request| {
        let gateway = Arc::clone(&gateway);
        async move { Ok(proxy::handle(gateway, request, peer).await) }
    })
}
