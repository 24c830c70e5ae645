//! What an adversarial review of the fault-isolation work (issue #16)
//! found, pinned: a reload that shortens the health interval must not stale
//! the fleet; a shard whose checks pass slowly must not flap stale; a slow
//! client must not get a fast shard charged under
//! `limits.backend_body_timeout_ms`; and a reload cannot move the admin
//! listener (which would dodge the refusal of token-less pages on a
//! reachable address).

use std::time::Duration;

use backend::Mode;
use bytes::Bytes;
use gateway::health::Availability;
use http::{Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::util::{CustomShard, Fixture, Options, full};

const TOKEN: &str = "second-look-admin-token-5be0a1";

/// Every shard's availability now, by id.
fn availability(fixture: &Fixture) -> Vec<(String, Availability)> {
    let snapshot = fixture.running.gateway.snapshot();
    snapshot
        .all_shards()
        .map(|shard| (shard.id.clone(), shard.availability(&snapshot.config)))
        .collect()
}

/// Watches every shard for `period`, every 20 ms, and returns the first
/// moment one was not up, if any.
async fn first_not_up(fixture: &Fixture, period: Duration) -> Option<Vec<(String, Availability)>> {
    let until = Instant::now() + period;
    while Instant::now() < until {
        let now = availability(fixture);
        if now
            .iter()
            .any(|(_, availability)| *availability != Availability::Up)
        {
            return Some(now);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Rewrites the fixture's configuration with `edit` and reloads it through
/// the admin API; the reload's status and body.
async fn reload_with(fixture: &Fixture, edit: impl Fn(&str) -> String) -> (StatusCode, String) {
    let path = fixture.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = edit(&text);
    assert_ne!(text, edited, "the edit changed nothing");
    std::fs::write(&path, edited).unwrap();
    let (status, _, body) = fixture.admin("POST", "/admin/reload", Some(TOKEN)).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Before the fix, every checker slept out its old interval (10 s here)
/// while staleness was judged by the new one (3 × 100 ms): within half a
/// second every shard was stale and every tenant got 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_shortens_the_interval_never_stales_the_fleet() {
    let fixture = Fixture::start(Options {
        shards: 4,
        tenants: 20,
        // Staleness wide enough that a busy machine delaying a check by a
        // second cannot trip it; the bug left checkers asleep for 10 s.
        health: "interval_ms = 10000\ntimeout_ms = 200\nstaleness_ms = 30000\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    // Every shard checked once, under the long interval.
    let snapshot = fixture.running.gateway.snapshot();
    for shard in snapshot.all_shards() {
        let checked = crate::util::eventually(Duration::from_secs(10), || {
            shard.health.lock().unwrap().active() == gateway::health::Active::Healthy
        })
        .await;
        assert!(checked, "{} was never checked", shard.id);
    }
    drop(snapshot);
    let (status, body) = reload_with(&fixture, |text| {
        text.replace("interval_ms = 10000", "interval_ms = 100")
            .replace("staleness_ms = 30000", "staleness_ms = 1500")
    })
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        fixture.config().health().interval,
        Duration::from_millis(100)
    );
    // Well past the new staleness bound (1.5 s), well short of the old
    // interval (10 s) the checkers slept on before the fix.
    if let Some(seen) = first_not_up(&fixture, Duration::from_secs(4)).await {
        panic!("a shard left rotation after the reload: {seen:?}");
    }
    for (tenant, _) in &fixture.tenants {
        let (status, _) = fixture.get(tenant, "/after-reload").await;
        assert_eq!(status, StatusCode::OK, "{tenant}");
    }
}

/// A shard that answers its checks well but slowly (250 ms, within the
/// 1000 ms timeout, with checks 100 ms apart) is checked every 350 ms: the
/// default staleness used to be 3 × interval (300 ms), so it flapped stale
/// between its own passing checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_whose_checks_pass_slowly_never_goes_stale() {
    let fixture = Fixture::start(Options {
        shards: 2,
        tenants: 4,
        // The default staleness is 3 × 100 + 1000 ms; the old default,
        // 3 × interval (300 ms), is shorter than one slow check cycle.
        health: "interval_ms = 100\ntimeout_ms = 1000\n".into(),
        ..Options::default()
    })
    .await;
    fixture.backends[0].set_mode(Mode::Slow(Duration::from_millis(250)));
    // Long enough for several slow checks.
    if let Some(seen) = first_not_up(&fixture, Duration::from_secs(2)).await {
        panic!("a shard whose checks pass left rotation: {seen:?}");
    }
}

/// The bytes of one answer a slow client reads.
const ANSWER: usize = 8 << 20;

/// Under `limits.backend_body_timeout_ms` only the time a body spends
/// waiting on its backend counts: a fast shard sending 8 MiB to a client
/// that takes several seconds to read them is not cut off or charged,
/// though the whole exchange lasts far longer than the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_never_uses_up_a_fast_shards_body_budget() {
    let payload = Bytes::from(vec![b'x'; ANSWER]);
    let shard = CustomShard::start(move |_request| {
        let payload = payload.clone();
        async move { Response::new(full(payload)) }
    })
    .await;
    let fixture = Fixture::start(Options {
        extra: "[limits]\nbackend_body_timeout_ms = 1000\n".into(),
        health: "interval_ms = 60000\ntimeout_ms = 2000\n".into(),
        ..shard.options()
    })
    .await;
    let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
    let key = fixture.api_key("tenant-0").to_owned();
    stream
        .write_all(
            format!(
                "GET /big HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {key}\r\nconnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // About 4 s of reading, 64 KiB every 30 ms: four times the budget.
    let started = Instant::now();
    let mut received = Vec::with_capacity(ANSWER + 1024);
    let mut chunk = vec![0_u8; 64 * 1024];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk))
            .await
            .expect("the gateway neither sent nor closed for 30 s");
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => received.extend_from_slice(&chunk[..n]),
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let head_end = received
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    assert!(
        started.elapsed() > Duration::from_secs(1),
        "the client read faster than the budget; the test proves nothing"
    );
    assert_eq!(
        received.len() - head_end,
        ANSWER,
        "the answer was cut off: {}",
        String::from_utf8_lossy(&received[..head_end])
    );
    let snapshot = fixture.running.gateway.snapshot();
    let shard = snapshot.all_shards().next().unwrap();
    assert_eq!(
        shard.failures.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "the shard was charged for its client's slowness"
    );
}

/// The admin listener is bound at start: a reload that names another
/// address is refused, whatever else it says, and the old configuration
/// keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_cannot_move_the_admin_listener() {
    let fixture = Fixture::start(Options {
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    let bound = fixture.config().admin().listen;
    let (status, body) = reload_with(&fixture, |text| {
        text.replace(
            "[admin]\nlisten = \"127.0.0.1:0\"",
            "[admin]\nlisten = \"127.0.0.1:1\"\nstatus_page_without_token = true",
        )
    })
    .await;
    assert_ne!(status, StatusCode::OK, "{body}");
    assert!(body.contains("admin.listen"), "{body}");
    assert_eq!(fixture.config().admin().listen, bound);
    let (status, _, _) = fixture.admin("GET", "/", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// A closing connection that still drains its client (lingering, after a
/// 413 answered before the body was read) keeps its place under
/// `limits.max_connections`: with a cap of one, a second client is not
/// served until the first connection's linger is over (two seconds while
/// its client keeps sending). Before, the linger ran outside the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lingering_close_holds_its_connection_slot() {
    let fixture = Fixture::start(Options {
        extra: "[limits]\nmax_connections = 1\nmax_body_bytes = 1024\n".into(),
        ..Options::default()
    })
    .await;
    let key = fixture.api_key("tenant-0").to_owned();
    let mut first = TcpStream::connect(fixture.running.addr).await.unwrap();
    first
        .write_all(
            format!(
                "POST /upload HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {key}\r\ncontent-length: 1000000\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = vec![0_u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(20), first.read(&mut answer))
        .await
        .expect("no answer to the oversized upload")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&answer[..read]).starts_with("HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&answer[..read])
    );
    let refused_at = Instant::now();
    // The first client keeps uploading, so the gateway keeps draining it.
    let keep_sending = tokio::spawn(async move {
        let chunk = [b'x'; 512];
        for _ in 0..100 {
            if first.write_all(&chunk).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut second = TcpStream::connect(fixture.running.addr).await.unwrap();
    second
        .write_all(
            format!("GET /later HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {key}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let read = tokio::time::timeout(Duration::from_secs(20), second.read(&mut answer))
        .await
        .expect("the second client was never served")
        .unwrap();
    let waited = refused_at.elapsed();
    assert!(
        String::from_utf8_lossy(&answer[..read]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer[..read])
    );
    // The linger lasts two seconds; a second client served well before
    // that was let in beside it.
    assert!(
        waited >= Duration::from_secs(1),
        "the second client was served {waited:?} after the first was refused, while the first still lingered"
    );
    keep_sending.abort();
}
