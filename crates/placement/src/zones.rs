//! Zone-aware placement: a tenant's `k` members spread over failure zones as
//! evenly as the zones allow, each zone choosing its members on its own.
//!
//! **Allocation.** Zones take turns by water-filling: every zone that still
//! has unchosen shards gets `⌊remaining / open zones⌋` more (capped by its
//! size) until fewer members remain than open zones; those last members go to
//! the tenant's highest-ranked open zones, one each. Without capped zones this
//! is the ceil/floor split; a zone smaller than its share gives all its shards
//! and the rest spills to the others. The ranking of zones is a keyed,
//! per-tenant order, so the zones that take the extra member differ between
//! tenants and no zone is systematically heavier.
//!
//! **Independence.** Inside a zone the members come from the zone's own
//! shards only (rendezvous over the zone's shard ids, or Recipe 12.1 over the
//! zone's shards under a per-zone subkey), so adding or removing a shard in
//! one zone never reshuffles the members in another, as long as the number of
//! members each zone gives is unchanged.
//!
//! **Order.** Members are listed round-robin over the zones in the tenant's
//! zone order, so the first `min(k, zones)` members are all in distinct zones.

use std::fmt;

use crate::entry::{Filled, entry_points};
use crate::error::PlacementError;
use crate::fleet::{Fleet, ShardIndex};
use crate::hmac_modulo::HmacModulo;
use crate::key::PlacementKey;
use crate::keyed_hash::{self, KeyedHasher, TenantHash};
use crate::rendezvous::Rendezvous;

const ZONE_DOMAIN: &[u8] = b"zone";
const RANK_PURPOSE: &[u8] = b"zones/v1";
const TENANT_DOMAIN: &[u8] = b"tenant";

/// How each zone chooses its own members.
#[derive(Clone)]
enum Within {
    /// One rendezvous over the whole fleet, asked for each zone's members.
    Rendezvous(Rendezvous),
    /// Recipe 12.1 per zone, each under a subkey derived from the zone name,
    /// plus a separate hasher to rank the zones.
    HmacModulo {
        per_zone: Vec<HmacModulo>,
        ranker: KeyedHasher,
    },
}

#[derive(Clone, Debug)]
struct ZonePlan {
    members: Vec<ShardIndex>,
    seed: u64,
}

/// Zone-aware placement bound to a key and a zoned fleet.
///
/// ```
/// use placement::{Fleet, PlacementKey, ZoneAware};
///
/// let fleet = Fleet::from_zone_spec("a:4,b:4,c:4").unwrap();
/// let zoned = ZoneAware::rendezvous(&PlacementKey::from_bytes(b"doc".to_vec()), &fleet).unwrap();
/// let subset = zoned.place("tenant-1", 3).unwrap();
/// let mut zones: Vec<_> = subset.iter().map(|&i| fleet.shard(i).zone.clone().unwrap()).collect();
/// zones.sort();
/// assert_eq!(zones, ["a", "b", "c"]);
/// ```
#[derive(Clone)]
pub struct ZoneAware {
    zones: Vec<ZonePlan>,
    within: Within,
    n: u32,
}

impl ZoneAware {
    /// Zone-aware rendezvous: inside each zone, the top shards by the same
    /// keyed score plain rendezvous uses.
    pub fn rendezvous(key: &PlacementKey, fleet: &Fleet) -> Result<Self, PlacementError> {
        let hrw = Rendezvous::new(key, fleet);
        let zones = plan_zones(fleet, hrw.hasher())?;
        Ok(Self {
            zones,
            within: Within::Rendezvous(hrw),
            n: fleet.n(),
        })
    }

    /// Zone-aware Recipe 12.1: inside each zone, the recipe over that zone's
    /// shards under a subkey derived from the zone's name.
    pub fn hmac_modulo(key: &PlacementKey, fleet: &Fleet) -> Result<Self, PlacementError> {
        let ranker = KeyedHasher::new(key, RANK_PURPOSE);
        let zones = plan_zones(fleet, &ranker)?;
        let per_zone = fleet
            .zones()
            .iter()
            .map(|zone| {
                let mut label = b"zone/".to_vec();
                label.extend_from_slice(zone.name.as_bytes());
                HmacModulo::new(&key.derive(&label), zone.members.len() as u32)
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            zones,
            within: Within::HmacModulo { per_zone, ranker },
            n: fleet.n(),
        })
    }

    /// The number of shards chosen from.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// The number of zones.
    pub fn zone_count(&self) -> usize {
        self.zones.len()
    }

