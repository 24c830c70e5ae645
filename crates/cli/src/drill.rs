//! The `drill` subcommand: runs synthetic load for every tenant against a
//! running gateway, injects a fault, and checks the three properties a
//! shuffle-sharded service must have under failure.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use backend::Mode;
use clap::{ArgGroup, Args, ValueEnum};
use drill::poison::{PoisonPlan, PoisonReport};
use drill::properties::fully_down_sentence;
use drill::rolling::{RollingPlan, RollingReport};
use drill::run::{DrillReport, Fault, PhaseSummary};
use drill::{
    AdminClient, LoadShape, Properties, Session, SetCheck, ShardControl, Status, Thresholds,
};

use crate::output::print_answer;
use crate::table::{Align, Table};

const AFTER_HELP: &str = "\
Phases: before (baseline load), during (with the fault), after (restored). \
Preconditions, checked before any fault: every shard of the drill's cells is \
up per the admin API, the baseline load has no error, and the failure set \
serves some tenant of --tenants-file; else exit 2 saying what to fix.

The fault must be seen: the drill waits up to --wait-seconds for the admin \
API to report the shards out (with --kill it first says, on stderr, which \
shards to break and when), and after the fault phase for them to come back \
(with --kill it says when to restore them). A fault never seen or a recovery \
never seen fails the drill.

Properties checked during the fault, against the baseline, each reported as \
held, violated or not exercised (a fault that leaves no tenant a surviving \
member cannot test 1 or 3):
  1. affected tenants degrade rather than drop: tenants with some but not all members failed keep a success ratio of at least --min-success;
  2. unaffected tenants see nothing: tenants with no failed member see no errors and their p99 latency stays within --latency-bound-ms of the baseline;
  3. failover really happened: the gateway's shuffle_failovers_total rose while tenants with a surviving member were served.
Tenant by tenant, the measured sets (fully down: success under 50 %; \
degraded: a member out per the gateway; unaffected: the rest) must equal the \
analyser's for the declared failure set. Tenants the model has fully down \
(every member failed) are expected and reported as predicted.

Exit status: 0 when the fault and the recovery were seen, every exercised \
property held and the sets equal the model's; 1 otherwise (the output says \
why); 2 for bad arguments, a failed precondition, or when the drill cannot \
run.

The tenants file has one TENANT<TAB>API_KEY per line.

Examples:
  shuffle-shard drill --gateway http://127.0.0.1:8080 --admin http://127.0.0.1:9901 \\
      --admin-token-file admin.token --tenants-file drill-tenants.tsv --fail s3
  shuffle-shard drill ... --kill s3 --wait-seconds 30   # you break s3 yourself
  shuffle-shard drill ... --break s3=http://127.0.0.1:9203 --break-mode health-stall
  shuffle-shard drill --gateway http://gw-a:8080 --admin http://gw-a:9901 \\
      --gateway http://gw-b:8080 --admin http://gw-b:9901 ... --fail s3   # a fleet

Several --gateway/--admin pairs drill a fleet of replicas ([fleet]): the \
load takes them in turn, the fault is injected through the first, and \
every replica must report it (and the failovers of all count). A replica \
without [fleet] fails the drill (exit 1) naming it before any fault.

--break ID=CONTROL_URL breaks a shard run by `shuffle-shard backend --control` \
through its control API: the drill sets --break-mode (default killed; any \
`shuffle-shard backend --mode` but healthy) before the fault phase, waits up \
to --wait-seconds for the gateway to take it out of rotation, and sets it \
healthy again afterwards.

--protocol grpc drives gRPC unary calls instead of GETs: \
/shuffle.demo.Echo/Unary (the demo service of `shuffle-shard backend \
--protocol grpc`) with an empty message and the tenant's key as \
`authorization: Bearer` metadata, over h2c to --gateway. A call counts as \
failed when it ends with UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, \
CANCELLED, UNAUTHENTICATED or RESOURCE_EXHAUSTED, or not within --timeout-ms; \
any other status is the service's answer and counts as served. For faults \
that strike after a call was sent (blackhole, reset, errors:503:RATE) the \
gateway fails over only methods in routing.grpc_idempotent_methods.

