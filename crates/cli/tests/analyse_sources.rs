//! End-to-end tests of the analysers reading the population the gateway
//! serves, through the real binary: a gateway tenants file (JSON Lines or
//! TOML) gives the figures of the equivalent plain list with `--tenant-k`,
//! the tenant store (a real PostgreSQL, loaded by `tenants import`) gives
//! the figures of the file it was loaded from, and bad input (a bad line,
//! a wrong password, a store down) is one error line that names the
//! problem and never the password.

mod common;

use std::path::Path;

use gateway::tenants::TenantEntry;
use serde_json::Value;
use testkit::postgres::Postgres;

use common::{assert_one_line_error, free_port, run_json, run_ok, shuffle_shard, temp_file};

/// The fleet every comparison places on.
const FLEET: [&str; 4] = ["--shards", "16", "--k", "2"];

/// The questions every comparison asks of `blast`.
const QUESTIONS: [&str; 6] = ["--fail", "3,7", "--sweep", "2", "--poison", "tenant-007"];

/// `n` tenants as a gateway would hold them, shuffled out of id order (the
/// store hands them back in id order; the figures must not care): every
/// seventh with a k of its own, and fields the analyser ignores
/// (credentials, limits) on others.
fn served(n: usize) -> Vec<TenantEntry> {
    (0..n)
        .map(|i| (i * 37) % n)
        .map(|i| {
            let mut entry = TenantEntry {
                id: format!("tenant-{i:03}"),
                ..TenantEntry::default()
            };
            match i % 7 {
                0 => entry.k = Some(3 + (i % 2) as u32),
                1 => entry.api_key_sha256 = Some(format!("{i:064x}")),
                2 => {
                    entry.requests_per_second = Some(50.0);
                    entry.burst = Some(100);
                }
                3 => entry.max_in_flight = Some(8),
                _ => {}
            }
            entry
        })
        .collect()
}

fn json_lines(entries: &[TenantEntry]) -> String {
    entries
        .iter()
        .map(|entry| serde_json::to_string(entry).unwrap() + "\n")
        .collect()
}

/// The same population as a plain list and the `--tenant-k` flags that
/// give the tenants their own k.
fn plain(entries: &[TenantEntry]) -> (String, Vec<String>) {
    let list = entries.iter().map(|e| format!("{}\n", e.id)).collect();
    let flags = entries
        .iter()
        .filter_map(|e| e.k.map(|k| format!("--tenant-k={}={k}", e.id)))
        .collect();
    (list, flags)
}

/// `blast --json` over `source` (the population flags) with the shared
/// fleet and questions.
fn blast(source: &[&str], extra: &[String], env: Option<(&str, &str)>) -> Value {
    let mut command = shuffle_shard();
    command
        .arg("blast")
        .args(FLEET)
        .args(source)
        .args(extra)
        .args(QUESTIONS);
    if let Some((name, value)) = env {
        command.env(name, value);
    }
    run_json(&mut command)
}

/// The population-independent parts of a blast answer: everything but the
/// order tenants were listed in.
fn figures(report: &Value) -> Value {
    let mut report = report.clone();
    // The poison tenant's figures are by its subset, whatever the order.
    report.as_object_mut().unwrap().remove("poison_sweep");
    report
}

fn path_arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_gateway_tenants_file_gives_the_figures_of_the_same_plain_list() {
    let entries = served(300);
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("tenants.jsonl");
    std::fs::write(&jsonl, json_lines(&entries)).unwrap();
    let (list, flags) = plain(&entries);
    assert!(flags.len() > 40, "{}", flags.len());
    let list = temp_file(list.as_bytes());

    let expected = blast(&["--tenants-file", path_arg(list.path())], &flags, None);
    let from_jsonl = blast(&["--tenants-file", path_arg(&jsonl)], &[], None);
    assert_eq!(from_jsonl["tenants"], 300);
    assert_eq!(figures(&from_jsonl), figures(&expected));
    // The own k is really used: without it the poison tenant (k = 4 of its
    // own) has a subset of 2.
    assert_eq!(from_jsonl["poison"][0]["k"], 4);

    // The same file as TOML, written by `tenants convert`.
    let toml = dir.path().join("tenants.toml");
    run_ok(
        shuffle_shard()
            .args(["tenants", "convert"])
            .arg(&jsonl)
            .arg(&toml),
    );
    let from_toml = blast(&["--tenants-file", path_arg(&toml)], &[], None);
    assert_eq!(figures(&from_toml), figures(&expected));

    // The text header counts the tenants placed by their own k.
    let (text, stderr) = run_ok(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .arg("--tenants-file")
            .arg(&jsonl)
            .args(["--tenant-k", "tenant-001=5"]),
    );
    let header = text.lines().next().unwrap();
    assert!(
        header.contains(&format!(
            "(1 --tenant-k override; {} tenants with their own k or shards)",
            flags.len()
        )),
        "{header}"
    );
    assert!(!stderr.contains("dedicated"), "{stderr}");

    // `plan` fixes the same tenants' k at every candidate.
    let plan = |source: &[&str], extra: &[String]| {
        run_json(
            shuffle_shard()
                .args(["plan", "--shards", "16"])
                .args(source)
                .args(extra)
                .args([
                    "--max-degraded",
                    "0.3",
                    "--max-fully-down",
                    "0.01",
                    "--concurrent-failures",
                    "2",
                ]),
        )
    };
    assert_eq!(
        plan(&["--tenants-file", path_arg(&jsonl)], &[]),
        plan(&["--tenants-file", path_arg(list.path())], &flags)
    );
}

