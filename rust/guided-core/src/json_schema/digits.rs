//! Fixed-width digit strings whose value lies in a range.
//!
//! Two places need "the strings of exactly `w` digits in base `b` whose value is between `lo` and
//! `hi`": the four hex digits of a JSON `\uXXXX` escape (for a class of code points, in either
//! letter case) and the fixed-length pieces of dates and numbers. The classic construction splits
//! the range at the leading digit: the part sharing `lo`'s leading digit, a middle block where every
//! later digit is free, and the part sharing `hi`'s leading digit, recursing on the first and last.
//! A range therefore costs at most `2w - 1` digit sequences, each a concatenation of `w` classes,
//! which keeps escape-heavy string languages linear in the number of code-point ranges rather than
//! in the number of code points.

use crate::regex::{ClassSet, Hir};

/// How a digit value `d` of the base is written: the code points that spell it.
pub(crate) type DigitSpelling = fn(u32) -> &'static [char];

/// Decimal digits spell themselves.
pub(crate) fn decimal_digit(d: u32) -> &'static [char] {
    const D: [[char; 1]; 10] = [
        ['0'],
        ['1'],
        ['2'],
        ['3'],
        ['4'],
        ['5'],
        ['6'],
        ['7'],
        ['8'],
        ['9'],
    ];
    &D[d as usize % 10]
}

/// Hex digits are case-insensitive: `a` and `A` both spell 10.
pub(crate) fn hex_digit(d: u32) -> &'static [char] {
    const H: [&[char]; 16] = [
        &['0'],
        &['1'],
        &['2'],
        &['3'],
        &['4'],
        &['5'],
        &['6'],
        &['7'],
        &['8'],
        &['9'],
        &['a', 'A'],
        &['b', 'B'],
        &['c', 'C'],
        &['d', 'D'],
        &['e', 'E'],
        &['f', 'F'],
    ];
    H[d as usize % 16]
}

/// The class of code points spelling any digit value in `lo..=hi`.
pub(crate) fn digit_class(lo: u32, hi: u32, spell: DigitSpelling) -> Hir {
    let ranges = (lo..=hi).flat_map(|d| spell(d).iter().map(|&c| (c as u32, c as u32)));
    Hir::class(ClassSet::from_ranges(ranges))
}

/// Strings of exactly `width` digits in `base` whose value is in `lo..=hi` (leading zeros
/// included: the width is fixed). Matches nothing when `lo > hi`; the caller keeps
/// `hi < base^width`.
pub(crate) fn fixed_width_range(
    lo: u64,
    hi: u64,
    width: u32,
    base: u64,
    spell: DigitSpelling,
) -> Hir {
    if lo > hi {
        return Hir::nothing();
    }
    if width == 0 {
        return Hir::Empty;
    }
    let place = base.pow(width - 1);
    let (lo_d, hi_d) = (lo / place, hi / place);
    let (lo_rest, hi_rest) = (lo % place, hi % place);
    let full = |w: u32| Hir::repeat(digit_class(0, (base - 1) as u32, spell), w, Some(w));
    if lo_d == hi_d {
        return Hir::concat([
            digit_class(lo_d as u32, lo_d as u32, spell),
            fixed_width_range(lo_rest, hi_rest, width - 1, base, spell),
        ]);
    }
    let mut alts = Vec::new();
    // The leading digits whose whole block of continuations is in range.
    let mid_lo = if lo_rest == 0 { lo_d } else { lo_d + 1 };
    // lo_d < hi_d here, so hi_d >= 1.
    let mid_hi = if hi_rest == place - 1 { hi_d } else { hi_d - 1 };
    if lo_rest != 0 {
        alts.push(Hir::concat([
            digit_class(lo_d as u32, lo_d as u32, spell),
            fixed_width_range(lo_rest, place - 1, width - 1, base, spell),
        ]));
    }
    if mid_lo <= mid_hi {
        alts.push(Hir::concat([
            digit_class(mid_lo as u32, mid_hi as u32, spell),
            full(width - 1),
        ]));
    }
    if hi_rest != place - 1 {
        alts.push(Hir::concat([
            digit_class(hi_d as u32, hi_d as u32, spell),
            fixed_width_range(0, hi_rest, width - 1, base, spell),
        ]));
    }
    Hir::alternation(alts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_schema::matcher::matches;

    #[test]
    fn decimal_ranges_are_exact() {
        for (lo, hi) in [
            (0u64, 999u64),
            (5, 5),
            (7, 342),
            (100, 199),
            (99, 100),
            (0, 0),
            (123, 987),
        ] {
            let h = fixed_width_range(lo, hi, 3, 10, decimal_digit);
            for v in 0..1000u64 {
                let s = format!("{v:03}");
                assert_eq!(
                    matches(&h, &s),
                    (lo..=hi).contains(&v),
                    "{lo}..={hi} on {s}: {h}"
                );
            }
        }
    }

    #[test]
    fn hex_ranges_accept_both_cases() {
        let h = fixed_width_range(0x7f, 0xd7ff, 4, 16, hex_digit);
        for (s, ok) in [
            ("007f", true),
            ("00FF", true),
            ("d7Ff", true),
            ("d800", false),
            ("007e", false),
        ] {
            assert_eq!(matches(&h, s), ok, "{s}");
        }
        for v in (0..0x10000u64).step_by(97) {
            let s = format!("{v:04X}");
            assert_eq!(matches(&h, &s), (0x7f..=0xd7ff).contains(&v), "{s}");
        }
    }
}
