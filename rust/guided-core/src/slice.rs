//! Token slices: masks precomputed for the states that read almost every character alike.
//!
//! The expensive masks are the permissive ones. Inside a JSON string or under `.*`, the automaton
//! survives nearly every token, so a trie walk cannot prune and visits the whole trie (420k nodes
//! for o200k). Yet such a state's answer for most tokens is obvious: every printable character
//! leads to the same next state, so a token made only of such characters is allowed or not by its
//! length alone.
//!
//! A slice is a set of characters `C` fixed per vocabulary, with the tokens whose bytes spell a
//! string of whole characters from `C` (its members, grouped by how many characters they spell)
//! and a smaller trie of all the other tokens. For a state `q`, [`OneChar::advance`] says where
//! the characters of `C` lead: to one state `q'` for all of them, or not. It is decided exactly, by
//! running `q` in step with the (few-state) UTF-8 automaton of one character from `C`. Following
//! it from `q` gives a chain `q = q0, q1, q2, ...`; a member of `n` characters leads to `qn`, so
//! it is allowed exactly when the chain is alive for `n` steps. Two shapes matter:
//!
//! - the chain loops (`q1 = q`: `.*`, the body of a free JSON string), and every member is allowed;
//! - the chain dies after `k` steps (a JSON string with `maxLength`, `.{0,40}`, `[^"]{3,8}`), and
//!   the members of at most `k` characters are allowed: one union of a precomputed set
//!   ([`Slice::add_members_within`]).
//!
//! Either way the mask is that set plus a walk of the slice's remaining trie, so the shortcut
//! never changes an answer, only its cost: a counted string's forty states cost forty short
//! walks instead of forty walks of the whole vocabulary.
//!
//! Byte-level vocabularies also hold tokens that stop part-way through a character (`0xE4 0xB8`,
//! two thirds of many CJK characters; 1,400 of Qwen2's tokens). When every character that could
//! finish the cut one is in `C`, such a token is a member too, counting the cut character: where
//! the chain reads one more character, the cut one can be finished; where the chain dies, so do
//! all its completions. Only cuts that could also finish outside `C` (`0xC2` may begin a C1
//! control, which is not printable) are left to the walk, which otherwise steps into the middle
//! of a character once per token and per count, building the states in there for each.
//!
//! The slices are chosen for the constraints engines see most: printable text (`.*`, free text
//! fields) and the body of a JSON string: exactly the characters JSON lets stand raw in one
//! (everything from the space up but `"` and `\`, DEL, C1 controls and line separators
//! included), so that inside a string only those two and the C0 controls leave the slice, and
//! no cut character is left to the walk; and the same without DEL, which llama.cpp's JSON
//! grammars leave out of a string (there the slice with DEL parts ways on it, and a class slice
//! would walk every token that leaves the string byte by byte). Building them costs
//! one pass over the vocabulary and one extra trie each, once per vocabulary (2 ms at 50k tokens,
//! 11 ms at 200k, for the third); the members by length
//! cost one set per length up to [`DENSE_CHARS`] (25 KB each at 200k tokens), a sorted list of
//! the few longer members, and a set per [checkpoint](LONG_CHECKPOINTS) among those lengths.

use std::sync::Arc;

use smallvec::{smallvec, SmallVec};

use crate::bitmask::{Mask, MaskBuilder, TokenSet};
use crate::class_slice::{CharClass, ClassSlice, ClassSlices};
use crate::dfa::{Dfa, DfaConfig};
use crate::error::Result;
use crate::regex::{ClassSet, Hir};
use crate::trie::{Anchor, TokenTrie};
use crate::vocab::Vocabulary;

/// Member lengths (in characters) up to which [`Slice`] keeps one precomputed set per length;
/// longer members, a few hundred in real vocabularies, are listed, and kept in a trie of their
/// own for states that must walk them.
pub const DENSE_CHARS: usize = 16;

