//! Test support shared by several crates' integration tests.
//!
//! Integration tests of two crates cannot share a module, so what more than
//! one of them needs lives here: running headless Chromium, reading JSON
//! answers, a `redis-server`, a PostgreSQL server and a `dnsmasq` of a
//! test's own, a DNS server that misbehaves on purpose, a fake Kubernetes
//! API server, an OTLP/HTTP trace receiver (`otlp`), and skipping (or, in
//! CI, failing) a test whose system tool is missing. (Writing a gateway configuration is `gateway::config::writer`,
//! which the demo uses too.)

pub mod browser;
pub mod dns_fault;
pub mod dnsmasq;
pub mod json;
pub mod kube_api;
pub mod otlp;
pub mod postgres;
pub mod redis;
pub mod skip;
