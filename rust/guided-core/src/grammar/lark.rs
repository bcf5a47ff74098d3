//! Lark, the grammar syntax of the Python `lark` parser, which llguidance and vLLM accept.
//!
//! ```text
//! ?start: value
//! ?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
//! array : "[" [value ("," value)*] "]"
//! object: "{" [pair ("," pair)*] "}"
//! pair  : ESCAPED_STRING ":" value
//! args  : %json {"type": "object"}        // llguidance's embedded JSON Schema
//! %import common (ESCAPED_STRING, SIGNED_NUMBER, WS)
//! %ignore WS
//! ```
//!
//! Rules are lowercase names, terminals uppercase; a definition is a name (with Lark's `?`, `!`
//! and `_` marks, which shape parse trees, not languages), `:` and alternatives of items: strings
//! (`"..."`, Python escapes, `i` for any case), ranges (`"a".."z"`), regexes (`/.../flags`, read
//! in the Python dialect with `re.ASCII`), names, groups, `[...]` (optional), and the operators
//! `? * +`, `~ n` and `~ n..m`; `-> alias` names a branch and changes nothing. A definition ends
//! at the end of its line unless the next line continues it with `|`, or a bracket is open.
//! `//` starts a comment.
//!
//! The language is the scannerless one: a terminal is a regular language over characters, any
//! of whose strings may stand where it is used, and `%ignore` lets its terminals stand between
//! any two terminals and at either end of the text. That is what this module builds: every
//! terminal a rule uses (by name, or as a string or regex written in the rule) is followed by
//! the ignored terminals repeated, and the root is preceded by them. Lark's Earley parser with
//! its complete dynamic lexer computes the same language on ordinary grammars, but it matches an
//! ignored terminal only at its longest and a regex terminal only at Python's first match and
//! its prefixes, so where those choices matter (a `#` comment ignored before text it could end
//! before) Lark refuses texts this reading accepts. A lexer-based reading (llguidance's, Lark's
//! LALR) differs in the same direction wherever two terminals compete for the same characters;
//! this module does not emulate a lexer.
//!
//! `%import common.NAME [-> ALIAS]` and `%import common (A, B)` bring in Lark's common terminals
//! (numbers, words, white space, strings, comments), written out below, with what they use.
//! `%json {schema}` stands for the JSON texts of a schema's instances, compiled by this crate's
//! JSON Schema compiler (recursion kept as calls). Priorities (`TERM.2`), templates, `%declare`,
//! `%override`, `%extend` and imports of other modules are refused with a
//! [`Error::GrammarSyntax`] naming them: priorities choose between parses, and emulating them
//! would change the language.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use super::ast::{Expr, Pos, Rule};
use super::cursor::Cursor;
use crate::error::{Error, Result};
use crate::json_schema::{self, SchemaOptions};
use crate::regex::{parse_with, ClassSet, Dialect, Hir, ParserConfig};

/// Deepest nesting of groups accepted.
const MAX_NESTING: usize = 250;

/// The name the ignored terminals are gathered under (not a name Lark text can write).
const IGNORED: &str = "%ignore";

