//! A stand-in for `gateway::tenants::files` (read and write tenants files,
//! TOML or JSON Lines by extension) with its signatures, until that module
//! lands on main; then this file goes and `tenants_cmd` uses the real one.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use gateway::tenants::TenantEntry;

/// A tenants file that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {location}: {problem}", file.display())]
pub struct FilesError {
    /// The file.
    pub file: PathBuf,
    /// Where in it.
    pub location: String,
    /// What is wrong.
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

fn is_jsonl(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "jsonl")
}

/// Every entry of a tenants file, in order.
pub fn read_entries(
    path: &Path,
    mut each: impl FnMut(TenantEntry) -> Result<(), FilesError>,
) -> Result<u64, FilesError> {
    let file = std::fs::File::open(path).map_err(|e| FilesError::new(path, "-", e.to_string()))?;
    let mut count = 0;
    if is_jsonl(path) {
        for (n, line) in BufReader::new(file).lines().enumerate() {
            let at = || format!("line {}", n + 1);
            let line = line.map_err(|e| FilesError::new(path, at(), e.to_string()))?;
            if line.trim().is_empty() {
                continue;
            }
            let entry = serde_json::from_str(&line)
                .map_err(|e| FilesError::new(path, at(), e.to_string()))?;
            each(entry)?;
            count += 1;
        }
        return Ok(count);
    }
    #[derive(serde::Deserialize)]
    struct Toml {
        #[serde(default)]
        tenants: Vec<TenantEntry>,
    }
    let text =
        std::io::read_to_string(file).map_err(|e| FilesError::new(path, "-", e.to_string()))?;
    let parsed: Toml =
        toml::from_str(&text).map_err(|e| FilesError::new(path, "-", e.to_string()))?;
    for entry in parsed.tenants {
        each(entry)?;
        count += 1;
    }
    Ok(count)
}

/// Writes entries in the format the file's name says.
pub fn write_entries(
    path: &Path,
    entries: impl IntoIterator<Item = TenantEntry>,
) -> Result<u64, FilesError> {
    let failed = |e: std::io::Error| FilesError::new(path, "-", e.to_string());
    let mut out = BufWriter::new(std::fs::File::create(path).map_err(failed)?);
    let mut count = 0;
    for entry in entries {
        if is_jsonl(path) {
            serde_json::to_writer(&mut out, &entry).map_err(|e| failed(e.into()))?;
            out.write_all(b"\n").map_err(failed)?;
        } else {
            let body = toml::to_string(&entry).map_err(|e| failed(std::io::Error::other(e)))?;
            out.write_all(b"[[tenants]]\n").map_err(failed)?;
            out.write_all(body.as_bytes()).map_err(failed)?;
            out.write_all(b"\n").map_err(failed)?;
        }
        count += 1;
    }
    out.flush().map_err(failed)?;
    Ok(count)
}
