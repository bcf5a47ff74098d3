//! Reading the type and scalar keywords of a conjunction of schemas.
//!
//! After `$ref`, `allOf` and the chosen alternatives are merged, a location is described by a list
//! of schema objects that all apply. Their keywords combine by intersection, which for the scalar
//! keywords is simple arithmetic: the type sets intersect, the larger `minLength` and the smaller
//! `maxLength` win, bounds keep the tightest value (exclusive on ties), `multipleOf` steps combine by
//! least common multiple, `enum` and `const` lists intersect by JSON equality, and every `pattern`
//! and `format` is kept, to be intersected as languages. Draft differences are settled here: a
//! boolean `exclusiveMinimum` (draft 4) makes `minimum` exclusive, a numeric one (draft 6 on) is a
//! bound of its own.
//!
//! Malformed keyword values (a negative `minLength`, a `type` that names no type) are refused with
//! the keyword and the schema's pointer, since a schema that means nothing cannot be enforced
//! exactly either.

use std::rc::Rc;

use serde_json::Value;

use super::decimal::Decimal;
use super::numbers::Bound;
use super::resolve::{Draft, SchemaRef};
use super::values::{json_common, json_unique};
use crate::error::{Error, Result};

/// A set of JSON types, with numbers split three ways: whole values written as integers (`3`),
/// whole values written with a fraction or an exponent (`3.0`), and the rest (`3.5`).
///
/// The split by spelling exists for draft 4, where `integer` is a spelling: `3.0` parses as a
/// float and is not an integer there, while from draft 6 on `integer` is every whole value. Both
/// readings are then plain sets of texts, which is what lets a draft-4 `not: {type: integer}` fold
/// into the type set and stay exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Types(u8);

impl Types {
    pub(crate) const NULL: Types = Types(1);
    pub(crate) const BOOL: Types = Types(2);
    /// Whole numbers written as integers: no fraction digits, no exponent.
    pub(crate) const INT: Types = Types(4);
    /// Numbers with a fractional part.
    pub(crate) const FRAC: Types = Types(8);
    pub(crate) const STR: Types = Types(16);
    pub(crate) const ARR: Types = Types(32);
    pub(crate) const OBJ: Types = Types(64);
    /// Whole numbers written with fraction digits or an exponent (`3.0`, `3e2`).
    pub(crate) const INT_POINT: Types = Types(128);
    /// Whole numbers, however written.
    pub(crate) const INTEGRAL: Types = Types(4 | 128);
    /// Every number.
    pub(crate) const NUMBER: Types = Types(4 | 8 | 128);
    pub(crate) const ALL: Types = Types(255);
    pub(crate) const NONE: Types = Types(0);

    /// Whether any of `other`'s types are here.
    pub(crate) fn has(self, other: Types) -> bool {
        self.0 & other.0 != 0
    }

    /// Types in both.
    pub(crate) fn and(self, other: Types) -> Types {
        Types(self.0 & other.0)
    }

    /// Types here but not in `other`.
    pub(crate) fn minus(self, other: Types) -> Types {
        Types(self.0 & !other.0)
    }

    /// Types in either.
    pub(crate) fn or(self, other: Types) -> Types {
        Types(self.0 | other.0)
    }

