//! What carries a connection to a shard: plain TCP for `http://` shards,
//! TLS over TCP for `https://` ones. What is spoken over it (HTTP/1.1, or
//! HTTP/2 for `h2c` and `h2` shards) is part of the [`Connector`] too, so
//! that a reload that changes it is a change in how the shard is reached,
//! and the pool, the health checks and the in-flight accounting stay one
//! copy whatever a shard speaks. An `h2` shard's handshake offers ALPN
//! `h2` alone, and a shard that does not choose it is a connection that
//! could not be made.
//!
//! The TLS handshake is part of making a connection: it runs inside
//! [`Connector::connect`] under the same deadline as the TCP connect, and a
//! handshake that fails for any reason (a certificate from another CA or
//! for another name, a peer that speaks plaintext, resets or never
//! answers) is a connection that could not be made. Nothing of the request
//! has been sent by then, so the request path may take it to another
//! member of the subset whatever its method.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::config::{ShardProtocol, ShardUrl, UpstreamTlsSettings};

/// One open connection to a shard.
pub(crate) enum Transport {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS over TCP. Boxed: a TLS session's state is several hundred bytes,
    /// which plain connections should not carry.
    Tls(Box<TlsStream<TcpStream>>),
}

impl fmt::Debug for Transport {
    // Only where it goes: the TLS session's state stays out of it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, stream) = match self {
            Transport::Tcp(stream) => ("Tcp", stream),
            Transport::Tls(stream) => ("Tls", stream.get_ref().0),
        };
        f.debug_struct(kind)
            .field("peer", &stream.peer_addr().ok())
            .finish()
    }
}

/// What became of a connection while it sat idle in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WhileIdle {
    /// Nothing: it may carry the next exchange.
    Quiet,
    /// The shard closed it (or reset it): an ordinary end.
    Closed,
    /// The shard sent data nobody asked for: a shard whose answers run
    /// past their end.
    Unasked,
}

impl Transport {
    /// What the backend did with the connection while it sat idle, as far
    /// as the kernel knows now: one system call for plain TCP (a few for TLS,
    /// whose records must be read to be told apart).
    #[inline]
    pub(crate) fn while_idle(&mut self) -> WhileIdle {
        match self {
            Transport::Tcp(stream) => socket_while_idle(stream),
            Transport::Tls(stream) => tls_while_idle(stream),
        }
    }
}

/// [`Transport::while_idle`] for TLS, out of the plain path's way.
///
/// A peek cannot say what a TLS record on the socket is: a late answer and
/// the shard's close_notify look alike until decrypted. So the records in
/// the kernel now are read into the session (non-blocking, from the socket
/// itself, whatever tokio's readiness says) and processed: plaintext is
/// data nobody asked for, and bars the shard as on a plain socket; a
/// close_notify, the end of the stream or a broken record is an ordinary
/// end. Records that carry neither (a session ticket, a key update, or part
/// of a record whose rest is still on its way) retire the connection
/// without blaming the shard: whatever follows them cannot be told from
/// the next answer.
#[inline(never)]
fn tls_while_idle(stream: &mut TlsStream<TcpStream>) -> WhileIdle {
    let (socket, session) = stream.get_mut();
    let socket = socket2::SockRef::from(&*socket);
    let mut socket: &socket2::Socket = &socket;
    let mut read_any = false;
    // Each round takes at most one buffer of records; a shard still
    // sending after a few is retired anyway.
    for _ in 0..4 {
        match session.process_new_packets() {
            Ok(state) if state.plaintext_bytes_to_read() > 0 => return WhileIdle::Unasked,
            Ok(state) if !state.peer_has_closed() => {}
            _ => return WhileIdle::Closed,
        }
        match session.read_tls(&mut socket) {
            Ok(0) => return WhileIdle::Closed,
            Ok(_) => read_any = true,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                return if read_any {
                    WhileIdle::Closed
                } else {
                    WhileIdle::Quiet
                };
            }
            Err(_) => return WhileIdle::Closed,
        }
    }
    WhileIdle::Closed
}

/// What can be read from `stream` now, asked of the kernel itself: nothing,
/// its end (or an error), or data. Tokio's readiness is not enough: it is
/// as old as the event loop's last turn, and bytes a shard sent since (a
/// late tail of the last response, or a whole response nobody asked for)
/// would then be read as the answer to the next request, which may be
/// another tenant's. One non-blocking `recv(MSG_PEEK)` per reuse answers
/// for the socket as it is now; the byte it may see stays unread, and the
/// connection is dropped.
#[inline]
fn socket_while_idle(stream: &TcpStream) -> WhileIdle {
    let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    match socket2::SockRef::from(stream).peek(&mut probe) {
        Err(error) if error.kind() == io::ErrorKind::WouldBlock => WhileIdle::Quiet,
        Ok(1..) => WhileIdle::Unasked,
        Ok(0) | Err(_) => WhileIdle::Closed,
    }
}

