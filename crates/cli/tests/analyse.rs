//! End-to-end tests of the analyser subcommands `blast`, `plan` and
//! `migrate`, each run through the real binary: the JSON field names, the
//! figures against a naive count over `place` output, the text output, and
//! one-line errors with status 2 for bad input.

mod common;

use common::{
    BLAST_FIELDS, NOTE, assert_one_line_error, f64_of, placed, run_json, run_ok, set, shards,
    shuffle_shard, temp_file,
};

use serde_json::Value;
use testkit::json::keys;

#[test]
fn blast_json_has_exactly_the_issue_field_names() {
    let weights = temp_file(b"acme\t3\nglobex\t1\ninitech\t2\numbrella\t1\n");
    let report = run_json(
        shuffle_shard()
            .args(["blast", "--shards", "8", "--k", "2", "--tenants-file"])
            .arg(weights.path())
            .args(["--fail", "3,7", "--sweep", "2", "--capacity", "2"]),
    );
    assert_eq!(keys(&report), set(&BLAST_FIELDS));
    assert_eq!(report["shards"], 8);
    assert_eq!(report["k"], 2);
    assert_eq!(report["tenants"], 4);
    assert_eq!(report["algorithm"], "hmac-modulo");
    assert_eq!(
        keys(&report["pairwise_overlap"]),
        set(&["fraction", "shared_counts", "expected_shared_counts"])
    );
    assert_eq!(
        report["pairwise_overlap"]["shared_counts"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        report["pairwise_overlap"]["expected_shared_counts"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    let scenario = &report["scenarios"][0];
    // `name`, `zone` and `capacity_lost` are additions to the issue's names.
    assert_eq!(
        keys(scenario),
        set(&[
            "failed",
            "fully_down",
            "degraded",
            "capacity_lost",
            "name",
            "zone",
        ])
    );
    assert_eq!(shards(&scenario["failed"]), [3, 7]);
    for figure in ["fully_down", "degraded"] {
        assert_eq!(keys(&scenario[figure]), set(&["count", "fraction"]));
    }

    let sweep = &report["sweep"];
    assert_eq!(
        keys(sweep),
        set(&["failures", "sets", "sampled", "fully_down", "degraded"])
    );
    for figure in ["fully_down", "degraded"] {
        assert_eq!(
            keys(&sweep[figure]),
            set(&["worst", "mean", "p50", "p99"]),
            "{figure}"
        );
        assert_eq!(
            keys(&sweep[figure]["worst"]),
            set(&["count", "fraction", "failed", "bound"])
        );
    }

    let load = &report["load"];
    for field in [
        "per_shard",
        "cv",
        "max_over_mean",
        "hottest",
        "over_capacity",
        "failover",
        "dominant",
    ] {
        assert!(load.get(field).is_some(), "load lacks {field}: {load}");
    }
    assert_eq!(load["per_shard"].as_array().unwrap().len(), 8);
    assert_eq!(load["failover"].as_array().unwrap().len(), 8);

    // Without a sweep, waves or weights those are null, not missing.
    let plain =
        run_json(shuffle_shard().args(["blast", "--shards", "8", "--k", "2", "--tenants", "5"]));
    assert!(
        plain["sweep"].is_null() && plain["waves"].is_null() && plain["load"].is_null(),
        "{plain}"
    );
    assert_eq!(plain["scenarios"], serde_json::json!([]));
}

/// `blast --json`'s `load` object exactly as printed, for a small weighted
/// population: pinned byte for byte so that the load answer's one type
/// (the analyser's report, its tenants named) prints what the copy it
/// replaced printed, field order and number formatting included.
#[test]
fn blast_load_json_is_byte_for_byte_frozen() {
    let weights = temp_file(b"acme\t3\nglobex\t1\ninitech\t2\numbrella\t0.5\n");
    let (stdout, _) = run_ok(
        shuffle_shard()
            .args(["blast", "--shards", "4", "--k", "2", "--tenants-file"])
            .arg(weights.path())
            .args(["--capacity", "2", "--json"]),
    );
    let start = stdout.find("\"load\":").expect("a load object");
    let end = start + stdout[start..].find("\n  }").expect("its end") + 4;
    assert_eq!(&stdout[start..end], FROZEN_LOAD, "{stdout}");
}

/// What `blast` printed before `LoadJson` became `LoadReport` named.
const FROZEN_LOAD: &str = r#""load": {
    "capacity": 2.0,
    "per_shard": [
      1.5,
      0.5,
      1.75,
      2.75
    ],
    "mean": 1.625,
    "cv": 0.49254801826406525,
    "max_over_mean": 1.6923076923076923,
    "hottest": 3,
    "over_capacity": [
      3
    ],
    "failover": [
      {
        "failed": 0,
        "hottest": 3,
        "load": 3.75,
        "over_capacity": true
      },
      {
        "failed": 1,
        "hottest": 3,
        "load": 2.75,
        "over_capacity": true
      },
      {
        "failed": 2,
        "hottest": 3,
        "load": 4.5,
        "over_capacity": true
      },
      {
        "failed": 3,
        "hottest": 2,
        "load": 3.5,
        "over_capacity": true
      }
    ],
    "dominant": [
      {
        "tenant": "acme",
        "load": 1.5,
        "share": 0.5454545454545454
      },
      {
        "tenant": "initech",
        "load": 1.0,
        "share": 0.36363636363636365
      },
      {
        "tenant": "umbrella",
        "load": 0.25,
        "share": 0.09090909090909091
      }
    ]
  }"#;

#[test]
fn one_failure_at_k2_degrades_about_one_eighth_and_downs_nobody() {
    let mut command = shuffle_shard();
    command.args(["blast", "--shards", "16", "--k", "2", "--tenants", "2000"]);
    for shard in 0..16 {
        command.args(["--fail", &shard.to_string()]);
    }
    let report = run_json(&mut command);
    let scenarios = report["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 16);
    let mut degraded_total = 0;
    for scenario in scenarios {
        assert_eq!(scenario["fully_down"]["count"], 0, "{scenario}");
        let fraction = f64_of(&scenario["degraded"]["fraction"]);
        assert!((0.08..=0.17).contains(&fraction), "{scenario}");
        // With k = 2 every degraded tenant lost exactly half its shards.
        assert!((f64_of(&scenario["capacity_lost"]) - 0.5).abs() < 1e-9);
        degraded_total += scenario["degraded"]["count"].as_u64().unwrap();
    }
    // Every tenant is degraded by exactly two single failures.
    assert_eq!(degraded_total, 2 * 2000);
}

#[test]
fn figures_match_a_naive_count_over_place_output() {
    let placement = ["--shards", "12", "--k", "3", "--algorithm", "rendezvous"];
    let subsets = placed(&placement, 1500);
    let report = run_json(shuffle_shard().arg("blast").args(placement).args([
        "--tenants",
        "1500",
        "--fail",
        "2,5,9",
        "--fail",
        "0,1",
    ]));
    for (scenario, failed) in report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .zip([&[2u64, 5, 9][..], &[0, 1]])
    {
        let fully_down = subsets
            .iter()
            .filter(|subset| subset.iter().all(|shard| failed.contains(shard)))
            .count();
        let degraded = subsets
            .iter()
            .filter(|subset| subset.iter().any(|shard| failed.contains(shard)))
            .count();
        assert_eq!(scenario["fully_down"]["count"], fully_down, "{failed:?}");
        assert_eq!(scenario["degraded"]["count"], degraded, "{failed:?}");
    }

    // Pairwise overlap, pair by pair.
    let mut shared = [0u64; 4];
    for (i, a) in subsets.iter().enumerate() {
        for b in &subsets[i + 1..] {
            shared[a.iter().filter(|shard| b.contains(shard)).count()] += 1;
        }
    }
    let pairs = shared.iter().sum::<u64>() as f64;
    let measured = report["pairwise_overlap"]["shared_counts"]
        .as_array()
        .unwrap();
    for (j, &count) in shared.iter().enumerate() {
        let expected = count as f64 / pairs;
        assert!(
            (f64_of(&measured[j]) - expected).abs() < 1e-12,
            "j = {j}: {} vs {expected}",
            measured[j]
        );
    }
}

#[test]
fn sweeps_are_exact_up_to_max_sets_and_sampled_beyond() {
    let base = ["blast", "--shards", "8", "--k", "2", "--tenants", "500"];
    let report = run_json(shuffle_shard().args(base).args(["--sweep", "2"]));
    let sweep = &report["sweep"];
    assert_eq!(sweep["failures"], 2);
    assert_eq!(sweep["sets"], 28);
    assert_eq!(sweep["sampled"], false);
    for figure in ["fully_down", "degraded"] {
        let figure = &sweep[figure];
        let worst = f64_of(&figure["worst"]["fraction"]);
        let (mean, p50, p99) = (
            f64_of(&figure["mean"]),
            f64_of(&figure["p50"]),
            f64_of(&figure["p99"]),
        );
        assert!(p50 <= p99 && p99 <= worst && mean <= worst, "{figure}");
        assert_eq!(shards(&figure["worst"]["failed"]).len(), 2);
    }

    // The worst set, failed on its own, downs exactly the worst count.
    let worst_set: Vec<String> = shards(&sweep["fully_down"]["worst"]["failed"])
        .iter()
        .map(u64::to_string)
        .collect();
    let check = run_json(
        shuffle_shard()
            .args(base)
            .args(["--fail", &worst_set.join(",")]),
    );
    assert_eq!(
        check["scenarios"][0]["fully_down"]["count"],
        sweep["fully_down"]["worst"]["count"]
    );

    let sampled = run_json(
        shuffle_shard()
            .args(base)
            .args(["--sweep", "2", "--max-sets", "10"]),
    );
    assert_eq!(sampled["sweep"]["sets"], 10);
    assert_eq!(sampled["sweep"]["sampled"], true);
    assert_eq!(
        sampled["sweep"]["fully_down"]["worst"]["bound"],
        "lower bound"
    );
    assert_eq!(report["sweep"]["fully_down"]["worst"]["bound"], "exact");

    // The text says it sampled, and a different seed is still a sample.
    let (text, _) = run_ok(shuffle_shard().args(base).args([
        "--sweep",
        "2",
        "--max-sets",
        "10",
        "--seed",
        "7",
    ]));
    assert!(
        text.contains("random sample of 10 of the 28 sets"),
        "{text}"
    );
    assert!(text.contains("seed 7"), "{text}");
    assert!(text.contains("none drawn twice"), "{text}");
    assert!(text.contains("worst seen (lower bound)"), "{text}");
    assert!(text.contains(">= marks a lower bound"), "{text}");
    let (text, _) = run_ok(shuffle_shard().args(base).args(["--sweep", "2"]));
    assert!(text.contains("all 28 sets of 2 failed shards"), "{text}");
    assert!(!text.contains("lower bound"), "{text}");
    assert!(text.contains("nearest-rank"), "{text}");
}

#[test]
fn zone_outages_fail_each_zone_in_turn() {
    // Three zones and k = 3: every tenant has one shard in each zone, so a
    // zone outage degrades everyone by a third and downs nobody.
    let report = run_json(shuffle_shard().args([
        "blast",
        "--zones",
        "a:4,b:4,c:4",
        "--k",
        "3",
        "--tenants",
        "600",
        "--zone-outage",
    ]));
    let scenarios = report["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 3);
    for (scenario, (zone, first)) in scenarios.iter().zip([("a", 0), ("b", 4), ("c", 8)]) {
        assert_eq!(scenario["zone"], zone);
        assert_eq!(
            shards(&scenario["failed"]),
            (first..first + 4).collect::<Vec<u64>>()
        );
        assert_eq!(scenario["fully_down"]["count"], 0, "{scenario}");
        assert_eq!(scenario["degraded"]["count"], 600, "{scenario}");
        assert!((f64_of(&scenario["capacity_lost"]) - 1.0 / 3.0).abs() < 1e-9);
    }
    // With zones the expectation is the per-zone product: one shard per
    // zone, so no pair shares nothing with probability (3/4)^3.
    let expected = &report["pairwise_overlap"]["expected_shared_counts"];
    assert!((f64_of(&expected[0]) - 0.75f64.powi(3)).abs() < 1e-12);

    let (text, _) = run_ok(shuffle_shard().args([
        "blast",
        "--zones",
        "a:4,b:4",
        "--k",
        "2",
        "--tenants",
        "100",
        "--zone-outage",
    ]));
    assert!(text.contains("zone a (4 shards)"), "{text}");
    assert!(text.contains("zone b (4 shards)"), "{text}");
}

#[test]
fn a_whale_is_named_as_dominating_the_hottest_shard() {
    let mut tenants = String::from("whale\t500\n");
    for t in 0..300 {
        tenants.push_str(&format!("minnow-{t}\t1\n"));
    }
    let file = temp_file(tenants.as_bytes());
    let base = || {
        let mut command = shuffle_shard();
        command
            .args(["blast", "--shards", "16", "--k", "3", "--tenants-file"])
            .arg(file.path())
            .args(["--capacity", "100"]);
        command
    };
    let report = run_json(&mut base());
    let load = &report["load"];
    assert_eq!(load["dominant"][0]["tenant"], "whale", "{load}");
    assert!(f64_of(&load["dominant"][0]["share"]) > 0.5, "{load}");
    // The whale's third of 500 puts its three shards over 100, and no
    // other shard gets near it.
    let over = shards(&load["over_capacity"]);
    assert_eq!(over.len(), 3, "{load}");
    assert!(over.contains(&load["hottest"].as_u64().unwrap()));
    assert!(f64_of(&load["max_over_mean"]) > 2.0);
    assert!(
        load["failover"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["over_capacity"] == true),
        "every failure leaves some whale shard over capacity"
    );

    let (text, _) = run_ok(&mut base());
    assert!(text.contains("tenants dominating shard"), "{text}");
    assert!(text.contains("whale ("), "{text}");
    assert!(text.contains("OVER CAPACITY"), "{text}");
}

#[test]
fn tenant_k_gives_one_tenant_a_wider_subset() {
    let (stdout, _) = run_ok(
        shuffle_shard()
            .args(["place", "--shards", "16", "--k", "2"])
            .args(["--tenant-k", "whale=6", "whale", "minnow"]),
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(shards(&lines[0]["shards"]).len(), 6);
    assert_eq!(shards(&lines[1]["shards"]).len(), 2);

    // The analyser sees the same subsets: failing the whale's six shards
    // downs it.
    let whale: Vec<String> = shards(&lines[0]["shards"])
        .iter()
        .map(u64::to_string)
        .collect();
    let file = temp_file(b"whale\nminnow\n");
    let report = run_json(
        shuffle_shard()
            .args(["blast", "--shards", "16", "--k", "2"])
            .args(["--tenant-k", "whale=6", "--tenants-file"])
            .arg(file.path())
            .args(["--fail", &whale.join(",")]),
    );
    assert!(report["scenarios"][0]["fully_down"]["count"].as_u64() >= Some(1));
    // Pairs can now share up to six shards.
    assert_eq!(
        report["pairwise_overlap"]["shared_counts"]
            .as_array()
            .unwrap()
            .len(),
        7
    );
}

#[test]
fn the_key_note_is_printed_once_and_only_without_a_key() {
    let (_, stderr) = run_ok(
        shuffle_shard()
            .args(["blast", "--shards", "8", "--k", "2", "--tenants", "50"])
            .args(["--sweep", "1", "--fail", "0"]),
    );
    assert_eq!(stderr.matches(NOTE).count(), 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let key = temp_file(b"a real key");
    let (_, stderr) = run_ok(
        shuffle_shard()
            .args(["blast", "--shards", "8", "--k", "2", "--tenants", "50"])
            .arg("--key-file")
            .arg(key.path()),
    );
    assert!(stderr.is_empty(), "{stderr}");
}

/// `plan` for 16 shards and 2,000 tenants with a budget of `max_degraded`,
/// 0.1 % fully down and two concurrent failures.
fn plan_16_shards(max_degraded: &str) -> [&str; 11] {
    [
        "plan",
        "--shards",
        "16",
        "--tenants",
        "2000",
        "--max-degraded",
        max_degraded,
        "--max-fully-down",
        "0.001",
        "--concurrent-failures",
        "2",
    ]
}

#[test]
fn plan_recommends_a_k_for_the_chapters_budget() {
    let budget = plan_16_shards("0.2");
    let plan = run_json(shuffle_shard().args(budget));
    let rows = plan["rows"].as_array().unwrap();
    let ks: Vec<u64> = rows.iter().map(|row| row["k"].as_u64().unwrap()).collect();
    assert_eq!(ks, (1..=8).collect::<Vec<u64>>());
    let recommended = plan["recommended"]
        .as_u64()
        .expect("some k meets the budget");
    let row = &rows[recommended as usize - 1];
    assert_eq!(row["meets_budget"], true);
    assert!(f64_of(&row["degraded_one_failure"]) <= 0.2);
    assert!(f64_of(&row["worst_fully_down"]) <= 0.001);
    // Smaller k all fail some budget.
    assert!(
        rows[..recommended as usize - 1]
            .iter()
            .all(|row| row["meets_budget"] == false)
    );
    assert_eq!(plan["budget"]["concurrent_failures"], 2);
    for field in [
        "k",
        "worst_fully_down",
        "worst_failed",
        "degraded_one_failure",
        "capacity_lost",
        "overlap",
        "meets_budget",
    ] {
        assert!(row.get(field).is_some(), "row lacks {field}");
    }

    let (text, _) = run_ok(shuffle_shard().args(budget));
    let verdict = text.lines().last().unwrap();
    assert!(
        verdict.starts_with(&format!("k = {recommended} is the smallest k")),
        "{text}"
    );
    // One table row per k, under a header.
    assert!(text.contains("worst fully down (2 failed)"), "{text}");
    for k in 1..=8 {
        assert!(
            text.lines().any(|line| line.starts_with(&format!("{k} "))),
            "no row for k = {k}:\n{text}"
        );
    }
}

#[test]
fn plan_says_which_budget_binds_when_nothing_meets_it() {
    let args = plan_16_shards("0.01");
    let (text, _) = run_ok(shuffle_shard().args(args));
    let verdict = text.lines().last().unwrap();
    assert!(verdict.contains("degraded budget"), "{verdict}");
    assert!(verdict.contains("--max-degraded"), "{verdict}");
    let plan = run_json(shuffle_shard().args(args));
    assert!(plan["recommended"].is_null());
    assert!(
        plan["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|row| row["meets_budget"] == false)
    );
}

#[test]
fn migrate_shows_rendezvous_moving_few_and_modulo_moving_most() {
    let args = [
        "migrate",
        "--from",
        "shards=20 k=3 algorithm=rendezvous",
        "--to",
        "shards=21;k=3;algorithm=rendezvous",
        "--tenants",
        "2000",
    ];
    let report = run_json(shuffle_shard().args(args));
    let changed = f64_of(&report["changed_fraction"]);
    assert!((changed - 3.0 / 21.0).abs() < 0.03, "{report}");
    // Adding one shard: each changed tenant gains exactly the new shard.
    assert_eq!(report["members_moved"], report["changed"]);
    let histogram: Vec<u64> = report["moved_per_tenant"]
        .as_array()
        .unwrap()
        .iter()
        .map(|count| count.as_u64().unwrap())
        .collect();
    assert_eq!(histogram.len(), 2, "{report}");
    assert_eq!(histogram.iter().sum::<u64>(), 2000);
    assert!(!report["changed_sample"].as_array().unwrap().is_empty());
    assert_eq!(report["from"]["shards"], 20);
    assert_eq!(report["to"]["algorithm"], "rendezvous");

    // Shrinking k under rendezvous drops one member from every tenant and
    // adds none: the cost is the drops, never "0 moved" alone.
    let shrink_args = [
        "migrate",
        "--from",
        "shards=20 k=3 algorithm=rendezvous",
        "--to",
        "shards=20 k=2 algorithm=rendezvous",
        "--tenants",
        "500",
    ];
    let shrink = run_json(shuffle_shard().args(shrink_args));
    assert_eq!(shrink["changed"], 500, "{shrink}");
    assert_eq!(shrink["members_moved"], 0, "{shrink}");
    assert_eq!(shrink["members_dropped"], 500, "{shrink}");
    let (text, _) = run_ok(shuffle_shard().args(shrink_args));
    assert!(text.contains("to remove (members dropped): 500"), "{text}");

    let comparison = &report["comparison"];
    assert_eq!(comparison["algorithm"], "hmac-modulo");
    assert!(
        f64_of(&comparison["changed_fraction"]) > 0.9,
        "{comparison}"
    );

    let (text, _) = run_ok(shuffle_shard().args(args));
    assert!(text.contains("under hmac-modulo"), "{text}");
    assert!(text.contains("e.g. changed: tenant-"), "{text}");
}

#[test]
fn migrate_between_key_versions() {
    let old = temp_file(b"old key");
    let same = temp_file(b"old key");
    let new = temp_file(b"new key");
    let migrate = |to: &tempfile::NamedTempFile| {
        run_json(
            shuffle_shard()
                .args([
                    "migrate",
                    "--from",
                    "shards=32 k=3 key=v1",
                    "--to",
                    "shards=32 k=3 key=v2",
                    "--tenants",
                    "300",
                ])
                .arg("--key")
                .arg(format!("v1={}", old.path().display()))
                .arg("--key")
                .arg(format!("v2={}", to.path().display())),
        )
    };
    assert_eq!(migrate(&same)["changed"], 0);
    assert!(f64_of(&migrate(&new)["changed_fraction"]) > 0.9);

    // Changing the algorithm itself has nothing to compare with.
    let report = run_json(shuffle_shard().args([
        "migrate",
        "--from",
        "shards=8 k=2",
        "--to",
        "shards=8 k=2 algorithm=rendezvous",
        "--tenants",
        "100",
    ]));
    assert!(report["comparison"].is_null(), "{report}");
}

/// Who depends on old members after moving `tenants` synthetic tenants
/// from one recipe-key placement to another, counted here with the
/// placement library alone: (fully dependent ids, partially dependent).
fn naive_lookback(
    tenants: usize,
    from: (placement::Algorithm, u32),
    to: (placement::Algorithm, u32),
) -> (Vec<String>, u64) {
    use placement::{Fleet, PlacementConfig, PlacementKey, Placer};
    let placer = |(algorithm, k)| {
        Placer::new(
            Fleet::uniform(8).unwrap(),
            &PlacementKey::recipe_default(),
            PlacementConfig {
                algorithm,
                k,
                zone_aware: false,
            },
        )
        .unwrap()
    };
    let (before, after) = (placer(from), placer(to));
    let mut fully = Vec::new();
    let mut partially = 0;
    for t in 0..tenants {
        let id = format!("tenant-{t}");
        let old: std::collections::BTreeSet<&str> = before.subset_ids(&id).into_iter().collect();
        let new: std::collections::BTreeSet<&str> = after.subset_ids(&id).into_iter().collect();
        let kept = new.intersection(&old).count();
        if kept == 0 {
            fully.push(id);
        } else if kept < new.len() {
            partially += 1;
        }
    }
    (fully, partially)
}

#[test]
fn migrate_lookback_says_who_depends_on_old_members() {
    use placement::Algorithm::{HmacModulo, Rendezvous};
    let args = [
        "migrate",
        "--from",
        "shards=8 k=3 algorithm=rendezvous",
        "--to",
        "shards=8 k=2 algorithm=hmac-modulo",
        "--tenants",
        "400",
        "--lookback",
    ];
    let report = run_json(shuffle_shard().args(args));
    let (fully, partially) = naive_lookback(400, (Rendezvous, 3), (HmacModulo, 2));
    assert!(
        !fully.is_empty() && partially > 0,
        "a change that tests both"
    );
    let lookback = &report["lookback"];
    assert_eq!(
        lookback["fully_dependent"],
        fully.len() as u64,
        "{lookback}"
    );
    assert_eq!(lookback["partially_dependent"], partially, "{lookback}");
    let listed: Vec<&str> = lookback["fully_dependent_tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    assert_eq!(listed, fully, "every one, in order, with --json");
    assert!(
        (f64_of(&lookback["fully_dependent_fraction"]) - fully.len() as f64 / 400.0).abs() < 1e-9
    );

    let (text, _) = run_ok(shuffle_shard().args(args));
    assert!(
        text.contains(&format!("{} tenants (", fully.len()))
            && text.contains("keep none of their members"),
        "{text}"
    );
    assert!(
        text.contains(&format!("fully dependent: {}, ", fully[0])),
        "{text}"
    );
    assert!(text.contains("--json lists every one"), "{text}");

    // Shrinking k under rendezvous keeps a member that holds the data for
    // every tenant: nobody depends on old members.
    let shrink = run_json(shuffle_shard().args([
        "migrate",
        "--from",
        "shards=8 k=3 algorithm=rendezvous",
        "--to",
        "shards=8 k=2 algorithm=rendezvous",
        "--tenants",
        "200",
        "--lookback",
    ]));
    assert_eq!(shrink["lookback"]["fully_dependent"], 0, "{shrink}");
    assert_eq!(shrink["lookback"]["partially_dependent"], 0, "{shrink}");
    // Without --lookback the answer has no lookback at all.
    let plain = run_json(shuffle_shard().args(&args[..args.len() - 1]));
    assert!(plain.get("lookback").is_none(), "{plain}");
}

#[test]
fn bad_input_fails_with_one_line_and_status_2() {
    let empty = temp_file(b"");
    let bad_weight = temp_file(b"acme\t2\nglobex\theavy\n");
    let empty = empty.path().to_str().unwrap();
    let bad_weight = bad_weight.path().to_str().unwrap();
    let blast = |extra: &[&str]| {
        let mut args = vec!["blast", "--shards", "16", "--k", "2"];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            blast(&["--tenants", "10", "--fail", "3,16"]),
            "no shard \"16\"",
        ),
        (
            blast(&["--tenants", "10", "--fail", "3,x"]),
            "no shard \"x\"",
        ),
        (blast(&["--tenants", "10", "--sweep", "17"]), "--sweep 17"),
        (blast(&["--tenants", "10", "--sweep", "0"]), "--sweep 0"),
        (blast(&["--tenants-file", empty]), "has no tenants"),
        (blast(&["--tenants-file", bad_weight]), "line 2"),
        (blast(&["--tenants", "10", "--zone-outage"]), "has no zones"),
        (
            blast(&["--tenants", "10", "--capacity", "5"]),
            "needs tenant weights",
        ),
        (blast(&["--tenants", "0"]), "--tenants 0"),
        (
            blast(&["--tenants", "10", "--tenant-k", "a=17"]),
            "--tenant-k a=17",
        ),
        (
            blast(&["--tenants-file", "/nonexistent/shuffle-shard/tenants"]),
            "/nonexistent/shuffle-shard/tenants",
        ),
        (
            vec!["blast", "--shards", "8", "--k", "9", "--tenants", "10"]
                .into_iter()
                .map(str::to_owned)
                .collect(),
            "k = 9",
        ),
    ];
    for (args, fragment) in &cases {
        let stderr = assert_one_line_error(shuffle_shard().args(args));
        assert!(stderr.contains(fragment), "{args:?}: {stderr}");
    }

    let plan = |extra: &[&'static str]| {
        let mut args = vec!["plan", "--shards", "8", "--tenants", "10"];
        args.extend_from_slice(extra);
        args
    };
    for (args, fragment) in [
        (
            plan(&[
                "--max-degraded",
                "0.2",
                "--max-fully-down",
                "0.001",
                "--concurrent-failures",
                "9",
            ]),
            "--concurrent-failures 9",
        ),
        (
            plan(&[
                "--max-degraded",
                "1.5",
                "--max-fully-down",
                "0.001",
                "--concurrent-failures",
                "2",
            ]),
            "--max-degraded 1.5",
        ),
    ] {
        let stderr = assert_one_line_error(shuffle_shard().args(&args));
        assert!(stderr.contains(fragment), "{args:?}: {stderr}");
    }

    for (from, to, fragment) in [
        ("shards=8 k=2 key=v1", "shards=8 k=2", "key version \"v1\""),
        ("shards=8 k=9", "shards=8 k=2", "k = 9"),
        ("shards=8", "shards=8 k=2", "has no k"),
        ("shards=8 k=2 size=3", "shards=8 k=2", "unknown item"),
    ] {
        let stderr = assert_one_line_error(shuffle_shard().args([
            "migrate",
            "--from",
            from,
            "--to",
            to,
            "--tenants",
            "10",
        ]));
        assert!(stderr.contains(fragment), "{from}: {stderr}");
    }
}

#[test]
fn usage_errors_exit_2_without_panicking() {
    for args in [
        &["blast", "--shards", "8", "--k", "2"][..],
        &[
            "blast",
            "--shards",
            "8",
            "--k",
            "2",
            "--tenants",
            "5",
            "--tenants-file",
            "x",
        ],
        &["plan", "--shards", "8", "--tenants", "5"],
        &["migrate", "--from", "shards=8 k=2", "--tenants", "5"],
    ] {
        let output = shuffle_shard().args(args).output().unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty());
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn help_documents_each_analyser() {
    for (command, fragments) in [
        (
            "blast",
            &[
                "--fail",
                "--sweep",
                "--max-sets",
                "--seed",
                "--zone-outage",
                "--capacity",
                "--json",
                "--tenants-file",
                "--tenant-k",
                "Examples:",
                "Capacity lost",
                "nearest-rank percentiles",
                "lower bound",
            ][..],
        ),
        (
            "plan",
            &[
                "--max-degraded",
                "--max-fully-down",
                "--concurrent-failures",
                "--zones",
                "--key-file",
                "Capacity lost",
            ],
        ),
        (
            "migrate",
            &["--from", "--to", "--key", "SPEC", "rendezvous"],
        ),
    ] {
        let (help, _) = run_ok(shuffle_shard().args([command, "--help"]));
        for fragment in fragments {
            assert!(help.contains(fragment), "{command}: missing {fragment:?}");
        }
    }
}

/// Every tenant's subset (sorted), by `place` with the same options as the
/// run.
fn placed_ids(args: &[&str], ids: &[String]) -> Vec<Vec<u64>> {
    let input: String = ids.iter().map(|id| format!("{id}\n")).collect();
    let (stdout, _) = run_ok(shuffle_shard().arg("place").args(args).write_stdin(input));
    stdout
        .lines()
        .map(|line| {
            let mut subset = shards(&serde_json::from_str::<Value>(line).unwrap()["shards"]);
            subset.sort_unstable();
            subset
        })
        .collect()
}

/// Naive poison counts: (fully down, degraded not down) for `crashed`.
fn naive_poison(subsets: &[Vec<u64>], crashed: &[u64]) -> (u64, u64) {
    let inside = subsets
        .iter()
        .filter(|s| s.iter().all(|m| crashed.contains(m)))
        .count() as u64;
    let touched = subsets
        .iter()
        .filter(|s| s.iter().any(|m| crashed.contains(m)))
        .count() as u64;
    (inside, touched - inside)
}

#[test]
fn blast_poison_counts_a_whale_against_a_naive_count() {
    let mut ids = vec!["whale".to_owned()];
    ids.extend((0..300).map(|t| format!("tenant-{t}")));
    let file = temp_file(ids.join("\n").as_bytes());
    let placement = ["--shards", "16", "--k", "2", "--tenant-k", "whale=6"];
    let subsets = placed_ids(&placement, &ids);
    let report = run_json(
        shuffle_shard()
            .arg("blast")
            .args(placement)
            .arg("--tenants-file")
            .arg(file.path())
            .args(["--poison", "whale", "--poison", "tenant-7"])
            .args(["--poison-after", "2", "--poison-sweep", "--poison-top", "3"]),
    );
    assert_eq!(keys(&report), set(&BLAST_FIELDS));
    let whale = &report["poison"][0];
    assert_eq!(whale["tenant"], "whale");
    assert_eq!(whale["k"], 6);
    assert_eq!(whale["in_population"], true);
    assert_eq!(shards(&whale["subset"]), subsets[0]);
    let uncontained = &whale["uncontained"];
    assert_eq!(shards(&uncontained["crashed"]), subsets[0]);
    let (down, degraded) = naive_poison(&subsets, &subsets[0]);
    assert_eq!(uncontained["fully_down"]["count"], down);
    assert_eq!(uncontained["others_fully_down"], down - 1);
    assert_eq!(uncontained["degraded"]["count"], degraded);
    assert!(
        down > 1,
        "300 tenants on 16 shards: some pair sits inside six"
    );

    // Contained: the worst pair of the whale's members, naively.
    let contained = &whale["contained"];
    let mut worst = (0, 0);
    for (i, a) in subsets[0].iter().enumerate() {
        for b in &subsets[0][i + 1..] {
            worst = worst.max(naive_poison(&subsets, &[*a, *b]));
        }
    }
    assert_eq!(
        (
            contained["fully_down"]["count"].as_u64().unwrap(),
            contained["degraded"]["count"].as_u64().unwrap()
        ),
        worst
    );
    assert_eq!(
        contained["others_fully_down"], worst.0,
        "the whale is not inside a pair"
    );
    assert_eq!(shards(&contained["crashed"]).len(), 2);
    assert_eq!(contained["exact"], true);

    // The sweep ranks by the contained figure and lists three.
    let sweep = &report["poison_sweep"];
    assert_eq!(sweep["poison_after"], 2);
    assert_eq!(sweep["tenants"], 301);
    let worst_listed = sweep["worst"].as_array().unwrap();
    assert_eq!(worst_listed.len(), 3);
    let best_naive = subsets
        .iter()
        .map(|subset| {
            if subset.len() <= 2 {
                naive_poison(&subsets, subset)
            } else {
                worst
            }
        })
        .max()
        .unwrap();
    assert_eq!(
        worst_listed[0]["fully_down"]["count"].as_u64().unwrap(),
        best_naive.0
    );
}

#[test]
fn blast_poison_text_and_bad_options() {
    // The poison tenant need not be in the population (nor have a
    // --tenant-k, which only a tenant of the population may have).
    let (stdout, _) = run_ok(shuffle_shard().args([
        "blast",
        "--shards",
        "16",
        "--k",
        "2",
        "--tenants",
        "500",
        "--poison",
        "whale",
        "--poison-after",
        "1",
    ]));
    assert!(stdout.contains("Poison tenants"), "{stdout}");
    assert!(stdout.contains("none: whole subset crashes"), "{stdout}");
    assert!(stdout.contains("at most 1 crash (worst case)"), "{stdout}");
    assert!(
        stdout.contains("whale is not in the population"),
        "{stdout}"
    );
    assert!(!stdout.contains("No failure scenario"), "{stdout}");

    let base = ["blast", "--shards", "8", "--k", "2", "--tenants", "50"];
    let error = assert_one_line_error(shuffle_shard().args(base).args(["--poison-after", "2"]));
    assert!(
        error.contains("--poison TENANT or --poison-sweep"),
        "{error}"
    );
    let error = assert_one_line_error(shuffle_shard().args(base).args([
        "--poison-sweep",
        "--poison-top",
        "0",
    ]));
    assert!(error.contains("--poison-top 0"), "{error}");
    let error = assert_one_line_error(shuffle_shard().args(base).args(["--poison", ""]));
    assert!(error.contains("names no tenant"), "{error}");
}

#[test]
fn plan_warns_when_a_whale_override_breaks_the_fully_down_budget() {
    let mut ids = vec!["whale".to_owned()];
    ids.extend((0..999).map(|t| format!("tenant-{t}")));
    let file = temp_file(ids.join("\n").as_bytes());
    let path = file.path().to_str().unwrap();
    let base = [
        "plan",
        "--shards",
        "16",
        "--tenants-file",
        path,
        "--max-degraded",
        "0.3",
        "--concurrent-failures",
        "2",
    ];
    let (stdout, _) = run_ok(shuffle_shard().args(base).args([
        "--max-fully-down",
        "0.001",
        "--tenant-k",
        "whale=8",
    ]));
    let warning = stdout
        .lines()
        .find(|line| line.starts_with("warning: tenant whale (k = 8 by override)"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(warning.contains("routing.poison_after"), "{warning}");
    let report = run_json(shuffle_shard().args(base).args([
        "--max-fully-down",
        "0.001",
        "--tenant-k",
        "whale=8",
    ]));
    let warnings = report["poison_warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0]["tenant"], "whale");
    assert_eq!(warnings[0]["tenant_k"], 8);
    assert_eq!(warnings[0]["k"], report["recommended"]);
    assert!(warnings[0]["fraction"].as_f64().unwrap() > 0.001);

    // Without the override, or with a budget its poison meets: no warning.
    let (plain, _) = run_ok(
        shuffle_shard()
            .args(base)
            .args(["--max-fully-down", "0.001"]),
    );
    assert!(!plain.contains("warning:"), "{plain}");
    let (loose, _) = run_ok(shuffle_shard().args(base).args([
        "--max-fully-down",
        "0.9",
        "--tenant-k",
        "whale=8",
    ]));
    assert!(!loose.contains("warning:"), "{loose}");
    let error = assert_one_line_error(shuffle_shard().args(base).args([
        "--max-fully-down",
        "0.001",
        "--tenant-k",
        "whale",
    ]));
    assert!(error.contains("no '='"), "{error}");
}

#[test]
fn issue_21_inputs_once_accepted_silently_are_refused() {
    let space = temp_file(b"acme\t2\nglobex 1.5\n");
    let huge = temp_file(b"acme\t1e308\nglobex\t1e308\n");
    let tiny = temp_file(b"acme\t1e-320\nglobex\t1e-320\n");
    let zero = temp_file(b"acme\t0\nglobex\t1\n");
    let path = |file: &tempfile::NamedTempFile| file.path().to_str().unwrap().to_owned();
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec![
                "--tenants".into(),
                "10".into(),
                "--fail".into(),
                "3,3".into(),
            ],
            "listed twice".into(),
        ),
        (
            vec![
                "--tenants".into(),
                "10".into(),
                "--tenant-k".into(),
                "ghost=4".into(),
            ],
            "no tenant \"ghost\"".into(),
        ),
        (
            vec![
                "--tenants".into(),
                "10".into(),
                "--tenant-k".into(),
                "tenant-1=4".into(),
                "--tenant-k".into(),
                "tenant-1=5".into(),
            ],
            "already has --tenant-k tenant-1=4".into(),
        ),
        (
            vec!["--tenants-file".into(), path(&space)],
            "separate them with a TAB".into(),
        ),
        (
            vec!["--tenants-file".into(), path(&huge)],
            "add up to more than".into(),
        ),
        (
            vec!["--tenants-file".into(), path(&tiny)],
            "too small".into(),
        ),
        (
            vec!["--tenants-file".into(), path(&zero)],
            "not a positive number".into(),
        ),
    ];
    for (extra, fragment) in &cases {
        let stderr = assert_one_line_error(
            shuffle_shard()
                .args(["blast", "--shards", "16", "--k", "2"])
                .args(extra),
        );
        assert!(stderr.contains(fragment.as_str()), "{extra:?}: {stderr}");
    }
    // The same checks guard plan and report, which share the options.
    let stderr = assert_one_line_error(shuffle_shard().args([
        "plan",
        "--shards",
        "8",
        "--tenants",
        "10",
        "--max-degraded",
        "0.5",
        "--max-fully-down",
        "0.5",
        "--concurrent-failures",
        "2",
        "--tenant-k",
        "ghost=3",
    ]));
    assert!(stderr.contains("no tenant \"ghost\""), "{stderr}");

    // Huge weights whose sum still fits give a finite CV, the same as at
    // any scale: never NaN with exit 0.
    let big = temp_file(b"acme\t1e300\nglobex\t3e300\ninitech\t2e300\n");
    let small = temp_file(b"acme\t1\nglobex\t3\ninitech\t2\n");
    let cv = |file: &tempfile::NamedTempFile| {
        let report = run_json(
            shuffle_shard()
                .args(["blast", "--shards", "8", "--k", "2", "--tenants-file"])
                .arg(file.path()),
        );
        f64_of(&report["load"]["cv"])
    };
    let (big, small) = (cv(&big), cv(&small));
    assert!(
        big.is_finite() && (big - small).abs() < 1e-9,
        "{big} {small}"
    );
}

#[test]
fn the_overlap_expectation_counts_per_tenant_k_and_any_number_of_zones() {
    // 300 of 1000 tenants with k = 4, the rest k = 2: the expectation must
    // weigh pairs by their sizes and reach 4 shared shards, as measured.
    let mut args: Vec<String> = ["blast", "--shards", "16", "--k", "2", "--tenants", "1000"]
        .map(str::to_owned)
        .to_vec();
    for t in 0..300 {
        args.extend(["--tenant-k".to_owned(), format!("tenant-{t}=4")]);
    }
    let report = run_json(shuffle_shard().args(&args));
    let overlap = &report["pairwise_overlap"];
    let measured: Vec<f64> = overlap["shared_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(f64_of)
        .collect();
    let expected: Vec<f64> = overlap["expected_shared_counts"]
        .as_array()
        .unwrap_or_else(|| panic!("{overlap}"))
        .iter()
        .map(f64_of)
        .collect();
    assert_eq!(expected.len(), 5, "{overlap}");
    for (m, e) in measured.iter().zip(&expected) {
        assert!(
            (m - e).abs() < 0.01,
            "measured {measured:?}, expected {expected:?}"
        );
    }

    // Twelve zones, more than the eight the expectation once stopped at.
    let zones: Vec<String> = (0..12).map(|z| format!("z{z}:3")).collect();
    let report = run_json(shuffle_shard().args([
        "blast",
        "--zones",
        &zones.join(","),
        "--k",
        "3",
        "--tenants",
        "3000",
    ]));
    let overlap = &report["pairwise_overlap"];
    let expected = overlap["expected_shared_counts"]
        .as_array()
        .unwrap_or_else(|| panic!("no expectation for 12 zones: {overlap}"));
    let fraction = f64_of(&overlap["fraction"]);
    assert!(
        (fraction - (1.0 - f64_of(&expected[0]))).abs() < 0.01,
        "{overlap}"
    );
}

#[test]
fn plan_with_weights_recommends_by_traffic_share_as_well() {
    // One whale carrying most of the traffic: by tenant count one failure
    // degrades few tenants, by traffic the whale's shards carry most of it.
    let mut lines = vec!["whale\t1000".to_owned()];
    lines.extend((0..400).map(|t| format!("tenant-{t}\t1")));
    let file = temp_file(lines.join("\n").as_bytes());
    let args = [
        "plan",
        "--shards",
        "16",
        "--max-degraded",
        "0.3",
        "--max-fully-down",
        "0.01",
        "--concurrent-failures",
        "2",
        "--tenants-file",
    ];
    let report = run_json(shuffle_shard().args(args).arg(file.path()));
    let traffic = &report["rows"][0]["traffic"];
    assert!(f64_of(&traffic["degraded_one_failure"]) > 0.7, "{traffic}");
    assert!(report["traffic_verdict"].is_string(), "{report}");
    assert_ne!(
        report["recommended"], report["recommended_by_traffic"],
        "{report}"
    );
    let (text, _) = run_ok(shuffle_shard().args(args).arg(file.path()));
    assert!(
        text.contains("By share of traffic (tenant weights): "),
        "{text}"
    );
    // Unweighted: no traffic figures.
    let plain = run_json(shuffle_shard().args(&args[..9]).args(["--tenants", "400"]));
    assert!(plain["rows"][0]["traffic"].is_null() && plain["traffic_verdict"].is_null());
}
