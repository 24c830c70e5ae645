//! Poison containment's memory with `[fleet]`: the store's verdict on a
//! tenant after one of its strikes, the suspects the store holds, and the
//! suspects this replica holds that the store does not (written back when
//! it answers).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::{Marked, Suspect, Suspects};
use crate::store::fleet::{SharedSuspect, Verdict};

impl Suspects {
    /// Takes the fleet's word on `tenant` after one of its strikes
    /// ([`crate::store::fleet::Verdict`]): a suspect fleet-wide is suspect
    /// here, served by every member it struck on any replica; a tenant
    /// that is not has the fleet's strikes counted here too, so its next
    /// attempt is chosen knowing what other replicas' requests crashed.
    /// Returns `Some(Marked::New)` when this made it suspect here.
    pub fn adopt_verdict(
        &self,
        cell: &str,
        tenant: &str,
        verdict: &Verdict,
        now: Instant,
        strike_life: Duration,
    ) -> Option<Marked> {
        if verdict.suspect {
            let shared = SharedSuspect {
                tenant: tenant.to_owned(),
                cell: cell.to_owned(),
                members: verdict.members.clone(),
                left: verdict.left,
                since_ms: 0,
                by: String::new(),
                strikes: 0,
                stops: 0,
            };
            return self.adopt(&shared, now).then_some(Marked::New);
        }
        let mut tenants = self.lock();
        let entry = self.entry(&mut tenants, tenant, cell);
        // The fleet's word replaces what it said before: a strike taken
        // back there is gone here too.
        entry.fleet_struck = (verdict.members.clone(), now + strike_life);
        self.count.store(tenants.len(), Ordering::Relaxed);
        None
    }

    /// Makes `shared`'s tenant suspect here as the fleet holds it: its
    /// members joined with any it has here, the later end kept. Returns
    /// whether it was not suspect here before.
    pub fn adopt(&self, shared: &SharedSuspect, now: Instant) -> bool {
        let wall = SystemTime::now();
        let mut tenants = self.lock();
        let entry = self.entry(&mut tenants, &shared.tenant, &shared.cell);
        entry.expire(now);
        let until = now + shared.left;
        let new = entry.suspect.is_none();
        let suspect = entry.suspect.get_or_insert_with(|| Suspect {
            cell: shared.cell.clone(),
            shards: Vec::new(),
            stops: shared.stops,
            strikes: shared.strikes,
            since: if shared.since_ms == 0 {
                wall
            } else {
                SystemTime::UNIX_EPOCH + Duration::from_millis(shared.since_ms)
            },
            last: wall,
            until,
            shared: true,
            by: None,
        });
        for member in &shared.members {
            if !suspect.shards.contains(member) {
                suspect.shards.push(member.clone());
            }
        }
        suspect.shards.sort();
        suspect.until = suspect.until.max(until);
        suspect.shared = true;
        if !shared.by.is_empty() {
            suspect.by = Some(shared.by.clone());
        }
        entry.strikes.clear();
        self.count.store(tenants.len(), Ordering::Relaxed);
        new
    }

    /// Lifts the quarantine of every suspect the fleet held and holds no
    /// more (cleared through another replica, or ended there), keeping
    /// those `held` names; returns the tenants lifted.
    pub fn forget_unshared(&self, held: &HashSet<&str>, now: Instant) -> Vec<String> {
        let mut tenants = self.lock();
        let mut lifted = Vec::new();
        for (tenant, entry) in tenants.iter_mut() {
            if entry
                .suspect
                .as_ref()
                .is_some_and(|suspect| suspect.shared && !held.contains(tenant.as_str()))
            {
                entry.suspect = None;
                entry.strikes.clear();
                entry.fleet_struck.0.clear();
                lifted.push(tenant.clone());
            }
        }
        for tenant in &lifted {
            self.sweep(&mut tenants, tenant, now);
        }
        lifted
    }

    /// The suspects the fleet's store does not hold yet (marked while it
    /// was unreachable), as it would hold them, with their time left.
    pub fn unshared(&self, now: Instant, replica: &str) -> Vec<SharedSuspect> {
        let tenants = self.lock();
        tenants
            .iter()
            .filter_map(|(tenant, entry)| {
                let suspect = entry.suspect.as_ref()?;
                (!suspect.shared && suspect.until > now).then(|| SharedSuspect {
                    tenant: tenant.clone(),
                    cell: suspect.cell.clone(),
                    members: suspect.shards.clone(),
                    left: suspect.until - now,
                    since_ms: suspect
                        .since
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .map_or(0, |since| since.as_millis() as u64),
                    by: replica.to_owned(),
                    strikes: suspect.strikes,
                    stops: suspect.stops,
                })
            })
            .collect()
    }

    /// Forgets that the fleet's store holds any suspect (it restarted
    /// empty, or went back): every one is written back.
    pub fn unshare_all(&self) {
        for entry in self.lock().values_mut() {
            if let Some(suspect) = &mut entry.suspect {
                suspect.shared = false;
            }
        }
    }

    /// Notes that the fleet's store holds `tenant`'s suspicion now.
    pub fn shared(&self, tenant: &str) {
        if let Some(suspect) = self
            .lock()
            .get_mut(tenant)
            .and_then(|entry| entry.suspect.as_mut())
        {
            suspect.shared = true;
        }
    }
}
