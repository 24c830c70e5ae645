//! Changes to some tenants applied to the served snapshot without a
//! reload (the tenant store's rows as the sync task reads them), the
//! whole registry replaced (the store read again), and the one way a new
//! snapshot is put in service.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Gateway, LoadError, Snapshot, fresh_routes};
use crate::config::{ConfigError, GatewayConfig};
use crate::tenants::{TenantEntry, Tenants, ValidEntry};

/// What became of a batch of tenant changes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Changes applied (puts and deletes).
    pub applied: u64,
    /// Of them, changes that moved an existing tenant to other shards.
    pub moved: u64,
    /// Changes refused, by tenant id, with why (the tenant keeps what it
    /// had).
    pub refused: Vec<(String, String)>,
    /// Of them, the tenants refused because another tenant holds their
    /// API key (a later change may release it).
    pub key_held: Vec<String>,
}

impl Snapshot {
    /// This snapshot's tenants checked against another configuration
    /// (a reload while the tenants come from the store).
    pub(super) fn tenants_for(&self, config: &GatewayConfig) -> Result<Tenants, ConfigError> {
        crate::tenants::load::from_entries(
            self.tenants.iter().map(|t| t.to_entry(&self.config)),
            self.tenants.len(),
            config,
            &config.tenants().describe(),
        )
    }

    /// This snapshot with some tenants changed: `changes` are applied in
    /// order (an entry puts, `None` deletes), each refused one (its API
    /// key held by another tenant) named in the result with why. Only the
    /// registry buckets the changes touch are copied, and only their
    /// routes and limits start afresh; everything else is shared.
    pub fn patched(
        &self,
        changes: &[(String, Option<ValidEntry>)],
    ) -> (Self, Vec<(String, String)>) {
        let mut tenants = self.tenants.clone();
        let mut refused = Vec::new();
        for (id, change) in changes {
            let outcome = match change {
                Some(entry) => tenants.upsert(entry).map_err(|c| c.to_string()),
                None => {
                    tenants.remove(id);
                    Ok(())
                }
            };
            if let Err(why) = outcome {
                refused.push((id.clone(), why));
            }
        }
        let touched: Vec<usize> = (0..tenants.bucket_count())
            .filter(|&b| !tenants.same_bucket(&self.tenants, b))
            .collect();
        let mut routes = self.routes.clone();
        for &bucket in &touched {
            routes[bucket] = fresh_routes();
        }
        let limits = self.limits.patched(
            &self.config.limits.tenant,
            &tenants,
            &self.tenants,
            &touched,
        );
        let next = Self {
            config: Arc::clone(&self.config),
            tenants,
            topology: Arc::clone(&self.topology),
            authenticator: Arc::clone(&self.authenticator),
            shards: self.shards.clone(),
            blast: std::sync::OnceLock::new(),
            prefixed: self.prefixed.clone(),
            admin_token: self.admin_token.clone(),
            limits,
            cell_metrics: (0..self.config.cells.len())
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            routes,
            caps: self.caps.clone(),
            memberships: Arc::clone(&self.memberships),
            // Its routes' lookback members are this one's until installed
            // (`Gateway::install` decides).
            lookback: self.lookback.clone(),
        };
        (next, refused)
    }
}

impl Gateway {
    /// Applies changes to single tenants, in order (`None` deletes): each
    /// entry is checked against the configuration served, and one that
    /// fails (or whose API key another tenant holds) is refused, logged
    /// with its tenant and field, and counted; the rest apply. Only the
    /// registry buckets they touch are copied.
    pub fn apply_tenant_changes(
        self: &Arc<Self>,
        changes: Vec<(String, Option<TenantEntry>)>,
    ) -> Applied {
        let _one_at_a_time = self.changing.lock().expect("changing lock");
        let current = self.snapshot();
        let mut applied = Applied::default();
        let mut valid: Vec<(String, Option<ValidEntry>)> = Vec::with_capacity(changes.len());
        for (id, entry) in changes {
            match entry.map(|entry| check(&id, &entry, &current)).transpose() {
                Ok(entry) => valid.push((id, entry)),
                Err(why) => applied.refused.push((id, why)),
            }
        }
        let (next, conflicts) = current.patched(&valid);
        // `patched` refuses a change only for an API key another holds.
        applied.key_held = conflicts.iter().map(|(id, _)| id.clone()).collect();
        applied.refused.extend(conflicts);
        for (id, _) in &valid {
            if applied.refused.iter().any(|(refused, _)| refused == id) {
                continue;
            }
            applied.applied += 1;
            if let (Some(before), Some(after)) = (current.tenants.get(id), next.tenants.get(id)) {
                let same_cell = before.cell_index() == after.cell_index();
                let (old, new) = (current.members_of(before), next.members_of(after));
                applied.moved += u64::from(!same_cell || old != new);
            }
        }
        for (tenant, problem) in &applied.refused {
            tracing::warn!(%tenant, %problem, "tenant change refused; the tenant keeps what it had");
        }
        let counts = &self.metrics.tenant_store;
        counts.changed("applied", applied.applied);
        counts.changed("moved", applied.moved);
        counts.changed("refused", applied.refused.len() as u64);
        self.install(next, applied.moved > 0);
        applied
    }

