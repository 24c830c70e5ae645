//! Adversarial clients through real sockets: request framing a client
//! library would never produce (`Content-Length` with `Transfer-Encoding`,
//! conflicting lengths, duplicate and folded headers), forged placement
//! headers, JWTs that must not pass, and a property test that whatever tenant
//! A sends, only A's subset ever sees it, as A, once.
//!
//! Raw requests go over a plain `TcpStream` so that the bytes on the wire are
//! exactly the test's; what the backends received is read back from them
//! (`Backend::seen`).

use std::net::SocketAddr;
use std::time::Duration;

use backend::{Mode, Seen};
use http::StatusCode;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::util::{
    Fixture, Options, RawResponse, base64url, bearer_line, exchange, hs256_token, random_bytes,
    raw, raw_request, read_while_open, unix_now,
};

// ---------------------------------------------------------------------------
// Helpers.

/// Everything the gateway sends back on one connection until it closes it
/// (or five seconds pass: a connection left open is not a failure here, the
/// caller checks what was answered).
async fn answered_on(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(request).await;
    let mut received = Vec::new();
    let _ = read_while_open(&mut stream, &mut received, Duration::from_secs(5)).await;
    String::from_utf8_lossy(&received).into_owned()
}

/// Every request any backend saw, with the id of the backend that saw it.
fn everything_seen(fixture: &Fixture) -> Vec<(String, Seen)> {
    fixture
        .backends
        .iter()
        .flat_map(|b| b.seen().into_iter().map(|s| (b.id().to_owned(), s)))
        .collect()
}

fn clear_seen(fixture: &Fixture) {
    for backend in &fixture.backends {
        backend.clear_seen();
    }
}

/// Whether a header a backend saw is in (or spelled like, with `_` for
/// `-`) the gateway's namespace without being one of the two the gateway
/// sets itself.
fn spoofs_the_gateway(name: &str) -> bool {
    name.replace('_', "-").starts_with("x-shuffle-")
        && name != "x-shuffle-tenant"
        && name != "x-shuffle-shard"
}

/// Checks that every request a backend saw came from `tenant`, landed in
/// its subset, and carried exactly one `x-shuffle-tenant` (the tenant) and
/// one `x-shuffle-shard` (the backend that saw it), and nothing else in (or
/// spelled like) the gateway's namespace.
fn assert_only_subset_saw_only(fixture: &Fixture, tenant: &str, context: &str) {
    let subset = fixture.subset_ids(tenant);
    for (backend, seen) in everything_seen(fixture) {
        assert!(
            subset.contains(&backend),
            "{context}: {backend} is outside {tenant}'s subset {subset:?}: {seen:?}"
        );
        assert_eq!(
            seen.header("x-shuffle-tenant"),
            [tenant],
            "{context}: {seen:?}"
        );
        assert_eq!(
            seen.header("x-shuffle-shard"),
            [backend.as_str()],
            "{context}: {seen:?}"
        );
        for (name, _) in &seen.headers {
            assert!(
                !spoofs_the_gateway(name),
                "{context}: {name} reached {backend}: {seen:?}"
            );
        }
    }
}

/// A gateway with the default options, and `tenant`'s raw `Authorization`
/// line for hand-made requests.
async fn gateway_for(tenant: &str) -> (Fixture, String) {
    let fixture = Fixture::start(Options::default()).await;
    let auth = bearer_line(&fixture, tenant);
    (fixture, auth)
}

// ---------------------------------------------------------------------------
// Framing: Content-Length and Transfer-Encoding.

