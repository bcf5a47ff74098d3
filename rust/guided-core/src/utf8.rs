//! Code-point ranges to sequences of byte ranges.
//!
//! The automata in this crate read bytes, but patterns speak of characters: `[a-ü]`, `\p{Greek}`,
//! `.`. This module is the bridge. Given an inclusive range of code points it returns a list of
//! byte-range sequences, for example `[C3][A0-BC]`, such that the set of byte strings those
//! sequences match (one byte from each range, in order) is exactly the set of UTF-8 encodings of
//! the Unicode scalar values in the range. Nothing more: surrogates (`D800..=DFFF`) have no UTF-8
//! encoding and are dropped, and no sequence admits an overlong or otherwise invalid encoding.
//!
//! A range of code points does not map to a single rectangle of byte ranges, because UTF-8 is a
//! positional encoding with a variable length. `U+0000..=U+FFFF` contains one-, two- and three-byte
//! encodings; `U+0800..=U+0FFF` and `U+1000..=U+FFFF` share a length but not the same rules for the
//! second byte (overlong forms). The splitting therefore happens in three passes over a small
//! stack of pending ranges, the same way RE2 and regex-syntax do it:
//!
//! 1. cut around the surrogate block, which is simply removed;
//! 2. cut where the encoded length changes (`7F`, `7FF`, `FFFF`);
//! 3. cut wherever a range starts or ends in the middle of a block of continuation bytes: a
//!    sequence `[E1-E2][80-BF][80-BF]` is only right when the range covers every continuation
//!    under both lead bytes, so a range that starts at `U+1005` is first cut into `U+1005..=U+103F`
//!    and the rest, and so on for each continuation position.
//!
//! Once a range survives all three without being cut, its first and last code points encode to the
//! same length and differ only in a prefix of "whole" positions, so the byte-wise ranges between the
//! two encodings are exact.
//!
//! Sequences come out in increasing order of the code points they cover, which lets the NFA
//! compiler build a minimal trie of them incrementally (sorted input is what makes the incremental
//! minimal-acyclic-automaton construction work). The cost is small: a range yields at most a
//! couple of dozen sequences of at most four ranges each, and the work is proportional to that
//! output.

use crate::regex::MAX_CODE_POINT;

/// An inclusive range of bytes, one position of a UTF-8 byte-range sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Utf8Range {
    /// Smallest byte matched.
    pub start: u8,
    /// Largest byte matched.
    pub end: u8,
}

impl Utf8Range {
    /// Whether `byte` lies in the range.
    pub fn contains(self, byte: u8) -> bool {
        self.start <= byte && byte <= self.end
    }
}

/// Byte-range sequences whose concatenations are exactly the UTF-8 encodings of the scalar values
/// in `lo..=hi`, in increasing code-point order.
///
/// Values above `U+10FFFF` are clipped; surrogates are skipped. An empty range, or one holding only
/// surrogates, yields an empty list.
pub fn utf8_sequences(lo: u32, hi: u32) -> Vec<Vec<Utf8Range>> {
    let mut out = Vec::new();
    let hi = hi.min(MAX_CODE_POINT);
    if lo > hi {
        return out;
    }
    // The stack holds ranges still to be cut, the next one to emit on top, so the output is sorted.
    let mut stack = vec![(lo, hi)];
    'pending: while let Some((s, e)) = stack.pop() {
        // Surrogates have no encoding: keep the parts on either side.
        if s <= 0xDFFF && e >= 0xD800 {
            if e > 0xDFFF {
                stack.push((0xE000, e));
            }
            if s < 0xD800 {
                stack.push((s, 0xD7FF));
            }
            continue;
        }
        // Each piece must encode to a single length.
        for boundary in [0x7F, 0x7FF, 0xFFFF] {
            if s <= boundary && e > boundary {
                stack.push((boundary + 1, e));
                stack.push((s, boundary));
                continue 'pending;
            }
        }
        if e <= 0x7F {
            out.push(vec![Utf8Range {
                start: s as u8,
                end: e as u8,
            }]);
            continue;
        }
        // Each trailing position must either be whole (every continuation byte) or be the only
        // position where `s` and `e` differ.
        for i in 1..4 {
            let max = (1u32 << (6 * i)) - 1;
            if s & !max != e & !max {
                if s & max != 0 {
                    stack.push(((s | max) + 1, e));
                    stack.push((s, s | max));
                    continue 'pending;
                }
                if e & max != max {
                    stack.push((e & !max, e));
                    stack.push((s, (e & !max) - 1));
                    continue 'pending;
                }
            }
        }
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        let n = encode(s, &mut a);
        let m = encode(e, &mut b);
        debug_assert_eq!(n, m);
        out.push(
            a[..n]
                .iter()
                .zip(&b[..n])
                .map(|(&start, &end)| Utf8Range { start, end })
                .collect(),
        );
    }
    out
}

