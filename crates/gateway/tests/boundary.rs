//! The trust boundary beyond request headers (issue #16): trailers in both
//! directions, request targets that would climb out of a shard's path
//! prefix, `CONNECT`, the forwarding headers a client may not vouch for,
//! an admin listener opened to other hosts without its token, and
//! configuration values out of any sane range.
//!
//! Requests go over raw sockets where a client library would normalise
//! them; what the shard received is read back from it (`Backend::seen`, or
//! a test's own shard that also records trailers).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backend::{Backend, Seen};
use bytes::Bytes;
use gateway::Snapshot;
use gateway::config::writer::{GatewayToml, Shard};
use http::{HeaderMap, Response};
use http_body_util::BodyExt;
use hyper::body::Frame;
use tokio::net::TcpStream;

use crate::util::{
    CustomShard, Fixture, Options, RawResponse, ShardBody, TestBody, bearer_line, exchange, raw,
    raw_request, raw_until_closed, text,
};

/// How long an answer may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// Helpers.

/// A header name as a CGI-style backend reads it: lowercase, `_` as `-`.
fn read_as(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

/// Every `(name, value)` of a header map, names as hyper keeps them
/// (lowercase).
fn pairs(map: &HeaderMap) -> Vec<(String, String)> {
    map.iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// Every request any of the fixture's backends saw.
fn everything_seen(fixture: &Fixture) -> Vec<Seen> {
    fixture.backends.iter().flat_map(Backend::seen).collect()
}

/// What a test's own shard received of one request.
#[derive(Debug, Clone, Default)]
struct Received {
    headers: Vec<(String, String)>,
    trailers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A shard that records each request's headers, body and trailers (the
/// test backend records headers only) and answers 200.
async fn recording_shard() -> (CustomShard, Arc<Mutex<Vec<Received>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&received);
    let shard = CustomShard::start(move |request| {
        let log = Arc::clone(&log);
        async move {
            let headers = pairs(request.headers());
            let (body, trailers) = match request.into_body().collect().await {
                Ok(collected) => {
                    let trailers = collected.trailers().map(pairs).unwrap_or_default();
                    (collected.to_bytes().to_vec(), trailers)
                }
                Err(error) => (format!("<body failed: {error}>").into_bytes(), Vec::new()),
            };
            log.lock().unwrap().push(Received {
                headers,
                trailers,
                body,
            });
            text(200, "ok")
        }
    })
    .await;
    (shard, received)
}

// ---------------------------------------------------------------------------
// Trailers.

/// A client's trailer section passes the same filter as its head: nothing
/// in it can name a tenant or shard, carry a credential, vouch for an
/// address, or reframe the request; a harmless trailer still arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_trailers_cannot_smuggle_identity() {
    let (shard, received) = recording_shard().await;
    let fixture = shard.gateway().await;
    let tenant = fixture.tenants[0].0.clone();
    let auth = bearer_line(&fixture, &tenant);
    let trailers = [
        "x-shuffle-tenant: victim",
        "X_Shuffle_Shard: s9",
        "authorization: Bearer stolen",
        "x-api-key: k",
        "x-forwarded-for: 6.6.6.6",
        "content-length: 5",
        "host: evil",
        "x-checksum: abc",
    ];
    let mut body = b"5\r\nhello\r\n3\r\n!!!\r\n0\r\n".to_vec();
    for line in trailers {
        body.extend_from_slice(line.as_bytes());
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"\r\n");
    for method in ["POST", "PUT"] {
        received.lock().unwrap().clear();
        let request = raw(
            &format!("{method} /x HTTP/1.1"),
            &[
                "Host: gateway",
                auth.as_str(),
                "Transfer-Encoding: chunked",
                "Trailer: x-checksum",
            ],
            &body,
        );
        let response = raw_request(fixture.running.addr, &request).await;
        assert_eq!(response.status, 200, "{method}: {}", response.head);
        let received = received.lock().unwrap().clone();
        assert_eq!(received.len(), 1, "{method}: {received:?}");
        let got = &received[0];
        assert_eq!(got.body, b"hello!!!", "{method}: {got:?}");

        // Nothing forbidden in the trailers the shard got...
        for (name, value) in &got.trailers {
            let name = read_as(name);
            assert!(
                !name.starts_with("x-shuffle-")
                    && ![
                        "authorization",
                        "x-api-key",
                        "x-forwarded-for",
                        "content-length",
                        "host",
                    ]
                    .contains(&name.as_str()),
                "{method}: the trailer {name}: {value} reached the shard: {got:?}"
            );
        }
        // ... nor did a trailer turn into a header.
        for (name, value) in &got.headers {
            let name = read_as(name);
            let smuggled = match name.as_str() {
                "x-shuffle-tenant" => value != &tenant,
                "x-shuffle-shard" => value != "c0",
                "authorization" | "x-api-key" => true,
                "x-forwarded-for" => value.contains("6.6.6.6"),
                "host" => value.contains("evil"),
                "content-length" => true, // the body went on chunked
                _ => name.starts_with("x-shuffle-"),
            };
            assert!(
                !smuggled,
                "{method}: the header {name}: {value} reached the shard: {got:?}"
            );
        }
        assert!(
            got.trailers
                .iter()
                .any(|(n, v)| n == "x-checksum" && v == "abc"),
            "{method}: the harmless trailer x-checksum: abc did not reach the shard: \
             trailers are to be filtered like headers, not dropped; it got {:?}",
            got.trailers
        );
    }
}

/// A backend's trailer section is filtered like its head: it never shows
/// the client placement, whichever way the response reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_trailers_never_reveal_placement() {
    let shard = CustomShard::start(|_request| async move {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-shuffle-shard", "s1".parse().unwrap());
        trailers.insert("x-shuffle-tenant", "t".parse().unwrap());
        trailers.insert("connection", "x".parse().unwrap());
        trailers.insert("x-checksum", "abc".parse().unwrap());
        let body = TestBody::frames([
            Frame::data(Bytes::from_static(b"hello")),
            Frame::trailers(trailers),
        ]);
        let mut response = Response::new(ShardBody::new(body));
        response.headers_mut().insert(
            "trailer",
            "x-shuffle-shard, x-shuffle-tenant, connection, x-checksum"
                .parse()
                .unwrap(),
        );
        response
    })
    .await;
    // The shard itself does send them (so this test can fail).
    let direct = raw_until_closed(
        shard.addr,
        &raw(
            "GET /t HTTP/1.1",
            &["Host: shard", "TE: trailers", "Connection: close"],
            b"",
        ),
        HANG,
    )
    .await;
    assert!(
        direct.contains("x-shuffle-shard: s1") && direct.contains("x-checksum: abc"),
        "{direct}"
    );
    let fixture = shard.gateway().await;
    let tenant = fixture.tenants[0].0.clone();
    let auth = bearer_line(&fixture, &tenant);
    // A GET (the connection's own loop writes the response) and a POST with
    // a body (hyper writes it), each asking for trailers.
    for (request_line, framing, body) in [
        ("GET /t HTTP/1.1", None, &b""[..]),
        ("POST /t HTTP/1.1", Some("Content-Length: 7"), b"payload"),
    ] {
        let mut lines = vec![
            "Host: gateway",
            auth.as_str(),
            "TE: trailers",
            "Connection: close",
        ];
        lines.extend(framing);
        let answer =
            raw_until_closed(fixture.running.addr, &raw(request_line, &lines, body), HANG).await;
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "{request_line}: {answer}"
        );
        assert!(answer.contains("hello"), "{request_line}: {answer}");
        for line in answer.lines() {
            let name = read_as(line.split(':').next().unwrap_or_default().trim());
            assert!(
                !name.starts_with("x-shuffle-"),
                "{request_line}: {line:?} reached the client: {answer}"
            );
        }
        if !answer.contains("x-checksum") {
            eprintln!("{request_line}: the harmless trailer x-checksum did not reach the client");
        }
    }
}

