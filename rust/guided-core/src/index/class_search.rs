//! The search for class slices: whether a state reads the strings of one class of bytes alike
//! (an identifier, a number, a run of spaces, free text up to a trigger), so that its mask
//! takes the class's tokens by length instead of walking them.
//!
//! A state's ASCII moves grouped by successor name the class that keeps it in one place the
//! longest (its most common successor's bytes, followed a few steps for a state that loops on
//! them); the class slice of those bytes then serves the mask where each length of the class's
//! strings leads to states that agree, as far as the slice's exits lie. Below the trie's big
//! heads (`.` and `-` inside a domain name), where the state a byte leads to lives on thousands
//! of tokens, the search runs again from there. A walk short enough to cost less than the
//! search is taken without one ([`TokenIndex::walk_is_short`]). Rows the search needs are built
//! only while the automaton is well inside its budgets ([`TokenIndex::stepping`]), since a
//! search that fails built them for nothing. Cost: a pass over the state's row and a few steps
//! per class length tried, against the walk of every token of the class it saves.

use smallvec::{smallvec, SmallVec};

use super::machine::{Locked, Machine};
use super::{read, AnchorPart, ClassFit, HeadPart, Shortcut, TokenIndex, DEAD};
use crate::byte_set::ByteSet;
use crate::class_slice::{ByteClass, CharClass, RunChain, MIN_CLASS_BYTES};
use crate::slice::{Advance, BIG_HEAD_NODES};
use crate::trie::Anchor;

/// Most states a class's strings of one length may reach before [`TokenIndex::class_fit`] gives
/// the class up: past that, checking them costs more than the walk it would save.
const MAX_REACHED: usize = 32;

/// A state's ASCII moves in a shortcut search, grouped by where they lead: `(successor, the
/// bytes that lead there)`, each successor once and the dead state left out
/// ([`ByteClass::most_common`]'s input). A state leads to a few successors, mostly: kept on the
/// stack.
type Successors = SmallVec<[(u32, u128); 8]>;

/// The states a class's strings of one length reach in [`TokenIndex::class_fit`]: at most
/// [`MAX_REACHED`] once deduplicated (the list of a length's steps before that may be longer,
/// and then moves to the heap).
type Reached = SmallVec<[u32; MAX_REACHED]>;

/// Most bytes a state may live on for [`TokenIndex::walk_is_short`] to count its walk two levels
/// deep: a number's or a keyword's, not a string's, whose walk is long anyway.
const SHORT_WALK_HEADS: usize = 16;

/// Most steps [`TokenIndex::class_fit`] follows a state's most common successors looking for a
/// state that loops on them.
const LOOP_SEARCH: usize = 3;

/// Shortcut searches build rows only while the automaton uses less than one part in this many of
/// each of its budgets ([`TokenIndex::stepping`]).
const SPECULATION_SHARE: usize = 4;

impl TokenIndex {
    /// The class slices that fit `state` (see [`crate::class_slice`]): one over the whole trie
    /// for the state itself, and one below each anchor of the trie for the state its path leads
    /// to (after a space, say, where an identifier may start).
    /// `live` are the bytes `state` lives on.
    pub(super) fn class_fits(&self, state: u32, live: &ByteSet) -> Option<Shortcut> {
        let mut anchors = Vec::new();
        for (k, anchor) in self.tries.anchors().iter().enumerate() {
            // The shortcut walks the anchor's subtree on its own, from this state: without it
            // (a row it may not build), there is no shortcut.
            let at = self.stepping(|step| {
                let mut s = state;
                for &b in &anchor.path {
                    s = step(s, b)?;
                    if s == DEAD {
                        break;
                    }
                }
                Some(s)
            })?;
            if at != DEAD {
                anchors.push(AnchorPart {
                    anchor: k,
                    at,
                    fit: self.class_fit(at, Some(anchor)),
                });
            }
        }
        // A class is made of bytes the state lives on: one that lives on fewer (a key's next
        // letter, the `"` that ends it) has none, which it finds out here without stepping
        // every byte class (a tenth of a structural mask's first computation).
        let root = (live.len() >= MIN_CLASS_BYTES as usize)
            .then(|| self.class_fit(state, None))
            .flatten();
        let heads = root
            .as_ref()
            .map_or(Vec::new(), |fit| self.head_parts(state, fit));
        if root.is_none() && anchors.iter().all(|part| part.fit.is_none()) {
            return None;
        }
        Some(Shortcut::Classes {
            root,
            anchors,
            heads,
        })
    }

