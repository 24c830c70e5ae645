//! Shuffle-sharding placement: tenant → a keyed, stable, pseudo-random subset
//! of `k` of `n` shards.
//!
//! This crate is pure: no I/O, no async, no global state. Everything else in
//! shuffle-shard (the analyser, the gateway, the drills) computes placement
//! through it, so one function answers "which shards serve this tenant"
//! everywhere.
//!
//! # Algorithms
//! - [`HmacModulo`]: the design chapter's Recipe 12.1, bit for bit.
//! - [`Rendezvous`]: highest random weight over shard ids; a fleet change
//!   moves the fewest tenants; optional shard weights.
//! - [`ZoneAware`]: either of the above inside each zone, with members spread
//!   over zones as evenly as the zones allow.
//!
//! [`Placer`] ties an algorithm, a [`Fleet`], a [`PlacementKey`], a default
//! `k` and per-tenant [`TenantOverride`]s together and validates them once.
//! [`migration`] prices a change from one placer to another.
//!
//! # Example
//! ```
//! use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer};
//!
//! let key = PlacementKey::from_bytes(b"a secret from your key store".to_vec());
//! let config = PlacementConfig { algorithm: Algorithm::Rendezvous, k: 3, zone_aware: false };
//! let placer = Placer::new(Fleet::uniform(64)?, &key, config)?;
//!
//! let subset = placer.subset("tenant-42");
//! assert_eq!(subset.len(), 3);
//! assert_eq!(subset, placer.subset("tenant-42")); // stable
//! # Ok::<(), placement::PlacementError>(())
//! ```

mod entry;
mod error;
mod fleet;
mod hmac_modulo;
mod key;
mod keyed_hash;
pub mod migration;
mod placer;
mod rendezvous;
mod short_hmac;
mod zones;

pub use error::{KeyError, PlacementError};
pub use fleet::{Fleet, Shard, ShardIndex, Zone};
pub use hmac_modulo::HmacModulo;
pub use key::{KeyRing, PlacementKey, RECIPE_DEFAULT_KEY};
pub use placer::{Algorithm, PlacementConfig, Placer, TenantOverride, UnknownAlgorithm};
pub use rendezvous::Rendezvous;
pub use zones::{ZoneAware, water_fill};
