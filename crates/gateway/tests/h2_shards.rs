//! HTTP/2 to shards: a real gRPC service (tonic's server machinery, with
//! hand-written prost messages) as `h2c` and `h2` shards, a tonic client
//! through the gateway's h2c listener, every streaming shape with its
//! trailers; shards of all three protocols in one cell; the gRPC health
//! check; and shards that misbehave the ways an HTTP/2 server can (GOAWAY
//! at once, reset streams, a stalled body, no HTTP/2 at all).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream};
use gateway::config::writer::{GatewayToml, Shard};
use gateway::health::Availability;
use http::uri::PathAndQuery;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_rustls::TlsAcceptor;
use tonic::codegen::{BoxFuture, Service};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

use crate::pki::Ca;
use crate::util::{Fixture, Options, eventually, read_h2_frame};

// ---- A gRPC service, written by hand ---------------------------------------

/// The one message every method takes and returns.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Note {
    #[prost(string, tag = "1")]
    pub text: String,
}

fn note(text: impl Into<String>) -> Note {
    Note { text: text.into() }
}

type Notes = Pin<Box<dyn Stream<Item = Result<Note, Status>> + Send + 'static>>;

/// One shard's gRPC service, `test.Echo`:
/// - `Unary`: answers `<shard>:<text>`; `fail` is answered with
///   `FAILED_PRECONDITION` and a message;
/// - `Count` (server streaming): `n` answers `0`..`n`; `n!` then fails;
///   `hold` sends one note and waits for [`GrpcShard::release`];
/// - `Join` (client streaming): the notes joined with `+`;
/// - `Chat` (bidirectional): `echo:<text>` for every note, as it comes.
///
/// Every request's header fields are kept (`seen`, by the shard).
#[derive(Clone)]
struct Echo {
    id: String,
    seen: Arc<Mutex<Vec<HeaderMap>>>,
    release: Arc<Notify>,
}

struct Unary(Echo);

impl tonic::server::UnaryService<Note> for Unary {
    type Response = Note;
    type Future = BoxFuture<tonic::Response<Note>, Status>;

    fn call(&mut self, request: tonic::Request<Note>) -> Self::Future {
        let id = self.0.id.clone();
        Box::pin(async move {
            let text = request.into_inner().text;
            if text == "fail" {
                return Err(Status::failed_precondition("the shard says no"));
            }
            Ok(tonic::Response::new(note(format!("{id}:{text}"))))
        })
    }
}

struct Count(Echo);

impl tonic::server::ServerStreamingService<Note> for Count {
    type Response = Note;
    type ResponseStream = Notes;
    type Future = BoxFuture<tonic::Response<Notes>, Status>;

    fn call(&mut self, request: tonic::Request<Note>) -> Self::Future {
        let release = Arc::clone(&self.0.release);
        Box::pin(async move {
            let text = request.into_inner().text;
            if text == "hold" {
                let notes =
                    stream::once(async { Ok(note("held")) }).chain(stream::once(async move {
                        release.notified().await;
                        Ok(note("released"))
                    }));
                return Ok(tonic::Response::new(Box::pin(notes) as Notes));
            }
            let (count, fail) = match text.strip_suffix('!') {
                Some(count) => (count, true),
                None => (text.as_str(), false),
            };
            let count: usize = count.parse().unwrap_or(0);
            let notes = stream::iter((0..count).map(|i| Ok(note(i.to_string()))));
            let end = stream::iter(
                fail.then(|| Err(Status::failed_precondition("counted, then failed"))),
            );
            Ok(tonic::Response::new(Box::pin(notes.chain(end)) as Notes))
        })
    }
}

struct Join;

impl tonic::server::ClientStreamingService<Note> for Join {
    type Response = Note;
    type Future = BoxFuture<tonic::Response<Note>, Status>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Note>>) -> Self::Future {
        Box::pin(async move {
            let mut notes = request.into_inner();
            let mut texts = Vec::new();
            while let Some(note) = notes.message().await? {
                texts.push(note.text);
            }
            Ok(tonic::Response::new(note(texts.join("+"))))
        })
    }
}

struct Chat;

impl tonic::server::StreamingService<Note> for Chat {
    type Response = Note;
    type ResponseStream = Notes;
    type Future = BoxFuture<tonic::Response<Notes>, Status>;

