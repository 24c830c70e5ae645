//! `[logging]`: the access log's format and file.

use std::path::PathBuf;

use serde::Deserialize;

use super::check::KeyProblem;

/// `logging.access_log`: one record per request, or none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AccessLog {
    /// No access log (`false`, the default).
    #[default]
    Off,
    /// One `info` event per request through `tracing` (`"text"`, or `true`).
    Text,
    /// One JSON object per line (`"json"`), to stderr or
    /// `logging.access_log_file`.
    Json,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLogging {
    access_log: Option<RawAccessLog>,
    access_log_file: Option<String>,
}

/// `logging.access_log` as written: `true`/`false` (from before it had
/// formats) or a format's name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawAccessLog {
    Switch(bool),
    Format(String),
}

/// `[logging]`: the access log's format, and its file (JSON only; opened
/// here, created if need be, so that a path nobody can write is refused at
/// load, `serve --check` included, rather than lost at the first request).
pub(super) fn logging_settings(
    l: RawLogging,
    resolve: &impl Fn(&str) -> PathBuf,
) -> Result<(AccessLog, Option<PathBuf>), KeyProblem> {
    let access_log = match l.access_log {
        None | Some(RawAccessLog::Switch(false)) => AccessLog::Off,
        Some(RawAccessLog::Switch(true)) => AccessLog::Text,
        Some(RawAccessLog::Format(format)) => match format.as_str() {
            "off" => AccessLog::Off,
            "text" => AccessLog::Text,
            "json" => AccessLog::Json,
            other => {
                return Err((
                    "logging.access_log",
                    format!("unknown format {other:?}; use \"json\", \"text\" or false"),
                ));
            }
        },
    };
    let Some(file) = l.access_log_file else {
        return Ok((access_log, None));
    };
    if access_log != AccessLog::Json {
        return Err((
            "logging.access_log_file",
            "is for the JSON access log; set logging.access_log = \"json\", or remove access_log_file (the text log goes to stderr with the other logs)".into(),
        ));
    }
    let file = resolve(&file);
    crate::telemetry::access_log::open_for_append(&file).map_err(|e| {
        (
            "logging.access_log_file",
            format!(
                "cannot open {} for appending: {e}; create its directory or let the gateway's user write there",
                file.display()
            ),
        )
    })?;
    Ok((access_log, Some(file)))
}
