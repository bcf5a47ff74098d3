//! Arbitrary bytes as a JSON Schema: whatever parses as JSON is compiled through every schema
//! entry point (the regex form, the HIR form as a DFA, a token index walked a few tokens), and
//! each must answer with a result or a typed error, never a panic. Schemas arrive from API
//! requests, so the compiler sees hostile documents: deep nesting, `$ref` cycles, huge numbers,
//! keywords of the wrong type. The input's own bytes choose the tokens walked.

#![no_main]

use guided_fuzz::{check_schema, schema_options};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // serde_json bounds its own recursion (128 levels), so a deep document is a parse error here,
    // not a stack overflow in the harness.
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    check_schema(&schema, &schema_options(), data);
});
