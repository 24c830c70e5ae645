//! A drill session: the tenants and their subsets as the gateway reports
//! them, load phases, the analyser's prediction for a failure set, and the
//! verdict on the three properties a drill checks.
//!
//! 1. **Degraded, not down**: tenants with some but not all members failed
//!    keep a success ratio at or above the threshold.
//! 2. **Unaffected feel nothing**: tenants with no failed member see no
//!    errors, and their p99 latency stays within the bound of the baseline.
//! 3. **Failover happened**: the gateway's failover counter rose.
//!
//! And tenant by tenant, the measured fully-down and degraded sets must equal
//! the analyser's prediction for the same failure set.

use std::collections::{BTreeMap, BTreeSet};

use analysis::{BlastModel, Placements};
use serde::Serialize;

use crate::admin::AdminClient;
use crate::credentials::TenantCredential;
use crate::error::DrillError;
use crate::load::{self, LoadShape, TenantSample};

/// A success ratio under which a tenant counts as fully down in a phase.
const DOWN_BELOW: f64 = 0.5;

/// What the properties are checked against.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Thresholds {
    /// Smallest success ratio an affected (degraded) tenant may have.
    pub min_success: f64,
    /// How much the unaffected tenants' p99 latency may grow over the
    /// baseline, in milliseconds.
    pub latency_bound_ms: f64,
}

/// One phase of load.
#[derive(Debug, Clone)]
pub struct Phase {
    /// Per tenant, in session order.
    pub samples: Vec<TenantSample>,
}

/// A shard, by cell and id.
pub type ShardRef = (String, String);

/// The verdict on one fault phase.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Phase name.
    pub name: String,
    /// The shards that were out during the phase (`cell/id`).
    pub failed: Vec<String>,
    /// Tenants measured fully down (success under 50 %).
    pub fully_down: usize,
    /// Tenants measured degraded: a member out of rotation, as the gateway
    /// reported it (the fully down included).
    pub degraded: usize,
    /// Tenants with no member out.
    pub unaffected: usize,
    /// Failed requests of all tenants.
    pub errors: u64,
    /// Failed requests of unaffected tenants (must be 0).
    pub unaffected_errors: u64,
    /// The lowest success ratio among degraded-not-down tenants.
    pub affected_min_success: Option<f64>,
    /// p99 latency of unaffected tenants in the baseline, ms.
    pub baseline_p99_ms: f64,
    /// p99 latency of unaffected tenants in this phase, ms.
    pub p99_ms: f64,
    /// How much the gateway's failover counter rose.
    pub failovers: f64,
    /// The analyser's fully-down count for the failure set.
    pub modeled_fully_down: u64,
    /// The analyser's degraded count for the failure set.
    pub modeled_degraded: u64,
    /// Measured fully-down set equals the prediction, tenant by tenant.
    pub fully_down_matches: bool,
    /// Measured degraded set equals the prediction, tenant by tenant.
    pub degraded_matches: bool,
    /// Every violated property, in words. Empty when the phase passed.
    pub violations: Vec<String>,
}

/// Tenants, subsets and the gateway.
#[derive(Debug)]
pub struct Session {
    gateway: String,
    admin: AdminClient,
    tenants: Vec<TenantCredential>,
    /// Each tenant's cell and subset (shard ids).
    subsets: Vec<(String, Vec<String>)>,
    /// Each cell's shard ids in admin order (their indices for the model).
    cells: BTreeMap<String, Vec<String>>,
    shape: LoadShape,
}

