//! Discovered cells kept current: one task per discovered cell looks at
//! its source (DNS every `discovery.refresh_seconds`; Kubernetes watched,
//! and judged again as often, so a missing shard's grace runs out on
//! time), passes every look through the guard ([`crate::discovery::guard`])
//! and applies what it allows ([`Gateway::apply_membership`]). A look that
//! fails, or that the guard refuses, changes nothing: the last good
//! membership keeps serving. With `[fleet]`, discovery's marks (missing,
//! listed again) go to every replica, so replicas whose own look comes
//! later route alike meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, Weak};
use std::time::SystemTime;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::config::{DiscoverySettings, DiscoverySource};
use crate::discovery::guard::{self, Change, Judged};
use crate::discovery::{DiscoveryError, Found, dns, kubernetes};
use crate::state::Gateway;
use crate::state::discovered::{MembershipRefused, describe};

/// Starts the task that keeps every discovered cell current (nothing
/// without one); it follows reloads (a cell whose source or `[discovery]`
/// changed gets a new task) and ends when `stopped` is raised.
pub fn start(gateway: &Arc<Gateway>, stopped: watch::Receiver<bool>) {
    let snapshot = gateway.snapshot();
    // Supervised even without a discovered cell now: a reload may add one.
    {
        // The start's own look (`Snapshot::load`) answered every cell.
        let mut looks = gateway
            .discovery_looks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for cell in snapshot.memberships.keys() {
            looks.entry(cell.clone()).or_default().last_answer = Some(SystemTime::now());
        }
    }
    for (cell, membership) in snapshot.memberships.iter() {
        tracing::info!(
            cell = %cell,
            source = %membership.source,
            shards = membership.members.len(),
            "discovery: cell's shards found; watching for changes"
        );
    }
    tokio::spawn(supervise(Arc::downgrade(gateway), stopped));
}

