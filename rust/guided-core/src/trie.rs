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
//! The first level is also indexed by byte. A state that lives on a few bytes (a digit, a
//! keyword's next letter) knows them from its own row, and a walk from it goes straight to
//! their subtrees: stepping through all of the first level's nodes, one per byte the vocabulary
//! starts a token with and scattered across the array, was most of such a walk.
//!
//! Cost: 12 bytes a node, and 1 KB for the table of the first level. Real vocabularies give about two nodes per token (o200k: 422k nodes for
//! 200k tokens, 5 MB), built once per vocabulary in tens of milliseconds and shared by every index
//! over it. A walk that visits the whole trie takes a few milliseconds at that size.

use crate::byte_set::ByteSet;

/// Marks a node where no token ends.
const NO_TOKEN: u32 = u32::MAX;
/// Set in [`Node::depth_byte`] when more than one token ends at the node.
const MORE_TOKENS: u32 = 1 << 31;
/// Marks a byte that starts no token in [`TokenTrie::heads`].
const NO_NODE: u32 = u32::MAX;

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
    /// `heads[b]`: the node of the first level reached by byte `b`, or [`NO_NODE`] (all 256
    /// entries, or none for an empty trie).
    heads: Vec<u32>,
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
        trie.index_heads();
        trie
    }

    /// Fills [`heads`](Self::heads) from the nodes of the first level.
    fn index_heads(&mut self) {
        self.heads = vec![NO_NODE; 256];
        let mut i = 0;
        while let Some(node) = self.nodes.get(i) {
            self.heads[usize::from(node.depth_byte as u8)] = i as u32;
            i = node.skip as usize;
        }
    }

    /// Number of nodes (the root not counted).
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// How many nodes lie in the subtrees of the children on `bytes` of the root (`below`
    /// none) or of an anchor: what a walk that starts there with those bytes visits at most
    /// ([`walk_heads`](Self::walk_heads) from the root).
    pub fn nodes_below(&self, below: Option<&Anchor>, bytes: &ByteSet) -> usize {
        if below.is_some() {
            return self
                .children(below)
                .filter(|&(_, byte)| bytes.contains(byte))
                .map(|(i, _)| self.nodes[i].skip as usize - i)
                .sum();
        }
        // The root's children are looked up by byte.
        if self.heads.is_empty() {
            return self.nodes.len();
        }
        bytes
            .iter()
            .filter_map(|b| {
                let head = self.heads[usize::from(b)];
                let node = self.nodes.get(head as usize)?;
                Some(node.skip as usize - head as usize)
            })
            .sum()
    }

    /// How many steps a walk takes at most below `node` from a state that lives on `bytes`
    /// there, in two parts: one per child, and one per node below the children on `bytes`.
    pub fn steps_below(&self, node: usize, bytes: &ByteSet) -> (usize, usize) {
        let Some(end) = self.nodes.get(node).map(|n| n.skip as usize) else {
            return (0, 0);
        };
        let below_child = |i: usize| self.nodes.get(i).map_or(0, |n| n.skip as usize - i - 1);
        (self.children_between(node + 1, end)).fold((0, 0), |(children, below), (i, byte)| {
            let deeper = if bytes.contains(byte) {
                below_child(i)
            } else {
                0
            };
            (children + 1, below + deeper)
        })
    }

    /// The node of the root's child on `byte`, if a token starts with it.
    pub fn head(&self, byte: u8) -> Option<usize> {
        if self.heads.is_empty() {
            return self
                .children(None)
                .find(|&(_, b)| b == byte)
                .map(|(i, _)| i);
        }
        let head = self.heads[usize::from(byte)];
        (head != NO_NODE).then_some(head as usize)
    }

    /// The longest token, in bytes.
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Bytes of heap memory the trie holds.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.extra.capacity() * 8
            + self.heads.capacity() * 4
    }

    /// Walks every token from `start`. `step(state, byte)` is the automaton's transition, with
    /// `dead` the state no byte leaves; `on_token(id, state)` is called for each token whose bytes
    /// all survive, with the state they lead to. Subtrees are skipped at their first dead byte.
    #[inline]
    pub fn walk<S, F>(&self, start: u32, dead: u32, step: S, on_token: F)
    where
        S: FnMut(u32, u8) -> u32,
        F: FnMut(u32, u32),
    {
        self.walk_pruned(start, dead, |_| false, step, on_token);
    }

    /// Walks like [`walk`](Self::walk), but passes over, without a step, every subtree whose root
    /// `i` has `pruned(i)` (nodes numbered in preorder, as [`runs`](Self::runs) and
    /// [`anchors`](Self::anchors) give them). The tokens in those subtrees are not reported.
    #[inline]
    pub fn walk_pruned<P, S, F>(&self, start: u32, dead: u32, pruned: P, step: S, on_token: F)
    where
        P: FnMut(usize) -> bool,
        S: FnMut(u32, u8) -> u32,
        F: FnMut(u32, u32),
    {
        self.walk_heads(start, dead, &ByteSet::ALL, pruned, step, on_token);
    }

    /// Walks the tokens below `anchor` (not the anchor's own) from `start`, the state its path
    /// leads to, passing over the subtrees `pruned` names as [`walk_pruned`](Self::walk_pruned)
    /// does; the states reported are after each whole token.
    #[inline]
    pub fn walk_below<P, S, F>(
        &self,
        anchor: &Anchor,
        start: u32,
        dead: u32,
        mut pruned: P,
        mut step: S,
        mut on_token: F,
    ) where
        P: FnMut(usize) -> bool,
        S: FnMut(u32, u8) -> u32,
        F: FnMut(u32, u32),
    {
        let range = (anchor.node + 1, anchor.end, anchor.path.len());
        let stack = &mut vec![start; self.max_depth + 1];
        self.walk_nodes(range, stack, dead, &mut pruned, &mut step, &mut on_token);
    }

    /// Walks like [`walk_pruned`](Self::walk_pruned), but only the tokens whose first byte is
    /// in `heads`: the caller knows the bytes on which `start` does not die, and the walk goes
    /// straight to their subtrees instead of stepping through every byte of the first level (a
    /// digit state lives on ten of the 256, and the other 246 steps were most of its walk).
    #[inline]
    pub fn walk_heads<P, S, F>(
        &self,
        start: u32,
        dead: u32,
        heads: &ByteSet,
        mut pruned: P,
        mut step: S,
        mut on_token: F,
    ) where
        P: FnMut(usize) -> bool,
        S: FnMut(u32, u8) -> u32,
        F: FnMut(u32, u32),
    {
        let stack = &mut vec![start; self.max_depth + 1];
        if *heads == ByteSet::ALL || self.heads.is_empty() {
            let range = (0, self.nodes.len(), 0);
            return self.walk_nodes(range, stack, dead, &mut pruned, &mut step, &mut on_token);
        }
        for b in heads.iter() {
            let head = self.heads[usize::from(b)];
            if let Some(node) = self.nodes.get(head as usize) {
                let range = (head as usize, node.skip as usize, 0);
                self.walk_nodes(range, stack, dead, &mut pruned, &mut step, &mut on_token);
            }
        }
    }

    /// The walk over nodes `first..end`, all below a node at depth `base`, on a stack of states
    /// whose entry `0` holds the state before the range's first level.
    #[inline(always)]
    fn walk_nodes<P, S, F>(
        &self,
        (first, end, base): (usize, usize, usize),
        stack: &mut [u32],
        dead: u32,
        pruned: &mut P,
        step: &mut S,
        on_token: &mut F,
    ) where
        P: FnMut(usize) -> bool,
        S: FnMut(u32, u8) -> u32,
        F: FnMut(u32, u32),
    {
        let nodes = &self.nodes[..end.min(self.nodes.len())];
        let mut i = first;
        while let Some(node) = nodes.get(i) {
            if pruned(i) {
                i = node.skip as usize;
                continue;
            }
            let depth = ((node.depth_byte & !MORE_TOKENS) >> 8) as usize - base;
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

    /// The nodes under which much of the vocabulary hangs: each holds at least `min_tokens`
    /// tokens below it and no node below it does. In a byte-level BPE vocabulary that is the
    /// leading space (half the tokens start with one); in a SentencePiece one, the three bytes
    /// of `▁`. The root never counts. Preorder, so their subtrees are disjoint and ascending.
    pub fn anchors(&self, min_tokens: usize) -> Vec<Anchor> {
        let nodes = self.nodes.as_slice();
        // `before[i]`: tokens ending at nodes before `i`.
        let mut before = Vec::with_capacity(nodes.len() + 1);
        let mut count = 0;
        let mut extra = self.extra.iter().peekable();
        for (i, node) in nodes.iter().enumerate() {
            before.push(count);
            if node.token != NO_TOKEN {
                count += 1;
            }
            while extra.next_if(|&&(n, _)| n as usize == i).is_some() {
                count += 1;
            }
        }
        before.push(count);
        let mut path: Vec<u8> = Vec::new();
        let mut anchors: Vec<Anchor> = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            let depth = ((node.depth_byte & !MORE_TOKENS) >> 8) as usize;
            path.truncate(depth - 1);
            path.push(node.depth_byte as u8);
            let skip = node.skip as usize;
            if before[skip] - before[i + 1] < min_tokens {
                continue;
            }
            let anchor = Anchor {
                node: i,
                end: skip,
                path: path.clone(),
                tokens: self.tokens_at(i).collect(),
            };
            match anchors.last_mut() {
                // A big node inside the last one is deeper: it replaces it.
                Some(last) if i < last.end => *last = anchor,
                _ => anchors.push(anchor),
            }
        }
        anchors
    }

    /// The first-level nodes of ASCII bytes with at least `min_nodes` nodes in their subtree,
    /// as [`Anchor`]s, leaving out those that are or hold one of `anchors`: a walk from a state
    /// may treat each apart (see [`crate::slice::TokenTries::heads`]). Ascending.
    pub fn big_heads(&self, min_nodes: usize, anchors: &[Anchor]) -> Vec<Anchor> {
        self.children(None)
            .filter(|&(i, byte)| {
                let end = self.nodes[i].skip as usize;
                byte < 128
                    && end - i >= min_nodes
                    && !anchors.iter().any(|a| (i..end).contains(&a.node))
            })
            .map(|(i, byte)| Anchor {
                node: i,
                end: self.nodes[i].skip as usize,
                path: vec![byte],
                tokens: self.tokens_at(i).collect(),
            })
            .collect()
    }

    /// The children of the root (`below` none) or of an anchor, by index.
    pub fn children(&self, below: Option<&Anchor>) -> impl Iterator<Item = (usize, u8)> + '_ {
        let (first, end) = below.map_or((0, self.nodes.len()), |a| (a.node + 1, a.end));
        self.children_between(first, end)
    }

    /// The nodes from `first` on that are siblings of it, before `end` (the end of their
    /// parent's subtree), by index.
    fn children_between(&self, first: usize, end: usize) -> impl Iterator<Item = (usize, u8)> + '_ {
        let mut i = first;
        std::iter::from_fn(move || {
            let node = self.nodes.get(i).filter(|_| i < end)?;
            let child = (i, node.depth_byte as u8);
            i = node.skip as usize;
            Some(child)
        })
    }

    /// The tokens ending at node `i`, smallest id first.
    fn tokens_at(&self, i: usize) -> impl Iterator<Item = u32> + '_ {
        let node = &self.nodes[i];
        let first = (node.token != NO_TOKEN).then_some(node.token);
        let others = if node.depth_byte & MORE_TOKENS != 0 {
            let at = self.extra.partition_point(|&(n, _)| (n as usize) < i);
            &self.extra[at..]
        } else {
            &[]
        };
        first.into_iter().chain(
            others
                .iter()
                .take_while(move |&&(n, _)| n as usize == i)
                .map(|&(_, id)| id),
        )
    }

    /// The trie of the nodes `first..end` (all below a node at depth `base`, or the whole trie
    /// with `base` 0), less every subtree whose root `i` has `left_out(i)`: one pass, no sorting,
    /// and a walk of the copy visits only what is kept, side by side in memory.
    pub fn filtered(
        &self,
        (first, end, base): (usize, usize, usize),
        mut left_out: impl FnMut(usize) -> bool,
    ) -> TokenTrie {
        let mut kept = TokenTrie::default();
        // Kept nodes whose subtree is still open: (their index in the copy, their `skip` here).
        let mut open: Vec<(usize, usize)> = Vec::new();
        let mut i = first;
        while i < end {
            while open.last().is_some_and(|&(_, skip)| skip <= i) {
                if let Some((j, _)) = open.pop() {
                    kept.nodes[j].skip = kept.nodes.len() as u32;
                }
            }
            let node = self.nodes[i];
            if left_out(i) {
                i = node.skip as usize;
                continue;
            }
            let depth = ((node.depth_byte & !MORE_TOKENS) >> 8) as usize - base;
            let j = kept.nodes.len();
            kept.nodes.push(Node {
                skip: 0,
                depth_byte: (node.depth_byte & (MORE_TOKENS | 0xFF)) | (depth as u32) << 8,
                ..node
            });
            kept.extra
                .extend(self.tokens_at(i).skip(1).map(|id| (j as u32, id)));
            kept.max_depth = kept.max_depth.max(depth);
            open.push((j, node.skip as usize));
            i += 1;
        }
        for (j, _) in open {
            kept.nodes[j].skip = kept.nodes.len() as u32;
        }
        kept.index_heads();
        kept
    }

    /// Where the trie's paths leave runs of `in_run` bytes (see [`RunExits`]): the nodes whose
    /// path is a run up to their parent and leaves it at their own byte, and the nodes deeper
    /// than `spelled_up_to` that end a token spelled from the run (the shorter ones are the
    /// caller's, as a class slice's sets by length are). One pass over the nodes; the subtree
    /// below an exit is not looked at.
    pub fn run_exits(&self, in_run: impl Fn(u8) -> bool, spelled_up_to: usize) -> RunExits {
        let mut found: Vec<(u32, u16, u32)> = Vec::new();
        // A node is looked at only when the path to its parent is all run (the subtree below
        // an exit is passed over), so its own byte says whether the run goes on.
        let mut i = 0;
        while let Some(node) = self.nodes.get(i) {
            let depth = (node.depth_byte & !MORE_TOKENS) >> 8;
            let byte = node.depth_byte as u8;
            if in_run(byte) {
                if node.token != NO_TOKEN && depth as usize > spelled_up_to {
                    found.push((depth, RUN_TOKENS, i as u32));
                }
                i += 1;
            } else {
                found.push((depth - 1, u16::from(byte), i as u32));
                i = node.skip as usize;
            }
        }
        found.sort_unstable();
        let mut exits = RunExits::default();
        for (k, &(len, byte, node)) in found.iter().enumerate() {
            exits.nodes.push(node);
            if found
                .get(k + 1)
                .is_none_or(|&(l, b, _)| (l, b) != (len, byte))
            {
                exits.groups.push((len, byte, exits.nodes.len() as u32));
            }
        }
        exits.deepest = found
            .iter()
            .map(|&(len, _, _)| len as usize)
            .max()
            .unwrap_or(0);
        exits
    }

    /// Reports the tokens ending at `node` and walks its subtree, from `after`, the state its
    /// byte leads to; `stack` is scratch space.
    fn walk_after<S, F>(
        &self,
        node: usize,
        after: u32,
        dead: u32,
        stack: &mut Vec<u32>,
        step: &mut S,
        on_token: &mut F,
    ) where
        S: FnMut(u32, u8) -> u32,
        F: FnMut(u32, u32),
    {
        for id in self.tokens_at(node) {
            on_token(id, after);
        }
        let Some(n) = self.nodes.get(node) else {
            return;
        };
        if n.skip as usize > node + 1 {
            stack.resize(self.max_depth + 1, dead);
            stack[0] = after;
            let depth = ((n.depth_byte & !MORE_TOKENS) >> 8) as usize;
            let range = (node + 1, n.skip as usize, depth);
            self.walk_nodes(range, stack, dead, &mut |_| false, step, on_token);
        }
    }

    /// The runs of a character set in the trie, up to `max_chars` characters: which subtrees a
    /// walk may pass over because every token in them spells whole characters of the set, and
    /// which tokens do (see [`crate::class_slice`]). The set is read byte by byte: `read(at,
    /// byte)` is the position after `byte` read at position `at`, `boundary` between characters
    /// (where reading starts and comes back after each whole character), `None` once the bytes
    /// leave the set. With `below`, only the subtree of that anchor counts, and a token is spelled
    /// from the set when its bytes past the anchor's are.
    ///
    /// A node is clean when the bytes on its path from the root (or the anchor) are read within
    /// `max_chars` characters, and it ends no token part-way through a character; it is pruned
    /// when every node of its subtree is clean. Two passes over the nodes: forwards, whether each
    /// node is clean (the position on the path is kept per depth); backwards, whether each
    /// subtree is (the first node after the subtree is its `skip`, so the subtree is clean when
    /// the nearest unclean node after it lies at or past `skip`).
    pub fn runs(
        &self,
        below: Option<&Anchor>,
        boundary: u32,
        read: impl Fn(u32, u8) -> Option<u32>,
        max_chars: usize,
    ) -> Runs {
        let (first, end) = below.map_or((0, self.nodes.len()), |a| (a.node + 1, a.end));
        let base = below.map_or(0, |a| a.path.len());
        let nodes = &self.nodes[first..end];
        let mut clean = vec![0u64; nodes.len().div_ceil(64)];
        // Per depth on the current path: the reading position (`None` once it left the set) and
        // the whole characters read.
        let mut at: Vec<Option<u32>> = vec![None; self.max_depth + 1 - base];
        let mut chars = vec![0usize; self.max_depth + 1 - base];
        at[0] = Some(boundary);
        let mut tokens = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            let depth = ((node.depth_byte & !MORE_TOKENS) >> 8) as usize - base;
            let pos = at[depth - 1].and_then(|p| read(p, (node.depth_byte & 0xFF) as u8));
            let whole = pos == Some(boundary);
            let count = chars[depth - 1] + usize::from(whole);
            at[depth] = pos.filter(|_| count <= max_chars);
            chars[depth] = count;
            if at[depth].is_none() {
                continue;
            }
            if node.token == NO_TOKEN {
                clean[i / 64] |= 1 << (i % 64);
            } else if whole {
                clean[i / 64] |= 1 << (i % 64);
                tokens.extend(self.tokens_at(first + i).map(|id| (count as u32, id)));
            }
        }
        let mut pruned = vec![0u64; nodes.len().div_ceil(64)];
        let mut next_unclean = end;
        for (i, node) in nodes.iter().enumerate().rev() {
            if clean[i / 64] >> (i % 64) & 1 == 0 {
                next_unclean = first + i;
            } else if next_unclean >= node.skip as usize {
                pruned[i / 64] |= 1 << (i % 64);
            }
        }
        Runs {
            first,
            end,
            pruned,
            tokens,
        }
    }
}

