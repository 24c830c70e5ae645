//! A fleet of replicas as one gateway (issue 30), through real sockets and
//! a real `redis-server`: three gateways of one configuration file (each
//! its own listeners, suspects and shard health, as three pods have) with
//! `[fleet]` on one store. A poison tenant's requests, one replica after
//! another or all at once, crash at most `routing.poison_after` members in
//! total (without `[fleet]`, R × `poison_after`); an operator's drain,
//! fail and restore on one replica reach the others and a restarted one;
//! a suspect is known everywhere and cleared everywhere; and a store that
//! is killed, frozen, restarted empty or replaced by a server speaking
//! garbage never fails a request, is counted and shown, and gets every
//! mark back when it returns.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backend::{Mode, POISON_HEADER};
use gateway::Snapshot;
use gateway::runtime::{self, Running};
use http::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::util::{Fixture, Options, send_to};
use testkit::redis::Redis;

const TOKEN: &str = "fleet-admin-token-8b2d64e1f0";

/// The deadline of every poll for something that must happen (the bound
/// itself, `fleet.sync_ms`, is 250 ms; a busy machine gets room).
const DEADLINE: Duration = Duration::from_secs(10);

/// Three replicas: the fixture's gateway (replica 0, which also owns the
/// test backends) and two more started from its configuration file.
struct Fleet {
    fixture: Arc<Fixture>,
    others: Vec<Running>,
}

impl Fleet {
    /// Twelve crash-on-poison shards (down for `down` once crashed), k = 4,
    /// `routing.poison_after = 2`, three replicas; `[fleet]` on `store`
    /// when given.
    async fn start(store: Option<&str>, down: Duration) -> Self {
        Self::start_with(store, "", down).await
    }

    /// [`Fleet::start`] with `lines` more in `[fleet]`.
    async fn start_with(store: Option<&str>, lines: &str, down: Duration) -> Self {
        Self::start_quarantined(store, lines, 600, down).await
    }

    /// [`Fleet::start_with`] with `routing.quarantine_seconds = quarantine`.
    async fn start_quarantined(
        store: Option<&str>,
        lines: &str,
        quarantine: u64,
        down: Duration,
    ) -> Self {
        let extra = match store {
            // A timeout a loaded test machine meets: the bound being tested
            // is the fleet's, not Redis's speed.
            Some(url) => format!("[fleet]\nstore = \"{url}\"\ntimeout_ms = 500\n{lines}\n"),
            None => String::new(),
        };
        let fixture = Fixture::start(Options {
            shards: 12,
            tenants: 60,
            k: 4,
            routing: format!("poison_after = 2\nquarantine_seconds = {quarantine}\n"),
            // Checks slow enough that passive ejection and the operator
            // are what move shards.
            extra,
            admin_token: Some(TOKEN.into()),
            ..Options::default()
        })
        .await;
        for backend in &fixture.backends {
            backend.set_mode(Mode::CrashOnPoison(down));
        }
        let mut others = Vec::new();
        for _ in 0..2 {
            others.push(Self::replica(&fixture).await);
        }
        Self {
            fixture: Arc::new(fixture),
            others,
        }
    }

    /// Another replica of the fixture's configuration.
    async fn replica(fixture: &Fixture) -> Running {
        let snapshot = Snapshot::load(&fixture.config_path(), None).unwrap();
        runtime::start(snapshot).await.unwrap()
    }

    /// Replica `n`'s data and admin addresses.
    fn addrs(&self, n: usize) -> (std::net::SocketAddr, std::net::SocketAddr) {
        let running = if n == 0 {
            &self.fixture.running
        } else {
            &self.others[n - 1]
        };
        (running.addr, running.admin_addr)
    }

    /// A request of `tenant` through replica `n`.
    async fn send(&self, n: usize, tenant: &str, path: &str, poison: bool) -> StatusCode {
        let headers: &[(&str, &str)] = if poison { &[(POISON_HEADER, "1")] } else { &[] };
        let key = self.fixture.api_key(tenant);
        send_to(
            &self.fixture.client,
            self.addrs(n).0,
            "GET",
            path,
            Some(key),
            headers,
            b"",
        )
        .await
        .0
    }

