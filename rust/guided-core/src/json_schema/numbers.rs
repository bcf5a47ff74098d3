//! Number languages: the JSON texts of the numbers inside bounds, integral or not, multiples of a
//! step.
//!
//! A bound on a number is a bound on the value the text denotes, and JSON writes one value many
//! ways. The policy (documented in the crate's schema notes) admits, at every location alike:
//! plain texts `-?(0|[1-9][0-9]*)(\.[0-9]+)?` with any number of trailing fraction zeros, and, where
//! the location allows exponents, normalized exponent texts `-?[1-9](\.[0-9]{1,16})?[eE][+-]?[0-9]+`
//! (one non-zero digit before the point, at most 17 significant digits: exactly what Python's
//! `json.dumps` and JavaScript print for a double). Integers are the values with no fractional part,
//! so `3`, `3.0`, `3.00` and `3e+16`-style texts whose digits all fall left of the point are all
//! integers; the generator can spell integral exponent texts, but the compiler writes integers
//! plainly (a location where `integer` or `multipleOf` applies admits no exponent texts at all),
//! because the integral exponent texts cost some 175 automaton states per integer field for a form
//! no model writes. Every language built here is closed under the policy of its location: it
//! contains every admitted text of every value it admits, which is what lets the compiler intersect
//! and complement number languages without losing exactness.
//!
//! Comparing a text's value against a bound is a comparison of aligned digit streams: among plain
//! texts with `n` integer digits, the value order is the lexicographic order of the digits read
//! from the leading place down, missing fraction digits reading as zeros. So the texts above a
//! bound are generated left to right staying "tight" on the bound's digits, and a digit that leaves
//! the bound behind frees the rest of the text (the construction that turns `[lo, hi]` over
//! integers into digit ranges, carried into the fraction). With both bounds tight the tree of
//! alternatives stays linear in the length of the bounds. Exponent texts are the same mantissa
//! problem once the exponent is fixed: the exponent of a normalized text is the magnitude of its
//! value, so exponents strictly between the bounds' magnitudes admit any mantissa, the two boundary
//! exponents admit mantissas compared digit by digit, and the exponent itself is a (signed,
//! zero-padded) integer range.
//!
//! `multipleOf` is regular over plain texts: a step `k = P / 10^t` divides `x` exactly when `x`
//! has no non-zero digit beyond the `t`-th fraction place and `x * 10^t` is divisible by `P`. Steps
//! that are powers of ten (`0.01`, `1`) become a fraction rule inside the same generator. Other
//! steps inside a bounded range with few multiples become the list of those multiples. The rest
//! read digits through a residue automaton (about `P * (t + 2)` states before minimization, syntax
//! checked as it reads, `P` at most 4096), carried into the expression as an automaton
//! ([`Hir::automaton`]) and intersected with the bounds when there are any. It stays an automaton
//! all the way to the NFA, which embeds it as it is: its shortest expression (by state
//! elimination) is exponential in the number of residues for steps with large odd factors, so only
//! printing the pattern pays that, under the pattern's size limit. With a step in force a location admits no exponent texts, because divisibility of an exponent text's
//! value is not something a small automaton can read.

use super::decimal::Decimal;
use super::digits::{decimal_digit, digit_class};
use super::elimination::SmallDfa;
use crate::error::{Error, Result};
use crate::regex::Hir;

/// The most significant digits an exponent text's mantissa may carry (17, what doubles print).
const MAX_MANTISSA_FRACTION: usize = 16;

/// At most this many multiples of a step in a bounded range are listed one by one.
const MAX_LISTED_MULTIPLES: i128 = 1024;

/// A bound on a value: the value and whether it is exclusive.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Bound {
    /// The bounding value.
    pub(crate) value: Decimal,
    /// Whether the bound itself is excluded.
    pub(crate) strict: bool,
}

/// What a location asks of its numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct NumberSpec {
    /// Only whole values.
    pub(crate) integer: bool,
    /// Lower bound.
    pub(crate) lo: Option<Bound>,
    /// Upper bound.
    pub(crate) hi: Option<Bound>,
    /// The value must be a multiple of this (positive) step.
    pub(crate) multiple_of: Option<Decimal>,
    /// Whether exponent texts are admitted at this location.
    pub(crate) exponents: bool,
}

/// The texts written as integers, `-?(0|[1-9][0-9]*)`: no fraction digits, no exponent. Draft 4
/// reads `integer` as this spelling (see `drafts`).
pub(crate) fn integer_spelling() -> Hir {
    Hir::concat([
        Hir::optional(Hir::literal("-")),
        Hir::alternation([
            Hir::literal("0"),
            Hir::concat([
                digit_class(1, 9, decimal_digit),
                Hir::repeat(digit_class(0, 9, decimal_digit), 0, None),
            ]),
        ]),
    ])
}

