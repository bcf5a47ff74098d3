//! Class slices: the shortcut of [`crate::slice`] for any run of characters from a class.
//!
//! The fixed slices serve states that read almost everything alike (free text, a JSON string
//! body). Real constraints also spend long stretches inside narrower classes: an e-mail's local
//! part is `[a-zA-Z0-9._%+-]{1,64}`, a C identifier `[a-zA-Z0-9_]*`, a number `[0-9]+`, a
//! pattern-constrained string `[a-z-]{3,30}`. In such a state the characters of the class lead
//! on together and everything else leaves the run, so a fixed slice does not fit ("mixed"), and
//! the walk visits every token that starts inside the class: a counted class is a fresh walk of
//! most of the vocabulary's word pieces for each of its sixty-four states.
//!
//! A class slice is the same idea over a set `C` of ASCII bytes found from the state itself: the
//! bytes that lead to its most common successor. When every byte of `C` leads on together, step
//! after step (the chain of [`crate::slice`]), a token spelled from `C` alone of `n` bytes is
//! allowed exactly when the chain is alive for `n` steps, so those tokens come from one union of
//! a precomputed set, and the walk goes through a copy of the trie without the subtrees that hold
//! nothing else ([`TokenTrie::filtered`]: the kept nodes lie side by side, so a walk of a large
//! vocabulary reads a few thousand neighbouring nodes instead of jumping across megabytes). The
//! walk still steps through every token that leaves the run (`abc@`, `x.y`), so the answer is the
//! walk's, only cheaper.
//!
//! Where each length of the runs leads to one state (a counted class: after any `n` letters of a
//! domain name's label, the label's count `k + n`), the walk need not visit the runs at all. The
//! copy of an ASCII class keeps its exits, the nodes where a path leaves the class, grouped by
//! the run's length and the byte that leaves it ([`RunExits`]); given that [`RunChain`], a
//! group's byte is stepped once from its run's state, and a group that dies there is passed over
//! whole. Inside a label of `[a-zA-Z0-9-]{0,61}`, the letters' subtrees of a 150k vocabulary
//! hold tens of thousands of such paths and only `-` and `.` survive.
//!
//! The class is a set of ASCII bytes, where one byte is one character and a run's length is a
//! token's length, and may also hold every printable character past ASCII (a *wide* class:
//! free text before a tool call's trigger, the body of a string with a pattern, where the
//! characters of other scripts lead on like the letters do). A wide class counts characters, not
//! bytes: the trie is read through the one-character automaton of those characters, so a token
//! that ends part-way through a character, as byte-level vocabularies have many, is walked, as
//! is one holding a control character past ASCII. Without the wide part, a multilingual
//! vocabulary's tokens (most of o200k's) would all be walked in a free-text state.
//!
//! Classes are found per state, but the slice depends only on the class and the vocabulary: it
//! is built on first use, in three passes over its part of the trie (under a millisecond at 50k
//! tokens, a few at 200k), and kept with the vocabulary's tries for every index over it. The
//! vocabulary's [anchors](TokenTrie::anchors) (the leading space) have slices of their own, for
//! the state the anchor's path leads to, so a state where a space starts a word gets the same
//! shortcut below the space. A slice holds one token set per length up to [`DENSE_CHARS`] and
//! the kept nodes; the cache keeps [`MAX_CACHED_CLASSES`] of them (a wide class and its ASCII
//! part are two) and starts afresh past that, so hostile patterns with many classes cost
//! rebuilds, not memory.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;

use crate::bitmask::{Mask, MaskBuilder, TokenSet};
use crate::byte_set::ByteSet;
use crate::slice::{OneChar, DENSE_CHARS};
use crate::trie::{Anchor, RunExits, TokenTrie};

/// Fewest bytes a class needs before a slice is built for it: below that, the tokens spelled
/// from it are too few for the shortcut to pay for its build.
pub const MIN_CLASS_BYTES: u32 = 4;

/// Most class slices kept per vocabulary.
pub const MAX_CACHED_CLASSES: usize = 64;

/// A set of ASCII bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByteClass(u128);

