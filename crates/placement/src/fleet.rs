//! The fleet: shards with stable ids, optional zone labels and weights.
//!
//! A shard's *index* is its position in the fleet and may change when the
//! fleet changes; its *id* is its identity and must not. Rendezvous placement
//! scores ids, never indices, which is what keeps it stable when shards are
//! added or removed.

use std::collections::HashMap;

use crate::error::PlacementError;

/// A shard's position in its fleet.
pub type ShardIndex = u32;

/// One shard of the fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Shard {
    /// Stable identity, unique within the fleet.
    pub id: String,
    /// Failure-domain label (availability zone, rack, …), if any.
    pub zone: Option<String>,
    /// Relative capacity for weighted rendezvous placement; 1.0 by default.
    pub weight: f64,
}

impl Shard {
    /// A shard with weight 1 and no zone.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            zone: None,
            weight: 1.0,
        }
    }

    /// Sets the zone label.
    pub fn in_zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// Sets the weight.
    pub fn with_weight(mut self, weight: f64) -> Self {
        self.weight = weight;
        self
    }
}

/// A zone and the indices of its shards, in fleet order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    /// The zone's label.
    pub name: String,
    /// Indices of the shards in this zone.
    pub members: Vec<ShardIndex>,
}

/// A validated set of shards.
///
/// ```
/// use placement::Fleet;
///
/// let fleet = Fleet::from_zone_spec("a:2,b:3").unwrap();
/// assert_eq!(fleet.len(), 5);
/// assert_eq!(fleet.shard(2).id, "2");
/// assert_eq!(fleet.shard(2).zone.as_deref(), Some("b"));
/// assert_eq!(fleet.index_of("4"), Some(4));
/// ```
#[derive(Debug, Clone)]
pub struct Fleet {
    shards: Vec<Shard>,
    by_id: HashMap<String, ShardIndex>,
    zones: Vec<Zone>,
}

impl Fleet {
    /// The largest shard weight accepted. Weights are relative, so the cap
    /// only keeps weighted scores finite.
    pub const MAX_WEIGHT: f64 = 1e12;

    /// The largest fleet accepted. Every shard has an id string, so a
    /// fleet is memory proportional to its size; ten million shards is far
    /// beyond any real fleet and still fits comfortably.
    pub const MAX_SHARDS: u64 = 10_000_000;

    /// Validates a list of shards: at least one, ids non-empty and unique,
    /// weights positive and at most [`MAX_WEIGHT`](Self::MAX_WEIGHT).
    pub fn new(shards: Vec<Shard>) -> Result<Self, PlacementError> {
        if shards.is_empty() {
            return Err(PlacementError::EmptyFleet);
        }
        if shards.len() as u64 > Self::MAX_SHARDS {
            return Err(PlacementError::FleetTooLarge {
                n: shards.len() as u64,
                max: Self::MAX_SHARDS,
            });
        }
        let mut by_id = HashMap::with_capacity(shards.len());
        let mut zones: Vec<Zone> = Vec::new();
        for (position, shard) in shards.iter().enumerate() {
            if shard.id.is_empty() {
                return Err(PlacementError::EmptyShardId { position });
            }
            if !(shard.weight > 0.0 && shard.weight <= Self::MAX_WEIGHT) {
                return Err(PlacementError::InvalidWeight {
                    id: shard.id.clone(),
                    weight: shard.weight,
                });
            }
            if by_id
                .insert(shard.id.clone(), position as ShardIndex)
                .is_some()
            {
                return Err(PlacementError::DuplicateShardId {
                    id: shard.id.clone(),
                });
            }
            if let Some(name) = &shard.zone {
                if name.is_empty() {
                    return Err(PlacementError::EmptyZoneName);
                }
                match zones.iter_mut().find(|zone| &zone.name == name) {
                    Some(zone) => zone.members.push(position as ShardIndex),
                    None => zones.push(Zone {
                        name: name.clone(),
                        members: vec![position as ShardIndex],
                    }),
                }
            }
        }
        Ok(Self {
            shards,
            by_id,
            zones,
        })
    }

    /// `n` shards with ids `"0"` … `"n-1"`, no zones, equal weights.
    pub fn uniform(n: u32) -> Result<Self, PlacementError> {
        check_size(u64::from(n))?;
        Self::new((0..n).map(|i| Shard::new(i.to_string())).collect())
    }