    /// Whether the set is empty.
    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The types of the texts of a JSON value (a whole number's texts have two).
    pub(crate) fn of(v: &Value) -> Types {
        match v {
            Value::Null => Types::NULL,
            Value::Bool(_) => Types::BOOL,
            Value::Number(n) => match Decimal::from_json(n) {
                Some(d) if !d.is_integer() => Types::FRAC,
                _ => Types::INTEGRAL,
            },
            Value::String(_) => Types::STR,
            Value::Array(_) => Types::ARR,
            Value::Object(_) => Types::OBJ,
        }
    }

    fn named(name: &str, draft: Draft) -> Option<Types> {
        Some(match name {
            "null" => Types::NULL,
            "boolean" => Types::BOOL,
            "integer" if draft.integer_by_spelling() => Types::INT,
            "integer" => Types::INTEGRAL,
            "number" => Types::NUMBER,
            "string" => Types::STR,
            "array" => Types::ARR,
            "object" => Types::OBJ,
            _ => return None,
        })
    }

    /// The set a `type` keyword value names under `draft`; `None` if it names something unknown.
    pub(crate) fn from_keyword(v: &Value, draft: Draft) -> Option<Types> {
        match v {
            Value::String(s) => Types::named(s, draft),
            Value::Array(a) => a.iter().try_fold(Types::NONE, |acc, x| {
                Some(acc.or(Types::named(x.as_str()?, draft)?))
            }),
            _ => None,
        }
    }
}

/// The combined scalar constraints of a conjunction.
#[derive(Debug)]
pub(crate) struct Scalars<'a> {
    /// Allowed types.
    pub(crate) types: Types,
    /// `enum`/`const` values every schema allows, when some schema restricts to a list.
    pub(crate) values: Option<Vec<&'a Value>>,
    /// Fewest code points in a string.
    pub(crate) min_len: u64,
    /// Most code points in a string.
    pub(crate) max_len: Option<u64>,
    /// `pattern`s, with the pointer of the schema holding each.
    pub(crate) patterns: Vec<(&'a str, Rc<str>)>,
    /// `format`s, with their schema pointers.
    pub(crate) formats: Vec<(&'a str, Rc<str>)>,
    /// Lower bound on numbers.
    pub(crate) lo: Option<Bound>,
    /// Upper bound on numbers.
    pub(crate) hi: Option<Bound>,
    /// Combined `multipleOf` step, with the pointer of (one) schema holding it.
    pub(crate) step: Option<(Decimal, Rc<str>)>,
    /// Whether any keyword constrains the value beyond its type and constant list.
    pub(crate) narrowed: bool,
}

fn bad(keyword: &str, s: &SchemaRef<'_>, what: &str) -> Error {
    Error::UnsupportedSchema {
        keyword: keyword.to_string(),
        pointer: s.ptr.to_string(),
        message: format!("{keyword} at {:?} {what}", s.ptr.as_ref()),
    }
}

fn count(keyword: &str, s: &SchemaRef<'_>, v: &Value) -> Result<u64> {
    let d = v
        .as_number()
        .and_then(Decimal::from_json)
        .filter(|d| d.is_integer() && !d.is_negative())
        .ok_or_else(|| bad(keyword, s, "must be a non-negative integer"))?;
    Ok(d.to_scaled_i128(0)
        .map_or(u64::MAX, |v| v.min(u64::MAX as i128) as u64))
}

fn number(keyword: &str, s: &SchemaRef<'_>, v: &Value) -> Result<Decimal> {
    v.as_number()
        .and_then(Decimal::from_json)
        .ok_or_else(|| bad(keyword, s, "must be a number (within 10^4096)"))
}

fn tighter_lo(a: Option<Bound>, b: Bound) -> Option<Bound> {
    Some(match a {
        None => b,
        Some(a) => {
            if b.value > a.value || (b.value == a.value && b.strict) {
                b
            } else {
                a
            }
        }
    })
}

fn tighter_hi(a: Option<Bound>, b: Bound) -> Option<Bound> {
    Some(match a {
        None => b,
        Some(a) => {
            if b.value < a.value || (b.value == a.value && b.strict) {
                b
            } else {
                a
            }
        }
    })
}

/// Least common multiple of two positive decimal steps.
fn lcm(a: &Decimal, b: &Decimal) -> Option<Decimal> {
    let scale = -a.exponent().min(b.exponent()).min(0);
    let (x, y) = (a.to_scaled_i128(scale)?, b.to_scaled_i128(scale)?);
    fn gcd(a: i128, b: i128) -> i128 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let l = (x / gcd(x, y)).checked_mul(y)?;
    Some(Decimal::from_i128(l).scaled(-scale))
}

/// Keywords that constrain a value; a schema without any of them admits every value.
pub(crate) const CONSTRAINTS: &[&str] = &[
    "type",
    "enum",
    "const",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "unevaluatedItems",
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "unevaluatedProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
];

/// The types a type-specific keyword constrains; values of other types satisfy it whatever it
/// says. `None` for the keywords that are not type-specific (`type`, `enum`, the applicators).
pub(crate) fn constrained_types(keyword: &str) -> Option<Types> {
    Some(match keyword {
        "minLength" | "maxLength" | "pattern" | "format" => Types::STR,
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
            Types::NUMBER
        }
        "items" | "prefixItems" | "additionalItems" | "minItems" | "maxItems" | "contains"
        | "minContains" | "maxContains" | "uniqueItems" | "unevaluatedItems" => Types::ARR,
        "properties"
        | "patternProperties"
        | "additionalProperties"
        | "required"
        | "minProperties"
        | "maxProperties"
        | "propertyNames"
        | "unevaluatedProperties"
        | "dependentRequired"
        | "dependentSchemas"
        | "dependencies" => Types::OBJ,
        _ => return None,
    })
}

/// Whether `s` constrains anything at all.
pub(crate) fn constrains(s: &SchemaRef<'_>) -> bool {
    match (s.value, s.keywords()) {
        (_, Some(o)) => o.keys().any(|k| CONSTRAINTS.contains(&k.as_str())),
        (Value::Bool(b), _) => !b,
        _ => true,
    }
}

/// Reads the scalar keywords of the conjunction `schemas`.
pub(crate) fn scalars<'a>(schemas: &[SchemaRef<'a>]) -> Result<Scalars<'a>> {
    let mut out = Scalars {
        types: Types::ALL,
        values: None,
        min_len: 0,
        max_len: None,
        patterns: Vec::new(),
        formats: Vec::new(),
        lo: None,
        hi: None,
        step: None,
        narrowed: false,
    };
    for s in schemas {
        let Some(obj) = s.keywords() else {
            continue;
        };
        for (k, v) in obj {
            match k.as_str() {
                "type" => {
                    let t = Types::from_keyword(v, s.draft)
                        .ok_or_else(|| bad("type", s, "names no JSON type"))?;
                    out.types = out.types.and(t);
                }
                "const" | "enum" => {
                    let list: Vec<&'a Value> = if k == "const" {
                        vec![v]
                    } else {
                        v.as_array()
                            .ok_or_else(|| bad("enum", s, "must be an array"))?
                            .iter()
                            .collect()
                    };
                    // Duplicates by JSON equality collapse; a second list keeps what both hold.
                    out.values = Some(match out.values.take() {
                        None => json_unique(list),
                        Some(prev) => json_common(prev, &list),
                    });
                }
                "minLength" => {
                    out.min_len = out.min_len.max(count(k, s, v)?);
                    out.narrowed = true;
                }
                "maxLength" => {
                    let m = count(k, s, v)?;
                    out.max_len = Some(out.max_len.map_or(m, |x| x.min(m)));
                    out.narrowed = true;
                }
                "pattern" => {
                    let p = v.as_str().ok_or_else(|| bad(k, s, "must be a string"))?;
                    out.patterns.push((p, s.ptr.clone()));
                    out.narrowed = true;
                }
                "format" => {
                    if let Some(f) = v.as_str() {
                        out.formats.push((f, s.ptr.clone()));
                        out.narrowed = true;
                    }
                }
                "minimum" | "maximum" => {
                    let value = number(k, s, v)?;
                    let ex_key = if k == "minimum" {
                        "exclusiveMinimum"
                    } else {
                        "exclusiveMaximum"
                    };
                    let strict = obj.get(ex_key).and_then(Value::as_bool).unwrap_or(false);
                    let b = Bound { value, strict };
                    if k == "minimum" {
                        out.lo = tighter_lo(out.lo.take(), b);
                    } else {
                        out.hi = tighter_hi(out.hi.take(), b);
                    }
                    out.narrowed = true;
                }
                "exclusiveMinimum" | "exclusiveMaximum" => {
                    // A boolean is draft 4's modifier of minimum/maximum, read above.
                    if v.is_boolean() {
                        continue;
                    }
                    let b = Bound {
                        value: number(k, s, v)?,
                        strict: true,
                    };
                    if k == "exclusiveMinimum" {
                        out.lo = tighter_lo(out.lo.take(), b);
                    } else {
                        out.hi = tighter_hi(out.hi.take(), b);
                    }
                    out.narrowed = true;
                }
                "multipleOf" => {
                    let d = number(k, s, v)?;
                    if d.is_zero() || d.is_negative() {
                        return Err(bad(k, s, "must be greater than 0"));
                    }
                    out.step = Some(match out.step.take() {
                        None => (d, s.ptr.clone()),
                        Some((prev, p)) => (
                            lcm(&prev, &d)
                                .ok_or_else(|| bad(k, s, "combines into a step too large"))?,
                            p,
                        ),
                    });
                    out.narrowed = true;
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_schema::resolve::Document;
    use serde_json::json;

    #[test]
    fn draft4_and_later_exclusive_bounds() {
        let a = json!({"minimum": 5, "exclusiveMinimum": true, "maximum": 9});
        let b =
            json!({"exclusiveMinimum": 5, "exclusiveMaximum": 8.5, "type": ["integer", "string"]});
        let da = Document::index(&a);
        let db = Document::index(&b);
        let s = scalars(&[da.root(), db.root()]).unwrap();
        assert_eq!(
            s.lo.unwrap(),
            Bound {
                value: Decimal::parse("5").unwrap(),
                strict: true
            }
        );
        assert_eq!(
            s.hi.unwrap(),
            Bound {
                value: Decimal::parse("8.5").unwrap(),
                strict: true
            }
        );
        assert_eq!(s.types, Types::INTEGRAL.or(Types::STR));
    }

    #[test]
    fn enums_intersect_and_steps_combine() {
        let a = json!({"enum": [1, "a", [1]], "multipleOf": 0.5});
        let b = json!({"enum": [1.0, [1.0], null], "multipleOf": 3});
        let (da, db) = (Document::index(&a), Document::index(&b));
        let s = scalars(&[da.root(), db.root()]).unwrap();
        assert_eq!(s.values.unwrap().len(), 2);
        assert_eq!(s.step.unwrap().0, Decimal::parse("3").unwrap());
        let bad_schema = json!({"minLength": -1});
        let d = Document::index(&bad_schema);
        assert!(
            matches!(scalars(&[d.root()]), Err(Error::UnsupportedSchema { keyword, .. }) if keyword == "minLength")
        );
    }
}
