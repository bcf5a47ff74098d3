//! `guided.json_schema_to_regex` (through its Python facade) and the schema DFA tests use.
//!
//! Schemas cross the boundary as JSON text: the facade serializes a `dict` with `json.dumps`, which
//! is exact for every JSON value and cheaper to get right than walking Python objects here. Parsing
//! and compilation run with the GIL released. A text that is not JSON is an `UnsupportedSchemaError`
//! (the schema means nothing), except for nesting beyond the parser's depth limit, which is a
//! `SizeLimitError` like every other budget.

use std::sync::Arc;

use guided_core::dfa::{Dfa, DfaConfig};
pub(crate) use guided_core::json_schema::json_schema_to_hir;
use guided_core::json_schema::{expand_shared, SchemaOptions};
use guided_core::Error;
use pyo3::prelude::*;

use crate::dfa::{DfaSource, PyDfa};
use crate::errors::guard_detached;

/// serde_json's default nesting limit, reported as the size limit it is.
const JSON_NESTING: usize = 128;

pub(crate) fn parse_schema(text: &str) -> Result<serde_json::Value, Error> {
    serde_json::from_str(text).map_err(|e| {
        if e.to_string().contains("recursion limit") {
            Error::size_limit("json_nesting", JSON_NESTING + 1, JSON_NESTING)
        } else {
            Error::UnsupportedSchema {
                keyword: String::new(),
                pointer: String::new(),
                message: format!("the schema is not valid JSON: {e}"),
            }
        }
    })
}

pub(crate) fn options(
    whitespace: Option<String>,
    max_recursion_depth: usize,
    max_free_depth: usize,
    strict: bool,
    coerce_one_of: bool,
    assert_formats: bool,
) -> SchemaOptions {
    SchemaOptions {
        whitespace,
        max_recursion_depth,
        max_free_depth,
        strict,
        coerce_one_of,
        assert_formats,
        ..SchemaOptions::default()
    }
}

/// Compiles a schema (JSON text) to a pattern; returns it with the warnings of non-strict mode.
#[pyfunction]
#[pyo3(signature = (schema, *, whitespace = None, max_recursion_depth = 3, max_free_depth = 4, strict = true, coerce_one_of = false, assert_formats = true))]
#[allow(clippy::too_many_arguments)]
pub fn json_schema_to_regex(
    py: Python<'_>,
    schema: String,
    whitespace: Option<String>,
    max_recursion_depth: usize,
    max_free_depth: usize,
    strict: bool,
    coerce_one_of: bool,
    assert_formats: bool,
) -> PyResult<(String, Vec<String>)> {
    let opts = options(
        whitespace,
        max_recursion_depth,
        max_free_depth,
        strict,
        coerce_one_of,
        assert_formats,
    );
    guard_detached(py, || {
        let value = parse_schema(&schema)?;
        let compiled = json_schema_to_hir(&value, &opts)?;
        let pattern = expand_shared(&compiled.hir, opts.max_hir_nodes)?.to_string();
        Ok((pattern, compiled.warnings))
    })
}

/// The DFA of a schema, built from its HIR directly (boolean keywords included); for tests and
/// benchmarks, which need to match texts against schemas whose printing uses extended operators.
#[pyfunction]
#[pyo3(signature = (schema, *, whitespace = None, max_recursion_depth = 3, max_free_depth = 4, strict = true, coerce_one_of = false, assert_formats = true, max_states = crate::index::SCHEMA_MAX_STATES))]
#[allow(clippy::too_many_arguments)]
pub fn schema_dfa(
    py: Python<'_>,
    schema: String,
    whitespace: Option<String>,
    max_recursion_depth: usize,
    max_free_depth: usize,
    strict: bool,
    coerce_one_of: bool,
    assert_formats: bool,
    max_states: usize,
) -> PyResult<PyDfa> {
    let opts = options(
        whitespace,
        max_recursion_depth,
        max_free_depth,
        strict,
        coerce_one_of,
        assert_formats,
    );
    let limit = opts.max_hir_nodes;
    let (dfa, hir) = guard_detached(py, || {
        let value = parse_schema(&schema)?;
        let compiled = json_schema_to_hir(&value, &opts)?;
        let dfa = Dfa::from_hir(&compiled.hir, &DfaConfig { max_states })?;
        Ok((dfa, compiled.hir))
    })?;
    Ok(PyDfa {
        inner: Arc::new(dfa),
        source: DfaSource::Schema { hir, limit },
        dialect: guided_core::regex::Dialect::Python,
        max_states,
    })
}
