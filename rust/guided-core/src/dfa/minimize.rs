//! DFA minimization: partition refinement over live transitions, then a canonical numbering.
//!
//! Subset construction gives a correct DFA, but not the smallest one: `(a|b)*` and `(a*b*)*`
//! determinize to different tables for one language. Merging states that accept the same
//! continuations gives the minimal DFA, which is unique up to the numbering of its states. Two
//! things follow for the rest of the library: the token index has fewer states to compute masks
//! for, and a state count is a property of the language, so tests and caches can rely on it.
//!
//! The algorithm is Valmari and Lehtinen's refinement for DFAs with a *partial* transition function
//! ("Efficient minimization of DFAs with partial transition functions", 2008, in the compact form
//! of Valmari's "Fast brief practical DFA minimization", 2012). It matters here because our tables
//! are mostly dead: a state inside a UTF-8 character reads a handful of the classes and sends the
//! rest to the dead state. Hopcroft's classic algorithm pays for every (block, class) pair whether
//! or not a transition exists; this one refines two partitions side by side, the states into
//! blocks and the live transitions into "cords" (transitions with one label and one target block),
//! and its work is `O(m log n)` in the number `m` of transitions that do not lead to the dead state.
//! States that cannot reach an accepting state are dropped first: they are all the dead state.
//!
//! Both partitions are one permutation array each, with a set owning a contiguous range of it;
//! marking an element swaps it to the front of its set, and splitting a set moves a boundary and
//! renames the smaller half. Memory is a few `u32` arrays of length `m` (about 40 bytes per live
//! transition) and of length `n`.
//!
//! The blocks are then numbered by a breadth-first walk from the start over the classes in byte
//! order, dead state first. That order depends only on the language, so equal languages give equal
//! tables.

use super::Raw;

/// The minimal DFA equivalent to `raw`, with state 0 dead, state 1 the start, and the other
/// states numbered breadth-first in class order. `raw` must have state 1 as its start; states
/// from which nothing is accepted (state 0 among them) become the dead state. The classes are
/// kept.
pub(crate) fn minimize(raw: &Raw) -> Raw {
    let n = raw.accepting.len();
    let k = raw.classes.num_classes();
    let mut tr = Transitions::default();
    for s in 1..n {
        for c in 0..k {
            let t = raw.table[s * k + c];
            if t != 0 {
                tr.push(s as u32, c as u32, t);
            }
        }
    }
    let mut blocks = Partition::new(n);
    let mut marked = vec![0u32; n.max(1)];
    let mut touched = Vec::new();

    // Keep the states reachable from the start, then those of them that reach an accepting state.
    blocks.keep_reachable(&mut tr, 1, n);
    let reachable = blocks.past[0];
    let finals: Vec<u32> = (0..n as u32)
        .filter(|&q| raw.accepting[q as usize] && blocks.loc[q as usize] < reachable)
        .collect();
    let num_finals = blocks.keep_co_reachable(&mut tr, &finals, n);
    let live_count = blocks.past[0];
    let live: Vec<bool> = (0..n).map(|q| blocks.loc[q] < live_count).collect();
    if n < 2 || !live[1] {
        // The language is empty; keep a separate start state all the same.
        return Raw {
            classes: raw.classes.clone(),
            table: vec![0; 2 * k],
            accepting: vec![false, false],
        };
    }

    // Accepting against the rest.
    marked[0] = num_finals as u32;
    touched.push(0);
    blocks.split(&mut marked, &mut touched);

    // Cords: the transitions grouped by label, to be split by target block.
    let m = tr.tail.len();
    let mut cords = Partition::new(m);
    let mut cord_marked = vec![0u32; m.max(1)];
    if m > 0 {
        cords.sort_by_label(&tr.label, k);
    }
    let (adj_start, adj) = adjacency(&tr.head, n);
    let (mut b, mut c) = (1usize, 0usize);
    while c < cords.sets {
        for i in cords.first[c]..cords.past[c] {
            let t = cords.elems[i as usize] as usize;
            blocks.mark(tr.tail[t], &mut marked, &mut touched);
        }
        blocks.split(&mut marked, &mut touched);
        c += 1;
        while b < blocks.sets {
            for i in blocks.first[b]..blocks.past[b] {
                let q = blocks.elems[i as usize] as usize;
                for &t in &adj[adj_start[q] as usize..adj_start[q + 1] as usize] {
                    cords.mark(t, &mut cord_marked, &mut touched);
                }
            }
            cords.split(&mut cord_marked, &mut touched);
            b += 1;
        }
    }
    renumber(raw, &blocks.set_of, &live, k)
}

