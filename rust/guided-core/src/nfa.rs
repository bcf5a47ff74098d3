//! Thompson construction: from a [`Hir`] to an NFA over byte ranges.
//!
//! The NFA is the middle of the pipeline. It is cheap to build (linear in the HIR, with counted
//! repetitions expanded) and it is the input subset construction wants: a graph whose edges read
//! one byte from a range, or read nothing (epsilon edges, unions, and zero-width assertions).
//!
//! Character classes are where the size goes. `\p{L}` is about 650 code-point ranges; split into
//! UTF-8 byte-range sequences ([`crate::utf8`]) that is over a thousand sequences, and a naive
//! alternation of them would cost thousands of states per occurrence. Because the sequences come
//! out sorted, they can instead be merged into a minimal acyclic automaton on the fly (Daciuk et
//! al.'s incremental construction, as regex-automata's `Utf8Compiler` does): common prefixes are
//! shared as they are added, and common suffixes are shared by keeping a register of the states
//! already frozen and reusing any with identical transitions. `\p{L}` comes out in a few hundred
//! states and `.` in about a dozen.
//!
//! A short counted repetition is expanded into copies. Every state goes through one function that
//! checks [`NfaConfig::max_states`] before it allocates, and a repetition measures its first copy
//! and refuses up front when the rest would not fit, so the failure is immediate instead of a
//! million allocations later. A long one (`[^"]{0,8192}`, a JSON Schema `maxLength`) builds its
//! operand's automaton once and embeds it as a repeated block (below), so `(a{1000}){1000}` costs
//! two small automata here; whether its million-state DFA fits is the subset construction's
//! question.
//!
//! Anchors are zero-width assertions on the whole text: `Start` holds before the first byte,
//! `End` after the last, wherever they stand in the pattern, so `a^b` matches nothing and `^a$|^b$`
//! is the same as `a|b`. The negated forms `NotStart` and `NotEnd` never come from a pattern; they
//! guard the fragments built for intersection and complement (below).
//!
//! Intersection and complement have no Thompson construction. Each operand is compiled to its
//! own minimized DFA, the operands are combined by a product construction
//! ([`crate::dfa::product`]), and the result is embedded back here as an ordinary fragment, one NFA
//! state per DFA state. An anchor inside an operand still means the start or end of the whole
//! text, which depends on where the fragment stands: so when an operand contains anchors, the
//! product is built once per case (fragment at the text's start or not, at its end or not) and
//! each case is entered behind the matching assertion. The cost is up to four products, paid only
//! by patterns that need it; the DFA state limit bounds each of them.
//!
//! Generated patterns repeat themselves: the JSON Schema compiler puts every large value language
//! behind a [`Hir::Shared`] node and copies that node wherever the value may stand, so one "any
//! JSON value" language can occur thousands of times in one schema. A shared node is built like a
//! one-operand intersection: determinized and minimized on its own, then embedded. That makes it a
//! minimization barrier too, so the enclosing subset construction sees copies of a minimal
//! automaton rather than of an expression tree. The automata built for intersections, complements
//! and shared nodes are memoized for the duration of one construction, nested constructions
//! included, keyed by the expression (a shared node by its identity) and its anchoring case: each
//! distinct operand is determinized and minimized once, and later occurrences only pay for being
//! embedded.
//!
//! Embedding does not copy. An embedded automaton is a block of ids above [`EMBEDDED_BASE`], one
//! per DFA state: the id `base + s` names state `s` of that occurrence, reads a byte by looking
//! it up in the DFA's table and, when `s` accepts, moves on without reading to the occurrence's
//! exit, a stored state like any other. So an occurrence costs one [`Embedding`] record and one
//! stored state however large its automaton, which is held once, by reference, in
//! [`Nfa::automata`]. (Copying one or two NFA states per DFA state per occurrence, as this module
//! first did, ran a schema that lets a few-thousand-state "any JSON value" stand in a thousand
//! places out of NFA states long before its DFA was large.) Whoever walks the NFA asks
//! [`Nfa::node`] what an id names.
//!
//! A lazy subset construction (the token index) needs none of this up front, and pays dearly for
//! it: determinizing and minimizing every shared part of a 40-property schema is most of the time
//! to its first mask, though generation only ever visits a sliver of each. So [`Nfa::for_lazy`]
//! compiles a shared node as a rule instead (below): its body once, called wherever it stands,
//! and the construction builds only the configurations the input reaches. An unanchored
//! intersection or complement becomes a [`LazyProduct`]: each operand is an NFA of its own, run by
//! its own lazy subset construction, and the product pairs their states as the input reaches
//! them, deciding by a short search which pairs can still lead to a match. A string of at most a
//! thousand characters that must be an email address was a product of a few hundred thousand
//! states built before the first mask; lazily it is the few dozen the text visits. The product is
//! embedded like a built automaton, with a block of ids as large as it may ever grow.
//!
//! Sharing is an economy, not a meaning: a shared expression whose automaton is past the limits
//! (a string of up to 30,000 characters, say) is compiled in place instead, where a lazy subset
//! construction only ever builds the part the input visits. Each such refusal costs a bounded but
//! whole subset construction, so one construction compiles at most two in place and gives up at
//! the third. Eager intersections and complements have no such way out: their automata are refused.
//!
//! Automata live as long as one construction, except those of pinned shared nodes
//! ([`Hir::pinned`]): the schema compiler pins the languages it reuses across compilations (free
//! values), and their automata are kept for the process, within each construction's state limit.
//!
//! Recursion has no Thompson construction either, but it has the next best thing: a call. A
//! [`Hir::Grammar`] holds rules that name one another through [`Hir::Call`]; each rule's body is
//! compiled once, as a fragment that ends in a [`State::Return`], and each call is one
//! [`State::Call`] naming the rule and the state to come back to. The stack of return addresses
//! is not the NFA's business: the subset construction carries it ([`crate::dfa::determinize`]).
//! A shared node whose contents call a rule is not regular, so it cannot be determinized on its
//! own; it becomes a rule as well, called rather than copied, which keeps the economy sharing was
//! for. Intersections and complements need automata of their operands, so one whose operand calls
//! a rule is refused with [`Error::Invalid`]; the schema compiler then unrolls the recursion.

use crate::dfa::lazy_product::{FailureSlot, LazyProduct, Operand};
use crate::dfa::{product, Anchors, ByteClasses, Dfa, DfaConfig};
use crate::error::{Error, Result};
use crate::regex::{ClassSet, Grammar, Hir, Look, Shared};
use crate::utf8::{utf8_sequences, Utf8Range};
use rustc_hash::{FxHashMap, FxHashSet};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, LazyLock, Mutex};

/// The automata of one construction, nested constructions included.
pub(crate) type DfaMemo = Rc<RefCell<Automata>>;

/// The automata already built (or refused, with the error) for intersections, complements,
/// shared expressions and repeated operands.
#[derive(Debug, Default)]
pub(crate) struct Automata {
    /// Keyed by anchoring case, then by expression (so that a lookup borrows the expression).
    built: FxHashMap<Anchors, FxHashMap<Hir, Result<Arc<Dfa>>>>,
    /// Shared expressions whose automaton was refused by a size limit.
    refused_shared: usize,
    /// Lazy products of unanchored intersections and complements, by expression.
    lazy: FxHashMap<Hir, Arc<LazyProduct>>,
    /// Where the lazy products record a limit they reach while the input is read.
    failure: FailureSlot,
}

/// Shared expressions past the limits that one construction compiles in place before it gives
/// up: each refusal costs a whole bounded subset construction, and an expression with many such
/// parts is past the limits in place too.
const MAX_REFUSED_SHARED: usize = 2;

/// Automata of pinned shared nodes ([`Hir::pinned`]), by anchoring case and node, for every
/// construction in the process: a pinned node is one the schema compiler reuses across
/// compilations (the free values), and its automaton is the same each time.
static PINNED_AUTOMATA: LazyLock<Mutex<PinnedAutomata>> = LazyLock::new(Default::default);

