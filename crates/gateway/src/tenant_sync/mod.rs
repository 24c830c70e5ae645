//! Tenants from the tenant store (`[tenants] store`): the registry read
//! whole at start (or, while the store is down, the snapshot file this
//! replica last wrote), then kept current by applying each changed row as
//! it is announced (`LISTEN`/`NOTIFY`) or found by the periodic look at
//! the change counter, so a missed notification is caught within
//! `tenants.check_ms`. The request path never waits on the store: it reads
//! the registry in the snapshot, which a change replaces.

mod snapshot_file;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::config::{GatewayConfig, TenantSource};
use crate::state::Gateway;
use crate::store::tenants::link::{Origin, StoreLink};
use crate::store::tenants::{BadRow, TenantStore, TenantStoreError};
use crate::tenants::Tenants;

/// Changed tenants asked for per round trip.
const CHANGES_PER_CALL: u32 = 1_000;

/// The longest wait before the notification connection is tried again.
const MAX_LISTEN_BACKOFF: Duration = Duration::from_secs(10);

/// Why a replica whose tenants come from the store could not start.
#[derive(Debug, thiserror::Error)]
pub enum SyncStartError {
    /// The store could not be read and there is no snapshot file to serve.
    #[error(
        "cannot read the tenants from the tenant store ({problem}) and there is no snapshot file to serve meanwhile; start the store (or fix [tenants] store), or set tenants.snapshot_file so a replica can start while the store is down"
    )]
    NoTenants {
        /// What went wrong with the store.
        problem: String,
    },
    /// The snapshot file could not be read.
    #[error(
        "the tenant store is unreachable ({problem}) and the snapshot file cannot be served: {snapshot}"
    )]
    BadSnapshot {
        /// What went wrong with the store.
        problem: String,
        /// What is wrong with the snapshot file.
        snapshot: String,
    },
}

/// Reads the tenants before the gateway serves, when they come from the
/// store: from the store, else from the snapshot file (saying so), else
/// the start fails. Then starts the task that keeps them current, which
/// ends when `stopped` is raised.
pub async fn start(
    gateway: &Arc<Gateway>,
    stopped: watch::Receiver<bool>,
) -> Result<(), SyncStartError> {
    let config = Arc::clone(&gateway.snapshot().config);
    let TenantSource::Store(settings) = config.tenants() else {
        return Ok(());
    };
    let link = Arc::new(StoreLink::new(TenantStore::unconnected(settings)));
    let _ = gateway.tenant_store.set(Arc::clone(&link));
    match load_store(gateway, &link).await {
        Ok(()) => {}
        Err(error) => {
            link.mark_down();
            let problem = error.to_string();
            let Some(file) = settings.snapshot_file.as_ref().filter(|f| f.exists()) else {
                return Err(SyncStartError::NoTenants { problem });
            };
            let tenants = crate::tenants::load::from_file(file, &config).map_err(|e| {
                SyncStartError::BadSnapshot {
                    problem: problem.clone(),
                    snapshot: e.to_string(),
                }
            })?;
            tracing::warn!(
                %problem,
                file = %file.display(),
                tenants = tenants.len(),
                "the tenant store is unreachable: serving the tenants of the snapshot file until it answers"
            );
            gateway
                .replace_tenants(tenants, &config)
                .map_err(|e| SyncStartError::BadSnapshot {
                    problem,
                    snapshot: e.to_string(),
                })?;
            link.serving_snapshot_file();
        }
    }
    tokio::spawn(keep_current(Arc::clone(gateway), link, stopped));
    Ok(())
}

/// Reads every tenant from the store into a new registry and serves it.
async fn load_store(gateway: &Arc<Gateway>, link: &StoreLink) -> Result<(), TenantStoreError> {
    let began = std::time::Instant::now();
    let store = link.store();
    store.check_schema().await?;
    let config = Arc::clone(&gateway.snapshot().config);
    let expected = store.estimated_count().await? as usize;
    let (tenants, seq, refused) = read_all(store, &config, expected, link).await?;
    tracing::info!(
        tenants = tenants.len(),
        store = %store.settings().url,
        elapsed_ms = began.elapsed().as_millis() as u64,
        "tenants loaded"
    );
    gateway
        .replace_tenants(tenants, &config)
        .map_err(|e| TenantStoreError::Query {
            problem: e.to_string(),
        })?;
    synced(gateway, link, seq);
    link.reloaded(seq);
    // Counted like a refused change, so a bad row present at start shows
    // on the same counter as one written later.
    gateway.metrics.tenant_store.changed("refused", refused);
    gateway.metrics.tenant_store.store_up.set(1);
    snapshot_file::write_soon(gateway, true);
    Ok(())
}

