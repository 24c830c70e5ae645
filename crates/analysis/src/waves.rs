//! Deployment waves: which tenants a bad deploy to one wave of shards would
//! take fully down, and an assignment of shards to waves that keeps that
//! number small.
//!
//! Shuffle sharding assumes shards fail independently; a deploy breaks that
//! assumption for every shard in the wave it reaches. A tenant whose whole
//! subset sits in one wave is *fully exposed* to that wave's deploy; one
//! with any member in it is *touched*.

use std::collections::HashMap;

use placement::{Fleet, ShardIndex};
use serde::Serialize;

use crate::error::AnalysisError;
use crate::placements::Placements;

/// An assignment of every shard to one named wave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waves {
    names: Vec<String>,
    of_shard: Vec<usize>,
}

impl Waves {
    /// Parses a waves file: one `SHARD_ID WAVE` pair per line (whitespace
    /// separated); blank lines and `#` comments are skipped. Every shard of
    /// the fleet must be in exactly one wave.
    pub fn parse(text: &str, fleet: &Fleet) -> Result<Self, AnalysisError> {
        let mut names: Vec<String> = Vec::new();
        let mut of_shard: Vec<Option<usize>> = vec![None; fleet.len()];
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(shard), Some(wave), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(AnalysisError::Waves(format!(
                    "line {}: expected `SHARD_ID WAVE`, e.g. `17 wave-2`",
                    number + 1
                )));
            };
            let Some(index) = fleet.index_of(shard) else {
                return Err(AnalysisError::Waves(format!(
                    "line {}: shard {shard:?} is not in the fleet of {} shards",
                    number + 1,
                    fleet.len()
                )));
            };
            if of_shard[index as usize].is_some() {
                return Err(AnalysisError::Waves(format!(
                    "line {}: shard {shard:?} is assigned twice; put each shard in one wave",
                    number + 1
                )));
            }
            let wave = match names.iter().position(|name| name == wave) {
                Some(position) => position,
                None => {
                    names.push(wave.to_owned());
                    names.len() - 1
                }
            };
            of_shard[index as usize] = Some(wave);
        }
        let of_shard = of_shard
            .iter()
            .enumerate()
            .map(|(index, wave)| {
                wave.ok_or_else(|| {
                    AnalysisError::Waves(format!(
                        "shard {:?} has no wave; assign every shard to a wave",
                        fleet.shard(index as ShardIndex).id
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { names, of_shard })
    }

    /// Wave names, in order of first appearance.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The wave (position in [`names`](Self::names)) of a shard.
    pub fn wave_of(&self, shard: ShardIndex) -> usize {
        self.of_shard[shard as usize]
    }

    /// The shards in a wave, ascending.
    pub fn members(&self, wave: usize) -> Vec<ShardIndex> {
        (0..self.of_shard.len() as ShardIndex)
            .filter(|&s| self.of_shard[s as usize] == wave)
            .collect()
    }

    /// The assignment as a waves file that [`parse`](Self::parse) reads back.
    pub fn to_text(&self, fleet: &Fleet) -> String {
        self.of_shard
            .iter()
            .enumerate()
            .map(|(index, &wave)| {
                format!(
                    "{} {}\n",
                    fleet.shard(index as ShardIndex).id,
                    self.names[wave]
                )
            })
            .collect()
    }
}

/// What a bad deploy to one wave exposes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaveExposure {
    /// The wave's name.
    pub wave: String,
    /// Its shards.
    pub shards: Vec<ShardIndex>,
    /// Tenants with every member in this wave.
    pub fully_exposed: u64,
    /// `fully_exposed / tenants`.
    pub fully_exposed_fraction: f64,
    /// Tenants with any member in this wave.
    pub touched: u64,
    /// `touched / tenants`.
    pub touched_fraction: f64,
}

/// Per-wave exposure of a placed population.
pub fn exposure(placements: &Placements, waves: &Waves) -> Vec<WaveExposure> {
    let count = waves.names.len();
    let mut fully = vec![0u64; count];
    let mut touched = vec![0u64; count];
    let mut seen = vec![false; count];
    for subset in placements.iter() {
        seen.fill(false);
        for &shard in subset {
            seen[waves.wave_of(shard)] = true;
        }
        let hit: Vec<usize> = (0..count).filter(|&w| seen[w]).collect();
        for &wave in &hit {
            touched[wave] += 1;
        }
        if let [only] = hit.as_slice() {
            fully[*only] += 1;
        }
    }
    let tenants = placements.len().max(1) as f64;
    (0..count)
        .map(|wave| WaveExposure {
            wave: waves.names[wave].clone(),
            shards: waves.members(wave),
            fully_exposed: fully[wave],
            fully_exposed_fraction: fully[wave] as f64 / tenants,
            touched: touched[wave],
            touched_fraction: touched[wave] as f64 / tenants,
        })
        .collect()
}

/// Subset checks a wave plan may spend on improving its assignment.
const PLAN_WORK_BUDGET: u64 = 400_000_000;

/// Proposes an assignment of the `n` shards to `count` waves of equal size
/// (±1) that keeps the number of fully exposed tenants small.
///
/// It starts from shards dealt round-robin and then swaps pairs of shards
/// between waves while a swap lowers the number of tenants whose whole
/// subset sits in one wave (a local search: good, not proven optimal). The
/// result is deterministic.
pub fn plan_waves(placements: &Placements, count: usize) -> Result<Waves, AnalysisError> {
    let n = placements.shards();
    if count < 2 || count > n {
        return Err(AnalysisError::Waves(format!(
            "cannot split {n} shards into {count} waves; choose between 2 and {n}"
        )));
    }
    // Distinct subsets with tenant counts, and the subsets each shard is in.
    let mut distinct: HashMap<&[ShardIndex], u64> = HashMap::new();
    for subset in placements.iter() {
        *distinct.entry(subset).or_default() += 1;
    }
    let mut subsets: Vec<(&[ShardIndex], u64)> = distinct.into_iter().collect();
    subsets.sort_unstable();
    let mut of_shard: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (id, (subset, _)) in subsets.iter().enumerate() {
        for &shard in *subset {
            of_shard[shard as usize].push(id as u32);
        }
    }

    let mut wave: Vec<usize> = (0..n).map(|s| s % count).collect();
    let exposed = |wave: &[usize], id: u32| -> u64 {
        let (subset, tenants) = subsets[id as usize];
        let first = wave[subset[0] as usize];
        if subset.iter().all(|&s| wave[s as usize] == first) {
            tenants
        } else {
            0
        }
    };
    let mut work = 0u64;
    let mut improved = true;
    while improved && work < PLAN_WORK_BUDGET {
        improved = false;
        for a in 0..n {
            for b in a + 1..n {
                if wave[a] == wave[b] {
                    continue;
                }
                let affected: Vec<u32> = {
                    let mut ids: Vec<u32> =
                        of_shard[a].iter().chain(&of_shard[b]).copied().collect();
                    ids.sort_unstable();
                    ids.dedup();
                    ids
                };
                work += affected.len() as u64 * 2;
                let before: u64 = affected.iter().map(|&id| exposed(&wave, id)).sum();
                wave.swap(a, b);
                let after: u64 = affected.iter().map(|&id| exposed(&wave, id)).sum();
                if after < before {
                    improved = true;
                } else {
                    wave.swap(a, b);
                }
                if work >= PLAN_WORK_BUDGET {
                    break;
                }
            }
        }
    }
    Ok(Waves {
        names: (1..=count).map(|w| format!("wave-{w}")).collect(),
        of_shard: wave,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_checks_every_shard() {
        let fleet = Fleet::uniform(4).unwrap();
        let waves = Waves::parse("# deploy order\n0 w1\n1 w1\n2 w2\n3 w2\n", &fleet).unwrap();
        assert_eq!(waves.names(), ["w1", "w2"]);
        assert_eq!(waves.members(1), vec![2, 3]);
        assert_eq!(Waves::parse(&waves.to_text(&fleet), &fleet).unwrap(), waves);
        for bad in [
            "0 w1\n1 w1\n2 w2\n",
            "0 w1\n0 w2\n1 w1\n2 w1\n3 w1",
            "9 w1",
            "0",
        ] {
            assert!(Waves::parse(bad, &fleet).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn exposure_counts_tenants_inside_one_wave() {
        let placements =
            Placements::from_subsets(4, &[vec![0, 1], vec![1, 2], vec![2, 3], vec![3]]);
        let fleet = Fleet::uniform(4).unwrap();
        let waves = Waves::parse("0 a\n1 a\n2 b\n3 b\n", &fleet).unwrap();
        let report = exposure(&placements, &waves);
        assert_eq!((report[0].fully_exposed, report[0].touched), (1, 2));
        assert_eq!((report[1].fully_exposed, report[1].touched), (2, 3));
    }

    #[test]
    fn planned_waves_beat_round_robin_and_stay_balanced() {
        // Tenants on {0,2}, {1,3}, {4,6}, {5,7}: round-robin over two waves
        // puts every one of them inside a single wave.
        let subsets = vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]];
        let placements = Placements::from_subsets(8, &subsets);
        let planned = plan_waves(&placements, 2).unwrap();
        let total: u64 = exposure(&placements, &planned)
            .iter()
            .map(|w| w.fully_exposed)
            .sum();
        assert_eq!(total, 0);
        assert_eq!(planned.members(0).len(), 4);
        assert!(plan_waves(&placements, 1).is_err());
        assert!(plan_waves(&placements, 9).is_err());
    }
}
