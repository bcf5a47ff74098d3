//! Constant values: JSON Schema equality, and the texts that spell one value.
//!
//! `const` and `enum` compare instances by value, not by text: `1` equals `1.0`, objects are equal
//! whatever their key order, strings after decoding. [`json_equal`] is that equality. The language
//! of a constant is every text the output policy admits for it ([`Compiler::literal`]): numbers in
//! all their plain (and, where the location allows, exponent) spellings, strings in every spelling
//! the string encoder admits, whitespace between tokens, and object members in the location's
//! strict declared order, so that a constant's language is closed under the same policy as every
//! other language built for that location. [`Compiler::canonical`] picks one of those texts (compact,
//! shortest number, raw UTF-8), which is what the compiler matches when it asks whether a constant
//! satisfies the rest of its schema.

use std::hash::{Hash, Hasher};
use std::rc::Rc;

use rustc_hash::{FxHashMap, FxHasher};
use serde_json::Value;

use super::compile::Compiler;
use super::decimal::Decimal;
use super::layout::Loc;
use super::numbers::texts_of;
use super::strings::{canonical_text, string_text};
use crate::error::Result;
use crate::regex::Hir;

/// JSON Schema equality: numbers by value, objects regardless of key order.
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            match (Decimal::from_json(x), Decimal::from_json(y)) {
                (Some(x), Some(y)) => x == y,
                _ => x == y,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// A hash consistent with [`json_equal`]: equal values hash alike (numbers by their decimal
/// value, object members in any order), so lists of constants are compared through hash maps
/// instead of pairwise. A number `Decimal` cannot hold hashes by its text, as `json_equal`
/// compares such numbers by their JSON form.
pub(crate) fn json_hash(v: &Value) -> u64 {
    let mut h = FxHasher::default();
    match v {
        Value::Null => 0u8.hash(&mut h),
        Value::Bool(b) => (1u8, b).hash(&mut h),
        Value::Number(n) => match Decimal::from_json(n) {
            Some(d) => (2u8, d).hash(&mut h),
            None => (3u8, n.to_string()).hash(&mut h),
        },
        Value::String(s) => (4u8, s).hash(&mut h),
        Value::Array(items) => {
            (5u8, items.len()).hash(&mut h);
            items.iter().for_each(|x| json_hash(x).hash(&mut h));
        }
        Value::Object(members) => {
            // Member order must not matter: combine the members' hashes commutatively.
            let members = members.iter().fold(0u64, |acc, (k, x)| {
                let mut m = FxHasher::default();
                (k, json_hash(x)).hash(&mut m);
                acc.wrapping_add(m.finish())
            });
            (6u8, members).hash(&mut h);
        }
    }
    h.finish()
}

/// `values` without repeats by [`json_equal`], first occurrences kept in order.
pub(crate) fn json_unique<'v>(values: impl IntoIterator<Item = &'v Value>) -> Vec<&'v Value> {
    let mut seen: FxHashMap<u64, Vec<&'v Value>> = FxHashMap::default();
    let mut out = Vec::new();
    for v in values {
        let bucket = seen.entry(json_hash(v)).or_default();
        if !bucket.iter().any(|u| json_equal(u, v)) {
            bucket.push(v);
            out.push(v);
        }
    }
    out
}

/// The values of `kept` that some value of `among` equals by [`json_equal`], in `kept`'s order.
pub(crate) fn json_common<'v>(kept: Vec<&'v Value>, among: &[&Value]) -> Vec<&'v Value> {
    let mut by_hash: FxHashMap<u64, Vec<&Value>> = FxHashMap::default();
    for &x in among {
        by_hash.entry(json_hash(x)).or_default().push(x);
    }
    kept.into_iter()
        .filter(|p| {
            by_hash
                .get(&json_hash(p))
                .is_some_and(|b| b.iter().any(|x| json_equal(p, x)))
        })
        .collect()
}

/// Object keys in the location's declared order, then the others in the value's own order.
fn ordered_keys<'v>(names: &[Rc<str>], obj: &'v serde_json::Map<String, Value>) -> Vec<&'v String> {
    let mut keys: Vec<&String> = names
        .iter()
        .filter_map(|n| obj.get_key_value(n.as_ref()).map(|(k, _)| k))
        .collect();
    for k in obj.keys() {
        if !names.iter().any(|n| n.as_ref() == k) {
            keys.push(k);
        }
    }
    keys
}

