//! Poison containment's memory: each tenant's *strikes* (crash-like
//! failures of its requests: reset, closed before a complete answer, or
//! timed out), the members its requests are trying for the first time
//! while it has strikes, and the tenants marked *suspect* because their
//! strikes reached `routing.poison_after` distinct members.
//!
//! Strikes are shared by all of a tenant's requests and recorded as they
//! happen, and every attempt asks first ([`Suspects::standing`] and
//! [`Suspects::begin`]), so requests in flight together cannot each crash
//! `poison_after` members of their own: once a tenant has a strike, the
//! members it may reach are those it struck plus those a request of it is
//! already waiting on, and only while they number fewer than
//! `poison_after` may a new one be tried (with `routing.poison_spread =
//! "contained"`, [`super::spread`] holds every tenant to that before any
//! strike too, counting the members [`Suspects::struck`] names, and no
//! probes are kept here). A strike counts for
//! `routing.request_timeout` (the longest any request that was in flight
//! with the one that struck can last), and a request that was answered
//! after striking takes its strikes back: what a member answered was not
//! poison. The failure of a member that is failing other tenants' requests
//! too is the member's, not the tenant's ([`Suspects::shared_fault`]).
//!
//! A suspect tenant stays suspect for `routing.quarantine_seconds` after
//! its last strike, unless an operator clears it. The request path asks
//! [`Suspects::any`] (one atomic load) on every request and looks a tenant
//! up only when some tenant has strikes or is suspect, so a gateway with
//! neither pays nothing more. Even then a tenant without an entry is
//! answered without the lock: a filter of atomic counts by a hash of the
//! tenant id says which tenants may have one, so one tenant striking
//! every few seconds does not put every other tenant's requests on a
//! global lock. Every transition takes `now` explicitly, so expiry is
//! tested with a paused clock.

use std::collections::HashMap;
use std::collections::hash_map::{Entry as Slot, RandomState};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError, TryLockError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

// The fleet's side (`[fleet]`): adopting the store's verdicts and
// suspects, and what goes back to it.
mod fleet;

/// One suspect tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspect {
    /// The tenant's cell.
    pub cell: String,
    /// The members its requests failed crash-like on (shard ids, sorted):
    /// while suspect, the tenant is served by these alone.
    pub shards: Vec<String>,
    /// Requests stopped by containment.
    pub stops: u64,
    /// Crash-like failures counted against it.
    pub strikes: u64,
    /// When it was first marked (wall clock, for people).
    pub since: SystemTime,
    /// When it was last stopped or struck (wall clock, for people).
    pub last: SystemTime,
    /// When the quarantine ends.
    pub until: Instant,
    /// The fleet's store holds it (`[fleet]`): marked through it, or
    /// learned from it. A suspect marked while the store was unreachable
    /// is not, and is written back when it returns.
    pub shared: bool,
    /// The replica that marked it, when learned from the fleet.
    pub by: Option<String>,
}

/// What containment decides by, from `[routing]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// How many distinct members struck make a tenant suspect
    /// (`routing.poison_after`, above 0: at 0 nothing is recorded).
    pub poison_after: usize,
    /// How long a strike counts toward `poison_after`
    /// (`routing.request_timeout`).
    pub strike_life: Duration,
    /// How long a tenant stays suspect after its last strike
    /// (`routing.quarantine_seconds`).
    pub quarantine: Duration,
}

/// One crash-like failure that was the tenant's own, as recorded.
#[derive(Debug, Clone, Copy)]
pub struct Struck<'s> {
    /// The tenant's cell.
    pub cell: &'s str,
    /// The tenant.
    pub tenant: &'s str,
    /// The member it failed on.
    pub shard: &'s str,
    /// The request that failed ([`Suspects::request`]).
    pub request: u64,
    /// The request has now failed crash-like on `poison_after` members of
    /// its own, and is stopped.
    pub stopped: bool,
}

/// What one crash-like failure did to its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// The tenant became suspect (the request that struck is stopped).
    New,
    /// The tenant was suspect already; its quarantine starts again.
    Again,
}

/// Where a tenant with strikes, or a suspect one, may be served now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// The tenant is suspect.
    pub suspect: bool,
    /// The only members its next attempt may go to, when it is narrowed:
    /// a suspect's struck members, or, for a tenant with strikes, the
    /// members it struck or is being tried on once they number
    /// `poison_after`.
    pub only: Option<Vec<String>>,
}

/// Whether an attempt may begin on a member ([`Suspects::begin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begun {
    /// Nothing to track: the tenant has no strikes, is suspect (narrowed
    /// by [`Standing`]), or struck the member already.
    Free,
    /// The attempt is a probe of a member the tenant has not struck: end
    /// it with [`Suspects::end`] once its outcome is known.
    Probe,
    /// The tenant has reached `poison_after` members with strikes and
    /// probes: it may not try another one now.
    Refused,
}

