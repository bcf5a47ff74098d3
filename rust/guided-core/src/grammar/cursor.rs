//! A cursor over grammar text: the position, the line and column it stands at, errors that name
//! them, and the `\`-escapes the grammar syntaxes share.
//!
//! Grammar text is read as code points, so that columns are what an editor shows; the line starts
//! are found once, and a position's line is a binary search among them.

use super::ast::Pos;
use crate::error::{Error, Result};
use crate::regex::MAX_CODE_POINT;

/// Grammar text being read.
pub(super) struct Cursor {
    /// The text, as code points.
    pub(super) chars: Vec<char>,
    /// The next code point to read.
    pub(super) pos: usize,
    line_starts: Vec<usize>,
}

impl Cursor {
    pub(super) fn new(text: &str) -> Cursor {
        let chars: Vec<char> = text.chars().collect();
        let line_starts = std::iter::once(0)
            .chain(
                chars
                    .iter()
                    .enumerate()
                    .filter(|&(_, &c)| c == '\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        Cursor {
            chars,
            pos: 0,
            line_starts,
        }
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    pub(super) fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    pub(super) fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    pub(super) fn eat(&mut self, s: &str) -> bool {
        let matches = s
            .chars()
            .enumerate()
            .all(|(i, c)| self.peek_at(i) == Some(c));
        if matches {
            self.pos += s.chars().count();
        }
        matches
    }

    pub(super) fn pos_of(&self, index: usize) -> Pos {
        let line = self.line_starts.partition_point(|&start| start <= index);
        let column = index - self.line_starts[line - 1] + 1;
        Pos {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
        }
    }

    pub(super) fn here(&self) -> Pos {
        self.pos_of(self.pos)
    }

    pub(super) fn error(&self, index: usize, message: impl Into<String>) -> Error {
        let at = self.pos_of(index);
        Error::GrammarSyntax {
            line: at.line,
            column: at.column,
            message: message.into(),
        }
    }

    /// A `\`-escape in a literal or a class, as one character.
    pub(super) fn escape(&mut self) -> Result<char> {
        let start = self.pos;
        self.pos += 1;
        let Some(c) = self.peek() else {
            return Err(self.error(start, "unfinished escape at the end of the grammar"));
        };
        self.pos += 1;
        let code_point = match c {
            'n' => 0x0A,
            't' => 0x09,
            'r' => 0x0D,
            'f' => 0x0C,
            'v' => 0x0B,
            'a' => 0x07,
            'b' => 0x08,
            'e' => 0x1B,
            '0' => 0,
            'x' => self.hex(start, 2)?,
            'u' => self.hex(start, 4)?,
            'U' => self.hex(start, 8)?,
            c if c.is_ascii_alphanumeric() => {
                return Err(self.error(start, format!("unknown escape `\\{c}`")));
            }
            c => c as u32,
        };
        char::from_u32(code_point).ok_or_else(|| {
            self.error(
                start,
                format!("escape value {code_point:#x} is not a Unicode scalar value"),
            )
        })
    }

    pub(super) fn hex(&mut self, start: usize, digits: usize) -> Result<u32> {
        let mut v: u32 = 0;
        for _ in 0..digits {
            let Some(d) = self.peek().and_then(|c| c.to_digit(16)) else {
                return Err(self.error(start, format!("expected {digits} hex digits")));
            };
            v = v.saturating_mul(16).saturating_add(d);
            self.pos += 1;
        }
        if v > MAX_CODE_POINT {
            return Err(self.error(start, format!("escape value {v:#x} is not a code point")));
        }
        Ok(v)
    }
}
