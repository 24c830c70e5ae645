//! `shuffle-shard drill` against a real gateway with real test shards: the
//! measured sets equal the analyser's for a single and a double failure,
//! with failover turned off the drill reports the violation (exit 1), and a
//! shard the drill breaks itself through its control API is routed around
//! and healed; and a poison whale against crash-on-poison shards crashes
//! its whole subset when the gateway's containment is off
//! (`routing.poison_after = 0`) and downs exactly the tenants `blast
//! --poison` counts, while `--poison-after 2` reports the failed
//! containment; with containment on (the default, 2) it crashes at most two
//! of its shards and `--poison-after 2` passes. A rolling restart of all
//! eight shards under load costs no tenant (k = 2) an error.

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use backend::{Backend, Mode, Protocol, Recording};
use gateway::config::writer::{self as gateway_toml, GatewayToml, Shard, tenants_toml};
use gateway::runtime::Running;

struct Setup {
    dir: tempfile::TempDir,
    /// The configuration file the gateway was started from.
    config: std::path::PathBuf,
    backends: Vec<Backend>,
    /// Each backend's control API URL, in shard order.
    controls: Vec<String>,
    running: Running,
}

impl Setup {
    /// Writes `toml` into `dir` and starts a gateway from it.
    async fn start(
        dir: tempfile::TempDir,
        backends: Vec<Backend>,
        controls: Vec<String>,
        toml: GatewayToml,
    ) -> Self {
        let path = toml.write(dir.path()).unwrap();
        let snapshot = gateway::Snapshot::load(&path, None).unwrap();
        let running = gateway::runtime::start(snapshot).await.unwrap();
        Self {
            dir,
            config: path,
            backends,
            controls,
            running,
        }
    }
}

/// 8 shards in 2 zones, zone-aware k = 2, 300 tenants, a drill tenants file.
async fn setup(routing: &str) -> Setup {
    setup_with(routing, "").await
}

/// As [`setup`], with `health` as the body of the `[health]` table (none
/// when empty), and a control API per shard.
async fn setup_with(routing: &str, health: &str) -> Setup {
    setup_speaking(routing, health, Protocol::Http1).await
}

/// As [`setup_with`], with shards speaking `protocol` (gRPC ones as `h2c`
/// shards).
async fn setup_speaking(routing: &str, health: &str, protocol: Protocol) -> Setup {
    setup_in_fleet(routing, health, protocol, "").await
}

/// As [`setup_speaking`], with `fleet` as the body of the `[fleet]` table
/// (none when empty).
async fn setup_in_fleet(routing: &str, health: &str, protocol: Protocol, fleet: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Vec::new();
    let mut controls = Vec::new();
    for i in 0..8 {
        let backend = Backend::start_speaking(
            &format!("s{i}"),
            "127.0.0.1:0".parse().unwrap(),
            Recording::Every,
            protocol,
        )
        .await
        .unwrap();
        let control = backend
            .serve_control("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        controls.push(format!("http://{control}"));
        backends.push(backend);
    }
    let tenants = gateway_toml::tenants(300);
    let drill_tenants: String = tenants
        .iter()
        .map(|(id, key)| format!("{id}\t{key}\n"))
        .collect();
    std::fs::write(dir.path().join("drill.tsv"), drill_tenants).unwrap();
    let mut tables = vec![("routing".to_owned(), routing.to_owned())];
    if !health.is_empty() {
        tables.push(("health".to_owned(), health.to_owned()));
    }
    if !fleet.is_empty() {
        tables.push(("fleet".to_owned(), fleet.to_owned()));
    }
    let toml = GatewayToml {
        zone_aware: true,
        tables,
        admin_token: Some("drill-test-admin-token-0123456789".into()),
        cell: "main".into(),
        shards: backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let shard = Shard::new(b.id(), b.url()).in_zone(if i < 4 { "a" } else { "b" });
                match protocol {
                    Protocol::Grpc => shard.speaking("h2c"),
                    Protocol::Http1 => shard,
                }
            })
            .collect(),
        tenants: tenants_toml(&tenants),
        ..GatewayToml::default()
    };
    Setup::start(dir, backends, controls, toml).await
}

/// Runs the drill binary with `--fail`.
async fn drill(setup: &Setup, fail: &str) -> (Option<i32>, serde_json::Value, String) {
    drill_with(setup, &format!("--fail {fail}")).await
}

