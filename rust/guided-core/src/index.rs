//! The token index: for each automaton state, which tokens may come next.
//!
//! A state's mask is found by walking the vocabulary's [`TokenTrie`](crate::trie::TokenTrie) through the automaton from
//! that state: every token whose bytes all survive is allowed, and a subtree is abandoned at its
//! first dead byte. EOS ids are added exactly when the state accepts. Masks are computed the first
//! time a state is asked for, cached, and stored once however many states share them (states deep
//! inside a JSON string typically do).
//!
//! The automaton need not be complete. [`TokenIndex::from_hir`] starts from a [`Determinizer`]
//! that has built only the dead and start states, and a walk that reaches a state without a row
//! asks the determinizer for it. A pattern whose full DFA would be enormous therefore serves masks
//! as long as the states generation actually visits fit the `max_states` budget, and compiling a
//! constraint costs one NFA construction rather than a full subset construction and minimization.
//! [`TokenIndex::from_dfa`] takes an already complete (minimal) DFA instead. A schema's
//! automaton may be a pushdown one ([`TokenIndex::from_json_schema`] keeps recursion as calls):
//! its states are configurations with a call stack, numbered as they are built like any other,
//! so nothing below needs to know.
//!
//! Concurrency: the index is shared by every request using the constraint, possibly from many
//! threads. Cached masks are read under a read lock. A walk over a complete automaton needs only a
//! read lock too, so cold masks compute in parallel; a walk that must grow the automaton takes
//! the write lock at the first row it misses and goes on from there, since growth is monotone:
//! what it read before stays true. Once the visited part of the automaton is built, everything
//! runs in parallel.
//!
//! States that read every printable character alike (inside a JSON string, under `.*`, inside a
//! string with `maxLength`) take their mask mostly from a precomputed [slice](crate::slice) and
//! walk only the tokens outside it. Where a slice's characters lead from each state is
//! remembered, so the states of a counted string (`maxLength: 40` is forty of them) share the
//! work of finding how many characters each may still take; and where the counts are copies of
//! one embedded automaton, a count's move is read off the count before it, renamed one copy on
//! ([`crate::dfa::CopyAt`]), so following the chain costs a hash lookup per count rather than a
//! subset construction per count and per character length. The tries of tokens that leave the
//! slice are walked from the chain's states, and a walk is remembered for the counts further on
//! whose walks are it renamed (module `leaving`), so that the masks inside a counted string mostly
//! look up what the first of them walked. Such a mask needs nothing of its own state's row, so
//! inside a counted string no count's row is built, and a step from a count follows a word's
//! characters along the chain too: a row per character, with the states inside each count's
//! escapes and multi-byte characters, was otherwise most of both. Where every member fits and
//! remembered walks serve every leaving trie, neighbouring counts have one mask, found by its
//! recipe instead of being built again. States inside a narrower run (an
//! identifier, a number, `[a-z0-9.-]{1,63}`, free text up to a tool call's trigger), and the
//! states a leading space leads to, do the same with a [class slice](crate::class_slice) found
//! from the state's own moves: the walk passes over the subtrees spelled from the class and
//! takes their tokens by length. A byte that leaves the class may head thousands of tokens of
//! its own (`.` and `-` inside a domain name, which start the next label or go on with this
//! one); below the trie's big heads, where the state such a byte leads to lives on thousands of
//! those tokens, it takes a class slice too, so that a count of a label walks a few hundred nodes
//! where it walked twenty thousand.
//!
//! Cost: one mask is `ceil(V/32)` words (25 KB at 200k tokens); a walk visits every trie node whose
//! parent survived, between a few hundred nodes (a digit state) and the whole trie (inside a free
//! string, about a million nodes at 200k tokens).
//!
//! This module holds the index and its walks; beside it, `machine` holds the automaton and the
//! locks walks take on it, `masks` the cache of computed masks, `moves` the slice moves known
//! per state, and `leaving` the walks remembered along counted strings.

use std::sync::{Arc, OnceLock, RwLock};

use smallvec::{smallvec, SmallVec};

use crate::bitmask::{Mask, MaskBuilder, TokenSet};
use crate::byte_set::ByteSet;
use crate::class_slice::{ByteClass, CharClass, ClassSlice, RunChain, MIN_CLASS_BYTES};
use crate::dfa::determinize::{Determinizer, DEFAULT_MAX_CALL_DEPTH};
use crate::dfa::{Anchors, CopyAt, Dfa, DfaConfig};
use crate::error::{Error, Result};
use crate::json_schema::{self, SchemaOptions};
use crate::nfa::{Nfa, NfaConfig};
use crate::regex::Hir;
use crate::slice::{Advance, Representatives, TokenTries, BIG_HEAD_NODES, DENSE_CHARS};
use crate::structural_tag::{self, TagOptions};
use crate::trie::Anchor;
use crate::vocab::Vocabulary;

mod leaving;
mod machine;
mod masks;
mod moves;

use leaving::{FreshWalks, LeavingWalks, PartPlan};
use machine::{explore_step, walk_bytes, Locked, Machine};
use masks::{MaskCache, Recipe};
use moves::{chain_end, move_flags, MoveFlags, Reach, SliceMoves};

/// The dead state: nothing can follow.
pub const DEAD: u32 = 0;
/// The state after an EOS token was accepted.
pub const TERMINAL: u32 = u32::MAX;

const NO_MASK: u32 = u32::MAX;

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

/// The walks short enough to be taken without a search for a class slice
/// ([`TokenIndex::walk_is_short`]).
#[derive(Debug, Clone, Copy)]
struct ShortWalk {
    /// Most nodes below the live bytes.
    nodes: usize,
    /// Most steps counted two levels deep, and most of those below the second level.
    steps: (usize, usize),
}

/// Most trie nodes below a state's live bytes for which its mask is walked without looking for
/// a class slice ([`TokenIndex::walk_is_short`]): a walk of that many costs about what the
/// search does when it fails at once (under a microsecond).
const SHORT_WALK: usize = 64;

/// Most steps a walk may take, counted two levels deep, for its mask to be walked without looking
/// for a class slice ([`TokenIndex::walk_is_short`]), and most of those below the second
/// level: what a search that finds a class and follows its chain costs (30-90 k instructions at
/// the start of a number, 10-20 a step). Steps at the second level mostly die at once; those
/// below it are tokens that live on, which a class slice takes by the hundred for a lookup
/// (below each digit, GPT-2 and o200k have 50-170 tokens spelled from digits alone).
const SHORT_WALK_STEPS: (usize, usize) = (2048, 256);

/// Most bytes a state may live on for [`TokenIndex::walk_is_short`] to count its walk two levels
/// deep: a number's or a keyword's, not a string's, whose walk is long anyway.
const SHORT_WALK_HEADS: usize = 16;

/// Most steps [`TokenIndex::class_fit`] follows a state's most common successors looking for a
/// state that loops on them.
const LOOP_SEARCH: usize = 3;

/// Shortcut searches build rows only while the automaton uses less than one part in this many of
/// each of its budgets ([`TokenIndex::stepping`]).
const SPECULATION_SHARE: usize = 4;

