//! The `report` subcommand: runs the plan, the overlap, the load and a
//! failure sweep for one fleet and population, and writes them as one
//! self-contained HTML file with charts.
//!
//! The figures come from the `analysis` crate and the page from the
//! `report` crate; this module checks the input, shows progress and writes
//! the file.

use std::fs;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use analysis::load::{self, LoadReport, Whale};
use analysis::overlap::Overlap;
use analysis::plan::Plan;
use analysis::{
    AnalysisError, BlastModel, Impact, Placements, Population, Sweep, binomial, overlap,
};
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use placement::Fleet;
use serde::Serialize;
// `::` because this module is itself named `report`.
use ::report::{ReportInput, WhaleRow, ZoneOutage, render};

use crate::output::{print_json, print_text};
use crate::placement_args::{PlacementArgs, PlacementSetup, print_note, zone_sizes};
use crate::population_args::{PopulationArgs, place_all, placed};
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
measured and expected; per-shard load at --k, shards over --capacity and the \
whales with a suggested --tenant-k or dedicated shards (weighted tenants \
files only); the worst case for every k; a sweep over every set of \
--concurrent-failures failed shards at --k (a sample of distinct sets above \
a million, whose worst is a lower bound); and with --zone-outage each zone \
failed in turn. The header names the zones, the placement key (never its \
bytes) and the generation time. It fetches nothing: styles and charts are \
inline, so it opens offline. --json prints the same data as one JSON \
document on stdout.

Capacity lost: the mean, over degraded tenants, of the share of their shards \
that failed. p50 and p99 are nearest-rank percentiles over the sweep's sets.

Examples:
  shuffle-shard report --shards 16 --k 3 --tenants-file tenants.tsv --out report.html
  shuffle-shard report --zones a:8,b:8 --k 3 --tenants 5000 --zone-outage --json";

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

    /// Flag shards whose load exceeds C, in the units of the tenant weights
    /// (needs a weighted --tenants-file)
    #[arg(long, value_name = "C")]
    capacity: Option<f64>,

    /// Fail each zone in turn (needs --zones)
    #[arg(long)]
    zone_outage: bool,

    /// The placement key's version, shown in the header (e.g. v3, as in the
    /// gateway's placement.key_version)
    #[arg(long, value_name = "LABEL")]
    key_version: Option<String>,

    /// Where to write the HTML report [required unless --json]
    #[arg(long, value_name = "PATH", required_unless_present = "json")]
    out: Option<PathBuf>,

    /// Print the report's data as one JSON document on stdout (the HTML is
    /// still written when --out is given)
    #[arg(long)]
    json: bool,
}

/// The report's data, as `--json` prints it: what the page shows.
#[derive(Serialize)]
struct ReportJson<'a> {
    generated: &'a str,
    key: &'a str,
    shards: usize,
    tenants: u64,
    algorithm: &'a str,
    k: u32,
    /// Zone names and sizes; empty when placement ignores zones.
    zones: Vec<ZoneJson<'a>>,
    capacity: Option<f64>,
    #[serde(flatten)]
    plan: &'a Plan,
    pairwise_overlap: OverlapJson<'a>,
    /// `null` without weights.
    load: Option<&'a LoadReport>,
    whales: Vec<WhaleJson<'a>>,
    sweep: SweepJson<'a>,
    /// `null` without --zone-outage.
    zone_outages: Option<Vec<ZoneOutageJson<'a>>>,
}

#[derive(Serialize)]
struct ZoneJson<'a> {
    name: &'a str,
    shards: usize,
}

#[derive(Serialize)]
struct OverlapJson<'a> {
    #[serde(flatten)]
    measured: &'a Overlap,
    expected_shared_counts: Option<&'a [f64]>,
}

#[derive(Serialize)]
struct WhaleJson<'a> {
    tenant: &'a str,
    #[serde(flatten)]
    whale: &'a Whale,
}

#[derive(Serialize)]
struct SweepJson<'a> {
    #[serde(flatten)]
    sweep: &'a Sweep,
    /// `"exact"`, or `"lower bound"` for a sample.
    worst_bound: &'static str,
}

