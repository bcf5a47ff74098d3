//! `guided.TokenIndex`, `guided.Guide` and the batched mask fill.
//!
//! Three things matter at this boundary. Caller-owned mask buffers (numpy arrays, or CPU torch
//! tensors, read in place: [`crate::buffer`]) are checked for dtype, rank, width, contiguity
//! and row range before a single word is written. Work that is not O(1) runs with the
//! GIL released, and a batch fill spreads its rows over a rayon pool, because a serving loop fills
//! a mask for every running request at every step. And the index's trie, the expensive per
//! vocabulary structure, is built once and shared by every index over the same `Vocabulary`.
//!
//! States cross into Python as ints, with -1 for the terminal state (EOS accepted), so that 0
//! keeps its meaning of "not allowed".

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use guided_core::bitmask::{words_for, Mask};
use guided_core::dfa::determinize::DEFAULT_MAX_CALL_DEPTH;
use guided_core::grammar::{self, Syntax};
use guided_core::guide::Guide;
use guided_core::index::{IndexConfig, TokenIndex, TERMINAL};
use guided_core::regex::Dialect;
use guided_core::slice::TokenTries;
use guided_core::structural_tag::TagOptions;
use guided_core::vocab::Vocabulary;
use guided_core::Error;
use numpy::PyArray1;

/// The default state budget of schema automata. Generated languages are larger than hand-written
/// patterns: a `format` under a `maxLength`, or a large member value (every shared language is
/// one DFA built eagerly), and 20,000 states (the regex default) refused about 75 of the 1,278
/// schemas in `bench/schema.py`. At 200,000 a further 17 compile (member values of 140,000 to
/// 180,000 states), each in at most a few seconds and under a GB.
pub(crate) const SCHEMA_MAX_STATES: usize = 200_000;

/// The NFA state budget of schema automata. A recursive schema's rules, and the shared languages
/// that call them, are compiled as NFA fragments where other shared languages are DFAs embedded
/// at one state each: the NFA then holds what those DFAs would have held, and large recursive
/// schemas (Kubernetes custom resources with every field described) reach a million states.
/// Four million is about 150 MB at worst.
pub(crate) const SCHEMA_NFA_STATES: usize = 4_000_000;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use rayon::prelude::*;

use crate::buffer::mask_rows;
use crate::dfa::{dialect_named, parse_pattern, PyDfa};
use crate::errors::{guard, guard_detached, guided_error};
use crate::json_schema;
use crate::vocab::PyVocabulary;

fn state_to_py(state: u32) -> i64 {
    if state == TERMINAL {
        -1
    } else {
        i64::from(state)
    }
}

fn state_from_py(py: Python<'_>, state: i64) -> PyResult<u32> {
    match state {
        -1 => Ok(TERMINAL),
        s if (0..i64::from(u32::MAX)).contains(&s) => Ok(s as u32),
        s => Err(guided_error(py, format!("state {s} is out of range"))),
    }
}

/// How an index was built, kept so that pickling can rebuild it.
enum Source {
    Regex {
        pattern: String,
        dialect: Dialect,
        max_states: usize,
    },
    /// A JSON Schema or a grammar: its text and the keyword arguments it was compiled with.
    Text {
        kind: &'static str,
        text: String,
        options: Py<PyDict>,
    },
}

/// Which tokens may follow each state of a constraint, over one vocabulary.
#[pyclass(name = "TokenIndex", module = "guided._lib", frozen)]
pub struct PyTokenIndex {
    pub(crate) inner: Arc<TokenIndex>,
    vocab: Py<PyVocabulary>,
    source: Source,
}

impl PyTokenIndex {
    fn build(
        py: Python<'_>,
        vocab: &Bound<'_, PyVocabulary>,
        source: Source,
        make: impl FnOnce(Arc<Vocabulary>, Arc<TokenTries>) -> Result<TokenIndex, Error> + Send,
    ) -> PyResult<Self> {
        let owner = vocab.get();
        // The first index over a vocabulary also builds its trie, without the GIL like the rest.
        let index = guard_detached(py, move || make(Arc::clone(&owner.inner), owner.tries()?))?;
        Ok(PyTokenIndex {
            inner: Arc::new(index),
            vocab: vocab.clone().unbind(),
            source,
        })
    }

