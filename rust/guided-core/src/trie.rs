//! The token trie: a vocabulary's byte strings as one prefix tree, flattened for fast walks.
//!
//! Computing a mask means asking, for every token, whether the automaton survives its bytes from
//! the current state. Tokens share prefixes massively (`" the"`, `" them"`, `" theory"`), so
//! walking each token separately repeats work; walking a prefix tree walks each shared prefix once,
//! and when the automaton dies on a byte, the whole subtree below it is skipped in one step.
//!
//! The tree is stored in preorder as one array of 12-byte records, which makes the walk a single
//! forward scan with no pointer chasing: node `i`'s children are the nodes that follow it, its
//! `skip` is the first node after its subtree, and its depth says which entry of a small state
//! stack holds the state before its byte. A dead transition jumps to `skip`; anything else moves
//! to `i + 1`. The token ending at a node sits in the record itself (about half of all nodes end
//! a token, so a side table would cost a second stream of reads and a hard-to-predict branch).
//!
//! Cost: 12 bytes a node. Real vocabularies give about two nodes per token (o200k: 422k nodes for
//! 200k tokens, 5 MB), built once per vocabulary in tens of milliseconds and shared by every index
//! over it. A walk that visits the whole trie takes a few milliseconds at that size.

/// Marks a node where no token ends.
const NO_TOKEN: u32 = u32::MAX;
/// Set in [`Node::depth_byte`] when more than one token ends at the node.
const MORE_TOKENS: u32 = 1 << 31;

/// One trie node, packed so that a walk reads one 12-byte record per node.
#[derive(Debug, Clone, Copy)]
struct Node {
    /// The first node after this node's subtree.
    skip: u32,
    /// A token ending here (the smallest id), or [`NO_TOKEN`].
    token: u32,
    /// `depth << 8 | byte`, plus [`MORE_TOKENS`] when other tokens end here too.
    depth_byte: u32,
}

/// A vocabulary's token byte strings as a flattened prefix tree.
#[derive(Debug, Clone, Default)]
pub struct TokenTrie {
    nodes: Vec<Node>,
    /// Tokens sharing a node with an earlier token (identical byte strings): `(node, id)`,
    /// sorted by node.
    extra: Vec<(u32, u32)>,
    max_depth: usize,
}

