//! The `place` subcommand: prints the shards each tenant is placed on, one
//! JSON object per line, for tenants given as arguments or streamed on stdin.

use std::ffi::OsString;
use std::io::{self, BufRead, Read};
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use placement::{Algorithm, Fleet, Placer, ShardIndex};
use serde::{Serialize, Serializer};

use crate::output::{Flow, JsonLines};
use crate::placement_args::{PlacementArgs, PlacementSetup, print_note};

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
    #[command(flatten)]
    placement: PlacementArgs,

    /// Place exactly as the gateway with this configuration does
    ///
    /// Uses the configuration's cells, fleets, keys and the tenants file's
    /// per-tenant k and dedicated shards; the output then always has "cell"
    /// and "ids". Replaces --shards, --zones, --k and the key options.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with_all = ["shards", "zones", "key_file", "key_env", "k", "tenant_k"]
    )]
    config: Option<PathBuf>,

    /// With --config: the cell to place in (default: each tenant's own cell
    /// from the tenants file, or the first cell)
    #[arg(long, value_name = "NAME", requires = "config")]
    cell: Option<String>,

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

/// Runs `shuffle-shard place`.
pub fn run(args: PlaceArgs) -> Result<()> {
    // Everything that can be checked before output starts is checked first,
    // so that a bad invocation prints nothing on stdout.
    let tenants = tenant_args(args.tenants)?;
    let gateway_setup = match &args.config {
        Some(path) => Some(GatewaySetup::load(path, args.cell.as_deref())?),
        None => None,
    };
    let plain = match &gateway_setup {
        Some(_) => None,
        None => Some(args.placement.placer()?),
    };
    let (source, note) = match (&gateway_setup, &plain) {
        (Some(setup), _) => (Source::Gateway(setup), None),
        (None, Some(PlacementSetup { placer, key_note })) => (Source::Plain(placer), *key_note),
        (None, None) => unreachable!("one of the two setups is built"),
    };

    let mut emitter = Emitter {
        source,
        out: JsonLines::stdout(),
        subset: Vec::new(),
        note,
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

/// A gateway configuration's placement: cells, their placers with the
/// tenants file's overrides, and which cell each tenant is in.
struct GatewaySetup {
    topology: gateway::cell::Topology,
    tenants: gateway::tenants::Tenants,
    /// The cell every tenant is placed in, when --cell was given.
    cell: Option<usize>,
}

impl GatewaySetup {
    fn load(path: &std::path::Path, cell: Option<&str>) -> Result<Self> {
        let config = gateway::GatewayConfig::load(path)?;
        let tenants = match config.tenants().file() {
            Some(file) => gateway::tenants::load::from_file(file, &config)?,
            None => bail!(
                "{} keeps its tenants in the tenant store; `place --config` reads a tenants file: export one with shuffle-shard tenants export",
                path.display()
            ),
        };
        let topology = gateway::cell::Topology::build(&config)?;
        let cell = match cell {
            Some(name) => Some(topology.find(name).ok_or_else(|| {
                let names: Vec<&str> = config.cells().iter().map(|c| c.name.as_str()).collect();
                anyhow!(
                    "--cell {name:?}: {} has no such cell; its cells are {}",
                    path.display(),
                    names.join(", ")
                )
            })?),
            None => None,
        };
        Ok(Self {
            topology,
            tenants,
            cell,
        })
    }

    /// The cell a tenant is placed in.
    fn cell_of(&self, tenant: &str) -> usize {
        self.cell.unwrap_or_else(|| {
            self.tenants
                .get(tenant)
                .map_or(0, |registered| registered.cell_index())
        })
    }
}

/// Where placements come from.
enum Source<'a> {
    /// The command-line options.
    Plain(&'a Placer),
    /// A gateway configuration.
    Gateway(&'a GatewaySetup),
}

/// Places tenants one at a time into a reused buffer and writes them out.
struct Emitter<'a> {
    source: Source<'a>,
    out: JsonLines<io::BufWriter<io::StdoutLock<'static>>>,
    subset: Vec<ShardIndex>,
    /// Printed before the first placement, so that runs that fail before
    /// placing anyone print exactly one line on stderr.
    note: Option<&'static str>,
}

impl Emitter<'_> {
    fn place(&mut self, tenant: &str) -> Result<Flow> {
        print_note(self.note.take());
        let (placer, cell, with_ids) = match &self.source {
            Source::Plain(placer) => (
                *placer,
                None,
                placer.config().algorithm == Algorithm::Rendezvous,
            ),
            Source::Gateway(setup) => {
                let cell = &setup.topology.cells()[setup.cell_of(tenant)];
                (&cell.placer, Some(cell.settings.name.as_str()), true)
            }
        };
        match &self.source {
            // A registered tenant placed in its own cell gets its own k or
            // shards, as the gateway places it.
            Source::Gateway(setup) => match setup.tenants.get(tenant) {
                Some(registered) if setup.cell_of(tenant) == registered.cell_index() => setup
                    .topology
                    .tenant_subset_into(registered, &mut self.subset),
                _ => placer.subset_into(tenant, &mut self.subset),
            },
            Source::Plain(_) => placer.subset_into(tenant, &mut self.subset),
        }
        let ids = with_ids.then_some(ShardIds {
            fleet: placer.fleet(),
            shards: &self.subset,
        });
        self.out.write(&PlacementLine {
            tenant,
            cell,
            shards: &self.subset,
            ids,
        })
    }
}

/// One line of output.
#[derive(Serialize)]
struct PlacementLine<'a> {
    tenant: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cell: Option<&'a str>,
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