/// Automata by anchoring case and pinned node id.
type PinnedAutomata = FxHashMap<(Anchors, u64), Arc<Dfa>>;

/// Pinned automata kept before the cache starts over.
const MAX_PINNED_AUTOMATA: usize = 256;

/// The error for a recursive rule where an automaton must be built (an operand of an
/// intersection or complement): recursion has no finite automaton.
fn recursion_in_automaton() -> Error {
    Error::Invalid("a recursive rule inside an intersection or complement".into())
}

fn rule_outside_grammar(index: u32) -> Error {
    Error::Invalid(format!("call of rule {index} outside its grammar"))
}

/// Index of a state in an [`Nfa`].
pub type StateId = u32;

/// A placeholder successor, replaced when the fragment is connected.
const PENDING: StateId = StateId::MAX;

/// Ids from here up name states of embedded automata; ids below it name stored states.
pub const EMBEDDED_BASE: StateId = 1 << 31;

/// Counted repetitions with at least this many copies embed their operand's automaton once,
/// repeated ([`Embedding`]), instead of copying its states.
const COUNTED_MIN_COPIES: usize = 16;

/// Limits for the NFA construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NfaConfig {
    /// Most states the NFA may have; crossing it is a `SizeLimit` error named `nfa_states`.
    pub max_states: usize,
}

impl Default for NfaConfig {
    fn default() -> Self {
        NfaConfig {
            max_states: 1_000_000,
        }
    }
}

/// One edge that reads a byte in `start..=end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Transition {
    /// Smallest byte read.
    pub start: u8,
    /// Largest byte read.
    pub end: u8,
    /// Where the edge leads.
    pub next: StateId,
}

/// A zero-width assertion about the position in the whole text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Assertion {
    /// Nothing has been read yet.
    Start,
    /// Nothing more will be read.
    End,
    /// At least one byte has been read.
    NotStart,
    /// At least one more byte will be read.
    NotEnd,
}

/// One NFA state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Reads one byte in a range.
    ByteRange(Transition),
    /// Reads one byte in one of several disjoint ranges, sorted by byte.
    Sparse(Box<[Transition]>),
    /// Moves on without reading.
    Epsilon(StateId),
    /// Moves on to any of these without reading.
    Union(Vec<StateId>),
    /// Moves on without reading when the assertion holds.
    Look {
        /// The condition.
        assertion: Assertion,
        /// Where to go when it holds.
        next: StateId,
    },
    /// Enters rule `rule` ([`Nfa::rules`]) with `next` pushed as the return address.
    Call {
        /// Index into [`Nfa::rules`].
        rule: u32,
        /// Where the rule returns to.
        next: StateId,
    },
    /// The end of a rule's body: moves on, without reading, to the return address on top of the
    /// stack, and pops it.
    Return,
    /// The whole pattern has matched.
    Match,
    /// No way on.
    Fail,
}

/// An automaton embedded in an NFA: a minimal DFA built whole, or the product of an
/// intersection or complement built as the input reaches it ([`LazyProduct`]).
#[derive(Clone, Debug)]
pub enum EmbeddedAutomaton {
    /// A minimal DFA: every state but the dead one can reach an accepting state.
    Built(Arc<Dfa>),
    /// A lazy product, whose successors are only those that can still reach acceptance.
    Lazy(Arc<LazyProduct>),
}

impl EmbeddedAutomaton {
    /// The byte classes its states read.
    pub fn classes(&self) -> &ByteClasses {
        match self {
            EmbeddedAutomaton::Built(d) => d.classes(),
            EmbeddedAutomaton::Lazy(p) => p.classes(),
        }
    }

    /// The start state.
    pub fn start(&self) -> u32 {
        match self {
            EmbeddedAutomaton::Built(d) => d.start(),
            EmbeddedAutomaton::Lazy(p) => p.start(),
        }
    }

    /// How many ids an occurrence reserves: the states there are, or can ever be.
    pub fn stride(&self) -> usize {
        match self {
            EmbeddedAutomaton::Built(d) => d.num_states(),
            EmbeddedAutomaton::Lazy(p) => p.capacity(),
        }
    }

    /// The successor of `state` on the automaton's class `class`, if it can still lead to an
    /// accepting state.
    pub fn next_class(&self, state: u32, class: u8) -> Option<u32> {
        match self {
            EmbeddedAutomaton::Built(d) => {
                Some(d.next_class(state, class)).filter(|&to| to != d.dead())
            }
            EmbeddedAutomaton::Lazy(p) => {
                Some(p.next_class(state, class)).filter(|&to| to != p.dead())
            }
        }
    }

    /// Whether the automaton accepts in `state`.
    pub fn is_accepting(&self, state: u32) -> bool {
        match self {
            EmbeddedAutomaton::Built(d) => d.is_accepting(state),
            EmbeddedAutomaton::Lazy(p) => p.is_accepting(state),
        }
    }

    /// Whether some byte leads from `state` to a state that can still reach acceptance.
    pub fn reads(&self, state: u32) -> bool {
        match self {
            // Built automata are minimal: whatever a state reads can still lead to acceptance.
            EmbeddedAutomaton::Built(d) => state != d.dead() && !d.is_final(state),
            EmbeddedAutomaton::Lazy(p) => p.reads(state),
        }
    }

    /// Heap bytes held, approximately.
    pub fn memory_bytes(&self) -> usize {
        match self {
            EmbeddedAutomaton::Built(d) => d.memory_bytes(),
            EmbeddedAutomaton::Lazy(p) => p.memory_bytes(),
        }
    }

    /// Identity of the automaton held, so that an occurrence met again shares its entry.
    fn address(&self) -> *const () {
        match self {
            EmbeddedAutomaton::Built(d) => Arc::as_ptr(d).cast(),
            EmbeddedAutomaton::Lazy(p) => Arc::as_ptr(p).cast(),
        }
    }
}

/// One occurrence of an embedded automaton, possibly repeated: `copies` copies of its `stride`
/// states, copy `i`'s state `s` named by the id `base + i * stride + s`.
///
/// Copy `i` is entered at its start state once `i` copies have matched. From an accepting state
/// of copy `i` the occurrence moves on without reading to the start of copy `i + 1` (if there is
/// one; the last copy restarts itself when `looping`) and, once at least `min` copies have matched
/// (`i + 1 >= min`), to `exit`. So one copy with `min` 1 is the automaton itself, and `copies`
/// copies with `min` `m` are the counted repetition `{m,copies}` (`{m,}` when looping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Embedding {
    /// Index of the automaton in [`Nfa::automata`].
    pub automaton: u32,
    /// The id of copy 0's state 0.
    pub base: StateId,
    /// The automaton's number of states.
    pub stride: u32,
    /// Copies of the automaton, at least one.
    pub copies: u32,
    /// Copies that must match before the exit is open.
    pub min: u32,
    /// Whether the last copy may match again and again.
    pub looping: bool,
    /// The stored state the occurrence leaves through.
    pub exit: StateId,
}

impl Embedding {
    /// The id of state `state` of copy `copy`.
    pub fn id(&self, copy: u32, state: u32) -> StateId {
        self.base + copy * self.stride + state
    }

    /// Where an accepting state of copy `copy` moves on to without reading.
    pub fn after_match(&self, copy: u32, start: u32) -> impl Iterator<Item = StateId> {
        let next = if copy + 1 < self.copies || self.looping {
            Some(self.id((copy + 1).min(self.copies - 1), start))
        } else {
            None
        };
        let exit = (copy + 1 >= self.min).then_some(self.exit);
        next.into_iter().chain(exit)
    }
}

/// What an id names: a stored state, or one state of an embedded automaton.
#[derive(Clone, Copy, Debug)]
pub enum Node<'a> {
    /// A state held in [`Nfa::states`].
    Stored(&'a State),
    /// A state of an embedded automaton.
    Embedded(EmbeddedState<'a>),
}

/// State `state` of copy `copy` of an embedded automaton. It reads byte `b` to
/// `at.id(copy, automaton.next_class(state, class of b))` if there is such a successor, and when
/// the automaton accepts in `state` it also moves on without reading to
/// [`Embedding::after_match`].
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedState<'a> {
    /// The occurrence, as an index into [`Nfa::embeddings`].
    pub embedding: usize,
    /// Where it stands and where it leaves.
    pub at: &'a Embedding,
    /// The automaton.
    pub automaton: &'a EmbeddedAutomaton,
    /// Which copy.
    pub copy: u32,
    /// The automaton's state.
    pub state: u32,
}

