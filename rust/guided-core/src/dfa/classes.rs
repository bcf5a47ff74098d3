//! Byte classes: the alphabet an automaton actually needs.
//!
//! A DFA over bytes has 256 columns, but a pattern rarely tells more than a few dozen bytes apart.
//! In `[0-9]+` the ten digits behave identically in every state, and so do the 246 other bytes.
//! Grouping bytes that no transition separates into classes shrinks the transition table by that
//! factor (a JSON-schema DFA typically needs 20 to 60 classes, not 256), which makes subset
//! construction and minimization loop over classes instead of bytes, and keeps the dense table
//! small enough to stay in cache.
//!
//! Classes are built two ways. Before determinization, [`ByteClassBuilder`] marks the boundaries of
//! every byte range an NFA transition uses; the runs between boundaries are classes. That is cheap
//! and always sound, but it can keep apart bytes that end up behaving the same (two runs that lead
//! to the same states). After minimization, [`ByteClasses::from_keys`] regroups bytes whose whole
//! DFA column is identical, which gives the coarsest classes the language allows, possibly
//! non-contiguous. That second grouping is what makes two DFAs for the same language identical
//! down to their class maps.
//!
//! The cost is a 256-byte map per automaton and one lookup per byte read.

use rustc_hash::FxHashMap;
use std::hash::Hash;

/// A partition of the 256 byte values into classes numbered from 0, in order of their smallest
/// member.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ByteClasses {
    map: [u8; 256],
    /// The smallest byte of each class.
    reps: Vec<u8>,
}

impl ByteClasses {
    /// Every byte in a class of its own.
    pub fn singletons() -> Self {
        Self::from_keys(|b| b)
    }

    /// Groups bytes by `key`: two bytes share a class exactly when their keys are equal.
    pub fn from_keys<K: Hash + Eq>(mut key: impl FnMut(u8) -> K) -> Self {
        let mut ids: FxHashMap<K, u8> = FxHashMap::default();
        let mut map = [0u8; 256];
        let mut reps = Vec::new();
        for b in 0..=255u8 {
            let next = reps.len();
            let id = *ids.entry(key(b)).or_insert_with(|| {
                reps.push(b);
                // At most 256 distinct keys, so the id fits a byte.
                next as u8
            });
            map[b as usize] = id;
        }
        ByteClasses { map, reps }
    }

    /// The class of `byte`.
    #[inline]
    pub fn get(&self, byte: u8) -> u8 {
        self.map[byte as usize]
    }

    /// How many classes there are (1 to 256).
    pub fn num_classes(&self) -> usize {
        self.reps.len()
    }

    /// The smallest byte of `class`, or `None` when there is no such class.
    pub fn representative(&self, class: u8) -> Option<u8> {
        self.reps.get(class as usize).copied()
    }

    /// The smallest byte of every class, indexed by class.
    pub fn representatives(&self) -> &[u8] {
        &self.reps
    }

    /// The byte-to-class map.
    pub fn as_map(&self) -> &[u8; 256] {
        &self.map
    }

    /// Every byte of `class`, in increasing order.
    pub fn members(&self, class: u8) -> impl Iterator<Item = u8> + '_ {
        (0..=255u8).filter(move |&b| self.map[b as usize] == class)
    }
}

/// Collects the byte ranges an automaton distinguishes and turns them into contiguous classes.
#[derive(Clone, Debug)]
pub struct ByteClassBuilder {
    /// `ends[b]`: some range ends at `b`, so `b` and `b + 1` must be in different classes.
    ends: [bool; 256],
}

impl Default for ByteClassBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ByteClassBuilder {
    /// A builder that distinguishes nothing yet (one class).
    pub fn new() -> Self {
        ByteClassBuilder { ends: [false; 256] }
    }

    /// Records that `start..=end` is matched as a unit somewhere.
    pub fn add_range(&mut self, start: u8, end: u8) {
        if start > 0 {
            self.ends[start as usize - 1] = true;
        }
        self.ends[end as usize] = true;
    }

    /// Records every boundary of `classes`, whose classes need not be runs of bytes: a split
    /// wherever the class changes makes each run of the result lie inside one of its classes.
    pub fn add_partition(&mut self, classes: &ByteClasses) {
        for b in 0..255usize {
            if classes.map[b] != classes.map[b + 1] {
                self.ends[b] = true;
            }
        }
    }

    /// The classes: maximal runs of bytes with no recorded boundary between them.
    pub fn build(&self) -> ByteClasses {
        let mut class = 0u16;
        let mut map = [0u8; 256];
        let mut reps = vec![0u8];
        for (b, slot) in map.iter_mut().enumerate() {
            *slot = class as u8;
            if self.ends[b] && b < 255 {
                class += 1;
                reps.push(b as u8 + 1);
            }
        }
        ByteClasses { map, reps }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_splits_at_range_edges() {
        let mut b = ByteClassBuilder::new();
        b.add_range(b'a', b'z');
        b.add_range(b'0', b'9');
        b.add_range(b'x', b'x');
        let c = b.build();
        // [0, '0'), '0'..='9', ('9', 'a'), 'a'..'x', 'x', 'y'..='z', ('z', 255]
        assert_eq!(c.num_classes(), 7);
        assert_eq!(c.get(b'0'), c.get(b'9'));
        assert_ne!(c.get(b'/'), c.get(b'0'));
        assert_ne!(c.get(b'w'), c.get(b'x'));
        assert_ne!(c.get(b'x'), c.get(b'y'));
        assert_eq!(c.get(b'y'), c.get(b'z'));
        assert_eq!(c.get(0), c.get(b'/'));
        assert_eq!(c.get(b'{'), c.get(255));
        for class in 0..c.num_classes() as u8 {
            let rep = c
                .representative(class)
                .unwrap_or_else(|| panic!("class {class}"));
            assert_eq!(c.get(rep), class);
            assert_eq!(c.members(class).next(), Some(rep));
        }
        assert_eq!(c.representative(7), None);
    }

    #[test]
    fn builder_edges_at_the_ends_of_the_byte_range() {
        let mut b = ByteClassBuilder::new();
        b.add_range(0, 0);
        b.add_range(255, 255);
        let c = b.build();
        assert_eq!(c.num_classes(), 3);
        assert_eq!(c.representatives(), &[0, 1, 255]);
        assert_eq!(ByteClassBuilder::new().build().num_classes(), 1);
    }

    #[test]
    fn keys_group_non_contiguous_bytes() {
        let c = ByteClasses::from_keys(|b| b.is_ascii_digit() || b == b'x');
        assert_eq!(c.num_classes(), 2);
        assert_eq!(c.get(b'x'), c.get(b'5'));
        assert_ne!(c.get(b'y'), c.get(b'5'));
        assert_eq!(c.members(c.get(b'x')).count(), 11);
        assert_eq!(ByteClasses::singletons().num_classes(), 256);
        assert_eq!(ByteClasses::singletons().get(200), 200);
    }
}