/// One strike that counts toward `poison_after`.
#[derive(Debug, Clone)]
struct Strike {
    shard: String,
    /// When it stops counting.
    until: Instant,
    /// The request that struck.
    request: u64,
}

/// Everything containment holds about one tenant.
#[derive(Debug)]
struct Entry {
    cell: String,
    /// Strikes while not suspect (folded into the suspect when it is).
    strikes: Vec<Strike>,
    /// Members a request of the tenant is being tried on for the first
    /// time since it has strikes, with how many attempts.
    probes: Vec<(String, u32)>,
    /// With `[fleet]`: the members the fleet's strikes named at its last
    /// verdict on the tenant (other replicas' included), until when they
    /// count here. They narrow where the tenant may go, as strikes do, but
    /// only this replica's own strikes make it suspect here: the fleet's
    /// decide in the store, and a strike another replica took back there
    /// is gone here at the next verdict.
    fleet_struck: (Vec<String>, Instant),
    suspect: Option<Suspect>,
}

impl Entry {
    fn new(cell: &str) -> Self {
        Self {
            cell: cell.to_owned(),
            strikes: Vec::new(),
            probes: Vec::new(),
            fleet_struck: (Vec::new(), Instant::now()),
            suspect: None,
        }
    }

    /// The fleet's struck members that count at `now`.
    fn fleet_struck(&self, now: Instant) -> &[String] {
        if self.fleet_struck.1 > now {
            &self.fleet_struck.0
        } else {
            &[]
        }
    }

    /// Drops what has run out at `now`; whether nothing is left.
    fn expire(&mut self, now: Instant) -> bool {
        if self
            .suspect
            .as_ref()
            .is_some_and(|suspect| suspect.until <= now)
        {
            self.suspect = None;
        }
        self.strikes.retain(|strike| strike.until > now);
        if self.fleet_struck.1 <= now {
            self.fleet_struck.0.clear();
        }
        self.suspect.is_none()
            && self.strikes.is_empty()
            && self.probes.is_empty()
            && self.fleet_struck.0.is_empty()
    }

    /// The distinct members struck (here, or per the fleet), then those
    /// probed.
    fn reached(&self, now: Instant) -> Vec<String> {
        let mut reached: Vec<String> = Vec::new();
        let struck = self.strikes.iter().map(|strike| &strike.shard);
        let struck = struck.chain(self.fleet_struck(now));
        for shard in struck.chain(self.probes.iter().map(|(shard, _)| shard)) {
            if !reached.contains(shard) {
                reached.push(shard.clone());
            }
        }
        reached
    }
}

/// A member's crash-like failures of each of the last two tenants it
/// failed, as a run: the first and the last of failures no further than
/// the window apart. Enough to know whether any tenant other than a given
/// one was failing on it before a given moment; the latest failure alone
/// would forget the one before an attempt was sent as soon as another
/// came after.
type Recent = Vec<FailingRun>;

/// One tenant's run of failures on a member.
#[derive(Debug)]
struct FailingRun {
    tenant: String,
    first: Instant,
    last: Instant,
}

/// Every tenant with strikes or suspect, by tenant id, and each member's
/// recent failures.
#[derive(Debug)]
pub struct Suspects {
    /// Entries in `tenants`, expired ones included until they are swept:
    /// the one thing every request reads.
    count: AtomicUsize,
    /// How many entries of `tenants` hash to each slot ([`SLOTS`] of
    /// them), changed under its lock as entries come and go: a tenant
    /// whose slot counts none has no entry, which its requests learn
    /// without the lock. A tenant sharing a slot with one that has an
    /// entry only looks itself up under the lock, as every tenant did.
    slots: Box<[AtomicU32]>,
    /// Keyed afresh per gateway, so tenant ids cannot be picked to share
    /// one slot.
    hasher: RandomState,
    tenants: Mutex<HashMap<String, Entry>>,
    /// By shard (its window key).
    recent: Mutex<HashMap<String, Recent>>,
    /// The last request token handed out.
    requests: AtomicU64,
    /// When every expired entry is swept next, in nanoseconds since
    /// `epoch` (0: at the next lookup): an atomic, so that deciding
    /// whether to sweep takes no lock.
    next_sweep: AtomicU64,
    /// What `next_sweep` counts from.
    epoch: Instant,
}

/// How often a lookup of a tenant without an entry sweeps every expired
/// entry: a tenant gone quiet must not keep every request looking up.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The filter's slots (a power of two): with n tenants having entries, a
/// tenant without one shares a slot with one of them with a chance of
/// about n in 1024, and then takes the lock to learn that it has none.
const SLOTS: usize = 1024;

