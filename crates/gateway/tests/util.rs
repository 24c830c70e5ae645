//! Test fixtures: a fleet of test backends, a gateway configured over them
//! with freshly generated keys, and an HTTP client.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use backend::Backend;
use bytes::Bytes;
use gateway::config::writer::{self as gateway_toml, GatewayToml, Shard, tenants_toml};
use gateway::runtime::{self, Running};
use gateway::state::ShardRuntime;
use gateway::{GatewayConfig, Snapshot};
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Knobs a test may turn; everything else has test-friendly defaults.
pub struct Options {
    pub shards: usize,
    pub tenants: usize,
    pub k: u32,
    /// Extra lines inside `[routing]`.
    pub routing: String,
    /// Extra top-level tables.
    pub extra: String,
    /// Shards served by something other than a [`Backend`] (a test's own
    /// server), as `(id, url)`; listed after the backends' shards.
    pub custom_shards: Vec<(String, String)>,
    /// Shards written as given (with a `server_name`, say), after
    /// `custom_shards`.
    pub shard_entries: Vec<Shard>,
    /// Lines inside `[health]`; keys it names replace the fast test
    /// defaults (e.g. `interval_ms = 60000` so that only passive ejection
    /// and the operator move shards).
    pub health: String,
    /// Lines inside `[outlier]`; keys it names replace the test defaults.
    pub outlier: String,
    /// Extra lines inside `[admin]` (which already binds 127.0.0.1:0).
    pub admin: String,
    /// When set, written to `admin.token` and named by `admin.token_file`.
    pub admin_token: Option<String>,
    /// When set, JWTs are accepted: a fresh 32-byte HS256 secret is written
    /// to `jwt.key`, and `[auth.jwt]` gets `algorithm = "HS256"`,
    /// `key_file = "jwt.key"` and these extra lines (`audience`, `issuer`,
    /// `tenant_claim`). Mint tokens with [`Fixture::mint_hs256`].
    pub jwt_hs256: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            shards: 8,
            tenants: 40,
            k: 2,
            routing: String::new(),
            extra: String::new(),
            custom_shards: Vec::new(),
            shard_entries: Vec::new(),
            health: String::new(),
            outlier: String::new(),
            admin: String::new(),
            admin_token: None,
            jwt_hs256: None,
        }
    }
}

/// A running gateway over a fleet of test backends.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub backends: Vec<Backend>,
    pub running: Running,
    /// (tenant id, API key)
    pub tenants: Vec<(String, String)>,
    pub client: Client<HttpConnector, Full<Bytes>>,
    /// The admin bearer token, when `Options::admin_token` set one.
    pub admin_token: Option<String>,
    /// The HS256 secret, when `Options::jwt_hs256` configured JWTs.
    pub jwt_secret: Option<Vec<u8>>,
}

// The gateway's own tests share these with the CLI's: `testkit` writes the
// configuration both run a gateway from.
pub use gateway::config::writer::{random_bytes, sha256_hex};

