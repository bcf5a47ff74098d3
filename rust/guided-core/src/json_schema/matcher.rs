//! Matching one short string against an HIR, by Brzozowski derivatives.
//!
//! The compiler sometimes has to ask a yes/no question about a single concrete string while it
//! builds: does the declared property name `"id"` match this `patternProperties` pattern, does the
//! enum value `"abc"` satisfy the `pattern` and `maxLength` beside it, is this name allowed by
//! `propertyNames`? Building an automaton for each question would be wasteful, and the HIR may
//! hold intersections and complements that only the automaton layer knows how to determinize.
//!
//! Derivatives answer all of that with a few dozen lines: the derivative of a language by a code
//! point `c` is the set of suffixes of its words that start with `c`, and the rules for
//! concatenation, alternation, repetition, intersection and complement are all local. A string
//! matches when the derivative by each of its code points in turn accepts the empty string. The
//! smart constructors of [`Hir`] fold away dead branches as we go, so for the short strings the
//! compiler asks about the intermediate expressions stay small. The cost is proportional to the
//! string length times the size of the expression, which is fine for names and enum values and
//! would be a poor choice for long inputs; tests use it as an oracle on short strings only.
//!
//! Shared nodes are looked through: a derivative only unfolds the part of the expression the
//! string has reached, and copies the rest by reference. An automaton's derivative is the same
//! automaton, one step on.
//!
//! Neither do calls of grammar rules ([`Hir::Call`]): a rule's body is held by its grammar, and
//! the compiler refuses to match a value against a recursive language.
//!
//! Anchors ([`Hir::Look`]) never reach this module: the schema compiler resolves them before it
//! builds anything it matches against.

use crate::regex::Hir;

/// Whether the whole of `text` is in the language of `h`.
pub(crate) fn matches(h: &Hir, text: &str) -> bool {
    let mut cur = h.clone();
    for c in text.chars() {
        if cur.is_nothing() {
            return false;
        }
        cur = derive(&cur, c);
    }
    cur.nullable()
}

/// The derivative of `h` by the code point `c`.
pub(crate) fn derive(h: &Hir, c: char) -> Hir {
    match h {
        Hir::Empty | Hir::Look(_) => Hir::nothing(),
        Hir::Literal(bytes) => {
            let mut buf = [0u8; 4];
            let enc = c.encode_utf8(&mut buf).as_bytes();
            if bytes.starts_with(enc) {
                Hir::literal_bytes(bytes[enc.len()..].to_vec())
            } else {
                Hir::nothing()
            }
        }
        Hir::Class(set) => {
            if set.contains(c as u32) {
                Hir::Empty
            } else {
                Hir::nothing()
            }
        }
        Hir::Concat(v) => {
            let mut alts = Vec::new();
            for (i, child) in v.iter().enumerate() {
                let d = derive(child, c);
                if !d.is_nothing() {
                    alts.push(Hir::concat(
                        std::iter::once(d).chain(v[i + 1..].iter().cloned()),
                    ));
                }
                if !child.nullable() {
                    break;
                }
            }
            Hir::alternation(alts)
        }
        Hir::Alternation(v) => Hir::alternation(v.iter().map(|x| derive(x, c))),
        Hir::Repeat { sub, min, max } => {
            if *max == Some(0) {
                return Hir::nothing();
            }
            let d = derive(sub, c);
            if d.is_nothing() {
                return d;
            }
            // A nullable body can stand in for the missing iterations, so the minimum drops to 0.
            let min = if sub.nullable() {
                0
            } else {
                min.saturating_sub(1)
            };
            let max = max.map(|m| m - 1);
            Hir::concat([d, Hir::repeat((**sub).clone(), min, max)])
        }
        Hir::Intersection(v) => Hir::intersection(v.iter().map(|x| derive(x, c))),
        Hir::Complement(sub) => Hir::complement(derive(sub, c)),
        Hir::Shared(s) => derive(s.hir(), c),
        Hir::Automaton(a) => {
            let mut buf = [0u8; 4];
            let mut cur = Some(a.clone());
            for &b in c.encode_utf8(&mut buf).as_bytes() {
                cur = cur.and_then(|a| a.step(b));
            }
            cur.map_or_else(Hir::nothing, Hir::Automaton)
        }
        // A rule's body lives in its grammar, which this module does not see: the compiler never
        // asks about a language with calls (`enum_language` refuses first).
        Hir::Call(_) | Hir::Grammar(_) => {
            debug_assert!(false, "derivative of a grammar call");
            Hir::nothing()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regex::parse;

    fn m(p: &str, s: &str) -> bool {
        matches(&parse(p).unwrap(), s)
    }

    #[test]
    fn basic_constructs() {
        assert!(m("abc", "abc") && !m("abc", "ab"));
        assert!(m("a(b|cd)*e", "abcdbe") && !m("a(b|cd)*e", "acbe"));
        assert!(m("x{2,3}", "xxx") && !m("x{2,3}", "xxxx") && !m("x{2,3}", "x"));
        assert!(m("(a?){3}b", "ab") && m("(a?){3}b", "b"));
        assert!(m("é+", "éé") && !m("é+", "e"));
    }

    #[test]
    fn boolean_operators() {
        let h = Hir::intersection([parse("[a-z]*").unwrap(), parse(".{2,3}").unwrap()]);
        assert!(matches(&h, "ab") && !matches(&h, "a") && !matches(&h, "aB"));
        let h = Hir::complement(parse("a*").unwrap());
        assert!(matches(&h, "b") && matches(&h, "ab") && !matches(&h, "") && !matches(&h, "aa"));
    }
}
