//! The rules a grammar front end reads, before lowering: named expressions whose references to
//! other rules are still names, each with the position it was written at.
//!
//! Front ends differ in surface syntax (GBNF's `::=`, Lark's `:` and regex terminals) but not in
//! what a rule is, so they all produce this and share one lowering. Positions are 1-based lines
//! and columns in code points, what an editor shows.

use crate::regex::{ClassSet, Hir};

/// A place in the grammar text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in code points.
    pub column: u32,
}

/// One rule: `name ::= body`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule's name.
    pub name: String,
    /// What it matches.
    pub body: Expr,
    /// Where the name is written.
    pub at: Pos,
}

/// A rule body.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// The empty string.
    Empty,
    /// Exactly this text.
    Literal(String),
    /// One code point from the set.
    Class(ClassSet),
    /// A regular expression a front end has already lowered (Lark's regex terminals).
    Regular(Hir),
    /// The rule called `name`, referred to at `at`.
    Ref {
        /// The rule's name.
        name: String,
        /// Where the reference is written.
        at: Pos,
    },
    /// The parts in order.
    Seq(Vec<Expr>),
    /// Any one of the branches.
    Alt(Vec<Expr>),
    /// `min` to `max` (unbounded if `None`) copies in a row.
    Repeat {
        /// What is repeated.
        expr: Box<Expr>,
        /// Fewest copies.
        min: u32,
        /// Most copies.
        max: Option<u32>,
    },
}

impl Expr {
    /// Calls `f` on every reference in the expression, left to right.
    pub fn for_each_ref(&self, f: &mut impl FnMut(&str, Pos)) {
        match self {
            Expr::Ref { name, at } => f(name, *at),
            Expr::Seq(items) | Expr::Alt(items) => items.iter().for_each(|e| e.for_each_ref(f)),
            Expr::Repeat { expr, .. } => expr.for_each_ref(f),
            Expr::Empty | Expr::Literal(_) | Expr::Class(_) | Expr::Regular(_) => {}
        }
    }
}
