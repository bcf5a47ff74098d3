//! Sets of bytes as four 64-bit words.
//!
//! The index asks a set of bytes in its hottest loops: the bytes a state lives on, which first
//! bytes of the trie a walk tries, which of a hundred byte classes a row of the lazy automaton
//! reads. A bitmap answers membership with one shift, takes a range of bytes in one or two masks
//! and a union in four ORs, and lists its members in order by clearing the lowest bit of each
//! word, so a set of two members is two steps to list, not 256. It is `Copy` and 32 bytes: a
//! caller copies it freely, where a sorted list or a `Vec<bool>` would allocate.

/// A set of bytes (or of byte classes): the first bytes a walk tries
/// ([`TokenTrie::walk_heads`](crate::trie::TokenTrie::walk_heads)), the bytes a state lives on,
/// the classes a row reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSet([u64; 4]);

impl ByteSet {
    /// Every byte.
    pub const ALL: ByteSet = ByteSet([u64::MAX; 4]);
    /// No byte.
    pub const EMPTY: ByteSet = ByteSet([0; 4]);

    /// Adds `byte`.
    pub fn insert(&mut self, byte: u8) {
        self.0[usize::from(byte >> 6)] |= 1 << (byte & 63);
    }

    /// Adds every byte from `lo` to `hi`, both included.
    pub fn insert_range(&mut self, lo: u8, hi: u8) {
        // Only the words the range meets (most ranges, one): in each, the bits from the
        // range's first byte in it to its last.
        let (first, last) = (usize::from(lo >> 6), usize::from(hi >> 6));
        for k in first..=last {
            let from = if k == first { lo & 63 } else { 0 };
            let to = if k == last { hi & 63 } else { 63 };
            self.0[k] |= (u64::MAX >> (63 - (to - from))) << from;
        }
    }

    /// Takes `byte` out.
    pub fn remove(&mut self, byte: u8) {
        self.0[usize::from(byte >> 6)] &= !(1 << (byte & 63));
    }

    /// Adds every byte of `other`.
    pub fn union_with(&mut self, other: &ByteSet) {
        for (w, o) in self.0.iter_mut().zip(other.0) {
            *w |= o;
        }
    }

    /// How many bytes the set holds.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set holds no byte.
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    /// Whether `byte` is in the set.
    pub fn contains(&self, byte: u8) -> bool {
        self.0[usize::from(byte >> 6)] >> (byte & 63) & 1 != 0
    }

    /// The bytes of the set, in order.
    pub fn iter(&self) -> ByteSetIter {
        ByteSetIter {
            words: self.0,
            word: 0,
        }
    }
}

/// The bytes of a [`ByteSet`], in order: each call clears the lowest bit left. (Written out, as
/// the determinizer iterates a set per row: a chain of iterator adapters over the four words
/// cost a string's first mask 2% more.)
#[derive(Debug, Clone)]
pub struct ByteSetIter {
    words: [u64; 4],
    word: usize,
}

impl Iterator for ByteSetIter {
    type Item = u8;

    #[inline]
    fn next(&mut self) -> Option<u8> {
        while let Some(w) = self.words.get_mut(self.word) {
            if *w != 0 {
                let bit = w.trailing_zeros();
                *w &= *w - 1;
                return Some((self.word as u32 * 64 + bit) as u8);
            }
            self.word += 1;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_of_bytes_is_the_bytes_one_at_a_time() {
        for lo in 0..=255u8 {
            for hi in lo..=255u8 {
                let mut ranged = ByteSet::EMPTY;
                ranged.insert_range(lo, hi);
                let mut one_by_one = ByteSet::EMPTY;
                (lo..=hi).for_each(|b| one_by_one.insert(b));
                assert_eq!(ranged, one_by_one, "{lo}..={hi}");
                assert_eq!(ranged.len(), usize::from(hi - lo) + 1);
            }
        }
    }
}
