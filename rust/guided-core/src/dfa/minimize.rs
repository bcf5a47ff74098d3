//! DFA minimization: Hopcroft's partition refinement, then a canonical numbering.
//!
//! Subset construction gives a correct DFA, but not the smallest one: `(a|b)*` and `(a*b*)*`
//! determinize to different tables for one language. Merging states that accept the same
//! continuations gives the minimal DFA, which is unique up to the numbering of its states. Two
//! things follow for the rest of the library: the token index has fewer states to compute masks
//! for, and a state count is a property of the language, so tests and caches can rely on it.
//!
//! Hopcroft's algorithm starts from two blocks, accepting and not, and splits blocks until no
//! block has states that disagree on which block a symbol leads to. It keeps a worklist of
//! splitters (a block and a class); processing one marks every state with a transition into the
//! block on the class, and splits each block that is only partly marked. Adding only the smaller
//! half of a split block to the worklist (when the block is not already waiting) is what bounds
//! the total work by `O(k n log n)` for `n` states and `k` classes. Blocks are ranges of one
//! permutation array, with marked states swapped to the front of their block, so a split is a
//! few index updates; predecessors come from a reverse transition table built once (`n * k`
//! entries, the same size as the table itself).
//!
//! The blocks are then numbered by a breadth-first walk from the start over the classes in byte
//! order, with the block of the dead state first. That order depends only on the language, so
//! equal languages give equal tables.

use super::Raw;

/// The minimal DFA equivalent to `raw`, with state 0 dead, state 1 the start, and the other
/// states numbered breadth-first in byte order. `raw` must have state 0 dead (non-accepting,
/// looping on every class) and state 1 as start; its classes are kept.
pub(crate) fn minimize(raw: &Raw) -> Raw {
    let n = raw.accepting.len();
    let k = raw.classes.num_classes();
    let block_of = refine(&raw.table, &raw.accepting, n, k);
    renumber(raw, &block_of, k)
}

/// Hopcroft's refinement: the block of every state in the coarsest partition compatible with
/// acceptance and transitions.
fn refine(table: &[u32], accepting: &[bool], n: usize, k: usize) -> Vec<u32> {
    // Reverse transitions, grouped by (target, class).
    let mut offsets = vec![0u32; n * k + 1];
    for s in 0..n {
        for c in 0..k {
            offsets[table[s * k + c] as usize * k + c + 1] += 1;
        }
    }
    for i in 1..offsets.len() {
        offsets[i] += offsets[i - 1];
    }
    let mut fill = offsets.clone();
    let mut preds = vec![0u32; n * k];
    for s in 0..n {
        for c in 0..k {
            let slot = &mut fill[table[s * k + c] as usize * k + c];
            preds[*slot as usize] = s as u32;
            *slot += 1;
        }
    }

    // The partition: `elems` is a permutation of the states; block b owns
    // `elems[blocks[b].start..blocks[b].end]`, of which the first `marked - start` are marked.
    let mut elems: Vec<u32> = (0..n as u32).filter(|&s| accepting[s as usize]).collect();
    let split = elems.len();
    elems.extend((0..n as u32).filter(|&s| !accepting[s as usize]));
    let mut loc = vec![0u32; n];
    for (i, &s) in elems.iter().enumerate() {
        loc[s as usize] = i as u32;
    }
    let mut blocks: Vec<Block> = Vec::new();
    let mut block_of = vec![0u32; n];
    for (start, end) in [(0, split), (split, n)] {
        if start < end {
            let b = blocks.len() as u32;
            for &s in &elems[start..end] {
                block_of[s as usize] = b;
            }
            blocks.push(Block {
                start: start as u32,
                end: end as u32,
                marked: start as u32,
            });
        }
    }

    let mut waiting: Vec<(u32, u32)> = Vec::new();
    let mut in_waiting: Vec<bool> = vec![false; blocks.len() * k];
    if blocks.len() == 2 {
        let smaller = if blocks[0].len() <= blocks[1].len() {
            0
        } else {
            1
        };
        for c in 0..k as u32 {
            waiting.push((smaller, c));
            in_waiting[smaller as usize * k + c as usize] = true;
        }
    }

    let mut splitter: Vec<u32> = Vec::new();
    let mut touched: Vec<u32> = Vec::new();
    while let Some((b, c)) = waiting.pop() {
        in_waiting[b as usize * k + c as usize] = false;
        // Copy the splitter first: marking moves states inside blocks, this one included.
        let blk = blocks[b as usize];
        splitter.clear();
        splitter.extend_from_slice(&elems[blk.start as usize..blk.end as usize]);
        for &t in &splitter {
            let i = t as usize * k + c as usize;
            for &s in &preds[offsets[i] as usize..offsets[i + 1] as usize] {
                let sb = block_of[s as usize] as usize;
                let pos = loc[s as usize];
                let block = &mut blocks[sb];
                if pos < block.marked {
                    continue;
                }
                if block.marked == block.start {
                    touched.push(sb as u32);
                }
                // Swap `s` to the end of the marked prefix.
                let other = elems[block.marked as usize];
                elems.swap(pos as usize, block.marked as usize);
                loc[other as usize] = pos;
                loc[s as usize] = block.marked;
                block.marked += 1;
            }
        }
        for &d in &touched {
            let blk = blocks[d as usize];
            if blk.marked == blk.end {
                blocks[d as usize].marked = blk.start;
                continue;
            }
            // The marked prefix becomes a new block; the rest keeps the old id.
            let new = blocks.len() as u32;
            blocks.push(Block {
                start: blk.start,
                end: blk.marked,
                marked: blk.start,
            });
            blocks[d as usize] = Block {
                start: blk.marked,
                end: blk.end,
                marked: blk.marked,
            };
            for &s in &elems[blk.start as usize..blk.marked as usize] {
                block_of[s as usize] = new;
            }
            in_waiting.resize(blocks.len() * k, false);
            let smaller = if blocks[new as usize].len() <= blocks[d as usize].len() {
                new
            } else {
                d
            };
            for a in 0..k {
                let pick = if in_waiting[d as usize * k + a] {
                    new
                } else {
                    smaller
                };
                if !in_waiting[pick as usize * k + a] {
                    in_waiting[pick as usize * k + a] = true;
                    waiting.push((pick, a as u32));
                }
            }
        }
        touched.clear();
    }
    block_of
}

