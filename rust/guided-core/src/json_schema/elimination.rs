//! Small automata built by hand, and the way back from an automaton to an expression.
//!
//! A few schema constraints are most naturally automata, not expressions: "the digits read so far
//! leave remainder `r` modulo the step" is a residue counter, not a pattern anyone would write.
//! [`SmallDfa`] is where such an automaton is written down, over a small alphabet of symbols;
//! [`SmallDfa::to_byte_dfa`] turns it into a minimized byte automaton, which the compiler carries
//! in its expression as it is ([`Hir::automaton`]) and the NFA embeds without ever needing an
//! expression for it.
//!
//! Printing a pattern does need one. State elimination gives it: add a fresh start and a fresh
//! final state, then remove the original states one by one, replacing every path `i -> k -> j` by
//! the edge `i -> j : R(i,k) R(k,k)* R(k,j)`. What remains on the edge from the fresh start to the
//! fresh final state denotes the automaton's language.
//!
//! The price is size: each elimination can multiply expression sizes, and for dense automata the
//! result grows exponentially with the number of states (a residue counter modulo 37 has no
//! printable expression). The automaton is therefore minimized first (Moore's partition
//! refinement; these automata have at most a few thousand states), states are removed cheapest
//! first (fewest predecessor-successor pairs), and a node budget stops the construction with
//! `None` as soon as the edges outgrow it. The caller turns that into a typed error.

use std::collections::{HashMap, HashSet};

use crate::dfa::{ByteClasses, Dfa, Raw};
use crate::regex::{ClassSet, Hir};

/// A complete deterministic automaton over the symbols `0..alphabet`.
#[derive(Clone, Debug)]
pub(crate) struct SmallDfa {
    alphabet: usize,
    trans: Vec<usize>,
    /// Accepting states.
    pub(crate) accept: Vec<bool>,
    /// The start state.
    pub(crate) start: usize,
}

impl SmallDfa {
    /// An automaton with `states` states, all transitions to state 0, nothing accepting.
    pub(crate) fn new(states: usize, alphabet: usize) -> SmallDfa {
        SmallDfa {
            alphabet,
            trans: vec![0; states * alphabet],
            accept: vec![false; states],
            start: 0,
        }
    }

    fn len(&self) -> usize {
        self.accept.len()
    }

    /// Sets the transition from `s` on `sym` to `t`.
    pub(crate) fn set(&mut self, s: usize, sym: usize, t: usize) {
        self.trans[s * self.alphabet + sym] = t;
    }

    fn next(&self, s: usize, sym: usize) -> usize {
        self.trans[s * self.alphabet + sym]
    }

    /// The same language as a minimized byte automaton, where byte `b` reads symbol
    /// `symbol_of(b)` (and bytes without a symbol lead nowhere).
    pub(crate) fn to_byte_dfa(&self, symbol_of: impl Fn(u8) -> Option<usize>) -> Dfa {
        // Byte classes: one per symbol, and one for the bytes without.
        let classes = ByteClasses::from_keys(&symbol_of);
        let k = classes.num_classes();
        let rep_symbol: Vec<Option<usize>> = classes
            .representatives()
            .iter()
            .map(|&b| symbol_of(b))
            .collect();
        // The raw numbering wants the dead state at 0 and the start at 1: a fresh dead state,
        // then the start, then the rest in order (minimization merges this automaton's own sinks
        // into the fresh one).
        let n = self.len();
        let id = |s: usize| -> u32 {
            if s == self.start {
                1
            } else if s < self.start {
                s as u32 + 2
            } else {
                s as u32 + 1
            }
        };
        let mut table = vec![0u32; (n + 1) * k];
        let mut accepting = vec![false; n + 1];
        for s in 0..n {
            let row = id(s) as usize;
            accepting[row] = self.accept[s];
            for (c, sym) in rep_symbol.iter().enumerate() {
                if let Some(sym) = sym {
                    table[row * k + c] = id(self.next(s, *sym));
                }
            }
        }
        Dfa::from_raw(Raw {
            classes,
            table,
            accepting,
        })
    }

