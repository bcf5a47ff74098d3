//! Caller-owned mask buffers: `[rows, ceil(vocab_size / 32)]` int32, C-contiguous, in CPU
//! memory, as a numpy array or a torch tensor. Every property is checked before a word is
//! written, and a refused buffer is left as it was.
//!
//! A numpy array is borrowed through the `numpy` crate, which also refuses a read-only array
//! and a second live borrow of the same one.
//!
//! A torch tensor is what serving engines pass: vLLM, SGLang and xgrammar's API all fill a
//! `torch.int32` tensor, one row per request, at every step. Viewing it through
//! `Tensor.numpy()`, as this module once did, built a numpy array object per call, which with
//! the checks around it cost about 4 us: four times the copy of a cached mask of 200,000
//! tokens, and more than most fresh masks. The tensor is read directly instead. Its dtype and
//! layout are compared by identity with torch's own `int32` and `strided` objects (looked up
//! once, from the torch the process imported), and its device, shape and contiguity read off
//! it; its words are reached through `data_ptr()`. Those are a handful of attribute reads, and
//! a fill on a tensor costs about what a fill on an array costs.
//!
//! Writing through that pointer is as sound as writing through the array view was: the tensor
//! is held for the whole call, so its storage stays alive, and the checks establish that the
//! `rows * width` words from the pointer are the tensor's own, aligned and contiguous. As with
//! any engine's fill, another thread that resizes or frees the buffer while a batch fill writes
//! it (with the GIL released) races with the fill; the single-row fill writes with the GIL held.

use std::ptr::NonNull;

use numpy::{PyArray2, PyArrayMethods, PyReadwriteArray2, PyUntypedArrayMethods};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple, PyType};

use crate::errors::guided_error;

/// A checked buffer, borrowed for one fill.
pub(crate) enum MaskRows<'py> {
    /// A numpy array, borrowed for writing.
    Array(PyReadwriteArray2<'py, i32>),
    /// A CPU torch tensor: `len` words from `data`, which `_tensor` owns.
    Tensor {
        _tensor: Bound<'py, PyAny>,
        data: NonNull<i32>,
        len: usize,
        rows: usize,
    },
}

impl MaskRows<'_> {
    /// How many rows the buffer holds.
    pub(crate) fn rows(&self) -> usize {
        match self {
            MaskRows::Array(a) => a.shape()[0],
            MaskRows::Tensor { rows, .. } => *rows,
        }
    }

    /// Every word of every row, row after row.
    pub(crate) fn words(&mut self, py: Python<'_>) -> PyResult<&mut [i32]> {
        match self {
            MaskRows::Array(a) => a
                .as_slice_mut()
                .map_err(|_| guided_error(py, "bitmask must be C-contiguous")),
            // SAFETY: `mask_rows` checked that the tensor is a C-contiguous 2-D int32 tensor in
            // CPU memory, aligned, of `len` words from `data` (dangling only when `len` is 0),
            // and `_tensor` keeps its storage alive while `self` lives. `&mut self` makes this
            // the one slice over it that Rust holds.
            MaskRows::Tensor { data, len, .. } => {
                Ok(unsafe { std::slice::from_raw_parts_mut(data.as_ptr(), *len) })
            }
        }
    }
}

/// Torch's tensor type and the objects a tensor's dtype and layout are compared with.
struct Torch {
    tensor: Py<PyType>,
    int32: Py<PyAny>,
    strided: Py<PyAny>,
}

