//! Lookback after a migration (`reload.lookback_seconds`): the placement
//! the last applied migration replaced, kept for a while so that a tenant
//! whose new members do not hold its data yet (or all fail) may be served
//! by the members of its previous subset.
//!
//! Only one step back, as dskit's `ShuffleShardWithLookback` in spirit: a
//! migration inside an open window replaces the previous placement with
//! the one it moved tenants off, and the new window starts then. The old
//! placement is kept as its configuration, tenants and topology, never as
//! the old snapshot, so a lookback never holds another lookback.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use placement::ShardIndex;
use tokio::time::Instant;

use crate::cell::{TenantRoute, Topology};
use crate::config::GatewayConfig;
use crate::tenants::{Tenant, Tenants};

/// The placement before the last applied migration, and how long it may
/// still serve.
#[derive(Debug)]
pub struct Lookback {
    /// The configuration placed before (cell names and shard ids).
    config: Arc<GatewayConfig>,
    /// The tenants placed before (their own `k`, shards and cells).
    tenants: Tenants,
    /// The placers before.
    topology: Arc<Topology>,
    /// When the window closes.
    pub until: Instant,
    /// When the migration was applied, in Unix seconds.
    pub at_unix: u64,
    /// The window's length.
    pub window: Duration,
    /// Attempts made at lookback members in this window.
    attempts: AtomicU64,
}

impl Lookback {
    /// The lookback a new snapshot starts when it replaces the one that
    /// serves `replaced` (its configuration, tenants and placers) with
    /// `kept` as its lookback: `moved` says whether the change moved some
    /// tenant to other shards, `window` is the new configuration's
    /// `reload.lookback_seconds`. A migration starts a new window over the
    /// replaced placement; any other change keeps the window there is,
    /// while it is open; a window of 0 ends any. (It takes the pieces, not
    /// the snapshot, so that the snapshot may call it.)
    pub(super) fn after(
        kept: Option<&Arc<Self>>,
        replaced: (&Arc<GatewayConfig>, &Tenants, &Arc<Topology>),
        window: Duration,
        moved: bool,
        now: Instant,
    ) -> Option<Arc<Self>> {
        if window.is_zero() {
            return None;
        }
        if !moved {
            return kept.filter(|lookback| lookback.is_open(now)).cloned();
        }
        let (config, tenants, topology) = replaced;
        let at_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        Some(Arc::new(Self {
            config: Arc::clone(config),
            tenants: tenants.clone(),
            topology: Arc::clone(topology),
            // A week at most (the configuration's range): no overflow.
            until: now.checked_add(window).unwrap_or(now),
            at_unix,
            window,
            attempts: AtomicU64::new(0),
        }))
    }

    /// Whether the window is still open at `now`.
    pub fn is_open(&self, now: Instant) -> bool {
        now < self.until
    }

    /// How long the window stays open after `now`.
    pub fn left(&self, now: Instant) -> Duration {
        self.until.saturating_duration_since(now)
    }

    /// When the window closes, in Unix seconds.
    pub fn until_unix(&self) -> u64 {
        self.at_unix.saturating_add(self.window.as_secs())
    }

    /// Attempts made at lookback members in this window.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// Counts an attempt at a lookback member.
    pub(crate) fn count_attempt(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
    }

    /// `tenant`'s lookback members, routed by `route` under `config`: the
    /// members of its previous subset, in that subset's order, that are
    /// not in its current one, as indices of its current cell. Empty when
    /// it was not placed before, or in a cell of another name; an old
    /// member no longer in the cell is skipped (it cannot be reached).
    pub fn members(
        &self,
        tenant: Tenant<'_>,
        config: &GatewayConfig,
        route: &TenantRoute,
    ) -> Box<[ShardIndex]> {
        let Some(before) = self.tenants.get(tenant.id()) else {
            return Box::default();
        };
        let old_cell = &self.config.cells[before.cell_index()];
        let cell = &config.cells[route.cell];
        if old_cell.name != cell.name {
            return Box::default();
        }
        self.topology
            .tenant_subset(before)
            .iter()
            .filter_map(|&old| {
                let id = &old_cell.shards[old as usize].id;
                let index = cell.shards.iter().position(|shard| shard.id == *id)?;
                ShardIndex::try_from(index).ok()
            })
            .filter(|index| !route.subset.contains(index))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::config::writer::{GatewayToml, Shard, random_bytes, tenants, tenants_toml};
    use crate::state::Snapshot;

    /// [`Lookback::after`] as `Gateway::install` calls it.
    fn after(
        current: &Snapshot,
        next: &Snapshot,
        moved: bool,
        now: Instant,
    ) -> Option<Arc<Lookback>> {
        Lookback::after(
            current.lookback.as_ref(),
            (&current.config, &current.tenants, &current.topology),
            next.config.lookback(),
            moved,
            now,
        )
    }

    /// A configuration of `shards` (ids `s0`…) at k = 3 with 40 tenants
    /// and a 300 s lookback, under `key`.
    fn toml(shards: &[&str], key: &[u8], version: &str) -> GatewayToml {
        GatewayToml {
            k: 3,
            key_version: version.into(),
            placement_key: key.to_vec(),
            tables: vec![("reload".into(), "lookback_seconds = 300\n".into())],
            shards: shards
                .iter()
                .map(|id| Shard::new(*id, "http://127.0.0.1:9"))
                .collect(),
            tenants: tenants_toml(&tenants(40)),
            admin_listen: None,
            ..GatewayToml::default()
        }
    }

    /// `before`, then `next` loaded over it in the same directory, with
    /// the lookback a migration from one to the other starts.
    fn migrate(before: &GatewayToml, next: &GatewayToml) -> (Snapshot, Snapshot) {
        let dir = tempfile::tempdir().unwrap();
        let path = before.write(dir.path()).unwrap();
        let old = Snapshot::load(&path, None).unwrap();
        let mut next = next.clone();
        // The same tenants (their keys were drawn once).
        next.tenants = before.tenants.clone();
        next.write(dir.path()).unwrap();
        let mut new = Snapshot::load(&path, Some(&old)).unwrap();
        new.lookback = after(&old, &new, true, Instant::now());
        (old, new)
    }

    /// Each tenant's (members before, members now, lookback members), by id.
    fn compare(old: &Snapshot, new: &Snapshot) -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
        let ids = |snapshot: &Snapshot, indices: &[ShardIndex]| -> Vec<String> {
            indices
                .iter()
                .map(|&i| snapshot.config.cells[0].shards[i as usize].id.clone())
                .collect()
        };
        new.tenants
            .iter()
            .map(|tenant| {
                let route = new.tenant_route(tenant).unwrap();
                let before = old.tenants.get(tenant.id()).unwrap();
                (
                    ids(old, &old.topology.tenant_subset(before)),
                    ids(new, &route.subset),
                    ids(new, &route.lookback),
                )
            })
            .collect()
    }

