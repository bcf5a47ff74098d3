//! The high-level intermediate representation every front end lowers into.
//!
//! A pattern's surface syntax has many ways to say one thing (`a{2}` and `aa`, `[0-9]` and `\d`,
//! lazy and greedy quantifiers, which mean the same under full match). The HIR forgets all of that:
//! it has sets of code points, literal byte strings, concatenation, alternation, counted repetition,
//! the two anchors, and, for the JSON Schema compiler's boolean keywords, intersection and
//! complement. Nothing here knows about bytes or states; the NFA compiler does the UTF-8 work.
//!
//! The smart constructors ([`Hir::concat`], [`Hir::alternation`], [`Hir::repeat`]) flatten nested
//! nodes and fold the obvious identities (`x{1}` is `x`, a concatenation holding an empty set matches
//! nothing). That keeps generated HIRs, which can be large for real schemas, from carrying layers of
//! one-child nodes into the automaton construction, where every node costs states.
//!
//! Generated expressions repeat themselves: a JSON Schema compiler copies a member's value language
//! into every place the member may stand, and "any JSON value" into every object that admits extra
//! members. [`Hir::Shared`] holds such a sub-expression by reference, so that a copy costs a
//! pointer rather than the whole tree, and so that the automaton layer can recognise the copies and
//! build their automaton once. A shared node compares and hashes by identity (an id given when it is
//! made), which keeps equality, hashing and the properties cached in it ([`Hir::nullable`],
//! [`Hir::anchors`]) constant-time however deeply shared nodes nest. Two shared nodes with equal
//! contents are therefore different nodes; callers that want them merged intern them. Walking an
//! expression through its shared nodes visits the same sub-tree once per occurrence, which can be
//! exponential in the nesting: [`Hir::unique_size_within`] and [`Hir::expanded_size_within`] measure
//! both views, and printing expands (so callers bound the expanded size first).
//!
//! A few languages are automata rather than expressions: "the digits read so far leave remainder
//! `r` modulo the step" is a residue counter, whose shortest expression can be exponentially
//! larger. [`Hir::Automaton`] carries such a language as a minimized byte [`Dfa`], which the NFA
//! embeds as it is; only printing has to turn it into an expression, and printing may refuse.
//!
//! Recursion is not regular at all, but a token index does not need the whole automaton, only
//! the states a generation visits, and those a pushdown automaton can enumerate as well as a
//! finite one. [`Hir::Grammar`] holds rules that name one another by index through [`Hir::Call`]
//! (indices, not pointers, so that a recursive language is still a finite tree of values with
//! equality and hashing); it is only ever the root of an expression, and the NFA layer compiles
//! each rule once and follows calls with a stack. A call's emptiness is carried by the call
//! ([`Call::nullable`]), since computing it would recurse.
//!
//! [`Hir`] implements `Display`, printing a pattern in the crate's own dialect that parses back to
//! an equivalent HIR. Patterns without intersection or complement print in the subset Python's `re`
//! also reads, so the text the schema compiler hands out is useful to other engines too.

use std::fmt::{self, Write as _};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use crate::dfa::Dfa;

/// The largest Unicode scalar value.
pub const MAX_CODE_POINT: u32 = 0x10FFFF;

/// Alternatives [`Hir::alternation`] compares a new one with before it hashes them instead.
const ALTERNATIVES_COMPARED: usize = 16;

/// A set of code points: sorted, non-overlapping, non-adjacent inclusive ranges.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ClassSet {
    ranges: Vec<(u32, u32)>,
}

impl ClassSet {
    /// The empty set.
    pub fn empty() -> Self {
        ClassSet { ranges: Vec::new() }
    }

    /// Every code point, surrogates included (they vanish when the set is encoded as UTF-8).
    pub fn full() -> Self {
        ClassSet {
            ranges: vec![(0, MAX_CODE_POINT)],
        }
    }

    /// The set holding `lo..=hi`; empty if `lo > hi`.
    pub fn range(lo: u32, hi: u32) -> Self {
        Self::from_ranges([(lo, hi)])
    }

    /// The set holding one code point.
    pub fn single(c: u32) -> Self {
        Self::range(c, c)
    }

    /// Builds a set from ranges in any order; ranges with `lo > hi` are dropped and values above
    /// [`MAX_CODE_POINT`] are clipped.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (u32, u32)>) -> Self {
        let mut v: Vec<(u32, u32)> = ranges
            .into_iter()
            .filter(|&(lo, hi)| lo <= hi && lo <= MAX_CODE_POINT)
            .map(|(lo, hi)| (lo, hi.min(MAX_CODE_POINT)))
            .collect();
        v.sort_unstable();
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(v.len());
        for (lo, hi) in v {
            match out.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        ClassSet { ranges: out }
    }

    /// The ranges, sorted and disjoint.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges
    }

    /// Whether the set holds no code point.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `c` is in the set.
    pub fn contains(&self, c: u32) -> bool {
        self.ranges
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    std::cmp::Ordering::Less
                } else if lo > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    }

    /// The union of two sets.
    pub fn union(&self, other: &ClassSet) -> ClassSet {
        // Both lists are sorted, so merging them in order leaves only neighbours to coalesce.
        let (a, b) = (&self.ranges, &other.ranges);
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let next = if j == b.len() || (i < a.len() && a[i] <= b[j]) {
                i += 1;
                a[i - 1]
            } else {
                j += 1;
                b[j - 1]
            };
            match out.last_mut() {
                Some(last) if next.0 <= last.1.saturating_add(1) => last.1 = last.1.max(next.1),
                _ => out.push(next),
            }
        }
        ClassSet { ranges: out }
    }

    /// Whether every code point of `other` is in the set.
    pub fn is_superset(&self, other: &ClassSet) -> bool {
        // Ranges are maximal, so each of `other`'s lies inside one of ours or is not covered.
        let mut mine = self.ranges.iter().peekable();
        other.ranges.iter().all(|&(lo, hi)| {
            while mine.next_if(|&&(_, h)| h < lo).is_some() {}
            mine.peek().is_some_and(|&&(l, h)| l <= lo && hi <= h)
        })
    }

    /// Every code point not in the set.
    pub fn negate(&self) -> ClassSet {
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        let mut next = 0u32;
        for &(lo, hi) in &self.ranges {
            if lo > next {
                out.push((next, lo - 1));
            }
            next = hi + 1;
        }
        if next <= MAX_CODE_POINT {
            out.push((next, MAX_CODE_POINT));
        }
        ClassSet { ranges: out }
    }

    /// The intersection of two sets.
    pub fn intersect(&self, other: &ClassSet) -> ClassSet {
        // One pass over both sorted lists. The pieces come out sorted and, because each input
        // range is maximal, never adjacent: two neighbouring code points in both sets lie in one
        // range of each, hence in one piece.
        let (a, b) = (&self.ranges, &other.ranges);
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let (lo, hi) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
            if lo <= hi {
                out.push((lo, hi));
            }
            if a[i].1 < b[j].1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        ClassSet { ranges: out }
    }

    /// The set minus `other`.
    pub fn difference(&self, other: &ClassSet) -> ClassSet {
        self.intersect(&other.negate())
    }

    /// Adds the other case of every ASCII letter, as `re.IGNORECASE | re.ASCII` folds.
    pub fn ascii_case_fold(&self) -> ClassSet {
        let mut extra = Vec::new();
        for &(lo, hi) in &self.ranges {
            for (a, z, delta) in [
                (b'a' as u32, b'z' as u32, -32i32),
                (b'A' as u32, b'Z' as u32, 32),
            ] {
                let (l, h) = (lo.max(a), hi.min(z));
                if l <= h {
                    extra.push(((l as i32 + delta) as u32, (h as i32 + delta) as u32));
                }
            }
        }
        Self::from_ranges(self.ranges.iter().copied().chain(extra))
    }
}