/// A task that is aborted when dropped.
struct Aborting(JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Keeps one task per discovered cell of the snapshot served, started
/// again when its source or the `[discovery]` settings change.
async fn supervise(gateway: Weak<Gateway>, mut stopped: watch::Receiver<bool>) {
    let Some(mut reloads) = gateway.upgrade().map(|gateway| gateway.reloads()) else {
        return;
    };
    let mut running: HashMap<(String, String), Aborting> = HashMap::new();
    loop {
        {
            let Some(strong) = gateway.upgrade() else {
                return;
            };
            let snapshot = strong.snapshot();
            let settings = snapshot.config.discovery().clone();
            let wanted: HashMap<(String, String), DiscoverySource> = snapshot
                .memberships
                .iter()
                .map(|(cell, membership)| {
                    let key = (cell.clone(), format!("{} {settings:?}", membership.source));
                    (key, membership.source.clone())
                })
                .collect();
            // A task that ended (it never does on its own, short of a
            // panic) is started again.
            running.retain(|key, task| wanted.contains_key(key) && !task.0.is_finished());
            for (key, source) in wanted {
                running.entry(key.clone()).or_insert_with(|| {
                    Aborting(tokio::spawn(follow(
                        gateway.clone(),
                        key.0,
                        source,
                        settings.clone(),
                    )))
                });
            }
        }
        tokio::select! {
            changed = reloads.changed() => if changed.is_err() { return },
            _ = stopped.changed() => return,
        }
    }
}

/// Follows one cell's source until the task is aborted.
async fn follow(
    gateway: Weak<Gateway>,
    cell: String,
    source: DiscoverySource,
    settings: DiscoverySettings,
) {
    if source.is_dns() {
        poll_dns(gateway, &cell, &source, &settings).await;
    } else {
        watch_kubernetes(gateway, &cell, &source, &settings).await;
    }
}

/// Looks the cell's name up every `refresh_seconds`.
async fn poll_dns(
    gateway: Weak<Gateway>,
    cell: &str,
    source: &DiscoverySource,
    settings: &DiscoverySettings,
) {
    let mut ticks = tokio::time::interval(settings.refresh);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The start (or the reload) has just looked.
    ticks.tick().await;
    let mut resolver = None;
    loop {
        ticks.tick().await;
        let Some(strong) = gateway.upgrade() else {
            return;
        };
        if resolver.is_none() {
            match dns::DnsResolver::new(settings) {
                Ok(made) => resolver = Some(made),
                Err(error) => {
                    observe(&strong, cell, Err(error)).await;
                    continue;
                }
            }
        }
        let Some(resolver) = &resolver else {
            continue;
        };
        let looked = resolver.look(source, settings.zone_from).await;
        observe(&strong, cell, looked).await;
    }
}

/// Watches the service's EndpointSlices, judging the last set seen again
/// every `refresh_seconds` (so a missing shard's grace runs out even when
/// nothing else happens), but only while the watch is healthy.
async fn watch_kubernetes(
    gateway: Weak<Gateway>,
    cell: &str,
    source: &DiscoverySource,
    settings: &DiscoverySettings,
) {
    loop {
        let client = match kubernetes::client(settings).await {
            Ok(client) => client,
            Err(error) => {
                let Some(strong) = gateway.upgrade() else {
                    return;
                };
                observe(&strong, cell, Err(error)).await;
                drop(strong);
                tokio::time::sleep(settings.refresh).await;
                continue;
            }
        };
        let (report, mut reports) = mpsc::channel(16);
        let _watcher = Aborting(tokio::spawn(kubernetes::watch(
            client,
            source.clone(),
            settings.clone(),
            report,
        )));
        let mut ticks = tokio::time::interval(settings.refresh);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticks.tick().await;
        let mut last: Option<Vec<Found>> = None;
        loop {
            tokio::select! {
                reported = reports.recv() => {
                    let Some(reported) = reported else {
                        // The watch ended: a new client and a new watch.
                        break;
                    };
                    let Some(strong) = gateway.upgrade() else {
                        return;
                    };
                    last = reported.as_ref().ok().cloned();
                    observe(&strong, cell, reported).await;
                }
                _ = ticks.tick() => {
                    let Some(strong) = gateway.upgrade() else {
                        return;
                    };
                    if let Some(found) = &last {
                        judge_and_apply(&strong, cell, found).await;
                    }
                }
            }
        }
        tokio::time::sleep(settings.refresh).await;
    }
}

/// One look's outcome: counted, noted for the admin API, and judged.
async fn observe(gateway: &Arc<Gateway>, cell: &str, looked: Result<Vec<Found>, DiscoveryError>) {
    let answered = looked.is_ok();
    gateway.metrics.discovery.looked(cell, answered);
    let now = SystemTime::now();
    let was_failing = {
        let mut looks = gateway
            .discovery_looks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let status = looks.entry(cell.to_owned()).or_default();
        let was_failing = status.last_problem.is_some();
        match &looked {
            Ok(_) => {
                status.last_answer = Some(now);
                status.last_problem = None;
            }
            // The time kept is when the looks began to fail; the reason,
            // the latest one.
            Err(error) => {
                let since = status
                    .last_problem
                    .as_ref()
                    .map_or(now, |(since, _)| *since);
                status.last_problem = Some((since, error.to_string()));
            }
        }
        was_failing
    };
    match looked {
        Err(error) => {
            if !was_failing {
                tracing::warn!(cell = %cell, %error, "discovery: the source gives no membership; the last good one keeps serving");
            }
        }
        Ok(found) => {
            if was_failing {
                tracing::info!(cell = %cell, shards = found.len(), "discovery: the source answers again");
            }
            judge_and_apply(gateway, cell, &found).await;
        }
    }
}

/// Judges `found` against the cell's membership and applies what the
/// guard allows.
async fn judge_and_apply(gateway: &Arc<Gateway>, cell: &str, found: &[Found]) {
    let snapshot = gateway.snapshot();
    let (Some(membership), Some(settings)) =
        (snapshot.memberships.get(cell), snapshot.config.cell(cell))
    else {
        return;
    };
    let written: Vec<&str> = settings
        .static_shards()
        .iter()
        .map(|shard| shard.id.as_str())
        .collect();
    let discovery = snapshot.config.discovery();
    let rules = guard::Rules {
        grace: discovery.removal_grace,
        max_removed_fraction: discovery.max_removed_fraction,
    };
    let allow_migration = discovery.allow_migration;
    let judged = guard::judge(
        &membership.members,
        &written,
        found,
        rules,
        Instant::now(),
        SystemTime::now(),
    );
    let change = match judged {
        Judged::Unchanged => {
            // What the source says now is what is served: a refusal of
            // an earlier look no longer stands.
            standing_refusal_over(gateway, cell);
            drop(snapshot);
            listed_not_missing(gateway, cell).await;
            return;
        }
        Judged::Refused(refusal) => {
            refused(gateway, cell, refusal.to_string());
            return;
        }
        Judged::Change(change) => change,
    };
    let current = membership.members.clone();
    drop(snapshot);
    match apply(
        gateway,
        cell,
        change.clone(),
        &current,
        allow_migration,
        true,
    )
    .await
    {
        Ok(()) => {}
        // Another change got there first: the next look judges again.
        Err(MembershipRefused::Stale) => return,
        Err(refusal) => {
            refused(gateway, cell, refusal.to_string());
            // What does not move anybody still applies: shards that went
            // missing are out of rotation, returned ones back in it (and
            // the refusal of the rest stays on show).
            let rotation = change.rotation_only(&current);
            if !rotation.is_empty()
                && let Err(refusal) = apply(gateway, cell, rotation, &current, false, false).await
            {
                tracing::warn!(cell = %cell, %refusal, "discovery: cannot apply even the rotation changes");
            }
        }
    }
    listed_not_missing(gateway, cell).await;
}

/// A shard this replica's own source lists, and its membership holds as
/// listed, is in rotation here: a missing mark another replica published
/// (its view, or a mark left in the store by a replica that restarted
/// before the shard came back) is cleared here, and for the fleet, so a
/// stale mark never keeps a listed shard out for good. (A replica whose
/// own source lists the shard as missing keeps it out whatever marks say.)
async fn listed_not_missing(gateway: &Gateway, cell: &str) {
    let snapshot = gateway.snapshot();
    let Some(membership) = snapshot.memberships.get(cell) else {
        return;
    };
    for member in membership.members.iter().filter(|m| m.missing.is_none()) {
        let Some(shard) = snapshot.find_shard(cell, &member.id) else {
            continue;
        };
        let marked = shard
            .health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .missing;
        if marked {
            tracing::warn!(cell = %cell, shard = %member.id, "discovery: a missing mark from another replica is lifted; this replica's source lists the shard");
            crate::fleet::mark_missing(gateway, shard, false).await;
        }
    }
}

/// Forgets a refusal that no longer stands.
fn standing_refusal_over(gateway: &Gateway, cell: &str) {
    let mut looks = gateway
        .discovery_looks
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(status) = looks.get_mut(cell) {
        status.last_refusal = None;
    }
}

/// Applies `change` off the async workers (placing every tenant of a large
/// cell twice takes a while), logs and counts it, and shares discovery's
/// marks with the fleet; `whole` when it is all the look asked for (a
/// standing refusal is then over).
async fn apply(
    gateway: &Arc<Gateway>,
    cell: &str,
    change: Change,
    judged_against: &[crate::discovery::Member],
    allow_migration: bool,
    whole: bool,
) -> Result<(), MembershipRefused> {
    let applied = {
        let gateway = Arc::clone(gateway);
        let owned = cell.to_owned();
        let change = change.clone();
        let judged_against = judged_against.to_vec();
        tokio::task::spawn_blocking(move || {
            gateway.apply_membership(&owned, &change, &judged_against, allow_migration)
        })
        .await
        .map_err(|error| MembershipRefused::Panicked(error.to_string()))?
    }?;
    gateway.metrics.discovery.changed(cell, true);
    gateway.metrics.discovery.moved(cell, applied.changed);
    if whole {
        // Everything the source said now applies: no refusal stands.
        let mut looks = gateway
            .discovery_looks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        looks.entry(cell.to_owned()).or_default().last_refusal = None;
    }
    if change.changes_placement() {
        tracing::warn!(
            cell = %cell,
            change = %describe(&change),
            tenants_moved = applied.changed,
            of = applied.tenants,
            members_gained = applied.members_gained,
            members_lost = applied.members_lost,
            "discovery: placement changed"
        );
    } else {
        tracing::warn!(cell = %cell, change = %describe(&change), "discovery: membership changed; nobody moved");
    }
    if gateway.fleet.is_some() {
        let snapshot = gateway.snapshot();
        // An added shard may be one removed before, whose old mark the
        // store still holds: it is listed now.
        let marks = change
            .went_missing
            .iter()
            .map(|id| (id, true))
            .chain(change.returned.iter().map(|id| (id, false)))
            .chain(change.added.iter().map(|id| (id, false)));
        for (id, missing) in marks {
            if let Some(shard) = snapshot.find_shard(cell, id) {
                crate::fleet::mark_missing(gateway, shard, missing).await;
            }
        }
    }
    Ok(())
}

/// A refused change: counted every time, warned about once per reason.
fn refused(gateway: &Gateway, cell: &str, why: String) {
    gateway.metrics.discovery.changed(cell, false);
    let mut looks = gateway
        .discovery_looks
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let status = looks.entry(cell.to_owned()).or_default();
    if status.last_refusal.as_ref().map(|(_, held)| held) != Some(&why) {
        tracing::warn!(cell = %cell, refused = %why, "discovery: membership change refused");
    }
    status.last_refusal = Some((SystemTime::now(), why));
}
