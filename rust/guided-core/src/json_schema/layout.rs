//! Property order: which names an object's members are written in, and in what order.
//!
//! A regular language cannot accept every permutation of an object's members without paying a
//! factorial, so the compiler fixes an order and tells the caller (DESIGN.md: "properties in the
//! schema's declared order"). The declared order of a location is the order in which property names
//! first appear in a depth-first walk of the schemas that apply there, each read as `properties`
//! keys first (the order users write members in, whatever key comes first), then in its own key
//! order: `required` entries, `dependentRequired` (and draft-4 `dependencies`)
//! keys and values, `dependentSchemas` keys, the keys of object values in `const` and `enum`, and
//! the same for the subschemas applied in place (`$ref`, `allOf`, `anyOf`, `oneOf`, `if`, `then`,
//! `else`, `not`, `dependentSchemas`). Members with a name outside that list come after all
//! declared ones, in any order.
//!
//! Two readings of "the schemas that apply" are used, and the difference matters:
//!
//! * Loose (the default). Each alternative the compiler distributes into (one `anyOf` branch, the
//!   `then` side of an `if`) lists the names of the schemas it merged, so a branch's object is
//!   laid out by that branch's own declared order, as a model following that branch would write
//!   it. Alternatives only ever meet in a union, where each may have its own order.
//! * Strict. Where two languages for the same location are intersected, or one is complemented
//!   (`not`, a `oneOf` whose branches may overlap, the `else` side of `if`, `contains`), both must
//!   put every member of an object at the same place, or the complement would admit a valid
//!   object's invalid twin written in another order. There the order is that of every schema that
//!   can apply at the location, all alternatives included, and it is carried down to every nested
//!   location through [`Loc`], the collection of schemas and constant values reachable there.
//!
//! A strict [`Loc`] also fixes the number policy of its location: exponent texts are admitted
//! unless some schema there carries `multipleOf` or `type: integer`, so that every language built
//! for the location reads numbers the same way.

use std::cell::OnceCell;
use std::collections::HashSet;
use std::rc::Rc;

use serde_json::Value;

use super::resolve::{Document, SchemaRef};

/// Something that contributes names at a location: a schema, or a constant (a `const`/`enum`
/// value or part of one).
#[derive(Clone, Debug)]
pub(crate) enum Source<'a> {
    /// A schema applying at the location.
    Schema(SchemaRef<'a>),
    /// A constant value standing at the location.
    Value(&'a Value),
}

/// The strict layout of one location: everything that can apply there.
#[derive(Debug)]
pub(crate) struct Loc<'a> {
    sources: Vec<Source<'a>>,
    closure: OnceCell<Vec<Source<'a>>>,
    names: OnceCell<Vec<Rc<str>>>,
}

/// The in-place applicators: keywords whose subschemas apply to the same instance.
const IN_PLACE_SINGLE: &[&str] = &["not", "if", "then", "else"];
const IN_PLACE_ARRAYS: &[&str] = &["allOf", "anyOf", "oneOf"];

