//! Starting and stopping a gateway: bind the listeners (plaintext, TLS,
//! admin), start the health checker, reload on SIGHUP, and shut down
//! gracefully on SIGINT or SIGTERM.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use crate::fleet;
use crate::listen::{connection, server, tls};
use crate::ops::admin;
use crate::probe;
use crate::state::{Gateway, LoadError, Snapshot};

/// Why the gateway could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// The configuration could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The tenants could not be read from the tenant store, nor from the
    /// snapshot file.
    #[error(transparent)]
    Tenants(#[from] crate::tenant_sync::SyncStartError),
    /// The listener could not be bound.
    #[error("cannot listen on {addr} (is another process using it?)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// Why a gateway that started stopped serving.
#[derive(Debug, Error)]
pub enum RunError {
    /// It could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A part of it stopped on its own: the process would look alive and
    /// serve nothing, so it exits for its supervisor to restart it.
    #[error(
        "the {0} stopped unexpectedly; exiting so that a supervisor (systemd, Kubernetes) restarts the gateway"
    )]
    Stopped(&'static str),
}

/// A running gateway.
#[derive(Debug)]
pub struct Running {
    /// The gateway's state.
    pub gateway: Arc<Gateway>,
    /// The bound data address (useful when the configuration said port 0):
    /// the plaintext listener's, or the TLS listener's when there is no
    /// plaintext one.
    pub addr: SocketAddr,
    /// The bound TLS address, when `[tls]` is configured.
    pub tls_addr: Option<SocketAddr>,
    /// The bound admin address.
    pub admin_addr: SocketAddr,
    stop: watch::Sender<bool>,
    server: JoinHandle<()>,
    tls: JoinHandle<()>,
    admin: JoinHandle<()>,
    health: JoinHandle<()>,
}

impl Running {
    /// Stops accepting, lets in-flight requests finish within the grace
    /// period, and stops the health checker.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        let _ = self.tls.await;
        let _ = self.admin.await;
        self.health.abort();
        // The spans of the requests that just finished, within one export.
        self.gateway.traces.flush().await;
    }

    /// Completes when a listener or the health checker ends on its own
    /// (a panic, or a loop that gave up), naming it. They run until
    /// shutdown otherwise, so this is never complete while all is well.
    pub async fn unexpected_stop(&mut self) -> &'static str {
        tokio::select! {
            _ = &mut self.server => "data listener",
            _ = &mut self.tls => "TLS listener",
            _ = &mut self.admin => "admin listener",
            _ = &mut self.health => "health checker",
        }
    }

    /// Stops everything at once, without a grace period.
    fn abort(self) {
        let _ = self.stop.send(true);
        self.server.abort();
        self.tls.abort();
        self.admin.abort();
        self.health.abort();
    }
}

/// Binds `addr`; returns the listener and the address it got.
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartError> {
    let bind_error = |source| StartError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let bound = listener.local_addr().map_err(bind_error)?;
    Ok((listener, bound))
}

