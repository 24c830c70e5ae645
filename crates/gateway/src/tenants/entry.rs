//! One tenant as an operator writes it (a `[[tenants]]` entry, a JSON
//! Lines object, a row of the tenant store, a `PUT /admin/tenants/{id}`
//! body) and the rules every such entry is checked against, whichever
//! source it came from.

use serde::{Deserialize, Serialize};

use crate::config::{CellSettings, GatewayConfig, TenantLimits, limit_count, per_request};

/// The longest tenant id accepted, in bytes: ids travel in the
/// `x-shuffle-tenant` header and into every log line.
pub const MAX_ID_BYTES: usize = 256;

/// One tenant, field for field as written in a tenants file, a JSON Lines
/// line, the tenant store or an admin `PUT`. Nothing here is checked yet:
/// [`TenantEntry::validate`] does that against a configuration.
#[derive(Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TenantEntry {
    /// The tenant id (what placement hashes). Left out of an admin
    /// `PUT` body, whose path names it; anywhere else an empty id is
    /// refused by [`TenantEntry::validate`].
    #[serde(default)]
    pub id: String,
    /// SHA-256 of the tenant's API key, 64 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_sha256: Option<String>,
    /// The tenant's cell, by name; the first cell when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<String>,
    /// A subset size of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<u32>,
    /// Dedicated shards, by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<Vec<String>>,
    /// Its own in-flight limit (0: none, over `[limits.tenant]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Its own request rate (0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
    /// Its own burst.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

impl std::fmt::Debug for TenantEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key digest is not the key, but it is a credential verifier
        // and has no place in logs.
        f.debug_struct("TenantEntry")
            .field("id", &self.id)
            .field(
                "api_key_sha256",
                &self.api_key_sha256.as_ref().map(|_| "<redacted>"),
            )
            .field("cell", &self.cell)
            .field("k", &self.k)
            .field("shards", &self.shards)
            .field("max_in_flight", &self.max_in_flight)
            .field("requests_per_second", &self.requests_per_second)
            .field("burst", &self.burst)
            .finish()
    }
}

/// What is wrong with one entry: the field and the problem, with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct EntryError {
    /// The entry's field at fault (`id`, `k`, …).
    pub field: &'static str,
    /// What is wrong and how to put it right.
    pub problem: String,
}

impl EntryError {
    fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self {
            field,
            problem: problem.into(),
        }
    }
}

/// An entry that passed every check of one configuration, in the form the
/// registry keeps: the digest as bytes, the cell as an index, dedicated
/// shards as indices into the cell's shard list.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidEntry {
    /// The tenant id.
    pub id: String,
    /// SHA-256 of its API key.
    pub api_key_sha256: Option<[u8; 32]>,
    /// Its cell's index, when the entry names one.
    pub cell: Option<u16>,
    /// Its own subset size.
    pub k: Option<u32>,
    /// Its dedicated shards, as indices into its cell's shards.
    pub shards: Option<Box<[u32]>>,
    /// Its own limits.
    pub limits: TenantLimits,
}

impl ValidEntry {
    /// The cell index it routes in (the first cell when none is named).
    pub fn cell_index(&self) -> usize {
        self.cell.map_or(0, usize::from)
    }
}

impl TenantEntry {
    /// Checks the entry against `config`'s cells and limits. Duplicates
    /// across entries (an id or an API key listed twice) are the
    /// registry's to find.
    pub fn validate(&self, config: &GatewayConfig) -> Result<ValidEntry, EntryError> {
        check_id(&self.id)?;
        let api_key_sha256 = self
            .api_key_sha256
            .as_deref()
            .map(|hex| {
                parse_digest(hex).ok_or_else(|| {
                    EntryError::new(
                        "api_key_sha256",
                        "must be 64 hex digits, the SHA-256 of the API key (e.g. `printf %s \"$KEY\" | sha256sum`)",
                    )
                })
            })
            .transpose()?;
        let (cell_index, cell) = match &self.cell {
            Some(name) => {
                let index = config
                    .cells
                    .iter()
                    .position(|cell| &cell.name == name)
                    .ok_or_else(|| {
                        EntryError::new(
                            "cell",
                            format!("there is no cell named {name:?} in the configuration"),
                        )
                    })?;
                (Some(index as u16), &config.cells[index])
            }
            None => (None, &config.cells[0]),
        };
        check_k(self.k, cell)?;
        if self.k.is_some() && self.shards.is_some() {
            return Err(EntryError::new(
                "shards",
                "set either k or shards for a tenant, not both",
            ));
        }
        let shards = self
            .shards
            .as_deref()
            .map(|shards| dedicated(shards, cell))
            .transpose()?;
        Ok(ValidEntry {
            id: self.id.clone(),
            api_key_sha256,
            cell: cell_index,
            k: self.k,
            shards,
            limits: self.limits()?,
        })
    }

