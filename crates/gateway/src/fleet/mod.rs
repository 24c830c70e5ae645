//! A fleet of replicas as one gateway (`[fleet]`): poison containment's
//! strikes and suspects, and the operators' shard marks, shared through
//! the fleet's Redis server ([`crate::store::fleet`]).
//!
//! The request path stays local. A request reads only this replica's
//! memory ([`crate::health::quarantine::Suspects`], each shard's health);
//! Redis is written on a crash-like failure (one script that records the
//! strike and answers with the fleet's verdict on the tenant, within
//! `fleet.timeout_ms`) and on an operator's action, and read by a task
//! that looks every `fleet.sync_ms` for a changed version and applies
//! what other replicas did. Whatever Redis does (refuses, stalls, answers
//! garbage, restarts empty), a replica keeps serving on what it knows
//! itself, says so once, and writes its marks and suspects back when the
//! store answers again, so nothing an operator did is lost.
//!
//! Passive ejection, active checks and in-flight caps stay per replica:
//! each replica sees its own traffic, and its own view is what keeps its
//! requests away from a bad shard fastest.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::health::MarkOrigin;
use crate::health::quarantine::{Marked, Rules, Struck};
use crate::state::{Gateway, ShardRuntime};
use crate::store::fleet::{Fault, FleetStore, Looked, MarkKind, SharedMark, StrikeCall, storable};

/// How long start-up waits for the fleet's state before serving on its own
/// (a restarted replica learns the marks and suspects first when it can).
const FIRST_LOOK: Duration = Duration::from_secs(1);

/// Starts the task that applies other replicas' changes here, after one
/// look at the fleet's state (bounded by [`FIRST_LOOK`]); nothing without
/// `[fleet]`. The task ends with the gateway.
pub async fn start(gateway: &Arc<Gateway>) {
    let Some(fleet) = &gateway.fleet else {
        gateway.metrics.fleet.store_up.set(0);
        return;
    };
    fleet.start();
    tracing::info!(
        store = %fleet.address(),
        replica = fleet.replica(),
        "fleet: containment and shard marks shared with every replica of this store"
    );
    // The connection is made by its own task: wait for it (briefly), then
    // look once.
    let deadline = Instant::now() + FIRST_LOOK;
    while !fleet.is_up() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    look(gateway, fleet).await;
    let every = gateway
        .snapshot()
        .config
        .fleet
        .as_ref()
        .map_or(Duration::from_millis(250), |fleet| fleet.sync_every);
    tokio::spawn(run(Arc::downgrade(gateway), every));
}

/// Looks every `every` until the gateway is gone.
async fn run(gateway: Weak<Gateway>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        let Some(fleet) = gateway.fleet.clone() else {
            return;
        };
        look(&gateway, &fleet).await;
    }
}

/// One look: applies the fleet's state when it changed, and writes back
/// what this replica holds that the store does not (marks and suspects
/// set while it was unreachable, or all of them when it restarted empty).
async fn look(gateway: &Gateway, fleet: &FleetStore) {
    let held = fleet
        .held
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let looked = fleet.look((&held.0, &held.1)).await;
    let state = match looked {
        Ok(Looked::Unchanged) => None,
        Ok(Looked::Changed(state)) => Some(state),
        Err(fault) => {
            went_down(gateway, fleet, fault, "sync");
            return;
        }
    };
    answered(gateway, fleet);
    // After calls the store did not answer, what was set here meanwhile
    // goes back (the later of two marks wins there).
    let mut write_back = fleet.write_back_due.swap(false, Ordering::Relaxed);
    if let Some(state) = state {
        // A store with another epoch is new to this replica (started
        // empty, or restarted empty), and so is one whose version went
        // back (a failover to a replica that missed writes): everything
        // held here goes back, the suspects it shared included.
        let went_back = matches!(
            (held.1.parse::<u64>(), state.version.parse::<u64>()),
            (Ok(before), Ok(now)) if now < before
        );
        let new_store = state.epoch != held.0 || went_back;
        if new_store {
            gateway.suspects.unshare_all();
        }
        write_back |= new_store;
        apply_marks(gateway, &state.marks, &mut write_back);
        let now = Instant::now();
        for suspect in &state.suspects {
            if gateway.suspects.adopt(suspect, now) {
                tracing::warn!(tenant = %suspect.tenant, cell = %suspect.cell, by = %suspect.by, "tenant is suspect of poisoning its shards (marked through another replica)");
            }
        }
        if !new_store {
            let shared: HashSet<&str> = state
                .suspects
                .iter()
                .map(|suspect| suspect.tenant.as_str())
                .collect();
            for tenant in gateway.suspects.forget_unshared(&shared, now) {
                tracing::info!(tenant = %tenant, "tenant's quarantine lifted through another replica (or ended)");
            }
        }
        *fleet.held.lock().unwrap_or_else(PoisonError::into_inner) = (state.epoch, state.version);
    }
    if write_back {
        write_back_marks(gateway, fleet).await;
    }
    write_back_suspects(gateway, fleet).await;
    retry_clears(gateway, fleet).await;
}

