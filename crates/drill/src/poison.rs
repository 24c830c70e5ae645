//! The poison drill: one tenant sends requests that crash the test shards
//! serving them (`shuffle-shard backend --mode crash-on-poison`) while every
//! other tenant runs its normal load; then the drill reports which shards
//! went down, which tenants were fully down or degraded, and whether that
//! matches the analyser's poison model (`blast --poison`) for the same
//! placement.
//!
//! Which shards crashed is read from the shards' control APIs (their crash
//! counters, exact) when the drill is given them, and otherwise from what
//! the gateway's admin API reported out of rotation during the phase (which
//! misses a crash shorter than the gateway's health checks take to notice).
//!
//! Without containment in the gateway every member of the poison tenant's
//! subset may crash: the model compared with is then the uncontained one.
//! With `poison_after` set (the gateway's `routing.poison_after`) the drill
//! checks the contained promise instead: at most that many members crashed,
//! and no more tenants went down than the model's worst case.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use analysis::{BlastModel, Placements};
use serde::Serialize;

use crate::control::ShardControl;
use crate::error::DrillError;
use crate::load;
use crate::preconditions::{self, Baseline};
use crate::properties::{Properties, SetCheck};
use crate::run::{PhaseSummary, seconds, summaries, wait_for};
use crate::session::{Phase, Session, ShardRef, Thresholds, judge};

/// A success ratio under which a tenant counts as fully down in a phase
/// (as in the other drills).
const DOWN_BELOW: f64 = 0.5;

/// How often the admin API is polled for shards out of rotation.
const POLL: Duration = Duration::from_millis(50);

/// What the poison drill does.
#[derive(Debug, Clone)]
pub struct PoisonPlan {
    /// The poison tenant (in the drill's tenants file).
    pub tenant: String,
    /// Poison requests to send; `None`: one per member of its subset, so
    /// that a gateway which gives up on a poison request after one crash
    /// still meets every member.
    pub requests: Option<usize>,
    /// Control APIs of the shards, to read their crash counters; empty:
    /// the gateway's admin API is the only witness.
    pub controls: Vec<ShardControl>,
    /// The gateway's containment to check against (`routing.poison_after`);
    /// `None`: the uncontained model.
    pub poison_after: Option<usize>,
    /// How long to wait for crashed shards to come back before the last
    /// phase.
    pub recovery: Duration,
}

/// The model's figures for the poison tenant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoisonModel {
    /// The shards the model crashes (`cell/id`): the whole subset, or the
    /// worst choice with containment (empty when that is a bound).
    pub crashed: Vec<String>,
    /// Tenants fully down, the poison tenant excluded.
    pub others_fully_down: u64,
    /// Other tenants degraded (a crashed member, not fully down), the
    /// poison tenant excluded like from `others_fully_down`.
    pub degraded: u64,
    /// Whether the figures are exact rather than upper bounds.
    pub exact: bool,
}

/// The model three ways: what the drill compares its measurements with.
#[derive(Debug, Clone, Serialize)]
pub struct PoisonModels {
    /// Uncontained: the poison tenant's whole subset crashed.
    pub uncontained: PoisonModel,
    /// The contained worst case, with `poison_after` (when checked).
    pub contained: Option<PoisonModel>,
    /// Evaluated on the shards that actually crashed.
    pub for_crashed: PoisonModel,
}

