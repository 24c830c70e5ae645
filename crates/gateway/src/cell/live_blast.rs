//! The live modeled blast radius: for each cell, which configured tenants
//! are fully down and which degraded, given the shards that are out of
//! rotation right now.
//!
//! It is the analyser's model (the same code `shuffle-shard blast` runs),
//! built once per configuration load over the tenants of each cell, and
//! evaluated against the current set of unavailable shards on demand.

use analysis::{BlastModel, Placements, Population};
use placement::ShardIndex;
use serde::Serialize;

use crate::cell::Topology;
use crate::config::tenants::Tenants;

/// One cell's model.
#[derive(Debug)]
pub struct CellModel {
    /// The cell's tenants, in tenants-file order.
    pub tenants: Vec<String>,
    placements: Placements,
    model: Option<BlastModel>,
}

/// What the unavailable shards of a cell do to its tenants now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveBlast {
    /// The cell.
    pub cell: String,
    /// Shards out of rotation (ids).
    pub unavailable: Vec<String>,
    /// Tenants configured in the cell.
    pub tenants: u64,
    /// Tenants whose whole subset is out.
    pub fully_down: u64,
    /// Tenants with at least one member out.
    pub degraded: u64,
    /// The fully-down tenants, by id.
    pub fully_down_tenants: Vec<String>,
}

/// Builds every cell's model.
pub fn build(topology: &Topology, tenants: &Tenants) -> Vec<CellModel> {
    topology
        .cells()
        .iter()
        .enumerate()
        .map(|(index, cell)| {
            let ids: Vec<String> = tenants
                .iter()
                .filter(|t| topology.cell_index(t.cell.as_deref()) == index)
                .map(|t| t.id.clone())
                .collect();
            let population = Population::listed(ids.clone(), None);
            let placements = Placements::compute(&cell.placer, &population);
            // A population the exact tables cannot hold (a dedicated list
            // longer than the tables allow) still gets counts by scanning.
            let model = (!ids.is_empty())
                .then(|| BlastModel::new(&placements).ok())
                .flatten();
            CellModel {
                tenants: ids,
                placements,
                model,
            }
        })
        .collect()
}

impl CellModel {
    /// Evaluates the model for the given unavailable shards.
    pub fn evaluate(&self, cell: &str, unavailable: &[ShardIndex], ids: &[String]) -> LiveBlast {
        let fully_down_tenants: Vec<String> = self
            .placements
            .iter()
            .zip(&self.tenants)
            .filter(|(subset, _)| {
                !subset.is_empty() && subset.iter().all(|s| unavailable.contains(s))
            })
            .map(|(_, tenant)| tenant.clone())
            .collect();
        let (fully_down, degraded) = match (&self.model, unavailable.is_empty()) {
            (_, true) => (0, 0),
            (Some(model), false) => match model.impact(unavailable) {
                Ok(impact) => (impact.fully_down, impact.degraded),
                Err(_) => self.count_by_scan(unavailable),
            },
            (None, false) => self.count_by_scan(unavailable),
        };
        LiveBlast {
            cell: cell.to_owned(),
            unavailable: ids.to_vec(),
            tenants: self.tenants.len() as u64,
            fully_down,
            degraded,
            fully_down_tenants,
        }
    }

    fn count_by_scan(&self, unavailable: &[ShardIndex]) -> (u64, u64) {
        let mut fully = 0;
        let mut hit = 0;
        for subset in self.placements.iter() {
            let out = subset.iter().filter(|s| unavailable.contains(s)).count();
            fully += u64::from(out == subset.len() && out > 0);
            hit += u64::from(out > 0);
        }
        (fully, hit)
    }
}
