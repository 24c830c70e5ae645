//! The `place` subcommand: prints the shards each tenant is placed on, one
//! JSON object per line, for tenants given as arguments or streamed on stdin.

use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, Read, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use clap::builder::{PossibleValue, StringValueParser, TypedValueParser};
use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer, ShardIndex};
use serde::{Serialize, Serializer};

use crate::output::{Flow, JsonLines};

/// The largest fleet this command builds.
///
/// The placement crate materialises every shard id, at roughly 170 bytes
/// per shard (measured), so an accidental `--shards 4000000000` would try to
/// allocate hundreds of gigabytes. Ten million shards is far beyond any real
/// fleet and still builds in under two gigabytes.
const MAX_SHARDS: u32 = 10_000_000;

/// The longest tenant id accepted on stdin, in bytes.
///
/// Input without newlines (a binary file piped in by mistake) would otherwise
/// be buffered whole before the first tenant is placed.
const MAX_LINE_BYTES: usize = 1024 * 1024;

const AFTER_HELP: &str = "\
Output: one JSON object per tenant, in input order, with the shard indices in \
selection order, e.g. {\"tenant\":\"a\",\"shards\":[0,9,2,1]}. With \
--algorithm rendezvous each object also has \"ids\", the shard ids as strings.

Examples:
  shuffle-shard place --shards 10 --k 4 a
  shuffle-shard place --shards 64 --k 6 --key-file /etc/shuffle-shard/key < tenants.txt
  shuffle-shard place --zones a:8,b:8,c:8 --k 3 --algorithm rendezvous tenant-42

Without --key-file or --key-env the public recipe key \"shuffle-shard-v1\" is \
used, which reproduces the design chapter's Recipe 12.1 but lets anyone \
compute every placement: fine for analysis, never for serving traffic.";

/// Arguments of `shuffle-shard place`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct PlaceArgs {
    /// Number of shards, with ids 0 to N-1 [required unless --zones is given]
    ///
    /// With --zones it may be left out; if given, it must equal the total of
    /// the zone counts, as a check that the spec says what you meant.
    #[arg(long, value_name = "N", required_unless_present = "zones")]
    shards: Option<u32>,

    /// Shards per tenant (the subset size), from 1 to the number of shards
    #[arg(short = 'k', long = "k", value_name = "K")]
    k: u32,

    /// Subset-selection algorithm
    #[arg(
        long,
        value_name = "NAME",
        default_value = "hmac-modulo",
        value_parser = AlgorithmName
    )]
    algorithm: String,

    /// File whose raw bytes are the placement key
    ///
    /// The bytes are used verbatim: a trailing newline is part of the key.
    /// Write key files with `printf '%s' ...` or `head -c 32 /dev/urandom`,
    /// not `echo`, unless you mean it.
    #[arg(long, value_name = "PATH", conflicts_with = "key_env")]
    key_file: Option<PathBuf>,

    /// Environment variable holding the placement key as hex digits
    #[arg(long, value_name = "VAR")]
    key_env: Option<String>,

    /// Zone layout such as a:8,b:8; spreads each tenant's shards over zones
    ///
    /// Shards are numbered from 0 in consecutive runs: with a:8,b:8 shards
    /// 0-7 are in zone a and 8-15 in zone b. Each tenant's shards are spread
    /// over the zones as evenly as the zones allow.
    #[arg(long, value_name = "SPEC")]
    zones: Option<String>,

    /// Tenant ids to place; without any, reads one tenant id per line from stdin
    ///
    /// On stdin, a trailing "\n" or "\r\n" ends each line and empty lines are
    /// skipped; to place the empty tenant id, pass '' as an argument. Lines
    /// must be UTF-8: the first invalid line stops the command with status 2,
    /// after the lines before it have been printed. Put `--` before tenant
    /// ids that start with '-'.
    #[arg(value_name = "TENANT", value_parser = clap::value_parser!(OsString))]
    tenants: Vec<OsString>,
}

/// Lists the algorithm names in `--help` but accepts any name, which
/// [`run`] then parses with the placement crate's own parser: that way an
/// unknown name gets the same one-line `error:` as every other bad input,
/// rather than clap's multi-line usage error.
#[derive(Debug, Clone, Copy)]
struct AlgorithmName;

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

/// Runs `shuffle-shard place`.
pub fn run(args: PlaceArgs) -> Result<()> {
    // Everything that can be checked before output starts is checked first,
    // so that a bad invocation prints nothing on stdout.
    let algorithm: Algorithm = args.algorithm.parse()?;
    let tenants = tenant_args(args.tenants)?;
    let fleet = build_fleet(args.shards, args.zones.as_deref())?;
    let (key, key_note) = load_key(args.key_file, args.key_env)?;
    let config = PlacementConfig {
        algorithm,
        k: args.k,
        zone_aware: args.zones.is_some(),
    };
    let placer = Placer::new(fleet, &key, config)?;

    let mut emitter = Emitter {
        with_ids: algorithm == Algorithm::Rendezvous,
        placer: &placer,
        out: JsonLines::stdout(),
        subset: Vec::with_capacity(args.k as usize),
        note: key_note,
    };
    let placed = if tenants.is_empty() {
        place_stdin(&mut emitter)
    } else {
        place_all(&mut emitter, &tenants)
    };
    // Whatever was placed before an error is still written out, so that a
    // bad line in the middle of a stream does not lose the good ones.
    let flushed = emitter.out.flush();
    placed?;
    let _: Flow = flushed?;
    Ok(())
}

