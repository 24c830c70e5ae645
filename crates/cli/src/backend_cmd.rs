//! The `backend` subcommand: runs the project's test backend (one shard that
//! can be told to misbehave) until SIGINT or SIGTERM, for demos, drills and
//! benchmarks.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result};
use backend::{Backend, Mode, Recording};
use clap::Args;

const AFTER_HELP: &str = "\
The backend answers every request with 200 and a small JSON body naming the \
shard and the tenant the gateway forwarded (x-shuffle-tenant), and GET \
/healthz as its health check. --mode makes it misbehave from the start:
  healthy             answer every request (the default)
  killed              not listening: connections are refused
  blackhole           accept connections and never answer
  slow:MS             answer after MS milliseconds
  errors:STATUS:RATE  answer STATUS to a share RATE (0.0-1.0) of requests
  flapping:MS         alternate between healthy and killed every MS milliseconds
  reset               send headers and part of the body, then reset

It runs until SIGINT or SIGTERM and then exits 0. One line on stderr says \
where it listens.

Example:
  shuffle-shard backend --listen 127.0.0.1:9100 --id s0 --mode slow:50";

/// Arguments of `shuffle-shard backend`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct BackendArgs {
    /// Address to listen on, `IP:PORT` (port 0 for any free port)
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9100")]
    listen: SocketAddr,
    /// The shard id it answers as
    #[arg(long, value_name = "ID", default_value = "s0")]
    id: String,
    /// How it behaves (see below)
    #[arg(long, value_name = "MODE", default_value = "healthy")]
    mode: ModeArg,
    /// Worker threads of the async runtime (1 for benchmarks that pin one core)
    #[arg(long, value_name = "N", default_value = "1")]
    workers: NonZeroUsize,
}

/// A `--mode` value, parsed.
#[derive(Debug, Clone)]
struct ModeArg(Mode);

impl FromStr for ModeArg {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let millis = |value: &str| {
            value
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| format!("{text:?}: {value:?} is not a whole number of milliseconds"))
        };
        let mode = match text.split(':').collect::<Vec<_>>().as_slice() {
            ["healthy"] => Mode::Healthy,
            ["killed"] => Mode::Killed,
            ["blackhole"] => Mode::Blackhole,
            ["reset"] => Mode::ResetMidResponse,
            ["slow", ms] => Mode::Slow(millis(ms)?),
            ["flapping", ms] => {
                let period = millis(ms)?;
                if period.is_zero() {
                    return Err(format!("{text:?}: the flapping period must be above 0"));
                }
                Mode::Flapping(period)
            }
            ["errors", status, rate] => {
                let status = status
                    .parse::<u16>()
                    .ok()
                    .filter(|s| (100..=599).contains(s))
                    .ok_or_else(|| {
                        format!("{text:?}: {status:?} is not an HTTP status (100-599)")
                    })?;
                let rate = rate
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| format!("{text:?}: {rate:?} is not a rate from 0.0 to 1.0"))?;
                Mode::Errors { status, rate }
            }
            _ => {
                return Err(format!(
                    "{text:?} is not a mode; use healthy, killed, blackhole, slow:MS, \
                     errors:STATUS:RATE, flapping:MS or reset"
                ));
            }
        };
        Ok(Self(mode))
    }
}

/// Runs `shuffle-shard backend`.
pub fn run(args: BackendArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers.get())
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: BackendArgs) -> Result<()> {
    // Listen for the signals before announcing the address, so a script that
    // signals as soon as it sees the port is never killed by the default
    // action instead.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    // Nothing can read what a standalone backend records, and copying every
    // header of every request would make it slower than what it serves.
    let backend = Backend::start_with(&args.id, args.listen, Recording::Off)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}; is another process using it?",
                args.listen
            )
        })?;
    backend.set_mode(args.mode.0.clone());
    eprintln!(
        "backend {} listening on {} (mode {:?}, {} worker{})",
        backend.id(),
        backend.url(),
        args.mode.0,
        args.workers,
        if args.workers.get() == 1 { "" } else { "s" }
    );
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(text: &str) -> Result<Mode, String> {
        text.parse::<ModeArg>().map(|m| m.0)
    }

    #[test]
    fn parses_every_mode() {
        assert_eq!(mode("healthy"), Ok(Mode::Healthy));
        assert_eq!(mode("killed"), Ok(Mode::Killed));
        assert_eq!(mode("blackhole"), Ok(Mode::Blackhole));
        assert_eq!(mode("reset"), Ok(Mode::ResetMidResponse));
        assert_eq!(mode("slow:50"), Ok(Mode::Slow(Duration::from_millis(50))));
        assert_eq!(
            mode("flapping:200"),
            Ok(Mode::Flapping(Duration::from_millis(200)))
        );
        assert_eq!(
            mode("errors:503:0.25"),
            Ok(Mode::Errors {
                status: 503,
                rate: 0.25
            })
        );
    }

    #[test]
    fn refuses_bad_modes() {
        for bad in [
            "",
            "sick",
            "slow",
            "slow:fast",
            "slow:-1",
            "flapping:0",
            "errors:503",
            "errors:99:0.5",
            "errors:503:1.5",
            "errors:503:x",
            "healthy:1",
        ] {
            assert!(mode(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
