//! `shuffle-shard serve` as a real process: it routes each tenant only to
//! the shards `place --config` names, refuses unsafe keys and token-less
//! admin pages open to other hosts at start, and stops cleanly on SIGTERM; two replicas started from one configuration
//! route every tenant to the same subset without talking to each other;
//! a TLS listener serves curl with a self-signed certificate; the start-up
//! log names every listener; and `serve --check` names the key a bad value
//! was written under. (The quick starts as written: `quick_starts.rs`.)

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use backend::Backend;
use bytes::Bytes;
use common::{free_port, terminate};
use gateway::config::writer::{
    self as gateway_toml, GatewayToml, Shard, random_bytes, tenants_toml,
};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

fn binary() -> std::path::PathBuf {
    assert_cmd::cargo::cargo_bin("shuffle-shard")
}

/// Writes a configuration over `backends` into `dir`; returns the listen
/// address and the tenants with their API keys.
fn write_config(
    dir: &std::path::Path,
    backends: &[Backend],
    key: &[u8],
) -> (String, Vec<(String, String)>) {
    let tenants = gateway_toml::tenants(12);
    let listen = format!("127.0.0.1:{}", free_port());
    GatewayToml {
        listen: listen.clone(),
        admin_listen: Some(format!("127.0.0.1:{}", free_port())),
        cell: "main".into(),
        shards: backends
            .iter()
            .map(|b| Shard::new(b.id(), b.url()))
            .collect(),
        placement_key: key.to_vec(),
        tenants: tenants_toml(&tenants) + "[[tenants]]\nid = \"whale\"\nk = 4\n",
        ..GatewayToml::default()
    }
    .write(dir)
    .unwrap();
    (listen, tenants)
}

