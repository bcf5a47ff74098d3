//! Differential test of the regex pipeline against the `regex` crate: a pattern generated from a
//! small syntax tree (literals, classes, Perl classes, `.`, anchors, concatenation, alternation,
//! counted and lazy repetition, scoped case folding) and a haystack; guided's full-match answer
//! must equal `regex`'s for `^(?:pattern)$`. A disagreement is a wrong mask in production, so it
//! is a panic.
//!
//! Dialects differ from one another and from Rust's `regex` beyond ASCII (`\w` is Unicode in the
//! Rust dialect, `.` spans newlines in xgrammar's), so the haystack is ASCII and the oracle runs
//! with Unicode off, where the Python, ECMA-262 and Rust dialects all read the generated syntax
//! alike; each of the three is checked. The eager minimal DFA is also checked against a walk of
//! the lazily built token index over the same bytes, since production masks come from the lazy
//! one.

#![no_main]

use std::fmt::Write;
use std::sync::Arc;

use arbitrary::Arbitrary;
use guided_core::dfa::Dfa;
use guided_core::index::{TokenIndex, DEAD};
use guided_core::regex::{parse_with, Dialect};
use guided_core::Error;
use guided_fuzz::{dfa_config, index_config, nfa_config, parser_config, BYTE_VOCABULARY};
use libfuzzer_sys::fuzz_target;

/// The characters literals and haystacks are drawn from: both cases (for case folding), digits,
/// `_` (a word character that is not alphanumeric), and separators that `\s`, `.` and `\W` split
/// on, newline included.
const ALPHABET: &[u8] = b"aAbBzZ09_ -\n\t.";

/// Deepest tree rendered; below it a node renders as one literal, so a pattern never reaches the
/// parser's nesting limit and every refusal by guided is a finding.
const MAX_DEPTH: usize = 6;

/// Most children of one concatenation or alternation.
const MAX_CHILDREN: usize = 4;

#[derive(Arbitrary, Debug)]
enum Perl {
    Digit,
    NotDigit,
    Word,
    NotWord,
    Space,
    NotSpace,
}

#[derive(Arbitrary, Debug)]
enum ClassItem {
    Char(u8),
    Range(u8, u8),
    Perl(Perl),
}

#[derive(Arbitrary, Debug)]
enum Quantifier {
    Star,
    Plus,
    Optional,
    Exactly(u8),
    AtLeast(u8),
    Between(u8, u8),
}

