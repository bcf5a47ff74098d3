//! What the fuzz targets share: limits small enough that no single input runs for more than about
//! a second, a small byte-level vocabulary, and a walk through a token index that checks the
//! index's two answers about a token (its mask and its successor) against each other.
//!
//! The library's default limits are sized for real schemas on a real machine (20,000 DFA states,
//! a million NFA states); under sanitizer instrumentation an input that reaches them takes long
//! enough to look like a hang to libFuzzer, which then stops the run. Every budget is therefore
//! cut here by one or two orders of magnitude: an input that crosses one gets the library's typed
//! `SizeLimit` error, which is exactly the behaviour under test.

use std::sync::{Arc, LazyLock};

use guided_core::dfa::{Dfa, DfaConfig};
use guided_core::grammar::{self, Syntax};
use guided_core::index::{IndexConfig, TokenIndex, DEAD, TERMINAL};
use guided_core::json_schema::{json_schema_to_hir, json_schema_to_regex, SchemaOptions};
use guided_core::nfa::NfaConfig;
use guided_core::regex::{parse_with, Dialect, ParserConfig};
use guided_core::slice::TokenTries;
use guided_core::{Error, Result, Vocabulary};
use serde_json::Value;

/// DFA states any construction may build.
pub const MAX_DFA_STATES: usize = 1_000;
/// NFA states any pattern may compile to.
pub const MAX_NFA_STATES: usize = 20_000;
/// Calls of recursive rules open at once (grammars, recursive schemas).
pub const MAX_CALL_DEPTH: u32 = 32;
/// Tokens walked through an index per input.
pub const MAX_WALK: usize = 16;

/// Parser settings for `dialect`, with nesting bounded well below the library's default.
pub fn parser_config(dialect: Dialect) -> ParserConfig {
    ParserConfig {
        dialect,
        nest_limit: 64,
    }
}

/// Limits for an eager DFA.
pub fn dfa_config() -> DfaConfig {
    DfaConfig {
        max_states: MAX_DFA_STATES,
    }
}

/// Limits for the NFA behind an eager DFA.
pub fn nfa_config() -> NfaConfig {
    NfaConfig {
        max_states: MAX_NFA_STATES,
    }
}

/// Limits for a lazily built token index.
pub fn index_config() -> IndexConfig {
    IndexConfig {
        max_states: MAX_DFA_STATES,
        nfa_states: MAX_NFA_STATES,
        max_call_depth: MAX_CALL_DEPTH,
    }
}

/// Schema compiler options with every work budget cut down; the semantic switches keep their
/// defaults and the caller sets those it varies. A free value (`{}`, `true`, any untyped member)
/// nesting one container deep is a DFA of about 200 states, two deep already 500 and ten times
/// the time, so one level it is: the depth logic is the same at every level.
pub fn schema_options() -> SchemaOptions {
    SchemaOptions {
        max_recursion_depth: 2,
        max_free_depth: 1,
        max_nesting: 24,
        max_work: 2_000,
        max_branches: 16,
        max_hir_nodes: 40_000,
        ..SchemaOptions::default()
    }
}

/// Multi-byte tokens added to the 256 single bytes, so that walks cross token boundaries that
/// are not byte boundaries: JSON punctuation runs, keywords, and a UTF-8 character split across
/// two tokens.
const WORD_TOKENS: &[&[u8]] = &[
    b"{\"",
    b"\":",
    b"\",\"",
    b"true",
    b"null",
    b"false",
    b"  ",
    b"00",
    b"ab",
    b"\xc3",
    b"\xa9",
    b"\xc3\xa9",
    b"\\u00",
];

/// A vocabulary of every single byte, then [`WORD_TOKENS`], then one EOS id with no bytes, with
/// its tries; built once per process, because the tries cost more than most inputs do.
pub static BYTE_VOCABULARY: LazyLock<(Arc<Vocabulary>, Arc<TokenTries>)> = LazyLock::new(|| {
    let mut tokens: Vec<Option<Vec<u8>>> = (0..=255u8).map(|b| Some(vec![b])).collect();
    tokens.extend(WORD_TOKENS.iter().map(|t| Some(t.to_vec())));
    let eos = tokens.len() as u32;
    tokens.push(None);
    let vocab = Vocabulary::new(tokens, vec![eos], None).expect("the byte vocabulary is valid");
    let tries = TokenIndex::tries_for(&vocab).expect("tries over the byte vocabulary");
    (Arc::new(vocab), Arc::new(tries))
});

