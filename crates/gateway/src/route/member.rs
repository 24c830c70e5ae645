//! Choosing the member of the subset that serves an attempt: power of two
//! choices over in-flight requests among the members that are up and not
//! yet tried.
//!
//! Two random candidates and the less busy of them spreads load almost as
//! well as scanning every member, without herding every request onto the
//! single least-loaded shard. A request never leaves its tenant's subset
//! unless the operator opted into spilling.
//!
//! After a migration, while its lookback window is open, a tenant whose
//! members are all tried or out of rotation may go on to its lookback
//! members (those of its previous subset it lost), before any spill; the
//! caller passes none (an empty slice: one branch) otherwise.
//!
//! Two things narrow the choice, and cost nothing when neither is set
//! (one branch): a shard's in-flight cap (survivor protection: a member at
//! its cap is skipped, and the place is taken as it is chosen, so racing
//! requests never take a shard past its cap), and a suspect tenant's
//! quarantine (poison containment: it is served only by the members it
//! has already struck).

use std::sync::Arc;

use placement::ShardIndex;
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::config::{Exhausted, GatewayConfig};
use crate::health::Availability;
use crate::route::response::InFlight;
use crate::state::ShardRuntime;

/// The chosen shard for the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// A member of the tenant's subset.
    Member(ShardIndex),
    /// A shard outside the subset (only with `exhausted = "spill"`).
    Spill(ShardIndex),
    /// A member of the tenant's previous subset, during a lookback window.
    Lookback(ShardIndex),
    /// Nothing left to try.
    Exhausted,
}

/// A pick and what it saw.
#[derive(Debug)]
pub struct Choice {
    /// The shard chosen, if any.
    pub pick: Pick,
    /// Whether some member of the subset not yet tried was out of rotation
    /// (so the request was steered around it).
    pub steered: bool,
    /// Whether some shard that could have been chosen was at its in-flight
    /// cap.
    pub full: bool,
    /// The chosen shard's in-flight place, taken already when the shard
    /// has a cap.
    pub reserved: Option<InFlight>,
}

/// What narrows the choice beyond health; both `None` for most requests.
#[derive(Debug, Clone, Copy, Default)]
pub struct Narrowed<'a> {
    /// Each shard's in-flight cap by index (`u64::MAX` for none), when the
    /// cell has any.
    pub caps: Option<&'a [u64]>,
    /// The members a suspect tenant may use.
    pub pinned: Option<&'a [ShardIndex]>,
}

/// Candidates held on the stack: subsets are small.
type Candidates = SmallVec<[ShardIndex; 8]>;

/// Picks the next shard. `tried` holds the shards already attempted for
/// this request; they are never chosen again. `now` is when health is read.
/// `lookback` holds the tenant's lookback members while its window is
/// open (else it is empty): they are chosen from only once no member of
/// `subset` is left, never for a pinned (quarantined or contained) tenant,
/// and not when a member was left out only for being at its cap.
pub fn pick(
    subset: &[ShardIndex],
    lookback: &[ShardIndex],
    tried: &[ShardIndex],
    shards: &[Arc<ShardRuntime>],
    config: &GatewayConfig,
    now: Instant,
    narrowed: Narrowed<'_>,
) -> Choice {
    // Without failover (a drill's control experiment) every member is a
    // candidate, whatever its health: exactly the router the design chapter
    // warns about, which cannot leave a bad shard.
    let failover = config.routing.failover;
    let up = |index: &ShardIndex| {
        !failover || shards[*index as usize].availability_at(config, now) == Availability::Up
    };
    if narrowed.caps.is_some() || narrowed.pinned.is_some() {
        let spill = config.routing.exhausted == Exhausted::Spill;
        return pick_narrowed(subset, lookback, tried, shards, &up, spill, narrowed);
    }
    // One pass, pushing: this runs for every request.
    let mut members = Candidates::new();
    let mut steered = false;
    for &index in subset {
        if tried.contains(&index) {
            continue;
        }
        if up(&index) {
            members.push(index);
        } else {
            steered = true;
        }
    }
    if let Some(index) = power_of_two(&members, shards) {
        return Choice {
            pick: Pick::Member(index),
            steered,
            full: false,
            reserved: None,
        };
    }
    if !lookback.is_empty()
        && let Some(index) = pick_lookback(lookback, tried, shards, &up)
    {
        return Choice {
            pick: Pick::Lookback(index),
            steered,
            full: false,
            reserved: None,
        };
    }
    if config.routing.exhausted == Exhausted::Spill {
        let outside: Vec<ShardIndex> = (0..shards.len() as ShardIndex)
            .filter(|index| !subset.contains(index) && !tried.contains(index))
            .filter(up)
            .collect();
        if let Some(index) = power_of_two(&outside, shards) {
            return Choice {
                pick: Pick::Spill(index),
                steered,
                full: false,
                reserved: None,
            };
        }
    }
    Choice {
        pick: Pick::Exhausted,
        steered,
        full: false,
        reserved: None,
    }
}