--rolling-restart ID=CONTROL_URL,... restarts the shards in the order \
given, one at a time, through their control APIs while every tenant sends \
requests without a pause: each is killed for --down-ms (and until the \
gateway's health checks have seen it fail), brought back, and the next goes \
down as soon as the gateway's checks pass on it again, as a deploy waits \
for readiness. It reports each tenant's errors and passes when no tenant \
with two or more members saw one and every shard is back in rotation.

--poison TENANT sends requests carrying `x-poison: 1` as TENANT (which must \
be in the tenants file) while every other tenant runs its load, against \
shards run as `shuffle-shard backend --mode crash-on-poison:MS`. It reports \
which shards went down (from their crash counters with --poison-control \
ID=CONTROL_URL, else from the gateway's admin API), which tenants were fully \
down or degraded, and whether that matches `shuffle-shard blast --poison`: \
the whole subset crashed, or with --poison-after A (the gateway's \
routing.poison_after) at most A members and no more fully down than the \
contained worst case. Give MS longer than a phase of load.";

/// Arguments of `shuffle-shard drill`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
// Exactly one way to make the fault: `--fail`, `--kill` or `--break`.
#[command(group(ArgGroup::new("fault").required(true).args(["fail", "kill", "break", "poison", "rolling_restart"])))]
pub struct DrillArgs {
    #[command(flatten)]
    replicas: ReplicaArgs,
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
    /// Send poison requests (`x-poison: 1`) as this tenant, which crash shards in `crash-on-poison` mode
    #[arg(long, value_name = "TENANT")]
    poison: Option<String>,
    /// With --poison: the shards' control APIs, to read which crashed (repeatable or comma-separated)
    #[arg(
        long,
        value_name = "ID=CONTROL_URL",
        value_delimiter = ',',
        requires = "poison"
    )]
    poison_control: Vec<String>,
    /// With --poison: poison requests to send [default: one per member of the tenant's subset]
    #[arg(long, value_name = "N", requires = "poison")]
    poison_requests: Option<usize>,
    /// With --poison: check the gateway's containment (routing.poison_after = A) instead of the uncontained model
    #[arg(long, value_name = "A", requires = "poison")]
    poison_after: Option<usize>,
    /// Restart these shards one at a time under load through their control APIs (`backend --control`), in the order given
    #[arg(long, value_name = "ID=CONTROL_URL", value_delimiter = ',')]
    rolling_restart: Vec<String>,
    /// With --rolling-restart: how long each shard stays down, in milliseconds
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 2000,
        requires = "rolling_restart"
    )]
    down_ms: u64,
    /// How long to wait for the gateway to report the fault, and the recovery
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
    /// The load: HTTP GETs, or gRPC unary calls over h2c judged by their gRPC status
    #[arg(long, value_name = "PROTOCOL", value_enum, default_value_t = LoadProtocol::Http)]
    protocol: LoadProtocol,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

/// `--protocol` of `drill` and `demo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoadProtocol {
    /// HTTP/1.1 GETs of /drill
    Http,
    /// gRPC unary calls of /shuffle.demo.Echo/Unary over h2c (HTTP/2 with prior knowledge)
    Grpc,
}

impl From<LoadProtocol> for drill::load::Protocol {
    fn from(protocol: LoadProtocol) -> Self {
        match protocol {
            LoadProtocol::Http => Self::Http,
            LoadProtocol::Grpc => Self::Grpc,
        }
    }
}

/// The error behind exit status 1: the drill ran and a property failed.
#[derive(Debug, thiserror::Error)]
#[error("drill failed: {0}")]
pub struct PropertiesViolated(pub String);

/// A replica left out of the fleet is a finding (exit 1, as a violated
/// property), not a drill that could not run.
pub(crate) fn not_one_fleet(error: drill::DrillError) -> anyhow::Error {
    match error {
        drill::DrillError::NotOneFleet(what) => PropertiesViolated(what).into(),
        other => other.into(),
    }
}

