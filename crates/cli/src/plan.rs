//! The `plan` subcommand: measures every candidate `k` against a stated
//! budget and recommends the smallest one that meets it, or says which
//! budget binds.

use analysis::Population;
use analysis::answers;
use analysis::plan::{Budget, Plan, PlanPlacement};
use anyhow::{Result, anyhow, bail};
use clap::Args;

use crate::output::print_answer;
use crate::placement_args::{FleetArgs, FleetSetup, parse_tenant_ks, print_note};
use crate::population_args::{PopulationArgs, check_overrides};
use crate::progress::Bars;
use crate::table::{Align, Table, percent, shard_list};

const AFTER_HELP: &str = "\
For each k from 1 to min(shards, 8) the table gives: the worst fully-down \
share over every set of --concurrent-failures failed shards (exact), the \
worst share degraded by one failure, the capacity a degraded tenant loses on \
one failure, and the share of tenant pairs that share a shard. The \
recommendation is the smallest k that meets both budgets.

Capacity lost: on one failure, the mean over the degraded tenants of the \
share of their shards lost (1/k for a tenant with k shards); with failover \
inside the subset, the share of its capacity a degraded tenant loses.

--tenant-k TENANT=K fixes one tenant's k at every candidate (a whale with a \
larger subset). A poison tenant crashes its own subset, so such a tenant \
takes down every tenant whose subset sits inside its K shards: plan warns \
when that alone exceeds --max-fully-down at the recommended k (or, with no \
recommendation, the largest k measured).

Example:
  shuffle-shard plan --shards 16 --tenants 2000 --max-degraded 0.2 \\
      --max-fully-down 0.001 --concurrent-failures 2";

/// Arguments of `shuffle-shard plan`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct PlanArgs {
    #[command(flatten)]
    fleet: FleetArgs,

    #[command(flatten)]
    population: PopulationArgs,

    /// Largest fraction of tenants one shard failure may degrade, e.g. 0.2
    #[arg(long, value_name = "FRACTION")]
    max_degraded: f64,

    /// Largest fraction of tenants that may be fully down when
    /// --concurrent-failures shards fail together, e.g. 0.001
    #[arg(long, value_name = "FRACTION")]
    max_fully_down: f64,

    /// How many shards may fail at the same time, e.g. 2
    #[arg(long, value_name = "F")]
    concurrent_failures: usize,

    /// Give one tenant its own subset size at every candidate k, e.g.
    /// --tenant-k whale=8 (repeatable)
    #[arg(long = "tenant-k", value_name = "TENANT=K")]
    tenant_k: Vec<String>,

    /// Print one JSON document instead of the table
    #[arg(long)]
    json: bool,
}

/// Runs `shuffle-shard plan`.
pub fn run(args: PlanArgs) -> Result<()> {
    let budget = budget(
        args.max_degraded,
        args.max_fully_down,
        args.concurrent_failures,
    )?;
    let typed = parse_tenant_ks(&args.tenant_k)?;
    let setup = args.fleet.resolve()?;
    let mut tenants = args.population.load()?;
    check_overrides(&typed, &tenants.population)?;
    let overrides = tenants.k_overrides(&typed, setup.fleet.len())?;
    check_failures(&setup, budget)?;
    let report = answers::plan(
        &placement(&setup, &overrides),
        &tenants.population,
        budget,
        &Bars,
    )?;
    print_note(setup.key_note);
    tenants.print_notes();
    let _flow = print_answer(args.json, &report, |report| {
        let mut out = render(
            &report.plan,
            report.shards,
            report.tenants,
            report.algorithm,
        );
        for warning in &report.poison_warnings {
            out.push_str(&format!("warning: {}\n", warning.message));
        }
        out
    })?;
    Ok(())
}

/// The plan's placement options with these overrides.
fn placement<'a>(setup: &'a FleetSetup, overrides: &'a [(String, u32)]) -> PlanPlacement<'a> {
    PlanPlacement {
        fleet: &setup.fleet,
        key: &setup.key,
        algorithm: setup.algorithm,
        zone_aware: setup.zone_aware,
        overrides,
    }
}

