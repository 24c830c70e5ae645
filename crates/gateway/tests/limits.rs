//! Per-tenant limits: a tenant over its rate or its in-flight limit gets
//! 429 (or `RESOURCE_EXHAUSTED`) before any shard is chosen, while every
//! other tenant on the same shards is served; a reload changes limits and
//! keeps buckets; and the global rate in Redis is shared by replicas and
//! falls back to each replica's own bucket when Redis is killed, stalls or
//! answers garbage, without failing or holding up a request.
//!
//! The rates here are tiny (one token per thousand seconds), so a bucket
//! never refills during a test and every count is exact however slow the
//! machine.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use gateway::Snapshot;
use gateway::runtime::{self, Running};
use http::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::admin::{TOKEN, options};
use crate::util::{CustomShard, Fixture, Options, eventually, get_with_key, request_to, text};
use testkit::redis::Redis;

/// A rate no bucket refills at during a test.
const SLOW: &str = "requests_per_second = 0.001";

fn limited_options(limits: &str) -> Options {
    Options {
        extra: format!("[limits.tenant]\n{limits}\n"),
        ..options()
    }
}

/// `tenant`'s GET through the data listener at `addr`: the status and the
/// `Retry-After` and body when refused.
async fn get_via(
    fixture: &Fixture,
    addr: SocketAddr,
    tenant: &str,
) -> (StatusCode, http::HeaderMap, Value) {
    let (status, headers, body) =
        get_with_key(&fixture.client, addr, fixture.api_key(tenant)).await;
    let json = if status == StatusCode::OK {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or_else(|_| panic!("{status}: {body:?}"))
    };
    (status, headers, json)
}

/// Sends `count` GETs as `tenant` and returns how many were served (200)
/// and refused (429); any other status fails the test.
async fn tally(fixture: &Fixture, addr: SocketAddr, tenant: &str, count: usize) -> (usize, usize) {
    let (mut ok, mut limited) = (0, 0);
    for _ in 0..count {
        let (status, headers, body) = get_via(fixture, addr, tenant).await;
        match status {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                limited += 1;
                let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
                assert!(retry_after >= 1, "{retry_after}");
                assert_eq!(headers["content-type"], "application/json");
                assert_eq!(body["status"], 429);
                assert!(body["error"].as_str().unwrap().contains("tenant"), "{body}");
            }
            other => panic!("{tenant} got {other}: {body}"),
        }
    }
    (ok, limited)
}

/// The tenants that share a shard with `tenant`.
fn neighbours(fixture: &Fixture, tenant: &str) -> Vec<String> {
    let subset: BTreeSet<String> = fixture.subset_ids(tenant).into_iter().collect();
    fixture
        .tenants
        .iter()
        .map(|(id, _)| id.clone())
        .filter(|id| id != tenant && fixture.subset_ids(id).iter().any(|s| subset.contains(s)))
        .collect()
}