/// Runs `shuffle-shard drill`.
pub fn run(args: DrillArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&args.min_success) {
        bail!("--min-success {} must be between 0 and 1", args.min_success);
    }
    if args.requests_per_tenant == 0 || args.concurrency == 0 {
        bail!("--requests-per-tenant and --concurrency must be at least 1");
    }
    let rolling = rolling_plan(&args)?;
    let fault = match (&args.poison, &rolling) {
        (None, None) => Some(fault(&args)?),
        _ => None,
    };
    let poison = poison_plan(&args)?;
    let (tenants, mut replicas) = replicas_and_tenants(&args.replicas)?;
    // The first replica is the one faults are injected through.
    let (gateway, admin) = replicas.remove(0);
    let shape = LoadShape {
        requests_per_tenant: args.requests_per_tenant,
        concurrency: args.concurrency,
        timeout: Duration::from_millis(args.timeout_ms),
        protocol: args.protocol.into(),
    };
    let thresholds = Thresholds {
        min_success: args.min_success,
        latency_bound_ms: args.latency_bound_ms,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // The session every kind of drill runs in: the replicas' subsets read,
    // and with several replicas, each checked to be part of the fleet.
    let session = async {
        Session::prepare(&gateway, admin, tenants, shape)
            .await?
            .with_replicas(replicas)
            .await
    };
    let (passed, violations) = match (fault, poison, rolling) {
        (_, _, Some(plan)) => {
            let report = runtime
                .block_on(async {
                    let session = session.await?;
                    drill::rolling::run(&session, &plan, &say).await
                })
                .map_err(not_one_fleet)?;
            let _flow = print_answer(args.json, &report, render_rolling)?;
            (report.passed, report.violations)
        }
        (Some(fault), _, None) => {
            let report = runtime
                .block_on(async {
                    let session = session.await?;
                    drill::run::run(&session, &fault, thresholds, &say).await
                })
                .map_err(not_one_fleet)?;
            let _flow = print_answer(args.json, &report, render)?;
            (report.passed, report.violations)
        }
        (None, Some(plan), None) => {
            let report = runtime
                .block_on(async {
                    let session = session.await?;
                    drill::poison::run(&session, &plan, thresholds, &say).await
                })
                .map_err(not_one_fleet)?;
            let _flow = print_answer(args.json, &report, render_poison)?;
            (report.passed, report.violations)
        }
        (None, None, None) => {
            bail!("give a fault: --fail, --kill, --break, --poison or --rolling-restart")
        }
    };
    if passed {
        Ok(())
    } else {
        Err(PropertiesViolated(violations.join("; ")).into())
    }
}

/// A gateway replica: its data URL and admin API.
pub(crate) type Replica = (String, AdminClient);

/// The gateway replicas a drill or a rollout drives and watches, and the
/// tenants whose load it drives.
#[derive(Debug, Args)]
pub(crate) struct ReplicaArgs {
    /// The gateway's data URL; repeat it for each replica of a fleet
    #[arg(long, value_name = "URL", required = true)]
    gateway: Vec<String>,
    /// The gateway's admin URL; one per --gateway, in the same order
    #[arg(long, value_name = "URL", required = true)]
    admin: Vec<String>,
    /// File holding the admin bearer token
    #[arg(long, value_name = "PATH")]
    admin_token_file: PathBuf,
    /// Tenants whose load is driven, one TENANT<TAB>API_KEY per line
    #[arg(long, value_name = "PATH")]
    tenants_file: PathBuf,
}

/// The tenants of `--tenants-file` and each replica's data URL and admin
/// API (one `--admin` per `--gateway`, in order): what a drill and a
/// rollout drive and watch.
pub(crate) fn replicas_and_tenants(
    args: &ReplicaArgs,
) -> Result<(Vec<drill::TenantCredential>, Vec<Replica>)> {
    let ReplicaArgs {
        gateway: gateways,
        admin: admins,
        admin_token_file,
        tenants_file,
    } = args;
    let token = std::fs::read_to_string(admin_token_file).with_context(|| {
        format!(
            "cannot read --admin-token-file {}",
            admin_token_file.display()
        )
    })?;
    let text = std::fs::read_to_string(tenants_file)
        .with_context(|| format!("cannot read --tenants-file {}", tenants_file.display()))?;
    let tenants = drill::credentials::parse(&text).map_err(|e| anyhow!("--tenants-file: {e}"))?;
    if admins.len() != gateways.len() || gateways.is_empty() {
        bail!(
            "give one --admin per --gateway, in the same order (got {} --gateway and {} --admin)",
            gateways.len(),
            admins.len()
        );
    }
    let mut replicas = Vec::with_capacity(gateways.len());
    for (gateway, admin) in gateways.iter().zip(admins) {
        let admin_url: http::Uri = admin
            .parse()
            .map_err(|_| anyhow!("--admin {admin:?} is not a URL"))?;
        let _: http::Uri = gateway
            .parse()
            .map_err(|_| anyhow!("--gateway {gateway:?} is not a URL"))?;
        replicas.push((gateway.clone(), AdminClient::new(&admin_url, token.trim())));
    }
    Ok((tenants, replicas))
}