/// A zero-width assertion. Under full-match semantics both refer to the whole text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Look {
    /// `^`: nothing has been read yet.
    Start,
    /// `$`: nothing more will be read.
    End,
}

/// A regular expression over code points (and, through [`Hir::Literal`], UTF-8 bytes).
///
/// Copies, comparisons, hashes and drops recurse through `crate::stack::deep`, since a schema
/// can nest an expression far deeper than a thread's stack would hold.
#[derive(Debug, Eq)]
pub enum Hir {
    /// The empty string.
    Empty,
    /// A fixed UTF-8 byte string (never empty: the constructor turns `""` into [`Hir::Empty`]).
    Literal(Vec<u8>),
    /// One code point from the set. An empty set matches nothing.
    Class(ClassSet),
    /// A zero-width anchor.
    Look(Look),
    /// The children one after the other.
    Concat(Vec<Hir>),
    /// Any one of the children.
    Alternation(Vec<Hir>),
    /// `min` to `max` (unbounded when `None`) copies of the child.
    Repeat {
        /// The repeated expression.
        sub: Box<Hir>,
        /// Fewest copies.
        min: u32,
        /// Most copies; `None` for no bound.
        max: Option<u32>,
    },
    /// Strings every child matches.
    Intersection(Vec<Hir>),
    /// Valid UTF-8 strings the child does not match.
    Complement(Box<Hir>),
    /// The child's language, held by reference: copies are cheap, and the automaton layer builds
    /// one minimized automaton per shared node however often it occurs.
    Shared(Shared),
    /// The language of a byte automaton from one of its states. It never comes from a pattern,
    /// and it prints (as an expression equivalent to it) only through
    /// `json_schema::expand_shared`.
    Automaton(Automaton),
    /// The language of rule `index` of the enclosing [`Hir::Grammar`]. It never comes from a
    /// pattern and does not print as one: a recursive language is not regular.
    Call(Call),
    /// Rules that may call one another, and the expression that calls them first. Only ever the
    /// root of an expression: the NFA layer enters rules with a return address on a stack.
    Grammar(Grammar),
}

/// A call of a grammar rule (see [`Hir::Call`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Call {
    /// The rule, an index into [`Grammar::rules`].
    pub index: u32,
    /// Whether the rule matches the empty string (the caller knows; a walk could recurse
    /// forever).
    pub nullable: bool,
}

/// An expression with recursive rules (see [`Hir::Grammar`]).
///
/// Equality and hashing are by identity, like [`Shared`].
#[derive(Debug, Clone)]
pub struct Grammar {
    id: u64,
    start: Arc<Hir>,
    rules: Arc<[Hir]>,
}

impl Grammar {
    /// The expression matching begins with.
    pub fn start(&self) -> &Hir {
        &self.start
    }

    /// The rules, which [`Hir::Call`] nodes name by index.
    pub fn rules(&self) -> &[Hir] {
        &self.rules
    }
}

impl PartialEq for Grammar {
    fn eq(&self, other: &Grammar) -> bool {
        self.id == other.id
    }
}

impl Eq for Grammar {}

impl Hash for Grammar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state)
    }
}

/// A minimized byte automaton standing in an expression, read from `state` (its start when made).
///
/// Equality and hashing are by identity and state, like [`Shared`].
#[derive(Debug, Clone)]
pub struct Automaton {
    id: u64,
    dfa: Arc<Dfa>,
    state: u32,
}

impl Automaton {
    /// The automaton.
    pub fn dfa(&self) -> &Arc<Dfa> {
        &self.dfa
    }

    /// The state the language is read from.
    pub fn state(&self) -> u32 {
        self.state
    }

    /// The same automaton after `byte`; `None` when that is the dead state.
    pub fn step(&self, byte: u8) -> Option<Automaton> {
        let next = self.dfa.next_state(self.state, byte);
        (next != self.dfa.dead()).then(|| Automaton {
            id: self.id,
            dfa: Arc::clone(&self.dfa),
            state: next,
        })
    }
}

impl PartialEq for Automaton {
    fn eq(&self, other: &Automaton) -> bool {
        (self.id, self.state) == (other.id, other.state)
    }
}

impl Eq for Automaton {}

impl Hash for Automaton {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.id, self.state).hash(state)
    }
}

/// A sub-expression held by reference, with the properties walks would otherwise recompute.
///
/// Equality and hashing are by identity: every [`Shared::new`] makes a node unequal to all others.
#[derive(Debug, Clone)]
pub struct Shared {
    id: u64,
    hir: Arc<Hir>,
    nullable: bool,
    anchors: (bool, bool),
    pinned: bool,
}

/// Ids for [`Shared`] and [`Automaton`] nodes, unique within the process.
static NEXT_SHARED_ID: AtomicU64 = AtomicU64::new(0);

impl Shared {
    /// Shares `hir`, computing its cached properties (which costs a walk of its unshared part).
    pub fn new(hir: Hir) -> Shared {
        Shared {
            id: NEXT_SHARED_ID.fetch_add(1, Ordering::Relaxed),
            nullable: hir.nullable(),
            anchors: hir.anchors(),
            hir: Arc::new(hir),
            pinned: false,
        }
    }