/// Limits for a token index.
#[derive(Debug, Clone, Copy)]
pub struct IndexConfig {
    /// Most automaton states the index may build (a `SizeLimit` error named `max_states` past it).
    pub max_states: usize,
    /// Most NFA states the pattern may compile to.
    pub nfa_states: usize,
    /// Most calls of recursive rules open at once, for a language with rules (a grammar, a
    /// recursive JSON Schema): a step that needs a deeper call fails with a `SizeLimit` error
    /// named `max_stack` (see [`Determinizer::with_call_depth`]).
    pub max_call_depth: u32,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            max_states: 20_000,
            nfa_states: NfaConfig::default().max_states,
            max_call_depth: DEFAULT_MAX_CALL_DEPTH,
        }
    }
}

/// How a mask is made: the shortcut that serves it, if any, and how the tries of tokens leaving
/// a slice's chain are served ([`TokenIndex::shape`]).
#[derive(Debug, Default)]
struct Shape {
    fit: Option<Shortcut>,
    plan: Vec<PartPlan>,
}

/// What a walk is told and tells of a chain's tries of leaving tokens ([`TokenIndex::walk`]).
struct Parts<'a> {
    /// How each trie is served.
    plan: &'a [PartPlan],
    /// The walks done to remember.
    fresh: &'a mut FreshWalks,
}

impl<'a> Parts<'a> {
    fn new(plan: &'a [PartPlan], fresh: &'a mut FreshWalks) -> Self {
        Parts { plan, fresh }
    }
}

/// How a state's mask takes a shortcut past the tokens it reads alike.
#[derive(Debug, Clone)]
enum Shortcut {
    /// A fixed slice: the members of at most `chars` characters come from it in one union, and
    /// the rest of the vocabulary from a walk of its trie; with `walk_long`, the members longer
    /// than [`DENSE_CHARS`] are walked one by one. With a `chain` (the states its characters
    /// lead through, `chain[n]` after `n` of them, up to where the chain dies), the rest is
    /// walked from where each token leaves the slice ([`Slice::leaving`](crate::slice::Slice::leaving)).
    Slice {
        slice: usize,
        chars: usize,
        walk_long: bool,
        chain: Vec<u32>,
    },
    /// Class slices: the trie less its anchors' subtrees takes `root` (or is walked in full
    /// without one), and each anchor the state's path through it keeps alive takes its own part.
    Classes {
        root: Option<ClassFit>,
        anchors: Vec<AnchorPart>,
        heads: Vec<HeadPart>,
    },
}

/// The part of a [`Shortcut::Classes`] below one anchor of the trie: the state the anchor's path
/// leads to, and its class slice if it has one (its subtree is walked in full if not).
#[derive(Debug, Clone)]
struct AnchorPart {
    anchor: usize,
    at: u32,
    fit: Option<ClassFit>,
}

/// The part of a [`Shortcut::Classes`] below one of the trie's big heads
/// ([`TokenTries::heads`](crate::slice::TokenTries::heads)) on which the state leaves its root
/// class: the state the head's byte leads to and the class slice that fits it there. The root
/// walk passes over the head.
#[derive(Debug, Clone)]
struct HeadPart {
    head: usize,
    at: u32,
    fit: ClassFit,
}

/// A class slice that fits a state: the state reads its tokens of at most `chars` bytes alike,
/// and, where each length of the class's runs leads to one state as far as the slice's exits lie,
/// through `chain`.
#[derive(Debug, Clone)]
struct ClassFit {
    slice: Arc<ClassSlice>,
    class: CharClass,
    chars: usize,
    chain: Option<RunChain>,
    /// The ASCII bytes alive from the state, one bit each: those outside the class are where
    /// [`TokenIndex::head_parts`] looks.
    alive: u128,
}

impl ClassFit {
    /// The chain a walk of the slice may follow, if the runs have one.
    fn chain(&self) -> Option<&RunChain> {
        self.chain.as_ref()
    }
}

/// Which tokens may follow each automaton state, over one vocabulary.
#[derive(Debug)]
pub struct TokenIndex {
    machine: RwLock<Machine>,
    masks: RwLock<MaskCache>,
    moves: RwLock<SliceMoves>,
    /// Walks of tries of leaving tokens, remembered along counted strings.
    leaving: RwLock<LeavingWalks>,
    vocab: Arc<Vocabulary>,
    tries: Arc<TokenTries>,
    eos: Vec<u32>,
    eos_mask: Arc<Mask>,
    /// Per fixed slice, the bytes its moves need to try
    /// ([`OneChar::representatives`](crate::slice::OneChar::representatives)), made on first use.
    slice_reps: Vec<OnceLock<Representatives>>,
    /// The same for the printable characters past ASCII that wide class slices hold.
    wide_reps: OnceLock<Representatives>,
    /// The ASCII bytes grouped by the automaton's byte classes, as `(a byte of the group, the
    /// group)`: bytes of one group move alike from every state, so one of them answers for all.
    ascii_groups: Vec<(u8, u128)>,
    /// Per fixed slice, a byte of each ASCII group that meets the slice's characters: what
    /// [`move_at_once`](Self::move_at_once) steps, asked of every slice at every fresh state.
    slice_ascii_reps: Vec<Vec<u8>>,
    /// [`SHORT_WALK`] and [`SHORT_WALK_STEPS`]: the walks taken without a search for a class
    /// slice.
    short_walk: ShortWalk,
}

impl TokenIndex {
    /// An index over a complete DFA.
    pub fn from_dfa(dfa: &Dfa, vocab: Arc<Vocabulary>, tries: Arc<TokenTries>) -> Self {
        Self::with_machine(Machine::complete(dfa), vocab, tries)
    }

    /// An index over the automaton of `hir`, determinized lazily within `config.max_states`.
    pub fn from_hir(
        hir: &Hir,
        vocab: Arc<Vocabulary>,
        tries: Arc<TokenTries>,
        config: &IndexConfig,
    ) -> Result<Self> {
        let dfa_config = DfaConfig {
            max_states: config.max_states,
        };
        let nfa = Nfa::for_lazy(
            hir,
            &NfaConfig {
                max_states: config.nfa_states,
            },
            &dfa_config,
        )?;
        let determinizer = Determinizer::with_call_depth(
            nfa,
            Anchors::WHOLE_TEXT,
            config.max_states,
            config.max_call_depth,
        )?;
        Ok(Self::with_machine(
            Machine::lazy(determinizer),
            vocab,
            tries,
        ))
    }

    /// An index over the JSON texts of `schema`'s instances, with the keywords ignored in
    /// non-strict mode.
    ///
    /// Recursion stays recursion where it can ([`json_schema::json_schema_to_grammar`]): the
    /// automaton follows `$ref` cycles with a call stack up to `config.max_call_depth` deep and
    /// builds only the states a walk visits, so a schema whose unrolled language would be far
    /// past the limits (content types that contain one another, say) costs what generation
    /// visits. Where a recursive language would have to be bounded to stay exact (under `not`,
    /// say) the schema is refused with [`crate::Error::UnsupportedSchema`], never narrowed.
    pub fn from_json_schema(
        schema: &serde_json::Value,
        opts: &SchemaOptions,
        vocab: Arc<Vocabulary>,
        tries: Arc<TokenTries>,
        config: &IndexConfig,
    ) -> Result<(Self, Vec<String>)> {
        let recursive = json_schema::json_schema_to_grammar(schema, opts).and_then(|c| {
            let index = Self::from_hir(&c.hir, Arc::clone(&vocab), Arc::clone(&tries), config)?;
            Ok((index, c.warnings))
        });
        match recursive {
            Err(e) if json_schema::is_unrolling_needed(&e) => {
                let c = json_schema::json_schema_to_hir(schema, opts)?;
                let mut warnings = c.warnings;
                if opts.depth_bounds {
                    warnings.push(format!(
                        "bounded: {e}; recursion unrolled {} times, free values nest at most {} deep",
                        opts.max_recursion_depth, opts.max_free_depth
                    ));
                }
                Ok((Self::from_hir(&c.hir, vocab, tries, config)?, warnings))
            }
            other => other,
        }
    }