    /// [`PyTokenIndex::build`] for compilers that report ignored keywords, which are raised as
    /// warnings through the schema facade once the index is built.
    fn build_warned(
        py: Python<'_>,
        vocab: &Bound<'_, PyVocabulary>,
        source: Source,
        facade: &Bound<'_, PyModule>,
        make: impl FnOnce(Arc<Vocabulary>, Arc<TokenTries>) -> Result<(TokenIndex, Vec<String>), Error>
            + Send,
    ) -> PyResult<Self> {
        let warnings = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::clone(&warnings);
        let index = Self::build(py, vocab, source, move |v, tries| {
            let (index, ignored) = make(v, tries)?;
            *out.lock().unwrap_or_else(|e| e.into_inner()) = ignored;
            Ok(index)
        })?;
        let ignored = std::mem::take(&mut *warnings.lock().unwrap_or_else(|e| e.into_inner()));
        if !ignored.is_empty() {
            facade.getattr("warn_ignored")?.call1((ignored,))?;
        }
        Ok(index)
    }

    fn state(&self, py: Python<'_>, state: i64) -> PyResult<u32> {
        let s = state_from_py(py, state)?;
        if s != TERMINAL && s as usize >= self.inner.num_states() {
            return Err(guided_error(
                py,
                format!(
                    "state {state} does not exist: the index has {} states",
                    self.inner.num_states()
                ),
            ));
        }
        Ok(s)
    }
}

#[pymethods]
impl PyTokenIndex {
    /// An index over a compiled `DFA` (complete and minimal).
    #[new]
    fn new(
        py: Python<'_>,
        dfa: &Bound<'_, PyDfa>,
        vocab: &Bound<'_, PyVocabulary>,
    ) -> PyResult<Self> {
        let d = dfa.get();
        let automaton = Arc::clone(&d.inner);
        let source = Source::Regex {
            pattern: d.source_pattern(py)?,
            dialect: d.dialect,
            max_states: d.max_states,
        };
        Self::build(py, vocab, source, move |v, trie| {
            Ok(TokenIndex::from_dfa(&automaton, v, trie))
        })
    }

    /// An index over `pattern`, whose automaton is built lazily as states are visited.
    #[staticmethod]
    #[pyo3(signature = (pattern, vocab, *, max_states = 20_000, dialect = "python"))]
    fn from_regex(
        py: Python<'_>,
        pattern: String,
        vocab: &Bound<'_, PyVocabulary>,
        max_states: usize,
        dialect: &str,
    ) -> PyResult<Self> {
        let dialect = dialect_named(py, dialect)?;
        let source = Source::Regex {
            pattern: pattern.clone(),
            dialect,
            max_states,
        };
        let config = IndexConfig {
            max_states,
            ..IndexConfig::default()
        };
        Self::build(py, vocab, source, move |v, trie| {
            let hir = parse_pattern(&pattern, dialect)?;
            TokenIndex::from_hir(&hir, v, trie, &config)
        })
    }

