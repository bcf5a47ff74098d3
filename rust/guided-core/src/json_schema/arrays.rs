//! Array languages: positional items, a common item schema, length bounds, `contains` and
//! `uniqueItems`.
//!
//! Position `i` of an array is governed, schema by schema, by the `i`-th `prefixItems` entry (the
//! array form of `items` before 2020-12) when there is one, else by `items` (`additionalItems`
//! after an array-form `items`). With `K` the longest prefix, positions `0..K` get their own item
//! languages and every later position shares one. Length bounds are placed structurally: the first
//! `minItems` items are mandatory, later prefix positions nest as optionals
//! (`[a (, b (, c)?)?]`), and the shared tail is a counted repetition, so nothing here costs more
//! than one copy of each item language plus the separator.
//!
//! `contains` (with `minContains`/`maxContains`) counts items that match a schema. Each item
//! either matches (`item ∧ C`) or does not (`item ∧ ¬C`), so with only a shared item schema the
//! array is a sequence of non-matching runs around a counted number of matching items. With
//! positional items, several `contains`, or length bounds as well, the array language is
//! intersected with a counting language whose items are the matching and non-matching values in
//! cover mode (exact for every item the array language can hold); both sides then use the strict
//! layout so that they agree on the order of members inside items.
//!
//! `uniqueItems` is regular when the items are drawn from a finite set of values `D` (an `enum`,
//! booleans, null): the array is then intersected, for every `v` in `D`, with "arrays in which `v`
//! occurs at most once". Over an unbounded domain it is not regular and is refused (or, with
//! `strict=False`, ignored with a warning; the model is then trusted with it).

use std::rc::Rc;

use serde_json::Value;

use super::compile::{Compiler, Ctx, Flat, Lang, Part};
use super::keywords::scalars;
use super::layout::{Loc, Source};
use super::resolve::SchemaRef;
use super::values::json_equal;
use crate::error::Result;
use crate::regex::Hir;

/// The most distinct values `uniqueItems` may range over.
const MAX_UNIQUE_DOMAIN: usize = 16;

/// One schema's array keywords.
struct Owner<'a> {
    prefix: Vec<SchemaRef<'a>>,
    rest: Option<SchemaRef<'a>>,
}

struct Contains<'a> {
    schema: SchemaRef<'a>,
    lo: u64,
    hi: Option<u64>,
}