/// RFC 9112 §6.1 lets a server either refuse a request with both
/// `Content-Length` and `Transfer-Encoding` or let `Transfer-Encoding` win
/// and close the connection afterwards. The gateway does the latter (the
/// fast path hands such a head to hyper, which reads the body as chunked,
/// and the inbound filter drops the length): the shard gets one unambiguous
/// chunked request, never both framings, and the client's connection, whose
/// framing was in doubt, ends after the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_with_transfer_encoding_forwards_the_chunked_body_and_closes() {
    let tenant = "tenant-1";
    let (fixture, auth) = gateway_for(tenant).await;
    // Five body bytes: a length that won (4, 19 or 0) would deliver a
    // different count, or hang waiting for bytes that never come.
    let chunked_body = b"5\r\nhello\r\n0\r\n\r\n";
    for method in ["POST", "PUT", "GET"] {
        for cl_first in [true, false] {
            for content_length in ["4", "19", "0"] {
                clear_seen(&fixture);
                let cl = format!("Content-Length: {content_length}");
                let te = "Transfer-Encoding: chunked";
                let framing = if cl_first {
                    [cl.as_str(), te]
                } else {
                    [te, cl.as_str()]
                };
                let mut lines = vec!["Host: gateway", auth.as_str()];
                lines.extend(framing);
                let request = raw(&format!("{method} /upload HTTP/1.1"), &lines, chunked_body);
                let context = format!("{method}, {framing:?}");
                let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
                let response = exchange(&mut stream, &request).await;
                assert_eq!(response.status, 200, "{context}: {}", response.head);
                assert_eq!(response.header("connection"), Some("close"), "{context}");
                // Closed, not merely announced: nothing more is answered on
                // it. (The bound only stops a hang; closing is immediate.)
                let mut after = Vec::new();
                assert!(
                    read_while_open(&mut stream, &mut after, Duration::from_secs(10)).await,
                    "{context}: the connection stayed open"
                );
                assert!(
                    after.is_empty(),
                    "{context}: {}",
                    String::from_utf8_lossy(&after)
                );

                let seen = everything_seen(&fixture);
                assert_eq!(seen.len(), 1, "{context}: {seen:?}");
                let (backend, seen) = &seen[0];
                assert_eq!(
                    (seen.method.as_str(), seen.path.as_str()),
                    (method, "/upload")
                );
                // Exactly these fields, in any order: the gateway's own, the
                // forwarding ones, and one chunked framing; no length, and
                // not the client's credential.
                let mut names: Vec<&str> = seen.headers.iter().map(|(n, _)| n.as_str()).collect();
                names.sort_unstable();
                assert_eq!(
                    names,
                    [
                        "host",
                        "transfer-encoding",
                        "x-forwarded-for",
                        "x-forwarded-host",
                        "x-shuffle-shard",
                        "x-shuffle-tenant",
                    ],
                    "{context}: {seen:?}"
                );
                assert_eq!(seen.header("transfer-encoding"), ["chunked"], "{context}");
                assert_eq!(seen.header("x-forwarded-host"), ["gateway"], "{context}");
                assert_eq!(seen.header("x-shuffle-tenant"), [tenant], "{context}");
                assert_eq!(
                    seen.header("x-shuffle-shard"),
                    [backend.as_str()],
                    "{context}"
                );
                assert_eq!(seen.body_len, 5, "{context}: {seen:?}");
            }
        }
    }
    assert_only_subset_saw_only(&fixture, tenant, "CL + TE");
}

