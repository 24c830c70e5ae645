//! The `migrate` subcommand: what changing the placement (fleet size, zones,
//! k, algorithm or key version) costs across a population, next to the same
//! change under the other algorithm.

use std::collections::HashMap;
use std::path::PathBuf;

use analysis::answers::{self, MigrateReport, MigrationSpec, other_algorithm};
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use placement::{Algorithm, PlacementConfig, PlacementKey, Placer};

use crate::output::print_answer;
use crate::placement_args::{build_fleet, print_note};
use crate::population_args::PopulationArgs;
use crate::progress::Bars;
use crate::table::{Align, Table, percent};

/// The key version that means the public recipe key.
const RECIPE_VERSION: &str = "recipe";

const AFTER_HELP: &str = "\
A SPEC is name=value items separated by spaces or ';': shards=N, k=K, \
algorithm=hmac-modulo|rendezvous (default hmac-modulo), key=VERSION (default \
recipe, the public recipe key) and zones=a:32,b:32 (shards may then be left \
out). Give the key of any other version with --key VERSION=PATH.

Examples:
  shuffle-shard migrate --from 'shards=20 k=3 algorithm=rendezvous' \\
      --to 'shards=21 k=3 algorithm=rendezvous' --tenants 100000
  shuffle-shard migrate --from 'shards=64 k=3 key=v1' --to 'shards=64 k=2 key=v1' \\
      --key v1=placement.key --tenants 100000 --lookback
  shuffle-shard migrate --from 'shards=64 k=3 key=v1' --to 'shards=64 k=3 key=v2' \\
      --key v1=old.key --key v2=new.key --tenants-file tenants.txt

The output also shows the same change under the other algorithm, for \
comparison: rendezvous moves about k/n of the tenants when a shard is \
added, hmac-modulo nearly all of them.";

/// Arguments of `shuffle-shard migrate`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct MigrateArgs {
    /// The placement today, e.g. 'shards=20 k=3 algorithm=rendezvous'
    #[arg(long, value_name = "SPEC")]
    from: String,

    /// The placement after the change, e.g. 'shards=21 k=3 algorithm=rendezvous'
    #[arg(long, value_name = "SPEC")]
    to: String,

    #[command(flatten)]
    population: PopulationArgs,

    /// Load key version VERSION from the raw bytes of PATH (repeatable)
    #[arg(long = "key", value_name = "VERSION=PATH")]
    keys: Vec<String>,

    /// Also say who depends on old members during a lookback window after
    /// the change (the gateway's reload.lookback_seconds): tenants that keep
    /// none of their members, and tenants that keep some and gain others
    #[arg(long)]
    lookback: bool,

    /// Print one JSON document instead of tables
    #[arg(long)]
    json: bool,
}

/// Fully dependent tenants the text names (`--json` names every one).
const LOOKBACK_NAMED: usize = 10;

/// One side of a migration, as parsed from a SPEC.
type Spec = MigrationSpec;

/// Parses a SPEC such as `shards=64 k=3 algorithm=rendezvous key=v1`.
fn parse_spec(flag: &str, text: &str) -> Result<Spec> {
    let mut shards = None;
    let mut k = None;
    let mut algorithm = None;
    let mut key = None;
    let mut zones = None;
    let mut seen: Vec<&str> = Vec::new();
    for item in text
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter(|item| !item.is_empty())
    {
        let (name, value) = item.split_once('=').ok_or_else(|| {
            anyhow!("{flag}: {item:?} is not name=value; write e.g. {flag} 'shards=64 k=3'")
        })?;
        if seen.contains(&name) {
            bail!("{flag}: {name} is given twice; give each item once");
        }
        seen.push(name);
        let number = |what: &str| -> Result<u32> {
            value.parse().map_err(|_| {
                anyhow!("{flag}: {what}={value:?} is not a whole number; write e.g. {what}=3")
            })
        };
        match name {
            "shards" => shards = Some(number("shards")?),
            "k" => k = Some(number("k")?),
            "algorithm" => {
                algorithm = Some(
                    value
                        .parse::<Algorithm>()
                        .with_context(|| flag.to_owned())?,
                );
            }
            "key" => key = Some(value.to_owned()),
            "zones" => zones = Some(value.to_owned()),
            _ => bail!(
                "{flag}: unknown item {name:?}; use shards, k, algorithm, key and zones, e.g. {flag} 'shards=64 k=3'"
            ),
        }
    }
    let k = k.ok_or_else(|| anyhow!("{flag} {text:?} has no k; add e.g. k=3"))?;
    if shards.is_none() && zones.is_none() {
        bail!("{flag} {text:?} has no fleet; add shards=N or zones=a:8,b:8");
    }
    Ok(Spec {
        shards,
        k,
        algorithm: algorithm.unwrap_or(Algorithm::HmacModulo),
        key: key.unwrap_or_else(|| RECIPE_VERSION.to_owned()),
        zones,
    })
}