impl Fixture {
    pub async fn start(options: Options) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut backends = Vec::new();
        for i in 0..options.shards {
            backends.push(Backend::start(&format!("s{i}")).await.unwrap());
        }
        let tenants = gateway_toml::tenants(options.tenants);
        let shards = backends
            .iter()
            .enumerate()
            .map(|(i, b)| Shard::new(b.id(), b.url()).in_zone(["a", "b"][i % 2]))
            .chain(
                options
                    .custom_shards
                    .iter()
                    .map(|(id, url)| Shard::new(id, url)),
            )
            .chain(options.shard_entries.iter().cloned())
            .collect();
        // Test-friendly timeouts unless the test sets its own.
        let mut routing = String::new();
        for (key, default) in [("per_try_timeout_ms", 300), ("request_timeout_ms", 3000)] {
            if !options.routing.contains(key) {
                routing.push_str(&format!("{key} = {default}\n"));
            }
        }
        routing.push_str(&options.routing);
        let health = with_defaults(
            &options.health,
            &[
                ("interval_ms", "100"),
                ("timeout_ms", "100"),
                ("rise", "1"),
                ("fall", "2"),
            ],
        );
        let outlier = with_defaults(
            &options.outlier,
            &[
                ("consecutive_failures", "3"),
                ("base_ejection_ms", "400"),
                ("max_ejection_ms", "2000"),
            ],
        );
        let mut extra = options.extra.clone();
        let jwt_secret = options.jwt_hs256.as_ref().map(|lines| {
            let secret = random_bytes(32);
            std::fs::write(dir.path().join("jwt.key"), &secret).unwrap();
            extra.push_str(&format!(
                "\n[auth.jwt]\nalgorithm = \"HS256\"\nkey_file = \"jwt.key\"\n{lines}\n"
            ));
            secret
        });
        let path = GatewayToml {
            k: options.k,
            tables: vec![
                ("health".into(), health),
                ("routing".into(), routing),
                ("outlier".into(), outlier),
            ],
            admin_token: options.admin_token.clone(),
            admin: options.admin.clone(),
            extra,
            shards,
            tenants: tenants_toml(&tenants),
            ..GatewayToml::default()
        }
        .write(dir.path())
        .unwrap();
        let snapshot = Snapshot::load(&path, None).unwrap();
        let running = runtime::start(snapshot).await.unwrap();
        let client = Client::builder(TokioExecutor::new()).build_http();
        Fixture {
            dir,
            backends,
            running,
            tenants,
            client,
            admin_token: options.admin_token,
            jwt_secret,
        }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("gateway.toml")
    }

    pub fn config(&self) -> Arc<GatewayConfig> {
        Arc::clone(&self.running.gateway.snapshot().config)
    }

    /// The run-time state of the shard `id` of the cell `default`.
    pub fn shard(&self, id: &str) -> Arc<ShardRuntime> {
        Arc::clone(
            self.running
                .gateway
                .snapshot()
                .find_shard("default", id)
                .unwrap_or_else(|| panic!("no shard {id} in the cell default")),
        )
    }

    /// The shard ids of a tenant's subset, as the gateway's placement says.
    pub fn subset_ids(&self, tenant: &str) -> Vec<String> {
        // The tenant's own `k` or shards apply: they are the registry's,
        // not the placer's.
        let snapshot = self.running.gateway.snapshot();
        let (cell, subset) = snapshot.route(tenant);
        subset
            .iter()
            .map(|&index| {
                snapshot.config.cells()[cell].shards[index as usize]
                    .id
                    .clone()
            })
            .collect()
    }

    pub fn backend(&self, id: &str) -> &Backend {
        self.backends.iter().find(|b| b.id() == id).unwrap()
    }

    pub fn api_key(&self, tenant: &str) -> &str {
        &self.tenants.iter().find(|(id, _)| id == tenant).unwrap().1
    }

    /// Sends a request as `tenant` (by API key) with extra headers.
    pub async fn send(
        &self,
        tenant: Option<&str>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &'static [u8],
    ) -> (StatusCode, http::HeaderMap, Bytes) {
        let key = tenant.map(|tenant| self.api_key(tenant));
        send_to(
            &self.client,
            self.running.addr,
            method,
            path,
            key,
            headers,
            body,
        )
        .await
    }

    pub async fn get(&self, tenant: &str, path: &str) -> (StatusCode, Bytes) {
        let (status, _, body) = self.send(Some(tenant), "GET", path, &[], b"").await;
        (status, body)
    }

    pub fn total_backend_requests(&self) -> u64 {
        self.backends.iter().map(Backend::requests).sum()
    }
}

/// `lines`, preceded by a `key = value` line for each default whose key
/// `lines` does not set.
fn with_defaults(lines: &str, defaults: &[(&str, &str)]) -> String {
    let sets = |key: &str| {
        lines
            .lines()
            .any(|line| line.split('=').next().map(str::trim) == Some(key))
    };
    let mut out: String = defaults
        .iter()
        .filter(|(key, _)| !sets(key))
        .map(|(key, value)| format!("{key} = {value}\n"))
        .collect();
    out.push_str(lines);
    out.push('\n');
    out
}

/// Sends a request to `addr` (a gateway's admin listener, usually) with an
/// optional bearer token.
pub async fn request_to(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, http::HeaderMap, Bytes) {
    send_to(client, addr, method, path, None, headers, b"").await
}

