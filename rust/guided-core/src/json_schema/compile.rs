//! The compiler's driver: from the schemas that apply at a location to the language of the texts
//! that may stand there.
//!
//! A location (the root, a property's value, an array item) is described by a conjunction of
//! *parts*: schemas that must hold, schemas that must not ([`Part::Not`]), and names an object must
//! or must not have. [`Compiler::compile_loc`] first *flattens* the conjunction: `$ref` targets and
//! `allOf` members join it (a schema met twice at one location counts once, which also ends
//! reference loops that never leave the location), and the keywords that branch (`anyOf`, `oneOf`,
//! `if`, the dependency keywords) are set aside. It then *distributes* over the branchings: each
//! alternative is merged into its own copy of the conjunction, so `allOf` of objects becomes one
//! object with all their properties rather than an intersection of differently ordered languages,
//! and every branch is compiled as a plain conjunction. When the number of branch combinations
//! outgrows `max_branches`, the remaining branchings are compiled on their own and intersected
//! instead, which is exact too (both sides then share the strict layout, see `layout`).
//!
//! A conjunction without branchings is compiled type by type (`null`, booleans, numbers, strings,
//! arrays, objects; their modules do the work) and the alternatives are joined. What is left of
//! `not` after folding the easy cases (a `not` of types, of one required name, of string constants)
//! becomes a complement: the negated schema is compiled in *cover* mode, in which the depth of
//! unconstrained values and of recursion is taken from the positive side's depth, so that the
//! complement is exact for every text the positive side can produce.
//!
//! Real schemas repeat themselves: one definition is referenced from many places, every object
//! that admits extra members holds "any JSON value", and the comma construction of objects copies
//! member values. Two mechanisms keep that from multiplying the work. Compiled locations are
//! memoized (the same parts in the same context give the same language; see
//! [`Compiler::compile_loc`] for what the context is), and large languages are put behind
//! [`Hir::Shared`] nodes ([`Compiler::barrier`]), interned by contents, so that a copy is a pointer
//! and the automaton layer builds each of them once. The expression the compiler returns is then a
//! DAG whose size is its distinct nodes; spelled out as a pattern it can be far larger.
//!
//! In grammar mode ([`super::json_schema_to_grammar`]) recursion is not unrolled. A location whose
//! key (its parts, free depth and cover depth) is met again below itself, while it is still being
//! compiled, becomes a rule ([`Hir::Call`] inside [`Hir::Grammar`]); so does a free value, whose
//! children are then free to the same depth and so repeat its key. The keys are finite, so every
//! recursion meets an open location. What needs the depth of a language to stay exact (the cover
//! of a complement, a member count by intersection) refuses a recursive one with
//! `UnsupportedSchemaError`: unrolling it would narrow the language without saying so. Locations
//! under a strict layout are not memoized, so they cannot become calls: a free or recursive value
//! there would be bounded, and grammar mode refuses the schema instead, naming the keyword that
//! put the layout in force ([`Ctx::strict_by`]), unless `depth_bounds` allows the bound.
//!
//! Termination and size: every call counts against `max_work`, nesting against `max_nesting`, and a
//! `$ref` already expanded `max_recursion_depth` times among a location's ancestors stops the
//! unrolling there (the location then admits nothing, and a result that is empty only for that
//! reason is reported as a size limit rather than returned). Values the schema leaves free nest at
//! most `max_free_depth` containers deep.

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{LazyLock, Mutex};

// Keys come from the schema, which is untrusted: a seeded hasher, but a fast one (the compiler
// hashes whole expressions to intern them).
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use indexmap::IndexSet;
use rustc_hash::FxHashSet;
use serde_json::Value;
use std::hash::BuildHasher;

use super::drafts::Keywords;
use super::keywords::{constrains, scalars, Scalars, Types};
use super::layout::{declared_names, Loc, Source};
use super::numbers::{integer_spelling, number_language, NumberSpec};
use super::resolve::{Document, Draft, SchemaRef};
use super::strings::{length_range, pattern_value, string_text, strings_except};
use super::SchemaOptions;
use crate::error::{Error, Result};
use crate::regex::Hir;

/// A language and the deepest container nesting of its texts (0: scalars only).
#[derive(Clone, Debug)]
pub(crate) struct Lang {
    pub(crate) hir: Hir,
    pub(crate) depth: u32,
}

impl Lang {
    pub(crate) fn nothing() -> Lang {
        Lang {
            hir: Hir::nothing(),
            depth: 0,
        }
    }

    pub(crate) fn scalar(hir: Hir) -> Lang {
        Lang { hir, depth: 0 }
    }

    /// The union of `langs`.
    pub(crate) fn union(langs: Vec<Lang>) -> Lang {
        let depth = langs
            .iter()
            .filter(|l| !l.hir.is_nothing())
            .map(|l| l.depth)
            .max()
            .unwrap_or(0);
        Lang {
            hir: Hir::alternation(langs.into_iter().map(|l| l.hir)),
            depth,
        }
    }
}

/// One conjunct of a location.
#[derive(Clone, Debug)]
pub(crate) enum Part<'a> {
    /// The value must satisfy this schema.
    Schema(SchemaRef<'a>),
    /// The value must not satisfy this schema.
    Not(SchemaRef<'a>),
    /// If the value is an object, it has this member.
    Require(Rc<str>),
    /// If the value is an object, it lacks this member.
    Forbid(Rc<str>),
    /// The value is not of these types.
    Exclude(Types),
}

/// A flattened conjunction.
#[derive(Clone, Debug, Default)]
pub(crate) struct Flat<'a> {
    /// Schema objects whose keywords all apply.
    pub(crate) schemas: Vec<SchemaRef<'a>>,
    /// Schemas the value must not satisfy.
    pub(crate) nots: Vec<SchemaRef<'a>>,
    /// Names an object must have (beyond `required` keywords), in the order first met: sets,
    /// since a schema may list a hundred thousand of them.
    pub(crate) required: IndexSet<Rc<str>>,
    /// Names an object must not have.
    pub(crate) forbidden: IndexSet<Rc<str>>,
    /// Types excluded by a folded `not`.
    pub(crate) excluded_types: Option<Types>,
    /// String values excluded by a folded `not`.
    pub(crate) excluded_strings: Vec<&'a str>,
    /// Pointers of the schemas merged (each counts once).
    pub(crate) seen: HashSet<Rc<str>>,
    /// `$ref` targets expanded here (recursion accounting for the children).
    pub(crate) refs: Vec<Rc<str>>,
}

/// What kind of choice a branching keyword makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BranchKind {
    /// At least one alternative holds.
    AnyOf,
    /// Exactly one alternative holds.
    OneOf,
    /// `if`/`then`/`else` or a dependency: the alternatives are disjoint by construction.
    Disjoint,
}

/// A keyword that makes the conjunction branch.
#[derive(Clone, Debug)]
pub(crate) struct Branching<'a> {
    pub(crate) kind: BranchKind,
    pub(crate) owner: Rc<str>,
    pub(crate) alts: Vec<Vec<Part<'a>>>,
}

/// Reference targets expanded at the ancestors of a location.
#[derive(Debug)]
pub(crate) struct Frame {
    ptr: Rc<str>,
    parent: Option<Rc<Frame>>,
}

