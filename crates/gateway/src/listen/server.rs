//! The listeners: accept client connections up to the configured limit,
//! give each to its serving function ([`crate::listen::connection`] for
//! plaintext, [`crate::listen::tls`] for TLS), and shut down gracefully.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::listen::shutdown::{Shutdown, ShutdownWatch};
use crate::state::Gateway;

/// What serves one accepted connection: the gateway, the socket, the
/// client's address, the shutdown watch and the connection's slot.
pub(crate) type ServeConnection<Serving> =
    fn(Arc<Gateway>, TcpStream, SocketAddr, ShutdownWatch, OwnedSemaphorePermit) -> Serving;

/// The client connections served at once, over every data listener:
/// `limits.max_connections` (read at start). A connection holds its slot
/// from accept (a TLS handshake included) until it is gone.
pub(crate) fn slots(gateway: &Gateway) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(
        gateway.snapshot().config.limits.max_connections,
    ))
}

/// Serves the data listener until `shutdown` completes, then stops
/// accepting (the listener is closed at once, so new clients are refused
/// rather than left in the accept queue), gives in-flight requests the
/// configured grace period, and closes whatever is still open after it.
///
/// At most as many client connections as `slots` has permits are served at
/// once. Beyond that the gateway stops accepting, as nginx's
/// `worker_connections` and HAProxy's `maxconn` do: new clients wait in the
/// kernel's listen queue, and are taken as soon as a connection closes,
/// instead of each costing a task, buffers and a file descriptor.
pub(crate) async fn serve<Serving>(
    gateway: Arc<Gateway>,
    listener: TcpListener,
    kind: &'static str,
    slots: Arc<Semaphore>,
    shutdown: impl Future<Output = ()>,
    serve_connection: ServeConnection<Serving>,
) where
    Serving: Future<Output = ()> + Send + 'static,
{
    let stop = Shutdown::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // Wait for a free slot, then for a client to fill it. The slot is
        // not held while waiting: the other data listener shares them.
        let free = tokio::select! {
            free = slots.acquire() => free.is_ok(),
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        if !free {
            // The semaphore is never closed.
            break;
        }
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
        // The other listener may have taken the free slot meanwhile; then
        // this client waits here for the next, as it would have in the
        // listen queue.
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => tokio::select! {
                slot = Arc::clone(&slots).acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => break,
                },
                () = &mut shutdown => break,
            },
        };
        let _ = stream.set_nodelay(true);
        // Counted as open while it is served (lingering not included).
        let open = gateway.metrics.connection(kind);
        // The slot is free once the connection is gone, lingering included.
        let serving = serve_connection(Arc::clone(&gateway), stream, peer, stop.watch(), slot);
        connections.spawn(async move {
            let _open = open;
            serving.await;
        });
    }
    drop(listener);
    let grace = gateway.snapshot().config.limits.shutdown_grace;
    // Idle connections close now; the others after their current request.
    stop.stop();
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, drained).await.is_err() {
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
