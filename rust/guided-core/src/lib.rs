//! # guided-core
//!
//! The algorithms behind guided, in pure Rust: a regex dialect and its parser, UTF-8 range
//! splitting, Thompson NFAs over bytes, byte-class DFAs, and (in later modules) vocabularies,
//! token indexes and packed token bitmasks.
//!
//! Everything runs over **bytes**. Language-model tokens are byte strings, and many of them end in
//! the middle of a multi-byte UTF-8 character, so an automaton over characters could not say
//! whether such a token may come next. Character classes are therefore lowered to sequences of
//! byte ranges ([`utf8`]) before any automaton is built.
//!
//! The pipeline: pattern text -> [`regex::Hir`] -> [`nfa::Nfa`] -> [`dfa::Dfa`]. Each stage has
//! a size budget that raises [`Error::SizeLimit`] instead of exhausting memory.

#![deny(missing_docs)]

pub mod bitmask;
pub mod byte_set;
pub mod class_slice;
pub mod dfa;
pub mod error;
pub mod grammar;
pub mod guide;
mod hash_ids;
pub mod index;
pub mod json_schema;
pub mod nfa;
pub mod regex;
pub mod slice;
mod stack;
pub mod stop;
pub mod structural_tag;
#[cfg(test)]
mod testing;
pub mod trie;
pub mod utf8;
pub mod vocab;

pub use error::{Error, Result};
pub use vocab::Vocabulary;