impl<'a> Compiler<'a> {
    /// Every admitted text of `v` at the location `loc`.
    pub(crate) fn literal(&self, v: &Value, loc: &Loc<'a>, depth: usize) -> Result<Hir> {
        self.check_nesting(depth)?;
        Ok(match v {
            Value::Null => Hir::literal("null"),
            Value::Bool(b) => Hir::literal(if *b { "true" } else { "false" }),
            Value::Number(n) => match Decimal::from_json(n) {
                Some(d) => texts_of(&d, loc.exponents(&self.doc)),
                None => Hir::literal(&n.to_string()),
            },
            Value::String(s) => string_text(&Hir::literal(s)).map_err(|m| self.internal(&m))?,
            Value::Array(items) => {
                let child = loc.child_item(&self.doc);
                let mut parts = vec![Hir::literal("["), self.ws.clone()];
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        parts.extend([self.ws.clone(), Hir::literal(","), self.ws.clone()]);
                    }
                    parts.push(self.literal(x, &child, depth + 1)?);
                }
                if !items.is_empty() {
                    parts.push(self.ws.clone());
                }
                parts.push(Hir::literal("]"));
                Hir::concat(parts)
            }
            Value::Object(obj) => {
                let names = loc.names(&self.doc);
                let mut parts = vec![Hir::literal("{"), self.ws.clone()];
                for (i, k) in ordered_keys(names, obj).into_iter().enumerate() {
                    if i > 0 {
                        parts.extend([self.ws.clone(), Hir::literal(","), self.ws.clone()]);
                    }
                    let child = loc.child_prop(&self.doc, k);
                    parts.push(string_text(&Hir::literal(k)).map_err(|m| self.internal(&m))?);
                    parts.extend([self.ws.clone(), Hir::literal(":"), self.ws.clone()]);
                    parts.push(self.literal(&obj[k], &child, depth + 1)?);
                }
                if !obj.is_empty() {
                    parts.push(self.ws.clone());
                }
                parts.push(Hir::literal("}"));
                Hir::concat(parts)
            }
        })
    }

    /// One admitted text of `v` at `loc`: compact, raw UTF-8, the shortest plain number.
    pub(crate) fn canonical(&self, v: &Value, loc: &Loc<'a>) -> String {
        let mut out = String::new();
        self.write_canonical(v, loc, &mut out);
        out
    }

    fn write_canonical(&self, v: &Value, loc: &Loc<'a>, out: &mut String) {
        match v {
            Value::Number(n) => match Decimal::from_json(n) {
                Some(d) => out.push_str(&d.to_plain()),
                None => out.push_str(&n.to_string()),
            },
            Value::String(s) => out.push_str(&canonical_text(s)),
            Value::Array(items) => {
                let child = loc.child_item(&self.doc);
                out.push('[');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.write_canonical(x, &child, out);
                }
                out.push(']');
            }
            Value::Object(obj) => {
                out.push('{');
                for (i, k) in ordered_keys(loc.names(&self.doc), obj)
                    .into_iter()
                    .enumerate()
                {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&canonical_text(k));
                    out.push(':');
                    self.write_canonical(&obj[k], &loc.child_prop(&self.doc, k), out);
                }
                out.push('}');
            }
            _ => out.push_str(&v.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equality_is_by_value() {
        assert!(json_equal(&json!(1), &json!(1.0)));
        assert!(json_equal(
            &json!({"a": [1, {"b": 2}]}),
            &json!({"a": [1.0, {"b": 2}]})
        ));
        assert!(!json_equal(&json!([1, 2]), &json!([2, 1])));
        assert!(!json_equal(&json!(false), &json!(0)));
        assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    }

    #[test]
    fn equal_values_hash_alike_and_lists_dedup_by_value() {
        let pairs = [
            (json!(1), json!(1.0)),
            (json!(1e2), json!(100)),
            (json!({"a": 1, "b": [2.0]}), json!({"b": [2], "a": 1.0})),
            (json!("x"), json!("x")),
        ];
        for (a, b) in &pairs {
            assert!(json_equal(a, b));
            assert_eq!(json_hash(a), json_hash(b), "{a} and {b}");
        }
        let list = [
            json!(1),
            json!("1"),
            json!(1.0),
            json!([1]),
            json!([1.0]),
            json!(null),
        ];
        let uniq = json_unique(&list);
        assert_eq!(uniq, vec![&list[0], &list[1], &list[3], &list[5]]);
        let among = [json!(1.00), json!(null)];
        let among: Vec<&Value> = among.iter().collect();
        assert_eq!(json_common(uniq, &among), vec![&list[0], &list[5]]);
    }
}
