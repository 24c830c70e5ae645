//! The `blast` subcommand: what failures do to a placed population.
//!
//! It always reports the exact pairwise overlap next to its closed-form
//! expectation, then every scenario asked for (declared failure sets, zone
//! outages, a sweep over every failure set of one size), what a bad deploy
//! to each deployment wave would expose and, for a weighted population, how
//! load spreads and where it lands when a shard fails. All figures come from
//! the `analysis` crate; this module checks the input, shows progress and
//! lays the answers out.
//!
//! The waves file reader, the per-wave JSON and the shard cells of the wave
//! tables are shared with `plan-waves`, which writes the files read here.

use std::fs;
use std::path::{Path, PathBuf};

use analysis::answers::{
    self, BlastQuery, LoadJson, OverlapJson, PoisonFigureJson, PoisonJson, PoisonSweepJson, Report,
    Scenario, ScenarioJson, SweepJson, WaveJson, total_fully_exposed,
};
use analysis::waves::Waves;
use analysis::{AnalysisError, Population};
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use placement::{Fleet, ShardIndex};

use crate::output::print_answer;
use crate::placement_args::{PlacementArgs, PlacementSetup, print_note};
use crate::population_args::{PopulationArgs, check_overrides};
use crate::progress::Bars;
use crate::table::{Align, Table, count_of, number, percent, shard_list};

/// Fleets up to this size list every shard in the load table; larger ones
/// list the hottest [`LOAD_ROWS`] and leave the rest to `--json`.
const ALL_SHARD_ROWS: usize = 32;

/// Shards listed in the load table of a large fleet.
const LOAD_ROWS: usize = 20;

/// Shard ids listed in one cell of a wave table before the rest are
/// counted instead; `--json` lists every shard.
const WAVE_SHARDS_LISTED: usize = 8;

const AFTER_HELP: &str = "\
A tenant is fully down when every one of its shards failed, and degraded \
when at least one did. Every run reports the exact share of tenant pairs \
that share shards, next to what independent uniform placement would give.

Capacity lost (per degraded tenant): the mean, over the degraded tenants, \
of the share of their shards that failed; with failover inside the subset, \
the share of its capacity a degraded tenant loses. A sweep's mean, p50 and \
p99 are over its failure sets; p50 and p99 are nearest-rank percentiles \
(the smallest count that at least 50% / 99% of the sets do not exceed). A \
sampled sweep (more sets than --max-sets) draws distinct sets, and its \
worst is a lower bound on the true worst.

Examples:
  shuffle-shard blast --shards 16 --k 2 --tenants 2000 --fail 3,7 --fail 0,1
  shuffle-shard blast --shards 64 --k 3 --tenants 100000 --sweep 2
  shuffle-shard blast --zones a:8,b:8,c:8 --k 3 --tenants 5000 --zone-outage --json
  shuffle-shard blast --shards 32 --k 4 --tenants-file tenants.tsv --capacity 50
  shuffle-shard blast --shards 12 --k 2 --tenants 1000 --waves waves.txt
  shuffle-shard blast --shards 32 --k 2 --tenant-k whale=8 --tenants-file tenants.txt --poison whale --poison-after 2
  shuffle-shard blast --shards 64 --k 3 --tenants 1000000 --poison-sweep

A waves file (--waves) assigns every shard to one deployment wave: one \
`SHARD_ID WAVE` line per shard, e.g. `7 wave-2`; blank lines and lines \
starting with '#' are skipped. `shuffle-shard plan-waves --out` writes one. \
For each wave the report gives the tenants fully exposed to a bad deploy \
there (every shard of the tenant in that wave) and those touched by it (at \
least one).

A tenants file holds one id per line, optionally followed by a TAB and the \
tenant's weight (its traffic share); with weights the report adds per-shard \
load, the hottest survivor of every single-shard failure, shards over \
--capacity and the tenants that dominate the hottest shard. A tenants file \
ending in .jsonl or .toml is a gateway tenants file, and --tenants-store \
reads the gateway's tenant store: the population being served, each \
tenant's own k or dedicated shards included (unweighted).

A poison tenant (--poison, --poison-sweep) sends requests that crash the \
shard serving them; without containment every member of its subset crashes \
in turn. Fully down: tenants whose subset lies inside the crashed shards \
(the poison tenant included when it is in the population); degraded: \
tenants sharing a crashed shard, not fully down. --poison-after A models the \
gateway's containment (routing.poison_after): at most A members crash, which \
ones cannot be known in advance, so the report gives the worst choice (exact \
up to 4096 choices per subset, an upper bound beyond, and it says so).";

