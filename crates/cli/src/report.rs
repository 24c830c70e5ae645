//! The `report` subcommand: runs the plan, the overlap, the load and a
//! failure sweep for one fleet and population, and writes them as one
//! self-contained HTML file with charts.
//!
//! The figures come from the `analysis` crate and the page from the
//! `report` crate; this module checks the input, shows progress and writes
//! the file.

use std::fs;
use std::path::PathBuf;

use analysis::{BlastModel, binomial, load, overlap};
use anyhow::{Context, Result};
use clap::Args;
// `::` because this module is itself named `report`.
use ::report::{ReportInput, render};

use crate::output::print_text;
use crate::placement_args::{PlacementArgs, PlacementSetup, print_note, zone_sizes};
use crate::population_args::{PopulationArgs, check_overrides, place_all};
use crate::progress::with_progress;

/// The most failure sets the sweep evaluates before it samples, as `blast`.
const MAX_SETS: u64 = 1_000_000;

/// The sweep's sample seed, fixed so that the same input gives the same
/// report.
const SEED: u64 = 0;

/// Tenants named as dominating the hottest shard; the page shows none of
/// them, but the load analysis needs a bound.
const TOP_TENANTS: usize = 5;

const AFTER_HELP: &str = "\
The report holds: the recommendation for k against the budget; fully down \
and degraded against k; the share of tenant pairs sharing j shards at --k, \
measured and expected; per-shard load at --k (weighted tenants files only); \
the worst case for every k; and a sweep over every set of \
--concurrent-failures failed shards at --k. It fetches nothing: styles and \
charts are inline, so it opens offline.

Example:
  shuffle-shard report --shards 16 --k 3 --tenants-file tenants.tsv --out report.html";

/// Arguments of `shuffle-shard report`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct ReportArgs {
    #[command(flatten)]
    placement: PlacementArgs,

    #[command(flatten)]
    population: PopulationArgs,

    /// Largest fraction of tenants one shard failure may degrade
    #[arg(long, value_name = "FRACTION", default_value_t = 0.2)]
    max_degraded: f64,

    /// Largest fraction of tenants that may be fully down when
    /// --concurrent-failures shards fail together
    #[arg(long, value_name = "FRACTION", default_value_t = 0.001)]
    max_fully_down: f64,

    /// How many shards may fail at the same time
    #[arg(long, value_name = "F", default_value_t = 2)]
    concurrent_failures: usize,

    /// Where to write the HTML report
    #[arg(long, value_name = "PATH")]
    out: PathBuf,
}

/// Runs `shuffle-shard report`.
pub fn run(args: ReportArgs) -> Result<()> {
    // Every check that does not need the placements runs first, so that a
    // mistake is reported at once rather than after the analysis.
    let budget = crate::plan::budget(
        args.max_degraded,
        args.max_fully_down,
        args.concurrent_failures,
    )?;
    let setup = args.placement.fleet.resolve()?;
    let PlacementSetup { placer, key_note } = args.placement.placer()?;
    let population = args.population.load()?;
    check_overrides(&args.placement.overrides()?, &population)?;
    let n = setup.fleet.len();
    let plan = crate::plan::measure(&setup, &population, budget)?;
    let placements = place_all(&placer, &population);
    let model = with_progress("collapsing tenants to distinct subsets", |_| {
        BlastModel::new(&placements)
    })?;
    let config = placer.config();
    let measured = with_progress("counting shared shards over every pair", |_| {
        overlap::exact(&model)
    });
    let expected = overlap::expected_shared_counts_mixed(
        &zone_sizes(placer.fleet(), config.zone_aware),
        &model.subset_sizes(),
    );
    let load = population
        .weights()
        .is_some()
        .then(|| load::load(&placements, &population, None, TOP_TENANTS));
    let failures = budget.concurrent_failures;
    let sets = binomial(n as u64, failures as u64).min(u128::from(MAX_SETS));
    let sweep = with_progress(
        &format!("failing {sets} sets of {failures} shards"),
        |report| model.sweep(failures, MAX_SETS, SEED, report),
    )?;

    let algorithm = config.algorithm.name();
    // The tenant count is in the page's header, formatted; the title names
    // what tells one report from another at a glance in a browser tab.
    let title = format!("Blast radius: {n} shards, k = {}, {algorithm}", config.k);
    let html = render(&ReportInput {
        title: &title,
        shards: n,
        tenants: model.tenants(),
        algorithm,
        k: config.k,
        plan: &plan,
        overlap: &measured,
        expected_shared_counts: expected.as_deref(),
        load: load.as_ref(),
        sweep: Some(&sweep),
    })?;
    fs::write(&args.out, html).with_context(|| {
        format!(
            "cannot write the report to {}; check that the directory exists and is writable",
            args.out.display()
        )
    })?;
    print_note(key_note);
    let _flow = print_text(&format!("{}\n", args.out.display()))?;
    Ok(())
}
