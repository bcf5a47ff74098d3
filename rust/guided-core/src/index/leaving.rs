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
//! place on it ([`Orbit`]) says how many copies on from the orbit's root it is. Remembered walks
//! are listed per slice and root, one list per trie, each answering for a range of offsets.
//! Cost: the tokens each remembered walk kept (tens, for a string inside an object); a mask's
//! walks also list the states they met, which is paid once per trie and stretch of copies; and
//! at a mask, one lookup per trie instead of its walk.

use rustc_hash::FxHashMap;

use crate::bitmask::MaskBuilder;
use crate::dfa::{CopyAt, Determinizer};

/// Most walks remembered per slice, trie and orbit: one per stretch of copies that move on
/// alike (before `minLength`, after it), with room to spare.
const MAX_WALKS: usize = 8;

/// Ends a list of walks.
const NO_WALK: u32 = u32::MAX;

/// Where a state stands on a run of states each one copy on from the one before: `root`
/// renamed `offset` copies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Orbit {
    /// The first state of the run.
    pub root: u32,
    /// How many copies on from `root`.
    pub offset: u32,
}

/// A remembered walk: the tokens one trie kept (where they lie in the pool of
/// [`LeavingWalks`]), walked from the state at offset `first` of an orbit; the last offset whose
/// walk is the same one renamed; and the walk remembered before it for the same slice, orbit and
/// trie.
#[derive(Debug)]
struct Walk {
    first: u32,
    last: u32,
    tokens: (u32, u32),
    next: u32,
}

/// A remembered walk, as an index into [`LeavingWalks`] (which only grows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct WalkId(u32);

/// How one trie of a chain's leaving tokens is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PartPlan {
    /// By a remembered walk ([`LeavingWalks::add`]).
    Known(WalkId),
    /// By a walk from a state on this orbit, to remember ([`FreshWalks`]).
    Fresh(Orbit),
    /// By a walk from a state on no orbit.
    Plain,
}

/// Walks of tries done in full from states on orbits ([`PartPlan::Fresh`]), to remember: per
/// walk its trie, its state's orbit, and where its met states and kept tokens end in the
/// shared lists (one allocation for all of a mask's walks).
#[derive(Debug, Default)]
pub(super) struct FreshWalks {
    walks: Vec<(usize, Orbit, usize, usize)>,
    /// The states the walks' steps met (a state met twice in a row listed once).
    pub met: Vec<u32>,
    /// The tokens the walks kept.
    pub tokens: Vec<u32>,
}

impl FreshWalks {
    /// Closes the walk of trie `part` from the state at `orbit`, whose met states and tokens
    /// are those listed since the last walk closed.
    pub(super) fn close(&mut self, part: usize, orbit: Orbit) {
        self.walks
            .push((part, orbit, self.met.len(), self.tokens.len()));
    }

    /// Whether no walk was closed.
    pub(super) fn is_empty(&self) -> bool {
        self.walks.is_empty()
    }
}

/// Remembered walks of tries of leaving tokens, per slice, orbit and trie.
#[derive(Debug, Default)]
pub(super) struct LeavingWalks {
    /// Per slice and orbit root, the last walk remembered for each trie (`NO_WALK` for none):
    /// one hash lookup serves a chain's tries, which mostly share a root.
    orbits: FxHashMap<(u32, u32), Vec<u32>>,
    walks: Vec<Walk>,
    /// The tokens of every walk, one after another.
    tokens: Vec<u32>,
}

impl LeavingWalks {
    /// The remembered walks of slice `slice`'s tries from states on the orbit of `root`, per
    /// trie, for [`find`](Self::find).
    pub(super) fn orbit(&self, slice: usize, root: u32) -> &[u32] {
        self.orbits
            .get(&(slice as u32, root))
            .map_or(&[], Vec::as_slice)
    }

