//! The drill as operators run it: preconditions and a baseline, a fault
//! the gateway must be seen to notice, load during the fault, recovery the
//! gateway must be seen to notice, load after; then the verdict.
//!
//! Every step the operator may have to act on is announced through the
//! caller's `say` (the CLI prints it on stderr): with `--kill` the drill
//! names the shards to break and when, and to restore and when.

use std::time::Duration;

use serde::Serialize;

use crate::control::{HEALTHY, ShardControl};
use crate::error::DrillError;
use crate::preconditions::{self, Baseline};
use crate::session::{Phase, Session, ShardRef, Thresholds, Verdict};

/// How the fault is injected.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The drill marks the shards failed through the admin API and restores
    /// them afterwards: nothing is touched but the gateway's view.
    Admin {
        /// The shards to fail.
        shards: Vec<String>,
        /// How long to wait for the gateway to report them out, and back.
        timeout: Duration,
    },
    /// The operator breaks these shards for real (kills the process,
    /// blackholes it) when the drill says so; the drill waits up to
    /// `timeout` for the gateway to see them out, and after the fault
    /// phase for them to come back once the operator restored them.
    Wait {
        /// The shards being broken.
        shards: Vec<String>,
        /// How long to wait for the gateway to notice, each way.
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
            Self::Admin { shards: ids, .. } | Self::Wait { shards: ids, .. } => ids.clone(),
            Self::Break { shards, .. } => shards.iter().map(|s| s.id().to_owned()).collect(),
        }
    }

    /// How long the gateway may take to notice, each way.
    fn timeout(&self) -> Duration {
        match self {
            Self::Admin { timeout, .. }
            | Self::Wait { timeout, .. }
            | Self::Break { timeout, .. } => *timeout,
        }
    }

    /// Who injects it, for the report.
    fn how(&self) -> String {
        match self {
            Self::Admin { .. } => "admin API".to_owned(),
            Self::Wait { .. } => "by hand".to_owned(),
            Self::Break { mode, .. } => format!("control API, mode {mode}"),
        }
    }

    /// What the operator is told as the fault starts (`restoring`: as it
    /// ends).
    fn announce(&self, names: &str, them: &str, restoring: bool) -> String {
        let wait = format!(
            "waiting up to {} s for the gateway to report {them} {}",
            self.timeout().as_secs(),
            if restoring {
                "back in rotation"
            } else {
                "out of rotation"
            }
        );
        let doing = match (self, restoring) {
            (Self::Admin { .. }, false) => format!("Failing {names} through the admin API"),
            (Self::Admin { .. }, true) => format!("Restoring {names} through the admin API"),
            (Self::Wait { .. }, false) => {
                format!("Break {names} now (stop the process, blackhole it)")
            }
            (Self::Wait { .. }, true) => format!("Restore {names} now"),
            (Self::Break { mode, .. }, false) => {
                format!("Breaking {names} through the control API (mode {mode})")
            }
            (Self::Break { .. }, true) => format!("Healing {names} through the control API"),
        };
        format!("{doing}: {wait}.")
    }

    /// Why the gateway may not have seen the fault, and what to do.
    fn unseen_hint(&self) -> String {
        match self {
            Self::Admin { .. } => {
                "the admin API accepted the fail but does not report it; check the gateway's version".to_owned()
            }
            Self::Wait { .. } => {
                "was the shard broken when the drill said so? If it was, the gateway's health checks did not catch the way it broke (see [health]); or raise --wait-seconds".to_owned()
            }
            Self::Break { mode, .. } => format!(
                "check that the gateway's health checks catch {mode} (see [health] timeout_ms), or raise --wait-seconds"
            ),
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

/// What the gateway was seen to do with the fault.
#[derive(Debug, Clone, Serialize)]
pub struct FaultLog {
    /// Who injected it: `admin API`, `by hand` or `control API, mode …`.
    pub injected: String,
    /// The shards (`cell/id`).
    pub shards: Vec<String>,
    /// Seconds until the gateway reported every one out of rotation;
    /// `None`: it did not within the wait, and nothing was tested.
    pub out_after_s: Option<f64>,
    /// Seconds from the restore until the gateway reported every one back
    /// in rotation; `None`: not within the wait (or never out).
    pub back_after_s: Option<f64>,
}

/// Everything a drill found.
#[derive(Debug, Clone, Serialize)]
pub struct DrillReport {
    /// Tenants driven.
    pub tenants: usize,
    /// The healthy baseline the drill started from.
    pub baseline: Baseline,
    /// The fault as the gateway saw it.
    pub fault: FaultLog,
    /// Load per phase (only `before` when the fault was never seen).
    pub phases: Vec<PhaseSummary>,
    /// The verdict on the fault phase; `None` when the gateway never saw
    /// the fault, so there was no fault phase to judge.
    pub verdict: Option<Verdict>,
    /// Every reason the drill failed: the verdict's violations, a fault
    /// never seen, a recovery never seen, errors after the recovery.
    pub violations: Vec<String>,
    /// Whether the fault was seen, every exercised property held, the
    /// measured sets equal the model's, and the shards came back.
    pub passed: bool,
}

/// The three phases' summaries, in order, as every drill reports them.
pub(crate) fn summaries(before: &Phase, during: &Phase, after: &Phase) -> Vec<PhaseSummary> {
    vec![
        summarize("before", before),
        summarize("during", during),
        summarize("after", after),
    ]
}

/// A phase's load summary; the poison drill shares it.
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
pub(crate) async fn resolve(
    session: &Session,
    ids: &[String],
) -> Result<Vec<ShardRef>, DrillError> {
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

/// Refuses a failure set that no tenant of the drill has a member in: the
/// drill would pass having tested nothing.
fn touches_someone(session: &Session, failed: &[ShardRef]) -> Result<(), DrillError> {
    let (per_tenant, _, _) = session.predict(failed);
    if per_tenant.iter().any(|&(_, touched)| touched) {
        return Ok(());
    }
    Err(DrillError::Precondition(format!(
        "no tenant in --tenants-file has {} in its subset, so the drill would test nothing; \
         fail a shard that serves some of them (GET /admin/tenants/ID shows a tenant's subset)",
        names(failed)
    )))
}

/// Shards as `cell/id, …`.
pub(crate) fn names(shards: &[ShardRef]) -> String {
    shards
        .iter()
        .map(|(cell, id)| format!("{cell}/{id}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Polls the admin API until `done` holds for the out-of-rotation set (of
/// every replica, with several): how long it took, or `None` once the
/// timeout passed.
pub(crate) async fn wait_for(
    session: &Session,
    timeout: Duration,
    done: impl Fn(&[ShardRef]) -> bool,
) -> Result<Option<Duration>, DrillError> {
    let started = tokio::time::Instant::now();
    loop {
        if session
            .out_of_rotation_each()
            .await?
            .iter()
            .all(|out| done(out))
        {
            return Ok(Some(started.elapsed()));
        }
        if started.elapsed() >= timeout {
            return Ok(None);
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

/// Injects the fault (unless the operator does) and waits for the gateway
/// to report every failed shard out of rotation: how long that took, or
/// `None` when it did not within the fault's timeout (a fault the drill
/// made itself is then undone).
async fn inject(
    session: &Session,
    fault: &Fault,
    failed: &[ShardRef],
) -> Result<Option<Duration>, DrillError> {
    let all_out = |out: &[ShardRef]| failed.iter().all(|f| out.contains(f));
    match fault {
        Fault::Admin { shards, .. } => {
            for id in shards {
                session.admin().fail(id).await?;
            }
        }
        Fault::Wait { .. } => {}
        Fault::Break { shards, mode, .. } => set_modes(shards, mode).await?,
    }
    let seen = wait_for(session, fault.timeout(), all_out).await;
    if !matches!(seen, Ok(Some(_))) {
        // Nothing will be measured: leave nothing broken.
        let _ = undo(session, fault).await;
    }
    seen
}

/// Undoes what the drill itself broke (nothing for a fault made by hand).
async fn undo(session: &Session, fault: &Fault) -> Result<(), DrillError> {
    match fault {
        Fault::Admin { shards, .. } => {
            for id in shards {
                session.admin().restore(id).await?;
            }
            Ok(())
        }
        Fault::Wait { .. } => Ok(()),
        Fault::Break { shards, .. } => set_modes(shards, HEALTHY).await,
    }
}

/// Runs the drill, telling the operator through `say` what happens and
/// what to do.
pub async fn run(
    session: &Session,
    fault: &Fault,
    thresholds: Thresholds,
    say: &dyn Fn(&str),
) -> Result<DrillReport, DrillError> {
    let failed = resolve(session, &fault.shard_ids()).await?;
    let (names, them) = (
        names(&failed),
        if failed.len() == 1 { "it" } else { "them" },
    );
    touches_someone(session, &failed)?;
    let (before, baseline) = preconditions::check(session, &failed, None).await?;
    say(&baseline.describe());

    let timeout = fault.timeout().as_secs();
    let mut log = FaultLog {
        injected: fault.how(),
        shards: failed.iter().map(|(c, id)| format!("{c}/{id}")).collect(),
        out_after_s: None,
        back_after_s: None,
    };
    say(&fault.announce(&names, them, false));
    let Some(out_after) = inject(session, fault, &failed).await? else {
        let unseen = format!(
            "the gateway never reported {names} out of rotation within {timeout} s, so no fault was tested: {}",
            fault.unseen_hint()
        );
        say(&format!("Fault not seen within {timeout} s."));
        return Ok(DrillReport {
            tenants: session.tenants(),
            baseline,
            fault: log,
            phases: vec![summarize("before", &before)],
            verdict: None,
            violations: vec![unseen],
            passed: false,
        });
    };
    log.out_after_s = Some(seconds(out_after));
    say(&format!(
        "{names} out of rotation after {:.1} s: driving the load under the fault.",
        out_after.as_secs_f64()
    ));
    let measured = async {
        let failovers_before = session.failovers().await?;
        let during = session.measure().await;
        let failovers_after = session.failovers().await?;
        let measured_out = session.measured_degraded().await?;
        Ok::<_, DrillError>((during, failovers_after - failovers_before, measured_out))
    }
    .await;
    let (during, failovers, measured_out) = match measured {
        Ok(measured) => measured,
        Err(error) => {
            // Leave no shard broken, but do not wait: the error is the news.
            let _ = undo(session, fault).await;
            return Err(error);
        }
    };

    say(&fault.announce(&names, them, true));
    undo(session, fault).await?;
    let none_out = |out: &[ShardRef]| !failed.iter().any(|f| out.contains(f));
    let back = wait_for(session, fault.timeout(), none_out).await?;
    log.back_after_s = back.map(seconds);
    let mut late = Vec::new();
    match back {
        Some(back) => say(&format!(
            "{names} back in rotation after {:.1} s.",
            back.as_secs_f64()
        )),
        None => {
            let still = format!(
                "{names} did not come back in rotation within {timeout} s of the restore, so the after phase ran without {them}; \
                 check the shard and its health checks"
            );
            say(&format!("Recovery not seen within {timeout} s."));
            late.push(still);
        }
    }
    let after = session.measure().await;
    let after_errors: u64 = after.samples.iter().map(|s| s.errors()).sum();
    if back.is_some() && after_errors > 0 {
        late.push(format!(
            "the after phase had {after_errors} errors with every shard back in rotation; it should have none"
        ));
    }

    let verdict = session.evaluate(
        "during",
        &before,
        &during,
        &failed,
        &measured_out,
        failovers,
        thresholds,
    );
    let violations: Vec<String> = verdict.violations.iter().cloned().chain(late).collect();
    Ok(DrillReport {
        tenants: session.tenants(),
        baseline,
        fault: log,
        phases: summaries(&before, &during, &after),
        passed: violations.is_empty(),
        verdict: Some(verdict),
        violations,
    })
}

/// A duration in seconds, to the millisecond.
pub(crate) fn seconds(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1000.0).round() / 1000.0
}
