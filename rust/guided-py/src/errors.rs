//! Mapping core errors and panics onto the Python exception classes.
//!
//! The classes themselves are defined in Python (`guided/_errors.py`) so they can carry attributes
//! and docstrings and be subclassed like any other exception; this module imports them lazily and
//! instantiates the right one with the right attributes.

use guided_core::index::TERMINAL;
use guided_core::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("guided._errors").map(Bound::unbind))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// Converts a core error into the matching Python exception.
pub fn to_py(py: Python<'_>, err: Error) -> PyErr {
    let message = err.to_string();
    let built = (|| -> PyResult<PyErr> {
        let (name, kwargs): (&str, Vec<(&str, Py<PyAny>)>) = match err {
            Error::RegexSyntax {
                pattern, position, ..
            } => (
                "RegexSyntaxError",
                vec![
                    ("pattern", pattern.into_pyobject(py)?.into_any().unbind()),
                    ("position", position.into_pyobject(py)?.into_any().unbind()),
                ],
            ),
            Error::GrammarSyntax { line, column, .. } => (
                "GrammarSyntaxError",
                vec![
                    ("line", line.into_pyobject(py)?.into_any().unbind()),
                    ("column", column.into_pyobject(py)?.into_any().unbind()),
                ],
            ),
            Error::UnsupportedSchema {
                keyword, pointer, ..
            } => (
                "UnsupportedSchemaError",
                vec![
                    ("keyword", keyword.into_pyobject(py)?.into_any().unbind()),
                    ("pointer", pointer.into_pyobject(py)?.into_any().unbind()),
                ],
            ),
            Error::SizeLimit {
                limit,
                value,
                maximum,
            } => (
                "SizeLimitError",
                vec![
                    ("limit", limit.into_pyobject(py)?.into_any().unbind()),
                    ("value", value.into_pyobject(py)?.into_any().unbind()),
                    ("maximum", maximum.into_pyobject(py)?.into_any().unbind()),
                ],
            ),
            Error::Vocabulary(_) => ("VocabularyError", vec![]),
            Error::Invalid(_) => ("GuidedError", vec![]),
            Error::InvalidToken { token, state, .. } => (
                "InvalidTokenError",
                vec![
                    ("token", token.into_pyobject(py)?.into_any().unbind()),
                    // -1 is the terminal state everywhere in the Python API
                    (
                        "state",
                        (if state == TERMINAL {
                            -1
                        } else {
                            i64::from(state)
                        })
                        .into_pyobject(py)?
                        .into_any()
                        .unbind(),
                    ),
                ],
            ),
        };
        let cls = class(py, name)?;
        let kw = pyo3::types::PyDict::new(py);
        for (k, v) in kwargs {
            kw.set_item(k, v)?;
        }
        let exc = cls.call((message.clone(),), Some(&kw))?;
        Ok(PyErr::from_value(exc))
    })();
    built.unwrap_or_else(|e| e)
}

/// Runs `f`, turning a core error into its Python exception and a panic into `GuidedError`.
pub fn guard<T>(py: Python<'_>, f: impl FnOnce() -> Result<T, Error>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(payload) => Err(panic_error(py, payload)),
    }
}

/// Runs `f` with the GIL released, with the same error and panic handling as [`guard`].
pub fn guard_detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> PyResult<T> {
    let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(f)));
    match outcome {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(payload) => Err(panic_error(py, payload)),
    }
}

/// A `GuidedError` describing a caught panic.
pub fn panic_error(py: Python<'_>, payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    guided_error(
        py,
        format!("internal error in guided (please report it): {what}"),
    )
}

/// A plain `GuidedError` with `message`, for bad arguments the core never sees.
pub fn guided_error(py: Python<'_>, message: impl Into<String>) -> PyErr {
    let message = message.into();
    match class(py, "GuidedError").and_then(|cls| cls.call1((message.clone(),))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => PyRuntimeError::new_err(message),
    }
}
