//! Tenants files: TOML (`[[tenants]]` entries, for small fleets) and JSON
//! Lines (one entry per line, read as a stream: the format for millions).
//! The format is chosen by the file's name: `.jsonl` is JSON Lines,
//! anything else TOML.

use std::fmt;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::entry::TenantEntry;

/// The format of a tenants file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `[[tenants]]` entries.
    Toml,
    /// One JSON object per line.
    JsonLines,
}

impl Format {
    /// The format a file's name says: `.jsonl` is JSON Lines, anything
    /// else TOML.
    pub fn of(path: &Path) -> Self {
        if path.extension().is_some_and(|ext| ext == "jsonl") {
            Self::JsonLines
        } else {
            Self::Toml
        }
    }
}

/// Where in a tenants file an entry is: what an error about it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// The `n`th `[[tenants]]` entry (0-based) of a TOML file.
    Entry(usize),
    /// Line `n` (1-based) of a JSON Lines file.
    Line(usize),
}

impl Location {
    /// The location with an entry's field: `tenants[3].k` or `line 12: k`.
    pub fn field(&self, field: &str) -> String {
        match self {
            Self::Entry(n) => format!("tenants[{n}].{field}"),
            Self::Line(n) => format!("line {n}: {field}"),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Entry(n) => write!(f, "tenants[{n}]"),
            Self::Line(n) => write!(f, "line {n}"),
        }
    }
}

/// A tenants file that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {location}: {problem}", file.display())]
pub struct FilesError {
    /// The file.
    pub file: PathBuf,
    /// Where in it (`-` for the whole file, `line 12`, `tenants[3].k`).
    pub location: String,
    /// What is wrong and how to fix it.
    pub problem: String,
}

