//! Product construction: intersection and complement of DFAs.
//!
//! Regular languages are closed under intersection and complement, and a DFA shows why in a few
//! lines: run two DFAs side by side (a state of the product is a pair of states) and decide
//! acceptance from both flags. Intersection accepts when both do; complement runs the operand next
//! to a DFA for "any valid UTF-8 string" and accepts when that one does and the operand does not.
//! Complement is relative to valid UTF-8 rather than to all byte strings because constrained
//! text is text: a complement that admitted a stray `0xFF` would let a generator emit garbage.
//!
//! The two operands usually split the bytes differently, so the product first builds the joint
//! classes (bytes equal under both operands' classes) and steps both automata on one representative
//! byte per joint class. Only pairs reachable from the start pair are created, at most
//! [`DfaConfig::max_states`] of them, checked before each new pair; a pair in which progress is
//! impossible (either side dead for an intersection, the UTF-8 side dead for a complement) is
//! the dead state directly. The result is minimized like any other DFA, which also folds the pairs
//! that are dead in less obvious ways.
//!
//! The cost is at most `|A| * |B|` pairs times the number of joint classes, bounded by the limit.

use super::{minimize, ByteClasses, Dfa, DfaConfig, Raw};
use crate::error::{Error, Result};
use crate::regex::Hir;
use rustc_hash::FxHashMap;
use std::sync::OnceLock;

/// Strings both DFAs match.
pub fn intersection(a: &Dfa, b: &Dfa, config: &DfaConfig) -> Result<Dfa> {
    product(
        a,
        b,
        config,
        |x, y| x && y,
        |sa, sb| sa == a.dead() || sb == b.dead(),
    )
}

/// Valid UTF-8 strings `a` does not match.
pub fn complement(a: &Dfa, config: &DfaConfig) -> Result<Dfa> {
    let utf8 = valid_utf8()?;
    product(utf8, a, config, |u, x| u && !x, |su, _| su == utf8.dead())
}

/// The DFA of every valid UTF-8 string, built once.
pub fn valid_utf8() -> Result<&'static Dfa> {
    static UTF8: OnceLock<Result<Dfa>> = OnceLock::new();
    UTF8.get_or_init(|| {
        Dfa::from_hir(
            &Hir::repeat(Hir::any_char(), 0, None),
            &DfaConfig::default(),
        )
    })
    .as_ref()
    .map_err(Error::clone)
}

fn product(
    a: &Dfa,
    b: &Dfa,
    config: &DfaConfig,
    accept: impl Fn(bool, bool) -> bool,
    dead: impl Fn(u32, u32) -> bool,
) -> Result<Dfa> {
    if config.max_states < 2 {
        return Err(Error::size_limit("max_states", 2, config.max_states));
    }
    let classes = ByteClasses::from_keys(|byte| (a.classes().get(byte), b.classes().get(byte)));
    let reps = classes.representatives().to_vec();
    let k = reps.len();
    let mut pairs: Vec<(u32, u32)> = vec![(a.dead(), b.dead())];
    let mut ids: FxHashMap<(u32, u32), u32> = FxHashMap::default();
    let start = (a.start(), b.start());
    let start_dead = dead(start.0, start.1);
    pairs.push(start);
    if !start_dead {
        ids.insert(start, 1);
    }
    let mut table = vec![0u32; k];
    let mut accepting = vec![false];
    let mut i = 1;
    while i < pairs.len() {
        let (x, y) = pairs[i];
        if i == 1 && start_dead {
            table.extend(std::iter::repeat_n(0, k));
            accepting.push(false);
            i += 1;
            continue;
        }
        for &byte in &reps {
            let next = (a.next_state(x, byte), b.next_state(y, byte));
            let id = if dead(next.0, next.1) {
                0
            } else if let Some(&id) = ids.get(&next) {
                id
            } else {
                if pairs.len() >= config.max_states {
                    return Err(Error::size_limit(
                        "max_states",
                        pairs.len() + 1,
                        config.max_states,
                    ));
                }
                let id = pairs.len() as u32;
                pairs.push(next);
                ids.insert(next, id);
                id
            };
            table.push(id);
        }
        accepting.push(accept(a.is_accepting(x), b.is_accepting(y)));
        i += 1;
    }
    let raw = Raw {
        classes,
        table,
        accepting,
    };
    Ok(Dfa::from_minimal(minimize::minimize(&raw)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regex::ClassSet;

    fn dfa(h: &Hir) -> Dfa {
        Dfa::from_hir(h, &DfaConfig::default()).unwrap()
    }

    #[test]
    fn intersection_of_two_constraints() {
        let ab = Hir::repeat(Hir::class(ClassSet::range(0x61, 0x62)), 0, None);
        let even = Hir::repeat(Hir::class(ClassSet::range(0x61, 0x7A)), 0, None);
        let even = Hir::repeat(
            Hir::concat([even.clone(), Hir::literal("a"), even]),
            0,
            None,
        );
        let a = dfa(&ab);
        let b = dfa(&even);
        let both = intersection(&a, &b, &DfaConfig::default()).unwrap();
        for s in ["", "a", "ab", "bab", "xa", "aab", "bbb"] {
            assert_eq!(
                both.is_match(s.as_bytes()),
                a.is_match(s.as_bytes()) && b.is_match(s.as_bytes()),
                "{s}"
            );
        }
    }

    #[test]
    fn complement_is_relative_to_valid_utf8() {
        let a = dfa(&Hir::literal("ab"));
        let not_ab = complement(&a, &DfaConfig::default()).unwrap();
        assert!(!not_ab.is_match(b"ab"));
        assert!(not_ab.is_match(b"") && not_ab.is_match(b"abc") && not_ab.is_match("é".as_bytes()));
        assert!(!not_ab.is_match(b"\xC3") && !not_ab.is_match(b"a\xFF"));
        // Complementing twice gives the language back, state for state.
        let back = complement(&not_ab, &DfaConfig::default()).unwrap();
        assert_eq!(back, a);
        // The complement of everything is empty.
        let none = complement(valid_utf8().unwrap(), &DfaConfig::default()).unwrap();
        assert!(none.matches_nothing() && none.num_states() == 2);
    }

    #[test]
    fn product_respects_the_state_limit() {
        let any = Hir::repeat(Hir::any_char(), 0, None);
        let ends_a = Hir::concat([
            any.clone(),
            Hir::literal("a"),
            Hir::repeat(Hir::any_char(), 5, Some(5)),
        ]);
        let ends_b = Hir::concat([
            any,
            Hir::literal("b"),
            Hir::repeat(Hir::any_char(), 5, Some(5)),
        ]);
        let config = DfaConfig { max_states: 200 };
        let (a, b) = (dfa(&ends_a), dfa(&ends_b));
        assert!(matches!(
            intersection(&a, &b, &config),
            Err(Error::SizeLimit { ref limit, .. }) if limit == "max_states"
        ));
    }
}