/// The classic smuggling shapes: the front end and the back end disagree on
/// where the body ends, and the rest becomes a second request nobody
/// authenticated. Whatever the gateway answers, no backend ever sees the
/// smuggled request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggled_requests_never_reach_a_backend() {
    let tenant = "tenant-2";
    let (fixture, auth) = gateway_for(tenant).await;
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: gateway\r\nx-shuffle-tenant: tenant-9\r\n\r\n";
    // CL.TE: a Content-Length covering everything, a chunked body that ends
    // at once.
    let cl_te_body = format!("0\r\n\r\n{smuggled}");
    let cl_te_length = format!("Content-Length: {}", cl_te_body.len());
    // TE.CL: a chunk holding the smuggled request, a Content-Length that
    // ends the body before it.
    let te_cl_body = format!("{:x}\r\n{smuggled}\r\n0\r\n\r\n", smuggled.len());
    let cases: Vec<(&str, Vec<&str>, &[u8])> = vec![
        (
            "CL.TE",
            vec![cl_te_length.as_str(), "Transfer-Encoding: chunked"],
            cl_te_body.as_bytes(),
        ),
        (
            "TE.CL",
            vec!["Transfer-Encoding: chunked", "Content-Length: 4"],
            te_cl_body.as_bytes(),
        ),
        (
            "TE obfuscated",
            vec![cl_te_length.as_str(), "Transfer-Encoding: xchunked"],
            cl_te_body.as_bytes(),
        ),
        (
            "TE twice",
            vec![
                cl_te_length.as_str(),
                "Transfer-Encoding: chunked",
                "Transfer-Encoding: identity",
            ],
            cl_te_body.as_bytes(),
        ),
        (
            "TE not last",
            vec![
                cl_te_length.as_str(),
                "Transfer-Encoding: chunked, identity",
            ],
            cl_te_body.as_bytes(),
        ),
        (
            "TE with space before colon",
            vec![cl_te_length.as_str(), "Transfer-Encoding : chunked"],
            cl_te_body.as_bytes(),
        ),
    ];
    for (name, framing, body) in cases {
        clear_seen(&fixture);
        let mut lines = vec!["Host: gateway", auth.as_str()];
        lines.extend(framing);
        let answer = answered_on(
            fixture.running.addr,
            &raw("POST /first HTTP/1.1", &lines, body),
        )
        .await;
        let statuses: Vec<&str> = answer
            .lines()
            .filter(|line| line.starts_with("HTTP/1."))
            .collect();
        assert!(
            statuses.len() <= 1,
            "{name}: the gateway answered a second request: {answer}"
        );
        for (backend, seen) in everything_seen(&fixture) {
            assert_ne!(seen.path, "/smuggled", "{name}: reached {backend}");
            assert_eq!(seen.path, "/first", "{name}");
        }
        assert_only_subset_saw_only(&fixture, tenant, name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_or_malformed_content_lengths_get_400_and_reach_nobody() {
    let fixture = Fixture::start(Options::default()).await;
    let auth = bearer_line(&fixture, "tenant-3");
    for framing in [
        &["Content-Length: 5", "Content-Length: 6"][..],
        &["Content-Length: 6", "Content-Length: 5"],
        &["Content-Length: 5, 6"],
        &["Content-Length: +5"],
        &["Content-Length: -5"],
        &["Content-Length: 0x5"],
        &["Content-Length: 5 5"],
    ] {
        let mut lines = vec!["Host: gateway", auth.as_str()];
        lines.extend(framing);
        let response = raw_request(
            fixture.running.addr,
            &raw("POST /x HTTP/1.1", &lines, b"hello!"),
        )
        .await;
        assert_eq!(response.status, 400, "{framing:?}: {}", response.head);
    }
    assert!(everything_seen(&fixture).is_empty());
}

// ---------------------------------------------------------------------------
// Duplicate, folded and look-alike headers.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_and_look_alike_placement_headers_are_stripped() {
    let fixture = Fixture::start(Options::default()).await;
    let (attacker, victim) = ("tenant-4", "tenant-5");
    let victim_shard = fixture
        .backends
        .iter()
        .map(|b| b.id().to_owned())
        .find(|id| !fixture.subset_ids(attacker).contains(id))
        .unwrap();
    let auth = bearer_line(&fixture, attacker);
    let tenant_line = format!("x-shuffle-tenant: {victim}");
    let upper_line = format!("X-SHUFFLE-TENANT: {victim}");
    let shard_line = format!("x-shuffle-shard: {victim_shard}");
    let underscore_line = format!("x_shuffle_tenant: {victim}");
    let mixed_line = format!("X-Shuffle_Shard: {victim_shard}");
    let lines = [
        "Host: gateway",
        tenant_line.as_str(),
        auth.as_str(),
        upper_line.as_str(),
        shard_line.as_str(),
        shard_line.as_str(),
        underscore_line.as_str(),
        mixed_line.as_str(),
        "x-shuffle-cell: other",
        "Connection: keep-alive, x-shuffle-tenant",
    ];
    for _ in 0..6 {
        let response =
            raw_request(fixture.running.addr, &raw("GET /dup HTTP/1.1", &lines, b"")).await;
        assert_eq!(response.status, 200, "{}", response.head);
        let answer: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(answer["tenant"], attacker);
        assert!(response.header("x-shuffle-shard").is_none());
    }
    assert_eq!(everything_seen(&fixture).len(), 6);
    assert_only_subset_saw_only(&fixture, attacker, "duplicates");

    // HTTP/1.0 needs no `Host`; a client's `X-Forwarded-Host` still does not
    // pass as the gateway's.
    clear_seen(&fixture);
    let forwarded = format!("X-Forwarded-Host: {victim}.example");
    let response = raw_request(
        fixture.running.addr,
        &raw(
            "GET /old HTTP/1.0",
            &[auth.as_str(), forwarded.as_str(), tenant_line.as_str()],
            b"",
        ),
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.head);
    let seen = everything_seen(&fixture);
    assert_eq!(seen.len(), 1);
    assert!(seen[0].1.header("x-forwarded-host").is_empty(), "{seen:?}");
    assert_only_subset_saw_only(&fixture, attacker, "HTTP/1.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obs_folded_header_lines_are_refused_and_reach_nobody() {
    let fixture = Fixture::start(Options::default()).await;
    let (attacker, victim) = ("tenant-6", "tenant-7");
    let auth = bearer_line(&fixture, attacker);
    let victim_key = fixture.api_key(victim).to_owned();
    let folded_tenant = format!("x-shuffle-tenant: {attacker}\r\n {victim}");
    let folded_after = format!("Accept: */*\r\n\tx-shuffle-tenant: {victim}");
    let folded_auth = format!("Authorization: Bearer\r\n {victim_key}");
    let folded_key_after = format!("X-Note: hi\r\n x-api-key: {victim_key}");
    let cases: [(&str, Vec<&str>); 4] = [
        (
            "folded x-shuffle-tenant",
            vec![auth.as_str(), folded_tenant.as_str()],
        ),
        (
            "fold after another header",
            vec![auth.as_str(), folded_after.as_str()],
        ),
        ("folded Authorization", vec![folded_auth.as_str()]),
        (
            "folded second credential",
            vec![auth.as_str(), folded_key_after.as_str()],
        ),
    ];
    let whitespace: [(&str, Vec<&str>); 3] = [
        (
            "a whitespace-led first header line",
            vec![" x-shuffle-tenant: tenant-7", auth.as_str()],
        ),
        (
            "a space before the colon",
            vec![auth.as_str(), "x-shuffle-tenant : tenant-7"],
        ),
        (
            "a tab before the colon",
            vec![auth.as_str(), "x-shuffle-tenant\t: tenant-7"],
        ),
    ];
    for (name, mut lines) in cases.into_iter().chain(whitespace) {
        lines.insert(0, "Host: gateway");
        let response = raw_request(
            fixture.running.addr,
            &raw("GET /fold HTTP/1.1", &lines, b""),
        )
        .await;
        // Refused as malformed before any credential is looked at; never
        // unfolded into something a backend would trust.
        assert_eq!(response.status, 400, "{name}: {}", response.head);
        assert!(everything_seen(&fixture).is_empty(), "{name}");
    }
    // The same request without the fold is served, as the attacker.
    let response = raw_request(
        fixture.running.addr,
        &raw("GET /fold HTTP/1.1", &["Host: gateway", auth.as_str()], b""),
    )
    .await;
    assert_eq!(response.status, 200, "{}", response.head);
    assert_only_subset_saw_only(&fixture, attacker, "unfolded");
}

/// Headers named by `Connection` are hop-by-hop and removed; removing one
/// the gateway relies on must not change what it decided from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_named_by_connection_does_not_make_a_post_replayable() {
    let fixture = Fixture::start(Options::default()).await;
    let tenant = "tenant-7";
    for id in fixture.subset_ids(tenant) {
        fixture.backend(&id).set_mode(Mode::Errors {
            status: 503,
            rate: 1.0,
        });
    }
    let headers = [
        ("idempotency-key", "charge-1"),
        ("connection", "Idempotency-Key"),
    ];
    let (status, _, _) = fixture
        .send(Some(tenant), "POST", "/charge", &headers, b"{\"amount\":1}")
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let seen = everything_seen(&fixture);
    // Replayed without the key the backend could deduplicate on would
    // charge twice; the key is gone, so the POST is sent once.
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].1.header("idempotency-key").is_empty());
}

