//! Reads placement keys from files and environment variables.
//!
//! The `placement` crate is pure and does no I/O, so loading key material is
//! done here. Two sources are supported:
//!
//! - [`from_file`]: the file's raw bytes, **verbatim**. Nothing is trimmed or
//!   decoded, so a trailing newline written by `echo` or an editor is part of
//!   the key. Write key files with `printf '%s'` or `head -c 32 /dev/urandom`
//!   if that is not what you want.
//! - [`from_env`]: the variable holds the key hex-encoded (surrounding
//!   whitespace ignored), because environment variables cannot carry
//!   arbitrary bytes portably.
//!
//! [`KeySource`] names either source and [`load_ring`] builds a
//! [`KeyRing`] from several named versions.
//!
//! Key bytes never appear in an error: messages name the file or the variable
//! and say what was wrong with it, never what was in it.
//!
//! ```no_run
//! use keys::{KeySource, load_ring};
//!
//! let ring = load_ring(
//!     [
//!         ("v1".to_owned(), KeySource::File("/etc/shuffle-shard/key-v1".into())),
//!         ("v2".to_owned(), KeySource::Env("SHUFFLE_SHARD_KEY_V2".into())),
//!     ],
//!     "v2",
//! )?;
//! assert_eq!(ring.active_version(), "v2");
//! # Ok::<(), keys::KeyLoadError>(())
//! ```

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use placement::{KeyError, KeyRing, PlacementKey};
use thiserror::Error;

/// The largest key file [`from_file`] accepts, in bytes.
///
/// A placement key is normally 32 to 64 bytes. The cap exists so that a path
/// pointing at the wrong file (a log, a disk image, `/dev/zero`) fails with a
/// clear message instead of reading until memory runs out.
pub const MAX_KEY_FILE_BYTES: u64 = 1024 * 1024;

/// Why a key could not be loaded.
///
/// Every message is complete on its own (it already includes the underlying
/// I/O or hex error), names the file or variable involved and never includes
/// key material, so it is safe to print and log.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum KeyLoadError {
    /// The key file could not be opened or read.
    #[error("cannot read key file {}: {error}; check the path and permissions", path.display())]
    Unreadable {
        /// The file that was asked for.
        path: PathBuf,
        /// The operating system's reason; see [`io::Error::kind`].
        error: io::Error,
    },
    /// The key file holds no bytes, or only zero bytes (no secret: up to 64
    /// of them HMAC treats as no key at all).
    #[error("key file {} is empty or all zero bytes; write random key material into it, e.g. `head -c 32 /dev/urandom > FILE`", path.display())]
    EmptyFile {
        /// The empty file.
        path: PathBuf,
    },
    /// The key file is implausibly large for a key.
    #[error(
        "key file {} is larger than {max} bytes; a placement key is normally 32 to 64 bytes, so check that the path names the key file",
        path.display()
    )]
    FileTooLarge {
        /// The oversized file.
        path: PathBuf,
        /// The largest accepted size, [`MAX_KEY_FILE_BYTES`].
        max: u64,
    },
    /// The environment variable name cannot name a variable.
    #[error(
        "{var:?} is not a usable environment variable name; use a non-empty name without '=' or NUL, e.g. SHUFFLE_SHARD_KEY"
    )]
    InvalidVarName {
        /// The rejected name.
        var: String,
    },
    /// The environment variable is not set.
    #[error("environment variable {var} is not set; export it with the key as hex digits")]
    EnvUnset {
        /// The variable's name.
        var: String,
    },
    /// The environment variable's value is not valid Unicode, so it cannot
    /// be hex.
    #[error("environment variable {var} is not valid Unicode; it must hold the key as hex digits")]
    EnvNotUnicode {
        /// The variable's name.
        var: String,
    },
    /// The environment variable does not hold valid hex.
    #[error("environment variable {var} does not hold a valid hex key: {error}")]
    EnvInvalidHex {
        /// The variable's name.
        var: String,
        /// What was wrong with the hex; it never quotes the value.
        error: KeyError,
    },
    /// The environment variable is set but holds no key bytes, or only zero
    /// bytes.
    #[error(
        "environment variable {var} is empty or all zero bytes; set it to a random key as hex digits, e.g. from `openssl rand -hex 32`"
    )]
    EnvEmpty {
        /// The variable's name.
        var: String,
    },
    /// One version of a key ring could not be loaded.
    #[error("key version {version:?}: {error}")]
    Version {
        /// The version whose source failed.
        version: String,
        /// Why its source failed.
        error: Box<KeyLoadError>,
    },
    /// The loaded keys could not form a key ring (an empty or repeated
    /// version name).
    #[error("{0}")]
    Ring(KeyError),
    /// [`load_ring`] was given no sources.
    #[error("no key versions were given; configure at least one key version")]
    NoVersions,
    /// The active version is not among the loaded ones.
    #[error(
        "the active key version {active:?} is not among the loaded versions ({}); load it or make one of those active",
        loaded.join(", ")
    )]
    UnknownActive {
        /// The version asked to be active.
        active: String,
        /// The versions that were loaded, in sorted order.
        loaded: Vec<String>,
    },
}