/// Member lengths past [`DENSE_CHARS`] at which [`Slice`] keeps the set of the members up to
/// that length (the ones below its longest member): inside a string of `maxLength: 64`, a count
/// adds one set and the members since the checkpoint below it, not every member past sixteen
/// characters.
pub const LONG_CHECKPOINTS: [usize; 5] = [24, 32, 48, 64, 96];

/// An anchor of the full trie holds at least one token in this many ([`TokenTries::anchors`]).
pub const ANCHOR_SHARE: usize = 8;

/// A first byte of the full trie is one of [`TokenTries::heads`] with at least this many nodes
/// below it, and a walk takes a class slice below it only where at least this many of them are
/// alive: a walk of fewer costs about what finding a class slice for them does.
pub const BIG_HEAD_NODES: usize = 1024;

/// Per state of a slice's one-character automaton, the bytes worth trying with where each leads
/// ([`OneChar::representatives`]).
pub type Representatives = Vec<Vec<(u8, u32)>>;

/// Where a slice's characters lead from a state ([`OneChar::advance`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// Every character of the slice leads to this state (the dead state included).
    To(u32),
    /// Characters of the slice lead to different states.
    Mixed,
}

/// The automaton of one character from a set, read byte by byte: where a set's characters lead
/// from a state of another automaton ([`advance`](Self::advance)), and where a token's bytes
/// stand among the set's characters ([`read`](Self::read)).
#[derive(Debug)]
pub struct OneChar {
    dfa: Dfa,
    /// The ASCII characters of the set, bit `b` for byte `b`.
    ascii: u128,
}

impl OneChar {
    /// The automaton of one character from `chars`.
    pub fn new(chars: &ClassSet) -> Result<Self> {
        let ascii = (0..128u8)
            .filter(|&b| chars.contains(u32::from(b)))
            .fold(0u128, |bits, b| bits | 1 << b);
        Ok(OneChar {
            dfa: Dfa::from_hir(&Hir::class(chars.clone()), &DfaConfig::default())?,
            ascii,
        })
    }

    /// The ASCII characters of the set, bit `b` for byte `b`: one byte each, so where two of
    /// them lead from a state to different states, the set's characters part ways there
    /// ([`Advance::Mixed`]) whatever the others do.
    pub fn ascii(&self) -> u128 {
        self.ascii
    }

    /// The position between characters, where [`read`](Self::read) starts and returns after
    /// each whole character.
    pub fn boundary(&self) -> u32 {
        self.dfa.start()
    }

    /// The position after `byte` read at `at`: the boundary when it ends a character of the set,
    /// a position inside one when it continues it, `None` when it leaves the set.
    pub fn read(&self, at: u32, byte: u8) -> Option<u32> {
        let next = self.dfa.next_state(at, byte);
        if next == self.dfa.dead() {
            None
        } else if self.dfa.is_accepting(next) {
            Some(self.dfa.start())
        } else {
            Some(next)
        }
    }

