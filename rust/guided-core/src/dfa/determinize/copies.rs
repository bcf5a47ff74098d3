//! Counted copies: a state's moves read off those of the state one copy before it.
//!
//! A counted repetition with many copies (`[^"\\]{0,64}` inside a string with `maxLength: 64`)
//! is one embedded automaton repeated ([`Embedding`]): copy `i`'s state `s` is the id
//! `base + i * stride + s`. Its DFA states come one per count, each the same set as the one
//! before with the occurrence's entries one copy further on, and the subset construction pays
//! for each afresh: its closure, its successors, and the states inside every multi-byte
//! character it reads. Yet they are the same states up to that renaming, and where the renaming
//! is exact, what one of them does the next one does too, renamed.
//!
//! Call `σ` the map that moves an entry of the occurrence from copy `i` to copy `i + 1` and
//! leaves every other entry as it is. The NFA's transitions commute with it on a set `S` when
//! each entry does:
//!
//! - an entry of copy `i` reads within copy `i`, and where the automaton accepts it moves on
//!   without reading to copy `i + 1`'s start (when there is a copy `i + 1`) and to the exit (once
//!   `i + 1` copies are enough): so copies `i` and `i + 1` must agree on both, which
//!   [`Determinizer::copies_alike`] checks for the copies a move can touch;
//! - any other entry moves as it does, and must never enter the occurrence, which it could only
//!   do at copy 0. So a caller that explores a state's moves checks, for every set it meets,
//!   that the occurrence's entries stay in the state's copy and the next one, and that copy is
//!   not 0 ([`Determinizer::stays_in_copies`]): an entry that came in from outside would show as
//!   one in copy 0. Entering at a start that accepts could pass on to copy 1 unseen, so
//!   occurrences whose automaton accepts at its start are never shifted.
//!
//! A DFA state is identified by its key (the live byte-reading entries of its closure, and
//! whether it accepts); liveness and acceptance of the occurrence's entries do not depend on the
//! copy either. So when a state's moves were explored and met only such sets, the moves of the
//! state one copy on are theirs renamed by `σ`, state by state, and the renamed states can be
//! stored from their keys alone ([`Determinizer::shifted`]): no closure, no row, and none of the
//! states inside the characters. The token index uses this to follow a counted string's chain
//! (the state after each count) at the cost of a hash lookup per count instead of a subset
//! construction per count and per character length.

use super::{key_hash, state_of, Determinizer, Entry, MATCH_MARK, OVERFLOW_MARK};
use crate::error::Result;
use crate::nfa::{Embedding, Node};

/// The copy of a counted repetition that a DFA state stands in ([`Determinizer::counted_copy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyAt {
    /// The occurrence, as an index into [`crate::nfa::Nfa::embeddings`].
    pub embedding: usize,
    /// The copy every entry of the state in that occurrence is in.
    pub copy: u32,
}

/// One past the last id of `e`'s copies (as `u64`: the block may end at the top of the ids).
fn block_end(e: &Embedding) -> u64 {
    u64::from(e.base) + u64::from(e.stride) * u64::from(e.copies)
}

impl Determinizer {
    /// The entries of `state`'s key, without the marks.
    fn entries(&self, state: u32) -> &[Entry] {
        match self.sets.get(state as usize) {
            Some(key) => match key.last() {
                Some(&MATCH_MARK) | Some(&OVERFLOW_MARK) => &key[..key.len() - 1],
                _ => key,
            },
            None => &[],
        }
    }

    /// The copy of a counted repetition that `state` stands in: when its key holds entries of
    /// exactly one occurrence with several copies, all in one copy.
    pub fn counted_copy(&self, state: u32) -> Option<CopyAt> {
        if self.overflow == Some(state) {
            return None;
        }
        let mut at: Option<CopyAt> = None;
        for &x in self.entries(state) {
            let Node::Embedded(e) = self.nfa.node(state_of(x)) else {
                continue;
            };
            if e.at.copies < 2 {
                continue;
            }
            let here = CopyAt {
                embedding: e.embedding,
                copy: e.copy,
            };
            match at {
                None => at = Some(here),
                Some(a) if a == here => {}
                Some(_) => return None,
            }
        }
        at
    }

    /// Whether the moves of a state in copy `at.copy` are those of the state one copy before,
    /// renamed (see the module documentation): the automaton does not accept at its start, that
    /// copy is at least 2 (so the one before it is not copy 0, where the occurrence is
    /// entered), and copies `at.copy - 1` to `at.copy + 1` each have a next copy and agree on
    /// whether the exit is open after them.
    ///
    /// That is renaming commuting on copies `at.copy - 1..=at.copy`
    /// ([`commuting_copies`](Self::commuting_copies)), the copies the move one copy before met.
    pub fn copies_alike(&self, at: CopyAt) -> bool {
        at.copy >= 1
            && self
                .commuting_copies(at.embedding, at.copy - 1)
                .is_some_and(|hi| hi >= at.copy)
    }

    /// Whether every entry of `state` in `at`'s occurrence is in copy `at.copy` or the next, and
    /// `state` is not the overflow state: what a caller checks of each set met while exploring
    /// a state in copy `at.copy`, before it lets the next copy's state read its moves off.
    pub fn stays_in_copies(&self, state: u32, at: CopyAt) -> bool {
        if self.overflow == Some(state) || self.nfa.embeddings().get(at.embedding).is_none() {
            return false;
        }
        match self.copies_of(state, at.embedding) {
            Some((lo, hi)) => at.copy <= lo && hi <= at.copy + 1,
            None => true,
        }
    }