impl EmbeddedState<'_> {
    /// The id reached by reading a byte of the automaton's class `class`, if any.
    pub fn next_class(&self, class: u8) -> Option<StateId> {
        self.automaton
            .next_class(self.state, class)
            .map(|to| self.at.id(self.copy, to))
    }

    /// The id reached by reading `byte`, if any.
    pub fn next_byte(&self, byte: u8) -> Option<StateId> {
        self.next_class(self.automaton.classes().get(byte))
    }

    /// Whether this state reads some byte that can still lead to an accepting state.
    pub fn reads(&self) -> bool {
        self.automaton.reads(self.state)
    }

    /// Whether the automaton accepts here (so the moves below are open).
    pub fn is_accepting(&self) -> bool {
        self.automaton.is_accepting(self.state)
    }

    /// Where this state moves on to without reading.
    pub fn moves_without_reading(&self) -> impl Iterator<Item = StateId> {
        let open = self.is_accepting();
        self.at
            .after_match(self.copy, self.automaton.start())
            .filter(move |_| open)
    }
}

/// A Thompson NFA over bytes. State [`Nfa::start`] is where matching begins; a match is any path to
/// a [`State::Match`] whose assertions hold.
#[derive(Clone, Debug)]
pub struct Nfa {
    states: Vec<State>,
    start: StateId,
    /// The start state of each rule's body.
    rules: Vec<StateId>,
    /// Per rule, whether it is a grammar's rule (whose calls count towards the call depth) rather
    /// than a shared expression called to keep it one copy.
    counted: Vec<bool>,
    automata: Vec<EmbeddedAutomaton>,
    /// Sorted by `base`, and the blocks do not overlap.
    embeddings: Vec<Embedding>,
    /// Where lazy products record a limit reached while the input is read.
    failure: FailureSlot,
}

impl Nfa {
    /// Compiles `hir`. Intersections and complements inside it are built as DFAs under
    /// `dfa_config`'s limits; everything else counts against `config`.
    pub fn new(hir: &Hir, config: &NfaConfig, dfa_config: &DfaConfig) -> Result<Nfa> {
        Self::with_memo(hir, config, dfa_config, &DfaMemo::default())
    }

    /// [`Nfa::new`] for a lazy subset construction: a shared expression becomes a rule, compiled
    /// once and called wherever it stands, instead of an automaton determinized and minimized up
    /// front. A lazy construction then builds only the part of each shared language that the
    /// input visits, so the cost of compiling a large schema is that of its NFA, linear in the
    /// expression. Shared expressions with anchors, and pinned ones (whose automata are kept for
    /// the process), are embedded as automata as before. Unanchored intersections and
    /// complements become lazy products ([`LazyProduct`]); anchored ones are built whole.
    pub fn for_lazy(hir: &Hir, config: &NfaConfig, dfa_config: &DfaConfig) -> Result<Nfa> {
        Self::build(hir, config, dfa_config, &DfaMemo::default(), true)
    }

    /// [`Nfa::new`], sharing the automata of intersections and complements with the enclosing
    /// construction.
    pub(crate) fn with_memo(
        hir: &Hir,
        config: &NfaConfig,
        dfa_config: &DfaConfig,
        memo: &DfaMemo,
    ) -> Result<Nfa> {
        Self::build(hir, config, dfa_config, memo, false)
    }

    fn build(
        hir: &Hir,
        config: &NfaConfig,
        dfa_config: &DfaConfig,
        memo: &DfaMemo,
        shared_as_rules: bool,
    ) -> Result<Nfa> {
        let mut b = Builder {
            states: Vec::new(),
            // Stored ids stay below the embedded ones.
            max_states: config.max_states.min(EMBEDDED_BASE as usize),
            config: *config,
            dfa_config: *dfa_config,
            memo: memo.clone(),
            automata: Vec::new(),
            automaton_ids: FxHashMap::default(),
            embeddings: Vec::new(),
            next_base: EMBEDDED_BASE,
            grammar: None,
            rules: Vec::new(),
            rule_ids: FxHashMap::default(),
            pending_rules: Vec::new(),
            call_free: FxHashSet::default(),
            calling: FxHashSet::default(),
            shared_as_rules,
        };
        let frag = b.compile(hir)?;
        let m = b.add(State::Match)?;
        b.patch(frag.end, m);
        // Rule bodies last, one at a time, so that deep recursion costs no native stack.
        while let Some((index, body)) = b.pending_rules.pop() {
            let f = match body {
                RuleBody::Shared(s) => b.compile(s.hir())?,
                RuleBody::Grammar(i) => {
                    // The grammar is held by reference; its rules are compiled where they lie.
                    let g = b.grammar.clone().ok_or_else(|| rule_outside_grammar(i))?;
                    let rule = g
                        .rules()
                        .get(i as usize)
                        .ok_or_else(|| rule_outside_grammar(i))?;
                    b.compile(rule)?
                }
            };
            let ret = b.add(State::Return)?;
            b.patch(f.end, ret);
            b.rules[index as usize] = f.start;
        }
        let failure = b.memo.borrow().failure.clone();
        Ok(Nfa {
            states: b.states,
            start: frag.start,
            counted: b
                .rule_ids
                .iter()
                .fold(vec![false; b.rules.len()], |mut v, (src, &r)| {
                    v[r as usize] = matches!(src, RuleSource::Grammar(_));
                    v
                }),
            rules: b.rules,
            automata: b.automata,
            embeddings: b.embeddings,
            failure,
        })
    }

    /// Where matching begins.
    pub fn start(&self) -> StateId {
        self.start
    }

    /// All states, indexed by [`StateId`].
    pub fn states(&self) -> &[State] {
        &self.states
    }

    /// The stored state `id`; [`State::Fail`] when there is none (an embedded id included).
    pub fn state(&self, id: StateId) -> &State {
        self.states.get(id as usize).unwrap_or(&State::Fail)
    }

    /// What `id` names; a stored [`State::Fail`] when nothing.
    ///
    /// Closures and rows ask this of every state they pass, and almost every id is a stored
    /// state's: that case is inlined at the caller, the search among embeddings is not.
    #[inline]
    pub fn node(&self, id: StateId) -> Node<'_> {
        if id < EMBEDDED_BASE {
            return Node::Stored(self.state(id));
        }
        self.embedded_node(id)
    }

    /// What an id past the stored states names.
    #[inline(never)]
    fn embedded_node(&self, id: StateId) -> Node<'_> {
        let i = self.embeddings.partition_point(|e| e.base <= id);
        let Some(at) = i.checked_sub(1).map(|i| &self.embeddings[i]) else {
            return Node::Stored(&State::Fail);
        };
        let local = id - at.base;
        let copy = local / at.stride;
        if copy >= at.copies {
            return Node::Stored(&State::Fail);
        }
        Node::Embedded(EmbeddedState {
            embedding: i - 1,
            at,
            automaton: &self.automata[at.automaton as usize],
            copy,
            state: local % at.stride,
        })
    }

    /// The start state of each rule's body, by the index [`State::Call`] names.
    pub fn rules(&self) -> &[StateId] {
        &self.rules
    }

    /// Whether a call of `rule` counts towards the call depth: a grammar's rules do; a shared
    /// expression that calls them is a rule only so that it is held once, and since shared
    /// expressions cannot contain themselves, calls of those nest only as deep as the
    /// expression does.
    pub fn is_counted(&self, rule: u32) -> bool {
        self.counted.get(rule as usize).copied().unwrap_or(true)
    }

    /// The embedded automata, each held once however often it occurs.
    pub fn automata(&self) -> &[EmbeddedAutomaton] {
        &self.automata
    }

    /// The limit a lazy product of this construction reached while the input was read, if any:
    /// once there is one, what the NFA's automata answered since may be wrong, and whoever
    /// walks it must fail instead.
    pub fn failure(&self) -> Option<Error> {
        self.failure.get()
    }

    /// The occurrences of embedded automata, by increasing `base`.
    pub fn embeddings(&self) -> &[Embedding] {
        &self.embeddings
    }

    /// Number of stored states.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether the NFA has no stored states (never true for a compiled one).
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Heap bytes the states hold, approximately.
    pub fn memory_bytes(&self) -> usize {
        let extra: usize = self
            .states
            .iter()
            .map(|s| match s {
                State::Sparse(t) => t.len() * std::mem::size_of::<Transition>(),
                State::Union(u) => u.capacity() * std::mem::size_of::<StateId>(),
                _ => 0,
            })
            .sum();
        let automata: usize = self.automata.iter().map(|d| d.memory_bytes()).sum();
        self.states.capacity() * std::mem::size_of::<State>()
            + extra
            + automata
            + self.embeddings.capacity() * std::mem::size_of::<Embedding>()
    }
}