/// Reads a key file's raw bytes, verbatim, as a placement key.
///
/// Nothing is trimmed: a file written with `echo secret > key` holds
/// `secret\n`, and that trailing newline is part of the key. This is
/// deliberate, because the same file must give the same key to every tool
/// that reads it, and "helpful" trimming is exactly where tools disagree.
///
/// Refuses an empty file (an empty key is almost certainly a mistake) and
/// files larger than [`MAX_KEY_FILE_BYTES`].
pub fn from_file(path: &Path) -> Result<PlacementKey, KeyLoadError> {
    let unreadable = |error| KeyLoadError::Unreadable {
        path: path.to_owned(),
        error,
    };
    let file = File::open(path).map_err(unreadable)?;
    // Reading one byte past the cap tells a file of exactly the cap apart
    // from a larger one without trusting metadata, which special files such
    // as pipes and `/dev/zero` do not report truthfully.
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(KeyLoadError::FileTooLarge {
            path: path.to_owned(),
            max: MAX_KEY_FILE_BYTES,
        });
    }
    // A file of only zero bytes is no secret (see `PlacementKey::is_all_zero`),
    // so it is refused like an empty file.
    let key = PlacementKey::from_bytes(bytes);
    if key.is_all_zero() {
        return Err(KeyLoadError::EmptyFile {
            path: path.to_owned(),
        });
    }
    Ok(key)
}

/// Reads a hex-encoded key from an environment variable.
///
/// Upper- and lower-case digits are accepted and surrounding whitespace is
/// ignored. The value is never echoed in an error.
pub fn from_env(var: &str) -> Result<PlacementKey, KeyLoadError> {
    check_var_name(var)?;
    from_env_value(var, std::env::var_os(var))
}

/// Rejects names that no environment variable can have, so that the user
/// hears "bad name" rather than a misleading "not set".
fn check_var_name(var: &str) -> Result<(), KeyLoadError> {
    if var.is_empty() || var.contains(['=', '\0']) {
        return Err(KeyLoadError::InvalidVarName {
            var: var.to_owned(),
        });
    }
    Ok(())
}

/// The decoding half of [`from_env`], separate so that tests can exercise it
/// without mutating the process environment (which is `unsafe` in edition
/// 2024 and forbidden in this workspace).
fn from_env_value(var: &str, value: Option<OsString>) -> Result<PlacementKey, KeyLoadError> {
    let value = value.ok_or_else(|| KeyLoadError::EnvUnset {
        var: var.to_owned(),
    })?;
    let value = value
        .into_string()
        .map_err(|_| KeyLoadError::EnvNotUnicode {
            var: var.to_owned(),
        })?;
    let key = PlacementKey::from_hex(&value).map_err(|error| KeyLoadError::EnvInvalidHex {
        var: var.to_owned(),
        error,
    })?;
    if key.is_all_zero() {
        return Err(KeyLoadError::EnvEmpty {
            var: var.to_owned(),
        });
    }
    Ok(key)
}

/// Where one key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file whose raw bytes are the key (see [`from_file`]).
    File(PathBuf),
    /// An environment variable holding the key as hex (see [`from_env`]).
    Env(String),
}

impl KeySource {
    /// Loads the key from this source.
    pub fn load(&self) -> Result<PlacementKey, KeyLoadError> {
        match self {
            KeySource::File(path) => from_file(path),
            KeySource::Env(var) => from_env(var),
        }
    }
}

