"""TokenIndex, Guide and the batched fill, against brute force and real tokenizers.

The oracle for a mask is a brute-force walk: token ``t`` is allowed after the bytes ``P`` read so
far iff the DFA (itself tested against Python's ``re``) is not dead after ``P + bytes(t)``, and EOS
iff the DFA accepts ``P``. End to end, strings drawn from a pattern (Hypothesis's own
``from_regex``), tokenized by the real tokenizer, must be accepted token by token; and random
walks that only draw allowed tokens must produce text ``re.fullmatch`` accepts when they draw EOS.
"""

from __future__ import annotations

import pickle
import random
import re
import threading
from functools import cache

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import guided
from conftest import shared_path
from regex_strategies import oracle, patterns

# --- helpers --------------------------------------------------------------------------------------


def brute_allowed(dfa: guided.DFA, vocab: guided.Vocabulary, prefix: bytes) -> np.ndarray:
    """Allowed tokens after `prefix`, by walking each token's bytes through the DFA."""
    table = dfa.table
    state = dfa.start
    for b in prefix:
        state = int(table[state, b])
    out = np.zeros(vocab.vocab_size, dtype=bool)
    if state == 0:
        return out
    eos = set(vocab.eos_token_ids)
    for t in range(len(vocab)):
        if t in eos:
            out[t] = dfa.is_accepting(state)
            continue
        data = vocab.token_bytes(t)
        if not data:
            continue
        s = state
        for b in data:
            s = int(table[s, b])
            if s == 0:
                break
        out[t] = s != 0
    return out


def unpack(words: np.ndarray, vocab_size: int) -> np.ndarray:
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    return bits[:vocab_size].astype(bool)


def toy_vocab(tokens: list[bytes], extra: int = 0) -> guided.Vocabulary:
    return guided.Vocabulary(
        [*tokens, None], eos_token_ids=[len(tokens)], vocab_size=len(tokens) + 1 + extra
    )


@cache
def gpt2() -> guided.Vocabulary:
    return guided.Vocabulary.from_tokenizer_json(str(shared_path("vocab", "gpt2_tokenizer.json")))


@cache
def gpt2_tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(shared_path("vocab", "gpt2_tokenizer.json")))


# --- masks against brute force --------------------------------------------------------------------

small_tokens = st.lists(
    st.text(alphabet="abcAB01 .é-", min_size=1, max_size=3).map(str.encode), min_size=1, max_size=24
)


@given(st.data(), small_tokens)
@settings(max_examples=200)
def test_masks_equal_brute_force_on_random_patterns(
    data: st.DataObject, tokens: list[bytes]
) -> None:
    pattern, _ = data.draw(patterns(), label="pattern")
    assume(oracle(pattern) is not None)
    vocab = toy_vocab(tokens, extra=data.draw(st.integers(0, 40)))
    dfa = guided.DFA(pattern)
    lazy = guided.TokenIndex.from_regex(pattern, vocab)
    full = guided.TokenIndex(dfa, vocab)
    for index in (lazy, full):
        guide = guided.Guide(index)
        prefix = b""
        for _ in range(4):
            want = brute_allowed(dfa, vocab, prefix)
            got = index.allowed(guide.state)
            assert (got == want).all(), (pattern, prefix, np.flatnonzero(got != want))
            assert (unpack(index.bitmask(guide.state), vocab.vocab_size) == want).all()
            choices = [t for t in np.flatnonzero(want) if t not in vocab.eos_token_ids]
            if not choices:
                break
            t = int(data.draw(st.sampled_from(choices)))
            guide.advance(t)
            prefix += vocab.token_bytes(t) or b""


@pytest.mark.parametrize(
    "pattern",
    [
        r"[0-9]{1,6}",
        r"[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,4}",
        r'\{"name": "[^"\\]{0,20}", "age": (0|[1-9][0-9]{0,2})\}',
        r"(?:the|a|an) [a-z]+( [a-z]+){0,3}\.",
    ],
)
def test_masks_equal_brute_force_on_gpt2(pattern: str) -> None:
    vocab = gpt2()
    dfa = guided.DFA(pattern)
    index = guided.TokenIndex.from_regex(pattern, vocab)
    rng = random.Random(0)
    guide = guided.Guide(index)
    prefix = b""
    for _ in range(6):
        want = brute_allowed(dfa, vocab, prefix)
        assert (index.allowed(guide.state) == want).all()
        choices = [t for t in np.flatnonzero(want) if t not in vocab.eos_token_ids]
        if not choices:
            break
        t = rng.choice(choices)
        guide.advance(int(t))
        prefix += vocab.token_bytes(int(t)) or b""


# --- end to end with the real tokenizer -----------------------------------------------------------

