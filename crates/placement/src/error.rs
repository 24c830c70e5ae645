//! The typed errors of the placement crate.
//!
//! Every message says what was wrong and how to fix it, and none of them ever
//! carries key material: errors are logged and shown to users, keys are not.

use thiserror::Error;

/// Why a placement could not be built or computed.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum PlacementError {
    /// The subset size `k` is outside `1..=n`.
    #[error("k = {k} is out of range for {n} shards: choose k between 1 and {n}")]
    KOutOfRange {
        /// The requested subset size.
        k: u64,
        /// The number of shards available to choose from.
        n: u64,
    },
    /// A fleet must hold at least one shard.
    #[error("the fleet has no shards: declare at least one shard")]
    EmptyFleet,
    /// The fleet is larger than a shard index can address.
    #[error("the fleet has {n} shards, more than the {max} a placement can address")]
    FleetTooLarge {
        /// The number of shards declared.
        n: u64,
        /// The largest supported fleet.
        max: u64,
    },
    /// A shard id was empty.
    #[error("shard number {position} has an empty id: give every shard a non-empty, stable id")]
    EmptyShardId {
        /// Zero-based position of the shard in the fleet.
        position: usize,
    },
    /// Two shards share one id.
    #[error("shard id {id:?} appears twice in the fleet: shard ids must be unique")]
    DuplicateShardId {
        /// The repeated id.
        id: String,
    },
    /// A shard weight was zero, negative or not a number.
    #[error("shard {id:?} has weight {weight}: weights must be greater than zero and at most 1e12")]
    InvalidWeight {
        /// The shard's id.
        id: String,
        /// The rejected weight.
        weight: f64,
    },
    /// Shard weights were given to an algorithm that cannot honour them.
    #[error(
        "shard weights need the rendezvous algorithm: hmac-modulo treats every shard alike; use rendezvous or drop the weights"
    )]
    WeightsNeedRendezvous,
    /// Zone-aware placement was asked for, but a shard carries no zone label.
    #[error("shard {id:?} has no zone: zone-aware placement needs a zone label on every shard")]
    MissingZone {
        /// The shard without a zone.
        id: String,
    },
    /// A zone was declared with no shards in it.
    #[error("zone {zone:?} has no shards: give it at least one shard or remove it")]
    EmptyZone {
        /// The empty zone.
        zone: String,
    },
    /// A zone label was empty.
    #[error("a zone has an empty name: give every zone a non-empty label")]
    EmptyZoneName,
    /// A zone specification could not be parsed.
    #[error(
        "invalid zone spec {spec:?}: {reason}; expected NAME:COUNT[,NAME:COUNT...], e.g. a:8,b:8"
    )]
    InvalidZoneSpec {
        /// The offending part of the specification.
        spec: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A per-tenant override named a shard that is not in the fleet.
    #[error("tenant {tenant:?} is pinned to shard {id:?}, which is not in the fleet")]
    UnknownShard {
        /// The tenant whose override is wrong.
        tenant: String,
        /// The unknown shard id.
        id: String,
    },
    /// A per-tenant override was empty or repeated a shard.
    #[error("tenant {tenant:?} has an invalid override: {reason}")]
    InvalidOverride {
        /// The tenant whose override is wrong.
        tenant: String,
        /// What was wrong with it.
        reason: String,
    },
}

/// Refuses a subset size outside `1..=n`. The one place the rule lives, so
/// the placer's validation and every algorithm's `place_into` refuse the
/// same sizes with the same error.
pub(crate) fn check_k(k: u32, n: u32) -> Result<(), PlacementError> {
    if k == 0 || k > n {
        return Err(PlacementError::KOutOfRange {
            k: u64::from(k),
            n: u64::from(n),
        });
    }
    Ok(())
}

/// Why key material was rejected.
///
/// No variant carries the key or any part of it, so these errors are safe to
/// print and log.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A hex-encoded key had an odd number of digits.
    #[error(
        "the hex key has an odd number of digits ({len}): a key is whole bytes, two digits each"
    )]
    OddHexLength {
        /// The number of hex digits given.
        len: usize,
    },
    /// A hex-encoded key held a character that is not a hex digit.
    #[error("the hex key has a non-hex character at position {position}: use only 0-9 and a-f")]
    InvalidHexDigit {
        /// Zero-based position of the bad character.
        position: usize,
    },
    /// A key was empty where a key is required.
    #[error("the key is empty: provide at least one byte of key material")]
    Empty,
    /// A key version name was empty.
    #[error("a key version has an empty name: name every version, e.g. \"v1\"")]
    EmptyVersion,
    /// The same key version was added twice.
    #[error(
        "key version {version:?} is already in the key ring: versions are immutable, add a new one"
    )]
    DuplicateVersion {
        /// The repeated version name.
        version: String,
    },
    /// A key version was asked for that the ring does not hold.
    #[error("key version {version:?} is not in the key ring")]
    UnknownVersion {
        /// The missing version name.
        version: String,
    },
}