/// Runs the drill binary with `fault` as its fault arguments, written as on
/// a command line (words without spaces), off the async runtime, which
/// serves the gateway.
async fn drill_with(setup: &Setup, fault: &str) -> (Option<i32>, serde_json::Value, String) {
    drill_acting(setup, fault, |_| {}).await
}

/// As [`drill_with`], handing each line the drill writes to stderr to `act`
/// as it comes: the operator's side of `--kill`.
async fn drill_acting(
    setup: &Setup,
    fault: &str,
    mut act: impl FnMut(&str),
) -> (Option<i32>, serde_json::Value, String) {
    let args = drill_args(setup, fault, true);
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (lines, mut said) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::task::spawn_blocking(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let report = tokio::task::spawn_blocking(move || {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).unwrap();
        bytes
    });
    let mut stderr = String::new();
    while let Some(line) = said.recv().await {
        act(&line);
        stderr.push_str(&line);
        stderr.push('\n');
    }
    reader.await.unwrap();
    let report = report.await.unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let report = serde_json::from_slice(&report).unwrap_or(serde_json::Value::Null);
    (status.code(), report, stderr)
}

/// Runs `drill --fail IDS`, which must pass with every measured set the
/// model's: the report.
async fn drill_passing(setup: &Setup, fail: &str) -> serde_json::Value {
    let (code, report, stderr) = drill(setup, fail).await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    assert_sets_match(&report["verdict"]);
    report
}

/// Every measured set (fully down, degraded, unaffected) is the model's,
/// tenant by tenant and in number.
fn assert_sets_match(verdict: &serde_json::Value) {
    for set in ["fully_down", "degraded", "unaffected"] {
        assert_eq!(verdict[set]["matches"], true, "{set}: {verdict:#}");
        assert_eq!(
            verdict[set]["measured"], verdict[set]["modeled"],
            "{set}: {verdict:#}"
        );
    }
}