/// The live transitions as three parallel arrays.
#[derive(Default)]
struct Transitions {
    tail: Vec<u32>,
    label: Vec<u32>,
    head: Vec<u32>,
}

impl Transitions {
    fn push(&mut self, tail: u32, label: u32, head: u32) {
        self.tail.push(tail);
        self.label.push(label);
        self.head.push(head);
    }

    /// Keeps the transitions for which `keep` holds, in order.
    fn retain(&mut self, keep: impl Fn(usize) -> bool) {
        let mut j = 0;
        for t in 0..self.tail.len() {
            if keep(t) {
                self.tail[j] = self.tail[t];
                self.label[j] = self.label[t];
                self.head[j] = self.head[t];
                j += 1;
            }
        }
        self.tail.truncate(j);
        self.label.truncate(j);
        self.head.truncate(j);
    }
}

/// Transitions grouped by `key` (their tail or head): those of state `q` are
/// `adj[start[q]..start[q + 1]]`.
fn adjacency(key: &[u32], n: usize) -> (Vec<u32>, Vec<u32>) {
    let mut start = vec![0u32; n + 1];
    for &q in key {
        start[q as usize + 1] += 1;
    }
    for q in 0..n {
        start[q + 1] += start[q];
    }
    let mut fill = start.clone();
    let mut adj = vec![0u32; key.len()];
    for (t, &q) in key.iter().enumerate() {
        adj[fill[q as usize] as usize] = t as u32;
        fill[q as usize] += 1;
    }
    (start, adj)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Backward,
}

/// A partition of `0..n`: set `s` owns `elems[first[s]..past[s]]`, `loc` inverts `elems`.
struct Partition {
    sets: usize,
    elems: Vec<u32>,
    loc: Vec<u32>,
    set_of: Vec<u32>,
    first: Vec<u32>,
    past: Vec<u32>,
}

impl Partition {
    /// One set holding everything (none when `n` is 0).
    fn new(n: usize) -> Self {
        let mut past = vec![0u32; n.max(1)];
        past[0] = n as u32;
        Partition {
            sets: usize::from(n > 0),
            elems: (0..n as u32).collect(),
            loc: (0..n as u32).collect(),
            set_of: vec![0; n],
            first: vec![0; n.max(1)],
            past,
        }
    }

    /// Moves `e` into the marked prefix of its set.
    fn mark(&mut self, e: u32, marked: &mut [u32], touched: &mut Vec<u32>) {
        let s = self.set_of[e as usize] as usize;
        let i = self.loc[e as usize] as usize;
        let j = (self.first[s] + marked[s]) as usize;
        let other = self.elems[j];
        self.elems[i] = other;
        self.loc[other as usize] = i as u32;
        self.elems[j] = e;
        self.loc[e as usize] = j as u32;
        if marked[s] == 0 {
            touched.push(s as u32);
        }
        marked[s] += 1;
    }

    /// Splits every touched set into its marked and unmarked parts; the smaller part gets the
    /// new id.
    fn split(&mut self, marked: &mut [u32], touched: &mut Vec<u32>) {
        while let Some(s) = touched.pop() {
            let s = s as usize;
            let j = self.first[s] + marked[s];
            if j == self.past[s] {
                marked[s] = 0;
                continue;
            }
            let z = self.sets;
            if marked[s] <= self.past[s] - j {
                self.first[z] = self.first[s];
                self.past[z] = j;
                self.first[s] = j;
            } else {
                self.past[z] = self.past[s];
                self.first[z] = j;
                self.past[s] = j;
            }
            for i in self.first[z]..self.past[z] {
                self.set_of[self.elems[i as usize] as usize] = z as u32;
            }
            marked[s] = 0;
            marked[z] = 0;
            self.sets += 1;
        }
    }

    /// Moves `q` into the reached prefix `elems[..*reached]` if it is not there yet.
    fn reach(&mut self, q: u32, reached: &mut u32) {
        let i = self.loc[q as usize];
        if i >= *reached {
            let other = self.elems[*reached as usize];
            self.elems[i as usize] = other;
            self.loc[other as usize] = i;
            self.elems[*reached as usize] = q;
            self.loc[q as usize] = *reached;
            *reached += 1;
        }
    }