impl ByteClass {
    /// The ASCII bytes that lead to a state's most common successor other than `dead`, with that
    /// successor, if there are at least [`MIN_CLASS_BYTES`] of them. `successors` are the state's
    /// moves grouped by where they lead, as `(successor, the bytes that lead there)`, each
    /// successor once. Ties go to the smaller state, so the choice depends on nothing but the
    /// moves.
    pub fn most_common(successors: &[(u32, u128)], dead: u32) -> Option<(Self, u32)> {
        let (target, bits) = successors
            .iter()
            .filter(|&&(t, _)| t != dead)
            .max_by_key(|&&(t, bits)| (bits.count_ones(), std::cmp::Reverse(t)))?;
        (bits.count_ones() >= MIN_CLASS_BYTES).then_some((ByteClass(*bits), *target))
    }

    /// The bytes of the class that are also in `bytes`, if there are at least
    /// [`MIN_CLASS_BYTES`] of them.
    pub fn within(self, bytes: u128) -> Option<Self> {
        let bits = self.0 & bytes;
        (bits.count_ones() >= MIN_CLASS_BYTES).then_some(ByteClass(bits))
    }

    /// The class of exactly these bytes (those past ASCII are left out).
    pub fn of(bytes: impl IntoIterator<Item = u8>) -> Self {
        ByteClass(
            bytes
                .into_iter()
                .filter(|&b| b < 128)
                .fold(0u128, |acc, b| acc | 1 << b),
        )
    }

    /// Whether every byte of `bytes` (a set as [`most_common`](Self::most_common) takes it) is
    /// in the class.
    pub fn includes(self, bytes: u128) -> bool {
        bytes & !self.0 == 0
    }

    /// Whether `byte` is in the class.
    pub fn contains(self, byte: u8) -> bool {
        byte < 128 && self.0 >> byte & 1 != 0
    }

    /// The bytes of the class, in order.
    pub fn bytes(self) -> impl Iterator<Item = u8> {
        let mut rest = self.0;
        std::iter::from_fn(move || {
            let b = rest.trailing_zeros();
            (b < 128).then(|| {
                rest &= rest - 1;
                b as u8
            })
        })
    }
}

/// A class of characters for a slice: a set of ASCII bytes and, when `wide`, every printable
/// character past ASCII (those of the printable [slice](crate::slice), read by a [`OneChar`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CharClass {
    /// The ASCII characters.
    pub ascii: ByteClass,
    /// Whether the printable characters past ASCII belong too.
    pub wide: bool,
}

/// The tokens spelled from one class, by length, and a trie of the others; over the whole trie
/// (less the subtrees of its anchors, which have slices of their own), or below one [`Anchor`].
#[derive(Debug)]
pub struct ClassSlice {
    /// `within[n]`: the tokens of at most `n` bytes spelled from the class (bytes past the
    /// anchor's, below one), for `n` up to the longest of them (and at most [`DENSE_CHARS`]).
    within: Vec<Mask>,
    /// The tokens left to walk: the slice's part of the full trie less the subtrees that hold
    /// nothing but tokens in `within`.
    rest: Rest,
    /// The node the slice lies below, if any: one of the trie's anchors, or a first byte that
    /// heads many tokens (see [`TokenTrie::big_heads`]).
    below: Option<Anchor>,
}

/// The states a class's runs lead through from one state, where every run of a length leads
/// to one state (a counted class: `[a-zA-Z0-9-]{0,61}` reads any letter alike): `states[n]`
/// after `n` bytes of the class, and past the last, `beyond` for every length if it is known
/// (the dead state once the runs die, or the state they loop on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunChain {
    /// `states[n]`: the state after any `n` bytes of the class; `states[0]` the start.
    pub states: Vec<u32>,
    /// The state after more bytes than `states` holds, where the chain ended there.
    pub beyond: Option<u32>,
}

impl RunChain {
    /// The state after `n` bytes of the class, for `n` within [`reaches`](Self::reaches) (the
    /// only lengths a walk asks for).
    fn at(&self, n: usize) -> u32 {
        match (self.states.get(n), self.beyond) {
            (Some(&s), _) | (None, Some(s)) => s,
            // Past what `reaches` admits, which no walk asks: the last state known.
            (None, None) => self.states.last().copied().unwrap_or(0),
        }
    }

    /// Whether the chain knows the state after every run of up to `n` bytes.
    fn reaches(&self, n: usize) -> bool {
        self.beyond.is_some() || n < self.states.len()
    }
}

