//! `shuffle-shard drill` against a real gateway with real test shards: the
//! measured sets equal the analyser's for a single and a double failure,
//! with failover turned off the drill reports the violation (exit 1), and a
//! shard the drill breaks itself through its control API is routed around
//! and healed; and a poison whale against crash-on-poison shards crashes
//! its whole subset when the gateway's containment is off
//! (`routing.poison_after = 0`) and downs exactly the tenants `blast
//! --poison` counts, while `--poison-after 2` reports the failed
//! containment; with containment on (the default, 2) it crashes at most two
//! of its shards and `--poison-after 2` passes.

use std::process::Command;

use backend::{Backend, Mode, Protocol, Recording};
use gateway::config::writer::{self as gateway_toml, GatewayToml, Shard, tenants_toml};
use gateway::runtime::Running;

struct Setup {
    dir: tempfile::TempDir,
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
        "--json".into(),
    ];
    args.extend(fault.split_whitespace().map(str::to_owned));
    let output = tokio::task::spawn_blocking(move || {
        Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
    (output.status.code(), report, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_failure_degrades_without_downing_anyone() {
    let setup = setup("").await;
    let (code, report, stderr) = drill(&setup, "s1").await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    let verdict = &report["verdict"];
    assert_eq!(verdict["fully_down"], 0);
    assert_eq!(verdict["modeled_fully_down"], 0);
    assert!(verdict["degraded"].as_u64().unwrap() > 0);
    assert_eq!(verdict["degraded"], verdict["modeled_degraded"]);
    assert_eq!(verdict["fully_down_matches"], true);
    assert_eq!(verdict["degraded_matches"], true);
    assert_eq!(verdict["unaffected_errors"], 0);
    assert!(verdict["failovers"].as_f64().unwrap() > 0.0);
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
    let (code, report, stderr) = drill(&setup, "s1,s6").await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    let verdict = &report["verdict"];
    assert_eq!(verdict["fully_down"], verdict["modeled_fully_down"]);
    assert!(
        verdict["fully_down"].as_u64().unwrap() > 0,
        "300 tenants over 16 pairs: someone is on s1+s6"
    );
    assert_eq!(verdict["degraded"], verdict["modeled_degraded"]);
    assert_eq!(verdict["fully_down_matches"], true);
    assert_eq!(verdict["degraded_matches"], true);
    assert_eq!(verdict["unaffected_errors"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_failover_the_drill_reports_the_violation() {
    let setup = setup("failover = false").await;
    let (code, report, stderr) = drill(&setup, "s1").await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    let violations = report["verdict"]["violations"].to_string();
    assert!(violations.contains("degraded tenant"), "{violations}");
    assert!(stderr.contains("drill failed"), "{stderr}");
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
    assert!(verdict["degraded"].as_u64().unwrap() > 0);
    assert_eq!(verdict["degraded"], verdict["modeled_degraded"]);
    assert_eq!(verdict["fully_down"], 0);
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

/// gRPC shards checked with the gRPC health protocol, quickly.
const GRPC_HEALTH: &str = "grpc = true\ninterval_ms = 200\ntimeout_ms = 300\nfall = 2\nrise = 1";

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
    assert!(verdict["degraded"].as_u64().unwrap() > 0);
    assert_eq!(verdict["degraded"], verdict["modeled_degraded"]);
    assert_eq!(verdict["fully_down"], 0);
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
        verdict["fully_down"], verdict["models"]["uncontained"]["others_fully_down"],
        "{report:#}"
    );
    assert!(
        verdict["fully_down"].as_u64().unwrap() > 100,
        "C(6,2)/C(8,2) of 300"
    );
    assert_eq!(verdict["fully_down_matches"], true, "{report:#}");
    assert_eq!(
        verdict["degraded"], verdict["models"]["uncontained"]["degraded"],
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
    assert_eq!(verdict["fully_down_matches"], true, "{report:#}");
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
}
