//! WebSockets through the gateway: a real client (`tokio-tungstenite`)
//! over the plaintext listener to a WebSocket shard of the test's own,
//! which records every upgrade request it is sent and can be told to
//! answer it in the ways a shard might (switch and echo, decline, switch
//! to something else, stall, drop the tunnel).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{WebSocketStream, client_async};

use crate::util::{Exposition, Fixture, Options, bearer_line, only_shard, raw, raw_request};

/// How long anything may take before a test calls it a hang (never a
/// timing the test asserts).
const HANG: Duration = Duration::from_secs(20);

/// What the shard sends right behind its 101: the new protocol's first
/// bytes (an unmasked text frame, "welcome"), owed to the client first.
const WELCOME: &[u8] = b"\x81\x07welcome";

/// How the test shard answers an upgrade request.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// 101 (with the first subprotocol the client offered, and a field in
    /// the gateway's namespace that must never reach the client), the
    /// welcome frame, then an echo of every message until the close.
    Echo,
    /// As `Echo` for one message, then the connection is dropped without
    /// a close frame.
    EchoOnceThenDrop,
    /// As `Echo` for one message, then the connection is reset (RST).
    EchoOnceThenReset,
    /// This status and no switch.
    Status(u16),
    /// 101, but to another protocol than WebSocket.
    SwitchElsewhere,
    /// Nothing, ever (the connection stays open).
    Stall,
}

/// A request head as the shard saw it: lowercase names, values as sent.
type Head = Vec<(String, String)>;

fn values<'h>(head: &'h Head, name: &str) -> Vec<&'h str> {
    head.iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The test's WebSocket shard. `/healthz` and other plain requests get
/// 200 (or, when `switch_plain` is set, a 101 nobody asked for).
struct WsShard {
    addr: SocketAddr,
    answer: Arc<Mutex<Answer>>,
    switch_plain: Arc<Mutex<bool>>,
    /// Every upgrade request's head.
    upgrades: Arc<Mutex<Vec<Head>>>,
    /// Every plain request's head but health checks'.
    plain: Arc<Mutex<Vec<Head>>>,
    task: JoinHandle<()>,
}

impl Drop for WsShard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WsShard {
    async fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = Arc::new(Mutex::new(answer));
        let switch_plain = Arc::new(Mutex::new(false));
        let upgrades = Arc::new(Mutex::new(Vec::new()));
        let plain = Arc::new(Mutex::new(Vec::new()));
        let state = (
            Arc::clone(&answer),
            Arc::clone(&switch_plain),
            Arc::clone(&upgrades),
            Arc::clone(&plain),
        );
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (answer, switch_plain, upgrades, plain) = state.clone();
                tokio::spawn(async move {
                    serve(stream, answer, switch_plain, upgrades, plain).await;
                });
            }
        });
        Self {
            addr,
            answer,
            switch_plain,
            upgrades,
            plain,
            task,
        }
    }

    fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    fn upgrades(&self) -> Vec<Head> {
        self.upgrades.lock().unwrap().clone()
    }

    fn plain(&self) -> Vec<Head> {
        self.plain.lock().unwrap().clone()
    }

    /// A gateway whose only shard (`c0`) this is, with `extra` tables and an
    /// admin token for scraping.
    async fn gateway(&self, extra: &str) -> Fixture {
        Fixture::start(Options {
            extra: extra.into(),
            admin_token: Some("websocket-test-admin-token-0123".into()),
            ..only_shard(self.addr)
        })
        .await
    }
}