/// What the poison drill found.
#[derive(Debug, Clone, Serialize)]
pub struct PoisonVerdict {
    /// The poison tenant.
    pub tenant: String,
    /// Its subset (`cell/id`, sorted).
    pub subset: Vec<String>,
    /// Poison requests sent.
    pub poison_requests: usize,
    /// The statuses the gateway answered to them (none: no answer).
    pub poison_statuses: Vec<Option<u16>>,
    /// The shards measured down (`cell/id`).
    pub crashed: Vec<String>,
    /// Where `crashed` comes from: `control API` or `gateway admin API`.
    pub crashed_source: String,
    /// The shards the gateway reported out of rotation at some poll during
    /// the phase (`cell/id`).
    pub gateway_saw_out: Vec<String>,
    /// Other tenants measured fully down (success under 50 %) beside the
    /// model's for the shards that crashed (every member crashed).
    pub fully_down: SetCheck,
    /// Other tenants with a member among the crashed shards that were not
    /// measured fully down, beside the model's (some but not all members
    /// crashed). It follows from `crashed` and the subsets the gateway
    /// reports; the load check on them is property 1.
    pub degraded: SetCheck,
    /// Other tenants with no crashed member and not fully down, beside the
    /// model's.
    pub unaffected: SetCheck,
    /// The three properties: held, violated or not exercised.
    pub properties: Properties,
    /// Failed requests of unaffected tenants (must be 0).
    pub unaffected_errors: u64,
    /// The lowest success ratio among degraded tenants.
    pub degraded_min_success: Option<f64>,
    /// How much the gateway's failover counter rose during the phase.
    pub failovers: f64,
    /// The containment checked (`--poison-after`), if any.
    pub poison_after: Option<usize>,
    /// What the model predicts, to compare with what was measured.
    pub models: PoisonModels,
    /// Measured crashed shards equal the compared model's (uncontained:
    /// the whole subset; contained: at most `poison_after` of it).
    pub crashed_matches: bool,
    /// Every violated property, in words. Empty when the drill passed.
    pub violations: Vec<String>,
}

/// The poison drill's whole report.
#[derive(Debug, Clone, Serialize)]
pub struct PoisonReport {
    /// Tenants driven (the poison tenant included).
    pub tenants: usize,
    /// The healthy baseline the drill started from.
    pub baseline: Baseline,
    /// Load per phase (`before`, `during`, `after`), the poison tenant's
    /// requests not included.
    pub phases: Vec<PhaseSummary>,
    /// The verdict.
    pub verdict: PoisonVerdict,
    /// Seconds from the end of the poison phase until the gateway reported
    /// every crashed shard back in rotation; `None`: not within the wait.
    pub back_after_s: Option<f64>,
    /// Every reason the drill failed: the verdict's violations, a recovery
    /// never seen, errors after the recovery.
    pub violations: Vec<String>,
    /// Whether every exercised property held, the measured sets equal the
    /// model's, and the crashed shards came back.
    pub passed: bool,
}