    /// The bytes [`advance`](Self::advance) needs to try, for an automaton whose bytes fall into
    /// `class_of`'s classes: per state of the one-character automaton, one byte for each
    /// distinct pair (where the byte leads in that automaton, the byte's class), with where it
    /// leads. Bytes of one class move alike from every state, so one of them answers for all:
    /// tens of steps per state instead of 256.
    pub fn representatives(&self, class_of: &[u8; 256]) -> Representatives {
        let u = &self.dfa;
        // Bytes in one class of both automata move alike from every state of each, so only the
        // first byte of each such pair is tried: tens of bytes per state, not 256. Both tables
        // below are flat flags indexed by the pair, which keeps this one pass over the bytes and
        // one over the pairs per state; it runs on each index's first masks.
        let u_classes = u.classes().num_classes();
        // Both tables are sized by the classes the automaton has, not by 256: a digit
        // pattern's few classes make them a few hundred bytes, where 256 made the second one
        // 50 KB to zero, a fifth of the instructions of such an index's first pass.
        let classes = usize::from(class_of.iter().copied().max().unwrap_or(0)) + 1;
        let mut pair_seen = vec![false; classes * u_classes];
        let firsts: Vec<u8> = (0..=255u8)
            .filter(|&b| {
                let pair =
                    usize::from(class_of[b as usize]) * u_classes + usize::from(u.classes().get(b));
                !std::mem::replace(&mut pair_seen[pair], true)
            })
            .collect();
        // Per state, which (successor, class) pairs already have a byte, stamped with the state
        // (plus one) so that the table is never cleared.
        let mut kept = vec![0u32; u.num_states() * classes];
        (0..u.num_states() as u32)
            .map(|us| {
                let mut reps: Vec<(u8, u32)> = Vec::new();
                for &b in &firsts {
                    let un = u.next_state(us, b);
                    if un == u.dead() {
                        continue;
                    }
                    let slot = un as usize * classes + usize::from(class_of[b as usize]);
                    if kept[slot] != us + 1 {
                        kept[slot] = us + 1;
                        reps.push((b, un));
                    }
                }
                reps
            })
            .collect()
    }

    /// Where every character of the set leads from `state`. `step` is the automaton's
    /// transition, with `dead` its dead state; it may answer `None` (a row the caller cannot
    /// read yet), and then so does `advance`. `reps` are the automaton's
    /// [`representatives`](Self::representatives).
    pub fn advance(
        &self,
        state: u32,
        dead: u32,
        reps: &Representatives,
        mut step: impl FnMut(u32, u8) -> Option<u32>,
    ) -> Option<Advance> {
        // Pairs (position in one character, automaton state) still to expand, and those seen.
        // A character is at most four bytes, so a handful of pairs is the norm: both lists stay
        // on the stack, since a class search asks this of every state it reaches (four hundred
        // times along the tool-call workload's first pass), and allocating and growing them on
        // the heap was about a quarter of its cost.
        let u = &self.dfa;
        let mut stack: SmallVec<[(u32, u32); 16]> = smallvec![(u.start(), state)];
        let mut seen: SmallVec<[(u32, u32); 16]> = smallvec![(u.start(), state)];
        let mut target = None;
        let mut lands = |t: u32| match target {
            None => {
                target = Some(t);
                true
            }
            Some(previous) => previous == t,
        };
        while let Some((us, ms)) = stack.pop() {
            for &(b, un) in &reps[us as usize] {
                let mn = step(ms, b)?;
                // A character that dies part-way leads to the dead state like one that dies at
                // its end.
                let end = if mn == dead {
                    Some(dead)
                } else if u.is_accepting(un) {
                    Some(mn)
                } else {
                    None
                };
                match end {
                    Some(t) if !lands(t) => return Some(Advance::Mixed),
                    Some(_) => {}
                    None if !seen.contains(&(un, mn)) => {
                        seen.push((un, mn));
                        stack.push((un, mn));
                    }
                    None => {}
                }
            }
        }
        Some(Advance::To(target.unwrap_or(dead)))
    }

    fn memory_bytes(&self) -> usize {
        self.dfa.memory_bytes()
    }
}

/// How many characters of `chars` a token spells, if it spells nothing else: its whole
/// characters, and one more for a last character it cuts short when every character that
/// could complete it is in `chars`. Such a token is allowed exactly where a member of that
/// many characters is: where the chain reads one more character, the cut one can be finished
/// (and is alive); where it ends, every completion dies with the other characters of the set.
/// A cut character that could also be completed outside the set (`0xC2` begins U+0080..U+00BF,
/// controls among them) is decided by the walk.
fn spelled_chars(bytes: &[u8], chars: &ClassSet) -> Option<usize> {
    let (text, cut) = match std::str::from_utf8(bytes) {
        Ok(text) => (text, &[][..]),
        // Valid up to an unfinished character (`error_len` is `None` only there).
        Err(e) if e.error_len().is_none() => {
            let (whole, cut) = bytes.split_at(e.valid_up_to());
            (std::str::from_utf8(whole).ok()?, cut)
        }
        Err(_) => return None,
    };
    if !text.chars().all(|c| chars.contains(c as u32)) {
        return None;
    }
    let whole = text.chars().count();
    if cut.is_empty() {
        return Some(whole);
    }
    chars.is_superset(&completions(cut)).then_some(whole + 1)
}

