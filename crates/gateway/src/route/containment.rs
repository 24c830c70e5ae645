//! Poison containment's part in one request's attempts
//! ([`Attempts`]): reading the tenant's standing before an attempt
//! (`contain`), holding its place among the members it is on
//! (`flight`, `among`) or its probe of a new one (`probe`), recording a
//! crash-like failure as a strike, fleet-wide with `[fleet]`
//! (`crashed`), taking strikes back when the request is answered
//! (`answered`), and, with `[fleet]`, keeping every replica's first
//! attempts on the same members (`home`). The rules are written in
//! [`crate::route::proxy`]'s documentation.

use std::sync::PoisonError;
use std::time::Duration;

use placement::ShardIndex;
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::config::Exhausted;
use crate::fleet;
use crate::health::Availability;
use crate::health::quarantine::{Begun, Marked, Rules, Struck};
use crate::health::spread::{Flight, Full, Members};
use crate::route::attempt::Failure;
use crate::route::attempts::{Attempts, Probe, member_key};
use crate::state::ShardRuntime;
use crate::telemetry::metrics::Metrics;

impl<'a> Attempts<'a> {
    /// Poison containment with `routing.poison_spread = "contained"`, as an
    /// attempt on the shard at `index` begins: its place among the members
    /// the tenant is on, or, when the tenant is on (or struck)
    /// `routing.poison_after` others, those members.
    #[inline]
    pub(super) fn flight(&self, index: ShardIndex) -> Result<Flight<'a>, Full> {
        let (gateway, shards) = (self.gateway, self.shards);
        let tenant = self.tenant_hash;
        let cap = self.config.routing.poison_after as usize;
        gateway
            .spread
            .join(tenant, member_key(&shards[index as usize]), cap, || {
                // One load while no tenant has strikes.
                if !gateway.suspects.any() {
                    return None;
                }
                self.struck()
            })
    }

    /// The members the tenant has struck, as [`member_key`]s of its cell.
    #[cold]
    #[inline(never)]
    pub(super) fn struck(&self) -> Option<Members> {
        let struck = self.gateway.suspects.struck(self.tenant, self.now)?;
        Some(
            self.shards
                .iter()
                .filter(|shard| struck.contains(&shard.id))
                .map(member_key)
                .collect(),
        )
    }

    /// The members of the subset among `reached` ([`member_key`]s) that
    /// the tenant may use (a suspect only those it struck).
    #[cold]
    #[inline(never)]
    pub(super) fn among(&self, reached: &Members) -> SmallVec<[ShardIndex; 8]> {
        let pinned = self.containment.as_ref().and_then(|c| c.pinned.as_deref());
        self.subset
            .iter()
            .copied()
            .filter(|&index| reached.contains(&member_key(&self.shards[index as usize])))
            .filter(|index| pinned.is_none_or(|pinned| pinned.contains(index)))
            .collect()
    }

    /// Poison containment before an attempt: where the tenant's strikes
    /// or quarantine let it be served now (shared by all its requests, so
    /// read afresh every time).
    #[cold]
    #[inline(never)]
    pub(super) fn contain(&mut self) {
        let poison_after = self.config.routing.poison_after as usize;
        let standing = if poison_after == 0 {
            None
        } else {
            self.gateway
                .suspects
                .standing(self.tenant, self.now, poison_after)
        };
        let Some(standing) = standing else {
            if let Some(containment) = &mut self.containment {
                containment.suspect = false;
                containment.pinned = None;
            }
            return;
        };
        let shards = self.shards;
        let pinned = standing.only.map(|only| {
            self.subset
                .iter()
                .copied()
                .filter(|&index| only.contains(&shards[index as usize].id))
                .collect::<SmallVec<[ShardIndex; 8]>>()
        });
        let containment = self.containment.get_or_insert_with(Box::default);
        containment.suspect = standing.suspect;
        // A suspect none of whose struck members is in its subset now (a
        // reload moved it) is not narrowed: nowhere else is safer.
        containment.pinned = pinned.filter(|pinned| !(standing.suspect && pinned.is_empty()));
    }

    /// Poison containment as an attempt on the shard at `index` begins:
    /// its probe when the tenant has strikes and had not struck it, or
    /// `Err` when racing requests of the tenant have reached
    /// `routing.poison_after` members meanwhile.
    #[cold]
    #[inline(never)]
    pub(super) fn probe(&self, index: ShardIndex) -> Result<Option<Probe<'a>>, ()> {
        let suspects = &self.gateway.suspects;
        let shard = self.shards[index as usize].id.as_str();
        let poison_after = self.config.routing.poison_after as usize;
        if poison_after == 0 {
            return Ok(None);
        }
        match suspects.begin(self.tenant, shard, self.now, poison_after) {
            Begun::Free => Ok(None),
            Begun::Probe => Ok(Some(Probe {
                suspects,
                tenant: self.tenant,
                shard,
            })),
            Begun::Refused => Err(()),
        }
    }

    /// Poison containment when an attempt was answered after this request
    /// struck: what a member answered was not poison, so its strikes are
    /// taken back.
    #[cold]
    #[inline(never)]
    pub(super) fn answered(&self) {
        if let Some(containment) = &self.containment
            && containment.request != 0
        {
            self.gateway
                .suspects
                .withdraw(self.tenant, containment.request, self.now);
            fleet::withdraw(self.gateway, self.tenant, containment.request);
        }
    }

    /// Poison containment as a crash-like `failure` on the shard at
    /// `index` is judged, before the failure counts toward the member's
    /// ejection: unless the member is timing out other tenants too (its
    /// fault, not the tenant's), records the tenant's strike here at once
    /// (its other requests see it before their next attempt, and before
    /// the member leaves rotation: a request that sees the member out
    /// sees why), and notes it for [`Self::crashed`].
    #[cold]
    #[inline(never)]
    pub(super) fn strike_here(&mut self, index: usize, failure: Failure, sent: Instant) {
        let (gateway, routing) = (self.gateway, &self.config.routing);
        if routing.poison_after == 0 {
            return;
        }
        let shard = &self.shards[index];
        let cell = &self.config.cells[self.cell].name;
        let now = Instant::now();
        // A member that was already failing other tenants when this
        // attempt was sent is what fails. Only failures seen before the
        // attempt began count: requests in flight before a hanging poison
        // time out before it does, and must not excuse it. Only a timeout
        // is excused so: a crash breaks every request the member holds, the
        // poison's among them, and a tenant whose request is answered
        // elsewhere takes its strike back (`answered`).
        // A hung member fails others only as their attempts time out, one
        // per try at most: a failure within the longest a request lasts
        // before this one was sent still says it was failing.
        let window = routing.request_timeout;
        if gateway
            .suspects
            .shared_fault(shard.window_key(), self.tenant, (sent, now), window)
            && failure == Failure::Timeout
        {
            tracing::debug!(cell = %cell, shard = %shard.id, "a per-try timeout on a shard that is failing other tenants too: no strike");
            return;
        }
        let rules = self.rules();
        let containment = self.containment.get_or_insert_with(Box::default);
        containment.crashed.push(index as ShardIndex);
        if containment.request == 0 {
            containment.request = gateway.suspects.request();
        }
        let own_stop = containment.crashed.len() >= routing.poison_after as usize;
        let struck = Struck {
            cell,
            tenant: self.tenant,
            shard: &shard.id,
            request: containment.request,
            stopped: own_stop,
        };
        let marked = gateway.suspects.record(struck, now, rules);
        containment.struck = Some((index as ShardIndex, own_stop, marked));
    }

    /// What containment decides by.
    fn rules(&self) -> Rules {
        let routing = &self.config.routing;
        Rules {
            poison_after: routing.poison_after as usize,
            strike_life: routing.request_timeout,
            quarantine: routing.quarantine,
        }
    }

    /// Whether [`Self::strike_here`] recorded a strike that
    /// [`Self::crashed`] has not taken yet.
    #[inline]
    pub(super) fn struck_pending(&self) -> bool {
        self.containment
            .as_ref()
            .is_some_and(|containment| containment.struck.is_some())
    }

    /// Poison containment after the strike [`Self::strike_here`] recorded:
    /// with `[fleet]` the fleet's verdict on the tenant, whose strikes on
    /// every replica count; then the request stops at
    /// `routing.poison_after` members of its own or when the strike made
    /// the tenant suspect, and a suspect's quarantine is extended.
    pub(super) async fn crashed(&mut self) {
        let gateway = self.gateway;
        let Some((index, own_stop, mut marked)) =
            self.containment.as_mut().and_then(|c| c.struck.take())
        else {
            return;
        };
        let shard = &self.shards[index as usize];
        let cell = &self.config.cells[self.cell].name;
        let rules = self.rules();
        // With `[fleet]`, the fleet's strikes decide: every replica's
        // count, so R replicas together crash no more members than one.
        if gateway.fleet.is_some() {
            let request = self.containment.as_ref().map_or(0, |c| c.request);
            let struck = Struck {
                cell,
                tenant: self.tenant,
                shard: &shard.id,
                request,
                stopped: own_stop,
            };
            if let Some(fleet_marked) = fleet::strike(gateway, struck, rules).await {
                marked = match (marked, fleet_marked) {
                    (Some(Marked::New), _) | (_, Some(Marked::New)) => Some(Marked::New),
                    (Some(Marked::Again), _) | (_, Some(Marked::Again)) => Some(Marked::Again),
                    (None, None) => None,
                };
            }
        }
        let routing = &self.config.routing;
        let containment = self.containment.get_or_insert_with(Box::default);
        let new_suspect = marked == Some(Marked::New);
        let stopped = own_stop || new_suspect;
        containment.stopped |= stopped;
        // A request of a suspect obeys its containment from now on.
        containment.suspect |= marked.is_some();
        if stopped {
            Metrics::cell_event(&gateway.metrics.poison_stops, cell);
        }
        if new_suspect {
            Metrics::cell_event(&gateway.metrics.suspects_marked, cell);
        }
        if stopped || new_suspect {
            // One line for both: they are usually the same moment.
            let what = match (own_stop, new_suspect) {
                (true, true) => {
                    "a request failed crash-like on routing.poison_after members: no further member is tried, and its tenant is suspect (served only by the members it struck, without failover after a request was sent)"
                }
                (true, false) => {
                    "a request failed crash-like on routing.poison_after members: no further member is tried"
                }
                _ => {
                    "tenant is suspect of poisoning its shards: its requests failed crash-like on routing.poison_after members together; it is served only by the members it struck, without failover after a request was sent"
                }
            };
            tracing::warn!(
                cell = %cell,
                tenant = %self.tenant,
                members = containment.crashed.len(),
                quarantine_seconds = routing.quarantine.as_secs(),
                "{what}"
            );
        }
    }

    /// With `[fleet]`, the members a tenant held to `routing.poison_after`
    /// of them may use: the first `poison_after` of its subset, in its
    /// selection order (the same on every replica), that are up here or
    /// that this request crashed on. Replicas that pick freely would each
    /// send a poison tenant's concurrent requests to members of their own
    /// before any strike could be shared; in one order, together they
    /// reach no more members than one replica. A member this request
    /// tried keeps its place until this replica's health takes it out of
    /// rotation: a refused connection may be a member the tenant's poison
    /// crashed a moment ago through another replica, whose strike is not
    /// known yet.
    #[cold]
    #[inline(never)]
    pub(super) fn home(&self) -> SmallVec<[ShardIndex; 8]> {
        let poison_after = self.config.routing.poison_after as usize;
        let crashed = self
            .containment
            .as_ref()
            .map_or(&[][..], |containment| containment.crashed.as_slice());
        // The tenant's strikes, here or (as learned) anywhere in the fleet:
        // a member it struck keeps its place out of rotation too.
        let struck = if self.gateway.suspects.any() {
            self.gateway.suspects.struck(self.tenant, self.now)
        } else {
            None
        };
        let failover = self.config.routing.failover;
        let mut home = SmallVec::new();
        for &index in self.subset {
            if home.len() == poison_after {
                break;
            }
            let shard = &self.shards[index as usize];
            let up = !failover || shard.availability_at(self.config, self.now) == Availability::Up;
            if up
                || crashed.contains(&index)
                || struck
                    .as_ref()
                    .is_some_and(|struck| struck.contains(&shard.id))
                || self.lately_out(shard)
            {
                home.push(index);
            }
        }
        // Nothing up among them: with `exhausted = "spill"` the request may
        // still leave the subset, as it would without a fleet.
        if home.is_empty() && self.config.routing.exhausted == Exhausted::Spill {
            return SmallVec::new();
        }
        home
    }

    /// With `[fleet]`, whether `shard` went out of rotation so lately that
    /// the strike that may explain it (a tenant's poison crashing it
    /// through another replica) may not have reached the store yet: within
    /// four times `fleet.timeout_ms`, and at least 100 ms. Such a member
    /// keeps its place among the tenant's first members meanwhile (its
    /// requests go to the other first members, which are up), so that a
    /// crash is never answered by moving the tenant to a member of its
    /// own before the fleet could say why.
    fn lately_out(&self, shard: &ShardRuntime) -> bool {
        let Some(settings) = &self.config.fleet else {
            return false;
        };
        let settle = (settings.store.timeout * 4).max(Duration::from_millis(100));
        let health = shard.health.lock().unwrap_or_else(PoisonError::into_inner);
        health
            .out_since(self.now, &self.config.health)
            .is_some_and(|since| self.now.saturating_duration_since(since) < settle)
    }

    /// With `[fleet]`, whether the next attempt would go to a member
    /// beyond the tenant's first `poison_after` (one of those is out here,
    /// or failed this request) before the fleet was asked about the
    /// tenant: another replica may have struck those first members a
    /// moment ago, and this replica's own health may be what knows it, not
    /// its suspects. Then the request asks first ([`Self::consult_fleet`]),
    /// unless this replica asked about the tenant within `fleet.sync_ms`
    /// (what it learned then is in its suspects).
    pub(super) fn leaves_first_members(&mut self, home: &[ShardIndex]) -> bool {
        let first = &self.subset[..self
            .subset
            .len()
            .min(self.config.routing.poison_after as usize)];
        if home.iter().all(|index| first.contains(index)) {
            return false;
        }
        if self.containment.as_ref().is_some_and(|c| c.consulted) {
            return false;
        }
        let (Some(fleet), Some(settings)) = (&self.gateway.fleet, &self.config.fleet) else {
            return false;
        };
        // A shard that is simply down: the fleet had nothing against the
        // tenant a moment ago, and every member passed over has been out
        // for longer than a strike takes to reach the store.
        if fleet.clean_lately(self.tenant_hash, settings.sync_every)
            && self.passed_over_long_ago(home)
        {
            return false;
        }
        self.containment.get_or_insert_with(Box::default).consult = true;
        true
    }

    /// Whether every member of the subset before `home`'s last that is not
    /// in `home` has been out of rotation for at least a strike's life
    /// (`routing.request_timeout_ms`): a strike that explains it is in the
    /// store by then, so a clean answer read since still holds for them.
    fn passed_over_long_ago(&self, home: &[ShardIndex]) -> bool {
        let Some(last) = home.last() else {
            return false;
        };
        let strike_life = self.config.routing.request_timeout;
        self.subset
            .iter()
            .take_while(|index| *index != last)
            .filter(|index| !home.contains(index))
            .all(|&index| {
                let shard = &self.shards[index as usize];
                let health = shard.health.lock().unwrap_or_else(PoisonError::into_inner);
                health
                    .out_since(self.now, &self.config.health)
                    .is_some_and(|since| self.now.saturating_duration_since(since) >= strike_life)
            })
    }

    /// Whether [`Self::leaves_first_members`] asked for the fleet's word.
    pub(super) fn wants_fleet(&self) -> bool {
        self.containment.as_ref().is_some_and(|c| c.consult)
    }

    /// Reads the tenant's standing from the fleet (within
    /// `fleet.timeout_ms`) into this replica's suspects; without an answer
    /// the replica decides on what it knows, as without a fleet.
    pub(super) async fn consult_fleet(&mut self) {
        let containment = self.containment.get_or_insert_with(Box::default);
        containment.consult = false;
        containment.consulted = true;
        let cell = &self.config.cells[self.cell].name;
        let strike_life = self.config.routing.request_timeout;
        let tenant = (self.tenant, self.tenant_hash);
        fleet::consult(self.gateway, cell, tenant, strike_life).await;
        // Read afresh before the next pick.
        self.contain();
    }
}
