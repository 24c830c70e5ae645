//! Choosing the member of the subset that serves an attempt: power of two
//! choices over in-flight requests among the members that are up and not
//! yet tried.
//!
//! Two random candidates and the less busy of them spreads load almost as
//! well as scanning every member, without herding every request onto the
//! single least-loaded shard. A request never leaves its tenant's subset
//! unless the operator opted into spilling.

use std::sync::Arc;

use placement::ShardIndex;
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::config::{Exhausted, GatewayConfig};
use crate::health::Availability;
use crate::state::ShardRuntime;

/// The chosen shard for the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// A member of the tenant's subset.
    Member(ShardIndex),
    /// A shard outside the subset (only with `exhausted = "spill"`).
    Spill(ShardIndex),
    /// Nothing left to try.
    Exhausted,
}

/// A pick and what it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The shard chosen, if any.
    pub pick: Pick,
    /// Whether some member of the subset not yet tried was out of rotation
    /// (so the request was steered around it).
    pub steered: bool,
}

/// Candidates held on the stack: subsets are small.
type Candidates = SmallVec<[ShardIndex; 8]>;

/// Picks the next shard. `tried` holds the shards already attempted for
/// this request; they are never chosen again. `now` is when health is read.
pub fn pick(
    subset: &[ShardIndex],
    tried: &[ShardIndex],
    shards: &[Arc<ShardRuntime>],
    config: &GatewayConfig,
    now: Instant,
) -> Choice {
    // Without failover (a drill's control experiment) every member is a
    // candidate, whatever its health: exactly the router the design chapter
    // warns about, which cannot leave a bad shard.
    let failover = config.routing.failover;
    let up = |index: &ShardIndex| {
        !failover || shards[*index as usize].availability_at(config, now) == Availability::Up
    };
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
            };
        }
    }
    Choice {
        pick: Pick::Exhausted,
        steered,
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
