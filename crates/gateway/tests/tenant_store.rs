//! The tenant store client against a real PostgreSQL 15: the schema, writes
//! and the change log, notifications, bad rows, SQL injection through ids,
//! and the faults (stalled, killed, restarted, garbage-speaking, TLS).

use std::time::{Duration, Instant};

use gateway::config::TenantStoreSettings;
use gateway::store::tenants::{self, PutOutcome, TenantStore, TenantStoreError};
use gateway::tenants::TenantEntry;
use testkit::postgres::Postgres;

use crate::pki::Ca;

/// The timeout the fault tests give calls; their bound allows for slack.
const SHORT: Duration = Duration::from_millis(500);

fn settings(url: &str) -> TenantStoreSettings {
    let mut settings = tenants::settings(url, None).unwrap();
    settings.timeout = Duration::from_secs(10);
    settings
}

/// A server with the schema in place, and a store connected to it.
async fn ready() -> Option<(Postgres, TenantStore)> {
    let pg = Postgres::start().await?;
    let store = TenantStore::connect(&settings(&pg.url())).await.unwrap();
    assert!(store.init_schema().await.unwrap());
    Some((pg, store))
}

fn entry(id: &str) -> TenantEntry {
    TenantEntry {
        id: id.to_owned(),
        ..TenantEntry::default()
    }
}

/// `call`'s outcome, failing (rather than hanging) if it never returns: the
/// store's own bound is what the fault tests check.
async fn returns<T>(call: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the call returns")
}

/// Every tenant `load_all` returns, good or bad.
async fn load(store: &TenantStore) -> (u64, Vec<TenantEntry>, Vec<tenants::BadRow>) {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    let seq = store
        .load_all(|row| match row {
            Ok(entry) => good.push(entry),
            Err(row) => bad.push(row),
        })
        .await
        .unwrap();
    (seq, good, bad)
}

#[tokio::test]
async fn init_schema_is_idempotent_even_four_at_once() {
    let Some(pg) = Postgres::start().await else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(TenantStore::connect(&settings(&pg.url())).await.unwrap());
    }
    let one = &stores[0];
    let missing = one.check_schema().await.unwrap_err();
    assert!(
        matches!(missing, TenantStoreError::SchemaMissing { .. }),
        "{missing:?}"
    );
    assert!(missing.to_string().contains("init-schema"), "{missing}");
    assert!(matches!(
        one.count().await,
        Err(TenantStoreError::SchemaMissing { .. })
    ));
    // Four at once: one creates it, the others wait and find it made.
    let (a, b, c, d) = tokio::join!(
        stores[0].init_schema(),
        stores[1].init_schema(),
        stores[2].init_schema(),
        stores[3].init_schema()
    );
    let mut created = [a.unwrap(), b.unwrap(), c.unwrap(), d.unwrap()];
    created.sort();
    assert_eq!(
        created,
        [false, false, false, true],
        "exactly one creates it"
    );
    assert!(!one.init_schema().await.unwrap());
    one.check_schema().await.unwrap();
    assert_eq!(one.count().await.unwrap(), 0);
    pg.psql("UPDATE shuffle_shard_schema SET version = 2");
    let newer = one.check_schema().await.unwrap_err();
    assert!(
        matches!(newer, TenantStoreError::SchemaNewer { found: 2, .. }),
        "{newer:?}"
    );
    assert!(matches!(
        one.init_schema().await,
        Err(TenantStoreError::SchemaNewer { .. })
    ));
}

