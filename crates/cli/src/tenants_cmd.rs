//! `shuffle-shard tenants …`: the tenant store's schema, whole populations
//! moved in and out of it in batches, and tenants files converted between
//! TOML and JSON Lines.
//!
//! The store's URL may leave its password out; it is then read from
//! `PGPASSWORD`, as PostgreSQL's own tools do, so it need not appear in a
//! command line (which other users of the machine can read).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use gateway::store::tenants::{TenantStore, settings};
use gateway::tenants::TenantEntry;
use gateway::tenants::entry::check_id;
use gateway::tenants::files::{FilesError, read_entries, write_entries};

use crate::output::{Flow, JsonLines, OutputFailed};
use crate::progress::with_progress;

/// The longest one round trip to the store may take.
const STORE_TIMEOUT: Duration = Duration::from_secs(30);

/// `tenants`: the subcommands.
#[derive(Debug, Args)]
pub struct TenantsArgs {
    #[command(subcommand)]
    command: TenantsCommand,
}

#[derive(Debug, Subcommand)]
enum TenantsCommand {
    /// Create the tenant store's tables in a PostgreSQL database (or upgrade them); safe to run again.
    InitSchema(StoreArgs),
    /// Write every tenant of a tenants file (TOML, or JSON Lines if it ends in .jsonl) to the store, in batches.
    Import(ImportArgs),
    /// Write every tenant in the store as JSON Lines, to stdout or a file.
    Export(ExportArgs),
    /// Convert a tenants file between TOML and JSON Lines (by the files' extensions).
    Convert(ConvertArgs),
}

/// Where the store is.
#[derive(Debug, Args)]
struct StoreArgs {
    /// The store: postgres://user[:password]@host:port/database[?sslmode=verify-full] (the password may come from PGPASSWORD instead).
    #[arg(long, value_name = "URL")]
    store: String,
    /// Check the store's TLS certificate against this CA file (PEM); implies TLS.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// The tenants file.
    file: PathBuf,
    #[command(flatten)]
    store: StoreArgs,
    /// Tenants written per transaction.
    #[arg(long, value_name = "N", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    batch: u32,
}

#[derive(Debug, Args)]
struct ExportArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Write here (TOML, or JSON Lines if it ends in .jsonl) instead of JSON Lines on stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ConvertArgs {
    /// The tenants file to read.
    input: PathBuf,
    /// The file to write; its extension picks the format (.jsonl: JSON Lines, else TOML).
    output: PathBuf,
}

/// Runs one `tenants` subcommand.
pub fn run(args: TenantsArgs) -> anyhow::Result<()> {
    match args.command {
        TenantsCommand::InitSchema(args) => init_schema(args),
        TenantsCommand::Import(args) => import(args),
        TenantsCommand::Export(args) => export(args),
        TenantsCommand::Convert(args) => convert(args),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Connects to the store named on the command line.
fn connect(runtime: &tokio::runtime::Runtime, args: &StoreArgs) -> anyhow::Result<TenantStore> {
    let mut settings = settings(&args.store, args.ca_file.clone())?;
    // A batch of thousands of tenants may take longer than the gateway's
    // bound for one query; an operator at a terminal can wait.
    settings.timeout = STORE_TIMEOUT;
    Ok(runtime.block_on(TenantStore::connect(&settings))?)
}

fn init_schema(args: StoreArgs) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let store = connect(&runtime, &args)?;
    let url = &store.settings().url;
    if runtime.block_on(store.init_schema())? {
        println!("created the tenant store's schema in {url}");
    } else {
        println!("the tenant store's schema in {url} is up to date; nothing to do");
    }
    Ok(())
}

fn import(args: ImportArgs) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let store = connect(&runtime, &args.store)?;
    runtime.block_on(store.check_schema())?;
    let total = count_entries(&args.file)?;
    let size = args.batch as usize;
    let mut batch: Vec<TenantEntry> = Vec::with_capacity(size);
    let mut written = 0_u64;
    // A store error cannot travel through the file reader's error type:
    // it is kept here, and the reader told to stop.
    let mut refused = None;
    let read = with_progress("importing tenants", |report| {
        report(0, total);
        let mut flush = |batch: &mut Vec<TenantEntry>| -> Result<(), FilesError> {
            if let Err(error) = runtime.block_on(store.put_batch(batch)) {
                refused = Some(error);
                return Err(FilesError::new(
                    &args.file,
                    "-",
                    "the store refused a batch",
                ));
            }
            written += batch.len() as u64;
            report(written, total.max(written));
            batch.clear();
            Ok(())
        };
        read_entries(&args.file, |entry| {
            check_id(&entry.id).map_err(|e| {
                FilesError::new(&args.file, format!("tenant {:?}", entry.id), e.to_string())
            })?;
            batch.push(entry);
            if batch.len() >= size {
                flush(&mut batch)
            } else {
                Ok(())
            }
        })
        .and_then(|_| {
            if batch.is_empty() {
                Ok(())
            } else {
                flush(&mut batch)
            }
        })
    });
    if let Some(error) = refused {
        return Err(error).with_context(|| {
            format!(
                "import stopped after {written} tenants (each batch is written whole or not at all)"
            )
        });
    }
    read?;
    eprintln!("imported {written} tenants into {}", store.settings().url);
    Ok(())
}

