//! The two public entry points every algorithm shares, written once.

/// Gives an algorithm its public `place` and `place_into`. Both check `k`
/// against `n()` and clear the buffer; then the algorithm's own
/// `fill(&self, tenant, k: usize, out)` pushes exactly `k` distinct
/// indices. One copy, so no algorithm can skip the `k` check or forget to
/// clear a reused buffer.
macro_rules! entry_points {
    ($algorithm:ty, $order:literal) => {
        impl $algorithm {
            #[doc = concat!("The tenant's `k` shard indices, ", $order, ".")]
            pub fn place(
                &self,
                tenant: &str,
                k: u32,
            ) -> Result<Vec<$crate::ShardIndex>, $crate::PlacementError> {
                let mut out = Vec::with_capacity(k as usize);
                self.place_into(tenant, k, &mut out)?;
                Ok(out)
            }

            /// Like [`place`](Self::place), but writes into a caller-owned
            /// buffer (cleared first) so hot loops allocate nothing.
            pub fn place_into(
                &self,
                tenant: &str,
                k: u32,
                out: &mut Vec<$crate::ShardIndex>,
            ) -> Result<(), $crate::PlacementError> {
                $crate::error::check_k(k, self.n())?;
                out.clear();
                self.fill(tenant, k as usize, out)
            }
        }
    };
}

pub(crate) use entry_points;

/// What an algorithm's `fill` returns: `out` holds the tenant's `k`
/// indices, or placement failed.
pub(crate) type Filled = Result<(), crate::PlacementError>;

#[cfg(test)]
mod tests {
    use crate::{
        Fleet, HmacModulo, PlacementError, PlacementKey, Rendezvous, Shard, ShardIndex, ZoneAware,
    };

    /// Each algorithm through its entry points: `n` and `place_into`.
    type Entry<'a> = (
        u32,
        Box<dyn Fn(u32, &mut Vec<ShardIndex>) -> Result<(), PlacementError> + 'a>,
    );

    #[test]
    fn every_algorithm_checks_k_and_clears_the_buffer() {
        let key = PlacementKey::from_bytes(b"unit-test key".to_vec());
        let zoned = Fleet::new(
            (0..6)
                .map(|i| Shard::new(format!("s{i}")).in_zone(["a", "b", "c"][i % 3]))
                .collect(),
        )
        .unwrap();
        let hmac = HmacModulo::new(&key, 5).unwrap();
        let hrw = Rendezvous::new(&key, &Fleet::uniform(4).unwrap());
        let zoned_hrw = ZoneAware::rendezvous(&key, &zoned).unwrap();
        let zoned_hmac = ZoneAware::hmac_modulo(&key, &zoned).unwrap();
        let entries: [Entry; 4] = [
            (hmac.n(), Box::new(|k, out| hmac.place_into("t", k, out))),
            (hrw.n(), Box::new(|k, out| hrw.place_into("t", k, out))),
            (
                zoned_hrw.n(),
                Box::new(|k, out| zoned_hrw.place_into("t", k, out)),
            ),
            (
                zoned_hmac.n(),
                Box::new(|k, out| zoned_hmac.place_into("t", k, out)),
            ),
        ];
        for (n, place_into) in entries {
            let mut out = vec![ShardIndex::MAX; 3];
            for k in [0, n + 1] {
                assert_eq!(
                    place_into(k, &mut out),
                    Err(PlacementError::KOutOfRange {
                        k: k.into(),
                        n: n.into()
                    })
                );
            }
            for k in [1, n] {
                place_into(k, &mut out).unwrap();
                assert_eq!(out.len(), k as usize, "a reused buffer is cleared first");
                let mut distinct = out.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), k as usize);
                assert!(out.iter().all(|&index| index < n));
            }
        }
    }
}
