//! Choosing `k` against a stated budget: for each candidate `k`, the worst
//! full outage under the declared number of concurrent failures, the widest
//! single-failure blip, the capacity a degraded tenant loses and the
//! overlap; then the smallest `k` that meets every budget, or why none does.
//!
//! Larger `k` makes a full outage rarer and a single-shard blip wider. The
//! budget says how much of each the operator accepts; this module only
//! measures and compares, it never guesses.

use placement::{
    Algorithm, Fleet, PlacementConfig, PlacementKey, Placer, ShardIndex, TenantOverride,
};
use serde::Serialize;

use crate::blast::{BlastModel, TrafficModel};
use crate::error::{AnalysisError, check_failures};
use crate::overlap;
use crate::placements::Placements;
use crate::population::Population;

/// The largest `k` a plan considers.
pub const MAX_PLAN_K: u32 = 8;

/// What the operator accepts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Budget {
    /// Largest fraction of tenants one shard failure may degrade.
    pub max_degraded: f64,
    /// Largest fraction of tenants that may be fully down when
    /// `concurrent_failures` shards fail together, in the worst case.
    pub max_fully_down: f64,
    /// How many shards may fail at once.
    pub concurrent_failures: usize,
}

/// The measurements for one `k`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanRow {
    /// Subset size.
    pub k: u32,
    /// Worst fully-down fraction over every set of `concurrent_failures`
    /// failed shards (`None` when the exact search was too large).
    pub worst_fully_down: Option<f64>,
    /// The failure set behind it.
    pub worst_failed: Vec<ShardIndex>,
    /// Worst degraded fraction over single-shard failures.
    pub degraded_one_failure: f64,
    /// Mean share of capacity a degraded tenant loses on one failure.
    pub capacity_lost: f64,
    /// Fraction of tenant pairs sharing at least one shard.
    pub overlap: f64,
    /// Whether this `k` meets every budget.
    pub meets_budget: bool,
    /// The same figures by share of traffic, for a weighted population
    /// (`None` without weights).
    pub traffic: Option<TrafficRow>,
}

/// A plan row's figures by share of traffic (tenant weights) rather than
/// by tenant count: a whale fully down weighs what it carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrafficRow {
    /// Worst share of traffic fully down over every set of
    /// `concurrent_failures` failed shards (`None` when the search was too
    /// large).
    pub worst_fully_down: Option<f64>,
    /// The failure set behind it.
    pub worst_failed: Vec<ShardIndex>,
    /// Widest share of traffic degraded by one failure.
    pub degraded_one_failure: f64,
    /// Whether this `k` meets every budget, read as shares of traffic.
    pub meets_budget: bool,
}

/// A table of candidate `k`s and the recommendation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The budget the plan was made against.
    pub budget: Budget,
    /// One row per `k`, ascending.
    pub rows: Vec<PlanRow>,
    /// The smallest `k` meeting every budget.
    pub recommended: Option<u32>,
    /// One sentence saying what was recommended, or which budget binds.
    pub verdict: String,
    /// For a weighted population: the smallest `k` meeting every budget
    /// read as shares of traffic.
    pub recommended_by_traffic: Option<u32>,
    /// For a weighted population: the verdict by share of traffic (`None`
    /// without weights).
    pub traffic_verdict: Option<String>,
}

/// Work (failure sets visited times the lookups or subsets each costs) the
/// exact worst-case search may do per `k` before giving up.
const SEARCH_BUDGET: u128 = 1_000_000_000;

/// Progress units per candidate `k`: [`plan_with`] reports in thousandths
/// of a candidate, so a bar moves while one `k`'s search runs.
pub const PROGRESS_PER_K: u64 = 1000;

/// Measures `k = 1 ..= min(n, 8)` and recommends one.
pub fn plan(
    fleet: &Fleet,
    key: &PlacementKey,
    algorithm: Algorithm,
    zone_aware: bool,
    population: &Population,
    budget: Budget,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Plan, AnalysisError> {
    let placement = PlanPlacement {
        fleet,
        key,
        algorithm,
        zone_aware,
        overrides: &[],
    };
    plan_with(&placement, population, budget, progress)
}

/// What a plan places with, besides the candidate `k`: the fleet, key,
/// algorithm, and the tenants whose `k` is fixed whatever the candidate.
#[derive(Debug, Clone, Copy)]
pub struct PlanPlacement<'a> {
    /// The fleet.
    pub fleet: &'a Fleet,
    /// The placement key.
    pub key: &'a PlacementKey,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Whether placement spreads subsets over zones.
    pub zone_aware: bool,
    /// Per-tenant `k` overrides (`--tenant-k`), applied at every candidate.
    pub overrides: &'a [(String, u32)],
}