/// The texts of the numbers `spec` admits. `Err` names `multipleOf` when the step's residue
/// automaton would be too large.
pub(crate) fn number_language(spec: &NumberSpec) -> Result<Hir> {
    let mut lo = spec.lo.clone();
    let mut hi = spec.hi.clone();
    let mut step = spec.multiple_of.clone();
    if spec.integer {
        lo = lo.map(|b| Bound {
            value: if b.strict {
                b.value.floor().add_integer(1)
            } else {
                b.value.ceil()
            },
            strict: false,
        });
        hi = hi.map(|b| Bound {
            value: if b.strict {
                b.value.ceil().add_integer(-1)
            } else {
                b.value.floor()
            },
            strict: false,
        });
        step = Some(match step {
            Some(k) => lcm_with_one(&k)?,
            None => Decimal::from_i128(1),
        });
    }
    if let (Some(l), Some(h)) = (&lo, &hi) {
        if l.value > h.value || (l.value == h.value && (l.strict || h.strict)) {
            return Ok(Hir::nothing());
        }
    }
    // A step that is a power of ten is a rule on the fraction digits.
    let mut zero_from: Option<usize> = None;
    if let Some(k) = &step {
        if k.digits() == [1] && k.exponent() <= 0 {
            zero_from = Some((-k.exponent()) as usize);
            step = None;
        }
    }
    let exponents = spec.exponents && spec.multiple_of.is_none();
    let residue = match &step {
        None => None,
        Some(k) => {
            if let Some(listed) = list_multiples(k, lo.as_ref(), hi.as_ref())? {
                return Ok(listed);
            }
            Some(residue_language(k)?)
        }
    };
    let (pos, neg) = split_by_sign(lo.as_ref(), hi.as_ref());
    let side = |range: Option<(Bound, Option<Bound>)>| -> Hir {
        let Some((mlo, mhi)) = range else {
            return Hir::nothing();
        };
        let mut alts = vec![plain_magnitudes(&mlo, mhi.as_ref(), zero_from, None)];
        if exponents {
            alts.push(exponent_magnitudes(&mlo, mhi.as_ref(), spec.integer));
        }
        let body = Hir::alternation(alts);
        match &residue {
            // Without bounds the residue language (which checks the syntax too) is the language.
            Some(r)
                if !body.is_nothing() && mlo.value.is_zero() && !mlo.strict && mhi.is_none() =>
            {
                r.clone()
            }
            Some(r) if !body.is_nothing() => Hir::intersection([body, r.clone()]),
            _ => body,
        }
    };
    let neg = side(neg);
    let pos = side(pos);
    Ok(Hir::alternation([
        if neg.is_nothing() {
            neg
        } else {
            Hir::concat([Hir::literal("-"), neg])
        },
        pos,
    ]))
}

/// The magnitude ranges of the non-negative and the negative texts (the latter written after a
/// `-`, zero included as `-0`), each as (lower, upper) bounds on the magnitude; `None` when a sign
/// admits nothing.
#[allow(clippy::type_complexity)]
fn split_by_sign(
    lo: Option<&Bound>,
    hi: Option<&Bound>,
) -> (
    Option<(Bound, Option<Bound>)>,
    Option<(Bound, Option<Bound>)>,
) {
    let zero = || Bound {
        value: Decimal::zero(),
        strict: false,
    };
    // Non-negative values.
    let pos = (|| {
        if let Some(h) = hi {
            if h.value.is_negative() || (h.value.is_zero() && h.strict) {
                return None;
            }
        }
        let mlo = match lo {
            Some(l) if !l.value.is_negative() => l.clone(),
            _ => zero(),
        };
        Some((mlo, hi.cloned()))
    })();
    // Non-positive values, as magnitudes.
    let neg = (|| {
        if let Some(l) = lo {
            if (!l.value.is_negative() && !l.value.is_zero()) || (l.value.is_zero() && l.strict) {
                return None;
            }
        }
        let mlo = match hi {
            Some(h) if h.value.is_negative() || h.value.is_zero() => Bound {
                value: h.value.abs(),
                strict: h.strict,
            },
            _ => zero(),
        };
        let mhi = lo.map(|l| Bound {
            value: l.value.abs(),
            strict: l.strict,
        });
        Some((mlo, mhi))
    })();
    (pos, neg)
}