    fn call(&mut self, request: tonic::Request<tonic::Streaming<Note>>) -> Self::Future {
        Box::pin(async move {
            let echoes = request
                .into_inner()
                .map(|note| note.map(|note| self::note(format!("echo:{}", note.text))));
            Ok(tonic::Response::new(Box::pin(echoes) as Notes))
        })
    }
}

impl<B> Service<Request<B>> for Echo
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let echo = self.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Note, Note>::default());
            Ok(match request.uri().path() {
                "/test.Echo/Unary" => grpc.unary(Unary(echo), request).await,
                "/test.Echo/Count" => grpc.server_streaming(Count(echo), request).await,
                "/test.Echo/Join" => grpc.client_streaming(Join, request).await,
                "/test.Echo/Chat" => grpc.streaming(Chat, request).await,
                _ => Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

/// A gRPC shard: [`Echo`] and the standard health service, served over
/// HTTP/2 (h2c, or h2 by ALPN when started with TLS); a plain `GET` of
/// `/plain` or `/healthz` is answered with the shard's id.
struct GrpcShard {
    id: String,
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<HeaderMap>>>,
    release: Arc<Notify>,
    connections: Arc<AtomicUsize>,
    health: tonic_health::server::HealthReporter,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GrpcShard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GrpcShard {
    async fn start(id: &str, tls: Option<TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let echo = Echo {
            id: id.to_owned(),
            seen: Arc::default(),
            release: Arc::new(Notify::new()),
        };
        let (health, health_service) = tonic_health::server::health_reporter();
        let connections = Arc::new(AtomicUsize::new(0));
        let (seen, release, counted) = (
            Arc::clone(&echo.seen),
            Arc::clone(&echo.release),
            Arc::clone(&connections),
        );
        let name = id.to_owned();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                counted.fetch_add(1, Ordering::Relaxed);
                let (echo, health, tls, name) = (
                    echo.clone(),
                    health_service.clone(),
                    tls.clone(),
                    name.clone(),
                );
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        let (mut echo, mut health, name) =
                            (echo.clone(), health.clone(), name.clone());
                        echo.seen.lock().unwrap().push(request.headers().clone());
                        async move {
                            match request.uri().path() {
                                "/plain" | "/healthz" => {
                                    Ok(http::Response::new(tonic::body::Body::new(
                                        Full::new(Bytes::from(name))
                                            .map_err(|never| match never {}),
                                    )))
                                }
                                path if path.starts_with("/grpc.health.v1.Health/") => {
                                    health.call(request).await
                                }
                                _ => echo.call(request).await,
                            }
                        }
                    });
                    let server = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                    let _ = match tls {
                        Some(acceptor) => match acceptor.accept(tcp).await {
                            Ok(tls) => server.serve_connection(TokioIo::new(tls), service).await,
                            Err(_) => return,
                        },
                        None => server.serve_connection(TokioIo::new(tcp), service).await,
                    };
                });
            }
        });
        Self {
            id: id.to_owned(),
            addr,
            seen,
            release,
            connections,
            health,
            task,
        }
    }

    fn h2c(&self) -> Shard {
        Shard::new(&self.id, format!("http://{}", self.addr)).speaking("h2c")
    }

    fn seen(&self) -> Vec<HeaderMap> {
        self.seen.lock().unwrap().clone()
    }

    /// The gRPC calls it saw (health checks and plain GETs aside).
    fn calls(&self) -> usize {
        self.seen()
            .iter()
            .filter(|headers| headers.get("content-type").is_some())
            .count()
    }
}

/// A TLS acceptor for `localhost` from `ca`, offering only ALPN `h2`.
fn h2_acceptor(ca: &Ca) -> TlsAcceptor {
    acceptor(ca, vec![b"h2".to_vec()])
}

/// A TLS acceptor for `localhost` from `ca`, offering `alpn`.
fn acceptor(ca: &Ca, alpn: Vec<Vec<u8>>) -> TlsAcceptor {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    let leaf = ca.server(&["localhost"]);
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.cert.clone()], key)
    .unwrap();
    config.alpn_protocols = alpn;
    TlsAcceptor::from(Arc::new(config))
}

// ---- The client ---------------------------------------------------------------