/// `serve --config <config>` as a child process, its stderr piped for the
/// test to read.
fn spawn_serve(config: &std::path::Path) -> Child {
    Command::new(binary())
        .args(["serve", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until something accepts on `addr`, or fails after 10 s.
fn wait_for_listener(addr: &str, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            panic!("serve exited with {status}: {stderr}");
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not start listening on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_routes_each_tenant_to_the_subset_place_config_reports() {
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Vec::new();
    for i in 0..6 {
        backends.push(Backend::start(&format!("s{i}")).await.unwrap());
    }
    let key = random_bytes(32);
    let (listen, tenants) = write_config(dir.path(), &backends, &key);
    let config = dir.path().join("gateway.toml");

    let mut child = spawn_serve(&config);
    wait_for_listener(&listen, &mut child);

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    for (tenant, api_key) in &tenants {
        let placed = Command::new(binary())
            .args(["place", "--config"])
            .arg(&config)
            .args(["--cell", "main", tenant])
            .output()
            .unwrap();
        assert!(
            placed.status.success(),
            "{}",
            String::from_utf8_lossy(&placed.stderr)
        );
        let line: serde_json::Value = serde_json::from_slice(&placed.stdout).unwrap();
        assert_eq!(line["cell"], "main");
        let expected: BTreeSet<String> = line["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(expected.len(), 2);

        let mut served = BTreeSet::new();
        for _ in 0..10 {
            let request = http::Request::get(format!("http://{listen}/hello"))
                .header("authorization", format!("Bearer {api_key}"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let response = client.request(request).await.unwrap();
            assert_eq!(response.status(), 200);
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            served.insert(answer["shard"].as_str().unwrap().to_owned());
        }
        assert!(
            served.is_subset(&expected),
            "{tenant}: served by {served:?}, place says {expected:?}"
        );
    }

    // The tenants file's per-tenant k reaches place --config too.
    let whale = Command::new(binary())
        .args(["place", "--config"])
        .arg(&config)
        .arg("whale")
        .output()
        .unwrap();
    let line: serde_json::Value = serde_json::from_slice(&whale.stdout).unwrap();
    assert_eq!(line["ids"].as_array().unwrap().len(), 4);

    // SIGTERM: stop accepting, finish, exit 0.
    terminate(child, "serve");
}

#[test]
fn serve_refuses_the_public_recipe_key_and_short_keys() {
    for (key, expect) in [
        (&b"shuffle-shard-v1"[..], "public default key"),
        (&b"short"[..], "5-byte key"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let backend = runtime.block_on(Backend::start("s0")).unwrap();
        write_config(dir.path(), std::slice::from_ref(&backend), key);
        let output = Command::new(binary())
            .args(["serve", "--config"])
            .arg(dir.path().join("gateway.toml"))
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("placement.key_file") && stderr.contains(expect),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"));
    }
}

/// `serve` refuses to start an admin listener that other hosts can reach
/// with a page served without the admin token: it exits with status 2 and
/// one line on stderr naming both keys, before anything listens.
#[test]
fn serve_refuses_tokenless_admin_pages_on_a_non_loopback_listener() {
    // A configuration valid but for its admin table: enough shards for
    // `k` and for the whale's own k.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backends: Vec<Backend> = (0..4)
        .map(|i| runtime.block_on(Backend::start(&format!("s{i}"))).unwrap())
        .collect();
    for key in ["status_page_without_token", "metrics_without_token"] {
        let dir = tempfile::tempdir().unwrap();
        let placement_key = random_bytes(32);
        write_config(dir.path(), &backends, &placement_key);
        let config = dir.path().join("gateway.toml");
        let text = with_exposed_admin(&std::fs::read_to_string(&config).unwrap(), key);
        std::fs::write(&config, text).unwrap();
        let mut child = spawn_serve(&config);
        // A guard against a hang, not a timing: a gateway that started and
        // never said so is killed (by its id) after a minute.
        let (done, watched) = std::sync::mpsc::channel::<()>();
        let pid = child.id().to_string();
        let guard = std::thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = watched.recv_timeout(Duration::from_secs(60)) {
                let _ = Command::new("kill").args(["-9", &pid]).status();
            }
        });
        // Read stderr to its end (the process exiting closes it); a gateway
        // that starts instead says so, and is stopped here.
        let mut lines = Vec::new();
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap();
            if line.contains("gateway listening") {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{key}: serve started with admin.listen on 0.0.0.0: {line}");
            }
            lines.push(line);
        }
        let status = child.wait().unwrap();
        let _ = done.send(());
        guard.join().unwrap();
        let lines: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(status.code(), Some(2), "{key}: {status}: {lines:?}");
        assert_eq!(lines.len(), 1, "{key}: {lines:?}");
        assert!(
            lines[0].contains("admin.listen") && lines[0].contains(key),
            "{key}: {}",
            lines[0]
        );
        assert!(!lines[0].contains("panicked"), "{}", lines[0]);
    }
}

/// Starts `serve` and reads the bound data and admin addresses from its
/// log line, so several replicas can run from one configuration that says
/// port 0.
fn start_replica(config: &std::path::Path) -> (Child, String, String) {
    let mut child = spawn_serve(config);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // The first log line says where it listens; `lines()` ends if the
    // process exits, so this cannot wait for ever.
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains("gateway listening") {
            let field = |name: &str| {
                line.split(&format!("{name}="))
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .unwrap()
                    .to_owned()
            };
            let (addr, admin) = (field(" addr").replace(' ', ""), field("admin"));
            // Keep draining stderr so the replica never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return (child, addr, admin);
        }
    }
    panic!("serve exited before listening: {:?}", child.wait());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_from_one_configuration_route_every_tenant_alike() {
    let dir = tempfile::tempdir().unwrap();
    let mut backends = Vec::new();
    for i in 0..6 {
        backends.push(Backend::start(&format!("s{i}")).await.unwrap());
    }
    let key = random_bytes(32);
    let (_, tenants) = write_config(dir.path(), &backends, &key);
    // One configuration for both replicas: ephemeral ports and an admin token.
    let config = dir.path().join("gateway.toml");
    let text = with_ephemeral_ports(&std::fs::read_to_string(&config).unwrap());
    std::fs::write(&config, text).unwrap();
    std::fs::write(
        dir.path().join("admin.token"),
        "replica-test-admin-token-0123",
    )
    .unwrap();

    let (mut first, first_addr, first_admin) = start_replica(&config);
    let (mut second, second_addr, second_admin) = start_replica(&config);
    assert_ne!(first_addr, second_addr);

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let get = |url: String, auth: String| {
        let client = client.clone();
        async move {
            let request = http::Request::get(url)
                .header("authorization", auth)
                .body(Full::new(Bytes::new()))
                .unwrap();
            let response = client.request(request).await.unwrap();
            assert_eq!(response.status(), 200);
            let body = response.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<serde_json::Value>(&body).unwrap()
        }
    };
    let admin_auth = "Bearer replica-test-admin-token-0123".to_owned();
    for (tenant, api_key) in &tenants {
        let from_first = get(
            format!("http://{first_admin}/admin/tenants/{tenant}"),
            admin_auth.clone(),
        )
        .await;
        let from_second = get(
            format!("http://{second_admin}/admin/tenants/{tenant}"),
            admin_auth.clone(),
        )
        .await;
        assert_eq!(from_first["subset"], from_second["subset"], "{tenant}");
        let subset: BTreeSet<String> = from_first["subset"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_owned())
            .collect();
        // And traffic through either replica lands only there.
        for addr in [&first_addr, &second_addr] {
            for _ in 0..4 {
                let answer = get(format!("http://{addr}/x"), format!("Bearer {api_key}")).await;
                assert!(
                    subset.contains(answer["shard"].as_str().unwrap()),
                    "{tenant} via {addr}"
                );
            }
        }
    }
    for child in [&mut first, &mut second] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Sets both listeners to port 0 and adds the admin token file, so one
/// configuration can start several replicas.
fn with_ephemeral_ports(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("listen = ") {
            out.push_str("listen = \"127.0.0.1:0\"\n");
            if out.contains("[admin]") {
                out.push_str("token_file = \"admin.token\"\n");
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Opens the admin listener to every interface and serves `page` there
/// without the token.
fn with_exposed_admin(text: &str, page: &str) -> String {
    text.replace(
        "[admin]\nlisten = \"127.0.0.1:",
        &format!("[admin]\n{page} = true\nlisten = \"0.0.0.0:"),
    )
}

/// An admin listener other hosts can reach, with every page behind the
/// token, starts, and says at start that it is reachable (issue 16).
#[test]
fn serve_warns_when_the_admin_listener_is_reachable_from_other_hosts() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backends: Vec<Backend> = (0..4)
        .map(|i| runtime.block_on(Backend::start(&format!("s{i}"))).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (listen, _) = write_config(dir.path(), &backends, &random_bytes(32));
    let config = dir.path().join("gateway.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "[admin]\nlisten = \"127.0.0.1:",
        "[admin]\nlisten = \"0.0.0.0:",
    );
    std::fs::write(&config, text).unwrap();
    let mut child = spawn_serve(&config);
    wait_for_listener(&listen, &mut child);
    let mut stderr = child.stderr.take().unwrap();
    terminate(child, "serve");
    let mut logged = String::new();
    stderr.read_to_string(&mut logged).unwrap();
    assert!(
        logged
            .lines()
            .any(|line| line.contains("WARN") && line.contains("reachable from other hosts")),
        "no warning about the reachable admin listener:\n{logged}"
    );
}

/// Runs `program` with `args` in `dir`; its stdout, or a panic naming what
/// failed (a missing tool included: `.ci/run` installs it).
fn run_tool(dir: &std::path::Path, program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run {program} (apt-get install {program}): {error}")
        });
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Four test shards and a configuration over them (with a random key) in
/// `dir`: the shards, the listen address and the tenants with their keys.
async fn four_shards(dir: &std::path::Path) -> (Vec<Backend>, String, Vec<(String, String)>) {
    let mut backends = Vec::new();
    for i in 0..4 {
        backends.push(Backend::start(&format!("s{i}")).await.unwrap());
    }
    let (listen, tenants) = write_config(dir, &backends, &random_bytes(32));
    (backends, listen, tenants)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_listener_serves_curl_with_a_self_signed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (_backends, listen, tenants) = four_shards(dir.path()).await;
    // The TLS quick start's certificate: self-signed for localhost…
    run_tool(
        dir.path(),
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "30",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.pem",
        ],
    );
    // …and a [tls] section beside the plaintext listener.
    let tls_port = free_port();
    let config = dir.path().join("gateway.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[tls]\nlisten = \"127.0.0.1:{tls_port}\"\ncert_file = \"server.pem\"\nkey_file = \"server.key\"\n"
    ));
    std::fs::write(&config, text).unwrap();
    let mut child = spawn_serve(&config);
    wait_for_listener(&listen, &mut child);
    wait_for_listener(&format!("127.0.0.1:{tls_port}"), &mut child);

    let (tenant, key) = &tenants[0];
    let url = format!("https://localhost:{tls_port}/hello");
    let answer = run_tool(
        dir.path(),
        "curl",
        &[
            "-sS",
            "--fail",
            "--cacert",
            "server.pem",
            "--resolve",
            &format!("localhost:{tls_port}:127.0.0.1"),
            "-H",
            &format!("Authorization: Bearer {key}"),
            &url,
        ],
    );
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["tenant"], tenant.as_str());
    // Without the CA, curl refuses the self-signed certificate: the
    // listener really is TLS with that certificate.
    let refused = Command::new("curl")
        .args([
            "-sS",
            "--resolve",
            &format!("localhost:{tls_port}:127.0.0.1"),
            &url,
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    terminate(child, "serve");
}

/// `serve --check` validates without binding: a configuration whose
/// listeners' ports are taken still checks out (exit 0, one summary line);
/// a bad key and a missing certificate exit 2 with the error start-up
/// would give.
#[test]
fn serve_check_validates_everything_and_binds_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backends: Vec<Backend> = (0..4)
        .map(|i| runtime.block_on(Backend::start(&format!("s{i}"))).unwrap())
        .collect();
    let check = |config: &std::path::Path| {
        Command::new(binary())
            .args(["serve", "--check", "--config"])
            .arg(config)
            .output()
            .unwrap()
    };

    let dir = tempfile::tempdir().unwrap();
    let (listen, _) = write_config(dir.path(), &backends, &random_bytes(32));
    let config = dir.path().join("gateway.toml");
    // Someone else holds the data port: a check does not care.
    let _taken = std::net::TcpListener::bind(&listen).unwrap();
    let output = check(&config);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    for part in [
        "configuration OK",
        "1 cell,",
        "4 shards",
        "13 tenants",
        "algorithm rendezvous",
        "key version v1",
    ] {
        assert!(stdout.contains(part), "{part:?} not in {stdout}");
    }

    // A short key: the usual error, exit 2.
    let short = tempfile::tempdir().unwrap();
    write_config(short.path(), &backends, b"short");
    let output = check(&short.path().join("gateway.toml"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("placement.key_file") && stderr.contains("5-byte key"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());

    // A [tls] section whose certificate file does not exist.
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[tls]\nlisten = \"127.0.0.1:{}\"\ncert_file = \"missing.pem\"\nkey_file = \"missing.key\"\n",
        free_port()
    ));
    std::fs::write(&config, text).unwrap();
    let output = check(&config);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tls.cert_file") && stderr.contains("missing.pem"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("panicked"));
}

/// One GET for `api_key` through `listen`; its status.
async fn get_status(listen: &str, api_key: &str, path: &str) -> u16 {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let request = http::Request::get(format!("http://{listen}{path}"))
        .header("authorization", format!("Bearer {api_key}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await;
    status
}

/// The JSON access log's paths, from the file at `path`.
fn logged_paths(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            line["path"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// logrotate's way: the access log file is renamed, `SIGUSR1` makes the
/// running gateway open a new one by the configured name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_reopens_the_access_log_file_for_logrotate() {
    let dir = tempfile::tempdir().unwrap();
    let (_backends, listen, tenants) = four_shards(dir.path()).await;
    let config = dir.path().join("gateway.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[logging]\naccess_log = \"json\"\naccess_log_file = \"access.log\"\n");
    std::fs::write(&config, text).unwrap();
    let log = dir.path().join("access.log");
    let rotated = dir.path().join("access.log.1");

    let mut child = spawn_serve(&config);
    wait_for_listener(&listen, &mut child);
    let api_key = &tenants[0].1;
    assert_eq!(get_status(&listen, api_key, "/before").await, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    while logged_paths(&log) != ["/before"] {
        assert!(Instant::now() < deadline, "{:?}", logged_paths(&log));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::rename(&log, &rotated).unwrap();
    let signalled = Command::new("kill")
        .args(["-USR1", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    // Until the signal is handled, lines still go to the renamed file.
    let mut sent = 0;
    while !log.exists() || logged_paths(&log).is_empty() {
        assert!(Instant::now() < deadline, "no new file after SIGUSR1");
        assert_eq!(get_status(&listen, api_key, "/after").await, 200);
        sent += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every request is in one file or the other (a line may be written
    // a moment after its response reached the client).
    while logged_paths(&rotated).len() + logged_paths(&log).len() < 1 + sent {
        assert!(Instant::now() < deadline, "a line was lost");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = logged_paths(&log);
    assert!(after.iter().all(|path| path == "/after"), "{after:?}");
    let before = logged_paths(&rotated);
    assert_eq!(before[0], "/before");
    assert_eq!(before.len() + after.len(), 1 + sent);
    terminate(child, "serve");
}

/// Issue 28: a shard URL whose port does not parse (or is 0), with a
/// password in it, without a host or with a fragment is refused by
/// `serve --check` and by `serve` itself, exit 2, with one line naming the
/// key and the fix, and never the password. (Before, `:99999` and
/// `:notaport` passed, and requests went to port 80.)
#[test]
fn serve_and_check_refuse_a_shard_url_that_would_reach_somewhere_unwritten() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backends: Vec<Backend> = (0..4)
        .map(|i| runtime.block_on(Backend::start(&format!("s{i}"))).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &backends, &random_bytes(32));
    let config = dir.path().join("gateway.toml");
    let good = std::fs::read_to_string(&config).unwrap();
    let third = backends[2].url();
    assert_eq!(good.matches(&third).count(), 1, "{good}");

    for (url, says) in [
        ("http://127.0.0.1:99999", "1 to 65535"),
        ("http://127.0.0.1:notaport", "1 to 65535"),
        ("http://127.0.0.1:0", "1 to 65535"),
        ("http://ops:hunter2@127.0.0.1:9100", "user information"),
        ("http://127.0.0.1:9100/#top", "fragment"),
    ] {
        std::fs::write(&config, good.replace(&third, url)).unwrap();
        for args in [
            &["serve", "--check", "--config"][..],
            &["serve", "--config"][..],
        ] {
            let output = Command::new(binary())
                .args(args)
                .arg(&config)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{args:?} {url}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{args:?} {url}: {stderr}");
            assert!(
                stderr.contains("cells[0].shards[2].url") && stderr.contains(says),
                "{args:?} {url}: {stderr}"
            );
            assert!(!stderr.contains("hunter2"), "{stderr}");
        }
    }
}

/// Issue 29: the start-up log names every listener, each on its own line
/// before the summary: the plaintext one, the TLS one with the names its
/// certificates serve (the default certificate's DNS and IP names, then
/// `[[tls.sni]]`'s), and the admin one. Before, the TLS listener went
/// unmentioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_up_log_names_every_listener_and_the_tls_names() {
    let dir = tempfile::tempdir().unwrap();
    let (_backends, listen, _) = four_shards(dir.path()).await;
    for (name, cn) in [("server", "localhost"), ("api", "api.example.test")] {
        run_tool(
            dir.path(),
            "openssl",
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "30",
                "-subj",
                &format!("/CN={cn}"),
                "-addext",
                &format!("subjectAltName=DNS:{cn},IP:127.0.0.1"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }
    let tls_port = free_port();
    let config = dir.path().join("gateway.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[tls]\nlisten = \"127.0.0.1:{tls_port}\"\ncert_file = \"server.pem\"\nkey_file = \"server.key\"\n\
         [[tls.sni]]\nserver_names = [\"api.example.test\", \"*.api.example.test\"]\ncert_file = \"api.pem\"\nkey_file = \"api.key\"\n"
    ));
    std::fs::write(&config, text).unwrap();
    let admin = std::fs::read_to_string(&config)
        .unwrap()
        .split("[admin]\nlisten = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();

    let mut child = spawn_serve(&config);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut before = Vec::new();
    // `lines()` ends when the process exits, so this cannot wait for ever.
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains("gateway listening") {
            break;
        }
        before.push(line);
    }
    std::thread::spawn(move || lines.for_each(drop));
    let said = |listener: &str| {
        before
            .iter()
            .find(|line| line.contains(&format!("listener=\"{listener}\"")))
            .unwrap_or_else(|| panic!("no {listener} line in {before:#?}"))
    };
    assert!(
        said("plaintext").contains(&format!("addr={listen}")),
        "{before:#?}"
    );
    let tls = said("tls");
    assert!(tls.contains(&format!("addr=127.0.0.1:{tls_port}")), "{tls}");
    assert!(
        tls.contains("certificates=localhost, 127.0.0.1, api.example.test, *.api.example.test"),
        "{tls}"
    );
    assert!(
        said("admin").contains(&format!("addr={admin}")),
        "{before:#?}"
    );
    terminate(child, "serve");
}

/// Issue 29: a `k` larger than the cell's shards is reported under the key
/// where it was written: `placement.k` when the cell inherits it (before:
/// `cells[0]`), `cells[0].k` when the cell sets its own; a zone-aware cell
/// with a shard lacking a zone names that shard's `zone`; a tenant that
/// lists a shard twice names `tenants[i].shards`.
#[test]
fn serve_check_names_the_key_where_a_bad_placement_value_was_written() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backends: Vec<Backend> = (0..4)
        .map(|i| runtime.block_on(Backend::start(&format!("s{i}"))).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &backends, &random_bytes(32));
    let config = dir.path().join("gateway.toml");
    let good = std::fs::read_to_string(&config).unwrap();
    let check = |text: String| {
        std::fs::write(&config, text).unwrap();
        let output = Command::new(binary())
            .args(["serve", "--check", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        stderr
    };

    assert!(good.contains("\nk = 2\n"), "{good}");
    let inherited = check(good.replace("\nk = 2\n", "\nk = 9\n"));
    assert!(
        inherited.contains("gateway.toml: placement.k: k = 9 is out of range for 4 shards"),
        "{inherited}"
    );
    assert!(
        inherited.contains("cell \"main\" inherits placement.k"),
        "{inherited}"
    );
    assert!(!inherited.contains("cells[0]"), "{inherited}");

    let own = check(good.replace("name = \"main\"\n", "name = \"main\"\nk = 5\n"));
    assert!(
        own.contains("gateway.toml: cells[0].k: k = 5 is out of range"),
        "{own}"
    );
    assert!(!own.contains("inherits"), "{own}");

    let zoneless = check(good.replace("\nk = 2\n", "\nk = 2\nzone_aware = true\n"));
    assert!(
        zoneless.contains("gateway.toml: cells[0].shards[0].zone: shard \"s0\" has no zone"),
        "{zoneless}"
    );

    // A tenant pinned to one shard twice: its position and key in the
    // tenants file (before: `tenants.pinned`, a key no file has).
    let tenants = dir.path().join("tenants.toml");
    let mut pinned = std::fs::read_to_string(&tenants).unwrap();
    let position = pinned.matches("[[tenants]]").count();
    pinned.push_str("[[tenants]]\nid = \"pinned\"\nshards = [\"s1\", \"s1\"]\n");
    std::fs::write(&tenants, pinned).unwrap();
    let twice = check(good);
    assert!(
        twice.contains(&format!(
            "tenants.toml: tenants[{position}].shards: shard \"s1\" is listed twice"
        )),
        "{twice}"
    );
}