    /// The tenant's `k` shard indices (fleet indices), round-robin over its
    /// zone order, into `out` (empty, `k` checked).
    fn fill(&self, tenant: &str, k: usize, out: &mut Vec<ShardIndex>) -> Filled {
        let hash = match &self.within {
            Within::Rendezvous(hrw) => hrw.tenant_hash(tenant),
            Within::HmacModulo { ranker, .. } => ranker.hash(TENANT_DOMAIN, tenant.as_bytes()),
        };
        let order = self.zone_order(hash);
        let counts = water_fill(k, &order, |zone| self.zones[zone].members.len());

        // Each zone's members, chosen from that zone alone.
        let mut chosen: Vec<Vec<ShardIndex>> = vec![Vec::new(); self.zones.len()];
        for &zone in &order {
            let want = counts[zone];
            if want == 0 {
                continue;
            }
            let plan = &self.zones[zone];
            let into = &mut chosen[zone];
            match &self.within {
                Within::Rendezvous(hrw) => {
                    hrw.top_k_into(hash, plan.members.iter().copied(), want, into)
                }
                Within::HmacModulo { per_zone, .. } => {
                    per_zone[zone].place_into(tenant, want as u32, into)?;
                    for local in into.iter_mut() {
                        *local = plan.members[*local as usize];
                    }
                }
            }
        }

        // Round-robin over zones in the tenant's order.
        for round in 0..k {
            for &zone in &order {
                if let Some(&index) = chosen[zone].get(round) {
                    out.push(index);
                }
            }
            if out.len() == k {
                break;
            }
        }
        Ok(())
    }

    /// Zone positions, best-ranked first for this tenant.
    fn zone_order(&self, hash: TenantHash) -> Vec<usize> {
        let mut order: Vec<(u128, usize)> = self
            .zones
            .iter()
            .enumerate()
            .map(|(position, zone)| {
                let rank =
                    (u128::from(keyed_hash::score(hash, zone.seed)) << 64) | u128::from(zone.seed);
                (rank, position)
            })
            .collect();
        order.sort_unstable_by_key(|&(rank, _)| std::cmp::Reverse(rank));
        order.into_iter().map(|(_, position)| position).collect()
    }
}

entry_points!(ZoneAware, "fleet indices, round-robin over its zone order");

impl fmt::Debug for ZoneAware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let within = match self.within {
            Within::Rendezvous(_) => "rendezvous",
            Within::HmacModulo { .. } => "hmac-modulo",
        };
        f.debug_struct("ZoneAware")
            .field("n", &self.n)
            .field("zones", &self.zones.len())
            .field("within", &within)
            .finish_non_exhaustive()
    }
}

fn plan_zones(fleet: &Fleet, hasher: &KeyedHasher) -> Result<Vec<ZonePlan>, PlacementError> {
    if let Some(shard) = fleet.shards().iter().find(|shard| shard.zone.is_none()) {
        return Err(PlacementError::MissingZone {
            id: shard.id.clone(),
        });
    }
    Ok(fleet
        .zones()
        .iter()
        .map(|zone| ZonePlan {
            members: zone.members.clone(),
            seed: hasher.hash(ZONE_DOMAIN, zone.name.as_bytes()).0[0],
        })
        .collect())
}

/// How many of a tenant's `k` members each zone gives, by water-filling (see
/// the module docs): `counts[zone]` for each zone position.
///
/// `order` lists the zone positions `0..zones` best-ranked first; `size`
/// gives a zone's shard count. Public so that the analyser's closed-form
/// overlap expectation enumerates splits with this very rule rather than a
/// copy that could drift from it.
///
/// ```
/// // Three zones of 10, ranked 2, 0, 1: five members split 2, 1, 2.
/// let sizes = [10, 10, 10];
/// assert_eq!(placement::water_fill(5, &[2, 0, 1], |zone| sizes[zone]), [2, 1, 2]);
/// ```
///
/// # Panics
/// If `k` exceeds the total size of the zones, or `order` is not a
/// permutation of `0..order.len()`.
pub fn water_fill(k: usize, order: &[usize], size: impl Fn(usize) -> usize) -> Vec<usize> {
    let mut counts = vec![0; order.len()];
    let mut remaining = k;
    while remaining > 0 {
        let open: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&zone| counts[zone] < size(zone))
            .collect();
        let share = remaining / open.len();
        if share == 0 {
            for &zone in open.iter().take(remaining) {
                counts[zone] += 1;
            }
            break;
        }
        for zone in open {
            let give = share.min(size(zone) - counts[zone]);
            counts[zone] += give;
            remaining -= give;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_is_ceil_floor_without_caps() {
        let sizes = [10, 10, 10];
        assert_eq!(water_fill(5, &[2, 0, 1], |z| sizes[z]), vec![2, 1, 2]);
        assert_eq!(water_fill(6, &[2, 0, 1], |z| sizes[z]), vec![2, 2, 2]);
        assert_eq!(water_fill(1, &[1, 0, 2], |z| sizes[z]), vec![0, 1, 0]);
    }

    #[test]
    fn allocation_spills_from_small_zones() {
        let sizes = [1, 10, 10];
        assert_eq!(water_fill(5, &[0, 1, 2], |z| sizes[z]), vec![1, 2, 2]);
        assert_eq!(water_fill(6, &[0, 2, 1], |z| sizes[z]), vec![1, 2, 3]);
        assert_eq!(water_fill(21, &[0, 1, 2], |z| sizes[z]), vec![1, 10, 10]);
    }
}
