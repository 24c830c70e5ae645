//! The TLS sections of the configuration: the TLS listener (`[tls]` and
//! `[[tls.sni]]`), client certificates as tenant identity (`[auth.mtls]`)
//! and TLS toward shards (`[upstream.tls]`, a shard's `server_name`).
//!
//! Certificates and keys are read and checked here, when the file is
//! loaded: a missing file, a chain that does not parse, or a key that does
//! not match its certificate is a [`ConfigError`](super::ConfigError)
//! naming the key, so a reload with a broken certificate is refused and the
//! old one keeps serving. The rustls configurations are built here too,
//! with ring as the only crypto provider, TLS 1.2 and 1.3 only.
//!
//! Nothing here prints key material: the settings' `Debug` shows file
//! paths and names, and errors name files, never their contents.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::{
    ClientHello, ProducesTickets, ResolvesServerCert, ServerSessionMemoryCache,
    WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;
use sha2::{Digest, Sha256};

// ---- The file as written -------------------------------------------------

/// `[tls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    listen: String,
    cert_file: String,
    key_file: String,
    handshake_timeout_ms: Option<u64>,
    #[serde(default)]
    sni: Vec<RawSni>,
}

/// One `[[tls.sni]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSni {
    server_names: Vec<String>,
    cert_file: String,
    key_file: String,
}

/// `[auth.mtls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMtls {
    ca_file: String,
    tenant_from: String,
    client_certificate: Option<ClientCertificate>,
}

/// `[upstream]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUpstream {
    tls: Option<RawUpstreamTls>,
}

/// `[upstream.tls]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstreamTls {
    ca_file: Option<String>,
    client_cert_file: Option<String>,
    client_key_file: Option<String>,
}

// ---- Validated settings ---------------------------------------------------

/// The TLS listener.
#[derive(Clone)]
#[non_exhaustive]
pub struct TlsSettings {
    /// Where the TLS listener binds.
    pub listen: SocketAddr,
    /// How long a client may take to finish its handshake.
    pub handshake_timeout: Duration,
    /// The certificate files, for operators (`Debug`).
    files: Vec<PathBuf>,
    /// The names the listener's certificates serve, for the start-up log:
    /// the default certificate's DNS and IP names (its CN when it has no
    /// such name), then each `[[tls.sni]]` entry's `server_names`.
    names: Vec<String>,
    /// What the listener serves with.
    pub(crate) server: Arc<ServerConfig>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("listen", &self.listen)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("files", &self.files)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// Whether a client must present a certificate on the TLS listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientCertificate {
    /// Every TLS client presents a certificate the CA issued; it names the
    /// tenant.
    Required,
    /// A client may present one (then it names the tenant) or authenticate
    /// with an API key or a JWT instead.
    Optional,
    /// Certificates are not asked for.
    Off,
}

/// How a verified client certificate names its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantFrom {
    /// The first URI SAN that starts with this prefix; the tenant is the
    /// rest (`spiffe://example.org/tenant/` + tenant).
    UriPrefix(String),
    /// The first DNS SAN, whole.
    DnsSan,
    /// The subject's common name.
    SubjectCn,
}

/// Client certificates as tenant identity (`[auth.mtls]`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MtlsSettings {
    /// Whether a certificate is required, optional or not asked for.
    pub client_certificate: ClientCertificate,
    /// Where a certificate names its tenant.
    pub tenant_from: TenantFrom,
    /// The CA file client certificates must chain to.
    pub ca_file: PathBuf,
}

/// TLS toward `https://` shards.
#[derive(Clone)]
#[non_exhaustive]
pub struct UpstreamTlsSettings {
    /// The CA file shards' certificates must chain to; `None` is the
    /// system's trust store.
    pub ca_file: Option<PathBuf>,
    /// Whether the gateway presents a client certificate to shards.
    pub client_certificate: bool,
    /// What connections to shards are made with.
    pub(crate) client: Arc<ClientConfig>,
    /// SHA-256 over everything `client` was built from (the trusted roots,
    /// the client certificate chain and its key), so that a reload can tell
    /// whether connections made before it may still be reused: a rustls
    /// configuration cannot be compared, and a rotated file keeps its path.
    fingerprint: [u8; 32],
}

impl UpstreamTlsSettings {
    /// Whether `other` was built from the same roots, certificate and key.
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
    }
}

