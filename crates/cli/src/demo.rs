//! The `demo` subcommand: the whole idea in one command. It starts, in this
//! process on 127.0.0.1, 16 test shards in 2 zones and a gateway with a
//! fresh key and 2,000 tenants (k = 2); drives load; fails one shard, then
//! two; restores them; and after each phase prints what was measured beside
//! what the analyser's model predicts. With `--replicas N` it runs N
//! gateways of one configuration as a fleet on a `redis-server` of its own
//! (`[fleet]`), drives the load through all of them and fails the shards
//! through the first.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use backend::{Backend, Protocol, Recording};
use clap::Args;
use drill::{AdminClient, LoadShape, Session, ShardRef, TenantCredential, Thresholds};
use gateway::config::writer::{GatewayToml, Shard, tenants_toml};
use serde::Serialize;

use crate::drill::LoadProtocol;
use crate::output::{print_json, print_text};
use crate::table::{Align, Table};

/// Arguments of `shuffle-shard demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Number of tenants
    #[arg(long, value_name = "N", default_value_t = 2000)]
    tenants: usize,
    /// Requests per tenant in each phase
    #[arg(long, value_name = "N", default_value_t = 5)]
    requests_per_tenant: usize,
    /// Pause this many seconds after each phase, to watch the status page
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pause_seconds: u64,
    /// The shards and the load: HTTP/1.1, or gRPC (gRPC shards over h2c, unary calls)
    #[arg(long, value_name = "PROTOCOL", value_enum, default_value_t = LoadProtocol::Http)]
    protocol: LoadProtocol,
    /// Gateways of one configuration, run as a fleet through a
    /// redis-server of the demo's own (redis-server must be on PATH when
    /// above 1)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=8))]
    replicas: u8,
    /// Print the summary as JSON
    #[arg(long)]
    json: bool,
}

/// One phase's result, as printed and in `--json`.
#[derive(Debug, Clone, Serialize)]
struct PhaseResult {
    phase: String,
    failed: Vec<String>,
    fully_down: usize,
    degraded: usize,
    unaffected: usize,
    errors: u64,
    unaffected_errors: u64,
    failovers: f64,
    modeled_fully_down: u64,
    modeled_degraded: u64,
    violations: Vec<String>,
}

#[derive(Debug, Serialize)]
struct DemoSummary {
    protocol: &'static str,
    replicas: u8,
    shards: usize,
    tenants: usize,
    k: u32,
    status_page: String,
    phases: Vec<PhaseResult>,
    seconds: f64,
}

const SHARDS: usize = 16;

/// The longest the demo waits for every replica to apply a fail or a
/// restore (a fleet's replicas apply one within `fleet.sync_ms`).
const SETTLE: Duration = Duration::from_secs(5);
const K: u32 = 2;

/// Runs `shuffle-shard demo`.
pub fn run(args: DemoArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        tokio::select! {
            result = demo(&args) => result,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted; stopping the demo");
                Ok(())
            }
        }
    })
}

fn random_hex(bytes: usize) -> String {
    text::hex(&gateway::config::writer::random_bytes(bytes))
}

