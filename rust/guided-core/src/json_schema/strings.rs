//! String languages: from constraints on a decoded string value to the JSON texts that spell it.
//!
//! Everything a schema says about a string (`minLength`, `pattern`, `format`, `enum`) is about the
//! decoded value, a sequence of code points. The model, however, writes JSON text, in which `"` is
//! `\"`, a newline is `\n` and `é` may be `é` or `\u00e9`. So string languages are built in two
//! steps: first the value language over code points (an [`Hir`] whose classes are code-point sets,
//! with intersections where constraints meet), then [`encode`], which replaces every code point by
//! the JSON spellings of it.
//!
//! `encode` is a homomorphism: it maps each code point to a set of spellings, and concatenation,
//! alternation and repetition to themselves. Because the spellings of distinct code points are
//! disjoint and the spelling code is prefix-free (a JSON string body decodes in exactly one way),
//! the image of an intersection is the intersection of the images, and the image of a complement
//! is the complement taken inside the image of "any string". That is what lets a `pattern`, a
//! length bound and a `format` be intersected at the value level and still mean the exact JSON-text
//! language afterwards.
//!
//! Spelling policy. Every code point has its raw UTF-8 form unless JSON forbids it (`"`, `\`, the
//! C0 controls). On top of that: `\"`, `\\`, `\/`, the short escapes `\b \f \n \r \t` for their
//! controls, `\u00XX` for the other controls, and `\uXXXX` (surrogate pairs for astral code points,
//! hex digits in either case) for DEL and every non-ASCII code point. That is every form Python's
//! `json.dumps` writes with `ensure_ascii` on or off, and what JavaScript's `JSON.stringify` writes.
//! It deliberately leaves out `\u` escapes of printable ASCII (`\u0041` for `A`) and of controls
//! that have a short escape: valid JSON no serializer produces, which would multiply the states of
//! every property name for nothing. Lone surrogate escapes are refused: they are not Unicode
//! scalar values.
//!
//! `pattern` is ECMA-262 and unanchored: it constrains the value when it matches anywhere in it.
//! The parser turns `^` and `$` into [`Look`] assertions about the whole text; [`pattern_value`]
//! resolves them by distributing the pattern into branches with a known anchoring and giving each
//! unanchored side a `.*` (any code point, newlines included).

use super::digits::{fixed_width_range, hex_digit};
use crate::regex::{ClassSet, Hir, Look, MAX_CODE_POINT};
use foldhash::{HashMap, HashMapExt};
use std::cell::RefCell;
use std::sync::LazyLock;

/// Code points JSON lets stand raw in a string: all but `"`, `\`, the C0 controls and surrogates.
fn raw_set() -> ClassSet {
    ClassSet::from_ranges([
        (0x20, 0x21),
        (0x23, 0x5B),
        (0x5D, 0xD7FF),
        (0xE000, MAX_CODE_POINT),
    ])
}

/// Code points written as `\uXXXX` (four hex digits): controls without a short escape, DEL and the
/// non-ASCII part of the Basic Multilingual Plane.
fn hex_escaped_set() -> ClassSet {
    ClassSet::from_ranges([
        (0x00, 0x07),
        (0x0B, 0x0B),
        (0x0E, 0x1F),
        (0x7F, 0xD7FF),
        (0xE000, 0xFFFF),
    ])
}

/// The short escape letter of a code point, if it has one.
fn short_escape(c: u32) -> Option<char> {
    Some(match c {
        0x22 => '"',
        0x5C => '\\',
        0x2F => '/',
        0x08 => 'b',
        0x0C => 'f',
        0x0A => 'n',
        0x0D => 'r',
        0x09 => 't',
        _ => return None,
    })
}

/// Code points from DEL up (surrogates aside): every one is spelled raw or as a `\u` escape, and
/// most large classes hold all of them.
static UPPER_SET: LazyLock<ClassSet> =
    LazyLock::new(|| ClassSet::from_ranges([(0x7F, 0xD7FF), (0xE000, MAX_CODE_POINT)]));

