//! The answers of `blast`, `plan` and `migrate` as serialisable data: what
//! the command line prints with `--json` and what the Python package
//! returns as dicts, built in one place so the two cannot drift apart.
//!
//! Field names are fixed by the issues that introduced each command; the
//! front ends only check their own input, report progress and, for text,
//! lay these structures out.

use placement::{Algorithm, Fleet, Placer, ShardIndex};
use serde::Serialize;

use crate::blast::{BlastModel, Impact, Sweep, SweepFigure};
use crate::combinatorics::binomial;
use crate::error::AnalysisError;
use crate::load::{self, FailoverLoad, LoadReport};
use crate::migrate::{MigrationReport, migrate_with_progress};
use crate::overlap::{self, Overlap};
use crate::placements::Placements;
use crate::plan::{self, Budget, Plan, PlanPlacement, PoisonWarning};
use crate::poison::{self, PoisonFigure, PoisonSweep};
use crate::population::Population;
use crate::waves::{self, WaveExposure, Waves};

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

/// What `blast` is asked, its input already checked.
#[derive(Debug, Clone, Default)]
pub struct BlastQuery {
    /// Failure sets to evaluate (declared ones, then zone outages).
    pub scenarios: Vec<Scenario>,
    /// Evaluate every failure set of this many shards.
    pub sweep: Option<usize>,
    /// The most failure sets a sweep evaluates before it samples.
    pub max_sets: u64,
    /// The seed of a sampled sweep.
    pub seed: u64,
    /// Deployment waves to measure exposure to.
    pub waves: Option<Waves>,
    /// Poison tenants to evaluate.
    pub poison: Vec<String>,
    /// Rank every tenant as a poison tenant.
    pub poison_sweep: bool,
    /// How many of the worst poison tenants the sweep lists.
    pub poison_top: usize,
    /// The gateway's poison containment to model.
    pub poison_after: Option<usize>,
    /// Shard capacity, in the units of the tenant weights.
    pub capacity: Option<f64>,
}

/// Answers `blast`: overlap, scenarios, sweep, waves, load and poison.
pub fn blast(
    placer: &Placer,
    population: &Population,
    query: BlastQuery,
    progress: &impl Progress,
) -> Result<Report, AnalysisError> {
    let fleet = placer.fleet();
    let placements = place_all(placer, population, progress);
    let model = progress.step("collapsing tenants to distinct subsets", |_| {
        BlastModel::new(&placements)
    })?;
    let config = placer.config();
    let zone_sizes = overlap::zone_sizes(fleet, config.zone_aware);
    let measured = progress.step("counting shared shards over every pair", |_| {
        overlap::exact(&model)
    });
    let expected = overlap::expected_shared_counts_mixed(&zone_sizes, &model.subset_sizes());

    let tenants = model.tenants();
    let fraction = |count: u64| count as f64 / tenants.max(1) as f64;
    let scenarios = query
        .scenarios
        .into_iter()
        .map(|scenario| {
            let impact = model.impact(&scenario.shards)?;
            Ok(ScenarioJson::new(scenario, impact, &fraction))
        })
        .collect::<Result<Vec<_>, AnalysisError>>()?;
    let sweep = match query.sweep {
        Some(failures) => {
            let total = binomial(fleet.len() as u64, failures as u64);
            let sets = total.min(u128::from(query.max_sets));
            let message = format!("failing {sets} sets of {failures} shards");
            let sweep = progress.step(&message, |report| {
                model.sweep(failures, query.max_sets, query.seed, report)
            })?;
            Some(SweepJson::new(sweep, total, query.seed, &fraction))
        }
        None => None,
    };
    let waves = query.waves.map(|deploy_waves| {
        progress
            .step("measuring wave exposure", |_| {
                waves::exposure(&placements, &deploy_waves)
            })
            .into_iter()
            .map(WaveJson::from)
            .collect()
    });
    let poison = query
        .poison
        .iter()
        .map(|tenant| {
            let subset = placer.subset(tenant);
            let in_population = population.position(tenant).is_some();
            let uncontained = model.poison(&subset, None)?;
            let contained = query
                .poison_after
                .map(|after| model.poison(&subset, Some(after)))
                .transpose()?;
            Ok(PoisonJson::new(
                tenant.clone(),
                in_population,
                subset,
                uncontained,
                contained,
                &fraction,
            ))
        })
        .collect::<Result<Vec<_>, AnalysisError>>()?;
    let poison_sweep = query.poison_sweep.then(|| {
        let sweep = progress.step("ranking every tenant as a poison tenant", |_| {
            poison::sweep(&model, &placements, query.poison_after, query.poison_top)
        });
        PoisonSweepJson::new(sweep, population, &fraction)
    });
    let load = population.weights().is_some().then(|| {
        LoadJson::new(
            load::load(&placements, population, query.capacity, TOP_TENANTS),
            query.capacity,
            population,
        )
    });
    Ok(Report {
        placed: PlacedJson::new(placer, tenants),
        pairwise_overlap: OverlapJson::new(measured, expected),
        scenarios,
        sweep,
        waves,
        load,
        poison_after: query.poison_after,
        poison,
        poison_sweep,
    })
}

