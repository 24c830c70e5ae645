//! How the answers run: progress for slow steps, the first step they share
//! (placing every tenant) and the refusal both front ends make before any
//! work (a `k` override for a tenant the population lacks).

use placement::Placer;

use crate::error::AnalysisError;
use crate::placements::Placements;
use crate::population::Population;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_for_an_absent_tenant_is_refused_by_name() {
        // Both front ends rely on this, so it must refuse on its own.
        let population = Population::synthetic(10);
        let ghost = [("tenant-1".to_owned(), 3), ("ghost".to_owned(), 4)];
        let error = check_overrides(&ghost, &population).unwrap_err();
        assert!(error.to_string().contains("no tenant \"ghost\""), "{error}");
        assert!(check_overrides(&ghost[..1], &population).is_ok());
    }
}