    /// The parts below the trie's big heads for a state inside the class of its `root` fit:
    /// each head whose byte leaves the class and keeps the state alive, where a class slice fits
    /// the state it leads to. Inside a domain name's label, `.` starts the next label and `-`
    /// goes on with this one; each heads thousands of tokens that a plain walk would step
    /// through letter by letter, where the state after it reads letters alike again. A head
    /// whose live part from there is under [`BIG_HEAD_NODES`] nodes is left to the plain walk.
    fn head_parts(&self, state: u32, root: &ClassFit) -> Vec<HeadPart> {
        let heads = self.tries.heads();
        // Only the bytes alive outside the class: none at all in most states (a digit's).
        let leaves = |b: u8| !root.class.ascii.contains(b) && root.alive >> b & 1 != 0;
        let candidates: Vec<usize> = (0..heads.len())
            .filter(|&k| leaves(heads[k].path[0]))
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        let Some(ats) = self.stepping(|step| {
            (candidates.iter())
                .map(|&k| step(state, heads[k].path[0]))
                .collect::<Option<Vec<u32>>>()
        }) else {
            return Vec::new();
        };
        let full = self.tries.full();
        (candidates.into_iter().zip(ats))
            .filter(|&(_, at)| at != DEAD)
            // A head is big, but the part of it alive from where it leads may not be: after a
            // number's digit, `.` and `e` head thousands of tokens of which a few spell digits.
            // A walk of those few costs less than finding a class slice for them.
            .filter(|&(head, at)| {
                self.with_row(at, |m| m.live_bytes(at))
                    .is_ok_and(|live| full.nodes_below(Some(&heads[head]), &live) >= BIG_HEAD_NODES)
            })
            .filter_map(|(head, at)| {
                let fit = self.class_fit(at, Some(&heads[head]))?;
                Some(HeadPart { head, at, fit })
            })
            .collect()
    }

    /// Whether a walk without a shortcut from `state`, which lives on `live`, is short enough that
    /// a search for a class slice would cost more than it could save: the tokens that start with
    /// those bytes are at most [`SHORT_WALK`](super::SHORT_WALK) nodes (a digit of a vocabulary
    /// that spells numbers one digit a token, as Qwen2's and Llama 2's do), or the state lives on a
    /// few bytes (enough for a class, [`MIN_CLASS_BYTES`], and at most [`SHORT_WALK_HEADS`]) and,
    /// counted two levels deep with the bytes each of those leads on to, the walk takes at most
    /// [`SHORT_WALK_STEPS`](super::SHORT_WALK_STEPS) steps and few of them below the second level
    /// (the start of a number in Qwen2: `-` and the space head hundreds of tokens, nearly all dead
    /// at their second byte). Finding `live` builds the state's row, which the walk needs first
    /// anyway; the second level builds the rows of the states `live` leads to, which the walk also
    /// steps from, unless a speculative row cannot be built here, and then the search goes ahead.
    pub(super) fn walk_is_short(&self, state: u32, live: &ByteSet) -> bool {
        let full = self.tries.full();
        if full.nodes_below(None, live) <= self.short_walk.nodes {
            return true;
        }
        // A state on fewer bytes than a class needs takes no search below the root anyway
        // (`class_fits`), and counting its walk (a structural state's: `"` heads hundreds of
        // tokens) cost more than the search it would spare.
        if live.len() < MIN_CLASS_BYTES as usize || live.len() > SHORT_WALK_HEADS {
            return false;
        }
        let Some(successors) = self.with_speculative_row(state, |m| {
            live.iter()
                .map(|b| (b, m.step(state, b)))
                .collect::<SmallVec<[(u8, u32); SHORT_WALK_HEADS]>>()
        }) else {
            return false;
        };
        let mut lives: SmallVec<[(u32, ByteSet); 4]> = SmallVec::new();
        let (mut steps, mut deep) = (0, 0);
        for (b, to) in successors {
            let Some(head) = full.head(b) else {
                continue;
            };
            let live_to = match lives.iter().find(|(t, _)| *t == to) {
                Some((_, l)) => *l,
                None => match self.with_speculative_row(to, |m| m.live_bytes(to)) {
                    Some(l) => {
                        lives.push((to, l));
                        l
                    }
                    None => return false,
                },
            };
            let (children, below) = full.steps_below(head, &live_to);
            steps += 1 + children + below;
            deep += below;
            if steps > self.short_walk.steps.0 || deep > self.short_walk.steps.1 {
                return false;
            }
        }
        true
    }