/// Applies each of the fleet's marks that is later than the one held
/// here; notes in `write_back` a mark held here that is later than the
/// fleet's (set while it was unreachable).
fn apply_marks(gateway: &Gateway, marks: &[SharedMark], write_back: &mut bool) {
    let snapshot = gateway.snapshot();
    let now = Instant::now();
    for mark in marks {
        let Some(shard) = snapshot.find_shard(&mark.cell, &mark.id) else {
            continue;
        };
        let mut health = shard.health.lock().unwrap_or_else(PoisonError::into_inner);
        // The later mark wins; one of the same millisecond by replica id,
        // as the store orders them.
        let held = health
            .mark_origin
            .as_ref()
            .map(|origin| (origin.at_ms, origin.by.as_str()));
        match held.map(|held| held.cmp(&(mark.at_ms, mark.by.as_str()))) {
            Some(std::cmp::Ordering::Greater) => *write_back = true,
            // This replica's own mark, as the store merged it with the
            // other kind's flags it kept (an operator's or discovery's):
            // taken as the store holds it.
            Some(std::cmp::Ordering::Equal) => {
                health.mark(mark.failed, mark.drained, now);
                health.set_missing(mark.missing || missing_here(&snapshot, mark), now);
            }
            _ => {
                let changed = (health.failed, health.drained, health.missing)
                    != (mark.failed, mark.drained, mark.missing);
                health.mark(mark.failed, mark.drained, now);
                // Another replica's mark never puts back in rotation a
                // shard this replica's own source lists as missing: it
                // clears that itself when its source lists it again.
                health.set_missing(mark.missing || missing_here(&snapshot, mark), now);
                health.mark_origin = Some(MarkOrigin {
                    by: mark.by.clone(),
                    at_ms: mark.at_ms,
                });
                drop(health);
                if changed {
                    tracing::warn!(cell = %mark.cell, shard = %mark.id, failed = mark.failed, drained = mark.drained, missing = mark.missing, by = %mark.by, "shard state changed through another replica");
                }
            }
        }
    }
}

/// Whether this replica's own discovery holds the shard of `mark` missing.
fn missing_here(snapshot: &crate::state::Snapshot, mark: &SharedMark) -> bool {
    snapshot
        .memberships
        .get(&mark.cell)
        .and_then(|membership| membership.member(&mark.id))
        .is_some_and(|member| member.missing.is_some())
}

/// Writes every mark set here to the store (the later of two wins there).
async fn write_back_marks(gateway: &Gateway, fleet: &FleetStore) {
    let snapshot = gateway.snapshot();
    for shard in snapshot.all_shards() {
        let Some(mark) = shared_mark(shard) else {
            continue;
        };
        if let Err(fault) = fleet.mark(&mark, MarkKind::All).await {
            went_down(gateway, fleet, fault, "mark");
            return;
        }
    }
}

/// The shard's mark as the fleet holds it, if an operator set one (and
/// its ids can be kept in the store).
fn shared_mark(shard: &ShardRuntime) -> Option<SharedMark> {
    if !(storable(&shard.cell) && storable(&shard.id)) {
        return None;
    }
    let health = shard.health.lock().unwrap_or_else(PoisonError::into_inner);
    let origin = health.mark_origin.as_ref()?;
    Some(SharedMark {
        cell: shard.cell.clone(),
        id: shard.id.clone(),
        failed: health.failed,
        drained: health.drained,
        missing: health.missing,
        at_ms: origin.at_ms,
        by: origin.by.clone(),
    })
}

/// Writes back the suspects the store does not hold.
async fn write_back_suspects(gateway: &Gateway, fleet: &FleetStore) {
    for suspect in gateway.suspects.unshared(Instant::now(), fleet.replica()) {
        if !(storable(&suspect.tenant) && suspect.members.iter().all(|m| storable(m))) {
            continue;
        }
        match fleet.write_suspect(&suspect).await {
            Ok(()) => gateway.suspects.shared(&suspect.tenant),
            Err(fault) => {
                went_down(gateway, fleet, fault, "sync");
                return;
            }
        }
    }
}

