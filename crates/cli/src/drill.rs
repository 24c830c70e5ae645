//! The `drill` subcommand: runs synthetic load for every tenant against a
//! running gateway, injects a fault, and checks the three properties a
//! shuffle-sharded service must have under failure.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use backend::Mode;
use clap::{ArgGroup, Args};
use drill::run::{DrillReport, Fault};
use drill::{AdminClient, LoadShape, Session, ShardControl, Thresholds};

use crate::output::print_answer;
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
  shuffle-shard drill ... --kill s3 --wait-seconds 30   # you break s3 yourself
  shuffle-shard drill ... --break s3=http://127.0.0.1:9203 --break-mode health-stall

--break ID=CONTROL_URL breaks a shard run by `shuffle-shard backend --control` \
through its control API: the drill sets --break-mode (default killed; any \
`shuffle-shard backend --mode` but healthy) before the fault phase, waits up \
to --wait-seconds for the gateway to take it out of rotation, and sets it \
healthy again afterwards.";

/// Arguments of `shuffle-shard drill`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
// Exactly one way to make the fault: `--fail`, `--kill` or `--break`.
#[command(group(ArgGroup::new("fault").required(true).args(["fail", "kill", "break"])))]
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
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    fail: Vec<String>,
    /// Shards you will break yourself (kill, blackhole); the drill waits for the gateway to notice
    #[arg(long, value_name = "IDS", value_delimiter = ',')]
    kill: Vec<String>,
    /// Shards the drill breaks through their control API (`backend --control`), repeatable or comma-separated
    #[arg(
        id = "break",
        long = "break",
        value_name = "ID=CONTROL_URL",
        value_delimiter = ','
    )]
    breaks: Vec<String>,
    /// With --break: the mode that breaks them (a `backend --mode`) [default: killed]
    #[arg(long, value_name = "MODE", requires = "break")]
    break_mode: Option<Mode>,
    /// With --kill or --break: how long to wait for the gateway to see the fault, and the recovery
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
    let fault = fault(&args)?;
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
    let _flow = print_answer(args.json, &report, render)?;
    if report.passed {
        Ok(())
    } else {
        Err(PropertiesViolated(report.verdict.violations.join("; ")).into())
    }
}

/// The fault the arguments ask for (clap has already made them exclusive).
fn fault(args: &DrillArgs) -> Result<Fault> {
    let timeout = Duration::from_secs(args.wait_seconds);
    if args.breaks.is_empty() && args.break_mode.is_some() {
        // clap's `requires` stands aside when --fail or --kill is given.
        bail!("--break-mode needs --break ID=CONTROL_URL; it is not used with --fail or --kill");
    }
    if !args.breaks.is_empty() {
        let mode = args.break_mode.clone().unwrap_or(Mode::Killed);
        if mode == Mode::Healthy {
            bail!(
                "--break-mode healthy breaks nothing; pick a sick mode, e.g. killed or health-stall"
            );
        }
        return Ok(Fault::Break {
            shards: parse_breaks(&args.breaks)?,
            mode: mode.to_string(),
            timeout,
        });
    }
    if !args.kill.is_empty() {
        return Ok(Fault::Wait {
            shards: args.kill.clone(),
            timeout,
        });
    }
    Ok(Fault::Admin(args.fail.clone()))
}