/// What a shard is told about the client is the operator's choice
/// (`[forwarding]`), applied by a reload: the client's own
/// `x-forwarded-for` passes only when the gateway appends to it, and the
/// client's `x-forwarded-host` never does, nor do their spellings with `_`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_settings_decide_what_shards_learn_about_the_client() {
    let token = "forwarding-test-admin-token";
    let fixture = Fixture::start(Options {
        extra: "[forwarding]\nx_forwarded_for = \"replace\"\nx_forwarded_host = false\n".into(),
        admin_token: Some(token.into()),
        ..Options::default()
    })
    .await;
    let tenant = "tenant-3";
    let auth = bearer_line(&fixture, tenant);
    let request = raw(
        "GET /who HTTP/1.1",
        &[
            "Host: gateway.example",
            auth.as_str(),
            "X-Forwarded-For: 6.6.6.6",
            "X-Forwarded-Host: victim.example",
            // Look-alikes that CGI-style backends read as the real ones.
            "X_Forwarded_For: 7.7.7.7",
            "X_Forwarded_Host: victim.example",
        ],
        b"",
    );
    // What the one shard that served the request was told.
    let told = async || {
        clear_seen(&fixture);
        let response = raw_request(fixture.running.addr, &request).await;
        assert_eq!(response.status, 200, "{}", response.head);
        let seen = everything_seen(&fixture);
        assert_eq!(seen.len(), 1, "{seen:?}");
        let seen = &seen[0].1;
        let owned =
            |name| -> Vec<String> { seen.header(name).into_iter().map(str::to_owned).collect() };
        assert_eq!(owned("x_forwarded_host"), Vec::<String>::new(), "{seen:?}");
        let mut list = owned("x-forwarded-for");
        list.extend(owned("x_forwarded_for"));
        (list, owned("x-forwarded-host"))
    };
    let nothing: [&str; 0] = [];

    let (list, host) = told().await;
    assert_eq!(list, ["127.0.0.1"]);
    assert_eq!(host, nothing);

    let config = fixture.config_path();
    let edit = |from: &str, to: &str| {
        let text = std::fs::read_to_string(&config).unwrap();
        assert_eq!(text.matches(from).count(), 1, "{from:?}");
        std::fs::write(&config, text.replace(from, to)).unwrap();
    };
    let reload = async || {
        let (status, _, body) = fixture.admin("POST", "/admin/reload", Some(token)).await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    };

    edit("x_forwarded_for = \"replace\"", "x_forwarded_for = \"off\"");
    edit("x_forwarded_host = false", "x_forwarded_host = true");
    reload().await;
    let (list, host) = told().await;
    assert_eq!(list, nothing);
    assert_eq!(host, ["gateway.example"]);

    edit("x_forwarded_for = \"off\"", "x_forwarded_for = \"append\"");
    reload().await;
    let (list, host) = told().await;
    assert_eq!(list, ["6.6.6.6", "127.0.0.1", "7.7.7.7"]);
    assert_eq!(host, ["gateway.example"]);

    // A mode the gateway does not know is refused, naming it.
    edit(
        "x_forwarded_for = \"append\"",
        "x_forwarded_for = \"trust-me\"",
    );
    let (status, _, body) = fixture.admin("POST", "/admin/reload", Some(token)).await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.contains("trust-me") && body.contains("replace"),
        "{body}"
    );
}

