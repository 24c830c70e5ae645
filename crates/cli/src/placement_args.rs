//! The placement options every subcommand shares (`--shards`, `--zones`,
//! `--algorithm`, `--key-file`, `--key-env`, `--k`, `--tenant-k`), parsed
//! once here so that `place` and the analysers place tenants identically.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use clap::builder::{PossibleValue, StringValueParser, TypedValueParser};
use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer, TenantOverride};

/// The largest fleet a command builds.
///
/// The placement crate materialises every shard id, at roughly 170 bytes
/// per shard (measured), so an accidental `--shards 4000000000` would try to
/// allocate hundreds of gigabytes. Ten million shards is far beyond any real
/// fleet and still builds in under two gigabytes.
pub const MAX_SHARDS: u32 = 10_000_000;

/// The note printed when no key is given. Every command prints it at most
/// once, and only once its input has been checked, so that a run that fails
/// on bad input prints exactly one line on stderr.
pub const RECIPE_KEY_NOTE: &str = "note: no --key-file or --key-env given; using the public recipe key \"shuffle-shard-v1\" \
     (fine for analysis, never for serving traffic)";

/// The fleet, algorithm and key: everything about a placement except `k`.
///
/// `plan` uses this alone because it chooses `k` itself; every other
/// command uses it through [`PlacementArgs`].
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Number of shards, with ids 0 to N-1 [required unless --zones is given]
    ///
    /// With --zones it may be left out; if given, it must equal the total of
    /// the zone counts, as a check that the spec says what you meant.
    #[arg(long, value_name = "N")]
    pub shards: Option<u32>,

    /// Subset-selection algorithm
    #[arg(
        long,
        value_name = "NAME",
        default_value = "hmac-modulo",
        value_parser = AlgorithmName
    )]
    pub algorithm: String,

    /// File whose raw bytes are the placement key
    ///
    /// The bytes are used verbatim: a trailing newline is part of the key.
    /// Write key files with `printf '%s' ...` or `head -c 32 /dev/urandom`,
    /// not `echo`, unless you mean it.
    #[arg(long, value_name = "PATH", conflicts_with = "key_env")]
    pub key_file: Option<PathBuf>,

    /// Environment variable holding the placement key as hex digits
    #[arg(long, value_name = "VAR")]
    pub key_env: Option<String>,

    /// Zone layout such as a:8,b:8; spreads each tenant's shards over zones
    ///
    /// Shards are numbered from 0 in consecutive runs: with a:8,b:8 shards
    /// 0-7 are in zone a and 8-15 in zone b. Each tenant's shards are spread
    /// over the zones as evenly as the zones allow.
    #[arg(long, value_name = "SPEC")]
    pub zones: Option<String>,
}

/// [`FleetArgs`] plus the subset size and per-tenant exceptions to it.
#[derive(Debug, Args)]
pub struct PlacementArgs {
    #[command(flatten)]
    pub fleet: FleetArgs,

    /// Shards per tenant (the subset size), from 1 to the number of shards [required]
    #[arg(short = 'k', long = "k", value_name = "K")]
    pub k: Option<u32>,

    /// Give one tenant its own subset size, e.g. --tenant-k acme=6 (repeatable)
    ///
    /// Typically a larger k for a large tenant, so that its load spreads
    /// wider. The last '=' separates the tenant id from K, so ids may
    /// themselves contain '='.
    #[arg(long = "tenant-k", value_name = "TENANT=K")]
    pub tenant_k: Vec<String>,
}

/// A checked fleet, algorithm and key, ready to build placers from.
pub struct FleetSetup {
    pub fleet: Fleet,
    pub algorithm: Algorithm,
    pub key: PlacementKey,
    pub zone_aware: bool,
    /// The recipe-key note, when no key was given.
    pub key_note: Option<&'static str>,
}

/// The zone sizes the closed-form overlap expects.
pub use analysis::overlap::zone_sizes;

/// A built placer and the note to print before output, if any.
pub struct PlacementSetup {
    pub placer: Placer,
    pub key_note: Option<&'static str>,
}

impl FleetArgs {
    /// Parses the algorithm, builds the fleet and loads the key, in that
    /// order, so that the cheapest mistakes are reported first.
    pub fn resolve(&self) -> Result<FleetSetup> {
        // Checked here rather than by clap so that `place --config`, which
        // shares these options, can do without them.
        if self.shards.is_none() && self.zones.is_none() {
            bail!("--shards is required (or --zones, which also defines the shards)");
        }
        let algorithm: Algorithm = self.algorithm.parse()?;
        let fleet = build_fleet(self.shards, self.zones.as_deref())?;
        let (key, key_note) = load_key(self.key_file.as_deref(), self.key_env.as_deref())?;
        Ok(FleetSetup {
            fleet,
            algorithm,
            key,
            zone_aware: self.zones.is_some(),
            key_note,
        })
    }
}