/// Parses and loads every `--key VERSION=PATH`.
fn load_keys(keys: &[String]) -> Result<HashMap<String, PlacementKey>> {
    let mut loaded = HashMap::new();
    for text in keys {
        let (version, path) = text.split_once('=').ok_or_else(|| {
            anyhow!(
                "--key {text:?} has no '='; write --key VERSION=PATH, e.g. --key v1=placement.key"
            )
        })?;
        if version.is_empty() {
            bail!("--key {text:?} has an empty version; write --key VERSION=PATH");
        }
        if version == RECIPE_VERSION {
            bail!(
                "--key {text:?}: the version name {RECIPE_VERSION:?} means the public recipe key; give your key another name"
            );
        }
        if loaded.contains_key(version) {
            bail!("--key {version}=... is given twice; give each key version once");
        }
        let key =
            keys::from_file(&PathBuf::from(path)).with_context(|| format!("--key {version}"))?;
        loaded.insert(version.to_owned(), key);
    }
    Ok(loaded)
}

/// Builds the placer a spec describes.
fn placer(flag: &str, spec: &Spec, keys: &HashMap<String, PlacementKey>) -> Result<Placer> {
    let recipe = PlacementKey::recipe_default();
    let key = if spec.key == RECIPE_VERSION {
        &recipe
    } else {
        keys.get(&spec.key).ok_or_else(|| {
            anyhow!(
                "{flag}: key version {:?} was not given; pass --key {}=PATH, or key=recipe for the public recipe key",
                spec.key,
                spec.key
            )
        })?
    };
    let fleet = build_fleet(spec.shards, spec.zones.as_deref()).with_context(|| flag.to_owned())?;
    let config = PlacementConfig {
        algorithm: spec.algorithm,
        k: spec.k,
        zone_aware: spec.zones.is_some(),
    };
    Placer::new(fleet, key, config).with_context(|| flag.to_owned())
}

/// Runs `shuffle-shard migrate`.
pub fn run(args: MigrateArgs) -> Result<()> {
    let from = parse_spec("--from", &args.from)?;
    let to = parse_spec("--to", &args.to)?;
    let keys = load_keys(&args.keys)?;
    let mut tenants = args.population.load()?;
    // Tenants with their own k or shards (from a gateway tenants file or
    // the store) keep them on both sides, as the gateway would.
    let mut served = |flag: &str, spec: &Spec| -> Result<Placer> {
        let mut placer = placer(flag, spec, &keys)?;
        tenants
            .apply(&mut placer, None)
            .with_context(|| flag.to_owned())?;
        Ok(placer)
    };
    let before = served("--from", &from)?;
    let after = served("--to", &to)?;
    // The flipped placers are built before any work so that a spec valid
    // under one algorithm but not the other fails at once.
    let flipped = if from.algorithm == to.algorithm {
        let flip = |spec: &Spec| Spec {
            algorithm: other_algorithm(spec.algorithm),
            ..spec.clone()
        };
        Some((served("--from", &flip(&from))?, served("--to", &flip(&to))?))
    } else {
        None
    };
    let population = &tenants.population;

    let mut report = answers::migration(
        (&from, &before),
        (&to, &after),
        flipped.as_ref().map(|(before, after)| (before, after)),
        population,
        &Bars,
    );
    if args.lookback {
        report.lookback = Some(answers::lookback(&before, &after, population, &Bars));
    }
    if from.key == RECIPE_VERSION || to.key == RECIPE_VERSION {
        print_note(Some(
            "note: key=recipe (the default) is the public recipe key \"shuffle-shard-v1\" \
             (fine for analysis, never for serving traffic)",
        ));
    }
    tenants.print_notes();
    let _flow = print_answer(args.json, &report, render)?;
    Ok(())
}