/// The whole `blast` answer, in the field names the issue fixes for `--json`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// What was placed.
    #[serde(flatten)]
    pub placed: PlacedJson,
    /// The exact pairwise overlap and its expectation.
    pub pairwise_overlap: OverlapJson,
    /// One entry per failure scenario.
    pub scenarios: Vec<ScenarioJson>,
    /// The sweep, if one was asked for; `null` otherwise.
    pub sweep: Option<SweepJson>,
    /// Per-wave exposure, for `--waves`; `null` otherwise.
    pub waves: Option<Vec<WaveJson>>,
    /// Per-shard load, for a weighted population; `null` otherwise.
    pub load: Option<LoadJson>,
    /// The `--poison-after` given, if any (text only: each entry carries
    /// its contained figure).
    #[serde(skip)]
    pub poison_after: Option<usize>,
    /// One entry per `--poison` tenant; empty without `--poison`.
    pub poison: Vec<PoisonJson>,
    /// The worst poison tenants, for `--poison-sweep`; `null` otherwise.
    pub poison_sweep: Option<PoisonSweepJson>,
}

/// What one poison tenant does: its whole subset crashed, and (with
/// `--poison-after`) the worst contained case.
#[derive(Debug, Serialize)]
pub struct PoisonJson {
    /// The poison tenant.
    pub tenant: String,
    /// Whether the tenant is in the analysed population (if not, it is not
    /// among its own fully down).
    pub in_population: bool,
    /// Its subset size.
    pub k: usize,
    /// Its shards (indices, ascending).
    pub subset: Vec<ShardIndex>,
    /// Its whole subset crashed.
    pub uncontained: PoisonFigureJson,
    /// With `--poison-after`; `null` otherwise.
    pub contained: Option<PoisonFigureJson>,
}

/// What one poison tenant's crashed shards do to the population.
#[derive(Debug, Serialize)]
pub struct PoisonFigureJson {
    /// The crashed shards (indices); empty when the figures are bounds.
    pub crashed: Vec<ShardIndex>,
    /// Tenants whose subset lies inside the crashed shards.
    pub fully_down: Count,
    /// The same without the poison tenant itself.
    pub others_fully_down: u64,
    /// Tenants sharing a crashed shard, not fully down.
    pub degraded: Count,
    /// False when the figures are upper bounds (too many choices of
    /// crashed members to enumerate).
    pub exact: bool,
}

