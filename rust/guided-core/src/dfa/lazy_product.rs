//! Intersections and complements built only as far as the input goes.
//!
//! A JSON Schema writes "a string of at most 1,000 characters that is an email address", "a key
//! that is none of these patterns", "an object that is not of this shape". Each is a boolean
//! combination of languages, and the classic way to serve one is a product automaton: determinize
//! and minimize every operand, pair their states, minimize again. That is exact and cheap to run,
//! but it is paid in full before the first mask, and it is the size of the operands multiplied:
//! `.{0,1000}` against an email pattern is a few thousand states of JSON spellings times a
//! thousand counts, hundreds of milliseconds for a language generation then visits a few dozen
//! states of.
//!
//! [`LazyProduct`] is the same product, built on demand. Each operand keeps its own lazy subset
//! construction ([`Determinizer`]), and a state of the product is the tuple of the operands'
//! states, numbered as it is first reached. An operand is *positive* (the input must match it) or
//! *negative* (it must not); a complement is a negative operand beside the valid UTF-8 strings,
//! which is what complement means everywhere else in the crate. A tuple accepts when every
//! positive operand accepts and no negative one does. A tuple with a positive operand in its
//! dead state can never accept, and is the product's dead state; a negative operand in its dead
//! state can never accept again, and so no longer constrains anything.
//!
//! What the product cannot get for free is liveness. A minimized product has no state from which
//! no accepting state is reachable, and the token index relies on that: a token that leads into
//! such a state would be allowed though no valid text continues it. Tuples give no such promise:
//! `(after "a@", length 1000)` is live only if some continuation satisfies both operands at once.
//! So liveness is decided per tuple, when first asked, by a breadth-first search for a witness: a
//! path to an accepting tuple. When one is found, every tuple on the path is live. When the search
//! runs out of tuples to visit, none of them can reach acceptance and all are marked dead. The
//! search is short where the answer is yes (a witness is usually a few bytes away: close the
//! string, write an `@`), and where the answer is no it visits what lies beyond, which an eager
//! product would have built anyway.
//!
//! Costs and limits. A tuple costs one row of successors (one `u32` per byte class of the
//! product), computed from the operands' rows, which their constructions memoize per state. The
//! tuples are bounded by [`UNMINIMIZED_FACTOR`] times the configured state limit, the same
//! allowance an eager subset construction gets before minimization, and the operands by their own
//! limits. A limit reached while generation walks the product cannot be returned through the
//! questions the enclosing construction asks (is this state accepting, where does this byte lead),
//! so it is recorded in an error slot shared by every lazy product of one construction
//! ([`FailureSlot`]); the enclosing construction checks the slot after each step and fails that
//! step with the error, before anything answered in the meantime is used.
//!
//! Operands may not contain anchors (`^`, `$`) or recursive rules: anchored booleans keep their
//! eager products, and recursion has no product here at all.

use super::classes::ByteClassBuilder;
use super::{Anchors, ByteClasses, Determinizer, UNMINIMIZED_FACTOR};
use crate::error::{Error, Result};
use crate::nfa::Nfa;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// The dead tuple.
const DEAD: u32 = 0;
/// The start tuple: every operand at its start.
const START: u32 = 1;

/// The first error a lazy product of one construction met, if any; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct FailureSlot(Arc<Mutex<Option<Error>>>);

impl FailureSlot {
    /// The error recorded, if any.
    pub fn get(&self) -> Option<Error> {
        self.lock().clone()
    }

    fn set(&self, e: Error) {
        self.lock().get_or_insert(e);
    }

    fn lock(&self) -> MutexGuard<'_, Option<Error>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One operand of a product: its NFA, and whether the input must match it.
#[derive(Debug)]
pub struct Operand {
    /// The operand's NFA, without anchors or recursive rules.
    pub nfa: Nfa,
    /// True when the input must match the operand, false when it must not.
    pub positive: bool,
}

/// The product of some operands, built lazily; see the module documentation.
#[derive(Debug)]
pub struct LazyProduct {
    classes: ByteClasses,
    max_tuples: usize,
    failure: FailureSlot,
    inner: Mutex<Tuples>,
}

/// What is known of a tuple's future.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Future {
    Unknown,
    Live,
    Dead,
}

#[derive(Debug)]
struct Side {
    det: Determinizer,
    positive: bool,
    /// This operand's class of each of the product's classes.
    class_map: Vec<u8>,
    /// Successor rows of the operand's states, by state, as they are computed.
    rows: Vec<Option<Box<[u32]>>>,
}