#[test]
fn dedicated_shards_are_placed_and_foreign_ones_noted() {
    let jsonl = tempfile::Builder::new()
        .suffix(".jsonl")
        .tempfile()
        .unwrap();
    std::fs::write(
        jsonl.path(),
        concat!(
            "{\"id\":\"acme\"}\n",
            "{\"id\":\"vip\",\"shards\":[\"9\",\"4\"],\"cell\":\"eu\"}\n",
            "{\"id\":\"named\",\"shards\":[\"s1\",\"s2\",\"s3\"]}\n",
        ),
    )
    .unwrap();
    let (stdout, stderr) = run_ok(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .arg("--tenants-file")
            .arg(jsonl.path())
            .args(["--poison", "vip", "--poison", "named", "--json"]),
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["poison"][0]["subset"], serde_json::json!([4, 9]));
    // Shards named as the gateway names them are not this fleet's: that
    // tenant is placed at k, and a note says so.
    assert_eq!(report["poison"][1]["k"], 2);
    assert!(
        stderr.contains("1 tenant of") && stderr.contains("\"named\" on s1,s2,s3"),
        "{stderr}"
    );
    assert!(stderr.contains("names a cell (eu)"), "{stderr}");
}

#[test]
fn a_bad_tenants_file_names_the_file_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str); 4] = [
        ("{\"id\":\"a\"}\n{\"id\":\"b\",\n", "line 2"),
        ("{\"id\":\"a\"}\n\n{\"id\":\"c\",\"kk\":3}\n", "line 3"),
        (
            "{\"id\":\"a\"}\n{\"id\":\"a\"}\n",
            "line 2: tenant \"a\" is listed twice",
        ),
        (
            "{\"id\":\"a\"}\n{\"id\":\"b\",\"k\":17}\n",
            "line 2: tenant \"b\" has k = 17",
        ),
    ];
    for (n, (contents, expected)) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("bad-{n}.jsonl"));
        std::fs::write(&path, contents).unwrap();
        let error = assert_one_line_error(
            shuffle_shard()
                .arg("blast")
                .args(FLEET)
                .arg("--tenants-file")
                .arg(&path),
        );
        assert!(error.contains(path_arg(&path)), "{error}");
        assert!(error.contains(expected), "{expected}: {error}");
    }
    let toml = dir.path().join("bad.toml");
    std::fs::write(&toml, "[[tenants]]\nid = \"a\"\nk = \"three\"\n").unwrap();
    let error = assert_one_line_error(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .arg("--tenants-file")
            .arg(&toml),
    );
    assert!(
        error.contains(path_arg(&toml)) && error.contains("line 3"),
        "{error}"
    );
}

