//! Token vocabularies: what each token id spells, in bytes.
//!
//! A constraint is an automaton over bytes, so the only thing it needs to know about a tokenizer is
//! the byte string every token id stands for, which ids end a sequence, and how wide the model's
//! logit vector is. This module holds exactly that, and the rules that recover those bytes from the
//! formats tokenizers ship in.
//!
//! Recovering the bytes is the subtle part. Tokenizers store tokens as *text in an encoding of their
//! own*: byte-level BPE (GPT-2, Llama-3, Qwen) spells each byte as a printable code point (`Ġ` is a
//! space), SentencePiece spells a space as `▁` and a raw byte as the six-character piece `<0x0A>`,
//! tiktoken stores base64. None of those spellings is what the model emits into the text, and many
//! tokens are not valid UTF-8 on their own: a token may end halfway through a multi-byte character.
//! The loaders therefore never go through `str`; they undo each format's spelling straight to raw
//! bytes (`tokenizer_json` for Hugging Face `tokenizer.json`, `tiktoken` for `.tiktoken` rank
//! files).
//!
//! Tokens that never appear in constrained text (special and control tokens such as `<s>` or
//! `<|im_end|>`, ids the tokenizer leaves unassigned, tokens that decode to nothing) have no bytes:
//! [`Vocabulary::token_bytes`] returns `None` for them and a constraint never allows them as text.
//! End-of-sequence ids are always such tokens; a constraint allows them only where the text may end.
//! The model's `vocab_size` may exceed the tokenizer's length (embedding matrices are padded to a
//! multiple of 64 or 128); the extra ids have no bytes either.
//!
//! Storage is one contiguous byte buffer plus one `u32` offset per token, about 12 bytes per token
//! rather than the 40 or so a `Vec<Option<Vec<u8>>>` costs. For a 200k-token vocabulary that is
//! 2.3 MB instead of 9, in two allocations, and walking the vocabulary touches memory in order. An
//! empty span means "no bytes", which is why an empty token and a special token are the same thing
//! here: neither can ever advance a constraint.
//!
//! A vocabulary serializes to a small, stable binary format ([`Vocabulary::to_bytes`]) used for
//! pickling, and its SHA-256 ([`Vocabulary::fingerprint`]) keys on-disk caches of compiled indexes.

mod tiktoken;
mod tokenizer_json;

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::fmt;
use std::sync::OnceLock;

pub use tiktoken::openai_special_tokens;

/// The largest token id count (and model `vocab_size`) a vocabulary may have. Real vocabularies are
/// below 300k; the bound keeps a file that claims an id of four billion from allocating gigabytes.
pub const MAX_VOCAB_SIZE: usize = 1 << 24;

/// Names of special tokens taken as end-of-sequence when a loader is not told the EOS ids, in the
/// order they are reported: `</s>` (Llama-2, Mistral, T5), `<|endoftext|>` (GPT-2, NeoX, Qwen,
/// OpenAI encodings), `<|im_end|>` (ChatML), `<|end_of_text|>`, `<|eot_id|>` and `<|eom_id|>`
/// (Llama-3), `<eos>` and `<end_of_turn>` (Gemma), `<|end|>` (Phi-3), `<|return|>` and `<|call|>`
/// (gpt-oss). A chat model stops on any of its end markers, so every one present is reported.
pub const EOS_TOKEN_NAMES: &[&str] = &[
    "</s>",
    "<|endoftext|>",
    "<|im_end|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<eos>",
    "<end_of_turn>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
];

const MAGIC: &[u8; 8] = b"GDVOCAB\0";
const FORMAT_VERSION: u32 = 1;

/// Token id -> bytes for one tokenizer, with its end-of-sequence ids and the model's logit width.
///
/// Immutable once built; cheap to share behind an `Arc`.
#[derive(Clone)]
pub struct Vocabulary {
    /// Every token's bytes, back to back, in id order.
    bytes: Vec<u8>,
    /// `offsets[i]..offsets[i + 1]` is token `i`'s span in `bytes`; an empty span means no bytes.
    offsets: Vec<u32>,
    eos_token_ids: Vec<u32>,
    vocab_size: usize,
    fingerprint: OnceLock<[u8; 32]>,
}

