//! A recursive-descent parser from pattern text to [`Hir`].
//!
//! Three dialects share one parser. [`Dialect::Python`] reads what Python's `re` reads under
//! `re.ASCII` (the oracle the tests hold us to): `\d \w \s` are ASCII, `(?i)` folds ASCII letters
//! only, `{` that does not open a valid quantifier is a literal, `]` first in a class is a literal.
//! [`Dialect::Ecma`] reads ECMA-262 patterns as JSON Schema writes them: `.` also excludes `\r`,
//! U+2028 and U+2029, `\s` is Unicode white space, `[]` is the empty class and `[^]` any character.
//! [`Dialect::Xgrammar`] reads patterns as xgrammar's regex converter does, so that a drop-in for
//! xgrammar compiles the same language: ECMA-262's classes and escapes, but `.` is any character
//! (newlines included), an escaped letter without a meaning is the letter itself (`\z` is `z`),
//! `\e` is ESC, and a `{` that is not a well-formed `{m}`, `{m,}` or `{m,n}` is an error, as are
//! flags, comments and every group form but `(?:` and `(?<name>`. Where xgrammar's own reading
//! leaves the pattern's language (it drops `^` and `$` in mid-pattern, reads `[\^]` as any
//! character and splits surrogate-pair escapes), this dialect keeps the language. The fourth,
//! [`Dialect::Rust`], is not read here at all: `regex-syntax` parses it (see `rust_syntax`).
//!
//! All accept `\xHH`, `\uHHHH` (a UTF-16 surrogate pair written as two escapes is one code point),
//! `\u{...}`, `\UHHHHHHHH`, `\p{..}`/`\P{..}` (general categories and scripts, with tables from
//! `regex-syntax`), named groups, lazy quantifiers (the same language under full match), and the
//! scoped and global flags `i`, `s`, `x`.
//!
//! Semantics are full match over the whole text. `^` and `$` (and `\A`, `\Z`, `\z`) become
//! [`Look`] assertions about the start and end of the whole text wherever they stand, so `^a$|^b$`
//! means what it says and `a^b` matches nothing.
//!
//! What the automata cannot express exactly is refused by name: lookaround, backreferences, word
//! boundaries, possessive quantifiers, atomic groups, and the `m` flag (which would change what `^`
//! and `$` mean). Every error carries the offending construct's position in code points. Nesting is
//! bounded by [`ParserConfig::nest_limit`], so a pattern of ten thousand `(` is an error rather
//! than a stack overflow.
//!
//! Beyond both dialects, two group forms exist for the JSON Schema compiler's printed output:
//! `(?&A&&B)` matches strings both `A` and `B` match, and `(?~A)` matches valid UTF-8 strings `A`
//! does not. Neither form is valid in Python or ECMA-262, so no pattern written for those engines
//! changes meaning.

use super::hir::{ClassSet, Hir, Look};
use crate::error::{Error, Result};

/// Which engine's reading of the pattern to follow where Python's `re` and ECMA-262 differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// Python's `re` with `re.ASCII`.
    #[default]
    Python,
    /// ECMA-262 (JavaScript) without the `u` flag's strictness, as JSON Schema's `pattern` uses.
    Ecma,
    /// xgrammar's regex converter (ECMA-262 escapes and classes, `.` matching newlines).
    Xgrammar,
    /// The Rust `regex` crate (Unicode classes and case folding), as outlines-core and llguidance
    /// read patterns.
    Rust,
}

impl Dialect {
    /// Every dialect, in the order the Python API lists them.
    pub const ALL: [Dialect; 4] = [
        Dialect::Python,
        Dialect::Ecma,
        Dialect::Xgrammar,
        Dialect::Rust,
    ];

    /// The dialect's name in the Python API (`dialect="..."`).
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Python => "python",
            Dialect::Ecma => "ecma",
            Dialect::Xgrammar => "xgrammar",
            Dialect::Rust => "rust",
        }
    }

    /// The dialect called `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// Parser settings.
#[derive(Debug, Clone, Copy)]
pub struct ParserConfig {
    /// Which dialect to read.
    pub dialect: Dialect,
    /// The deepest nesting of groups and repetitions accepted.
    pub nest_limit: usize,
}

impl Default for ParserConfig {
    fn default() -> Self {
        ParserConfig {
            dialect: Dialect::Python,
            nest_limit: 250,
        }
    }
}

/// Parses a pattern in the Python dialect.
pub fn parse(pattern: &str) -> Result<Hir> {
    parse_with(pattern, &ParserConfig::default())
}

/// Parses a pattern in the ECMA-262 dialect (JSON Schema's `pattern`).
pub fn parse_ecma(pattern: &str) -> Result<Hir> {
    parse_with(
        pattern,
        &ParserConfig {
            dialect: Dialect::Ecma,
            ..ParserConfig::default()
        },
    )
}

/// Parses a pattern with explicit settings.
pub fn parse_with(pattern: &str, config: &ParserConfig) -> Result<Hir> {
    if config.dialect == Dialect::Rust {
        return super::rust_syntax::parse(pattern, config);
    }
    let mut parser = Parser {
        pattern,
        chars: pattern.chars().collect(),
        pos: 0,
        flags: Flags::default(),
        config: *config,
        depth: 0,
    };
    parser.parse_global_flags()?;
    let hir = parser.parse_alternation(false)?;
    if parser.pos < parser.chars.len() {
        // Only an unmatched `)` stops the top-level alternation early.
        return Err(parser.error(parser.pos, "unbalanced parenthesis `)`"));
    }
    Ok(hir)
}

