//! The rolling-restart drill: every shard restarted in turn under load, as
//! a deploy does it, and the promise that no tenant with two or more
//! members sees a single error.
//!
//! Each shard is taken down through its control API (`killed`: connections
//! refused, open ones dropped, as a stopped process), kept down for the
//! given time and until the gateway's active checks have seen it fail,
//! brought back, and the next one goes down as soon as the gateway's checks
//! pass on it again: the readiness a deploy waits for, not the gateway's
//! rotation, which is what the drill tests. A gateway that kept a restarted
//! shard ejected after its checks passed would have two shards out at once
//! and its tenants on exactly those two fully down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::admin::ShardState;
use crate::control::{HEALTHY, ShardControl};
use crate::error::DrillError;
use crate::preconditions::{self, Baseline};
use crate::run::{PhaseSummary, names, resolve, seconds, summarize};
use crate::session::{Phase, Session, ShardRef};

/// The mode that takes a shard down: a stopped process.
const DOWN_MODE: &str = "killed";

/// How often the admin API is polled while waiting.
const POLL: Duration = Duration::from_millis(50);

/// What the rolling restart does.
#[derive(Debug, Clone)]
pub struct RollingPlan {
    /// The shards, each with its control API, in restart order.
    pub shards: Vec<ShardControl>,
    /// How long each shard stays down (at least; it stays down until the
    /// gateway's checks have seen it fail).
    pub down: Duration,
    /// The longest any one wait may take (checks to see a shard down, or
    /// pass on it again).
    pub timeout: Duration,
}

/// One shard's restart, as the gateway saw it.
#[derive(Debug, Clone, Serialize)]
pub struct Restart {
    /// `cell/id`.
    pub shard: String,
    /// Seconds from taking it down until the gateway's checks saw it fail;
    /// `None`: not within the wait.
    pub seen_down_after_s: Option<f64>,
    /// Seconds from bringing it back until the gateway's checks passed on
    /// it again; `None`: not within the wait.
    pub ready_after_s: Option<f64>,
    /// Its health in the gateway's admin API when its checks passed again:
    /// `up`, or why the gateway still held it out (`ejected`, say).
    pub health_when_ready: Option<String>,
}

/// A tenant that saw errors.
#[derive(Debug, Clone, Serialize)]
pub struct TenantErrors {
    /// The tenant.
    pub tenant: String,
    /// Its subset (shard ids).
    pub subset: Vec<String>,
    /// Requests sent during the restarts.
    pub requests: u64,
    /// Failed ones.
    pub errors: u64,
}

/// Everything a rolling-restart drill found.
#[derive(Debug, Clone, Serialize)]
pub struct RollingReport {
    /// Tenants driven.
    pub tenants: usize,
    /// The healthy baseline the drill started from.
    pub baseline: Baseline,
    /// Each shard's restart, in order.
    pub restarts: Vec<Restart>,
    /// Load before (the baseline) and during the restarts.
    pub phases: Vec<PhaseSummary>,
    /// The most shards the gateway reported out of rotation at once while
    /// polled (one is the shard being restarted).
    pub most_out: usize,
    /// Tenants with two or more members that saw an error (must be none).
    pub failing: Vec<TenantErrors>,
    /// Errors of tenants with a single member, which a restart of that
    /// member takes down: expected, not judged.
    pub single_member_errors: u64,
    /// Every reason the drill failed.
    pub violations: Vec<String>,
    /// No tenant with two or more members saw an error, every shard was
    /// seen down and ready again, and all were back in rotation at the end.
    pub passed: bool,
}

