//! Recipe 12.1 compatibility: every line of the vectors produced by the
//! chapter's Python must be reproduced bit for bit by `HmacModulo`, by a
//! `Placer` built on it, and by the slow reference (which is how we know the
//! reference that the property tests trust is itself right).

use std::collections::HashMap;

use placement::{
    Algorithm, Fleet, HmacModulo, PlacementConfig, PlacementKey, Placer, RECIPE_DEFAULT_KEY,
};
use serde::Deserialize;

use crate::reference;

/// The vectors, compiled into the test binary so the test cannot run against
/// a missing or half-written file.
const VECTORS: &str = include_str!("data/recipe-12-1.jsonl");

/// The number of lines the vector file holds (see `data/README.md`). Counting
/// them guards against a truncated file passing by checking less.
const VECTOR_COUNT: usize = 3000;

#[derive(Debug, Deserialize)]
struct Vector {
    key_hex: String,
    tenant: String,
    n: u32,
    k: u32,
    shards: Vec<u32>,
}

impl Vector {
    fn key(&self, line: usize) -> PlacementKey {
        PlacementKey::from_hex(&self.key_hex)
            .unwrap_or_else(|error| panic!("vector line {line}: bad key_hex: {error}"))
    }
}

/// Every vector with its 1-based line number, for assertion messages.
fn vectors() -> Vec<(usize, Vector)> {
    VECTORS
        .lines()
        .enumerate()
        .map(|(index, text)| {
            let line = index + 1;
            let vector = serde_json::from_str(text)
                .unwrap_or_else(|error| panic!("vector line {line} is not valid JSON: {error}"));
            (line, vector)
        })
        .collect()
}

#[test]
fn hmac_modulo_reproduces_every_vector() {
    // One buffer for all lines: `place_into` must clear what the previous
    // line left in it.
    let mut out = Vec::new();
    let mut checked = 0;
    for (line, vector) in vectors() {
        let recipe = HmacModulo::new(&vector.key(line), vector.n)
            .unwrap_or_else(|error| panic!("vector line {line}: {error}"));
        let placed = recipe
            .place(&vector.tenant, vector.k)
            .unwrap_or_else(|error| panic!("vector line {line}: {error}"));
        assert_eq!(
            placed, vector.shards,
            "vector line {line}: tenant {:?}, n = {}, k = {}",
            vector.tenant, vector.n, vector.k
        );
        recipe
            .place_into(&vector.tenant, vector.k, &mut out)
            .unwrap_or_else(|error| panic!("vector line {line}: {error}"));
        assert_eq!(out, vector.shards, "vector line {line}: place_into");
        checked += 1;
    }
    assert_eq!(checked, VECTOR_COUNT, "vector lines checked");
}

#[test]
fn reference_reproduces_every_vector() {
    // The property tests compare `HmacModulo` with the reference on inputs
    // no vector covers; this is what entitles the reference to be the judge.
    let mut checked = 0;
    for (line, vector) in vectors() {
        let key = hex_bytes(&vector.key_hex);
        let placed = reference::recipe_12_1(&vector.tenant, vector.n, vector.k, &key);
        assert_eq!(placed, vector.shards, "vector line {line}: reference");
        checked += 1;
    }
    assert_eq!(checked, VECTOR_COUNT, "vector lines checked");
}

#[test]
fn placer_with_hmac_modulo_reproduces_sampled_vectors() {
    // Fleets are built once per n and cloned per line; the largest fleets
    // (a million shards) are left to the direct `HmacModulo` test above,
    // because a `Placer` adds nothing there that depends on n.
    const MAX_N: u32 = 65_537;
    let mut fleets: HashMap<u32, Fleet> = HashMap::new();
    let mut checked = 0;
    for (line, vector) in vectors().into_iter().step_by(7) {
        if vector.n > MAX_N {
            continue;
        }
        let fleet = fleets
            .entry(vector.n)
            .or_insert_with(|| Fleet::uniform(vector.n).unwrap())
            .clone();
        let config = PlacementConfig {
            algorithm: Algorithm::HmacModulo,
            k: vector.k,
            zone_aware: false,
        };
        let placer = Placer::new(fleet, &vector.key(line), config)
            .unwrap_or_else(|error| panic!("vector line {line}: {error}"));
        assert_eq!(
            placer.subset(&vector.tenant),
            vector.shards,
            "vector line {line}: Placer"
        );
        // `Fleet::uniform` names shard i "i", so the ids are the indices.
        let expected_ids: Vec<String> = vector.shards.iter().map(u32::to_string).collect();
        assert_eq!(
            placer.subset_ids(&vector.tenant),
            expected_ids,
            "vector line {line}: Placer ids"
        );
        checked += 1;
    }
    // Roughly one line in seven survives the sampling and the size cap.
    assert!(checked > 350, "only {checked} vector lines sampled");
}

#[test]
fn the_default_key_lines_use_the_recipe_default() {
    // The recipe's default key appears in the vectors as hex; parsing it must
    // give a key that `is_recipe_default` recognises (a gateway refuses such
    // keys), and `PlacementKey::recipe_default()` must place identically.
    let default_hex: String = RECIPE_DEFAULT_KEY
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let recipe_default = PlacementKey::recipe_default();
    let mut checked = 0;
    for (line, vector) in vectors() {
        let key = vector.key(line);
        assert_eq!(
            key.is_recipe_default(),
            vector.key_hex == default_hex,
            "vector line {line}"
        );
        if key.is_recipe_default() {
            let placed = HmacModulo::new(&recipe_default, vector.n)
                .unwrap()
                .place(&vector.tenant, vector.k)
                .unwrap();
            assert_eq!(placed, vector.shards, "vector line {line}");
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} lines use the default key");
}

#[test]
fn the_vectors_cover_the_cases_that_matter() {
    // If the file were ever replaced by a thinner one, the tests above would
    // still pass while checking much less. These are the cases the fast path
    // handles differently from the plain recipe, or that the recipe's
    // encoding makes interesting.
    let all = vectors();
    let has = |what: &str, predicate: &dyn Fn(&Vector) -> bool| {
        assert!(
            all.iter().any(|(_, vector)| predicate(vector)),
            "no vector with {what}"
        );
    };
    has("the empty key", &|v| v.key_hex.is_empty());
    has("a key longer than the 64-byte HMAC block", &|v| {
        v.key_hex.len() > 128
    });
    has("n = 1", &|v| v.n == 1);
    has("n above a million", &|v| v.n > 1_000_000);
    has("n not a power of two", &|v| !v.n.is_power_of_two());
    has("k above the linear-scan limit of 32", &|v| v.k > 32);
    has("k = n", &|v| v.k == v.n);
    has("the empty tenant", &|v| v.tenant.is_empty());
    has("a tenant with a NUL byte", &|v| v.tenant.contains('\0'));
    has("a non-ASCII tenant", &|v| !v.tenant.is_ascii());
    has("a 1,000-character tenant", &|v| {
        v.tenant.chars().count() >= 1000
    });
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "whole bytes");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digit"))
        .collect()
}