impl AsyncRead for Transport {
    #[inline]
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    #[inline]
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_write(cx, buf),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    #[inline]
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Transport::Tcp(stream) => stream.is_write_vectored(),
            Transport::Tls(stream) => stream.is_write_vectored(),
        }
    }

    #[inline]
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_flush(cx),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    #[inline]
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            Transport::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

/// How to open a connection to one shard.
#[derive(Clone)]
pub(crate) enum Connector {
    /// TCP to `host:port`.
    Tcp {
        /// `host:port`.
        address: String,
        /// HTTP/2 with prior knowledge (`h2c`) instead of HTTP/1.1.
        http2: bool,
    },
    /// TLS over TCP to `host:port`.
    Tls {
        /// `host:port`.
        address: String,
        /// The name sent as SNI and that the shard's certificate must
        /// carry.
        server_name: ServerName<'static>,
        /// `[upstream.tls]`: the roots, the client certificate, the
        /// protocol versions.
        settings: UpstreamTlsSettings,
        /// HTTP/2 negotiated by ALPN (`h2`) instead of HTTP/1.1.
        http2: bool,
        /// What the handshake is made with: `settings`' own, or for an
        /// `h2` shard a copy that offers ALPN `h2` (made once, here, and
        /// sharing the original's session cache).
        client: Arc<rustls::ClientConfig>,
    },
    /// The shard's URL names no host (or an `https://` URL came without
    /// TLS settings): nothing can be reached.
    Unreachable,
}

impl fmt::Debug for Connector {
    // The rustls configuration (which holds the client key) stays out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Connector::Tcp { address, http2 } => f
                .debug_struct("Tcp")
                .field("address", address)
                .field("http2", http2)
                .finish(),
            Connector::Tls {
                address,
                server_name,
                settings,
                http2,
                ..
            } => f
                .debug_struct("Tls")
                .field("address", address)
                .field("server_name", server_name)
                .field("settings", settings)
                .field("http2", http2)
                .finish(),
            Connector::Unreachable => f.write_str("Unreachable"),
        }
    }
}

impl Connector {
    /// The connector for a shard's URL (`http://host[:port]/...` or
    /// `https://host[:port]/...`, port 80 or 443 when none is written), as
    /// [`Connector::for_shard`] for HTTP/1.1. A URL that is not a shard's
    /// (a port that does not parse, user information: see [`ShardUrl`])
    /// reaches nothing, rather than a port nobody wrote.
    pub(crate) fn for_url(
        url: &http::Uri,
        server_name: Option<&ServerName<'static>>,
        tls: Option<&UpstreamTlsSettings>,
    ) -> Self {
        match ShardUrl::from_uri(url) {
            Ok(url) => Self::for_shard(&url, server_name, tls, ShardProtocol::Http1),
            Err(_) => Connector::Unreachable,
        }
    }

    /// The connector for a shard's checked URL, speaking `protocol` (which
    /// the configuration has matched with the URL's scheme: `h2c` over
    /// `http://`, `h2` over `https://`). An `https://` shard is reached
    /// with `tls` (which the configuration provides whenever a shard is
    /// `https://`), and its certificate must carry `server_name`, or else
    /// the URL's host (a DNS name or an IP address). The address is the
    /// one [`ShardUrl`] parsed: there is no port to guess here.
    pub(crate) fn for_shard(
        url: &ShardUrl,
        server_name: Option<&ServerName<'static>>,
        tls: Option<&UpstreamTlsSettings>,
        protocol: ShardProtocol,
    ) -> Self {
        let http2 = protocol.is_http2();
        let host = url.host();
        let https = url.is_https();
        let address = url.address().to_owned();
        if !https {
            return Connector::Tcp { address, http2 };
        }
        // An IPv6 host is written in brackets in a URL, never in a name.
        let bare = host
            .strip_prefix('[')
            .and_then(|host| host.strip_suffix(']'))
            .unwrap_or(host);
        let server_name = match server_name {
            Some(name) => Some(name.clone()),
            None => ServerName::try_from(bare.to_owned()).ok(),
        };
        match (server_name, tls) {
            (Some(server_name), Some(settings)) => {
                let client = if http2 {
                    let mut client = (*settings.client).clone();
                    client.alpn_protocols = vec![ALPN_H2.to_vec()];
                    Arc::new(client)
                } else {
                    Arc::clone(&settings.client)
                };
                Connector::Tls {
                    address,
                    server_name,
                    settings: settings.clone(),
                    http2,
                    client,
                }
            }
            // The configuration checks both; without them there is nobody
            // the gateway could verify, so nothing is reached.
            _ => Connector::Unreachable,
        }
    }

