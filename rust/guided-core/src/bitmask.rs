//! Packed token sets: one bit per token id, 32 ids to a word.
//!
//! The layout is the one every engine in the field already uses for grammar masks (xgrammar,
//! llguidance, outlines-core, vLLM): token `t` is bit `t % 32`, least significant first, of word
//! `t / 32`, and a set bit means "allowed". Matching it exactly lets an engine hand guided the same
//! `int32` buffer it would hand any of them, and apply it with the same kernel.
//!
//! A set for a 200k-token vocabulary is 6,250 words (25 KB). Sets are built once per automaton
//! state and then copied, never rebuilt, so the representation favours copying: a plain `Vec<u32>`
//! whose words go to the caller's buffer with one `copy_from_slice`. A finished [`Mask`] keeps
//! the form that is cheapest to make and keep: the words, the list of a few ids, or, for the
//! many states inside a counted string whose masks are one large set the vocabulary's slices
//! keep and a few hundred ids besides, that set shared and the ids (`Mask::Shared`), so that
//! no state copies or hashes the 25 KB to make its own.

use std::sync::Arc;

/// A set of token ids below a fixed vocabulary size, as packed 32-bit words.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenSet {
    words: Vec<u32>,
    vocab_size: usize,
}

/// Number of 32-bit words a mask for `vocab_size` tokens needs.
pub fn words_for(vocab_size: usize) -> usize {
    vocab_size.div_ceil(32)
}

impl TokenSet {
    /// The empty set over `vocab_size` ids.
    pub fn empty(vocab_size: usize) -> Self {
        TokenSet {
            words: vec![0; words_for(vocab_size)],
            vocab_size,
        }
    }

    /// Removes every id.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Number of ids the set ranges over.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Adds `id`; ids at or beyond the vocabulary size are ignored.
    #[inline]
    pub fn insert(&mut self, id: u32) {
        let id = id as usize;
        if id < self.vocab_size {
            self.words[id >> 5] |= 1 << (id & 31);
        }
    }

    /// Whether `id` is in the set.
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        let id = id as usize;
        id < self.vocab_size && self.words[id >> 5] & (1 << (id & 31)) != 0
    }

    /// Adds every id of `other` (which must range over the same vocabulary size).
    pub fn union_with(&mut self, other: &TokenSet) {
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
    }

    /// Number of ids in the set.
    pub fn len(&self) -> usize {
        self.words.chunks(CHUNK).map(count_ids).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The packed words.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// The ids in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros();
                w &= w - 1;
                Some((i as u32) * 32 + bit)
            })
        })
    }

    /// Bytes of heap memory the set holds.
    pub fn memory_bytes(&self) -> usize {
        self.words.capacity() * 4
    }

    /// Writes the set into `out`, which must be exactly as wide as the set.
    pub fn write_to(&self, out: &mut [u32]) {
        out.copy_from_slice(&self.words);
    }
}

/// A finished mask as an index keeps it: dense words, the list of allowed ids when there are
/// so few that the list is smaller (a digit state allows ten tokens out of 200k; storing 25 KB
/// for it would make an index of many such states far larger than it needs to be), or a dense
/// set shared with others and the few ids it lacks.
///
/// The shared form is what a state inside a counted string allows: the members of its slice
/// within the characters left (a set the vocabulary's slice keeps, most of the vocabulary) and
/// the tokens that close the string there. Each count's mask differs from the next one's, so
/// each would otherwise be a copy of the slice's set (19 KB at 150k tokens) made, hashed and
/// stored per count; sharing it costs the list of the ids added.
#[derive(Debug, Clone)]
pub enum Mask {
    /// One bit per token. [`Mask::from_set`] keeps this form only for a set of at least a
    /// quarter as many ids as words, and [`MaskBuilder`] relies on that: a set it adds in this
    /// form is known to finish dense without counting it.
    Dense(Arc<TokenSet>),
    /// The allowed ids: ascending from [`Mask::from_set`], as found from a [`MaskBuilder`].
    Sparse {
        /// The ids, possibly repeated.
        ids: Box<[u32]>,
        /// Number of ids the mask ranges over.
        vocab_size: usize,
    },
    /// The ids of a dense set shared with other masks, and others.
    Shared {
        /// The shared set, of the dense form's size.
        base: Arc<TokenSet>,
        /// The ids allowed besides, in no particular order, possibly repeated or in the set.
        ids: Box<[u32]>,
    },
}

