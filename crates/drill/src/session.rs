//! A drill session: the tenants and their subsets as the gateway reports
//! them, load phases, the analyser's prediction for a failure set, and the
//! verdict on the three properties a drill checks.
//!
//! 1. **Degrade, not drop**: tenants with some but not all members failed
//!    keep a success ratio at or above the threshold.
//! 2. **Unaffected see nothing**: tenants with no failed member see no
//!    errors, and their p99 latency stays within the bound of the baseline.
//! 3. **Failover happened**: the gateway's failover counter rose while
//!    tenants with a surviving member were served.
//!
//! A property the fault did not put to the test (no tenant kept a member,
//! say) is reported as not exercised, never as held. And tenant by tenant
//! the measured sets (fully down, degraded, unaffected) must equal the
//! analyser's prediction for the same failure set: tenants it predicts
//! fully down are expected, any other is a violation.

use std::collections::{BTreeMap, BTreeSet};

use analysis::{BlastModel, Placements};
use serde::Serialize;

use crate::admin::AdminClient;
use crate::credentials::TenantCredential;
use crate::error::DrillError;
use crate::load::{self, LoadShape, TenantSample};
use crate::properties::{Properties, Property, SetCheck, Status};

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
    /// Tenants measured fully down (success under 50 %) beside the model's
    /// (every member failed).
    pub fully_down: SetCheck,
    /// Tenants measured degraded (the gateway reported a member out, and
    /// they were not fully down) beside the model's (some but not all
    /// members failed).
    pub degraded: SetCheck,
    /// The rest, beside the model's (no member failed).
    pub unaffected: SetCheck,
    /// The three properties: held, violated or not exercised.
    pub properties: Properties,
    /// Failed requests of all tenants.
    pub errors: u64,
    /// Failed requests of the tenants the model has fully down (expected).
    pub fully_down_errors: u64,
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
    /// Every violated property and unexpected set, in words. Empty when
    /// the phase passed.
    pub violations: Vec<String>,
}

/// Tenants, subsets and the gateway.
#[derive(Debug)]
pub struct Session {
    gateway: String,
    admin: AdminClient,
    /// The other replicas of a fleet, each its data URL and admin API
    /// (none for one gateway): load is spread over every replica, a fault
    /// is injected through the first, and every replica must report it.
    replicas: Vec<(String, AdminClient)>,
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
            replicas: Vec::new(),
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

    /// Adds the other replicas of a fleet (data URL and admin API each),
    /// after checking that every replica, this one included, shares its
    /// containment and marks through a fleet store: a replica without one
    /// would keep a fault injected through another to itself, and the
    /// drill would test nothing. The error names the replica.
    pub async fn with_replicas(
        mut self,
        replicas: Vec<(String, AdminClient)>,
    ) -> Result<Self, DrillError> {
        if replicas.is_empty() {
            return Ok(self);
        }
        let every = std::iter::once((self.gateway.as_str(), &self.admin)).chain(
            replicas
                .iter()
                .map(|(gateway, admin)| (gateway.as_str(), admin)),
        );
        for (gateway, admin) in every {
            match admin.fleet().await? {
                Some(true) => {}
                Some(false) => {
                    return Err(DrillError::Precondition(format!(
                        "replica {gateway} (admin {}) cannot reach its fleet store: a fault injected through another replica would not reach it; fix the store first (GET /admin/fleet)",
                        admin.base()
                    )));
                }
                None => {
                    return Err(DrillError::NotOneFleet(format!(
                        "replica {gateway} (admin {}) runs without [fleet]: an operator's mark and poison containment would be its own; set [fleet] store on every replica, or drill one gateway",
                        admin.base()
                    )));
                }
            }
        }
        self.replicas = replicas;
        Ok(self)
    }

    /// The admin client (of the first replica: faults go through it).
    pub fn admin(&self) -> &AdminClient {
        &self.admin
    }

    /// Every replica's data URL, the first first.
    pub fn gateways(&self) -> Vec<String> {
        std::iter::once(self.gateway.clone())
            .chain(self.replicas.iter().map(|(gateway, _)| gateway.clone()))
            .collect()
    }