    /// An index over the outputs a structural tag allows (free text with calls in it, see
    /// [`structural_tag`]), with the warnings of the schemas it embeds. Recursive schemas stay
    /// recursive unless one stands where only an automaton can, as in
    /// [`TokenIndex::from_json_schema`]; then every schema in the tag is compiled unrolled.
    pub fn from_structural_tag(
        tag: &serde_json::Value,
        opts: &TagOptions,
        vocab: Arc<Vocabulary>,
        tries: Arc<TokenTries>,
        config: &IndexConfig,
    ) -> Result<(Self, Vec<String>)> {
        let build = |opts: &TagOptions| -> Result<(Self, Vec<String>)> {
            let c = structural_tag::compile(tag, opts)?;
            let index = Self::from_hir(&c.hir, Arc::clone(&vocab), Arc::clone(&tries), config)?;
            Ok((index, c.warnings))
        };
        match build(opts) {
            Err(e) if !opts.unroll && json_schema::is_unrolling_needed(&e) => build(&TagOptions {
                unroll: true,
                ..opts.clone()
            }),
            other => other,
        }
    }

    fn with_machine(machine: Machine, vocab: Arc<Vocabulary>, tries: Arc<TokenTries>) -> Self {
        let eos = vocab.eos_token_ids().to_vec();
        let mut eos_mask = TokenSet::empty(vocab.vocab_size());
        for &e in &eos {
            eos_mask.insert(e);
        }
        let mut ascii_groups: Vec<(u8, u128)> = Vec::new();
        for b in 0..128u8 {
            let class = machine.class_of[b as usize];
            match ascii_groups
                .iter_mut()
                .find(|(rep, _)| machine.class_of[*rep as usize] == class)
            {
                Some((_, bytes)) => *bytes |= 1 << b,
                None => ascii_groups.push((b, 1 << b)),
            }
        }
        let slice_ascii_reps = (tries.slices().iter())
            .map(|slice| {
                let ascii = slice.chars().ascii();
                (ascii_groups.iter())
                    .filter(|&&(_, bytes)| bytes & ascii != 0)
                    .map(|&(rep, _)| rep)
                    .collect()
            })
            .collect();
        TokenIndex {
            slice_reps: tries.slices().iter().map(|_| Default::default()).collect(),
            slice_ascii_reps,
            wide_reps: OnceLock::new(),
            ascii_groups,
            machine: RwLock::new(machine),
            masks: RwLock::new(MaskCache::default()),
            moves: RwLock::new(SliceMoves::default()),
            leaving: RwLock::new(LeavingWalks::default()),
            vocab,
            tries,
            eos,
            eos_mask: Arc::new(Mask::from_set(eos_mask)),
            // This crate's tests, whose vocabularies are a few dozen tokens, would find every
            // walk short: they search at every state, and two tests turn the limits on.
            short_walk: if cfg!(test) {
                ShortWalk {
                    nodes: 0,
                    steps: (0, 0),
                }
            } else {
                ShortWalk {
                    nodes: SHORT_WALK,
                    steps: SHORT_WALK_STEPS,
                }
            },
        }
    }

    /// Builds the tries an index walks; build them once per vocabulary and share them.
    pub fn tries_for(vocab: &Vocabulary) -> Result<TokenTries> {
        TokenTries::new(vocab)
    }

    /// The start state.
    pub fn initial_state(&self) -> u32 {
        1
    }

    /// Automaton states built so far.
    pub fn num_states(&self) -> usize {
        read(&self.machine).num_states()
    }

    /// The model's logit width.
    pub fn vocab_size(&self) -> usize {
        self.vocab.vocab_size()
    }