/// A GET of `/` to `addr` (a gateway's listener) with `key` as the bearer
/// token: the status, headers and whole body of the answer.
pub async fn get_with_key(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    key: &str,
) -> (StatusCode, http::HeaderMap, Bytes) {
    send_to(client, addr, "GET", "/", Some(key), &[], b"").await
}

/// Sends `method` `path` with `headers` and `body` to `addr`, with `bearer`
/// as the bearer token when given; the status, headers and whole body of
/// the answer.
pub async fn send_to(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    headers: &[(&str, &str)],
    body: &'static [u8],
) -> (StatusCode, http::HeaderMap, Bytes) {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if let Some(bearer) = bearer {
        request = request.header("authorization", format!("Bearer {bearer}"));
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Full::new(Bytes::from_static(body))).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

impl Fixture {
    /// Sends a request to the admin listener, with `token` as the bearer
    /// token when given.
    pub async fn admin(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
    ) -> (StatusCode, http::HeaderMap, Bytes) {
        send_to(
            &self.client,
            self.running.admin_addr,
            method,
            path,
            token,
            &[],
            b"",
        )
        .await
    }

    /// An admin call with the fixture's token that must succeed; its JSON.
    pub async fn admin_json(&self, method: &str, path: &str) -> serde_json::Value {
        let token = self.admin_token.as_deref().expect("Options::admin_token");
        let (status, _, body) = self.admin(method, path, Some(token)).await;
        assert!(
            status.is_success(),
            "{method} {path}: {status} {}",
            String::from_utf8_lossy(&body)
        );
        serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {body:?}"))
    }
}

/// Each tenant's members, by shard id, as `running` places them now.
pub fn members_by_id(running: &Running, tenants: &[(String, String)]) -> Vec<BTreeSet<String>> {
    let snapshot = running.gateway.snapshot();
    tenants
        .iter()
        .map(|(tenant, _)| {
            let (cell, subset) = snapshot.route(tenant);
            subset
                .iter()
                .map(|&i| snapshot.config.cells()[cell].shards[i as usize].id.clone())
                .collect()
        })
        .collect()
}

/// The ids of the shards of the cell `default`, as placed now.
pub fn shard_ids(running: &Running) -> Vec<String> {
    let snapshot = running.gateway.snapshot();
    snapshot.config.cells()[0]
        .shards
        .iter()
        .map(|shard| shard.id.clone())
        .collect()
}

/// A shard's availability (`up`, `missing`, …) in the cell `default`, if
/// it is placed.
pub fn availability(running: &Running, id: &str) -> Option<&'static str> {
    let snapshot = running.gateway.snapshot();
    let shard = snapshot.find_shard("default", id)?;
    Some(shard.availability(&snapshot.config).name())
}

/// Polls `condition` every 10 ms until it holds or `within` passes.
pub async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Seconds since the Unix epoch, for JWT claims.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An HS256 JWT over `claims`, signed with `secret`.
pub fn hs256_token(claims: &serde_json::Value, secret: &[u8]) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap()
}

/// Base64url without padding, as JWTs use it (for hand-made tokens such as
/// `alg: none`, which `jsonwebtoken` refuses to produce).
pub fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0_u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

impl Fixture {
    /// An HS256 JWT over `claims`, signed with the fixture's secret
    /// (`Options::jwt_hs256` must be set).
    pub fn mint_hs256(&self, claims: &serde_json::Value) -> String {
        let secret = self.jwt_secret.as_deref().expect("Options::jwt_hs256");
        hs256_token(claims, secret)
    }
}

