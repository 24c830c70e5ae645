//! Tenants from the tenant store (issue 31) end to end: replicas of one
//! configuration over a real PostgreSQL and real test backends, talked to
//! through their sockets. A `PUT` on one replica is served by both and a
//! `DELETE` by neither; a change that moves a tenant is refused unless
//! allowed, and counted; a burst of 10,000 changes leaves both registries
//! equal to the table; a store that stalls, is killed, speaks garbage,
//! restarts or says nothing of a change never stops serving, is reported,
//! and is caught up with; a replica started while it is down serves its
//! snapshot file, and one with nothing to serve does not start; bad rows
//! are refused one by one; ids that look like SQL are data, and the
//! store's password is never shown.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use backend::Backend;
use bytes::Bytes;
use gateway::Snapshot;
use gateway::config::writer::{GatewayToml, Shard, sha256_hex};
use gateway::runtime::{self, Running};
use gateway::store::tenants::{self as store, TenantStore};
use gateway::tenants::TenantEntry;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use testkit::postgres::Postgres;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::logs::Capture;
use crate::pki::Ca;
use crate::util::{Exposition, get_with_key, parse};

const TOKEN: &str = "tenant-sync-admin-token-4e7a19c2";

/// The deadline of every poll for something that must happen: the bound
/// itself is about a second (a notification at once, `check_ms` = 200
/// here, `timeout_ms` for a stalled store); a busy machine gets room.
const DEADLINE: Duration = Duration::from_secs(10);

/// The snapshot file's name, in the configuration's directory.
const SNAPSHOT: &str = "tenants.snapshot.jsonl";

/// A configuration over test backends and a tenant store, and the test's
/// own view of both.
struct Setup {
    pg: Postgres,
    dir: tempfile::TempDir,
    backends: Vec<Backend>,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The test's own client of the store: rows the replicas did not
    /// write, and the table to compare their registries with.
    store: TenantStore,
}

impl Setup {
    /// PostgreSQL with the schema in place, four shards in cell `default`
    /// (k = 2) and two in cell `eu`, and a configuration whose `[tenants]`
    /// table names the store, with `lines` added to it.
    async fn start(lines: &str) -> Option<Self> {
        let pg = Postgres::start().await?;
        let mut settings = store::settings(&pg.url(), None).unwrap();
        settings.timeout = Duration::from_secs(10);
        let store = TenantStore::connect(&settings).await.unwrap();
        assert!(store.init_schema().await.unwrap());
        let mut backends = Vec::new();
        for id in ["s0", "s1", "s2", "s3", "e0", "e1"] {
            backends.push(Backend::start(id).await.unwrap());
        }
        let dir = tempfile::tempdir().unwrap();
        write_config(dir.path(), &pg.url(), lines, &backends);
        Some(Self {
            pg,
            dir,
            backends,
            client: Client::builder(TokioExecutor::new()).build_http(),
            store,
        })
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("gateway.toml")
    }

    /// A replica of the configuration, started.
    async fn replica(&self) -> Running {
        start(&self.config()).await.unwrap()
    }