    /// An admin call on replica `n` that must succeed: its JSON.
    async fn admin(&self, n: usize, method: &str, path: &str) -> Value {
        let (status, _, body) = send_to(
            &self.fixture.client,
            self.addrs(n).1,
            method,
            path,
            Some(TOKEN),
            &[],
            b"",
        )
        .await;
        assert!(
            status.is_success(),
            "replica {n}: {method} {path}: {status} {}",
            String::from_utf8_lossy(&body)
        );
        serde_json::from_slice(&body).unwrap()
    }

    /// `GET path` on the admin API at `admin` (a replica outside the three),
    /// with the token: the body as text.
    async fn admin_text(&self, admin: std::net::SocketAddr, path: &str) -> String {
        let (_, _, body) = send_to(
            &self.fixture.client,
            admin,
            "GET",
            path,
            Some(TOKEN),
            &[],
            b"",
        )
        .await;
        String::from_utf8_lossy(&body).into_owned()
    }

    /// The tenants replica `n` lists as suspect.
    async fn suspects(&self, n: usize) -> BTreeSet<String> {
        self.admin(n, "GET", "/admin/tenants?suspects=1").await["suspects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["tenant"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits until every replica lists `tenant` as suspect (`suspect`), or
    /// lists it no more.
    async fn suspect_everywhere(&self, tenant: &str, suspect: bool) {
        for n in 0..3 {
            let deadline = tokio::time::Instant::now() + DEADLINE;
            while self.suspects(n).await.contains(tenant) != suspect {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "replica {n}: is {tenant} suspect? {}, not {suspect}",
                    !suspect
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Shard `id` as replica `n`'s admin API shows it.
    async fn shard(&self, n: usize, id: &str) -> Value {
        self.admin(n, "GET", "/admin/shards").await["shards"]
            .as_array()
            .unwrap()
            .iter()
            .find(|shard| shard["id"] == id)
            .cloned()
            .unwrap()
    }

    /// The shards the poison marker crashed.
    fn crashed(&self) -> BTreeSet<String> {
        self.fixture
            .backends
            .iter()
            .filter(|backend| backend.crashes() > 0)
            .map(|backend| backend.id().to_owned())
            .collect()
    }

    /// Waits until polling `check` on every replica holds.
    async fn everywhere<F, Fut>(&self, what: &str, check: F)
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = bool>,
    {
        for n in 0..3 {
            let deadline = tokio::time::Instant::now() + DEADLINE;
            loop {
                if check(n).await {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "replica {n}: {what}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// The first tenant, and the tenants that keep a member whatever it
/// crashes (their subset is not inside its subset).
fn poisoner_and_others(fixture: &Fixture) -> (String, Vec<String>) {
    let poisoner = fixture.tenants[0].0.clone();
    let subset: BTreeSet<String> = fixture.subset_ids(&poisoner).into_iter().collect();
    let others = fixture.tenants[1..]
        .iter()
        .map(|(id, _)| id.clone())
        .filter(|id| !fixture.subset_ids(id).iter().all(|s| subset.contains(s)))
        .collect();
    (poisoner, others)
}

/// The other tenants' GETs through every replica in turn until stopped:
/// the requests sent and the errors seen.
fn background_load(
    fleet: &Arc<Fleet>,
    tenants: &[String],
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
    let (fleet, tenants, stop) = (Arc::clone(fleet), tenants.to_vec(), Arc::clone(stop));
    tokio::spawn(async move {
        let (mut sent, mut errors) = (0, Vec::new());
        while !stop.load(Ordering::SeqCst) {
            for tenant in &tenants {
                let n = sent % 3;
                let status = fleet.send(n, tenant, "/load", false).await;
                sent += 1;
                if status != StatusCode::OK {
                    errors.push(format!("{tenant} through replica {n}: {status}"));
                }
            }
        }
        (sent, errors)
    })
}

/// Stops the load and checks that nobody else saw an error, but for the
/// tenants whose first two members (in selection order, where every
/// replica sends them first) were both crashed: for them that is a double
/// failure, and they are served by their other members once the fleet
/// could have told why those went out (`lately_out`'s settling time);
/// they are checked to be served on every replica after it.
async fn nobody_else_erred(
    fleet: &Fleet,
    stop: &AtomicBool,
    load: tokio::task::JoinHandle<(usize, Vec<String>)>,
) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let (sent, errors) = load.await.unwrap();
    assert!(sent > 0, "the load ran");
    let crashed = fleet.crashed();
    let doubly_hit = |tenant: &str| {
        fleet.fixture.subset_ids(tenant)[..2]
            .iter()
            .all(|member| crashed.contains(member))
    };
    let unexpected: Vec<&String> = errors
        .iter()
        .filter(|error| !doubly_hit(error.split(' ').next().unwrap()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "other tenants saw errors: {unexpected:?}"
    );
    // The settling time is four times fleet.timeout_ms (500 ms here).
    tokio::time::sleep(Duration::from_millis(2100)).await;
    for error in &errors {
        let tenant = error.split(' ').next().unwrap();
        for n in 0..3 {
            assert_eq!(
                fleet.send(n, tenant, "/later", false).await,
                StatusCode::OK,
                "{tenant}, whose first members crashed, is not served by its others"
            );
        }
    }
}

/// `redis-server`, or `None` when the test skips.
async fn redis() -> Option<Redis> {
    Redis::start().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_one_replica_after_another_crashes_at_most_poison_after_members_in_all() {
    let Some(redis) = redis().await else { return };
    let fleet = Arc::new(Fleet::start(Some(&redis.url()), Duration::from_secs(60)).await);
    let (poisoner, others) = poisoner_and_others(&fleet.fixture);
    let stop = Arc::new(AtomicBool::new(false));
    let load = background_load(&fleet, &others, &stop);

    // One poison request at a time, through replicas 0, 1, 2, 0, 1, 2:
    // each replica asks the fleet before its tenant leaves the members
    // the fleet's strikes name.
    for round in 0..6 {
        let status = fleet.send(round % 3, &poisoner, "/poison", true).await;
        assert!(status.is_server_error(), "round {round}: {status}");
    }
    let crashed = fleet.crashed();
    assert!(
        crashed.len() <= 2,
        "three replicas together crashed {crashed:?}, more than routing.poison_after = 2"
    );
    // Suspect on every replica, with the members it struck.
    fleet.suspect_everywhere(&poisoner, true).await;
    nobody_else_erred(&fleet, &stop, load).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_fleet_each_replica_lets_a_poison_tenant_crash_poison_after_members_of_its_own() {
    // The control experiment: the same requests without `[fleet]`.
    let fleet = Arc::new(Fleet::start(None, Duration::from_secs(60)).await);
    let (poisoner, _) = poisoner_and_others(&fleet.fixture);
    for round in 0..6 {
        let status = fleet.send(round % 3, &poisoner, "/poison", true).await;
        assert!(status.is_server_error(), "round {round}: {status}");
    }
    let crashed = fleet.crashed();
    assert!(
        crashed.len() > 2,
        "without [fleet] only {crashed:?} crashed: the fleet test above could not fail"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_sent_at_once_through_three_replicas_crashes_at_most_poison_after_members() {
    let Some(redis) = redis().await else { return };
    let fleet = Arc::new(Fleet::start(Some(&redis.url()), Duration::from_secs(60)).await);
    let (poisoner, others) = poisoner_and_others(&fleet.fixture);
    let stop = Arc::new(AtomicBool::new(false));
    let load = background_load(&fleet, &others, &stop);

    // Eight requests through each replica, let go together.
    let (go, ready) = watch::channel(false);
    let requests: Vec<_> = (0..24)
        .map(|i| {
            let (fleet, poisoner, mut ready) =
                (Arc::clone(&fleet), poisoner.clone(), ready.clone());
            tokio::spawn(async move {
                let _ = ready.wait_for(|go| *go).await;
                fleet.send(i % 3, &poisoner, "/poison", true).await
            })
        })
        .collect();
    go.send(true).unwrap();
    for request in requests {
        let status = request.await.unwrap();
        assert!(status.is_server_error(), "{status}");
    }
    let crashed = fleet.crashed();
    assert!(
        crashed.len() <= 2,
        "24 poison requests at once through three replicas crashed {crashed:?}"
    );
    nobody_else_erred(&fleet, &stop, load).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_set_on_one_replica_reaches_every_replica_and_a_restarted_one() {
    let Some(redis) = redis().await else { return };
    let fleet = Arc::new(Fleet::start(Some(&redis.url()), Duration::from_secs(60)).await);
    for backend in &fleet.fixture.backends {
        backend.set_mode(Mode::Healthy);
    }
    let drained = fleet.admin(0, "POST", "/admin/shards/s0/drain").await;
    assert_eq!(drained["applied_on"], "fleet", "{drained}");
    let by = drained["shard"]["marked_by"].as_str().unwrap().to_owned();
    // The admin API names the replica that set it, and says the store is up.
    let view = fleet.admin(0, "GET", "/admin/fleet").await;
    assert_eq!(view["fleet"]["replica_id"], by.as_str(), "{view}");
    assert_eq!(view["fleet"]["up"], true, "{view}");
    assert_eq!(view["fleet"]["store"], format!("127.0.0.1:{}", redis.port));
    fleet
        .everywhere("s0 is drained, marked by replica 0", |n| {
            let (fleet, by) = (Arc::clone(&fleet), by.clone());
            async move {
                let shard = fleet.shard(n, "s0").await;
                shard["drained"] == true && shard["marked_by"] == by.as_str()
            }
        })
        .await;
    // Another replica's status page says who drained it.
    let page = fleet.admin_text(fleet.addrs(1).1, "/").await;
    assert!(
        page.contains(&format!("by admin on {by} at ")),
        "replica 1's status page does not name who drained s0"
    );
    // Every replica keeps s0's tenants away from it now.
    let s0 = fleet.fixture.backend("s0");
    let before = s0.requests();
    let tenants: Vec<String> = fleet
        .fixture
        .tenants
        .iter()
        .map(|(id, _)| id.clone())
        .filter(|id| fleet.fixture.subset_ids(id).contains(&"s0".to_owned()))
        .collect();
    assert!(!tenants.is_empty());
    for n in 0..3 {
        for tenant in &tenants {
            assert_eq!(
                fleet.send(n, tenant, "/after-drain", false).await,
                StatusCode::OK
            );
        }
    }
    assert_eq!(s0.requests(), before, "a drained shard got requests");

    // A replica started now knows the mark before its first request.
    let restarted = Fleet::replica(&fleet.fixture).await;
    let shards = fleet
        .admin_text(restarted.admin_addr, "/admin/shards")
        .await;
    let shards: Value = serde_json::from_str(&shards).unwrap();
    let s0_view = shards["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|shard| shard["id"] == "s0")
        .unwrap();
    assert_eq!(s0_view["drained"], true, "{s0_view}");

    // Restored through another replica: restored everywhere.
    fleet.admin(2, "POST", "/admin/shards/s0/restore").await;
    fleet
        .everywhere("s0 is restored", |n| {
            let fleet = Arc::clone(&fleet);
            async move { fleet.shard(n, "s0").await["drained"] == false }
        })
        .await;
    drop(restarted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspect_is_known_by_every_replica_and_cleared_through_any() {
    let Some(redis) = redis().await else { return };
    let fleet = Arc::new(Fleet::start(Some(&redis.url()), Duration::from_secs(60)).await);
    let (poisoner, _) = poisoner_and_others(&fleet.fixture);
    let status = fleet.send(0, &poisoner, "/poison", true).await;
    assert!(status.is_server_error(), "{status}");
    fleet.suspect_everywhere(&poisoner, true).await;
    // A replica started now knows it.
    let restarted = Fleet::replica(&fleet.fixture).await;
    let listed = fleet
        .admin_text(restarted.admin_addr, "/admin/tenants?suspects=1")
        .await;
    assert!(
        listed.contains(&format!("\"{poisoner}\"")),
        "a restarted replica does not know the suspect"
    );

    let cleared = fleet
        .admin(1, "POST", &format!("/admin/tenants/{poisoner}/clear"))
        .await;
    assert_eq!(cleared["was_suspect"], true);
    assert_eq!(cleared["applied_on"], "fleet");
    fleet.suspect_everywhere(&poisoner, false).await;
    drop(restarted);
}

/// Fallbacks of `operation` counted by replica `n`, and its store gauge.
async fn fleet_metrics(fleet: &Fleet, n: usize, operation: &str) -> (f64, f64) {
    let (status, _, body) = send_to(
        &fleet.fixture.client,
        fleet.addrs(n).1,
        "GET",
        "/metrics",
        Some(TOKEN),
        &[],
        b"",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let exposition = crate::util::parse(&String::from_utf8_lossy(&body));
    (
        exposition.count("shuffle_fleet_fallbacks_total", &[("operation", operation)]),
        exposition.value("shuffle_fleet_store_up", &[]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_dies_freezes_or_restarts_empty_never_fails_a_request_and_gets_every_mark_back()
 {
    let Some(mut redis) = redis().await else {
        return;
    };
    let fleet = Arc::new(Fleet::start(Some(&redis.url()), Duration::from_secs(60)).await);
    for backend in &fleet.fixture.backends {
        backend.set_mode(Mode::Healthy);
    }
    let tenants: Vec<String> = fleet
        .fixture
        .tenants
        .iter()
        .map(|(id, _)| id.clone())
        .collect();
    let all_served = |fleet: Arc<Fleet>, tenants: Vec<String>| async move {
        for n in 0..3 {
            for tenant in tenants.iter().take(10) {
                assert_eq!(
                    fleet.send(n, tenant, "/served", false).await,
                    StatusCode::OK
                );
            }
        }
    };

    // A suspect the fleet holds before the store dies.
    let (poisoner, _) = poisoner_and_others(&fleet.fixture);
    for backend in &fleet.fixture.backends {
        backend.set_mode(Mode::CrashOnPoison(Duration::from_millis(50)));
    }
    let status = fleet.send(0, &poisoner, "/poison", true).await;
    assert!(status.is_server_error(), "{status}");
    for backend in &fleet.fixture.backends {
        backend.set_mode(Mode::Healthy);
    }
    fleet.suspect_everywhere(&poisoner, true).await;

    // Killed: every request is still served; the gauge drops and a
    // missed look is counted.
    redis.kill();
    all_served(Arc::clone(&fleet), tenants.clone()).await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (syncs, up) = fleet_metrics(&fleet, 0, "sync").await;
        if syncs > 0.0 && up == 0.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no fallback counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The status page says containment is per replica now.
    let page = fleet.admin_text(fleet.addrs(0).1, "/").await;
    assert!(
        page.contains("containment per replica: fleet store unreachable since"),
        "the banner does not say the fleet store is unreachable"
    );
    // A drain while it is down is this replica's alone, for now.
    let drained = fleet.admin(0, "POST", "/admin/shards/s1/drain").await;
    assert_ne!(drained["applied_on"], "fleet", "{drained}");

    // Restarted empty: the drain is written back, and reaches the others.
    redis.restart().await;
    fleet
        .everywhere("s1 is drained after the store came back empty", |n| {
            let fleet = Arc::clone(&fleet);
            async move { fleet.shard(n, "s1").await["drained"] == true }
        })
        .await;
    all_served(Arc::clone(&fleet), tenants.clone()).await;
    // The suspect too, written back, still held everywhere some looks
    // later (a store restarted empty lifts nobody's quarantine).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for n in 0..3 {
        assert!(
            fleet.suspects(n).await.contains(&poisoner),
            "replica {n} forgot the suspect when the store came back empty"
        );
    }

    // Frozen (SIGSTOP, connections open): requests are served all the
    // same, and the store is used again once it wakes.
    redis.signal("STOP");
    all_served(Arc::clone(&fleet), tenants.clone()).await;
    fleet.admin(1, "POST", "/admin/shards/s2/drain").await;
    redis.signal("CONT");
    fleet
        .everywhere("s2 is drained after the store woke", |n| {
            let fleet = Arc::clone(&fleet);
            async move { fleet.shard(n, "s2").await["drained"] == true }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_speaking_garbage_is_never_trusted_and_requests_are_served() {
    // A "Redis" that answers every connection with bytes that are not
    // RESP, and one that announces a reply of a gigabyte.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut turn = 0_usize;
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            turn += 1;
            tokio::spawn(async move {
                let mut buffer = [0_u8; 1024];
                let _ = socket.read(&mut buffer).await;
                let reply: &[u8] = if turn.is_multiple_of(2) {
                    b"$1073741824\r\nxxxxxxxxxxxxxxxx"
                } else {
                    b"\x00\xff garbage \x7f\r\n"
                };
                let _ = socket.write_all(reply).await;
                let _ = socket.read(&mut buffer).await;
            });
        }
    });
    let fleet = Arc::new(
        Fleet::start(
            Some(&format!("redis://127.0.0.1:{}", addr.port())),
            Duration::from_secs(60),
        )
        .await,
    );
    for backend in &fleet.fixture.backends {
        backend.set_mode(Mode::Healthy);
    }
    for n in 0..3 {
        for (tenant, _) in fleet.fixture.tenants.iter().take(10) {
            assert_eq!(
                fleet.send(n, tenant, "/served", false).await,
                StatusCode::OK
            );
        }
    }
    let drained = fleet.admin(0, "POST", "/admin/shards/s3/drain").await;
    assert_ne!(drained["applied_on"], "fleet", "{drained}");
    let (_, up) = fleet_metrics(&fleet, 0, "mark").await;
    assert_eq!(up, 0.0, "a store speaking garbage counted as up");
    let view = fleet.admin(0, "GET", "/admin/fleet").await;
    assert_eq!(view["fleet"]["up"], false, "{view}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_over_tls_is_shared_and_one_whose_certificate_fails_is_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let ca = crate::pki::Ca::new("fleet store CA");
    let (cert, key) = ca.server(&["127.0.0.1"]).write(dir.path(), "redis");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let Some((_redis, tls_port)) = Redis::start_tls(&cert, &key).await else {
        return;
    };
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let lines = format!("ca_file = \"{}\"\n", ca_file.display());
    let fleet = Arc::new(Fleet::start_with(Some(&url), &lines, Duration::from_secs(60)).await);
    for backend in &fleet.fixture.backends {
        backend.set_mode(Mode::Healthy);
    }
    let drained = fleet.admin(0, "POST", "/admin/shards/s0/drain").await;
    assert_eq!(drained["applied_on"], "fleet", "{drained}");
    fleet
        .everywhere("s0 is drained over TLS", |n| {
            let fleet = Arc::clone(&fleet);
            async move { fleet.shard(n, "s0").await["drained"] == true }
        })
        .await;

    // Another CA: the handshake fails, the store is never up, and the
    // gateway serves on its own.
    let other = crate::pki::Ca::new("another CA");
    let other_file = dir.path().join("other.pem");
    std::fs::write(&other_file, other.pem()).unwrap();
    let lines = format!("ca_file = \"{}\"\n", other_file.display());
    let distrusting = Fleet::start_with(Some(&url), &lines, Duration::from_secs(60)).await;
    for backend in &distrusting.fixture.backends {
        backend.set_mode(Mode::Healthy);
    }
    let (tenant, _) = &distrusting.fixture.tenants[0];
    assert_eq!(
        distrusting.send(0, tenant, "/plain", false).await,
        StatusCode::OK
    );
    let view = distrusting.admin(0, "GET", "/admin/fleet").await;
    assert_eq!(view["fleet"]["up"], false, "{view}");
    let drained = distrusting.admin(0, "POST", "/admin/shards/s0/drain").await;
    assert_ne!(drained["applied_on"], "fleet", "{drained}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspect_expires_on_every_replica_by_the_stores_clock() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    // A one-second quarantine; the crashed shards come back at once.
    let fleet = Arc::new(
        Fleet::start_quarantined(Some(&redis.url()), "", 1, Duration::from_millis(100)).await,
    );
    let (poisoner, _) = poisoner_and_others(&fleet.fixture);
    let status = fleet.send(0, &poisoner, "/poison", true).await;
    assert!(status.is_server_error(), "{status}");
    fleet.suspect_everywhere(&poisoner, true).await;
    // The quarantine ends in the store, and every replica lets it go.
    fleet.suspect_everywhere(&poisoner, false).await;
    // A replica started now does not learn it (the store drops an ended
    // quarantine when it is read).
    let restarted = Fleet::replica(&fleet.fixture).await;
    let listed = fleet
        .admin_text(restarted.admin_addr, "/admin/tenants?suspects=1")
        .await;
    assert!(
        !listed.contains(&format!("\"{poisoner}\"")),
        "a replica started after the quarantine ended learned it"
    );
    assert_eq!(
        redis.command("HLEN shuffle-shard:fleet:suspects").await,
        ":0\r\n",
        "the store still holds the ended quarantine after a replica read it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_cannot_change_the_fleet() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = Fleet::start(Some(&redis.url()), Duration::from_secs(60)).await;
    let path = fleet.fixture.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    // A replica taken out of the fleet by a reload would keep sharing
    // through the store it started with while its requests stop keeping
    // the fleet's rules: refused, naming the key.
    let edited = text.replace("timeout_ms = 500", "timeout_ms = 200");
    assert_ne!(edited, text);
    std::fs::write(&path, edited).unwrap();
    let error = fleet.fixture.running.gateway.reload(false).unwrap_err();
    let error = error.to_string();
    assert!(
        error.contains("fleet") && error.contains("restart"),
        "{error}"
    );
    std::fs::write(&path, text).unwrap();
    assert!(fleet.fixture.running.gateway.reload(false).is_ok());
}

/// The number of scripts `redis` has run (`EVALSHA` and `EVAL` calls).
async fn scripts_run(redis: &Redis) -> u64 {
    use tokio::io::AsyncReadExt as _;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", redis.port))
        .await
        .unwrap();
    stream.write_all(b"INFO commandstats\r\n").await.unwrap();
    let mut reply = Vec::new();
    let mut buffer = [0_u8; 4096];
    // `$LENGTH\r\n` then the text and a CRLF.
    loop {
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(read > 0, "redis closed the INFO reply early");
        reply.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&reply);
        if let Some((head, body)) = text.split_once("\r\n")
            && let Ok(length) = head.trim_start_matches('$').parse::<usize>()
            && body.len() >= length
        {
            return body
                .lines()
                .filter(|line| {
                    line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:")
                })
                .filter_map(|line| {
                    line.split_once("calls=")?
                        .1
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_simply_down_costs_the_store_a_read_a_tenant_now_and_then_not_one_a_request() {
    let Some(redis) = Redis::start().await else {
        return;
    };
    let fleet = Fleet::start(Some(&redis.url()), Duration::from_secs(60)).await;
    for backend in &fleet.fixture.backends {
        backend.set_mode(Mode::Healthy);
    }
    // A tenant whose first member is down (not by its doing).
    let tenant = fleet.fixture.tenants[0].0.clone();
    let first = fleet.fixture.subset_ids(&tenant)[0].clone();
    fleet.fixture.backend(&first).set_mode(Mode::Killed);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while fleet.shard(0, &first).await["health"] == "up" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{first} never went out"
        );
        fleet.send(0, &tenant, "/warm", false).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Out for longer than a strike's life (routing.request_timeout_ms,
    // 3 s here): whatever explains it would be in the store by now.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let before = scripts_run(&redis).await;
    for _ in 0..40 {
        assert_eq!(
            fleet.send(0, &tenant, "/served", false).await,
            StatusCode::OK
        );
    }
    let read = scripts_run(&redis).await - before;
    // One read, then the clean answer serves for fleet.sync_ms; and the
    // replica's own looks (every 250 ms) run scripts too.
    assert!(
        read < 20,
        "40 requests of a tenant whose first member is simply down ran {read} scripts"
    );
}