/// Arguments of `shuffle-shard blast`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct BlastArgs {
    #[command(flatten)]
    placement: PlacementArgs,

    #[command(flatten)]
    population: PopulationArgs,

    /// Fail these shards together, e.g. --fail 3,17 (repeatable, one scenario each)
    #[arg(long, value_name = "SHARDS")]
    fail: Vec<String>,

    /// Evaluate every failure set of F shards (a seeded sample above --max-sets)
    #[arg(long, value_name = "F")]
    sweep: Option<usize>,

    /// The most failure sets a sweep evaluates; above it, it samples that many
    #[arg(long, value_name = "SETS", default_value_t = 1_000_000)]
    max_sets: u64,

    /// Seed of a sampled sweep; the same seed always gives the same sample
    #[arg(long, value_name = "SEED", default_value_t = 0)]
    seed: u64,

    /// Fail each zone in turn (needs --zones)
    #[arg(long)]
    zone_outage: bool,

    /// Flag shards whose load exceeds C, in the units of the tenant weights
    /// (needs a weighted --tenants-file)
    #[arg(long, value_name = "C")]
    capacity: Option<f64>,

    /// Report what a bad deploy to each wave exposes; FILE has one
    /// `SHARD_ID WAVE` line per shard
    #[arg(long, value_name = "FILE")]
    waves: Option<PathBuf>,

    /// The blast radius of TENANT as a poison tenant whose whole subset
    /// crashes (repeatable); it need not be in the population
    #[arg(long, value_name = "TENANT")]
    poison: Vec<String>,

    /// Rank every tenant of the population as a poison tenant and list the
    /// worst (by fully down, then degraded)
    #[arg(long)]
    poison_sweep: bool,

    /// How many of the worst poison tenants --poison-sweep lists
    #[arg(long, value_name = "N", default_value_t = 10)]
    poison_top: usize,

    /// Also model the gateway's poison containment: at most A members of a
    /// poison tenant's subset crash (the worst choice of them); 0 means no
    /// containment, as in the gateway
    #[arg(long, value_name = "A")]
    poison_after: Option<usize>,

    /// Print one JSON document instead of tables
    #[arg(long)]
    json: bool,
}

/// Runs `shuffle-shard blast`.
pub fn run(args: BlastArgs) -> Result<()> {
    // Every check that does not need the placements runs first, so that a
    // mistake is reported at once rather than after minutes of placing.
    let PlacementSetup {
        mut placer,
        key_note,
    } = args.placement.placer()?;
    let mut tenants = args.population.load()?;
    let overrides = args.placement.overrides()?;
    check_overrides(&overrides, &tenants.population)?;
    tenants.apply(&mut placer, Some(&overrides))?;
    let population = &tenants.population;
    let fleet = placer.fleet();
    let mut scenarios = args
        .fail
        .iter()
        .map(|text| failure_set(fleet, text))
        .collect::<Result<Vec<_>>>()?;
    if let Some(failures) = args.sweep {
        check_sweep(failures, fleet.len(), args.max_sets)?;
    }
    if args.zone_outage {
        scenarios.extend(
            Scenario::zone_outages(fleet)
                .map_err(|error| anyhow!(error).context("--zone-outage"))?,
        );
    }
    let capacity = check_capacity(args.capacity, population)?;
    check_poison(&args)?;
    let waves = args
        .waves
        .as_deref()
        .map(|path| read_waves(path, fleet))
        .transpose()?;

    let query = BlastQuery {
        scenarios,
        sweep: args.sweep,
        max_sets: args.max_sets,
        seed: args.seed,
        waves,
        poison: args.poison.clone(),
        poison_sweep: args.poison_sweep,
        poison_top: args.poison_top,
        poison_after: args.poison_after,
        capacity,
    };
    let report = answers::blast(&placer, population, query, &Bars)?;
    print_note(key_note);
    tenants.print_notes();
    let overrides = (args.placement.tenant_k.len(), tenants.applied());
    let _flow = print_answer(args.json, &report, |report| {
        render(report, fleet, overrides)
    })?;
    Ok(())
}

