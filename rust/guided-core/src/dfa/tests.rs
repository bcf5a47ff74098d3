//! Whole-pipeline tests: HIR -> NFA -> DFA against independent oracles.
//!
//! Two oracles. For HIRs without intersection or complement, the `regex` crate: the HIR is printed
//! in our dialect (which for these HIRs is also Rust regex syntax) and matched as
//! `^(?:printed)$` over bytes with Unicode semantics. For everything, intersection, complement and
//! anchors inside them included, a brute-force span matcher that computes, for every substring of
//! a short text, which sub-expressions match it.

use super::*;
use crate::error::Error;
use crate::regex::{ClassSet, Look, MAX_CODE_POINT};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

fn dfa(h: &Hir) -> Dfa {
    Dfa::from_hir(h, &DfaConfig::default()).unwrap_or_else(|e| panic!("{h}: {e}"))
}

/// Our HIR from a pattern, through regex-syntax's parser (tests only: the crate's own parser is
/// not what is under test here).
fn pat(pattern: &str) -> Hir {
    use regex_syntax::hir::{Class, HirKind, Look as RLook};
    fn convert(h: &regex_syntax::hir::Hir) -> Hir {
        match h.kind() {
            HirKind::Empty => Hir::Empty,
            HirKind::Literal(l) => Hir::literal_bytes(l.0.to_vec()),
            HirKind::Class(Class::Unicode(c)) => Hir::class(ClassSet::from_ranges(
                c.iter().map(|r| (r.start() as u32, r.end() as u32)),
            )),
            HirKind::Class(Class::Bytes(c)) => Hir::class(ClassSet::from_ranges(
                c.iter().map(|r| (r.start() as u32, r.end() as u32)),
            )),
            HirKind::Look(RLook::Start) => Hir::Look(Look::Start),
            HirKind::Look(RLook::End) => Hir::Look(Look::End),
            HirKind::Look(other) => panic!("unsupported look {other:?}"),
            HirKind::Repetition(r) => Hir::repeat(convert(&r.sub), r.min, r.max),
            HirKind::Capture(c) => convert(&c.sub),
            HirKind::Concat(c) => Hir::concat(c.iter().map(convert)),
            HirKind::Alternation(c) => Hir::alternation(c.iter().map(convert)),
        }
    }
    let parsed = regex_syntax::ParserBuilder::new()
        .build()
        .parse(pattern)
        .unwrap_or_else(|e| panic!("{pattern}: {e}"));
    convert(&parsed)
}

// ---------------------------------------------------------------------------------------------
// Oracles.

/// The `regex` crate's full match of the printed HIR.
fn regex_oracle(h: &Hir) -> regex::bytes::Regex {
    let printed = h.to_string();
    regex::bytes::RegexBuilder::new(&format!("^(?:{printed})$"))
        .size_limit(1 << 26)
        .build()
        .unwrap_or_else(|e| panic!("printed HIR is not a Rust regex: {printed}\n{e}"))
}

/// `m[i][j]`: whether the text's bytes `i..j` match, for every `i <= j`.
type Spans = Vec<Vec<bool>>;

fn compose(a: &Spans, b: &Spans) -> Spans {
    let n = a.len();
    let mut out = vec![vec![false; n]; n];
    for i in 0..n {
        for k in i..n {
            if a[i][k] {
                for j in k..n {
                    if b[k][j] {
                        out[i][j] = true;
                    }
                }
            }
        }
    }
    out
}

fn union(a: &Spans, b: &Spans) -> Spans {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.iter().zip(y).map(|(p, q)| *p || *q).collect())
        .collect()
}

fn identity(n: usize) -> Spans {
    (0..n).map(|i| (0..n).map(|j| i == j).collect()).collect()
}

