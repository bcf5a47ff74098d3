//! tiktoken rank files -> token bytes.
//!
//! A `.tiktoken` file is the simplest vocabulary format there is: one line per token, the token's
//! raw bytes in base64 and its rank, which is also its id. The bytes are already what the model
//! emits, so there is no spelling to undo; the work is validation. A file tiktoken itself would
//! load with surprises (two lines with one rank, two ranks with the same bytes, a special token on
//! a rank's id) is refused with the line number, because each of those makes some id ambiguous.
//!
//! Special tokens (`<|endoftext|>` and friends) are not in the file; the caller names them, and
//! [`openai_special_tokens`] knows OpenAI's published encodings. They, and ids neither the file nor
//! the specials assign (cl100k leaves 100261..100275 unused), have no bytes.
//!
//! Decoding is strict standard base64 with padding, as the files are written; 200k lines load in a
//! few tens of milliseconds, most of it hashing the bytes to catch duplicates.

use super::{infer_eos, too_many_ids, Slots, Vocabulary, MAX_VOCAB_SIZE};
use crate::error::{Error, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::collections::HashMap;

/// The special tokens of OpenAI's published encodings, by encoding name (`r50k_base`, `p50k_base`,
/// `p50k_edit`, `cl100k_base`, `o200k_base`), as `tiktoken_ext.openai_public` defines them.
pub fn openai_special_tokens(encoding: &str) -> Option<&'static [(&'static str, u32)]> {
    const ENDOFTEXT_50K: &[(&str, u32)] = &[("<|endoftext|>", 50256)];
    const P50K_EDIT: &[(&str, u32)] = &[
        ("<|endoftext|>", 50256),
        ("<|fim_prefix|>", 50281),
        ("<|fim_middle|>", 50282),
        ("<|fim_suffix|>", 50283),
    ];
    const CL100K: &[(&str, u32)] = &[
        ("<|endoftext|>", 100257),
        ("<|fim_prefix|>", 100258),
        ("<|fim_middle|>", 100259),
        ("<|fim_suffix|>", 100260),
        ("<|endofprompt|>", 100276),
    ];
    const O200K: &[(&str, u32)] = &[("<|endoftext|>", 199999), ("<|endofprompt|>", 200018)];
    match encoding {
        "r50k_base" | "p50k_base" => Some(ENDOFTEXT_50K),
        "p50k_edit" => Some(P50K_EDIT),
        "cl100k_base" => Some(CL100K),
        "o200k_base" => Some(O200K),
        _ => None,
    }
}

pub(crate) fn load(
    text: &str,
    special_tokens: &[(String, u32)],
    eos_token_ids: Option<Vec<u32>>,
    vocab_size: Option<usize>,
) -> Result<Vocabulary> {
    let mut slots = Slots::default();
    // Line (1-based) that assigned each rank, to name both lines of a collision.
    let mut line_of: Vec<u32> = Vec::new();
    let mut decoded = Vec::with_capacity(64);
    let mut count = 0usize;
    for (index, line) in text.lines().enumerate() {
        let lineno = index + 1;
        if line.is_empty() {
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(token), Some(rank), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(Error::Vocabulary(format!(
                "tiktoken file, line {lineno}: expected \"<base64 token> <rank>\", found {:?}",
                shorten(line)
            )));
        };
        decoded.clear();
        STANDARD.decode_vec(token, &mut decoded).map_err(|e| {
            Error::Vocabulary(format!(
                "tiktoken file, line {lineno}: {:?} is not valid base64 ({e})",
                shorten(token)
            ))
        })?;
        if decoded.is_empty() {
            return Err(Error::Vocabulary(format!(
                "tiktoken file, line {lineno}: the token is empty"
            )));
        }
        let rank: u32 = rank.parse().map_err(|_| {
            Error::Vocabulary(format!(
                "tiktoken file, line {lineno}: rank {:?} is not a non-negative integer",
                shorten(rank)
            ))
        })?;
        if rank as usize >= MAX_VOCAB_SIZE {
            return Err(too_many_ids(rank as usize));
        }
        let r = rank as usize;
        if r >= line_of.len() {
            line_of.resize(r + 1, 0);
        }
        if line_of[r] != 0 {
            return Err(Error::Vocabulary(format!(
                "tiktoken file, line {lineno}: rank {rank} is already used on line {}",
                line_of[r]
            )));
        }
        // invariant: a file with more than u32::MAX lines would exceed the id bound first.
        line_of[r] = lineno as u32;
        slots.set(rank, Some(&decoded))?;
        count += 1;
    }
    if count == 0 {
        return Err(Error::Vocabulary(
            "tiktoken file: no tokens (expected \"<base64 token> <rank>\" lines)".into(),
        ));
    }

    let mut by_bytes: HashMap<&[u8], u32> = HashMap::with_capacity(count);
    for (rank, &lineno) in line_of.iter().enumerate() {
        if lineno == 0 {
            continue;
        }
        // invariant: ranks are below MAX_VOCAB_SIZE and set, so they fit u32 and have bytes.
        let Some(bytes) = slots.get(rank as u32) else {
            continue;
        };
        if let Some(first) = by_bytes.insert(bytes, lineno) {
            return Err(Error::Vocabulary(format!(
                "tiktoken file, line {lineno}: the token's bytes {bytes:?} repeat line {first}",
                bytes = String::from_utf8_lossy(bytes)
            )));
        }
    }
    drop(by_bytes);

    let mut special_ids: HashMap<u32, &str> = HashMap::new();
    for (name, id) in special_tokens {
        if *id as usize >= MAX_VOCAB_SIZE {
            return Err(too_many_ids(*id as usize));
        }
        if line_of.get(*id as usize).is_some_and(|&l| l != 0) {
            return Err(Error::Vocabulary(format!(
                "special token {name:?} has id {id}, which line {} of the tiktoken file already \
                 assigns to a token",
                line_of[*id as usize]
            )));
        }
        if let Some(other) = special_ids.insert(*id, name) {
            if other != name {
                return Err(Error::Vocabulary(format!(
                    "special tokens {other:?} and {name:?} share id {id}"
                )));
            }
        }
        slots.reserve_ids(*id as usize + 1);
    }

    let eos = eos_token_ids
        .unwrap_or_else(|| infer_eos(special_tokens.iter().map(|(n, id)| (n.as_str(), *id))));
    slots.finish(eos, vocab_size)
}