/// Parses `--break` values, `ID=CONTROL_URL` each, with one shard once.
fn parse_breaks(values: &[String]) -> Result<Vec<ShardControl>> {
    let mut shards: Vec<ShardControl> = Vec::with_capacity(values.len());
    for value in values {
        let example = "e.g. --break s3=http://127.0.0.1:9203";
        let (id, url) = value
            .split_once('=')
            .filter(|(id, url)| !id.trim().is_empty() && !url.trim().is_empty())
            .ok_or_else(|| anyhow!("--break {value:?}: expected ID=CONTROL_URL, {example}"))?;
        let (id, url) = (id.trim(), url.trim());
        let base: http::Uri = url
            .parse()
            .ok()
            .filter(|uri: &http::Uri| uri.scheme_str() == Some("http") && uri.host().is_some())
            .ok_or_else(|| {
                anyhow!(
                    "--break {value:?}: {url:?} is not an http:// URL of a control API, {example}"
                )
            })?;
        if shards.iter().any(|shard| shard.id() == id) {
            bail!("--break names shard {id:?} twice; give each shard once");
        }
        shards.push(ShardControl::new(id, &base));
    }
    Ok(shards)
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: DrillArgs,
    }

    fn parse(fault: &[&str]) -> Result<DrillArgs, String> {
        let mut argv = vec![
            "drill",
            "--gateway",
            "http://127.0.0.1:8080",
            "--admin",
            "http://127.0.0.1:9901",
            "--admin-token-file",
            "t",
            "--tenants-file",
            "f",
        ];
        argv.extend_from_slice(fault);
        Cli::try_parse_from(argv)
            .map(|cli| cli.args)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn break_takes_repeated_and_comma_separated_shards_and_a_mode() {
        let args = parse(&[
            "--break",
            "s3=http://127.0.0.1:9203,s4=http://127.0.0.1:9204",
            "--break",
            "s5=http://10.0.0.5:9200/",
            "--break-mode",
            "health-trickle:100",
        ])
        .unwrap();
        assert_eq!(args.breaks.len(), 3);
        assert_eq!(
            args.break_mode,
            Some(Mode::HealthTrickle(Duration::from_millis(100)))
        );
        let shards = parse_breaks(&args.breaks).unwrap();
        let ids: Vec<&str> = shards.iter().map(ShardControl::id).collect();
        assert_eq!(ids, ["s3", "s4", "s5"]);
        assert_eq!(shards[2].base(), "http://10.0.0.5:9200");
        let default = parse(&["--break", "s3=http://127.0.0.1:9203"]).unwrap();
        let Fault::Break { mode, .. } = fault(&default).unwrap() else {
            panic!("not a break");
        };
        assert_eq!(mode, "killed");
    }

    #[test]
    fn break_conflicts_with_the_other_faults() {
        for other in [["--fail", "s1"], ["--kill", "s1"]] {
            let error =
                parse(&["--break", "s3=http://127.0.0.1:9203", other[0], other[1]]).unwrap_err();
            assert!(error.contains("cannot be used with"), "{error}");
        }
        for other in [["--fail", "s1"], ["--kill", "s1"]] {
            let args = parse(&["--break-mode", "unread", other[0], other[1]]).unwrap();
            let error = fault(&args).unwrap_err().to_string();
            assert!(error.contains("--break-mode needs --break"), "{error}");
        }
        assert!(parse(&[]).is_err(), "some fault is required");
    }

    #[test]
    fn bad_break_values_name_the_flag_and_the_fix() {
        let error = parse(&["--break", "s3=http://h:1", "--break-mode", "trickle:0"]).unwrap_err();
        assert!(error.contains("trickle:0"), "{error}");
        for bad in [
            "s3",
            "=http://127.0.0.1:9203",
            "s3=",
            "s3=127.0.0.1:9203",
            "s3=https://127.0.0.1:9203",
            "s3=http://",
        ] {
            let error = parse_breaks(&[bad.to_owned()]).unwrap_err().to_string();
            assert!(error.starts_with("--break "), "{bad}: {error}");
            assert!(error.contains("e.g. --break s3=http://"), "{bad}: {error}");
        }
        let twice = ["s3=http://a:1".to_owned(), "s3=http://b:1".to_owned()];
        assert!(
            parse_breaks(&twice)
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        let healthy = parse(&["--break", "s3=http://a:1", "--break-mode", "healthy"]).unwrap();
        let error = fault(&healthy).unwrap_err().to_string();
        assert!(error.contains("--break-mode healthy"), "{error}");
    }
}