/// Brute-force matching by spans, straight from the definitions.
fn spans(h: &Hir, text: &[u8]) -> Spans {
    let n = text.len() + 1;
    let mut m = vec![vec![false; n]; n];
    match h {
        Hir::Empty => m = identity(n),
        Hir::Literal(lit) => {
            for i in 0..n {
                if text[i..].starts_with(lit) {
                    m[i][i + lit.len()] = true;
                }
            }
        }
        Hir::Class(set) => {
            for i in 0..n {
                for len in 1..=4 {
                    if let Some(Ok(s)) = text.get(i..i + len).map(std::str::from_utf8) {
                        let mut chars = s.chars();
                        if let (Some(c), None) = (chars.next(), chars.next()) {
                            m[i][i + len] = set.contains(c as u32);
                        }
                    }
                }
            }
        }
        Hir::Look(Look::Start) => m[0][0] = true,
        Hir::Look(Look::End) => m[n - 1][n - 1] = true,
        Hir::Concat(children) => {
            m = identity(n);
            for c in children {
                m = compose(&m, &spans(c, text));
            }
        }
        Hir::Alternation(children) => {
            for c in children {
                m = union(&m, &spans(c, text));
            }
        }
        Hir::Repeat { sub, min, max } => {
            let s = spans(sub, text);
            m = identity(n);
            for _ in 0..*min {
                m = compose(&m, &s);
            }
            let optional = union(&identity(n), &s);
            // More than n copies beyond the minimum add nothing new on a text of n - 1 bytes.
            let extra = max.map_or(n, |max| (max - min) as usize).min(n);
            for _ in 0..extra {
                m = compose(&m, &optional);
            }
        }
        Hir::Intersection(children) => {
            m = vec![vec![true; n]; n];
            for c in children {
                let s = spans(c, text);
                for i in 0..n {
                    for j in 0..n {
                        m[i][j] &= s[i][j];
                    }
                }
            }
        }
        Hir::Complement(sub) => {
            let s = spans(sub, text);
            for i in 0..n {
                for j in i..n {
                    m[i][j] = std::str::from_utf8(&text[i..j]).is_ok() && !s[i][j];
                }
            }
        }
        Hir::Shared(s) => m = spans(s.hir(), text),
        Hir::Automaton(a) => {
            for (i, row) in m.iter_mut().enumerate() {
                let mut at = Some(a.clone());
                for (j, cell) in row.iter_mut().enumerate().skip(i) {
                    let Some(cur) = &at else { break };
                    *cell = cur.dfa().is_accepting(cur.state());
                    at = text.get(j).and_then(|&b| cur.step(b));
                }
            }
        }
        // The generators here make no grammars.
        Hir::Call(_) | Hir::Grammar(_) => unreachable!("a grammar in a regular-expression oracle"),
    }
    m
}

fn brute_force(h: &Hir, text: &[u8]) -> bool {
    spans(h, text)[0][text.len()]
}

// ---------------------------------------------------------------------------------------------
// Generators.

/// Code points around every place UTF-8 changes shape.
const POINTS: &[u32] = &[
    0x0, 0x9, 0xA, 0xB, 0x2A, 0x41, 0x5A, 0x61, 0x62, 0x63, 0x7A, 0x7F, 0x80, 0xE9, 0xFF, 0x7FF,
    0x800, 0xFFF, 0x1000, 0x4E2D, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x1F600,
    0x10FFFF,
];

fn code_point() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => 0x61u32..=0x64,
        2 => proptest::sample::select(POINTS),
        1 => 0u32..=MAX_CODE_POINT,
    ]
}

fn class() -> impl Strategy<Value = ClassSet> {
    let range = (code_point(), code_point()).prop_map(|(a, b)| (a.min(b), a.max(b)));
    prop_oneof![
        4 => proptest::collection::vec(range, 1..4).prop_map(ClassSet::from_ranges),
        1 => proptest::collection::vec((0x61u32..=0x64).prop_map(|c| (c, c)), 1..4)
            .prop_map(|r| ClassSet::from_ranges(r).negate()),
        1 => Just(ClassSet::single(0xA).negate()),
        1 => Just(ClassSet::full()),
        1 => Just(ClassSet::empty()),
    ]
}

fn literal() -> impl Strategy<Value = Hir> {
    proptest::collection::vec(
        proptest::sample::select(vec![
            "a", "b", "c", "ab", "é", "中", "😀", "\n", ".", "*", "&", "~", "{",
        ]),
        1..3,
    )
    .prop_map(|parts| Hir::literal(&parts.concat()))
}

fn leaf(anchors: bool) -> BoxedStrategy<Hir> {
    let mut options: Vec<(u32, BoxedStrategy<Hir>)> = vec![
        (4, literal().boxed()),
        (3, class().prop_map(Hir::class).boxed()),
    ];
    if !anchors {
        options.push((1, Just(Hir::Empty).boxed()));
    }
    if anchors {
        options.push((1, Just(Hir::Look(Look::Start)).boxed()));
        options.push((1, Just(Hir::Look(Look::End)).boxed()));
    }
    proptest::strategy::Union::new_weighted(options).boxed()
}

