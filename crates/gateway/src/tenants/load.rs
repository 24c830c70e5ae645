//! Loading a whole population into a registry: every entry checked as it
//! streams in, then every bucket sorted once.

use std::path::Path;

use crate::config::{ConfigError, GatewayConfig};

use super::entry::{TenantEntry, ValidEntry};
use super::files::{self, FilesError, Format, Location};
use super::registry::{Conflict, Tenants};

/// Bytes a tenant takes in a tenants file, about: what the registry's
/// bucket count is guessed from before the file is read.
fn bytes_per_tenant(format: Format) -> u64 {
    match format {
        Format::JsonLines => 96,
        Format::Toml => 118,
    }
}

/// Reads, checks and indexes the tenants file at `path` against `config`.
/// Errors name the file, the entry (`tenants[3].k` or `line 12: k`) and
/// the problem.
pub fn from_file(path: &Path, config: &GatewayConfig) -> Result<Tenants, ConfigError> {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let expected = size / bytes_per_tenant(Format::of(path));
    let mut tenants = Tenants::loading(expected as usize);
    files::read_located(path, |location, entry| {
        let valid = check(&entry, config)
            .map_err(|(field, problem)| FilesError::new(path, location.field(field), problem))?;
        tenants.push(&valid);
        Ok(())
    })
    .map_err(files_error)?;
    tenants
        .finish()
        .map_err(|conflict| conflict_in_file(path, &conflict))
}

/// Reads, checks and indexes tenants-file TOML text as if read from
/// `path` (tests and the fuzzer; a file is read with [`from_file`]).
pub fn from_toml(path: &Path, text: &str, config: &GatewayConfig) -> Result<Tenants, ConfigError> {
    let mut tenants = Tenants::loading(text.len() / bytes_per_tenant(Format::Toml) as usize);
    files::read_toml(path, text, |location, entry| {
        let valid = check(&entry, config)
            .map_err(|(field, problem)| FilesError::new(path, location.field(field), problem))?;
        tenants.push(&valid);
        Ok(())
    })
    .map_err(files_error)?;
    tenants
        .finish()
        .map_err(|conflict| ConfigError::new(path, "-", conflict.to_string()))
}

/// Builds a registry from entries already in memory (tests, the tenant
/// store's snapshot), checked like a file's.
pub fn from_entries(
    entries: impl IntoIterator<Item = TenantEntry>,
    expected: usize,
    config: &GatewayConfig,
    source: &Path,
) -> Result<Tenants, ConfigError> {
    let mut tenants = Tenants::loading(expected);
    for (n, entry) in entries.into_iter().enumerate() {
        let valid = check(&entry, config).map_err(|(field, problem)| {
            ConfigError::new(source, Location::Entry(n).field(field), problem)
        })?;
        tenants.push(&valid);
    }
    tenants
        .finish()
        .map_err(|conflict| ConfigError::new(source, "-", conflict.to_string()))
}

/// One entry checked, its problem as (field, problem).
fn check(
    entry: &TenantEntry,
    config: &GatewayConfig,
) -> Result<ValidEntry, (&'static str, String)> {
    entry
        .validate(config)
        .map_err(|error| (error.field, error.problem))
}

fn files_error(error: FilesError) -> ConfigError {
    ConfigError::new(&error.file, error.location, error.problem)
}

/// A duplicate found after loading, located by reading the file again
/// (only on this error path): the second entry with the id, or with the
/// API key of the tenant named, which names the first.
fn conflict_in_file(path: &Path, conflict: &Conflict) -> ConfigError {
    let key_of = |entry: &TenantEntry| entry.api_key_sha256.as_deref().map(str::to_ascii_lowercase);
    let wanted = match conflict {
        Conflict::DuplicateId(_) => None,
        Conflict::DuplicateKey(owner) => {
            first_where(path, |e| e.id == *owner).and_then(|(_, entry)| key_of(&entry))
        }
    };
    let mut first = None;
    let second = first_where(path, |entry| {
        let hit = match conflict {
            Conflict::DuplicateId(id) => entry.id == *id,
            Conflict::DuplicateKey(_) => wanted.is_some() && key_of(entry) == wanted,
        };
        if hit && first.is_none() {
            first = Some(entry.id.clone());
            return false;
        }
        hit
    });
    let (field, problem) = match conflict {
        Conflict::DuplicateId(id) => ("id", format!("tenant {id:?} is listed twice")),
        Conflict::DuplicateKey(owner) => (
            "api_key_sha256",
            format!(
                "another tenant ({:?}) has the same API key; every tenant needs its own",
                first.as_ref().unwrap_or(owner)
            ),
        ),
    };
    let location = second.map_or_else(|| "-".to_owned(), |(at, _)| at.field(field));
    ConfigError::new(path, location, problem)
}

/// The first entry of the file `wanted` picks, and where it is.
fn first_where(
    path: &Path,
    mut wanted: impl FnMut(&TenantEntry) -> bool,
) -> Option<(Location, TenantEntry)> {
    let mut found = None;
    let _ = files::read_located(path, |location, entry| {
        if wanted(&entry) {
            found = Some((location, entry));
            // Stops the reading: the error itself is never shown.
            return Err(FilesError::new(path, "-", "found"));
        }
        Ok(())
    });
    found
}