/// `ids` ascending, each once.
fn distinct(ids: &[u32]) -> Vec<u32> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Masks are equal when they allow the same ids, whatever their forms. A set is dense or
/// sparse in one way only ([`Mask::from_set`]), but lists may hold their ids in any order, and
/// a shared mask may equal a dense one: those are compared as sets.
impl PartialEq for Mask {
    fn eq(&self, other: &Mask) -> bool {
        match (self, other) {
            (Mask::Dense(a), Mask::Dense(b)) => a == b,
            (Mask::Sparse { ids: a, .. }, Mask::Sparse { ids: b, .. }) => {
                a == b || distinct(a) == distinct(b)
            }
            (Mask::Shared { base: a, ids: x }, Mask::Shared { base: b, ids: y })
                if Arc::ptr_eq(a, b) && x == y =>
            {
                true
            }
            _ => self.vocab_size() == other.vocab_size() && self.packed() == other.packed(),
        }
    }
}

impl Eq for Mask {}

impl Mask {
    /// The compact form of `set`.
    pub fn from_set(set: TokenSet) -> Self {
        // A sparse id costs a word; switch when the list is under a quarter of the dense size.
        // Ids are listed a chunk at a time, skipping the chunk's zero words; counting a chunk's
        // non-zero words is a compare per word in vector code. Bits are counted only once the
        // non-zero words could reach the bound, and then once, over the rest of the set,
        // stopping as soon as the bound is passed: a value state's two thousand ids spread
        // over a 200k vocabulary were listed chunk by chunk, each chunk counted besides, and
        // the list thrown away at the end (12 us, against 2 us for the count).
        let words = set.words();
        let bound = words.len().div_ceil(4);
        let mut ids = Vec::new();
        let mut counted = false;
        for (k, chunk) in words.chunks(CHUNK).enumerate() {
            let nonzero = chunk.iter().filter(|&&w| w != 0).count();
            if nonzero == 0 {
                continue;
            }
            if !counted && ids.len() + 32 * nonzero >= bound {
                counted = true;
                let mut n = ids.len();
                for rest in words[k * CHUNK..].chunks(CHUNK) {
                    n += count_ids(rest);
                    if n >= bound {
                        return Mask::Dense(Arc::new(set));
                    }
                }
            }
            for (i, &w) in chunk.iter().enumerate().filter(|(_, &w)| w != 0) {
                let base = ((k * CHUNK + i) * 32) as u32;
                let mut w = w;
                while w != 0 {
                    ids.push(base + w.trailing_zeros());
                    w &= w - 1;
                }
            }
        }
        Mask::Sparse {
            ids: ids.into_boxed_slice(),
            vocab_size: set.vocab_size(),
        }
    }

    /// Number of ids the mask ranges over.
    pub fn vocab_size(&self) -> usize {
        match self {
            Mask::Dense(set) | Mask::Shared { base: set, .. } => set.vocab_size(),
            Mask::Sparse { vocab_size, .. } => *vocab_size,
        }
    }

    /// Writes the mask into `out`, exactly `ceil(vocab_size/32)` words.
    pub fn write_to(&self, out: &mut [u32]) {
        match self {
            Mask::Dense(set) => set.write_to(out),
            Mask::Sparse { ids, .. } => write_only(out, ids),
            Mask::Shared { base, ids } => {
                base.write_to(out);
                add_ids(out, ids);
            }
        }
    }

    /// The mask as packed words.
    fn packed(&self) -> Vec<u32> {
        let mut words = vec![0; words_for(self.vocab_size())];
        self.write_to(&mut words);
        words
    }

    /// Whether `id` is allowed.
    pub fn contains(&self, id: u32) -> bool {
        match self {
            Mask::Dense(set) => set.contains(id),
            Mask::Sparse { ids, .. } => ids.contains(&id),
            Mask::Shared { base, ids } => base.contains(id) || ids.contains(&id),
        }
    }

