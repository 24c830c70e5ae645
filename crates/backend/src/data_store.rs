//! The `data-store` mode's memory: what each tenant wrote at each path, so
//! that a shard answers `404` for data it never received, as a real
//! stateful shard does right after a migration moved a tenant onto it.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use http::{Method, StatusCode};

/// At most this many (tenant, path) entries are kept: a test shard must not
/// grow without bound under a benchmark that writes forever. A write past
/// it is refused (`507`), never stored by evicting another, so a test that
/// reads what it wrote is never surprised.
pub const MAX_ENTRIES: usize = 100_000;

/// Every datum a shard received, by tenant (the `x-shuffle-tenant` the
/// gateway sends, empty when absent) and path.
#[derive(Debug, Default)]
pub(crate) struct DataStore {
    entries: Mutex<HashMap<(String, String), Bytes>>,
}

impl DataStore {
    /// The answer to one data request: `PUT` and `POST` store the body
    /// (`201` when new, `200` when replaced), `GET` and `HEAD` read it
    /// back (`404` when never received), `DELETE` forgets it (`204`, or
    /// `404`); any other method is `405`.
    pub(crate) fn respond(
        &self,
        method: &Method,
        tenant: &str,
        path: &str,
        body: Bytes,
    ) -> (StatusCode, Bytes) {
        let mut entries = self.entries.lock().expect("data store lock");
        let key = (tenant.to_owned(), path.to_owned());
        match *method {
            Method::PUT | Method::POST => {
                if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
                    return (
                        StatusCode::INSUFFICIENT_STORAGE,
                        Bytes::from_static(b"{\"error\":\"the data store is full\"}"),
                    );
                }
                match entries.insert(key, body) {
                    Some(_) => (StatusCode::OK, Bytes::new()),
                    None => (StatusCode::CREATED, Bytes::new()),
                }
            }
            Method::GET | Method::HEAD => match entries.get(&key) {
                Some(stored) => (StatusCode::OK, stored.clone()),
                None => (
                    StatusCode::NOT_FOUND,
                    Bytes::from_static(b"{\"error\":\"no such datum on this shard\"}"),
                ),
            },
            Method::DELETE => match entries.remove(&key) {
                Some(_) => (StatusCode::NO_CONTENT, Bytes::new()),
                None => (StatusCode::NOT_FOUND, Bytes::new()),
            },
            _ => (StatusCode::METHOD_NOT_ALLOWED, Bytes::new()),
        }
    }

    /// How many entries it holds.
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().expect("data store lock").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(
        store: &DataStore,
        method: Method,
        tenant: &str,
        path: &str,
        body: &'static [u8],
    ) -> (u16, Bytes) {
        let (status, body) = store.respond(&method, tenant, path, Bytes::from_static(body));
        (status.as_u16(), body)
    }

    #[test]
    fn reads_back_what_it_received_and_404s_the_rest() {
        let store = DataStore::default();
        assert_eq!(ask(&store, Method::GET, "acme", "/d", b"").0, 404);
        assert_eq!(ask(&store, Method::PUT, "acme", "/d", b"one").0, 201);
        assert_eq!(
            ask(&store, Method::GET, "acme", "/d", b""),
            (200, Bytes::from_static(b"one"))
        );
        assert_eq!(ask(&store, Method::HEAD, "acme", "/d", b"").0, 200);
        // Per tenant: another tenant's datum at the same path is not this one's.
        assert_eq!(ask(&store, Method::GET, "globex", "/d", b"").0, 404);
        assert_eq!(ask(&store, Method::POST, "acme", "/d", b"two").0, 200);
        assert_eq!(
            ask(&store, Method::GET, "acme", "/d", b""),
            (200, Bytes::from_static(b"two"))
        );
        assert_eq!(ask(&store, Method::DELETE, "acme", "/d", b"").0, 204);
        assert_eq!(ask(&store, Method::GET, "acme", "/d", b"").0, 404);
        assert_eq!(ask(&store, Method::PATCH, "acme", "/d", b"").0, 405);
    }

    #[test]
    fn a_full_store_refuses_new_data_and_keeps_the_old() {
        let store = DataStore::default();
        {
            let mut entries = store.entries.lock().unwrap();
            for i in 0..MAX_ENTRIES {
                entries.insert(("t".into(), format!("/{i}")), Bytes::new());
            }
        }
        assert_eq!(ask(&store, Method::PUT, "t", "/new", b"x").0, 507);
        // Replacing a datum it holds is no growth.
        assert_eq!(ask(&store, Method::PUT, "t", "/0", b"x").0, 200);
        assert_eq!(store.len(), MAX_ENTRIES);
        assert_eq!(ask(&store, Method::GET, "t", "/new", b"").0, 404);
    }
}