/// Where a trie's tokens leave runs of bytes from one class ([`TokenTrie::run_exits`]), grouped
/// by the length of the run before them and the byte that leaves it.
///
/// A walk from a state that every run of `n` bytes leads to one state (`before(n)`, the chain of
/// a counted class) need not visit the run's nodes at all: each group's byte is stepped once from
/// its run's state, and a group the state dies on is passed over whole. Inside a label of a
/// domain name (`[a-zA-Z0-9-]{0,61}`), the tokens that start with letters and leave them are tens
/// of thousands in a large vocabulary, and those that survive are the few that go on with `-` or
/// `.`: the walk steps a few hundred groups instead of every node on the way to them.
#[derive(Debug, Clone, Default)]
pub struct RunExits {
    /// `(run length, leaving byte or RUN_TOKENS, end of the group in nodes)`, ascending.
    groups: Vec<(u32, u16, u32)>,
    /// The groups' nodes: where the path leaves the run, or a run's node ending a token.
    nodes: Vec<u32>,
    /// The longest run before a group.
    deepest: usize,
}

/// The group of [`RunExits`] that holds the nodes ending a token on a run.
const RUN_TOKENS: u16 = 256;

impl RunExits {
    /// The longest run before an exit: a walk needs `before(n)` up to this length.
    pub fn deepest(&self) -> usize {
        self.deepest
    }