    /// Completes the reached prefix along the transitions in `direction`, shrinks set 0 to it,
    /// and drops the transitions that leave it.
    fn close(&mut self, tr: &mut Transitions, mut reached: u32, n: usize, direction: Direction) {
        let (from, to) = match direction {
            Direction::Forward => (&tr.tail, &tr.head),
            Direction::Backward => (&tr.head, &tr.tail),
        };
        let (start, adj) = adjacency(from, n);
        let mut i = 0;
        while i < reached {
            let q = self.elems[i as usize] as usize;
            for &t in &adj[start[q] as usize..start[q + 1] as usize] {
                self.reach(to[t as usize], &mut reached);
            }
            i += 1;
        }
        let from = from.clone();
        tr.retain(|t| self.loc[from[t] as usize] < reached);
        self.past[0] = reached;
    }

    fn keep_reachable(&mut self, tr: &mut Transitions, start: u32, n: usize) {
        let mut reached = 0;
        if (start as usize) < n {
            self.reach(start, &mut reached);
        }
        self.close(tr, reached, n, Direction::Forward);
    }

    /// Keeps the states that reach one of `finals`, which come first; returns how many finals.
    fn keep_co_reachable(&mut self, tr: &mut Transitions, finals: &[u32], n: usize) -> usize {
        let mut reached = 0;
        for &q in finals {
            self.reach(q, &mut reached);
        }
        self.close(tr, reached, n, Direction::Backward);
        finals.len()
    }

    /// Regroups the elements (transitions) into one set per label.
    fn sort_by_label(&mut self, label: &[u32], k: usize) {
        let (start, order) = adjacency(label, k);
        self.elems.copy_from_slice(&order);
        self.sets = 0;
        for c in 0..k {
            let (lo, hi) = (start[c], start[c + 1]);
            if lo == hi {
                continue;
            }
            self.first[self.sets] = lo;
            self.past[self.sets] = hi;
            for i in lo..hi {
                let t = self.elems[i as usize] as usize;
                self.set_of[t] = self.sets as u32;
                self.loc[t] = i;
            }
            self.sets += 1;
        }
    }
}

