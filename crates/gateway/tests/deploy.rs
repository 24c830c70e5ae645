//! The configurations shipped in `deploy/` are loaded with the gateway's own
//! loader (secret paths pointed at freshly generated test files), so a
//! renamed key or a broken example fails here instead of in production; and
//! the manifests keep the promises `deploy/README.md` makes about them.

use std::path::{Path, PathBuf};

use gateway::config::{DiscoverySource, ShardProtocol};
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

/// The tracing example: its `[tracing]` table, appended to the systemd
/// example as its README says, loads; it points at the port the
/// collector's OTLP/HTTP receiver listens on and `compose.yaml` publishes,
/// and the collector sends on to the Jaeger service of the same file.
#[test]
fn the_tracing_example_points_the_gateway_at_the_collector_it_runs() {
    let gateway_toml = read("systemd/gateway.toml") + &read("tracing/gateway-tracing.toml");
    let (_dir, snapshot) = load(
        &gateway_toml,
        "[[tenants]]\nid = \"acme\"\napi_key_sha256 = \"9247d666dd89fc504697c6483520237b92a9105afce14fece0b85e91738e1e43\"\n",
        "/run/credentials/shuffle-shard-gateway.service/",
    );
    let tracing = snapshot
        .config
        .tracing()
        .expect("the example turns tracing on");
    assert_eq!(tracing.export.endpoint, "http://127.0.0.1:4318/v1/traces");
    assert!(!tracing.trust_incoming);

    let collector = read("tracing/otel-collector.yaml");
    assert!(collector.contains("endpoint: 0.0.0.0:4318"));
    assert!(collector.contains("endpoint: jaeger:4317"));
    assert!(collector.contains("exporters: [otlp/jaeger]"));
    let compose = read("tracing/compose.yaml");
    assert!(compose.contains("\"127.0.0.1:4318:4318\""));
    assert!(compose.contains("  jaeger:"));
    assert!(compose.contains("COLLECTOR_OTLP_ENABLED: \"true\""));
}

/// The YAML documents of a manifest file (separated by `---` lines).
fn documents(yaml: &str) -> Vec<&str> {
    yaml.split("\n---\n").collect()
}

/// The one document of `kind` in `yaml`.
fn document<'y>(yaml: &'y str, kind: &str) -> &'y str {
    let line = format!("kind: {kind}");
    let found: Vec<&str> = documents(yaml)
        .into_iter()
        .filter(|doc| doc.lines().any(|l| l == line))
        .collect();
    assert_eq!(found.len(), 1, "one {kind} expected in {yaml}");
    found[0]
}

/// The lines under the top-level `key:` of a document, up to the next
/// top-level key.
fn block<'d>(doc: &'d str, key: &str) -> Vec<&'d str> {
    let header = format!("{key}:");
    doc.lines()
        .skip_while(|line| *line != header)
        .skip(1)
        .take_while(|line| line.is_empty() || line.starts_with(' '))
        .collect()
}

/// The value of `key:` on one of `lines` (as `key: value` or
/// `- key: value`), each time it appears.
fn values<'l>(lines: &[&'l str], key: &str) -> Vec<&'l str> {
    let prefix = format!("{key}:");
    lines
        .iter()
        .map(|line| line.trim_start().trim_start_matches("- "))
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .map(str::trim)
        .collect()
}

/// A flow sequence of strings, `["a", "b"]`.
fn flow_list(text: &str) -> Vec<String> {
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{text:?} is not a flow sequence"));
    inner
        .split(',')
        .map(|item| item.trim().trim_matches('"').to_owned())
        .collect()
}