impl TokenTrie {
    /// Builds the trie of `(id, bytes)` pairs. Empty byte strings are left out: a token that
    /// writes nothing is never allowed by a constraint (EOS is handled separately). Tokens longer
    /// than 8 MiB are left out too; no vocabulary has them.
    pub fn new<'a>(tokens: impl IntoIterator<Item = (u32, &'a [u8])>) -> Self {
        let mut sorted: Vec<(&[u8], u32)> = tokens
            .into_iter()
            .filter(|(_, b)| !b.is_empty() && b.len() < (1 << 23))
            .map(|(id, b)| (b, id))
            .collect();
        sorted.sort_unstable();

        let mut trie = TokenTrie::default();
        // `path[d]` is the node index at depth d+1 on the current root-to-node path.
        let mut path: Vec<usize> = Vec::new();
        let mut prev: &[u8] = &[];
        for &(bytes, id) in &sorted {
            let common = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            // Nodes deeper than the shared prefix are finished: their subtrees end here.
            let end = trie.nodes.len() as u32;
            for &node in &path[common..] {
                trie.nodes[node].skip = end;
            }
            path.truncate(common);
            for (d, &b) in bytes.iter().enumerate().skip(common) {
                path.push(trie.nodes.len());
                trie.nodes.push(Node {
                    skip: 0,
                    token: NO_TOKEN,
                    depth_byte: ((d as u32 + 1) << 8) | u32::from(b),
                });
            }
            if let Some(&last) = path.last() {
                let node = &mut trie.nodes[last];
                if node.token == NO_TOKEN {
                    node.token = id;
                } else {
                    node.depth_byte |= MORE_TOKENS;
                    trie.extra.push((last as u32, id));
                }
            }
            trie.max_depth = trie.max_depth.max(bytes.len());
            prev = bytes;
        }
        let end = trie.nodes.len() as u32;
        for &node in &path {
            trie.nodes[node].skip = end;
        }
        trie
    }

    /// Number of nodes (the root not counted).
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The longest token, in bytes.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Bytes of heap memory the trie holds.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>() + self.extra.capacity() * 8
    }

    /// Walks every token from `start`. `step(state, byte)` is the automaton's transition, with
    /// `dead` the state no byte leaves; `on_token(id, state)` is called for each token whose bytes
    /// all survive, with the state they lead to. Subtrees are skipped at their first dead byte.
    #[inline]
    pub fn walk<S, F>(&self, start: u32, dead: u32, mut step: S, mut on_token: F)
    where
        S: FnMut(u32, u8) -> u32,
        F: FnMut(u32, u32),
    {
        let nodes = self.nodes.as_slice();
        let mut stack = vec![start; self.max_depth + 1];
        let mut i = 0;
        while let Some(node) = nodes.get(i) {
            let depth = ((node.depth_byte & !MORE_TOKENS) >> 8) as usize;
            let next = step(stack[depth - 1], node.depth_byte as u8);
            if next == dead {
                i = node.skip as usize;
                continue;
            }
            stack[depth] = next;
            if node.token != NO_TOKEN {
                on_token(node.token, next);
                if node.depth_byte & MORE_TOKENS != 0 {
                    let at = self.extra.partition_point(|&(n, _)| (n as usize) < i);
                    for &(_, id) in self.extra[at..]
                        .iter()
                        .take_while(|&&(n, _)| n as usize == i)
                    {
                        on_token(id, next);
                    }
                }
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A toy automaton over bytes: state = number of bytes read + 1 while the prefix is in
    /// `allowed` (a set of strings closed under prefixes), 0 once it is not.
    fn prefix_walk(trie: &TokenTrie, allowed: &[&[u8]]) -> BTreeMap<u32, u32> {
        let mut seen = BTreeMap::new();
        let mut prefixes: Vec<Vec<u8>> = vec![vec![]];
        for a in allowed {
            for k in 1..=a.len() {
                prefixes.push(a[..k].to_vec());
            }
        }
        prefixes.sort();
        prefixes.dedup();
        // state = index into prefixes + 1
        let lookup = |s: &[u8]| {
            prefixes
                .binary_search(&s.to_vec())
                .ok()
                .map(|i| i as u32 + 1)
        };
        trie.walk(
            1,
            0,
            |state, byte| {
                let mut p = prefixes[state as usize - 1].clone();
                p.push(byte);
                lookup(&p).unwrap_or(0)
            },
            |id, state| {
                seen.insert(id, state);
            },
        );
        seen
    }

    #[test]
    fn walk_visits_exactly_the_surviving_tokens() {
        let tokens: Vec<(u32, &[u8])> = vec![
            (0, b"a"),
            (1, b"ab"),
            (2, b"abc"),
            (3, b"b"),
            (4, b"ba"),
            (5, b""),
            (6, b"ab"),
            (7, b"xyz"),
        ];
        let trie = TokenTrie::new(tokens.iter().copied());
        assert_eq!(trie.num_nodes(), 8);
        let seen = prefix_walk(&trie, &[b"abc", b"b"]);
        assert_eq!(
            seen.keys().copied().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 6]
        );
    }

    #[test]
    fn brute_force_agreement_on_many_tokens() {
        let words: Vec<Vec<u8>> = (0u32..500)
            .map(|i| {
                let len = 1 + (i * 7 % 5) as usize;
                (0..len).map(|k| b"abc"[((i >> k) % 3) as usize]).collect()
            })
            .collect();
        let trie = TokenTrie::new(
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (i as u32, w.as_slice())),
        );
        let allowed: [&[u8]; 3] = [b"abca", b"bb", b"ccc"];
        let seen = prefix_walk(&trie, &allowed);
        for (i, w) in words.iter().enumerate() {
            let ok = allowed.iter().any(|a| a.starts_with(w));
            assert_eq!(seen.contains_key(&(i as u32)), ok, "token {w:?}");
        }
    }
}
