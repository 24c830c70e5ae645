//! Wave-gated rollouts: a new build goes out one wave of shards at a time,
//! canary first, and stops at the first wave whose gates fail, before it
//! reaches the tenants of the next.
//!
//! Shuffle sharding counts on shards failing independently; a bad build
//! pushed everywhere at once is the correlated failure that defeats it.
//! For each wave the rollout checks the preconditions (every shard up on
//! every replica, a baseline of load without an error), drains the wave's
//! shards, waits for their requests in flight to finish, runs the deploy
//! command, restores them and waits for their health checks to pass, then
//! bakes under load while it watches every tenant, the gateway's live
//! blast radius, and the wave's own shards ([`gates`]). A gate that fails
//! stops the rollout: the wave is left drained (or restored), later waves
//! are not touched, and the report names the wave, the gate and the
//! tenants that hurt. `resume_from` continues a stopped rollout.
//!
//! Like the drills, the rollout speaks HTTP to the gateway's replicas only;
//! the deploy itself is the caller's ([`Deploy`]: the CLI runs a shell
//! command).

pub mod gates;
mod report;
mod watch;
pub mod waves;

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::error::DrillError;
use crate::load::TenantSample;
use crate::run::seconds;
use crate::session::{Session, ShardRef};
use gates::{Bake, Exposure, Failed, Gate, Limits, TenantLoad, exposure_of};
pub use report::{BakeReport, Deployed, PhaseLoad, RolloutReport, Stopped, WaveReport, WaveStatus};
use watch::{
    Ready, all_up_and_clean, await_drained, failed_attempts, wait_idle, watch_bake, watch_ready,
};
pub use waves::Wave;

/// Deploys the new build to one wave's shards, which are drained and idle
/// while it runs.
pub type Deploy = dyn Fn(&Wave) -> Pin<Box<dyn Future<Output = Deployed> + Send>> + Sync;

/// What happens to a wave whose gate failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    /// Drained: out of rotation until someone looks (the safe default: a
    /// bad build serves nobody).
    Drain,
    /// Back in rotation (when the build is judged harmless enough and
    /// capacity matters more).
    Restore,
}

/// The rollout to run.
#[derive(Debug, Clone)]
pub struct RolloutPlan {
    /// The waves, in order.
    pub waves: Vec<Wave>,
    /// How long each wave bakes under load once its shards are back.
    pub bake: Duration,
    /// The bake's limits.
    pub limits: Limits,
    /// What a failed wave is left as.
    pub on_failure: OnFailure,
    /// Start at this wave (its name), skipping those before it: the
    /// continuation of a stopped rollout.
    pub resume_from: Option<String>,
    /// The longest any wait may take: for requests in flight to finish,
    /// for every replica to see a drain, for health checks to pass.
    pub timeout: Duration,
}