fn render(report: &MigrateReport) -> String {
    let change = &report.change;
    let mut out = format!(
        "Migration of {} tenants\n  from: {}\n  to:   {}\n\n",
        report.tenants, report.from, report.to
    );
    out.push_str(&format!(
        "Tenants whose shards change: {} of {} ({}).\n",
        change.changed,
        report.tenants,
        percent(change.changed_fraction)
    ));
    out.push_str(&format!(
        "Shard assignments to create (members moved): {}; to remove (members dropped): {}.\n\n",
        change.members_moved, change.members_dropped
    ));
    let mut table = Table::new(&[
        ("members moved", Align::Right),
        ("tenants", Align::Right),
        ("share", Align::Right),
    ]);
    let tenants = report.tenants.max(1) as f64;
    for (moved, &count) in change.moved_per_tenant.iter().enumerate() {
        table.row(vec![
            moved.to_string(),
            count.to_string(),
            percent(count as f64 / tenants),
        ]);
    }
    out.push_str(&table.render(2));
    if !change.changed_sample.is_empty() {
        out.push_str(&format!(
            "  e.g. changed: {}\n",
            change.changed_sample.join(", ")
        ));
    }
    out.push('\n');
    match &report.comparison {
        Some(comparison) => out.push_str(&format!(
            "For comparison, the same change under {} would change {} of {} tenants ({}), move {} members and drop {}.\n",
            comparison.algorithm,
            comparison.change.changed,
            report.tenants,
            percent(comparison.change.changed_fraction),
            comparison.change.members_moved,
            comparison.change.members_dropped
        )),
        None => out.push_str(
            "No comparison: this change switches the algorithm itself, so there is no other algorithm to run it under.\n",
        ),
    }
    if let Some(lookback) = &report.lookback {
        out.push_str(&format!(
            "\nDuring a lookback window (reload.lookback_seconds), until their data is copied:\n  \
             {} tenants ({}) keep none of their members: every read needs an old member;\n  \
             {} tenants ({}) keep some and gain others: a read that lands on a new member needs another.\n",
            lookback.fully_dependent,
            percent(lookback.fully_dependent_fraction),
            lookback.partially_dependent,
            percent(lookback.partially_dependent_fraction),
        ));
        if !lookback.fully_dependent_tenants.is_empty() {
            let named = &lookback.fully_dependent_tenants
                [..lookback.fully_dependent_tenants.len().min(LOOKBACK_NAMED)];
            let more = lookback.fully_dependent_tenants.len() - named.len();
            out.push_str(&format!("  fully dependent: {}", named.join(", ")));
            if more > 0 {
                out.push_str(&format!(" and {more} more (--json lists every one)"));
            }
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_spaces_or_semicolons() {
        let spec = parse_spec(
            "--from",
            "shards=64 k=3;algorithm=rendezvous  key=v1;zones=a:32,b:32",
        )
        .unwrap();
        assert_eq!(
            spec,
            Spec {
                shards: Some(64),
                k: 3,
                algorithm: Algorithm::Rendezvous,
                key: "v1".into(),
                zones: Some("a:32,b:32".into()),
            }
        );
        let defaults = parse_spec("--to", "zones=a:2,b:2 k=1").unwrap();
        assert_eq!(defaults.algorithm, Algorithm::HmacModulo);
        assert_eq!(defaults.key, RECIPE_VERSION);
        assert_eq!(defaults.shards, None);
        assert_eq!(
            defaults.to_string(),
            "k=1 algorithm=hmac-modulo key=recipe zones=a:2,b:2"
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        for (text, fragment) in [
            ("shards=8", "has no k"),
            ("k=2", "has no fleet"),
            ("shards=8 k=2 colour=red", "unknown item \"colour\""),
            ("shards=8 k=x", "not a whole number"),
            ("shards=8 k=2 k=3", "given twice"),
            ("shards=8 k=2 algorithm=modulo", "unknown algorithm"),
            ("shards=8 k 2", "not name=value"),
        ] {
            let error = format!("{:#}", parse_spec("--from", text).unwrap_err());
            assert!(error.starts_with("--from"), "{text}: {error}");
            assert!(error.contains(fragment), "{text}: {error}");
        }
    }

    #[test]
    fn unknown_key_versions_are_refused() {
        let spec = parse_spec("--to", "shards=8 k=2 key=v9").unwrap();
        let error = format!("{:#}", placer("--to", &spec, &HashMap::new()).unwrap_err());
        assert!(
            error.contains("\"v9\"") && error.contains("--key v9=PATH"),
            "{error}"
        );
        assert!(load_keys(&["recipe=x".into()]).is_err());
        assert!(load_keys(&["nokey".into()]).is_err());
    }
}
