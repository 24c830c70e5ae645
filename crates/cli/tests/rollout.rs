//! `shuffle-shard rollout` against two gateway replicas sharing marks
//! through Redis (`[fleet]`) and twelve test shards in four waves planned
//! by `plan-waves`, with a deploy command that "restarts" each shard of a
//! wave onto a build through the test shard's control API: a good build
//! goes through every wave; a bad one (`errors:503:0.3`) is stopped after
//! the first wave with only that wave's tenants hurt, and `--resume-from`
//! continues once the build is fixed; a build that never comes back fails
//! the `ready` gate and, with `--on-failure restore`, is put back.

mod common;

use std::path::Path;
use std::process::Command;

use backend::{Backend, Mode, Protocol, Recording};
use gateway::config::writer::{self as gateway_toml, GatewayToml, Shard, tenants_toml};
use gateway::runtime::Running;
use serde_json::Value;

/// The deploy command of every test: each shard of the wave is stopped
/// (`killed`), then started on the build named in `build.txt`, through
/// the control API listed for it in `controls.txt` (with a file
/// `in-place`, switched to it without a stop, as a blue/green swap
/// behind one address does). Every run is logged in `deployed.log`.
const DEPLOY: &str = r#"set -e
build=$(cat build.txt)
if [ ! -e in-place ]; then
  for id in $(echo "$SHUFFLE_SHARD_SHARDS" | tr , ' '); do
    control=$(awk -v id="$id" '$1 == id { print $2 }' controls.txt)
    curl -sf -X PUT --data killed "$control/mode"
  done
  sleep 0.2
fi
for id in $(echo "$SHUFFLE_SHARD_SHARDS" | tr , ' '); do
  control=$(awk -v id="$id" '$1 == id { print $2 }' controls.txt)
  curl -sf -X PUT --data "$build" "$control/mode"
done
echo "$SHUFFLE_SHARD_WAVE $SHUFFLE_SHARD_SHARDS $build" >> deployed.log
echo "deployed $build to $SHUFFLE_SHARD_SHARDS"
"#;

const TOKEN: &str = "rollout-test-admin-token-0123456789";

struct Fleet {
    dir: tempfile::TempDir,
    backends: Vec<Backend>,
    replicas: Vec<Running>,
    _redis: testkit::redis::Redis,
}

/// Twelve shards named `0`…`11` (the analyser's names, so `plan-waves`
/// over the gateway's key and tenants plans for the same placement), 120
/// tenants at k = 2, two replicas with quick health checks sharing marks
/// through Redis, and `waves.txt` from `plan-waves --waves 4`. `None`
/// without Redis.
async fn fleet() -> Option<Fleet> {
    fleet_syncing_every(100).await
}

/// As [`fleet`], with the replicas taking each other's marks every
/// `sync_ms`.
async fn fleet_syncing_every(sync_ms: u64) -> Option<Fleet> {
    let redis = testkit::redis::Redis::start().await?;
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Vec::new();
    let mut controls = String::new();
    for i in 0..12 {
        let backend = Backend::start_speaking(
            &i.to_string(),
            "127.0.0.1:0".parse().unwrap(),
            Recording::Every,
            Protocol::Http1,
        )
        .await
        .unwrap();
        let control = backend
            .serve_control("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        controls.push_str(&format!("{i} http://{control}\n"));
        backends.push(backend);
    }
    std::fs::write(dir.path().join("controls.txt"), controls).unwrap();
    std::fs::write(dir.path().join("deploy.sh"), DEPLOY).unwrap();
    let tenants = gateway_toml::tenants(120);
    let tsv: String = tenants
        .iter()
        .map(|(id, key)| format!("{id}\t{key}\n"))
        .collect();
    std::fs::write(dir.path().join("tenants.tsv"), tsv).unwrap();
    let toml = GatewayToml {
        tables: vec![
            (
                "health".to_owned(),
                // Quick checks, with room for a busy 2-core machine: a
                // check may take a second, three must fail in a row, and a
                // result goes stale only after 5 s (a starved test
                // process would otherwise stale every shard at once).
                "interval_ms = 100\ntimeout_ms = 1000\nfall = 3\nrise = 2\nstaleness_ms = 5000"
                    .to_owned(),
            ),
            (
                "fleet".to_owned(),
                format!(
                    "store = \"{}\"\ntimeout_ms = 500\nsync_ms = {sync_ms}\n",
                    redis.url()
                ),
            ),
        ],
        admin_token: Some(TOKEN.into()),
        shards: backends
            .iter()
            .map(|b| Shard::new(b.id(), b.url()))
            .collect(),
        tenants: tenants_toml(&tenants),
        ..GatewayToml::default()
    };
    let config = toml.write(dir.path()).unwrap();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let snapshot = gateway::Snapshot::load(&config, None).unwrap();
        replicas.push(gateway::runtime::start(snapshot).await.unwrap());
    }
    let planned = common::run_json(
        common::shuffle_shard()
            .current_dir(dir.path())
            .args([
                "plan-waves",
                "--shards",
                "12",
                "--k",
                "2",
                "--algorithm",
                "rendezvous",
            ])
            .args([
                "--key-file",
                "placement.key",
                "--tenants-file",
                "tenants.toml",
            ])
            .args(["--waves", "4", "--out", "waves.txt"]),
    );
    assert_eq!(planned["wave_count"], 4, "{planned}");
    Some(Fleet {
        dir,
        backends,
        replicas,
        _redis: redis,
    })
}