/// Runs the poison drill, telling the operator through `say` what
/// happens.
pub async fn run(
    session: &Session,
    plan: &PoisonPlan,
    thresholds: Thresholds,
    say: &dyn Fn(&str),
) -> Result<PoisonReport, DrillError> {
    let poison = session.position(&plan.tenant).ok_or_else(|| {
        DrillError::Input(format!(
            "--poison {:?}: the tenant is not in --tenants-file; the drill needs its API key to send as it",
            plan.tenant
        ))
    })?;
    let (cell, subset) = session.subsets()[poison].clone();
    let (before, baseline) = preconditions::check(session, &[], Some(poison)).await?;
    say(&baseline.describe());
    let counts_before = crash_counts(&plan.controls).await?;

    // Watch the gateway's view for the whole phase, from before the first
    // poison request to the end of the load.
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (admin, watching) = (session.admin().clone(), Arc::clone(&watching));
        tokio::spawn(async move {
            let mut seen: BTreeSet<ShardRef> = BTreeSet::new();
            while watching.load(Ordering::Relaxed) {
                if let Ok(shards) = admin.shards().await {
                    seen.extend(
                        shards
                            .into_iter()
                            .filter(|shard| shard.health != "up")
                            .map(|shard| (shard.cell, shard.id)),
                    );
                }
                tokio::time::sleep(POLL).await;
            }
            seen
        })
    };
    let sent = plan.requests.unwrap_or(subset.len()).max(1);
    say(&format!(
        "Sending {sent} poison requests as {} (subset {}), then the other tenants' load.",
        plan.tenant,
        subset.join(", ")
    ));
    let failovers_before = session.failovers().await?;
    let mut statuses = Vec::with_capacity(sent);
    // Through every replica in turn: with a fleet, what one replica learns
    // of the tenant must hold it on the others.
    let gateways = session.gateways();
    for at in 0..sent {
        let status = load::poison(
            &gateways[at % gateways.len()],
            session.credential(poison),
            session.shape().timeout,
        )
        .await;
        statuses.push(status);
    }
    let during = session.measure_without(poison).await;
    let failovers = session.failovers().await? - failovers_before;
    watching.store(false, Ordering::Relaxed);
    let gateway_saw_out = watcher
        .await
        .map_err(|e| DrillError::Gateway(e.to_string()))?;
    let counts_after = crash_counts(&plan.controls).await?;

    let (crashed, crashed_source): (BTreeSet<ShardRef>, &str) = if plan.controls.is_empty() {
        (gateway_saw_out.clone(), "gateway admin API")
    } else {
        let mut crashed = BTreeSet::new();
        for ((control, before), after) in
            plan.controls.iter().zip(&counts_before).zip(&counts_after)
        {
            if after > before {
                crashed.insert(shard_ref(session, control.id())?);
            }
        }
        (crashed, "control API")
    };

    // The crashed shards must be back before the last phase.
    let wait = plan.recovery.as_secs();
    say(&format!(
        "Waiting up to {wait} s for the gateway to report the crashed shards back in rotation."
    ));
    let back = wait_for(session, plan.recovery, |out| {
        !out.iter().any(|shard| crashed.contains(shard))
    })
    .await?;
    let mut late = Vec::new();
    if back.is_none() {
        late.push(format!(
            "the crashed shards were not back in rotation within {wait} s, so the after phase ran without them; \
             check the shards and their health checks, or raise --wait-seconds"
        ));
    }
    let after = session.measure_without(poison).await;
    let after_errors: u64 = after.samples.iter().map(|s| s.errors()).sum();
    if back.is_some() && after_errors > 0 {
        late.push(format!(
            "the after phase had {after_errors} errors with every crashed shard back in rotation; it should have none"
        ));
    }

    let verdict = evaluate(
        session,
        poison,
        (&cell, &subset),
        &before,
        &during,
        Witness {
            crashed: &crashed,
            source: crashed_source,
            gateway_saw_out: &gateway_saw_out,
            statuses,
            failovers,
        },
        plan.poison_after,
        thresholds,
    );
    let violations: Vec<String> = verdict.violations.iter().cloned().chain(late).collect();
    Ok(PoisonReport {
        tenants: session.tenants(),
        baseline,
        phases: summaries(&before, &during, &after),
        verdict,
        back_after_s: back.map(seconds),
        passed: violations.is_empty(),
        violations,
    })
}

/// What the phase showed of the shards.
pub struct Witness<'a> {
    /// The shards measured down.
    pub crashed: &'a BTreeSet<ShardRef>,
    /// Where that came from.
    pub source: &'a str,
    /// What the gateway reported out at some poll.
    pub gateway_saw_out: &'a BTreeSet<ShardRef>,
    /// The poison requests' answers.
    pub statuses: Vec<Option<u16>>,
    /// How much the gateway's failover counter rose during the phase.
    pub failovers: f64,
}

/// Every control's crash counter, in order.
async fn crash_counts(controls: &[ShardControl]) -> Result<Vec<u64>, DrillError> {
    let mut counts = Vec::with_capacity(controls.len());
    for control in controls {
        counts.push(control.crashes().await?);
    }
    Ok(counts)
}