    /// The entry's own limits, each checked against its range.
    fn limits(&self) -> Result<TenantLimits, EntryError> {
        Ok(TenantLimits {
            max_in_flight: self
                .max_in_flight
                .map(|n| limit_count(n, true))
                .transpose()
                .map_err(|p| {
                    EntryError::new(
                        "max_in_flight",
                        format!("{p} (0: no limit for this tenant)"),
                    )
                })?,
            per_request: self
                .requests_per_second
                .map(|rate| per_request(rate, true))
                .transpose()
                .map_err(|p| EntryError::new("requests_per_second", p))?,
            burst: self
                .burst
                .map(|n| limit_count(n, false))
                .transpose()
                .map_err(|p| EntryError::new("burst", p))?,
        })
    }
}

/// A tenant id: non-empty visible ASCII, since it travels to backends in
/// the `x-shuffle-tenant` header and into logs, and at most
/// [`MAX_ID_BYTES`].
pub fn check_id(id: &str) -> Result<(), EntryError> {
    if id.is_empty() {
        return Err(EntryError::new("id", "give the tenant a non-empty id"));
    }
    if !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(EntryError::new(
            "id",
            format!(
                "tenant id {id:?} must be visible ASCII without spaces (letters, digits, punctuation)"
            ),
        ));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(EntryError::new(
            "id",
            format!(
                "the tenant id is {} bytes long; use at most {MAX_ID_BYTES}",
                id.len()
            ),
        ));
    }
    Ok(())
}

fn check_k(k: Option<u32>, cell: &CellSettings) -> Result<(), EntryError> {
    match k {
        Some(k) if k == 0 || k as usize > cell.shards.len() => Err(EntryError::new(
            "k",
            format!(
                "k = {k} is out of range for cell {:?} with {} shards",
                cell.name,
                cell.shards.len()
            ),
        )),
        _ => Ok(()),
    }
}

/// Dedicated shard ids as indices into the cell's shards: each known, none
/// twice, at least one.
fn dedicated(shards: &[String], cell: &CellSettings) -> Result<Box<[u32]>, EntryError> {
    if shards.is_empty() {
        return Err(EntryError::new(
            "shards",
            "list at least one shard id, or remove the key",
        ));
    }
    let mut indices = Vec::with_capacity(shards.len());
    for (at, id) in shards.iter().enumerate() {
        let Some(index) = cell.shards.iter().position(|s| &s.id == id) else {
            return Err(EntryError::new(
                "shards",
                format!("shard {id:?} is not in cell {:?}", cell.name),
            ));
        };
        if indices.contains(&(index as u32)) {
            return Err(EntryError::new(
                "shards",
                format!("shard {id:?} is listed twice (entry {at}); list each shard once"),
            ));
        }
        indices.push(index as u32);
    }
    Ok(indices.into_boxed_slice())
}

/// 64 hex digits (either case) as the 32 bytes they spell.
pub fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    // A table, not a match: digits and letters come at random in a digest,
    // and a branch per character mispredicts half the time (this was a
    // fifth of loading a million tenants).
    const NIBBLE: [u8; 256] = {
        let mut table = [0xFF; 256];
        let mut c = 0;
        while c < 256 {
            table[c] = match c as u8 {
                b'0'..=b'9' => c as u8 - b'0',
                b'a'..=b'f' => c as u8 - b'a' + 10,
                b'A'..=b'F' => c as u8 - b'A' + 10,
                _ => 0xFF,
            };
            c += 1;
        }
        table
    };
    let bytes: &[u8; 64] = hex.as_bytes().try_into().ok()?;
    let mut digest = [0u8; 32];
    let mut invalid = 0;
    for (out, pair) in digest.iter_mut().zip(bytes.chunks_exact(2)) {
        let (high, low) = (NIBBLE[usize::from(pair[0])], NIBBLE[usize::from(pair[1])]);
        invalid |= high | low;
        *out = high << 4 | (low & 0x0F);
    }
    (invalid & 0xF0 == 0).then_some(digest)
}
