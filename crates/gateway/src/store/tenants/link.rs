//! A replica's link to the tenant store: the client, and how current the
//! registry it serves is (what the sync task last applied, whether the
//! store answers), for the admin API, the status page, the metrics and an
//! admin write waiting for its own change.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, watch};

use super::TenantStore;

/// Where the registry being served came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Nothing yet.
    Empty,
    /// The snapshot file: the store could not be read at start.
    SnapshotFile,
    /// The store.
    Store,
}

/// The client and the sync state of one replica.
#[derive(Debug)]
pub struct StoreLink {
    store: TenantStore,
    up: AtomicBool,
    /// Unix milliseconds of the last sync that reached the store (0: none).
    last_sync_ms: AtomicU64,
    /// The change number the served registry includes.
    applied: watch::Sender<u64>,
    /// Wakes the sync task before its next check is due.
    poke: Notify,
    origin: Mutex<Origin>,
    /// A write of the snapshot file is due (one at a time, of the latest
    /// registry).
    pub snapshot_due: AtomicBool,
    /// Tenants whose rows were refused because another tenant held their
    /// API key: looked at again after later changes, since the holder may
    /// have let the key go.
    held: Mutex<std::collections::BTreeSet<String>>,
}

impl StoreLink {
    /// A link over `store`, nothing applied yet.
    pub fn new(store: TenantStore) -> Self {
        Self {
            store,
            up: AtomicBool::new(false),
            last_sync_ms: AtomicU64::new(0),
            applied: watch::Sender::new(0),
            poke: Notify::new(),
            origin: Mutex::new(Origin::Empty),
            snapshot_due: AtomicBool::new(false),
            held: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    /// The client.
    pub fn store(&self) -> &TenantStore {
        &self.store
    }

    /// Whether the last call to the store succeeded.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// The store did not answer (the registry stays as it is).
    pub fn mark_down(&self) {
        self.up.store(false, Ordering::Relaxed);
    }

    /// The store answered and everything up to `seq` is applied.
    pub fn synced(&self, seq: u64, origin: Origin) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.last_sync_ms
            .store(now.as_millis() as u64, Ordering::Relaxed);
        self.up.store(true, Ordering::Relaxed);
        *self.origin.lock().expect("origin lock") = origin;
        self.applied.send_if_modified(|applied| {
            let newer = seq > *applied;
            *applied = (*applied).max(seq);
            newer
        });
    }

    /// Everything was read again up to `seq`: what is applied is exactly
    /// that, even when it is below what was applied before (a store that
    /// lost changes: its counter starts again from where it is).
    pub fn reloaded(&self, seq: u64) {
        self.synced(seq, Origin::Store);
        self.applied.send_if_modified(|applied| {
            let changed = *applied != seq;
            *applied = seq;
            changed
        });
    }

    /// Notes tenants refused because another tenant held their API key.
    pub fn hold(&self, ids: impl IntoIterator<Item = String>) {
        self.held.lock().expect("held lock").extend(ids);
    }

    /// Forgets a held tenant (served now, changed, or gone).
    pub fn release(&self, id: &str) {
        self.held.lock().expect("held lock").remove(id);
    }

    /// Forgets every held tenant (everything is read again).
    pub fn release_all(&self) {
        self.held.lock().expect("held lock").clear();
    }

    /// The held tenants.
    pub fn held(&self) -> Vec<String> {
        self.held
            .lock()
            .expect("held lock")
            .iter()
            .cloned()
            .collect()
    }

    /// The registry came from the snapshot file.
    pub fn serving_snapshot_file(&self) {
        *self.origin.lock().expect("origin lock") = Origin::SnapshotFile;
    }

    /// Where the served registry came from.
    pub fn origin(&self) -> Origin {
        *self.origin.lock().expect("origin lock")
    }

    /// When the store last answered a sync, in Unix seconds (`None`:
    /// never since start).
    pub fn last_sync_unix(&self) -> Option<f64> {
        let ms = self.last_sync_ms.load(Ordering::Relaxed);
        (ms > 0).then(|| ms as f64 / 1000.0)
    }

    /// The change number applied.
    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Waits until change `seq` is applied here, up to `limit`; whether it
    /// was.
    pub async fn wait_applied(&self, seq: u64, limit: Duration) -> bool {
        let mut applied = self.applied.subscribe();
        tokio::time::timeout(limit, applied.wait_for(|&applied| applied >= seq))
            .await
            .is_ok_and(|waited| waited.is_ok())
    }

    /// Asks the sync task to look for changes now.
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    /// Completes when [`StoreLink::poke`] is called.
    pub async fn poked(&self) {
        self.poke.notified().await;
    }
}