// ---------------------------------------------------------------------------
// Targets and a shard's path prefix.

/// A gateway whose only shard is a test backend under the prefix `/api/`
/// (the backend is returned: the fixture's own list is empty).
async fn prefixed_shard() -> (Backend, Fixture) {
    let backend = Backend::start("s0").await.unwrap();
    let fixture = Fixture::start(Options {
        shards: 0,
        tenants: 2,
        k: 1,
        custom_shards: vec![("s0".into(), format!("{}/api/", backend.url()))],
        ..Options::default()
    })
    .await;
    (backend, fixture)
}

/// What the backend behind a prefix saw, health checks left out.
fn traffic(backend: &Backend) -> Vec<Seen> {
    backend
        .seen()
        .into_iter()
        .filter(|seen| seen.path != "/api/healthz")
        .collect()
}

/// `method_and_target` over HTTP/1.1 with the `auth` line and `body`: an
/// empty body has no `Content-Length` (the connection's own loop serves
/// it), any other one does (hyper's path).
async fn send_with_body(
    fixture: &Fixture,
    auth: &str,
    method_and_target: &str,
    body: &[u8],
) -> RawResponse {
    let length = format!("Content-Length: {}", body.len());
    let mut lines = vec!["Host: gateway", auth];
    if !body.is_empty() {
        lines.push(&length);
    }
    raw_request(
        fixture.running.addr,
        &raw(&format!("{method_and_target} HTTP/1.1"), &lines, body),
    )
    .await
}