#[derive(Debug)]
struct Tuples {
    sides: Vec<Side>,
    tuples: Vec<Box<[u32]>>,
    ids: FxHashMap<Box<[u32]>, u32>,
    rows: Vec<Option<Box<[u32]>>>,
    future: Vec<Future>,
    /// Whether a live tuple has a live successor, once asked.
    reads: Vec<Option<bool>>,
}

impl LazyProduct {
    /// The product of `operands` (at least one positive), with at most
    /// [`UNMINIMIZED_FACTOR`]` * max_states` tuples, recording its failures in `failure`.
    pub fn new(operands: Vec<Operand>, max_states: usize, failure: FailureSlot) -> Result<Self> {
        if !operands.iter().any(|o| o.positive) {
            return Err(Error::Invalid(
                "a product without a positive operand".into(),
            ));
        }
        let mut dets = Vec::with_capacity(operands.len());
        for o in operands {
            dets.push((
                Determinizer::new(o.nfa, Anchors::WHOLE_TEXT, max_states)?,
                o.positive,
            ));
        }
        let mut builder = ByteClassBuilder::new();
        for (det, _) in &dets {
            builder.add_partition(det.classes());
        }
        let classes = builder.build();
        let sides = dets
            .into_iter()
            .map(|(det, positive)| Side {
                class_map: classes
                    .representatives()
                    .iter()
                    .map(|&b| det.classes().get(b))
                    .collect(),
                det,
                positive,
                rows: Vec::new(),
            })
            .collect::<Vec<_>>();
        let start: Box<[u32]> = vec![START; sides.len()].into();
        let tuples = Tuples {
            sides,
            tuples: vec![Box::from([]), start.clone()],
            ids: FxHashMap::from_iter([(start, START)]),
            rows: vec![Some(vec![DEAD; classes.num_classes()].into()), None],
            future: vec![Future::Dead, Future::Unknown],
            reads: vec![Some(false), None],
        };
        Ok(LazyProduct {
            classes,
            max_tuples: max_states.saturating_mul(UNMINIMIZED_FACTOR).max(2),
            failure,
            inner: Mutex::new(tuples),
        })
    }

    /// The byte classes [`LazyProduct::next_class`] reads.
    pub fn classes(&self) -> &ByteClasses {
        &self.classes
    }

    /// The most tuples there can ever be: tuple ids stay below it.
    pub fn capacity(&self) -> usize {
        self.max_tuples
    }

    /// The start tuple.
    pub fn start(&self) -> u32 {
        START
    }

    /// The dead tuple.
    pub fn dead(&self) -> u32 {
        DEAD
    }

    /// Tuples created so far.
    pub fn num_states(&self) -> usize {
        self.lock().tuples.len()
    }

    /// The successor of `state` on class `class` if it can still lead to acceptance, else the
    /// dead tuple. A limit reached on the way is recorded in the failure slot.
    pub fn next_class(&self, state: u32, class: u8) -> u32 {
        let mut t = self.lock();
        let next = match t.row(state, self.max_tuples) {
            Ok(row) => row.get(class as usize).copied().unwrap_or(DEAD),
            Err(e) => return self.fail(e),
        };
        match t.is_live(next, self.max_tuples) {
            Ok(true) => next,
            Ok(false) => DEAD,
            Err(e) => self.fail(e),
        }
    }

    /// Whether `state` accepts.
    pub fn is_accepting(&self, state: u32) -> bool {
        self.lock().accepts(state)
    }

    /// Whether some byte leads from `state` to a tuple that can still reach acceptance.
    pub fn reads(&self, state: u32) -> bool {
        let mut t = self.lock();
        match t.reads(state, self.max_tuples) {
            Ok(r) => r,
            Err(e) => {
                self.fail(e);
                false
            }
        }
    }

    /// Heap bytes held, approximately.
    pub fn memory_bytes(&self) -> usize {
        let t = self.lock();
        let row = self.classes.num_classes() * std::mem::size_of::<u32>();
        t.tuples.len() * (row + t.sides.len() * std::mem::size_of::<u32>() + 32)
    }

    fn fail(&self, e: Error) -> u32 {
        self.failure.set(e);
        DEAD
    }

    fn lock(&self) -> MutexGuard<'_, Tuples> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Tuples {
    fn accepts(&self, t: u32) -> bool {
        t != DEAD
            && self.tuples.get(t as usize).is_some_and(|tuple| {
                self.sides
                    .iter()
                    .zip(tuple.iter())
                    .all(|(side, &s)| side.det.is_accepting(s) == side.positive)
            })
    }

