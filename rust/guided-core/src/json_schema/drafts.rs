//! Which draft of JSON Schema a schema is written in, and which keywords that draft has.
//!
//! A keyword means what the schema's draft says it means, and a keyword the draft does not have
//! means nothing at all: validators treat unknown keywords as annotations. So
//! `{"$schema": ".../draft-04/schema#", "const": 3}` admits every value, because `const` arrived
//! in draft 6, and a draft-7 schema's `prefixItems` or `dependentRequired` is inert. Applying them
//! anyway would refuse valid instances, which is as wrong as admitting invalid ones.
//!
//! The compiler therefore never reads a schema object directly. It reads it through
//! [`Keywords`], a view of the object that hides the keywords its draft lacks; the view is built
//! from the schema's draft ([`super::resolve::SchemaRef::keywords`]), so every reader, and every
//! reader added later, sees the same vocabulary. What changes *meaning* rather than presence is
//! settled where the keyword is read: draft 4's boolean `exclusiveMinimum` (in `keywords`), draft
//! 4's `integer`, which is a spelling (`1.0` is a number but not an integer there, as it is from
//! draft 6 on; see [`super::keywords::Types`]), and `$ref` beside other keywords, which drafts 4 to
//! 7 ignore ([`Draft::ref_overrides_siblings`]).
//!
//! Three older keywords stay in force in 2019-09 and 2020-12, where the official validators drop
//! them: `dependencies`, `additionalItems`, and `items` written as an array. Schemas without
//! `$schema` (read as 2020-12) use them constantly, meaning what draft 7 means; the test suite's
//! optional `dependencies-compatibility` cases ask for exactly this, and in 2020-12 an array
//! `items` is not a valid schema at all, so no valid schema changes meaning. Draft 3 is read as
//! draft 4 only outside strict mode: its `required: true`, `divisibleBy`, `disallow` and
//! `extends` are not supported.

use serde_json::{Map, Value};

/// The JSON Schema drafts whose differences the compiler honours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Draft {
    /// Draft 4: boolean `exclusiveMinimum`, `id`, `integer` by spelling.
    D4,
    /// Draft 6: `const`, `contains`, `propertyNames`, numeric exclusive bounds.
    D6,
    /// Draft 7: `if`/`then`/`else`.
    D7,
    /// 2019-09: `$ref` applies beside its siblings, `dependentRequired`, `unevaluated*`.
    D2019,
    /// 2020-12: `prefixItems`, `$dynamicRef`.
    D2020,
}

impl Draft {
    /// The draft a `$schema` URI names; `None` for anything but an official metaschema.
    pub(crate) fn from_uri(uri: &str) -> Option<Draft> {
        let u = uri.trim_end_matches('#');
        let u = u
            .strip_prefix("https://")
            .or_else(|| u.strip_prefix("http://"))?;
        let u = u.strip_prefix("json-schema.org/")?;
        Some(if u.contains("draft-04") || u.contains("draft-03") {
            Draft::D4
        } else if u.contains("draft-06") {
            Draft::D6
        } else if u.contains("draft-07") {
            Draft::D7
        } else if u.contains("2019-09") {
            Draft::D2019
        } else if u.contains("2020-12") {
            Draft::D2020
        } else {
            return None;
        })
    }

    /// Whether `uri` names a metaschema whose vocabularies the compiler knows (the official
    /// drafts from 4 on).
    pub(crate) fn known_metaschema(uri: &str) -> bool {
        let u = uri.trim_end_matches('#');
        (Draft::from_uri(u).is_some() && !u.contains("draft-03"))
            || u == "http://json-schema.org/schema"
            || u == "https://json-schema.org/schema"
    }

    /// Whether `$ref` replaces the other keywords of its schema (drafts 4 to 7).
    pub(crate) fn ref_overrides_siblings(self) -> bool {
        self <= Draft::D7
    }

    /// Whether `integer` means "written without a fraction or exponent" (draft 4) rather than
    /// "a number whose value is whole" (draft 6 on).
    pub(crate) fn integer_by_spelling(self) -> bool {
        self == Draft::D4
    }

