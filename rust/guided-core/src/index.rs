//! The token index: for each automaton state, which tokens may come next.
//!
//! A state's mask is found by walking the vocabulary's [`TokenTrie`](crate::trie::TokenTrie) through the automaton from
//! that state: every token whose bytes all survive is allowed, and a subtree is abandoned at its
//! first dead byte. EOS ids are added exactly when the state accepts. Masks are computed the first
//! time a state is asked for, cached, and stored once however many states share them (states deep
//! inside a JSON string typically do).
//!
//! The automaton need not be complete. [`TokenIndex::from_hir`] starts from a [`Determinizer`]
//! that has built only the dead and start states, and a walk that reaches a state without a row
//! asks the determinizer for it. A pattern whose full DFA would be enormous therefore serves masks
//! as long as the states generation actually visits fit the `max_states` budget, and compiling a
//! constraint costs one NFA construction rather than a full subset construction and minimization.
//! [`TokenIndex::from_dfa`] takes an already complete (minimal) DFA instead. A schema's
//! automaton may be a pushdown one ([`TokenIndex::from_json_schema`] keeps recursion as calls):
//! its states are configurations with a call stack, numbered as they are built like any other,
//! so nothing below needs to know.
//!
//! Concurrency: the index is shared by every request using the constraint, possibly from many
//! threads. Cached masks are read under a read lock. A walk over a complete automaton needs only a
//! read lock too, so cold masks compute in parallel; a walk that must grow the automaton takes
//! the write lock at the first row it misses and goes on from there, since growth is monotone:
//! what it read before stays true. Once the visited part of the automaton is built, everything
//! runs in parallel.
//!
//! States that read every printable character alike (inside a JSON string, under `.*`, inside a
//! string with `maxLength`) take their mask mostly from a precomputed [slice](crate::slice) and
//! walk only the tokens outside it. Where a slice's characters lead from each state is
//! remembered, so the states of a counted string (`maxLength: 40` is forty of them) share the
//! work of finding how many characters each may still take; and where the counts are copies of
//! one embedded automaton, a count's move is read off the count before it, renamed one copy on
//! ([`crate::dfa::CopyAt`]), so following the chain costs a hash lookup per count rather than a
//! subset construction per count and per character length. The tries of tokens that leave the
//! slice are walked from the chain's states, and a walk is remembered for the counts further on
//! whose walks are it renamed (module `leaving`), so that the masks inside a counted string mostly
//! look up what the first of them walked. Such a mask needs nothing of its own state's row, so
//! inside a counted string no count's row is built, and a step from a count follows a word's
//! characters along the chain too: a row per character, with the states inside each count's
//! escapes and multi-byte characters, was otherwise most of both. Where every member fits and
//! remembered walks serve every leaving trie, neighbouring counts have one mask, found by its
//! recipe instead of being built again. States inside a narrower run (an
//! identifier, a number, `[a-z0-9.-]{1,63}`, free text up to a tool call's trigger), and the
//! states a leading space leads to, do the same with a [class slice](crate::class_slice) found
//! from the state's own moves: the walk passes over the subtrees spelled from the class and
//! takes their tokens by length. A byte that leaves the class may head thousands of tokens of
//! its own (`.` and `-` inside a domain name, which start the next label or go on with this
//! one); below the trie's big heads, where the state such a byte leads to lives on thousands of
//! those tokens, it takes a class slice too, so that a count of a label walks a few hundred nodes
//! where it walked twenty thousand.
//!
//! Cost: one mask is `ceil(V/32)` words (25 KB at 200k tokens); a walk visits every trie node whose
//! parent survived, between a few hundred nodes (a digit state) and the whole trie (inside a free
//! string, about a million nodes at 200k tokens).

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, OnceLock, RwLock};

use rustc_hash::FxHashMap;
use smallvec::{smallvec, SmallVec};

use crate::bitmask::{Mask, MaskBuilder, TokenSet};
use crate::byte_set::ByteSet;
use crate::class_slice::{ByteClass, CharClass, ClassSlice, RunChain, MIN_CLASS_BYTES};
use crate::dfa::determinize::{Determinizer, DEFAULT_MAX_CALL_DEPTH};
use crate::dfa::{Anchors, ByteClasses, CopyAt, Dfa, DfaConfig};
use crate::error::{Error, Result};
use crate::hash_ids::IdsByHash;
use crate::json_schema::{self, SchemaOptions};
use crate::nfa::{Nfa, NfaConfig};
use crate::regex::Hir;
use crate::slice::{Advance, Representatives, TokenTries, BIG_HEAD_NODES, DENSE_CHARS};
use crate::structural_tag::{self, TagOptions};
use crate::trie::Anchor;
use crate::vocab::Vocabulary;

mod leaving;

use leaving::{FreshWalks, LeavingWalks, Orbit, PartPlan, WalkId};

/// The dead state: nothing can follow.
pub const DEAD: u32 = 0;
/// The state after an EOS token was accepted.
pub const TERMINAL: u32 = u32::MAX;

const NO_MASK: u32 = u32::MAX;

/// Most states a class's strings of one length may reach before [`TokenIndex::class_fit`] gives
/// the class up: past that, checking them costs more than the walk it would save.
const MAX_REACHED: usize = 32;

/// A state's ASCII moves in a shortcut search, grouped by where they lead: `(successor, the
/// bytes that lead there)`, each successor once and the dead state left out
/// ([`ByteClass::most_common`]'s input). A state leads to a few successors, mostly: kept on the
/// stack.
type Successors = SmallVec<[(u32, u128); 8]>;

/// The states a class's strings of one length reach in [`TokenIndex::class_fit`]: at most
/// [`MAX_REACHED`] once deduplicated (the list of a length's steps before that may be longer,
/// and then moves to the heap).
type Reached = SmallVec<[u32; MAX_REACHED]>;

/// The walks short enough to be taken without a search for a class slice
/// ([`TokenIndex::walk_is_short`]).
#[derive(Debug, Clone, Copy)]
struct ShortWalk {
    /// Most nodes below the live bytes.
    nodes: usize,
    /// Most steps counted two levels deep, and most of those below the second level.
    steps: (usize, usize),
}

/// Most trie nodes below a state's live bytes for which its mask is walked without looking for
/// a class slice ([`TokenIndex::walk_is_short`]): a walk of that many costs about what the
/// search does when it fails at once (under a microsecond).
const SHORT_WALK: usize = 64;

/// Most steps a walk may take, counted two levels deep, for its mask to be walked without looking
/// for a class slice ([`TokenIndex::walk_is_short`]), and most of those below the second
/// level: what a search that finds a class and follows its chain costs (30-90 k instructions at
/// the start of a number, 10-20 a step). Steps at the second level mostly die at once; those
/// below it are tokens that live on, which a class slice takes by the hundred for a lookup
/// (below each digit, GPT-2 and o200k have 50-170 tokens spelled from digits alone).
const SHORT_WALK_STEPS: (usize, usize) = (2048, 256);

/// Most bytes a state may live on for [`TokenIndex::walk_is_short`] to count its walk two levels
/// deep: a number's or a keyword's, not a string's, whose walk is long anyway.
const SHORT_WALK_HEADS: usize = 16;

/// Most steps [`TokenIndex::class_fit`] follows a state's most common successors looking for a
/// state that loops on them.
const LOOP_SEARCH: usize = 3;

/// Shortcut searches build rows only while the automaton uses less than one part in this many of
/// each of its budgets ([`TokenIndex::stepping`]).
const SPECULATION_SHARE: usize = 4;

/// Limits for a token index.
#[derive(Debug, Clone, Copy)]
pub struct IndexConfig {
    /// Most automaton states the index may build (a `SizeLimit` error named `max_states` past it).
    pub max_states: usize,
    /// Most NFA states the pattern may compile to.
    pub nfa_states: usize,
    /// Most calls of recursive rules open at once, for a language with rules (a grammar, a
    /// recursive JSON Schema): a step that needs a deeper call fails with a `SizeLimit` error
    /// named `max_stack` (see [`Determinizer::with_call_depth`]).
    pub max_call_depth: u32,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            max_states: 20_000,
            nfa_states: NfaConfig::default().max_states,
            max_call_depth: DEFAULT_MAX_CALL_DEPTH,
        }
    }
}

