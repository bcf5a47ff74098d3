//! Finding the schema a `$ref` points at, and knowing which draft's rules apply to it.
//!
//! A schema document is a tree of schema objects, some of which name themselves: `$id` (`id` in
//! draft 4) gives a schema a base URI against which the references inside it resolve, `$anchor` and
//! `$dynamicAnchor` give it a plain-name fragment, and draft 4-7 write anchors as `$id: "#name"`.
//! Before compiling anything, [`Document::index`] walks the whole tree once, through the keywords
//! that hold subschemas only (an `$id` inside an `enum` value or a `default` is data, not a name),
//! and records for every schema its JSON pointer, its base URI and its draft, plus a table from
//! absolute URIs (resources and anchors) to pointers. Resolution is then RFC 3986 reference
//! resolution (by the `fluent-uri` crate) followed by a table lookup and, for `#/...` fragments, a
//! JSON-pointer walk from the resource the URI names.
//!
//! Only the one document is ever consulted. A reference to anything else (another file, an
//! `http://` schema that is not embedded) is refused with `UnsupportedSchemaError` naming the
//! `$ref`: fetching is out of scope and guessing would not be exact.
//!
//! Every schema is identified by its JSON pointer from the document root, which also names it in
//! error messages. The draft is taken from the nearest enclosing `$schema`; a missing or unknown
//! `$schema` means 2020-12, as the `jsonschema` package's `validate` assumes.

use std::collections::HashMap;
use std::rc::Rc;

use fluent_uri::{Uri, UriRef};
use serde_json::Value;

pub(crate) use super::drafts::Draft;
use super::drafts::Keywords;

/// The base URI of a document without `$id`.
const DEFAULT_BASE: &str = "json-schema:///";

/// One schema resource on the dynamic scope: the resources entered on the way to a schema,
/// innermost last (a linked list, shared by every schema below the same path).
#[derive(Debug)]
pub(crate) struct Scope {
    base: Rc<str>,
    parent: Option<Rc<Scope>>,
}

/// A schema inside the document: its value, where it is, and how to read it.
#[derive(Clone, Debug)]
pub(crate) struct SchemaRef<'a> {
    /// The schema (an object or a boolean).
    pub(crate) value: &'a Value,
    /// JSON pointer from the document root.
    pub(crate) ptr: Rc<str>,
    /// The base URI references inside it resolve against.
    pub(crate) base: Rc<str>,
    /// The draft that applies.
    pub(crate) draft: Draft,
    /// The dynamic scope it was reached through (resources entered before it).
    pub(crate) scope: Option<Rc<Scope>>,
}

impl<'a> SchemaRef<'a> {
    /// The dynamic scope below this schema: its own, plus itself when it is a resource root.
    pub(crate) fn inner_scope(&self) -> Option<Rc<Scope>> {
        let is_resource =
            self.get("$id").is_some() || (self.draft == Draft::D4 && self.get("id").is_some());
        let starts_resource = self.scope.as_ref().is_none_or(|sc| sc.base != self.base);
        if is_resource || starts_resource {
            Some(Rc::new(Scope {
                base: self.base.clone(),
                parent: self.scope.clone(),
            }))
        } else {
            self.scope.clone()
        }
    }

    /// The bases of the dynamic scope below this schema, outermost first.
    pub(crate) fn scope_bases(&self) -> Vec<Rc<str>> {
        let mut out = Vec::new();
        let mut cur = self.inner_scope();
        while let Some(sc) = cur {
            if out.last() != Some(&sc.base) {
                out.push(sc.base.clone());
            }
            cur = sc.parent.clone();
        }
        out.reverse();
        out.dedup();
        out
    }