#[tokio::test]
async fn writes_are_read_back_and_logged_in_order() {
    let Some((_pg, store)) = ready().await else {
        return;
    };
    let mut a = entry("a");
    a.k = Some(3);
    a.shards = None;
    a.api_key_sha256 = Some("ab".repeat(32));
    assert_eq!(store.put(&a).await.unwrap(), PutOutcome::Created);
    let after_create = store.current_seq().await.unwrap();
    assert_eq!(store.put(&a).await.unwrap(), PutOutcome::Unchanged);
    assert_eq!(
        store.current_seq().await.unwrap(),
        after_create,
        "nothing logged"
    );
    a.k = None;
    a.shards = Some(vec!["s1".into(), "s0".into()]);
    a.requests_per_second = Some(2.5);
    assert_eq!(store.put(&a).await.unwrap(), PutOutcome::Updated);
    assert_eq!(store.get("a").await.unwrap(), Some(a.clone()));
    let b = TenantEntry {
        cell: Some("eu".into()),
        max_in_flight: Some(7),
        burst: Some(9),
        ..entry("b")
    };
    store.put(&b).await.unwrap();
    let before_delete = store.current_seq().await.unwrap();
    assert!(store.delete("a").await.unwrap());
    assert!(!store.delete("a").await.unwrap());
    assert_eq!(store.get("a").await.unwrap(), None);

    let all = store.changes_since(0, 100).await.unwrap();
    assert!(!all.behind);
    assert_eq!(all.seq, store.current_seq().await.unwrap());
    let ids: Vec<&str> = all.changed.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["b", "a"], "each once, by its latest change");
    assert_eq!(all.changed[0].1.as_ref().unwrap().as_ref().unwrap(), &b);
    assert!(all.changed[1].1.is_none(), "a was deleted");

    let last = store.changes_since(before_delete, 100).await.unwrap();
    assert_eq!(last.changed.len(), 1);
    assert_eq!(last.changed[0].0, "a");
    let none = store.changes_since(all.seq, 100).await.unwrap();
    assert!(none.changed.is_empty() && !none.behind);
    assert_eq!(none.seq, all.seq);

    let (seq, good, bad) = load(&store).await;
    assert_eq!((seq, good, bad.len()), (all.seq, vec![b], 0));
    assert_eq!(store.count().await.unwrap(), 1);
}

#[tokio::test]
async fn ten_thousand_puts_page_out_in_order() {
    let Some((_pg, store)) = ready().await else {
        return;
    };
    let ids: Vec<String> = (0..10_000)
        .map(|n| format!("t{:05}", (n * 7_919) % 10_000))
        .collect();
    for id in &ids {
        assert_eq!(store.put(&entry(id)).await.unwrap(), PutOutcome::Created);
    }
    let mut seen = Vec::new();
    let mut seq = 0;
    loop {
        let page = store.changes_since(seq, 1_000).await.unwrap();
        assert!(!page.behind);
        assert!(page.changed.len() <= 1_000);
        if page.changed.is_empty() {
            break;
        }
        assert!(page.seq > seq);
        seq = page.seq;
        seen.extend(page.changed.into_iter().map(|(id, now)| {
            assert_eq!(now.unwrap().unwrap().id, id);
            id
        }));
    }
    assert_eq!(seen, ids, "every change, in the order written");
    assert_eq!(seq, store.current_seq().await.unwrap());
    let (loaded_at, good, bad) = load(&store).await;
    assert_eq!((loaded_at, good.len(), bad.len()), (seq, 10_000, 0));
}

#[tokio::test]
async fn a_batch_is_written_whole_and_logged() {
    let Some((_pg, store)) = ready().await else {
        return;
    };
    let mut batch: Vec<TenantEntry> = (0..500).map(|n| entry(&format!("b{n}"))).collect();
    batch[3].shards = Some(vec!["x".into(), "y\"z".into()]);
    batch[4].requests_per_second = Some(0.25);
    batch.push(TenantEntry {
        k: Some(2),
        ..entry("b0")
    });
    store.put_batch(&batch).await.unwrap();
    assert_eq!(store.count().await.unwrap(), 500);
    assert_eq!(
        store.get("b0").await.unwrap().unwrap().k,
        Some(2),
        "the last wins"
    );
    assert_eq!(store.get("b3").await.unwrap().as_ref(), Some(&batch[3]));
    assert_eq!(store.get("b4").await.unwrap().as_ref(), Some(&batch[4]));
    assert_eq!(
        store.changes_since(0, 10_000).await.unwrap().changed.len(),
        500
    );
    let before = store.current_seq().await.unwrap();
    store.put_batch(&batch[1..]).await.unwrap();
    assert_eq!(
        store.current_seq().await.unwrap(),
        before,
        "unchanged: nothing logged"
    );
    let too_big = TenantEntry {
        burst: Some(u32::MAX),
        ..entry("big")
    };
    let error = store.put_batch(&[too_big]).await.unwrap_err();
    assert!(error.to_string().contains("burst"), "{error}");
}

