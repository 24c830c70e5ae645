//! The poison tenant: a tenant whose requests crash the shards that serve
//! them. Without containment the router retries a crashed request on the
//! next member of the subset until every member has crashed, so the poison
//! tenant's whole subset fails at once: its blast radius is a failure set
//! chosen by placement, not by chance.
//!
//! - *fully down*: tenants whose subset lies inside the crashed set (the
//!   poison tenant itself included, when it is in the population);
//! - *degraded*: tenants sharing at least one crashed shard, not fully down.
//!
//! With containment (the gateway's `routing.poison_after = a`) a poison
//! tenant crashes at most `a` members, and which ones depends on the order
//! its requests try them, so the model reports the worst case over every
//! choice of `a` members of the subset. That is exact while the choices
//! number at most [`MAX_CHOICES`]; beyond it the figures are upper bounds
//! (see [`BlastModel::poison`]).
//!
//! [`sweep`] ranks every tenant of a population as a poison tenant. Tenants
//! with the same subset do the same harm, so each distinct subset is
//! evaluated once (by the same table lookups as [`BlastModel::impact`]) and
//! tenants only look their subset's figure up: a million tenants cost about
//! as much as their distinct subsets.

use std::cmp::Reverse;

use placement::ShardIndex;
use rayon::prelude::*;
use serde::Serialize;

use crate::blast::BlastModel;
use crate::combinatorics::{binomial, for_each_combination};
use crate::error::AnalysisError;
use crate::placements::Placements;

/// The most choices of crashed members the contained worst case enumerates
/// per subset; above it the figures are bounds. C(12, 6) = 924 and
/// C(16, 2) = 120 are well inside, so every realistic subset is exact.
pub const MAX_CHOICES: u128 = 4096;

/// What one poison tenant does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoisonFigure {
    /// The crashed shards (sorted): the whole subset without containment,
    /// the worst choice of members with it; empty when the figures are
    /// bounds and no single choice stands behind them.
    pub crashed: Vec<ShardIndex>,
    /// Tenants whose subset lies inside the crashed shards.
    pub fully_down: u64,
    /// Tenants sharing at least one crashed shard, not fully down.
    pub degraded: u64,
    /// Whether the figures are exact (false: upper bounds, see
    /// [`BlastModel::poison`]).
    pub exact: bool,
}

impl PoisonFigure {
    /// Whether the poison tenant's own subset crashed whole, so that it is
    /// among its own fully down.
    pub fn downs_itself(&self, subset_len: usize) -> bool {
        self.exact && self.crashed.len() == subset_len
    }
}

/// One tenant ranked by its poison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankedPoison {
    /// The tenant's index in the population.
    pub tenant: usize,
    /// Its subset (sorted).
    pub subset: Vec<ShardIndex>,
    /// What its poison does.
    pub figure: PoisonFigure,
    /// Its fully down without itself: the bystanders it takes down.
    pub others_fully_down: u64,
}

/// Every tenant of a population as a poison tenant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoisonSweep {
    /// The containment assumed (`None`: the whole subset crashes).
    pub poison_after: Option<usize>,
    /// Tenants evaluated.
    pub tenants: u64,
    /// Distinct subsets among them (each evaluated once).
    pub distinct_subsets: usize,
    /// Tenants whose poison fully downs at least one other tenant.
    pub downing_others: u64,
    /// Whether every figure is exact.
    pub exact: bool,
    /// The worst poison tenants, worst first: by fully down, then degraded,
    /// then tenant order.
    pub worst: Vec<RankedPoison>,
}

impl BlastModel {
    /// The blast radius of a poison tenant with `subset` (shard indices, in
    /// any order). `poison_after` is the containment: `None` or `Some(0)`
    /// crashes the whole subset; `Some(a)` crashes `a` members (all of them
    /// when `a` ≥ k), and the figure is the worst over every choice of them
    /// (by fully down, then degraded; the first in lexicographic order on a
    /// tie).
    ///
    /// When the choices number more than [`MAX_CHOICES`], the figure is an
    /// upper bound, marked `exact: false` with no `crashed` set: fully down
    /// counts every tenant whose subset has at most `a` members, all inside
    /// the poison tenant's subset (any crashed choice downs only such
    /// tenants); degraded is at most the smaller of the tenants touching the
    /// whole subset and the sum of the `a` busiest members' tenants.
    pub fn poison(
        &self,
        subset: &[ShardIndex],
        poison_after: Option<usize>,
    ) -> Result<PoisonFigure, AnalysisError> {
        let subset = self.failure_set(subset)?;
        Ok(self.poison_of(&subset, poison_after))
    }

