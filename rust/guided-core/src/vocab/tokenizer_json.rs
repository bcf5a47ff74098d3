//! Hugging Face `tokenizer.json` -> token bytes.
//!
//! A `tokenizer.json` stores each token as text in the model's own spelling, and says how to turn
//! that spelling back into output text in its `decoder`. That decoder is the authority: it is what
//! `tokenizers` runs when a model's ids are turned back into text, so applying it to one token at a
//! time gives exactly the bytes that token contributes. The decoders, per token:
//!
//! - `ByteLevel` (GPT-2, NeoX, Llama-3, Qwen): every character is one byte in GPT-2's
//!   `bytes_to_unicode` alphabet (printable Latin-1 stands for itself, the other 68 bytes for
//!   U+0100..U+0143, so `Ġ` is a space). Like `tokenizers`, a token with a character outside the
//!   alphabet (an added token such as a run of spaces) is taken as its own UTF-8 text.
//! - `Replace` with a string pattern (Llama-2 style `▁` -> space) and `Metaspace` (its replacement
//!   character -> space).
//! - `ByteFallback`: a token spelled `<0xNN>` is the single raw byte `NN`.
//! - `Strip`: removes leading/trailing copies of a character from each token; after a `Fuse` it
//!   trims the joined text instead (Llama-2 drops the first space of the output that way), which is
//!   a property of the whole sequence and not of any token, so it is not applied.
//! - `Fuse` joins the tokens; per token it changes nothing.
//! - `BPEDecoder` (CLIP, original GPT): the end-of-word suffix becomes a space.
//! - `WordPiece` and `CTC` join tokens with context-dependent rules (spaces between words but not
//!   before `##` pieces or punctuation, collapsing repeats), so no token has a byte string of its
//!   own: they are refused.
//!
//! The leading-space rules above (Strip after Fuse, Metaspace's `prepend_scheme`) only ever affect
//! the very first token of a decoded text; guided constrains text the model generates after a
//! prompt, where `▁the` is " the", as xgrammar and outlines-core also read it.
//!
//! Without a decoder the spelling is inferred from the pre-tokenizer (`ByteLevel`, `Metaspace`),
//! the normalizer (`Replace(" ", "▁")` undone) and the model's `byte_fallback` flag.
//!
//! Added tokens override the model's token at their id (as in `tokenizers`); special ones have no
//! bytes, others go through the same decoder, as `tokenizers` decodes them. Parsing uses typed serde
//! structures so the large `merges` list is skipped without building values; a 150k-token file
//! loads in tens of milliseconds.

use super::{infer_eos, Slots, Vocabulary, MAX_VOCAB_SIZE};
use crate::error::{Error, Result};
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;

#[derive(Deserialize)]
struct TokenizerFile {
    #[serde(default)]
    added_tokens: Vec<AddedToken>,
    #[serde(default)]
    normalizer: Option<Value>,
    #[serde(default)]
    pre_tokenizer: Option<Value>,
    #[serde(default)]
    decoder: Option<Value>,
    model: Model,
}

#[derive(Deserialize)]
struct AddedToken {
    id: u32,
    content: String,
    #[serde(default)]
    special: bool,
}

#[derive(Deserialize)]
struct Model {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    vocab: ModelVocab,
    #[serde(default)]
    byte_fallback: Option<bool>,
}

/// `model.vocab`: an object `{token: id}` (BPE, WordPiece, WordLevel) or a list of
/// `[piece, score]` whose position is the id (Unigram). Entries are kept in file order, duplicates
/// included, so that inconsistencies can be reported instead of silently resolved.
enum ModelVocab {
    Map(Vec<(String, u32)>),
    List(Vec<String>),
}

