//! Placement keys and the versioned key ring.
//!
//! The key is what makes placement a secret function: without it nobody can
//! compute which shards a tenant lands on, so an attacker cannot aim at a
//! victim's subset. Key bytes therefore never leave this module except into
//! the HMAC that consumes them: `Debug` is redacted, `Display` does not
//! exist, and errors never quote them.

use std::collections::BTreeMap;
use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::KeyError;

/// The public default key of the design chapter's Recipe 12.1.
///
/// It exists so that results can be compared with the recipe and so that
/// analysis can run without a secret. Anything that serves traffic must refuse
/// it (see [`PlacementKey::is_recipe_default`]): with a public key, placement
/// is a public function of the tenant id.
pub const RECIPE_DEFAULT_KEY: &[u8] = b"shuffle-shard-v1";

/// Secret key material for placement.
///
/// ```
/// use placement::PlacementKey;
///
/// let key = PlacementKey::from_hex("00ff10").unwrap();
/// assert_eq!(format!("{key:?}"), "PlacementKey(<redacted>)");
/// assert!(!key.is_recipe_default());
/// assert!(PlacementKey::recipe_default().is_recipe_default());
/// ```
#[derive(Clone)]
pub struct PlacementKey {
    bytes: Box<[u8]>,
}

impl PlacementKey {
    /// Wraps raw key bytes, verbatim. An empty key is accepted because the
    /// recipe accepts it; callers that serve traffic should check
    /// [`is_all_zero`](Self::is_all_zero) and [`is_recipe_default`](Self::is_recipe_default).
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Self {
        Self {
            bytes: bytes.into().into_boxed_slice(),
        }
    }

    /// Parses a hex-encoded key (upper or lower case, surrounding whitespace
    /// ignored).
    pub fn from_hex(hex: &str) -> Result<Self, KeyError> {
        let hex = hex.trim();
        if !hex.len().is_multiple_of(2) {
            return Err(KeyError::OddHexLength { len: hex.len() });
        }
        let digits = hex.as_bytes();
        let mut bytes = Vec::with_capacity(digits.len() / 2);
        for (pair_index, pair) in digits.chunks_exact(2).enumerate() {
            let high = hex_value(pair[0]).ok_or(KeyError::InvalidHexDigit {
                position: pair_index * 2,
            })?;
            let low = hex_value(pair[1]).ok_or(KeyError::InvalidHexDigit {
                position: pair_index * 2 + 1,
            })?;
            bytes.push(high << 4 | low);
        }
        Ok(Self::from_bytes(bytes))
    }

    /// The recipe's public default key, `shuffle-shard-v1`.
    pub fn recipe_default() -> Self {
        Self::from_bytes(RECIPE_DEFAULT_KEY)
    }

    /// Whether this key places tenants exactly like the recipe's public
    /// default key. A gateway must refuse to serve traffic with it.
    ///
    /// Keys are compared as HMAC sees them (see [`ct_eq`](Self::ct_eq)), so
    /// the default key followed by zero bytes counts as the default too.
    pub fn is_recipe_default(&self) -> bool {
        self.ct_eq(&Self::recipe_default())
    }

    /// Whether the key has no bytes at all.
    ///
    /// This is only about the length, like [`len`](Self::len). To refuse a
    /// key that is no secret, ask [`is_all_zero`](Self::is_all_zero), which
    /// also holds for no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Whether every byte of the key is zero, or it has none: `head -c 32
    /// /dev/zero` where `/dev/urandom` was meant, or `00` in a hex variable.
    /// Such a key is no secret: up to HMAC's 64-byte block it is the empty
    /// key to HMAC, so placement with it is a public function of the tenant
    /// id; a longer one is still the first key anyone would guess. Key
    /// loaders refuse it.
    pub fn is_all_zero(&self) -> bool {
        // Folded over every byte rather than stopping at the first non-zero
        // one, so the time taken does not say where that byte is.
        self.bytes.iter().fold(0u8, |seen, &byte| seen | byte) == 0
    }

