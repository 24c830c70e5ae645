//! Each discovered cell's membership: the shards placement counts (found
//! now, or missing and still inside their grace), with when each was found
//! and since when it has been missing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::SystemTime;

use tokio::time::Instant;

use crate::config::DiscoverySource;

/// One discovered shard placement counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Its id (sorted by this within a membership).
    pub id: String,
    /// Where it was last found.
    pub address: SocketAddr,
    /// Its zone, when the source says.
    pub zone: Option<String>,
    /// When this replica first found it (wall clock, for people).
    pub known_since: SystemTime,
    /// Since when its source has not listed it as ready, and why; `None`
    /// while it is listed.
    pub missing: Option<Missing>,
}

/// A member its source no longer lists (or lists not ready).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Missing {
    /// Since when, on the wall clock (for people).
    pub since: SystemTime,
    /// Since when, on the monotonic clock (for the grace).
    pub at: Instant,
    /// Why: `"no longer listed"`, `"not ready"` or `"terminating"`.
    pub why: &'static str,
}

/// One discovered cell's membership.
#[derive(Debug, Clone, PartialEq)]
pub struct Membership {
    /// Where its shards are found.
    pub source: DiscoverySource,
    /// The members, sorted by id.
    pub members: Vec<Member>,
}

impl Membership {
    /// A member by id.
    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members
            .binary_search_by(|member| member.id.as_str().cmp(id))
            .ok()
            .map(|at| &self.members[at])
    }
}

/// Every discovered cell's membership, by cell name.
pub type Memberships = BTreeMap<String, Membership>;

/// What the last look at a cell's source gave, for the admin API, the
/// status page and `serve --check` (kept beside the membership, since a
/// look that changes nothing changes no snapshot).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LookStatus {
    /// When the source last answered with a usable membership.
    pub last_answer: Option<SystemTime>,
    /// When a look last failed, and why (cleared by the next answer).
    pub last_problem: Option<(SystemTime, String)>,
    /// When a change was last refused by the guard, and why (cleared by
    /// the next change applied).
    pub last_refusal: Option<(SystemTime, String)>,
}
