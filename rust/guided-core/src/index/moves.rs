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
//! chain of moves from it reads before it dies or parts ways ([`Reach`]). The index's side of
//! it is here too: which slice to ask first, whether one fits a state
//! ([`TokenIndex::slice_fit`]), and the moves themselves, answered by the row at once where a
//! state reads a few characters, read off the copy before inside a counted string, and followed
//! through the automaton otherwise. Cost: a few words per state and slice asked.

use super::leaving::Orbit;
use super::machine::{explore_step, Machine};
use super::{read, write, Shortcut, TokenIndex, DEAD};
use crate::dfa::CopyAt;
use crate::error::Result;
use crate::slice::{Advance, DENSE_CHARS};

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
    chars: u32,
    mixed: bool,
}

/// Where a chain on a slice ends, given the move from its last state: the reach of that state
/// and its place, or `None` after pushing the next state (see
/// [`TokenIndex::slice_reach`](super::TokenIndex::slice_reach)).
fn chain_end(path: &mut Vec<u32>, advance: Advance, cap: u32) -> Option<(Reach, usize)> {
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
    fn set(&mut self, slice: usize, state: u32, advance: Advance, flags: MoveFlags) {
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
    fn steps_one_copy_on(&self, slice: usize, state: u32) -> bool {
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
    fn shiftable(&self, slice: usize, state: u32) -> Option<Advance> {
        let shiftable = self.shiftable.get(slice)?.get(state as usize)?;
        self.get(slice, state).filter(|_| *shiftable)
    }

    fn reach(&self, slice: usize, state: u32) -> Option<Reach> {
        match *self.reach.get(slice)?.get(state as usize)? {
            MOVE_UNKNOWN => None,
            packed => Some(Reach {
                chars: packed & !REACH_MIXED,
                mixed: packed & REACH_MIXED != 0,
            }),
        }
    }

    fn set_reach(&mut self, slice: usize, state: u32, reach: Reach) {
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
    one_copy_on: bool,
}

/// The [`MoveFlags`] of a slice move from `state` that leads to `advance` and stepped to the
/// states `met`.
fn move_flags(m: &Machine, state: u32, advance: Advance, met: &[u32]) -> MoveFlags {
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

/// Slice moves asked of the index: which slice a state fits, how far its chain reaches, and
/// the moves themselves, followed through the automaton or read off the copy before.
impl TokenIndex {
    /// The first slice whose characters `state` reads alike all the way (see [`crate::slice`]),
    /// with how many of them it may take ([`slice_reach`](Self::slice_reach)). A chain on which
    /// the characters part ways before [`DENSE_CHARS`] steps leaves the slice out; one on which
    /// they part ways later takes the members up to there and walks the longer ones.
    ///
    /// A slice that already reads `state` alike is asked first
    /// ([`first_slice`](Self::first_slice)).
    pub(super) fn slice_fit(&self, state: u32) -> Result<Option<Shortcut>> {
        let first = self.first_slice(state)?;
        if first.is_none() {
            // With no slice known to fit, the row is built first, so that each slice's move is
            // read off it at once where it can be (`move_at_once`: a digit, a keyword's next
            // letter, the punctuation between an object's members); without it, the first
            // slice's characters were followed (`slice_move`: the exclusive lock, the steps, the
            // move recorded) to build it. That took 28% of the instructions of qwen2 `digits`'s
            // first pass. The walk that serves a state no slice does builds the row anyway.
            self.with_row(state, |_| ())?;
        }
        let rest = (0..self.tries.slices().len()).filter(|&i| Some(i) != first);
        for i in first.into_iter().chain(rest) {
            let reach = self.slice_reach(i, state)?;
            let chars = reach.chars as usize;
            if !reach.mixed {
                return Ok(Some(Shortcut::Slice {
                    slice: i,
                    chars,
                    walk_long: false,
                    chain: self.slice_chain(i, state, chars)?,
                }));
            }
            if chars >= DENSE_CHARS {
                return Ok(Some(Shortcut::Slice {
                    slice: i,
                    chars,
                    walk_long: true,
                    chain: Vec::new(),
                }));
            }
        }
        Ok(None)
    }

    /// The slice to ask first at `state`: one whose reach from it is known to fit, or else one
    /// whose move from it is known, or read off the copy before, and leads on. Inside a counted
    /// string, each count's move on the JSON string's slice was learnt while following the
    /// chain from an earlier count; asking the printable slice first would build the state's
    /// row and the states inside its characters only to find that `"` parts ways (eight new
    /// states a count), which the mask does not otherwise need.
    fn first_slice(&self, state: u32) -> Result<Option<usize>> {
        let slices = 0..self.tries.slices().len();
        let leads_on = |advance| matches!(advance, Some(Advance::To(t)) if t != DEAD);
        {
            let moves = read(&self.moves);
            let fits = |r: Reach| !r.mixed || r.chars as usize >= DENSE_CHARS;
            let known = slices
                .clone()
                .find(|&i| moves.reach(i, state).is_some_and(fits))
                .or_else(|| slices.clone().find(|&i| leads_on(moves.get(i, state))));
            if known.is_some() {
                return Ok(known);
            }
        }
        // The state one copy before, which every slice's move is read off, is looked up once
        // (a key built and hashed), not once per slice.
        let mut before = None;
        for i in slices {
            if leads_on(self.move_without_rows_from(i, state, &mut before)?) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// The states a slice's characters lead through from `state`, as far as
    /// [`Slice::leaving`](crate::slice::Slice::leaving) needs them: `chars` of them and the state
    /// where they end, or where the chain dies; empty where it parts ways before (a chain that
    /// was cut at the slice's longest member, and then followed on) and the rest of the
    /// vocabulary is walked from `state` instead.
    ///
    /// A chain cut at the longest member (inside a string of `maxLength: 300`, or a free one,
    /// which loops) is followed on as far as the longest run of slice characters that starts
    /// another token: after the first of a string's states, each of those moves is known.
    fn slice_chain(&self, slice: usize, state: u32, chars: usize) -> Result<Vec<u32>> {
        let of = &self.tries.slices()[slice];
        let longest = of.leaving().last().map_or(0, |&(n, _)| n);
        let cut = chars >= of.max_chars();
        let wanted = if cut { longest } else { chars.min(longest) };
        let mut chain = Vec::with_capacity(wanted + 1);
        chain.push(state);
        loop {
            // The known moves that lead on (nearly all of a long chain's, inside a string) are
            // followed under one lock; the next one, which may build, below.
            {
                let moves = read(&self.moves);
                while chain.len() <= wanted {
                    match moves.get(slice, chain[chain.len() - 1]) {
                        Some(Advance::To(t)) if t != DEAD => chain.push(t),
                        _ => break,
                    }
                }
            }
            if chain.len() > wanted {
                break;
            }
            match self.slice_move(slice, chain[chain.len() - 1])? {
                Advance::To(t) if t != DEAD => chain.push(t),
                // Up to `chars` every move was followed to find the reach, and leads on; past
                // the cut, a chain that dies ends there (a token reading further dies with it).
                Advance::To(_) if cut => break,
                _ => return Ok(Vec::new()),
            }
        }
        Ok(chain)
    }

    /// How far `state`'s chain on a slice's characters reaches ([`Reach`]). The chain is
    /// followed until it dies, parts ways, comes back on itself (every member fits), meets a
    /// state whose reach is known, or outlasts the slice's longest member; the reach of every
    /// state on it is kept, so the states of a counted string, met one after another, each pay
    /// for one step.
    ///
    /// Following a chain builds its states and the states inside its multi-byte characters:
    /// for a string with `maxLength: 300`, as many counts as the longest member has characters
    /// (128 in the large vocabularies). Where the counts are copies of one embedded automaton,
    /// only a few of those moves are followed (the first copies, around `minLength`, the last
    /// ones); the others are read off the copy before ([`shifted_move`](Self::shifted_move)) and
    /// build neither the states' rows nor the insides of their characters. A state whose own
    /// row already answers ([`move_at_once`](Self::move_at_once)) follows nothing.
    fn slice_reach(&self, slice: usize, state: u32) -> Result<Reach> {
        let cap = self.tries.slices()[slice].max_chars() as u32;
        let unmixed = |chars| Reach {
            chars,
            mixed: false,
        };
        match self.move_at_once(slice, state) {
            Some(Advance::Mixed) => {
                return Ok(Reach {
                    chars: 0,
                    mixed: true,
                })
            }
            Some(Advance::To(_)) => return Ok(unmixed(0)),
            None => {}
        }
        // The chain from `state` so far, and once it stops, the reach of its entry `at` (which
        // may be one past its end: a state whose reach was known).
        let mut path = vec![state];
        let (reach_at, at) = 'chain: loop {
            // Moves already known are followed under one lock; the first unknown one below.
            let unknown = {
                let moves = read(&self.moves);
                loop {
                    let last = path[path.len() - 1];
                    if let Some(known) = moves.reach(slice, last) {
                        path.pop();
                        break 'chain (known, path.len());
                    }
                    if path.len() > cap as usize {
                        // `state` reads every member; nothing is known about the states after it.
                        path.truncate(1);
                        break 'chain (unmixed(cap), 0);
                    }
                    match moves.get(slice, last) {
                        Some(advance) => match chain_end(&mut path, advance, cap) {
                            Some(end) => break 'chain end,
                            None => continue,
                        },
                        None => break last,
                    }
                }
            };
            let advance = self.slice_move(slice, unknown)?;
            if let Some(end) = chain_end(&mut path, advance, cap) {
                break end;
            }
        };
        let mut moves = write(&self.moves);
        let mut first = reach_at;
        for (k, &s) in path.iter().enumerate().rev() {
            let chars = reach_at.chars + (at - k) as u32;
            let reach = if chars >= cap {
                unmixed(cap)
            } else {
                Reach {
                    chars,
                    mixed: reach_at.mixed,
                }
            };
            moves.set_reach(slice, s, reach);
            first = reach;
        }
        Ok(first)
    }

    /// The move of `state` on slice `slice` where its own row tells it at once (`None` where
    /// it does not, or the row is not built yet): [`Advance::Mixed`] where two of the slice's
    /// ASCII characters lead to different states, and the dead state where every one of them
    /// dies and so does every byte that starts a longer character.
    ///
    /// Most states a fresh mask meets (inside a literal, a keyword, a number, between the
    /// members of an object) read a few characters and nothing else: one of the two answers.
    /// Finding that out by following the slice's characters ([`slice_move`](Self::slice_move))
    /// costs a few locks, allocations and the record of the move, per slice: a fifth of such a
    /// mask. One step per byte class answers it instead, exactly: ASCII characters are one byte
    /// each, and a longer character dies where its first byte does.
    pub(super) fn move_at_once(&self, slice: usize, state: u32) -> Option<Advance> {
        let m = read(&self.machine);
        if !m.explored[state as usize] {
            return None;
        }
        let mut targets = (self.slice_ascii_reps[slice].iter()).map(|&rep| m.step(state, rep));
        let first = targets.next();
        if targets.any(|t| Some(t) != first) {
            return Some(Advance::Mixed);
        }
        if first.is_some_and(|t| t != DEAD) {
            return None;
        }
        (!m.lives_past_ascii(state)).then_some(Advance::To(DEAD))
    }

    /// Where the characters of slice `slice` lead from `state`, remembered per state.
    pub(super) fn slice_move(&self, slice: usize, state: u32) -> Result<Advance> {
        if let Some(advance) = self.move_without_rows(slice, state)? {
            return Ok(advance);
        }
        let (advance, flags) = self.explored_move(slice, state)?;
        write(&self.moves).set(slice, state, advance, flags);
        Ok(advance)
    }

    /// The move of `state` on slice `slice` where it is known or can be read off the copy before
    /// ([`shifted_move`](Self::shifted_move)), which builds no row; `None` otherwise.
    pub(super) fn move_without_rows(&self, slice: usize, state: u32) -> Result<Option<Advance>> {
        self.move_without_rows_from(slice, state, &mut None)
    }

    /// [`move_without_rows`](Self::move_without_rows), with `state`'s
    /// [`copy_before`](Self::copy_before) kept in `before` once looked up, for a caller that
    /// asks the same state about several slices.
    fn move_without_rows_from(
        &self,
        slice: usize,
        state: u32,
        before: &mut Option<Option<(CopyAt, u32)>>,
    ) -> Result<Option<Advance>> {
        if let Some(known) = read(&self.moves).get(slice, state) {
            return Ok(Some(known));
        }
        match *before.get_or_insert_with(|| self.copy_before(state)) {
            Some(before) => self.shifted_move(slice, state, before),
            None => Ok(None),
        }
    }

    /// Where the characters of slice `slice` lead from `state`, found by following them
    /// ([`OneChar::advance`](crate::slice::OneChar::advance)), whether the state one copy on
    /// may read its move off this one, and whether it leads one copy on ([`MoveFlags`]).
    pub(super) fn explored_move(&self, slice: usize, state: u32) -> Result<(Advance, MoveFlags)> {
        let chars = self.tries.slices()[slice].chars();
        let reps = self.slice_reps[slice]
            .get_or_init(|| chars.representatives(&read(&self.machine).class_of));
        // The states the move steps to.
        let mut met = Vec::new();
        let attempt = {
            let m = read(&self.machine);
            let advance = chars.advance(state, DEAD, reps, |s, b| {
                let to = m.explored[s as usize].then(|| m.step(s, b))?;
                met.push(to);
                Some(to)
            });
            advance.map(|advance| (advance, move_flags(&m, state, advance, &met)))
        };
        if let Some(known) = attempt {
            return Ok(known);
        }
        // A row is missing: follow the characters again with the right to build rows.
        let mut m = write(&self.machine);
        let mut failure = None;
        met.clear();
        let advance = chars.advance(state, DEAD, reps, |s, b| {
            let to = explore_step(&mut m, &mut failure, s, b);
            met.push(to);
            Some(to)
        });
        if let Some(e) = failure {
            return Err(e);
        }
        // Every step answers once it may build rows, so the move is known.
        let advance = advance.unwrap_or(Advance::Mixed);
        Ok((advance, move_flags(&m, state, advance, &met)))
    }

    /// Where `state` stands in a counted repetition whose copies move on alike, and the state
    /// one copy before it there, where that state exists: what
    /// [`shifted_move`](Self::shifted_move) reads moves off.
    pub(super) fn copy_before(&self, state: u32) -> Option<(CopyAt, u32)> {
        let m = read(&self.machine);
        let det = m.determinizer.as_ref()?;
        let at = det.counted_copy(state).filter(|&at| det.copies_alike(at))?;
        Some((at, det.find_shifted_back(state, at.embedding)?))
    }

    /// The move of `state` on a slice read off that of the state one copy before it in a
    /// counted repetition, renamed one copy on (see [`crate::dfa::CopyAt`]): when the copies
    /// around `state` move on alike and that state's move is known and met only sets on which
    /// the renaming commutes with the automaton. `None` where it does not apply.
    ///
    /// A counted string's chain is then one explored move per change in how its copies move
    /// on (before and after `minLength`, at the end) and a hash lookup per other count, instead
    /// of a subset construction per count for the state and each multi-byte character's inside.
    ///
    /// `before` is `state`'s [`copy_before`](Self::copy_before), looked up by the caller, which
    /// may ask one state about several slices.
    pub(super) fn shifted_move(
        &self,
        slice: usize,
        state: u32,
        (at, before): (CopyAt, u32),
    ) -> Result<Option<Advance>> {
        let (advance, one_copy_on) = {
            let moves = read(&self.moves);
            let Some(advance) = moves.shiftable(slice, before) else {
                return Ok(None);
            };
            (advance, moves.steps_one_copy_on(slice, before))
        };
        let advance = match advance {
            Advance::To(to) if to != DEAD => {
                let mut m = write(&self.machine);
                let Some(det) = m.determinizer.as_mut() else {
                    return Ok(None);
                };
                let Some(to) = det.shifted(to, at.embedding)? else {
                    return Ok(None);
                };
                m.grow();
                Advance::To(to)
            }
            dead_or_mixed => dead_or_mixed,
        };
        // The renamed move met the renamed sets, one copy further on: shiftable in turn; and
        // where the move before led one copy on, this one does, renamed.
        let flags = MoveFlags {
            shiftable: true,
            one_copy_on,
        };
        write(&self.moves).set(slice, state, advance, flags);
        Ok(Some(advance))
    }
}