impl<'de> Deserialize<'de> for ModelVocab {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ModelVocab;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of token ids or a list of [piece, score] pairs")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<ModelVocab, A::Error> {
                let mut out = Vec::with_capacity(m.size_hint().unwrap_or(0));
                while let Some(entry) = m.next_entry::<String, u32>()? {
                    out.push(entry);
                }
                Ok(ModelVocab::Map(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> std::result::Result<ModelVocab, A::Error> {
                let mut out = Vec::with_capacity(s.size_hint().unwrap_or(0));
                while let Some((piece, _score)) = s.next_element::<(String, IgnoredAny)>()? {
                    out.push(piece);
                }
                Ok(ModelVocab::List(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// One per-token decoding step.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    ByteLevel,
    Replace {
        pattern: Vec<u8>,
        content: Vec<u8>,
    },
    ByteFallback,
    Strip {
        content: Vec<u8>,
        start: usize,
        stop: usize,
    },
}

/// GPT-2's `bytes_to_unicode`, reversed: the byte each alphabet character stands for, indexed by
/// code point (all of them are below U+0144).
fn byte_level_alphabet() -> [Option<u8>; 0x144] {
    let mut table = [None; 0x144];
    let mut extra = 0usize;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let code = if printable {
            b as usize
        } else {
            extra += 1;
            0xFF + extra
        };
        table[code] = Some(b);
    }
    table
}

struct Decoder {
    steps: Vec<Step>,
    alphabet: [Option<u8>; 0x144],
}

impl Decoder {
    /// The bytes `token` contributes to decoded text, written into `out`.
    fn decode(&self, token: &str, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(token.as_bytes());
        let mut scratch = Vec::new();
        for step in &self.steps {
            match step {
                Step::ByteLevel => {
                    // Only an earlier raw-byte step can leave invalid UTF-8 here; such bytes are
                    // no alphabet text, and `tokenizers` keeps a token it cannot map as it is.
                    let Ok(text) = std::str::from_utf8(out) else {
                        continue;
                    };
                    scratch.clear();
                    let mapped = text.chars().all(|c| {
                        match self.alphabet.get(c as usize).copied().flatten() {
                            Some(b) => {
                                scratch.push(b);
                                true
                            }
                            None => false,
                        }
                    });
                    if mapped {
                        std::mem::swap(out, &mut scratch);
                    }
                }
                Step::Replace { pattern, content } => {
                    if out.windows(pattern.len()).any(|w| w == &pattern[..]) {
                        scratch.clear();
                        let mut i = 0;
                        while i < out.len() {
                            if out[i..].starts_with(pattern) {
                                scratch.extend_from_slice(content);
                                i += pattern.len();
                            } else {
                                scratch.push(out[i]);
                                i += 1;
                            }
                        }
                        std::mem::swap(out, &mut scratch);
                    }
                }
                Step::ByteFallback => {
                    // Exactly `tokenizers`' test: six bytes, `<0x` .. `>`, two hex digits between.
                    if out.len() == 6 && out.starts_with(b"<0x") && out[5] == b'>' {
                        let hex = std::str::from_utf8(&out[3..5]).ok();
                        if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                            out.clear();
                            out.push(b);
                        }
                    }
                }
                Step::Strip {
                    content,
                    start,
                    stop,
                } => {
                    let mut lo = 0;
                    for _ in 0..*start {
                        if out[lo..].starts_with(content) {
                            lo += content.len();
                        } else {
                            break;
                        }
                    }
                    let mut hi = out.len();
                    for _ in 0..*stop {
                        if hi >= lo + content.len() && out[..hi].ends_with(content) {
                            hi -= content.len();
                        } else {
                            break;
                        }
                    }
                    out.truncate(hi);
                    out.drain(..lo);
                }
            }
        }
    }
}

fn kind(v: &Value) -> Option<&str> {
    v.get("type").and_then(Value::as_str)
}

fn string_field<'a>(v: &'a Value, what: &str, field: &str) -> Result<&'a str> {
    v.get(field).and_then(Value::as_str).ok_or_else(|| {
        Error::Vocabulary(format!(
            "tokenizer.json: {what} needs a string field {field:?}, found {}",
            v.get(field)
                .map_or("nothing".to_string(), |f| f.to_string())
        ))
    })
}

/// The pattern of a `Replace` step: `{"String": s}`; regex patterns are refused.
fn replace_pattern<'a>(v: &'a Value, what: &str) -> Result<&'a str> {
    let pattern = v.get("pattern");
    match pattern
        .and_then(|p| p.get("String"))
        .and_then(Value::as_str)
    {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(Error::Vocabulary(format!(
            "tokenizer.json: {what} Replace with pattern {} is not supported (only a non-empty \
             {{\"String\": ...}} pattern spells tokens one at a time)",
            pattern.map_or("null".to_string(), |p| p.to_string())
        ))),
    }
}