/// A target that would leave the shard's prefix (dot segments, encoded or
/// not, encoded slashes next to dots, backslashes) or is not a path at all
/// (`*`, authority-form) is refused with 400 before any shard sees it, on
/// the connection's own loop (no body) and on hyper's path (a body).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_that_escape_a_shard_prefix_get_400_and_reach_no_shard() {
    let (backend, fixture) = prefixed_shard().await;
    let auth = bearer_line(&fixture, "tenant-0");
    let targets = [
        ("GET", "/../admin/secret"),
        ("GET", "/a/../../admin"),
        ("GET", "/%2e%2e/admin"),
        ("GET", "/%2E%2e/admin"),
        ("GET", "/.%2e/admin"),
        ("GET", "/./x"),
        ("GET", "/a/%2e/b"),
        ("GET", "/..%2fadmin"),
        ("GET", "/..%2Fadmin"),
        ("GET", "/..\\admin"),
        // Path parameters: servlet containers resolve `..;` as `..`.
        ("GET", "/..;/admin"),
        ("GET", "/a/..;/admin"),
        ("GET", "/.;/admin"),
        ("GET", "/..%3B/admin"),
        ("OPTIONS", "*"),
        ("GET", "127.0.0.1:80"),
    ];
    for (method, target) in targets {
        for body in [&b""[..], b"hi"] {
            let response =
                send_with_body(&fixture, &auth, &format!("{method} {target}"), body).await;
            assert_eq!(
                response.status, 400,
                "{method} {target} (body {body:?}): {}",
                response.head
            );
            let seen = traffic(&backend);
            assert!(
                seen.is_empty(),
                "{method} {target} (body {body:?}) reached the shard: {seen:?}"
            );
        }
    }
}

/// Under a prefix, the headers through which IIS and Symfony let a proxy
/// override the path (`X-Original-URL`, `X-Rewrite-URL`, in any spelling)
/// never reach the shard, whatever `[forwarding]` says: they would undo the
/// prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_overrides_never_pass_under_a_prefix() {
    let (backend, fixture) = prefixed_shard().await;
    let auth = bearer_line(&fixture, "tenant-0");
    let lines = [
        "Host: gateway",
        auth.as_str(),
        "X-Original-URL: /admin",
        "x_rewrite_url: /admin",
        "X-REWRITE-URL: /admin",
    ];
    let response = raw_request(fixture.running.addr, &raw("GET /ok HTTP/1.1", &lines, b"")).await;
    assert_eq!(response.status, 200, "{}", response.head);
    let seen = traffic(&backend);
    assert_eq!(seen.len(), 1, "{seen:?}");
    for (name, value) in &seen[0].headers {
        let name = read_as(name);
        assert!(
            name != "x-original-url" && name != "x-rewrite-url",
            "{name}: {value} reached the shard"
        );
    }
}