fn shorten(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specials(list: &[(&str, u32)]) -> Vec<(String, u32)> {
        list.iter().map(|(n, i)| (n.to_string(), *i)).collect()
    }

    fn err(text: &str, sp: &[(&str, u32)]) -> String {
        match load(text, &specials(sp), None, None) {
            Err(Error::Vocabulary(m)) => m,
            other => panic!("expected a vocabulary error, got {other:?}"),
        }
    }

    #[test]
    fn ranks_become_ids_and_specials_have_no_bytes() {
        // "IQ==" is "!", "4pY=" is E2 96 (a partial code point), "IHRoZQ==" is " the".
        let text = "IQ== 0\n4pY= 1\n\nIHRoZQ== 3\n";
        let v = load(text, &specials(&[("<|endoftext|>", 5)]), None, None).unwrap();
        assert_eq!(v.len(), 6);
        assert_eq!(v.token_bytes(0), Some(&b"!"[..]));
        assert_eq!(v.token_bytes(1), Some(&[0xE2, 0x96][..]));
        assert_eq!(v.token_bytes(2), None);
        assert_eq!(v.token_bytes(3), Some(&b" the"[..]));
        assert_eq!(v.token_bytes(4), None);
        assert_eq!(v.token_bytes(5), None);
        assert_eq!(v.eos_token_ids(), &[5]);
        let v = load(text, &[], Some(vec![3]), Some(10)).unwrap();
        assert_eq!(
            (v.len(), v.vocab_size(), v.eos_token_ids()),
            (4, 10, &[3][..])
        );
        // An EOS id is never text, even when it is a rank.
        assert_eq!(v.token_bytes(3), None);
    }

    #[test]
    fn crlf_line_ends_are_accepted() {
        let v = load("IQ== 0\r\nIg== 1\r\n", &[], None, None).unwrap();
        assert_eq!(v.token_bytes(1), Some(&b"\""[..]));
    }

    #[test]
    fn openai_specials_table() {
        let o200k = openai_special_tokens("o200k_base").unwrap();
        assert_eq!(
            o200k,
            &[("<|endoftext|>", 199999), ("<|endofprompt|>", 200018)]
        );
        assert_eq!(openai_special_tokens("cl100k_base").unwrap().len(), 5);
        assert!(openai_special_tokens("tokenizer").is_none());
    }

    #[test]
    fn malformed_files_are_refused_with_their_line() {
        assert!(err("", &[]).contains("no tokens"));
        assert!(err("IQ==\n", &[]).contains("line 1: expected"));
        assert!(err("IQ== 0 7\n", &[]).contains("line 1: expected"));
        assert!(err("IQ== 0\n  \n", &[]).contains("line 2: expected"));
        assert!(err("IQ== 0\n!!!! 1\n", &[]).contains("line 2: \"!!!!\" is not valid base64"));
        assert!(err("IQ 0\n", &[]).contains("not valid base64"));
        assert!(err("IQ== -1\n", &[]).contains("rank \"-1\""));
        assert!(err("IQ== x\n", &[]).contains("rank \"x\""));
        assert!(err("IQ== 99999999999\n", &[]).contains("rank"));
        assert!(err("IQ== 4000000000\n", &[]).contains("too large"));
        assert!(err("IQ== 0\nIg== 0\n", &[]).contains("line 2: rank 0 is already used on line 1"));
        assert!(
            err("IQ== 0\nIQ== 1\n", &[]).contains("line 2: the token's bytes \"!\" repeat line 1")
        );
        assert!(err("IQ== 0\n", &[("<|x|>", 0)]).contains("line 1 of the tiktoken file"));
        assert!(err("IQ== 0\n", &[("<|x|>", 1), ("<|y|>", 1)]).contains("share id 1"));
        assert!(err("IQ== 0\n", &[("<|x|>", 1 << 30)]).contains("too large"));
        let e = load("IQ== 0\n", &[], Some(vec![4]), None).unwrap_err();
        assert!(e.to_string().contains("eos token id 4 is out of range"));
        let e = load("IQ== 0\nIg== 1\n", &[], None, Some(1)).unwrap_err();
        assert!(e.to_string().contains("smaller than"));
    }
}
