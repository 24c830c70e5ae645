//! The tenant store: PostgreSQL as the fleet's source of truth for tenants
//! (`[tenants] store`), read and written through `tokio-postgres`.
//!
//! The rules that make it safe to lean on:
//! - every call ends within `tenants.timeout_ms` (waiting for the shared
//!   connection and connecting included; [`TenantStore::load_all`], which
//!   may stream millions of rows, bounds each wait for the server
//!   instead), so a stalled server is a [`TenantStoreError::Timeout`],
//!   never a hang; a call that failed for want of a server drops its
//!   connection, and the next call connects again;
//! - calls share one connection, one at a time (a transaction must not
//!   see another caller's statements), except [`TenantStore::load_all`],
//!   which takes a connection of its own so a long load holds nobody up;
//! - every statement takes its values as bind parameters: a tenant id is
//!   data, whatever it spells;
//! - a row that does not convert is a [`BadRow`] naming the tenant and the
//!   column, handed to the caller beside the good ones, never a failed load;
//! - a write is committed before it returns `Ok`.
//!
//! Change numbers: every write to a tenant row is numbered and logged in
//! `shuffle_shard_tenant_changes` by a trigger, which also announces the
//! number with `NOTIFY` (see `schema` for why numbers commit in order).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard, mpsc};
use tokio::time::{Instant, timeout, timeout_at};
use tokio_postgres::IsolationLevel;

use crate::config::TenantStoreSettings;
use crate::tenants::TenantEntry;

mod connect;
mod error;
pub mod link;
mod row;
mod schema;

use connect::Live;
pub use connect::settings;
use error::classify;
pub use error::{PASSWORD_VARIABLE, TenantStoreError};
pub use row::BadRow;
pub use schema::CHANNEL;

/// Rows fetched per round trip by [`TenantStore::load_all`]: what it holds
/// in memory at once.
const LOAD_ROWS: i32 = 10_000;

/// Changes older than this are pruned from the log, now and then.
pub const CHANGE_LOG_RETENTION: Duration = Duration::from_secs(600);

/// One write in this many prunes the change log (a cheap indexed delete).
const PRUNE_EVERY: u32 = 64;

/// Notifications a [`TenantStore::listen`] receiver may fall behind by.
const NOTIFY_QUEUE: usize = 1024;

/// What [`TenantStore::put`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// A new tenant.
    Created,
    /// An existing tenant, changed.
    Updated,
    /// An existing tenant that already held these values: nothing written,
    /// no change logged.
    Unchanged,
}

/// What changed after a change number ([`TenantStore::changes_since`]).
#[derive(Debug, Default)]
pub struct Changes {
    /// The new high-water mark: pass it to the next call.
    pub seq: u64,
    /// Each changed tenant once, in the order of its latest change (oldest
    /// first), with its entry now:
    /// `None` when it was deleted, `Some(Err(..))` when its row does not
    /// convert (the caller reports it and keeps what it had).
    pub changed: Vec<(String, Option<Result<TenantEntry, BadRow>>)>,
    /// The log no longer reaches back to the number asked about (it was
    /// pruned): load everything again ([`TenantStore::load_all`]).
    pub behind: bool,
    /// With nothing changed: the store's change counter is below the
    /// number asked about. It never goes back, so this store is not the
    /// one that number came from (a failover to a replica that missed
    /// the last writes, a store restored from a backup): load everything
    /// again.
    pub went_back: bool,
}

/// The tenant store: one PostgreSQL database every replica reads.
pub struct TenantStore {
    settings: TenantStoreSettings,
    live: Mutex<Option<Live>>,
    writes: AtomicU32,
}

impl std::fmt::Debug for TenantStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantStore")
            .field("url", &self.settings.url)
            .field("tls", &self.settings.tls.is_some())
            .field("timeout", &self.settings.timeout)
            .finish_non_exhaustive()
    }
}

/// The shared connection, held for one call.
type Held<'a> = MutexGuard<'a, Option<Live>>;