/// How a [`ClassSlice`] keeps the tokens left to walk.
#[derive(Debug)]
enum Rest {
    /// A copy of the nodes left below the first bytes in the class (`heads`, the children of
    /// the root or anchor spelled by one), when they are few: a walk reads them side by side.
    /// The subtrees of the other first bytes are walked in the full trie, where a state in the
    /// class mostly dies at their first byte. For an ASCII class, also where the copy's paths
    /// leave the class (`exits`), for walks along a [`RunChain`].
    Copy {
        copy: TokenTrie,
        heads: Vec<usize>,
        exits: Option<RunExits>,
    },
    /// One bit per node of the slice's part of the full trie, from node `first` on: the subtrees
    /// to pass over, when a copy would hold most of the part (a narrow class, such as digits,
    /// leaves out little) and would cost more memory than it saves time.
    Bits { first: usize, bits: Vec<u64> },
}

/// A class slice copies the nodes left to walk when they are at most one in this many of its
/// part of the trie.
const COPY_SHARE: usize = 8;

impl ClassSlice {
    /// Builds the slice of `class` over the vocabulary's full trie less the subtrees of
    /// `anchors`, or below `anchor`; `wide` reads the characters past ASCII that a wide class
    /// holds.
    pub fn new(
        class: CharClass,
        wide: &OneChar,
        trie: &TokenTrie,
        anchor: Option<&Anchor>,
        anchors: &[Anchor],
        vocab_size: usize,
    ) -> Self {
        let boundary = wide.boundary();
        let read = |at: u32, byte: u8| {
            if at == boundary && byte < 128 {
                class.ascii.contains(byte).then_some(boundary)
            } else if class.wide {
                wide.read(at, byte)
            } else {
                None
            }
        };
        let runs = trie.runs(anchor, boundary, read, DENSE_CHARS);
        let longest = runs
            .tokens
            .iter()
            .map(|&(n, _)| n as usize)
            .max()
            .unwrap_or(0);
        let mut within = vec![TokenSet::empty(vocab_size); longest + 1];
        for &(n, id) in &runs.tokens {
            within[n as usize].insert(id);
        }
        for n in 1..within.len() {
            let (shorter, this) = within.split_at_mut(n);
            this[0].union_with(&shorter[n - 1]);
        }
        let within = within.into_iter().map(Mask::from_set).collect();
        let base = anchor.map_or(0, |a| a.path.len());
        let pruned = |i: usize| {
            let k = i - runs.first;
            runs.pruned[k / 64] >> (k % 64) & 1 != 0
        };
        // The first bytes below the root or anchor: those in the class head what is copied, the
        // others are left to the full trie.
        let (heads, outside): (Vec<_>, Vec<_>) = trie
            .children(anchor)
            .partition(|&(_, b)| read(boundary, b).is_some());
        let heads: Vec<usize> = heads.into_iter().map(|(i, _)| i).collect();
        let mut outside = outside.into_iter().map(|(i, _)| i);
        let mut next_outside = outside.next();
        let copy = trie.filtered((runs.first, runs.end, base), |i| {
            while next_outside.is_some_and(|o| o < i) {
                next_outside = outside.next();
            }
            pruned(i)
                || next_outside == Some(i)
                || (anchor.is_none() && anchors.iter().any(|a| a.node == i))
        });
        let rest = if copy.num_nodes() * COPY_SHARE <= runs.end - runs.first {
            // A wide class's runs are read by characters, which a byte's exit does not see.
            let exits = (!class.wide).then(|| copy.run_exits(|b| class.ascii.contains(b), longest));
            Rest::Copy { copy, heads, exits }
        } else {
            Rest::Bits {
                first: runs.first,
                bits: runs.pruned,
            }
        };
        ClassSlice {
            within,
            rest,
            below: anchor.cloned(),
        }
    }

    /// The longest token spelled from the class, in bytes, up to [`DENSE_CHARS`].
    pub fn longest(&self) -> usize {
        self.within.len() - 1
    }

    /// Adds to `set` the tokens of at most `chars` bytes spelled from the class.
    pub fn add_members_within(&self, chars: usize, set: &mut MaskBuilder) {
        set.add_mask(&self.within[chars.min(self.longest())]);
    }

