//! JSON Schema to HIR: the language of JSON texts an instance of a schema may be written as.
//!
//! Structured output is "JSON matching this schema", and the automaton layer needs that as a regular
//! language over bytes. This module builds it as an [`Hir`] (its printing is
//! [`json_schema_to_regex`]'s output), exactly or not at all: every keyword is either enforced
//! exactly or refused with [`Error::UnsupportedSchema`] naming the keyword and the JSON pointer of
//! the schema holding it. Where JSON Schema is not regular (unbounded nesting, recursion, unique
//! items over an infinite domain) the language is bounded and the bound is documented and
//! configurable; it never admits an invalid document.
//!
//! A token index does not need a regular language, only the states a generation visits, so for it
//! [`json_schema_to_grammar`] keeps recursion as recursion: a `$ref` cycle becomes a rule that
//! calls itself, and so does a free value, and the automaton follows the calls with a stack. The
//! bound is then the stack's depth (256 calls), not an unrolling, and the expression stays the size
//! of the schema instead of growing with every level unrolled. `json_schema_to_regex` and the
//! eager DFA keep the regular, unrolled form.
//!
//! # What a text looks like
//!
//! Compact JSON with the whitespace policy between tokens (default `[ ]?`, so both
//! `json.dumps(x)` and `json.dumps(x, separators=(",", ":"))` match; the preset `"flexible"` admits up
//! to 20 of space, tab, CR, LF). Object members in the declared order (see `layout`); undeclared
//! members after them. Strings with raw UTF-8 or the escapes Python and JavaScript write, including
//! `\uXXXX` for every non-ASCII code point (see `strings`). Numbers as plain decimals or normalized
//! exponent texts, integers as plain decimals (see `numbers`). Values the schema leaves free nest
//! at most `max_free_depth` containers deep; recursive `$ref`s unroll `max_recursion_depth` times.
//!
//! # Keywords
//!
//! | keyword | enforced as |
//! |---|---|
//! | `type`, `enum`, `const` | exactly; constants compared by JSON value (`1 == 1.0`) |
//! | `properties`, `required`, `additionalProperties`, `patternProperties`, `propertyNames` | exactly; patterns match decoded names, unanchored |
//! | `minProperties`, `maxProperties` | exactly (structurally, or by intersecting with a member count) |
//! | `items` (schema or draft-4 array), `prefixItems`, `additionalItems`, `minItems`, `maxItems` | exactly |
//! | `contains`, `minContains`, `maxContains` | exactly (item languages split by the contained schema) |
//! | `uniqueItems` | exactly when items come from a finite set (`enum`, booleans, null); otherwise refused, or ignored with `strict=False` |
//! | `minLength`, `maxLength`, `pattern`, `format` | exactly, intersected with one another; code points counted |
//! | `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` | exactly, any magnitude, both draft-4 and later forms |
//! | `multipleOf` | exactly for powers of ten, short lists of multiples, and small residue automata; otherwise refused |
//! | `allOf` | merged into one conjunction (an intersection) |
//! | `anyOf`, `if`/`then`/`else`, `dependentRequired`, `dependentSchemas`, `dependencies` | unions of merged alternatives |
//! | `oneOf` | a union when branches are provably disjoint where the rest of the conjunction holds, else the symmetric difference (or `anyOf` with `coerce_one_of`) |
//! | `not` | folded when simple, else a complement relative to the values the context allows |
//! | `$ref`, `$defs`, `definitions`, `$id`, `$anchor`, `$dynamicRef`, `$recursiveRef` | within the document; remote references are refused |
//! | `unevaluatedProperties`, `unevaluatedItems` | when they add nothing beyond `additionalProperties`/`items`; otherwise refused, or ignored with `strict=False` |
//! | annotations (`title`, `description`, `default`, `examples`, `content*`, ...) | ignored, as the specification says |
//!
//! Each schema is read under its draft (its nearest `$schema`; none means 2020-12): a keyword the
//! draft does not have is inert there (`const` under draft 4, `prefixItems` under draft 7), draft
//! 4's `integer` excludes `1.0`, and drafts 4 to 7 ignore the siblings of `$ref` (see `drafts`).
//!
//! `format` names outside `formats`'s table are refused in strict mode and ignored with a warning
//! otherwise; `assert_formats = false` treats every `format` as an annotation.

