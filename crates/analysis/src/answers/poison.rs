//! Poison tenants in the `blast` answer: what each named one does, and the
//! worst of a whole population.

use placement::ShardIndex;
use serde::Serialize;

use super::count::Count;
use crate::poison::{PoisonFigure, PoisonSweep};
use crate::population::Population;

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
