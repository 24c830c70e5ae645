//! Failure scenarios and sweeps: the sets `blast` is asked to fail, and
//! what each scenario and each sweep over a set size does.

use placement::{Fleet, ShardIndex};
use serde::Serialize;

use super::count::Count;
use crate::blast::{Impact, Sweep, SweepFigure};
use crate::error::AnalysisError;

/// A failure scenario before it is evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// How the scenario is shown: the shard list as given, or the zone.
    pub name: String,
    /// The zone, for a zone outage.
    pub zone: Option<String>,
    /// The failed shards.
    pub shards: Vec<ShardIndex>,
}

impl Scenario {
    /// A failure set as listed by the user, refused when it names a shard
    /// twice: a repeat is a typo, and the set would not fail what it says.
    pub fn listed(
        name: String,
        shards: Vec<ShardIndex>,
        fleet: &Fleet,
    ) -> Result<Scenario, AnalysisError> {
        for (position, shard) in shards.iter().enumerate() {
            if shards[..position].contains(shard) {
                return Err(AnalysisError::ShardListedTwice {
                    shard: fleet.shards()[*shard as usize].id.clone(),
                });
            }
        }
        Ok(Scenario {
            name,
            zone: None,
            shards,
        })
    }

    /// One outage per zone of the fleet, in fleet order.
    pub fn zone_outages(fleet: &Fleet) -> Result<Vec<Scenario>, AnalysisError> {
        if fleet.zones().is_empty() {
            return Err(AnalysisError::NoZones);
        }
        Ok(fleet
            .zones()
            .iter()
            .map(|zone| Scenario {
                name: format!("zone {} ({} shards)", zone.name, zone.members.len()),
                zone: Some(zone.name.clone()),
                shards: zone.members.clone(),
            })
            .collect())
    }
}

/// What one failure scenario does.
#[derive(Debug, Serialize)]
pub struct ScenarioJson {
    /// The shard list as given to `--fail`, or a zone's description.
    pub name: String,
    /// The failed zone, for a zone outage; `null` otherwise.
    pub zone: Option<String>,
    /// The failed shards, sorted, without repeats.
    pub failed: Vec<ShardIndex>,
    /// Tenants whose every shard failed.
    pub fully_down: Count,
    /// Tenants with at least one failed shard, not fully down.
    pub degraded: Count,
    /// The mean share of its shards a degraded tenant lost.
    pub capacity_lost: f64,
}

impl ScenarioJson {
    /// The answer for one evaluated scenario.
    pub fn new(plan: Scenario, impact: Impact, fraction: &dyn Fn(u64) -> f64) -> Self {
        Self {
            name: plan.name,
            zone: plan.zone,
            fully_down: Count {
                count: impact.fully_down,
                fraction: fraction(impact.fully_down),
            },
            degraded: Count {
                count: impact.degraded,
                fraction: fraction(impact.degraded),
            },
            capacity_lost: impact.capacity_lost,
            failed: impact.failed,
        }
    }
}

/// A sweep over failure sets of one size.
#[derive(Debug, Serialize)]
pub struct SweepJson {
    /// Shards in every failure set.
    pub failures: usize,
    /// Failure sets evaluated.
    pub sets: u64,
    /// Failure sets of this size in the fleet, C(n, failures) (saturating;
    /// text only).
    #[serde(skip)]
    pub total_sets: u128,
    /// Whether `sets` was a random sample of them.
    pub sampled: bool,
    /// The seed of the sample, when sampled (text only).
    #[serde(skip)]
    pub seed: Option<u64>,
    /// Fully-down tenants over the sets.
    pub fully_down: FigureJson,
    /// Degraded tenants over the sets.
    pub degraded: FigureJson,
}

impl SweepJson {
    /// The answer for one sweep.
    pub fn new(sweep: Sweep, total_sets: u128, seed: u64, fraction: &dyn Fn(u64) -> f64) -> Self {
        Self {
            failures: sweep.failures,
            sets: sweep.sets,
            total_sets,
            sampled: sweep.sampled,
            seed: sweep.sampled.then_some(seed),
            fully_down: FigureJson::new(sweep.fully_down, sweep.sampled, fraction),
            degraded: FigureJson::new(sweep.degraded, sweep.sampled, fraction),
        }
    }
}

/// One figure over a sweep; `mean`, `p50` and `p99` are fractions of all
/// tenants, like every other fraction in the report.
#[derive(Debug, Serialize)]
pub struct FigureJson {
    /// The worst failure set.
    pub worst: WorstJson,
    /// The mean, as a fraction of all tenants.
    pub mean: f64,
    /// The median, as a fraction of all tenants.
    pub p50: f64,
    /// The 99th percentile, as a fraction of all tenants.
    pub p99: f64,
}

/// The worst failure set of a sweep.
#[derive(Debug, Serialize)]
pub struct WorstJson {
    /// Tenants hit by it.
    pub count: u64,
    /// Their share of all tenants.
    pub fraction: f64,
    /// The first failure set that caused the worst count.
    pub failed: Vec<ShardIndex>,
    /// `"exact"` when every set was evaluated; `"lower bound"` for a
    /// sample, whose worst is only the worst of the sets drawn.
    pub bound: &'static str,
}

impl FigureJson {
    /// The answer for one figure; `sampled` makes its worst a lower bound.
    pub fn new(figure: SweepFigure, sampled: bool, fraction: &dyn Fn(u64) -> f64) -> Self {
        // The mean is a count too, just not a whole one.
        let mean = fraction(1) * figure.mean;
        Self {
            worst: WorstJson {
                count: figure.worst,
                fraction: fraction(figure.worst),
                failed: figure.worst_failed,
                bound: if sampled { "lower bound" } else { "exact" },
            },
            mean,
            p50: fraction(figure.p50),
            p99: fraction(figure.p99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_set_naming_a_shard_twice_is_refused_by_name() {
        // Both front ends rely on this, so it must refuse on its own.
        let fleet = Fleet::uniform(8).unwrap();
        let error = Scenario::listed("3,4,3".into(), vec![3, 4, 3], &fleet).unwrap_err();
        assert!(matches!(&error, AnalysisError::ShardListedTwice { shard } if shard == "3"));
        assert!(Scenario::listed("3,4".into(), vec![3, 4], &fleet).is_ok());
    }
}