    /// The longest run of the class before a token leaves it in the nodes left to walk, when
    /// they are kept with their exits: how far a [`RunChain`] given to [`walk`](Self::walk)
    /// must reach to be used. `None` where the walk steps through the runs.
    pub fn deepest_exit(&self) -> Option<usize> {
        match &self.rest {
            Rest::Copy {
                exits: Some(exits), ..
            } => Some(exits.deepest()),
            _ => None,
        }
    }

    /// Walks the tokens of the slice's part of `full` (the vocabulary's trie, with its
    /// `anchors`) that [`add_members_within`](Self::add_members_within) does not supply, as
    /// [`TokenTrie::walk`] does: from `state`, or below an anchor from the state its path leads
    /// to. Only the tokens whose first byte (past the anchor's path) is in `live` are walked:
    /// the bytes on which `state` does not die, or [`ByteSet::ALL`]. With the `chain` of the
    /// class's runs from that state, reaching as far as [`deepest_exit`](Self::deepest_exit),
    /// the nodes on the runs are not visited: each exit is stepped from the run's state.
    pub fn walk(
        &self,
        full: &TokenTrie,
        anchors: &[Anchor],
        (state, live, chain): (u32, &ByteSet, Option<&RunChain>),
        dead: u32,
        step: impl FnMut(u32, u8) -> u32,
        on_token: impl FnMut(u32, u32),
    ) {
        match &self.rest {
            Rest::Copy { copy, heads, exits } => {
                let (mut step, mut on_token) = (step, on_token);
                let chain =
                    chain.filter(|c| exits.as_ref().is_some_and(|e| c.reaches(e.deepest())));
                match (exits, chain) {
                    (Some(exits), Some(chain)) => {
                        exits.walk(copy, |n| chain.at(n), dead, &mut step, &mut on_token)
                    }
                    _ => {
                        let no_pruning = |_| false;
                        copy.walk_heads(state, dead, live, no_pruning, &mut step, &mut on_token)
                    }
                }
                // The walk visits nodes in ascending order: a cursor over the copied heads
                // answers each node in constant time (a binary search per node was most of a
                // walk below `.` inside a domain name).
                let copied = ascending_member(heads);
                match &self.below {
                    Some(a) => full.walk_below(a, state, dead, copied, step, on_token),
                    None => {
                        let mut copied = copied;
                        let pruned = |i: usize| copied(i) || anchors.iter().any(|a| a.node == i);
                        full.walk_heads(state, dead, live, pruned, step, on_token)
                    }
                }
            }
            Rest::Bits { first, bits } => {
                let bit = |i: usize| {
                    let k = i - first;
                    bits.get(k / 64).is_some_and(|w| w >> (k % 64) & 1 != 0)
                };
                match &self.below {
                    Some(a) => full.walk_below(a, state, dead, bit, step, on_token),
                    None => {
                        let pruned = |i: usize| bit(i) || anchors.iter().any(|a| a.node == i);
                        full.walk_heads(state, dead, live, pruned, step, on_token)
                    }
                }
            }
        }
    }

    /// Bytes held by the slice.
    pub fn memory_bytes(&self) -> usize {
        let rest = match &self.rest {
            Rest::Copy { copy, heads, exits } => {
                copy.memory_bytes()
                    + heads.capacity() * 8
                    + exits.as_ref().map_or(0, RunExits::memory_bytes)
            }
            Rest::Bits { bits, .. } => bits.capacity() * 8,
        };
        self.within.iter().map(Mask::memory_bytes).sum::<usize>() + rest
    }
}

/// Whether each node asked is in `sorted`, for a walk that asks in ascending order: a cursor
/// that only moves forward.
fn ascending_member(sorted: &[usize]) -> impl FnMut(usize) -> bool + '_ {
    let mut at = 0;
    move |i| {
        while sorted.get(at).is_some_and(|&h| h < i) {
            at += 1;
        }
        sorted.get(at) == Some(&i)
    }
}

/// Which slice: a class over the whole trie (`None`) or below a node (its index).
type Key = (Option<usize>, CharClass);

/// The class slices of one vocabulary, built on first use and shared by every index over it.
#[derive(Debug, Default)]
pub struct ClassSlices {
    built: Mutex<FxHashMap<Key, Arc<ClassSlice>>>,
}

