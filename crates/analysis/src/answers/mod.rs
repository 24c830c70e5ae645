//! The answers of `blast`, `plan` and `migrate` as serialisable data: what
//! the command line prints with `--json` and what the Python package
//! returns as dicts, built in one place so the two cannot drift apart.
//!
//! Field names are fixed by the issues that introduced each command; the
//! front ends only check their own input, report progress and, for text,
//! lay these structures out.

mod blast;
mod load;
mod migrate;
mod plan;
mod poison;
mod scenarios;
mod waves;

use placement::Placer;
use serde::Serialize;

use crate::error::AnalysisError;
use crate::placements::Placements;
use crate::population::Population;

pub use blast::{BlastQuery, OverlapJson, PlacedJson, Report, blast};
pub use load::{DominantJson, LoadJson};
pub use migrate::{
    ChangeJson, Comparison, MigrateReport, MigrationSpec, Side, migration, other_algorithm,
};
pub use plan::{PlanReport, plan};
pub use poison::{PoisonFigureJson, PoisonJson, PoisonSweepJson, RankedJson};
pub use scenarios::{FigureJson, Scenario, ScenarioJson, SweepJson, WorstJson};
pub use waves::{WaveJson, total_fully_exposed};

/// How many tenants are named as dominating the hottest shard.
pub const TOP_TENANTS: usize = 5;

/// Changed tenants a migration answer names.
pub const MIGRATION_SAMPLE: usize = 5;

/// Runs slow steps, so a front end can show progress: `message` names the
/// step and `work` reports `(done, total)` through the callback it is
/// handed, when it can.
pub trait Progress {
    /// Runs one step.
    fn step<T>(&self, message: &str, work: impl FnOnce(&(dyn Fn(u64, u64) + Sync)) -> T) -> T;

    /// Runs one step whose `(done, total)` are in units that mean nothing
    /// to a reader (a plan's thousandths of a candidate), so a front end
    /// shows a percentage rather than the counts.
    fn step_in_thousandths<T>(
        &self,
        message: &str,
        work: impl FnOnce(&(dyn Fn(u64, u64) + Sync)) -> T,
    ) -> T {
        self.step(message, work)
    }
}

/// Shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn step<T>(&self, _message: &str, work: impl FnOnce(&(dyn Fn(u64, u64) + Sync)) -> T) -> T {
        work(&|_, _| {})
    }
}

/// Places every tenant of `population`: the first step of each answer
/// about a placed population, labelled the same in all.
pub fn place_all(placer: &Placer, population: &Population, progress: &impl Progress) -> Placements {
    progress.step(&format!("placing {} tenants", population.len()), |report| {
        Placements::compute_with_progress(placer, population, report)
    })
}

/// Refuses a per-tenant `k` override for a tenant the population does not
/// have: it would change nothing analysed, and is almost always a typo.
/// Both front ends call this before any work, each naming its own option.
pub fn check_overrides(
    overrides: &[(String, u32)],
    population: &Population,
) -> Result<(), AnalysisError> {
    match overrides
        .iter()
        .find(|(tenant, _)| population.position(tenant).is_none())
    {
        Some((tenant, k)) => Err(AnalysisError::OverrideForAbsentTenant {
            tenant: tenant.clone(),
            k: *k,
            tenants: population.len(),
        }),
        None => Ok(()),
    }
}

/// A tenant count and its share of all tenants.
#[derive(Debug, Serialize)]
pub struct Count {
    /// Tenants.
    pub count: u64,
    /// Their share of all tenants.
    pub fraction: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use placement::Fleet;

    #[test]
    fn shared_refusals_name_what_was_wrong() {
        // Both front ends rely on these, so each must refuse on its own.
        let fleet = Fleet::uniform(8).unwrap();
        let error = Scenario::listed("3,4,3".into(), vec![3, 4, 3], &fleet).unwrap_err();
        assert!(matches!(&error, AnalysisError::ShardListedTwice { shard } if shard == "3"));
        assert!(Scenario::listed("3,4".into(), vec![3, 4], &fleet).is_ok());

        let population = Population::synthetic(10);
        let ghost = [("tenant-1".to_owned(), 3), ("ghost".to_owned(), 4)];
        let error = check_overrides(&ghost, &population).unwrap_err();
        assert!(error.to_string().contains("no tenant \"ghost\""), "{error}");
        assert!(check_overrides(&ghost[..1], &population).is_ok());
    }
}
