//! `guided._lib.compile_stop_strings`: the stop-string tables of `guided_core::stop`, as numpy
//! arrays for `guided.sampling.stopping` to move to the device.
//!
//! The build runs with the GIL released. The arrays are handed over, not copied back and forth:
//! each `Vec` becomes the buffer of its numpy array.

use crate::errors::{guard_detached, guided_error};
use crate::vocab::PyVocabulary;
use guided_core::stop::StopTable;
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

/// The arrays of one compiled table: token slots, token lengths, `ends`, `inside`, column offsets,
/// `first_ends`.
type Tables<'py> = (
    Bound<'py, PyArray1<i32>>,
    Bound<'py, PyArray1<i32>>,
    Bound<'py, PyArray2<bool>>,
    Bound<'py, PyArray2<bool>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray2<i32>>,
);

/// Compiles where each token of `vocab` can sit inside each of `strings` (str is UTF-8 encoded).
///
/// Returns `(slots, lengths, ends, inside, offsets, first_ends)`; see `guided_core::stop` for
/// their meaning.
#[pyfunction]
#[pyo3(signature = (vocab, strings, *, max_stop_bytes = guided_core::stop::DEFAULT_MAX_STOP_BYTES, max_table_bytes = guided_core::stop::DEFAULT_MAX_TABLE_BYTES))]
pub fn compile_stop_strings<'py>(
    py: Python<'py>,
    vocab: &Bound<'py, PyVocabulary>,
    strings: &Bound<'py, PyAny>,
    max_stop_bytes: usize,
    max_table_bytes: usize,
) -> PyResult<Tables<'py>> {
    if strings.is_instance_of::<PyString>() || strings.is_instance_of::<PyBytes>() {
        return Err(guided_error(
            py,
            "strings must be a sequence of stop strings, not a single string",
        ));
    }
    let mut owned: Vec<Vec<u8>> = Vec::new();
    for (i, item) in strings.try_iter()?.enumerate() {
        let item = item?;
        let bytes = if let Ok(s) = item.cast::<PyString>() {
            s.to_cow()?.as_bytes().to_vec()
        } else if let Ok(b) = item.cast::<PyBytes>() {
            b.as_bytes().to_vec()
        } else if let Ok(b) = item.cast::<PyByteArray>() {
            b.to_vec()
        } else {
            return Err(guided_error(
                py,
                format!("stop string {i} must be str or bytes"),
            ));
        };
        owned.push(bytes);
    }
    let inner = std::sync::Arc::clone(&vocab.get().inner);
    let table = guard_detached(py, move || {
        StopTable::new(&inner, &owned, max_stop_bytes, max_table_bytes)
    })?;
    let (rows, width) = (table.rows(), table.width());
    // Slots are bounded by the table limit and lengths by the vocabulary's token bound; the
    // clamp only keeps a pathological value from wrapping.
    let to_i32 = |values: &[u32]| -> Vec<i32> {
        values
            .iter()
            .map(|&v| v.min(i32::MAX as u32) as i32)
            .collect()
    };
    let slots = PyArray1::from_vec(py, to_i32(table.slots()));
    let lengths = PyArray1::from_vec(py, to_i32(table.lengths()));
    let ends = PyArray1::from_slice(py, table.ends()).reshape([rows, width])?;
    let inside = PyArray1::from_slice(py, table.inside()).reshape([rows, width])?;
    let offsets = PyArray1::from_vec(py, table.offsets().iter().map(|&o| o as i64).collect());
    let first_ends = PyArray1::from_vec(py, to_i32(table.first_ends()))
        .reshape([rows, table.strings().len()])?;
    Ok((slots, lengths, ends, inside, offsets, first_ends))
}
