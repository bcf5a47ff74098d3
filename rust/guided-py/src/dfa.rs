//! `guided.DFA` and `guided.utf8_sequences`.
//!
//! The DFA object is immutable once built and shared behind an `Arc`, so it can be handed to other
//! threads (and later to token indexes) without copying its table. Compilation releases the GIL:
//! a large pattern can take milliseconds, and a serving process has other requests to run.
//! State and byte arguments are validated here, with a `GuidedError`, rather than trusted.

use std::sync::Arc;

use guided_core::dfa::{Dfa, DfaConfig};
use guided_core::json_schema::expand_shared;
use guided_core::regex::{self, Dialect, Hir, ParserConfig};
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::errors::{guard, guard_detached, guided_error};

/// A full-match automaton over bytes, compiled from a pattern.
#[pyclass(name = "DFA", module = "guided._lib", frozen)]
pub struct PyDfa {
    pub(crate) inner: Arc<Dfa>,
    pub(crate) source: DfaSource,
    /// The dialect `source_pattern` is written in (a schema's printed form is in the default).
    pub(crate) dialect: Dialect,
    pub(crate) max_states: usize,
}

/// The dialect called `name`, or a `GuidedError` listing the names there are.
pub(crate) fn dialect_named(py: Python<'_>, name: &str) -> PyResult<Dialect> {
    Dialect::from_name(name).ok_or_else(|| {
        let names: Vec<_> = Dialect::ALL
            .iter()
            .map(|d| format!("{:?}", d.name()))
            .collect();
        guided_error(
            py,
            format!(
                "unknown regex dialect {name:?}: expected one of {}",
                names.join(", ")
            ),
        )
    })
}

/// Parses `pattern` in `dialect`.
pub(crate) fn parse_pattern(pattern: &str, dialect: Dialect) -> guided_core::Result<Hir> {
    regex::parse_with(
        pattern,
        &ParserConfig {
            dialect,
            ..ParserConfig::default()
        },
    )
}

/// What a DFA was built from, which is what pickling and `pattern` give back.
pub(crate) enum DfaSource {
    /// A pattern, as the caller wrote it.
    Pattern(String),
    /// A compiled schema, printed on demand: the printed form spells out every copy of every
    /// shared language, so it can be much larger than the automaton, and past `limit` nodes
    /// printing it is a `SizeLimitError`.
    Schema { hir: Hir, limit: usize },
}

impl PyDfa {
    /// The pattern the automaton was compiled from (printed now for a schema's automaton).
    pub(crate) fn source_pattern(&self, py: Python<'_>) -> PyResult<String> {
        match &self.source {
            DfaSource::Pattern(p) => Ok(p.clone()),
            DfaSource::Schema { hir, limit } => {
                guard(py, || Ok(expand_shared(hir, *limit)?.to_string()))
            }
        }
    }

    fn check_state(&self, py: Python<'_>, state: i64) -> PyResult<u32> {
        if state < 0 || state as usize >= self.inner.num_states() {
            return Err(guided_error(
                py,
                format!(
                    "state {state} is out of range: the DFA has {} states",
                    self.inner.num_states()
                ),
            ));
        }
        Ok(state as u32)
    }
}

#[pymethods]
impl PyDfa {
    #[new]
    #[pyo3(signature = (pattern, *, max_states = 20_000, dialect = "python"))]
    fn new(py: Python<'_>, pattern: String, max_states: usize, dialect: &str) -> PyResult<Self> {
        let dialect = dialect_named(py, dialect)?;
        let dfa = guard_detached(py, || {
            let hir = parse_pattern(&pattern, dialect)?;
            Dfa::from_hir(&hir, &DfaConfig { max_states })
        })?;
        Ok(PyDfa {
            inner: Arc::new(dfa),
            source: DfaSource::Pattern(pattern),
            dialect,
            max_states,
        })
    }

    /// The pattern this DFA was compiled from.
    #[getter]
    fn pattern(&self, py: Python<'_>) -> PyResult<String> {
        self.source_pattern(py)
    }

    /// Number of states, the dead state included.
    #[getter]
    fn num_states(&self) -> usize {
        self.inner.num_states()
    }

    /// The start state (always 1).
    #[getter]
    fn start(&self) -> u32 {
        self.inner.start()
    }

