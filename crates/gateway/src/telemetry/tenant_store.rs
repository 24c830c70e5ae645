//! The tenant store as this replica sees it (`[tenants] store`): the
//! `shuffle_tenant_*` families, registered with the rest by
//! [`super::metrics::Metrics::new`].

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::registered::Registered;

/// What became of a change to one tenant: applied here, refused here (its
/// row does not validate against this configuration, or its API key is
/// another tenant's), applied and moving the tenant to other shards, or
/// refused by an admin write because it would have moved the tenant.
pub(crate) const CHANGE_OUTCOMES: [&str; 4] = ["applied", "refused", "moved", "refused_migration"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// `shuffle_tenant_store_up`, `shuffle_tenant_store_last_sync_timestamp_seconds`,
/// `shuffle_tenant_changes_total` and `shuffle_tenants`.
#[derive(Debug)]
pub(crate) struct TenantStoreMetrics {
    /// 1 while the store answers (always 0 without a store).
    pub(crate) store_up: Gauge,
    /// When the registry was last brought up to date with the store.
    pub(crate) last_sync: Gauge<f64, AtomicU64>,
    /// Tenants in the registry served.
    pub(crate) tenants: Gauge,
    changes: [Counter; 4],
}

impl TenantStoreMetrics {
    pub(super) fn register(registry: &mut Registered) -> Self {
        let store_up = Gauge::default();
        registry.add_metric(
            "tenant_store_up",
            "1 while the tenant store ([tenants] store) answers; 0 while this replica serves the last registry it applied (always 0 without a store)",
            store_up.clone(),
        );
        let last_sync = Gauge::<f64, AtomicU64>::default();
        registry.add_metric(
            "tenant_store_last_sync_timestamp_seconds",
            "When this replica last brought its registry up to date with the tenant store (Unix seconds; 0: never since start): time() minus it is how stale the registry may be",
            last_sync.clone(),
        );
        let tenants = Gauge::default();
        registry.add_metric(
            "tenants",
            "Tenants in the registry this replica serves",
            tenants.clone(),
        );
        let family = Family::<OutcomeLabels, Counter>::default();
        registry.add_metric(
            "tenant_changes",
            "Changes to single tenants (tenant store rows, admin writes) by outcome: applied; refused (a row that does not validate here, or an API key another tenant holds: the tenant keeps what it had); moved (applied, and the tenant's subset changed); refused_migration (an admin write refused because it would move the tenant without allow_migration)",
            family.clone(),
        );
        let changes =
            CHANGE_OUTCOMES.map(|outcome| family.get_or_create(&OutcomeLabels { outcome }).clone());
        Self {
            store_up,
            last_sync,
            tenants,
            changes,
        }
    }

    /// Counts changes with one of [`CHANGE_OUTCOMES`].
    pub(crate) fn changed(&self, outcome: &str, count: u64) {
        let index = CHANGE_OUTCOMES
            .iter()
            .position(|known| *known == outcome)
            .unwrap_or(0);
        self.changes[index].inc_by(count);
    }
}