impl PlanPlacement<'_> {
    /// The placer for candidate `k`, overrides included.
    fn placer(&self, k: u32) -> Result<Placer, AnalysisError> {
        let config = PlacementConfig {
            algorithm: self.algorithm,
            k,
            zone_aware: self.zone_aware,
        };
        let mut placer = Placer::new(self.fleet.clone(), self.key, config)?;
        for (tenant, k) in self.overrides {
            placer.set_override(tenant.clone(), TenantOverride::K(*k))?;
        }
        Ok(placer)
    }
}

/// A tenant override whose poison alone breaks the fully-down budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoisonWarning {
    /// The overridden tenant.
    pub tenant: String,
    /// Its own `k`.
    pub tenant_k: u32,
    /// The candidate `k` of everyone else the figures are for.
    pub k: u32,
    /// Other tenants its poison fully downs when its whole subset crashes.
    pub others_fully_down: u64,
    /// Their share of all tenants.
    pub fraction: f64,
    /// One sentence saying so, and what to do.
    pub message: String,
}

/// [`plan`] with per-tenant overrides applied to every candidate `k`.
///
/// `progress` is called with `(done, total)` in units of
/// [`PROGRESS_PER_K`] per candidate: placing and the worst-case search each
/// move it, so no candidate is a silent gap.
pub fn plan_with(
    placement: &PlanPlacement<'_>,
    population: &Population,
    budget: Budget,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Plan, AnalysisError> {
    let fleet = placement.fleet;
    check_failures(budget.concurrent_failures, fleet.len())?;
    let max_k = (fleet.len() as u32).min(MAX_PLAN_K);
    let tenants = population.len().max(1) as f64;
    let mut rows = Vec::new();
    let total = u64::from(max_k) * PROGRESS_PER_K;
    for k in 1..=max_k {
        let start = u64::from(k - 1) * PROGRESS_PER_K;
        // Thousandths of this candidate: placing 0–200, the search 200–900.
        let part = |from: u64, width: u64| {
            move |done: u64, of: u64| progress(start + from + width * done / of.max(1), total)
        };
        let placer = placement.placer(k)?;
        let placements = Placements::compute_with_progress(&placer, population, &part(0, 200));
        let model = BlastModel::new(&placements)?;
        let weighted = population.weights().is_some();
        let worst = model.worst_fully_down(
            budget.concurrent_failures,
            SEARCH_BUDGET,
            &part(200, if weighted { 400 } else { 700 }),
        )?;
        let traffic = if weighted {
            let traffic = TrafficModel::new(&model, &placements, population);
            let worst = traffic.worst_fully_down(
                budget.concurrent_failures,
                SEARCH_BUDGET,
                &part(600, 300),
            )?;
            let degraded_one_failure = traffic.widest_degraded_one_failure();
            let worst_fully_down = worst.as_ref().map(|(share, _)| *share);
            Some(TrafficRow {
                meets_budget: degraded_one_failure <= budget.max_degraded
                    && worst_fully_down.is_some_and(|share| share <= budget.max_fully_down),
                worst_fully_down,
                worst_failed: worst.map(|(_, set)| set).unwrap_or_default(),
                degraded_one_failure,
            })
        } else {
            None
        };
        let degraded =
            model.tenants_per_shard().iter().copied().max().unwrap_or(0) as f64 / tenants;
        let worst_fully_down = worst.as_ref().map(|(count, _)| *count as f64 / tenants);
        let meets_budget = degraded <= budget.max_degraded
            && worst_fully_down.is_some_and(|fraction| fraction <= budget.max_fully_down);
        rows.push(PlanRow {
            k,
            worst_fully_down,
            worst_failed: worst.map(|(_, set)| set).unwrap_or_default(),
            degraded_one_failure: degraded,
            capacity_lost: model.mean_single_failure_capacity_lost(),
            overlap: overlap::exact(&model).fraction,
            meets_budget,
            traffic,
        });
        progress(u64::from(k) * PROGRESS_PER_K, total);
    }
    let recommended = rows.iter().find(|row| row.meets_budget).map(|row| row.k);
    let by_count = verdict(&rows, budget, recommended, "tenants");
    // By traffic: the same verdict over the rows' traffic figures.
    let by_traffic = traffic_rows(&rows);
    let (recommended_by_traffic, traffic_verdict) = match by_traffic {
        Some(traffic_rows) if !traffic_rows.is_empty() => {
            let recommended = traffic_rows
                .iter()
                .find(|row| row.meets_budget)
                .map(|row| row.k);
            (
                recommended,
                Some(verdict(&traffic_rows, budget, recommended, "traffic")),
            )
        }
        _ => (None, None),
    };
    Ok(Plan {
        budget,
        rows,
        recommended,
        verdict: by_count,
        recommended_by_traffic,
        traffic_verdict,
    })
}

/// The overridden tenants whose poison (the whole subset crashed, as with
/// no containment in the gateway) fully downs more other tenants than the
/// fully-down budget allows, when everyone else has `k`.
///
/// A poison tenant's crashed set is its own subset, chosen by placement,
/// so a tenant with a large override takes down every tenant whose smaller
/// subset sits inside it, whatever the failure budget assumed. The tenant
/// itself is not counted against the budget.
pub fn poison_warnings(
    placement: &PlanPlacement<'_>,
    population: &Population,
    budget: Budget,
    k: u32,
) -> Result<Vec<PoisonWarning>, AnalysisError> {
    if placement.overrides.is_empty() {
        return Ok(Vec::new());
    }
    let placer = placement.placer(k)?;
    let placements = Placements::compute(&placer, population);
    let model = BlastModel::new(&placements)?;
    let tenants = population.len().max(1) as f64;
    let mut warnings = Vec::new();
    for (tenant, tenant_k) in placement.overrides {
        let subset = placer.subset(tenant);
        let figure = model.poison(&subset, None)?;
        let itself = population.position(tenant).is_some() && figure.downs_itself(subset.len());
        let others = figure.fully_down - u64::from(itself);
        let fraction = others as f64 / tenants;
        if fraction > budget.max_fully_down {
            warnings.push(PoisonWarning {
                message: format!(
                    "tenant {tenant} (k = {tenant_k} by override): if its requests crash shards, its {} shards fully down {others} other tenants ({:.3}%) at k = {k}, above the {:.3}% fully-down budget; lower its k, give it dedicated shards, or contain it in the gateway (routing.poison_after).",
                    subset.len(),
                    fraction * 100.0,
                    budget.max_fully_down * 100.0
                ),
                tenant: tenant.clone(),
                tenant_k: *tenant_k,
                k,
                others_fully_down: others,
                fraction,
            });
        }
    }
    Ok(warnings)
}

/// The plan's one-sentence verdict; `of` names what the shares are of
/// ("tenants" or "traffic").
fn verdict(rows: &[PlanRow], budget: Budget, recommended: Option<u32>, of: &str) -> String {
    let percent = |f: f64| format!("{:.3}%", f * 100.0);
    if let Some(k) = recommended {
        return format!(
            "k = {k} is the smallest k that keeps one failure under {} of {of} degraded and {} concurrent failures under {} fully down.",
            percent(budget.max_degraded),
            budget.concurrent_failures,
            percent(budget.max_fully_down)
        );
    }
    let degraded_ok: Vec<u32> = rows
        .iter()
        .filter(|r| r.degraded_one_failure <= budget.max_degraded)
        .map(|r| r.k)
        .collect();
    let down_ok: Vec<u32> = rows
        .iter()
        .filter(|r| {
            r.worst_fully_down
                .is_some_and(|f| f <= budget.max_fully_down)
        })
        .map(|r| r.k)
        .collect();
    let last = rows.last().map_or(0, |r| r.k);
    match (degraded_ok.last(), down_ok.first()) {
        (None, _) => format!(
            "No k meets the degraded budget: even k = 1 degrades {} of {of} on one failure, above {}; add shards or relax --max-degraded.",
            percent(rows.first().map_or(0.0, |r| r.degraded_one_failure)),
            percent(budget.max_degraded)
        ),
        (_, None) => format!(
            "No k up to {last} meets the fully-down budget: at k = {last}, {} concurrent failures can fully down {} of {of}, above {}; add shards or relax --max-fully-down.",
            budget.concurrent_failures,
            rows.last()
                .and_then(|r| r.worst_fully_down)
                .map_or("an unknown share".into(), percent),
            percent(budget.max_fully_down)
        ),
        (Some(&largest_degraded_ok), Some(&smallest_down_ok)) => format!(
            "The budgets conflict: the fully-down budget needs k ≥ {smallest_down_ok}, the degraded budget allows k ≤ {largest_degraded_ok}; add shards or relax one of them."
        ),
    }
}

/// The rows with their figures by share of traffic in place of those by
/// tenant count, when every row has them (a weighted population).
pub fn traffic_rows(rows: &[PlanRow]) -> Option<Vec<PlanRow>> {
    rows.iter()
        .map(|row| {
            let traffic = row.traffic.as_ref()?;
            Some(PlanRow {
                worst_fully_down: traffic.worst_fully_down,
                worst_failed: traffic.worst_failed.clone(),
                degraded_one_failure: traffic.degraded_one_failure,
                meets_budget: traffic.meets_budget,
                traffic: None,
                ..row.clone()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_moves_inside_every_candidate_and_ends_at_the_total() {
        // The bar must not sit still for a whole candidate: placing and the
        // worst-case search report as they go (from several threads, so two
        // reports may arrive out of order; never past the total).
        let seen = std::sync::Mutex::new(Vec::new());
        let fleet = Fleet::uniform(12).unwrap();
        let budget = Budget {
            max_degraded: 1.0,
            max_fully_down: 1.0,
            concurrent_failures: 9,
        };
        plan(
            &fleet,
            &PlacementKey::recipe_default(),
            Algorithm::HmacModulo,
            false,
            &Population::synthetic(20_000),
            budget,
            &|done, total| seen.lock().unwrap().push((done, total)),
        )
        .unwrap();
        let seen = seen.into_inner().unwrap();
        let total = 8 * PROGRESS_PER_K;
        assert!(seen.iter().all(|&(done, t)| t == total && done <= total));
        assert_eq!(seen.last(), Some(&(total, total)));
        for k in 0..8 {
            let inside = seen
                .iter()
                .filter(|&&(done, _)| done > k * PROGRESS_PER_K && done < (k + 1) * PROGRESS_PER_K)
                .count();
            assert!(
                inside >= 2,
                "candidate {} reported {inside} times inside",
                k + 1
            );
        }
    }

    #[test]
    fn a_whale_override_warns_when_its_poison_breaks_the_budget() {
        let fleet = Fleet::uniform(16).unwrap();
        let key = PlacementKey::recipe_default();
        let overrides = [("whale".to_owned(), 8)];
        let placement = PlanPlacement {
            fleet: &fleet,
            key: &key,
            algorithm: Algorithm::HmacModulo,
            zone_aware: false,
            overrides: &overrides,
        };
        let population = Population::synthetic(2000);
        let budget = Budget {
            max_degraded: 1.0,
            max_fully_down: 0.001,
            concurrent_failures: 2,
        };
        let warnings = poison_warnings(&placement, &population, budget, 2).unwrap();
        assert_eq!(warnings.len(), 1);
        let warning = &warnings[0];
        // The reference: tenants whose pair lies inside the whale's eight.
        let placer = placement.placer(2).unwrap();
        let whale = placer.subset("whale");
        let inside = (0..2000)
            .filter(|t| {
                placer
                    .subset(&format!("tenant-{t}"))
                    .iter()
                    .all(|s| whale.contains(s))
            })
            .count() as u64;
        assert_eq!(warning.others_fully_down, inside);
        assert!(inside > 2, "C(8,2)/C(16,2) of 2000 tenants is about 467");
        assert!(warning.message.contains("tenant whale (k = 8 by override)"));
        assert!(warning.message.contains("routing.poison_after"));

        // A budget its poison meets, or no override at all: no warning.
        let loose = Budget {
            max_fully_down: 0.5,
            ..budget
        };
        assert!(
            poison_warnings(&placement, &population, loose, 2)
                .unwrap()
                .is_empty()
        );
        let none = PlanPlacement {
            overrides: &[],
            ..placement
        };
        assert!(
            poison_warnings(&none, &population, budget, 2)
                .unwrap()
                .is_empty()
        );

        // The rows place the whale with its own k at every candidate.
        let plan = plan_with(&placement, &population, budget, &|_, _| {}).unwrap();
        assert_eq!(plan.rows.len(), 8);
    }
}
