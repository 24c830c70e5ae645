//! What a change of placement costs across a whole population, in parallel:
//! the share of tenants whose subset changes, how many members each gains
//! and how many each drops (a shrinking `k` only drops).
//!
//! Comparison is by shard id, as sets, through the placement crate's
//! [`tenant_move`](placement::migration::tenant_move), so "moved" means the
//! same here as everywhere else.

use std::sync::atomic::{AtomicU64, Ordering};

use placement::Placer;
use placement::migration::tenant_move;
use rayon::prelude::*;
use serde::Serialize;

use crate::population::Population;

/// The cost of moving a population between two placements.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigrationReport {
    /// Tenants compared.
    pub tenants: u64,
    /// Tenants whose subset changed.
    pub changed: u64,
    /// `changed / tenants`.
    pub changed_fraction: f64,
    /// Members gained over all tenants (shard-tenant assignments to create).
    pub members_moved: u64,
    /// Members dropped over all tenants (shard-tenant assignments to
    /// remove: where a tenant's state must be drained or deleted).
    pub members_dropped: u64,
    /// `moved_per_tenant[m]`: tenants that gained exactly `m` members.
    pub moved_per_tenant: Vec<u64>,
    /// Up to `sample` changed tenants (population positions), first first.
    pub changed_sample: Vec<usize>,
}

/// Compares `before` and `after` for every tenant of `population`.
pub fn migrate(
    before: &Placer,
    after: &Placer,
    population: &Population,
    sample: usize,
) -> MigrationReport {
    migrate_with_progress(before, after, population, sample, &|_, _| {})
}

/// Tenants compared between two progress reports.
const PROGRESS_EVERY: u64 = 1 << 14;

/// [`migrate`], calling `progress` with the tenants compared so far and the
/// total, every [`PROGRESS_EVERY`] tenants.
pub fn migrate_with_progress(
    before: &Placer,
    after: &Placer,
    population: &Population,
    sample: usize,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> MigrationReport {
    let tenants = population.len();
    let compared = AtomicU64::new(0);
    progress(0, tenants as u64);
    let moved: Vec<(u32, u32)> = (0..tenants)
        .into_par_iter()
        .map(|t| {
            let done = compared.fetch_add(1, Ordering::Relaxed) + 1;
            if done.is_multiple_of(PROGRESS_EVERY) || done == tenants as u64 {
                progress(done, tenants as u64);
            }
            let id = population.id(t);
            // Tenants that only lose members (k shrank) changed too; count
            // them with zero gains but keep them apart from the unchanged.
            match tenant_move(before, after, &id) {
                None => (u32::MAX, 0),
                Some(change) => (change.added.len() as u32, change.removed.len() as u32),
            }
        })
        .collect();
    let members_dropped = moved.iter().map(|&(_, dropped)| u64::from(dropped)).sum();
    let mut moved_per_tenant: Vec<u64> = Vec::new();
    let mut changed = 0u64;
    let mut members_moved = 0u64;
    let mut changed_sample = Vec::new();
    for (t, &(gained, _)) in moved.iter().enumerate() {
        let gained = if gained == u32::MAX {
            0
        } else {
            changed += 1;
            members_moved += u64::from(gained);
            if changed_sample.len() < sample {
                changed_sample.push(t);
            }
            gained as usize
        };
        if moved_per_tenant.len() <= gained {
            moved_per_tenant.resize(gained + 1, 0);
        }
        moved_per_tenant[gained] += 1;
    }
    MigrationReport {
        tenants: tenants as u64,
        changed,
        changed_fraction: if tenants == 0 {
            0.0
        } else {
            changed as f64 / tenants as f64
        },
        members_moved,
        members_dropped,
        moved_per_tenant,
        changed_sample,
    }
}

/// How a population depends on its old members during a lookback window
/// after a migration (the gateway's `reload.lookback_seconds`): a read
/// that lands on a member the tenant gained finds no data there until the
/// data is copied, and only an old member (or a kept one) has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LookbackReport {
    /// Tenants that keep none of their old members: every read needs an
    /// old member (through lookback) until their data is copied.
    pub fully_dependent: u64,
    /// Tenants that keep some of their old members and gain others: a
    /// read that lands on a gained member needs another member (a kept
    /// one, or an old one through lookback). A tenant that only loses
    /// members (a smaller `k` under rendezvous) depends on nobody: every
    /// member it keeps holds its data.
    pub partially_dependent: u64,
    /// The fully dependent tenants (population positions), in order.
    pub fully_dependent_tenants: Vec<usize>,
}

/// How each tenant of `population` depends on its members under
/// `before` when placed by `after` (by shard id, as sets).
pub fn lookback(before: &Placer, after: &Placer, population: &Population) -> LookbackReport {
    lookback_with_progress(before, after, population, &|_, _| {})
}

/// [`lookback`], calling `progress` with the tenants compared so far and
/// the total, every [`PROGRESS_EVERY`] tenants.
pub fn lookback_with_progress(
    before: &Placer,
    after: &Placer,
    population: &Population,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> LookbackReport {
    /// A tenant's dependence: none, partial or full.
    const NONE: u8 = 0;
    const PARTIAL: u8 = 1;
    const FULL: u8 = 2;
    let tenants = population.len();
    let compared = AtomicU64::new(0);
    progress(0, tenants as u64);
    let dependence: Vec<u8> = (0..tenants)
        .into_par_iter()
        .map(|t| {
            let done = compared.fetch_add(1, Ordering::Relaxed) + 1;
            if done.is_multiple_of(PROGRESS_EVERY) || done == tenants as u64 {
                progress(done, tenants as u64);
            }
            let id = population.id(t);
            let old = before.subset_ids(&id);
            let new = after.subset_ids(&id);
            let kept = new.iter().filter(|shard| old.contains(shard)).count();
            if kept == new.len() {
                NONE
            } else if kept == 0 {
                FULL
            } else {
                PARTIAL
            }
        })
        .collect();
    let fully_dependent_tenants: Vec<usize> = dependence
        .iter()
        .enumerate()
        .filter(|&(_, &d)| d == FULL)
        .map(|(t, _)| t)
        .collect();
    LookbackReport {
        fully_dependent: fully_dependent_tenants.len() as u64,
        partially_dependent: dependence.iter().filter(|&&d| d == PARTIAL).count() as u64,
        fully_dependent_tenants,
    }
}