impl FilesError {
    /// An error at `location` of `file`.
    pub fn new(file: &Path, location: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            location: location.into(),
            problem: problem.into(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlTenants {
    #[serde(default)]
    tenants: Vec<TenantEntry>,
}

/// Reads every entry of a tenants file in order, handing each to `each`
/// with where it is; the first error (the file's or `each`'s) ends it.
/// Returns the number of entries. See [`read_mapped`].
pub fn read_located(
    path: &Path,
    mut each: impl FnMut(Location, TenantEntry) -> Result<(), FilesError>,
) -> Result<u64, FilesError> {
    read_mapped(
        path,
        |location, entry| Ok((location, entry)),
        |(location, entry)| each(location, entry),
    )
}

/// Bytes of a JSON Lines file read at once: its lines are parsed (and
/// `map`ped) in parallel, then handed on in order.
const BLOCK: usize = 4 << 20;

/// Reads every entry of a tenants file, turns each into a `T` with `map`
/// (in parallel, for JSON Lines: parsing and checking a million lines is
/// most of a start) and hands the results to `each` in file order; the
/// first error ends it. JSON Lines is read a block at a time, so memory
/// does not grow with the file; TOML is parsed whole. Returns the number
/// of entries.
pub fn read_mapped<T: Send>(
    path: &Path,
    map: impl Fn(Location, TenantEntry) -> Result<T, FilesError> + Sync,
    mut each: impl FnMut(T) -> Result<(), FilesError>,
) -> Result<u64, FilesError> {
    let cannot = |error: std::io::Error| {
        FilesError::new(path, "-", format!("cannot read the tenants file: {error}"))
    };
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    if Format::of(path) == Format::Toml {
        let text = std::io::read_to_string(file).map_err(cannot)?;
        return read_toml(path, &text, |location, entry| each(map(location, entry)?));
    }
    let (mut block, mut lines_before, mut count) = (Vec::with_capacity(BLOCK), 0, 0);
    loop {
        let ended = fill(&mut file, &mut block).map_err(cannot)?;
        // Whole lines only: the rest waits for the next block.
        let whole = if ended {
            block.len()
        } else {
            match block.iter().rposition(|&b| b == b'\n') {
                Some(at) => at + 1,
                None if block.len() < BLOCK => continue,
                None => {
                    return Err(FilesError::new(
                        path,
                        format!("line {}", lines_before + 1),
                        format!(
                            "the line is longer than {BLOCK} bytes; one tenant's entry is far shorter"
                        ),
                    ));
                }
            }
        };
        let lines: Vec<(usize, &[u8])> = block[..whole]
            .split(|&b| b == b'\n')
            .enumerate()
            .map(|(n, line)| (lines_before + n + 1, line.trim_ascii()))
            .filter(|(_, line)| !line.is_empty())
            .collect();
        lines_before += block[..whole].iter().filter(|&&b| b == b'\n').count();
        for (number, line) in lines {
            each(map(
                Location::Line(number),
                parse_line(path, number, line)?,
            )?)?;
            count += 1;
        }
        block.drain(..whole);
        if ended {
            return Ok(count);
        }
    }
}

/// Reads until `block` holds [`BLOCK`] bytes or the file ends (`true`).
fn fill(file: &mut std::fs::File, block: &mut Vec<u8>) -> std::io::Result<bool> {
    while block.len() < BLOCK {
        let start = block.len();
        block.resize(BLOCK, 0);
        let read = file.read(&mut block[start..]);
        let read = match read {
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => 0,
            Err(error) => {
                block.truncate(start);
                return Err(error);
            }
        };
        block.truncate(start + read);
        if read == 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One JSON Lines line as an entry.
fn parse_line(path: &Path, number: usize, line: &[u8]) -> Result<TenantEntry, FilesError> {
    serde_json::from_slice(line).map_err(|error| {
        FilesError::new(
            path,
            format!("line {number}"),
            format!(
                "{error} (each line is one JSON object with the fields of a [[tenants]] entry, e.g. {{\"id\":\"acme\",\"api_key_sha256\":\"…\"}})"
            ),
        )
    })
}

/// The entries of tenants-file TOML text (`path` names it in errors).
pub fn read_toml(
    path: &Path,
    text: &str,
    mut each: impl FnMut(Location, TenantEntry) -> Result<(), FilesError>,
) -> Result<u64, FilesError> {
    let Some(chunks) = entry_chunks(text) else {
        return read_toml_whole(path, text, each);
    };
    // What comes before the first entry may hold comments, nothing else
    // (checked as the whole file would be).
    parse_toml(path, &text[..chunks.first().map_or(text.len(), |c| c.0)], 0)?;
    let mut count = 0;
    // Lines before the chunk, counted as the chunks go by (not from the
    // start of the file for each one).
    let (mut line, mut counted_to) = (0, 0);
    for (n, &(start, end)) in chunks.iter().enumerate() {
        line += text[counted_to..start].matches('\n').count();
        counted_to = start;
        let mut parsed = parse_toml(path, &text[start..end], line)?.tenants;
        match (parsed.pop(), parsed.is_empty()) {
            (Some(entry), true) => each(Location::Entry(n), entry)?,
            // Cannot happen: each chunk is one `[[tenants]]` header and
            // its keys; read the whole file the slow way if it does.
            _ => return read_toml_whole(path, text, each),
        }
        count += 1;
    }
    Ok(count)
}

/// The byte ranges of the `[[tenants]]` entries of tenants-file TOML, each
/// from its header to the next, so that each is parsed alone: parsing a
/// million entries as one document builds a tree twenty times the file's
/// size. `None` when the file holds anything that could make a line look
/// like a header without being one (a multi-line string) or another table
/// header: such a file is parsed whole.
fn entry_chunks(text: &str) -> Option<Vec<(usize, usize)>> {
    if text.contains("\"\"\"") || text.contains("'''") {
        return None;
    }
    let mut starts = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("[[tenants]]") {
            let rest = rest.trim_start();
            if !(rest.is_empty() || rest.starts_with('#')) {
                return None;
            }
            starts.push(offset);
        } else if trimmed.starts_with('[') {
            return None;
        }
        offset += line.len();
    }
    let ends = starts.iter().skip(1).copied().chain([text.len()]);
    Some(starts.iter().copied().zip(ends).collect())
}

/// TOML text of tenants entries (`line` lines into the file).
fn parse_toml(path: &Path, text: &str, line: usize) -> Result<TomlTenants, FilesError> {
    toml::from_str(text).map_err(|error| {
        let location = error
            .span()
            .map(|span| {
                format!(
                    "line {}",
                    line + text[..span.start].matches('\n').count() + 1
                )
            })
            .unwrap_or_else(|| "-".into());
        FilesError::new(path, location, error.message().to_owned())
    })
}

/// Tenants-file TOML parsed as one document.
fn read_toml_whole(
    path: &Path,
    text: &str,
    mut each: impl FnMut(Location, TenantEntry) -> Result<(), FilesError>,
) -> Result<u64, FilesError> {
    let parsed = parse_toml(path, text, 0)?;
    let count = parsed.tenants.len() as u64;
    for (n, entry) in parsed.tenants.into_iter().enumerate() {
        each(Location::Entry(n), entry)?;
    }
    Ok(count)
}

/// [`read_located`] without the locations.
pub fn read_entries(
    path: &Path,
    mut each: impl FnMut(TenantEntry) -> Result<(), FilesError>,
) -> Result<u64, FilesError> {
    read_located(path, |_, entry| each(entry))
}

/// Writes entries to a tenants file in the format its name says, through
/// a temporary file beside it renamed into place, so a reader never sees
/// half a file. Returns the number written.
pub fn write_entries(
    path: &Path,
    entries: impl IntoIterator<Item = TenantEntry>,
) -> Result<u64, FilesError> {
    let failed = |error: std::io::Error| {
        FilesError::new(path, "-", format!("cannot write the tenants file: {error}"))
    };
    let temporary = temporary_beside(path);
    let file = std::fs::File::create(&temporary).map_err(failed)?;
    let mut out = BufWriter::with_capacity(1 << 16, file);
    let format = Format::of(path);
    let mut count = 0;
    let written = (|| -> std::io::Result<()> {
        for entry in entries {
            write_one(&mut out, format, &entry)?;
            count += 1;
        }
        out.flush()?;
        out.get_ref().sync_all()
    })();
    if let Err(error) = written.and_then(|()| std::fs::rename(&temporary, path)) {
        let _ = std::fs::remove_file(&temporary);
        return Err(failed(error));
    }
    Ok(count)
}

/// One entry in a format.
fn write_one(out: &mut impl Write, format: Format, entry: &TenantEntry) -> std::io::Result<()> {
    match format {
        Format::JsonLines => {
            serde_json::to_writer(&mut *out, entry)?;
            out.write_all(b"\n")
        }
        Format::Toml => {
            let body = toml::to_string(entry).map_err(std::io::Error::other)?;
            out.write_all(b"[[tenants]]\n")?;
            out.write_all(body.as_bytes())?;
            out.write_all(b"\n")
        }
    }
}

/// A file name beside `path` for writing it whole before renaming.
pub fn temporary_beside(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Every entry read one at a time, or the error, as text.
    fn read(text: &str, whole: bool) -> Result<Vec<(String, String)>, String> {
        let mut entries = Vec::new();
        let each = |location: Location, entry: TenantEntry| {
            entries.push((location.to_string(), format!("{entry:?}")));
            Ok(())
        };
        let path = Path::new("tenants.toml");
        let read = if whole {
            read_toml_whole(path, text, each)
        } else {
            read_toml(path, text, each)
        };
        read.map(|_| entries).map_err(|e| e.to_string())
    }

    /// Reading entry by entry gives what parsing the whole document gives:
    /// the same entries, or an error on the same line.
    #[test]
    fn entries_parsed_one_at_a_time_are_the_whole_documents() {
        let files = [
            "",
            "# only a comment\n",
            "[[tenants]]\nid = \"a\"\n\n[[tenants]] # the second\nid = \"b\"\nk = 2\nshards = [\n  \"s1\",\n]\n",
            "  [[tenants]]\n  id = \"a\"\n[[tenants]]\nid=\"b\"\nrequests_per_second = 2.5\n",
            "[[tenants]]\nid = \"a\"\n[[tenants]]\nid = \"b\"\nid = \"c\"\n",
            "[[tenants]]\nid = \"a\"\n[[tenants]]\nid = \"b\"\ncolour = 1\n",
            "[[tenants]]\nid = \"a\"\n[[tenants]]\nk = \"x\"\n",
            "stray = 1\n[[tenants]]\nid = \"a\"\n",
            "[[tenants]]\nid = \"a\"\n[other]\nx = 1\n",
            "[[tenants]]\nid = \"a\"\nnote = \"\"\"\n[[tenants]]\n\"\"\"\n",
            "[[tenants]]\nid = \"a\"\n[[tenants]] trailing\n",
            "[[tenants]]\nid = \"a\"\n[[tenants]]\nid = \"b\"\n[[tenants]]\nid = 3\n",
        ];
        for text in files {
            assert_eq!(read(text, false), read(text, true), "{text:?}");
        }
        assert_eq!(read(files[2], false).unwrap().len(), 2);
        assert!(
            entry_chunks(files[2]).is_some(),
            "the common shape is read entry by entry"
        );
    }
}
