//! The `migrate` answer: what a change of placement costs, and the same
//! change under the other algorithm.

use placement::{Algorithm, Placer};
use serde::Serialize;

use super::steps::Progress;
use crate::migrate::{MigrationReport, lookback_with_progress, migrate_with_progress};
use crate::population::Population;

/// Changed tenants a migration answer names.
pub const MIGRATION_SAMPLE: usize = 5;

/// One side of a migration: the placement a `--from` or `--to` SPEC names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MigrationSpec {
    /// Shards in the fleet (the zone total when zones are given).
    pub shards: Option<u32>,
    /// The subset size.
    pub k: u32,
    /// The algorithm.
    #[serde(serialize_with = "algorithm_name")]
    pub algorithm: Algorithm,
    /// The key version.
    pub key: String,
    /// The zone spec, for a zone-aware placement.
    pub zones: Option<String>,
}

fn algorithm_name<S: serde::Serializer>(
    algorithm: &Algorithm,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(algorithm.name())
}

impl std::fmt::Display for MigrationSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(shards) = self.shards {
            write!(f, "shards={shards} ")?;
        }
        write!(
            f,
            "k={} algorithm={} key={}",
            self.k, self.algorithm, self.key
        )?;
        if let Some(zones) = &self.zones {
            write!(f, " zones={zones}")?;
        }
        Ok(())
    }
}

/// The algorithm a migration is compared under: the other one.
pub fn other_algorithm(algorithm: Algorithm) -> Algorithm {
    match algorithm {
        Algorithm::HmacModulo => Algorithm::Rendezvous,
        Algorithm::Rendezvous => Algorithm::HmacModulo,
    }
}

/// One side of a migration answer: a spec and the placer it describes.
pub type Side<'a> = (&'a MigrationSpec, &'a Placer);

/// The whole `migrate` answer.
#[derive(Debug, Serialize)]
pub struct MigrateReport {
    /// Tenants compared.
    pub tenants: u64,
    /// The placement today, its shard count filled in.
    pub from: MigrationSpec,
    /// The placement after the change, its shard count filled in.
    pub to: MigrationSpec,
    /// What the change costs.
    #[serde(flatten)]
    pub change: ChangeJson,
    /// The same change with both sides on the other algorithm; `null` when
    /// the change is itself a change of algorithm.
    pub comparison: Option<Comparison>,
    /// Who depends on old members during a lookback window, when asked
    /// for (`migrate --lookback`); left out otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookback: Option<LookbackJson>,
}

/// Who depends on their old members during a lookback window after the
/// change (the gateway's `reload.lookback_seconds`).
#[derive(Debug, Serialize)]
pub struct LookbackJson {
    /// Tenants that keep none of their old members: every read needs one
    /// of them until the data is copied.
    pub fully_dependent: u64,
    /// Their share of all tenants.
    pub fully_dependent_fraction: f64,
    /// Tenants that keep some old members and gain others: a read that
    /// lands on a gained member needs another.
    pub partially_dependent: u64,
    /// Their share of all tenants.
    pub partially_dependent_fraction: f64,
    /// Every fully dependent tenant, by id, in population order.
    pub fully_dependent_tenants: Vec<String>,
}

/// Answers `migrate --lookback`: who depends on old members when the
/// population moves from `before` to `after`.
pub fn lookback(
    before: &Placer,
    after: &Placer,
    population: &Population,
    progress: &impl Progress,
) -> LookbackJson {
    let message = format!(
        "finding who depends on old members, of {} tenants",
        population.len()
    );
    let report = progress.step(&message, |report| {
        lookback_with_progress(before, after, population, report)
    });
    let share = |count: u64| count as f64 / population.len().max(1) as f64;
    LookbackJson {
        fully_dependent: report.fully_dependent,
        fully_dependent_fraction: share(report.fully_dependent),
        partially_dependent: report.partially_dependent,
        partially_dependent_fraction: share(report.partially_dependent),
        fully_dependent_tenants: report
            .fully_dependent_tenants
            .iter()
            .map(|&t| population.id(t).into_owned())
            .collect(),
    }
}

/// What one change costs.
#[derive(Debug, Serialize)]
pub struct ChangeJson {
    /// Tenants whose subset changed.
    pub changed: u64,
    /// Their share of all tenants.
    pub changed_fraction: f64,
    /// Shard-tenant assignments to create.
    pub members_moved: u64,
    /// Shard-tenant assignments to remove (a shrinking k only removes).
    pub members_dropped: u64,
    /// `moved_per_tenant[m]`: tenants that gained exactly `m` members (the
    /// unchanged count at 0).
    pub moved_per_tenant: Vec<u64>,
    /// A few changed tenants, by id.
    pub changed_sample: Vec<String>,
}

impl ChangeJson {
    /// Names the sampled tenants.
    pub fn new(report: MigrationReport, population: &Population) -> Self {
        Self {
            changed: report.changed,
            changed_fraction: report.changed_fraction,
            members_moved: report.members_moved,
            members_dropped: report.members_dropped,
            moved_per_tenant: report.moved_per_tenant,
            changed_sample: report
                .changed_sample
                .iter()
                .map(|&t| population.id(t).into_owned())
                .collect(),
        }
    }
}

/// The same change under the other algorithm.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// The other algorithm's name.
    pub algorithm: &'static str,
    /// What the change costs under it.
    #[serde(flatten)]
    pub change: ChangeJson,
}

/// Answers `migrate`. `flipped` is the same two sides built under the
/// other algorithm, `None` when the change is itself one of algorithm.
pub fn migration(
    from: Side<'_>,
    to: Side<'_>,
    flipped: Option<(&Placer, &Placer)>,
    population: &Population,
    progress: &impl Progress,
) -> MigrateReport {
    let message = format!("comparing {} tenants", population.len());
    let ((from_spec, before), (to_spec, after)) = (from, to);
    let change = progress.step(&message, |report| {
        migrate_with_progress(before, after, population, MIGRATION_SAMPLE, report)
    });
    let comparison = flipped.map(|(before, after)| {
        let report = progress.step(&message, |report| {
            migrate_with_progress(before, after, population, MIGRATION_SAMPLE, report)
        });
        Comparison {
            algorithm: other_algorithm(from_spec.algorithm).name(),
            change: ChangeJson::new(report, population),
        }
    });
    MigrateReport {
        tenants: change.tenants,
        from: MigrationSpec {
            shards: Some(before.fleet().len() as u32),
            ..from_spec.clone()
        },
        to: MigrationSpec {
            shards: Some(after.fleet().len() as u32),
            ..to_spec.clone()
        },
        change: ChangeJson::new(change, population),
        comparison,
        lookback: None,
    }
}
