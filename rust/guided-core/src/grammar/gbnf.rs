//! GBNF, llama.cpp's grammar syntax, which xgrammar's EBNF reads too.
//!
//! ```text
//! root   ::= object
//! object ::= "{" ws ( pair ( "," ws pair )* )? "}"   # a comment
//! pair   ::= string ":" ws value
//! ws     ::= [ \t\n]*
//! ```
//!
//! A rule is a name, `::=` and a body of alternatives (`|`) of sequences of elements: string
//! literals (`"..."`, with `\n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH` escapes), character classes
//! (`[a-z]`, `[^"\\]`, the same escapes), `.` (any character), rule names, and groups, each
//! optionally followed by `*`, `+`, `?` or a count (`{m}`, `{m,}`, `{m,n}`, `{,n}`). `#` starts
//! a comment that runs to the end of the line.
//!
//! llama.cpp ends a rule at the end of its line unless a group is open; xgrammar does not care
//! about lines. Reading line breaks as white space and starting a new rule where a name is
//! followed by `::=` accepts both: every grammar either of them reads means the same here.
//! Names are letters, digits, `-` and `_`. The parser is a loop over characters, not a
//! recursion over lines, and group nesting is bounded, so hostile text gets an error, never a
//! stack overflow.

use std::ops::{Deref, DerefMut};

use super::ast::{Expr, Rule};
use super::cursor::Cursor;
use crate::error::{Error, Result};
use crate::regex::ClassSet;

/// Deepest nesting of groups accepted.
const MAX_NESTING: usize = 250;

/// Reads GBNF text into rules, in the order written.
pub fn parse(text: &str) -> Result<Vec<Rule>> {
    let mut p = Parser {
        cur: Cursor::new(text),
        depth: 0,
    };
    let mut rules = Vec::new();
    loop {
        p.skip_space();
        if p.at_end() {
            break;
        }
        let at = p.here();
        let Some(name) = p.name() else {
            return Err(p.error(p.pos, "expected a rule name"));
        };
        p.skip_space();
        if !p.eat("::=") {
            return Err(p.error(
                p.pos,
                format!("expected `::=` after the rule name `{name}`"),
            ));
        }
        let body = p.alternation()?;
        rules.push(Rule { name, body, at });
    }
    if rules.is_empty() {
        return Err(p.error(0, "the grammar has no rules"));
    }
    Ok(rules)
}

struct Parser {
    cur: Cursor,
    depth: usize,
}

impl Deref for Parser {
    type Target = Cursor;

    fn deref(&self) -> &Cursor {
        &self.cur
    }
}

impl DerefMut for Parser {
    fn deref_mut(&mut self) -> &mut Cursor {
        &mut self.cur
    }
}