    /// The shared expression.
    pub fn hir(&self) -> &Hir {
        &self.hir
    }

    /// The node's identity (what equality and hashing compare).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether the expression holds a start anchor, and an end anchor (see [`Hir::anchors`]).
    pub fn anchors(&self) -> (bool, bool) {
        self.anchors
    }

    /// Whether the node outlives one compilation (see [`Hir::pinned`]).
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }
}

impl PartialEq for Shared {
    fn eq(&self, other: &Shared) -> bool {
        self.id == other.id
    }
}

impl Eq for Shared {}

impl Hash for Shared {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state)
    }
}

/// Dropping recurses through `crate::stack::deep` too: the compiler's drop glue would otherwise
/// recurse a level per node on the caller's stack.
impl Drop for Hir {
    fn drop(&mut self) {
        match self {
            Hir::Concat(children) | Hir::Alternation(children) | Hir::Intersection(children) => {
                let children = std::mem::take(children);
                crate::stack::deep(move || drop(children));
            }
            Hir::Repeat { sub, .. } | Hir::Complement(sub) if sub.has_children() => {
                let sub = std::mem::replace(&mut **sub, Hir::Empty);
                crate::stack::deep(move || drop(sub));
            }
            _ => {}
        }
    }
}

impl PartialEq for Hir {
    fn eq(&self, other: &Self) -> bool {
        if std::mem::discriminant(self) != std::mem::discriminant(other) {
            return false;
        }
        let compare = || match (self, other) {
            (Hir::Empty, Hir::Empty) => true,
            (Hir::Literal(a), Hir::Literal(b)) => a == b,
            (Hir::Class(a), Hir::Class(b)) => a == b,
            (Hir::Look(a), Hir::Look(b)) => a == b,
            (Hir::Concat(a), Hir::Concat(b))
            | (Hir::Alternation(a), Hir::Alternation(b))
            | (Hir::Intersection(a), Hir::Intersection(b)) => a == b,
            (
                Hir::Repeat { sub, min, max },
                Hir::Repeat {
                    sub: sub2,
                    min: min2,
                    max: max2,
                },
            ) => min == min2 && max == max2 && sub == sub2,
            (Hir::Complement(a), Hir::Complement(b)) => a == b,
            (Hir::Shared(a), Hir::Shared(b)) => a == b,
            (Hir::Automaton(a), Hir::Automaton(b)) => a == b,
            (Hir::Call(a), Hir::Call(b)) => a == b,
            (Hir::Grammar(a), Hir::Grammar(b)) => a == b,
            _ => false,
        };
        self.recurse(compare)
    }
}

impl Hash for Hir {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let feed = |state: &mut H| {
            std::mem::discriminant(self).hash(state);
            match self {
                Hir::Empty => {}
                Hir::Literal(bytes) => bytes.hash(state),
                Hir::Class(set) => set.hash(state),
                Hir::Look(look) => look.hash(state),
                Hir::Concat(v) | Hir::Alternation(v) | Hir::Intersection(v) => v.hash(state),
                Hir::Repeat { sub, min, max } => {
                    sub.hash(state);
                    min.hash(state);
                    max.hash(state);
                }
                Hir::Complement(sub) => sub.hash(state),
                Hir::Shared(shared) => shared.hash(state),
                Hir::Automaton(automaton) => automaton.hash(state),
                Hir::Call(call) => call.hash(state),
                Hir::Grammar(grammar) => grammar.hash(state),
            }
        };
        self.recurse(|| feed(state))
    }
}

impl Clone for Hir {
    fn clone(&self) -> Self {
        let copy = || match self {
            Hir::Empty => Hir::Empty,
            Hir::Literal(bytes) => Hir::Literal(bytes.clone()),
            Hir::Class(set) => Hir::Class(set.clone()),
            Hir::Look(look) => Hir::Look(*look),
            Hir::Concat(children) => Hir::Concat(children.clone()),
            Hir::Alternation(children) => Hir::Alternation(children.clone()),
            Hir::Repeat { sub, min, max } => Hir::Repeat {
                sub: sub.clone(),
                min: *min,
                max: *max,
            },
            Hir::Intersection(children) => Hir::Intersection(children.clone()),
            Hir::Complement(sub) => Hir::Complement(sub.clone()),
            Hir::Shared(shared) => Hir::Shared(shared.clone()),
            Hir::Automaton(automaton) => Hir::Automaton(automaton.clone()),
            Hir::Call(call) => Hir::Call(*call),
            Hir::Grammar(grammar) => Hir::Grammar(grammar.clone()),
        };
        self.recurse(copy)
    }
}

impl Hir {
    /// Runs `f`, a step of a pass that recurses into this node's children, with room on the
    /// stack for it (`crate::stack::deep`); a node without children needs no check.
    #[inline(always)]
    pub(crate) fn recurse<R>(&self, f: impl FnOnce() -> R) -> R {
        if self.has_children() {
            crate::stack::deep(f)
        } else {
            f()
        }
    }

    /// Whether the node holds child expressions of its own (a shared node's contents are held by
    /// reference, and a grammar's rules behind an `Arc`, so neither counts).
    #[inline]
    fn has_children(&self) -> bool {
        matches!(
            self,
            Hir::Concat(_)
                | Hir::Alternation(_)
                | Hir::Intersection(_)
                | Hir::Repeat { .. }
                | Hir::Complement(_)
        )
    }
}

impl Hir {
    /// Matches nothing at all.
    pub fn nothing() -> Hir {
        Hir::Class(ClassSet::empty())
    }

    /// Whether this is the canonical "matches nothing" node.
    pub fn is_nothing(&self) -> bool {
        matches!(self, Hir::Class(c) if c.is_empty())
    }

    /// Matches exactly the UTF-8 encoding of `s`.
    pub fn literal(s: &str) -> Hir {
        Self::literal_bytes(s.as_bytes().to_vec())
    }

    /// Matches exactly these bytes (callers keep them valid UTF-8 where the context needs it).
    pub fn literal_bytes(bytes: Vec<u8>) -> Hir {
        if bytes.is_empty() {
            Hir::Empty
        } else {
            Hir::Literal(bytes)
        }
    }

    /// One code point from `set`.
    pub fn class(set: ClassSet) -> Hir {
        Hir::Class(set)
    }

