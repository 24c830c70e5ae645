//! The `rollout` subcommand: deploys a new build one wave of shards at a
//! time through a command of the operator's, under the drill's load, and
//! stops at the first wave whose gates fail (the waiting and judging are
//! `drill::rollout`'s; this module reads the arguments, runs the command
//! and writes the report).

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use drill::rollout::gates::Limits;
use drill::rollout::{self, Deployed, OnFailure, RolloutPlan, RolloutReport, Wave, WaveStatus};
use drill::{LoadShape, Session};

use crate::drill::{ReplicaArgs, not_one_fleet, replicas_and_tenants, say};
use crate::output::print_answer;
use crate::table::{Align, Table};

const AFTER_HELP: &str = "\
For each wave, in the order of --waves: check that every shard is up on \
every replica and that a baseline of load has no error; drain the wave's \
shards and wait for their requests in flight to finish; run --deploy with \
SHUFFLE_SHARD_WAVE (the wave's name), SHUFFLE_SHARD_SHARDS (its shard \
ids, comma-separated) and SHUFFLE_SHARD_CELLS (each one's cell, in the same \
order) in its environment, in a process group of its own (killed whole \
past --deploy-timeout-seconds); restore the shards and wait for \
their health checks to pass on every replica; then bake for --bake-seconds \
under load from every tenant of --tenants-file.

Gates (a failed gate stops the rollout): preconditions, drain (idle within \
--wait-seconds), deploy (the command exits 0 within --deploy-timeout-seconds), \
ready (health checks pass within --wait-seconds), exposure (while the wave \
is out only tenants whose whole subset is in it may see errors), and during \
the bake: wave-shards (no shard of the wave ejected, failing its checks, or \
failing attempts, even when failover hides it), outside-wave (no error for a \
tenant without a member in the wave), fully-down (at most --max-fully-down \
tenants) and degraded (at most --max-degraded tenants, measured by the load \
and by the gateway's live blast radius).

A failed gate leaves the wave drained (or restored, with --on-failure \
restore), touches no later wave, prints the report naming the wave, the \
gates and the tenants that hurt, and exits 1. Fix the build and continue \
with --resume-from WAVE. Exit 0 when every wave was done; 2 for bad \
arguments or a rollout that could not run.

The waves file has one `SHARD_ID WAVE` line per shard (`CELL/ID` where \
cells share ids), as `plan-waves --out` writes it; a first wave of one \
shard is a canary. The tenants file has one TENANT<TAB>API_KEY per line.

Example:
  shuffle-shard rollout --waves waves.txt --deploy './deploy.sh' \\
      --gateway http://127.0.0.1:8080 --admin http://127.0.0.1:9901 \\
      --admin-token-file admin.token --tenants-file drill-tenants.tsv \\
      --bake-seconds 60";

/// Arguments of `shuffle-shard rollout`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct RolloutArgs {
    /// The waves: one `SHARD_ID WAVE` line per shard, waves in order of first appearance
    #[arg(long, value_name = "PATH")]
    waves: PathBuf,
    /// The command that deploys one wave (run by `sh -c`, with SHUFFLE_SHARD_WAVE, SHUFFLE_SHARD_SHARDS and SHUFFLE_SHARD_CELLS set)
    #[arg(long, value_name = "COMMAND")]
    deploy: String,
    #[command(flatten)]
    replicas: ReplicaArgs,
    /// How long each wave bakes under load once its shards are back
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    bake_seconds: f64,
    /// Tenants that may be degraded during a bake
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_degraded: u64,
    /// Tenants that may be fully down during a bake
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_fully_down: u64,
    /// What a wave whose gate failed is left as
    #[arg(long, value_name = "WHAT", value_enum, default_value_t = Leave::Drain)]
    on_failure: Leave,
    /// Start at this wave, skipping those before it (continues a stopped rollout)
    #[arg(long, value_name = "WAVE")]
    resume_from: Option<String>,
    /// The longest wait for a drain to be idle, or health checks to pass
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    wait_seconds: u64,
    /// The longest one run of --deploy may take; it is killed after
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    deploy_timeout_seconds: u64,
    /// Requests per tenant in each baseline
    #[arg(long, value_name = "N", default_value_t = 3)]
    requests_per_tenant: usize,
    /// Requests in flight at once
    #[arg(long, value_name = "N", default_value_t = 16)]
    concurrency: usize,
    /// Per-request timeout in milliseconds
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    timeout_ms: u64,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

/// `--on-failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Leave {
    /// Leave the failed wave's shards drained
    Drain,
    /// Put the failed wave's shards back in rotation
    Restore,
}

/// The error behind exit status 1: a gate failed and the rollout stopped.
#[derive(Debug, thiserror::Error)]
#[error("rollout stopped at {0}")]
pub struct RolloutStopped(pub String);

