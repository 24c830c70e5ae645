//! The gateway's standing blast-radius model against the analyser: the
//! worst single and double shard failure it exports as gauges equal what
//! `shuffle-shard blast --sweep` says of the same population (its own
//! tenants file, key and shards), at start and again after a reload that
//! adds tenants; its budget is exported beside them.

mod common;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use backend::Backend;
use gateway::Snapshot;
use gateway::config::writer::{GatewayToml, Shard, tenants, tenants_toml};
use gateway::runtime::{self, Running};
use serde_json::Value;

use common::{run_json, shuffle_shard};

const TOKEN: &str = "standing-model-admin-token";

/// The exposition's value of `name{labels}`, if present.
fn metric(admin: SocketAddr, name: &str, labels: &str) -> Option<f64> {
    let mut stream = TcpStream::connect(admin).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let prefix = if labels.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{{labels}}} ")
    };
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

/// The worst (fully down, degraded) of `blast --sweep failures` over the
/// gateway's tenants file, with its key, on shards `0`…`7`, k = 2.
fn blast(dir: &Path, failures: usize) -> (f64, f64) {
    let answer: Value = run_json(
        shuffle_shard()
            .current_dir(dir)
            .args([
                "blast",
                "--shards",
                "8",
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
            .args(["--sweep", &failures.to_string()]),
    );
    let sweep = find_sweep(&answer, failures).unwrap_or_else(|| panic!("no sweep in {answer}"));
    assert_eq!(sweep["sampled"], false);
    (
        sweep["fully_down"]["worst"]["count"].as_f64().unwrap(),
        sweep["degraded"]["worst"]["count"].as_f64().unwrap(),
    )
}

/// The sweep object of `failures` shards anywhere in `answer`.
fn find_sweep(answer: &Value, failures: usize) -> Option<&Value> {
    match answer {
        Value::Object(map) => {
            if map.get("failures") == Some(&Value::from(failures)) && map.contains_key("degraded") {
                return Some(answer);
            }
            map.values().find_map(|value| find_sweep(value, failures))
        }
        Value::Array(items) => items.iter().find_map(|value| find_sweep(value, failures)),
        _ => None,
    }
}

/// Waits until the model was brought up to date after `after` (Unix
/// seconds); returns when.
async fn model_after(running: &Running, after: f64) -> f64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stamp =
            metric(running.admin_addr, "shuffle_model_timestamp_seconds", "").unwrap_or(0.0);
        if stamp > after {
            return stamp;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the model never came"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn gauges(running: &Running, failures: usize) -> (f64, f64) {
    let labels = format!("cell=\"default\",failures=\"{failures}\"");
    (
        metric(
            running.admin_addr,
            "shuffle_model_worst_fully_down",
            &labels,
        )
        .unwrap(),
        metric(running.admin_addr, "shuffle_model_worst_degraded", &labels).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standing_model_equals_blast_sweep_at_start_and_after_a_reload() {
    let mut backends = Vec::new();
    for i in 0..8 {
        backends.push(Backend::start(&i.to_string()).await.unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let population = tenants(240);
    let toml = GatewayToml {
        admin_token: Some(TOKEN.into()),
        extra: "[model]\nmax_fully_down_on_two_failures = 3\nfailures = 3\n".into(),
        shards: backends
            .iter()
            .map(|b| Shard::new(b.id(), b.url()))
            .collect(),
        tenants: tenants_toml(&population[..200]),
        ..GatewayToml::default()
    };
    let path = toml.write(dir.path()).unwrap();
    let running = runtime::start(Snapshot::load(&path, None).unwrap())
        .await
        .unwrap();

    let stamp = model_after(&running, 0.0).await;
    for failures in [1, 2, 3] {
        assert_eq!(
            gauges(&running, failures),
            blast(dir.path(), failures),
            "{failures} failures, 200 tenants"
        );
    }
    assert_eq!(
        metric(
            running.admin_addr,
            "shuffle_model_max_fully_down",
            "failures=\"2\""
        ),
        Some(3.0)
    );
    // Forty more tenants (onboarding): the model follows the reload.
    std::fs::write(dir.path().join("tenants.toml"), tenants_toml(&population)).unwrap();
    running.gateway.reload(false).unwrap();
    model_after(&running, stamp).await;
    for failures in [1, 2] {
        assert_eq!(
            gauges(&running, failures),
            blast(dir.path(), failures),
            "{failures} failures, 240 tenants"
        );
    }
}
