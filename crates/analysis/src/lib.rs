//! Blast-radius analysis for shuffle-sharded placements.
//!
//! Recipe 12.2 of the design chapter measures the blast radius by looping
//! over tenants and pairs of tenants; that stops at a few thousand tenants.
//! This crate answers the same questions exactly for millions of tenants by
//! collapsing the population to its distinct subsets and counting over
//! subsets of shards instead of over tenants:
//!
//! - [`BlastModel`]: fully-down and degraded tenants for a failure set, and
//!   sweeps over every failure set of a size;
//! - [`overlap`]: the exact distribution of shared shards over all pairs, and
//!   its closed-form expectation;
//! - [`poison`]: what a poison tenant that crashes its own subset does, with
//!   and without the gateway's containment, and the worst one.
//!
//! The crate is pure: it reads nothing and writes nothing. Progress is
//! reported through callbacks so front ends can draw bars.
//!
//! # Example
//! ```
//! use analysis::{BlastModel, Placements, Population, overlap};
//! use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer};
//!
//! let config = PlacementConfig { algorithm: Algorithm::HmacModulo, k: 2, zone_aware: false };
//! let placer = Placer::new(Fleet::uniform(16)?, &PlacementKey::recipe_default(), config)?;
//! let placements = Placements::compute(&placer, &Population::synthetic(2000));
//! let model = BlastModel::new(&placements)?;
//!
//! let one = model.impact(&[3])?;
//! assert_eq!(one.fully_down, 0); // k = 2: one failure downs nobody
//! assert!(one.degraded > 0);
//! assert!(overlap::exact(&model).fraction > 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod answers;
mod blast;
mod combinatorics;
mod error;
pub mod load;
pub mod migrate;
pub mod overlap;
mod percentile;
mod placements;
pub mod plan;
pub mod poison;
mod population;
mod sample;
mod tables;
pub mod waves;
mod zones;

pub use blast::{BlastModel, Impact, Strategy, Sweep, SweepFigure, TrafficModel};
pub use combinatorics::binomial;
pub use error::AnalysisError;
pub use percentile::nearest_rank;
pub use placements::Placements;
pub use population::Population;