/// A shard id as `(cell, id)`, from the session's cells.
fn shard_ref(session: &Session, id: &str) -> Result<ShardRef, DrillError> {
    let cells: Vec<&String> = session
        .cells()
        .iter()
        .filter(|(_, ids)| ids.iter().any(|x| x == id))
        .map(|(cell, _)| cell)
        .collect();
    match cells.as_slice() {
        [cell] => Ok(((*cell).clone(), id.to_owned())),
        [] => Err(DrillError::Input(format!(
            "--poison-control names shard {id:?}, which the gateway does not have"
        ))),
        _ => Err(DrillError::Input(format!(
            "--poison-control names shard {id:?}, which is in several cells"
        ))),
    }
}

/// The analyser's poison model over the poison tenant's cell, for a set of
/// crashed shards given as ids of that cell (`None`: the poison tenant's
/// whole subset, with `poison_after` as containment).
fn model(
    session: &Session,
    poison: usize,
    cell: &str,
    crashed: &[String],
    poison_after: Option<usize>,
) -> PoisonModel {
    let empty = PoisonModel {
        crashed: Vec::new(),
        others_fully_down: 0,
        degraded: 0,
        exact: true,
    };
    let Some(ids) = session.cells().get(cell) else {
        return empty;
    };
    let index = |id: &String| ids.iter().position(|x| x == id).map(|i| i as u32);
    let in_cell: Vec<usize> = (0..session.tenants())
        .filter(|&t| session.subsets()[t].0 == cell)
        .collect();
    let subsets: Vec<Vec<u32>> = in_cell
        .iter()
        .map(|&t| session.subsets()[t].1.iter().filter_map(index).collect())
        .collect();
    let crashed: Vec<u32> = crashed.iter().filter_map(index).collect();
    if crashed.is_empty() {
        return empty;
    }
    // The same code `shuffle-shard blast --poison` runs.
    let Ok(blast) = BlastModel::new(&Placements::from_subsets(ids.len(), &subsets)) else {
        return empty;
    };
    let Ok(figure) = blast.poison(&crashed, poison_after) else {
        return empty;
    };
    // The poison tenant sends no normal load, so it is counted apart.
    let own: Vec<u32> = session.subsets()[poison]
        .1
        .iter()
        .filter_map(index)
        .collect();
    let own_crashed = own
        .iter()
        .filter(|member| figure.crashed.contains(member))
        .count();
    let counted = session.subsets()[poison].0 == cell && figure.exact && own_crashed > 0;
    let itself = u64::from(counted && own_crashed == own.len());
    let itself_degraded = u64::from(counted && own_crashed < own.len());
    PoisonModel {
        crashed: figure
            .crashed
            .iter()
            .map(|&i| format!("{cell}/{}", ids[i as usize]))
            .collect(),
        others_fully_down: figure.fully_down - itself,
        degraded: figure.degraded - itself_degraded,
        exact: figure.exact,
    }
}

