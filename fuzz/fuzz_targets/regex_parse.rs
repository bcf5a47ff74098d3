//! Arbitrary bytes as a pattern, read in every dialect: parsing must return `Ok` or `Err`, never
//! panic, overflow the stack or run away. Patterns reach the library from users and from JSON
//! Schema documents, so the parser is the first thing hostile text meets.
//!
//! A pattern that parses is also compiled to a DFA (within small limits), printed, and the
//! printing parsed back: the JSON Schema compiler's regex output is such a printing, so it must
//! read back as the same language, and equal languages give equal minimal DFAs.

#![no_main]

use guided_core::dfa::Dfa;
use guided_core::regex::{parse_with, Dialect, ParserConfig};
use guided_core::Error;
use guided_fuzz::{dfa_config, nfa_config, parser_config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Lossy, not strict: a pattern with one stray byte still exercises everything around it.
    let pattern = String::from_utf8_lossy(data);
    for dialect in Dialect::ALL {
        let Ok(hir) = parse_with(&pattern, &parser_config(dialect)) else {
            continue;
        };
        let Ok(dfa) = Dfa::from_hir_with(&hir, &dfa_config(), &nfa_config()) else {
            continue;
        };
        // Printing is in the Python dialect (with the library's extensions), whatever the
        // dialect read; nesting may deepen by a group or two, so reparse under the default limit.
        let printed = hir.to_string();
        let reparsed = match parse_with(&printed, &ParserConfig::default()) {
            Ok(h) => h,
            Err(Error::SizeLimit { .. }) => continue,
            Err(e) => panic!(
                "{} pattern {pattern:?} prints as {printed:?}, which does not parse: {e}",
                dialect.name()
            ),
        };
        if let Ok(again) = Dfa::from_hir_with(&reparsed, &dfa_config(), &nfa_config()) {
            assert!(
                dfa == again,
                "{} pattern {pattern:?} prints as {printed:?}, a different language",
                dialect.name()
            );
        }
    }
});
