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
//! This module holds the index, its public calls and its walks; beside it, `machine` holds the
//! automaton and the locks walks take on it, `masks` the cache of computed masks, `moves` the
//! slice moves (which slice a state fits, and where its characters lead), `class_search` the
//! search for class slices, and `leaving` the walks remembered along counted strings.

use std::sync::{Arc, OnceLock, RwLock};

use crate::bitmask::{Mask, MaskBuilder, TokenSet};
use crate::byte_set::ByteSet;
use crate::class_slice::{CharClass, ClassSlice, RunChain};
use crate::dfa::determinize::{Determinizer, DEFAULT_MAX_CALL_DEPTH};
use crate::dfa::{Anchors, CopyAt, Dfa, DfaConfig};
use crate::error::{Error, Result};
use crate::json_schema::{self, SchemaOptions};
use crate::nfa::{Nfa, NfaConfig};
use crate::regex::Hir;
use crate::slice::{Advance, Representatives, TokenTries};
use crate::structural_tag::{self, TagOptions};
use crate::vocab::Vocabulary;

mod class_search;
mod leaving;
mod machine;
mod masks;
mod moves;

use leaving::{FreshWalks, LeavingWalks, PartPlan};
use machine::{walk_bytes, Locked, Machine};
use masks::{MaskCache, Recipe};
use moves::SliceMoves;

/// The dead state: nothing can follow.
pub const DEAD: u32 = 0;
/// The state after an EOS token was accepted.
pub const TERMINAL: u32 = u32::MAX;

const NO_MASK: u32 = u32::MAX;

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
    /// A fixed slice: the members of at most `chars` characters come from it in one union, and the
    /// rest of the vocabulary from a walk of its trie; with `walk_long`, the members longer than
    /// [`DENSE_CHARS`](crate::slice::DENSE_CHARS) are walked one by one. With a `chain` (the states
    /// its characters lead through, `chain[n]` after `n` of them, up to where the chain dies), the
    /// rest is walked from where each token leaves the slice
    /// ([`Slice::leaving`](crate::slice::Slice::leaving)).
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