    /// Whether the draft has the keyword `k`; every keyword the compiler does not read counts as
    /// present, since it is ignored either way.
    pub(crate) fn has_keyword(self, k: &str) -> bool {
        match k {
            "const" | "contains" | "propertyNames" => self >= Draft::D6,
            "if" | "then" | "else" => self >= Draft::D7,
            "dependentRequired"
            | "dependentSchemas"
            | "unevaluatedItems"
            | "unevaluatedProperties"
            | "minContains"
            | "maxContains" => self >= Draft::D2019,
            "$recursiveRef" | "$recursiveAnchor" => self == Draft::D2019,
            "prefixItems" | "$dynamicRef" => self >= Draft::D2020,
            _ => true,
        }
    }
}

/// A schema object as its draft reads it: the keywords the draft lacks are not there.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keywords<'a> {
    map: &'a Map<String, Value>,
    draft: Draft,
}

impl<'a> Keywords<'a> {
    /// The view of `map` under `draft`.
    pub(crate) fn new(map: &'a Map<String, Value>, draft: Draft) -> Self {
        Keywords { map, draft }
    }

    /// The keyword `k`, if the object holds it and the draft has it.
    pub(crate) fn get(&self, k: &str) -> Option<&'a Value> {
        self.map.get(k).filter(|_| self.draft.has_keyword(k))
    }

    /// Whether [`Keywords::get`] finds `k`.
    pub(crate) fn contains_key(&self, k: &str) -> bool {
        self.get(k).is_some()
    }

    /// The keywords in the object's order.
    pub(crate) fn iter(&self) -> Iter<'a> {
        Iter {
            inner: self.map.iter(),
            draft: self.draft,
        }
    }

    /// The keyword names in the object's order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &'a String> + 'a {
        self.iter().map(|(k, _)| k)
    }
}

impl<'a> IntoIterator for Keywords<'a> {
    type Item = (&'a String, &'a Value);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The keywords of a [`Keywords`] view, in the object's order (no allocation: the compiler walks
/// every schema object's keywords at every location).
pub(crate) struct Iter<'a> {
    inner: serde_json::map::Iter<'a>,
    draft: Draft,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        let draft = self.draft;
        self.inner.find(|(k, _)| draft.has_keyword(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_draft_hides_the_keywords_it_does_not_have() {
        let v: Value = serde_json::json!({
            "const": 1, "if": true, "dependentRequired": {}, "prefixItems": [],
            "$recursiveRef": "#", "$dynamicRef": "#", "dependencies": {}, "type": "integer"
        });
        let map = v.as_object().expect("an object");
        let seen = |d| {
            Keywords::new(map, d)
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
        };
        assert_eq!(seen(Draft::D4), ["dependencies", "type"]);
        assert_eq!(seen(Draft::D6), ["const", "dependencies", "type"]);
        assert_eq!(seen(Draft::D7), ["const", "if", "dependencies", "type"]);
        assert_eq!(
            seen(Draft::D2019),
            [
                "const",
                "if",
                "dependentRequired",
                "$recursiveRef",
                "dependencies",
                "type"
            ]
        );
        assert_eq!(
            seen(Draft::D2020),
            [
                "const",
                "if",
                "dependentRequired",
                "prefixItems",
                "$dynamicRef",
                "dependencies",
                "type"
            ]
        );
        assert!(Keywords::new(map, Draft::D4).get("const").is_none());
        assert!(!Keywords::new(map, Draft::D6).contains_key("prefixItems"));
    }

    #[test]
    fn drafts_are_read_from_their_metaschema_uris() {
        for (uri, d) in [
            ("http://json-schema.org/draft-04/schema#", Draft::D4),
            ("http://json-schema.org/draft-06/schema", Draft::D6),
            ("https://json-schema.org/draft-07/schema#", Draft::D7),
            ("https://json-schema.org/draft/2019-09/schema", Draft::D2019),
            ("https://json-schema.org/draft/2020-12/schema", Draft::D2020),
        ] {
            assert_eq!(Draft::from_uri(uri), Some(d), "{uri}");
            assert!(Draft::known_metaschema(uri));
        }
        assert!(!Draft::known_metaschema(
            "http://json-schema.org/draft-03/schema#"
        ));
        assert!(!Draft::known_metaschema("https://example.com/schema"));
    }
}