/// Every tenant of the store as a registry, each row checked against
/// `config`, and the number of rows refused: a row that does not convert
/// or validate is logged with its tenant and field and left out, and of
/// tenants sharing an API key only the first read is kept (the rest
/// refused, logged), so one bad row never keeps the others from being
/// served.
async fn read_all(
    store: &TenantStore,
    config: &GatewayConfig,
    expected: usize,
    link: &StoreLink,
) -> Result<(Tenants, u64, u64), TenantStoreError> {
    link.release_all();
    let mut loading = Tenants::loading(expected);
    let mut refused = 0_u64;
    let seq = store
        .load_all(|row| match checked(row, config) {
            Some(valid) => loading.push(&valid),
            None => refused += 1,
        })
        .await?;
    let (tenants, seq, refused) = match loading.finish() {
        Ok(tenants) => (tenants, seq, refused),
        Err(conflict) => {
            // Rare (the store's unique key is on the digest as written,
            // so only a case difference gets this far): read again,
            // keeping the first tenant of each id and key.
            tracing::warn!(%conflict, "tenants in the store share an id or an API key; reading them again, keeping the first of each");
            let mut loading = Tenants::loading(expected);
            let mut ids = std::collections::HashSet::new();
            let mut keys = std::collections::HashSet::new();
            let mut refused = 0_u64;
            let seq = store
                .load_all(|row| {
                    let Some(valid) = checked(row, config) else {
                        refused += 1;
                        return;
                    };
                    if !ids.insert(valid.id.clone())
                        || valid.api_key_sha256.is_some_and(|key| !keys.insert(key))
                    {
                        tracing::warn!(tenant = %valid.id, field = "api_key_sha256", "tenant store row refused: its id or API key is another tenant's; the first one read is served");
                        refused += 1;
                        link.hold([valid.id.clone()]);
                        return;
                    }
                    loading.push(&valid);
                })
                .await?;
            let tenants = loading.finish().map_err(|e| TenantStoreError::Query {
                problem: e.to_string(),
            })?;
            (tenants, seq, refused)
        }
    };
    if refused > 0 {
        tracing::warn!(refused, "tenant store rows refused (each logged above)");
    }
    Ok((tenants, seq, refused))
}

/// A store row checked against `config`, or `None` (logged) when it does
/// not convert or validate.
fn checked(
    row: Result<crate::tenants::TenantEntry, BadRow>,
    config: &GatewayConfig,
) -> Option<crate::tenants::ValidEntry> {
    match row {
        Ok(entry) => match entry.validate(config) {
            Ok(valid) => Some(valid),
            Err(error) => {
                tracing::warn!(tenant = %entry.id, field = error.field, problem = %error.problem, "tenant store row refused; the tenant is not served");
                None
            }
        },
        Err(bad) => {
            tracing::warn!(tenant = %bad.id, field = bad.column, problem = %bad.problem, "tenant store row refused; the tenant is not served");
            None
        }
    }
}

/// Keeps the registry current until `stopped` is raised.
async fn keep_current(
    gateway: Arc<Gateway>,
    link: Arc<StoreLink>,
    mut stopped: watch::Receiver<bool>,
) {
    let settings = link.store().settings().clone();
    // The configuration the rows served were checked against.
    let mut checked = Arc::clone(&gateway.snapshot().config);
    let mut notifications: Option<mpsc::Receiver<u64>> = None;
    let mut backoff = Duration::from_millis(100);
    let mut listen_again = tokio::time::Instant::now();
    loop {
        if notifications.is_none() && tokio::time::Instant::now() >= listen_again {
            match TenantStore::listen(&settings).await {
                Ok(receiver) => {
                    notifications = Some(receiver);
                    backoff = Duration::from_millis(100);
                }
                Err(error) => {
                    tracing::debug!(%error, "cannot listen for tenant changes; looking every tenants.check_ms meanwhile");
                    listen_again = tokio::time::Instant::now() + backoff;
                    backoff = (backoff * 2).min(MAX_LISTEN_BACKOFF);
                }
            }
        }
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => return,
            () = link.poked() => {}
            () = tokio::time::sleep(settings.check_every) => {}
            notified = next(&mut notifications) => {
                if notified.is_none() {
                    // The connection ended: try again (after a pause).
                    notifications = None;
                    listen_again = tokio::time::Instant::now() + backoff;
                }
            }
        }
        match sync_once(&gateway, &link, &mut checked).await {
            Ok(()) => {
                gateway.metrics.tenant_store.store_up.set(1);
            }
            Err(error) => {
                if link.is_up() {
                    tracing::warn!(%error, "the tenant store does not answer; serving the tenants applied last until it does");
                }
                link.mark_down();
                gateway.metrics.tenant_store.store_up.set(0);
            }
        }
    }
}

/// Records that the registry served holds every change up to `seq`, in
/// the link and in `shuffle_tenant_store_last_sync_timestamp_seconds` at
/// once: the gauge must not say "never" (or older) while the link, the
/// view and `store_up` say current, or a staleness alert fires on every
/// start. The gauge goes first, so whoever waits on the link (an admin
/// write waiting for its change) finds it set.
fn synced(gateway: &Gateway, link: &StoreLink, seq: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    gateway
        .metrics
        .tenant_store
        .last_sync
        .set(now.as_secs_f64());
    link.synced(seq, Origin::Store);
}