/// The smallest positive multiple of both `k` and 1.
fn lcm_with_one(k: &Decimal) -> Result<Decimal> {
    if k.is_integer() {
        return Ok(k.clone());
    }
    // k = P / 10^t with P integral: lcm(P/10^t, 10^t/10^t) = lcm(P, 10^t) / 10^t.
    let t = -k.exponent();
    let p = k
        .to_scaled_i128(t)
        .ok_or_else(|| unsupported_step(k, "the step has too many digits"))?;
    let ten_t = 10i128
        .checked_pow(t as u32)
        .ok_or_else(|| unsupported_step(k, "the step has too many digits"))?;
    let l = p / gcd(p, ten_t) * ten_t;
    Ok(Decimal::from_i128(l).scaled(-t))
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

fn unsupported_step(k: &Decimal, why: &str) -> Error {
    Error::UnsupportedSchema {
        keyword: "multipleOf".into(),
        pointer: String::new(),
        message: format!("multipleOf {}: {why}", k.to_plain()),
    }
}

/// The multiples of `k` inside a bounded range, listed with every plain text of each, when there
/// are few of them; `None` when the range is unbounded or holds too many.
fn list_multiples(k: &Decimal, lo: Option<&Bound>, hi: Option<&Bound>) -> Result<Option<Hir>> {
    let (Some(lo), Some(hi)) = (lo, hi) else {
        return Ok(None);
    };
    let scale = -[k.exponent(), lo.value.exponent(), hi.value.exponent()]
        .into_iter()
        .min()
        .unwrap_or(0)
        .min(0);
    let (Some(ki), Some(li), Some(hi_i)) = (
        k.to_scaled_i128(scale),
        lo.value.to_scaled_i128(scale),
        hi.value.to_scaled_i128(scale),
    ) else {
        return Ok(None);
    };
    // First and last multiplier inside the range, honouring exclusivity.
    let first = {
        let q = li.div_euclid(ki);
        let q = if q * ki < li { q + 1 } else { q };
        if lo.strict && q * ki == li {
            q + 1
        } else {
            q
        }
    };
    let last = {
        let q = hi_i.div_euclid(ki);
        if hi.strict && q * ki == hi_i {
            q - 1
        } else {
            q
        }
    };
    if last < first {
        return Ok(Some(Hir::nothing()));
    }
    if last - first >= MAX_LISTED_MULTIPLES {
        return Ok(None);
    }
    let mut alts = Vec::new();
    for m in first..=last {
        let v = Decimal::from_i128(m * ki).scaled(-scale);
        alts.push(plain_texts_of(&v));
    }
    Ok(Some(Hir::alternation(alts)))
}

/// Every plain text of the value `v` (`3`, `3.0`, `3.00`, ...; `-0` for zero too).
pub(crate) fn plain_texts_of(v: &Decimal) -> Hir {
    let text = v.abs().to_plain();
    let zeros = Hir::repeat(Hir::literal("0"), 0, None);
    let body = if v.is_integer() {
        Hir::concat([
            Hir::literal(&text),
            Hir::optional(Hir::concat([
                Hir::literal("."),
                Hir::repeat(Hir::literal("0"), 1, None),
            ])),
        ])
    } else {
        Hir::concat([Hir::literal(&text), zeros])
    };
    if v.is_zero() {
        Hir::concat([Hir::optional(Hir::literal("-")), body])
    } else if v.is_negative() {
        Hir::concat([Hir::literal("-"), body])
    } else {
        body
    }
}

/// Every text of `v` under the policy, exponent texts included when `exponents`.
pub(crate) fn texts_of(v: &Decimal, exponents: bool) -> Hir {
    let bound = Bound {
        value: v.clone(),
        strict: false,
    };
    let spec = NumberSpec {
        integer: false,
        lo: Some(bound.clone()),
        hi: Some(bound),
        multiple_of: None,
        exponents,
    };
    // No step, so the only error path (multipleOf) cannot be taken.
    number_language(&spec).unwrap_or_else(|_| plain_texts_of(v))
}

/// How the digits of a mantissa or plain magnitude may be laid out.
#[derive(Clone, Copy)]
struct Layout {
    /// Exactly this many integer digits.
    n_int: usize,
    /// The first integer digit is 1-9.
    first_nonzero: bool,
    /// At most this many fraction digits.
    max_frac: Option<usize>,
    /// Fraction digits at this index and beyond must be `0`.
    zero_from: Option<usize>,
}

/// A bound the digits generated so far equal digit for digit.
#[derive(Clone, Copy)]
struct Tight<'a> {
    b: &'a Decimal,
    strict: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tail {
    Any,
    Zeros,
    NonZero,
}

fn any_digit() -> Hir {
    digit_class(0, 9, decimal_digit)
}

fn digit(d: u32) -> Hir {
    digit_class(d, d, decimal_digit)
}

impl Layout {
    /// Place value (power of ten) of stream index `i`.
    fn place(&self, i: usize) -> i64 {
        self.n_int as i64 - 1 - i as i64
    }

    /// The digits that may stand at stream index `i`; `None` past the last fraction digit.
    fn digits_at(&self, i: usize) -> Option<(u32, u32)> {
        if i < self.n_int {
            return Some(if i == 0 && self.first_nonzero {
                (1, 9)
            } else {
                (0, 9)
            });
        }
        let j = i - self.n_int;
        if self.max_frac.is_some_and(|m| j >= m) {
            return None;
        }
        Some(if self.zero_from.is_some_and(|z| j >= z) {
            (0, 0)
        } else {
            (0, 9)
        })
    }

    /// Texts from stream index `i` on whose value, with the digits before `i` equal to the tight
    /// bounds' digits, stays inside the bounds.
    fn gen(&self, i: usize, lo: Option<Tight<'_>>, hi: Option<Tight<'_>>) -> Hir {
        let place = self.place(i);
        let exhausted = |t: &Tight<'_>| t.b.is_zero_at_or_below(place);
        // Equal so far to a bound with nothing left: a lower one is met unless strict.
        let lo = lo.filter(|t| !exhausted(t) || t.strict);
        if let Some(h) = hi {
            if exhausted(&h) {
                return if h.strict || lo.is_some() {
                    Hir::nothing()
                } else {
                    self.tail(i, Tail::Zeros)
                };
            }
        }
        match (lo, hi) {
            (None, None) => return self.tail(i, Tail::Any),
            (Some(l), None) if exhausted(&l) => return self.tail(i, Tail::NonZero),
            _ => {}
        }
        let mut alts = Vec::new();
        if i >= self.n_int && lo.is_none() {
            // Ending here leaves the value below a tight upper bound with digits still to come.
            alts.push(Hir::Empty);
        }
        if let Some((a, b)) = self.digits_at(i) {
            let dot = if i == self.n_int {
                Hir::literal(".")
            } else {
                Hir::Empty
            };
            let l = lo.map(|t| t.b.digit_at(place) as u32);
            let h = hi.map(|t| t.b.digit_at(place) as u32);
            let free_lo = l.map_or(a, |l| a.max(l + 1));
            let free_hi = match h {
                Some(0) => None,
                Some(h) => Some(b.min(h - 1)),
                None => Some(b),
            };
            if let Some(free_hi) = free_hi {
                if free_lo <= free_hi {
                    alts.push(Hir::concat([
                        dot.clone(),
                        digit_class(free_lo, free_hi, decimal_digit),
                        self.tail(i + 1, Tail::Any),
                    ]));
                }
            }
            let within = |d: u32| a <= d && d <= b;
            match (l, h) {
                (Some(l), Some(h)) if l == h => {
                    if within(l) {
                        alts.push(Hir::concat([
                            dot.clone(),
                            digit(l),
                            self.gen(i + 1, lo, hi),
                        ]));
                    }
                }
                _ => {
                    if let Some(l) = l.filter(|&l| within(l)) {
                        alts.push(Hir::concat([
                            dot.clone(),
                            digit(l),
                            self.gen(i + 1, lo, None),
                        ]));
                    }
                    if let Some(h) = h.filter(|&h| within(h)) {
                        alts.push(Hir::concat([dot, digit(h), self.gen(i + 1, None, hi)]));
                    }
                }
            }
        }
        Hir::alternation(alts)
    }

    /// The optional fraction part after the integer digits, with no bound to respect.
    fn fraction(&self) -> Hir {
        self.tail(self.n_int, Tail::Any)
    }

    /// Texts from stream index `i` on with no bound left to respect: any digits (`Any`), only zeros
    /// (`Zeros`), or at least one non-zero digit (`NonZero`).
    fn tail(&self, i: usize, kind: Tail) -> Hir {
        if i < self.n_int {
            let rest = self.n_int - i;
            let int_digits = |k: usize| -> Hir {
                // The first digit of the whole text may be restricted to 1-9.
                if i == 0 && self.first_nonzero && k > 0 {
                    Hir::concat([
                        digit_class(1, 9, decimal_digit),
                        Hir::repeat(any_digit(), k as u32 - 1, Some(k as u32 - 1)),
                    ])
                } else {
                    Hir::repeat(any_digit(), k as u32, Some(k as u32))
                }
            };
            return match kind {
                Tail::Any => Hir::concat([int_digits(rest), self.tail(self.n_int, Tail::Any)]),
                Tail::Zeros => {
                    if i == 0 && self.first_nonzero {
                        return Hir::nothing();
                    }
                    Hir::concat([
                        Hir::repeat(digit(0), rest as u32, Some(rest as u32)),
                        self.tail(self.n_int, Tail::Zeros),
                    ])
                }
                Tail::NonZero => {
                    if i == 0 && self.first_nonzero {
                        return self.tail(i, Tail::Any);
                    }
                    // The first non-zero digit is the k-th integer digit, or in the fraction.
                    let mut alts = Vec::new();
                    for k in 0..rest {
                        alts.push(Hir::concat([
                            Hir::repeat(digit(0), k as u32, Some(k as u32)),
                            digit_class(1, 9, decimal_digit),
                            Hir::repeat(
                                any_digit(),
                                (rest - k - 1) as u32,
                                Some((rest - k - 1) as u32),
                            ),
                            self.tail(self.n_int, Tail::Any),
                        ]));
                    }
                    alts.push(Hir::concat([
                        Hir::repeat(digit(0), rest as u32, Some(rest as u32)),
                        self.tail(self.n_int, Tail::NonZero),
                    ]));
                    Hir::alternation(alts)
                }
            };
        }
        let j = i - self.n_int;
        let started = i > self.n_int;
        let body = self.frac_tail(j, if started { 0 } else { 1 }, kind);
        if started {
            body
        } else if kind == Tail::NonZero {
            Hir::concat([Hir::literal("."), body])
        } else {
            Hir::optional(Hir::concat([Hir::literal("."), body]))
        }
    }

    /// Fraction digits from index `j` on, at least `min_len` of them.
    fn frac_tail(&self, j: usize, min_len: usize, kind: Tail) -> Hir {
        let room = self.max_frac.map(|m| m.saturating_sub(j));
        let free = self.zero_from.map(|z| z.saturating_sub(j));
        let rep =
            |h: Hir, lo: usize, hi: Option<usize>| Hir::repeat(h, lo as u32, hi.map(|x| x as u32));
        match kind {
            Tail::Zeros => rep(digit(0), min_len, room),
            Tail::Any => match free {
                None => rep(any_digit(), min_len, room),
                Some(p) => {
                    let p = room.map_or(p, |r| p.min(r));
                    let rest = room.map(|r| r - p);
                    Hir::alternation([
                        rep(any_digit(), min_len, Some(p)),
                        if rest == Some(0) {
                            Hir::nothing()
                        } else {
                            Hir::concat([rep(any_digit(), p, Some(p)), rep(digit(0), 1, rest)])
                        },
                    ])
                }
            },
            Tail::NonZero => {
                // Non-zero digits may stand only before the zero-only region and within room.
                let slots = match (free, room) {
                    (Some(p), Some(r)) => Some(p.min(r)),
                    (Some(p), None) => Some(p),
                    (None, r) => r,
                };
                match slots {
                    None => Hir::concat([
                        rep(digit(0), 0, None),
                        digit_class(1, 9, decimal_digit),
                        rep(any_digit(), 0, None),
                    ]),
                    Some(s) => {
                        let mut alts = Vec::new();
                        for k in 0..s {
                            alts.push(Hir::concat([
                                rep(digit(0), k, Some(k)),
                                digit_class(1, 9, decimal_digit),
                                self.frac_tail(j + k + 1, 0, Tail::Any),
                            ]));
                        }
                        Hir::alternation(alts)
                    }
                }
            }
        }
    }
}

/// Plain texts (no sign) of magnitudes in `[lo, hi]`; `hi = None` is unbounded. `zero_from`
/// forces fraction digits from that index on to be zero; `max_frac` caps their number.
fn plain_magnitudes(
    lo: &Bound,
    hi: Option<&Bound>,
    zero_from: Option<usize>,
    max_frac: Option<usize>,
) -> Hir {
    let lo_active = !lo.value.is_zero() || lo.strict;
    // Integer-digit counts that can reach the bounds.
    let n_of = |v: &Decimal| -> usize {
        if v.is_zero() || v.magnitude() < 0 {
            1
        } else {
            v.magnitude() as usize + 1
        }
    };
    let n_min = if lo_active { n_of(&lo.value) } else { 1 };
    let n_max = hi.map(|h| n_of(&h.value));
    if n_max.is_some_and(|m| m < n_min) {
        return Hir::nothing();
    }
    let layout = |n: usize| Layout {
        n_int: n,
        first_nonzero: n > 1,
        max_frac,
        zero_from,
    };
    fn tight(b: &Bound) -> Tight<'_> {
        Tight {
            b: &b.value,
            strict: b.strict,
        }
    }
    let mut alts = Vec::new();
    let mut free_from = n_min;
    if lo_active || n_max == Some(n_min) {
        let hi_t = hi.filter(|_| n_max == Some(n_min)).map(tight);
        let lo_t = if lo_active { Some(tight(lo)) } else { None };
        alts.push(layout(n_min).gen(0, lo_t, hi_t));
        free_from = n_min + 1;
    }
    let free_to = match n_max {
        Some(m) if m > n_min => {
            alts.push(layout(m).gen(0, None, hi.map(tight)));
            Some(m - 1)
        }
        Some(_) => Some(n_min.saturating_sub(1)),
        None => None,
    };
    if free_to.is_none_or(|t| free_from <= t) {
        // Every integer-digit count in free_from..=free_to, with any digits.
        let mut lens = Vec::new();
        let mut from = free_from;
        if from == 1 {
            lens.push(any_digit());
            from = 2;
        }
        if free_to.is_none_or(|t| from <= t) {
            lens.push(Hir::concat([
                digit_class(1, 9, decimal_digit),
                Hir::repeat(
                    any_digit(),
                    (from - 1) as u32,
                    free_to.map(|t| (t - 1) as u32),
                ),
            ]));
        }
        // The fraction rules do not depend on the integer part's length.
        alts.push(Hir::concat([
            Hir::alternation(lens),
            layout(free_from).fraction(),
        ]));
    }
    Hir::alternation(alts)
}