    /// The successor row of tuple `t`, computed on first use.
    fn row(&mut self, t: u32, max_tuples: usize) -> Result<&[u32]> {
        let t = t as usize;
        if t >= self.tuples.len() {
            return Ok(&[]);
        }
        if self.rows[t].is_none() {
            let tuple = self.tuples[t].clone();
            for (side, &s) in self.sides.iter_mut().zip(tuple.iter()) {
                side.ensure_row(s)?;
            }
            let classes = self.sides[0].class_map.len();
            let mut row = vec![DEAD; classes];
            let mut next = vec![DEAD; tuple.len()];
            let mut prev: Option<(Vec<u32>, u32)> = None;
            for (c, slot) in row.iter_mut().enumerate() {
                let mut dead = false;
                for (i, side) in self.sides.iter().enumerate() {
                    let s = side.successor(tuple[i], c);
                    dead |= side.positive && s == DEAD;
                    next[i] = s;
                }
                if dead {
                    continue;
                }
                // Neighbouring classes usually agree, so compare with the last one first.
                *slot = match &prev {
                    Some((p, id)) if *p == next => *id,
                    _ => {
                        let id = self.intern(&next, max_tuples)?;
                        prev = Some((next.clone(), id));
                        id
                    }
                };
            }
            self.rows[t] = Some(row.into());
        }
        Ok(self.rows[t].as_deref().unwrap_or(&[]))
    }

    fn intern(&mut self, tuple: &[u32], max_tuples: usize) -> Result<u32> {
        if let Some(&id) = self.ids.get(tuple) {
            return Ok(id);
        }
        if self.tuples.len() >= max_tuples {
            return Err(Error::size_limit(
                "max_states",
                self.tuples.len() + 1,
                max_tuples,
            ));
        }
        let id = self.tuples.len() as u32;
        let key: Box<[u32]> = tuple.into();
        self.ids.insert(key.clone(), id);
        self.tuples.push(key);
        self.rows.push(None);
        self.future.push(Future::Unknown);
        self.reads.push(None);
        Ok(id)
    }

    /// Whether an accepting tuple is reachable from `from`: a breadth-first search for a
    /// witness, whose outcome is remembered for every tuple it settles.
    fn is_live(&mut self, from: u32, max_tuples: usize) -> Result<bool> {
        match self.future.get(from as usize) {
            None | Some(Future::Dead) => return Ok(false),
            Some(Future::Live) => return Ok(true),
            Some(Future::Unknown) => {}
        }
        let mut parent: FxHashMap<u32, u32> = FxHashMap::from_iter([(from, from)]);
        let mut queue = VecDeque::from([from]);
        let mut visited = vec![from];
        while let Some(t) = queue.pop_front() {
            if self.future[t as usize] == Future::Live || self.accepts(t) {
                // Every tuple on the path back to `from` reaches this one.
                let mut at = t;
                loop {
                    self.future[at as usize] = Future::Live;
                    let p = parent[&at];
                    if p == at {
                        break;
                    }
                    at = p;
                }
                return Ok(true);
            }
            let row = self.row(t, max_tuples)?.to_vec();
            for u in row {
                if u == DEAD || self.future[u as usize] == Future::Dead {
                    continue;
                }
                if let std::collections::hash_map::Entry::Vacant(v) = parent.entry(u) {
                    v.insert(t);
                    visited.push(u);
                    queue.push_back(u);
                }
            }
        }
        // Nothing reachable accepts, from any tuple the search saw.
        for v in visited {
            self.future[v as usize] = Future::Dead;
        }
        Ok(false)
    }

    fn reads(&mut self, t: u32, max_tuples: usize) -> Result<bool> {
        if let Some(r) = self.reads.get(t as usize).copied().flatten() {
            return Ok(r);
        }
        if !self.is_live(t, max_tuples)? {
            return Ok(false);
        }
        // A live tuple that does not accept reads on towards its witness.
        let mut r = !self.accepts(t);
        if !r {
            for u in self.row(t, max_tuples)?.to_vec() {
                if self.is_live(u, max_tuples)? {
                    r = true;
                    break;
                }
            }
        }
        self.reads[t as usize] = Some(r);
        Ok(r)
    }
}

impl Side {
    fn ensure_row(&mut self, s: u32) -> Result<()> {
        let s = s as usize;
        if self.rows.len() <= s {
            self.rows.resize(s + 1, None);
        }
        if self.rows[s].is_none() {
            let mut row = Vec::new();
            self.det.next_row(s as u32, &mut row)?;
            self.rows[s] = Some(row.into());
        }
        Ok(())
    }

    /// The successor of state `s` (whose row exists) on the product's class `c`.
    fn successor(&self, s: u32, c: usize) -> u32 {
        let theirs = self.class_map[c] as usize;
        self.rows[s as usize]
            .as_deref()
            .and_then(|r| r.get(theirs).copied())
            .unwrap_or(DEAD)
    }
}