impl PoisonFigureJson {
    /// The figure as reported, with the poison tenant itself told apart.
    pub fn new(
        figure: PoisonFigure,
        in_population: bool,
        k: usize,
        fraction: &dyn Fn(u64) -> f64,
    ) -> Self {
        let itself = u64::from(in_population && figure.downs_itself(k));
        Self {
            fully_down: Count {
                count: figure.fully_down,
                fraction: fraction(figure.fully_down),
            },
            others_fully_down: figure.fully_down - itself,
            degraded: Count {
                count: figure.degraded,
                fraction: fraction(figure.degraded),
            },
            exact: figure.exact,
            crashed: figure.crashed,
        }
    }
}

impl PoisonJson {
    /// One poison tenant's answer; `subset` is sorted here.
    pub fn new(
        tenant: String,
        in_population: bool,
        subset: Vec<ShardIndex>,
        uncontained: PoisonFigure,
        contained: Option<PoisonFigure>,
        fraction: &dyn Fn(u64) -> f64,
    ) -> Self {
        let mut subset = subset;
        subset.sort_unstable();
        let k = subset.len();
        Self {
            tenant,
            in_population,
            k,
            subset,
            uncontained: PoisonFigureJson::new(uncontained, in_population, k, fraction),
            contained: contained.map(|f| PoisonFigureJson::new(f, in_population, k, fraction)),
        }
    }
}

/// The worst poison tenants of a population.
#[derive(Debug, Serialize)]
pub struct PoisonSweepJson {
    /// The containment the ranking assumes (`null`: none).
    pub poison_after: Option<usize>,
    /// Tenants ranked.
    pub tenants: u64,
    /// Their distinct subsets.
    pub distinct_subsets: usize,
    /// Tenants whose poison fully downs at least one other tenant.
    pub downing_others: Count,
    /// Whether every figure is exact.
    pub exact: bool,
    /// The worst poison tenants, worst first; each figure is the ranked
    /// one (contained with `--poison-after`, else uncontained).
    pub worst: Vec<RankedJson>,
}

/// One ranked poison tenant.
#[derive(Debug, Serialize)]
pub struct RankedJson {
    /// The tenant.
    pub tenant: String,
    /// Its subset size.
    pub k: usize,
    /// Its shards (indices, ascending).
    pub subset: Vec<ShardIndex>,
    /// The figure it was ranked by.
    #[serde(flatten)]
    pub figure: PoisonFigureJson,
}

impl PoisonSweepJson {
    /// Names the ranked tenants.
    pub fn new(sweep: PoisonSweep, population: &Population, fraction: &dyn Fn(u64) -> f64) -> Self {
        Self {
            poison_after: sweep.poison_after,
            tenants: sweep.tenants,
            distinct_subsets: sweep.distinct_subsets,
            downing_others: Count {
                count: sweep.downing_others,
                fraction: fraction(sweep.downing_others),
            },
            exact: sweep.exact,
            worst: sweep
                .worst
                .into_iter()
                .map(|ranked| RankedJson {
                    tenant: population.id(ranked.tenant).into_owned(),
                    k: ranked.subset.len(),
                    figure: PoisonFigureJson::new(
                        ranked.figure,
                        true,
                        ranked.subset.len(),
                        fraction,
                    ),
                    subset: ranked.subset,
                })
                .collect(),
        }
    }
}

/// The exact pairwise overlap next to its expectation.
#[derive(Debug, Serialize)]
pub struct OverlapJson {
    /// Fraction of tenant pairs sharing at least one shard.
    pub fraction: f64,
    /// `shared_counts[j]`: fraction of pairs sharing exactly `j` shards.
    pub shared_counts: Vec<f64>,
    /// The same under independent uniform placement, each tenant with its
    /// own subset size (per-tenant k), over any number of zones.
    pub expected_shared_counts: Option<Vec<f64>>,
}

impl OverlapJson {
    /// Pairs the measurement with the expectation.
    pub fn new(measured: Overlap, expected: Option<Vec<f64>>) -> Self {
        Self {
            fraction: measured.fraction,
            shared_counts: measured.shared_counts,
            expected_shared_counts: expected,
        }
    }
}

