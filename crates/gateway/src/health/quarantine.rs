//! Poison containment's memory: the tenants marked *suspect* because one of
//! their requests failed crash-like (reset, closed before a complete
//! answer, or timed out) on `routing.poison_after` distinct members, and
//! the members each of them struck.
//!
//! A suspect tenant stays suspect for `routing.quarantine_seconds` after
//! its last stopped request, unless an operator clears it. The request
//! path asks [`Suspects::any`] (one atomic load) on every request and
//! looks a tenant up only when some tenant is suspect, so a gateway with
//! no suspects pays nothing more. Every transition takes `now`
//! explicitly, so expiry is tested with a paused clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

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
}

/// Every suspect tenant, by tenant id.
#[derive(Debug, Default)]
pub struct Suspects {
    /// Entries in `tenants`, expired ones included until they are swept:
    /// the one thing every request reads.
    count: AtomicUsize,
    tenants: Mutex<HashMap<String, Suspect>>,
}

/// What one crash-like failure did to its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// The tenant became suspect.
    New,
    /// The tenant was suspect already; its quarantine starts again.
    Again,
}

impl Suspects {
    /// No suspects.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether any tenant may be suspect (expired entries count until a
    /// lookup or a listing sweeps them).
    #[inline]
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// The tenant's entry if it is suspect at `now`; an expired entry is
    /// removed.
    pub fn get(&self, tenant: &str, now: Instant) -> Option<Suspect> {
        let mut tenants = self.lock();
        let suspect = tenants.get(tenant)?;
        if suspect.until > now {
            return Some(suspect.clone());
        }
        tenants.remove(tenant);
        self.count.store(tenants.len(), Ordering::Relaxed);
        None
    }