/// A gRPC channel to the gateway's data listener, HTTP/2 with prior
/// knowledge.
async fn connect(fixture: &Fixture) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{}", fixture.running.addr))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// `message` with the tenant's API key as `authorization` metadata, and
/// `extra` metadata.
fn call<T>(
    fixture: &Fixture,
    tenant: &str,
    message: T,
    extra: &[(&'static str, &str)],
) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let bearer = format!("Bearer {}", fixture.api_key(tenant));
    request
        .metadata_mut()
        .insert("authorization", bearer.parse().unwrap());
    for (name, value) in extra {
        request.metadata_mut().append(*name, value.parse().unwrap());
    }
    request
}

async fn unary(channel: &Channel, request: tonic::Request<Note>) -> Result<Note, Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    grpc.unary(
        request,
        PathAndQuery::from_static("/test.Echo/Unary"),
        ProstCodec::<Note, Note>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

async fn count(
    channel: &Channel,
    request: tonic::Request<Note>,
) -> Result<tonic::Streaming<Note>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    grpc.server_streaming(
        request,
        PathAndQuery::from_static("/test.Echo/Count"),
        ProstCodec::<Note, Note>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// Options for a gateway over `shards` only (no test backends), `k` of
/// them per tenant, health checked only at start.
fn options(shards: Vec<Shard>, k: u32) -> Options {
    Options {
        shards: 0,
        k,
        tenants: 4,
        shard_entries: shards,
        health: "interval_ms = 60000\n".into(),
        admin: "metrics_without_token = true\n".into(),
        // A new connection (a TLS handshake, in a debug build, on a busy
        // machine) must fit in the per-try timeout, or a good shard's
        // attempt fails as a connect failure and the call finds no member
        // left: the fixture's 300 ms is too little for that. No test here
        // waits for a per-try timeout.
        routing: "per_try_timeout_ms = 10000\nrequest_timeout_ms = 30000\n".into(),
        ..Options::default()
    }
}

// ---- Every streaming shape -----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_of_every_shape_pass_through_h2c_shards_with_their_trailers() {
    let shard = GrpcShard::start("g0", None).await;
    let fixture = Fixture::start(options(vec![shard.h2c()], 1)).await;
    let channel = connect(&fixture).await;

    // Unary, with the client's attempts at placement in its metadata.
    let request = call(
        &fixture,
        "tenant-1",
        note("hello"),
        &[
            ("x-shuffle-tenant", "tenant-3"),
            ("x-shuffle-shard", "elsewhere"),
            ("x_shuffle_tenant", "tenant-3"),
        ],
    );
    assert_eq!(unary(&channel, request).await.unwrap().text, "g0:hello");
    let headers = shard.seen().last().cloned().unwrap();
    let tenants: Vec<_> = headers.get_all("x-shuffle-tenant").iter().collect();
    assert_eq!(tenants, ["tenant-1"], "{headers:?}");
    assert_eq!(headers.get("x-shuffle-shard").unwrap(), "g0");
    assert!(headers.get("x_shuffle_tenant").is_none(), "{headers:?}");
    // The credential was the gateway's; the shard gets the tenant.
    assert!(headers.get("authorization").is_none(), "{headers:?}");
    // gRPC servers insist on it.
    assert_eq!(headers.get("te").unwrap(), "trailers");

    // A failure from the shard: its status and message arrive.
    let status = unary(&channel, call(&fixture, "tenant-1", note("fail"), &[]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "the shard says no");

    // Server streaming, ending OK, and ending with a status in trailers
    // after its messages.
    let mut notes = count(&channel, call(&fixture, "tenant-1", note("3"), &[]))
        .await
        .unwrap();
    let mut texts = Vec::new();
    while let Some(note) = notes.message().await.unwrap() {
        texts.push(note.text);
    }
    assert_eq!(texts, ["0", "1", "2"]);
    assert!(notes.trailers().await.unwrap().is_some());
    let mut notes = count(&channel, call(&fixture, "tenant-1", note("2!"), &[]))
        .await
        .unwrap();
    assert_eq!(notes.message().await.unwrap().unwrap().text, "0");
    assert_eq!(notes.message().await.unwrap().unwrap().text, "1");
    let status = notes.message().await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "counted, then failed");

    // Client streaming.
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let notes = stream::iter(["a", "b", "c"].map(note));
    let joined = grpc
        .client_streaming(
            call(&fixture, "tenant-1", notes, &[]),
            PathAndQuery::from_static("/test.Echo/Join"),
            ProstCodec::<Note, Note>::default(),
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(joined.text, "a+b+c");

    // Bidirectional: each answer comes back before the next note is sent,
    // so nothing on the way waits for the whole of either stream.
    let (send, receive) = mpsc::channel::<Note>(1);
    let outgoing = stream::unfold(receive, |mut receive| async move {
        receive.recv().await.map(|note| (note, receive))
    });
    let request = call(&fixture, "tenant-1", outgoing, &[]);
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let chat = tokio::spawn(async move {
        grpc.streaming(
            request,
            PathAndQuery::from_static("/test.Echo/Chat"),
            ProstCodec::<Note, Note>::default(),
        )
        .await
    });
    // The first note goes while the call's head may still be on its way.
    send.send(note("x")).await.unwrap();
    let mut answers = chat.await.unwrap().unwrap().into_inner();
    assert_eq!(answers.message().await.unwrap().unwrap().text, "echo:x");
    send.send(note("y")).await.unwrap();
    assert_eq!(answers.message().await.unwrap().unwrap().text, "echo:y");
    drop(send);
    assert!(answers.message().await.unwrap().is_none());
    assert!(answers.trailers().await.unwrap().is_some());
}

// ---- Protocols side by side -------------------------------------------------

/// A `GET /plain` through the gateway as `tenant`, over HTTP/1.1: the
/// status and the answering shard's body.
async fn get_plain(fixture: &Fixture, tenant: &str) -> (StatusCode, String) {
    let (status, body) = fixture.get(tenant, "/plain").await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_h2c_and_http1_shards_serve_side_by_side_in_one_cell() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("h2 shards CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let tls = GrpcShard::start("tls", Some(h2_acceptor(&ca))).await;
    let plain = GrpcShard::start("plain", None).await;
    let http1 = backend::Backend::start("http1").await.unwrap();
    let shards = vec![
        Shard::new("tls", format!("https://127.0.0.1:{}", tls.addr.port()))
            .with_server_name("localhost")
            .speaking("h2"),
        plain.h2c(),
        Shard::new("http1", http1.url()),
    ];
    let mut options = options(shards, 3);
    options.extra = format!(
        "[upstream.tls]\nca_file = {:?}\n",
        ca_file.display().to_string()
    );
    let fixture = Fixture::start(options).await;

    // Every tenant's subset is the whole cell: requests spread over all
    // three, and each answers.
    let mut answered = std::collections::HashSet::new();
    for round in 0..60 {
        let tenant = format!("tenant-{}", round % 4);
        let (status, body) = get_plain(&fixture, &tenant).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        answered.insert(if body == "tls" || body == "plain" {
            body
        } else {
            "http1".to_owned()
        });
        if answered.len() == 3 {
            break;
        }
    }
    assert_eq!(answered.len(), 3, "{answered:?}");
    for id in ["tls", "plain", "http1"] {
        assert_eq!(
            fixture.shard(id).failures.load(Ordering::Relaxed),
            0,
            "{id}"
        );
    }
    // The TLS shard was reached over h2 (it offers nothing else).
    assert!(
        tls.seen()
            .iter()
            .any(|headers| headers.get("x-shuffle-shard").is_some())
    );

    // curl with prior knowledge, through the gateway, to an h2c shard.
    let only_plain = Fixture::start(self::options(vec![plain.h2c()], 1)).await;
    let key = format!("x-api-key: {}", only_plain.api_key("tenant-1"));
    let url = format!("http://{}/plain", only_plain.running.addr);
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "--http2-prior-knowledge", "-H", &key, &url])
            .output()
            .expect("curl is installed (.ci/run installs it)")
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "plain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_shard_that_does_not_negotiate_h2_by_alpn_is_a_connect_failure() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("h2 shards CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    // It would speak HTTP/2 all the same, but never said so in the
    // handshake: the gateway sends it nothing.
    let mute = GrpcShard::start("mute", Some(acceptor(&ca, Vec::new()))).await;
    let good = GrpcShard::start("good", Some(h2_acceptor(&ca))).await;
    let shards = [&mute, &good]
        .map(|shard| {
            Shard::new(
                &shard.id,
                format!("https://127.0.0.1:{}", shard.addr.port()),
            )
            .with_server_name("localhost")
            .speaking("h2")
        })
        .to_vec();
    let mut options = options(shards, 2);
    options.extra = format!(
        "[upstream.tls]\nca_file = {:?}\n",
        ca_file.display().to_string()
    );
    let fixture = Fixture::start(options).await;
    twenty_answered_by_good(&fixture).await;
    assert!(mute.connections.load(Ordering::Relaxed) > 0);
    assert!(mute.seen().is_empty(), "{:?}", mute.seen());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_shard_refusing_connections_fails_over_even_for_calls_that_are_not_repeatable() {
    let good = GrpcShard::start("good", None).await;
    // A port nobody listens on.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = closed.local_addr().unwrap();
    drop(closed);
    let shards = vec![
        good.h2c(),
        Shard::new("dead", format!("http://{dead}")).speaking("h2c"),
    ];
    let fixture = Fixture::start(options(shards, 2)).await;
    twenty_answered_by_good(&fixture).await;
    assert_eq!(good.calls(), 20);
    assert!(fixture.shard("dead").attempts.load(Ordering::Relaxed) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_share_one_connection_and_count_in_flight_one_by_one() {
    let shard = GrpcShard::start("g0", None).await;
    let fixture = Fixture::start(options(vec![shard.h2c()], 1)).await;
    let channel = connect(&fixture).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut notes = count(&channel, call(&fixture, "tenant-1", note("hold"), &[]))
            .await
            .unwrap();
        assert_eq!(notes.message().await.unwrap().unwrap().text, "held");
        held.push(notes);
    }
    let labels = [("cell", "default"), ("shard", "g0")];
    assert_eq!(
        fixture
            .scrape()
            .await
            .value("shuffle_shard_in_flight", &labels),
        3.0
    );
    // Three streams (and the health check) on one connection.
    assert_eq!(shard.connections.load(Ordering::Relaxed), 1);
    shard.release.notify_waiters();
    for mut notes in held {
        assert_eq!(notes.message().await.unwrap().unwrap().text, "released");
        assert!(notes.message().await.unwrap().is_none());
    }
    let mut settled = false;
    for _ in 0..200 {
        if fixture
            .scrape()
            .await
            .value("shuffle_shard_in_flight", &labels)
            == 0.0
        {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(settled, "the in-flight count went back to zero");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_health_check_takes_a_not_serving_shard_out_and_back() {
    let shard = GrpcShard::start("g0", None).await;
    let other = GrpcShard::start("g1", None).await;
    let mut options = options(vec![shard.h2c(), other.h2c()], 2);
    options.health = "interval_ms = 50\ngrpc = true\n".into();
    let fixture = Fixture::start(options).await;
    let config = fixture.config();
    let g0 = fixture.shard("g0");
    assert!(
        eventually(Duration::from_secs(10), || g0.availability(&config)
            == Availability::Up)
        .await
    );
    shard
        .health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    assert!(
        eventually(Duration::from_secs(10), || g0.availability(&config)
            == Availability::Unhealthy)
        .await
    );
    // The checks asked the health service, not for a path.
    let asked = shard.seen();
    assert!(
        asked
            .iter()
            .all(|headers| headers.get("content-type").is_some())
    );
    shard
        .health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    assert!(
        eventually(Duration::from_secs(10), || g0.availability(&config)
            == Availability::Up)
        .await
    );
}

// ---- Misbehaving HTTP/2 shards ------------------------------------------------

/// A shard speaking raw bytes: each connection it accepts is counted and
/// handed to `serve`.
async fn raw_shard<F, Fut>(serve: F) -> (SocketAddr, Arc<AtomicUsize>, tokio::task::JoinHandle<()>)
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            counted.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(serve(tcp));
        }
    });
    (addr, connections, task)
}

/// An HTTP/2 shard made with the h2 crate's server, answering every
/// stream with `answer`; counts the streams it was sent.
async fn h2_shard<F>(answer: F) -> (SocketAddr, Arc<AtomicUsize>, tokio::task::JoinHandle<()>)
where
    F: Fn(h2::server::SendResponse<Bytes>) + Clone + Send + Sync + 'static,
{
    let streams = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&streams);
    let (addr, _, task) = raw_shard(move |tcp| {
        let (answer, counted) = (answer.clone(), Arc::clone(&counted));
        async move {
            let Ok(mut connection) = h2::server::handshake(tcp).await else {
                return;
            };
            while let Some(Ok((request, respond))) = connection.accept().await {
                // Health checks aside.
                if request.uri().path() != "/healthz" {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
                answer(respond);
            }
        }
    })
    .await;
    (addr, streams, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_says_goaway_at_once_is_failed_over_even_for_calls_that_are_not_repeatable() {
    let good = GrpcShard::start("good", None).await;
    let (addr, connections, _task) = raw_shard(|mut tcp| async move {
        // Its SETTINGS, then GOAWAY (last stream 0, NO_ERROR): nothing
        // the gateway sends on it is taken up. Both in one write, so that
        // they arrive together: the gateway sends no stream on a new
        // connection before it has read what came with the shard's
        // preface. (Written apart, the GOAWAY could come after the
        // gateway had sent a call and taken its body, which a call that
        // is not repeatable cannot then be failed over with.)
        let settings = [0, 0, 0, 4, 0, 0, 0, 0, 0];
        let goaway = [0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let _ = tcp.write_all(&[&settings[..], &goaway[..]].concat()).await;
        let mut sink = [0; 1024];
        while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    let shards = vec![
        good.h2c(),
        Shard::new("goaway", format!("http://{addr}")).speaking("h2c"),
    ];
    let fixture = Fixture::start(options(shards, 2)).await;
    twenty_answered_by_good(&fixture).await;
    assert_eq!(good.calls(), 20);
    assert!(fixture.shard("goaway").attempts.load(Ordering::Relaxed) > 0);
    assert!(connections.load(Ordering::Relaxed) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_streams_fail_over_and_other_resets_are_not_replayed() {
    // REFUSED_STREAM: not processed, so even a request that is not
    // repeatable (a POST) goes to the other shard, as long as its body can
    // still be sent (it has none here; a streamed body the refused stream
    // had taken cannot be, and is answered 503 with Retry-After).
    let good = GrpcShard::start("good", None).await;
    let (addr, refused, _task) = h2_shard(|mut respond| {
        respond.send_reset(h2::Reason::REFUSED_STREAM);
    })
    .await;
    let shards = vec![
        good.h2c(),
        Shard::new("refuser", format!("http://{addr}")).speaking("h2c"),
    ];
    let fixture = Fixture::start(options(shards, 2)).await;
    for _ in 0..20 {
        let (status, _, body) = fixture
            .send(Some("tenant-1"), "POST", "/plain", &[], b"")
            .await;
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"good"[..]));
    }
    assert!(refused.load(Ordering::Relaxed) > 0);
    drop(fixture);

    // INTERNAL_ERROR after the call went out: a POST that is not
    // repeatable fails, and is not sent anywhere again.
    let good = GrpcShard::start("good", None).await;
    let (addr, reset, _task) = h2_shard(|mut respond| {
        respond.send_reset(h2::Reason::INTERNAL_ERROR);
    })
    .await;
    let shards = vec![
        good.h2c(),
        Shard::new("resetter", format!("http://{addr}")).speaking("h2c"),
    ];
    let fixture = Fixture::start(options(shards, 2)).await;
    let channel = connect(&fixture).await;
    let (mut failed, mut calls) = (0, 0);
    while failed == 0 && calls < 200 {
        calls += 1;
        if unary(&channel, call(&fixture, "tenant-1", note("once"), &[]))
            .await
            .is_err()
        {
            failed += 1;
        }
    }
    assert_eq!(failed, 1, "some call met the resetting shard");
    assert_eq!(reset.load(Ordering::Relaxed), failed);
    assert_eq!(good.calls(), calls - failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_stalls_after_its_head_is_cut_off_by_the_backend_idle_timeout() {
    let (addr, streams, _task) = h2_shard(|mut respond| {
        let head = http::Response::builder()
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        // The head, and then nothing, for ever (the stream is kept).
        if let Ok(stream) = respond.send_response(head, false) {
            std::mem::forget(stream);
        }
    })
    .await;
    let shards = vec![Shard::new("staller", format!("http://{addr}")).speaking("h2c")];
    let mut options = options(shards, 1);
    options.extra = "[limits]\nbackend_idle_timeout_ms = 200\n".into();
    let fixture = Fixture::start(options).await;
    let channel = connect(&fixture).await;
    let status = unary(&channel, call(&fixture, "tenant-1", note("wait"), &[]))
        .await
        .unwrap_err();
    assert_ne!(status.code(), Code::Ok);
    assert_eq!(streams.load(Ordering::Relaxed), 1);
    let metrics = fixture.scrape().await;
    assert!(metrics.sum("shuffle_stream_timeouts_total", &[("side", "backend")]) >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_answers_without_an_http2_preface_is_a_connect_failure() {
    let good = GrpcShard::start("good", None).await;
    let (addr, connections, _task) = raw_shard(|mut tcp| async move {
        let _ = tcp
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
        let mut sink = [0; 1024];
        while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    let shards = vec![
        good.h2c(),
        Shard::new("garbage", format!("http://{addr}")).speaking("h2c"),
    ];
    let fixture = Fixture::start(options(shards, 2)).await;
    twenty_answered_by_good(&fixture).await;
    assert_eq!(good.calls(), 20);
    assert!(connections.load(Ordering::Relaxed) > 0);
    let metrics = fixture.scrape().await;
    let refused = metrics.sum(
        "shuffle_attempts_total",
        &[("shard", "garbage"), ("outcome", "connect")],
    );
    assert!(refused >= 1.0, "{refused}");
}

/// What [`scripted_shard`] does with the next stream it is sent.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Next {
    /// Answers 200 at once.
    Answer,
    /// Keeps the stream until [`ScriptedShard::release`].
    Hold,
    /// Answers with a head holding an uppercase field name, which RFC
    /// 9113 makes a malformed response.
    Malformed,
}

/// A raw HTTP/2 shard whose next stream is handled as [`Next`] says (then
/// back to [`Next::Answer`]); the stream it holds is answered 200 on
/// [`ScriptedShard::release`].
struct ScriptedShard {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    next: Arc<Mutex<Next>>,
    held: Held,
    _task: tokio::task::JoinHandle<()>,
}

/// The stream a [`ScriptedShard`] holds, and where its answer is written.
type Held = Arc<Mutex<Option<(u32, mpsc::UnboundedSender<Vec<u8>>)>>>;

/// A HEADERS frame ending stream `id` (END_STREAM | END_HEADERS).
fn last_headers(id: u32, block: &[u8]) -> Vec<u8> {
    let mut frame = u32::try_from(block.len()).unwrap().to_be_bytes()[1..].to_vec();
    frame.extend_from_slice(&[0x1, 0x5]);
    frame.extend_from_slice(&id.to_be_bytes());
    frame.extend_from_slice(block);
    frame
}

impl ScriptedShard {
    async fn start() -> Self {
        let next = Arc::new(Mutex::new(Next::Answer));
        let held = Arc::new(Mutex::new(None));
        let (script, holder) = (Arc::clone(&next), Arc::clone(&held));
        let (addr, connections, task) = raw_shard(move |tcp| {
            let (script, holder) = (Arc::clone(&script), Arc::clone(&holder));
            async move {
                let (mut reader, mut writer) = tcp.into_split();
                let (out, mut queue) = mpsc::unbounded_channel::<Vec<u8>>();
                tokio::spawn(async move {
                    while let Some(bytes) = queue.recv().await {
                        if writer.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                });
                let mut preface = [0; 24];
                if reader.read_exact(&mut preface).await.is_err() {
                    return;
                }
                let _ = out.send(vec![0, 0, 0, 4, 0, 0, 0, 0, 0]);
                while let Some((kind, flags, id, payload)) = read_h2_frame(&mut reader).await {
                    match (kind, flags & 0x1 != 0) {
                        // SETTINGS: acknowledged.
                        (0x4, false) => {
                            let _ = out.send(vec![0, 0, 0, 4, 1, 0, 0, 0, 0]);
                        }
                        // PING: answered.
                        (0x6, false) => {
                            let mut pong = vec![0, 0, 8, 6, 1, 0, 0, 0, 0];
                            pong.extend_from_slice(&payload);
                            let _ = out.send(pong);
                        }
                        // A request (`:status` 200 is HPACK's static
                        // entry 8).
                        (0x1, _) => {
                            let next =
                                std::mem::replace(&mut *script.lock().unwrap(), Next::Answer);
                            match next {
                                Next::Answer => {
                                    let _ = out.send(last_headers(id, &[0x88]));
                                }
                                Next::Hold => *holder.lock().unwrap() = Some((id, out.clone())),
                                Next::Malformed => {
                                    let mut block = vec![0x88, 0x00, 7];
                                    block.extend_from_slice(b"X-Upper");
                                    block.extend_from_slice(&[1, b'v']);
                                    let _ = out.send(last_headers(id, &block));
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
        })
        .await;
        Self {
            addr,
            connections,
            next,
            held,
            _task: task,
        }
    }

    fn next(&self, next: Next) {
        *self.next.lock().unwrap() = next;
    }

    fn holding(&self) -> bool {
        self.held.lock().unwrap().is_some()
    }

    fn release(&self) {
        if let Some((id, out)) = self.held.lock().unwrap().take() {
            let _ = out.send(last_headers(id, &[0x88]));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_answer_from_a_shard_fails_its_stream_and_not_the_others_on_its_connection() {
    let shard = ScriptedShard::start().await;
    let shards = vec![Shard::new("scripted", format!("http://{}", shard.addr)).speaking("h2c")];
    let fixture = Fixture::start(options(shards, 1)).await;
    // The gateway's first health check (the next one is a minute away)
    // must have been answered before the script starts: the shard scripts
    // whichever stream comes next, and a late check that took the `Hold`
    // left the `Malformed` answer to the held POST (seen once in CI).
    let scripted = fixture.shard("scripted");
    assert!(
        eventually(Duration::from_secs(30), || {
            scripted
                .health
                .lock()
                .unwrap()
                .last_check_passed()
                .is_some()
        })
        .await
    );
    // One request the shard holds, and while it does, another whose answer
    // is malformed, on the same connection. Both are POSTs, which the
    // gateway never sends twice: what each client gets is what its one
    // stream got.
    shard.next(Next::Hold);
    let held = fixture.send(Some("tenant-1"), "POST", "/held", &[], b"");
    let other = async {
        assert!(eventually(Duration::from_secs(30), || shard.holding()).await);
        shard.next(Next::Malformed);
        let (status, ..) = fixture
            .send(Some("tenant-2"), "POST", "/malformed", &[], b"")
            .await;
        shard.release();
        status
    };
    let ((held, ..), malformed) = tokio::join!(held, other);
    assert_eq!(malformed, StatusCode::BAD_GATEWAY);
    // With the registry's h2 the malformed head was a connection error,
    // which failed the held request too (502).
    assert_eq!(held, StatusCode::OK);
    assert_eq!(shard.connections.load(Ordering::Relaxed), 1);
}

/// Twenty unary calls as `tenant-1`, each answered by the shard `good`
/// (the only well-behaved member of the tenant's subset).
async fn twenty_answered_by_good(fixture: &Fixture) {
    let channel = connect(fixture).await;
    for i in 0..20 {
        let answer = unary(
            &channel,
            call(fixture, "tenant-1", note(i.to_string()), &[]),
        )
        .await
        .unwrap();
        assert_eq!(answer.text, format!("good:{i}"));
    }
}

// ---- Configuration --------------------------------------------------------------

/// Loads a one-shard configuration written into `dir`.
fn load(dir: &Path, shard: Shard, extra: &str) -> Result<gateway::GatewayConfig, String> {
    let path = GatewayToml::one_shard(shard, extra).write(dir).unwrap();
    gateway::GatewayConfig::load(&path).map_err(|error| error.to_string())
}

#[test]
fn a_protocol_that_does_not_fit_the_scheme_is_refused_by_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let error = load(
        dir.path(),
        Shard::new("s0", "http://127.0.0.1:1").speaking("h2"),
        "",
    )
    .unwrap_err();
    assert!(error.contains("cells[0].shards[0].protocol"), "{error}");
    assert!(error.contains("https://"), "{error}");
    std::fs::write(dir.path().join("ca.pem"), Ca::new("ca").pem()).unwrap();
    let error = load(
        dir.path(),
        Shard::new("s0", "https://127.0.0.1:1").speaking("h2c"),
        "[upstream.tls]\nca_file = \"ca.pem\"\n",
    )
    .unwrap_err();
    assert!(error.contains("cells[0].shards[0].protocol"), "{error}");
    let error = load(
        dir.path(),
        Shard::new("s0", "http://127.0.0.1:1").speaking("h3"),
        "",
    )
    .unwrap_err();
    assert!(error.contains("h3"), "{error}");
    for (url, protocol) in [
        ("http://127.0.0.1:1", "http1"),
        ("http://127.0.0.1:1", "h2c"),
        ("https://127.0.0.1:1", "h2"),
    ] {
        let config = load(
            dir.path(),
            Shard::new("s0", url).speaking(protocol),
            "[upstream.tls]\nca_file = \"ca.pem\"\n",
        )
        .unwrap();
        assert_eq!(
            format!("{:?}", config.cells()[0].shards[0].protocol).to_lowercase(),
            protocol
        );
    }
}