    /// Walks the tokens of `trie` (the trie the exits were found in) past the exits, as
    /// [`TokenTrie::walk`] does, given `before(n)`: the state every run of `n` bytes leads to
    /// from the start, `dead` where the runs die.
    pub fn walk<B, S, F>(
        &self,
        trie: &TokenTrie,
        before: B,
        dead: u32,
        mut step: S,
        mut on_token: F,
    ) where
        B: Fn(usize) -> u32,
        S: FnMut(u32, u8) -> u32,
        F: FnMut(u32, u32),
    {
        let mut stack = Vec::new();
        let mut start = 0;
        for &(len, byte, end) in &self.groups {
            let nodes = &self.nodes[start..end as usize];
            start = end as usize;
            let at = before(len as usize);
            if at == dead {
                continue;
            }
            if byte == RUN_TOKENS {
                for &i in nodes {
                    for id in trie.tokens_at(i as usize) {
                        on_token(id, at);
                    }
                }
                continue;
            }
            let after = step(at, byte as u8);
            if after == dead {
                continue;
            }
            for &i in nodes {
                trie.walk_after(
                    i as usize,
                    after,
                    dead,
                    &mut stack,
                    &mut step,
                    &mut on_token,
                );
            }
        }
    }

    /// Bytes of heap memory the exits hold.
    pub fn memory_bytes(&self) -> usize {
        self.groups.capacity() * 12 + self.nodes.capacity() * 4
    }
}