/// Where a location stands.
#[derive(Clone, Debug)]
pub(crate) struct Ctx<'a> {
    /// Container nesting from the root.
    pub(crate) nest: usize,
    refs: Option<Rc<Frame>>,
    /// Container levels an unconstrained value may still open.
    pub(crate) free: u32,
    /// In cover mode (inside a complement): the container depth the positive side can reach here.
    pub(crate) cover: Option<u32>,
    /// The strict layout of this location, when one is in force.
    pub(crate) strict: Option<Rc<Loc<'a>>>,
    /// The keyword that put the strict layout in force, and the pointer of its schema.
    pub(crate) strict_by: Option<(&'static str, Rc<str>)>,
    /// In grammar mode: the children of a free value are free to the same depth, so that a free
    /// value's child location repeats its parent's and becomes a call of it (the depth is then
    /// the call depth's, not `max_free_depth`).
    pub(crate) free_recurses: bool,
}

impl<'a> Ctx<'a> {
    /// The context of the document root.
    pub(crate) fn root(free: u32) -> Ctx<'a> {
        Ctx {
            nest: 0,
            refs: None,
            free,
            cover: None,
            strict: None,
            strict_by: None,
            free_recurses: false,
        }
    }

    /// The context of a child location of a value compiled from `flat`.
    pub(crate) fn child(
        &self,
        flat: &Flat<'a>,
        unconstrained: bool,
        max_free: u32,
        strict: Option<Loc<'a>>,
    ) -> Ctx<'a> {
        let mut refs = self.refs.clone();
        for r in &flat.refs {
            refs = Some(Rc::new(Frame {
                ptr: r.clone(),
                parent: refs,
            }));
        }
        Ctx {
            nest: self.nest + 1,
            refs,
            // Only a memoized child can repeat its parent's key: one under a strict layout
            // nests down as without a grammar.
            free: match (unconstrained, self.free_recurses && strict.is_none()) {
                (true, true) => self.free,
                (true, false) => self.free.saturating_sub(1),
                (false, _) => max_free,
            },
            cover: self.cover.map(|r| r.saturating_sub(1)),
            strict_by: strict.as_ref().and(self.strict_by.clone()),
            strict: strict.map(Rc::new),
            free_recurses: self.free_recurses,
        }
    }

    /// Whether a value here may be an array or object.
    pub(crate) fn containers_allowed(&self, unconstrained: bool) -> bool {
        match self.cover {
            Some(r) => r >= 1,
            None => !unconstrained || self.free >= 1,
        }
    }

    /// This location, compiled in cover mode for a positive side of depth `depth`.
    fn covering(&self, depth: u32) -> Ctx<'a> {
        Ctx {
            cover: Some(depth),
            ..self.clone()
        }
    }

    /// This location under the strict layout `loc`, which `keyword` (at `ptr`) needs.
    pub(crate) fn with_strict(&self, loc: Loc<'a>, keyword: &'static str, ptr: Rc<str>) -> Ctx<'a> {
        Ctx {
            strict: Some(Rc::new(loc)),
            strict_by: Some((keyword, ptr)),
            ..self.clone()
        }
    }

    fn ref_count(&self, ptr: &str) -> usize {
        let mut n = 0;
        let mut f = self.refs.as_deref();
        while let Some(frame) = f {
            if frame.ptr.as_ref() == ptr {
                n += 1;
            }
            f = frame.parent.as_deref();
        }
        n
    }
}

/// The compiler: the document, the options and what compiling has learned so far.
pub(crate) struct Compiler<'a> {
    pub(crate) doc: Document<'a>,
    pub(crate) opts: &'a SchemaOptions,
    /// Whitespace between tokens.
    pub(crate) ws: Hir,
    /// Keywords ignored in non-strict mode, one line each.
    pub(crate) warnings: Vec<String>,
    /// Whether some recursion was cut at `max_recursion_depth`.
    pub(crate) truncated: bool,
    /// In grammar mode, the first keyword (and pointer) whose strict layout bounded a free or
    /// recursive value: the language is then narrower than the schema's, and refused.
    pub(crate) bounded_by: Option<(&'static str, Rc<str>)>,
    work: usize,
    patterns: HashMap<String, std::result::Result<Hir, String>>,
    /// Languages of unconstrained locations by (free levels left, cover depth): every object that
    /// admits extras holds one, and they are all the same expression.
    free_values: HashMap<(u32, Option<u32>), Lang>,
    /// Expression nodes the remaining locations may still build (see [`BUILD_BUDGET_FACTOR`]).
    hir_budget: usize,
    /// The shared nodes already charged to the budget, by id: a copy of one costs nothing more.
    charged: FxHashSet<u64>,
    /// Shared nodes by the hash of their contents, so that equal languages built at different
    /// locations become one node and so one automaton (see [`Compiler::barrier`]). Keyed by the
    /// hash, not the expression: an expression key is hashed again, all of it, each time the table
    /// grows, and inserting it would need a deep copy beside the one the shared node keeps.
    interned: HashMap<u64, Vec<Hir>>,
    /// The seeded hasher of [`Compiler::interned`]'s contents hashes.
    content_hasher: foldhash::fast::RandomState,
    /// Number languages by what they ask: most schemas repeat a few (`integer`, `minimum: 0`),
    /// and each is a few hundred nodes of digit ranges to build.
    numbers: HashMap<NumberSpec, Hir>,
    /// The spelled names of extra members, by the declared names they exclude, behind a barrier:
    /// an object open to other members needs "any name but these", a trie over the names spelled
    /// in every JSON escape form, and the objects of one schema mostly repeat a few name lists.
    pub(crate) extra_names: HashMap<Vec<Rc<str>>, Hir>,
    /// Compiled locations, for reuse wherever the same parts meet the same context.
    locations: HashMap<LocKey, Vec<Memoized>>,
    /// For each location being compiled, innermost last: the `$ref` targets whose count among
    /// the ancestors decided something below it.
    consulted: Vec<HashSet<Rc<str>>>,
    /// The deepest nesting checked so far below the location being compiled.
    deepest: Cell<usize>,
    /// Whether compiled locations are reused (see [`Compiler::compile_loc`]).
    pub(crate) memoize: bool,
    /// In grammar mode, the rules recursion became (see [`Compiler::compile_loc`]).
    pub(crate) grammar: Option<Rules>,
    /// Locations being compiled, each inside the one before.
    open_locations: usize,
}

/// The rules of a grammar-mode compilation.
#[derive(Default)]
pub(crate) struct Rules {
    /// The locations being compiled, with the rule a location below called it by, if any.
    open: HashMap<LocKey, Option<u32>>,
    /// Rule bodies by index (nothing until the location is compiled).
    pub(crate) bodies: Vec<Hir>,
}

/// The depth of a language with recursive calls: unbounded. Large enough that nothing uses it
/// by mistake ([`Compiler::bounded_depth`]), small enough that adding to it cannot overflow.
const UNBOUNDED_DEPTH: u32 = u32::MAX / 4;

/// The refusal of a grammar-mode compilation that needs the automaton, or the bounded depth, of
/// a recursive language (a recursive value under `not`, `contains` with bounds, a member count or
/// an `enum` checked against it). Unrolling the recursion instead would narrow the language
/// without saying so, which the token index does only where `depth_bounds` allows it: then the
/// error asks the caller to compile unrolled ([`super::is_unrolling_needed`]).
pub(crate) fn recursion_needs_automaton(opts: &SchemaOptions, keyword: &str, ptr: &str) -> Error {
    if opts.depth_bounds {
        return Error::Invalid(format!("recursive language under {keyword} at {ptr:?}"));
    }
    Error::UnsupportedSchema {
        keyword: keyword.to_string(),
        pointer: ptr.to_string(),
        message: format!(
            "{keyword} at {ptr:?} applies to a recursive language (a recursive $ref or a free \
             value), which it could only enforce with a depth bound that would refuse valid \
             documents"
        ),
    }
}