impl<'a> Compiler<'a> {
    /// The language of arrays where the conjunction `flat` holds.
    pub(crate) fn array_language(
        &mut self,
        flat: &Flat<'a>,
        ctx: &Ctx<'a>,
        unconstrained: bool,
    ) -> Result<Lang> {
        let mut owners = Vec::new();
        let (mut min, mut max) = (0u64, None::<u64>);
        let mut contains = Vec::new();
        let mut unique: Option<Rc<str>> = None;
        for s in &flat.schemas {
            let Some(obj) = s.keywords() else {
                continue;
            };
            let mut o = Owner {
                prefix: Vec::new(),
                rest: None,
            };
            let list = |k: &str| -> Result<Vec<SchemaRef<'a>>> {
                match obj.get(k) {
                    Some(Value::Array(a)) => Ok(a
                        .iter()
                        .enumerate()
                        .map(|(i, x)| s.child(x, &[k, &i.to_string()]))
                        .collect()),
                    _ => Err(self.unsupported(k, &s.ptr, "must be an array of schemas")),
                }
            };
            if obj.contains_key("prefixItems") {
                o.prefix = list("prefixItems")?;
                o.rest = obj.get("items").map(|x| s.child(x, &["items"]));
            } else if let Some(Value::Array(_)) = obj.get("items") {
                o.prefix = list("items")?;
                o.rest = obj
                    .get("additionalItems")
                    .map(|x| s.child(x, &["additionalItems"]));
            } else {
                o.rest = obj.get("items").map(|x| s.child(x, &["items"]));
            }
            if let Some(v) = obj.get("minItems") {
                min = min.max(self.count_keyword("minItems", s, v)?);
            }
            if let Some(v) = obj.get("maxItems") {
                let m = self.count_keyword("maxItems", s, v)?;
                max = Some(max.map_or(m, |x| x.min(m)));
            }
            if let Some(c) = obj.get("contains") {
                let lo = match obj.get("minContains") {
                    Some(v) => self.count_keyword("minContains", s, v)?,
                    None => 1,
                };
                let hi = match obj.get("maxContains") {
                    Some(v) => Some(self.count_keyword("maxContains", s, v)?),
                    None => None,
                };
                contains.push(Contains {
                    schema: s.child(c, &["contains"]),
                    lo,
                    hi,
                });
            }
            if obj.get("uniqueItems") == Some(&Value::Bool(true)) {
                unique = Some(s.ptr.clone());
            }
            if let Some(u) = obj.get("unevaluatedItems") {
                self.unevaluated_items(s, u)?;
            }
            owners.push(o);
        }
        if max.is_some_and(|m| m < min) {
            return Ok(Lang::nothing());
        }
        // `contains` with an upper count of zero and no lower one is a plain item restriction.
        let needs_strict = !contains.is_empty() || unique.is_some();
        let ctx = if needs_strict && ctx.strict.is_none() {
            let loc = Loc::new(flat.schemas.iter().cloned().map(Source::Schema).collect());
            match (contains.first(), &unique) {
                (Some(c), _) => ctx.with_strict(loc, "contains", c.schema.ptr.clone()),
                (None, Some(ptr)) => ctx.with_strict(loc, "uniqueItems", ptr.clone()),
                (None, None) => ctx.clone(),
            }
        } else {
            ctx.clone()
        };
        let k = owners.iter().map(|o| o.prefix.len()).max().unwrap_or(0);
        let parts_at = |i: usize| -> Vec<Part<'a>> {
            owners
                .iter()
                .filter_map(|o| o.prefix.get(i).cloned().or_else(|| o.rest.clone()))
                .map(Part::Schema)
                .collect()
        };
        let rest_parts: Vec<Part<'a>> = owners
            .iter()
            .filter_map(|o| o.rest.clone())
            .map(Part::Schema)
            .collect();
        let max_free = self.opts.max_free_depth as u32;
        let item_ctx = |me: &Self| {
            let strict = ctx.strict.as_ref().map(|l| l.child_item(&me.doc));
            ctx.child(flat, unconstrained, max_free, strict)
        };
        let mut items = Vec::new();
        let mut depth = 0;
        for i in 0..k {
            let c = item_ctx(self);
            let l = self.compile_loc(parts_at(i), &c)?;
            depth = depth.max(l.depth);
            items.push(self.barrier(l.hir));
        }
        let c = item_ctx(self);
        let mut rest = self.compile_loc(rest_parts.clone(), &c)?;
        rest.hir = self.barrier(rest.hir);
        depth = depth.max(rest.depth);
        // Items that admit nothing end the array there.
        let mut hi = max;
        if let Some(i) = items.iter().position(Hir::is_nothing) {
            hi = Some(hi.map_or(i as u64, |h| h.min(i as u64)));
        }
        if rest.hir.is_nothing() {
            hi = Some(hi.map_or(k as u64, |h| h.min(k as u64)));
        }
        if hi.is_some_and(|h| h < min) {
            return Ok(Lang::nothing());
        }
        let mut hir = self.sequence(&items, &rest.hir, min, hi);
        let alone = contains.len() == 1;
        for c in &contains {
            if c.hi.is_some_and(|h| h < c.lo) {
                return Ok(Lang::nothing());
            }
            let counted = self.contains_language(
                c,
                alone,
                &rest_parts,
                k,
                min,
                hi,
                depth,
                &ctx,
                flat,
                unconstrained,
            )?;
            hir = match counted {
                Counted::Replace(h) => h,
                Counted::Intersect(h) => Hir::intersection([hir, h]),
            };
        }
        if let Some(ptr) = unique {
            if hi.is_none_or(|h| h > 1) {
                if let Some(u) =
                    self.unique_language(&owners, k, &ctx, flat, unconstrained, &ptr)?
                {
                    hir = Hir::intersection([hir, u]);
                }
            }
        }
        Ok(Lang {
            hir,
            depth: depth + 1,
        })
    }

    /// `unevaluatedItems` adds nothing when the schema holding it already governs every position
    /// with `items` (or `additionalItems` after an array `items`; without one it is ignored);
    /// anything else depends on evaluation results.
    fn unevaluated_items(&mut self, s: &SchemaRef<'a>, u: &Value) -> Result<()> {
        let covered = match s.get("items") {
            Some(Value::Array(_)) => s.get("additionalItems").is_some(),
            Some(_) => true,
            None => false,
        };
        if u == &Value::Bool(true) || covered {
            return Ok(());
        }
        self.skip_or_fail(
            "unevaluatedItems",
            &s.ptr,
            "depends on which subschemas evaluated each item, which is only tracked through items",
        )
    }

    fn sep(&self) -> Hir {
        Hir::concat([self.ws.clone(), Hir::literal(","), self.ws.clone()])
    }

    /// `[` items `]` with positional languages `items`, then `rest`, `min..=max` items in all.
    fn sequence(&self, items: &[Hir], rest: &Hir, min: u64, max: Option<u64>) -> Hir {
        let cap = |x: u64| x.min(u32::MAX as u64) as u32;
        let k = items.len() as u64;
        let sep = self.sep();
        let item = |i: u64| -> Hir {
            if i < k {
                items[i as usize].clone()
            } else {
                rest.clone()
            }
        };
        // Positions k.. share one counted repetition.
        let tail_k = if max.is_some_and(|m| m <= k) {
            Hir::Empty
        } else {
            Hir::repeat(
                Hir::concat([sep.clone(), rest.clone()]),
                cap(min.saturating_sub(k)),
                max.map(|m| cap(m - k)),
            )
        };
        let mut tail = tail_k;
        for i in (1..k).rev() {
            if max.is_some_and(|m| i >= m) {
                tail = Hir::Empty;
                continue;
            }
            let step = Hir::concat([sep.clone(), item(i), tail]);
            tail = if i < min { step } else { Hir::optional(step) };
        }
        let body = if k == 0 {
            Hir::concat([
                rest.clone(),
                Hir::repeat(
                    Hir::concat([sep.clone(), rest.clone()]),
                    cap(min.saturating_sub(1)),
                    max.map(|m| cap(m.saturating_sub(1))),
                ),
            ])
        } else {
            Hir::concat([item(0), tail])
        };
        let inner = if max == Some(0) {
            Hir::Empty
        } else if min == 0 {
            Hir::optional(Hir::concat([body, self.ws.clone()]))
        } else {
            Hir::concat([body, self.ws.clone()])
        };
        Hir::concat([Hir::literal("["), self.ws.clone(), inner, Hir::literal("]")])
    }

    /// The `contains` constraint as a language to intersect with the array (or to replace it,
    /// when it is the `alone` one and nothing else shapes the array).
    #[allow(clippy::too_many_arguments)]
    fn contains_language(
        &mut self,
        c: &Contains<'a>,
        alone: bool,
        rest_parts: &[Part<'a>],
        k: usize,
        min: u64,
        max: Option<u64>,
        depth: u32,
        ctx: &Ctx<'a>,
        flat: &Flat<'a>,
        unconstrained: bool,
    ) -> Result<Counted> {
        let max_free = self.opts.max_free_depth as u32;
        let sep = self.sep();
        // Simple case: one shared item language, no length bounds and no other `contains`: build
        // the count directly. With a second `contains` each must be intersected, or the later
        // one's direct language would replace the earlier one's.
        let direct = alone && k == 0 && min == 0 && max.is_none();
        let (yes, no) = if direct {
            let mut with = rest_parts.to_vec();
            with.push(Part::Schema(c.schema.clone()));
            let mut without = rest_parts.to_vec();
            without.push(Part::Not(c.schema.clone()));
            let strict = ctx.strict.as_ref().map(|l| l.child_item(&self.doc));
            let yes = self.compile_loc(with, &ctx.child(flat, unconstrained, max_free, strict))?;
            let strict = ctx.strict.as_ref().map(|l| l.child_item(&self.doc));
            let no =
                self.compile_loc(without, &ctx.child(flat, unconstrained, max_free, strict))?;
            (yes.hir, no.hir)
        } else {
            // Cover mode: exact for every item the array language can hold.
            let strict = ctx.strict.as_ref().map(|l| l.child_item(&self.doc));
            let mut ictx = ctx.child(flat, unconstrained, max_free, strict);
            ictx.cover = Some(self.bounded_depth(depth, "contains", &c.schema.ptr)?);
            let yes = self.compile_loc(vec![Part::Schema(c.schema.clone())], &ictx)?;
            let no = self.compile_loc(vec![Part::Not(c.schema.clone())], &ictx)?;
            (yes.hir, no.hir)
        };
        let cap = |x: u64| x.min(u32::MAX as u64) as u32;
        // A run of non-matching items, each preceded by a separator.
        let no_run = Hir::repeat(Hir::concat([sep.clone(), no.clone()]), 0, None);
        let counted_tail = |lo: u64, hi: Option<u64>| {
            Hir::repeat(
                Hir::concat([sep.clone(), yes.clone(), no_run.clone()]),
                cap(lo),
                hi.map(cap),
            )
        };
        let starts_no = Hir::concat([no.clone(), no_run.clone(), counted_tail(c.lo, c.hi)]);
        let starts_yes = if c.hi == Some(0) {
            Hir::nothing()
        } else {
            Hir::concat([
                yes.clone(),
                no_run.clone(),
                counted_tail(c.lo.saturating_sub(1), c.hi.map(|h| h - 1)),
            ])
        };
        let body = Hir::alternation([starts_no, starts_yes]);
        let inner = if c.lo == 0 {
            Hir::optional(Hir::concat([body, self.ws.clone()]))
        } else {
            Hir::concat([body, self.ws.clone()])
        };
        let lang = Hir::concat([Hir::literal("["), self.ws.clone(), inner, Hir::literal("]")]);
        Ok(if direct {
            Counted::Replace(lang)
        } else {
            Counted::Intersect(lang)
        })
    }

    /// The values a location can take, when they form a known finite list.
    fn finite_values(
        &mut self,
        parts: Vec<Part<'a>>,
        ctx: &Ctx<'a>,
    ) -> Result<Option<Vec<&'a Value>>> {
        let mut flat = Flat::default();
        let mut brs = Vec::new();
        if !self.flatten(&mut flat, parts, &mut brs, ctx)? {
            return Ok(Some(Vec::new()));
        }
        if !brs.is_empty() {
            return Ok(None);
        }
        let sc = scalars(&flat.schemas)?;
        if let Some(v) = sc.values {
            return Ok(Some(v));
        }
        const NULL: &Value = &Value::Null;
        const TRUE: &Value = &Value::Bool(true);
        const FALSE: &Value = &Value::Bool(false);
        use super::keywords::Types;
        if sc.types.minus(Types::NULL.or(Types::BOOL)).is_empty() {
            let mut out = Vec::new();
            if sc.types.has(Types::NULL) {
                out.push(NULL);
            }
            if sc.types.has(Types::BOOL) {
                out.extend([TRUE, FALSE]);
            }
            return Ok(Some(out));
        }
        Ok(None)
    }

    /// `uniqueItems` over a finite domain: for each value, "at most once".
    fn unique_language(
        &mut self,
        owners: &[Owner<'a>],
        k: usize,
        ctx: &Ctx<'a>,
        flat: &Flat<'a>,
        unconstrained: bool,
        ptr: &str,
    ) -> Result<Option<Hir>> {
        let max_free = self.opts.max_free_depth as u32;
        let mut domain: Vec<&'a Value> = Vec::new();
        let mut positions: Vec<Vec<Part<'a>>> = (0..k)
            .map(|i| {
                owners
                    .iter()
                    .filter_map(|o| o.prefix.get(i).cloned().or_else(|| o.rest.clone()))
                    .map(Part::Schema)
                    .collect()
            })
            .collect();
        positions.push(
            owners
                .iter()
                .filter_map(|o| o.rest.clone())
                .map(Part::Schema)
                .collect(),
        );
        for parts in positions {
            let strict = ctx.strict.as_ref().map(|l| l.child_item(&self.doc));
            let ictx = ctx.child(flat, unconstrained, max_free, strict);
            match self.finite_values(parts, &ictx)? {
                Some(vals) => {
                    for v in vals {
                        if !domain.iter().any(|d| json_equal(d, v)) {
                            domain.push(v);
                        }
                    }
                }
                None => {
                    self.skip_or_fail(
                        "uniqueItems",
                        ptr,
                        "items are not drawn from a finite set of values",
                    )?;
                    return Ok(None);
                }
            }
        }
        if domain.len() > MAX_UNIQUE_DOMAIN {
            self.skip_or_fail(
                "uniqueItems",
                ptr,
                &format!(
                    "items range over {} values (at most {MAX_UNIQUE_DOMAIN})",
                    domain.len()
                ),
            )?;
            return Ok(None);
        }
        let Some(loc) = ctx.strict.as_ref().map(|l| l.child_item(&self.doc)) else {
            return Err(self.internal("uniqueItems without a strict layout"));
        };
        let mut lits = Vec::new();
        for v in &domain {
            lits.push(self.literal(v, &loc, ctx.nest + 1)?);
        }
        let sep = self.sep();
        let mut langs = Vec::new();
        for i in 0..lits.len() {
            let others = Hir::alternation(
                lits.iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, h)| h.clone()),
            );
            let run = Hir::concat([
                others.clone(),
                Hir::repeat(Hir::concat([sep.clone(), others]), 0, None),
            ]);
            let once = Hir::concat([
                Hir::optional(Hir::concat([run.clone(), sep.clone()])),
                lits[i].clone(),
                Hir::optional(Hir::concat([sep.clone(), run.clone()])),
            ]);
            let body = Hir::alternation([run, once]);
            langs.push(Hir::concat([
                Hir::literal("["),
                self.ws.clone(),
                Hir::optional(Hir::concat([body, self.ws.clone()])),
                Hir::literal("]"),
            ]));
        }
        Ok(Some(Hir::intersection(langs)))
    }
}

/// How a `contains` language combines with the array language.
enum Counted {
    /// It is the whole array language.
    Replace(Hir),
    /// It is intersected with the array language.
    Intersect(Hir),
}
