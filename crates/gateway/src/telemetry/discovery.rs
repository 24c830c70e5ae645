//! Discovered cells as this replica sees them (`[[cells]] discovery`):
//! the `shuffle_discovery_*` families, registered with the rest by
//! [`super::metrics::Metrics::new`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::registered::Registered;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CellOutcome {
    cell: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CellLabel {
    cell: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CellState {
    cell: String,
    state: &'static str,
}

/// `shuffle_discovery_looks_total`, `shuffle_discovery_changes_total`,
/// `shuffle_discovery_tenants_moved_total` and `shuffle_discovery_members`.
#[derive(Debug)]
pub(crate) struct DiscoveryMetrics {
    looks: Family<CellOutcome, Counter>,
    changes: Family<CellOutcome, Counter>,
    moved: Family<CellLabel, Counter>,
    members: Family<CellState, Gauge>,
}

impl DiscoveryMetrics {
    pub(super) fn register(registry: &mut Registered) -> Self {
        let looks = Family::<CellOutcome, Counter>::default();
        registry.add_metric(
            "discovery_looks",
            "Looks at a discovered cell's source (a DNS refresh, a Kubernetes list or watch event) by outcome: answered, or failed (timeout, SERVFAIL, garbage, no records, the API unreachable: the last good membership stays)",
            looks.clone(),
        );
        let changes = Family::<CellOutcome, Counter>::default();
        registry.add_metric(
            "discovery_changes",
            "Membership changes of a discovered cell by outcome: applied; refused (the cell would be empty, more than discovery.max_removed_fraction of it missing at once, or tenants remapped beyond the shards added and removed: the last good membership stays)",
            changes.clone(),
        );
        let moved = Family::<CellLabel, Counter>::default();
        registry.add_metric(
            "discovery_tenants_moved",
            "Tenants whose subset a discovered cell's applied membership change moved (an added shard, or one removed after its grace)",
            moved.clone(),
        );
        let members = Family::<CellState, Gauge>::default();
        registry.add_metric(
            "discovery_members",
            "A discovered cell's placed shards by state: listed (its source lists it ready) or missing (down, still placed, until discovery.removal_grace_seconds pass)",
            members.clone(),
        );
        Self {
            looks,
            changes,
            moved,
            members,
        }
    }

    /// Counts one look at `cell`'s source.
    pub(crate) fn looked(&self, cell: &str, answered: bool) {
        let outcome = if answered { "answered" } else { "failed" };
        self.looks
            .get_or_create(&CellOutcome {
                cell: cell.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Counts one membership change of `cell`, applied or refused.
    pub(crate) fn changed(&self, cell: &str, applied: bool) {
        let outcome = if applied { "applied" } else { "refused" };
        self.changes
            .get_or_create(&CellOutcome {
                cell: cell.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Counts tenants an applied change of `cell` moved.
    pub(crate) fn moved(&self, cell: &str, tenants: u64) {
        self.moved
            .get_or_create(&CellLabel {
                cell: cell.to_owned(),
            })
            .inc_by(tenants);
    }

    /// Sets `cell`'s placed shards: `listed` and `missing`.
    pub(crate) fn members(&self, cell: &str, listed: usize, missing: usize) {
        for (state, count) in [("listed", listed), ("missing", missing)] {
            self.members
                .get_or_create(&CellState {
                    cell: cell.to_owned(),
                    state,
                })
                .set(count as i64);
        }
    }

    /// Creates `cell`'s series at zero, so a rate over them starts at once.
    pub(crate) fn know(&self, cell: &str) {
        for outcome in ["answered", "failed"] {
            let _ = self.looks.get_or_create(&CellOutcome {
                cell: cell.to_owned(),
                outcome,
            });
        }
        for outcome in ["applied", "refused"] {
            let _ = self.changes.get_or_create(&CellOutcome {
                cell: cell.to_owned(),
                outcome,
            });
        }
        let _ = self.moved.get_or_create(&CellLabel {
            cell: cell.to_owned(),
        });
    }
}
