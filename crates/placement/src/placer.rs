//! The one placement entry point for the rest of the product: an algorithm,
//! a fleet, a key, a default `k` and per-tenant overrides, validated once.
//!
//! Everything that can be wrong with a placement (a `k` out of range, an
//! override naming a missing shard, weights on an algorithm that ignores
//! them) is caught when the [`Placer`] is built, so computing a subset on the
//! request path cannot fail.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use crate::error::{PlacementError, check_k};
use crate::fleet::{Fleet, ShardIndex};
use crate::hmac_modulo::HmacModulo;
use crate::key::PlacementKey;
use crate::rendezvous::Rendezvous;
use crate::zones::ZoneAware;

/// Which subset-selection algorithm to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Recipe 12.1: HMAC expansion and rejection sampling modulo `n`. Bit-exact
    /// with the design chapter; remaps nearly everyone when `n` changes.
    HmacModulo,
    /// Highest random weight over shard ids: moves the fewest tenants when the
    /// fleet changes, and honours shard weights.
    Rendezvous,
}

impl Algorithm {
    /// Every algorithm, in the order they are documented.
    pub const ALL: [Algorithm; 2] = [Algorithm::HmacModulo, Algorithm::Rendezvous];

    /// The name used on the command line and in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::HmacModulo => "hmac-modulo",
            Algorithm::Rendezvous => "rendezvous",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for an unknown algorithm name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown algorithm {0:?}: use hmac-modulo or rendezvous")]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|algorithm| algorithm.name() == name)
            .ok_or_else(|| UnknownAlgorithm(name.to_owned()))
    }
}

/// How a [`Placer`] places tenants by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementConfig {
    /// The subset-selection algorithm.
    pub algorithm: Algorithm,
    /// The default subset size.
    pub k: u32,
    /// Spread each subset over the fleet's zones.
    pub zone_aware: bool,
}

/// A per-tenant exception to the default placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantOverride {
    /// A different subset size, typically larger for a large tenant so its
    /// load spreads wider.
    K(u32),
    /// An explicit list of shard ids, in order: dedicated capacity.
    Dedicated(Vec<String>),
}

#[derive(Debug, Clone)]
enum Resolved {
    K(u32),
    Dedicated(Vec<ShardIndex>),
}

#[derive(Debug, Clone)]
enum Engine {
    HmacModulo(HmacModulo),
    Rendezvous(Rendezvous),
    Zoned(ZoneAware),
}

impl Engine {
    fn place_into(
        &self,
        tenant: &str,
        k: u32,
        out: &mut Vec<ShardIndex>,
    ) -> Result<(), PlacementError> {
        match self {
            Engine::HmacModulo(engine) => engine.place_into(tenant, k, out),
            Engine::Rendezvous(engine) => engine.place_into(tenant, k, out),
            Engine::Zoned(engine) => engine.place_into(tenant, k, out),
        }
    }
}

/// A validated placement: tenant → subset, infallibly.
///
/// ```
/// use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer, TenantOverride};
///
/// let config = PlacementConfig { algorithm: Algorithm::Rendezvous, k: 2, zone_aware: false };
/// let mut placer = Placer::new(Fleet::uniform(16).unwrap(), &PlacementKey::from_bytes(b"doc".to_vec()), config).unwrap();
/// placer.set_override("whale", TenantOverride::K(6)).unwrap();
/// placer.set_override("vip", TenantOverride::Dedicated(vec!["15".into()])).unwrap();
///
/// assert_eq!(placer.subset("minnow").len(), 2);
/// assert_eq!(placer.subset("whale").len(), 6);
/// assert_eq!(placer.subset("vip"), vec![15]);
/// ```
#[derive(Debug, Clone)]
pub struct Placer {
    fleet: Fleet,
    config: PlacementConfig,
    engine: Engine,
    overrides: HashMap<String, Resolved>,
}