#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    case_insensitive: bool,
    dot_all: bool,
    verbose: bool,
}

struct Parser<'a> {
    pattern: &'a str,
    chars: Vec<char>,
    pos: usize,
    flags: Flags,
    config: ParserConfig,
    depth: usize,
}

/// One quantifier as written.
struct Quantifier {
    min: u32,
    max: Option<u32>,
}

impl Parser<'_> {
    fn error(&self, position: usize, message: impl Into<String>) -> Error {
        Error::RegexSyntax {
            pattern: self.pattern.to_string(),
            position,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn looking_at(&self, s: &str) -> bool {
        s.chars()
            .enumerate()
            .all(|(i, c)| self.peek_at(i) == Some(c))
    }

    fn is_python(&self) -> bool {
        self.config.dialect == Dialect::Python
    }

    fn is_xgrammar(&self) -> bool {
        self.config.dialect == Dialect::Xgrammar
    }

    /// In verbose mode, white space and `#` comments between tokens are not part of the pattern.
    fn skip_verbose(&mut self) {
        if !self.flags.verbose {
            return;
        }
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.pos += 1;
            } else if c == '#' {
                while let Some(c) = self.peek() {
                    self.pos += 1;
                    if c == '\n' {
                        break;
                    }
                }
            } else {
                break;
            }
        }
    }

    fn enter(&mut self, at: usize) -> Result<()> {
        self.depth += 1;
        if self.depth > self.config.nest_limit {
            let _ = at;
            return Err(Error::size_limit(
                "nest_limit",
                self.depth,
                self.config.nest_limit,
            ));
        }
        Ok(())
    }

    /// Global flag groups such as `(?i)` are accepted only at the very start, as in Python.
    fn parse_global_flags(&mut self) -> Result<()> {
        while !self.is_xgrammar() && self.looking_at("(?") {
            let start = self.pos;
            let mut i = 2;
            let mut letters = Vec::new();
            while let Some(c) = self.peek_at(i) {
                if c.is_ascii_alphabetic() {
                    letters.push(c);
                    i += 1;
                } else {
                    break;
                }
            }
            if letters.is_empty() || self.peek_at(i) != Some(')') {
                return Ok(());
            }
            for (k, &c) in letters.iter().enumerate() {
                self.apply_flag(c, true, start + 2 + k)?;
            }
            self.pos += i + 1;
        }
        Ok(())
    }

    fn apply_flag(&mut self, flag: char, on: bool, at: usize) -> Result<()> {
        match flag {
            'i' => self.flags.case_insensitive = on,
            's' => self.flags.dot_all = on,
            'x' => self.flags.verbose = on,
            // ASCII classes are the only classes this dialect has.
            'a' => {}
            'm' => {
                return Err(self.error(
                    at,
                    "multiline flag `(?m)` is not supported: under full match `^` and `$` refer to the whole text",
                ))
            }
            'u' => {
                return Err(self.error(
                    at,
                    "unicode flag `(?u)` is not supported: `\\d`, `\\w` and `\\s` are ASCII in this dialect",
                ))
            }
            other => return Err(self.error(at, format!("unknown flag `{other}`"))),
        }
        Ok(())
    }

    /// `branch ('|' branch)*`, stopping at `)` or the end (and at `&&` inside an intersection).
    fn parse_alternation(&mut self, in_intersection: bool) -> Result<Hir> {
        let mut branches = vec![self.parse_concat(in_intersection)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            branches.push(self.parse_concat(in_intersection)?);
        }
        Ok(if branches.len() == 1 {
            branches.pop().unwrap_or(Hir::Empty)
        } else {
            Hir::alternation(branches)
        })
    }

    fn parse_concat(&mut self, in_intersection: bool) -> Result<Hir> {
        let mut items: Vec<Hir> = Vec::new();
        loop {
            self.skip_verbose();
            match self.peek() {
                None | Some('|') | Some(')') => break,
                Some('&') if in_intersection && self.peek_at(1) == Some('&') => break,
                _ => {}
            }
            let start = self.pos;
            let atom = self.parse_atom()?;
            let atom = self.parse_quantifiers(atom, start)?;
            items.push(atom);
        }
        Ok(Hir::concat(items))
    }

    /// Applies the quantifiers that follow an atom; a second quantifier is "multiple repeat".
    fn parse_quantifiers(&mut self, atom: Option<Hir>, atom_start: usize) -> Result<Hir> {
        self.skip_verbose();
        let q_start = self.pos;
        let Some(q) = self.parse_quantifier()? else {
            return Ok(atom.unwrap_or(Hir::Empty));
        };
        let Some(atom) = atom else {
            return Err(self.error(q_start, "nothing to repeat"));
        };
        let _ = atom_start;
        // Lazy forms (`*?`, `{m,n}?`) match the same strings under full match.
        if self.peek() == Some('?') {
            self.pos += 1;
        } else if self.peek() == Some('+') {
            return Err(self.error(
                q_start,
                "possessive quantifier (a quantifier followed by `+`) is not supported",
            ));
        }
        self.skip_verbose();
        let next = self.pos;
        if self.parse_quantifier()?.is_some() {
            return Err(self.error(next, "multiple repeat"));
        }
        Ok(Hir::repeat(atom, q.min, q.max))
    }

    /// Reads `*`, `+`, `?` or a well-formed `{m}`, `{m,}`, `{,n}`, `{m,n}`. A `{` that does not
    /// open a well-formed quantifier is left for the caller to read as a literal.
    fn parse_quantifier(&mut self) -> Result<Option<Quantifier>> {
        let q = match self.peek() {
            Some('*') => Quantifier { min: 0, max: None },
            Some('+') => Quantifier { min: 1, max: None },
            Some('?') => Quantifier {
                min: 0,
                max: Some(1),
            },
            Some('{') => return self.parse_counted(),
            _ => return Ok(None),
        };
        self.pos += 1;
        Ok(Some(q))
    }

    fn parse_counted(&mut self) -> Result<Option<Quantifier>> {
        let start = self.pos;
        let mut i = self.pos + 1;
        let read_number = |i: &mut usize, chars: &[char]| -> Option<String> {
            let begin = *i;
            while *i < chars.len() && chars[*i].is_ascii_digit() {
                *i += 1;
            }
            (*i > begin).then(|| chars[begin..*i].iter().collect())
        };
        let lo = read_number(&mut i, &self.chars);
        let (hi, comma) = if self.chars.get(i) == Some(&',') {
            i += 1;
            (read_number(&mut i, &self.chars), true)
        } else {
            (None, false)
        };
        if self.is_xgrammar() && (lo.is_none() || self.chars.get(i) != Some(&'}')) {
            // xgrammar reads every `{` as a quantifier.
            return Err(self.error(start, "invalid repetition count"));
        }
        if self.chars.get(i) != Some(&'}') || (lo.is_none() && !comma) {
            return Ok(None);
        }
        if !self.is_python() && lo.is_none() {
            // ECMA-262 has no `{,n}`; there `{,5}` is literal text.
            return Ok(None);
        }
        let number = |s: &Option<String>| -> Result<Option<u32>> {
            match s {
                None => Ok(None),
                Some(s) => s
                    .parse::<u32>()
                    .map(Some)
                    .map_err(|_| self.error(start, format!("repetition count {s} is too large"))),
            }
        };
        let min = number(&lo)?.unwrap_or(0);
        let max = if comma { number(&hi)? } else { Some(min) };
        if let Some(max) = max {
            if max < min {
                return Err(self.error(start, "min repeat greater than max repeat"));
            }
        }
        self.pos = i + 1;
        Ok(Some(Quantifier { min, max }))
    }

    /// One atom; `None` for constructs that match the empty string but cannot be repeated
    /// (`(?#...)` comments), so that a following quantifier reports "nothing to repeat".
    fn parse_atom(&mut self) -> Result<Option<Hir>> {
        let start = self.pos;
        let Some(c) = self.peek() else {
            return Ok(Some(Hir::Empty));
        };
        match c {
            '(' => self.parse_group(),
            '[' => self.parse_class().map(|set| Some(Hir::class(set))),
            '.' => {
                self.pos += 1;
                Ok(Some(Hir::class(self.dot())))
            }
            '^' | '$' => {
                self.pos += 1;
                let look = Hir::Look(if c == '^' { Look::Start } else { Look::End });
                self.skip_verbose();
                if matches!(self.peek(), Some('*' | '+' | '?')) || self.quantifier_follows() {
                    return Err(self.error(self.pos, "nothing to repeat"));
                }
                Ok(Some(look))
            }
            '\\' => self.parse_escape_atom(),
            '*' | '+' | '?' => Err(self.error(start, "nothing to repeat")),
            '{' => {
                if self.quantifier_follows() {
                    return Err(self.error(start, "nothing to repeat"));
                }
                self.pos += 1;
                Ok(Some(self.literal_char('{')))
            }
            ')' => Err(self.error(start, "unbalanced parenthesis `)`")),
            c => {
                self.pos += 1;
                Ok(Some(self.literal_char(c)))
            }
        }
    }

    fn quantifier_follows(&mut self) -> bool {
        if self.peek() != Some('{') {
            return false;
        }
        let saved = self.pos;
        let found = matches!(self.parse_counted(), Ok(Some(_)) | Err(_));
        self.pos = saved;
        found
    }

    fn literal_char(&self, c: char) -> Hir {
        if self.flags.case_insensitive && c.is_ascii_alphabetic() {
            Hir::class(ClassSet::single(c as u32).ascii_case_fold())
        } else {
            let mut buf = [0u8; 4];
            Hir::literal(c.encode_utf8(&mut buf))
        }
    }

    fn dot(&self) -> ClassSet {
        if self.flags.dot_all || self.is_xgrammar() {
            ClassSet::full()
        } else if self.is_python() {
            ClassSet::single('\n' as u32).negate()
        } else {
            ClassSet::from_ranges([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]).negate()
        }
    }

    fn parse_group(&mut self) -> Result<Option<Hir>> {
        let start = self.pos;
        self.enter(start)?;
        self.pos += 1;
        let saved_flags = self.flags;
        let result = self.parse_group_body(start);
        self.flags = saved_flags;
        self.depth -= 1;
        result
    }

    fn parse_group_body(&mut self, start: usize) -> Result<Option<Hir>> {
        if self.peek() == Some('?') {
            self.pos += 1;
            let Some(kind) = self.peek() else {
                return Err(self.error(start, "unclosed group"));
            };
            if self.is_xgrammar() && !matches!(kind, ':' | '=' | '!' | '<') {
                return Err(self.error(
                    start,
                    format!("group form `(?{kind}` is not supported in xgrammar's dialect (only `(?:` and `(?<name>`)"),
                ));
            }
            match kind {
                ':' => self.pos += 1,
                '#' => {
                    while let Some(c) = self.peek() {
                        self.pos += 1;
                        if c == ')' {
                            return Ok(None);
                        }
                    }
                    return Err(self.error(start, "unclosed comment `(?#...`"));
                }
                '=' => return Err(self.error(start, "lookahead `(?=...)` is not supported")),
                '!' => {
                    return Err(self.error(start, "negative lookahead `(?!...)` is not supported"))
                }
                '>' => return Err(self.error(start, "atomic group `(?>...)` is not supported")),
                '|' => {
                    return Err(self.error(start, "branch reset group `(?|...)` is not supported"))
                }
                '(' => {
                    return Err(
                        self.error(start, "conditional group `(?(...)...)` is not supported")
                    )
                }
                '&' => {
                    self.pos += 1;
                    return self.parse_intersection(start).map(Some);
                }
                '~' => {
                    self.pos += 1;
                    let inner = self.parse_alternation(false)?;
                    self.expect_close(start)?;
                    return Ok(Some(Hir::complement(inner)));
                }
                '<' if matches!(self.peek_at(1), Some('=')) => {
                    return Err(self.error(start, "lookbehind `(?<=...)` is not supported"))
                }
                '<' if matches!(self.peek_at(1), Some('!')) => {
                    return Err(self.error(start, "negative lookbehind `(?<!...)` is not supported"))
                }
                '<' => {
                    self.pos += 1;
                    self.parse_group_name(start, '>')?;
                }
                'P' => match self.peek_at(1) {
                    Some('<') => {
                        self.pos += 2;
                        self.parse_group_name(start, '>')?;
                    }
                    Some('=') => {
                        return Err(
                            self.error(start, "named backreference `(?P=name)` is not supported")
                        )
                    }
                    Some('>') => {
                        return Err(
                            self.error(start, "recursive pattern `(?P>name)` is not supported")
                        )
                    }
                    _ => return Err(self.error(start, "unknown extension `(?P`")),
                },
                '\'' => {
                    self.pos += 1;
                    self.parse_group_name(start, '\'')?;
                }
                c if c.is_ascii_alphabetic() || c == '-' => self.parse_scoped_flags(start)?,
                _ => {
                    return Err(self.error(start, format!("unknown extension `(?{kind}`")));
                }
            }
        }
        let inner = self.parse_alternation(false)?;
        self.expect_close(start)?;
        Ok(Some(inner))
    }

    /// `(?&A&&B&&...)`: the strings every operand matches.
    fn parse_intersection(&mut self, start: usize) -> Result<Hir> {
        let mut operands = vec![self.parse_alternation(true)?];
        while self.looking_at("&&") {
            self.pos += 2;
            operands.push(self.parse_alternation(true)?);
        }
        self.expect_close(start)?;
        Ok(Hir::intersection(operands))
    }

    fn expect_close(&mut self, start: usize) -> Result<()> {
        if self.peek() == Some(')') {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(start, "unclosed group: missing `)`"))
        }
    }

    fn parse_group_name(&mut self, start: usize, close: char) -> Result<()> {
        let name_start = self.pos;
        while let Some(c) = self.peek() {
            if c == close {
                let name: String = self.chars[name_start..self.pos].iter().collect();
                let valid = if self.is_xgrammar() {
                    // ASCII names, and the empty name, as xgrammar takes them.
                    !name.starts_with(|c: char| c.is_ascii_digit())
                        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                } else {
                    name.chars()
                        .next()
                        .is_some_and(|c| c.is_alphabetic() || c == '_')
                        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
                };
                if !valid {
                    return Err(self.error(name_start, format!("bad group name {name:?}")));
                }
                self.pos += 1;
                return Ok(());
            }
            self.pos += 1;
        }
        Err(self.error(start, "unclosed group name"))
    }

    /// `(?i:...)`, `(?-i:...)`, `(?i-s:...)`; a bare `(?i)` here is not at the start.
    fn parse_scoped_flags(&mut self, start: usize) -> Result<()> {
        let mut on = true;
        while let Some(c) = self.peek() {
            match c {
                ':' => {
                    self.pos += 1;
                    return Ok(());
                }
                ')' => {
                    return Err(self.error(start, "global flags not at the start of the expression"))
                }
                '-' => on = false,
                c if c.is_ascii_alphabetic() => {
                    let at = self.pos;
                    self.apply_flag(c, on, at)?;
                }
                _ => return Err(self.error(self.pos, format!("bad inline flag `{c}`"))),
            }
            self.pos += 1;
        }
        Err(self.error(start, "unclosed group"))
    }

    /// An escape outside a class.
    fn parse_escape_atom(&mut self) -> Result<Option<Hir>> {
        let start = self.pos;
        let Some(c) = self.peek_at(1) else {
            return Err(self.error(start, "trailing backslash at end of pattern"));
        };
        let look = match c {
            'A' if self.is_python() => Some(Look::Start),
            'Z' if self.is_python() => Some(Look::End),
            'z' if !self.is_xgrammar() => Some(Look::End),
            'b' => {
                return Err(self.error(start, "word boundary `\\b` is not supported"));
            }
            'B' => {
                return Err(self.error(start, "non-word boundary `\\B` is not supported"));
            }
            'G' if !self.is_xgrammar() => return Err(self.error(start, "`\\G` is not supported")),
            'k' if self.is_xgrammar() => {
                return Err(self.error(start, "backreference `\\k` is not supported"));
            }
            'p' | 'P' if self.is_xgrammar() => {
                return Err(self.error(
                    start,
                    "Unicode property escapes are not supported in xgrammar's dialect",
                ));
            }
            'k' if self.peek_at(2) == Some('<') || self.peek_at(2) == Some('{') => {
                return Err(self.error(start, "named backreference `\\k<name>` is not supported"));
            }
            _ => None,
        };
        if let Some(look) = look {
            self.pos += 2;
            return Ok(Some(Hir::Look(look)));
        }
        match self.parse_escape(false)? {
            Escaped::Char(c) => Ok(Some(match char::from_u32(c) {
                Some(ch) => self.literal_char(ch),
                None => Hir::class(ClassSet::single(c)),
            })),
            Escaped::Set(set) => Ok(Some(Hir::class(self.fold(set)))),
        }
    }

    fn fold(&self, set: ClassSet) -> ClassSet {
        if self.flags.case_insensitive {
            set.ascii_case_fold()
        } else {
            set
        }
    }

    /// Reads an escape (at `\`), shared by atoms and classes.
    fn parse_escape(&mut self, in_class: bool) -> Result<Escaped> {
        let start = self.pos;
        self.pos += 1;
        let Some(c) = self.peek() else {
            return Err(self.error(start, "trailing backslash at end of pattern"));
        };
        self.pos += 1;
        if self.is_xgrammar() {
            if let Some(escaped) = self.parse_xgrammar_escape(start, c, in_class)? {
                return Ok(escaped);
            }
        }
        let simple = |v: u32| Ok(Escaped::Char(v));
        match c {
            'd' => Ok(Escaped::Set(digit())),
            'D' => Ok(Escaped::Set(digit().negate())),
            'w' => Ok(Escaped::Set(word())),
            'W' => Ok(Escaped::Set(word().negate())),
            's' => Ok(Escaped::Set(self.space())),
            'S' => Ok(Escaped::Set(self.space().negate())),
            'n' => simple(0x0A),
            't' => simple(0x09),
            'r' => simple(0x0D),
            'f' => simple(0x0C),
            'v' => simple(0x0B),
            'a' if self.is_python() => simple(0x07),
            'b' if in_class => simple(0x08),
            'x' => self.parse_hex_escape(start, 2).map(Escaped::Char),
            'u' if self.peek() == Some('{') => self.parse_braced_hex(start).map(Escaped::Char),
            'u' => self.parse_utf16_escape(start).map(Escaped::Char),
            'U' if self.is_python() => self.parse_hex_escape(start, 8).map(Escaped::Char),
            'c' if !self.is_python() => match self.peek() {
                Some(l) if l.is_ascii_alphabetic() => {
                    self.pos += 1;
                    Ok(Escaped::Char(l as u32 % 32))
                }
                _ => Err(self.error(start, "bad control escape `\\c`")),
            },
            'p' | 'P' => self.parse_unicode_class(start, c == 'P').map(Escaped::Set),
            'N' if self.is_python() => {
                Err(self.error(start, "named character escape `\\N{...}` is not supported"))
            }
            '0'..='7' if self.is_python() => {
                // Python: `\0` and `\0oo` are octal, so is a three-digit `\ooo`; other digit runs
                // are backreferences (outside a class).
                let mut digits = vec![c];
                while digits.len() < 3 && matches!(self.peek(), Some('0'..='7')) {
                    digits.push(self.peek().unwrap_or('0'));
                    self.pos += 1;
                }
                if c == '0' || digits.len() == 3 || in_class {
                    let s: String = digits.iter().collect();
                    let v = u32::from_str_radix(&s, 8).unwrap_or(0);
                    if v > 0o377 {
                        return Err(self.error(
                            start,
                            format!("octal escape value \\{s} outside of range 0-0o377"),
                        ));
                    }
                    Ok(Escaped::Char(v))
                } else {
                    Err(self.error(start, format!("backreference `\\{c}` is not supported")))
                }
            }
            '0' if !matches!(self.peek(), Some('0'..='9')) => simple(0),
            '1'..='9' | '0' => {
                Err(self.error(start, format!("backreference `\\{c}` is not supported")))
            }
            c if c.is_ascii_alphanumeric() => Err(self.error(start, format!("bad escape `\\{c}`"))),
            c => simple(c as u32),
        }
    }

    /// The escapes xgrammar reads its own way (the rest it reads as ECMA-262 does): `None` hands
    /// `c` back to the common path. The backslash and `c` are consumed; `start` is the backslash.
    fn parse_xgrammar_escape(
        &mut self,
        start: usize,
        c: char,
        in_class: bool,
    ) -> Result<Option<Escaped>> {
        let remaining = self.chars.len() - self.pos;
        let code_point = |v: u32| Ok(Some(Escaped::Char(v)));
        match c {
            'd' | 'D' | 'w' | 'W' | 's' | 'S' | 'n' | 't' | 'r' | 'f' | 'v' | 'b' | 'c' => Ok(None),
            'a' => code_point(0x07),
            'e' => code_point(0x1B),
            '0' => code_point(0),
            'u' if self.peek() == Some('{') => {
                let digits = (1..=7)
                    .take_while(|&i| self.peek_at(i).is_some_and(|h| h.is_ascii_hexdigit()))
                    .count();
                if !(1..=6).contains(&digits) || self.peek_at(digits + 1) != Some('}') {
                    return Err(self.error(
                        start,
                        "bad escape `\\u{...}`: expected 1 to 6 hex digits and `}`",
                    ));
                }
                self.parse_braced_hex(start).map(|v| Some(Escaped::Char(v)))
            }
            'x' | 'u' if remaining < if c == 'x' { 2 } else { 4 } => {
                Err(self.error(start, format!("unfinished escape `\\{c}`")))
            }
            // Exactly two, four or eight hex digits, or the letter itself, as ECMA-262's Annex B
            // reads them. xgrammar's converter reads every hex digit that follows (`\x41a` is
            // U+041A), which is not what the pattern says; the departure is listed in the README.
            'x' | 'u' | 'U' => {
                let width = match c {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                if !(0..width).all(|i| self.peek_at(i).is_some_and(|h| h.is_ascii_hexdigit())) {
                    code_point(c as u32)
                } else if c == 'u' {
                    self.parse_utf16_escape(start)
                        .map(|v| Some(Escaped::Char(v)))
                } else {
                    self.parse_hex_escape(start, width)
                        .map(|v| Some(Escaped::Char(v)))
                }
            }
            '1'..='9' => {
                if in_class {
                    code_point(c as u32)
                } else {
                    Err(self.error(start, format!("backreference `\\{c}` is not supported")))
                }
            }
            c => code_point(c as u32),
        }
    }

    fn space(&self) -> ClassSet {
        if self.is_python() {
            ClassSet::from_ranges([(0x09, 0x0D), (0x20, 0x20)])
        } else {
            // ECMA-262 WhiteSpace and LineTerminator.
            ClassSet::from_ranges([
                (0x09, 0x0D),
                (0x20, 0x20),
                (0xA0, 0xA0),
                (0x1680, 0x1680),
                (0x2000, 0x200A),
                (0x2028, 0x2029),
                (0x202F, 0x202F),
                (0x205F, 0x205F),
                (0x3000, 0x3000),
                (0xFEFF, 0xFEFF),
            ])
        }
    }

    /// `\\uHHHH` after the `u`; a surrogate pair spelled as two escapes is one astral code point.
    fn parse_utf16_escape(&mut self, start: usize) -> Result<u32> {
        let v = self.parse_hex_escape(start, 4)?;
        if (0xD800..0xDC00).contains(&v) && self.looking_at("\\u") {
            let saved = self.pos;
            self.pos += 2;
            if let Ok(low) = self.parse_hex_escape(saved, 4) {
                if (0xDC00..0xE000).contains(&low) {
                    return Ok(0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00));
                }
            }
            self.pos = saved;
        }
        Ok(v)
    }

    fn parse_hex_escape(&mut self, start: usize, digits: usize) -> Result<u32> {
        let mut v = 0u32;
        for _ in 0..digits {
            match self.peek().and_then(|c| c.to_digit(16)) {
                Some(d) => {
                    v = v * 16 + d;
                    self.pos += 1;
                }
                None => {
                    let text: String = self.chars[start..self.pos].iter().collect();
                    return Err(self.error(start, format!("incomplete escape `{text}`")));
                }
            }
        }
        if v > super::hir::MAX_CODE_POINT {
            return Err(self.error(start, format!("escape value {v:#x} is not a code point")));
        }
        Ok(v)
    }

    fn parse_braced_hex(&mut self, start: usize) -> Result<u32> {
        self.pos += 1;
        let begin = self.pos;
        while matches!(self.peek(), Some(c) if c.is_ascii_hexdigit()) {
            self.pos += 1;
        }
        let text: String = self.chars[begin..self.pos].iter().collect();
        if self.peek() != Some('}') || text.is_empty() || text.len() > 8 {
            return Err(self.error(
                start,
                "bad escape `\\u{...}`: expected 1 to 6 hex digits and `}`",
            ));
        }
        self.pos += 1;
        match u32::from_str_radix(&text, 16) {
            Ok(v) if v <= super::hir::MAX_CODE_POINT => Ok(v),
            _ => Err(self.error(start, format!("escape value 0x{text} is not a code point"))),
        }
    }

    /// `\p{Name}`, `\pL`, `\P{...}`, `\p{^...}`: general categories and scripts.
    fn parse_unicode_class(&mut self, start: usize, negated: bool) -> Result<ClassSet> {
        let name: String = match self.peek() {
            Some('{') => {
                self.pos += 1;
                let begin = self.pos;
                while matches!(self.peek(), Some(c) if c != '}') {
                    self.pos += 1;
                }
                if self.peek() != Some('}') {
                    return Err(self.error(start, "unclosed Unicode property `\\p{`"));
                }
                let name = self.chars[begin..self.pos].iter().collect();
                self.pos += 1;
                name
            }
            Some(c) if c.is_ascii_alphabetic() => {
                self.pos += 1;
                c.to_string()
            }
            _ => return Err(self.error(start, "bad Unicode property escape `\\p`")),
        };
        let (name, inner_negated) = match name.strip_prefix('^') {
            Some(rest) => (rest.to_string(), true),
            None => (name, false),
        };
        let set = unicode_property(&name)
            .ok_or_else(|| self.error(start, format!("unknown Unicode property {name:?}")))?;
        Ok(if negated ^ inner_negated {
            set.negate()
        } else {
            set
        })
    }

    /// A bracketed class, from `[` to `]`.
    fn parse_class(&mut self) -> Result<ClassSet> {
        let start = self.pos;
        self.pos += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut set = ClassSet::empty();
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                return Err(self.error(start, "unclosed character class: missing `]`"));
            };
            if c == ']' && !(first && self.is_python()) {
                if first && !negated && self.is_xgrammar() {
                    return Err(self.error(start, "empty character class `[]`"));
                }
                self.pos += 1;
                break;
            }
            if c == '\n' && self.is_xgrammar() {
                return Err(self.error(
                    self.pos,
                    "a character class may not contain a raw newline in xgrammar's dialect",
                ));
            }
            first = false;
            let item_start = self.pos;
            let lo = self.parse_class_item()?;
            let is_range = self.peek() == Some('-') && self.peek_at(1).is_some_and(|n| n != ']');
            if !is_range {
                set = set.union(&lo.into_set());
                continue;
            }
            self.pos += 1;
            let hi = self.parse_class_item()?;
            let range_text = |p: &Self| -> String { p.chars[item_start..p.pos].iter().collect() };
            match (lo, hi) {
                (Escaped::Char(a), Escaped::Char(b)) if a <= b => {
                    set = set.union(&ClassSet::range(a, b));
                }
                (Escaped::Set(a), Escaped::Char(b)) if !self.is_python() => {
                    // ECMA-262 Annex B: `[\d-z]` is the class, a literal `-`, and the character.
                    set = set
                        .union(&a)
                        .union(&ClassSet::single('-' as u32))
                        .union(&ClassSet::single(b));
                }
                _ => {
                    return Err(self.error(
                        item_start,
                        format!("bad character range {}", range_text(self)),
                    ))
                }
            }
        }
        let set = self.fold(set);
        Ok(if negated { set.negate() } else { set })
    }

    fn parse_class_item(&mut self) -> Result<Escaped> {
        let start = self.pos;
        match self.peek() {
            Some('\\') => {
                if !self.is_xgrammar() && matches!(self.peek_at(1), Some('A' | 'Z' | 'z' | 'B')) {
                    let c = self.peek_at(1).unwrap_or('?');
                    return Err(self.error(start, format!("bad escape `\\{c}` in a class")));
                }
                self.parse_escape(true)
            }
            Some(c) => {
                self.pos += 1;
                Ok(Escaped::Char(c as u32))
            }
            None => Err(self.error(start, "unclosed character class: missing `]`")),
        }
    }
}