impl Vocabulary {
    /// A vocabulary from each token's bytes, in id order (`None`: never appears in text).
    ///
    /// `vocab_size` defaults to the number of tokens and may exceed it. End-of-sequence ids must be
    /// below `vocab_size`; their bytes, if any were given, are dropped, because an EOS token ends the
    /// text instead of adding to it. Duplicate EOS ids are kept once, in first-seen order.
    pub fn new<I, T>(tokens: I, eos_token_ids: Vec<u32>, vocab_size: Option<usize>) -> Result<Self>
    where
        I: IntoIterator<Item = Option<T>>,
        T: AsRef<[u8]>,
    {
        let mut slots = Slots::default();
        for (id, token) in tokens.into_iter().enumerate() {
            if id >= MAX_VOCAB_SIZE {
                return Err(too_many_ids(id));
            }
            // invariant: id < MAX_VOCAB_SIZE < u32::MAX.
            slots.set(id as u32, token.as_ref().map(AsRef::as_ref))?;
        }
        slots.finish(eos_token_ids, vocab_size)
    }

    /// Reads a Hugging Face `tokenizer.json` (the text, not a path).
    ///
    /// Byte-level BPE, SentencePiece-style (`▁`, `<0xNN>` byte fallback) and Unigram tokenizers are
    /// understood through their `decoder` (see the `tokenizer_json` module for the exact rules).
    /// Special added tokens have no bytes. When `eos_token_ids` is `None`, the special tokens named
    /// in [`EOS_TOKEN_NAMES`] are taken (or, if no added token is marked special, model tokens with
    /// those names).
    pub fn from_tokenizer_json(
        text: &str,
        eos_token_ids: Option<Vec<u32>>,
        vocab_size: Option<usize>,
    ) -> Result<Self> {
        tokenizer_json::load(text, eos_token_ids, vocab_size)
    }

    /// Reads a tiktoken rank file (`base64 rank` per line, the text, not a path).
    ///
    /// `special_tokens` (name, id) have no bytes and ids no line assigns have none either. When
    /// `eos_token_ids` is `None`, the special tokens named in [`EOS_TOKEN_NAMES`] are taken.
    pub fn from_tiktoken(
        text: &str,
        special_tokens: &[(String, u32)],
        eos_token_ids: Option<Vec<u32>>,
        vocab_size: Option<usize>,
    ) -> Result<Self> {
        tiktoken::load(text, special_tokens, eos_token_ids, vocab_size)
    }

    /// Number of token ids the tokenizer defines (padding up to `vocab_size` excluded).
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether the tokenizer defines no token ids at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The model's logit width: valid token ids are `0..vocab_size`.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The ids that end a sequence.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }

