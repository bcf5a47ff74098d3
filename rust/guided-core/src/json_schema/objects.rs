//! Object languages: members in the declared order, commas where they belong, the rest after.
//!
//! An object is `{`, its members separated by `,`, `}`, with the whitespace policy between tokens.
//! The declared names (see `layout`) come first, each at its place and each optional unless
//! required; members with other names ("extras") follow, in any order and any number, when some
//! schema lets them exist. The only subtle part is the commas: a comma precedes every member but the
//! first, and which member is first depends on which optional ones are present. The usual right-to-
//! left construction duplicates the tail of the object for every optional member (quadratic size).
//! Here the optional members before the first required one are built left to right instead:
//! `P_j = P_{j-1} (, m_j)? | m_j` is "a non-empty run of the members up to `j`", holding `P_{j-1}`
//! once, so the whole object stays linear in the size of its members.
//!
//! A member's value is governed, schema by schema, by `properties` if the name is listed there,
//! else by every `patternProperties` pattern it matches (the pattern is unanchored and applies to
//! the decoded name), else by `additionalProperties`. Declared names are checked against the
//! patterns once, at compile time; for extras the key language itself is split into regions by
//! which patterns match (intersections and complements of the pattern languages, minus the
//! declared names), each region with its own value language. `propertyNames` intersects every key
//! language; a declared name it rejects may not appear.
//!
//! `minProperties`/`maxProperties` are free when the required and optional members already keep
//! the count in range, a repetition bound when only extras vary, and otherwise an intersection
//! with a language that counts top-level members. That counting language only has to split
//! members correctly in texts the object language accepts, so it can skip nested values with a
//! bracket-depth cover (strings, and brackets nested to the depth the object's values reach),
//! which keeps it linear in that depth.
//!
//! One gap is inherent to regular languages and documented: extras cannot be kept distinct (that
//! would need unbounded memory), so a model could repeat an undeclared key.

use std::rc::Rc;

use indexmap::IndexSet;
use serde_json::Value;

use super::compile::{Compiler, Ctx, Flat, Lang, Part};
use super::keywords::constrains;
use super::matcher::matches;
use super::resolve::SchemaRef;
use super::strings::{any_string_body, canonical_text, string_text, strings_except};
use crate::error::Result;
use crate::regex::{ClassSet, Hir};

/// The most patterns whose match regions are enumerated one by one (2^n regions).
const MAX_PATTERN_SPLIT: usize = 4;

/// One schema's object keywords.
struct Owner<'a> {
    schema: SchemaRef<'a>,
    props: Option<&'a serde_json::Map<String, Value>>,
    patterns: Vec<(Hir, SchemaRef<'a>)>,
    additional: Option<SchemaRef<'a>>,
}

/// What [`Compiler::owners`] gathers from an object's schemas: the schemas owning its members,
/// the required names, the member-count bounds, and the `propertyNames` schemas.
type Owners<'a> = (
    Vec<Owner<'a>>,
    IndexSet<Rc<str>>,
    u64,
    Option<u64>,
    Vec<SchemaRef<'a>>,
);