    /// Every replica's admin API, the first first.
    pub fn admins(&self) -> impl Iterator<Item = &AdminClient> {
        std::iter::once(&self.admin).chain(self.replicas.iter().map(|(_, admin)| admin))
    }

    /// Waits until every replica reports each of `out` out of rotation and
    /// none of `back` (an operator's mark reaches a fleet's replicas within
    /// `fleet.sync_ms`), or `within` passes; whether they all agreed.
    pub async fn await_everywhere(
        &self,
        out: &[ShardRef],
        back: &[ShardRef],
        within: std::time::Duration,
    ) -> Result<bool, DrillError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let mut agreed = true;
            for admin in self.admins() {
                let shards = admin.shards().await?;
                let is_out = |(cell, id): &ShardRef| {
                    shards
                        .iter()
                        .any(|s| &s.cell == cell && &s.id == id && s.health != "up")
                };
                agreed &= out.iter().all(is_out) && !back.iter().any(is_out);
            }
            if agreed {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The sum of every replica's `shuffle_failovers_total`.
    pub async fn failovers(&self) -> Result<f64, DrillError> {
        let mut total = 0.0;
        for admin in self.admins() {
            total += admin.failovers().await?;
        }
        Ok(total)
    }

    /// Number of tenants.
    pub fn tenants(&self) -> usize {
        self.tenants.len()
    }

    /// Drives one phase of load.
    pub async fn measure(&self) -> Phase {
        Phase {
            samples: load::drive(&self.gateways(), &self.tenants, self.shape).await,
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
        let mut samples = load::drive(&self.gateways(), &others, self.shape).await;
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

    /// Every tenant's credential, in session order.
    pub fn credentials(&self) -> &[TenantCredential] {
        &self.tenants
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

    /// The shards the gateway reports out of rotation now; with several
    /// replicas, those every replica reports out.
    pub async fn out_of_rotation(&self) -> Result<Vec<ShardRef>, DrillError> {
        let mut each = self.out_of_rotation_each().await?.into_iter();
        let first = each.next().unwrap_or_default();
        Ok(each.fold(first, |out, here| {
            out.into_iter().filter(|s| here.contains(s)).collect()
        }))
    }

    /// The shards each replica reports out of rotation now, the first
    /// replica's first.
    pub async fn out_of_rotation_each(&self) -> Result<Vec<Vec<ShardRef>>, DrillError> {
        let mut each = Vec::new();
        for admin in self.admins() {
            each.push(
                admin
                    .shards()
                    .await?
                    .into_iter()
                    .filter(|shard| shard.health != "up")
                    .map(|shard| (shard.cell, shard.id))
                    .collect(),
            );
        }
        Ok(each)
    }

    /// The analyser's prediction: per tenant (every member failed, some
    /// member failed), and the model's counts of the same (the second, as
    /// `blast` counts "degraded", includes the first).
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

    /// Checks the three properties for a fault phase against the baseline,
    /// and the measured sets against the model's.
    ///
    /// `failed` is the declared failure set (what the analyser predicts
    /// for); `measured_out` is the tenants the gateway reported with a
    /// member out during the phase (see
    /// [`measured_degraded`](Self::measured_degraded)).
    #[allow(clippy::too_many_arguments)]
    pub fn evaluate(
        &self,
        name: &str,
        baseline: &Phase,
        during: &Phase,
        failed: &[ShardRef],
        measured_out: &BTreeSet<usize>,
        failovers: f64,
        thresholds: Thresholds,
    ) -> Verdict {
        let (predicted, modeled_fully_down, modeled_out) = self.predict(failed);
        let all = 0..self.tenants.len();
        let tenant = |t: usize| self.tenants[t].tenant.clone();

        // Three disjoint sets each way: fully down, degraded (some members
        // out, served by the rest), unaffected.
        let measured_down: BTreeSet<usize> = all
            .clone()
            .filter(|&t| during.samples[t].ratio() < DOWN_BELOW)
            .collect();
        let measured_degraded: BTreeSet<usize> =
            measured_out.difference(&measured_down).copied().collect();
        let measured_unaffected: BTreeSet<usize> = all
            .clone()
            .filter(|t| !measured_down.contains(t) && !measured_degraded.contains(t))
            .collect();
        let predicted_down: BTreeSet<usize> = all.clone().filter(|&t| predicted[t].0).collect();
        let predicted_degraded: BTreeSet<usize> = all
            .clone()
            .filter(|&t| predicted[t].1 && !predicted[t].0)
            .collect();
        let predicted_unaffected: BTreeSet<usize> =
            all.clone().filter(|&t| !predicted[t].1).collect();
        let tenants = self.tenants.len() as u64;
        let fully_down =
            SetCheck::compare(&measured_down, &predicted_down, modeled_fully_down, tenant);
        let degraded = SetCheck::compare(
            &measured_degraded,
            &predicted_degraded,
            modeled_out.saturating_sub(modeled_fully_down),
            tenant,
        );
        let unaffected = SetCheck::compare(
            &measured_unaffected,
            &predicted_unaffected,
            tenants.saturating_sub(modeled_out),
            tenant,
        );

        let judgement = judge(
            tenant,
            (baseline, during),
            (&predicted_degraded, &predicted_unaffected),
            failovers,
            thresholds,
        );
        let mut violations = judgement.violations;
        violations.extend(fully_down.violation("measured fully down"));
        violations.extend(
            degraded.violation("degraded (the gateway reported a member out and they were served)"),
        );
        Verdict {
            name: name.to_owned(),
            failed: failed.iter().map(|(c, id)| format!("{c}/{id}")).collect(),
            errors: during.samples.iter().map(TenantSample::errors).sum(),
            fully_down_errors: predicted_down
                .iter()
                .map(|&t| during.samples[t].errors())
                .sum(),
            unaffected_errors: judgement.unaffected_errors,
            affected_min_success: judgement.affected_min,
            baseline_p99_ms: judgement.p99_ms.0,
            p99_ms: judgement.p99_ms.1,
            failovers,
            fully_down,
            degraded,
            unaffected,
            properties: judgement.properties,
            violations,
        }
    }
}

/// The properties of one fault phase and the figures behind them: what
/// both drills judge the same way.
pub(crate) struct Judgement {
    /// The three properties.
    pub properties: Properties,
    /// The lowest success ratio among the degraded tenants served.
    pub affected_min: Option<f64>,
    /// Failed requests of the unaffected tenants.
    pub unaffected_errors: u64,
    /// p99 latency of the unaffected tenants before and during, ms.
    pub p99_ms: (f64, f64),
    /// The violated properties, in words.
    pub violations: Vec<String>,
}

/// Judges the three properties on the tenants the model has degraded
/// (some but not all members out) and unaffected (none out), named by
/// `name`, from the phase's load against the baseline's and the rise of
/// the failover counter.
pub(crate) fn judge(
    name: impl Fn(usize) -> String,
    (baseline, during): (&Phase, &Phase),
    (degraded, unaffected): (&BTreeSet<usize>, &BTreeSet<usize>),
    failovers: f64,
    thresholds: Thresholds,
) -> Judgement {
    let served = |set: &BTreeSet<usize>| -> Vec<usize> {
        set.iter()
            .copied()
            .filter(|&t| during.samples[t].total > 0)
            .collect()
    };
    let (affected, quiet) = (served(degraded), served(unaffected));
    let mut violations = Vec::new();

    // 1. Tenants the model has degraded keep being served.
    let ratios = affected.iter().map(|&t| (t, during.samples[t].ratio()));
    let affected_min = ratios.clone().map(|(_, r)| r).reduce(f64::min);
    let dropped: Vec<(usize, f64)> = ratios
        .filter(|&(_, r)| r < thresholds.min_success)
        .collect();
    let degrade_not_drop = match affected_min {
        None => Property::not_exercised(
            "no tenant had some but not all of its members out, so none could degrade",
        ),
        Some(lowest) => Property::tested(
            dropped.is_empty(),
            format!(
                "{} tenants with some members out; lowest success {:.2}%, at least {:.2}% required",
                affected.len(),
                lowest * 100.0,
                thresholds.min_success * 100.0
            ),
        ),
    };
    if let Some(&(worst, ratio)) = dropped.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
        violations.push(format!(
            "{} of {} degraded tenants were served under {:.2}% of their requests (worst: {} at {:.2}%): they dropped rather than degraded",
            dropped.len(),
            affected.len(),
            thresholds.min_success * 100.0,
            name(worst),
            ratio * 100.0
        ));
    }

    // 2. Tenants the model leaves alone feel nothing.
    let unaffected_errors: u64 = quiet.iter().map(|&t| during.samples[t].errors()).sum();
    let p99 = |phase: &Phase| {
        let mut all: Vec<u32> = quiet
            .iter()
            .filter_map(|&t| phase.samples.get(t))
            .flat_map(|sample| sample.latencies_us.iter().copied())
            .collect();
        load::quantile_ms(&mut all, 0.99)
    };
    let (before, now) = (p99(baseline), p99(during));
    let slower = now > before + thresholds.latency_bound_ms;
    let unaffected_see_nothing = if quiet.is_empty() {
        Property::not_exercised("every tenant had a member out, so none was unaffected")
    } else {
        Property::tested(
            unaffected_errors == 0 && !slower,
            format!(
                "{} tenants with no member out; {unaffected_errors} errors; p99 {now:.2} ms against {before:.2} ms before, bound +{:.1} ms",
                quiet.len(),
                thresholds.latency_bound_ms
            ),
        )
    };
    if unaffected_errors > 0 {
        let first: Vec<String> = quiet
            .iter()
            .filter(|&&t| during.samples[t].errors() > 0)
            .take(5)
            .map(|&t| name(t))
            .collect();
        violations.push(format!(
            "unaffected tenants saw {unaffected_errors} errors; they should see none (first: {})",
            first.join(", ")
        ));
    }
    if slower {
        violations.push(format!(
            "unaffected tenants' p99 latency rose from {before:.1} ms to {now:.1} ms, more than the {:.1} ms bound",
            thresholds.latency_bound_ms
        ));
    }

    // 3. Wherever the model leaves a tenant a member, the gateway must have
    // failed over to it.
    let failover_happened = if affected.is_empty() {
        Property::not_exercised(
            "no tenant kept a member in rotation, so there was nothing to fail over to",
        )
    } else {
        Property::tested(
            failovers > 0.0,
            format!(
                "the failover counter rose by {failovers} while {} tenants with a surviving member were served",
                affected.len()
            ),
        )
    };
    if failover_happened.status == Status::Violated {
        violations.push(format!(
            "the gateway's failover counter did not rise although {} tenants had a surviving member: it did not fail over inside the subset",
            affected.len()
        ));
    }
    Judgement {
        properties: Properties {
            degrade_not_drop,
            unaffected_see_nothing,
            failover_happened,
        },
        affected_min,
        unaffected_errors,
        p99_ms: (before, now),
        violations,
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

    fn shards(ids: &[&str]) -> Vec<ShardRef> {
        ids.iter()
            .map(|id| ("c".to_owned(), (*id).to_owned()))
            .collect()
    }

    fn statuses(verdict: &Verdict) -> [Status; 3] {
        verdict.properties.named().map(|(_, p)| p.status)
    }

    const THRESHOLDS: Thresholds = Thresholds {
        min_success: 0.999,
        latency_bound_ms: 10.0,
    };

    /// The verdict on `during` against `baseline`, for the shards `failed`
    /// with the tenants `out` reported with a member out.
    fn judged(
        session: &Session,
        baseline: &Phase,
        during: &Phase,
        failed: &[ShardRef],
        out: &BTreeSet<usize>,
        failovers: f64,
    ) -> Verdict {
        session.evaluate("d", baseline, during, failed, out, failovers, THRESHOLDS)
    }

    #[test]
    fn a_clean_single_failure_passes() {
        let session = session(&[&["s0", "s1"], &["s2", "s3"]]);
        let baseline = phase(&[(10, 10, 1000), (10, 10, 1000)]);
        let during = phase(&[(10, 10, 1500), (10, 10, 1200)]);
        let verdict = judged(
            &session,
            &baseline,
            &during,
            &shards(&["s0"]),
            &[0].into(),
            10.0,
        );
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        let sets = [&verdict.fully_down, &verdict.degraded, &verdict.unaffected];
        assert_eq!(
            sets.map(|s| (s.measured, s.modeled)),
            [(0, 0), (1, 1), (1, 1)]
        );
        assert!(sets.iter().all(|s| s.matches));
        assert_eq!(statuses(&verdict), [Status::Held; 3]);
    }

    #[test]
    fn each_property_can_fail() {
        let session = session(&[&["s0", "s1"], &["s2", "s3"], &["s0", "s2"]]);
        let failed = shards(&["s0"]);
        let baseline = phase(&[(10, 10, 1000), (10, 10, 1000), (10, 10, 1000)]);
        let degraded: BTreeSet<usize> = [0, 2].into();

        // A degraded tenant lost requests.
        let during = phase(&[(9, 10, 1000), (10, 10, 1000), (10, 10, 1000)]);
        let v = judged(&session, &baseline, &during, &failed, &degraded, 5.0);
        assert!(
            v.violations
                .iter()
                .any(|v| v.contains("1 of 2 degraded tenants") && v.contains("t0 at 90.00%")),
            "{:?}",
            v.violations
        );
        assert_eq!(statuses(&v), [Status::Violated, Status::Held, Status::Held]);

        // An unaffected tenant saw an error, and nothing else went wrong.
        let during = phase(&[(10, 10, 1000), (9, 10, 1000), (10, 10, 1000)]);
        let v = judged(&session, &baseline, &during, &failed, &degraded, 5.0);
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert_eq!(statuses(&v), [Status::Held, Status::Violated, Status::Held]);

        // An unaffected tenant saw an error, and its p99 rose past the bound.
        let during = phase(&[(10, 10, 1000), (9, 10, 30_000), (10, 10, 1000)]);
        let v = judged(&session, &baseline, &during, &failed, &degraded, 5.0);
        assert!(
            v.violations
                .iter()
                .any(|v| v.contains("unaffected tenants saw 1 errors") && v.contains("first: t1"))
        );
        assert!(v.violations.iter().any(|v| v.contains("p99 latency")));
        assert_eq!(statuses(&v), [Status::Held, Status::Violated, Status::Held]);
        // Only slower, no errors: still violated.
        let during = phase(&[(10, 10, 1000), (10, 10, 30_000), (10, 10, 1000)]);
        let v = judged(&session, &baseline, &during, &failed, &degraded, 5.0);
        assert_eq!(v.properties.unaffected_see_nothing.status, Status::Violated);

        // No failover counted although degraded tenants were served.
        let during = phase(&[(10, 10, 1000), (10, 10, 1000), (10, 10, 1000)]);
        let v = judged(&session, &baseline, &during, &failed, &degraded, 0.0);
        assert!(v.violations.iter().any(|v| v.contains("failover counter")));
        assert_eq!(statuses(&v), [Status::Held, Status::Held, Status::Violated]);

        // The gateway's view of who is degraded differs from the model's.
        let v = judged(&session, &baseline, &during, &failed, &[0].into(), 5.0);
        assert!(!v.degraded.matches);
        assert_eq!(v.degraded.missing, ["t2"]);
        assert!(!v.unaffected.matches);
        assert!(!v.violations.is_empty());

        // A tenant down that the model says should be up.
        let during = phase(&[(10, 10, 1000), (0, 10, 1000), (10, 10, 1000)]);
        let v = judged(&session, &baseline, &during, &failed, &degraded, 5.0);
        assert!(!v.fully_down.matches);
        assert_eq!(v.fully_down.unexpected, ["t1"]);
    }

    /// The false pass: three of six shards failed with k = 2 (a
    /// tenant on every pair) fully downs the three tenants on pairs inside
    /// the failure set. That is what the model predicts, so it passes, but
    /// only while the measured tenants are exactly those.
    #[test]
    fn predicted_fully_down_tenants_pass_only_when_measured_equals_the_model() {
        let pairs: Vec<[String; 2]> = (0..6)
            .flat_map(|a| ((a + 1)..6).map(move |b| [format!("s{a}"), format!("s{b}")]))
            .collect();
        let refs: Vec<[&str; 2]> = pairs
            .iter()
            .map(|[a, b]| [a.as_str(), b.as_str()])
            .collect();
        let subsets: Vec<&[&str]> = refs.iter().map(|p| p.as_slice()).collect();
        let session = Session::over_subsets(&subsets, 6);
        let failed = shards(&["s0", "s1", "s2"]);
        let (per_tenant, _, _) = session.predict(&failed);
        let down: Vec<usize> = (0..15).filter(|&t| per_tenant[t].0).collect();
        let out: BTreeSet<usize> = (0..15).filter(|&t| per_tenant[t].1).collect();
        assert_eq!(down.len(), 3);
        let baseline = phase(&[(5, 5, 1000); 15]);
        let during_with = |down: &[usize]| {
            let samples: Vec<(u64, u64, u32)> = (0..15)
                .map(|t| {
                    if down.contains(&t) {
                        (0, 5, 1000)
                    } else {
                        (5, 5, 1000)
                    }
                })
                .collect();
            phase(&samples)
        };
        let v = judged(&session, &baseline, &during_with(&down), &failed, &out, 9.0);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!((v.fully_down.measured, v.fully_down.modeled), (3, 3));
        assert_eq!((v.degraded.measured, v.degraded.modeled), (9, 9));
        assert_eq!((v.unaffected.measured, v.unaffected.modeled), (3, 3));
        assert_eq!(v.fully_down_errors, 15);
        assert_eq!(v.errors, 15);
        assert_eq!(statuses(&v), [Status::Held; 3]);

        // One more tenant down than modeled: a degraded one dropped.
        let more = [
            down.clone(),
            vec![*out.iter().find(|t| !down.contains(t)).unwrap()],
        ]
        .concat();
        let v = judged(&session, &baseline, &during_with(&more), &failed, &out, 9.0);
        assert!(
            v.violations
                .iter()
                .any(|v| v.starts_with("4 tenants were measured fully down, the model predicts 3")),
            "{:?}",
            v.violations
        );
        assert_eq!(v.properties.degrade_not_drop.status, Status::Violated);

        // One fewer: a tenant the model has fully down was served.
        let v = judged(
            &session,
            &baseline,
            &during_with(&down[1..]),
            &failed,
            &out,
            9.0,
        );
        assert!(!v.fully_down.matches);
        assert_eq!(v.fully_down.missing.len(), 1);
    }

    #[test]
    fn a_fault_that_tests_nothing_says_so() {
        // Only the tenant on both failed shards is touched: nobody could
        // degrade or fail over, so those properties were not exercised.
        let session = session(&[&["s0", "s1"], &["s2", "s3"]]);
        let baseline = phase(&[(10, 10, 1000), (10, 10, 1000)]);
        let during = phase(&[(0, 10, 1000), (10, 10, 1000)]);
        let v = judged(
            &session,
            &baseline,
            &during,
            &shards(&["s0", "s1"]),
            &[0].into(),
            0.0,
        );
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(
            statuses(&v),
            [Status::NotExercised, Status::Held, Status::NotExercised]
        );
        // Every tenant touched: nobody was unaffected.
        let during = phase(&[(0, 10, 1000), (0, 10, 1000)]);
        let v = judged(
            &session,
            &baseline,
            &during,
            &shards(&["s0", "s2"]),
            &[0, 1].into(),
            3.0,
        );
        assert_eq!(
            v.properties.unaffected_see_nothing.status,
            Status::NotExercised
        );
        assert_eq!(v.properties.degrade_not_drop.status, Status::Violated);
    }

    #[test]
    fn a_double_failure_predicts_the_tenants_on_both() {
        let session = session(&[&["s0", "s1"], &["s0", "s2"], &["s2", "s3"]]);
        let (per_tenant, fully_down, degraded) = session.predict(&shards(&["s0", "s1"]));
        assert_eq!(
            per_tenant,
            vec![(true, true), (false, true), (false, false)]
        );
        assert_eq!((fully_down, degraded), (1, 2));
    }
}
