//! End-to-end tests of `shuffle-shard report` through the real binary: the
//! HTML file is written with its three charts, and bad input writes nothing.

use std::fmt::Write as _;
use std::fs;

use assert_cmd::Command;

fn shuffle_shard() -> Command {
    Command::cargo_bin("shuffle-shard").unwrap()
}

#[test]
fn report_writes_a_self_contained_page_with_three_charts() {
    let dir = tempfile::tempdir().unwrap();
    // Weighted, so the page has the per-shard load chart as well; one whale.
    let mut tenants = String::from("whale\t50\n");
    for i in 0..400 {
        let _ = writeln!(tenants, "tenant-{i}\t{}", 1 + i % 3);
    }
    let tenants_file = dir.path().join("tenants.tsv");
    fs::write(&tenants_file, tenants).unwrap();
    let out = dir.path().join("report.html");

    let assert = shuffle_shard()
        .args(["report", "--shards", "16", "--k", "3", "--tenants-file"])
        .arg(&tenants_file)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert_eq!(stdout.trim_end(), out.display().to_string());

    let html = fs::read_to_string(&out).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<figure").count(), 3);
    for id in ["chart-k", "chart-overlap", "chart-load"] {
        assert!(html.contains(&format!("<figure id=\"{id}\">")), "{id}");
    }
    assert!(html.contains("<h1>Blast radius: 16 shards, k = 3, hmac-modulo</h1>"));
    assert!(html.contains("<dt>Tenants</dt><dd>401</dd>"));
    assert!(html.contains("<section id=\"sweep\">"));
    assert!(!html.contains("src=") && !html.contains("href="));
}

#[test]
fn a_bad_budget_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.html");
    let assert = shuffle_shard()
        .args(["report", "--shards", "16", "--k", "3", "--tenants", "100"])
        .args(["--max-degraded", "1.5", "--out"])
        .arg(&out)
        .assert()
        .code(2);
    let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    assert!(stderr.starts_with("error: --max-degraded 1.5"), "{stderr}");
    assert!(!out.exists());
}