impl TenantStore {
    /// Connects to the store (within `settings.timeout`), so a wrong URL,
    /// password or TLS setting shows at once. The schema is not checked:
    /// [`TenantStore::check_schema`] does that.
    pub async fn connect(settings: &TenantStoreSettings) -> Result<Self, TenantStoreError> {
        let store = Self::unconnected(settings);
        let deadline = Instant::now() + settings.timeout;
        drop(store.hold(deadline).await?);
        Ok(store)
    }

    /// A client that connects on its first call: for a replica that must
    /// start (from its snapshot file) while the store is down.
    pub fn unconnected(settings: &TenantStoreSettings) -> Self {
        Self {
            settings: settings.clone(),
            live: Mutex::new(None),
            writes: AtomicU32::new(0),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &TenantStoreSettings {
        &self.settings
    }

    fn timed_out(&self) -> TenantStoreError {
        TenantStoreError::Timeout {
            store: self.settings.url.to_string(),
            after: self.settings.timeout,
        }
    }

    /// `step`, or a timeout after `settings.timeout`.
    async fn within<F: Future>(&self, step: F) -> Result<F::Output, TenantStoreError> {
        timeout(self.settings.timeout, step)
            .await
            .map_err(|_| self.timed_out())
    }

    /// The shared connection, connecting first when there is none, by
    /// `deadline`.
    async fn hold(&self, deadline: Instant) -> Result<Held<'_>, TenantStoreError> {
        let mut held = timeout_at(deadline, self.live.lock())
            .await
            .map_err(|_| self.timed_out())?;
        // A connection the server ended while it was idle (a restart, a
        // failover) is known to be dead before anything is sent on it:
        // connect again rather than fail this call.
        if held.as_ref().is_some_and(|live| live.client.is_closed()) {
            *held = None;
        }
        if held.is_none() {
            let live = timeout_at(deadline, connect::open(&self.settings, None))
                .await
                .map_err(|_| self.timed_out())??;
            *held = Some(live);
        }
        Ok(held)
    }

    /// Runs `call` on the shared connection within the timeout, connecting
    /// first when needed; a failure for want of a server drops the
    /// connection, so the next call starts afresh.
    async fn run<T>(
        &self,
        call: impl AsyncFnOnce(&mut tokio_postgres::Client) -> Result<T, TenantStoreError>,
    ) -> Result<T, TenantStoreError> {
        let deadline = Instant::now() + self.settings.timeout;
        let mut held = self.hold(deadline).await?;
        let live = held.as_mut().expect("hold connects");
        let outcome = match timeout_at(deadline, call(&mut live.client)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(self.timed_out()),
        };
        if outcome.as_ref().is_err_and(TenantStoreError::is_down) || live.client.is_closed() {
            *held = None;
        }
        outcome
    }

    fn fail(&self) -> impl Fn(tokio_postgres::Error) -> TenantStoreError + '_ {
        |error| classify(&self.settings.url, error)
    }