/// The automaton behind an index: rows of successors over byte classes, complete from the start
/// or grown on demand.
#[derive(Debug, Clone)]
struct Machine {
    class_of: [u8; 256],
    stride: usize,
    table: Vec<u32>,
    accepting: Vec<bool>,
    explored: Vec<bool>,
    unexplored: usize,
    determinizer: Option<Determinizer>,
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
    fn complete(dfa: &Dfa) -> Self {
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

    fn lazy(determinizer: Determinizer) -> Self {
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
    fn grow(&mut self) {
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

    fn num_states(&self) -> usize {
        self.accepting.len()
    }

    /// `state`, unless it is the determinizer's overflow state: a text that opens more calls
    /// than the stack allows is an error at the step that needs them, not a state.
    fn reached(&self, state: u32) -> Result<u32> {
        match &self.determinizer {
            Some(det) if det.overflow_state() == Some(state) => Err(det.overflow_error()),
            _ => Ok(state),
        }
    }

    fn is_complete(&self) -> bool {
        self.unexplored == 0
    }

    #[inline(always)]
    fn step(&self, state: u32, byte: u8) -> u32 {
        self.table[state as usize * self.stride + self.class_of[byte as usize] as usize]
    }

    /// Whether `state`'s row (built) lives on a byte that starts a character past ASCII: one
    /// from 0xC2 up (0x80 to 0xBF only continue one, 0xC0 and 0xC1 start none). Where it does
    /// not, every such character dies at its first byte.
    fn lives_past_ascii(&self, state: u32) -> bool {
        self.live_bytes(state).iter().any(|b| b >= 0xC2)
    }

    /// The bytes on which `state` does not die. Its row must be built.
    fn live_bytes(&self, state: u32) -> ByteSet {
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
    fn explore(&mut self, state: u32) -> Result<()> {
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

    fn memory_bytes(&self) -> usize {
        self.table.capacity() * 4
            + self.accepting.capacity() * 2
            + self
                .determinizer
                .as_ref()
                .map_or(0, Determinizer::memory_bytes)
    }
}

/// Per-state masks, each distinct mask stored once.
#[derive(Debug, Default)]
struct MaskCache {
    of_state: Vec<u32>,
    masks: Vec<Arc<Mask>>,
    by_hash: IdsByHash,
    by_recipe: FxHashMap<Recipe, u32>,
    hasher: foldhash::fast::FixedState,
    bytes: usize,
}

impl MaskCache {
    fn get(&self, state: u32) -> Option<Arc<Mask>> {
        let id = *self.of_state.get(state as usize)?;
        (id != NO_MASK).then(|| Arc::clone(&self.masks[id as usize]))
    }

    /// The mask of a state made by `recipe`, if a state's mask was made by it before: kept as
    /// `state`'s too.
    fn reuse(&mut self, state: u32, recipe: &Recipe) -> Option<Arc<Mask>> {
        let id = *self.by_recipe.get(recipe)?;
        self.keep(state, id);
        Some(Arc::clone(&self.masks[id as usize]))
    }

    /// Keeps `mask` as `state`'s, made by `recipe` if given.
    fn insert(&mut self, state: u32, mask: Mask, recipe: Option<Recipe>) -> Arc<Mask> {
        if let Some(existing) = self.get(state) {
            return existing;
        }
        // Hashed and compared in compact form: a sparse mask (a digit state's ten tokens) is a
        // few ids to hash and compare, not the whole vocabulary's words, and a shared one its
        // set's address and its own ids. Lists are hashed in any order, as they are kept in
        // the order found; one whose ids repeat, or a shared mask equal to another made on
        // another set, is then stored twice, which costs memory, not exactness. A dense mask
        // is 25 KB at 200k tokens, which `FxHasher` reads eight bytes at a time on one
        // dependent chain; foldhash reads long inputs in independent lanes, several times
        // faster.
        let unordered = |ids: &[u32]| {
            let spread = |id: u32| (u64::from(id) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let sum = ids
                .iter()
                .fold(0u64, |sum, &id| sum.wrapping_add(spread(id)));
            (ids.len(), sum)
        };
        let mut hasher = self.hasher.build_hasher();
        match &mask {
            Mask::Dense(set) => set.words().hash(&mut hasher),
            Mask::Sparse { ids, .. } => unordered(ids).hash(&mut hasher),
            Mask::Shared { base, ids } => (Arc::as_ptr(base), unordered(ids)).hash(&mut hasher),
        }
        let hash = hasher.finish();
        let masks = &self.masks;
        let id = match self.by_hash.find(hash, |id| *masks[id as usize] == mask) {
            Some(id) => id,
            None => {
                let id = self.masks.len() as u32;
                self.bytes += mask.memory_bytes();
                self.masks.push(Arc::new(mask));
                self.by_hash.insert(hash, id);
                id
            }
        };
        if let Some(recipe) = recipe {
            self.bytes += std::mem::size_of::<(Recipe, u32)>() + recipe.walks.len() * 4;
            self.by_recipe.insert(recipe, id);
        }
        self.keep(state, id);
        Arc::clone(&self.masks[id as usize])
    }

    fn keep(&mut self, state: u32, id: u32) {
        let s = state as usize;
        if self.of_state.len() <= s {
            self.of_state.resize(s + 1, NO_MASK);
        }
        self.of_state[s] = id;
    }
}

/// [`OneChar::advance`](crate::slice::OneChar::advance) of each state, per slice, as far as asked,
/// and how far the chains of those moves reach ([`TokenIndex::slice_reach`]).
#[derive(Debug, Default)]
struct SliceMoves {
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
struct Reach {
    chars: u32,
    mixed: bool,
}

/// How a mask is made: the shortcut that serves it, if any, and how the tries of tokens leaving
/// a slice's chain are served ([`TokenIndex::shape`]).
#[derive(Debug, Default)]
struct Shape {
    fit: Option<Shortcut>,
    plan: Vec<PartPlan>,
}

/// What a mask made of all of a slice's members and remembered walks of its leaving tokens is
/// made of: the slice, the walks, and whether the state accepts (EOS). Two states with one
/// recipe have one mask: inside a long counted string (`maxLength: 400`), the counts' masks are
/// their neighbours', found by the recipe instead of being built, hashed and compared (three
/// passes over 19 KB at 150k tokens).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Recipe {
    slice: usize,
    accepting: bool,
    walks: Vec<WalkId>,
}

/// Where a chain on a slice ends, given the move from its last state: the reach of that state
/// and its place, or `None` after pushing the next state (see [`TokenIndex::slice_reach`]).
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
    fn get(&self, slice: usize, state: u32) -> Option<Advance> {
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
    fn orbit(&self, slice: usize, state: u32) -> Option<Orbit> {
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

    fn memory_bytes(&self) -> usize {
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

/// What a walk is told and tells of a chain's tries of leaving tokens ([`TokenIndex::walk`]).
struct Parts<'a> {
    /// How each trie is served.
    plan: &'a [PartPlan],
    /// The walks done to remember.
    fresh: &'a mut FreshWalks,
}

impl<'a> Parts<'a> {
    fn new(plan: &'a [PartPlan], fresh: &'a mut FreshWalks) -> Self {
        Parts { plan, fresh }
    }
}

/// How a state's mask takes a shortcut past the tokens it reads alike.
#[derive(Debug, Clone)]
enum Shortcut {
    /// A fixed slice: the members of at most `chars` characters come from it in one union, and
    /// the rest of the vocabulary from a walk of its trie; with `walk_long`, the members longer
    /// than [`DENSE_CHARS`] are walked one by one. With a `chain` (the states its characters
    /// lead through, `chain[n]` after `n` of them, up to where the chain dies), the rest is
    /// walked from where each token leaves the slice ([`Slice::leaving`](crate::slice::Slice::leaving)).
    Slice {
        slice: usize,
        chars: usize,
        walk_long: bool,
        chain: Vec<u32>,
    },
    /// Class slices: the trie less its anchors' subtrees takes `root` (or is walked in full
    /// without one), and each anchor the state's path through it keeps alive takes its own part.
    Classes {
        root: Option<ClassFit>,
        anchors: Vec<AnchorPart>,
        heads: Vec<HeadPart>,
    },
}

/// The part of a [`Shortcut::Classes`] below one anchor of the trie: the state the anchor's path
/// leads to, and its class slice if it has one (its subtree is walked in full if not).
#[derive(Debug, Clone)]
struct AnchorPart {
    anchor: usize,
    at: u32,
    fit: Option<ClassFit>,
}

/// The part of a [`Shortcut::Classes`] below one of the trie's big heads
/// ([`TokenTries::heads`](crate::slice::TokenTries::heads)) on which the state leaves its root
/// class: the state the head's byte leads to and the class slice that fits it there. The root
/// walk passes over the head.
#[derive(Debug, Clone)]
struct HeadPart {
    head: usize,
    at: u32,
    fit: ClassFit,
}

/// A class slice that fits a state: the state reads its tokens of at most `chars` bytes alike,
/// and, where each length of the class's runs leads to one state as far as the slice's exits lie,
/// through `chain`.
#[derive(Debug, Clone)]
struct ClassFit {
    slice: Arc<ClassSlice>,
    class: CharClass,
    chars: usize,
    chain: Option<RunChain>,
    /// The ASCII bytes alive from the state, one bit each: those outside the class are where
    /// [`TokenIndex::head_parts`] looks.
    alive: u128,
}

impl ClassFit {
    /// The chain a walk of the slice may follow, if the runs have one.
    fn chain(&self) -> Option<&RunChain> {
        self.chain.as_ref()
    }
}

/// Which tokens may follow each automaton state, over one vocabulary.
#[derive(Debug)]
pub struct TokenIndex {
    machine: RwLock<Machine>,
    masks: RwLock<MaskCache>,
    moves: RwLock<SliceMoves>,
    /// Walks of tries of leaving tokens, remembered along counted strings.
    leaving: RwLock<LeavingWalks>,
    vocab: Arc<Vocabulary>,
    tries: Arc<TokenTries>,
    eos: Vec<u32>,
    eos_mask: Arc<Mask>,
    /// Per fixed slice, the bytes its moves need to try
    /// ([`OneChar::representatives`](crate::slice::OneChar::representatives)), made on first use.
    slice_reps: Vec<OnceLock<Representatives>>,
    /// The same for the printable characters past ASCII that wide class slices hold.
    wide_reps: OnceLock<Representatives>,
    /// The ASCII bytes grouped by the automaton's byte classes, as `(a byte of the group, the
    /// group)`: bytes of one group move alike from every state, so one of them answers for all.
    ascii_groups: Vec<(u8, u128)>,
    /// Per fixed slice, a byte of each ASCII group that meets the slice's characters: what
    /// [`move_at_once`](Self::move_at_once) steps, asked of every slice at every fresh state.
    slice_ascii_reps: Vec<Vec<u8>>,
    /// [`SHORT_WALK`] and [`SHORT_WALK_STEPS`]: the walks taken without a search for a class
    /// slice.
    short_walk: ShortWalk,
}

impl TokenIndex {
    /// An index over a complete DFA.
    pub fn from_dfa(dfa: &Dfa, vocab: Arc<Vocabulary>, tries: Arc<TokenTries>) -> Self {
        Self::with_machine(Machine::complete(dfa), vocab, tries)
    }

    /// An index over the automaton of `hir`, determinized lazily within `config.max_states`.
    pub fn from_hir(
        hir: &Hir,
        vocab: Arc<Vocabulary>,
        tries: Arc<TokenTries>,
        config: &IndexConfig,
    ) -> Result<Self> {
        let dfa_config = DfaConfig {
            max_states: config.max_states,
        };
        let nfa = Nfa::for_lazy(
            hir,
            &NfaConfig {
                max_states: config.nfa_states,
            },
            &dfa_config,
        )?;
        let determinizer = Determinizer::with_call_depth(
            nfa,
            Anchors::WHOLE_TEXT,
            config.max_states,
            config.max_call_depth,
        )?;
        Ok(Self::with_machine(
            Machine::lazy(determinizer),
            vocab,
            tries,
        ))
    }

    /// An index over the JSON texts of `schema`'s instances, with the keywords ignored in
    /// non-strict mode.
    ///
    /// Recursion stays recursion where it can ([`json_schema::json_schema_to_grammar`]): the
    /// automaton follows `$ref` cycles with a call stack up to `config.max_call_depth` deep and
    /// builds only the states a walk visits, so a schema whose unrolled language would be far
    /// past the limits (content types that contain one another, say) costs what generation
    /// visits. Where a recursive language would have to be bounded to stay exact (under `not`,
    /// say) the schema is refused with [`crate::Error::UnsupportedSchema`], never narrowed.
    pub fn from_json_schema(
        schema: &serde_json::Value,
        opts: &SchemaOptions,
        vocab: Arc<Vocabulary>,
        tries: Arc<TokenTries>,
        config: &IndexConfig,
    ) -> Result<(Self, Vec<String>)> {
        let recursive = json_schema::json_schema_to_grammar(schema, opts).and_then(|c| {
            let index = Self::from_hir(&c.hir, Arc::clone(&vocab), Arc::clone(&tries), config)?;
            Ok((index, c.warnings))
        });
        match recursive {
            Err(e) if json_schema::is_unrolling_needed(&e) => {
                let c = json_schema::json_schema_to_hir(schema, opts)?;
                let mut warnings = c.warnings;
                if opts.depth_bounds {
                    warnings.push(format!(
                        "bounded: {e}; recursion unrolled {} times, free values nest at most {} deep",
                        opts.max_recursion_depth, opts.max_free_depth
                    ));
                }
                Ok((Self::from_hir(&c.hir, vocab, tries, config)?, warnings))
            }
            other => other,
        }
    }

    /// An index over the outputs a structural tag allows (free text with calls in it, see
    /// [`structural_tag`]), with the warnings of the schemas it embeds. Recursive schemas stay
    /// recursive unless one stands where only an automaton can, as in
    /// [`TokenIndex::from_json_schema`]; then every schema in the tag is compiled unrolled.
    pub fn from_structural_tag(
        tag: &serde_json::Value,
        opts: &TagOptions,
        vocab: Arc<Vocabulary>,
        tries: Arc<TokenTries>,
        config: &IndexConfig,
    ) -> Result<(Self, Vec<String>)> {
        let build = |opts: &TagOptions| -> Result<(Self, Vec<String>)> {
            let c = structural_tag::compile(tag, opts)?;
            let index = Self::from_hir(&c.hir, Arc::clone(&vocab), Arc::clone(&tries), config)?;
            Ok((index, c.warnings))
        };
        match build(opts) {
            Err(e) if !opts.unroll && json_schema::is_unrolling_needed(&e) => build(&TagOptions {
                unroll: true,
                ..opts.clone()
            }),
            other => other,
        }
    }

    fn with_machine(machine: Machine, vocab: Arc<Vocabulary>, tries: Arc<TokenTries>) -> Self {
        let eos = vocab.eos_token_ids().to_vec();
        let mut eos_mask = TokenSet::empty(vocab.vocab_size());
        for &e in &eos {
            eos_mask.insert(e);
        }
        let mut ascii_groups: Vec<(u8, u128)> = Vec::new();
        for b in 0..128u8 {
            let class = machine.class_of[b as usize];
            match ascii_groups
                .iter_mut()
                .find(|(rep, _)| machine.class_of[*rep as usize] == class)
            {
                Some((_, bytes)) => *bytes |= 1 << b,
                None => ascii_groups.push((b, 1 << b)),
            }
        }
        let slice_ascii_reps = (tries.slices().iter())
            .map(|slice| {
                let ascii = slice.chars().ascii();
                (ascii_groups.iter())
                    .filter(|&&(_, bytes)| bytes & ascii != 0)
                    .map(|&(rep, _)| rep)
                    .collect()
            })
            .collect();
        TokenIndex {
            slice_reps: tries.slices().iter().map(|_| Default::default()).collect(),
            slice_ascii_reps,
            wide_reps: OnceLock::new(),
            ascii_groups,
            machine: RwLock::new(machine),
            masks: RwLock::new(MaskCache::default()),
            moves: RwLock::new(SliceMoves::default()),
            leaving: RwLock::new(LeavingWalks::default()),
            vocab,
            tries,
            eos,
            eos_mask: Arc::new(Mask::from_set(eos_mask)),
            // This crate's tests, whose vocabularies are a few dozen tokens, would find every
            // walk short: they search at every state, and two tests turn the limits on.
            short_walk: if cfg!(test) {
                ShortWalk {
                    nodes: 0,
                    steps: (0, 0),
                }
            } else {
                ShortWalk {
                    nodes: SHORT_WALK,
                    steps: SHORT_WALK_STEPS,
                }
            },
        }
    }

    /// Builds the tries an index walks; build them once per vocabulary and share them.
    pub fn tries_for(vocab: &Vocabulary) -> Result<TokenTries> {
        TokenTries::new(vocab)
    }

    /// The start state.
    pub fn initial_state(&self) -> u32 {
        1
    }

    /// Automaton states built so far.
    pub fn num_states(&self) -> usize {
        read(&self.machine).num_states()
    }

    /// The model's logit width.
    pub fn vocab_size(&self) -> usize {
        self.vocab.vocab_size()
    }

    /// The EOS token ids.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos
    }

    /// The vocabulary.
    pub fn vocabulary(&self) -> &Arc<Vocabulary> {
        &self.vocab
    }

    fn check_state(&self, state: u32) -> Result<()> {
        if state == TERMINAL || (state as usize) < self.num_states() {
            Ok(())
        } else {
            Err(Error::Invalid(format!(
                "state {state} does not exist: the index has {} states",
                self.num_states()
            )))
        }
    }

    fn check_token(&self, state: u32, token: i64) -> Result<u32> {
        if token < 0 || token as u64 >= self.vocab_size() as u64 {
            return Err(Error::InvalidToken {
                token,
                state,
                message: format!("token id out of range 0..{}", self.vocab_size()),
            });
        }
        Ok(token as u32)
    }

    /// Whether `state` accepts (EOS may come next).
    pub fn is_accepting(&self, state: u32) -> bool {
        state != TERMINAL && read(&self.machine).accepting.get(state as usize) == Some(&true)
    }

    /// Whether nothing but EOS can follow `state`: it accepts and no byte leads on (or EOS was
    /// already accepted).
    pub fn is_final(&self, state: u32) -> Result<bool> {
        if state == TERMINAL {
            return Ok(true);
        }
        self.check_state(state)?;
        self.with_row(state, |m| {
            let s = state as usize;
            m.accepting[s]
                && m.table[s * m.stride..(s + 1) * m.stride]
                    .iter()
                    .all(|&t| t == DEAD)
        })
    }

    /// Runs `f` on the machine once `state`'s row exists.
    fn with_row<T>(&self, state: u32, f: impl FnOnce(&Machine) -> T) -> Result<T> {
        {
            let m = read(&self.machine);
            if m.explored.get(state as usize) == Some(&true) {
                return Ok(f(&m));
            }
        }
        let mut m = write(&self.machine);
        m.explore(state)?;
        Ok(f(&m))
    }

    /// The state `token` leads to from `state`: [`DEAD`] if it is not allowed, [`TERMINAL`] for
    /// EOS in an accepting state.
    pub fn next_state(&self, state: u32, token: i64) -> Result<u32> {
        self.check_state(state)?;
        let token = self.check_token(state, token)?;
        if state == TERMINAL || state == DEAD {
            return Ok(DEAD);
        }
        if self.vocab.is_eos(token) {
            return Ok(if self.is_accepting(state) {
                TERMINAL
            } else {
                DEAD
            });
        }
        let bytes = match self.vocab.token_bytes(token) {
            Some(b) if !b.is_empty() => b,
            _ => return Ok(DEAD),
        };
        {
            let m = read(&self.machine);
            if let Some(t) = walk_bytes(&m, state, bytes) {
                return m.reached(t);
            }
        }
        // A row is missing. The characters a slice's chain reads are followed along it, whose
        // moves are mostly known, and only the bytes after them are walked: inside a counted
        // string, a word would otherwise build the row of each count it passes, with the
        // states inside each count's multi-byte characters and escapes, none of which a mask
        // there needs.
        let (s, read_bytes) = self.along_chain(state, bytes)?;
        let bytes = &bytes[read_bytes..];
        if s == DEAD || bytes.is_empty() {
            return read(&self.machine).reached(s);
        }
        let mut m = write(&self.machine);
        let mut s = s;
        for &b in bytes {
            m.explore(s)?;
            s = m.step(s, b);
            if s == DEAD {
                break;
            }
        }
        m.reached(s)
    }

    /// Where the characters `bytes` starts with lead from `state` along a slice's chain, as far
    /// as its moves are known without building rows
    /// ([`move_without_rows`](Self::move_without_rows)), with how many bytes they take;
    /// `(state, 0)` where no slice's move from `state` is known. The chain of the first slice
    /// whose move from `state` is known is taken: a slice's characters all lead to one state,
    /// so a whole character of it steps there without a row.
    fn along_chain(&self, state: u32, bytes: &[u8]) -> Result<(u32, usize)> {
        let slice = {
            let moves = read(&self.moves);
            (0..self.tries.slices().len())
                .find(|&i| matches!(moves.get(i, state), Some(Advance::To(_))))
        };
        let Some(slice) = slice else {
            return Ok((state, 0));
        };
        let chars = self.tries.slices()[slice].chars();
        let (mut s, mut taken, mut at) = (state, 0, chars.boundary());
        for (k, &b) in bytes.iter().enumerate() {
            let Some(next) = chars.read(at, b) else { break };
            at = next;
            if at != chars.boundary() {
                continue;
            }
            let Some(advance) = self.move_without_rows(slice, s)? else {
                break;
            };
            match advance {
                Advance::To(t) => (s, taken) = (t, k + 1),
                Advance::Mixed => break,
            }
            if s == DEAD {
                break;
            }
        }
        Ok((s, taken))
    }

    /// The mask of tokens allowed in `state` (EOS included where it accepts).
    pub fn mask(&self, state: u32) -> Result<Arc<Mask>> {
        self.check_state(state)?;
        if state == TERMINAL {
            return Ok(Arc::clone(&self.eos_mask));
        }
        if let Some(mask) = read(&self.masks).get(state) {
            return Ok(mask);
        }
        let shape = self.shape(state, false)?;
        let recipe = self.recipe(state, &shape);
        if let Some(mask) = recipe
            .as_ref()
            .and_then(|r| write(&self.masks).reuse(state, r))
        {
            return Ok(mask);
        }
        let mask = self.compute(state, &shape, false, |_, _| {})?.finish();
        Ok(write(&self.masks).insert(state, mask, recipe))
    }

    /// The mask of `state` if it is already known (no computation, no waiting on a walk).
    pub fn cached_mask(&self, state: u32) -> Option<Arc<Mask>> {
        if state == TERMINAL {
            return Some(Arc::clone(&self.eos_mask));
        }
        read(&self.masks).get(state)
    }

    /// The mask allowing exactly the EOS ids (what follows a terminated generation).
    pub fn eos_only(&self) -> &Arc<Mask> {
        &self.eos_mask
    }

    /// The successor of every token from `state` ([`DEAD`] where not allowed).
    pub fn next_states(&self, state: u32) -> Result<Vec<u32>> {
        self.check_state(state)?;
        let mut out = vec![DEAD; self.vocab_size()];
        if state == TERMINAL {
            return Ok(out);
        }
        let shape = self.shape(state, true)?;
        self.compute(state, &shape, true, |id, next| out[id as usize] = next)?;
        if self.is_accepting(state) {
            for &e in &self.eos {
                out[e as usize] = TERMINAL;
            }
        }
        Ok(out)
    }

    /// The mask of `state`; when `watched`, each surviving token is reported to `visit` with the
    /// state it leads to. Without `watched`, slices that fit `state` supply their members in
    /// one go (which `visit` would not see).
    fn compute(
        &self,
        state: u32,
        shape: &Shape,
        watched: bool,
        visit: impl FnMut(u32, u32),
    ) -> Result<MaskBuilder> {
        let mut set = self.tokens(state, shape, watched, visit)?;
        // Last, after the machine's lock is released (`add_eos` takes it), and after the
        // tokens: EOS ids are mostly the vocabulary's last, so a short list of ids stays
        // ascending and needs no sort.
        self.add_eos(state, &mut set);
        Ok(set)
    }

    /// The tokens of [`compute`](Self::compute), without the EOS ids.
    fn tokens(
        &self,
        state: u32,
        shape: &Shape,
        watched: bool,
        mut visit: impl FnMut(u32, u32),
    ) -> Result<MaskBuilder> {
        let mut set = MaskBuilder::new(self.vocab_size());
        let (fit, plan) = (shape.fit.as_ref(), shape.plan.as_slice());
        let mut fresh = FreshWalks::default();
        let mut machine = Locked::new(&self.machine);
        let m = machine.get();
        if m.is_complete() {
            let heads = m.live_bytes(state);
            let step = |s, b| m.step(s, b);
            let parts = Parts::new(plan, &mut fresh);
            self.walk(state, &heads, fit, step, &mut set, &mut visit, parts);
            return Ok(set);
        }
        // Most walks on a growing automaton only meet rows that already exist, and run under
        // the shared lock; one that meets a missing row takes the exclusive lock there and goes
        // on where it was (rows are only ever added, so what it read stays true). A walk that
        // gave up at the first missing row and started again under the exclusive lock stepped
        // through the part before it twice: on a bounded-string schema, half as many steps again
        // as the walks that built rows took. A caller that watches each token takes the
        // exclusive lock from the start, as does a state whose own row is missing, unless a
        // slice's chain serves it, which steps from the state only in the tries of tokens that
        // leave the slice at once (and not at all where a walk remembered along a counted
        // string answers for them).
        if watched || !(m.explored[state as usize] || chain_serves(fit)) {
            machine.exclusive().explore(state)?;
        }
        let m = machine.get();
        let heads = if m.explored[state as usize] {
            m.live_bytes(state)
        } else {
            ByteSet::EMPTY
        };
        let mut failure = None;
        let step = |s: u32, b: u8| machine.step(&mut failure, s, b);
        let parts = Parts::new(plan, &mut fresh);
        self.walk(state, &heads, fit, step, &mut set, &mut visit, parts);
        match failure {
            Some(e) => Err(e),
            None => {
                self.remember_walks(machine.get(), fit, &fresh);
                Ok(set)
            }
        }
    }

    /// How `state`'s mask is made ([`Shape`]): a caller that watches each token walks the
    /// whole trie; otherwise a slice or class slices may serve, and remembered walks a chain's
    /// leaving tokens (looked up before the machine is locked; the walks done instead are
    /// remembered after).
    fn shape(&self, state: u32, watched: bool) -> Result<Shape> {
        if watched {
            return Ok(Shape::default());
        }
        let fit = match self.slice_fit(state)? {
            Some(fit) => Some(fit),
            None => {
                let live = self.with_row(state, |m| m.live_bytes(state))?;
                if self.walk_is_short(state, &live) {
                    None
                } else {
                    self.class_fits(state, &live)
                }
            }
        };
        let plan = self.leaving_plan(fit.as_ref());
        Ok(Shape { fit, plan })
    }

    /// The [`Recipe`] of a mask of `shape`, where it has one: a slice's chain that takes every
    /// member and whose every trie of leaving tokens a remembered walk serves. (Where only the
    /// members up to a length fit, near a string's end, the next count's mask takes fewer.)
    fn recipe(&self, state: u32, shape: &Shape) -> Option<Recipe> {
        let Some(Shortcut::Slice {
            slice,
            chars,
            walk_long: false,
            chain,
        }) = &shape.fit
        else {
            return None;
        };
        let of = &self.tries.slices()[*slice];
        let parts = of.leaving().iter().take_while(|(n, _)| *n < chain.len());
        if chain.is_empty() || *chars < of.max_chars() || shape.plan.len() != parts.count() {
            return None;
        }
        let walks = shape.plan.iter().map(|p| match p {
            PartPlan::Known(walk) => Some(*walk),
            _ => None,
        });
        Some(Recipe {
            slice: *slice,
            accepting: self.is_accepting(state),
            walks: walks.collect::<Option<Vec<_>>>()?,
        })
    }

    /// How each trie of leaving tokens of `fit`'s chain is served ([`PartPlan`]): by a walk
    /// remembered from a state fewer copies along the same orbit, where one answers. Tries
    /// past the end of the plan are [`PartPlan::Plain`].
    fn leaving_plan(&self, fit: Option<&Shortcut>) -> Vec<PartPlan> {
        let Some(Shortcut::Slice { slice, chain, .. }) = fit else {
            return Vec::new();
        };
        let (moves, walks) = (read(&self.moves), read(&self.leaving));
        let leaving = self.tries.slices()[*slice].leaving();
        let reads = leaving.iter().take_while(|(n, _)| *n < chain.len());
        // The chain's states mostly stand on one orbit: its walks are looked up once. A chain
        // on no orbit (a free string's, which loops) plans nothing and allocates nothing.
        let mut last: Option<(u32, &[u32])> = None;
        let mut plan = Vec::new();
        for (part, &(n, _)) in reads.enumerate() {
            let Some(orbit) = moves.orbit(*slice, chain[n]) else {
                continue;
            };
            if plan.is_empty() {
                // A counted string's chain has a trie per length of its leaving tokens, twenty
                // or more: a plan grown a part at a time was reallocated as it grew, per mask.
                plan.reserve_exact(leaving.len());
            }
            let remembered = match last {
                Some((root, remembered)) if root == orbit.root => remembered,
                _ => walks.orbit(*slice, orbit.root),
            };
            last = Some((orbit.root, remembered));
            plan.resize(part, PartPlan::Plain);
            plan.push(match walks.find(remembered, part, orbit.offset) {
                Some(walk) => PartPlan::Known(walk),
                None => PartPlan::Fresh(orbit),
            });
        }
        plan
    }

    /// Adds the tokens of the remembered walks `plan` serves tries by.
    fn add_known(&self, plan: &[PartPlan], set: &mut MaskBuilder) {
        if !plan.iter().any(|p| matches!(p, PartPlan::Known(_))) {
            return;
        }
        let walks = read(&self.leaving);
        for p in plan {
            if let PartPlan::Known(walk) = p {
                walks.add(*walk, set);
            }
        }
    }

    /// Remembers the `fresh` walks of `fit`'s chain ([`LeavingWalks::remember`]).
    fn remember_walks(&self, m: &Machine, fit: Option<&Shortcut>, fresh: &FreshWalks) {
        let (Some(det), Some(Shortcut::Slice { slice, .. })) = (&m.determinizer, fit) else {
            return;
        };
        if fresh.is_empty() {
            return;
        }
        // The walks of one chain mostly share a root: its copy is found once.
        let mut last: Option<(u32, Option<CopyAt>)> = None;
        let copy_of = |root: u32| match last {
            Some((r, at)) if r == root => at,
            _ => {
                let at = det.counted_copy(root);
                last = Some((root, at));
                at
            }
        };
        write(&self.leaving).remember(det, *slice, fresh, copy_of);
    }

    /// Adds the EOS ids to `set` where `state` accepts.
    fn add_eos(&self, state: u32, set: &mut MaskBuilder) {
        if self.is_accepting(state) {
            for &e in &self.eos {
                set.insert(e);
            }
        }
    }

    /// The walk of `state`'s tokens, through `fit` if there is one; `heads` are the bytes on
    /// which `state` does not die.
    ///
    /// A slice's chain serves its tries of leaving tokens as `parts` plans, and lists in it the
    /// walks it did to remember.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        state: u32,
        heads: &ByteSet,
        fit: Option<&Shortcut>,
        mut step: impl FnMut(u32, u8) -> u32,
        set: &mut MaskBuilder,
        visit: &mut impl FnMut(u32, u32),
        mut parts: Parts<'_>,
    ) {
        let mut trie = self.tries.full();
        match fit {
            None => {}
            Some(Shortcut::Slice {
                slice,
                chars,
                walk_long,
                chain,
            }) => {
                let (chars, walk_long, fit_slice) = (*chars, *walk_long, *slice);
                let slice = &self.tries.slices()[fit_slice];
                slice.add_members_within(chars, set);
                if walk_long {
                    let no_pruning = |_| false;
                    slice.long_members().walk_heads(
                        state,
                        DEAD,
                        heads,
                        no_pruning,
                        &mut step,
                        |id, next| {
                            set.insert(id);
                            visit(id, next);
                        },
                    );
                }
                if !chain.is_empty() {
                    // After the slice's members, which make the set dense: each token a bit.
                    self.add_known(parts.plan, set);
                    let reads = slice.leaving().iter().take_while(|(n, _)| *n < chain.len());
                    for part in 0..reads.count() {
                        self.walk_part(fit_slice, chain, part, &mut step, set, visit, &mut parts);
                    }
                    return;
                }
                trie = slice.rest();
            }
            Some(Shortcut::Classes {
                root,
                anchors,
                heads: head_parts,
            }) => {
                let fits = root
                    .iter()
                    .chain(anchors.iter().filter_map(|part| part.fit.as_ref()))
                    .chain(head_parts.iter().map(|part| &part.fit));
                for fit in fits {
                    fit.slice.add_members_within(fit.chars, set);
                }
                let mut report = |id: u32, next: u32| {
                    set.insert(id);
                    visit(id, next);
                };
                let (all, big) = (self.tries.anchors(), self.tries.heads());
                // The big heads with parts of their own are walked there.
                let mut root_heads = *heads;
                for part in head_parts {
                    root_heads.remove(big[part.head].path[0]);
                }
                match root {
                    Some(fit) => {
                        let start = (state, &root_heads, fit.chain());
                        fit.slice
                            .walk(trie, all, start, DEAD, &mut step, &mut report)
                    }
                    None => {
                        let below_anchor = |i: usize| all.iter().any(|a| a.node == i);
                        let heads = &root_heads;
                        trie.walk_heads(state, DEAD, heads, below_anchor, &mut step, &mut report);
                    }
                }
                for part in anchors {
                    let anchor = &all[part.anchor];
                    for &id in &anchor.tokens {
                        report(id, part.at);
                    }
                    match &part.fit {
                        Some(fit) => {
                            let start = (part.at, &ByteSet::ALL, fit.chain());
                            fit.slice
                                .walk(trie, all, start, DEAD, &mut step, &mut report)
                        }
                        None => {
                            let nothing = |_| false;
                            trie.walk_below(anchor, part.at, DEAD, nothing, &mut step, &mut report)
                        }
                    }
                }
                for part in head_parts {
                    for &id in &big[part.head].tokens {
                        report(id, part.at);
                    }
                    let start = (part.at, &ByteSet::ALL, part.fit.chain());
                    part.fit
                        .slice
                        .walk(trie, all, start, DEAD, &mut step, &mut report)
                }
                return;
            }
        }
        let no_pruning = |_| false;
        trie.walk_heads(state, DEAD, heads, no_pruning, step, |id, next| {
            set.insert(id);
            visit(id, next);
        });
    }

    /// Trie `part` of the tokens leaving slice `slice`, served as `parts` plans it: nothing to
    /// do for a remembered walk (whose tokens [`add_known`](Self::add_known) adds), and a walk
    /// otherwise ([`walk_leaving`](Self::walk_leaving)), which is listed in `parts.fresh` to
    /// remember when its state is on an orbit.
    #[allow(clippy::too_many_arguments)]
    fn walk_part(
        &self,
        slice: usize,
        chain: &[u32],
        part: usize,
        step: &mut impl FnMut(u32, u8) -> u32,
        set: &mut MaskBuilder,
        visit: &mut impl FnMut(u32, u32),
        parts: &mut Parts<'_>,
    ) {
        let plan = parts.plan.get(part).copied().unwrap_or(PartPlan::Plain);
        let fresh = &mut *parts.fresh;
        match plan {
            PartPlan::Known(_) => {}
            PartPlan::Fresh(_) => {
                let (met, tokens) = (&mut fresh.met, &mut fresh.tokens);
                let from = met.len();
                let mut watch = |s: u32, b: u8| {
                    let to = step(s, b);
                    // Siblings in the trie often step to one state: listed once in a row.
                    if to != DEAD && (met.len() == from || met.last() != Some(&to)) {
                        met.push(to);
                    }
                    to
                };
                let mut keep = |id: u32, next: u32| {
                    tokens.push(id);
                    visit(id, next);
                };
                self.walk_leaving(slice, chain, part, &mut watch, set, &mut keep);
            }
            PartPlan::Plain => self.walk_leaving(slice, chain, part, step, set, visit),
        }
        if let PartPlan::Fresh(orbit) = plan {
            parts.fresh.close(part, orbit);
        }
    }

    /// The walk of one trie of tokens leaving slice `slice` (part `part` of
    /// [`Slice::leaving`](crate::slice::Slice::leaving)): the slice's characters lead along the
    /// chain, so a token's first `n` of them cost no steps and its bytes after them are walked
    /// from `chain[n]`; a token that starts with more than the chain reads dies in them.
    fn walk_leaving(
        &self,
        slice: usize,
        chain: &[u32],
        part: usize,
        step: &mut impl FnMut(u32, u8) -> u32,
        set: &mut MaskBuilder,
        visit: &mut impl FnMut(u32, u32),
    ) {
        let (n, leaving) = &self.tries.slices()[slice].leaving()[part];
        let Some(&at) = chain.get(*n) else { return };
        let no_pruning = |_| false;
        leaving.walk_heads(at, DEAD, &ByteSet::ALL, no_pruning, step, |id, next| {
            set.insert(id);
            visit(id, next);
        });
    }

    /// The first slice whose characters `state` reads alike all the way (see [`crate::slice`]),
    /// with how many of them it may take ([`slice_reach`](Self::slice_reach)). A chain on which
    /// the characters part ways before [`DENSE_CHARS`] steps leaves the slice out; one on which
    /// they part ways later takes the members up to there and walks the longer ones.
    ///
    /// A slice that already reads `state` alike is asked first
    /// ([`first_slice`](Self::first_slice)).
    fn slice_fit(&self, state: u32) -> Result<Option<Shortcut>> {
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
    fn move_at_once(&self, slice: usize, state: u32) -> Option<Advance> {
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

    /// The class slices that fit `state` (see [`crate::class_slice`]): one over the whole trie
    /// for the state itself, and one below each anchor of the trie for the state its path leads
    /// to (after a space, say, where an identifier may start).
    /// `live` are the bytes `state` lives on.
    fn class_fits(&self, state: u32, live: &ByteSet) -> Option<Shortcut> {
        let mut anchors = Vec::new();
        for (k, anchor) in self.tries.anchors().iter().enumerate() {
            // The shortcut walks the anchor's subtree on its own, from this state: without it
            // (a row it may not build), there is no shortcut.
            let at = self.stepping(|step| {
                let mut s = state;
                for &b in &anchor.path {
                    s = step(s, b)?;
                    if s == DEAD {
                        break;
                    }
                }
                Some(s)
            })?;
            if at != DEAD {
                anchors.push(AnchorPart {
                    anchor: k,
                    at,
                    fit: self.class_fit(at, Some(anchor)),
                });
            }
        }
        // A class is made of bytes the state lives on: one that lives on fewer (a key's next
        // letter, the `"` that ends it) has none, which it finds out here without stepping
        // every byte class (a tenth of a structural mask's first computation).
        let root = (live.len() >= MIN_CLASS_BYTES as usize)
            .then(|| self.class_fit(state, None))
            .flatten();
        let heads = root
            .as_ref()
            .map_or(Vec::new(), |fit| self.head_parts(state, fit));
        if root.is_none() && anchors.iter().all(|part| part.fit.is_none()) {
            return None;
        }
        Some(Shortcut::Classes {
            root,
            anchors,
            heads,
        })
    }

    /// The parts below the trie's big heads for a state inside the class of its `root` fit:
    /// each head whose byte leaves the class and keeps the state alive, where a class slice fits
    /// the state it leads to. Inside a domain name's label, `.` starts the next label and `-`
    /// goes on with this one; each heads thousands of tokens that a plain walk would step
    /// through letter by letter, where the state after it reads letters alike again. A head
    /// whose live part from there is under [`BIG_HEAD_NODES`] nodes is left to the plain walk.
    fn head_parts(&self, state: u32, root: &ClassFit) -> Vec<HeadPart> {
        let heads = self.tries.heads();
        // Only the bytes alive outside the class: none at all in most states (a digit's).
        let leaves = |b: u8| !root.class.ascii.contains(b) && root.alive >> b & 1 != 0;
        let candidates: Vec<usize> = (0..heads.len())
            .filter(|&k| leaves(heads[k].path[0]))
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        let Some(ats) = self.stepping(|step| {
            (candidates.iter())
                .map(|&k| step(state, heads[k].path[0]))
                .collect::<Option<Vec<u32>>>()
        }) else {
            return Vec::new();
        };
        let full = self.tries.full();
        (candidates.into_iter().zip(ats))
            .filter(|&(_, at)| at != DEAD)
            // A head is big, but the part of it alive from where it leads may not be: after a
            // number's digit, `.` and `e` head thousands of tokens of which a few spell digits.
            // A walk of those few costs less than finding a class slice for them.
            .filter(|&(head, at)| {
                self.with_row(at, |m| m.live_bytes(at))
                    .is_ok_and(|live| full.nodes_below(Some(&heads[head]), &live) >= BIG_HEAD_NODES)
            })
            .filter_map(|(head, at)| {
                let fit = self.class_fit(at, Some(&heads[head]))?;
                Some(HeadPart { head, at, fit })
            })
            .collect()
    }

    /// Whether a walk without a shortcut from `state`, which lives on `live`, is short enough
    /// that a search for a class slice would cost more than it could save: the tokens that start
    /// with those bytes are at most [`SHORT_WALK`] nodes (a digit of a vocabulary that spells
    /// numbers one digit a token, as Qwen2's and Llama 2's do), or the state lives on a few
    /// bytes (enough for a class, [`MIN_CLASS_BYTES`], and at most [`SHORT_WALK_HEADS`]) and,
    /// counted two levels deep with the bytes each of those leads on to, the walk takes at
    /// most [`SHORT_WALK_STEPS`] steps and few of them below the second level (the start of a
    /// number in Qwen2: `-` and the space head hundreds of tokens, nearly all dead at their
    /// second byte). Finding `live` builds the state's row, which the walk needs first anyway;
    /// the second level builds the rows of the states `live` leads to, which the walk also
    /// steps from, unless a speculative row cannot be built here, and then the search goes
    /// ahead.
    fn walk_is_short(&self, state: u32, live: &ByteSet) -> bool {
        let full = self.tries.full();
        if full.nodes_below(None, live) <= self.short_walk.nodes {
            return true;
        }
        // A state on fewer bytes than a class needs takes no search below the root anyway
        // (`class_fits`), and counting its walk (a structural state's: `"` heads hundreds of
        // tokens) cost more than the search it would spare.
        if live.len() < MIN_CLASS_BYTES as usize || live.len() > SHORT_WALK_HEADS {
            return false;
        }
        let Some(successors) = self.with_speculative_row(state, |m| {
            live.iter()
                .map(|b| (b, m.step(state, b)))
                .collect::<SmallVec<[(u8, u32); SHORT_WALK_HEADS]>>()
        }) else {
            return false;
        };
        let mut lives: SmallVec<[(u32, ByteSet); 4]> = SmallVec::new();
        let (mut steps, mut deep) = (0, 0);
        for (b, to) in successors {
            let Some(head) = full.head(b) else {
                continue;
            };
            let live_to = match lives.iter().find(|(t, _)| *t == to) {
                Some((_, l)) => *l,
                None => match self.with_speculative_row(to, |m| m.live_bytes(to)) {
                    Some(l) => {
                        lives.push((to, l));
                        l
                    }
                    None => return false,
                },
            };
            let (children, below) = full.steps_below(head, &live_to);
            steps += 1 + children + below;
            deep += below;
            if steps > self.short_walk.steps.0 || deep > self.short_walk.steps.1 {
                return false;
            }
        }
        true
    }

    /// The class slice of `state` over the whole trie or below anchor `anchor`, with how many of
    /// its bytes `state` may take: `chars` such that every string of the class's bytes is alive
    /// from `state` up to that length and dead past it.
    ///
    /// The condition is checked on the sets of states the class's strings of each length reach
    /// (for the class of one state's most common successor, one state per length, the chain of
    /// [`slice_fit`](Self::slice_fit)), as far as the class's longest token: at most
    /// [`DENSE_CHARS`] bytes, and longer ones are never pruned, so the walk meets them. Two
    /// classes are tried: the bytes that loop on the state the most common successors lead to,
    /// where they are alive from `state` (an identifier that may also spell a keyword: its letters
    /// part ways at once, into keyword prefixes, but every one of them stays alive), and the
    /// bytes of `state`'s most common successor (a counted class, which never comes back). Each
    /// is tried first with the printable characters past ASCII (a wide [`CharClass`]) where they
    /// all lead on alike from `state`, and then without them.
    fn class_fit(&self, state: u32, anchor: Option<&Anchor>) -> Option<ClassFit> {
        let groups = &self.ascii_groups;
        // Grouped by successor as they are read, each state's moves name its most common
        // successor at once (counting per group, per search step, was a seventh of a number
        // mask's first computation on o200k).
        let mut moves = Successors::new();
        self.ascii_successors(state, &mut moves)?;
        // Both candidate classes are made of bytes alive from `state`, and a class needs
        // [`MIN_CLASS_BYTES`] of them: most states inside a literal have one, and find that out
        // here without the searches below.
        let alive = moves.iter().fold(0u128, |acc, &(_, bytes)| acc | bytes);
        if alive.count_ones() < MIN_CLASS_BYTES {
            return None;
        }
        let first = ByteClass::most_common(&moves, DEAD);
        // Follow the most common successors to a state that loops on them, a few steps at most:
        // a loop that far in is an identifier's, a counted class never loops.
        let looping = 'search: {
            let (mut s, mut best) = (state, first);
            for _ in 0..LOOP_SEARCH {
                let Some((class, next)) = best else {
                    break;
                };
                if next == s {
                    break 'search class.within(alive);
                }
                // A row the search may not build ends it, as a search that finds no loop.
                if self.ascii_successors(next, &mut moves).is_none() {
                    break;
                }
                (s, best) = (next, ByteClass::most_common(&moves, DEAD));
            }
            None
        };
        let mut candidates: SmallVec<[ByteClass; 2]> = looping.into_iter().collect();
        candidates.extend(first.map(|(class, _)| class));
        candidates.dedup();
        // The printable characters past ASCII join a class where they all lead on alike from
        // `state` (free text, the body of a string with a pattern): their tokens, most of a
        // multilingual vocabulary, are then taken by length too. Where the chain finds that they
        // part ways later, the class is tried without them.
        let wide = self.tries.wide_chars();
        // Their representatives, where they all lead on alike. Only a state that lives on a
        // byte that starts such a character can take them: its row (built by the pass above)
        // says so without the representatives, which an index whose runs are all ASCII
        // (digits, identifiers) then never computes.
        let leads_alive = {
            let m = read(&self.machine);
            m.explored[state as usize] && m.lives_past_ascii(state)
        };
        let wide_reps = leads_alive
            .then(|| {
                self.wide_reps
                    .get_or_init(|| wide.representatives(&read(&self.machine).class_of))
            })
            .filter(|reps| {
                matches!(
                    self.stepping(|step| wide.advance(state, DEAD, reps, step)),
                    Some(Advance::To(t)) if t != DEAD
                )
            });
        let widths: &[bool] = if wide_reps.is_some() {
            &[true, false]
        } else {
            &[false]
        };
        let classes = candidates
            .iter()
            .flat_map(|&ascii| widths.iter().map(move |&wide| CharClass { ascii, wide }));
        for class in classes {
            let slice = self.tries.class_slice(class, anchor);
            // As far as the longest token, the chain builds only rows the walk would build.
            let steps = slice.longest();
            if steps == 0 {
                continue;
            }
            let reps: SmallVec<[u8; 32]> = groups
                .iter()
                .filter(|&&(_, bytes)| class.ascii.includes(bytes))
                .map(|&(rep, _)| rep)
                .collect();
            let deepest = slice.deepest_exit().filter(|_| !class.wide);
            let found = self.stepping(|step| {
                let mut reached: Reached = smallvec![state];
                let mut next = Reached::new();
                // The states of the runs while each length reaches one.
                let mut chain = deepest.map(|_| RunChain {
                    states: vec![state],
                    beyond: None,
                });
                let mut chars = steps;
                // The state of every length past the loop, where the runs die or come back.
                let mut end = None;
                for n in 1..=steps {
                    next.clear();
                    for &s in &reached {
                        for &b in &reps {
                            next.push(step(s, b)?);
                        }
                        if let Some(wide_reps) = wide_reps.filter(|_| class.wide) {
                            match wide.advance(s, DEAD, wide_reps, &mut *step)? {
                                Advance::To(t) => next.push(t),
                                Advance::Mixed => return Some(None),
                            }
                        }
                    }
                    next.sort_unstable();
                    next.dedup();
                    match next.as_slice() {
                        [DEAD] => {
                            chars = n - 1;
                            end = Some(DEAD);
                            break;
                        }
                        [DEAD, ..] => return Some(None),
                        // Back where it was: alive at every length.
                        _ if next == reached => {
                            chars = usize::MAX;
                            end = Some(next[0]);
                            break;
                        }
                        _ if next.len() > MAX_REACHED => return Some(None),
                        [one] => {
                            if let Some(c) = &mut chain {
                                c.states.push(*one);
                            }
                        }
                        _ => chain = None,
                    }
                    std::mem::swap(&mut reached, &mut next);
                }
                if let Some(c) = &mut chain {
                    c.beyond = end;
                }
                Some(Some((chars, chain)))
            });
            if let Some(Some((chars, chain))) = found {
                let chain = chain.and_then(|c| self.extend_chain(c, &reps, deepest?));
                return Some(ClassFit {
                    slice,
                    class,
                    chars,
                    chain,
                    alive,
                });
            }
        }
        None
    }

    /// `state`'s moves on the ASCII byte groups, grouped by successor ([`Successors`]), read
    /// off its row into `out`.
    fn ascii_successors(&self, state: u32, out: &mut Successors) -> Option<()> {
        out.clear();
        self.with_speculative_row(state, |m| {
            for &(rep, bytes) in &self.ascii_groups {
                let to = m.step(state, rep);
                if to == DEAD {
                    continue;
                }
                match out.iter_mut().find(|(t, _)| *t == to) {
                    Some((_, all)) => *all |= bytes,
                    None => out.push((to, bytes)),
                }
            }
        })
    }

    /// Runs `f` on the machine once `state`'s row exists, building it as
    /// [`stepping`](Self::stepping) builds rows (`None` past its share). A search reads a few
    /// states' rows whole, under the shared lock: stepping each byte group through `stepping`
    /// cost a lock check per group.
    fn with_speculative_row<T>(&self, state: u32, f: impl FnOnce(&Machine) -> T) -> Option<T> {
        {
            let m = read(&self.machine);
            if m.explored[state as usize] {
                return Some(f(&m));
            }
        }
        self.stepping(|step| step(state, 0).map(|_| ()))?;
        Some(f(&read(&self.machine)))
    }

    /// `chain` followed on to runs of `deepest` bytes where it stopped short of them (at the
    /// slice's longest member): from its last state, each length's runs must still lead to one
    /// state, read off the class's byte groups `reps`. `None` where they part ways, or where a
    /// row the search may not build is missing.
    fn extend_chain(&self, mut chain: RunChain, reps: &[u8], deepest: usize) -> Option<RunChain> {
        if chain.beyond.is_some() || deepest < chain.states.len() {
            return Some(chain);
        }
        self.stepping(|step| {
            let mut next = Vec::with_capacity(reps.len());
            while chain.states.len() <= deepest {
                let s = *chain.states.last()?;
                next.clear();
                for &b in reps {
                    next.push(step(s, b)?);
                }
                next.sort_unstable();
                next.dedup();
                match next.as_slice() {
                    [DEAD] => chain.beyond = Some(DEAD),
                    [t] if *t == s => chain.beyond = Some(s),
                    [t] => {
                        chain.states.push(*t);
                        continue;
                    }
                    _ => return None,
                }
                break;
            }
            Some(chain.clone())
        })
    }

    /// Runs `f` with the automaton's transition, to find a shortcut: under the shared lock while
    /// the rows it steps through exist, and under the exclusive lock from the first one that
    /// does not, where `step` builds the rows it needs while the automaton is within
    /// [`SPECULATION_SHARE`] of its budgets. Rows built here are speculative (the walk might
    /// never have needed them), so past that share, or if a row fails to build, `step` answers
    /// `None`, the search gives up (`None`) and the mask is walked in full: a shortcut never
    /// spends the budget the answers need.
    fn stepping<T>(
        &self,
        mut f: impl FnMut(&mut dyn FnMut(u32, u8) -> Option<u32>) -> Option<T>,
    ) -> Option<T> {
        let mut machine = Locked::new(&self.machine);
        let mut step = |s: u32, b: u8| {
            if let Some(m) = machine.built(s) {
                return Some(m.step(s, b));
            }
            let m = machine.exclusive();
            if !m.explored[s as usize] {
                let room = m
                    .determinizer
                    .as_ref()
                    .is_some_and(|d| d.is_below_share(SPECULATION_SHARE));
                if !room || m.explore(s).is_err() {
                    return None;
                }
            }
            Some(m.step(s, b))
        };
        f(&mut step)
    }

    /// Where the characters of slice `slice` lead from `state`, remembered per state.
    fn slice_move(&self, slice: usize, state: u32) -> Result<Advance> {
        if let Some(advance) = self.move_without_rows(slice, state)? {
            return Ok(advance);
        }
        let (advance, flags) = self.explored_move(slice, state)?;
        write(&self.moves).set(slice, state, advance, flags);
        Ok(advance)
    }

    /// The move of `state` on slice `slice` where it is known or can be read off the copy before
    /// ([`shifted_move`](Self::shifted_move)), which builds no row; `None` otherwise.
    fn move_without_rows(&self, slice: usize, state: u32) -> Result<Option<Advance>> {
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
    fn explored_move(&self, slice: usize, state: u32) -> Result<(Advance, MoveFlags)> {
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
    fn copy_before(&self, state: u32) -> Option<(CopyAt, u32)> {
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
    fn shifted_move(
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

    /// The bytes every continuation of `state` starts with (jump-forward): followed while exactly
    /// one byte leads on and the state does not accept, at most `limit` bytes.
    pub fn forced_bytes(&self, state: u32, limit: usize) -> Result<Vec<u8>> {
        self.check_state(state)?;
        let mut out = Vec::new();
        if state == TERMINAL || state == DEAD {
            return Ok(out);
        }
        let mut s = state;
        while out.len() < limit && !self.is_accepting(s) {
            let only = self.with_row(s, |m| {
                let mut only: Option<(u8, u32)> = None;
                for b in 0..=255u8 {
                    let t = m.step(s, b);
                    if t != DEAD {
                        if only.is_some() {
                            return None;
                        }
                        only = Some((b, t));
                    }
                }
                only
            })?;
            match only {
                Some((b, t)) => {
                    out.push(b);
                    s = t;
                }
                None => break,
            }
        }
        Ok(out)
    }

    /// Bytes held by the automaton, the cached masks and (shared) the tries.
    pub fn memory_bytes(&self) -> usize {
        read(&self.machine).memory_bytes()
            + read(&self.masks).bytes
            + read(&self.moves).memory_bytes()
            + read(&self.leaving).memory_bytes()
            + self.tries.memory_bytes()
    }

    /// Distinct masks cached so far.
    pub fn num_masks(&self) -> usize {
        read(&self.masks).masks.len()
    }
}

/// What is known of a slice move besides where it leads.
#[derive(Debug, Clone, Copy, Default)]
struct MoveFlags {
    /// The move may be renamed one copy on along the state's counted repetition: the state
    /// stands in one copy of one, not the first, and every set the move met stayed in that copy
    /// and the next ([`crate::dfa::CopyAt`]).
    shiftable: bool,
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

/// Whether `fit` is a slice's chain, whose walk reads no heads of the state it starts from: its
/// tokens are the slice's members and the tries of tokens leaving it, walked from the chain's
/// states ([`TokenIndex::walk`]).
fn chain_serves(fit: Option<&Shortcut>) -> bool {
    matches!(fit, Some(Shortcut::Slice { chain, walk_long: false, .. }) if !chain.is_empty())
}

/// `m`'s step from `state` on `byte`, building the row it needs; the first error is kept in
/// `failure`, and every step after it dies.
fn explore_step(m: &mut Machine, failure: &mut Option<Error>, state: u32, byte: u8) -> u32 {
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
fn walk_bytes(m: &Machine, state: u32, bytes: &[u8]) -> Option<u32> {
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
struct Locked<'a> {
    lock: &'a RwLock<Machine>,
    shared: Option<std::sync::RwLockReadGuard<'a, Machine>>,
    exclusive: Option<std::sync::RwLockWriteGuard<'a, Machine>>,
}

impl<'a> Locked<'a> {
    fn new(lock: &'a RwLock<Machine>) -> Self {
        Locked {
            lock,
            shared: Some(read(lock)),
            exclusive: None,
        }
    }

    /// The machine under whichever lock is held. One always is (the shared one is let go only
    /// as the exclusive one is taken); were neither, the shared one would be taken again.
    fn get(&mut self) -> &Machine {
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
    fn exclusive(&mut self) -> &mut Machine {
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
    fn step(&mut self, failure: &mut Option<Error>, state: u32, byte: u8) -> u32 {
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
    fn built(&self, state: u32) -> Option<&Machine> {
        let m: &Machine = match (&self.exclusive, &self.shared) {
            (Some(m), _) => m,
            (None, Some(m)) => m,
            (None, None) => return None,
        };
        m.explored[state as usize].then_some(m)
    }
}

/// Poisoning only records that another thread panicked mid-update; every update here leaves the
/// structures consistent before it can panic, so the data stays usable.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfa::EmbeddedAutomaton;
    use crate::regex::parse;

    fn vocab(tokens: &[&str], eos: u32) -> Arc<Vocabulary> {
        let mut all: Vec<Option<Vec<u8>>> =
            tokens.iter().map(|t| Some(t.as_bytes().to_vec())).collect();
        all.insert(eos as usize, None);
        Arc::new(Vocabulary::new(all, vec![eos], None).expect("valid test vocabulary"))
    }

    fn index(pattern: &str, v: &Arc<Vocabulary>, lazy: bool) -> TokenIndex {
        let hir = parse(pattern).expect("valid pattern");
        let trie = Arc::new(TokenIndex::tries_for(v).unwrap());
        if lazy {
            TokenIndex::from_hir(&hir, Arc::clone(v), trie, &IndexConfig::default()).expect("index")
        } else {
            let dfa = Dfa::from_hir(&hir, &DfaConfig::default()).expect("dfa");
            TokenIndex::from_dfa(&dfa, Arc::clone(v), trie)
        }
    }

    /// Brute force: token t is allowed after prefix p iff some completion of p+t matches.
    fn brute(pattern: &str, v: &Vocabulary, prefix: &str) -> Vec<u32> {
        brute_bytes(pattern, v, prefix.as_bytes())
    }

    fn brute_bytes(pattern: &str, v: &Vocabulary, prefix: &[u8]) -> Vec<u32> {
        let dfa = Dfa::from_hir(&parse(pattern).unwrap(), &DfaConfig::default()).unwrap();
        let s = prefix
            .iter()
            .fold(dfa.start(), |s, &b| dfa.next_state(s, b));
        brute_at(&dfa, v, s)
    }

    /// Brute force from state `s` of a complete automaton.
    fn brute_at(dfa: &Dfa, v: &Vocabulary, s: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for id in 0..v.len() as u32 {
            if v.is_eos(id) {
                if dfa.is_accepting(s) {
                    out.push(id);
                }
                continue;
            }
            let Some(bytes) = v.token_bytes(id) else {
                continue;
            };
            let mut t = s;
            for &b in bytes {
                t = dfa.next_state(t, b);
            }
            if t != 0 && !bytes.is_empty() {
                out.push(id);
            }
        }
        out
    }

    /// Deep expressions compile on any stack: an object with thousands of optional members is an
    /// expression nested once per member (see `json_schema::objects`), and its index and printed
    /// form are built on a thread with a small stack, where recursion a level per member would
    /// overflow it long before the work budget ends the compilation.
    #[test]
    fn thousands_of_optional_members_compile_on_a_small_stack() {
        let properties: serde_json::Map<String, serde_json::Value> = (0..5_000)
            .map(|i| (format!("p{i}"), serde_json::json!({"type": "integer"})))
            .collect();
        let schema = serde_json::json!({"type": "object", "properties": properties});
        let small = std::thread::Builder::new().stack_size(256 * 1024);
        let worker = small.spawn(move || {
            let bytes: Vec<String> = (b' '..=b'~').map(|b| (b as char).to_string()).collect();
            let v = vocab(&bytes.iter().map(String::as_str).collect::<Vec<_>>(), 0);
            let tries = Arc::new(TokenIndex::tries_for(&v).unwrap());
            let opts = SchemaOptions::default();
            let config = IndexConfig::default();
            let (index, _) = TokenIndex::from_json_schema(&schema, &opts, v, tries, &config)
                .expect("5,000 optional members are within the budgets");
            let mut state = index.initial_state();
            for &b in br#"{"p4999":1}"# {
                state = index.next_state(state, i64::from(b - b' ' + 1)).unwrap();
            }
            let end = index.next_state(state, 0).unwrap();
            let printed = json_schema::json_schema_to_regex(&schema, &opts).map(|(r, _)| r.len());
            (end, printed)
        });
        let (end, printed) = worker.unwrap().join().expect("no stack overflow");
        assert_eq!(end, TERMINAL);
        // The printed form may be past its node budget, but says so.
        assert!(
            matches!(printed, Ok(_) | Err(Error::SizeLimit { .. })),
            "{printed:?}"
        );
    }

    #[test]
    fn threads_growing_one_index_agree_with_one_thread() {
        // Walks that meet rows other threads have not built yet take the exclusive lock part
        // of the way through and go on from there; every mask along every path must still be
        // the one a single thread finds on an index of its own.
        let words = class_words();
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let v = vocab(&tokens, tokens.len() as u32);
        let pattern = r"[a-z_]{1,12}(?:[.@-][a-z0-9]{1,9}){0,4}|[0-9]{1,20}|\(+[a-z]*\)*";
        let masks_along = |idx: &TokenIndex, path: &[i64]| {
            let mut state = idx.initial_state();
            let mut masks = vec![idx.mask(state).unwrap().ids()];
            for &t in path {
                state = idx.next_state(state, t).unwrap();
                masks.push(idx.mask(state).unwrap().ids());
            }
            masks
        };
        let reference = index(pattern, &v, true);
        let mut paths: Vec<Vec<i64>> = Vec::new();
        let start = reference.initial_state();
        for t in reference.mask(start).unwrap().ids() {
            let one = reference.next_state(start, i64::from(t)).unwrap();
            for u in reference.mask(one).unwrap().ids() {
                if !v.is_eos(t) && !v.is_eos(u) {
                    paths.push(vec![i64::from(t), i64::from(u)]);
                }
            }
        }
        assert!(paths.len() > 100, "{} paths", paths.len());
        let expected: Vec<_> = paths.iter().map(|p| masks_along(&reference, p)).collect();
        let shared = index(pattern, &v, true);
        std::thread::scope(|scope| {
            for k in 0..4 {
                let (paths, expected, shared) = (&paths, &expected, &shared);
                scope.spawn(move || {
                    // Each thread takes the paths in its own order, so that they race.
                    let n = paths.len();
                    for i in (0..n).map(|i| (i * (2 * k + 1) + k * n / 4) % n) {
                        let found = masks_along(shared, &paths[i]);
                        assert_eq!(found, expected[i], "path {:?}", paths[i]);
                    }
                });
            }
        });
    }

    #[test]
    fn masks_equal_brute_force_lazy_and_complete() {
        let v = vocab(&["a", "b", "ab", "ba", "1", "12", "x", "aa", "b1"], 9);
        for pattern in ["(ab)+1?", "a*b*[0-9]{0,2}", "x|ab1"] {
            for lazy in [false, true] {
                let idx = index(pattern, &v, lazy);
                let mut state = idx.initial_state();
                for prefix in ["", "a", "ab"] {
                    if !prefix.is_empty() {
                        state = idx
                            .next_state(idx.initial_state(), v_id(&v, prefix))
                            .unwrap();
                        if state == DEAD {
                            continue;
                        }
                    }
                    let got: Vec<u32> = idx.mask(state).unwrap().ids();
                    assert_eq!(
                        got,
                        brute(pattern, &v, prefix),
                        "{pattern} after {prefix:?} lazy={lazy}"
                    );
                }
            }
        }
    }

    #[test]
    fn counted_character_runs_equal_brute_force() {
        // Tokens of every length up to past the counts below, in and out of both slices, so that
        // masks taken by length from a slice meet the walk of everything else.
        let mut words: Vec<String> = ["a", "\"", "\\", "a\"", "\\\"", "é\"", "\n", "x", "xy", "é"]
            .iter()
            .map(|w| w.to_string())
            .collect();
        // Past `DENSE_CHARS` too, where members are walked one by one.
        for n in (1..=9).chain([15, 16, 17, 18, 25, 40]) {
            words.push("ab".repeat(n)[..n].to_string());
            words.push("é".repeat(n));
        }
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let eos = tokens.len() as u32;
        let v = vocab(&tokens, eos);
        let patterns = [
            r#""[^"\\]{0,5}""#,
            r#""(?:[^"\\]|\\.){2,4}"x"#,
            r".{2,7}",
            r#"[^"]{3}xy|a.{0,2}"#,
            r"(?:ab|é){0,3}a*",
            r".{0,4}(?:\n.{0,3})?",
            r"[aé]{0,12}",
            r#""[^"\\]{0,19}""#,
            r".{16,17}x|.{30,41}",
            r"(?:a|b|é){0,60}",
        ];
        assert_patterns_equal_brute_force(&patterns, &v, 3);
    }

    /// The lazy index of `pattern` after the masks of every text of up to three tokens, and
    /// how many states those built.
    fn masked_index(pattern: &str, v: &Arc<Vocabulary>) -> (TokenIndex, u32) {
        let idx = index(pattern, v, true);
        mask_texts(&idx, v, 3);
        let states = read(&idx.machine).num_states() as u32;
        (idx, states)
    }

    /// Computes the mask of every state a text of up to `depth` tokens reaches.
    fn mask_texts(idx: &TokenIndex, v: &Vocabulary, depth: usize) {
        let mut frontier = vec![idx.initial_state()];
        for _ in 0..depth {
            let mut next = Vec::new();
            for state in frontier {
                for t in idx.mask(state).unwrap().ids() {
                    if !v.is_eos(t) {
                        next.push(idx.next_state(state, i64::from(t)).unwrap());
                    }
                }
            }
            next.sort_unstable();
            next.dedup();
            frontier = next;
        }
    }

    /// The states of a counted repetition read their slice moves off the copy before them
    /// (`shifted_move`) where the copies around them move on alike: each move read off equals
    /// the move followed from scratch, on both sides of a minimum count, towards the last copies,
    /// in looping repetitions, through escapes and multi-byte characters; and the repetitions
    /// that the text can enter again after a character (where the sets mix copies) must not
    /// confuse it.
    #[test]
    fn moves_read_off_the_copy_before_equal_explored_moves() {
        let mut words: Vec<String> = [
            "a", "b", "c", "x", "y", ";", "\"", "\\", "\\n", "\\u00e9", "é", "中", "😀", "a\"",
            "ab", "\n",
        ]
        .iter()
        .map(|w| w.to_string())
        .collect();
        for n in [3, 5, 8, 13, 17] {
            words.push("ab".repeat(n)[..n].to_string());
            words.push("é".repeat(n));
        }
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let v = vocab(&tokens, tokens.len() as u32);
        let patterns = [
            r#""(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){3,40}""#,
            r#""(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,20}",?"#,
            r".{0,50}",
            r"[a-zé中😀]{20,}",
            r"(?:ab|c|é){18,30}x",
            r"(?:a?){0,30}b",
            r"(?:[a-z]{0,20}[a-z])*",
            r"(?:[a-zé]{0,24};)*",
            r"(?:[a-c]{2,18}y){1,20}",
        ];
        let mut read_off = 0;
        for pattern in patterns {
            // Masks along every text of up to three tokens follow the chains there.
            let (idx, states) = masked_index(pattern, &v);
            for slice in 0..idx.tries.slices().len() {
                // A mask decides the move of a state whose row tells it at once and keeps no
                // record of it (`move_at_once`): record every state's move, so that the states
                // after it may read theirs off it.
                for state in 0..states {
                    idx.slice_move(slice, state).unwrap();
                }
                for state in 0..states {
                    let Some(before) = idx.copy_before(state) else {
                        continue;
                    };
                    if let Some(shifted) = idx.shifted_move(slice, state, before).unwrap() {
                        read_off += 1;
                        let (explored, _) = idx.explored_move(slice, state).unwrap();
                        assert_eq!(shifted, explored, "{pattern}: state {state}, slice {slice}");
                    }
                }
            }
        }
        assert!(
            read_off > 100,
            "only {read_off} moves were read off the copy before"
        );
        // Where the text may enter the repetition again after a character, the first copy's
        // move meets copy 0 and nothing may be read off it; without the way back, it may.
        let a = i64::from(tokens.iter().position(|&t| t == "a").unwrap() as u32);
        for (pattern, expected) in [(r"(?:.{2,30})*", false), (r".{2,30}", true)] {
            let idx = index(pattern, &v, true);
            let first = idx.next_state(idx.initial_state(), a).unwrap();
            for slice in 0..idx.tries.slices().len() {
                let (_, flags) = idx.explored_move(slice, first).unwrap();
                assert_eq!(flags.shiftable, expected, "{pattern}, slice {slice}");
            }
        }
    }

    /// A trie of leaving tokens served by a walk remembered fewer copies back along a counted
    /// string keeps the tokens its own walk keeps: checked for every state and trie served so
    /// after masks along texts of up to three tokens, on both sides of a minimum count, towards
    /// the end, through escapes and multi-byte characters, and where the text may enter the
    /// repetition again; and the masks equal a brute-force check of every token.
    #[test]
    fn remembered_leaving_walks_equal_fresh_walks() {
        let mut words: Vec<String> = [
            "a", "b", "x", "\"", "\",", "\"}", "\\", "\\n", "\\u00e9", "\\u00", "é", "中", "a\"",
            "ab\"", "a\\n", "\\na", "\\nab\"", "é\"", ",", "}", "\n",
        ]
        .iter()
        .map(|w| w.to_string())
        .collect();
        for n in [3, 5, 8, 13] {
            let run = "ab".repeat(n)[..n].to_string();
            words.push(format!("{run}\""));
            words.push(format!("{run}\\t"));
            words.push(format!("{run}\\nab"));
            words.push(run);
        }
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let v = vocab(&tokens, tokens.len() as u32);
        let patterns = [
            r#""(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,30}"(?:,|\})"#,
            r#""(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){6,24}""#,
            r#"(?:[^"\\]|\\n){2,40}"b?"#,
            r#"(?:"(?:[^"\\]|\\n){0,20}",)*"#,
            r#".{0,40}"x"#,
        ];
        let mut served = 0;
        for pattern in patterns {
            let (idx, states) = masked_index(pattern, &v);
            for state in 1..states {
                let fit = idx.slice_fit(state).unwrap();
                let Some(Shortcut::Slice { slice, chain, .. }) = &fit else {
                    continue;
                };
                let mut remembered = MaskBuilder::new(v.vocab_size());
                let plan = idx.leaving_plan(fit.as_ref());
                idx.add_known(&plan, &mut remembered);
                let mut walked = MaskBuilder::new(v.vocab_size());
                let mut m = write(&idx.machine);
                let mut failure = None;
                let mut step = |s: u32, b: u8| explore_step(&mut m, &mut failure, s, b);
                for (part, _) in plan
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| matches!(p, PartPlan::Known(_)))
                {
                    served += 1;
                    idx.walk_leaving(*slice, chain, part, &mut step, &mut walked, &mut |_, _| {});
                }
                assert!(failure.is_none());
                let (remembered, walked) = (remembered.finish().ids(), walked.finish().ids());
                assert_eq!(remembered, walked, "{pattern}: state {state}");
            }
        }
        assert!(
            served > 100,
            "only {served} tries were served by remembered walks"
        );
        assert_patterns_equal_brute_force(&patterns, &v, 3);
    }

    /// Tokens that end part-way through a character count it among a slice's characters when
    /// every completion of it is in the slice (`0xC3`, `0xE4 0xB8`), and are walked otherwise
    /// (`0xC2` may become a control, `0xE2 0x80` a line separator): in counted runs, at the end
    /// of a run where only a character outside the slice leads on, and in JSON strings.
    #[test]
    fn cut_characters_in_counted_runs_equal_brute_force() {
        let mut tokens: Vec<Vec<u8>> = ["a", "b", "ab", "\"", "x", "é", "中", "\u{85}", "\u{2028}"]
            .iter()
            .map(|t| t.as_bytes().to_vec())
            .collect();
        let cut: [&[u8]; 13] = [
            &[0xC3],
            &[0xC2],
            b"a\xE4",
            &[0xE4, 0xB8],
            b"ab\xE4\xB8",
            &[0xE2],
            &[0xE2, 0x80],
            &[0xE2, 0x82],
            &[0xED],
            &[0xF0, 0x9F],
            b"ab\xF0",
            &[0xF4, 0x8F, 0xBF],
            b"\"\xC3",
        ];
        tokens.extend(cut.iter().map(|t| t.to_vec()));
        let eos = tokens.len() as u32;
        let mut all: Vec<Option<Vec<u8>>> = tokens.into_iter().map(Some).collect();
        all.push(None);
        let v = Arc::new(Vocabulary::new(all, vec![eos], None).expect("vocabulary"));
        let patterns = [
            r#""[^"\\]{0,3}""#,
            r#""(?:[^"\\]|\\.){1,4}""#,
            r".{0,3}",
            r"[a-z]{0,2}(?:\x85|\u2028)",
            r"[a-zé中]{0,3}\u2028?",
            r"(?:.|\x85){2,4}",
        ];
        assert_patterns_equal_brute_force(&patterns, &v, 4);
    }

    /// A state whose live bytes start few tokens (a count of digits, over a vocabulary that has
    /// no longer numbers) is walked without a search for a class slice: no slice is built, and
    /// the masks equal brute force. The same index searching at every state builds one.
    #[test]
    fn short_walks_take_no_class_slice() {
        let mut words: Vec<String> = (0..10).map(|d| d.to_string()).collect();
        words.extend(["a", "ab", "x", "é", "\"", " ", " a"].map(String::from));
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let v = vocab(&tokens, tokens.len() as u32);
        let pattern = "[0-9]{1,12}x?";
        for (nodes, builds) in [(SHORT_WALK, false), (0, true)] {
            let mut idx = index(pattern, &v, true);
            idx.short_walk = ShortWalk {
                nodes,
                steps: (0, 0),
            };
            let before = idx.tries.memory_bytes();
            let mut state = idx.initial_state();
            let mut text = String::new();
            for digit in "31415926535".chars() {
                assert_eq!(idx.mask(state).unwrap().ids(), brute(pattern, &v, &text));
                state = idx.next_state(state, v_id(&v, &digit.to_string())).unwrap();
                text.push(digit);
            }
            assert_eq!(
                idx.tries.memory_bytes() > before,
                builds,
                "short walks {nodes}"
            );
        }
    }

    /// At the start of a number, `-` heads many tokens that die at their second byte: counted
    /// two levels deep, the walk is short, and no class slice is searched for or built (with
    /// zero bounds, one is); every mask equals brute force either way.
    #[test]
    fn walks_short_two_levels_deep_take_no_class_slice() {
        let mut words: Vec<String> = (0..10).map(|d| d.to_string()).collect();
        words.extend((b'a'..=b'z').map(|c| format!("-{}", c as char)));
        words.extend(["-", "--", "->", "-1", "x", " ", "\"", ","].map(String::from));
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let v = vocab(&tokens, tokens.len() as u32);
        let pattern = "-?[0-9]{1,6}(,-?[0-9]{1,6})*";
        for (steps, builds) in [(SHORT_WALK_STEPS, false), ((0, 0), true)] {
            let mut idx = index(pattern, &v, true);
            idx.short_walk = ShortWalk { nodes: 0, steps };
            let before = idx.tries.memory_bytes();
            let mut state = idx.initial_state();
            let mut text = String::new();
            for token in ["-1", "2", "3", ",", "-", "4", "5", ",", "6"] {
                assert_eq!(idx.mask(state).unwrap().ids(), brute(pattern, &v, &text));
                state = idx.next_state(state, v_id(&v, token)).unwrap();
                text.push_str(token);
            }
            assert_eq!(
                idx.tries.memory_bytes() > before,
                builds,
                "short walks of {steps:?} steps"
            );
        }
    }

    /// Inside a counted string, a mask reads its count's chain without the count's own row and a
    /// step follows a word's characters along the chain (moves read off the copy before), so
    /// masks and steps along a text of words build no row past the string's first counts; and
    /// every step from each count, of every token (words, escapes, cut and multi-byte
    /// characters, tokens that close the string or die in it), equals the complete automaton's,
    /// as does the mask where it leads.
    #[test]
    fn words_inside_a_counted_string_build_no_rows() {
        let mut tokens: Vec<Vec<u8>> = [
            "\"", "a", "ab", "abc", "b c", " a", "é", "中文", "a\"", "\"", "\"}", "\\n", "a\\n",
            "\\u00", "\\u00e9", "\\", "\n", "a\nb", "x",
        ]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
        tokens.extend([vec![0xC3], b"a\xE4\xB8".to_vec()]);
        let eos = tokens.len() as u32;
        let mut all: Vec<Option<Vec<u8>>> = tokens.into_iter().map(Some).collect();
        all.push(None);
        let v = Arc::new(Vocabulary::new(all, vec![eos], None).expect("vocabulary"));
        let pattern = r#""(?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){0,60}"\}"#;
        let text = [
            "\"", "abc", "ab", "b c", "é", "abc", "a", "中文", "ab", "abc", "b c", "ab",
        ];
        let rows = |idx: &TokenIndex| read(&idx.machine).explored.iter().filter(|&&e| e).count();
        let idx = index(pattern, &v, true);
        let mut state = idx.initial_state();
        let mut built = Vec::new();
        for word in text {
            idx.mask(state).unwrap();
            state = idx.next_state(state, v_id(&v, word)).unwrap();
            built.push(rows(&idx));
        }
        assert!(
            built[4..].iter().all(|&n| n == built[4]),
            "rows built along the words: {built:?}"
        );
        // Every step from each count, against the complete automaton.
        let idx = index(pattern, &v, true);
        let dfa = Dfa::from_hir(&parse(pattern).unwrap(), &DfaConfig::default()).unwrap();
        let (mut state, mut at) = (idx.initial_state(), dfa.start());
        for word in text {
            idx.mask(state).unwrap();
            for id in (0..v.len() as u32).filter(|&id| !v.is_eos(id)) {
                let bytes = v.token_bytes(id).unwrap();
                let to = bytes.iter().fold(at, |s, &b| dfa.next_state(s, b));
                let next = idx.next_state(state, i64::from(id)).unwrap();
                let shown = String::from_utf8_lossy(bytes);
                assert_eq!(next == DEAD, to == 0, "{shown:?} after {word:?}");
                if next != DEAD {
                    let mask = idx.mask(next).unwrap().ids();
                    assert_eq!(mask, brute_at(&dfa, &v, to), "{shown:?} after {word:?}");
                }
            }
            state = idx.next_state(state, v_id(&v, word)).unwrap();
            at = word.bytes().fold(at, |s, b| dfa.next_state(s, b));
        }
    }

    /// Inside a long counted string, where every member fits and remembered walks serve the
    /// leaving tokens, a count's mask is found by its recipe, that of a count before: masks
    /// along texts equal brute force on both sides of a minimum count, through escapes and
    /// multi-byte characters, where the string may end and where it must go on, up to its
    /// end; and recipes served most of them.
    #[test]
    fn masks_found_by_recipe_equal_brute_force() {
        let words = [
            "\"", "a", "ab", "abc", "b c", " a", "é", "中文", "a\"", "\"}", "\\n", "a\\n",
            "\\u00e9", "\\", "x",
        ];
        let v = vocab(&words, words.len() as u32);
        let patterns = [
            r#""(?:[^"\\]|\\n|\\u[0-9a-f]{4}){0,90}"\}"#,
            r#""(?:[^"\\]|\\n|\\u[0-9a-f]{4}){30,60}""#,
            r#"(?:[^"\\]|\\n|\\u[0-9a-f]{4}){25,90}"#,
        ];
        let text = [
            "\"", "abc", "ab", "b c", "é", "a\\n", "abc", "中文", "\\u00e9", "ab", " a",
        ];
        let mut reused = 0;
        for pattern in patterns {
            let idx = index(pattern, &v, true);
            let (mut state, mut prefix) = (idx.initial_state(), Vec::new());
            for k in 0..40 {
                assert_eq!(
                    idx.mask(state).unwrap().ids(),
                    brute_bytes(pattern, &v, &prefix),
                    "{pattern} after {:?}",
                    String::from_utf8_lossy(&prefix)
                );
                // The opening quote first where the pattern has one, then the words in turn.
                let quoted = pattern.starts_with('"');
                let word = match k {
                    0 if quoted => text[0],
                    _ => text[1 + k % (text.len() - 1)],
                };
                state = idx.next_state(state, v_id(&v, word)).unwrap();
                prefix.extend_from_slice(word.as_bytes());
                if state == DEAD {
                    break;
                }
            }
            // Each recipe's mask was built once, by the first state of that recipe.
            let masks = read(&idx.masks);
            let ids: rustc_hash::FxHashSet<u32> = masks.by_recipe.values().copied().collect();
            let served = masks.of_state.iter().filter(|id| ids.contains(id)).count();
            reused += served - masks.by_recipe.len();
        }
        assert!(reused > 20, "only {reused} masks were found by recipe");
    }

    /// The string character of llama.cpp's JSON grammars leaves out DEL, which the JSON string
    /// slice holds: inside such a string the slice without DEL fits (not a class slice, whose
    /// walk steps through every token that leaves it), and the masks equal brute force, DEL,
    /// C1 controls and cut characters included, in a free string and a counted one.
    #[test]
    fn strings_without_del_take_their_own_slice() {
        let mut tokens: Vec<Vec<u8>> = [
            "a", "ab", "\"", "a\"", "\\", "\\n", "\u{7F}", "a\u{7F}b", "\u{85}", "é", "\n", "\"\n",
        ]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
        tokens.extend([vec![0xC3], vec![0xC2], b"a\xE4\xB8".to_vec()]);
        let eos = tokens.len() as u32;
        let mut all: Vec<Option<Vec<u8>>> = tokens.into_iter().map(Some).collect();
        all.push(None);
        let v = Arc::new(Vocabulary::new(all, vec![eos], None).expect("vocabulary"));
        let patterns = [
            r#""(?:[^"\\\x7F\x00-\x1F]|\\["\\/bfnrt])*""#,
            r#""[^"\\\x7F\x00-\x1F]{0,3}""#,
        ];
        for pattern in patterns {
            for lazy in [false, true] {
                let idx = index(pattern, &v, lazy);
                let body = idx.next_state(idx.initial_state(), 2).unwrap();
                let fit = idx.slice_fit(body).unwrap();
                let Some(Shortcut::Slice { slice, .. }) = fit else {
                    panic!("{pattern}: no fixed slice inside the string: {fit:?}");
                };
                assert_eq!(idx.tries.slices()[slice].name(), "json_string_no_del");
                assert_masks_equal_brute_force(&idx, pattern, &v, 3);
            }
        }
    }

    /// How far a state's chain reaches is kept for the states after it (`slice_reach`): masks
    /// asked from the end of a counted run back to its start, so that each chain stops at a
    /// state whose reach is known, equal those asked in order and brute force. The runs are
    /// longer than the longest member (the chain is cut there, and followed on for the tokens
    /// that leave the slice later), part ways past `DENSE_CHARS` characters (the longer members
    /// are walked), or loop.
    #[test]
    fn chains_followed_from_known_reaches_equal_brute_force() {
        let mut words: Vec<String> = ["a", "b", "\"", "é", "\n", "ab", "x"]
            .iter()
            .map(|w| w.to_string())
            .collect();
        for n in [3, 7, 15, 16, 17, 18, 19, 21, 30] {
            words.push("ab".repeat(n)[..n].to_string());
        }
        // Tokens that leave the slice after a run of its characters, some after more of them
        // than the longest member spells: past the cut, the chain is followed on for them.
        for n in [2, 9, 29, 33, 45] {
            let run = "ab".repeat(n)[..n].to_string();
            words.push(format!("{run}\""));
            words.push(format!("{run}\nx"));
        }
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let v = vocab(&tokens, tokens.len() as u32);
        let id = |text: &str| tokens.iter().position(|&t| t == text).unwrap() as i64;
        let (a, quote) = (id("a"), id("\""));
        let patterns = [
            r#""[^"\\]{0,50}""#,
            r".{20}a.{0,45}",
            r"(?:[ab]|é){3,40}x?",
            r"a{0,35}(?:b.*)?",
        ];
        for pattern in patterns {
            for lazy in [false, true] {
                let idx = index(pattern, &v, lazy);
                // Into the string first, then `a` after `a`.
                let open = pattern.starts_with('"').then_some((quote, "\""));
                let steps = open.into_iter().chain(std::iter::repeat_n((a, "a"), 44));
                let mut states = vec![(idx.initial_state(), String::new())];
                for (token, piece) in steps {
                    let (last, text) = &states[states.len() - 1];
                    let next = idx.next_state(*last, token).unwrap();
                    if next == DEAD {
                        break;
                    }
                    let text = format!("{text}{piece}");
                    states.push((next, text));
                }
                assert!(states.len() > 30, "{pattern}: {} states", states.len());
                for (state, text) in states.iter().rev() {
                    assert_eq!(
                        idx.mask(*state).unwrap().ids(),
                        brute(pattern, &v, text),
                        "{pattern} after {text:?}"
                    );
                }
            }
        }
    }

    /// [`assert_masks_equal_brute_force`] for each pattern, built lazily and in full.
    fn assert_patterns_equal_brute_force(patterns: &[&str], v: &Arc<Vocabulary>, depth: usize) {
        for pattern in patterns {
            for lazy in [false, true] {
                assert_masks_equal_brute_force(&index(pattern, v, lazy), pattern, v, depth);
            }
        }
    }

    /// Compares the mask of every state a sequence of up to `depth` tokens reaches with
    /// [`brute_bytes`] after the same text.
    fn assert_masks_equal_brute_force(
        idx: &TokenIndex,
        pattern: &str,
        v: &Vocabulary,
        depth: usize,
    ) {
        let mut frontier = vec![(idx.initial_state(), Vec::new())];
        for _ in 0..depth {
            let mut next = Vec::new();
            for (state, prefix) in frontier {
                let got = idx.mask(state).unwrap().ids();
                assert_eq!(
                    got,
                    brute_bytes(pattern, v, &prefix),
                    "{pattern} after {:?}",
                    String::from_utf8_lossy(&prefix)
                );
                for &t in got.iter().filter(|&&t| !v.is_eos(t)) {
                    let mut longer = prefix.clone();
                    longer.extend_from_slice(v.token_bytes(t).unwrap());
                    next.push((idx.next_state(state, i64::from(t)).unwrap(), longer));
                }
            }
            next.sort();
            next.dedup_by_key(|(state, _)| *state);
            frontier = next;
        }
    }

    /// Words for the class-slice tests: pieces of identifiers, numbers and e-mail addresses, with
    /// and without a leading space (half of them, so that the space is an anchor), pure and
    /// mixed, some past [`DENSE_CHARS`].
    fn class_words() -> Vec<String> {
        let mut words: Vec<String> = [
            "a", "b", "z", "ab", "ba", "abz", "in", "int", "if", "i", "x1", "_", "a_b", "0", "1",
            "10", "01", "2024", "-", ".", "@", "a.", "a@", "b-", "1a", "a1", "ab.c", "x@y", "@a",
            "((", "(", ")", ";", "=", " ", "  ", "\n", "é", "aé",
        ]
        .iter()
        .map(|w| w.to_string())
        .collect();
        for n in [15, 16, 17, 20] {
            words.push("ab".repeat(n)[..n].to_string());
            words.push("7".repeat(n));
        }
        let spaced: Vec<String> = words.iter().map(|w| format!(" {w}")).collect();
        words.extend(spaced);
        words
    }

    /// Inside a domain name's label, `.` and `-` leave the letters' class into states that read
    /// letters alike again. With over [`BIG_HEAD_NODES`](crate::slice::BIG_HEAD_NODES) nodes
    /// below each, the walk takes a class slice below them ([`TokenIndex::head_parts`]), and the
    /// runs' exits along their chains; masks equal brute force at every count of a label.
    #[test]
    fn domain_labels_equal_brute_force() {
        let letters = "abcdefghijklmnopqrstuvwxyz0123456789";
        let pairs: Vec<String> = letters
            .chars()
            .flat_map(|a| letters.chars().map(move |b| format!("{a}{b}")))
            .collect();
        let mut words: Vec<String> = letters.chars().map(String::from).collect();
        for end in ["", "x", "y"] {
            words.extend(pairs.iter().map(|p| format!("{p}{end}")));
        }
        // Over a thousand nodes below `.` and `-` each, but too few tokens for an anchor (one
        // token in eight).
        for lead in ['.', '-'] {
            words.extend(pairs[..550].iter().map(|p| format!("{lead}{p}q")));
            words.extend(pairs[..20].iter().map(|p| format!("{lead}{p}")));
        }
        let run = "ab".repeat(10);
        for end in ["", ".c", "-", "-d.e", "@"] {
            words.push(format!("{}{end}", &run[..19]));
            words.push(format!("{}{end}", &run[..7]));
        }
        for w in [
            "a-b", "ab.c", "abc.", "x-", "x--y", ".", "-", "..", ".-", "-.", "a.b.c", "@", "q@",
            "é", "a b", ".0", ".7", ".12", ".345",
        ] {
            words.push(w.to_string());
        }
        words.sort();
        words.dedup();
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let v = vocab(&tokens, tokens.len() as u32);
        let tries = TokenIndex::tries_for(&v).unwrap();
        let big: Vec<u8> = tries.heads().iter().map(|h| h.path[0]).collect();
        assert!(big.contains(&b'.') && big.contains(&b'-'), "{big:?}");
        let label = |n: usize| format!("[a-z0-9](?:[a-z0-9-]{{0,{n}}}[a-z0-9])?");
        let patterns = [
            format!(r"{}(?:\.{})*", label(61), label(61)),
            format!(r"{}(?:\.{}){{0,2}}", label(5), label(5)),
        ];
        let patterns: Vec<&str> = patterns.iter().map(String::as_str).collect();
        assert_patterns_equal_brute_force(&patterns, &v, 3);
        // The shortcut was taken: two letters in, the `.` and `-` heads have class slices of
        // their own, and the letters' runs a chain.
        let id = |text: &str| tokens.iter().position(|&t| t == text).unwrap() as i64;
        let after_ab = |pattern: &str| {
            let idx = index(pattern, &v, true);
            let state = idx.next_state(idx.initial_state(), id("ab")).unwrap();
            let shape = idx.shape(state, false).unwrap();
            let Some(Shortcut::Classes {
                root: Some(root),
                heads,
                ..
            }) = &shape.fit
            else {
                panic!("no class slice after `ab`: {:?}", shape.fit);
            };
            let parts: Vec<u8> = heads.iter().map(|p| big[p.head]).collect();
            (root.chain.is_some(), parts)
        };
        let (chained, parts) = after_ab(patterns[0]);
        assert!(chained, "the letters' runs lead through one state each");
        assert_eq!(parts, vec![b'-', b'.']);
        // Where the state after `.` reads only digits, which a few tokens below `.` start with,
        // those few are walked plainly: no head part, and masks still equal brute force.
        let narrow = r"[a-z]{1,30}(?:\.[0-9]{1,9})?";
        assert_patterns_equal_brute_force(&[narrow], &v, 3);
        let (_, parts) = after_ab(narrow);
        assert!(
            parts.is_empty(),
            "a head part below `.` for the few tokens of digits"
        );
    }

    #[test]
    fn class_runs_equal_brute_force() {
        let words = class_words();
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let eos = tokens.len() as u32;
        let v = vocab(&tokens, eos);
        let tries = TokenIndex::tries_for(&v).unwrap();
        assert!(
            tries.anchors().iter().any(|a| a.path[0] == b' '),
            "the leading space"
        );
        let patterns = [
            r"[a-z0-9._%+-]{1,6}@(?:[a-z0-9-]{1,4}\.){1,2}[a-z]{2,3}",
            r"[0-9]{1,20}",
            r"(?: [a-z_][a-z0-9_]*)+",
            r"(?:int|if|[a-z_][a-z0-9_]*)(?: (?:int|if|[a-z_][a-z0-9_]*))*",
            r"[a-z]{2,18}",
            r"(?:[0-9]+|[a-z]+)(?: [0-9]+| [a-z]+){0,3}",
            r"[a-z0-9]*1[a-z]{0,3}",
            r"(?:[ab]{1,3}[0-9]{0,2})+",
            r"[a-zé]{0,5}",
        ];
        for pattern in patterns {
            for lazy in [false, true] {
                let idx = index(pattern, &v, lazy);
                let before = idx.tries.memory_bytes();
                assert_masks_equal_brute_force(&idx, pattern, &v, 4);
                if pattern.starts_with("[a-z0-9.") {
                    assert!(
                        idx.tries.memory_bytes() > before,
                        "the counted classes built class slices"
                    );
                }
                // The characters past ASCII are tried (their representatives computed) only
                // by a pattern whose states live on a byte that starts one.
                assert_eq!(
                    idx.wide_reps.get().is_some(),
                    pattern.contains('é'),
                    "{pattern}"
                );
            }
        }
    }

    /// A state's slice move read off its row at once (`move_at_once`: characters that part
    /// ways, or all dead) is the move found by following the characters, on every slice; and
    /// the shortcut answers for most of the states a literal, a keyword or a number passes
    /// through, both ways.
    #[test]
    fn moves_known_at_once_equal_explored_moves() {
        let tokens = [
            "a", "b", "ab", "\"", "\\", "1", "12", "é", "中", " ", "x\"", "{\"", "true", "xé",
        ];
        let v = vocab(&tokens, tokens.len() as u32);
        let patterns = [
            r#"\{"city": "(?:Lisbon|Porto)", "days": [0-9]{1,3}, "ok": (?:true|false)\}"#,
            r#""(?:[^"\\]|\\["\\/bfnrt])*""#,
            r".{0,12}",
            r"[a-z]+(?:é|中)?[0-9]*",
            // After `x` only characters past ASCII live: not all dead.
            r"(?:x(?:é|中)y)+",
        ];
        let (mut mixed, mut dead, mut known, mut all) = (0, 0, 0, 0);
        for pattern in patterns {
            let (idx, states) = masked_index(pattern, &v);
            for slice in 0..idx.tries.slices().len() {
                for state in 1..states {
                    let (explored, _) = idx.explored_move(slice, state).unwrap();
                    let at_once = idx.move_at_once(slice, state);
                    if let Some(at_once) = at_once {
                        assert_eq!(at_once, explored, "{pattern}: state {state}, slice {slice}");
                        mixed += usize::from(at_once == Advance::Mixed);
                        dead += usize::from(at_once == Advance::To(DEAD));
                    }
                    let short = matches!(explored, Advance::Mixed | Advance::To(DEAD));
                    all += usize::from(short);
                    known += usize::from(short && at_once.is_some());
                }
            }
        }
        assert!(
            known * 4 >= all * 3 && mixed >= 10 && dead >= 3,
            "{known} of {all} mixed or dead moves known at once ({mixed} mixed, {dead} dead)"
        );
    }

    /// Characters past ASCII join a class where they lead on alike (free text before a trigger,
    /// a string body with a pattern): tokens of whole printable characters are taken by length,
    /// and those that end part-way through a character, hold a control character past ASCII or
    /// leave the class are walked.
    #[test]
    fn wide_class_runs_equal_brute_force() {
        let mut words: Vec<Vec<u8>> = [
            "a",
            "ab",
            "<",
            "a<",
            "<f",
            "f",
            "fn",
            "@",
            "a@",
            "x@y",
            "é",
            "日本",
            "日本語",
            "é<",
            "<日",
            "😀",
            "a😀b",
            "\u{85}",
            "a\u{2028}",
            "\n",
            "\"",
            " ",
            "  ",
            "=",
            ">",
        ]
        .iter()
        .map(|w| w.as_bytes().to_vec())
        .collect();
        // Tokens that end part-way through a character, as byte-level vocabularies have.
        words.extend([vec![0xC3], vec![0xE6, 0x97], vec![0xA9], b"a\xC3".to_vec()]);
        for n in [15, 16, 17, 20] {
            words.push("é".repeat(n).into_bytes());
            words.push("ab".repeat(n).as_bytes()[..n].to_vec());
        }
        let spaced: Vec<Vec<u8>> = words.iter().map(|w| [b" ", &w[..]].concat()).collect();
        words.extend(spaced);
        let eos = words.len() as u32;
        let mut all: Vec<Option<Vec<u8>>> = words.into_iter().map(Some).collect();
        all.push(None);
        let v = Arc::new(Vocabulary::new(all, vec![eos], None).expect("vocabulary"));
        let patterns = [
            r"[^<]*(?:<f[a-z]*>[^<]*)*",
            r"(?s:.*@.*)",
            r#""[^"\\@]{0,18}@[^"\\]{1,3}""#,
            r"[^\x00-\x1f<]{0,17}<?",
            r"[^<>]{2,5}>|[a-zé日本]*",
            r"(?: [^ <]+)*",
            // Past ASCII the characters lead elsewhere than the letters do.
            r"(?:[a-z<]{1,4}|[^\x00-\x7f]{1,9})=",
        ];
        assert_patterns_equal_brute_force(&patterns, &v, 3);
    }

    /// On a grammar (a pushdown automaton, where a class's strings part ways into keyword
    /// prefixes and calls), masks with class slices equal the plain walk of every token.
    #[test]
    fn class_runs_on_a_grammar_equal_the_plain_walk() {
        let grammar = r#"
            root ::= stmt+
            stmt ::= ("int" ws)? ident ws? "=" ws? expr ";" | "if(" expr "){" stmt* "}"
            expr ::= term (("+" | "-") term)*
            term ::= ident | num | "(" expr ")"
            ident ::= [a-z_] [a-z0-9_]*
            num ::= [0-9]+
            ws ::= [ ]+
        "#;
        let hir = crate::grammar::compile(grammar, crate::grammar::Syntax::Gbnf, "root").unwrap();
        let words = class_words();
        let tokens: Vec<&str> = words.iter().map(String::as_str).collect();
        let eos = tokens.len() as u32;
        let v = vocab(&tokens, eos);
        let tries = Arc::new(TokenIndex::tries_for(&v).unwrap());
        let idx = TokenIndex::from_hir(&hir, Arc::clone(&v), tries, &IndexConfig::default())
            .expect("index");
        let mut frontier = vec![idx.initial_state()];
        let mut checked = 0;
        for _ in 0..6 {
            let mut next = Vec::new();
            for state in frontier {
                let plain = idx.next_states(state).unwrap();
                // EOS included: it leads to the terminal state where the state accepts.
                let expected: Vec<u32> = (0..plain.len() as u32)
                    .filter(|&t| plain[t as usize] != DEAD)
                    .collect();
                assert_eq!(idx.mask(state).unwrap().ids(), expected, "state {state}");
                checked += 1;
                next.extend(
                    plain
                        .iter()
                        .copied()
                        .filter(|&s| s != DEAD && s != TERMINAL),
                );
            }
            next.sort_unstable();
            next.dedup();
            next.truncate(60);
            frontier = next;
        }
        assert!(checked > 40, "{checked} states");
    }

    fn v_id(v: &Vocabulary, text: &str) -> i64 {
        (0..v.len() as u32)
            .find(|&i| v.token_bytes(i) == Some(text.as_bytes()))
            .map(i64::from)
            .expect("token present")
    }

    #[test]
    fn long_counts_of_shared_parts_are_calls_with_exact_masks() {
        // An array-like count of a shared part: the lazy construction calls the part's rule
        // from each copy instead of determinizing the repetition whole.
        let item = Hir::shared(parse("(ab|ba)+x").unwrap());
        let hir = Hir::repeat(Hir::concat([Hir::literal(","), item]), 2, Some(40));
        let nfa = Nfa::for_lazy(&hir, &NfaConfig::default(), &DfaConfig::default()).unwrap();
        assert!(
            nfa.automata().is_empty(),
            "{} automata built",
            nfa.automata().len()
        );
        assert_eq!(nfa.rules().len(), 1);

        let v = vocab(&[",", "ab", "ba", "x", ",ab", "x,", "abx"], 7);
        let trie = Arc::new(TokenIndex::tries_for(&v).unwrap());
        let idx = TokenIndex::from_hir(&hir, Arc::clone(&v), trie, &IndexConfig::default())
            .expect("index");
        let dfa = Dfa::from_hir(&hir, &DfaConfig::default()).unwrap();
        let walk = [",ab", "x,", "ba", "x", ",", "abx", ",ab", "x"];
        let (mut state, mut s) = (idx.initial_state(), dfa.start());
        for (step, token) in walk.iter().enumerate() {
            assert_eq!(
                idx.mask(state).unwrap().ids(),
                brute_at(&dfa, &v, s),
                "after {:?}",
                &walk[..step]
            );
            state = idx.next_state(state, v_id(&v, token)).unwrap();
            s = token.bytes().fold(s, |t, b| dfa.next_state(t, b));
        }
        assert!(dfa.is_accepting(s) && idx.mask(state).unwrap().ids().contains(&7));
    }

    /// Every state up to three tokens deep: the lazy index's masks against a brute-force walk of
    /// the complete automaton of the same expression.
    fn assert_lazy_equals_complete(hir: &Hir, v: &Arc<Vocabulary>, tokens: &[&str]) {
        let trie = Arc::new(TokenIndex::tries_for(v).unwrap());
        let idx =
            TokenIndex::from_hir(hir, Arc::clone(v), trie, &IndexConfig::default()).expect("index");
        let dfa = Dfa::from_hir(hir, &DfaConfig::default()).expect("dfa");
        let mut frontier = vec![(idx.initial_state(), dfa.start(), String::new())];
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 {
            let mut next = Vec::new();
            for (state, s, prefix) in frontier {
                if !seen.insert(state) {
                    continue;
                }
                assert_eq!(
                    idx.mask(state).unwrap().ids(),
                    brute_at(&dfa, v, s),
                    "{hir} after {prefix:?}"
                );
                for t in tokens {
                    let to = idx.next_state(state, v_id(v, t)).unwrap();
                    if to != DEAD {
                        let s = t.bytes().fold(s, |x, b| dfa.next_state(x, b));
                        next.push((to, s, format!("{prefix}{t}")));
                    }
                }
            }
            frontier = next;
        }
    }

    #[test]
    fn lazy_products_equal_complete_automata() {
        let tokens = ["a", "b", "ab", "ba", "é", "aé", "bb", "aaa", "\"", "b\""];
        let v = vocab(&tokens, tokens.len() as u32);
        let p = |s: &str| parse(s).unwrap();
        let cases = [
            // A bounded length against a pattern: what `maxLength` meets `format` as.
            Hir::intersection([p(".{0,5}"), p("(?:ab|é)*a?")]),
            // A negative operand: strings of `[ab]*` without `bb`.
            Hir::intersection([p("[ab]*"), Hir::complement(p(".*bb.*"))]),
            // A bare complement (beside valid UTF-8), inside a sequence.
            Hir::concat([Hir::complement(p("a*")), p("\"")]),
            // Empty intersections: nothing may be allowed, not even a first byte.
            Hir::intersection([p("a+"), p("b+")]),
            Hir::intersection([p("a.{2}"), p("a{2}")]),
            // Nested products flatten, and repeat inside a repetition.
            Hir::repeat(
                Hir::concat([
                    Hir::intersection([p("[abé]{1,3}"), Hir::complement(p("a+"))]),
                    p("\""),
                ]),
                0,
                Some(3),
            ),
            // A product whose accepting tuples have no live successor.
            Hir::intersection([p("(?:ab)+"), p(".{0,4}")]),
        ];
        for hir in &cases {
            let nfa = Nfa::for_lazy(hir, &NfaConfig::default(), &DfaConfig::default()).unwrap();
            assert!(
                nfa.automata()
                    .iter()
                    .all(|a| matches!(a, EmbeddedAutomaton::Lazy(_))),
                "{hir} is built whole"
            );
            assert_lazy_equals_complete(hir, &v, &tokens);
        }
    }

    /// Random expressions of intersections, complements, sequences and repetitions.
    fn boolean_hir() -> impl proptest::strategy::Strategy<Value = Hir> {
        use proptest::prelude::*;
        let leaf = prop::sample::select(vec![
            "a",
            "b",
            "é",
            "ab",
            "a*",
            "(?:ab)+",
            "[ab]{0,3}",
            ".",
            ".{1,4}",
            "a.b",
            "é+",
            "",
            ".*b.*",
            "[^a]*",
        ])
        .prop_map(|s| parse(s).unwrap());
        leaf.prop_recursive(3, 24, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 2..3).prop_map(Hir::intersection),
                inner.clone().prop_map(Hir::complement),
                prop::collection::vec(inner.clone(), 2..3).prop_map(Hir::concat),
                prop::collection::vec(inner.clone(), 2..3).prop_map(Hir::alternation),
                (inner, 0u32..2, 1u32..3).prop_map(|(h, lo, hi)| Hir::repeat(h, lo, Some(hi))),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        #[test]
        fn random_lazy_products_equal_complete_automata(hir in boolean_hir()) {
            let tokens = ["a", "b", "ab", "ba", "é", "aé", "bb", "aaa"];
            let v = vocab(&tokens, tokens.len() as u32);
            assert_lazy_equals_complete(&hir, &v, &tokens);
        }
    }

    #[test]
    fn a_product_past_its_limit_fails_the_step_that_reaches_it() {
        // `.{0,400}` against "no `bb`" needs a tuple per length: far past a limit of 50 states
        // (200 tuples), but reached only as the input grows.
        let hir = Hir::intersection([
            parse(".{0,400}").unwrap(),
            Hir::complement(parse(".*bb.*").unwrap()),
        ]);
        let v = vocab(&["a", "b", "aaaa"], 3);
        let trie = Arc::new(TokenIndex::tries_for(&v).unwrap());
        let config = IndexConfig {
            max_states: 50,
            ..IndexConfig::default()
        };
        let idx = TokenIndex::from_hir(&hir, Arc::clone(&v), trie, &config).expect("index");
        let mut state = idx.initial_state();
        let mut failed = None;
        for step in 0..400 {
            match idx.mask(state).and_then(|_| idx.next_state(state, 2)) {
                Ok(next) => state = next,
                Err(e) => {
                    failed = Some((step, e));
                    break;
                }
            }
        }
        let (step, e) = failed.expect("the limit is reached");
        assert!(step > 0, "the first mask fits");
        assert!(matches!(e, Error::SizeLimit { .. }), "{e}");
        // And it stays failed rather than answering from what it could not finish.
        assert!(idx.mask(state).is_err() || idx.next_state(state, 2).is_err());
    }

    #[test]
    fn lazy_states_without_a_future_are_dead() {
        // Neither pattern matches anything past its first byte; a lazy automaton must know.
        let v = vocab(&["a", "b", "ab"], 3);
        for pattern in [".a^b", "a$b|ab^", "(?:a|b)+$a"] {
            let idx = index(pattern, &v, true);
            assert!(idx.mask(1).unwrap().is_empty(), "{pattern}");
        }
        let idx = index("a(?:b$|b^c)", &v, true);
        assert_eq!(idx.mask(1).unwrap().ids(), vec![0, 2]);
    }

    #[test]
    fn a_lazy_index_counts_the_automaton_it_is_still_building() {
        // Caches evict by `memory_bytes`: the NFA and the state sets of a lazy index are part of
        // what it holds, and they grow as states are visited.
        let v = vocab(&["a", "b", "ab"], 3);
        let pattern = "(?:a|b)*a(?:a|b){12}";
        let lazy = index(pattern, &v, true);
        let nfa_bytes = read(&lazy.machine)
            .determinizer
            .as_ref()
            .map(|d| d.nfa().memory_bytes())
            .unwrap();
        let before = lazy.memory_bytes();
        assert!(before > lazy.tries.memory_bytes() + nfa_bytes);
        let mut state = lazy.initial_state();
        for _ in 0..12 {
            state = lazy.next_state(state, 2).unwrap();
        }
        assert!(lazy.memory_bytes() > before);
    }

    #[test]
    fn eos_only_in_accepting_states_and_terminal_after() {
        let v = vocab(&["a", "b"], 2);
        let idx = index("ab", &v, true);
        assert_eq!(idx.next_state(1, 2).unwrap(), DEAD);
        let s = idx.next_state(idx.next_state(1, 0).unwrap(), 1).unwrap();
        assert!(idx.is_accepting(s) && idx.is_final(s).unwrap());
        assert_eq!(idx.next_state(s, 2).unwrap(), TERMINAL);
        assert_eq!(idx.mask(s).unwrap().ids(), vec![2]);
    }

    #[test]
    fn bad_tokens_and_states_are_errors() {
        let v = vocab(&["a"], 1);
        let idx = index("a", &v, true);
        assert!(matches!(
            idx.next_state(1, 5),
            Err(Error::InvalidToken { .. })
        ));
        assert!(matches!(
            idx.next_state(1, -1),
            Err(Error::InvalidToken { .. })
        ));
        assert!(idx.mask(77).is_err());
    }

    #[test]
    fn lazy_index_serves_a_pattern_whose_full_dfa_is_huge() {
        // The full DFA of this pattern has about 2^20 states; a few tokens visit a handful.
        let v = vocab(&["a", "b", "ab"], 3);
        let hir = parse("(a|b)*a(a|b){20}").unwrap();
        assert!(Dfa::from_hir(&hir, &DfaConfig::default()).is_err());
        let trie = Arc::new(TokenIndex::tries_for(&v).unwrap());
        let idx =
            TokenIndex::from_hir(&hir, Arc::clone(&v), trie, &IndexConfig::default()).unwrap();
        let mut s = idx.initial_state();
        for _ in 0..5 {
            assert_eq!(idx.mask(s).unwrap().len(), 3);
            s = idx.next_state(s, 2).unwrap();
        }
        assert!(idx.num_states() < 200);
    }

    #[test]
    fn identical_masks_are_stored_once() {
        let v = vocab(&["a", "b"], 2);
        let idx = index("[ab]{6}", &v, false);
        let mut s = idx.initial_state();
        for _ in 0..5 {
            idx.mask(s).unwrap();
            s = idx.next_state(s, 0).unwrap();
        }
        assert_eq!(idx.num_masks(), 1);
    }

    #[test]
    fn forced_bytes_follow_the_only_way_on() {
        let v = vocab(&["a"], 1);
        let idx = index("\\{\"name\": \"[a-z]+\"\\}", &v, true);
        assert_eq!(idx.forced_bytes(1, 100).unwrap(), b"{\"name\": \"");
        assert_eq!(idx.forced_bytes(1, 3).unwrap(), b"{\"n");
    }
}
