//! Discovered cells' shards in a configuration: each cell's membership
//! (kept from the snapshot before, or looked at once) written into its
//! shards, and the marks a shard at a new address keeps. Nothing here
//! reads the snapshot, so the snapshot's own module can call it.

use tokio::time::Instant;

use crate::config::{ConfigError, GatewayConfig, ShardSettings, ShardUrl};
use crate::discovery::Memberships;
use crate::discovery::first_look::{FirstLookError, first_look};
use crate::health::HealthState;

/// The memberships a load of `config` begins with: a discovered cell keeps
/// the one it had in `previous` (a reload does not look again), and a cell
/// new to discovery, or with a new source, is looked at once.
pub(super) fn memberships(
    config: &GatewayConfig,
    previous: Option<&Memberships>,
) -> Result<Memberships, FirstLookError> {
    let mut memberships = Memberships::new();
    let mut unknown = Vec::new();
    for (index, cell) in config.cells.iter().enumerate() {
        let Some(source) = &cell.discovery else {
            continue;
        };
        match previous.and_then(|previous| previous.get(&cell.name)) {
            Some(held) if held.source == *source => {
                memberships.insert(cell.name.clone(), held.clone());
            }
            _ => unknown.push(index),
        }
    }
    memberships.extend(first_look(config, &unknown)?);
    Ok(memberships)
}

/// Writes each discovered cell's members into its shards (after the
/// written ones), in id order, so that every replica with the same
/// membership places alike whatever order its source listed them in.
pub(super) fn fill(
    config: &mut GatewayConfig,
    memberships: &Memberships,
) -> Result<(), ConfigError> {
    let cap = config.limits.shard_max_in_flight;
    let path = config.path.clone();
    for (index, cell) in config.cells.iter_mut().enumerate() {
        if cell.discovery.is_none() {
            continue;
        }
        let Some(membership) = memberships.get(&cell.name) else {
            continue;
        };
        let mut shards = Vec::with_capacity(membership.members.len());
        for member in &membership.members {
            let url =
                ShardUrl::parse(&format!("http://{}", member.address)).map_err(|problem| {
                    ConfigError::new(
                        &path,
                        format!("cells[{index}].discovery"),
                        problem.to_string(),
                    )
                })?;
            shards.push(ShardSettings {
                id: member.id.clone(),
                url,
                server_name: None,
                zone: member.zone.clone(),
                weight: 1.0,
                protocol: cell.discovered_protocol,
                max_in_flight: cap,
            });
        }
        cell.set_discovered(shards);
    }
    Ok(())
}

/// The health of a new run-time shard that replaces one of the same id
/// (`before`: a restarted pod at a new address) keeps the operators' marks
/// and discovery's; one whose member is `missing` starts missing.
pub(super) fn carry_marks(health: &mut HealthState, before: Option<HealthState>, missing: bool) {
    let now = Instant::now();
    if let Some(before) = before {
        health.mark(before.failed, before.drained, now);
        health.set_missing(before.missing, now);
        health.mark_origin = before.mark_origin;
    }
    if missing {
        health.set_missing(true, now);
    }
}

/// Each discovered cell's series, created (and its member gauges set).
pub(super) fn know_series(memberships: &Memberships, metrics: &crate::telemetry::metrics::Metrics) {
    for (cell, membership) in memberships.iter() {
        metrics.discovery.know(cell);
        let missing = membership
            .members
            .iter()
            .filter(|member| member.missing.is_some())
            .count();
        metrics
            .discovery
            .members(cell, membership.members.len() - missing, missing);
    }
}
