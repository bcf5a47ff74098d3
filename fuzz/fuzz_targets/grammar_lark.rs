//! Arbitrary bytes as Lark grammar text (rule `root`, else `start`), checked as `grammar_gbnf`
//! checks GBNF. Lark is the larger front end: terminals, `%ignore`, `%import common`, regex
//! terminals in the Python dialect and `%json` schemas all meet here.

#![no_main]

use guided_core::grammar::Syntax;
use guided_fuzz::check_grammar;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| check_grammar(data, Syntax::Lark));
