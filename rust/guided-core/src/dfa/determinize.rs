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
//! The cost of a state is the size of its closure times the classes its NFA states read, plus a
//! hash lookup per distinct successor set. [`Determinizer`] refuses to create more than
//! `max_states` states, checking before each one, so a pattern whose DFA explodes
//! (`(a|b)*a(a|b){40}`) stops after `max_states` states' work. A state count alone does not bound
//! memory or time, though: in `(a?){100000}` every state's set holds up to 100,000 NFA states, and
//! 20,000 such sets are gigabytes. So two more budgets, both scaled from `max_states` to keep one
//! knob: the sets together may hold [`SET_ENTRIES_PER_STATE`] entries per allowed state
//! (`dfa_state_sets`), and the closures together may visit [`CLOSURE_WORK_PER_STATE`] NFA states
//! per allowed state (`dfa_closure_work`). At the default limit that is 80 MB of sets and a few
//! seconds of closures at worst; ordinary patterns use a tiny fraction of either.

use super::{Anchors, ByteClasses, Raw};
use crate::dfa::classes::ByteClassBuilder;
use crate::error::{Error, Result};
use crate::nfa::{Assertion, EmbeddedState, Nfa, Node, State, StateId, EMBEDDED_BASE};
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;

/// Marks an accepting state's key; never a valid NFA state id.
const MATCH_MARK: StateId = StateId::MAX;

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
    /// Key of each DFA state: sorted byte-reading NFA states, then [`MATCH_MARK`] if accepting.
    sets: Vec<Arc<[StateId]>>,
    ids: FxHashMap<Arc<[StateId]>, u32>,
    /// Entries held by `sets`, and NFA states visited by closures, against their budgets.
    set_entries: usize,
    work: usize,
    // Scratch space, kept to avoid allocating per state.
    seen: SparseSet,
    /// `seen` for embedded ids, whose range is too large to index densely.
    seen_embedded: FxHashSet<StateId>,
    stack: Vec<StateId>,
    key: Vec<StateId>,
    targets: Vec<Vec<StateId>>,
    memo: FxHashMap<Vec<StateId>, u32>,
    /// Which states can still lead to a match (see [`Liveness`]).
    live: Liveness,
    /// Per embedded automaton, the automaton's class of each of this construction's classes
    /// (which refine the automaton's, see [`Determinizer::new`]).
    class_maps: Vec<Vec<u8>>,
}