/// What was placed: the fields that open the `--json` of both `blast` and
/// `plan-waves`, flattened into each report so the JSON stays flat.
#[derive(Debug, Serialize)]
pub struct PlacedJson {
    /// Shards in the fleet.
    pub shards: usize,
    /// The default subset size.
    pub k: u32,
    /// Tenants placed.
    pub tenants: u64,
    /// The algorithm's name.
    pub algorithm: &'static str,
}

impl PlacedJson {
    /// What `placer` placed for `tenants` tenants.
    pub fn new(placer: &Placer, tenants: u64) -> Self {
        let config = placer.config();
        Self {
            shards: placer.fleet().len(),
            k: config.k,
            tenants,
            algorithm: config.algorithm.name(),
        }
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

/// What a bad deploy to one wave exposes.
#[derive(Debug, Serialize)]
pub struct WaveJson {
    /// The wave's name, as in the waves file.
    pub wave: String,
    /// Its shards, ascending.
    pub shards: Vec<ShardIndex>,
    /// Tenants with every shard in this wave: a bad deploy here takes them
    /// fully down.
    pub fully_exposed: Count,
    /// Tenants with at least one shard in this wave.
    pub touched: Count,
}

impl From<WaveExposure> for WaveJson {
    fn from(exposure: WaveExposure) -> Self {
        Self {
            wave: exposure.wave,
            shards: exposure.shards,
            fully_exposed: Count {
                count: exposure.fully_exposed,
                fraction: exposure.fully_exposed_fraction,
            },
            touched: Count {
                count: exposure.touched,
                fraction: exposure.touched_fraction,
            },
        }
    }
}

/// Tenants fully exposed to some wave. A tenant inside one wave is inside
/// no other, so the per-wave counts add up without double counting.
pub fn total_fully_exposed(waves: &[WaveJson], tenants: u64) -> Count {
    let count = waves.iter().map(|wave| wave.fully_exposed.count).sum();
    Count {
        count,
        fraction: count as f64 / tenants.max(1) as f64,
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

/// Where a weighted population's load lands.
#[derive(Debug, Serialize)]
pub struct LoadJson {
    /// The `--capacity` given, if any.
    pub capacity: Option<f64>,
    /// Load per shard, by index: each tenant's weight split evenly over its
    /// shards.
    pub per_shard: Vec<f64>,
    /// The mean per-shard load.
    pub mean: f64,
    /// Coefficient of variation of the per-shard load.
    pub cv: f64,
    /// The hottest shard's load over the mean.
    pub max_over_mean: f64,
    /// The hottest shard (index).
    pub hottest: ShardIndex,
    /// Shards (indices) over the capacity.
    pub over_capacity: Vec<ShardIndex>,
    /// For each single-shard failure, the hottest surviving shard once the
    /// failed shard's tenants spread over their other shards.
    pub failover: Vec<FailoverLoad>,
    /// The tenants carrying most of the hottest shard's load, heaviest
    /// first.
    pub dominant: Vec<DominantJson>,
}

/// A tenant carrying part of the hottest shard's load.
#[derive(Debug, Serialize)]
pub struct DominantJson {
    /// The tenant.
    pub tenant: String,
    /// The tenant's load on the hottest shard.
    pub load: f64,
    /// Its share of that shard's load.
    pub share: f64,
}

impl LoadJson {
    /// Names the dominant tenants.
    pub fn new(report: LoadReport, capacity: Option<f64>, population: &Population) -> Self {
        Self {
            capacity,
            dominant: report
                .dominant
                .iter()
                .map(|contributor| DominantJson {
                    tenant: population.id(contributor.tenant).into_owned(),
                    load: contributor.load,
                    share: contributor.share,
                })
                .collect(),
            per_shard: report.per_shard,
            mean: report.mean,
            cv: report.cv,
            max_over_mean: report.max_over_mean,
            hottest: report.hottest,
            over_capacity: report.over_capacity,
            failover: report.failover,
        }
    }
}

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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