    /// The minimal equivalent automaton (unreachable states dropped, equivalent states merged).
    pub(crate) fn minimize(&self) -> SmallDfa {
        // Reachable states only.
        let mut seen = vec![false; self.len()];
        let mut order = vec![self.start];
        seen[self.start] = true;
        let mut i = 0;
        while i < order.len() {
            let s = order[i];
            i += 1;
            for sym in 0..self.alphabet {
                let t = self.next(s, sym);
                if !seen[t] {
                    seen[t] = true;
                    order.push(t);
                }
            }
        }
        // Moore refinement: split classes by (class, successor classes) until stable.
        let mut class: Vec<usize> = vec![0; self.len()];
        for &s in &order {
            class[s] = usize::from(self.accept[s]);
        }
        let mut count = 0;
        loop {
            let mut ids: HashMap<Vec<usize>, usize> = HashMap::new();
            let mut next_class = vec![0; self.len()];
            for &s in &order {
                let mut key = Vec::with_capacity(self.alphabet + 1);
                key.push(class[s]);
                key.extend((0..self.alphabet).map(|sym| class[self.next(s, sym)]));
                let fresh = ids.len();
                next_class[s] = *ids.entry(key).or_insert(fresh);
            }
            let n = ids.len();
            class = next_class;
            if n == count {
                break;
            }
            count = n;
        }
        let mut out = SmallDfa::new(count, self.alphabet);
        for &s in &order {
            let c = class[s];
            out.accept[c] = self.accept[s];
            for sym in 0..self.alphabet {
                out.set(c, sym, class[self.next(s, sym)]);
            }
        }
        out.start = class[self.start];
        out
    }
}