/// Encodes a non-surrogate code point at most `U+10FFFF`, returning its length.
fn encode(c: u32, buf: &mut [u8; 4]) -> usize {
    match char::from_u32(c) {
        Some(ch) => ch.encode_utf8(buf).len(),
        // Callers remove surrogates and clip the range first; an out-of-domain value would be a
        // bug here, and encoding nothing makes it visible in the tests rather than a panic.
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Calls `f` on every byte string `seq` matches.
    fn for_each_string(seq: &[Utf8Range], buf: &mut Vec<u8>, f: &mut impl FnMut(&[u8])) {
        match seq.split_first() {
            None => f(buf),
            Some((r, rest)) => {
                for b in r.start..=r.end {
                    buf.push(b);
                    for_each_string(rest, buf, f);
                    buf.pop();
                }
            }
        }
    }

    /// Checks the contract for `lo..=hi` by enumerating every string every sequence matches:
    /// each is valid UTF-8 for one scalar value in the range, and each such value is hit once.
    fn check_exhaustively(lo: u32, hi: u32) {
        let seqs = utf8_sequences(lo, hi);
        let mut hits = vec![0u8; MAX_CODE_POINT as usize + 1];
        let mut buf = Vec::with_capacity(4);
        for seq in &seqs {
            assert!(!seq.is_empty() && seq.len() <= 4, "{seq:?}");
            assert!(seq.iter().all(|r| r.start <= r.end), "{seq:?}");
            for_each_string(seq, &mut buf, &mut |s| {
                let text = std::str::from_utf8(s)
                    .unwrap_or_else(|_| panic!("{seq:?} matches invalid UTF-8 {s:02X?}"));
                let mut chars = text.chars();
                let c = chars.next().map(|c| c as u32);
                assert!(chars.next().is_none(), "{seq:?} matches two characters");
                let c = c.unwrap_or_else(|| panic!("{seq:?} matches the empty string"));
                assert!(
                    lo <= c && c <= hi,
                    "{seq:?} matches U+{c:X} outside {lo:X}..={hi:X}"
                );
                hits[c as usize] += 1;
            });
        }
        for c in 0..=MAX_CODE_POINT {
            let expected = u8::from(lo <= c && c <= hi && !(0xD800..=0xDFFF).contains(&c));
            assert_eq!(hits[c as usize], expected, "U+{c:X} in {lo:X}..={hi:X}");
        }
        // Sorted, so the NFA compiler can share prefixes incrementally.
        for w in seqs.windows(2) {
            let first =
                |s: &Vec<Utf8Range>| (s.len(), s.iter().map(|r| r.start).collect::<Vec<_>>());
            assert!(first(&w[0]) < first(&w[1]), "{:?} before {:?}", w[0], w[1]);
        }
    }

    /// Matches `bytes` against the sequences by brute force.
    fn matched_by(seqs: &[Vec<Utf8Range>], bytes: &[u8]) -> usize {
        seqs.iter()
            .filter(|seq| {
                seq.len() == bytes.len() && seq.iter().zip(bytes).all(|(r, &b)| r.contains(b))
            })
            .count()
    }

    #[test]
    fn every_code_point_in_the_full_range() {
        check_exhaustively(0, MAX_CODE_POINT);
    }

    #[test]
    fn every_code_point_alone() {
        let mut buf = [0u8; 4];
        for c in 0..=MAX_CODE_POINT {
            let seqs = utf8_sequences(c, c);
            match char::from_u32(c) {
                None => assert!(seqs.is_empty(), "surrogate U+{c:X} gave {seqs:?}"),
                Some(ch) => {
                    let enc = ch.encode_utf8(&mut buf).as_bytes();
                    assert_eq!(seqs.len(), 1, "U+{c:X}");
                    assert!(seqs[0].iter().all(|r| r.start == r.end));
                    assert_eq!(matched_by(&seqs, enc), 1, "U+{c:X}");
                }
            }
        }
    }

    #[test]
    fn ranges_between_encoding_boundaries() {
        let points = [
            0, 0x41, 0x7F, 0x80, 0x3FF, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF, 0xD800, 0xDBFF,
            0xDFFF, 0xE000, 0xFFFF, 0x10000, 0x3FFFF, 0x40000, 0x10FFFF,
        ];
        for (i, &lo) in points.iter().enumerate() {
            for &hi in &points[i..] {
                check_exhaustively(lo, hi);
            }
        }
    }

    #[test]
    fn edge_cases() {
        assert!(utf8_sequences(5, 4).is_empty());
        assert!(utf8_sequences(0xD800, 0xDFFF).is_empty());
        assert!(utf8_sequences(0x110000, 0x1FFFFF).is_empty());
        assert_eq!(
            utf8_sequences(0x10FFFF, u32::MAX),
            utf8_sequences(0x10FFFF, 0x10FFFF)
        );
        let r = |start, end| Utf8Range { start, end };
        assert_eq!(utf8_sequences(0, 0x7F), vec![vec![r(0, 0x7F)]]);
        assert_eq!(
            utf8_sequences(0x80, 0x7FF),
            vec![vec![r(0xC2, 0xDF), r(0x80, 0xBF)]]
        );
        assert_eq!(
            utf8_sequences(0xE000, 0xFFFF),
            vec![vec![r(0xEE, 0xEF), r(0x80, 0xBF), r(0x80, 0xBF)]]
        );
        // The three-byte range around the surrogates needs the E0 (no overlongs) and ED (no
        // surrogates) lead bytes on their own.
        assert_eq!(
            utf8_sequences(0x800, 0xFFFF),
            vec![
                vec![r(0xE0, 0xE0), r(0xA0, 0xBF), r(0x80, 0xBF)],
                vec![r(0xE1, 0xEC), r(0x80, 0xBF), r(0x80, 0xBF)],
                vec![r(0xED, 0xED), r(0x80, 0x9F), r(0x80, 0xBF)],
                vec![r(0xEE, 0xEF), r(0x80, 0xBF), r(0x80, 0xBF)],
            ]
        );
    }

    /// Random byte strings of one to four bytes, biased towards plausible UTF-8.
    fn byte_string() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<char>().prop_map(|c| c.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 1..=4),
            proptest::collection::vec(0x80u8..=0xF4, 1..=4),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_ranges_match_brute_force(
            a in 0u32..=0x11_0000,
            b in 0u32..=0x11_0000,
            probes in proptest::collection::vec(byte_string(), 64),
        ) {
            let (lo, hi) = (a.min(b), a.max(b));
            let seqs = utf8_sequences(lo, hi);
            for bytes in probes {
                let expected = match std::str::from_utf8(&bytes) {
                    Ok(s) => {
                        let mut it = s.chars();
                        match (it.next(), it.next()) {
                            (Some(c), None) => lo <= c as u32 && c as u32 <= hi,
                            _ => false,
                        }
                    }
                    Err(_) => false,
                };
                prop_assert_eq!(matched_by(&seqs, &bytes), usize::from(expected), "{:02X?} in {:X}..={:X}", bytes, lo, hi);
            }
            // The endpoints themselves, when they are scalar values.
            for c in [lo, hi, lo.saturating_add(1), hi.saturating_sub(1)] {
                if let Some(ch) = char::from_u32(c) {
                    let enc = ch.to_string().into_bytes();
                    prop_assert_eq!(matched_by(&seqs, &enc), usize::from(lo <= c && c <= hi));
                }
            }
        }
    }
}