    /// An index over the JSON texts of a schema's instances (see `guided.json_schema_to_regex`
    /// for the options), with the automaton built lazily as states are visited. A keyword that
    /// needs the depth of a value nesting without bound (`not`, `contains`, a member count, an
    /// `enum` over a free or recursive value) raises `UnsupportedSchemaError`, unless
    /// `depth_bounds=True` lets it bound that value as the regular form does, with a warning.
    #[staticmethod]
    #[pyo3(signature = (schema, vocab, *, whitespace = None, max_recursion_depth = 3, max_free_depth = 4, strict = true, coerce_one_of = false, assert_formats = true, max_states = SCHEMA_MAX_STATES, depth_bounds = false))]
    #[allow(clippy::too_many_arguments)]
    fn from_json_schema(
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        vocab: &Bound<'_, PyVocabulary>,
        whitespace: Option<String>,
        max_recursion_depth: usize,
        max_free_depth: usize,
        strict: bool,
        coerce_one_of: bool,
        assert_formats: bool,
        max_states: usize,
        depth_bounds: bool,
    ) -> PyResult<Self> {
        let facade = py.import("guided._json_schema")?;
        let text: String = facade
            .getattr("json_schema_text")?
            .call1((schema,))?
            .extract()?;
        let recipe = PyDict::new(py);
        recipe.set_item("whitespace", whitespace.clone())?;
        recipe.set_item("max_recursion_depth", max_recursion_depth)?;
        recipe.set_item("max_free_depth", max_free_depth)?;
        recipe.set_item("strict", strict)?;
        recipe.set_item("coerce_one_of", coerce_one_of)?;
        recipe.set_item("assert_formats", assert_formats)?;
        recipe.set_item("max_states", max_states)?;
        recipe.set_item("depth_bounds", depth_bounds)?;
        let mut opts = json_schema::options(
            whitespace,
            max_recursion_depth,
            max_free_depth,
            strict,
            coerce_one_of,
            assert_formats,
        );
        opts.depth_bounds = depth_bounds;
        let config = IndexConfig {
            max_states,
            nfa_states: SCHEMA_NFA_STATES,
            ..IndexConfig::default()
        };
        let source = Source::Text {
            kind: "json_schema",
            text: text.clone(),
            options: recipe.unbind(),
        };
        Self::build_warned(py, vocab, source, &facade, move |v, tries| {
            let schema = json_schema::parse_schema(&text)?;
            TokenIndex::from_json_schema(&schema, &opts, v, tries, &config)
        })
    }

    /// An index over the outputs a structural tag allows: xgrammar's `StructuralTag` format
    /// (`{"type": "structural_tag", "format": {...}}`, or the legacy `structures`/`triggers`
    /// form), free text with tool calls whose arguments follow their JSON Schemas exactly.
    /// Schema options apply to every `json_schema` format in it; `dialect` is that of its
    /// `regex` formats; at most `max_stack` calls of recursive rules are open at once.
    #[staticmethod]
    #[pyo3(signature = (tag, vocab, *, whitespace = None, max_recursion_depth = 3, max_free_depth = 4, strict = true, assert_formats = true, dialect = "xgrammar", max_stack = DEFAULT_MAX_CALL_DEPTH, max_states = SCHEMA_MAX_STATES))]
    #[allow(clippy::too_many_arguments)]
    fn from_structural_tag(
        py: Python<'_>,
        tag: &Bound<'_, PyAny>,
        vocab: &Bound<'_, PyVocabulary>,
        whitespace: Option<String>,
        max_recursion_depth: usize,
        max_free_depth: usize,
        strict: bool,
        assert_formats: bool,
        dialect: &str,
        max_stack: u32,
        max_states: usize,
    ) -> PyResult<Self> {
        let parsed_dialect = dialect_named(py, dialect)?;
        let facade = py.import("guided._json_schema")?;
        let text: String = facade
            .getattr("json_schema_text")?
            .call1((tag,))?
            .extract()?;
        let recipe = PyDict::new(py);
        recipe.set_item("whitespace", whitespace.clone())?;
        recipe.set_item("max_recursion_depth", max_recursion_depth)?;
        recipe.set_item("max_free_depth", max_free_depth)?;
        recipe.set_item("strict", strict)?;
        recipe.set_item("assert_formats", assert_formats)?;
        recipe.set_item("dialect", dialect)?;
        recipe.set_item("max_stack", max_stack)?;
        recipe.set_item("max_states", max_states)?;
        let opts = TagOptions {
            schema: json_schema::options(
                whitespace,
                max_recursion_depth,
                max_free_depth,
                strict,
                false,
                assert_formats,
            ),
            dialect: parsed_dialect,
            unroll: false,
        };
        let config = IndexConfig {
            max_states,
            nfa_states: SCHEMA_NFA_STATES,
            max_call_depth: max_stack,
        };
        let source = Source::Text {
            kind: "structural_tag",
            text: text.clone(),
            options: recipe.unbind(),
        };
        Self::build_warned(py, vocab, source, &facade, move |v, tries| {
            let tag = json_schema::parse_schema(&text)?;
            TokenIndex::from_structural_tag(&tag, &opts, v, tries, &config)
        })
    }

