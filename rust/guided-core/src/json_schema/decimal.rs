//! Exact decimal numbers, as JSON Schema compares them.
//!
//! JSON Schema bounds are mathematical: `"maximum": 0.1` means one tenth, not the double nearest to
//! it, and `1` equals `1.0`. Comparing texts of numbers of any length and any exponent against such
//! bounds needs their digits, not a float. [`Decimal`] keeps a sign, the significant digits and a
//! power of ten; it is only ever built from schema values (a handful per schema), so it favours
//! clarity over speed: digits are a `Vec<u8>` and arithmetic is schoolbook.
//!
//! Schema numbers arrive through `serde_json` without arbitrary precision: integers exactly (up to
//! 64 bits), other numbers as the shortest decimal that reads back as the same double. That
//! shortest form is what a user wrote in every practical case (`0.1` stays `0.1`); a bound with more
//! than 17 significant digits is rounded to the nearest double first.

use std::cmp::Ordering;

/// The largest decimal exponent accepted in a schema number; beyond it a bound would stand for a
/// digit string no automaton should be asked to spell.
const MAX_EXPONENT: i64 = 4096;

/// An exact decimal: `(-1)^neg * digits * 10^exp`, normalized (no leading or trailing zero digits;
/// zero has no digits and is never negative).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Decimal {
    neg: bool,
    digits: Vec<u8>,
    exp: i64,
}

impl Decimal {
    /// Zero.
    pub(crate) fn zero() -> Decimal {
        Decimal {
            neg: false,
            digits: Vec::new(),
            exp: 0,
        }
    }

    /// The integer `v`.
    pub(crate) fn from_i128(v: i128) -> Decimal {
        let neg = v < 0;
        let digits = v
            .unsigned_abs()
            .to_string()
            .bytes()
            .map(|b| b - b'0')
            .collect();
        Decimal::normalized(neg, digits, 0)
    }

    fn normalized(neg: bool, mut digits: Vec<u8>, mut exp: i64) -> Decimal {
        let lead = digits.iter().take_while(|&&d| d == 0).count();
        digits.drain(..lead);
        while digits.last() == Some(&0) {
            digits.pop();
            exp += 1;
        }
        if digits.is_empty() {
            return Decimal::zero();
        }
        Decimal { neg, digits, exp }
    }