    /// The class slice of `state` over the whole trie or below anchor `anchor`, with how many of
    /// its bytes `state` may take: `chars` such that every string of the class's bytes is alive
    /// from `state` up to that length and dead past it.
    ///
    /// The condition is checked on the sets of states the class's strings of each length reach (for
    /// the class of one state's most common successor, one state per length, the chain of
    /// [`slice_fit`](Self::slice_fit)), as far as the class's longest token: at most
    /// [`DENSE_CHARS`](crate::slice::DENSE_CHARS) bytes, and longer ones are never pruned, so the
    /// walk meets them. Two classes are tried: the bytes that loop on the state the most common
    /// successors lead to, where they are alive from `state` (an identifier that may also spell a
    /// keyword: its letters part ways at once, into keyword prefixes, but every one of them stays
    /// alive), and the bytes of `state`'s most common successor (a counted class, which never comes
    /// back). Each is tried first with the printable characters past ASCII (a wide [`CharClass`])
    /// where they all lead on alike from `state`, and then without them.
    fn class_fit(&self, state: u32, anchor: Option<&Anchor>) -> Option<ClassFit> {
        let groups = &self.ascii_groups;
        // Grouped by successor as they are read, each state's moves name its most common
        // successor at once (counting per group, per search step, was a seventh of a number
        // mask's first computation on o200k).
        let mut moves = Successors::new();
        self.ascii_successors(state, &mut moves)?;
        // Both candidate classes are made of bytes alive from `state`, and a class needs
        // [`MIN_CLASS_BYTES`] of them: most states inside a literal have one, and find that out
        // here without the searches below.
        let alive = moves.iter().fold(0u128, |acc, &(_, bytes)| acc | bytes);
        if alive.count_ones() < MIN_CLASS_BYTES {
            return None;
        }
        let first = ByteClass::most_common(&moves, DEAD);
        // Follow the most common successors to a state that loops on them, a few steps at most:
        // a loop that far in is an identifier's, a counted class never loops.
        let looping = 'search: {
            let (mut s, mut best) = (state, first);
            for _ in 0..LOOP_SEARCH {
                let Some((class, next)) = best else {
                    break;
                };
                if next == s {
                    break 'search class.within(alive);
                }
                // A row the search may not build ends it, as a search that finds no loop.
                if self.ascii_successors(next, &mut moves).is_none() {
                    break;
                }
                (s, best) = (next, ByteClass::most_common(&moves, DEAD));
            }
            None
        };
        let mut candidates: SmallVec<[ByteClass; 2]> = looping.into_iter().collect();
        candidates.extend(first.map(|(class, _)| class));
        candidates.dedup();
        // The printable characters past ASCII join a class where they all lead on alike from
        // `state` (free text, the body of a string with a pattern): their tokens, most of a
        // multilingual vocabulary, are then taken by length too. Where the chain finds that they
        // part ways later, the class is tried without them.
        let wide = self.tries.wide_chars();
        // Their representatives, where they all lead on alike. Only a state that lives on a
        // byte that starts such a character can take them: its row (built by the pass above)
        // says so without the representatives, which an index whose runs are all ASCII
        // (digits, identifiers) then never computes.
        let leads_alive = {
            let m = read(&self.machine);
            m.explored[state as usize] && m.lives_past_ascii(state)
        };
        let wide_reps = leads_alive
            .then(|| {
                self.wide_reps
                    .get_or_init(|| wide.representatives(&read(&self.machine).class_of))
            })
            .filter(|reps| {
                matches!(
                    self.stepping(|step| wide.advance(state, DEAD, reps, step)),
                    Some(Advance::To(t)) if t != DEAD
                )
            });
        let widths: &[bool] = if wide_reps.is_some() {
            &[true, false]
        } else {
            &[false]
        };
        let classes = candidates
            .iter()
            .flat_map(|&ascii| widths.iter().map(move |&wide| CharClass { ascii, wide }));
        for class in classes {
            let slice = self.tries.class_slice(class, anchor);
            // As far as the longest token, the chain builds only rows the walk would build.
            let steps = slice.longest();
            if steps == 0 {
                continue;
            }
            let reps: SmallVec<[u8; 32]> = groups
                .iter()
                .filter(|&&(_, bytes)| class.ascii.includes(bytes))
                .map(|&(rep, _)| rep)
                .collect();
            let deepest = slice.deepest_exit().filter(|_| !class.wide);
            let found = self.stepping(|step| {
                let mut reached: Reached = smallvec![state];
                let mut next = Reached::new();
                // The states of the runs while each length reaches one.
                let mut chain = deepest.map(|_| RunChain {
                    states: vec![state],
                    beyond: None,
                });
                let mut chars = steps;
                // The state of every length past the loop, where the runs die or come back.
                let mut end = None;
                for n in 1..=steps {
                    next.clear();
                    for &s in &reached {
                        for &b in &reps {
                            next.push(step(s, b)?);
                        }
                        if let Some(wide_reps) = wide_reps.filter(|_| class.wide) {
                            match wide.advance(s, DEAD, wide_reps, &mut *step)? {
                                Advance::To(t) => next.push(t),
                                Advance::Mixed => return Some(None),
                            }
                        }
                    }
                    next.sort_unstable();
                    next.dedup();
                    match next.as_slice() {
                        [DEAD] => {
                            chars = n - 1;
                            end = Some(DEAD);
                            break;
                        }
                        [DEAD, ..] => return Some(None),
                        // Back where it was: alive at every length.
                        _ if next == reached => {
                            chars = usize::MAX;
                            end = Some(next[0]);
                            break;
                        }
                        _ if next.len() > MAX_REACHED => return Some(None),
                        [one] => {
                            if let Some(c) = &mut chain {
                                c.states.push(*one);
                            }
                        }
                        _ => chain = None,
                    }
                    std::mem::swap(&mut reached, &mut next);
                }
                if let Some(c) = &mut chain {
                    c.beyond = end;
                }
                Some(Some((chars, chain)))
            });
            if let Some(Some((chars, chain))) = found {
                let chain = chain.and_then(|c| self.extend_chain(c, &reps, deepest?));
                return Some(ClassFit {
                    slice,
                    class,
                    chars,
                    chain,
                    alive,
                });
            }
        }
        None
    }

    /// `state`'s moves on the ASCII byte groups, grouped by successor ([`Successors`]), read
    /// off its row into `out`.
    fn ascii_successors(&self, state: u32, out: &mut Successors) -> Option<()> {
        out.clear();
        self.with_speculative_row(state, |m| {
            for &(rep, bytes) in &self.ascii_groups {
                let to = m.step(state, rep);
                if to == DEAD {
                    continue;
                }
                match out.iter_mut().find(|(t, _)| *t == to) {
                    Some((_, all)) => *all |= bytes,
                    None => out.push((to, bytes)),
                }
            }
        })
    }

    /// Runs `f` on the machine once `state`'s row exists, building it as
    /// [`stepping`](Self::stepping) builds rows (`None` past its share). A search reads a few
    /// states' rows whole, under the shared lock: stepping each byte group through `stepping`
    /// cost a lock check per group.
    fn with_speculative_row<T>(&self, state: u32, f: impl FnOnce(&Machine) -> T) -> Option<T> {
        {
            let m = read(&self.machine);
            if m.explored[state as usize] {
                return Some(f(&m));
            }
        }
        self.stepping(|step| step(state, 0).map(|_| ()))?;
        Some(f(&read(&self.machine)))
    }

    /// `chain` followed on to runs of `deepest` bytes where it stopped short of them (at the
    /// slice's longest member): from its last state, each length's runs must still lead to one
    /// state, read off the class's byte groups `reps`. `None` where they part ways, or where a
    /// row the search may not build is missing.
    fn extend_chain(&self, mut chain: RunChain, reps: &[u8], deepest: usize) -> Option<RunChain> {
        if chain.beyond.is_some() || deepest < chain.states.len() {
            return Some(chain);
        }
        self.stepping(|step| {
            let mut next = Vec::with_capacity(reps.len());
            while chain.states.len() <= deepest {
                let s = *chain.states.last()?;
                next.clear();
                for &b in reps {
                    next.push(step(s, b)?);
                }
                next.sort_unstable();
                next.dedup();
                match next.as_slice() {
                    [DEAD] => chain.beyond = Some(DEAD),
                    [t] if *t == s => chain.beyond = Some(s),
                    [t] => {
                        chain.states.push(*t);
                        continue;
                    }
                    _ => return None,
                }
                break;
            }
            Some(chain.clone())
        })
    }

    /// Runs `f` with the automaton's transition, to find a shortcut: under the shared lock while
    /// the rows it steps through exist, and under the exclusive lock from the first one that
    /// does not, where `step` builds the rows it needs while the automaton is within
    /// [`SPECULATION_SHARE`] of its budgets. Rows built here are speculative (the walk might
    /// never have needed them), so past that share, or if a row fails to build, `step` answers
    /// `None`, the search gives up (`None`) and the mask is walked in full: a shortcut never
    /// spends the budget the answers need.
    fn stepping<T>(
        &self,
        mut f: impl FnMut(&mut dyn FnMut(u32, u8) -> Option<u32>) -> Option<T>,
    ) -> Option<T> {
        let mut machine = Locked::new(&self.machine);
        let mut step = |s: u32, b: u8| {
            if let Some(m) = machine.built(s) {
                return Some(m.step(s, b));
            }
            let m = machine.exclusive();
            if !m.explored[s as usize] {
                let room = m
                    .determinizer
                    .as_ref()
                    .is_some_and(|d| d.is_below_share(SPECULATION_SHARE));
                if !room || m.explore(s).is_err() {
                    return None;
                }
            }
            Some(m.step(s, b))
        };
        f(&mut step)
    }
}
