//! `[fleet]`: the Redis server a fleet of replicas shares its poison
//! containment and operator marks through, and this replica's name in it.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, millis};
use super::store::{Redacted, RedisUrl, StoreSettings};

/// `[fleet]`: what every replica of one configuration shares.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FleetSettings {
    /// The shared Redis server, and the longest one call to it may take
    /// (`fleet.store`, `fleet.timeout_ms`).
    pub store: StoreSettings,
    /// This replica's name in the fleet: who set a mark or struck a member
    /// (`fleet.replica_id`; `None`: [`default_replica_id`], taken when the
    /// gateway starts).
    pub replica_id: Option<String>,
    /// How often each replica looks for changes made through the others
    /// (the bound on how long a mark or a suspect takes to reach it).
    pub sync_every: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleet {
    store: Option<Redacted>,
    ca_file: Option<String>,
    replica_id: Option<String>,
    timeout_ms: Option<u64>,
    sync_ms: Option<u64>,
}

/// The longest replica id: it is written with every mark and strike.
const MAX_REPLICA_ID: usize = 128;

pub(super) fn fleet_settings(
    f: Option<RawFleet>,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<Option<FleetSettings>, KeyProblem> {
    let Some(f) = f else {
        return Ok(None);
    };
    let Some(Redacted(url)) = f.store else {
        return Err((
            "fleet.store",
            "[fleet] needs store = \"redis://host:port\" (the Redis server the replicas share); \
             remove [fleet] to run each replica on its own"
                .to_owned(),
        ));
    };
    let url = RedisUrl::parse(&url).map_err(|problem| ("fleet.store", problem))?;
    let ca_file = f.ca_file.as_deref().map(resolve);
    let tls = match (url.tls, ca_file) {
        (true, ca_file) => Some(
            super::tls::store_tls("fleet.ca_file", ca_file)
                .map_err(|(_, problem)| ("fleet.ca_file", problem))?,
        ),
        (false, None) => None,
        (false, Some(_)) => {
            return Err((
                "fleet.ca_file",
                "is set, but fleet.store is redis:// (no TLS); write rediss:// to use it, or remove fleet.ca_file".to_owned(),
            ));
        }
    };
    let timeout = millis("fleet.timeout_ms", f.timeout_ms, 5, 1..=1_000)?;
    let sync_every = millis("fleet.sync_ms", f.sync_ms, 250, 50..=1_000)?;
    let replica_id = match f.replica_id {
        Some(id) => {
            let fine = !id.is_empty()
                && id.len() <= MAX_REPLICA_ID
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
            if !fine {
                return Err((
                    "fleet.replica_id",
                    format!(
                        "{id:?} is not a replica id; use 1 to {MAX_REPLICA_ID} letters, digits, '-', '_', '.' or ':' (e.g. the pod name)"
                    ),
                ));
            }
            Some(id)
        }
        None => None,
    };
    Ok(Some(FleetSettings {
        store: StoreSettings { url, timeout, tls },
        replica_id,
        sync_every,
    }))
}

/// Gateways started in this process so far (a test runs several).
static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The host name and the process id (`gw-7f9c:4211`): unique in a fleet
/// whose pods have distinct names, and readable in `GET /admin/shards`.
/// A second gateway in one process (tests run several) is `gw-7f9c:4211.2`.
pub fn default_replica_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|host| {
            host.trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
                .take(96)
                .collect::<String>()
        })
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "replica".to_owned());
    let nth = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let pid = std::process::id();
    if nth == 1 {
        format!("{host}:{pid}")
    } else {
        format!("{host}:{pid}.{nth}")
    }
}
