//! The population the gateway serves, read the way the gateway reads it: a
//! gateway tenants file (JSON Lines, or TOML `[[tenants]]` entries) or the
//! tenant store (PostgreSQL). Each tenant's own `k` or dedicated shards are
//! kept as placement rules beside its id; the rest of an entry (credentials,
//! limits) means nothing to the analyser and is dropped as it is read.

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use gateway::store::tenants::{BadRow, TenantStore, settings};
use gateway::tenants::TenantEntry;
use gateway::tenants::entry::check_id;
use gateway::tenants::files::{FilesError, Location, read_located};
use placement::TenantOverride;

use super::MAX_TENANTS;
use crate::progress::with_progress;

/// How long the analyser waits for the store at each step (connecting,
/// each batch of rows). Longer than the gateway's two seconds: someone at a
/// terminal can wait, and a loaded database may be slow to start a scan.
const STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// One tenant's own placement, and where it was written (for errors).
#[derive(Debug, Clone)]
pub struct Rule {
    pub tenant: String,
    pub rule: TenantOverride,
    /// The entry's place in a tenants file; `None` for the store, whose
    /// rows are named by tenant alone.
    pub at: Option<Location>,
}

/// What was read: ids in order, the rules, and what the analyser cannot
/// model but should say it saw.
#[derive(Debug, Default)]
pub struct Served {
    pub ids: Vec<String>,
    pub rules: Vec<Rule>,
    /// Tenants per cell named, for the tenants that name one.
    pub cells: BTreeMap<String, u64>,
    /// Store rows left out because they do not convert or do not pass the
    /// id check (the gateway leaves them out too), and the first of them.
    pub skipped: u64,
    pub first_skipped: Option<String>,
}

/// Builds a [`Served`], refusing a tenant listed twice.
///
/// Duplicates are found by a 64-bit hash of each id rather than a set of
/// the ids themselves, so a million tenants are not held twice; a hash seen
/// before is confirmed by a scan, which only a real duplicate (the end of
/// the read) or a 2^-64 accident ever pays for.
struct Collector {
    served: Served,
    hashes: HashSet<u64>,
    hasher: RandomState,
}

impl Collector {
    fn new() -> Self {
        Self {
            served: Served::default(),
            hashes: HashSet::new(),
            hasher: RandomState::new(),
        }
    }

    fn full(&self) -> bool {
        self.served.ids.len() >= MAX_TENANTS
    }

    /// Adds one entry, or says what is wrong with it.
    fn add(&mut self, entry: TenantEntry, at: Option<Location>) -> Result<(), String> {
        check_id(&entry.id).map_err(|error| error.to_string())?;
        let hash = self.hasher.hash_one(&entry.id);
        if !self.hashes.insert(hash) && self.served.ids.contains(&entry.id) {
            return Err(format!(
                "tenant {:?} is listed twice; list each tenant once",
                entry.id
            ));
        }
        let rule = match (entry.k, entry.shards) {
            (Some(_), Some(_)) => {
                // The gateway refuses such an entry; guessing which of the
                // two it meant would model a tenant it does not serve.
                return Err(format!(
                    "tenant {:?} sets both k and shards; set either k or shards for a tenant, not both",
                    entry.id
                ));
            }
            (Some(k), None) => Some(TenantOverride::K(k)),
            (None, Some(shards)) => Some(TenantOverride::Dedicated(shards)),
            (None, None) => None,
        };
        if let Some(rule) = rule {
            self.served.rules.push(Rule {
                tenant: entry.id.clone(),
                rule,
                at,
            });
        }
        if let Some(cell) = entry.cell {
            *self.served.cells.entry(cell).or_default() += 1;
        }
        self.served.ids.push(entry.id);
        Ok(())
    }

    fn skip(&mut self, why: String) {
        self.served.skipped += 1;
        self.served.first_skipped.get_or_insert(why);
    }
}