    /// Parses a number in JSON syntax (also the exponent forms Rust and Python print for floats).
    /// `None` for anything else, or for an exponent beyond what the compiler accepts.
    pub(crate) fn parse(text: &str) -> Option<Decimal> {
        let (neg, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (int, frac) = match mantissa.find('.') {
            Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
            None => (mantissa, ""),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut exp: i64 = match exponent {
            Some(e) => {
                let v: i64 = e.parse().ok()?;
                if v.abs() > MAX_EXPONENT {
                    return None;
                }
                v
            }
            None => 0,
        };
        exp -= frac.len() as i64;
        let digits = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
        let d = Decimal::normalized(neg, digits, exp);
        if !d.is_zero() && d.magnitude().abs() > MAX_EXPONENT {
            return None;
        }
        Some(d)
    }

    /// The exact value of a `serde_json` number (see the module notes on precision).
    pub(crate) fn from_json(n: &serde_json::Number) -> Option<Decimal> {
        if let Some(u) = n.as_u64() {
            return Decimal::parse(&u.to_string());
        }
        if let Some(i) = n.as_i64() {
            return Decimal::parse(&i.to_string());
        }
        let f = n.as_f64()?;
        if !f.is_finite() {
            return None;
        }
        Decimal::parse(&format!("{f:e}"))
    }

    /// Whether this is zero.
    pub(crate) fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// Whether this is below zero.
    pub(crate) fn is_negative(&self) -> bool {
        self.neg
    }

    /// Whether this is a whole number.
    pub(crate) fn is_integer(&self) -> bool {
        self.is_zero() || self.exp >= 0
    }

    /// The absolute value.
    pub(crate) fn abs(&self) -> Decimal {
        Decimal {
            neg: false,
            ..self.clone()
        }
    }

    /// `k` with `10^k <= |self| < 10^(k+1)`; meaningless for zero.
    pub(crate) fn magnitude(&self) -> i64 {
        self.exp + self.digits.len() as i64 - 1
    }

    /// The power of ten of the last significant digit (0 for zero).
    pub(crate) fn exponent(&self) -> i64 {
        self.exp
    }

    /// The significant digits, most significant first (empty for zero).
    pub(crate) fn digits(&self) -> &[u8] {
        &self.digits
    }

    /// The digit standing at the place of `10^place` in the absolute value.
    pub(crate) fn digit_at(&self, place: i64) -> u8 {
        if self.is_zero() || place < self.exp {
            return 0;
        }
        let from_last = (place - self.exp) as usize;
        if from_last >= self.digits.len() {
            return 0;
        }
        self.digits[self.digits.len() - 1 - from_last]
    }

    /// Whether every digit at a place at or below `10^place` is zero.
    pub(crate) fn is_zero_at_or_below(&self, place: i64) -> bool {
        self.is_zero() || self.exp > place
    }

    /// This value times `10^k`.
    pub(crate) fn scaled(&self, k: i64) -> Decimal {
        if self.is_zero() {
            return self.clone();
        }
        Decimal {
            exp: self.exp + k,
            ..self.clone()
        }
    }

    /// The digits of the integer part of `|self|` followed by `frac` fraction digits, as one digit
    /// vector (truncating).
    fn aligned(&self, frac: i64) -> Vec<u8> {
        if self.is_zero() {
            return vec![0];
        }
        let top = self.magnitude().max(0);
        (-frac..=top).rev().map(|p| self.digit_at(p)).collect()
    }

    /// The largest integer not above this value.
    pub(crate) fn floor(&self) -> Decimal {
        self.round_to_integer(false)
    }

    /// The smallest integer not below this value.
    pub(crate) fn ceil(&self) -> Decimal {
        self.round_to_integer(true)
    }

    fn round_to_integer(&self, up: bool) -> Decimal {
        if self.is_integer() {
            return self.clone();
        }
        let trunc = Decimal::normalized(self.neg, self.aligned(0), 0);
        // Truncation moved toward zero; step once away from it when that is the wrong way.
        let away = up != self.neg;
        if away {
            trunc.add_integer(if self.neg { -1 } else { 1 })
        } else {
            trunc
        }
    }

    /// This integer plus `delta` (-1 or 1); `self` must be a whole number.
    pub(crate) fn add_integer(&self, delta: i8) -> Decimal {
        debug_assert!(self.is_integer());
        let toward_zero = (delta < 0) != self.neg;
        if self.is_zero() {
            return Decimal::from_i128(delta as i128);
        }
        let mut mag = self.aligned(0);
        if toward_zero {
            // |self| >= 1 here, so the magnitude stays non-negative.
            let mut i = mag.len();
            while i > 0 {
                i -= 1;
                if mag[i] > 0 {
                    mag[i] -= 1;
                    break;
                }
                mag[i] = 9;
            }
        } else {
            let mut i = mag.len();
            loop {
                if i == 0 {
                    mag.insert(0, 1);
                    break;
                }
                i -= 1;
                if mag[i] < 9 {
                    mag[i] += 1;
                    break;
                }
                mag[i] = 0;
            }
        }
        Decimal::normalized(self.neg, mag, 0)
    }

    /// The value as an integer times `10^scale`, if that is a whole number that fits.
    pub(crate) fn to_scaled_i128(&self, scale: i64) -> Option<i128> {
        let s = self.scaled(scale);
        if !s.is_integer() {
            return None;
        }
        if s.is_zero() {
            return Some(0);
        }
        if s.magnitude() > 36 {
            return None;
        }
        let mut v: i128 = 0;
        for d in s.aligned(0) {
            v = v.checked_mul(10)?.checked_add(d as i128)?;
        }
        Some(if s.neg { -v } else { v })
    }

    /// The shortest plain (exponent-free) text of this value, e.g. `-12.5`, `0.001`, `300`.
    pub(crate) fn to_plain(&self) -> String {
        if self.is_zero() {
            return "0".to_string();
        }
        let mut s = String::new();
        if self.neg {
            s.push('-');
        }
        let top = self.magnitude().max(0);
        for p in (0..=top).rev() {
            s.push((b'0' + self.digit_at(p)) as char);
        }
        if self.exp < 0 {
            s.push('.');
            for p in (self.exp..0).rev() {
                s.push((b'0' + self.digit_at(p)) as char);
            }
        }
        s
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.is_zero(), other.is_zero()) {
            (true, true) => return Ordering::Equal,
            (true, false) => {
                return if other.neg {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            (false, true) => {
                return if self.neg {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            _ => {}
        }
        if self.neg != other.neg {
            return if self.neg {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let abs = self.magnitude().cmp(&other.magnitude()).then_with(|| {
            let top = self.magnitude();
            let bottom = self.exp.min(other.exp);
            (bottom..=top)
                .rev()
                .map(|p| self.digit_at(p).cmp(&other.digit_at(p)))
                .find(|o| *o != Ordering::Equal)
                .unwrap_or(Ordering::Equal)
        });
        if self.neg {
            abs.reverse()
        } else {
            abs
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        Decimal::parse(s).unwrap()
    }

    #[test]
    fn parse_normalizes() {
        assert_eq!(d("1.50"), d("15e-1"));
        assert_eq!(d("-0.0"), Decimal::zero());
        assert_eq!(d("1e3").to_plain(), "1000");
        assert_eq!(d("-0.00125").to_plain(), "-0.00125");
        assert_eq!(d("100").magnitude(), 2);
        assert_eq!(d("0.05").magnitude(), -2);
        assert!(Decimal::parse("1e99999").is_none());
        assert!(Decimal::parse("abc").is_none() && Decimal::parse(".").is_none());
    }

    #[test]
    fn ordering_matches_floats() {
        let vals = [
            "-10", "-1.5", "-1", "-0.5", "0", "0.001", "0.5", "1", "1.25", "2", "10", "1e3",
        ];
        for (i, a) in vals.iter().enumerate() {
            for (j, b) in vals.iter().enumerate() {
                assert_eq!(d(a).cmp(&d(b)), i.cmp(&j), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn rounding() {
        assert_eq!(d("2.5").floor(), d("2"));
        assert_eq!(d("2.5").ceil(), d("3"));
        assert_eq!(d("-2.5").floor(), d("-3"));
        assert_eq!(d("-2.5").ceil(), d("-2"));
        assert_eq!(d("-0.5").ceil(), Decimal::zero());
        assert_eq!(d("9.9").ceil(), d("10"));
        assert_eq!(d("100").add_integer(-1), d("99"));
        assert_eq!(d("-1").add_integer(1), Decimal::zero());
        assert_eq!(d("-1").add_integer(-1), d("-2"));
        assert_eq!(d("0").add_integer(-1), d("-1"));
    }

    #[test]
    fn from_json_numbers() {
        let v: serde_json::Value =
            serde_json::from_str("[0.1, 18446744073709551615, -7, 1e300]").unwrap();
        let got: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                Decimal::from_json(n.as_number().unwrap())
                    .unwrap()
                    .to_plain()
            })
            .collect();
        assert_eq!(got[0], "0.1");
        assert_eq!(got[1], "18446744073709551615");
        assert_eq!(got[2], "-7");
        assert_eq!(got[3].len(), 301);
    }
}
