//! Where each slice's characters lead from each state, as far as asked, and how far the chains
//! of those moves reach.
//!
//! A state inside a string reads every character of a slice alike (printable text, a JSON
//! string's characters) when all of them lead it to one state; its mask is then the slice's
//! members plus short walks, instead of a walk of the whole trie. Finding that move follows
//! every character of the slice through the automaton (a few dozen representative bytes, rows
//! built on the way), so each answer is kept per slice and state, with what the answer allows
//! beyond it: whether the state one copy on along a counted repetition may read its move off
//! this one ([`MoveFlags`]), the state's place on such an orbit, and how many characters the
//! chain of moves from it reads before it dies or parts ways ([`Reach`]). Cost: a few words per
//! state and slice asked.

use super::leaving::Orbit;
use super::machine::Machine;
use super::DEAD;
use crate::slice::Advance;

/// [`OneChar::advance`](crate::slice::OneChar::advance) of each state, per slice, as far as asked,
/// and how far the chains of those moves reach
/// ([`TokenIndex::slice_reach`](super::TokenIndex::slice_reach)).
#[derive(Debug, Default)]
pub(super) struct SliceMoves {
    /// `to[slice][state]`: the state the slice's characters lead to, or one of the markers.
    to: Vec<Vec<u32>>,
    /// `reach[slice][state]`: a [`Reach`] packed as `chars | REACH_MIXED`, or `MOVE_UNKNOWN`.
    reach: Vec<Vec<u32>>,
    /// `shiftable[slice][state]`: whether the move met only sets on which the automaton commutes
    /// with stepping one copy along the state's counted repetition, so that the state one copy
    /// on may read its move off this one ([`crate::dfa::CopyAt`]).
    shiftable: Vec<Vec<bool>>,
    /// `orbit[slice][state]`: where `state` stands on a run of states each one copy on from
    /// the one before ([`Orbit`]), packed as `(root, offset)`, or `MOVE_UNKNOWN` as the root.
    orbit: Vec<Vec<(u32, u32)>>,
}

/// Marks a state whose move on a slice is not known yet.
const MOVE_UNKNOWN: u32 = u32::MAX;
/// Marks a state whose place on an orbit is not known.
const UNKNOWN_ORBIT: (u32, u32) = (MOVE_UNKNOWN, 0);
/// Marks a state that the slice's characters lead to different states.
const MOVE_MIXED: u32 = u32::MAX - 1;
/// Marks a packed [`Reach`] whose chain ends where the characters part ways.
const REACH_MIXED: u32 = 1 << 31;
/// How many of a chain's first states are checked for a loop back to them.
const LOOP_LOOKBACK: usize = 8;

/// How many of a slice's characters a state reads alike in a row: its chain's length before the
/// chain dies or, with `mixed`, before its characters part ways; capped at the slice's longest
/// member, past which nothing asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reach {
    pub(super) chars: u32,
    pub(super) mixed: bool,
}

/// Where a chain on a slice ends, given the move from its last state: the reach of that state
/// and its place, or `None` after pushing the next state (see
/// [`TokenIndex::slice_reach`](super::TokenIndex::slice_reach)).
pub(super) fn chain_end(path: &mut Vec<u32>, advance: Advance, cap: u32) -> Option<(Reach, usize)> {
    let at = path.len() - 1;
    let reach = |chars, mixed| Some((Reach { chars, mixed }, at));
    match advance {
        Advance::Mixed => reach(0, true),
        Advance::To(DEAD) => reach(0, false),
        // A loop: every state on the path reads every member. Only short loops are looked for;
        // a longer one outlasts the cap, with the same answer for `state`.
        Advance::To(t) if path.iter().take(LOOP_LOOKBACK).any(|&s| s == t) => reach(cap, false),
        Advance::To(t) => {
            path.push(t);
            None
        }
    }
}

/// Grows `rows` to hold `index`, new entries `fill`, and returns the entry.
fn entry<T: Copy>(rows: &mut Vec<Vec<T>>, slice: usize, index: u32, fill: T) -> &mut T {
    if rows.len() <= slice {
        rows.resize_with(slice + 1, Vec::new);
    }
    let row = &mut rows[slice];
    if row.len() <= index as usize {
        row.resize(index as usize + 1, fill);
    }
    &mut row[index as usize]
}

impl SliceMoves {
    pub(super) fn get(&self, slice: usize, state: u32) -> Option<Advance> {
        match *self.to.get(slice)?.get(state as usize)? {
            MOVE_UNKNOWN => None,
            MOVE_MIXED => Some(Advance::Mixed),
            t => Some(Advance::To(t)),
        }
    }