/// What an escape denotes: one code point, or a set (`\d`, `\p{L}`, ...).
enum Escaped {
    Char(u32),
    Set(ClassSet),
}

impl Escaped {
    fn into_set(self) -> ClassSet {
        match self {
            Escaped::Char(c) => ClassSet::single(c),
            Escaped::Set(s) => s,
        }
    }
}

fn digit() -> ClassSet {
    ClassSet::range('0' as u32, '9' as u32)
}

fn word() -> ClassSet {
    ClassSet::from_ranges([
        ('0' as u32, '9' as u32),
        ('A' as u32, 'Z' as u32),
        ('_' as u32, '_' as u32),
        ('a' as u32, 'z' as u32),
    ])
}

/// The code points of a Unicode general category or script, from `regex-syntax`'s tables.
fn unicode_property(name: &str) -> Option<ClassSet> {
    // Only names made of these characters reach regex-syntax, so the pattern built below cannot
    // mean anything but one property lookup.
    if name.is_empty()
        || !name.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '=' | ':' | ' ' | '-' | '&' | '.')
        })
    {
        return None;
    }
    let pattern = format!("\\p{{{name}}}");
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(true)
        .utf8(false)
        .build()
        .parse(&pattern)
        .ok()?;
    match hir.kind() {
        regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(cls)) => {
            Some(ClassSet::from_ranges(
                cls.ranges()
                    .iter()
                    .map(|r| (r.start() as u32, r.end() as u32)),
            ))
        }
        // A property with one member comes back as that character.
        regex_syntax::hir::HirKind::Literal(lit) => {
            let mut chars = std::str::from_utf8(&lit.0).ok()?.chars();
            let c = chars.next()?;
            chars.next().is_none().then(|| ClassSet::single(c as u32))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(p: &str) -> (usize, String) {
        match parse(p) {
            Err(Error::RegexSyntax {
                position, message, ..
            }) => (position, message),
            other => panic!("expected a syntax error for {p:?}, got {other:?}"),
        }
    }

    #[test]
    fn literals_and_concat() {
        assert_eq!(parse("abc").unwrap(), Hir::literal("abc"));
        assert_eq!(parse("").unwrap(), Hir::Empty);
    }

    #[test]
    fn classes_and_ranges() {
        let h = parse("[a-c0]").unwrap();
        assert_eq!(
            h,
            Hir::class(ClassSet::from_ranges([(0x30, 0x30), (0x61, 0x63)]))
        );
        assert_eq!(
            parse("[]a]").unwrap(),
            Hir::class(ClassSet::from_ranges([(0x5D, 0x5D), (0x61, 0x61)]))
        );
        assert_eq!(parse_ecma("[^]").unwrap(), Hir::any_char());
        assert!(parse_ecma("[]").unwrap().is_nothing());
    }

    #[test]
    fn quantifiers() {
        assert_eq!(
            parse("a{2,3}?").unwrap(),
            Hir::repeat(Hir::literal("a"), 2, Some(3))
        );
        assert_eq!(
            parse("a{,2}").unwrap(),
            Hir::repeat(Hir::literal("a"), 0, Some(2))
        );
        assert_eq!(parse("a{x}").unwrap(), Hir::literal("a{x}"));
        assert_eq!(parse_ecma("a{,2}").unwrap(), Hir::literal("a{,2}"));
    }

    #[test]
    fn surrogate_pair_escapes_combine() {
        assert_eq!(parse("\\ud83d\\ude00").unwrap(), Hir::literal("\u{1F600}"));
        assert_eq!(parse("\\u{1F600}").unwrap(), Hir::literal("\u{1F600}"));
    }

    #[test]
    fn case_insensitive_folds_ascii_only() {
        assert_eq!(
            parse("(?i)k").unwrap(),
            Hir::class(ClassSet::from_ranges([(0x4B, 0x4B), (0x6B, 0x6B)]))
        );
        assert_eq!(parse("(?i)é").unwrap(), Hir::literal("é"));
    }

    #[test]
    fn unicode_properties() {
        let Hir::Class(ref greek) = parse("\\p{Greek}").unwrap() else {
            panic!("not a class")
        };
        assert!(greek.contains('α' as u32) && !greek.contains('a' as u32));
        let Hir::Class(ref not_letter) = parse("\\PL").unwrap() else {
            panic!("not a class")
        };
        assert!(!not_letter.contains('a' as u32) && not_letter.contains('1' as u32));
        assert!(parse("\\p{NoSuchThing}").is_err());
        for name in ["Line_Separator", "Zl", "gcb=ri", "sc=Greek", "Script=Latin"] {
            assert!(parse(&format!("\\p{{{name}}}")).is_ok(), "{name}");
        }
    }

    #[test]
    fn errors_name_the_construct_and_position() {
        assert_eq!(err("ab(?=c)").0, 2);
        assert!(err("ab(?=c)").1.contains("lookahead"));
        assert!(err("(?<=a)b").1.contains("lookbehind"));
        assert!(err("(a)\\1").1.contains("backreference"));
        assert!(err("a\\b").1.contains("word boundary"));
        assert!(err("a*+").1.contains("possessive"));
        assert!(err("(?>a)").1.contains("atomic"));
        assert_eq!(err("x(ab").0, 1);
        assert_eq!(err("[ab").0, 0);
        assert!(err("[z-a]").1.contains("bad character range"));
        assert!(err("\\e").1.contains("bad escape"));
        assert_eq!(err("*a"), (0, "nothing to repeat".to_string()));
        assert!(err("a**").1.contains("multiple repeat"));
        assert!(err("a{3,2}").1.contains("min repeat"));
        assert!(err("a)").1.contains("unbalanced"));
        assert!(err("a(?i)b").1.contains("global flags"));
        assert!(err("\\x4").1.contains("incomplete escape"));
    }

    #[test]
    fn deep_nesting_is_a_limit_not_a_crash() {
        let p = "(".repeat(10_000);
        assert!(matches!(parse(&p), Err(Error::SizeLimit { .. })));
    }

    #[test]
    fn boolean_groups() {
        assert_eq!(
            parse("(?&a+&&a{2})").unwrap(),
            Hir::intersection([
                Hir::repeat(Hir::literal("a"), 1, None),
                Hir::repeat(Hir::literal("a"), 2, Some(2))
            ])
        );
        assert_eq!(parse("(?~a)").unwrap(), Hir::complement(Hir::literal("a")));
    }

    fn xgrammar(p: &str) -> Result<Hir> {
        parse_with(
            p,
            &ParserConfig {
                dialect: Dialect::Xgrammar,
                ..ParserConfig::default()
            },
        )
    }

    #[test]
    fn xgrammar_reads_as_its_converter_does() {
        // Each pattern next to the same language in the Python dialect, as xgrammar 0.2.9 prints
        // it back from `Grammar.from_regex`.
        for (xgr, python) in [
            (".", "(?s:.)"),
            (
                "\\s",
                "[\\t-\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]",
            ),
            ("\\d\\w", "[0-9][0-9A-Za-z_]"),
            ("\\z\\A\\Z\\q\\G", "zAZqG"),
            ("\\e\\a\\cA\\0", "\\x1b\\x07\\x01\\x00"),
            ("\\xzz\\x4g\\uzzzz\\U0041\\U00000041", "xzzx4guzzzzU0041A"),
            ("\\u{41}\\ud83d\\ude00\\u{1}", "A\\U0001f600\\x01"),
            ("[\\b\\B\\p\\k\\1\\z]", "[\\x08Bpk1z]"),
            ("[^]a]", "(?s:.)a\\]"),
            ("[[a]]", "[\\[a]\\]"),
            ("[\\d-z]", "[0-9\\-z]"),
            ("(?<n>a)(?<>b)(?:c)", "abc"),
            ("a*?b{2,}?c??", "a*b{2,}c?"),
            ("a]}", "a\\]\\}"),
            ("a^b|c$d", "a^b|c$d"),
        ] {
            assert_eq!(xgrammar(xgr).unwrap(), parse(python).unwrap(), "{xgr}");
        }
    }

    #[test]
    fn xgrammar_refuses_what_its_converter_refuses() {
        for p in [
            "a{,3}",
            "a{",
            "a{x}",
            "{1}",
            "a{ 2}",
            "(?i)a",
            "(?s:a)",
            "(?P<n>a)",
            "(?#c)",
            "(?'n'a)",
            "(?>a)",
            "(?=a)",
            "a**",
            "a{2}{3}",
            "a*+",
            "\\b",
            "\\B",
            "\\1",
            "\\k<n>",
            "\\p{L}",
            "\\x",
            "\\u12",
            "\\u{}",
            "\\u{1234567}",
            "\\c1",
            "[]a]",
            "[\n]",
            "(?<1>a)",
            "(?<é>a)",
            "(?&a&&b)",
            "(?~a)",
        ] {
            assert!(
                matches!(xgrammar(p), Err(Error::RegexSyntax { .. })),
                "{p}: {:?}",
                xgrammar(p)
            );
        }
    }

    #[test]
    fn printed_hir_parses_back() {
        for p in [
            "a|b(c|d)*e{2,5}",
            "[^a-z\\n]+x?",
            "(?:ab)*|\\.\\*",
            "^a$|^b$",
        ] {
            let h = parse(p).unwrap();
            assert_eq!(parse(&h.to_string()).unwrap(), h, "pattern {p}");
        }
    }
}
