//! What must hold before a drill injects anything: every shard of the
//! drill's cells in rotation, and a baseline of load without a single
//! error. A drill started against a shard that is already out, or with
//! load that already fails, cannot tell the fault's effect apart from what
//! was there before, so it refuses to run rather than pass by accident.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::error::DrillError;
use crate::session::{Phase, Session, ShardRef};

/// How the baseline looked when the drill accepted it.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// The cells checked: those of the drill's tenants and failed shards.
    pub cells: Vec<String>,
    /// Shards in those cells, every one up.
    pub shards_up: usize,
    /// Requests of the baseline load.
    pub requests: u64,
    /// Their errors (0, or the drill would not have run).
    pub errors: u64,
}

impl Baseline {
    /// One line for the operator.
    pub fn describe(&self) -> String {
        format!(
            "Baseline healthy: all {} shards of {} up, {} requests, {} errors.",
            self.shards_up,
            match self.cells.as_slice() {
                [one] => format!("cell {one}"),
                cells => format!("cells {}", cells.join(", ")),
            },
            self.requests,
            self.errors
        )
    }
}

/// Checks the shards, drives the baseline load (every tenant but `skip`)
/// and checks it, then the shards again: the baseline phase and its
/// summary, or a [`DrillError::Precondition`] that says what to fix.
pub(crate) async fn check(
    session: &Session,
    failed: &[ShardRef],
    skip: Option<usize>,
) -> Result<(Phase, Baseline), DrillError> {
    let cells: BTreeSet<String> = session
        .subsets()
        .iter()
        .map(|(cell, _)| cell.clone())
        .chain(failed.iter().map(|(cell, _)| cell.clone()))
        .collect();
    let shards_up = all_up(session, &cells, "before any fault was injected").await?;
    let phase = match skip {
        Some(tenant) => session.measure_without(tenant).await,
        None => session.measure().await,
    };
    let requests: u64 = phase.samples.iter().map(|s| s.total).sum();
    let failing: Vec<(usize, u64, u64)> = phase
        .samples
        .iter()
        .enumerate()
        .filter(|(_, sample)| sample.errors() > 0)
        .map(|(t, sample)| (t, sample.ok, sample.total))
        .collect();
    if !failing.is_empty() {
        let errors: u64 = failing.iter().map(|&(_, ok, total)| total - ok).sum();
        let first: Vec<String> = failing
            .iter()
            .take(5)
            .map(|&(t, ok, total)| {
                format!("{} served {ok} of {total}", session.credential(t).tenant)
            })
            .collect();
        return Err(DrillError::Precondition(format!(
            "the baseline load had {errors} errors in {requests} requests before any fault, for {} tenants ({}): \
             a drill needs an error-free baseline to tell the fault's effect apart; check the keys in --tenants-file \
             and that every shard answers, then run the drill again",
            failing.len(),
            first.join("; ")
        )));
    }
    all_up(
        session,
        &cells,
        "during the baseline load, before any fault was injected",
    )
    .await?;
    Ok((
        phase,
        Baseline {
            cells: cells.into_iter().collect(),
            shards_up,
            requests,
            errors: 0,
        },
    ))
}

/// Every shard of `cells` is up per the admin API (their number), or the
/// error naming those that are not and `when` they were seen.
async fn all_up(
    session: &Session,
    cells: &BTreeSet<String>,
    when: &str,
) -> Result<usize, DrillError> {
    let shards: Vec<_> = session
        .admin()
        .shards()
        .await?
        .into_iter()
        .filter(|shard| cells.contains(&shard.cell))
        .collect();
    let out: Vec<String> = shards
        .iter()
        .filter(|shard| shard.health != "up")
        .map(|shard| format!("{}/{} {}", shard.cell, shard.id, shard.health))
        .collect();
    if out.is_empty() {
        return Ok(shards.len());
    }
    Err(DrillError::Precondition(format!(
        "the baseline is not healthy: the gateway's admin API reports {} {when}; \
         a drill against a shard that is already out tests nothing. Bring it back (restart it, or \
         POST /admin/shards/ID/restore if it was failed or drained by hand), wait until GET /admin/shards \
         shows it up, and run the drill again",
        out.join(", ")
    )))
}
