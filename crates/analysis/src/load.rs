//! Weighted load: how traffic spreads over shards, how it shifts when a
//! shard fails, and which tenants make a shard hot.
//!
//! Each tenant's weight (its traffic share) is split evenly over its
//! members. When a shard fails, each of its tenants spreads its weight over
//! its surviving members, so a survivor `s` gains `w / (k·(k−1))` from every
//! tenant it shares with the failed shard; tenants with `k = 1` lose their
//! traffic outright (they are down).

use placement::ShardIndex;
use rayon::prelude::*;
use serde::Serialize;

use crate::placements::Placements;
use crate::population::Population;

/// The hottest survivor after one shard fails.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailoverLoad {
    /// The failed shard.
    pub failed: ShardIndex,
    /// The most loaded surviving shard.
    pub hottest: ShardIndex,
    /// Its load after the failed shard's tenants moved.
    pub load: f64,
    /// Whether that load exceeds the capacity, when one was given.
    pub over_capacity: bool,
}

/// A tenant's part of one shard's load. `Tenant` is the tenant's position
/// in the population, or its id once the report is
/// [`named`](LoadReport::named).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contributor<Tenant = usize> {
    /// The tenant.
    pub tenant: Tenant,
    /// Its load on the shard.
    pub load: f64,
    /// Its share of the shard's load.
    pub share: f64,
}

/// Per-shard load and how uneven it is: one type for the analyser, the
/// HTML report and, [`named`](Self::named), the `blast` answer's `load`
/// (whose JSON field names and order these fields fix).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadReport<Tenant = usize> {
    /// The capacity the shards were checked against, if one was given.
    pub capacity: Option<f64>,
    /// Load per shard, by index: each tenant's weight split evenly over
    /// its shards.
    pub per_shard: Vec<f64>,
    /// Mean load per shard.
    pub mean: f64,
    /// Coefficient of variation (standard deviation over mean): the number
    /// to alarm on, since it rises when a whale lands somewhere.
    pub cv: f64,
    /// The hottest shard's load over the mean.
    pub max_over_mean: f64,
    /// The hottest shard.
    pub hottest: ShardIndex,
    /// Shards whose steady load exceeds the capacity.
    pub over_capacity: Vec<ShardIndex>,
    /// For each single-shard failure, the hottest survivor.
    pub failover: Vec<FailoverLoad>,
    /// The tenants carrying most of the hottest shard's load, heaviest first.
    pub dominant: Vec<Contributor<Tenant>>,
}

impl LoadReport {
    /// The same report with its dominant tenants named by their ids in
    /// `population` (the one the report was computed for).
    pub fn named(self, population: &Population) -> LoadReport<String> {
        LoadReport {
            capacity: self.capacity,
            per_shard: self.per_shard,
            mean: self.mean,
            cv: self.cv,
            max_over_mean: self.max_over_mean,
            hottest: self.hottest,
            over_capacity: self.over_capacity,
            failover: self.failover,
            dominant: self
                .dominant
                .into_iter()
                .map(|contributor| Contributor {
                    tenant: population.id(contributor.tenant).into_owned(),
                    load: contributor.load,
                    share: contributor.share,
                })
                .collect(),
        }
    }
}

/// A tenant that dominates one of its shards, and what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Whale {
    /// The tenant's position in the population (serialised as `position`,
    /// so that a front end may add the tenant's id as `tenant`).
    #[serde(rename = "position")]
    pub tenant: usize,
    /// Its subset size now.
    pub k: usize,
    /// Its share of all traffic.
    pub traffic_share: f64,
    /// Its largest share of one of its shards' load.
    pub shard_share: f64,
    /// The shard where that share is largest.
    pub shard: ShardIndex,
    /// The smallest `k` that brings its load per member down to
    /// [`WHALE_SHARE`] of a mean shard, when that is at most half the fleet.
    pub suggested_k: Option<usize>,
    /// Otherwise: dedicated shards, as many as its traffic fills at the
    /// mean load per shard.
    pub dedicated_shards: Option<usize>,
}