    /// Replaces the whole registry (the tenant store read again), keeping
    /// the configuration and every shard's state. `checked` is the
    /// configuration the tenants were checked against: when another is
    /// served by now (a reload, or discovery changed a cell's shards while
    /// the store was read), they are checked again against it, so no
    /// tenant's own `k` or dedicated shards meet a cell they do not fit.
    pub fn replace_tenants(
        self: &Arc<Self>,
        tenants: Tenants,
        checked: &Arc<GatewayConfig>,
    ) -> Result<(), LoadError> {
        let _one_at_a_time = self.changing.lock().expect("changing lock");
        let current = self.snapshot();
        let tenants = if Arc::ptr_eq(&current.config, checked) {
            tenants
        } else {
            crate::tenants::load::from_entries(
                tenants.iter().map(|t| t.to_entry(checked)),
                tenants.len(),
                &current.config,
                &current.config.tenants().describe(),
            )?
        };
        let next = Snapshot::build((*current.config).clone(), tenants, Some(&current))?;
        // Whether the registry read again moved anybody is worth a pass
        // over the tenants only when a lookback would be kept for them.
        let moved = !next.config.lookback().is_zero() && current.migration_to(&next).changed > 0;
        self.install(next, moved);
        Ok(())
    }

    /// Puts `next` in service: requests that start from now on use it.
    /// `moved` says whether it moves some tenant to other shards (a
    /// migration), which starts a lookback window over the placement
    /// served until now when `reload.lookback_seconds` asks for one.
    pub(super) fn install(self: &Arc<Self>, mut next: Snapshot, moved: bool) {
        self.metrics
            .tenant_store
            .tenants
            .set(next.tenants.len() as i64);
        let current = self.snapshot();
        let lookback = super::Lookback::after(
            current.lookback.as_ref(),
            (&current.config, &current.tenants, &current.topology),
            next.config.lookback(),
            moved,
            tokio::time::Instant::now(),
        );
        let same = match (&lookback, &next.lookback) {
            (Some(new), Some(old)) => Arc::ptr_eq(new, old),
            (None, None) => true,
            _ => false,
        };
        if !same {
            // Routes a patched snapshot shares were computed with another
            // lookback's members: every route is computed afresh.
            for bucket in &mut next.routes {
                *bucket = fresh_routes();
            }
        }
        if let Some(lookback) = lookback.as_ref().filter(|_| moved) {
            tracing::info!(
                window_seconds = lookback.window.as_secs_f64(),
                "a migration was applied: tenants it moved may be served by their previous members until the lookback window closes (reload.lookback_seconds)"
            );
        }
        next.lookback = lookback;
        drop(current);
        self.snapshot.store(Arc::new(next));
        self.reloads.send_modify(|generation| *generation += 1);
        self.model_latest();
    }

    /// Builds the blast-radius model of the snapshot in service on a
    /// thread of its own, one build at a time: a burst of changes costs
    /// one build after it, not one per change.
    pub(super) fn model_latest(self: &Arc<Self>) {
        if self.modeling.swap(true, Ordering::AcqRel) {
            return;
        }
        let gateway = Arc::downgrade(self);
        let started = std::thread::Builder::new()
            .name("blast-model".into())
            .spawn(move || {
                while let Some(gateway) = gateway.upgrade() {
                    let built = gateway.snapshot();
                    let began = std::time::Instant::now();
                    built.blast();
                    tracing::debug!(
                        tenants = built.tenants.len(),
                        elapsed_ms = began.elapsed().as_millis() as u64,
                        "blast-radius model built"
                    );
                    gateway.stand(&built, began);
                    gateway.modeling.store(false, Ordering::Release);
                    // A snapshot installed meanwhile is built too, unless
                    // its own call started a thread for it.
                    if Arc::ptr_eq(&gateway.snapshot(), &built)
                        || gateway.modeling.swap(true, Ordering::AcqRel)
                    {
                        return;
                    }
                }
            });
        if started.is_err() {
            // The first reader builds it instead.
            self.modeling.store(false, Ordering::Release);
        }
    }
}

/// One entry checked against the configuration served: its id must be the
/// one it is filed under.
fn check(id: &str, entry: &TenantEntry, snapshot: &Snapshot) -> Result<ValidEntry, String> {
    if entry.id != id {
        return Err(format!(
            "id: the entry says {:?} but is filed under {id:?}",
            entry.id
        ));
    }
    entry
        .validate(&snapshot.config)
        .map_err(|error| error.to_string())
}