impl Parser {
    /// White space (line breaks included) and `#` comments.
    fn skip_space(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.pos += 1;
            } else if c == '#' {
                while self.peek().is_some_and(|c| c != '\n') {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    fn is_name_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-' || c == '_'
    }

    fn name(&mut self) -> Option<String> {
        let start = self.pos;
        while self.peek().is_some_and(Self::is_name_char) {
            self.pos += 1;
        }
        (self.pos > start).then(|| self.chars[start..self.pos].iter().collect())
    }

    /// Whether a new rule starts here: a name followed by `::=`.
    fn rule_starts(&self) -> bool {
        let mut i = self.pos;
        while self.chars.get(i).is_some_and(|&c| Self::is_name_char(c)) {
            i += 1;
        }
        if i == self.pos {
            return false;
        }
        while self.chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        self.chars[i..].starts_with(&[':', ':', '='])
    }

    fn alternation(&mut self) -> Result<Expr> {
        let mut branches = vec![self.sequence()?];
        while self.peek() == Some('|') {
            self.pos += 1;
            branches.push(self.sequence()?);
        }
        Ok(if branches.len() == 1 {
            branches.pop().unwrap_or(Expr::Empty)
        } else {
            Expr::Alt(branches)
        })
    }

    fn sequence(&mut self) -> Result<Expr> {
        let mut items = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                None | Some('|') | Some(')') => break,
                _ if self.rule_starts() => break,
                _ => {}
            }
            let element = self.element()?;
            items.push(self.postfix(element)?);
        }
        Ok(match items.len() {
            0 => Expr::Empty,
            1 => items.pop().unwrap_or(Expr::Empty),
            _ => Expr::Seq(items),
        })
    }

    fn element(&mut self) -> Result<Expr> {
        let start = self.pos;
        match self.peek() {
            Some('"') => self.literal(),
            Some('[') => self.class(),
            Some('.') => {
                self.pos += 1;
                Ok(Expr::Class(ClassSet::full()))
            }
            Some('(') => {
                self.depth += 1;
                if self.depth > MAX_NESTING {
                    return Err(Error::size_limit(
                        "grammar_nesting",
                        self.depth,
                        MAX_NESTING,
                    ));
                }
                self.pos += 1;
                let inner = self.alternation()?;
                self.skip_space();
                if self.peek() != Some(')') {
                    return Err(self.error(start, "unclosed group: missing `)`"));
                }
                self.pos += 1;
                self.depth -= 1;
                Ok(inner)
            }
            Some(c) if Self::is_name_char(c) => {
                let at = self.here();
                let name = self.name().unwrap_or_default();
                Ok(Expr::Ref { name, at })
            }
            Some(':') => {
                Err(self.error(start, "unexpected `:` (a rule is written `name ::= ...`)"))
            }
            Some(c) => Err(self.error(start, format!("unexpected `{c}`"))),
            None => Err(self.error(start, "unexpected end of the grammar")),
        }
    }

    fn postfix(&mut self, mut element: Expr) -> Result<Expr> {
        for applied in 0.. {
            if applied > MAX_NESTING {
                // each operator nests the element once more
                return Err(Error::size_limit("grammar_nesting", applied, MAX_NESTING));
            }
            let saved = self.pos;
            self.skip_space();
            let (min, max) = match self.peek() {
                Some('*') => (0, None),
                Some('+') => (1, None),
                Some('?') => (0, Some(1)),
                Some('{') => {
                    let (min, max) = self.count()?;
                    element = repeat(element, min, max);
                    continue;
                }
                _ => {
                    self.pos = saved;
                    return Ok(element);
                }
            };
            self.pos += 1;
            element = repeat(element, min, max);
        }
        Ok(element)
    }

    /// `{m}`, `{m,}`, `{m,n}` or `{,n}`, white space allowed inside.
    fn count(&mut self) -> Result<(u32, Option<u32>)> {
        let start = self.pos;
        self.pos += 1;
        let number = |p: &mut Self| -> Result<Option<u32>> {
            p.skip_space();
            let begin = p.pos;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.pos += 1;
            }
            if p.pos == begin {
                return Ok(None);
            }
            let digits: String = p.chars[begin..p.pos].iter().collect();
            digits
                .parse::<u32>()
                .map(Some)
                .map_err(|_| p.error(begin, format!("repetition count {digits} is too large")))
        };
        let lo = number(self)?;
        self.skip_space();
        let (min, max) = if self.peek() == Some(',') {
            self.pos += 1;
            (lo.unwrap_or(0), number(self)?)
        } else {
            let Some(n) = lo else {
                return Err(self.error(start, "expected a count in `{...}`"));
            };
            (n, Some(n))
        };
        self.skip_space();
        if self.peek() != Some('}') {
            return Err(self.error(start, "unclosed repetition count: missing `}`"));
        }
        self.pos += 1;
        if max.is_some_and(|max| max < min) {
            return Err(self.error(start, "repetition count: the maximum is below the minimum"));
        }
        Ok((min, max))
    }

    fn literal(&mut self) -> Result<Expr> {
        let start = self.pos;
        self.pos += 1;
        let mut text = String::new();
        loop {
            match self.peek() {
                None => return Err(self.error(start, "unclosed string literal")),
                Some('"') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') => text.push(self.escape()?),
                Some(c) => {
                    text.push(c);
                    self.pos += 1;
                }
            }
        }
        Ok(if text.is_empty() {
            Expr::Empty
        } else {
            Expr::Literal(text)
        })
    }

    /// `[...]` or `[^...]`, with ranges and escapes.
    fn class(&mut self) -> Result<Expr> {
        let start = self.pos;
        self.pos += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut set = ClassSet::empty();
        loop {
            if self.peek() == Some(']') {
                self.pos += 1;
                break;
            }
            let lo = self.class_member(start)?;
            let is_range = self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']');
            if !is_range {
                set = set.union(&ClassSet::single(lo as u32));
                continue;
            }
            let range_start = self.pos - 1;
            self.pos += 1;
            let hi = self.class_member(start)?;
            if hi < lo {
                return Err(self.error(range_start, format!("bad character range {lo}-{hi}")));
            }
            set = set.union(&ClassSet::range(lo as u32, hi as u32));
        }
        Ok(Expr::Class(if negated { set.negate() } else { set }))
    }

    /// One character of the class opened at `start`, escapes decoded.
    fn class_member(&mut self, start: usize) -> Result<char> {
        match self.peek() {
            None => Err(self.error(start, "unclosed character class: missing `]`")),
            Some('\\') => self.escape(),
            Some(c) => {
                self.pos += 1;
                Ok(c)
            }
        }
    }
}