/// Parses one `--fail` list of shard ids, such as `3,17`.
fn failure_set(fleet: &Fleet, text: &str) -> Result<Scenario> {
    let mut shards = Vec::new();
    for part in text.split(',') {
        let id = part.trim();
        if id.is_empty() {
            bail!(
                "--fail {text:?} has an empty entry; list shard ids separated by commas, e.g. --fail 3,17"
            );
        }
        let index = fleet.index_of(id).ok_or_else(|| {
            anyhow!(
                "--fail {text}: there is no shard {id:?} in this fleet of {} shards (ids 0 to {}); name shards that exist",
                fleet.len(),
                fleet.len() - 1
            )
        })?;
        shards.push(index);
    }
    Scenario::listed(text.to_owned(), shards, fleet)
        .map_err(|error| anyhow!("--fail {text}: {error}"))
}

/// Refuses sweeps that cannot run before any work is done.
fn check_sweep(failures: usize, n: usize, max_sets: u64) -> Result<()> {
    if failures == 0 {
        return Err(
            anyhow!(AnalysisError::EmptyFailureSet).context("--sweep 0 (pass --sweep 1 or more)")
        );
    }
    if failures > n {
        return Err(anyhow!(AnalysisError::TooManyFailures { failures, n })
            .context(format!("--sweep {failures}")));
    }
    if max_sets == 0 {
        bail!("--max-sets 0 would evaluate no failure sets; pass --max-sets 1 or more");
    }
    Ok(())
}