    /// [`poison`](Self::poison) for a validated, sorted subset.
    fn poison_of(&self, subset: &[ShardIndex], poison_after: Option<usize>) -> PoisonFigure {
        let k = subset.len();
        let crashes = match poison_after {
            Some(a) if a > 0 && a < k => a,
            _ => return self.figure_of(subset),
        };
        if binomial(k as u64, crashes as u64) > MAX_CHOICES {
            return self.bound_of(subset, crashes);
        }
        let mut worst: Option<PoisonFigure> = None;
        for_each_combination(subset, crashes, |choice| {
            let figure = self.figure_of(choice);
            let better = worst.as_ref().is_none_or(|best| {
                (figure.fully_down, figure.degraded) > (best.fully_down, best.degraded)
            });
            if better {
                worst = Some(figure);
            }
        });
        worst.unwrap_or_else(|| self.figure_of(subset))
    }

    /// The exact figure for one crashed set (validated, sorted).
    fn figure_of(&self, crashed: &[ShardIndex]) -> PoisonFigure {
        let (fully_down, touched) = self.counts(crashed);
        PoisonFigure {
            crashed: crashed.to_vec(),
            fully_down,
            degraded: touched - fully_down,
            exact: true,
        }
    }

    /// Upper bounds when there are too many choices to enumerate.
    fn bound_of(&self, subset: &[ShardIndex], crashes: usize) -> PoisonFigure {
        let tables = self.tables();
        let packer = tables.packer;
        let mut fully_down = 0;
        for size in 1..=crashes.min(self.max_k()) {
            let exact = &tables.exact[size];
            for_each_combination(subset, size, |set| {
                if let Some(row) = exact.get(packer.pack(set)) {
                    fully_down += row.tenants;
                }
            });
        }
        let (_, touched_whole) = self.counts(subset);
        let mut busiest: Vec<u64> = subset
            .iter()
            .map(|&s| self.tenants_per_shard()[s as usize])
            .collect();
        busiest.sort_unstable_by_key(|&count| Reverse(count));
        let touched_busiest: u64 = busiest.iter().take(crashes).sum();
        PoisonFigure {
            crashed: Vec::new(),
            fully_down,
            degraded: touched_whole.min(touched_busiest),
            exact: false,
        }
    }
}