impl<'a> Compiler<'a> {
    fn owners(&mut self, flat: &Flat<'a>) -> Result<Owners<'a>> {
        let mut owners = Vec::new();
        let mut required = flat.required.clone();
        let (mut min, mut max) = (0u64, None::<u64>);
        let mut names_schemas = Vec::new();
        for s in &flat.schemas {
            let Some(obj) = s.keywords() else {
                continue;
            };
            let props = match obj.get("properties") {
                None => None,
                Some(Value::Object(m)) => Some(m),
                Some(_) => return Err(self.unsupported("properties", &s.ptr, "must be an object")),
            };
            let mut patterns = Vec::new();
            if let Some(pp) = obj.get("patternProperties") {
                let pp = pp.as_object().ok_or_else(|| {
                    self.unsupported("patternProperties", &s.ptr, "must be an object")
                })?;
                for (p, sub) in pp {
                    let h = self.pattern(p, &s.ptr).map_err(|e| match e {
                        crate::Error::UnsupportedSchema {
                            pointer, message, ..
                        } => crate::Error::UnsupportedSchema {
                            keyword: "patternProperties".into(),
                            pointer,
                            message,
                        },
                        e => e,
                    })?;
                    patterns.push((h, s.child(sub, &["patternProperties", p])));
                }
            }
            let additional = obj
                .get("additionalProperties")
                .map(|a| s.child(a, &["additionalProperties"]));
            if let Some(u) = obj.get("unevaluatedProperties") {
                self.unevaluated_properties(s, u, flat)?;
            }
            for r in obj
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let r: Rc<str> = Rc::from(
                    r.as_str()
                        .ok_or_else(|| self.unsupported("required", &s.ptr, "must list names"))?,
                );
                required.insert(r);
            }
            if let Some(v) = obj.get("minProperties") {
                min = min.max(self.count_keyword("minProperties", s, v)?);
            }
            if let Some(v) = obj.get("maxProperties") {
                let m = self.count_keyword("maxProperties", s, v)?;
                max = Some(max.map_or(m, |x| x.min(m)));
            }
            if let Some(pn) = obj.get("propertyNames") {
                names_schemas.push(s.child(pn, &["propertyNames"]));
            }
            owners.push(Owner {
                schema: s.clone(),
                props,
                patterns,
                additional,
            });
        }
        Ok((owners, required, min, max, names_schemas))
    }

