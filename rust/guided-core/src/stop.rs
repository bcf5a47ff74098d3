//! Stop strings over token ids: where each token's bytes can sit inside each stop string.
//!
//! An engine that stops on a string usually decodes the tail of every sequence after every step
//! and searches it. That is a device-to-host copy, a detokenization and a string search per row
//! per step, and decoding to `str` is lossy: a token that ends halfway through a multi-byte
//! character decodes to U+FFFD, so `"é"` split over two byte tokens is never found. This module
//! moves all of the string work to one precomputation over the vocabulary, so that the per-step
//! check is a handful of gathers over token ids that runs on the device.
//!
//! The check (Transformers' `StopStringCriteria` describes the same idea over decoded text; here it
//! runs over the tokens' bytes) walks back from the newest token. A stop string `s` of `m` bytes is
//! found when it occurs in the text with its last byte inside the newest token: a match that ends
//! earlier was there a step ago, and a match that cannot reach the newest token never will. So:
//!
//! * the newest token must hold the *end* of `s`: either `s` lies wholly inside it, or the token
//!   starts with the last `o < m` bytes of `s` (an end overlap `o`). [`StopTable::ends`] marks,
//!   per token, which overlaps `o` in `1..=m` it allows;
//! * each token before it must then sit exactly where the match continues: with `p` bytes of `s`
//!   already matched after it (`1 <= p < m`), the token's bytes must equal the `s` bytes that end
//!   `p` from the end of `s`, or, if the token is longer than what remains, end with the first
//!   `m - p` bytes of `s` (the match starts inside it). [`StopTable::inside`] marks, per token,
//!   which `p` it allows;
//! * walking back, `p` grows by each token's length; the match is complete when it reaches `m`.
//!
//! A caller that trims the text needs to know *where* the string ended. With an overlap `o < m`
//! it ended `o` bytes into the newest token; when the whole string lies inside the token,
//! [`StopTable::first_ends`] holds where its first occurrence there ends. The earliest such end
//! over the strings that match is where the text stops ([`StopTable::find_at_end`]).
//!
//! Everything is bytes, so a code point split between tokens is no different from any other byte
//! boundary. A token with no bytes (a special token) holds no part of any stop string and breaks a
//! match that would run across it: it is not text.
//!
//! Layout: the stop strings' positions are columns, `m` per string, string after string
//! ([`StopTable::offsets`]). Column `offset + o - 1` of `ends` says "overlap `o` allowed" and column
//! `offset + p - 1` of `inside` says "`p` bytes may follow"; a string's last `inside` column is
//! always empty. Only tokens with at least one mark get a table row; [`StopTable::slots`] maps every
//! token id to its row, row 0 being all empty. A stop string of common letters marks a few thousand
//! tokens, so the tables stay small (rows times total stop-string bytes, twice), and both the number
//! of columns and the table size have limits that raise [`Error::SizeLimit`].
//!
//! Cost of the build: per token and stop string, one substring search and a few comparisons at the
//! positions where the token's first or last byte occurs in the string: tens of milliseconds for a
//! 200k-token vocabulary.

use crate::error::{Error, Result};
use crate::vocab::Vocabulary;
use rayon::prelude::*;

/// Default limit on the total bytes of the stop strings of one table.
pub const DEFAULT_MAX_STOP_BYTES: usize = 4096;
/// Default limit on the bytes of the two tables together.
pub const DEFAULT_MAX_TABLE_BYTES: usize = 256 << 20;

/// Where each token's bytes can sit inside each of a set of stop strings (see the module notes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopTable {
    strings: Vec<Vec<u8>>,
    offsets: Vec<usize>,
    slots: Vec<u32>,
    lengths: Vec<u32>,
    ends: Vec<bool>,
    inside: Vec<bool>,
    first_ends: Vec<u32>,
}

/// Where a stop string ended in the newest token: see [`StopTable::find_at_end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopMatch {
    /// The index of the stop string.
    pub string: usize,
    /// How many bytes of the newest token the text keeps up to the string's last byte.
    pub end: usize,
}

