//! What a rollout waits for and watches on every replica: the
//! preconditions, a drain going idle, the wave's checks passing, and the
//! bake's live blast radius and shards.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::gates::{Bake, Failed, Gate};
use super::waves::Wave;
use crate::error::DrillError;
use crate::session::{Session, ShardRef};

/// How often the replicas' admin APIs are polled while waiting and baking.
pub(super) const POLL: Duration = Duration::from_millis(200);

/// Every shard of the session's cells up on every replica (but those of
/// `held_out`, in any state), and a baseline of load without an error
/// (but from tenants whose whole subset is held out): the baseline's
/// requests, or the failed gate.
pub(super) async fn all_up_and_clean(
    session: &Session,
    held_out: &[ShardRef],
) -> Result<Result<u64, Failed>, DrillError> {
    if let Some(failed) = all_up(session, held_out, "before the wave").await? {
        return Ok(Err(failed));
    }
    let phase = session.measure().await;
    let mut requests = 0;
    let mut failing = Vec::new();
    for (t, sample) in phase.samples.iter().enumerate() {
        requests += sample.total;
        let (cell, subset) = &session.subsets()[t];
        let all_held_out = !subset.is_empty()
            && subset
                .iter()
                .all(|id| held_out.iter().any(|(c, i)| c == cell && i == id));
        if sample.errors() > 0 && !all_held_out {
            failing.push(format!(
                "{} served {} of {}",
                session.credential(t).tenant,
                sample.ok,
                sample.total
            ));
        }
    }
    if !failing.is_empty() {
        return Ok(Err(Failed {
            gate: Gate::Preconditions,
            why: format!(
                "the baseline load had errors for {} tenants before the wave was touched ({}{}): a rollout cannot tell a bad build from what was already wrong; fix that first",
                failing.len(),
                failing
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; "),
                if failing.len() > 5 { "; …" } else { "" }
            ),
        }));
    }
    if let Some(failed) = all_up(session, held_out, "during the baseline").await? {
        return Ok(Err(failed));
    }
    Ok(Ok(requests))
}

/// The precondition that every shard of the session's cells is up on every
/// replica (those of `held_out` may be in any state).
async fn all_up(
    session: &Session,
    held_out: &[ShardRef],
    when: &str,
) -> Result<Option<Failed>, DrillError> {
    let mut out = Vec::new();
    for admin in session.admins() {
        for shard in admin.shards().await? {
            if !session.cells().contains_key(&shard.cell) || shard.health == "up" {
                continue;
            }
            // A resumed wave's shards are redeployed whatever they are
            // now: drained by the run that stopped, or failing on the bad
            // build.
            if held_out
                .iter()
                .any(|(cell, id)| cell == &shard.cell && id == &shard.id)
            {
                continue;
            }
            out.push(format!(
                "{}/{} {} on {}",
                shard.cell,
                shard.id,
                shard.health,
                admin.base()
            ));
        }
    }
    Ok((!out.is_empty()).then(|| Failed {
        gate: Gate::Preconditions,
        why: format!(
            "not every shard was up {when}: {}; a wave deployed beside a shard that is already out can take its tenants fully down. Bring it back (or POST /admin/shards/ID/restore), then run again",
            out.join(", ")
        ),
    }))
}

/// Waits until the wave's shards have no request in flight on any replica:
/// those still busy at the timeout (`cell/id: N in flight on URL`).
pub(super) async fn wait_idle(
    session: &Session,
    wave: &Wave,
    timeout: Duration,
) -> Result<Vec<String>, DrillError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut busy = Vec::new();
        for admin in session.admins() {
            for shard in admin.shards().await? {
                if wave.has(&shard.cell, &shard.id) && shard.in_flight > 0 {
                    busy.push(format!(
                        "{}/{}: {} in flight on {}",
                        shard.cell,
                        shard.id,
                        shard.in_flight,
                        admin.base()
                    ));
                }
            }
        }
        if busy.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(busy);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether the wave's shards passed their checks once back.
pub(super) enum Ready {
    /// On every replica, this long after the restore.
    After(Duration),
    /// Not within the timeout: those that had not (`cell/id health on URL`).
    Never(Vec<String>),
}

