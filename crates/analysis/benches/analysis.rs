//! Criterion benchmarks for the analyser's speed targets, each a whole run
//! from placing the population to the answer:
//!
//! - exact overlap plus every single-shard failure, 1,000,000 tenants,
//!   n = 1000, k = 4: target ≤ 3 s;
//! - all 2,016 double failures, n = 64, k = 3, 1,000,000 tenants: ≤ 3 s.
//!
//! The Python Recipe 12.2 comparison lives in `bench/` (it needs Python).

use std::hint::black_box;
use std::time::Duration;

use analysis::{BlastModel, Placements, Population, overlap};
use criterion::{Criterion, criterion_group, criterion_main};
use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey, Placer};

const TENANTS: usize = 1_000_000;

fn placer(n: u32, k: u32) -> Placer {
    let config = PlacementConfig {
        algorithm: Algorithm::HmacModulo,
        k,
        zone_aware: false,
    };
    Placer::new(
        Fleet::uniform(n).unwrap(),
        &PlacementKey::from_bytes(b"bench".to_vec()),
        config,
    )
    .unwrap()
}

fn targets(c: &mut Criterion) {
    let population = Population::synthetic(TENANTS);
    let mut group = c.benchmark_group("analysis 1M tenants");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));

    let wide = placer(1000, 4);
    group.bench_function("overlap + every single failure, n=1000 k=4", |b| {
        b.iter(|| {
            let placements = Placements::compute(&wide, &population);
            let model = BlastModel::new(&placements).unwrap();
            black_box(overlap::exact(&model));
            black_box(model.sweep(1, u64::MAX, 0, &|_, _| {}).unwrap());
        })
    });

    let narrow = placer(64, 3);
    group.bench_function("all 2016 double failures, n=64 k=3", |b| {
        b.iter(|| {
            let placements = Placements::compute(&narrow, &population);
            let model = BlastModel::new(&placements).unwrap();
            black_box(model.sweep(2, u64::MAX, 0, &|_, _| {}).unwrap());
        })
    });

    // The placement step alone, to show where the time goes.
    group.bench_function("placement only, n=1000 k=4", |b| {
        b.iter(|| black_box(Placements::compute(&wide, &population)))
    });
    group.finish();
}

criterion_group!(benches, targets);
criterion_main!(benches);