mod arrays;
mod combinators;
mod compile;
mod decimal;
mod digits;
mod drafts;
mod elimination;
mod formats;
mod keywords;
mod layout;
mod matcher;
mod numbers;
mod objects;
mod resolve;
mod strings;
mod values;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::regex::{parse, Hir};
use compile::{Compiler, Ctx, Part};
use rustc_hash::FxHashMap;
pub(crate) use strings::whole_match;

/// The default whitespace between tokens: at most one space.
pub const DEFAULT_WHITESPACE: &str = "[ ]?";

/// The pattern the `"flexible"` whitespace preset stands for: up to 20 JSON whitespace characters.
pub const FLEXIBLE_WHITESPACE: &str = r"[ \t\n\r]{0,20}";

/// How to compile a schema.
#[derive(Debug, Clone)]
pub struct SchemaOptions {
    /// Whitespace between tokens, as a pattern over space, tab, CR and LF (or `"flexible"`);
    /// `None` means [`DEFAULT_WHITESPACE`].
    pub whitespace: Option<String>,
    /// How many times a recursive `$ref` unrolls.
    pub max_recursion_depth: usize,
    /// How many containers deep a value the schema leaves free may nest (each level doubles the
    /// states an exact bracket match needs).
    pub max_free_depth: usize,
    /// Refuse keywords that cannot be enforced exactly (`true`), or ignore those whose omission only
    /// widens the language, with a warning (`false`).
    pub strict: bool,
    /// Compile a `oneOf` whose branches may overlap as `anyOf` instead of exactly.
    pub coerce_one_of: bool,
    /// In grammar mode (the token index), let a keyword that needs the depth of a value nesting
    /// without bound (`not`, `contains`, a member count, an `enum` over a free or recursive value)
    /// bound it to `max_free_depth` / `max_recursion_depth`, with a warning, instead of refusing
    /// the schema. The language is then narrower than the schema's.
    pub depth_bounds: bool,
    /// Enforce `format` (`true`), or read it as an annotation.
    pub assert_formats: bool,
    /// Deepest nesting of locations (containers) the compiler walks.
    pub max_nesting: usize,
    /// Most locations compiled in all (bounds the work of branching and recursion).
    pub max_work: usize,
    /// Most alternatives distributed at one location before branchings are intersected instead.
    pub max_branches: usize,
    /// Largest HIR produced, in nodes.
    pub max_hir_nodes: usize,
}

impl Default for SchemaOptions {
    fn default() -> Self {
        SchemaOptions {
            whitespace: None,
            max_recursion_depth: 3,
            max_free_depth: 4,
            strict: true,
            coerce_one_of: false,
            depth_bounds: false,
            assert_formats: true,
            max_nesting: 128,
            max_work: 100_000,
            max_branches: 64,
            max_hir_nodes: 4_000_000,
        }
    }
}

/// A compiled schema: the language, and the keywords ignored in non-strict mode.
///
/// The HIR holds [`Hir::Shared`] nodes: languages copied by reference, which the automaton layer
/// builds once each ([`expand_shared`] spells them out).
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The language of the admitted JSON texts.
    pub hir: Hir,
    /// One line per ignored keyword (empty in strict mode).
    pub warnings: Vec<String>,
}

fn whitespace(opts: &SchemaOptions) -> Result<Hir> {
    let pattern = match opts.whitespace.as_deref() {
        None => DEFAULT_WHITESPACE,
        Some("flexible") => FLEXIBLE_WHITESPACE,
        Some(p) => p,
    };
    let h = parse(pattern)?;
    fn json_blank(h: &Hir) -> bool {
        let blank = |c: u32| matches!(c, 0x20 | 0x09 | 0x0A | 0x0D);
        match h {
            Hir::Empty => true,
            Hir::Literal(b) => b.iter().all(|&c| blank(c as u32)),
            Hir::Class(set) => set.ranges().iter().all(|&(lo, hi)| (lo..=hi).all(blank)),
            Hir::Concat(v) | Hir::Alternation(v) => v.iter().all(json_blank),
            Hir::Repeat { sub, .. } => json_blank(sub),
            Hir::Look(_)
            | Hir::Intersection(_)
            | Hir::Complement(_)
            | Hir::Shared(_)
            | Hir::Automaton(_)
            | Hir::Call(_)
            | Hir::Grammar(_) => false,
        }
    }
    if !json_blank(&h) {
        return Err(Error::RegexSyntax {
            pattern: pattern.to_string(),
            position: 0,
            message: "the whitespace pattern may only match space, tab, CR and LF".into(),
        });
    }
    Ok(h)
}

