//! The tenants file: who the tenants are, how they authenticate, and where
//! they are placed.
//!
//! API keys are stored only as SHA-256 digests (hex); the gateway never sees
//! or keeps the keys themselves outside the request that presents them.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::path::Path;
use std::sync::OnceLock;

use serde::Deserialize;

use crate::config::{ConfigError, GatewayConfig, TenantLimits, limit_count, per_request};

/// One tenant as configured.
#[derive(Clone, PartialEq, Eq)]
pub struct TenantRecord {
    /// The tenant id (what placement hashes).
    pub id: String,
    /// [`id_hash`] of the id, worked out once when the tenants file is
    /// read rather than on every request that keys a table by it.
    pub id_hash: u64,
    /// Where the tenant is in the tenants file (0-based): its index in
    /// [`Tenants`], which per-tenant caches are keyed by.
    pub position: usize,
    /// SHA-256 of the tenant's API key, when it authenticates by API key.
    pub api_key_sha256: Option<[u8; 32]>,
    /// The tenant's cell; the first cell when absent.
    pub cell: Option<String>,
    /// A per-tenant subset size.
    pub k: Option<u32>,
    /// Dedicated shards, by id.
    pub shards: Option<Vec<String>>,
    /// The tenant's own limits, over `[limits.tenant]`'s.
    pub limits: TenantLimits,
}

impl std::fmt::Debug for TenantRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key digest is not the key, but it is still a credential
        // verifier and has no place in logs.
        f.debug_struct("TenantRecord")
            .field("id", &self.id)
            .field("position", &self.position)
            .field("api_key_sha256", &self.api_key_sha256.map(|_| "<redacted>"))
            .field("cell", &self.cell)
            .field("k", &self.k)
            .field("shards", &self.shards)
            .field("limits", &self.limits)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenants {
    #[serde(default)]
    tenants: Vec<RawTenant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    id: String,
    api_key_sha256: Option<String>,
    cell: Option<String>,
    k: Option<u32>,
    shards: Option<Vec<String>>,
    max_in_flight: Option<u32>,
    requests_per_second: Option<f64>,
    burst: Option<u32>,
}

/// A tenant id hashed with a key drawn once per process: the same id gives
/// the same hash across reloads, and ids (which only the tenants file
/// writes) cannot be picked to collide. What per-tenant tables of run-time
/// state that must outlive a reload are keyed by.
pub fn id_hash(id: &str) -> u64 {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new).hash_one(id)
}

/// Hashes a SHA-256 digest by taking eight of its bytes: a digest is
/// already uniformly distributed, so hashing it again (SipHash, on every
/// request) buys nothing. Lookups with a digest an attacker chose cannot
/// degrade the table either: only the tenants file inserts into it.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        // `[u8; 32]` hashes as its length, then its bytes: the last write,
        // the digest itself, is the one kept.
        if let Some(word) = bytes.first_chunk::<8>() {
            self.0 = u64::from_le_bytes(*word);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// All tenants, indexed by id and by API-key digest.
#[derive(Clone, Default)]
pub struct Tenants {
    records: Vec<TenantRecord>,
    by_id: HashMap<String, usize>,
    by_key_digest: HashMap<[u8; 32], usize, BuildHasherDefault<DigestHasher>>,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The digest index is a credential verifier: count it, never print it.
        f.debug_struct("Tenants")
            .field("records", &self.records)
            .field("api_keys", &self.by_key_digest.len())
            .finish()
    }
}

impl Tenants {
    /// Reads and validates the tenants file named by the configuration.
    pub fn load(config: &GatewayConfig) -> Result<Self, ConfigError> {
        let path = &config.tenants.describe();
        let text = std::fs::read_to_string(path).map_err(|error| {
            ConfigError::new(path, "-", format!("cannot read the tenants file: {error}"))
        })?;
        Self::parse(path, &text, config)
    }