    /// The lowest and highest copies of occurrence `embedding` that `state`'s entries stand in;
    /// `None` when it has none. The overflow state stands in copy 0, which nothing renames.
    pub fn copies_of(&self, state: u32, embedding: usize) -> Option<(u32, u32)> {
        if self.overflow == Some(state) {
            return Some((0, 0));
        }
        let e = self.nfa.embeddings().get(embedding)?;
        let end = block_end(e);
        let mut span: Option<(u32, u32)> = None;
        for &x in self.entries(state) {
            let id = state_of(x);
            if id < e.base || u64::from(id) >= end {
                continue;
            }
            let copy = (id - e.base) / e.stride;
            span = Some(match span {
                None => (copy, copy),
                Some((lo, hi)) => (lo.min(copy), hi.max(copy)),
            });
        }
        span
    }

    /// Whether `state`'s key is `of`'s with the entries of occurrence `embedding` one copy on:
    /// whether `state` is `σ` of `of` (see the module documentation).
    pub fn is_one_copy_on(&self, state: u32, of: u32, embedding: usize) -> bool {
        match (
            self.shifted_key(of, embedding, true),
            self.sets.get(state as usize),
        ) {
            (Some(shifted), Some(key)) => shifted[..] == key[..],
            _ => false,
        }
    }

    /// The highest copy `hi` such that renaming one copy on commutes with the automaton on
    /// every set whose entries of occurrence `embedding` stand in copies `lo..=hi` (and that
    /// enters no copy 0 from outside); `None` when not even `lo..=lo + 1` does.
    ///
    /// An entry of copy `k` needs copies `k` and `k + 1` to agree on having a next copy and on
    /// the exit being open after them (see the module documentation). So copies `lo` to
    /// `hi + 1` must all have a next copy (`hi + 2 < copies`) and agree on the exit, and `lo`
    /// must not be copy 0, where the occurrence is entered; `hi` is at least `lo + 1`, the
    /// copies one move meets. Since the exit opens once and stays open, the copies agree on it
    /// exactly when `lo` and `hi + 1` do, so the answer is where the copies stop having a next
    /// copy or the exit opens.
    pub fn commuting_copies(&self, embedding: usize, lo: u32) -> Option<u32> {
        let e = self.nfa.embeddings().get(embedding)?;
        let automaton = &self.nfa.automata()[e.automaton as usize];
        if lo == 0 || automaton.is_accepting(automaton.start()) {
            return None;
        }
        // The exit is open after copy `k` once `k + 1` copies are there; closed after `lo`, it
        // must still be closed after `hi + 1` (`hi + 2 < min`).
        let open = lo + 1 >= e.min;
        let last_with_next = e.copies.checked_sub(3)?;
        let hi = if open {
            last_with_next
        } else {
            last_with_next.min(e.min.checked_sub(3)?)
        };
        (hi > lo).then_some(hi)
    }

    /// `state`'s key with the entries of occurrence `embedding` one copy on (`forward`) or one
    /// copy back; `None` when one would leave the occurrence's copies.
    fn shifted_key(&self, state: u32, embedding: usize, forward: bool) -> Option<Vec<Entry>> {
        let e = self.nfa.embeddings().get(embedding)?;
        let end = block_end(e);
        let (first, last) = (u64::from(e.base), end - u64::from(e.stride));
        let key = self.sets.get(state as usize)?;
        let mut shifted = Vec::with_capacity(key.len());
        for &x in key.iter() {
            let id = u64::from(state_of(x));
            if x == MATCH_MARK || x == OVERFLOW_MARK || id < first || id >= end {
                shifted.push(x);
            } else if forward && id < last {
                shifted.push(x + Entry::from(e.stride));
            } else if !forward && id >= first + u64::from(e.stride) {
                shifted.push(x - Entry::from(e.stride));
            } else {
                return None;
            }
        }
        // The occurrence's ids are one block, so the renamed entries keep their order among
        // the others; sorting again is cheap insurance for a key that must be canonical.
        let marks = shifted
            .iter()
            .rev()
            .take_while(|&&x| x == MATCH_MARK || x == OVERFLOW_MARK)
            .count();
        let n = shifted.len() - marks;
        shifted[..n].sort_unstable();
        Some(shifted)
    }

    /// The state one copy before `state` in occurrence `embedding`, if it has been created.
    pub fn find_shifted_back(&self, state: u32, embedding: usize) -> Option<u32> {
        let key = self.shifted_key(state, embedding, false)?;
        self.find_key(key_hash(&key), &key)
    }

    /// The state one copy after `state` in occurrence `embedding`, created if new (within the
    /// limits). The caller vouches that it is the state the construction would reach: that it
    /// is `σ` of a successor found while exploring a state whose moves commute with `σ` (see
    /// the module documentation). `None` when an entry would leave the occurrence's copies.
    pub fn shifted(&mut self, state: u32, embedding: usize) -> Result<Option<u32>> {
        let Some(key) = self.shifted_key(state, embedding, true) else {
            return Ok(None);
        };
        let hash = key_hash(&key);
        if let Some(id) = self.find_key(hash, &key) {
            return Ok(Some(id));
        }
        self.key = key;
        self.intern_key(hash).map(Some)
    }
}