impl PlacementArgs {
    /// Builds the placer these options describe, overrides included.
    pub fn placer(&self) -> Result<PlacementSetup> {
        let setup = self.fleet.resolve()?;
        let overrides = parse_tenant_ks(&self.tenant_k)?;
        let k = self
            .k
            .ok_or_else(|| anyhow!("--k is required: the number of shards per tenant"))?;
        let config = PlacementConfig {
            algorithm: setup.algorithm,
            k,
            zone_aware: setup.zone_aware,
        };
        let mut placer = Placer::new(setup.fleet, &setup.key, config)?;
        for (text, (tenant, k)) in self.tenant_k.iter().zip(overrides) {
            placer
                .set_override(tenant, TenantOverride::K(k))
                .with_context(|| format!("--tenant-k {text}"))?;
        }
        Ok(PlacementSetup {
            placer,
            key_note: setup.key_note,
        })
    }
}

impl PlacementArgs {
    /// The `--tenant-k` overrides, parsed and checked for repeats.
    pub fn overrides(&self) -> Result<Vec<(String, u32)>> {
        parse_tenant_ks(&self.tenant_k)
    }
}

/// Parses every `--tenant-k TENANT=K` and refuses a tenant named twice:
/// which of two sizes was meant cannot be guessed.
pub fn parse_tenant_ks(texts: &[String]) -> Result<Vec<(String, u32)>> {
    let mut parsed: Vec<(String, u32)> = Vec::with_capacity(texts.len());
    for text in texts {
        let (tenant, k) = parse_tenant_k(text)?;
        if let Some((_, earlier)) = parsed.iter().find(|(seen, _)| *seen == tenant) {
            bail!(
                "--tenant-k {text:?}: tenant {tenant:?} already has --tenant-k {tenant}={earlier}; give each tenant one --tenant-k"
            );
        }
        parsed.push((tenant, k));
    }
    Ok(parsed)
}

/// Splits `TENANT=K` at the last '=' and parses `K`.
pub fn parse_tenant_k(text: &str) -> Result<(String, u32)> {
    let (tenant, k) = text.rsplit_once('=').ok_or_else(|| {
        anyhow!("--tenant-k {text:?} has no '='; write TENANT=K, e.g. --tenant-k acme=6")
    })?;
    let k: u32 = k.trim().parse().map_err(|_| {
        anyhow!(
            "--tenant-k {text:?}: {k:?} is not a whole number; write TENANT=K, e.g. --tenant-k acme=6"
        )
    })?;
    Ok((tenant.to_owned(), k))
}

/// Prints the recipe-key note, if there is one, on stderr.
pub fn print_note(note: Option<&'static str>) {
    if let Some(note) = note {
        // Nothing useful can be done if stderr is gone; the note is advice.
        let _ = writeln!(io::stderr().lock(), "{note}");
    }
}

/// Lists the algorithm names in `--help` but accepts any name, which
/// [`FleetArgs::resolve`] then parses with the placement crate's own parser:
/// that way an unknown name gets the same one-line `error:` as every other
/// bad input, rather than clap's multi-line usage error.
#[derive(Debug, Clone, Copy)]
pub struct AlgorithmName;

impl TypedValueParser for AlgorithmName {
    type Value = String;

    fn parse_ref(
        &self,
        command: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        StringValueParser::new().parse_ref(command, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(Algorithm::ALL.into_iter().map(|algorithm| {
            let help = match algorithm {
                Algorithm::HmacModulo => "Recipe 12.1, bit-exact with the design chapter",
                Algorithm::Rendezvous => {
                    "highest random weight; moves the fewest tenants when the fleet changes"
                }
            };
            PossibleValue::new(algorithm.name()).help(help)
        })))
    }
}

/// Builds the fleet from `--shards` and `--zones`.
pub fn build_fleet(shards: Option<u32>, zones: Option<&str>) -> Result<Fleet> {
    match (zones, shards) {
        (Some(spec), shards) => {
            let declared = declared_zone_total(spec);
            if declared > u64::from(MAX_SHARDS) {
                bail!(
                    "--zones {spec:?} declares {declared} shards, more than the {MAX_SHARDS} this command supports; check the counts"
                );
            }
            let fleet = Fleet::from_zone_spec(spec)?;
            if let Some(n) = shards
                && u64::from(n) != fleet.len() as u64
            {
                bail!(
                    "--shards {n} does not match --zones {spec:?}, which declares {} shards; drop --shards or make it equal the zone total",
                    fleet.len()
                );
            }
            Ok(fleet)
        }
        (None, Some(0)) => {
            bail!("--shards 0 leaves nothing to place tenants on; pass --shards 1 or more")
        }
        (None, Some(n)) if n > MAX_SHARDS => bail!(
            "--shards {n} is more than the {MAX_SHARDS} shards this command supports; check the number"
        ),
        (None, Some(n)) => Ok(Fleet::uniform(n)?),
        // clap already requires one of the two; this keeps the function
        // total rather than trusting that.
        (None, None) => {
            bail!("give the fleet size with --shards N or a zone layout with --zones SPEC")
        }
    }
}