impl StopTable {
    /// Compiles `strings` against every token of `vocab` (ids up to `vocab.vocab_size()`).
    ///
    /// Empty strings are refused: the empty string occurs everywhere and would stop every row at
    /// once. `max_stop_bytes` bounds the total bytes of the strings, `max_table_bytes` the size of
    /// the two tables.
    pub fn new(
        vocab: &Vocabulary,
        strings: &[Vec<u8>],
        max_stop_bytes: usize,
        max_table_bytes: usize,
    ) -> Result<Self> {
        if let Some(i) = strings.iter().position(|s| s.is_empty()) {
            return Err(Error::Invalid(format!(
                "stop string {i} is empty; an empty stop string would match everywhere"
            )));
        }
        let width: usize = strings.iter().map(Vec::len).sum();
        if width > max_stop_bytes {
            return Err(Error::size_limit("max_stop_bytes", width, max_stop_bytes));
        }
        let mut offsets = Vec::with_capacity(strings.len() + 1);
        offsets.push(0);
        for s in strings {
            offsets.push(offsets.last().copied().unwrap_or(0) + s.len());
        }
        let indexes: Vec<ByteIndex> = strings.iter().map(|s| ByteIndex::new(s)).collect();

        let vocab_size = vocab.vocab_size();
        let mut lengths = vec![0u32; vocab_size];
        for (id, bytes) in vocab.text_tokens() {
            lengths[id as usize] = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        }
        // Marks are found in parallel as short lists of columns (a token marks a few), so that
        // the table size is known, and checked, before the dense tables are allocated.
        let tokens: Vec<(u32, &[u8])> = vocab.text_tokens().collect();
        let chunks: Vec<Vec<Marks>> = tokens
            .par_chunks(4096)
            .map(|chunk| {
                let mut row_ends = vec![false; width];
                let mut row_inside = vec![false; width];
                let mut found = Vec::new();
                for &(id, bytes) in chunk {
                    row_ends.fill(false);
                    row_inside.fill(false);
                    let mut marked = false;
                    let mut first_ends = Vec::new();
                    for (i, ((s, index), &offset)) in
                        strings.iter().zip(&indexes).zip(&offsets).enumerate()
                    {
                        let columns = offset..offset + s.len();
                        marked |= mark_ends(bytes, s, index, &mut row_ends[columns.clone()]);
                        marked |= mark_inside(bytes, s, index, &mut row_inside[columns]);
                        if let Some(end) = first_end(bytes, s) {
                            // invariant: a token's length is far below u32::MAX.
                            first_ends.push((i as u32, end as u32));
                        }
                    }
                    if marked {
                        let set = |row: &[bool]| -> Vec<u32> {
                            // invariant: width <= max_stop_bytes, far below u32::MAX.
                            (0..width).filter(|&c| row[c]).map(|c| c as u32).collect()
                        };
                        found.push(Marks {
                            id,
                            ends: set(&row_ends),
                            inside: set(&row_inside),
                            first_ends,
                        });
                    }
                }
                found
            })
            .collect();
        let rows = 1 + chunks.iter().map(Vec::len).sum::<usize>();
        let table_bytes = rows.saturating_mul(width).saturating_mul(2);
        if table_bytes > max_table_bytes {
            return Err(Error::size_limit(
                "max_table_bytes",
                table_bytes,
                max_table_bytes,
            ));
        }
        let mut slots = vec![0u32; vocab_size];
        let mut ends = vec![false; rows * width];
        let mut inside = vec![false; rows * width];
        let mut first_ends = vec![0u32; rows * strings.len()];
        for (row, marks) in chunks.iter().flatten().enumerate().map(|(i, m)| (i + 1, m)) {
            // invariant: rows <= vocab_size + 1 <= MAX_VOCAB_SIZE + 1, far below u32::MAX.
            slots[marks.id as usize] = row as u32;
            for &c in &marks.ends {
                ends[row * width + c as usize] = true;
            }
            for &c in &marks.inside {
                inside[row * width + c as usize] = true;
            }
            for &(i, end) in &marks.first_ends {
                first_ends[row * strings.len() + i as usize] = end;
            }
        }
        Ok(StopTable {
            strings: strings.to_vec(),
            offsets,
            slots,
            lengths,
            ends,
            inside,
            first_ends,
        })
    }