/// Checks the phase against the model and the drill's properties.
#[allow(clippy::too_many_arguments)]
pub fn evaluate(
    session: &Session,
    poison: usize,
    (cell, subset): (&str, &[String]),
    baseline: &Phase,
    during: &Phase,
    witness: Witness<'_>,
    poison_after: Option<usize>,
    thresholds: Thresholds,
) -> PoisonVerdict {
    let contained = poison_after.filter(|&a| a > 0);
    let crashed_ids: Vec<String> = witness
        .crashed
        .iter()
        .filter(|(c, _)| c == cell)
        .map(|(_, id)| id.clone())
        .collect();
    let uncontained = model(session, poison, cell, subset, None);
    let contained_model = contained.map(|a| model(session, poison, cell, subset, Some(a)));
    let model_for_crashed = model(session, poison, cell, &crashed_ids, None);

    let (mut violations, crashed_matches) = crash_violations(
        session,
        poison,
        (cell, subset),
        &witness,
        contained,
        &crashed_ids,
    );

    // Tenant by tenant, against the crashed shards as measured.
    let sets = TenantSets::new(session, poison, witness.crashed, during);
    let tenant = |t: usize| session.credential(t).tenant.clone();
    let for_crashed = &model_for_crashed;
    let fully_down = SetCheck::compare(
        &sets.measured_down,
        &sets.predicted_down,
        for_crashed.others_fully_down,
        tenant,
    );
    let degraded = SetCheck::compare(
        &sets.measured_degraded,
        &sets.predicted_degraded,
        for_crashed.degraded,
        tenant,
    );
    let unaffected = SetCheck::compare(
        &sets.measured_unaffected,
        &sets.predicted_unaffected,
        (sets.others as u64).saturating_sub(for_crashed.others_fully_down + for_crashed.degraded),
        tenant,
    );

    let judgement = judge(
        tenant,
        (baseline, during),
        (&sets.predicted_degraded, &sets.predicted_unaffected),
        witness.failovers,
        thresholds,
    );
    violations.extend(judgement.violations);
    violations.extend(fully_down.violation("measured fully down"));
    if let Some(bound) = &contained_model
        && sets.measured_down.len() as u64 > bound.others_fully_down
    {
        violations.push(format!(
            "{} tenants went fully down, more than the contained worst case of {}",
            sets.measured_down.len(),
            bound.others_fully_down
        ));
    }
    PoisonVerdict {
        tenant: session.credential(poison).tenant.clone(),
        subset: {
            // Sorted like `crashed`, so the two compare as lists.
            let mut names: Vec<String> = subset.iter().map(|id| format!("{cell}/{id}")).collect();
            names.sort();
            names
        },
        poison_requests: witness.statuses.len(),
        poison_statuses: witness.statuses,
        crashed: witness.crashed.iter().map(shard_name).collect(),
        crashed_source: witness.source.to_owned(),
        gateway_saw_out: witness.gateway_saw_out.iter().map(shard_name).collect(),
        fully_down,
        degraded,
        unaffected,
        properties: judgement.properties,
        unaffected_errors: judgement.unaffected_errors,
        degraded_min_success: judgement.affected_min,
        failovers: witness.failovers,
        poison_after,
        models: PoisonModels {
            uncontained,
            contained: contained_model,
            for_crashed: model_for_crashed,
        },
        crashed_matches,
        violations,
    }
}

/// A shard as the verdict names it: `cell/id`.
fn shard_name((cell, id): &ShardRef) -> String {
    format!("{cell}/{id}")
}

/// Where the poison crashed shards, against where it may have: the
/// violations (a shard outside the poison tenant's `subset` down; more
/// shards down than the model, uncontained or `contained` to at most that
/// many, allows; none at all, so nothing was tested), and whether the
/// crashed shards match the model.
fn crash_violations(
    session: &Session,
    poison: usize,
    (cell, subset): (&str, &[String]),
    witness: &Witness<'_>,
    contained: Option<usize>,
    crashed_ids: &[String],
) -> (Vec<String>, bool) {
    let mut violations = Vec::new();
    let outside: Vec<String> = witness
        .crashed
        .iter()
        .filter(|(c, id)| c != cell || !subset.contains(id))
        .map(shard_name)
        .collect();
    if !outside.is_empty() {
        violations.push(format!(
            "shards outside the poison tenant's subset went down: {}",
            outside.join(", ")
        ));
    }
    let crashed_matches = match contained {
        None => {
            let whole: BTreeSet<ShardRef> = subset
                .iter()
                .map(|id| (cell.to_owned(), id.clone()))
                .collect();
            *witness.crashed == whole
        }
        Some(a) => outside.is_empty() && witness.crashed.len() <= a,
    };
    if !crashed_matches {
        violations.push(match contained {
            None => format!(
                "{} of the poison tenant's {} shards were measured down ({}); the uncontained model crashes all of them",
                crashed_ids.iter().filter(|id| subset.contains(id)).count(),
                subset.len(),
                witness.source
            ),
            Some(a) => format!(
                "containment failed: {} shards were measured down, more than --poison-after {a}",
                witness.crashed.len()
            ),
        });
    }

    if witness.crashed.is_empty() {
        violations.push(format!(
            "the poison crashed no shard ({}), so nothing was tested: are the shards running in crash-on-poison mode, and does {} reach them?",
            witness.source,
            session.credential(poison).tenant
        ));
    }
    (violations, crashed_matches)
}

