//! The Rust `regex` crate's dialect, read by the crate's own parser and translated into our HIR.
//!
//! outlines-core and llguidance hand a pattern to `regex-syntax` (through `regex-automata`), so
//! their language for a pattern is whatever `regex-syntax` makes of it: `\d`, `\w` and `\s` are
//! Unicode classes, `(?i)` folds by Unicode simple case folding, flags may appear anywhere and
//! last to the end of their group, classes nest and take the set operators `&&`, `--` and `~~`,
//! and `a{,3}` or a stray `{` is an error. Re-implementing that reading would be a second parser
//! that could drift from the first one on any of those points, so this module does not parse at
//! all: it runs `regex-syntax` with the settings those engines use (Unicode on, UTF-8 only) and
//! maps its HIR node for node onto ours. Both HIRs are trees of the same shape (literals, code
//! point classes, repetitions, concatenations, alternations, captures), so the translation is a
//! walk, linear in the pattern's HIR.
//!
//! What our automata cannot express is refused by name, as the other dialects do: word
//! boundaries and the `m` flag's line anchors. Everything else keeps its meaning under full match:
//! `^`, `\A`, `$` and `\z` assert the start and end of the whole text wherever they stand. The
//! parser's nest limit is ours, so nesting is bounded the same way in every dialect.

use regex_syntax::ast;
use regex_syntax::hir::{self as rs, HirKind};

use super::hir::{ClassSet, Hir, Look};
use super::parser::ParserConfig;
use crate::error::{Error, Result};

/// Parses `pattern` as the Rust `regex` crate reads it (Unicode mode, UTF-8 matches only).
pub(super) fn parse(pattern: &str, config: &ParserConfig) -> Result<Hir> {
    let nest_limit = u32::try_from(config.nest_limit).unwrap_or(u32::MAX);
    let ast = ast::parse::ParserBuilder::new()
        .nest_limit(nest_limit)
        .build()
        .parse(pattern)
        .map_err(|e| {
            if let ast::ErrorKind::NestLimitExceeded(_) = e.kind() {
                return Error::size_limit("nest_limit", config.nest_limit + 1, config.nest_limit);
            }
            syntax_error(pattern, e.span().start.offset, e.kind().to_string())
        })?;
    let hir = rs::translate::TranslatorBuilder::new()
        .unicode(true)
        .utf8(true)
        .build()
        .translate(pattern, &ast)
        .map_err(|e| syntax_error(pattern, e.span().start.offset, e.kind().to_string()))?;
    translate(&hir).map_err(|refused| {
        let offset = match ast::visit(&ast, FirstSpan::new(refused)) {
            Ok(found) => found.unwrap_or(0),
            Err(never) => match never {},
        };
        syntax_error(pattern, offset, refused.message().to_string())
    })
}

fn syntax_error(pattern: &str, byte_offset: usize, message: String) -> Error {
    Error::RegexSyntax {
        pattern: pattern.to_string(),
        position: code_points_before(pattern, byte_offset),
        message,
    }
}

/// A construct `regex-syntax` reads but our automata cannot express.
#[derive(Debug, Clone, Copy)]
enum Refused {
    WordBoundary,
    LineAnchor,
}

impl Refused {
    fn message(self) -> &'static str {
        match self {
            Refused::WordBoundary => "word boundary assertions are not supported",
            Refused::LineAnchor => {
                "multiline flag `(?m)` is not supported: under full match `^` and `$` refer to the whole text"
            }
        }
    }
}

/// Finds where a refused construct is written, for the error's position: the translated HIR
/// has no spans, the AST does.
struct FirstSpan {
    refused: Refused,
    found: Option<usize>,
}

impl FirstSpan {
    fn new(refused: Refused) -> Self {
        FirstSpan {
            refused,
            found: None,
        }
    }
}

impl ast::Visitor for FirstSpan {
    type Output = Option<usize>;
    type Err = std::convert::Infallible;

    fn finish(self) -> std::result::Result<Option<usize>, Self::Err> {
        Ok(self.found)
    }

    fn visit_pre(&mut self, node: &ast::Ast) -> std::result::Result<(), Self::Err> {
        if self.found.is_some() {
            return Ok(());
        }
        let span = match (self.refused, node) {
            (Refused::WordBoundary, ast::Ast::Assertion(a))
                if !matches!(
                    a.kind,
                    ast::AssertionKind::StartLine
                        | ast::AssertionKind::EndLine
                        | ast::AssertionKind::StartText
                        | ast::AssertionKind::EndText
                ) =>
            {
                Some(a.span)
            }
            (Refused::LineAnchor, ast::Ast::Flags(f)) => multi_line(&f.flags),
            (Refused::LineAnchor, ast::Ast::Group(g)) => match &g.kind {
                ast::GroupKind::NonCapturing(flags) => multi_line(flags),
                _ => None,
            },
            _ => None,
        };
        self.found = span.map(|s| s.start.offset);
        Ok(())
    }
}