/// Reads one request head off `stream` (`None` once the peer has gone):
/// the request line, the fields, and what was read beyond the head.
async fn read_head(stream: &mut TcpStream) -> Option<(String, Head, Vec<u8>)> {
    let mut received = Vec::new();
    let end = loop {
        if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0_u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
        }
    };
    let text = String::from_utf8_lossy(&received[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let head = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Some((request_line, head, received[end + 4..].to_vec()))
}

async fn serve(
    mut stream: TcpStream,
    answer: Arc<Mutex<Answer>>,
    switch_plain: Arc<Mutex<bool>>,
    upgrades: Arc<Mutex<Vec<Head>>>,
    plain: Arc<Mutex<Vec<Head>>>,
) {
    while let Some((request_line, head, rest)) = read_head(&mut stream).await {
        let key = values(&head, "sec-websocket-key")
            .first()
            .map(|k| k.to_string());
        let Some(key) = key else {
            if !request_line.contains("/healthz") {
                plain.lock().unwrap().push(head);
                if *switch_plain.lock().unwrap() {
                    let _ = stream
                        .write_all(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n")
                        .await;
                    continue;
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await;
            continue;
        };
        let protocol = values(&head, "sec-websocket-protocol")
            .first()
            .and_then(|offered| offered.split(',').next())
            .map(|first| format!("sec-websocket-protocol: {}\r\n", first.trim()))
            .unwrap_or_default();
        upgrades.lock().unwrap().push(head);
        let answer = *answer.lock().unwrap();
        let switch = format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
             sec-websocket-accept: {}\r\n{protocol}x-shuffle-leak: c0\r\n\r\n",
            derive_accept_key(key.as_bytes())
        );
        match answer {
            Answer::Echo | Answer::EchoOnceThenDrop | Answer::EchoOnceThenReset => {
                let mut first = switch.into_bytes();
                first.extend_from_slice(WELCOME);
                if stream.write_all(&first).await.is_err() {
                    return;
                }
                let mut socket =
                    WebSocketStream::from_partially_read(stream, rest, Role::Server, None).await;
                // A close is answered by tungstenite itself; the stream
                // ends once it has been, and the connection is closed then
                // (the server closes first).
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_close() {
                        continue;
                    }
                    if socket.send(message).await.is_err() {
                        return;
                    }
                    if matches!(answer, Answer::EchoOnceThenDrop) {
                        return;
                    }
                    if matches!(answer, Answer::EchoOnceThenReset) {
                        let _ = socket.get_ref().set_zero_linger();
                        return;
                    }
                }
                return;
            }
            Answer::Status(status) => {
                let response = format!(
                    "HTTP/1.1 {status} Whatever\r\ncontent-length: 8\r\nx-shuffle-leak: c0\r\n\r\ndeclined"
                );
                if stream.write_all(response.as_bytes()).await.is_err() {
                    return;
                }
            }
            Answer::SwitchElsewhere => {
                let _ = stream
                    .write_all(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\n")
                    .await;
                return;
            }
            Answer::Stall => {
                std::future::pending::<()>().await;
            }
        }
    }
}

type Client = WebSocketStream<TcpStream>;

/// Opens a WebSocket through the gateway as `tenant` (`None`: without a
/// credential) with `extra` header fields.
async fn connect(
    fixture: &Fixture,
    tenant: Option<&str>,
    extra: &[(&'static str, &str)],
) -> Handshake {
    let key = tenant.map(|tenant| fixture.api_key(tenant));
    connect_to(fixture.running.addr, key, extra).await
}

/// What a client's handshake came to.
type Handshake = Result<(Client, tungstenite::handshake::client::Response), tungstenite::Error>;

/// Opens a WebSocket through the gateway at `addr` with the API key `key`.
async fn connect_to(
    addr: SocketAddr,
    key: Option<&str>,
    extra: &[(&'static str, &str)],
) -> Handshake {
    let mut request = format!("ws://{addr}/chat?room=1")
        .into_client_request()
        .unwrap();
    if let Some(key) = key {
        let bearer = format!("Bearer {key}");
        request
            .headers_mut()
            .insert("authorization", bearer.parse().unwrap());
    }
    for (name, value) in extra {
        request.headers_mut().append(*name, value.parse().unwrap());
    }
    let stream = TcpStream::connect(addr).await.unwrap();
    tokio::time::timeout(HANG, client_async(request, stream))
        .await
        .expect("the upgrade neither succeeded nor failed")
}

/// A WebSocket upgrade request as `tenant`, written by hand with `extra`
/// header lines and `body` (what a client library would not send).
fn raw_upgrade(fixture: &Fixture, tenant: &str, extra: &[&str], body: &[u8]) -> Vec<u8> {
    let key = bearer_line(fixture, tenant);
    let mut lines = vec![
        "Host: gateway",
        &key,
        "Connection: Upgrade",
        "Upgrade: websocket",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    ];
    lines.extend_from_slice(extra);
    raw("GET /chat HTTP/1.1", &lines, body)
}

/// The status a refused upgrade got.
fn refused(result: Handshake) -> u16 {
    match result {
        Err(tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(error) => panic!("expected an HTTP answer, got {error}"),
        Ok((_, response)) => panic!("expected a refusal, got {}", response.status()),
    }
}

/// The next message, failing on a hang.
async fn next<S>(client: &mut WebSocketStream<S>) -> Option<Result<Message, tungstenite::Error>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tokio::time::timeout(HANG, client.next())
        .await
        .expect("no message and no close")
}

/// Skips the shard's welcome, then checks that `message` comes back.
async fn echoes(client: &mut Client, message: Message) {
    client.send(message.clone()).await.unwrap();
    loop {
        let got = next(client).await.expect("a message").unwrap();
        if got == Message::text("welcome") {
            continue;
        }
        assert_eq!(got, message);
        return;
    }
}

/// Whether the client sees its tunnel end (a close, an error or the
/// stream's end) before anything else arrives.
async fn ends(client: &mut Client) -> bool {
    loop {
        match next(client).await {
            None | Some(Err(_)) => return true,
            Some(Ok(Message::Close(_))) => {}
            Some(Ok(message)) if message == Message::text("welcome") => {}
            Some(Ok(_)) => return false,
        }
    }
}

/// Scrapes until `check` holds, failing after [`HANG`].
async fn scraped_until(fixture: &Fixture, check: impl Fn(&Exposition) -> bool) -> Exposition {
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        let metrics = fixture.scrape().await;
        if check(&metrics) {
            return metrics;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the metrics never settled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn open_tunnels(metrics: &Exposition) -> f64 {
    metrics.sum("shuffle_websocket_tunnels_open", &[("cell", "default")])
}

fn in_flight(metrics: &Exposition) -> f64 {
    metrics.sum(
        "shuffle_shard_in_flight",
        &[("cell", "default"), ("shard", "c0")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_and_binary_frames_pass_both_ways_and_the_close_is_clean() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("").await;
    let tenant = fixture.tenants[0].0.clone();
    let victim = fixture.tenants[1].0.clone();
    let (mut client, response) = connect(
        &fixture,
        Some(&tenant),
        &[
            ("sec-websocket-protocol", "chat, superchat"),
            ("x-shuffle-tenant", &victim),
            ("x_shuffle_shard", "s9"),
        ],
    )
    .await
    .expect("the upgrade succeeds");
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    // The shard's handshake answer reaches the client; placement does not.
    assert_eq!(response.headers()["sec-websocket-protocol"], "chat");
    assert!(response.headers().get("x-shuffle-leak").is_none());
    // What the shard sent with its 101 comes first.
    assert_eq!(
        next(&mut client).await.unwrap().unwrap(),
        Message::text("welcome")
    );
    echoes(&mut client, Message::text("hello, shard")).await;
    echoes(&mut client, Message::binary(vec![0_u8, 1, 2, 255])).await;
    echoes(&mut client, Message::text("again")).await;
    client.close(None).await.unwrap();
    let got = next(&mut client).await;
    assert!(matches!(got, Some(Ok(Message::Close(_)))), "{got:?}");
    assert!(
        next(&mut client).await.is_none(),
        "the stream ends after the close"
    );

    let upgrades = shard.upgrades();
    assert_eq!(upgrades.len(), 1);
    let head = &upgrades[0];
    assert_eq!(values(head, "x-shuffle-tenant"), [tenant.as_str()]);
    assert_eq!(values(head, "x-shuffle-shard"), ["c0"]);
    assert!(values(head, "x_shuffle_shard").is_empty());
    assert!(values(head, "authorization").is_empty(), "{head:?}");
    assert_eq!(values(head, "connection"), ["upgrade"]);
    assert_eq!(values(head, "upgrade"), ["websocket"]);
    assert_eq!(values(head, "sec-websocket-version"), ["13"]);
    assert_eq!(values(head, "sec-websocket-key").len(), 1);
    assert_eq!(values(head, "sec-websocket-protocol"), ["chat, superchat"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_without_a_credential_gets_401_and_reaches_no_shard() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("").await;
    assert_eq!(refused(connect(&fixture, None, &[]).await), 401);
    let wrong = [("x-api-key", "not-a-key")];
    assert_eq!(refused(connect(&fixture, None, &wrong).await), 401);
    assert!(shard.upgrades().is_empty());
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.value(
            "shuffle_websocket_upgrades_total",
            &[("cell", ""), ("outcome", "unauthorized")]
        ),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_where_nothing_moves_is_closed_at_the_idle_timeout() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard
        .gateway("[limits]\nwebsocket_idle_timeout_ms = 300\n")
        .await;
    let tenant = fixture.tenants[0].0.clone();
    let (mut client, _) = connect(&fixture, Some(&tenant), &[]).await.unwrap();
    echoes(&mut client, Message::text("still here")).await;
    assert!(ends(&mut client).await, "the idle tunnel was closed");
    let metrics = scraped_until(&fixture, |m| in_flight(m) == 0.0).await;
    assert_eq!(
        metrics.value(
            "shuffle_websocket_tunnels_closed_total",
            &[("cell", "default"), ("reason", "idle")]
        ),
        1.0
    );
    assert_eq!(open_tunnels(&metrics), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_refuses_connections_is_failed_over_before_the_upgrade() {
    let shard = WsShard::start(Answer::Echo).await;
    // A port nothing listens on.
    let dead = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let fixture = Fixture::start(Options {
        shards: 0,
        tenants: 2,
        k: 2,
        custom_shards: vec![
            ("dead".into(), format!("http://{dead}")),
            ("c0".into(), format!("http://{}", shard.addr)),
        ],
        // Only the attempts judge the dead member, and never eject it: each
        // upgrade picks its first member afresh.
        health: "interval_ms = 60000\ntimeout_ms = 2000\n".into(),
        outlier: "consecutive_failures = 1000000\n".into(),
        ..Options::default()
    })
    .await;
    let tenant = fixture.tenants[0].0.clone();
    let dead_shard = fixture.shard("dead");
    let mut upgrades = 0;
    while dead_shard
        .attempts
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        assert!(upgrades < 60, "the dead member was never chosen first");
        let (mut client, _) = connect(&fixture, Some(&tenant), &[])
            .await
            .expect("failed over to the live member");
        echoes(&mut client, Message::text("through")).await;
        upgrades += 1;
    }
    assert_eq!(shard.upgrades().len(), upgrades);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_declines_the_upgrade_gets_its_answer_passed_back() {
    let shard = WsShard::start(Answer::Status(404)).await;
    let fixture = shard.gateway("").await;
    let tenant = fixture.tenants[0].0.clone();
    assert_eq!(refused(connect(&fixture, Some(&tenant), &[]).await), 404);
    shard.answer(Answer::Status(200));
    assert_eq!(refused(connect(&fixture, Some(&tenant), &[]).await), 200);
    // A declined upgrade is not retried: the shard may have acted on it.
    assert_eq!(shard.upgrades().len(), 2);
    // And its body arrives as any response's would, placement stripped.
    let request = raw_upgrade(&fixture, &tenant, &[], b"");
    let response = raw_request(fixture.running.addr, &request).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"declined");
    assert!(response.header("x-shuffle-leak").is_none());
    let metrics = fixture.scrape().await;
    let declined = [("cell", "default"), ("outcome", "declined")];
    assert_eq!(
        metrics.value("shuffle_websocket_upgrades_total", &declined),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_101_nobody_asked_for_is_a_bad_gateway() {
    let shard = WsShard::start(Answer::SwitchElsewhere).await;
    let fixture = shard.gateway("").await;
    let tenant = fixture.tenants[0].0.clone();
    // To a plain request.
    *shard.switch_plain.lock().unwrap() = true;
    assert_eq!(
        fixture.get(&tenant, "/plain").await.0,
        StatusCode::BAD_GATEWAY
    );
    assert_eq!(shard.plain().len(), 1);
    // To an upgrade, switching to another protocol.
    assert_eq!(refused(connect(&fixture, Some(&tenant), &[]).await), 502);
    assert_eq!(shard.upgrades().len(), 1, "not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_tunnel_counts_in_the_gauge_and_in_flight_until_it_closes() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("").await;
    let tenant = fixture.tenants[0].0.clone();
    let (mut client, _) = connect(&fixture, Some(&tenant), &[]).await.unwrap();
    echoes(&mut client, Message::text("open")).await;
    let metrics = fixture.scrape().await;
    assert_eq!(open_tunnels(&metrics), 1.0);
    assert_eq!(in_flight(&metrics), 1.0);
    let cell = [("cell", "default"), ("outcome", "switched")];
    assert_eq!(
        metrics.value("shuffle_websocket_upgrades_total", &cell),
        1.0
    );
    // The upgrade is one successful request of the tenant's.
    let ok = [("cell", "default"), ("outcome", "ok")];
    assert_eq!(metrics.value("shuffle_requests_total", &ok), 1.0);

    client.close(None).await.unwrap();
    assert!(ends(&mut client).await);
    let metrics = scraped_until(&fixture, |m| open_tunnels(m) == 0.0 && in_flight(m) == 0.0).await;
    assert_eq!(
        metrics.value(
            "shuffle_websocket_tunnels_closed_total",
            &[("cell", "default"), ("reason", "closed")]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_closes_mid_tunnel_closes_the_clients_side() {
    let shard = WsShard::start(Answer::EchoOnceThenDrop).await;
    let fixture = shard.gateway("").await;
    let tenant = fixture.tenants[0].0.clone();
    let (mut client, _) = connect(&fixture, Some(&tenant), &[]).await.unwrap();
    echoes(&mut client, Message::text("once")).await;
    assert!(ends(&mut client).await, "the client's side was closed");
    scraped_until(&fixture, |m| open_tunnels(m) == 0.0 && in_flight(m) == 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_tunnels_at_once_all_echo() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("").await;
    let keys: Vec<String> = fixture.tenants.iter().map(|(_, key)| key.clone()).collect();
    let mut clients = Vec::new();
    for i in 0..50 {
        let (addr, key) = (fixture.running.addr, keys[i % keys.len()].clone());
        clients.push(tokio::spawn(async move {
            let (mut client, _) = connect_to(addr, Some(&key), &[]).await.unwrap();
            for round in 0..3 {
                echoes(&mut client, Message::text(format!("{i}/{round}"))).await;
            }
            client
        }));
    }
    let mut open = Vec::new();
    for client in clients {
        open.push(client.await.unwrap());
    }
    // All fifty at once, then all closed.
    assert_eq!(open_tunnels(&fixture.scrape().await), 50.0);
    for client in &mut open {
        client.close(None).await.unwrap();
    }
    scraped_until(&fixture, |m| open_tunnels(m) == 0.0 && in_flight(m) == 0.0).await;
    assert_eq!(shard.upgrades().len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_stalls_before_answering_the_upgrade_gets_the_client_a_504() {
    let shard = WsShard::start(Answer::Stall).await;
    let fixture = shard.gateway("").await;
    let tenant = fixture.tenants[0].0.clone();
    // The per-try timeout (300 ms in the fixture) ends the wait.
    assert_eq!(refused(connect(&fixture, Some(&tenant), &[]).await), 504);
    assert_eq!(shard.upgrades().len(), 1);
    scraped_until(&fixture, |m| in_flight(m) == 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_with_a_body_gets_400_and_reaches_no_shard() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("").await;
    let tenant = fixture.tenants[0].0.clone();
    let request = raw_upgrade(&fixture, &tenant, &["Content-Length: 5"], b"\x81\x03abc");
    let response = raw_request(fixture.running.addr, &request).await;
    assert_eq!(response.status, 400);
    assert!(shard.upgrades().is_empty() && shard.plain().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_upgrades_are_served_as_plain_requests_without_their_upgrade_fields() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("").await;
    let tenant = fixture.tenants[0].0.clone();
    let key = bearer_line(&fixture, &tenant);
    for (method, upgrade) in [("GET", "h2c"), ("POST", "websocket")] {
        let request = raw(
            &format!("{method} /plain HTTP/1.1"),
            &[
                "Host: gateway",
                &key,
                "Connection: Upgrade, HTTP2-Settings",
                &format!("Upgrade: {upgrade}"),
                "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA",
                "Content-Length: 0",
            ],
            b"",
        );
        let response = raw_request(fixture.running.addr, &request).await;
        assert_eq!(response.status, 200, "{method} {upgrade}");
    }
    assert!(shard.upgrades().is_empty());
    let plain = shard.plain();
    assert_eq!(plain.len(), 2);
    for head in &plain {
        for gone in ["upgrade", "http2-settings"] {
            assert!(values(head, gone).is_empty(), "{gone}: {head:?}");
        }
        assert!(
            !values(head, "connection")
                .iter()
                .any(|v| v.contains("pgrade")),
            "{head:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_shutdown_closes_open_tunnels_after_the_grace_period() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("[limits]\nshutdown_grace_ms = 100\n").await;
    let tenant = fixture.tenants[0].0.clone();
    let (mut client, _) = connect(&fixture, Some(&tenant), &[]).await.unwrap();
    echoes(&mut client, Message::text("before")).await;
    let Fixture { running, .. } = fixture;
    let gateway = Arc::clone(&running.gateway);
    tokio::time::timeout(HANG, running.shutdown())
        .await
        .expect("shutdown finished");
    assert!(ends(&mut client).await, "the tunnel was closed");
    assert!(
        gateway
            .snapshot()
            .all_shards()
            .all(|shard| shard.in_flight() == 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_over_the_tls_listener_echoes_both_ways() {
    let shard = WsShard::start(Answer::Echo).await;
    let certs = tempfile::tempdir().unwrap();
    let ca = crate::pki::Ca::new("websocket TLS CA");
    let (cert, key) = ca.server(&["localhost"]).write(certs.path(), "server");
    let fixture = shard
        .gateway(&format!(
            "[tls]\nlisten = \"127.0.0.1:0\"\ncert_file = {cert:?}\nkey_file = {key:?}\n"
        ))
        .await;
    let tenant = fixture.tenants[0].0.clone();
    // wss:// as a browser does it: TLS with ALPN http/1.1, then the upgrade.
    let tls = crate::pki::connect(
        fixture.running.tls_addr.unwrap(),
        "localhost",
        crate::pki::client_config(&[ca.der()], None, &[]),
    )
    .await
    .unwrap();
    let mut request = "wss://localhost/chat".into_client_request().unwrap();
    let bearer = format!("Bearer {}", fixture.api_key(&tenant));
    request
        .headers_mut()
        .insert("authorization", bearer.parse().unwrap());
    let (mut client, response) = tokio::time::timeout(HANG, client_async(request, tls))
        .await
        .expect("the upgrade neither succeeded nor failed")
        .expect("the upgrade succeeds over TLS");
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(
        next(&mut client).await.unwrap().unwrap(),
        Message::text("welcome")
    );
    for message in [
        Message::text("over tls"),
        Message::binary(vec![9_u8; 70_000]),
    ] {
        client.send(message.clone()).await.unwrap();
        assert_eq!(next(&mut client).await.unwrap().unwrap(), message);
    }
    client.close(None).await.unwrap();
    let upgrades = shard.upgrades();
    assert_eq!(upgrades.len(), 1);
    assert_eq!(values(&upgrades[0], "x-shuffle-tenant"), [tenant.as_str()]);
}

/// The admin token [`WsShard::gateway`] sets.
const ADMIN_TOKEN: &str = "websocket-test-admin-token-0123";

/// `tenant`'s requests in flight as its limits count them (0 when its
/// in-flight requests are not limited).
fn tenant_in_flight(fixture: &Fixture, tenant: &str) -> u64 {
    let snapshot = fixture.running.gateway.snapshot();
    let position = snapshot.tenants.get(tenant).unwrap().slot();
    snapshot
        .limits
        .of(position)
        .map_or(0, |limit| limit.state.in_flight())
}

/// Waits until `tenant` has `count` requests in flight, failing after
/// [`HANG`].
async fn tenant_in_flight_becomes(fixture: &Fixture, tenant: &str, count: u64) {
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        let now = tenant_in_flight(fixture, tenant);
        if now == count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{tenant} has {now} requests in flight, never {count}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A tunnel as `tenant` that opened and echoes.
async fn open_tunnel(fixture: &Fixture, tenant: &str) -> Client {
    let (mut client, response) = connect(fixture, Some(tenant), &[])
        .await
        .expect("the upgrade succeeds");
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    echoes(&mut client, Message::text("open")).await;
    client
}

/// Asserts that an upgrade as `tenant` now is refused for its in-flight
/// limit, as any request over it is: 429, `Retry-After: 1`, the JSON error
/// naming the limit; and that it opened nothing.
async fn upgrade_is_refused_in_flight(fixture: &Fixture, tenant: &str) {
    let response = raw_request(
        fixture.running.addr,
        &raw_upgrade(fixture, tenant, &[], b""),
    )
    .await;
    assert_eq!(response.status, 429, "{}", response.head);
    assert_eq!(response.header("retry-after"), Some("1"));
    let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(body["status"], 429);
    assert!(
        body["error"].as_str().unwrap().contains("in flight"),
        "{body}"
    );
}

/// Asserts that `tenant` (limited to `max` in flight, with nothing in
/// flight) has room for exactly `max` tunnels: they open, the next is
/// refused, and once they are closed nothing of theirs is left in flight.
/// A place given back twice would leave room for one more; one never
/// given back, room for one fewer.
async fn room_for_exactly(fixture: &Fixture, tenant: &str, max: u64) {
    let mut open = Vec::new();
    for _ in 0..max {
        open.push(open_tunnel(fixture, tenant).await);
    }
    assert_eq!(tenant_in_flight(fixture, tenant), max);
    upgrade_is_refused_in_flight(fixture, tenant).await;
    for client in &mut open {
        client.close(None).await.unwrap();
        assert!(ends(client).await);
    }
    tenant_in_flight_becomes(fixture, tenant, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_limited_to_two_is_refused_a_third_tunnel_and_listed_under_limited() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("[limits.tenant]\nmax_in_flight = 2\n").await;
    let tenant = fixture.tenants[0].0.clone();
    let mut first = open_tunnel(&fixture, &tenant).await;
    let mut second = open_tunnel(&fixture, &tenant).await;
    assert_eq!(tenant_in_flight(&fixture, &tenant), 2);

    // The third, through a WebSocket client: 429, and no shard asked.
    assert_eq!(refused(connect(&fixture, Some(&tenant), &[]).await), 429);
    upgrade_is_refused_in_flight(&fixture, &tenant).await;
    assert_eq!(shard.upgrades().len(), 2);

    // Listed as limited, with its tunnels in flight.
    let view = fixture.admin_json("GET", "/admin/tenants?limited=5").await;
    let rows = view["tenants"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{view}");
    assert_eq!(rows[0]["tenant"], tenant.as_str());
    assert_eq!(rows[0]["in_flight_limited"], 2);
    assert_eq!(rows[0]["rate_limited"], 0);
    assert_eq!(rows[0]["in_flight"], 2);
    assert_eq!(rows[0]["max_in_flight"], 2);
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.value(
            "shuffle_tenant_limited_total",
            &[("cell", "default"), ("limit", "in_flight")]
        ),
        2.0
    );
    let refused_upgrades = [("cell", "default"), ("outcome", "client_error")];
    assert_eq!(
        metrics.value("shuffle_websocket_upgrades_total", &refused_upgrades),
        2.0
    );
    assert_eq!(open_tunnels(&metrics), 2.0);

    // One closed gives one place back, once: another opens, and a fourth
    // is refused again.
    first.close(None).await.unwrap();
    assert!(ends(&mut first).await);
    tenant_in_flight_becomes(&fixture, &tenant, 1).await;
    let mut again = open_tunnel(&fixture, &tenant).await;
    upgrade_is_refused_in_flight(&fixture, &tenant).await;
    echoes(&mut second, Message::text("still open")).await;
    for client in [&mut second, &mut again] {
        client.close(None).await.unwrap();
        assert!(ends(client).await);
    }
    tenant_in_flight_becomes(&fixture, &tenant, 0).await;
    scraped_until(&fixture, |m| open_tunnels(m) == 0.0 && in_flight(m) == 0.0).await;
    room_for_exactly(&fixture, &tenant, 2).await;
    assert_eq!(shard.upgrades().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_tunnel_ends_gives_its_tenants_place_back_exactly_once() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("[limits.tenant]\nmax_in_flight = 2\n").await;
    let tenant = fixture.tenants[0].0.clone();

    // The client closes cleanly.
    let mut client = open_tunnel(&fixture, &tenant).await;
    assert_eq!(tenant_in_flight(&fixture, &tenant), 1);
    client.close(None).await.unwrap();
    assert!(ends(&mut client).await);
    tenant_in_flight_becomes(&fixture, &tenant, 0).await;
    room_for_exactly(&fixture, &tenant, 2).await;

    // The client resets its connection.
    let client = open_tunnel(&fixture, &tenant).await;
    assert_eq!(tenant_in_flight(&fixture, &tenant), 1);
    client.get_ref().set_zero_linger().unwrap();
    drop(client);
    tenant_in_flight_becomes(&fixture, &tenant, 0).await;
    room_for_exactly(&fixture, &tenant, 2).await;

    // The shard closes, then resets, mid-tunnel.
    for answer in [Answer::EchoOnceThenDrop, Answer::EchoOnceThenReset] {
        shard.answer(answer);
        let mut client = open_tunnel(&fixture, &tenant).await;
        assert!(ends(&mut client).await, "{answer:?}");
        tenant_in_flight_becomes(&fixture, &tenant, 0).await;
        shard.answer(Answer::Echo);
        room_for_exactly(&fixture, &tenant, 2).await;
    }

    // Open across a reload that changes the tenant's limit: still counted
    // after it, and given back once under the new limit.
    let config = fixture.config_path();
    let text = std::fs::read_to_string(&config).unwrap();
    let mut client = open_tunnel(&fixture, &tenant).await;
    std::fs::write(
        &config,
        text.replace("max_in_flight = 2", "max_in_flight = 3"),
    )
    .unwrap();
    let reloaded = fixture.admin_json("POST", "/admin/reload").await;
    assert_eq!(reloaded["reloaded"], true, "{reloaded}");
    assert_eq!(tenant_in_flight(&fixture, &tenant), 1);
    let mut two = open_tunnel(&fixture, &tenant).await;
    let mut three = open_tunnel(&fixture, &tenant).await;
    upgrade_is_refused_in_flight(&fixture, &tenant).await;
    for client in [&mut client, &mut two, &mut three] {
        client.close(None).await.unwrap();
        assert!(ends(client).await);
    }
    tenant_in_flight_becomes(&fixture, &tenant, 0).await;
    room_for_exactly(&fixture, &tenant, 3).await;

    // The idle timeout, set by a reload: it applies to tunnels opened
    // afterwards.
    std::fs::write(
        &config,
        format!("{text}\n[limits]\ntunnel_idle_timeout_ms = 1000\n"),
    )
    .unwrap();
    let reloaded = fixture.admin_json("POST", "/admin/reload").await;
    assert_eq!(reloaded["reloaded"], true, "{reloaded}");
    let mut client = open_tunnel(&fixture, &tenant).await;
    assert!(ends(&mut client).await, "the idle tunnel was closed");
    tenant_in_flight_becomes(&fixture, &tenant, 0).await;
    room_for_exactly(&fixture, &tenant, 2).await;
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.value(
            "shuffle_websocket_tunnels_closed_total",
            &[("cell", "default"), ("reason", "idle")]
        ),
        1.0
    );
    assert_eq!(open_tunnels(&metrics), 0.0);
    assert_eq!(in_flight(&metrics), 0.0);

    // Gateway shutdown, after its grace period (and no idle timeout
    // before it).
    std::fs::write(
        &config,
        format!("{text}\n[limits]\nshutdown_grace_ms = 100\n"),
    )
    .unwrap();
    let reloaded = fixture.admin_json("POST", "/admin/reload").await;
    assert_eq!(reloaded["reloaded"], true, "{reloaded}");
    let _open = [
        open_tunnel(&fixture, &tenant).await,
        open_tunnel(&fixture, &tenant).await,
    ];
    assert_eq!(tenant_in_flight(&fixture, &tenant), 2);
    let limit = {
        let snapshot = fixture.running.gateway.snapshot();
        let position = snapshot.tenants.get(&tenant).unwrap().slot();
        Arc::clone(&snapshot.limits.of(position).unwrap().state)
    };
    let Fixture { running, .. } = fixture;
    tokio::time::timeout(HANG, running.shutdown())
        .await
        .expect("shutdown finished");
    assert_eq!(limit.in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_tunnels_cannot_take_the_shards_last_places_from_other_tenants() {
    let shard = WsShard::start(Answer::Echo).await;
    // Room on the shard for three; each tenant may have two in flight.
    let fixture = shard
        .gateway("[limits.tenant]\nmax_in_flight = 2\n[limits.shard]\nmax_in_flight = 3\n")
        .await;
    let (whale, other) = (fixture.tenants[0].0.clone(), fixture.tenants[1].0.clone());
    let mut whales = [
        open_tunnel(&fixture, &whale).await,
        open_tunnel(&fixture, &whale).await,
    ];
    // However often it asks, the whale gets 429 for more, never the
    // shard's last place, and no shard hears of it.
    for _ in 0..5 {
        assert_eq!(refused(connect(&fixture, Some(&whale), &[]).await), 429);
    }
    assert_eq!(shard.upgrades().len(), 2);
    // The other tenant is served: a plain request, then a tunnel in the
    // last place.
    let (status, body) = fixture.get(&other, "/plain").await;
    assert_eq!((status, &body[..]), (StatusCode::OK, &b"ok"[..]));
    let plain = shard.plain();
    assert_eq!(plain.len(), 1);
    assert_eq!(values(&plain[0], "x-shuffle-tenant"), [other.as_str()]);
    let mut others = open_tunnel(&fixture, &other).await;
    let upgrades = shard.upgrades();
    assert_eq!(upgrades.len(), 3);
    assert_eq!(values(&upgrades[2], "x-shuffle-tenant"), [other.as_str()]);
    assert_eq!(in_flight(&fixture.scrape().await), 3.0);
    echoes(&mut others, Message::text("mine")).await;
    for client in whales.iter_mut().chain([&mut others]) {
        client.close(None).await.unwrap();
        assert!(ends(client).await);
    }
    scraped_until(&fixture, |m| open_tunnels(m) == 0.0 && in_flight(m) == 0.0).await;
    tenant_in_flight_becomes(&fixture, &whale, 0).await;
    tenant_in_flight_becomes(&fixture, &other, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tunnel_is_closed_at_the_tunnel_idle_timeout_and_one_with_traffic_is_not() {
    let shard = WsShard::start(Answer::Echo).await;
    // Traffic every 50 ms against a 1.5 s timeout: only a machine stalled
    // for over a second could close the busy tunnel.
    let fixture = shard
        .gateway("[limits]\ntunnel_idle_timeout_ms = 1500\n[limits.tenant]\nmax_in_flight = 2\n")
        .await;
    let tenant = fixture.tenants[0].0.clone();
    let mut quiet = open_tunnel(&fixture, &tenant).await;
    let mut busy = open_tunnel(&fixture, &tenant).await;
    let started = tokio::time::Instant::now();
    let mut round = 0;
    // Three timeouts' worth of traffic on the busy one.
    while started.elapsed() < Duration::from_millis(4500) {
        echoes(&mut busy, Message::text(format!("{round}"))).await;
        round += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ends(&mut quiet).await, "the quiet tunnel was closed");
    echoes(&mut busy, Message::text("still open")).await;
    tenant_in_flight_becomes(&fixture, &tenant, 1).await;
    let metrics = scraped_until(&fixture, |m| open_tunnels(m) == 1.0).await;
    assert_eq!(
        metrics.value(
            "shuffle_websocket_tunnels_closed_total",
            &[("cell", "default"), ("reason", "idle")]
        ),
        1.0
    );
    assert_eq!(in_flight(&metrics), 1.0);
    busy.close(None).await.unwrap();
    assert!(ends(&mut busy).await);
    tenant_in_flight_becomes(&fixture, &tenant, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_a_bad_tunnel_idle_timeout_is_refused_naming_the_key() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("").await;
    let config = fixture.config_path();
    let good = std::fs::read_to_string(&config).unwrap();
    for (limits, expected) in [
        (
            "tunnel_idle_timeout_ms = 0",
            "limits.tunnel_idle_timeout_ms: 0 is out of range; use a value from 1 to 86400000",
        ),
        (
            "tunnel_idle_timeout_ms = 1000\nwebsocket_idle_timeout_ms = 1000",
            "remove limits.websocket_idle_timeout_ms",
        ),
    ] {
        std::fs::write(&config, format!("{good}\n[limits]\n{limits}\n")).unwrap();
        let (status, _, body) = fixture
            .admin("POST", "/admin/reload", Some(ADMIN_TOKEN))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(expected), "{error}");
        assert!(!error.contains('\n'), "{error}");
    }
    // The old configuration still serves.
    assert_eq!(
        fixture.config().limits().tunnel_idle_timeout,
        Duration::from_secs(300)
    );
    let tenant = fixture.tenants[0].0.clone();
    open_tunnel(&fixture, &tenant).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_a_tenant_closes_its_tunnels_and_no_others() {
    let shard = WsShard::start(Answer::Echo).await;
    let fixture = shard.gateway("[limits.tenant]\nmax_in_flight = 2\n").await;
    let (revoked, kept) = (fixture.tenants[0].0.clone(), fixture.tenants[1].0.clone());
    let mut gone = open_tunnel(&fixture, &revoked).await;
    let mut staying = open_tunnel(&fixture, &kept).await;
    let limit = {
        let snapshot = fixture.running.gateway.snapshot();
        let position = snapshot.tenants.get(&revoked).unwrap().slot();
        Arc::clone(&snapshot.limits.of(position).unwrap().state)
    };
    // A reload that keeps both tenants closes nothing.
    let reloaded = fixture.admin_json("POST", "/admin/reload").await;
    assert_eq!(reloaded["reloaded"], true, "{reloaded}");
    echoes(&mut gone, Message::text("still mine")).await;

    // The operator revokes the first tenant.
    std::fs::write(
        fixture.dir.path().join("tenants.toml"),
        gateway::config::writer::tenants_toml(&fixture.tenants[1..]),
    )
    .unwrap();
    let reloaded = fixture.admin_json("POST", "/admin/reload").await;
    assert_eq!(reloaded["reloaded"], true, "{reloaded}");
    assert!(
        ends(&mut gone).await,
        "the revoked tenant's tunnel was closed"
    );
    assert_eq!(refused(connect(&fixture, Some(&revoked), &[]).await), 401);
    // The other tenant's tunnel is untouched.
    echoes(&mut staying, Message::text("still here")).await;
    let metrics = scraped_until(&fixture, |m| open_tunnels(m) == 1.0 && in_flight(m) == 1.0).await;
    assert_eq!(
        metrics.value(
            "shuffle_websocket_tunnels_closed_total",
            &[("cell", "default"), ("reason", "revoked")]
        ),
        1.0
    );
    let deadline = tokio::time::Instant::now() + HANG;
    while limit.in_flight() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "its place was never given back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(tenant_in_flight(&fixture, &kept), 1);
    staying.close(None).await.unwrap();
    assert!(ends(&mut staying).await);
    scraped_until(&fixture, |m| open_tunnels(m) == 0.0 && in_flight(m) == 0.0).await;
}