/// Dots that do not make a dot segment (in the query, inside a segment, a
/// leading dot in a name) are ordinary targets, served under the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_targets_with_dots_are_served_under_the_prefix() {
    let (backend, fixture) = prefixed_shard().await;
    let auth = bearer_line(&fixture, "tenant-1");
    for target in ["/v1/items?x=..%2f", "/a..b/c", "/.well-known/x"] {
        for body in [&b""[..], b"hi"] {
            backend.clear_seen();
            let response = send_with_body(&fixture, &auth, &format!("POST {target}"), body).await;
            assert_eq!(response.status, 200, "{target}: {}", response.head);
            let paths: Vec<String> = traffic(&backend).into_iter().map(|s| s.path).collect();
            assert_eq!(paths, [format!("/api{target}")], "{target} (body {body:?})");
        }
    }
}

// ---------------------------------------------------------------------------
// CONNECT.

/// The gateway is no tunnel: `CONNECT`, even with a valid credential, gets
/// 405 with a JSON body and reaches no shard, whether it opens the
/// connection or follows a request the connection's loop served, or one
/// hyper served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_gets_405_in_json_and_reaches_no_shard() {
    let fixture = Fixture::start(Options {
        shards: 2,
        tenants: 2,
        k: 1,
        ..Options::default()
    })
    .await;
    let auth = bearer_line(&fixture, "tenant-0");
    let connect = raw(
        "CONNECT example.com:443 HTTP/1.1",
        &["Host: example.com:443", auth.as_str()],
        b"",
    );
    let check = |response: &RawResponse, context: &str| {
        assert_eq!(response.status, 405, "{context}: {}", response.head);
        assert!(
            response
                .header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{context}: {}",
            response.head
        );
        let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&response.body);
        assert!(
            parsed.is_ok(),
            "{context}: the body is not JSON: {:?}",
            String::from_utf8_lossy(&response.body)
        );
    };

    check(
        &raw_request(fixture.running.addr, &connect).await,
        "CONNECT first",
    );
    assert!(everything_seen(&fixture).is_empty());

    // After a request served on the connection: a GET without a body (the
    // loop's) and a POST with one (hyper's, which then keeps the
    // connection).
    for (first_line, framing, body, context) in [
        ("GET /first HTTP/1.1", None, &b""[..], "CONNECT after a GET"),
        (
            "POST /first HTTP/1.1",
            Some("Content-Length: 2"),
            b"hi",
            "CONNECT after a POST",
        ),
    ] {
        for backend in &fixture.backends {
            backend.clear_seen();
        }
        let mut lines = vec!["Host: gateway", auth.as_str()];
        lines.extend(framing);
        let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
        let first = exchange(&mut stream, &raw(first_line, &lines, body)).await;
        assert_eq!(first.status, 200, "{context}: {}", first.head);
        check(&exchange(&mut stream, &connect).await, context);
        let paths: Vec<String> = everything_seen(&fixture)
            .into_iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect();
        assert_eq!(paths.len(), 1, "{context}: {paths:?}");
        assert!(paths[0].ends_with(" /first"), "{context}: {paths:?}");
    }
}

// ---------------------------------------------------------------------------
// Forwarding headers.

