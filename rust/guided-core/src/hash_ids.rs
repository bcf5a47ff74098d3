//! Ids of stored values, found by their hashes.
//!
//! Two places keep a list of distinct values and must find a new value's id in it, or learn
//! that it is new: the determinizer's state keys and the token index's masks. A map from values
//! to ids would hold each value twice (or a second pointer to it), hash a new value once to look
//! and again to insert, and hash every value it holds again each time it grows; a map from
//! hashes to lists of ids allocates a list per value. [`IdsByHash`] keeps only `(hash, id)`
//! pairs and asks its caller whether the value behind a candidate id is the one sought: the
//! value is hashed once, by the caller, however the lookup ends, and growth moves pairs.
//!
//! Cost: 16 bytes a slot; a lookup compares values only where the full 64-bit hashes agree.

use hashbrown::HashTable;

/// Ids by the hashes of the values they name; the values stay with the caller.
#[derive(Clone, Debug, Default)]
pub(crate) struct IdsByHash {
    table: HashTable<(u64, u32)>,
}

impl IdsByHash {
    /// A table with room for `n` ids before it grows.
    pub(crate) fn with_capacity(n: usize) -> Self {
        IdsByHash {
            table: HashTable::with_capacity(n),
        }
    }

    /// The id, among those added with `hash`, for which `is_it` holds.
    pub(crate) fn find(&self, hash: u64, mut is_it: impl FnMut(u32) -> bool) -> Option<u32> {
        self.table
            .find(hash, |&(h, id)| h == hash && is_it(id))
            .map(|&(_, id)| id)
    }

    /// Adds `id`, whose value hashes to `hash`; the caller has found no id for that value.
    pub(crate) fn insert(&mut self, hash: u64, id: u32) {
        self.table.insert_unique(hash, (hash, id), |&(h, _)| h);
    }

    /// Heap bytes held.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<(u64, u32)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_found_by_hash_and_value_even_where_hashes_collide() {
        let values = ["a", "b", "c"];
        let mut ids = IdsByHash::with_capacity(1);
        // "a" and "b" share a hash, as two values may.
        let hash = |v: &str| if v == "c" { 2 } else { 1 };
        for (id, v) in values.iter().enumerate() {
            assert_eq!(ids.find(hash(v), |i| values[i as usize] == *v), None);
            ids.insert(hash(v), id as u32);
        }
        for (id, v) in values.iter().enumerate() {
            assert_eq!(
                ids.find(hash(v), |i| values[i as usize] == *v),
                Some(id as u32)
            );
        }
        assert_eq!(ids.find(1, |i| values[i as usize] == "c"), None);
        assert!(ids.memory_bytes() >= 3 * 16);
    }
}
