//! Finished spans to an OTLP/HTTP collector, off the request path: the
//! request hands its spans to a queue bounded by a count of spans and
//! returns at once; one task per destination batches them and exports
//! each batch through `opentelemetry-otlp` (protobuf over hyper), within
//! `export_timeout_ms`. A collector that is slow, stalled, refusing,
//! answering errors or absent costs requests nothing: what does not fit
//! the queue is dropped, and what an export fails to deliver is dropped
//! too, each counted in `shuffle_trace_spans_dropped_total{reason}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanExporter as _;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::spans::Finished;
use crate::telemetry::registered::Registered;

/// Where spans go and how (`[tracing]`); the same settings after a reload
/// keep the same export task.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportSettings {
    /// The collector's traces URL (`otlp_endpoint`, with `/v1/traces`
    /// added when it has no path of its own).
    pub endpoint: String,
    /// `service.name` (`service_name`).
    pub service_name: String,
    /// How long one export may take, retries included
    /// (`export_timeout_ms`).
    pub timeout: Duration,
    /// How long a span may wait for a batch to fill (`export_interval_ms`).
    pub interval: Duration,
    /// The most spans held at once, waiting or being sent (`queue_size`).
    pub queue_size: usize,
}

/// The most spans in one export.
const MAX_BATCH: usize = 512;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    /// `queue_full`: more spans were waiting than `queue_size`;
    /// `export_failed`: an export failed or ran past `export_timeout_ms`.
    reason: &'static str,
}

/// `shuffle_trace_*`: what became of finished spans.
#[derive(Debug, Clone)]
pub struct TraceMetrics {
    exported: Counter,
    dropped_queue_full: Counter,
    dropped_export_failed: Counter,
    queued: Gauge,
}

impl TraceMetrics {
    pub(crate) fn register(registry: &mut Registered) -> Self {
        let exported = registry.add(
            "trace_spans_exported",
            "Spans the OTLP collector accepted ([tracing])",
        );
        let dropped = registry.add_metric(
            "trace_spans_dropped",
            "Spans not exported, by reason: queue_full (more than tracing.queue_size were waiting), export_failed (the collector refused, failed or did not answer within tracing.export_timeout_ms)",
            Family::<DropLabels, Counter>::default(),
        );
        let queued = registry.add("trace_spans_queued", "Spans waiting for export now");
        // One at a time: a family's guard from `get_or_create` holds its
        // lock until the statement ends, and a second call in the same
        // statement would wait for it forever.
        let dropped_queue_full = dropped
            .get_or_create(&DropLabels {
                reason: "queue_full",
            })
            .clone();
        let dropped_export_failed = dropped
            .get_or_create(&DropLabels {
                reason: "export_failed",
            })
            .clone();
        Self {
            exported,
            dropped_queue_full,
            dropped_export_failed,
            queued,
        }
    }
}

/// The way to the export task of the current settings.
#[derive(Debug)]
struct Pipe {
    settings: ExportSettings,
    sender: mpsc::UnboundedSender<Finished>,
}

/// Where the request path hands finished spans.
#[derive(Debug)]
pub struct Traces {
    pipe: ArcSwapOption<Pipe>,
    /// Spans handed over and not yet exported (or dropped) by any export
    /// task, the batches being gathered or sent included, an old task's
    /// after a reload too: what `queue_size` bounds.
    queued: Arc<AtomicUsize>,
    /// The export tasks still running (the current one, and any a reload
    /// left draining), each with its export timeout, for
    /// [`Traces::flush`] at shutdown.
    tasks: std::sync::Mutex<Vec<(tokio::task::JoinHandle<()>, Duration)>>,
    metrics: TraceMetrics,
    /// `service.instance.id`: the replica's name.
    instance: String,
}

/// Why spans cannot be exported as configured.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the OTLP exporter for {endpoint}: {reason}; check tracing.otlp_endpoint")]
pub struct ExportSetupError {
    endpoint: String,
    reason: String,
}

impl Traces {
    /// Nowhere yet: [`Self::point_at`] starts the export. `instance`
    /// names this replica in every span's resource.
    pub fn new(metrics: TraceMetrics, instance: String) -> Self {
        Self {
            pipe: ArcSwapOption::empty(),
            queued: Arc::new(AtomicUsize::new(0)),
            tasks: std::sync::Mutex::new(Vec::new()),
            metrics,
            instance,
        }
    }

    /// Exports to `settings` from now on (nowhere for `None`). The same
    /// settings keep the running task; others start a new one, and the
    /// old one sends what it holds and ends. Must run inside the tokio
    /// runtime.
    pub fn point_at(&self, settings: Option<&ExportSettings>) -> Result<(), ExportSetupError> {
        let current = self.pipe.load();
        if current.as_ref().map(|pipe| &pipe.settings) == settings {
            return Ok(());
        }
        let Some(settings) = settings else {
            // The task sends what it holds and ends.
            self.pipe.store(None);
            return Ok(());
        };
        let exporter = exporter(settings, &self.instance)?;
        let (sender, receiver) = mpsc::unbounded_channel();
        let task = Task {
            receiver,
            queued: Arc::clone(&self.queued),
            metrics: self.metrics.clone(),
            timeout: settings.timeout,
            interval: settings.interval,
            scope: InstrumentationScope::builder("shuffle-shard-gateway")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            failing_since: None,
        };
        let handle = tokio::spawn(task.run(exporter));
        self.pipe.store(Some(Arc::new(Pipe {
            settings: settings.clone(),
            sender,
        })));
        // The old task, if any, ends on its own once its queue is empty.
        let mut tasks = self.tasks();
        tasks.retain(|(task, _)| !task.is_finished());
        tasks.push((handle, settings.timeout));
        Ok(())
    }