    /// The EOS token ids.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos
    }

    /// The vocabulary.
    pub fn vocabulary(&self) -> &Arc<Vocabulary> {
        &self.vocab
    }

    fn check_state(&self, state: u32) -> Result<()> {
        if state == TERMINAL || (state as usize) < self.num_states() {
            Ok(())
        } else {
            Err(Error::Invalid(format!(
                "state {state} does not exist: the index has {} states",
                self.num_states()
            )))
        }
    }

    fn check_token(&self, state: u32, token: i64) -> Result<u32> {
        if token < 0 || token as u64 >= self.vocab_size() as u64 {
            return Err(Error::InvalidToken {
                token,
                state,
                message: format!("token id out of range 0..{}", self.vocab_size()),
            });
        }
        Ok(token as u32)
    }

    /// Whether `state` accepts (EOS may come next).
    pub fn is_accepting(&self, state: u32) -> bool {
        state != TERMINAL && read(&self.machine).accepting.get(state as usize) == Some(&true)
    }

    /// Whether nothing but EOS can follow `state`: it accepts and no byte leads on (or EOS was
    /// already accepted).
    pub fn is_final(&self, state: u32) -> Result<bool> {
        if state == TERMINAL {
            return Ok(true);
        }
        self.check_state(state)?;
        self.with_row(state, |m| {
            let s = state as usize;
            m.accepting[s]
                && m.table[s * m.stride..(s + 1) * m.stride]
                    .iter()
                    .all(|&t| t == DEAD)
        })
    }

    /// Runs `f` on the machine once `state`'s row exists.
    fn with_row<T>(&self, state: u32, f: impl FnOnce(&Machine) -> T) -> Result<T> {
        {
            let m = read(&self.machine);
            if m.explored.get(state as usize) == Some(&true) {
                return Ok(f(&m));
            }
        }
        let mut m = write(&self.machine);
        m.explore(state)?;
        Ok(f(&m))
    }

    /// The state `token` leads to from `state`: [`DEAD`] if it is not allowed, [`TERMINAL`] for
    /// EOS in an accepting state.
    pub fn next_state(&self, state: u32, token: i64) -> Result<u32> {
        self.check_state(state)?;
        let token = self.check_token(state, token)?;
        if state == TERMINAL || state == DEAD {
            return Ok(DEAD);
        }
        if self.vocab.is_eos(token) {
            return Ok(if self.is_accepting(state) {
                TERMINAL
            } else {
                DEAD
            });
        }
        let bytes = match self.vocab.token_bytes(token) {
            Some(b) if !b.is_empty() => b,
            _ => return Ok(DEAD),
        };
        {
            let m = read(&self.machine);
            if let Some(t) = walk_bytes(&m, state, bytes) {
                return m.reached(t);
            }
        }
        // A row is missing. The characters a slice's chain reads are followed along it, whose
        // moves are mostly known, and only the bytes after them are walked: inside a counted
        // string, a word would otherwise build the row of each count it passes, with the
        // states inside each count's multi-byte characters and escapes, none of which a mask
        // there needs.
        let (s, read_bytes) = self.along_chain(state, bytes)?;
        let bytes = &bytes[read_bytes..];
        if s == DEAD || bytes.is_empty() {
            return read(&self.machine).reached(s);
        }
        let mut m = write(&self.machine);
        let mut s = s;
        for &b in bytes {
            m.explore(s)?;
            s = m.step(s, b);
            if s == DEAD {
                break;
            }
        }
        m.reached(s)
    }

    /// Where the characters `bytes` starts with lead from `state` along a slice's chain, as far
    /// as its moves are known without building rows
    /// ([`move_without_rows`](Self::move_without_rows)), with how many bytes they take;
    /// `(state, 0)` where no slice's move from `state` is known. The chain of the first slice
    /// whose move from `state` is known is taken: a slice's characters all lead to one state,
    /// so a whole character of it steps there without a row.
    fn along_chain(&self, state: u32, bytes: &[u8]) -> Result<(u32, usize)> {
        let slice = {
            let moves = read(&self.moves);
            (0..self.tries.slices().len())
                .find(|&i| matches!(moves.get(i, state), Some(Advance::To(_))))
        };
        let Some(slice) = slice else {
            return Ok((state, 0));
        };
        let chars = self.tries.slices()[slice].chars();
        let (mut s, mut taken, mut at) = (state, 0, chars.boundary());
        for (k, &b) in bytes.iter().enumerate() {
            let Some(next) = chars.read(at, b) else { break };
            at = next;
            if at != chars.boundary() {
                continue;
            }
            let Some(advance) = self.move_without_rows(slice, s)? else {
                break;
            };
            match advance {
                Advance::To(t) => (s, taken) = (t, k + 1),
                Advance::Mixed => break,
            }
            if s == DEAD {
                break;
            }
        }
        Ok((s, taken))
    }

    /// The mask of tokens allowed in `state` (EOS included where it accepts).
    pub fn mask(&self, state: u32) -> Result<Arc<Mask>> {
        self.check_state(state)?;
        if state == TERMINAL {
            return Ok(Arc::clone(&self.eos_mask));
        }
        if let Some(mask) = read(&self.masks).get(state) {
            return Ok(mask);
        }
        let shape = self.shape(state, false)?;
        let recipe = self.recipe(state, &shape);
        if let Some(mask) = recipe
            .as_ref()
            .and_then(|r| write(&self.masks).reuse(state, r))
        {
            return Ok(mask);
        }
        let mask = self.compute(state, &shape, false, |_, _| {})?.finish();
        Ok(write(&self.masks).insert(state, mask, recipe))
    }

    /// The mask of `state` if it is already known (no computation, no waiting on a walk).
    pub fn cached_mask(&self, state: u32) -> Option<Arc<Mask>> {
        if state == TERMINAL {
            return Some(Arc::clone(&self.eos_mask));
        }
        read(&self.masks).get(state)
    }

    /// The mask allowing exactly the EOS ids (what follows a terminated generation).
    pub fn eos_only(&self) -> &Arc<Mask> {
        &self.eos_mask
    }

    /// The successor of every token from `state` ([`DEAD`] where not allowed).
    pub fn next_states(&self, state: u32) -> Result<Vec<u32>> {
        self.check_state(state)?;
        let mut out = vec![DEAD; self.vocab_size()];
        if state == TERMINAL {
            return Ok(out);
        }
        let shape = self.shape(state, true)?;
        self.compute(state, &shape, true, |id, next| out[id as usize] = next)?;
        if self.is_accepting(state) {
            for &e in &self.eos {
                out[e as usize] = TERMINAL;
            }
        }
        Ok(out)
    }

    /// The mask of `state`; when `watched`, each surviving token is reported to `visit` with the
    /// state it leads to. Without `watched`, slices that fit `state` supply their members in
    /// one go (which `visit` would not see).
    fn compute(
        &self,
        state: u32,
        shape: &Shape,
        watched: bool,
        visit: impl FnMut(u32, u32),
    ) -> Result<MaskBuilder> {
        let mut set = self.tokens(state, shape, watched, visit)?;
        // Last, after the machine's lock is released (`add_eos` takes it), and after the
        // tokens: EOS ids are mostly the vocabulary's last, so a short list of ids stays
        // ascending and needs no sort.
        self.add_eos(state, &mut set);
        Ok(set)
    }

    /// The tokens of [`compute`](Self::compute), without the EOS ids.
    fn tokens(
        &self,
        state: u32,
        shape: &Shape,
        watched: bool,
        mut visit: impl FnMut(u32, u32),
    ) -> Result<MaskBuilder> {
        let mut set = MaskBuilder::new(self.vocab_size());
        let (fit, plan) = (shape.fit.as_ref(), shape.plan.as_slice());
        let mut fresh = FreshWalks::default();
        let mut machine = Locked::new(&self.machine);
        let m = machine.get();
        if m.is_complete() {
            let heads = m.live_bytes(state);
            let step = |s, b| m.step(s, b);
            let parts = Parts::new(plan, &mut fresh);
            self.walk(state, &heads, fit, step, &mut set, &mut visit, parts);
            return Ok(set);
        }
        // Most walks on a growing automaton only meet rows that already exist, and run under
        // the shared lock; one that meets a missing row takes the exclusive lock there and goes
        // on where it was (rows are only ever added, so what it read stays true). A walk that
        // gave up at the first missing row and started again under the exclusive lock stepped
        // through the part before it twice: on a bounded-string schema, half as many steps again
        // as the walks that built rows took. A caller that watches each token takes the
        // exclusive lock from the start, as does a state whose own row is missing, unless a
        // slice's chain serves it, which steps from the state only in the tries of tokens that
        // leave the slice at once (and not at all where a walk remembered along a counted
        // string answers for them).
        if watched || !(m.explored[state as usize] || chain_serves(fit)) {
            machine.exclusive().explore(state)?;
        }
        let m = machine.get();
        let heads = if m.explored[state as usize] {
            m.live_bytes(state)
        } else {
            ByteSet::EMPTY
        };
        let mut failure = None;
        let step = |s: u32, b: u8| machine.step(&mut failure, s, b);
        let parts = Parts::new(plan, &mut fresh);
        self.walk(state, &heads, fit, step, &mut set, &mut visit, parts);
        match failure {
            Some(e) => Err(e),
            None => {
                self.remember_walks(machine.get(), fit, &fresh);
                Ok(set)
            }
        }
    }

    /// How `state`'s mask is made ([`Shape`]): a caller that watches each token walks the
    /// whole trie; otherwise a slice or class slices may serve, and remembered walks a chain's
    /// leaving tokens (looked up before the machine is locked; the walks done instead are
    /// remembered after).
    fn shape(&self, state: u32, watched: bool) -> Result<Shape> {
        if watched {
            return Ok(Shape::default());
        }
        let fit = match self.slice_fit(state)? {
            Some(fit) => Some(fit),
            None => {
                let live = self.with_row(state, |m| m.live_bytes(state))?;
                if self.walk_is_short(state, &live) {
                    None
                } else {
                    self.class_fits(state, &live)
                }
            }
        };
        let plan = self.leaving_plan(fit.as_ref());
        Ok(Shape { fit, plan })
    }

    /// The [`Recipe`] of a mask of `shape`, where it has one: a slice's chain that takes every
    /// member and whose every trie of leaving tokens a remembered walk serves. (Where only the
    /// members up to a length fit, near a string's end, the next count's mask takes fewer.)
    fn recipe(&self, state: u32, shape: &Shape) -> Option<Recipe> {
        let Some(Shortcut::Slice {
            slice,
            chars,
            walk_long: false,
            chain,
        }) = &shape.fit
        else {
            return None;
        };
        let of = &self.tries.slices()[*slice];
        let parts = of.leaving().iter().take_while(|(n, _)| *n < chain.len());
        if chain.is_empty() || *chars < of.max_chars() || shape.plan.len() != parts.count() {
            return None;
        }
        let walks = shape.plan.iter().map(|p| match p {
            PartPlan::Known(walk) => Some(*walk),
            _ => None,
        });
        Some(Recipe {
            slice: *slice,
            accepting: self.is_accepting(state),
            walks: walks.collect::<Option<Vec<_>>>()?,
        })
    }

    /// How each trie of leaving tokens of `fit`'s chain is served ([`PartPlan`]): by a walk
    /// remembered from a state fewer copies along the same orbit, where one answers. Tries
    /// past the end of the plan are [`PartPlan::Plain`].
    fn leaving_plan(&self, fit: Option<&Shortcut>) -> Vec<PartPlan> {
        let Some(Shortcut::Slice { slice, chain, .. }) = fit else {
            return Vec::new();
        };
        let (moves, walks) = (read(&self.moves), read(&self.leaving));
        let leaving = self.tries.slices()[*slice].leaving();
        let reads = leaving.iter().take_while(|(n, _)| *n < chain.len());
        // The chain's states mostly stand on one orbit: its walks are looked up once. A chain
        // on no orbit (a free string's, which loops) plans nothing and allocates nothing.
        let mut last: Option<(u32, &[u32])> = None;
        let mut plan = Vec::new();
        for (part, &(n, _)) in reads.enumerate() {
            let Some(orbit) = moves.orbit(*slice, chain[n]) else {
                continue;
            };
            if plan.is_empty() {
                // A counted string's chain has a trie per length of its leaving tokens, twenty
                // or more: a plan grown a part at a time was reallocated as it grew, per mask.
                plan.reserve_exact(leaving.len());
            }
            let remembered = match last {
                Some((root, remembered)) if root == orbit.root => remembered,
                _ => walks.orbit(*slice, orbit.root),
            };
            last = Some((orbit.root, remembered));
            plan.resize(part, PartPlan::Plain);
            plan.push(match walks.find(remembered, part, orbit.offset) {
                Some(walk) => PartPlan::Known(walk),
                None => PartPlan::Fresh(orbit),
            });
        }
        plan
    }

    /// Adds the tokens of the remembered walks `plan` serves tries by.
    fn add_known(&self, plan: &[PartPlan], set: &mut MaskBuilder) {
        if !plan.iter().any(|p| matches!(p, PartPlan::Known(_))) {
            return;
        }
        let walks = read(&self.leaving);
        for p in plan {
            if let PartPlan::Known(walk) = p {
                walks.add(*walk, set);
            }
        }
    }

    /// Remembers the `fresh` walks of `fit`'s chain ([`LeavingWalks::remember`]).
    fn remember_walks(&self, m: &Machine, fit: Option<&Shortcut>, fresh: &FreshWalks) {
        let (Some(det), Some(Shortcut::Slice { slice, .. })) = (&m.determinizer, fit) else {
            return;
        };
        if fresh.is_empty() {
            return;
        }
        // The walks of one chain mostly share a root: its copy is found once.
        let mut last: Option<(u32, Option<CopyAt>)> = None;
        let copy_of = |root: u32| match last {
            Some((r, at)) if r == root => at,
            _ => {
                let at = det.counted_copy(root);
                last = Some((root, at));
                at
            }
        };
        write(&self.leaving).remember(det, *slice, fresh, copy_of);
    }

    /// Adds the EOS ids to `set` where `state` accepts.
    fn add_eos(&self, state: u32, set: &mut MaskBuilder) {
        if self.is_accepting(state) {
            for &e in &self.eos {
                set.insert(e);
            }
        }
    }

    /// The walk of `state`'s tokens, through `fit` if there is one; `heads` are the bytes on
    /// which `state` does not die.
    ///
    /// A slice's chain serves its tries of leaving tokens as `parts` plans, and lists in it the
    /// walks it did to remember.
    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        state: u32,
        heads: &ByteSet,
        fit: Option<&Shortcut>,
        mut step: impl FnMut(u32, u8) -> u32,
        set: &mut MaskBuilder,
        visit: &mut impl FnMut(u32, u32),
        mut parts: Parts<'_>,
    ) {
        let mut trie = self.tries.full();
        match fit {
            None => {}
            Some(Shortcut::Slice {
                slice,
                chars,
                walk_long,
                chain,
            }) => {
                let (chars, walk_long, fit_slice) = (*chars, *walk_long, *slice);
                let slice = &self.tries.slices()[fit_slice];
                slice.add_members_within(chars, set);
                if walk_long {
                    let no_pruning = |_| false;
                    slice.long_members().walk_heads(
                        state,
                        DEAD,
                        heads,
                        no_pruning,
                        &mut step,
                        |id, next| {
                            set.insert(id);
                            visit(id, next);
                        },
                    );
                }
                if !chain.is_empty() {
                    // After the slice's members, which make the set dense: each token a bit.
                    self.add_known(parts.plan, set);
                    let reads = slice.leaving().iter().take_while(|(n, _)| *n < chain.len());
                    for part in 0..reads.count() {
                        self.walk_part(fit_slice, chain, part, &mut step, set, visit, &mut parts);
                    }
                    return;
                }
                trie = slice.rest();
            }
            Some(Shortcut::Classes {
                root,
                anchors,
                heads: head_parts,
            }) => {
                let fits = root
                    .iter()
                    .chain(anchors.iter().filter_map(|part| part.fit.as_ref()))
                    .chain(head_parts.iter().map(|part| &part.fit));
                for fit in fits {
                    fit.slice.add_members_within(fit.chars, set);
                }
                let mut report = |id: u32, next: u32| {
                    set.insert(id);
                    visit(id, next);
                };
                let (all, big) = (self.tries.anchors(), self.tries.heads());
                // The big heads with parts of their own are walked there.
                let mut root_heads = *heads;
                for part in head_parts {
                    root_heads.remove(big[part.head].path[0]);
                }
                match root {
                    Some(fit) => {
                        let start = (state, &root_heads, fit.chain());
                        fit.slice
                            .walk(trie, all, start, DEAD, &mut step, &mut report)
                    }
                    None => {
                        let below_anchor = |i: usize| all.iter().any(|a| a.node == i);
                        let heads = &root_heads;
                        trie.walk_heads(state, DEAD, heads, below_anchor, &mut step, &mut report);
                    }
                }
                for part in anchors {
                    let anchor = &all[part.anchor];
                    for &id in &anchor.tokens {
                        report(id, part.at);
                    }
                    match &part.fit {
                        Some(fit) => {
                            let start = (part.at, &ByteSet::ALL, fit.chain());
                            fit.slice
                                .walk(trie, all, start, DEAD, &mut step, &mut report)
                        }
                        None => {
                            let nothing = |_| false;
                            trie.walk_below(anchor, part.at, DEAD, nothing, &mut step, &mut report)
                        }
                    }
                }
                for part in head_parts {
                    for &id in &big[part.head].tokens {
                        report(id, part.at);
                    }
                    let start = (part.at, &ByteSet::ALL, part.fit.chain());
                    part.fit
                        .slice
                        .walk(trie, all, start, DEAD, &mut step, &mut report)
                }
                return;
            }
        }
        let no_pruning = |_| false;
        trie.walk_heads(state, DEAD, heads, no_pruning, step, |id, next| {
            set.insert(id);
            visit(id, next);
        });
    }

    /// Trie `part` of the tokens leaving slice `slice`, served as `parts` plans it: nothing to
    /// do for a remembered walk (whose tokens [`add_known`](Self::add_known) adds), and a walk
    /// otherwise ([`walk_leaving`](Self::walk_leaving)), which is listed in `parts.fresh` to
    /// remember when its state is on an orbit.
    #[allow(clippy::too_many_arguments)]
    fn walk_part(
        &self,
        slice: usize,
        chain: &[u32],
        part: usize,
        step: &mut impl FnMut(u32, u8) -> u32,
        set: &mut MaskBuilder,
        visit: &mut impl FnMut(u32, u32),
        parts: &mut Parts<'_>,
    ) {
        let plan = parts.plan.get(part).copied().unwrap_or(PartPlan::Plain);
        let fresh = &mut *parts.fresh;
        match plan {
            PartPlan::Known(_) => {}
            PartPlan::Fresh(_) => {
                let (met, tokens) = (&mut fresh.met, &mut fresh.tokens);
                let from = met.len();
                let mut watch = |s: u32, b: u8| {
                    let to = step(s, b);
                    // Siblings in the trie often step to one state: listed once in a row.
                    if to != DEAD && (met.len() == from || met.last() != Some(&to)) {
                        met.push(to);
                    }
                    to
                };
                let mut keep = |id: u32, next: u32| {
                    tokens.push(id);
                    visit(id, next);
                };
                self.walk_leaving(slice, chain, part, &mut watch, set, &mut keep);
            }
            PartPlan::Plain => self.walk_leaving(slice, chain, part, step, set, visit),
        }
        if let PartPlan::Fresh(orbit) = plan {
            parts.fresh.close(part, orbit);
        }
    }

    /// The walk of one trie of tokens leaving slice `slice` (part `part` of
    /// [`Slice::leaving`](crate::slice::Slice::leaving)): the slice's characters lead along the
    /// chain, so a token's first `n` of them cost no steps and its bytes after them are walked
    /// from `chain[n]`; a token that starts with more than the chain reads dies in them.
    fn walk_leaving(
        &self,
        slice: usize,
        chain: &[u32],
        part: usize,
        step: &mut impl FnMut(u32, u8) -> u32,
        set: &mut MaskBuilder,
        visit: &mut impl FnMut(u32, u32),
    ) {
        let (n, leaving) = &self.tries.slices()[slice].leaving()[part];
        let Some(&at) = chain.get(*n) else { return };
        let no_pruning = |_| false;
        leaving.walk_heads(at, DEAD, &ByteSet::ALL, no_pruning, step, |id, next| {
            set.insert(id);
            visit(id, next);
        });
    }

    /// The first slice whose characters `state` reads alike all the way (see [`crate::slice`]),
    /// with how many of them it may take ([`slice_reach`](Self::slice_reach)). A chain on which
    /// the characters part ways before [`DENSE_CHARS`] steps leaves the slice out; one on which
    /// they part ways later takes the members up to there and walks the longer ones.
    ///
    /// A slice that already reads `state` alike is asked first
    /// ([`first_slice`](Self::first_slice)).
    fn slice_fit(&self, state: u32) -> Result<Option<Shortcut>> {
        let first = self.first_slice(state)?;
        if first.is_none() {
            // With no slice known to fit, the row is built first, so that each slice's move is
            // read off it at once where it can be (`move_at_once`: a digit, a keyword's next
            // letter, the punctuation between an object's members); without it, the first
            // slice's characters were followed (`slice_move`: the exclusive lock, the steps, the
            // move recorded) to build it. That took 28% of the instructions of qwen2 `digits`'s
            // first pass. The walk that serves a state no slice does builds the row anyway.
            self.with_row(state, |_| ())?;
        }
        let rest = (0..self.tries.slices().len()).filter(|&i| Some(i) != first);
        for i in first.into_iter().chain(rest) {
            let reach = self.slice_reach(i, state)?;
            let chars = reach.chars as usize;
            if !reach.mixed {
                return Ok(Some(Shortcut::Slice {
                    slice: i,
                    chars,
                    walk_long: false,
                    chain: self.slice_chain(i, state, chars)?,
                }));
            }
            if chars >= DENSE_CHARS {
                return Ok(Some(Shortcut::Slice {
                    slice: i,
                    chars,
                    walk_long: true,
                    chain: Vec::new(),
                }));
            }
        }
        Ok(None)
    }

    /// The slice to ask first at `state`: one whose reach from it is known to fit, or else one
    /// whose move from it is known, or read off the copy before, and leads on. Inside a counted
    /// string, each count's move on the JSON string's slice was learnt while following the
    /// chain from an earlier count; asking the printable slice first would build the state's
    /// row and the states inside its characters only to find that `"` parts ways (eight new
    /// states a count), which the mask does not otherwise need.
    fn first_slice(&self, state: u32) -> Result<Option<usize>> {
        let slices = 0..self.tries.slices().len();
        let leads_on = |advance| matches!(advance, Some(Advance::To(t)) if t != DEAD);
        {
            let moves = read(&self.moves);
            let fits = |r: Reach| !r.mixed || r.chars as usize >= DENSE_CHARS;
            let known = slices
                .clone()
                .find(|&i| moves.reach(i, state).is_some_and(fits))
                .or_else(|| slices.clone().find(|&i| leads_on(moves.get(i, state))));
            if known.is_some() {
                return Ok(known);
            }
        }
        // The state one copy before, which every slice's move is read off, is looked up once
        // (a key built and hashed), not once per slice.
        let mut before = None;
        for i in slices {
            if leads_on(self.move_without_rows_from(i, state, &mut before)?) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// The states a slice's characters lead through from `state`, as far as
    /// [`Slice::leaving`](crate::slice::Slice::leaving) needs them: `chars` of them and the state
    /// where they end, or where the chain dies; empty where it parts ways before (a chain that
    /// was cut at the slice's longest member, and then followed on) and the rest of the
    /// vocabulary is walked from `state` instead.
    ///
    /// A chain cut at the longest member (inside a string of `maxLength: 300`, or a free one,
    /// which loops) is followed on as far as the longest run of slice characters that starts
    /// another token: after the first of a string's states, each of those moves is known.
    fn slice_chain(&self, slice: usize, state: u32, chars: usize) -> Result<Vec<u32>> {
        let of = &self.tries.slices()[slice];
        let longest = of.leaving().last().map_or(0, |&(n, _)| n);
        let cut = chars >= of.max_chars();
        let wanted = if cut { longest } else { chars.min(longest) };
        let mut chain = Vec::with_capacity(wanted + 1);
        chain.push(state);
        loop {
            // The known moves that lead on (nearly all of a long chain's, inside a string) are
            // followed under one lock; the next one, which may build, below.
            {
                let moves = read(&self.moves);
                while chain.len() <= wanted {
                    match moves.get(slice, chain[chain.len() - 1]) {
                        Some(Advance::To(t)) if t != DEAD => chain.push(t),
                        _ => break,
                    }
                }
            }
            if chain.len() > wanted {
                break;
            }
            match self.slice_move(slice, chain[chain.len() - 1])? {
                Advance::To(t) if t != DEAD => chain.push(t),
                // Up to `chars` every move was followed to find the reach, and leads on; past
                // the cut, a chain that dies ends there (a token reading further dies with it).
                Advance::To(_) if cut => break,
                _ => return Ok(Vec::new()),
            }
        }
        Ok(chain)
    }

    /// How far `state`'s chain on a slice's characters reaches ([`Reach`]). The chain is
    /// followed until it dies, parts ways, comes back on itself (every member fits), meets a
    /// state whose reach is known, or outlasts the slice's longest member; the reach of every
    /// state on it is kept, so the states of a counted string, met one after another, each pay
    /// for one step.
    ///
    /// Following a chain builds its states and the states inside its multi-byte characters:
    /// for a string with `maxLength: 300`, as many counts as the longest member has characters
    /// (128 in the large vocabularies). Where the counts are copies of one embedded automaton,
    /// only a few of those moves are followed (the first copies, around `minLength`, the last
    /// ones); the others are read off the copy before ([`shifted_move`](Self::shifted_move)) and
    /// build neither the states' rows nor the insides of their characters. A state whose own
    /// row already answers ([`move_at_once`](Self::move_at_once)) follows nothing.
    fn slice_reach(&self, slice: usize, state: u32) -> Result<Reach> {
        let cap = self.tries.slices()[slice].max_chars() as u32;
        let unmixed = |chars| Reach {
            chars,
            mixed: false,
        };
        match self.move_at_once(slice, state) {
            Some(Advance::Mixed) => {
                return Ok(Reach {
                    chars: 0,
                    mixed: true,
                })
            }
            Some(Advance::To(_)) => return Ok(unmixed(0)),
            None => {}
        }
        // The chain from `state` so far, and once it stops, the reach of its entry `at` (which
        // may be one past its end: a state whose reach was known).
        let mut path = vec![state];
        let (reach_at, at) = 'chain: loop {
            // Moves already known are followed under one lock; the first unknown one below.
            let unknown = {
                let moves = read(&self.moves);
                loop {
                    let last = path[path.len() - 1];
                    if let Some(known) = moves.reach(slice, last) {
                        path.pop();
                        break 'chain (known, path.len());
                    }
                    if path.len() > cap as usize {
                        // `state` reads every member; nothing is known about the states after it.
                        path.truncate(1);
                        break 'chain (unmixed(cap), 0);
                    }
                    match moves.get(slice, last) {
                        Some(advance) => match chain_end(&mut path, advance, cap) {
                            Some(end) => break 'chain end,
                            None => continue,
                        },
                        None => break last,
                    }
                }
            };
            let advance = self.slice_move(slice, unknown)?;
            if let Some(end) = chain_end(&mut path, advance, cap) {
                break end;
            }
        };
        let mut moves = write(&self.moves);
        let mut first = reach_at;
        for (k, &s) in path.iter().enumerate().rev() {
            let chars = reach_at.chars + (at - k) as u32;
            let reach = if chars >= cap {
                unmixed(cap)
            } else {
                Reach {
                    chars,
                    mixed: reach_at.mixed,
                }
            };
            moves.set_reach(slice, s, reach);
            first = reach;
        }
        Ok(first)
    }

    /// The move of `state` on slice `slice` where its own row tells it at once (`None` where
    /// it does not, or the row is not built yet): [`Advance::Mixed`] where two of the slice's
    /// ASCII characters lead to different states, and the dead state where every one of them
    /// dies and so does every byte that starts a longer character.
    ///
    /// Most states a fresh mask meets (inside a literal, a keyword, a number, between the
    /// members of an object) read a few characters and nothing else: one of the two answers.
    /// Finding that out by following the slice's characters ([`slice_move`](Self::slice_move))
    /// costs a few locks, allocations and the record of the move, per slice: a fifth of such a
    /// mask. One step per byte class answers it instead, exactly: ASCII characters are one byte
    /// each, and a longer character dies where its first byte does.
    fn move_at_once(&self, slice: usize, state: u32) -> Option<Advance> {
        let m = read(&self.machine);
        if !m.explored[state as usize] {
            return None;
        }
        let mut targets = (self.slice_ascii_reps[slice].iter()).map(|&rep| m.step(state, rep));
        let first = targets.next();
        if targets.any(|t| Some(t) != first) {
            return Some(Advance::Mixed);
        }
        if first.is_some_and(|t| t != DEAD) {
            return None;
        }
        (!m.lives_past_ascii(state)).then_some(Advance::To(DEAD))
    }

    /// The class slices that fit `state` (see [`crate::class_slice`]): one over the whole trie
    /// for the state itself, and one below each anchor of the trie for the state its path leads
    /// to (after a space, say, where an identifier may start).
    /// `live` are the bytes `state` lives on.
    fn class_fits(&self, state: u32, live: &ByteSet) -> Option<Shortcut> {
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

    /// Whether a walk without a shortcut from `state`, which lives on `live`, is short enough
    /// that a search for a class slice would cost more than it could save: the tokens that start
    /// with those bytes are at most [`SHORT_WALK`] nodes (a digit of a vocabulary that spells
    /// numbers one digit a token, as Qwen2's and Llama 2's do), or the state lives on a few
    /// bytes (enough for a class, [`MIN_CLASS_BYTES`], and at most [`SHORT_WALK_HEADS`]) and,
    /// counted two levels deep with the bytes each of those leads on to, the walk takes at
    /// most [`SHORT_WALK_STEPS`] steps and few of them below the second level (the start of a
    /// number in Qwen2: `-` and the space head hundreds of tokens, nearly all dead at their
    /// second byte). Finding `live` builds the state's row, which the walk needs first anyway;
    /// the second level builds the rows of the states `live` leads to, which the walk also
    /// steps from, unless a speculative row cannot be built here, and then the search goes
    /// ahead.
    fn walk_is_short(&self, state: u32, live: &ByteSet) -> bool {
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
    /// The condition is checked on the sets of states the class's strings of each length reach
    /// (for the class of one state's most common successor, one state per length, the chain of
    /// [`slice_fit`](Self::slice_fit)), as far as the class's longest token: at most
    /// [`DENSE_CHARS`] bytes, and longer ones are never pruned, so the walk meets them. Two
    /// classes are tried: the bytes that loop on the state the most common successors lead to,
    /// where they are alive from `state` (an identifier that may also spell a keyword: its letters
    /// part ways at once, into keyword prefixes, but every one of them stays alive), and the
    /// bytes of `state`'s most common successor (a counted class, which never comes back). Each
    /// is tried first with the printable characters past ASCII (a wide [`CharClass`]) where they
    /// all lead on alike from `state`, and then without them.
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

    /// Where the characters of slice `slice` lead from `state`, remembered per state.
    fn slice_move(&self, slice: usize, state: u32) -> Result<Advance> {
        if let Some(advance) = self.move_without_rows(slice, state)? {
            return Ok(advance);
        }
        let (advance, flags) = self.explored_move(slice, state)?;
        write(&self.moves).set(slice, state, advance, flags);
        Ok(advance)
    }

    /// The move of `state` on slice `slice` where it is known or can be read off the copy before
    /// ([`shifted_move`](Self::shifted_move)), which builds no row; `None` otherwise.
    fn move_without_rows(&self, slice: usize, state: u32) -> Result<Option<Advance>> {
        self.move_without_rows_from(slice, state, &mut None)
    }

    /// [`move_without_rows`](Self::move_without_rows), with `state`'s
    /// [`copy_before`](Self::copy_before) kept in `before` once looked up, for a caller that
    /// asks the same state about several slices.
    fn move_without_rows_from(
        &self,
        slice: usize,
        state: u32,
        before: &mut Option<Option<(CopyAt, u32)>>,
    ) -> Result<Option<Advance>> {
        if let Some(known) = read(&self.moves).get(slice, state) {
            return Ok(Some(known));
        }
        match *before.get_or_insert_with(|| self.copy_before(state)) {
            Some(before) => self.shifted_move(slice, state, before),
            None => Ok(None),
        }
    }

    /// Where the characters of slice `slice` lead from `state`, found by following them
    /// ([`OneChar::advance`](crate::slice::OneChar::advance)), whether the state one copy on
    /// may read its move off this one, and whether it leads one copy on ([`MoveFlags`]).
    fn explored_move(&self, slice: usize, state: u32) -> Result<(Advance, MoveFlags)> {
        let chars = self.tries.slices()[slice].chars();
        let reps = self.slice_reps[slice]
            .get_or_init(|| chars.representatives(&read(&self.machine).class_of));
        // The states the move steps to.
        let mut met = Vec::new();
        let attempt = {
            let m = read(&self.machine);
            let advance = chars.advance(state, DEAD, reps, |s, b| {
                let to = m.explored[s as usize].then(|| m.step(s, b))?;
                met.push(to);
                Some(to)
            });
            advance.map(|advance| (advance, move_flags(&m, state, advance, &met)))
        };
        if let Some(known) = attempt {
            return Ok(known);
        }
        // A row is missing: follow the characters again with the right to build rows.
        let mut m = write(&self.machine);
        let mut failure = None;
        met.clear();
        let advance = chars.advance(state, DEAD, reps, |s, b| {
            let to = explore_step(&mut m, &mut failure, s, b);
            met.push(to);
            Some(to)
        });
        if let Some(e) = failure {
            return Err(e);
        }
        // Every step answers once it may build rows, so the move is known.
        let advance = advance.unwrap_or(Advance::Mixed);
        Ok((advance, move_flags(&m, state, advance, &met)))
    }

    /// Where `state` stands in a counted repetition whose copies move on alike, and the state
    /// one copy before it there, where that state exists: what
    /// [`shifted_move`](Self::shifted_move) reads moves off.
    fn copy_before(&self, state: u32) -> Option<(CopyAt, u32)> {
        let m = read(&self.machine);
        let det = m.determinizer.as_ref()?;
        let at = det.counted_copy(state).filter(|&at| det.copies_alike(at))?;
        Some((at, det.find_shifted_back(state, at.embedding)?))
    }

    /// The move of `state` on a slice read off that of the state one copy before it in a
    /// counted repetition, renamed one copy on (see [`crate::dfa::CopyAt`]): when the copies
    /// around `state` move on alike and that state's move is known and met only sets on which
    /// the renaming commutes with the automaton. `None` where it does not apply.
    ///
    /// A counted string's chain is then one explored move per change in how its copies move
    /// on (before and after `minLength`, at the end) and a hash lookup per other count, instead
    /// of a subset construction per count for the state and each multi-byte character's inside.
    ///
    /// `before` is `state`'s [`copy_before`](Self::copy_before), looked up by the caller, which
    /// may ask one state about several slices.
    fn shifted_move(
        &self,
        slice: usize,
        state: u32,
        (at, before): (CopyAt, u32),
    ) -> Result<Option<Advance>> {
        let (advance, one_copy_on) = {
            let moves = read(&self.moves);
            let Some(advance) = moves.shiftable(slice, before) else {
                return Ok(None);
            };
            (advance, moves.steps_one_copy_on(slice, before))
        };
        let advance = match advance {
            Advance::To(to) if to != DEAD => {
                let mut m = write(&self.machine);
                let Some(det) = m.determinizer.as_mut() else {
                    return Ok(None);
                };
                let Some(to) = det.shifted(to, at.embedding)? else {
                    return Ok(None);
                };
                m.grow();
                Advance::To(to)
            }
            dead_or_mixed => dead_or_mixed,
        };
        // The renamed move met the renamed sets, one copy further on: shiftable in turn; and
        // where the move before led one copy on, this one does, renamed.
        let flags = MoveFlags {
            shiftable: true,
            one_copy_on,
        };
        write(&self.moves).set(slice, state, advance, flags);
        Ok(Some(advance))
    }

    /// The bytes every continuation of `state` starts with (jump-forward): followed while exactly
    /// one byte leads on and the state does not accept, at most `limit` bytes.
    pub fn forced_bytes(&self, state: u32, limit: usize) -> Result<Vec<u8>> {
        self.check_state(state)?;
        let mut out = Vec::new();
        if state == TERMINAL || state == DEAD {
            return Ok(out);
        }
        let mut s = state;
        while out.len() < limit && !self.is_accepting(s) {
            let only = self.with_row(s, |m| {
                let mut only: Option<(u8, u32)> = None;
                for b in 0..=255u8 {
                    let t = m.step(s, b);
                    if t != DEAD {
                        if only.is_some() {
                            return None;
                        }
                        only = Some((b, t));
                    }
                }
                only
            })?;
            match only {
                Some((b, t)) => {
                    out.push(b);
                    s = t;
                }
                None => break,
            }
        }
        Ok(out)
    }

    /// Bytes held by the automaton, the cached masks and (shared) the tries.
    pub fn memory_bytes(&self) -> usize {
        read(&self.machine).memory_bytes()
            + read(&self.masks).bytes
            + read(&self.moves).memory_bytes()
            + read(&self.leaving).memory_bytes()
            + self.tries.memory_bytes()
    }

    /// Distinct masks cached so far.
    pub fn num_masks(&self) -> usize {
        read(&self.masks).masks.len()
    }
}

/// Whether `fit` is a slice's chain, whose walk reads no heads of the state it starts from: its
/// tokens are the slice's members and the tries of tokens leaving it, walked from the chain's
/// states ([`TokenIndex::walk`]).
fn chain_serves(fit: Option<&Shortcut>) -> bool {
    matches!(fit, Some(Shortcut::Slice { chain, walk_long: false, .. }) if !chain.is_empty())
}

/// Poisoning only records that another thread panicked mid-update; every update here leaves the
/// structures consistent before it can panic, so the data stays usable.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
