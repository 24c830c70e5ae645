//! The drill's typed errors.

use thiserror::Error;

/// Why a drill could not run (as opposed to a drill that ran and found a
/// violated property, which is a report, not an error).
#[derive(Debug, Error)]
pub enum DrillError {
    /// Bad arguments or input files.
    #[error("{0}")]
    Input(String),
    /// What must hold before a fault is injected does not: a shard of the
    /// drill's cells already out, or errors in the baseline load.
    #[error("precondition failed: {0}")]
    Precondition(String),
    /// The gateway or its admin API could not be reached or answered
    /// unexpectedly.
    #[error("{0}")]
    Gateway(String),
    /// The replicas given are not one fleet: one of them runs without
    /// `[fleet]`, so what the drill does through one stays its own (a
    /// finding about the deployment, as a violated property is).
    #[error("{0}")]
    NotOneFleet(String),
    /// A shard's control API (the drill's `--break`) could not be reached or
    /// refused the mode.
    #[error("{0}")]
    Control(String),
}