    /// Any code point.
    pub fn any_char() -> Hir {
        Hir::Class(ClassSet::full())
    }

    /// The children in sequence, flattened; a child that matches nothing makes the whole match
    /// nothing.
    pub fn concat(children: impl IntoIterator<Item = Hir>) -> Hir {
        let mut out: Vec<Hir> = Vec::new();
        for mut child in children {
            if child.is_nothing() {
                return Hir::nothing();
            }
            // Children are taken out of a node, not moved: `Hir` has its own `Drop`.
            match &mut child {
                Hir::Empty => continue,
                Hir::Concat(inner) => {
                    out.append(inner);
                    continue;
                }
                Hir::Literal(bytes) => {
                    if let Some(Hir::Literal(prev)) = out.last_mut() {
                        prev.extend_from_slice(bytes);
                        continue;
                    }
                }
                _ => {}
            }
            out.push(child);
        }
        match out.len() {
            0 => Hir::Empty,
            1 => out.pop().unwrap_or(Hir::Empty),
            _ => Hir::Concat(out),
        }
    }

    /// Any one of the children, flattened; children that match nothing are dropped, and classes
    /// standing side by side are merged.
    pub fn alternation(children: impl IntoIterator<Item = Hir>) -> Hir {
        let mut out: Vec<Hir> = Vec::new();
        // Repeats are dropped by comparing with the alternatives so far, which is quadratic: an
        // `enum` of a thousand strings is a thousand alternatives. Past a few, the alternatives'
        // hashes go into a set and only a hash that is already there costs a comparison.
        let mut hashes: Option<FxHashMap<u64, Vec<usize>>> = None;
        let hash_of = |h: &Hir| {
            let mut hasher = FxHasher::default();
            h.hash(&mut hasher);
            hasher.finish()
        };
        for mut c in children {
            if c.is_nothing() {
                continue;
            }
            match &mut c {
                Hir::Alternation(inner) => out.append(inner),
                Hir::Class(set) => match out.last_mut() {
                    Some(Hir::Class(prev)) => *prev = prev.union(set),
                    _ => out.push(c),
                },
                _ => {
                    if hashes.is_none() && out.len() >= ALTERNATIVES_COMPARED {
                        let mut map: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
                        for (i, h) in out.iter().enumerate() {
                            map.entry(hash_of(h)).or_default().push(i);
                        }
                        hashes = Some(map);
                    }
                    match &mut hashes {
                        None => {
                            if !out.contains(&c) {
                                out.push(c)
                            }
                        }
                        Some(map) => {
                            let same = map.entry(hash_of(&c)).or_default();
                            if !same.iter().any(|&i| out[i] == c) {
                                same.push(out.len());
                                out.push(c);
                            }
                        }
                    }
                }
            }
        }
        match out.len() {
            0 => Hir::nothing(),
            1 => out.pop().unwrap_or_else(Hir::nothing),
            _ => Hir::Alternation(out),
        }
    }

    /// `min..=max` copies of `sub` (`max = None`: unbounded). A `max` below `min` matches nothing.
    pub fn repeat(sub: Hir, min: u32, max: Option<u32>) -> Hir {
        if let Some(max) = max {
            if max < min {
                return Hir::nothing();
            }
            if max == 0 {
                return Hir::Empty;
            }
        }
        if min == 1 && max == Some(1) {
            return sub;
        }
        match sub {
            Hir::Empty => Hir::Empty,
            // An assertion holds or not whatever the count: repeated at least once it is itself,
            // and optional it always lets the empty string through.
            Hir::Look(_) if min == 0 => Hir::Empty,
            Hir::Look(_) => sub,
            s if s.is_nothing() => {
                if min == 0 {
                    Hir::Empty
                } else {
                    Hir::nothing()
                }
            }
            s => Hir::Repeat {
                sub: Box::new(s),
                min,
                max,
            },
        }
    }

    /// `sub?`.
    pub fn optional(sub: Hir) -> Hir {
        Self::repeat(sub, 0, Some(1))
    }

    /// Strings every child matches.
    pub fn intersection(children: impl IntoIterator<Item = Hir>) -> Hir {
        let mut out: Vec<Hir> = Vec::new();
        for mut c in children {
            if c.is_nothing() {
                return Hir::nothing();
            }
            match &mut c {
                Hir::Intersection(inner) => out.append(inner),
                _ => {
                    if !out.contains(&c) {
                        out.push(c)
                    }
                }
            }
        }
        match out.len() {
            0 => Hir::Complement(Box::new(Hir::nothing())),
            1 => out.pop().unwrap_or_else(Hir::nothing),
            _ => Hir::Intersection(out),
        }
    }

    /// Valid UTF-8 strings that `sub` does not match.
    pub fn complement(mut sub: Hir) -> Hir {
        if let Hir::Complement(inner) = &mut sub {
            return std::mem::replace(&mut **inner, Hir::Empty);
        }
        Hir::Complement(Box::new(sub))
    }

    /// `sub` behind a [`Hir::Shared`] node (unless it is one already, or matches nothing).
    pub fn shared(sub: Hir) -> Hir {
        match sub {
            s @ Hir::Shared(_) => s,
            s if s.is_nothing() => s,
            s => Hir::Shared(Shared::new(s)),
        }
    }

    /// The same node, marked as one that a process keeps across compilations, so that the
    /// automaton layer may keep its automaton as long (the node is equal to its unmarked copies;
    /// anything but a shared node is returned as it is).
    pub fn pinned(self) -> Hir {
        match self {
            Hir::Shared(ref s) => Hir::Shared(Shared {
                pinned: true,
                ..s.clone()
            }),
            other => other,
        }
    }

    /// A call of rule `index` of the grammar this expression will stand in.
    pub fn call(index: u32, nullable: bool) -> Hir {
        Hir::Call(Call { index, nullable })
    }

    /// `start`, calling `rules` (just `start` when there are none).
    pub fn grammar(start: Hir, rules: Vec<Hir>) -> Hir {
        if rules.is_empty() {
            return start;
        }
        Hir::Grammar(Grammar {
            id: NEXT_SHARED_ID.fetch_add(1, Ordering::Relaxed),
            start: Arc::new(start),
            rules: rules.into(),
        })
    }

    /// Whether the expression calls a grammar rule anywhere (shared parts included).
    pub fn has_calls(&self) -> bool {
        !self.walk_unique(&mut FxHashSet::default(), |h| {
            !matches!(h, Hir::Call(_) | Hir::Grammar(_))
        })
    }