    /// Whether `id` ends a sequence.
    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_token_ids.contains(&id)
    }

    /// The bytes token `id` adds to the text; `None` for special, unassigned, padding and
    /// out-of-range ids.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        if i >= self.len() {
            return None;
        }
        let (start, end) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        (start < end).then(|| &self.bytes[start..end])
    }

    /// Every tokenizer id's bytes in id order (`len()` items).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Option<&[u8]>> + '_ {
        self.offsets.windows(2).map(|w| {
            let (start, end) = (w[0] as usize, w[1] as usize);
            (start < end).then(|| &self.bytes[start..end])
        })
    }

    /// The ids that have bytes, with their bytes, in id order.
    pub fn text_tokens(&self) -> impl Iterator<Item = (u32, &[u8])> + '_ {
        // invariant: len() <= MAX_VOCAB_SIZE, so every index fits in u32.
        self.iter()
            .enumerate()
            .filter_map(|(id, b)| b.map(|b| (id as u32, b)))
    }

    /// The length of the longest token, in bytes.
    pub fn max_token_len(&self) -> usize {
        self.offsets
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .max()
            .unwrap_or(0)
    }

    /// Bytes of memory this vocabulary holds.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.bytes.capacity()
            + self.offsets.capacity() * 4
            + self.eos_token_ids.capacity() * 4
    }

    /// A stable binary form (see [`Vocabulary::from_bytes`]); the same vocabulary always gives the
    /// same bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.bytes.len() + 4 * self.offsets.len());
        self.write(|chunk| out.extend_from_slice(chunk));
        out
    }

    /// Reads what [`Vocabulary::to_bytes`] wrote, validating every field.
    pub fn from_bytes(data: &[u8]) -> Result<Self> {
        let mut r = Reader { data, at: 0 };
        if r.take(8)? != MAGIC {
            return Err(Error::Vocabulary(
                "serialized vocabulary: bad magic bytes (not a guided vocabulary)".into(),
            ));
        }
        let version = r.u32()?;
        if version != FORMAT_VERSION {
            return Err(Error::Vocabulary(format!(
                "serialized vocabulary: format version {version} is not supported (expected {FORMAT_VERSION})"
            )));
        }
        let vocab_size = r.u64()?;
        let n_tokens = r.u64()?;
        let n_eos = r.u64()?;
        let n_bytes = r.u64()?;
        if n_tokens > MAX_VOCAB_SIZE as u64 || vocab_size > MAX_VOCAB_SIZE as u64 {
            return Err(Error::Vocabulary(format!(
                "serialized vocabulary: {n_tokens} tokens / vocab_size {vocab_size} exceed the maximum of {MAX_VOCAB_SIZE}"
            )));
        }
        if n_eos > vocab_size || n_bytes > u32::MAX as u64 {
            return Err(Error::Vocabulary(
                "serialized vocabulary: inconsistent header".into(),
            ));
        }
        let eos: Vec<u32> = r.u32s(n_eos as usize)?;
        let offsets: Vec<u32> = r.u32s(n_tokens as usize + 1)?;
        let bytes = r.take(n_bytes as usize)?.to_vec();
        if r.at != data.len() {
            return Err(Error::Vocabulary(format!(
                "serialized vocabulary: {} trailing bytes",
                data.len() - r.at
            )));
        }
        if offsets[0] != 0
            || offsets.windows(2).any(|w| w[0] > w[1])
            || offsets[n_tokens as usize] as u64 != n_bytes
        {
            return Err(Error::Vocabulary(
                "serialized vocabulary: token offsets are not increasing from 0 to the byte count"
                    .into(),
            ));
        }
        let v = Vocabulary {
            bytes,
            offsets,
            eos_token_ids: Vec::new(),
            vocab_size: vocab_size as usize,
            fingerprint: OnceLock::new(),
        };
        v.with_eos(eos, true)
    }

    /// SHA-256 of [`Vocabulary::to_bytes`]: equal fingerprints mean equal vocabularies.
    pub fn fingerprint(&self) -> [u8; 32] {
        *self.fingerprint.get_or_init(|| {
            let mut h = Sha256::new();
            self.write(|chunk| h.update(chunk));
            h.finalize().into()
        })
    }

    fn write(&self, mut sink: impl FnMut(&[u8])) {
        sink(MAGIC);
        sink(&FORMAT_VERSION.to_le_bytes());
        for n in [
            self.vocab_size,
            self.len(),
            self.eos_token_ids.len(),
            self.bytes.len(),
        ] {
            sink(&(n as u64).to_le_bytes());
        }
        let mut words = Vec::with_capacity(4 * (self.eos_token_ids.len() + self.offsets.len()));
        for w in self.eos_token_ids.iter().chain(&self.offsets) {
            words.extend_from_slice(&w.to_le_bytes());
        }
        sink(&words);
        sink(&self.bytes);
    }

    /// Checks `vocab_size` against the tokens and installs the EOS ids (dropping their bytes).
    /// `strict` refuses EOS ids that carry bytes or repeat, as a deserialized vocabulary never has.
    fn with_eos(mut self, eos_token_ids: Vec<u32>, strict: bool) -> Result<Self> {
        if self.vocab_size == 0 {
            return Err(Error::Vocabulary(
                "the vocabulary is empty: vocab_size must be at least 1".into(),
            ));
        }
        if self.vocab_size > MAX_VOCAB_SIZE {
            return Err(Error::Vocabulary(format!(
                "vocab_size {} exceeds the maximum of {MAX_VOCAB_SIZE}",
                self.vocab_size
            )));
        }
        if self.vocab_size < self.len() {
            return Err(Error::Vocabulary(format!(
                "vocab_size {} is smaller than the tokenizer's {} token ids",
                self.vocab_size,
                self.len()
            )));
        }
        let mut seen = HashSet::new();
        let mut eos = Vec::with_capacity(eos_token_ids.len());
        for id in eos_token_ids {
            if id as usize >= self.vocab_size {
                return Err(Error::Vocabulary(format!(
                    "eos token id {id} is out of range for vocab_size {}",
                    self.vocab_size
                )));
            }
            if seen.insert(id) {
                eos.push(id);
            } else if strict {
                return Err(Error::Vocabulary(format!(
                    "serialized vocabulary: eos token id {id} is listed twice"
                )));
            }
        }
        let carrying: Vec<u32> = eos
            .iter()
            .copied()
            .filter(|&id| self.token_bytes(id).is_some())
            .collect();
        if !carrying.is_empty() {
            if strict {
                return Err(Error::Vocabulary(format!(
                    "serialized vocabulary: eos token id {} has bytes",
                    carrying[0]
                )));
            }
            self = self.without_bytes(&carrying);
        }
        self.eos_token_ids = eos;
        Ok(self)
    }

    /// The same vocabulary with the given ids' bytes removed.
    fn without_bytes(self, ids: &[u32]) -> Self {
        let mut slots = Slots::default();
        for (id, token) in self.iter().enumerate() {
            // invariant: ids come from a valid vocabulary, so they fit in u32 and are new.
            let token = token.filter(|_| !ids.contains(&(id as u32)));
            let _ = slots.set(id as u32, token);
        }
        let (bytes, offsets) = slots.compact();
        Vocabulary {
            bytes,
            offsets,
            ..self
        }
    }
}