/// The ASCII code points that have an escape form: `"`, `\`, `/` and the C0 controls.
static ESCAPED_ASCII_SET: LazyLock<ClassSet> = LazyLock::new(|| {
    ClassSet::from_ranges([(0x00, 0x1F), (0x22, 0x22), (0x2F, 0x2F), (0x5C, 0x5C)])
});

/// The rest of ASCII: printable characters whose one spelling is themselves.
static PLAIN_ASCII_SET: LazyLock<ClassSet> =
    LazyLock::new(|| ClassSet::range(0, 0x7E).difference(&ESCAPED_ASCII_SET));

/// The spellings of [`UPPER_SET`], one pinned node for the process.
///
/// A class that leaves out a few ASCII characters (`[^"]`, or "any character but the ones that
/// continue a declared name", at every node of a trie of names) spells its non-ASCII part exactly
/// like every other such class: raw UTF-8 of a million code points and the hex escapes of the
/// Basic Multilingual Plane and of surrogate pairs, about a hundred automaton states. Spelled in
/// place it would be repeated per class; held here, every class refers to one automaton, built
/// once per process.
static UPPER_SPELLINGS: LazyLock<Hir> =
    LazyLock::new(|| Hir::shared(encode_plain_class(&UPPER_SET)).pinned());

/// Every spelling of a code point but the raw printable ASCII ones (`/` aside), one pinned node
/// for the process: what [`ESCAPED_ASCII_SET`] and [`UPPER_SET`] spell together.
///
/// A class that holds both of those sets differs from "any character" only in which printable
/// ASCII characters it lacks, and those have no escape form (the spelling policy gives printable
/// ASCII none but `\"`, `\\` and `\/`). So its spellings are a class of raw bytes and this node,
/// whatever it leaves out. That is the class at every node of a trie of declared member names
/// ("any character no name continues with"): spelled in full it repeated the short and `\u00XX`
/// escapes at each node, a few dozen expression nodes and automaton states apiece; here each
/// node costs one byte class and a reference.
static ESCAPES_AND_UPPER_SPELLINGS: LazyLock<Hir> = LazyLock::new(|| {
    Hir::shared(encode_plain_class(&ESCAPED_ASCII_SET.union(&UPPER_SET))).pinned()
});

/// The spellings of each ASCII code point, built once: constants and property names are spelled
/// a character at a time, and a schema with a large `enum` has tens of thousands of characters,
/// each of which would otherwise cost a few class-set operations.
static ASCII_SPELLINGS: LazyLock<Vec<Hir>> = LazyLock::new(|| {
    (0..0x80)
        .map(|c| encode_plain_class(&ClassSet::single(c)))
        .collect()
});

/// Whether a byte is in [`PLAIN_ASCII_SET`]: printable ASCII, and not `"`, `\` or `/`.
fn spelled_only_raw(b: u8) -> bool {
    (0x20..0x7F).contains(&b) && !matches!(b, b'"' | b'\\' | b'/')
}

/// The JSON spellings of one code point.
fn encode_char(c: char) -> Hir {
    match ASCII_SPELLINGS.get(c as usize) {
        Some(h) => h.clone(),
        None => encode_class(&ClassSet::single(c as u32)),
    }
}

/// The JSON spellings (inside the quotes) of every code point in `set`.
fn encode_class(set: &ClassSet) -> Hir {
    if !set.is_superset(&UPPER_SET) {
        return encode_plain_class(set);
    }
    if set.is_superset(&ESCAPED_ASCII_SET) {
        // The pinned node spells the escaped characters (`/` raw as well), so only the plain
        // ASCII the set holds is left.
        return Hir::alternation([
            Hir::class(set.intersect(&PLAIN_ASCII_SET)),
            ESCAPES_AND_UPPER_SPELLINGS.clone(),
        ]);
    }
    let below = set.difference(&UPPER_SET);
    Hir::alternation([encode_plain_class(&below), UPPER_SPELLINGS.clone()])
}