/// Reads a waves file and checks it against the fleet: every shard in
/// exactly one wave, and no shard the fleet does not have.
pub fn read_waves(path: &Path, fleet: &Fleet) -> Result<Waves> {
    let bytes = fs::read(path).map_err(|error| {
        anyhow!(
            "cannot read waves file {}: {error}; check the path",
            path.display()
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|error| {
        anyhow!(
            "waves file {} is not valid UTF-8 (at byte {}); write `SHARD_ID WAVE` lines in UTF-8",
            path.display(),
            error.utf8_error().valid_up_to()
        )
    })?;
    Waves::parse(&text, fleet).with_context(|| format!("--waves {}", path.display()))
}

/// Checks the poison options before any work: `--poison-after` and
/// `--poison-top` only mean something with a poison question, and a sweep
/// that lists nobody answers nothing.
fn check_poison(args: &BlastArgs) -> Result<()> {
    let asked = !args.poison.is_empty() || args.poison_sweep;
    if args.poison_after.is_some() && !asked {
        bail!(
            "--poison-after models containment of a poison tenant; add --poison TENANT or --poison-sweep"
        );
    }
    if args.poison_sweep && args.poison_top == 0 {
        bail!("--poison-top 0 would list no poison tenant; pass --poison-top 1 or more");
    }
    if let Some(empty) = args.poison.iter().find(|tenant| tenant.is_empty()) {
        bail!("--poison {empty:?} names no tenant; give a tenant id, e.g. --poison acme");
    }
    Ok(())
}

/// Checks `--capacity` (here and in `report`): a positive number, and only with weights, since
/// without them there is no load to compare it with.
pub fn check_capacity(capacity: Option<f64>, population: &Population) -> Result<Option<f64>> {
    let Some(capacity) = capacity else {
        return Ok(None);
    };
    if !(capacity.is_finite() && capacity > 0.0) {
        bail!("--capacity {capacity} is not a positive number; give the load one shard can carry");
    }
    if population.weights().is_none() {
        bail!(
            "--capacity needs tenant weights to compare with; give a --tenants-file whose lines are TENANT<TAB>WEIGHT"
        );
    }
    Ok(Some(capacity))
}

/// A wave's shard ids for a table cell: all of them for a small wave, the
/// first [`WAVE_SHARDS_LISTED`] and a count for a large one.
pub fn wave_shards_cell(shards: &[ShardIndex], fleet: &Fleet) -> String {
    let listed: Vec<&str> = fleet
        .ids(&shards[..shards.len().min(WAVE_SHARDS_LISTED)])
        .collect();
    if shards.len() > WAVE_SHARDS_LISTED {
        format!("{},... ({} shards)", listed.join(","), shards.len())
    } else {
        listed.join(",")
    }
}

/// The header's note on tenants not placed at the default `k`, e.g.
/// ` (1 --tenant-k override; 40 tenants with their own k or shards)`.
fn overrides_note((typed, own): (usize, usize)) -> String {
    let mut parts = Vec::new();
    match typed {
        0 => {}
        1 => parts.push("1 --tenant-k override".to_owned()),
        count => parts.push(format!("{count} --tenant-k overrides")),
    }
    match own {
        0 => {}
        1 => parts.push("1 tenant with its own k or shards".to_owned()),
        count => parts.push(format!("{count} tenants with their own k or shards")),
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join("; "))
    }
}

/// Lays the report out as text.
/// `overrides`: the `--tenant-k` overrides, and the tenants placed by a
/// `k` or shards of their own from a gateway tenants file or the store.
fn render(report: &Report, fleet: &Fleet, overrides: (usize, usize)) -> String {
    let mut out = String::new();
    let zones = if fleet.zones().is_empty() {
        String::new()
    } else {
        format!(", zone-aware over {} zones", fleet.zones().len())
    };
    let overrides = overrides_note(overrides);
    out.push_str(&format!(
        "Blast radius: {} tenants on {} shards, k = {}{overrides}, {}{zones}\n\n",
        report.placed.tenants, report.placed.shards, report.placed.k, report.placed.algorithm
    ));
    render_overlap(&mut out, &report.pairwise_overlap);
    if !report.scenarios.is_empty() {
        render_scenarios(&mut out, &report.scenarios);
    }
    if let Some(sweep) = &report.sweep {
        render_sweep(&mut out, sweep);
    }
    if let Some(waves) = &report.waves {
        render_waves(&mut out, waves, report.placed.tenants, fleet);
    }
    if let Some(load) = &report.load {
        render_load(&mut out, load, fleet);
    }
    if !report.poison.is_empty() {
        render_poison(&mut out, &report.poison, report.poison_after, fleet);
    }
    if let Some(sweep) = &report.poison_sweep {
        render_poison_sweep(&mut out, sweep, fleet);
    }
    if report.scenarios.is_empty()
        && report.sweep.is_none()
        && report.waves.is_none()
        && report.poison.is_empty()
        && report.poison_sweep.is_none()
    {
        out.push_str(
            "No failure scenario was asked for: add --fail SHARDS, --sweep F, --zone-outage, --waves FILE, --poison TENANT or --poison-sweep.\n",
        );
    }
    // Sections end in a blank line to separate them; the last needs none.
    let end = out.trim_end().len();
    out.truncate(end);
    out.push('\n');
    out
}

fn render_overlap(out: &mut String, overlap: &OverlapJson) {
    out.push_str(&format!(
        "Pairwise overlap: {} of tenant pairs share at least one shard.\n",
        percent(overlap.fraction)
    ));
    let mut table = Table::new(&[
        ("shared shards", Align::Right),
        ("pairs (measured)", Align::Right),
        ("expected", Align::Right),
    ]);
    let expected = overlap.expected_shared_counts.as_deref().unwrap_or(&[]);
    let rows = overlap.shared_counts.len().max(expected.len());
    for j in 0..rows {
        let cell = |values: &[f64]| values.get(j).map(|&f| percent(f)).unwrap_or_default();
        table.row(vec![
            j.to_string(),
            cell(&overlap.shared_counts),
            cell(expected),
        ]);
    }
    out.push_str(&table.render(2));
    if overlap.expected_shared_counts.is_none() {
        out.push_str("  (no expectation: a subset is larger than the fleet)\n");
    }
    out.push('\n');
}

fn render_scenarios(out: &mut String, scenarios: &[ScenarioJson]) {
    out.push_str(
        "Failure scenarios (fully down: every shard of the tenant failed; degraded: at least one):\n",
    );
    let mut table = Table::new(&[
        ("failed shards", Align::Left),
        ("fully down", Align::Right),
        ("degraded", Align::Right),
        ("capacity lost per degraded tenant", Align::Right),
    ]);
    for scenario in scenarios {
        table.row(vec![
            scenario.name.clone(),
            count_of(scenario.fully_down.count, scenario.fully_down.fraction),
            count_of(scenario.degraded.count, scenario.degraded.fraction),
            percent(scenario.capacity_lost),
        ]);
    }
    out.push_str(&table.render(2));
    out.push('\n');
}

fn render_sweep(out: &mut String, sweep: &SweepJson) {
    if sweep.sampled {
        out.push_str(&format!(
            "Sweep: a random sample of {} of the {} sets of {} failed shards, none drawn twice (seed {}; raise --max-sets to evaluate them all).\n",
            sweep.sets,
            sweep.total_sets,
            sweep.failures,
            sweep.seed.unwrap_or_default()
        ));
    } else {
        out.push_str(&format!(
            "Sweep: all {} sets of {} failed shards.\n",
            sweep.sets, sweep.failures
        ));
    }
    // The worst of a sample is only the worst of the sets drawn: a lower
    // bound on the true worst, and labelled so.
    let (worst_header, at_least) = if sweep.sampled {
        ("worst seen (lower bound)", ">= ")
    } else {
        ("worst", "")
    };
    let mut table = Table::new(&[
        ("", Align::Left),
        (worst_header, Align::Right),
        ("worst failed shards", Align::Left),
        ("mean", Align::Right),
        ("p50", Align::Right),
        ("p99", Align::Right),
    ]);
    for (name, figure) in [
        ("fully down", &sweep.fully_down),
        ("degraded", &sweep.degraded),
    ] {
        table.row(vec![
            name.to_owned(),
            format!(
                "{at_least}{}",
                count_of(figure.worst.count, figure.worst.fraction)
            ),
            // A worst of zero is no worst at all: the set that happened to
            // come first would only mislead.
            if figure.worst.count > 0 {
                shard_list(&figure.worst.failed)
            } else {
                "-".to_owned()
            },
            percent(figure.mean),
            percent(figure.p50),
            percent(figure.p99),
        ]);
    }
    out.push_str(&table.render(2));
    if sweep.sampled {
        out.push_str(&format!(
            "  >= marks a lower bound: the worst of {} distinct sets drawn; the worst of all {} may be higher.\n",
            sweep.sets, sweep.total_sets
        ));
    }
    out.push_str(SWEEP_TERMS);
    out.push('\n');
}

/// What the sweep's columns mean, under every sweep table.
const SWEEP_TERMS: &str = "  mean, p50, p99: over the failure sets, of the share of tenants; p50 and p99 are nearest-rank percentiles (the smallest value at least 50% / 99% of the sets do not exceed).\n";

fn render_waves(out: &mut String, waves: &[WaveJson], tenants: u64, fleet: &Fleet) {
    out.push_str(
        "Deployment waves (fully exposed: every shard of the tenant is in the wave; touched: at least one):\n",
    );
    let mut table = Table::new(&[
        ("wave", Align::Left),
        ("shards", Align::Left),
        ("fully exposed", Align::Right),
        ("touched", Align::Right),
    ]);
    for wave in waves {
        table.row(vec![
            wave.wave.clone(),
            wave_shards_cell(&wave.shards, fleet),
            count_of(wave.fully_exposed.count, wave.fully_exposed.fraction),
            count_of(wave.touched.count, wave.touched.fraction),
        ]);
    }
    out.push_str(&table.render(2));
    let total = total_fully_exposed(waves, tenants);
    // The first wave with the largest count, so ties name the earlier wave.
    let worst = waves
        .iter()
        .rev()
        .max_by_key(|wave| wave.fully_exposed.count);
    match worst {
        Some(worst) if total.count > 0 => out.push_str(&format!(
            "  The worst wave, {}, fully exposes {} tenants; {} sit inside a single wave in all (`shuffle-shard plan-waves` proposes waves that keep this low).\n",
            worst.wave,
            count_of(worst.fully_exposed.count, worst.fully_exposed.fraction),
            count_of(total.count, total.fraction)
        )),
        _ => out.push_str(
            "  No tenant has every shard in one wave: a bad deploy to any one wave fully downs nobody.\n",
        ),
    }
    out.push('\n');
}

/// Shard ids for a table cell, or `?` for a bound with no crashed set.
/// A poison figure's cells: crashed shards, fully down, others fully down
/// and degraded, each marked `<=` when it is a bound.
fn figure_cells(figure: &PoisonFigureJson, fleet: &Fleet) -> [String; 4] {
    let bound = at_most(figure.exact);
    [
        crashed_cell(&figure.crashed, fleet),
        format!(
            "{bound}{}",
            count_of(figure.fully_down.count, figure.fully_down.fraction)
        ),
        format!("{bound}{}", figure.others_fully_down),
        format!(
            "{bound}{}",
            count_of(figure.degraded.count, figure.degraded.fraction)
        ),
    ]
}

fn crashed_cell(crashed: &[ShardIndex], fleet: &Fleet) -> String {
    if crashed.is_empty() {
        "(any; bound)".to_owned()
    } else {
        fleet.ids(crashed).collect::<Vec<_>>().join(",")
    }
}

/// "≤ " before a figure that is an upper bound.
fn at_most(exact: bool) -> &'static str {
    if exact { "" } else { "<= " }
}