/// The statuses of the three properties, in order.
fn statuses(properties: &serde_json::Value) -> [String; 3] {
    [
        "degrade_not_drop",
        "unaffected_see_nothing",
        "failover_happened",
    ]
    .map(|name| {
        properties[name]["status"]
            .as_str()
            .unwrap_or("?")
            .to_owned()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_failure_degrades_without_downing_anyone() {
    let setup = setup("").await;
    let report = drill_passing(&setup, "s1").await;
    let verdict = &report["verdict"];
    assert_eq!(verdict["fully_down"]["measured"], 0);
    assert!(verdict["degraded"]["measured"].as_u64().unwrap() > 0);
    assert_eq!(verdict["unaffected_errors"], 0);
    assert!(verdict["failovers"].as_f64().unwrap() > 0.0);
    assert_eq!(statuses(&verdict["properties"]), ["held", "held", "held"]);
    assert_eq!(report["fault"]["injected"], "admin API");
    assert!(report["fault"]["out_after_s"].is_f64(), "{report:#}");
    assert!(report["fault"]["back_after_s"].is_f64(), "{report:#}");
    assert_eq!(report["baseline"]["shards_up"], 8);
    assert_eq!(report["baseline"]["errors"], 0);
    assert_eq!(
        report["phases"][2]["errors"], 0,
        "after restore nobody fails"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_failure_downs_exactly_the_modeled_tenants() {
    let setup = setup("").await;
    // One shard in each zone: with zone-aware k = 2, the tenants on exactly
    // this pair lose both members.
    let report = drill_passing(&setup, "s1,s6").await;
    let verdict = &report["verdict"];
    assert!(
        verdict["fully_down"]["measured"].as_u64().unwrap() > 0,
        "300 tenants over 16 pairs: someone is on s1+s6"
    );
    assert_eq!(verdict["unaffected_errors"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_failover_the_drill_reports_the_violation() {
    // The "no failover seen": the model leaves every degraded
    // tenant a member to fail over to, and the gateway never does.
    let setup = setup("failover = false").await;
    let (code, report, stderr) = drill(&setup, "s1").await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    assert_eq!(report["passed"], false);
    let verdict = &report["verdict"];
    assert_eq!(verdict["failovers"], 0.0, "{verdict:#}");
    assert_eq!(
        statuses(&verdict["properties"]),
        ["violated", "held", "violated"],
        "{verdict:#}"
    );
    let violations = report["violations"].to_string();
    assert!(violations.contains("degraded tenants"), "{violations}");
    assert!(
        violations.contains("failover counter did not rise"),
        "{violations}"
    );
    assert!(stderr.contains("drill failed"), "{stderr}");
}

/// Health checks quick enough to see a killed shard within a second.
const QUICK_HEALTH: &str = "interval_ms = 200\ntimeout_ms = 300\nfall = 2\nrise = 1";

/// The admin API of the setup's gateway.
fn admin(setup: &Setup) -> drill::AdminClient {
    drill::AdminClient::new(
        &format!("http://{}", setup.running.admin_addr)
            .parse()
            .unwrap(),
        "drill-test-admin-token-0123456789",
    )
}

/// Polls the admin API until shard `id` has `health` (or `!health` for any
/// other), within a generous deadline.
async fn await_health(setup: &Setup, id: &str, health: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let wanted = |seen: &str| match health.strip_prefix('!') {
        Some(not) => seen != not,
        None => seen == health,
    };
    loop {
        let shards = admin(setup).shards().await.unwrap();
        if shards.iter().any(|s| s.id == id && wanted(&s.health)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id} never became {health}: {shards:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_of_an_already_dead_shard_is_refused_before_any_fault() {
    // The first false pass: s3 is dead before the drill starts.
    let setup = setup_with("", QUICK_HEALTH).await;
    setup.backends[3].set_mode(Mode::Killed);
    await_health(&setup, "s3", "!up").await;
    let (code, report, stderr) = drill_with(&setup, "--kill s3 --wait-seconds 10").await;
    assert_eq!(code, Some(2), "{stderr}\n{report:#}");
    assert_eq!(report, serde_json::Value::Null, "no report: nothing ran");
    let error: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(error.len(), 1, "{stderr}");
    assert!(
        error[0].contains("precondition failed: the baseline is not healthy"),
        "{stderr}"
    );
    assert!(error[0].contains("main/s3 unhealthy"), "{stderr}");
    assert!(error[0].contains("run the drill again"), "{stderr}");
    assert!(!stderr.contains("Break "), "no prompt to break: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baseline_with_errors_is_refused_before_any_fault() {
    let setup = setup("").await;
    // A stale key in the drill's tenants file: the gateway knows the
    // tenant, but refuses its requests.
    let path = setup.dir.path().join("drill.tsv");
    let tenants = std::fs::read_to_string(&path).unwrap();
    let (first, rest) = tenants.split_once('\n').unwrap();
    let (tenant, _) = first.split_once('\t').unwrap();
    std::fs::write(&path, format!("{tenant}\tstale-key\n{rest}")).unwrap();
    let (code, report, stderr) = drill_with(&setup, "--fail s1").await;
    assert_eq!(code, Some(2), "{stderr}\n{report:#}");
    assert!(
        stderr.contains("precondition failed: the baseline load had 4 errors"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{tenant} served 0 of 4")),
        "{stderr}"
    );
    assert_eq!(
        admin(&setup).shards().await.unwrap()[1].health,
        "up",
        "nothing was failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_set_that_serves_no_drilled_tenant_is_refused() {
    let setup = setup("").await;
    // Drill one tenant, and fail a shard outside its subset.
    let path = setup.dir.path().join("drill.tsv");
    let tenants = std::fs::read_to_string(&path).unwrap();
    let first = tenants.lines().next().unwrap();
    std::fs::write(&path, format!("{first}\n")).unwrap();
    let (tenant, _) = first.split_once('\t').unwrap();
    let (_, subset) = admin(&setup).subset(tenant).await.unwrap();
    let outside = (0..8)
        .map(|i| format!("s{i}"))
        .find(|id| !subset.contains(id))
        .unwrap();
    let (code, report, stderr) = drill_with(&setup, &format!("--fail {outside}")).await;
    assert_eq!(code, Some(2), "{stderr}\n{report:#}");
    assert!(
        stderr.contains(&format!(
            "no tenant in --tenants-file has main/{outside} in its subset, so the drill would test nothing"
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_never_carried_out_fails_after_the_wait() {
    let setup = setup_with("", QUICK_HEALTH).await;
    let (code, report, stderr) = drill_with(&setup, "--kill s3 --wait-seconds 2").await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    assert!(
        stderr.contains("Break main/s3 now (stop the process, blackhole it): waiting up to 2 s"),
        "{stderr}"
    );
    assert_eq!(report["passed"], false);
    assert_eq!(report["verdict"], serde_json::Value::Null, "{report:#}");
    assert_eq!(report["fault"]["out_after_s"], serde_json::Value::Null);
    assert_eq!(report["phases"].as_array().unwrap().len(), 1);
    let violations = report["violations"].to_string();
    assert!(
        violations
            .contains("never reported main/s3 out of rotation within 2 s, so no fault was tested"),
        "{violations}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_carried_out_when_the_drill_says_so_passes() {
    let setup = setup_with("", QUICK_HEALTH).await;
    let s3 = &setup.backends[3];
    let (code, report, stderr) = drill_acting(&setup, "--kill s3 --wait-seconds 20", |line| {
        if line.starts_with("Break main/s3 now") {
            s3.set_mode(Mode::Killed);
        } else if line.starts_with("Restore main/s3 now") {
            s3.set_mode(Mode::Healthy);
        }
    })
    .await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    assert_eq!(report["passed"], true);
    assert_eq!(report["fault"]["injected"], "by hand");
    assert!(report["fault"]["out_after_s"].is_f64(), "{report:#}");
    assert!(report["fault"]["back_after_s"].is_f64(), "{report:#}");
    let verdict = &report["verdict"];
    assert_sets_match(verdict);
    assert_eq!(statuses(&verdict["properties"]), ["held", "held", "held"]);
    assert!(
        stderr.contains("main/s3 back in rotation after"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_never_comes_back_fails_the_drill() {
    let setup = setup_with("", QUICK_HEALTH).await;
    let s3 = &setup.backends[3];
    let (code, report, stderr) = drill_acting(&setup, "--kill s3 --wait-seconds 3", |line| {
        if line.starts_with("Break main/s3 now") {
            s3.set_mode(Mode::Killed);
        }
    })
    .await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    assert_eq!(report["fault"]["back_after_s"], serde_json::Value::Null);
    assert!(
        report["verdict"]["violations"]
            .as_array()
            .unwrap()
            .is_empty(),
        "the fault phase itself was fine: {report:#}"
    );
    let violations = report["violations"].to_string();
    assert!(
        violations.contains("main/s3 did not come back in rotation within 3 s of the restore"),
        "{violations}"
    );
    assert!(stderr.contains("Recovery not seen"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_for_unaffected_tenants_fail_the_drill() {
    // Health checks that wait long enough for a slow shard to pass them,
    // so that s7 stays in rotation while the drill's requests to it time
    // out: the tenants on s7 (and not on s3) are unaffected by the
    // declared fault, and see errors.
    let setup = setup_with(
        "",
        "interval_ms = 200\ntimeout_ms = 5000\nfall = 2\nrise = 1",
    )
    .await;
    let (s3, s7) = (&setup.backends[3], &setup.backends[7]);
    let (code, report, stderr) = drill_acting(
        &setup,
        "--kill s3 --wait-seconds 20 --timeout-ms 500",
        |line| {
            if line.starts_with("Break main/s3 now") {
                s3.set_mode(Mode::Killed);
                s7.set_mode(Mode::Slow(Duration::from_millis(1500)));
            } else if line.starts_with("Restore main/s3 now") {
                s3.set_mode(Mode::Healthy);
                s7.set_mode(Mode::Healthy);
            }
        },
    )
    .await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    let verdict = &report["verdict"];
    assert!(
        verdict["unaffected_errors"].as_u64().unwrap() > 0,
        "{verdict:#}"
    );
    assert_eq!(
        verdict["properties"]["unaffected_see_nothing"]["status"], "violated",
        "{verdict:#}"
    );
    let violations = report["violations"].to_string();
    assert!(
        violations.contains("unaffected tenants saw"),
        "{violations}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_failed_shards_down_exactly_the_modeled_tenants_and_say_so() {
    // The second false pass, the right way round: tenants whose
    // pair lies inside the failure set are fully down, as the model
    // predicts, and the drill says so rather than "degraded without going
    // down". Zone-aware k = 2 over zones {s0..s3} and {s4..s7}: the tenants
    // on s0+s4 and s1+s4 lose both members.
    let setup = setup("").await;
    let report = drill_passing(&setup, "s0,s1,s4").await;
    let verdict = &report["verdict"];
    let down = verdict["fully_down"]["measured"].as_u64().unwrap();
    assert!(
        down > 0,
        "300 tenants over 16 pairs: some on s0+s4 or s1+s4"
    );
    assert_eq!(
        verdict["fully_down_errors"], verdict["errors"],
        "{verdict:#}"
    );
    assert_eq!(verdict["fully_down_errors"], down * 4);
    assert_eq!(statuses(&verdict["properties"]), ["held", "held", "held"]);

    // The same drill as text names them as predicted.
    let text = drill_text(&setup, "--fail s0,s1,s4").await;
    assert!(
        text.contains(&format!("{down} tenants fully down, as the model predicts")),
        "{text}"
    );
    assert!(!text.contains("without going down"), "{text}");
    assert!(
        text.contains("1. affected tenants degrade rather than drop: held"),
        "{text}"
    );
    assert!(text.contains("PASS: every property held"), "{text}");
}

/// The drill's arguments against the setup's gateway, with `fault` written
/// as on a command line (words without spaces).
fn drill_args(setup: &Setup, fault: &str, json: bool) -> Vec<String> {
    let mut args = vec![
        "drill".to_owned(),
        "--gateway".into(),
        format!("http://{}", setup.running.addr),
        "--admin".into(),
        format!("http://{}", setup.running.admin_addr),
        "--admin-token-file".into(),
        setup.dir.path().join("admin.token").display().to_string(),
        "--tenants-file".into(),
        setup.dir.path().join("drill.tsv").display().to_string(),
        "--requests-per-tenant".into(),
        "4".into(),
        // Latency on a shared 2-core test machine is noise; the latency
        // property itself is tested with fixed samples in the drill crate.
        "--latency-bound-ms".into(),
        "10000".into(),
    ];
    if json {
        args.push("--json".into());
    }
    args.extend(fault.split_whitespace().map(str::to_owned));
    args
}

/// Runs the drill binary with `fault` and text output: its stdout.
async fn drill_text(setup: &Setup, fault: &str) -> String {
    let args = drill_args(setup, fault, false);
    let output = tokio::task::spawn_blocking(move || {
        Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_broken_through_its_control_api_is_routed_around_and_healed() {
    // Quick health checks, so the stalled one is seen within a second.
    let setup = setup_with(
        "",
        "interval_ms = 200\ntimeout_ms = 300\nfall = 2\nrise = 1",
    )
    .await;
    let broken = format!("s3={}", setup.controls[3]);
    let (code, report, stderr) = drill_with(
        &setup,
        &format!("--break {broken} --break-mode health-stall --wait-seconds 20"),
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    assert_eq!(report["passed"], true, "{report:#}");
    let verdict = &report["verdict"];
    assert_eq!(verdict["failed"], serde_json::json!(["main/s3"]));
    assert_eq!(verdict["unaffected_errors"], 0);
    assert_sets_match(verdict);
    assert!(verdict["degraded"]["measured"].as_u64().unwrap() > 0);
    assert_eq!(verdict["fully_down"]["measured"], 0);
    assert_eq!(
        report["phases"][2]["errors"], 0,
        "after healing nobody fails"
    );
    assert_eq!(
        setup.backends[3].mode(),
        Mode::Healthy,
        "the drill healed s3"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_costs_no_tenant_with_two_members_an_error() {
    // Quick checks with the product's rise and fall, and the product's
    // ejections (10 s base, longer than each restart takes). Results go
    // stale only after 5 s: with the default (3 × interval + timeout,
    // 500 ms here) a test process starved for half a second on a busy
    // machine had every shard stale at once, and the requests in flight
    // then 503s (seen once in CI).
    let setup = setup_with(
        "",
        "interval_ms = 100\ntimeout_ms = 200\nfall = 2\nrise = 2\nstaleness_ms = 5000",
    )
    .await;
    let shards: Vec<String> = setup
        .controls
        .iter()
        .enumerate()
        .map(|(i, control)| format!("s{i}={control}"))
        .collect();
    let (code, report, stderr) = drill_with(
        &setup,
        &format!(
            "--rolling-restart {} --down-ms 1000 --wait-seconds 30 --concurrency 8",
            shards.join(",")
        ),
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    assert_eq!(report["passed"], true, "{report:#}");
    assert_eq!(report["failing"], serde_json::json!([]), "{report:#}");
    let restarts = report["restarts"].as_array().unwrap();
    assert_eq!(restarts.len(), 8, "{report:#}");
    for (i, restart) in restarts.iter().enumerate() {
        assert_eq!(restart["shard"], format!("main/s{i}"));
        assert!(restart["seen_down_after_s"].is_number(), "{restart}");
        // Back in rotation as soon as its checks passed: the 10 s
        // ejection ended at the first passing check.
        assert_eq!(restart["health_when_ready"], "up", "{report:#}");
    }
    assert_eq!(report["most_out"], 1, "{report:#}");
    let during = &report["phases"][1];
    assert_eq!(during["name"], "restarts");
    assert_eq!(during["errors"], 0, "{report:#}");
    assert!(during["requests"].as_u64().unwrap() > 1000, "{report:#}");
    // Every shard was really down, and serves again.
    for backend in &setup.backends {
        assert_eq!(backend.mode(), Mode::Healthy, "{}", backend.id());
    }
    assert!(stderr.contains("Taking main/s7 down."), "{stderr}");
}

#[test]
fn a_rolling_restart_without_control_urls_exits_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "t").unwrap();
    std::fs::write(dir.path().join("tenants.tsv"), "acme\tkey\n").unwrap();
    let output = drill_to_nowhere()
        .args(["--rolling-restart", "s3"])
        .arg("--admin-token-file")
        .arg(dir.path().join("token"))
        .arg("--tenants-file")
        .arg(dir.path().join("tenants.tsv"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("--rolling-restart \"s3\""), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// gRPC shards checked with the gRPC health protocol, quickly.
// A check timeout a busy 2-core machine meets: a healthy shard whose checks
// time out counts as out, and then the broken one may not be ejected
// (`outlier.max_ejection_percent`). The broken shard answers its checks at
// once, so this slows nothing down.
const GRPC_HEALTH: &str = "grpc = true\ninterval_ms = 200\ntimeout_ms = 2000\nfall = 2\nrise = 1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_drill_breaking_a_shard_with_unavailable_passes_on_grpc_statuses() {
    let setup = setup_speaking(
        "grpc_idempotent_methods = [\"/shuffle.demo.Echo/*\"]",
        GRPC_HEALTH,
        Protocol::Grpc,
    )
    .await;
    let broken = format!("s3={}", setup.controls[3]);
    let (code, report, stderr) = drill_with(
        &setup,
        &format!("--protocol grpc --break {broken} --break-mode errors:503:1 --wait-seconds 20"),
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    let verdict = &report["verdict"];
    assert_eq!(verdict["failed"], serde_json::json!(["main/s3"]));
    assert_sets_match(verdict);
    assert!(verdict["degraded"]["measured"].as_u64().unwrap() > 0);
    assert_eq!(verdict["fully_down"]["measured"], 0);
    assert_eq!(verdict["unaffected_errors"], 0);
    assert!(verdict["failovers"].as_f64().unwrap() > 0.0, "{verdict:#}");
    // The load was gRPC calls of the demo method, answered by the shards
    // (3 phases of 300 tenants x 4 calls; s3 answered some before it broke).
    let calls: Vec<backend::Seen> = setup.backends.iter().flat_map(Backend::seen).collect();
    assert!(calls.len() >= 3 * 300 * 4, "{}", calls.len());
    for call in &calls {
        assert_eq!(call.path, "/shuffle.demo.Echo/Unary");
        assert_eq!(call.header("content-type"), ["application/grpc"]);
    }
    assert_eq!(
        setup.backends[3].mode(),
        Mode::Healthy,
        "the drill healed s3"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_drill_counts_unavailable_calls_as_failed() {
    // The shard is failed through the admin API and the gateway may not
    // fail over: its tenants' calls that pick it end UNAVAILABLE.
    let setup = setup_speaking("failover = false", GRPC_HEALTH, Protocol::Grpc).await;
    let (code, report, stderr) = drill_with(&setup, "--protocol grpc --fail s1").await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    let violations = report["verdict"]["violations"].to_string();
    assert!(violations.contains("degraded tenant"), "{violations}");
    assert!(report["verdict"]["errors"].as_u64().unwrap() > 0);
    assert_eq!(report["verdict"]["unaffected_errors"], 0);
}

/// `drill` aimed at a gateway and admin API where nothing listens, for
/// arguments that must be refused before anything is dialled.
fn drill_to_nowhere() -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"));
    command.args([
        "drill",
        "--gateway",
        "http://127.0.0.1:1",
        "--admin",
        "http://127.0.0.1:1",
    ]);
    command
}

#[test]
fn a_break_without_a_control_api_exits_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "t").unwrap();
    std::fs::write(dir.path().join("tenants.tsv"), "acme\tkey\n").unwrap();
    let output = drill_to_nowhere()
        .args(["--break", "s3:9203"])
        .arg("--admin-token-file")
        .arg(dir.path().join("token"))
        .arg("--tenants-file")
        .arg(dir.path().join("tenants.tsv"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--break \"s3:9203\""), "{stderr}");
    assert!(stderr.contains("ID=CONTROL_URL"), "{stderr}");
}

#[test]
fn bad_arguments_exit_2() {
    let output = drill_to_nowhere()
        .args([
            "--admin-token-file",
            "/nonexistent/token",
            "--tenants-file",
            "/nonexistent/t",
            "--fail",
            "s1",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&output.stderr).contains("panicked"));
}

/// 8 shards in `crash-on-poison:6000`, each with a control API; k = 2 for
/// 300 tenants and k = 6 for `whale`; `routing` is the gateway's
/// `[routing]` table.
async fn poison_setup(routing: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Vec::new();
    let mut controls = Vec::new();
    for i in 0..8 {
        let backend = Backend::start(&format!("s{i}")).await.unwrap();
        // Longer than a phase of load, so the tenants inside the whale's
        // shards are measured while all of them are down.
        backend.set_mode("crash-on-poison:6000".parse().unwrap());
        let control = backend
            .serve_control("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        controls.push(format!("s{i}=http://{control}"));
        backends.push(backend);
    }
    let mut tenants = gateway_toml::tenants(300);
    let whale = (
        "whale".to_owned(),
        format!("whale-key-{}", fastrand::u64(..)),
    );
    let tenants_file =
        tenants_toml(&tenants) + &tenants_toml(std::slice::from_ref(&whale)) + "k = 6\n";
    tenants.push(whale);
    let drill_tenants: String = tenants
        .iter()
        .map(|(id, key)| format!("{id}\t{key}\n"))
        .collect();
    std::fs::write(dir.path().join("drill.tsv"), drill_tenants).unwrap();
    let toml = GatewayToml {
        admin_token: Some("drill-test-admin-token-0123456789".into()),
        cell: "main".into(),
        tables: vec![("routing".into(), routing.to_owned())],
        shards: backends
            .iter()
            .map(|b| Shard::new(b.id(), b.url()))
            .collect(),
        tenants: tenants_file,
        ..GatewayToml::default()
    };
    Setup::start(dir, backends, controls, toml).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontained_poison_whale_crashes_its_subset_and_downs_the_tenants_inside() {
    let setup = poison_setup("poison_after = 0\n").await;
    let controls = setup.controls.join(",");
    let (code, report, stderr) = drill_with(
        &setup,
        &format!("--poison whale --poison-control {controls} --wait-seconds 20"),
    )
    .await;
    let verdict = &report["verdict"];
    assert_eq!(verdict["subset"].as_array().unwrap().len(), 6, "{report:#}");
    // No containment in the gateway: the whale's poison is retried member
    // after member until all six crashed, as the uncontained model says.
    assert_eq!(verdict["crashed_source"], "control API");
    assert_eq!(
        verdict["crashed"], verdict["subset"],
        "{stderr}\n{report:#}"
    );
    assert_eq!(verdict["crashed_matches"], true);
    let crashed: Vec<u64> = setup.backends.iter().map(Backend::crashes).collect();
    assert_eq!(crashed.iter().filter(|&&c| c > 0).count(), 6, "{crashed:?}");
    // The tenants whose pair sits inside the whale's six shards were down,
    // exactly as `blast --poison` counts them; nobody outside felt it.
    assert_eq!(
        verdict["fully_down"]["measured"], verdict["models"]["uncontained"]["others_fully_down"],
        "{report:#}"
    );
    assert!(
        verdict["fully_down"]["measured"].as_u64().unwrap() > 100,
        "C(6,2)/C(8,2) of 300"
    );
    assert_eq!(verdict["fully_down"]["matches"], true, "{report:#}");
    assert_eq!(
        verdict["degraded"]["measured"], verdict["models"]["uncontained"]["degraded"],
        "{report:#}"
    );
    assert_eq!(verdict["unaffected_errors"], 0, "{report:#}");
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");

    // Checked against containment to 2 instead, the same gateway fails it,
    // and the drill says so.
    let (code, report, stderr) = drill_with(
        &setup,
        &format!("--poison whale --poison-control {controls} --poison-after 2 --wait-seconds 20"),
    )
    .await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    let violations = report["verdict"]["violations"].to_string();
    assert!(violations.contains("containment failed"), "{violations}");
    assert!(report["verdict"]["models"]["contained"]["others_fully_down"].is_u64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contained_poison_whale_crashes_at_most_two_of_its_shards_and_the_drill_passes() {
    // The gateway's default containment: routing.poison_after = 2.
    let setup = poison_setup("").await;
    let controls = setup.controls.join(",");
    let (code, report, stderr) = drill_with(
        &setup,
        &format!("--poison whale --poison-control {controls} --poison-after 2 --wait-seconds 20"),
    )
    .await;
    let verdict = &report["verdict"];
    assert_eq!(verdict["subset"].as_array().unwrap().len(), 6, "{report:#}");
    // One poison request per member was sent; the first was stopped after
    // two crashes, and the suspect whale reached no third member.
    let crashed: Vec<u64> = setup.backends.iter().map(Backend::crashes).collect();
    assert_eq!(crashed.iter().filter(|&&c| c > 0).count(), 2, "{crashed:?}");
    assert_eq!(
        verdict["crashed"].as_array().unwrap().len(),
        2,
        "{report:#}"
    );
    assert_eq!(verdict["unaffected_errors"], 0, "{report:#}");
    assert_eq!(verdict["fully_down"]["matches"], true, "{report:#}");
    assert_eq!(report["violations"], serde_json::json!([]), "{report:#}");
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
}

/// Another replica of `setup`'s gateway, from the configuration file at
/// `config`.
async fn replica(config: &std::path::Path) -> Running {
    let snapshot = gateway::Snapshot::load(config, None).unwrap();
    gateway::runtime::start(snapshot).await.unwrap()
}

/// The drill binary's exit code, JSON report and stderr, with a
/// `--gateway`/`--admin` pair for the setup's gateway and each of `others`.
async fn drill_fleet(
    setup: &Setup,
    others: &[&Running],
    fault: &str,
) -> (Option<i32>, serde_json::Value, String) {
    let mut args = drill_args(setup, fault, true);
    for other in others {
        args.extend([
            "--gateway".to_owned(),
            format!("http://{}", other.addr),
            "--admin".to_owned(),
            format!("http://{}", other.admin_addr),
        ]);
    }
    let output = tokio::task::spawn_blocking(move || {
        Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
    (
        output.status.code(),
        report,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_three_replicas_is_drilled_as_one_and_a_replica_left_out_is_named() {
    let Some(redis) = testkit::redis::Redis::start().await else {
        return;
    };
    let fleet = format!("store = \"{}\"\ntimeout_ms = 500\n", redis.url());
    let setup = setup_in_fleet("", "", Protocol::Http1, &fleet).await;
    let (b, c) = (replica(&setup.config).await, replica(&setup.config).await);

    // s1 failed through the first replica's admin API: every replica must
    // report it out, and the load through all three keeps the properties.
    let (code, report, stderr) = drill_fleet(&setup, &[&b, &c], "--fail s1").await;
    assert_eq!(code, Some(0), "{stderr}\n{report}");
    assert_sets_match(&report["verdict"]);
    // The load went through every replica: each counted requests.
    for running in [&setup.running, &b, &c] {
        let served = gateway_requests(running).await;
        assert!(served > 0.0, "replica {} served nothing", running.addr);
    }

    // A replica of the same files without [fleet]: named, exit 1, and no
    // fault injected.
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let alone = setup.dir.path().join("alone.toml");
    let cut = text.find("[fleet]").expect("the configuration has [fleet]");
    let rest = &text[cut + "[fleet]".len()..];
    let end = rest
        .find("\n[")
        .map_or(text.len(), |at| cut + "[fleet]".len() + at + 1);
    std::fs::write(&alone, format!("{}{}", &text[..cut], &text[end..])).unwrap();
    let outsider = replica(&alone).await;
    let (code, _, stderr) = drill_fleet(&setup, &[&b, &outsider], "--fail s1").await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("http://{}", outsider.addr)) && stderr.contains("without [fleet]"),
        "the replica left out is not named: {stderr}"
    );
}

/// The sum of `shuffle_requests_total` a gateway exports.
async fn gateway_requests(running: &Running) -> f64 {
    let token = "drill-test-admin-token-0123456789";
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let request = http::Request::get(format!("http://{}/metrics", running.admin_addr))
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Full::default())
        .unwrap();
    let response = client.request(request).await.unwrap();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|line| line.starts_with("shuffle_requests_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