    /// Where it connects, for operators (`Debug` of the pool).
    pub(crate) fn address(&self) -> Option<&str> {
        match self {
            Connector::Tcp { address, .. } | Connector::Tls { address, .. } => Some(address),
            Connector::Unreachable => None,
        }
    }

    /// Whether connections it makes speak HTTP/2.
    pub(crate) fn http2(&self) -> bool {
        match self {
            Connector::Tcp { http2, .. } | Connector::Tls { http2, .. } => *http2,
            Connector::Unreachable => false,
        }
    }

    /// Whether connections made by `other` are as good as this one's: the
    /// same address and protocol, and for TLS the same name and the same
    /// roots, client certificate and key. A reload keeps a shard's pooled
    /// connections only then.
    pub(crate) fn same_as(&self, other: &Connector) -> bool {
        match (self, other) {
            (
                Connector::Tcp {
                    address: a,
                    http2: http2_a,
                },
                Connector::Tcp {
                    address: b,
                    http2: http2_b,
                },
            ) => a == b && http2_a == http2_b,
            (
                Connector::Tls {
                    address: a,
                    server_name: name_a,
                    settings: settings_a,
                    http2: http2_a,
                    ..
                },
                Connector::Tls {
                    address: b,
                    server_name: name_b,
                    settings: settings_b,
                    http2: http2_b,
                    ..
                },
            ) => a == b && name_a == name_b && http2_a == http2_b && settings_a.same_as(settings_b),
            (Connector::Unreachable, Connector::Unreachable) => true,
            _ => false,
        }
    }

    /// A new connection, TLS handshake included, by `deadline`; `None` when
    /// it cannot be made (refused, unreachable, out of time, or a handshake
    /// that failed).
    pub(crate) async fn connect(&self, deadline: Instant) -> Option<Transport> {
        match self {
            Connector::Tcp { address, .. } => {
                let stream = tokio::time::timeout_at(deadline, tcp(address))
                    .await
                    .ok()??;
                Some(Transport::Tcp(stream))
            }
            Connector::Tls {
                address,
                server_name,
                http2,
                client,
                ..
            } => {
                let handshake = async {
                    let stream = tcp(address).await?;
                    let connector = TlsConnector::from(Arc::clone(client));
                    match connector.connect(server_name.clone(), stream).await {
                        // An h2 shard that did not choose h2 would read the
                        // connection preface as a broken HTTP/1.1 request.
                        Ok(stream)
                            if *http2 && stream.get_ref().1.alpn_protocol() != Some(ALPN_H2) =>
                        {
                            tracing::warn!(
                                address,
                                ?server_name,
                                "a shard configured as protocol = \"h2\" did not negotiate h2 by ALPN"
                            );
                            None
                        }
                        Ok(stream) => Some(Transport::Tls(Box::new(stream))),
                        Err(error) => {
                            self.tls_failed(&error);
                            None
                        }
                    }
                };
                tokio::time::timeout_at(deadline, handshake).await.ok()?
            }
            Connector::Unreachable => None,
        }
    }
}

/// The ALPN protocol id of HTTP/2 over TLS.
const ALPN_H2: &[u8] = b"h2";

/// A TCP connection to `address`.
async fn tcp(address: &str) -> Option<TcpStream> {
    let stream = TcpStream::connect(address).await.ok()?;
    // Requests are written whole: no need to wait for more.
    let _ = stream.set_nodelay(true);
    Some(stream)
}

/// A certificate one side refused, as the TLS layer reports it: the
/// shard's (from another CA, for another name, expired) or the gateway's
/// (the shard's alert). Worth a warning: a shard that cannot prove who it
/// is, or a trust setting that no longer fits the fleet.
fn refused_certificate(error: &io::Error) -> bool {
    use rustls::AlertDescription as Alert;
    let Some(error) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return false;
    };
    matches!(
        error,
        rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::AlertReceived(
                Alert::BadCertificate
                    | Alert::UnsupportedCertificate
                    | Alert::CertificateRevoked
                    | Alert::CertificateExpired
                    | Alert::CertificateUnknown
                    | Alert::UnknownCA
                    | Alert::AccessDenied
                    | Alert::CertificateRequired
            )
    )
}