/// Clears in the store the tenants an operator cleared here while it was
/// unreachable.
async fn retry_clears(gateway: &Gateway, fleet: &FleetStore) {
    let pending = std::mem::take(
        &mut *fleet
            .pending_clears
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    for (at, tenant) in pending.iter().enumerate() {
        if let Err(fault) = fleet.clear(tenant).await {
            went_down(gateway, fleet, fault, "clear");
            fleet
                .pending_clears
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(&pending[at..]);
            return;
        }
    }
}

/// Notes that the store gave no answer to `operation`: counted, and the
/// first of an outage logged (once) and shown on the status page.
fn went_down(gateway: &Gateway, fleet: &FleetStore, fault: Fault, operation: &str) {
    gateway.metrics.fleet.fallback(operation);
    fleet.write_back_due.store(true, Ordering::Relaxed);
    // One slow answer on the request path (`fleet.timeout_ms` is a few
    // milliseconds) is counted, not called an outage: the looks, which
    // wait longer, say whether the store is down.
    if fault == Fault::Timeout && matches!(operation, "strike" | "consult" | "withdraw") {
        return;
    }
    let mut down = fleet
        .down_since
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if down.is_none() {
        *down = Some(SystemTime::now());
        gateway.metrics.fleet.store_up.set(0);
        tracing::warn!(
            store = %fleet.address(),
            fault = fault.name(),
            "fleet store unreachable: containment and shard marks are this replica's own until it answers (marks and suspects set meanwhile are written back then)"
        );
    }
}

/// Notes that the store answered: the end of an outage is logged once.
fn answered(gateway: &Gateway, fleet: &FleetStore) {
    let mut down = fleet
        .down_since
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(since) = down.take() {
        let seconds = since.elapsed().map_or(0, |outage| outage.as_secs());
        tracing::info!(store = %fleet.address(), outage_seconds = seconds, "fleet store answers again: containment and shard marks are shared again");
    }
    gateway.metrics.fleet.store_up.set(1);
}

/// Since when the fleet's store has not answered, if it has not (for the
/// status page's banner).
pub fn down_since(gateway: &Gateway) -> Option<SystemTime> {
    let fleet = gateway.fleet.as_ref()?;
    *fleet
        .down_since
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Records one of the tenant's own crash-like failures fleet-wide, after
/// it was recorded here, and takes the fleet's verdict: the strikes of
/// every replica count toward `routing.poison_after`, so R replicas
/// together crash no more members than one. Returns what the verdict did
/// here (`Some(Marked::New)` when it made the tenant suspect), or `None`
/// when the store gave no answer within `fleet.timeout_ms` (the local
/// decision stands, and the suspect, if any, is written back later).
pub async fn strike(gateway: &Gateway, struck: Struck<'_>, rules: Rules) -> Option<Option<Marked>> {
    let fleet = gateway.fleet.as_ref()?;
    if ![struck.cell, struck.tenant, struck.shard]
        .iter()
        .all(|id| storable(id))
    {
        return None;
    }
    let call = StrikeCall {
        cell: struck.cell,
        tenant: struck.tenant,
        member: struck.shard,
        request: struck.request,
        stopped: struck.stopped,
        poison_after: rules.poison_after,
        strike_life: rules.strike_life,
        quarantine: rules.quarantine,
    };
    match fleet.strike(call).await {
        Ok(verdict) => {
            answered(gateway, fleet);
            Some(gateway.suspects.adopt_verdict(
                struck.cell,
                struck.tenant,
                &verdict,
                Instant::now(),
                rules.strike_life,
            ))
        }
        Err(fault) => {
            went_down(gateway, fleet, fault, "strike");
            None
        }
    }
}

/// Reads `tenant`'s standing from the fleet into this replica's suspects,
/// before one of its requests goes beyond its first members.
/// `tenant` is its id and its hash
/// ([`crate::tenants::Tenant::id_hash`]).
pub async fn consult(
    gateway: &Gateway,
    cell: &str,
    (tenant, hash): (&str, u64),
    strike_life: Duration,
) {
    let Some(fleet) = &gateway.fleet else {
        return;
    };
    if !storable(tenant) {
        return;
    }
    match fleet.standing(tenant).await {
        Ok(verdict) => {
            answered(gateway, fleet);
            if !verdict.suspect && verdict.members.is_empty() {
                fleet.note_clean(hash);
            }
            if verdict.suspect || !verdict.members.is_empty() {
                gateway
                    .suspects
                    .adopt_verdict(cell, tenant, &verdict, Instant::now(), strike_life);
            }
        }
        Err(fault) => went_down(gateway, fleet, fault, "consult"),
    }
}

/// Takes back, fleet-wide, the strikes of a request of `tenant` that was
/// answered after all: off the request path, in a task of its own.
pub fn withdraw(gateway: &Arc<Gateway>, tenant: &str, request: u64) {
    if gateway.fleet.is_none() {
        return;
    }
    let gateway = Arc::clone(gateway);
    let tenant = tenant.to_owned();
    tokio::spawn(async move {
        let Some(fleet) = &gateway.fleet else {
            return;
        };
        if let Err(fault) = fleet.withdraw(&tenant, request).await {
            went_down(&gateway, fleet, fault, "withdraw");
        }
    });
}

/// Whether an operator's action reached the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// No `[fleet]`: this replica is the gateway.
    Alone,
    /// Every replica applies it within `fleet.sync_ms`.
    Fleet,
    /// Applied here only: the store gave no answer; it is written back
    /// when the store answers again.
    Pending,
    /// Not applied in the fleet: the store holds a later mark of the
    /// shard (another replica's), which this replica takes at its next look.
    Superseded,
    /// Applied here only: the shard's or cell's id cannot be kept in the
    /// store (see [`crate::store::fleet::storable`]).
    Unshareable,
}

impl Reach {
    /// Its name in the admin API's answers.
    pub fn name(self) -> &'static str {
        match self {
            Reach::Alone => "replica",
            Reach::Fleet => "fleet",
            Reach::Pending => "replica (fleet store unreachable: written back when it answers)",
            Reach::Superseded => {
                "replica (the fleet store holds a later mark of this shard, which every replica takes)"
            }
            Reach::Unshareable => {
                "replica (this id cannot be shared through the fleet store: visible ASCII without ',' only)"
            }
        }
    }
}

