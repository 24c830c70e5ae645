//! The fleet store's health as this replica sees it (`[fleet]`): the
//! `shuffle_fleet_*` families, registered with the rest by
//! [`super::metrics::Metrics::new`].

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::registered::Registered;

/// What a replica did on its own because the fleet's store gave no
/// answer: a strike judged by its own strikes, a mark or clear applied
/// here only (written back later), a look for changes missed.
pub(crate) const FLEET_OPERATIONS: [&str; 6] =
    ["strike", "consult", "withdraw", "mark", "clear", "sync"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

/// `shuffle_fleet_store_up` and `shuffle_fleet_fallbacks_total`.
#[derive(Debug)]
pub(crate) struct FleetMetrics {
    /// 1 while the store answers, 0 while this replica acts alone (and
    /// always 0 without `[fleet]`).
    pub(crate) store_up: Gauge,
    fallbacks: [Counter; 6],
}

impl FleetMetrics {
    pub(super) fn register(registry: &mut Registered) -> Self {
        let store_up = Gauge::default();
        registry.add_metric(
            "fleet_store_up",
            "1 while the fleet's shared store ([fleet] store) answers; 0 while this replica keeps containment and marks on its own (always 0 without [fleet])",
            store_up.clone(),
        );
        let family = Family::<OperationLabels, Counter>::default();
        registry.add_metric(
            "fleet_fallbacks",
            "Operations this replica did on its own because the fleet store gave no answer within fleet.timeout_ms: strike and consult (judged by its own strikes), withdraw, mark and clear (applied here, written back when the store returns), sync (a look for other replicas' changes missed)",
            family.clone(),
        );
        let fallbacks = FLEET_OPERATIONS
            .map(|operation| family.get_or_create(&OperationLabels { operation }).clone());
        Self {
            store_up,
            fallbacks,
        }
    }

    /// Counts one of [`FLEET_OPERATIONS`] done alone.
    pub(crate) fn fallback(&self, operation: &str) {
        let index = FLEET_OPERATIONS
            .iter()
            .position(|known| *known == operation)
            .unwrap_or(0);
        self.fallbacks[index].inc();
    }
}