impl Connector {
    /// Says why a TLS connection to the shard failed before it carried
    /// anything: a refused certificate as a warning, anything else (a
    /// connection that broke off, a peer that is not TLS) at debug level,
    /// since the attempt metrics count it as a connect failure like a
    /// refused connection.
    pub(crate) fn tls_failed(&self, error: &io::Error) {
        let (address, server_name) = match self {
            Connector::Tls {
                address,
                server_name,
                ..
            } => (address.as_str(), server_name),
            _ => return,
        };
        if refused_certificate(error) {
            tracing::warn!(address, ?server_name, %error, "a certificate was refused on a TLS connection to a shard");
        } else {
            tracing::debug!(address, ?server_name, %error, "the TLS handshake with a shard failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::GatewayConfig;
    use crate::config::writer::{GatewayToml, Shard};

    /// A CA certificate and its key, as PEM.
    fn ca() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    /// The connector of the one shard of a configuration written into
    /// `dir` with `extra` tables.
    fn connector(dir: &Path, shard: Shard, extra: &str) -> Connector {
        let path = GatewayToml::one_shard(shard, extra).write(dir).unwrap();
        let config = GatewayConfig::load(&path).unwrap();
        let shard = &config.cells()[0].shards[0];
        Connector::for_shard(
            &shard.url,
            shard.server_name.as_ref(),
            config.upstream_tls(),
            ShardProtocol::Http1,
        )
    }

    #[test]
    fn urls_give_addresses_with_their_default_ports_and_names_for_tls() {
        let plain = Connector::for_url(&"http://shard.internal/api".parse().unwrap(), None, None);
        assert_eq!(plain.address(), Some("shard.internal:80"));
        // A port that does not parse is no reason to use 80 (or 443).
        for bad in [
            "http://127.0.0.1:99999",
            "http://127.0.0.1:notaport",
            "https://127.0.0.1:0",
        ] {
            let connector = Connector::for_url(&bad.parse().unwrap(), None, None);
            assert!(
                matches!(connector, Connector::Unreachable),
                "{bad}: {connector:?}"
            );
        }
        // Without TLS settings nobody could be verified: nothing is reached.
        let https: http::Uri = "https://[::1]/api".parse().unwrap();
        assert!(matches!(
            Connector::for_url(&https, None, None),
            Connector::Unreachable
        ));

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca().0).unwrap();
        let tls = "[upstream.tls]\nca_file = \"ca.pem\"\n";
        let Connector::Tls {
            address,
            server_name,
            ..
        } = connector(dir.path(), Shard::new("s0", "https://[::1]/api"), tls)
        else {
            panic!("an https:// shard is reached over TLS");
        };
        assert_eq!(address, "[::1]:443");
        assert_eq!(server_name, ServerName::try_from("::1").unwrap());
        let Connector::Tls { server_name, .. } = connector(
            dir.path(),
            Shard::new("s0", "https://10.0.0.1:9443").with_server_name("s0.shards.internal"),
            tls,
        ) else {
            panic!("an https:// shard is reached over TLS");
        };
        assert_eq!(
            server_name,
            ServerName::try_from("s0.shards.internal").unwrap()
        );
    }

    #[test]
    fn only_the_same_address_name_roots_and_client_certificate_reach_a_shard_the_same_way() {
        let dir = tempfile::tempdir().unwrap();
        let (ca_pem, ca_key) = ca();
        std::fs::write(dir.path().join("ca.pem"), &ca_pem).unwrap();
        let tls = "[upstream.tls]\nca_file = \"ca.pem\"\n";
        let shard = || Shard::new("s0", "https://127.0.0.1:9443").with_server_name("s0.internal");
        let reach = |shard: Shard, extra: &str| connector(dir.path(), shard, extra);

        let first = reach(shard(), tls);
        // The same files, read again (as a reload does): the same.
        assert!(first.same_as(&reach(shard(), tls)));
        // Another name, port or scheme: not.
        let renamed = Shard::new("s0", "https://127.0.0.1:9443").with_server_name("s1.internal");
        assert!(!first.same_as(&reach(renamed, tls)));
        assert!(!first.same_as(&reach(
            Shard::new("s0", "https://127.0.0.1:9444").with_server_name("s0.internal"),
            tls
        )));
        assert!(!first.same_as(&reach(Shard::new("s0", "http://127.0.0.1:9443"), "")));
        // A client certificate: not. (The CA's own pair serves as one.)
        std::fs::write(dir.path().join("client.pem"), &ca_pem).unwrap();
        std::fs::write(dir.path().join("client.key"), &ca_key).unwrap();
        let with_client =
            format!("{tls}client_cert_file = \"client.pem\"\nclient_key_file = \"client.key\"\n");
        let client = reach(shard(), &with_client);
        assert!(!first.same_as(&client));
        assert!(client.same_as(&reach(shard(), &with_client)));
        // Its Debug names where and whom, never the key.
        let shown = format!("{client:?}");
        assert!(shown.contains("127.0.0.1:9443") && shown.contains("s0.internal"));
        let key_body = ca_key.lines().nth(1).unwrap();
        assert!(!shown.contains(key_body) && !shown.contains("PRIVATE"));
        // Another CA in the same file (a rotation): not.
        std::fs::write(dir.path().join("ca.pem"), ca().0).unwrap();
        assert!(!first.same_as(&reach(shard(), tls)));
    }
}