    /// The expression, ready to stand inside a larger grammar whose rules are `rules`: a
    /// [`Hir::Grammar`] appends its rules to `rules` and returns its start expression, with every
    /// call renumbered past the rules already there; anything else is returned as it is. This is
    /// how languages compiled apart (a JSON Schema inside a tool-call tag, a grammar inside
    /// another) share one grammar, which is the only place calls may stand.
    pub fn lift_rules(self, rules: &mut Vec<Hir>) -> Hir {
        let Hir::Grammar(ref g) = self else {
            return self;
        };
        let offset = rules.len() as u32;
        // Shared nodes are renumbered once however often they occur, and stay shared.
        let mut memo = FxHashMap::default();
        for rule in g.rules.iter() {
            let moved = rule.offset_calls(offset, &mut memo);
            rules.push(moved.unwrap_or_else(|| rule.clone()));
        }
        g.start
            .offset_calls(offset, &mut memo)
            .unwrap_or_else(|| (*g.start).clone())
    }

    /// The expression with every call's rule index raised by `offset`; `None` when it calls
    /// nothing (so call-free parts, pinned shared languages included, are kept, not copied).
    fn offset_calls(&self, offset: u32, memo: &mut FxHashMap<u64, Option<Hir>>) -> Option<Hir> {
        self.recurse(|| {
            let mut children = |v: &[Hir]| -> Option<Vec<Hir>> {
                let moved: Vec<Option<Hir>> =
                    v.iter().map(|h| h.offset_calls(offset, memo)).collect();
                moved.iter().any(Option::is_some).then(|| {
                    moved
                        .into_iter()
                        .zip(v)
                        .map(|(m, h)| m.unwrap_or_else(|| h.clone()))
                        .collect()
                })
            };
            match self {
                Hir::Call(c) => Some(Hir::Call(Call {
                    index: c.index + offset,
                    nullable: c.nullable,
                })),
                Hir::Concat(v) => children(v).map(Hir::Concat),
                Hir::Alternation(v) => children(v).map(Hir::Alternation),
                Hir::Intersection(v) => children(v).map(Hir::Intersection),
                Hir::Repeat { sub, min, max } => {
                    sub.offset_calls(offset, memo).map(|s| Hir::Repeat {
                        sub: Box::new(s),
                        min: *min,
                        max: *max,
                    })
                }
                Hir::Complement(sub) => sub
                    .offset_calls(offset, memo)
                    .map(|s| Hir::Complement(Box::new(s))),
                Hir::Shared(s) => {
                    if let Some(done) = memo.get(&s.id) {
                        return done.clone();
                    }
                    let moved = s.hir.offset_calls(offset, memo).map(|h| {
                        Hir::Shared(Shared {
                            pinned: s.pinned,
                            ..Shared::new(h)
                        })
                    });
                    memo.insert(s.id, moved.clone());
                    moved
                }
                Hir::Empty
                | Hir::Literal(_)
                | Hir::Class(_)
                | Hir::Look(_)
                | Hir::Automaton(_)
                | Hir::Grammar(_) => None,
            }
        })
    }

    /// The language of `dfa` (nothing when it matches nothing).
    pub fn automaton(dfa: Dfa) -> Hir {
        if dfa.matches_nothing() {
            return Hir::nothing();
        }
        Hir::Automaton(Automaton {
            id: NEXT_SHARED_ID.fetch_add(1, Ordering::Relaxed),
            state: dfa.start(),
            dfa: Arc::new(dfa),
        })
    }

    /// The expression itself, looking through shared nodes.
    pub fn unshared(&self) -> &Hir {
        let mut h = self;
        while let Hir::Shared(s) = h {
            h = &s.hir;
        }
        h
    }

    /// Whether the HIR uses intersection or complement anywhere (shared parts included).
    pub fn has_boolean_operators(&self) -> bool {
        !self.walk_unique(&mut FxHashSet::default(), |h| {
            !matches!(h, Hir::Intersection(_) | Hir::Complement(_))
        })
    }

    /// Visits every node, depth first, entering a shared node's contents only the first time its
    /// id is added to `seen` (which callers may keep across walks); stops, returning `false`, as
    /// soon as `visit` does. Iterative, so a deep expression cannot exhaust the stack.
    pub fn walk_unique<'h>(
        &'h self,
        seen: &mut FxHashSet<u64>,
        mut visit: impl FnMut(&'h Hir) -> bool,
    ) -> bool {
        let mut stack = vec![self];
        while let Some(h) = stack.pop() {
            if !visit(h) {
                return false;
            }
            match h {
                Hir::Empty
                | Hir::Literal(_)
                | Hir::Class(_)
                | Hir::Look(_)
                | Hir::Automaton(_)
                | Hir::Call(_) => {}
                Hir::Grammar(g) => {
                    stack.push(&g.start);
                    stack.extend(g.rules.iter());
                }
                Hir::Concat(v) | Hir::Alternation(v) | Hir::Intersection(v) => stack.extend(v),
                Hir::Repeat { sub, .. } | Hir::Complement(sub) => stack.push(sub),
                Hir::Shared(s) => {
                    if seen.insert(s.id) {
                        stack.push(&s.hir)
                    }
                }
            }
        }
        true
    }

    /// Whether the expression matches the empty string (anchors read as empty).
    pub fn nullable(&self) -> bool {
        self.recurse(|| match self {
            Hir::Empty | Hir::Look(_) => true,
            Hir::Literal(_) | Hir::Class(_) => false,
            Hir::Concat(v) | Hir::Intersection(v) => v.iter().all(Hir::nullable),
            Hir::Alternation(v) => v.iter().any(Hir::nullable),
            Hir::Repeat { sub, min, .. } => *min == 0 || sub.nullable(),
            Hir::Complement(sub) => !sub.nullable(),
            Hir::Shared(s) => s.nullable,
            Hir::Automaton(a) => a.dfa.is_accepting(a.state),
            Hir::Call(c) => c.nullable,
            Hir::Grammar(g) => g.start.nullable(),
        })
    }

