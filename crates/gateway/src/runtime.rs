//! Starting and stopping a gateway: bind the listener, start the health
//! checker, reload on SIGHUP, and shut down gracefully on SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admin;
use crate::health_check;
use crate::server;
use crate::state::{Gateway, LoadError, Snapshot};

/// Why the gateway could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr} (is another process using it?)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// A running gateway.
#[derive(Debug)]
pub struct Running {
    /// The gateway's state.
    pub gateway: Arc<Gateway>,
    /// The bound data address (useful when the configuration said port 0).
    pub addr: SocketAddr,
    /// The bound admin address.
    pub admin_addr: SocketAddr,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
    admin: JoinHandle<()>,
    health: JoinHandle<()>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish within the grace
    /// period, and stops the health checker.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        let _ = self.admin.await;
        self.health.abort();
    }
}

/// Starts a gateway serving `snapshot`.
pub async fn start(snapshot: Snapshot) -> Result<Running, StartError> {
    let addr = snapshot.config.listen;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| StartError::Bind { addr, source })?;
    let admin_addr = snapshot.config.admin.listen;
    let admin_listener =
        TcpListener::bind(admin_addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: admin_addr,
                source,
            })?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|source| StartError::Bind {
            addr: admin_addr,
            source,
        })?;
    let gateway = Gateway::new(snapshot);
    let health = tokio::spawn(health_check::run(Arc::clone(&gateway)));
    let (stop, stopped) = watch::channel(false);
    let server = tokio::spawn(server::serve(
        Arc::clone(&gateway),
        listener,
        stop_signal(stopped.clone()),
    ));
    let admin = tokio::spawn(admin::serve(
        Arc::clone(&gateway),
        admin_listener,
        stop_signal(stopped),
    ));
    Ok(Running {
        gateway,
        addr,
        admin_addr,
        stop,
        server,
        admin,
        health,
    })
}

/// Completes when the stop flag is raised.
async fn stop_signal(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Runs the gateway from a configuration file until SIGINT or SIGTERM.
pub async fn run(config: &Path) -> Result<(), StartError> {
    let snapshot = Snapshot::load(config, None)?;
    let running = start(snapshot).await?;
    tracing::info!(addr = %running.addr, admin = %running.admin_addr, "gateway listening");
    let reloads = tokio::spawn(reload_on_hangup(Arc::clone(&running.gateway)));
    wait_for_stop_signal().await;
    tracing::info!("shutting down");
    reloads.abort();
    running.shutdown().await;
    Ok(())
}

/// Reloads the configuration on every SIGHUP; a bad configuration is
/// reported and the old one keeps serving.
async fn reload_on_hangup(gateway: Arc<Gateway>) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
    else {
        tracing::warn!("cannot listen for SIGHUP; reload through the admin API instead");
        return;
    };
    while hangups.recv().await.is_some() {
        match gateway.reload(false) {
            Ok(reloaded) => tracing::info!(changed = reloaded.changed, "configuration reloaded"),
            Err(error) => {
                tracing::error!(%error, "reload failed; the previous configuration keeps serving")
            }
        }
    }
}

async fn wait_for_stop_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