/// Reads a gateway tenants file (JSON Lines for `.jsonl`, else TOML); an
/// error names the file and the line or entry.
pub fn read_file(path: &Path) -> Result<Served> {
    let mut collector = Collector::new();
    with_progress("reading tenants", |_| {
        read_located(path, |at, entry| {
            if collector.full() {
                return Err(FilesError::new(
                    path,
                    at.to_string(),
                    format!(
                        "more than the {MAX_TENANTS} tenants this command supports; analyse a part of the file"
                    ),
                ));
            }
            collector
                .add(entry, Some(at))
                .map_err(|problem| FilesError::new(path, at.to_string(), problem))
        })
    })?;
    if collector.served.ids.is_empty() {
        bail!(
            "{}: has no tenants; a gateway tenants file lists one entry per tenant",
            path.display()
        );
    }
    Ok(collector.served)
}

/// Reads every tenant of the store at `url`, with TLS against `ca_file`
/// when given. A row the gateway would not load is skipped and counted, as
/// the gateway skips it; a store that cannot be read is one error line
/// naming the store without its password.
pub fn read_store(url: &str, ca_file: Option<&Path>) -> Result<Served> {
    let mut settings = settings(url, ca_file.map(Path::to_owned))?;
    settings.timeout = STORE_TIMEOUT;
    let shown = settings.url.to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut collector = Collector::new();
    let mut too_many = false;
    with_progress("reading tenants from the store", |_| {
        runtime.block_on(async {
            let store = TenantStore::connect(&settings).await?;
            store.check_schema().await?;
            store
                .load_all(|row: Result<TenantEntry, BadRow>| match row {
                    // The stream cannot be stopped from here; the rest is
                    // ignored and the load refused once it ends.
                    _ if too_many => {}
                    _ if collector.full() => too_many = true,
                    Ok(entry) => {
                        let id = entry.id.clone();
                        if let Err(problem) = collector.add(entry, None) {
                            collector.skip(format!("tenant {id:?}: {problem}"));
                        }
                    }
                    Err(row) => collector.skip(row.to_string()),
                })
                .await
        })
    })?;
    if too_many {
        bail!(
            "the tenant store at {shown} holds more than the {MAX_TENANTS} tenants this command supports"
        );
    }
    if collector.served.ids.is_empty() {
        bail!(
            "the tenant store at {shown} has no tenants{}; import some with `shuffle-shard tenants import FILE --store URL`",
            match collector.served.skipped {
                0 => String::new(),
                n => format!(
                    " that load ({n} rows skipped, e.g. {})",
                    collector.served.first_skipped.as_deref().unwrap_or("?")
                ),
            }
        );
    }
    Ok(collector.served)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str) -> TenantEntry {
        TenantEntry {
            id: id.into(),
            ..TenantEntry::default()
        }
    }

    #[test]
    fn rules_keep_k_and_shards_and_refuse_both() {
        let mut collector = Collector::new();
        collector.add(entry("plain"), None).unwrap();
        let own_k = TenantEntry {
            k: Some(5),
            cell: Some("eu".into()),
            ..entry("whale")
        };
        collector.add(own_k, Some(Location::Line(2))).unwrap();
        let dedicated = TenantEntry {
            shards: Some(vec!["3".into(), "4".into()]),
            ..entry("vip")
        };
        collector.add(dedicated, Some(Location::Line(3))).unwrap();
        let both = TenantEntry {
            k: Some(2),
            shards: Some(vec!["1".into()]),
            ..entry("confused")
        };
        let error = collector.add(both, None).unwrap_err();
        assert!(error.contains("either k or shards"), "{error}");

        let served = collector.served;
        assert_eq!(served.ids, ["plain", "whale", "vip"]);
        assert_eq!(served.rules.len(), 2);
        assert!(matches!(served.rules[0].rule, TenantOverride::K(5)));
        assert_eq!(served.rules[1].at, Some(Location::Line(3)));
        assert_eq!(served.cells.get("eu"), Some(&1));
    }

    #[test]
    fn a_tenant_listed_twice_or_a_bad_id_is_refused() {
        let mut collector = Collector::new();
        collector.add(entry("acme"), None).unwrap();
        let error = collector.add(entry("acme"), None).unwrap_err();
        assert!(error.contains("\"acme\" is listed twice"), "{error}");
        let error = collector.add(entry("has space"), None).unwrap_err();
        assert!(error.contains("visible ASCII"), "{error}");
        assert_eq!(collector.served.ids, ["acme"]);
    }
}
