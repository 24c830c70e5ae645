//! End-to-end tests of `shuffle-shard report` through the real binary: the
//! HTML file is written with its three charts, and bad input writes nothing.

use std::fmt::Write as _;
use std::fs;

use assert_cmd::Command;

fn shuffle_shard() -> Command {
    Command::cargo_bin("shuffle-shard").unwrap()
}

#[test]
fn report_writes_a_self_contained_page_with_its_charts() {
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
    // Weighted: the k chart by tenant count and again by share of traffic.
    assert_eq!(html.matches("<figure").count(), 4);
    for id in ["chart-k", "chart-k-traffic", "chart-overlap", "chart-load"] {
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

#[test]
fn issue_21_report_names_whales_honours_capacity_and_has_json() {
    let dir = tempfile::tempdir().unwrap();
    let mut tenants = String::from("whale\t60\n");
    for i in 0..300 {
        let _ = writeln!(tenants, "tenant-{i}\t1");
    }
    let tenants_file = dir.path().join("tenants.tsv");
    fs::write(&tenants_file, tenants).unwrap();
    let out = dir.path().join("report.html");
    let base = |command: &mut Command| {
        command
            .args(["report", "--zones", "a:8,b:8", "--k", "3", "--tenants-file"])
            .arg(&tenants_file);
    };

    // No capacity: the page never claims nothing is over one.
    let mut command = shuffle_shard();
    base(&mut command);
    command.arg("--out").arg(&out).assert().success();
    let html = fs::read_to_string(&out).unwrap();
    assert!(!html.contains("No shard is over"), "no capacity was given");
    assert!(html.contains("No capacity was given (--capacity)"));
    assert!(html.contains("<dd id=\"zones\">a (8 shards), b (8 shards)</dd>"));
    assert!(html.contains("the public recipe key"));
    assert!(html.contains("<dd id=\"generated\">20"));
    assert!(html.contains("UTC</dd>"));
    // The whale is named with what to do about it.
    assert!(html.contains("<table id=\"whales\">"), "no whale table");
    assert!(html.contains("<td class=\"text\">whale</td>"));
    assert!(html.contains("0 (none)"), "the log axis's zero is labelled");

    // With a capacity, zone outages and JSON: the same data on stdout.
    let mut command = shuffle_shard();
    base(&mut command);
    let assert = command
        .args([
            "--capacity",
            "5",
            "--zone-outage",
            "--key-version",
            "v3",
            "--json",
        ])
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let report: serde_json::Value = serde_json::from_slice(&assert.get_output().stdout).unwrap();
    assert_eq!(report["capacity"], 5.0);
    assert!(report["key"].as_str().unwrap().ends_with("version v3"));
    assert_eq!(report["zones"].as_array().unwrap().len(), 2);
    assert_eq!(report["zone_outages"].as_array().unwrap().len(), 2);
    assert_eq!(report["zone_outages"][0]["zone"], "a");
    assert_eq!(report["sweep"]["worst_bound"], "exact");
    assert!(report["recommended"].is_number() || report["recommended"].is_null());
    let whale = &report["whales"][0];
    assert_eq!(whale["tenant"], "whale");
    assert!(
        whale["suggested_k"].is_number() || whale["dedicated_shards"].is_number(),
        "{whale}"
    );
    let over = report["load"]["over_capacity"].as_array().unwrap();
    assert!(!over.is_empty(), "the whale's shards carry more than 5");
    let html = fs::read_to_string(&out).unwrap();
    assert!(html.contains("Over the capacity of 5"), "the page agrees");
    assert!(html.contains("<section id=\"zone-outage\">"));
    assert!(html.contains("version v3"));

    // Bad input is refused in one line with status 2, nothing written.
    for (extra, says) in [
        (vec!["--capacity", "5"], "needs tenant weights"),
        (vec!["--zone-outage"], "has no zones"),
        (vec!["--tenant-k", "ghost=4"], "no tenant \"ghost\""),
    ] {
        let assert = shuffle_shard()
            .args([
                "report",
                "--shards",
                "16",
                "--k",
                "3",
                "--tenants",
                "100",
                "--json",
            ])
            .args(&extra)
            .assert()
            .code(2);
        let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}