    /// Shards numbered `"0"` upwards, assigned to zones in consecutive runs
    /// as a spec such as `a:8,b:8` says (the first 8 shards in zone `a`, the
    /// next 8 in zone `b`).
    pub fn from_zone_spec(spec: &str) -> Result<Self, PlacementError> {
        let invalid = |part: &str, reason: &str| PlacementError::InvalidZoneSpec {
            spec: part.to_owned(),
            reason: reason.to_owned(),
        };
        let mut shards = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        for part in spec.split(',') {
            let part = part.trim();
            let (name, count) = part
                .split_once(':')
                .ok_or_else(|| invalid(part, "missing ':' between zone name and shard count"))?;
            let name = name.trim();
            if name.is_empty() {
                return Err(PlacementError::EmptyZoneName);
            }
            if seen.contains(&name) {
                return Err(invalid(part, "zone named twice"));
            }
            seen.push(name);
            let count: u32 = count
                .trim()
                .parse()
                .map_err(|_| invalid(part, "the shard count is not a whole number"))?;
            if count == 0 {
                return Err(PlacementError::EmptyZone {
                    zone: name.to_owned(),
                });
            }
            // Checked before allocating: a spec is user input.
            check_size(shards.len() as u64 + u64::from(count))?;
            let first = shards.len();
            shards.extend(
                (first..first + count as usize).map(|i| Shard::new(i.to_string()).in_zone(name)),
            );
        }
        Self::new(shards)
    }

    /// Number of shards.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Always false: a fleet holds at least one shard.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// The shards in index order.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// The shard at an index.
    ///
    /// # Panics
    /// If the index is out of range; indices come from this fleet's placements.
    pub fn shard(&self, index: ShardIndex) -> &Shard {
        &self.shards[index as usize]
    }

    /// The index of a shard id.
    pub fn index_of(&self, id: &str) -> Option<ShardIndex> {
        self.by_id.get(id).copied()
    }

    /// The zones in order of first appearance. Empty when no shard has a zone.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// Whether any shard has a weight other than 1.
    pub fn is_weighted(&self) -> bool {
        self.shards.iter().any(|shard| shard.weight != 1.0)
    }

    /// Ids of the shards at the given indices.
    pub fn ids<'a>(&'a self, indices: &'a [ShardIndex]) -> impl Iterator<Item = &'a str> + 'a {
        indices.iter().map(|&index| self.shard(index).id.as_str())
    }

    pub(crate) fn n(&self) -> u32 {
        self.shards.len() as u32
    }
}

fn check_size(n: u64) -> Result<(), PlacementError> {
    if n > Fleet::MAX_SHARDS {
        return Err(PlacementError::FleetTooLarge {
            n,
            max: Fleet::MAX_SHARDS,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_fleets_are_refused_before_allocating() {
        // Found by the zone-spec fuzz target: this once tried to allocate
        // tens of gigabytes.
        assert!(matches!(
            Fleet::from_zone_spec("a:4000000000"),
            Err(PlacementError::FleetTooLarge { .. })
        ));
        assert!(matches!(
            Fleet::from_zone_spec("a:6000000,b:6000000"),
            Err(PlacementError::FleetTooLarge { .. })
        ));
        assert!(matches!(
            Fleet::uniform(u32::MAX),
            Err(PlacementError::FleetTooLarge { .. })
        ));
    }

    #[test]
    fn rejects_bad_fleets() {
        assert_eq!(Fleet::new(vec![]).unwrap_err(), PlacementError::EmptyFleet);
        assert_eq!(Fleet::uniform(0).unwrap_err(), PlacementError::EmptyFleet);
        assert!(matches!(
            Fleet::new(vec![Shard::new("a"), Shard::new("a")]),
            Err(PlacementError::DuplicateShardId { .. })
        ));
        assert!(matches!(
            Fleet::new(vec![Shard::new("")]),
            Err(PlacementError::EmptyShardId { position: 0 })
        ));
        for weight in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                Fleet::new(vec![Shard::new("a").with_weight(weight)]),
                Err(PlacementError::InvalidWeight { .. })
            ));
        }
        assert_eq!(
            Fleet::new(vec![Shard::new("a").in_zone("")]).unwrap_err(),
            PlacementError::EmptyZoneName
        );
    }

    #[test]
    fn zone_spec_parses_and_rejects() {
        let fleet = Fleet::from_zone_spec("east:2, west:1").unwrap();
        assert_eq!(fleet.zones().len(), 2);
        assert_eq!(fleet.zones()[1].members, vec![2]);
        assert_eq!(
            Fleet::from_zone_spec("a:2,b:0").unwrap_err(),
            PlacementError::EmptyZone { zone: "b".into() }
        );
        for bad in ["a", "a:x", "a:2,a:3", ":3", "a:-1", ""] {
            assert!(Fleet::from_zone_spec(bad).is_err(), "{bad}");
        }
    }
}