/// The characters whose UTF-8 form starts with `cut`, the valid beginning of a multi-byte
/// character (as `str::from_utf8` reports it): the range between `cut` padded with the
/// lowest and the highest continuation bytes, within the code points of that length and
/// without the surrogates (`0xE0` alone would pad to an overlong form, `0xED` to surrogates).
fn completions(cut: &[u8]) -> ClassSet {
    let len = match cut[0] {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    };
    let decode = |pad: u8| {
        let lead = u32::from(cut[0]) & (0x7F >> len);
        let rest = cut[1..].iter().copied().chain(std::iter::repeat(pad));
        rest.take(len - 1)
            .fold(lead, |cp, b| cp << 6 | u32::from(b & 0x3F))
    };
    let of_len = match len {
        2 => (0x80, 0x7FF),
        3 => (0x800, 0xFFFF),
        _ => (0x1_0000, 0x10_FFFF),
    };
    ClassSet::range(decode(0x80), decode(0xBF))
        .intersect(&ClassSet::range(of_len.0, of_len.1))
        .difference(&ClassSet::range(0xD800, 0xDFFF))
}

/// How many whole characters of `chars` a token starts with, and the byte where they end.
fn leading_chars(bytes: &[u8], chars: &ClassSet) -> (usize, usize) {
    let valid = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
    };
    let mut n = 0;
    for (at, c) in valid.char_indices() {
        if !chars.contains(c as u32) {
            return (n, at);
        }
        n += 1;
    }
    (n, valid.len())
}

/// One slice: a character set, the tokens spelled entirely from it, and a trie of the rest.
#[derive(Debug)]
pub struct Slice {
    name: &'static str,
    one_char: OneChar,
    members: Mask,
    /// `within[n]`: the members of at most `n` characters, for `n <= DENSE_CHARS`, in the
    /// compact form a mask builder takes without counting them again.
    within: Vec<Mask>,
    /// Members longer than [`DENSE_CHARS`] characters: `(characters, id)`, sorted.
    long: Vec<(u32, u32)>,
    /// `(n, members of at most n characters)` for the [`LONG_CHECKPOINTS`] below the longest
    /// member, so that a count past [`DENSE_CHARS`] adds a set and the few members since.
    long_within: Vec<(usize, Mask)>,
    /// The same members as a trie, for a walk.
    long_trie: TokenTrie,
    max_chars: usize,
    rest: TokenTrie,
    /// The rest again, cut where each token leaves the slice: `(n, trie)` holds, for the tokens
    /// that start with `n` whole characters of the slice, the bytes from there on; by `n`.
    leaving: Vec<(usize, TokenTrie)>,
}

