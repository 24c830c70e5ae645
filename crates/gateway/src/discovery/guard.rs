//! The migration guard's first half, pure: what a look at a source does
//! to a cell's membership. A shard that disappears is marked missing (down,
//! still placed) and leaves placement only after its grace; one that comes
//! back under the same id moves nobody; a look that would leave the cell
//! empty, or more than `max_removed_fraction` of it missing at once, is
//! refused whole. (The second half, whether the placement change moves
//! tenants more than rendezvous's minimum, needs the tenants: the state
//! layer judges it as it applies the change.)

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::found::{Condition, Found};
use super::membership::{Member, Missing};

/// The rules a look is judged by (`[discovery]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// How long a missing member stays placed.
    pub grace: Duration,
    /// The largest share of the cell's shards that may be missing at once.
    pub max_removed_fraction: f64,
}

/// What a look does to a membership.
#[derive(Debug, Clone, PartialEq)]
pub enum Judged {
    /// Nothing changes.
    Unchanged,
    /// The membership changes.
    Change(Change),
    /// The look is refused whole: the last good membership stays.
    Refused(Refusal),
}

/// Why a look was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// It leaves the cell without a shard.
    Empty,
    /// It leaves more than `max_removed_fraction` of the cell missing.
    TooManyMissing {
        /// Shards it leaves missing.
        missing: usize,
        /// Shards the cell has (written and discovered).
        of: usize,
        /// The bound, as a share.
        fraction: f64,
    },
    /// A found id is also a shard written in the configuration.
    Clash {
        /// The id.
        id: String,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Empty => write!(
                f,
                "the source lists no ready shard, which would leave the cell empty; the last good membership stays"
            ),
            Refusal::TooManyMissing {
                missing,
                of,
                fraction,
            } => write!(
                f,
                "{missing} of the cell's {of} shards would be missing at once, more than discovery.max_removed_fraction = {fraction}; the last good membership stays (raise the fraction, or remove shards a few at a time)"
            ),
            Refusal::Clash { id } => write!(
                f,
                "the source lists {id:?}, which is also a shard written in the cell's shards; rename one of them"
            ),
        }
    }
}

/// A membership change, and what it consists of (ids, each sorted).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Change {
    /// The new membership, sorted by id.
    pub members: Vec<Member>,
    /// Members the source no longer lists: down from now on.
    pub went_missing: Vec<String>,
    /// Missing members listed again: up again, nobody moved.
    pub returned: Vec<String>,
    /// Members listed at another address (a restart): reached there.
    pub readdressed: Vec<String>,
    /// New members: a placement change.
    pub added: Vec<String>,
    /// Members missing for longer than the grace: a placement change.
    pub removed: Vec<String>,
    /// Members whose zone changed: a placement change (zone-aware cells).
    pub rezoned: Vec<String>,
    /// The removed members as judged (missing, since when): what stays if
    /// their removal is refused.
    pub removed_members: Vec<Member>,
}

impl Change {
    /// Whether it changes what placement counts (and so may move tenants).
    pub fn changes_placement(&self) -> bool {
        !(self.added.is_empty() && self.removed.is_empty() && self.rezoned.is_empty())
    }

    /// This change without its placement changes (additions, removals and
    /// new zones are left for a later look): what applies when the
    /// placement change is refused. `current` is the membership it was
    /// judged against.
    pub fn rotation_only(&self, current: &[Member]) -> Change {
        let mut members: Vec<Member> = self
            .members
            .iter()
            .filter(|member| !self.added.contains(&member.id))
            .map(|member| {
                let mut member = member.clone();
                if self.rezoned.contains(&member.id)
                    && let Some(before) = current.iter().find(|m| m.id == member.id)
                {
                    member.zone = before.zone.clone();
                }
                member
            })
            .collect();
        // A removal refused leaves the member placed and still missing
        // (since when it went, not since now: its grace keeps running).
        members.extend(self.removed_members.iter().cloned());
        members.sort_by(|a, b| a.id.cmp(&b.id));
        Change {
            members,
            went_missing: self.went_missing.clone(),
            returned: self.returned.clone(),
            readdressed: self.readdressed.clone(),
            ..Change::default()
        }
    }

    /// Whether it changes nothing at all.
    pub fn is_empty(&self) -> bool {
        !self.changes_placement()
            && self.went_missing.is_empty()
            && self.returned.is_empty()
            && self.readdressed.is_empty()
    }
}