/// Loads every `(version, source)` pair into a [`KeyRing`] and makes `active`
/// the active version.
///
/// All sources are loaded before the ring is built, and the first failure is
/// returned naming its version. Version names must be non-empty and unique.
pub fn load_ring(
    sources: impl IntoIterator<Item = (String, KeySource)>,
    active: &str,
) -> Result<KeyRing, KeyLoadError> {
    let mut ring: Option<KeyRing> = None;
    for (version, source) in sources {
        let key = source.load().map_err(|error| KeyLoadError::Version {
            version: version.clone(),
            error: Box::new(error),
        })?;
        match &mut ring {
            None => ring = Some(KeyRing::new(version, key).map_err(KeyLoadError::Ring)?),
            Some(ring) => ring.insert(version, key).map_err(KeyLoadError::Ring)?,
        }
    }
    let mut ring = ring.ok_or(KeyLoadError::NoVersions)?;
    if ring.get(active).is_none() {
        return Err(KeyLoadError::UnknownActive {
            active: active.to_owned(),
            loaded: ring.versions().map(str::to_owned).collect(),
        });
    }
    ring.set_active(active).map_err(KeyLoadError::Ring)?;
    Ok(ring)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn key_file(contents: &[u8]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(contents).unwrap();
        file.flush().unwrap();
        file
    }

    #[test]
    fn file_bytes_are_taken_verbatim() {
        let file = key_file(b"abc\n");
        let key = from_file(file.path()).unwrap();
        assert!(key.ct_eq(&PlacementKey::from_bytes(b"abc\n".to_vec())));
        assert!(!key.ct_eq(&PlacementKey::from_bytes(b"abc".to_vec())));

        let file = key_file(b"  \r\n\0\xff");
        let key = from_file(file.path()).unwrap();
        assert!(key.ct_eq(&PlacementKey::from_bytes(b"  \r\n\0\xff".to_vec())));
    }

    #[test]
    fn recipe_key_file_is_recognised() {
        let file = key_file(b"shuffle-shard-v1");
        assert!(from_file(file.path()).unwrap().is_recipe_default());
    }

    #[test]
    fn missing_file_names_the_path_and_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-key");
        let error = from_file(&path).unwrap_err();
        assert!(
            matches!(&error, KeyLoadError::Unreadable { error, .. } if error.kind() == io::ErrorKind::NotFound)
        );
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("No such file or directory"), "{message}");
        assert!(message.contains("check the path"), "{message}");
    }

    #[test]
    fn directory_is_unreadable_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let error = from_file(dir.path()).unwrap_err();
        assert!(matches!(error, KeyLoadError::Unreadable { .. }), "{error}");
    }

    #[test]
    fn empty_file_is_refused() {
        let file = key_file(b"");
        let error = from_file(file.path()).unwrap_err();
        assert!(matches!(error, KeyLoadError::EmptyFile { .. }));
        // Zero bytes are the empty key to HMAC, and beyond HMAC's 64-byte
        // block (where they are hashed) still no secret.
        for len in [32, 65] {
            let zeros = key_file(&vec![0; len]);
            let zero_error = from_file(zeros.path()).unwrap_err();
            assert!(
                matches!(zero_error, KeyLoadError::EmptyFile { .. }),
                "{len}"
            );
        }
        assert!(matches!(
            from_env_value("K", Some("0000".into())),
            Err(KeyLoadError::EnvEmpty { .. })
        ));
        assert_eq!(
            error.to_string(),
            format!(
                "key file {} is empty or all zero bytes; write random key material into it, e.g. `head -c 32 /dev/urandom > FILE`",
                file.path().display()
            )
        );
    }

    #[test]
    fn oversized_file_is_refused_without_quoting_it() {
        let contents = vec![b'Q'; MAX_KEY_FILE_BYTES as usize + 1];
        let file = key_file(&contents);
        let error = from_file(file.path()).unwrap_err();
        assert!(matches!(error, KeyLoadError::FileTooLarge { .. }));
        assert!(!error.to_string().contains("QQ"));

        let exactly_max = key_file(&contents[1..]);
        assert_eq!(
            from_file(exactly_max.path()).unwrap().len(),
            contents.len() - 1
        );
    }

    #[test]
    fn errors_never_contain_key_bytes() {
        let secret = b"TOPSECRETKEY";
        let file = key_file(secret);
        let key = from_file(file.path()).unwrap();
        assert!(!format!("{key:?}").contains("TOPSECRET"));

        // A well-formed but unusable ring still must not quote its keys.
        let sources = [
            ("v1".to_owned(), KeySource::File(file.path().to_owned())),
            ("v1".to_owned(), KeySource::File(file.path().to_owned())),
        ];
        let error = load_ring(sources, "v1").unwrap_err();
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains("TOPSECRET"), "{text}");
        }
    }

    #[test]
    fn env_value_decodes_hex() {
        let key = from_env_value(
            "KEYS_TEST_HEX",
            Some(OsString::from(" 73687566666C652d73686172642d7631\n")),
        )
        .unwrap();
        assert!(key.is_recipe_default());
    }

    #[test]
    fn env_value_unset_not_unicode_empty() {
        let error = from_env_value("KEYS_TEST_UNSET", None).unwrap_err();
        assert!(matches!(error, KeyLoadError::EnvUnset { .. }));
        assert!(error.to_string().contains("KEYS_TEST_UNSET"));

        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStringExt;
            let error = from_env_value(
                "KEYS_TEST_BYTES",
                Some(OsString::from_vec(vec![0xff, 0x61])),
            )
            .unwrap_err();
            assert!(
                matches!(error, KeyLoadError::EnvNotUnicode { .. }),
                "{error}"
            );
        }

        for empty in ["", "   ", "\n"] {
            let error = from_env_value("KEYS_TEST_EMPTY", Some(OsString::from(empty))).unwrap_err();
            assert!(matches!(error, KeyLoadError::EnvEmpty { .. }), "{error}");
        }
    }

    #[test]
    fn env_value_bad_hex_is_not_echoed() {
        for value in ["ZZSECRETZZ", "abc", "0123456789abcdefXY"] {
            let error = from_env_value("KEYS_TEST_BAD", Some(OsString::from(value))).unwrap_err();
            assert!(
                matches!(error, KeyLoadError::EnvInvalidHex { .. }),
                "{error}"
            );
            let message = error.to_string();
            assert!(message.contains("KEYS_TEST_BAD"), "{message}");
            for text in [message, format!("{error:?}")] {
                assert!(!text.contains(value), "{text}");
            }
        }
    }

    #[test]
    fn real_path_variable_is_not_hex() {
        // PATH is set in every environment the tests run in and always holds
        // '/' or ':' or letters past 'f', so it can never be a hex key.
        let error = from_env("PATH").unwrap_err();
        assert!(
            matches!(
                error,
                KeyLoadError::EnvInvalidHex { .. } | KeyLoadError::EnvNotUnicode { .. }
            ),
            "{error}"
        );
    }

    #[test]
    fn real_unset_variable() {
        let error = from_env("SHUFFLE_SHARD_KEYS_TEST_SURELY_UNSET_7f3a9c").unwrap_err();
        assert!(matches!(error, KeyLoadError::EnvUnset { .. }), "{error}");
    }

    #[test]
    fn unusable_variable_names_are_rejected() {
        for name in ["", "A=B", "A\0B"] {
            let error = from_env(name).unwrap_err();
            assert!(
                matches!(error, KeyLoadError::InvalidVarName { .. }),
                "{error}"
            );
        }
    }

    #[test]
    fn ring_loads_versions_and_activates_one() {
        let first = key_file(b"first");
        let second = key_file(b"second");
        let ring = load_ring(
            [
                ("v1".to_owned(), KeySource::File(first.path().to_owned())),
                ("v2".to_owned(), KeySource::File(second.path().to_owned())),
            ],
            "v1",
        )
        .unwrap();
        assert_eq!(ring.active_version(), "v1");
        assert!(
            ring.active()
                .ct_eq(&PlacementKey::from_bytes(b"first".to_vec()))
        );
        assert!(
            ring.get("v2")
                .unwrap()
                .ct_eq(&PlacementKey::from_bytes(b"second".to_vec()))
        );
    }

    #[test]
    fn ring_errors() {
        let file = key_file(b"k");
        let source = || KeySource::File(file.path().to_owned());

        let error = load_ring([("v1".to_owned(), source())], "v9").unwrap_err();
        assert!(matches!(error, KeyLoadError::UnknownActive { .. }));
        assert!(error.to_string().contains("\"v9\""), "{error}");
        assert!(error.to_string().contains("(v1)"), "{error}");

        let error = load_ring(Vec::new(), "v1").unwrap_err();
        assert!(matches!(error, KeyLoadError::NoVersions));

        let error = load_ring([(String::new(), source())], "").unwrap_err();
        assert!(matches!(error, KeyLoadError::Ring(KeyError::EmptyVersion)));

        let error = load_ring(
            [
                ("v1".to_owned(), source()),
                (
                    "v2".to_owned(),
                    KeySource::Env("SHUFFLE_SHARD_KEYS_TEST_SURELY_UNSET_7f3a9c".into()),
                ),
            ],
            "v1",
        )
        .unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, KeyLoadError::Version { ref version, .. } if version == "v2"));
        assert!(
            message.starts_with("key version \"v2\": environment variable"),
            "{message}"
        );
    }
}