impl Session {
    /// Reads every tenant's subset from the admin API.
    pub async fn prepare(
        gateway: &str,
        admin: AdminClient,
        tenants: Vec<TenantCredential>,
        shape: LoadShape,
    ) -> Result<Self, DrillError> {
        let mut cells: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for shard in admin.shards().await? {
            cells.entry(shard.cell).or_default().push(shard.id);
        }
        let mut subsets = Vec::with_capacity(tenants.len());
        for chunk in tenants.chunks(64) {
            let mut lookups = tokio::task::JoinSet::new();
            for (position, tenant) in chunk.iter().enumerate() {
                let (admin, id) = (admin.clone(), tenant.tenant.clone());
                lookups.spawn(async move { (position, admin.subset(&id).await) });
            }
            let mut found = vec![None; chunk.len()];
            while let Some(joined) = lookups.join_next().await {
                let (position, subset) = joined.map_err(|e| DrillError::Gateway(e.to_string()))?;
                found[position] = Some(subset?);
            }
            subsets.extend(found.into_iter().flatten());
        }
        Ok(Self::fixed(gateway, admin, tenants, subsets, cells, shape))
    }

    /// A session over given subsets and cells, with no lookups (what
    /// [`Session::new`] ends with once it has looked them up; the tests of
    /// the verdicts start here).
    pub(crate) fn fixed(
        gateway: &str,
        admin: AdminClient,
        tenants: Vec<TenantCredential>,
        subsets: Vec<(String, Vec<String>)>,
        cells: BTreeMap<String, Vec<String>>,
        shape: LoadShape,
    ) -> Self {
        Self {
            gateway: gateway.to_owned(),
            admin,
            tenants,
            subsets,
            cells,
            shape,
        }
    }

    /// A session over fixed subsets in one cell `c` of shards `s0`…, with
    /// no gateway behind it: what the verdicts' tests judge.
    #[cfg(test)]
    pub(crate) fn over_subsets(subsets: &[&[&str]], shards: usize) -> Self {
        let unreachable = "http://127.0.0.1:1";
        Self::fixed(
            unreachable,
            AdminClient::new(&unreachable.parse().unwrap(), "token"),
            (0..subsets.len())
                .map(|t| TenantCredential::new(format!("t{t}"), "k"))
                .collect(),
            subsets
                .iter()
                .map(|ids| {
                    (
                        "c".to_owned(),
                        ids.iter().map(|&id| id.to_owned()).collect(),
                    )
                })
                .collect(),
            [(
                "c".to_owned(),
                (0..shards).map(|i| format!("s{i}")).collect(),
            )]
            .into(),
            LoadShape {
                requests_per_tenant: 1,
                concurrency: 1,
                timeout: std::time::Duration::from_secs(1),
                protocol: load::Protocol::Http,
            },
        )
    }

    /// The admin client.
    pub fn admin(&self) -> &AdminClient {
        &self.admin
    }

    /// Number of tenants.
    pub fn tenants(&self) -> usize {
        self.tenants.len()
    }

    /// Drives one phase of load.
    pub async fn measure(&self) -> Phase {
        Phase {
            samples: load::drive(&self.gateway, &self.tenants, self.shape).await,
        }
    }

    /// Drives one phase of load for every tenant but `skip` (the poison
    /// tenant, which sends only its poison); its sample stays empty.
    pub async fn measure_without(&self, skip: usize) -> Phase {
        let others: Vec<TenantCredential> = self
            .tenants
            .iter()
            .enumerate()
            .filter(|&(t, _)| t != skip)
            .map(|(_, tenant)| tenant.clone())
            .collect();
        let mut samples = load::drive(&self.gateway, &others, self.shape).await;
        samples.insert(skip.min(samples.len()), TenantSample::default());
        Phase { samples }
    }

    /// The gateway's data URL.
    pub fn gateway(&self) -> &str {
        &self.gateway
    }

    /// The load shape of every phase.
    pub fn shape(&self) -> LoadShape {
        self.shape
    }

    /// The position of a tenant in the session, by id.
    pub fn position(&self, tenant: &str) -> Option<usize> {
        self.tenants.iter().position(|t| t.tenant == tenant)
    }

    /// Tenant `t`'s credential.
    pub fn credential(&self, t: usize) -> &TenantCredential {
        &self.tenants[t]
    }

