//! Helpers the unit tests of several modules share.

use crate::dfa::{Anchors, Determinizer, DfaConfig};
use crate::nfa::{Nfa, NfaConfig};
use crate::regex::Hir;

/// Whether `text` is in the language of `hir`, by the lazy construction the token index uses
/// (rules followed with a stack, booleans built as lazy products).
pub(crate) fn matches_lazily(hir: &Hir, text: &str) -> bool {
    let nfa = Nfa::for_lazy(hir, &NfaConfig::default(), &DfaConfig::default()).unwrap();
    let mut d = Determinizer::new(nfa, Anchors::WHOLE_TEXT, 100_000).unwrap();
    let (mut state, mut row) = (1, Vec::new());
    for b in text.bytes() {
        d.next_row(state, &mut row).unwrap();
        state = row[d.classes().get(b) as usize];
    }
    d.is_accepting(state)
}