impl fmt::Debug for UpstreamTlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTlsSettings")
            .field("ca_file", &self.ca_file)
            .field("client_certificate", &self.client_certificate)
            .finish_non_exhaustive()
    }
}

/// A problem with one key: its dotted name and what is wrong.
pub(crate) type Problem = (String, String);

/// The default `tls.handshake_timeout_ms`.
const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The crypto provider every configuration here is built with.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}

/// Reads a PEM certificate chain, leaf first.
fn read_chain(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, Problem> {
    let chain = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|error| {
            (
                key.to_owned(),
                format!("cannot read certificates from {}: {error}", path.display()),
            )
        })?;
    if chain.is_empty() {
        return Err((
            key.to_owned(),
            format!(
                "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                path.display()
            ),
        ));
    }
    Ok(chain)
}

/// Reads a PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
fn read_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, Problem> {
    // The underlying error never quotes the file's contents.
    PrivateKeyDer::from_pem_file(path).map_err(|error| {
        (
            key.to_owned(),
            format!(
                "cannot read a PEM private key (PKCS#8, RSA or EC) from {}: {error}",
                path.display()
            ),
        )
    })
}

/// A certificate chain and its key, checked to belong together.
fn certified_key(
    section: &str,
    cert_file: &Path,
    key_file: &Path,
) -> Result<Arc<CertifiedKey>, Problem> {
    let chain = read_chain(&format!("{section}.cert_file"), cert_file)?;
    let key = read_key(&format!("{section}.key_file"), key_file)?;
    CertifiedKey::from_der(chain, key, &provider())
        .map(Arc::new)
        .map_err(|error| {
            (
                format!("{section}.key_file"),
                format!(
                    "{} does not serve {}: {error}",
                    key_file.display(),
                    cert_file.display()
                ),
            )
        })
}

/// The roots in a PEM CA file.
fn read_roots(key: &str, path: &Path) -> Result<RootCertStore, Problem> {
    roots_of(key, path, read_chain(key, path)?)
}

/// The roots in `chain`, read from `path`.
fn roots_of(
    key: &str,
    path: &Path,
    chain: Vec<CertificateDer<'static>>,
) -> Result<RootCertStore, Problem> {
    let mut roots = RootCertStore::empty();
    for cert in chain {
        roots.add(cert).map_err(|error| {
            (
                key.to_owned(),
                format!("{}: not a CA certificate: {error}", path.display()),
            )
        })?;
    }
    Ok(roots)
}

/// Session resumption state (the session cache for TLS 1.2 session ids and
/// the ticket keys for both versions) shared by every configuration the
/// process builds under the same `binding`, so that a reload that changes
/// nothing a session vouches for does not turn every resumption into a
/// full handshake.
///
/// A resumed session is not verified again: it carries the client
/// certificate it was first verified with. So sessions are bound to what
/// they were issued under ([`TlsBinding`]: the client-certificate mode,
/// the client CAs and the listener's certificates). A reload that changes
/// any of them builds a fresh cache and fresh ticket keys, and no session
/// or ticket from before can be resumed: the client does a full handshake
/// and its certificate is judged by the CAs in force. Entries live only
/// as long as a configuration that uses them (a weak reference here), so
/// two gateways in one process (tests) keep theirs apart too.
fn resumption(
    binding: &TlsBinding,
) -> (
    Arc<ServerSessionMemoryCache>,
    Option<Arc<dyn ProducesTickets>>,
) {
    type Shared = (
        std::sync::Weak<ServerSessionMemoryCache>,
        Option<std::sync::Weak<dyn ProducesTickets>>,
    );
    static BY_BINDING: Mutex<Vec<([u8; 32], Shared)>> = Mutex::new(Vec::new());
    let mut shared = BY_BINDING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // Those no configuration holds any more are gone.
    shared.retain(|(_, (sessions, _))| sessions.strong_count() > 0);
    if let Some((_, (sessions, ticketer))) = shared.iter().find(|(key, _)| *key == binding.0)
        && let Some(sessions) = sessions.upgrade()
    {
        // The configuration that holds the cache holds the ticketer too.
        let ticketer = ticketer.as_ref().and_then(std::sync::Weak::upgrade);
        return (sessions, ticketer);
    }
    let sessions = ServerSessionMemoryCache::new(4096);
    let ticketer = rustls::crypto::ring::Ticketer::new().ok();
    shared.retain(|(key, _)| *key != binding.0);
    shared.push((
        binding.0,
        (
            Arc::downgrade(&sessions),
            ticketer.as_ref().map(Arc::downgrade),
        ),
    ));
    (sessions, ticketer)
}