/// Lark's common terminals (its `common.lark`), in this syntax. `ESCAPED_STRING` is written
/// without the lookbehind Lark uses: a quote, then characters other than a quote, a backslash
/// or a line break, or a backslash and any character but a line break, then a quote.
const COMMON: &str = r#"
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+" | "-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e" | "E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+" | "-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+" | "-"] NUMBER
ESCAPED_STRING: "\"" (/[^"\\\n]/ | "\\" /[^\n]/)* "\""
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_" | LETTER) ("_" | LETTER | DIGIT)*
WS_INLINE: (" " | /\t/)+
WS: /[ \t\f\r\n]/+
CR: /\r/
LF: /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: "/*" /(.|\n)*?/ "*/"
SQL_COMMENT: /--[^\n]*/
"#;

/// Reads Lark text into rules, with the ignored terminals written in; `root` is the rule the
/// text must derive (`start` when `root` is `"root"` and no rule has that name), and the name
/// returned is the rule to start from (the root after any leading ignored terminals).
pub fn parse(text: &str, root: &str) -> Result<(Vec<Rule>, String)> {
    let mut p = Parser::new(text);
    let mut definitions = Vec::new();
    let mut ignored = Vec::new();
    while let Some(statement) = p.statement()? {
        match statement {
            Statement::Definition(rule) => definitions.push(rule),
            Statement::Ignore(expr) => ignored.push(expr),
            Statement::Import { name, alias, at } => {
                definitions.extend(import_common(&name, &alias, at)?);
            }
        }
    }
    if definitions.is_empty() {
        return Err(p.cur.error(0, "the grammar has no rules"));
    }
    // Lark's root is `start`; the API's default name is GBNF's `root`.
    let root = if root == "root" && !definitions.iter().any(|r| r.name == "root") {
        "start"
    } else {
        root
    };
    let mut seen = BTreeSet::new();
    definitions.retain(|r| seen.insert((r.name.clone(), format!("{:?}", r.body))));
    for rule in definitions.iter().filter(|r| is_terminal(&r.name)) {
        let mut refers_to_rule = None;
        rule.body.for_each_ref(&mut |name, at| {
            if !is_terminal(name) {
                refers_to_rule.get_or_insert((name.to_string(), at));
            }
        });
        if let Some((name, at)) = refers_to_rule {
            return Err(error(
                at,
                format!(
                    "terminal `{}` uses the rule `{name}`: terminals are made of terminals",
                    rule.name
                ),
            ));
        }
    }
    if ignored.is_empty() {
        return Ok((definitions, root.to_string()));
    }
    for rule in definitions.iter_mut().filter(|r| !is_terminal(&r.name)) {
        rule.body = with_ignored_after_terminals(std::mem::replace(&mut rule.body, Expr::Empty));
    }
    let at = Pos { line: 1, column: 1 };
    let gaps = || Expr::Repeat {
        expr: Box::new(Expr::Ref {
            name: IGNORED.into(),
            at,
        }),
        min: 0,
        max: None,
    };
    let start = format!("{IGNORED} {root}");
    definitions.push(Rule {
        name: IGNORED.into(),
        body: Expr::Alt(ignored),
        at,
    });
    definitions.push(Rule {
        name: start.clone(),
        body: Expr::Seq(vec![
            gaps(),
            Expr::Ref {
                name: root.into(),
                at,
            },
        ]),
        at,
    });
    Ok((definitions, start))
}

/// Whether a name is a terminal's (uppercase once leading underscores are dropped).
fn is_terminal(name: &str) -> bool {
    let last = name.rsplit(['.', ' ']).next().unwrap_or(name);
    name == IGNORED
        || last
            .trim_start_matches('_')
            .starts_with(|c: char| c.is_ascii_uppercase())
}

/// A rule body with the ignored terminals allowed after each terminal it uses.
fn with_ignored_after_terminals(e: Expr) -> Expr {
    let gaps = |x: Expr, at: Pos| {
        Expr::Seq(vec![
            x,
            Expr::Repeat {
                expr: Box::new(Expr::Ref {
                    name: IGNORED.into(),
                    at,
                }),
                min: 0,
                max: None,
            },
        ])
    };
    let nowhere = Pos::default();
    match e {
        Expr::Ref { ref name, at } if is_terminal(name) => gaps(e, at),
        Expr::Literal(_) | Expr::Class(_) | Expr::Regular(_) => gaps(e, nowhere),
        Expr::Seq(items) => Expr::Seq(
            items
                .into_iter()
                .map(with_ignored_after_terminals)
                .collect(),
        ),
        Expr::Alt(items) => Expr::Alt(
            items
                .into_iter()
                .map(with_ignored_after_terminals)
                .collect(),
        ),
        Expr::Repeat { expr, min, max } => Expr::Repeat {
            expr: Box::new(with_ignored_after_terminals(*expr)),
            min,
            max,
        },
        other => other,
    }
}

/// The common terminal `name` under `alias`, and the common terminals it uses, renamed so that
/// they cannot meet the grammar's own names.
fn import_common(name: &str, alias: &str, at: Pos) -> Result<Vec<Rule>> {
    let mut p = Parser::new(COMMON);
    let mut common: FxHashMap<String, Rule> = FxHashMap::default();
    while let Some(statement) = p.statement()? {
        if let Statement::Definition(rule) = statement {
            common.insert(rule.name.clone(), rule);
        }
    }
    if !common.contains_key(name) {
        return Err(error(
            at,
            format!("`common` has no terminal `{name}` (the common terminals are numbers, words, white space, strings and comments)"),
        ));
    }
    let renamed = |n: &str| {
        if n == name {
            alias.to_string()
        } else {
            format!("common.{n}")
        }
    };
    let mut out = Vec::new();
    let mut todo = vec![name.to_string()];
    let mut done = BTreeSet::new();
    while let Some(n) = todo.pop() {
        if !done.insert(n.clone()) {
            continue;
        }
        let Some(rule) = common.get(&n) else {
            continue;
        };
        rule.body.for_each_ref(&mut |r, _| todo.push(r.to_string()));
        out.push(Rule {
            name: renamed(&n),
            body: rename_refs(rule.body.clone(), &renamed),
            at,
        });
    }
    Ok(out)
}

fn rename_refs(e: Expr, rename: &impl Fn(&str) -> String) -> Expr {
    match e {
        Expr::Ref { name, at } => Expr::Ref {
            name: rename(&name),
            at,
        },
        Expr::Seq(items) => Expr::Seq(items.into_iter().map(|e| rename_refs(e, rename)).collect()),
        Expr::Alt(items) => Expr::Alt(items.into_iter().map(|e| rename_refs(e, rename)).collect()),
        Expr::Repeat { expr, min, max } => Expr::Repeat {
            expr: Box::new(rename_refs(*expr, rename)),
            min,
            max,
        },
        other => other,
    }
}

fn error(at: Pos, message: String) -> Error {
    Error::GrammarSyntax {
        line: at.line,
        column: at.column,
        message,
    }
}

enum Statement {
    Definition(Rule),
    Ignore(Expr),
    Import {
        name: String,
        alias: String,
        at: Pos,
    },
}

struct Parser {
    cur: Cursor,
    depth: usize,
    /// Imports read from one `%import` line, handed out one per call.
    pending: Vec<Statement>,
}

impl Parser {
    fn new(text: &str) -> Parser {
        Parser {
            cur: Cursor::new(text),
            depth: 0,
            pending: Vec::new(),
        }
    }

    /// Spaces, tabs and comments, but not line breaks (unless a bracket is open).
    fn skip_inline(&mut self) {
        while let Some(c) = self.cur.peek() {
            if c == ' ' || c == '\t' || c == '\r' || (c == '\n' && self.depth > 0) {
                self.cur.pos += 1;
            } else if c == '/' && self.cur.peek_at(1) == Some('/') {
                while self.cur.peek().is_some_and(|c| c != '\n') {
                    self.cur.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    /// White space of every kind, comments included.
    fn skip_all(&mut self) {
        loop {
            self.skip_inline();
            if self.cur.peek() == Some('\n') {
                self.cur.pos += 1;
            } else {
                break;
            }
        }
    }

    fn name(&mut self) -> Option<String> {
        let start = self.cur.pos;
        while self
            .cur
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            self.cur.pos += 1;
        }
        (self.cur.pos > start && !self.cur.chars[start].is_ascii_digit())
            .then(|| self.cur.chars[start..self.cur.pos].iter().collect())
    }

    fn statement(&mut self) -> Result<Option<Statement>> {
        if let Some(s) = self.pending.pop() {
            return Ok(Some(s));
        }
        self.skip_all();
        if self.cur.at_end() {
            return Ok(None);
        }
        let start = self.cur.pos;
        if self.cur.eat("%") {
            let directive = self.name().unwrap_or_default();
            self.skip_inline();
            return match directive.as_str() {
                "ignore" => {
                    let e = self.alternatives()?;
                    self.end_of_statement()?;
                    Ok(Some(Statement::Ignore(e)))
                }
                "import" => {
                    self.imports(start)?;
                    self.end_of_statement()?;
                    Ok(self.pending.pop())
                }
                "declare" | "override" | "extend" => Err(self.cur.error(
                    start,
                    format!("`%{directive}` is not supported (a grammar here is one text)"),
                )),
                other => Err(self
                    .cur
                    .error(start, format!("unknown directive `%{other}`"))),
            };
        }
        let at = self.cur.here();
        if !self.cur.eat("?") {
            self.cur.eat("!");
        }
        let Some(name) = self.name() else {
            return Err(self
                .cur
                .error(self.cur.pos, "expected a rule or terminal name"));
        };
        match self.cur.peek() {
            Some('{') => {
                return Err(self.cur.error(
                    self.cur.pos,
                    format!("`{name}` is a template, which is not supported"),
                ))
            }
            Some('.') => {
                return Err(self.cur.error(
                    self.cur.pos,
                    format!(
                        "`{name}` has a priority, which is not supported: priorities choose \
                         between parses, and emulating them would change the language"
                    ),
                ))
            }
            _ => {}
        }
        self.skip_inline();
        if !self.cur.eat(":") {
            return Err(self.cur.error(
                self.cur.pos,
                format!("expected `:` after `{name}` (a definition is written `name: ...`)"),
            ));
        }
        let body = self.alternatives()?;
        self.end_of_statement()?;
        Ok(Some(Statement::Definition(Rule { name, body, at })))
    }

    fn end_of_statement(&mut self) -> Result<()> {
        self.skip_inline();
        match self.cur.peek() {
            None | Some('\n') => Ok(()),
            Some(c) => Err(self.cur.error(self.cur.pos, format!("unexpected `{c}`"))),
        }
    }

    /// `common.NAME`, `common.NAME -> ALIAS` or `common (A, B, ...)`, queued in `pending`.
    fn imports(&mut self, start: usize) -> Result<()> {
        let module_at = self.cur.pos;
        let mut path = Vec::new();
        let mut last_at;
        loop {
            last_at = self.cur.here();
            let Some(part) = self.name() else {
                return Err(self.cur.error(self.cur.pos, "expected a module name"));
            };
            path.push(part);
            if !self.cur.eat(".") {
                break;
            }
        }
        self.skip_inline();
        let names: Vec<(String, String, Pos)> = if self.cur.eat("(") {
            let mut names = Vec::new();
            loop {
                self.skip_all();
                let at = self.cur.here();
                let Some(n) = self.name() else {
                    return Err(self.cur.error(self.cur.pos, "expected a name to import"));
                };
                names.push((n.clone(), n, at));
                self.skip_all();
                if self.cur.eat(")") {
                    break;
                }
                if !self.cur.eat(",") {
                    return Err(self.cur.error(self.cur.pos, "expected `,` or `)`"));
                }
            }
            names
        } else {
            let Some(n) = path.pop() else {
                return Err(self.cur.error(start, "expected a name to import"));
            };
            self.skip_inline();
            let alias = if self.cur.eat("->") {
                self.skip_inline();
                self.name()
                    .ok_or_else(|| self.cur.error(self.cur.pos, "expected a name after `->`"))?
            } else {
                n.clone()
            };
            vec![(n, alias, last_at)]
        };
        if path != ["common"] {
            return Err(self.cur.error(
                module_at,
                format!(
                    "cannot import from `{}`: only Lark's `common` terminals are available",
                    path.join(".")
                ),
            ));
        }
        for (name, alias, at) in names.into_iter().rev() {
            self.pending.push(Statement::Import { name, alias, at });
        }
        Ok(())
    }

    fn alternatives(&mut self) -> Result<Expr> {
        let mut branches = vec![self.branch()?];
        loop {
            self.skip_inline();
            if self.cur.eat("|") {
                branches.push(self.branch()?);
                continue;
            }
            // a line break ends the definition, unless the next line goes on with `|`
            let saved = self.cur.pos;
            self.skip_all();
            if self.cur.peek() == Some('|') {
                continue;
            }
            self.cur.pos = saved;
            break;
        }
        Ok(if branches.len() == 1 {
            branches.pop().unwrap_or(Expr::Empty)
        } else {
            Expr::Alt(branches)
        })
    }

    /// A sequence, and its alias (`-> name`), which is dropped.
    fn branch(&mut self) -> Result<Expr> {
        let mut items = Vec::new();
        loop {
            self.skip_inline();
            match self.cur.peek() {
                None | Some('|' | ')' | ']' | '\n') => break,
                Some('-') if self.cur.peek_at(1) == Some('>') => {
                    self.cur.pos += 2;
                    self.skip_inline();
                    if self.name().is_none() {
                        return Err(self.cur.error(self.cur.pos, "expected a name after `->`"));
                    }
                    break;
                }
                _ => {}
            }
            let item = self.atom()?;
            items.push(self.postfix(item)?);
        }
        Ok(match items.len() {
            0 => Expr::Empty,
            1 => items.pop().unwrap_or(Expr::Empty),
            _ => Expr::Seq(items),
        })
    }

    fn group(&mut self, start: usize, close: char) -> Result<Expr> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(Error::size_limit(
                "grammar_nesting",
                self.depth,
                MAX_NESTING,
            ));
        }
        self.cur.pos += 1;
        let inner = self.alternatives()?;
        self.skip_inline();
        if !self.cur.eat(&close.to_string()) {
            return Err(self
                .cur
                .error(start, format!("unclosed group: missing `{close}`")));
        }
        self.depth -= 1;
        Ok(inner)
    }

    fn atom(&mut self) -> Result<Expr> {
        let start = self.cur.pos;
        match self.cur.peek() {
            Some('(') => self.group(start, ')'),
            Some('[') => Ok(Expr::Repeat {
                expr: Box::new(self.group(start, ']')?),
                min: 0,
                max: Some(1),
            }),
            Some('"') => self.string(),
            Some('/') => self.regex(),
            Some('%') if self.cur.eat("%json") => self.json(start),
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let at = self.cur.here();
                let name = self.name().unwrap_or_default();
                Ok(Expr::Ref { name, at })
            }
            Some(c) => Err(self.cur.error(start, format!("unexpected `{c}`"))),
            None => Err(self.cur.error(start, "unexpected end of the grammar")),
        }
    }

    fn postfix(&mut self, mut item: Expr) -> Result<Expr> {
        for applied in 0.. {
            if applied > MAX_NESTING {
                return Err(Error::size_limit("grammar_nesting", applied, MAX_NESTING));
            }
            self.skip_inline();
            let (min, max) = match self.cur.peek() {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                Some('~') => {
                    let start = self.cur.pos;
                    self.cur.pos += 1;
                    self.skip_inline();
                    let lo = self.count(start)?;
                    let hi = if self.cur.eat("..") {
                        self.count(start)?
                    } else {
                        lo
                    };
                    if hi < lo {
                        return Err(self
                            .cur
                            .error(start, "repetition: the maximum is below the minimum"));
                    }
                    item = Expr::Repeat {
                        expr: Box::new(item),
                        min: lo,
                        max: Some(hi),
                    };
                    continue;
                }
                _ => return Ok(item),
            };
            self.cur.pos += 1;
            item = Expr::Repeat {
                expr: Box::new(item),
                min,
                max,
            };
        }
        Ok(item)
    }

    fn count(&mut self, start: usize) -> Result<u32> {
        let begin = self.cur.pos;
        while self.cur.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.cur.pos += 1;
        }
        let digits: String = self.cur.chars[begin..self.cur.pos].iter().collect();
        digits.parse().map_err(|_| {
            self.cur
                .error(start, "expected a repetition count after `~`")
        })
    }

    /// `"..."`, `"..."i`, or a range `"a".."z"`.
    fn string(&mut self) -> Result<Expr> {
        let start = self.cur.pos;
        let text = self.quoted()?;
        if self.cur.eat("i") {
            // one terminal: ignored text may stand around it, not inside it
            return Ok(Expr::Regular(Hir::concat(
                text.chars().map(|c| Hir::class(any_case(c))),
            )));
        }
        if self.cur.peek() == Some('.') && self.cur.peek_at(1) == Some('.') {
            self.cur.pos += 2;
            let hi = self.quoted()?;
            let (mut a, mut b) = (text.chars(), hi.chars());
            let (Some(lo), None, Some(hi), None) = (a.next(), a.next(), b.next(), b.next()) else {
                return Err(self.cur.error(
                    start,
                    "a range is written with single characters: \"a\"..\"z\"",
                ));
            };
            if hi < lo {
                return Err(self
                    .cur
                    .error(start, format!("bad character range {lo}..{hi}")));
            }
            return Ok(Expr::Class(ClassSet::range(lo as u32, hi as u32)));
        }
        Ok(if text.is_empty() {
            Expr::Empty
        } else {
            Expr::Literal(text)
        })
    }

    fn quoted(&mut self) -> Result<String> {
        let start = self.cur.pos;
        if !self.cur.eat("\"") {
            return Err(self.cur.error(start, "expected a string"));
        }
        let mut text = String::new();
        loop {
            match self.cur.peek() {
                None | Some('\n') => return Err(self.cur.error(start, "unclosed string literal")),
                Some('"') => {
                    self.cur.pos += 1;
                    return Ok(text);
                }
                Some('\\') => text.push(self.cur.escape()?),
                Some(c) => {
                    text.push(c);
                    self.cur.pos += 1;
                }
            }
        }
    }

    /// `/pattern/flags`, in Python's dialect; `^` and `$` hold at the terminal's edges.
    fn regex(&mut self) -> Result<Expr> {
        let start = self.cur.pos;
        self.cur.pos += 1;
        let mut pattern = String::new();
        loop {
            match self.cur.peek() {
                None | Some('\n') => {
                    return Err(self.cur.error(start, "unclosed regex: missing `/`"))
                }
                Some('/') => {
                    self.cur.pos += 1;
                    break;
                }
                Some('\\') if self.cur.peek_at(1) == Some('/') => {
                    pattern.push('/');
                    self.cur.pos += 2;
                }
                Some('\\') => {
                    pattern.push('\\');
                    pattern.extend(self.cur.peek_at(1));
                    self.cur.pos += 2;
                }
                Some(c) => {
                    pattern.push(c);
                    self.cur.pos += 1;
                }
            }
        }
        let mut flags = String::new();
        while let Some(c) = self.cur.peek().filter(|c| c.is_ascii_alphabetic()) {
            if !"imsxu".contains(c) {
                return Err(self
                    .cur
                    .error(self.cur.pos, format!("unknown regex flag `{c}`")));
            }
            if c != 'u' {
                flags.push(c);
            }
            self.cur.pos += 1;
        }
        let written = if flags.is_empty() {
            pattern.clone()
        } else {
            format!("(?{flags}:{pattern})")
        };
        let config = ParserConfig {
            dialect: Dialect::Python,
            ..ParserConfig::default()
        };
        let at = self.cur.pos_of(start);
        let hir = parse_with(&written, &config)
            .map_err(|e| error(at, format!("in the regex /{pattern}/: {e}")))?;
        let hir = json_schema::whole_match(&hir)
            .map_err(|why| error(at, format!("in the regex /{pattern}/: {why}")))?;
        Ok(Expr::Regular(hir))
    }

    /// `%json {schema}`: the JSON object runs to its matching brace.
    fn json(&mut self, start: usize) -> Result<Expr> {
        self.skip_inline();
        let begin = self.cur.pos;
        if self.cur.peek() != Some('{') {
            return Err(self
                .cur
                .error(start, "expected a JSON Schema object after `%json`"));
        }
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        while let Some(c) = self.cur.peek() {
            self.cur.pos += 1;
            match (in_string, c) {
                (true, _) if escaped => escaped = false,
                (true, '\\') => escaped = true,
                (true, '"') => in_string = false,
                (false, '"') => in_string = true,
                (false, '{') => depth += 1,
                (false, '}') => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        if depth != 0 {
            return Err(self
                .cur
                .error(start, "unclosed `%json` object: missing `}`"));
        }
        let text: String = self.cur.chars[begin..self.cur.pos].iter().collect();
        let at = self.cur.pos_of(start);
        let schema: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| error(at, format!("the `%json` schema is not JSON: {e}")))?;
        let opts = SchemaOptions::default();
        let compiled = match json_schema::json_schema_to_grammar(&schema, &opts) {
            Err(e) if json_schema::is_unrolling_needed(&e) => {
                json_schema::json_schema_to_hir(&schema, &opts)
            }
            other => other,
        }
        .map_err(|e| match e {
            Error::UnsupportedSchema { .. } | Error::RegexSyntax { .. } => {
                error(at, format!("in the `%json` schema: {e}"))
            }
            other => other,
        })?;
        Ok(Expr::Regular(compiled.hir))
    }
}

/// A character in either case (simple case mappings).
fn any_case(c: char) -> ClassSet {
    let mut set = ClassSet::single(c as u32);
    for other in c.to_lowercase().chain(c.to_uppercase()) {
        if other.to_string().chars().count() == 1 {
            set = set.union(&ClassSet::single(other as u32));
        }
    }
    set
}

#[cfg(test)]
mod tests;
