//! The boolean keywords: `anyOf`, `oneOf`, `if`/`then`/`else`, `not`, and how each becomes
//! alternatives of the conjunction or a complement.
//!
//! `allOf` needs nothing here: its members simply join the conjunction (see `compile`), which is
//! the intersection, computed by merging keywords instead of intersecting automata. `anyOf` is a
//! union: each branch is merged into a copy of the conjunction. `if`/`then`/`else` is
//! `(if ∧ then) ∨ (¬if ∧ else)`, and the dependency keywords `trigger absent ∨ (trigger present ∧
//! dependency)`, both unions of disjoint alternatives.
//!
//! `oneOf` is exactly-one. When its branches are provably pairwise disjoint (different types, no
//! common constant, a required discriminator property with different constants, a name one branch
//! requires and the other forbids or leaves out of a closed object) that is the same as `anyOf`.
//! Otherwise branch `i` becomes `A_i ∧ ¬A_j` for every `j` not provably disjoint from it: the
//! symmetric-difference construction, exact, at the price of complements, which are the costliest
//! automata a schema can ask for (a complement of an object language is determinized whole). So the
//! proofs work hard to avoid them, in two ways. The branches need only be disjoint where the rest
//! of the conjunction holds: a discriminator the enclosing schema requires, or a type it allows,
//! counts for the branches too. And a type every value of which two branches admit (the non-object
//! values, for branches that only say things about objects) has no value that satisfies exactly
//! one branch, so it is taken out of every branch before they are compared. `coerce_one_of` trades
//! exactness for `anyOf`, with a warning.
//!
//! `not` is a complement (compiled in `compile`), but many negations are simple facts about the
//! conjunction and are folded into it instead, which keeps complements out of the output: `not` of
//! types removes them, `not` of one required name forbids that name, `not` of string constants
//! excludes them from the string language (a trie, not a complement), `not: {}` admits nothing, and
//! `not` of an `anyOf` of foldable schemas folds each (De Morgan).

use std::collections::HashSet;
use std::rc::Rc;

use serde_json::Value;

use super::compile::{BranchKind, Branching, Compiler, Ctx, Flat, Part};
use super::keywords::{constrained_types, constrains, scalars, Types, CONSTRAINTS};
use super::matcher::matches;
use super::resolve::SchemaRef;
use super::strings::pattern_value;
use super::values::json_equal;
use crate::dfa::{Dfa, DfaConfig};
use crate::error::Result;
use crate::regex::Hir;

/// The outcome of folding a `not` into the conjunction.
pub(crate) enum Folded {
    /// Folded: the conjunction now says it.
    Yes,
    /// The negation admits nothing.
    Nothing,
    /// Not foldable: a complement is needed.
    No,
}

/// What the disjointness proofs know about a branch, the rest of the conjunction included.
struct Signature<'a> {
    /// The value's own type and constants.
    value: Facts<'a>,
    /// The same facts about each property's value, by name.
    props: Vec<(Rc<str>, Facts<'a>)>,
    required: HashSet<Rc<str>>,
    forbidden: HashSet<Rc<str>>,
    /// The names each `additionalProperties: false` lets an object have.
    closings: Vec<Closing>,
}

/// What a conjunction of schemas says about one value: its types, the constants it is restricted
/// to, and the `pattern`s its strings must match.
struct Facts<'a> {
    types: Types,
    values: Option<Vec<&'a Value>>,
    patterns: Vec<&'a str>,
}