/// The per-token steps of a `decoder` value.
fn decoder_steps(v: &Value, steps: &mut Vec<Step>, fused: &mut bool) -> Result<()> {
    let Some(name) = kind(v) else {
        return Err(Error::Vocabulary(format!(
            "tokenizer.json: decoder without a \"type\": {}",
            truncated(v)
        )));
    };
    match name {
        "Sequence" => {
            let Some(list) = v.get("decoders").and_then(Value::as_array) else {
                return Err(Error::Vocabulary(
                    "tokenizer.json: Sequence decoder needs a \"decoders\" list".into(),
                ));
            };
            for d in list {
                decoder_steps(d, steps, fused)?;
            }
        }
        "ByteLevel" => steps.push(Step::ByteLevel),
        "Replace" => steps.push(Step::Replace {
            pattern: replace_pattern(v, "decoder")?.as_bytes().to_vec(),
            content: string_field(v, "Replace decoder", "content")?
                .as_bytes()
                .to_vec(),
        }),
        "Metaspace" => {
            let replacement = string_field(v, "Metaspace decoder", "replacement")?;
            if replacement.is_empty() {
                return Err(Error::Vocabulary(
                    "tokenizer.json: Metaspace decoder with an empty replacement".into(),
                ));
            }
            steps.push(Step::Replace {
                pattern: replacement.as_bytes().to_vec(),
                content: b" ".to_vec(),
            });
        }
        "ByteFallback" => {
            if *fused {
                return Err(Error::Vocabulary(
                    "tokenizer.json: a ByteFallback decoder after Fuse never sees single tokens; \
                     this decoder order is not supported"
                        .into(),
                ));
            }
            steps.push(Step::ByteFallback);
        }
        "Fuse" => *fused = true,
        "Strip" => {
            let content = string_field(v, "Strip decoder", "content")?;
            let count = |field: &str| v.get(field).and_then(Value::as_u64).unwrap_or(0) as usize;
            if !*fused && !content.is_empty() {
                steps.push(Step::Strip {
                    content: content.as_bytes().to_vec(),
                    start: count("start"),
                    stop: count("stop"),
                });
            }
        }
        "BPEDecoder" => {
            let suffix = v.get("suffix").and_then(Value::as_str).unwrap_or("</w>");
            if !suffix.is_empty() {
                steps.push(Step::Replace {
                    pattern: suffix.as_bytes().to_vec(),
                    content: b" ".to_vec(),
                });
            }
        }
        "WordPiece" | "CTC" => {
            return Err(Error::Vocabulary(format!(
                "tokenizer.json: the {name} decoder joins tokens with context-dependent rules, so \
                 its tokens have no byte strings of their own; build the Vocabulary from a list of \
                 token bytes instead"
            )))
        }
        other => {
            return Err(Error::Vocabulary(format!(
                "tokenizer.json: unknown decoder type {other:?} (supported: ByteLevel, Replace, \
                 Metaspace, ByteFallback, Fuse, Strip, BPEDecoder, Sequence)"
            )))
        }
    }
    Ok(())
}

/// Whether `v`, or a member of a `Sequence` in it, has type `name`; returns that member.
fn find<'a>(v: Option<&'a Value>, name: &str, list_field: &str) -> Option<&'a Value> {
    let v = v?;
    if kind(v) == Some(name) {
        return Some(v);
    }
    v.get(list_field)?
        .as_array()?
        .iter()
        .find_map(|m| find(Some(m), name, list_field))
}

/// Steps inferred when the file has no decoder.
fn inferred_steps(file: &TokenizerFile) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    let pre = file.pre_tokenizer.as_ref();
    if let Some(meta) = find(pre, "Metaspace", "pretokenizers") {
        let replacement = string_field(meta, "Metaspace pre-tokenizer", "replacement")?;
        if !replacement.is_empty() {
            steps.push(Step::Replace {
                pattern: replacement.as_bytes().to_vec(),
                content: b" ".to_vec(),
            });
        }
    }
    if let Some(rep) = find(file.normalizer.as_ref(), "Replace", "normalizers") {
        if replace_pattern(rep, "normalizer").ok() == Some(" ") {
            let content = string_field(rep, "Replace normalizer", "content")?;
            if !content.is_empty() {
                steps.push(Step::Replace {
                    pattern: content.as_bytes().to_vec(),
                    content: b" ".to_vec(),
                });
            }
        }
    }
    if file.model.byte_fallback == Some(true) {
        steps.push(Step::ByteFallback);
    }
    if find(pre, "ByteLevel", "pretokenizers").is_some() {
        steps.push(Step::ByteLevel);
    }
    Ok(steps)
}