    /// Number of allowed ids.
    pub fn len(&self) -> usize {
        match self {
            Mask::Dense(set) => set.len(),
            Mask::Sparse { ids, .. } => distinct(ids).len(),
            Mask::Shared { base, ids } => {
                let besides = distinct(ids).into_iter().filter(|&id| !base.contains(id));
                base.len() + besides.count()
            }
        }
    }

    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        match self {
            Mask::Sparse { ids, .. } => ids.is_empty(),
            _ => self.len() == 0,
        }
    }

    /// The allowed ids, ascending.
    pub fn ids(&self) -> Vec<u32> {
        match self {
            Mask::Dense(set) => set.iter().collect(),
            Mask::Sparse { ids, .. } => distinct(ids),
            Mask::Shared { base, ids } => {
                let mut all = TokenSet::clone(base);
                ids.iter().for_each(|&id| all.insert(id));
                all.iter().collect()
            }
        }
    }

    /// Bytes of heap memory the mask holds on its own (a shared set is its owner's).
    pub fn memory_bytes(&self) -> usize {
        match self {
            Mask::Dense(set) => set.memory_bytes(),
            Mask::Sparse { ids, .. } | Mask::Shared { ids, .. } => ids.len() * 4,
        }
    }
}

/// A mask being computed: the allowed ids as a list while they are few, packed words past that.
///
/// Most states allow either a handful of tokens (a digit, a keyword's next letter) or a large
/// part of the vocabulary (inside a string). Starting from packed words costs the few-token
/// states three passes over the whole vocabulary's words (zeroing them, merging a slice's set
/// into them, and scanning them again to find that a list is smaller), each as long as the
/// vocabulary, for ten ids. A list costs nothing per vocabulary size, so the ids stay in it
/// until there are as many as make a set dense; past that they move to packed words, and the
/// set is built, and compacted by [`Mask::from_set`], exactly as it was. A sparse mask added
/// whole (a class slice's tokens: the thousand numbers up to three digits of a 200k vocabulary)
/// is copied into the list as long as it fits. A finished list is kept as it was found, not
/// sorted: a walk finds ids in the order of their bytes, not of their numbers, and sorting the
/// few hundred of a value state or a tool call's arguments cost more than the walk (5 us for
/// 571 ids over o200k, by radix), where writing them into a caller's row needs no order; so
/// masks are compared as sets, and the index's cache hashes a list without regard to order.
/// The set is the same as packing would give: a list is only kept while it is shorter than the
/// bound at which [`Mask::from_set`] goes dense.
///
/// The first dense mask added is not copied but kept as the base of a [`Mask::Shared`], with
/// the list holding the ids added besides, as long as they stay under the same bound; past it,
/// or when a second dense mask comes, the base is copied into packed words after all.
#[derive(Debug, Clone)]
pub struct MaskBuilder {
    ids: Vec<u32>,
    words: Option<TokenSet>,
    /// The dense set the list's ids are added to, while there are no packed words.
    base: Option<Arc<TokenSet>>,
    vocab_size: usize,
    /// Most ids the list may hold: one less than the bound at which a set is dense.
    most: usize,
    /// Whether a dense [`Mask`] was added, so the set is past the bound and finishes dense
    /// without the count [`Mask::from_set`] makes (a digit state's thousand numbers spread
    /// over the vocabulary cost that count a few chunks of words before it gives up).
    dense: bool,
}

impl MaskBuilder {
    /// The empty set over `vocab_size` ids.
    pub fn new(vocab_size: usize) -> Self {
        // Below a quarter of the words, `Mask::from_set` keeps a list: a list is never kept
        // past that, so the two agree on every set.
        let most = words_for(vocab_size).div_ceil(4).saturating_sub(1);
        MaskBuilder {
            // The list's room is taken at once (6 KB at 200k tokens, not cleared): a mask's ids
            // arrive a walk or a member length at a time, and a list grown as they came was
            // reallocated and copied at every doubling (a bounded string's body masks spent an
            // eighth of their instructions so).
            ids: Vec::with_capacity(most),
            words: None,
            base: None,
            vocab_size,
            most,
            dense: false,
        }
    }

    /// Removes every id.
    pub fn clear(&mut self) {
        self.ids.clear();
        self.words = None;
        self.base = None;
        self.dense = false;
    }