impl<'a> Facts<'a> {
    /// The facts of the conjunction of `schemas`. A malformed schema is reported when it is
    /// compiled; here it just proves nothing.
    fn of(schemas: &[SchemaRef<'a>]) -> Facts<'a> {
        match scalars(schemas) {
            Ok(sc) => Facts {
                types: sc.types,
                values: sc.values,
                patterns: sc.patterns.into_iter().map(|(p, _)| p).collect(),
            },
            Err(_) => Facts {
                types: Types::ALL,
                values: None,
                patterns: Vec::new(),
            },
        }
    }

    /// Whether no value satisfies both.
    fn disjoint(&self, other: &Facts<'_>) -> bool {
        let common = self.types.and(other.types);
        if common.is_empty() {
            return true;
        }
        let admits = |vals: &[&Value], types: Types| {
            vals.iter().any(|v| {
                let t = Types::of(v);
                types.has(t) || (t == Types::INTEGRAL && types.has(Types::FRAC))
            })
        };
        match (&self.values, &other.values) {
            (Some(x), Some(y)) if !x.iter().any(|v| y.iter().any(|w| json_equal(v, w))) => {
                return true
            }
            (Some(x), _) if !admits(x, other.types) => return true,
            (_, Some(y)) if !admits(y, self.types) => return true,
            _ => {}
        }
        common.minus(Types::STR).is_empty()
            && !(self.patterns.is_empty() || other.patterns.is_empty())
            && patterns_disjoint(self.patterns.iter().chain(&other.patterns))
    }
}

/// Whether no string matches all of `patterns` (unanchored, ECMA-262), proved by building their
/// intersection as an automaton, within a small state budget: patterns that do not parse, or
/// whose product is past the budget, prove nothing.
fn patterns_disjoint<'p>(patterns: impl Iterator<Item = &'p &'p str>) -> bool {
    let Ok(langs) = patterns
        .map(|p| pattern_value(p))
        .collect::<std::result::Result<Vec<Hir>, String>>()
    else {
        return false;
    };
    let config = DfaConfig {
        max_states: PATTERN_PROOF_STATES,
    };
    Dfa::from_hir(&Hir::intersection(langs), &config).is_ok_and(|d| d.matches_nothing())
}

/// The state budget of [`patterns_disjoint`]'s automaton.
const PATTERN_PROOF_STATES: usize = 2_000;

/// The names one schema with `additionalProperties: false` allows: those it declares and those
/// its `patternProperties` patterns match.
#[derive(Clone)]
struct Closing {
    names: HashSet<Rc<str>>,
    /// The patterns, as languages of decoded names.
    patterns: Vec<Hir>,
}

impl Closing {
    fn allows(&self, name: &str) -> bool {
        self.names.contains(name) || self.patterns.iter().any(|p| matches(p, name))
    }
}

/// How deep [`Compiler::whole_types`] follows `$ref` and `allOf` before it claims nothing.
const MAX_WHOLE_TYPES_DEPTH: usize = 8;

impl<'a> Compiler<'a> {
    /// The alternatives a branching distributes into.
    pub(crate) fn alternatives(
        &mut self,
        b: &Branching<'a>,
        flat: &Flat<'a>,
        _ctx: &Ctx<'a>,
    ) -> Result<Vec<Vec<Part<'a>>>> {
        match b.kind {
            BranchKind::Disjoint => Ok(b.alts.clone()),
            BranchKind::AnyOf => {
                // A branch that admits everything makes the whole keyword vacuous.
                let vacuous = b.alts.iter().any(|alt| {
                    alt.iter()
                        .all(|p| matches!(p, Part::Schema(s) if !constrains(s)))
                });
                Ok(if vacuous {
                    vec![Vec::new()]
                } else {
                    b.alts.clone()
                })
            }
            BranchKind::OneOf => {
                let schemas: Vec<SchemaRef<'a>> = b
                    .alts
                    .iter()
                    .filter_map(|alt| match alt.first() {
                        Some(Part::Schema(s)) => Some(s.clone()),
                        _ => None,
                    })
                    .collect();
                // A type every value of which two branches admit has no value that satisfies
                // exactly one of them.
                let (mut once, mut twice) = (Types::NONE, Types::NONE);
                for s in &schemas {
                    let whole = self.whole_types(s, 0);
                    twice = twice.or(once.and(whole));
                    once = once.or(whole);
                }
                let sigs: Vec<Signature<'a>> = schemas
                    .iter()
                    .map(|s| self.signature(s, flat, twice))
                    .collect();
                let mut out = Vec::new();
                let mut overlapping = false;
                for (i, s) in schemas.iter().enumerate() {
                    let mut alt = vec![Part::Schema(s.clone())];
                    if !twice.is_empty() {
                        alt.push(Part::Exclude(twice));
                    }
                    for (j, t) in schemas.iter().enumerate() {
                        if i != j && !disjoint(&sigs[i], &sigs[j]) {
                            overlapping = true;
                            if !self.opts.coerce_one_of {
                                alt.push(Part::Not(t.clone()));
                            }
                        }
                    }
                    out.push(alt);
                }
                if overlapping && self.opts.coerce_one_of {
                    let line = format!(
                        "oneOf at {:?} compiled as anyOf (coerce_one_of): its branches may overlap",
                        b.owner.as_ref()
                    );
                    if !self.warnings.contains(&line) {
                        self.warnings.push(line);
                    }
                }
                Ok(out)
            }
        }
    }