/// Tells the operator, on stderr, what the drill does and what to do (the
/// report itself goes to stdout, so `--json` stays clean). A closed stderr
/// leaves nobody to tell.
pub(crate) fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The rolling restart the arguments ask for, if any.
fn rolling_plan(args: &DrillArgs) -> Result<Option<RollingPlan>> {
    if args.rolling_restart.is_empty() {
        return Ok(None);
    }
    if args.down_ms == 0 {
        bail!("--down-ms 0 restarts nothing; give each shard some time down, e.g. --down-ms 2000");
    }
    Ok(Some(RollingPlan {
        shards: parse_controls("--rolling-restart", &args.rolling_restart)?,
        down: Duration::from_millis(args.down_ms),
        timeout: Duration::from_secs(args.wait_seconds),
    }))
}

/// The poison drill the arguments ask for, if any.
fn poison_plan(args: &DrillArgs) -> Result<Option<PoisonPlan>> {
    let Some(tenant) = &args.poison else {
        // clap's `requires` stands aside when another fault is given.
        if !args.poison_control.is_empty()
            || args.poison_requests.is_some()
            || args.poison_after.is_some()
        {
            bail!(
                "--poison-control, --poison-requests and --poison-after need --poison TENANT; they are not used with --fail, --kill or --break"
            );
        }
        return Ok(None);
    };
    if tenant.is_empty() {
        bail!("--poison \"\" names no tenant; give a tenant from --tenants-file");
    }
    if args.poison_requests == Some(0) {
        bail!("--poison-requests 0 sends no poison; pass 1 or more");
    }
    let controls = parse_controls("--poison-control", &args.poison_control)?;
    Ok(Some(PoisonPlan {
        tenant: tenant.clone(),
        requests: args.poison_requests,
        controls,
        poison_after: args.poison_after,
        recovery: Duration::from_secs(args.wait_seconds),
    }))
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
    Ok(Fault::Admin {
        shards: args.fail.clone(),
        timeout,
    })
}

/// Parses `--break` values, `ID=CONTROL_URL` each, with one shard once.
fn parse_breaks(values: &[String]) -> Result<Vec<ShardControl>> {
    parse_controls("--break", values)
}

/// Parses `ID=CONTROL_URL` values of `flag`, with one shard once.
fn parse_controls(flag: &str, values: &[String]) -> Result<Vec<ShardControl>> {
    let mut shards: Vec<ShardControl> = Vec::with_capacity(values.len());
    for value in values {
        let example = format!("e.g. {flag} s3=http://127.0.0.1:9203");
        let (id, url) = value
            .split_once('=')
            .filter(|(id, url)| !id.trim().is_empty() && !url.trim().is_empty())
            .ok_or_else(|| anyhow!("{flag} {value:?}: expected ID=CONTROL_URL, {example}"))?;
        let (id, url) = (id.trim(), url.trim());
        let base: http::Uri = url
            .parse()
            .ok()
            .filter(|uri: &http::Uri| uri.scheme_str() == Some("http") && uri.host().is_some())
            .ok_or_else(|| {
                anyhow!(
                    "{flag} {value:?}: {url:?} is not an http:// URL of a control API, {example}"
                )
            })?;
        if shards.iter().any(|shard| shard.id() == id) {
            bail!("{flag} names shard {id:?} twice; give each shard once");
        }
        shards.push(ShardControl::new(id, &base));
    }
    Ok(shards)
}