    #[test]
    fn nothing_moved_means_no_lookback_members() {
        let shards = ["s0", "s1", "s2", "s3", "s4", "s5"];
        let config = toml(&shards, &random_bytes(32), "v1");
        let (old, new) = migrate(&config, &config);
        assert!(new.lookback.is_some());
        for (before, now, lookback) in compare(&old, &new) {
            assert_eq!(before, now);
            assert!(lookback.is_empty(), "{lookback:?}");
        }
        // Without a migration no window opens at all.
        assert!(after(&old, &new, false, Instant::now()).is_none());
    }

    #[test]
    fn a_rotation_looks_back_at_the_members_it_dropped_in_their_order() {
        let shards = ["s0", "s1", "s2", "s3", "s4", "s5"];
        let (old, new) = migrate(
            &toml(&shards, &random_bytes(32), "v1"),
            &toml(&shards, &random_bytes(32), "v2"),
        );
        let mut moved = 0;
        for (before, now, lookback) in compare(&old, &new) {
            let expected: Vec<String> = before
                .iter()
                .filter(|id| !now.contains(id))
                .cloned()
                .collect();
            assert_eq!(lookback, expected, "before {before:?}, now {now:?}");
            moved += usize::from(!lookback.is_empty());
        }
        assert!(moved > 0, "a new key moves some of 40 tenants");
    }

    #[test]
    fn old_members_removed_from_the_cell_are_skipped() {
        let key = random_bytes(32);
        let (old, new) = migrate(
            &toml(&["s0", "s1", "s2", "s3", "s4", "s5"], &key, "v1"),
            &toml(&["s0", "s1", "s2", "s3", "s4"], &key, "v1"),
        );
        let mut lost_s5 = 0;
        for (before, now, lookback) in compare(&old, &new) {
            assert!(!lookback.contains(&"s5".to_owned()), "{lookback:?}");
            let expected: BTreeSet<&String> = before
                .iter()
                .filter(|id| !now.contains(id) && *id != "s5")
                .collect();
            assert_eq!(lookback.iter().collect::<BTreeSet<_>>(), expected);
            lost_s5 += usize::from(before.contains(&"s5".to_owned()));
        }
        // Half of the tenants (k = 3 of 6) had s5.
        assert!(lost_s5 > 0);
    }

    #[test]
    fn a_closed_window_is_not_carried_and_lookback_zero_ends_one() {
        let shards = ["s0", "s1", "s2", "s3"];
        let config = toml(&shards, &random_bytes(32), "v1");
        let (old, mut new) = migrate(&config, &config);
        let now = Instant::now();
        let open = new.lookback.clone().unwrap();
        assert!(open.is_open(now));
        // Carried by a change that moves nobody, while open.
        let carried = after(&new, &old, false, now).unwrap();
        assert!(Arc::ptr_eq(&carried, &open));
        // Not once closed.
        let later = open.until + Duration::from_millis(1);
        assert!(!open.is_open(later));
        assert!(after(&new, &old, false, later).is_none());
        // A configuration without lookback ends it.
        let mut off = config.clone();
        off.tables.clear();
        let dir = tempfile::tempdir().unwrap();
        let path = off.write(dir.path()).unwrap();
        let plain = Snapshot::load(&path, None).unwrap();
        assert!(after(&new, &plain, true, now).is_none());
        new.lookback = None;
    }
}