/// A partly built piece of the NFA: enter at `start`, leave through `end`, whose successor is not
/// connected yet.
#[derive(Clone, Copy, Debug)]
struct Frag {
    start: StateId,
    end: StateId,
}

struct Builder {
    states: Vec<State>,
    max_states: usize,
    config: NfaConfig,
    dfa_config: DfaConfig,
    memo: DfaMemo,
    automata: Vec<EmbeddedAutomaton>,
    /// Index in `automata` by address, so an automaton met again is held once.
    automaton_ids: FxHashMap<*const (), u32>,
    embeddings: Vec<Embedding>,
    /// The id the next embedding starts at.
    next_base: StateId,
    /// The rules [`Hir::Call`] nodes name, inside a [`Hir::Grammar`].
    grammar: Option<Grammar>,
    /// The start of each rule's body, [`PENDING`] until it is compiled.
    rules: Vec<StateId>,
    /// Rule index by what it stands for.
    rule_ids: FxHashMap<RuleSource, u32>,
    /// Rules met but not yet compiled, with their bodies.
    pending_rules: Vec<(u32, RuleBody)>,
    /// Shared nodes whose contents call no rule (a walk of the contents went through them all).
    call_free: FxHashSet<u64>,
    /// Shared nodes whose contents call a rule.
    calling: FxHashSet<u64>,
    /// Whether shared nodes become rules rather than automata ([`Nfa::for_lazy`]).
    shared_as_rules: bool,
}

/// Where a rule's body is, to be compiled later: named, not copied.
#[derive(Clone, Debug)]
enum RuleBody {
    /// Rule `i` of the grammar being compiled.
    Grammar(u32),
    /// The contents of a shared node.
    Shared(Shared),
}

/// What an NFA rule is the body of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RuleSource {
    /// A rule of the grammar.
    Grammar(u32),
    /// A shared expression that calls rules: it cannot be determinized on its own, so it is
    /// called like a rule, which keeps it one copy however often it occurs.
    Shared(u64),
}

impl Builder {
    /// The single allocation point, so the limit is checked before any state exists.
    fn add(&mut self, state: State) -> Result<StateId> {
        self.reserve(1)?;
        let id = self.states.len() as StateId;
        self.states.push(state);
        Ok(id)
    }

    /// Fails unless `n` more states fit.
    fn reserve(&self, n: usize) -> Result<()> {
        let total = self.states.len().saturating_add(n);
        if total > self.max_states {
            return Err(Error::size_limit("nfa_states", total, self.max_states));
        }
        Ok(())
    }

    /// Connects the open end of `from` to `to`.
    fn patch(&mut self, from: StateId, to: StateId) {
        match &mut self.states[from as usize] {
            State::ByteRange(t) => t.next = to,
            State::Epsilon(next) | State::Look { next, .. } | State::Call { next, .. } => {
                *next = to
            }
            State::Union(alts) => alts.push(to),
            // Fragment ends are always one of the above: every constructor below ends its
            // fragment on an epsilon, union, look, call or single byte range.
            State::Sparse(_) | State::Return | State::Match | State::Fail => {}
        }
    }

    fn empty(&mut self) -> Result<Frag> {
        let e = self.add(State::Epsilon(PENDING))?;
        Ok(Frag { start: e, end: e })
    }

    fn nothing(&mut self) -> Result<Frag> {
        let start = self.add(State::Fail)?;
        let end = self.add(State::Epsilon(PENDING))?;
        Ok(Frag { start, end })
    }

    fn compile(&mut self, hir: &Hir) -> Result<Frag> {
        hir.recurse(|| self.compile_node(hir))
    }

    fn compile_node(&mut self, hir: &Hir) -> Result<Frag> {
        match hir {
            Hir::Empty => self.empty(),
            Hir::Literal(bytes) => self.literal(bytes),
            Hir::Class(set) => self.class(set),
            Hir::Look(look) => {
                let assertion = match look {
                    Look::Start => Assertion::Start,
                    Look::End => Assertion::End,
                };
                let s = self.add(State::Look {
                    assertion,
                    next: PENDING,
                })?;
                Ok(Frag { start: s, end: s })
            }
            Hir::Concat(children) => {
                let mut acc: Option<Frag> = None;
                for child in children {
                    let f = self.compile(child)?;
                    acc = Some(self.chain(acc, f));
                }
                match acc {
                    Some(f) => Ok(f),
                    None => self.empty(),
                }
            }
            Hir::Alternation(children) => {
                if children.is_empty() {
                    return self.nothing();
                }
                let union = self.add(State::Union(Vec::with_capacity(children.len())))?;
                let join = self.add(State::Epsilon(PENDING))?;
                for child in children {
                    let f = self.compile(child)?;
                    self.patch(union, f.start);
                    self.patch(f.end, join);
                }
                Ok(Frag {
                    start: union,
                    end: join,
                })
            }
            Hir::Repeat { sub, min, max } => self.repeat(sub, *min, *max),
            Hir::Shared(s) if self.shared_rule(s) || self.shared_calls(s) => {
                self.call(RuleSource::Shared(s.id()), || RuleBody::Shared(s.clone()))
            }
            Hir::Intersection(_) | Hir::Complement(_) if self.grammar.is_some() => {
                if self.calls_within(hir) {
                    return Err(recursion_in_automaton());
                }
                self.boolean(hir)
            }
            Hir::Intersection(_) | Hir::Complement(_) | Hir::Shared(_) => self.boolean(hir),
            Hir::Automaton(a) => self.embed_from(a.dfa(), a.state()),
            Hir::Call(c) => {
                let known = self
                    .grammar
                    .as_ref()
                    .is_some_and(|g| (c.index as usize) < g.rules().len());
                if !known {
                    return Err(rule_outside_grammar(c.index));
                }
                self.call(RuleSource::Grammar(c.index), || RuleBody::Grammar(c.index))
            }
            Hir::Grammar(g) => {
                if self.grammar.is_some() {
                    return Err(Error::Invalid("a grammar inside a grammar".into()));
                }
                self.grammar = Some(g.clone());
                self.compile(g.start())
            }
        }
    }

    /// A call of the rule `source` stands for, whose body (compiled once, later) is `body`.
    fn call(&mut self, source: RuleSource, body: impl FnOnce() -> RuleBody) -> Result<Frag> {
        let rule = match self.rule_ids.get(&source) {
            Some(&r) => r,
            None => {
                let r = self.rules.len() as u32;
                self.rules.push(PENDING);
                self.rule_ids.insert(source, r);
                self.pending_rules.push((r, body()));
                r
            }
        };
        let s = self.add(State::Call {
            rule,
            next: PENDING,
        })?;
        Ok(Frag { start: s, end: s })
    }

    /// Whether a shared node's contents call a rule (only ever inside a grammar).
    fn shared_calls(&mut self, s: &Shared) -> bool {
        if self.grammar.is_none() {
            return false;
        }
        let calls = self.calls_within(&Hir::Shared(s.clone()));
        if calls {
            self.calling.insert(s.id());
        }
        calls
    }