/// Restarts every shard of `plan` in turn under load from every tenant,
/// telling the operator through `say` what happens.
pub async fn run(
    session: &Session,
    plan: &RollingPlan,
    say: &dyn Fn(&str),
) -> Result<RollingReport, DrillError> {
    if plan.shards.is_empty() {
        return Err(DrillError::Input(
            "--rolling-restart names no shard; give ID=CONTROL_URL for each shard to restart"
                .into(),
        ));
    }
    let ids: Vec<String> = plan.shards.iter().map(|s| s.id().to_owned()).collect();
    let shards = resolve(session, &ids).await?;
    let (before, baseline) = preconditions::check(session, &shards, None).await?;
    say(&baseline.describe());
    say(&format!(
        "Restarting {} one at a time under load, each down for {:.1} s.",
        names(&shards),
        plan.down.as_secs_f64()
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let load = async {
        crate::load::drive_until(
            &session.gateways(),
            session.credentials(),
            session.shape(),
            Arc::clone(&stop),
        )
        .await
    };
    let restarts = async {
        // Let the load settle first, and run on a little after the last
        // restart, so both ends are measured.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let restarted = restart_all(session, plan, &shards, say).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        restarted
    };
    let (samples, restarted) = tokio::join!(load, restarts);
    let (restarts, most_out, mut violations) = restarted?;
    let during = Phase { samples };

    // At the end every shard is back in rotation.
    let back = wait_until(session, plan.timeout, |shards| {
        shards
            .iter()
            .all(|s| !ids.contains(&s.id) || s.health == "up")
    })
    .await?;
    if back.is_none() {
        violations.push(format!(
            "not every shard was back in rotation within {} s of the last restart; check GET /admin/shards",
            plan.timeout.as_secs()
        ));
    }

    let mut failing = Vec::new();
    let mut single_member_errors = 0;
    for (t, sample) in during.samples.iter().enumerate() {
        if sample.errors() == 0 {
            continue;
        }
        let subset = session.subsets()[t].1.clone();
        if subset.len() < 2 {
            single_member_errors += sample.errors();
            continue;
        }
        failing.push(TenantErrors {
            tenant: session.credential(t).tenant.clone(),
            subset,
            requests: sample.total,
            errors: sample.errors(),
        });
    }
    if !failing.is_empty() {
        let errors: u64 = failing.iter().map(|f| f.errors).sum();
        let first: Vec<String> = failing
            .iter()
            .take(5)
            .map(|f| {
                format!(
                    "{} ({}): {} of {}",
                    f.tenant,
                    f.subset.join(", "),
                    f.errors,
                    f.requests
                )
            })
            .collect();
        violations.push(format!(
            "{} tenants with two or more members saw {errors} errors during the rolling restart ({}); \
             a restart of one shard at a time must cost them nothing: check that the gateway ends an ejection \
             when its checks pass again and caps ejections (outlier.max_ejection_percent)",
            failing.len(),
            first.join("; ")
        ));
    }
    Ok(RollingReport {
        tenants: session.tenants(),
        baseline,
        restarts,
        phases: vec![summarize("before", &before), summarize("restarts", &during)],
        most_out,
        failing,
        single_member_errors,
        passed: violations.is_empty(),
        violations,
    })
}

/// The restarts, one after another: each shard's record, the most shards
/// seen out at once, and what went wrong. A shard whose checks never pass
/// again ends the drill (the next restart would take a second one down);
/// every shard the drill took down is brought back whatever happens.
async fn restart_all(
    session: &Session,
    plan: &RollingPlan,
    shards: &[ShardRef],
    say: &dyn Fn(&str),
) -> Result<(Vec<Restart>, usize, Vec<String>), DrillError> {
    let mut restarts = Vec::new();
    let mut violations = Vec::new();
    let mut most_out = 0;
    let timeout = plan.timeout.as_secs();
    for (control, (cell, id)) in plan.shards.iter().zip(shards) {
        let name = format!("{cell}/{id}");
        say(&format!("Taking {name} down."));
        control.set_mode(DOWN_MODE).await?;
        let down_at = tokio::time::Instant::now();
        let waited = async {
            tokio::time::sleep(plan.down).await;
            // Down until the gateway's checks have seen it: a restart the
            // checks never notice tests ejection alone.
            let seen = wait_until_counting(session, plan.timeout, &mut most_out, |shards| {
                find(shards, cell, id).is_some_and(|s| {
                    s.last_check
                        .as_deref()
                        .map_or(s.health != "up", |last| last == "fail")
                })
            })
            .await?;
            Ok::<_, DrillError>(seen.map(|_| down_at.elapsed()))
        }
        .await;
        // Whatever happened, the shard comes back.
        control.set_mode(HEALTHY).await?;
        let seen_down = waited?;
        if seen_down.is_none() {
            violations.push(format!(
                "the gateway's health checks did not see {name} down within {timeout} s; check [health] interval_ms, or raise --wait-seconds"
            ));
        }
        say(&format!("{name} back: waiting for its checks to pass."));
        let mut health_when_ready = None;
        let ready = wait_until_counting(session, plan.timeout, &mut most_out, |shards| {
            let Some(shard) = find(shards, cell, id) else {
                return false;
            };
            match (&shard.active, &shard.last_check) {
                (Some(active), Some(last)) => active == "healthy" && last == "pass",
                // A gateway that does not say: in rotation is ready.
                _ => shard.health == "up",
            }
        })
        .await?;
        if ready.is_some() {
            health_when_ready = session
                .admin()
                .shards()
                .await?
                .iter()
                .find(|s| &s.cell == cell && &s.id == id)
                .map(|s| s.health.clone());
        }
        restarts.push(Restart {
            shard: name.clone(),
            seen_down_after_s: seen_down.map(seconds),
            ready_after_s: ready.map(seconds),
            health_when_ready: health_when_ready.clone(),
        });
        match (ready, health_when_ready.as_deref()) {
            (None, _) => {
                violations.push(format!(
                    "{name}'s health checks did not pass within {timeout} s of bringing it back, so the drill stopped before the next restart; check the shard"
                ));
                break;
            }
            (Some(_), Some("up")) => say(&format!("{name} ready and in rotation.")),
            (Some(_), health) => say(&format!(
                "{name} ready, but the gateway holds it out ({}); next shard.",
                health.unwrap_or("unknown")
            )),
        }
    }
    Ok((restarts, most_out, violations))
}

/// A shard of the admin API's list.
fn find<'a>(shards: &'a [ShardState], cell: &str, id: &str) -> Option<&'a ShardState> {
    shards.iter().find(|s| s.cell == cell && s.id == id)
}

/// Polls the admin API's shards until `done` holds: how long it took, or
/// `None` once `timeout` passed.
async fn wait_until(
    session: &Session,
    timeout: Duration,
    done: impl Fn(&[ShardState]) -> bool,
) -> Result<Option<Duration>, DrillError> {
    let mut most_out = 0;
    wait_until_counting(session, timeout, &mut most_out, done).await
}

/// As [`wait_until`], keeping in `most_out` the most shards seen out of
/// rotation at once.
async fn wait_until_counting(
    session: &Session,
    timeout: Duration,
    most_out: &mut usize,
    done: impl Fn(&[ShardState]) -> bool,
) -> Result<Option<Duration>, DrillError> {
    let started = tokio::time::Instant::now();
    loop {
        let shards = session.admin().shards().await?;
        let out = shards.iter().filter(|s| s.health != "up").count();
        *most_out = (*most_out).max(out);
        if done(&shards) {
            return Ok(Some(started.elapsed()));
        }
        if started.elapsed() >= timeout {
            return Ok(None);
        }
        tokio::time::sleep(POLL).await;
    }
}
