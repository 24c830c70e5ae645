//! A registry that remembers what was registered in it: prometheus-client
//! lists a family in an exposition only once it has a series, and the
//! alert rules and the dashboard in `deploy/` are checked against every
//! name the gateway may export, fired yet or not.

use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry};

/// The registry being filled, and the sample names of every family in it.
pub(crate) struct Registered {
    pub(crate) registry: Registry,
    prefix: &'static str,
    names: Vec<String>,
}

impl Registered {
    /// An empty registry whose names start with `prefix` and `_`.
    pub(crate) fn with_prefix(prefix: &'static str) -> Self {
        Self {
            registry: Registry::with_prefix(prefix),
            prefix,
            names: Vec::new(),
        }
    }

    /// Registers `metric` as `name` with `help` and hands it back.
    pub(crate) fn add_metric<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        let full = format!("{}_{name}", self.prefix);
        let suffixes: &[&str] = match metric.metric_type() {
            MetricType::Counter => &["_total"],
            MetricType::Info => &["_info"],
            MetricType::Histogram => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        self.names
            .extend(suffixes.iter().map(|suffix| format!("{full}{suffix}")));
        self.registry.register(name, help, metric.clone());
        metric
    }

    /// Registers a new, empty `M` as `name` with `help`.
    pub(crate) fn add<M: Metric + Clone + Default>(&mut self, name: &str, help: &str) -> M {
        self.add_metric(name, help, M::default())
    }

    /// The registry, and every sample name its families may expose.
    pub(crate) fn into_parts(self) -> (Registry, Vec<String>) {
        (self.registry, self.names)
    }
}