    /// Whether `h` calls a rule. The walk passes over shared nodes known to call none (or stops
    /// at one known to call), and a walk that meets no call records every shared node it went
    /// through as free of calls, so that a grammar's nested shared languages are each walked once
    /// rather than once per enclosing node.
    fn calls_within(&mut self, h: &Hir) -> bool {
        let mut entered = FxHashSet::default();
        let mut stack = vec![h];
        while let Some(h) = stack.pop() {
            match h {
                Hir::Call(_) | Hir::Grammar(_) => return true,
                Hir::Concat(v) | Hir::Alternation(v) | Hir::Intersection(v) => stack.extend(v),
                Hir::Repeat { sub, .. } | Hir::Complement(sub) => stack.push(sub),
                Hir::Shared(s) => {
                    if self.calling.contains(&s.id()) {
                        return true;
                    }
                    if !self.call_free.contains(&s.id()) && entered.insert(s.id()) {
                        stack.push(s.hir());
                    }
                }
                Hir::Empty | Hir::Literal(_) | Hir::Class(_) | Hir::Look(_) | Hir::Automaton(_) => {
                }
            }
        }
        self.call_free.extend(entered);
        false
    }

    /// Whether a shared node becomes a rule for a lazy construction: anchors must stay where
    /// the node stands, and a pinned node's automaton is built once per process anyway.
    fn shared_rule(&self, s: &Shared) -> bool {
        self.shared_as_rules && !s.is_pinned() && s.anchors() == (false, false)
    }

    /// Whether `h` holds a shared node this construction calls as a rule ([`Builder::shared_rule`])
    /// outside the operands of intersections and complements (which are constructions of their
    /// own whatever they hold). A long counted repetition of such an expression is better expanded in copies that
    /// call the rule than built as one automaton: that automaton would determinize the very
    /// shared languages a lazy construction exists to leave alone (arrays of 256 objects with
    /// strings of 32,767 characters took seconds to be refused by the state limit).
    fn calls_shared_rule(&self, h: &Hir) -> bool {
        if !self.shared_as_rules {
            return false;
        }
        let mut stack = vec![h];
        while let Some(h) = stack.pop() {
            match h {
                Hir::Shared(s) if self.shared_rule(s) => return true,
                Hir::Concat(v) | Hir::Alternation(v) => stack.extend(v),
                Hir::Repeat { sub, .. } => stack.push(sub),
                _ => {}
            }
        }
        false
    }

    fn literal(&mut self, bytes: &[u8]) -> Result<Frag> {
        self.reserve(bytes.len().max(1))?;
        let mut acc: Option<Frag> = None;
        for &b in bytes {
            let s = self.add(State::ByteRange(Transition {
                start: b,
                end: b,
                next: PENDING,
            }))?;
            acc = Some(self.chain(acc, Frag { start: s, end: s }));
        }
        match acc {
            Some(f) => Ok(f),
            None => self.empty(),
        }
    }

    fn class(&mut self, set: &ClassSet) -> Result<Frag> {
        let ranges = set.ranges();
        if ranges.is_empty() {
            return self.nothing();
        }
        if ranges.len() == 1 && ranges[0].1 < 0x80 {
            let s = self.add(State::ByteRange(Transition {
                start: ranges[0].0 as u8,
                end: ranges[0].1 as u8,
                next: PENDING,
            }))?;
            return Ok(Frag { start: s, end: s });
        }
        let end = self.add(State::Epsilon(PENDING))?;
        if ranges.last().is_some_and(|&(_, hi)| hi < 0x80) {
            // One byte per code point: the trie below would build this very state, after
            // splitting each range into the one sequence it is.
            let transitions = ranges
                .iter()
                .map(|&(lo, hi)| Transition {
                    start: lo as u8,
                    end: hi as u8,
                    next: end,
                })
                .collect();
            let start = self.add(State::Sparse(transitions))?;
            return Ok(Frag { start, end });
        }
        let mut trie = Utf8Trie::new(end);
        for &(lo, hi) in ranges {
            for seq in utf8_sequences(lo, hi) {
                trie.add(self, &seq)?;
            }
        }
        match trie.finish(self)? {
            Some(start) => Ok(Frag { start, end }),
            // Only surrogates: no byte string encodes them.
            None => {
                let start = self.add(State::Fail)?;
                Ok(Frag { start, end })
            }
        }
    }

    /// Appends `f` to the fragment built so far.
    fn chain(&mut self, acc: Option<Frag>, f: Frag) -> Frag {
        match acc {
            None => f,
            Some(a) => {
                self.patch(a.end, f.start);
                Frag {
                    start: a.start,
                    end: f.end,
                }
            }
        }
    }