    /// The schemas a branch merges without branching: itself, its `$ref` targets and `allOf`.
    fn merged(&self, s: &SchemaRef<'a>) -> Vec<SchemaRef<'a>> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = vec![s.clone()];
        while let Some(s) = stack.pop() {
            if !seen.insert(s.ptr.clone()) || !s.value.is_object() {
                continue;
            }
            if let Some(t) = s
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| self.doc.resolve(&s, r).ok())
            {
                stack.push(t);
                if s.draft.ref_overrides_siblings() {
                    continue;
                }
            }
            for (i, x) in s
                .get("allOf")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                stack.push(s.child(x, &["allOf", &i.to_string()]));
            }
            out.push(s);
        }
        out
    }

    /// The types all of whose values `s` admits: every type its `type` keywords allow that no
    /// type-specific keyword of it constrains. A lower bound: a keyword this cannot read through
    /// (`enum`, `not`, `anyOf`, `if`, an unresolvable or deeply nested `$ref`) admits no whole
    /// type here.
    fn whole_types(&self, s: &SchemaRef<'a>, depth: usize) -> Types {
        let obj = match (s.value, s.keywords()) {
            (Value::Bool(true), _) => return Types::ALL,
            (_, Some(o)) if depth <= MAX_WHOLE_TYPES_DEPTH => o,
            _ => return Types::NONE,
        };
        let mut out = Types::ALL;
        if let Some(r) = obj.get("$ref") {
            match r.as_str().and_then(|r| self.doc.resolve(s, r).ok()) {
                Some(t) => out = out.and(self.whole_types(&t, depth + 1)),
                None => return Types::NONE,
            }
            if s.draft.ref_overrides_siblings() {
                return out;
            }
        }
        for (k, v) in obj {
            out = match k.as_str() {
                "$ref" => out,
                // An integer type alone is never claimed whole: integer locations write no
                // exponent texts (see `numbers`), which a number location beside it may.
                "type" => Types::from_keyword(v, s.draft).map_or(Types::NONE, |t| {
                    let t = if t.has(Types::FRAC) {
                        t
                    } else {
                        t.minus(Types::INTEGRAL)
                    };
                    out.and(t)
                }),
                "allOf" => match v.as_array() {
                    Some(subs) => subs.iter().enumerate().fold(out, |acc, (i, x)| {
                        let sub = s.child(x, &["allOf", &i.to_string()]);
                        acc.and(self.whole_types(&sub, depth + 1))
                    }),
                    None => Types::NONE,
                },
                k => match constrained_types(k) {
                    Some(t) => out.minus(t),
                    None if CONSTRAINTS.contains(&k) => Types::NONE,
                    None => out,
                },
            };
        }
        out
    }

    /// The facts of branch `s` where the rest of the conjunction, `flat`, holds too (the
    /// branches of a `oneOf` need only be disjoint there), with the `excluded` types left out.
    fn signature(&self, s: &SchemaRef<'a>, flat: &Flat<'a>, excluded: Types) -> Signature<'a> {
        let mut schemas = self.merged(s);
        schemas.extend(flat.schemas.iter().cloned());
        let mut sig = Signature {
            value: Facts::of(&schemas),
            props: Vec::new(),
            required: flat.required.iter().cloned().collect(),
            forbidden: flat.forbidden.iter().cloned().collect(),
            closings: Vec::new(),
        };
        let excluded = excluded.or(flat.excluded_types.unwrap_or(Types::NONE));
        sig.value.types = if s.value == &Value::Bool(false) {
            Types::NONE
        } else {
            sig.value.types.minus(excluded)
        };
        let mut prop_schemas: Vec<(Rc<str>, Vec<SchemaRef<'a>>)> = Vec::new();
        for m in &schemas {
            for r in m
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(r) = r.as_str() {
                    sig.required.insert(Rc::from(r));
                }
            }
            let props = m.get("properties").and_then(Value::as_object);
            for (name, p) in props.into_iter().flatten() {
                if p == &Value::Bool(false) {
                    sig.forbidden.insert(Rc::from(name.as_str()));
                    continue;
                }
                let merged = self.merged(&m.child(p, &["properties", name]));
                match prop_schemas.iter_mut().find(|(n, _)| n.as_ref() == name) {
                    Some((_, list)) => list.extend(merged),
                    None => prop_schemas.push((Rc::from(name.as_str()), merged)),
                }
            }
            if m.get("additionalProperties") == Some(&Value::Bool(false)) {
                let patterns = match m.get("patternProperties") {
                    None => Some(Vec::new()),
                    Some(Value::Object(pp)) => pp.keys().map(|p| pattern_value(p).ok()).collect(),
                    Some(_) => None,
                };
                // A pattern that does not parse is reported when the object is compiled; here
                // the closing just proves nothing.
                if let Some(patterns) = patterns {
                    let names = props
                        .into_iter()
                        .flatten()
                        .map(|(k, _)| Rc::from(k.as_str()))
                        .collect();
                    sig.closings.push(Closing { names, patterns });
                }
            }
        }
        sig.props = prop_schemas
            .into_iter()
            .map(|(name, list)| (name, Facts::of(&list)))
            .collect();
        sig
    }

    /// Folds `not n` into `flat` when it is a simple fact about the conjunction.
    pub(crate) fn fold_not(&self, n: &SchemaRef<'a>, flat: &mut Flat<'a>) -> Result<Folded> {
        let mut trial = flat.clone();
        let r = self.fold_into(n, &mut trial, 0);
        if let Folded::Yes = r {
            *flat = trial;
        }
        Ok(r)
    }

    fn fold_into(&self, n: &SchemaRef<'a>, flat: &mut Flat<'a>, depth: usize) -> Folded {
        let obj = match (n.value, n.keywords()) {
            (Value::Bool(true), _) => return Folded::Nothing,
            (Value::Bool(false), _) => return Folded::Yes,
            (_, Some(o)) => o,
            _ => return Folded::No,
        };
        if depth > 8 {
            return Folded::No;
        }
        let keys: Vec<&str> = obj
            .keys()
            .map(String::as_str)
            .filter(|k| CONSTRAINTS.contains(k))
            .collect();
        match keys.as_slice() {
            [] => Folded::Nothing,
            ["type"] => match obj
                .get("type")
                .and_then(|t| Types::from_keyword(t, n.draft))
            {
                Some(t) => {
                    flat.excluded_types = Some(flat.excluded_types.unwrap_or(Types::NONE).or(t));
                    Folded::Yes
                }
                None => Folded::No,
            },
            ["required"] => match obj
                .get("required")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                Some([]) => Folded::Nothing,
                Some([Value::String(name)]) => {
                    // `required` holds for every value that is not an object, so its negation
                    // is "an object without the name".
                    flat.forbidden.insert(Rc::from(name.as_str()));
                    let others = Types::ALL.minus(Types::OBJ);
                    flat.excluded_types =
                        Some(flat.excluded_types.unwrap_or(Types::NONE).or(others));
                    Folded::Yes
                }
                _ => Folded::No,
            },
            ["enum"] | ["const"] => {
                let vals: Vec<&'a Value> = match (obj.get("enum"), obj.get("const")) {
                    (Some(Value::Array(a)), _) => a.iter().collect(),
                    (None, Some(c)) => vec![c],
                    _ => return Folded::No,
                };
                if vals.iter().all(|v| v.is_string()) {
                    flat.excluded_strings
                        .extend(vals.iter().filter_map(|v| v.as_str()));
                    Folded::Yes
                } else {
                    Folded::No
                }
            }
            ["anyOf"] => {
                let Some(alts) = obj.get("anyOf").and_then(Value::as_array) else {
                    return Folded::No;
                };
                for (i, a) in alts.iter().enumerate() {
                    match self.fold_into(&n.child(a, &["anyOf", &i.to_string()]), flat, depth + 1) {
                        Folded::Yes => {}
                        other => return other,
                    }
                }
                Folded::Yes
            }
            ["$ref"] => match obj
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| self.doc.resolve(n, r).ok())
            {
                Some(t) => self.fold_into(&t, flat, depth + 1),
                None => Folded::No,
            },
            _ => Folded::No,
        }
    }
}

/// Whether two branches provably admit no common value.
fn disjoint(a: &Signature<'_>, b: &Signature<'_>) -> bool {
    if a.value.disjoint(&b.value) {
        return true;
    }
    // Object-only facts prove disjointness only when both branches admit objects alone.
    if !a
        .value
        .types
        .and(b.value.types)
        .minus(Types::OBJ)
        .is_empty()
    {
        return false;
    }
    let required = |name: &Rc<str>| a.required.contains(name) || b.required.contains(name);
    for (name, x) in &a.props {
        if required(name)
            && b.props
                .iter()
                .any(|(other, y)| other == name && x.disjoint(y))
        {
            return true;
        }
    }
    let excludes = |req: &HashSet<Rc<str>>, s: &Signature<'_>| {
        req.iter()
            .any(|n| s.forbidden.contains(n) || s.closings.iter().any(|c| !c.allows(n)))
    };
    excludes(&a.required, b) || excludes(&b.required, a)
}