fn widen(h: Hir, mode: u8) -> Hir {
    let any = || Hir::repeat(Hir::class(ClassSet::single(0xA).negate()), 0, None);
    match mode {
        0 => h,
        1 => Hir::concat([h, any()]),
        2 => Hir::repeat(h, 0, None),
        _ => Hir::concat([any(), h, any()]),
    }
}

/// Random HIRs built with the smart constructors, as a parser would.
fn hir(anchors: bool, boolean: bool) -> impl Strategy<Value = Hir> {
    hir_sized(anchors, boolean, 4, 24)
}

fn hir_sized(anchors: bool, boolean: bool, depth: u32, size: u32) -> impl Strategy<Value = Hir> {
    leaf(anchors).prop_recursive(depth, size, 4, move |inner| {
        let mut options: Vec<(u32, BoxedStrategy<Hir>)> = vec![
            (
                3,
                proptest::collection::vec(inner.clone(), 1..4)
                    .prop_map(Hir::concat)
                    .boxed(),
            ),
            (
                2,
                proptest::collection::vec(inner.clone(), 1..4)
                    .prop_map(Hir::alternation)
                    .boxed(),
            ),
            (
                3,
                (inner.clone(), 0u32..3, proptest::option::of(0u32..3))
                    .prop_map(|(h, min, extra)| Hir::repeat(h, min, extra.map(|e| min + e)))
                    .boxed(),
            ),
            // A shared node, alone or copied into two places (one automaton, embedded twice).
            (1, inner.clone().prop_map(Hir::shared).boxed()),
            (
                1,
                inner
                    .clone()
                    .prop_map(|h| {
                        let s = Hir::shared(h);
                        Hir::concat([s.clone(), Hir::literal("&"), s])
                    })
                    .boxed(),
            ),
        ];
        if boolean {
            // Operands drawn independently rarely overlap; widening them with `.*x.*`, `x.*` or
            // `x*` gives intersections that are neither empty nor trivial.
            options.push((
                2,
                proptest::collection::vec((inner.clone(), 0u8..6), 2..4)
                    .prop_map(|ops| {
                        Hir::intersection(ops.into_iter().map(|(h, mode)| widen(h, mode)))
                    })
                    .boxed(),
            ));
            options.push((1, inner.prop_map(Hir::complement).boxed()));
        }
        proptest::strategy::Union::new_weighted(options)
    })
}

/// Random HIRs built from the bare variants, with none of the constructors' folding: one-child
/// concatenations, repeated anchors, repetitions of the empty string, and so on.
fn raw_hir() -> impl Strategy<Value = Hir> {
    let leaf = prop_oneof![
        4 => literal(),
        3 => class().prop_map(Hir::Class),
        1 => Just(Hir::Empty),
        2 => Just(Hir::Look(Look::Start)),
        2 => Just(Hir::Look(Look::End)),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            3 => proptest::collection::vec(inner.clone(), 0..4).prop_map(Hir::Concat),
            // Text on both sides, so that assertions inside are tested away from the ends.
            2 => inner
                .clone()
                .prop_map(|h| Hir::Concat(vec![Hir::literal("a"), h, Hir::literal("b")])),
            2 => proptest::collection::vec(inner.clone(), 1..4).prop_map(Hir::Alternation),
            3 => (inner, 0u32..3, proptest::option::of(0u32..3)).prop_map(|(h, min, extra)| {
                Hir::Repeat { sub: Box::new(h), min, max: extra.map(|e| min + e) }
            }),
        ]
    })
}

/// The same expression rebuilt through the smart constructors.
fn rebuild(h: &Hir) -> Hir {
    match h {
        Hir::Empty | Hir::Look(_) => h.clone(),
        Hir::Literal(b) => Hir::literal_bytes(b.clone()),
        Hir::Class(set) => Hir::class(set.clone()),
        Hir::Concat(c) => Hir::concat(c.iter().map(rebuild)),
        Hir::Alternation(c) => Hir::alternation(c.iter().map(rebuild)),
        Hir::Repeat { sub, min, max } => Hir::repeat(rebuild(sub), *min, *max),
        Hir::Intersection(c) => Hir::intersection(c.iter().map(rebuild)),
        Hir::Complement(sub) => Hir::complement(rebuild(sub)),
        Hir::Shared(s) => Hir::shared(rebuild(s.hir())),
        Hir::Automaton(_) | Hir::Call(_) | Hir::Grammar(_) => h.clone(),
    }
}