/// Requests the backends saw from `tenant`.
fn reached_backends(fixture: &Fixture, tenant: &str) -> usize {
    fixture
        .backends
        .iter()
        .flat_map(|b| b.seen())
        .filter(|seen| seen.header("x-shuffle-tenant") == [tenant])
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_rate_gets_429_while_its_neighbours_see_no_error() {
    let fixture = Fixture::start(limited_options(&format!("{SLOW}\nburst = 3"))).await;
    let addr = fixture.running.addr;
    let neighbours = neighbours(&fixture, "tenant-0");
    assert!(
        !neighbours.is_empty(),
        "nobody shares a shard with tenant-0"
    );
    // The flood and its neighbours' traffic, interleaved.
    let (mut ok, mut limited) = (0, 0);
    for round in 0..10 {
        let (o, l) = tally(&fixture, addr, "tenant-0", 1).await;
        (ok, limited) = (ok + o, limited + l);
        if round < 2 {
            for neighbour in &neighbours {
                assert_eq!(
                    tally(&fixture, addr, neighbour, 1).await,
                    (1, 0),
                    "{neighbour}"
                );
            }
        }
    }
    assert_eq!((ok, limited), (3, 7));
    // Refused before any shard was chosen: only the three reached one.
    assert_eq!(reached_backends(&fixture, "tenant-0"), 3);

    let metrics = fixture.scrape().await;
    let limited_by = |limit| {
        metrics.count(
            "shuffle_tenant_limited_total",
            &[("cell", "default"), ("limit", limit)],
        )
    };
    assert_eq!(limited_by("rate"), 7.0);
    assert_eq!(limited_by("in_flight"), 0.0);
    assert!(
        metrics
            .series("shuffle_tenant_limited_total")
            .iter()
            .all(|s| !s.labels.contains_key("tenant")),
        "a tenant label would be a series per tenant"
    );

    // The admin API and the status page name the tenant.
    let view = fixture.admin_json("GET", "/admin/tenants?limited=5").await;
    let rows = view["tenants"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{view}");
    assert_eq!(rows[0]["tenant"], "tenant-0");
    assert_eq!(rows[0]["rate_limited"], 7);
    assert_eq!(rows[0]["in_flight_limited"], 0);
    assert_eq!(rows[0]["burst"], 3);
    let (status, _, page) = fixture.admin("GET", "/", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let page = String::from_utf8_lossy(&page);
    let table = &page[page.find("id=\"limited\"").expect("a most-limited table")..];
    assert!(table.contains("data-tenant=\"tenant-0\""), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_at_its_in_flight_limit_gets_429_while_the_other_is_served() {
    // One shard for both tenants; `/hold` is answered when the test says.
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let gate = Arc::clone(&release);
    let shard = CustomShard::start(move |request| {
        let gate = Arc::clone(&gate);
        async move {
            if request.uri().path() == "/hold" {
                gate.acquire().await.unwrap().forget();
            }
            text(200, "ok")
        }
    })
    .await;
    let fixture = Fixture::start(Options {
        extra: "[limits.tenant]\nmax_in_flight = 2\n".into(),
        admin_token: Some(TOKEN.into()),
        routing: "per_try_timeout_ms = 60000\nrequest_timeout_ms = 60000\n".into(),
        ..shard.options()
    })
    .await;
    let addr = fixture.running.addr;
    let hold = |tenant: &str| {
        let client = fixture.client.clone();
        let bearer = format!("Bearer {}", fixture.api_key(tenant));
        tokio::spawn(async move {
            request_to(&client, addr, "GET", "/hold", &[("authorization", &bearer)])
                .await
                .0
        })
    };
    let held = [hold("tenant-0"), hold("tenant-0")];
    let gateway = Arc::clone(&fixture.running.gateway);
    let in_flight = move || {
        let snapshot = gateway.snapshot();
        snapshot
            .limits
            .of(snapshot.tenants.get("tenant-0").unwrap().slot())
            .unwrap()
            .state
            .in_flight()
    };
    assert!(eventually(Duration::from_secs(10), || in_flight() == 2).await);
    let (status, headers, body) = get_via(&fixture, addr, "tenant-0").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(headers["retry-after"], "1");
    assert!(
        body["error"].as_str().unwrap().contains("in flight"),
        "{body}"
    );
    // The other tenant, on the same shard, is served: one held and one
    // more at a time is within its own two.
    let other = [hold("tenant-1")];
    assert_eq!(tally(&fixture, addr, "tenant-1", 3).await, (3, 0));
    release.add_permits(3);
    for task in held.into_iter().chain(other) {
        assert_eq!(task.await.unwrap(), StatusCode::OK);
    }
    // Released with the response bodies.
    assert!(eventually(Duration::from_secs(10), || in_flight() == 0).await);
    assert_eq!(tally(&fixture, addr, "tenant-0", 2).await, (2, 0));
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.count(
            "shuffle_tenant_limited_total",
            &[("cell", "default"), ("limit", "in_flight")]
        ),
        1.0
    );
}

/// Replaces `from` (which must occur exactly once) by `to` in a file.
fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(text.matches(from).count(), 1, "{from:?}");
    std::fs::write(path, text.replace(from, to)).unwrap();
}

async fn reload(fixture: &Fixture) {
    let reloaded = fixture.admin_json("POST", "/admin/reload").await;
    assert_eq!(reloaded["reloaded"], true, "{reloaded}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_a_tenants_limits_and_keeps_its_bucket() {
    let fixture = Fixture::start(options()).await;
    let addr = fixture.running.addr;
    let tenants = fixture.dir.path().join("tenants.toml");
    // No limits: as many as it likes.
    assert_eq!(tally(&fixture, addr, "tenant-0", 8).await, (8, 0));

    edit(
        &tenants,
        "id = \"tenant-0\"\n",
        &format!("id = \"tenant-0\"\n{SLOW}\nburst = 2\n"),
    );
    reload(&fixture).await;
    assert_eq!(tally(&fixture, addr, "tenant-0", 4).await, (2, 2));

    // A reload that leaves its limits alone leaves its bucket empty.
    edit(
        &tenants,
        "id = \"tenant-1\"\n",
        "id = \"tenant-1\"\nmax_in_flight = 5\n",
    );
    reload(&fixture).await;
    assert_eq!(tally(&fixture, addr, "tenant-0", 3).await, (0, 3));

    // A larger burst: the bucket's debt is kept, the room is new.
    edit(&tenants, "burst = 2\n", "burst = 5\n");
    reload(&fixture).await;
    assert_eq!(tally(&fixture, addr, "tenant-0", 6).await, (3, 3));

    // Zero lifts the limit.
    edit(&tenants, &format!("{SLOW}\n"), "requests_per_second = 0\n");
    reload(&fixture).await;
    assert_eq!(tally(&fixture, addr, "tenant-0", 8).await, (8, 0));
    let view = fixture.admin_json("GET", "/admin/tenants?limited=10").await;
    assert_eq!(
        view["tenants"],
        serde_json::json!([]),
        "no tenant is limited now"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_grpc_call_is_resource_exhausted() {
    let fixture = Fixture::start(limited_options(&format!("{SLOW}\nburst = 1"))).await;
    // The first call takes the token (and reaches a shard that is not a
    // gRPC service: some other error).
    let first = crate::grpc::status_of(
        &fixture,
        crate::grpc::check(&fixture, Some("tenant-0"), String::new(), None),
    )
    .await;
    assert_ne!(first.code(), tonic::Code::ResourceExhausted, "{first:?}");
    let second = crate::grpc::status_of(
        &fixture,
        crate::grpc::check(&fixture, Some("tenant-0"), String::new(), None),
    )
    .await;
    assert_eq!(second.code(), tonic::Code::ResourceExhausted, "{second:?}");
    assert!(second.message().contains("request rate"), "{second:?}");
}

// ---- Global limits in Redis ------------------------------------------------

/// Options whose every tenant has `burst` tokens at a rate that never
/// refills, kept at `store` (with a timeout a loaded test machine meets).
fn global_options(store: &str, burst: u32, timeout_ms: u32) -> Options {
    limited_options(&format!(
        "{SLOW}\nburst = {burst}\nstore = \"{store}\"\nstore_timeout_ms = {timeout_ms}"
    ))
}

/// Waits until `running`'s store has a working connection.
async fn store_up(running: &Running) {
    let snapshot = running.gateway.snapshot();
    let store = snapshot.limits.store().expect("a store is configured");
    store.start();
    assert!(
        eventually(Duration::from_secs(20), || store.is_up()).await,
        "the gateway never connected to the store"
    );
}

/// Fallbacks to the local bucket counted by `fixture`'s gateway, by reason.
async fn fallbacks(fixture: &Fixture, reason: &str) -> f64 {
    fixture.scrape().await.count(
        "shuffle_tenant_limit_store_fallbacks_total",
        &[("reason", reason)],
    )
}

async fn all_fallbacks(fixture: &Fixture) -> f64 {
    let mut total = 0.0;
    for reason in ["unreachable", "timeout", "bad_reply"] {
        total += fallbacks(fixture, reason).await;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_tenants_global_rate() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fixture = Fixture::start(global_options(&redis.url(), 6, 1000)).await;
    let second = runtime::start(Snapshot::load(&fixture.config_path(), None).unwrap())
        .await
        .unwrap();
    store_up(&fixture.running).await;
    store_up(&second).await;
    // Alternating replicas, twenty requests: six tokens in all, where
    // each replica alone would have let six through.
    let (mut ok, mut limited) = (0, 0);
    for i in 0..20 {
        let addr = [fixture.running.addr, second.addr][i % 2];
        let (o, l) = tally(&fixture, addr, "tenant-0", 1).await;
        (ok, limited) = (ok + o, limited + l);
    }
    assert_eq!((ok, limited), (6, 14));
    // Another tenant has a bucket of its own.
    assert_eq!(tally(&fixture, second.addr, "tenant-1", 4).await, (4, 0));
    // Redis forgets the script (as after a restart with the connection
    // kept, or SCRIPT FLUSH): it is sent again whole, and rates stay
    // global.
    assert_eq!(redis.command("SCRIPT FLUSH").await, "+OK\r\n");
    let (mut ok, mut limited) = (0, 0);
    for i in 0..8 {
        let addr = [fixture.running.addr, second.addr][i % 2];
        let (o, l) = tally(&fixture, addr, "tenant-2", 1).await;
        (ok, limited) = (ok + o, limited + l);
    }
    assert_eq!((ok, limited), (6, 2));
    assert_eq!(all_fallbacks(&fixture).await, 0.0);
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_redis_keeps_every_request_served_under_local_limits() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let fixture = Fixture::start(global_options(&redis.url(), 3, 1000)).await;
    let addr = fixture.running.addr;
    store_up(&fixture.running).await;
    assert_eq!(tally(&fixture, addr, "tenant-0", 5).await, (3, 2));
    assert_eq!(all_fallbacks(&fixture).await, 0.0);

    redis.kill();
    // Every request is answered: the neighbours in full, the limited
    // tenant by this replica's own bucket (never charged while Redis
    // answered, so it has its three).
    for tenant in ["tenant-1", "tenant-2", "tenant-3"] {
        assert_eq!(tally(&fixture, addr, tenant, 2).await, (2, 0), "{tenant}");
    }
    assert_eq!(tally(&fixture, addr, "tenant-0", 5).await, (3, 2));
    assert!(fallbacks(&fixture, "unreachable").await > 0.0);

    // Back: the gateway reconnects by itself, and rates are global again
    // (Redis restarted empty, so tenant-4's global bucket is full).
    redis.restart().await;
    let snapshot = fixture.running.gateway.snapshot();
    let store = snapshot.limits.store().unwrap();
    assert!(eventually(Duration::from_secs(20), || store.is_up()).await);
    let before = all_fallbacks(&fixture).await;
    assert_eq!(tally(&fixture, addr, "tenant-4", 5).await, (3, 2));
    assert_eq!(all_fallbacks(&fixture).await, before);
}

/// A server that speaks enough RESP to finish the handshake (the script
/// load is answered with a digest) and then misbehaves: `garbage` answers
/// every later command with bytes that are not RESP, otherwise nothing is
/// ever answered again.
async fn false_store(garbage: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut buffer = vec![0_u8; 64 * 1024];
                let mut first = true;
                while let Ok(n) = stream.read(&mut buffer).await {
                    if n == 0 {
                        return;
                    }
                    let answer: &[u8] = if first {
                        b"$40\r\n0123456789abcdef0123456789abcdef01234567\r\n"
                    } else if garbage {
                        b"HTTP/1.1 400 Bad Request\r\n\r\n"
                    } else {
                        continue;
                    };
                    first = false;
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_garbage_store_falls_back_to_local_limits() {
    // Also a listener that accepts and never says a word.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let _held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    // (A short timeout where only a timeout can end the call; a long one
    // where the garbage must be read, however loaded the machine.)
    for (name, addr, handshakes, timeout_ms) in [
        (
            "stalled after the handshake",
            false_store(false).await,
            true,
            20,
        ),
        (
            "garbage after the handshake",
            false_store(true).await,
            true,
            1000,
        ),
        ("silent", silent_addr, false, 20),
    ] {
        let fixture =
            Fixture::start(global_options(&format!("redis://{addr}"), 3, timeout_ms)).await;
        let running = &fixture.running;
        if handshakes {
            store_up(running).await;
        }
        let served = fixture.running.addr;
        assert_eq!(
            tally(&fixture, served, "tenant-0", 5).await,
            (3, 2),
            "{name}"
        );
        assert_eq!(
            tally(&fixture, served, "tenant-1", 2).await,
            (2, 0),
            "{name}"
        );
        let reason = match (handshakes, name.starts_with("garbage")) {
            (false, _) => "unreachable",
            (true, false) => "timeout",
            (true, true) => "bad_reply",
        };
        assert!(
            fallbacks(&fixture, reason).await > 0.0,
            "{name}: no {reason} counted"
        );
    }
}

/// Sends `count` GETs as `tenant`, alternating between `replicas`.
async fn alternating(
    fixture: &Fixture,
    replicas: [SocketAddr; 2],
    tenant: &str,
    count: usize,
) -> (usize, usize) {
    let (mut ok, mut limited) = (0, 0);
    for i in 0..count {
        let (o, l) = tally(fixture, replicas[i % 2], tenant, 1).await;
        (ok, limited) = (ok + o, limited + l);
    }
    (ok, limited)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_mid_run_starts_buckets_over_and_fails_no_request() {
    let Some(mut redis) = Redis::start().await else {
        return;
    };
    let fixture = Fixture::start(global_options(&redis.url(), 3, 1000)).await;
    let second = runtime::start(Snapshot::load(&fixture.config_path(), None).unwrap())
        .await
        .unwrap();
    let replicas = [fixture.running.addr, second.addr];
    store_up(&fixture.running).await;
    store_up(&second).await;
    // tenant-0 empties its one global bucket through both replicas.
    assert_eq!(alternating(&fixture, replicas, "tenant-0", 6).await, (3, 3));

    // Redis restarts empty while clients keep sending: every request is
    // answered 200 or 429 (`tally` fails the test on anything else).
    let restarted = std::sync::atomic::AtomicBool::new(false);
    let stores = [
        fixture.running.gateway.snapshot(),
        second.gateway.snapshot(),
    ];
    let traffic = async {
        let mut sent = 0;
        while !restarted.load(std::sync::atomic::Ordering::Relaxed) || sent < 10 {
            tally(&fixture, replicas[sent % 2], "tenant-1", 1).await;
            sent += 1;
        }
        sent
    };
    let restart = async {
        redis.shut_down().await;
        redis.restart().await;
        for snapshot in &stores {
            let store = snapshot.limits.store().unwrap();
            assert!(
                eventually(Duration::from_secs(20), || store.is_up()).await,
                "a replica never reconnected to the restarted Redis"
            );
        }
        restarted.store(true, std::sync::atomic::Ordering::Relaxed);
    };
    let (sent, ()) = tokio::join!(traffic, restart);
    assert!(sent >= 10, "{sent}");

    // The restarted Redis knows no bucket: tenant-0's starts over, full,
    // and is one bucket for both replicas again (each replica's own
    // would have let three through on each).
    let before = all_fallbacks(&fixture).await;
    assert_eq!(alternating(&fixture, replicas, "tenant-0", 6).await, (3, 3));
    assert_eq!(all_fallbacks(&fixture).await, before);
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stopped_while_idle_is_noticed_and_then_holds_up_no_request() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    // A long timeout: a request that waited for the stopped Redis would
    // be counted as a timeout.
    let fixture = Fixture::start(global_options(&redis.url(), 3, 1000)).await;
    let addr = fixture.running.addr;
    store_up(&fixture.running).await;
    let snapshot = fixture.running.gateway.snapshot();
    let store = snapshot.limits.store().unwrap();

    // Frozen (SIGSTOP) with its connection open, and nobody asking: the
    // gateway finds out by itself.
    redis.signal("STOP");
    assert!(
        eventually(Duration::from_secs(20), || !store.is_up()).await,
        "a stopped Redis still looks up to the gateway"
    );
    assert_eq!(tally(&fixture, addr, "tenant-0", 5).await, (3, 2));
    assert_eq!(fallbacks(&fixture, "timeout").await, 0.0);
    assert!(fallbacks(&fixture, "unreachable").await >= 5.0);

    // Woken, it is used again: global rates, no fallback.
    redis.signal("CONT");
    assert!(eventually(Duration::from_secs(20), || store.is_up()).await);
    let before = all_fallbacks(&fixture).await;
    assert_eq!(tally(&fixture, addr, "tenant-1", 5).await, (3, 2));
    assert_eq!(all_fallbacks(&fixture).await, before);
}

/// A server that finishes the handshake, then answers the first call with
/// the start of a reply a megabyte long and trickles it a byte at a time,
/// never finishing. Counts the connections it accepted, and notes when the
/// gateway closed the first.
async fn endless_store(
    flood: bool,
) -> (
    SocketAddr,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicBool>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let first_closed = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let (counted, closed, sending) = (
        Arc::clone(&accepted),
        Arc::clone(&first_closed),
        Arc::clone(&sent),
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let first = counted.fetch_add(1, Ordering::Relaxed) == 0;
            let closed = Arc::clone(&closed);
            let sending = Arc::clone(&sending);
            tokio::spawn(async move {
                let mut buffer = vec![0_u8; 64 * 1024];
                let mut handshaken = false;
                loop {
                    match stream.read(&mut buffer).await {
                        Ok(n) if n > 0 => {}
                        _ => break,
                    }
                    if !handshaken {
                        handshaken = true;
                        let digest = b"$40\r\n0123456789abcdef0123456789abcdef01234567\r\n";
                        if stream.write_all(digest).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    if flood {
                        // A reply announced at 1 GB, sent as fast as the
                        // gateway takes it.
                        let _ = stream.write_all(b"$1000000000\r\n").await;
                        let chunk = vec![b'x'; 64 * 1024];
                        while stream.write_all(&chunk).await.is_ok() {
                            if first {
                                sending.fetch_add(chunk.len(), Ordering::Relaxed);
                            }
                        }
                        break;
                    }
                    let _ = stream.write_all(b"$1000000\r\n").await;
                    while stream.write_all(b"x").await.is_ok() {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    break;
                }
                if first {
                    closed.store(true, Ordering::Relaxed);
                }
            });
        }
    });
    (addr, accepted, first_closed, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_never_finishes_a_reply_is_dropped_not_buffered() {
    use std::sync::atomic::Ordering;
    let (addr, accepted, first_closed, _) = endless_store(false).await;
    let fixture = Fixture::start(global_options(&format!("redis://{addr}"), 3, 20)).await;
    store_up(&fixture.running).await;
    let served = fixture.running.addr;
    assert_eq!(tally(&fixture, served, "tenant-0", 5).await, (3, 2));
    assert_eq!(tally(&fixture, served, "tenant-1", 2).await, (2, 0));
    assert!(all_fallbacks(&fixture).await >= 7.0);
    // The half-sent reply is not waited for (and buffered) for ever: the
    // gateway closes that connection and makes another.
    assert!(
        eventually(Duration::from_secs(20), || first_closed
            .load(Ordering::Relaxed)
            && accepted.load(Ordering::Relaxed) >= 2)
        .await,
        "the gateway kept the connection that never finished its reply"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_flooding_a_huge_announced_reply_is_cut_off_not_buffered() {
    use std::sync::atomic::Ordering;
    let (addr, accepted, first_closed, sent) = endless_store(true).await;
    let fixture = Fixture::start(global_options(&format!("redis://{addr}"), 3, 20)).await;
    store_up(&fixture.running).await;
    let served = fixture.running.addr;
    assert_eq!(tally(&fixture, served, "tenant-0", 5).await, (3, 2));
    assert!(all_fallbacks(&fixture).await >= 5.0);
    assert!(
        eventually(Duration::from_secs(20), || first_closed
            .load(Ordering::Relaxed)
            && accepted.load(Ordering::Relaxed) >= 2)
        .await,
        "the gateway kept the connection flooding it"
    );
    // 64 KiB a call the server was asked, and what the sockets' buffers
    // held when the gateway closed it: megabytes, not the gigabyte
    // announced (unbounded, the flood ran until the idle PING's second).
    let flooded = sent.load(Ordering::Relaxed);
    assert!(
        flooded < 32 << 20,
        "the gateway took {flooded} bytes of one reply before closing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_a_password_and_a_database_is_logged_into() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    assert_eq!(
        redis
            .command("CONFIG SET requirepass limiter-secret-0123")
            .await,
        "+OK\r\n"
    );
    let port = redis.port;
    let fixture = Fixture::start(global_options(
        &format!("redis://:limiter-secret-0123@127.0.0.1:{port}/2"),
        3,
        1000,
    ))
    .await;
    store_up(&fixture.running).await;
    let addr = fixture.running.addr;
    assert_eq!(tally(&fixture, addr, "tenant-0", 5).await, (3, 2));
    assert_eq!(all_fallbacks(&fixture).await, 0.0);
    // The bucket is in database 2.
    let exists = |db: &str| {
        let output = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "-n", db, "--no-auth-warning"])
            .args([
                "-a",
                "limiter-secret-0123",
                "EXISTS",
                "shuffle-shard:rate:tenant-0",
            ])
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    assert_eq!((exists("2").as_str(), exists("0").as_str()), ("1", "0"));

    // A wrong password never makes a working connection: every request is
    // judged by the replica's own bucket at once.
    let wrong = Fixture::start(global_options(
        &format!("redis://:not-the-password@127.0.0.1:{port}/2"),
        3,
        1000,
    ))
    .await;
    let snapshot = wrong.running.gateway.snapshot();
    let store = snapshot.limits.store().unwrap();
    store.start();
    assert!(!eventually(Duration::from_secs(2), || store.is_up()).await);
    assert_eq!(
        tally(&wrong, wrong.running.addr, "tenant-0", 5).await,
        (3, 2)
    );
    assert_eq!(fallbacks(&wrong, "unreachable").await, 5.0);
}