    /// The stop strings, in the order given.
    pub fn strings(&self) -> &[Vec<u8>] {
        &self.strings
    }

    /// Column offsets: string `i` owns columns `offsets[i]..offsets[i + 1]` (one entry more than
    /// there are strings).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Total columns: the stop strings' bytes summed.
    pub fn width(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// Table rows, the empty row 0 included.
    pub fn rows(&self) -> usize {
        self.ends.len().checked_div(self.width()).unwrap_or(1)
    }

    /// Per token id, its row in [`Self::ends`] and [`Self::inside`] (0: no marks).
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// Per token id, its length in bytes (0 for tokens without bytes).
    pub fn lengths(&self) -> &[u32] {
        &self.lengths
    }

    /// Row-major `[rows, width]`: column `offsets[i] + o - 1` is set when the token may hold the
    /// end of string `i` with `o` of its bytes (`o = m`: the whole string lies inside the token).
    pub fn ends(&self) -> &[bool] {
        &self.ends
    }

    /// Row-major `[rows, width]`: column `offsets[i] + p - 1` is set when the token may sit in
    /// string `i` with `p` of the string's bytes after it (`1 <= p < m`).
    pub fn inside(&self) -> &[bool] {
        &self.inside
    }

    /// Row-major `[rows, strings]`: where the first occurrence of string `i` wholly inside the
    /// token ends (bytes of the token up to and including its last byte), 0 when there is none.
    pub fn first_ends(&self) -> &[u32] {
        &self.first_ends
    }

    /// Bytes the tables and the per-token arrays hold.
    pub fn memory_bytes(&self) -> usize {
        self.ends.len()
            + self.inside.len()
            + 4 * (self.slots.len() + self.lengths.len() + self.first_ends.len())
    }

    /// The host form of the device check: the index of the first stop string that occurs in the
    /// text of `tokens` with its last byte inside the last token, if any.
    ///
    /// Ids outside the vocabulary count as tokens without bytes.
    pub fn stop_at_end(&self, tokens: &[u32]) -> Option<usize> {
        (0..self.strings.len()).find(|&i| self.end_of(i, tokens).is_some())
    }

    /// Where the text of `tokens` stops: among the stop strings that occur with their last byte
    /// inside the last token, the one that ends earliest there (the lower index on a tie), and
    /// how many bytes of the last token come up to its end. The caller keeps the text up to
    /// there, or `end - len(string)` bytes into the token to drop the string too.
    pub fn find_at_end(&self, tokens: &[u32]) -> Option<StopMatch> {
        (0..self.strings.len())
            .filter_map(|string| {
                Some(StopMatch {
                    string,
                    end: self.end_of(string, tokens)?,
                })
            })
            .min_by_key(|found| (found.end, found.string))
    }

    /// The earliest end of string `i` inside the last token of `tokens`, if it stops there.
    fn end_of(&self, i: usize, tokens: &[u32]) -> Option<usize> {
        let (&last, before) = tokens.split_last()?;
        let width = self.width();
        let slot = |id: u32| self.slots.get(id as usize).map_or(0, |&r| r as usize);
        let length = |id: u32| self.lengths.get(id as usize).map_or(0, |&n| n as usize);
        let (offset, m) = (self.offsets[i], self.strings[i].len());
        let ends = slot(last) * width + offset;
        // Overlaps below m end where they say; m means the string lies inside the token.
        (1..=m).find_map(|o| {
            if !self.ends[ends + o - 1] {
                return None;
            }
            let mut matched = o;
            for &id in before.iter().rev() {
                if matched >= m || !self.inside[slot(id) * width + offset + matched - 1] {
                    break;
                }
                matched += length(id);
            }
            (matched >= m).then(|| {
                if o < m {
                    o
                } else {
                    self.first_ends[slot(last) * self.strings.len() + i] as usize
                }
            })
        })
    }
}

/// The columns one token marks in each table, and where strings inside it first end.
struct Marks {
    id: u32,
    ends: Vec<u32>,
    inside: Vec<u32>,
    first_ends: Vec<(u32, u32)>,
}

/// Where the first occurrence of `s` wholly inside `b` ends, if any.
fn first_end(b: &[u8], s: &[u8]) -> Option<usize> {
    (b.len() >= s.len())
        .then(|| b.windows(s.len()).position(|w| w == s))
        .flatten()
        .map(|start| start + s.len())
}

/// Positions of each byte value in a stop string, to try only the alignments where a token's
/// first or last byte fits.
struct ByteIndex {
    positions: Vec<Vec<u32>>,
}

impl ByteIndex {
    fn new(s: &[u8]) -> Self {
        let mut positions = vec![Vec::new(); 256];
        for (i, &b) in s.iter().enumerate() {
            // invariant: stop strings are bounded by max_stop_bytes, far below u32::MAX.
            positions[b as usize].push(i as u32);
        }
        ByteIndex { positions }
    }