/// Pieces texts are made of: characters of every length, and bytes that are not UTF-8.
const PIECES: &[&[u8]] = &[
    b"a",
    b"b",
    b"c",
    b"d",
    b"\n",
    b"*",
    b"&",
    "é".as_bytes(),
    "ÿ".as_bytes(),
    "\u{7FF}".as_bytes(),
    "\u{800}".as_bytes(),
    "中".as_bytes(),
    "\u{D7FF}".as_bytes(),
    "\u{E000}".as_bytes(),
    "\u{FFFF}".as_bytes(),
    "😀".as_bytes(),
    "\u{10FFFF}".as_bytes(),
    b"\xFF",
    b"\xC3",
    b"\x80",
    b"\xED\xA0\x80",
    b"\xF4\x90\x80\x80",
    b"\xC0\xAF",
];

fn text(max_pieces: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(proptest::sample::select(PIECES), 0..max_pieces)
        .prop_map(|p| p.concat())
}

/// A small deterministic generator for the samplers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A string built from the HIR's structure, ignoring anchors and boolean operators: likely to
/// match, and the oracle decides.
fn sample(h: &Hir, rng: &mut Rng, out: &mut Vec<u8>) {
    match h {
        Hir::Empty | Hir::Look(_) => {}
        Hir::Literal(b) => out.extend_from_slice(b),
        Hir::Class(set) => {
            let ranges = set.ranges();
            if !ranges.is_empty() {
                let (lo, hi) = ranges[rng.below(ranges.len())];
                let pick = match rng.below(3) {
                    0 => lo,
                    1 => hi,
                    _ => lo + (rng.next() % u64::from(hi - lo + 1)) as u32,
                };
                if let Some(c) = char::from_u32(pick) {
                    out.extend_from_slice(c.to_string().as_bytes());
                }
            }
        }
        Hir::Concat(c) => c.iter().for_each(|h| sample(h, rng, out)),
        Hir::Alternation(c) | Hir::Intersection(c) => sample(&c[rng.below(c.len())], rng, out),
        Hir::Shared(s) => sample(s.hir(), rng, out),
        Hir::Automaton(a) => {
            let mut cur = a.clone();
            for _ in 0..16 {
                if cur.dfa().is_accepting(cur.state()) && rng.below(2) == 0 {
                    break;
                }
                let live: Vec<u8> = (0..=255u8).filter(|&b| cur.step(b).is_some()).collect();
                let Some(next) = live.get(rng.below(live.len().max(1))).and_then(|&b| {
                    out.push(b);
                    cur.step(b)
                }) else {
                    break;
                };
                cur = next;
            }
        }
        Hir::Repeat { sub, min, max } => {
            let top = max.unwrap_or(min + 3).min(min + 3);
            let count = min + rng.below((top - min + 1) as usize) as u32;
            for _ in 0..count {
                sample(sub, rng, out);
            }
        }
        Hir::Complement(_) => {
            for _ in 0..rng.below(3) {
                out.extend_from_slice(PIECES[rng.below(PIECES.len())]);
            }
        }
        Hir::Call(_) | Hir::Grammar(_) => {}
    }
}

/// A random walk through the DFA that stops in an accepting state when it can.
fn walk(d: &Dfa, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    let mut state = d.start();
    for _ in 0..24 {
        if d.is_accepting(state) && rng.below(4) == 0 {
            break;
        }
        let live: Vec<u8> = (0..=255u8)
            .filter(|&b| d.next_state(state, b) != d.dead())
            .collect();
        if live.is_empty() {
            break;
        }
        let b = live[rng.below(live.len())];
        out.push(b);
        state = d.next_state(state, b);
    }
    out
}

fn candidates(h: &Hir, d: &Dfa, seed: u64, random: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed | 1);
    let mut texts = random;
    for _ in 0..8 {
        let mut s = Vec::new();
        sample(h, &mut rng, &mut s);
        texts.push(s);
        texts.push(walk(d, &mut rng));
    }
    texts
}