/// One HTTP/1.1 response read off a raw connection.
#[derive(Debug)]
pub struct RawResponse {
    /// The status code, 0 when the connection closed before a status line.
    pub status: u16,
    /// The head as received (status line and header lines).
    pub head: String,
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The value of a response header (case-insensitive name), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// `Authorization: Bearer <tenant's key>` as a raw header line.
pub fn bearer_line(fixture: &Fixture, tenant: &str) -> String {
    format!("Authorization: Bearer {}", fixture.api_key(tenant))
}

/// A raw HTTP/1.1 request: the request line, the header lines verbatim, a
/// blank line and the body. For requests a client library would normalise
/// (duplicate, folded or conflicting headers, odd targets).
pub fn raw(request_line: &str, header_lines: &[&str], body: &[u8]) -> Vec<u8> {
    let mut bytes = format!("{request_line}\r\n").into_bytes();
    for line in header_lines {
        bytes.extend_from_slice(line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"\r\n");
    bytes.extend_from_slice(body);
    bytes
}

/// Reads what is available into `received`; false once the peer has
/// closed the connection (or reset it).
async fn read_more(stream: &mut (impl AsyncRead + Unpin), received: &mut Vec<u8>) -> bool {
    let mut buffer = [0_u8; 8192];
    match stream.read(&mut buffer).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            received.extend_from_slice(&buffer[..n]);
            true
        }
    }
}

/// One HTTP/2 frame read off `stream`, as `(type, flags, stream id,
/// payload)`; `None` once the stream ends or fails.
pub async fn read_h2_frame(
    stream: &mut (impl AsyncRead + Unpin),
) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0_u8; 9];
    stream.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0_u8; len];
    stream.read_exact(&mut payload).await.ok()?;
    Some((head[3], head[4], id, payload))
}

/// Reads into `received` until the peer closes the connection (EOF or
/// reset) or `within` passes; whether it closed in time. Whether a
/// connection still open is a failure is the caller's to say.
pub async fn read_while_open(
    stream: &mut (impl AsyncRead + Unpin),
    received: &mut Vec<u8>,
    within: Duration,
) -> bool {
    tokio::time::timeout(within, async { while read_more(stream, received).await {} })
        .await
        .is_ok()
}

/// Everything the gateway sends back on a fresh connection to `addr` after
/// `request`, until it closes the connection. Panics if it neither answers
/// nor closes within `within` (a hang, not a timing).
pub async fn raw_until_closed(addr: SocketAddr, request: &[u8], within: Duration) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // The gateway may answer (and stop reading) before it has read all of
    // a request it refuses, so a failed write is not a failure here.
    let _ = stream.write_all(request).await;
    let mut received = Vec::new();
    assert!(
        read_while_open(&mut stream, &mut received, within).await,
        "the gateway neither finished its answer nor closed the connection within {within:?}"
    );
    String::from_utf8_lossy(&received).into_owned()
}

/// Writes `request` verbatim on a fresh connection to `addr` and reads one
/// final response, as [`exchange`] does. A connection closed before a
/// complete head gives status 0.
pub async fn raw_request(addr: SocketAddr, request: &[u8]) -> RawResponse {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    exchange(&mut stream, request).await
}

/// Writes `request` verbatim on `stream` (a fresh connection or one a
/// previous request has used) and reads one final response (interim `1xx`
/// answers such as `100 Continue` are skipped), framed by its
/// `Content-Length`, chunked encoding, or the connection closing (no body
/// for `HEAD`, 204 and 304). A connection closed before a complete head
/// gives status 0. Panics if nothing complete arrives within five seconds.
pub async fn exchange(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    request: &[u8],
) -> RawResponse {
    let head_request = request.starts_with(b"HEAD ");
    // The gateway may answer (and close) before reading all of a request
    // it refuses, so a failed write is not a failure here.
    let _ = stream.write_all(request).await;
    tokio::time::timeout(Duration::from_secs(5), async move {
        let mut received = Vec::new();
        let head_end = loop {
            if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                if received.starts_with(b"HTTP/1.1 1") && !received.starts_with(b"HTTP/1.1 101") {
                    // An interim response: the final one follows.
                    received.drain(..at + 4);
                    continue;
                }
                break at + 4;
            }
            if !read_more(stream, &mut received).await {
                return RawResponse {
                    status: 0,
                    head: String::from_utf8_lossy(&received).into_owned(),
                    body: Vec::new(),
                };
            }
        };
        let head = String::from_utf8_lossy(&received[..head_end - 4]).into_owned();
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        let mut response = RawResponse {
            status,
            head,
            body: Vec::new(),
        };
        let mut received = received.split_off(head_end);
        if head_request || status == 101 || status == 204 || status == 304 {
            return response;
        }
        if let Some(length) = response.header("content-length") {
            let length: usize = length.parse().unwrap();
            while received.len() < length && read_more(stream, &mut received).await {}
            received.truncate(length);
            response.body = received;
        } else if response
            .header("transfer-encoding")
            .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
        {
            // Decode chunks until the last (zero-size) one.
            let mut at = 0;
            loop {
                let line_end = loop {
                    if let Some(i) = received[at..].windows(2).position(|w| w == b"\r\n") {
                        break at + i;
                    }
                    assert!(
                        read_more(stream, &mut received).await,
                        "the connection closed mid-chunk"
                    );
                };
                let size_line = String::from_utf8_lossy(&received[at..line_end]).into_owned();
                let size =
                    usize::from_str_radix(size_line.split(';').next().unwrap().trim(), 16).unwrap();
                at = line_end + 2;
                if size == 0 {
                    break;
                }
                while received.len() < at + size + 2 {
                    assert!(
                        read_more(stream, &mut received).await,
                        "the connection closed mid-chunk"
                    );
                }
                response.body.extend_from_slice(&received[at..at + size]);
                at += size + 2;
            }
        } else {
            while read_more(stream, &mut received).await {}
            response.body = received;
        }
        response
    })
    .await
    .expect("no complete response within five seconds")
}