/// A body the client streams (chunked) arrives whole, whatever the method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_bodies_reach_the_backend_whole_for_every_method() {
    let tenant = "tenant-8";
    let (fixture, auth) = gateway_for(tenant).await;
    for method in ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        clear_seen(&fixture);
        let lines = ["Host: gateway", auth.as_str(), "Transfer-Encoding: chunked"];
        let response = raw_request(
            fixture.running.addr,
            &raw(
                &format!("{method} /stream HTTP/1.1"),
                &lines,
                b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
            ),
        )
        .await;
        assert_eq!(response.status, 200, "{method}: {}", response.head);
        let seen = everything_seen(&fixture);
        assert_eq!(seen.len(), 1, "{method}");
        assert_eq!(seen[0].1.body_len, 7, "{method}: {:?}", seen[0].1);
    }
}

// ---------------------------------------------------------------------------
// JWTs end to end.

async fn jwt_fixture() -> Fixture {
    Fixture::start(Options {
        jwt_hs256: Some("audience = \"gateway\"\nissuer = \"idp\"".into()),
        ..Options::default()
    })
    .await
}

fn claims(tenant: &str) -> serde_json::Value {
    json!({
        "sub": tenant,
        "aud": "gateway",
        "iss": "idp",
        "iat": unix_now(),
        "exp": unix_now() + 600,
    })
}

