//! One TLS client connection: the handshake, under its own timeout (and
//! the header-read timeout, which runs from accept) and inside the
//! connection's slot, then HTTP/1.1 or HTTP/2 over it.
//!
//! The certificates in force are read from the snapshot when the
//! connection is accepted, so a reload (`SIGHUP`, `POST /admin/reload`)
//! swaps them for new connections while established ones keep theirs. A
//! client certificate the handshake verified (`[auth.mtls]`) is read once
//! here for the tenant it names; each request checks that tenant against
//! the tenants file then in force.
//!
//! TLS connections are served by hyper from the first request: TLS costs
//! more than the fast path saves, and hyper brings upgrades and graceful
//! shutdown with it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use crate::config::ClientCertificate;
use crate::listen::connection::{self, Protocol};
use crate::listen::lingering;
use crate::listen::shutdown::ShutdownWatch;
use crate::route::peer::Peer;
use crate::state::Gateway;
use crate::telemetry::metrics::OutcomeLabels;
use crate::trust::client_cert;

/// Serves one TLS client connection until it closes, the client goes away
/// or the gateway shuts down.
pub(crate) async fn serve(
    gateway: Arc<Gateway>,
    stream: TcpStream,
    addr: SocketAddr,
    shutdown: ShutdownWatch,
    slot: OwnedSemaphorePermit,
) {
    let accepted = Instant::now();
    let snapshot = gateway.snapshot();
    // A reload cannot remove `[tls]` (the listener is bound at start), so
    // this is always there.
    let Some(tls) = snapshot.config.tls.as_ref() else {
        return;
    };
    let acceptor = TlsAcceptor::from(Arc::clone(&tls.server));
    let handshake_timeout = tls.handshake_timeout;
    // The request head is due `limits.header_read_timeout_ms` after accept,
    // the handshake included: a client that has negotiated nothing by then
    // is closed, whatever `tls.handshake_timeout_ms` allows.
    let header_deadline = accepted + snapshot.config.limits.header_read_timeout;
    let handshake_deadline = header_deadline.min(accepted + handshake_timeout);
    let tenant_from = snapshot
        .config
        .mtls
        .as_ref()
        .filter(|mtls| mtls.client_certificate != ClientCertificate::Off)
        .map(|mtls| mtls.tenant_from.clone());
    drop(snapshot);

    let io = lingering::client_io(&gateway, stream, slot);
    let handshake = tokio::time::timeout_at(handshake_deadline, acceptor.accept(io));
    let outcome = tokio::select! {
        outcome = handshake => outcome,
        () = shutdown.stopping() => return,
    };
    let count = |outcome| {
        gateway
            .metrics
            .tls_handshakes
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    };
    let stream = match outcome {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            count("failed");
            // The client's doing (or a scanner's); the error names the
            // alert or the parse failure, never key material.
            tracing::debug!(%addr, %error, "TLS handshake failed");
            return;
        }
        Err(_) => {
            count("timeout");
            tracing::debug!(%addr, "TLS handshake not finished within tls.handshake_timeout_ms or limits.header_read_timeout_ms");
            return;
        }
    };
    count("ok");
    let certificate = tenant_from.and_then(|rule| {
        let (_, session) = stream.get_ref();
        let leaf = session.peer_certificates()?.first()?;
        Some(client_cert::tenant_named(leaf, &rule))
    });
    let peer = Peer {
        tls: true,
        ..match certificate {
            Some(certificate) => Peer::with_certificate(addr, certificate),
            None => Peer::new(addr),
        }
    };
    // ALPN chose the protocol (`h2` is offered only when HTTP/2 is on).
    let protocol = match stream.get_ref().1.alpn_protocol() {
        Some(b"h2") => Protocol::Http2,
        _ => Protocol::Http1,
    };
    connection::serve_with_hyper(gateway, stream, peer, shutdown, protocol, header_deadline).await;
}