    fn repeat(&mut self, sub: &Hir, min: u32, max: Option<u32>) -> Result<Frag> {
        // Copies to build: `x{n,}` is n-1 plain copies and one looping copy, `x*` one looping copy.
        let copies = match max {
            // Fewer copies allowed than required: nothing matches (the constructor folds this
            // away, but a HIR built by hand may carry it).
            Some(max) if max < min => return self.nothing(),
            Some(max) => max as usize,
            None => (min as usize).max(1),
        };
        if copies == 0 {
            return self.empty();
        }
        if copies >= COUNTED_MIN_COPIES
            && sub.anchors() == (false, false)
            && !self.calls_shared_rule(sub)
            && !(self.grammar.is_some() && self.calls_within(sub))
        {
            match self.automaton(sub, Anchors::WHOLE_TEXT) {
                Ok(dfa) if dfa.matches_nothing() => {
                    return if min == 0 {
                        self.empty()
                    } else {
                        self.nothing()
                    }
                }
                Ok(dfa) => {
                    return self.embed_repeated(
                        &EmbeddedAutomaton::Built(dfa),
                        copies as u32,
                        min,
                        max.is_none(),
                    )
                }
                // Too large as one automaton; copies of its expression may still be walked
                // lazily.
                Err(Error::SizeLimit { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        // Build one copy, measure it, and refuse before building the rest if they cannot fit.
        let before = self.states.len();
        let mut first = Some(self.compile(sub)?);
        let per_copy = self.states.len() - before + 1;
        self.reserve(per_copy.saturating_mul(copies - 1))?;
        let mut next_copy = |b: &mut Self| match first.take() {
            Some(f) => Ok(f),
            None => b.compile(sub),
        };

        if min == 0 && max.is_none() {
            let u = self.add(State::Union(Vec::with_capacity(2)))?;
            let f = next_copy(self)?;
            self.patch(u, f.start);
            self.patch(f.end, u);
            return Ok(Frag { start: u, end: u });
        }
        let mut acc: Option<Frag> = None;
        for i in 0..min {
            let mut f = next_copy(self)?;
            if max.is_none() && i + 1 == min {
                let u = self.add(State::Union(vec![f.start]))?;
                self.patch(f.end, u);
                f = Frag {
                    start: f.start,
                    end: u,
                };
            }
            acc = Some(self.chain(acc, f));
        }
        if let Some(max) = max.filter(|&max| max > min) {
            // Optional copies in a line, each able to skip straight to the exit.
            let join = self.add(State::Epsilon(PENDING))?;
            for _ in min..max {
                let u = self.add(State::Union(Vec::with_capacity(2)))?;
                let f = next_copy(self)?;
                self.patch(u, f.start);
                self.patch(u, join);
                acc = Some(self.chain(
                    acc,
                    Frag {
                        start: u,
                        end: f.end,
                    },
                ));
            }
            if let Some(a) = acc {
                self.patch(a.end, join);
                acc = Some(Frag {
                    start: a.start,
                    end: join,
                });
            }
        }
        match acc {
            Some(f) => Ok(f),
            None => self.empty(),
        }
    }

    /// Intersection, complement or shared expression: a (product) DFA per anchoring case, embedded;
    /// for a lazy construction, an unanchored intersection or complement is a lazy product.
    fn boolean(&mut self, hir: &Hir) -> Result<Frag> {
        let (has_start, has_end) = hir.anchors();
        let product = matches!(hir, Hir::Intersection(_) | Hir::Complement(_));
        if self.shared_as_rules && product && !has_start && !has_end {
            let p = self.lazy_product(hir)?;
            return self.embed_repeated(&EmbeddedAutomaton::Lazy(p), 1, 1, false);
        }
        let starts: &[Option<bool>] = if has_start {
            &[Some(true), Some(false)]
        } else {
            &[None]
        };
        let ends: &[Option<bool>] = if has_end {
            &[Some(true), Some(false)]
        } else {
            &[None]
        };
        // Every automaton first, so that a refusal leaves no states behind.
        let mut cases = Vec::with_capacity(4);
        for &at_start in starts {
            for &at_end in ends {
                let anchors = Anchors {
                    text_start: at_start.unwrap_or(true),
                    text_end: at_end.unwrap_or(true),
                };
                match (self.automaton(hir, anchors), hir) {
                    (Ok(dfa), _) => cases.push((at_start, at_end, dfa)),
                    // Sharing is only an economy: a shared expression too large to build as one
                    // automaton is compiled in place instead, where a lazy construction only
                    // builds what the input visits.
                    (Err(Error::SizeLimit { .. }), Hir::Shared(s))
                        if self.memo.borrow().refused_shared <= MAX_REFUSED_SHARED =>
                    {
                        return self.compile(s.hir())
                    }
                    (Err(e), _) => return Err(e),
                }
            }
        }
        let entry = self.add(State::Union(Vec::with_capacity(4)))?;
        let join = self.add(State::Epsilon(PENDING))?;
        for (at_start, at_end, dfa) in cases {
            if dfa.matches_nothing() {
                continue;
            }
            let mut open = entry;
            if let Some(s) = at_start {
                let assertion = if s {
                    Assertion::Start
                } else {
                    Assertion::NotStart
                };
                open = self.guard(open, assertion)?;
            }
            let f = self.embed(&dfa)?;
            self.patch(open, f.start);
            open = f.end;
            if let Some(e) = at_end {
                let assertion = if e { Assertion::End } else { Assertion::NotEnd };
                open = self.guard(open, assertion)?;
            }
            self.patch(open, join);
        }
        Ok(Frag {
            start: entry,
            end: join,
        })
    }

    /// An assertion after `open`; returns its open end.
    fn guard(&mut self, open: StateId, assertion: Assertion) -> Result<StateId> {
        let g = self.add(State::Look {
            assertion,
            next: PENDING,
        })?;
        self.patch(open, g);
        Ok(g)
    }

    /// The automaton of an intersection, complement, shared expression or repeated operand,
    /// built (or refused) once per construction.
    fn automaton(&self, hir: &Hir, anchors: Anchors) -> Result<Arc<Dfa>> {
        if let Some(d) = self
            .memo
            .borrow()
            .built
            .get(&anchors)
            .and_then(|m| m.get(hir))
        {
            return d.clone();
        }
        let pinned = match hir {
            Hir::Shared(s) if s.is_pinned() => Some((anchors, s.id())),
            _ => None,
        };
        let kept = pinned.and_then(|key| {
            let cache = PINNED_AUTOMATA.lock().unwrap_or_else(|e| e.into_inner());
            // An automaton past this construction's limit is refused as if it were built here.
            cache
                .get(&key)
                .filter(|d| d.num_states() <= self.dfa_config.max_states)
                .cloned()
        });
        let d = match kept {
            Some(d) => Ok(d),
            None => self.build_automaton(hir, anchors).map(Arc::new),
        };
        if let (Some(key), Ok(dfa)) = (pinned, &d) {
            let mut cache = PINNED_AUTOMATA.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= MAX_PINNED_AUTOMATA {
                cache.clear();
            }
            cache.insert(key, Arc::clone(dfa));
        }
        let mut memo = self.memo.borrow_mut();
        if matches!((&d, hir), (Err(Error::SizeLimit { .. }), Hir::Shared(_))) {
            memo.refused_shared += 1;
        }
        memo.built
            .entry(anchors)
            .or_default()
            .insert(hir.clone(), d.clone());
        d
    }

    fn build_automaton(&self, hir: &Hir, anchors: Anchors) -> Result<Dfa> {
        let operand = |h: &Hir| {
            let nfa = Nfa::with_memo(h, &self.config, &self.dfa_config, &self.memo)?;
            Dfa::from_nfa(nfa, anchors, &self.dfa_config)
        };
        match hir {
            Hir::Intersection(children) => {
                let mut iter = children.iter();
                let mut acc = match iter.next() {
                    Some(first) => operand(first)?,
                    // No operand: every valid UTF-8 string.
                    None => product::valid_utf8()?.clone(),
                };
                for child in iter {
                    if acc.matches_nothing() {
                        break;
                    }
                    let d = operand(child)?;
                    acc = product::intersection(&acc, &d, &self.dfa_config)?;
                }
                Ok(acc)
            }
            Hir::Complement(sub) => {
                let d = operand(sub)?;
                product::complement(&d, &self.dfa_config)
            }
            Hir::Shared(s) => operand(s.hir()),
            other => operand(other),
        }
    }

    /// The lazy product of an unanchored intersection or complement, built (or refused) once per
    /// construction. Nested intersections flatten into one product; a complement is a negative
    /// operand beside the valid UTF-8 strings.
    fn lazy_product(&self, hir: &Hir) -> Result<Arc<LazyProduct>> {
        if let Some(p) = self.memo.borrow().lazy.get(hir) {
            return Ok(Arc::clone(p));
        }
        let mut parts: Vec<(&Hir, bool)> = Vec::new();
        let mut todo = vec![hir];
        while let Some(h) = todo.pop() {
            match h {
                Hir::Intersection(children) => todo.extend(children),
                Hir::Complement(sub) => parts.push((sub, false)),
                other => parts.push((other, true)),
            }
        }
        let any_text = Hir::repeat(Hir::any_char(), 0, None);
        if parts.iter().any(|&(_, positive)| !positive) || parts.is_empty() {
            parts.push((&any_text, true));
        }
        let mut operands = Vec::with_capacity(parts.len());
        for (h, positive) in parts {
            let nfa = Nfa::build(h, &self.config, &self.dfa_config, &self.memo, true)?;
            operands.push(Operand { nfa, positive });
        }
        let failure = self.memo.borrow().failure.clone();
        let p = Arc::new(LazyProduct::new(
            operands,
            self.dfa_config.max_states,
            failure,
        )?);
        self.memo
            .borrow_mut()
            .lazy
            .insert(hir.clone(), Arc::clone(&p));
        Ok(p)
    }

    /// Embeds a DFA as a fragment: a block of ids standing for its states (see the module
    /// documentation), entered at its start state, left through a new stored state.
    fn embed(&mut self, dfa: &Arc<Dfa>) -> Result<Frag> {
        self.embed_repeated(&EmbeddedAutomaton::Built(Arc::clone(dfa)), 1, 1, false)
    }

    /// [`Builder::embed`], entered at state `start` rather than the automaton's own start.
    fn embed_from(&mut self, dfa: &Arc<Dfa>, start: u32) -> Result<Frag> {
        let f = self.embed(dfa)?;
        Ok(Frag {
            start: f.start - dfa.start() + start,
            end: f.end,
        })
    }

    /// Embeds `copies` copies of an automaton, at least `min` of which must match, the last one
    /// again and again when `looping` (see [`Embedding`]).
    fn embed_repeated(
        &mut self,
        automaton: &EmbeddedAutomaton,
        copies: u32,
        min: u32,
        looping: bool,
    ) -> Result<Frag> {
        let end = self.add(State::Epsilon(PENDING))?;
        let base = self.next_base;
        let stride = automaton.stride().min(u32::MAX as usize) as u32;
        let next = u64::from(base) + u64::from(stride) * u64::from(copies);
        // The top id marks unconnected ends, so the block must end below it.
        if next > u64::from(PENDING) {
            let used = (next - u64::from(EMBEDDED_BASE)) as usize;
            let room = (PENDING - EMBEDDED_BASE) as usize;
            return Err(Error::size_limit("nfa_embedded_states", used, room));
        }
        let fresh = self.automata.len() as u32;
        let index = *self
            .automaton_ids
            .entry(automaton.address())
            .or_insert(fresh);
        if index == fresh {
            self.automata.push(automaton.clone());
        }
        let at = Embedding {
            automaton: index,
            base,
            stride,
            copies,
            min,
            looping,
            exit: end,
        };
        self.embeddings.push(at);
        self.next_base = next as StateId;
        let start = at.id(0, automaton.start());
        if min > 0 {
            return Ok(Frag { start, end });
        }
        // No copy needed: the exit is open before the first.
        let entry = self.add(State::Union(vec![start, end]))?;
        Ok(Frag { start: entry, end })
    }
}

/// Incremental minimal-automaton construction for sorted byte-range sequences that all end in one
/// target state.
struct Utf8Trie {
    target: StateId,
    /// Frozen states by their transitions, so equal suffixes are built once.
    register: FxHashMap<Box<[Transition]>, StateId>,
    /// The path of the last sequence added, root first; each node's `last` edge leads to the node
    /// after it and is not frozen yet.
    open: Vec<OpenNode>,
}

#[derive(Default)]
struct OpenNode {
    done: Vec<Transition>,
    last: Option<Utf8Range>,
}

impl Utf8Trie {
    fn new(target: StateId) -> Self {
        Utf8Trie {
            target,
            register: FxHashMap::default(),
            open: vec![OpenNode::default()],
        }
    }

    fn add(&mut self, b: &mut Builder, seq: &[Utf8Range]) -> Result<()> {
        let prefix = seq
            .iter()
            .zip(&self.open)
            .take_while(|(r, node)| node.last == Some(**r))
            .count();
        // Sorted disjoint input never repeats a whole sequence; if it did, the shared path
        // already accepts it.
        if prefix == seq.len() {
            return Ok(());
        }
        self.freeze_from(b, prefix)?;
        if let Some(top) = self.open.last_mut() {
            top.last = Some(seq[prefix]);
        }
        for &r in &seq[prefix + 1..] {
            self.open.push(OpenNode {
                done: Vec::new(),
                last: Some(r),
            });
        }
        Ok(())
    }

    /// Freezes every open node deeper than `depth`, leaving `open[depth]` with its last edge
    /// resolved.
    fn freeze_from(&mut self, b: &mut Builder, depth: usize) -> Result<()> {
        let mut next = self.target;
        while self.open.len() > depth + 1 {
            let Some(mut node) = self.open.pop() else {
                break;
            };
            if let Some(r) = node.last.take() {
                node.done.push(Transition {
                    start: r.start,
                    end: r.end,
                    next,
                });
            }
            next = self.intern(b, node.done)?;
        }
        if let Some(top) = self.open.last_mut() {
            if let Some(r) = top.last.take() {
                top.done.push(Transition {
                    start: r.start,
                    end: r.end,
                    next,
                });
            }
        }
        Ok(())
    }

    fn intern(&mut self, b: &mut Builder, transitions: Vec<Transition>) -> Result<StateId> {
        let key: Box<[Transition]> = transitions.into_boxed_slice();
        if let Some(&id) = self.register.get(&key) {
            return Ok(id);
        }
        let id = b.add(State::Sparse(key.clone()))?;
        self.register.insert(key, id);
        Ok(id)
    }

    /// The root state, or `None` when no sequence was added.
    fn finish(mut self, b: &mut Builder) -> Result<Option<StateId>> {
        self.freeze_from(b, 0)?;
        let root = self.open.pop().unwrap_or_default();
        if root.done.is_empty() {
            return Ok(None);
        }
        self.intern(b, root.done).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nfa(hir: &Hir) -> Result<Nfa> {
        Nfa::new(hir, &NfaConfig::default(), &DfaConfig::default())
    }

    /// Simulates the NFA on `bytes` by tracking sets of states, as an oracle independent of the
    /// subset construction.
    fn simulate(nfa: &Nfa, bytes: &[u8]) -> bool {
        let n = bytes.len();
        let closure = |set: Vec<StateId>, pos: usize| -> Vec<StateId> {
            let mut seen = rustc_hash::FxHashSet::default();
            let mut stack = set;
            let mut out = Vec::new();
            while let Some(s) = stack.pop() {
                if !seen.insert(s) {
                    continue;
                }
                out.push(s);
                let state = match nfa.node(s) {
                    Node::Stored(state) => state,
                    Node::Embedded(e) => {
                        stack.extend(e.moves_without_reading());
                        continue;
                    }
                };
                match state {
                    State::Epsilon(next) => stack.push(*next),
                    State::Union(alts) => stack.extend(alts),
                    State::Look { assertion, next } => {
                        let holds = match assertion {
                            Assertion::Start => pos == 0,
                            Assertion::End => pos == n,
                            Assertion::NotStart => pos != 0,
                            Assertion::NotEnd => pos != n,
                        };
                        if holds {
                            stack.push(*next)
                        }
                    }
                    _ => {}
                }
            }
            out
        };
        let mut cur = closure(vec![nfa.start()], 0);
        for (i, &byte) in bytes.iter().enumerate() {
            let mut next = Vec::new();
            for &s in &cur {
                match nfa.node(s) {
                    Node::Embedded(e) => next.extend(e.next_byte(byte)),
                    Node::Stored(State::ByteRange(t)) if t.start <= byte && byte <= t.end => {
                        next.push(t.next)
                    }
                    Node::Stored(State::Sparse(ts)) => next.extend(
                        ts.iter()
                            .filter(|t| t.start <= byte && byte <= t.end)
                            .map(|t| t.next),
                    ),
                    _ => {}
                }
            }
            cur = closure(next, i + 1);
        }
        cur.iter()
            .any(|&s| matches!(nfa.node(s), Node::Stored(State::Match)))
    }

    #[test]
    fn literal_alternation_and_repeats() {
        let h = Hir::concat([
            Hir::alternation([Hir::literal("ab"), Hir::literal("c")]),
            Hir::repeat(Hir::literal("d"), 2, Some(3)),
        ]);
        let n = nfa(&h).unwrap();
        for (s, want) in [
            ("abdd", true),
            ("cddd", true),
            ("cd", false),
            ("cdddd", false),
            ("abcdd", false),
        ] {
            assert_eq!(simulate(&n, s.as_bytes()), want, "{s}");
        }
        let star = nfa(&Hir::repeat(Hir::literal("x"), 0, None)).unwrap();
        assert!(simulate(&star, b"") && simulate(&star, b"xxx") && !simulate(&star, b"xy"));
        let plus = nfa(&Hir::repeat(Hir::literal("x"), 2, None)).unwrap();
        assert!(!simulate(&plus, b"x") && simulate(&plus, b"xx") && simulate(&plus, b"xxxx"));
    }

    #[test]
    fn anchors_are_about_the_whole_text() {
        let a_then_b = Hir::concat([Hir::literal("a"), Hir::Look(Look::Start), Hir::literal("b")]);
        let n = nfa(&a_then_b).unwrap();
        assert!(!simulate(&n, b"ab") && !simulate(&n, b"b"));
        let either = Hir::alternation([
            Hir::concat([
                Hir::Look(Look::Start),
                Hir::literal("a"),
                Hir::Look(Look::End),
            ]),
            Hir::concat([
                Hir::Look(Look::Start),
                Hir::literal("b"),
                Hir::Look(Look::End),
            ]),
        ]);
        let n = nfa(&either).unwrap();
        assert!(simulate(&n, b"a") && simulate(&n, b"b") && !simulate(&n, b"ab"));
    }

    #[test]
    fn classes_cover_exactly_their_code_points() {
        let set = ClassSet::from_ranges([
            (0x41, 0x5A),
            (0xE9, 0xE9),
            (0x3B1, 0x3C9),
            (0x1F600, 0x1F64F),
        ]);
        let n = nfa(&Hir::class(set.clone())).unwrap();
        for c in (0..0x2_0000u32)
            .step_by(7)
            .chain([0x41, 0x5A, 0xE9, 0x3B1, 0x1F600, 0x1F64F])
        {
            if let Some(ch) = char::from_u32(c) {
                assert_eq!(
                    simulate(&n, ch.to_string().as_bytes()),
                    set.contains(c),
                    "U+{c:X}"
                );
            }
        }
        assert!(
            !simulate(&n, b"\xED\xA0\x80"),
            "an encoded surrogate is not a character"
        );
    }

    #[test]
    fn big_classes_share_suffixes() {
        // Every scalar value: a handful of states, not one per sequence.
        let any = nfa(&Hir::any_char()).unwrap();
        assert!(any.len() < 16, "{} states for any character", any.len());
        let n = nfa(&Hir::class(ClassSet::range(0x100, 0x10FFFF))).unwrap();
        assert!(n.len() < 24, "{} states", n.len());
    }

    #[test]
    fn size_limit_is_raised_early() {
        // Two million bytes in repetitions too short to embed: copied, and refused before the
        // copies are built.
        let mut h = Hir::literal("ab");
        for _ in 0..6 {
            h = Hir::repeat(h, 10, Some(10));
        }
        match nfa(&h) {
            Err(Error::SizeLimit {
                limit,
                value,
                maximum,
            }) => {
                assert_eq!(limit, "nfa_states");
                assert!(value > maximum && maximum == 1_000_000);
            }
            other => panic!("expected a size limit, got {other:?}"),
        }
        let small = NfaConfig { max_states: 10 };
        let err = Nfa::new(&Hir::literal("abcdefghijkl"), &small, &DfaConfig::default());
        assert!(matches!(err, Err(Error::SizeLimit { .. })));
        assert!(Nfa::new(&Hir::literal("abcdefgh"), &small, &DfaConfig::default()).is_ok());
    }

    #[test]
    fn long_counted_repetitions_embed_one_automaton() {
        let ab = Hir::literal("ab");
        let n = nfa(&Hir::repeat(ab.clone(), 20, Some(40))).unwrap();
        assert!(n.len() < 8, "{} stored states", n.len());
        assert_eq!((n.automata().len(), n.embeddings().len()), (1, 1));
        let abs = |k: usize| "ab".repeat(k).into_bytes();
        for (k, want) in [
            (0, false),
            (19, false),
            (20, true),
            (33, true),
            (40, true),
            (41, false),
        ] {
            assert_eq!(simulate(&n, &abs(k)), want, "{k} copies");
        }
        assert!(!simulate(&n, &[abs(20), b"a".to_vec()].concat()));
        // Unbounded: the last copy repeats.
        let n = nfa(&Hir::repeat(ab.clone(), 16, None)).unwrap();
        assert!(!simulate(&n, &abs(15)) && simulate(&n, &abs(16)) && simulate(&n, &abs(70)));
        // Optional copies, and copies that may match nothing.
        let n = nfa(&Hir::repeat(ab.clone(), 0, Some(20))).unwrap();
        assert!(simulate(&n, b"") && simulate(&n, &abs(20)) && !simulate(&n, &abs(21)));
        let maybe = Hir::optional(Hir::literal("a"));
        let n = nfa(&Hir::repeat(maybe, 17, Some(17))).unwrap();
        assert!(simulate(&n, b"") && simulate(&n, &[b'a'; 17]) && !simulate(&n, &[b'a'; 18]));
        // A million copies cost no more than one.
        let n = nfa(&Hir::repeat(ab, 1_000_000, Some(1_000_000))).unwrap();
        assert!(n.len() < 8 && n.memory_bytes() < 4096);
    }

    #[test]
    fn oversized_shared_expressions_are_compiled_in_place() {
        // Forty letters in a row, as one automaton, needs more than the 20 states allowed.
        let letters = Hir::repeat(Hir::class(ClassSet::range(0x61, 0x7A)), 40, Some(40));
        let shared = Hir::shared(letters);
        let h = Hir::concat([shared.clone(), Hir::literal("!"), shared]);
        let small = DfaConfig { max_states: 20 };
        let n = Nfa::new(&h, &NfaConfig::default(), &small).unwrap();
        let word = "q".repeat(40);
        assert!(simulate(&n, format!("{word}!{word}").as_bytes()));
        assert!(!simulate(&n, format!("{word}!q").as_bytes()));
        // Only a few distinct ones: each refusal cost a bounded construction, and more than
        // `MAX_REFUSED_SHARED` of them give up.
        let distinct = |n: usize| {
            let parts = (0..n).map(|i| {
                let letter = Hir::class(ClassSet::range(0x61 + i as u32, 0x61 + i as u32));
                Hir::shared(Hir::repeat(letter, 40, Some(40)))
            });
            Nfa::new(&Hir::concat(parts), &NfaConfig::default(), &small)
        };
        assert!(distinct(MAX_REFUSED_SHARED).is_ok());
        assert!(matches!(
            distinct(MAX_REFUSED_SHARED + 1),
            Err(Error::SizeLimit { .. })
        ));
        // An intersection has no such fallback: it is refused.
        let both = Hir::intersection([
            Hir::repeat(Hir::class(ClassSet::range(0x61, 0x7A)), 40, Some(40)),
            Hir::repeat(Hir::any_char(), 0, None),
        ]);
        assert!(matches!(
            Nfa::new(&both, &NfaConfig::default(), &small),
            Err(Error::SizeLimit { .. })
        ));
    }

    #[test]
    fn intersection_and_complement_fragments() {
        let any = Hir::repeat(Hir::any_char(), 0, None);
        // Strings with an "a" and a "b", followed by "!".
        let both = Hir::intersection([
            Hir::concat([any.clone(), Hir::literal("a"), any.clone()]),
            Hir::concat([any.clone(), Hir::literal("b"), any.clone()]),
        ]);
        let n = nfa(&Hir::concat([both, Hir::literal("!")])).unwrap();
        assert!(simulate(&n, b"ab!") && simulate(&n, b"xbya!") && !simulate(&n, b"aa!"));
        assert!(!simulate(&n, b"ab"));
        // Anything but "no": the complement holds invalid UTF-8 out too.
        let not_no = nfa(&Hir::complement(Hir::literal("no"))).unwrap();
        assert!(simulate(&not_no, b"") && simulate(&not_no, b"nope") && !simulate(&not_no, b"no"));
        assert!(!simulate(&not_no, b"\xFF"));
    }

    #[test]
    fn anchors_inside_a_complement_see_the_whole_text() {
        // x(?~^.*) : after "x" the complement is not at the text's start, so `^.*` matches
        // nothing there and its complement is everything.
        let any = Hir::repeat(Hir::any_char(), 0, None);
        let h = Hir::concat([
            Hir::literal("x"),
            Hir::complement(Hir::concat([Hir::Look(Look::Start), any.clone()])),
        ]);
        let n = nfa(&h).unwrap();
        assert!(simulate(&n, b"x") && simulate(&n, b"xyz"));
        // (?~^.*) alone is at the start: it matches nothing.
        let n = nfa(&Hir::complement(Hir::concat([
            Hir::Look(Look::Start),
            any.clone(),
        ])))
        .unwrap();
        assert!(!simulate(&n, b"") && !simulate(&n, b"abc"));
        // (?~a$)b : the operand is never at the end, so the complement is everything.
        let h = Hir::concat([
            Hir::complement(Hir::concat([Hir::literal("a"), Hir::Look(Look::End)])),
            Hir::literal("b"),
        ]);
        let n = nfa(&h).unwrap();
        assert!(simulate(&n, b"ab") && simulate(&n, b"b"));
        // (?~a$) alone: everything but "a".
        let n = nfa(&Hir::complement(Hir::concat([
            Hir::literal("a"),
            Hir::Look(Look::End),
        ])))
        .unwrap();
        assert!(!simulate(&n, b"a") && simulate(&n, b"aa") && simulate(&n, b""));
    }
}