/// Builds the quotient table, numbering blocks dead first, then breadth-first from the start.
fn renumber(raw: &Raw, block_of: &[u32], live: &[bool], k: usize) -> Raw {
    let n = raw.accepting.len();
    let num_blocks = (0..n)
        .filter(|&q| live[q])
        .map(|q| block_of[q] as usize + 1)
        .max()
        .unwrap_or(0);
    // One member of each block: any will do, members agree on everything.
    let mut member = vec![u32::MAX; num_blocks];
    for q in (0..n).rev() {
        if live[q] {
            member[block_of[q] as usize] = q as u32;
        }
    }
    const UNSEEN: u32 = u32::MAX;
    let mut new_id = vec![UNSEEN; num_blocks];
    new_id[block_of[1] as usize] = 1;
    let mut order = vec![block_of[1]];
    let mut table = vec![0u32; k];
    let mut accepting = vec![false];
    let mut i = 0;
    while i < order.len() {
        let q = member[order[i] as usize] as usize;
        for c in 0..k {
            let t = raw.table[q * k + c] as usize;
            if !live[t] {
                table.push(0);
                continue;
            }
            let b = block_of[t] as usize;
            if new_id[b] == UNSEEN {
                new_id[b] = order.len() as u32 + 1;
                order.push(b as u32);
            }
            table.push(new_id[b]);
        }
        accepting.push(raw.accepting[q]);
        i += 1;
    }
    Raw {
        classes: raw.classes.clone(),
        table,
        accepting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dfa::ByteClasses;
    use proptest::prelude::*;

    /// Moore's algorithm, the slow obvious way: refine by (block, successor blocks) signatures
    /// until nothing changes. The oracle for Hopcroft's block count.
    fn moore_blocks(table: &[u32], accepting: &[bool], n: usize, k: usize) -> usize {
        let mut block: Vec<usize> = accepting.iter().map(|&a| usize::from(a)).collect();
        loop {
            let mut ids = std::collections::HashMap::new();
            let next: Vec<usize> = (0..n)
                .map(|s| {
                    let sig: Vec<usize> = std::iter::once(block[s])
                        .chain((0..k).map(|c| block[table[s * k + c] as usize]))
                        .collect();
                    let len = ids.len();
                    *ids.entry(sig).or_insert(len)
                })
                .collect();
            let before = block.iter().collect::<std::collections::HashSet<_>>().len();
            if ids.len() == before {
                return ids.len();
            }
            block = next;
        }
    }

    fn reachable(table: &[u32], k: usize) -> usize {
        let mut seen = vec![false; table.len() / k];
        let mut stack = vec![1usize];
        seen[0] = true;
        seen[1] = true;
        while let Some(s) = stack.pop() {
            for c in 0..k {
                let t = table[s * k + c] as usize;
                if !seen[t] {
                    seen[t] = true;
                    stack.push(t);
                }
            }
        }
        seen.iter().filter(|&&x| x).count()
    }

    /// Random complete DFAs with state 0 dead and state 1 the start, over `k` classes.
    fn random_dfa() -> impl Strategy<Value = (Vec<u32>, Vec<bool>, usize)> {
        (2usize..40, 1usize..5).prop_flat_map(|(n, k)| {
            (
                proptest::collection::vec(0..n as u32, n * k),
                proptest::collection::vec(any::<bool>(), n),
                Just(k),
            )
                .prop_map(move |(mut table, mut acc, k)| {
                    table[..k].iter_mut().for_each(|t| *t = 0);
                    acc[0] = false;
                    (table, acc, k)
                })
        })
    }

    fn raw(table: Vec<u32>, accepting: Vec<bool>, k: usize) -> Raw {
        Raw {
            classes: ByteClasses::from_keys(|b| (b as usize % k) as u8),
            table,
            accepting,
        }
    }

    /// Whether two DFAs (state 1 start) accept the same strings, by a product walk.
    fn equivalent(a: &Raw, b: &Raw, k: usize) -> bool {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![(1u32, 1u32)];
        while let Some((x, y)) = stack.pop() {
            if !seen.insert((x, y)) {
                continue;
            }
            if a.accepting[x as usize] != b.accepting[y as usize] {
                return false;
            }
            for c in 0..k {
                stack.push((a.table[x as usize * k + c], b.table[y as usize * k + c]));
            }
        }
        true
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn hopcroft_agrees_with_moore((table, accepting, k) in random_dfa()) {
            let n = accepting.len();
            let input = raw(table, accepting, k);
            let out = minimize(&input);
            // Restrict the oracle to reachable states (plus dead), as the renumbering does.
            let reach = {
                let mut seen = vec![false; n];
                let mut stack = vec![1usize];
                seen[0] = true;
                seen[1] = true;
                while let Some(s) = stack.pop() {
                    for c in 0..k {
                        let t = input.table[s * k + c] as usize;
                        if !seen[t] { seen[t] = true; stack.push(t); }
                    }
                }
                seen
            };
            let keep: Vec<usize> = (0..n).filter(|&s| reach[s]).collect();
            let index: std::collections::HashMap<usize, u32> =
                keep.iter().enumerate().map(|(i, &s)| (s, i as u32)).collect();
            let sub_table: Vec<u32> = keep.iter()
                .flat_map(|&s| (0..k).map(|c| index[&(input.table[s * k + c] as usize)]).collect::<Vec<_>>())
                .collect();
            let sub_acc: Vec<bool> = keep.iter().map(|&s| input.accepting[s]).collect();
            let expected = moore_blocks(&sub_table, &sub_acc, keep.len(), k);
            let empty = !sub_acc.iter().any(|&a| a);
            let got = out.accepting.len();
            // An empty language keeps a separate start state.
            prop_assert!(got == expected || (empty && got == 2), "{} vs {}", got, expected);
            prop_assert!(equivalent(&input, &out, k));
            prop_assert_eq!(reachable(&out.table, k), got);
            prop_assert!(!out.accepting[0]);
            prop_assert!(out.table[..k].iter().all(|&t| t == 0));
            // Idempotent and canonical.
            let again = minimize(&out);
            prop_assert_eq!(&again.table, &out.table);
            prop_assert_eq!(&again.accepting, &out.accepting);
        }
    }

    #[test]
    fn merges_equivalent_states() {
        // 1 -a-> 2, 1 -b-> 3, 2 and 3 both accept and loop: 2 and 3 are one state.
        let k = 2;
        let table = vec![0, 0, 2, 3, 2, 3, 2, 3];
        let out = minimize(&raw(table, vec![false, false, true, true], k));
        assert_eq!(out.accepting, vec![false, false, true]);
        assert_eq!(out.table, vec![0, 0, 2, 2, 2, 2]);
    }
}