/// Calls `f` on each in-place subschema of `s` (following `$ref`), in key order.
fn in_place<'a>(doc: &Document<'a>, s: &SchemaRef<'a>, mut f: impl FnMut(SchemaRef<'a>)) {
    let Some(obj) = s.keywords() else {
        return;
    };
    let ref_only = s.draft.ref_overrides_siblings() && obj.contains_key("$ref");
    for (k, v) in obj {
        let k = k.as_str();
        if ref_only && k != "$ref" {
            continue;
        }
        match k {
            "$ref" | "$dynamicRef" | "$recursiveRef" => {
                if let Some(t) = v.as_str().and_then(|r| doc.resolve(s, r).ok()) {
                    f(t);
                }
                // A dynamic reference may land on any schema with the anchor it names.
                if k == "$dynamicRef" {
                    for t in v
                        .as_str()
                        .map(|r| doc.dynamic_candidates(s, r))
                        .unwrap_or_default()
                    {
                        f(t);
                    }
                }
            }
            _ if IN_PLACE_SINGLE.contains(&k) => f(s.child(v, &[k])),
            _ if IN_PLACE_ARRAYS.contains(&k) => {
                for (i, x) in v.as_array().into_iter().flatten().enumerate() {
                    f(s.child(x, &[k, &i.to_string()]));
                }
            }
            "dependentSchemas" | "dependencies" => {
                for (name, x) in v.as_object().into_iter().flatten() {
                    if x.is_object() || x.is_boolean() {
                        f(s.child(x, &[k, name]));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Names a schema object declares by itself (not through subschemas): its `properties` first,
/// then the other keywords' names in key order. `properties` leads whatever the key order,
/// because it is the order users write their members in and the one other engines follow;
/// `required` is often listed first, in an order of its own.
pub(crate) fn own_names(s: &SchemaRef<'_>, out: &mut Vec<Rc<str>>) {
    let Some(obj) = s.keywords() else {
        return;
    };
    let ref_only = s.draft.ref_overrides_siblings() && obj.contains_key("$ref");
    if ref_only {
        return;
    }
    let push_keys = |v: &Value, out: &mut Vec<Rc<str>>| {
        if let Some(o) = v.as_object() {
            out.extend(o.keys().map(|k| Rc::from(k.as_str())));
        }
    };
    if let Some(v) = obj.get("properties") {
        push_keys(v, out);
    }
    for (k, v) in obj {
        match k.as_str() {
            "dependentSchemas" => push_keys(v, out),
            "required" => out.extend(
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(Rc::from),
            ),
            "dependentRequired" | "dependencies" => {
                for (name, deps) in v.as_object().into_iter().flatten() {
                    out.push(Rc::from(name.as_str()));
                    out.extend(
                        deps.as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .map(Rc::from),
                    );
                }
            }
            "const" => push_keys(v, out),
            "enum" => {
                for x in v.as_array().into_iter().flatten() {
                    push_keys(x, out);
                }
            }
            _ => {}
        }
    }
}

fn dedup(names: Vec<Rc<str>>) -> Vec<Rc<str>> {
    let mut seen = HashSet::new();
    names
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

/// The declared order of the schemas `roots`, descending into an in-place subschema only when
/// `keep` says so (the loose reading passes the set of schemas a branch merged).
pub(crate) fn declared_names<'a>(
    doc: &Document<'a>,
    roots: &[SchemaRef<'a>],
    keep: &dyn Fn(&SchemaRef<'a>) -> bool,
) -> Vec<Rc<str>> {
    let mut out = Vec::new();
    let mut visited: HashSet<Rc<str>> = HashSet::new();
    // An explicit stack of pending schemas, visited in key order (children pushed in reverse).
    let mut stack: Vec<SchemaRef<'a>> = roots.iter().rev().cloned().collect();
    while let Some(s) = stack.pop() {
        if !visited.insert(s.ptr.clone()) {
            continue;
        }
        own_names(&s, &mut out);
        let mut children = Vec::new();
        in_place(doc, &s, |c| {
            if keep(&c) {
                children.push(c)
            }
        });
        stack.extend(children.into_iter().rev());
    }
    dedup(out)
}

impl<'a> Loc<'a> {
    /// The location where `sources` apply.
    pub(crate) fn new(sources: Vec<Source<'a>>) -> Loc<'a> {
        Loc {
            sources,
            closure: OnceCell::new(),
            names: OnceCell::new(),
        }
    }

    /// The sources and every schema they apply in place, once each, in walk order.
    fn closure(&self, doc: &Document<'a>) -> &[Source<'a>] {
        self.closure.get_or_init(|| {
            let mut out = Vec::new();
            let mut visited: HashSet<Rc<str>> = HashSet::new();
            let mut stack: Vec<Source<'a>> = self.sources.iter().rev().cloned().collect();
            while let Some(src) = stack.pop() {
                match src {
                    Source::Value(_) => out.push(src),
                    Source::Schema(s) => {
                        if !visited.insert(s.ptr.clone()) {
                            continue;
                        }
                        let mut children = Vec::new();
                        in_place(doc, &s, |c| children.push(Source::Schema(c)));
                        out.push(Source::Schema(s.clone()));
                        // Constants of this schema stand at the location too.
                        if let Some(v) = s.get("const") {
                            out.push(Source::Value(v));
                        }
                        for v in s
                            .get("enum")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                        {
                            out.push(Source::Value(v));
                        }
                        stack.extend(children.into_iter().rev());
                    }
                }
            }
            out
        })
    }

    /// The declared order at this location (strict reading).
    pub(crate) fn names(&self, doc: &Document<'a>) -> &[Rc<str>] {
        self.names.get_or_init(|| {
            let mut schemas = Vec::new();
            let mut extra = Vec::new();
            for s in &self.sources {
                match s {
                    Source::Schema(s) => schemas.push(s.clone()),
                    Source::Value(v) => {
                        if let Some(o) = v.as_object() {
                            extra.extend(o.keys().map(|k| Rc::from(k.as_str())));
                        }
                    }
                }
            }
            let mut names = declared_names(doc, &schemas, &|_| true);
            names.extend(extra);
            dedup(names)
        })
    }

    /// Whether numbers here may be written with an exponent: not where `multipleOf` or
    /// `type: integer` applies.
    pub(crate) fn exponents(&self, doc: &Document<'a>) -> bool {
        !self.closure(doc).iter().any(|s| match s {
            Source::Schema(s) => excludes_exponents(s),
            Source::Value(_) => false,
        })
    }

    /// The location of the member named `name`.
    pub(crate) fn child_prop(&self, doc: &Document<'a>, name: &str) -> Loc<'a> {
        let mut out = Vec::new();
        for src in self.closure(doc) {
            match src {
                Source::Value(v) => {
                    if let Some(x) = v.get(name).filter(|_| v.is_object()) {
                        out.push(Source::Value(x));
                    }
                }
                Source::Schema(s) => {
                    if let Some(x) = s.get("properties").and_then(|p| p.get(name)) {
                        out.push(Source::Schema(s.child(x, &["properties", name])));
                    }
                    push_extra_sources(s, &mut out);
                }
            }
        }
        Loc::new(out)
    }

    /// The location of members whose name is not declared.
    pub(crate) fn child_extra(&self, doc: &Document<'a>) -> Loc<'a> {
        let mut out = Vec::new();
        for src in self.closure(doc) {
            if let Source::Schema(s) = src {
                push_extra_sources(s, &mut out);
            }
        }
        Loc::new(out)
    }

    /// The location of array items (every position shares one).
    pub(crate) fn child_item(&self, doc: &Document<'a>) -> Loc<'a> {
        let mut out = Vec::new();
        for src in self.closure(doc) {
            match src {
                Source::Value(v) => {
                    out.extend(v.as_array().into_iter().flatten().map(Source::Value))
                }
                Source::Schema(s) => {
                    for k in ["prefixItems", "items"] {
                        match s.get(k) {
                            Some(Value::Array(a)) => {
                                for (i, x) in a.iter().enumerate() {
                                    out.push(Source::Schema(s.child(x, &[k, &i.to_string()])));
                                }
                            }
                            Some(x) => out.push(Source::Schema(s.child(x, &[k]))),
                            None => {}
                        }
                    }
                    for k in ["additionalItems", "contains", "unevaluatedItems"] {
                        if let Some(x) = s.get(k) {
                            out.push(Source::Schema(s.child(x, &[k])));
                        }
                    }
                }
            }
        }
        Loc::new(out)
    }

    /// The location of property names (as strings, for `propertyNames`).
    pub(crate) fn child_key(&self, doc: &Document<'a>) -> Loc<'a> {
        let mut out = Vec::new();
        for src in self.closure(doc) {
            if let Source::Schema(s) = src {
                if let Some(x) = s.get("propertyNames") {
                    out.push(Source::Schema(s.child(x, &["propertyNames"])));
                }
            }
        }
        Loc::new(out)
    }
}

/// Whether `s` makes its location write numbers without exponents (`multipleOf`, or `integer`
/// among its types).
pub(crate) fn excludes_exponents(s: &SchemaRef<'_>) -> bool {
    let integer = match s.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
        _ => false,
    };
    integer || s.get("multipleOf").is_some()
}

/// The subschemas that may govern a member of `s` by something other than its name:
/// `patternProperties`, `additionalProperties`, `unevaluatedProperties`.
fn push_extra_sources<'a>(s: &SchemaRef<'a>, out: &mut Vec<Source<'a>>) {
    for (p, x) in s
        .get("patternProperties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        out.push(Source::Schema(s.child(x, &["patternProperties", p])));
    }
    for k in ["additionalProperties", "unevaluatedProperties"] {
        if let Some(x) = s.get(k) {
            out.push(Source::Schema(s.child(x, &[k])));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn declared_order_walks_in_place_subschemas() {
        let schema = json!({
            "properties": {"b": {}, "a": {}},
            "required": ["c", "a"],
            "anyOf": [{"properties": {"d": {}}}, {"$ref": "#/$defs/x"}],
            "$defs": {"x": {"properties": {"e": {}, "b": {}}}}
        });
        let doc = Document::index(&schema);
        let root = doc.root();
        let all: Vec<String> = declared_names(&doc, std::slice::from_ref(&root), &|_| true)
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(all, ["b", "a", "c", "d", "e"]);
        let loose: Vec<String> = declared_names(&doc, &[root], &|s| s.ptr.as_ref() != "/anyOf/0")
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(loose, ["b", "a", "c", "e"]);
    }

    #[test]
    fn strict_children_gather_every_source() {
        let schema = json!({
            "properties": {"p": {"properties": {"x": {}}}},
            "not": {"properties": {"p": {"properties": {"y": {}}}}},
            "patternProperties": {"^p": {"properties": {"z": {}}}},
            "const": {"p": {"w": 1}}
        });
        let doc = Document::index(&schema);
        let loc = Loc::new(vec![Source::Schema(doc.root())]);
        let child = loc.child_prop(&doc, "p");
        let names: Vec<String> = child.names(&doc).iter().map(|s| s.to_string()).collect();
        assert_eq!(names, ["x", "z", "y", "w"]);
        assert!(loc.exponents(&doc));
    }
}