impl Slice {
    fn new(name: &'static str, chars: ClassSet, vocab: &Vocabulary, eos: &[u32]) -> Result<Self> {
        let one_char = OneChar::new(&chars)?;
        let size = vocab.vocab_size();
        let mut members = TokenSet::empty(size);
        let mut within = vec![TokenSet::empty(size); DENSE_CHARS + 1];
        let mut long = Vec::new();
        let mut max_chars = 0;
        let mut rest = Vec::new();
        for (id, bytes) in vocab.text_tokens() {
            // A token that writes nothing is never allowed (the trie leaves it out too).
            if eos.contains(&id) || bytes.is_empty() {
                continue;
            }
            match spelled_chars(bytes, &chars) {
                Some(n) => {
                    members.insert(id);
                    max_chars = max_chars.max(n);
                    if n <= DENSE_CHARS {
                        within[n].insert(id);
                    } else {
                        long.push((n as u32, id));
                    }
                }
                None => rest.push((id, bytes)),
            }
        }
        let mut cut: Vec<Vec<(u32, &[u8])>> = Vec::new();
        for &(id, bytes) in &rest {
            let (n, at) = leading_chars(bytes, &chars);
            if cut.len() <= n {
                cut.resize_with(n + 1, Vec::new);
            }
            cut[n].push((id, &bytes[at..]));
        }
        let leaving = cut
            .into_iter()
            .enumerate()
            .filter(|(_, tokens)| !tokens.is_empty())
            .map(|(n, tokens)| (n, TokenTrie::new(tokens)))
            .collect();
        for n in 1..within.len() {
            let (shorter, this) = within.split_at_mut(n);
            this[0].union_with(&shorter[n - 1]);
        }
        long.sort_unstable();
        let mut long_within = Vec::new();
        let mut upto = within[DENSE_CHARS].clone();
        let mut taken = 0;
        for &n in LONG_CHECKPOINTS.iter().filter(|&&n| n < max_chars) {
            let more = long[taken..].partition_point(|&(chars, _)| chars as usize <= n);
            long[taken..taken + more]
                .iter()
                .for_each(|&(_, id)| upto.insert(id));
            taken += more;
            long_within.push((n, Mask::from_set(upto.clone())));
        }
        let within = within.into_iter().map(Mask::from_set).collect();
        let long_trie = TokenTrie::new(
            long.iter()
                .filter_map(|&(_, id)| Some((id, vocab.token_bytes(id)?))),
        );
        Ok(Slice {
            name,
            one_char,
            members: Mask::from_set(members),
            within,
            long,
            long_within,
            long_trie,
            max_chars,
            rest: TokenTrie::new(rest),
            leaving,
        })
    }

    /// The slice's name, for figures and debugging.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Tokens spelled entirely from the slice's characters.
    pub fn members(&self) -> &Mask {
        &self.members
    }

    /// The most characters a member spells.
    pub fn max_chars(&self) -> usize {
        self.max_chars
    }

    /// Adds to `set` the members of at most `chars` characters.
    pub fn add_members_within(&self, chars: usize, set: &mut MaskBuilder) {
        if chars >= self.max_chars {
            set.add_mask(&self.members);
            return;
        }
        // The members up to the last checkpoint within `chars`, then those since, one by one
        // (hundreds past 16 characters in Qwen2's vocabulary, a few between checkpoints).
        let (from, upto) = match self.long_within.iter().rev().find(|&&(n, _)| n <= chars) {
            Some((n, upto)) => (*n, upto),
            None => (DENSE_CHARS, &self.within[chars.min(DENSE_CHARS)]),
        };
        set.add_mask(upto);
        let first = self.long.partition_point(|&(n, _)| n as usize <= from);
        for &(_, id) in self.long[first..]
            .iter()
            .take_while(|&&(n, _)| n as usize <= chars)
        {
            set.insert(id);
        }
    }

    /// The members longer than [`DENSE_CHARS`] characters, as a trie.
    pub fn long_members(&self) -> &TokenTrie {
        &self.long_trie
    }

    /// The trie of every other token.
    pub fn rest(&self) -> &TokenTrie {
        &self.rest
    }

    /// The other tokens by where they leave the slice: `(n, trie)` holds the tokens that start
    /// with `n` whole characters of the slice and, as a trie, their bytes after those; by `n`.
    /// From a state whose chain reads `n` characters to `q`, such a token is allowed exactly when
    /// its bytes after the `n` survive from `q`.
    pub fn leaving(&self) -> &[(usize, TokenTrie)] {
        &self.leaving
    }