fn truncated(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

fn check_id(id: u32, what: &str) -> Result<()> {
    if id as usize >= MAX_VOCAB_SIZE {
        return Err(Error::Vocabulary(format!(
            "tokenizer.json: {what} has id {id}, beyond the maximum vocabulary size {MAX_VOCAB_SIZE}"
        )));
    }
    Ok(())
}

pub(crate) fn load(
    text: &str,
    eos_token_ids: Option<Vec<u32>>,
    vocab_size: Option<usize>,
) -> Result<Vocabulary> {
    let file: TokenizerFile = serde_json::from_str(text)
        .map_err(|e| Error::Vocabulary(format!("tokenizer.json is not readable: {e}")))?;

    let steps = match &file.decoder {
        Some(d) => {
            let mut steps = Vec::new();
            decoder_steps(d, &mut steps, &mut false)?;
            steps
        }
        None => inferred_steps(&file)?,
    };
    let decoder = Decoder {
        steps,
        alphabet: byte_level_alphabet(),
    };

    let pieces: Vec<(&str, u32)> = match (&file.model.vocab, file.model.kind.as_deref()) {
        (ModelVocab::Map(map), None | Some("BPE" | "WordPiece" | "WordLevel")) => {
            map.iter().map(|(t, id)| (t.as_str(), *id)).collect()
        }
        (ModelVocab::List(list), None | Some("Unigram")) => {
            if list.len() > MAX_VOCAB_SIZE {
                return Err(super::too_many_ids(list.len()));
            }
            // invariant: list.len() <= MAX_VOCAB_SIZE, so positions fit in u32.
            list.iter()
                .enumerate()
                .map(|(id, t)| (t.as_str(), id as u32))
                .collect()
        }
        (_, Some(k @ ("BPE" | "WordPiece" | "WordLevel" | "Unigram"))) => {
            return Err(Error::Vocabulary(format!(
                "tokenizer.json: a {k} model's vocab must be {}",
                if k == "Unigram" {
                    "a list of [piece, score] pairs"
                } else {
                    "an object mapping tokens to ids"
                }
            )))
        }
        (_, Some(k)) => {
            return Err(Error::Vocabulary(format!(
                "tokenizer.json: unknown model type {k:?} (expected BPE, WordPiece, WordLevel or \
                 Unigram)"
            )))
        }
    };

    let max_id = pieces
        .iter()
        .map(|p| p.1)
        .chain(file.added_tokens.iter().map(|a| a.id))
        .max();
    let Some(max_id) = max_id else {
        return Err(Error::Vocabulary(
            "tokenizer.json: the model has no tokens".into(),
        ));
    };
    check_id(max_id, "a token")?;

    // Which model token holds each id, to report collisions by name.
    let mut owner: Vec<u32> = vec![u32::MAX; max_id as usize + 1];
    let mut seen: HashMap<&str, u32> = HashMap::with_capacity(pieces.len());
    let mut slots = Slots::default();
    // The tokenizer's length is its largest id + 1, even when the last ids are special.
    slots.reserve_ids(max_id as usize + 1);
    let mut buf = Vec::new();
    let unigram = matches!(file.model.vocab, ModelVocab::List(_));
    for (index, &(token, id)) in pieces.iter().enumerate() {
        if let Some(&(prev, _)) = pieces.get(owner[id as usize] as usize) {
            return Err(Error::Vocabulary(format!(
                "tokenizer.json: id {id} is given to both {prev:?} and {token:?} in model.vocab"
            )));
        }
        if !unigram {
            if let Some(prev) = seen.insert(token, id) {
                return Err(Error::Vocabulary(format!(
                    "tokenizer.json: token {token:?} appears twice in model.vocab (ids {prev} and {id})"
                )));
            }
        }
        // invariant: pieces.len() <= MAX_VOCAB_SIZE (ids are distinct and below it).
        owner[id as usize] = index as u32;
        decoder.decode(token, &mut buf);
        slots.set(id, Some(&buf))?;
    }

    let mut added: HashMap<u32, &AddedToken> = HashMap::new();
    for token in &file.added_tokens {
        if let Some(prev) = added.insert(token.id, token) {
            if prev.content != token.content || prev.special != token.special {
                return Err(Error::Vocabulary(format!(
                    "tokenizer.json: added tokens {:?} and {:?} share id {}",
                    prev.content, token.content, token.id
                )));
            }
        }
        if token.special {
            slots.set(token.id, None)?;
        } else {
            decoder.decode(&token.content, &mut buf);
            slots.set(token.id, Some(&buf))?;
        }
    }

    let eos = match eos_token_ids {
        Some(ids) => ids,
        None => {
            let specials = file
                .added_tokens
                .iter()
                .filter(|t| t.special)
                .map(|t| (t.content.as_str(), t.id));
            let mut ids = infer_eos(specials);
            if ids.is_empty() && !file.added_tokens.iter().any(|t| t.special) {
                ids = infer_eos(pieces.iter().copied());
            }
            ids
        }
    };
    slots.finish(eos, vocab_size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load_value(v: Value) -> Result<Vocabulary> {
        load(&v.to_string(), None, None)
    }

    fn bytes(v: &Vocabulary, id: u32) -> Option<Vec<u8>> {
        v.token_bytes(id).map(<[u8]>::to_vec)
    }

    fn byte_level(vocab: Value, added: Value) -> Value {
        json!({
            "added_tokens": added,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
            "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": vocab, "merges": ["Ġ t", "h e"]}
        })
    }

    #[test]
    fn byte_level_alphabet_is_gpt2s() {
        let t = byte_level_alphabet();
        assert_eq!(t.iter().flatten().count(), 256);
        assert_eq!(t['Ġ' as usize], Some(b' '));
        assert_eq!(t['Ċ' as usize], Some(b'\n'));
        assert_eq!(t['Ā' as usize], Some(0));
        assert_eq!(t['ł' as usize], Some(0xA0));
        assert_eq!(t['Ń' as usize], Some(0xAD));
        assert_eq!(t['A' as usize], Some(b'A'));
        assert_eq!(t['é' as usize], Some(0xE9));
        assert_eq!(t[' ' as usize], None);
        assert_eq!(t[0xAD], None);
    }

    #[test]
    fn byte_level_tokens_become_raw_bytes() {
        let v = load_value(byte_level(
            json!({"Ġthe": 0, "Ċ": 1, "ä¸": 2, "<|endoftext|>": 3, "é": 4}),
            json!([{"id": 3, "content": "<|endoftext|>", "special": true},
                   {"id": 5, "content": "    ", "special": false},
                   {"id": 6, "content": "<tool>", "special": false}]),
        ))
        .unwrap();
        assert_eq!(bytes(&v, 0), Some(b" the".to_vec()));
        assert_eq!(bytes(&v, 1), Some(b"\n".to_vec()));
        // Half of the UTF-8 encoding of 中 (E4 B8 AD): a token ending inside a character.
        assert_eq!(bytes(&v, 2), Some(vec![0xE4, 0xB8]));
        assert_eq!(bytes(&v, 3), None);
        assert_eq!(bytes(&v, 4), Some(vec![0xE9]));
        // Spaces are outside the alphabet: the token is its own UTF-8 text, as tokenizers decodes.
        assert_eq!(bytes(&v, 5), Some(b"    ".to_vec()));
        assert_eq!(bytes(&v, 6), Some(b"<tool>".to_vec()));
        assert_eq!(v.eos_token_ids(), &[3]);
        assert_eq!(v.len(), 7);
    }

    #[test]
    fn byte_level_is_inferred_from_the_pre_tokenizer() {
        let mut f = byte_level(json!({"Ġa": 0}), json!([]));
        f.as_object_mut().unwrap().remove("decoder");
        assert_eq!(bytes(&load_value(f).unwrap(), 0), Some(b" a".to_vec()));
        let f = json!({
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Isolated"},
                {"type": "ByteLevel", "use_regex": false}]},
            "model": {"vocab": {"Ġa": 0}, "merges": []}
        });
        assert_eq!(bytes(&load_value(f).unwrap(), 0), Some(b" a".to_vec()));
    }

    fn llama(decoder: Value) -> Value {
        json!({
            "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                             {"id": 1, "content": "<s>", "special": true},
                             {"id": 2, "content": "</s>", "special": true}],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "decoder": decoder,
            "model": {"type": "BPE", "byte_fallback": true, "vocab": {
                "<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xE4>": 4, "▁the": 5, "▁▁": 6,
                "the▁": 7, "<0x0a>": 8, "<0xZZ>": 9, "<0x0A": 10}, "merges": []}
        })
    }

    #[test]
    fn sentencepiece_style_spaces_and_byte_fallback() {
        let decoder = json!({"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]});
        let v = load_value(llama(decoder)).unwrap();
        assert_eq!(v.eos_token_ids(), &[2]);
        for id in 0..3 {
            assert_eq!(bytes(&v, id), None);
        }
        assert_eq!(bytes(&v, 3), Some(vec![b'\n']));
        assert_eq!(bytes(&v, 4), Some(vec![0xE4]));
        // The Strip after Fuse trims the start of the whole text, not each token.
        assert_eq!(bytes(&v, 5), Some(b" the".to_vec()));
        assert_eq!(bytes(&v, 6), Some(b"  ".to_vec()));
        assert_eq!(bytes(&v, 7), Some(b"the ".to_vec()));
        // tokenizers parses the hex digits with from_str_radix, which takes lowercase too.
        assert_eq!(bytes(&v, 8), Some(vec![0x0A]));
        assert_eq!(bytes(&v, 9), Some(b"<0xZZ>".to_vec()));
        assert_eq!(bytes(&v, 10), Some(b"<0x0A".to_vec()));
    }

    #[test]
    fn strip_before_fuse_applies_to_each_token() {
        let decoder = json!({"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "Strip", "content": " ", "start": 1, "stop": 1}]});
        let v = load_value(llama(decoder)).unwrap();
        assert_eq!(bytes(&v, 5), Some(b"the".to_vec()));
        assert_eq!(bytes(&v, 6), None);
        assert_eq!(bytes(&v, 7), Some(b"the".to_vec()));
        // Without ByteFallback in the decoder, <0xNN> is literal text.
        assert_eq!(bytes(&v, 3), Some(b"<0x0A>".to_vec()));
    }

    #[test]
    fn metaspace_decoder_and_inference_without_decoder() {
        let v = load_value(llama(
            json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}),
        ))
        .unwrap();
        assert_eq!(bytes(&v, 6), Some(b"  ".to_vec()));
        let mut f = llama(Value::Null);
        f.as_object_mut().unwrap().remove("decoder");
        let v = load_value(f).unwrap();
        assert_eq!(bytes(&v, 5), Some(b" the".to_vec()));
        assert_eq!(bytes(&v, 3), Some(vec![b'\n']));
    }

    #[test]
    fn unigram_vocab_is_a_list() {
        let f = json!({
            "added_tokens": [{"id": 1, "content": "</s>", "special": true}],
            "pre_tokenizer": {"type": "Metaspace", "replacement": "▁"},
            "decoder": {"type": "Metaspace", "replacement": "▁"},
            "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": false,
                      "vocab": [["<unk>", 0.0], ["</s>", 0.0], ["▁x", -1.5], ["y", -2.0]]}
        });
        let v = load_value(f).unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v.eos_token_ids(), &[1]);
        assert_eq!(bytes(&v, 0), Some(b"<unk>".to_vec()));
        assert_eq!(bytes(&v, 2), Some(b" x".to_vec()));
        assert_eq!(bytes(&v, 3), Some(b"y".to_vec()));
    }

    #[test]
    fn bpe_decoder_suffix_is_a_space() {
        let f = json!({
            "decoder": {"type": "BPEDecoder", "suffix": "</w>"},
            "model": {"type": "BPE", "vocab": {"hello</w>": 0, "hel": 1}, "merges": []}
        });
        let v = load_value(f).unwrap();
        assert_eq!(bytes(&v, 0), Some(b"hello ".to_vec()));
        assert_eq!(bytes(&v, 1), Some(b"hel".to_vec()));
    }

    #[test]
    fn eos_from_model_tokens_when_nothing_is_marked_special() {
        let f = json!({"model": {"type": "WordLevel", "vocab": {"a": 0, "</s>": 1}}});
        let v = load_value(f).unwrap();
        assert_eq!(v.eos_token_ids(), &[1]);
        assert_eq!(bytes(&v, 1), None);
        let v = load(
            &json!({"model": {"vocab": {"a": 0, "</s>": 1}}}).to_string(),
            Some(vec![]),
            None,
        )
        .unwrap();
        assert!(v.eos_token_ids().is_empty());
        assert_eq!(bytes(&v, 1), Some(b"</s>".to_vec()));
    }

    #[test]
    fn added_tokens_override_and_extend() {
        let v = load(
            &byte_level(json!({"a": 0, "b": 1}), json!([{"id": 1, "content": "B"}, {"id": 4, "content": "<|im_end|>", "special": true}])).to_string(),
            None,
            Some(8),
        )
        .unwrap();
        assert_eq!(bytes(&v, 1), Some(b"B".to_vec()));
        assert_eq!((v.len(), v.vocab_size()), (5, 8));
        assert_eq!(bytes(&v, 2), None);
        assert_eq!(v.eos_token_ids(), &[4]);
    }

    fn err(v: Value) -> String {
        match load_value(v) {
            Err(Error::Vocabulary(m)) => m,
            other => panic!("expected a vocabulary error, got {other:?}"),
        }
    }

    #[test]
    fn malformed_files_are_named() {
        let good = byte_level(json!({"a": 0}), json!([])).to_string();
        for cut in [0, 1, good.len() / 2, good.len() - 1] {
            let e = load(&good[..cut], None, None).unwrap_err().to_string();
            assert!(e.contains("not readable"), "{e}");
        }
        assert!(err(json!({"decoder": null})).contains("missing field `model`"));
        assert!(err(json!({"model": {"vocab": {"a": -1}}})).contains("not readable"));
        assert!(err(json!({"model": {"vocab": {"a": "x"}}})).contains("not readable"));
        assert!(err(json!({"model": {"vocab": 3}})).contains("not readable"));
        assert!(err(json!({"model": {"vocab": {}}})).contains("no tokens"));
        assert!(
            err(json!({"model": {"vocab": {"a": 0, "b": 0}}})).contains("id 0 is given to both")
        );
        let dup = r#"{"model": {"vocab": {"a": 0, "a": 1}}}"#;
        assert!(load(dup, None, None)
            .unwrap_err()
            .to_string()
            .contains("appears twice"));
        assert!(err(json!({"model": {"vocab": {"a": 4_000_000_000u32}}}))
            .contains("beyond the maximum"));
        assert!(err(json!({"model": {"type": "Magic", "vocab": {"a": 0}}}))
            .contains("unknown model type"));
        assert!(
            err(json!({"model": {"type": "Unigram", "vocab": {"a": 0}}}))
                .contains("list of [piece, score]")
        );
        assert!(
            err(json!({"model": {"type": "BPE", "vocab": [["a", 0.0]]}}))
                .contains("object mapping")
        );
        let wp =
            json!({"decoder": {"type": "WordPiece", "prefix": "##"}, "model": {"vocab": {"a": 0}}});
        assert!(err(wp).contains("WordPiece decoder"));
        let unknown = json!({"decoder": {"type": "Whatever"}, "model": {"vocab": {"a": 0}}});
        assert!(err(unknown).contains("unknown decoder type \"Whatever\""));
        let untyped = json!({"decoder": {"x": 1}, "model": {"vocab": {"a": 0}}});
        assert!(err(untyped).contains("without a \"type\""));
        let regex = json!({"decoder": {"type": "Replace", "pattern": {"Regex": "a+"}, "content": ""},
                           "model": {"vocab": {"a": 0}}});
        assert!(err(regex).contains("Regex"));
        let seq = json!({"decoder": {"type": "Sequence"}, "model": {"vocab": {"a": 0}}});
        assert!(err(seq).contains("decoders"));
        let late = json!({"decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "ByteFallback"}]},
                          "model": {"vocab": {"a": 0}}});
        assert!(err(late).contains("after Fuse"));
        let clash = byte_level(
            json!({"a": 0}),
            json!([{"id": 3, "content": "x"}, {"id": 3, "content": "y"}]),
        );
        assert!(err(clash).contains("share id 3"));
        let e = load(
            &byte_level(json!({"a": 0}), json!([])).to_string(),
            Some(vec![1]),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("eos token id 1 is out of range"));
    }
}
