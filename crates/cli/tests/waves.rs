//! End-to-end tests of deployment waves, `blast --waves` and `plan-waves`,
//! each run through the real binary: the JSON field names, the figures
//! against a naive count over `place` output, the proposal against
//! round-robin, the round trip of `plan-waves --out` through
//! `blast --waves`, and one-line errors with status 2 for bad input.

mod common;

use common::{
    BLAST_FIELDS, assert_one_line_error, f64_of, placed, run_json, run_ok, set, shards,
    shuffle_shard, temp_file,
};
use std::collections::BTreeSet;

use serde_json::Value;
use testkit::json::keys;

/// The placement and population most tests use: 12 shards, k = 2.
const FLEET: [&str; 6] = ["--shards", "12", "--k", "2", "--tenants", "1000"];

fn waves_of(report: &Value) -> &Vec<Value> {
    report
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {report}"))
}

/// The total fully exposed over an assignment's waves.
fn total_fully_exposed(waves: &[Value]) -> u64 {
    waves
        .iter()
        .map(|wave| wave["fully_exposed"]["count"].as_u64().unwrap())
        .sum()
}

#[test]
fn plan_waves_out_round_trips_through_blast_waves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("waves.txt");
    let plan = run_json(
        shuffle_shard()
            .arg("plan-waves")
            .args(FLEET)
            .args(["--waves", "3", "--out"])
            .arg(&path),
    );
    assert_eq!(plan["out"], path.display().to_string());

    // The file: comments, then one `SHARD_ID WAVE` line per shard.
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().filter(|line| !line.starts_with('#')).collect();
    assert_eq!(lines.len(), 12, "{text}");
    let mut listed = BTreeSet::new();
    for line in &lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 2, "{line:?}");
        assert!(fields[1].starts_with("wave-"), "{line:?}");
        listed.insert(fields[0].parse::<u64>().unwrap());
    }
    assert_eq!(listed, (0..12).collect());

    // blast reads it back and measures exactly what plan-waves proposed.
    let blast = run_json(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .arg("--waves")
            .arg(&path),
    );
    assert_eq!(blast["waves"], plan["proposed"]["waves"]);
    let (text, _) = run_ok(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .arg("--waves")
            .arg(&path),
    );
    assert!(text.contains("Deployment waves"), "{text}");
    assert!(
        text.contains(&format!(
            "{} (",
            total_fully_exposed(waves_of(&blast["waves"]))
        )),
        "{text}"
    );
}

#[test]
fn the_proposal_fully_exposes_no_more_than_round_robin() {
    for count in [2usize, 3, 4, 6] {
        let plan = run_json(
            shuffle_shard()
                .arg("plan-waves")
                .args(FLEET)
                .args(["--waves", &count.to_string()]),
        );
        assert_eq!(plan["wave_count"], count);
        let proposed = waves_of(&plan["proposed"]["waves"]);
        let naive = waves_of(&plan["round_robin"]["waves"]);
        assert_eq!(proposed.len(), count);
        assert_eq!(naive.len(), count);
        let (proposed_total, naive_total) =
            (total_fully_exposed(proposed), total_fully_exposed(naive));
        assert!(
            proposed_total <= naive_total,
            "{count} waves: proposed {proposed_total} > round-robin {naive_total}"
        );
        assert_eq!(plan["proposed"]["fully_exposed"]["count"], proposed_total);
        assert_eq!(plan["round_robin"]["fully_exposed"]["count"], naive_total);
        assert!(
            (f64_of(&plan["proposed"]["fully_exposed"]["fraction"])
                - proposed_total as f64 / 1000.0)
                .abs()
                < 1e-12
        );

        // Round-robin is shard i in wave i mod W; the proposal is balanced
        // and uses every shard once.
        for (w, wave) in naive.iter().enumerate() {
            assert_eq!(wave["wave"], format!("wave-{}", w + 1));
            let expected: Vec<u64> = (0..12u64).filter(|s| *s as usize % count == w).collect();
            assert_eq!(shards(&wave["shards"]), expected);
        }
        let mut all = BTreeSet::new();
        for wave in proposed {
            let members = shards(&wave["shards"]);
            assert!(
                members.len() == 12 / count || members.len() == 12 / count + 1,
                "{wave}"
            );
            all.extend(members);
        }
        assert_eq!(all, (0..12).collect());
    }

    // With 300 tenants round-robin leaves room to improve; the text says
    // by how much.
    let args = [
        "--shards",
        "12",
        "--k",
        "2",
        "--tenants",
        "300",
        "--waves",
        "3",
    ];
    let plan = run_json(shuffle_shard().arg("plan-waves").args(args));
    let proposed = plan["proposed"]["fully_exposed"]["count"].as_u64().unwrap();
    let naive = plan["round_robin"]["fully_exposed"]["count"]
        .as_u64()
        .unwrap();
    assert!(proposed < naive, "{plan}");
    let (text, _) = run_ok(shuffle_shard().arg("plan-waves").args(args));
    assert!(text.contains("round-robin shards"), "{text}");
    assert!(
        text.contains(&format!(
            "{} fewer tenants a bad deploy can take fully down",
            naive - proposed
        )),
        "{text}"
    );
    assert!(text.contains("--out PATH"), "{text}");
}