    /// At shutdown: takes no more spans and waits, at most the longest
    /// export timeout among them, for every export task still running to
    /// send what it holds (requests have finished by then, so their spans
    /// are not lost to a stop).
    pub async fn flush(&self) {
        self.pipe.store(None);
        let tasks = std::mem::take(&mut *self.tasks());
        let grace = tasks
            .iter()
            .map(|(_, timeout)| *timeout)
            .max()
            .unwrap_or_default();
        let all = futures_util::future::join_all(tasks.into_iter().map(|(task, _)| task));
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "the trace exporter did not finish within its export timeout; its last spans are lost"
            );
        }
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, Vec<(tokio::task::JoinHandle<()>, Duration)>> {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands `finished` to the export task, or drops it (counted) when the
    /// queue is full or there is no export. Never waits.
    pub fn offer(&self, finished: Finished) {
        let spans = finished.spans();
        let pipe = self.pipe.load();
        let Some(pipe) = pipe.as_ref() else {
            self.metrics.dropped_export_failed.inc_by(spans as u64);
            return;
        };
        // Reserve the room first, so that racing requests never overfill.
        let before = self.queued.fetch_add(spans, Ordering::Relaxed);
        if before + spans > pipe.settings.queue_size {
            self.queued.fetch_sub(spans, Ordering::Relaxed);
            self.metrics.dropped_queue_full.inc_by(spans as u64);
            return;
        }
        self.metrics.queued.inc_by(spans as i64);
        if let Err(refused) = pipe.sender.send(finished) {
            // The task ended (it never does while its pipe is current).
            self.queued.fetch_sub(spans, Ordering::Relaxed);
            self.metrics.queued.dec_by(spans as i64);
            self.metrics
                .dropped_export_failed
                .inc_by(refused.0.spans() as u64);
        }
    }
}

/// The OTLP/HTTP exporter for `settings`: protobuf bodies, hyper's client,
/// the timeout for the whole export (its retries of a `429`/`503`
/// included), and the resource every span is sent under.
fn exporter(
    settings: &ExportSettings,
    instance: &str,
) -> Result<opentelemetry_otlp::SpanExporter, ExportSetupError> {
    let client = HyperClient::with_default_connector(settings.timeout, None);
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(settings.timeout)
        .build()
        .map_err(|error| ExportSetupError {
            endpoint: settings.endpoint.clone(),
            reason: error.to_string(),
        })?;
    let resource = Resource::builder_empty()
        .with_service_name(settings.service_name.clone())
        .with_attributes([
            KeyValue::new("service.instance.id", instance.to_owned()),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build();
    exporter.set_resource(&resource);
    Ok(exporter)
}

/// The export task of one destination.
struct Task {
    receiver: mpsc::UnboundedReceiver<Finished>,
    queued: Arc<AtomicUsize>,
    metrics: TraceMetrics,
    timeout: Duration,
    interval: Duration,
    scope: InstrumentationScope,
    /// Since when exports have been failing (warned about once).
    failing_since: Option<Instant>,
}

impl Task {
    /// Batches and exports until the pipe is replaced or dropped and what
    /// it had sent is exported.
    async fn run(mut self, exporter: opentelemetry_otlp::SpanExporter) {
        let mut open = true;
        while open {
            // `None` only once the queue is empty and its sender gone.
            let Some(first) = self.receiver.recv().await else {
                return;
            };
            let mut batch = Vec::new();
            let mut spans = self.take(&mut batch, first);
            let flush_at = Instant::now() + self.interval;
            while spans < MAX_BATCH {
                tokio::select! {
                    next = self.receiver.recv() => match next {
                        Some(next) => spans += self.take(&mut batch, next),
                        None => {
                            open = false;
                            break;
                        }
                    },
                    () = tokio::time::sleep_until(flush_at) => break,
                }
            }
            self.export(&exporter, batch, spans).await;
        }
    }

    /// Takes `finished` off the queue into `batch`; returns its spans
    /// (still counted against `queue_size` until exported or dropped).
    fn take(&self, batch: &mut Vec<Finished>, finished: Finished) -> usize {
        let spans = finished.spans();
        batch.push(finished);
        spans
    }

    /// Exports `batch` (`spans` spans), counting what became of them.
    async fn export(
        &mut self,
        exporter: &opentelemetry_otlp::SpanExporter,
        batch: Vec<Finished>,
        spans: usize,
    ) {
        if batch.is_empty() {
            return;
        }
        let data = batch
            .into_iter()
            .flat_map(|finished| finished.into_span_data(&self.scope))
            .collect();
        let result = tokio::time::timeout(self.timeout, exporter.export(data)).await;
        // Sent or given up: room for as many more.
        self.queued.fetch_sub(spans, Ordering::Relaxed);
        self.metrics.queued.dec_by(spans as i64);
        match result {
            Ok(Ok(())) => {
                self.metrics.exported.inc_by(spans as u64);
                if self.failing_since.take().is_some() {
                    tracing::info!("trace export to the OTLP collector works again");
                }
            }
            failed => {
                self.metrics.dropped_export_failed.inc_by(spans as u64);
                if self.failing_since.is_none() {
                    self.failing_since = Some(Instant::now());
                    let reason = match failed {
                        Ok(Err(error)) => error.to_string(),
                        _ => format!("no answer within {} ms", self.timeout.as_millis()),
                    };
                    tracing::warn!(
                        %reason,
                        "trace export to the OTLP collector failed; spans are dropped (shuffle_trace_spans_dropped_total) until it works again"
                    );
                }
            }
        }
    }
}
