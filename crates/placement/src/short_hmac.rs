//! HMAC-SHA256 over short messages at the cost of two SHA-256 compressions.
//!
//! Recipe 12.1 hashes `tenant ‖ 0x00 ‖ counter` for every tenant on the
//! request path. With the keyed pads precomputed, HMAC over a message that
//! fits one padded block is exactly two compressions: the inner block, then
//! the outer block holding the inner digest. The `hmac` crate's generic
//! buffering adds about half as much again on top of that, which is what the
//! 130 ns budget per placement cannot afford. This module drives RustCrypto's
//! SHA-256 compression function directly for messages of up to
//! [`MAX_SHORT_MESSAGE`] bytes; the construction is RFC 2104's, and the tests
//! check it against the `hmac` crate bit for bit.

use hmac::{Hmac, Mac};
use sha2::block_api::compress256;
use sha2::{Digest, Sha256};

/// SHA-256's block size in bytes.
const BLOCK: usize = 64;

/// The longest message that still fits one block after SHA-256's padding
/// (one 0x80 byte and an 8-byte length).
pub(crate) const MAX_SHORT_MESSAGE: usize = BLOCK - 9;

/// SHA-256's initial hash value (FIPS 180-4, section 5.3.3).
const INITIAL_STATE: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// The SHA-256 states after absorbing the key xor ipad and the key xor opad.
#[derive(Clone)]
pub(crate) struct PaddedKey {
    inner: [u32; 8],
    outer: [u32; 8],
}

impl PaddedKey {
    /// Precomputes the pads for `key` (RFC 2104: keys longer than a block are
    /// hashed first, shorter ones are zero-padded).
    pub(crate) fn new(key: &[u8]) -> Self {
        let mut block_key = [0u8; BLOCK];
        if key.len() > BLOCK {
            block_key[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block_key[..key.len()].copy_from_slice(key);
        }
        let pad = |byte: u8| {
            let mut block = [0u8; BLOCK];
            for (out, key_byte) in block.iter_mut().zip(block_key) {
                *out = key_byte ^ byte;
            }
            let mut state = INITIAL_STATE;
            compress256(&mut state, &[block]);
            state
        };
        Self {
            inner: pad(0x36),
            outer: pad(0x5c),
        }
    }

    /// HMAC-SHA256 of a message already laid out at the start of `block`
    /// (`len` bytes, at most [`MAX_SHORT_MESSAGE`]). The rest of `block` is
    /// overwritten with SHA-256 padding.
    #[inline]
    pub(crate) fn mac_block(&self, block: &mut [u8; BLOCK], len: usize) -> [u8; 32] {
        debug_assert!(len <= MAX_SHORT_MESSAGE);
        block[len] = 0x80;
        block[len + 1..BLOCK - 8].fill(0);
        // The inner hash covers the ipad block too.
        block[BLOCK - 8..].copy_from_slice(&(((BLOCK + len) as u64) * 8).to_be_bytes());
        let mut inner = self.inner;
        compress256(&mut inner, &[*block]);

        let mut outer_block = [0u8; BLOCK];
        for (chunk, word) in outer_block.chunks_exact_mut(4).zip(inner) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        outer_block[32] = 0x80;
        outer_block[BLOCK - 8..].copy_from_slice(&(((BLOCK + 32) as u64) * 8).to_be_bytes());
        let mut outer = self.outer;
        compress256(&mut outer, &[outer_block]);

        let mut digest = [0u8; 32];
        for (chunk, word) in digest.chunks_exact_mut(4).zip(outer) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        digest
    }
}

/// HMAC-SHA256 of any message through the `hmac` crate, for messages too
/// long for [`PaddedKey::mac_block`] and as the reference in tests.
pub(crate) fn mac_any(mac: &Hmac<Sha256>, parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = mac.clone();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::PlacementKey;

    #[test]
    fn matches_the_hmac_crate_for_every_length_and_key_size() {
        for key_len in [0, 1, 16, 63, 64, 65, 200] {
            let key_bytes: Vec<u8> = (0..key_len).map(|i| (i * 7 + 3) as u8).collect();
            let padded = PaddedKey::new(&key_bytes);
            let reference = PlacementKey::from_bytes(key_bytes).mac();
            for len in 0..=MAX_SHORT_MESSAGE {
                let message: Vec<u8> = (0..len).map(|i| (i * 31 + key_len) as u8).collect();
                let mut block = [0xAAu8; BLOCK];
                block[..len].copy_from_slice(&message);
                assert_eq!(
                    padded.mac_block(&mut block, len),
                    mac_any(&reference, &[&message]),
                    "key {key_len} bytes, message {len} bytes"
                );
            }
        }
    }
}