/// The shard total a zone spec asks for, read leniently: parts that do not
/// parse count as zero here and are reported by `Fleet::from_zone_spec`.
/// It only exists to refuse huge fleets before allocating them.
pub fn declared_zone_total(spec: &str) -> u64 {
    spec.split(',')
        .filter_map(|part| part.split_once(':'))
        .filter_map(|(_, count)| count.trim().parse::<u64>().ok())
        .fold(0, u64::saturating_add)
}

/// Loads the key from `--key-file` or `--key-env`, or falls back to the
/// recipe key with a note for the caller to print once its input is known
/// to be good.
pub fn load_key(
    key_file: Option<&std::path::Path>,
    key_env: Option<&str>,
) -> Result<(PlacementKey, Option<&'static str>)> {
    match (key_file, key_env) {
        (Some(_), Some(_)) => {
            bail!("--key-file and --key-env both give a key; pass only one of them")
        }
        (Some(path), None) => Ok((keys::from_file(path)?, None)),
        (None, Some(var)) => Ok((keys::from_env(var)?, None)),
        (None, None) => Ok((PlacementKey::recipe_default(), Some(RECIPE_KEY_NOTE))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_total_is_lenient() {
        assert_eq!(declared_zone_total("a:8,b:8"), 16);
        assert_eq!(declared_zone_total(" a : 2 , b:x, c"), 2);
        assert_eq!(declared_zone_total("a:18446744073709551615,b:1"), u64::MAX);
    }

    #[test]
    fn fleet_checks() {
        assert_eq!(build_fleet(Some(3), None).unwrap().len(), 3);
        assert_eq!(build_fleet(None, Some("a:2,b:2")).unwrap().len(), 4);
        assert_eq!(build_fleet(Some(4), Some("a:2,b:2")).unwrap().len(), 4);
        let mismatch = build_fleet(Some(5), Some("a:2,b:2"))
            .unwrap_err()
            .to_string();
        assert!(
            mismatch.contains("--shards 5") && mismatch.contains("declares 4"),
            "{mismatch}"
        );
        assert!(build_fleet(Some(0), None).is_err());
        assert!(build_fleet(Some(MAX_SHARDS + 1), None).is_err());
        assert!(build_fleet(None, Some("a:4000000000")).is_err());
        assert!(build_fleet(None, None).is_err());
    }

    #[test]
    fn help_lists_every_algorithm() {
        let listed: Vec<String> = AlgorithmName
            .possible_values()
            .unwrap()
            .map(|value| value.get_name().to_owned())
            .collect();
        let expected: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(listed, expected);
        for name in &listed {
            assert!(name.parse::<Algorithm>().is_ok(), "{name}");
        }
    }

    #[test]
    fn tenant_k_splits_at_the_last_equals() {
        assert_eq!(parse_tenant_k("acme=6").unwrap(), ("acme".into(), 6));
        assert_eq!(parse_tenant_k("a=b=3").unwrap(), ("a=b".into(), 3));
        assert_eq!(parse_tenant_k("=2").unwrap(), (String::new(), 2));
        let error = parse_tenant_k("acme").unwrap_err().to_string();
        assert!(error.contains("no '='"), "{error}");
        let error = parse_tenant_k("acme=x").unwrap_err().to_string();
        assert!(error.contains("not a whole number"), "{error}");
    }

    #[test]
    fn unzoned_fleets_have_one_zone_for_the_expectation() {
        let args = FleetArgs {
            shards: Some(8),
            algorithm: "rendezvous".into(),
            key_file: None,
            key_env: None,
            zones: None,
        };
        let setup = args.resolve().unwrap();
        assert_eq!(zone_sizes(&setup.fleet, setup.zone_aware), vec![8]);
        assert!(setup.key_note.is_some());

        let zoned = FleetArgs {
            shards: None,
            zones: Some("a:3,b:5".into()),
            ..args
        };
        let setup = zoned.resolve().unwrap();
        assert_eq!(zone_sizes(&setup.fleet, setup.zone_aware), vec![3, 5]);
    }
}