/// What makes two locations the same for [`Compiler::compile_loc`], apart from the `$ref` counts
/// recorded in [`Memoized::deps`].
#[derive(Clone, PartialEq, Eq, Hash)]
struct LocKey {
    parts: Vec<PartKey>,
    free: u32,
    cover: Option<u32>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum PartKey {
    Schema(SchemaKey),
    Not(SchemaKey),
    Require(Rc<str>),
    Forbid(Rc<str>),
    Exclude(Types),
}

/// A schema by where it is and how it is read (its dynamic scope included, for `$dynamicRef`).
#[derive(Clone, PartialEq, Eq, Hash)]
struct SchemaKey {
    ptr: Rc<str>,
    base: Rc<str>,
    draft: Draft,
    scope: Vec<Rc<str>>,
}

impl LocKey {
    fn new(parts: &[Part<'_>], ctx: &Ctx<'_>) -> LocKey {
        // A `$dynamicRef` resolves in the outermost resource of its scope that has the anchor,
        // so a base met again deeper in the scope decides nothing: keeping only the first
        // occurrence of each makes the key of a recursion through several resources repeat.
        let schema = |s: &SchemaRef<'_>| SchemaKey {
            ptr: s.ptr.clone(),
            base: s.base.clone(),
            draft: s.draft,
            scope: {
                let mut seen = HashSet::new();
                s.scope_bases()
                    .into_iter()
                    .filter(|b| seen.insert(b.clone()))
                    .collect()
            },
        };
        LocKey {
            parts: parts
                .iter()
                .map(|p| match p {
                    Part::Schema(s) => PartKey::Schema(schema(s)),
                    Part::Not(s) => PartKey::Not(schema(s)),
                    Part::Require(n) => PartKey::Require(n.clone()),
                    Part::Forbid(n) => PartKey::Forbid(n.clone()),
                    Part::Exclude(t) => PartKey::Exclude(*t),
                })
                .collect(),
            free: ctx.free,
            cover: ctx.cover,
        }
    }
}

/// A compiled location and what it depended on beyond its [`LocKey`].
struct Memoized {
    /// Each `$ref` target whose ancestor count was consulted below the location, with that count
    /// as seen from the location: the entry applies where every count is the same.
    deps: Vec<(Rc<str>, usize)>,
    lang: Lang,
    /// Whether recursion was cut below the location.
    truncated: bool,
    /// How much deeper than the location its nesting went.
    below: usize,
}

/// Whitespace pattern, free depth and cover depth: all a free value's language depends on.
type FreeValueKey = (String, u32, Option<u32>);

/// Free values by [`FreeValueKey`], for every compilation in the process.
///
/// "Any JSON value, nesting at most n containers deep" is the same language in every schema that
/// leaves a value free, and its automaton doubles with each level (2,370 states at depth 4). Kept
/// here, its expression is built once per process, and because the node is pinned
/// ([`Hir::pinned`]) the automaton layer keeps its automaton for the process too: a schema that
/// leaves values free then pays for them only in the first compilation that meets them.
static FREE_VALUES: LazyLock<Mutex<HashMap<FreeValueKey, Lang>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Distinct free values kept before the cache starts over (a process sees a few whitespace
/// policies and depths, so this is never reached in practice).
const MAX_FREE_VALUES: usize = 256;

impl<'a> Compiler<'a> {
    /// A compiler for the schema document `root`.
    pub(crate) fn new(root: &'a Value, opts: &'a SchemaOptions, ws: Hir) -> Compiler<'a> {
        Compiler {
            doc: Document::index(root),
            opts,
            ws,
            warnings: Vec::new(),
            truncated: false,
            bounded_by: None,
            work: 0,
            patterns: HashMap::new(),
            free_values: HashMap::new(),
            hir_budget: opts.max_hir_nodes.saturating_mul(BUILD_BUDGET_FACTOR),
            charged: FxHashSet::default(),
            interned: HashMap::new(),
            content_hasher: foldhash::fast::RandomState::default(),
            numbers: HashMap::new(),
            extra_names: HashMap::new(),
            locations: HashMap::new(),
            consulted: Vec::new(),
            deepest: Cell::new(0),
            memoize: true,
            grammar: None,
            open_locations: 0,
        }
    }

    /// `depth`, unless it is the depth of a recursive language: exactness then needs a bound the
    /// language does not have, and `keyword` (at `ptr`) is refused.
    pub(crate) fn bounded_depth(&self, depth: u32, keyword: &str, ptr: &str) -> Result<u32> {
        if depth >= UNBOUNDED_DEPTH {
            return Err(recursion_needs_automaton(self.opts, keyword, ptr));
        }
        Ok(depth)
    }

    /// Puts `h` behind a shared node, to be determinized and minimized on its own before the
    /// enclosing automaton is built, and copied by reference.
    ///
    /// The automaton layer builds every shared node (like every operand of an intersection) as its
    /// own minimized DFA and embeds that, one NFA state per DFA state. A shared node is therefore a
    /// minimization barrier: the value languages the compiler copies (a member's value appears
    /// twice in the comma construction of objects, an unconstrained value holds four copies of the
    /// level below it, every object admitting extras holds an unconstrained value) reach the
    /// enclosing subset construction already minimized, instead of as copies of their whole
    /// expression tree. Equal contents are interned into one node, which the automaton layer then
    /// builds once. Small languages are left inline: a barrier costs an automaton of its own.
    pub(crate) fn barrier(&mut self, h: Hir) -> Hir {
        if h.is_nothing()
            || matches!(h, Hir::Intersection(_) | Hir::Shared(_) | Hir::Automaton(_))
            || h.unique_size_within(BARRIER_NODES - 1).is_some()
        {
            return h;
        }
        let key = self.content_hasher.hash_one(&h);
        let same = |s: &&Hir| matches!(s, Hir::Shared(s) if *s.hir() == h);
        if let Some(shared) = self.interned.get(&key).and_then(|v| v.iter().find(same)) {
            return shared.clone();
        }
        let shared = Hir::shared(h);
        self.interned.entry(key).or_default().push(shared.clone());
        shared
    }

    /// The nodes charged so far: every node of every location's language is counted when the
    /// location is built, each shared node's contents once, so this bounds the size
    /// ([`Hir::unique_size`]) of any language built from them.
    pub(crate) fn charged_nodes(&self) -> usize {
        self.opts
            .max_hir_nodes
            .saturating_mul(BUILD_BUDGET_FACTOR)
            .saturating_sub(self.hir_budget)
    }

    /// Charges the nodes of `h` not yet charged against the build budget, or fails with the size
    /// limit once it runs out. A shared node's contents are charged once, whatever the number of
    /// its copies.
    fn charge(&mut self, h: &Hir) -> Result<()> {
        let budget = &mut self.hir_budget;
        let within = h.walk_unique(&mut self.charged, |_| match budget.checked_sub(1) {
            Some(left) => {
                *budget = left;
                true
            }
            None => false,
        });
        if within {
            return Ok(());
        }
        let built = self.opts.max_hir_nodes.saturating_mul(BUILD_BUDGET_FACTOR);
        Err(Error::size_limit(
            "max_hir_nodes (4x, built over all locations)",
            built + 1,
            built,
        ))
    }

    /// An `UnsupportedSchema` error for `keyword` in the schema at `ptr`.
    pub(crate) fn unsupported(&self, keyword: &str, ptr: &str, message: &str) -> Error {
        Error::UnsupportedSchema {
            keyword: keyword.to_string(),
            pointer: ptr.to_string(),
            message: if keyword.is_empty() {
                format!("schema at {ptr:?}: {message}")
            } else {
                format!("{keyword} at {ptr:?}: {message}")
            },
        }
    }

    /// An error for a state the compiler should never reach; reported, never a panic.
    pub(crate) fn internal(&self, message: &str) -> Error {
        Error::UnsupportedSchema {
            keyword: String::new(),
            pointer: String::new(),
            message: format!("internal error in the schema compiler: {message}"),
        }
    }

    /// In strict mode an error naming `keyword`; otherwise a warning, and the keyword is skipped.
    /// Only keywords whose omission widens the language may be passed here.
    pub(crate) fn skip_or_fail(&mut self, keyword: &str, ptr: &str, message: &str) -> Result<()> {
        if self.opts.strict {
            return Err(self.unsupported(keyword, ptr, message));
        }
        let line = format!("ignored {keyword} at {ptr:?}: {message}");
        if !self.warnings.contains(&line) {
            self.warnings.push(line);
        }
        Ok(())
    }

    /// Raises the nesting limit error past `max_nesting`.
    pub(crate) fn check_nesting(&self, nest: usize) -> Result<()> {
        self.deepest.set(self.deepest.get().max(nest));
        if nest > self.opts.max_nesting {
            return Err(Error::size_limit(
                "max_nesting",
                nest,
                self.opts.max_nesting,
            ));
        }
        Ok(())
    }

    /// The value language of a `pattern` (cached), or an error naming it.
    pub(crate) fn pattern(&mut self, p: &str, ptr: &str) -> Result<Hir> {
        if !self.patterns.contains_key(p) {
            let r = pattern_value(p);
            self.patterns.insert(p.to_string(), r);
        }
        match &self.patterns[p] {
            Ok(h) => Ok(h.clone()),
            Err(m) => Err(self.unsupported("pattern", ptr, &format!("pattern {p:?}: {m}"))),
        }
    }

    /// The texts that may stand at a location where all of `parts` hold.
    ///
    /// Real schemas refer to one definition from many places, and the same parts in the same
    /// context compile to the same language, so locations are memoized. The context that matters
    /// is the free depth, the cover depth and, for recursion, how often the `$ref` targets met
    /// below were already expanded among the ancestors: every such count consulted while compiling
    /// a location is recorded, and the entry is reused only where all of them are the same. A
    /// location under a strict layout (inside a branching compiled on its own) is not memoized.
    ///
    /// In grammar mode, `$ref`s are not counted: a location met again below itself, with the same
    /// key, becomes a rule, and the inner occurrence a call of it ([`Hir::Call`]). The language
    /// of the location is then that call too, so that the rule's body is held once; what it
    /// depends on is the key alone, so memoized entries carry no `$ref` counts.
    ///
    /// Each location runs through [`crate::stack::deep`]: `max_nesting` bounds how deep they
    /// nest, but not the stack a caller's thread has (a 2 MiB worker thread, say).
    pub(crate) fn compile_loc(&mut self, parts: Vec<Part<'a>>, ctx: &Ctx<'a>) -> Result<Lang> {
        crate::stack::deep(|| self.compile_loc_guarded(parts, ctx))
    }

    fn compile_loc_guarded(&mut self, parts: Vec<Part<'a>>, ctx: &Ctx<'a>) -> Result<Lang> {
        // Locations nest in the text (`max_nesting` checks that) but also at one place: a `not`
        // or `if` compiles its schema at the location it stands at, and one that refers back
        // to itself through them (`{"if": {"$ref": "#"}}`) would never stop.
        let max_open = self.opts.max_nesting.saturating_mul(2);
        if self.open_locations >= max_open {
            return Err(Error::size_limit(
                "max_nesting (locations compiled inside one another)",
                self.open_locations + 1,
                max_open,
            ));
        }
        self.open_locations += 1;
        let result = self.compile_open_loc(parts, ctx);
        self.open_locations -= 1;
        result
    }

    fn compile_open_loc(&mut self, parts: Vec<Part<'a>>, ctx: &Ctx<'a>) -> Result<Lang> {
        self.work += 1;
        if self.work > self.opts.max_work {
            return Err(Error::size_limit("max_work", self.work, self.opts.max_work));
        }
        self.check_nesting(ctx.nest)?;
        let key = (self.memoize && ctx.strict.is_none()).then(|| LocKey::new(&parts, ctx));
        let hit = match &key {
            Some(k) => self.recall(k, ctx),
            None => None,
        };
        if let Some((lang, truncated, below, deps)) = hit {
            self.check_nesting(ctx.nest + below)?;
            self.truncated |= truncated;
            if let Some(top) = self.consulted.last_mut() {
                top.extend(deps);
            }
            self.charge(&lang.hir)?;
            return Ok(lang);
        }
        if let (Some(rules), Some(key)) = (self.grammar.as_mut(), key.as_ref()) {
            if let Some(slot) = rules.open.get_mut(key) {
                let index = *slot.get_or_insert_with(|| {
                    rules.bodies.push(Hir::nothing());
                    (rules.bodies.len() - 1) as u32
                });
                // A JSON value is never empty, and the body is checked to agree when done.
                return Ok(Lang {
                    hir: Hir::call(index, false),
                    depth: UNBOUNDED_DEPTH,
                });
            }
            rules.open.insert(key.clone(), None);
        }
        self.consulted.push(HashSet::new());
        let outer_truncated = std::mem::replace(&mut self.truncated, false);
        let outer_deepest = self.deepest.replace(ctx.nest);
        let result = self.compile_loc_uncached(parts, ctx);
        let consulted = self.consulted.pop().unwrap_or_default();
        let truncated = self.truncated;
        self.truncated |= outer_truncated;
        let below = self.deepest.get() - ctx.nest;
        self.deepest.set(self.deepest.get().max(outer_deepest));
        if let Some(top) = self.consulted.last_mut() {
            top.extend(consulted.iter().cloned());
        }
        let closed = match (self.grammar.as_mut(), key.as_ref()) {
            (Some(rules), Some(k)) => rules.open.remove(k).flatten(),
            _ => None,
        };
        let mut lang = result?;
        if let Some(index) = closed {
            if lang.hir.nullable() {
                return Err(self.internal("a recursive location matches the empty text"));
            }
            let body = std::mem::replace(&mut lang.hir, Hir::call(index, false));
            if let Some(rules) = self.grammar.as_mut() {
                rules.bodies[index as usize] = body;
            }
            lang.depth = UNBOUNDED_DEPTH;
        }
        if let Some(key) = key {
            let deps = consulted
                .into_iter()
                .map(|p| {
                    let n = ctx.ref_count(&p);
                    (p, n)
                })
                .collect();
            self.locations.entry(key).or_default().push(Memoized {
                deps,
                lang: lang.clone(),
                truncated,
                below,
            });
        }
        Ok(lang)
    }

    /// The memoized compilation of a location, if one applies in `ctx`: its language, whether
    /// recursion was cut below it, how deep below it nesting went, and the `$ref` targets it
    /// consulted.
    ///
    /// A location met again is put behind a barrier ([`Compiler::barrier`]) the first time it is
    /// recalled, and kept so: the language is then copied by reference from there on, not node
    /// by node, and the barrier its callers put around a member's value finds it already shared
    /// instead of hashing and comparing a fresh copy against the one it interned before. Its
    /// first occurrence keeps its inline copy; the language is the same either way.
    fn recall(&mut self, key: &LocKey, ctx: &Ctx<'a>) -> Option<(Lang, bool, usize, Vec<Rc<str>>)> {
        let entries = self.locations.get_mut(key)?;
        let i = entries.iter().position(|m| {
            m.deps
                .iter()
                .all(|(ptr, count)| ctx.ref_count(ptr) == *count)
        })?;
        // The barrier needs the whole compiler but leaves the memo alone, so the entry is found
        // again afterwards where it was.
        let inline = std::mem::replace(&mut entries[i].lang.hir, Hir::Empty);
        let shared = self.barrier(inline);
        let m = &mut self.locations.get_mut(key)?[i];
        m.lang.hir = shared;
        let deps = m.deps.iter().map(|(p, _)| p.clone()).collect();
        Some((m.lang.clone(), m.truncated, m.below, deps))
    }

    fn compile_loc_uncached(&mut self, parts: Vec<Part<'a>>, ctx: &Ctx<'a>) -> Result<Lang> {
        let roots: Vec<SchemaRef<'a>> = parts
            .iter()
            .filter_map(|p| match p {
                Part::Schema(s) | Part::Not(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        let mut flat = Flat::default();
        let mut brs = Vec::new();
        if !self.flatten(&mut flat, parts, &mut brs, ctx)? {
            return Ok(Lang::nothing());
        }
        // A free value's language depends on nothing but how deep it may still nest.
        let free = brs.is_empty() && ctx.strict.is_none() && Self::unconstrained(&flat);
        let key = (ctx.free, ctx.cover);
        if free {
            if let Some(lang) = self.free_values.get(&key) {
                return Ok(lang.clone());
            }
            // A grammar's free value calls its own rules: it is this compilation's alone.
            let kept = if self.grammar.is_none() {
                self.process_free_value(key)
            } else {
                None
            };
            if let Some(lang) = kept {
                self.charge(&lang.hir)?;
                self.free_values.insert(key, lang.clone());
                return Ok(lang);
            }
        }
        let mut lang = self.distribute(&roots, flat, brs, ctx, self.opts.max_branches)?;
        // Every location's language is charged against what is left of the build budget, so
        // that a blow-up stops where it starts (an object of thirty large members, each within
        // the limit, is refused while its members are built, not after).
        self.charge(&lang.hir)?;
        if free {
            lang.hir = self.barrier(lang.hir);
            if self.grammar.is_none() {
                lang.hir = lang.hir.pinned();
                self.keep_free_value(key, &lang);
            }
            self.free_values.insert(key, lang.clone());
        }
        Ok(lang)
    }

    /// The whitespace pattern, free depth and cover depth that decide a free value's language.
    fn free_value_key(&self, (free, cover): (u32, Option<u32>)) -> FreeValueKey {
        let ws = self
            .opts
            .whitespace
            .as_deref()
            .unwrap_or(super::DEFAULT_WHITESPACE);
        (ws.to_string(), free, cover)
    }

    /// A free value some earlier compilation in this process built with the same key.
    fn process_free_value(&self, key: (u32, Option<u32>)) -> Option<Lang> {
        let cache = FREE_VALUES.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(&self.free_value_key(key)).cloned()
    }

    fn keep_free_value(&self, key: (u32, Option<u32>), lang: &Lang) {
        let mut cache = FREE_VALUES.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_FREE_VALUES {
            cache.clear();
        }
        cache.insert(self.free_value_key(key), lang.clone());
    }

    fn schema_list(
        &self,
        owner: &SchemaRef<'a>,
        key: &str,
        v: &'a Value,
    ) -> Result<Vec<SchemaRef<'a>>> {
        let a = v.as_array().filter(|a| !a.is_empty()).ok_or_else(|| {
            self.unsupported(key, &owner.ptr, "must be a non-empty array of schemas")
        })?;
        Ok(a.iter()
            .enumerate()
            .map(|(i, x)| owner.child(x, &[key, &i.to_string()]))
            .collect())
    }

    /// Expands a `$ref` target into the conjunction, or cuts the recursion.
    fn enter_ref(
        &mut self,
        target: SchemaRef<'a>,
        flat: &mut Flat<'a>,
        ctx: &Ctx<'a>,
        queue: &mut VecDeque<Part<'a>>,
    ) -> bool {
        // Outside cover mode the ancestors' count decides; the memo of locations records that
        // it was consulted (see `compile_loc`). In grammar mode recursion becomes calls
        // instead, except under a strict layout, where locations are not memoized and so never
        // meet an open one.
        if ctx.cover.is_none() && (self.grammar.is_none() || ctx.strict.is_some()) {
            if let Some(top) = self.consulted.last_mut() {
                top.insert(target.ptr.clone());
            }
            if ctx.ref_count(&target.ptr) >= self.opts.max_recursion_depth {
                self.truncated = true;
                self.note_bound(ctx, &target.ptr);
                return false;
            }
        }
        flat.refs.push(target.ptr.clone());
        queue.push_back(Part::Schema(target));
        true
    }

    /// Merges `parts` into `flat`, setting branching keywords aside in `brs`. `false` when some
    /// conjunct admits nothing.
    pub(crate) fn flatten(
        &mut self,
        flat: &mut Flat<'a>,
        parts: Vec<Part<'a>>,
        brs: &mut Vec<Branching<'a>>,
        ctx: &Ctx<'a>,
    ) -> Result<bool> {
        let mut queue: VecDeque<Part<'a>> = parts.into();
        while let Some(p) = queue.pop_front() {
            let s = match p {
                Part::Require(n) => {
                    flat.required.insert(n);
                    continue;
                }
                Part::Forbid(n) => {
                    flat.forbidden.insert(n);
                    continue;
                }
                Part::Exclude(t) => {
                    flat.excluded_types = Some(flat.excluded_types.unwrap_or(Types::NONE).or(t));
                    continue;
                }
                Part::Not(s) => {
                    match s.value {
                        Value::Bool(true) => return Ok(false),
                        Value::Bool(false) => {}
                        _ => {
                            if !flat.nots.iter().any(|n| n.ptr == s.ptr) {
                                flat.nots.push(s);
                            }
                        }
                    }
                    continue;
                }
                Part::Schema(s) => s,
            };
            let obj = match (s.value, s.keywords()) {
                (Value::Bool(true), _) => continue,
                (Value::Bool(false), _) => return Ok(false),
                (_, Some(o)) => o,
                _ => {
                    return Err(self.unsupported(
                        "",
                        &s.ptr,
                        "a schema must be an object or a boolean",
                    ))
                }
            };
            if !flat.seen.insert(s.ptr.clone()) {
                continue;
            }
            if let Some(m) = obj.get("$schema").and_then(Value::as_str) {
                if !Draft::known_metaschema(m) {
                    let reading = match Draft::from_uri(m) {
                        Some(_) => "draft 3 is not supported (read as draft 4)",
                        None => "not an official metaschema; the vocabularies it enables cannot be checked (read as 2020-12)",
                    };
                    self.skip_or_fail("$schema", &s.ptr, &format!("{m:?}: {reading}"))?;
                }
            }
            if let Some(r) = obj.get("$ref") {
                let r = r
                    .as_str()
                    .ok_or_else(|| self.unsupported("$ref", &s.ptr, "must be a string"))?;
                let t = self
                    .doc
                    .resolve(&s, r)
                    .map_err(|m| self.unsupported("$ref", &s.ptr, &m))?;
                if !self.enter_ref(t, flat, ctx, &mut queue) {
                    return Ok(false);
                }
                if s.draft.ref_overrides_siblings() {
                    continue;
                }
            }
            if let Some(r) = obj.get("$dynamicRef").or_else(|| obj.get("$recursiveRef")) {
                let r = r
                    .as_str()
                    .ok_or_else(|| self.unsupported("$dynamicRef", &s.ptr, "must be a string"))?;
                let t = if obj.contains_key("$dynamicRef") {
                    self.doc.resolve_dynamic(&s, r)
                } else {
                    self.resolve_recursive(&s, r)
                }
                .map_err(|m| self.unsupported("$dynamicRef", &s.ptr, &m))?;
                if !self.enter_ref(t, flat, ctx, &mut queue) {
                    return Ok(false);
                }
            }
            if let Some(v) = obj.get("allOf") {
                for c in self.schema_list(&s, "allOf", v)? {
                    queue.push_back(Part::Schema(c));
                }
            }
            for (key, kind) in [("anyOf", BranchKind::AnyOf), ("oneOf", BranchKind::OneOf)] {
                if let Some(v) = obj.get(key) {
                    let alts = self
                        .schema_list(&s, key, v)?
                        .into_iter()
                        .map(|c| vec![Part::Schema(c)])
                        .collect();
                    brs.push(Branching {
                        kind,
                        owner: s.ptr.clone(),
                        alts,
                    });
                }
            }
            if let Some(cond) = obj.get("if") {
                let cond = s.child(cond, &["if"]);
                let then = obj.get("then").map(|t| s.child(t, &["then"]));
                let els = obj.get("else").map(|e| s.child(e, &["else"]));
                if then.is_some() || els.is_some() {
                    let mut yes = vec![Part::Schema(cond.clone())];
                    yes.extend(then.map(Part::Schema));
                    let mut no = vec![Part::Not(cond)];
                    no.extend(els.map(Part::Schema));
                    brs.push(Branching {
                        kind: BranchKind::Disjoint,
                        owner: s.ptr.clone(),
                        alts: vec![yes, no],
                    });
                }
            }
            if let Some(n) = obj.get("not") {
                queue.push_back(Part::Not(s.child(n, &["not"])));
            }
            self.dependencies(&s, obj, brs)?;
            flat.schemas.push(s);
        }
        Ok(true)
    }

    /// 2019-09 `$recursiveRef`: like `$ref`, but when the target has `$recursiveAnchor: true` the
    /// outermost resource in the dynamic scope that also has one is used instead.
    fn resolve_recursive(
        &self,
        from: &SchemaRef<'a>,
        r: &str,
    ) -> std::result::Result<SchemaRef<'a>, String> {
        let target = self.doc.resolve(from, r)?;
        if target.get("$recursiveAnchor").and_then(Value::as_bool) != Some(true) {
            return Ok(target);
        }
        for base in from.scope_bases() {
            if let Ok(t) = self.doc.resolve(from, &base) {
                if t.get("$recursiveAnchor").and_then(Value::as_bool) == Some(true) {
                    return Ok(t);
                }
            }
        }
        Ok(target)
    }

    /// `dependentRequired`, `dependentSchemas` and draft-4 `dependencies`: each is the choice
    /// "the trigger is absent" or "the trigger is present and the dependency holds".
    fn dependencies(
        &self,
        s: &SchemaRef<'a>,
        obj: Keywords<'a>,
        brs: &mut Vec<Branching<'a>>,
    ) -> Result<()> {
        for key in ["dependentRequired", "dependentSchemas", "dependencies"] {
            let Some(map) = obj.get(key) else { continue };
            let map = map
                .as_object()
                .ok_or_else(|| self.unsupported(key, &s.ptr, "must be an object"))?;
            for (name, dep) in map {
                let trigger: Rc<str> = Rc::from(name.as_str());
                let mut present = vec![Part::Require(trigger.clone())];
                match dep {
                    Value::Array(names) => {
                        for n in names {
                            let n = n.as_str().ok_or_else(|| {
                                self.unsupported(key, &s.ptr, "dependency lists must hold names")
                            })?;
                            present.push(Part::Require(Rc::from(n)));
                        }
                    }
                    Value::Object(_) | Value::Bool(_) if key != "dependentRequired" => {
                        present.push(Part::Schema(s.child(dep, &[key, name])));
                    }
                    _ => return Err(self.unsupported(key, &s.ptr, "malformed dependency")),
                }
                brs.push(Branching {
                    kind: BranchKind::Disjoint,
                    owner: s.ptr.clone(),
                    alts: vec![vec![Part::Forbid(trigger)], present],
                });
            }
        }
        Ok(())
    }

    /// The strict context for intersecting languages at this location, which `keyword` (in
    /// the schema at `ptr`) needs.
    fn strict_here(
        &self,
        ctx: &Ctx<'a>,
        sources: Vec<SchemaRef<'a>>,
        keyword: &'static str,
        ptr: &Rc<str>,
    ) -> Ctx<'a> {
        if ctx.strict.is_some() {
            return ctx.clone();
        }
        let loc = Loc::new(sources.into_iter().map(Source::Schema).collect());
        ctx.with_strict(loc, keyword, ptr.clone())
    }

    /// Records, in grammar mode, that a free or recursive value at `ptr` was bounded: under a
    /// strict layout locations are not memoized, so they cannot become calls.
    fn note_bound(&mut self, ctx: &Ctx<'a>, ptr: &Rc<str>) {
        if self.grammar.is_some() && ctx.cover.is_none() && self.bounded_by.is_none() {
            self.bounded_by = Some(ctx.strict_by.clone().unwrap_or(("", ptr.clone())));
        }
    }

    fn distribute(
        &mut self,
        roots: &[SchemaRef<'a>],
        flat: Flat<'a>,
        mut brs: Vec<Branching<'a>>,
        ctx: &Ctx<'a>,
        budget: usize,
    ) -> Result<Lang> {
        if brs.is_empty() {
            return self.compile_flat(roots, flat, ctx);
        }
        let b = brs.remove(0);
        let alts = self.alternatives(&b, &flat, ctx)?;
        if alts.len() > budget.max(1) {
            // Too many combinations: this branching is compiled on its own and intersected.
            let keyword = match b.kind {
                BranchKind::AnyOf => "anyOf",
                BranchKind::OneOf => "oneOf",
                _ => "dependencies",
            };
            let ctx = self.strict_here(ctx, roots.to_vec(), keyword, &b.owner);
            let rest = self.distribute(roots, flat, brs, &ctx, budget)?;
            if rest.hir.is_nothing() {
                return Ok(rest);
            }
            let mut union = Vec::new();
            for alt in alts {
                union.push(self.compile_loc(alt, &ctx)?);
            }
            let union = Lang::union(union);
            return Ok(Lang {
                hir: Hir::intersection([rest.hir, union.hir]),
                depth: rest.depth.min(union.depth),
            });
        }
        let per = (budget / alts.len()).max(1);
        let mut out = Vec::new();
        for alt in alts {
            let mut f = flat.clone();
            let mut bs = brs.clone();
            if self.flatten(&mut f, alt, &mut bs, ctx)? {
                out.push(self.distribute(roots, f, bs, ctx, per)?);
            }
        }
        Ok(Lang::union(out))
    }

    fn compile_flat(
        &mut self,
        roots: &[SchemaRef<'a>],
        mut flat: Flat<'a>,
        ctx: &Ctx<'a>,
    ) -> Result<Lang> {
        let nots = std::mem::take(&mut flat.nots);
        let mut residual = Vec::new();
        for n in nots {
            match self.fold_not(&n, &mut flat)? {
                super::combinators::Folded::Yes => {}
                super::combinators::Folded::Nothing => return Ok(Lang::nothing()),
                super::combinators::Folded::No => residual.push(n),
            }
        }
        if residual.is_empty() {
            return self.compile_positive(roots, &flat, ctx);
        }
        let mut sources = flat.schemas.clone();
        sources.extend(residual.iter().cloned());
        let ctx = self.strict_here(ctx, sources, "not", &residual[0].ptr);
        let pos = self.compile_positive(roots, &flat, &ctx)?;
        if pos.hir.is_nothing() {
            return Ok(pos);
        }
        let cover = ctx.covering(self.bounded_depth(pos.depth, "not", &residual[0].ptr)?);
        let mut negs = Vec::new();
        for n in residual {
            negs.push(self.compile_loc(vec![Part::Schema(n)], &cover)?.hir);
        }
        Ok(Lang {
            hir: Hir::intersection([pos.hir, Hir::complement(Hir::alternation(negs))]),
            depth: pos.depth,
        })
    }

    /// Whether the conjunction constrains nothing (the value is free).
    fn unconstrained(flat: &Flat<'a>) -> bool {
        flat.schemas.iter().all(|s| !constrains(s))
            && flat.required.is_empty()
            && flat.forbidden.is_empty()
            && flat.excluded_types.is_none()
            && flat.excluded_strings.is_empty()
    }

    /// Whether numbers at this location may be written with an exponent.
    fn exponents(&self, flat: &Flat<'a>, ctx: &Ctx<'a>) -> bool {
        match &ctx.strict {
            Some(loc) => loc.exponents(&self.doc),
            None => !flat.schemas.iter().any(super::layout::excludes_exponents),
        }
    }

    /// The declared order of an object here (see `layout`): the layout's names, then any name a
    /// merged schema declares that the walk did not reach (a `$dynamicRef` can land on a schema
    /// the static walk does not see), so that no declared name is ever taken for an extra.
    pub(crate) fn names(
        &self,
        roots: &[SchemaRef<'a>],
        flat: &Flat<'a>,
        ctx: &Ctx<'a>,
    ) -> Vec<Rc<str>> {
        let mut names = match &ctx.strict {
            Some(loc) => loc.names(&self.doc).to_vec(),
            None => declared_names(&self.doc, roots, &|s| flat.seen.contains(&s.ptr)),
        };
        let mut seen: HashSet<Rc<str>> = names.iter().cloned().collect();
        let mut extra = Vec::new();
        for s in &flat.schemas {
            super::layout::own_names(s, &mut extra);
        }
        extra.extend(flat.required.iter().cloned());
        extra.extend(flat.forbidden.iter().cloned());
        for n in extra {
            if seen.insert(n.clone()) {
                names.push(n);
            }
        }
        names
    }

    fn compile_positive(
        &mut self,
        roots: &[SchemaRef<'a>],
        flat: &Flat<'a>,
        ctx: &Ctx<'a>,
    ) -> Result<Lang> {
        let mut sc = scalars(&flat.schemas)?;
        if let Some(t) = flat.excluded_types {
            sc.types = sc.types.minus(t);
        }
        if let Some(values) = sc.values.take() {
            return self.enum_language(roots, flat, &sc, values, ctx);
        }
        self.typed_language(roots, flat, &sc, ctx)
    }

    /// The union over the allowed types of each type's language.
    pub(crate) fn typed_language(
        &mut self,
        roots: &[SchemaRef<'a>],
        flat: &Flat<'a>,
        sc: &Scalars<'a>,
        ctx: &Ctx<'a>,
    ) -> Result<Lang> {
        let t = sc.types;
        let mut out = Vec::new();
        if t.has(Types::NULL) {
            out.push(Lang::scalar(Hir::literal("null")));
        }
        if t.has(Types::BOOL) {
            out.push(Lang::scalar(Hir::alternation([
                Hir::literal("true"),
                Hir::literal("false"),
            ])));
        }
        if t.has(Types::NUMBER) {
            out.push(Lang::scalar(self.number_language(flat, sc, ctx)?));
        }
        if t.has(Types::STR) {
            out.push(Lang::scalar(self.string_language(flat, sc)?));
        }
        let unconstrained = Self::unconstrained(flat);
        if unconstrained && ctx.free == 0 && t.has(Types::ARR.or(Types::OBJ)) {
            let ptr = roots
                .first()
                .map_or_else(|| Rc::from(""), |s| s.ptr.clone());
            self.note_bound(ctx, &ptr);
        }
        if ctx.containers_allowed(unconstrained) {
            if t.has(Types::ARR) {
                out.push(self.array_language(flat, ctx, unconstrained)?);
            }
            if t.has(Types::OBJ) {
                let names = self.names(roots, flat, ctx);
                out.push(self.object_language(flat, names, ctx, unconstrained)?);
            }
        }
        Ok(Lang::union(out))
    }

    /// [`number_language`], remembered per spec for the rest of the compilation.
    fn number_language_of(&mut self, spec: &NumberSpec) -> Result<Hir> {
        if let Some(h) = self.numbers.get(spec) {
            return Ok(h.clone());
        }
        let h = number_language(spec)?;
        self.numbers.insert(spec.clone(), h.clone());
        Ok(h)
    }

    fn number_language(&mut self, flat: &Flat<'a>, sc: &Scalars<'a>, ctx: &Ctx<'a>) -> Result<Hir> {
        let integer = !sc.types.has(Types::FRAC);
        let spec = NumberSpec {
            integer,
            lo: sc.lo.clone(),
            hi: sc.hi.clone(),
            multiple_of: sc.step.as_ref().map(|(d, _)| d.clone()),
            // Integers are written without exponents (see `numbers`).
            exponents: !integer && self.exponents(flat, ctx),
        };
        let t = sc.types;
        let lang = self.number_language_of(&spec).and_then(|h| {
            let spellings = (t.has(Types::INT), t.has(Types::INT_POINT));
            if spellings == (true, true) || h.is_nothing() {
                return Ok(h);
            }
            if spellings == (true, false) && integer {
                // Draft 4's `integer`: the whole values written as integers.
                return Ok(Hir::intersection([h, integer_spelling()]));
            }
            // Some texts of whole values are out: all of them (every spelling the location
            // admits, exponent texts included), or those of one spelling.
            let integral = self.number_language_of(&NumberSpec {
                integer: true,
                lo: None,
                hi: None,
                multiple_of: None,
                exponents: spec.exponents,
            })?;
            let out = match spellings {
                (false, false) => integral,
                (false, true) => integer_spelling(),
                _ => Hir::intersection([integral, Hir::complement(integer_spelling())]),
            };
            Ok(Hir::intersection([h, Hir::complement(out)]))
        });
        match lang {
            Ok(h) => Ok(h),
            Err(e) => {
                let ptr = sc
                    .step
                    .as_ref()
                    .map(|(_, p)| p.to_string())
                    .unwrap_or_default();
                let message = e.to_string();
                if !self.opts.strict {
                    self.skip_or_fail("multipleOf", &ptr, &message)?;
                    return number_language(&NumberSpec {
                        multiple_of: None,
                        ..spec
                    });
                }
                Err(match e {
                    Error::SizeLimit { .. } => e,
                    _ => self.unsupported("multipleOf", &ptr, &message),
                })
            }
        }
    }

    /// The value language of the strings the scalar keywords allow (before JSON encoding).
    pub(crate) fn string_value(&mut self, flat: &Flat<'a>, sc: &Scalars<'a>) -> Result<Hir> {
        let mut parts: Vec<Hir> = Vec::new();
        for (p, ptr) in &sc.patterns {
            parts.push(self.pattern(p, ptr)?);
        }
        let formats = if self.opts.assert_formats {
            sc.formats.as_slice()
        } else {
            &[]
        };
        for (f, ptr) in formats {
            match super::formats::format_value(f) {
                Some(h) => parts.push(h),
                None => self.skip_or_fail("format", ptr, &format!("unknown format {f:?}"))?,
            }
        }
        if !flat.excluded_strings.is_empty() {
            parts.push(strings_except(&flat.excluded_strings));
        }
        let (lo, hi) = (sc.min_len, sc.max_len);
        if hi.is_some_and(|h| h < lo) {
            return Ok(Hir::nothing());
        }
        // A length bound every other constraint already implies adds nothing.
        let implied = parts.iter().any(|h| {
            let (a, b) = length_range(h);
            a >= lo && hi.is_none_or(|h| b.is_some_and(|b| b <= h))
        });
        if (lo > 0 || hi.is_some()) && !implied {
            let cap = |x: u64| x.min(u32::MAX as u64) as u32;
            parts.push(Hir::repeat(Hir::any_char(), cap(lo), hi.map(cap)));
        }
        Ok(match parts.len() {
            0 => super::strings::any_value(),
            1 => parts.pop().unwrap_or_else(Hir::nothing),
            _ => Hir::intersection(parts),
        })
    }

    fn string_language(&mut self, flat: &Flat<'a>, sc: &Scalars<'a>) -> Result<Hir> {
        let value = self.string_value(flat, sc)?;
        string_text(&value).map_err(|m| self.internal(&m))
    }

    /// `enum`/`const`: the listed values that the rest of the conjunction admits, each in all its
    /// spellings.
    fn enum_language(
        &mut self,
        roots: &[SchemaRef<'a>],
        flat: &Flat<'a>,
        sc: &Scalars<'a>,
        values: Vec<&'a Value>,
        ctx: &Ctx<'a>,
    ) -> Result<Lang> {
        // The schema holding `enum` (or `const`) names the location in errors.
        let owner = flat.schemas.iter().find(|s| s.get("enum").is_some());
        let ptr = owner
            .or(flat.schemas.first())
            .map_or_else(|| Rc::from(""), |s| s.ptr.clone());
        let ctx = self.strict_here(ctx, flat.schemas.clone(), "enum", &ptr);
        let Some(loc) = ctx.strict.clone() else {
            return Err(self.internal("strict layout missing"));
        };
        let typed: Vec<&'a Value> = values
            .into_iter()
            .filter(|v| sc.types.has(Types::of(v)))
            .collect();
        // Anything beyond types to check? Then compile the rest and match each value against it.
        let rest_matters = sc.narrowed
            || flat.schemas.iter().any(|s| {
                s.keywords().is_some_and(|o| {
                    o.keys().any(|k| {
                        super::keywords::CONSTRAINTS.contains(&k.as_str())
                            && !matches!(
                                k.as_str(),
                                "type"
                                    | "enum"
                                    | "const"
                                    | "allOf"
                                    | "anyOf"
                                    | "oneOf"
                                    | "not"
                                    | "if"
                                    | "$ref"
                                    | "$dynamicRef"
                                    | "$recursiveRef"
                            )
                    })
                })
            })
            || !flat.required.is_empty()
            || !flat.forbidden.is_empty()
            || !flat.excluded_strings.is_empty();
        let rest = if rest_matters {
            let mut all_types = Scalars {
                ..self.rescan(flat)?
            };
            all_types.values = None;
            Some(self.typed_language(roots, flat, &all_types, &ctx)?.hir)
        } else {
            None
        };
        let mut alts = Vec::new();
        let mut depth = 0;
        if rest.as_ref().is_some_and(Hir::has_calls) {
            return Err(recursion_needs_automaton(self.opts, "enum", &ptr));
        }
        // Under draft 4 a whole number's spellings differ in type (`1` is an integer, `1.0` is
        // not), so the canonical text speaks for one spelling only: a container holding whole
        // numbers is intersected with the rest instead, and a number keeps the spellings its
        // types allow.
        let by_spelling = flat.schemas.iter().any(|s| s.draft.integer_by_spelling());
        for v in typed {
            let by_rest = rest
                .as_ref()
                .filter(|_| by_spelling && !v.is_number() && holds_whole_number(v));
            if let (Some(r), None) = (&rest, by_rest) {
                // Values the rest refuses are dropped before their spellings are built.
                if !super::matcher::matches(r, &self.canonical(v, &loc)) {
                    continue;
                }
            }
            let mut lit = self.literal(v, &loc, ctx.nest)?;
            if let Some(r) = by_rest {
                lit = Hir::intersection([lit, r.clone()]);
            }
            if v.is_number() {
                match (sc.types.has(Types::INT), sc.types.has(Types::INT_POINT)) {
                    (true, false) => lit = Hir::intersection([lit, integer_spelling()]),
                    (false, true) => {
                        lit = Hir::intersection([lit, Hir::complement(integer_spelling())])
                    }
                    _ => {}
                }
            }
            alts.push(lit);
            depth = depth.max(value_depth(v));
        }
        Ok(Lang {
            hir: Hir::alternation(alts),
            depth,
        })
    }

    fn rescan(&self, flat: &Flat<'a>) -> Result<Scalars<'a>> {
        let mut sc = scalars(&flat.schemas)?;
        if let Some(t) = flat.excluded_types {
            sc.types = sc.types.minus(t);
        }
        Ok(sc)
    }
}

/// The nodes all locations together may build, as a multiple of `max_hir_nodes`. Enclosing
/// locations contain copies of their children, so a legitimate expression of `n` nodes costs
/// about `n` times its nesting to build; the factor leaves room for that while bounding memory.
const BUILD_BUDGET_FACTOR: usize = 4;

/// Child languages at least this large are compiled behind a barrier (see [`Compiler::barrier`]).
const BARRIER_NODES: usize = 48;

/// Whether a JSON value is or holds a number with no fractional part.
fn holds_whole_number(v: &Value) -> bool {
    match v {
        Value::Number(_) => Types::of(v) == Types::INTEGRAL,
        Value::Array(a) => a.iter().any(holds_whole_number),
        Value::Object(o) => o.values().any(holds_whole_number),
        _ => false,
    }
}

/// Container nesting of a JSON value.
pub(crate) fn value_depth(v: &Value) -> u32 {
    match v {
        Value::Array(a) => 1 + a.iter().map(value_depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(value_depth).max().unwrap_or(0),
        _ => 0,
    }
}