/// Converts the positional tenant ids, all before any output, so that one
/// bad argument fails the whole invocation.
fn tenant_args(tenants: Vec<OsString>) -> Result<Vec<String>> {
    tenants
        .into_iter()
        .enumerate()
        .map(|(position, tenant)| {
            tenant.into_string().map_err(|tenant| {
                anyhow!(
                    "tenant argument {} ({:?}) is not valid UTF-8; tenant ids must be UTF-8",
                    position + 1,
                    tenant.to_string_lossy()
                )
            })
        })
        .collect()
}

/// Builds the fleet from `--shards` and `--zones`.
fn build_fleet(shards: Option<u32>, zones: Option<&str>) -> Result<Fleet> {
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
fn declared_zone_total(spec: &str) -> u64 {
    spec.split(',')
        .filter_map(|part| part.split_once(':'))
        .filter_map(|(_, count)| count.trim().parse::<u64>().ok())
        .fold(0, u64::saturating_add)
}

/// Loads the key from `--key-file` or `--key-env`, or falls back to the
/// recipe key with a note to print once output starts.
fn load_key(
    key_file: Option<PathBuf>,
    key_env: Option<String>,
) -> Result<(PlacementKey, Option<&'static str>)> {
    match (key_file, key_env) {
        (Some(_), Some(_)) => {
            bail!("--key-file and --key-env both give a key; pass only one of them")
        }
        (Some(path), None) => Ok((keys::from_file(&path)?, None)),
        (None, Some(var)) => Ok((keys::from_env(&var)?, None)),
        (None, None) => Ok((
            PlacementKey::recipe_default(),
            Some(
                "note: no --key-file or --key-env given; using the public recipe key \"shuffle-shard-v1\" \
                 (fine for analysis, never for serving traffic)",
            ),
        )),
    }
}

/// Places tenants one at a time into a reused buffer and writes them out.
struct Emitter<'a> {
    placer: &'a Placer,
    out: JsonLines<io::BufWriter<io::StdoutLock<'static>>>,
    subset: Vec<ShardIndex>,
    with_ids: bool,
    /// Printed before the first placement, so that runs that fail before
    /// placing anyone print exactly one line on stderr.
    note: Option<&'static str>,
}

impl Emitter<'_> {
    fn place(&mut self, tenant: &str) -> Result<Flow> {
        if let Some(note) = self.note.take() {
            let _ = writeln!(io::stderr().lock(), "{note}");
        }
        self.placer.subset_into(tenant, &mut self.subset);
        let ids = self.with_ids.then_some(ShardIds {
            fleet: self.placer.fleet(),
            shards: &self.subset,
        });
        self.out.write(&PlacementLine {
            tenant,
            shards: &self.subset,
            ids,
        })
    }
}

/// One line of output.
#[derive(Serialize)]
struct PlacementLine<'a> {
    tenant: &'a str,
    shards: &'a [ShardIndex],
    #[serde(skip_serializing_if = "Option::is_none")]
    ids: Option<ShardIds<'a>>,
}

/// The ids of a subset's shards, serialised without collecting them.
struct ShardIds<'a> {
    fleet: &'a Fleet,
    shards: &'a [ShardIndex],
}

impl Serialize for ShardIds<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(
            self.shards
                .iter()
                .map(|&index| self.fleet.shard(index).id.as_str()),
        )
    }
}

fn place_all(emitter: &mut Emitter<'_>, tenants: &[String]) -> Result<()> {
    for tenant in tenants {
        if emitter.place(tenant)? == Flow::Stop {
            break;
        }
    }
    Ok(())
}

/// Streams tenants from stdin, one line at a time, so that memory stays flat
/// however many tenants are piped in.
fn place_stdin(emitter: &mut Emitter<'_>) -> Result<()> {
    let mut stdin = io::stdin().lock();
    let mut line = Vec::new();
    let mut number: u64 = 0;
    loop {
        line.clear();
        // Two bytes of slack let a line of exactly MAX_LINE_BYTES end in
        // "\r\n"; anything longer is still caught below.
        let read = (&mut stdin)
            .take(MAX_LINE_BYTES as u64 + 2)
            .read_until(b'\n', &mut line)
            .with_context(|| format!("cannot read stdin after line {number}"))?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        if line.ends_with(b"\n") {
            line.pop();
            if line.ends_with(b"\r") {
                line.pop();
            }
        }
        if line.len() > MAX_LINE_BYTES {
            bail!(
                "stdin line {number} is longer than {MAX_LINE_BYTES} bytes; tenant ids must be shorter (is this the right input?)"
            );
        }
        if line.is_empty() {
            continue;
        }
        let tenant = std::str::from_utf8(&line).map_err(|_| {
            anyhow!("stdin line {number} is not valid UTF-8; tenant ids must be UTF-8")
        })?;
        if emitter.place(tenant)? == Flow::Stop {
            return Ok(());
        }
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
}