#[derive(Arbitrary, Debug)]
enum Node {
    Empty,
    Literal(u8),
    Class {
        negated: bool,
        first: ClassItem,
        rest: Vec<ClassItem>,
    },
    Perl(Perl),
    Dot,
    Start,
    End,
    Concat(Vec<Node>),
    Alternation(Vec<Node>),
    Repeat {
        sub: Box<Node>,
        quantifier: Quantifier,
        lazy: bool,
    },
    CaseInsensitive(Box<Node>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    pattern: Node,
    haystack: Vec<u8>,
}

/// A code point as `\xHH`, which every dialect and the oracle read as that code point, inside a
/// class or outside one.
fn hex(out: &mut String, c: u8) {
    write!(out, "\\x{c:02x}").unwrap();
}

fn perl(out: &mut String, p: &Perl) {
    out.push_str(match p {
        Perl::Digit => "\\d",
        Perl::NotDigit => "\\D",
        Perl::Word => "\\w",
        Perl::NotWord => "\\W",
        Perl::Space => "\\s",
        Perl::NotSpace => "\\S",
    });
}

fn class_item(out: &mut String, item: &ClassItem) {
    match item {
        ClassItem::Char(c) => hex(out, c % 0x80),
        ClassItem::Range(a, b) => {
            let (a, b) = (a % 0x80, b % 0x80);
            hex(out, a.min(b));
            out.push('-');
            hex(out, a.max(b));
        }
        ClassItem::Perl(p) => perl(out, p),
    }
}

/// Small counts keep the automata small; the cases that matter (zero, one, a few) are all there.
fn quantifier(out: &mut String, q: &Quantifier, lazy: bool) {
    match q {
        Quantifier::Star => out.push('*'),
        Quantifier::Plus => out.push('+'),
        Quantifier::Optional => out.push('?'),
        Quantifier::Exactly(n) => write!(out, "{{{}}}", n % 4).unwrap(),
        Quantifier::AtLeast(n) => write!(out, "{{{},}}", n % 4).unwrap(),
        Quantifier::Between(m, n) => {
            let (m, n) = (m % 4, n % 4);
            write!(out, "{{{},{}}}", m.min(n), m.max(n)).unwrap();
        }
    }
    if lazy {
        out.push('?');
    }
}

/// Renders `node`, every compound part in a non-capturing group so that no precedence question
/// (`ab*`, `a|b` inside a concatenation, `a{2}{3}`) can read differently anywhere.
fn render(out: &mut String, node: &Node, depth: usize) {
    if depth > MAX_DEPTH {
        out.push('a');
        return;
    }
    match node {
        Node::Empty => out.push_str("(?:)"),
        Node::Literal(c) => {
            let c = ALPHABET[usize::from(*c) % ALPHABET.len()];
            if c.is_ascii_alphanumeric() {
                out.push(char::from(c));
            } else {
                hex(out, c);
            }
        }
        Node::Class {
            negated,
            first,
            rest,
        } => {
            out.push('[');
            if *negated {
                out.push('^');
            }
            for item in std::iter::once(first).chain(rest.iter().take(MAX_CHILDREN)) {
                class_item(out, item);
            }
            out.push(']');
        }
        Node::Perl(p) => perl(out, p),
        Node::Dot => out.push('.'),
        Node::Start => out.push('^'),
        Node::End => out.push('$'),
        Node::Concat(children) => {
            out.push_str("(?:");
            for c in children.iter().take(MAX_CHILDREN) {
                render(out, c, depth + 1);
            }
            out.push(')');
        }
        Node::Alternation(children) => {
            out.push_str("(?:");
            for (i, c) in children.iter().take(MAX_CHILDREN).enumerate() {
                if i > 0 {
                    out.push('|');
                }
                render(out, c, depth + 1);
            }
            out.push(')');
        }
        Node::Repeat {
            sub,
            quantifier: q,
            lazy,
        } => {
            out.push_str("(?:");
            render(out, sub, depth + 1);
            out.push(')');
            quantifier(out, q, *lazy);
        }
        Node::CaseInsensitive(sub) => {
            out.push_str("(?i:");
            render(out, sub, depth + 1);
            out.push(')');
        }
    }
}

/// Walks `haystack` byte by byte (the vocabulary's first 256 ids are the single bytes) through a
/// lazy index; `None` when a limit stops the walk.
fn lazy_match(index: &TokenIndex, haystack: &[u8]) -> Option<bool> {
    let mut state = index.initial_state();
    for &b in haystack {
        state = index.next_state(state, i64::from(b)).ok()?;
        if state == DEAD {
            return Some(false);
        }
    }
    Some(index.is_accepting(state))
}

fuzz_target!(|input: Input| {
    let mut pattern = String::new();
    render(&mut pattern, &input.pattern, 0);
    let haystack: Vec<u8> = input
        .haystack
        .iter()
        .take(64)
        .map(|&b| ALPHABET[usize::from(b) % ALPHABET.len()])
        .collect();

    let oracle = regex::bytes::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .unicode(false)
        .build()
        .unwrap_or_else(|e| panic!("the generator wrote {pattern:?}, which regex refuses: {e}"));
    let expected = oracle.is_match(&haystack);

    for dialect in [Dialect::Python, Dialect::Ecma, Dialect::Rust] {
        let hir = parse_with(&pattern, &parser_config(dialect))
            .unwrap_or_else(|e| panic!("{} dialect refuses {pattern:?}: {e}", dialect.name()));
        let dfa = match Dfa::from_hir_with(&hir, &dfa_config(), &nfa_config()) {
            Ok(dfa) => dfa,
            Err(Error::SizeLimit { .. }) => continue,
            Err(e) => panic!("{} dialect: no DFA for {pattern:?}: {e}", dialect.name()),
        };
        let got = dfa.is_match(&haystack);
        assert_eq!(
            got,
            expected,
            "{} dialect, pattern {pattern:?}, haystack {:?}: guided says {got}, regex says {expected}",
            dialect.name(),
            String::from_utf8_lossy(&haystack)
        );

        let (vocab, tries) = &*BYTE_VOCABULARY;
        let index =
            match TokenIndex::from_hir(&hir, Arc::clone(vocab), Arc::clone(tries), &index_config())
            {
                Ok(index) => index,
                Err(Error::SizeLimit { .. }) => continue,
                Err(e) => panic!("{} dialect: no index for {pattern:?}: {e}", dialect.name()),
            };
        if let Some(lazy) = lazy_match(&index, &haystack) {
            assert_eq!(
                lazy,
                got,
                "{} dialect, pattern {pattern:?}, haystack {:?}: the lazy index says {lazy}, the DFA {got}",
                dialect.name(),
                String::from_utf8_lossy(&haystack)
            );
        }
    }
});
