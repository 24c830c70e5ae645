//! The answers of `blast`, `plan` and `migrate` as serialisable data: what
//! the command line prints with `--json` and what the Python package
//! returns as dicts, built in one place so the two cannot drift apart.
//!
//! Field names are fixed by the issues that introduced each command; the
//! front ends only check their own input, report progress and, for text,
//! lay these structures out.

mod blast;
mod count;
mod load;
mod migrate;
mod plan;
mod poison;
mod scenarios;
mod steps;
mod waves;

pub use blast::{BlastQuery, OverlapJson, PlacedJson, Report, TOP_TENANTS, blast};
pub use count::Count;
pub use load::{DominantJson, LoadJson};
pub use migrate::{
    ChangeJson, Comparison, LookbackJson, MIGRATION_SAMPLE, MigrateReport, MigrationSpec, Side,
    lookback, migration, other_algorithm,
};
pub use plan::{PlanReport, plan};
pub use poison::{PoisonFigureJson, PoisonJson, PoisonSweepJson, RankedJson};
pub use scenarios::{FigureJson, Scenario, ScenarioJson, SweepJson, WorstJson};
pub use steps::{Progress, Quiet, check_overrides, place_all};
pub use waves::{WaveJson, total_fully_exposed};