    /// The remembered walk that answers for trie `part` from the state at `offset` on an orbit
    /// whose walks are `orbit` ([`orbit`](Self::orbit)), if there is one.
    pub(super) fn find(&self, orbit: &[u32], part: usize, offset: u32) -> Option<WalkId> {
        let mut at = orbit.get(part).copied().unwrap_or(NO_WALK);
        while let Some(walk) = self.walks.get(at as usize) {
            if walk.first <= offset && offset <= walk.last {
                return Some(WalkId(at));
            }
            at = walk.next;
        }
        None
    }

    /// Adds the tokens of walk `id` to `set`.
    pub(super) fn add(&self, id: WalkId, set: &mut MaskBuilder) {
        if let Some(walk) = self.walks.get(id.0 as usize) {
            let (start, len) = walk.tokens;
            let tokens = &self.tokens[start as usize..][..len as usize];
            set.extend(tokens);
        }
    }

    /// Remembers the `fresh` walks of slice `slice`'s tries, for the offsets on their orbits
    /// whose walks are them renamed; a walk that met a set on which renaming does not commute
    /// is dropped. `copy_of` says which copy a root stands in.
    pub(super) fn remember(
        &mut self,
        det: &Determinizer,
        slice: usize,
        fresh: &FreshWalks,
        mut copy_of: impl FnMut(u32) -> Option<CopyAt>,
    ) {
        let (mut met_from, mut tokens_from) = (0, 0);
        for &(part, orbit, met_end, tokens_end) in &fresh.walks {
            let met = &fresh.met[met_from..met_end];
            let tokens = &fresh.tokens[tokens_from..tokens_end];
            (met_from, tokens_from) = (met_end, tokens_end);
            // A walk's state is its orbit's root renamed `offset` copies on.
            let Some(root) = copy_of(orbit.root) else {
                continue;
            };
            let at = root.copy + orbit.offset;
            let (mut lo, mut hi) = (at, at);
            for &s in met {
                if let Some((l, h)) = det.copies_of(s, root.embedding) {
                    lo = lo.min(l);
                    hi = hi.max(h);
                }
            }
            // The walk `d` copies on meets the copies `lo + d..=hi + d`; renaming commutes on
            // the sets of copies `lo..=hi + d - 1` as far as `top`, so `d` goes up to
            // `top - hi + 1`.
            let Some(top) = det.commuting_copies(root.embedding, lo) else {
                continue;
            };
            if top < hi {
                continue;
            }
            let offsets = (orbit.offset, orbit.offset + (top - hi) + 1);
            self.push((slice, orbit.root), part, offsets, tokens);
        }
    }

    /// Adds a walk of trie `part` answering for the offsets `first..=last` of an orbit, unless
    /// one answers for `first` already or the trie has its fill of walks there.
    fn push(
        &mut self,
        (slice, root): (usize, u32),
        part: usize,
        (first, last): (u32, u32),
        tokens: &[u32],
    ) {
        let heads = self.orbits.entry((slice as u32, root)).or_default();
        if heads.len() <= part {
            heads.resize(part + 1, NO_WALK);
        }
        let (mut at, mut count) = (heads[part], 0);
        while let Some(walk) = self.walks.get(at as usize) {
            if walk.first <= first && first <= walk.last {
                return;
            }
            (at, count) = (walk.next, count + 1);
        }
        if count >= MAX_WALKS {
            return;
        }
        let start = self.tokens.len() as u32;
        self.tokens.extend_from_slice(tokens);
        self.walks.push(Walk {
            first,
            last,
            tokens: (start, tokens.len() as u32),
            next: heads[part],
        });
        heads[part] = (self.walks.len() - 1) as u32;
    }

    /// Bytes held by the remembered walks.
    pub(super) fn memory_bytes(&self) -> usize {
        let heads = self.orbits.values().map(|h| h.capacity() * 4 + 32);
        self.tokens.capacity() * 4
            + self.walks.capacity() * std::mem::size_of::<Walk>()
            + heads.sum::<usize>()
    }
}