/// A node of the trie under which much of the vocabulary hangs ([`TokenTrie::anchors`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    /// The node.
    pub node: usize,
    /// The first node after its subtree.
    pub end: usize,
    /// The bytes from the root to it.
    pub path: Vec<u8>,
    /// The tokens ending at it (its path, spelled once per id that spells it).
    pub tokens: Vec<u32>,
}

/// What [`TokenTrie::runs`] finds for one character set.
#[derive(Debug, Clone)]
pub struct Runs {
    /// The first node looked at (the root's first child, or the anchor's).
    pub first: usize,
    /// The first node after those looked at.
    pub end: usize,
    /// One bit per node from `first` on (bit `i % 64` of word `i / 64` for node `first + i`):
    /// the subtrees a walk may pass over.
    pub pruned: Vec<u64>,
    /// `(length, id)` of every token spelled from the set, up to the length asked for; the
    /// length counts the characters past the anchor, if any.
    pub tokens: Vec<(u32, u32)>,
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

    /// The trie of `words`, each word's id its position.
    fn trie_of(words: &[Vec<u8>]) -> TokenTrie {
        TokenTrie::new(
            words
                .iter()
                .enumerate()
                .map(|(i, w)| (i as u32, w.as_slice())),
        )
    }

    /// `count` words of `letters`, word `i` of `len(i)` letters after `lead(i)` if there is one.
    fn toy_words(
        count: u32,
        len: impl Fn(u32) -> usize,
        letters: &[u8],
        lead: impl Fn(u32) -> Option<u8>,
    ) -> Vec<Vec<u8>> {
        let n = letters.len() as u32;
        (0..count)
            .map(|i| {
                let word = (0..len(i)).map(|k| letters[((i >> k) % n) as usize]);
                lead(i).into_iter().chain(word).collect()
            })
            .collect()
    }

