//! Arbitrary bytes through the Hugging Face `tokenizer.json` loader, with the EOS ids inferred and
//! with them given: the loader must return a vocabulary or a typed `Vocabulary` error, never
//! panic or allocate without bound. A vocabulary it returns must survive the binary round trip
//! (the pickling and cache format) and have tries built over it.

#![no_main]

use guided_core::Vocabulary;
use guided_fuzz::check_vocabulary;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(vocab) = Vocabulary::from_tokenizer_json(text, None, None) {
        check_vocabulary(&vocab);
    }
    // Explicit EOS ids and a padded logit width take the paths that check them against the file.
    if let Ok(vocab) = Vocabulary::from_tokenizer_json(text, Some(vec![0, 2]), Some(300)) {
        check_vocabulary(&vocab);
    }
});