/// The body of a response from a test's own shard ([`CustomShard`]).
pub type ShardBody = BoxBody<Bytes, std::io::Error>;

/// A whole body of `bytes`, for a response from a [`CustomShard`].
pub fn full(bytes: impl Into<Bytes>) -> ShardBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A response from a [`CustomShard`] with `status` and the whole body
/// `body`.
pub fn text(status: u16, body: &'static str) -> Response<ShardBody> {
    let mut response = Response::new(full(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response
}

/// A test's own shard: a hyper server that answers `/healthz` itself and
/// every other request with `handler`, logging each as `METHOD /path`.
/// Dropping it stops the server.
pub struct CustomShard {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl Drop for CustomShard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CustomShard {
    /// Binds a port on 127.0.0.1 and serves it with `handler`.
    pub async fn start<F, Fut>(handler: F) -> Self
    where
        F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<ShardBody>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler = Arc::new(handler);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (handler, log) = (Arc::clone(&handler), Arc::clone(&log));
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let (handler, log) = (Arc::clone(&handler), Arc::clone(&log));
                        async move {
                            if request.uri().path() == "/healthz" {
                                return Ok::<_, Infallible>(text(200, "ok"));
                            }
                            log.lock().unwrap().push(format!(
                                "{} {}",
                                request.method(),
                                request.uri().path()
                            ));
                            Ok(handler(request).await)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { addr, seen, task }
    }

    /// The options of a gateway whose only shard is this one (so every
    /// tenant lands on it).
    pub fn options(&self) -> Options {
        only_shard(self.addr)
    }

    /// A gateway whose only shard is this one.
    pub async fn gateway(&self) -> Fixture {
        Fixture::start(self.options()).await
    }

    /// Every request served so far (all but `/healthz`), as `METHOD /path`.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

/// The options of a gateway over two tenants whose only shard is the
/// server at `addr`.
pub fn only_shard(addr: SocketAddr) -> Options {
    Options {
        shards: 0,
        tenants: 2,
        k: 1,
        custom_shards: vec![("c0".into(), format!("http://{addr}"))],
        ..Options::default()
    }
}

/// A body a test controls: the one [`Body`] the tests implement, for a
/// request to the gateway or a response from a [`CustomShard`].
pub struct TestBody {
    source: Source,
    /// Counts this body's drop: how a test sees the end of a response whose
    /// connection it cannot watch (sent whole, or its connection gone).
    dropped: Option<Arc<AtomicUsize>>,
}

enum Source {
    Channel(mpsc::Receiver<std::io::Result<Bytes>>),
    Ready(VecDeque<Frame<Bytes>>),
    Filler {
        chunk: Bytes,
        left: usize,
        declared: bool,
    },
}

impl TestBody {
    fn new(source: Source) -> Self {
        Self {
            source,
            dropped: None,
        }
    }

    /// Chunks the test hands over one by one: the body ends when the sender
    /// is dropped, stays open while the sender is held, and fails (hyper
    /// then aborts the connection) when the test sends an error.
    pub fn channel(chunks: mpsc::Receiver<std::io::Result<Bytes>>) -> Self {
        Self::new(Source::Channel(chunks))
    }

    /// Ready frames (data, then perhaps a trailer section) with no declared
    /// length, so hyper sends them chunked.
    pub fn frames(frames: impl IntoIterator<Item = Frame<Bytes>>) -> Self {
        Self::new(Source::Ready(frames.into_iter().collect()))
    }

    /// `len` bytes of `chunk` repeated (the last copy cut short), produced
    /// as fast as they are taken. With `declared` the body states its
    /// length (hyper sends `Content-Length`); without, hyper sends it
    /// chunked.
    pub fn filler(chunk: Bytes, len: usize, declared: bool) -> Self {
        Self::new(Source::Filler {
            chunk,
            left: len,
            declared,
        })
    }

    /// The same body, adding one to `dropped` when it is dropped.
    pub fn counting_drops(mut self, dropped: Arc<AtomicUsize>) -> Self {
        self.dropped = Some(dropped);
        self
    }
}

impl Drop for TestBody {
    fn drop(&mut self) {
        if let Some(dropped) = &self.dropped {
            dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match &mut self.source {
            Source::Channel(chunks) => chunks
                .poll_recv(cx)
                .map(|chunk| chunk.map(|chunk| chunk.map(Frame::data))),
            Source::Ready(frames) => Poll::Ready(frames.pop_front().map(Ok)),
            Source::Filler { chunk, left, .. } => {
                if *left == 0 {
                    return Poll::Ready(None);
                }
                let n = (*left).min(chunk.len());
                *left -= n;
                Poll::Ready(Some(Ok(Frame::data(chunk.slice(..n)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        // Only the filler knows its end before it is polled there.
        matches!(self.source, Source::Filler { left: 0, .. })
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Filler {
                left,
                declared: true,
                ..
            } => SizeHint::with_exact(*left as u64),
            _ => SizeHint::default(),
        }
    }
}

// The Prometheus text exposition, as a scraper reads it.

/// One sample line: `name{label="value",...} value`.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed text exposition (Prometheus text format or OpenMetrics).
#[derive(Debug, Default)]
pub struct Exposition {
    /// `# TYPE` per family name.
    pub types: HashMap<String, String>,
    /// `# HELP` per family name.
    pub helps: HashMap<String, String>,
    pub samples: Vec<Sample>,
}

/// Reads a label value up to its closing quote, undoing the escapes the
/// format allows (`\\`, `\"`, `\n`). Returns the value and the rest.
fn label_value(text: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return (value, &text[at + 1..]),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, escaped)) => value.push(escaped),
                None => panic!("a label value ends in a backslash: {text:?}"),
            },
            c => value.push(c),
        }
    }
    panic!("an unterminated label value: {text:?}")
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().enumerate().all(|(i, c)| {
            c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
        })
}

/// Parses an exposition; panics (failing the test) on any line it does not
/// understand.
pub fn parse(text: &str) -> Exposition {
    let mut out = Exposition::default();
    let mut ended = false;
    for line in text.lines() {
        assert!(!ended, "a line after # EOF: {line:?}");
        if line.is_empty() {
            continue;
        }
        if line == "# EOF" {
            ended = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (kind, name, value) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            assert!(is_name(name), "a bad family name in {line:?}");
            match kind {
                "TYPE" => {
                    assert!(
                        [
                            "counter",
                            "gauge",
                            "histogram",
                            "summary",
                            "unknown",
                            "gaugehistogram",
                            "stateset",
                            "info"
                        ]
                        .contains(&value),
                        "an unknown type in {line:?}"
                    );
                    assert!(
                        out.types
                            .insert(name.to_owned(), value.to_owned())
                            .is_none(),
                        "two TYPE lines for {name}"
                    );
                }
                "HELP" => {
                    out.helps.insert(name.to_owned(), value.to_owned());
                }
                "UNIT" => {}
                _ => panic!("an unknown comment line {line:?}"),
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("a sample without a value: {line:?}"));
        let name = &line[..name_end];
        assert!(is_name(name), "a bad metric name in {line:?}");
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(after) = rest.strip_prefix('{') {
            rest = after;
            loop {
                if let Some(after) = rest.strip_prefix('}') {
                    rest = after;
                    break;
                }
                let eq = rest
                    .find("=\"")
                    .unwrap_or_else(|| panic!("a label without a value in {line:?}"));
                let label = &rest[..eq];
                assert!(is_name(label), "a bad label name {label:?} in {line:?}");
                let (value, after) = label_value(&rest[eq + 2..]);
                assert!(
                    labels.insert(label.to_owned(), value).is_none(),
                    "label {label} twice in {line:?}"
                );
                rest = after.strip_prefix(',').unwrap_or(after);
            }
        }
        let rest = rest
            .strip_prefix(' ')
            .unwrap_or_else(|| panic!("no space before the value in {line:?}"));
        // An exemplar (` # {...} v`) may follow; a timestamp may follow.
        let rest = rest.split(" # ").next().unwrap_or(rest);
        let value = rest.split(' ').next().unwrap_or("");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("value {v:?} is not a number in {line:?}")),
        };
        out.samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    assert!(ended, "the exposition does not end with # EOF");
    // Every sample belongs to a declared family, with its help text.
    for sample in &out.samples {
        let family = out.family_of(&sample.name);
        assert!(
            out.types.contains_key(&family),
            "{} has no # TYPE {family}",
            sample.name
        );
        assert!(
            out.helps.get(&family).is_some_and(|h| !h.is_empty()),
            "{family} has no help text"
        );
    }
    out
}

impl Exposition {
    /// The family a sample name belongs to (`x_total` → `x` for counters,
    /// `x_bucket`/`x_sum`/`x_count` → `x` for histograms).
    pub fn family_of(&self, name: &str) -> String {
        for (suffix, kinds) in [
            ("_total", &["counter"][..]),
            ("_created", &["counter", "histogram", "summary"][..]),
            ("_bucket", &["histogram", "gaugehistogram"][..]),
            ("_sum", &["histogram", "summary"][..]),
            ("_count", &["histogram", "summary"][..]),
        ] {
            if let Some(family) = name.strip_suffix(suffix)
                && self
                    .types
                    .get(family)
                    .is_some_and(|t| kinds.contains(&t.as_str()))
            {
                return family.to_owned();
            }
        }
        name.to_owned()
    }

    /// The type of a family.
    pub fn kind(&self, family: &str) -> Option<&str> {
        self.types.get(family).map(String::as_str)
    }

    /// Every sample with this exact name.
    pub fn series(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }

    /// Samples named `name` whose labels include every pair of `labels`.
    pub fn matching(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample named `name` with exactly these labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == wanted)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "expected one {name}{wanted:?}, found {found:?}"
        );
        found[0].value
    }

    /// The sum over samples named `name` matching `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).iter().map(|s| s.value).sum()
    }

    /// The counter sample `name` (an `x_total`) summed over the series
    /// matching `labels`: 0 when none has counted yet (a family's series
    /// appear on their first event, and a family without any is left out of
    /// the exposition; `every_family_is_exported_with_values_that_match_the_traffic`
    /// pins the names). A declared family must be a counter.
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let family = self.family_of(name);
        if let Some(kind) = self.kind(&family) {
            assert_eq!(kind, "counter", "{name} is not a counter's sample");
        }
        // An empty f64 sum is -0.0; report it as 0.
        self.sum(name, labels) + 0.0
    }
}

impl Fixture {
    /// Scrapes the admin listener's `/metrics` (with the fixture's admin
    /// token, if it has one) and parses it.
    pub async fn scrape(&self) -> Exposition {
        let (status, _, body) = self
            .admin("GET", "/metrics", self.admin_token.as_deref())
            .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "scraping needs Options::admin_token or admin.metrics_without_token: {}",
            String::from_utf8_lossy(&body)
        );
        parse(std::str::from_utf8(&body).expect("the exposition is UTF-8"))
    }
}