fn render_poison(
    out: &mut String,
    poison: &[PoisonJson],
    poison_after: Option<usize>,
    fleet: &Fleet,
) {
    out.push_str(
        "Poison tenants (fully down: subset inside the crashed shards, the poison tenant included; degraded: shares a crashed shard, not fully down):\n",
    );
    let contained_label = match poison_after {
        Some(0) | None => None,
        Some(after) => Some(format!("at most {after} crash (worst case)")),
    };
    let mut table = Table::new(&[
        ("tenant", Align::Left),
        ("k", Align::Right),
        ("containment", Align::Left),
        ("crashed shards", Align::Left),
        ("fully down", Align::Right),
        ("others fully down", Align::Right),
        ("degraded", Align::Right),
    ]);
    for entry in poison {
        let mut figures = vec![("none: whole subset crashes".to_owned(), &entry.uncontained)];
        if let (Some(label), Some(contained)) = (&contained_label, &entry.contained) {
            figures.push((label.clone(), contained));
        }
        for (row, (label, figure)) in figures.into_iter().enumerate() {
            let (tenant, k) = if row == 0 {
                (entry.tenant.clone(), entry.k.to_string())
            } else {
                (String::new(), String::new())
            };
            let mut cells = vec![tenant, k, label];
            cells.extend(figure_cells(figure, fleet));
            table.row(cells);
        }
    }
    out.push_str(&table.render(2));
    for entry in poison.iter().filter(|entry| !entry.in_population) {
        out.push_str(&format!(
            "  {} is not in the population: the counts are of the population's tenants.\n",
            entry.tenant
        ));
    }
    if poison
        .iter()
        .any(|entry| entry.contained.as_ref().is_some_and(|figure| !figure.exact))
    {
        out.push_str(
            "  <= marks an upper bound: too many choices of crashed members to enumerate.\n",
        );
    }
    out.push('\n');
}

