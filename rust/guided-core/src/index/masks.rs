//! The masks an index has computed, each distinct mask held once however many states share
//! it, and the recipes that find a mask without computing it.
//!
//! States deep inside a JSON string, the counts of a bounded string and the states between an
//! object's members mostly share masks with others, so masks are kept in a list and each state
//! holds an index into it. A new mask is hashed and compared in its compact form (a sparse
//! mask's few ids, a shared one's base address and ids) before it is added, so that equal masks
//! are stored once; a mask built from a slice's members and remembered walks is also filed
//! under its [`Recipe`], so that the next state made of the same parts finds it without being
//! built, hashed and compared. Cost: a word per state, the masks themselves, and a hash entry
//! per distinct mask and recipe.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::leaving::WalkId;
use super::NO_MASK;
use crate::bitmask::Mask;
use crate::hash_ids::IdsByHash;

/// Per-state masks, each distinct mask stored once.
#[derive(Debug, Default)]
pub(super) struct MaskCache {
    pub(super) of_state: Vec<u32>,
    pub(super) masks: Vec<Arc<Mask>>,
    by_hash: IdsByHash,
    pub(super) by_recipe: FxHashMap<Recipe, u32>,
    hasher: foldhash::fast::FixedState,
    pub(super) bytes: usize,
}

impl MaskCache {
    pub(super) fn get(&self, state: u32) -> Option<Arc<Mask>> {
        let id = *self.of_state.get(state as usize)?;
        (id != NO_MASK).then(|| Arc::clone(&self.masks[id as usize]))
    }

    /// The mask of a state made by `recipe`, if a state's mask was made by it before: kept as
    /// `state`'s too.
    pub(super) fn reuse(&mut self, state: u32, recipe: &Recipe) -> Option<Arc<Mask>> {
        let id = *self.by_recipe.get(recipe)?;
        self.keep(state, id);
        Some(Arc::clone(&self.masks[id as usize]))
    }

    /// Keeps `mask` as `state`'s, made by `recipe` if given.
    pub(super) fn insert(&mut self, state: u32, mask: Mask, recipe: Option<Recipe>) -> Arc<Mask> {
        if let Some(existing) = self.get(state) {
            return existing;
        }
        // Hashed and compared in compact form: a sparse mask (a digit state's ten tokens) is a
        // few ids to hash and compare, not the whole vocabulary's words, and a shared one its
        // set's address and its own ids. Lists are hashed in any order, as they are kept in
        // the order found; one whose ids repeat, or a shared mask equal to another made on
        // another set, is then stored twice, which costs memory, not exactness. A dense mask
        // is 25 KB at 200k tokens, which `FxHasher` reads eight bytes at a time on one
        // dependent chain; foldhash reads long inputs in independent lanes, several times
        // faster.
        let unordered = |ids: &[u32]| {
            let spread = |id: u32| (u64::from(id) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let sum = ids
                .iter()
                .fold(0u64, |sum, &id| sum.wrapping_add(spread(id)));
            (ids.len(), sum)
        };
        let mut hasher = self.hasher.build_hasher();
        match &mask {
            Mask::Dense(set) => set.words().hash(&mut hasher),
            Mask::Sparse { ids, .. } => unordered(ids).hash(&mut hasher),
            Mask::Shared { base, ids } => (Arc::as_ptr(base), unordered(ids)).hash(&mut hasher),
        }
        let hash = hasher.finish();
        let masks = &self.masks;
        let id = match self.by_hash.find(hash, |id| *masks[id as usize] == mask) {
            Some(id) => id,
            None => {
                let id = self.masks.len() as u32;
                self.bytes += mask.memory_bytes();
                self.masks.push(Arc::new(mask));
                self.by_hash.insert(hash, id);
                id
            }
        };
        if let Some(recipe) = recipe {
            self.bytes += std::mem::size_of::<(Recipe, u32)>() + recipe.walks.len() * 4;
            self.by_recipe.insert(recipe, id);
        }
        self.keep(state, id);
        Arc::clone(&self.masks[id as usize])
    }

    fn keep(&mut self, state: u32, id: u32) {
        let s = state as usize;
        if self.of_state.len() <= s {
            self.of_state.resize(s + 1, NO_MASK);
        }
        self.of_state[s] = id;
    }
}

/// What a mask made of all of a slice's members and remembered walks of its leaving tokens is
/// made of: the slice, the walks, and whether the state accepts (EOS). Two states with one
/// recipe have one mask: inside a long counted string (`maxLength: 400`), the counts' masks are
/// their neighbours', found by the recipe instead of being built, hashed and compared (three
/// passes over 19 KB at 150k tokens).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Recipe {
    pub(super) slice: usize,
    pub(super) accepting: bool,
    pub(super) walks: Vec<WalkId>,
}