/// Classes a thread keeps the spellings of ([`encode_plain_class`]); past it the memo starts over.
const SPELLED_CLASSES: usize = 1024;

thread_local! {
    /// Spellings of the classes met before on this thread. A schema spells the same few classes
    /// over and over: "any character but the ones that continue a declared name" at every node
    /// of a trie of names, the same pattern classes in every property, and each spelling is a
    /// few dozen class-set operations and a digit-by-digit range of `\u` escapes. Copying a
    /// spelling costs a fraction of that; the memo is bounded, so hostile schemas cannot grow it.
    static SPELLED: RefCell<HashMap<ClassSet, Hir>> = RefCell::new(HashMap::new());
}

/// [`encode_class`], spelled out in full (remembered per thread, see [`SPELLED`]).
fn encode_plain_class(set: &ClassSet) -> Hir {
    if let Some(known) = SPELLED.with(|memo| memo.borrow().get(set).cloned()) {
        return known;
    }
    let spelled = spell_plain_class(set);
    SPELLED.with(|memo| {
        let mut memo = memo.borrow_mut();
        if memo.len() >= SPELLED_CLASSES {
            memo.clear();
        }
        memo.insert(set.clone(), spelled.clone());
    });
    spelled
}

/// The spellings of every code point in `set`: raw where JSON allows it, short escapes, and `\u`
/// escapes (surrogate pairs above the Basic Multilingual Plane).
fn spell_plain_class(set: &ClassSet) -> Hir {
    let raw = set.intersect(&raw_set());
    let shorts: Vec<(u32, u32)> = [0x22, 0x5C, 0x2F, 0x08, 0x0C, 0x0A, 0x0D, 0x09]
        .into_iter()
        .filter(|&c| set.contains(c))
        .filter_map(short_escape)
        .map(|l| (l as u32, l as u32))
        .collect();
    let mut hex_forms = Vec::new();
    for &(lo, hi) in set.intersect(&hex_escaped_set()).ranges() {
        hex_forms.push(fixed_width_range(lo as u64, hi as u64, 4, 16, hex_digit));
    }
    for &(lo, hi) in set
        .intersect(&ClassSet::range(0x10000, MAX_CODE_POINT))
        .ranges()
    {
        hex_forms.extend(surrogate_pairs(lo, hi));
    }
    let escapes = Hir::alternation([
        Hir::class(ClassSet::from_ranges(shorts)),
        if hex_forms.is_empty() {
            Hir::nothing()
        } else {
            Hir::concat([Hir::literal("u"), Hir::alternation(hex_forms)])
        },
    ]);
    Hir::alternation([
        Hir::class(raw),
        if escapes.is_nothing() {
            escapes
        } else {
            Hir::concat([Hir::literal("\\"), escapes])
        },
    ])
}

/// `XXXX\uYYYY` (after a leading `\u`) for the astral code points `lo..=hi`.
fn surrogate_pairs(lo: u32, hi: u32) -> Vec<Hir> {
    let high = |c: u32| 0xD800 + ((c - 0x10000) >> 10);
    let low = |c: u32| 0xDC00 + ((c - 0x10000) & 0x3FF);
    let pair = |h_lo: u32, h_hi: u32, l_lo: u32, l_hi: u32| {
        Hir::concat([
            fixed_width_range(h_lo as u64, h_hi as u64, 4, 16, hex_digit),
            Hir::literal("\\u"),
            fixed_width_range(l_lo as u64, l_hi as u64, 4, 16, hex_digit),
        ])
    };
    let (h1, h2) = (high(lo), high(hi));
    if h1 == h2 {
        return vec![pair(h1, h1, low(lo), low(hi))];
    }
    let mut out = vec![pair(h1, h1, low(lo), 0xDFFF)];
    if h2 > h1 + 1 {
        out.push(pair(h1 + 1, h2 - 1, 0xDC00, 0xDFFF));
    }
    out.push(pair(h2, h2, 0xDC00, low(hi)));
    out
}

