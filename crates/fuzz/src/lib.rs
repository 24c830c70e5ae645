//! Fuzz targets for every parser that reads untrusted input.
//!
//! The targets live in `tests/fuzz.rs` and run under `cargo test` as
//! property tests: each target first replays every file of its corpus in
//! `fuzz/corpus/<target>/` (inputs that once found a bug, and realistic
//! seeds), then feeds mutations of the corpus and arbitrary input for a
//! bounded number of cases (`FUZZ_CASES`, default 20,000 per target; the
//! fast-path target draws as many again from a generator of raw request
//! heads, which byte mutations rarely keep well-formed), so CI spends about
//! a minute in all. The property is always the same: the parser returns a
//! value or a typed error, and never panics; some targets check an
//! invariant of the result too. Cargo-fuzz would need a nightly toolchain,
//! which this project's machines do not have.