fn render_poison_sweep(out: &mut String, sweep: &PoisonSweepJson, fleet: &Fleet) {
    let containment = match sweep.poison_after {
        Some(after) if after > 0 => {
            format!("at most {after} members of each subset crash (the worst choice)")
        }
        _ => "each poison tenant's whole subset crashes".to_owned(),
    };
    out.push_str(&format!(
        "Poison sweep: every one of {} tenants ({} distinct subsets) as a poison tenant; {containment}.\n",
        sweep.tenants, sweep.distinct_subsets
    ));
    out.push_str(&format!(
        "  {} tenants' poison fully downs at least one other tenant. The worst:\n",
        count_of(sweep.downing_others.count, sweep.downing_others.fraction)
    ));
    let mut table = Table::new(&[
        ("tenant", Align::Left),
        ("k", Align::Right),
        ("crashed shards", Align::Left),
        ("fully down", Align::Right),
        ("others fully down", Align::Right),
        ("degraded", Align::Right),
    ]);
    for ranked in &sweep.worst {
        let mut cells = vec![ranked.tenant.clone(), ranked.k.to_string()];
        cells.extend(figure_cells(&ranked.figure, fleet));
        table.row(cells);
    }
    out.push_str(&table.render(2));
    if !sweep.exact {
        out.push_str(
            "  <= marks an upper bound: too many choices of crashed members to enumerate.\n",
        );
    }
    out.push('\n');
}