/// Normalized exponent texts (no sign) of magnitudes in `[lo, hi]`.
fn exponent_magnitudes(lo: &Bound, hi: Option<&Bound>, integer: bool) -> Hir {
    // Every normalized text is non-zero, so a zero lower bound only matters through strictness,
    // which non-zero values always meet.
    let lo_active = !lo.value.is_zero();
    if hi.is_some_and(|h| h.value.is_zero()) {
        return Hir::nothing();
    }
    let mut e_min: Option<i64> = lo_active.then(|| lo.value.magnitude());
    let e_max: Option<i64> = hi.map(|h| h.value.magnitude());
    if integer {
        // A normalized text with a negative exponent lies strictly between 0 and 1.
        e_min = Some(e_min.map_or(0, |e| e.max(0)));
    }
    if let (Some(a), Some(b)) = (e_min, e_max) {
        if a > b {
            return Hir::nothing();
        }
    }
    let mantissa = |e: i64, lo_t: bool, hi_t: bool| -> Hir {
        let zero_from = if integer && e < MAX_MANTISSA_FRACTION as i64 {
            Some(e as usize)
        } else {
            None
        };
        let layout = Layout {
            n_int: 1,
            first_nonzero: true,
            max_frac: Some(MAX_MANTISSA_FRACTION),
            zero_from,
        };
        let lo_s = lo.value.scaled(-e);
        let hi_s = hi.map(|h| h.value.scaled(-e));
        let lo_tight = (lo_t && lo_active).then_some(Tight {
            b: &lo_s,
            strict: lo.strict,
        });
        let hi_tight = match (&hi_s, hi) {
            (Some(v), Some(h)) if hi_t => Some(Tight {
                b: v,
                strict: h.strict,
            }),
            _ => None,
        };
        layout.gen(0, lo_tight, hi_tight)
    };
    // Exponents that need their own mantissa language: the bounds' magnitudes, and for integers
    // each exponent below the mantissa's fraction room.
    let mut special: Vec<i64> = Vec::new();
    if lo_active {
        special.extend(e_min);
    }
    special.extend(e_max);
    if integer {
        let from = e_min.unwrap_or(0).max(0);
        let to = e_max.map_or(MAX_MANTISSA_FRACTION as i64 - 1, |b| {
            b.min(MAX_MANTISSA_FRACTION as i64 - 1)
        });
        special.extend(from..=to);
    }
    special.sort_unstable();
    special.dedup();
    special.retain(|&e| e_min.is_none_or(|a| e >= a) && e_max.is_none_or(|b| e <= b));
    let mut alts = Vec::new();
    for &e in &special {
        let m = mantissa(e, lo_active && Some(e) == e_min, Some(e) == e_max);
        alts.push(Hir::concat([m, exponent_text(Some(e), Some(e))]));
    }
    // The gaps between special exponents take any mantissa.
    let free = Layout {
        n_int: 1,
        first_nonzero: true,
        max_frac: Some(MAX_MANTISSA_FRACTION),
        zero_from: None,
    }
    .tail(0, Tail::Any);
    let mut gaps: Vec<(Option<i64>, Option<i64>)> = Vec::new();
    let mut cursor: Option<i64> = e_min;
    for &e in &special {
        let gap_hi = e - 1;
        if cursor.is_none_or(|c| c <= gap_hi) {
            gaps.push((cursor, Some(gap_hi)));
        }
        cursor = Some(e + 1);
    }
    if e_max.is_none_or(|b| cursor.is_none_or(|c| c <= b)) {
        gaps.push((cursor, e_max));
    }
    for (a, b) in gaps {
        alts.push(Hir::concat([free.clone(), exponent_text(a, b)]));
    }
    Hir::alternation(alts)
}