/// Compiles `schema` into the language of the JSON texts of its instances.
///
/// Errors: [`Error::UnsupportedSchema`] for a keyword that cannot be enforced exactly (with its
/// name and the pointer of the schema holding it), [`Error::SizeLimit`] when a configured limit is
/// reached, [`Error::RegexSyntax`] for a malformed `whitespace` pattern.
pub fn json_schema_to_hir(schema: &Value, opts: &SchemaOptions) -> Result<Compiled> {
    compile_schema(schema, opts, true, false)
}

/// [`json_schema_to_hir`] with recursion kept as recursion: a `$ref` that leads back to a
/// location being compiled becomes a call of a rule ([`Hir::Call`] inside a [`Hir::Grammar`]),
/// instead of being unrolled `max_recursion_depth` times. The language is then not regular and
/// has no pattern; the automaton layer follows the calls with a stack (a step that nests past
/// its call depth is a size-limit error, see [`crate::dfa::Determinizer::with_call_depth`]), and
/// builds only the states a walk visits. A schema without recursion compiles as [`json_schema_to_hir`] compiles it.
///
/// Recursion under a keyword that needs the automaton or the depth of its operand (`not`,
/// `contains` with bounds, `minProperties`/`maxProperties` counted by intersection, an `enum`
/// checked against the other keywords) cannot stay recursive, and unrolling it would refuse valid
/// documents past the unrolled depth: that is an [`Error::UnsupportedSchema`] naming the keyword
/// and its pointer.
pub fn json_schema_to_grammar(schema: &Value, opts: &SchemaOptions) -> Result<Compiled> {
    compile_schema(schema, opts, true, true)
}

/// Whether an error from a grammar (from the automaton layer, which refuses rules beside anchors,
/// or from a keyword that needs a bounded depth when `depth_bounds` allows one) means that the
/// schema must be compiled with unrolled recursion instead.
pub fn is_unrolling_needed(e: &Error) -> bool {
    matches!(e, Error::Invalid(_))
}

/// [`json_schema_to_hir`], with the memo of compiled locations on or off (off only in tests, as
/// the oracle the memo is checked against), and recursion unrolled or kept as calls.
fn compile_schema(
    schema: &Value,
    opts: &SchemaOptions,
    memoize: bool,
    grammar: bool,
) -> Result<Compiled> {
    let ws = whitespace(opts)?;
    let mut c = Compiler::new(schema, opts, ws);
    c.memoize = memoize;
    if grammar {
        c.grammar = Some(Default::default());
    }
    let root = c.doc.root();
    let mut ctx = Ctx::root(opts.max_free_depth as u32);
    ctx.free_recurses = grammar;
    let mut lang = c.compile_loc(vec![Part::Schema(root)], &ctx)?;
    if let Some((keyword, pointer)) = c.bounded_by.take() {
        // A free or recursive value under a strict layout was bounded: refused, never narrowed,
        // unless the caller allowed depth bounds.
        if opts.depth_bounds {
            c.warnings.push(format!(
                "bounded {keyword} at {pointer:?}: free values nest at most {} deep and \
                 recursive references unroll {} times there",
                opts.max_free_depth, opts.max_recursion_depth
            ));
        } else {
            return Err(Error::UnsupportedSchema {
                message: format!(
                "{keyword} at {pointer:?} needs an exact automaton of a value that nests without \
                 bound (a free value or a recursive $ref); bounding its depth would refuse valid \
                 documents"
            ),
                keyword: keyword.to_string(),
                pointer: pointer.to_string(),
            });
        }
    }
    let mut rules_count = 0;
    if let Some(rules) = c.grammar.take() {
        // Anchors and rules do not mix; the automaton layer refuses them, and the caller unrolls.
        rules_count = rules.bodies.len();
        lang.hir = Hir::grammar(lang.hir, rules.bodies);
    }
    if lang.hir.is_nothing() && c.truncated {
        return Err(Error::size_limit(
            "max_recursion_depth",
            opts.max_recursion_depth + 1,
            opts.max_recursion_depth,
        ));
    }
    // Every node of the result was charged while its location was built, but for the grammar's
    // own node and a shared node around the root and around each rule's body, added after their
    // charge. Below the limit by that bound, the result is too, and the walk that would count it
    // exactly (a few percent of a schema's time to first mask) is skipped.
    let bound = c.charged_nodes().saturating_add(2 + 2 * rules_count);
    if bound > opts.max_hir_nodes {
        let size = lang.hir.unique_size();
        if size > opts.max_hir_nodes {
            return Err(Error::size_limit("max_hir_nodes", size, opts.max_hir_nodes));
        }
    }
    Ok(Compiled {
        hir: lang.hir,
        warnings: c.warnings,
    })
}

