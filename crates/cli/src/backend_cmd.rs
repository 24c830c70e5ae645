//! The `backend` subcommand: runs the project's test backend (one shard that
//! can be told to misbehave) until SIGINT or SIGTERM, for demos, drills and
//! benchmarks.

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use anyhow::{Context, Result, bail};
use backend::{Backend, Mode, Protocol, Recording};
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
  unread              accept connections, never read them nor answer
Data path only (/healthz stays healthy):
  stall-body          a 200 head promising 1024 bytes, 16 of them, then nothing
  trickle:MS          a chunked 200, one byte every MS milliseconds, never ending
  close-after-head    a 200 head promising 1024 bytes, then close
Health path only (every other path stays healthy):
  health-no-head      read the health check and never answer
  health-stall        a 200 head promising 1024 bytes, 16 of them, then nothing
  health-trickle:MS   a chunked 200, one byte every MS milliseconds, never ending
  health-huge:BYTES   a 200 with BYTES bytes of body, as fast as they are read
  health-garbage      answer bytes that are not HTTP, then close

--protocol grpc serves gRPC over HTTP/2 with prior knowledge (h2c) instead: \
the standard health service grpc.health.v1.Health and the demo service \
shuffle.demo.Echo (Unary: one answer naming the shard and the tenant; Count: \
a stream of n answers), for gateways whose shards are `protocol = \"h2c\"`. \
Its modes are healthy, killed, blackhole, slow:MS, errors:STATUS:RATE (the \
gRPC status the gRPC spec maps STATUS to: 503 is UNAVAILABLE), flapping:MS, \
reset (the call's head, then its stream is reset), unread and \
crash-on-poison[:MS] (on `x-poison` metadata); the others are HTTP/1.1 \
byte-level faults and are refused.

--protocol ws serves a WebSocket echo instead: an upgrade on any path is \
accepted, text and binary messages are sent back as they came, pings are \
answered and a close is answered with a close; any other request (such as \
GET /healthz) gets 200 naming the shard. It acts out no --mode and has no \
--control API.

--control IP:PORT also serves a control API on that address (only): \
PUT /mode with a mode above as the body switches the running backend (204, or \
400 naming the valid modes), GET /mode reads it. Open connections are closed \
when a switch changes how they are served, so the new mode reaches them.

It runs until SIGINT or SIGTERM and then exits 0. One line on stderr says \
where it listens.

Examples:
  shuffle-shard backend --listen 127.0.0.1:9100 --id s0 --mode slow:50
  shuffle-shard backend --listen 127.0.0.1:9103 --id s3 --control 127.0.0.1:9203
  shuffle-shard backend --listen 127.0.0.1:9300 --id g0 --protocol grpc
  shuffle-shard backend --listen 127.0.0.1:9400 --id w0 --protocol ws
  curl -X PUT --data health-stall http://127.0.0.1:9203/mode";

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
    mode: Mode,
    /// What it speaks: http1, grpc (h2c) or ws (a WebSocket echo; see below)
    #[arg(long, value_name = "PROTOCOL", value_enum, default_value = "http1")]
    protocol: Speaks,
    /// Also serve the control API (PUT/GET /mode) on this address
    #[arg(long, value_name = "IP:PORT")]
    control: Option<SocketAddr>,
    /// Worker threads of the async runtime (1 for benchmarks that pin one core)
    #[arg(long, value_name = "N", default_value = "1")]
    workers: NonZeroUsize,
}

/// What the backend speaks: the test backend's two protocols, or the
/// WebSocket echo server of this crate (`ws_echo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Speaks {
    /// HTTP/1.1 (and h2c), the test backend
    Http1,
    /// gRPC over h2c, the test backend
    Grpc,
    /// A WebSocket echo server
    Ws,
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
    let protocol = match args.protocol {
        Speaks::Http1 => Protocol::Http1,
        Speaks::Grpc => Protocol::Grpc,
        Speaks::Ws => return serve_ws(args, terminate).await,
    };
    if !protocol.acts_out(&args.mode) {
        bail!(backend::UnsupportedMode {
            mode: args.mode.to_string()
        });
    }
    // Nothing can read what a standalone backend records, and copying every
    // header of every request would make it slower than what it serves.
    let backend = Backend::start_speaking(&args.id, args.listen, Recording::Off, protocol)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}; is another process using it?",
                args.listen
            )
        })?;
    backend.set_mode(args.mode.clone());
    let control = match args.control {
        Some(addr) => {
            let bound = backend.serve_control(addr).await.with_context(|| {
                format!("cannot listen on --control {addr}; is another process using it?")
            })?;
            format!(", control API on http://{bound}")
        }
        None => String::new(),
    };
    let speaking = match protocol {
        Protocol::Grpc => "gRPC over h2c, ",
        _ => "",
    };
    eprintln!(
        "backend {} listening on {} ({speaking}mode {}, {} worker{}){control}",
        backend.id(),
        backend.url(),
        args.mode,
        args.workers,
        if args.workers.get() == 1 { "" } else { "s" }
    );
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    Ok(())
}

