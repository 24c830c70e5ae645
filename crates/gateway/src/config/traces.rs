//! `[tracing]`: OpenTelemetry traces exported over OTLP/HTTP, and whether
//! a client's W3C trace context is believed.

use std::time::Duration;

use serde::Deserialize;

use super::check::{KeyProblem, millis, within};
use crate::telemetry::traces::{ExportSettings, TraceSettings};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTracing {
    otlp_endpoint: Option<String>,
    sample_ratio: Option<f64>,
    service_name: Option<String>,
    trust_incoming: Option<bool>,
    export_timeout_ms: Option<u64>,
    export_interval_ms: Option<u64>,
    queue_size: Option<u64>,
}

/// The longest `service_name`.
const MAX_SERVICE_NAME: usize = 256;

/// `[tracing]`, when the table is present (`None`: no tracing, and the
/// request path skips it with one branch).
pub(super) fn tracing_settings(t: Option<RawTracing>) -> Result<Option<TraceSettings>, KeyProblem> {
    let Some(t) = t else {
        return Ok(None);
    };
    let Some(endpoint) = t.otlp_endpoint else {
        return Err((
            "tracing.otlp_endpoint",
            "[tracing] needs otlp_endpoint = \"http://HOST:4318\" (an OpenTelemetry collector's OTLP/HTTP port); remove [tracing] to turn tracing off".to_owned(),
        ));
    };
    let endpoint = traces_url(&endpoint).map_err(|problem| ("tracing.otlp_endpoint", problem))?;
    let sample_ratio = within(
        "tracing.sample_ratio",
        t.sample_ratio.unwrap_or(0.01),
        0.0..=1.0,
    )
    .map_err(|(key, problem)| {
        (
            key,
            format!("{problem} (the share of requests traced: 0.01 is one in a hundred)"),
        )
    })?;
    let service_name = t
        .service_name
        .unwrap_or_else(|| "shuffle-shard-gateway".to_owned());
    if service_name.is_empty()
        || service_name.len() > MAX_SERVICE_NAME
        || service_name.chars().any(char::is_control)
    {
        return Err((
            "tracing.service_name",
            format!(
                "must be 1 to {MAX_SERVICE_NAME} characters without control characters, e.g. \"edge-gateway\""
            ),
        ));
    }
    let timeout = millis(
        "tracing.export_timeout_ms",
        t.export_timeout_ms,
        10_000,
        10..=120_000,
    )?;
    let interval = millis(
        "tracing.export_interval_ms",
        t.export_interval_ms,
        1_000,
        10..=60_000,
    )?;
    // A request has at least two spans: a queue of a few would drop
    // nearly everything while looking configured.
    let queue_size = within(
        "tracing.queue_size",
        t.queue_size.unwrap_or(2_048),
        16..=1_000_000,
    )?;
    Ok(Some(TraceSettings {
        sample_ratio,
        trust_incoming: t.trust_incoming.unwrap_or(false),
        export: ExportSettings {
            endpoint,
            service_name,
            timeout,
            interval: interval.min(Duration::from_secs(60)),
            queue_size: queue_size as usize,
        },
    }))
}

/// The URL spans are posted to: `otlp_endpoint` with `/v1/traces` when
/// it names no path (`http://collector:4318`), else as written (a
/// collector behind a path of its own). Only `http://`: the exporter has
/// no TLS of its own, so a collector is reached on a trusted network or
/// through a local agent.
fn traces_url(endpoint: &str) -> Result<String, String> {
    let uri: http::Uri = endpoint.parse().map_err(|_| {
        format!(
            "{endpoint:?} is not a URL; write \"http://HOST:PORT\", e.g. \"http://127.0.0.1:4318\""
        )
    })?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(
                "https:// is not supported: the exporter speaks plain OTLP/HTTP; run an OpenTelemetry collector (or agent) beside the gateway and point otlp_endpoint at it, e.g. \"http://127.0.0.1:4318\"".to_owned(),
            );
        }
        _ => {
            return Err(format!(
                "{endpoint:?} has no http:// scheme; write \"http://HOST:PORT\", e.g. \"http://127.0.0.1:4318\""
            ));
        }
    }
    let Some(authority) = uri.authority() else {
        return Err(format!(
            "{endpoint:?} names no host; write \"http://HOST:PORT\""
        ));
    };
    if authority.as_str().contains('@') {
        // A password in the URL would be written wherever the endpoint is.
        return Err(
            "must not carry credentials (user:password@); reach the collector on a trusted network, or through a local agent".to_owned(),
        );
    }
    if uri.query().is_some() {
        return Err(format!(
            "{endpoint:?} has a query; write \"http://HOST:PORT\" or \"http://HOST:PORT/PATH\""
        ));
    }
    let path = uri.path();
    Ok(if path.is_empty() || path == "/" {
        format!("http://{authority}/v1/traces")
    } else {
        format!("http://{authority}{path}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(endpoint: &str) -> RawTracing {
        RawTracing {
            otlp_endpoint: Some(endpoint.to_owned()),
            ..RawTracing::default()
        }
    }

    #[test]
    fn defaults_and_the_traces_path() {
        let settings = tracing_settings(Some(raw("http://collector:4318")))
            .unwrap()
            .unwrap();
        assert_eq!(settings.export.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(settings.sample_ratio, 0.01);
        assert!(!settings.trust_incoming);
        assert_eq!(settings.export.service_name, "shuffle-shard-gateway");
        assert_eq!(settings.export.timeout, Duration::from_secs(10));
        assert_eq!(settings.export.queue_size, 2_048);
        let own_path = tracing_settings(Some(raw("http://collector:4318/otlp/v1/traces")))
            .unwrap()
            .unwrap();
        assert_eq!(
            own_path.export.endpoint,
            "http://collector:4318/otlp/v1/traces"
        );
        assert_eq!(tracing_settings(None).unwrap(), None);
    }

    #[test]
    fn bad_settings_are_refused_with_what_to_write() {
        let cases: [(RawTracing, &str, &str); 7] = [
            (
                RawTracing::default(),
                "tracing.otlp_endpoint",
                "needs otlp_endpoint",
            ),
            (
                raw("https://collector:4318"),
                "tracing.otlp_endpoint",
                "run an OpenTelemetry collector",
            ),
            (raw("collector:4318"), "tracing.otlp_endpoint", "http://"),
            (
                raw("http://user:secret@collector:4318"),
                "tracing.otlp_endpoint",
                "credentials",
            ),
            (
                RawTracing {
                    sample_ratio: Some(1.5),
                    ..raw("http://c:4318")
                },
                "tracing.sample_ratio",
                "one in a hundred",
            ),
            (
                RawTracing {
                    queue_size: Some(8),
                    ..raw("http://c:4318")
                },
                "tracing.queue_size",
                "",
            ),
            (
                RawTracing {
                    service_name: Some(String::new()),
                    ..raw("http://c:4318")
                },
                "tracing.service_name",
                "edge-gateway",
            ),
        ];
        for (raw, key, says) in cases {
            let (got, problem) = tracing_settings(Some(raw)).unwrap_err();
            assert_eq!(got, key);
            assert!(problem.contains(says), "{problem}");
            assert!(!problem.contains("secret"), "{problem}");
        }
    }
}