    /// Every tenant's cell and subset (shard ids), in session order.
    pub fn subsets(&self) -> &[(String, Vec<String>)] {
        &self.subsets
    }

    /// Each cell's shard ids, in admin order.
    pub fn cells(&self) -> &BTreeMap<String, Vec<String>> {
        &self.cells
    }

    /// The tenants the gateway reports with a member out of rotation now,
    /// asked tenant by tenant: the measured degraded set.
    pub async fn measured_degraded(&self) -> Result<BTreeSet<usize>, DrillError> {
        let mut degraded = BTreeSet::new();
        for (chunk_index, chunk) in self.tenants.chunks(64).enumerate() {
            let mut lookups = tokio::task::JoinSet::new();
            for (position, tenant) in chunk.iter().enumerate() {
                let (admin, id) = (self.admin.clone(), tenant.tenant.clone());
                lookups.spawn(async move {
                    (chunk_index * 64 + position, admin.has_member_out(&id).await)
                });
            }
            while let Some(joined) = lookups.join_next().await {
                let (tenant, out) = joined.map_err(|e| DrillError::Gateway(e.to_string()))?;
                if out? {
                    degraded.insert(tenant);
                }
            }
        }
        Ok(degraded)
    }

    /// The shards the gateway reports out of rotation now.
    pub async fn out_of_rotation(&self) -> Result<Vec<ShardRef>, DrillError> {
        Ok(self
            .admin
            .shards()
            .await?
            .into_iter()
            .filter(|shard| shard.health != "up")
            .map(|shard| (shard.cell, shard.id))
            .collect())
    }

    /// The analyser's prediction: per tenant (fully down, degraded), and
    /// the model's counts.
    pub fn predict(&self, failed: &[ShardRef]) -> (Vec<(bool, bool)>, u64, u64) {
        let per_tenant = self
            .subsets
            .iter()
            .map(|(cell, subset)| {
                let out = subset
                    .iter()
                    .filter(|id| failed.iter().any(|(c, f)| c == cell && f == *id))
                    .count();
                (out == subset.len() && out > 0, out > 0)
            })
            .collect();
        // The counts come from the analyser's model, cell by cell: the same
        // code `shuffle-shard blast` runs.
        let (mut fully_down, mut degraded) = (0, 0);
        for (cell, ids) in &self.cells {
            let index = |id: &String| ids.iter().position(|x| x == id).map(|i| i as u32);
            let subsets: Vec<Vec<u32>> = self
                .subsets
                .iter()
                .filter(|(c, _)| c == cell)
                .map(|(_, subset)| subset.iter().filter_map(index).collect())
                .collect();
            let failed_here: Vec<u32> = failed
                .iter()
                .filter(|(c, _)| c == cell)
                .filter_map(|(_, id)| index(id))
                .collect();
            if subsets.is_empty() || failed_here.is_empty() {
                continue;
            }
            if let Ok(model) = BlastModel::new(&Placements::from_subsets(ids.len(), &subsets))
                && let Ok(impact) = model.impact(&failed_here)
            {
                fully_down += impact.fully_down;
                degraded += impact.degraded;
            }
        }
        (per_tenant, fully_down, degraded)
    }