/// Sets an operator's mark on `shard` here, and for the fleet.
pub async fn mark(gateway: &Gateway, shard: &ShardRuntime, failed: bool, drained: bool) -> Reach {
    publish(gateway, shard, MarkKind::Operator, |health, now| {
        health.mark(failed, drained, now);
    })
    .await
}

/// Sets discovery's mark on `shard` (its source no longer lists it, or
/// lists it again) here, and for the fleet, so replicas whose own look
/// comes later route alike meanwhile.
pub async fn mark_missing(gateway: &Gateway, shard: &ShardRuntime, missing: bool) -> Reach {
    publish(gateway, shard, MarkKind::Discovery, |health, now| {
        health.set_missing(missing, now);
    })
    .await
}

/// Changes `shard`'s marks here with `change`, and sends them all to the
/// fleet (the later of two wins there).
async fn publish(
    gateway: &Gateway,
    shard: &ShardRuntime,
    kind: MarkKind,
    change: impl FnOnce(&mut crate::health::HealthState, Instant),
) -> Reach {
    let at_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    let by = gateway.fleet.as_ref().map_or_else(
        || "this replica".to_owned(),
        |fleet| fleet.replica().to_owned(),
    );
    {
        let mut health = shard.health.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut health, Instant::now());
        // Two marks within one millisecond: the second still wins here and
        // in the store.
        let at_ms = health
            .mark_origin
            .as_ref()
            .map_or(at_ms, |origin| at_ms.max(origin.at_ms + 1));
        health.mark_origin = Some(MarkOrigin { by, at_ms });
    }
    let Some(fleet) = &gateway.fleet else {
        return Reach::Alone;
    };
    let Some(mark) = shared_mark(shard) else {
        return Reach::Unshareable;
    };
    match fleet.mark(&mark, kind).await {
        Ok(stands) => {
            answered(gateway, fleet);
            if stands {
                Reach::Fleet
            } else {
                Reach::Superseded
            }
        }
        Err(fault) => {
            went_down(gateway, fleet, fault, "mark");
            Reach::Pending
        }
    }
}

/// Lifts `tenant`'s quarantine here and for the fleet; whether it was
/// suspect (here or there), and how far the lift reached.
pub async fn clear(gateway: &Gateway, tenant: &str) -> (bool, Reach) {
    let here = gateway.suspects.clear(tenant, Instant::now());
    let Some(fleet) = &gateway.fleet else {
        return (here, Reach::Alone);
    };
    if !storable(tenant) {
        return (here, Reach::Unshareable);
    }
    match fleet.clear(tenant).await {
        Ok(there) => {
            answered(gateway, fleet);
            (here || there, Reach::Fleet)
        }
        Err(fault) => {
            went_down(gateway, fleet, fault, "clear");
            fleet
                .pending_clears
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(tenant.to_owned());
            (here, Reach::Pending)
        }
    }
}