impl Default for Suspects {
    fn default() -> Self {
        Self {
            count: AtomicUsize::new(0),
            slots: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
            hasher: RandomState::new(),
            tenants: Mutex::default(),
            recent: Mutex::default(),
            requests: AtomicU64::new(0),
            next_sweep: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl Suspects {
    /// No suspects.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether any tenant may have strikes or be suspect (expired entries
    /// count until a lookup or a listing sweeps them).
    #[inline]
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// A token naming one request's strikes, so that they can be taken
    /// back ([`Suspects::withdraw`]).
    pub fn request(&self) -> u64 {
        self.requests.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The tenant's entry if it is suspect at `now`; an expired entry is
    /// removed.
    pub fn get(&self, tenant: &str, now: Instant) -> Option<Suspect> {
        if !self.listed(tenant) {
            return None;
        }
        let mut tenants = self.lock();
        let entry = tenants.get_mut(tenant)?;
        let suspect = entry.suspect.clone().filter(|suspect| suspect.until > now);
        self.sweep(&mut tenants, tenant, now);
        suspect
    }

    /// Where `tenant` may be served at `now`; `None` when it has neither
    /// strikes nor a quarantine (it may use any member).
    pub fn standing(&self, tenant: &str, now: Instant, poison_after: usize) -> Option<Standing> {
        if !self.listed(tenant) {
            // No entry, known without the lock. Such lookups also sweep
            // the entries of tenants gone quiet, now and then, when
            // nobody holds the lock: they never wait for it.
            if self.sweep_due(now) {
                let mut tenants = match self.tenants.try_lock() {
                    Ok(tenants) => tenants,
                    Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                    Err(TryLockError::WouldBlock) => return None,
                };
                self.expire_all(&mut tenants, now);
            }
            return None;
        }
        let mut tenants = self.lock();
        if self.sweep(&mut tenants, tenant, now) {
            if self.sweep_due(now) {
                self.expire_all(&mut tenants, now);
            }
            return None;
        }
        let entry = tenants.get(tenant)?;
        Some(match &entry.suspect {
            Some(suspect) => Standing {
                suspect: true,
                only: Some(suspect.shards.clone()),
            },
            None => {
                let reached = entry.reached(now);
                Standing {
                    suspect: false,
                    only: (reached.len() >= poison_after).then_some(reached),
                }
            }
        })
    }

    /// Asks, as an attempt of `tenant` on `shard` begins at `now`, whether
    /// it may: a tenant with strikes may try a member it has not struck
    /// only while the members it struck or is trying number fewer than
    /// `poison_after`. Decided under the lock, so racing requests cannot
    /// together go past it.
    pub fn begin(&self, tenant: &str, shard: &str, now: Instant, poison_after: usize) -> Begun {
        // Nothing to track for a tenant without an entry. Its slot is
        // counted under the lock before the entry's strike is let go, so
        // this load misses no strike the lock would have shown.
        if !self.listed(tenant) {
            return Begun::Free;
        }
        let mut tenants = self.lock();
        if self.sweep(&mut tenants, tenant, now) {
            return Begun::Free;
        }
        let Some(entry) = tenants.get_mut(tenant) else {
            return Begun::Free;
        };
        if entry.suspect.is_some()
            || entry.strikes.iter().any(|strike| strike.shard == shard)
            || entry.fleet_struck(now).iter().any(|struck| struck == shard)
        {
            return Begun::Free;
        }
        if let Some((_, attempts)) = entry.probes.iter_mut().find(|(probed, _)| probed == shard) {
            *attempts += 1;
            return Begun::Probe;
        }
        if entry.reached(now).len() >= poison_after {
            return Begun::Refused;
        }
        entry.probes.push((shard.to_owned(), 1));
        Begun::Probe
    }

    /// The members `tenant` has struck (a suspect's, or its strikes that
    /// count at `now`), by shard id; `None`, without the lock, when it has
    /// no entry.
    pub fn struck(&self, tenant: &str, now: Instant) -> Option<Vec<String>> {
        if !self.listed(tenant) {
            return None;
        }
        let tenants = self.lock();
        let entry = tenants.get(tenant)?;
        let mut struck: Vec<String> = Vec::new();
        let suspect = entry.suspect.as_ref().filter(|suspect| suspect.until > now);
        let strikes = entry.strikes.iter().filter(|strike| strike.until > now);
        let shards = suspect
            .into_iter()
            .flat_map(|suspect| suspect.shards.iter());
        let strikes = strikes
            .map(|strike| &strike.shard)
            .chain(entry.fleet_struck(now));
        for shard in shards.chain(strikes) {
            if !struck.contains(shard) {
                struck.push(shard.clone());
            }
        }
        Some(struck)
    }

    /// Ends a probe [`Suspects::begin`] started.
    pub fn end(&self, tenant: &str, shard: &str, now: Instant) {
        let mut tenants = self.lock();
        let Some(entry) = tenants.get_mut(tenant) else {
            return;
        };
        if let Some(position) = entry.probes.iter().position(|(probed, _)| probed == shard) {
            entry.probes[position].1 -= 1;
            if entry.probes[position].1 == 0 {
                entry.probes.swap_remove(position);
            }
        }
        self.sweep(&mut tenants, tenant, now);
    }

    /// Records a crash-like failure that was the tenant's own. A tenant
    /// not suspect becomes suspect when the request is `stopped` or its
    /// strikes reach `poison_after` distinct members; a suspect one has
    /// its quarantine start again (`rules.quarantine` from `now`).
    /// Returns `None` when the strike made nobody suspect.
    pub fn record(&self, struck: Struck<'_>, now: Instant, rules: Rules) -> Option<Marked> {
        let wall = SystemTime::now();
        let mut tenants = self.lock();
        let entry = match tenants.entry(struck.tenant.to_owned()) {
            Slot::Occupied(entry) => entry.into_mut(),
            Slot::Vacant(vacant) => {
                self.slots[self.slot(struck.tenant)].fetch_add(1, Ordering::Relaxed);
                vacant.insert(Entry::new(struck.cell))
            }
        };
        entry.expire(now);
        let marked = if let Some(suspect) = &mut entry.suspect {
            suspect.strikes += 1;
            if !suspect.shards.iter().any(|known| known == struck.shard) {
                suspect.shards.push(struck.shard.to_owned());
                suspect.shards.sort();
            }
            suspect.stops += u64::from(struck.stopped);
            suspect.last = wall;
            suspect.until = now + rules.quarantine;
            Some(Marked::Again)
        } else {
            entry.strikes.push(Strike {
                shard: struck.shard.to_owned(),
                until: now + rules.strike_life,
                request: struck.request,
            });
            let mut shards: Vec<String> = Vec::new();
            for strike in &entry.strikes {
                if !shards.contains(&strike.shard) {
                    shards.push(strike.shard.clone());
                }
            }
            if struck.stopped || shards.len() >= rules.poison_after {
                shards.sort();
                // The strikes are the suspect's now; its members are
                // where it is served, so its probes no longer bound it.
                entry.suspect = Some(Suspect {
                    cell: entry.cell.clone(),
                    shards,
                    stops: 1,
                    strikes: entry.strikes.len() as u64,
                    since: wall,
                    last: wall,
                    until: now + rules.quarantine,
                    shared: false,
                    by: None,
                });
                entry.strikes.clear();
                Some(Marked::New)
            } else {
                None
            }
        };
        self.count.store(tenants.len(), Ordering::Relaxed);
        marked
    }

    /// Takes back the strikes of `request` (it was answered after all, so
    /// what it sent was not poison). A suspect's strikes stay.
    pub fn withdraw(&self, tenant: &str, request: u64, now: Instant) {
        if !self.listed(tenant) {
            return;
        }
        let mut tenants = self.lock();
        let Some(entry) = tenants.get_mut(tenant) else {
            return;
        };
        entry.strikes.retain(|strike| strike.request != request);
        self.sweep(&mut tenants, tenant, now);
    }

    /// Notes that `shard` (its window key) failed a request of `tenant`
    /// crash-like at `now`, on an attempt `sent` then, and says whether it
    /// had failed a request of any other tenant within `window` before the
    /// attempt was sent: a member that was failing other tenants before
    /// the tenant's request reached it is what fails, not that request.
    /// Failures after `sent` do not count: a poison that hangs a member
    /// makes the requests already on it time out first.
    pub fn shared_fault(
        &self,
        shard: &str,
        tenant: &str,
        (sent, now): (Instant, Instant),
        window: Duration,
    ) -> bool {
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let failures = match recent.get_mut(shard) {
            Some(failures) => failures,
            None => recent.entry(shard.to_owned()).or_default(),
        };
        // Failing before the attempt was sent, and not long before.
        let shared = failures.iter().any(|run| {
            run.tenant != tenant
                && run.first <= sent
                && sent.saturating_duration_since(run.last.min(sent)) <= window
        });
        // Keep a run for each of the last two tenants; a failure further
        // than the window from its tenant's last starts a new run.
        if let Some(own) = failures.iter_mut().find(|run| run.tenant == tenant) {
            if now.saturating_duration_since(own.last) > window {
                own.first = now;
            }
            own.last = now;
        } else {
            let run = FailingRun {
                tenant: tenant.to_owned(),
                first: now,
                last: now,
            };
            if failures.len() < 2 {
                failures.push(run);
            } else if let Some(oldest) = failures.iter_mut().min_by_key(|run| run.last) {
                *oldest = run;
            }
        }
        shared
    }

    /// The tenant's entry, made (and its filter slot counted) when it has
    /// none.
    fn entry<'t>(
        &self,
        tenants: &'t mut HashMap<String, Entry>,
        tenant: &str,
        cell: &str,
    ) -> &'t mut Entry {
        match tenants.entry(tenant.to_owned()) {
            Slot::Occupied(entry) => entry.into_mut(),
            Slot::Vacant(vacant) => {
                self.slots[self.slot(tenant)].fetch_add(1, Ordering::Relaxed);
                vacant.insert(Entry::new(cell))
            }
        }
    }

    /// Lifts the tenant's quarantine and forgets its strikes; whether it
    /// was suspect at `now`.
    pub fn clear(&self, tenant: &str, now: Instant) -> bool {
        let mut tenants = self.lock();
        let was_suspect = tenants.get_mut(tenant).is_some_and(|entry| {
            entry.strikes.clear();
            entry.fleet_struck.0.clear();
            entry
                .suspect
                .take()
                .is_some_and(|suspect| suspect.until > now)
        });
        self.sweep(&mut tenants, tenant, now);
        was_suspect
    }

    /// Every tenant suspect at `now`, by tenant id (expired entries are
    /// swept).
    pub fn list(&self, now: Instant) -> Vec<(String, Suspect)> {
        let mut tenants = self.lock();
        self.expire_all(&mut tenants, now);
        let mut listed: Vec<(String, Suspect)> = tenants
            .iter()
            .filter_map(|(tenant, entry)| Some((tenant.clone(), entry.suspect.clone()?)))
            .collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        listed
    }

    /// Expires the tenant's entry at `now`, removing it when nothing is
    /// left; whether it is gone (or was never there).
    fn sweep(&self, tenants: &mut HashMap<String, Entry>, tenant: &str, now: Instant) -> bool {
        let gone = tenants
            .get_mut(tenant)
            .is_none_or(|entry| entry.expire(now));
        if gone && tenants.remove(tenant).is_some() {
            self.slots[self.slot(tenant)].fetch_sub(1, Ordering::Relaxed);
            self.count.store(tenants.len(), Ordering::Relaxed);
        }
        gone
    }

    /// Whether the sweep of every expired entry is due at `now`, at most
    /// once every [`SWEEP_EVERY`]: the one lookup that sees it due first
    /// claims it (and the next one is a period on, whether or not this one
    /// gets the lock).
    fn sweep_due(&self, now: Instant) -> bool {
        let since = |at: Instant| {
            u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
        };
        let next = self.next_sweep.load(Ordering::Relaxed);
        let at = since(now);
        at >= next
            && self
                .next_sweep
                .compare_exchange(
                    next,
                    since(now + SWEEP_EVERY),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Removes every entry expired at `now`.
    fn expire_all(&self, tenants: &mut HashMap<String, Entry>, now: Instant) {
        tenants.retain(|tenant, entry| {
            let gone = entry.expire(now);
            if gone {
                self.slots[self.slot(tenant)].fetch_sub(1, Ordering::Relaxed);
            }
            !gone
        });
        self.count.store(tenants.len(), Ordering::Relaxed);
    }

    /// The tenant's slot in the filter.
    #[inline]
    fn slot(&self, tenant: &str) -> usize {
        (self.hasher.hash_one(tenant) as usize) & (SLOTS - 1)
    }

    /// Whether the tenant may have an entry: false only when it has none
    /// (some other tenant's entry may share its slot). No lock.
    #[inline]
    fn listed(&self, tenant: &str) -> bool {
        self.slots[self.slot(tenant)].load(Ordering::Relaxed) != 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // Nothing panics while holding the lock; a poisoned one holds a
        // consistent map all the same.
        self.tenants.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);
    const RULES: Rules = Rules {
        poison_after: 2,
        strike_life: Duration::from_secs(10),
        quarantine: MINUTE,
    };

    fn struck<'s>(tenant: &'s str, shard: &'s str, request: u64, stopped: bool) -> Struck<'s> {
        Struck {
            cell: "main",
            tenant,
            shard,
            request,
            stopped,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn strikes_of_different_requests_add_up_to_a_suspect() {
        let suspects = Suspects::new();
        assert!(!suspects.any());
        let now = Instant::now();
        assert_eq!(
            suspects.record(struck("t", "s2", 1, false), now, RULES),
            None
        );
        assert!(suspects.any(), "a strike is looked up");
        assert!(suspects.get("t", now).is_none(), "one strike is no suspect");
        assert_eq!(
            suspects.standing("t", now, 2),
            Some(Standing {
                suspect: false,
                only: None
            })
        );
        assert_eq!(
            suspects.record(struck("t", "s1", 2, false), now, RULES),
            Some(Marked::New)
        );
        let suspect = suspects.get("t", now).expect("suspect");
        assert_eq!(suspect.shards, ["s1", "s2"]);
        assert_eq!((suspect.stops, suspect.strikes), (1, 2));
        assert_eq!(
            suspects.standing("t", now, 2),
            Some(Standing {
                suspect: true,
                only: Some(vec!["s1".into(), "s2".into()])
            })
        );
        assert!(suspects.get("other", now).is_none());

        tokio::time::advance(MINUTE - Duration::from_millis(1)).await;
        assert!(suspects.get("t", Instant::now()).is_some(), "still suspect");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(suspects.get("t", Instant::now()).is_none(), "expired");
        assert!(!suspects.any(), "the expired entry was swept");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_request_marks_its_tenant_at_once_and_strikes_extend_a_quarantine() {
        let suspects = Suspects::new();
        let start = Instant::now();
        assert_eq!(
            suspects.record(struck("t", "s1", 1, true), start, RULES),
            Some(Marked::New)
        );
        tokio::time::advance(Duration::from_secs(50)).await;
        let later = Instant::now();
        assert_eq!(
            suspects.record(struck("t", "s2", 2, false), later, RULES),
            Some(Marked::Again)
        );
        tokio::time::advance(Duration::from_secs(50)).await;
        let suspect = suspects.get("t", Instant::now()).expect("extended");
        assert_eq!((suspect.stops, suspect.strikes), (1, 2));
        assert_eq!(suspect.shards, ["s1", "s2"]);
        assert_eq!(suspect.until, later + MINUTE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_strike_that_never_reaches_poison_after_runs_out() {
        let suspects = Suspects::new();
        suspects.record(struck("t", "s1", 1, false), Instant::now(), RULES);
        tokio::time::advance(RULES.strike_life - Duration::from_millis(1)).await;
        assert!(suspects.standing("t", Instant::now(), 2).is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(suspects.standing("t", Instant::now(), 2), None);
        assert!(!suspects.any());
        // A second strike after the first ran out starts the count again.
        suspects.record(struck("t", "s2", 2, false), Instant::now(), RULES);
        assert!(suspects.get("t", Instant::now()).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn racing_attempts_reach_at_most_poison_after_members() {
        let suspects = Suspects::new();
        let now = Instant::now();
        assert_eq!(suspects.begin("t", "s1", now, 2), Begun::Free, "no strikes");
        suspects.record(struck("t", "s1", 1, false), now, RULES);
        assert_eq!(suspects.begin("t", "s1", now, 2), Begun::Free, "struck");
        assert_eq!(suspects.begin("t", "s2", now, 2), Begun::Probe);
        assert_eq!(suspects.begin("t", "s3", now, 2), Begun::Refused);
        assert_eq!(suspects.begin("t", "s2", now, 2), Begun::Probe);
        assert_eq!(
            suspects.standing("t", now, 2).unwrap().only,
            Some(vec!["s1".into(), "s2".into()])
        );
        suspects.end("t", "s2", now);
        assert_eq!(
            suspects.begin("t", "s3", now, 2),
            Begun::Refused,
            "one left"
        );
        suspects.end("t", "s2", now);
        assert_eq!(suspects.standing("t", now, 2).unwrap().only, None);
        assert_eq!(suspects.begin("t", "s3", now, 2), Begun::Probe);
        suspects.end("t", "s3", now);
        // A probe outlives the strikes: the entry goes with the last one.
        assert_eq!(suspects.begin("t", "s4", now, 2), Begun::Probe);
        tokio::time::advance(RULES.strike_life).await;
        assert!(suspects.standing("t", Instant::now(), 2).is_some());
        suspects.end("t", "s4", Instant::now());
        assert!(!suspects.any());
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_tenants_expired_entry_is_swept_by_another_tenants_lookup() {
        let suspects = Suspects::new();
        suspects.record(struck("quiet", "s1", 1, false), Instant::now(), RULES);
        assert_eq!(suspects.standing("busy", Instant::now(), 2), None);
        assert!(suspects.any());
        tokio::time::advance(RULES.strike_life).await;
        assert_eq!(suspects.standing("busy", Instant::now(), 2), None);
        assert!(!suspects.any(), "every request stops looking up");
    }

    /// A tenant whose slot counts no entry: any but `noisy`'s.
    fn quiet_beside(suspects: &Suspects, noisy: &str) -> String {
        (0..)
            .map(|i| format!("quiet-{i}"))
            .find(|quiet| suspects.slot(quiet) != suspects.slot(noisy))
            .expect("a free slot")
    }

    /// Issue 28's review: one tenant striking every few seconds must not
    /// put every other tenant's requests on the global lock (nor on a
    /// second one for the sweep). Held from another thread, the lock would
    /// make the lookups below wait for as long as it is held.
    #[test]
    fn a_tenant_without_an_entry_is_answered_while_the_lock_is_held() {
        let suspects = Suspects::new();
        let now = Instant::now();
        suspects.record(struck("noisy", "s1", 1, false), now, RULES);
        assert!(suspects.any(), "another tenant has an entry");
        let quiet = quiet_beside(&suspects, "noisy");
        let (held, lock_held) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (answer, answered) = std::sync::mpsc::channel();
        let (suspects, quiet) = (&suspects, quiet.as_str());
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let _tenants = suspects.lock();
                held.send(()).unwrap();
                // Until the test is done, however it ends.
                let _ = released.recv();
            });
            lock_held.recv().unwrap();
            scope.spawn(move || {
                // The first lookup finds the sweep due, too.
                let standing = suspects.standing(quiet, now, 2);
                let begun = suspects.begin(quiet, "s2", now, 2);
                let suspect = suspects.get(quiet, now);
                suspects.withdraw(quiet, 2, now);
                let _ = answer.send((standing, begun, suspect));
            });
            // Only bounds a hang: the lookups take microseconds.
            let got = answered.recv_timeout(Duration::from_secs(10));
            release.send(()).unwrap();
            assert_eq!(
                got,
                Ok((None, Begun::Free, None)),
                "a tenant without an entry waited for the lock"
            );
        });
        // The noisy tenant still looks itself up.
        assert!(suspects.standing("noisy", now, 2).is_some());
    }

    /// How many entries the filter counts.
    fn counted(suspects: &Suspects) -> usize {
        let slots = suspects.slots.iter();
        slots
            .map(|slot| slot.load(Ordering::Relaxed) as usize)
            .sum()
    }

    #[tokio::test(start_paused = true)]
    async fn the_filter_counts_every_entry_however_it_goes() {
        let suspects = Suspects::new();
        let entries = |suspects: &Suspects| suspects.lock().len();
        let start = Instant::now();
        for (request, tenant) in ["a", "b", "c", "d", "e", "f"].into_iter().enumerate() {
            let request = request as u64 + 1;
            suspects.record(struck(tenant, "s1", request, false), start, RULES);
            suspects.record(struck(tenant, "s1", request, false), start, RULES);
            assert!(suspects.listed(tenant));
        }
        suspects.record(struck("f", "s2", 7, true), start, RULES);
        assert_eq!((entries(&suspects), counted(&suspects)), (6, 6));
        // Gone by a withdrawal, a clearing, and an ended probe.
        suspects.withdraw("a", 1, start);
        suspects.clear("b", start);
        assert_eq!(suspects.begin("c", "s3", start, 2), Begun::Probe);
        suspects.withdraw("c", 3, start);
        suspects.end("c", "s3", start);
        assert_eq!((entries(&suspects), counted(&suspects)), (3, 3));
        // Expired: swept by its own lookup, then by another's.
        tokio::time::advance(RULES.strike_life).await;
        assert_eq!(suspects.get("d", Instant::now()), None);
        assert_eq!((entries(&suspects), counted(&suspects)), (2, 2));
        let quiet = quiet_beside(&suspects, "e");
        assert_eq!(suspects.standing(&quiet, Instant::now(), 2), None);
        assert_eq!((entries(&suspects), counted(&suspects)), (1, 1));
        // By a listing.
        tokio::time::advance(MINUTE).await;
        assert!(suspects.list(Instant::now()).is_empty());
        assert_eq!((entries(&suspects), counted(&suspects)), (0, 0));
        assert!(!suspects.any());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answered_request_takes_its_strikes_back() {
        let suspects = Suspects::new();
        let now = Instant::now();
        suspects.record(struck("t", "s1", 1, false), now, RULES);
        suspects.record(struck("t", "s2", 2, false), now, RULES);
        assert!(suspects.get("t", now).is_some());
        suspects.record(struck("u", "s1", 3, false), now, RULES);
        suspects.withdraw("u", 3, now);
        suspects.withdraw("u", 3, now);
        assert_eq!(suspects.standing("u", now, 2), None);
        suspects.record(struck("u", "s1", 4, false), now, RULES);
        suspects.withdraw("u", 5, now);
        assert!(
            suspects.standing("u", now, 2).is_some(),
            "another request's"
        );
        // A suspect's strikes stay.
        suspects.withdraw("t", 1, now);
        assert!(suspects.get("t", now).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_failing_another_tenant_within_the_window_is_a_shared_fault() {
        let suspects = Suspects::new();
        let window = Duration::from_secs(1);
        // An attempt sent at the moment it failed.
        let at = |t: Instant| (t, t);
        let start = Instant::now();
        assert!(!suspects.shared_fault("s1", "a", at(start), window));
        assert!(
            !suspects.shared_fault("s1", "a", at(start), window),
            "its own"
        );
        assert!(suspects.shared_fault("s1", "b", at(start), window));
        assert!(
            !suspects.shared_fault("s2", "b", at(start), window),
            "another shard"
        );
        tokio::time::advance(window).await;
        assert!(suspects.shared_fault("s1", "a", at(Instant::now()), window));
        // b's failure is now over the window old (a's is a's own).
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!suspects.shared_fault("s1", "a", at(Instant::now()), window));
        // Two slots keep the latest failure of any other tenant.
        let now = Instant::now();
        assert!(!suspects.shared_fault("s3", "c", at(now), window));
        suspects.shared_fault("s3", "d", at(now), window);
        suspects.shared_fault("s3", "e", at(now), window);
        assert!(suspects.shared_fault("s3", "c", at(now), window));
        assert!(suspects.shared_fault("s3", "e", at(now), window));
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_failing_another_tenant_before_and_after_the_attempt_was_sent_excuses_it() {
        // The other tenant keeps timing out on the member, before the
        // victim's attempt was sent and during it: its latest failure
        // comes after the send, its run began before.
        let suspects = Suspects::new();
        let window = Duration::from_secs(1);
        let step = Duration::from_millis(300);
        let hung = |suspects: &Suspects| {
            let now = Instant::now();
            suspects.shared_fault("s1", "hanger", (now - step, now), window)
        };
        hung(&suspects);
        tokio::time::advance(step).await;
        let sent = Instant::now();
        hung(&suspects);
        tokio::time::advance(step / 2).await;
        hung(&suspects);
        tokio::time::advance(step / 2).await;
        assert!(suspects.shared_fault("s1", "victim", (sent, Instant::now()), window));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_after_the_attempt_was_sent_excuse_nothing() {
        // A hanging poison sent at `sent`: the requests already on the
        // member time out before it does, after it was sent. They must not
        // excuse it, or poison that hangs would never be struck.
        let suspects = Suspects::new();
        let window = Duration::from_secs(1);
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(200)).await;
        let bystander = Instant::now();
        assert!(!suspects.shared_fault("s1", "bystander", (bystander, bystander), window));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(
            !suspects.shared_fault("s1", "poisoner", (sent, Instant::now()), window),
            "a failure seen after the attempt was sent excused it"
        );
        // A request sent after the member was seen failing is excused.
        let later = Instant::now();
        tokio::time::advance(Duration::from_millis(300)).await;
        assert!(suspects.shared_fault("s1", "victim", (later, Instant::now()), window));
    }

    #[tokio::test(start_paused = true)]
    async fn clearing_lifts_a_quarantine_and_a_listing_sweeps_expired_ones() {
        let suspects = Suspects::new();
        let now = Instant::now();
        suspects.record(struck("a", "s1", 1, true), now, RULES);
        let long = Rules {
            quarantine: 2 * MINUTE,
            ..RULES
        };
        suspects.record(struck("b", "s3", 2, true), now, long);
        suspects.record(struck("c", "s3", 3, false), now, RULES);
        assert!(suspects.clear("a", now));
        assert!(!suspects.clear("a", now), "cleared already");
        assert!(!suspects.clear("c", now), "strikes are no quarantine");
        assert_eq!(suspects.standing("c", now, 2), None, "but are cleared too");
        assert_eq!(suspects.list(now).len(), 1);
        tokio::time::advance(2 * MINUTE).await;
        assert!(!suspects.clear("b", Instant::now()), "expired already");
        suspects.record(struck("b", "s3", 4, true), now, RULES);
        assert!(suspects.list(Instant::now()).is_empty());
        assert!(!suspects.any());
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_marked_again_after_expiry_starts_afresh() {
        let suspects = Suspects::new();
        suspects.record(struck("t", "s1", 1, true), Instant::now(), RULES);
        tokio::time::advance(2 * MINUTE).await;
        assert_eq!(
            suspects.record(struck("t", "s3", 2, true), Instant::now(), RULES),
            Some(Marked::New)
        );
        let suspect = suspects.get("t", Instant::now()).unwrap();
        assert_eq!(suspect.shards, ["s3"], "the old strikes are gone");
        assert_eq!(suspect.stops, 1);
    }
}