/// Starts a gateway serving `snapshot`.
pub async fn start(snapshot: Snapshot) -> Result<Running, StartError> {
    let plain = match snapshot.config.listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let tls_listener = match &snapshot.config.tls {
        Some(tls) => Some(bind(tls.listen).await?),
        None => None,
    };
    let (admin_listener, admin_addr) = bind(snapshot.config.admin.listen).await?;
    if !admin_addr.ip().to_canonical().is_loopback() {
        // Start-up refuses token-less pages on such an address (see
        // `config`); the token-protected API is still worth a line.
        tracing::warn!(admin = %admin_addr, "the admin listener is reachable from other hosts; keep admin.token_file secret, or bind admin.listen to 127.0.0.1");
    }
    let tls_addr = tls_listener.as_ref().map(|(_, addr)| *addr);
    let Some(addr) = plain.as_ref().map(|(_, addr)| *addr).or(tls_addr) else {
        // Validation makes sure of one data listener.
        unreachable!("a validated configuration has a data listener");
    };
    let gateway = Gateway::new(snapshot);
    log_listeners(&gateway.snapshot().config, addr, tls_addr, admin_addr);
    gateway.trace_to(&gateway.snapshot().config);
    // With `[fleet]`: the fleet's marks and suspects before the first
    // request, when the store answers within a second.
    fleet::start(&gateway).await;
    let (stop, stopped) = watch::channel(false);
    // With `[tenants] store`: every tenant before the first request.
    crate::tenant_sync::start(&gateway, stopped.clone()).await?;
    // Discovered cells: their first membership is in the snapshot; from
    // here on each is followed.
    crate::discovery_sync::start(&gateway, stopped.clone());
    let health = tokio::spawn(probe::check::run(Arc::clone(&gateway)));
    // One limit on client connections over both data listeners.
    let slots = server::slots(&gateway);
    let server = spawn_listener(
        &gateway,
        plain.map(|(listener, _)| listener),
        "plain",
        Arc::clone(&slots),
        stopped.clone(),
        connection::serve,
    );
    let tls = spawn_listener(
        &gateway,
        tls_listener.map(|(listener, _)| listener),
        "tls",
        slots,
        stopped.clone(),
        tls::serve,
    );
    let admin = tokio::spawn(admin::serve(
        Arc::clone(&gateway),
        admin_listener,
        stop_signal(stopped),
    ));
    Ok(Running {
        gateway,
        addr,
        tls_addr,
        admin_addr,
        stop,
        server,
        tls,
        admin,
        health,
    })
}

/// Serves `listener`, if there is one, with `serve_connection` until the
/// stop flag is raised; without one, just waits for the flag (so that
/// [`Running::unexpected_stop`] treats both listeners alike).
fn spawn_listener<Serving>(
    gateway: &Arc<Gateway>,
    listener: Option<TcpListener>,
    kind: &'static str,
    slots: Arc<Semaphore>,
    stopped: watch::Receiver<bool>,
    serve_connection: server::ServeConnection<Serving>,
) -> JoinHandle<()>
where
    Serving: Future<Output = ()> + Send + 'static,
{
    let gateway = Arc::clone(gateway);
    tokio::spawn(async move {
        match listener {
            Some(listener) => {
                let stop = stop_signal(stopped);
                server::serve(gateway, listener, kind, slots, stop, serve_connection).await;
            }
            None => stop_signal(stopped).await,
        }
    })
}

/// Completes when the stop flag is raised.
async fn stop_signal(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// What `serve --check` found in a valid configuration: enough to see at a
/// glance that it is the configuration meant (no secret, no key bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The configuration file.
    pub path: std::path::PathBuf,
    /// Cells.
    pub cells: usize,
    /// Shards over every cell.
    pub shards: usize,
    /// Tenants in the tenants file (0 with the tenant store, which is read
    /// at start, not by `--check`).
    pub tenants: usize,
    /// The tenant store, when tenants come from one (its URL without the
    /// password).
    pub tenant_store: Option<String>,
    /// The placement algorithms in use, each once, in cell order.
    pub algorithms: Vec<&'static str>,
    /// The placement key versions in use, each once, in cell order.
    pub key_versions: Vec<String>,
    /// The TLS listener's address, when `[tls]` is configured (its
    /// certificates and keys were read and matched).
    pub tls: Option<SocketAddr>,
    /// Each discovered cell's first membership, as it would start with.
    pub discovered: Vec<CheckedCell>,
}

/// A discovered cell as `serve --check` found it: the cell, its source,
/// and its shards (id, address, zone).
pub type CheckedCell = (String, String, Vec<(String, SocketAddr, Option<String>)>);

impl std::fmt::Display for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |count: usize, one: &str| {
            if count == 1 {
                format!("1 {one}")
            } else {
                format!("{count} {one}s")
            }
        };
        write!(
            f,
            "configuration OK: {}: {}, {}, {}, algorithm {}, key version {}",
            self.path.display(),
            plural(self.cells, "cell"),
            plural(self.shards, "shard"),
            match &self.tenant_store {
                None => plural(self.tenants, "tenant"),
                Some(store) => format!("tenants from the tenant store {store} (read at start)"),
            },
            self.algorithms.join(", "),
            self.key_versions.join(", "),
        )?;
        if let Some(tls) = self.tls {
            write!(f, ", TLS on {tls}")?;
        }
        // What discovery found now: the membership a start would begin
        // with, one line per shard.
        for (cell, source, shards) in &self.discovered {
            write!(
                f,
                "\ncell {cell}: {} from {source}",
                plural(shards.len(), "shard")
            )?;
            for (id, address, zone) in shards {
                write!(f, "\n  {id} {address}")?;
                if let Some(zone) = zone {
                    write!(f, " zone {zone}")?;
                }
            }
        }
        Ok(())
    }
}