    /// An index over the texts a context-free grammar derives from rule `root` (`syntax`:
    /// "gbnf", "ebnf" (xgrammar's name for the same syntax) or "lark", whose root is `start`
    /// unless the grammar has a rule named `root`). Regular rules become automata, recursive
    /// rules calls; at most `max_stack` calls are open at once.
    #[staticmethod]
    #[pyo3(signature = (text, vocab, *, syntax = "gbnf", root = String::from("root"), max_stack = DEFAULT_MAX_CALL_DEPTH, max_states = SCHEMA_MAX_STATES))]
    fn from_grammar(
        py: Python<'_>,
        text: String,
        vocab: &Bound<'_, PyVocabulary>,
        syntax: &str,
        root: String,
        max_stack: u32,
        max_states: usize,
    ) -> PyResult<Self> {
        let Some(parsed_syntax) = Syntax::from_name(syntax) else {
            return Err(guided_error(
                py,
                format!(
                    "unknown grammar syntax {syntax:?}: expected \"gbnf\", \"ebnf\" or \"lark\""
                ),
            ));
        };
        let recipe = PyDict::new(py);
        recipe.set_item("syntax", parsed_syntax.name())?;
        recipe.set_item("root", root.clone())?;
        recipe.set_item("max_stack", max_stack)?;
        recipe.set_item("max_states", max_states)?;
        let config = IndexConfig {
            max_states,
            nfa_states: SCHEMA_NFA_STATES,
            max_call_depth: max_stack,
        };
        let source = Source::Text {
            kind: "grammar",
            text: text.clone(),
            options: recipe.unbind(),
        };
        Self::build(py, vocab, source, move |v, tries| {
            let hir = grammar::compile(&text, parsed_syntax, &root)?;
            TokenIndex::from_hir(&hir, v, tries, &config)
        })
    }

    /// The start state.
    #[getter]
    fn initial_state(&self) -> u32 {
        self.inner.initial_state()
    }

    /// Automaton states built so far (the automaton grows as states are visited).
    #[getter]
    fn num_states(&self) -> usize {
        self.inner.num_states()
    }

    /// The model's logit width.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    /// The EOS ids, allowed exactly in accepting states.
    #[getter]
    fn eos_token_ids(&self) -> Vec<u32> {
        self.inner.eos_token_ids().to_vec()
    }

    /// The vocabulary.
    #[getter]
    fn vocabulary(&self, py: Python<'_>) -> Py<PyVocabulary> {
        self.vocab.clone_ref(py)
    }

    /// The state `token` leads to: 0 if not allowed, -1 for EOS accepted.
    fn next_state(&self, py: Python<'_>, state: i64, token: i64) -> PyResult<i64> {
        let s = self.state(py, state)?;
        let index = &self.inner;
        guard(py, || index.next_state(s, token)).map(state_to_py)
    }

