//! The `shuffle-shard` command: parses arguments, runs one subcommand and
//! turns its outcome into an exit status.

mod backend_cmd;
mod blast;
mod demo;
mod drill;
mod grpc_call;
mod migrate;
mod output;
mod place;
mod placement_args;
mod plan;
mod plan_waves;
mod population_args;
mod progress;
mod report;
mod rollout;
mod serve;
mod table;
mod tenants_cmd;
mod ws_call;
mod ws_echo;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status for bad arguments or bad input, the same status clap uses for
/// usage errors, so scripts can tell "you asked wrongly" from "it broke".
const EXIT_BAD_INPUT: u8 = 2;

/// Exit status when the command was asked correctly but could not finish,
/// such as when writing the output fails.
const EXIT_FAILURE: u8 = 1;

/// Keyed shuffle-sharding: which shards serve which tenant.
#[derive(Debug, Parser)]
#[command(
    name = "shuffle-shard",
    version,
    after_help = "Exit status: 0 on success (also when the reader of stdout stops early, \
                  as with `| head`), 2 for bad arguments or bad input, 1 when the output \
                  cannot be written."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands; each lives in its own module with its own arguments.
#[derive(Debug, Subcommand)]
enum Command {
    /// Print the shards each tenant is placed on, one JSON object per line.
    Place(place::PlaceArgs),
    /// Measure what failures do: overlap, failure sets, sweeps, zone outages, load.
    Blast(blast::BlastArgs),
    /// Choose k: measure k = 1 to 8 against a blast-radius budget.
    Plan(plan::PlanArgs),
    /// Propose deployment waves that keep few tenants inside a single wave.
    PlanWaves(plan_waves::PlanWavesArgs),
    /// Price a placement change: how many tenants move, and how far.
    Migrate(migrate::MigrateArgs),
    /// Write the blast-radius report: one self-contained HTML file with charts.
    Report(report::ReportArgs),
    /// Run the gateway: authenticate, route to the tenant's subset, fail over inside it.
    Serve(serve::ServeArgs),
    /// Run a test backend (for demos, drills and benchmarks).
    Backend(backend_cmd::BackendArgs),
    /// Fail shards under load and check degraded-not-down, unaffected-unharmed and failover.
    Drill(drill::DrillArgs),
    /// Deploy a new build wave by wave, under load, stopping at the first wave whose gates fail.
    Rollout(rollout::RolloutArgs),
    /// Call the test backend's demo gRPC service, through a gateway or straight to a shard.
    GrpcCall(grpc_call::GrpcCallArgs),
    /// Send WebSocket messages through a gateway (or to a shard) and print what comes back.
    WsCall(ws_call::WsCallArgs),
    /// The tenant store (PostgreSQL) and tenants files: init-schema, import, export, convert.
    Tenants(tenants_cmd::TenantsArgs),
    /// The whole idea in one command: shards, a gateway, load, failures, and the model beside the measurements.
    Demo(demo::DemoArgs),
}

impl Command {
    fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Place(args) => place::run(args),
            Command::Blast(args) => blast::run(args),
            Command::Plan(args) => plan::run(args),
            Command::PlanWaves(args) => plan_waves::run(args),
            Command::Migrate(args) => migrate::run(args),
            Command::Report(args) => report::run(args),
            Command::Serve(args) => serve::run(args),
            Command::Backend(args) => backend_cmd::run(args),
            Command::Drill(args) => drill::run(args),
            Command::Demo(args) => demo::run(args),
            Command::Rollout(args) => rollout::run(args),
            Command::GrpcCall(args) => grpc_call::run(args),
            Command::WsCall(args) => ws_call::run(args),
            Command::Tenants(args) => tenants_cmd::run(args),
        }
    }
}

fn main() -> ExitCode {
    // clap prints its own usage errors and exits with status 2, or with 0
    // for --help and --version.
    let cli = Cli::parse();
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // `{:#}` joins the context chain into one line. The write result
            // is ignored because there is nowhere left to report a failure to
            // write to stderr, and panicking over it would be worse.
            let _ = writeln!(io::stderr().lock(), "error: {error:#}");
            exit_code(&error)
        }
    }
}

/// Chooses the exit status for a failed command.
fn exit_code(error: &anyhow::Error) -> ExitCode {
    if error.downcast_ref::<output::OutputFailed>().is_some()
        || error.downcast_ref::<drill::PropertiesViolated>().is_some()
        || error.downcast_ref::<rollout::RolloutStopped>().is_some()
        || error.downcast_ref::<grpc_call::CallFailed>().is_some()
        || error.downcast_ref::<ws_call::EchoFailed>().is_some()
        || matches!(
            error.downcast_ref::<gateway::runtime::RunError>(),
            Some(gateway::runtime::RunError::Stopped(_))
        )
    {
        ExitCode::from(EXIT_FAILURE)
    } else {
        ExitCode::from(EXIT_BAD_INPUT)
    }
}