/// Judges what `found` (a look at the source) does to the membership
/// `current` of a cell that also has `written` shards of its own, at `now`
/// (`wall` on the wall clock).
pub fn judge(
    current: &[Member],
    written: &[&str],
    found: &[Found],
    rules: Rules,
    now: Instant,
    wall: SystemTime,
) -> Judged {
    // Listed and ready, by id; listed but not ready, with why.
    let mut ready: BTreeMap<&str, &Found> = BTreeMap::new();
    let mut not_ready: BTreeMap<&str, &'static str> = BTreeMap::new();
    for shard in found {
        if written.contains(&shard.id.as_str()) {
            return Judged::Refused(Refusal::Clash {
                id: shard.id.clone(),
            });
        }
        match shard.condition {
            Condition::Ready => {
                ready.insert(&shard.id, shard);
            }
            other => {
                not_ready.insert(&shard.id, other.name());
            }
        }
    }
    if ready.is_empty() && written.is_empty() {
        return Judged::Refused(Refusal::Empty);
    }
    let absent = current
        .iter()
        .filter(|member| !ready.contains_key(member.id.as_str()))
        .count();
    let placed = current.len() + written.len();
    if absent > 0 && absent as f64 > rules.max_removed_fraction * placed as f64 {
        return Judged::Refused(Refusal::TooManyMissing {
            missing: absent,
            of: placed,
            fraction: rules.max_removed_fraction,
        });
    }

    let mut change = Change::default();
    for member in current {
        let mut member = member.clone();
        match ready.remove(member.id.as_str()) {
            Some(shard) => {
                if member.missing.take().is_some() {
                    change.returned.push(member.id.clone());
                }
                if member.address != shard.address {
                    member.address = shard.address;
                    change.readdressed.push(member.id.clone());
                }
                if member.zone != shard.zone {
                    member.zone = shard.zone.clone();
                    change.rezoned.push(member.id.clone());
                }
            }
            None => {
                let missing = *member.missing.get_or_insert_with(|| {
                    change.went_missing.push(member.id.clone());
                    Missing {
                        since: wall,
                        at: now,
                        why: not_ready
                            .get(member.id.as_str())
                            .copied()
                            .unwrap_or("no longer listed"),
                    }
                });
                if now.saturating_duration_since(missing.at) >= rules.grace {
                    change.removed.push(member.id.clone());
                    change.removed_members.push(member);
                    continue;
                }
            }
        }
        change.members.push(member);
    }
    // What is left is new.
    for (id, shard) in ready {
        change.added.push(id.to_owned());
        change.members.push(Member {
            id: id.to_owned(),
            address: shard.address,
            zone: shard.zone.clone(),
            known_since: wall,
            missing: None,
        });
    }
    change.members.sort_by(|a, b| a.id.cmp(&b.id));
    if change.is_empty() {
        Judged::Unchanged
    } else {
        Judged::Change(change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(id: &str, port: u16) -> Found {
        Found {
            id: id.into(),
            address: format!("127.0.0.1:{port}").parse().unwrap(),
            zone: None,
            condition: Condition::Ready,
        }
    }

    fn twenty() -> Vec<Found> {
        (0..20)
            .map(|i| found(&format!("s{i:02}"), 9000 + i))
            .collect()
    }

    const RULES: Rules = Rules {
        grace: Duration::from_secs(300),
        max_removed_fraction: 0.25,
    };

    fn first(found: &[Found], now: Instant) -> Vec<Member> {
        match judge(&[], &[], found, RULES, now, SystemTime::now()) {
            Judged::Change(change) => {
                assert_eq!(change.added.len(), found.len());
                change.members
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_first_look_adds_every_ready_shard_and_an_empty_one_is_refused() {
        let now = Instant::now();
        let members = first(&twenty(), now);
        assert_eq!(members.len(), 20);
        assert!(members.windows(2).all(|w| w[0].id < w[1].id));
        assert_eq!(
            judge(&[], &[], &[], RULES, now, SystemTime::now()),
            Judged::Refused(Refusal::Empty)
        );
        // A cell with written shards may discover none.
        assert_eq!(
            judge(&[], &["w1"], &[], RULES, now, SystemTime::now()),
            Judged::Unchanged
        );
    }

    #[test]
    fn a_missing_shard_is_down_for_the_grace_then_removed_and_a_return_moves_nobody() {
        let now = Instant::now();
        let members = first(&twenty(), now);
        let mut look = twenty();
        look.remove(3);
        let Judged::Change(change) = judge(&members, &[], &look, RULES, now, SystemTime::now())
        else {
            panic!()
        };
        assert_eq!(change.went_missing, ["s03"]);
        assert!(!change.changes_placement());
        assert_eq!(change.members.len(), 20);
        // Still inside the grace: nothing new.
        let later = now + Duration::from_secs(299);
        assert_eq!(
            judge(&change.members, &[], &look, RULES, later, SystemTime::now()),
            Judged::Unchanged
        );
        // Back, at a new address: up again, placed as before.
        let mut back = twenty();
        back[3].address = "127.0.0.1:7000".parse().unwrap();
        let Judged::Change(returned) =
            judge(&change.members, &[], &back, RULES, later, SystemTime::now())
        else {
            panic!()
        };
        assert_eq!(returned.returned, ["s03"]);
        assert_eq!(returned.readdressed, ["s03"]);
        assert!(!returned.changes_placement());
        // Past the grace instead: removed from placement.
        let after = now + Duration::from_secs(300);
        let Judged::Change(removed) =
            judge(&change.members, &[], &look, RULES, after, SystemTime::now())
        else {
            panic!()
        };
        assert_eq!(removed.removed, ["s03"]);
        assert_eq!(removed.members.len(), 19);
        // Without its placement change the member stays, still missing.
        let kept = removed.rotation_only(&change.members);
        assert_eq!(kept.members, change.members);
        assert!(kept.is_empty());
    }

    #[test]
    fn a_look_that_loses_too_much_at_once_is_refused() {
        let now = Instant::now();
        let members = first(&twenty(), now);
        let two: Vec<Found> = twenty().into_iter().take(2).collect();
        assert_eq!(
            judge(&members, &[], &two, RULES, now, SystemTime::now()),
            Judged::Refused(Refusal::TooManyMissing {
                missing: 18,
                of: 20,
                fraction: 0.25
            })
        );
        // Five of twenty is exactly the bound: allowed.
        let fifteen: Vec<Found> = twenty().into_iter().skip(5).collect();
        assert!(matches!(
            judge(&members, &[], &fifteen, RULES, now, SystemTime::now()),
            Judged::Change(_)
        ));
        let fourteen: Vec<Found> = twenty().into_iter().skip(6).collect();
        assert!(matches!(
            judge(&members, &[], &fourteen, RULES, now, SystemTime::now()),
            Judged::Refused(_)
        ));
    }

    #[test]
    fn not_ready_and_terminating_are_missing_with_their_reason() {
        let now = Instant::now();
        let members = first(&twenty(), now);
        let mut look = twenty();
        look[1].condition = Condition::NotReady;
        look[2].condition = Condition::Terminating;
        let Judged::Change(change) = judge(&members, &[], &look, RULES, now, SystemTime::now())
        else {
            panic!()
        };
        assert_eq!(change.went_missing, ["s01", "s02"]);
        let why = |id: &str| {
            change
                .members
                .iter()
                .find(|m| m.id == id)
                .unwrap()
                .missing
                .unwrap()
                .why
        };
        assert_eq!((why("s01"), why("s02")), ("not ready", "terminating"));
        // A not-ready shard never seen ready is not a member yet.
        let mut fresh = twenty();
        fresh.push(Found {
            condition: Condition::NotReady,
            ..found("s99", 9999)
        });
        assert_eq!(
            judge(&members, &[], &fresh, RULES, now, SystemTime::now()),
            Judged::Unchanged
        );
    }

    #[test]
    fn an_addition_is_a_placement_change_and_a_written_id_clashes() {
        let now = Instant::now();
        let members = first(&twenty(), now);
        let mut look = twenty();
        look.push(found("s20", 9020));
        let Judged::Change(change) = judge(&members, &[], &look, RULES, now, SystemTime::now())
        else {
            panic!()
        };
        assert_eq!(change.added, ["s20"]);
        assert!(change.changes_placement());
        assert_eq!(change.rotation_only(&members).members, members);
        assert_eq!(
            judge(&members, &["s05"], &look, RULES, now, SystemTime::now()),
            Judged::Refused(Refusal::Clash { id: "s05".into() })
        );
    }

    #[test]
    fn a_grace_of_zero_removes_at_once() {
        let now = Instant::now();
        let members = first(&twenty(), now);
        let rules = Rules {
            grace: Duration::ZERO,
            ..RULES
        };
        let look: Vec<Found> = twenty().into_iter().skip(1).collect();
        let Judged::Change(change) = judge(&members, &[], &look, rules, now, SystemTime::now())
        else {
            panic!()
        };
        assert_eq!(change.went_missing, ["s00"]);
        assert_eq!(change.removed, ["s00"]);
        // Its removal refused, it stays placed, missing: the next look
        // does not find it going missing again.
        let kept = change.rotation_only(&members);
        assert_eq!(kept.members.len(), 20);
        assert!(kept.members[0].missing.is_some());
        assert_eq!(kept.went_missing, ["s00"]);
        let later = judge(&kept.members, &[], &look, rules, now, SystemTime::now());
        let Judged::Change(again) = later else {
            panic!("{later:?}")
        };
        assert!(again.went_missing.is_empty(), "{again:?}");
    }
}
