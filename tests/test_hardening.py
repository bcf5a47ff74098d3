"""Hardening: a Guide driven by Hypothesis's stateful search, and one shared index under threads.

The state machine holds every Guide it creates (the first, and copies of it) next to a reference
model that knows nothing of guided: the list of token ids accepted, judged by the third-party
``regex`` module (``fullmatch(..., partial=True)`` says whether text can still grow into a match).
Tokens may end in the middle of a UTF-8 character, so the model decodes incrementally and asks
whether *some* completion of the unfinished character keeps the text viable. After every step each
guide's mask must equal the model's bit for bit, including the padding bits past the vocabulary.

The stress test races one lazily built index (masks computed on first use, under a lock the
threads contend for) against batched fills and an ``IndexCache`` that evicts on nearly every
insertion, then recomputes every recorded mask serially on a fresh index: a race in the lazy index
shows up as a row that differs from the serial one.
"""

from __future__ import annotations

import codecs
import itertools
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache, partial

import numpy as np
import numpy.typing as npt
import pytest
import regex
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import guided
from conftest import shared_path

Row = npt.NDArray[np.int32]


def row_of(ids: Iterable[int], vocab_size: int) -> Row:
    """The packed mask row of ``ids``, built by hand: bit ``t % 32`` of word ``t // 32``."""
    words = np.zeros((vocab_size + 31) // 32, dtype=np.uint32)
    for t in ids:
        words[t // 32] |= np.uint32(1 << (t % 32))
    return words.view(np.int32)


def has_bit(row: Row, t: int) -> bool:
    return bool(int(row[t // 32]) >> (t % 32) & 1)


def fill_row(guide: guided.Guide, width: int) -> Row:
    # Any stale bits left by a fill that writes only the ones would show up against -1.
    out = np.full((1, width), -1, dtype=np.int32)
    guide.fill_bitmask(out, 0)
    row: Row = out[0].copy()
    return row


# --- the stateful test ----------------------------------------------------------------------------

PATTERNS = (r"(ab|cd)*e?", r"[0-9]{1,3}(\.[0-9]+)?", r'"([^"\\]|\\.){0,6}"')

# Multi-byte tokens cross pattern boundaries ("e\"", "\\\""); pieces of "é" and "€" make the index
# follow a character across tokens; one id has no bytes (a special token).
TOKENS: tuple[bytes | None, ...] = (
    b"a",
    b"b",
    b"c",
    b"d",
    b"e",
    b"ab",
    b"cd",
    b"abc",
    b'e"',
    b"0",
    b"1",
    b"9",
    b"12",
    b"345",
    b".",
    b".5",
    b'"',
    b"\\",
    b'\\"',
    b'"a',
    b'""',
    b"x",
    b" ",
    b"\n",
    "é".encode(),
    b"\xc3",
    b"\xa9",
    "€".encode(),
    b"\xe2",
    b"\x82\xac",
    b"\xe2\x82",
    b"\xac",
    None,
)
EOS = len(TOKENS)
# Ids past the tokenizer's last (logit padding) are in range but never allowed.
VOCAB_SIZE = EOS + 1 + 4
WIDTH = (VOCAB_SIZE + 31) // 32
ALL_IDS = range(VOCAB_SIZE)
COMPILED = {p: regex.compile(p) for p in PATTERNS}


def small_vocab() -> guided.Vocabulary:
    return guided.Vocabulary([*TOKENS, None], eos_token_ids=[EOS], vocab_size=VOCAB_SIZE)


def token_bytes(t: int) -> bytes | None:
    return TOKENS[t] if t < len(TOKENS) else None


def _split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """The decoded text and the unfinished character's bytes; None if ``data`` is not UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=False)
    except UnicodeDecodeError:
        return None
    return text, decoder.getstate()[0]


def _completions(tail: bytes) -> Iterable[str]:
    """Characters whose UTF-8 encoding starts with ``tail``: every choice of the first missing
    byte, the later ones at their lowest and highest value. Exhaustive search would cost up to
    2^18 matches per byte; this sample is exact for classes made of whole ranges, such as the
    negated class and ``.`` of the patterns here."""
    lead = tail[0]
    length = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    missing = length - len(tail)
    for first in range(0x80, 0xC0):
        for fill in (0x80, 0xBF):
            try:
                yield (tail + bytes([first] + [fill] * (missing - 1))).decode("utf-8")
            except UnicodeDecodeError:  # overlong forms, surrogates, past U+10FFFF
                continue
            if missing == 1:
                break


@cache
def viable(pattern: str, data: bytes) -> bool:
    """Whether ``data`` is a prefix of some UTF-8 text that fully matches ``pattern``."""
    split = _split_utf8(data)
    if split is None:
        return False
    text, tail = split
    compiled = COMPILED[pattern]
    if compiled.fullmatch(text, partial=True) is None:
        return False
    return not tail or any(
        compiled.fullmatch(text + c, partial=True) is not None for c in _completions(tail)
    )


@cache
def complete(pattern: str, data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return COMPILED[pattern].fullmatch(text) is not None


@cache
def byte_successors(pattern: str, data: bytes) -> tuple[int, ...]:
    return tuple(b for b in range(256) if viable(pattern, data + bytes([b])))


@cache
def model_allowed(pattern: str, data: bytes) -> frozenset[int]:
    """Tokens that may follow ``data`` (EOS where it is complete)."""
    out = set()
    for t in ALL_IDS:
        if t == EOS:
            if complete(pattern, data):
                out.add(t)
            continue
        piece = token_bytes(t)
        if piece and viable(pattern, data + piece):
            out.add(t)
    return frozenset(out)


def model_forced(pattern: str, data: bytes) -> bytes:
    """Bytes every continuation starts with: followed while the text is incomplete and exactly
    one byte keeps it viable."""
    forced = b""
    while not complete(pattern, data + forced):
        nexts = byte_successors(pattern, data + forced)
        if len(nexts) != 1:
            break
        forced += bytes(nexts)
    return forced


@dataclass
class Model:
    """The reference for one guide: the tokens it accepted and how many steps it can undo."""

    pattern: str
    max_rollback: int
    path: list[int] = field(default_factory=list)
    remembered: int = 0

    @property
    def terminated(self) -> bool:
        return bool(self.path) and self.path[-1] == EOS

    @property
    def text(self) -> bytes:
        return b"".join(token_bytes(t) or b"" for t in self.path if t != EOS)

    def allowed(self) -> frozenset[int]:
        return frozenset() if self.terminated else model_allowed(self.pattern, self.text)

    def mask(self) -> frozenset[int]:
        # A terminated guide keeps offering EOS so that a batch row stays samplable.
        return frozenset({EOS}) if self.terminated else self.allowed()

    def accepting(self) -> bool:
        return not self.terminated and complete(self.pattern, self.text)

    def finished(self) -> bool:
        if self.terminated:
            return True
        return complete(self.pattern, self.text) and not byte_successors(self.pattern, self.text)

    def splits_character(self, token: int) -> bool:
        """Whether the text would end inside a UTF-8 character after ``token``."""
        split = _split_utf8(self.text + (token_bytes(token) or b""))
        return split is not None and bool(split[1])

    def push(self, token: int) -> None:
        self.path.append(token)
        if self.max_rollback == -1:
            self.remembered += 1
        elif self.max_rollback > 0:
            self.remembered = min(self.remembered + 1, self.max_rollback)

    def rollback(self, n: int) -> None:
        assert n <= self.remembered
        del self.path[len(self.path) - n :]
        self.remembered -= n

    def reset(self) -> None:
        self.path.clear()
        self.remembered = 0

    def copy(self) -> Model:
        return Model(self.pattern, self.max_rollback, list(self.path), self.remembered)

    def validate(self, tokens: Sequence[int]) -> int:
        """Length of the longest prefix of ``tokens`` allowed in turn."""
        probe = self.copy()
        for i, t in enumerate(tokens):
            if t not in probe.allowed():
                return i
            probe.push(t)
        return len(tokens)


MAX_GUIDES = 3


class GuideMachine(RuleBasedStateMachine):
    """Guides (the first and its copies) over one index, each beside its own model."""

    def __init__(self) -> None:
        super().__init__()
        self.pairs: list[tuple[guided.Guide, Model]] = []

    @initialize(pattern=st.sampled_from(PATTERNS), max_rollback=st.sampled_from([0, 1, 3, -1]))
    def start(self, pattern: str, max_rollback: int) -> None:
        # A fresh index per run keeps a failure reproducible: the lazy index's state numbering
        # depends on the order states were first visited.
        self.index = guided.TokenIndex.from_regex(pattern, small_vocab())
        self.pairs = [
            (guided.Guide(self.index, max_rollback=max_rollback), Model(pattern, max_rollback))
        ]

    def pick(self, which: int) -> tuple[guided.Guide, Model]:
        return self.pairs[which % len(self.pairs)]

    def assert_unchanged(self, guide: guided.Guide, state: int, row: Row) -> None:
        assert guide.state == state
        assert np.array_equal(fill_row(guide, WIDTH), row)

    @rule(data=st.data(), which=st.integers(0, MAX_GUIDES - 1), checked=st.booleans())
    def take_allowed(self, data: st.DataObject, which: int, checked: bool) -> None:
        guide, model = self.pick(which)
        # Several steps per rule: the other rules stay put or go back, and the interesting
        # states (inside "é", after EOS, at the length bounds) lie a few tokens deep.
        for _ in range(data.draw(st.integers(1, 4), label="steps")):
            allowed = sorted(model.allowed())
            if not allowed:
                assert guide.is_terminated(), "only a terminated guide has nothing to take"
                return
            # Tokens that stop inside a character are few among the allowed; seek them out.
            splitting = [t for t in allowed if model.splits_character(t)]
            if splitting:
                if data.draw(st.booleans(), label="split"):
                    allowed = splitting
            t = data.draw(st.sampled_from(allowed), label="token")
            if checked:
                assert guide.accept_token(t)
            else:
                guide.advance(t)
            model.push(t)

    @rule(data=st.data(), which=st.integers(0, MAX_GUIDES - 1), checked=st.booleans())
    def refuse(self, data: st.DataObject, which: int, checked: bool) -> None:
        guide, model = self.pick(which)
        allowed = model.allowed()
        t = data.draw(st.sampled_from([t for t in ALL_IDS if t not in allowed]), label="token")
        state, row = guide.state, fill_row(guide, WIDTH)
        if checked:
            assert guide.accept_token(t) is False
        else:
            with pytest.raises(guided.InvalidTokenError) as info:
                guide.advance(t)
            # the state the guide reports, -1 once terminated, never the core's raw number
            assert (info.value.token, info.value.state) == (t, state)
        self.assert_unchanged(guide, state, row)

    @rule(which=st.integers(0, MAX_GUIDES - 1), t=st.sampled_from([-1, VOCAB_SIZE, 2**40]))
    def out_of_range(self, which: int, t: int) -> None:
        guide, _ = self.pick(which)
        state, row = guide.state, fill_row(guide, WIDTH)
        # Out-of-range ids are caller bugs: errors even from the bool-returning methods.
        for call in (guide.advance, guide.accept_token):
            with pytest.raises(guided.InvalidTokenError):
                call(t)
        with pytest.raises(guided.InvalidTokenError):
            guide.validate_tokens([t])
        self.assert_unchanged(guide, state, row)

    @rule(data=st.data(), which=st.integers(0, MAX_GUIDES - 1))
    def run_of_tokens(self, data: st.DataObject, which: int) -> None:
        guide, model = self.pick(which)
        # Mostly tokens the model allows at their position, sometimes any token, so that both
        # whole runs and runs broken part-way occur.
        probe = model.copy()
        tokens: list[int] = []
        for _ in range(data.draw(st.integers(0, 4), label="length")):
            allowed = sorted(probe.allowed())
            if allowed and data.draw(st.integers(0, 4), label="follow") > 0:
                t = data.draw(st.sampled_from(allowed), label="token")
            else:
                t = data.draw(st.sampled_from(ALL_IDS), label="token")
            tokens.append(t)
            if t in probe.allowed():
                probe.push(t)
        want = model.validate(tokens)
        state, row = guide.state, fill_row(guide, WIDTH)
        assert guide.validate_tokens(tokens) == want, tokens
        self.assert_unchanged(guide, state, row)
        taken = guide.accept_tokens(tokens)
        assert taken is (want == len(tokens)), tokens
        if taken:
            for t in tokens:
                model.push(t)
        else:
            self.assert_unchanged(guide, state, row)

    @rule(data=st.data(), which=st.integers(0, MAX_GUIDES - 1))
    def rollback(self, data: st.DataObject, which: int) -> None:
        guide, model = self.pick(which)
        n = data.draw(st.integers(0, model.remembered), label="n")
        guide.rollback(n)
        model.rollback(n)

    @rule(data=st.data(), which=st.integers(0, MAX_GUIDES - 1))
    def rollback_too_far(self, data: st.DataObject, which: int) -> None:
        guide, model = self.pick(which)
        n = data.draw(
            st.one_of(st.integers(model.remembered + 1, model.remembered + 3), st.just(-1)),
            label="n",
        )
        state, row = guide.state, fill_row(guide, WIDTH)
        with pytest.raises(guided.GuidedError):
            guide.rollback(n)
        self.assert_unchanged(guide, state, row)
        # The history survived the failed call: everything remembered can still be undone.
        if model.remembered:
            twin = guide.copy()
            twin.rollback(model.remembered)
            probe = model.copy()
            probe.rollback(model.remembered)
            assert np.array_equal(fill_row(twin, WIDTH), row_of(probe.mask(), VOCAB_SIZE))

    @rule(which=st.integers(0, MAX_GUIDES - 1))
    def reset(self, which: int) -> None:
        guide, model = self.pick(which)
        if not (model.terminated or len(model.path) >= 4):
            return  # resetting shallow guides would keep most runs near the start
        guide.reset()
        model.reset()
        assert guide.state == self.index.initial_state

    @rule(data=st.data(), which=st.integers(0, MAX_GUIDES - 1))
    def copy(self, data: st.DataObject, which: int) -> None:
        guide, model = self.pick(which)
        pair = (guide.copy(), model.copy())
        if len(self.pairs) < MAX_GUIDES:
            self.pairs.append(pair)
        else:
            self.pairs[data.draw(st.integers(0, MAX_GUIDES - 1), label="replace")] = pair

    @rule(which=st.integers(0, MAX_GUIDES - 1))
    def forced_bytes(self, which: int) -> None:
        guide, model = self.pick(which)
        forced = guide.forced_bytes()
        if model.terminated:
            assert forced == b""
            return
        assert forced == model_forced(model.pattern, model.text), model.text
        for t in model.allowed():
            piece = token_bytes(t)
            if t == EOS or piece is None:
                continue
            common = min(len(piece), len(forced))
            assert piece[:common] == forced[:common], (piece, forced)
        if forced:
            assert EOS not in model.allowed()

    @precondition(lambda self: len(self.pairs) > 1)
    @rule(data=st.data())
    def batch_fill(self, data: st.DataObject) -> None:
        rows = data.draw(st.permutations(range(len(self.pairs))), label="rows")
        threads = data.draw(st.sampled_from([None, 1, 2]), label="threads")
        out = np.full((len(self.pairs) + 1, WIDTH), -1, dtype=np.int32)
        guided.fill_next_token_bitmask([g for g, _ in self.pairs], out, rows, threads=threads)
        for (_, model), r in zip(self.pairs, rows):
            assert np.array_equal(out[r], row_of(model.mask(), VOCAB_SIZE))
        assert (out[len(self.pairs)] == -1).all(), "a row no guide names stays untouched"

    @invariant()
    def agrees_with_model(self) -> None:
        states: dict[bytes, int] = {}
        for guide, model in self.pairs:
            assert guide.is_terminated() is model.terminated
            assert (guide.state == -1) is model.terminated
            assert guide.is_accepting() is model.accepting()
            assert guide.finished is model.finished(), model.text
            want = row_of(model.mask(), VOCAB_SIZE)
            assert np.array_equal(fill_row(guide, WIDTH), want), (model.path, model.text)
            if not model.terminated:
                # The automaton is deterministic: one text, one state, whichever guide read it.
                assert states.setdefault(model.text, guide.state) == guide.state


def test_guide_state_machine() -> None:
    run_state_machine_as_test(GuideMachine, settings=settings(stateful_step_count=40))


# --- the threads stress test ----------------------------------------------------------------------

N_WALKERS, N_BATCHERS, N_COMPILERS = 10, 3, 3
GUIDES_PER_BATCH = 4
ROUNDS = 6
# Below the size of any one walked index, so that nearly every insertion evicts.
CACHE_BYTES = 1024


@dataclass
class StressCase:
    vocab: Callable[[], guided.Vocabulary]
    build: Callable[[guided.Vocabulary], guided.TokenIndex]
    max_steps: int


def synthetic_vocab() -> guided.Vocabulary:
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    tokens = {bytes([b]) for b in range(32, 127)}
    tokens |= {"".join(rng.choices(letters, k=rng.randint(2, 4))).encode() for _ in range(600)}
    tokens |= {w.encode() for w in ("@", ".com", ".org", ".net", "com", "org", "net", "@a", "x.")}
    ordered = sorted(tokens)
    return guided.Vocabulary([*ordered, None], eos_token_ids=[len(ordered)])


@cache
def gpt2_vocab() -> guided.Vocabulary:
    return guided.Vocabulary.from_tokenizer_json(str(shared_path("vocab", "gpt2_tokenizer.json")))


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,6}\\.(com|org)$"},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "tags", "ok"],
    "additionalProperties": False,
}

STRESS_CASES = {
    "bytes-regex": StressCase(
        synthetic_vocab,
        lambda v: guided.TokenIndex.from_regex(r"[a-z]{1,12}@[a-z]{1,8}\.(com|org|net)", v),
        40,
    ),
    "gpt2-json-schema": StressCase(
        gpt2_vocab, lambda v: guided.TokenIndex.from_json_schema(SCHEMA, v, whitespace=""), 60
    ),
}


def random_path(index: guided.TokenIndex, rng: random.Random, max_steps: int) -> list[int]:
    """Random allowed tokens from the start, up to EOS or ``max_steps``."""
    state, path = index.initial_state, []
    eos = set(index.eos_token_ids)
    for _ in range(max_steps):
        choices = np.flatnonzero(index.allowed(state))
        assert len(choices), "a live state allows something"
        t = int(rng.choice(choices))
        path.append(t)
        if t in eos:
            break
        state = index.next_state(state, t)
    return path


def cache_job(i: int) -> tuple[str, bytes, bytes]:
    """The ``i``-th constraint the compilers ask for, a text it accepts and one it refuses."""
    n = 1 + i % 9
    pattern = f"(k{i}|q{i % 7})-[a-z]{{1,{n}}}(\\.[0-9]{{2}})?"
    return pattern, f"k{i}-{'a' * n}.42".encode(), f"k{i}-{'a' * (n + 1)}".encode()


@pytest.mark.parametrize("case", list(STRESS_CASES))
def test_shared_index_under_threads(case: str) -> None:
    spec = STRESS_CASES[case]
    vocab = spec.vocab()
    width = (vocab.vocab_size + 31) // 32
    eos = vocab.eos_token_ids[0]
    single: dict[bytes, int] = {}
    for t in range(len(vocab)):
        piece = vocab.token_bytes(t)
        if piece is not None and len(piece) == 1 and t not in vocab.eos_token_ids:
            single.setdefault(piece, t)

    # Paths come from a separate index so that each shared one starts cold and its states are
    # explored by the racing threads.
    rng = random.Random(20240611)
    path_index = spec.build(vocab)
    paths = [random_path(path_index, rng, spec.max_steps) for _ in range(N_WALKERS)]
    cache = guided.IndexCache(vocab, max_bytes=CACHE_BYTES)

    mask_threads = N_WALKERS + N_BATCHERS
    start = threading.Barrier(mask_threads + N_COMPILERS)
    shared: list[guided.TokenIndex] = []
    # Each round races on a new cold index, installed by the last thread to arrive.
    next_round = threading.Barrier(mask_threads, action=lambda: shared.append(spec.build(vocab)))
    done = threading.Event()
    errors: list[tuple[str, BaseException]] = []
    # (round, path) -> rows, from each way of filling
    walked: dict[tuple[int, int], list[Row]] = {}
    rewalked: dict[tuple[int, int], list[Row]] = {}
    batched: dict[tuple[int, int, int], list[Row]] = {}
    requests = itertools.count()
    compiled: list[int] = []
    lock = threading.Lock()

    def guarded(name: str, body: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                start.wait(timeout=60)
                body()
            except BaseException as e:  # re-raised by the main thread
                with lock:
                    errors.append((name, e))
                next_round.abort()  # the others would wait for this thread forever

        return threading.Thread(target=run, name=name)

    def walk(index: guided.TokenIndex, path: Sequence[int]) -> list[Row]:
        guide = guided.Guide(index)
        rows = [fill_row(guide, width)]
        for t in path:
            guide.advance(t)
            rows.append(fill_row(guide, width))
        return rows

    def walker(w: int) -> None:
        for r in range(ROUNDS):
            next_round.wait(timeout=60)
            k = (w + r) % N_WALKERS  # a different pairing of threads and paths each round
            walked[r, k] = walk(shared[r], paths[k])
            # By now the masks are cached; reading them must give the same rows.
            rewalked[r, k] = walk(shared[r], paths[k])

    def batcher(j: int) -> None:
        mine = [(j * GUIDES_PER_BATCH + i) % N_WALKERS for i in range(GUIDES_PER_BATCH)]
        order = list(range(len(mine)))
        random.Random(j).shuffle(order)
        for r in range(ROUNDS):
            next_round.wait(timeout=60)
            guides = [guided.Guide(shared[r]) for _ in mine]
            out = np.zeros((len(mine), width), dtype=np.int32)
            rows: dict[int, list[Row]] = {k: [] for k in mine}
            for step in range(max(len(paths[k]) for k in mine) + 1):
                guided.fill_next_token_bitmask(guides, out, order, threads=(None, 1, 2)[j])
                for i, k in enumerate(mine):
                    if step <= len(paths[k]):
                        rows[k].append(out[order[i]].copy())
                    if step < len(paths[k]):
                        guides[i].advance(paths[k][step])
            for k in mine:
                batched[r, j, k] = rows[k]

    def compiler() -> None:
        while not done.is_set() or len(compiled) < 4 * N_COMPILERS:
            i = next(requests)
            # Every third request repeats a recent key, so that hits and waits on a compile in
            # flight happen beside the evictions.
            pattern, good, bad = cache_job(i - 2 if i % 3 == 2 else i)
            index = cache.regex(pattern)
            guide = guided.Guide(index)
            for b in good:
                t = single[bytes([b])]
                assert has_bit(fill_row(guide, width), t), (pattern, good)
                guide.advance(t)
            assert guide.is_accepting(), (pattern, good)
            assert has_bit(fill_row(guide, width), eos), "EOS allowed at the end"
            state = index.initial_state
            for b in bad:
                state = index.next_state(state, single[bytes([b])])
            assert not index.is_accepting(state), (pattern, bad)
            with lock:
                compiled.append(i)

    maskers = [guarded(f"walker {w}", partial(walker, w)) for w in range(N_WALKERS)]
    maskers += [guarded(f"batcher {j}", partial(batcher, j)) for j in range(N_BATCHERS)]
    compilers = [guarded(f"compiler {c}", compiler) for c in range(N_COMPILERS)]
    for thread in maskers + compilers:
        thread.start()
    for thread in maskers:
        thread.join(timeout=120)
    done.set()
    for thread in compilers:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in maskers + compilers), "a worker hung"
    if errors:
        name, first = errors[0]
        raise AssertionError(f"{len(errors)} worker(s) failed, first {name}: {first!r}") from first

    assert len(shared) == ROUNDS
    stats = cache.stats
    assert stats.evictions > 0, stats
    # Every compile inserted one entry, which is either still there or was evicted once.
    assert stats.evictions == stats.compiles - len(cache), stats
    cache.trim()
    assert len(cache) == 1 or cache.memory_bytes() <= CACHE_BYTES, (len(cache), stats)

    fresh = spec.build(vocab)
    for k, path in enumerate(paths):
        want = walk(fresh, path)
        for t, row in zip(path, want):
            assert has_bit(row, t), "the path's token is allowed where it was drawn"
        got = [(f"walk {r}", walked[r, k]) for r in range(ROUNDS)]
        got += [(f"rewalk {r}", rewalked[r, k]) for r in range(ROUNDS)]
        got += [(f"batch {r}/{j}", rows) for (r, j, kk), rows in batched.items() if kk == k]
        for label, rows in got:
            assert len(rows) == len(want), (label, k)
            for step, (g, w) in enumerate(zip(rows, want)):
                assert np.array_equal(g, w), f"path {k}, {label}, step {step}"
    assert len(walked) == len(rewalked) == ROUNDS * N_WALKERS
    assert len(batched) == ROUNDS * N_BATCHERS * GUIDES_PER_BATCH
