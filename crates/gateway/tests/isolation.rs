//! One sick shard never hurts another shard's tenants (issue #16), through
//! real sockets: whatever a shard does wrong (on its health path, its data
//! path, or both), every tenant whose subset lacks it is served throughout,
//! and its own tenants are served once the gateway has noticed; the health
//! checker never lets one shard's slow answer stale the others; and a
//! response whose backend stops sending, or whose client stops reading, is
//! cut off after `limits.backend_idle_timeout_ms` /
//! `limits.client_write_timeout_ms` (reloadable), releasing the shard and
//! counting the stall.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use backend::Mode;
use bytes::Bytes;
use gateway::health::Active;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

use crate::util::{CustomShard, Fixture, Options, TestBody, eventually, read_while_open};

const TOKEN: &str = "isolation-admin-token-9d41c7e2b05f";

/// The shard that misbehaves.
const SICK: &str = "s3";

/// `health.staleness_ms` of the quick health settings.
const STALENESS: Duration = Duration::from_millis(1000);

/// Quick active checks: a shard is out after two failed checks, and a
/// result older than a second is stale.
const QUICK_HEALTH: &str =
    "interval_ms = 100\ntimeout_ms = 250\nfall = 2\nrise = 1\nstaleness_ms = 1000\n";

/// Two failed attempts in a row eject a shard, for longer than any test.
const QUICK_EJECTION: &str =
    "consecutive_failures = 2\nbase_ejection_ms = 60000\nmax_ejection_ms = 120000\n";

/// How long every tenant drives load at the least: several times the
/// staleness bound.
const LOAD: Duration = Duration::from_secs(3);

/// The pause between one tenant's requests (load, not synchronisation).
const PACE: Duration = Duration::from_millis(100);

/// The most requests one tenant sends in the load phase.
const MAX_REQUESTS: usize = 200;

/// How long the gateway has to take the sick shard out of rotation.
const NOTICE_WITHIN: Duration = Duration::from_secs(15);

/// How long a sick shard's tenant waits for a whole answer during the
/// load phase before counting the request as failed (and moving on, still
/// holding the connection, as a real client would).
const PATIENCE_ON_SICK: Duration = Duration::from_secs(1);

/// How long every other request may take before it counts as failed:
/// far beyond anything a healthy path needs on a busy machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// The deadline of every poll for something that must happen.
const DEADLINE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Helpers.