async fn demo(args: &DemoArgs) -> Result<()> {
    let started = Instant::now();
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let grpc = args.protocol == LoadProtocol::Grpc;
    let backends = start_shards(grpc).await?;
    // A fresh secret key and token for this run only.
    let token = random_hex(24);
    let credentials: Vec<TenantCredential> = (0..args.tenants)
        .map(|t| {
            TenantCredential::new(format!("tenant-{t}"), format!("demo-{t}-{}", random_hex(8)))
        })
        .collect();
    // A fleet needs its store first; a missing redis-server is said plainly.
    let store = if args.replicas > 1 {
        Some(FleetStore::start(dir.path()).await?)
    } else {
        None
    };
    let mut toml = configuration(grpc, &backends, &credentials, &token);
    if let Some(store) = &store {
        toml.tables
            .push(("fleet".into(), format!("store = \"{}\"", store.url())));
    }
    let path = toml
        .write(dir.path())
        .context("cannot write the demo's configuration")?;
    let snapshot = gateway::Snapshot::load(&path, None)?;
    let running = gateway::runtime::start(snapshot).await?;
    let mut others = Vec::new();
    for _ in 1..args.replicas {
        others.push(gateway::runtime::start(gateway::Snapshot::load(&path, None)?).await?);
    }
    let status_page = format!("http://{}/", running.admin_addr);
    if !args.json {
        eprintln!("status page: {status_page} (while the demo runs)");
    }

    let admin_url: http::Uri = format!("http://{}", running.admin_addr).parse()?;
    let admin = AdminClient::new(&admin_url, &token);
    let shape = LoadShape {
        requests_per_tenant: args.requests_per_tenant,
        concurrency: 64,
        timeout: Duration::from_secs(5),
        protocol: args.protocol.into(),
    };
    let replicas = others
        .iter()
        .map(|other| {
            let admin_url: http::Uri = format!("http://{}", other.admin_addr).parse()?;
            Ok((
                format!("http://{}", other.addr),
                AdminClient::new(&admin_url, &token),
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let session = Session::prepare(
        &format!("http://{}", running.addr),
        admin,
        credentials,
        shape,
    )
    .await?
    .with_replicas(replicas)
    .await?;
    let phases = phases(args, &session).await?;

    running.shutdown().await;
    for other in others {
        other.shutdown().await;
    }
    drop((backends, store));
    let summary = DemoSummary {
        protocol: if grpc { "grpc" } else { "http" },
        replicas: args.replicas,
        shards: SHARDS,
        tenants: args.tenants,
        k: K,
        status_page,
        phases,
        seconds: started.elapsed().as_secs_f64(),
    };
    if args.json {
        let _: crate::output::Flow = print_json(&summary)?;
    } else {
        let _: crate::output::Flow = print_text(&render(&summary))?;
    }
    Ok(())
}

/// The fleet's store for `--replicas`: a `redis-server` of the demo's own
/// on 127.0.0.1, without persistence, stopped with the demo.
struct FleetStore {
    child: std::process::Child,
    port: u16,
}

impl FleetStore {
    /// Starts `redis-server` in `dir` on a free port, and waits until it
    /// answers `PING`; says what is missing when it cannot be run.
    async fn start(dir: &std::path::Path) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|error| {
                anyhow::anyhow!(
                    "--replicas runs the gateways as a fleet through Redis, and redis-server could not be run ({error}); install it (Debian: apt-get install redis-server) or run the demo without --replicas"
                )
            })?;
        let store = Self { child, port };
        for _ in 0..500 {
            if store.answers().await {
                return Ok(store);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        anyhow::bail!("redis-server on 127.0.0.1:{port} did not answer PING within 5 s")
    }

    /// Whether it answers `PING`.
    async fn answers(&self) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await else {
            return false;
        };
        let mut answer = [0_u8; 7];
        stream.write_all(b"PING\r\n").await.is_ok()
            && stream.read_exact(&mut answer).await.is_ok()
            && &answer == b"+PONG\r\n"
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for FleetStore {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The demo's [`SHARDS`] test shards on 127.0.0.1, speaking gRPC (`grpc`)
/// or HTTP/1.1.
async fn start_shards(grpc: bool) -> Result<Vec<Backend>> {
    let shard_protocol = if grpc {
        Protocol::Grpc
    } else {
        Protocol::Http1
    };
    let mut backends = Vec::new();
    for i in 0..SHARDS {
        backends.push(
            Backend::start_speaking(
                &format!("s{i}"),
                std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
                // Nothing in the demo reads what a shard saw.
                Recording::Off,
                shard_protocol,
            )
            .await
            .context("cannot start a test shard")?,
        );
    }
    Ok(backends)
}

/// The gateway's configuration: `backends` as one cell in two zones,
/// zone-aware with k = [`K`], the tenants of `credentials`, and the admin
/// API behind `token` (the status page open).
fn configuration(
    grpc: bool,
    backends: &[Backend],
    credentials: &[TenantCredential],
    token: &str,
) -> GatewayToml {
    let tenants: Vec<(String, String)> = credentials
        .iter()
        .map(|credential| (credential.tenant.clone(), credential.api_key().to_owned()))
        .collect();
    GatewayToml {
        k: K,
        key_version: "demo".into(),
        zone_aware: true,
        tables: if grpc {
            // gRPC shards are checked with the gRPC health protocol, and
            // the demo's method is safe to repeat, so a call a shard broke
            // after receiving it may go to another member.
            vec![
                ("health".into(), "interval_ms = 500\ngrpc = true".into()),
                (
                    "routing".into(),
                    format!(
                        "grpc_idempotent_methods = [\"{}\"]",
                        drill::load::GRPC_METHOD
                    ),
                ),
            ]
        } else {
            vec![("health".into(), "interval_ms = 500".into())]
        },
        admin_token: Some(token.to_owned()),
        admin: "status_page_without_token = true".into(),
        cell: "demo".into(),
        shards: backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let shard =
                    Shard::new(b.id(), b.url()).in_zone(if i < SHARDS / 2 { "a" } else { "b" });
                if grpc { shard.speaking("h2c") } else { shard }
            })
            .collect(),
        tenants: tenants_toml(&tenants),
        ..GatewayToml::default()
    }
}

/// The demo's phases, each measured and reported as it ends: a baseline,
/// one shard failed, a second one, and both restored.
async fn phases(args: &DemoArgs, session: &Session) -> Result<Vec<PhaseResult>> {
    // The bound is generous because the demo runs shards, gateway and load
    // generator on the same cores: tail latency there says more about the
    // machine than about the gateway.
    let thresholds = Thresholds {
        min_success: 0.999,
        latency_bound_ms: 250.0,
    };

    let cell = "demo".to_owned();
    let mut phases = Vec::new();
    let (baseline, failovers) = measure(session).await?;
    phases.push(
        phase_result(
            "baseline",
            session,
            &baseline,
            &baseline,
            &[],
            failovers,
            thresholds,
        )
        .await?,
    );
    report_phase(args, phases.last()).await;

    // One shard, then a second one in the other zone: with zone-aware k = 2
    // the tenants on exactly that pair are the only ones that can go down.
    let mut failed: Vec<ShardRef> = Vec::new();
    for (name, shard) in [("fail s3", "s3"), ("fail s3 + s11", "s11")] {
        session.admin().fail(shard).await?;
        failed.push((cell.clone(), shard.to_owned()));
        // Through every replica of a fleet before the phase is measured.
        session.await_everywhere(&failed, &[], SETTLE).await?;
        let (during, failovers) = measure(session).await?;
        phases.push(
            phase_result(
                name, session, &baseline, &during, &failed, failovers, thresholds,
            )
            .await?,
        );
        report_phase(args, phases.last()).await;
    }
    for (_, shard) in &failed {
        session.admin().restore(shard).await?;
    }
    session.await_everywhere(&[], &failed, SETTLE).await?;
    let (after, failovers) = measure(session).await?;
    phases.push(
        phase_result(
            "restored",
            session,
            &baseline,
            &after,
            &[],
            failovers,
            thresholds,
        )
        .await?,
    );
    report_phase(args, phases.last()).await;
    Ok(phases)
}

/// One phase of load and how much the gateway's failover counter rose
/// during it.
async fn measure(session: &Session) -> Result<(drill::Phase, f64)> {
    let before = session.failovers().await?;
    let phase = session.measure().await;
    let after = session.failovers().await?;
    Ok((phase, after - before))
}

async fn phase_result(
    name: &str,
    session: &Session,
    baseline: &drill::Phase,
    during: &drill::Phase,
    failed: &[ShardRef],
    failovers: f64,
    thresholds: Thresholds,
) -> Result<PhaseResult> {
    let measured_degraded = session.measured_degraded().await?;
    let verdict = session.evaluate(
        name,
        baseline,
        during,
        failed,
        &measured_degraded,
        failovers,
        thresholds,
    );
    // The demo counts "degraded" as `blast` does: the fully down included.
    Ok(PhaseResult {
        phase: name.to_owned(),
        failed: verdict.failed.clone(),
        fully_down: verdict.fully_down.measured,
        degraded: verdict.fully_down.measured + verdict.degraded.measured,
        unaffected: verdict.unaffected.measured,
        errors: verdict.errors,
        unaffected_errors: verdict.unaffected_errors,
        failovers,
        modeled_fully_down: verdict.fully_down.modeled,
        modeled_degraded: verdict.fully_down.modeled + verdict.degraded.modeled,
        violations: verdict.violations,
    })
}

async fn report_phase(args: &DemoArgs, phase: Option<&PhaseResult>) {
    if args.pause_seconds > 0 {
        tokio::time::sleep(Duration::from_secs(args.pause_seconds)).await;
    }
    if let (false, Some(phase)) = (args.json, phase) {
        eprintln!(
            "{:<14} fully down {:>4} (model {:>4})  degraded {:>4} (model {:>4})  errors {:>4}",
            phase.phase,
            phase.fully_down,
            phase.modeled_fully_down,
            phase.degraded,
            phase.modeled_degraded,
            phase.errors
        );
    }
}

fn render(summary: &DemoSummary) -> String {
    let mut table = Table::new(&[
        ("phase", Align::Left),
        ("failed", Align::Left),
        ("fully down", Align::Right),
        ("model", Align::Right),
        ("degraded", Align::Right),
        ("model", Align::Right),
        ("unaffected", Align::Right),
        ("unaffected errors", Align::Right),
        ("failovers", Align::Right),
    ]);
    for phase in &summary.phases {
        table.row(vec![
            phase.phase.clone(),
            if phase.failed.is_empty() {
                "-".into()
            } else {
                phase.failed.join(", ")
            },
            phase.fully_down.to_string(),
            phase.modeled_fully_down.to_string(),
            phase.degraded.to_string(),
            phase.modeled_degraded.to_string(),
            phase.unaffected.to_string(),
            phase.unaffected_errors.to_string(),
            format!("{}", phase.failovers),
        ]);
    }
    let mut out = format!(
        "Demo{}{}: {} tenants on {} shards in 2 zones, k = {} (zone-aware rendezvous), {:.1} s\n\n{}",
        if summary.protocol == "grpc" {
            " (gRPC unary calls to gRPC shards over h2c)"
        } else {
            ""
        },
        if summary.replicas > 1 {
            format!(
                " through {} replicas of one gateway ([fleet] on a redis-server of its own; shards failed through the first)",
                summary.replicas
            )
        } else {
            String::new()
        },
        summary.tenants,
        summary.shards,
        summary.k,
        summary.seconds,
        table.render(2)
    );
    let problems: Vec<&String> = summary.phases.iter().flat_map(|p| &p.violations).collect();
    if problems.is_empty() {
        out.push_str("\nEvery phase matched the model: one failed shard degraded its tenants without taking any down; two failed shards took down only the tenants whose whole subset they were; unaffected tenants saw no errors.\n");
    } else {
        out.push_str("\nViolations:\n");
        for problem in problems {
            out.push_str(&format!("  - {problem}\n"));
        }
    }
    out
}