    /// Every token's successor from `state` (int32 `[vocab_size]`, 0 = not allowed, -1 = EOS).
    fn next_states<'py>(&self, py: Python<'py>, state: i64) -> PyResult<Bound<'py, PyArray1<i32>>> {
        let s = self.state(py, state)?;
        let index = Arc::clone(&self.inner);
        let next = guard_detached(py, move || index.next_states(s))?;
        let out: Vec<i32> = next.into_iter().map(|t| state_to_py(t) as i32).collect();
        Ok(PyArray1::from_vec(py, out))
    }

    /// The packed mask of `state` (int32 `[ceil(vocab_size/32)]`).
    fn bitmask<'py>(&self, py: Python<'py>, state: i64) -> PyResult<Bound<'py, PyArray1<i32>>> {
        let s = self.state(py, state)?;
        let index = Arc::clone(&self.inner);
        let mask = guard_detached(py, move || index.mask(s))?;
        let mut words = vec![0i32; words_for(self.inner.vocab_size())];
        write_row(&mut words, &mask);
        Ok(PyArray1::from_vec(py, words))
    }

    /// The mask of `state` as one bool per token id.
    fn allowed<'py>(&self, py: Python<'py>, state: i64) -> PyResult<Bound<'py, PyArray1<bool>>> {
        let s = self.state(py, state)?;
        let index = Arc::clone(&self.inner);
        let flags = guard_detached(py, move || {
            Ok(allowed_flags(&*index.mask(s)?, index.vocab_size()))
        })?;
        Ok(PyArray1::from_vec(py, flags))
    }

    /// Whether `state` accepts (EOS allowed).
    fn is_accepting(&self, py: Python<'_>, state: i64) -> PyResult<bool> {
        let s = self.state(py, state)?;
        Ok(self.inner.is_accepting(s))
    }

    /// Whether only EOS can follow `state`.
    fn is_final(&self, py: Python<'_>, state: i64) -> PyResult<bool> {
        let s = self.state(py, state)?;
        let index = &self.inner;
        guard(py, || index.is_final(s))
    }

    /// Bytes the index holds: automaton, cached masks, and its (shared) token trie.
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// Distinct masks computed so far.
    #[getter]
    fn num_masks(&self) -> usize {
        self.inner.num_masks()
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
        let restore = py.import("guided._pickle")?.getattr("restore_index")?;
        let args = match &self.source {
            Source::Regex {
                pattern,
                dialect,
                max_states,
            } => ("regex", pattern.clone(), self.vocab.clone_ref(py), {
                let d = PyDict::new(py);
                d.set_item("max_states", max_states)?;
                if *dialect != Dialect::default() {
                    d.set_item("dialect", dialect.name())?;
                }
                d.unbind()
            }),
            Source::Text {
                kind,
                text,
                options,
            } => (
                *kind,
                text.clone(),
                self.vocab.clone_ref(py),
                options.clone_ref(py),
            ),
        };
        Ok((
            restore.unbind(),
            args.into_pyobject(py)?.into_any().unbind(),
        ))
    }

    fn __repr__(&self) -> String {
        let what = match &self.source {
            Source::Regex { pattern, .. } => format!("regex={pattern:?}"),
            Source::Text { kind, .. } => kind.to_string(),
        };
        format!(
            "TokenIndex({what}, vocab_size={}, states={}, masks={})",
            self.inner.vocab_size(),
            self.inner.num_states(),
            self.inner.num_masks()
        )
    }
}

/// `row` as an index into a buffer of `rows` rows, refused where it is out of range.
fn check_row(py: Python<'_>, row: i64, rows: usize) -> PyResult<usize> {
    if row < 0 || row as u64 >= rows as u64 {
        return Err(guided_error(
            py,
            format!("row {row} is out of range for a bitmask with {rows} rows"),
        ));
    }
    Ok(row as usize)
}

/// Writes `mask` into one row of an int32 buffer (bit patterns, not values: word `w` of the mask
/// is word `w` of the row).
fn write_row(dst: &mut [i32], mask: &Mask) {
    mask.write_to(bytemuck::cast_slice_mut(dst));
}

/// One flag per token id of a `vocab_size` vocabulary: whether `mask` allows it (read off the
/// packed words, whatever the mask's form).
fn allowed_flags(mask: &Mask, vocab_size: usize) -> Vec<bool> {
    let mut words = vec![0u32; words_for(vocab_size)];
    mask.write_to(&mut words);
    (0..vocab_size)
        .map(|t| words[t >> 5] >> (t & 31) & 1 != 0)
        .collect()
}

/// A row to fill: where it goes, which index, which state.
type Job<'a> = (&'a mut [i32], Arc<TokenIndex>, u32);

/// Writes the mask of `state` (EOS only once terminated) into `dst`.
fn fill_row(dst: &mut [i32], index: &TokenIndex, state: u32) -> Result<(), Error> {
    let mask = index.mask(state)?;
    write_row(dst, &mask);
    Ok(())
}

/// One request's position in a constraint.
#[pyclass(name = "Guide", module = "guided._lib")]
pub struct PyGuide {
    inner: Guide,
    index: Py<PyTokenIndex>,
    max_rollback: i64,
}