/// Polls the async `condition` every 20 ms until it holds or `within`
/// passes.
async fn poll_until<F, Fut>(within: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every shard's `health` as `GET /admin/shards` reports it.
async fn shard_health(fixture: &Fixture) -> Vec<(String, String)> {
    let answer = fixture.admin_json("GET", "/admin/shards").await;
    answer["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|shard| {
            (
                shard["id"].as_str().unwrap().to_owned(),
                shard["health"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// One shard's `health` in `GET /admin/shards`.
async fn health_of(fixture: &Fixture, id: &str) -> String {
    shard_health(fixture)
        .await
        .into_iter()
        .find(|(shard, _)| shard == id)
        .unwrap_or_else(|| panic!("{id} is not in /admin/shards"))
        .1
}

/// `shuffle_stream_timeouts_total{side}` on the admin `/metrics` (summed
/// over any other labels; 0 when absent).
async fn stream_timeouts(fixture: &Fixture, side: &str) -> f64 {
    let (status, _, body) = fixture.admin("GET", "/metrics", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(body.to_vec()).unwrap();
    crate::util::parse(&text)
        .samples
        .iter()
        .filter(|sample| {
            sample.name == "shuffle_stream_timeouts_total"
                && sample.labels.get("side").map(String::as_str) == Some(side)
        })
        .map(|sample| sample.value)
        .sum()
}

/// One GET as a tenant: `Ok` for a 200 whose whole body (the test
/// backend's JSON) arrived, else what went wrong.
async fn fetch(
    client: Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    key: String,
) -> Result<(), String> {
    let request = Request::get(format!("http://{addr}/work"))
        .header("authorization", format!("Bearer {key}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("no response: {e:?}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{status}, then the body broke off: {e:?}"))?
        .to_bytes();
    if status != StatusCode::OK {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    serde_json::from_slice::<serde_json::Value>(&body)
        .map_err(|e| format!("200 with a body that is not the backend's JSON ({e}): {body:?}"))?;
    Ok(())
}

/// [`fetch`], counted as failed if it has not finished within `patience`.
/// An unfinished request is left running in the background (its client
/// still waiting), not cancelled.
async fn fetch_within(fixture: &Fixture, key: &str, patience: Duration) -> Result<(), String> {
    fetch_with(
        fixture.client.clone(),
        fixture.running.addr,
        key.to_owned(),
        patience,
    )
    .await
}

async fn fetch_with(
    client: Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    key: String,
    patience: Duration,
) -> Result<(), String> {
    let mut exchange = Box::pin(fetch(client, addr, key));
    match timeout(patience, &mut exchange).await {
        Ok(outcome) => outcome,
        Err(_) => {
            tokio::spawn(exchange);
            Err(format!("no whole answer within {patience:?}"))
        }
    }
}

/// What a raw client received on one connection.
#[derive(Debug)]
struct Received {
    /// The status, 0 without a complete head.
    status: u16,
    /// The head (status line and fields).
    head: String,
    /// Everything after the head.
    body: Vec<u8>,
    /// Whether the gateway closed the connection (EOF or reset) in time.
    closed: bool,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// A GET as the tenant with API key `key`, as raw bytes.
fn raw_get(key: &str) -> Vec<u8> {
    format!("GET /work HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer {key}\r\n\r\n")
        .into_bytes()
}

/// Reads from `stream` until the peer closes it (EOF or reset) or `within`
/// passes.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> Received {
    let mut bytes = Vec::new();
    let closed = read_while_open(stream, &mut bytes, within).await;
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Received {
            status: 0,
            head: String::from_utf8_lossy(&bytes).into_owned(),
            body: Vec::new(),
            closed,
        };
    };
    let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Received {
        status,
        head,
        body: bytes[end + 4..].to_vec(),
        closed,
    }
}

/// Sends a GET to a shard in [`Mode::StallBody`] and reads what the
/// client gets, up to the gateway closing the connection: the backend's
/// head (`Content-Length: 1024`), its 16 bytes, and then the end, once the
/// gateway has given up on the backend.
async fn get_from_stalled(addr: SocketAddr, key: &str) -> Received {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(&raw_get(key)).await.unwrap();
    let received = read_until_closed(&mut stream, DEADLINE).await;
    assert_eq!(received.status, 200, "{received:?}");
    assert_eq!(
        received.header("content-length"),
        Some("1024"),
        "{received:?}"
    );
    assert!(
        received.closed,
        "the gateway kept the client's connection open for {DEADLINE:?} while the backend sent nothing: {received:?}"
    );
    assert!(
        received.body.len() < 1024,
        "the stalled body cannot have arrived whole: {received:?}"
    );
    received
}

/// What [`huge_shard`] answers: 64 MiB, more than any socket buffers hold.
const HUGE: usize = 64 << 20;

/// A shard answering every request with [`HUGE`] bytes; the counter says
/// how many of its response bodies have been dropped (sent whole, or their
/// connection gone).
async fn huge_shard() -> (CustomShard, Arc<AtomicUsize>) {
    let dropped = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&dropped);
    let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
    let shard = CustomShard::start(move |_request| {
        let body = TestBody::filler(chunk.clone(), HUGE, true).counting_drops(Arc::clone(&counter));
        async move { Response::new(body.boxed()) }
    })
    .await;
    (shard, dropped)
}

/// Sends a GET for a [`HUGE`] answer on a fresh connection and never reads
/// it; checks that the gateway gives up on the client, releases the shard
/// `id` and closes the backend's connection; then reads the client's socket
/// and checks that it ends, short of the whole answer.
async fn unread_huge_answer(
    fixture: &Fixture,
    shard: &CustomShard,
    id: &str,
    dropped: &AtomicUsize,
    key: &str,
) {
    let shard_runtime = fixture.shard(id);
    let seen_before = shard.seen().len();
    let dropped_before = dropped.load(Ordering::SeqCst);
    let mut stream = TcpStream::connect(fixture.running.addr).await.unwrap();
    stream.write_all(&raw_get(key)).await.unwrap();
    assert!(
        eventually(DEADLINE, || shard.seen().len() > seen_before).await,
        "the request never reached {id}"
    );
    assert!(
        eventually(DEADLINE, || shard_runtime.in_flight() == 0).await,
        "{id} still has {} request(s) in flight {DEADLINE:?} after its client stopped reading",
        shard_runtime.in_flight()
    );
    assert!(
        eventually(DEADLINE, || dropped.load(Ordering::SeqCst) > dropped_before).await,
        "the backend's connection stayed open after the client was given up on"
    );
    let fixture_ref = fixture;
    assert!(
        poll_until(DEADLINE, || async move {
            stream_timeouts(fixture_ref, "client").await >= 1.0
        })
        .await,
        "shuffle_stream_timeouts_total{{side=\"client\"}} never counted the stall"
    );
    let received = read_until_closed(&mut stream, DEADLINE).await;
    assert_eq!(received.status, 200, "{}", received.head);
    assert!(
        received.closed,
        "the client's connection is still open; {} body bytes read",
        received.body.len()
    );
    assert!(
        received.body.len() < HUGE,
        "the whole answer arrived, so nothing was cut off"
    );
}

/// Tenants as `(tenant id, API key)`.
type Tenants = Vec<(String, String)>;

/// The tenants whose subset holds `id`, and the others.
fn split_tenants(fixture: &Fixture, id: &str) -> (Tenants, Tenants) {
    fixture
        .tenants
        .iter()
        .cloned()
        .partition(|(tenant, _)| fixture.subset_ids(tenant).iter().any(|s| s == id))
}

// ---------------------------------------------------------------------------
// 1. The sick-shard matrix.

/// Whether the gateway must take the sick shard out of rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Notice {
    /// It must: its checks fail, or its attempts do.
    Required,
    /// It may stay: its health answer is a 200, or its bytes never stop.
    Optional,
}

/// Eight shards, k = 2, 48 tenants, quick health, quick ejection and a
/// short backend idle timeout.
fn sick_fleet() -> Options {
    Options {
        shards: 8,
        tenants: 48,
        k: 2,
        routing: "per_try_timeout_ms = 300\n".into(),
        health: QUICK_HEALTH.into(),
        outlier: QUICK_EJECTION.into(),
        // The body timeout catches a shard that trickles: its bytes never
        // stop long enough for the idle timeout.
        extra: "[limits]\nbackend_idle_timeout_ms = 300\nbackend_body_timeout_ms = 1000\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    }
}

/// Puts [`SICK`] in `mode` and drives GETs from every tenant for at least
/// [`LOAD`] (and, when the gateway must notice, until it has): no tenant
/// off the sick shard sees a single failure; the sick shard leaves
/// rotation when it must; and then every tenant, the sick shard's too, is
/// served every time.
async fn sick_shard(mode: Mode, notice: Notice) {
    let fixture = Fixture::start(sick_fleet()).await;
    let (on_sick, elsewhere) = split_tenants(&fixture, SICK);
    assert!(
        !on_sick.is_empty() && !elsewhere.is_empty(),
        "the test needs tenants on {SICK} and off it"
    );
    fixture.backend(SICK).set_mode(mode.clone());

    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = fixture
        .tenants
        .iter()
        .map(|(tenant, key)| {
            let sick = on_sick.iter().any(|(t, _)| t == tenant);
            let patience = if sick { PATIENCE_ON_SICK } else { PATIENCE };
            let (client, addr) = (fixture.client.clone(), fixture.running.addr);
            let (tenant, key, stop) = (tenant.clone(), key.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut outcomes = Vec::new();
                while !stop.load(Ordering::SeqCst) && outcomes.len() < MAX_REQUESTS {
                    outcomes.push(fetch_with(client.clone(), addr, key.clone(), patience).await);
                    tokio::time::sleep(PACE).await;
                }
                (tenant, sick, outcomes)
            })
        })
        .collect();

    let started = Instant::now();
    let mut noticed = None;
    loop {
        if noticed.is_none() {
            let health = health_of(&fixture, SICK).await;
            if health != "up" {
                noticed = Some((started.elapsed(), health));
            }
        }
        let elapsed = started.elapsed();
        let enough = noticed.is_some() || notice == Notice::Optional;
        if (elapsed >= LOAD && enough) || elapsed >= NOTICE_WITHIN {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut served_elsewhere = 0;
    let mut failed_elsewhere = Vec::new();
    for load in loads {
        let (tenant, sick, outcomes) = load.await.unwrap();
        if sick {
            continue;
        }
        for outcome in outcomes {
            match outcome {
                Ok(()) => served_elsewhere += 1,
                Err(e) => failed_elsewhere.push(format!("{tenant}: {e}")),
            }
        }
    }
    assert!(
        failed_elsewhere.is_empty(),
        "{mode} on {SICK}: {} of {} requests of tenants off {SICK} failed, e.g. {:?}",
        failed_elsewhere.len(),
        failed_elsewhere.len() + served_elsewhere,
        &failed_elsewhere[..failed_elsewhere.len().min(5)]
    );
    if notice == Notice::Required {
        assert!(
            noticed.is_some(),
            "{mode}: {SICK} was still in rotation after {NOTICE_WITHIN:?}"
        );
    }

    // A further round, one request at a time: everyone is served.
    for (tenant, key) in &fixture.tenants {
        for _ in 0..3 {
            let outcome = fetch_within(&fixture, key, PATIENCE).await;
            assert!(
                outcome.is_ok(),
                "{mode} on {SICK} (out of rotation: {noticed:?}): {tenant} (subset {:?}) failed after the gateway had noticed: {outcome:?}",
                fixture.subset_ids(tenant)
            );
        }
    }
    if notice == Notice::Required {
        assert_ne!(health_of(&fixture, SICK).await, "up", "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_health_no_head() {
    sick_shard(Mode::HealthNoHead, Notice::Required).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_health_stall_body() {
    sick_shard(Mode::HealthStallBody, Notice::Required).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_health_trickle() {
    sick_shard(
        Mode::HealthTrickle(Duration::from_millis(50)),
        Notice::Required,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_health_huge() {
    // A 200 is a 200, however long: the shard may stay in rotation, and
    // its data path is healthy.
    sick_shard(Mode::HealthHuge(64 << 20), Notice::Optional).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_health_garbage() {
    sick_shard(Mode::HealthGarbage, Notice::Required).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_unread() {
    sick_shard(Mode::Unread, Notice::Required).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_stall_body() {
    sick_shard(Mode::StallBody, Notice::Required).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_trickle() {
    // A byte every 50 ms is never idle, but no response may take longer
    // than `limits.backend_body_timeout_ms` in all: each one is cut and
    // charged to the shard, which is then ejected.
    sick_shard(Mode::Trickle(Duration::from_millis(50)), Notice::Required).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_blackhole() {
    sick_shard(Mode::Blackhole, Notice::Required).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_reset_mid_response() {
    sick_shard(Mode::ResetMidResponse, Notice::Required).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sick_close_after_head() {
    sick_shard(Mode::CloseAfterHead, Notice::Required).await;
}

/// The reported bug: a shard whose `/healthz` sends a head and then stalls
/// its body froze the checker for every shard, so after the staleness
/// bound every shard was stale and every tenant got 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_health_body_never_stales_the_other_shards() {
    // Only health keys that predate the fix: the reported configuration,
    // so the fix must hold without any setting of its own.
    let fixture = Fixture::start(Options {
        shards: 8,
        tenants: 48,
        k: 2,
        health: QUICK_HEALTH.into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    let (_, elsewhere) = split_tenants(&fixture, SICK);
    let bystander = elsewhere[0].0.clone();
    fixture.backend(SICK).set_mode(Mode::HealthStallBody);
    let fixture_ref = &fixture;
    assert!(
        poll_until(DEADLINE, || async move {
            health_of(fixture_ref, SICK).await != "up"
        })
        .await,
        "{SICK} stayed up although its health body stalls"
    );
    let started = Instant::now();
    while started.elapsed() < 3 * STALENESS {
        let others_out: Vec<(String, String)> = shard_health(&fixture)
            .await
            .into_iter()
            .filter(|(id, health)| id != SICK && health != "up")
            .collect();
        assert!(
            others_out.is_empty(),
            "{:?} after {SICK} began stalling its health body, other shards are out: {others_out:?}",
            started.elapsed()
        );
        let outcome = fetch_within(&fixture, fixture.api_key(&bystander), PATIENCE).await;
        assert!(
            outcome.is_ok(),
            "{bystander} (subset {:?}) after {:?}: {outcome:?}",
            fixture.subset_ids(&bystander),
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its checks fail (not merely go stale).
    assert_eq!(health_of(&fixture, SICK).await, "unhealthy");
}

// ---------------------------------------------------------------------------
// 2. Idle timeouts.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_body_that_stalls_is_cut_off_released_counted_and_ejects_its_shard() {
    let fixture = Fixture::start(Options {
        shards: 1,
        tenants: 2,
        k: 1,
        // Quick checks that keep passing: they must not forgive the stalls
        // between them (a gray failure is ejected by its traffic).
        health: QUICK_HEALTH.into(),
        outlier: QUICK_EJECTION.into(),
        extra: "[limits]\nbackend_idle_timeout_ms = 300\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    let shard = fixture.shard("s0");
    assert!(
        eventually(DEADLINE, || shard.health.lock().unwrap().active()
            != Active::Presumed)
        .await,
        "the start-up check never finished"
    );
    fixture.backend("s0").set_mode(Mode::StallBody);
    let key = fixture.tenants[0].1.clone();

    let received = get_from_stalled(fixture.running.addr, &key).await;
    assert_eq!(received.body.len(), 16, "{received:?}");
    assert!(
        eventually(DEADLINE, || shard.in_flight() == 0).await,
        "s0 still has {} request(s) in flight",
        shard.in_flight()
    );
    let fixture_ref = &fixture;
    assert!(
        poll_until(DEADLINE, || async move {
            stream_timeouts(fixture_ref, "backend").await >= 1.0
        })
        .await,
        "shuffle_stream_timeouts_total{{side=\"backend\"}} never counted the stall"
    );
    // One failed attempt of the two that eject.
    assert_eq!(health_of(&fixture, "s0").await, "up");

    // The second stall in a row ejects the shard.
    get_from_stalled(fixture.running.addr, &key).await;
    assert!(
        poll_until(DEADLINE, || async move {
            health_of(fixture_ref, "s0").await == "ejected"
        })
        .await,
        "two stalls in a row did not eject s0: {}",
        health_of(&fixture, "s0").await
    );
    assert!(eventually(DEADLINE, || shard.in_flight() == 0).await);
    assert!(stream_timeouts(&fixture, "backend").await >= 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_off_and_its_shard_released() {
    let (shard, dropped) = huge_shard().await;
    let fixture = Fixture::start(Options {
        health: "interval_ms = 60000\ntimeout_ms = 2000\n".into(),
        extra: "[limits]\nclient_write_timeout_ms = 300\n".into(),
        admin_token: Some(TOKEN.into()),
        ..shard.options()
    })
    .await;
    let key = fixture.tenants[0].1.clone();
    unread_huge_answer(&fixture, &shard, "c0", &dropped, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_idle_timeouts_are_reloadable() {
    let (huge, dropped) = huge_shard().await;
    let fixture = Fixture::start(Options {
        shards: 1,
        tenants: 40,
        k: 1,
        custom_shards: vec![("c0".into(), format!("http://{}", huge.addr))],
        health: "interval_ms = 60000\ntimeout_ms = 2000\n".into(),
        extra: "[limits]\nbackend_idle_timeout_ms = 60000\nclient_write_timeout_ms = 60000\n"
            .into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    let limits = |fixture: &Fixture| {
        let config = fixture.config();
        (
            config.limits().backend_idle_timeout,
            config.limits().client_write_timeout,
        )
    };
    assert_eq!(
        limits(&fixture),
        (Duration::from_secs(60), Duration::from_secs(60))
    );
    let path = fixture.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text
        .replace(
            "backend_idle_timeout_ms = 60000",
            "backend_idle_timeout_ms = 300",
        )
        .replace(
            "client_write_timeout_ms = 60000",
            "client_write_timeout_ms = 300",
        );
    assert_ne!(text, edited);
    std::fs::write(&path, edited).unwrap();
    let (status, _, body) = fixture.admin("POST", "/admin/reload", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        limits(&fixture),
        (Duration::from_millis(300), Duration::from_millis(300))
    );

    let on = |id: &str| {
        fixture
            .tenants
            .iter()
            .find(|(tenant, _)| fixture.subset_ids(tenant) == [id])
            .unwrap_or_else(|| panic!("no tenant on {id} alone"))
            .1
            .clone()
    };
    // The backend side: a stalled body is cut off after the new 300 ms.
    fixture.backend("s0").set_mode(Mode::StallBody);
    get_from_stalled(fixture.running.addr, &on("s0")).await;
    let s0 = fixture.shard("s0");
    assert!(eventually(DEADLINE, || s0.in_flight() == 0).await);
    let fixture_ref = &fixture;
    assert!(
        poll_until(DEADLINE, || async move {
            stream_timeouts(fixture_ref, "backend").await >= 1.0
        })
        .await
    );
    // The client side: a client that stops reading is given up on after
    // the new 300 ms.
    unread_huge_answer(&fixture, &huge, "c0", &dropped, &on("c0")).await;
}

/// Issue 28: a shard that sends bytes after a complete response (here a
/// second copy of tenant A's answer, 1 ms late) never has them read as
/// another tenant's answer. Bytes that are in before the connection is
/// taken again retire it; and since bytes that come only after the next
/// request went out could not be told from its answer, a shard caught
/// sending bytes nobody asked for gets no connection reused for a while.
/// So every one of tenant B's answers is B's own, for the path B asked,
/// both when B asks once A's late copy is in and when B asks at once
/// (before, 42 % to 67 % of B's answers were A's, the second way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_bytes_from_a_shard_never_become_another_tenants_answer() {
    let fixture = Fixture::start(Options {
        shards: 1,
        k: 1,
        tenants: 2,
        ..Options::default()
    })
    .await;
    let shard = &fixture.backends[0];
    shard.set_mode("late-bytes:1".parse().unwrap());
    let (a, b) = ("tenant-0", "tenant-1");
    let mut wrong = Vec::new();
    let mut asked = 0;
    let mut ask_as_b = async |path: String| {
        asked += 1;
        let (status, body) = fixture.get(b, &path).await;
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if status != StatusCode::OK || answer["tenant"] != b || answer["path"] != path.as_str() {
            wrong.push((path, status, String::from_utf8_lossy(&body).into_owned()));
        }
    };
    for round in 0..100 {
        let late = shard.late_answers();
        let (status, _, _) = fixture
            .send(
                Some(a),
                "GET",
                &format!("/a/{round}"),
                &[("x-late-bytes", "1")],
                b"",
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        // The first rounds: B asks once A's late copy is in.
        if round < 20 {
            assert!(
                eventually(Duration::from_secs(30), || shard.late_answers() > late).await,
                "the shard never sent its late copy"
            );
            for i in 0..3 {
                ask_as_b(format!("/b/{round}/{i}")).await;
            }
        } else {
            // Then at once, before the copy is sent.
            ask_as_b(format!("/b/{round}")).await;
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {asked} answers to {b} were not its own: {wrong:?}",
        wrong.len(),
    );
}
