//! Discovered cells in the snapshot: their memberships written into the
//! configuration's cells, and each membership change applied under the
//! migration guard's second half (a placement change that moves tenants
//! more than rendezvous's minimum is refused unless allowed).

use std::sync::Arc;

use tokio::time::Instant;

use super::discovered_shards::fill;
use super::{Gateway, LoadError, Movement, Snapshot};
use crate::discovery::Membership;
use crate::discovery::guard::Change;

/// Why a membership change was not applied.
#[derive(Debug, thiserror::Error)]
pub enum MembershipRefused {
    /// The cell is no longer discovered (a reload changed it meanwhile).
    #[error("cell {0:?} is no longer discovered")]
    Gone(String),
    /// The membership changed since the change was judged (a reload, or
    /// another change): the next look judges again.
    #[error("the membership changed since this change was judged; the next look judges again")]
    Stale,
    /// Applying it panicked (a defect: reported, and the membership served
    /// stays).
    #[error("applying the change failed unexpectedly: {0}")]
    Panicked(String),
    /// The new membership does not make a valid cell (fewer shards than
    /// `k`, a zone missing, a tenant naming a removed shard).
    #[error(transparent)]
    Invalid(#[from] LoadError),
    /// The placement change moves tenants between shards that stay.
    #[error(
        "the change ({change}) moves {} of {} tenants ({:.2}%) beyond the shards it adds and removes ({non_minimal} of them between shards that stay: the cell's algorithm or zones remap on a change of membership); the added shards wait, missing ones stay placed and down; set discovery.allow_migration = true to apply such changes",
        .movement.changed, .movement.tenants, .movement.percent()
    )]
    Remaps {
        /// What it would move.
        movement: Movement,
        /// Tenants it would move between surviving shards.
        non_minimal: u64,
        /// The change, in words.
        change: String,
    },
}

impl Gateway {
    /// Applies a membership change of `cell`: a new snapshot whose cell has
    /// `change.members`, missing members down from the moment it serves.
    /// A placement change (members added or removed) must move each moved
    /// tenant only onto added shards or off removed ones, unless
    /// `allow_migration`; a change judged against another membership than
    /// the one served is not applied. Returns what it moved.
    pub fn apply_membership(
        self: &Arc<Self>,
        cell: &str,
        change: &Change,
        judged_against: &[crate::discovery::Member],
        allow_migration: bool,
    ) -> Result<Movement, MembershipRefused> {
        let _one_at_a_time = self.changing.lock().expect("changing lock");
        let current = self.snapshot();
        let Some(membership) = current.memberships.get(cell) else {
            return Err(MembershipRefused::Gone(cell.to_owned()));
        };
        // Judged outside the lock: if what it was judged against is no
        // longer what is served, it is not applied over it.
        if membership.members != judged_against {
            return Err(MembershipRefused::Stale);
        }
        let Some(index) = current.topology.find(cell) else {
            return Err(MembershipRefused::Gone(cell.to_owned()));
        };
        let mut memberships = (*current.memberships).clone();
        memberships.insert(
            cell.to_owned(),
            Membership {
                source: membership.source.clone(),
                members: change.members.clone(),
            },
        );
        let mut config = (*current.config).clone();
        fill(&mut config, &memberships).map_err(LoadError::from)?;
        let tenants = if change.changes_placement() {
            // Dedicated shards are kept by index: checked and found again.
            current.tenants_for(&config).map_err(LoadError::from)?
        } else {
            current.tenants.clone()
        };
        let next = Snapshot::build_with(config, tenants, Some(&current), memberships)?;
        let mut movement = Movement::default();
        if change.changes_placement() {
            let non_minimal;
            (movement, non_minimal) = moved(&current, &next, index, change);
            if non_minimal > 0 && !allow_migration {
                return Err(MembershipRefused::Remaps {
                    movement,
                    non_minimal,
                    change: describe(change),
                });
            }
        }
        let now = Instant::now();
        for (ids, missing) in [(&change.went_missing, true), (&change.returned, false)] {
            for id in ids {
                if let Some(shard) = next.find_shard(cell, id) {
                    shard
                        .health
                        .lock()
                        .expect("health lock")
                        .set_missing(missing, now);
                }
            }
        }
        next.know_series(&self.metrics);
        self.install(next, movement.changed > 0);
        Ok(movement)
    }
}

/// The change in words, for logs and refusals.
pub fn describe(change: &Change) -> String {
    let mut parts = Vec::new();
    for (what, ids) in [
        ("added", &change.added),
        ("removed", &change.removed),
        ("rezoned", &change.rezoned),
        ("missing", &change.went_missing),
        ("returned", &change.returned),
        ("readdressed", &change.readdressed),
    ] {
        if !ids.is_empty() {
            parts.push(format!("{what} {}", ids.join(", ")));
        }
    }
    parts.join("; ")
}

/// What a membership change of the cell at `index` moves, over the
/// tenants of that cell in both snapshots, and how many of them move
/// other than onto added shards or off removed ones.
fn moved(current: &Snapshot, next: &Snapshot, index: usize, change: &Change) -> (Movement, u64) {
    let old_ids = &current.config.cells[index].shards;
    let new_ids = &next.config.cells[index].shards;
    let mut movement = Movement::default();
    let mut non_minimal = 0;
    let (mut old, mut new) = (Vec::new(), Vec::new());
    for tenant in current.tenants.iter() {
        if tenant.cell_index() != index {
            continue;
        }
        let Some(after) = next.tenants.get(tenant.id()) else {
            continue;
        };
        movement.tenants += 1;
        current.topology.tenant_subset_into(tenant, &mut old);
        next.topology.tenant_subset_into(after, &mut new);
        let old: Vec<&str> = old
            .iter()
            .map(|&i| old_ids[i as usize].id.as_str())
            .collect();
        let new: Vec<&str> = new
            .iter()
            .map(|&i| new_ids[i as usize].id.as_str())
            .collect();
        let gained: Vec<&str> = new.iter().copied().filter(|id| !old.contains(id)).collect();
        let lost: Vec<&str> = old.iter().copied().filter(|id| !new.contains(id)).collect();
        movement.count(gained.len() as u64, lost.len() as u64);
        let onto_added = gained
            .iter()
            .filter(|id| change.added.iter().any(|added| added == *id))
            .count();
        let off_removed = lost
            .iter()
            .filter(|id| change.removed.iter().any(|removed| removed == *id))
            .count();
        // Rendezvous: a tenant loses a survivor only to an added shard,
        // and gains a survivor only in place of a removed one.
        if gained.len() - onto_added > off_removed || lost.len() - off_removed > onto_added {
            non_minimal += 1;
        }
    }
    (movement, non_minimal)
}
