//! The `blast` answer: overlap, failure scenarios, a sweep, wave exposure,
//! load and poison tenants, run step by step and shaped for `--json`.

use placement::Placer;
use serde::Serialize;

use super::load::LoadJson;
use super::poison::{PoisonJson, PoisonSweepJson};
use super::scenarios::{Scenario, ScenarioJson, SweepJson};
use super::steps::{Progress, place_all};
use super::waves::WaveJson;
use crate::blast::BlastModel;
use crate::combinatorics::binomial;
use crate::error::AnalysisError;
use crate::load;
use crate::overlap::{self, Overlap};
use crate::poison;
use crate::population::Population;
use crate::waves::{self, Waves};

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

/// How many tenants are named as dominating the hottest shard.
pub const TOP_TENANTS: usize = 5;

/// Answers `blast`: overlap, scenarios, sweep, waves, load and poison.
pub fn blast(
    placer: &Placer,
    population: &Population,
    mut query: BlastQuery,
    progress: &impl Progress,
) -> Result<Report, AnalysisError> {
    let placements = place_all(placer, population, progress);
    let model = progress.step("collapsing tenants to distinct subsets", |_| {
        BlastModel::new(&placements)
    })?;
    let pairwise_overlap = overlap_answer(placer, &model, progress);
    let tenants = model.tenants();
    let fraction = |count: u64| count as f64 / tenants.max(1) as f64;
    let scenarios = std::mem::take(&mut query.scenarios)
        .into_iter()
        .map(|scenario| {
            let impact = model.impact(&scenario.shards)?;
            Ok(ScenarioJson::new(scenario, impact, &fraction))
        })
        .collect::<Result<Vec<_>, AnalysisError>>()?;
    let sweep = match query.sweep {
        Some(failures) => Some(sweep_answer(&model, failures, &query, &fraction, progress)?),
        None => None,
    };
    let waves = query.waves.as_ref().map(|deploy_waves| {
        progress
            .step("measuring wave exposure", |_| {
                waves::exposure(&placements, deploy_waves)
            })
            .into_iter()
            .map(WaveJson::from)
            .collect()
    });
    let poison = poison_answers(placer, population, &model, &query, &fraction)?;
    let poison_sweep = query.poison_sweep.then(|| {
        let sweep = progress.step("ranking every tenant as a poison tenant", |_| {
            poison::sweep(&model, &placements, query.poison_after, query.poison_top)
        });
        PoisonSweepJson::new(sweep, population, &fraction)
    });
    let load = population.weights().is_some().then(|| {
        load::load(&placements, population, query.capacity, TOP_TENANTS).named(population)
    });
    Ok(Report {
        placed: PlacedJson::new(placer, tenants),
        pairwise_overlap,
        scenarios,
        sweep,
        waves,
        load,
        poison_after: query.poison_after,
        poison,
        poison_sweep,
    })
}

/// The exact pairwise overlap, and its expectation over the population's
/// subset sizes and the fleet's zones.
fn overlap_answer(placer: &Placer, model: &BlastModel, progress: &impl Progress) -> OverlapJson {
    let zone_sizes = overlap::zone_sizes(placer.fleet(), placer.config().zone_aware);
    let measured = progress.step("counting shared shards over every pair", |_| {
        overlap::exact(model)
    });
    let expected = overlap::expected_shared_counts_mixed(&zone_sizes, &model.subset_sizes());
    OverlapJson::new(measured, expected)
}

/// Every set of `failures` shards failed, or the query's seeded sample.
fn sweep_answer(
    model: &BlastModel,
    failures: usize,
    query: &BlastQuery,
    fraction: &dyn Fn(u64) -> f64,
    progress: &impl Progress,
) -> Result<SweepJson, AnalysisError> {
    let total = binomial(model.shards() as u64, failures as u64);
    let sets = total.min(u128::from(query.max_sets));
    let message = format!("failing {sets} sets of {failures} shards");
    let sweep = progress.step(&message, |report| {
        model.sweep(failures, query.max_sets, query.seed, report)
    })?;
    Ok(SweepJson::new(sweep, total, query.seed, fraction))
}

/// What each `--poison` tenant does, uncontained and, with
/// `--poison-after`, contained.
fn poison_answers(
    placer: &Placer,
    population: &Population,
    model: &BlastModel,
    query: &BlastQuery,
    fraction: &dyn Fn(u64) -> f64,
) -> Result<Vec<PoisonJson>, AnalysisError> {
    query
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
                fraction,
            ))
        })
        .collect()
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
