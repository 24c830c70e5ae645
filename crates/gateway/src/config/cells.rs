//! `[placement]`, `[[cells]]` and each cell's `shards`: the placement
//! defaults, the cells that inherit them, their shards, and the keys they
//! are placed with.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use placement::{Algorithm, PlacementKey};
use rustls_pki_types::ServerName;
use serde::Deserialize;

use super::check::CellProblem;
use super::shard_url::ShardUrl;
use super::tls;

/// The shortest placement key the gateway serves with. Shorter keys can be
/// guessed, and a guessed key makes every tenant's shards public.
pub const MIN_KEY_BYTES: usize = 16;

/// One backend shard.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ShardSettings {
    /// Stable id, unique within the cell.
    pub id: String,
    /// Base URL, `http://host:port` or `https://host:port` (an optional
    /// path prefix is kept), with the port it is reached on.
    pub url: ShardUrl,
    /// For an `https://` shard: the name its certificate must carry and the
    /// SNI sent, when not the URL's host.
    pub server_name: Option<ServerName<'static>>,
    /// Failure-domain label.
    pub zone: Option<String>,
    /// Relative capacity (rendezvous only).
    pub weight: f64,
    /// What the gateway speaks to it (`protocol`).
    pub protocol: ShardProtocol,
    /// Requests it may have in flight at once (`max_in_flight` on the
    /// shard, else `limits.shard.max_in_flight`); `None`: no cap.
    pub max_in_flight: Option<u64>,
}

/// What the gateway speaks to a shard: `protocol = "http1" | "h2c" | "h2"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardProtocol {
    /// HTTP/1.1, plain or TLS (the default).
    #[default]
    Http1,
    /// HTTP/2 with prior knowledge over plain TCP (`http://` only).
    H2c,
    /// HTTP/2 over TLS, negotiated by ALPN (`https://` only).
    H2,
}

impl ShardProtocol {
    /// Whether it is HTTP/2 (`h2c` or `h2`).
    pub fn is_http2(self) -> bool {
        !matches!(self, ShardProtocol::Http1)
    }
}

