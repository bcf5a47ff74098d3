//! One error type for the whole core.
//!
//! Every way the library can refuse its input is a variant here, and each variant maps one to one
//! onto a Python exception class (`RegexSyntaxError`, `UnsupportedSchemaError`, `SizeLimitError`,
//! `VocabularyError`, `InvalidTokenError`). Keeping the mapping this flat means the bindings never
//! have to guess: they match on the variant and copy its fields into the exception's attributes.
//! Messages name the construct and where it is, because "bad pattern" is useless to a user who sent
//! a 4 KB schema.

use thiserror::Error;

/// Everything the core can refuse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// A pattern that is malformed or uses a construct outside the dialect.
    #[error("regex syntax error at position {position}: {message} (in pattern {pattern:?})")]
    RegexSyntax {
        /// The pattern as given.
        pattern: String,
        /// Offset of the offending construct, in code points from the start of the pattern.
        position: usize,
        /// What is wrong, naming the construct.
        message: String,
    },
    /// Grammar text that is malformed, or rules that cannot be compiled (an undefined rule, left
    /// recursion that cannot be rewritten, a root that derives no text).
    #[error("grammar error at line {line}, column {column}: {message}")]
    GrammarSyntax {
        /// 1-based line of the offending construct.
        line: u32,
        /// 1-based column, in code points.
        column: u32,
        /// What is wrong, naming the construct or rule.
        message: String,
    },
    /// A JSON Schema keyword (or value) that cannot be enforced exactly.
    #[error("unsupported schema at {pointer:?}: {message}")]
    UnsupportedSchema {
        /// The keyword at fault.
        keyword: String,
        /// JSON pointer to the schema object holding it.
        pointer: String,
        /// Why it cannot be compiled.
        message: String,
    },
    /// A configurable size or time budget was crossed.
    #[error("size limit exceeded: {limit} reached {value}, the maximum is {maximum}")]
    SizeLimit {
        /// Name of the limit (`max_states`, `nfa_states`, `max_recursion_depth`, ...).
        limit: String,
        /// The value that crossed it.
        value: u64,
        /// The configured maximum.
        maximum: u64,
    },
    /// Tokenizer data that cannot be read or does not hold together.
    #[error("vocabulary error: {0}")]
    Vocabulary(String),
    /// A token the constraint does not allow in this state, or an id out of range.
    #[error("invalid token {token} in {}: {message}", state_name(*state))]
    InvalidToken {
        /// The token id.
        token: i64,
        /// The automaton state it was offered in (`u32::MAX`: the terminal state, after EOS).
        state: u32,
        /// Why it was refused.
        message: String,
    },
    /// Any other bad argument (a state that does not exist, a rollback past the history).
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// A `SizeLimit` error for `limit`, which reached `value` against `maximum`.
    pub fn size_limit(limit: &str, value: usize, maximum: usize) -> Self {
        Error::SizeLimit {
            limit: limit.to_string(),
            value: value as u64,
            maximum: maximum as u64,
        }
    }
}

/// How an error names a state: the terminal state (`u32::MAX`, after EOS) has no number a
/// caller would recognise.
fn state_name(state: u32) -> String {
    if state == u32::MAX {
        "the terminal state (EOS was accepted)".to_string()
    } else {
        format!("state {state}")
    }
}

/// The core's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