    /// Checks the three properties for a fault phase against the baseline.
    ///
    /// `failed` is the declared failure set (what the analyser predicts
    /// for); `measured_degraded` is what the gateway reported during the
    /// phase (see [`measured_degraded`](Self::measured_degraded)).
    #[allow(clippy::too_many_arguments)]
    pub fn evaluate(
        &self,
        name: &str,
        baseline: &Phase,
        during: &Phase,
        failed: &[ShardRef],
        measured_degraded: &BTreeSet<usize>,
        failovers: f64,
        thresholds: Thresholds,
    ) -> Verdict {
        let (predicted, modeled_fully_down, modeled_degraded) = self.predict(failed);
        let mut violations = Vec::new();
        let measured_down: BTreeSet<usize> = (0..self.tenants.len())
            .filter(|&t| during.samples[t].ratio() < DOWN_BELOW)
            .collect();
        let predicted_down: BTreeSet<usize> = (0..self.tenants.len())
            .filter(|&t| predicted[t].0)
            .collect();
        let predicted_degraded: BTreeSet<usize> = (0..self.tenants.len())
            .filter(|&t| predicted[t].1)
            .collect();

        let mut affected_min: Option<f64> = None;
        for &t in predicted_degraded.difference(&predicted_down) {
            let ratio = during.samples[t].ratio();
            affected_min = Some(affected_min.map_or(ratio, |m: f64| m.min(ratio)));
            if ratio < thresholds.min_success {
                violations.push(format!(
                    "degraded tenant {} was served {:.2}% of requests, below {:.2}%",
                    self.tenants[t].tenant,
                    ratio * 100.0,
                    thresholds.min_success * 100.0
                ));
            }
        }
        let unaffected: Vec<usize> = (0..self.tenants.len())
            .filter(|t| !predicted_degraded.contains(t))
            .collect();
        let unaffected_errors: u64 = unaffected.iter().map(|&t| during.samples[t].errors()).sum();
        if unaffected_errors > 0 {
            violations.push(format!(
                "unaffected tenants saw {unaffected_errors} errors; they should see none"
            ));
        }
        let p99 = |phase: &Phase| {
            let mut all: Vec<u32> = unaffected
                .iter()
                .flat_map(|&t| phase.samples[t].latencies_us.iter().copied())
                .collect();
            load::quantile_ms(&mut all, 0.99)
        };
        let (baseline_p99_ms, p99_ms) = (p99(baseline), p99(during));
        if p99_ms > baseline_p99_ms + thresholds.latency_bound_ms {
            violations.push(format!(
                "unaffected tenants' p99 latency rose from {baseline_p99_ms:.1} ms to {p99_ms:.1} ms, more than the {:.1} ms bound",
                thresholds.latency_bound_ms
            ));
        }
        let degraded_with_traffic = predicted_degraded
            .iter()
            .any(|&t| during.samples[t].total > 0 && !predicted_down.contains(&t));
        if degraded_with_traffic && failovers <= 0.0 {
            violations.push("the gateway's failover counter did not rise: it did not fail over inside the subset".into());
        }
        let degraded_matches = *measured_degraded == predicted_degraded;
        if !degraded_matches {
            violations.push(format!(
                "the gateway reported {} tenants with a member out, the model predicts {} for the declared failure set",
                measured_degraded.len(),
                predicted_degraded.len()
            ));
        }
        let fully_down_matches = measured_down == predicted_down;
        if !fully_down_matches {
            let extra: Vec<&str> = measured_down
                .difference(&predicted_down)
                .map(|&t| self.tenants[t].tenant.as_str())
                .take(5)
                .collect();
            violations.push(format!(
                "{} tenants were measured fully down, the model predicts {} (first unexpected: {})",
                measured_down.len(),
                predicted_down.len(),
                if extra.is_empty() {
                    "none".to_owned()
                } else {
                    extra.join(", ")
                }
            ));
        }
        Verdict {
            name: name.to_owned(),
            failed: failed.iter().map(|(c, id)| format!("{c}/{id}")).collect(),
            fully_down: measured_down.len(),
            degraded: measured_degraded.len(),
            unaffected: unaffected.len(),
            errors: during.samples.iter().map(TenantSample::errors).sum(),
            unaffected_errors,
            affected_min_success: affected_min,
            baseline_p99_ms,
            p99_ms,
            failovers,
            modeled_fully_down,
            modeled_degraded,
            fully_down_matches,
            degraded_matches,
            violations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::TenantSample;

    fn session(subsets: &[&[&str]]) -> Session {
        Session::over_subsets(subsets, 4)
    }

    fn phase(samples: &[(u64, u64, u32)]) -> Phase {
        Phase {
            samples: samples
                .iter()
                .map(|&(ok, total, micros)| TenantSample {
                    ok,
                    total,
                    latencies_us: vec![micros; total as usize],
                })
                .collect(),
        }
    }

    const THRESHOLDS: Thresholds = Thresholds {
        min_success: 0.999,
        latency_bound_ms: 10.0,
    };

    #[test]
    fn a_clean_single_failure_passes() {
        let session = session(&[&["s0", "s1"], &["s2", "s3"]]);
        let failed = [("c".to_owned(), "s0".to_owned())];
        let baseline = phase(&[(10, 10, 1000), (10, 10, 1000)]);
        let during = phase(&[(10, 10, 1500), (10, 10, 1200)]);
        let verdict = session.evaluate(
            "d",
            &baseline,
            &during,
            &failed,
            &[0].into(),
            10.0,
            THRESHOLDS,
        );
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert_eq!(
            (verdict.degraded, verdict.fully_down, verdict.unaffected),
            (1, 0, 1)
        );
        assert_eq!(
            (verdict.modeled_degraded, verdict.modeled_fully_down),
            (1, 0)
        );
    }

    #[test]
    fn each_property_can_fail() {
        let session = session(&[&["s0", "s1"], &["s2", "s3"], &["s0", "s2"]]);
        let failed = [("c".to_owned(), "s0".to_owned())];
        let baseline = phase(&[(10, 10, 1000), (10, 10, 1000), (10, 10, 1000)]);
        let degraded: BTreeSet<usize> = [0, 2].into();

        // A degraded tenant lost requests.
        let during = phase(&[(9, 10, 1000), (10, 10, 1000), (10, 10, 1000)]);
        let v = session.evaluate("d", &baseline, &during, &failed, &degraded, 5.0, THRESHOLDS);
        assert!(
            v.violations
                .iter()
                .any(|v| v.contains("degraded tenant t0")),
            "{:?}",
            v.violations
        );

        // An unaffected tenant saw an error, and its p99 rose past the bound.
        let during = phase(&[(10, 10, 1000), (9, 10, 30_000), (10, 10, 1000)]);
        let v = session.evaluate("d", &baseline, &during, &failed, &degraded, 5.0, THRESHOLDS);
        assert!(
            v.violations
                .iter()
                .any(|v| v.contains("unaffected tenants saw 1 errors"))
        );
        assert!(v.violations.iter().any(|v| v.contains("p99 latency")));

        // No failover counted although degraded tenants were served.
        let during = phase(&[(10, 10, 1000), (10, 10, 1000), (10, 10, 1000)]);
        let v = session.evaluate("d", &baseline, &during, &failed, &degraded, 0.0, THRESHOLDS);
        assert!(v.violations.iter().any(|v| v.contains("failover counter")));

        // The gateway's view of who is degraded differs from the model's.
        let v = session.evaluate(
            "d",
            &baseline,
            &during,
            &failed,
            &[0].into(),
            5.0,
            THRESHOLDS,
        );
        assert!(!v.degraded_matches);

        // A tenant down that the model says should be up.
        let during = phase(&[(10, 10, 1000), (0, 10, 1000), (10, 10, 1000)]);
        let v = session.evaluate("d", &baseline, &during, &failed, &degraded, 5.0, THRESHOLDS);
        assert!(!v.fully_down_matches);
    }

    #[test]
    fn a_double_failure_predicts_the_tenants_on_both() {
        let session = session(&[&["s0", "s1"], &["s0", "s2"], &["s2", "s3"]]);
        let failed = [
            ("c".to_owned(), "s0".to_owned()),
            ("c".to_owned(), "s1".to_owned()),
        ];
        let (per_tenant, fully_down, degraded) = session.predict(&failed);
        assert_eq!(
            per_tenant,
            vec![(true, true), (false, true), (false, false)]
        );
        assert_eq!((fully_down, degraded), (1, 2));
    }
}
