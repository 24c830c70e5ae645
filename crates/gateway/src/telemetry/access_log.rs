//! The JSON access log (`logging.access_log = "json"`): one object per
//! request, one line each, written to stderr or to
//! `logging.access_log_file`, which `SIGUSR1` reopens (for logrotate).
//!
//! A record holds what the request path learnt about a request and never
//! a credential: the path without its query (which can carry keys), the
//! tenant's id, never its key or token. It is written when the response
//! ends, so that the bytes sent are known.

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Where JSON access log lines go.
#[derive(Debug)]
pub struct AccessLog {
    sink: Mutex<Sink>,
}

#[derive(Debug)]
enum Sink {
    Stderr,
    File { path: PathBuf, file: File },
}

/// Opens `path` for appending, creating it if needed.
pub fn open_for_append(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
}

impl AccessLog {
    /// Writes to `path` when given (falling back to stderr, with a warning,
    /// if it cannot be opened), else to stderr.
    pub fn new(path: Option<&Path>) -> Self {
        let log = Self {
            sink: Mutex::new(Sink::Stderr),
        };
        if let Err(error) = log.point_at(path) {
            tracing::warn!(%error, "cannot open logging.access_log_file; the access log goes to stderr");
        }
        log
    }

    /// Writes to `path` from now on (stderr for `None`); a file already in
    /// use is kept open as it is. On error the old destination stays.
    pub fn point_at(&self, path: Option<&Path>) -> std::io::Result<()> {
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        match (path, &*sink) {
            (None, _) => *sink = Sink::Stderr,
            (Some(wanted), Sink::File { path, .. }) if wanted == path => {}
            (Some(wanted), _) => {
                let file = open_for_append(wanted)?;
                *sink = Sink::File {
                    path: wanted.to_owned(),
                    file,
                };
            }
        }
        Ok(())
    }

    /// Opens the log file again by its name (after logrotate renamed it);
    /// nothing to do on stderr. On error the old file stays in use.
    pub fn reopen(&self) -> std::io::Result<()> {
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        if let Sink::File { path, file } = &mut *sink {
            *file = open_for_append(path)?;
        }
        Ok(())
    }

    /// Writes `record` as one line, the request having ended at `ended`.
    pub fn write(&self, record: &Record, ended: Instant) {
        let line = record.line(ended);
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        // One write per line: lines from concurrent requests never mix, in
        // a file opened for appending as on stderr. A failed write has
        // nowhere to be reported but the log that failed.
        let _ = match &mut *sink {
            Sink::Stderr => std::io::stderr().lock().write_all(&line),
            Sink::File { file, .. } => file.write_all(&line),
        };
    }
}

/// One request, as the access log shows it.
#[derive(Debug, Clone)]
pub struct Record {
    /// When the request's head had been read (wall clock).
    pub time: SystemTime,
    /// The same moment on the monotonic clock, for the duration.
    pub started: Instant,
    /// The request id (the client's `x-request-id` if valid, else the
    /// gateway's), as sent to the shard.
    pub request_id: String,
    /// The tenant's id, once known.
    pub tenant: Option<String>,
    /// The tenant's cell, once known.
    pub cell: Option<String>,
    /// The shards tried, in order.
    pub shards: Vec<String>,
    /// The response's status.
    pub status: u16,
    /// For a gRPC call, the status its answer's head carried (`unseen` when
    /// it comes in trailers).
    pub grpc_status: Option<&'static str>,
    /// Attempts made.
    pub attempts: usize,
    /// The method.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The client's address.
    pub client: SocketAddr,
    /// Request body bytes received.
    pub bytes_in: u64,
    /// Response body bytes sent.
    pub bytes_out: u64,
    /// The request's trace id, 32 hex digits, when `[tracing]` is on.
    pub trace_id: Option<String>,
}

impl Record {
    /// The record as one JSON line (with its newline), the request having
    /// ended at `ended`.
    pub fn line(&self, ended: Instant) -> Vec<u8> {
        let mut out = Vec::with_capacity(320);
        out.extend_from_slice(b"{\"time\":\"");
        rfc3339(&mut out, self.time);
        out.extend_from_slice(b"\",\"request_id\":");
        string(&mut out, &self.request_id);
        out.extend_from_slice(b",\"tenant\":");
        optional(&mut out, self.tenant.as_deref());
        out.extend_from_slice(b",\"cell\":");
        optional(&mut out, self.cell.as_deref());
        out.extend_from_slice(b",\"shards\":[");
        for (i, shard) in self.shards.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(&mut out, shard);
        }
        out.extend_from_slice(b"],\"status\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.status).as_bytes());
        if let Some(grpc_status) = self.grpc_status {
            out.extend_from_slice(b",\"grpc_status\":");
            string(&mut out, grpc_status);
        }
        out.extend_from_slice(b",\"attempts\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.attempts).as_bytes());
        out.extend_from_slice(b",\"duration\":");
        seconds(&mut out, ended.saturating_duration_since(self.started));
        out.extend_from_slice(b",\"method\":");
        string(&mut out, &self.method);
        out.extend_from_slice(b",\"path\":");
        string(&mut out, &self.path);
        out.extend_from_slice(b",\"client\":");
        string(&mut out, &self.client.to_string());
        out.extend_from_slice(b",\"bytes_in\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.bytes_in).as_bytes());
        out.extend_from_slice(b",\"bytes_out\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.bytes_out).as_bytes());
        if let Some(trace_id) = &self.trace_id {
            out.extend_from_slice(b",\"trace_id\":");
            string(&mut out, trace_id);
        }
        out.extend_from_slice(b"}\n");
        out
    }
}

/// A JSON string, escaped.
fn string(out: &mut Vec<u8>, value: &str) {
    // Writing into a Vec cannot fail, and a &str always serialises.
    let _ = serde_json::to_writer(&mut *out, value);
}

fn optional(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => string(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

/// A duration as seconds rounded to microseconds, written exactly
/// (`0.001234`, never `0.0012339999999999999`).
pub fn seconds(out: &mut Vec<u8>, duration: Duration) {
    let micros = ((duration.as_nanos() + 500) / 1000) as u64;
    let _ = write!(out, "{}.{:06}", micros / 1_000_000, micros % 1_000_000);
}

/// `time` as RFC 3339 in UTC with microseconds:
/// `2026-12-04T14:03:05.123456Z`.
pub fn rfc3339(out: &mut Vec<u8>, time: SystemTime) {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let t = text::UtcTime::from_unix(since.as_secs());
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year,
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        since.subsec_micros()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_microseconds() {
        let mut out = Vec::new();
        // 2026-12-04T14:03:05.123456Z
        rfc3339(
            &mut out,
            UNIX_EPOCH + Duration::new(1_796_392_985, 123_456_789),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2026-12-04T14:03:05.123456Z"
        );
    }

    #[test]
    fn durations_are_rounded_to_microseconds_and_written_exactly() {
        for (duration, written) in [
            (Duration::from_nanos(3_022_459_999), "3.022460"),
            (Duration::from_nanos(1_234_400), "0.001234"),
            (Duration::from_nanos(499), "0.000000"),
            (Duration::from_nanos(500), "0.000001"),
            (Duration::ZERO, "0.000000"),
            (Duration::from_secs(61), "61.000000"),
        ] {
            let mut out = Vec::new();
            seconds(&mut out, duration);
            assert_eq!(String::from_utf8(out).unwrap(), written);
        }
    }
}