#[test]
fn blast_waves_match_a_naive_count_over_place_output() {
    let placement = ["--shards", "12", "--k", "3", "--algorithm", "rendezvous"];
    let subsets = placed(&placement, 800);
    // Waves in deploy order, with comments and blank lines, not sorted.
    let file = temp_file(
        b"# canary first\n11 canary\n\n0 early\n5 early\n2 early\n1 early  \n3 late\n4 late\n\
          6 late\n7 late\n# the rest\n8 late\n9 early\n10 late\n",
    );
    let assignment: [(&str, &[u64]); 3] = [
        ("canary", &[11]),
        ("early", &[0, 1, 2, 5, 9]),
        ("late", &[3, 4, 6, 7, 8, 10]),
    ];
    let report = run_json(
        shuffle_shard()
            .arg("blast")
            .args(placement)
            .args(["--tenants", "800", "--waves"])
            .arg(file.path()),
    );
    let waves = waves_of(&report["waves"]);
    assert_eq!(waves.len(), 3);
    for (wave, (name, members)) in waves.iter().zip(assignment) {
        assert_eq!(wave["wave"], name);
        assert_eq!(shards(&wave["shards"]), members);
        let fully = subsets
            .iter()
            .filter(|subset| subset.iter().all(|shard| members.contains(shard)))
            .count();
        let touched = subsets
            .iter()
            .filter(|subset| subset.iter().any(|shard| members.contains(shard)))
            .count();
        assert_eq!(wave["fully_exposed"]["count"], fully, "{name}");
        assert_eq!(wave["touched"]["count"], touched, "{name}");
        assert!(
            (f64_of(&wave["touched"]["fraction"]) - touched as f64 / 800.0).abs() < 1e-12,
            "{name}"
        );
    }
    // One shard cannot hold a three-shard tenant.
    assert_eq!(waves[0]["fully_exposed"]["count"], 0);

    // A hand-written round-robin file measures what plan-waves calls
    // round-robin.
    let text: String = (0..12)
        .map(|s| format!("{s} wave-{}\n", s % 4 + 1))
        .collect();
    let file = temp_file(text.as_bytes());
    let blast = run_json(
        shuffle_shard()
            .arg("blast")
            .args(FLEET)
            .arg("--waves")
            .arg(file.path()),
    );
    let plan = run_json(
        shuffle_shard()
            .arg("plan-waves")
            .args(FLEET)
            .args(["--waves", "4"]),
    );
    assert_eq!(blast["waves"], plan["round_robin"]["waves"]);
}

#[test]
fn json_has_exactly_the_wave_field_names() {
    let file = temp_file(b"0 a\n1 a\n2 a\n3 a\n4 b\n5 b\n6 b\n7 b\n");
    let report = run_json(
        shuffle_shard()
            .args(["blast", "--shards", "8", "--k", "2", "--tenants", "50"])
            .arg("--waves")
            .arg(file.path()),
    );
    assert_eq!(keys(&report), set(&BLAST_FIELDS));
    let waves = waves_of(&report["waves"]);
    assert_eq!(waves.len(), 2);
    for wave in waves {
        assert_eq!(
            keys(wave),
            set(&["wave", "shards", "fully_exposed", "touched"])
        );
        for figure in ["fully_exposed", "touched"] {
            assert_eq!(keys(&wave[figure]), set(&["count", "fraction"]));
        }
    }
    assert_eq!(waves[0]["wave"], "a");
    assert_eq!(shards(&waves[1]["shards"]), [4, 5, 6, 7]);

    let plan = run_json(shuffle_shard().args([
        "plan-waves",
        "--shards",
        "8",
        "--k",
        "2",
        "--tenants",
        "50",
        "--waves",
        "2",
    ]));
    assert_eq!(
        keys(&plan),
        set(&[
            "shards",
            "k",
            "tenants",
            "algorithm",
            "wave_count",
            "proposed",
            "round_robin",
            "out",
        ])
    );
    assert_eq!(plan["shards"], 8);
    assert_eq!(plan["k"], 2);
    assert_eq!(plan["tenants"], 50);
    assert_eq!(plan["algorithm"], "hmac-modulo");
    assert!(plan["out"].is_null(), "{plan}");
    for assignment in ["proposed", "round_robin"] {
        let assignment = &plan[assignment];
        assert_eq!(keys(assignment), set(&["fully_exposed", "waves"]));
        assert_eq!(
            keys(&assignment["fully_exposed"]),
            set(&["count", "fraction"])
        );
        for wave in waves_of(&assignment["waves"]) {
            assert_eq!(
                keys(wave),
                set(&["wave", "shards", "fully_exposed", "touched"])
            );
        }
    }
}