impl PartialEq for Vocabulary {
    fn eq(&self, other: &Self) -> bool {
        self.vocab_size == other.vocab_size
            && self.eos_token_ids == other.eos_token_ids
            && self.offsets == other.offsets
            && self.bytes == other.bytes
    }
}

impl Eq for Vocabulary {}

impl fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vocabulary")
            .field("len", &self.len())
            .field("vocab_size", &self.vocab_size)
            .field("eos_token_ids", &self.eos_token_ids)
            .field("text_tokens", &self.text_tokens().count())
            .finish()
    }
}

fn too_many_ids(id: usize) -> Error {
    Error::Vocabulary(format!(
        "token id {id} is too large: a vocabulary holds at most {MAX_VOCAB_SIZE} ids"
    ))
}

/// Token bytes collected by id in any order, as loaders find them, then compacted in id order.
#[derive(Default)]
pub(crate) struct Slots {
    scratch: Vec<u8>,
    /// Span of each id in `scratch`; an empty span for ids never set or set to no bytes.
    spans: Vec<(u32, u32)>,
}

impl Slots {
    /// Sets token `id` (which the caller has checked against [`MAX_VOCAB_SIZE`]).
    pub(crate) fn set(&mut self, id: u32, bytes: Option<&[u8]>) -> Result<()> {
        let i = id as usize;
        self.reserve_ids(i + 1);
        self.spans[i] = match bytes {
            Some(b) if !b.is_empty() => {
                let start = self.scratch.len();
                let end = start + b.len();
                if end > u32::MAX as usize {
                    return Err(Error::Vocabulary(
                        "the tokens hold more than 4 GiB of bytes".into(),
                    ));
                }
                self.scratch.extend_from_slice(b);
                (start as u32, end as u32)
            }
            _ => (0, 0),
        };
        Ok(())
    }

    /// Makes sure ids `0..n` exist (unassigned ones have no bytes).
    pub(crate) fn reserve_ids(&mut self, n: usize) {
        if n > self.spans.len() {
            self.spans.resize(n, (0, 0));
        }
    }