impl Placer {
    /// Builds a placer, checking that `k` fits the fleet and that the fleet
    /// suits the algorithm.
    pub fn new(
        fleet: Fleet,
        key: &PlacementKey,
        config: PlacementConfig,
    ) -> Result<Self, PlacementError> {
        check_k(config.k, fleet.n())?;
        if fleet.is_weighted() && config.algorithm == Algorithm::HmacModulo {
            return Err(PlacementError::WeightsNeedRendezvous);
        }
        let engine = match (config.algorithm, config.zone_aware) {
            (Algorithm::HmacModulo, false) => Engine::HmacModulo(HmacModulo::new(key, fleet.n())?),
            (Algorithm::Rendezvous, false) => Engine::Rendezvous(Rendezvous::new(key, &fleet)),
            (Algorithm::HmacModulo, true) => Engine::Zoned(ZoneAware::hmac_modulo(key, &fleet)?),
            (Algorithm::Rendezvous, true) => Engine::Zoned(ZoneAware::rendezvous(key, &fleet)?),
        };
        Ok(Self {
            fleet,
            config,
            engine,
            overrides: HashMap::new(),
        })
    }

    /// Gives one tenant its own `k` or its own shards, replacing any earlier
    /// override for that tenant.
    pub fn set_override(
        &mut self,
        tenant: impl Into<String>,
        rule: TenantOverride,
    ) -> Result<(), PlacementError> {
        let tenant = tenant.into();
        let resolved = match rule {
            TenantOverride::K(k) => {
                check_k(k, self.fleet.n())?;
                Resolved::K(k)
            }
            TenantOverride::Dedicated(ids) => {
                if ids.is_empty() {
                    return Err(PlacementError::InvalidOverride {
                        tenant,
                        reason: "the dedicated shard list is empty; list at least one shard id"
                            .into(),
                    });
                }
                let mut indices = Vec::with_capacity(ids.len());
                for id in ids {
                    let Some(index) = self.fleet.index_of(&id) else {
                        return Err(PlacementError::UnknownShard { tenant, id });
                    };
                    if indices.contains(&index) {
                        return Err(PlacementError::InvalidOverride {
                            tenant,
                            reason: format!("shard {id:?} is listed twice"),
                        });
                    }
                    indices.push(index);
                }
                Resolved::Dedicated(indices)
            }
        };
        self.overrides.insert(tenant, resolved);
        Ok(())
    }

    /// The tenant's subset as fleet indices, in selection order.
    pub fn subset(&self, tenant: &str) -> Vec<ShardIndex> {
        let mut out = Vec::with_capacity(self.k_for(tenant) as usize);
        self.subset_into(tenant, &mut out);
        out
    }

    /// Like [`subset`](Self::subset), into a caller-owned buffer (cleared first).
    pub fn subset_into(&self, tenant: &str, out: &mut Vec<ShardIndex>) {
        let k = match self.overrides.get(tenant) {
            Some(Resolved::Dedicated(indices)) => {
                out.clear();
                out.extend_from_slice(indices);
                return;
            }
            Some(Resolved::K(k)) => *k,
            None => self.config.k,
        };
        self.engine
            .place_into(tenant, k, out)
            .expect("k and the fleet were validated when the placer was built");
    }

    /// The tenant's subset of `k` members, in selection order, into a
    /// caller-owned buffer (cleared first), whatever override the placer
    /// holds for it: for callers that keep tenants' own sizes themselves.
    pub fn subset_of_size_into(
        &self,
        tenant: &str,
        k: u32,
        out: &mut Vec<ShardIndex>,
    ) -> Result<(), PlacementError> {
        check_k(k, self.fleet.n())?;
        self.engine.place_into(tenant, k, out)
    }

    /// The tenant's subset as shard ids, in selection order.
    pub fn subset_ids(&self, tenant: &str) -> Vec<&str> {
        self.subset(tenant)
            .into_iter()
            .map(|index| self.fleet.shard(index).id.as_str())
            .collect()
    }

    /// The subset size this tenant gets.
    pub fn k_for(&self, tenant: &str) -> u32 {
        match self.overrides.get(tenant) {
            Some(Resolved::Dedicated(indices)) => indices.len() as u32,
            Some(Resolved::K(k)) => *k,
            None => self.config.k,
        }
    }

    /// Whether the tenant has an override.
    pub fn has_override(&self, tenant: &str) -> bool {
        self.overrides.contains_key(tenant)
    }

    /// The fleet placed over.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// The default configuration.
    pub fn config(&self) -> PlacementConfig {
        self.config
    }
}