/// Every tenant but the poison one, sorted by what the `crashed` shards
/// predict for it (fully down: all its members crashed; degraded: some;
/// unaffected: none) and by what was measured (fully down: a success ratio
/// under [`DOWN_BELOW`] during the phase; degraded and unaffected as
/// predicted, among the others).
struct TenantSets {
    /// How many tenants there are but the poison one.
    others: usize,
    predicted_down: BTreeSet<usize>,
    predicted_degraded: BTreeSet<usize>,
    predicted_unaffected: BTreeSet<usize>,
    measured_down: BTreeSet<usize>,
    measured_degraded: BTreeSet<usize>,
    measured_unaffected: BTreeSet<usize>,
}

impl TenantSets {
    fn new(session: &Session, poison: usize, crashed: &BTreeSet<ShardRef>, during: &Phase) -> Self {
        let hit = |t: usize| {
            let (c, members) = &session.subsets()[t];
            members
                .iter()
                .filter(|id| crashed.contains(&(c.clone(), (*id).clone())))
                .count()
        };
        let others: Vec<usize> = (0..session.tenants()).filter(|&t| t != poison).collect();
        let predicted_down: BTreeSet<usize> = others
            .iter()
            .copied()
            .filter(|&t| hit(t) == session.subsets()[t].1.len() && hit(t) > 0)
            .collect();
        let predicted_degraded: BTreeSet<usize> = others
            .iter()
            .copied()
            .filter(|&t| hit(t) > 0 && !predicted_down.contains(&t))
            .collect();
        let predicted_unaffected: BTreeSet<usize> =
            others.iter().copied().filter(|&t| hit(t) == 0).collect();
        let measured_down: BTreeSet<usize> = others
            .iter()
            .copied()
            .filter(|&t| during.samples[t].ratio() < DOWN_BELOW)
            .collect();
        let measured_degraded: BTreeSet<usize> = others
            .iter()
            .copied()
            .filter(|&t| hit(t) > 0 && !measured_down.contains(&t))
            .collect();
        let measured_unaffected: BTreeSet<usize> = others
            .iter()
            .copied()
            .filter(|&t| hit(t) == 0 && !measured_down.contains(&t))
            .collect();
        Self {
            others: others.len(),
            predicted_down,
            predicted_degraded,
            predicted_unaffected,
            measured_down,
            measured_degraded,
            measured_unaffected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::TenantSample;
    use crate::properties::Status;

    fn session(subsets: &[&[&str]]) -> Session {
        Session::over_subsets(subsets, 8)
    }

    fn phase(samples: &[(u64, u64)]) -> Phase {
        Phase {
            samples: samples
                .iter()
                .map(|&(ok, total)| TenantSample {
                    ok,
                    total,
                    latencies_us: vec![1000; total as usize],
                })
                .collect(),
        }
    }

    const THRESHOLDS: Thresholds = Thresholds {
        min_success: 0.999,
        latency_bound_ms: 10.0,
    };

    /// Judges tenant 0 as the poison tenant on `subset`, with the shards
    /// `crashed` seen down, `failovers` counted and `poison_after` checked.
    fn judge(
        session: &Session,
        subset: &[&str],
        (baseline, during): (&Phase, &Phase),
        crashed: &[&str],
        failovers: f64,
        poison_after: Option<usize>,
    ) -> PoisonVerdict {
        let subset: Vec<String> = subset.iter().map(|id| (*id).to_owned()).collect();
        let down: BTreeSet<ShardRef> = crashed
            .iter()
            .map(|id| ("c".to_owned(), (*id).to_owned()))
            .collect();
        let witness = Witness {
            crashed: &down,
            source: "control API",
            gateway_saw_out: &down,
            statuses: vec![None],
            failovers,
        };
        evaluate(
            session,
            0,
            ("c", &subset),
            baseline,
            during,
            witness,
            poison_after,
            THRESHOLDS,
        )
    }

    #[test]
    fn a_whole_subset_crash_matches_the_uncontained_model() {
        // t0 is the whale on s0..s3; t1 sits inside, t2 straddles, t3 is
        // elsewhere.
        let session = session(&[
            &["s0", "s1", "s2", "s3"],
            &["s1", "s2"],
            &["s3", "s4"],
            &["s5", "s6"],
        ]);
        let whale = ["s0", "s1", "s2", "s3"];
        let during = phase(&[(0, 0), (0, 10), (10, 10), (10, 10)]);
        let baseline = phase(&[(0, 0), (10, 10), (10, 10), (10, 10)]);
        // The same measurements, judged without and with containment.
        let verdict_with = |poison_after| {
            judge(
                &session,
                &whale,
                (&baseline, &during),
                &whale,
                3.0,
                poison_after,
            )
        };
        let verdict = verdict_with(None);
        assert!(verdict.violations.is_empty(), "{:?}", verdict.violations);
        assert_eq!(verdict.models.uncontained.others_fully_down, 1);
        assert_eq!(verdict.models.uncontained.degraded, 1);
        let sets = [&verdict.fully_down, &verdict.degraded, &verdict.unaffected];
        assert_eq!(
            sets.map(|s| (s.measured, s.modeled)),
            [(1, 1), (1, 1), (1, 1)]
        );
        assert!(verdict.crashed_matches && sets.iter().all(|s| s.matches));
        assert_eq!(
            verdict.properties.named().map(|(_, p)| p.status),
            [Status::Held; 3]
        );

        // Checked against containment to 2, the same crash failed it.
        let verdict = verdict_with(Some(2));
        assert!(!verdict.crashed_matches);
        assert!(
            verdict
                .violations
                .iter()
                .any(|v| v.contains("containment failed")),
            "{:?}",
            verdict.violations
        );
        assert_eq!(
            verdict.models.contained.as_ref().unwrap().others_fully_down,
            1
        );
    }

    #[test]
    fn errors_outside_the_crash_and_unexpected_outages_are_violations() {
        let session = session(&[&["s0", "s1"], &["s0", "s2"], &["s5", "s6"]]);
        let during = phase(&[(0, 0), (0, 10), (9, 10)]);
        let verdict = judge(
            &session,
            &["s0", "s1"],
            (&during, &during),
            &["s0", "s1", "s7"],
            0.0,
            None,
        );
        let all = verdict.violations.join("\n");
        assert!(
            all.contains("outside the poison tenant's subset went down: c/s7"),
            "{all}"
        );
        assert!(all.contains("saw 1 errors"), "{all}");
        assert!(all.contains("measured fully down"), "{all}");
        assert!(!verdict.fully_down.matches);
        assert_eq!(verdict.fully_down.unexpected, ["t1"]);
        // t1 was meant to degrade (s2 survived) and failed over nowhere.
        assert_eq!(
            verdict.properties.named().map(|(_, p)| p.status),
            [Status::Violated, Status::Violated, Status::Violated]
        );
    }

    #[test]
    fn a_poison_that_crashed_nothing_tested_nothing() {
        let session = session(&[&["s0", "s1"], &["s0", "s2"], &["s5", "s6"]]);
        let during = phase(&[(0, 0), (10, 10), (10, 10)]);
        // Even checked against containment, where "at most 2 crashed" holds
        // for none, a poison that crashed nothing is no pass.
        let verdict = judge(
            &session,
            &["s0", "s1"],
            (&during, &during),
            &[],
            0.0,
            Some(2),
        );
        assert!(verdict.crashed_matches);
        let all = verdict.violations.join("\n");
        assert!(all.contains("the poison crashed no shard"), "{all}");
        assert_eq!(
            verdict.properties.named().map(|(_, p)| p.status),
            [Status::NotExercised, Status::Held, Status::NotExercised]
        );
    }
}