fn repeat(expr: Expr, min: u32, max: Option<u32>) -> Expr {
    Expr::Repeat {
        expr: Box::new(expr),
        min,
        max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::ast::Pos;

    fn lit(s: &str) -> Expr {
        Expr::Literal(s.to_string())
    }

    fn err(text: &str) -> (u32, u32, String) {
        match parse(text) {
            Err(Error::GrammarSyntax {
                line,
                column,
                message,
            }) => (line, column, message),
            other => panic!("expected a syntax error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn rules_span_lines_and_end_where_the_next_begins() {
        let rules = parse(
            "root ::= a\n  | \"x\" # comment\nb-2 ::=\n  \"y\"{2,3} [^a-c\\n]? .\na ::= (b-2)*",
        )
        .unwrap();
        let names: Vec<_> = rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["root", "b-2", "a"]);
        assert_eq!(rules[1].at, Pos { line: 3, column: 1 });
        let Expr::Alt(branches) = &rules[0].body else {
            panic!("{:?}", rules[0].body)
        };
        assert_eq!(branches[1], lit("x"));
        let Expr::Seq(items) = &rules[1].body else {
            panic!("{:?}", rules[1].body)
        };
        assert_eq!(
            items[0],
            Expr::Repeat {
                expr: Box::new(lit("y")),
                min: 2,
                max: Some(3)
            }
        );
        let Expr::Repeat { expr, .. } = &items[1] else {
            panic!()
        };
        let Expr::Class(class) = &**expr else {
            panic!()
        };
        assert!(!class.contains('b' as u32) && !class.contains(10) && class.contains('d' as u32));
    }

    #[test]
    fn escapes() {
        let rules = parse(r#"root ::= "\x41\u00e9\U0001F600\"\\\n" [\]\-\x00-\x1f]"#).unwrap();
        let Expr::Seq(items) = &rules[0].body else {
            panic!()
        };
        assert_eq!(items[0], lit("Aé😀\"\\\n"));
        let Expr::Class(class) = &items[1] else {
            panic!()
        };
        assert!(class.contains(']' as u32) && class.contains('-' as u32) && class.contains(0x1f));
    }

    #[test]
    fn errors_name_line_and_column() {
        assert_eq!(err("root ::= \"a").0, 1);
        let (line, column, message) = err("root ::= a\nb := c");
        assert_eq!((line, column), (2, 3));
        assert!(message.contains("name ::="), "{message}");
        assert!(err("::= a").2.contains("expected a rule name"));
        assert_eq!(err("root ::= [a").1, 10);
        assert_eq!(err("root ::=\n  ( a").1, 3);
        assert!(err("root ::= a{3,2}").2.contains("maximum"));
        assert!(err("root ::= \"\\q\"").2.contains("unknown escape"));
        assert!(err("root ::= [z-a]").2.contains("bad character range"));
        assert!(err("root ::= \"\\uD800\"").2.contains("scalar"));
        assert!(err("").2.contains("no rules"));
        let deep = format!("root ::= {}", "(".repeat(10_000));
        assert!(matches!(parse(&deep), Err(Error::SizeLimit { .. })));
    }
}
