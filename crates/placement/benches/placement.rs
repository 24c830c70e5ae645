//! Criterion benchmarks for placement: ns per tenant for each algorithm, side
//! by side with the naive "key the HMAC on every call" version of Recipe 12.1
//! that a straightforward port would write.
//!
//! Targets on the 2-core reference machine: hmac-modulo n=64, k=3 at or below
//! 130 ns per tenant; rendezvous n=1024, k=3 at or below 3 µs.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hmac::{Hmac, KeyInit, Mac};
use placement::{Fleet, HmacModulo, PlacementKey, Rendezvous, ZoneAware};
use sha2::Sha256;

const TENANTS: usize = 1024;
const KEY: &[u8] = b"benchmark key, not a secret";

fn tenants() -> Vec<String> {
    (0..TENANTS).map(|i| format!("tenant-{i}")).collect()
}

/// Recipe 12.1 as a direct port would write it: a fresh HMAC key schedule for
/// every digest and a fresh output vector per tenant.
fn naive_recipe(key: &[u8], tenant: &str, n: u32, k: usize) -> Vec<u32> {
    let accept_below = ((1u128 << 64) / u128::from(n)) * u128::from(n);
    let mut chosen = Vec::with_capacity(k);
    let mut counter = 0u64;
    while chosen.len() < k {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
        mac.update(tenant.as_bytes());
        mac.update(&[0]);
        mac.update(&counter.to_be_bytes());
        let digest = mac.finalize().into_bytes();
        counter += 1;
        for word in digest.chunks_exact(8) {
            let word = u64::from_be_bytes(word.try_into().unwrap());
            if u128::from(word) >= accept_below {
                continue;
            }
            let index = (word % u64::from(n)) as u32;
            if !chosen.contains(&index) {
                chosen.push(index);
                if chosen.len() == k {
                    break;
                }
            }
        }
    }
    chosen
}

/// A named way of placing one tenant.
type Case<'a> = (&'static str, Box<dyn Fn(&str) + 'a>);

/// Runs every case once per tenant and reports time per tenant.
fn per_tenant(c: &mut Criterion, group: &str, cases: Vec<Case<'_>>) {
    let tenants = tenants();
    let mut group = c.benchmark_group(group);
    group.throughput(Throughput::Elements(TENANTS as u64));
    for (name, place) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| {
                for tenant in &tenants {
                    place(black_box(tenant));
                }
            })
        });
    }
    group.finish();
}

fn hmac_modulo(c: &mut Criterion) {
    let key = PlacementKey::from_bytes(KEY);
    let recipe = HmacModulo::new(&key, 64).unwrap();
    let buffer = std::cell::RefCell::new(Vec::with_capacity(3));
    per_tenant(
        c,
        "hmac-modulo n=64 k=3",
        vec![
            (
                "place_into (reused buffer)",
                Box::new(|t| {
                    recipe.place_into(t, 3, &mut buffer.borrow_mut()).unwrap();
                    black_box(&buffer);
                }),
            ),
            (
                "place (allocates)",
                Box::new(|t| {
                    black_box(recipe.place(t, 3).unwrap());
                }),
            ),
            (
                "naive port (keys HMAC per digest)",
                Box::new(|t| {
                    black_box(naive_recipe(KEY, t, 64, 3));
                }),
            ),
        ],
    );
}

fn rendezvous(c: &mut Criterion) {
    let key = PlacementKey::from_bytes(KEY);
    let fleet = Fleet::uniform(1024).unwrap();
    let hrw = Rendezvous::new(&key, &fleet);
    let recipe = HmacModulo::new(&key, 1024).unwrap();
    let zoned_fleet = Fleet::from_zone_spec("a:342,b:341,c:341").unwrap();
    let zoned = ZoneAware::rendezvous(&key, &zoned_fleet).unwrap();
    let buffer = std::cell::RefCell::new(Vec::with_capacity(3));
    per_tenant(
        c,
        "n=1024 k=3",
        vec![
            (
                "rendezvous",
                Box::new(|t| {
                    hrw.place_into(t, 3, &mut buffer.borrow_mut()).unwrap();
                    black_box(&buffer);
                }),
            ),
            (
                "zone-aware rendezvous, 3 zones",
                Box::new(|t| {
                    zoned.place_into(t, 3, &mut buffer.borrow_mut()).unwrap();
                    black_box(&buffer);
                }),
            ),
            (
                "hmac-modulo",
                Box::new(|t| {
                    recipe.place_into(t, 3, &mut buffer.borrow_mut()).unwrap();
                    black_box(&buffer);
                }),
            ),
        ],
    );
}

criterion_group!(benches, hmac_modulo, rendezvous);
criterion_main!(benches);