impl Fleet {
    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// The build the deploy command installs next.
    fn build(&self, build: &str) {
        std::fs::write(self.path("build.txt"), build).unwrap();
    }

    /// `blast --waves`' fully exposed count per wave (name → count).
    fn predicted(&self) -> Vec<(String, u64)> {
        let blast = common::run_json(
            common::shuffle_shard()
                .current_dir(self.dir.path())
                .args([
                    "blast",
                    "--shards",
                    "12",
                    "--k",
                    "2",
                    "--algorithm",
                    "rendezvous",
                ])
                .args([
                    "--key-file",
                    "placement.key",
                    "--tenants-file",
                    "tenants.toml",
                ])
                .args(["--waves", "waves.txt"]),
        );
        blast["waves"]
            .as_array()
            .unwrap()
            .iter()
            .map(|wave| {
                (
                    wave["wave"].as_str().unwrap().to_owned(),
                    wave["fully_exposed"]["count"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    /// Runs the rollout with `extra` arguments (which replace the defaults
    /// of `--deploy` and `--wait-seconds`): exit code, JSON report, stderr.
    async fn rollout(&self, extra: &[&str]) -> (Option<i32>, Value, String) {
        let mut args: Vec<String> = [
            "rollout",
            "--waves",
            "waves.txt",
            "--admin-token-file",
            "admin.token",
            "--tenants-file",
            "tenants.tsv",
            "--bake-seconds",
            "2",
            "--json",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for (flag, default) in [("--deploy", "sh deploy.sh"), ("--wait-seconds", "10")] {
            if !extra.contains(&flag) {
                args.extend([flag.to_owned(), default.to_owned()]);
            }
        }
        for replica in &self.replicas {
            args.extend([
                "--gateway".to_owned(),
                format!("http://{}", replica.addr),
                "--admin".to_owned(),
                format!("http://{}", replica.admin_addr),
            ]);
        }
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let dir = self.dir.path().to_owned();
        let output = tokio::task::spawn_blocking(move || {
            Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
                .current_dir(dir)
                .args(&args)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let report = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (
            output.status.code(),
            report,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// A shard of the last wave of `waves.txt`.
    fn last_wave_shard(&self) -> String {
        let text = std::fs::read_to_string(self.path("waves.txt")).unwrap();
        let lines: Vec<(&str, &str)> = text
            .lines()
            .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
            .map(|line| line.split_once(' ').unwrap())
            .collect();
        let last = lines.iter().map(|(_, wave)| *wave).max().unwrap();
        lines
            .iter()
            .find(|(_, wave)| *wave == last)
            .unwrap()
            .0
            .to_owned()
    }

    /// The waves deployed so far, from the deploy command's log.
    fn deployed(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("deployed.log"))
            .unwrap_or_default()
            .lines()
            .map(|line| line.split_whitespace().next().unwrap().to_owned())
            .collect()
    }

    /// The shards of wave `name`, by index.
    fn wave(&self, report: &Value, name: &str) -> Vec<usize> {
        let wave = report["waves"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["wave"] == name)
            .unwrap_or_else(|| panic!("no wave {name} in {report:#}"));
        wave["shards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                s.as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect()
    }
}

/// The shards as a replica's admin API reports them.
async fn shards(replica: &Running) -> Vec<drill::admin::ShardState> {
    drill::AdminClient::new(
        &format!("http://{}", replica.admin_addr).parse().unwrap(),
        TOKEN,
    )
    .shards()
    .await
    .unwrap()
}

fn statuses(report: &Value) -> Vec<String> {
    report["waves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["status"].as_str().unwrap().to_owned())
        .collect()
}

fn names(values: &Value) -> Vec<String> {
    values
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_build_goes_through_every_wave() {
    let Some(fleet) = fleet().await else { return };
    fleet.build("healthy");
    let (code, report, stderr) = fleet.rollout(&[]).await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    assert_eq!(report["passed"], true, "{report:#}");
    assert_eq!(report["replicas"], 2);
    assert_eq!(statuses(&report), ["done"; 4], "{report:#}");
    assert_eq!(fleet.deployed(), ["wave-1", "wave-2", "wave-3", "wave-4"]);
    let predicted = fleet.predicted();
    for (wave, (name, exposed)) in report["waves"].as_array().unwrap().iter().zip(&predicted) {
        // The rollout's exposure is the analyser's, tenant for tenant
        // counted, for the gateway places as the analyser does.
        assert_eq!(&wave["wave"], name.as_str());
        assert_eq!(
            wave["fully_exposed"].as_array().unwrap().len() as u64,
            *exposed,
            "{wave:#}"
        );
        assert_eq!(wave["failed"], serde_json::json!([]), "{wave:#}");
        assert_eq!(wave["left"], "in rotation");
        assert_eq!(wave["bake"]["load"]["errors"], 0, "{wave:#}");
        assert!(
            wave["bake"]["load"]["requests"].as_u64().unwrap() > 100,
            "{wave:#}"
        );
        // While the wave was out, only its fully exposed tenants hurt.
        let exposed: Vec<String> = names(&wave["fully_exposed"]);
        for hurt in wave["while_out"]["hurt"].as_array().unwrap() {
            assert!(
                exposed.contains(&hurt["tenant"].as_str().unwrap().to_owned()),
                "{hurt}"
            );
        }
    }
    for backend in &fleet.backends {
        assert_eq!(backend.mode(), Mode::Healthy, "shard {}", backend.id());
    }
    // Every shard is back in rotation on both replicas.
    for replica in &fleet.replicas {
        for shard in shards(replica).await {
            assert_eq!(shard.health, "up", "{shard:?}");
        }
    }
    assert!(
        stderr.contains("[deploy wave-4] deployed healthy"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_build_is_stopped_after_the_first_wave_and_resumed_once_fixed() {
    let Some(fleet) = fleet().await else { return };
    fleet.build("errors:503:0.3");
    let (code, report, stderr) = fleet.rollout(&[]).await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    assert_eq!(report["passed"], false);
    assert_eq!(
        statuses(&report),
        ["failed", "not-started", "not-started", "not-started"],
        "{report:#}"
    );
    let stopped = &report["stopped"];
    assert_eq!(stopped["wave"], "wave-1", "{report:#}");
    // Its health checks fail too, now and then: whether they pass in
    // time (and the bake's gates catch the failing attempts) or not, the
    // wave's own shards stop the rollout; tenants elsewhere never do.
    let gates = names(&stopped["gates"]);
    assert!(
        ["wave-shards", "ready"].contains(&gates[0].as_str()),
        "{report:#}"
    );
    assert!(!gates.contains(&"outside-wave".to_owned()), "{report:#}");
    assert_eq!(stopped["left"], "drained");
    assert_eq!(stopped["resume"], "--resume-from wave-1");
    assert!(
        stderr.contains("rollout stopped at wave wave-1: gate")
            && stderr.contains("--resume-from wave-1"),
        "{stderr}"
    );
    // Only wave 1 was deployed: every other shard still runs the old build.
    assert_eq!(fleet.deployed(), ["wave-1"]);
    let first = fleet.wave(&report, "wave-1");
    for (i, backend) in fleet.backends.iter().enumerate() {
        let expected = if first.contains(&i) {
            Mode::Errors {
                status: 503,
                rate: 0.3,
            }
        } else {
            Mode::Healthy
        };
        assert_eq!(backend.mode(), expected, "shard {i}");
    }
    // Only wave 1's tenants hurt, no more fully down than plan-waves
    // predicted for it.
    let wave = &report["waves"][0];
    let predicted = fleet.predicted()[0].1;
    let exposed = names(&wave["fully_exposed"]);
    assert_eq!(exposed.len() as u64, predicted);
    for phase in [&wave["while_out"], &wave["bake"]["load"]] {
        let mut fully_down = 0;
        for hurt in phase["hurt"].as_array().unwrap() {
            assert_ne!(hurt["exposure"], "outside", "{hurt}");
            if hurt["errors"].as_u64().unwrap() * 2 >= hurt["requests"].as_u64().unwrap() {
                fully_down += 1;
            }
        }
        assert!(fully_down <= predicted, "{phase:#}");
    }
    // The wave stays drained on both replicas.
    for replica in &fleet.replicas {
        for shard in shards(replica).await {
            let index: usize = shard.id.parse().unwrap();
            assert_eq!(shard.drained, first.contains(&index), "{shard:?}");
            if !first.contains(&index) {
                assert_eq!(shard.health, "up", "{shard:?}");
            }
        }
    }

    // The build is fixed: the rollout continues from wave 1.
    fleet.build("healthy");
    let (code, report, stderr) = fleet.rollout(&["--resume-from", "wave-1"]).await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    assert_eq!(statuses(&report), ["done"; 4], "{report:#}");
    assert_eq!(
        fleet.deployed(),
        ["wave-1", "wave-1", "wave-2", "wave-3", "wave-4"]
    );
    for backend in &fleet.backends {
        assert_eq!(backend.mode(), Mode::Healthy, "shard {}", backend.id());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_whose_answers_break_off_fails_the_wave_shards_gate_though_its_checks_pass() {
    let Some(fleet) = fleet().await else { return };
    // Health checks pass; every answer stops after its head.
    fleet.build("close-after-head");
    let (code, report, stderr) = fleet.rollout(&[]).await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    assert_eq!(report["stopped"]["wave"], "wave-1", "{report:#}");
    let gates = names(&report["stopped"]["gates"]);
    assert_eq!(
        gates.first().map(String::as_str),
        Some("wave-shards"),
        "{report:#}"
    );
    assert!(!gates.contains(&"outside-wave".to_owned()), "{report:#}");
    let wave = &report["waves"][0];
    assert!(
        wave["ready_after_s"].is_number(),
        "its checks passed: {wave:#}"
    );
    // Outlier detection ejects them (an answer that breaks off after its
    // head counts against the shard, not as a failed attempt).
    let trouble = names(&wave["bake"]["observed"]["shard_trouble"]);
    assert!(
        trouble.iter().any(|line| line.contains("ejected")),
        "{trouble:?}"
    );
    assert_eq!(fleet.deployed(), ["wave-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_never_comes_back_fails_ready_and_is_restored_on_request() {
    let Some(fleet) = fleet().await else { return };
    fleet.build("killed");
    let (code, report, stderr) = fleet
        .rollout(&["--on-failure", "restore", "--wait-seconds", "3"])
        .await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    assert_eq!(report["stopped"]["wave"], "wave-1", "{report:#}");
    // Its tenants fully down and degraded while it was back and dead
    // count too, after the gate that names the cause.
    assert_eq!(names(&report["stopped"]["gates"])[0], "ready", "{report:#}");
    assert_eq!(report["stopped"]["left"], "restored");
    assert_eq!(report["waves"][0]["ready_after_s"], Value::Null);
    assert_eq!(fleet.deployed(), ["wave-1"]);
    // Only the wave's own tenants hurt: none outside it, and no more fully
    // down than plan-waves predicts for the wave.
    let wave = &report["waves"][0];
    let predicted = fleet.predicted()[0].1;
    assert_eq!(names(&wave["fully_exposed"]).len() as u64, predicted);
    for phase in [&wave["while_out"], &wave["bake"]["load"]] {
        for hurt in phase["hurt"].as_array().unwrap() {
            assert_ne!(hurt["exposure"], "outside", "{hurt}");
        }
    }
    // Restored: no longer drained (its health checks hold it out).
    for shard in shards(&fleet.replicas[1]).await {
        assert!(!shard.drained, "{shard:?}");
    }

    // The build is fixed: the rollout resumes at the wave, which is no
    // longer drained but still out of rotation (killed), and goes on.
    fleet.build("healthy");
    let (code, report, stderr) = fleet.rollout(&["--resume-from", "wave-1"]).await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    assert_eq!(statuses(&report), ["done"; 4], "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_swapped_in_place_is_judged_only_once_every_replica_took_the_wave_back() {
    // Marks reach the other replica only every second: a rollout that
    // trusted the first replica's restore, or a check that passed before
    // the deploy, would bake while the second still held the wave drained
    // (its fully exposed tenants fully down) and fail a good build.
    let Some(fleet) = fleet_syncing_every(1000).await else {
        return;
    };
    std::fs::write(fleet.path("in-place"), "").unwrap();
    fleet.build("healthy");
    let (code, report, stderr) = fleet.rollout(&[]).await;
    assert_eq!(code, Some(0), "{stderr}\n{report:#}");
    assert_eq!(statuses(&report), ["done"; 4], "{report:#}");
    for wave in report["waves"].as_array().unwrap() {
        assert_eq!(
            wave["bake"]["observed"]["shard_trouble"],
            serde_json::json!([])
        );
        assert_eq!(wave["bake"]["observed"]["most_fully_down"], 0, "{wave:#}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_already_out_stops_the_rollout_before_it_touches_anything() {
    let Some(fleet) = fleet().await else { return };
    fleet.build("healthy");
    // An operator failed a shard of the last wave.
    let last = fleet.last_wave_shard();
    let admin = drill::AdminClient::new(
        &format!("http://{}", fleet.replicas[0].admin_addr)
            .parse()
            .unwrap(),
        TOKEN,
    );
    admin.fail(&last).await.unwrap();
    let (code, report, stderr) = fleet.rollout(&[]).await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    assert_eq!(
        names(&report["stopped"]["gates"]),
        ["preconditions"],
        "{report:#}"
    );
    assert_eq!(report["stopped"]["left"], "untouched", "{report:#}");
    assert!(fleet.deployed().is_empty());
    // Nothing was drained, and the operator's mark is still there.
    for shard in shards(&fleet.replicas[0]).await {
        assert!(!shard.drained, "{shard:?}");
        assert_eq!(shard.health == "failed", shard.id == last, "{shard:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_deploy_command_stops_the_rollout_naming_its_output() {
    let Some(fleet) = fleet().await else { return };
    let (code, report, stderr) = fleet
        .rollout(&[
            "--deploy",
            "env > env.txt; echo no registry credentials >&2; exit 3",
        ])
        .await;
    // The command sees its wave, and nothing of the rollout's secrets.
    let env = std::fs::read_to_string(fleet.path("env.txt")).unwrap();
    assert!(env.contains("SHUFFLE_SHARD_WAVE=wave-1"), "{env}");
    assert!(env.contains("SHUFFLE_SHARD_SHARDS="), "{env}");
    assert!(env.contains("SHUFFLE_SHARD_CELLS=default,default"), "{env}");
    assert!(
        !env.contains(TOKEN),
        "the admin token reached the deploy command"
    );
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    assert_eq!(names(&report["stopped"]["gates"]), ["deploy"], "{report:#}");
    let why = report["waves"][0]["failed"][0]["why"].as_str().unwrap();
    assert!(
        why.contains("exit status 3") && why.contains("no registry credentials"),
        "{why}"
    );
    assert_eq!(report["stopped"]["left"], "drained");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_that_hangs_is_killed_with_everything_it_started() {
    let Some(fleet) = fleet().await else { return };
    // A background process that holds the output open, and a wait that
    // outlasts the timeout.
    let (code, report, stderr) = fleet
        .rollout(&[
            "--deploy",
            "sleep 300 & echo $! > background.pid; echo deploying; sleep 300",
            "--deploy-timeout-seconds",
            "1",
        ])
        .await;
    assert_eq!(code, Some(1), "{stderr}\n{report:#}");
    assert_eq!(names(&report["stopped"]["gates"]), ["deploy"], "{report:#}");
    let why = report["waves"][0]["failed"][0]["why"].as_str().unwrap();
    assert!(
        why.contains("did not finish within 1 s") && why.contains("deploying"),
        "{why}"
    );
    assert!(stderr.contains("[deploy wave-1] deploying"), "{stderr}");
    // Killed: gone, or a zombie its new parent has not reaped yet.
    let pid = std::fs::read_to_string(fleet.path("background.pid")).unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    assert!(
        matches!(state, None | Some('Z' | 'X')),
        "the deploy's background process outlived the rollout: {stat}"
    );
}

/// The binary's one-line error and exit status 2 for `args` after
/// `rollout` against a gateway that never answers.
fn refused(dir: &Path, args: &[&str]) -> String {
    let output = Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
        .current_dir(dir)
        .arg("rollout")
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn bad_arguments_exit_2_saying_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "t").unwrap();
    std::fs::write(dir.path().join("tenants.tsv"), "acme\tkey\n").unwrap();
    std::fs::write(dir.path().join("waves.txt"), "s0 wave-1\n").unwrap();
    let base = [
        "--waves",
        "waves.txt",
        "--admin-token-file",
        "token",
        "--tenants-file",
        "tenants.tsv",
        "--gateway",
        "http://127.0.0.1:1",
        "--admin",
        "http://127.0.0.1:1",
    ];
    let refused_with = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        refused(dir.path(), &args)
    };
    let error = refused_with(&["--deploy", "true", "--bake-seconds=-1"]);
    assert!(error.contains("--bake-seconds"), "{error}");
    let error = refused_with(&["--deploy", " "]);
    assert!(error.contains("--deploy is empty"), "{error}");
    let error = refused_with(&["--deploy", "true"]);
    assert!(error.contains("unreachable"), "{error}");
}