    fn of(&self, byte: u8) -> &[u32] {
        &self.positions[byte as usize]
    }
}

/// Marks the end overlaps of token `b` with stop string `s` in `row` (column `o - 1` for overlap
/// `o`); returns whether any was marked.
fn mark_ends(b: &[u8], s: &[u8], index: &ByteIndex, row: &mut [bool]) -> bool {
    let m = s.len();
    let mut marked = false;
    // The token starts with the last o < m bytes of s: its first byte sits at s[m - o].
    if let Some(&first) = b.first() {
        for &i in index.of(first) {
            let o = m - i as usize;
            if o < m && o <= b.len() && b[..o] == s[i as usize..] {
                row[o - 1] = true;
                marked = true;
            }
        }
    }
    // The whole of s lies inside the token.
    if b.len() >= m && b.windows(m).any(|w| w == s) {
        row[m - 1] = true;
        marked = true;
    }
    marked
}

/// Marks where token `b` can sit inside stop string `s` with `p` bytes of `s` after it, in `row`
/// (column `p - 1`, `1 <= p < m`); returns whether any was marked.
fn mark_inside(b: &[u8], s: &[u8], index: &ByteIndex, row: &mut [bool]) -> bool {
    let m = s.len();
    let n = b.len();
    let mut marked = false;
    let Some(&last) = b.last() else {
        return false;
    };
    // The token's last byte is s[j - 1], so it ends at s index j and p = m - j bytes follow.
    for &i in index.of(last) {
        let j = i as usize + 1;
        if j >= m {
            continue;
        }
        let fits = if n <= j {
            s[j - n..j] == *b
        } else {
            // The match starts inside the token: its last j bytes are s's first j.
            b[n - j..] == s[..j]
        };
        if fits {
            row[m - j - 1] = true;
            marked = true;
        }
    }
    marked
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vocab(tokens: &[&[u8]]) -> Vocabulary {
        let owned: Vec<Option<Vec<u8>>> = tokens
            .iter()
            .map(|t| (!t.is_empty()).then(|| t.to_vec()))
            .collect();
        Vocabulary::new(owned, vec![], None).unwrap()
    }

    fn table(v: &Vocabulary, strings: &[&[u8]]) -> StopTable {
        let strings: Vec<Vec<u8>> = strings.iter().map(|s| s.to_vec()).collect();
        StopTable::new(v, &strings, DEFAULT_MAX_STOP_BYTES, DEFAULT_MAX_TABLE_BYTES).unwrap()
    }

    /// The text of `tokens` cut at the last token without bytes (it is not text), and where the
    /// last token's bytes start in it; `None` when the last token has no bytes.
    fn text_of(v: &Vocabulary, tokens: &[u32]) -> Option<(Vec<u8>, usize)> {
        let (&last, before) = tokens.split_last()?;
        let last_bytes = v.token_bytes(last)?;
        let mut text = Vec::new();
        for &id in before.iter().rev() {
            match v.token_bytes(id) {
                Some(b) => text.splice(0..0, b.iter().copied()),
                None => break,
            };
        }
        let start = text.len();
        text.extend_from_slice(last_bytes);
        Some((text, start))
    }

    /// The definition: some stop string occurs in the text with its last byte in the last token.
    fn brute_force(v: &Vocabulary, strings: &[&[u8]], tokens: &[u32]) -> Option<usize> {
        let (text, start) = text_of(v, tokens)?;
        strings.iter().position(|s| {
            (1..=text.len())
                .filter(|&end| end > start && end >= s.len())
                .any(|end| &text[end - s.len()..end] == *s)
        })
    }

    /// The definition of where the text stops: the earliest end of any string inside the last
    /// token (the lower index on a tie), counted in the last token's bytes.
    fn brute_force_end(v: &Vocabulary, strings: &[&[u8]], tokens: &[u32]) -> Option<StopMatch> {
        let (text, start) = text_of(v, tokens)?;
        (start + 1..=text.len())
            .flat_map(|end| (0..strings.len()).map(move |i| (end, i)))
            .find(|&(end, i)| {
                end >= strings[i].len() && text[end - strings[i].len()..end] == *strings[i]
            })
            .map(|(end, string)| StopMatch {
                string,
                end: end - start,
            })
    }

    #[test]
    fn where_the_text_stops() {
        let v = vocab(&[b"EN", b"DE", b"xENDyEND", b"EN", b"D", b"ND", b"E"]);
        let t = table(&v, &[b"END", b"NDy"]);
        // "EN" + "DE": the string ends one byte into "DE".
        assert_eq!(
            t.find_at_end(&[0, 1]),
            Some(StopMatch { string: 0, end: 1 })
        );
        // Inside one token: the first occurrence counts.
        assert_eq!(t.find_at_end(&[2]), Some(StopMatch { string: 0, end: 4 }));
        // "E" + "ND": ends exactly at the token's end.
        assert_eq!(
            t.find_at_end(&[6, 5]),
            Some(StopMatch { string: 0, end: 2 })
        );
        assert_eq!(
            t.find_at_end(&[0, 4]),
            Some(StopMatch { string: 0, end: 1 })
        );
        assert_eq!(t.find_at_end(&[1]), None);
    }

    #[test]
    fn the_documented_examples() {
        let v = vocab(&[
            b"st", b"op", b"stop", b"opera", b"sto", b"pper", b"las", b"topper", b"s", b"to",
            b"pped", b"at", b"tion",
        ]);
        let t = table(&v, &[b"stop"]);
        let id = |s: &[u8]| {
            (0..v.len() as u32)
                .find(|&i| v.token_bytes(i) == Some(s))
                .unwrap()
        };
        let ids = |words: &[&[u8]]| words.iter().map(|w| id(w)).collect::<Vec<_>>();
        for hit in [
            &[&b"st"[..], b"op"][..],
            &[b"stop"],
            &[b"st", b"opera"],
            &[b"sto", b"pper"],
            &[b"las", b"topper"],
            &[b"s", b"to", b"pped"],
        ] {
            assert_eq!(t.stop_at_end(&ids(hit)), Some(0), "{hit:?}");
        }
        for miss in [
            &[&b"stop"[..], b"at"][..],
            &[b"st", b"op", b"at"],
            &[b"st", b"opera", b"tion"],
        ] {
            assert_eq!(t.stop_at_end(&ids(miss)), None, "{miss:?}");
        }
    }

    #[test]
    fn a_code_point_split_between_tokens_still_stops() {
        // "é" is C3 A9; the tokens split it.
        let v = vocab(&[b"caf", b"\xc3", b"\xa9", b"caf\xc3", b"\xa9!"]);
        let t = table(&v, &["é".as_bytes()]);
        assert_eq!(t.stop_at_end(&[0, 1, 2]), Some(0));
        assert_eq!(t.stop_at_end(&[3, 4]), Some(0));
        assert_eq!(t.stop_at_end(&[0, 1]), None);
        assert_eq!(t.stop_at_end(&[1, 1, 2, 0]), None);
    }

    #[test]
    fn tokens_without_bytes_break_a_match() {
        let v = vocab(&[b"ab", b"", b"c"]);
        let t = table(&v, &[b"abc"]);
        assert_eq!(t.stop_at_end(&[0, 2]), Some(0));
        assert_eq!(t.stop_at_end(&[0, 1, 2]), None);
        assert_eq!(t.stop_at_end(&[0, 1]), None);
        // Ids beyond the vocabulary are not text either.
        assert_eq!(t.stop_at_end(&[0, 99, 2]), None);
    }

    #[test]
    fn tables_mark_only_what_fits() {
        let v = vocab(&[b"xab", b"cd", b"abcdab", b"b", b"q"]);
        let t = table(&v, &[b"abc", b"d"]);
        assert_eq!(t.width(), 4);
        assert_eq!(t.offsets(), &[0, 3, 4]);
        let row = |id: usize| t.slots()[id] as usize * t.width();
        let ends = |id: usize| t.ends()[row(id)..row(id) + 4].to_vec();
        let inside = |id: usize| t.inside()[row(id)..row(id) + 4].to_vec();
        // "xab": no end of "abc" (it does not start with "c" or "bc"); sits before "c" (p = 1).
        assert_eq!(ends(0), [false, false, false, false]);
        assert_eq!(inside(0), [true, false, false, false]);
        // "cd": starts with "c" (overlap 1 of "abc"), contains "d".
        assert_eq!(ends(1), [true, false, false, true]);
        // "abcdab": contains "abc" and "d"; ends with "ab", which can precede "c".
        assert_eq!(ends(2), [false, false, true, true]);
        assert_eq!(inside(2), [true, false, false, false]);
        // "b": ends "abc"? no. Sits with "c" after it (p = 1); never inside "d".
        assert_eq!(inside(3), [true, false, false, false]);
        assert_eq!(t.slots()[4], 0);
        assert_eq!(t.lengths(), &[3, 2, 6, 1, 1]);
        assert_eq!(t.rows(), 5);
    }

    #[test]
    fn limits_and_bad_strings_are_errors() {
        let v = vocab(&[b"a", b"b"]);
        let empty = StopTable::new(&v, &[b"a".to_vec(), vec![]], 10, 1000);
        assert!(matches!(empty, Err(Error::Invalid(_))));
        let long = StopTable::new(&v, &[b"abcdef".to_vec()], 5, 1000);
        assert!(
            matches!(long, Err(Error::SizeLimit { ref limit, .. }) if limit == "max_stop_bytes")
        );
        let big = StopTable::new(&v, &[b"ab".to_vec()], 10, 6);
        assert!(
            matches!(big, Err(Error::SizeLimit { ref limit, .. }) if limit == "max_table_bytes")
        );
    }

    fn small_bytes() -> impl Strategy<Value = Vec<u8>> {
        // A tiny alphabet, with UTF-8 lead and continuation bytes, so that overlaps are common.
        proptest::collection::vec(
            prop_oneof![Just(b'a'), Just(b'b'), Just(0xc3), Just(0xa9)],
            1..5,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn equals_the_definition(
            tokens in proptest::collection::vec(proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0xc3), Just(0xa9)], 0..4), 1..12),
            strings in proptest::collection::vec(small_bytes(), 1..4),
            sequence in proptest::collection::vec(0u32..14, 1..10),
        ) {
            let refs: Vec<&[u8]> = tokens.iter().map(Vec::as_slice).collect();
            let v = vocab(&refs);
            let s: Vec<&[u8]> = strings.iter().map(Vec::as_slice).collect();
            let t = table(&v, &s);
            // Some ids run past the vocabulary on purpose.
            let expected = brute_force(&v, &s, &sequence);
            let got = t.stop_at_end(&sequence);
            // Several strings may match; both must agree on whether one does, and the one
            // reported must match.
            prop_assert_eq!(got.is_some(), expected.is_some());
            if let Some(i) = got {
                prop_assert!(brute_force(&v, &s[i..=i], &sequence).is_some());
            }
            prop_assert_eq!(t.find_at_end(&sequence), brute_force_end(&v, &s, &sequence));
        }
    }
}