    /// The bytes of token `id`, if it has any.
    pub(crate) fn get(&self, id: u32) -> Option<&[u8]> {
        let (s, e) = *self.spans.get(id as usize)?;
        (s < e).then(|| &self.scratch[s as usize..e as usize])
    }

    fn compact(self) -> (Vec<u8>, Vec<u32>) {
        let mut offsets = Vec::with_capacity(self.spans.len() + 1);
        offsets.push(0u32);
        let mut bytes = Vec::with_capacity(self.scratch.len());
        for &(s, e) in &self.spans {
            bytes.extend_from_slice(&self.scratch[s as usize..e as usize]);
            // invariant: at most every scratch byte once, and `set` keeps that below u32::MAX.
            offsets.push(bytes.len() as u32);
        }
        (bytes, offsets)
    }

    /// The vocabulary: ids `0..` as set, then `vocab_size` and EOS validation.
    pub(crate) fn finish(
        self,
        eos_token_ids: Vec<u32>,
        vocab_size: Option<usize>,
    ) -> Result<Vocabulary> {
        let len = self.spans.len();
        let (bytes, offsets) = self.compact();
        Vocabulary {
            bytes,
            offsets,
            eos_token_ids: Vec::new(),
            vocab_size: vocab_size.unwrap_or(len),
            fingerprint: OnceLock::new(),
        }
        .with_eos(eos_token_ids, false)
    }
}

