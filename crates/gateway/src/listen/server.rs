//! The listener: accepts client connections up to the configured limit,
//! gives each to [`crate::listen::connection`], and shuts down gracefully.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::listen::connection;
use crate::listen::shutdown::Shutdown;
use crate::state::Gateway;

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
    let stop = Shutdown::new();
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
        // The slot is free once the connection is gone, lingering included.
        connections.spawn(connection::serve(
            Arc::clone(&gateway),
            stream,
            peer,
            stop.watch(),
            slot,
        ));
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
