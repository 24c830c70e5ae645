//! The live modeled blast radius: for each cell, which configured tenants
//! are fully down and which degraded, given the shards that are out of
//! rotation right now.
//!
//! It is the analyser's model (the same code `shuffle-shard blast` runs),
//! built once per configuration load over the tenants of each cell, and
//! evaluated against the current set of unavailable shards on demand.

use analysis::{BlastModel, Placements};
use placement::ShardIndex;
use serde::Serialize;

use crate::cell::Topology;
use crate::tenants::{TenantSlot, Tenants};

/// One cell's model.
#[derive(Debug)]
pub struct CellModel {
    /// The registry version it was built from (its buckets shared, not
    /// copied): the cell's tenants are its tenants of the cell, in its
    /// order, the `t`th one placed at `placements`' `t`.
    registry: Tenants,
    /// The cell's index.
    cell: usize,
    /// How many tenants the cell has.
    tenants: usize,
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

/// The most failure sets the standing model sweeps per size: every pair of
/// a 600-shard cell; a larger sweep is a seeded sample of this many.
pub const MAX_STANDING_SETS: u64 = 200_000;

/// The worst a failure of some size does to a cell's tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Worst {
    /// The most tenants one such failure takes fully down.
    pub fully_down: u64,
    /// The most tenants one such failure degrades.
    pub degraded: u64,
    /// Whether the sets were a sample (the worst is then a lower bound).
    pub sampled: bool,
}

/// Builds every cell's model.
pub fn build(topology: &Topology, tenants: &Tenants) -> Vec<CellModel> {
    (0..topology.cells().len())
        .map(|cell| {
            let placer = &topology.cells()[cell].placer;
            // The cell's tenants in registry order, as slots only while
            // placing (placement is parallel and needs them indexed).
            let slots: Vec<TenantSlot> = tenants
                .iter()
                .filter(|t| t.cell_index() == cell)
                .map(|t| t.slot())
                .collect();
            let at = |t: usize| tenants.at(slots[t]).expect("a slot of this registry");
            let uniform = (!slots.iter().any(|&slot| {
                let tenant = tenants.at(slot).expect("a slot of this registry");
                tenant.k().is_some() || tenant.shards().is_some()
            }))
            .then_some(placer.config().k as usize);
            let placements = Placements::from_fn(
                placer.fleet().len(),
                slots.len(),
                uniform,
                &|t, out| topology.tenant_subset_into(at(t), out),
                &|_, _| {},
            );
            // A population the exact tables cannot hold (a dedicated list
            // longer than the tables allow) still gets counts by scanning.
            let model = (!slots.is_empty())
                .then(|| BlastModel::new(&placements).ok())
                .flatten();
            CellModel {
                registry: tenants.clone(),
                cell,
                tenants: slots.len(),
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
            .zip(self.registry.iter().filter(|t| t.cell_index() == self.cell))
            .filter(|(subset, _)| {
                !subset.is_empty() && subset.iter().all(|s| unavailable.contains(s))
            })
            .map(|(_, tenant)| tenant.id().to_owned())
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
            tenants: self.tenants as u64,
            fully_down,
            degraded,
            fully_down_tenants,
        }
    }

    /// The worst fully-down and degraded counts over every failure of
    /// `failures` of the cell's shards (a seeded sample of
    /// [`MAX_STANDING_SETS`] sets when there are more: then the worst is a
    /// lower bound, and `sampled` says so); `None` for a cell without
    /// tenants, with fewer shards, or whose population the exact tables
    /// cannot hold.
    pub fn worst(&self, failures: usize) -> Option<Worst> {
        let model = self.model.as_ref()?;
        let sweep = model
            .sweep(failures, MAX_STANDING_SETS, 0, &|_, _| {})
            .ok()?;
        Some(Worst {
            fully_down: sweep.fully_down.worst,
            degraded: sweep.degraded.worst,
            sampled: sweep.sampled,
        })
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