    /// A toy automaton: the state counts the `letter`s read (plus one) and dies on the one
    /// read in state `last`.
    fn counting(letter: u8, last: u32) -> impl Fn(u32, u8) -> u32 + Copy {
        move |s, b| match (s, b) {
            (s, b) if s == last && b == letter => 0,
            (s, b) if b == letter => s + 1,
            (s, _) => s,
        }
    }

    /// The `(token, state)` pairs a walk reports, sorted.
    fn seen(walk: impl FnOnce(&mut dyn FnMut(u32, u32))) -> Vec<(u32, u32)> {
        let mut seen = Vec::new();
        walk(&mut |id, s| seen.push((id, s)));
        seen.sort_unstable();
        seen
    }

    /// A filtered copy walks exactly like the pruned walk of the full trie, with the same
    /// states, over the whole trie and below an anchor.
    #[test]
    fn filtered_copies_walk_like_pruned_walks() {
        let lead = |i: u32| i.is_multiple_of(2).then_some(b' ');
        let words = toy_words(400, |i| 1 + (i * 7 % 6) as usize, b"abc", lead);
        let trie = trie_of(&words);
        let step = counting(b'a', 4);
        let left_out = |i: usize| i % 5 == 3;
        let copy = trie.filtered((0, trie.num_nodes(), 0), left_out);
        assert!(copy.num_nodes() < trie.num_nodes());
        assert_eq!(
            seen(|f| copy.walk(1, 0, step, f)),
            seen(|f| trie.walk_pruned(1, 0, left_out, step, f)),
        );
        let anchors = trie.anchors(100);
        assert_eq!(anchors.len(), 1);
        let space = &anchors[0];
        assert_eq!(space.path, b" ");
        let below = trie.filtered((space.node + 1, space.end, 1), left_out);
        // The full walk entering only the space's subtree, past the space itself.
        let inside = |i: usize| (space.node + 1..space.end).contains(&i);
        let only_below = |i: usize| (i != space.node && !inside(i)) || (inside(i) && left_out(i));
        let at = step(1, b' ');
        let full: Vec<(u32, u32)> = seen(|f| trie.walk_pruned(1, 0, only_below, step, f))
            .into_iter()
            .filter(|&(id, _)| !space.tokens.contains(&id))
            .collect();
        assert!(!full.is_empty());
        assert_eq!(seen(|f| below.walk(at, 0, step, f)), full);
        let unfiltered = trie.filtered((space.node + 1, space.end, 1), |_| false);
        assert_eq!(
            seen(|f| trie.walk_below(space, at, 0, |_| false, step, f)),
            seen(|f| unfiltered.walk(at, 0, step, f)),
        );
    }

