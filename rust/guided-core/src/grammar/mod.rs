//! Context-free grammars: front ends that read grammar text into rules, and the lowering of those
//! rules into one [`Hir`] the token index already knows how to walk.
//!
//! A grammar is a set of named rules, and most of a real grammar is regular: the rules for a JSON
//! string, a number, white space or a keyword never refer back to themselves. Only the rules on a
//! cycle (a JSON value inside an array inside a value) need a stack. So the lowering ([`lower`])
//! finds the strongly connected components of the reference graph, inlines every rule that is not
//! on a cycle as an ordinary expression (shared, so a rule used in ten places is one automaton),
//! and keeps each recursive rule as a [`Hir::Call`] of a [`Hir::Grammar`] rule. The NFA layer
//! compiles each rule once and the lazy subset construction follows calls with a stack, so the
//! states a generation visits are built on demand, exactly as for a recursive JSON Schema.
//!
//! What a stack machine walking left to right cannot do is call a rule that calls itself before
//! reading anything: left recursion. A rule that is directly left-recursive (`expr ::= expr "+"
//! term | term`) is rewritten into the iteration it means (`term ("+" term)*`); any other left
//! recursion is refused with [`Error::GrammarSyntax`](crate::error::Error::GrammarSyntax) naming the rule, as are undefined rules, a
//! missing root and a grammar whose root derives no text. Nothing here knows about tokens.
//!
//! The front ends: [`gbnf`] (llama.cpp's GBNF and xgrammar's EBNF, one syntax) and [`lark`] (the
//! Python `lark` parser's syntax, llguidance's grammar language). Each produces [`ast::Rule`]s
//! with positions, so every error names a line and a column.

pub mod ast;
mod cursor;
pub mod gbnf;
pub mod lark;
pub mod lower;

use crate::error::Result;
use crate::regex::Hir;

/// The grammar syntaxes there are front ends for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// llama.cpp's GBNF, which xgrammar's EBNF extends (`rule ::= ...`).
    Gbnf,
    /// The Python `lark` parser's syntax, as llguidance reads it (`rule: ...`, `TERMINAL: ...`).
    Lark,
}

impl Syntax {
    /// The syntax's name in the Python API (`syntax="..."`).
    pub fn name(self) -> &'static str {
        match self {
            Syntax::Gbnf => "gbnf",
            Syntax::Lark => "lark",
        }
    }

    /// The syntax called `name` (`"ebnf"` is xgrammar's name for the same syntax).
    pub fn from_name(name: &str) -> Option<Syntax> {
        match name {
            "gbnf" | "ebnf" => Some(Syntax::Gbnf),
            "lark" => Some(Syntax::Lark),
            _ => None,
        }
    }
}

/// The language of `text`'s rule `root`, as one expression (a [`Hir::Grammar`] when some rule
/// is recursive).
pub fn compile(text: &str, syntax: Syntax, root: &str) -> Result<Hir> {
    match syntax {
        Syntax::Gbnf => lower::lower(&gbnf::parse(text)?, root),
        Syntax::Lark => {
            let (rules, start) = lark::parse(text, root)?;
            lower::lower(&rules, &start)
        }
    }
}