/// Roughly how many entries a tenants file holds, for the progress bar:
/// non-empty lines of JSON Lines, `[[tenants]]` headers of TOML.
fn count_entries(path: &Path) -> anyhow::Result<u64> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open the tenants file {}", path.display()))?;
    let jsonl = path.extension().is_some_and(|ext| ext == "jsonl");
    let mut count = 0;
    for line in BufReader::new(file).lines() {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        let line = line.trim();
        if (jsonl && !line.is_empty()) || (!jsonl && line == "[[tenants]]") {
            count += 1;
        }
    }
    Ok(count)
}

fn export(args: ExportArgs) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let store = connect(&runtime, &args.store)?;
    runtime.block_on(store.check_schema())?;
    let mut skipped = 0_u64;
    let mut skip = |row: gateway::store::tenants::BadRow| {
        eprintln!("skipped: {row}");
        skipped += 1;
    };
    let written = match &args.out {
        Some(out) => write_streamed(out, |send| {
            runtime.block_on(store.load_all(|row| match row {
                Ok(entry) => send(entry),
                Err(row) => skip(row),
            }))?;
            Ok(())
        })?,
        None => {
            let mut lines = JsonLines::stdout();
            let mut failed = None;
            let mut written = 0;
            runtime.block_on(store.load_all(|row| match row {
                Ok(_) if failed.is_some() => {}
                Ok(entry) => match lines.write(&entry) {
                    Ok(Flow::Continue) => written += 1,
                    Ok(Flow::Stop) => failed = Some(None),
                    Err(error) => failed = Some(Some(error)),
                },
                Err(row) => skip(row),
            }))?;
            match failed {
                Some(Some(error)) => return Err(error.context(OutputFailed)),
                // The reader went away: it has seen enough.
                Some(None) => return Ok(()),
                None => {}
            }
            if lines.flush()? == Flow::Stop {
                return Ok(());
            }
            written
        }
    };
    if skipped > 0 {
        bail!(
            "exported {written} tenants and skipped {skipped} rows that do not convert (named above); fix them in the store"
        );
    }
    eprintln!("exported {written} tenants from {}", store.settings().url);
    Ok(())
}

fn convert(args: ConvertArgs) -> anyhow::Result<()> {
    let written = write_streamed(&args.output, |send| {
        read_entries(&args.input, |entry| {
            send(entry);
            Ok(())
        })?;
        Ok(())
    })?;
    eprintln!(
        "wrote {written} tenants from {} to {}",
        args.input.display(),
        args.output.display()
    );
    Ok(())
}

/// Writes `out` (format by extension) from the entries `produce` sends,
/// streamed through a writer thread so neither side holds them all; the
/// file appears only when `produce` succeeded. The number written.
fn write_streamed(
    out: &Path,
    produce: impl FnOnce(&mut dyn FnMut(TenantEntry)) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let partial = partial_beside(out);
    let (sender, receiver) = sync_channel::<TenantEntry>(1024);
    let (produced, written) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| write_entries(&partial, receiver));
        // A failed writer drops the receiver: sends fail, and are ignored
        // here, since the writer's own error says why.
        let produced = produce(&mut |entry| {
            let _ = sender.send(entry);
        });
        drop(sender);
        (
            produced,
            writer.join().expect("the writer thread does not panic"),
        )
    });
    let finished = produced.and_then(|()| Ok(written?)).and_then(|count| {
        std::fs::rename(&partial, out)
            .with_context(|| format!("cannot rename {} to {}", partial.display(), out.display()))?;
        Ok(count)
    });
    if finished.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    finished
}

/// A file beside `out` with the same extension (which picks the format).
fn partial_beside(out: &Path) -> PathBuf {
    let name = out.file_name().unwrap_or_default().to_string_lossy();
    let ext = out
        .extension()
        .map(|ext| format!(".{}", ext.to_string_lossy()))
        .unwrap_or_default();
    out.with_file_name(format!(".{name}.{}.partial{ext}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partial_file_keeps_the_extension() {
        let partial = partial_beside(Path::new("/x/tenants.jsonl"));
        assert!(
            partial.to_string_lossy().ends_with(".partial.jsonl"),
            "{partial:?}"
        );
        assert_eq!(partial.parent(), Some(Path::new("/x")));
    }
}