// ---------------------------------------------------------------------------------------------
// Properties.

fn check_structure(d: &Dfa) -> Result<(), TestCaseError> {
    let n = d.num_states();
    let t = d.table_256();
    prop_assert_eq!(t.len(), n * 256);
    prop_assert!(!d.is_accepting(0) && t[..256].iter().all(|&s| s == 0));
    for s in 0..n as u32 {
        let row = &t[s as usize * 256..(s as usize + 1) * 256];
        for b in 0..=255u8 {
            prop_assert_eq!(row[b as usize], d.next_state(s, b));
            prop_assert!((row[b as usize] as usize) < n);
        }
        prop_assert_eq!(
            d.is_final(s),
            d.is_accepting(s) && row.iter().all(|&x| x == 0)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn matches_the_regex_crate(
        h in hir(true, false),
        random in proptest::collection::vec(text(7), 16),
        seed in any::<u64>(),
    ) {
        let d = dfa(&h);
        check_structure(&d)?;
        let re = regex_oracle(&h);
        for t in candidates(&h, &d, seed, random) {
            prop_assert_eq!(d.is_match(&t), re.is_match(&t), "{} on {:02X?}", h, t);
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The constructors' folding keeps the language: checked on the unfolded HIR against the
    /// regex crate, and by comparing the two minimal DFAs.
    #[test]
    fn constructors_keep_the_language(
        h in raw_hir(),
        random in proptest::collection::vec(text(7), 12),
        seed in any::<u64>(),
    ) {
        let d = dfa(&h);
        let re = regex_oracle(&h);
        for t in candidates(&h, &d, seed, random) {
            prop_assert_eq!(d.is_match(&t), re.is_match(&t), "{} on {:02X?}", h, t);
        }
        let folded = rebuild(&h);
        prop_assert_eq!(dfa(&folded), d, "{:?} folds to {:?}", h, folded);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn matches_the_regex_crate_on_larger_patterns(
        h in hir_sized(true, false, 7, 96),
        random in proptest::collection::vec(text(9), 16),
        seed in any::<u64>(),
    ) {
        let d = dfa(&h);
        check_structure(&d)?;
        let re = regex_oracle(&h);
        for t in candidates(&h, &d, seed, random) {
            prop_assert_eq!(d.is_match(&t), re.is_match(&t), "{} on {:02X?}", h, t);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn matches_brute_force_with_boolean_operators(
        h in hir(true, true),
        random in proptest::collection::vec(text(6), 12),
        seed in any::<u64>(),
    ) {
        let d = dfa(&h);
        check_structure(&d)?;
        for t in candidates(&h, &d, seed, random) {
            prop_assert_eq!(d.is_match(&t), brute_force(&h, &t), "{} on {:02X?}", h, t);
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn equal_languages_give_equal_dfas(h in hir(true, true), g in hir(false, false)) {
        let d = dfa(&h);
        let star = Hir::repeat(h.clone(), 0, None);
        let rewrites = [
            Hir::Alternation(vec![h.clone(), h.clone()]),
            Hir::Concat(vec![Hir::Empty, h.clone(), Hir::Empty]),
            Hir::Intersection(vec![h.clone(), h.clone()]),
            // Double complement: the language itself, since every HIR here matches only UTF-8.
            Hir::Complement(Box::new(Hir::Complement(Box::new(h.clone())))),
            Hir::alternation([h.clone(), Hir::concat([h.clone(), Hir::nothing()])]),
        ];
        for r in &rewrites {
            prop_assert_eq!(&dfa(r), &d, "{} vs {}", r, h);
        }
        prop_assert_eq!(dfa(&Hir::repeat(star.clone(), 0, None)), dfa(&star));
        prop_assert_eq!(
            dfa(&Hir::repeat(h.clone(), 1, None)),
            dfa(&Hir::concat([h.clone(), star.clone()]))
        );
        prop_assert_eq!(
            dfa(&Hir::alternation([h.clone(), g.clone()])),
            dfa(&Hir::alternation([g.clone(), h.clone()]))
        );
        // De Morgan, through the product construction.
        let not_either = Hir::Complement(Box::new(Hir::Alternation(vec![h.clone(), g.clone()])));
        let neither = Hir::Intersection(vec![
            Hir::Complement(Box::new(h.clone())),
            Hir::Complement(Box::new(g.clone())),
        ]);
        prop_assert_eq!(dfa(&not_either), dfa(&neither));
    }
}

// ---------------------------------------------------------------------------------------------
// Fixed cases.

#[test]
fn equivalent_patterns_have_the_same_minimal_dfa() {
    for (a, b) in [
        ("(a|b)*", "(a*b*)*"),
        ("a+", "aa*"),
        ("[a-c]", "a|b|c"),
        ("(ab)*a", "a(ba)*"),
        ("x{2,4}", "xx(x(x)?)?"),
        ("(a|ab)(c|bcd)", "abcd|ac|abc|abbcd"),
        ("[\\p{L}\\p{N}]+", "(\\p{L}|\\p{N})(\\p{N}|\\p{L})*"),
        ("^a$|^b$", "a|b"),
        ("(?s:.)*", "(?s:.*.*)"),
    ] {
        let (da, db) = (dfa(&pat(a)), dfa(&pat(b)));
        assert_eq!(da.num_states(), db.num_states(), "{a} vs {b}");
        assert_eq!(da, db, "{a} vs {b}");
    }
    assert_ne!(dfa(&pat("a*")).num_states(), dfa(&pat("a+")).num_states());
}

#[test]
fn known_state_counts() {
    // Minimal DFAs, dead state included.
    for (p, states) in [
        ("a", 3),
        ("a*", 2),
        ("abc", 5),
        ("(a|b)*abb", 5),
        ("[0-9]+", 3),
        // é is two bytes.
        ("é", 4),
        // Dead, start, and the continuation states of 2-, 3- and 4-byte characters, with the
        // special second bytes after E0, ED, F0 and F4.
        ("(?s:.)*", 9),
        ("", 2),
    ] {
        assert_eq!(dfa(&pat(p)).num_states(), states, "{p}");
    }
}

#[test]
fn anchors_are_zero_width_assertions_on_the_whole_text() {
    let d = dfa(&pat("a^b"));
    assert!(d.matches_nothing() && d.num_states() == 2);
    let d = dfa(&pat("a$b"));
    assert!(d.matches_nothing());
    let d = dfa(&pat("(^a|b)+"));
    assert!(d.is_match(b"abb") && d.is_match(b"b") && !d.is_match(b"ba") && !d.is_match(b"aa"));
    let d = dfa(&pat("(a$|b)*"));
    assert!(d.is_match(b"bba") && d.is_match(b"") && !d.is_match(b"ab"));
    // An optional assertion lets everything through.
    for p in ["a(?:^)?", "a(?:^){0,3}", "(?:$)*a"] {
        assert_eq!(dfa(&pat(p)), dfa(&pat("a")), "{p}");
    }
}

#[test]
fn api_contract() {
    let d = dfa(&pat("ab|ac"));
    assert_eq!((d.start(), d.dead()), (1, 0));
    assert!(d.is_match(b"ab") && d.is_match(b"ac") && !d.is_match(b"a") && !d.is_match(b"abc"));
    // dead, start, after "a", after "ab"/"ac" (final).
    assert_eq!(d.num_states(), 4);
    let after_a = d.next_state(1, b'a');
    let end = d.next_state(after_a, b'b');
    assert_eq!(d.next_state(after_a, b'c'), end);
    assert!(d.is_accepting(end) && d.is_final(end) && !d.is_final(after_a));
    assert_eq!(d.accepting(), vec![false, false, false, true]);
    assert_eq!(d.finals(), vec![false, false, false, true]);
    // Classes: {a}, {b, c}, everything else.
    let classes = d.classes();
    assert_eq!(classes.num_classes(), 3);
    assert_eq!(classes.get(b'b'), classes.get(b'c'));
    for c in 0..classes.num_classes() as u8 {
        let rep = classes.representative(c).unwrap_or(0);
        assert_eq!(classes.get(rep), c);
        for s in 0..d.num_states() as u32 {
            assert_eq!(d.next_class(s, c), d.next_state(s, rep));
        }
    }
    assert_eq!(
        d.class_table().len(),
        d.num_states() * classes.num_classes()
    );
    // Out of range: dead or false, never a panic.
    assert_eq!(d.next_state(99, b'a'), 0);
    assert_eq!(d.next_class(1, 200), 0);
    assert_eq!(d.next_class(u32::MAX, 0), 0);
    assert!(!d.is_accepting(99) && !d.is_final(u32::MAX));
    assert!(d.memory_bytes() >= d.num_states() * classes.num_classes() * 4);
}

#[test]
fn a_pattern_matching_nothing_still_has_dead_and_start() {
    for h in [Hir::nothing(), pat("[^\\x00-\\x{10FFFF}]"), pat("a^")] {
        let d = dfa(&h);
        assert_eq!(d.num_states(), 2, "{h}");
        assert!(!d.is_match(b"") && !d.is_match(b"a"));
    }
    let d = dfa(&Hir::Empty);
    assert!(d.is_match(b"") && d.is_final(1) && !d.is_match(b"a"));
}

#[test]
fn invalid_utf8_never_matches_a_class() {
    let d = dfa(&pat("(?s:.)*"));
    for bad in [
        &b"\xFF"[..],
        b"\xC0\xAF",
        b"\xED\xA0\x80",
        b"\xF4\x90\x80\x80",
        b"\xE0\x80\x80",
        b"\xC3",
    ] {
        assert!(!d.is_match(bad), "{bad:02X?}");
    }
    assert!(d.is_match("ok é 中 😀 \u{10FFFF}".as_bytes()));
}

#[test]
fn state_limit_is_raised_quickly() {
    let h = pat("(a|b)*a(a|b){40}");
    match Dfa::from_hir(&h, &DfaConfig::default()) {
        Err(Error::SizeLimit {
            limit,
            value,
            maximum,
        }) => {
            // The construction may build four times the limit before it gives up.
            assert_eq!(
                (limit.as_str(), value, maximum),
                ("max_states", 80_001, 20_000)
            );
        }
        other => panic!("expected a size limit, got {other:?}"),
    }
    // The same pattern with a bound the construction fits in.
    let ok = Dfa::from_hir(&pat("(a|b)*a(a|b){5}"), &DfaConfig { max_states: 200 }).unwrap();
    // 2^6 subsets of the last six letters, plus dead.
    assert_eq!(ok.num_states(), 65);
    // Too many states once minimized: the minimal count is reported.
    match Dfa::from_hir(&pat("(a|b)*a(a|b){5}"), &DfaConfig { max_states: 50 }) {
        Err(Error::SizeLimit {
            limit,
            value,
            maximum,
        }) => {
            assert_eq!((limit.as_str(), value, maximum), ("max_states", 65, 50))
        }
        other => panic!("expected a size limit, got {other:?}"),
    }
    // A subset construction of 65 states whose language needs two: within a limit of 50.
    let merged = Dfa::from_hir(
        &pat("(a|b)*a(a|b){5}|(a|b)*"),
        &DfaConfig { max_states: 50 },
    );
    assert_eq!(merged.unwrap().num_states(), 2);
}

#[test]
fn nfa_limit_is_raised_before_allocating() {
    // Copies too few to embed as one repeated automaton are counted before they are built.
    let h = pat("((((((ab){10}){10}){10}){10}){10}){10}");
    match Dfa::from_hir(&h, &DfaConfig::default()) {
        Err(Error::SizeLimit { limit, .. }) => assert_eq!(limit, "nfa_states"),
        other => panic!("expected a size limit, got {other:?}"),
    }
    let small = NfaConfig { max_states: 100 };
    assert!(matches!(
        Dfa::from_hir_with(&pat("(a{15}){15}"), &DfaConfig::default(), &small),
        Err(Error::SizeLimit { ref limit, .. }) if limit == "nfa_states"
    ));
    // Many copies embed one automaton: the NFA is small, and the million states the language
    // needs are refused by the state limit.
    match Dfa::from_hir(&pat("(a{1000}){1000}"), &DfaConfig::default()) {
        Err(Error::SizeLimit { limit, .. }) => assert_eq!(limit, "max_states"),
        other => panic!("expected a size limit, got {other:?}"),
    }
}

#[test]
fn boolean_operators_with_anchors_inside() {
    let cases: &[(Hir, &[(&str, bool)])] = &[
        // (?~^a) : at the start, so everything except "a".
        (
            Hir::complement(pat("^a")),
            &[("a", false), ("", true), ("ab", true), ("b", true)],
        ),
        // b(?~^a) : not at the start, so the operand matches nothing: b then anything.
        (
            Hir::concat([Hir::literal("b"), Hir::complement(pat("^a"))]),
            &[("ba", true), ("b", true), ("bxyz", true), ("a", false)],
        ),
        // (?&(?s:.*)$&&a.*) c? : the intersection is at the end only when no c follows.
        (
            Hir::concat([
                Hir::intersection([pat("(?s:.*)$"), pat("a.*")]),
                Hir::optional(Hir::literal("c")),
            ]),
            &[("a", true), ("abc", true), ("ac", true), ("", false)],
        ),
        // (?&a+&&a{2}$) followed by a: the $ operand fails, so nothing.
        (
            Hir::concat([
                Hir::intersection([pat("a+"), pat("a{2}$")]),
                Hir::literal("a"),
            ]),
            &[("aaa", false), ("aa", false)],
        ),
    ];
    for (h, texts) in cases {
        let d = dfa(h);
        for &(t, want) in texts.iter() {
            assert_eq!(d.is_match(t.as_bytes()), want, "{h} on {t:?}");
            assert_eq!(brute_force(h, t.as_bytes()), want, "oracle: {h} on {t:?}");
        }
    }
}

#[test]
fn classes_regroup_non_contiguous_bytes() {
    // a and c behave the same, b differs: one class for {a, c}.
    let d = dfa(&pat("[ac]b"));
    assert_eq!(d.classes().get(b'a'), d.classes().get(b'c'));
    assert_ne!(d.classes().get(b'a'), d.classes().get(b'b'));
    assert_eq!(d.classes().num_classes(), 3);
}

#[test]
fn printed_hirs_read_back_in_rust_regex() {
    for h in [
        Hir::any_char(),
        Hir::nothing(),
        Hir::class(ClassSet::range(0xD000, 0xD900)),
        Hir::class(ClassSet::range(0xD800, 0xDFFF).negate()),
        Hir::Repeat {
            sub: Box::new(Hir::Look(Look::Start)),
            min: 2,
            max: None,
        },
        Hir::Repeat {
            sub: Box::new(Hir::Look(Look::End)),
            min: 0,
            max: Some(1),
        },
        Hir::literal("a.b*c&d~e{f}"),
    ] {
        let d = dfa(&h);
        let re = regex_oracle(&h);
        for t in [
            "",
            "a",
            "\u{D7FF}",
            "\u{E000}",
            "\u{D000}",
            "a.b*c&d~e{f}",
            "\n",
        ] {
            assert_eq!(
                d.is_match(t.as_bytes()),
                re.is_match(t.as_bytes()),
                "{h} on {t:?}"
            );
        }
    }
}
#[test]
fn class_tries_are_minimal() {
    // The trie of a class is a minimal acyclic automaton: its states plus the end and match states
    // of the NFA number exactly the states of the minimal DFA (plus its final and dead states),
    // where a plain alternation of the sequences would need one state per byte range.
    for p in [
        r"\p{L}",
        r"\p{Han}",
        r"[^a]",
        r"\w",
        r"\p{Greek}",
        r"(?s:.)",
        r"[\x{80}-\x{10FFFF}]",
    ] {
        let h = pat(p);
        let Hir::Class(set) = &h else {
            panic!("{p} is not a class")
        };
        let naive: usize = set
            .ranges()
            .iter()
            .flat_map(|&(lo, hi)| crate::utf8::utf8_sequences(lo, hi))
            .map(|seq| seq.len())
            .sum();
        let nfa = crate::nfa::Nfa::new(&h, &NfaConfig::default(), &DfaConfig::default()).unwrap();
        assert_eq!(nfa.len(), dfa(&h).num_states(), "{p}");
        assert!(
            nfa.len() * 2 < naive,
            "{p}: {} states, {naive} naive",
            nfa.len()
        );
    }
}

#[test]
fn literal_bytes_need_not_be_utf8() {
    let h = Hir::literal_bytes(vec![0xFF, b'a']);
    let d = dfa(&h);
    assert!(d.is_match(b"\xFFa") && !d.is_match(b"a"));
    // A complement never admits them.
    let d = dfa(&Hir::complement(h));
    assert!(!d.is_match(b"\xFFa") && !d.is_match(b"\xFF") && d.is_match(b"a"));
}