/// A tenant carrying more than this share of one of its shards' load is a
/// whale; the suggested `k` brings its load per member down to this share
/// of a mean shard.
pub const WHALE_SHARE: f64 = 0.25;

/// The whales of a placed, weighted population, heaviest first: tenants
/// that carry more than [`WHALE_SHARE`] of some member's load, with a
/// suggested per-tenant `k` (`--tenant-k`) or, for a tenant too heavy to
/// spread over half the fleet, a number of dedicated shards.
pub fn whales(placements: &Placements, population: &Population, load: &LoadReport) -> Vec<Whale> {
    let n = placements.shards();
    let total = load.mean * n as f64;
    let mut whales: Vec<Whale> = placements
        .iter()
        .enumerate()
        .filter_map(|(t, subset)| {
            let weight = population.weight(t);
            let per_member = weight / subset.len() as f64;
            let (shard, shard_share) = subset
                .iter()
                .map(|&s| {
                    (
                        s,
                        per_member / load.per_shard[s as usize].max(f64::MIN_POSITIVE),
                    )
                })
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))?;
            if shard_share <= WHALE_SHARE || load.mean <= 0.0 {
                return None;
            }
            let needed = (weight / (WHALE_SHARE * load.mean)).ceil() as usize;
            let suggested = needed.max(subset.len() + 1);
            let (suggested_k, dedicated_shards) = if suggested <= n / 2 {
                (Some(suggested), None)
            } else {
                (None, Some((weight / load.mean).ceil().max(1.0) as usize))
            };
            Some(Whale {
                tenant: t,
                k: subset.len(),
                traffic_share: if total > 0.0 { weight / total } else { 0.0 },
                shard_share,
                shard,
                suggested_k,
                dedicated_shards,
            })
        })
        .collect();
    whales.sort_by(|a, b| {
        b.traffic_share
            .total_cmp(&a.traffic_share)
            .then(a.tenant.cmp(&b.tenant))
    });
    whales
}

/// Computes the load report. `capacity` flags shards above it; `top` bounds
/// the list of dominant tenants.
pub fn load(
    placements: &Placements,
    population: &Population,
    capacity: Option<f64>,
    top: usize,
) -> LoadReport {
    let n = placements.shards();
    let mut per_shard = vec![0.0; n];
    // Tenants of each shard (compressed rows), for the failover pass.
    let mut counts = vec![0usize; n + 1];
    for subset in placements.iter() {
        for &index in subset {
            counts[index as usize + 1] += 1;
        }
    }
    for i in 0..n {
        counts[i + 1] += counts[i];
    }
    let starts = counts.clone();
    let mut fill = counts;
    let mut tenants_of = vec![0u32; starts[n]];
    for (t, subset) in placements.iter().enumerate() {
        let share = population.weight(t) / subset.len() as f64;
        for &index in subset {
            per_shard[index as usize] += share;
            tenants_of[fill[index as usize]] = t as u32;
            fill[index as usize] += 1;
        }
    }

    let mean = per_shard.iter().sum::<f64>() / n as f64;
    // Relative to the mean, so that squaring cannot overflow for huge
    // weights (only their ratios matter) and the CV is the same at any scale.
    let relative_variance = if mean > 0.0 {
        per_shard
            .iter()
            .map(|l| (l / mean - 1.0).powi(2))
            .sum::<f64>()
            / n as f64
    } else {
        0.0
    };
    let (hottest, max) = argmax(&per_shard, None);
    let over = |load: f64| capacity.is_some_and(|c| load > c);

    let failover = (0..n)
        .into_par_iter()
        .map(|failed| {
            let mut after = per_shard.clone();
            for &t in &tenants_of[starts[failed]..starts[failed + 1]] {
                let subset = placements.subset(t as usize);
                let k = subset.len();
                if k < 2 {
                    continue;
                }
                let gain = population.weight(t as usize) / (k * (k - 1)) as f64;
                for &other in subset.iter().filter(|&&s| s as usize != failed) {
                    after[other as usize] += gain;
                }
            }
            let (hottest, load) = argmax(&after, Some(failed));
            FailoverLoad {
                failed: failed as ShardIndex,
                hottest,
                load,
                over_capacity: over(load),
            }
        })
        .collect();

    let mut dominant: Vec<Contributor> = tenants_of
        [starts[hottest as usize]..starts[hottest as usize + 1]]
        .iter()
        .map(|&t| {
            let load = population.weight(t as usize) / placements.subset(t as usize).len() as f64;
            Contributor {
                tenant: t as usize,
                load,
                share: if max > 0.0 { load / max } else { 0.0 },
            }
        })
        .collect();
    dominant.sort_by(|a, b| b.load.total_cmp(&a.load).then(a.tenant.cmp(&b.tenant)));
    dominant.truncate(top);

    LoadReport {
        capacity,
        over_capacity: (0..n as ShardIndex)
            .filter(|&s| over(per_shard[s as usize]))
            .collect(),
        cv: relative_variance.sqrt(),
        max_over_mean: if mean > 0.0 { max / mean } else { 0.0 },
        hottest,
        per_shard,
        mean,
        failover,
        dominant,
    }
}

