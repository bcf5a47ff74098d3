//! Deterministic automata over bytes: the object every later stage walks.
//!
//! A [`Dfa`] is a dense table `[states, classes]` of `u32` successors plus two flags per state.
//! Dense because the token index reads it in the tightest loop of the library (one lookup per byte
//! of every token of the vocabulary, for every state it visits), and a dense row over byte classes
//! is one multiply-add and one load. Classes ([`classes`]) keep that table small: a schema's DFA
//! rarely needs more than a few dozen of them.
//!
//! The construction is the textbook one, kept in separate steps so each can be reused:
//! [`crate::nfa`] builds a Thompson NFA, [`determinize`] runs the subset construction (one DFA
//! state at a time, so a lazy caller can drive it), [`minimize`] merges equivalent states with
//! partition refinement and numbers the result canonically, and [`product`] combines two DFAs for
//! intersection and complement. After minimization two patterns with the same language give equal
//! `Dfa` values, tables and class maps included: the minimal DFA is unique up to numbering, the
//! numbering is a breadth-first walk in byte order, and the classes are regrouped from the final
//! table's columns.
//!
//! Two states have fixed numbers: 0 is the dead state (nothing can be matched from it, every byte
//! leads back to it) and 1 the start. A pattern that matches nothing still has both, so the
//! smallest DFA has two states. A state is *final* when it accepts and every byte leads to the dead
//! state: a generator that reaches it can only stop.
//!
//! Every stage is bounded: [`DfaConfig::max_states`] caps the states the subset and product
//! constructions may create (checked before each new state, so a pattern with an exponential DFA
//! fails after a bounded amount of work, not after exhausting memory), and the NFA has its own
//! limit ([`crate::nfa::NfaConfig`]). The limit is meant for the automaton a caller gets, which is
//! the minimal one; the subset construction before minimization is often several times larger
//! (generated languages repeat themselves, and the repeats only merge when minimized), so
//! [`Dfa::from_nfa`] lets it build up to [`UNMINIMIZED_FACTOR`] times `max_states` and then holds
//! the minimal result to `max_states`. Both failures are the `max_states` limit.

pub mod classes;
pub mod determinize;
pub mod lazy_product;
pub mod minimize;
pub mod product;

pub use classes::ByteClasses;
pub use determinize::{CopyAt, Determinizer};

use crate::error::{Error, Result};
use crate::nfa::{Nfa, NfaConfig};
use crate::regex::Hir;
use rustc_hash::FxHashMap;

/// Limits for DFA construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DfaConfig {
    /// Most states a subset or product construction may create; crossing it is a `SizeLimit`
    /// error named `max_states`.
    pub max_states: usize,
}

impl Default for DfaConfig {
    fn default() -> Self {
        DfaConfig { max_states: 20_000 }
    }
}

/// Where the automaton's input sits in the whole text, which decides what the anchors mean.
///
/// A pattern's DFA reads the whole text ([`Anchors::WHOLE_TEXT`]). An operand of an intersection
/// or complement may read a middle piece of it: then `^` inside it can only hold if the piece is at
/// the text's start, and `$` only if it is at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Anchors {
    /// The input begins where the text begins.
    pub text_start: bool,
    /// The input ends where the text ends.
    pub text_end: bool,
}

impl Anchors {
    /// The input is the whole text.
    pub const WHOLE_TEXT: Anchors = Anchors {
        text_start: true,
        text_end: true,
    };
}

/// A transition table under construction or just minimized: state 0 is dead, state 1 the start,
/// `table[s * classes.num_classes() + c]` the successor of `s` on class `c`.
#[derive(Clone, Debug)]
pub(crate) struct Raw {
    pub(crate) classes: ByteClasses,
    pub(crate) table: Vec<u32>,
    pub(crate) accepting: Vec<bool>,
}

/// A minimal full-match DFA over bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dfa {
    classes: ByteClasses,
    /// `[states, classes]`, row-major.
    table: Vec<u32>,
    accepting: Vec<bool>,
    finals: Vec<bool>,
}

/// How many times `max_states` the subset construction may build before minimization.
pub const UNMINIMIZED_FACTOR: usize = 4;

const DEAD: u32 = 0;
const START: u32 = 1;

impl Dfa {
    /// The minimal DFA of `hir` under full-match semantics.
    pub fn from_hir(hir: &Hir, config: &DfaConfig) -> Result<Dfa> {
        Self::from_hir_with(hir, config, &NfaConfig::default())
    }

    /// Like [`Dfa::from_hir`], with an explicit NFA size limit.
    pub fn from_hir_with(hir: &Hir, config: &DfaConfig, nfa_config: &NfaConfig) -> Result<Dfa> {
        Self::build(hir, config, nfa_config, Anchors::WHOLE_TEXT)
    }

    pub(crate) fn build(
        hir: &Hir,
        config: &DfaConfig,
        nfa_config: &NfaConfig,
        anchors: Anchors,
    ) -> Result<Dfa> {
        let nfa = Nfa::new(hir, nfa_config, config)?;
        Self::from_nfa(nfa, anchors, config)
    }