/// The JSON spellings of the string values `value` matches (the text between the quotes).
/// `Err` only for an anchor left in `value`, which callers resolve first.
pub(crate) fn encode(value: &Hir) -> Result<Hir, String> {
    Ok(match value {
        Hir::Empty => Hir::Empty,
        // Printable ASCII but `"`, `\` and `/` is spelled raw and only raw, so runs of it stay
        // literal: property names and constants are mostly such runs, and a node per character
        // would be most of their expression. A literal that is one such run (most are) is kept
        // as it is, without the walk below.
        Hir::Literal(bytes) if bytes.iter().all(|&b| spelled_only_raw(b)) => value.clone(),
        Hir::Literal(bytes) => {
            let s = std::str::from_utf8(bytes)
                .map_err(|_| "a literal that is not valid UTF-8".to_string())?;
            let mut parts = Vec::new();
            let mut rest = s;
            while let Some(c) = rest.chars().next() {
                let run = rest.bytes().take_while(|&b| spelled_only_raw(b)).count();
                if run > 0 {
                    parts.push(Hir::literal(&rest[..run]));
                    rest = &rest[run..];
                } else {
                    parts.push(encode_char(c));
                    rest = &rest[c.len_utf8()..];
                }
            }
            Hir::concat(parts)
        }
        Hir::Class(set) => encode_class(set),
        Hir::Look(_) => return Err("an anchor (^ or $) where the pattern cannot honour it".into()),
        Hir::Concat(v) => Hir::concat(v.iter().map(encode).collect::<Result<Vec<_>, _>>()?),
        Hir::Alternation(v) => {
            Hir::alternation(v.iter().map(encode).collect::<Result<Vec<_>, _>>()?)
        }
        Hir::Repeat { sub, min, max } => Hir::repeat(encode(sub)?, *min, *max),
        Hir::Intersection(v) => {
            Hir::intersection(v.iter().map(encode).collect::<Result<Vec<_>, _>>()?)
        }
        // Complement of the value language = every spelled string minus the spelled language.
        Hir::Complement(sub) => {
            Hir::intersection([Hir::complement(encode(sub)?), any_string_body()])
        }
        Hir::Shared(s) => encode(s.hir())?,
        // Automata are built for numbers, not for string values.
        Hir::Automaton(_) => return Err("an automaton where a string value was expected".into()),
        Hir::Call(_) | Hir::Grammar(_) => {
            return Err("a recursive rule where a string value was expected".into())
        }
    })
}

/// Any string value: any number of any code points.
pub(crate) fn any_value() -> Hir {
    Hir::repeat(Hir::any_char(), 0, None)
}

/// The JSON spellings of any string body.
pub(crate) fn any_string_body() -> Hir {
    Hir::repeat(encode_class(&ClassSet::full()), 0, None)
}

/// The JSON text (quotes included) of the values `value` matches.
pub(crate) fn string_text(value: &Hir) -> Result<Hir, String> {
    Ok(Hir::concat([
        Hir::literal("\""),
        encode(value)?,
        Hir::literal("\""),
    ]))
}

