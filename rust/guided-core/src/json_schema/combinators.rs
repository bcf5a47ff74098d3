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
//! requires and the other forbids) that is the same as `anyOf`. Otherwise branch `i` becomes
//! `A_i ∧ ¬A_j` for every `j` not provably disjoint from it: the symmetric-difference construction,
//! exact, at the price of complements. `coerce_one_of` trades that exactness for `anyOf`, with a
//! warning.
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
use super::keywords::{constrains, scalars, Types, CONSTRAINTS};
use super::resolve::SchemaRef;
use super::values::json_equal;
use crate::error::Result;

/// The outcome of folding a `not` into the conjunction.
pub(crate) enum Folded {
    /// Folded: the conjunction now says it.
    Yes,
    /// The negation admits nothing.
    Nothing,
    /// Not foldable: a complement is needed.
    No,
}

/// What the disjointness proofs know about a branch.
struct Signature<'a> {
    types: Types,
    values: Option<Vec<&'a Value>>,
    /// Constants a property's value is restricted to.
    props: Vec<(Rc<str>, Vec<&'a Value>)>,
    required: HashSet<Rc<str>>,
    forbidden: HashSet<Rc<str>>,
    /// Names an object may have at all, when `additionalProperties: false` closes it.
    closed: Option<HashSet<Rc<str>>>,
}

impl<'a> Compiler<'a> {
    /// The alternatives a branching distributes into.
    pub(crate) fn alternatives(
        &mut self,
        b: &Branching<'a>,
        _flat: &Flat<'a>,
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
                let sigs: Vec<Signature<'a>> = schemas
                    .iter()
                    .map(|s| self.signature(s))
                    .collect::<Result<_>>()?;
                let mut out = Vec::new();
                let mut overlapping = false;
                for (i, s) in schemas.iter().enumerate() {
                    let mut alt = vec![Part::Schema(s.clone())];
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

    fn signature(&self, s: &SchemaRef<'a>) -> Result<Signature<'a>> {
        if s.value == &Value::Bool(false) {
            return Ok(Signature {
                types: Types::NONE,
                values: None,
                props: Vec::new(),
                required: HashSet::new(),
                forbidden: HashSet::new(),
                closed: None,
            });
        }
        let schemas = self.merged(s);
        // A malformed branch is reported when it is compiled; here it just proves nothing.
        let sc = scalars(&schemas).ok();
        let mut sig = Signature {
            types: sc.as_ref().map_or(Types::ALL, |sc| sc.types),
            values: sc.and_then(|sc| sc.values),
            props: Vec::new(),
            required: HashSet::new(),
            forbidden: HashSet::new(),
            closed: None,
        };
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
                let ps = self.merged(&m.child(p, &["properties", name]));
                if let Ok(psc) = scalars(&ps) {
                    if let Some(vals) = psc.values {
                        sig.props.push((Rc::from(name.as_str()), vals));
                    }
                }
            }
            if m.get("additionalProperties") == Some(&Value::Bool(false))
                && m.get("patternProperties").is_none()
            {
                let names: HashSet<Rc<str>> = props
                    .into_iter()
                    .flatten()
                    .map(|(k, _)| Rc::from(k.as_str()))
                    .collect();
                sig.closed = Some(match sig.closed.take() {
                    None => names,
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                });
            }
        }
        Ok(sig)
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
        let obj = match n.value {
            Value::Bool(true) => return Folded::Nothing,
            Value::Bool(false) => return Folded::Yes,
            Value::Object(o) => o,
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
            ["type"] => match Types::from_keyword(&obj["type"]) {
                Some(t) => {
                    flat.excluded_types = Some(flat.excluded_types.unwrap_or(Types::NONE).or(t));
                    Folded::Yes
                }
                None => Folded::No,
            },
            ["required"] => match obj["required"].as_array().map(Vec::as_slice) {
                Some([]) => Folded::Nothing,
                Some([Value::String(name)]) => {
                    let name: Rc<str> = Rc::from(name.as_str());
                    if !flat.forbidden.contains(&name) {
                        flat.forbidden.push(name);
                    }
                    Folded::Yes
                }
                _ => Folded::No,
            },
            ["enum"] | ["const"] => {
                let vals: Vec<&'a Value> = match obj.get("enum") {
                    Some(Value::Array(a)) => a.iter().collect(),
                    Some(_) => return Folded::No,
                    None => vec![&obj["const"]],
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
                let Some(alts) = obj["anyOf"].as_array() else {
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
            ["$ref"] => match obj["$ref"]
                .as_str()
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
    let common = a.types.and(b.types);
    if common.is_empty() {
        return true;
    }
    let admits = |vals: &[&Value], types: Types| {
        vals.iter().any(|v| {
            let t = Types::of(v);
            types.has(t) || (t == Types::INT && types.has(Types::FRAC))
        })
    };
    match (&a.values, &b.values) {
        (Some(x), Some(y)) if !x.iter().any(|v| y.iter().any(|w| json_equal(v, w))) => return true,
        (Some(x), _) if !admits(x, b.types) => return true,
        (_, Some(y)) if !admits(y, a.types) => return true,
        _ => {}
    }
    // Object-only facts prove disjointness only when both branches admit objects alone.
    if common.minus(Types::OBJ).is_empty() {
        for (name, xs) in &a.props {
            if !(a.required.contains(name) || b.required.contains(name)) {
                continue;
            }
            for (other, ys) in &b.props {
                if other == name && !xs.iter().any(|v| ys.iter().any(|w| json_equal(v, w))) {
                    return true;
                }
            }
        }
        let excludes = |req: &HashSet<Rc<str>>, s: &Signature<'_>| {
            req.iter().any(|n| {
                s.forbidden.contains(n) || s.closed.as_ref().is_some_and(|c| !c.contains(n))
            })
        };
        if excludes(&a.required, b) || excludes(&b.required, a) {
            return true;
        }
    }
    false
}