/// Runs the rollout of `plan`, deploying each wave through `deploy` and
/// telling the operator through `say` what happens.
///
/// An error (an admin API that stops answering, say) ends the rollout
/// where it is; the error names the wave, whose shards may still be
/// drained.
pub async fn run(
    session: &Session,
    plan: &RolloutPlan,
    deploy: &Deploy,
    say: &dyn Fn(&str),
) -> Result<RolloutReport, DrillError> {
    let start = match &plan.resume_from {
        None => 0,
        Some(name) => plan
            .waves
            .iter()
            .position(|wave| &wave.name == name)
            .ok_or_else(|| {
                DrillError::Input(format!(
                    "--resume-from {name:?} is not a wave of --waves (its waves: {})",
                    plan.waves
                        .iter()
                        .map(|w| w.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?,
    };
    let mut report = RolloutReport {
        tenants: session.tenants(),
        replicas: session.admins().count(),
        waves: Vec::with_capacity(plan.waves.len()),
        stopped: None,
        passed: false,
    };
    for (position, wave) in plan.waves.iter().enumerate() {
        if position < start {
            report
                .waves
                .push(WaveReport::new(session, wave, WaveStatus::Skipped));
            continue;
        }
        if report.stopped.is_some() {
            report
                .waves
                .push(WaveReport::new(session, wave, WaveStatus::NotStarted));
            continue;
        }
        say(&format!(
            "Wave {} of {}: {} ({}).",
            position + 1,
            plan.waves.len(),
            wave.name,
            wave.names().join(", ")
        ));
        let mut done = WaveReport::new(session, wave, WaveStatus::Done);
        let resumed = position == start && plan.resume_from.is_some();
        roll_wave(session, plan, wave, deploy, say, resumed, &mut done)
            .await
            .map_err(|error| {
                DrillError::Gateway(format!(
                    "rollout stopped in wave {:?}: {error}; its shards ({}) may still be drained: GET /admin/shards shows them, and `--resume-from {}` runs the wave again",
                    wave.name,
                    wave.names().join(", "),
                    wave.name
                ))
            })?;
        if done.failed.is_empty() {
            done.left = Some("in rotation".to_owned());
            say(&format!("Wave {} done.", wave.name));
        } else {
            done.status = WaveStatus::Failed;
            // A wave stopped before its drain (its preconditions) was never
            // touched: draining or restoring it now would move shards the
            // rollout has no business with (and a restore would clear an
            // operator's own marks).
            let left = if done.drained_by_rollout {
                leave(session, plan, wave).await?
            } else {
                "untouched".to_owned()
            };
            done.left = Some(left.clone());
            // Hurt by the new build (or the rollout), not by the wave being
            // out: the fully exposed tenants' errors while it was out are
            // the price placement predicts for any deploy of this wave.
            let mut hurt: BTreeSet<String> = BTreeSet::new();
            if let Some(out) = &done.while_out {
                hurt.extend(
                    out.hurt
                        .iter()
                        .filter(|t| t.exposure != Exposure::FullyExposed)
                        .map(|t| t.tenant.clone()),
                );
            }
            if let Some(bake) = &done.bake {
                hurt.extend(bake.load.hurt.iter().map(|t| t.tenant.clone()));
                hurt.extend(bake.observed.fully_down_seen.iter().cloned());
            }
            for failed in &done.failed {
                say(&format!(
                    "Wave {}: gate {} failed: {}",
                    wave.name,
                    failed.gate.name(),
                    failed.why
                ));
            }
            report.stopped = Some(Stopped {
                wave: wave.name.clone(),
                gates: done.failed.iter().map(|f| f.gate.name()).collect(),
                tenants_hurt: hurt.into_iter().collect(),
                left,
                resume: format!("--resume-from {}", wave.name),
            });
        }
        report.waves.push(done);
    }
    report.passed = report.stopped.is_none();
    Ok(report)
}

/// Leaves a failed wave as `plan.on_failure` says, on every replica: how
/// it was left. A replica that does not take the mark within the timeout
/// is said so in the answer (the report still comes out, exit 1).
async fn leave(session: &Session, plan: &RolloutPlan, wave: &Wave) -> Result<String, DrillError> {
    let drain = plan.on_failure == OnFailure::Drain;
    for (cell, id) in &wave.shards {
        session.admin().set_drained(cell, id, drain).await?;
    }
    let word = if drain { "drained" } else { "restored" };
    let behind = await_drained(session, wave, drain, plan.timeout).await?;
    Ok(if behind.is_empty() {
        word.to_owned()
    } else {
        format!(
            "{word} through the first replica, but not yet on every replica after {} s ({}); check [fleet] on every replica (GET /admin/fleet)",
            plan.timeout.as_secs(),
            behind.join(", ")
        )
    })
}

/// One wave, from its preconditions to the end of its bake; a failed gate
/// ends it early, recorded in `report.failed`.
async fn roll_wave(
    session: &Session,
    plan: &RolloutPlan,
    wave: &Wave,
    deploy: &Deploy,
    say: &dyn Fn(&str),
    resumed: bool,
    report: &mut WaveReport,
) -> Result<(), DrillError> {
    // A resumed wave may have been left drained by the run that stopped.
    let held_out: Vec<ShardRef> = if resumed {
        wave.shards.clone()
    } else {
        Vec::new()
    };
    match all_up_and_clean(session, &held_out).await? {
        Ok(requests) => report.baseline_requests = Some(requests),
        Err(failed) => {
            report.failed.push(failed);
            return Ok(());
        }
    }
    say(&format!(
        "Baseline clean; draining {} ({} tenants fully exposed, {} touched).",
        wave.names().join(", "),
        report.fully_exposed.len(),
        report.touched
    ));

    // Out: drained, idle and deployed, under load. Only the tenants whose
    // whole subset is in the wave may hurt.
    let gateways = session.gateways();
    let under_load = |stop: Arc<AtomicBool>| {
        crate::load::drive_until(&gateways, session.credentials(), session.shape(), stop)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let steps = async {
        let outcome = out_steps(session, plan, wave, deploy, say, report).await;
        stop.store(true, Ordering::Relaxed);
        outcome
    };
    let (samples, outcome) = tokio::join!(under_load(Arc::clone(&stop)), steps);
    outcome?;
    let loads = tenant_loads(session, wave, &samples);
    report.while_out = Some(phase_load(&loads));
    if let Some(failed) = gates::exposure(&loads) {
        report.failed.push(failed);
    }
    if !report.failed.is_empty() {
        return Ok(());
    }

    // Back: restored, until its checks pass everywhere. The new build may
    // take requests from here on, so its failed attempts and ejections
    // count, and so do the errors of every tenant but the fully exposed
    // (down until their members are ready, as while out).
    let before = failed_attempts(session).await?;
    let deployed_at = tokio::time::Instant::now();
    for (cell, id) in &wave.shards {
        session.admin().set_drained(cell, id, false).await?;
    }
    say(&format!(
        "{} restored; waiting for every replica to take them back and for their checks to pass.",
        wave.names().join(", ")
    ));
    let mut trouble = BTreeSet::new();
    let stop = Arc::new(AtomicBool::new(false));
    let watch = async {
        let ready = watch_ready(session, wave, plan.timeout, deployed_at, &mut trouble).await;
        stop.store(true, Ordering::Relaxed);
        ready
    };
    let (coming_back, ready) = tokio::join!(under_load(Arc::clone(&stop)), watch);
    let ready = ready?;
    let mut observed = Bake::default();
    let mut baked = vec![TenantSample::default(); coming_back.len()];
    let started = tokio::time::Instant::now();
    match ready {
        Ready::After(after) => {
            report.ready_after_s = Some(seconds(after));
            // The bake: the new build serves, and every gate watches.
            say(&format!(
                "{} back; baking for {:.0} s under load.",
                wave.names().join(", "),
                plan.bake.as_secs_f64()
            ));
            let stop = Arc::new(AtomicBool::new(false));
            let watch = async {
                let watched = watch_bake(session, wave, plan.bake, &mut trouble).await;
                stop.store(true, Ordering::Relaxed);
                watched
            };
            let (samples, watched) = tokio::join!(under_load(Arc::clone(&stop)), watch);
            observed = watched?;
            baked = samples;
        }
        Ready::Never(unready) => report.failed.push(Failed {
            gate: Gate::Ready,
            why: format!(
                "the wave's shards did not pass their health checks on every replica within {} s of coming back ({}): the new build does not start or answer its health checks",
                plan.timeout.as_secs(),
                unready.join(", ")
            ),
        }),
    }
    let after = failed_attempts(session).await?;
    for name in wave.names() {
        let failed =
            after.get(&name).copied().unwrap_or(0.0) - before.get(&name).copied().unwrap_or(0.0);
        if failed > 0.0 {
            trouble.insert(format!("{name}: {failed} failed attempts"));
        }
    }
    observed.shard_trouble = trouble.into_iter().collect();
    let mut loads = tenant_loads(session, wave, &baked);
    for (load, back) in loads.iter_mut().zip(&coming_back) {
        if load.exposure != Exposure::FullyExposed {
            load.requests += back.total;
            load.errors += back.errors();
        }
    }
    report
        .failed
        .extend(gates::bake(&loads, &observed, plan.limits));
    report.bake = Some(BakeReport {
        seconds: seconds(started.elapsed()),
        load: phase_load(&loads),
        observed,
    });
    Ok(())
}

/// Drain, wait for idle, deploy: what happens while the wave is out. A
/// failed gate is recorded in `report.failed` and ends the steps.
async fn out_steps(
    session: &Session,
    plan: &RolloutPlan,
    wave: &Wave,
    deploy: &Deploy,
    say: &dyn Fn(&str),
    report: &mut WaveReport,
) -> Result<(), DrillError> {
    let timeout = plan.timeout.as_secs();
    let started = tokio::time::Instant::now();
    report.drained_by_rollout = true;
    for (cell, id) in &wave.shards {
        session.admin().set_drained(cell, id, true).await?;
    }
    let behind = await_drained(session, wave, true, plan.timeout).await?;
    if !behind.is_empty() {
        report.failed.push(Failed {
            gate: Gate::Drain,
            why: format!(
                "not every replica had the wave drained within {timeout} s ({}); check [fleet] on every replica (GET /admin/fleet)",
                behind.join(", ")
            ),
        });
        return Ok(());
    }
    report.drained_after_s = Some(seconds(started.elapsed()));
    let busy = wait_idle(session, wave, plan.timeout).await?;
    if !busy.is_empty() {
        report.failed.push(Failed {
            gate: Gate::Drain,
            why: format!(
                "requests were still in flight {timeout} s after the drain ({}); long streams or WebSockets hold a shard: raise --wait-seconds, or end them",
                busy.join(", ")
            ),
        });
        return Ok(());
    }
    report.idle_after_s = Some(seconds(started.elapsed()));

    say(&format!(
        "{} drained and idle; deploying.",
        wave.names().join(", ")
    ));
    let deploying = tokio::time::Instant::now();
    let deployed = deploy(wave).await;
    report.deploy_seconds = Some(seconds(deploying.elapsed()));
    if !deployed.ok {
        report.failed.push(Failed {
            gate: Gate::Deploy,
            why: format!("the deploy command failed: {}", deployed.detail),
        });
    }
    report.deploy = Some(deployed);
    Ok(())
}

/// Every tenant's load in a phase, with its exposure to `wave`.
fn tenant_loads(session: &Session, wave: &Wave, samples: &[TenantSample]) -> Vec<TenantLoad> {
    samples
        .iter()
        .enumerate()
        .map(|(t, sample)| {
            let (cell, subset) = &session.subsets()[t];
            TenantLoad {
                tenant: session.credential(t).tenant.clone(),
                subset: subset.iter().map(|id| format!("{cell}/{id}")).collect(),
                requests: sample.total,
                errors: sample.errors(),
                exposure: exposure_of(wave, cell, subset),
            }
        })
        .collect()
}

/// A phase's totals and the tenants that hurt in it.
fn phase_load(loads: &[TenantLoad]) -> PhaseLoad {
    PhaseLoad {
        requests: loads.iter().map(|t| t.requests).sum(),
        errors: loads.iter().map(|t| t.errors).sum(),
        hurt: loads.iter().filter(|t| t.errors > 0).cloned().collect(),
    }
}