/// What a resumed TLS session vouches for, as a digest: the
/// client-certificate mode, the client CAs' certificates, and every
/// certificate the listener serves. Two configurations with the same
/// binding may resume each other's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TlsBinding([u8; 32]);

impl TlsBinding {
    fn new(
        client_certificate: ClientCertificate,
        client_cas: &[CertificateDer<'_>],
        served: &[&CertifiedKey],
    ) -> Self {
        let mut digest = Sha256::new();
        let mut field = |tag: &[u8], bytes: &[u8]| {
            // Lengths keep the fields apart.
            digest.update(tag);
            digest.update((bytes.len() as u64).to_be_bytes());
            digest.update(bytes);
        };
        field(
            b"mode",
            match client_certificate {
                ClientCertificate::Required => b"required",
                ClientCertificate::Optional => b"optional",
                ClientCertificate::Off => b"off",
            },
        );
        for ca in client_cas {
            field(b"ca", ca.as_ref());
        }
        for key in served {
            for certificate in &key.cert {
                field(b"served", certificate.as_ref());
            }
        }
        Self(digest.finalize().into())
    }
}

/// The TLS listener's settings, with the client verifier `[auth.mtls]` asks
/// for, offering `h2` by ALPN when `http2` is on.
pub(crate) fn tls_settings(
    raw: RawTls,
    mtls: Option<&MtlsSettings>,
    http2: bool,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<TlsSettings, Problem> {
    let problem = |key: &str, text: String| (key.to_owned(), text);
    let listen = raw.listen.parse().map_err(|_| {
        problem(
            "tls.listen",
            format!(
                "{:?} is not an address; write IP:PORT, e.g. \"127.0.0.1:8443\"",
                raw.listen
            ),
        )
    })?;
    let handshake_timeout = match raw.handshake_timeout_ms {
        None => DEFAULT_HANDSHAKE_TIMEOUT,
        Some(ms @ 1..=60_000) => Duration::from_millis(ms),
        Some(ms) => {
            return Err(problem(
                "tls.handshake_timeout_ms",
                format!("{ms} is out of range; use 1 to 60000"),
            ));
        }
    };
    let mut files = vec![resolve(&raw.cert_file), resolve(&raw.key_file)];
    let default = certified_key("tls", &files[0], &files[1])?;
    let mut names = default.cert.first().map(names_in).unwrap_or_default();
    let mut by_name = Vec::new();
    for (index, sni) in raw.sni.into_iter().enumerate() {
        let section = format!("tls.sni[{index}]");
        if sni.server_names.is_empty() {
            return Err(problem(
                &format!("{section}.server_names"),
                "lists no name; add the names this certificate serves".into(),
            ));
        }
        let (cert_file, key_file) = (resolve(&sni.cert_file), resolve(&sni.key_file));
        let certified = certified_key(&section, &cert_file, &key_file)?;
        files.extend([cert_file, key_file]);
        for name in sni.server_names {
            if !names.contains(&name) {
                names.push(name.clone());
            }
            let pattern = SniPattern::parse(&name).ok_or_else(|| {
                problem(
                    &format!("{section}.server_names"),
                    format!(
                        "{name:?} is not a host name or a wildcard of one label \
                         (e.g. \"api.example.com\", \"*.tenants.example.com\")"
                    ),
                )
            })?;
            by_name.push((pattern, Arc::clone(&certified)));
        }
    }

    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| problem("tls", error.to_string()))?;
    let mut client_cas = Vec::new();
    let mut client_certificate = ClientCertificate::Off;
    let builder = match mtls {
        Some(mtls) if mtls.client_certificate != ClientCertificate::Off => {
            client_certificate = mtls.client_certificate;
            let chain = read_chain("auth.mtls.ca_file", &mtls.ca_file)?;
            client_cas.clone_from(&chain);
            let roots = roots_of("auth.mtls.ca_file", &mtls.ca_file, chain)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = match mtls.client_certificate {
                ClientCertificate::Optional => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|error| problem("auth.mtls.ca_file", error.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let served: Vec<&CertifiedKey> = std::iter::once(&*default)
        .chain(by_name.iter().map(|(_, key)| &**key))
        .collect();
    let binding = TlsBinding::new(client_certificate, &client_cas, &served);
    let mut server = builder.with_cert_resolver(Arc::new(SniResolver { default, by_name }));
    // HTTP/2 first when it is on: a client offering both gets it.
    server.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    let (sessions, ticketer) = resumption(&binding);
    server.session_storage = sessions;
    if let Some(ticketer) = ticketer {
        server.ticketer = ticketer;
    }
    Ok(TlsSettings {
        listen,
        handshake_timeout,
        files,
        names,
        server: Arc::new(server),
    })
}

impl TlsSettings {
    /// The names the listener's certificates serve (see the field).
    pub fn certificate_names(&self) -> &[String] {
        &self.names
    }
}

/// The DNS and IP names a leaf certificate carries, or its CN when it
/// carries none; nothing when it does not parse (rustls accepted it, so
/// that would be a parser's disagreement, not worth refusing a start).
fn names_in(leaf: &CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    use x509_parser::prelude::{FromDer, X509Certificate};
    let Ok((_, certificate)) = X509Certificate::from_der(leaf.as_ref()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = certificate
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some((*dns).to_owned()),
                    GeneralName::IPAddress(bytes) => ip_text(bytes),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        names.extend(
            certificate
                .subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(str::to_owned),
        );
    }
    names
}

/// An IP address SAN's bytes as text (4 bytes IPv4, 16 bytes IPv6).
fn ip_text(bytes: &[u8]) -> Option<String> {
    let ip = match bytes.len() {
        4 => std::net::IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => std::net::IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
        _ => return None,
    };
    Some(ip.to_string())
}

/// `[auth.mtls]`, validated (its CA file is read when the listener's
/// configuration is built).
pub(crate) fn mtls_settings(
    raw: RawMtls,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<MtlsSettings, Problem> {
    let tenant_from = match raw.tenant_from.split_once(':') {
        Some(("uri_prefix", prefix)) if !prefix.is_empty() => {
            TenantFrom::UriPrefix(prefix.to_owned())
        }
        None if raw.tenant_from == "dns_san" => TenantFrom::DnsSan,
        None if raw.tenant_from == "subject_cn" => TenantFrom::SubjectCn,
        _ => {
            return Err((
                "auth.mtls.tenant_from".into(),
                format!(
                    "{:?} is not a rule; use \"uri_prefix:spiffe://example.org/tenant/\", \
                     \"dns_san\" or \"subject_cn\"",
                    raw.tenant_from
                ),
            ));
        }
    };
    let ca_file = resolve(&raw.ca_file);
    // Read now too, so that a missing CA file names its key even when no
    // TLS listener is configured.
    read_roots("auth.mtls.ca_file", &ca_file)?;
    Ok(MtlsSettings {
        client_certificate: raw
            .client_certificate
            .unwrap_or(ClientCertificate::Required),
        tenant_from,
        ca_file,
    })
}

/// `[upstream.tls]`, when any shard is `https://` or the section is
/// written; `None` otherwise (the system's trust store is not read for a
/// gateway that never uses it).
pub(crate) fn upstream_tls_settings(
    raw: RawUpstream,
    any_https_shard: bool,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<Option<UpstreamTlsSettings>, Problem> {
    let Some(raw) = raw
        .tls
        .or_else(|| any_https_shard.then(RawUpstreamTls::default))
    else {
        return Ok(None);
    };
    let problem = |key: &str, text: String| (key.to_owned(), text);
    let ca_file = raw.ca_file.as_deref().map(resolve);
    let mut fingerprint = Sha256::new();
    // Each part is length-prefixed, so two lists cannot hash alike by
    // moving bytes from one item to the next.
    let mut hash = |tag: &[u8], bytes: &[u8]| {
        fingerprint.update(tag);
        fingerprint.update((bytes.len() as u64).to_be_bytes());
        fingerprint.update(bytes);
    };
    let roots = match &ca_file {
        Some(path) => {
            let chain = read_chain("upstream.tls.ca_file", path)?;
            chain.iter().for_each(|cert| hash(b"root", cert));
            roots_of("upstream.tls.ca_file", path, chain)?
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            found.certs.iter().for_each(|cert| hash(b"root", cert));
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(problem(
                    "upstream.tls.ca_file",
                    "is not set and the system's trust store holds no certificate; \
                     set it to the CA file that issued your shards' certificates"
                        .into(),
                ));
            }
            roots
        }
    };
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|error| problem("upstream.tls.ca_file", error.to_string()))?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| problem("upstream.tls", error.to_string()))?
        .with_webpki_verifier(verifier);
    let client = match (&raw.client_cert_file, &raw.client_key_file) {
        (Some(cert_file), Some(key_file)) => {
            let chain = read_chain("upstream.tls.client_cert_file", &resolve(cert_file))?;
            let key = read_key("upstream.tls.client_key_file", &resolve(key_file))?;
            chain.iter().for_each(|cert| hash(b"chain", cert));
            hash(b"key", key.secret_der());
            builder.with_client_auth_cert(chain, key).map_err(|error| {
                problem(
                    "upstream.tls.client_key_file",
                    format!("does not serve upstream.tls.client_cert_file: {error}"),
                )
            })?
        }
        (None, None) => builder.with_no_client_auth(),
        (Some(_), None) | (None, Some(_)) => {
            return Err(problem(
                "upstream.tls",
                "client_cert_file and client_key_file go together; set both or neither".into(),
            ));
        }
    };
    let mut client = client;
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(UpstreamTlsSettings {
        ca_file,
        client_certificate: raw.client_cert_file.is_some(),
        client: Arc::new(client),
        fingerprint: fingerprint.finalize().into(),
    }))
}

/// TLS to a Redis store (`rediss://`): its certificate checked against the
/// CA file `ca_file` names (as `key`), or against the system's trust store.
pub(crate) fn store_tls(
    key: &str,
    ca_file: Option<PathBuf>,
) -> Result<super::store::StoreTls, Problem> {
    let roots = match &ca_file {
        Some(path) => read_roots(key, path)?,
        None => {
            let mut roots = RootCertStore::empty();
            let (added, _) =
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if added == 0 {
                return Err((
                    key.to_owned(),
                    "is not set and the system's trust store holds no certificate; \
                     set it to the CA file that issued the store's certificate"
                        .into(),
                ));
            }
            roots
        }
    };
    let client = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| (key.to_owned(), error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(super::store::StoreTls {
        ca_file,
        client: Arc::new(client),
    })
}

/// A shard's `server_name`: the name its certificate must carry (and the
/// SNI sent), when it differs from the URL's host.
pub(crate) fn server_name(text: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(text.to_owned())
        .map_err(|_| format!("{text:?} is not a DNS name or an IP address"))
}

// ---- Choosing a certificate by SNI ---------------------------------------

/// One `server_names` entry: a whole name or `*.` and a suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SniPattern {
    /// The name itself (lower case).
    Exact(String),
    /// Any one label before this suffix (lower case, with its dot).
    Wildcard(String),
}

impl SniPattern {
    fn parse(name: &str) -> Option<Self> {
        let name = name.to_ascii_lowercase();
        let valid = |host: &str| {
            !host.is_empty()
                && host.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
        };
        match name.strip_prefix("*.") {
            Some(suffix) if valid(suffix) => Some(SniPattern::Wildcard(format!(".{suffix}"))),
            Some(_) => None,
            None if valid(&name) => Some(SniPattern::Exact(name)),
            None => None,
        }
    }

    fn matches(&self, name: &str) -> bool {
        match self {
            SniPattern::Exact(exact) => exact.eq_ignore_ascii_case(name),
            SniPattern::Wildcard(suffix) => {
                name.len() > suffix.len()
                    && name.is_char_boundary(name.len() - suffix.len())
                    && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
                    && !name[..name.len() - suffix.len()].contains('.')
            }
        }
    }
}

/// Picks the certificate for a handshake: the first `[[tls.sni]]` entry
/// whose names match the client's SNI (exact names before wildcards), or
/// `[tls]`'s certificate.
struct SniResolver {
    default: Arc<CertifiedKey>,
    by_name: Vec<(SniPattern, Arc<CertifiedKey>)>,
}

impl fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.by_name.iter().map(|(pattern, _)| pattern).collect();
        f.debug_struct("SniResolver")
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

impl SniResolver {
    fn pick(&self, sni: Option<&str>) -> &Arc<CertifiedKey> {
        let Some(sni) = sni else {
            return &self.default;
        };
        let exact = self
            .by_name
            .iter()
            .find(|(pattern, _)| matches!(pattern, SniPattern::Exact(_)) && pattern.matches(sni));
        let wildcard = || {
            self.by_name.iter().find(|(pattern, _)| {
                matches!(pattern, SniPattern::Wildcard(_)) && pattern.matches(sni)
            })
        };
        exact
            .or_else(wildcard)
            .map_or(&self.default, |(_, key)| key)
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(self.pick(hello.server_name())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_patterns_match_one_label_under_a_wildcard() {
        let wildcard = SniPattern::parse("*.Tenants.Example.com").unwrap();
        assert!(wildcard.matches("a.tenants.example.com"));
        assert!(wildcard.matches("A.TENANTS.example.com"));
        assert!(!wildcard.matches("tenants.example.com"));
        assert!(!wildcard.matches("a.b.tenants.example.com"));
        assert!(!wildcard.matches("atenants.example.com"));
        let exact = SniPattern::parse("api.example.com").unwrap();
        assert!(exact.matches("API.example.com"));
        assert!(!exact.matches("x.api.example.com"));
        for bad in ["", "*.", "*", "a..b", "a.*.b", "*.*.b", "sp ace.com", "a/b"] {
            assert_eq!(SniPattern::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tenant_rules_parse_or_say_what_is_accepted() {
        let resolve = |file: &str| PathBuf::from(file);
        let raw = |rule: &str| RawMtls {
            ca_file: "/nonexistent/ca.pem".into(),
            tenant_from: rule.into(),
            client_certificate: None,
        };
        for bad in ["uri_prefix:", "cn", "dns_san:x", ""] {
            let (key, problem) = mtls_settings(raw(bad), &resolve).unwrap_err();
            assert_eq!(key, "auth.mtls.tenant_from");
            assert!(problem.contains("subject_cn"), "{problem}");
        }
        // A good rule gets as far as the CA file.
        let (key, problem) = mtls_settings(raw("subject_cn"), &resolve).unwrap_err();
        assert_eq!(key, "auth.mtls.ca_file");
        assert!(problem.contains("/nonexistent/ca.pem"), "{problem}");
    }
    /// A self-signed certificate (CA or server) and its key, as PEM.
    fn pem_pair(ca: bool) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        if ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[test]
    fn sessions_are_shared_only_under_the_same_client_cas_mode_and_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        let resolve = |file: &str| dir.path().join(file);
        let (server_cert, server_key) = pem_pair(false);
        write("server.pem", &server_cert);
        write("server.key", &server_key);
        write("ca.pem", &pem_pair(true).0);
        let build = |mode: ClientCertificate| {
            let raw = RawTls {
                listen: "127.0.0.1:0".into(),
                cert_file: "server.pem".into(),
                key_file: "server.key".into(),
                handshake_timeout_ms: None,
                sni: Vec::new(),
            };
            let mtls = MtlsSettings {
                client_certificate: mode,
                tenant_from: TenantFrom::SubjectCn,
                ca_file: dir.path().join("ca.pem"),
            };
            tls_settings(raw, Some(&mtls), false, &resolve).unwrap()
        };
        // The session cache a configuration resumes from, by address.
        let cache =
            |settings: &TlsSettings| Arc::as_ptr(&settings.server.session_storage).cast::<()>();
        let first = build(ClientCertificate::Required);
        // Read again, unchanged (a reload): the same sessions.
        let same = build(ClientCertificate::Required);
        assert_eq!(cache(&first), cache(&same));
        // Another mode, another CA, another certificate: fresh ones.
        let optional = build(ClientCertificate::Optional);
        assert_ne!(cache(&first), cache(&optional));
        write("ca.pem", &pem_pair(true).0);
        let new_ca = build(ClientCertificate::Required);
        assert_ne!(cache(&first), cache(&new_ca));
        let (server_cert, server_key) = pem_pair(false);
        write("server.pem", &server_cert);
        write("server.key", &server_key);
        let new_certificate = build(ClientCertificate::Required);
        assert_ne!(cache(&new_ca), cache(&new_certificate));
        // Once no configuration holds the old ones, they are gone.
        drop((first, same, optional));
        assert_eq!(
            cache(&build(ClientCertificate::Required)),
            cache(&new_certificate)
        );
    }
}