/// The canonical JSON text of a string (raw UTF-8, short escapes, `\u00xx` for other controls).
pub(crate) fn canonical_text(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// Any string value except the given ones, as two tries over the words: the strings that end
/// inside the trie (a proper prefix of some word that is not itself a word), and the strings that
/// leave it, at some node, by a character none of the words continues with, followed by anything.
///
/// A single trie whose every node says "end here, go on into a child, or leave for good" is the
/// same language, but it copies "anything" once per node. That copy is the expensive part once
/// spelled as JSON (every escape form of every character, a few hundred automaton states), and an
/// object of a hundred declared names with other members allowed has a few thousand nodes: the
/// copies were most of its automaton. Here "anything" occurs once, after the leaving trie, and a
/// node costs its class of leaving characters alone.
pub(crate) fn strings_except(words: &[&str]) -> Hir {
    /// The words that continue past `depth`, grouped by the character they continue with. The
    /// words are sorted, so the words below one trie node are a run, and so is each group.
    fn children(words: &[Vec<char>], depth: usize) -> Vec<(char, &[Vec<char>])> {
        let longer = &words[words.partition_point(|w| w.len() <= depth)..];
        longer
            .chunk_by(|a, b| a[depth] == b[depth])
            .map(|group| (group[0][depth], group))
            .collect()
    }
    /// Proper prefixes of the words that are not words themselves.
    fn ending(words: &[Vec<char>], depth: usize) -> Hir {
        let mut alts = Vec::new();
        if !words.iter().any(|w| w.len() == depth) {
            alts.push(Hir::Empty);
        }
        for (c, sub) in children(words, depth) {
            alts.push(Hir::concat([
                Hir::literal(c.encode_utf8(&mut [0; 4])),
                ending(sub, depth + 1),
            ]));
        }
        Hir::alternation(alts)
    }
    /// A prefix of the words, then one character that no word continues with.
    fn leaving(words: &[Vec<char>], depth: usize) -> Hir {
        let next = children(words, depth);
        let others =
            ClassSet::from_ranges(next.iter().map(|&(c, _)| (c as u32, c as u32))).negate();
        let mut alts = vec![Hir::class(others)];
        for (c, sub) in next {
            alts.push(Hir::concat([
                Hir::literal(c.encode_utf8(&mut [0; 4])),
                leaving(sub, depth + 1),
            ]));
        }
        Hir::alternation(alts)
    }
    if words.is_empty() {
        return any_value();
    }
    let mut words: Vec<Vec<char>> = words.iter().map(|w| w.chars().collect()).collect();
    words.sort_unstable();
    Hir::alternation([
        ending(&words, 0),
        Hir::concat([leaving(&words, 0), any_value()]),
    ])
}

/// Fewest and most code points a value language's strings have (`None`: unbounded).
pub(crate) fn length_range(h: &Hir) -> (u64, Option<u64>) {
    match h {
        Hir::Empty | Hir::Look(_) => (0, Some(0)),
        Hir::Literal(b) => {
            let n = String::from_utf8_lossy(b).chars().count() as u64;
            (n, Some(n))
        }
        Hir::Class(_) => (1, Some(1)),
        Hir::Concat(v) => v
            .iter()
            .map(length_range)
            .fold((0, Some(0)), |(a, b), (c, d)| {
                (
                    a.saturating_add(c),
                    b.zip(d).map(|(b, d)| b.saturating_add(d)),
                )
            }),
        Hir::Alternation(v) => {
            let parts: Vec<_> = v.iter().map(length_range).collect();
            let min = parts.iter().map(|p| p.0).min().unwrap_or(0);
            let max = parts
                .iter()
                .try_fold(0u64, |acc, p| p.1.map(|m| acc.max(m)));
            (min, max)
        }
        Hir::Repeat { sub, min, max } => {
            let (a, b) = length_range(sub);
            let hi = match (b, max) {
                (Some(0), _) => Some(0),
                (Some(b), Some(m)) => Some(b.saturating_mul(*m as u64)),
                _ => None,
            };
            (a.saturating_mul(*min as u64), hi)
        }
        Hir::Intersection(v) => {
            let parts: Vec<_> = v.iter().map(length_range).collect();
            let min = parts.iter().map(|p| p.0).max().unwrap_or(0);
            let max = parts.iter().filter_map(|p| p.1).min();
            (min, max)
        }
        Hir::Complement(_) | Hir::Automaton(_) | Hir::Call(_) | Hir::Grammar(_) => (0, None),
        Hir::Shared(s) => length_range(s.hir()),
    }
}

/// The most branches an anchored pattern may be distributed into.
const MAX_ANCHOR_BRANCHES: usize = 256;

/// A pattern branch with known anchoring: `start`/`end` say whether it is tied to the start/end of
/// the value.
type Anchored = (bool, Hir, bool);

fn has_look(h: &Hir) -> bool {
    h.anchors() != (false, false)
}

fn split_anchors(h: &Hir) -> Result<Vec<Anchored>, String> {
    if !has_look(h) {
        return Ok(vec![(false, h.clone(), false)]);
    }
    let out = match h {
        Hir::Look(Look::Start) => vec![(true, Hir::Empty, false)],
        Hir::Look(Look::End) => vec![(false, Hir::Empty, true)],
        Hir::Alternation(v) => {
            let mut out = Vec::new();
            for child in v {
                out.extend(split_anchors(child)?);
                if out.len() > MAX_ANCHOR_BRANCHES {
                    return Err("too many anchored alternatives".into());
                }
            }
            out
        }
        Hir::Concat(v) => {
            let mut acc: Vec<Anchored> = vec![(false, Hir::Empty, false)];
            for child in v {
                let parts = split_anchors(child)?;
                let mut next = Vec::new();
                for (s1, b1, e1) in &acc {
                    for (s2, b2, e2) in &parts {
                        let (mut b1, mut b2) = (b1.clone(), b2.clone());
                        // A start anchor later on holds only if everything before it was empty.
                        if *s2 {
                            if !b1.nullable() {
                                continue;
                            }
                            b1 = Hir::Empty;
                        }
                        // An end anchor earlier on holds only if everything after it is empty.
                        if *e1 {
                            if !b2.nullable() {
                                continue;
                            }
                            b2 = Hir::Empty;
                        }
                        next.push((*s1 || *s2, Hir::concat([b1, b2]), *e1 || *e2));
                    }
                }
                if next.len() > MAX_ANCHOR_BRANCHES {
                    return Err("too many anchored alternatives".into());
                }
                acc = next;
            }
            acc
        }
        Hir::Repeat { sub, min, max } => {
            let max = max.ok_or("an anchor inside an unbounded repetition")?;
            if max > 4 {
                return Err("an anchor inside a repetition of more than 4".into());
            }
            // Spell the repetition out: `min` copies, then up to `max - min` optional ones.
            let mut alts = Vec::new();
            for n in *min..=max {
                alts.push(Hir::concat(std::iter::repeat_n(
                    (**sub).clone(),
                    n as usize,
                )));
            }
            let mut out = Vec::new();
            for a in alts {
                out.extend(split_anchors(&a)?);
            }
            out
        }
        Hir::Shared(s) => split_anchors(s.hir())?,
        _ => return Err("an anchor inside an intersection or complement".into()),
    };
    Ok(out)
}

/// The value language of a JSON Schema `pattern`: strings in which it matches somewhere, with `^`
/// and `$` tied to the start and end of the value. `Err` carries why the pattern is refused.
pub(crate) fn pattern_value(pattern: &str) -> Result<Hir, String> {
    let h = crate::regex::parse_ecma(pattern).map_err(|e| e.to_string())?;
    unanchor(&h)
}

/// Resolves anchors as described for [`pattern_value`].
pub(crate) fn unanchor(h: &Hir) -> Result<Hir, String> {
    let branches = split_anchors(h)?;
    Ok(Hir::alternation(branches.into_iter().map(|(s, b, e)| {
        Hir::concat([
            if s { Hir::Empty } else { any_value() },
            b,
            if e { Hir::Empty } else { any_value() },
        ])
    })))
}

/// A pattern read with full-match semantics over a region of a larger text (a regex inside a
/// structural tag): `^` and `$` hold at the region's edges, so a branch that asserts them there
/// keeps its body, and the anchors go. `Err` when an anchor stands where the region cannot honour
/// it.
pub(crate) fn whole_match(h: &Hir) -> Result<Hir, String> {
    Ok(Hir::alternation(
        split_anchors(h)?.into_iter().map(|(_, body, _)| body),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_schema::matcher::matches;

    fn text_matches(value: &Hir, json: &str) -> bool {
        matches(&string_text(value).unwrap(), json)
    }

    /// The spellings of one code point: canonical, and escaped as ASCII (hex in both cases).
    fn spellings_of(c: char) -> Vec<String> {
        let mut ascii = String::from("\"");
        for unit in c.to_string().encode_utf16() {
            match unit {
                0x22 => ascii.push_str("\\\""),
                0x5C => ascii.push_str("\\\\"),
                0x08 => ascii.push_str("\\b"),
                0x0C => ascii.push_str("\\f"),
                0x0A => ascii.push_str("\\n"),
                0x0D => ascii.push_str("\\r"),
                0x09 => ascii.push_str("\\t"),
                u if (0x20..0x7F).contains(&u) => ascii.push(u as u8 as char),
                u => ascii.push_str(&format!("\\u{u:04x}")),
            }
        }
        ascii.push('"');
        let mut out = vec![canonical_text(&c.to_string())];
        if ascii.contains("\\u") {
            // Hex digits in upper case are the same escape.
            out.push(ascii.to_uppercase().replace("\\U", "\\u"));
        }
        out.push(ascii);
        if c == '/' {
            out.push("\"\\/\"".into());
        }
        out
    }

    #[test]
    fn every_code_point_round_trips_in_both_spellings() {
        let any = any_value();
        for c in (0u32..0x800).chain([0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF]) {
            let Some(ch) = char::from_u32(c) else {
                continue;
            };
            let s = ch.to_string();
            let canonical = canonical_text(&s);
            let single = Hir::literal(&s);
            let spellings = spellings_of(ch);
            for text in &spellings {
                assert!(text_matches(&any, text), "{c:#x} {text}");
                assert!(text_matches(&single, text), "{c:#x} literal {text}");
            }
            let other = Hir::literal(if c == 'a' as u32 { "b" } else { "a" });
            assert!(!text_matches(&other, &canonical), "{c:#x}");
        }
        // Forms outside the policy and outside JSON.
        for bad in [
            "\"\\u0041\"",
            "\"\\ud800\"",
            "\"\n\"",
            "\"\\x41\"",
            "\"\\\"",
            "\"a\"b\"",
        ] {
            assert!(!text_matches(&any, bad), "{bad}");
        }
        assert!(text_matches(&Hir::literal("/"), "\"\\/\""));
    }

    #[test]
    fn a_class_spells_exactly_its_members_whatever_it_leaves_out() {
        // Classes that hold every escaped character (spelled through the one shared node of
        // escape forms) and classes that leave some out (spelled in full) alike.
        let holes: &[&[u32]] = &[
            &[],
            &[0x61, 0x62],
            &[0x2F],
            &[0x22],
            &[0x5C, 0x7A],
            &[0x0A],
            &[0x00, 0x41],
            &[0x7F],
            &[0xE9, 0x10000],
        ];
        let probes: Vec<char> = (0u32..0x100)
            .chain([0x7FF, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF])
            .filter_map(char::from_u32)
            .collect();
        for hole in holes {
            let set =
                ClassSet::full().difference(&ClassSet::from_ranges(hole.iter().map(|&c| (c, c))));
            let class = Hir::class(set);
            for &c in &probes {
                let member = !hole.contains(&(c as u32));
                for text in spellings_of(c) {
                    assert_eq!(text_matches(&class, &text), member, "{hole:x?} {text}");
                }
            }
        }
    }

    #[test]
    fn literals_match_every_mix_of_their_characters_spellings() {
        let words = [
            "plain words",
            "a/b",
            "x\"y\\z",
            "é-ü",
            "tab\there",
            "😀!",
            "/",
        ];
        for word in words {
            let literal = Hir::literal(word);
            let per_char: Vec<Vec<String>> = word
                .chars()
                .map(|c| {
                    let quoted = spellings_of(c);
                    quoted
                        .iter()
                        .map(|q| q[1..q.len() - 1].to_string())
                        .collect()
                })
                .collect();
            for choice in 0..4 {
                let body: String = per_char
                    .iter()
                    .enumerate()
                    .map(|(i, forms)| forms[(choice + i) % forms.len()].as_str())
                    .collect();
                let text = format!("\"{body}\"");
                assert!(text_matches(&literal, &text), "{word:?} {text}");
                for other in words.iter().filter(|&&w| w != word) {
                    assert!(
                        !text_matches(&Hir::literal(other), &text),
                        "{other:?} {text}"
                    );
                }
            }
        }
    }

    #[test]
    fn complement_is_taken_among_strings() {
        let not_ab = Hir::complement(Hir::literal("ab"));
        assert!(text_matches(&not_ab, "\"abc\"") && text_matches(&not_ab, "\"\""));
        assert!(!text_matches(&not_ab, "\"ab\"") && !text_matches(&not_ab, "\"a\\u0062\""));
        assert!(!text_matches(&not_ab, "\"ab"));
    }

    #[test]
    fn patterns_are_unanchored_unless_anchored() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            ("a", &["a", "xay", "ba"], &["", "b"]),
            ("^a", &["a", "ab"], &["ba", ""]),
            ("a$", &["a", "ba"], &["ab"]),
            ("^a$|^b", &["a", "b", "bc"], &["ab", "cb"]),
            ("(^|,)x", &["x", "a,x", "x1"], &["ax", ""]),
            ("^$", &[""], &["a"]),
            ("a^b", &[], &["ab", "a^b", ""]),
            ("^(a|b$)", &["a", "ab", "b"], &["bc", "cb"]),
            ("^\\d{4}-\\d{2}$", &["2024-01"], &["2024-1", "x2024-01"]),
        ];
        for (p, yes, no) in cases {
            let h = pattern_value(p).unwrap();
            for s in *yes {
                assert!(matches(&h, s), "{p} should match {s:?}: {h}");
            }
            for s in *no {
                assert!(!matches(&h, s), "{p} should not match {s:?}: {h}");
            }
        }
        assert!(pattern_value("(?=a)").is_err());
        assert!(pattern_value("(^a)*").is_err());
    }

    #[test]
    fn strings_except_excludes_exactly_the_words() {
        let h = strings_except(&["a", "ab", "b"]);
        for (s, ok) in [
            ("", true),
            ("a", false),
            ("ab", false),
            ("b", false),
            ("abc", true),
            ("aa", true),
            ("c", true),
        ] {
            assert_eq!(matches(&h, s), ok, "{s}");
        }
    }

    #[test]
    fn strings_except_agrees_with_membership_on_every_short_string() {
        let alphabet = ['a', 'b', 'é', '"'];
        let mut texts = vec![String::new()];
        for len in 1..=4 {
            let shorter: Vec<String> = texts
                .iter()
                .filter(|t| t.chars().count() == len - 1)
                .cloned()
                .collect();
            for t in shorter {
                for c in alphabet {
                    texts.push(format!("{t}{c}"));
                }
            }
        }
        let word_sets: &[&[&str]] = &[
            &[""],
            &["a"],
            &["", "ab", "abé"],
            &["aa", "ab", "ba", "bb"],
            &["é\"", "éa", "a"],
            &["abab", "aba", "b"],
        ];
        for words in word_sets {
            let h = strings_except(words);
            for t in &texts {
                assert_eq!(
                    matches(&h, t),
                    !words.contains(&t.as_str()),
                    "{words:?} {t:?}"
                );
            }
        }
    }

    #[test]
    fn lengths() {
        let h = crate::regex::parse("a{2,3}(bc|d)?").unwrap();
        assert_eq!(length_range(&h), (2, Some(5)));
        assert_eq!(length_range(&any_value()), (0, None));
    }
}