    /// Whether the expression holds a start anchor, and an end anchor, anywhere (operands of
    /// intersections and complements and shared parts included).
    pub fn anchors(&self) -> (bool, bool) {
        self.recurse(|| match self {
            Hir::Look(Look::Start) => (true, false),
            Hir::Look(Look::End) => (false, true),
            Hir::Empty | Hir::Literal(_) | Hir::Class(_) | Hir::Automaton(_) | Hir::Call(_) => {
                (false, false)
            }
            Hir::Grammar(g) => std::iter::once(&*g.start).chain(g.rules.iter()).fold(
                (false, false),
                |(s, e), h| {
                    let (hs, he) = h.anchors();
                    (s || hs, e || he)
                },
            ),
            Hir::Repeat { sub, .. } | Hir::Complement(sub) => sub.anchors(),
            Hir::Concat(c) | Hir::Alternation(c) | Hir::Intersection(c) => {
                c.iter().fold((false, false), |(s, e), h| {
                    let (hs, he) = h.anchors();
                    (s || hs, e || he)
                })
            }
            Hir::Shared(s) => s.anchors,
        })
    }

    /// The nodes of the expression with every shared node's contents counted once: the memory it
    /// holds, and the size the budgets count.
    pub fn unique_size(&self) -> usize {
        // With no limit the count always completes.
        self.unique_size_within(usize::MAX).unwrap_or(usize::MAX)
    }

    /// [`Hir::unique_size`], or `None` past `limit` (counting no further).
    pub fn unique_size_within(&self, limit: usize) -> Option<usize> {
        let mut count = 0usize;
        let whole = self.walk_unique(&mut FxHashSet::default(), |_| {
            count += 1;
            count <= limit
        });
        whole.then_some(count)
    }

    /// The nodes of the expression with every occurrence of a shared node expanded (the size of
    /// its printed pattern, and of the tree a walk without memo visits), or `None` past `limit`.
    /// Each shared node is measured once.
    pub fn expanded_size_within(&self, limit: usize) -> Option<usize> {
        fn walk(h: &Hir, limit: usize, memo: &mut FxHashMap<u64, Option<usize>>) -> Option<usize> {
            let mut count = 0usize;
            let mut stack = vec![h];
            while let Some(h) = stack.pop() {
                let here = match h {
                    Hir::Empty | Hir::Literal(_) | Hir::Class(_) | Hir::Look(_) | Hir::Call(_) => 1,
                    Hir::Grammar(g) => {
                        stack.push(&g.start);
                        stack.extend(g.rules.iter());
                        1
                    }
                    // Its printed size is unknown until it is converted; a state is a fair guess.
                    Hir::Automaton(a) => a.dfa.num_states(),
                    Hir::Concat(v) | Hir::Alternation(v) | Hir::Intersection(v) => {
                        stack.extend(v);
                        1
                    }
                    Hir::Repeat { sub, .. } | Hir::Complement(sub) => {
                        stack.push(sub);
                        1
                    }
                    Hir::Shared(s) => match memo.get(&s.id) {
                        Some(&known) => known?,
                        None => {
                            let size = walk(&s.hir, limit, memo);
                            memo.insert(s.id, size);
                            size?
                        }
                    },
                };
                count = count.saturating_add(here);
                if count > limit {
                    return None;
                }
            }
            Some(count)
        }
        walk(self, limit, &mut FxHashMap::default())
    }
}

/// Printing precedence: what a child must be wrapped in to keep its meaning.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Prec {
    Alternation,
    Concat,
    Atom,
}

impl Hir {
    fn prec(&self) -> Prec {
        match self {
            Hir::Shared(s) => s.hir.prec(),
            Hir::Alternation(_) => Prec::Alternation,
            Hir::Concat(_) => Prec::Concat,
            Hir::Literal(b) if String::from_utf8_lossy(b).chars().count() > 1 => Prec::Concat,
            _ => Prec::Atom,
        }
    }

    fn write_at(&self, f: &mut fmt::Formatter<'_>, need: Prec) -> fmt::Result {
        self.recurse(|| {
            if self.prec() < need {
                f.write_str("(?:")?;
                self.write_at(f, Prec::Alternation)?;
                return f.write_str(")");
            }
            match self {
                Hir::Empty => f.write_str("(?:)"),
                Hir::Literal(bytes) => {
                    for c in String::from_utf8_lossy(bytes).chars() {
                        write_char(f, c as u32, false)?;
                    }
                    Ok(())
                }
                Hir::Class(set) => write_class(f, set),
                Hir::Look(Look::Start) => f.write_str("^"),
                Hir::Look(Look::End) => f.write_str("$"),
                Hir::Concat(children) => {
                    for c in children {
                        c.write_at(f, Prec::Concat)?;
                    }
                    Ok(())
                }
                Hir::Alternation(children) => {
                    for (i, c) in children.iter().enumerate() {
                        if i > 0 {
                            f.write_char('|')?;
                        }
                        c.write_at(f, Prec::Concat)?;
                    }
                    Ok(())
                }
                Hir::Repeat { sub, .. } => {
                    // `a{2}{3}` reads differently across dialects, so a repeated repeat is grouped.
                    // A repeated anchor (`^*`) is "nothing to repeat" in Python's `re`.
                    let inner = sub.unshared();
                    if matches!(inner, Hir::Repeat { .. } | Hir::Look(_)) || sub.prec() < Prec::Atom
                    {
                        f.write_str("(?:")?;
                        sub.write_at(f, Prec::Alternation)?;
                        f.write_str(")")?;
                    } else {
                        sub.write_at(f, Prec::Atom)?;
                    }
                    write_quantifier(self, f)
                }
                Hir::Intersection(children) => {
                    f.write_str("(?&")?;
                    for (i, c) in children.iter().enumerate() {
                        if i > 0 {
                            f.write_str("&&")?;
                        }
                        c.write_at(f, Prec::Alternation)?;
                    }
                    f.write_str(")")
                }
                Hir::Complement(sub) => {
                    f.write_str("(?~")?;
                    sub.write_at(f, Prec::Alternation)?;
                    f.write_str(")")
                }
                Hir::Shared(s) => s.hir.write_at(f, need),
                // Not a pattern: callers convert automata first (`json_schema::expand_shared`), and
                // this marker does not parse, so a slip cannot pass for a pattern.
                Hir::Automaton(a) => write!(f, "(?automaton:{})", a.dfa.num_states()),
                // Not patterns either: recursion has no regular expression.
                Hir::Call(c) => write!(f, "(?call:{})", c.index),
                Hir::Grammar(g) => {
                    write!(f, "(?grammar:")?;
                    g.start.write_at(f, Prec::Alternation)?;
                    for (i, r) in g.rules.iter().enumerate() {
                        write!(f, ";{i}=")?;
                        r.write_at(f, Prec::Alternation)?;
                    }
                    f.write_str(")")
                }
            }
        })
    }
}