/// Watches every replica from the restore until the wave's shards are
/// back in rotation with a health check passed since `deployed_at`, on
/// every replica, or the timeout passes. A check that passed before the
/// deploy says nothing of the new build; a replica that still has the
/// shard drained (the restore not yet reached it through the fleet store)
/// is not ready either. A shard of the wave ejected meanwhile goes into
/// `trouble`: the new build failed requests before it was even ready.
pub(super) async fn watch_ready(
    session: &Session,
    wave: &Wave,
    timeout: Duration,
    deployed_at: tokio::time::Instant,
    trouble: &mut BTreeSet<String>,
) -> Result<Ready, DrillError> {
    let started = tokio::time::Instant::now();
    loop {
        let mut unready = Vec::new();
        for admin in session.admins() {
            // Read before the answer: a check younger than this much ran
            // after the deploy ended.
            let since_deploy = deployed_at.elapsed();
            for shard in admin.shards().await? {
                if !wave.has(&shard.cell, &shard.id) {
                    continue;
                }
                let name = format!("{}/{}", shard.cell, shard.id);
                if shard.ejected {
                    trouble.insert(format!("{name} ejected on {}", admin.base()));
                }
                let checked_since = shard
                    .last_check_age_ms
                    .is_none_or(|age| u128::from(age) < since_deploy.as_millis());
                if shard.drained || !checks_pass(&shard) || !checked_since {
                    unready.push(format!(
                        "{name} {}{} on {}",
                        shard.health,
                        if shard.last_check.as_deref() == Some("fail") {
                            ", last check failed"
                        } else if !checked_since {
                            ", not checked since the deploy"
                        } else {
                            ""
                        },
                        admin.base()
                    ));
                }
            }
        }
        if unready.is_empty() {
            return Ok(Ready::After(started.elapsed()));
        }
        if started.elapsed() >= timeout {
            return Ok(Ready::Never(unready));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until every replica has the wave's shards drained (`drained`
/// true) or not: the replicas still behind at the timeout (`cell/id on
/// URL`).
pub(super) async fn await_drained(
    session: &Session,
    wave: &Wave,
    drained: bool,
    timeout: Duration,
) -> Result<Vec<String>, DrillError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut behind = Vec::new();
        for admin in session.admins() {
            for shard in admin.shards().await? {
                if wave.has(&shard.cell, &shard.id) && shard.drained != drained {
                    behind.push(format!("{}/{} on {}", shard.cell, shard.id, admin.base()));
                }
            }
        }
        if behind.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(behind);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether a shard's health checks pass (a gateway that does not report
/// them: whether it is in rotation).
fn checks_pass(shard: &crate::admin::ShardState) -> bool {
    match (&shard.active, &shard.last_check) {
        (Some(active), Some(last)) => active == "healthy" && last == "pass",
        _ => shard.health == "up",
    }
}

/// Polls every replica until `bake` has passed: the most degraded and
/// fully down tenants in the live blast radius, and any shard of the wave
/// ejected, failing its checks or otherwise out of rotation (into
/// `trouble`).
pub(super) async fn watch_bake(
    session: &Session,
    wave: &Wave,
    bake: Duration,
    trouble: &mut BTreeSet<String>,
) -> Result<Bake, DrillError> {
    let mut observed = Bake::default();
    let deadline = tokio::time::Instant::now() + bake;
    loop {
        for admin in session.admins() {
            let (mut degraded, mut fully_down) = (0, 0);
            for cell in admin.blast().await? {
                if !session.cells().contains_key(&cell.cell) {
                    continue;
                }
                // The live blast radius counts a fully-down tenant as
                // degraded too (a member out); the gates count it once,
                // as fully down, as the load's measure does.
                degraded += cell.degraded.saturating_sub(cell.fully_down);
                fully_down += cell.fully_down;
                observed
                    .fully_down_seen
                    .extend(cell.fully_down_tenants.iter().cloned());
            }
            observed.most_degraded = observed.most_degraded.max(degraded);
            observed.most_fully_down = observed.most_fully_down.max(fully_down);
            for shard in admin.shards().await? {
                if !wave.has(&shard.cell, &shard.id) {
                    continue;
                }
                let name = format!("{}/{}", shard.cell, shard.id);
                if shard.ejected {
                    trouble.insert(format!("{name} ejected on {}", admin.base()));
                } else if !checks_pass(&shard) {
                    trouble.insert(format!(
                        "{name} failing its health checks on {}",
                        admin.base()
                    ));
                } else if shard.health != "up" {
                    trouble.insert(format!("{name} {} on {}", shard.health, admin.base()));
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(observed);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Failed attempts per shard (`cell/id`), summed over every replica.
pub(super) async fn failed_attempts(
    session: &Session,
) -> Result<BTreeMap<String, f64>, DrillError> {
    let mut total: BTreeMap<String, f64> = BTreeMap::new();
    for admin in session.admins() {
        for (shard, failed) in admin.failed_attempts().await? {
            *total.entry(shard).or_insert(0.0) += failed;
        }
    }
    Ok(total)
}