/// An expression for the language of `dfa`, spelling symbol `s` as `symbol(s)`; `None` when the
/// expression would exceed `max_nodes`.
pub(crate) fn eliminate(
    dfa: &SmallDfa,
    symbol: &dyn Fn(usize) -> Hir,
    max_nodes: usize,
) -> Option<Hir> {
    let n = dfa.len();
    // States that can still reach acceptance; the others only carry dead transitions.
    let mut live = dfa.accept.clone();
    loop {
        let mut changed = false;
        for s in 0..n {
            if !live[s] && (0..dfa.alphabet).any(|sym| live[dfa.next(s, sym)]) {
                live[s] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    if !live[dfa.start] {
        return Some(Hir::nothing());
    }
    // Nodes n and n + 1 are the fresh start and final states.
    let (start, fin) = (n, n + 1);
    let mut edges = Edges::new(n + 2, max_nodes);
    edges.add(start, dfa.start, Hir::Empty)?;
    for s in (0..n).filter(|&s| live[s]) {
        if dfa.accept[s] {
            edges.add(s, fin, Hir::Empty)?;
        }
        for sym in 0..dfa.alphabet {
            let t = dfa.next(s, sym);
            if live[t] {
                edges.add(s, t, symbol(sym))?;
            }
        }
    }
    let mut remaining: Vec<usize> = (0..n).filter(|&s| live[s]).collect();
    while !remaining.is_empty() {
        // Cheapest state first: fewest paths through it.
        let (pos, &k) = remaining
            .iter()
            .enumerate()
            .min_by_key(|&(_, &k)| edges.paths_through(k))?;
        remaining.swap_remove(pos);
        let loop_star = edges
            .take(k, k)
            .map(|l| Hir::repeat(l, 0, None))
            .unwrap_or(Hir::Empty);
        let ins: Vec<usize> = edges.into[k].iter().copied().collect();
        let outs: Vec<usize> = edges.out[k].keys().copied().collect();
        let ins: Vec<(usize, Hir)> = ins
            .into_iter()
            .filter_map(|i| Some((i, edges.take(i, k)?)))
            .collect();
        let outs: Vec<(usize, Hir)> = outs
            .into_iter()
            .filter_map(|j| Some((j, edges.take(k, j)?)))
            .collect();
        for (i, a) in &ins {
            for (j, b) in &outs {
                edges.add(
                    *i,
                    *j,
                    Hir::concat([a.clone(), loop_star.clone(), b.clone()]),
                )?;
            }
        }
    }
    Some(edges.take(start, fin).unwrap_or_else(Hir::nothing))
}

/// The edges of a state-elimination graph: each node's successors with their expressions, its
/// predecessors, and the running size of all expressions.
///
/// Kept per node, so that choosing and removing a state costs its own edges, not a scan of the
/// graph; and sized as edges change, so that the budget is checked without re-measuring every
/// expression after each step. Both matter: automata of a few thousand states took minutes
/// when every step rescanned the edges and re-measured the expressions.
struct Edges {
    out: Vec<HashMap<usize, (Hir, usize)>>,
    into: Vec<HashSet<usize>>,
    /// Sum of the edges' sizes ([`Hir::unique_size`] of each).
    size: usize,
    max_nodes: usize,
    /// Nodes measured so far, over all steps: a step may replace edges without growing the
    /// total, so the total alone would not bound the time.
    work: usize,
}

/// Work allowed per node of the size budget (see [`Edges::work`]).
const WORK_PER_NODE: usize = 16;

impl Edges {
    fn new(nodes: usize, max_nodes: usize) -> Self {
        Edges {
            out: vec![HashMap::new(); nodes],
            into: vec![HashSet::new(); nodes],
            size: 0,
            max_nodes,
            work: 0,
        }
    }

    /// Paths `i -> k -> j` through `k` that eliminating it creates (self-loops aside).
    fn paths_through(&self, k: usize) -> usize {
        let looped = usize::from(self.out[k].contains_key(&k));
        (self.into[k].len() - looped) * (self.out[k].len() - looped)
    }

    /// Removes the edge `i -> j`, returning its expression.
    fn take(&mut self, i: usize, j: usize) -> Option<Hir> {
        let (h, size) = self.out[i].remove(&j)?;
        self.into[j].remove(&i);
        self.size -= size;
        Some(h)
    }

    /// Adds `h` to the edge `i -> j` as an alternative; `None` past the size or work budget.
    fn add(&mut self, i: usize, j: usize, h: Hir) -> Option<()> {
        let h = match self.take(i, j) {
            Some(e) => Hir::alternation([e, h]),
            None => h,
        };
        let room = self.max_nodes.checked_sub(self.size)?;
        let size = h.unique_size_within(room)?;
        self.work += size;
        if self.work > self.max_nodes.saturating_mul(WORK_PER_NODE) {
            return None;
        }
        self.size += size;
        self.out[i].insert(j, (h, size));
        self.into[j].insert(i);
        Some(())
    }
}

/// An expression for the language of `dfa` read from `state`, for printing an [`Hir::Automaton`];
/// `None` past `max_nodes`, or when a byte outside ASCII leads anywhere (a class of such bytes is
/// not a set of code points; the automata the compiler builds read ASCII only).
pub(crate) fn automaton_expression(dfa: &Dfa, state: u32, max_nodes: usize) -> Option<Hir> {
    let classes = dfa.classes();
    let k = classes.num_classes();
    let mut small = SmallDfa::new(dfa.num_states(), k);
    let mut sets = Vec::with_capacity(k);
    for c in 0..k as u8 {
        let members: Vec<u8> = classes.members(c).collect();
        let ascii = members.iter().all(|b| b.is_ascii());
        let leads = (0..dfa.num_states() as u32).any(|s| dfa.next_class(s, c) != dfa.dead());
        if leads && !ascii {
            return None;
        }
        sets.push(ClassSet::from_ranges(
            members.iter().map(|&b| (u32::from(b), u32::from(b))),
        ));
        for s in 0..dfa.num_states() {
            small.set(s, c as usize, dfa.next_class(s as u32, c) as usize);
        }
    }
    for s in 0..dfa.num_states() {
        small.accept[s] = dfa.is_accepting(s as u32);
    }
    small.start = state as usize;
    let symbol = |c: usize| Hir::class(sets[c].clone());
    eliminate(&small.minimize(), &symbol, max_nodes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_schema::matcher::matches;

    /// Binary numbers divisible by 3, as a residue automaton.
    #[test]
    fn residue_automaton_round_trips() {
        let mut dfa = SmallDfa::new(3, 2);
        for r in 0..3 {
            for b in 0..2 {
                dfa.set(r, b, (2 * r + b) % 3);
            }
        }
        dfa.accept[0] = true;
        let h = eliminate(
            &dfa.minimize(),
            &|s| Hir::literal(if s == 0 { "0" } else { "1" }),
            10_000,
        )
        .unwrap();
        for v in 0u32..200 {
            let s = format!("{v:b}");
            assert_eq!(matches(&h, &s), v % 3 == 0, "{s}: {h}");
        }
        assert!(eliminate(&dfa, &|_| Hir::literal("x"), 3).is_none());
    }

    #[test]
    fn minimize_merges_equivalent_states() {
        // Four states counting parity twice over: two classes remain.
        let mut dfa = SmallDfa::new(4, 1);
        for s in 0..4 {
            dfa.set(s, 0, (s + 1) % 4);
        }
        dfa.accept[0] = true;
        dfa.accept[2] = true;
        assert_eq!(dfa.minimize().len(), 2);
    }
}