impl fmt::Display for Hir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_at(f, Prec::Alternation)
    }
}

fn write_quantifier(h: &Hir, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if let Hir::Repeat { min, max, .. } = h {
        match (min, max) {
            (0, None) => f.write_str("*"),
            (1, None) => f.write_str("+"),
            (0, Some(1)) => f.write_str("?"),
            (m, None) => write!(f, "{{{m},}}"),
            (m, Some(n)) if m == n => write!(f, "{{{m}}}"),
            (m, Some(n)) => write!(f, "{{{m},{n}}}"),
        }
    } else {
        Ok(())
    }
}

/// Writes one code point so that it reads back as itself, inside a class or outside one.
fn write_char(f: &mut fmt::Formatter<'_>, c: u32, in_class: bool) -> fmt::Result {
    let special: &[u8] = if in_class {
        b"\\]^-["
    } else {
        b"\\.+*?()|[]{}^$&~"
    };
    match c {
        0x0A => f.write_str("\\n"),
        0x09 => f.write_str("\\t"),
        0x0D => f.write_str("\\r"),
        0x0C => f.write_str("\\f"),
        0x0B => f.write_str("\\v"),
        c if c < 0x80 && special.contains(&(c as u8)) => write!(f, "\\{}", c as u8 as char),
        c if c < 0x20 || c == 0x7F => write!(f, "\\x{c:02x}"),
        c if (0x80..0x100).contains(&c) => write!(f, "\\x{c:02x}"),
        c if (0xD800..=0xDFFF).contains(&c)
            || (0x100..0x10000).contains(&c) && !is_printable(c) =>
        {
            write!(f, "\\u{c:04x}")
        }
        c if c >= 0x10000 && !is_printable(c) => write!(f, "\\U{c:08x}"),
        c => match char::from_u32(c) {
            Some(ch) => f.write_char(ch),
            None => write!(f, "\\u{c:04x}"),
        },
    }
}

/// Printable enough to appear literally in a pattern: not a control, separator or private-use
/// code point. The check is deliberately coarse; anything it rejects is escaped, which is always
/// correct.
fn is_printable(c: u32) -> bool {
    !matches!(c, 0x80..=0x9F | 0x2000..=0x200F | 0x2028..=0x202F | 0xE000..=0xF8FF | 0xFFF0..=0xFFFF)
        && c < 0xF0000
}

fn write_class(f: &mut fmt::Formatter<'_>, set: &ClassSet) -> fmt::Result {
    // Surrogates never occur in text, and most dialects refuse them in a pattern, so the class is
    // printed as the scalar values it holds.
    let ranges = scalar_ranges(set);
    if ranges.is_empty() {
        // An empty class does not exist in most dialects; a negated full class does.
        return f.write_str("[^\\x00-\\U0010ffff]");
    }
    if ranges.len() == 1 && ranges[0].0 == ranges[0].1 {
        return write_char(f, ranges[0].0, false);
    }
    if ranges == [(0, 9), (11, MAX_CODE_POINT)] {
        return f.write_str(".");
    }
    let negated = scalar_ranges(&set.negate());
    let (prefix, body) = if !negated.is_empty() && negated.len() < ranges.len() {
        ("[^", negated)
    } else {
        ("[", ranges)
    };
    f.write_str(prefix)?;
    for (lo, hi) in body {
        write_char(f, lo, true)?;
        if hi > lo {
            if hi > lo + 1 {
                f.write_char('-')?;
            }
            write_char(f, hi, true)?;
        }
    }
    f.write_char(']')
}

