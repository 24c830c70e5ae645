//! The drill as operators run it: a baseline, a fault, load during the
//! fault, recovery, load after; then the verdict.

use std::time::Duration;

use serde::Serialize;

use crate::control::{HEALTHY, ShardControl};
use crate::error::DrillError;
use crate::session::{Phase, Session, ShardRef, Thresholds, Verdict};

/// How the fault is injected.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The drill marks the shards failed through the admin API and restores
    /// them afterwards: nothing is touched but the gateway's view.
    Admin(Vec<String>),
    /// The operator breaks these shards for real (kills the process,
    /// blackholes it); the drill waits up to `timeout` for the gateway to
    /// see them out, and afterwards for them to come back.
    Wait {
        /// The shards being broken.
        shards: Vec<String>,
        /// How long to wait for the gateway to notice.
        timeout: Duration,
    },
    /// The drill breaks these shards for real through their control APIs
    /// (`shuffle-shard backend --control`), waits up to `timeout` for the
    /// gateway to see them out, and afterwards sets them healthy and waits
    /// for them to come back.
    Break {
        /// The shards to break, each with its control API.
        shards: Vec<ShardControl>,
        /// The mode to set, in the backend's `--mode` spelling.
        mode: String,
        /// How long to wait for the gateway to notice, and for the recovery.
        timeout: Duration,
    },
}

impl Fault {
    /// The ids of the shards this fault takes out.
    fn shard_ids(&self) -> Vec<String> {
        match self {
            Self::Admin(ids) | Self::Wait { shards: ids, .. } => ids.clone(),
            Self::Break { shards, .. } => shards.iter().map(|s| s.id().to_owned()).collect(),
        }
    }
}

/// A phase's load summary.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseSummary {
    /// `before`, `during` or `after`.
    pub name: String,
    /// Requests sent.
    pub requests: u64,
    /// Failed requests.
    pub errors: u64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
}

/// Everything a drill found.
#[derive(Debug, Clone, Serialize)]
pub struct DrillReport {
    /// Tenants driven.
    pub tenants: usize,
    /// Load per phase.
    pub phases: Vec<PhaseSummary>,
    /// The verdict on the fault phase.
    pub verdict: Verdict,
    /// Whether every property held.
    pub passed: bool,
}

/// A phase's load summary; the poison drill shares it.
/// The three phases' summaries, in order, as every drill reports them.
pub(crate) fn summaries(before: &Phase, during: &Phase, after: &Phase) -> Vec<PhaseSummary> {
    vec![
        summarize("before", before),
        summarize("during", during),
        summarize("after", after),
    ]
}

pub(crate) fn summarize(name: &str, phase: &Phase) -> PhaseSummary {
    let mut all: Vec<u32> = phase
        .samples
        .iter()
        .flat_map(|s| s.latencies_us.iter().copied())
        .collect();
    PhaseSummary {
        name: name.to_owned(),
        requests: phase.samples.iter().map(|s| s.total).sum(),
        errors: phase.samples.iter().map(|s| s.errors()).sum(),
        p50_ms: crate::load::quantile_ms(&mut all, 0.5),
        p99_ms: crate::load::quantile_ms(&mut all, 0.99),
    }
}

/// Resolves shard ids to `(cell, id)` using the admin API's shard list.
async fn resolve(session: &Session, ids: &[String]) -> Result<Vec<ShardRef>, DrillError> {
    let shards = session.admin().shards().await?;
    ids.iter()
        .map(|id| {
            let matches: Vec<&crate::admin::ShardState> =
                shards.iter().filter(|s| &s.id == id).collect();
            match matches.as_slice() {
                [one] => Ok((one.cell.clone(), one.id.clone())),
                [] => Err(DrillError::Input(format!(
                    "the gateway has no shard {id:?}"
                ))),
                _ => Err(DrillError::Input(format!(
                    "shard id {id:?} is in several cells"
                ))),
            }
        })
        .collect()
}