#[tokio::test]
async fn listening_hears_every_change() {
    let Some((pg, store)) = ready().await else {
        return;
    };
    let mut heard = TenantStore::listen(store.settings()).await.unwrap();
    store.put(&entry("n1")).await.unwrap();
    let seq = tokio::time::timeout(Duration::from_secs(30), heard.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seq, store.current_seq().await.unwrap());
    store.delete("n1").await.unwrap();
    let seq = tokio::time::timeout(Duration::from_secs(30), heard.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seq, store.current_seq().await.unwrap());
    // A change by hand (psql) is announced too: the trigger does it.
    pg.psql("INSERT INTO shuffle_shard_tenants (id) VALUES ('by-hand')");
    let seq = tokio::time::timeout(Duration::from_secs(30), heard.recv())
        .await
        .unwrap()
        .unwrap();
    let changes = store.changes_since(seq - 1, 10).await.unwrap();
    assert_eq!(changes.changed[0].0, "by-hand");
}

#[tokio::test]
async fn a_bad_row_is_named_and_the_rest_load() {
    let Some((pg, store)) = ready().await else {
        return;
    };
    for id in ["good-1", "good-2"] {
        store.put(&entry(id)).await.unwrap();
    }
    let start = store.current_seq().await.unwrap();
    pg.psql("INSERT INTO shuffle_shard_tenants (id, k) VALUES ('negative-k', -1)");
    pg.psql(
        "INSERT INTO shuffle_shard_tenants (id, shards) VALUES ('null-shard', ARRAY['s0', NULL])",
    );
    let (_, good, bad) = load(&store).await;
    let good: Vec<&str> = good.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(good, ["good-1", "good-2"]);
    let bad: Vec<(&str, &str)> = bad.iter().map(|b| (b.id.as_str(), b.column)).collect();
    assert_eq!(bad, [("negative-k", "k"), ("null-shard", "shards")]);

    let changes = store.changes_since(start, 10).await.unwrap();
    let row = changes.changed[0].1.as_ref().unwrap().as_ref().unwrap_err();
    assert_eq!((row.id.as_str(), row.column), ("negative-k", "k"));
    assert!(row.problem.contains("-1"), "{row}");
    let error = store.get("null-shard").await.unwrap_err();
    assert!(matches!(error, TenantStoreError::BadRow(_)), "{error:?}");
    assert!(error.to_string().contains("null-shard") && error.to_string().contains("shards"));
}

#[tokio::test]
async fn ids_that_spell_sql_are_only_data() {
    let Some((pg, store)) = ready().await else {
        return;
    };
    let ids = [
        "x');DROP-TABLE-shuffle_shard_tenants;--",
        "x'); DROP TABLE shuffle_shard_tenants; --",
        "'",
        "''",
        "\\'; SELECT pg_sleep(10); --",
        "$1",
        "a\"b",
        "%s%n",
        "Robert'); DELETE FROM shuffle_shard_tenants WHERE ('1'='1",
    ];
    for id in ids {
        let tenant = TenantEntry {
            cell: Some(format!("{id}'cell")),
            shards: Some(vec![id.to_owned(), "{\"}".into()]),
            ..entry(id)
        };
        assert_eq!(store.put(&tenant).await.unwrap(), PutOutcome::Created);
        assert_eq!(store.get(id).await.unwrap(), Some(tenant));
    }
    store.put_batch(&[entry("batch');--")]).await.unwrap();
    assert_eq!(store.count().await.unwrap(), ids.len() as u64 + 1);
    let changes = store.changes_since(0, 100).await.unwrap();
    assert_eq!(changes.changed.len(), ids.len() + 1);
    assert!(store.delete(ids[1]).await.unwrap());
    assert_eq!(store.count().await.unwrap(), ids.len() as u64);
    assert_eq!(
        pg.psql("SELECT count(*) FROM shuffle_shard_tenants").trim(),
        ids.len().to_string()
    );
}