/// The ranges of `set` without surrogates; ranges that meet across the surrogate block are
/// joined, so no endpoint is a surrogate but a range may span the block.
fn scalar_ranges(set: &ClassSet) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(set.ranges().len());
    let scalars = set.difference(&ClassSet::range(0xD800, 0xDFFF));
    for &(lo, hi) in scalars.ranges() {
        match out.last_mut() {
            Some(last) if last.1 == 0xD7FF && lo == 0xE000 => last.1 = hi,
            _ => out.push((lo, hi)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_set_normalizes() {
        let s = ClassSet::from_ranges([(5, 7), (1, 3), (4, 4), (10, 9)]);
        assert_eq!(s.ranges(), &[(1, 7)]);
        assert!(s.contains(4) && !s.contains(8));
    }

    #[test]
    fn negate_twice_is_identity() {
        let s = ClassSet::from_ranges([(0, 0), (5, 7), (MAX_CODE_POINT, MAX_CODE_POINT)]);
        assert_eq!(s.negate().negate(), s);
        assert_eq!(s.negate().ranges(), &[(1, 4), (8, MAX_CODE_POINT - 1)]);
    }

    #[test]
    fn intersect_and_difference() {
        let a = ClassSet::range(0, 10);
        let b = ClassSet::range(5, 20);
        assert_eq!(a.intersect(&b).ranges(), &[(5, 10)]);
        assert_eq!(a.difference(&b).ranges(), &[(0, 4)]);
    }

    fn small_set() -> impl proptest::strategy::Strategy<Value = ClassSet> {
        use proptest::prelude::*;
        prop::collection::vec((0u32..40, 0u32..6), 0..6)
            .prop_map(|v| ClassSet::from_ranges(v.into_iter().map(|(lo, w)| (lo, lo + w))))
    }

    proptest::proptest! {
        /// Set operations against membership, code point by code point, and the canonical form
        /// (sorted, disjoint, not adjacent) that equality and hashing rely on.
        #[test]
        fn set_operations_agree_with_membership(a in small_set(), b in small_set()) {
            let canonical = |s: &ClassSet| {
                s.ranges().windows(2).all(|w| w[0].1.saturating_add(1) < w[1].0)
                    && s.ranges().iter().all(|&(lo, hi)| lo <= hi)
            };
            let (u, i, d) = (a.union(&b), a.intersect(&b), a.difference(&b));
            for s in [&u, &i, &d] {
                proptest::prop_assert!(canonical(s), "{:?}", s.ranges());
            }
            for c in 0..50 {
                let (x, y) = (a.contains(c), b.contains(c));
                proptest::prop_assert_eq!(u.contains(c), x || y);
                proptest::prop_assert_eq!(i.contains(c), x && y);
                proptest::prop_assert_eq!(d.contains(c), x && !y);
            }
            let superset = (0..50).all(|c| !b.contains(c) || a.contains(c));
            proptest::prop_assert_eq!(a.is_superset(&b), superset);
        }
    }

    #[test]
    fn ascii_case_fold_adds_other_case() {
        let s = ClassSet::range('a' as u32, 'c' as u32).ascii_case_fold();
        assert_eq!(
            s.ranges(),
            &[('A' as u32, 'C' as u32), ('a' as u32, 'c' as u32)]
        );
    }

    #[test]
    fn constructors_fold_identities() {
        assert_eq!(
            Hir::concat([Hir::literal("a"), Hir::literal("b")]),
            Hir::literal("ab")
        );
        assert!(Hir::concat([Hir::literal("a"), Hir::nothing()]).is_nothing());
        assert_eq!(
            Hir::alternation([Hir::nothing(), Hir::literal("x")]),
            Hir::literal("x")
        );
        assert_eq!(
            Hir::repeat(Hir::literal("x"), 1, Some(1)),
            Hir::literal("x")
        );
        assert!(Hir::repeat(Hir::literal("x"), 3, Some(2)).is_nothing());
        // `(?:^)?` always matches the empty string; `(?:^){2,}` is `^`.
        assert_eq!(Hir::repeat(Hir::Look(Look::Start), 0, Some(1)), Hir::Empty);
        assert_eq!(Hir::repeat(Hir::Look(Look::End), 0, None), Hir::Empty);
        assert_eq!(
            Hir::repeat(Hir::Look(Look::Start), 2, None),
            Hir::Look(Look::Start)
        );
    }

    /// `depth` levels of `(x)(x)`, each level sharing the one below: 2^depth copies when
    /// expanded, `depth` small nodes when shared.
    fn doubling(depth: u32) -> Hir {
        let mut h = Hir::literal("ab");
        for _ in 0..depth {
            let s = Hir::shared(h);
            h = Hir::concat([s.clone(), Hir::literal("-"), s]);
        }
        h
    }

    #[test]
    fn shared_nodes_are_counted_once_and_expanded_on_demand() {
        let h = doubling(40);
        // Each level: the shared node and its concatenation of three.
        assert_eq!(h.unique_size_within(usize::MAX), Some(1 + 4 * 40));
        assert_eq!(h.unique_size_within(100), None);
        // Expanded, the same expression is astronomically large; measuring it stops at the limit.
        assert_eq!(h.expanded_size_within(1_000_000), None);
        let small = doubling(3);
        assert_eq!(small.to_string(), "ab-ab-ab-ab-ab-ab-ab-ab");
        // Expanded, a level is its concatenation, the `-` and two copies of the level below (the
        // shared node itself vanishes): 1, 4, 10, 22.
        assert_eq!(small.expanded_size_within(usize::MAX), Some(22));
    }

    #[test]
    fn shared_nodes_compare_by_identity_and_cache_their_properties() {
        let a = Hir::shared(Hir::repeat(Hir::literal("a"), 0, None));
        let b = Hir::shared(Hir::repeat(Hir::literal("a"), 0, None));
        assert_eq!(a, a.clone());
        assert_ne!(a, b);
        // Sharing a shared node or the empty language changes nothing.
        assert_eq!(Hir::shared(a.clone()), a);
        assert!(Hir::shared(Hir::nothing()).is_nothing());
        assert!(a.nullable() && !Hir::shared(Hir::literal("a")).nullable());
        let anchored = Hir::shared(Hir::concat([Hir::literal("a"), Hir::Look(Look::End)]));
        assert_eq!(anchored.anchors(), (false, true));
        assert_eq!(
            anchored.unshared(),
            &Hir::concat([Hir::literal("a"), Hir::Look(Look::End)])
        );
        // Printing looks through the node, grouping as its contents need.
        let rep = Hir::repeat(
            Hir::shared(Hir::repeat(Hir::literal("a"), 2, Some(2))),
            3,
            Some(3),
        );
        assert_eq!(rep.to_string(), "(?:a{2}){3}");
        let alt = Hir::concat([
            Hir::shared(Hir::alternation([Hir::literal("ab"), Hir::literal("c")])),
            Hir::literal("d"),
        ]);
        assert_eq!(alt.to_string(), "(?:ab|c)d");
    }

    #[test]
    fn display_groups_where_needed() {
        let h = Hir::concat([
            Hir::alternation([Hir::literal("ab"), Hir::literal("c")]),
            Hir::repeat(Hir::literal("de"), 0, None),
        ]);
        assert_eq!(h.to_string(), "(?:ab|c)(?:de)*");
        let nested = Hir::repeat(Hir::repeat(Hir::literal("a"), 2, Some(2)), 3, Some(3));
        assert_eq!(nested.to_string(), "(?:a{2}){3}");
    }

    #[test]
    fn display_classes_in_every_dialect() {
        // The full class has an empty negation, which must not print as `[^]`.
        assert_eq!(Hir::any_char().to_string(), "[\\x00-\\U0010ffff]");
        assert_eq!(Hir::nothing().to_string(), "[^\\x00-\\U0010ffff]");
        // Surrogate endpoints are clipped to the scalar values the class holds.
        assert_eq!(
            Hir::class(ClassSet::range(0xD000, 0xD900)).to_string(),
            "[\u{D000}-\u{D7FF}]"
        );
        let scalars = ClassSet::from_ranges([(0, 0xD7FF), (0xE000, MAX_CODE_POINT)]);
        assert_eq!(Hir::class(scalars).to_string(), "[\\x00-\\U0010ffff]");
        assert_eq!(
            Hir::class(ClassSet::range(0xD800, 0xDFFF)).to_string(),
            "[^\\x00-\\U0010ffff]"
        );
        let around = ClassSet::from_ranges([(0x41, 0x41), (0xD7FF, 0xE000)]);
        assert_eq!(Hir::class(around).to_string(), "[A\u{D7FF}-\\ue000]");
        // A repeated anchor is the anchor (it must hold), or nothing when it may be skipped.
        assert_eq!(
            Hir::repeat(Hir::Look(Look::Start), 2, None).to_string(),
            "^"
        );
        assert_eq!(Hir::repeat(Hir::Look(Look::End), 0, Some(3)), Hir::Empty);
        // A repeated anchor is grouped.
        let repeated = Hir::Repeat {
            sub: Box::new(Hir::Look(Look::Start)),
            min: 2,
            max: None,
        };
        assert_eq!(repeated.to_string(), "(?:^){2,}");
    }
}