async fn send_bearer(fixture: &Fixture, token: &str, extra: &[(&str, &str)]) -> StatusCode {
    let bearer = format!("Bearer {token}");
    let mut headers = vec![("authorization", bearer.as_str())];
    headers.extend_from_slice(extra);
    fixture.send(None, "GET", "/jwt", &headers, b"").await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_jwt_is_served_as_its_subject_and_only_on_its_subset() {
    let fixture = jwt_fixture().await;
    let tenant = "tenant-11";
    let token = fixture.mint_hs256(&claims(tenant));
    for _ in 0..10 {
        let status = send_bearer(
            &fixture,
            &token,
            &[("x-shuffle-tenant", "tenant-12"), ("x-shuffle-shard", "s0")],
        )
        .await;
        assert_eq!(status, StatusCode::OK);
    }
    let seen = everything_seen(&fixture);
    assert_eq!(seen.len(), 10);
    for (_, seen) in &seen {
        assert!(
            seen.header("authorization").is_empty(),
            "the JWT is not forwarded"
        );
    }
    assert_only_subset_saw_only(&fixture, tenant, "jwt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_jwts_get_401_and_reach_nobody() {
    let fixture = jwt_fixture().await;
    let tenant = "tenant-13";
    let with = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut claims = claims(tenant);
        change(&mut claims);
        claims
    };
    let alg_none = |alg: &str| {
        format!(
            "{}.{}.",
            base64url(json!({ "alg": alg, "typ": "JWT" }).to_string().as_bytes()),
            base64url(claims(tenant).to_string().as_bytes())
        )
    };
    let valid = fixture.mint_hs256(&claims(tenant));
    let (head_and_claims, _) = valid.rsplit_once('.').unwrap();
    let cases: Vec<(&str, String)> = vec![
        ("alg none", alg_none("none")),
        ("alg None", alg_none("None")),
        ("alg none with the valid signature", {
            let (_, signature) = valid.rsplit_once('.').unwrap();
            format!("{}.{signature}", alg_none("none").trim_end_matches('.'))
        }),
        ("no signature", format!("{head_and_claims}.")),
        ("wrong key", hs256_token(&claims(tenant), &random_bytes(32))),
        (
            "expired",
            fixture.mint_hs256(&with(&|c| c["exp"] = json!(unix_now() - 600))),
        ),
        (
            "not yet valid",
            fixture.mint_hs256(&with(&|c| c["nbf"] = json!(unix_now() + 600))),
        ),
        (
            "wrong audience",
            fixture.mint_hs256(&with(&|c| c["aud"] = json!("someone-else"))),
        ),
        (
            "no audience",
            fixture.mint_hs256(&with(&|c| {
                c.as_object_mut().unwrap().remove("aud");
            })),
        ),
        (
            "wrong issuer",
            fixture.mint_hs256(&with(&|c| c["iss"] = json!("mallory"))),
        ),
        (
            "no expiry",
            fixture.mint_hs256(&with(&|c| {
                c.as_object_mut().unwrap().remove("exp");
            })),
        ),
        (
            "unknown tenant",
            fixture.mint_hs256(&with(&|c| c["sub"] = json!("tenant-unknown"))),
        ),
        ("tampered claims", {
            let (header, rest) = valid.split_once('.').unwrap();
            let (_, signature) = rest.split_once('.').unwrap();
            let forged = base64url(claims("tenant-14").to_string().as_bytes());
            format!("{header}.{forged}.{signature}")
        }),
    ];
    for (name, token) in cases {
        let status = send_bearer(&fixture, &token, &[]).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}");
    }
    assert!(everything_seen(&fixture).is_empty());
    // The fixture itself is sound: the unmodified token passes.
    assert_eq!(send_bearer(&fixture, &valid, &[]).await, StatusCode::OK);
}