/// Bounds-checked little-endian reads for [`Vocabulary::from_bytes`].
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| {
                Error::Vocabulary(format!(
                    "serialized vocabulary: truncated ({} bytes, needed more at offset {})",
                    self.data.len(),
                    self.at
                ))
            })?;
        let out = &self.data[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }

    fn u32s(&mut self, n: usize) -> Result<Vec<u32>> {
        let len = n.checked_mul(4).ok_or_else(|| {
            Error::Vocabulary("serialized vocabulary: inconsistent header".into())
        })?;
        Ok(self
            .take(len)?
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

/// The EOS ids implied by special token names: those in [`EOS_TOKEN_NAMES`], in that order.
pub(crate) fn infer_eos<'a>(specials: impl IntoIterator<Item = (&'a str, u32)>) -> Vec<u32> {
    let mut found: Vec<(usize, u32)> = specials
        .into_iter()
        .filter_map(|(name, id)| {
            EOS_TOKEN_NAMES
                .iter()
                .position(|n| *n == name)
                .map(|rank| (rank, id))
        })
        .collect();
    found.sort_unstable();
    found.dedup_by_key(|(_, id)| *id);
    found.into_iter().map(|(_, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[Option<&[u8]>], eos: &[u32], size: Option<usize>) -> Result<Vocabulary> {
        Vocabulary::new(tokens.iter().copied(), eos.to_vec(), size)
    }

    #[test]
    fn stores_tokens_in_id_order() {
        let v = vocab(&[Some(b"a"), None, Some(b"\xe4\xb8"), Some(b"")], &[], None).unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v.vocab_size(), 4);
        assert_eq!(v.token_bytes(0), Some(&b"a"[..]));
        assert_eq!(v.token_bytes(1), None);
        assert_eq!(v.token_bytes(2), Some(&b"\xe4\xb8"[..]));
        // An empty token can never advance a constraint: it reads as no bytes.
        assert_eq!(v.token_bytes(3), None);
        assert_eq!(v.token_bytes(4), None);
        assert_eq!(v.token_bytes(u32::MAX), None);
        assert_eq!(
            v.iter().collect::<Vec<_>>(),
            vec![Some(&b"a"[..]), None, Some(&b"\xe4\xb8"[..]), None]
        );
        assert_eq!(
            v.text_tokens().map(|(id, _)| id).collect::<Vec<_>>(),
            [0, 2]
        );
        assert_eq!(v.max_token_len(), 2);
    }

    #[test]
    fn vocab_size_pads_and_is_checked() {
        let v = vocab(&[Some(b"a"), Some(b"b")], &[5], Some(8)).unwrap();
        assert_eq!((v.len(), v.vocab_size()), (2, 8));
        assert_eq!(v.token_bytes(5), None);
        let err = vocab(&[Some(b"a"), Some(b"b")], &[], Some(1)).unwrap_err();
        assert!(
            err.to_string().contains("smaller than the tokenizer's 2"),
            "{err}"
        );
        let err = vocab(&[], &[], None).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
        let err = vocab(&[Some(b"a")], &[], Some(MAX_VOCAB_SIZE + 1)).unwrap_err();
        assert!(err.to_string().contains("exceeds the maximum"), "{err}");
    }

    #[test]
    fn eos_ids_are_checked_deduplicated_and_have_no_bytes() {
        let v = vocab(&[Some(b"a"), Some(b"</s>"), Some(b"c")], &[1, 2, 1], None).unwrap();
        assert_eq!(v.eos_token_ids(), &[1, 2]);
        assert_eq!(v.token_bytes(0), Some(&b"a"[..]));
        assert_eq!(v.token_bytes(1), None);
        assert_eq!(v.token_bytes(2), None);
        assert!(v.is_eos(2) && !v.is_eos(0));
        let err = vocab(&[Some(b"a")], &[1], None).unwrap_err();
        assert_eq!(
            err,
            Error::Vocabulary("eos token id 1 is out of range for vocab_size 1".into())
        );
    }

    #[test]
    fn serialization_round_trips_and_fingerprints() {
        let v = vocab(&[Some(b"a"), None, Some(b"\xff\x00")], &[1], Some(10)).unwrap();
        let data = v.to_bytes();
        let w = Vocabulary::from_bytes(&data).unwrap();
        assert_eq!(v, w);
        assert_eq!(v.fingerprint(), w.fingerprint());
        assert_eq!(v.fingerprint(), <[u8; 32]>::from(Sha256::digest(&data)));
        let other = vocab(&[Some(b"a"), None, Some(b"\xff\x01")], &[1], Some(10)).unwrap();
        assert_ne!(v.fingerprint(), other.fingerprint());
        let wider = vocab(&[Some(b"a"), None, Some(b"\xff\x00")], &[1], Some(11)).unwrap();
        assert_ne!(v.fingerprint(), wider.fingerprint());
    }

    #[test]
    fn deserialization_refuses_every_corruption() {
        let v = vocab(&[Some(b"ab"), None, Some(b"c")], &[1], Some(4)).unwrap();
        let data = v.to_bytes();
        // Every truncation fails cleanly.
        for n in 0..data.len() {
            assert!(matches!(
                Vocabulary::from_bytes(&data[..n]),
                Err(Error::Vocabulary(_))
            ));
        }
        let mut extra = data.clone();
        extra.push(0);
        assert!(Vocabulary::from_bytes(&extra).is_err());
        // Flipping any single byte either fails or gives a different, still valid vocabulary.
        for i in 0..data.len() {
            let mut bad = data.clone();
            bad[i] ^= 0x41;
            if let Ok(w) = Vocabulary::from_bytes(&bad) {
                assert_ne!(w, v, "byte {i}");
                assert!(w.len() <= w.vocab_size());
            }
        }
        let mut bad = data.clone();
        bad[0] = b'X';
        let err = Vocabulary::from_bytes(&bad).unwrap_err();
        assert!(err.to_string().contains("magic"), "{err}");
    }

    #[test]
    fn infers_eos_in_name_order() {
        let ids = infer_eos([
            ("<|im_end|>", 7),
            ("<pad>", 1),
            ("<|endoftext|>", 3),
            ("</s>", 9),
        ]);
        assert_eq!(ids, [9, 3, 7]);
    }

    #[test]
    fn memory_is_compact() {
        let tokens: Vec<Option<Vec<u8>>> = (0..10_000u32)
            .map(|i| Some(i.to_string().into_bytes()))
            .collect();
        let v = Vocabulary::new(tokens, vec![], None).unwrap();
        let text: usize = v.text_tokens().map(|(_, b)| b.len()).sum();
        assert!(v.memory_bytes() < text + 4 * 10_001 + 256);
    }
}