    /// The key's length in bytes, as given. The length is not secret enough
    /// to hide, and operators need it to tell a truncated key file from a
    /// real one.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether two keys place every tenant identically, compared in
    /// constant time.
    ///
    /// HMAC first turns a key into one 64-byte block: a longer key is hashed,
    /// a shorter one is padded with zero bytes. Two keys with the same block
    /// are the same key to HMAC, so that block is what is compared; comparing
    /// raw bytes would call `k` and `k ‖ 0x00` different keys although no
    /// tenant would move between them.
    pub fn ct_eq(&self, other: &PlacementKey) -> bool {
        bool::from(self.hmac_block_key().ct_eq(&other.hmac_block_key()))
    }

    /// The key as HMAC-SHA256 uses it (RFC 2104): hashed if longer than a
    /// block, then zero-padded to one block.
    pub(crate) fn hmac_block_key(&self) -> [u8; 64] {
        let mut block = [0u8; 64];
        if self.bytes.len() > 64 {
            block[..32].copy_from_slice(&Sha256::digest(&self.bytes));
        } else {
            block[..self.bytes.len()].copy_from_slice(&self.bytes);
        }
        block
    }

    /// A keyed HMAC-SHA256 state, ready to be cloned per message.
    pub(crate) fn mac(&self) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this cannot fail.
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.bytes).expect("HMAC takes any key length")
    }

    /// The precomputed HMAC pads for single-block messages.
    pub(crate) fn padded(&self) -> crate::short_hmac::PaddedKey {
        crate::short_hmac::PaddedKey::new(&self.bytes)
    }

    /// A subkey for one purpose, so that the algorithms never feed the same
    /// HMAC key with messages that could collide across purposes.
    pub(crate) fn derive(&self, label: &[u8]) -> PlacementKey {
        let mut mac = self.mac();
        mac.update(b"shuffle-shard/derive/");
        mac.update(label);
        Self::from_bytes(mac.finalize().into_bytes().to_vec())
    }
}

impl fmt::Debug for PlacementKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PlacementKey(<redacted>)")
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Named key versions, one of them active.
///
/// Rotating the placement key is a migration (every tenant moves), so the ring
/// keeps old versions addressable: a cell can stay on `v1` while `v2` is
/// introduced, and `migrate` can price the move before anyone makes it.
///
/// ```
/// use placement::{KeyRing, PlacementKey};
///
/// let mut ring = KeyRing::new("v1", PlacementKey::from_bytes(b"first secret".to_vec())).unwrap();
/// ring.insert("v2", PlacementKey::from_bytes(b"second secret".to_vec())).unwrap();
/// ring.set_active("v2").unwrap();
/// assert_eq!(ring.active_version(), "v2");
/// assert!(ring.get("v1").is_some());
/// ```
#[derive(Clone)]
pub struct KeyRing {
    versions: BTreeMap<String, PlacementKey>,
    active: String,
}

impl KeyRing {
    /// A ring holding one version, which is active.
    pub fn new(version: impl Into<String>, key: PlacementKey) -> Result<Self, KeyError> {
        let version = version.into();
        if version.is_empty() {
            return Err(KeyError::EmptyVersion);
        }
        let mut versions = BTreeMap::new();
        versions.insert(version.clone(), key);
        Ok(Self {
            versions,
            active: version,
        })
    }

    /// Adds a version. Existing versions are never overwritten: a version name
    /// must always mean the same bytes, or placements recorded under it lie.
    pub fn insert(
        &mut self,
        version: impl Into<String>,
        key: PlacementKey,
    ) -> Result<(), KeyError> {
        let version = version.into();
        if version.is_empty() {
            return Err(KeyError::EmptyVersion);
        }
        if self.versions.contains_key(&version) {
            return Err(KeyError::DuplicateVersion { version });
        }
        self.versions.insert(version, key);
        Ok(())
    }

    /// Makes an existing version the active one.
    pub fn set_active(&mut self, version: &str) -> Result<(), KeyError> {
        if !self.versions.contains_key(version) {
            return Err(KeyError::UnknownVersion {
                version: version.to_owned(),
            });
        }
        self.active = version.to_owned();
        Ok(())
    }

    /// The active version's name.
    pub fn active_version(&self) -> &str {
        &self.active
    }

    /// The active key.
    pub fn active(&self) -> &PlacementKey {
        &self.versions[&self.active]
    }