    /// Adds `id`; ids at or beyond the vocabulary size are ignored.
    #[inline]
    pub fn insert(&mut self, id: u32) {
        match &mut self.words {
            Some(words) => words.insert(id),
            None if (id as usize) < self.vocab_size => {
                self.ids.push(id);
                if self.ids.len() > self.most {
                    self.pack();
                }
            }
            None => {}
        }
    }

    /// Adds every id of `ids` (ids at or beyond the vocabulary size are ignored).
    pub fn extend(&mut self, ids: &[u32]) {
        if self.words.is_none() && self.ids.len() + ids.len() <= self.most {
            let size = self.vocab_size;
            // The ids of a slice's members (a digit state's thousand numbers) are all in range:
            // found so by one pass that vector code runs, and copied at once. A filtered
            // extend pushes them one by one and grows the list several times on the way.
            let largest = ids.iter().fold(0, |m, &id| m.max(id));
            if (largest as usize) < size {
                self.ids.extend_from_slice(ids);
            } else {
                self.ids
                    .extend(ids.iter().filter(|&&id| (id as usize) < size));
            }
        } else {
            ids.iter().for_each(|&id| self.insert(id));
        }
    }

    /// Adds every id of `mask` (which must range over the same vocabulary size).
    pub fn add_mask(&mut self, mask: &Mask) {
        match mask {
            Mask::Dense(set) => self.add_dense(set),
            Mask::Sparse { ids, .. } => self.extend(ids),
            Mask::Shared { base, ids } => {
                self.add_dense(base);
                self.extend(ids);
            }
        }
    }

    /// Adds a dense set: kept shared if it is the first, merged into packed words otherwise.
    fn add_dense(&mut self, set: &Arc<TokenSet>) {
        self.dense = true;
        if self.words.is_none() && self.base.is_none() {
            self.base = Some(Arc::clone(set));
        } else {
            self.pack().union_with(set);
        }
    }

    /// Adds every id of `set` (which must range over the same vocabulary size).
    pub fn add_set(&mut self, set: &TokenSet) {
        if self.words.is_none() && self.base.is_none() {
            // The first set is copied with the listed ids put in after it: one pass over the
            // words rather than clearing them and merging into them.
            let mut words = set.clone();
            self.ids.drain(..).for_each(|id| words.insert(id));
            self.words = Some(words);
        } else {
            self.pack().union_with(set);
        }
    }

    /// The packed words, made from the base and the list if they are not yet.
    fn pack(&mut self) -> &mut TokenSet {
        let (ids, base, vocab_size) = (&mut self.ids, &mut self.base, self.vocab_size);
        self.words.get_or_insert_with(|| {
            let mut words = match base.take() {
                Some(base) => TokenSet::clone(&base),
                None => TokenSet::empty(vocab_size),
            };
            ids.drain(..).for_each(|id| words.insert(id));
            words
        })
    }

    /// The finished mask, in the form [`Mask::from_set`] gives the same set, or shared.
    pub fn finish(self) -> Mask {
        match (self.words, self.base) {
            (Some(words), _) if self.dense => Mask::Dense(Arc::new(words)),
            (Some(words), _) => Mask::from_set(words),
            (None, Some(base)) => {
                // Left as found: a count's few hundred ids come from several walks and the
                // members since a checkpoint, and sorting them, or checking each against the
                // set, cost more than the copy of the set saves.
                Mask::Shared {
                    base,
                    ids: self.ids.into_boxed_slice(),
                }
            }
            (None, None) => Mask::Sparse {
                ids: self.ids.into_boxed_slice(),
                vocab_size: self.vocab_size,
            },
        }
    }
}

/// Words [`Mask::from_set`] lists or counts at a time.
const CHUNK: usize = 256;

/// The ids set in `words`, at most a [`CHUNK`] of them (so the sum fits in 32 bits). Counted in
/// pairs of words: the portable build has no population-count instruction, and the bit tricks
/// that replace it vectorize over 64-bit lanes, at about twice the speed of 32-bit ones summed
/// into a `usize` (2.6 against 5.6 us over 6,251 words).
fn count_ids(words: &[u32]) -> usize {
    let pairs = words.chunks_exact(2);
    let odd: u32 = pairs.remainder().iter().map(|w| w.count_ones()).sum();
    let paired: u32 = pairs
        .map(|p| (u64::from(p[0]) | u64::from(p[1]) << 32).count_ones())
        .sum();
    (paired + odd) as usize
}

