//! The `plan-waves` subcommand: proposes an assignment of shards to
//! deployment waves that keeps few tenants inside a single wave, and shows
//! it next to the naive round-robin assignment so the gain is visible.
//!
//! A tenant whose every shard is in one wave is fully exposed to a bad
//! deploy of that wave. The proposal comes from the `analysis` crate; this
//! module checks the input, shows progress, lays the two assignments out
//! side by side and writes the proposal as a waves file that
//! `blast --waves` reads back.

use std::fs;
use std::path::PathBuf;

use analysis::Placements;
use analysis::answers::{Count, PlacedJson, WaveJson, total_fully_exposed};
use analysis::waves::{self, Waves};
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use placement::{Fleet, ShardIndex};
use serde::Serialize;

use crate::blast::wave_shards_cell;
use crate::output::print_answer;
use crate::placement_args::{PlacementArgs, PlacementSetup, print_note};
use crate::population_args::{PopulationArgs, place_all, placed};
use crate::progress::with_progress;
use crate::table::{Align, Table, count_of};

const AFTER_HELP: &str = "\
A tenant is fully exposed to a wave when every one of its shards is in that \
wave: a bad deploy there takes it fully down. The proposal splits the shards \
into W waves of equal size (give or take one) and swaps shards between waves \
while that lowers the number of fully exposed tenants (a local search: good, \
not proven optimal, and the same for the same input). It is shown next to \
round-robin, shard i in wave i mod W, which it never does worse than.

Examples:
  shuffle-shard plan-waves --shards 12 --k 2 --tenants 1000 --waves 3
  shuffle-shard plan-waves --shards 64 --k 3 --tenants-file tenants.txt --waves 4 \\
      --out waves.txt
  shuffle-shard blast --shards 64 --k 3 --tenants-file tenants.txt --waves waves.txt

The --out file has one `SHARD_ID WAVE` line per shard, the format \
`blast --waves` reads.";

/// Arguments of `shuffle-shard plan-waves`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct PlanWavesArgs {
    #[command(flatten)]
    placement: PlacementArgs,

    #[command(flatten)]
    population: PopulationArgs,

    /// Number of deployment waves, from 2 to the number of shards
    #[arg(long, value_name = "W")]
    waves: usize,

    /// Write the proposed assignment to PATH as a waves file for
    /// `blast --waves`
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,

    /// Print one JSON document instead of the table
    #[arg(long)]
    json: bool,
}

/// The proposal and round-robin, for the fleet and population they were
/// measured on.
#[derive(Serialize)]
struct Report {
    #[serde(flatten)]
    placed: PlacedJson,
    /// The number of waves asked for.
    wave_count: usize,
    proposed: AssignmentJson,
    round_robin: AssignmentJson,
    /// Where the proposal was written, or `null` without `--out`.
    out: Option<String>,
}

/// One assignment of shards to waves and what it exposes.
#[derive(Serialize)]
struct AssignmentJson {
    /// Tenants fully exposed to some wave (each to at most one).
    fully_exposed: Count,
    waves: Vec<WaveJson>,
}

impl AssignmentJson {
    fn measure(placements: &Placements, assignment: &Waves) -> Self {
        let waves: Vec<WaveJson> = waves::exposure(placements, assignment)
            .into_iter()
            .map(WaveJson::from)
            .collect();
        Self {
            fully_exposed: total_fully_exposed(&waves, placements.len() as u64),
            waves,
        }
    }
}

/// Runs `shuffle-shard plan-waves`.
pub fn run(args: PlanWavesArgs) -> Result<()> {
    // Every check that does not need the placements runs first, so that a
    // mistake is reported at once rather than after placing.
    let (PlacementSetup { placer, key_note }, tenants) = placed(&args.placement, &args.population)?;
    let population = &tenants.population;
    let fleet = placer.fleet();
    let n = fleet.len();
    let count = args.waves;
    if n < 2 {
        bail!(
            "--waves {count}: a fleet of {n} shard cannot be split into waves; it needs 2 shards or more"
        );
    }
    if count < 2 || count > n {
        bail!("--waves {count}: cannot split {n} shards into {count} waves; choose from 2 to {n}");
    }
    let round_robin = round_robin(fleet, count)?;

    let placements = place_all(&placer, population);
    let proposal = with_progress(&format!("planning {count} waves"), |_| {
        waves::plan_waves(&placements, count)
    })
    .with_context(|| format!("--waves {count}"))?;
    let report = Report {
        placed: PlacedJson::new(&placer, placements.len() as u64),
        wave_count: count,
        proposed: AssignmentJson::measure(&placements, &proposal),
        round_robin: AssignmentJson::measure(&placements, &round_robin),
        out: args.out.as_ref().map(|path| path.display().to_string()),
    };
    if let Some(path) = &args.out {
        fs::write(path, waves_file(&report, &proposal, fleet)).with_context(|| {
            format!(
                "cannot write the waves file to {}; check that the directory exists and is writable",
                path.display()
            )
        })?;
    }
    print_note(key_note);
    tenants.print_notes();
    let _flow = print_answer(args.json, &report, |report| render(report, fleet))?;
    Ok(())
}