fn render_load(out: &mut String, load: &LoadJson, fleet: &Fleet) {
    let id = |index: ShardIndex| fleet.shard(index).id.as_str();
    out.push_str("Load (each tenant's weight split evenly over its shards):\n");
    out.push_str(&format!(
        "  mean {} per shard, coefficient of variation {:.3}, hottest shard {} at {:.2}x the mean\n",
        number(load.mean),
        load.cv,
        id(load.hottest),
        load.max_over_mean
    ));
    let dominant: Vec<String> = load
        .dominant
        .iter()
        .map(|tenant| format!("{} ({})", tenant.tenant, percent(tenant.share)))
        .collect();
    out.push_str(&format!(
        "  tenants dominating shard {}: {}\n",
        id(load.hottest),
        dominant.join(", ")
    ));
    if let Some(capacity) = load.capacity {
        let over_after_failure = load.failover.iter().filter(|f| f.over_capacity).count();
        if load.over_capacity.is_empty() {
            out.push_str(&format!(
                "  no shard is over capacity {} in steady state",
                number(capacity)
            ));
        } else {
            let ids: Vec<&str> = load.over_capacity.iter().map(|&s| id(s)).collect();
            out.push_str(&format!(
                "  OVER CAPACITY {} in steady state: shard(s) {}",
                number(capacity),
                ids.join(",")
            ));
        }
        out.push_str(&format!(
            "; {over_after_failure} of {} single-shard failures push a survivor over it\n",
            load.failover.len()
        ));
    }

    let mut order: Vec<usize> = (0..load.per_shard.len()).collect();
    order.sort_by(|&a, &b| {
        load.per_shard[b]
            .total_cmp(&load.per_shard[a])
            .then(a.cmp(&b))
    });
    let shown = if order.len() > ALL_SHARD_ROWS {
        LOAD_ROWS
    } else {
        order.len()
    };
    let capacity = load.capacity;
    let flag = |over: bool| if over { "OVER" } else { "" }.to_owned();
    let mut columns = vec![
        ("shard", Align::Left),
        ("load", Align::Right),
        ("x mean", Align::Right),
    ];
    if capacity.is_some() {
        columns.push(("", Align::Left));
    }
    columns.extend([
        ("if it fails: hottest survivor", Align::Left),
        ("its load", Align::Right),
    ]);
    if capacity.is_some() {
        columns.push(("", Align::Left));
    }
    let mut table = Table::new(&columns);
    for &shard in &order[..shown] {
        let steady = load.per_shard[shard];
        let failover = &load.failover[shard];
        let mut row = vec![
            id(shard as ShardIndex).to_owned(),
            number(steady),
            format!("{:.2}", steady / load.mean),
        ];
        if capacity.is_some() {
            row.push(flag(load.over_capacity.contains(&(shard as ShardIndex))));
        }
        row.extend([id(failover.hottest).to_owned(), number(failover.load)]);
        if capacity.is_some() {
            row.push(flag(failover.over_capacity));
        }
        table.row(row);
    }
    out.push_str(&table.render(2));
    if shown < order.len() {
        out.push_str(&format!(
            "  ... {} more shards, less loaded; --json lists every shard\n",
            order.len() - shown
        ));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_sets_are_shard_ids() {
        let fleet = Fleet::uniform(16).unwrap();
        let set = failure_set(&fleet, "3, 15").unwrap();
        assert_eq!(set.shards, vec![3, 15]);
        assert_eq!(set.name, "3, 15");
        let error = failure_set(&fleet, "3,16").unwrap_err().to_string();
        assert!(
            error.contains("\"16\"") && error.contains("16 shards"),
            "{error}"
        );
        let error = failure_set(&fleet, "3,3").unwrap_err().to_string();
        assert!(error.contains("listed twice"), "{error}");
        let error = failure_set(&fleet, "3,,4").unwrap_err().to_string();
        assert!(error.contains("empty entry"), "{error}");
    }

    #[test]
    fn sweeps_are_checked_before_any_work() {
        assert!(check_sweep(2, 8, 10).is_ok());
        let error = format!("{:#}", check_sweep(9, 8, 10).unwrap_err());
        assert!(
            error.starts_with("--sweep 9: cannot fail 9 shards out of 8"),
            "{error}"
        );
        assert!(check_sweep(0, 8, 10).is_err());
        assert!(check_sweep(1, 8, 0).is_err());
    }

    #[test]
    fn capacity_needs_weights_and_a_positive_number() {
        let weighted = Population::parse("a\t1\nb\t2\n").unwrap();
        let plain = Population::synthetic(2);
        assert_eq!(check_capacity(None, &plain).unwrap(), None);
        assert_eq!(check_capacity(Some(3.0), &weighted).unwrap(), Some(3.0));
        assert!(check_capacity(Some(3.0), &plain).is_err());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(check_capacity(Some(bad), &weighted).is_err(), "{bad}");
        }
    }
}
