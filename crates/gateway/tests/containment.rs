//! Noisy neighbours and poison tenants (issue 20, points 3 and 4; issue
//! 28, point 3 and the neighbour's quarantine of 8), through real sockets:
//! a failover wave cannot push the survivors of a failed shard past their
//! in-flight caps (the excess is shed with 503, which is no shard's
//! failure), and a tenant whose requests crash the test shards
//! (`crash-on-poison`), one after another or all at once, crashes at most
//! `routing.poison_after` members of its subset, is listed as suspect and
//! can be cleared, while every other tenant is served throughout; a tenant
//! whose requests time out on shards another tenant hangs is not made
//! suspect.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use backend::{Mode, POISON_HEADER};
use http::StatusCode;
use tokio::sync::{Semaphore, watch};

use crate::util::{CustomShard, Fixture, Options, eventually, text};

const TOKEN: &str = "containment-admin-token-4f1e9a0c27";

/// The deadline of every poll for something that must happen.
const DEADLINE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Survivor protection.

/// How many requests `shards` hold between them now.
fn held_by(shards: &[HoldingShard]) -> usize {
    shards
        .iter()
        .map(|shard| shard.held.load(Ordering::SeqCst))
        .sum()
}

/// A shard that holds every request until released, counting how many it
/// holds at once and the most it ever held.
struct HoldingShard {
    server: CustomShard,
    held: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl HoldingShard {
    async fn start(release: watch::Receiver<bool>) -> Self {
        let held = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (h, m) = (Arc::clone(&held), Arc::clone(&most));
        let server = CustomShard::start(move |_request| {
            let (held, most, mut release) = (Arc::clone(&h), Arc::clone(&m), release.clone());
            async move {
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let _ = release.wait_for(|released| *released).await;
                held.fetch_sub(1, Ordering::SeqCst);
                text(200, "served")
            }
        })
        .await;
        Self { server, held, most }
    }
}

/// Three holding shards, every tenant on all three (k = 3), each shard
/// capped at `cap` in flight by `[limits.shard]`.
async fn capped_fleet(cap: u64, release: &watch::Receiver<bool>) -> (Fixture, Vec<HoldingShard>) {
    let mut shards = Vec::new();
    for _ in 0..3 {
        shards.push(HoldingShard::start(release.clone()).await);
    }
    let fixture = Fixture::start(Options {
        shards: 0,
        tenants: 4,
        k: 3,
        custom_shards: shards
            .iter()
            .enumerate()
            .map(|(i, shard)| (format!("c{i}"), format!("http://{}", shard.server.addr)))
            .collect(),
        // Held requests must outlive the test's staging.
        routing:
            "per_try_timeout_ms = 30000\nrequest_timeout_ms = 60000\nretry_after_seconds = 7\n"
                .into(),
        extra: format!("[limits.shard]\nmax_in_flight = {cap}\n"),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    (fixture, shards)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivors_at_their_caps_shed_the_excess_of_a_failover_wave_with_503() {
    let (release, released) = watch::channel(false);
    let (fixture, shards) = capped_fleet(2, &released).await;
    let (status, _, body) = fixture
        .admin("POST", "/admin/shards/c0/fail", Some(TOKEN))
        .await;
    assert_eq!(status, StatusCode::OK, "{body:?}");

    // Ten requests at once: the two survivors hold two each, the other six
    // find every member left at its cap.
    let fixture = Arc::new(fixture);
    let mut requests = Vec::new();
    for i in 0..10 {
        let fixture = Arc::clone(&fixture);
        requests.push(tokio::spawn(async move {
            let tenant = format!("tenant-{}", i % 4);
            fixture.send(Some(&tenant), "GET", "/wave", &[], b"").await
        }));
    }
    let held = || held_by(&shards);
    assert!(
        eventually(DEADLINE, || held() == 4).await,
        "the survivors hold four requests, two each (held {})",
        held()
    );
    // The shed ones are answered while the others are still held.
    let mut shed = 0;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while shed < 6 && tokio::time::Instant::now() < deadline {
        shed = requests.iter().filter(|r| r.is_finished()).count();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(shed, 6, "six requests are answered without a shard");
    release.send(true).unwrap();

    let mut statuses = Vec::new();
    for request in requests {
        let (status, headers, body) = request.await.unwrap();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(
                headers.get("retry-after").map(|v| v.to_str().unwrap()),
                Some("7")
            );
            let body = String::from_utf8_lossy(&body);
            assert!(body.contains("in-flight limit"), "{body}");
        }
        statuses.push(status.as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 503, 503, 503, 503, 503, 503]);
    for (i, shard) in shards.iter().enumerate() {
        let most = shard.most.load(Ordering::SeqCst);
        assert!(most <= 2, "c{i} held {most} at once, over its cap of 2");
    }
    assert_eq!(shards[0].most.load(Ordering::SeqCst), 0, "c0 is failed");

    // Shedding is no shard's failure: nothing toward ejection, no retry.
    for id in ["c1", "c2"] {
        assert_eq!(fixture.shard(id).failures.load(Ordering::SeqCst), 0, "{id}");
    }
    let metrics = fixture.scrape().await;
    let shed = metrics.count("shuffle_shed_total", &[("cell", "default")]);
    assert_eq!(shed, 6.0);
    let retries = metrics.count("shuffle_failovers_total", &[("kind", "retry")]);
    assert_eq!(retries, 0.0, "a shed request is not retried");
    let exhausted = metrics.count("shuffle_retry_budget_exhausted_total", &[]);
    assert_eq!(exhausted, 0.0, "nor drawn on the retry budget");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_cap_is_reloadable_and_a_shards_own_cap_wins() {
    let (release, released) = watch::channel(false);
    let (fixture, shards) = capped_fleet(1, &released).await;
    let config = std::fs::read_to_string(fixture.config_path()).unwrap();
    // c2 sets its own cap of 2 over the default of 1.
    let c2 = format!("url = \"http://{}\"", shards[2].server.addr);
    let config = config
        .replace(&c2, &format!("{c2}, max_in_flight = 2"))
        .replace("max_in_flight = 1\n", "max_in_flight = 3\n");
    std::fs::write(fixture.config_path(), config).unwrap();
    let (status, _, body) = fixture.admin("POST", "/admin/reload", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));

    let fixture = Arc::new(fixture);
    let mut requests = Vec::new();
    for i in 0..12 {
        let fixture = Arc::clone(&fixture);
        requests.push(tokio::spawn(async move {
            let tenant = format!("tenant-{}", i % 4);
            fixture.send(Some(&tenant), "GET", "/", &[], b"").await.0
        }));
    }
    let held = || held_by(&shards);
    assert!(
        eventually(DEADLINE, || held() == 8).await,
        "3 + 3 + 2 held (held {})",
        held()
    );
    assert!(
        eventually(DEADLINE, || requests
            .iter()
            .filter(|r| r.is_finished())
            .count()
            == 4)
        .await
    );
    release.send(true).unwrap();
    let mut ok = 0;
    for request in requests {
        ok += usize::from(request.await.unwrap() == StatusCode::OK);
    }
    assert_eq!(ok, 8);
    assert_eq!(shards[2].most.load(Ordering::SeqCst), 2, "c2's own cap");
    assert!(shards[0].most.load(Ordering::SeqCst) <= 3);
    assert!(shards[1].most.load(Ordering::SeqCst) <= 3);
}

// ---------------------------------------------------------------------------
// Poison containment.

/// A fleet of twelve crash-on-poison shards (down for a minute once
/// crashed), k = 4, with `routing.poison_after = after`: enough shards
/// that some tenants share no member with the poisoner.
async fn poison_fleet(after: u32) -> Fixture {
    poison_fleet_down(after, Duration::from_secs(60)).await
}

/// [`poison_fleet`] with shards down for `down` once crashed.
///
/// Only the poison may fail the other tenants here, not the clock: the
/// fixture's quick timings (checks 100 ms apart with a 100 ms timeout,
/// results stale after 400 ms, 300 ms per try) take a tenant's healthy
/// members out of rotation whenever the test process is starved for a
/// few hundred milliseconds (a loaded CI box, or SIGSTOP): every member
/// stale gave "no healthy shard" (503), a per-try timeout on a healthy
/// member with the others stale gave 504, to tenants sharing nothing with
/// what the poison crashed. The gateway promises no service on stale
/// results (docs/gateway.md, `health.staleness_ms`), so the checks here
/// go stale only after 10 s and time out after 1 s, and a try after 1 s.
/// A crashed shard still leaves rotation at once: its connections are
/// refused, and its checks fail as fast (`health.fall` = 2).
async fn poison_fleet_down(after: u32, down: Duration) -> Fixture {
    let fixture = Fixture::start(Options {
        shards: 12,
        tenants: 60,
        k: 4,
        routing: format!(
            "poison_after = {after}\nquarantine_seconds = 600\n\
             per_try_timeout_ms = 1000\nrequest_timeout_ms = 3000\n"
        ),
        health: "timeout_ms = 1000\nstaleness_ms = 10000\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    for backend in &fixture.backends {
        backend.set_mode(Mode::CrashOnPoison(down));
    }
    fixture
}

/// The first tenant, and the other tenants whose subset is not inside its
/// subset (so they keep a member whatever it crashes): some sharing
/// members with it, some sharing none; both kinds are asserted present.
fn poisoner_and_others(fixture: &Fixture) -> (String, BTreeSet<String>, Vec<String>) {
    let poisoner = fixture.tenants[0].0.clone();
    let subset: BTreeSet<String> = fixture.subset_ids(&poisoner).into_iter().collect();
    let others: Vec<String> = fixture.tenants[1..]
        .iter()
        .map(|(id, _)| id.clone())
        .filter(|id| !fixture.subset_ids(id).iter().all(|s| subset.contains(s)))
        .collect();
    let sharing = others
        .iter()
        .filter(|id| fixture.subset_ids(id).iter().any(|s| subset.contains(s)))
        .count();
    assert!(sharing > 0, "some tenant shares members with the poisoner");
    assert!(
        sharing < others.len(),
        "some tenant shares no member with the poisoner"
    );
    (poisoner, subset, others)
}

/// Lets the background load run on a little, stops it, and checks that
/// it ran for each of its `tenants` and that none of them saw an error.
async fn no_other_tenant_erred(
    stop: &AtomicBool,
    load: tokio::task::JoinHandle<(usize, Vec<String>)>,
    tenants: usize,
) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let (sent, errors) = load.await.unwrap();
    assert!(sent >= tenants, "the load ran ({sent} requests)");
    assert!(errors.is_empty(), "other tenants saw errors: {errors:?}");
}

/// Every other tenant's GETs, in a loop until stopped: (requests, errors).
fn background_load(
    fixture: &Arc<Fixture>,
    tenants: &[String],
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
    let (fixture, tenants, stop) = (Arc::clone(fixture), tenants.to_vec(), Arc::clone(stop));
    tokio::spawn(async move {
        let (mut sent, mut errors) = (0, Vec::new());
        while !stop.load(Ordering::SeqCst) {
            for tenant in &tenants {
                let (status, _) = fixture.get(tenant, "/load").await;
                sent += 1;
                if status != StatusCode::OK {
                    errors.push(format!("{tenant}: {status}"));
                }
            }
        }
        (sent, errors)
    })
}

/// The shards whose backends the poison marker crashed.
fn crashed(fixture: &Fixture) -> BTreeSet<String> {
    fixture
        .backends
        .iter()
        .filter(|backend| backend.crashes() > 0)
        .map(|backend| backend.id().to_owned())
        .collect()
}

async fn poison(fixture: &Fixture, tenant: &str) -> StatusCode {
    fixture
        .send(Some(tenant), "GET", "/poison", &[(POISON_HEADER, "1")], b"")
        .await
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_tenant_crashes_at_most_poison_after_members_and_nobody_else_errs() {
    let fixture = Arc::new(poison_fleet(2).await);
    let (poisoner, subset, others) = poisoner_and_others(&fixture);
    let stop = Arc::new(AtomicBool::new(false));
    let load = background_load(&fixture, &others, &stop);

    // The first poison request crashes two members and is stopped there.
    assert_eq!(poison(&fixture, &poisoner).await, StatusCode::BAD_GATEWAY);
    let first = crashed(&fixture);
    assert_eq!(first.len(), 2, "crashed {first:?}");
    assert!(first.is_subset(&subset));
    // As the drill does: one more poison request per member. The suspect
    // tenant is served only by the members it crashed, which are down.
    for _ in 0..subset.len() {
        let status = poison(&fixture, &poisoner).await;
        assert!(
            status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::BAD_GATEWAY,
            "{status}"
        );
    }
    assert_eq!(crashed(&fixture), first, "no further member crashed");
    // A normal request of the suspect tenant is refused too, not sent to
    // a member it has not struck.
    assert_eq!(
        fixture.get(&poisoner, "/plain").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );

    no_other_tenant_erred(&stop, load, others.len()).await;

    // Listed as suspect, with the members it struck; counted; cleared.
    let listed = fixture.admin_json("GET", "/admin/tenants?suspects=1").await;
    let suspects = listed["suspects"].as_array().unwrap();
    assert_eq!(suspects.len(), 1, "{listed}");
    let suspect = &suspects[0];
    assert_eq!(suspect["tenant"], poisoner.as_str());
    assert_eq!(suspect["cell"], "default");
    assert_eq!(suspect["stops"], 1);
    let shards: BTreeSet<String> = suspect["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(shards, first);
    assert!(suspect["expires_in_seconds"].as_u64().unwrap() > 500);
    assert!(suspect["since_unix"].as_u64().unwrap() > 0);
    let metrics = fixture.scrape().await;
    for name in [
        "shuffle_poison_stops_total",
        "shuffle_tenants_suspected_total",
    ] {
        assert_eq!(metrics.count(name, &[("cell", "default")]), 1.0, "{name}");
    }
    assert_eq!(metrics.value("shuffle_suspect_tenants", &[]), 1.0);

    let (status, _, page) = fixture.admin("GET", "/", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let page = String::from_utf8_lossy(&page);
    assert!(
        page.contains(&format!("<tr data-tenant=\"{poisoner}\">")),
        "the status page lists the suspect"
    );

    let cleared = fixture
        .admin_json("POST", &format!("/admin/tenants/{poisoner}/clear"))
        .await;
    assert_eq!(cleared["was_suspect"], true);
    let listed = fixture.admin_json("GET", "/admin/tenants?suspects=1").await;
    assert_eq!(listed["suspects"].as_array().unwrap().len(), 0);
    let (_, _, page) = fixture.admin("GET", "/", Some(TOKEN)).await;
    assert!(!String::from_utf8_lossy(&page).contains("id=\"suspects\""));
    let again = fixture
        .admin_json("POST", &format!("/admin/tenants/{poisoner}/clear"))
        .await;
    assert_eq!(again["was_suspect"], false);
    let (status, _, body) = fixture
        .admin("POST", "/admin/tenants/nobody/clear", Some(TOKEN))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&body).contains("suspects=1"));
    // Cleared, its plain requests use its live members again.
    assert_eq!(fixture.get(&poisoner, "/plain").await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_containment_a_poison_tenant_crashes_its_whole_subset_and_nobody_else_errs() {
    let fixture = Arc::new(poison_fleet(0).await);
    let (poisoner, subset, others) = poisoner_and_others(&fixture);
    let stop = Arc::new(AtomicBool::new(false));
    let load = background_load(&fixture, &others, &stop);

    // The last member's crash shows as a reset (502) or, when it took the
    // request on a pooled connection, as a refused resend (503).
    let status = poison(&fixture, &poisoner).await;
    assert!(status.is_server_error(), "{status}");
    assert_eq!(crashed(&fixture), subset, "every member crashed");

    no_other_tenant_erred(&stop, load, others.len()).await;
    let listed = fixture.admin_json("GET", "/admin/tenants?suspects=1").await;
    assert_eq!(listed["suspects"].as_array().unwrap().len(), 0);
    let metrics = fixture.scrape().await;
    assert_eq!(metrics.count("shuffle_poison_stops_total", &[]), 0.0);
}

/// `count` poison requests of `tenant`, all at once: their statuses.
async fn poison_at_once(fixture: &Arc<Fixture>, tenant: &str, count: usize) -> Vec<StatusCode> {
    let (go, ready) = watch::channel(false);
    let requests: Vec<_> = (0..count)
        .map(|_| {
            let (fixture, tenant, mut ready) =
                (Arc::clone(fixture), tenant.to_owned(), ready.clone());
            tokio::spawn(async move {
                let _ = ready.wait_for(|go| *go).await;
                poison(&fixture, &tenant).await
            })
        })
        .collect();
    go.send(true).unwrap();
    let mut statuses = Vec::new();
    for request in requests {
        statuses.push(request.await.unwrap());
    }
    statuses
}

/// The members the suspect `tenant` is listed with, if it is listed.
async fn listed_suspect(fixture: &Fixture, tenant: &str) -> Option<serde_json::Value> {
    let listed = fixture.admin_json("GET", "/admin/tenants?suspects=1").await;
    listed["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|suspect| suspect["tenant"] == tenant)
        .cloned()
}

/// The suspect `tenant`'s struck members, as listed.
async fn struck_members(fixture: &Fixture, tenant: &str) -> BTreeSet<String> {
    let suspect = listed_suspect(fixture, tenant)
        .await
        .unwrap_or_else(|| panic!("{tenant} is not suspect"));
    suspect["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_sent_at_once_after_a_strike_crashes_at_most_poison_after_members() {
    // Shards come back 1.5 s after a crash, so that the repeat finds them
    // up; a strike counts for `request_timeout_ms` (3 s).
    let fixture = Arc::new(poison_fleet_down(2, Duration::from_millis(1500)).await);
    let (poisoner, subset, others) = poisoner_and_others(&fixture);
    let stop = Arc::new(AtomicBool::new(false));
    let load = background_load(&fixture, &others, &stop);

    // A poison request that may not fail over (a POST) crashes one member
    // and leaves its tenant one strike, not yet suspect.
    let (status, _, _) = fixture
        .send(
            Some(&poisoner),
            "POST",
            "/poison",
            &[(POISON_HEADER, "1")],
            b"",
        )
        .await;
    assert!(status.is_server_error(), "{status}");
    assert_eq!(crashed(&fixture).len(), 1);
    assert!(listed_suspect(&fixture, &poisoner).await.is_none());

    // Sixteen at once: each reads the tenant's strikes before it goes
    // anywhere, and together they try one member more, not three.
    let statuses = poison_at_once(&fixture, &poisoner, 16).await;
    let first = crashed(&fixture);
    assert_eq!(
        first.len(),
        2,
        "16 poison requests at once crashed {first:?} of {subset:?} (statuses {statuses:?})"
    );
    assert!(first.is_subset(&subset));
    for status in &statuses {
        assert!(status.is_server_error(), "{statuses:?}");
    }
    // Suspect at once, with the members it struck: those it crashed.
    assert_eq!(struck_members(&fixture, &poisoner).await, first);
    let metrics = fixture.scrape().await;
    assert_eq!(
        metrics.count("shuffle_tenants_suspected_total", &[("cell", "default")]),
        1.0
    );
    assert!(metrics.count("shuffle_poison_stops_total", &[("cell", "default")]) >= 1.0);

    // Later, the crashed members are back and every strike has run out:
    // the quarantine alone holds the poisoner, and the same burst again
    // lands only where the damage was done.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let statuses = poison_at_once(&fixture, &poisoner, 16).await;
    assert_eq!(
        crashed(&fixture),
        first,
        "the repeat crashed a new member (statuses {statuses:?})"
    );
    assert_eq!(struck_members(&fixture, &poisoner).await, first);

    no_other_tenant_erred(&stop, load, others.len()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_sent_at_once_from_cold_makes_its_tenant_suspect_at_once() {
    let fixture = Arc::new(poison_fleet(2).await);
    let (poisoner, subset, others) = poisoner_and_others(&fixture);
    let stop = Arc::new(AtomicBool::new(false));
    let load = background_load(&fixture, &others, &stop);

    // Requests sent before the gateway has seen any of them fail cannot
    // be called back (see docs/gateway.md): the first burst may reach
    // every member. But their strikes add up, and the tenant is suspect.
    let statuses = poison_at_once(&fixture, &poisoner, 16).await;
    let first = crashed(&fixture);
    assert!(first.is_subset(&subset), "{first:?}");
    let struck = struck_members(&fixture, &poisoner).await;
    assert!(
        struck.len() >= 2 && struck.is_subset(&first),
        "struck {struck:?}, crashed {first:?}, statuses {statuses:?}"
    );
    // ...so a normal request of it goes nowhere else.
    assert_eq!(
        fixture.get(&poisoner, "/plain").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    no_other_tenant_erred(&stop, load, others.len()).await;
}

/// A shard with one worker: `/hang` takes it until `released` (a request
/// that hangs the shard), every other request waits for it and is
/// answered. Counts the `/hang` requests holding it.
struct OneWorkerShard {
    server: CustomShard,
    hanging: Arc<AtomicUsize>,
}

impl OneWorkerShard {
    async fn start(released: watch::Receiver<bool>) -> Self {
        let worker = Arc::new(Semaphore::new(1));
        let hanging = Arc::new(AtomicUsize::new(0));
        let h = Arc::clone(&hanging);
        let server = CustomShard::start(move |request| {
            let (worker, hanging, mut released) =
                (Arc::clone(&worker), Arc::clone(&h), released.clone());
            async move {
                let Ok(permit) = worker.acquire_owned().await else {
                    return text(500, "closed");
                };
                if request.uri().path() == "/hang" && !*released.borrow() {
                    // The worker stays taken whether or not the gateway
                    // still waits for the answer.
                    hanging.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(async move {
                        let _ = released.wait_for(|released| *released).await;
                        drop(permit);
                    });
                    std::future::pending::<()>().await;
                }
                text(200, "served")
            }
        })
        .await;
        Self { server, hanging }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_timing_out_on_shards_another_tenant_hangs_is_not_made_suspect() {
    let (release, released) = watch::channel(false);
    let shards = [
        OneWorkerShard::start(released.clone()).await,
        OneWorkerShard::start(released.clone()).await,
    ];
    let fixture = Arc::new(
        Fixture::start(Options {
            shards: 0,
            tenants: 4,
            k: 2,
            custom_shards: shards
                .iter()
                .enumerate()
                .map(|(i, shard)| (format!("w{i}"), format!("http://{}", shard.server.addr)))
                .collect(),
            // per_try_timeout_ms = 300 and request_timeout_ms = 3000.
            routing: "poison_after = 2\nquarantine_seconds = 600\n".into(),
            // Timeouts must not eject the shards out of the way.
            outlier: "consecutive_failures = 1000000\n".into(),
            admin_token: Some(TOKEN.into()),
            ..Options::default()
        })
        .await,
    );
    let (hanger, victim) = (fixture.tenants[0].0.clone(), fixture.tenants[1].0.clone());

    // The hanging tenant keeps both shards' one worker taken, as an
    // attacker would, for as long as the victim is asked about.
    let stop = Arc::new(AtomicBool::new(false));
    let hangers: Vec<_> = (0..2)
        .map(|_| {
            let (fixture, hanger, stop) = (Arc::clone(&fixture), hanger.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    fixture.get(&hanger, "/hang").await;
                }
            })
        })
        .collect();
    assert!(
        eventually(DEADLINE, || shards
            .iter()
            .all(|shard| shard.hanging.load(Ordering::SeqCst) == 1))
        .await,
        "both shards hang"
    );
    // ...and is seen failing on both.
    assert!(
        eventually(DEADLINE, || ["w0", "w1"].iter().all(|id| fixture
            .shard(id)
            .failures
            .load(Ordering::SeqCst)
            > 0))
        .await,
        "the hanging tenant's requests time out on both shards"
    );

    // The victim's requests time out on both members: the shards' fault,
    // not the victim's.
    for _ in 0..3 {
        let (status, body) = fixture.get(&victim, "/plain").await;
        assert_eq!(
            status,
            StatusCode::GATEWAY_TIMEOUT,
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
    assert!(
        listed_suspect(&fixture, &victim).await.is_none(),
        "the victim of a hung shard was made suspect"
    );
    stop.store(true, Ordering::SeqCst);
    release.send(true).unwrap();
    for hanger in hangers {
        hanger.await.unwrap();
    }

    // Its requests are served again once the shards are free.
    for _ in 0..4 {
        let (status, body) = fixture.get(&victim, "/plain").await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }
}

// ---------------------------------------------------------------------------
// Poison sent at once from cold (`routing.poison_spread`).

/// A shard that holds every poison request until `crash` is sent, then
/// drops its connection unanswered (a crash, as the gateway sees it; the
/// shard itself stays up); holds `GET /hold` until then too and answers
/// it; answers anything else at once. Counts the requests it holds now,
/// the poison ones it has ever received, and the held plain ones it
/// answered.
struct PoisonHoldingShard {
    addr: std::net::SocketAddr,
    held: Arc<AtomicUsize>,
    poisoned: Arc<AtomicUsize>,
    plain: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PoisonHoldingShard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PoisonHoldingShard {
    async fn start(crash: watch::Receiver<bool>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let held = Arc::new(AtomicUsize::new(0));
        let poisoned = Arc::new(AtomicUsize::new(0));
        let plain = Arc::new(AtomicUsize::new(0));
        let counts = [Arc::clone(&held), Arc::clone(&poisoned), Arc::clone(&plain)];
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let counts = counts.clone();
                tokio::spawn(Self::serve(stream, counts, crash.clone()));
            }
        });
        Self {
            addr,
            held,
            poisoned,
            plain,
            task,
        }
    }

    /// One connection: request heads (the test sends no bodies) answered
    /// one after another until a poison one.
    async fn serve(
        mut stream: tokio::net::TcpStream,
        [held, poisoned, plain]: [Arc<AtomicUsize>; 3],
        mut crash: watch::Receiver<bool>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buffer = Vec::new();
        loop {
            let end = loop {
                if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                    break end + 4;
                }
                let mut chunk = [0_u8; 4096];
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            buffer.drain(..end);
            if head.contains(&format!("\r\n{POISON_HEADER}:")) {
                poisoned.fetch_add(1, Ordering::SeqCst);
                held.fetch_add(1, Ordering::SeqCst);
                let _ = crash.wait_for(|crashed| *crashed).await;
                held.fetch_sub(1, Ordering::SeqCst);
                // Dropped unanswered.
                return;
            }
            if head.starts_with("get /hold ") {
                // A plain request held like the poison, then answered.
                held.fetch_add(1, Ordering::SeqCst);
                let _ = crash.wait_for(|crashed| *crashed).await;
                held.fetch_sub(1, Ordering::SeqCst);
                plain.fetch_add(1, Ordering::SeqCst);
            }
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nserved";
            if stream.write_all(answer).await.is_err() {
                return;
            }
        }
    }
}

/// Eight holding shards, k = 4, `poison_after = 2` spread as `spread`;
/// per-try timeouts long enough that held requests only end by a crash.
async fn holding_fleet(
    spread: &str,
    crash: &watch::Receiver<bool>,
) -> (Fixture, Vec<PoisonHoldingShard>) {
    let mut shards = Vec::new();
    for _ in 0..8 {
        shards.push(PoisonHoldingShard::start(crash.clone()).await);
    }
    let fixture = Fixture::start(Options {
        shards: 0,
        tenants: 20,
        k: 4,
        custom_shards: shards
            .iter()
            .enumerate()
            .map(|(i, shard)| (format!("p{i}"), format!("http://{}", shard.addr)))
            .collect(),
        routing: format!(
            "poison_after = 2\npoison_spread = \"{spread}\"\nquarantine_seconds = 600\n\
             per_try_timeout_ms = 30000\nrequest_timeout_ms = 60000\n"
        ),
        // Crashes must not eject members out of the way of the count.
        outlier: "consecutive_failures = 1000000\n".into(),
        admin_token: Some(TOKEN.into()),
        ..Options::default()
    })
    .await;
    (fixture, shards)
}

/// The shards (by id) that have received a poison request.
fn reached_by_poison(shards: &[PoisonHoldingShard]) -> BTreeSet<String> {
    shards
        .iter()
        .enumerate()
        .filter(|(_, shard)| shard.poisoned.load(Ordering::SeqCst) > 0)
        .map(|(i, _)| format!("p{i}"))
        .collect()
}

/// Poison requests held by `shards` now.
fn poison_held(shards: &[PoisonHoldingShard]) -> usize {
    shards
        .iter()
        .map(|shard| shard.held.load(Ordering::SeqCst))
        .sum()
}

/// `count` poison requests of `tenant` released together: their handles.
fn poison_burst(
    fixture: &Arc<Fixture>,
    tenant: &str,
    count: usize,
) -> Vec<tokio::task::JoinHandle<StatusCode>> {
    let barrier = Arc::new(tokio::sync::Barrier::new(count));
    (0..count)
        .map(|_| {
            let (fixture, tenant, barrier) =
                (Arc::clone(fixture), tenant.to_owned(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                poison(&fixture, &tenant).await
            })
        })
        .collect()
}

/// The burst of eight poison requests of a k = 4 tenant, released at once
/// and held by the shards until all eight are in (so every one of them
/// has chosen its member before any fails): the shards it reached, and
/// the burst's statuses, while every other tenant is served.
async fn cold_burst(spread: &str) -> (BTreeSet<String>, Vec<StatusCode>) {
    let (crash, crashes) = watch::channel(false);
    let (fixture, shards) = holding_fleet(spread, &crashes).await;
    let fixture = Arc::new(fixture);
    let poisoner = fixture.tenants[0].0.clone();
    let subset: BTreeSet<String> = fixture.subset_ids(&poisoner).into_iter().collect();
    let others: Vec<String> = fixture.tenants[1..]
        .iter()
        .map(|(id, _)| id.clone())
        .filter(|id| !fixture.subset_ids(id).iter().all(|s| subset.contains(s)))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let load = background_load(&fixture, &others, &stop);

    let burst = poison_burst(&fixture, &poisoner, 8);
    assert!(
        eventually(DEADLINE, || poison_held(&shards) == 8).await,
        "all eight poison requests reach a shard (held {})",
        poison_held(&shards)
    );
    let reached = reached_by_poison(&shards);
    assert!(reached.is_subset(&subset), "{reached:?} of {subset:?}");
    crash.send(true).unwrap();
    let mut statuses = Vec::new();
    for request in burst {
        statuses.push(request.await.unwrap());
    }
    for status in &statuses {
        assert!(status.is_server_error(), "{statuses:?}");
    }
    no_other_tenant_erred(&stop, load, others.len()).await;
    // Failover after the crash reached no member more than the burst's:
    // whatever the spread, the strikes hold the tenant then.
    (reached_by_poison(&shards), statuses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_burst_of_poison_crashes_at_most_poison_after_members_when_contained() {
    let (crashed, statuses) = cold_burst("contained").await;
    assert!(
        !crashed.is_empty() && crashed.len() <= 2,
        "8 poison requests at once, before any failed, reached {crashed:?} (statuses {statuses:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_burst_of_poison_reaches_more_than_poison_after_members_when_free() {
    // The control: without the cap before a strike, the burst spreads over
    // the subset, so the contained test above can fail.
    let (crashed, statuses) = cold_burst("free").await;
    assert!(
        crashed.len() > 2,
        "8 poison requests at once reached only {crashed:?} (statuses {statuses:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_burst_of_plain_requests_is_served_by_poison_after_members_when_contained() {
    let (release, released) = watch::channel(false);
    let (fixture, shards) = holding_fleet("contained", &released).await;
    let fixture = Arc::new(fixture);
    let tenant = fixture.tenants[0].0.clone();
    let burst: Vec<_> = (0..16)
        .map(|_| {
            let (fixture, tenant) = (Arc::clone(&fixture), tenant.clone());
            tokio::spawn(async move { fixture.get(&tenant, "/hold").await })
        })
        .collect();
    assert!(
        eventually(DEADLINE, || poison_held(&shards) == 16).await,
        "all sixteen reach a shard (held {})",
        poison_held(&shards)
    );
    // Concentrated on two of its four members, none refused for it.
    let holding: Vec<usize> = shards
        .iter()
        .map(|shard| shard.held.load(Ordering::SeqCst))
        .filter(|&held| held > 0)
        .collect();
    assert!(
        !holding.is_empty() && holding.len() <= 2,
        "16 requests at once were held by {holding:?}"
    );
    release.send(true).unwrap();
    for request in burst {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }
    let answered: usize = shards
        .iter()
        .map(|shard| shard.plain.load(Ordering::SeqCst))
        .sum();
    assert_eq!(answered, 16, "each was sent once");
    // Once they ended, nothing of the tenant is left in flight.
    assert!(fixture.running.gateway.spread.in_flight(&tenant).is_empty());
    // Nobody was made suspect.
    assert!(listed_suspect(&fixture, &tenant).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_keeps_the_tenant_keeps_the_members_its_burst_is_on() {
    let (crash, crashes) = watch::channel(false);
    let (fixture, shards) = holding_fleet("contained", &crashes).await;
    let fixture = Arc::new(fixture);
    let poisoner = fixture.tenants[0].0.clone();
    let first = poison_burst(&fixture, &poisoner, 4);
    assert!(
        eventually(DEADLINE, || poison_held(&shards) == 4).await,
        "the first four reach a shard"
    );
    let before = reached_by_poison(&shards);

    // A reload that changes something and keeps every tenant.
    let path = fixture.config_path();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("quarantine_seconds = 600"), "{text}");
    std::fs::write(
        &path,
        text.replace("quarantine_seconds = 600", "quarantine_seconds = 599"),
    )
    .unwrap();
    let old = fixture.running.gateway.snapshot();
    fixture.running.gateway.reload(false).unwrap();
    let new = fixture.running.gateway.snapshot();
    assert!(!Arc::ptr_eq(&old, &new));
    assert_eq!(new.config.routing().quarantine, Duration::from_secs(599));

    // Four more, after it: they join the members the first four are on.
    let second = poison_burst(&fixture, &poisoner, 4);
    assert!(
        eventually(DEADLINE, || poison_held(&shards) == 8).await,
        "the next four reach a shard"
    );
    let reached = reached_by_poison(&shards);
    assert!(
        reached.len() <= 2 && before.is_subset(&reached),
        "before the reload {before:?}, after it {reached:?}"
    );
    crash.send(true).unwrap();
    for request in first.into_iter().chain(second) {
        assert!(request.await.unwrap().is_server_error());
    }
    assert_eq!(
        reached_by_poison(&shards),
        reached,
        "no member more after the crash"
    );

    // A reload with a spread that is not one is refused by its key, and
    // the gateway keeps what it had.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("poison_spread = \"contained\"", "poison_spread = \"loose\""),
    )
    .unwrap();
    let error = fixture
        .running
        .gateway
        .reload(false)
        .unwrap_err()
        .to_string();
    assert!(error.contains("routing.poison_spread"), "{error}");
    assert!(
        error.contains("\"contained\" (a tenant's requests"),
        "{error}"
    );
    assert!(Arc::ptr_eq(&new, &fixture.running.gateway.snapshot()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_cannot_join_the_members_its_tenant_is_on_gets_503_saying_why() {
    let (release, released) = watch::channel(false);
    let (fixture, shards) = holding_fleet("contained", &released).await;
    let fixture = Arc::new(fixture);
    let tenant = fixture.tenants[0].0.clone();
    let held: Vec<_> = (0..4)
        .map(|_| {
            let (fixture, tenant) = (Arc::clone(&fixture), tenant.clone());
            tokio::spawn(async move { fixture.get(&tenant, "/hold").await })
        })
        .collect();
    assert!(
        eventually(DEADLINE, || poison_held(&shards) == 4).await,
        "all four reach a shard"
    );
    let on: Vec<String> = shards
        .iter()
        .enumerate()
        .filter(|(_, shard)| shard.held.load(Ordering::SeqCst) > 0)
        .map(|(i, _)| format!("p{i}"))
        .collect();
    assert!(on.len() <= 2, "held by {on:?}");
    // The members it is on leave rotation; its other members are up.
    for id in &on {
        let (status, _, body) = fixture
            .admin("POST", &format!("/admin/shards/{id}/fail"), Some(TOKEN))
            .await;
        assert_eq!(status, StatusCode::OK, "{body:?}");
    }
    let (status, headers, body) = fixture.send(Some(&tenant), "GET", "/plain", &[], b"").await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("routing.poison_after"), "{body}");
    assert!(headers.contains_key("retry-after"));

    release.send(true).unwrap();
    for request in held {
        assert_eq!(request.await.unwrap().0, StatusCode::OK);
    }
    // Once they ended, its members still up serve it.
    assert_eq!(fixture.get(&tenant, "/plain").await.0, StatusCode::OK);
}