/// Runs `shuffle-shard rollout`.
pub fn run(args: RolloutArgs) -> Result<()> {
    if !(args.bake_seconds.is_finite() && args.bake_seconds >= 0.0) {
        bail!(
            "--bake-seconds {} must be 0 or more seconds",
            args.bake_seconds
        );
    }
    if args.requests_per_tenant == 0 || args.concurrency == 0 {
        bail!("--requests-per-tenant and --concurrency must be at least 1");
    }
    if args.deploy.trim().is_empty() {
        bail!(
            "--deploy is empty; give the command that deploys one wave, e.g. --deploy './deploy.sh'"
        );
    }
    let waves_text = std::fs::read_to_string(&args.waves)
        .with_context(|| format!("cannot read --waves {}", args.waves.display()))?;
    let (tenants, mut replicas) = replicas_and_tenants(&args.replicas)?;
    let (gateway, admin) = replicas.remove(0);
    let shape = LoadShape {
        requests_per_tenant: args.requests_per_tenant,
        concurrency: args.concurrency,
        timeout: Duration::from_millis(args.timeout_ms),
        protocol: drill::load::Protocol::Http,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let command = args.deploy.clone();
    let deploy_timeout = Duration::from_secs(args.deploy_timeout_seconds);
    let deploy = move |wave: &Wave| {
        let (command, wave) = (command.clone(), wave.clone());
        Box::pin(async move { run_deploy(command, &wave, deploy_timeout).await })
            as std::pin::Pin<Box<dyn Future<Output = Deployed> + Send>>
    };
    let report = runtime
        .block_on(async {
            let session = Session::prepare(&gateway, admin, tenants, shape)
                .await?
                .with_replicas(replicas)
                .await?;
            let waves = rollout::waves::parse(&waves_text, session.cells())?;
            let plan = RolloutPlan {
                waves,
                bake: Duration::from_secs_f64(args.bake_seconds),
                limits: Limits {
                    max_degraded: args.max_degraded,
                    max_fully_down: args.max_fully_down,
                },
                on_failure: match args.on_failure {
                    Leave::Drain => OnFailure::Drain,
                    Leave::Restore => OnFailure::Restore,
                },
                resume_from: args.resume_from.clone(),
                timeout: Duration::from_secs(args.wait_seconds),
            };
            rollout::run(&session, &plan, &deploy, &say).await
        })
        .map_err(not_one_fleet)?;
    let _flow = print_answer(args.json, &report, render)?;
    match &report.stopped {
        None => Ok(()),
        Some(stopped) => Err(RolloutStopped(format!(
            "wave {}: gate {} failed; the wave was left {}; continue with {} once the build is fixed",
            stopped.wave,
            stopped.gates.join(", "),
            stopped.left,
            stopped.resume
        ))
        .into()),
    }
}

/// The last lines of a deploy's output kept for the report, and the most
/// of one line kept.
const TAIL_LINES: usize = 5;
const LINE_BYTES: usize = 500;

/// How long the output is still read after the command exits: a process
/// it started in the background (the new build itself, say) may hold the
/// pipes open for ever.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// Runs the deploy command for one wave: `sh -c COMMAND` with the wave in
/// its environment, in a process group of its own, its output echoed to
/// stderr line by line as it comes (stdout stays the report's) with the
/// last lines kept for the report. Past `timeout` the whole group is
/// killed, so nothing it started goes on deploying after the wave failed.
async fn run_deploy(command: String, wave: &Wave, timeout: Duration) -> Deployed {
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .env("SHUFFLE_SHARD_WAVE", &wave.name)
        .env("SHUFFLE_SHARD_SHARDS", wave.ids())
        .env("SHUFFLE_SHARD_CELLS", wave.cells())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            return Deployed {
                ok: false,
                detail: format!("cannot start `sh -c {command}`: {error}"),
            };
        }
    };
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
    let mut readers = tokio::task::JoinSet::new();
    if let Some(stdout) = child.stdout.take() {
        readers.spawn(echo(stdout, wave.name.clone(), Arc::clone(&tail)));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.spawn(echo(stderr, wave.name.clone(), Arc::clone(&tail)));
    }
    let status = tokio::time::timeout(timeout, child.wait()).await;
    if status.is_err()
        && let Some(group) = child.id()
    {
        kill_group(group);
    }
    // The output the command wrote before it ended, but not what something
    // it left running writes later.
    let _ = tokio::time::timeout(OUTPUT_GRACE, async {
        while readers.join_next().await.is_some() {}
    })
    .await;
    readers.abort_all();
    let tail: Vec<String> = tail
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .cloned()
        .collect();
    let said = if tail.is_empty() {
        "no output".to_owned()
    } else {
        format!("last output: {}", tail.join(" / "))
    };
    match status {
        Err(_) => Deployed {
            ok: false,
            detail: format!(
                "did not finish within {} s, and its process group was killed; raise --deploy-timeout-seconds if deploys take longer; {said}",
                timeout.as_secs()
            ),
        },
        Ok(Err(error)) => Deployed {
            ok: false,
            detail: format!("waiting for the deploy command: {error}"),
        },
        Ok(Ok(status)) => Deployed {
            ok: status.success(),
            detail: match status.code() {
                Some(code) => format!("exit status {code}; {said}"),
                None => format!("killed by a signal; {said}"),
            },
        },
    }
}