/// The span of a flag group's `m`, when it turns multi-line mode on.
fn multi_line(flags: &ast::Flags) -> Option<ast::Span> {
    let mut negated = false;
    for item in &flags.items {
        match item.kind {
            ast::FlagsItemKind::Negation => negated = true,
            ast::FlagsItemKind::Flag(ast::Flag::MultiLine) if !negated => return Some(item.span),
            _ => {}
        }
    }
    None
}

fn code_points_before(pattern: &str, byte_offset: usize) -> usize {
    pattern
        .char_indices()
        .take_while(|&(i, _)| i < byte_offset)
        .count()
}

fn translate(hir: &rs::Hir) -> std::result::Result<Hir, Refused> {
    Ok(match hir.kind() {
        HirKind::Empty => Hir::Empty,
        HirKind::Literal(rs::Literal(bytes)) => Hir::literal_bytes(bytes.to_vec()),
        HirKind::Class(rs::Class::Unicode(class)) => Hir::class(ClassSet::from_ranges(
            class
                .ranges()
                .iter()
                .map(|r| (r.start() as u32, r.end() as u32)),
        )),
        // With UTF-8 matches required, a byte class reaches here only when it is ASCII (`(?-u)`),
        // where a byte and a code point are the same number.
        HirKind::Class(rs::Class::Bytes(class)) => Hir::class(ClassSet::from_ranges(
            class
                .ranges()
                .iter()
                .map(|r| (u32::from(r.start()), u32::from(r.end()))),
        )),
        HirKind::Look(look) => match look {
            rs::Look::Start => Hir::Look(Look::Start),
            rs::Look::End => Hir::Look(Look::End),
            rs::Look::StartLF | rs::Look::EndLF | rs::Look::StartCRLF | rs::Look::EndCRLF => {
                return Err(Refused::LineAnchor)
            }
            _ => return Err(Refused::WordBoundary),
        },
        HirKind::Repetition(rep) => Hir::repeat(translate(&rep.sub)?, rep.min, rep.max),
        HirKind::Capture(capture) => translate(&capture.sub)?,
        HirKind::Concat(items) => Hir::concat(
            items
                .iter()
                .map(translate)
                .collect::<std::result::Result<Vec<_>, _>>()?,
        ),
        HirKind::Alternation(items) => Hir::alternation(
            items
                .iter()
                .map(translate)
                .collect::<std::result::Result<Vec<_>, _>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regex::parser::{parse_with, Dialect};

    fn rust(pattern: &str) -> Result<Hir> {
        parse_with(
            pattern,
            &ParserConfig {
                dialect: Dialect::Rust,
                ..ParserConfig::default()
            },
        )
    }

    fn class_of(pattern: &str) -> ClassSet {
        match rust(pattern).unwrap() {
            Hir::Class(ref set) => set.clone(),
            other => panic!("{pattern} is not a class: {other:?}"),
        }
    }

    #[test]
    fn perl_classes_are_unicode() {
        assert!(class_of(r"\d").contains('٣' as u32));
        assert!(class_of(r"\w").contains('é' as u32));
        assert!(class_of(r"\s").contains(0x2003));
        assert!(!class_of(r"(?-u:\w)").contains('é' as u32));
    }

    #[test]
    fn case_folding_is_unicode_simple_folding() {
        let k = class_of("(?i)k");
        assert!(k.contains('K' as u32) && k.contains(0x212A));
    }

    #[test]
    fn flags_and_nested_classes() {
        assert_eq!(rust("a(?i)b").unwrap(), rust("a[bB]").unwrap());
        assert_eq!(rust("[a-z&&[^b-y]]").unwrap(), rust("[az]").unwrap());
        assert_eq!(rust("[[:digit:]x]").unwrap(), rust("[0-9x]").unwrap());
        assert_eq!(
            rust("(?P<n>a)|^b$").unwrap(),
            crate::regex::parse("a|^b$").unwrap()
        );
    }

    #[test]
    fn refusals_name_the_construct_and_position() {
        for (pattern, position) in [("ab{,3}", 3), ("é{", 1), ("x\\0", 1), ("a(?=b)", 1)] {
            match rust(pattern) {
                Err(Error::RegexSyntax { position: p, .. }) => assert_eq!(p, position, "{pattern}"),
                other => panic!("{pattern}: {other:?}"),
            }
        }
        for pattern in [r"a\b", "(?m)^a", r"\<x"] {
            assert!(
                matches!(rust(pattern), Err(Error::RegexSyntax { .. })),
                "{pattern}"
            );
        }
        let deep = format!("{}{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(matches!(rust(&deep), Err(Error::SizeLimit { .. })));
    }
}