/// Writes a mask allowing only `ids` (ids outside the width are ignored) into `out`.
pub fn write_only(out: &mut [u32], ids: &[u32]) {
    out.fill(0);
    add_ids(out, ids);
}

/// Sets the bits of `ids` in `out` (ids outside the width are ignored).
pub fn add_ids(out: &mut [u32], ids: &[u32]) {
    for &id in ids {
        let id = id as usize;
        if let Some(word) = out.get_mut(id >> 5) {
            *word |= 1 << (id & 31);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_lsb_first_within_words() {
        let mut s = TokenSet::empty(70);
        for id in [0, 31, 32, 69, 70, 1000] {
            s.insert(id);
        }
        assert_eq!(s.words(), &[1 | 1 << 31, 1, 1 << 5]);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 31, 32, 69]);
        assert_eq!(s.len(), 4);
        assert!(s.contains(69) && !s.contains(70) && !s.contains(1));
    }

    #[test]
    fn sparse_and_dense_masks_write_the_same_words() {
        let mut few = TokenSet::empty(1000);
        for id in [3, 64, 999] {
            few.insert(id);
        }
        let mut many = TokenSet::empty(64);
        (0..40).for_each(|i| many.insert(i));
        for set in [few, many] {
            let mask = Mask::from_set(set.clone());
            let mut out = vec![u32::MAX; set.words().len()];
            mask.write_to(&mut out);
            assert_eq!(out, set.words());
            assert_eq!(mask.len(), set.len());
            assert_eq!(mask.ids(), set.iter().collect::<Vec<_>>());
        }
        assert!(matches!(
            Mask::from_set(TokenSet::empty(1000)),
            Mask::Sparse { .. }
        ));
        // 1000 ids take 32 words: sparse below a quarter of that, eight ids.
        for (n, sparse) in [(7, true), (8, false), (900, false)] {
            let mut set = TokenSet::empty(1000);
            (0..n).for_each(|i| set.insert(i * 997 % 1000));
            let mask = Mask::from_set(set);
            assert_eq!(matches!(mask, Mask::Sparse { .. }), sparse, "{n} ids");
            assert_eq!(mask.len(), n as usize);
        }
        // Across chunks: 200,000 ids take 6,250 words, so 1,563 ids make a set dense, whether
        // they are spread over every chunk, packed into a few words of the last, or a mix; and
        // the same with 6,251 words, the last one unpaired where bits are counted in pairs.
        for v in [200_000u32, 200_019] {
            let spread = |n: u32| (0..n).map(move |i| (i as u64 * 7919 % v as u64) as u32);
            let packed = |n: u32| (v - n)..v;
            for n in [0, 1, 1562, 1563, 5000] {
                let mixed = spread(n / 2).chain(packed(n - n / 2)).collect::<Vec<_>>();
                for ids in [spread(n).collect::<Vec<_>>(), packed(n).collect(), mixed] {
                    let distinct = ids.iter().collect::<std::collections::BTreeSet<_>>().len();
                    let mut set = TokenSet::empty(v as usize);
                    ids.iter().for_each(|&i| set.insert(i));
                    assert_eq!(set.len(), distinct);
                    let mask = Mask::from_set(set.clone());
                    let sparse = matches!(mask, Mask::Sparse { .. });
                    assert_eq!(sparse, distinct < 1563, "{distinct} ids over {v}");
                    assert_eq!(mask.ids(), set.iter().collect::<Vec<_>>());
                }
            }
        }
    }

    /// One way of adding ids to a builder, and to the packed set it must agree with.
    #[derive(Debug, Clone)]
    enum Add {
        Id(u32),
        List(Vec<u32>),
        Mask(Vec<u32>),
        Set(Vec<u32>),
    }

    fn add_strategy(v: u32) -> impl proptest::strategy::Strategy<Value = Add> {
        use proptest::prelude::*;
        // Ids a little past the vocabulary too, which both ignore; runs of neighbours, so that
        // sets past the list's length and past the dense bound are common.
        let id = 0..v + 3;
        let run = (0..v + 3, 0..1600u32).prop_map(|(a, n)| (a..a.saturating_add(n)).collect());
        // Lists short enough to stay lists, some of them past the vocabulary's end.
        let short = (0..v + 3, 0..8u32).prop_map(|(a, n)| (a..a + n).collect());
        let at_end = (v.saturating_sub(8)..v + 3, 0..8u32).prop_map(|(a, n)| (a..a + n).collect());
        prop_oneof![
            4 => id.prop_map(Add::Id),
            1 => prop_oneof![short, at_end].prop_map(Add::List),
            1 => run.clone().prop_map(Add::Mask),
            1 => run.prop_map(Add::Set),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        #[test]
        fn a_builder_finishes_as_the_packed_set_compacts(
            (v, adds) in proptest::strategy::Strategy::prop_flat_map(0..60_000u32, |v| {
                (proptest::strategy::Just(v), proptest::collection::vec(add_strategy(v), 0..40))
            }),
            clear_at in proptest::option::of(0..40usize),
        ) {
            let size = v as usize;
            let packed = |ids: &[u32]| {
                let mut set = TokenSet::empty(size);
                ids.iter().for_each(|&id| set.insert(id));
                set
            };
            let mut builder = MaskBuilder::new(size);
            let mut set = TokenSet::empty(size);
            for (k, add) in adds.into_iter().enumerate() {
                if clear_at == Some(k) {
                    builder.clear();
                    set.clear();
                }
                let ids = match add {
                    Add::Id(id) => {
                        builder.insert(id);
                        vec![id]
                    }
                    Add::List(ids) => {
                        builder.extend(&ids);
                        ids
                    }
                    Add::Mask(ids) => {
                        builder.add_mask(&Mask::from_set(packed(&ids)));
                        ids
                    }
                    Add::Set(ids) => {
                        builder.add_set(&packed(&ids));
                        ids
                    }
                };
                set.union_with(&packed(&ids));
            }
            // The same ids, and a list exactly where the packed set compacts to one; a dense
            // mask added first is shared, not copied, and reads as the packed set does.
            let (finished, expected) = (builder.finish(), Mask::from_set(set));
            let sparse = |m: &Mask| matches!(m, Mask::Sparse { .. });
            proptest::prop_assert_eq!(sparse(&finished), sparse(&expected));
            proptest::prop_assert_eq!(finished.ids(), expected.ids());
            proptest::prop_assert_eq!(finished.len(), expected.len());
            let mut written = vec![u32::MAX; words_for(size)];
            finished.write_to(&mut written);
            proptest::prop_assert_eq!(written, expected.packed());
            for id in expected.ids().iter().take(50).chain(&[0, v / 2, v.saturating_sub(1), v]) {
                proptest::prop_assert_eq!(finished.contains(*id), expected.contains(*id));
            }
            proptest::prop_assert_eq!(&finished, &expected);
        }
    }

    /// A whole sparse mask goes into the list only while the list stays below the dense bound,
    /// and ids taken one by one after it pack the list exactly when it would reach it.
    #[test]
    fn a_builder_list_stops_exactly_at_the_dense_bound() {
        // 200,000 ids take 6,250 words: 1,563 ids make a set dense.
        let v = 200_000usize;
        let mask = |ids: std::ops::Range<u32>| {
            let mut set = TokenSet::empty(v);
            ids.for_each(|id| set.insert(id));
            Mask::from_set(set)
        };
        let below = mask(0..1562);
        assert!(matches!(below, Mask::Sparse { .. }));
        for (before, after, dense) in [
            (vec![], vec![], false),
            (vec![199_999], vec![], true),
            (vec![], vec![199_999], true),
            (vec![5], vec![7], false),
            (vec![], (1562..1900).collect(), true),
        ] {
            let mut builder = MaskBuilder::new(v);
            before.iter().for_each(|&id| builder.insert(id));
            builder.add_mask(&below);
            after.iter().for_each(|&id| builder.insert(id));
            let finished = builder.finish();
            assert_eq!(
                matches!(finished, Mask::Dense(_)),
                dense,
                "{before:?} {after:?}"
            );
            let mut expected: Vec<u32> = (0..1562).chain(before).chain(after).collect();
            expected.sort_unstable();
            expected.dedup();
            assert_eq!(finished.ids(), expected);
        }
    }

    /// A finished list keeps its ids as they were found, repeats included, and reads as the
    /// set they make: its length, its ids ascending, membership, its words, and equality with
    /// the same set listed in another order or compacted from words.
    #[test]
    fn lists_are_kept_as_found_and_read_as_sets() {
        let v = 100_000usize;
        let mut builder = MaskBuilder::new(v);
        [90_001, 3, 3, 70, 5]
            .iter()
            .for_each(|&id| builder.insert(id));
        let list = builder.finish();
        let Mask::Sparse { ids, .. } = &list else {
            panic!("five ids make a list: {list:?}");
        };
        assert_eq!(&ids[..], &[90_001, 3, 3, 70, 5]);
        assert_eq!(list.len(), 4);
        assert_eq!(list.ids(), vec![3, 5, 70, 90_001]);
        assert!(list.contains(3) && list.contains(90_001) && !list.contains(4));
        let mut set = TokenSet::empty(v);
        [3, 5, 70, 90_001].iter().for_each(|&id| set.insert(id));
        let packed = Mask::from_set(set);
        assert_eq!(list, packed);
        let mut out = vec![0u32; words_for(v)];
        list.write_to(&mut out);
        assert_eq!(out, packed.packed());
        let mut other = MaskBuilder::new(v);
        [5, 70, 3, 90_001].iter().for_each(|&id| other.insert(id));
        assert_eq!(other.finish(), list);
        let mut fewer = MaskBuilder::new(v);
        [5, 70, 3, 90_002].iter().for_each(|&id| fewer.insert(id));
        assert_ne!(fewer.finish(), list);
        assert!(MaskBuilder::new(v).finish().is_empty() && !list.is_empty());
    }

    /// A dense mask added first is shared by the masks built on it, each holding only the ids
    /// it adds; masks that allow the same ids are equal whatever their forms (shared on one
    /// set or another, ids listed in any order, dense), and unequal when one id differs.
    #[test]
    fn masks_built_on_a_dense_one_share_it() {
        let v = 10_000usize;
        let dense = |ids: &mut dyn Iterator<Item = u32>| {
            let mut set = TokenSet::empty(v);
            ids.for_each(|id| set.insert(id));
            Mask::from_set(set)
        };
        let members = dense(&mut (0..5000).filter(|id| id % 3 != 0));
        let Mask::Dense(shared) = &members else {
            panic!("5000 of 10000 ids make a dense mask");
        };
        let build = |extra: &[u32]| {
            let mut builder = MaskBuilder::new(v);
            builder.add_mask(&members);
            extra.iter().for_each(|&id| builder.insert(id));
            builder.finish()
        };
        let a = build(&[9_999, 3, 7_001]);
        let b = build(&[7_001, 3, 9_999, 3, 4]);
        for m in [&a, &b] {
            let Mask::Shared { base, ids } = m else {
                panic!("a dense mask added first is shared: {m:?}");
            };
            assert!(Arc::ptr_eq(base, shared));
            assert!(ids.len() <= 5 && m.memory_bytes() <= 20);
        }
        // `b`'s 4 is in the set already: the same ids as `a`, listed otherwise.
        assert_eq!(a, b);
        assert_eq!(a.len(), members.len() + 3);
        let copied = dense(&mut members.ids().into_iter().chain([3, 7_001, 9_999]));
        assert!(matches!(copied, Mask::Dense(_)));
        assert_eq!(a, copied);
        assert_eq!(copied, a);
        let other = dense(&mut members.ids().into_iter().chain([3, 7_001]));
        assert_ne!(a, other);
        assert_ne!(a, build(&[9_999, 6, 7_001]));
        assert!(a.contains(9_999) && a.contains(4) && !a.contains(6) && !a.contains(10_000));
        let mut out = vec![0u32; words_for(v)];
        a.write_to(&mut out);
        assert_eq!(out, copied.packed());
        // Past the dense bound the added ids are packed with a copy of the set.
        let many: Vec<u32> = (5_000..5_000 + 79).collect();
        assert!(matches!(build(&many), Mask::Dense(_)));
    }

    #[test]
    fn write_only_clears_the_rest() {
        let mut out = [u32::MAX; 3];
        write_only(&mut out, &[33, 95, 96]);
        assert_eq!(out, [0, 2, 1 << 31]);
    }
}