/// Echoes `output` to stderr line by line, keeping the last lines (each
/// cut at [`LINE_BYTES`]) in `tail`; a line without an end is read in
/// pieces, never whole into memory.
async fn echo(
    output: impl tokio::io::AsyncRead + Unpin,
    wave: String,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _};
    let mut reader = tokio::io::BufReader::new(output);
    let mut line = Vec::new();
    loop {
        line.clear();
        // At most LINE_BYTES of a line, and the rest of it skipped.
        let read = (&mut reader)
            .take(LINE_BYTES as u64)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') && line.len() == LINE_BYTES {
            let mut skipped = Vec::new();
            loop {
                skipped.clear();
                match (&mut reader)
                    .take(64 * 1024)
                    .read_until(b'\n', &mut skipped)
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) if skipped.last() == Some(&b'\n') => break,
                    Ok(_) => {}
                }
            }
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        say(&format!("  [deploy {wave}] {text}"));
        let mut tail = tail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(text);
    }
}

/// Kills process group `group` (the deploy command and everything it
/// started), through kill(1): this crate has no unsafe code to call
/// killpg with.
fn kill_group(group: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The report as text.
fn render(report: &RolloutReport) -> String {
    let mut out = format!(
        "Rollout: {} waves, {} tenants driven through {} replica{}\n\n",
        report.waves.len(),
        report.tenants,
        report.replicas,
        if report.replicas == 1 { "" } else { "s" }
    );
    let mut table = Table::new(&[
        ("wave", Align::Left),
        ("shards", Align::Left),
        ("fully exposed", Align::Right),
        ("status", Align::Left),
        ("deploy s", Align::Right),
        ("ready s", Align::Right),
        ("hurt while out", Align::Right),
        ("bake requests", Align::Right),
        ("bake errors", Align::Right),
        ("gates", Align::Left),
    ]);
    let secs = |s: Option<f64>| s.map_or("-".to_owned(), |s| format!("{s:.1}"));
    for wave in &report.waves {
        table.row(vec![
            wave.wave.clone(),
            wave.shards.join(","),
            wave.fully_exposed.len().to_string(),
            match wave.status {
                WaveStatus::Skipped => "skipped",
                WaveStatus::Done => "done",
                WaveStatus::Failed => "FAILED",
                WaveStatus::NotStarted => "not started",
            }
            .to_owned(),
            secs(wave.deploy_seconds),
            secs(wave.ready_after_s),
            wave.while_out
                .as_ref()
                .map_or("-".to_owned(), |load| load.hurt.len().to_string()),
            wave.bake
                .as_ref()
                .map_or("-".to_owned(), |bake| bake.load.requests.to_string()),
            wave.bake
                .as_ref()
                .map_or("-".to_owned(), |bake| bake.load.errors.to_string()),
            match (wave.status, wave.failed.as_slice()) {
                (WaveStatus::Done, _) => "passed".to_owned(),
                (_, []) => "-".to_owned(),
                (_, failed) => failed
                    .iter()
                    .map(|f| f.gate.name())
                    .collect::<Vec<_>>()
                    .join(","),
            },
        ]);
    }
    out.push_str(&table.render(2));
    out.push('\n');
    match &report.stopped {
        None => out.push_str("\nEvery wave passed its gates.\n"),
        Some(stopped) => {
            let wave = report
                .waves
                .iter()
                .find(|w| w.wave == stopped.wave)
                .expect("the stopped wave is in the report");
            out.push_str(&format!("\nStopped at wave {}:\n", stopped.wave));
            for failed in &wave.failed {
                out.push_str(&format!("  gate {}: {}\n", failed.gate.name(), failed.why));
            }
            out.push_str(&format!(
                "  Tenants hurt: {}.\n",
                if stopped.tenants_hurt.is_empty() {
                    "none".to_owned()
                } else {
                    stopped.tenants_hurt.join(", ")
                }
            ));
            if let Some(out_load) = &wave.while_out {
                out.push_str(&format!(
                    "  While the wave was out, {} tenants saw errors; {} are fully exposed to it (every member in the wave), as placement predicts.\n",
                    out_load.hurt.len(),
                    wave.fully_exposed.len()
                ));
            }
            out.push_str(&format!(
                "  The wave's shards were left {}; later waves were not touched. Fix the build, then run again with {}.\n",
                stopped.left, stopped.resume
            ));
        }
    }
    out
}