#[pymethods]
impl PyGuide {
    #[new]
    #[pyo3(signature = (index, *, max_rollback = 0))]
    fn new(py: Python<'_>, index: &Bound<'_, PyTokenIndex>, max_rollback: i64) -> PyResult<Self> {
        let bound = match max_rollback {
            -1 => None,
            n if n >= 0 => Some(n as usize),
            n => {
                return Err(guided_error(
                    py,
                    format!("max_rollback must be -1 (unlimited) or >= 0, got {n}"),
                ))
            }
        };
        Ok(PyGuide {
            inner: Guide::new(Arc::clone(&index.get().inner), bound),
            index: index.clone().unbind(),
            max_rollback,
        })
    }

    /// The index this guide walks.
    #[getter]
    fn index(&self, py: Python<'_>) -> Py<PyTokenIndex> {
        self.index.clone_ref(py)
    }

    /// The current state (-1 once EOS was accepted).
    #[getter]
    fn state(&self) -> i64 {
        state_to_py(self.inner.state())
    }

    /// EOS accepted, or a final state reached: nothing but EOS may follow.
    #[getter]
    fn finished(&self, py: Python<'_>) -> PyResult<bool> {
        let g = &self.inner;
        guard(py, || g.is_finished())
    }

    /// Whether EOS has been accepted.
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }

    /// Whether the output so far is complete (EOS allowed now).
    fn is_accepting(&self) -> bool {
        self.inner.is_accepting()
    }

    /// Consumes `token`; raises `InvalidTokenError` and stays put if it is not allowed.
    fn advance(&mut self, py: Python<'_>, token: i64) -> PyResult<()> {
        let g = &mut self.inner;
        guard(py, || g.advance(token))
    }

    /// Consumes `token` if allowed and says whether it did.
    fn accept_token(&mut self, py: Python<'_>, token: i64) -> PyResult<bool> {
        let g = &mut self.inner;
        guard(py, || g.accept_token(token))
    }

    /// Consumes all of `tokens` if each is allowed in turn, else none of them.
    fn accept_tokens(&mut self, py: Python<'_>, tokens: Vec<i64>) -> PyResult<bool> {
        let g = &mut self.inner;
        guard(py, || g.accept_tokens(&tokens))
    }

    /// The length of the longest accepted prefix of `tokens`; the state does not change.
    fn validate_tokens(&self, py: Python<'_>, tokens: Vec<i64>) -> PyResult<usize> {
        let g = &self.inner;
        guard(py, || g.validate_tokens(&tokens))
    }

    /// Undoes the last `n` tokens.
    #[pyo3(signature = (n = 1))]
    fn rollback(&mut self, py: Python<'_>, n: i64) -> PyResult<()> {
        if n < 0 {
            return Err(guided_error(py, format!("cannot roll back {n} tokens")));
        }
        let g = &mut self.inner;
        guard(py, || g.rollback(n as usize))
    }

    /// Back to the start.
    fn reset(&mut self) {
        self.inner.reset();
    }

    /// An independent guide in the same state, with the same history.
    fn copy(&self, py: Python<'_>) -> Self {
        PyGuide {
            inner: self.inner.clone(),
            index: self.index.clone_ref(py),
            max_rollback: self.max_rollback,
        }
    }

    fn __copy__(&self, py: Python<'_>) -> Self {
        self.copy(py)
    }

    /// Writes the next-token mask into row `index` of a 2-D int32 CPU buffer.
    #[pyo3(signature = (bitmask, index = 0))]
    fn fill_bitmask(&self, py: Python<'_>, bitmask: &Bound<'_, PyAny>, index: i64) -> PyResult<()> {
        let width = words_for(self.inner.index().vocab_size());
        let mut buffer = mask_rows(py, bitmask, width)?;
        let row = check_row(py, index, buffer.rows())?;
        let index = Arc::clone(self.inner.index());
        let state = self.inner.state();
        // A cached mask is one copy, cheaper than releasing and retaking the GIL around it. A
        // fresh one is computed without the GIL and written with it.
        let mask = match index.cached_mask(state) {
            Some(mask) => mask,
            None => guard_detached(py, move || index.mask(state))?,
        };
        let words = buffer.words(py)?;
        write_row(&mut words[row * width..(row + 1) * width], &mask);
        Ok(())
    }

    /// The allowed tokens as a torch bool tensor `[vocab_size]` (on `device` if given).
    #[pyo3(signature = (device = None))]
    fn allowed<'py>(
        &self,
        py: Python<'py>,
        device: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let index = Arc::clone(self.inner.index());
        let state = self.inner.state();
        let vocab_size = index.vocab_size();
        let flags = guard_detached(py, move || {
            Ok(allowed_flags(&*index.mask(state)?, vocab_size))
        })?;
        let torch = py.import("torch")?;
        let tensor = torch.call_method1("from_numpy", (PyArray1::from_vec(py, flags),))?;
        match device {
            Some(d) => tensor.call_method1("to", (d,)),
            None => Ok(tensor),
        }
    }

    /// The bytes every valid continuation starts with (jump-forward).
    fn forced_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let g = &self.inner;
        let bytes = guard(py, || g.forced_bytes())?;
        Ok(PyBytes::new(py, &bytes))
    }

    fn __repr__(&self) -> String {
        format!(
            "Guide(state={}, terminated={})",
            state_to_py(self.inner.state()),
            self.inner.is_terminated()
        )
    }
}