E2E_PATTERNS = [
    r"[0-9]{1,8}",
    r"[a-z]{2,10}@[a-z]{2,8}\.(com|org|net)",
    r"(yes|no|maybe)( please)?",
    r'\{"x": -?[0-9]{1,3}, "s": "[a-zA-Z ]{0,12}"\}',
    r"[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8}){0,2}",
]


@pytest.mark.parametrize("pattern", E2E_PATTERNS)
@given(data=st.data())
@settings(max_examples=40)
def test_tokenized_matches_are_accepted(pattern: str, data: st.DataObject) -> None:
    text = data.draw(st.from_regex(pattern, fullmatch=True))
    ids = gpt2_tokenizer().encode(text).ids
    index = _e2e_index(pattern)
    guide = guided.Guide(index)
    for t in ids:
        assert guide.accept_token(t), (text, ids)
    assert guide.is_accepting()
    eos = index.eos_token_ids[0]
    assert index.allowed(guide.state)[eos]
    guide.advance(eos)
    assert guide.is_terminated() and guide.finished


@cache
def _e2e_index(pattern: str) -> guided.TokenIndex:
    return guided.TokenIndex.from_regex(pattern, gpt2())


@pytest.mark.parametrize("pattern", E2E_PATTERNS)
def test_random_walks_only_produce_matches(pattern: str) -> None:
    index = _e2e_index(pattern)
    vocab = gpt2()
    eos = set(index.eos_token_ids)
    rng = random.Random(1234)
    for _ in range(25):
        guide = guided.Guide(index)
        out = b""
        for _ in range(200):
            allowed = np.flatnonzero(index.allowed(guide.state))
            assert len(allowed), "a live state always allows something"
            t = int(rng.choice(allowed))
            guide.advance(t)
            if t in eos:
                break
            out += vocab.token_bytes(t) or b""
        if guide.is_terminated():
            assert re.fullmatch(pattern, out.decode("utf-8")), out


# --- guide invariants -----------------------------------------------------------------------------


def test_validate_rollback_copy_invariants() -> None:
    vocab = toy_vocab([b"a", b"b", b"ab", b"c"])
    index = guided.TokenIndex.from_regex("(ab)+c", vocab)
    guide = guided.Guide(index, max_rollback=-1)
    assert guide.validate_tokens([0, 1, 2, 3]) == 4
    assert guide.validate_tokens([0, 0]) == 1
    assert guide.state == index.initial_state
    states = [guide.state]
    for t in [2, 0, 1]:
        guide.advance(t)
        states.append(guide.state)
    twin = guide.copy()
    guide.rollback(2)
    assert guide.state == states[1]
    assert twin.state == states[3], "a copy is independent"
    with pytest.raises(guided.InvalidTokenError) as info:
        twin.advance(1)
    assert info.value.token == 1 and info.value.state == states[3]
    assert twin.state == states[3], "a refused token leaves the state alone"
    assert not twin.accept_tokens([3, 0])
    assert twin.state == states[3]
    assert twin.accept_tokens([3])
    assert twin.finished and not twin.is_terminated()
    with pytest.raises(guided.GuidedError):
        guide.rollback(10)
    guide.reset()
    assert guide.state == index.initial_state


def test_default_guide_keeps_no_history() -> None:
    index = guided.TokenIndex.from_regex("a+", toy_vocab([b"a"]))
    guide = guided.Guide(index)
    guide.advance(0)
    with pytest.raises(guided.GuidedError):
        guide.rollback(1)


def test_out_of_range_tokens_raise() -> None:
    vocab = toy_vocab([b"a"], extra=5)
    index = guided.TokenIndex.from_regex("a+", vocab)
    guide = guided.Guide(index)
    for bad in [-1, vocab.vocab_size, 10**12]:
        with pytest.raises(guided.InvalidTokenError):
            guide.advance(bad)
        with pytest.raises(guided.InvalidTokenError):
            index.next_state(index.initial_state, bad)
    # Padding ids beyond the tokenizer are in range but never allowed.
    assert not guide.accept_token(vocab.vocab_size - 1)
    assert guide.accept_token(0)


def test_forced_bytes() -> None:
    index = guided.TokenIndex.from_regex('\\{"key": (1|2)\\}', toy_vocab([b"{", b"x"]))
    guide = guided.Guide(index)
    assert guide.forced_bytes() == b'{"key": '


# --- buffers, batches, threads, pickling ----------------------------------------------------------


def test_fill_bitmask_numpy_and_torch() -> None:
    torch = pytest.importorskip("torch")
    vocab = toy_vocab([b"a", b"b"], extra=40)
    index = guided.TokenIndex.from_regex("ab", vocab)
    guide = guided.Guide(index)
    width = (vocab.vocab_size + 31) // 32
    arr = np.full((3, width), -1, dtype=np.int32)
    guide.fill_bitmask(arr, 2)
    assert (unpack(arr[2], vocab.vocab_size) == index.allowed(guide.state)).all()
    assert (arr[:2] == -1).all(), "other rows untouched"
    ten = torch.full((2, width), -1, dtype=torch.int32)
    guide.fill_bitmask(ten, 1)
    assert (ten[1].numpy() == arr[2]).all()
    allowed = guide.allowed()
    assert allowed.dtype == torch.bool and allowed.tolist() == index.allowed(guide.state).tolist()