/// [`pick`] when shards have caps or the tenant is pinned: the same rules,
/// skipping members at their caps and members the tenant may not use, and
/// taking the chosen shard's place under its cap.
#[inline(never)]
fn pick_narrowed(
    subset: &[ShardIndex],
    lookback: &[ShardIndex],
    tried: &[ShardIndex],
    shards: &[Arc<ShardRuntime>],
    up: &dyn Fn(&ShardIndex) -> bool,
    spill: bool,
    narrowed: Narrowed<'_>,
) -> Choice {
    let cap = |index: ShardIndex| narrowed.caps.map_or(u64::MAX, |caps| caps[index as usize]);
    let mut full = false;
    let mut members = Candidates::new();
    let mut steered = false;
    for &index in subset {
        // A member the quarantine rules out is not steered around: it is
        // the tenant, not the shard, that is kept away.
        if tried.contains(&index)
            || narrowed
                .pinned
                .is_some_and(|pinned| !pinned.contains(&index))
        {
            continue;
        }
        if !up(&index) {
            steered = true;
        } else if shards[index as usize].in_flight() >= cap(index) {
            full = true;
        } else {
            members.push(index);
        }
    }
    if let Some((index, reserved)) = take_place(&mut members, shards, narrowed.caps, &mut full) {
        return Choice {
            pick: Pick::Member(index),
            steered,
            full,
            reserved,
        };
    }
    // Lookback is for members gone or without the tenant's data, not a way
    // around survivor protection, nor out of a quarantine.
    if !lookback.is_empty() && !full && narrowed.pinned.is_none() {
        let mut old: Candidates = lookback
            .iter()
            .copied()
            .filter(|index| !tried.contains(index) && up(index))
            .filter(|&index| shards[index as usize].in_flight() < cap(index))
            .collect();
        if let Some((index, reserved)) = take_place(&mut old, shards, narrowed.caps, &mut full) {
            return Choice {
                pick: Pick::Lookback(index),
                steered,
                full,
                reserved,
            };
        }
    }
    // A suspect tenant never spills: its quarantine is its members.
    if spill && narrowed.pinned.is_none() {
        let mut outside: Candidates = (0..shards.len() as ShardIndex)
            .filter(|index| !subset.contains(index) && !tried.contains(index) && up(index))
            .filter(|&index| shards[index as usize].in_flight() < cap(index))
            .collect();
        if let Some((index, reserved)) = take_place(&mut outside, shards, narrowed.caps, &mut full)
        {
            return Choice {
                pick: Pick::Spill(index),
                steered,
                full,
                reserved,
            };
        }
    }
    Choice {
        pick: Pick::Exhausted,
        steered,
        full,
        reserved: None,
    }
}

/// A lookback member not yet tried and up, by power of two choices (rare:
/// only once every member of the subset is tried or out).
#[cold]
#[inline(never)]
fn pick_lookback(
    lookback: &[ShardIndex],
    tried: &[ShardIndex],
    shards: &[Arc<ShardRuntime>],
    up: &dyn Fn(&ShardIndex) -> bool,
) -> Option<ShardIndex> {
    let old: Candidates = lookback
        .iter()
        .copied()
        .filter(|index| !tried.contains(index) && up(index))
        .collect();
    power_of_two(&old, shards)
}

/// Power of two choices over `candidates`, taking the chosen shard's place
/// under its cap when there are caps; a shard filled by another request
/// since it was looked at is dropped (and `full` set) and the choice made
/// again.
fn take_place(
    candidates: &mut Candidates,
    shards: &[Arc<ShardRuntime>],
    caps: Option<&[u64]>,
    full: &mut bool,
) -> Option<(ShardIndex, Option<InFlight>)> {
    loop {
        let index = power_of_two(candidates, shards)?;
        let Some(caps) = caps else {
            return Some((index, None));
        };
        match InFlight::try_start(&shards[index as usize], caps[index as usize]) {
            Some(place) => return Some((index, Some(place))),
            None => {
                *full = true;
                candidates.retain(|candidate| *candidate != index);
            }
        }
    }
}

/// The less busy of two random candidates.
fn power_of_two(candidates: &[ShardIndex], shards: &[Arc<ShardRuntime>]) -> Option<ShardIndex> {
    match candidates.len() {
        0 => None,
        1 => Some(candidates[0]),
        len => {
            let first = fastrand::usize(..len);
            let mut second = fastrand::usize(..len - 1);
            if second >= first {
                second += 1;
            }
            let (a, b) = (candidates[first], candidates[second]);
            let load = |index: ShardIndex| shards[index as usize].in_flight();
            Some(if load(b) < load(a) { b } else { a })
        }
    }
}