/// The forwarding headers other than `x-forwarded-for` and
/// `x-forwarded-host` that backends commonly trust, in several spellings:
/// `(header line, the name as a CGI-style backend reads it)`.
const CLIENT_FORWARDING: [(&str, &str); 29] = [
    ("Forwarded: for=6.6.6.6;proto=https", "forwarded"),
    ("FORWARDED: for=6.6.6.7", "forwarded"),
    ("X-Real-IP: 6.6.6.8", "x-real-ip"),
    ("X_Real_IP: 6.6.6.9", "x-real-ip"),
    ("x-REAL-ip: 6.6.6.10", "x-real-ip"),
    ("True-Client-IP: 6.6.6.11", "true-client-ip"),
    ("true_client_ip: 6.6.6.12", "true-client-ip"),
    ("X-Forwarded-Proto: https", "x-forwarded-proto"),
    ("x_forwarded_proto: wss", "x-forwarded-proto"),
    ("X-Forwarded-Port: 443", "x-forwarded-port"),
    ("X_FORWARDED_PORT: 8443", "x-forwarded-port"),
    ("X-Forwarded-Prefix: /admin", "x-forwarded-prefix"),
    ("x_forwarded_prefix: /root", "x-forwarded-prefix"),
    ("x-forwarded-proto: ftp", "x-forwarded-proto"),
    ("X-Real-Ip: 6.6.6.13", "x-real-ip"),
    ("X-Client-IP: 6.6.6.14", "x-client-ip"),
    ("CF-Connecting-IP: 6.6.6.15", "cf-connecting-ip"),
    ("Fastly-Client-IP: 6.6.6.16", "fastly-client-ip"),
    ("X-Cluster-Client-IP: 6.6.6.17", "x-cluster-client-ip"),
    ("X-Forwarded-Scheme: https", "x-forwarded-scheme"),
    ("X-Forwarded-Ssl: on", "x-forwarded-ssl"),
    ("X-Forwarded-Server: evil", "x-forwarded-server"),
    ("X-Forwarded-Protocol: https", "x-forwarded-protocol"),
    ("X-Original-Host: evil.example", "x-original-host"),
    ("X-Host: evil.example", "x-host"),
    ("Front-End-Https: on", "front-end-https"),
    (
        "X-Envoy-External-Address: 6.6.6.18",
        "x-envoy-external-address",
    ),
    ("X-Original-URL: /admin", "x-original-url"),
    ("x_rewrite_url: /admin", "x-rewrite-url"),
];

/// What the one backend that served a request (GET through the loop, POST
/// with a body through hyper) saw, with every client forwarding header.
async fn forwarded_as(mode: &str) -> Vec<(String, Seen)> {
    let fixture = Fixture::start(Options {
        shards: 2,
        tenants: 2,
        k: 1,
        extra: format!("[forwarding]\nx_forwarded_for = \"{mode}\"\n"),
        ..Options::default()
    })
    .await;
    let auth = bearer_line(&fixture, "tenant-1");
    let mut seen = Vec::new();
    for (request_line, framing, body) in [
        ("GET /who HTTP/1.1", None, &b""[..]),
        ("POST /who HTTP/1.1", Some("Content-Length: 2"), b"hi"),
    ] {
        for backend in &fixture.backends {
            backend.clear_seen();
        }
        let mut lines = vec!["Host: gateway", auth.as_str()];
        lines.extend(framing);
        lines.extend(CLIENT_FORWARDING.iter().map(|(line, _)| *line));
        let response = raw_request(fixture.running.addr, &raw(request_line, &lines, body)).await;
        assert_eq!(response.status, 200, "{mode}: {}", response.head);
        let mut got = everything_seen(&fixture);
        assert_eq!(got.len(), 1, "{mode}: {got:?}");
        seen.push((format!("{mode}, {request_line}"), got.remove(0)));
    }
    seen
}

/// When the gateway does not append to the client's `x-forwarded-for`
/// (`replace`, `off`), it vouches for the client's address itself, and no
/// other header in which a client could claim an address, scheme, port or
/// prefix reaches the shard, in any case or spelled with `_`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_append_no_client_forwarding_header_reaches_a_shard() {
    let forbidden: Vec<&str> = CLIENT_FORWARDING.iter().map(|(_, name)| *name).collect();
    for mode in ["replace", "off"] {
        for (context, seen) in forwarded_as(mode).await {
            for (name, value) in &seen.headers {
                assert!(
                    !forbidden.contains(&read_as(name).as_str()),
                    "{context}: {name}: {value} reached the shard: {seen:?}"
                );
            }
        }
    }
}