    pub(crate) fn count_keyword(&self, k: &str, s: &SchemaRef<'a>, v: &Value) -> Result<u64> {
        v.as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                    .map(|f| f as u64)
            })
            .ok_or_else(|| self.unsupported(k, &s.ptr, "must be a non-negative integer"))
    }

    /// `unevaluatedProperties` is exact here only when it adds nothing: when the schema holding it
    /// already decides every member through its own `additionalProperties`.
    fn unevaluated_properties(
        &mut self,
        s: &SchemaRef<'a>,
        u: &Value,
        _flat: &Flat<'a>,
    ) -> Result<()> {
        if u == &Value::Bool(true) || s.get("additionalProperties").is_some() {
            return Ok(());
        }
        self.skip_or_fail(
            "unevaluatedProperties",
            &s.ptr,
            "depends on which subschemas evaluated each member, which is only tracked through additionalProperties",
        )
    }

    /// The language of objects where the conjunction `flat` holds, members in the order `names`.
    pub(crate) fn object_language(
        &mut self,
        flat: &Flat<'a>,
        names: Vec<Rc<str>>,
        ctx: &Ctx<'a>,
        unconstrained: bool,
    ) -> Result<Lang> {
        let (owners, required, min, max, names_schemas) = self.owners(flat)?;
        if max.is_some_and(|m| m < min) {
            return Ok(Lang::nothing());
        }
        let max_free = self.opts.max_free_depth as u32;
        // propertyNames, compiled once as languages of key texts.
        let mut key_langs = Vec::new();
        for pn in &names_schemas {
            if !constrains(pn) {
                continue;
            }
            let strict = ctx.strict.as_ref().map(|l| l.child_key(&self.doc));
            let kctx = ctx.child(flat, unconstrained, max_free, strict);
            key_langs.push(self.compile_loc(vec![Part::Schema(pn.clone())], &kctx)?.hir);
        }
        let key_ok = |x: &str| key_langs.iter().all(|h| matches(h, &canonical_text(x)));

        let mut members: Vec<(Hir, bool)> = Vec::new();
        let mut depth = 0;
        for x in &names {
            let req = required.contains(x);
            if flat.forbidden.contains(x) || !key_ok(x) {
                if req {
                    return Ok(Lang::nothing());
                }
                continue;
            }
            let mut parts = Vec::new();
            for o in &owners {
                let mut matched = false;
                if let Some(sub) = o.props.and_then(|p| p.get(x.as_ref())) {
                    parts.push(Part::Schema(o.schema.child(sub, &["properties", x])));
                    matched = true;
                }
                for (h, sub) in &o.patterns {
                    if matches(h, x) {
                        parts.push(Part::Schema(sub.clone()));
                        matched = true;
                    }
                }
                if !matched {
                    if let Some(a) = &o.additional {
                        parts.push(Part::Schema(a.clone()));
                    }
                }
            }
            let strict = ctx.strict.as_ref().map(|l| l.child_prop(&self.doc, x));
            let cctx = ctx.child(flat, unconstrained, max_free, strict);
            let v = self.compile_loc(parts, &cctx)?;
            if v.hir.is_nothing() {
                if req {
                    return Ok(Lang::nothing());
                }
                continue;
            }
            depth = depth.max(v.depth);
            let key = string_text(&Hir::literal(x)).map_err(|m| self.internal(&m))?;
            let value = self.barrier(v.hir);
            members.push((self.member(key, value), req));
        }
        // Required names nobody can place (excluded above) were handled; extras next.
        let extras = self.extra_members(
            &owners,
            &names,
            &key_langs,
            flat,
            ctx,
            unconstrained,
            &mut depth,
        )?;
        let n_req = members.iter().filter(|m| m.1).count() as u64;
        let n_opt = members.len() as u64 - n_req;
        let sep = Hir::concat([self.ws.clone(), Hir::literal(","), self.ws.clone()]);
        // Count bounds: free, a repetition bound on extras, or an intersection.
        let count_free = min <= n_req
            && (max.is_none() || (extras.is_none() && max.is_some_and(|m| m >= n_req + n_opt)));
        let extra_bounds = if !count_free && n_opt == 0 && extras.is_some() {
            Some((
                min.saturating_sub(n_req),
                max.map(|m| m.saturating_sub(n_req)),
            ))
        } else {
            None
        };
        if max.is_some_and(|m| m < n_req) {
            return Ok(Lang::nothing());
        }
        // The extras stand in up to three places of the body; their key language (every name
        // but the declared ones) is large, so it is held once.
        let extras = extras.map(|e| self.barrier(e));
        let (body, empty_ok) = build_body(&members, extras.as_ref(), &sep, extra_bounds);
        let inner = if empty_ok && extra_bounds.is_none_or(|(lo, _)| lo == 0) {
            Hir::optional(Hir::concat([body, self.ws.clone()]))
        } else {
            Hir::concat([body, self.ws.clone()])
        };
        let object = Hir::concat([Hir::literal("{"), self.ws.clone(), inner, Hir::literal("}")]);
        let hir = if count_free || extra_bounds.is_some() {
            object
        } else {
            let owner = flat
                .schemas
                .iter()
                .find(|s| s.get("minProperties").is_some() || s.get("maxProperties").is_some());
            let ptr = owner.map_or("", |s| &s.ptr);
            let depth = self.bounded_depth(depth, "minProperties/maxProperties", ptr)?;
            Hir::intersection([object, count_language(min, max, depth)])
        };
        Ok(Lang {
            hir,
            depth: depth + 1,
        })
    }

    /// `"key" : value`, with the whitespace policy around the colon.
    fn member(&self, key: Hir, value: Hir) -> Hir {
        Hir::concat([
            key,
            self.ws.clone(),
            Hir::literal(":"),
            self.ws.clone(),
            value,
        ])
    }

    /// The JSON text of any member name but `declared`, behind a barrier and remembered per
    /// compilation, so that each list of names is spelled, hashed and determinized once.
    fn names_except(&mut self, declared: Vec<Rc<str>>) -> Result<Hir> {
        if let Some(known) = self.extra_names.get(&declared) {
            return Ok(known.clone());
        }
        let words: Vec<&str> = declared.iter().map(|n| n.as_ref()).collect();
        let spelled = string_text(&strings_except(&words)).map_err(|m| self.internal(&m))?;
        let shared = self.barrier(spelled);
        self.extra_names.insert(declared, shared.clone());
        Ok(shared)
    }

    /// The members whose name is not declared, split into regions by the patterns they match.
    #[allow(clippy::too_many_arguments)]
    fn extra_members(
        &mut self,
        owners: &[Owner<'a>],
        names: &[Rc<str>],
        key_langs: &[Hir],
        flat: &Flat<'a>,
        ctx: &Ctx<'a>,
        unconstrained: bool,
        depth: &mut u32,
    ) -> Result<Option<Hir>> {
        let mut pats: Vec<(usize, &Hir, &SchemaRef<'a>)> = Vec::new();
        for (i, o) in owners.iter().enumerate() {
            for (h, sub) in &o.patterns {
                pats.push((i, h, sub));
            }
        }
        // Patterns leading to the same schema in the same owner act as one.
        let mut merged: Vec<(usize, Hir, Vec<&SchemaRef<'a>>)> = Vec::new();
        for (i, h, sub) in pats {
            match merged
                .iter_mut()
                .find(|(j, _, subs)| *j == i && subs.iter().all(|s| s.value == sub.value))
            {
                Some(m) => {
                    m.1 = Hir::alternation([m.1.clone(), h.clone()]);
                    m.2.push(sub);
                }
                None => merged.push((i, h.clone(), vec![sub])),
            }
        }
        if merged.len() > MAX_PATTERN_SPLIT {
            let ptr = owners
                .first()
                .map(|o| o.schema.ptr.to_string())
                .unwrap_or_default();
            return Err(self.unsupported(
                "patternProperties",
                &ptr,
                &format!(
                    "{} distinct patterns would split member names into too many regions",
                    merged.len()
                ),
            ));
        }
        let max_free = self.opts.max_free_depth as u32;
        let mut regions = Vec::new();
        for mask in 0u32..(1 << merged.len()) {
            let inside = |k: usize| mask & (1 << k) != 0;
            let mut parts = Vec::new();
            for (k, (_, _, subs)) in merged.iter().enumerate() {
                if inside(k) {
                    parts.extend(subs.iter().map(|s| Part::Schema((*s).clone())));
                }
            }
            for (i, o) in owners.iter().enumerate() {
                let matched = merged
                    .iter()
                    .enumerate()
                    .any(|(k, (j, _, _))| *j == i && inside(k));
                if !matched {
                    if let Some(a) = &o.additional {
                        parts.push(Part::Schema(a.clone()));
                    }
                }
            }
            if parts
                .iter()
                .any(|p| matches!(p, Part::Schema(s) if s.value == &Value::Bool(false)))
            {
                continue;
            }
            // Key language: inside the chosen patterns, outside the others, not a declared name.
            let mut key_parts: Vec<Hir> = Vec::new();
            for (k, (_, h, _)) in merged.iter().enumerate() {
                if inside(k) {
                    key_parts.push(h.clone());
                }
            }
            let outside: Vec<Hir> = merged
                .iter()
                .enumerate()
                .filter(|(k, _)| !inside(*k))
                .map(|(_, (_, h, _))| h.clone())
                .collect();
            let declared_here: Vec<Rc<str>> = names
                .iter()
                .filter(|n| {
                    merged
                        .iter()
                        .enumerate()
                        .all(|(k, (_, h, _))| matches(h, n) == inside(k))
                })
                .cloned()
                .collect();
            if !outside.is_empty() {
                key_parts.push(Hir::complement(Hir::alternation(outside)));
            }
            let mut key = if key_parts.is_empty() {
                self.names_except(declared_here)?
            } else {
                if !declared_here.is_empty() {
                    let words: Vec<&str> = declared_here.iter().map(|n| n.as_ref()).collect();
                    key_parts.push(strings_except(&words));
                }
                let key_value = if key_parts.len() == 1 {
                    key_parts.pop().unwrap_or_else(Hir::nothing)
                } else {
                    Hir::intersection(key_parts)
                };
                string_text(&key_value).map_err(|m| self.internal(&m))?
            };
            if !key_langs.is_empty() {
                let mut all = vec![key];
                all.extend(key_langs.iter().cloned());
                key = Hir::intersection(all);
            }
            let strict = ctx.strict.as_ref().map(|l| l.child_extra(&self.doc));
            let cctx = ctx.child(flat, unconstrained, max_free, strict);
            let v = self.compile_loc(parts, &cctx)?;
            if v.hir.is_nothing() {
                continue;
            }
            *depth = (*depth).max(v.depth);
            let value = self.barrier(v.hir);
            regions.push(self.member(key, value));
        }
        Ok(if regions.is_empty() {
            None
        } else {
            Some(Hir::alternation(regions))
        })
    }
}

/// The members of an object between its braces, and whether there may be none. `extra_bounds`
/// bounds the number of extras when the declared members are all required.
fn build_body(
    members: &[(Hir, bool)],
    extras: Option<&Hir>,
    sep: &Hir,
    extra_bounds: Option<(u64, Option<u64>)>,
) -> (Hir, bool) {
    let cap = |x: u64| x.min(u32::MAX as u64) as u32;
    let tail = |lo: u64, hi: Option<u64>| -> Hir {
        match extras {
            Some(e) => Hir::repeat(Hir::concat([sep.clone(), e.clone()]), cap(lo), hi.map(cap)),
            None => Hir::Empty,
        }
    };
    let (lo, hi) = extra_bounds.unwrap_or((0, None));
    // A non-empty run of optional members, left to right.
    let run = |ms: &[(Hir, bool)]| -> Hir {
        let mut acc = Hir::nothing();
        for (m, _) in ms {
            acc = Hir::alternation([
                Hir::concat([acc, Hir::optional(Hir::concat([sep.clone(), m.clone()]))]),
                m.clone(),
            ]);
        }
        acc
    };
    match members.iter().position(|m| m.1) {
        Some(r) => {
            let head = if r == 0 {
                members[0].0.clone()
            } else {
                Hir::concat([
                    Hir::optional(Hir::concat([run(&members[..r]), sep.clone()])),
                    members[r].0.clone(),
                ])
            };
            let mut parts = vec![head];
            for (m, req) in &members[r + 1..] {
                let item = Hir::concat([sep.clone(), m.clone()]);
                parts.push(if *req { item } else { Hir::optional(item) });
            }
            parts.push(tail(lo, hi));
            (Hir::concat(parts), false)
        }
        None => {
            let declared = if members.is_empty() {
                Hir::nothing()
            } else {
                Hir::concat([run(members), tail(0, None)])
            };
            let only_extras = match extras {
                Some(e) => Hir::concat([
                    e.clone(),
                    tail(lo.saturating_sub(1), hi.map(|h| h.saturating_sub(1))),
                ]),
                None => Hir::nothing(),
            };
            let no_extras_allowed = hi == Some(0);
            let body = if no_extras_allowed {
                declared
            } else {
                Hir::alternation([declared, only_extras])
            };
            (body, true)
        }
    }
}

/// Objects with `lo..=hi` members, for texts whose member values nest at most `depth` deep. Only
/// used intersected with an object language, so it need only count members correctly.
fn count_language(lo: u64, hi: Option<u64>, depth: u32) -> Hir {
    let quoted = Hir::concat([Hir::literal("\""), any_string_body(), Hir::literal("\"")]);
    let plain = |extra: &[char]| {
        let mut excluded: Vec<(u32, u32)> = ['"', '[', ']', '{', '}']
            .iter()
            .map(|&c| (c as u32, c as u32))
            .collect();
        excluded.extend(extra.iter().map(|&c| (c as u32, c as u32)));
        Hir::class(ClassSet::from_ranges(excluded).negate())
    };
    let open = Hir::class(ClassSet::from_ranges([
        ('[' as u32, '[' as u32),
        ('{' as u32, '{' as u32),
    ]));
    let close = Hir::class(ClassSet::from_ranges([
        (']' as u32, ']' as u32),
        ('}' as u32, '}' as u32),
    ]));
    // Balanced text nested at most d deep.
    let mut inner = Hir::repeat(Hir::alternation([plain(&[]), quoted.clone()]), 0, None);
    for _ in 1..depth {
        inner = Hir::repeat(
            Hir::alternation([
                plain(&[]),
                quoted.clone(),
                Hir::concat([open.clone(), inner, close.clone()]),
            ]),
            0,
            None,
        );
    }
    let nested = if depth >= 1 {
        Hir::concat([open, inner, close])
    } else {
        Hir::nothing()
    };
    let blank = Hir::repeat(
        Hir::class(ClassSet::from_ranges([
            (0x20, 0x20),
            (0x09, 0x0A),
            (0x0D, 0x0D),
        ])),
        0,
        None,
    );
    let member = Hir::concat([
        blank.clone(),
        quoted.clone(),
        Hir::repeat(Hir::alternation([plain(&[',']), quoted, nested]), 0, None),
    ]);
    let cap = |x: u64| x.min(u32::MAX as u64) as u32;
    let some = if hi == Some(0) {
        Hir::nothing()
    } else {
        Hir::concat([
            member.clone(),
            Hir::repeat(
                Hir::concat([Hir::literal(","), member]),
                cap(lo.saturating_sub(1)),
                hi.map(|h| cap(h - 1)),
            ),
        ])
    };
    let body = if lo == 0 {
        Hir::alternation([blank, some])
    } else {
        some
    };
    Hir::concat([Hir::literal("{"), body, Hir::literal("}")])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_language_counts_top_level_members() {
        let h = count_language(2, Some(3), 2);
        for (text, ok) in [
            (r#"{"a":1,"b":2}"#, true),
            (r#"{"a":1}"#, false),
            (r#"{"a":[1,2,3],"b":{"c":1,"d":2}}"#, true),
            (r#"{"a":1,"b":"x,y","c":3}"#, true),
            (r#"{"a":1,"b":2,"c":3,"d":4}"#, false),
            (r#"{ "a": 1, "b": 2 }"#, true),
        ] {
            assert_eq!(matches(&h, text), ok, "{text}");
        }
        assert!(matches(&count_language(0, Some(0), 0), "{ }"));
    }

    #[test]
    fn body_commas() {
        let m = |s: &str| Hir::literal(s);
        let sep = Hir::literal(",");
        let members = vec![
            (m("a"), false),
            (m("b"), true),
            (m("c"), false),
            (m("d"), false),
        ];
        let (body, empty) = build_body(&members, Some(&m("x")), &sep, None);
        assert!(!empty);
        for (s, ok) in [
            ("b", true),
            ("a,b", true),
            ("b,d", true),
            ("a,b,c,d,x,x", true),
            (",b", false),
            ("a,c", false),
            ("b,x", true),
            ("x,b", false),
        ] {
            assert_eq!(matches(&body, s), ok, "{s}");
        }
        let optional = vec![(m("a"), false), (m("b"), false), (m("c"), false)];
        let (body, empty) = build_body(&optional, None, &sep, None);
        assert!(empty);
        for (s, ok) in [
            ("a", true),
            ("b", true),
            ("a,c", true),
            ("b,c", true),
            ("a,b,c", true),
            ("c,a", false),
            ("a,,c", false),
            ("", false),
        ] {
            assert_eq!(matches(&body, s), ok, "{s}");
        }
    }
}