/// Validates the configuration at `path` and everything it names (the
/// tenants file, placement keys, the admin token file, the JWT key, TLS
/// certificates and keys) exactly as start-up does, without binding
/// anything or starting any task: `serve --check`, like `nginx -t`.
pub fn check(path: &Path) -> Result<Checked, LoadError> {
    let snapshot = Snapshot::load(path, None)?;
    let config = &snapshot.config;
    let mut algorithms = Vec::new();
    let mut key_versions = Vec::new();
    for cell in config.cells() {
        if !algorithms.contains(&cell.algorithm.name()) {
            algorithms.push(cell.algorithm.name());
        }
        if !key_versions.contains(&cell.key_version) {
            key_versions.push(cell.key_version.clone());
        }
    }
    Ok(Checked {
        path: path.to_owned(),
        cells: config.cells().len(),
        shards: config.cells().iter().map(|cell| cell.shards.len()).sum(),
        tenants: snapshot.tenants.len(),
        tenant_store: match config.tenants() {
            crate::config::TenantSource::Store(store) => Some(store.url.to_string()),
            crate::config::TenantSource::File(_) => None,
        },
        algorithms,
        key_versions,
        tls: config.tls().map(|tls| tls.listen),
        discovered: snapshot
            .memberships
            .iter()
            .map(|(cell, membership)| {
                let shards = membership
                    .members
                    .iter()
                    .map(|member| (member.id.clone(), member.address, member.zone.clone()))
                    .collect();
                (cell.clone(), membership.source.to_string(), shards)
            })
            .collect(),
    })
}