/// Polls the admin API until `done` holds for the out-of-rotation set, or
/// the timeout passes.
async fn wait_for(
    session: &Session,
    timeout: Duration,
    done: impl Fn(&[ShardRef]) -> bool,
) -> Result<bool, DrillError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if done(&session.out_of_rotation().await?) {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sets `mode` on every shard; when one refuses, heals those already
/// broken, so a failed drill leaves no shard sick.
async fn set_modes(shards: &[ShardControl], mode: &str) -> Result<(), DrillError> {
    for (done, shard) in shards.iter().enumerate() {
        if let Err(error) = shard.set_mode(mode).await {
            if mode != HEALTHY {
                for broken in &shards[..done] {
                    let _ = broken.set_mode(HEALTHY).await;
                }
            }
            return Err(error);
        }
    }
    Ok(())
}

/// Injects the fault and, unless the operator injects it, waits for the
/// gateway to report every failed shard out of rotation.
async fn inject(session: &Session, fault: &Fault, failed: &[ShardRef]) -> Result<(), DrillError> {
    let all_out = |out: &[ShardRef]| failed.iter().all(|f| out.contains(f));
    let ids = fault.shard_ids().join(", ");
    match fault {
        Fault::Admin(ids) => {
            for id in ids {
                session.admin().fail(id).await?;
            }
        }
        Fault::Wait { timeout, .. } => {
            if !wait_for(session, *timeout, all_out).await? {
                return Err(DrillError::Gateway(format!(
                    "the gateway did not report {ids} out of rotation within {timeout:?}; was the fault injected?"
                )));
            }
        }
        Fault::Break {
            shards,
            mode,
            timeout,
        } => {
            set_modes(shards, mode).await?;
            let seen = wait_for(session, *timeout, all_out).await;
            if !matches!(seen, Ok(true)) {
                let _ = set_modes(shards, HEALTHY).await;
            }
            if !seen? {
                return Err(DrillError::Gateway(format!(
                    "the gateway did not report {ids} out of rotation within {timeout:?} after the drill set --break-mode {mode}; \
                     check that its health checks catch {mode} (see [health] timeout_ms), or raise --wait-seconds"
                )));
            }
        }
    }
    Ok(())
}

/// Undoes the fault and waits (up to its timeout) for the shards to come
/// back; after a failed fault phase only undoes it, as waiting would only
/// delay the error.
async fn heal(
    session: &Session,
    fault: &Fault,
    failed: &[ShardRef],
    wait: bool,
) -> Result<(), DrillError> {
    let none_failed = |out: &[ShardRef]| !failed.iter().any(|f| out.contains(f));
    match fault {
        Fault::Admin(ids) => {
            for id in ids {
                session.admin().restore(id).await?;
            }
        }
        Fault::Wait { timeout, .. } => {
            if wait {
                wait_for(session, *timeout, none_failed).await?;
            }
        }
        Fault::Break {
            shards, timeout, ..
        } => {
            set_modes(shards, HEALTHY).await?;
            if wait {
                wait_for(session, *timeout, none_failed).await?;
            }
        }
    }
    Ok(())
}

/// Runs the drill.
pub async fn run(
    session: &Session,
    fault: &Fault,
    thresholds: Thresholds,
) -> Result<DrillReport, DrillError> {
    let failed = resolve(session, &fault.shard_ids()).await?;
    let before = session.measure().await;

    inject(session, fault, &failed).await?;
    let measured = async {
        let failovers_before = session.admin().failovers().await?;
        let during = session.measure().await;
        let failovers_after = session.admin().failovers().await?;
        let measured_degraded = session.measured_degraded().await?;
        Ok::<_, DrillError>((
            during,
            failovers_after - failovers_before,
            measured_degraded,
        ))
    }
    .await;
    // Heal even when the fault phase failed, so no shard is left broken.
    let healed = heal(session, fault, &failed, measured.is_ok()).await;
    let (during, failovers, measured_degraded) = measured?;
    healed?;
    let after = session.measure().await;

    let verdict = session.evaluate(
        "during",
        &before,
        &during,
        &failed,
        &measured_degraded,
        failovers,
        thresholds,
    );
    Ok(DrillReport {
        tenants: session.tenants(),
        phases: summaries(&before, &during, &after),
        passed: verdict.violations.is_empty(),
        verdict,
    })
}
