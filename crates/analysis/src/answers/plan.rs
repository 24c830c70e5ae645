//! The `plan` answer: every candidate `k` measured against a budget, and
//! the overridden tenants whose poison alone breaks it.

use serde::Serialize;

use super::steps::{Progress, check_overrides};
use crate::error::AnalysisError;
use crate::plan::{self, Budget, Plan, PlanPlacement, PoisonWarning};
use crate::population::Population;

/// The `plan` answer with the fleet and population it was made for.
#[derive(Debug, Serialize)]
pub struct PlanReport {
    /// Shards in the fleet.
    pub shards: usize,
    /// Tenants planned for.
    pub tenants: usize,
    /// The algorithm's name.
    pub algorithm: &'static str,
    /// The rows, the recommendation and the verdict.
    #[serde(flatten)]
    pub plan: Plan,
    /// Overridden tenants whose poison alone exceeds the fully-down budget.
    pub poison_warnings: Vec<PoisonWarning>,
}

/// Answers `plan`: measures every candidate `k` against `budget`, and warns
/// about overridden tenants whose poison alone breaks it at the
/// recommended `k` (or, with no recommendation, the largest measured).
pub fn plan(
    placement: &PlanPlacement<'_>,
    population: &Population,
    budget: Budget,
    progress: &impl Progress,
) -> Result<PlanReport, AnalysisError> {
    check_overrides(placement.overrides, population)?;
    let message = format!(
        "measuring k = 1 to {} ({} tenants, every set of {} failed shards)",
        placement.fleet.len().min(plan::MAX_PLAN_K as usize),
        population.len(),
        budget.concurrent_failures
    );
    let measured = progress.step_in_thousandths(&message, |report| {
        plan::plan_with(placement, population, budget, report)
    })?;
    let poison_warnings = match measured
        .recommended
        .or(measured.rows.last().map(|row| row.k))
    {
        Some(k) => plan::poison_warnings(placement, population, budget, k)?,
        None => Vec::new(),
    };
    Ok(PlanReport {
        shards: placement.fleet.len(),
        tenants: population.len(),
        algorithm: placement.algorithm.name(),
        plan: measured,
        poison_warnings,
    })
}
