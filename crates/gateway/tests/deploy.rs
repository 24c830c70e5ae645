//! The configurations shipped in `deploy/` are loaded with the gateway's own
//! loader (secret paths pointed at freshly generated test files), so a
//! renamed key or a broken example fails here instead of in production; and
//! the manifests keep the promises `deploy/README.md` makes about them.

use std::path::{Path, PathBuf};

use gateway::{GatewayConfig, Snapshot};

use crate::util::random_bytes;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn read(relative: &str) -> String {
    let path = deploy_dir().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The block scalar under `  NAME: |` in a ConfigMap, dedented.
fn config_map_file(yaml: &str, name: &str) -> String {
    let header = format!("  {name}: |");
    let mut lines = yaml.lines().skip_while(|line| *line != header);
    assert!(lines.next().is_some(), "no {name} in the ConfigMap");
    lines
        .take_while(|line| line.is_empty() || line.starts_with("    "))
        .map(|line| line.strip_prefix("    ").unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes `gateway.toml` and `tenants.toml` into a temporary directory with
/// the secret directory `secrets` replaced by generated files there, and
/// loads them as the gateway would.
fn load(gateway_toml: &str, tenants_toml: &str, secrets: &str) -> (tempfile::TempDir, Snapshot) {
    let dir = tempfile::tempdir().unwrap();
    let secret_dir = dir.path().join("secrets");
    std::fs::create_dir(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("placement.key"), random_bytes(32)).unwrap();
    std::fs::write(
        secret_dir.join("admin.token"),
        "a-test-admin-token-0123456789\n",
    )
    .unwrap();
    assert!(
        gateway_toml.contains(secrets),
        "the configuration does not name {secrets}"
    );
    let text = gateway_toml.replace(secrets, &format!("{}/", secret_dir.display()));
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::write(dir.path().join("tenants.toml"), tenants_toml).unwrap();
    let config = GatewayConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let tenants = gateway::tenants::load::from_file(config.tenants().file().unwrap(), &config)
        .unwrap_or_else(|e| panic!("{e}"));
    let snapshot = Snapshot::build(config, tenants, None).unwrap_or_else(|e| panic!("{e}"));
    (dir, snapshot)
}

#[test]
fn the_kubernetes_config_map_is_a_valid_configuration_for_the_probes_it_has() {
    let config_map = read("kubernetes/configmap.yaml");
    let (_dir, snapshot) = load(
        &config_map_file(&config_map, "gateway.toml"),
        &config_map_file(&config_map, "tenants.toml"),
        "/etc/shuffle-shard/secrets/",
    );
    let config = &snapshot.config;
    assert!(snapshot.tenants.len() >= 2);
    assert!(snapshot.admin_token.is_some());
    // The readiness probe reaches /readyz on 9901, which needs no token;
    // nothing else is open on an address others can reach.
    assert_eq!(config.admin().listen, "0.0.0.0:9901".parse().unwrap());
    assert!(!config.admin().metrics_without_token);
    assert!(!config.admin().status_page_without_token);
    assert_eq!(config.listen().unwrap().port(), 8080);

    let deployment = read("kubernetes/deployment.yaml");
    for promise in [
        "replicas: 3",
        "containerPort: 8080",
        "containerPort: 9901",
        "path: /readyz",
        "port: admin",
        "tcpSocket:",
        "prometheus.io/scrape: \"true\"",
        "prometheus.io/port: \"9901\"",
        "prometheus.io/path: \"/metrics\"",
        "mountPath: /etc/shuffle-shard/config",
        "mountPath: /etc/shuffle-shard/secrets",
        "\"/etc/shuffle-shard/config/gateway.toml\"",
        "secretName: shuffle-shard-secrets",
        "name: shuffle-shard-config",
        "readOnlyRootFilesystem: true",
        "runAsNonRoot: true",
    ] {
        assert!(
            deployment.contains(promise),
            "deployment.yaml lacks {promise:?}"
        );
    }
    // Graceful shutdown fits inside the pod's grace period.
    assert!(config.limits().shutdown_grace.as_secs() < 30);
    assert!(deployment.contains("terminationGracePeriodSeconds: 30"));

    let secret = read("kubernetes/secret.yaml");
    assert!(secret.contains("placement.key:") && secret.contains("admin.token:"));
    let kustomization = read("kubernetes/kustomization.yaml");
    for file in [
        "namespace.yaml",
        "configmap.yaml",
        "deployment.yaml",
        "service.yaml",
        "poddisruptionbudget.yaml",
        "networkpolicy.yaml",
    ] {
        assert!(
            kustomization.contains(file),
            "kustomization.yaml lacks {file}"
        );
        read(&format!("kubernetes/{file}"));
    }
    assert!(read("kubernetes/service.yaml").contains("targetPort: http"));
}

#[test]
fn the_systemd_example_is_a_valid_configuration_and_the_unit_is_hardened() {
    let (_dir, snapshot) = load(
        &read("systemd/gateway.toml"),
        "[[tenants]]\nid = \"acme\"\napi_key_sha256 = \"9247d666dd89fc504697c6483520237b92a9105afce14fece0b85e91738e1e43\"\n",
        "/run/credentials/shuffle-shard-gateway.service/",
    );
    assert!(snapshot.admin_token.is_some());
    assert!(snapshot.config.admin().listen.ip().is_loopback());

    let unit = read("systemd/shuffle-shard-gateway.service");
    let settings: Vec<&str> = unit
        .lines()
        .map(str::trim)
        .filter(|line| !line.starts_with('#'))
        .collect();
    for setting in [
        "ExecStart=/usr/local/bin/shuffle-shard serve --config /etc/shuffle-shard/gateway.toml",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "DynamicUser=yes",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "LoadCredential=placement.key:/etc/shuffle-shard/secrets/placement.key",
        "LoadCredential=admin.token:/etc/shuffle-shard/secrets/admin.token",
        "CapabilityBoundingSet=",
        "KillSignal=SIGTERM",
    ] {
        assert!(settings.contains(&setting), "the unit lacks {setting:?}");
    }
    // The credentials the unit loads are the files the configuration names.
    let config = read("systemd/gateway.toml");
    for credential in ["placement.key", "admin.token"] {
        assert!(config.contains(&format!(
            "/run/credentials/shuffle-shard-gateway.service/{credential}"
        )));
    }
}