// ---------------------------------------------------------------------------
// Whatever A sends, only A's subset sees it, as A, once.

mod property {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    use super::*;

    /// One generated request from the attacking tenant.
    #[derive(Debug, Clone)]
    struct Attack {
        method: &'static str,
        path: String,
        query: Option<String>,
        absolute_form: bool,
        /// Indexes into the header templates.
        headers: Vec<usize>,
        body: Vec<u8>,
    }

    impl Attack {
        /// The path and query as sent, and as the backend must see them.
        fn path_and_query(&self) -> String {
            match &self.query {
                Some(query) => format!("{}?{query}", self.path),
                None => self.path.clone(),
            }
        }
    }

    const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"];

    /// Header lines to draw from. `{victim}` is another tenant, `{shard}` a
    /// shard outside the attacker's subset, `{victim_key}` the victim's API
    /// key.
    const TEMPLATES: [&str; 31] = [
        "x-shuffle-tenant: {victim}",
        "X-Shuffle-Tenant: {victim}",
        "x-shuffle-shard: {shard}",
        "X-SHUFFLE-SHARD: {shard}",
        "x_shuffle_tenant: {victim}",
        "X-Shuffle_Shard: {shard}",
        "x-shuffle-cell: other",
        "x-shuffle-subset: {shard},{shard}",
        "Host: {shard}.internal",
        "Host: {victim}",
        "X-Forwarded-For: 10.0.0.1",
        "X-Forwarded-Host: {victim}.example",
        "X-Forwarded-Proto: https",
        "X-Forwarded-Tenant: {victim}",
        "Forwarded: for=10.0.0.1;host={victim}",
        "X-Real-IP: 10.0.0.2",
        "Connection: close",
        "Connection: keep-alive, x-shuffle-tenant",
        "Connection: x-shuffle-shard, x-forwarded-for",
        "Connection: authorization",
        "Connection: host",
        "Connection: content-length",
        "Connection: Idempotency-Key, TE",
        "Expect: 100-continue",
        "Keep-Alive: timeout=5",
        "Proxy-Authorization: Bearer {victim_key}",
        "Upgrade: websocket",
        "TE: trailers",
        "Via: 1.1 {shard}",
        "Idempotency-Key: {victim}",
        "x-api-key: {victim_key}",
    ];