/// `[eE]` and a signed, possibly zero-padded exponent in `lo..=hi` (`None`: unbounded).
fn exponent_text(lo: Option<i64>, hi: Option<i64>) -> Hir {
    let canonical = |a: i64, b: Option<i64>| -> Hir {
        // Canonical digits of the non-negative integers a..=b, then allow leading zeros.
        let lo = Bound {
            value: Decimal::from_i128(a as i128),
            strict: false,
        };
        let hi = b.map(|b| Bound {
            value: Decimal::from_i128(b as i128),
            strict: false,
        });
        plain_magnitudes(&lo, hi.as_ref(), Some(0), Some(0))
    };
    let zeros = || Hir::repeat(Hir::literal("0"), 0, None);
    let mut alts = Vec::new();
    // Non-negative exponents, with an optional `+`.
    let p_lo = lo.map_or(0, |l| l.max(0));
    if hi.is_none_or(|h| p_lo <= h) {
        alts.push(Hir::concat([
            Hir::optional(Hir::literal("+")),
            zeros(),
            canonical(p_lo, hi),
        ]));
    }
    // Negative exponents, and `-0`.
    let n_hi = hi.map_or(-1, |h| h.min(-1));
    if lo.is_none_or(|l| l <= n_hi) {
        let mag_lo = -n_hi;
        let mag_hi = lo.map(|l| -l);
        alts.push(Hir::concat([
            Hir::literal("-"),
            zeros(),
            canonical(mag_lo, mag_hi),
        ]));
    }
    if lo.is_none_or(|l| l <= 0) && hi.is_none_or(|h| h >= 0) {
        alts.push(Hir::concat([
            Hir::literal("-"),
            Hir::repeat(Hir::literal("0"), 1, None),
        ]));
    }
    Hir::concat([
        Hir::class(crate::regex::ClassSet::from_ranges([
            ('e' as u32, 'e' as u32),
            ('E' as u32, 'E' as u32),
        ])),
        Hir::alternation(alts),
    ])
}

