//! Leaving walks remembered along a counted string.
//!
//! Inside a string with `maxLength`, a state's mask is the slice's members that still fit plus,
//! for each `n`, the trie of tokens that read `n` of the slice's characters and then leave it
//! (a `"`, a backslash, a control character), walked from the state `n` counts on. The next
//! count's mask walks the same tries from the states one count further on, and so on along the
//! string: most of an interior first-pass mask was those walks, and the rows they built (the
//! escape state of every count, the states where the long runs of characters end).
//!
//! Yet where the counts are copies of one embedded automaton, the states one count further on
//! are the same states renamed one copy on (`σ`, see [`crate::dfa::CopyAt`]), and a walk that
//! meets only sets on which `σ` commutes with the automaton is, from the renamed state, the same
//! walk renamed: it keeps exactly the same tokens. So a walk of a trie from a chain state is
//! remembered with the copies it met, and answers for the states `d` copies on as long as
//! renaming commutes on those copies moved `d` on (the exit still open or still closed, a next
//! copy still there: [`Determinizer::commuting_copies`]). Near the string's end, or across
//! `minLength`, the walks are done again.
//!
//! Which states are one copy on from which is learnt while following the chain: a slice move
//! whose target is its own state's key one copy on puts both on one *orbit*, and a state's
//! place on it ([`Orbit`]) says how many copies on from the orbit's root it is. A remembered
//! walk is keyed by slice, trie and root, and answers for a range of offsets. Cost: the tokens
//! each remembered walk kept (tens, for a string inside an object), and at a mask, one lookup
//! per trie instead of its walk.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::dfa::{CopyAt, Determinizer};

/// Most walks remembered per slice, trie and orbit: one per stretch of copies that move on
/// alike (before `minLength`, after it), with room to spare.
const MAX_WALKS: usize = 8;

/// Where a state stands on a run of states each one copy on from the one before: `root`
/// renamed `offset` copies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Orbit {
    /// The first state of the run.
    pub root: u32,
    /// How many copies on from `root`.
    pub offset: u32,
}

/// The tokens one trie kept, walked from the state at offset `first` of an orbit, and the last
/// offset whose walk is the same one renamed.
#[derive(Debug)]
struct Walk {
    first: u32,
    last: u32,
    tokens: Arc<[u32]>,
}

/// How one trie of a chain's leaving tokens is served.
#[derive(Debug, Clone)]
pub(super) enum PartPlan {
    /// By a remembered walk: these tokens.
    Known(Arc<[u32]>),
    /// By a walk from a state on this orbit, to remember ([`LeavingWalk`]).
    Fresh(Orbit),
    /// By a walk from a state on no orbit.
    Plain,
}

/// A walk of one trie done in full from the state at `orbit` ([`PartPlan::Fresh`]): the
/// states its steps met and the tokens it kept.
#[derive(Debug)]
pub(super) struct LeavingWalk {
    pub part: usize,
    pub orbit: Orbit,
    pub met: Vec<u32>,
    pub tokens: Vec<u32>,
}

/// Remembered walks of tries of leaving tokens, per slice, trie and orbit.
#[derive(Debug, Default)]
pub(super) struct LeavingWalks {
    walks: FxHashMap<(u32, u32, u32), Vec<Walk>>,
    bytes: usize,
}

impl LeavingWalks {
    /// The tokens trie `part` of slice `slice` keeps from the state at `orbit`, if a
    /// remembered walk answers for it.
    pub(super) fn find(&self, slice: usize, part: usize, orbit: Orbit) -> Option<Arc<[u32]>> {
        let walks = self.walks.get(&(slice as u32, part as u32, orbit.root))?;
        walks
            .iter()
            .find(|w| w.first <= orbit.offset && orbit.offset <= w.last)
            .map(|w| Arc::clone(&w.tokens))
    }

    /// Remembers `walk` of slice `slice`'s trie, whose state stands in copy `at`, for the
    /// offsets on its orbit whose walks are it renamed; a walk that met a set on which renaming
    /// does not commute is dropped.
    pub(super) fn remember(
        &mut self,
        det: &Determinizer,
        slice: usize,
        walk: LeavingWalk,
        at: CopyAt,
    ) {
        let (mut lo, mut hi) = (at.copy, at.copy);
        for &s in &walk.met {
            if let Some((l, h)) = det.copies_of(s, at.embedding) {
                lo = lo.min(l);
                hi = hi.max(h);
            }
        }
        // The walk `d` copies on meets the copies `lo + d..=hi + d`; renaming commutes on the
        // sets of copies `lo..=hi + d - 1` as far as `top`, so `d` goes up to `top - hi + 1`.
        let Some(top) = det.commuting_copies(at.embedding, lo) else {
            return;
        };
        if top < hi {
            return;
        }
        let key = (slice as u32, walk.part as u32, walk.orbit.root);
        let walks = self.walks.entry(key).or_default();
        let first = walk.orbit.offset;
        if walks.len() >= MAX_WALKS || walks.iter().any(|w| w.first <= first && first <= w.last) {
            return;
        }
        self.bytes += walk.tokens.len() * 4 + std::mem::size_of::<Walk>();
        walks.push(Walk {
            first,
            last: first + (top - hi) + 1,
            tokens: walk.tokens.into(),
        });
    }

    /// Bytes held by the remembered walks.
    pub(super) fn memory_bytes(&self) -> usize {
        self.bytes
    }
}
