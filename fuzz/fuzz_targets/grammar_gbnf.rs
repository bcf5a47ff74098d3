//! Arbitrary bytes as GBNF grammar text (rule `root`): the front end and the lowering must answer
//! with rules or a typed `GrammarSyntax` error, and a grammar that compiles must build a lazy
//! token index whose masks and transitions agree while a few tokens are walked. Grammars arrive
//! in API requests, and recursion, left recursion and undefined rules are all a keystroke away.

#![no_main]

use guided_core::grammar::Syntax;
use guided_fuzz::check_grammar;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| check_grammar(data, Syntax::Gbnf));
