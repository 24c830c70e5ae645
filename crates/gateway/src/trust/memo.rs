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

use std::sync::{Arc, Mutex, Weak};

use subtle::ConstantTimeEq;

use crate::state::Snapshot;
use crate::tenants::TenantSlot;

/// The key a connection last authenticated, and whose it was.
#[derive(Default)]
pub struct KeyMemo {
    last: Mutex<Option<Remembered>>,
}

struct Remembered {
    /// The snapshot the key was authenticated in: weak, so that an idle
    /// connection never keeps a replaced registry alive (only the
    /// allocation's header, which also keeps its address from being
    /// reused by a later snapshot while it is remembered).
    snapshot: Weak<Snapshot>,
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
    pub fn recall(&self, snapshot: &Arc<Snapshot>, key: &[u8]) -> Option<TenantSlot> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let last = last.as_ref()?;
        // The same snapshot: its weak reference points where the served
        // one is (the address cannot have been reused while it is held).
        if !std::ptr::eq(last.snapshot.as_ptr(), Arc::as_ptr(snapshot)) {
            return None;
        }
        bool::from(last.key.as_ref().ct_eq(key)).then_some(last.slot)
    }

    /// Remembers that `key` named the tenant at `slot` in `snapshot`.
    pub fn remember(&self, snapshot: &Arc<Snapshot>, key: &[u8], slot: TenantSlot) {
        let remembered = Remembered {
            snapshot: Arc::downgrade(snapshot),
            key: key.into(),
            slot,
        };
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(remembered);
    }
}