/// Shard `i` in wave `i mod count`, with the names the proposal uses, so
/// that the two line up wave by wave.
fn round_robin(fleet: &Fleet, count: usize) -> Result<Waves> {
    let text: String = (0..fleet.len())
        .map(|index| {
            format!(
                "{} wave-{}\n",
                fleet.shard(index as ShardIndex).id,
                index % count + 1
            )
        })
        .collect();
    Waves::parse(&text, fleet).map_err(|error| anyhow!("round-robin waves: {error}"))
}

/// The proposal as a waves file: a comment saying where it came from, then
/// one `SHARD_ID WAVE` line per shard, grouped by wave in wave order, so that
/// the file reads as the deploy order and `blast --waves` lists the waves in
/// the same order as here.
fn waves_file(report: &Report, proposal: &Waves, fleet: &Fleet) -> String {
    let lines: String = (0..proposal.names().len())
        .flat_map(|wave| {
            proposal
                .members(wave)
                .into_iter()
                .map(move |shard| format!("{} {}\n", fleet.shard(shard).id, proposal.names()[wave]))
        })
        .collect();
    format!(
        "# Deployment waves proposed by `shuffle-shard plan-waves` for {} tenants on {} shards, k = {}, {}.\n\
         # Fully exposed (every shard in one wave): {}; round-robin: {}.\n\
         # SHARD_ID WAVE\n{}",
        report.placed.tenants,
        report.placed.shards,
        report.placed.k,
        report.placed.algorithm,
        count_of(
            report.proposed.fully_exposed.count,
            report.proposed.fully_exposed.fraction
        ),
        count_of(
            report.round_robin.fully_exposed.count,
            report.round_robin.fully_exposed.fraction
        ),
        lines
    )
}

/// Lays the two assignments out side by side, wave by wave.
fn render(report: &Report, fleet: &Fleet) -> String {
    let count = report.wave_count;
    let mut out = format!(
        "Deployment waves: {} tenants on {} shards, k = {}, {}, in {count} waves\n\n",
        report.placed.tenants, report.placed.shards, report.placed.k, report.placed.algorithm
    );
    out.push_str(&format!(
        "Fully exposed: every shard of the tenant in the wave, so a bad deploy there takes it fully down. Proposed next to round-robin (shard i in wave i mod {count}):\n"
    ));
    let mut table = Table::new(&[
        ("wave", Align::Left),
        ("proposed shards", Align::Left),
        ("fully exposed", Align::Right),
        ("touched", Align::Right),
        ("round-robin shards", Align::Left),
        ("fully exposed", Align::Right),
        ("touched", Align::Right),
    ]);
    for (proposed, naive) in report.proposed.waves.iter().zip(&report.round_robin.waves) {
        table.row(vec![
            proposed.wave.clone(),
            wave_shards_cell(&proposed.shards, fleet),
            count_of(
                proposed.fully_exposed.count,
                proposed.fully_exposed.fraction,
            ),
            count_of(proposed.touched.count, proposed.touched.fraction),
            wave_shards_cell(&naive.shards, fleet),
            count_of(naive.fully_exposed.count, naive.fully_exposed.fraction),
            count_of(naive.touched.count, naive.touched.fraction),
        ]);
    }
    let (proposed, naive) = (
        &report.proposed.fully_exposed,
        &report.round_robin.fully_exposed,
    );
    table.row(vec![
        "all waves".to_owned(),
        String::new(),
        count_of(proposed.count, proposed.fraction),
        String::new(),
        String::new(),
        count_of(naive.count, naive.fraction),
    ]);
    out.push_str(&table.render(2));
    out.push('\n');

    let gain = naive.count.saturating_sub(proposed.count);
    if gain > 0 {
        out.push_str(&format!(
            "The proposal leaves {} tenants inside a single wave, against {} for round-robin: {gain} fewer tenants a bad deploy can take fully down.\n",
            count_of(proposed.count, proposed.fraction),
            count_of(naive.count, naive.fraction),
        ));
    } else {
        out.push_str(&format!(
            "The proposal is no better than round-robin here: both leave {} tenants inside a single wave.\n",
            count_of(naive.count, naive.fraction),
        ));
    }
    match &report.out {
        Some(path) => out.push_str(&format!(
            "Wrote the proposal to {path}; check it with `shuffle-shard blast ... --waves {path}`.\n"
        )),
        None => out.push_str("Write the proposal as a waves file with --out PATH.\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_deals_shards_in_turn() {
        let fleet = Fleet::uniform(7).unwrap();
        let waves = round_robin(&fleet, 3).unwrap();
        assert_eq!(waves.names(), ["wave-1", "wave-2", "wave-3"]);
        assert_eq!(waves.members(0), vec![0, 3, 6]);
        assert_eq!(waves.members(1), vec![1, 4]);
        assert_eq!(waves.members(2), vec![2, 5]);
    }
}