    /// Records that a request of `tenant` (in `cell`) failed crash-like on
    /// `shards`: `stopped` when containment stopped it (the first stop
    /// makes the tenant suspect), else a failure of a tenant that is
    /// suspect already. Either way the quarantine runs `quarantine` from
    /// `now`. Returns `None` when the tenant is not suspect and the
    /// request was not stopped (nothing to record).
    pub fn strike<'s>(
        &self,
        cell: &str,
        tenant: &str,
        shards: impl IntoIterator<Item = &'s str>,
        stopped: bool,
        now: Instant,
        quarantine: Duration,
    ) -> Option<Marked> {
        let wall = SystemTime::now();
        let mut tenants = self.lock();
        let live = tenants
            .get(tenant)
            .is_some_and(|suspect| suspect.until > now);
        if !live && !stopped {
            return None;
        }
        let marked = if live { Marked::Again } else { Marked::New };
        let suspect = match tenants.get_mut(tenant) {
            Some(suspect) if live => suspect,
            _ => {
                tenants.insert(
                    tenant.to_owned(),
                    Suspect {
                        cell: cell.to_owned(),
                        shards: Vec::new(),
                        stops: 0,
                        strikes: 0,
                        since: wall,
                        last: wall,
                        until: now,
                    },
                );
                tenants.get_mut(tenant).expect("just inserted")
            }
        };
        let before = suspect.shards.len();
        for shard in shards {
            suspect.strikes += 1;
            if !suspect.shards.iter().any(|known| known == shard) {
                suspect.shards.push(shard.to_owned());
            }
        }
        if suspect.shards.len() != before {
            suspect.shards.sort();
        }
        suspect.stops += u64::from(stopped);
        suspect.last = wall;
        suspect.until = now + quarantine;
        self.count.store(tenants.len(), Ordering::Relaxed);
        Some(marked)
    }

    /// Lifts the tenant's quarantine; whether it was suspect at `now`.
    pub fn clear(&self, tenant: &str, now: Instant) -> bool {
        let mut tenants = self.lock();
        let removed = tenants.remove(tenant);
        self.count.store(tenants.len(), Ordering::Relaxed);
        removed.is_some_and(|suspect| suspect.until > now)
    }

    /// Every tenant suspect at `now`, by tenant id (expired entries are
    /// swept).
    pub fn list(&self, now: Instant) -> Vec<(String, Suspect)> {
        let mut tenants = self.lock();
        tenants.retain(|_, suspect| suspect.until > now);
        self.count.store(tenants.len(), Ordering::Relaxed);
        let mut listed: Vec<(String, Suspect)> = tenants
            .iter()
            .map(|(tenant, suspect)| (tenant.clone(), suspect.clone()))
            .collect();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        listed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Suspect>> {
        // Nothing panics while holding the lock; a poisoned one holds a
        // consistent map all the same.
        self.tenants.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[tokio::test(start_paused = true)]
    async fn a_stop_marks_a_tenant_suspect_until_the_quarantine_runs_out() {
        let suspects = Suspects::new();
        assert!(!suspects.any());
        let now = Instant::now();
        assert_eq!(
            suspects.strike("main", "t", ["s2", "s1"], true, now, MINUTE),
            Some(Marked::New)
        );
        assert!(suspects.any());
        let suspect = suspects.get("t", now).expect("suspect");
        assert_eq!(suspect.shards, ["s1", "s2"]);
        assert_eq!((suspect.stops, suspect.strikes), (1, 2));
        assert!(suspects.get("other", now).is_none());

        tokio::time::advance(MINUTE - Duration::from_millis(1)).await;
        assert!(suspects.get("t", Instant::now()).is_some(), "still suspect");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(suspects.get("t", Instant::now()).is_none(), "expired");
        assert!(!suspects.any(), "the expired entry was swept");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_that_is_not_a_stop_marks_nobody_but_extends_a_quarantine() {
        let suspects = Suspects::new();
        let start = Instant::now();
        assert_eq!(
            suspects.strike("main", "t", ["s1"], false, start, MINUTE),
            None
        );
        assert!(!suspects.any());

        suspects.strike("main", "t", ["s1", "s2"], true, start, MINUTE);
        tokio::time::advance(Duration::from_secs(50)).await;
        let later = Instant::now();
        assert_eq!(
            suspects.strike("main", "t", ["s1"], false, later, MINUTE),
            Some(Marked::Again)
        );
        tokio::time::advance(Duration::from_secs(50)).await;
        let suspect = suspects.get("t", Instant::now()).expect("extended");
        assert_eq!((suspect.stops, suspect.strikes), (1, 3));
        assert_eq!(suspect.shards, ["s1", "s2"]);
        assert_eq!(suspect.until, later + MINUTE);
    }

    #[tokio::test(start_paused = true)]
    async fn clearing_lifts_a_quarantine_and_a_listing_sweeps_expired_ones() {
        let suspects = Suspects::new();
        let now = Instant::now();
        suspects.strike("main", "a", ["s1", "s2"], true, now, MINUTE);
        suspects.strike("main", "b", ["s3", "s4"], true, now, 2 * MINUTE);
        assert!(suspects.clear("a", now));
        assert!(!suspects.clear("a", now), "cleared already");
        assert!(suspects.any());
        tokio::time::advance(2 * MINUTE).await;
        assert!(!suspects.clear("b", Instant::now()), "expired already");
        suspects.strike("main", "b", ["s3", "s4"], true, now, MINUTE);
        assert!(suspects.list(Instant::now()).is_empty());
        assert!(!suspects.any());
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_marked_again_after_expiry_starts_afresh() {
        let suspects = Suspects::new();
        suspects.strike("main", "t", ["s1", "s2"], true, Instant::now(), MINUTE);
        tokio::time::advance(2 * MINUTE).await;
        assert_eq!(
            suspects.strike("main", "t", ["s3", "s4"], true, Instant::now(), MINUTE),
            Some(Marked::New)
        );
        let suspect = suspects.get("t", Instant::now()).unwrap();
        assert_eq!(suspect.shards, ["s3", "s4"], "the old strikes are gone");
        assert_eq!(suspect.stops, 1);
    }
}
