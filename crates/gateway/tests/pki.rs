//! Certificates made at test time (nothing secret is committed): a private
//! CA, the leaves it signs, and TLS clients that trust it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A private certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its private key.
pub struct Leaf {
    pub cert: CertificateDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Self { issuer }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// Signs a leaf with `params`.
    pub fn sign(&self, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert_pem: cert.pem(),
            cert: cert.der().clone(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn server(&self, names: &[&str]) -> Leaf {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate with these subject alternative names and CN.
    pub fn client(&self, cn: Option<&str>, sans: Vec<SanType>) -> Leaf {
        self.client_with(cn, sans, |_| {})
    }

    /// A client certificate, `adjust`ed before it is signed (validity…).
    pub fn client_with(
        &self,
        cn: Option<&str>,
        sans: Vec<SanType>,
        adjust: impl FnOnce(&mut CertificateParams),
    ) -> Leaf {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params.subject_alt_names = sans;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        adjust(&mut params);
        self.sign(params)
    }

    /// A client whose SPIFFE-style URI SAN names `tenant`.
    pub fn spiffe_client(&self, tenant: &str) -> Leaf {
        let uri = format!("spiffe://example.org/tenant/{tenant}");
        self.client(None, vec![SanType::URI(uri.as_str().try_into().unwrap())])
    }
}

impl Leaf {
    /// Writes `NAME.pem` and `NAME.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (cert, key)
    }

    fn key_der(&self) -> PrivateKeyDer<'static> {
        use rustls::pki_types::pem::PemObject;
        PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A TLS client trusting `roots`, presenting `identity` when given, offering
/// these protocol versions (both when empty) and ALPN `http/1.1`.
pub fn client_config(
    roots: &[CertificateDer<'static>],
    identity: Option<&Leaf>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add(root.clone()).unwrap();
    }
    let versions = if versions.is_empty() {
        rustls::ALL_VERSIONS
    } else {
        versions
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(store);
    let mut config = match identity {
        Some(leaf) => builder
            .with_client_auth_cert(vec![leaf.cert.clone()], leaf.key_der())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A TLS connection to `addr` with SNI `name`.
pub async fn connect(
    addr: std::net::SocketAddr,
    name: &str,
    config: Arc<ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_owned()).unwrap();
    TlsConnector::from(config).connect(name, tcp).await
}
