//! Token slices: masks precomputed for the states that loop on almost every character.
//!
//! The expensive masks are the permissive ones. Inside a JSON string or under `.*`, the automaton
//! survives nearly every token, so a trie walk cannot prune and visits the whole trie (420k nodes
//! for o200k). Yet such a state's answer for most tokens is obvious: the state loops on every
//! printable character, so any token made only of such characters leads straight back to it.
//!
//! A slice is a set of characters `C` fixed per vocabulary, with the mask of the tokens whose
//! bytes spell a string of whole characters from `C`, and a smaller trie of all the other tokens.
//! For a state `q`, a slice applies when every character of `C`, read from `q`, comes back to `q`;
//! then the mask of `q` is the slice's mask plus a walk of the slice's remaining trie. Whether a
//! slice applies is decided exactly, by running `q` in step with the (few-state) UTF-8 automaton
//! of one character from `C`, so the shortcut never changes an answer, only its cost.
//!
//! The slices are chosen for the constraints engines see most: printable text (`.*`, free text
//! fields) and the body of a JSON string (printable text without `"` and `\`). Building them costs
//! one pass over the vocabulary and one extra trie each, once per vocabulary.

use crate::bitmask::TokenSet;
use crate::dfa::{Dfa, DfaConfig};
use crate::error::Result;
use crate::regex::{ClassSet, Hir};
use crate::trie::TokenTrie;
use crate::vocab::Vocabulary;

/// One slice: a character set, the tokens spelled entirely from it, and a trie of the rest.
#[derive(Debug)]
pub struct Slice {
    name: &'static str,
    one_char: Dfa,
    members: TokenSet,
    rest: TokenTrie,
}

impl Slice {
    fn new(name: &'static str, chars: ClassSet, vocab: &Vocabulary, eos: &[u32]) -> Result<Self> {
        let one_char = Dfa::from_hir(&Hir::class(chars.clone()), &DfaConfig::default())?;
        let mut members = TokenSet::empty(vocab.vocab_size());
        let mut rest = Vec::new();
        for (id, bytes) in vocab.text_tokens() {
            if eos.contains(&id) {
                continue;
            }
            let inside = std::str::from_utf8(bytes)
                .is_ok_and(|text| text.chars().all(|c| chars.contains(c as u32)));
            if inside {
                members.insert(id);
            } else {
                rest.push((id, bytes));
            }
        }
        Ok(Slice {
            name,
            one_char,
            members,
            rest: TokenTrie::new(rest),
        })
    }

    /// The slice's name, for figures and debugging.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Tokens spelled entirely from the slice's characters.
    pub fn members(&self) -> &TokenSet {
        &self.members
    }

    /// The trie of every other token.
    pub fn rest(&self) -> &TokenTrie {
        &self.rest
    }

    /// Whether every character of the slice leads from `state` back to `state`. `step` is the
    /// automaton's transition and `dead` its dead state.
    pub fn loops_on(&self, state: u32, dead: u32, mut step: impl FnMut(u32, u8) -> u32) -> bool {
        // Pairs (position in one character, automaton state) still to expand.
        let u = &self.one_char;
        let mut stack = vec![(u.start(), state)];
        let mut seen = vec![(u.start(), state)];
        while let Some((us, ms)) = stack.pop() {
            for b in 0..=255u8 {
                let un = u.next_state(us, b);
                if un == u.dead() {
                    continue;
                }
                let mn = step(ms, b);
                if mn == dead {
                    return false;
                }
                if u.is_accepting(un) {
                    if mn != state {
                        return false;
                    }
                } else if !seen.contains(&(un, mn)) {
                    seen.push((un, mn));
                    stack.push((un, mn));
                }
            }
        }
        true
    }

    fn memory_bytes(&self) -> usize {
        self.members.memory_bytes() + self.rest.memory_bytes() + self.one_char.memory_bytes()
    }
}

/// A vocabulary's trie with its slices: everything a token index walks.
#[derive(Debug)]
pub struct TokenTries {
    full: TokenTrie,
    slices: Vec<Slice>,
}

impl TokenTries {
    /// Builds the full trie and the standard slices of `vocab` (EOS ids are left out of both:
    /// the index decides EOS separately).
    pub fn new(vocab: &Vocabulary) -> Result<Self> {
        let eos = vocab.eos_token_ids();
        let full = TokenTrie::new(vocab.text_tokens().filter(|(id, _)| !eos.contains(id)));
        let printable = ClassSet::from_ranges([(0x20, 0x7E), (0xA0, 0x2027), (0x202A, 0x10FFFF)]);
        let json = printable.difference(&ClassSet::from_ranges([(0x22, 0x22), (0x5C, 0x5C)]));
        let slices = vec![
            Slice::new("printable", printable, vocab, eos)?,
            Slice::new("json_string", json, vocab, eos)?,
        ];
        Ok(TokenTries { full, slices })
    }

    /// The trie of every token.
    pub fn full(&self) -> &TokenTrie {
        &self.full
    }

    /// The slices, widest first.
    pub fn slices(&self) -> &[Slice] {
        &self.slices
    }

    /// Bytes held by the tries and slice masks.
    pub fn memory_bytes(&self) -> usize {
        self.full.memory_bytes() + self.slices.iter().map(Slice::memory_bytes).sum::<usize>()
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
        ];
        Vocabulary::new(tokens, vec![5], None).expect("vocabulary")
    }

    #[test]
    fn members_are_whole_characters_from_the_set() {
        let tries = TokenTries::new(&vocab()).expect("tries");
        let json = &tries.slices()[1];
        assert_eq!(json.members().iter().collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(
            json.rest().num_nodes(),
            5,
            "a\"b, the lone 0xC3 byte and the newline"
        );
        let printable = &tries.slices()[0];
        assert_eq!(
            printable.members().iter().collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn loops_on_is_exact() {
        let tries = TokenTries::new(&vocab()).expect("tries");
        let json = &tries.slices()[1];
        // A string-body automaton: state 1 loops on everything but `"` and `\`, which go to 2.
        let body = |s: u32, b: u8| match (s, b) {
            (1, b'"') | (1, b'\\') => 2,
            (1, 0x00..=0x1F) => 0,
            (1, _) => 1,
            _ => 0,
        };
        // Multi-byte characters pass through the same state byte by byte here, so they loop.
        assert!(json.loops_on(1, 0, body));
        assert!(
            !tries.slices()[0].loops_on(1, 0, body),
            "`\"` leaves the state"
        );
        // An automaton that refuses non-ASCII bytes does not loop on the slice.
        let ascii = |s: u32, b: u8| {
            if s == 1 && (0x20..0x7F).contains(&b) {
                1
            } else {
                0
            }
        };
        assert!(!json.loops_on(1, 0, ascii));
    }
}