    /// The key of one version, if the ring holds it.
    pub fn get(&self, version: &str) -> Option<&PlacementKey> {
        self.versions.get(version)
    }

    /// The version names, in sorted order.
    pub fn versions(&self) -> impl Iterator<Item = &str> {
        self.versions.keys().map(String::as_str)
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Version names are not secret; the keys behind them are.
        f.debug_struct("KeyRing")
            .field("versions", &self.versions.keys().collect::<Vec<_>>())
            .field("active", &self.active)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let key = PlacementKey::from_hex(" 73687566666C652d73686172642d7631\n").unwrap();
        assert!(key.is_recipe_default());
        assert_eq!(
            PlacementKey::from_hex("abc").unwrap_err(),
            KeyError::OddHexLength { len: 3 }
        );
        assert_eq!(
            PlacementKey::from_hex("0g").unwrap_err(),
            KeyError::InvalidHexDigit { position: 1 }
        );
        assert!(PlacementKey::from_hex("").unwrap().is_empty());
    }

    #[test]
    fn is_empty_is_about_length_and_is_all_zero_about_secrecy() {
        // Regression for issue 17: `is_empty` was true for a 32-byte all-zero
        // key, disagreeing with `len() == 32`.
        for len in [0, 1, 32, 64, 65, 100] {
            let zeros = PlacementKey::from_bytes(vec![0; len]);
            assert_eq!(zeros.is_empty(), len == 0, "{len} zero bytes");
            assert_eq!(zeros.len(), len);
            assert!(zeros.is_all_zero(), "{len} zero bytes are no secret");
        }
        for bytes in [vec![1], vec![0, 0, 0, 1], [vec![0; 64], vec![9]].concat()] {
            let key = PlacementKey::from_bytes(bytes);
            assert!(!key.is_empty());
            assert!(!key.is_all_zero());
        }
        assert!(!PlacementKey::recipe_default().is_all_zero());
    }

    #[test]
    fn debug_never_shows_key_bytes() {
        let secret = b"super-secret-material";
        let key = PlacementKey::from_bytes(secret.to_vec());
        let ring = KeyRing::new("v7", key.clone()).unwrap();
        for text in [format!("{key:?}"), format!("{key:#?}"), format!("{ring:?}")] {
            assert!(!text.contains("super"), "{text}");
            assert!(!text.contains("115, 117"), "{text}"); // b"su" as decimal bytes
            assert!(!text.contains("7375"), "{text}"); // b"su" as hex
        }
        assert!(format!("{ring:?}").contains("v7"));
    }

    #[test]
    fn default_key_detection_compares_as_hmac_does() {
        assert!(!PlacementKey::from_bytes(b"shuffle-shard-v1 ".to_vec()).is_recipe_default());
        assert!(!PlacementKey::from_bytes(b"shuffle-shard-v".to_vec()).is_recipe_default());
        assert!(PlacementKey::from_bytes(b"shuffle-shard-v1".to_vec()).is_recipe_default());
        assert!(PlacementKey::from_bytes(b"shuffle-shard-v1\0\0".to_vec()).is_recipe_default());
        let long = vec![7u8; 100];
        let hashed = Sha256::digest(&long).to_vec();
        assert!(PlacementKey::from_bytes(long).ct_eq(&PlacementKey::from_bytes(hashed)));
    }

    #[test]
    fn ring_rejects_overwrites_and_unknown_versions() {
        let mut ring = KeyRing::new("v1", PlacementKey::from_bytes(vec![1])).unwrap();
        assert_eq!(
            ring.insert("v1", PlacementKey::from_bytes(vec![2]))
                .unwrap_err(),
            KeyError::DuplicateVersion {
                version: "v1".into()
            }
        );
        assert!(ring.set_active("v9").is_err());
        assert!(KeyRing::new("", PlacementKey::from_bytes(vec![1])).is_err());
        assert_eq!(ring.versions().collect::<Vec<_>>(), ["v1"]);
    }

    #[test]
    fn derived_keys_differ_by_label() {
        let key = PlacementKey::from_bytes(b"k".to_vec());
        assert!(!key.derive(b"a").ct_eq(&key.derive(b"b")));
        assert!(key.derive(b"a").ct_eq(&key.derive(b"a")));
    }
}