/// Runs the gateway from a configuration file until SIGINT or SIGTERM, or
/// until a part of it stops on its own ([`RunError::Stopped`]).
pub async fn run(config: &Path) -> Result<(), RunError> {
    // Hooked before anything listens: until a signal has its handler, its
    // default action ends the process, and an operator (or a script) may
    // send one as soon as `/readyz` answers or the line below is logged.
    let signals = Signals::hook();
    let snapshot = Snapshot::load(config, None).map_err(StartError::from)?;
    let mut running = start(snapshot).await?;
    tracing::info!(addr = %running.addr, admin = %running.admin_addr, "gateway listening");
    let reloads = tokio::spawn(reload_on_hangup(
        Arc::clone(&running.gateway),
        signals.hangup,
    ));
    let reopens = tokio::spawn(reopen_on_usr1(Arc::clone(&running.gateway), signals.user1));
    let stopped = tokio::select! {
        () = wait_for_stop_signal(signals.terminate, signals.interrupt) => None,
        part = running.unexpected_stop() => Some(part),
    };
    reloads.abort();
    reopens.abort();
    if let Some(part) = stopped {
        tracing::error!(part, "stopped unexpectedly; exiting");
        running.abort();
        return Err(RunError::Stopped(part));
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

/// One line per listener, so an operator reading the start-up log sees
/// every address the gateway answers on (and which names its TLS
/// certificates serve) without reading the configuration. Written before
/// any listener serves: a script that waits for `/readyz` and then reads
/// the log finds them there (the summary line `run` writes after them
/// keeps its `addr=… admin=…` shape, which scripts read).
fn log_listeners(
    config: &crate::config::GatewayConfig,
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    admin_addr: SocketAddr,
) {
    if config.listen.is_some() {
        tracing::info!(listener = "plaintext", addr = %addr, "listening");
    }
    if let (Some(tls_addr), Some(tls)) = (tls_addr, config.tls()) {
        let names = tls.certificate_names().join(", ");
        tracing::info!(listener = "tls", addr = %tls_addr, certificates = %names, "listening");
    }
    tracing::info!(listener = "admin", addr = %admin_addr, "listening");
}

/// Reloads the configuration on every SIGHUP; a bad configuration is
/// reported and the old one keeps serving.
async fn reload_on_hangup(gateway: Arc<Gateway>, hangups: Option<Signal>) {
    let Some(mut hangups) = hangups else {
        tracing::warn!("cannot listen for SIGHUP; reload through the admin API instead");
        return;
    };
    while hangups.recv().await.is_some() {
        match gateway.reload(false) {
            Ok(reloaded) => tracing::info!(
                changed = reloaded.changed,
                members_gained = reloaded.members_gained,
                members_lost = reloaded.members_lost,
                "configuration reloaded"
            ),
            Err(error) => {
                tracing::error!(%error, "reload failed; the previous configuration keeps serving")
            }
        }
    }
}

/// Reopens the JSON access log's file on every SIGUSR1, as logrotate
/// expects after renaming it (`postrotate kill -USR1 ...`).
async fn reopen_on_usr1(gateway: Arc<Gateway>, signals: Option<Signal>) {
    let Some(mut signals) = signals else {
        tracing::warn!(
            "cannot listen for SIGUSR1; use logrotate's copytruncate for the access log"
        );
        return;
    };
    while signals.recv().await.is_some() {
        match gateway.access_log.reopen() {
            Ok(()) => tracing::info!("access log reopened"),
            Err(error) => {
                tracing::error!(%error, "cannot reopen logging.access_log_file; still writing to the old file")
            }
        }
    }
}

async fn wait_for_stop_signal(terminate: Option<Signal>, interrupt: Option<Signal>) {
    let wait = |signal: Option<Signal>| async move {
        match signal {
            Some(mut signal) => {
                signal.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = wait(interrupt) => {}
        () = wait(terminate) => {}
    }
}

/// The signals the gateway answers, each hooked once at start-up (`None`
/// when the process may not listen for it).
struct Signals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
    hangup: Option<Signal>,
    user1: Option<Signal>,
}

impl Signals {
    fn hook() -> Self {
        let hook = |kind: SignalKind| tokio::signal::unix::signal(kind).ok();
        Self {
            terminate: hook(SignalKind::terminate()),
            interrupt: hook(SignalKind::interrupt()),
            hangup: hook(SignalKind::hangup()),
            user1: hook(SignalKind::user_defined1()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration on ephemeral loopback ports with one shard nobody
    /// serves.
    fn snapshot(dir: &Path) -> Snapshot {
        std::fs::write(dir.join("placement.key"), [9_u8; 32]).unwrap();
        std::fs::write(dir.join("tenants.toml"), "").unwrap();
        let path = dir.join("gateway.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:0\"\ntenants_file = \"tenants.toml\"\n\
             [placement]\nalgorithm = \"rendezvous\"\nk = 1\nkey_file = \"placement.key\"\nkey_version = \"v1\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\
             [[cells]]\nname = \"default\"\nshards = [{ id = \"s0\", url = \"http://127.0.0.1:9\" }]\n",
        )
        .unwrap();
        Snapshot::load(&path, None).unwrap()
    }

    #[tokio::test]
    async fn a_listener_that_ends_is_reported_by_name() {
        let dir = tempfile::tempdir().unwrap();
        for (part, kill) in [
            (
                "data listener",
                (|r: &Running| r.server.abort()) as fn(&Running),
            ),
            ("admin listener", |r: &Running| r.admin.abort()),
            ("health checker", |r: &Running| r.health.abort()),
        ] {
            let mut running = start(snapshot(dir.path())).await.unwrap();
            kill(&running);
            assert_eq!(running.unexpected_stop().await, part);
            running.abort();
        }
    }

    #[tokio::test]
    async fn nothing_is_reported_while_all_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut running = start(snapshot(dir.path())).await.unwrap();
        let waited = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            running.unexpected_stop(),
        )
        .await;
        assert!(waited.is_err(), "reported {waited:?} while running");
        running.shutdown().await;
    }
}