/// Plain unsigned texts (`(0|[1-9][0-9]*)(\.[0-9]+)?`) whose value is a multiple of the step `k`,
/// read by a residue automaton that also checks the syntax, so that without bounds no
/// intersection is needed.
fn residue_language(k: &Decimal) -> Result<Hir> {
    // k = K / 10^t with K a positive integer; x is a multiple of k when x * 10^t is an integer
    // (no non-zero digit past the t-th fraction place) divisible by K.
    let t = (-k.exponent()).max(0);
    let big = k
        .to_scaled_i128(t)
        .filter(|&v| v > 0 && v <= 4096)
        .ok_or_else(|| unsupported_step(k, "the step's residue automaton would be too large"))?;
    let modulus = big as usize;
    let t = t as usize;
    // States: start, the lone leading zero, then per residue: integer digits, a point waiting for
    // its first digit, and j = 1..=t fraction digits (the last also absorbs trailing zeros).
    let start = 0;
    let zero = 1;
    let dead = 2;
    let base = 3;
    let per = 2 + t.max(1);
    let int = |r: usize| base + r * per;
    let point = |r: usize| base + r * per + 1;
    let frac = |r: usize, j: usize| base + r * per + 1 + j;
    let n = base + modulus * per;
    let mut dfa = SmallDfa::new(n, 11);
    let pow10 = |e: usize| -> usize { (0..e).fold(1usize, |acc, _| acc * 10 % modulus) };
    let dot = 10;
    for sym in 0..11 {
        dfa.set(dead, sym, dead);
        dfa.set(start, sym, dead);
        dfa.set(zero, sym, dead);
    }
    dfa.set(start, 0, zero);
    for d in 1..10 {
        dfa.set(start, d, int(d % modulus));
    }
    dfa.set(zero, dot, point(0));
    dfa.accept[zero] = true;
    for r in 0..modulus {
        for sym in 0..11 {
            dfa.set(int(r), sym, dead);
            dfa.set(point(r), sym, dead);
            for j in 1..=t.max(1) {
                dfa.set(frac(r, j), sym, dead);
            }
        }
        for d in 0..10 {
            dfa.set(int(r), d, int((r * 10 + d) % modulus));
        }
        dfa.set(int(r), dot, point(r));
        dfa.accept[int(r)] = r * pow10(t) % modulus == 0;
        if t == 0 {
            // Only zeros may follow the point.
            dfa.set(point(r), 0, frac(r, 1));
            dfa.set(frac(r, 1), 0, frac(r, 1));
            dfa.accept[frac(r, 1)] = r % modulus == 0;
            continue;
        }
        for d in 0..10 {
            dfa.set(point(r), d, frac((r * 10 + d) % modulus, 1));
        }
        for j in 1..=t {
            for d in 0..10 {
                let next = if j < t {
                    frac((r * 10 + d) % modulus, j + 1)
                } else if d == 0 {
                    frac(r, t)
                } else {
                    dead
                };
                dfa.set(frac(r, j), d, next);
            }
            // The value read so far, scaled to x * 10^t, is r * 10^(t - j).
            dfa.accept[frac(r, j)] = r * pow10(t - j) % modulus == 0;
        }
    }
    dfa.start = start;
    Ok(Hir::automaton(dfa.to_byte_dfa(|b| match b {
        b'0'..=b'9' => Some(usize::from(b - b'0')),
        b'.' => Some(dot),
        _ => None,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_schema::matcher::matches;

    fn d(s: &str) -> Decimal {
        Decimal::parse(s).unwrap()
    }

    fn bound(s: &str, strict: bool) -> Option<Bound> {
        Some(Bound {
            value: d(s),
            strict,
        })
    }

    /// Every admitted text of length up to 4 over the characters numbers use (plus a sample of
    /// longer ones), with the policy's own syntax check as the other oracle.
    fn candidates() -> Vec<String> {
        let alphabet = ['0', '1', '2', '5', '9', '.', '-', 'e'];
        let mut out = vec![String::new()];
        let mut frontier = vec![String::new()];
        for _ in 0..4 {
            let mut next = Vec::new();
            for s in &frontier {
                for c in alphabet {
                    let mut t = s.clone();
                    t.push(c);
                    next.push(t);
                }
            }
            out.extend(next.iter().cloned());
            frontier = next;
        }
        for extra in [
            "1e+16", "1.5e+16", "2.5e3", "1.2e1", "12.50", "100.0", "-100", "1E-05", "9.999",
            "-0.0", "0.25", "-1.50", "99.9", "120", "121", "999", "1000", "10000", "-99", "-100.5",
            "2.999", "18.5", "1e-07", "-2.5e-1", "6.75", "6.750", "-20.25", "13.5", "27", "6.7",
            "37", "-111", "74.0", "-4995", "28.5", "-19", "1000.5", "1008.5", "132", "-143.00",
        ] {
            out.push(extra.to_string());
        }
        out
    }

    /// The admitted syntax: plain numbers, and normalized exponent texts.
    fn admitted(s: &str, exponents: bool) -> bool {
        let plain = regex_lite(s, false);
        plain || (exponents && regex_lite(s, true))
    }

    fn regex_lite(s: &str, exp: bool) -> bool {
        let h = if exp {
            crate::regex::parse(r"-?[1-9](\.[0-9]{1,16})?[eE][+-]?[0-9]+").unwrap()
        } else {
            crate::regex::parse(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?").unwrap()
        };
        matches(&h, s)
    }

    /// The language, read both by derivatives and by its automaton, against `valid`.
    fn check(spec: NumberSpec, valid: impl Fn(&Decimal) -> bool) {
        let h = number_language(&spec).unwrap();
        let dfa = crate::dfa::Dfa::from_hir(&h, &Default::default()).unwrap();
        for s in candidates() {
            let exponents = spec.exponents && spec.multiple_of.is_none();
            let expect = admitted(&s, exponents) && valid(&d(&s));
            assert_eq!(matches(&h, &s), expect, "{s:?} under {spec:?}\n{h}");
            assert_eq!(dfa.is_match(s.as_bytes()), expect, "{s:?} under {spec:?}");
        }
    }

    fn spec(integer: bool, lo: Option<Bound>, hi: Option<Bound>, exponents: bool) -> NumberSpec {
        NumberSpec {
            integer,
            lo,
            hi,
            multiple_of: None,
            exponents,
        }
    }

    #[test]
    fn unbounded_numbers_and_integers() {
        check(spec(false, None, None, true), |_| true);
        check(spec(true, None, None, true), |v| v.is_integer());
        check(spec(true, None, None, false), |v| v.is_integer());
    }

    #[test]
    fn bounds_on_numbers() {
        let cases = [
            ("0", false, "1", false),
            ("-1.5", true, "2.5", false),
            ("0.01", false, "99", true),
            ("-100", false, "-0.5", false),
            ("5", true, "5", false),
            ("0", true, "1e3", false),
            ("-0.25", false, "0", true),
        ];
        for (lo, ls, hi, hs) in cases {
            for exponents in [false, true] {
                let (l, h) = (d(lo), d(hi));
                check(spec(false, bound(lo, ls), bound(hi, hs), exponents), |v| {
                    (if ls { *v > l } else { *v >= l }) && (if hs { *v < h } else { *v <= h })
                });
            }
        }
        let l = d("-2");
        check(spec(false, bound("-2", false), None, true), |v| *v >= l);
        let h = d("0.5");
        check(spec(false, None, bound("0.5", true), true), |v| *v < h);
    }

    #[test]
    fn bounds_on_integers() {
        for (lo, hi) in [
            ("-5", "120"),
            ("0.5", "9.5"),
            ("10", "10"),
            ("-99", "-10"),
            ("1", "1e4"),
        ] {
            let (l, h) = (d(lo), d(hi));
            check(spec(true, bound(lo, false), bound(hi, false), true), |v| {
                v.is_integer() && *v >= l && *v <= h
            });
        }
        let l = d("3");
        check(spec(true, bound("3", true), None, true), |v| {
            v.is_integer() && *v > l
        });
    }

    #[test]
    fn multiples() {
        for (k, lo, hi) in [
            ("0.5", None, None),
            ("3", None, None),
            ("0.01", None, None),
            ("2", Some("-9"), Some("9")),
            // Large odd factors: residue automata whose expressions would be huge.
            ("11", None, None),
            ("6.75", None, None),
            ("37", Some("-5000"), None),
            ("9.5", None, Some("1000.5")),
        ] {
            let step = d(k);
            let (l, h) = (lo.map(d), hi.map(d));
            let spec = NumberSpec {
                integer: false,
                lo: lo.and_then(|x| bound(x, false)),
                hi: hi.and_then(|x| bound(x, false)),
                multiple_of: Some(step.clone()),
                exponents: true,
            };
            check(spec, |v| {
                is_multiple(v, &step)
                    && l.as_ref().is_none_or(|l| v >= l)
                    && h.as_ref().is_none_or(|h| v <= h)
            });
        }
    }

    fn is_multiple(v: &Decimal, k: &Decimal) -> bool {
        let scale = -v.exponent().min(k.exponent()).min(0);
        let (a, b) = (
            v.to_scaled_i128(scale).unwrap(),
            k.to_scaled_i128(scale).unwrap(),
        );
        a % b == 0
    }

    #[test]
    fn float_bounds_read_back_exactly() {
        // serde_json's default float parser is off by an ulp here; `float_roundtrip` is not.
        let v: serde_json::Value = serde_json::from_str("9.727837981879871e+26").unwrap();
        let d = Decimal::from_json(v.as_number().unwrap()).unwrap();
        assert_eq!(d.to_plain(), "972783798187987100000000000");
    }

    #[test]
    fn big_bounds_stay_exact() {
        let h = number_language(&spec(
            true,
            bound("0", false),
            bound("18446744073709551615", false),
            false,
        ))
        .unwrap();
        assert!(matches(&h, "18446744073709551615"));
        assert!(!matches(&h, "18446744073709551616"));
        assert!(matches(&h, "18446744073709551614.000"));
        assert!(!matches(&h, "-1"));
    }
}