/// Checks the budget flags; `plan` and `report` share them.
pub fn budget(
    max_degraded: f64,
    max_fully_down: f64,
    concurrent_failures: usize,
) -> Result<Budget> {
    if concurrent_failures == 0 {
        bail!("--concurrent-failures 0 plans for no failure; pass 1 or more");
    }
    Ok(Budget {
        max_degraded: fraction("--max-degraded", max_degraded)?,
        max_fully_down: fraction("--max-fully-down", max_fully_down)?,
        concurrent_failures,
    })
}

/// Measures k = 1 to 8 against the budget, with a progress bar; the
/// tenants in `overrides` keep their own k at every candidate.
pub fn measure(
    setup: &FleetSetup,
    population: &Population,
    budget: Budget,
    overrides: &[(String, u32)],
) -> Result<Plan> {
    check_failures(setup, budget)?;
    Ok(answers::plan(&placement(setup, overrides), population, budget, &Bars)?.plan)
}

/// Refuses more concurrent failures than the fleet has shards, naming the
/// flag.
fn check_failures(setup: &FleetSetup, budget: Budget) -> Result<()> {
    let n = setup.fleet.len();
    if budget.concurrent_failures > n {
        bail!(
            "--concurrent-failures {} is more than the {n} shards in the fleet; choose at most {n}",
            budget.concurrent_failures
        );
    }
    Ok(())
}

/// Checks that a budget is a fraction of tenants.
fn fraction(flag: &str, value: f64) -> Result<f64> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(anyhow!(
            "{flag} {value} is not a fraction of tenants; give a number from 0 to 1, e.g. 0.2 for 20%"
        ))
    }
}

fn render(plan: &Plan, shards: usize, tenants: usize, algorithm: &str) -> String {
    let failures = plan.budget.concurrent_failures;
    let mut out = format!(
        "Plan for {tenants} tenants on {shards} shards ({algorithm}). Budget: one failure degrades at most {}; {failures} concurrent failures fully down at most {}.\n\n",
        percent(plan.budget.max_degraded),
        percent(plan.budget.max_fully_down),
    );
    let worst_header = format!("worst fully down ({failures} failed)");
    let mut table = Table::new(&[
        ("k", Align::Right),
        (&worst_header, Align::Right),
        ("worst failed set", Align::Left),
        ("degraded (1 failed)", Align::Right),
        ("capacity lost", Align::Right),
        ("overlap", Align::Right),
        ("meets budget", Align::Left),
    ]);
    for row in &plan.rows {
        table.row(vec![
            row.k.to_string(),
            row.worst_fully_down
                .map_or_else(|| "too many sets to search".to_owned(), percent),
            // With nobody fully down, the set the search happened to try
            // first says nothing, so none is shown.
            if row.worst_fully_down.is_some_and(|fraction| fraction > 0.0) {
                shard_list(&row.worst_failed)
            } else {
                "-".to_owned()
            },
            percent(row.degraded_one_failure),
            percent(row.capacity_lost),
            percent(row.overlap),
            if row.meets_budget { "yes" } else { "no" }.to_owned(),
        ]);
    }
    out.push_str(&table.render(0));
    out.push('\n');
    out.push_str(&plan.verdict);
    out.push('\n');
    if let Some(traffic) = &plan.traffic_verdict {
        // With weights a whale fully down weighs what it carries: the same
        // budgets read as shares of traffic may call for another k.
        out.push_str(&format!(
            "By share of traffic (tenant weights): {traffic}\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_fractions() {
        assert_eq!(fraction("--x", 0.2).unwrap(), 0.2);
        assert_eq!(fraction("--x", 0.0).unwrap(), 0.0);
        assert_eq!(fraction("--x", 1.0).unwrap(), 1.0);
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            let error = fraction("--max-degraded", bad).unwrap_err().to_string();
            assert!(error.starts_with("--max-degraded"), "{error}");
        }
    }
}
