//! Output on stdout (JSON lines, whole JSON documents and text) that ends
//! quietly when the reader goes away.
//!
//! A command piped into `head -1` must not panic or report an error when
//! `head` exits: that is the reader saying it has seen enough. Rust ignores
//! `SIGPIPE`, so the write fails with `BrokenPipe` instead, and this module
//! turns that into [`Flow::Stop`] for the caller to end with success.

use std::fmt;
use std::io::{self, BufWriter, StdoutLock, Write};

use anyhow::Context;
use serde::Serialize;

/// Whether the caller should keep producing output.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// The line was written (or buffered); go on.
    Continue,
    /// The reader closed stdout; stop and exit successfully.
    Stop,
}

/// Marks an error as a failure to write the output, as opposed to bad
/// input, so that `main` can choose the exit status.
#[derive(Debug)]
pub struct OutputFailed;

impl fmt::Display for OutputFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cannot write to stdout")
    }
}

/// Writes one JSON value per line through a reused line buffer.
pub struct JsonLines<W: Write> {
    out: W,
    line: Vec<u8>,
}

impl JsonLines<BufWriter<StdoutLock<'static>>> {
    /// Buffered, locked stdout: one lock and few system calls for millions
    /// of lines.
    pub fn stdout() -> Self {
        Self {
            out: BufWriter::with_capacity(64 * 1024, io::stdout().lock()),
            line: Vec::with_capacity(256),
        }
    }
}

impl<W: Write> JsonLines<W> {
    /// Writes `value` as one line of JSON.
    pub fn write<T: Serialize>(&mut self, value: &T) -> anyhow::Result<Flow> {
        self.line.clear();
        // Serialising into a Vec separates encoding errors (impossible for
        // the plain structs written here) from I/O errors, which need the
        // broken-pipe check below.
        serde_json::to_writer(&mut self.line, value).context("cannot encode output as JSON")?;
        self.line.push(b'\n');
        check(self.out.write_all(&self.line))
    }

    /// Flushes buffered lines to stdout.
    pub fn flush(&mut self) -> anyhow::Result<Flow> {
        check(self.out.flush())
    }
}

/// Writes a whole document, such as a rendered table, to stdout.
pub fn print_text(text: &str) -> anyhow::Result<Flow> {
    let mut out = io::stdout().lock();
    check(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}

/// Writes one value to stdout as indented JSON: analysis results are single
/// documents that people read as often as programs do.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<Flow> {
    let mut text = serde_json::to_string_pretty(value).context("cannot encode output as JSON")?;
    text.push('\n');
    print_text(&text)
}

/// Writes a command's answer: `value` as JSON under `--json`, otherwise the
/// text `render` lays out from it. One place, so every analysis command
/// answers `--json` the same way; `render` runs only when text is wanted.
pub fn print_answer<T: Serialize>(
    json: bool,
    value: &T,
    render: impl FnOnce(&T) -> String,
) -> anyhow::Result<Flow> {
    if json {
        print_json(value)
    } else {
        print_text(&render(value))
    }
}

fn check(result: io::Result<()>) -> anyhow::Result<Flow> {
    match result {
        Ok(()) => Ok(Flow::Continue),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(Flow::Stop),
        Err(error) => Err(anyhow::Error::new(error).context(OutputFailed)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that fails every write with one error kind.
    struct Failing(io::ErrorKind);

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(self.0))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from(self.0))
        }
    }

    fn lines(out: impl Write) -> JsonLines<impl Write> {
        JsonLines {
            out,
            line: Vec::new(),
        }
    }

    #[test]
    fn writes_one_line_per_value() {
        let mut buffer = Vec::new();
        let mut out = lines(&mut buffer);
        assert_eq!(out.write(&[1, 2]).unwrap(), Flow::Continue);
        assert_eq!(out.write(&"x").unwrap(), Flow::Continue);
        drop(out);
        assert_eq!(buffer, b"[1,2]\n\"x\"\n");
    }

    #[test]
    fn broken_pipe_stops_quietly() {
        let mut out = lines(Failing(io::ErrorKind::BrokenPipe));
        assert_eq!(out.write(&1).unwrap(), Flow::Stop);
        assert_eq!(out.flush().unwrap(), Flow::Stop);
    }

    #[test]
    fn other_write_errors_are_output_failures() {
        let mut out = lines(Failing(io::ErrorKind::StorageFull));
        let error = out.write(&1).unwrap_err();
        assert!(error.downcast_ref::<OutputFailed>().is_some());
        assert!(format!("{error:#}").starts_with("cannot write to stdout: "));
    }
}
