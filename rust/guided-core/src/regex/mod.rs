//! The regex front end: the dialect's parser and the HIR it produces.
//!
//! The dialect is the practical subset of Python's `re` and ECMA-262 that has a meaning under
//! full match over bytes (see [`parser`] for what it reads and what it refuses by name).

pub mod hir;
pub mod parser;
mod rust_syntax;

pub use hir::{Call, ClassSet, Grammar, Hir, Look, Shared, MAX_CODE_POINT};
pub use parser::{parse, parse_ecma, parse_with, Dialect, ParserConfig};