    /// The answer to an admin call on `replica` with the token: the status
    /// and the body as text.
    async fn admin(
        &self,
        replica: &Running,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (StatusCode, String) {
        call(&self.client, replica.admin_addr, method, path, body).await
    }

    /// `PUT /admin/tenants/{id}` with `body` on `replica`: the status and
    /// the answer as JSON.
    async fn put(
        &self,
        replica: &Running,
        id: &str,
        body: &Value,
        allow: bool,
    ) -> (StatusCode, Value) {
        let query = if allow { "?allow_migration=true" } else { "" };
        let path = format!("/admin/tenants/{}{query}", segment(id));
        let (status, text) = self.admin(replica, "PUT", &path, Some(body)).await;
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// The status of a request through `replica` with `key`.
    async fn status(&self, replica: &Running, key: &str) -> StatusCode {
        get_with_key(&self.client, replica.addr, key).await.0
    }

    /// `GET /admin/tenant-store` on `replica`: its `tenant_store` object.
    async fn view(&self, replica: &Running) -> Value {
        let (status, text) = self
            .admin(replica, "GET", "/admin/tenant-store", None)
            .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let view: Value = serde_json::from_str(&text).unwrap();
        view["tenant_store"].clone()
    }

    /// `replica`'s metrics.
    async fn scrape(&self, replica: &Running) -> Exposition {
        let (status, text) = self.admin(replica, "GET", "/metrics", None).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        parse(&text)
    }

    /// Waits until `replica` reports the store up (`up`) or down, in its
    /// view and its metric, checking at every look that `key` is served.
    async fn store_up(&self, replica: &Running, up: bool, key: &str) {
        until(
            &format!("the replica reports the store up = {up}"),
            async || {
                assert_eq!(
                    self.status(replica, key).await,
                    StatusCode::OK,
                    "a known tenant is served whatever the store does"
                );
                let metric = self
                    .scrape(replica)
                    .await
                    .value("shuffle_tenant_store_up", &[]);
                self.view(replica).await["up"] == up && metric == f64::from(u8::from(up))
            },
        )
        .await;
    }

    /// Runs `sql` with psql, from a thread the runtime may block.
    fn psql(&self, sql: &str) -> String {
        tokio::task::block_in_place(|| self.pg.psql(sql))
    }
}

/// Writes `gateway.toml` (and the files it names) into `dir`: cell
/// `default` over the backends whose ids start with `s`, cell `eu` over
/// the rest, tenants from the store at `url`.
fn write_config(dir: &Path, url: &str, lines: &str, backends: &[Backend]) {
    let shard = |b: &Backend| Shard::new(b.id(), b.url());
    let path = GatewayToml {
        k: 2,
        tables: vec![(
            "health".into(),
            "interval_ms = 100\ntimeout_ms = 100\nrise = 1\nfall = 2\n".into(),
        )],
        admin_token: Some(TOKEN.into()),
        shards: backends
            .iter()
            .filter(|b| b.id().starts_with('s'))
            .map(shard)
            .collect(),
        tenant_store: Some(format!("store = \"{url}\"\ncheck_ms = 200\n{lines}")),
        ..GatewayToml::default()
    }
    .write(dir)
    .unwrap();
    // A second cell, after the writer's (so `default` stays the first,
    // where a tenant without a cell goes).
    let eu: Vec<String> = backends
        .iter()
        .filter(|b| !b.id().starts_with('s'))
        .map(|b| format!("  {{ id = \"{}\", url = \"{}\" }},\n", b.id(), b.url()))
        .collect();
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&format!(
        "\n[[cells]]\nname = \"eu\"\nshards = [\n{}]\n",
        eu.concat()
    ));
    std::fs::write(&path, text).unwrap();
}

/// A replica of the configuration at `path`, or why it did not start.
async fn start(path: &Path) -> Result<Running, String> {
    let snapshot = Snapshot::load(path, None).map_err(|e| e.to_string())?;
    // Bounded: a start that hangs on the store fails the test.
    tokio::time::timeout(Duration::from_secs(60), runtime::start(snapshot))
        .await
        .expect("the start ends")
        .map_err(|e| e.to_string())
}

/// `method path` on the admin listener at `addr` with the token and an
/// optional JSON body: the status and the body as text.
async fn call(
    client: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (StatusCode, String) {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// `id` as one path segment: every byte but letters, digits and `-`
/// percent-encoded.
fn segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A fresh API key for `id`.
fn key_for(id: &str) -> String {
    format!("key-{}-{:016x}", id.len(), fastrand::u64(..))
}

/// The `PUT` body of a tenant with `key` and the fields of `more`.
fn body(key: &str, more: Value) -> Value {
    let mut body = json!({ "api_key_sha256": sha256_hex(key) });
    body.as_object_mut()
        .unwrap()
        .extend(more.as_object().unwrap().clone());
    body
}

/// Polls `check` until it holds, failing the test after [`DEADLINE`].
async fn until(what: &str, check: impl AsyncFnMut() -> bool) {
    until_within(DEADLINE, what, check).await;
}

async fn until_within(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A replica's registry as entries, by id.
fn registry(replica: &Running) -> Vec<TenantEntry> {
    let snapshot = replica.gateway.snapshot();
    let mut entries: Vec<TenantEntry> = snapshot
        .tenants
        .iter()
        .map(|t| t.to_entry(&snapshot.config))
        .collect();
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    entries
}

/// The ids a replica serves.
fn served_ids(replica: &Running) -> BTreeSet<String> {
    let snapshot = replica.gateway.snapshot();
    snapshot.tenants.iter().map(|t| t.id().to_owned()).collect()
}

/// A counter of `shuffle_tenant_changes_total` on `replica`.
async fn changes(setup: &Setup, replica: &Running, outcome: &str) -> f64 {
    setup
        .scrape(replica)
        .await
        .count("shuffle_tenant_changes_total", &[("outcome", outcome)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_on_one_replica_is_served_by_both_and_a_delete_by_neither() {
    let Some(setup) = Setup::start("").await else {
        return;
    };
    let (a, b) = (setup.replica().await, setup.replica().await);
    // Current from the start, and saying so on every count.
    for replica in [&a, &b] {
        let metrics = setup.scrape(replica).await;
        assert_eq!(metrics.value("shuffle_tenant_store_up", &[]), 1.0);
        let synced = metrics.value("shuffle_tenant_store_last_sync_timestamp_seconds", &[]);
        assert!(synced > 0.0, "synced at start, the gauge says {synced}");
    }
    let key = key_for("onboarded");
    assert_eq!(setup.status(&a, &key).await, StatusCode::UNAUTHORIZED);

    let (status, answer) = setup
        .put(&a, "onboarded", &body(&key, json!({})), false)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "created", "{answer}");
    assert_eq!(answer["applied_here"], true, "{answer}");
    // The write waited for its own replica: served there at once.
    assert_eq!(setup.status(&a, &key).await, StatusCode::OK);
    until("B serves the tenant onboarded on A", async || {
        setup.status(&b, &key).await == StatusCode::OK
    })
    .await;
    // Idempotent: the same write again changes nothing.
    let (status, answer) = setup
        .put(&b, "onboarded", &body(&key, json!({})), false)
        .await;
    assert_eq!(
        (status, &answer["outcome"]),
        (StatusCode::OK, &json!("unchanged")),
        "{answer}"
    );

    let (status, answer) = setup
        .admin(&b, "DELETE", "/admin/tenants/onboarded", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(answer.contains("\"applied_here\":true"), "{answer}");
    assert_eq!(setup.status(&b, &key).await, StatusCode::UNAUTHORIZED);
    until("A refuses the tenant deleted on B", async || {
        setup.status(&a, &key).await == StatusCode::UNAUTHORIZED
    })
    .await;
    let (status, answer) = setup
        .admin(&a, "DELETE", "/admin/tenants/onboarded", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_eq!(setup.store.count().await.unwrap(), 0);
    for replica in [&a, &b] {
        let view = setup.view(replica).await;
        assert_eq!(
            (view["up"].clone(), view["origin"].clone()),
            (json!(true), json!("store")),
            "{view}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moving_change_is_refused_and_counted_unless_migration_is_allowed() {
    let Some(setup) = Setup::start("").await else {
        return;
    };
    let (a, b) = (setup.replica().await, setup.replica().await);
    let key = key_for("mover");
    let (status, answer) = setup.put(&a, "mover", &body(&key, json!({})), false).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // Not a move, but refused as well: another tenant's key, and a body
    // naming another tenant than the path.
    let (status, answer) = setup.put(&a, "thief", &body(&key, json!({})), false).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(answer.to_string().contains("another tenant"), "{answer}");
    let (status, answer) = setup
        .put(&a, "mover", &body(&key, json!({ "id": "thief" })), false)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(setup.store.get("thief").await.unwrap(), None);
    let k_of = |replica: &Running| {
        replica
            .gateway
            .snapshot()
            .tenants
            .get("mover")
            .map(|t| t.k())
    };
    let cell_of = |replica: &Running| {
        replica
            .gateway
            .snapshot()
            .tenants
            .get("mover")
            .map(|t| t.cell_index())
    };

    // k = 3 moves it onto a third shard.
    let (status, answer) = setup
        .put(&a, "mover", &body(&key, json!({ "k": 3 })), false)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(
        answer.to_string().contains("allow_migration=true"),
        "{answer}"
    );
    assert_eq!(changes(&setup, &a, "refused_migration").await, 1.0);
    assert_eq!(k_of(&a), Some(None), "nothing applied");
    assert_eq!(
        setup.store.get("mover").await.unwrap().unwrap().k,
        None,
        "nothing written"
    );
    // Changes that keep its shards are no migration: its limits, and a k
    // equal to the cell's.
    for more in [json!({ "requests_per_second": 50.0 }), json!({ "k": 2 })] {
        let (status, answer) = setup.put(&a, "mover", &body(&key, more), false).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let (status, answer) = setup
        .put(&a, "mover", &body(&key, json!({ "k": 3 })), true)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(k_of(&a), Some(Some(3)));
    until("B applies the allowed k change", async || {
        k_of(&b) == Some(Some(3))
    })
    .await;
    assert!(changes(&setup, &a, "moved").await >= 1.0);

    // Another cell is a move too.
    let (status, answer) = setup
        .put(&b, "mover", &body(&key, json!({ "cell": "eu" })), false)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(changes(&setup, &b, "refused_migration").await, 1.0);
    assert_eq!(cell_of(&b), Some(0));
    let (status, answer) = setup
        .put(&b, "mover", &body(&key, json!({ "cell": "eu" })), true)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    until("A applies the allowed cell change", async || {
        cell_of(&a) == Some(1)
    })
    .await;
    for replica in [&a, &b] {
        assert_eq!(cell_of(replica), Some(1));
        assert_eq!(
            setup.status(replica, &key).await,
            StatusCode::OK,
            "served in its new cell"
        );
    }
    assert_eq!(
        changes(&setup, &a, "refused_migration").await,
        1.0,
        "counted where refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_changes_in_a_burst_leave_both_registries_equal_to_the_table() {
    let Some(setup) = Setup::start("").await else {
        return;
    };
    let (a, b) = (setup.replica().await, setup.replica().await);
    // 10,000 upserts over 4,000 ids (each id rewritten two or three times,
    // with a new key and k each time), then 400 deletes, each change its
    // own transaction: 10,400 notifications.
    setup.psql(
        "DO $$ BEGIN \
           FOR i IN 1..10000 LOOP \
             INSERT INTO shuffle_shard_tenants AS t (id, api_key_sha256, k) \
             VALUES ('burst-' || (i % 4000), encode(sha256(convert_to('key-' || i, 'UTF8')), 'hex'), \
                     NULLIF(i % 3, 0)) \
             ON CONFLICT (id) DO UPDATE SET api_key_sha256 = excluded.api_key_sha256, k = excluded.k; \
             COMMIT; \
           END LOOP; \
           FOR j IN 0..399 LOOP \
             DELETE FROM shuffle_shard_tenants WHERE id = 'burst-' || (j * 10); \
             COMMIT; \
           END LOOP; \
         END $$",
    );
    let seq = setup.store.current_seq().await.unwrap();
    assert_eq!(setup.store.count().await.unwrap(), 3_600);
    let mut table = Vec::new();
    setup
        .store
        .load_all(|row| table.push(row.unwrap()))
        .await
        .unwrap();
    table.sort_by(|a, b| a.id.cmp(&b.id));
    for (name, replica) in [("A", &a), ("B", &b)] {
        until(&format!("{name} applies every change"), async || {
            setup.view(replica).await["applied_seq"] == seq
        })
        .await;
        let view = setup.view(replica).await;
        assert_eq!(view["tenants"], 3_600, "{view}");
        let served = registry(replica);
        assert_eq!(served.len(), table.len());
        for (served, row) in served.iter().zip(&table) {
            assert!(
                served == row,
                "{name}: served {served:?} with key {:?}, the table has {row:?} with key {:?}",
                served.api_key_sha256,
                row.api_key_sha256
            );
        }
        assert_eq!(
            setup.scrape(replica).await.value("shuffle_tenants", &[]),
            3_600.0
        );
        // The last key of a tenant is served, the ones it replaced and a
        // deleted tenant's are not.
        for (key, status) in [
            ("key-9999", StatusCode::OK),
            ("key-5999", StatusCode::UNAUTHORIZED),
            ("key-9990", StatusCode::UNAUTHORIZED),
        ] {
            assert_eq!(setup.status(replica, key).await, status, "{name}: {key}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_store_is_reported_serving_continues_and_nothing_unacknowledged_is_written() {
    let Some(setup) = Setup::start("").await else {
        return;
    };
    let (a, b) = (setup.replica().await, setup.replica().await);
    let steady = key_for("steady");
    assert_eq!(
        setup
            .put(&a, "steady", &body(&steady, json!({})), false)
            .await
            .0,
        StatusCode::OK
    );
    until("B serves steady", async || {
        setup.status(&b, &steady).await == StatusCode::OK
    })
    .await;
    let synced = setup
        .scrape(&a)
        .await
        .value("shuffle_tenant_store_last_sync_timestamp_seconds", &[]);
    assert!(synced > 0.0);

    setup.pg.signal("STOP");
    for replica in [&a, &b] {
        setup.store_up(replica, false, &steady).await;
        let (status, text) = call(&setup.client, replica.admin_addr, "GET", "/readyz", None).await;
        assert_eq!(status, StatusCode::OK, "ready while stale: {text}");
    }
    // A write the store cannot acknowledge is never answered 200.
    let late = key_for("during-stall");
    let (status, answer) = setup
        .put(&a, "during-stall", &body(&late, json!({})), false)
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    let stale = setup
        .scrape(&a)
        .await
        .value("shuffle_tenant_store_last_sync_timestamp_seconds", &[]);
    setup.pg.signal("CONT");

    for replica in [&a, &b] {
        setup.store_up(replica, true, &steady).await;
    }
    assert_eq!(
        setup.store.get("during-stall").await.unwrap(),
        None,
        "answered 503: not written"
    );
    assert!(
        setup
            .scrape(&a)
            .await
            .value("shuffle_tenant_store_last_sync_timestamp_seconds", &[])
            > stale
    );
    // A change after the stall reaches both.
    let after = key_for("after-stall");
    let (status, answer) = setup
        .put(&b, "after-stall", &body(&after, json!({})), false)
        .await;
    assert_eq!(
        (status, &answer["applied_here"]),
        (StatusCode::OK, &json!(true)),
        "{answer}"
    );
    until("A serves a tenant onboarded after the stall", async || {
        setup.status(&a, &after).await == StatusCode::OK
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_store_then_garbage_on_its_port_then_its_restart_is_caught_up_with() {
    let Some(mut setup) = Setup::start("").await else {
        return;
    };
    let (a, b) = (setup.replica().await, setup.replica().await);
    let steady = key_for("steady");
    assert_eq!(
        setup
            .put(&a, "steady", &body(&steady, json!({})), false)
            .await
            .0,
        StatusCode::OK
    );
    until("B serves steady", async || {
        setup.status(&b, &steady).await == StatusCode::OK
    })
    .await;

    setup.pg.kill();
    for replica in [&a, &b] {
        setup.store_up(replica, false, &steady).await;
    }
    let (status, answer) = setup
        .put(&a, "while-down", &body(&key_for("x"), json!({})), false)
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");

    // A server speaking garbage where the store was: still down, still
    // serving.
    let garbage = garbage_server(setup.pg.port).await;
    let served = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < served {
        for replica in [&a, &b] {
            assert_eq!(setup.status(replica, &steady).await, StatusCode::OK);
            assert_eq!(setup.view(replica).await["up"], false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    garbage.abort();
    let _ = garbage.await;

    setup.pg.restart().await;
    for replica in [&a, &b] {
        setup.store_up(replica, true, &steady).await;
    }
    let after = key_for("after-restart");
    let (status, answer) = setup
        .put(&a, "after-restart", &body(&after, json!({})), false)
        .await;
    assert_eq!(
        (status, &answer["applied_here"]),
        (StatusCode::OK, &json!(true)),
        "{answer}"
    );
    until(
        "B serves a tenant onboarded after the restart",
        async || setup.status(&b, &after).await == StatusCode::OK,
    )
    .await;
    // And a row written by hand, announced by the trigger.
    let by_hand = key_for("by-hand");
    setup.psql(&format!(
        "INSERT INTO shuffle_shard_tenants (id, api_key_sha256) VALUES ('by-hand', '{}')",
        sha256_hex(&by_hand)
    ));
    for replica in [&a, &b] {
        until("the replica serves a row written by hand", async || {
            setup.status(replica, &by_hand).await == StatusCode::OK
        })
        .await;
    }
}

/// A server on 127.0.0.1:`port` that answers every connection with bytes
/// that are not PostgreSQL's protocol, then closes it; aborting the task
/// closes the listener.
async fn garbage_server(port: u16) -> tokio::task::JoinHandle<()> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut buffer = [0_u8; 1024];
            let _ = socket.read(&mut buffer).await;
            let _ = socket
                .write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n\x00\xff garbage")
                .await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_no_notification_announced_is_found_by_the_periodic_check() {
    let Some(setup) = Setup::start("").await else {
        return;
    };
    let (a, b) = (setup.replica().await, setup.replica().await);
    let listening = || {
        setup.psql(
            "SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN shuffle_shard_tenants' ORDER BY pid",
        )
        .lines()
        .map(str::to_owned)
        .collect::<BTreeSet<String>>()
    };
    until("both replicas listen", async || listening().len() == 2).await;

    // Their notification connections cut: each replica listens again.
    let cut = listening();
    setup.psql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE query = 'LISTEN shuffle_shard_tenants'",
    );
    until("both replicas listen again", async || {
        let now = listening();
        now.len() == 2 && now.is_disjoint(&cut)
    })
    .await;

    // The trigger no longer announces changes (it still logs them): only
    // the periodic look at the change counter can find one.
    setup.psql(
        "DO $$ DECLARE definition text; BEGIN \
           SELECT pg_get_functiondef('shuffle_shard_tenant_changed'::regproc) INTO definition; \
           EXECUTE replace(definition, 'PERFORM pg_notify', '-- PERFORM pg_notify'); \
         END $$",
    );
    let silent = key_for("silent");
    setup.psql(&format!(
        "INSERT INTO shuffle_shard_tenants (id, api_key_sha256) VALUES ('silent', '{}')",
        sha256_hex(&silent)
    ));
    for replica in [&a, &b] {
        until("the replica serves a change nobody announced", async || {
            setup.status(replica, &silent).await == StatusCode::OK
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_change_log_makes_a_replica_read_every_tenant_again() {
    let Some(setup) = Setup::start("").await else {
        return;
    };
    let gone = key_for("gone");
    setup.psql(&format!(
        "INSERT INTO shuffle_shard_tenants (id, api_key_sha256) VALUES ('gone', '{}')",
        sha256_hex(&gone)
    ));
    let a = setup.replica().await;
    assert_eq!(setup.status(&a, &gone).await, StatusCode::OK);
    // Changes whose log entries are pruned before the replica reads them,
    // in one transaction: the log no longer reaches back to what the
    // replica applied.
    let (one, two) = (key_for("one"), key_for("two"));
    setup.psql(&format!(
        "BEGIN; \
         INSERT INTO shuffle_shard_tenants (id, api_key_sha256) VALUES ('one', '{}'), ('two', '{}'); \
         DELETE FROM shuffle_shard_tenants WHERE id = 'gone'; \
         UPDATE shuffle_shard_tenant_pruned SET through = \
           (SELECT max(seq) - 1 FROM shuffle_shard_tenant_changes); \
         DELETE FROM shuffle_shard_tenant_changes \
           WHERE seq < (SELECT max(seq) FROM shuffle_shard_tenant_changes); \
         COMMIT;",
        sha256_hex(&one),
        sha256_hex(&two)
    ));
    until("the replica reads every tenant again", async || {
        served_ids(&a) == BTreeSet::from(["one".to_owned(), "two".to_owned()])
    })
    .await;
    for (key, status) in [
        (&one, StatusCode::OK),
        (&two, StatusCode::OK),
        (&gone, StatusCode::UNAUTHORIZED),
    ] {
        assert_eq!(setup.status(&a, key).await, status);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_started_while_the_store_is_down_serves_its_snapshot_file_then_the_store() {
    let Some(mut setup) = Setup::start(&format!("snapshot_file = \"{SNAPSHOT}\"\n")).await else {
        return;
    };
    let snapshot = setup.dir.path().join(SNAPSHOT);
    let kept = key_for("kept");
    setup
        .store
        .put(&TenantEntry {
            id: "kept".into(),
            api_key_sha256: Some(sha256_hex(&kept)),
            k: Some(3),
            ..TenantEntry::default()
        })
        .await
        .unwrap();
    let first = setup.replica().await;
    until("the first run writes its snapshot file", async || {
        std::fs::read_to_string(&snapshot).is_ok_and(|text| text.contains("\"kept\""))
    })
    .await;
    // A change applied later is written too (the file is written at most
    // every 5 s, so the bound here is longer).
    let later = key_for("later");
    assert_eq!(
        setup
            .put(&first, "later", &body(&later, json!({})), false)
            .await
            .0,
        StatusCode::OK
    );
    until_within(
        Duration::from_secs(30),
        "the snapshot file gets a later change",
        async || std::fs::read_to_string(&snapshot).is_ok_and(|text| text.contains("\"later\"")),
    )
    .await;
    first.shutdown().await;

    setup.pg.kill();
    let second = setup.replica().await;
    let view = setup.view(&second).await;
    assert_eq!(view["origin"], "snapshot_file", "{view}");
    assert_eq!(view["up"], false, "{view}");
    assert_eq!(view["tenants"], 2, "{view}");
    assert_eq!(
        setup
            .scrape(&second)
            .await
            .value("shuffle_tenant_store_up", &[]),
        0.0
    );
    for key in [&kept, &later] {
        assert_eq!(setup.status(&second, key).await, StatusCode::OK);
    }
    assert_eq!(
        second.gateway.snapshot().tenants.get("kept").unwrap().k(),
        Some(3),
        "the snapshot keeps every field"
    );

    // The store returns, with changes made while this replica was away.
    setup.pg.restart().await;
    let back = key_for("back");
    setup
        .store
        .put(&TenantEntry {
            id: "back".into(),
            api_key_sha256: Some(sha256_hex(&back)),
            ..TenantEntry::default()
        })
        .await
        .unwrap();
    assert!(setup.store.delete("kept").await.unwrap());
    until("the replica switches to the store", async || {
        let view = setup.view(&second).await;
        view["origin"] == "store" && view["up"] == true
    })
    .await;
    assert_eq!(setup.status(&second, &back).await, StatusCode::OK);
    assert_eq!(setup.status(&second, &kept).await, StatusCode::UNAUTHORIZED);
    assert_eq!(setup.status(&second, &later).await, StatusCode::OK);
    assert_eq!(
        setup
            .scrape(&second)
            .await
            .value("shuffle_tenant_store_up", &[]),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_store_and_nothing_to_serve_the_start_fails_in_one_line() {
    let mut backends = Vec::new();
    for id in ["s0", "s1", "e0", "e1"] {
        backends.push(Backend::start(id).await.unwrap());
    }
    let client = Client::builder(TokioExecutor::new()).build_http();
    let nobody = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let garbage = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let garbage_port = garbage.local_addr().unwrap().port();
    drop(garbage);
    let _garbage = garbage_server(garbage_port).await;
    let password = "pw-never-shown-7d1c";
    for (port, snapshot) in [
        (nobody, ""),
        (nobody, "snapshot_file = \"missing.jsonl\"\n"),
        (garbage_port, ""),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("postgres://gateway:{password}@127.0.0.1:{port}/tenants");
        write_config(
            dir.path(),
            &url,
            &format!("timeout_ms = 500\n{snapshot}"),
            &backends,
        );
        let error = start(&dir.path().join("gateway.toml")).await.unwrap_err();
        assert!(!error.contains('\n'), "one line: {error}");
        assert!(
            error.contains(&format!("127.0.0.1:{port}")) && error.contains("tenants.snapshot_file"),
            "{error}"
        );
        assert!(!error.contains(password), "{error}");
    }

    // With a snapshot file, the replica starts beside the garbage and
    // serves it, saying so.
    let dir = tempfile::tempdir().unwrap();
    let url = format!("postgres://gateway:{password}@127.0.0.1:{garbage_port}/tenants");
    write_config(
        dir.path(),
        &url,
        &format!("timeout_ms = 500\nsnapshot_file = \"{SNAPSHOT}\"\n"),
        &backends,
    );
    let key = key_for("from-file");
    std::fs::write(
        dir.path().join(SNAPSHOT),
        format!(
            "{}\n",
            json!({ "id": "from-file", "api_key_sha256": sha256_hex(&key) })
        ),
    )
    .unwrap();
    let replica = start(&dir.path().join("gateway.toml")).await.unwrap();
    assert_eq!(
        get_with_key(&client, replica.addr, &key).await.0,
        StatusCode::OK
    );
    let (status, text) = call(
        &client,
        replica.admin_addr,
        "GET",
        "/admin/tenant-store",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let view: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(view["tenant_store"]["origin"], "snapshot_file", "{view}");
    assert_eq!(view["tenant_store"]["up"], false, "{view}");
    assert!(!text.contains(password), "{text}");
    // It keeps trying, and keeps serving.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        get_with_key(&client, replica.addr, &key).await.0,
        StatusCode::OK
    );
}

/// Captures this thread's `tracing` events (the test runs on a
/// current-thread runtime, so every task of the replicas logs through
/// it); see `logs.rs` for why a second dispatcher is kept alive.
fn capture() -> (
    Capture,
    tracing::subscriber::DefaultGuard,
    tracing::Dispatch,
) {
    let second = tracing::Dispatch::new(Capture::default());
    let capture = Capture::default();
    let guard = tracing::subscriber::set_default(capture.clone());
    (capture, guard, second)
}

#[tokio::test]
async fn bad_rows_are_refused_one_by_one_and_the_rest_served() {
    let (capture, _guard, _second) = capture();
    let Some(setup) = Setup::start("").await else {
        return;
    };
    let keys: Vec<String> = (0..8).map(|n| key_for(&format!("row-{n}"))).collect();
    let digest = |n: usize| sha256_hex(&keys[n]);
    // Rows no replica may serve, beside good ones; `dup-a` and `dup-b`
    // hold one key, written in two cases (the store's unique index sees
    // two keys).
    setup.pg.psql(&format!(
        "INSERT INTO shuffle_shard_tenants (id, api_key_sha256, cell, k, shards) VALUES \
         ('good-1', '{}', NULL, NULL, NULL), \
         ('good-2', '{}', NULL, NULL, NULL), \
         ('bad-cell', '{}', 'mars', NULL, NULL), \
         ('bad-k', '{}', NULL, 9, NULL), \
         ('negative-k', '{}', NULL, -1, NULL), \
         ('null-shard', '{}', NULL, NULL, ARRAY['s0', NULL]), \
         ('bad-digest', 'not-a-digest', NULL, NULL, NULL), \
         ('dup-a', '{}', NULL, NULL, NULL), \
         ('dup-b', '{}', NULL, NULL, NULL)",
        digest(0),
        digest(1),
        digest(2),
        digest(3),
        digest(4),
        digest(5),
        digest(6),
        digest(6).to_uppercase(),
    ));
    let (a, b) = (setup.replica().await, setup.replica().await);
    for replica in [&a, &b] {
        let served = served_ids(replica);
        let dups = ["dup-a", "dup-b"]
            .iter()
            .filter(|id| served.contains(**id))
            .count();
        assert_eq!(
            dups, 1,
            "one of the tenants sharing a key is served: {served:?}"
        );
        assert_eq!(served.len(), 3, "{served:?}");
        assert!(
            served.contains("good-1") && served.contains("good-2"),
            "{served:?}"
        );
        for (n, status) in [
            (0, StatusCode::OK),
            (1, StatusCode::OK),
            (2, StatusCode::UNAUTHORIZED),
            (3, StatusCode::UNAUTHORIZED),
            (4, StatusCode::UNAUTHORIZED),
            (5, StatusCode::UNAUTHORIZED),
            (6, StatusCode::OK),
        ] {
            assert_eq!(setup.status(replica, &keys[n]).await, status, "key {n}");
        }
        assert_eq!(
            changes(&setup, replica, "refused").await,
            6.0,
            "every row not served"
        );
    }
    let lines = capture.lines.lock().unwrap().clone();
    for (tenant, field) in [
        ("bad-cell", "cell"),
        ("bad-k", "k"),
        ("negative-k", "k"),
        ("null-shard", "shards"),
        ("bad-digest", "api_key_sha256"),
    ] {
        assert!(
            lines
                .iter()
                .any(|line| line.contains(&format!("tenant={tenant}"))
                    && line.contains(&format!("field={field}"))),
            "no line names {tenant} and {field}: {lines:#?}"
        );
    }

    // The same, as changes to a registry being served: refused, counted,
    // the rest applied; a tenant whose row turns bad keeps what it had.
    setup.pg.psql(&format!(
        "INSERT INTO shuffle_shard_tenants (id, api_key_sha256, cell, k) VALUES \
         ('late-cell', NULL, 'mars', NULL), \
         ('late-k', NULL, NULL, 0), \
         ('late-dup', '{}', NULL, NULL), \
         ('late-good', '{}', NULL, NULL); \
         UPDATE shuffle_shard_tenants SET k = 99 WHERE id = 'good-1'",
        digest(1).to_uppercase(),
        digest(7),
    ));
    for replica in [&a, &b] {
        until("the replica applies the good row", async || {
            setup.status(replica, &keys[7]).await == StatusCode::OK
        })
        .await;
        until("the replica counts the bad rows", async || {
            changes(&setup, replica, "refused").await == 10.0
        })
        .await;
        let served = served_ids(replica);
        assert!(
            !served
                .iter()
                .any(|id| id.starts_with("late-") && id != "late-good"),
            "{served:?}"
        );
        let snapshot = replica.gateway.snapshot();
        let holder = snapshot
            .tenants
            .by_key_digest(&gateway::tenants::entry::parse_digest(&digest(1)).unwrap())
            .unwrap();
        assert_eq!(holder.id(), "good-2", "a key keeps its first tenant");
        assert_eq!(
            snapshot.tenants.get("good-1").unwrap().k(),
            None,
            "good-1 keeps what it had"
        );
        assert_eq!(setup.status(replica, &keys[0]).await, StatusCode::OK);
    }
    let lines = capture.lines.lock().unwrap().clone();
    for tenant in ["late-cell", "late-k", "late-dup", "good-1"] {
        assert!(
            lines
                .iter()
                .any(|line| line.contains("refused") && line.contains(&format!("tenant={tenant}"))),
            "no line refuses {tenant}: {lines:#?}"
        );
    }

    // A reload that adds the cell the rows named: on the replica reloaded,
    // they are checked again and served; the other keeps its
    // configuration, and refuses them still.
    let mut text = std::fs::read_to_string(setup.config()).unwrap();
    let eu: Vec<&Backend> = setup
        .backends
        .iter()
        .filter(|b| b.id().starts_with('e'))
        .collect();
    text.push_str(&format!(
        "\n[[cells]]\nname = \"mars\"\nshards = [\n  {{ id = \"m0\", url = \"{}\" }},\n  {{ id = \"m1\", url = \"{}\" }},\n]\n",
        eu[0].url(),
        eu[1].url()
    ));
    std::fs::write(setup.config(), text).unwrap();
    let (status, answer) = setup.admin(&a, "POST", "/admin/reload", None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    until(
        "the reloaded replica serves the rows its new cell accepts",
        async || setup.status(&a, &keys[2]).await == StatusCode::OK,
    )
    .await;
    assert!(served_ids(&a).contains("late-cell"));
    // Once: the registry the full read installs is not taken for another
    // reload (a second of checks later, still two starts and one reload).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loads = capture
        .lines
        .lock()
        .unwrap()
        .iter()
        .filter(|line| line.contains("tenants loaded"))
        .count();
    assert_eq!(
        loads, 3,
        "every tenant read twice at start and once after the reload"
    );
    assert_eq!(setup.status(&b, &keys[2]).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        setup.status(&a, &keys[3]).await,
        StatusCode::UNAUTHORIZED,
        "bad-k still refused"
    );
}

#[tokio::test]
async fn ids_that_look_like_sql_are_data_and_the_password_is_never_shown() {
    let (capture, _guard, _second) = capture();
    let Some(mut setup) = Setup::start("").await else {
        return;
    };
    let password = setup.pg.password.clone();
    let (a, b) = (setup.replica().await, setup.replica().await);
    let ids = [
        "x');DELETE/**/FROM/**/shuffle_shard_tenants;--",
        "a'b",
        "'OR'1'='1",
        "quote\"d",
        "back\\slash",
        "$1",
        "$$x$$",
        "%27;--",
        "a/b",
        "shuffle_shard_tenants",
    ];
    let keys: Vec<String> = ids.iter().map(|id| key_for(id)).collect();
    for (id, key) in ids.iter().zip(&keys) {
        let (status, answer) = setup.put(&a, id, &body(key, json!({})), false).await;
        assert_eq!(status, StatusCode::OK, "{id}: {answer}");
        assert_eq!(answer["tenant"], *id, "{answer}");
        assert_eq!(setup.store.get(id).await.unwrap().unwrap().id, *id);
    }
    assert_eq!(setup.store.count().await.unwrap(), ids.len() as u64);
    for replica in [&a, &b] {
        for key in &keys {
            until("the replica serves every tenant", async || {
                setup.status(replica, key).await == StatusCode::OK
            })
            .await;
        }
        assert_eq!(
            served_ids(replica),
            ids.iter().map(|id| (*id).to_owned()).collect()
        );
    }
    // Deleting the one whose id holds a DELETE deletes just it.
    let path = format!("/admin/tenants/{}", segment(ids[0]));
    let (status, answer) = setup.admin(&b, "DELETE", &path, None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(setup.store.count().await.unwrap(), ids.len() as u64 - 1);
    assert_eq!(setup.status(&b, &keys[0]).await, StatusCode::UNAUTHORIZED);
    assert_eq!(setup.status(&b, &keys[1]).await, StatusCode::OK);

    // The password: not in the view, the metrics or the status page, nor
    // in the errors of a store that is down, nor in any log line.
    let mut shown = Vec::new();
    for path in ["/admin/tenant-store", "/metrics", "/"] {
        shown.push(setup.admin(&a, "GET", path, None).await.1);
    }
    assert!(
        shown[0].contains(&format!("127.0.0.1:{}", setup.pg.port)),
        "{}",
        shown[0]
    );
    setup.pg.kill();
    shown.push(
        setup
            .put(&a, "down", &body(&key_for("down"), json!({})), false)
            .await
            .1
            .to_string(),
    );
    setup.store_up(&a, false, &keys[1]).await;
    shown.push(setup.admin(&a, "GET", "/admin/tenant-store", None).await.1);
    shown.push(start(&setup.config()).await.unwrap_err());
    setup.pg.restart().await;
    // A wrong password is refused without repeating either.
    let dir = tempfile::tempdir().unwrap();
    let wrong = "wrong-pw-3f9a";
    write_config(
        dir.path(),
        &setup.pg.url().replace(&password, wrong),
        "",
        &setup.backends,
    );
    let refused = start(&dir.path().join("gateway.toml")).await.unwrap_err();
    assert!(refused.contains("refused the login"), "{refused}");
    assert!(!refused.contains(wrong), "{refused}");
    shown.push(refused);
    shown.extend(capture.lines.lock().unwrap().iter().cloned());
    assert!(shown.len() > 10);
    for text in &shown {
        assert!(!text.contains(&password), "the password shown: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_reach_the_store_over_tls_checked_against_tenants_ca_file() {
    let ca = Ca::new("tenant store CA");
    let leaf = ca.server(&["127.0.0.1"]);
    let Some(pg) = Postgres::start_tls(&leaf.cert_pem, &leaf.key_pem).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
    let settings = store::settings(&pg.url(), Some(dir.path().join("ca.pem"))).unwrap();
    let tenants = TenantStore::connect(&settings).await.unwrap();
    assert!(tenants.init_schema().await.unwrap());
    let early = key_for("early");
    tenants
        .put(&TenantEntry {
            id: "early".into(),
            api_key_sha256: Some(sha256_hex(&early)),
            ..TenantEntry::default()
        })
        .await
        .unwrap();
    let mut backends = Vec::new();
    for id in ["s0", "s1", "e0", "e1"] {
        backends.push(Backend::start(id).await.unwrap());
    }
    write_config(dir.path(), &pg.url(), "ca_file = \"ca.pem\"\n", &backends);
    let replica = start(&dir.path().join("gateway.toml")).await.unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http();
    assert_eq!(
        get_with_key(&client, replica.addr, &early).await.0,
        StatusCode::OK
    );
    let late = key_for("late");
    let put = json!({ "api_key_sha256": sha256_hex(&late) });
    let (status, answer) = call(
        &client,
        replica.admin_addr,
        "PUT",
        "/admin/tenants/late",
        Some(&put),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        get_with_key(&client, replica.addr, &late).await.0,
        StatusCode::OK
    );
    // Every connection the replica holds (the shared one, the LISTEN one)
    // is TLS.
    let count = |sql: &str| {
        tokio::task::block_in_place(|| pg.psql(sql))
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    until("the replica listens", async || {
        count(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name = 'shuffle-shard' AND query LIKE 'LISTEN%'",
        ) == 1
    })
    .await;
    let plain = count(
        "SELECT count(*) FROM pg_stat_activity JOIN pg_stat_ssl USING (pid) \
         WHERE application_name = 'shuffle-shard' AND NOT ssl",
    );
    assert_eq!(plain, 0, "a connection in the clear");

    // A CA that did not sign the server's certificate: refused, in one
    // line that says why.
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("ca.pem"), Ca::new("someone else").pem()).unwrap();
    write_config(other.path(), &pg.url(), "ca_file = \"ca.pem\"\n", &backends);
    let error = start(&other.path().join("gateway.toml")).await.unwrap_err();
    assert!(!error.contains('\n'), "{error}");
    assert!(error.to_lowercase().contains("certificate"), "{error}");
    assert!(!error.contains(&pg.password), "{error}");
}

/// Copies a data directory as it is, owner and modes kept (`cp -a`).
fn copy_tree(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}

/// A failover to a server that missed the last writes (here: a server on
/// the same address started from a copy of the data taken before them).
/// Its change counter is behind what the replica applied, so the replica
/// reads every tenant again: the tenant only the lost writes held is no
/// longer served, the others are, and changes after the failover apply
/// (though their numbers were used before, by the lost writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_store_that_missed_writes_is_read_again() {
    let Some(mut setup) = Setup::start("").await else {
        return;
    };
    let a = setup.replica().await;
    let kept = key_for("kept");
    let (status, answer) = setup.put(&a, "kept", &body(&kept, json!({})), false).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // The standby's copy: the data as it is now.
    let standby = setup.dir.path().join("standby");
    tokio::task::block_in_place(|| {
        setup.pg.stop();
        copy_tree(&setup.pg.data_dir(), &standby);
    });
    setup.pg.restart().await;
    // Writes the standby will never see.
    let lost: Vec<String> = (0..3).map(|i| key_for(&format!("lost-{i}"))).collect();
    for (i, key) in lost.iter().enumerate() {
        until("the restarted store takes a write", async || {
            setup
                .put(&a, &format!("lost-{i}"), &body(key, json!({})), false)
                .await
                .0
                == StatusCode::OK
        })
        .await;
    }
    until(
        "the replica serves the writes the standby lacks",
        async || setup.status(&a, &lost[2]).await == StatusCode::OK,
    )
    .await;
    // Failover: the primary dies, the standby takes its address.
    tokio::task::block_in_place(|| {
        setup.pg.kill();
        copy_tree(&standby, &setup.pg.data_dir());
    });
    setup.pg.restart().await;
    until(
        "the replica reads the store it failed over to",
        async || setup.status(&a, &lost[0]).await == StatusCode::UNAUTHORIZED,
    )
    .await;
    for key in &lost {
        assert_eq!(setup.status(&a, key).await, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(setup.status(&a, &kept).await, StatusCode::OK);
    // A write after the failover is numbered as a lost one was: applied.
    let after = key_for("after");
    let (status, answer) = setup
        .put(&a, "after", &body(&after, json!({})), false)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    until("a change after the failover is applied", async || {
        setup.status(&a, &after).await == StatusCode::OK
    })
    .await;
    assert_eq!(setup.view(&a).await["origin"], "store");
}

/// A row refused because another tenant held its API key (the same key in
/// another case, which the store's unique key lets through) is served once
/// the holder lets the key go, without its own row changing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_refused_for_a_held_key_is_served_once_the_holder_lets_it_go() {
    let Some(setup) = Setup::start("").await else {
        return;
    };
    let a = setup.replica().await;
    let key = key_for("holder");
    let (status, answer) = setup.put(&a, "holder", &body(&key, json!({})), false).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    setup.psql(&format!(
        "INSERT INTO shuffle_shard_tenants (id, api_key_sha256) VALUES ('waiter', '{}')",
        sha256_hex(&key).to_uppercase()
    ));
    until("the waiter's row is refused", async || {
        changes(&setup, &a, "refused").await >= 1.0
    })
    .await;
    assert!(!served_ids(&a).contains("waiter"));
    let (status, text) = setup
        .admin(&a, "DELETE", "/admin/tenants/holder", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    until("the waiter is served once the key is free", async || {
        served_ids(&a).contains("waiter")
    })
    .await;
    assert_eq!(setup.status(&a, &key).await, StatusCode::OK);
    assert!(!served_ids(&a).contains("holder"));
}