#[derive(Serialize)]
struct ZoneOutageJson<'a> {
    zone: &'a str,
    #[serde(flatten)]
    impact: &'a Impact,
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
    let (PlacementSetup { placer, key_note }, mut tenants) =
        placed(&args.placement, &args.population)?;
    // The plan section fixes the same tenants' k at every candidate, as
    // `plan` does.
    let plan_overrides = tenants.k_overrides(&args.placement.overrides()?, setup.fleet.len())?;
    let population = &tenants.population;
    let fleet = placer.fleet();
    if args.zone_outage && fleet.zones().is_empty() {
        return Err(anyhow!(AnalysisError::NoZones).context("--zone-outage"));
    }
    let capacity = crate::blast::check_capacity(args.capacity, population)?;
    check_key_version(args.key_version.as_deref())?;
    let n = setup.fleet.len();
    let plan = crate::plan::measure(&setup, population, budget, &plan_overrides)?;
    let placements = place_all(&placer, population);
    let model = with_progress("collapsing tenants to distinct subsets", |_| {
        BlastModel::new(&placements)
    })?;
    let config = placer.config();
    let measured = with_progress("counting shared shards over every pair", |_| {
        overlap::exact(&model)
    });
    let expected = overlap::expected_shared_counts_mixed(
        &zone_sizes(fleet, config.zone_aware),
        &model.subset_sizes(),
    );
    let load = population
        .weights()
        .is_some()
        .then(|| load::load(&placements, population, capacity, TOP_TENANTS));
    let whales = whales(&placements, population, load.as_ref());
    let failures = budget.concurrent_failures;
    let sets = binomial(n as u64, failures as u64).min(u128::from(MAX_SETS));
    let sweep = with_progress(
        &format!("failing {sets} sets of {failures} shards"),
        |report| model.sweep(failures, MAX_SETS, SEED, report),
    )?;
    let zone_outages = if args.zone_outage {
        zone_outages(fleet, &model)?
    } else {
        Vec::new()
    };
    let zones: Vec<(String, usize)> = if config.zone_aware {
        fleet
            .zones()
            .iter()
            .map(|zone| (zone.name.clone(), zone.members.len()))
            .collect()
    } else {
        Vec::new()
    };
    let generated = utc_now();
    let key = key_description(&args);

    let algorithm = config.algorithm.name();
    // The tenant count is in the page's header, formatted; the title names
    // what tells one report from another at a glance in a browser tab.
    let title = format!("Blast radius: {n} shards, k = {}, {algorithm}", config.k);
    let input = ReportInput {
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
        capacity,
        zones: &zones,
        generated: &generated,
        key: &key,
        whales: &whales,
        zone_outages: &zone_outages,
    };
    let html = render(&input)?;
    if let Some(out) = &args.out {
        fs::write(out, html).with_context(|| {
            format!(
                "cannot write the report to {}; check that the directory exists and is writable",
                out.display()
            )
        })?;
    }
    print_note(key_note);
    tenants.print_notes();
    let _flow = if args.json {
        print_json(&report_json(&input, &sweep, args.zone_outage))?
    } else {
        let out = args.out.as_deref().unwrap_or_else(|| "-".as_ref());
        print_text(&format!("{}\n", out.display()))?
    };
    Ok(())
}

/// Refuses a `--key-version` that is not a label (empty, or with control
/// characters): it is printed in the report's header.
fn check_key_version(version: Option<&str>) -> Result<()> {
    if let Some(version) = version
        && (version.is_empty() || version.chars().any(char::is_control))
    {
        bail!(
            "--key-version {version:?} is not a label; give the version name, e.g. --key-version v3"
        );
    }
    Ok(())
}

/// The whales of a weighted population (none without weights), each with
/// its tenant's id.
fn whales(
    placements: &Placements,
    population: &Population,
    load: Option<&LoadReport>,
) -> Vec<WhaleRow> {
    load.map(|load| load::whales(placements, population, load))
        .unwrap_or_default()
        .into_iter()
        .map(|whale| WhaleRow {
            tenant: population.id(whale.tenant).into_owned(),
            whale,
        })
        .collect()
}

/// What failing each of `fleet`'s zones in turn does to `model`'s tenants.
fn zone_outages(fleet: &Fleet, model: &BlastModel) -> Result<Vec<ZoneOutage>, AnalysisError> {
    fleet
        .zones()
        .iter()
        .map(|zone| {
            Ok(ZoneOutage {
                zone: zone.name.clone(),
                impact: model.impact(&zone.members)?,
            })
        })
        .collect()
}

/// The report's data as `--json` prints it: the page's `input`, with its
/// `sweep`, and the zone outages when they were asked for (`zone_outage`).
fn report_json<'a>(input: &ReportInput<'a>, sweep: &'a Sweep, zone_outage: bool) -> ReportJson<'a> {
    ReportJson {
        generated: input.generated,
        key: input.key,
        shards: input.shards,
        tenants: input.tenants,
        algorithm: input.algorithm,
        k: input.k,
        zones: input
            .zones
            .iter()
            .map(|(name, shards)| ZoneJson {
                name,
                shards: *shards,
            })
            .collect(),
        capacity: input.capacity,
        plan: input.plan,
        pairwise_overlap: OverlapJson {
            measured: input.overlap,
            expected_shared_counts: input.expected_shared_counts,
        },
        load: input.load,
        whales: input
            .whales
            .iter()
            .map(|row| WhaleJson {
                tenant: &row.tenant,
                whale: &row.whale,
            })
            .collect(),
        sweep: SweepJson {
            sweep,
            worst_bound: if sweep.sampled {
                "lower bound"
            } else {
                "exact"
            },
        },
        zone_outages: zone_outage.then(|| {
            input
                .zone_outages
                .iter()
                .map(|outage| ZoneOutageJson {
                    zone: &outage.zone,
                    impact: &outage.impact,
                })
                .collect()
        }),
    }
}

/// Which key placed the tenants, for the header: where it came from and
/// the version label if one was given, never the key's bytes.
fn key_description(args: &ReportArgs) -> String {
    let fleet = &args.placement.fleet;
    let source = match (&fleet.key_file, &fleet.key_env) {
        (Some(path), _) => format!("--key-file {}", path.display()),
        (None, Some(var)) => format!("--key-env {var}"),
        (None, None) => "the public recipe key (fine for analysis, never for serving)".to_owned(),
    };
    match &args.key_version {
        Some(version) => format!("{source}, version {version}"),
        None => format!("{source}, version not given (--key-version)"),
    }
}

/// Now, in UTC, to the second: `2026-12-04 14:05:09 UTC`.
fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    utc(seconds)
}

/// Seconds since the epoch as a UTC date and time.
fn utc(seconds: u64) -> String {
    let t = text::UtcTime::from_unix(seconds);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_are_civil() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_796_392_509), "2026-12-04 13:55:09 UTC");
    }
}
