//! Golden file for the placements this crate defines itself (rendezvous,
//! weighted rendezvous, both zone-aware variants): any change to them remaps
//! tenants in production, so it must be deliberate and announced as a
//! migration. See `data/README.md` for the cases.

use std::fs;

use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer, Shard};
use serde::{Deserialize, Serialize};

use crate::util;

/// Read at run time rather than compiled in, so that regenerating the file
/// and checking it work in one build.
const GOLDEN_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/golden-rendezvous.jsonl"
);

/// 500 + 5 + 200 + 200 + 200 lines (see `cases`). Checked against the file,
/// so that an empty or truncated file cannot pass.
const EXPECTED_LINES: usize = 1105;

const REGENERATE: &str = "UPDATE_GOLDEN=1 cargo test -p shuffle-shard-placement golden";

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Line {
    case: String,
    tenant: String,
    ids: Vec<String>,
}

fn placer(fleet: Fleet, algorithm: Algorithm, k: u32, zone_aware: bool) -> Placer {
    let key = PlacementKey::from_bytes(b"shuffle-shard golden key v1".to_vec());
    let config = PlacementConfig {
        algorithm,
        k,
        zone_aware,
    };
    Placer::new(fleet, &key, config).unwrap()
}

/// `shard-a` … `shard-z`, `shard-aa` … : ids that sort and read unlike
/// indices, so the file shows plainly that placement is by id.
fn letter_id(i: usize) -> String {
    let letter = |j: usize| char::from(b'a' + j as u8);
    match i {
        0..26 => format!("shard-{}", letter(i)),
        _ => format!("shard-{}{}", letter(i / 26 - 1), letter(i % 26)),
    }
}

/// Tenants whose encoding must stay fixed: the empty id, text outside ASCII,
/// an emoji, an embedded NUL and a long id.
fn special_tenants() -> Vec<String> {
    vec![
        String::new(),
        "ünïcødé-テナント".to_owned(),
        "🙂emoji".to_owned(),
        "with\0nul".to_owned(),
        "x".repeat(1000),
    ]
}

/// Every case of the golden file: a name, a placer and its tenants.
fn cases() -> Vec<(&'static str, Placer, Vec<String>)> {
    let weighted = Fleet::new(
        (0..32)
            .map(|i| Shard::new(letter_id(i)).with_weight([1.0, 2.0, 0.5][i % 3]))
            .collect(),
    )
    .unwrap();
    let zoned = || Fleet::from_zone_spec("a:6,b:5,c:5").unwrap();
    let uniform = || Fleet::uniform(64).unwrap();
    vec![
        (
            "uniform-64",
            placer(uniform(), Algorithm::Rendezvous, 3, false),
            util::tenants(500),
        ),
        (
            "special-tenants",
            placer(uniform(), Algorithm::Rendezvous, 3, false),
            special_tenants(),
        ),
        (
            "weighted-32",
            placer(weighted, Algorithm::Rendezvous, 3, false),
            util::tenants(200),
        ),
        (
            "zones-rendezvous",
            placer(zoned(), Algorithm::Rendezvous, 4, true),
            util::tenants(200),
        ),
        (
            "zones-hmac-modulo",
            placer(zoned(), Algorithm::HmacModulo, 4, true),
            util::tenants(200),
        ),
    ]
}

fn generate() -> Vec<Line> {
    let mut lines = Vec::new();
    for (case, placer, tenants) in cases() {
        for tenant in tenants {
            let ids = placer
                .subset_ids(&tenant)
                .into_iter()
                .map(str::to_owned)
                .collect();
            lines.push(Line {
                case: case.to_owned(),
                tenant,
                ids,
            });
        }
    }
    lines
}

#[test]
fn placements_match_the_golden_file() {
    let fresh = generate();
    assert_eq!(fresh.len(), EXPECTED_LINES, "the generator's line count");

    if std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1") {
        let mut text = String::new();
        for line in &fresh {
            text.push_str(&serde_json::to_string(line).unwrap());
            text.push('\n');
        }
        fs::write(GOLDEN_PATH, text).unwrap();
        eprintln!("rewrote {GOLDEN_PATH}: call this out as a migration");
        return;
    }

    let text = fs::read_to_string(GOLDEN_PATH)
        .unwrap_or_else(|error| panic!("cannot read {GOLDEN_PATH}: {error}; run {REGENERATE}"));
    let stored: Vec<Line> = text
        .lines()
        .enumerate()
        .map(|(index, line)| {
            serde_json::from_str(line).unwrap_or_else(|error| {
                panic!("golden file line {} is not valid: {error}", index + 1)
            })
        })
        .collect();
    assert_eq!(
        stored.len(),
        EXPECTED_LINES,
        "the golden file has {} lines, expected {EXPECTED_LINES}; run {REGENERATE}",
        stored.len()
    );
    for (number, (stored, fresh)) in stored.iter().zip(&fresh).enumerate() {
        assert_eq!(
            (&stored.case, &stored.tenant),
            (&fresh.case, &fresh.tenant),
            "golden file line {} is out of step with the generator; run {REGENERATE}",
            number + 1
        );
        assert_eq!(
            stored.ids, fresh.ids,
            "placement changed for case {} tenant {:?}: this remaps tenants in production; \
             if intended, regenerate with {REGENERATE} and call it out as a migration",
            fresh.case, fresh.tenant
        );
    }
}

#[test]
fn letter_ids_are_what_the_data_readme_says() {
    // The weighted case relies on these ids; they must stay what the data
    // README says they are.
    let ids: Vec<String> = (0..32).map(letter_id).collect();
    assert_eq!(ids[0], "shard-a");
    assert_eq!(ids[25], "shard-z");
    assert_eq!(ids[26], "shard-aa");
    assert_eq!(ids[31], "shard-af");
}