/// Most nodes one automaton's printed expression may take: state elimination reaches it quickly
/// when the expression explodes, and past it the pattern would be unreadable anyway.
const MAX_AUTOMATON_EXPRESSION_NODES: usize = 200_000;

/// `h` with every shared node expanded into a copy of its contents and every automaton written as
/// an expression: the plain expression, which prints without any extended operator the compiler
/// does not put there itself.
///
/// The expansion repeats each shared language at every place it occurs, which can be far larger
/// than `h` itself; it is refused with [`Error::SizeLimit`] (`max_pattern_nodes`) past `limit`
/// nodes, before anything is built. An automaton's expression (by state elimination) can be
/// exponentially larger than the automaton, and is refused the same way past
/// `MAX_AUTOMATON_EXPRESSION_NODES`.
pub fn expand_shared(h: &Hir, limit: usize) -> Result<Hir> {
    let refused = || Error::size_limit("max_pattern_nodes", limit + 1, limit);
    let has_automata = !h.walk_unique(&mut Default::default(), |x| !matches!(x, Hir::Automaton(_)));
    let spelled;
    let h = if has_automata {
        let budget = limit.min(MAX_AUTOMATON_EXPRESSION_NODES);
        spelled = spell_automata(h, budget, &mut FxHashMap::default()).ok_or_else(refused)?;
        &spelled
    } else {
        h
    };
    fn expand(h: &Hir) -> Hir {
        h.recurse(|| match h {
            Hir::Shared(s) => expand(s.hir()),
            Hir::Intersection(v) => Hir::intersection(v.iter().map(expand)),
            Hir::Concat(v) => Hir::concat(v.iter().map(expand)),
            Hir::Alternation(v) => Hir::alternation(v.iter().map(expand)),
            Hir::Repeat { sub, min, max } => Hir::repeat(expand(sub), *min, *max),
            Hir::Complement(sub) => Hir::complement(expand(sub)),
            other => other.clone(),
        })
    }
    match h.expanded_size_within(limit) {
        Some(_) => Ok(expand(h)),
        None => Err(refused()),
    }
}

/// `h` with every automaton replaced by an expression for it (each converted once, and each
/// shared node rebuilt once, so sharing survives); `None` when an expression exceeds `budget`.
fn spell_automata(h: &Hir, budget: usize, done: &mut FxHashMap<Hir, Hir>) -> Option<Hir> {
    h.recurse(|| {
        let mut go = |x: &Hir| spell_automata(x, budget, done);
        Some(match h {
            Hir::Automaton(a) => match done.get(h) {
                Some(e) => e.clone(),
                None => {
                    let e = elimination::automaton_expression(a.dfa(), a.state(), budget)?;
                    done.insert(h.clone(), e.clone());
                    e
                }
            },
            Hir::Shared(s) => match done.get(h) {
                Some(e) => e.clone(),
                None => {
                    let e = Hir::shared(spell_automata(s.hir(), budget, done)?);
                    done.insert(h.clone(), e.clone());
                    e
                }
            },
            Hir::Intersection(v) => {
                Hir::intersection(v.iter().map(&mut go).collect::<Option<Vec<_>>>()?)
            }
            Hir::Concat(v) => Hir::concat(v.iter().map(&mut go).collect::<Option<Vec<_>>>()?),
            Hir::Alternation(v) => {
                Hir::alternation(v.iter().map(&mut go).collect::<Option<Vec<_>>>()?)
            }
            Hir::Repeat { sub, min, max } => Hir::repeat(go(sub)?, *min, *max),
            Hir::Complement(sub) => Hir::complement(go(sub)?),
            other => other.clone(),
        })
    })
}

/// Compiles `schema` and prints the language as a pattern (see [`json_schema_to_hir`]); the
/// second element lists the keywords ignored in non-strict mode. The pattern spells out every copy
/// of every shared language, so it may be refused (`max_pattern_nodes`, the same number as
/// `max_hir_nodes`) where the automaton of the same schema builds.
pub fn json_schema_to_regex(schema: &Value, opts: &SchemaOptions) -> Result<(String, Vec<String>)> {
    let c = json_schema_to_hir(schema, opts)?;
    Ok((
        expand_shared(&c.hir, opts.max_hir_nodes)?.to_string(),
        c.warnings,
    ))
}

#[cfg(test)]
mod tests;
