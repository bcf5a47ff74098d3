//! `guided.Vocabulary`: the core vocabulary behind a Python class.
//!
//! The class is frozen and holds its vocabulary in an `Arc`, so indexes and guides built from it
//! share one copy. File loaders read and parse with the GIL released. Loaders that need a Python
//! object (a transformers tokenizer, a SentencePiece model) live in `guided/_vocab.py` and end up
//! in one of the constructors here; the methods that reach them import that module lazily.
//!
//! Ids arriving from Python are checked here, not cast: a negative or enormous EOS id or
//! `vocab_size` is a `VocabularyError`, never a wrapped-around `u32`.

use crate::errors::{guard, guard_detached, to_py};
use guided_core::vocab::openai_special_tokens;
use guided_core::{Error, Vocabulary};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString, PyTuple};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use guided_core::index::TokenIndex;
use guided_core::slice::TokenTries;

/// Token id -> bytes for one tokenizer, with its end-of-sequence ids and the model's logit width.
#[pyclass(module = "guided._lib", name = "Vocabulary", frozen)]
pub struct PyVocabulary {
    pub(crate) inner: Arc<Vocabulary>,
    /// The token tries every index over this vocabulary walks, built on first use.
    tries: OnceLock<Arc<TokenTries>>,
}

fn vocab_error(py: Python<'_>, message: String) -> PyErr {
    to_py(py, Error::Vocabulary(message))
}

/// One token id from a Python object.
fn to_id(py: Python<'_>, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u32> {
    if obj.is_instance_of::<pyo3::types::PyBool>() || !obj.is_instance_of::<pyo3::types::PyInt>() {
        return Err(vocab_error(
            py,
            format!("{what} must be an int, got {}", type_name(obj)),
        ));
    }
    match obj.extract::<i64>() {
        Ok(v) if (0..=u32::MAX as i64).contains(&v) => Ok(v as u32),
        _ => Err(vocab_error(py, format!("{what} {obj} is out of range"))),
    }
}

/// EOS ids: `None` (let the loader infer them), one int, or an iterable of ints.
fn eos_ids(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u32>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if obj.is_instance_of::<pyo3::types::PyInt>() {
        return Ok(Some(vec![to_id(py, obj, "eos token id")?]));
    }
    let iter = obj.try_iter().map_err(|_| {
        vocab_error(
            py,
            format!(
                "eos_token_ids must be an int or an iterable of ints, got {}",
                type_name(obj)
            ),
        )
    })?;
    iter.map(|item| to_id(py, &item?, "eos token id"))
        .collect::<PyResult<Vec<u32>>>()
        .map(Some)
}

