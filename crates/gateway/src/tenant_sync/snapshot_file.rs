//! `tenants.snapshot_file`: the last registry this replica applied, kept on
//! disk (written beside and renamed into place, so a crash never leaves
//! half a file), so that it can start and serve while the store is down.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::config::TenantSource;
use crate::state::Gateway;

/// The most often the file is written: a burst of changes is one write
/// after it, not one per change (a million tenants are about 100 MB).
const EVERY: Duration = Duration::from_secs(5);

/// Writes the registry served to the snapshot file, at once (`now`) or
/// within [`EVERY`]; a write already due takes this one's place.
pub(super) fn write_soon(gateway: &Arc<Gateway>, now: bool) {
    let Some(link) = gateway.tenant_store.get() else {
        return;
    };
    let config = Arc::clone(&gateway.snapshot().config);
    let TenantSource::Store(settings) = config.tenants() else {
        return;
    };
    let Some(path) = settings.snapshot_file.clone() else {
        return;
    };
    if link.snapshot_due.swap(true, Ordering::AcqRel) {
        return;
    }
    let gateway = Arc::clone(gateway);
    let link = Arc::clone(link);
    tokio::spawn(async move {
        if !now {
            tokio::time::sleep(EVERY).await;
        }
        // Cleared before the registry is taken: a change after this
        // point schedules a write of its own.
        link.snapshot_due.store(false, Ordering::Release);
        let snapshot = gateway.snapshot();
        let written = tokio::task::spawn_blocking(move || {
            let entries = snapshot
                .tenants
                .iter()
                .map(|t| t.to_entry(&snapshot.config));
            crate::tenants::files::write_entries(&path, entries)
        })
        .await;
        match written {
            Ok(Ok(count)) => tracing::debug!(tenants = count, "snapshot file written"),
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot write tenants.snapshot_file; a restart while the store is down would serve an older registry")
            }
            Err(error) => tracing::warn!(%error, "the snapshot file writer failed"),
        }
    });
}