    /// The dead state (always 0).
    #[getter]
    fn dead(&self) -> u32 {
        self.inner.dead()
    }

    /// Number of byte equivalence classes.
    #[getter]
    fn num_classes(&self) -> usize {
        self.inner.classes().num_classes()
    }

    /// The state reached from `state` on `byte`.
    fn next_state(&self, py: Python<'_>, state: i64, byte: i64) -> PyResult<u32> {
        let state = self.check_state(py, state)?;
        let byte = u8::try_from(byte)
            .map_err(|_| guided_error(py, format!("byte {byte} is out of range 0..=255")))?;
        Ok(self.inner.next_state(state, byte))
    }

    /// Whether the text read so far is a match.
    fn is_accepting(&self, py: Python<'_>, state: i64) -> PyResult<bool> {
        let state = self.check_state(py, state)?;
        Ok(self.inner.is_accepting(state))
    }

    /// Accepting, and no byte leads anywhere but the dead state.
    fn is_final(&self, py: Python<'_>, state: i64) -> PyResult<bool> {
        let state = self.check_state(py, state)?;
        Ok(self.inner.is_final(state))
    }

    /// Whether the whole of `data` (bytes, or str encoded as UTF-8) matches.
    #[pyo3(name = "match")]
    fn is_match(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<bool> {
        if let Ok(s) = data.cast::<PyString>() {
            // A str holding lone surrogates has no UTF-8 encoding, so it cannot match.
            return Ok(match s.to_cow() {
                Ok(text) => self.inner.is_match(text.as_bytes()),
                Err(_) => false,
            });
        }
        if let Ok(b) = data.cast::<PyBytes>() {
            return Ok(self.inner.is_match(b.as_bytes()));
        }
        if let Ok(b) = data.cast::<PyByteArray>() {
            return Ok(self.inner.is_match(&b.to_vec()));
        }
        let _ = py;
        Err(pyo3::exceptions::PyTypeError::new_err(
            "DFA.match expects bytes, bytearray or str",
        ))
    }

    /// The transition table, int32 `[num_states, 256]`.
    #[getter]
    fn table<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<i32>>> {
        let n = self.inner.num_states();
        let flat: Vec<i32> = self
            .inner
            .table_256()
            .into_iter()
            .map(|s| s as i32)
            .collect();
        let array = PyArray1::from_vec(py, flat);
        array.reshape([n, 256])
    }

    /// Per state: is it accepting.
    #[getter]
    fn accepting<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<bool>> {
        PyArray1::from_vec(py, self.inner.accepting())
    }

    /// Per state: is it final (accepting with no way on).
    #[getter]
    fn r#final<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<bool>> {
        PyArray1::from_vec(py, self.inner.finals())
    }

    /// Bytes held by the automaton's tables.
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// Pickling rebuilds the automaton from its pattern: the pattern is a few bytes, the table
    /// may be megabytes, and compilation is deterministic.
    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<((String,), Bound<'py, pyo3::types::PyDict>)> {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("max_states", self.max_states)?;
        if self.dialect != Dialect::default() {
            kwargs.set_item("dialect", self.dialect.name())?;
        }
        Ok(((self.source_pattern(py)?,), kwargs))
    }

    fn __repr__(&self) -> String {
        let source = match &self.source {
            DfaSource::Pattern(p) => format!("{p:?}"),
            DfaSource::Schema { .. } => "<JSON Schema>".to_string(),
        };
        format!(
            "DFA({source}, num_states={}, num_classes={})",
            self.inner.num_states(),
            self.inner.classes().num_classes()
        )
    }
}

/// Byte-range sequences whose concatenations are exactly the UTF-8 encodings of `lo..=hi`.
#[pyfunction]
pub fn utf8_sequences(py: Python<'_>, lo: i64, hi: i64) -> PyResult<Vec<Vec<(u8, u8)>>> {
    let max = regex::MAX_CODE_POINT as i64;
    if !(0..=max).contains(&lo) || !(0..=max).contains(&hi) {
        return Err(guided_error(
            py,
            format!("code points must lie in 0..=0x10FFFF, got {lo}..={hi}"),
        ));
    }
    guard(py, || {
        Ok(guided_core::utf8::utf8_sequences(lo as u32, hi as u32)
            .into_iter()
            .map(|seq| seq.into_iter().map(|r| (r.start, r.end)).collect())
            .collect())
    })
}