/// A rayon pool of `threads` workers, built once per distinct size.
fn pool(threads: usize) -> Result<Arc<rayon::ThreadPool>, Error> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let mut pools = POOLS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pools.get(&threads) {
        return Ok(Arc::clone(p));
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::Invalid(format!("cannot start {threads} threads: {e}")))?;
    let p = Arc::new(p);
    pools.insert(threads, Arc::clone(&p));
    Ok(p)
}

/// Fills one bitmask row per guide in one call, in parallel, with the GIL released. Row `i` of
/// `bitmask` receives guide `i`'s mask, or guide `i`'s mask goes to row `indices[i]`.
#[pyfunction]
#[pyo3(signature = (guides, bitmask, indices = None, *, threads = None))]
pub fn fill_next_token_bitmask(
    py: Python<'_>,
    guides: Vec<PyRef<'_, PyGuide>>,
    bitmask: &Bound<'_, PyAny>,
    indices: Option<Vec<i64>>,
    threads: Option<usize>,
) -> PyResult<()> {
    let Some(first) = guides.first() else {
        return Ok(());
    };
    let width = words_for(first.inner.index().vocab_size());
    let mut buffer = mask_rows(py, bitmask, width)?;
    let rows = buffer.rows();
    if let Some(ix) = &indices {
        if ix.len() != guides.len() {
            return Err(guided_error(
                py,
                format!(
                    "indices has {} entries for {} guides",
                    ix.len(),
                    guides.len()
                ),
            ));
        }
    }
    let mut targets = Vec::with_capacity(guides.len());
    let mut used = vec![false; rows];
    for (i, g) in guides.iter().enumerate() {
        if words_for(g.inner.index().vocab_size()) != width {
            return Err(guided_error(
                py,
                "all guides in one fill must share a vocabulary width",
            ));
        }
        let row = check_row(py, indices.as_ref().map_or(i as i64, |ix| ix[i]), rows)?;
        if std::mem::replace(&mut used[row], true) {
            return Err(guided_error(py, format!("row {row} is named twice")));
        }
        targets.push((row, Arc::clone(g.inner.index()), g.inner.state()));
    }
    if threads == Some(0) {
        return Err(guided_error(py, "threads must be at least 1"));
    }
    let slice = buffer.words(py)?;
    let mut row_slices: Vec<Option<&mut [i32]>> = slice.chunks_mut(width).map(Some).collect();
    let mut jobs: Vec<Job<'_>> = Vec::with_capacity(targets.len());
    for (row, index, state) in targets {
        if let Some(dst) = row_slices[row].take() {
            jobs.push((dst, index, state));
        }
    }
    guard_detached(py, move || {
        let run = |jobs: Vec<Job<'_>>| -> Result<(), Error> {
            jobs.into_par_iter()
                .try_for_each(|(dst, index, state)| fill_row(dst, &index, state))
        };
        match threads {
            Some(n) => pool(n)?.install(|| run(jobs)),
            None => run(jobs),
        }
    })
}
