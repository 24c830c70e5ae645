//! The `drill` subcommand: runs synthetic load for every tenant against a
//! running gateway, injects a fault, and checks the three properties a
//! shuffle-sharded service must have under failure.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use drill::run::{DrillReport, Fault};
use drill::{AdminClient, LoadShape, Session, Thresholds};

use crate::output::{print_json, print_text};
use crate::table::{Align, Table};

const AFTER_HELP: &str = "\
Phases: before (baseline load), during (with the fault), after (restored). \
Properties checked during the fault, against the baseline:
  1. degraded, not down: tenants with some failed members keep a success ratio of at least --min-success;
  2. unaffected feel nothing: tenants with no failed member see no errors and their p99 latency stays within --latency-bound-ms of the baseline;
  3. failover happened: the gateway's shuffle_failovers_total rose.
Tenant by tenant, the measured fully-down set and the gateway's degraded set \
must equal the analyser's prediction for the declared failure set.

Exit status: 0 when every property holds, 1 when one is violated (the output \
says which), 2 for bad arguments or when the drill cannot run.

The tenants file has one TENANT<TAB>API_KEY per line.

Examples:
  shuffle-shard drill --gateway http://127.0.0.1:8080 --admin http://127.0.0.1:9901 \\
      --admin-token-file admin.token --tenants-file drill-tenants.tsv --fail s3
  shuffle-shard drill ... --kill s3 --wait-seconds 30   # you break s3 yourself";

/// Arguments of `shuffle-shard drill`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct DrillArgs {
    /// The gateway's data URL
    #[arg(long, value_name = "URL")]
    gateway: String,
    /// The gateway's admin URL
    #[arg(long, value_name = "URL")]
    admin: String,
    /// File holding the admin bearer token
    #[arg(long, value_name = "PATH")]
    admin_token_file: PathBuf,
    /// Tenants to drive, one TENANT<TAB>API_KEY per line
    #[arg(long, value_name = "PATH")]
    tenants_file: PathBuf,
    /// Shards to fail through the admin API (comma-separated ids)
    #[arg(
        long,
        value_name = "IDS",
        value_delimiter = ',',
        conflicts_with = "kill",
        required_unless_present = "kill"
    )]
    fail: Vec<String>,
    /// Shards you will break yourself (kill, blackhole); the drill waits for the gateway to notice
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    kill: Vec<String>,
    /// With --kill: how long to wait for the gateway to see the fault, and the recovery
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    wait_seconds: u64,
    /// Requests per tenant in each phase
    #[arg(long, value_name = "N", default_value_t = 5)]
    requests_per_tenant: usize,
    /// Requests in flight at once
    #[arg(long, value_name = "N", default_value_t = 32)]
    concurrency: usize,
    /// Per-request timeout in milliseconds
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    timeout_ms: u64,
    /// Smallest success ratio a degraded tenant may have
    #[arg(long, value_name = "RATIO", default_value_t = 0.999)]
    min_success: f64,
    /// How much unaffected tenants' p99 latency may grow, in milliseconds
    #[arg(long, value_name = "MS", default_value_t = 50.0)]
    latency_bound_ms: f64,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

/// The error behind exit status 1: the drill ran and a property failed.
#[derive(Debug, thiserror::Error)]
#[error("drill failed: {0}")]
pub struct PropertiesViolated(pub String);

/// Runs `shuffle-shard drill`.
pub fn run(args: DrillArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&args.min_success) {
        bail!("--min-success {} must be between 0 and 1", args.min_success);
    }
    if args.requests_per_tenant == 0 || args.concurrency == 0 {
        bail!("--requests-per-tenant and --concurrency must be at least 1");
    }
    let token = std::fs::read_to_string(&args.admin_token_file).with_context(|| {
        format!(
            "cannot read --admin-token-file {}",
            args.admin_token_file.display()
        )
    })?;
    let text = std::fs::read_to_string(&args.tenants_file)
        .with_context(|| format!("cannot read --tenants-file {}", args.tenants_file.display()))?;
    let tenants = drill::credentials::parse(&text).map_err(|e| anyhow!("--tenants-file: {e}"))?;
    let admin_url: http::Uri = args
        .admin
        .parse()
        .map_err(|_| anyhow!("--admin {:?} is not a URL", args.admin))?;
    let _: http::Uri = args
        .gateway
        .parse()
        .map_err(|_| anyhow!("--gateway {:?} is not a URL", args.gateway))?;
    let fault = if args.kill.is_empty() {
        Fault::Admin(args.fail.clone())
    } else {
        Fault::Wait {
            shards: args.kill.clone(),
            timeout: Duration::from_secs(args.wait_seconds),
        }
    };
    let shape = LoadShape {
        requests_per_tenant: args.requests_per_tenant,
        concurrency: args.concurrency,
        timeout: Duration::from_millis(args.timeout_ms),
    };
    let thresholds = Thresholds {
        min_success: args.min_success,
        latency_bound_ms: args.latency_bound_ms,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(async {
        let admin = AdminClient::new(&admin_url, token.trim());
        let session = Session::prepare(&args.gateway, admin, tenants, shape).await?;
        drill::run::run(&session, &fault, thresholds).await
    })?;
    if args.json {
        let _: crate::output::Flow = print_json(&report)?;
    } else {
        let _: crate::output::Flow = print_text(&render(&report))?;
    }
    if report.passed {
        Ok(())
    } else {
        Err(PropertiesViolated(report.verdict.violations.join("; ")).into())
    }
}

fn render(report: &DrillReport) -> String {
    let verdict = &report.verdict;
    let mut phases = Table::new(&[
        ("phase", Align::Left),
        ("requests", Align::Right),
        ("errors", Align::Right),
        ("p50 ms", Align::Right),
        ("p99 ms", Align::Right),
    ]);
    for phase in &report.phases {
        phases.row(vec![
            phase.name.clone(),
            phase.requests.to_string(),
            phase.errors.to_string(),
            format!("{:.2}", phase.p50_ms),
            format!("{:.2}", phase.p99_ms),
        ]);
    }
    let mut out = format!(
        "Drill: {} tenants, failed {}\n\n{}\n",
        report.tenants,
        verdict.failed.join(", "),
        phases.render(2)
    );
    let mut model = Table::new(&[
        ("", Align::Left),
        ("measured", Align::Right),
        ("modeled", Align::Right),
        ("same tenants", Align::Left),
    ]);
    model.row(vec![
        "fully down".into(),
        verdict.fully_down.to_string(),
        verdict.modeled_fully_down.to_string(),
        yes(verdict.fully_down_matches),
    ]);
    model.row(vec![
        "degraded".into(),
        verdict.degraded.to_string(),
        verdict.modeled_degraded.to_string(),
        yes(verdict.degraded_matches),
    ]);
    model.row(vec![
        "unaffected".into(),
        verdict.unaffected.to_string(),
        String::new(),
        String::new(),
    ]);
    out.push_str(&model.render(2));
    out.push_str(&format!(
        "\n  unaffected errors: {}; unaffected p99 {:.2} ms (baseline {:.2} ms); failovers during the fault: {}\n\n",
        verdict.unaffected_errors, verdict.p99_ms, verdict.baseline_p99_ms, verdict.failovers
    ));
    if report.passed {
        out.push_str("PASS: affected tenants degraded without going down, unaffected tenants felt nothing, and the gateway failed over.\n");
    } else {
        out.push_str("FAIL:\n");
        for violation in &verdict.violations {
            out.push_str(&format!("  - {violation}\n"));
        }
    }
    out
}

fn yes(value: bool) -> String {
    if value { "yes".into() } else { "NO".into() }
}