fn render(report: &DrillReport) -> String {
    let fault = &report.fault;
    let mut out = format!(
        "Drill: {} tenants, failing {} ({})\n{}\n",
        report.tenants,
        fault.shards.join(", "),
        fault.injected,
        report.baseline.describe()
    );
    out.push_str(&match (fault.out_after_s, fault.back_after_s) {
        (None, _) => "The gateway never reported the fault: nothing was tested.\n".to_owned(),
        (Some(out), Some(back)) => format!(
            "The gateway reported the fault after {out:.1} s, and the recovery {back:.1} s after the restore.\n"
        ),
        (Some(out), None) => format!(
            "The gateway reported the fault after {out:.1} s; it did not report the recovery.\n"
        ),
    });
    out.push_str(&format!("\n{}\n", phase_table(&report.phases).render(2)));
    if let Some(verdict) = &report.verdict {
        out.push_str(&sets_table(
            "tenants",
            [&verdict.fully_down, &verdict.degraded, &verdict.unaffected],
        ));
        out.push_str(&format!(
            "\n  {}",
            fully_down_sentence(&verdict.fully_down, "every member of their subsets failed")
        ));
        if verdict.fully_down.modeled > 0 {
            out.push_str(&format!(
                " {} of the fault phase's {} errors are theirs.",
                verdict.fully_down_errors, verdict.errors
            ));
        }
        out.push('\n');
        out.push_str(&properties_block(&verdict.properties));
        out.push('\n');
    }
    out.push_str(&verdict_lines(
        report.passed,
        report.verdict.as_ref().map(|v| &v.properties),
        &report.violations,
    ));
    out
}

fn render_poison(report: &PoisonReport) -> String {
    let verdict = &report.verdict;
    let phases = phase_table(&report.phases);
    let statuses: Vec<String> = verdict
        .poison_statuses
        .iter()
        .map(|status| status.map_or("no answer".to_owned(), |s| s.to_string()))
        .collect();
    let mut out = format!(
        "Poison drill: {} tenants; {} (subset {}) sent {} poison requests, answered {}\n{}\n\n{}\n",
        report.tenants,
        verdict.tenant,
        verdict.subset.join(", "),
        verdict.poison_requests,
        statuses.join(", "),
        report.baseline.describe(),
        phases.render(2)
    );
    let list = |shards: &[String]| {
        if shards.is_empty() {
            "none".to_owned()
        } else {
            shards.join(", ")
        }
    };
    out.push_str(&format!(
        "  shards down (from the {}): {}\n  the gateway reported out of rotation: {}\n",
        verdict.crashed_source,
        list(&verdict.crashed),
        list(&verdict.gateway_saw_out)
    ));
    let (compared, label) = match (&verdict.models.contained, verdict.poison_after) {
        (Some(model), Some(after)) => (model, format!("modeled, at most {after} crash")),
        _ => (
            &verdict.models.uncontained,
            "modeled (blast --poison)".to_owned(),
        ),
    };
    let mut model = Table::new(&[
        ("", Align::Left),
        ("measured", Align::Right),
        (&label, Align::Right),
        ("for the shards that crashed", Align::Right),
        ("same tenants", Align::Left),
    ]);
    model.row(vec![
        "shards down".into(),
        verdict.crashed.len().to_string(),
        if compared.exact {
            list(&compared.crashed)
        } else {
            "(any; bound)".to_owned()
        },
        String::new(),
        yes(verdict.crashed_matches),
    ]);
    for (name, check, modeled) in [
        (
            "other tenants fully down",
            &verdict.fully_down,
            compared.others_fully_down.to_string(),
        ),
        ("degraded", &verdict.degraded, compared.degraded.to_string()),
        ("unaffected", &verdict.unaffected, String::new()),
    ] {
        model.row(vec![
            name.into(),
            check.measured.to_string(),
            modeled,
            check.modeled.to_string(),
            yes(check.matches),
        ]);
    }
    out.push_str(&model.render(2));
    out.push_str(&format!(
        "\n  {}\n",
        fully_down_sentence(&verdict.fully_down, "every member of their subsets crashed")
    ));
    out.push_str(&properties_block(&verdict.properties));
    out.push('\n');
    out.push_str(&verdict_lines(
        report.passed,
        Some(&verdict.properties),
        &report.violations,
    ));
    out
}