    /// The keyword `k` of this schema, if it is an object holding it and its draft has it.
    pub(crate) fn get(&self, k: &str) -> Option<&'a Value> {
        self.keywords().and_then(|o| o.get(k))
    }

    /// The schema's keywords as its draft reads them, if it is an object.
    pub(crate) fn keywords(&self) -> Option<Keywords<'a>> {
        self.value.as_object().map(|o| Keywords::new(o, self.draft))
    }

    /// The subschema at `value`, reached from this one by the pointer suffix `path`.
    pub(crate) fn child(&self, value: &'a Value, path: &[&str]) -> SchemaRef<'a> {
        let mut ptr = self.ptr.to_string();
        for p in path {
            ptr.push('/');
            ptr.push_str(&p.replace('~', "~0").replace('/', "~1"));
        }
        // A subschema with its own `$id` (and `$schema`) starts a resource of its own.
        let draft = value
            .get("$schema")
            .and_then(Value::as_str)
            .and_then(Draft::from_uri)
            .unwrap_or(self.draft);
        let id_key = if draft == Draft::D4 { "id" } else { "$id" };
        let ref_hides_id = draft.ref_overrides_siblings() && value.get("$ref").is_some();
        let base = value
            .get(id_key)
            .and_then(Value::as_str)
            .filter(|_| !ref_hides_id)
            .and_then(|id| resolve_uri(&self.base, id))
            .map(|abs| split_fragment(&abs).0.to_string())
            .map_or_else(|| self.base.clone(), Rc::from);
        SchemaRef {
            value,
            ptr: ptr.into(),
            base,
            draft,
            scope: self.inner_scope(),
        }
    }
}

#[derive(Clone)]
struct NodeInfo {
    base: Rc<str>,
    draft: Draft,
}

/// The indexed schema document.
pub(crate) struct Document<'a> {
    root: &'a Value,
    /// Absolute URIs (resources, and `uri#anchor`) to the pointer of the schema they name.
    names: HashMap<String, String>,
    /// `uri#name` of every `$dynamicAnchor`, to its schema's pointer.
    dynamic: HashMap<String, String>,
    /// Base URI and draft of every schema reached by the index walk.
    nodes: HashMap<String, NodeInfo>,
}

/// Keywords whose value is one subschema.
const SINGLE: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "items",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas.
const ARRAYS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas.
const MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

fn escape_token(t: &str) -> String {
    t.replace('~', "~0").replace('/', "~1")
}

fn resolve_uri(base: &str, reference: &str) -> Option<String> {
    let r = UriRef::parse(reference).ok()?;
    let b = Uri::parse(base).ok()?;
    Some(r.resolve_against(&b).ok()?.normalize().as_str().to_string())
}

