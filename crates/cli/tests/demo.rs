//! `shuffle-shard demo --json`, over HTTP and over gRPC: every phase matches
//! the model and the JSON has the documented per-phase fields.

#[test]
fn the_demo_matches_the_model_in_every_phase() {
    let summary = demo(&["--tenants", "400"]);
    assert_eq!(summary["protocol"], "http");
}

#[test]
fn the_grpc_demo_matches_the_model_in_every_phase() {
    let summary = demo(&["--tenants", "300", "--protocol", "grpc"]);
    assert_eq!(summary["protocol"], "grpc");
}

#[test]
fn the_demo_through_three_replicas_matches_the_model_in_every_phase() {
    let installed = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !installed {
        testkit::skip::missing("redis-server", "apt-get install redis-server");
        return;
    }
    let summary = demo(&["--tenants", "300", "--replicas", "3"]);
    assert_eq!(summary["replicas"], 3);
}

#[test]
fn the_demo_says_plainly_that_replicas_need_redis_server() {
    // A PATH without redis-server.
    let empty = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
        .args(["demo", "--tenants", "50", "--replicas", "2"])
        .env("PATH", empty.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("redis-server could not be run")
            && stderr.contains("apt-get install redis-server"),
        "{stderr}"
    );
}

/// Runs the demo with `args`, checks every phase against the model, and
/// returns its summary.
fn demo(args: &[&str]) -> serde_json::Value {
    let output = std::process::Command::new(assert_cmd::cargo::cargo_bin("shuffle-shard"))
        .arg("demo")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let phases = summary["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 4);
    for phase in phases {
        for field in [
            "failed",
            "fully_down",
            "degraded",
            "unaffected_errors",
            "failovers",
            "modeled_fully_down",
            "modeled_degraded",
        ] {
            assert!(phase.get(field).is_some(), "{field} missing in {phase}");
        }
        assert_eq!(phase["fully_down"], phase["modeled_fully_down"], "{phase}");
        assert_eq!(phase["degraded"], phase["modeled_degraded"], "{phase}");
        assert_eq!(phase["unaffected_errors"], 0, "{phase}");
        // Latency on a shared test machine is noise; every other property
        // must hold (the latency check is tested in the drill crate).
        let violations: Vec<&str> = phase["violations"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .filter(|v| !v.contains("p99 latency"))
            .collect();
        assert!(violations.is_empty(), "{phase}");
    }
    assert_eq!(
        phases[1]["fully_down"], 0,
        "one failure downs nobody at k = 2"
    );
    assert!(phases[1]["failovers"].as_f64().unwrap() > 0.0);
    assert!(
        summary["status_page"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:")
    );
    summary
}