def test_fills_into_a_tensor_view_write_only_its_rows() -> None:
    """A tensor is written through its data pointer: a view that starts inside a larger
    tensor (rows 1 and 2 of 4) must be written at its own offset, row by row, and nothing
    around it touched, by the single fill and the batch fill alike."""
    torch = pytest.importorskip("torch")
    vocab = toy_vocab([b"a", b"b", b"c"], extra=70)
    index = guided.TokenIndex.from_regex("a[bc]|c", vocab)
    width = (vocab.vocab_size + 31) // 32
    first, after_a = guided.Guide(index), guided.Guide(index)
    after_a.advance(0)  # "a"
    big = torch.full((4, width), -1, dtype=torch.int32)
    view = big[1:3]
    first.fill_bitmask(view, 1)
    after_a.fill_bitmask(view, 0)
    assert (big[1].numpy() == index.bitmask(after_a.state)).all()
    assert (big[2].numpy() == index.bitmask(first.state)).all()
    assert (big[0] == -1).all() and (big[3] == -1).all(), "rows outside the view untouched"
    big.fill_(-1)
    guided.fill_next_token_bitmask([first, after_a], view, [0, 1])
    assert (big[1].numpy() == index.bitmask(first.state)).all()
    assert (big[2].numpy() == index.bitmask(after_a.state)).all()
    assert (big[0] == -1).all() and (big[3] == -1).all(), "rows outside the view untouched"


@pytest.mark.parametrize(
    "make",
    [
        lambda w: np.zeros((2, w), dtype=np.int64),
        lambda w: np.zeros((2, w + 1), dtype=np.int32),
        lambda w: np.zeros((2, w * 2), dtype=np.int32)[:, ::2],
        lambda w: np.zeros(w, dtype=np.int32),
        lambda w: [[0] * w, [0] * w],
    ],
    ids=["dtype", "width", "non-contiguous", "1-d", "list"],
)
def test_bad_buffers_raise_and_write_nothing(make) -> None:  # type: ignore[no-untyped-def]
    vocab = toy_vocab([b"a"], extra=40)
    guide = guided.Guide(guided.TokenIndex.from_regex("a", vocab))
    width = (vocab.vocab_size + 31) // 32
    buf = make(width)
    before = np.array(buf, copy=True)
    with pytest.raises(guided.GuidedError):
        guide.fill_bitmask(buf, 0)
    assert (np.asarray(buf) == before).all()


def test_bad_rows_raise_and_write_nothing() -> None:
    vocab = toy_vocab([b"a"])
    guide = guided.Guide(guided.TokenIndex.from_regex("a", vocab))
    arr = np.full((2, 1), 7, dtype=np.int32)
    for row in [-1, 2]:
        with pytest.raises(guided.GuidedError):
            guide.fill_bitmask(arr, row)
    with pytest.raises(guided.GuidedError):
        guided.fill_next_token_bitmask([guide, guide], arr, [1, 1])
    with pytest.raises(guided.GuidedError):
        guided.fill_next_token_bitmask([guide], arr, [5])
    assert (arr == 7).all()


def test_batch_fill_equals_single_fills_and_threads_agree() -> None:
    vocab = gpt2()
    index = guided.TokenIndex.from_regex(r"[a-z ]{1,30}[.!?]", vocab)
    rng = random.Random(7)
    guides = []
    for _ in range(16):
        g = guided.Guide(index)
        for _ in range(rng.randrange(4)):
            choices = np.flatnonzero(index.allowed(g.state))
            choices = [t for t in choices if t not in index.eos_token_ids]
            g.advance(int(rng.choice(choices)))
        guides.append(g)
    width = (vocab.vocab_size + 31) // 32
    one = np.zeros((len(guides), width), dtype=np.int32)
    for i, g in enumerate(guides):
        g.fill_bitmask(one, i)
    for threads in [None, 1, 2, 4]:
        batch = np.zeros_like(one)
        guided.fill_next_token_bitmask(guides, batch, threads=threads)
        assert (batch == one).all()
    shuffled = list(range(len(guides)))
    rng.shuffle(shuffled)
    batch = np.zeros_like(one)
    guided.fill_next_token_bitmask(guides, batch, shuffled)
    assert (batch[shuffled] == one).all()