fn split_fragment(uri: &str) -> (&str, &str) {
    match uri.find('#') {
        Some(i) => (&uri[..i], &uri[i + 1..]),
        None => (uri, ""),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl<'a> Document<'a> {
    /// Indexes `root`: every schema's base URI and draft, and every name it can be referred to by.
    pub(crate) fn index(root: &'a Value) -> Document<'a> {
        let mut doc = Document {
            root,
            names: HashMap::new(),
            dynamic: HashMap::new(),
            nodes: HashMap::new(),
        };
        let root_draft = root
            .get("$schema")
            .and_then(Value::as_str)
            .and_then(Draft::from_uri)
            .unwrap_or(Draft::D2020);
        doc.names.insert(DEFAULT_BASE.to_string(), String::new());
        // An explicit stack: documents can nest deeper than the call stack should.
        let mut stack: Vec<(&'a Value, String, Rc<str>, Draft)> =
            vec![(root, String::new(), Rc::from(DEFAULT_BASE), root_draft)];
        while let Some((value, ptr, base, draft)) = stack.pop() {
            let Some(obj) = value.as_object() else {
                doc.nodes.insert(ptr, NodeInfo { base, draft });
                continue;
            };
            let draft = obj
                .get("$schema")
                .and_then(Value::as_str)
                .and_then(Draft::from_uri)
                .unwrap_or(draft);
            let id_key = if draft == Draft::D4 { "id" } else { "$id" };
            let mut base = base;
            let ref_hides_id = draft.ref_overrides_siblings() && obj.contains_key("$ref");
            if let Some(id) = obj
                .get(id_key)
                .and_then(Value::as_str)
                .filter(|_| !ref_hides_id)
            {
                if let Some(abs) = resolve_uri(&base, id) {
                    let (uri, frag) = split_fragment(&abs);
                    if frag.is_empty() {
                        base = Rc::from(uri);
                        doc.names.insert(uri.to_string(), ptr.clone());
                    } else if draft <= Draft::D7 && id.starts_with('#') {
                        // Draft 4-7 spell an anchor as a fragment-only id.
                        doc.names.insert(format!("{uri}#{frag}"), ptr.clone());
                    }
                }
            }
            for key in ["$anchor", "$dynamicAnchor"] {
                if let Some(name) = obj.get(key).and_then(Value::as_str) {
                    doc.names.insert(format!("{base}#{name}"), ptr.clone());
                    if key == "$dynamicAnchor" {
                        doc.dynamic.insert(format!("{base}#{name}"), ptr.clone());
                    }
                }
            }
            doc.nodes.insert(
                ptr.clone(),
                NodeInfo {
                    base: base.clone(),
                    draft,
                },
            );
            for (k, v) in obj {
                let k = k.as_str();
                let here = format!("{ptr}/{}", escape_token(k));
                if SINGLE.contains(&k) && (v.is_object() || v.is_boolean()) {
                    stack.push((v, here.clone(), base.clone(), draft));
                }
                if ARRAYS.contains(&k) {
                    if let Some(a) = v.as_array() {
                        for (i, s) in a.iter().enumerate() {
                            stack.push((s, format!("{here}/{i}"), base.clone(), draft));
                        }
                    }
                }
                if MAPS.contains(&k) {
                    if let Some(m) = v.as_object() {
                        for (name, s) in m {
                            if s.is_object() || s.is_boolean() {
                                stack.push((
                                    s,
                                    format!("{here}/{}", escape_token(name)),
                                    base.clone(),
                                    draft,
                                ));
                            }
                        }
                    }
                }
            }
        }
        doc
    }

    /// The root schema.
    pub(crate) fn root(&self) -> SchemaRef<'a> {
        self.at("").unwrap_or_else(|| SchemaRef {
            value: self.root,
            ptr: Rc::from(""),
            base: Rc::from(DEFAULT_BASE),
            draft: Draft::D2020,
            scope: None,
        })
    }

    /// The schema at a JSON pointer from the root, with the base URI and draft in force there.
    pub(crate) fn at(&self, ptr: &str) -> Option<SchemaRef<'a>> {
        let value = self.root.pointer(ptr)?;
        // The nearest indexed ancestor (a pointer may lead into an unknown keyword).
        let mut p = ptr;
        let info = loop {
            if let Some(info) = self.nodes.get(p) {
                break info.clone();
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => {
                    break NodeInfo {
                        base: Rc::from(DEFAULT_BASE),
                        draft: Draft::D2020,
                    }
                }
            }
        };
        Some(SchemaRef {
            value,
            ptr: Rc::from(ptr),
            base: info.base,
            draft: info.draft,
            scope: None,
        })
    }

    /// Resolves the reference `reference` written in `from`. `Err` says why it cannot be followed.
    pub(crate) fn resolve(
        &self,
        from: &SchemaRef<'a>,
        reference: &str,
    ) -> Result<SchemaRef<'a>, String> {
        let abs = resolve_uri(&from.base, reference)
            .ok_or_else(|| format!("{reference:?} is not a valid URI reference"))?;
        let mut target = self.lookup(&abs).ok_or_else(|| {
            format!("{reference:?} (resolved to {abs:?}) is not in this document; remote references are not fetched")
        })?;
        target.scope = from.inner_scope();
        Ok(target)
    }

    fn lookup(&self, abs: &str) -> Option<SchemaRef<'a>> {
        let (uri, frag) = split_fragment(abs);
        let frag = percent_decode(frag);
        if frag.is_empty() || frag.starts_with('/') {
            let resource = self.names.get(uri)?;
            return self.at(&format!("{resource}{frag}"));
        }
        self.at(self.names.get(&format!("{uri}#{frag}"))?)
    }

    /// Every schema a `$dynamicRef` might land on in some dynamic scope: those with a
    /// `$dynamicAnchor` of the name it refers to.
    pub(crate) fn dynamic_candidates(
        &self,
        from: &SchemaRef<'a>,
        reference: &str,
    ) -> Vec<SchemaRef<'a>> {
        let abs = resolve_uri(&from.base, reference).unwrap_or_default();
        let (_, name) = split_fragment(&abs);
        if name.is_empty() || name.starts_with('/') {
            return Vec::new();
        }
        let suffix = format!("#{name}");
        let mut ptrs: Vec<&String> = self
            .dynamic
            .iter()
            .filter(|(k, _)| k.ends_with(&suffix))
            .map(|(_, p)| p)
            .collect();
        ptrs.sort();
        ptrs.into_iter().filter_map(|p| self.at(p)).collect()
    }

    /// The schema a `$dynamicRef` lands on: the statically resolved target, unless it carries a
    /// `$dynamicAnchor` of the same name, in which case the outermost schema resource in the
    /// dynamic scope with such an anchor wins.
    pub(crate) fn resolve_dynamic(
        &self,
        from: &SchemaRef<'a>,
        reference: &str,
    ) -> Result<SchemaRef<'a>, String> {
        let target = self.resolve(from, reference)?;
        let abs = resolve_uri(&from.base, reference).unwrap_or_default();
        let (_, name) = split_fragment(&abs);
        let bookends = target.get("$dynamicAnchor").and_then(Value::as_str) == Some(name);
        if name.is_empty() || name.starts_with('/') || !bookends {
            return Ok(target);
        }
        for base in from.scope_bases() {
            if let Some(ptr) = self.dynamic.get(&format!("{base}#{name}")) {
                if let Some(mut s) = self.at(ptr) {
                    s.scope = from.inner_scope();
                    return Ok(s);
                }
            }
        }
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn local_pointers_ids_and_anchors() {
        let schema = json!({
            "$id": "http://example.com/root.json",
            "$defs": {
                "a": {"type": "integer"},
                "b": {"$id": "other.json", "$defs": {"x": {"$anchor": "here", "type": "string"}}},
                "c~/d": {"const": 1},
                "e": {"enum": [{"$id": "http://example.com/fake.json"}]}
            }
        });
        let doc = Document::index(&schema);
        let root = doc.root();
        assert_eq!(
            doc.resolve(&root, "#/$defs/a").unwrap().ptr.as_ref(),
            "/$defs/a"
        );
        assert_eq!(
            doc.resolve(&root, "other.json#here").unwrap().ptr.as_ref(),
            "/$defs/b/$defs/x"
        );
        assert_eq!(
            doc.resolve(&root, "http://example.com/other.json")
                .unwrap()
                .ptr
                .as_ref(),
            "/$defs/b"
        );
        assert_eq!(
            doc.resolve(&root, "#/$defs/c~0~1d").unwrap().ptr.as_ref(),
            "/$defs/c~0~1d"
        );
        assert_eq!(doc.resolve(&root, "#").unwrap().ptr.as_ref(), "");
        assert!(doc.resolve(&root, "fake.json").is_err());
        assert!(doc.resolve(&root, "http://elsewhere.org/s.json").is_err());
        let inner = doc.at("/$defs/b/$defs/x").unwrap();
        assert_eq!(inner.base.as_ref(), "http://example.com/other.json");
    }

    #[test]
    fn drafts() {
        let schema = json!({"$schema": "http://json-schema.org/draft-04/schema#", "id": "#a"});
        let doc = Document::index(&schema);
        assert_eq!(doc.root().draft, Draft::D4);
        assert_eq!(doc.resolve(&doc.root(), "#a").unwrap().ptr.as_ref(), "");
    }
}
#[cfg(test)]
mod dynamic_tests {
    use super::*;

    #[test]
    fn dynamic_ref_resolves_to_the_outermost_anchor_in_scope() {
        let schema: Value = serde_json::from_str(r##"{"$id": "https://t.org/root", "$ref": "list", "$defs": {"foo": {"$dynamicAnchor": "items", "type": "string"}, "list": {"$id": "list", "type": "array", "items": { "$dynamicRef": "#items" }, "$defs": {"items": {"$dynamicAnchor": "items"}}}}}"##).unwrap();
        let doc = Document::index(&schema);
        let root = doc.root();
        let list = doc.resolve(&root, "list").unwrap();
        let items = list.child(list.get("items").unwrap(), &["items"]);
        assert_eq!(items.scope_bases().len(), 2);
        assert_eq!(
            doc.resolve_dynamic(&items, "#items").unwrap().ptr.as_ref(),
            "/$defs/foo"
        );
        // Statically, the same reference lands on the bookend in its own resource.
        assert_eq!(
            doc.resolve(&items, "#items").unwrap().ptr.as_ref(),
            "/$defs/list/$defs/items"
        );
    }
}