#[tokio::test]
async fn a_pruned_log_says_the_reader_is_behind() {
    let Some((_pg, store)) = ready().await else {
        return;
    };
    for id in ["p1", "p2", "p3"] {
        store.put(&entry(id)).await.unwrap();
    }
    let newest = store.current_seq().await.unwrap();
    let through = store.prune_changes(Duration::ZERO).await.unwrap().unwrap();
    assert!(through < newest, "the newest change is kept");
    assert!(store.changes_since(0, 10).await.unwrap().behind);
    let current = store.changes_since(through, 10).await.unwrap();
    assert!(!current.behind);
    assert_eq!(current.seq, newest);
    assert_eq!(store.current_seq().await.unwrap(), newest);
    assert_eq!(store.prune_changes(Duration::ZERO).await.unwrap(), None);
}

/// Every error and Debug the store gives, for the password check.
fn shown(error: &TenantStoreError) -> String {
    format!("{error} {error:?}")
}

#[tokio::test]
async fn the_password_is_never_shown() {
    let Some((mut pg, store)) = ready().await else {
        return;
    };
    let password = pg.password.clone();
    let mut seen = vec![format!("{store:?} {:?}", store.settings())];
    let wrong = pg.url().replace(&password, "wrong-secret-pw");
    let error = TenantStore::connect(&settings(&wrong)).await.unwrap_err();
    assert!(matches!(error, TenantStoreError::Login { .. }), "{error:?}");
    assert!(!shown(&error).contains("wrong-secret-pw"), "{error:?}");
    seen.push(shown(&error));
    let no_db = pg.url().replace("/tenants", "/nowhere");
    seen.push(shown(
        &TenantStore::connect(&settings(&no_db)).await.unwrap_err(),
    ));
    pg.psql("INSERT INTO shuffle_shard_tenants (id, k) VALUES ('bad', -5)");
    seen.push(shown(&store.get("bad").await.unwrap_err()));
    pg.kill();
    seen.push(shown(&store.count().await.unwrap_err()));
    seen.push(shown(
        &TenantStore::connect(&settings(&pg.url()))
            .await
            .unwrap_err(),
    ));
    for text in seen {
        assert!(!text.contains(&password), "{text}");
    }
}

