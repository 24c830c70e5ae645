//! Poison containment before any strike: the members each tenant's
//! attempts are in flight on, so that with `routing.poison_spread =
//! "contained"` a tenant's attempts in flight at once never span more
//! than `routing.poison_after` members, struck ones counted. A burst of
//! poison sent together, before the gateway saw any of it fail, then
//! crashes at most that many members; requests beyond the cap join
//! members the tenant is already on.
//!
//! Every attempt of every tenant comes here when containment is on, so
//! this stays off any global lock: tenants are spread over [`TABLES`]
//! tables by a hash of the tenant id (keyed once per process and worked
//! out when the tenants file is read, not per request), each behind its
//! own lock held for a scan of a few members. Entries are keyed
//! by that 64-bit hash, not by the tenant's object, so a reload that keeps
//! the tenant keeps its attempts in flight; two tenant ids sharing all 64
//! bits (a chance of about n² in 2⁶⁵ for n tenants, and not one an id can
//! be picked for) would share one cap. An entry goes when its last attempt
//! ends; a key and a few members inline make it, so joining allocates
//! nothing but the table's own growth.
//!
//! Members are named by the address of their run-time state, which a
//! request holds for as long as its attempt is counted here, and which a
//! reload keeps for a shard that keeps its cell, id and URL.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use smallvec::SmallVec;

use crate::tenants::id_hash;

/// The members a tenant is on or struck, few: `routing.poison_after`
/// (2 by default) at most, beyond races.
pub type Members = SmallVec<[usize; 8]>;

/// The tables (a power of two): enough that two busy tenants rarely share
/// one lock on a two-to-sixteen-core gateway.
const TABLES: usize = 64;

/// One tenant's members in flight, each with its attempts.
type Flights = SmallVec<[(usize, u32); 4]>;

/// One table's tenants, by tenant hash.
type Table = HashMap<u64, Flights, BuildHasherDefault<Prehashed>>;

/// Every tenant with an attempt in flight, by tenant hash.
#[derive(Debug)]
pub struct Spread {
    tables: Box<[Mutex<Table>]>,
}

/// A hasher for keys that are hashes already.
#[derive(Debug, Default)]
pub struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; anything else still hashes.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// Why an attempt may not begin on a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full {
    /// The members the tenant is on or struck: the attempt may go to one
    /// of them instead.
    pub reached: Members,
}

/// One attempt counted on its member until dropped.
#[derive(Debug)]
pub struct Flight<'a> {
    spread: &'a Spread,
    tenant: u64,
    member: usize,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.spread.leave(self.tenant, self.member);
    }
}

impl Default for Spread {
    fn default() -> Self {
        Self {
            tables: (0..TABLES).map(|_| Mutex::default()).collect(),
        }
    }
}

impl Spread {
    /// No attempts in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// The key naming `tenant` here: its id hashed, as its record holds
    /// it ([`crate::tenants::Tenant::id_hash`]).
    #[inline]
    pub fn tenant(&self, tenant: &str) -> u64 {
        id_hash(tenant)
    }