fn size(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
    match obj.filter(|o| !o.is_none()) {
        None => Ok(None),
        Some(o) => Ok(Some(to_id(py, o, "vocab_size")? as usize)),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}

/// A file path from `str` or `os.PathLike` (any name the OS allows, not only UTF-8 ones).
fn fs_path(py: Python<'_>, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PathBuf> {
    if obj.is_instance_of::<PyBytes>() {
        return Err(vocab_error(
            py,
            format!("{what} must be a str path, not bytes"),
        ));
    }
    obj.extract::<PathBuf>().map_err(|_| {
        vocab_error(
            py,
            format!(
                "{what} must be a str or os.PathLike, got {}",
                type_name(obj)
            ),
        )
    })
}

/// Largest tokenizer file read by default. Real ones are tens of megabytes (a 256k-token
/// `tokenizer.json` with its merges is about 35 MB); a file far past that is refused before a byte
/// of it is read, rather than held whole in memory on its way to a parse error.
const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 20;

fn read_text(path: &Path, what: &str, max_bytes: u64) -> Result<String, Error> {
    let cannot = |e: std::io::Error| {
        Error::Vocabulary(format!("cannot read {what} {}: {e}", path.display()))
    };
    let len = std::fs::metadata(path).map_err(cannot)?.len();
    if len > max_bytes {
        return Err(Error::SizeLimit {
            limit: "max_file_bytes".into(),
            value: len,
            maximum: max_bytes,
        });
    }
    let data = std::fs::read(path).map_err(cannot)?;
    String::from_utf8(data).map_err(|e| {
        Error::Vocabulary(format!(
            "{what} {} is not UTF-8 text (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

impl PyVocabulary {
    fn wrap(v: Vocabulary) -> Self {
        PyVocabulary {
            inner: Arc::new(v),
            tries: OnceLock::new(),
        }
    }

    /// The token tries, built once per vocabulary (about a hundred milliseconds at 200k tokens)
    /// and shared by every index over it.
    pub(crate) fn tries(&self) -> Result<Arc<TokenTries>, Error> {
        if let Some(t) = self.tries.get() {
            return Ok(Arc::clone(t));
        }
        let built = Arc::new(TokenIndex::tries_for(&self.inner)?);
        // Two threads may race to build; both results are equal, and the first one stays.
        Ok(Arc::clone(self.tries.get_or_init(|| built)))
    }
}

#[pymethods]
impl PyVocabulary {
    /// Builds a vocabulary from each token's bytes, in id order (`None`: never appears in text).
    #[new]
    #[pyo3(signature = (tokens, *, eos_token_ids = None, vocab_size = None))]
    fn py_new(
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        eos_token_ids: Option<&Bound<'_, PyAny>>,
        vocab_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        if tokens.is_instance_of::<PyString>() || tokens.is_instance_of::<PyBytes>() {
            return Err(vocab_error(
                py,
                "tokens must be a sequence of bytes (or None), one per token id, not a single \
                 string"
                    .into(),
            ));
        }
        let iter = tokens.try_iter().map_err(|_| {
            vocab_error(
                py,
                format!(
                    "tokens must be a sequence of bytes or None, got {}",
                    type_name(tokens)
                ),
            )
        })?;
        let mut owned: Vec<Option<Vec<u8>>> = Vec::new();
        for (id, item) in iter.enumerate() {
            let item = item?;
            let token = if item.is_none() {
                None
            } else if let Ok(b) = item.cast::<PyBytes>() {
                Some(b.as_bytes().to_vec())
            } else if let Ok(b) = item.cast::<PyByteArray>() {
                Some(b.to_vec())
            } else if item.is_instance_of::<PyString>() {
                return Err(vocab_error(
                    py,
                    format!(
                        "token {id} is a str; tokens must be bytes. Encode plain text with \
                         .encode(), and load tokenizer vocabularies (whose strings are spelled \
                         in the tokenizer's own alphabet, like 'Ġthe') with \
                         Vocabulary.from_huggingface or from_tokenizer_json"
                    ),
                ));
            } else {
                return Err(vocab_error(
                    py,
                    format!("token {id} must be bytes or None, got {}", type_name(&item)),
                ));
            };
            owned.push(token);
        }
        let eos = eos_ids(py, eos_token_ids)?.unwrap_or_default();
        let size = size(py, vocab_size)?;
        guard(py, || Vocabulary::new(owned, eos, size)).map(Self::wrap)
    }

    /// Reads a Hugging Face `tokenizer.json`: a path if it names an existing file, else JSON text.
    /// A file larger than `max_file_bytes` is refused with `SizeLimitError` before it is read.
    #[staticmethod]
    #[pyo3(signature = (path_or_text, *, eos_token_ids = None, vocab_size = None, max_file_bytes = DEFAULT_MAX_FILE_BYTES))]
    fn from_tokenizer_json(
        py: Python<'_>,
        path_or_text: &Bound<'_, PyAny>,
        eos_token_ids: Option<&Bound<'_, PyAny>>,
        vocab_size: Option<&Bound<'_, PyAny>>,
        max_file_bytes: u64,
    ) -> PyResult<Self> {
        enum Source {
            Path(PathBuf),
            Text(String),
        }
        let text = path_or_text
            .cast::<PyString>()
            .ok()
            .and_then(|s| s.to_cow().ok().map(|c| c.into_owned()));
        let source = if let Some(s) = text {
            // A JSON text is never a short path, and a huge string is never a file name; skip the
            // file-system call for the texts from_huggingface passes.
            let looks_like_json = s.trim_start().starts_with('{');
            if !looks_like_json && Path::new(&s).is_file() {
                Source::Path(PathBuf::from(s))
            } else if looks_like_json {
                Source::Text(s)
            } else {
                return Err(vocab_error(
                    py,
                    format!(
                        "{:?} is neither an existing file nor tokenizer.json text",
                        s.chars().take(200).collect::<String>()
                    ),
                ));
            }
        } else {
            Source::Path(fs_path(py, path_or_text, "path_or_text")?)
        };
        let eos = eos_ids(py, eos_token_ids)?;
        let size = size(py, vocab_size)?;
        guard_detached(py, move || {
            let text = match source {
                Source::Path(p) => read_text(&p, "tokenizer.json file", max_file_bytes)?,
                Source::Text(t) => t,
            };
            Vocabulary::from_tokenizer_json(&text, eos, size)
        })
        .map(Self::wrap)
    }

    /// Reads a tiktoken rank file (`base64 rank` per line); a file larger than `max_file_bytes`
    /// is refused with `SizeLimitError` before it is read.
    ///
    /// Without `special_tokens`, a file named after one of OpenAI's encodings (`o200k_base`,
    /// `cl100k_base`, `p50k_base`, `r50k_base`) gets that encoding's special tokens.
    #[staticmethod]
    #[pyo3(signature = (path, *, special_tokens = None, eos_token_ids = None, vocab_size = None, max_file_bytes = DEFAULT_MAX_FILE_BYTES))]
    fn from_tiktoken(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        special_tokens: Option<&Bound<'_, PyAny>>,
        eos_token_ids: Option<&Bound<'_, PyAny>>,
        vocab_size: Option<&Bound<'_, PyAny>>,
        max_file_bytes: u64,
    ) -> PyResult<Self> {
        let path = fs_path(py, path, "path")?;
        let specials: Vec<(String, u32)> = match special_tokens.filter(|s| !s.is_none()) {
            Some(obj) => {
                let dict = obj.cast::<PyDict>().map_err(|_| {
                    vocab_error(
                        py,
                        format!(
                            "special_tokens must be a dict of name -> id, got {}",
                            type_name(obj)
                        ),
                    )
                })?;
                let mut out = Vec::with_capacity(dict.len());
                for (name, id) in dict.iter() {
                    let name = name.cast::<PyString>().map_err(|_| {
                        vocab_error(
                            py,
                            format!("special token names must be str, got {}", type_name(&name)),
                        )
                    })?;
                    let name = name.to_cow()?.into_owned();
                    let id = to_id(py, &id, &format!("special token {name:?} id"))?;
                    out.push((name, id));
                }
                out
            }
            None => path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(openai_special_tokens)
                .map(|list| list.iter().map(|(n, i)| (n.to_string(), *i)).collect())
                .unwrap_or_default(),
        };
        let eos = eos_ids(py, eos_token_ids)?;
        let size = size(py, vocab_size)?;
        guard_detached(py, move || {
            let text = read_text(&path, "tiktoken file", max_file_bytes)?;
            Vocabulary::from_tiktoken(&text, &specials, eos, size)
        })
        .map(Self::wrap)
    }

    /// From a transformers tokenizer or a `tokenizers.Tokenizer` (see `guided._vocab`).
    #[staticmethod]
    #[pyo3(signature = (tokenizer, *, eos_token_ids = None, vocab_size = None))]
    fn from_huggingface<'py>(
        py: Python<'py>,
        tokenizer: &Bound<'py, PyAny>,
        eos_token_ids: Option<&Bound<'py, PyAny>>,
        vocab_size: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        delegate(py, "from_huggingface", tokenizer, eos_token_ids, vocab_size)
    }

    /// From a SentencePiece `.model` file (path) or a loaded `SentencePieceProcessor`.
    #[staticmethod]
    #[pyo3(signature = (model, *, eos_token_ids = None, vocab_size = None))]
    fn from_sentencepiece<'py>(
        py: Python<'py>,
        model: &Bound<'py, PyAny>,
        eos_token_ids: Option<&Bound<'py, PyAny>>,
        vocab_size: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        delegate(py, "from_sentencepiece", model, eos_token_ids, vocab_size)
    }

    /// Reads what `to_bytes` wrote.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Self> {
        guard(py, || Vocabulary::from_bytes(data)).map(Self::wrap)
    }

    /// A stable binary form of this vocabulary.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_bytes())
    }

    /// Number of token ids the tokenizer defines.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The model's logit width.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    /// The ids that end a sequence.
    #[getter]
    fn eos_token_ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.eos_token_ids())
    }

    /// The bytes token `token_id` adds to the text, or None.
    fn token_bytes<'py>(
        &self,
        py: Python<'py>,
        token_id: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let in_range = token_id
            .extract::<i64>()
            .ok()
            .filter(|&t| t >= 0 && (t as u64) < self.inner.vocab_size() as u64);
        let Some(id) = in_range else {
            return Err(invalid_token(py, token_id, self.inner.vocab_size()));
        };
        Ok(self
            .inner
            .token_bytes(id as u32)
            .map(|b| PyBytes::new(py, b)))
    }

    /// Bytes of memory this vocabulary holds.
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// SHA-256 of `to_bytes()`, in hex.
    #[getter]
    fn fingerprint(&self) -> String {
        self.inner
            .fingerprint()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn __eq__(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) || *self.inner == *other.inner
    }

    fn __hash__(&self) -> u64 {
        let f = self.inner.fingerprint();
        u64::from_le_bytes([f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]])
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let py = slf.py();
        let from_bytes = slf.get_type().getattr("from_bytes")?;
        Ok((from_bytes, (slf.get().to_bytes(py),)))
    }

    fn __repr__(&self) -> String {
        let eos = self.inner.eos_token_ids();
        let eos = match eos {
            [one] => format!("({one},)"),
            _ => format!(
                "({})",
                eos.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!(
            "Vocabulary(len={}, vocab_size={}, eos_token_ids={eos})",
            self.inner.len(),
            self.inner.vocab_size()
        )
    }
}

fn delegate<'py>(
    py: Python<'py>,
    name: &str,
    source: &Bound<'py, PyAny>,
    eos_token_ids: Option<&Bound<'py, PyAny>>,
    vocab_size: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let kwargs = PyDict::new(py);
    kwargs.set_item("eos_token_ids", eos_token_ids)?;
    kwargs.set_item("vocab_size", vocab_size)?;
    py.import("guided._vocab")?
        .getattr(name)?
        .call((source,), Some(&kwargs))
}

fn invalid_token(py: Python<'_>, token: &Bound<'_, PyAny>, vocab_size: usize) -> PyErr {
    let message = format!("token id {token} is out of range for vocab_size {vocab_size}");
    let built = (|| -> PyResult<PyErr> {
        let cls = py.import("guided._errors")?.getattr("InvalidTokenError")?;
        let kwargs = PyDict::new(py);
        if let Ok(t) = token.extract::<i64>() {
            kwargs.set_item("token", t)?;
        }
        Ok(PyErr::from_value(
            cls.call((message.clone(),), Some(&kwargs))?,
        ))
    })();
    built.unwrap_or_else(|e| e)
}
