//! Reloading the configuration file: the new snapshot is validated
//! whole, refused with the reason when it would change what is read only
//! at start or move tenants unasked, and swapped in atomically otherwise.

use std::sync::Arc;

use super::{Gateway, LoadError, Reloaded, Snapshot, connector};
use crate::config::{ConfigError, GatewayConfig};

impl Gateway {
    /// Reloads from the configuration file. The new configuration is
    /// validated whole and swapped in atomically; requests in flight finish
    /// on the snapshot they started with. A configuration that would move
    /// tenants to other shards is refused unless `allow_migration` is set
    /// (by the caller, or by `reload.allow_migration` in the new file). On
    /// any error the old snapshot keeps serving and the error says why.
    /// A change that only adds members (no tenant loses one) is let through
    /// by `reload.allow_growth` in the new file as well. Every outcome is
    /// counted in the reload metrics.
    pub fn reload(self: &Arc<Self>, allow_migration: bool) -> Result<Reloaded, LoadError> {
        let reloaded = self.try_reload(allow_migration);
        self.metrics.reload(reloaded.is_ok());
        reloaded
    }

    fn try_reload(self: &Arc<Self>, allow_migration: bool) -> Result<Reloaded, LoadError> {
        let _one_at_a_time = self.changing.lock().expect("changing lock");
        let current = self.snapshot();
        let next = Snapshot::load(&current.config.path, Some(&current))?;
        // The admin listener is bound once, at start: a file that names
        // another address would be judged (token-less pages on a loopback
        // address, say) by where it is not listening.
        // The same holds for the data listeners.
        let tls_listen = |config: &GatewayConfig| config.tls.as_ref().map(|tls| tls.listen);
        let bound_at_start = [
            (
                "admin.listen",
                Some(current.config.admin.listen),
                Some(next.config.admin.listen),
            ),
            ("listen", current.config.listen, next.config.listen),
            (
                "tls.listen",
                tls_listen(&current.config),
                tls_listen(&next.config),
            ),
        ];
        // `[fleet]` too: the store and the replica's name are taken at start,
        // and a request path that changed its rules without the store (or
        // the other way round) would keep neither promise.
        if current.config.fleet != next.config.fleet {
            return Err(ConfigError::new(
                &next.config.path,
                "fleet",
                "is read at start; [fleet] stays as it is until a restart; put it back, or restart the gateway to change it",
            )
            .into());
        }
        for (key, now, asked) in bound_at_start {
            if now != asked {
                let now = now.map_or_else(|| "(none)".to_owned(), |addr| addr.to_string());
                return Err(ConfigError::new(
                    &next.config.path,
                    key,
                    format!(
                        "is read at start; the listener stays as it is ({now}) until a restart; put it back, or restart the gateway to change it"
                    ),
                )
                .into());
            }
        }
        let movement = current.migration_to(&next);
        let growth_allowed = movement.is_growth() && next.config.reload_allow_growth;
        if movement.changed > 0
            && !(allow_migration || next.config.reload_allow_migration || growth_allowed)
        {
            return Err(LoadError::Migration(movement));
        }
        if growth_allowed {
            tracing::warn!(
                tenants = movement.gaining,
                members_gained = movement.members_gained,
                members_lost = 0,
                "reload grows subsets: every tenant keeps its shards and {} tenants gain {} members in all (reload.allow_growth)",
                movement.gaining,
                movement.members_gained
            );
        }
        // Kept shards are reached the new way from here on (a changed
        // server_name or [upstream.tls]); their pools drop connections made
        // the old way. Only now, with nothing left to refuse the reload.
        for (cell, runtimes) in next.config.cells.iter().zip(&next.shards) {
            for (shard, runtime) in cell.shards.iter().zip(runtimes) {
                runtime.upstream.reach(connector(shard, &next.config));
            }
        }
        next.know_series(&self.metrics);
        if let Err(error) = self
            .access_log
            .point_at(next.config.access_log_file.as_deref())
        {
            // Opened a moment ago by the configuration's own check.
            tracing::warn!(%error, "cannot open the new logging.access_log_file; the access log keeps its old destination");
        }
        self.trace_to(&next.config);
        self.install(next, movement.changed > 0);
        Ok(Reloaded {
            changed: movement.changed,
            tenants: movement.tenants,
            members_gained: movement.members_gained,
            members_lost: movement.members_lost,
        })
    }
}
