//! Migration diff: what a change of placement (fleet, `n`, `k`, key version
//! or algorithm) costs, tenant by tenant.
//!
//! Subsets are compared by shard *id*, the identity that survives a fleet
//! change, and as sets: a tenant whose members only changed order has not
//! moved. A member that is in the new subset but not the old one is one
//! "member moved": a shard that must take on (and, for stateful services,
//! copy in) that tenant.

use crate::placer::Placer;

/// How one tenant's subset changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantMove {
    /// The tenant.
    pub tenant: String,
    /// Shard ids the tenant gains, in the new selection order.
    pub added: Vec<String>,
    /// Shard ids the tenant loses, in the old selection order.
    pub removed: Vec<String>,
}

/// The cost of moving a population from one placement to another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationDiff {
    /// Tenants compared.
    pub tenants: u64,
    /// Tenants whose subset (as a set of shard ids) changed.
    pub changed: u64,
    /// Members gained across all tenants: the shard-tenant assignments that
    /// must be created.
    pub members_moved: u64,
    /// Members lost across all tenants.
    pub members_removed: u64,
    /// Every tenant that changed, in input order.
    pub moves: Vec<TenantMove>,
}

/// Compares one tenant's subsets; `None` when the set of shard ids is equal.
pub fn tenant_move(before: &Placer, after: &Placer, tenant: &str) -> Option<TenantMove> {
    let old = before.subset_ids(tenant);
    let new = after.subset_ids(tenant);
    let added: Vec<String> = new
        .iter()
        .filter(|id| !old.contains(id))
        .map(|id| id.to_string())
        .collect();
    let removed: Vec<String> = old
        .iter()
        .filter(|id| !new.contains(id))
        .map(|id| id.to_string())
        .collect();
    (!added.is_empty() || !removed.is_empty()).then(|| TenantMove {
        tenant: tenant.to_owned(),
        added,
        removed,
    })
}

/// Compares a whole population.
///
/// ```
/// use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer, migration};
///
/// let key = PlacementKey::from_bytes(b"doc".to_vec());
/// let config = PlacementConfig { algorithm: Algorithm::Rendezvous, k: 3, zone_aware: false };
/// let before = Placer::new(Fleet::uniform(20).unwrap(), &key, config).unwrap();
/// let after = Placer::new(Fleet::uniform(21).unwrap(), &key, config).unwrap();
/// let tenants: Vec<String> = (0..1000).map(|i| format!("tenant-{i}")).collect();
/// let diff = migration::diff(&before, &after, tenants.iter().map(String::as_str));
/// // Rendezvous moves one member per changed tenant, onto the new shard only.
/// assert_eq!(diff.members_moved, diff.changed);
/// assert!(diff.moves.iter().all(|m| m.added == ["20"]));
/// ```
pub fn diff<'t>(
    before: &Placer,
    after: &Placer,
    tenants: impl IntoIterator<Item = &'t str>,
) -> MigrationDiff {
    let mut result = MigrationDiff::default();
    for tenant in tenants {
        result.tenants += 1;
        if let Some(change) = tenant_move(before, after, tenant) {
            result.changed += 1;
            result.members_moved += change.added.len() as u64;
            result.members_removed += change.removed.len() as u64;
            result.moves.push(change);
        }
    }
    result
}