fn render_rolling(report: &RollingReport) -> String {
    let mut out = format!(
        "Rolling restart: {} tenants, {} shards restarted one at a time\n{}\n\n{}\n",
        report.tenants,
        report.restarts.len(),
        report.baseline.describe(),
        phase_table(&report.phases).render(2)
    );
    let mut restarts = Table::new(&[
        ("shard", Align::Left),
        ("seen down after s", Align::Right),
        ("checks pass after s", Align::Right),
        ("gateway then", Align::Left),
    ]);
    let secs = |s: Option<f64>| s.map_or("never".to_owned(), |s| format!("{s:.1}"));
    for restart in &report.restarts {
        restarts.row(vec![
            restart.shard.clone(),
            secs(restart.seen_down_after_s),
            secs(restart.ready_after_s),
            restart
                .health_when_ready
                .clone()
                .unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    out.push_str(&format!("\n{}", restarts.render(2)));
    out.push_str(&format!(
        "\n  At most {} shards out of rotation at once.\n",
        report.most_out
    ));
    if report.single_member_errors > 0 {
        out.push_str(&format!(
            "  Tenants with a single member had {} errors (expected: their shard was down).\n",
            report.single_member_errors
        ));
    }
    if report.failing.is_empty() {
        out.push_str("  No tenant with two or more members saw an error.\n");
    } else {
        let mut failing = Table::new(&[
            ("tenant", Align::Left),
            ("subset", Align::Left),
            ("errors", Align::Right),
            ("requests", Align::Right),
        ]);
        for tenant in report.failing.iter().take(20) {
            failing.row(vec![
                tenant.tenant.clone(),
                tenant.subset.join(", "),
                tenant.errors.to_string(),
                tenant.requests.to_string(),
            ]);
        }
        out.push_str(&format!(
            "\n  Tenants with two or more members that saw errors ({}):\n{}",
            report.failing.len(),
            failing.render(2)
        ));
    }
    out.push('\n');
    out.push_str(&if report.passed {
        "PASS: no tenant with two or more members saw an error.\n".to_owned()
    } else {
        verdict_lines(false, None, &report.violations)
    });
    out
}

/// The measured sets beside the model's, one row each.
fn sets_table(what: &str, [down, degraded, unaffected]: [&SetCheck; 3]) -> String {
    let mut table = Table::new(&[
        (what, Align::Left),
        ("measured", Align::Right),
        ("modeled", Align::Right),
        ("same tenants", Align::Left),
    ]);
    for (name, check) in [
        ("fully down", down),
        ("degraded", degraded),
        ("unaffected", unaffected),
    ] {
        table.row(vec![
            name.into(),
            check.measured.to_string(),
            check.modeled.to_string(),
            yes(check.matches),
        ]);
    }
    table.render(2)
}

/// The three properties, numbered, each held, violated or not exercised.
fn properties_block(properties: &Properties) -> String {
    let mut out = "\nProperties:\n".to_owned();
    for (number, (name, property)) in properties.named().iter().enumerate() {
        out.push_str(&format!(
            "  {}. {name}: {} ({}).\n",
            number + 1,
            status_word(property.status),
            property.detail
        ));
    }
    out
}

fn status_word(status: Status) -> &'static str {
    match status {
        Status::Held => "held",
        Status::Violated => "VIOLATED",
        Status::NotExercised => "not exercised",
    }
}

/// Each phase's requests, errors and latency, as both drills print them.
fn phase_table(phases: &[PhaseSummary]) -> Table {
    let mut table = Table::new(&[
        ("phase", Align::Left),
        ("requests", Align::Right),
        ("errors", Align::Right),
        ("p50 ms", Align::Right),
        ("p99 ms", Align::Right),
    ]);
    for phase in phases {
        table.row(vec![
            phase.name.clone(),
            phase.requests.to_string(),
            phase.errors.to_string(),
            format!("{:.2}", phase.p50_ms),
            format!("{:.2}", phase.p99_ms),
        ]);
    }
    table
}

/// `PASS:` and which properties held (and which the fault did not
/// exercise), or `FAIL:` and each violation on a line.
fn verdict_lines(passed: bool, properties: Option<&Properties>, violations: &[String]) -> String {
    if !passed {
        return violations
            .iter()
            .fold("FAIL:\n".to_owned(), |mut out, violation| {
                out.push_str(&format!("  - {violation}\n"));
                out
            });
    }
    let numbers = |wanted: Status| -> Vec<String> {
        properties
            .map(|p| p.named())
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, (_, property))| property.status == wanted)
            .map(|(number, _)| (number + 1).to_string())
            .collect()
    };
    let (held, idle) = (numbers(Status::Held), numbers(Status::NotExercised));
    if idle.is_empty() {
        return "PASS: every property held, and the measured tenants are the model's.\n".to_owned();
    }
    let held = if held.is_empty() {
        "no property was exercised".to_owned()
    } else {
        format!("{} held", held.join(" and "))
    };
    format!(
        "PASS, partly: {held}, and the measured tenants are the model's; {} not exercised by this fault.\n",
        idle.join(" and ")
    )
}

