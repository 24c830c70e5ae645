//! The client connection a request came on, as the request path needs it:
//! its address (formatted once for `x-forwarded-for`), its verified client
//! certificate, the API key it last authenticated, and whether it is TLS.

use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderValue;

use crate::trust::client_cert::CertificateTenant;
use crate::trust::headers;
use crate::trust::memo::KeyMemo;

/// The client connection a request came on, as the request path needs it.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// The client's address as an `x-forwarded-for` value, formatted once
    /// per connection rather than per request.
    pub forwarded_for: Option<HeaderValue>,
    /// What the connection's verified client certificate says about its
    /// tenant (TLS with `[auth.mtls]` only).
    pub certificate: Option<Arc<CertificateTenant>>,
    /// The API key the connection last authenticated (shared by the
    /// copies hyper's service makes of its connection's peer).
    pub(crate) keys: Arc<KeyMemo>,
    /// The connection is TLS (what a trace names as the URL's scheme).
    pub tls: bool,
}

impl Peer {
    /// The connection from `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            forwarded_for: headers::forwarded_for(addr.ip()),
            certificate: None,
            keys: Arc::default(),
            tls: false,
        }
    }

    /// The connection from `addr` that presented a verified client
    /// certificate.
    pub fn with_certificate(addr: SocketAddr, certificate: CertificateTenant) -> Self {
        Self {
            certificate: Some(Arc::new(certificate)),
            ..Self::new(addr)
        }
    }
}