/// The largest value and its index, skipping `except`; the lowest index wins
/// ties so results are deterministic.
fn argmax(values: &[f64], except: Option<usize>) -> (ShardIndex, f64) {
    let mut best = (0, f64::NEG_INFINITY);
    for (i, &value) in values.iter().enumerate() {
        if Some(i) != except && value > best.1 {
            best = (i as ShardIndex, value);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whale_gets_a_wider_k_and_a_giant_dedicated_shards() {
        // 16 shards, k = 2. Tenant 0 weighs 4, tenant 1 weighs 100, the
        // other 38 weigh 1 each.
        let subsets: Vec<Vec<ShardIndex>> =
            (0..40u32).map(|t| vec![t % 16, (t + 5) % 16]).collect();
        let mut weights = vec![1.0; 40];
        weights[0] = 4.0;
        weights[1] = 100.0;
        let population =
            Population::listed((0..40).map(|t| format!("t{t}")).collect(), Some(weights));
        let placements = Placements::from_subsets(16, &subsets);
        let report = load(&placements, &population, None, 5);
        let found = whales(&placements, &population, &report);
        // The mean shard carries 142/16 = 8.875; a quarter is 2.22.
        let giant = &found[0];
        assert_eq!(giant.tenant, 1);
        assert_eq!(giant.suggested_k, None, "100 / 2.22 = 46 > 8 shards");
        assert_eq!(giant.dedicated_shards, Some(12), "100 / 8.875 = 11.3");
        let whale = found.iter().find(|w| w.tenant == 0).unwrap();
        assert_eq!(
            whale.suggested_k,
            Some(3),
            "4 / 2.22 = 1.8, so one more than k"
        );
        assert!(whale.shard_share > WHALE_SHARE);
        assert!(
            found
                .iter()
                .all(|w| w.tenant <= 1 || w.shard_share > WHALE_SHARE)
        );
    }

    #[test]
    fn a_whale_dominates_its_shards() {
        let placements =
            Placements::from_subsets(4, &[vec![0, 1], vec![1, 2], vec![2, 3], vec![3, 0]]);
        let population = Population::listed(
            vec!["whale".into(), "a".into(), "b".into(), "c".into()],
            Some(vec![10.0, 1.0, 1.0, 1.0]),
        );
        let report = load(&placements, &population, Some(5.0), 2);
        assert_eq!(report.per_shard, vec![5.5, 5.5, 1.0, 1.0]);
        assert_eq!(report.hottest, 0);
        assert_eq!(report.over_capacity, vec![0, 1]);
        assert_eq!(report.dominant[0].tenant, 0);
        assert!((report.dominant[0].share - 5.0 / 5.5).abs() < 1e-12);
        // Shard 0 fails: the whale's 10 all lands on shard 1 (5.5 + 5), and
        // tenant c's 1 lands on shard 3 (1 + 0.5).
        assert_eq!(report.failover[0].hottest, 1);
        assert!((report.failover[0].load - 10.5).abs() < 1e-12);
        assert!(report.failover[0].over_capacity);
    }
}
