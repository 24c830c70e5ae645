//! The standing blast-radius model: after every start, reload and tenant
//! or membership change, on the model's own thread, the worst single and
//! double shard failure (and `model.failures`, when set) over the
//! population served, as gauges an alert compares with the budget.

use std::sync::Arc;

use super::{Gateway, Snapshot};

impl Gateway {
    /// Sweeps `built`'s cells and, if `built` is still the snapshot served,
    /// publishes the worst counts (`began`: when its model began to build,
    /// so the cost stated covers placing every tenant too).
    pub(super) fn stand(&self, built: &Arc<Snapshot>, began: std::time::Instant) {
        let settings = built.config.model();
        let models = built.blast();
        let mut rows = Vec::new();
        for (cell, model) in built.config.cells.iter().zip(models) {
            for failures in settings.sizes() {
                if failures >= cell.shards.len() {
                    continue;
                }
                if let Some(worst) = model.worst(failures) {
                    rows.push((cell.name.as_str(), failures, worst));
                }
            }
        }
        if !Arc::ptr_eq(&self.snapshot(), built) {
            // A newer snapshot's model follows; this one speaks for nobody.
            return;
        }
        let metrics = &self.metrics.model;
        metrics.clear();
        let budget = settings.max_fully_down_on_two_failures;
        if let Some(budget) = budget {
            metrics.budget(2, budget);
        }
        let mut over = Vec::new();
        for (cell, failures, worst) in &rows {
            metrics.worst(cell, *failures, worst.fully_down, worst.degraded);
            if *failures == 2
                && let Some(budget) = budget
                && worst.fully_down > budget
            {
                over.push(format!("{cell}: {}", worst.fully_down));
            }
        }
        let seconds = began.elapsed().as_secs_f64();
        metrics.done(seconds);
        if metrics.over_budget(!over.is_empty()) {
            tracing::warn!(
                cells = %over.join(", "),
                budget = budget.unwrap_or(0),
                "standing model: the worst double shard failure takes more tenants fully down than model.max_fully_down_on_two_failures allows"
            );
        }
        tracing::debug!(
            tenants = built.tenants.len(),
            seconds,
            "standing model up to date"
        );
    }
}