/// A cell: a fleet of shards and how tenants are placed on it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CellSettings {
    /// The cell's name.
    pub name: String,
    /// Placement algorithm.
    pub algorithm: Algorithm,
    /// Default subset size.
    pub k: u32,
    /// Spread subsets over zones.
    pub zone_aware: bool,
    /// The placement key's version name (for operators; never the bytes).
    pub key_version: String,
    /// The placement key.
    pub key: PlacementKey,
    /// The shards: those written in `shards`, then (with `discovery`)
    /// those found, sorted by id.
    pub shards: Vec<ShardSettings>,
    /// Where more of its shards are found at run time (`discovery`).
    pub discovery: Option<super::discovery::DiscoverySource>,
    /// What the gateway speaks to discovered shards (`shard_protocol`:
    /// `http1` or `h2c`; discovered shards are `http://`).
    pub discovered_protocol: ShardProtocol,
    /// How many of `shards` were written in the configuration (they come
    /// first).
    static_shards: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlacement {
    algorithm: String,
    k: u32,
    key_file: String,
    key_version: String,
    #[serde(default)]
    zone_aware: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCell {
    name: String,
    #[serde(default)]
    shards: Vec<RawShard>,
    discovery: Option<String>,
    shard_protocol: Option<ShardProtocol>,
    algorithm: Option<String>,
    k: Option<u32>,
    key_file: Option<String>,
    key_version: Option<String>,
    zone_aware: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShard {
    id: String,
    url: String,
    zone: Option<String>,
    weight: Option<f64>,
    server_name: Option<String>,
    protocol: Option<ShardProtocol>,
    max_in_flight: Option<u64>,
}

impl CellSettings {
    /// The shards written in the configuration (without discovered ones).
    pub fn static_shards(&self) -> &[ShardSettings] {
        &self.shards[..self.static_shards.min(self.shards.len())]
    }

    /// The discovered shards, after the written ones.
    pub fn discovered_shards(&self) -> &[ShardSettings] {
        &self.shards[self.static_shards.min(self.shards.len())..]
    }

    /// Whether the shard at `index` was found by discovery.
    pub fn is_discovered(&self, index: usize) -> bool {
        index >= self.static_shards
    }

    /// Replaces the discovered shards (after the written ones).
    pub fn set_discovered(&mut self, shards: impl IntoIterator<Item = ShardSettings>) {
        self.shards.truncate(self.static_shards);
        self.shards.extend(shards);
    }

    /// Whether `other` places every tenant where these settings do: the
    /// same algorithm, `k`, zones, key and shards (ids, zones and weights,
    /// in order).
    pub fn placer_settings_equal(&self, other: &CellSettings) -> bool {
        let shard = |s: &ShardSettings| (s.id.clone(), s.zone.clone(), s.weight.to_bits());
        self.algorithm == other.algorithm
            && self.k == other.k
            && self.zone_aware == other.zone_aware
            && self.key.ct_eq(&other.key)
            && self
                .shards
                .iter()
                .map(shard)
                .eq(other.shards.iter().map(shard))
    }

    /// The placer these settings describe (without tenant overrides).
    pub fn placer(&self) -> Result<placement::Placer, placement::PlacementError> {
        let shards = self
            .shards
            .iter()
            .map(|shard| placement::Shard {
                id: shard.id.clone(),
                zone: shard.zone.clone(),
                weight: shard.weight,
            })
            .collect();
        let config = placement::PlacementConfig {
            algorithm: self.algorithm,
            k: self.k,
            zone_aware: self.zone_aware,
        };
        placement::Placer::new(placement::Fleet::new(shards)?, &self.key, config)
    }
}

/// The `[placement]` defaults and the `[[cells]]` that inherit them: at
/// least one cell, names unique, each with its shards, and each cell's
/// placer built once to prove its k, zones and weights consistent.
pub(super) fn cell_settings(
    placement: RawPlacement,
    raw_cells: Vec<RawCell>,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<Vec<CellSettings>, CellProblem> {
    let default_algorithm: Algorithm = placement
        .algorithm
        .parse()
        .map_err(|e| ("placement.algorithm".into(), format!("{e}")))?;
    if placement.key_version.is_empty() {
        return Err((
            "placement.key_version".into(),
            "name the key version, e.g. \"v1\"".into(),
        ));
    }
    let default_key =
        load_key(&resolve(&placement.key_file)).map_err(|p| ("placement.key_file".into(), p))?;

    if raw_cells.is_empty() {
        return Err((
            "cells".into(),
            "declare at least one [[cells]] with its shards".into(),
        ));
    }
    let mut cell_names = HashSet::new();
    let mut cells = Vec::with_capacity(raw_cells.len());
    for (position, cell) in raw_cells.into_iter().enumerate() {
        let at = |key: &str| format!("cells[{position}].{key}");
        if cell.name.is_empty() {
            return Err((at("name"), "give the cell a name".into()));
        }
        if !cell_names.insert(cell.name.clone()) {
            return Err((
                at("name"),
                format!("cell {:?} is declared twice", cell.name),
            ));
        }
        let algorithm = match &cell.algorithm {
            Some(name) => name
                .parse()
                .map_err(|e| (at("algorithm"), format!("{e}")))?,
            None => default_algorithm,
        };
        let key = match &cell.key_file {
            Some(file) => load_key(&resolve(file)).map_err(|p| (at("key_file"), p))?,
            None => default_key.clone(),
        };
        if cell.key_file.is_some() && cell.key_version.is_none() {
            return Err((
                at("key_version"),
                "a cell with its own key_file needs its own key_version".into(),
            ));
        }
        let discovery = cell
            .discovery
            .as_deref()
            .map(super::discovery::DiscoverySource::parse)
            .transpose()
            .map_err(|p| (at("discovery"), p))?;
        if cell.shards.is_empty() && discovery.is_none() {
            return Err((
                at("shards"),
                "list at least one shard, or find them with discovery = \"dns+srv://...\"".into(),
            ));
        }
        let discovered_protocol = cell.shard_protocol.unwrap_or_default();
        match (&discovery, discovered_protocol) {
            (None, _) if cell.shard_protocol.is_some() => {
                return Err((
                    at("shard_protocol"),
                    "applies to discovered shards only; set protocol on each shard instead, or add discovery".into(),
                ));
            }
            (Some(_), ShardProtocol::H2) => {
                return Err((
                    at("shard_protocol"),
                    "discovered shards are reached over plain TCP; use \"http1\" or \"h2c\"".into(),
                ));
            }
            _ => {}
        }
        // Where each placement value was written, so a placer error names
        // that key (`placement.k`, not the cell it was inherited by).
        let written = Written {
            k: if cell.k.is_some() {
                at("k")
            } else {
                "placement.k".into()
            },
            algorithm: if cell.algorithm.is_some() {
                at("algorithm")
            } else {
                "placement.algorithm".into()
            },
        };
        let shards = shard_settings(position, cell.shards)?;
        let settings = CellSettings {
            static_shards: shards.len(),
            shards,
            discovery,
            discovered_protocol,
            name: cell.name,
            algorithm,
            k: cell.k.unwrap_or(placement.k),
            zone_aware: cell.zone_aware.unwrap_or(placement.zone_aware),
            key_version: cell
                .key_version
                .unwrap_or_else(|| placement.key_version.clone()),
            key,
        };
        // A discovered cell's membership is known only once it is found;
        // each membership is checked as it is applied.
        if settings.discovery.is_some() {
            if settings.k == 0 {
                return Err((written.k.clone(), "k must be at least 1".into()));
            }
            cells.push(settings);
            continue;
        }
        // Building the placer here proves k, zones and weights are
        // consistent before anything listens.
        settings.placer().map_err(|e| {
            let mut problem = e.to_string();
            if matches!(e, placement::PlacementError::KOutOfRange { .. })
                && written.k == "placement.k"
            {
                // The value sits in [placement]; the cell only inherits
                // it, so say which cell, and the other way out.
                problem.push_str(&format!(
                    " (cell {:?} inherits placement.k; or give that cell its own k)",
                    settings.name
                ));
            }
            (written.key_of(&e, position, &settings), problem)
        })?;
        cells.push(settings);
    }
    Ok(cells)
}

/// The keys a cell's `k` and `algorithm` were read from: its own, or the
/// `[placement]` defaults it inherited.
struct Written {
    k: String,
    algorithm: String,
}

impl Written {
    /// The key to name for a placer error of the cell at `position`: the
    /// one whose value the operator must change.
    fn key_of(
        &self,
        error: &placement::PlacementError,
        position: usize,
        cell: &CellSettings,
    ) -> String {
        use placement::PlacementError as E;
        let shard = |id: &str, key: &str| match cell.shards.iter().position(|s| s.id == id) {
            Some(index) => format!("cells[{position}].shards[{index}].{key}"),
            None => format!("cells[{position}].shards"),
        };
        match error {
            E::KOutOfRange { .. } => self.k.clone(),
            E::WeightsNeedRendezvous => self.algorithm.clone(),
            E::InvalidWeight { id, .. } => shard(id, "weight"),
            E::MissingZone { id } => shard(id, "zone"),
            E::EmptyZoneName => match cell
                .shards
                .iter()
                .position(|s| s.zone.as_deref() == Some(""))
            {
                Some(index) => format!("cells[{position}].shards[{index}].zone"),
                None => format!("cells[{position}].shards"),
            },
            E::FleetTooLarge { .. } | E::EmptyFleet => format!("cells[{position}].shards"),
            _ => format!("cells[{position}]"),
        }
    }
}

/// The shards of the cell at `position`: ids non-empty and unique within
/// the cell, URLs `http://` or `https://` backends (the latter with a name
/// a certificate can carry).
fn shard_settings(position: usize, raw: Vec<RawShard>) -> Result<Vec<ShardSettings>, CellProblem> {
    let mut shard_ids = HashSet::new();
    let mut shards = Vec::with_capacity(raw.len());
    for (index, shard) in raw.into_iter().enumerate() {
        let key = format!("cells[{position}].shards[{index}]");
        if shard.id.is_empty() {
            return Err((format!("{key}.id"), "give the shard a non-empty id".into()));
        }
        if !shard_ids.insert(shard.id.clone()) {
            return Err((
                format!("{key}.id"),
                format!("shard id {:?} is used twice in this cell", shard.id),
            ));
        }
        let url = ShardUrl::parse(&shard.url).map_err(|p| (format!("{key}.url"), p.to_string()))?;
        let server_name = match shard.server_name {
            None if url.is_https() => {
                // The URL's host is then the name: one a certificate cannot
                // carry would fail every handshake, so it is refused here.
                let host = url.host();
                let bare = host
                    .strip_prefix('[')
                    .and_then(|host| host.strip_suffix(']'))
                    .unwrap_or(host);
                tls::server_name(bare).map_err(|p| {
                    (
                        format!("{key}.url"),
                        format!("the host {p}; set server_name to the name the shard's certificate carries"),
                    )
                })?;
                None
            }
            None => None,
            Some(_) if !url.is_https() => {
                return Err((
                    format!("{key}.server_name"),
                    "applies to https:// shards only; remove it or use an https:// url".into(),
                ));
            }
            Some(name) => {
                Some(tls::server_name(&name).map_err(|p| (format!("{key}.server_name"), p))?)
            }
        };
        let protocol = shard.protocol.unwrap_or_default();
        // h2 is negotiated by ALPN inside TLS, h2c has no TLS to negotiate
        // in: either on the other scheme is a shard no connection reaches.
        let https = url.is_https();
        match protocol {
            ShardProtocol::H2 if !https => {
                return Err((
                    format!("{key}.protocol"),
                    "\"h2\" is HTTP/2 over TLS and needs an https:// url; use \"h2c\" for HTTP/2 over plain TCP".into(),
                ));
            }
            ShardProtocol::H2c if https => {
                return Err((
                    format!("{key}.protocol"),
                    "\"h2c\" is HTTP/2 over plain TCP and needs an http:// url; use \"h2\" for HTTP/2 over TLS".into(),
                ));
            }
            _ => {}
        }
        let weight = shard.weight.unwrap_or(1.0);
        if let Some(cap) = shard.max_in_flight
            && cap > MAX_SHARD_IN_FLIGHT
        {
            return Err((
                format!("{key}.max_in_flight"),
                format!(
                    "{cap} is out of range; use a value from 1 to {MAX_SHARD_IN_FLIGHT}, or 0 for no cap"
                ),
            ));
        }
        shards.push(ShardSettings {
            max_in_flight: shard.max_in_flight,
            id: shard.id,
            url,
            server_name,
            zone: shard.zone,
            weight,
            protocol,
        });
    }
    Ok(shards)
}

/// The largest in-flight cap a shard may be given: beyond it a cap is a
/// typo, not a limit.
pub(super) const MAX_SHARD_IN_FLIGHT: u64 = 1_000_000;

/// Each shard's in-flight cap: its own `max_in_flight` (0 for none, to
/// exempt it from the default), else `limits.shard.max_in_flight`.
pub(super) fn shard_caps(cells: &mut [CellSettings], default: Option<u64>) {
    for shard in cells.iter_mut().flat_map(|cell| cell.shards.iter_mut()) {
        shard.max_in_flight = match shard.max_in_flight {
            Some(0) => None,
            Some(cap) => Some(cap),
            None => default,
        };
    }
}

/// Loads a serving key: raw bytes, at least [`MIN_KEY_BYTES`], not the
/// recipe's public default.
fn load_key(path: &Path) -> Result<PlacementKey, String> {
    let key = keys::from_file(path).map_err(|e| e.to_string())?;
    if key.is_recipe_default() {
        return Err(format!(
            "{} holds the recipe's public default key; anyone could compute every tenant's shards. Generate a secret: head -c 32 /dev/urandom > {}",
            path.display(),
            path.display()
        ));
    }
    if key.len() < MIN_KEY_BYTES {
        return Err(format!(
            "{} holds a {}-byte key; use at least {MIN_KEY_BYTES} random bytes (head -c 32 /dev/urandom > {})",
            path.display(),
            key.len(),
            path.display()
        ));
    }
    Ok(key)
}