/// Ranks every tenant of `placements` (the population `model` was built
/// from) as a poison tenant and keeps the `top` worst.
pub fn sweep(
    model: &BlastModel,
    placements: &Placements,
    poison_after: Option<usize>,
    top: usize,
) -> PoisonSweep {
    // Built up front and in parallel, rather than by whichever subset
    // needs each table first.
    for m in 1..=model.max_k() {
        model.containment(m);
    }
    let tables = model.tables();
    let packer = tables.packer;
    // One figure per distinct subset, aligned with its table's rows.
    let figures: Vec<Vec<PoisonFigure>> = tables
        .exact
        .iter()
        .enumerate()
        .map(|(size, table)| {
            table
                .rows()
                .par_iter()
                .map_init(Vec::new, |members, row| {
                    packer.unpack(row.key(), size, members);
                    model.poison_of(members, poison_after)
                })
                .collect()
        })
        .collect();
    let figure = |subset: &[ShardIndex]| -> &PoisonFigure {
        let size = subset.len();
        let at = tables.exact[size]
            .position(packer.pack(subset))
            .expect("every tenant's subset is in the table built from the population");
        &figures[size][at]
    };
    // Per tenant: (fully down, degraded, others fully down), ranked by the
    // first two with the tenant index breaking ties.
    let ranked: Vec<(u64, u64, u64, usize)> = (0..placements.len())
        .into_par_iter()
        .map(|t| {
            let subset = placements.subset(t);
            let f = figure(subset);
            let others = f.fully_down - u64::from(f.downs_itself(subset.len()));
            (f.fully_down, f.degraded, others, t)
        })
        .collect();
    let downing_others = ranked.par_iter().filter(|r| r.2 > 0).count() as u64;
    let order = |r: &(u64, u64, u64, usize)| (Reverse(r.0), Reverse(r.1), r.3);
    let mut worst = ranked;
    let keep = top.min(worst.len());
    if keep > 0 && keep < worst.len() {
        worst.select_nth_unstable_by_key(keep - 1, order);
    }
    worst.truncate(keep);
    worst.sort_unstable_by_key(order);
    let exact = figures.iter().flatten().all(|f| f.exact);
    PoisonSweep {
        poison_after,
        tenants: placements.len() as u64,
        distinct_subsets: model.distinct_subsets(),
        downing_others,
        exact,
        worst: worst
            .into_iter()
            .map(|(_, _, others, t)| {
                let subset = placements.subset(t);
                RankedPoison {
                    tenant: t,
                    subset: subset.to_vec(),
                    figure: figure(subset).clone(),
                    others_fully_down: others,
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(n: usize, subsets: &[Vec<ShardIndex>]) -> (BlastModel, Placements) {
        let placements = Placements::from_subsets(n, subsets);
        (BlastModel::new(&placements).unwrap(), placements)
    }

    #[test]
    fn a_whale_downs_the_small_tenants_inside_it() {
        // The whale holds 0..8; tenants 1 and 2 sit inside, 3 straddles,
        // 4 is elsewhere.
        let subsets = vec![
            (0..8).collect(),
            vec![1, 2],
            vec![3, 7],
            vec![7, 9],
            vec![10, 11],
        ];
        let (model, placements) = model(12, &subsets);
        let whale = model.poison(&subsets[0], None).unwrap();
        assert_eq!((whale.fully_down, whale.degraded), (3, 1));
        assert!(whale.downs_itself(8));
        // Contained to 2 crashes: the worst pair is one small tenant's.
        let contained = model.poison(&subsets[0], Some(2)).unwrap();
        assert_eq!(contained.fully_down, 1);
        assert!(contained.crashed == [1, 2] || contained.crashed == [3, 7]);
        assert!(!contained.downs_itself(8));
        // poison_after 0 disables containment; a ≥ k changes nothing.
        assert_eq!(model.poison(&subsets[0], Some(0)).unwrap(), whale);
        assert_eq!(
            model.poison(&subsets[1], Some(5)).unwrap(),
            model.poison(&subsets[1], None).unwrap()
        );

        let sweep = sweep(&model, &placements, None, 2);
        assert_eq!(sweep.worst[0].tenant, 0);
        assert_eq!(sweep.worst[0].others_fully_down, 2);
        assert_eq!(sweep.downing_others, 1);
        assert_eq!(sweep.worst.len(), 2);
    }

    #[test]
    fn too_many_choices_give_bounds_that_hold() {
        // k = 20 with a = 10: C(20, 10) choices, beyond the limit.
        let whale: Vec<ShardIndex> = (0..20).collect();
        let mut subsets = vec![whale.clone()];
        subsets.extend((0..19).map(|i| vec![i, i + 1]));
        subsets.push(vec![0, 1, 2]);
        let (model, _) = model(24, &subsets);
        let bound = model.poison(&whale, Some(10)).unwrap();
        assert!(!bound.exact && bound.crashed.is_empty());
        // Every pair and the triple sit inside, so that is the bound; the
        // true worst (ten consecutive shards) downs 9 pairs and the triple.
        assert_eq!(bound.fully_down, 20);
        let ten: Vec<ShardIndex> = (0..10).collect();
        let actual = model.poison(&ten, None).unwrap();
        assert!(actual.fully_down <= bound.fully_down);
        assert!(actual.degraded <= bound.degraded);
    }

    #[test]
    fn bad_subsets_are_errors() {
        let (model, _) = model(4, &[vec![0, 1]]);
        assert_eq!(
            model.poison(&[], None).unwrap_err(),
            AnalysisError::EmptyFailureSet
        );
        assert!(model.poison(&[9], None).is_err());
    }
}