/// With `append` (the default) the gateway vouches only for the last
/// `x-forwarded-for` entry, and the client's other forwarding headers pass
/// unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_append_client_forwarding_headers_pass_unchanged() {
    for (context, seen) in forwarded_as("append").await {
        for (line, _) in CLIENT_FORWARDING {
            let (name, value) = line.split_once(": ").unwrap();
            let name = name.to_ascii_lowercase();
            assert!(
                seen.header(&name).contains(&value),
                "{context}: {line} did not arrive as sent: {seen:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Configuration: admin exposure and ranges.

/// A minimal valid configuration with `tables` (whole TOML tables) before
/// its cell, in a fresh directory with its key and tenants files.
fn write_config(dir: &Path, tables: &str) -> PathBuf {
    GatewayToml {
        k: 1,
        // The tables under test may hold `[admin]` themselves.
        admin_listen: None,
        extra: tables.to_owned(),
        shards: vec![Shard::new("s0", "http://127.0.0.1:9")],
        tenants: format!(
            "[[tenants]]\nid = \"t\"\napi_key_sha256 = \"{}\"\n",
            "ab".repeat(32)
        ),
        ..GatewayToml::default()
    }
    .write(dir)
    .unwrap()
}

/// Loads a configuration made of `tables`; the error's message on refusal.
fn load(tables: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), tables);
    Snapshot::load(&path, None)
        .map(drop)
        .map_err(|error| error.to_string())
}

/// Token-less admin pages on a listener other hosts can reach are refused
/// at load, naming both keys; on a loopback address they are fine.
#[test]
fn tokenless_admin_pages_on_a_non_loopback_listener_are_refused() {
    for key in ["status_page_without_token", "metrics_without_token"] {
        for (listen, loopback) in [
            ("0.0.0.0:0", false),
            ("[::]:0", false),
            ("127.0.0.1:0", true),
            ("[::1]:0", true),
        ] {
            let tables = format!("[admin]\nlisten = \"{listen}\"\n{key} = true\n");
            let loaded = load(&tables);
            if loopback {
                assert!(loaded.is_ok(), "{listen}, {key}: {loaded:?}");
            } else {
                let error = loaded.expect_err(&format!("{listen}, {key}: loaded"));
                assert!(
                    error.contains("admin.listen") && error.contains(key),
                    "{listen}, {key}: the error names neither admin.listen nor {key}: {error}"
                );
            }
        }
    }
}

/// Every limit, timeout and count is bounded: a value out of range is
/// refused with an error naming its key (not taken, to overflow a clock or
/// a buffer later).
#[test]
fn out_of_range_settings_are_refused_naming_the_key() {
    for (table, key, value) in [
        ("limits", "max_connections", "100000000000"),
        ("limits", "max_header_bytes", "100000000"),
        ("routing", "request_timeout_ms", "18446744073709551615"),
        ("routing", "per_try_timeout_ms", "0"),
        ("health", "timeout_ms", "0"),
        ("health", "rise", "100000"),
        ("limits", "backend_idle_timeout_ms", "0"),
        ("limits", "client_write_timeout_ms", "0"),
        ("limits", "backend_idle_timeout_ms", "99999999999"),
        ("limits", "http2_idle_timeout_ms", "0"),
        ("limits", "http2_idle_timeout_ms", "3600001"),
        ("limits", "client_body_timeout_ms", "0"),
        ("limits", "client_body_timeout_ms", "3600001"),
        ("routing", "poison_after", "65"),
        ("routing", "quarantine_seconds", "0"),
        ("routing", "quarantine_seconds", "86401"),
        ("limits.shard", "max_in_flight", "0"),
        ("limits.shard", "max_in_flight", "1000001"),
    ] {
        let error = load(&format!("[{table}]\n{key} = {value}\n"))
            .expect_err(&format!("{table}.{key} = {value} was accepted"));
        assert!(
            error.contains(&format!("{table}.{key}")) && !error.contains("unknown field"),
            "{table}.{key} = {value}: {error}"
        );
    }
}

/// The two new timeouts take ordinary values.
#[test]
fn backend_idle_and_client_write_timeouts_accept_ordinary_values() {
    for key in [
        "backend_idle_timeout_ms",
        "client_write_timeout_ms",
        "http2_idle_timeout_ms",
        "client_body_timeout_ms",
    ] {
        let loaded = load(&format!("[limits]\n{key} = 250\n"));
        assert!(loaded.is_ok(), "limits.{key} = 250: {loaded:?}");
    }
}