    /// From a state that lives on one first byte, then on some second bytes, then on every
    /// byte, a walk steps the first byte, every child below it, and every node below the
    /// children it lives on: what `steps_below` counts, which is otherwise an upper bound.
    #[test]
    fn steps_below_counts_a_walk_alive_past_the_second_byte() {
        let words = toy_words(
            400,
            |i| (i % 5) as usize,
            b"abcdef",
            |i| Some(b"xyz"[(i % 3) as usize]),
        );
        let trie = trie_of(&words);
        for (first, second) in [
            (b'x', &b"ac"[..]),
            (b'y', b"bdf"),
            (b'z', b""),
            (b'x', b"abcdef"),
        ] {
            let mut live = ByteSet::EMPTY;
            for &b in second {
                live.insert(b);
            }
            let mut heads = ByteSet::EMPTY;
            heads.insert(first);
            let mut steps = 0;
            let step = |s: u32, b: u8| {
                steps += 1;
                match s {
                    1 if b == first => 2,
                    2 if live.contains(b) => 3,
                    3 => 3,
                    _ => 0,
                }
            };
            trie.walk_heads(1, 0, &heads, |_| false, step, |_, _| {});
            let head = trie.head(first).expect("words start with it");
            let (children, below) = trie.steps_below(head, &live);
            assert_eq!(steps, 1 + children + below, "{}", first as char);
        }
        assert_eq!(trie.head(b'q'), None);
    }

