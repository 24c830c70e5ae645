//! The gateway's integration tests: real sockets on 127.0.0.1, real
//! backends (the misbehaving test backend), one test binary.

mod pki;
mod util;

mod admin;
mod adversarial;
mod boundary;
mod connection;
mod containment;
mod dashboards;
mod deploy;
mod discovery;
mod discovery_kube;
mod dns_resolver;
mod fleet;
mod grpc;
mod h2_shards;
mod h2_timers;
mod http2;
mod isolation;
mod kube_discovery;
mod limits;
mod logs;
mod lookback;
mod metrics;
mod reload;
mod replicas;
mod rolling;
mod routing;
mod second_look;
mod status_page;
mod tenant_store;
mod tenant_sync;
mod tls;
mod tracing;
mod transport;
mod upstream;
mod upstream_tls;
mod websocket;
mod wire;