    /// Validates tenants-file text against the configuration's cells.
    pub fn parse(path: &Path, text: &str, config: &GatewayConfig) -> Result<Self, ConfigError> {
        let raw: RawTenants = toml::from_str(text).map_err(|error| {
            let location = error
                .span()
                .map(|span| format!("line {}", text[..span.start].matches('\n').count() + 1))
                .unwrap_or_else(|| "-".into());
            ConfigError::new(path, location, error.message().to_owned())
        })?;
        let mut tenants = Tenants::default();
        for (position, tenant) in raw.tenants.into_iter().enumerate() {
            let err = |key: &str, problem: String| {
                ConfigError::new(path, format!("tenants[{position}].{key}"), problem)
            };
            if tenant.id.is_empty() {
                return Err(err("id", "give the tenant a non-empty id".into()));
            }
            // The id travels to backends in the `x-shuffle-tenant` header and
            // into logs, so it is kept to visible ASCII.
            if !tenant.id.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(err(
                    "id",
                    format!(
                        "tenant id {:?} must be visible ASCII without spaces (letters, digits, punctuation)",
                        tenant.id
                    ),
                ));
            }
            if tenants.by_id.contains_key(&tenant.id) {
                return Err(err("id", format!("tenant {:?} is listed twice", tenant.id)));
            }
            let api_key_sha256 = tenant
                .api_key_sha256
                .as_deref()
                .map(|hex| {
                    parse_digest(hex).ok_or_else(|| {
                        err(
                            "api_key_sha256",
                            "must be 64 hex digits, the SHA-256 of the API key (e.g. `printf %s \"$KEY\" | sha256sum`)".into(),
                        )
                    })
                })
                .transpose()?;
            let cell = match &tenant.cell {
                Some(name) => Some(config.cell(name).ok_or_else(|| {
                    err(
                        "cell",
                        format!("there is no cell named {name:?} in the configuration"),
                    )
                })?),
                None => None,
            }
            .unwrap_or(&config.cells[0]);
            if let Some(k) = tenant.k
                && (k == 0 || k as usize > cell.shards.len())
            {
                return Err(err(
                    "k",
                    format!(
                        "k = {k} is out of range for cell {:?} with {} shards",
                        cell.name,
                        cell.shards.len()
                    ),
                ));
            }
            if tenant.k.is_some() && tenant.shards.is_some() {
                return Err(err(
                    "shards",
                    "set either k or shards for a tenant, not both".into(),
                ));
            }
            if let Some(shards) = &tenant.shards {
                if shards.is_empty() {
                    return Err(err(
                        "shards",
                        "list at least one shard id, or remove the key".into(),
                    ));
                }
                if let Some(unknown) = shards
                    .iter()
                    .find(|id| !cell.shards.iter().any(|s| &s.id == *id))
                {
                    return Err(err(
                        "shards",
                        format!("shard {unknown:?} is not in cell {:?}", cell.name),
                    ));
                }
                // Checked here, where the tenant's position is known, so the
                // error names `tenants[i].shards` like every other problem
                // of the file (the placer would name only the tenant).
                if let Some((at, twice)) = shards
                    .iter()
                    .enumerate()
                    .find(|(at, id)| shards[..*at].contains(id))
                {
                    return Err(err(
                        "shards",
                        format!(
                            "shard {twice:?} is listed twice (entry {at}); list each shard once"
                        ),
                    ));
                }
            }
            let limits = TenantLimits {
                max_in_flight: tenant
                    .max_in_flight
                    .map(|n| limit_count(n, true))
                    .transpose()
                    .map_err(|p| {
                        err(
                            "max_in_flight",
                            format!("{p} (0: no limit for this tenant)"),
                        )
                    })?,
                per_request: tenant
                    .requests_per_second
                    .map(|rate| per_request(rate, true))
                    .transpose()
                    .map_err(|p| err("requests_per_second", p))?,
                burst: tenant
                    .burst
                    .map(|n| limit_count(n, false))
                    .transpose()
                    .map_err(|p| err("burst", p))?,
            };
            let index = tenants.records.len();
            if let Some(digest) = api_key_sha256
                && tenants.by_key_digest.insert(digest, index).is_some()
            {
                return Err(err(
                    "api_key_sha256",
                    "another tenant has the same API key; every tenant needs its own".into(),
                ));
            }
            tenants.by_id.insert(tenant.id.clone(), index);
            tenants.records.push(TenantRecord {
                id_hash: id_hash(&tenant.id),
                id: tenant.id,
                position: index,
                api_key_sha256,
                cell: tenant.cell,
                k: tenant.k,
                shards: tenant.shards,
                limits,
            });
        }
        Ok(tenants)
    }

    /// The tenant with this id.
    pub fn get(&self, id: &str) -> Option<&TenantRecord> {
        self.by_id.get(id).map(|&index| &self.records[index])
    }

    /// The tenant at `position` in the tenants file.
    pub fn at(&self, position: usize) -> Option<&TenantRecord> {
        self.records.get(position)
    }

    /// The tenant whose API key has this SHA-256 digest.
    pub fn by_key_digest(&self, digest: &[u8; 32]) -> Option<&TenantRecord> {
        self.by_key_digest
            .get(digest)
            .map(|&index| &self.records[index])
    }

    /// Every tenant, in file order.
    pub fn iter(&self) -> impl Iterator<Item = &TenantRecord> {
        self.records.iter()
    }

    /// Number of tenants.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are no tenants.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (out, pair) in digest.iter_mut().zip(bytes.chunks_exact(2)) {
        let text = std::str::from_utf8(pair).ok()?;
        *out = u8::from_str_radix(text, 16).ok()?;
    }
    Some(digest)
}