#[test]
fn the_sources_exclude_each_other() {
    let secret = "hunter2-secret";
    let url = format!("postgres://gateway:{secret}@127.0.0.1:1/tenants");
    for other in [["--tenants", "5"], ["--tenants-file", "tenants.jsonl"]] {
        let output = shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .args(["--tenants-store", &url])
            .args(other)
            .output()
            .unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("cannot be used with"), "{stderr}");
        assert!(!stderr.contains(secret), "{stderr}");
    }
    let output = shuffle_shard()
        .arg("blast")
        .args(FLEET)
        .args(["--tenants", "5", "--ca-file", "ca.pem"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot be used with '--ca-file <FILE>'"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_tenant_store_gives_the_figures_of_the_file_it_was_loaded_from() {
    let Some(pg) = Postgres::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("tenants.jsonl");
    let mut entries = served(300);
    std::fs::write(&jsonl, json_lines(&entries)).unwrap();
    // The store hands tenants back in id order. `blast`'s figures do not
    // depend on the order, but `plan`'s poison warnings list tied tenants
    // in population order and sums may differ in the last bit, so those
    // compare with the file in the store's order.
    let sorted = dir.path().join("sorted.jsonl");
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    std::fs::write(&sorted, json_lines(&entries)).unwrap();

    // No schema yet: one line saying what to run.
    let error = assert_one_line_error(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .args(["--tenants-store", &pg.url()]),
    );
    assert!(error.contains("init-schema"), "{error}");
    assert!(!error.contains(&pg.password), "{error}");

    run_ok(shuffle_shard().args(["tenants", "init-schema", "--store", &pg.url()]));
    let error = assert_one_line_error(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .args(["--tenants-store", &pg.url()]),
    );
    assert!(error.contains("has no tenants"), "{error}");
    run_ok(
        shuffle_shard()
            .args(["tenants", "import"])
            .arg(&jsonl)
            .args(["--store", &pg.url()]),
    );

    let expected = blast(&["--tenants-file", path_arg(&jsonl)], &[], None);
    // The password from PGPASSWORD, as the gateway's tools take it.
    let bare = pg.url().replace(&format!(":{}@", pg.password), "@");
    let from_store = blast(
        &["--tenants-store", &bare],
        &[],
        Some(("PGPASSWORD", &pg.password)),
    );
    assert_eq!(from_store["tenants"], 300);
    assert_eq!(figures(&from_store), figures(&expected));
    let (_, stderr) = run_ok(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .args(["--tenants-store", &pg.url()]),
    );
    assert!(!stderr.contains(&pg.password), "{stderr}");

    // `plan` and `report` read it too.
    let budget = [
        "--max-degraded",
        "0.3",
        "--max-fully-down",
        "0.01",
        "--concurrent-failures",
        "2",
    ];
    let plan = |source: &[&str]| {
        run_json(
            shuffle_shard()
                .args(["plan", "--shards", "16"])
                .args(source)
                .args(budget),
        )
    };
    assert_eq!(
        plan(&["--tenants-store", &pg.url()]),
        plan(&["--tenants-file", path_arg(&sorted)])
    );
    let report = |source: &[&str]| {
        let mut report = run_json(
            shuffle_shard()
                .arg("report")
                .args(FLEET)
                .args(source)
                .args(budget),
        );
        report.as_object_mut().unwrap().remove("generated");
        report
    };
    assert_eq!(
        report(&["--tenants-store", &pg.url()]),
        report(&["--tenants-file", path_arg(&sorted)])
    );

    // A row the gateway would not load is skipped, and a note says so.
    pg.psql("UPDATE shuffle_shard_tenants SET k = -1 WHERE id = 'tenant-001'");
    let (stdout, stderr) = run_ok(shuffle_shard().arg("blast").args(FLEET).args([
        "--tenants-store",
        &pg.url(),
        "--json",
    ]));
    let skipped: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(skipped["tenants"], 299);
    assert!(
        stderr.contains("skipped 1 row of") && stderr.contains("tenant \"tenant-001\", column k"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_store_that_cannot_be_read_is_one_line_without_the_password() {
    let Some(pg) = Postgres::start().await else {
        return;
    };
    let wrong = pg.url().replace(&pg.password, "not-the-password");
    let error = assert_one_line_error(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .args(["--tenants-store", &wrong]),
    );
    assert!(error.contains("--tenants-store"), "{error}");
    assert!(error.contains("refused the login"), "{error}");
    assert!(!error.contains("not-the-password"), "{error}");

    let down = format!(
        "postgres://gateway:{}@127.0.0.1:{}/tenants",
        pg.password,
        free_port()
    );
    let error = assert_one_line_error(
        shuffle_shard()
            .args(["plan", "--shards", "16"])
            .args(["--tenants-store", &down])
            .args([
                "--max-degraded",
                "0.3",
                "--max-fully-down",
                "0.01",
                "--concurrent-failures",
                "2",
            ]),
    );
    assert!(error.contains("unreachable"), "{error}");
    assert!(!error.contains(&pg.password), "{error}");

    let garbled = format!("postgres://gateway:{}@127.0.0.1/tenants", pg.password);
    let error = assert_one_line_error(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .args(["--tenants-store", &garbled]),
    );
    assert!(error.contains("port"), "{error}");
    assert!(!error.contains(&pg.password), "{error}");
}

/// Runs `openssl` in `dir`, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let output = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|error| panic!("cannot run openssl (apt-get install openssl): {error}"));
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA (`ca.pem`) and a server certificate for 127.0.0.1 it signed
/// (`server.pem`, `server.key`) in `dir`.
fn pki(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-days",
                "30",
                "-subj",
                "/CN=test store CA",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
            ],
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            &["req"][..],
            &ec,
            &[
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
            ],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    );
}

#[tokio::test]
async fn ca_file_reads_the_store_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path());
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    let Some(pg) = Postgres::start_tls(&read("server.pem"), &read("server.key")).await else {
        return;
    };
    let jsonl = dir.path().join("tenants.jsonl");
    std::fs::write(&jsonl, json_lines(&served(50))).unwrap();
    run_ok(shuffle_shard().args(["tenants", "init-schema", "--store", &pg.url()]));
    run_ok(
        shuffle_shard()
            .args(["tenants", "import"])
            .arg(&jsonl)
            .args(["--store", &pg.url()]),
    );
    let ca = dir.path().join("ca.pem");
    let over_tls = blast(
        &["--tenants-store", &pg.url(), "--ca-file", path_arg(&ca)],
        &[],
        None,
    );
    assert_eq!(
        figures(&over_tls),
        figures(&blast(&["--tenants-file", path_arg(&jsonl)], &[], None))
    );

    // A CA that did not sign the server's certificate: refused, in one line.
    let other = tempfile::tempdir().unwrap();
    pki(other.path());
    let error = assert_one_line_error(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .args(["--tenants-store", &pg.url(), "--ca-file"])
            .arg(other.path().join("ca.pem")),
    );
    assert!(error.to_lowercase().contains("certificate"), "{error}");
    assert!(!error.contains(&pg.password), "{error}");
}