/// `--protocol ws`: the WebSocket echo server until SIGINT or SIGTERM. It
/// has no faults to act out and no control API, so asking for either is
/// refused rather than ignored.
async fn serve_ws(args: BackendArgs, mut terminate: tokio::signal::unix::Signal) -> Result<()> {
    if args.mode != Mode::Healthy {
        bail!(
            "--protocol ws acts out no --mode (it was given {}); drop --mode, or use --protocol http1 for a shard that misbehaves",
            args.mode
        );
    }
    if args.control.is_some() {
        bail!(
            "--protocol ws has no control API; drop --control, or use --protocol http1 for a shard whose mode can be switched"
        );
    }
    let (listener, bound) = crate::ws_echo::bind(args.listen).await.with_context(|| {
        format!(
            "cannot listen on {}; is another process using it?",
            args.listen
        )
    })?;
    let server = tokio::spawn(crate::ws_echo::serve(listener, args.id.clone()));
    eprintln!(
        "backend {} listening on http://{bound} (WebSocket echo on any path, {} worker{})",
        args.id,
        args.workers,
        if args.workers.get() == 1 { "" } else { "s" }
    );
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    server.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: BackendArgs,
    }

    /// `--mode` as clap parses it, with its error text on failure.
    fn mode(text: &str) -> Result<Mode, String> {
        Cli::try_parse_from(["backend", "--mode", text])
            .map(|cli| cli.args.mode)
            .map_err(|error| error.to_string())
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn parses_every_mode() {
        assert_eq!(mode("healthy"), Ok(Mode::Healthy));
        assert_eq!(mode("killed"), Ok(Mode::Killed));
        assert_eq!(mode("blackhole"), Ok(Mode::Blackhole));
        assert_eq!(mode("reset"), Ok(Mode::ResetMidResponse));
        assert_eq!(mode("slow:50"), Ok(Mode::Slow(ms(50))));
        assert_eq!(mode("flapping:200"), Ok(Mode::Flapping(ms(200))));
        assert_eq!(
            mode("errors:503:0.25"),
            Ok(Mode::Errors {
                status: 503,
                rate: 0.25
            })
        );
        assert_eq!(mode("stall-body"), Ok(Mode::StallBody));
        assert_eq!(mode("trickle:100"), Ok(Mode::Trickle(ms(100))));
        assert_eq!(mode("close-after-head"), Ok(Mode::CloseAfterHead));
        assert_eq!(mode("health-no-head"), Ok(Mode::HealthNoHead));
        assert_eq!(mode("health-stall"), Ok(Mode::HealthStallBody));
        assert_eq!(mode("health-trickle:25"), Ok(Mode::HealthTrickle(ms(25))));
        assert_eq!(mode("health-huge:1048576"), Ok(Mode::HealthHuge(1 << 20)));
        assert_eq!(mode("health-garbage"), Ok(Mode::HealthGarbage));
        assert_eq!(mode("unread"), Ok(Mode::Unread));
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
            "trickle",
            "trickle:0",
            "trickle:x",
            "health-trickle:0",
            "health-huge",
            "health-huge:x",
            "health-huge:-5",
            "stall-body:1",
            "health-stall-body",
            "unread:1",
        ] {
            let error = mode(bad).expect_err(bad);
            assert!(error.contains(&format!("{bad:?}")), "{bad:?}: {error}");
        }
    }

    #[test]
    fn the_control_address_is_optional() {
        let cli = Cli::try_parse_from(["backend"]).unwrap();
        assert_eq!(cli.args.control, None);
        let cli = Cli::try_parse_from(["backend", "--control", "127.0.0.1:9203"]).unwrap();
        assert_eq!(cli.args.control, Some("127.0.0.1:9203".parse().unwrap()));
        assert!(Cli::try_parse_from(["backend", "--control", "localhost"]).is_err());
    }
}