    /// Where the slice's characters lie among bytes ([`OneChar`]).
    pub fn chars(&self) -> &OneChar {
        &self.one_char
    }

    fn memory_bytes(&self) -> usize {
        self.members.memory_bytes()
            + self.within.iter().map(Mask::memory_bytes).sum::<usize>()
            + self
                .long_within
                .iter()
                .map(|(_, m)| m.memory_bytes())
                .sum::<usize>()
            + self.long.capacity() * 8
            + self.long_trie.memory_bytes()
            + self.rest.memory_bytes()
            + self
                .leaving
                .iter()
                .map(|(_, trie)| trie.memory_bytes())
                .sum::<usize>()
            + self.one_char.memory_bytes()
    }
}

/// A vocabulary's trie with its slices: everything a token index walks.
#[derive(Debug)]
pub struct TokenTries {
    full: TokenTrie,
    slices: Vec<Slice>,
    anchors: Vec<Anchor>,
    /// The first bytes that head many tokens, outside the anchors ([`TokenTrie::big_heads`]).
    heads: Vec<Anchor>,
    /// The printable characters past ASCII, which wide class slices add to their ASCII bytes.
    wide: OneChar,
    classes: ClassSlices,
    vocab_size: usize,
}

impl TokenTries {
    /// Builds the full trie and the standard slices of `vocab` (EOS ids are left out of both:
    /// the index decides EOS separately).
    pub fn new(vocab: &Vocabulary) -> Result<Self> {
        let eos = vocab.eos_token_ids();
        let full = TokenTrie::new(vocab.text_tokens().filter(|(id, _)| !eos.contains(id)));
        let wide = ClassSet::from_ranges([(0xA0, 0x2027), (0x202A, 0x10FFFF)]);
        let printable = ClassSet::from_ranges([(0x20, 0x7E)]).union(&wide);
        // Surrogates are not characters; `"`, `\` and the C0 controls must be escaped.
        let json = ClassSet::from_ranges([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF)])
            .union(&ClassSet::range(0xE000, 0x10FFFF));
        // llama.cpp's JSON grammars (its `json.gbnf`, and every grammar its schema converter
        // writes) spell a string's character `[^"\\\x7F\x00-\x1F]`: the JSON string's
        // characters without DEL, on which the slice above parts ways.
        let json_no_del = json.difference(&ClassSet::range(0x7F, 0x7F));
        let slices = vec![
            Slice::new("printable", printable, vocab, eos)?,
            Slice::new("json_string", json, vocab, eos)?,
            Slice::new("json_string_no_del", json_no_del, vocab, eos)?,
        ];
        let anchors = full.anchors((vocab.vocab_size() / ANCHOR_SHARE).max(1));
        let heads = full.big_heads(BIG_HEAD_NODES, &anchors);
        Ok(TokenTries {
            full,
            slices,
            anchors,
            heads,
            wide: OneChar::new(&wide)?,
            classes: ClassSlices::default(),
            vocab_size: vocab.vocab_size(),
        })
    }

    /// The trie of every token.
    pub fn full(&self) -> &TokenTrie {
        &self.full
    }

    /// The slices, widest first.
    pub fn slices(&self) -> &[Slice] {
        &self.slices
    }

    /// The nodes of the full trie under which much of the vocabulary hangs (see
    /// [`TokenTrie::anchors`]): at least one token in [`ANCHOR_SHARE`] each.
    pub fn anchors(&self) -> &[Anchor] {
        &self.anchors
    }

    /// The ASCII first bytes with at least [`BIG_HEAD_NODES`] nodes below them and no anchor
    /// (see [`TokenTrie::big_heads`]): where a state inside a class leaves it on a byte that
    /// starts many tokens (`.` or `-` inside a domain name), the walk below that byte may take
    /// a class slice of its own.
    pub fn heads(&self) -> &[Anchor] {
        &self.heads
    }

    /// The printable characters past ASCII, which a wide [`CharClass`] holds.
    pub fn wide_chars(&self) -> &OneChar {
        &self.wide
    }

    /// The slice of a character class (see [`crate::class_slice`]) over the full trie, or below
    /// `anchor` (one of [`anchors`](Self::anchors) or [`heads`](Self::heads)), built on first
    /// use.
    pub fn class_slice(&self, class: CharClass, anchor: Option<&Anchor>) -> Arc<ClassSlice> {
        self.classes.get(
            class,
            &self.wide,
            &self.full,
            anchor,
            &self.anchors,
            self.vocab_size,
        )
    }

    /// Bytes held by the tries and slice masks.
    pub fn memory_bytes(&self) -> usize {
        self.full.memory_bytes()
            + self.slices.iter().map(Slice::memory_bytes).sum::<usize>()
            + self.wide.memory_bytes()
            + self.classes.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> Vocabulary {
        let tokens: Vec<Option<&[u8]>> = vec![
            Some(b"ab"),
            Some(b"a\"b"),
            Some("é".as_bytes()),
            Some(&[0xC3]),
            Some(b"\n"),
            None,
            Some(&[0xC2]),
            Some(b"a\xE4\xB8"),
        ];
        Vocabulary::new(tokens, vec![5], None).expect("vocabulary")
    }

    #[test]
    fn members_are_whole_characters_from_the_set() {
        let tries = TokenTries::new(&vocab()).expect("tries");
        let json = &tries.slices()[1];
        // A cut character is one more when all its completions are members (0xC3 begins
        // U+00C0..U+00FF, 0xE4 0xB8 U+4E00..U+4E3F, 0xC2 U+0080..U+00BF, which a JSON string
        // may hold raw) and left to the walk when one is not.
        assert_eq!(json.members().ids(), vec![0, 2, 3, 6, 7]);
        assert_eq!(json.rest().num_nodes(), 4, "a\"b and the newline");
        assert_eq!(json.max_chars(), 2);
        // U+0080..U+009F are controls, not printable: the lone 0xC2 is walked.
        let printable = &tries.slices()[0];
        assert_eq!(printable.members().ids(), vec![0, 1, 2, 3, 7]);
        assert_eq!(
            printable.rest().num_nodes(),
            2,
            "the newline and the lone 0xC2 byte"
        );
    }

    /// Every byte its own class: the representatives are every live byte.
    fn reps(slice: &Slice) -> Representatives {
        let mut class_of = [0u8; 256];
        for (b, c) in class_of.iter_mut().enumerate() {
            *c = b as u8;
        }
        slice.chars().representatives(&class_of)
    }

    #[test]
    fn representatives_keep_one_byte_per_class_and_move() {
        let tries = TokenTries::new(&vocab()).expect("tries");
        let json = &tries.slices()[1];
        let every = reps(json);
        // Two classes, ASCII and the rest: the start state needs ASCII (one byte) and each lead
        // byte's move, continuation states one continuation byte.
        let mut class_of = [1u8; 256];
        class_of[..128].fill(0);
        let few = json.chars().representatives(&class_of);
        assert_eq!(few.len(), every.len());
        for (f, e) in few.iter().zip(&every) {
            assert!(f.len() <= e.len());
            let moves = |r: &[(u8, u32)]| {
                let mut m: Vec<(u8, u32)> =
                    r.iter().map(|&(b, n)| (class_of[b as usize], n)).collect();
                m.sort_unstable();
                m.dedup();
                m
            };
            assert_eq!(moves(f), moves(e), "the same moves, by class");
        }
        assert!(few.iter().map(Vec::len).sum::<usize>() < 64);
    }

    #[test]
    fn advance_is_exact() {
        let tries = TokenTries::new(&vocab()).expect("tries");
        let json = &tries.slices()[1];
        let (json_reps, printable_reps) = (reps(json), reps(&tries.slices()[0]));
        // A string-body automaton: state 1 loops on everything but `"` and `\`, which go to 2.
        let body = |s: u32, b: u8| {
            Some(match (s, b) {
                (1, b'"') | (1, b'\\') => 2,
                (1, 0x00..=0x1F) => 0,
                (1, _) => 1,
                _ => 0,
            })
        };
        // Multi-byte characters pass through the same state byte by byte here, so they loop.
        assert_eq!(
            json.chars().advance(1, 0, &json_reps, body),
            Some(Advance::To(1))
        );
        assert_eq!(
            tries.slices()[0]
                .chars()
                .advance(1, 0, &printable_reps, body),
            Some(Advance::Mixed),
            "`\"` leaves the state"
        );
        // An automaton that refuses non-ASCII bytes sends the slice's characters two ways.
        let ascii = |s: u32, b: u8| {
            Some(if s == 1 && (0x20..0x7F).contains(&b) {
                1
            } else {
                0
            })
        };
        assert_eq!(
            json.chars().advance(1, 0, &json_reps, ascii),
            Some(Advance::Mixed)
        );
        // A counter: state k reads one character and moves to k - 1; state 1 reads nothing
        // more. While a character is unfinished the state is `1000 * r + k`, with `r` of its
        // continuation bytes still to come.
        let counter = |s: u32, b: u8| {
            let (r, k) = (s / 1000, s % 1000);
            Some(match (r, b) {
                _ if k <= 1 => 0,
                (0, 0x20..=0x7F) if b != b'"' && b != b'\\' => k - 1,
                (0, 0xC2..=0xDF) => 1000 + k,
                (0, 0xE0..=0xEF) => 2000 + k,
                (0, 0xF0..=0xF4) => 3000 + k,
                (1, 0x80..=0xBF) => k - 1,
                (2 | 3, 0x80..=0xBF) => (r - 1) * 1000 + k,
                _ => 0,
            })
        };
        assert_eq!(
            json.chars().advance(5, 0, &json_reps, counter),
            Some(Advance::To(4))
        );
        assert_eq!(
            json.chars().advance(1, 0, &json_reps, counter),
            Some(Advance::To(0))
        );
        // Three- and four-byte characters die part-way, two-byte ones do not: mixed.
        assert_eq!(
            json.chars()
                .advance(5, 0, &json_reps, |s, b| if b >= 0xE0 && s < 1000 {
                    Some(0)
                } else {
                    counter(s, b)
                }),
            Some(Advance::Mixed)
        );
        // A row the caller cannot read makes the answer unknown, not wrong.
        assert_eq!(json.chars().advance(1, 0, &json_reps, |_, _| None), None);
    }

    #[test]
    fn members_within_a_length_are_counted_in_characters() {
        let words: Vec<String> = (1..=40).map(|n| "é".repeat(n)).collect();
        let mut tokens: Vec<Option<&[u8]>> = words.iter().map(|w| Some(w.as_bytes())).collect();
        tokens.push(Some(b""));
        tokens.push(None);
        let v = Vocabulary::new(tokens, vec![41], None).expect("vocabulary");
        let tries = TokenTries::new(&v).expect("tries");
        let json = &tries.slices()[1];
        assert_eq!(json.max_chars(), 40);
        assert!(
            !json.members().contains(40),
            "the empty token writes nothing"
        );
        for chars in [
            0,
            1,
            7,
            DENSE_CHARS,
            DENSE_CHARS + 1,
            23,
            24,
            25,
            32,
            33,
            39,
            40,
            99,
        ] {
            let mut set = MaskBuilder::new(v.vocab_size());
            json.add_members_within(chars, &mut set);
            let expected: Vec<u32> = (0..chars.min(40) as u32).collect();
            assert_eq!(set.finish().ids(), expected, "within {chars}");
        }
    }
}
