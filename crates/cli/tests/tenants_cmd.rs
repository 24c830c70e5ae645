//! End-to-end tests of `shuffle-shard tenants …` through the real binary:
//! the schema made twice, a population imported and exported unchanged
//! (against a real PostgreSQL), and files converted both ways.

mod common;

use gateway::tenants::TenantEntry;
use testkit::postgres::Postgres;

use common::{assert_one_line_error, run_ok, shuffle_shard};

/// `n` tenants with every kind of field, in id order (the order `export`
/// writes), as JSON Lines.
fn population(n: usize) -> String {
    (0..n)
        .map(|i| {
            let mut entry = TenantEntry {
                id: format!("tenant-{i:05}"),
                ..TenantEntry::default()
            };
            match i % 5 {
                0 => entry.k = Some(2 + (i % 3) as u32),
                1 => entry.shards = Some(vec!["s1".into(), format!("s{}", i % 7)]),
                2 => entry.api_key_sha256 = Some(format!("{i:064x}")),
                3 => {
                    entry.cell = Some("eu".into());
                    entry.requests_per_second = Some(i as f64 / 4.0);
                    entry.burst = Some(i as u32);
                }
                _ => entry.max_in_flight = Some(i as u32),
            }
            serde_json::to_string(&entry).unwrap() + "\n"
        })
        .collect()
}

#[tokio::test]
async fn init_schema_twice_says_what_it_did() {
    let Some(pg) = Postgres::start().await else {
        return;
    };
    let (first, _) = run_ok(shuffle_shard().args(["tenants", "init-schema", "--store", &pg.url()]));
    assert!(first.starts_with("created"), "{first}");
    // The password from PGPASSWORD, the URL without it.
    let bare = pg.url().replace(&format!(":{}@", pg.password), "@");
    let (second, _) = run_ok(
        shuffle_shard()
            .args(["tenants", "init-schema", "--store", &bare])
            .env("PGPASSWORD", &pg.password),
    );
    assert!(second.contains("up to date"), "{second}");
    for output in [&first, &second] {
        assert!(!output.contains(&pg.password), "{output}");
    }
    let wrong = pg.url().replace(&pg.password, "not-the-password");
    let error =
        assert_one_line_error(shuffle_shard().args(["tenants", "init-schema", "--store", &wrong]));
    assert!(error.contains("refused the login"), "{error}");
    assert!(!error.contains("not-the-password"), "{error}");
}

#[tokio::test]
async fn an_import_exports_unchanged() {
    let Some(pg) = Postgres::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("tenants.jsonl");
    let tenants = population(1_000);
    std::fs::write(&input, &tenants).unwrap();
    let error = assert_one_line_error(
        shuffle_shard()
            .args(["tenants", "import"])
            .arg(&input)
            .args(["--store", &pg.url()]),
    );
    assert!(error.contains("init-schema"), "{error}");
    run_ok(shuffle_shard().args(["tenants", "init-schema", "--store", &pg.url()]));
    for _ in 0..2 {
        // Twice: an import is idempotent.
        let (_, stderr) = run_ok(
            shuffle_shard()
                .args(["tenants", "import"])
                .arg(&input)
                .args(["--store", &pg.url(), "--batch", "300"]),
        );
        assert!(stderr.contains("imported 1000 tenants"), "{stderr}");
    }
    assert_eq!(
        pg.psql("SELECT count(*) FROM shuffle_shard_tenants").trim(),
        "1000"
    );
    let (exported, _) = run_ok(shuffle_shard().args(["tenants", "export", "--store", &pg.url()]));
    assert!(exported == tenants, "export differs from the import");
    let out = dir.path().join("out.jsonl");
    run_ok(
        shuffle_shard()
            .args(["tenants", "export", "--store", &pg.url(), "--out"])
            .arg(&out),
    );
    assert!(std::fs::read_to_string(&out).unwrap() == tenants);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "no partial file left: {leftovers:?}");
}

#[test]
fn convert_round_trips_between_toml_and_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("tenants.jsonl");
    let toml = dir.path().join("tenants.toml");
    let back = dir.path().join("back.jsonl");
    let tenants = population(200);
    std::fs::write(&jsonl, &tenants).unwrap();
    run_ok(
        shuffle_shard()
            .args(["tenants", "convert"])
            .arg(&jsonl)
            .arg(&toml),
    );
    let text = std::fs::read_to_string(&toml).unwrap();
    assert_eq!(text.matches("[[tenants]]").count(), 200, "{text}");
    let (_, stderr) = run_ok(
        shuffle_shard()
            .args(["tenants", "convert"])
            .arg(&toml)
            .arg(&back),
    );
    assert!(stderr.contains("wrote 200 tenants"), "{stderr}");
    assert!(std::fs::read_to_string(&back).unwrap() == tenants);

    let broken = dir.path().join("broken.jsonl");
    std::fs::write(&broken, "{\"id\":\"a\"}\n{\"id\": 7}\n").unwrap();
    let out = dir.path().join("never.toml");
    let error = assert_one_line_error(
        shuffle_shard()
            .args(["tenants", "convert"])
            .arg(&broken)
            .arg(&out),
    );
    assert!(
        error.contains("broken.jsonl") && error.contains("line 2"),
        "{error}"
    );
    assert!(!out.exists(), "no output from a file that did not read");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 4, "no partial file left: {names:?}");
}
