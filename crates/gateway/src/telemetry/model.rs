//! The standing blast-radius model (`[model]`): the `shuffle_model_*`
//! families, registered with the rest by [`super::metrics::Metrics::new`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::registered::Registered;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CellFailures {
    cell: String,
    failures: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Failures {
    failures: String,
}

/// `shuffle_model_worst_fully_down`, `shuffle_model_worst_degraded`,
/// `shuffle_model_max_fully_down`, `shuffle_model_seconds` and
/// `shuffle_model_timestamp_seconds`.
#[derive(Debug)]
pub(crate) struct ModelMetrics {
    worst_fully_down: Family<CellFailures, Gauge>,
    worst_degraded: Family<CellFailures, Gauge>,
    budget: Family<Failures, Gauge>,
    seconds: Gauge<f64, AtomicU64>,
    timestamp: Gauge<f64, AtomicU64>,
    /// Whether the last model was over its budget (so a crossing is logged
    /// once, not at every change).
    over: AtomicBool,
}

impl ModelMetrics {
    pub(super) fn register(registry: &mut Registered) -> Self {
        let worst_fully_down = Family::<CellFailures, Gauge>::default();
        registry.add_metric(
            "model_worst_fully_down",
            "The most tenants of the cell that any failure of `failures` of its shards takes fully down, over the population served now (the standing model: recomputed off the request path after every start, reload and tenant or membership change)",
            worst_fully_down.clone(),
        );
        let worst_degraded = Family::<CellFailures, Gauge>::default();
        registry.add_metric(
            "model_worst_degraded",
            "The most tenants of the cell that any failure of `failures` of its shards degrades (at least one member out), over the population served now",
            worst_degraded.clone(),
        );
        let budget = Family::<Failures, Gauge>::default();
        registry.add_metric(
            "model_max_fully_down",
            "The budget for shuffle_model_worst_fully_down at this failure size (model.max_fully_down_on_two_failures, for failures=\"2\"); absent without one",
            budget.clone(),
        );
        let seconds = Gauge::<f64, AtomicU64>::default();
        registry.add_metric(
            "model_seconds",
            "How long the last standing model took to build and sweep, in seconds (on a thread of its own, never on the request path)",
            seconds.clone(),
        );
        let timestamp = Gauge::<f64, AtomicU64>::default();
        registry.add_metric(
            "model_timestamp_seconds",
            "When the standing model was last brought up to date (Unix seconds; 0: not yet)",
            timestamp.clone(),
        );
        Self {
            worst_fully_down,
            worst_degraded,
            budget,
            seconds,
            timestamp,
            over: AtomicBool::new(false),
        }
    }

    /// Notes whether the model is over its budget now; whether it just
    /// crossed it.
    pub(crate) fn over_budget(&self, over: bool) -> bool {
        let was = self.over.swap(over, Ordering::Relaxed);
        over && !was
    }

    /// Sets one cell's worst counts at `failures`.
    pub(crate) fn worst(&self, cell: &str, failures: usize, fully_down: u64, degraded: u64) {
        let labels = CellFailures {
            cell: cell.to_owned(),
            failures: failures.to_string(),
        };
        self.worst_fully_down
            .get_or_create(&labels)
            .set(i64::try_from(fully_down).unwrap_or(i64::MAX));
        self.worst_degraded
            .get_or_create(&labels)
            .set(i64::try_from(degraded).unwrap_or(i64::MAX));
    }

    /// Forgets every cell's series (a cell or size that is gone must not
    /// keep its last value).
    pub(crate) fn clear(&self) {
        self.worst_fully_down.clear();
        self.worst_degraded.clear();
        self.budget.clear();
    }

    /// Sets the budget at `failures`.
    pub(crate) fn budget(&self, failures: usize, max_fully_down: u64) {
        self.budget
            .get_or_create(&Failures {
                failures: failures.to_string(),
            })
            .set(i64::try_from(max_fully_down).unwrap_or(i64::MAX));
    }

    /// Notes that the model was brought up to date, taking `seconds`.
    pub(crate) fn done(&self, seconds: f64) {
        self.seconds.set(seconds);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |since| since.as_secs_f64());
        self.timestamp.set(now);
    }
}
