//! The automaton an index walks: a table of successors per state and byte class, complete from
//! the start (a minimized DFA) or grown a row at a time by the determinizer as walks reach
//! states nobody built yet.
//!
//! Walks read it far more often than anything else in the index, so a step is one table load
//! (`state * stride + class`) with nothing in between, and the bookkeeping that a growing table
//! needs (which rows exist, which states accept) lives in flat arrays beside it. A walk runs
//! under the shared lock while every row it meets is built, and takes the exclusive lock at the
//! first one that is not ([`Locked`]); since rows are only ever added, what it read under the
//! shared lock stays true. Cost: four bytes per state and class, which the table's doublings
//! copy as it grows.

use std::sync::RwLock;

use super::{read, write, DEAD};
use crate::byte_set::ByteSet;
use crate::dfa::determinize::Determinizer;
use crate::dfa::{ByteClasses, Dfa};
use crate::error::{Error, Result};

/// The automaton behind an index: rows of successors over byte classes, complete from the start
/// or grown on demand.
#[derive(Debug, Clone)]
pub(super) struct Machine {
    pub(super) class_of: [u8; 256],
    pub(super) stride: usize,
    pub(super) table: Vec<u32>,
    pub(super) accepting: Vec<bool>,
    pub(super) explored: Vec<bool>,
    unexplored: usize,
    pub(super) determinizer: Option<Determinizer>,
    row: Vec<u32>,
    /// The bytes of each byte class.
    class_bytes: Vec<ByteSet>,
}

/// The bytes of each byte class, as sets (one pass over the bytes, not one per class).
fn bytes_by_class(classes: &ByteClasses) -> Vec<ByteSet> {
    let mut bytes = vec![ByteSet::EMPTY; classes.num_classes()];
    for b in 0..=255u8 {
        bytes[usize::from(classes.get(b))].insert(b);
    }
    bytes
}

impl Machine {
    pub(super) fn complete(dfa: &Dfa) -> Self {
        let n = dfa.num_states();
        Machine {
            class_of: *dfa.classes().as_map(),
            stride: dfa.classes().num_classes(),
            table: dfa.class_table().to_vec(),
            accepting: dfa.accepting(),
            explored: vec![true; n],
            unexplored: 0,
            determinizer: None,
            row: Vec::new(),
            class_bytes: bytes_by_class(dfa.classes()),
        }
    }

    pub(super) fn lazy(determinizer: Determinizer) -> Self {
        let stride = determinizer.classes().num_classes();
        let mut m = Machine {
            class_of: *determinizer.classes().as_map(),
            stride,
            table: Vec::new(),
            accepting: Vec::new(),
            explored: Vec::new(),
            unexplored: 0,
            class_bytes: bytes_by_class(determinizer.classes()),
            determinizer: Some(determinizer),
            row: Vec::new(),
        };
        m.grow();
        // The dead state's row is all dead by construction.
        m.explored[DEAD as usize] = true;
        m.unexplored -= 1;
        m
    }

    /// Adds bookkeeping for states the determinizer created since the last call.
    pub(super) fn grow(&mut self) {
        let Some(det) = &self.determinizer else {
            return;
        };
        for s in self.accepting.len()..det.num_states() {
            self.accepting.push(det.is_accepting(s as u32));
            self.explored.push(false);
            self.table.extend(std::iter::repeat_n(DEAD, self.stride));
            self.unexplored += 1;
        }
    }

    pub(super) fn num_states(&self) -> usize {
        self.accepting.len()
    }

    /// `state`, unless it is the determinizer's overflow state: a text that opens more calls
    /// than the stack allows is an error at the step that needs them, not a state.
    pub(super) fn reached(&self, state: u32) -> Result<u32> {
        match &self.determinizer {
            Some(det) if det.overflow_state() == Some(state) => Err(det.overflow_error()),
            _ => Ok(state),
        }
    }

    pub(super) fn is_complete(&self) -> bool {
        self.unexplored == 0
    }

    #[inline(always)]
    pub(super) fn step(&self, state: u32, byte: u8) -> u32 {
        self.table[state as usize * self.stride + self.class_of[byte as usize] as usize]
    }

    /// Whether `state`'s row (built) lives on a byte that starts a character past ASCII: one
    /// from 0xC2 up (0x80 to 0xBF only continue one, 0xC0 and 0xC1 start none). Where it does
    /// not, every such character dies at its first byte.
    pub(super) fn lives_past_ascii(&self, state: u32) -> bool {
        self.live_bytes(state).iter().any(|b| b >= 0xC2)
    }

