//! Subset construction, one DFA state at a time.
//!
//! A DFA state stands for the set of NFA states the input so far could have reached. The classic
//! construction computes that set for the start, then for every state and every input symbol the
//! set after reading it, until no new set turns up. Here the symbols are byte classes (so a state
//! costs one pass over its NFA states and a closure per *distinct* successor set, not 256), and the
//! step "this state's row of successors" is a method, [`Determinizer::next_row`], rather than the
//! body of a loop. The eager `determinize` function calls it for every state; a lazy caller (the
//! token index, which only ever visits the states a vocabulary can reach) can call it on demand and
//! keep the determinizer between calls.
//!
//! What identifies a state is the set of byte-reading NFA states in its epsilon closure plus
//! whether it accepts, stored as one sorted key (a marker at the end means "accepting"). Keying on
//! the closure rather than on the raw successor set merges states that only differed in the
//! epsilon states they passed through, which keeps the unminimized DFA close to the minimal one.
//!
//! Assertions are resolved during the closure. `Start` holds only in the closure of the start
//! state, and only when the input begins at the text's start (see [`Anchors`]); `NotStart` is its
//! negation. `End` can never hold when another byte follows, so the closure used for transitions
//! does not cross it; acceptance is decided by a second closure, taken only when an `End` or
//! `NotEnd` was met, in which `End` holds (when the input ends at the text's end) and `NotEnd` does
//! not. Both closures are linear in the NFA states they touch.
//!
//! States of automata embedded in the NFA ([`crate::nfa::Embedding`]) take part as they are: an
//! embedded id is keyed like a byte-reading NFA state, reads its successors from its automaton's
//! table, and moves on without reading where the automaton accepts. So this construction's byte
//! classes are also split wherever an embedded automaton's classes change, and the ids it meets
//! above [`crate::nfa::EMBEDDED_BASE`], too many to index densely, are tracked in a hash set.
//!
//! Rules ([`crate::nfa::State::Call`]) make the NFA a pushdown automaton: one rule body serves
//! every place that calls it, so a state alone no longer says where the input is. An element of a
//! key is then a pair, the NFA state and the stack of return addresses it runs under, packed into
//! one `u64` (`Entry`) with stacks interned as frames (`Stacks`) so that equal stacks are
//! equal integers. A DFA state is thus a set of pushdown configurations, and since the stack can
//! grow without end, so could the construction: calls open at once are bounded
//! ([`Determinizer::with_call_depth`], 256 by default), and a successor that needs a deeper call
//! is one shared overflow state whose row is a size-limit error, rather than a state that would
//! refuse what the grammar allows. A call in tail position (its return address only returns:
//! the `factor` of `unary ::= "-" factor`) opens no frame: its body runs under the caller's
//! stack and returns where the caller would, so right recursion is one configuration rather
//! than one per depth (a C grammar's `----` in a token of a hundred dashes was a hundred states
//! per expression position), and it does not count against the bound. Only the configurations the input reaches are ever built,
//! which is what makes a recursive schema cheap lazily and impossible eagerly. Which configurations can still lead to a
//! match now depends on the stack; `CallNeeds` answers that per state and per frame. Without
//! rules every stack is the empty one and an entry is just the state's id.
//!
//! The cost of a state is the size of its closure times the classes its NFA states read, plus a
//! hash lookup per distinct successor set. [`Determinizer`] refuses to create more than
//! `max_states` states, checking before each one, so a pattern whose DFA explodes
//! (`(a|b)*a(a|b){40}`) stops after `max_states` states' work. A state count alone does not bound
//! memory or time, though: in `(a?){100000}` every state's set holds up to 100,000 NFA states, and
//! 20,000 such sets are gigabytes. So two more budgets, both scaled from `max_states` to keep one
//! knob: the sets together may hold [`SET_ENTRIES_PER_STATE`] entries per allowed state
//! (`dfa_state_sets`), and the closures together may visit [`CLOSURE_WORK_PER_STATE`] NFA states
//! per allowed state (`dfa_closure_work`). At the default limit that is 160 MB of sets and a few
//! seconds of closures at worst; ordinary patterns use a tiny fraction of either.

use super::{Anchors, ByteClasses, Raw};
use crate::byte_set::ByteSet;
use crate::dfa::classes::ByteClassBuilder;
use crate::error::{Error, Result};
use crate::hash_ids::IdsByHash;
use crate::nfa::{Assertion, EmbeddedState, Nfa, Node, State, StateId, EMBEDDED_BASE};
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

mod copies;
pub use copies::CopyAt;

/// One element of a DFA state's key: an NFA state and the call stack it runs under
/// ([`Stacks`]), packed as `stack << 32 | state`. Without rules every stack is the empty one, 0,
/// and an entry is just the state's id.
type Entry = u64;

/// Marks an accepting state's key; never a valid entry.
const MATCH_MARK: Entry = Entry::MAX;

/// The whole key of the overflow state ([`Determinizer::overflow_state`]); never a valid entry.
const OVERFLOW_MARK: Entry = Entry::MAX - 1;

/// The call stack no rule has been entered on.
const EMPTY_STACK: u32 = 0;

/// Most rule calls open at once when the caller sets no bound ([`Determinizer::with_call_depth`]).
pub const DEFAULT_MAX_CALL_DEPTH: u32 = 256;

/// Marks a state from which no call budget reaches the end of its fragment.
const NEVER: u32 = u32::MAX;

fn entry(state: StateId, stack: u32) -> Entry {
    (u64::from(stack) << 32) | u64::from(state)
}

fn state_of(e: Entry) -> StateId {
    e as StateId
}

fn stack_of(e: Entry) -> u32 {
    (e >> 32) as u32
}