/// Torch's objects, where the process has imported torch (no object is a tensor before then,
/// and a later call looks again).
fn torch(py: Python<'_>) -> PyResult<Option<&'static Torch>> {
    static TORCH: PyOnceLock<Torch> = PyOnceLock::new();
    if let Some(t) = TORCH.get(py) {
        return Ok(Some(t));
    }
    let modules = py.import("sys")?.getattr("modules")?;
    let module = modules.call_method1("get", ("torch",))?;
    if module.is_none() {
        return Ok(None);
    }
    let found = Torch {
        tensor: module.getattr("Tensor")?.cast_into::<PyType>()?.unbind(),
        int32: module.getattr("int32")?.unbind(),
        strided: module.getattr("strided")?.unbind(),
    };
    Ok(Some(TORCH.get_or_init(py, || found)))
}

/// `obj` checked as a mask buffer of `width` words per row, ready to write.
pub(crate) fn mask_rows<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    width: usize,
) -> PyResult<MaskRows<'py>> {
    if let Ok(array) = obj.cast::<PyArray2<i32>>() {
        if !array.is_c_contiguous() {
            return Err(guided_error(py, "bitmask must be C-contiguous"));
        }
        check_width(py, array.shape()[1], width)?;
        check_aligned(py, array.data() as usize)?;
        let rw = array
            .try_readwrite()
            .map_err(|e| guided_error(py, format!("bitmask is not writable: {e}")))?;
        return Ok(MaskRows::Array(rw));
    }
    if let Some(torch) = torch(py)? {
        if obj.is_instance(torch.tensor.bind(py))? {
            return tensor_rows(py, torch, obj, width);
        }
    }
    let kind = obj.get_type().name()?.to_string();
    let detail = match obj.getattr("dtype") {
        Ok(d) => format!(
            " with dtype {} and {} dimensions",
            d.str()?,
            obj.getattr("ndim")
                .map_or("?".to_string(), |n| n.to_string())
        ),
        Err(_) => String::new(),
    };
    Err(guided_error(
        py,
        format!("bitmask must be a 2-D int32 numpy array or CPU torch tensor, got {kind}{detail}"),
    ))
}

/// A torch tensor checked as a mask buffer.
fn tensor_rows<'py>(
    py: Python<'py>,
    torch: &Torch,
    obj: &Bound<'py, PyAny>,
    width: usize,
) -> PyResult<MaskRows<'py>> {
    // A tensor whose properties cannot be read (a fake or otherwise storage-less one, or a
    // subclass that overrides them) is refused like any other unusable buffer, with the
    // package's error rather than whatever the read raised.
    let unreadable = |e: PyErr| guided_error(py, format!("bitmask tensor cannot be written: {e}"));
    let get = |name: &Bound<'py, PyString>| obj.getattr(name).map_err(unreadable);
    let dtype = get(intern!(py, "dtype"))?;
    if !dtype.is(&torch.int32) {
        return Err(guided_error(
            py,
            format!("bitmask must be int32, got {}", dtype.str()?),
        ));
    }
    let layout = get(intern!(py, "layout"))?;
    if !layout.is(&torch.strided) {
        return Err(guided_error(
            py,
            format!(
                "bitmask must be a dense (strided) tensor, got {}",
                layout.str()?
            ),
        ));
    }
    if !get(intern!(py, "is_cpu"))?
        .is_truthy()
        .map_err(unreadable)?
    {
        let device = get(intern!(py, "device"))?;
        return Err(guided_error(
            py,
            format!("bitmask must be a CPU buffer, got a tensor on {device}"),
        ));
    }
    let shape = get(intern!(py, "shape"))?;
    let (rows, cols) = match shape.cast::<PyTuple>() {
        Ok(dims) if dims.len() == 2 => (dims.get_item(0)?.extract(), dims.get_item(1)?.extract()),
        _ => return Err(guided_error(py, "bitmask must be a 2-D int32 tensor")),
    };
    let (rows, cols): (usize, usize) = (rows.map_err(unreadable)?, cols.map_err(unreadable)?);
    check_width(py, cols, width)?;
    let contiguous = obj
        .call_method0(intern!(py, "is_contiguous"))
        .and_then(|c| c.is_truthy())
        .map_err(unreadable)?;
    if !contiguous {
        return Err(guided_error(py, "bitmask must be C-contiguous"));
    }
    let len = rows * width;
    let data = if len == 0 {
        NonNull::dangling()
    } else {
        let address: usize = obj
            .call_method0(intern!(py, "data_ptr"))
            .and_then(|p| p.extract())
            .map_err(unreadable)?;
        check_aligned(py, address)?;
        NonNull::new(address as *mut i32)
            .ok_or_else(|| guided_error(py, "bitmask tensor has no data"))?
    };
    Ok(MaskRows::Tensor {
        _tensor: obj.clone(),
        data,
        len,
        rows,
    })
}

fn check_width(py: Python<'_>, cols: usize, width: usize) -> PyResult<()> {
    if cols != width {
        return Err(guided_error(
            py,
            format!("bitmask rows must hold ceil(vocab_size/32) = {width} words, got {cols}"),
        ));
    }
    Ok(())
}

fn check_aligned(py: Python<'_>, address: usize) -> PyResult<()> {
    if !address.is_multiple_of(std::mem::align_of::<i32>()) {
        return Err(guided_error(py, "bitmask data is not 4-byte aligned"));
    }
    Ok(())
}