impl ClassSlices {
    /// The slice of `class` over `trie` (below `anchor`, if given), built
    /// now if it is not kept yet. The build runs outside the lock, so a thread that needs a kept
    /// slice never waits on another's build.
    pub fn get(
        &self,
        class: CharClass,
        wide: &OneChar,
        trie: &TokenTrie,
        anchor: Option<&Anchor>,
        anchors: &[Anchor],
        vocab_size: usize,
    ) -> Arc<ClassSlice> {
        let key = (anchor.map(|a| a.node), class);
        if let Some(slice) = self.lock().get(&key) {
            return Arc::clone(slice);
        }
        let slice = Arc::new(ClassSlice::new(
            class, wide, trie, anchor, anchors, vocab_size,
        ));
        let mut built = self.lock();
        if built.len() >= MAX_CACHED_CLASSES {
            built.clear();
        }
        Arc::clone(built.entry(key).or_insert(slice))
    }

    /// Bytes held by the kept slices.
    pub fn memory_bytes(&self) -> usize {
        self.lock().values().map(|s| s.memory_bytes()).sum()
    }

    /// Poisoning only records that another thread panicked while holding the lock; the map is
    /// updated in single calls that leave it whole, so it stays usable.
    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<Key, Arc<ClassSlice>>> {
        self.built.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regex::ClassSet;

    fn trie(words: &[&str]) -> TokenTrie {
        TokenTrie::new(
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (i as u32, w.as_bytes())),
        )
    }

    fn class(bytes: &[u8]) -> ByteClass {
        ByteClass::of(bytes.iter().copied())
    }

    fn ascii(bytes: &[u8]) -> CharClass {
        CharClass {
            ascii: class(bytes),
            wide: false,
        }
    }

    /// The printable characters past ASCII, as the vocabulary's tries read them.
    fn wide() -> OneChar {
        let chars = ClassSet::from_ranges([(0xA0, 0x2027), (0x202A, 0x10FFFF)]);
        OneChar::new(&chars).expect("one character")
    }

    /// The slice's members within `chars` are exactly the words `expected` picks.
    fn assert_within(
        slice: &ClassSlice,
        words: &[&str],
        chars: usize,
        expected: impl Fn(&str) -> bool,
    ) {
        let mut set = MaskBuilder::new(words.len());
        slice.add_members_within(chars, &mut set);
        let want: Vec<u32> = (0..words.len() as u32)
            .filter(|&i| expected(words[i as usize]))
            .collect();
        assert_eq!(set.finish().ids(), want, "within {chars}");
    }

