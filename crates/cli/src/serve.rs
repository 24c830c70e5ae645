//! The `serve` subcommand: runs the gateway from a configuration file until
//! SIGINT or SIGTERM; SIGHUP reloads the configuration.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

const AFTER_HELP: &str = "\
The configuration is validated before anything listens; every error names the \
file, the key and the problem. SIGHUP reloads the configuration and tenants \
file (a bad reload is logged and the old configuration keeps serving); SIGINT \
or SIGTERM stop accepting and let in-flight requests finish within \
limits.shutdown_grace_ms.

With --check, the configuration and every file it names (tenants file, \
placement keys, admin token, JWT key, TLS certificates and keys) are \
validated as at start, one line summarises them (cells, shards, tenants, \
algorithm, key version) and the command exits 0, or prints the error and \
exits 2; nothing is bound or started, like nginx -t.

Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) to change the level.

Examples:
  shuffle-shard serve --config gateway.toml --check
  shuffle-shard serve --config gateway.toml";

/// Arguments of `shuffle-shard serve`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct ServeArgs {
    /// The gateway configuration file (TOML)
    #[arg(long, value_name = "PATH")]
    config: PathBuf,

    /// Worker threads (default: one per CPU). With 1 the gateway runs on a
    /// single-threaded event loop, like one nginx worker process.
    #[arg(long, value_name = "N")]
    workers: Option<usize>,

    /// Validate the configuration and every file it names, print a
    /// one-line summary and exit (0 when valid, 2 when not); binds nothing
    #[arg(long)]
    check: bool,
}

/// Runs `shuffle-shard serve`.
pub fn run(args: ServeArgs) -> Result<()> {
    if args.check {
        let checked = gateway::runtime::check(&args.config)?;
        // A closed stdout has nothing left to be told.
        let _flow = crate::output::print_text(&format!("{checked}\n"))?;
        return Ok(());
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only help a person at a terminal; in files and log
        // pipelines they are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // One worker means one thread: the single-threaded scheduler then
    // skips the cross-thread queues and wake-ups the multi-threaded one
    // pays even with a single worker.
    let runtime = match args.workers {
        Some(0) => anyhow::bail!("--workers must be at least 1"),
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some(workers) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build(),
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    }
    .context("cannot start the async runtime")?;
    runtime.block_on(gateway::runtime::run(&args.config))?;
    Ok(())
}