/// Walks up to [`MAX_WALK`] tokens through `index`, each chosen by one byte of `choices` among
/// the tokens the current mask allows, and panics where the index contradicts itself: a token
/// the mask allows must lead to a live state, a token it refuses to the dead state, and EOS
/// must be allowed exactly where the state accepts. Errors (a limit reached while the automaton
/// grows) end the walk; they are the typed refusals the targets accept.
pub fn walk(index: &TokenIndex, choices: &[u8]) -> Result<()> {
    let eos = index.eos_token_ids().to_vec();
    let mut state = index.initial_state();
    for &choice in choices.iter().take(MAX_WALK) {
        let mask = index.mask(state)?;
        let accepting = index.is_accepting(state);
        for &e in &eos {
            assert_eq!(
                mask.contains(e),
                accepting,
                "EOS {e} in the mask of state {state} disagrees with is_accepting"
            );
        }
        // The chosen token, and a token picked blindly by the same byte, checked both ways.
        let allowed = mask.ids();
        let blind = u32::from(choice);
        let next_blind = index.next_state(state, i64::from(blind))?;
        assert_eq!(
            mask.contains(blind),
            next_blind != DEAD,
            "token {blind} in state {state}: the mask and next_state disagree (next is {next_blind})"
        );
        if allowed.is_empty() {
            break;
        }
        let token = allowed[usize::from(choice) % allowed.len()];
        let next = index.next_state(state, i64::from(token))?;
        assert_ne!(
            next, DEAD,
            "token {token} is in the mask of state {state} but leads to the dead state"
        );
        if next == TERMINAL {
            break;
        }
        state = next;
    }
    Ok(())
}

/// Compiles `schema` through every entry point the library offers for schemas, and panics only
/// where the entry points contradict one another:
///
/// - the regex form ([`json_schema_to_regex`]); a schema refused in strict mode is retried in
///   non-strict mode, as a caller that accepts warnings would;
/// - the HIR form ([`json_schema_to_hir`]) as an eager DFA, which must be the DFA of the regex form
///   read back: that printing is what users of the regex form run;
/// - a token index ([`TokenIndex::from_json_schema`]) over the byte vocabulary, walked by
///   `choices` (see [`walk`]).
///
/// Every error is a typed refusal and ends that step.
pub fn check_schema(schema: &Value, opts: &SchemaOptions, choices: &[u8]) {
    let mut opts = opts.clone();
    let mut regex = json_schema_to_regex(schema, &opts);
    if opts.strict && matches!(regex, Err(Error::UnsupportedSchema { .. })) {
        opts.strict = false;
        regex = json_schema_to_regex(schema, &opts);
    }
    if let Ok((pattern, _)) = regex {
        let printed = parse_with(&pattern, &ParserConfig::default());
        let compiled = json_schema_to_hir(schema, &opts);
        if let (Ok(printed), Ok(compiled)) = (printed, compiled) {
            let a = Dfa::from_hir_with(&compiled.hir, &dfa_config(), &nfa_config());
            let b = Dfa::from_hir_with(&printed, &dfa_config(), &nfa_config());
            if let (Ok(a), Ok(b)) = (a, b) {
                assert!(
                    a == b,
                    "the regex form {pattern:?} is not the language of the compiled schema"
                );
            }
        }
    }
    let (vocab, tries) = &*BYTE_VOCABULARY;
    if let Ok((index, _)) = TokenIndex::from_json_schema(
        schema,
        &opts,
        Arc::clone(vocab),
        Arc::clone(tries),
        &index_config(),
    ) {
        let _ = walk(&index, choices);
    }
}

/// Most token ids a loaded vocabulary may have for the fuzz targets to build tries over it; a
/// file may claim ids up to the library's own bound (16M), and walking millions of empty ids
/// proves nothing the smaller cases do not.
pub const MAX_TRIE_VOCAB: usize = 1 << 16;

/// What a loader's result must satisfy: the binary form reads back as the same vocabulary, and
/// the tries an index walks can be built over it.
pub fn check_vocabulary(vocab: &Vocabulary) {
    let bytes = vocab.to_bytes();
    let again = Vocabulary::from_bytes(&bytes)
        .unwrap_or_else(|e| panic!("a loaded vocabulary does not read back from to_bytes: {e}"));
    assert!(
        again.to_bytes() == bytes,
        "a vocabulary changes through to_bytes / from_bytes"
    );
    assert_eq!(again.fingerprint(), vocab.fingerprint());
    if vocab.vocab_size() <= MAX_TRIE_VOCAB {
        TokenIndex::tries_for(vocab)
            .unwrap_or_else(|e| panic!("no tries over a loaded vocabulary: {e}"));
    }
}

/// Compiles grammar text in `syntax` and walks a lazy token index over it (see [`walk`]); every
/// error is a typed refusal.
pub fn check_grammar(data: &[u8], syntax: Syntax) {
    // Lossy, not strict: text with one stray byte still exercises everything around it.
    let text = String::from_utf8_lossy(data);
    let Ok(hir) = grammar::compile(&text, syntax, "root") else {
        return;
    };
    let (vocab, tries) = &*BYTE_VOCABULARY;
    if let Ok(index) =
        TokenIndex::from_hir(&hir, Arc::clone(vocab), Arc::clone(tries), &index_config())
    {
        let _ = walk(&index, data);
    }
}