    /// The bytes on which `state` does not die. Its row must be built.
    pub(super) fn live_bytes(&self, state: u32) -> ByteSet {
        let row = &self.table[state as usize * self.stride..][..self.stride];
        let mut live = ByteSet::EMPTY;
        for (&to, bytes) in row.iter().zip(&self.class_bytes) {
            if to != DEAD {
                live.union_with(bytes);
            }
        }
        live
    }

    /// Builds `state`'s row if it does not exist yet. Walks call this at every step, so the
    /// check is inlined and the building is not.
    #[inline(always)]
    pub(super) fn explore(&mut self, state: u32) -> Result<()> {
        if self.explored[state as usize] {
            return Ok(());
        }
        self.build_row(state)
    }

    #[inline(never)]
    fn build_row(&mut self, state: u32) -> Result<()> {
        let s = state as usize;
        let Some(det) = self.determinizer.as_mut() else {
            // A complete machine has every row; an unexplored state cannot occur in it.
            return Ok(());
        };
        det.next_row(state, &mut self.row)?;
        self.grow();
        let stride = self.stride;
        self.table[s * stride..(s + 1) * stride].copy_from_slice(&self.row);
        self.explored[s] = true;
        self.unexplored -= 1;
        Ok(())
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.table.capacity() * 4
            + self.accepting.capacity() * 2
            + self
                .determinizer
                .as_ref()
                .map_or(0, Determinizer::memory_bytes)
    }
}

/// `m`'s step from `state` on `byte`, building the row it needs; the first error is kept in
/// `failure`, and every step after it dies.
pub(super) fn explore_step(
    m: &mut Machine,
    failure: &mut Option<Error>,
    state: u32,
    byte: u8,
) -> u32 {
    if failure.is_some() {
        return DEAD;
    }
    match m.explore(state) {
        Ok(()) => m.step(state, byte),
        Err(e) => {
            *failure = Some(e);
            DEAD
        }
    }
}

/// Walks `bytes` from `state` on a machine that may lack rows; `None` if a row was missing.
pub(super) fn walk_bytes(m: &Machine, state: u32, bytes: &[u8]) -> Option<u32> {
    let mut s = state;
    for &b in bytes {
        if !m.explored[s as usize] {
            return None;
        }
        s = m.step(s, b);
        if s == DEAD {
            break;
        }
    }
    Some(s)
}

/// The machine under the shared lock until a walk needs a row that is not built yet, and under
/// the exclusive lock from then on.
pub(super) struct Locked<'a> {
    lock: &'a RwLock<Machine>,
    shared: Option<std::sync::RwLockReadGuard<'a, Machine>>,
    exclusive: Option<std::sync::RwLockWriteGuard<'a, Machine>>,
}

impl<'a> Locked<'a> {
    pub(super) fn new(lock: &'a RwLock<Machine>) -> Self {
        Locked {
            lock,
            shared: Some(read(lock)),
            exclusive: None,
        }
    }

    /// The machine under whichever lock is held. One always is (the shared one is let go only
    /// as the exclusive one is taken); were neither, the shared one would be taken again.
    pub(super) fn get(&mut self) -> &Machine {
        if let Some(m) = &self.exclusive {
            return m;
        }
        let lock = self.lock;
        self.shared.get_or_insert_with(|| read(lock))
    }

    /// The machine under the exclusive lock, taken now if it is not held yet (the shared one
    /// is let go first: a thread waiting for the exclusive lock while it holds the shared one
    /// would wait for itself).
    #[inline(never)]
    pub(super) fn exclusive(&mut self) -> &mut Machine {
        let (lock, shared) = (self.lock, &mut self.shared);
        self.exclusive.get_or_insert_with(|| {
            *shared = None;
            write(lock)
        })
    }

    /// The step from `state` on `byte`, building the row if it is missing; the dead state, with
    /// `failure` set, where building fails (and at every missing row once it has). Walks call
    /// this at every step, so the step on a built row is inlined and the rest is not.
    #[inline(always)]
    pub(super) fn step(&mut self, failure: &mut Option<Error>, state: u32, byte: u8) -> u32 {
        match self.built(state) {
            Some(m) => m.step(state, byte),
            None => self.build_and_step(failure, state, byte),
        }
    }

    /// [`step`](Self::step) where the row is missing.
    #[inline(never)]
    fn build_and_step(&mut self, failure: &mut Option<Error>, state: u32, byte: u8) -> u32 {
        explore_step(self.exclusive(), failure, state, byte)
    }

    /// The machine, under whichever lock is held, if it has `state`'s row.
    #[inline(always)]
    pub(super) fn built(&self, state: u32) -> Option<&Machine> {
        let m: &Machine = match (&self.exclusive, &self.shared) {
            (Some(m), _) => m,
            (None, Some(m)) => m,
            (None, None) => return None,
        };
        m.explored[state as usize].then_some(m)
    }
}