    fn segment() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[A-Za-z0-9._~-]{1,8}|%2[eEfF]|\\.\\.|x-shuffle-tenant")
            .unwrap()
    }

    fn attack() -> impl Strategy<Value = Attack> {
        (
            proptest::sample::select(&METHODS[..]),
            proptest::collection::vec(segment(), 0..4),
            proptest::option::of(
                proptest::string::string_regex(
                    "(x-shuffle-(tenant|shard)=[a-z0-9-]{1,10}&?){1,3}|[a-z]{1,5}=[a-z0-9%]{0,6}",
                )
                .unwrap(),
            ),
            any::<bool>(),
            proptest::collection::vec(0..TEMPLATES.len(), 0..8),
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(
                |(method, segments, query, absolute_form, headers, body)| Attack {
                    method,
                    // Never the backends' health path, which they do not record.
                    path: format!("/p/{}", segments.join("/")),
                    query,
                    absolute_form,
                    headers,
                    body,
                },
            )
    }

    /// Runs one attack; returns the status the gateway answered.
    async fn run(fixture: &Fixture, attacker: &str, attack: &Attack) -> RawResponse {
        let victims: Vec<&String> = fixture
            .tenants
            .iter()
            .map(|(id, _)| id)
            .filter(|id| *id != attacker)
            .collect();
        let subset = fixture.subset_ids(attacker);
        let outside: Vec<String> = fixture
            .backends
            .iter()
            .map(|b| b.id().to_owned())
            .filter(|id| !subset.contains(id))
            .collect();
        let mut lines = vec![format!("Host: gateway"), bearer_line(fixture, attacker)];
        for (n, &template) in attack.headers.iter().enumerate() {
            let victim = victims[n % victims.len()];
            lines.push(
                TEMPLATES[template]
                    .replace("{victim_key}", fixture.api_key(victim))
                    .replace("{victim}", victim)
                    .replace("{shard}", &outside[n % outside.len()]),
            );
        }
        if !attack.body.is_empty() {
            lines.push(format!("Content-Length: {}", attack.body.len()));
        }
        let target = if attack.absolute_form {
            format!("http://{}{}", outside[0], attack.path_and_query())
        } else {
            attack.path_and_query()
        };
        let line_refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let request = raw(
            &format!("{} {target} HTTP/1.1", attack.method),
            &line_refs,
            &attack.body,
        );
        raw_request(fixture.running.addr, &request).await
    }

    #[test]
    fn whatever_tenant_a_sends_only_as_subset_sees_it_as_a_once() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let fixture = runtime.block_on(Fixture::start(Options::default()));
        let attacker = "tenant-20";
        let mut runner = TestRunner::new(Config {
            cases: 64,
            failure_persistence: None,
            ..Config::default()
        });
        let reached = std::cell::Cell::new(0);
        let result = runner.run(&attack(), |attack| {
            clear_seen(&fixture);
            let response = runtime.block_on(run(&fixture, attacker, &attack));
            let seen = everything_seen(&fixture);
            let context = format!("{attack:?} -> {}", response.status);
            // A second credential (x-api-key beside Authorization) is refused;
            // anything else from a healthy fleet is served.
            let second_credential = attack
                .headers
                .iter()
                .any(|&h| TEMPLATES[h].starts_with("x-api-key"));
            let expected = if second_credential { 401 } else { 200 };
            prop_assert_eq!(response.status, expected, "{}", context);
            prop_assert_eq!(seen.len(), usize::from(expected == 200), "{}", context);
            let subset = fixture.subset_ids(attacker);
            for (backend, seen) in &seen {
                prop_assert!(subset.contains(backend), "{}: reached {}", context, backend);
                prop_assert_eq!(seen.header("x-shuffle-tenant"), [attacker], "{}", context);
                prop_assert_eq!(
                    seen.header("x-shuffle-shard"),
                    [backend.as_str()],
                    "{}",
                    context
                );
                prop_assert_eq!(seen.method.as_str(), attack.method, "{}", context);
                // The path and query went through untouched, and so did the
                // body, whatever the headers said about either.
                prop_assert_eq!(&seen.path, &attack.path_and_query(), "{}", context);
                prop_assert_eq!(seen.body_len, attack.body.len(), "{}", context);
                // The forwarded host is the one the client connected with, or
                // none (when `Connection` named `Host`); never the client's own
                // `X-Forwarded-Host`.
                let forwarded_host = seen.header("x-forwarded-host");
                prop_assert!(
                    forwarded_host.is_empty() || forwarded_host == ["gateway"],
                    "{}: x-forwarded-host {:?}",
                    context,
                    forwarded_host
                );
                for (name, _) in &seen.headers {
                    prop_assert!(
                        !spoofs_the_gateway(name),
                        "{}: {} reached {}",
                        context,
                        name,
                        backend
                    );
                    prop_assert!(
                        name != "authorization"
                            && name != "x-api-key"
                            && name != "proxy-authorization",
                        "{}: a credential reached {}",
                        context,
                        backend
                    );
                }
                reached.set(reached.get() + 1);
            }
            Ok::<(), TestCaseError>(())
        });
        if let Err(error) = result {
            panic!("{error}");
        }
        let reached = reached.get();
        assert!(
            reached > 32,
            "most generated requests should be served: {reached}"
        );
        drop(fixture);
        drop(runtime);
    }
}