def test_many_threads_on_one_index() -> None:
    vocab = gpt2()
    index = guided.TokenIndex.from_regex(r"\([0-9a-f]{2,8}\)( \([0-9a-f]{2,8}\)){0,4}", vocab)
    reference = {}
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            rng = random.Random(seed)
            g = guided.Guide(index)
            for _ in range(12):
                mask = index.bitmask(g.state)
                key = g.state
                reference.setdefault(key, mask)
                assert (reference[key] == mask).all()
                choices = [
                    t
                    for t in np.flatnonzero(index.allowed(g.state))
                    if t not in index.eos_token_ids
                ]
                if not choices:
                    break
                g.advance(int(rng.choice(choices)))
        except BaseException as e:  # surfaced by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_pickle_round_trip_gives_identical_masks() -> None:
    vocab = gpt2()
    index = guided.TokenIndex.from_regex(r"[a-z]+@[a-z]+\.com", vocab, max_states=5000)
    clone = pickle.loads(pickle.dumps(index))
    assert clone.vocab_size == index.vocab_size
    g1, g2 = guided.Guide(index), guided.Guide(clone)
    for t in gpt2_tokenizer().encode("alice@example.com").ids:
        assert (index.bitmask(g1.state) == clone.bitmask(g2.state)).all()
        g1.advance(t)
        g2.advance(t)
    assert g1.is_accepting() and g2.is_accepting()


def test_dialects_survive_pickling_and_key_the_cache() -> None:
    vocab = toy_vocab([b"a", b"\n", b"b", b"z", b"\\"])
    newline = {"python": False, "ecma": False, "xgrammar": True, "rust": False}
    for dialect, allows_newline in newline.items():
        index = guided.TokenIndex.from_regex("a.b", vocab, dialect=dialect)  # type: ignore[arg-type]
        dfa = pickle.loads(pickle.dumps(guided.DFA("a.b", dialect=dialect)))  # type: ignore[arg-type]
        assert dfa.match("a\nb") is allows_newline
        for idx in (index, pickle.loads(pickle.dumps(index)), guided.TokenIndex(dfa, vocab)):
            after_a = idx.next_state(idx.initial_state, 0)
            assert bool(idx.allowed(after_a)[1]) is allows_newline, dialect
    cache = guided.IndexCache(vocab)
    # `\z` asserts the end in Python's reading and is the letter in xgrammar's
    python, xgrammar = cache.regex("a\\z"), cache.regex("a\\z", dialect="xgrammar")
    assert python is not xgrammar and cache.regex("a\\z", dialect="xgrammar") is xgrammar
    assert python.is_accepting(python.next_state(python.initial_state, 0))
    assert xgrammar.next_state(xgrammar.next_state(xgrammar.initial_state, 0), 3) > 0
    with pytest.raises(guided.GuidedError, match="unknown regex dialect"):
        guided.DFA("a", dialect="perl")  # type: ignore[arg-type]


def test_lazy_index_serves_a_pattern_whose_full_dfa_is_huge() -> None:
    vocab = toy_vocab([b"a", b"b", b"ab"])
    with pytest.raises(guided.SizeLimitError):
        guided.DFA("(a|b)*a(a|b){24}")
    index = guided.TokenIndex.from_regex("(a|b)*a(a|b){24}", vocab)
    guide = guided.Guide(index)
    for t in [2, 0, 1, 2] * 5:
        guide.advance(t)
    assert index.num_states < 2000
    with pytest.raises(guided.SizeLimitError):
        small = guided.TokenIndex.from_regex("(a|b)*a(a|b){24}", vocab, max_states=50)
        g = guided.Guide(small)
        for t in [2, 0, 1, 2] * 20:
            g.advance(t)


# --- bit-identical with xgrammar ------------------------------------------------------------------


@pytest.mark.parametrize("pattern", [r"[0-9]{1,5}", r"(cat|dog)s?", r"[a-z]+ [A-Z][a-z]*"])
def test_masks_bit_identical_to_xgrammar(pattern: str) -> None:
    xgr = pytest.importorskip("xgrammar")
    torch = pytest.importorskip("torch")
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=str(shared_path("vocab", "gpt2_tokenizer.json")))
    info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf), stop_token_ids=[50256])
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_regex(pattern))
    vocab = gpt2()
    guide = guided.Guide(guided.TokenIndex.from_regex(pattern, vocab))
    theirs = xgr.allocate_token_bitmask(1, info.vocab_size)
    ours = torch.zeros_like(theirs)
    rng = random.Random(3)
    for _ in range(5):
        matcher.fill_next_token_bitmask(theirs)
        guide.fill_bitmask(ours)
        assert torch.equal(theirs, ours)
        choices = [t for t in np.flatnonzero(guide.allowed().numpy()) if t != 50256]
        if not choices:
            break
        t = int(rng.choice(choices))
        assert matcher.accept_token(t)
        guide.advance(t)