    /// A walk from chosen first bytes reports exactly what the full walk reports for the tokens
    /// that start with them, on the trie, on a filtered copy and on a copy below an anchor.
    #[test]
    fn walks_from_chosen_heads_are_the_full_walk_restricted() {
        let lead = |i: u32| Some(b" 0az\xff"[(i % 5) as usize]);
        let words = toy_words(600, |i| 1 + (i * 5 % 4) as usize, b"abcxyz", lead);
        let trie = trie_of(&words);
        let step = counting(b'z', 3);
        let left_out = |i: usize| i % 7 == 2;
        let copy = trie.filtered((0, trie.num_nodes(), 0), left_out);
        let anchors = trie.anchors(100);
        let space = anchors.iter().find(|a| a.path == b" ").expect("an anchor");
        let below = trie.filtered((space.node + 1, space.end, 1), |_| false);
        let at = step(1, b' ');
        let sets: [&[u8]; 6] = [b"", b"0", b"a z", b" 0az\xff", b"bq", b"xyz"];
        for bytes in sets {
            let mut heads = ByteSet::EMPTY;
            bytes.iter().for_each(|&b| heads.insert(b));
            assert_eq!(heads.iter().collect::<Vec<_>>(), {
                let mut sorted = bytes.to_vec();
                sorted.sort_unstable();
                sorted
            });
            let starts = |id: u32, skip: usize| heads.contains(words[id as usize][skip]);
            let restricted = |all: Vec<(u32, u32)>, skip: usize| -> Vec<(u32, u32)> {
                all.into_iter()
                    .filter(|&(id, _)| starts(id, skip))
                    .collect()
            };
            let full = seen(|f| trie.walk_pruned(1, 0, left_out, step, f));
            assert_eq!(
                seen(|f| trie.walk_heads(1, 0, &heads, left_out, step, f)),
                restricted(full.clone(), 0),
                "{bytes:?}"
            );
            assert_eq!(
                seen(|f| copy.walk_heads(1, 0, &heads, |_| false, step, f)),
                restricted(full, 0),
            );
            let under = seen(|f| below.walk(at, 0, step, f));
            assert!(!under.is_empty());
            assert_eq!(
                seen(|f| below.walk_heads(at, 0, &heads, |_| false, step, f)),
                restricted(under, 1),
            );
        }
        assert_eq!(
            seen(|f| trie.walk_heads(1, 0, &ByteSet::ALL, |_| false, step, f)),
            seen(|f| trie.walk(1, 0, step, f)),
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
        let trie = trie_of(&words);
        let allowed: [&[u8]; 3] = [b"abca", b"bb", b"ccc"];
        let seen = prefix_walk(&trie, &allowed);
        for (i, w) in words.iter().enumerate() {
            let ok = allowed.iter().any(|a| a.starts_with(w));
            assert_eq!(seen.contains_key(&(i as u32)), ok, "token {w:?}");
        }
    }
}