#[test]
fn bad_waves_fail_with_one_line_and_status_2() {
    let blast = |contents: &[u8], fragment: &str| {
        let file = temp_file(contents);
        let stderr = assert_one_line_error(
            shuffle_shard()
                .args(["blast", "--shards", "4", "--k", "2", "--tenants", "10"])
                .arg("--waves")
                .arg(file.path()),
        );
        assert!(stderr.contains(fragment), "{contents:?}: {stderr}");
        assert!(stderr.contains("--waves "), "{stderr}");
    };
    // A shard the fleet does not have.
    blast(
        b"0 a\n1 a\n2 b\n3 b\n4 b\n",
        "line 5: shard \"4\" is not in",
    );
    // A shard without a wave.
    blast(b"0 a\n1 a\n2 b\n", "shard \"3\" has no wave");
    // A shard in two waves, or twice in one.
    blast(
        b"0 a\n1 a\n2 b\n3 b\n1 b\n",
        "line 5: shard \"1\" is assigned twice",
    );
    blast(
        b"0 a\n0 a\n1 a\n2 b\n3 b\n",
        "line 2: shard \"0\" is assigned twice",
    );
    // Not `SHARD_ID WAVE`.
    blast(b"0 a\n1\n2 b\n3 b\n", "line 2: expected `SHARD_ID WAVE`");
    blast(b"0 a b\n", "line 1: expected `SHARD_ID WAVE`");
    // Nothing but comments.
    blast(b"# nothing yet\n", "shard \"0\" has no wave");

    let stderr = assert_one_line_error(shuffle_shard().args([
        "blast",
        "--shards",
        "4",
        "--k",
        "2",
        "--tenants",
        "10",
        "--waves",
        "/nonexistent/shuffle-shard/waves",
    ]));
    assert!(
        stderr.contains("cannot read waves file /nonexistent/shuffle-shard/waves"),
        "{stderr}"
    );
    let binary = temp_file(b"0 a\n\xff b\n");
    let stderr = assert_one_line_error(
        shuffle_shard()
            .args(["blast", "--shards", "4", "--k", "2", "--tenants", "10"])
            .arg("--waves")
            .arg(binary.path()),
    );
    assert!(stderr.contains("not valid UTF-8"), "{stderr}");

    let plan = |extra: &[&str]| {
        let mut command = shuffle_shard();
        command.arg("plan-waves").args(FLEET).args(extra);
        command
    };
    for (count, fragment) in [
        ("0", "--waves 0: cannot split 12 shards into 0 waves"),
        ("1", "--waves 1: cannot split 12 shards into 1 waves"),
        ("13", "--waves 13: cannot split 12 shards into 13 waves"),
    ] {
        let stderr = assert_one_line_error(&mut plan(&["--waves", count]));
        assert!(stderr.contains(fragment), "{count}: {stderr}");
        assert!(stderr.contains("choose from 2 to 12"), "{stderr}");
    }
    let stderr = assert_one_line_error(&mut plan(&[
        "--waves",
        "3",
        "--out",
        "/nonexistent/shuffle-shard/waves",
    ]));
    assert!(
        stderr.contains("cannot write the waves file to /nonexistent/shuffle-shard/waves"),
        "{stderr}"
    );
    // Placement and population errors are the same as blast's.
    let stderr = assert_one_line_error(shuffle_shard().args([
        "plan-waves",
        "--shards",
        "8",
        "--k",
        "9",
        "--tenants",
        "10",
        "--waves",
        "2",
    ]));
    assert!(stderr.contains("k = 9"), "{stderr}");
}

#[test]
fn help_documents_waves() {
    let (help, _) = run_ok(shuffle_shard().args(["blast", "--help"]));
    for fragment in ["--waves", "SHARD_ID WAVE", "plan-waves"] {
        assert!(help.contains(fragment), "blast: missing {fragment:?}");
    }
    let (help, _) = run_ok(shuffle_shard().args(["plan-waves", "--help"]));
    for fragment in [
        "--waves",
        "--out",
        "--json",
        "--shards",
        "--k",
        "--zones",
        "--tenant-k",
        "--tenants-file",
        "round-robin",
        "blast --waves",
        "Examples:",
    ] {
        assert!(help.contains(fragment), "plan-waves: missing {fragment:?}");
    }
    let (help, _) = run_ok(shuffle_shard().arg("--help"));
    assert!(help.contains("plan-waves"), "{help}");
}