#[test]
fn the_kubernetes_discovery_example_finds_its_shards_with_only_the_rights_it_needs() {
    // The ConfigMap patch's gateway.toml parses, and its cell is found in
    // the shards' EndpointSlices. (Not built into a snapshot: a discovered
    // cell has no shards until its source is looked at.)
    let config_map = read("kubernetes-discovery/configmap.yaml");
    let gateway_toml = config_map_file(&config_map, "gateway.toml");
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    std::fs::write(secrets.join("placement.key"), random_bytes(32)).unwrap();
    std::fs::write(
        secrets.join("admin.token"),
        "a-test-admin-token-0123456789\n",
    )
    .unwrap();
    let secret_dir = "/etc/shuffle-shard/secrets/";
    assert!(gateway_toml.contains(secret_dir));
    let text = gateway_toml.replace(secret_dir, &format!("{}/", secrets.display()));
    let path = dir.path().join("gateway.toml");
    let config = GatewayConfig::parse(&path, &text).unwrap_or_else(|e| panic!("{e}"));
    let [cell] = config.cells() else {
        panic!("one cell expected");
    };
    assert_eq!(
        cell.discovery,
        Some(DiscoverySource::Kubernetes {
            namespace: "shuffle-shard".into(),
            service: "shards".into(),
            port_name: Some("http".into()),
        })
    );
    assert!(cell.static_shards().is_empty());
    assert_eq!(cell.discovered_protocol, ShardProtocol::Http1);
    assert_eq!(cell.algorithm.name(), "rendezvous");
    assert!(config.discovery().kubeconfig.is_none(), "in-cluster");
    assert!(!config.discovery().allow_migration);

    // The Service the source names is headless, in that namespace, with
    // the port it names.
    let shards = read("kubernetes-discovery/shards.yaml");
    let service = document(&shards, "Service");
    assert_eq!(values(&block(service, "metadata"), "name"), ["shards"]);
    assert_eq!(values(&block(service, "spec"), "clusterIP"), ["None"]);
    assert!(values(&block(service, "spec"), "name").contains(&"http"));
    let statefulset = document(&shards, "StatefulSet");
    assert_eq!(
        values(&block(statefulset, "spec"), "serviceName"),
        ["shards"]
    );

    // The Role reads EndpointSlices and does nothing else.
    let rbac = read("kubernetes-discovery/rbac.yaml");
    assert!(
        !rbac.contains("kind: ClusterRole"),
        "no cluster-wide rights"
    );
    let role = document(&rbac, "Role");
    let role_name = values(&block(role, "metadata"), "name");
    let rules = block(role, "rules");
    assert_eq!(
        rules
            .iter()
            .filter(|line| line.trim_start().starts_with("- "))
            .count(),
        1,
        "one rule: {rules:?}"
    );
    let rule_keys: Vec<&str> = rules
        .iter()
        .filter_map(|line| line.trim_start().trim_start_matches("- ").split(':').next())
        .collect();
    assert_eq!(rule_keys, ["apiGroups", "resources", "verbs"]);
    assert_eq!(
        flow_list(values(&rules, "apiGroups")[0]),
        ["discovery.k8s.io"]
    );
    assert_eq!(
        flow_list(values(&rules, "resources")[0]),
        ["endpointslices"]
    );
    assert_eq!(
        flow_list(values(&rules, "verbs")[0]),
        ["get", "list", "watch"]
    );

    // The RoleBinding gives that Role to the gateway's ServiceAccount, the
    // one its pods run as.
    let account = document(&rbac, "ServiceAccount");
    let account_name = values(&block(account, "metadata"), "name");
    let binding = document(&rbac, "RoleBinding");
    let role_ref = block(binding, "roleRef");
    assert_eq!(values(&role_ref, "kind"), ["Role"]);
    assert_eq!(values(&role_ref, "name"), role_name);
    let subjects = block(binding, "subjects");
    assert_eq!(values(&subjects, "kind"), ["ServiceAccount"]);
    assert_eq!(values(&subjects, "name"), account_name);
    assert_eq!(values(&subjects, "namespace"), ["shuffle-shard"]);
    let deployment = read("kubernetes-discovery/deployment.yaml");
    assert_eq!(
        values(&block(&deployment, "metadata"), "name"),
        ["shuffle-shard-gateway"]
    );
    let pod = block(&deployment, "spec");
    assert_eq!(values(&pod, "serviceAccountName"), account_name);
    assert_eq!(values(&pod, "automountServiceAccountToken"), ["true"]);

    let kustomization = read("kubernetes-discovery/kustomization.yaml");
    for file in [
        "../kubernetes",
        "shards.yaml",
        "rbac.yaml",
        "configmap.yaml",
        "deployment.yaml",
    ] {
        assert!(
            kustomization.contains(&format!(" {file}\n")),
            "kustomization.yaml lacks {file}"
        );
    }
    assert!(kustomization.contains("namespace: shuffle-shard\n"));
}