    /// Creates the schema, or upgrades it, when the database does not hold
    /// this build's version; `true` when it did either. Safe to run again,
    /// and from two places at once (an advisory lock serialises them).
    pub async fn init_schema(&self) -> Result<bool, TenantStoreError> {
        let fail = self.fail();
        let store = self.settings.url.to_string();
        self.run(async |client| {
            let tx = client.transaction().await.map_err(&fail)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::SCHEMA_LOCK])
                .await
                .map_err(&fail)?;
            let found = read_version(&tx).await.map_err(&fail)?;
            match found {
                Some(found) if found > schema::VERSION => Err(TenantStoreError::SchemaNewer {
                    store,
                    found,
                    supported: schema::VERSION,
                }),
                Some(_) => Ok(false),
                None => {
                    tx.batch_execute(&schema::v1()).await.map_err(&fail)?;
                    tx.commit().await.map_err(&fail)?;
                    Ok(true)
                }
            }
        })
        .await
    }

    /// Checks that the database holds this build's schema version.
    pub async fn check_schema(&self) -> Result<(), TenantStoreError> {
        let fail = self.fail();
        let store = self.settings.url.to_string();
        self.run(async |client| {
            let tx = client.transaction().await.map_err(&fail)?;
            match read_version(&tx).await.map_err(&fail)? {
                None => Err(TenantStoreError::SchemaMissing { store }),
                Some(found) if found > schema::VERSION => Err(TenantStoreError::SchemaNewer {
                    store,
                    found,
                    supported: schema::VERSION,
                }),
                Some(_) => Ok(()),
            }
        })
        .await
    }

    /// Every tenant, streamed ([`LOAD_ROWS`] rows in memory at a time) in
    /// one `REPEATABLE READ` transaction on a connection of its own, and
    /// the change counter as of that transaction: pass it to
    /// [`TenantStore::changes_since`]. A row that does not convert comes
    /// to `each` as an `Err` and the load goes on. The timeout bounds each
    /// wait for the server (connecting, each batch of rows), not the whole
    /// load, which may take as long as the population needs.
    pub async fn load_all(
        &self,
        mut each: impl FnMut(Result<TenantEntry, BadRow>),
    ) -> Result<u64, TenantStoreError> {
        let fail = self.fail();
        let mut live = self.within(connect::open(&self.settings, None)).await??;
        let tx = self
            .within(
                live.client
                    .build_transaction()
                    .isolation_level(IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start(),
            )
            .await?
            .map_err(&fail)?;
        let seq: i64 = self
            .within(tx.query_one(schema::CURRENT_SEQ, &[]))
            .await?
            .map_err(&fail)?
            .get(0);
        let statement = self
            .within(tx.prepare(&schema::select_all()))
            .await?
            .map_err(&fail)?;
        let portal = self
            .within(tx.bind(&statement, &[]))
            .await?
            .map_err(&fail)?;
        loop {
            let rows = self
                .within(tx.query_portal(&portal, LOAD_ROWS))
                .await?
                .map_err(&fail)?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                each(row::entry(row));
            }
        }
        self.within(tx.commit()).await?.map_err(&fail)?;
        Ok(seq.max(0) as u64)
    }

    /// About how many tenants there are (the planner's estimate, 0 when it
    /// has none): what a registry is sized by before a load, without
    /// reading the table twice.
    pub async fn estimated_count(&self) -> Result<u64, TenantStoreError> {
        let fail = self.fail();
        self.run(async |client| {
            let row = client
                .query_one(schema::ESTIMATE, &[])
                .await
                .map_err(&fail)?;
            Ok(row.get::<_, i64>(0).max(0) as u64)
        })
        .await
    }

    /// The number of tenants.
    pub async fn count(&self) -> Result<u64, TenantStoreError> {
        let fail = self.fail();
        self.run(async |client| {
            let row = client.query_one(schema::COUNT, &[]).await.map_err(&fail)?;
            Ok(row.get::<_, i64>(0).max(0) as u64)
        })
        .await
    }

    /// The change counter: the newest change committed.
    pub async fn current_seq(&self) -> Result<u64, TenantStoreError> {
        let fail = self.fail();
        self.run(async |client| {
            let row = client
                .query_one(schema::CURRENT_SEQ, &[])
                .await
                .map_err(&fail)?;
            Ok(row.get::<_, i64>(0).max(0) as u64)
        })
        .await
    }

    /// The changes after `seq`, at most `limit` of them, as the tenants they
    /// touched: each once, in the order of its latest change, with its entry now (read in the same snapshot as the log). A tenant
    /// changed again after the returned high-water mark comes again on the
    /// next call: applying an entry twice is harmless.
    pub async fn changes_since(&self, seq: u64, limit: u32) -> Result<Changes, TenantStoreError> {
        let fail = self.fail();
        let after = i64::try_from(seq).unwrap_or(i64::MAX);
        self.run(async |client| {
            let tx = client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .await
                .map_err(&fail)?;
            let pruned: i64 = tx
                .query_one(schema::PRUNED_THROUGH, &[])
                .await
                .map_err(&fail)?
                .get(0);
            if after < pruned {
                return Ok(Changes {
                    seq,
                    changed: Vec::new(),
                    behind: true,
                    went_back: false,
                });
            }
            let rows = tx
                .query(schema::CHANGES, &[&after, &i64::from(limit)])
                .await
                .map_err(&fail)?;
            // Each tenant once, ordered by its latest change in the page.
            let mut latest: std::collections::HashMap<String, i64> =
                std::collections::HashMap::with_capacity(rows.len());
            let mut high = after;
            for row in &rows {
                let number: i64 = row.get(0);
                high = high.max(number);
                latest.insert(row.get(1), number);
            }
            let mut ids: Vec<(i64, String)> = latest
                .into_iter()
                .map(|(id, number)| (number, id))
                .collect();
            ids.sort_unstable();
            let ids: Vec<String> = ids.into_iter().map(|(_, id)| id).collect();
            let went_back = ids.is_empty() && {
                let counter: i64 = tx
                    .query_one(schema::CURRENT_SEQ, &[])
                    .await
                    .map_err(&fail)?
                    .get(0);
                counter < after
            };
            let mut now: std::collections::HashMap<String, Result<TenantEntry, BadRow>> = tx
                .query(&schema::select_many(), &[&ids])
                .await
                .map_err(&fail)?
                .iter()
                .map(|row| {
                    let entry = row::entry(row);
                    (row.get::<_, String>(0), entry)
                })
                .collect();
            tx.commit().await.map_err(&fail)?;
            let changed = ids
                .into_iter()
                .map(|id| {
                    let entry = now.remove(&id);
                    (id, entry)
                })
                .collect();
            Ok(Changes {
                seq: high.max(0) as u64,
                changed,
                behind: false,
                went_back,
            })
        })
        .await
    }

    /// Writes `entry` (insert or replace, by id); committed before `Ok`.
    /// Writing what is already there changes nothing and logs nothing.
    pub async fn put(&self, entry: &TenantEntry) -> Result<PutOutcome, TenantStoreError> {
        let numbers = row::numbers(entry)?;
        let fail = self.fail();
        let outcome = self
            .run(async |client| {
                let tx = client.transaction().await.map_err(&fail)?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::WRITE_LOCK])
                    .await
                    .map_err(&fail)?;
                let written = tx
                    .query_opt(
                        &schema::upsert(),
                        &[
                            &entry.id,
                            &entry.api_key_sha256,
                            &entry.cell,
                            &numbers.k,
                            &entry.shards,
                            &numbers.max_in_flight,
                            &entry.requests_per_second,
                            &numbers.burst,
                        ],
                    )
                    .await
                    .map_err(&fail)?;
                tx.commit().await.map_err(&fail)?;
                Ok(match written {
                    None => PutOutcome::Unchanged,
                    Some(row) if row.get::<_, bool>(0) => PutOutcome::Created,
                    Some(_) => PutOutcome::Updated,
                })
            })
            .await?;
        if outcome != PutOutcome::Unchanged {
            self.maybe_prune().await;
        }
        Ok(outcome)
    }

    /// Writes `entries` in one transaction (one statement): for imports.
    /// An id listed twice keeps its last entry.
    pub async fn put_batch(&self, entries: &[TenantEntry]) -> Result<(), TenantStoreError> {
        let mut last = std::collections::HashMap::with_capacity(entries.len());
        for (at, entry) in entries.iter().enumerate() {
            row::numbers(entry)?;
            last.insert(entry.id.as_str(), at);
        }
        let unique: Vec<&TenantEntry> = entries
            .iter()
            .enumerate()
            .filter(|(at, entry)| last.get(entry.id.as_str()) == Some(at))
            .map(|(_, entry)| entry)
            .collect();
        let json = serde_json::to_string(&unique).map_err(|e| TenantStoreError::Query {
            problem: e.to_string(),
        })?;
        let fail = self.fail();
        self.run(async |client| {
            let tx = client.transaction().await.map_err(&fail)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::WRITE_LOCK])
                .await
                .map_err(&fail)?;
            tx.execute(&schema::upsert_batch(), &[&json])
                .await
                .map_err(&fail)?;
            tx.commit().await.map_err(&fail)
        })
        .await?;
        self.maybe_prune().await;
        Ok(())
    }

    /// One tenant's entry, `None` when there is no such tenant.
    pub async fn get(&self, id: &str) -> Result<Option<TenantEntry>, TenantStoreError> {
        let fail = self.fail();
        self.run(async |client| {
            let row = client
                .query_opt(&schema::select_one(), &[&id])
                .await
                .map_err(&fail)?;
            Ok(row.as_ref().map(row::entry).transpose()?)
        })
        .await
    }

    /// Deletes one tenant; `false` when there was none. Committed before
    /// `Ok`.
    pub async fn delete(&self, id: &str) -> Result<bool, TenantStoreError> {
        let fail = self.fail();
        let deleted = self
            .run(async |client| {
                let tx = client.transaction().await.map_err(&fail)?;
                // The writers' lock before the row's, as every writer takes
                // them (the other order could deadlock with a put).
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&schema::WRITE_LOCK])
                    .await
                    .map_err(&fail)?;
                let n = tx.execute(schema::DELETE, &[&id]).await.map_err(&fail)?;
                tx.commit().await.map_err(&fail)?;
                Ok(n > 0)
            })
            .await?;
        if deleted {
            self.maybe_prune().await;
        }
        Ok(deleted)
    }

    /// Drops changes older than `older_than` from the log (always keeping
    /// the newest); the number the log was pruned through, when anything
    /// went. Readers behind it are told to load everything again.
    pub async fn prune_changes(
        &self,
        older_than: Duration,
    ) -> Result<Option<u64>, TenantStoreError> {
        let fail = self.fail();
        let seconds = older_than.as_secs_f64();
        self.run(async |client| {
            let row = client
                .query_opt(schema::PRUNE, &[&seconds])
                .await
                .map_err(&fail)?;
            Ok(row.map(|row| row.get::<_, i64>(0).max(0) as u64))
        })
        .await
    }

    /// Prunes the change log on one write in [`PRUNE_EVERY`]; a failure
    /// only waits for the next.
    async fn maybe_prune(&self) {
        if !self
            .writes
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PRUNE_EVERY)
        {
            return;
        }
        if let Err(error) = self.prune_changes(CHANGE_LOG_RETENTION).await {
            tracing::debug!(%error, "tenant store: pruning the change log failed");
        }
    }

    /// A connection of its own that `LISTEN`s for changes: the receiver
    /// gets the number of each change announced, and closes when the
    /// connection ends (the caller connects again, and reads
    /// [`TenantStore::changes_since`] for what it missed meanwhile).
    /// Dropping the receiver closes the connection. A stalled server
    /// announces nothing and closes nothing: the caller's periodic
    /// [`TenantStore::current_seq`] notices that.
    pub async fn listen(
        settings: &TenantStoreSettings,
    ) -> Result<mpsc::Receiver<u64>, TenantStoreError> {
        let (sender, receiver) = mpsc::channel(NOTIFY_QUEUE);
        let timed_out = || TenantStoreError::Timeout {
            store: settings.url.to_string(),
            after: settings.timeout,
        };
        let mut live = timeout(
            settings.timeout,
            connect::open(settings, Some(sender.clone())),
        )
        .await
        .map_err(|_| timed_out())??;
        // The channel's name is ours, a constant: nothing to bind.
        timeout(
            settings.timeout,
            live.client.batch_execute(&format!("LISTEN {CHANNEL}")),
        )
        .await
        .map_err(|_| timed_out())?
        .map_err(|error| classify(&settings.url, error))?;
        tokio::spawn(async move {
            // `live` is kept (and the connection with it) until the
            // connection ends or the receiver is dropped.
            tokio::select! {
                () = sender.closed() => {}
                () = live.ended() => {}
            }
            drop(live);
        });
        Ok(receiver)
    }
}

/// The schema version the database holds, `None` when it has none.
async fn read_version(
    tx: &tokio_postgres::Transaction<'_>,
) -> Result<Option<i32>, tokio_postgres::Error> {
    let exists: bool = tx.query_one(schema::SCHEMA_EXISTS, &[]).await?.get(0);
    if !exists {
        return Ok(None);
    }
    Ok(tx.query_one(schema::READ_VERSION, &[]).await?.get(0))
}
