//! A connection's memory of the API key it authenticated: a keep-alive
//! connection that sends the byte-identical key again is the same tenant,
//! without hashing the key again.
//!
//! Authenticating an API key costs a SHA-256 of it (the registry is keyed
//! by digest, so that lookups reveal nothing about stored keys): about a
//! tenth of what a proxied GET costs in all. A client on a keep-alive
//! connection sends the same key with every request, so the connection
//! remembers the last key it authenticated, the tenant it named and the
//! snapshot it was named in. The next request's key is compared with it in
//! constant time over every byte (and its length); the memory holds only
//! while the snapshot is the one served, so a reload or a registry change
//! (a revoked key, a tenant removed) is authenticated from scratch, and a
//! different key (a connection whose client switched credentials) too.
//! JWTs are never remembered: their validity depends on the clock.

use std::any::Any;
use std::sync::{Arc, Mutex, Weak};

use subtle::ConstantTimeEq;

use crate::tenants::TenantSlot;

/// Whether `a` and `b` are the same bytes, in time that depends on their
/// lengths only: eight bytes at a time, every difference OR-ed into one
/// word whatever was found before, and the word judged by `subtle`. (The
/// lengths are not secret here: both keys came from the same client.)
/// `subtle`'s own slice comparison takes a byte and a barrier at a time,
/// ten times the instructions, on every request.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (a_words, a_rest) = a.as_chunks::<8>();
    let (b_words, b_rest) = b.as_chunks::<8>();
    let mut differ = 0_u64;
    for (x, y) in a_words.iter().zip(b_words) {
        differ |= u64::from_ne_bytes(*x) ^ u64::from_ne_bytes(*y);
    }
    for (x, y) in a_rest.iter().zip(b_rest) {
        differ |= u64::from(x ^ y);
    }
    bool::from(differ.ct_eq(&0))
}

/// The key a connection last authenticated, and whose it was.
#[derive(Default)]
pub struct KeyMemo {
    last: Mutex<Option<Remembered>>,
}

struct Remembered {
    /// The snapshot the key was authenticated in: weak, so that an idle
    /// connection never keeps a replaced registry alive (only the
    /// allocation's header, which also keeps its address from being
    /// reused by a later snapshot while it is remembered). Any type: the
    /// served snapshot's, which lives in a layer above this one.
    snapshot: Weak<dyn Any + Send + Sync>,
    /// The key's bytes.
    key: Box<[u8]>,
    /// The tenant it named.
    slot: TenantSlot,
}

// By hand: the key never reaches a log.
impl std::fmt::Debug for KeyMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyMemo").finish_non_exhaustive()
    }
}

impl KeyMemo {
    /// The tenant `key` named when it was last authenticated on this
    /// connection, if that was in `snapshot` and the key is the same, byte
    /// for byte.
    pub fn recall<S: Send + Sync + 'static>(
        &self,
        snapshot: &Arc<S>,
        key: &[u8],
    ) -> Option<TenantSlot> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let last = last.as_ref()?;
        // The same snapshot: its weak reference points where the served
        // one is (the address cannot have been reused while it is held).
        if !std::ptr::eq(
            last.snapshot.as_ptr().cast::<()>(),
            Arc::as_ptr(snapshot).cast::<()>(),
        ) {
            return None;
        }
        same_bytes(&last.key, key).then_some(last.slot)
    }

    /// Remembers that `key` named the tenant at `slot` in `snapshot`.
    pub fn remember<S: Send + Sync + 'static>(
        &self,
        snapshot: &Arc<S>,
        key: &[u8],
        slot: TenantSlot,
    ) {
        let any: Arc<dyn Any + Send + Sync> = Arc::clone(snapshot) as _;
        let remembered = Remembered {
            snapshot: Arc::downgrade(&any),
            key: key.into(),
            slot,
        };
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(remembered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_agrees_with_subtle_on_every_length_and_difference() {
        let key: Vec<u8> = (0..70_u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for length in 0..key.len() {
            let a = &key[..length];
            assert!(same_bytes(a, a), "{length}");
            // One bit off anywhere, and a prefix or an extension.
            for at in 0..length {
                let mut b = a.to_vec();
                b[at] ^= 1;
                assert_eq!(same_bytes(a, &b), bool::from(a.ct_eq(&b[..])));
                assert!(!same_bytes(a, &b), "{length} {at}");
            }
            assert!(!same_bytes(a, &key[..length + 1]));
        }
    }
}
