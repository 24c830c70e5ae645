//! The TLS listener through real sockets with a real TLS client (rustls):
//! termination, SNI, certificate reload, client certificates as tenant
//! identity, and the handshakes a client can get wrong on purpose.

use std::path::PathBuf;
use std::time::Duration;

use rcgen::SanType;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::pki::{Ca, Leaf, client_config, connect};
use crate::util::{Fixture, Options, exchange, raw, read_while_open};

/// A gateway with a TLS listener (certificate for `localhost` from a
/// private CA), these lines added to `[tls]`, and these tables after it.
struct TlsGateway {
    fixture: Fixture,
    ca: Ca,
    /// Where the listener's certificate and key are (so a test can replace
    /// them and reload).
    cert_file: PathBuf,
    key_file: PathBuf,
    certs: tempfile::TempDir,
}

impl TlsGateway {
    async fn start(tls_lines: &str, tables: &str, options: Options) -> Self {
        let certs = tempfile::tempdir().unwrap();
        let ca = Ca::new("gateway test CA");
        let (cert_file, key_file) = ca
            .server(&["localhost", "127.0.0.1"])
            .write(certs.path(), "server");
        let extra = format!(
            "{}\n[tls]\nlisten = \"127.0.0.1:0\"\ncert_file = {cert_file:?}\nkey_file = {key_file:?}\n{tls_lines}\n{tables}\n",
            options.extra
        );
        let admin = format!("metrics_without_token = true\n{}", options.admin);
        let fixture = Fixture::start(Options {
            extra,
            admin,
            ..options
        })
        .await;
        Self {
            fixture,
            ca,
            cert_file,
            key_file,
            certs,
        }
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.fixture.running.tls_addr.expect("[tls] is configured")
    }

    /// A client that trusts the test CA.
    fn client(&self, identity: Option<&Leaf>) -> std::sync::Arc<rustls::ClientConfig> {
        client_config(&[self.ca.der()], identity, &[])
    }

    /// The certificate the listener presents for SNI `name`.
    async fn presented(
        &self,
        name: &str,
        roots: &[CertificateDer<'static>],
    ) -> CertificateDer<'static> {
        let stream = connect(self.addr(), name, client_config(roots, None, &[]))
            .await
            .unwrap();
        stream.get_ref().1.peer_certificates().unwrap()[0].clone()
    }

    /// `GET path` over a new TLS connection with `identity` and these
    /// header lines; status 0 when the connection failed.
    async fn get(&self, identity: Option<&Leaf>, headers: &[&str]) -> u16 {
        match connect(self.addr(), "localhost", self.client(identity)).await {
            Ok(mut stream) => {
                let mut lines = vec!["Host: localhost"];
                lines.extend_from_slice(headers);
                exchange(&mut stream, &raw("GET /tls HTTP/1.1", &lines, b""))
                    .await
                    .status
            }
            Err(_) => 0,
        }
    }

    fn key_line(&self, tenant: &str) -> String {
        format!("x-api-key: {}", self.fixture.api_key(tenant))
    }

