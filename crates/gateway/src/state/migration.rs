//! What a change of configuration or tenants does to the tenants'
//! subsets: members gained and lost, counted per tenant, the figure the
//! migration guard decides on.

/// What a reload would change in the tenants' subsets, counted over the
/// tenants configured before and after (a tenant that is new or removed has
/// nowhere to move from or to).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Movement {
    /// Tenants compared.
    pub tenants: u64,
    /// Tenants whose cell or set of shards changes.
    pub changed: u64,
    /// Tenants that gain at least one member.
    pub gaining: u64,
    /// Tenants that lose at least one member (a tenant that changes cell
    /// loses all of them).
    pub losing: u64,
    /// Members gained, over every tenant.
    pub members_gained: u64,
    /// Members lost, over every tenant: a lost member is traffic (and
    /// cache, and state) that goes elsewhere.
    pub members_lost: u64,
}

impl Movement {
    /// `changed / tenants` in percent.
    pub fn percent(&self) -> f64 {
        100.0 * self.changed as f64 / self.tenants.max(1) as f64
    }

    /// Some tenant changes, and none loses a member: every tenant keeps
    /// its shards (a larger `k` under rendezvous).
    pub fn is_growth(&self) -> bool {
        self.changed > 0 && self.members_lost == 0
    }

    /// Counts one tenant that had members `old` and has `new` (by shard
    /// id; in another cell when not `same_cell`, where every member is
    /// lost and every new one gained).
    pub(crate) fn add(
        &mut self,
        old: &std::collections::BTreeSet<String>,
        new: &std::collections::BTreeSet<String>,
        same_cell: bool,
    ) {
        let (gained, lost) = if same_cell {
            (
                new.difference(old).count() as u64,
                old.difference(new).count() as u64,
            )
        } else {
            (new.len() as u64, old.len() as u64)
        };
        self.count(gained, lost);
    }

    /// Counts one tenant that gained `gained` members and lost `lost`.
    pub(crate) fn count(&mut self, gained: u64, lost: u64) {
        self.changed += u64::from(gained + lost > 0);
        self.gaining += u64::from(gained > 0);
        self.losing += u64::from(lost > 0);
        self.members_gained += gained;
        self.members_lost += lost;
    }

    /// The members gained and lost, in words.
    pub(super) fn members(&self) -> String {
        format!(
            "{} tenants gain {} members, {} tenants lose {} members",
            self.gaining, self.members_gained, self.losing, self.members_lost
        )
    }
}