/// [`load_store`], and the configuration its rows were checked against
/// kept in `checked` (the new snapshot's own copy).
async fn load_all_again(
    gateway: &Arc<Gateway>,
    link: &StoreLink,
    checked: &mut Arc<GatewayConfig>,
) -> Result<(), TenantStoreError> {
    load_store(gateway, link).await?;
    *checked = Arc::clone(&gateway.snapshot().config);
    Ok(())
}

/// The next notification, or never while there is no connection.
async fn next(notifications: &mut Option<mpsc::Receiver<u64>>) -> Option<u64> {
    match notifications {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// Applies every change after the one applied, a page at a time; loads
/// everything again when the log no longer reaches back that far, when
/// the registry served never came from the store (the snapshot file), or
/// when the configuration was reloaded since the rows were checked
/// (`checked`): a reload checks the tenants served against the new
/// configuration, but the rows the old one refused (a cell it did not
/// have, a `k` too large for it) would stay unserved until they changed.
async fn sync_once(
    gateway: &Arc<Gateway>,
    link: &StoreLink,
    checked: &mut Arc<GatewayConfig>,
) -> Result<(), TenantStoreError> {
    // A reload, not a membership change (which copies the configuration
    // with other discovered shards, and checks every tenant itself).
    if gateway.snapshot().config.generation != checked.generation {
        tracing::info!(
            "the configuration was reloaded: reading every tenant again, to check each row against it"
        );
        return load_all_again(gateway, link, checked).await;
    }
    if link.origin() != Origin::Store {
        return load_all_again(gateway, link, checked).await;
    }
    let store = link.store();
    let mut seq = link.applied();
    loop {
        let changes = store.changes_since(seq, CHANGES_PER_CALL).await?;
        if changes.behind {
            tracing::warn!(
                seq,
                "the tenant store's change log no longer reaches back to the last change applied here; reading every tenant again"
            );
            return load_all_again(gateway, link, checked).await;
        }
        if changes.went_back {
            tracing::warn!(
                seq,
                "the tenant store's change counter is behind the last change applied here (a failover to a replica that missed writes, or a restored backup?); reading every tenant again"
            );
            return load_all_again(gateway, link, checked).await;
        }
        if changes.changed.is_empty() {
            synced(gateway, link, changes.seq.max(seq));
            return Ok(());
        }
        let mut batch = Vec::with_capacity(changes.changed.len());
        for (id, row) in changes.changed {
            match row {
                None => batch.push((id, None)),
                Some(Ok(entry)) => batch.push((id, Some(entry))),
                Some(Err(bad)) => {
                    tracing::warn!(tenant = %bad.id, field = bad.column, problem = %bad.problem, "tenant store row refused; the tenant keeps what it had");
                    gateway.metrics.tenant_store.changed("refused", 1);
                }
            }
        }
        let ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
        let applied = gateway.apply_tenant_changes(batch);
        for id in &ids {
            link.release(id);
        }
        link.hold(applied.key_held);
        retry_held(gateway, link, &ids).await?;
        seq = changes.seq;
        synced(gateway, link, seq);
        snapshot_file::write_soon(gateway, false);
    }
}

/// Looks again at the tenants refused because another tenant held their
/// API key, after `changed` were applied (the holder may have been deleted
/// or given another key): each is read from the store and applied if its
/// key is free now; one still clashing stays held, one gone is forgotten.
async fn retry_held(
    gateway: &Arc<Gateway>,
    link: &StoreLink,
    changed: &[String],
) -> Result<(), TenantStoreError> {
    let held: Vec<String> = link
        .held()
        .into_iter()
        .filter(|id| !changed.contains(id))
        .collect();
    if held.is_empty() {
        return Ok(());
    }
    let snapshot = gateway.snapshot();
    let mut batch = Vec::with_capacity(held.len());
    for id in held {
        let entry = match link.store().get(&id).await {
            Ok(Some(entry)) => entry,
            Ok(None) | Err(TenantStoreError::BadRow(_)) => {
                link.release(&id);
                continue;
            }
            Err(error) => return Err(error),
        };
        // Only a key now free is tried (a clash still there would be
        // refused, logged and counted again at every change).
        match entry.validate(&snapshot.config) {
            Ok(valid) => {
                let free = valid.api_key_sha256.is_none_or(|digest| {
                    snapshot
                        .tenants
                        .by_key_digest(&digest)
                        .is_none_or(|owner| owner.id() == id)
                });
                if free {
                    batch.push((id, Some(entry)));
                }
            }
            Err(_) => link.release(&id),
        }
    }
    if batch.is_empty() {
        return Ok(());
    }
    let ids: Vec<String> = batch.iter().map(|(id, _)| id.clone()).collect();
    let applied = gateway.apply_tenant_changes(batch);
    for id in ids.iter().filter(|id| !applied.key_held.contains(id)) {
        link.release(id);
    }
    Ok(())
}