#[derive(Clone, Copy, Debug)]
struct Block {
    start: u32,
    end: u32,
    marked: u32,
}

impl Block {
    fn len(&self) -> u32 {
        self.end - self.start
    }
}

/// Builds the quotient table, numbering blocks dead first, then breadth-first from the start.
fn renumber(raw: &Raw, block_of: &[u32], k: usize) -> Raw {
    let n = raw.accepting.len();
    let num_blocks = block_of.iter().max().map_or(0, |&m| m as usize + 1);
    // One member of each block: any will do, members agree on everything.
    let mut member = vec![u32::MAX; num_blocks];
    for s in (0..n).rev() {
        member[block_of[s] as usize] = s as u32;
    }
    let dead_block = block_of[0];
    let start_block = block_of[1];
    if start_block == dead_block {
        // The language is empty; keep a separate start state all the same.
        return Raw {
            classes: raw.classes.clone(),
            table: vec![0; 2 * k],
            accepting: vec![false, false],
        };
    }
    let mut new_id = vec![u32::MAX; num_blocks];
    new_id[dead_block as usize] = 0;
    new_id[start_block as usize] = 1;
    let mut order = vec![dead_block, start_block];
    let mut i = 1;
    while i < order.len() {
        let s = member[order[i] as usize] as usize;
        for c in 0..k {
            let tb = block_of[raw.table[s * k + c] as usize] as usize;
            if new_id[tb] == u32::MAX {
                new_id[tb] = order.len() as u32;
                order.push(tb as u32);
            }
        }
        i += 1;
    }
    let mut table = Vec::with_capacity(order.len() * k);
    let mut accepting = Vec::with_capacity(order.len());
    for (i, &b) in order.iter().enumerate() {
        let s = member[b as usize] as usize;
        if i == 0 {
            table.extend(std::iter::repeat_n(0, k));
        } else {
            table.extend((0..k).map(|c| new_id[block_of[raw.table[s * k + c] as usize] as usize]));
        }
        accepting.push(raw.accepting[s]);
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