    /// Begins an attempt of `tenant` on `member`, unless the tenant's
    /// members in flight and `struck` would then number more than `cap`.
    ///
    /// `struck` is asked after the attempt is counted, never under the
    /// table's lock: a request whose attempt crashed records its strike
    /// before its member leaves, so whichever way the two race, the member
    /// is seen here either in flight or struck.
    ///
    /// Once the tenant has strikes, an attempt joining a member it is
    /// already counted on is judged like any other, not let through:
    /// that count may be another attempt's, still between its counting and
    /// its own judgement, which its judgement is about to refuse.
    pub fn join(
        &self,
        tenant: u64,
        member: usize,
        cap: usize,
        struck: impl FnOnce() -> Option<Members>,
    ) -> Result<Flight<'_>, Full> {
        // At 0 containment is off and nothing comes here; an entry made for
        // a cap of 0 would never be removed.
        debug_assert!(cap > 0, "a spread cap of 0");
        let mut before = Members::new();
        {
            let mut table = self.table(tenant);
            let flights = table.entry(tenant).or_default();
            before.extend(flights.iter().map(|(on, _)| *on));
            if let Some((_, attempts)) = flights.iter_mut().find(|(on, _)| *on == member) {
                *attempts += 1;
            } else if flights.len() < cap {
                flights.push((member, 1));
            } else {
                return Err(Full { reached: before });
            }
        }
        let flight = Flight {
            spread: self,
            tenant,
            member,
        };
        let Some(struck) = struck() else {
            return Ok(flight);
        };
        // A member it struck adds nothing. Any other must fit under the cap
        // with every member counted in flight when this attempt was
        // (`before`, this member among them if other attempts are on it)
        // and every member struck. Being counted on this member already
        // (`before` holding it) is no leave to go there: the attempt
        // counted may be one whose judgement refuses it, whose tenant would
        // then be on this member only through this attempt, beyond the cap
        // (16 poison requests at once after one strike crashed a third
        // member so, with `poison_after = 2`).
        if struck.contains(&member) {
            return Ok(flight);
        }
        let mut reached = before;
        for shard in struck {
            if !reached.contains(&shard) {
                reached.push(shard);
            }
        }
        let with_member = reached.len() + usize::from(!reached.contains(&member));
        if with_member <= cap {
            return Ok(flight);
        }
        Err(Full { reached })
    }

    /// How many attempts of `tenant` are in flight on each member, sorted
    /// by member (for tests and views).
    pub fn in_flight(&self, tenant: &str) -> Vec<(usize, u32)> {
        let tenant = self.tenant(tenant);
        let mut flights: Vec<(usize, u32)> = self
            .table(tenant)
            .get(&tenant)
            .map(|flights| flights.to_vec())
            .unwrap_or_default();
        flights.sort_unstable();
        flights
    }

    /// Ends an attempt [`Spread::join`] began.
    fn leave(&self, tenant: u64, member: usize) {
        let mut table = self.table(tenant);
        let Some(flights) = table.get_mut(&tenant) else {
            return;
        };
        if let Some(position) = flights.iter().position(|(on, _)| *on == member) {
            flights[position].1 -= 1;
            if flights[position].1 == 0 {
                flights.swap_remove(position);
            }
        }
        if flights.is_empty() {
            table.remove(&tenant);
        }
    }

    fn table(
        &self,
        tenant: u64,
    ) -> MutexGuard<'_, HashMap<u64, Flights, BuildHasherDefault<Prehashed>>> {
        // Middle bits pick the table: the map inside uses the low bits
        // (its bucket) and the top seven (its tags) of the same key.
        self.tables[((tenant >> 32) as usize) & (TABLES - 1)]
            .lock()
            // Nothing panics while holding a lock; a poisoned one holds a
            // consistent map all the same.
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Option<Members> {
        None
    }

    #[test]
    fn a_tenants_attempts_span_at_most_the_cap_and_join_members_it_is_on() {
        let spread = Spread::new();
        let t = spread.tenant("t");
        let a = spread.join(t, 1, 2, none).unwrap();
        let b = spread.join(t, 2, 2, none).unwrap();
        assert_eq!(
            spread.join(t, 3, 2, none).unwrap_err().reached.as_slice(),
            [1, 2]
        );
        let again = spread.join(t, 1, 2, none).unwrap();
        // Another tenant is not held by this one's.
        let u = spread.tenant("u");
        let other = spread.join(u, 3, 2, none).unwrap();
        drop(a);
        assert!(spread.join(t, 3, 2, none).is_err(), "1 is still in flight");
        drop(again);
        let c = spread.join(t, 3, 2, none).unwrap();
        assert_eq!(spread.in_flight("t"), [(2, 1), (3, 1)]);
        drop((b, c, other));
        assert!(spread.in_flight("t").is_empty());
        assert!(
            spread
                .tables
                .iter()
                .all(|table| table.lock().unwrap().is_empty())
        );
    }

    #[test]
    fn struck_members_count_toward_the_cap_and_may_be_joined() {
        let spread = Spread::new();
        let t = spread.tenant("t");
        let struck = || Some(Members::from_slice(&[7]));
        let on = spread.join(t, 1, 2, struck).unwrap();
        let refused = spread.join(t, 2, 2, struck).unwrap_err();
        assert_eq!(refused.reached.as_slice(), [1, 7]);
        assert_eq!(spread.in_flight("t"), [(1, 1)], "the refused one left");
        let again = spread.join(t, 7, 2, struck).unwrap();
        drop((on, again));
        // The cap counts distinct members: struck and in flight at once
        // counts once.
        let both = || Some(Members::from_slice(&[1]));
        let _one = spread.join(t, 1, 2, both).unwrap();
        let _two = spread.join(t, 2, 2, both).unwrap();
    }

    #[test]
    fn a_join_counted_but_not_yet_judged_lets_no_other_attempt_onto_its_member() {
        // The tenant struck 7 and is on 1; an attempt on 2 is counted and,
        // before it reads the strikes (here, inside its `struck`), another
        // attempt of the tenant joins 2 as well. The first is refused
        // (1, 2 and 7 are three members); the second may not ride on its
        // count: the tenant would be on 1 and 2 with 7 struck.
        let spread = Spread::new();
        let t = spread.tenant("t");
        let struck = || Some(Members::from_slice(&[7]));
        let on = spread.join(t, 1, 2, struck).unwrap();
        let mut second = None;
        let first = spread.join(t, 2, 2, || {
            assert_eq!(spread.in_flight("t"), [(1, 1), (2, 1)]);
            second = Some(spread.join(t, 2, 2, struck));
            struck()
        });
        assert_eq!(first.unwrap_err().reached.as_slice(), [1, 7]);
        let second = second.unwrap();
        assert!(
            second.is_err(),
            "joined 2 on a count its judgement refused: {:?}",
            spread.in_flight("t")
        );
        assert_eq!(spread.in_flight("t"), [(1, 1)]);
        // On a member it is on, or one it struck, an attempt still joins.
        let again = spread.join(t, 1, 2, struck).unwrap();
        let there = spread.join(t, 7, 2, struck).unwrap();
        drop((on, again, there));
        assert!(spread.in_flight("t").is_empty());
    }

    #[test]
    fn racing_joins_on_many_threads_never_pass_the_cap() {
        let spread = Spread::new();
        let t = spread.tenant("t");
        let most = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let (spread, most) = (&spread, &most);
                scope.spawn(move || {
                    for round in 0..2000 {
                        let member = (thread + round) % 4;
                        if let Ok(flight) = spread.join(t, member, 2, none) {
                            let on = spread.in_flight("t").len();
                            most.fetch_max(on, std::sync::atomic::Ordering::Relaxed);
                            drop(flight);
                        }
                    }
                });
            }
        });
        assert!(most.into_inner() <= 2);
        assert!(spread.in_flight("t").is_empty());
    }
}