    #[test]
    fn the_most_common_successor_names_the_class() {
        let letters = class(b"abcdefghijklmnopqrstuvwxyz").0;
        let upper = class(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ").0;
        let digits = class(b"0123456789").0;
        // The letters reach 7, more than the digits reaching 3.
        let successors = [(3, digits), (9, class(b"@").0), (7, letters | upper)];
        let (found, to) = ByteClass::most_common(&successors, 0).expect("52 letters lead to 7");
        assert_eq!((found.0, to), (letters | upper, 7));
        assert_eq!(found.bytes().count(), 52);
        assert!(found.contains(b'Q') && !found.contains(b'1') && !found.contains(200));
        let tied = [(8, class(b"abcd").0), (5, class(b"wxyz").0)];
        assert_eq!(
            ByteClass::most_common(&tied, 0).map(|(c, to)| (c.0, to)),
            Some((class(b"wxyz").0, 5)),
            "a tie goes to the smaller state"
        );
        assert_eq!(
            ByteClass::most_common(&[(5, class(b"z").0), (2, class(b"xy").0)], 0),
            None,
            "two bytes are too few"
        );
        assert_eq!(
            ByteClass::most_common(&[(0, digits), (4, class(b"xy").0)], 0),
            None,
            "the dead state is no successor"
        );
    }

    #[test]
    fn runs_prune_exactly_the_subtrees_spelled_from_the_class() {
        let words = [
            "ab",
            "abc",
            "ab@",
            "b",
            "ba",
            "@a",
            "a",
            "aaaaaaaaaaaaaaaaaaaa",
        ];
        let t = trie(&words);
        let slice = ClassSlice::new(ascii(b"abc"), &wide(), &t, None, &[], words.len());
        // The walk meets the tokens outside every subtree spelled from the class.
        let walked = walk_all(&slice, &t, &[]);
        // "ab@" and "@a" leave the class; "a" and "ab" lie on the path to "ab@", so their nodes
        // are walked; the twenty-letter token is longer than DENSE_CHARS.
        assert_eq!(walked, vec![0, 2, 5, 6, 7]);
        for chars in [0, 1, 2, 3, 20] {
            assert_within(&slice, &words, chars, |w| {
                w.len() <= chars.min(DENSE_CHARS) && w.bytes().all(|b| b"abc".contains(&b))
            });
        }
        // Every spelled token is reported by the walk or supplied by the sets.
        let mut all = MaskBuilder::new(words.len());
        slice.add_members_within(usize::MAX, &mut all);
        for id in walked {
            all.insert(id);
        }
        assert_eq!(all.finish().len(), words.len());
    }

    #[test]
    fn anchored_runs_count_the_bytes_past_the_anchor() {
        let words = [
            " ab", " ab@", " b", " 1", " abc", " ", "ab", "x", " c", " ca", " cab", " @",
        ];
        let t = trie(&words);
        let anchors = t.anchors(6);
        assert_eq!(anchors.len(), 1);
        let space = &anchors[0];
        assert_eq!(space.path, b" ");
        assert_eq!(space.tokens, vec![5], "the space itself");
        let slice = ClassSlice::new(
            ascii(b"abc"),
            &wide(),
            &t,
            Some(space),
            &anchors,
            words.len(),
        );
        for chars in [0, 1, 2, 3] {
            assert_within(&slice, &words, chars, |w| {
                let rest = w.strip_prefix(' ').unwrap_or("");
                w.starts_with(' ')
                    && !rest.is_empty()
                    && rest.len() <= chars
                    && rest.bytes().all(|b| b"abc".contains(&b))
            });
        }
        // Below the anchor, the rest leaves out " b" and " c..." but not " a", on the way to
        // " ab@"; the anchor's own token is not below it.
        assert_eq!(walk_all(&slice, &t, &anchors), vec![0, 1, 3, 11]);
        // Over the whole trie, the anchor's subtree is left to the anchor's slices, and "ab" is
        // spelled from the class: "x" is all there is to walk.
        let root = ClassSlice::new(ascii(b"abc"), &wide(), &t, None, &anchors, words.len());
        assert_eq!(walk_all(&root, &t, &anchors), vec![7]);
    }

    /// The tokens a slice leaves to walk, by a walk that never dies.
    fn walk_all(slice: &ClassSlice, trie: &TokenTrie, anchors: &[Anchor]) -> Vec<u32> {
        let mut walked = Vec::new();
        let all = ByteSet::ALL;
        slice.walk(
            trie,
            anchors,
            (1, &all, None),
            0,
            |_, _| 1,
            |id, _| walked.push(id),
        );
        walked.sort_unstable();
        walked
    }

    /// `count` distinct words over `abc`, the shortest first: the digits of 3, 4, ... in base
    /// three, lowest first.
    fn abc_words(count: u32) -> Vec<String> {
        (3..3 + count)
            .map(|i| {
                std::iter::successors(Some(i), |&n| (n >= 3).then_some(n / 3))
                    .map(|n| b"abc"[(n % 3) as usize] as char)
                    .collect()
            })
            .collect()
    }

    /// Where little is left to walk, the slice keeps a copy; where much is, bits. Either way
    /// the walk meets the same tokens.
    #[test]
    fn few_tokens_left_are_copied_many_are_marked() {
        // Sixty distinct words over `abc`, and one that leaves the class.
        let mut words = abc_words(60);
        words.push("a@".to_string());
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let t = trie(&refs);
        let narrow = ClassSlice::new(ascii(b"abc"), &wide(), &t, None, &[], refs.len());
        assert!(
            matches!(narrow.rest, Rest::Copy { .. }),
            "{:?}",
            narrow.rest
        );
        // Only the way to "a@" is left: "a@" and the words it starts with.
        let on_the_way: Vec<u32> = (0..refs.len() as u32)
            .filter(|&i| "a@".starts_with(refs[i as usize]))
            .collect();
        assert_eq!(walk_all(&narrow, &t, &[]), on_the_way);
        // Without `c`, most words starting in the class leave it: too many to copy.
        let wide = ClassSlice::new(ascii(b"ab"), &wide(), &t, None, &[], refs.len());
        assert!(matches!(wide.rest, Rest::Bits { .. }), "{:?}", wide.rest);
        let walked = walk_all(&wide, &t, &[]);
        let mut all = MaskBuilder::new(refs.len());
        wide.add_members_within(usize::MAX, &mut all);
        let all = all.finish();
        for (i, w) in refs.iter().enumerate() {
            let spelled = w.bytes().all(|b| b"ab".contains(&b));
            assert!(
                walked.contains(&(i as u32)) || (spelled && all.contains(i as u32)),
                "{w}"
            );
            assert!(spelled || walked.contains(&(i as u32)), "{w} is walked");
        }
    }

    /// A toy label of a domain name, `[abc](?:[abc-]{0,N-1})` with `.` starting the next one
    /// after a letter: state `1 + 2 * count + dash`, 0 dead.
    fn label_step(bound: u32) -> impl Fn(u32, u8) -> u32 {
        move |state, byte| {
            if state == 0 {
                return 0;
            }
            let (count, dash) = ((state - 1) / 2, (state - 1) % 2 == 1);
            let at = |count: u32, dash: bool| 1 + 2 * count + u32::from(dash);
            match byte {
                b'a'..=b'c' if count < bound => at(count + 1, false),
                b'-' if count >= 1 && count < bound => at(count + 1, true),
                b'.' if count >= 1 && !dash => at(0, false),
                _ => 0,
            }
        }
    }

    /// Walking a copy's exits along the chain of the class's runs meets, with the members
    /// within the chain's length, exactly the tokens a walk of the whole trie meets: from every
    /// count of a label, tokens that leave the run at `-` or `.` after runs of every length
    /// (past the longest member too), and runs longer than [`DENSE_CHARS`].
    #[test]
    fn walks_along_a_chain_meet_what_a_full_walk_meets() {
        let mut words = abc_words(2997);
        for n in [1, 2, 5, 17, 19] {
            let run = "abc".repeat(7)[..n].to_string();
            words.extend([
                format!("{run}-"),
                format!("{run}-b"),
                format!("{run}.a"),
                format!("{run}.-"),
                format!("{run}@"),
            ]);
        }
        words.extend(["-a", ".b", "-", "."].map(String::from));
        words.push("cab".repeat(6));
        words.sort();
        words.dedup();
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let t = trie(&refs);
        let slice = ClassSlice::new(ascii(b"abc"), &wide(), &t, None, &[], refs.len());
        assert!(
            matches!(slice.rest, Rest::Copy { exits: Some(_), .. }),
            "{:?}",
            slice.rest
        );
        let deepest = slice
            .deepest_exit()
            .expect("an ASCII class keeps its exits");
        assert_eq!(deepest, 19, "the longest run before `-`, `.` or `@`");
        for bound in [3, 18, 40] {
            let step = label_step(bound);
            for count in 0..=bound {
                let start = 1 + 2 * count;
                let mut full = Vec::new();
                t.walk(start, 0, &step, |id, _| full.push(id));
                full.sort_unstable();
                let left = (bound - count) as usize;
                let states: Vec<u32> = (0..=left as u32).map(|n| start + 2 * n).collect();
                for chain in [
                    None,
                    Some(RunChain {
                        states: states.clone(),
                        beyond: Some(0),
                    }),
                ] {
                    let mut set = MaskBuilder::new(refs.len());
                    slice.add_members_within(left, &mut set);
                    let all = ByteSet::ALL;
                    let report = |id: u32, _| set.insert(id);
                    let from = (start, &all, chain.as_ref());
                    slice.walk(&t, &[], from, 0, &step, report);
                    assert_eq!(
                        set.finish().ids(),
                        full,
                        "bound {bound}, count {count}, chain {}",
                        chain.is_some()
                    );
                }
            }
        }
    }

    #[test]
    fn the_cache_shares_slices_and_bounds_itself() {
        let t = trie(&["ab", "cd"]);
        let cache = ClassSlices::default();
        let first = cache.get(ascii(b"abcd"), &wide(), &t, None, &[], 2);
        assert_eq!(first.longest(), 2);
        assert!(Arc::ptr_eq(
            &first,
            &cache.get(ascii(b"abcd"), &wide(), &t, None, &[], 2)
        ));
        for k in 0..(MAX_CACHED_CLASSES as u8 + 3) {
            let class = CharClass {
                ascii: ByteClass(1 << k),
                wide: false,
            };
            cache.get(class, &wide(), &t, None, &[], 2);
        }
        assert!(cache.lock().len() <= MAX_CACHED_CLASSES);
    }
}
