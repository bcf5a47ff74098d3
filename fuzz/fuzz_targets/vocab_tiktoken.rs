//! Arbitrary bytes through the tiktoken rank-file loader, without special tokens and with a few
//! on low ids (where they collide with the ranks of small files): the loader must return a
//! vocabulary or a typed `Vocabulary` error, never panic or allocate without bound. A vocabulary
//! it returns must survive the binary round trip and have tries built over it.

#![no_main]

use guided_core::Vocabulary;
use guided_fuzz::check_vocabulary;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(vocab) = Vocabulary::from_tiktoken(text, &[], None, None) {
        check_vocabulary(&vocab);
    }
    let specials = [
        ("<|endoftext|>".to_string(), 3),
        ("<|fim_prefix|>".to_string(), 40),
    ];
    if let Ok(vocab) = Vocabulary::from_tiktoken(text, &specials, None, Some(64)) {
        check_vocabulary(&vocab);
    }
});
