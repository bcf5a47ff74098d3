//! Python bindings for guided-core, built as the private extension `guided._lib`.
//!
//! This crate holds no algorithms. It converts arguments, validates caller-owned buffers before
//! writing to them, releases the GIL around anything that is not O(1), and maps the core's
//! [`guided_core::Error`] onto the Python exception hierarchy defined in `guided/_errors.py`.
//! Every entry point runs inside [`errors::guard`] (or its GIL-releasing twin), which turns a Rust
//! panic into a `GuidedError` instead of letting it abort the interpreter.

use pyo3::prelude::*;

/// The extension's allocator. Compiling a JSON Schema builds and drops many small expression
/// nodes, and glibc's malloc spent half of the time to first mask on them; mimalloc's
/// thread-local free lists cost a fraction of that. Memory given back by the core still returns to
/// the system (mimalloc releases freed pages), so `IndexCache` eviction keeps its meaning.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod buffer;
mod dfa;
mod errors;
mod index;
mod json_schema;
mod stop;
mod vocab;

/// The `guided._lib` module.
#[pymodule]
fn _lib(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<dfa::PyDfa>()?;
    m.add_function(wrap_pyfunction!(dfa::utf8_sequences, m)?)?;
    m.add_class::<vocab::PyVocabulary>()?;
    m.add_class::<index::PyTokenIndex>()?;
    m.add_class::<index::PyGuide>()?;
    m.add_function(wrap_pyfunction!(index::fill_next_token_bitmask, m)?)?;
    m.add_function(wrap_pyfunction!(json_schema::json_schema_to_regex, m)?)?;
    m.add_function(wrap_pyfunction!(json_schema::schema_dfa, m)?)?;
    m.add_function(wrap_pyfunction!(stop::compile_stop_strings, m)?)?;
    Ok(())
}