    /// The minimal DFA of `nfa`, reading input placed in the text as `anchors` says; the subset
    /// construction may build up to [`UNMINIMIZED_FACTOR`] times `config.max_states` states, the
    /// result at most `config.max_states`.
    pub fn from_nfa(nfa: Nfa, anchors: Anchors, config: &DfaConfig) -> Result<Dfa> {
        let max = config.max_states;
        let budget = max.saturating_mul(UNMINIMIZED_FACTOR);
        let raw = determinize::determinize(nfa, anchors, budget).map_err(|e| match e {
            // Report the configured limit, not the construction's multiple of it.
            Error::SizeLimit { limit, value, .. } if limit == "max_states" => Error::SizeLimit {
                limit,
                value,
                maximum: max as u64,
            },
            other => other,
        })?;
        let minimal = minimize::minimize(&raw);
        let n = minimal.accepting.len();
        if n > max {
            return Err(Error::size_limit("max_states", n, max));
        }
        Ok(Self::from_minimal(minimal))
    }

    /// Regroups the classes of a canonical minimal table by column and derives the final flags.
    /// Minimizes a raw automaton (dead state 0, start 1) into a `Dfa`.
    pub(crate) fn from_raw(raw: Raw) -> Dfa {
        Self::from_minimal(minimize::minimize(&raw))
    }

    pub(crate) fn from_minimal(raw: Raw) -> Dfa {
        let n = raw.accepting.len();
        let k = raw.classes.num_classes();
        let mut column_ids: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let column_of: Vec<u32> = (0..k)
            .map(|c| {
                let column: Vec<u32> = (0..n).map(|s| raw.table[s * k + c]).collect();
                let next = column_ids.len() as u32;
                *column_ids.entry(column).or_insert(next)
            })
            .collect();
        let classes = ByteClasses::from_keys(|b| column_of[raw.classes.get(b) as usize]);
        let k2 = classes.num_classes();
        let mut table = Vec::with_capacity(n * k2);
        for s in 0..n {
            for &rep in classes.representatives() {
                table.push(raw.table[s * k + raw.classes.get(rep) as usize]);
            }
        }
        let finals = (0..n)
            .map(|s| raw.accepting[s] && table[s * k2..(s + 1) * k2].iter().all(|&t| t == DEAD))
            .collect();
        Dfa {
            classes,
            table,
            accepting: raw.accepting,
            finals,
        }
    }

    /// Number of states, the dead state included.
    pub fn num_states(&self) -> usize {
        self.accepting.len()
    }

    /// The start state: always 1.
    pub fn start(&self) -> u32 {
        START
    }

    /// The dead state: always 0.
    pub fn dead(&self) -> u32 {
        DEAD
    }

    /// The state after reading `byte` in `state`; dead for a state out of range.
    #[inline]
    pub fn next_state(&self, state: u32, byte: u8) -> u32 {
        self.next_class(state, self.classes.get(byte))
    }

    /// The state after reading a byte of `class` in `state`; dead for a state or class out of
    /// range.
    #[inline]
    pub fn next_class(&self, state: u32, class: u8) -> u32 {
        let k = self.classes.num_classes();
        if (class as usize) >= k {
            return DEAD;
        }
        self.table
            .get(state as usize * k + class as usize)
            .copied()
            .unwrap_or(DEAD)
    }

    /// Whether the input read so far is a match; false for a state out of range.
    pub fn is_accepting(&self, state: u32) -> bool {
        self.accepting.get(state as usize).copied().unwrap_or(false)
    }

    /// Whether `state` accepts and no byte leads anywhere but the dead state.
    pub fn is_final(&self, state: u32) -> bool {
        self.finals.get(state as usize).copied().unwrap_or(false)
    }

    /// Whether the DFA matches all of `bytes`.
    pub fn is_match(&self, bytes: &[u8]) -> bool {
        let k = self.classes.num_classes();
        let mut state = START as usize;
        for &b in bytes {
            state = self.table[state * k + self.classes.get(b) as usize] as usize;
            if state == DEAD as usize {
                return false;
            }
        }
        self.accepting[state]
    }

    /// The byte classes the table is indexed by.
    pub fn classes(&self) -> &ByteClasses {
        &self.classes
    }

    /// The table over classes, `[num_states, num_classes]` row-major.
    pub fn class_table(&self) -> &[u32] {
        &self.table
    }

    /// The table over all 256 bytes, `[num_states, 256]` row-major.
    pub fn table_256(&self) -> Vec<u32> {
        let k = self.classes.num_classes();
        let mut out = Vec::with_capacity(self.num_states() * 256);
        for row in self.table.chunks_exact(k) {
            out.extend(self.classes.as_map().iter().map(|&c| row[c as usize]));
        }
        out
    }

    /// The accepting flag of every state.
    pub fn accepting(&self) -> Vec<bool> {
        self.accepting.clone()
    }

    /// The final flag of every state.
    pub fn finals(&self) -> Vec<bool> {
        self.finals.clone()
    }

    /// Whether the language is empty (the start state is as dead as the dead state).
    pub fn matches_nothing(&self) -> bool {
        !self.is_accepting(START)
            && (0..self.classes.num_classes()).all(|c| self.next_class(START, c as u8) == DEAD)
    }

    /// Heap and inline bytes this DFA holds.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.table.capacity() * std::mem::size_of::<u32>()
            + self.accepting.capacity()
            + self.finals.capacity()
            + self.classes.representatives().len()
    }
}

#[cfg(test)]
mod tests;