#[tokio::test]
async fn a_stalled_server_times_out_and_recovers() {
    let Some((pg, store)) = ready().await else {
        return;
    };
    let mut short = settings(&pg.url());
    short.timeout = SHORT;
    let store_short = TenantStore::connect(&short).await.unwrap();
    store.put(&entry("before")).await.unwrap();
    pg.signal("STOP");
    let started = Instant::now();
    let error = returns(store_short.put(&entry("during")))
        .await
        .unwrap_err();
    assert!(
        matches!(error, TenantStoreError::Timeout { .. }),
        "{error:?}"
    );
    assert!(error.is_down());
    for call in 0..2 {
        // The second finds no connection, and times out connecting.
        let error = returns(store_short.count()).await.unwrap_err();
        assert!(
            matches!(error, TenantStoreError::Timeout { .. }),
            "{call}: {error:?}"
        );
    }
    let error = returns(store_short.load_all(|_| {})).await.unwrap_err();
    assert!(
        matches!(error, TenantStoreError::Timeout { .. }),
        "{error:?}"
    );
    let error = returns(TenantStore::listen(&short)).await.unwrap_err();
    assert!(
        matches!(error, TenantStoreError::Timeout { .. }),
        "{error:?}"
    );
    // Five calls of 500 ms each, with generous slack for a busy machine.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    pg.signal("CONT");
    let mut recovered = false;
    for _ in 0..40 {
        if returns(store_short.count()).await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(recovered, "the store answers again once the server does");
    assert!(store_short.get("before").await.unwrap().is_some());
}

#[tokio::test]
async fn a_killed_server_is_unreachable_until_it_restarts() {
    let Some((mut pg, store)) = ready().await else {
        return;
    };
    store.put(&entry("kept")).await.unwrap();
    let mut heard = TenantStore::listen(store.settings()).await.unwrap();
    pg.kill();
    let closed = tokio::time::timeout(Duration::from_secs(30), heard.recv()).await;
    assert_eq!(closed.unwrap(), None, "the listener's channel closes");
    let error = store.count().await.unwrap_err();
    assert!(
        matches!(error, TenantStoreError::Unreachable { .. }),
        "{error:?}"
    );
    assert!(error.is_down());
    let error = store.count().await.unwrap_err();
    assert!(
        matches!(error, TenantStoreError::Unreachable { .. }),
        "{error:?}"
    );
    assert!(matches!(
        TenantStore::listen(store.settings()).await,
        Err(TenantStoreError::Unreachable { .. })
    ));
    pg.restart().await;
    assert_eq!(store.get("kept").await.unwrap().unwrap().id, "kept");
    let mut heard = TenantStore::listen(store.settings()).await.unwrap();
    store.put(&entry("after")).await.unwrap();
    let seq = tokio::time::timeout(Duration::from_secs(30), heard.recv()).await;
    assert_eq!(seq.unwrap(), Some(store.current_seq().await.unwrap()));
}

#[tokio::test]
async fn a_server_speaking_garbage_is_an_error_not_a_hang() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for reply in [
        &b"HTTP/1.1 200 OK\r\n\r\nhello"[..],
        &[b'R', 0, 0, 0, 2][..],
        &[0xff; 4096][..],
        // Silence: accepted, and never a byte back.
        &b""[..],
    ] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let reply = reply.to_vec();
        let server = tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut first = [0_u8; 512];
                let _ = socket.read(&mut first).await;
                let _ = socket.write_all(&reply).await;
                // Keep the socket open: the client must not wait for more.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    drop(socket);
                });
            }
        });
        let mut short = settings(&format!("postgres://u:pw@127.0.0.1:{port}/db"));
        short.timeout = SHORT;
        let started = Instant::now();
        let error = returns(TenantStore::connect(&short)).await.unwrap_err();
        assert!(error.is_down(), "{error:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        server.abort();
    }
}

#[tokio::test]
async fn tls_is_checked_against_the_ca() {
    let ca = Ca::new("tenant store CA");
    let leaf = ca.server(&["127.0.0.1"]);
    let Some(pg) = Postgres::start_tls(&leaf.cert_pem, &leaf.key_pem).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let settings = tenants::settings(&pg.url(), Some(ca_file)).unwrap();
    let store = TenantStore::connect(&settings).await.unwrap();
    assert!(store.init_schema().await.unwrap());
    store.put(&entry("over-tls")).await.unwrap();
    let ssl = pg.psql("SELECT count(*) FROM pg_stat_ssl WHERE ssl");
    assert_ne!(ssl.trim(), "0", "the connection uses TLS");
    let mut heard = TenantStore::listen(&settings).await.unwrap();
    store.delete("over-tls").await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(30), heard.recv())
            .await
            .unwrap()
            .is_some()
    );

    let other = dir.path().join("other.pem");
    std::fs::write(&other, Ca::new("someone else").pem()).unwrap();
    let error = TenantStore::connect(&tenants::settings(&pg.url(), Some(other)).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(error, TenantStoreError::Unreachable { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().to_lowercase().contains("certificate"),
        "{error}"
    );
}

#[test]
fn calls_can_run_on_any_task() {
    fn send<T: Send>(_: T) {}
    let store: Option<TenantStore> = None;
    if let Some(store) = &store {
        send(store.put(&entry("x")));
        send(store.load_all(|_| {}));
        send(store.changes_since(0, 1));
        send(store.init_schema());
        send(store.delete("x"));
        send(store.put_batch(&[]));
    }
}