fn yes(value: bool) -> String {
    if value { "yes".into() } else { "NO".into() }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use drill::Property;

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
    fn poison_is_a_fault_of_its_own_with_its_options() {
        let args = parse(&[
            "--poison",
            "whale",
            "--poison-control",
            "s0=http://127.0.0.1:9200,s1=http://127.0.0.1:9201",
            "--poison-after",
            "2",
        ])
        .unwrap();
        let plan = poison_plan(&args).unwrap().unwrap();
        assert_eq!(plan.tenant, "whale");
        assert_eq!(plan.controls.len(), 2);
        assert_eq!(plan.poison_after, Some(2));
        assert_eq!(plan.requests, None);
        let error = parse(&["--poison", "whale", "--fail", "s1"]).unwrap_err();
        assert!(error.contains("cannot be used with"), "{error}");
        for option in [["--poison-after", "2"], ["--poison-requests", "3"]] {
            let args = parse(&["--fail", "s1", option[0], option[1]]).unwrap();
            let error = poison_plan(&args).unwrap_err().to_string();
            assert!(error.contains("need --poison TENANT"), "{error}");
        }
        let bad = parse(&["--poison", "whale", "--poison-control", "s0"]).unwrap();
        let error = poison_plan(&bad).unwrap_err().to_string();
        assert!(error.starts_with("--poison-control \"s0\""), "{error}");
        let none = parse(&["--poison", "whale", "--poison-requests", "0"]).unwrap();
        assert!(poison_plan(&none).is_err());
    }

    #[test]
    fn the_verdict_line_names_what_held_and_what_was_not_exercised() {
        let held = || Property::tested(true, "figures");
        let mut properties = Properties {
            degrade_not_drop: held(),
            unaffected_see_nothing: held(),
            failover_happened: held(),
        };
        assert_eq!(
            verdict_lines(true, Some(&properties), &[]),
            "PASS: every property held, and the measured tenants are the model's.\n"
        );
        properties.degrade_not_drop = Property::not_exercised("nobody kept a member");
        properties.failover_happened = Property::not_exercised("nobody kept a member");
        assert_eq!(
            verdict_lines(true, Some(&properties), &[]),
            "PASS, partly: 2 held, and the measured tenants are the model's; 1 and 3 not exercised by this fault.\n"
        );
        let block = properties_block(&properties);
        assert!(
            block.contains("  1. affected tenants degrade rather than drop: not exercised (nobody kept a member).\n"),
            "{block}"
        );
        let failed = verdict_lines(false, None, &["one".into(), "two".into()]);
        assert_eq!(failed, "FAIL:\n  - one\n  - two\n");
    }

    #[test]
    fn the_rolling_report_names_each_restart_and_every_failing_tenant() {
        use drill::rolling::{Restart, TenantErrors};
        let mut report = RollingReport {
            tenants: 3,
            baseline: drill::preconditions::Baseline {
                cells: vec!["main".into()],
                shards_up: 2,
                requests: 30,
                errors: 0,
            },
            restarts: vec![Restart {
                shard: "main/s0".into(),
                seen_down_after_s: Some(1.25),
                ready_after_s: None,
                health_when_ready: None,
            }],
            phases: Vec::new(),
            most_out: 2,
            failing: vec![TenantErrors {
                tenant: "acme".into(),
                subset: vec!["s0".into(), "s1".into()],
                requests: 40,
                errors: 3,
            }],
            single_member_errors: 7,
            violations: vec!["acme saw errors".into()],
            passed: false,
        };
        let text = render_rolling(&report);
        assert!(text.contains("main/s0"), "{text}");
        assert!(text.contains("1.2") && text.contains("never"), "{text}");
        assert!(
            text.contains("At most 2 shards out of rotation at once."),
            "{text}"
        );
        assert!(text.contains("had 7 errors (expected"), "{text}");
        assert!(text.contains("acme") && text.contains("s0, s1"), "{text}");
        assert!(text.ends_with("FAIL:\n  - acme saw errors\n"), "{text}");
        report.failing.clear();
        report.violations.clear();
        report.passed = true;
        let text = render_rolling(&report);
        assert!(
            text.contains("No tenant with two or more members saw an error."),
            "{text}"
        );
        assert!(
            text.ends_with("PASS: no tenant with two or more members saw an error.\n"),
            "{text}"
        );
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
