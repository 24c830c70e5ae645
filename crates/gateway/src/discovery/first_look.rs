//! A discovered cell's first membership: its source looked at once, on a
//! thread of its own, before a start or a reload builds anything on it.

use super::{DiscoveryError, Membership, Memberships, guard, look_once};
use crate::config::{DiscoverySource, GatewayConfig};

/// The first membership of each discovered cell of `config` named in
/// `cells` (by index), looked at once each, in parallel, on a thread of its
/// own (the caller may be inside an async runtime or not): what a start,
/// or a reload that adds a discovered cell, begins with. The first cell
/// whose look fails or is refused is named in the error.
pub fn first_look(config: &GatewayConfig, cells: &[usize]) -> Result<Memberships, FirstLookError> {
    let settings = config.discovery().clone();
    let sources: Vec<(String, DiscoverySource, Vec<String>)> = cells
        .iter()
        .filter_map(|&index| {
            let cell = &config.cells()[index];
            let written = cell.static_shards().iter().map(|s| s.id.clone()).collect();
            Some((cell.name.clone(), cell.discovery.clone()?, written))
        })
        .collect();
    if sources.is_empty() {
        return Ok(Memberships::new());
    }
    let looked = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| {
                        DiscoveryError::Unreachable(format!("cannot start a runtime: {e}"))
                    });
                let runtime = match runtime {
                    Ok(runtime) => runtime,
                    Err(error) => return vec![Err(error); sources.len()],
                };
                runtime.block_on(futures_util::future::join_all(
                    sources
                        .iter()
                        .map(|(_, source, _)| look_once(source, &settings)),
                ))
            })
            .join()
            .unwrap_or_else(|_| {
                vec![Err(DiscoveryError::Unreachable("the look panicked".into())); sources.len()]
            })
    });
    let mut memberships = Memberships::new();
    let rules = guard::Rules {
        grace: settings.removal_grace,
        max_removed_fraction: settings.max_removed_fraction,
    };
    let now = tokio::time::Instant::now();
    for ((cell, source, written), looked) in sources.into_iter().zip(looked) {
        let found = looked.map_err(|error| FirstLookError::Look {
            cell: cell.clone(),
            origin: source.to_string(),
            error,
        })?;
        let written: Vec<&str> = written.iter().map(String::as_str).collect();
        let members = match guard::judge(
            &[],
            &written,
            &found,
            rules,
            now,
            std::time::SystemTime::now(),
        ) {
            guard::Judged::Change(change) => change.members,
            guard::Judged::Unchanged => Vec::new(),
            guard::Judged::Refused(refusal) => {
                return Err(FirstLookError::Refused {
                    cell,
                    origin: source.to_string(),
                    refusal: refusal.to_string(),
                });
            }
        };
        memberships.insert(cell, Membership { source, members });
    }
    Ok(memberships)
}

/// Why a discovered cell has no first membership.
#[derive(Debug, thiserror::Error)]
pub enum FirstLookError {
    /// The source gave no answer.
    #[error(
        "cell {cell:?}: discovery {origin} found no shards: {error}; the gateway serves once every discovered cell has shards (check the name, and discovery.resolver or discovery.kubeconfig)"
    )]
    Look {
        /// The cell.
        cell: String,
        /// Its source.
        origin: String,
        /// What went wrong.
        error: DiscoveryError,
    },
    /// The guard refused what it gave.
    #[error("cell {cell:?}: discovery {origin}: {refusal}")]
    Refused {
        /// The cell.
        cell: String,
        /// Its source.
        origin: String,
        /// Why.
        refusal: String,
    },
}