    /// The backends' view of who sent requests: every `x-shuffle-tenant`.
    fn tenants_seen(&self) -> Vec<String> {
        self.fixture
            .backends
            .iter()
            .flat_map(|backend| backend.seen())
            .filter(|seen| seen.path == "/tls")
            .flat_map(|seen| {
                seen.header("x-shuffle-tenant")
                    .into_iter()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// `[auth.mtls]` trusting `ca`, tenants named by SPIFFE URI.
fn mtls_table(dir: &std::path::Path, ca: &Ca, mode: &str) -> String {
    let ca_file = dir.join("clients-ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    format!(
        "[auth.mtls]\nca_file = {ca_file:?}\ntenant_from = \"uri_prefix:spiffe://example.org/tenant/\"\nclient_certificate = \"{mode}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_terminates_and_routes_inside_the_subset() {
    let gateway = TlsGateway::start("", "", Options::default()).await;
    let subset = gateway.fixture.subset_ids("tenant-1");
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let config = client_config(&[gateway.ca.der()], None, &[version]);
        let mut stream = connect(gateway.addr(), "localhost", config).await.unwrap();
        let session = stream.get_ref().1;
        assert_eq!(session.protocol_version(), Some(version.version));
        assert_eq!(session.alpn_protocol(), Some(&b"http/1.1"[..]));
        // Keep-alive: three requests on one connection.
        for _ in 0..3 {
            let request = raw(
                "GET /tls HTTP/1.1",
                &["Host: localhost", &gateway.key_line("tenant-1")],
                b"",
            );
            let response = exchange(&mut stream, &request).await;
            assert_eq!(response.status, 200, "{}", response.head);
            let answer: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
            assert!(subset.contains(&answer["shard"].as_str().unwrap().to_owned()));
        }
    }
    // The plaintext listener serves beside it.
    assert_eq!(gateway.fixture.get("tenant-1", "/").await.0, 200);
    let metrics = gateway.fixture.scrape().await;
    assert_eq!(
        metrics.value("shuffle_tls_handshakes_total", &[("outcome", "ok")]),
        2.0
    );
    // No credential over TLS is no credential.
    assert_eq!(gateway.get(None, &[]).await, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_picks_the_certificate_exact_names_before_wildcards() {
    let certs = tempfile::tempdir().unwrap();
    let other_ca = Ca::new("SNI CA");
    let api = other_ca.server(&["api.example.com", "special.tenants.example.com"]);
    let wildcard = other_ca.server(&["*.tenants.example.com"]);
    let special = other_ca.server(&["special.tenants.example.com"]);
    let (api_cert, api_key) = api.write(certs.path(), "api");
    let (wild_cert, wild_key) = wildcard.write(certs.path(), "wild");
    let (special_cert, special_key) = special.write(certs.path(), "special");
    let lines = format!(
        "[[tls.sni]]\nserver_names = [\"*.tenants.example.com\"]\ncert_file = {wild_cert:?}\nkey_file = {wild_key:?}\n\
         [[tls.sni]]\nserver_names = [\"API.example.com\", \"special.tenants.example.com\"]\ncert_file = {api_cert:?}\nkey_file = {api_key:?}\n\
         [[tls.sni]]\nserver_names = [\"special.tenants.example.com\"]\ncert_file = {special_cert:?}\nkey_file = {special_key:?}\n"
    );
    let gateway = TlsGateway::start(&lines, "", Options::default()).await;
    let roots = [gateway.ca.der(), other_ca.der()];
    assert_eq!(gateway.presented("api.example.com", &roots).await, api.cert);
    assert_eq!(
        gateway.presented("a.tenants.example.com", &roots).await,
        wildcard.cert
    );
    // An exact name wins over a wildcard listed before it; the first exact
    // entry wins over a later one.
    assert_eq!(
        gateway
            .presented("special.tenants.example.com", &roots)
            .await,
        api.cert
    );
    // Anything else (and a client that sends no SNI: an IP address) gets
    // the default certificate.
    let default = gateway.presented("localhost", &roots).await;
    assert_eq!(gateway.presented("127.0.0.1", &roots).await, default);
    assert_ne!(default, api.cert);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_the_certificate_and_established_connections_keep_working() {
    let gateway = TlsGateway::start("", "", Options::default()).await;
    let roots = [gateway.ca.der()];
    let before = gateway.presented("localhost", &roots).await;
    let mut established = connect(gateway.addr(), "localhost", gateway.client(None))
        .await
        .unwrap();
    let request = raw(
        "GET /tls HTTP/1.1",
        &["Host: localhost", &gateway.key_line("tenant-2")],
        b"",
    );
    assert_eq!(exchange(&mut established, &request).await.status, 200);

    let renewed = gateway.ca.server(&["localhost"]);
    std::fs::write(&gateway.cert_file, &renewed.cert_pem).unwrap();
    std::fs::write(&gateway.key_file, &renewed.key_pem).unwrap();
    gateway.fixture.running.gateway.reload(false).unwrap();

    let after = gateway.presented("localhost", &roots).await;
    assert_eq!(after, renewed.cert);
    assert_ne!(after, before);
    // The connection made before the reload goes on with its session.
    assert_eq!(exchange(&mut established, &request).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_certificate_is_refused_by_reload_and_the_old_one_keeps_serving() {
    let gateway = TlsGateway::start("", "", Options::default()).await;
    let roots = [gateway.ca.der()];
    let serving = gateway.presented("localhost", &roots).await;
    let good_cert = std::fs::read(&gateway.cert_file).unwrap();
    let good_key = std::fs::read_to_string(&gateway.key_file).unwrap();

    // Not PEM at all; a key that does not match the certificate; an
    // empty certificate file.
    let stranger = gateway.ca.server(&["localhost"]);
    let cases: [(&[u8], &str, &str); 3] = [
        (b"not a certificate", &good_key, "tls.cert_file"),
        (&good_cert, &stranger.key_pem, "tls.key_file"),
        (b"", &good_key, "tls.cert_file"),
    ];
    for (cert, key, names) in cases {
        std::fs::write(&gateway.cert_file, cert).unwrap();
        std::fs::write(&gateway.key_file, key).unwrap();
        let error = gateway
            .fixture
            .running
            .gateway
            .reload(false)
            .unwrap_err()
            .to_string();
        assert!(error.contains(names), "{error}");
        assert!(!error.contains("PRIVATE KEY"), "key material in: {error}");
        assert_eq!(gateway.presented("localhost", &roots).await, serving);
        assert_eq!(
            gateway.get(None, &[&gateway.key_line("tenant-1")]).await,
            200
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_names_the_tenant_and_reaches_only_its_subset() {
    let certs = tempfile::tempdir().unwrap();
    let clients = Ca::new("client CA");
    let mtls = mtls_table(certs.path(), &clients, "required");
    let gateway = TlsGateway::start("", &mtls, Options::default()).await;
    let tenant = "tenant-3";
    let identity = clients.spiffe_client(tenant);
    let subset = gateway.fixture.subset_ids(tenant);

    for _ in 0..6 {
        assert_eq!(gateway.get(Some(&identity), &[]).await, 200);
    }
    assert!(gateway.tenants_seen().iter().all(|seen| seen == tenant));
    for backend in &gateway.fixture.backends {
        if !backend.seen().iter().any(|seen| seen.path == "/tls") {
            continue;
        }
        assert!(
            subset.contains(&backend.id().to_owned()),
            "{}",
            backend.id()
        );
    }
    // A credential for the same tenant is fine; for another, 401.
    assert_eq!(
        gateway
            .get(Some(&identity), &[&gateway.key_line(tenant)])
            .await,
        200
    );
    assert_eq!(
        gateway
            .get(Some(&identity), &[&gateway.key_line("tenant-4")])
            .await,
        401
    );
    // A certificate for a tenant the tenants file does not have, and one
    // that names no tenant by the rule (a CN only).
    assert_eq!(
        gateway
            .get(Some(&clients.spiffe_client("nobody")), &[])
            .await,
        401
    );
    let unnamed = clients.client(Some(tenant), vec![]);
    assert_eq!(
        gateway
            .get(Some(&unnamed), &[&gateway.key_line(tenant)])
            .await,
        401
    );
    assert!(gateway.tenants_seen().iter().all(|seen| seen == tenant));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_the_ca_did_not_issue_or_that_are_out_of_date_are_refused() {
    let certs = tempfile::tempdir().unwrap();
    let clients = Ca::new("client CA");
    let mtls = mtls_table(certs.path(), &clients, "required");
    let gateway = TlsGateway::start("", &mtls, Options::default()).await;
    let tenant = "tenant-3";
    let uri = || {
        vec![SanType::URI(
            format!("spiffe://example.org/tenant/{tenant}")
                .as_str()
                .try_into()
                .unwrap(),
        )]
    };
    let wrong_ca = Ca::new("someone else's CA").spiffe_client(tenant);
    let expired = clients.client_with(None, uri(), |params| {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    });
    let not_yet = clients.client_with(None, uri(), |params| {
        params.not_before = rcgen::date_time_ymd(2090, 1, 1);
        params.not_after = rcgen::date_time_ymd(2091, 1, 1);
    });
    let key = gateway.key_line(tenant);
    for (what, identity) in [
        ("wrong CA", Some(&wrong_ca)),
        ("expired", Some(&expired)),
        ("not yet valid", Some(&not_yet)),
        ("none, where one is required", None),
    ] {
        // With a valid API key too: the handshake itself refuses.
        assert_eq!(gateway.get(identity, &[&key]).await, 0, "{what}");
    }
    assert!(gateway.tenants_seen().is_empty());
    let metrics = gateway.fixture.scrape().await;
    assert_eq!(
        metrics.value("shuffle_tls_handshakes_total", &[("outcome", "failed")]),
        4.0
    );

    // Removing the tenant from the tenants file revokes its certificate.
    let good = clients.spiffe_client(tenant);
    assert_eq!(gateway.get(Some(&good), &[]).await, 200);
    let dir = gateway.fixture.dir.path();
    let tenants = std::fs::read_to_string(dir.join("tenants.toml")).unwrap();
    let without: String = tenants
        .split("[[tenants]]")
        .filter(|block| !block.contains(&format!("id = \"{tenant}\"")))
        .collect::<Vec<_>>()
        .join("[[tenants]]");
    std::fs::write(dir.join("tenants.toml"), without).unwrap();
    gateway.fixture.running.gateway.reload(false).unwrap();
    assert_eq!(gateway.get(Some(&good), &[]).await, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_optional_client_certificate_leaves_room_for_api_keys() {
    let certs = tempfile::tempdir().unwrap();
    let clients = Ca::new("client CA");
    let mtls = mtls_table(certs.path(), &clients, "optional");
    let gateway = TlsGateway::start("", &mtls, Options::default()).await;
    assert_eq!(
        gateway.get(None, &[&gateway.key_line("tenant-5")]).await,
        200
    );
    assert_eq!(gateway.get(None, &[]).await, 401);
    assert_eq!(
        gateway
            .get(Some(&clients.spiffe_client("tenant-6")), &[])
            .await,
        200
    );
    // Optional is not "anything goes": a certificate from another CA is
    // still refused.
    let stranger = Ca::new("other").spiffe_client("tenant-6");
    assert_eq!(gateway.get(Some(&stranger), &[]).await, 0);
    let mut seen = gateway.tenants_seen();
    seen.sort();
    assert_eq!(seen, ["tenant-5", "tenant-6"]);
}

/// The fields a TLS-terminating proxy uses to tell a backend which client
/// certificate it verified, in the spellings a CGI-style backend reads
/// alike: each forged, as a client would.
const FORGED_CERTIFICATE_FIELDS: [&str; 17] = [
    "X-Forwarded-Client-Cert: Hash=0000;Subject=\"CN=victim\";URI=spiffe://example.org/tenant/tenant-1",
    "x_forwarded_client_cert: By=spiffe://forged",
    "X-Client-Cert: forged",
    "x-client-cert-chain: forged",
    "SSL-Client-Cert: forged",
    "ssl_client_verify: SUCCESS",
    "X-SSL-Client-Verify: SUCCESS",
    "X-SSL-Client-S-DN: CN=victim",
    "x_ssl_client_cert: forged",
    "X-ARR-ClientCert: forged",
    "X-Shuffle-Client-Identity: spiffe://example.org/tenant/tenant-1",
    "x-client-certificate: forged",
    "X-Forwarded-Tls-Client-Cert: forged",
    "X-Amzn-Mtls-Clientcert-Leaf: forged",
    "X-SSL-Cert: forged",
    "X-Client-Verify: SUCCESS",
    "X-Client-DN: CN=victim",
];

/// Issue 28: a client's own client-certificate fields never reach a shard,
/// over plaintext, TLS or mTLS, whatever the forwarding mode: only the
/// gateway vouches for a certificate, by `x-shuffle-tenant`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificate_fields_a_client_sends_never_reach_a_shard() {
    let certs = tempfile::tempdir().unwrap();
    let clients = Ca::new("client CA");
    let mtls = mtls_table(certs.path(), &clients, "optional");
    // `append` trusts a proxy in front with the client's address, never
    // with a certificate it did not see.
    let options = Options {
        extra: "[forwarding]\nx_forwarded_for = \"append\"\n".into(),
        ..Options::default()
    };
    let gateway = TlsGateway::start("", &mtls, options).await;
    let forged: Vec<&str> = FORGED_CERTIFICATE_FIELDS.to_vec();

    // Plaintext, with an API key.
    let key = gateway.key_line("tenant-2");
    let mut lines = vec!["Host: localhost", key.as_str()];
    lines.extend(&forged);
    let mut plain = TcpStream::connect(gateway.fixture.running.addr)
        .await
        .unwrap();
    let answer = exchange(&mut plain, &raw("GET /tls HTTP/1.1", &lines, b"")).await;
    assert_eq!(answer.status, 200);
    // TLS, with an API key.
    let mut with_key = vec![key.as_str()];
    with_key.extend(&forged);
    assert_eq!(gateway.get(None, &with_key).await, 200);
    // mTLS: the certificate names tenant-3.
    let identity = clients.spiffe_client("tenant-3");
    assert_eq!(gateway.get(Some(&identity), &forged).await, 200);

    let seen: Vec<_> = gateway
        .fixture
        .backends
        .iter()
        .flat_map(|backend| backend.seen())
        .filter(|seen| seen.path == "/tls")
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for request in &seen {
        for (name, value) in &request.headers {
            let read_as = name.replace('_', "-");
            let certificate_field = read_as.contains("client-cert")
                || read_as.starts_with("ssl-client-")
                || read_as.starts_with("x-ssl-client-")
                || read_as.starts_with("x-arr-")
                || read_as == "x-shuffle-client-identity";
            let forged = value.contains("forged") || value.contains("victim");
            assert!(
                !certificate_field && !forged,
                "{name}: {value} reached a shard"
            );
        }
    }
    let mut tenants = gateway.tenants_seen();
    tenants.sort();
    assert_eq!(tenants, ["tenant-2", "tenant-2", "tenant-3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_on_the_tls_port_and_tls_on_the_plaintext_port_get_nowhere() {
    let gateway = TlsGateway::start("", "", Options::default()).await;
    // HTTP on the TLS port: closed without an HTTP answer.
    let mut stream = TcpStream::connect(gateway.addr()).await.unwrap();
    let request = raw(
        "GET /tls HTTP/1.1",
        &["Host: localhost", &gateway.key_line("tenant-1")],
        b"",
    );
    stream.write_all(&request).await.unwrap();
    let mut received = Vec::new();
    assert!(read_while_open(&mut stream, &mut received, Duration::from_secs(10)).await);
    assert!(!received.starts_with(b"HTTP/"), "{received:?}");
    // TLS on the plaintext port: no handshake.
    let plain = gateway.fixture.running.addr;
    assert!(
        connect(plain, "localhost", gateway.client(None))
            .await
            .is_err()
    );
    assert!(gateway.tenants_seen().is_empty());
    // Both still serve.
    assert_eq!(
        gateway.get(None, &[&gateway.key_line("tenant-1")]).await,
        200
    );
    assert_eq!(gateway.fixture.get("tenant-1", "/").await.0, 200);
    let metrics = gateway.fixture.scrape().await;
    assert_eq!(
        metrics.value("shuffle_tls_handshakes_total", &[("outcome", "failed")]),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_that_never_finishes_is_closed_and_blocks_nobody() {
    let gateway = TlsGateway::start("handshake_timeout_ms = 300", "", Options::default()).await;
    // Silent, and a record header promising a ClientHello that never comes.
    let mut silent = TcpStream::connect(gateway.addr()).await.unwrap();
    let mut partial = TcpStream::connect(gateway.addr()).await.unwrap();
    partial
        .write_all(&[0x16, 0x03, 0x01, 0x40, 0x00, 0x01])
        .await
        .unwrap();
    // Others are served meanwhile.
    assert_eq!(
        gateway.get(None, &[&gateway.key_line("tenant-1")]).await,
        200
    );
    for stalled in [&mut silent, &mut partial] {
        let mut received = Vec::new();
        assert!(
            read_while_open(stalled, &mut received, Duration::from_secs(10)).await,
            "a stalled handshake was not closed"
        );
    }
    let metrics = gateway.fixture.scrape().await;
    assert_eq!(
        metrics.value("shuffle_tls_handshakes_total", &[("outcome", "timeout")]),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_holds_a_connection_slot() {
    let options = Options {
        extra: "[limits]\nmax_connections = 1\n".into(),
        ..Options::default()
    };
    let gateway = TlsGateway::start("handshake_timeout_ms = 60000", "", options).await;
    // The only slot, taken by a handshake that does not progress.
    let stalled = TcpStream::connect(gateway.addr()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waiting = tokio::spawn({
        let addr = gateway.addr();
        let config = gateway.client(None);
        async move { connect(addr, "localhost", config).await.map(|_| ()) }
    });
    // It cannot finish while the slot is held (a lower bound: a busy
    // machine only makes it later).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "a handshake ran beyond max_connections"
    );
    drop(stalled);
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the slot was not freed")
        .unwrap()
        .expect("the handshake after the slot was freed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_client_certificate_chain_is_refused_in_the_handshake() {
    let certs = tempfile::tempdir().unwrap();
    let clients = Ca::new("client CA");
    let mtls = mtls_table(certs.path(), &clients, "optional");
    let gateway = TlsGateway::start("", &mtls, Options::default()).await;
    // A leaf followed by 200 filler certificates: far over the 64 KiB a
    // handshake message may hold.
    let leaf = clients.spiffe_client("tenant-1");
    let filler = clients.client(Some(&"x".repeat(60)), vec![]);
    let mut chain = vec![leaf.cert.clone()];
    chain.extend(std::iter::repeat_n(filler.cert.clone(), 200));
    let mut store = rustls::RootCertStore::empty();
    store.add(gateway.ca.der()).unwrap();
    let key = {
        use rustls::pki_types::pem::PemObject;
        rustls::pki_types::PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap()
    };
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(store)
    .with_client_auth_cert(chain, key)
    .unwrap();
    let outcome = async {
        let mut stream = connect(gateway.addr(), "localhost", std::sync::Arc::new(config)).await?;
        stream
            .write_all(b"GET /tls HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await?;
        let mut byte = [0_u8; 1];
        stream.read(&mut byte).await
    };
    let outcome = tokio::time::timeout(Duration::from_secs(10), outcome)
        .await
        .expect("neither refused nor answered");
    assert!(!matches!(outcome, Ok(1)), "an oversized chain was served");
    assert!(gateway.tenants_seen().is_empty());
    assert_eq!(
        gateway.get(None, &[&gateway.key_line("tenant-1")]).await,
        200
    );
    drop(gateway.certs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_resume_and_keep_resuming_across_a_reload() {
    let gateway = TlsGateway::start("", "", Options::default()).await;
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        // One client configuration keeps its session store between
        // connections, as a real client's does.
        let config = client_config(&[gateway.ca.der()], None, &[version]);
        let kind = |stream: &tokio_rustls::client::TlsStream<TcpStream>| {
            stream.get_ref().1.handshake_kind()
        };
        let request = raw(
            "GET /tls HTTP/1.1",
            &["Host: localhost", &gateway.key_line("tenant-1")],
            b"",
        );
        let mut first = connect(gateway.addr(), "localhost", config.clone())
            .await
            .unwrap();
        // TLS 1.3 tickets arrive after the handshake: one exchange reads them.
        assert_eq!(exchange(&mut first, &request).await.status, 200);
        assert_eq!(kind(&first), Some(rustls::HandshakeKind::Full));
        let mut second = connect(gateway.addr(), "localhost", config.clone())
            .await
            .unwrap();
        assert_eq!(exchange(&mut second, &request).await.status, 200);
        assert_eq!(
            kind(&second),
            Some(rustls::HandshakeKind::Resumed),
            "{version:?}"
        );
        gateway.fixture.running.gateway.reload(false).unwrap();
        let mut third = connect(gateway.addr(), "localhost", config).await.unwrap();
        assert_eq!(exchange(&mut third, &request).await.status, 200);
        assert_eq!(
            kind(&third),
            Some(rustls::HandshakeKind::Resumed),
            "{version:?} after a reload"
        );
    }
}

/// Connects tonic to the gateway's TLS listener with `config` (ALPN `h2`),
/// whatever URI it is given: a client certificate without tonic's own TLS.
#[derive(Clone)]
struct TlsConnector {
    addr: std::net::SocketAddr,
    config: std::sync::Arc<rustls::ClientConfig>,
}

impl tonic::codegen::Service<http::Uri> for TlsConnector {
    type Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let (addr, config) = (self.addr, std::sync::Arc::clone(&self.config));
        Box::pin(async move {
            let stream = connect(addr, "localhost", config).await?;
            Ok(hyper_util::rt::TokioIo::new(stream))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_over_h2_takes_its_tenant_from_the_client_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let clients = Ca::new("client CA");
    let mtls = mtls_table(certs.path(), &clients, "required");
    let gateway = TlsGateway::start("", &mtls, Options::default()).await;
    let tenant = "tenant-3";
    let mut config = (*gateway.client(Some(&clients.spiffe_client(tenant)))).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = TlsConnector {
        addr: gateway.addr(),
        config: std::sync::Arc::new(config),
    };
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(connector)
        .await
        .unwrap();
    let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
    let call = |metadata: Option<(&'static str, String)>| {
        let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        });
        if let Some((name, value)) = metadata {
            request.metadata_mut().insert(name, value.parse().unwrap());
        }
        request
    };
    // The test shards speak HTTP/1.1 JSON, not gRPC: what matters is who
    // the call reached them as, not the answer.
    let _ = client.check(call(None)).await;
    let reached: Vec<_> = gateway
        .fixture
        .backends
        .iter()
        .flat_map(|backend| backend.seen())
        .filter(|seen| seen.path == "/grpc.health.v1.Health/Check")
        .collect();
    assert_eq!(reached.len(), 1, "the call reached one shard");
    assert_eq!(reached[0].header("x-shuffle-tenant"), vec![tenant]);
    // A credential in metadata naming another tenant: refused as a gRPC
    // client reads it, and routed nowhere.
    let other = gateway.fixture.api_key("tenant-4").to_owned();
    let status = client
        .check(call(Some(("x-api-key", other))))
        .await
        .expect_err("a certificate and a credential naming different tenants");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    let reached = gateway
        .fixture
        .backends
        .iter()
        .map(|backend| backend.seen().len())
        .sum::<usize>();
    assert_eq!(reached, 1, "the refused call reached no shard");
}

/// One `GET /tls` through `openssl s_client` (a client the gateway's own
/// TLS stack did not write) at `version` (`-tls1_3`, `-tls1_2`), with
/// `extra` arguments (`-sess_out`, `-sess_in`, `-cert`…): its whole output.
async fn s_client(
    addr: std::net::SocketAddr,
    server_ca: &std::path::Path,
    version: &str,
    extra: Vec<String>,
) -> String {
    let mut args: Vec<String> = vec![
        "s_client".into(),
        "-connect".into(),
        addr.to_string(),
        "-servername".into(),
        "localhost".into(),
        "-CAfile".into(),
        server_ca.display().to_string(),
        version.into(),
        "-ign_eof".into(),
    ];
    args.extend(extra);
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new("openssl")
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("openssl is installed");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"GET /tls HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap();
        // The gateway closes after its answer (or the handshake fails):
        // openssl then exits. The deadline only bounds a hang.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "openssl s_client hung"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let output = child.wait_with_output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
    .await
    .unwrap()
}

/// Issue 28: a TLS session (a TLS 1.2 session id or ticket, a TLS 1.3
/// ticket) is resumed only under the client CAs and certificates it was
/// issued under. After `auth.mtls.ca_file` is replaced and reloaded, a
/// session from a certificate of the old CA is not resumed, so the client
/// must show a certificate the new CA issued, and is not served as the
/// tenant; a reload that changes nothing keeps resumption working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_ca_change_ends_resumption_of_sessions_issued_before_it() {
    let certs = tempfile::tempdir().unwrap();
    let old_ca = Ca::new("client CA");
    let mtls = mtls_table(certs.path(), &old_ca, "required");
    let gateway = TlsGateway::start("", &mtls, Options::default()).await;
    let dir = certs.path();
    let server_ca = dir.join("server-ca.pem");
    std::fs::write(&server_ca, gateway.ca.pem()).unwrap();
    let (cert, key) = old_ca.spiffe_client("tenant-3").write(dir, "tenant-3");
    let ca_file = dir.join("clients-ca.pem");
    let served = || gateway.tenants_seen().len();

    for version in ["-tls1_3", "-tls1_2"] {
        std::fs::write(&ca_file, old_ca.pem()).unwrap();
        gateway.fixture.running.gateway.reload(false).unwrap();
        let session = dir.join(format!("session{version}.pem"));
        let with =
            |flag: &str, path: &std::path::Path| vec![flag.to_owned(), path.display().to_string()];
        let mut first = with("-cert", &cert);
        first.extend(with("-key", &key));
        first.extend(with("-sess_out", &session));
        let output = s_client(gateway.addr(), &server_ca, version, first).await;
        assert!(output.contains("HTTP/1.1 200"), "{version}: {output}");
        assert!(session.exists(), "{version}: no session written: {output}");

        // Resumed without showing the certificate again: served as the
        // tenant the session's certificate named, across a reload that
        // changes nothing.
        let before = served();
        let output = s_client(
            gateway.addr(),
            &server_ca,
            version,
            with("-sess_in", &session),
        )
        .await;
        assert!(output.contains("Reused,"), "{version}: {output}");
        assert!(output.contains("HTTP/1.1 200"), "{version}: {output}");
        gateway.fixture.running.gateway.reload(false).unwrap();
        let output = s_client(
            gateway.addr(),
            &server_ca,
            version,
            with("-sess_in", &session),
        )
        .await;
        assert!(
            output.contains("Reused,"),
            "{version} after a reload: {output}"
        );
        assert!(output.contains("HTTP/1.1 200"), "{version}: {output}");
        assert_eq!(served(), before + 2);

        // The operator replaces the client CA: the old session is not
        // resumed, and without a certificate the new CA issued nobody is
        // served.
        std::fs::write(&ca_file, Ca::new("new client CA").pem()).unwrap();
        gateway.fixture.running.gateway.reload(false).unwrap();
        let output = s_client(
            gateway.addr(),
            &server_ca,
            version,
            with("-sess_in", &session),
        )
        .await;
        assert!(
            !output.contains("Reused,"),
            "{version}: resumed after a CA change: {output}"
        );
        assert!(
            !output.contains("HTTP/1.1 200"),
            "{version}: served after a CA change: {output}"
        );
        // Nor with the old certificate in a full handshake.
        let mut again = with("-cert", &cert);
        again.extend(with("-key", &key));
        let output = s_client(gateway.addr(), &server_ca, version, again).await;
        assert!(!output.contains("HTTP/1.1 200"), "{version}: {output}");
        assert_eq!(served(), before + 2, "{version}");
    }
}