impl Determinizer {
    /// Starts the construction: creates the dead and start states.
    pub fn new(nfa: Nfa, anchors: Anchors, max_states: usize) -> Result<Self> {
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
        // An embedded automaton's classes need not be runs of bytes; splitting at every byte
        // where its class changes makes each run of ours lie inside one of its classes.
        for dfa in nfa.automata() {
            let map = dfa.classes().as_map();
            let mut start = 0u8;
            for b in 1..=255u8 {
                if map[b as usize] != map[b as usize - 1] {
                    builder.add_range(start, b - 1);
                    start = b;
                }
            }
            builder.add_range(start, 255);
        }
        let classes = builder.build();
        let class_maps = nfa
            .automata()
            .iter()
            .map(|dfa| {
                let theirs = dfa.classes();
                classes
                    .representatives()
                    .iter()
                    .map(|&b| theirs.get(b))
                    .collect()
            })
            .collect();
        let n = nfa.len();
        // Ids are u32, and the largest value marks accepting keys.
        let max_states = max_states.min(MATCH_MARK as usize);
        let mut d = Determinizer {
            targets: vec![Vec::new(); classes.num_classes()],
            classes,
            anchors,
            max_states,
            sets: Vec::new(),
            ids: FxHashMap::default(),
            set_entries: 0,
            work: 0,
            seen: SparseSet::new(n),
            seen_embedded: FxHashSet::default(),
            stack: Vec::new(),
            key: Vec::new(),
            memo: FxHashMap::default(),
            live: Liveness::of(&nfa, anchors == Anchors::WHOLE_TEXT),
            class_maps,
            nfa,
        };
        let dead: Arc<[StateId]> = Arc::from(Vec::new());
        d.ids.insert(Arc::clone(&dead), 0);
        d.sets.push(dead);
        // The start state is always 1, even when its key repeats the dead state's.
        let start = d.nfa.start();
        d.closure(&[start], true);
        d.charge()?;
        let key: Arc<[StateId]> = Arc::from(d.key.as_slice());
        d.ids.entry(Arc::clone(&key)).or_insert(1);
        d.sets.push(key);
        Ok(d)
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

    /// Fills `row` with the successor of `state` on every class, creating the states that are
    /// new. A state that does not exist gets a dead row.
    pub fn next_row(&mut self, state: u32, row: &mut Vec<u32>) -> Result<()> {
        let k = self.classes.num_classes();
        row.clear();
        row.resize(k, 0);
        let Some(set) = self.sets.get(state as usize).cloned() else {
            return Ok(());
        };
        for t in &mut self.targets {
            t.clear();
        }
        for &s in set.iter() {
            let ts: &[_] = match self.nfa.node(s) {
                Node::Stored(State::ByteRange(t)) => std::slice::from_ref(t),
                Node::Stored(State::Sparse(ts)) => ts,
                Node::Stored(_) => continue,
                Node::Embedded(e) => {
                    let map = &self.class_maps[e.at.automaton as usize];
                    for (c, &theirs) in map.iter().enumerate() {
                        self.targets[c].extend(e.next_class(theirs));
                    }
                    continue;
                }
            };
            for t in ts {
                let (lo, hi) = (self.classes.get(t.start), self.classes.get(t.end));
                for c in lo..=hi {
                    self.targets[c as usize].push(t.next);
                }
            }
        }
        self.memo.clear();
        let mut prev: Option<(usize, u32)> = None;
        for (c, slot) in row.iter_mut().enumerate() {
            let mut list = std::mem::take(&mut self.targets[c]);
            if list.is_empty() {
                self.targets[c] = list;
                continue;
            }
            list.sort_unstable();
            list.dedup();
            // Neighbouring classes usually agree, so compare with the last one before hashing.
            let id = match prev {
                Some((pc, id)) if self.targets[pc] == list => id,
                _ => match self.memo.get(&list) {
                    Some(&id) => id,
                    None => {
                        let id = self.add_state(&list)?;
                        self.memo.insert(list.clone(), id);
                        id
                    }
                },
            };
            *slot = id;
            prev = Some((c, id));
            self.targets[c] = list;
        }
        Ok(())
    }

    /// The id of the state reached when the NFA is in `kernel` after at least one byte.
    fn add_state(&mut self, kernel: &[StateId]) -> Result<u32> {
        self.closure(kernel, false);
        if let Some(&id) = self.ids.get(self.key.as_slice()) {
            return Ok(id);
        }
        if self.sets.len() >= self.max_states {
            return Err(Error::size_limit(
                "max_states",
                self.sets.len() + 1,
                self.max_states,
            ));
        }
        self.charge()?;
        let id = self.sets.len() as u32;
        let key: Arc<[StateId]> = Arc::from(self.key.as_slice());
        self.ids.insert(Arc::clone(&key), id);
        self.sets.push(key);
        Ok(id)
    }

    /// Counts the closure just computed, and the set about to be stored, against the budgets.
    fn charge(&mut self) -> Result<()> {
        let max_entries = self.max_states.saturating_mul(SET_ENTRIES_PER_STATE);
        self.set_entries = self.set_entries.saturating_add(self.key.len());
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
    fn closure(&mut self, kernel: &[StateId], at_start: bool) {
        let start_holds = at_start && self.anchors.text_start;
        self.clear_seen();
        self.key.clear();
        self.stack.clear();
        self.stack.extend(kernel.iter().rev());
        let mut matched = false;
        let mut end_sensitive = false;
        while let Some(s) = self.stack.pop() {
            if !self.visit(s) {
                continue;
            }
            let state = match self.nfa.node(s) {
                Node::Stored(state) => state,
                Node::Embedded(e) => {
                    if self.live.embedded(&e) {
                        self.key.push(s);
                    }
                    self.stack.extend(e.moves_without_reading());
                    continue;
                }
            };
            match state {
                State::ByteRange(_) | State::Sparse(_) => {
                    if self.live.stored[s as usize] {
                        self.key.push(s)
                    }
                }
                State::Match => matched = true,
                State::Fail => {}
                State::Epsilon(next) => self.stack.push(*next),
                State::Union(alts) => self.stack.extend(alts.iter().rev()),
                State::Look { assertion, next } => match assertion {
                    Assertion::Start if start_holds => self.stack.push(*next),
                    Assertion::NotStart if !start_holds => self.stack.push(*next),
                    Assertion::Start | Assertion::NotStart => {}
                    Assertion::End => end_sensitive = true,
                    Assertion::NotEnd => {
                        end_sensitive = true;
                        self.stack.push(*next);
                    }
                },
            }
        }
        // When the input does not end the text, its end is just another position where more
        // text follows: the transition closure already answers.
        let visited = self.seen.len() + self.seen_embedded.len();
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
    fn accepts_at_end(&mut self, kernel: &[StateId], start_holds: bool) -> bool {
        self.clear_seen();
        self.stack.clear();
        self.stack.extend(kernel.iter().rev());
        while let Some(s) = self.stack.pop() {
            if !self.visit(s) {
                continue;
            }
            self.work = self.work.saturating_add(1);
            let state = match self.nfa.node(s) {
                Node::Stored(state) => state,
                Node::Embedded(e) => {
                    self.stack.extend(e.moves_without_reading());
                    continue;
                }
            };
            match state {
                State::Match => return true,
                State::Epsilon(next) => self.stack.push(*next),
                State::Union(alts) => self.stack.extend(alts.iter().rev()),
                State::Look { assertion, next } => {
                    let holds = match assertion {
                        Assertion::Start => start_holds,
                        Assertion::NotStart => !start_holds,
                        Assertion::End => true,
                        Assertion::NotEnd => false,
                    };
                    if holds {
                        self.stack.push(*next);
                    }
                }
                State::ByteRange(_) | State::Sparse(_) | State::Fail => {}
            }
        }
        false
    }

    /// Marks `s` visited by the current closure; false if it was already.
    fn visit(&mut self, s: StateId) -> bool {
        if s < EMBEDDED_BASE {
            self.seen.insert(s)
        } else {
            self.seen_embedded.insert(s)
        }
    }

    fn clear_seen(&mut self) {
        self.seen.clear();
        self.seen_embedded.clear();
    }

    /// Closure steps taken so far, against `max_states * CLOSURE_WORK_PER_STATE`.
    pub fn closure_work(&self) -> usize {
        self.work
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

/// A set of small integers with O(1) insert, membership and clear (Briggs and Torczon).
#[derive(Clone, Debug)]
struct SparseSet {
    dense: Vec<StateId>,
    sparse: Vec<u32>,
}

impl SparseSet {
    fn new(capacity: usize) -> Self {
        SparseSet {
            dense: Vec::with_capacity(capacity),
            sparse: vec![0; capacity],
        }
    }

    /// Adds `x`; false if it was there already or is out of range (no state to visit).
    fn insert(&mut self, x: StateId) -> bool {
        let Some(&i) = self.sparse.get(x as usize) else {
            return false;
        };
        if (i as usize) < self.dense.len() && self.dense[i as usize] == x {
            return false;
        }
        self.sparse[x as usize] = self.dense.len() as u32;
        self.dense.push(x);
        true
    }

    fn clear(&mut self) {
        self.dense.clear();
    }

    fn len(&self) -> usize {
        self.dense.len()
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
#[derive(Clone, Debug)]
struct Liveness {
    /// Per stored state.
    stored: Vec<bool>,
    /// Per occurrence: whether its exit can still lead to a match.
    exits: Vec<bool>,
}

impl Liveness {
    /// The liveness of `nfa`'s states; everything is live unless `prune`.
    fn of(nfa: &Nfa, prune: bool) -> Self {
        if !prune {
            return Liveness {
                stored: vec![true; nfa.len()],
                exits: vec![true; nfa.embeddings().len()],
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
        }
    }

    /// Whether an embedded state is live.
    fn embedded(&self, e: &EmbeddedState<'_>) -> bool {
        self.exits[e.embedding] && e.reads()
    }
}

/// The `reading` and `at_end` facts of every stored state (see [`Liveness`]).
fn backward_facts(nfa: &Nfa) -> (Vec<bool>, Vec<bool>) {
    let n = nfa.len();
    let mut preds: Vec<Vec<StateId>> = vec![Vec::new(); n];
    // Stored predecessors of the embedded ids stored states lead to (occurrences' starts).
    let mut embedded_preds: FxHashMap<StateId, Vec<StateId>> = FxHashMap::default();
    for (q, state) in nfa.states().iter().enumerate() {
        let q = q as StateId;
        let mut add = |to: StateId| {
            if to < EMBEDDED_BASE {
                if let Some(p) = preds.get_mut(to as usize) {
                    p.push(q);
                }
            } else {
                embedded_preds.entry(to).or_default().push(q);
            }
        };
        match state {
            State::ByteRange(t) => add(t.next),
            State::Sparse(ts) => ts.iter().for_each(|t| add(t.next)),
            State::Epsilon(next) | State::Look { next, .. } => add(*next),
            State::Union(alts) => alts.iter().for_each(|&a| add(a)),
            State::Match | State::Fail => {}
        }
    }
    // Per exit, the entered embedded ids whose facts follow from it.
    let mut entries_by_exit: FxHashMap<StateId, Vec<StateId>> = FxHashMap::default();
    for &v in embedded_preds.keys() {
        if let Node::Embedded(e) = nfa.node(v) {
            entries_by_exit.entry(e.at.exit).or_default().push(v);
        }
    }
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
            &preds[x as usize]
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
                State::Match | State::Fail => (false, false),
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

    #[test]
    fn sparse_set() {
        let mut s = SparseSet::new(4);
        assert!(s.insert(3) && s.insert(0) && !s.insert(3) && !s.insert(4));
        s.clear();
        assert!(s.insert(3));
    }
}