    /// Sets `state`'s move; with `one_copy_on`, the state it leads to is `state`'s key one copy
    /// on along its counted repetition, and joins `state`'s orbit one place further.
    pub(super) fn set(&mut self, slice: usize, state: u32, advance: Advance, flags: MoveFlags) {
        *entry(&mut self.to, slice, state, MOVE_UNKNOWN) = match advance {
            Advance::Mixed => MOVE_MIXED,
            Advance::To(t) => t,
        };
        *entry(&mut self.shiftable, slice, state, false) = flags.shiftable;
        if let (true, Advance::To(to)) = (flags.one_copy_on, advance) {
            let from = match self.orbit(slice, state) {
                Some(orbit) => orbit,
                None => {
                    let root = Orbit {
                        root: state,
                        offset: 0,
                    };
                    *entry(&mut self.orbit, slice, state, UNKNOWN_ORBIT) = (state, 0);
                    root
                }
            };
            let next = entry(&mut self.orbit, slice, to, UNKNOWN_ORBIT);
            // A state reached along two runs keeps the first: both say where it stands.
            if next.0 == MOVE_UNKNOWN {
                *next = (from.root, from.offset + 1);
            }
        }
    }

    /// Whether `state`'s known move leads one copy on (see [`set`](Self::set)).
    pub(super) fn steps_one_copy_on(&self, slice: usize, state: u32) -> bool {
        let Some(Advance::To(to)) = self.get(slice, state) else {
            return false;
        };
        match (self.orbit(slice, state), self.orbit(slice, to)) {
            (Some(from), Some(next)) => next.root == from.root && next.offset == from.offset + 1,
            _ => false,
        }
    }

    /// Where `state` stands on a run of states each one copy on from the one before.
    pub(super) fn orbit(&self, slice: usize, state: u32) -> Option<Orbit> {
        let &(root, offset) = self.orbit.get(slice)?.get(state as usize)?;
        (root != MOVE_UNKNOWN).then_some(Orbit { root, offset })
    }

    /// The move of `state`, if it is known and `shiftable`.
    pub(super) fn shiftable(&self, slice: usize, state: u32) -> Option<Advance> {
        let shiftable = self.shiftable.get(slice)?.get(state as usize)?;
        self.get(slice, state).filter(|_| *shiftable)
    }

    pub(super) fn reach(&self, slice: usize, state: u32) -> Option<Reach> {
        match *self.reach.get(slice)?.get(state as usize)? {
            MOVE_UNKNOWN => None,
            packed => Some(Reach {
                chars: packed & !REACH_MIXED,
                mixed: packed & REACH_MIXED != 0,
            }),
        }
    }

    pub(super) fn set_reach(&mut self, slice: usize, state: u32, reach: Reach) {
        let mixed = if reach.mixed { REACH_MIXED } else { 0 };
        *entry(&mut self.reach, slice, state, MOVE_UNKNOWN) = reach.chars | mixed;
    }

    pub(super) fn memory_bytes(&self) -> usize {
        let rows = self.to.iter().chain(&self.reach);
        let flags = self.shiftable.iter().map(Vec::capacity).sum::<usize>();
        let orbits = self
            .orbit
            .iter()
            .map(|row| row.capacity() * 8)
            .sum::<usize>();
        rows.map(|row| row.capacity() * 4).sum::<usize>() + flags + orbits
    }
}

/// What is known of a slice move besides where it leads.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MoveFlags {
    /// The move may be renamed one copy on along the state's counted repetition: the state
    /// stands in one copy of one, not the first, and every set the move met stayed in that copy
    /// and the next ([`crate::dfa::CopyAt`]).
    pub(super) shiftable: bool,
    /// The move leads to the state's own key one copy on.
    pub(super) one_copy_on: bool,
}

/// The [`MoveFlags`] of a slice move from `state` that leads to `advance` and stepped to the
/// states `met`.
pub(super) fn move_flags(m: &Machine, state: u32, advance: Advance, met: &[u32]) -> MoveFlags {
    let Some(det) = &m.determinizer else {
        return MoveFlags::default();
    };
    let Some(at) = det.counted_copy(state) else {
        return MoveFlags::default();
    };
    let one_copy_on = match advance {
        Advance::To(to) if to != DEAD => det.is_one_copy_on(to, state, at.embedding),
        _ => false,
    };
    MoveFlags {
        shiftable: at.copy >= 1 && met.iter().all(|&to| det.stays_in_copies(to, at)),
        one_copy_on,
    }
}