/// Whether two successor lists are equal, compared in line: they hold one or two entries
/// almost always, where a call to the C library's `memcmp` (what `==` on slices compiles to)
/// costs more than the comparison.
#[inline]
fn same_entries(a: &[Entry], b: &[Entry]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The hash a state's key is found by: computed once per key looked up, whether it is found or
/// added.
fn key_hash(key: &[Entry]) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// Distinct successors a row compares a new one with before it hashes them.
const LINEAR_SUCCESSORS: usize = 16;

/// NFA-set entries all DFA states together may hold, per state `max_states` allows.
pub const SET_ENTRIES_PER_STATE: usize = 1024;

/// NFA states all epsilon closures together may visit, per state `max_states` allows.
pub const CLOSURE_WORK_PER_STATE: usize = 1 << 14;

/// The subset construction of one NFA, run as far as its callers ask.
///
/// DFA state 0 is the dead state (the empty set) and state 1 the start, from creation on; other
/// states are numbered as [`Determinizer::next_row`] discovers them.
#[derive(Clone, Debug)]
pub struct Determinizer {
    nfa: Nfa,
    classes: ByteClasses,
    anchors: Anchors,
    max_states: usize,
    /// Key of each DFA state: sorted byte-reading entries, then [`MATCH_MARK`] if accepting.
    sets: Vec<Arc<[Entry]>>,
    /// Each state's id by its key's hash ([`key_hash`]); the keys are `sets`.
    ids: IdsByHash,
    /// Entries held by `sets`, and NFA states visited by closures, against their budgets.
    set_entries: usize,
    work: usize,
    // Scratch space, kept to avoid allocating per state.
    seen: Visited,
    stack: Vec<Entry>,
    key: Vec<Entry>,
    targets: Vec<Vec<Entry>>,
    /// The classes whose `targets` the row being built (or the last one) filled. A row of a
    /// JSON document's punctuation or a key's letter reads one or two classes of a hundred, and
    /// a fresh mask between a schema's members builds three or four such rows: visiting only
    /// the classes read, to clear their lists and to make the row, took a fifth off those masks
    /// (o200k, after `"role`: 16.2 k -> 12.6 k instructions). Rows that read most classes (a
    /// string's first masks) cost about 4% more for the marking.
    touched: ByteSet,
    /// The row being built: a class for each distinct successor found so far (its list stays
    /// in `targets`), with the successor, while there are fewer than [`LINEAR_SUCCESSORS`];
    /// `memo` from there on.
    distinct: Vec<(usize, u32)>,
    memo: FxHashMap<Vec<Entry>, u32>,
    /// The state each kernel of one entry under a call met so far closed to (almost every
    /// kernel is one entry). A grammar's rows keep leading to the same kernels (every state of a
    /// string body reads `"` into the same return), and those closures, which pop and push
    /// frames, close to a known state: a grammar's first masks met a kernel again for 30-60% of
    /// their successors. Without calls, closures are short and rarely repeat, and the lookups
    /// cost more than they save. One entry per distinct successor of the rows built.
    kernels: FxHashMap<Entry, u32>,
    /// Which states can still lead to a match (see [`Liveness`]).
    live: Liveness,
    /// The state standing for every successor that would open a call past the stack's bound,
    /// made the first time one is met.
    overflow: Option<u32>,
    /// The call stacks met so far (only ever the empty one without rules).
    stacks: Stacks,
    /// Per NFA state, whether it is a tail: every path from it reads nothing and ends in its
    /// rule's `Return` (see [`tails`]). A call whose return address is a tail pushes no frame.
    tails: Vec<bool>,
    /// Per embedded automaton and per class of the automaton, this construction's classes
    /// within it (they refine the automaton's, see [`Determinizer::new`]): a row steps an
    /// embedded state once per class of its own, a few where the construction may have a
    /// hundred. Each group comes with its classes as a set, which a row marks touched at once.
    class_groups: Vec<Vec<(Vec<u8>, ByteSet)>>,
}

impl Determinizer {
    /// Starts the construction: creates the dead and start states.
    pub fn new(nfa: Nfa, anchors: Anchors, max_states: usize) -> Result<Self> {
        Self::with_call_depth(nfa, anchors, max_states, DEFAULT_MAX_CALL_DEPTH)
    }

    /// [`Determinizer::new`], with at most `max_call_depth` rule calls open at once. A
    /// successor that would hold a deeper call is the overflow state
    /// ([`Determinizer::overflow_state`]), whose row fails with [`Error::SizeLimit`]
    /// (`max_stack`): every other state holds the language's own configurations, none pruned
    /// for depth, and a state with one deep successor keeps all its others. Rules do not mix
    /// with anchors (`^`, `$`).
    pub fn with_call_depth(
        nfa: Nfa,
        anchors: Anchors,
        max_states: usize,
        max_call_depth: u32,
    ) -> Result<Self> {
        if !nfa.rules().is_empty() && nfa.states().iter().any(|s| matches!(s, State::Look { .. })) {
            return Err(Error::Invalid(
                "anchors in an expression with recursive rules".into(),
            ));
        }
        if max_states < 2 {
            return Err(Error::size_limit("max_states", 2, max_states));
        }
        let mut builder = ByteClassBuilder::new();
        for state in nfa.states() {
            match state {
                State::ByteRange(t) => builder.add_range(t.start, t.end),
                State::Sparse(ts) => ts.iter().for_each(|t| builder.add_range(t.start, t.end)),
                _ => {}
            }
        }
        for automaton in nfa.automata() {
            builder.add_partition(automaton.classes());
        }
        let classes = builder.build();
        let class_groups = nfa
            .automata()
            .iter()
            .map(|automaton| {
                let theirs = automaton.classes();
                let mut groups = vec![Vec::new(); theirs.num_classes()];
                for (ours, &b) in classes.representatives().iter().enumerate() {
                    groups[usize::from(theirs.get(b))].push(ours as u8);
                }
                (groups.into_iter())
                    .map(|ours| {
                        let mut set = ByteSet::EMPTY;
                        ours.iter().for_each(|&c| set.insert(c));
                        (ours, set)
                    })
                    .collect()
            })
            .collect();
        let n = nfa.len();
        // Ids are u32, and the largest value marks accepting keys.
        let max_states = max_states.min(MATCH_MARK as usize);
        let mut d = Determinizer {
            targets: vec![Vec::new(); classes.num_classes()],
            touched: ByteSet::EMPTY,
            classes,
            anchors,
            max_states,
            sets: Vec::new(),
            ids: IdsByHash::with_capacity(128),
            set_entries: 0,
            work: 0,
            seen: Visited::new(n),
            stack: Vec::new(),
            key: Vec::new(),
            distinct: Vec::new(),
            memo: FxHashMap::default(),
            kernels: FxHashMap::with_capacity_and_hasher(128, Default::default()),
            live: Liveness::of(&nfa, anchors == Anchors::WHOLE_TEXT),
            overflow: None,
            stacks: Stacks::new(max_call_depth),
            tails: tails(&nfa),
            class_groups,
            nfa,
        };
        d.ids.insert(key_hash(&[]), 0);
        d.sets.push(Arc::from(Vec::new()));
        // The start state is always 1, even when its key repeats the dead state's.
        let start = entry(d.nfa.start(), EMPTY_STACK);
        d.closure(&[start], true);
        if d.stacks.take_overflow() {
            return Err(d.overflow_error());
        }
        d.charge()?;
        let hash = key_hash(&d.key);
        if d.find_key(hash, &d.key).is_none() {
            d.ids.insert(hash, 1);
        }
        d.sets.push(Arc::from(d.key.as_slice()));
        d.check_products()?;
        Ok(d)
    }

    /// Fails with the limit a lazy product of the NFA reached, if one did: the answers it gave
    /// since (a dead successor, a state that does not read) stood in for ones it could not find.
    fn check_products(&self) -> Result<()> {
        match self.nfa.failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The NFA being determinized.
    pub fn nfa(&self) -> &Nfa {
        &self.nfa
    }

    /// The byte classes rows are indexed by: the runs of bytes no NFA transition separates.
    pub fn classes(&self) -> &ByteClasses {
        &self.classes
    }

    /// DFA states created so far.
    pub fn num_states(&self) -> usize {
        self.sets.len()
    }

    /// Whether DFA state `state` accepts; false when there is no such state.
    pub fn is_accepting(&self, state: u32) -> bool {
        self.sets
            .get(state as usize)
            .is_some_and(|k| k.last() == Some(&MATCH_MARK))
    }

    /// The state standing for successors that would open more calls than the bound allows, if
    /// one has been met. It does not accept, and its row is the [`Error::SizeLimit`]
    /// (`max_stack`) the text met: a caller that steps into it reports that error rather than a
    /// state, and a mask may still allow the token that leads there, since the language does.
    pub fn overflow_state(&self) -> Option<u32> {
        self.overflow
    }

    /// The error the overflow state stands for.
    pub(crate) fn overflow_error(&self) -> Error {
        let limit = self.stacks.max_depth as usize;
        Error::size_limit("max_stack", limit + 1, limit)
    }

    /// Fills `row` with the successor of `state` on every class, creating the states that are
    /// new. A state that does not exist gets a dead row; the overflow state has no row and
    /// fails with the stack bound ([`Determinizer::overflow_state`]).
    pub fn next_row(&mut self, state: u32, row: &mut Vec<u32>) -> Result<()> {
        self.check_products()?;
        if self.overflow == Some(state) {
            return Err(self.overflow_error());
        }
        let k = self.classes.num_classes();
        row.clear();
        row.resize(k, 0);
        let Some(set) = self.sets.get(state as usize).cloned() else {
            return Ok(());
        };
        for c in self.touched.iter() {
            self.targets[usize::from(c)].clear();
        }
        // Marked in a local, which the pushes into `targets` cannot alias, and kept after.
        let mut touched = ByteSet::EMPTY;
        for &x in set.iter() {
            if x == MATCH_MARK {
                continue;
            }
            let (s, under) = (state_of(x), stack_of(x));
            let ts: &[_] = match self.nfa.node(s) {
                Node::Stored(State::ByteRange(t)) => std::slice::from_ref(t),
                Node::Stored(State::Sparse(ts)) => ts,
                Node::Stored(_) => continue,
                Node::Embedded(e) => {
                    let groups = &self.class_groups[e.at.automaton as usize];
                    for (theirs, (ours, set)) in groups.iter().enumerate() {
                        if let Some(t) = e.next_class(theirs as u8) {
                            for &c in ours {
                                self.targets[usize::from(c)].push(entry(t, under));
                            }
                            touched.union_with(set);
                        }
                    }
                    continue;
                }
            };
            for t in ts {
                let (lo, hi) = (self.classes.get(t.start), self.classes.get(t.end));
                for c in lo..=hi {
                    self.targets[c as usize].push(entry(t.next, under));
                }
                touched.insert_range(lo, hi);
            }
        }
        self.memo.clear();
        self.distinct.clear();
        let mut prev: Option<(usize, u32)> = None;
        self.touched = touched;
        for c in touched.iter().map(usize::from) {
            let mut list = std::mem::take(&mut self.targets[c]);
            list.sort_unstable();
            list.dedup();
            // Neighbouring classes usually agree, so compare with the last one first. A row
            // has a few distinct successors, found by comparing with each (most lists hold
            // one entry); only a row with many is worth hashing.
            let id = match prev {
                Some((pc, id)) if same_entries(&self.targets[pc], &list) => id,
                _ if self.distinct.len() < LINEAR_SUCCESSORS => {
                    let targets = &self.targets;
                    let known = self
                        .distinct
                        .iter()
                        .find(|&&(dc, _)| same_entries(&targets[dc], &list));
                    match known {
                        Some(&(_, id)) => id,
                        None => {
                            let id = self.add_state(&list)?;
                            if self.distinct.len() + 1 == LINEAR_SUCCESSORS {
                                // The successors after this one are hashed: so are these.
                                for &(dc, id) in &self.distinct {
                                    self.memo.insert(self.targets[dc].clone(), id);
                                }
                                self.memo.insert(list.clone(), id);
                            }
                            self.distinct.push((c, id));
                            id
                        }
                    }
                }
                _ => match self.memo.get(&list) {
                    Some(&id) => id,
                    None => {
                        let id = self.add_state(&list)?;
                        self.memo.insert(list.clone(), id);
                        id
                    }
                },
            };
            row[c] = id;
            prev = Some((c, id));
            self.targets[c] = list;
        }
        self.check_products()
    }

    /// The id of the state reached when the NFA is in `kernel` after at least one byte.
    fn add_state(&mut self, kernel: &[Entry]) -> Result<u32> {
        let single = match kernel {
            [one] if stack_of(*one) != EMPTY_STACK => Some(*one),
            _ => None,
        };
        if let Some(id) = single.and_then(|x| self.kernels.get(&x)) {
            return Ok(*id);
        }
        self.closure(kernel, false);
        if self.stacks.take_overflow() {
            self.key.clear();
            self.key.push(OVERFLOW_MARK);
        }
        let hash = key_hash(&self.key);
        let id = match self.find_key(hash, &self.key) {
            Some(id) => id,
            None => self.intern_key(hash)?,
        };
        if let Some(x) = single {
            self.kernels.insert(x, id);
        }
        Ok(id)
    }

    /// The state whose key is `key`, hashing to `hash` ([`key_hash`]), if there is one.
    fn find_key(&self, hash: u64, key: &[Entry]) -> Option<u32> {
        self.ids.find(hash, |id| *self.sets[id as usize] == *key)
    }

    /// Stores `self.key`, whose hash is `hash`, as a new state, within the limits.
    fn intern_key(&mut self, hash: u64) -> Result<u32> {
        if self.sets.len() >= self.max_states {
            return Err(Error::size_limit(
                "max_states",
                self.sets.len() + 1,
                self.max_states,
            ));
        }
        self.charge()?;
        let id = self.sets.len() as u32;
        if self.key == [OVERFLOW_MARK] {
            self.overflow = Some(id);
        }
        self.ids.insert(hash, id);
        self.sets.push(Arc::from(self.key.as_slice()));
        Ok(id)
    }

    /// Counts the closure just computed, and the set about to be stored, against the budgets.
    fn charge(&mut self) -> Result<()> {
        let max_entries = self.max_states.saturating_mul(SET_ENTRIES_PER_STATE);
        // A call stack's frames are held like set entries.
        self.set_entries = self
            .set_entries
            .saturating_add(self.key.len())
            .saturating_add(self.stacks.take_new());
        if self.set_entries > max_entries {
            return Err(Error::size_limit(
                "dfa_state_sets",
                self.set_entries,
                max_entries,
            ));
        }
        let max_work = self.max_states.saturating_mul(CLOSURE_WORK_PER_STATE);
        if self.work > max_work {
            return Err(Error::size_limit("dfa_closure_work", self.work, max_work));
        }
        Ok(())
    }

    /// Computes into `self.key` the key of the closure of `kernel`; `at_start` when no byte has
    /// been read.
    fn closure(&mut self, kernel: &[Entry], at_start: bool) {
        let start_holds = at_start && self.anchors.text_start;
        self.clear_seen();
        self.key.clear();
        self.stack.clear();
        self.stack.extend(kernel.iter().rev());
        let mut matched = false;
        let mut end_sensitive = false;
        while let Some(x) = self.stack.pop() {
            if !self.visit(x) {
                continue;
            }
            let (s, under) = (state_of(x), stack_of(x));
            let state = match self.nfa.node(s) {
                Node::Stored(state) => state,
                Node::Embedded(e) => {
                    if self.live.embedded(&e) {
                        self.key.push(x);
                    }
                    self.stack
                        .extend(e.moves_without_reading().map(|t| entry(t, under)));
                    continue;
                }
            };
            match state {
                State::ByteRange(_) | State::Sparse(_) => {
                    if self.live.stored(s) {
                        self.key.push(x)
                    }
                }
                State::Match => matched = true,
                State::Fail => {}
                State::Epsilon(next) => self.stack.push(entry(*next, under)),
                State::Union(alts) => self
                    .stack
                    .extend(alts.iter().rev().map(|&a| entry(a, under))),
                State::Call { rule, next } => {
                    let body = self.nfa.rules()[*rule as usize];
                    let counted = self.nfa.is_counted(*rule);
                    // A call in tail position returns to where its caller would: its body runs
                    // under the caller's stack, so that right recursion (`-` factor, a list's
                    // rest) is one configuration, not one per depth.
                    // A return address past the NFA's own states (an embedded automaton's) is
                    // never a tail.
                    let tail = self.tails.get(*next as usize) == Some(&true)
                        && self.live.reaches_end(*next)
                        && self.live.reaches_end(body);
                    let frame = if tail {
                        Some(under)
                    } else {
                        self.stacks.push(under, *next, body, counted, &self.live)
                    };
                    if let Some(inner) = frame {
                        self.stack.push(entry(body, inner));
                    }
                }
                State::Return => {
                    if let Some((ret, outer)) = self.stacks.pop(under) {
                        self.stack.push(entry(ret, outer));
                    }
                }
                State::Look { assertion, next } => match assertion {
                    Assertion::Start if start_holds => self.stack.push(entry(*next, under)),
                    Assertion::NotStart if !start_holds => self.stack.push(entry(*next, under)),
                    Assertion::Start | Assertion::NotStart => {}
                    Assertion::End => end_sensitive = true,
                    Assertion::NotEnd => {
                        end_sensitive = true;
                        self.stack.push(entry(*next, under));
                    }
                },
            }
        }
        // When the input does not end the text, its end is just another position where more
        // text follows: the transition closure already answers.
        let visited = self.seen.len();
        self.work = self.work.saturating_add(visited);
        let accepting = if end_sensitive && self.anchors.text_end {
            self.accepts_at_end(kernel, start_holds)
        } else {
            matched
        };
        self.key.sort_unstable();
        if accepting {
            self.key.push(MATCH_MARK);
        }
    }

    /// Whether a match is reachable from `kernel` with nothing left to read.
    /// Anchors and rules do not mix ([`Determinizer::with_call_depth`]), so every entry here is
    /// under the empty stack.
    fn accepts_at_end(&mut self, kernel: &[Entry], start_holds: bool) -> bool {
        self.clear_seen();
        self.stack.clear();
        self.stack.extend(kernel.iter().rev());
        while let Some(x) = self.stack.pop() {
            if !self.visit(x) {
                continue;
            }
            self.work = self.work.saturating_add(1);
            let s = state_of(x);
            let state = match self.nfa.node(s) {
                Node::Stored(state) => state,
                Node::Embedded(e) => {
                    self.stack
                        .extend(e.moves_without_reading().map(|t| entry(t, EMPTY_STACK)));
                    continue;
                }
            };
            match state {
                State::Match => return true,
                State::Epsilon(next) => self.stack.push(entry(*next, EMPTY_STACK)),
                State::Union(alts) => self
                    .stack
                    .extend(alts.iter().rev().map(|&a| entry(a, EMPTY_STACK))),
                State::Look { assertion, next } => {
                    let holds = match assertion {
                        Assertion::Start => start_holds,
                        Assertion::NotStart => !start_holds,
                        Assertion::End => true,
                        Assertion::NotEnd => false,
                    };
                    if holds {
                        self.stack.push(entry(*next, EMPTY_STACK));
                    }
                }
                State::ByteRange(_)
                | State::Sparse(_)
                | State::Call { .. }
                | State::Return
                | State::Fail => {}
            }
        }
        false
    }

    /// Marks `x` visited by the current closure; false if it was already.
    fn visit(&mut self, x: Entry) -> bool {
        self.seen.insert(x)
    }

    fn clear_seen(&mut self) {
        self.seen.clear();
    }

    /// Whether every budget (states, set entries, closure work) is used below `1 / share` of
    /// its limit: how a caller that would build states only to save work later (not because an
    /// answer needs them) keeps from spending what the answers may need.
    pub fn is_below_share(&self, share: usize) -> bool {
        let part = |limit: usize| limit / share.max(1);
        self.sets.len() < part(self.max_states)
            && self.set_entries < part(self.max_states.saturating_mul(SET_ENTRIES_PER_STATE))
            && self.work < part(self.max_states.saturating_mul(CLOSURE_WORK_PER_STATE))
    }

    /// Closure steps taken so far, against `max_states * CLOSURE_WORK_PER_STATE`.
    pub fn closure_work(&self) -> usize {
        self.work
    }

    /// Heap bytes held, approximately: the NFA, the states' keys and the table that finds them,
    /// the successor memo and the call stacks. A lazy index holds all of it for as long as it
    /// may still grow.
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        let keys = self.sets.iter().map(|k| k.len()).sum::<usize>() * size_of::<Entry>();
        let slots = self.sets.capacity() * size_of::<Arc<[Entry]>>() + self.ids.memory_bytes();
        let stacks = self.stacks.frames.capacity() * size_of::<(u32, StateId, u32)>()
            + self.stacks.ids.capacity() * (size_of::<(u32, StateId)>() + size_of::<u32>());
        let kernels = self.kernels.capacity() * (size_of::<Entry>() + size_of::<u32>());
        self.nfa.memory_bytes() + keys + slots + stacks + kernels + self.seen.capacity_bytes()
    }
}

/// Runs the subset construction to completion: every state reachable from the start.
pub(crate) fn determinize(nfa: Nfa, anchors: Anchors, max_states: usize) -> Result<Raw> {
    let mut d = Determinizer::new(nfa, anchors, max_states)?;
    let k = d.classes().num_classes();
    let mut table = vec![0u32; k];
    let mut row = Vec::with_capacity(k);
    let mut state = 1u32;
    while (state as usize) < d.num_states() {
        d.next_row(state, &mut row)?;
        table.extend_from_slice(&row);
        state += 1;
    }
    let accepting = (0..d.num_states() as u32)
        .map(|s| d.is_accepting(s))
        .collect();
    Ok(Raw {
        classes: d.classes,
        table,
        accepting,
    })
}

/// The entries one closure has visited, with O(1) insert, membership and clear.
///
/// Entries are dense by NFA state (Briggs and Torczon's sparse set), each slot holding the
/// first call stack its state was met under: a closure under a grammar's calls meets almost
/// every state under one stack only, so hashing each (state, stack) pair, as a set of whole
/// entries would, was a fifth of building a grammar's rows. A state met again under a second
/// stack (a rule entered twice in one closure), and an embedded automaton's ids (past the
/// stored states), go to a hash set.
#[derive(Clone, Debug)]
struct Visited {
    dense: Vec<Entry>,
    sparse: Vec<u32>,
    more: FxHashSet<Entry>,
}

impl Visited {
    /// A set for the entries of an NFA with `states` stored states.
    fn new(states: usize) -> Self {
        Visited {
            dense: Vec::with_capacity(states),
            sparse: vec![0; states],
            more: FxHashSet::default(),
        }
    }

    /// Adds `x`; false if it was there already.
    fn insert(&mut self, x: Entry) -> bool {
        let s = state_of(x) as usize;
        let Some(&i) = self.sparse.get(s) else {
            return self.more.insert(x);
        };
        match self.dense.get(i as usize) {
            Some(&met) if state_of(met) as usize == s => met != x && self.more.insert(x),
            _ => {
                self.sparse[s] = self.dense.len() as u32;
                self.dense.push(x);
                true
            }
        }
    }

    fn clear(&mut self) {
        self.dense.clear();
        self.more.clear();
    }

    fn capacity_bytes(&self) -> usize {
        use std::mem::size_of;
        self.dense.capacity() * size_of::<Entry>()
            + self.sparse.capacity() * size_of::<u32>()
            + self.more.capacity() * size_of::<Entry>()
    }

    fn len(&self) -> usize {
        self.dense.len() + self.more.len()
    }
}

/// Which byte-reading NFA states can still lead to a match once they read their byte.
///
/// A lazily built DFA is never minimized, so without this a state whose NFA set can no longer
/// reach a match (`.a^` after one byte, say) would look alive, and a token index would allow
/// tokens that lead nowhere. Dropping such NFA states from every key makes a set with no future
/// equal to the empty set, which is the dead state, so the unminimized DFA is dead exactly where
/// the minimal one is.
///
/// Two backward reachability sets are computed with one worklist over reversed edges, for
/// positions after at least one byte (where `Start` never holds and `NotStart` always does):
/// `at_end[q]`, a match is reachable from `q` reading nothing more (`End` holds, `NotEnd` does
/// not), and `reading[q]`, a match is reachable from `q` reading at least one more byte. A
/// byte-reading state is live exactly when it is in `reading`. Linear in the NFA's size.
///
/// Embedded automata are not walked state by state: inside one (minimal, so every state but the
/// dead one can still reach an accepting state), every state that reads some byte
/// ([`EmbeddedState::reads`]) leads to the exit, so such a state is live exactly when its
/// occurrence's exit has either fact.
/// The only embedded ids stored states point at are occurrences' start states; their facts are
/// derived from the exit's whenever the exit learns one, and passed on to their predecessors.
///
/// With rules, liveness depends on the call stack too: see [`CallNeeds`].
#[derive(Clone, Debug)]
struct Liveness {
    /// Per stored state.
    stored: Vec<bool>,
    /// Per occurrence: whether its exit can still lead to a match.
    exits: Vec<bool>,
    /// For an NFA with rules, what replaces the two above.
    calls: Option<CallNeeds>,
}

impl Liveness {
    /// The liveness of `nfa`'s states; everything is live unless `prune` (or the NFA has rules,
    /// which are always pruned: see [`CallNeeds`]).
    fn of(nfa: &Nfa, prune: bool) -> Self {
        if !nfa.rules().is_empty() {
            return Liveness {
                stored: Vec::new(),
                exits: Vec::new(),
                calls: Some(CallNeeds::of(nfa)),
            };
        }
        if !prune {
            return Liveness {
                stored: vec![true; nfa.len()],
                exits: vec![true; nfa.embeddings().len()],
                calls: None,
            };
        }
        let (reading, at_end) = backward_facts(nfa);
        let exits = nfa
            .embeddings()
            .iter()
            .map(|e| reading[e.exit as usize] || at_end[e.exit as usize])
            .collect();
        Liveness {
            stored: reading,
            exits,
            calls: None,
        }
    }

    /// Whether a byte-reading stored state is live.
    fn stored(&self, s: StateId) -> bool {
        match &self.calls {
            None => self.stored[s as usize],
            Some(c) => c.need[s as usize] != NEVER,
        }
    }

    /// Whether an embedded state is live.
    fn embedded(&self, e: &EmbeddedState<'_>) -> bool {
        e.reads()
            && match &self.calls {
                None => self.exits[e.embedding],
                Some(c) => c.exits[e.embedding] != NEVER,
            }
    }

    /// Whether the fragment holding `s` (a rule's body, or the calling expression) can still
    /// reach its end from `s`: a call is worth making only when its body can return and its
    /// return address can go on.
    fn reaches_end(&self, s: StateId) -> bool {
        match &self.calls {
            None => true,
            Some(c) => c.need_of(s) != NEVER,
        }
    }
}

/// Liveness under calls: how many levels of calls a state needs to reach the end of its
/// fragment (a rule's `Return`, or the `Match` of the expression calling the rules).
///
/// A state inside a rule body can still lead to a match when its body can return at all, and
/// when each return address on its stack can in turn reach the end of its own fragment. The
/// second half is a fact about the stack, checked once per frame when the frame is made
/// ([`Stacks::push`]); the first is `need[q] != NEVER`, with `need[q]` the least call nesting
/// with which `q` reaches its end (a call of rule `r` costs `1 + need[start of r]`). The bound on
/// open calls is not part of liveness: a call past it is an error ([`Stacks::push`]), never a
/// pruned branch, so that a mask is the grammar's own or the step fails.
///
/// `need` is computed in rounds: round `b` is a backward reachability from the fragment ends in
/// which a call edge may be crossed when its rule's start was reached in an earlier round, and
/// every state first reached in round `b` needs `b`. The rounds stop when one reaches nothing
/// new, which happens after the deepest least call nesting any state needs, plus one: a few
/// rounds for real grammars, each linear in the NFA, and never more than the NFA has states.
/// Anchors do not occur with rules, so there is no end-of-text fact to track.
#[derive(Clone, Debug)]
struct CallNeeds {
    /// Per stored state (for a byte-reading one: after its byte).
    need: Vec<u32>,
    /// Per occurrence of an embedded automaton: what its exit needs.
    exits: Vec<u32>,
    /// Per embedded id a stored state leads to (occurrences' starts): what its exit needs.
    entries: FxHashMap<StateId, u32>,
}

impl CallNeeds {
    fn of(nfa: &Nfa) -> Self {
        let n = nfa.len();
        let Reversed {
            preds,
            embedded_preds,
            calls,
            entries_by_exit,
        } = Reversed::of(nfa);
        let mut needs = CallNeeds {
            need: vec![NEVER; n],
            exits: Vec::new(),
            entries: embedded_preds.keys().map(|&v| (v, NEVER)).collect(),
        };
        let mut work: Vec<StateId> = (0..n as StateId)
            .filter(|&q| matches!(nfa.state(q), State::Return | State::Match))
            .collect();
        for round in 0u32.. {
            let mut fresh = false;
            let mut mark = |needs: &mut CallNeeds, x: StateId, work: &mut Vec<StateId>| {
                let slot = if x < EMBEDDED_BASE {
                    needs.need.get_mut(x as usize)
                } else {
                    needs.entries.get_mut(&x)
                };
                if let Some(slot) = slot.filter(|s| **s == NEVER) {
                    *slot = round;
                    fresh = true;
                    work.push(x);
                }
            };
            if round == 0 {
                let ends = std::mem::take(&mut work);
                for q in ends {
                    mark(&mut needs, q, &mut work);
                }
            }
            loop {
                while let Some(x) = work.pop() {
                    let plain: &[StateId] = if x < EMBEDDED_BASE {
                        preds.of(x)
                    } else {
                        embedded_preds.get(&x).map_or(&[], |v| v.as_slice())
                    };
                    for &p in plain {
                        mark(&mut needs, p, &mut work);
                    }
                    // Inside a minimal automaton every state that reads can reach its exit.
                    for &v in entries_by_exit.get(&x).map_or(&[][..], |v| v.as_slice()) {
                        mark(&mut needs, v, &mut work);
                    }
                }
                // A call is crossed once its return address is reached and its body can
                // return: in an earlier round for a counted call (it takes a level), in this
                // one for an uncounted call. Bodies and return addresses are reached in any
                // order, so the calls are looked at again until none is crossed.
                for &(p, rule, next) in &calls {
                    let body = needs.need_of(nfa.rules()[rule as usize]);
                    let budget = if nfa.is_counted(rule) {
                        round.checked_sub(1)
                    } else {
                        Some(round)
                    };
                    if needs.need_of(next) != NEVER
                        && budget.is_some_and(|b| body <= b)
                        && needs.need_of(p) == NEVER
                    {
                        mark(&mut needs, p, &mut work);
                    }
                }
                if work.is_empty() {
                    break;
                }
            }
            if !fresh && round > 0 {
                break;
            }
        }
        needs.exits = nfa
            .embeddings()
            .iter()
            .map(|e| needs.need_of(e.exit))
            .collect();
        needs
    }

    /// What the state `id` needs.
    fn need_of(&self, id: StateId) -> u32 {
        if id < EMBEDDED_BASE {
            self.need.get(id as usize).copied().unwrap_or(NEVER)
        } else {
            self.entries.get(&id).copied().unwrap_or(NEVER)
        }
    }
}

/// Per NFA state, whether it is a *tail*: every path from it reads nothing and ends in
/// [`State::Return`] (through `Epsilon` and `Union` only; `Fail` ends nothing). Returning to a
/// tail pops the frame below at once, so a call whose return address is a tail may run its body
/// under the caller's stack instead: the configurations reached are those the frame's pop
/// would reach. A cycle of empty moves among such states reads nothing either, so the largest
/// set that satisfies the rule is taken: states start as tails, and the rest are struck out
/// until nothing changes: a pass runs from the last state back, so that the forward moves most
/// fragments are made of settle in one. Without rules there are no calls, and nothing to find.
fn tails(nfa: &Nfa) -> Vec<bool> {
    if nfa.rules().is_empty() {
        return Vec::new();
    }
    let states = nfa.states();
    let mut tail: Vec<bool> = states
        .iter()
        .map(|s| {
            matches!(
                s,
                State::Return | State::Fail | State::Epsilon(_) | State::Union(_)
            )
        })
        .collect();
    loop {
        let mut changed = false;
        for (i, state) in states.iter().enumerate().rev() {
            let keeps = match state {
                State::Epsilon(next) => tail.get(*next as usize).copied().unwrap_or(false),
                State::Union(alts) => alts
                    .iter()
                    .all(|&a| tail.get(a as usize).copied().unwrap_or(false)),
                _ => continue,
            };
            if tail[i] && !keeps {
                tail[i] = false;
                changed = true;
            }
        }
        if !changed {
            return tail;
        }
    }
}

/// The call stacks of a construction, interned: stack `i` is a frame (the stack below it and the
/// return address on top) and its depth; stack 0 ([`EMPTY_STACK`]) is empty.
///
/// Equal stacks get equal ids, so entries compare as pairs of integers and a DFA state's key
/// stays a sorted list of them. Only frames whose return address can still reach the end of its
/// fragment are made ([`Liveness::reaches_end`]), so every stack held is live.
///
/// At most `max_depth` counted calls are open at once. A live call past that is not dropped
/// (the state would then refuse text the grammar allows): it marks the stacks as overflowed, and
/// the successor being built becomes the overflow state, whose row is [`Error::SizeLimit`]
/// (`max_stack`).
#[derive(Clone, Debug)]
struct Stacks {
    max_depth: u32,
    /// `(below, return address, depth)` per stack.
    frames: Vec<(u32, StateId, u32)>,
    ids: FxHashMap<(u32, StateId), u32>,
    /// Frames made since [`Stacks::take_new`] was last called.
    new: usize,
    /// Whether a live call past `max_depth` was met since [`Stacks::take_overflow`].
    overflowed: bool,
}

impl Stacks {
    fn new(max_depth: u32) -> Self {
        Stacks {
            max_depth,
            frames: vec![(EMPTY_STACK, 0, 0)],
            ids: FxHashMap::default(),
            new: 0,
            overflowed: false,
        }
    }

    /// Whether a call past the bound was met since the last check.
    fn take_overflow(&mut self) -> bool {
        std::mem::take(&mut self.overflowed)
    }

    fn depth(&self, stack: u32) -> u32 {
        self.frames[stack as usize].2
    }

    /// The stack `below` with `ret` pushed, for a call of the rule starting at `body`, if the
    /// call can lead anywhere; a `counted` call deepens the stack (see [`Nfa::is_counted`]).
    fn push(
        &mut self,
        below: u32,
        ret: StateId,
        body: StateId,
        counted: bool,
        live: &Liveness,
    ) -> Option<u32> {
        let depth = self.depth(below);
        if !live.reaches_end(ret) || !live.reaches_end(body) {
            return None;
        }
        if counted && depth >= self.max_depth {
            self.overflowed = true;
            return None;
        }
        if let Some(&id) = self.ids.get(&(below, ret)) {
            return Some(id);
        }
        let id = u32::try_from(self.frames.len()).ok()?;
        self.frames.push((below, ret, depth + u32::from(counted)));
        self.ids.insert((below, ret), id);
        self.new += 1;
        Some(id)
    }

    /// The return address on top of `stack` and the stack below it; `None` for the empty stack.
    fn pop(&self, stack: u32) -> Option<(StateId, u32)> {
        (stack != EMPTY_STACK).then(|| {
            let (below, ret, _) = self.frames[stack as usize];
            (ret, below)
        })
    }

    /// Frames made since the last call.
    fn take_new(&mut self) -> usize {
        std::mem::take(&mut self.new)
    }
}

/// The NFA's edges, reversed for the backward walks of liveness.
struct Reversed {
    /// Stored predecessors of each stored state.
    preds: Predecessors,
    /// Stored predecessors of the embedded ids stored states lead to (occurrences' starts); with
    /// rules, also the embedded return addresses and rule starts, which no stored state enters.
    embedded_preds: FxHashMap<StateId, Vec<StateId>>,
    /// Every call state, with the rule it calls and the state it returns to.
    calls: Vec<(StateId, u32, StateId)>,
    /// Per exit, the embedded ids above whose facts follow from it.
    entries_by_exit: FxHashMap<StateId, Vec<StateId>>,
}

/// The stored predecessors of every stored state, in one array sliced per state.
///
/// A schema's NFA has tens of thousands of states, most with one or two predecessors; a vector
/// per state made allocation the larger part of reversing the edges, on the path to a schema's
/// first mask. Counting the in-degrees first lets one pass write every list in place.
struct Predecessors {
    /// `list[starts[q]..starts[q + 1]]` are the predecessors of `q`.
    starts: Vec<u32>,
    list: Vec<StateId>,
}

impl Predecessors {
    fn of(&self, q: StateId) -> &[StateId] {
        let q = q as usize;
        match (self.starts.get(q), self.starts.get(q + 1)) {
            (Some(&lo), Some(&hi)) => &self.list[lo as usize..hi as usize],
            _ => &[],
        }
    }
}

/// Calls `edge` with every state `state` moves to (a call's return address aside: it is reached
/// through the rule, not from the call).
fn successors(state: &State, mut edge: impl FnMut(StateId)) {
    match state {
        State::ByteRange(t) => edge(t.next),
        State::Sparse(ts) => ts.iter().for_each(|t| edge(t.next)),
        State::Epsilon(next) | State::Look { next, .. } => edge(*next),
        State::Union(alts) => alts.iter().for_each(|&a| edge(a)),
        State::Call { .. } | State::Return | State::Match | State::Fail => {}
    }
}

impl Reversed {
    fn of(nfa: &Nfa) -> Self {
        let n = nfa.len();
        // `starts[q + 1]` counts `q`'s stored predecessors, then (summed) ends its list; filling
        // moves each start forward, and the final shift puts them back.
        let mut starts = vec![0u32; n + 1];
        for state in nfa.states() {
            successors(state, |to| {
                if let Some(c) = starts.get_mut(to as usize + 1) {
                    *c += 1;
                }
            });
        }
        for q in 1..=n {
            starts[q] += starts[q - 1];
        }
        let mut list = vec![0; starts[n] as usize];
        let mut embedded_preds: FxHashMap<StateId, Vec<StateId>> = FxHashMap::default();
        let mut calls = Vec::new();
        for (q, state) in nfa.states().iter().enumerate() {
            let q = q as StateId;
            successors(state, |to| {
                if to < EMBEDDED_BASE {
                    if let Some(at) = starts[..n].get_mut(to as usize) {
                        list[*at as usize] = q;
                        *at += 1;
                    }
                } else {
                    embedded_preds.entry(to).or_default().push(q);
                }
            });
            if let State::Call { rule, next } = state {
                calls.push((q, *rule, *next));
                if *next >= EMBEDDED_BASE {
                    embedded_preds.entry(*next).or_default();
                }
            }
        }
        // Each start now holds the next state's; shifting by one restores them.
        starts.rotate_right(1);
        starts[0] = 0;
        for &start in nfa.rules() {
            if start >= EMBEDDED_BASE {
                embedded_preds.entry(start).or_default();
            }
        }
        let mut entries_by_exit: FxHashMap<StateId, Vec<StateId>> = FxHashMap::default();
        for &v in embedded_preds.keys() {
            if let Node::Embedded(e) = nfa.node(v) {
                entries_by_exit.entry(e.at.exit).or_default().push(v);
            }
        }
        Reversed {
            preds: Predecessors { starts, list },
            embedded_preds,
            calls,
            entries_by_exit,
        }
    }
}

/// The `reading` and `at_end` facts of every stored state (see [`Liveness`]).
fn backward_facts(nfa: &Nfa) -> (Vec<bool>, Vec<bool>) {
    let n = nfa.len();
    let Reversed {
        preds,
        embedded_preds,
        entries_by_exit,
        ..
    } = Reversed::of(nfa);
    let mut at_end = vec![false; n];
    let mut reading = vec![false; n];
    let mut embedded_facts: FxHashMap<StateId, (bool, bool)> = FxHashMap::default();
    // (state, true = at_end / false = reading) facts to propagate.
    let mut work: Vec<(StateId, bool)> = Vec::new();
    for (q, state) in nfa.states().iter().enumerate() {
        if matches!(state, State::Match) {
            at_end[q] = true;
            work.push((q as StateId, true));
        }
    }
    while let Some((x, end_fact)) = work.pop() {
        let preds_of_x: &[StateId] = if x < EMBEDDED_BASE {
            preds.of(x)
        } else {
            embedded_preds.get(&x).map_or(&[], |v| v.as_slice())
        };
        for &p in preds_of_x {
            let pi = p as usize;
            // What the predecessor learns from this fact, if anything.
            let (gets_end, gets_reading) = match nfa.state(p) {
                State::ByteRange(_) | State::Sparse(_) => (false, true),
                State::Epsilon(_) | State::Union(_) => (end_fact, !end_fact),
                State::Look { assertion, .. } => match assertion {
                    Assertion::Start => (false, false),
                    Assertion::NotStart => (end_fact, !end_fact),
                    Assertion::End => (end_fact, false),
                    Assertion::NotEnd => (false, !end_fact),
                },
                State::Call { .. } | State::Return | State::Match | State::Fail => (false, false),
            };
            if gets_end && !at_end[pi] {
                at_end[pi] = true;
                work.push((p, true));
            }
            if gets_reading && !reading[pi] {
                reading[pi] = true;
                work.push((p, false));
            }
        }
        // An exit that learns a fact tells the starts of its occurrences: an accepting start
        // gets the fact itself (it moves on to the exit without reading), and a start that can
        // read its way to an accepting state can match after a byte whatever the fact was.
        let Some(entries) = entries_by_exit.get(&x) else {
            continue;
        };
        for &v in entries {
            let Node::Embedded(e) = nfa.node(v) else {
                continue;
            };
            let accepting = e.is_accepting();
            let reads = e.reads();
            let facts = embedded_facts.entry(v).or_default();
            if accepting && end_fact && !facts.0 {
                facts.0 = true;
                work.push((v, true));
            }
            if (reads || (accepting && !end_fact)) && !facts.1 {
                facts.1 = true;
                work.push((v, false));
            }
        }
    }
    (reading, at_end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dfa::DfaConfig;
    use crate::nfa::NfaConfig;
    use crate::regex::{ClassSet, Hir, Look};

    fn determinizer(hir: &Hir, max_states: usize) -> Result<Determinizer> {
        let nfa = Nfa::new(hir, &NfaConfig::default(), &DfaConfig::default())?;
        Determinizer::new(nfa, Anchors::WHOLE_TEXT, max_states)
    }

    /// Walks `bytes` through the lazy construction, creating states as it goes.
    fn lazy_match(d: &mut Determinizer, bytes: &[u8]) -> bool {
        let mut row = Vec::new();
        let mut state = 1;
        for &b in bytes {
            d.next_row(state, &mut row).unwrap();
            state = row[d.classes().get(b) as usize];
        }
        d.is_accepting(state)
    }

    #[test]
    fn lazy_rows_create_only_visited_states() {
        let digits = Hir::repeat(Hir::class(ClassSet::range(0x30, 0x39)), 1, None);
        let h = Hir::alternation([
            Hir::concat([Hir::literal("n="), digits.clone()]),
            Hir::concat([Hir::literal("long-branch-"), digits]),
        ]);
        let mut d = determinizer(&h, 100).unwrap();
        assert_eq!(d.num_states(), 2);
        assert!(lazy_match(&mut d, b"n=42"));
        let visited = d.num_states();
        assert!(visited < 10, "{visited}");
        assert!(!lazy_match(&mut d, b"n="));
        assert!(lazy_match(&mut d, b"long-branch-7"));
        assert!(d.num_states() > visited);
        // A state that does not exist yields a dead row.
        let mut row = vec![9];
        d.next_row(10_000, &mut row).unwrap();
        assert!(row.iter().all(|&s| s == 0) && !d.is_accepting(10_000));
    }

    #[test]
    fn rows_with_many_distinct_successors_match_the_regex_crate() {
        // 40 letters in 20 pairs, two apart (A and C, B and D, E and G, ...): the letters of a
        // pair lead to one state, which wants the pair's digit, and `~` before the second letter
        // tells them apart, so they are classes of their own. From the start, a row meets 20
        // distinct successors, each again two classes on: the first ones are found by
        // comparison, those past `LINEAR_SUCCESSORS` by hashing, and both must name the state
        // the pair's first letter made.
        let letters: Vec<u8> = (b'A'..=b'Z').chain(b'a'..=b'n').collect();
        let mut branches = Vec::new();
        for (g, quad) in letters.chunks(4).enumerate() {
            for k in 0..2 {
                let (x, y) = (quad[k] as char, quad[k + 2] as char);
                branches.push(format!("[{x}{y}]{}", (2 * g + k) % 10));
                branches.push(format!("~{y}"));
            }
        }
        let pattern = format!("(?:{})+", branches.join("|"));
        let h = crate::regex::parse(&pattern).unwrap();
        let mut d = determinizer(&h, 10_000).unwrap();
        let re = regex::bytes::Regex::new(&format!("^(?:{pattern})$")).unwrap();
        let alphabet: Vec<u8> = letters.iter().copied().chain(b'0'..=b'9').collect();
        for &a in &alphabet {
            for &b in &alphabet {
                for tail in [&b""[..], b"A0", b"n9", b"C0", b"~C"] {
                    let text = [&[a, b][..], tail].concat();
                    assert_eq!(lazy_match(&mut d, &text), re.is_match(&text), "{text:?}");
                }
            }
        }
    }

    #[test]
    fn start_assertion_holds_only_before_the_first_byte() {
        let h = Hir::repeat(
            Hir::alternation([
                Hir::literal("a"),
                Hir::concat([Hir::Look(Look::Start), Hir::literal("b")]),
            ]),
            0,
            None,
        );
        let mut d = determinizer(&h, 100).unwrap();
        assert!(lazy_match(&mut d, b"baa"));
        assert!(lazy_match(&mut d, b""));
        assert!(!lazy_match(&mut d, b"ab"));
        assert!(!lazy_match(&mut d, b"bb"));
    }

    #[test]
    fn end_assertion_only_decides_acceptance() {
        // (a$)* b? : "a" then the end, or "b" with no "a" before it.
        let h = Hir::concat([
            Hir::repeat(
                Hir::concat([Hir::literal("a"), Hir::Look(Look::End)]),
                0,
                None,
            ),
            Hir::optional(Hir::literal("b")),
        ]);
        let mut d = determinizer(&h, 100).unwrap();
        for (s, want) in [
            ("", true),
            ("a", true),
            ("b", true),
            ("ab", false),
            ("aa", false),
        ] {
            assert_eq!(lazy_match(&mut d, s.as_bytes()), want, "{s:?}");
        }
    }

    #[test]
    fn embedded_states_are_dead_where_their_exit_leads_nowhere() {
        let letters = Hir::repeat(Hir::class(ClassSet::range(0x61, 0x7A)), 1, None);
        let word = Hir::shared(letters);
        let counted = Hir::repeat(Hir::literal("ab"), 20, Some(20));
        let state_after = |h: &Hir, bytes: &[u8]| {
            let mut d = determinizer(h, 100).unwrap();
            let mut row = Vec::new();
            let mut state = 1;
            for &b in bytes {
                d.next_row(state, &mut row).unwrap();
                state = row[d.classes().get(b) as usize];
            }
            state
        };
        // After a byte the start of the text is behind: nothing inside the automata is alive.
        for inner in [&word, &counted] {
            let h = Hir::concat([inner.clone(), Hir::Look(Look::Start)]);
            assert_eq!(state_after(&h, b"a"), 0);
        }
        // With a way out they are, and only as far as the way out allows.
        let h = Hir::concat([word.clone(), Hir::literal("!")]);
        assert_ne!(state_after(&h, b"ab"), 0);
        let mut d = determinizer(&h, 100).unwrap();
        assert!(
            lazy_match(&mut d, b"ab!") && !lazy_match(&mut d, b"ab") && !lazy_match(&mut d, b"!")
        );
        let h = Hir::concat([counted, Hir::Look(Look::End)]);
        let mut d = determinizer(&h, 100).unwrap();
        assert!(lazy_match(&mut d, "ab".repeat(20).as_bytes()));
        assert!(!lazy_match(&mut d, "ab".repeat(19).as_bytes()));
        assert_eq!(state_after(&h, "ab".repeat(20).as_bytes()).min(1), 1);
        assert_eq!(
            state_after(&h, format!("{}a", "ab".repeat(20)).as_bytes()),
            0
        );
    }

    #[test]
    fn limit_stops_an_exploding_construction() {
        let ab = Hir::class(ClassSet::range(0x61, 0x62));
        let h = Hir::concat([
            Hir::repeat(ab.clone(), 0, None),
            Hir::literal("a"),
            Hir::repeat(ab, 40, Some(40)),
        ]);
        let nfa = Nfa::new(&h, &NfaConfig::default(), &DfaConfig::default()).unwrap();
        match determinize(nfa, Anchors::WHOLE_TEXT, 20_000) {
            Err(Error::SizeLimit {
                limit,
                value,
                maximum,
            }) => {
                assert_eq!(
                    (limit.as_str(), value, maximum),
                    ("max_states", 20_001, 20_000)
                );
            }
            other => panic!(
                "expected a size limit, got {:?}",
                other.map(|r| r.accepting.len())
            ),
        }
        assert!(matches!(
            determinizer(&Hir::Empty, 1),
            Err(Error::SizeLimit { .. })
        ));
    }

    #[test]
    fn big_state_sets_hit_their_budget_not_the_allocator() {
        // Every state of (a?){N} holds the N - i optional copies still ahead.
        let h = Hir::repeat(Hir::optional(Hir::literal("a")), 100_000, Some(100_000));
        let nfa = Nfa::new(&h, &NfaConfig::default(), &DfaConfig::default()).unwrap();
        match determinize(nfa, Anchors::WHOLE_TEXT, 20_000) {
            Err(Error::SizeLimit { limit, maximum, .. }) => {
                assert_eq!((limit.as_str(), maximum), ("dfa_state_sets", 20_000 * 1024));
            }
            other => panic!(
                "expected a size limit, got {:?}",
                other.map(|r| r.accepting.len())
            ),
        }
        // The same shape at a size whose sets fit: N + 1 states and the dead one.
        let h = Hir::repeat(Hir::optional(Hir::literal("a")), 2000, Some(2000));
        let nfa = Nfa::new(&h, &NfaConfig::default(), &DfaConfig::default()).unwrap();
        assert_eq!(
            determinize(nfa, Anchors::WHOLE_TEXT, 20_000)
                .unwrap()
                .accepting
                .len(),
            2002
        );
    }

    #[test]
    fn long_epsilon_closures_hit_the_work_budget() {
        // Each live position drags a chain of 1000 optional start assertions through every
        // closure; the state count grows as 2^k.
        let ab = Hir::class(ClassSet::range(0x61, 0x62));
        let chain = Hir::Repeat {
            sub: Box::new(Hir::Look(Look::Start)),
            min: 0,
            max: Some(1000),
        };
        let h = Hir::concat([
            Hir::repeat(ab.clone(), 0, None),
            Hir::literal("a"),
            Hir::repeat(Hir::concat([ab, chain]), 14, Some(14)),
        ]);
        let nfa = Nfa::new(&h, &NfaConfig::default(), &DfaConfig::default()).unwrap();
        match determinize(nfa, Anchors::WHOLE_TEXT, 2_000) {
            Err(Error::SizeLimit { limit, .. }) => {
                assert!(
                    limit == "dfa_closure_work" || limit == "max_states",
                    "{limit}"
                );
            }
            other => panic!(
                "expected a size limit, got {:?}",
                other.map(|r| r.accepting.len())
            ),
        }
    }

    /// The states `text` leads through from the start, by rows, up to a state whose row fails
    /// (the overflow state's).
    fn walk_rows(d: &mut Determinizer, text: &[u8]) -> Vec<u32> {
        let mut row = Vec::new();
        let mut states = vec![1];
        for &b in text {
            let s = states[states.len() - 1];
            if d.next_row(s, &mut row).is_err() {
                break;
            }
            states.push(row[d.classes().get(b) as usize]);
        }
        states
    }

    /// A call whose return address only returns (`e = "-" e | "x"`: the `e` after `-`) runs
    /// its body under the caller's stack: a thousand `-` are one state past the first, far past
    /// the call bound, and the language is the grammar's. A call with something after it
    /// (`p = "(" p ")" | "x"`) still opens a frame per level and overflows past the bound.
    #[test]
    fn tail_calls_open_no_frame() {
        let e = Hir::call(0, false);
        let tail = Hir::grammar(
            e.clone(),
            vec![Hir::alternation([
                Hir::concat([Hir::literal("-"), e]),
                Hir::literal("x"),
            ])],
        );
        let nfa = Nfa::new(&tail, &NfaConfig::default(), &DfaConfig::default()).unwrap();
        let mut d = Determinizer::with_call_depth(nfa, Anchors::WHOLE_TEXT, 1_000, 4).unwrap();
        let text = [vec![b'-'; 1000], vec![b'x']].concat();
        let states = walk_rows(&mut d, &text);
        assert_eq!(
            states.len(),
            1002,
            "no call past the bound: {:?}",
            &states[..6]
        );
        assert!(d.is_accepting(states[1001]), "1000 dashes and an x");
        assert!(
            states[1..1001].iter().all(|&s| s == states[1]),
            "one state per dash"
        );
        assert!(!d.is_accepting(states[1000]), "dashes alone are not an e");
        assert_eq!(walk_rows(&mut d, b"x-")[2], 0, "nothing follows the x");
        let p = Hir::call(0, false);
        let nested = Hir::grammar(
            p.clone(),
            vec![Hir::alternation([
                Hir::concat([Hir::literal("("), p, Hir::literal(")")]),
                Hir::literal("x"),
            ])],
        );
        let nfa = Nfa::new(&nested, &NfaConfig::default(), &DfaConfig::default()).unwrap();
        let mut d = Determinizer::with_call_depth(nfa, Anchors::WHOLE_TEXT, 1_000, 4).unwrap();
        let states = walk_rows(&mut d, b"(((x)))");
        assert!(d.is_accepting(states[7]));
        let deep = walk_rows(&mut d, b"((((((");
        assert!(deep.contains(&d.overflow_state().unwrap()), "{deep:?}");
    }

    /// `value = scalar | "[" (value ("," value)*)? "]"`, with `scalar = "a" | "bb"` shared (so
    /// embedded as an automaton) and the item list shared with calls in it (so called as a rule).
    fn nested_lists() -> Hir {
        let value = Hir::call(0, false);
        let scalar = Hir::shared(Hir::alternation([Hir::literal("a"), Hir::literal("bb")]));
        let items = Hir::shared(Hir::concat([
            value.clone(),
            Hir::repeat(Hir::concat([Hir::literal(","), value.clone()]), 0, None),
        ]));
        let list = Hir::concat([Hir::literal("["), Hir::optional(items), Hir::literal("]")]);
        Hir::grammar(value, vec![Hir::alternation([scalar, list])])
    }

    /// The calls `text` needs as a value of [`nested_lists`] (a list adds one to its deepest
    /// item), or `None` when it is not one.
    fn nested_depth(text: &[u8]) -> Option<u32> {
        fn value(t: &[u8], i: &mut usize) -> Option<u32> {
            match t.get(*i)? {
                b'a' => {
                    *i += 1;
                    Some(1)
                }
                b'b' if t.get(*i + 1) == Some(&b'b') => {
                    *i += 2;
                    Some(1)
                }
                b'[' => {
                    *i += 1;
                    let mut deepest = 0;
                    if t.get(*i) != Some(&b']') {
                        loop {
                            deepest = deepest.max(value(t, i)?);
                            match t.get(*i)? {
                                b',' => *i += 1,
                                _ => break,
                            }
                        }
                    }
                    (t.get(*i)? == &b']').then(|| *i += 1)?;
                    Some(1 + deepest)
                }
                _ => None,
            }
        }
        let mut i = 0;
        let d = value(text, &mut i)?;
        (i == text.len()).then_some(d)
    }

    #[test]
    fn rules_match_what_recursive_descent_accepts_and_deeper_calls_are_an_error() {
        let nfa = Nfa::new(
            &nested_lists(),
            &NfaConfig::default(),
            &DfaConfig::default(),
        )
        .unwrap();
        assert_eq!(
            nfa.rules().len(),
            2,
            "the value rule and the shared item list"
        );
        let alphabet = b"ab[],";
        for max_depth in [1u32, 2, 3, 4] {
            let mut d =
                Determinizer::with_call_depth(nfa.clone(), Anchors::WHOLE_TEXT, 100_000, max_depth)
                    .unwrap();
            let mut row = Vec::new();
            let mut overflows = 0;
            // Breadth first over all texts up to 8 bytes, walking the lazy automaton along.
            let mut layer: Vec<(Vec<u8>, u32)> = vec![(Vec::new(), 1)];
            for len in 0..=8 {
                let mut next = Vec::new();
                for (text, state) in &layer {
                    // every state built holds the whole language, never a depth-pruned part
                    assert_eq!(
                        d.is_accepting(*state),
                        nested_depth(text).is_some(),
                        "{text:?}"
                    );
                    if len == 8 {
                        continue;
                    }
                    // a state with one successor too deep still has its row, and every other
                    // successor in it
                    d.next_row(*state, &mut row).unwrap();
                    for &b in alphabet {
                        let longer = [text.as_slice(), &[b]].concat();
                        let need = completion_depth(&longer);
                        let to = row[d.classes().get(b) as usize];
                        if Some(to) == d.overflow_state() {
                            assert!(
                                need.is_some_and(|n| n > max_depth),
                                "{longer:?} overflowed at depth {max_depth}"
                            );
                            overflows += 1;
                            continue;
                        }
                        assert_eq!(to != 0, need.is_some(), "{longer:?}");
                        assert!(
                            need.is_none_or(|n| n <= max_depth),
                            "{longer:?} at depth {max_depth} should have overflowed"
                        );
                        if to != 0 {
                            next.push((longer, to));
                        }
                    }
                }
                layer = next;
            }
            assert!(overflows > 0, "texts up to 8 bytes nest past {max_depth}");
            // the overflow state is no state to go on from: its row is the limit
            let overflow = d.overflow_state().unwrap();
            assert!(!d.is_accepting(overflow));
            match d.next_row(overflow, &mut row) {
                Err(Error::SizeLimit { limit, maximum, .. }) => {
                    assert_eq!(
                        (limit.as_str(), maximum),
                        ("max_stack", u64::from(max_depth))
                    );
                }
                other => panic!("expected the stack limit, got {other:?}"),
            }
            // and the construction stays usable
            d.next_row(1, &mut row).unwrap();
            assert!(d.is_accepting(row[d.classes().get(b'a') as usize]));
        }
    }

    /// The calls the cheapest completion of `prefix` into a value of [`nested_lists`] needs, or
    /// `None` when nothing completes it. The greedy completion is the cheapest: finish a `b`,
    /// give a dangling comma an `a`, close every open list (an item after a comma adds no depth
    /// its first sibling did not).
    fn completion_depth(prefix: &[u8]) -> Option<u32> {
        let mut text = prefix.to_vec();
        let b_run = text.iter().rev().take_while(|&&c| c == b'b').count();
        if b_run % 2 == 1 {
            text.push(b'b');
        }
        if matches!(text.last(), None | Some(b',' | b'[')) {
            text.push(b'a');
        }
        let open = text.iter().filter(|&&c| c == b'[').count();
        let closed = text.iter().filter(|&&c| c == b']').count();
        text.extend(std::iter::repeat_n(b']', open.saturating_sub(closed)));
        nested_depth(&text)
    }

    #[test]
    fn visited_entries() {
        let mut s = Visited::new(4);
        let (a, b) = (entry(3, 0), entry(3, 7));
        assert!(s.insert(a) && s.insert(entry(0, 2)) && !s.insert(a));
        // The same state under a second stack, and an id past the stored states.
        assert!(s.insert(b) && !s.insert(b) && !s.insert(a));
        assert!(s.insert(entry(4, 0)) && !s.insert(entry(4, 0)));
        assert!(s.insert(entry(EMBEDDED_BASE, 1)) && !s.insert(entry(EMBEDDED_BASE, 1)));
        assert_eq!(s.len(), 5);
        s.clear();
        assert!(s.insert(b) && s.insert(a) && s.len() == 2);
    }
}
