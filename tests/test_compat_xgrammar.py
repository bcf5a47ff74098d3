"""guided.compat.xgrammar against the real xgrammar, call for call.

Both libraries describe the real GPT-2 tokenizer (through ``TokenizerInfo.from_huggingface`` on a
``PreTrainedTokenizerFast`` read from the local ``tokenizer.json``), compile the same regexes, and
are driven through identical seeded call sequences: single and batched mask fills, token and
string acceptance, invalid tokens, rollbacks, jump-forward queries, termination. Every mask is
compared bit for bit over the vocabulary (xgrammar leaves the padding bits past ``vocab_size``
unspecified), and every return value and raised error class is compared too.

The built-in JSON grammar is the one place the shim cannot be equal: it bounds nesting depth.
There the shim's mask must be xgrammar's minus exactly the tokens that would nest too deep, by a
bracket-counting scanner that knows neither library.
"""

from __future__ import annotations

import functools
import json
import random
import re
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import lark_oracle
import numpy as np
import pytest
import regex as regex_oracle
import torch
import xgrammar as real
from compat_support import (
    GPT2_EOS,
    GPT2_VOCAB_SIZE,
    allowed_ids,
    gpt2_hf_tokenizer,
    gpt2_token_bytes,
    regex_corpus,
    unpack,
)
from grammar_oracle import Grammar
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

import guided
import guided.compat.xgrammar as shim
from guided.compat._support import complete_utf8, json_value_grammar
from regex_strategies import patterns

V = GPT2_VOCAB_SIZE
REGEXES = [
    r"(yes|no|maybe)[0-9]{1,3}",
    r"[a-z]{2,5}@[a-z]{2,4}\.(com|org)",
    r'"[^"\\\n]{0,8}"',
    r"-?(0|[1-9][0-9]{0,4})(\.[0-9]{1,3})?",
    r"(é|è|ü){1,3}x",
    r'\{"name": "[a-z]{1,6}", "age": [0-9]{1,2}\}',
    r"(ab|cd)+",
]


Infos = tuple[real.TokenizerInfo, shim.TokenizerInfo]
Compilers = tuple[real.GrammarCompiler, shim.GrammarCompiler]


@pytest.fixture(scope="module")
def infos() -> Infos:
    tok = gpt2_hf_tokenizer()
    return (
        real.TokenizerInfo.from_huggingface(tok, stop_token_ids=[GPT2_EOS]),
        shim.TokenizerInfo.from_huggingface(tok, stop_token_ids=[GPT2_EOS]),
    )


@pytest.fixture(scope="module")
def compilers(infos: Infos) -> Compilers:
    return real.GrammarCompiler(infos[0]), shim.GrammarCompiler(infos[1])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(np.array_equal(unpack(a.numpy(), V), unpack(b.numpy(), V)))


def test_tokenizer_info_matches(infos: Infos) -> None:
    r, s = infos
    assert s.vocab_size == r.vocab_size == V
    assert s.stop_token_ids == r.stop_token_ids == [GPT2_EOS]
    assert s.vocab_type == shim.VocabType.BYTE_LEVEL and r.vocab_type == real.VocabType.BYTE_LEVEL
    assert s.special_token_ids == r.special_token_ids
    rd, sd = r.decoded_vocab, s.decoded_vocab
    # xgrammar keeps the stop token's text; guided gives it none (it is never text)
    assert [rd[i] for i in range(V) if i != GPT2_EOS] == [sd[i] for i in range(V) if i != GPT2_EOS]
    # without explicit stop ids both find GPT-2's <|endoftext|>
    tok = gpt2_hf_tokenizer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = real.TokenizerInfo.from_huggingface(tok)
    assert shim.TokenizerInfo.from_huggingface(tok).stop_token_ids == auto.stop_token_ids


def test_encoded_vocab_decoding_matches() -> None:
    tok = gpt2_hf_tokenizer()
    encoded = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
    cases = [
        (encoded, "BYTE_LEVEL", [GPT2_EOS]),
        (["▁a", "<0x0A>", "x▁y", "<0x0A", "<0xE4>", "▁", "plain", "<0x7F>"], "BYTE_FALLBACK", [6]),
        (["a", "é", "\xc3", "", "</s>"], "RAW", None),
        ([b"a", b"\xff", b"", b"<eos>", b"ab"], "RAW", None),
    ]
    for vocab, kind, stops in cases:
        r = real.TokenizerInfo(vocab, real.VocabType[kind], stop_token_ids=stops, vocab_size=None)
        s = shim.TokenizerInfo(vocab, shim.VocabType[kind], stop_token_ids=stops)
        assert s.decoded_vocab == r.decoded_vocab, kind
        assert s.stop_token_ids == r.stop_token_ids, kind
        assert s.special_token_ids == r.special_token_ids, kind
    padded_r = real.TokenizerInfo([b"a", b"b"], stop_token_ids=[1], vocab_size=40)
    padded_s = shim.TokenizerInfo([b"a", b"b"], stop_token_ids=[1], vocab_size=40)
    assert padded_s.vocab_size == padded_r.vocab_size == 40
    assert padded_s.special_token_ids == padded_r.special_token_ids


@pytest.mark.parametrize(
    "names",
    [
        ["a", "</s>", "<eos>"],
        ["a", "<|eot_id|>", "b", "<|end_of_text|>"],
        ["x", "<｜end▁of▁sentence｜>"],
        ["a", "<|im_end|>", "<end_of_turn>"],
    ],
)
def test_stop_token_detection_matches(names: list[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert shim.TokenizerInfo(names).stop_token_ids == real.TokenizerInfo(names).stop_token_ids


def walk(pattern: str, seed: int, compilers: Compilers, infos: Infos) -> Counter[str]:
    rc, sc = compilers[0].compile_regex(pattern), compilers[1].compile_regex(pattern)
    rm, sm = real.GrammarMatcher(rc), shim.GrammarMatcher(sc)
    rb, sb = real.allocate_token_bitmask(3, V), shim.allocate_token_bitmask(3, V)
    batch_r, batch_s = real.BatchGrammarMatcher(2), shim.BatchGrammarMatcher(2)
    rng = random.Random(seed)
    steps = 0
    moves: Counter[str] = Counter()
    for _ in range(30):
        assert rm.is_terminated() == sm.is_terminated()
        assert rm.is_completed() == sm.is_completed()
        if sm.is_terminated():
            for m, b in ((rm, rb), (sm, sb)):
                with pytest.raises(RuntimeError):
                    m.fill_next_token_bitmask(b, 0)
                with pytest.raises(RuntimeError):
                    m.find_jump_forward_string()
                assert m.accept_token(GPT2_EOS) is False
            moves["terminated"] += 1
            break
        assert rm.fill_next_token_bitmask(rb, 1) == sm.fill_next_token_bitmask(sb, 1)
        assert same_bits(rb[1], sb[1]), (pattern, seed, steps)
        fork_r, fork_s = rm.fork(), sm.fork()
        batch_r.batch_fill_next_token_bitmask([rm, fork_r], rb, [2, 0])
        batch_s.batch_fill_next_token_bitmask([sm, fork_s], sb, [2, 0])
        assert same_bits(rb[2], sb[2]) and same_bits(rb[0], sb[0]) and same_bits(sb[0], sb[1])
        jump = rm.find_jump_forward_string()
        assert sm.find_jump_forward_string() == jump
        assert sm.find_jump_forward_tokens() == rm.find_jump_forward_tokens()
        allowed = sorted(allowed_ids(sb[1].numpy(), V))
        move = rng.random()
        if move < 0.1:
            bad = rng.randrange(V)
            if bad not in allowed:
                assert rm.accept_token(bad) is sm.accept_token(bad) is False
                moves["refused"] += 1
        elif move < 0.25 and steps:
            n = rng.randint(1, min(steps, 3))
            rm.rollback(n)
            sm.rollback(n)
            steps -= n
            moves["rollback"] += 1
        elif move < 0.35 and jump:
            assert rm.accept_string(jump) is sm.accept_string(jump) is True
            steps += 1
            moves["string"] += 1
        else:
            token = rng.choice(allowed)
            assert rm.accept_token(token) is sm.accept_token(token) is True
            steps += 1
            moves["token"] += 1
    return moves


@pytest.mark.parametrize("pattern", REGEXES)
def test_walks_match_xgrammar_bit_for_bit(pattern: str, compilers: Compilers, infos: Infos) -> None:
    moves = sum((walk(pattern, seed, compilers, infos) for seed in range(5)), Counter())
    assert moves["token"] > 5


def test_walks_cover_every_move(compilers: Compilers, infos: Infos) -> None:
    moves = sum(
        (walk(p, seed, compilers, infos) for p in REGEXES[:2] + REGEXES[5:6] for seed in range(5)),
        Counter(),
    )
    assert {"token", "string", "rollback", "refused", "terminated"} <= set(moves), moves


def test_errors_are_runtime_errors_and_guided_errors(compilers: Compilers) -> None:
    for compiler in compilers:
        with pytest.raises(RuntimeError):
            compiler.compile_regex("a(?=b)")
    with pytest.raises(guided.RegexSyntaxError) as info:
        compilers[1].compile_regex("a(?=b)")
    assert isinstance(info.value, RuntimeError) and info.value.position == 1
    rm = real.GrammarMatcher(compilers[0].compile_regex("ab"))
    sm = shim.GrammarMatcher(compilers[1].compile_regex("ab"))
    for m in (rm, sm):
        with pytest.raises(RuntimeError):
            m.rollback(1)
    for module in (real, shim):
        with pytest.raises(ValueError):
            module.GrammarMatcher("ab")  # type: ignore[arg-type]
    bad = torch.zeros(1, 3, dtype=torch.int32)
    for m in (rm, sm):
        with pytest.raises(RuntimeError):
            m.fill_next_token_bitmask(bad, 0)
    for compiler in compilers:
        with pytest.raises(RuntimeError):
            compiler.compile_grammar("root ::= undefined_rule")


def test_terminate_without_stop_token_and_override_stop_tokens() -> None:
    results = []
    for x in (real, shim):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            info = x.TokenizerInfo(["a", "b", "ab", "</s>", "<|eot|>", "c"], stop_token_ids=[3])
        grammar = x.GrammarCompiler(info).compile_regex("a+b?")
        out: list[object] = []
        bm = x.allocate_token_bitmask(1, 6)
        m = x.GrammarMatcher(grammar, terminate_without_stop_token=True)
        for t in [0, 3, 0, 1, 0]:
            bm.zero_()
            out.append(m.fill_next_token_bitmask(bm))
            out.append(bm.tolist())
            out.append((m.accept_token(t), m.is_terminated(), m.is_completed()))
        m = x.GrammarMatcher(grammar, override_stop_tokens=[4])
        out.append(m.stop_token_ids)
        for t in [3, 0, 3, 4]:
            bm.zero_()
            m.fill_next_token_bitmask(bm)
            out.append(bm.tolist())
            out.append((m.accept_token(t), m.is_terminated()))
        results.append(out)
    assert results[0] == results[1]


def test_accept_string_is_one_rollback_step(compilers: Compilers) -> None:
    outs = []
    for x, compiler in zip((real, shim), compilers):
        m = x.GrammarMatcher(compiler.compile_regex(r"hello, [a-z]+!"))
        bm = x.allocate_token_bitmask(1, V)
        out = [m.accept_string("hello, w"), m.accept_string("orld"), m.accept_string("X")]
        m.rollback(1)
        m.fill_next_token_bitmask(bm)
        out.append(unpack(bm[0].numpy(), V).tolist())
        out.append(m.find_jump_forward_string())
        outs.append(out)
    assert outs[0] == outs[1]


def test_compiled_grammar_serialization(compilers: Compilers, infos: Infos) -> None:
    grammar = compilers[1].compile_regex("(ab|cd)+")
    again = shim.CompiledGrammar.deserialize_json(grammar.serialize_json(), infos[1])
    a, b = shim.GrammarMatcher(grammar), shim.GrammarMatcher(again)
    ba, bb = shim.allocate_token_bitmask(1, V), shim.allocate_token_bitmask(1, V)
    a.fill_next_token_bitmask(ba)
    b.fill_next_token_bitmask(bb)
    assert torch.equal(ba, bb)
    other = shim.TokenizerInfo([b"a", b"b"], stop_token_ids=[1])
    with pytest.raises(RuntimeError, match="different vocabulary"):
        shim.CompiledGrammar.deserialize_json(grammar.serialize_json(), other)
    with pytest.raises(RuntimeError):
        shim.CompiledGrammar.deserialize_json("{}", infos[1])
    assert compilers[1].compile_regex("(ab|cd)+").token_index is grammar.token_index  # cached


def _completes_to_json(index: guided.TokenIndex, state: int, text: bytes, token: int) -> bool:
    """Whether ``text`` and ``token`` can be finished into JSON that ``json`` parses, taking the
    first of a few closing tokens the index allows at each step."""
    token_bytes = gpt2_token_bytes()
    ids = {b: t for t, b in token_bytes.items()}
    closers = [ids[b] for b in (b'"', b":", b"}", b"]", b"0")]
    state, text = index.next_state(state, token), text + token_bytes[token]
    for _ in range(300):
        if index.is_accepting(state):
            return isinstance(json.loads(text), (dict, list))
        following = [(t, index.next_state(state, t)) for t in closers]
        t, state = next(((t, s) for t, s in following if s > 0), (0, 0))
        if not state:
            return False
        text += token_bytes[t]
    return False


def test_builtin_json_grammar_is_xgrammars(compilers: Compilers) -> None:
    """Any JSON object or array, nested without bound: the masks are xgrammar's, along walks that
    mostly take brackets, commas and quotes, so they nest deep; but for the listed departure
    where xgrammar refuses a valid token (one that ``json`` confirms by finishing the text)."""
    token_bytes = gpt2_token_bytes()
    structural = {
        t for t, b in token_bytes.items() if b and len(b) <= 2 and set(b) <= set(b'{}[],:"1 tn')
    }
    openers = {t for t, b in token_bytes.items() if b in (b"[", b"{", b"[[", b' {"')}
    rg = compilers[0].compile_builtin_json_grammar()
    # compiled directly, and through a Grammar as xgrammar's Grammar.builtin_json_grammar makes one
    sgs = [
        compilers[1].compile_builtin_json_grammar(),
        compilers[1].compile_grammar(shim.Grammar.builtin_json_grammar()),
    ]
    rb, sb = real.allocate_token_bitmask(1, V), shim.allocate_token_bitmask(1, V)
    deepest = 0
    for seed in range(4):
        rng = random.Random(seed)
        sg = sgs[seed % 2]
        rm, sm = real.GrammarMatcher(rg), shim.GrammarMatcher(sg)
        text = b""
        for _ in range(60):
            if sm.is_terminated():
                break
            rm.fill_next_token_bitmask(rb)
            sm.fill_next_token_bitmask(sb)
            r_ids, s_ids = allowed_ids(rb[0].numpy(), V), allowed_ids(sb[0].numpy(), V)
            assert r_ids <= s_ids, (seed, text)
            for t in s_ids - r_ids:
                assert _completes_to_json(sg.token_index, sm.guide.state, text, t), (text, t)
            opening = sorted(s_ids & openers) if rng.random() < 0.3 else []
            pool = sorted(s_ids & structural) if rng.random() < 0.8 else []
            token = rng.choice(opening or pool or sorted(s_ids))
            assert rm.accept_token(token) and sm.accept_token(token)
            if token != GPT2_EOS:
                text += token_bytes[token]
                depth = sum(text.count(c) for c in b"[{") - sum(text.count(c) for c in b"]}")
                deepest = max(deepest, depth)
        if sm.is_terminated():
            json.loads(text)
    assert deepest > 5


@pytest.mark.parametrize("vocab_size", [None, 70])
@pytest.mark.parametrize("indices", [None, [0, 2]])
def test_apply_token_bitmask_inplace_matches(
    vocab_size: int | None, indices: list[int] | None
) -> None:
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(3, 100, generator=gen)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (3, 4), dtype=torch.int32, generator=gen)
    expected, got = logits.clone(), logits.clone()
    real.apply_token_bitmask_inplace(expected, bitmask, vocab_size=vocab_size, indices=indices)
    shim.apply_token_bitmask_inplace(got, bitmask, vocab_size=vocab_size, indices=indices)
    assert torch.equal(expected, got)
    assert torch.isinf(got).any()


def test_bitmask_helpers_match() -> None:
    assert shim.get_bitmask_shape(3, V) == real.get_bitmask_shape(3, V)
    assert shim.bitmask_dtype == real.bitmask_dtype
    a, b = shim.allocate_token_bitmask(2, 77), real.allocate_token_bitmask(2, 77)
    assert torch.equal(a, b) and a.dtype == b.dtype
    shim.reset_token_bitmask(a.zero_())
    assert torch.equal(a, b)
    with pytest.raises(ValueError):
        shim.apply_token_bitmask_inplace(torch.zeros(1, 4), a, backend="nope")  # type: ignore[arg-type]


def test_batch_helpers_match(compilers: Compilers) -> None:
    outs = []
    for x, compiler in zip((real, shim), compilers):
        grammar = compiler.compile_regex("(ab|cd)+")
        ms = [x.GrammarMatcher(grammar) for _ in range(3)]
        ab = gpt2_hf_tokenizer().convert_tokens_to_ids("ab")
        out: list[object] = [x.BatchGrammarMatcher.batch_accept_token(ms, [ab, 0, ab])]
        out.append(x.BatchGrammarMatcher.batch_accept_string(ms, ["cd", "ab", "x"]))
        x.BatchGrammarMatcher.batch_rollback(ms, [1, 0, 0])
        temps = torch.zeros(3)
        x.BatchGrammarMatcher.batch_fill_temperature(ms, temps)
        out.append(temps.tolist())
        bm = x.allocate_token_bitmask(3, V)
        x.BatchGrammarMatcher().batch_fill_next_token_bitmask(ms, bm)
        out.append([unpack(bm[i].numpy(), V).tolist() for i in range(3)])
        outs.append(out)
    assert outs[0] == outs[1]


@pytest.mark.skipif(
    not hasattr(guided.TokenIndex, "from_json_schema"),
    reason="guided.TokenIndex.from_json_schema is not in this build (JSON Schema lands separately)",
)
def test_compile_json_schema_matches_xgrammar(compilers: Compilers) -> None:
    schema = {
        "type": "object",
        "properties": {
            "kind": {"enum": ["cat", "dog"]},
            "ok": {"type": "boolean"},
            "tag": {"const": "x"},
        },
        "required": ["kind", "ok", "tag"],
    }
    options = {"any_whitespace": False, "separators": (",", ":")}
    rg = compilers[0].compile_json_schema(json.dumps(schema), **options)
    # compiled directly, and through a Grammar as xgrammar's Grammar.from_json_schema makes one
    sgs = [
        compilers[1].compile_json_schema(schema, **options),
        compilers[1].compile_grammar(shim.Grammar.from_json_schema(schema, **options)),
    ]
    for seed in range(4):
        rng = random.Random(seed)
        rm, sm = real.GrammarMatcher(rg), shim.GrammarMatcher(sgs[seed % 2])
        rb, sb = real.allocate_token_bitmask(1, V), shim.allocate_token_bitmask(1, V)
        while not sm.is_terminated():
            rm.fill_next_token_bitmask(rb)
            sm.fill_next_token_bitmask(sb)
            assert same_bits(rb[0], sb[0])
            token = rng.choice(sorted(allowed_ids(sb[0].numpy(), V)))
            assert rm.accept_token(token) and sm.accept_token(token)
        assert rm.is_terminated()
    with pytest.raises(RuntimeError):
        compilers[1].compile_json_schema(schema, any_whitespace=False)
    with pytest.raises(guided.UnsupportedSchemaError):
        compilers[1].compile_json_schema(schema, any_order=True)


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=12,
)


@functools.cache
def _json_index() -> guided.TokenIndex:
    vocab = guided.Vocabulary([bytes([b]) for b in range(256)] + [None], eos_token_ids=[256])
    return guided.TokenIndex.from_grammar(json_value_grammar(), vocab)


def _json_accepts(text: str) -> bool:
    guide = guided.Guide(_json_index())
    return all(guide.accept_token(b) for b in text.encode()) and bool(guide.is_accepting())


@settings(max_examples=200)
@given(doc=_JSON, indent=st.sampled_from([None, 1, "\t"]), ascii_only=st.booleans())
def test_json_grammar_is_json_objects_and_arrays(
    doc: object, indent: int | str | None, ascii_only: bool
) -> None:
    text = json.dumps(doc, indent=indent, ensure_ascii=ascii_only)
    assert _json_accepts(text) is isinstance(doc, (dict, list)), text
    nested = "[" * 40 + text + "]" * 40
    assert _json_accepts(nested)


@settings(max_examples=300)
@given(
    doc=_JSON,
    cut=st.integers(0, 200),
    junk=st.sampled_from(["", ",", "]", "}", "\\", '"', "0", " x"]),
)
def test_json_grammar_accepts_nothing_but_json(doc: object, cut: int, junk: str) -> None:
    text = json.dumps(doc)
    mutated = text[:cut] + junk + text[cut + 1 :]
    if _json_accepts(mutated):
        assert isinstance(json.loads(mutated), (dict, list))


@given(text=st.text(max_size=8), start=st.integers(0, 40), stop=st.integers(0, 40))
def test_complete_utf8_keeps_whole_characters(text: str, start: int, stop: int) -> None:
    data = text.encode("utf-8", errors="surrogatepass")[start : start + stop]
    got = complete_utf8(data)
    if data and 0x80 <= data[0] <= 0xBF:
        assert got == ""  # a split head yields nothing
        return
    best = ""
    for cut in range(len(data) + 1):  # brute force: the longest decodable prefix
        try:
            best = data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            pass
    assert got == best


# Where xgrammar's reading of a pattern leaves the pattern's own language, the shim keeps the
# language. Each case: the pattern, the same language in Python's `re` (the oracle for the shim),
# a text, whether xgrammar accepts it, and what xgrammar does. The test checks both halves, so the
# list stays true when xgrammar changes.
XGRAMMAR_DEPARTURES = [
    ("a^b", "a^b", "ab", True, "drops a `^` in mid-pattern"),
    ("a$b", "a$b", "ab", True, "drops a `$` in mid-pattern"),
    (r"[\^]", r"\^", "x", True, "reads `[\\^]` as `[^]`, any character"),
    (r"[\w-z]", r"[\w\-z]", "`", True, "pastes `\\w` in as text, so `_-z` becomes a range"),
    (r"\ud83d\ude00", "\U0001f600", "\U0001f600", False, "splits a surrogate pair"),
    (r"\x41a", "Aa", "Aa", False, "reads every hex digit after `\\x` or `\\u`: U+041A"),
    (r"[\u00e9a]", "[éa]", "a", False, "reads every hex digit after `\\u`, in a class too"),
    (".+", "(?s:.+)", "", True, "accepts too short a text after a broad class repeated at the end"),
    ("x[^a]{2,}", "x[^a]{2,}", "xb", True, "the same, for `[^a]{2,}`"),
    (".*.", "(?s:.*.)", "", True, "the same, for `.*.`"),
]
# Inputs that meet a listed departure; the differential test below steers around them.
_DEPARTS = re.compile(r"\[\\\^|\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4})([0-9a-fA-F]|\\[dw])")
# ECMA-262's white space, which xgrammar's `\s` is, as ranges for Python's `re`, and its complement.
_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A)]
_SPACE += [(0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
_NOT_SPACE = [(b[1] + 1, a[0] - 1) for a, b in zip(_SPACE[1:], _SPACE)]
_NOT_SPACE = [(0, 0x08), *_NOT_SPACE, (0xFF00, 0x10FFFF)]


def _ranges(pairs: list[tuple[int, int]]) -> str:
    return "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in pairs)


def python_oracle(pattern: str) -> re.Pattern[str]:
    """An xgrammar-dialect pattern from the generator, as Python's `re` reads the same language:
    `.` matches newlines, `\\s` is ECMA-262's white space, a named group is a group."""

    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            e = pattern[i + 1]
            if e in "sS":
                inner = _ranges(_SPACE if e == "s" else _NOT_SPACE)
                # inside a class the ranges join the class; outside they make their own
                out.append(inner if in_class else f"[{inner}]")
            else:
                out.append(c + e)
            i += 2
            continue
        in_class = (in_class or c == "[") and not (in_class and c == "]")
        out.append(c)
        i += 1
    text = "".join(out).replace("(?<g>", "(?:")
    return re.compile(text, re.S | re.A)


def _walk(dfa: guided.DFA, data: bytes) -> int:
    state = dfa.start
    for byte in data:
        state = dfa.next_state(state, byte)
    return state


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:  # a character split between tokens
        return None


def _accepts(compiled: real.CompiledGrammar | shim.CompiledGrammar, text: str) -> bool:
    matcher = (real if isinstance(compiled, real.CompiledGrammar) else shim).GrammarMatcher(
        compiled
    )
    return (not text or matcher.accept_string(text)) and matcher.accept_token(GPT2_EOS)


@pytest.mark.parametrize(
    ("pattern", "python", "text", "xgrammar_accepts", "why"), XGRAMMAR_DEPARTURES
)
def test_listed_departures_from_xgrammar(
    pattern: str, python: str, text: str, xgrammar_accepts: bool, why: str, compilers: Compilers
) -> None:
    assert _accepts(compilers[0].compile_regex(pattern), text) is xgrammar_accepts, why
    in_language = re.fullmatch(python, text) is not None
    assert in_language is not xgrammar_accepts
    assert _accepts(compilers[1].compile_regex(pattern), text) is in_language


def test_xgrammar_lets_tokens_into_dead_ends(compilers: Compilers) -> None:
    # Also listed: xgrammar allows `a` where nothing can follow it; the shim allows nothing.
    a = gpt2_hf_tokenizer().encode("a")[0]
    masks = []
    for mod, compiler in zip((real, shim), compilers):
        bitmask = mod.allocate_token_bitmask(1, V)
        mod.GrammarMatcher(compiler.compile_regex(r"a[^\d\D]")).fill_next_token_bitmask(bitmask)
        masks.append(allowed_ids(bitmask[0].numpy(), V))
    assert a in masks[0]
    assert masks[1] == set()


def test_code_points_past_unicode_are_refused() -> None:
    # xgrammar compiles `\u{110000}` into a grammar that matches nothing; the shim refuses it.
    with pytest.raises(guided.RegexSyntaxError):
        shim.GrammarCompiler(shim.TokenizerInfo(["a"])).compile_regex(r"x\u{110000}")


def compare_with_xgrammar(
    pattern: str,
    text: str,
    compilers: Compilers,
    oracle: re.Pattern[str] | None = None,
) -> str:
    """Compiles ``pattern`` with xgrammar and the shim and walks both along ``text``'s tokens,
    comparing masks at every step until the shim refuses a token. Masks must be equal but for
    the listed departures: xgrammar ending a text that is not yet a match, or letting it into a
    dead end (`a[^\\d\\D]` allows `a`), judged by the pattern's automaton, since neither `re`
    nor `regex` can tell a dead end; and, where ``oracle`` (the pattern's language in `re`, which
    the shim's EOS bit must follow) is given, xgrammar refusing a token that `regex` says can
    still lead to a match. Returns what happened, for the tallies."""
    compiled = []
    for compiler in compilers:
        try:
            compiled.append(compiler.compile_regex(pattern))
        except RuntimeError:
            compiled.append(None)
    if compiled[0] is None or compiled[1] is None:
        return {
            (True, True): "refused by both",
            (False, True): "refused by the shim",
            (True, False): "refused by xgrammar",
        }[(compiled[0] is None, compiled[1] is None)]
    rm, sm = real.GrammarMatcher(compiled[0]), shim.GrammarMatcher(compiled[1])
    rb, sb = real.allocate_token_bitmask(1, V), shim.allocate_token_bitmask(1, V)
    automaton = guided.DFA(pattern, dialect="xgrammar", max_states=100_000)
    outcome = "equal"
    done = b""
    for token in [*gpt2_hf_tokenizer().encode(text), None]:
        rm.fill_next_token_bitmask(rb)
        sm.fill_next_token_bitmask(sb)
        ours, theirs = allowed_ids(sb[0].numpy(), V), allowed_ids(rb[0].numpy(), V)
        if oracle is not None:
            so_far = _text(done)
            complete = so_far is not None and oracle.fullmatch(so_far) is not None
            assert (GPT2_EOS in ours) is complete, (pattern, done)
        for missing in ours - theirs:
            # the listed departure: xgrammar refuses a valid token (`\\.*\\S` refuses `.)`)
            outcome = "departed as listed"
            assert oracle is not None and missing != GPT2_EOS, (pattern, done, missing)
            longer = _text(done + gpt2_token_bytes()[missing])
            viable = regex_oracle.compile(oracle.pattern, regex_oracle.S | regex_oracle.A)
            assert longer is not None and viable.fullmatch(longer, partial=True), (pattern, longer)
        for extra in theirs - ours:
            outcome = "departed as listed"
            if extra == GPT2_EOS:
                assert not automaton.match(done), (pattern, done)
            else:
                assert _walk(automaton, done + gpt2_token_bytes()[extra]) == 0, (pattern, extra)
        if token is None or token not in ours:
            break
        assert rm.accept_token(token) and sm.accept_token(token)
        done += gpt2_token_bytes()[token]
    return outcome


@settings(max_examples=120)
@given(data=st.data())
def test_xgrammar_dialect_masks_equal_xgrammar(data: st.DataObject, compilers: Compilers) -> None:
    """Patterns in xgrammar's dialect, compiled by both; masks equal at every step of a text."""
    pattern, node = data.draw(patterns("xgrammar"), label="pattern")
    assume(not _DEPARTS.search(pattern))
    text = node.gen(data.draw)
    outcome = compare_with_xgrammar(pattern, text, compilers, python_oracle(pattern))
    assert outcome in ("equal", "departed as listed", "refused by both"), (pattern, outcome)
    event(outcome)


def test_corpus_patterns_mask_as_xgrammar(
    compilers: Compilers, capsys: pytest.CaptureFixture[str]
) -> None:
    """rust-lang/regex's patterns and haystacks, read in xgrammar's dialect by both."""
    tally: Counter[str] = Counter()
    for pattern, text in regex_corpus():
        if _DEPARTS.search(pattern):
            tally["skipped: a listed departure in the text of the pattern"] += 1
            continue
        outcome = compare_with_xgrammar(pattern, text, compilers)
        if outcome == "refused by the shim":
            # xgrammar drops a mid-pattern `^` or `$` and repeats what came before it
            assert re.search(r"[$^][*+?{]", pattern), pattern
        assert outcome != "refused by xgrammar", pattern
        tally[outcome] += 1
    with capsys.disabled():
        print("\nrust-lang/regex patterns, xgrammar and guided.compat.xgrammar:", dict(tally))
    assert tally["equal"] > 400


GRAMMAR_FILES = sorted(
    p for p in (Path(__file__).parent / "data" / "grammars").iterdir() if p.suffix != ".lark"
)
# xgrammar 0.2.9's EBNF reader refuses an empty alternative (`ws ::= | " "`), which GBNF allows.
XGRAMMAR_REFUSES = {"json.gbnf", "json_arr.gbnf"}


def walk_against_xgrammar(
    compiled: tuple[real.CompiledGrammar, shim.CompiledGrammar],
    derive: Callable[[random.Random], str],
    judge: Callable[[bytes, set[int], set[int]], None],
    rng: random.Random,
    walks: int,
) -> int:
    """Walks xgrammar's and the shim's matchers along derivations, half of them wandering on
    random tokens both allow once the derivation is spent; ``judge(text so far, xgrammar's
    ids, the shim's ids)`` rules on every step where the masks differ. Returns the steps."""
    token_bytes = gpt2_token_bytes()
    steps = 0
    for walk in range(walks):
        rm, sm = real.GrammarMatcher(compiled[0]), shim.GrammarMatcher(compiled[1])
        rb, sb = real.allocate_token_bitmask(1, V), shim.allocate_token_bitmask(1, V)
        planned = gpt2_hf_tokenizer().encode(derive(rng))
        done = b""
        for step in range(60):
            rm.fill_next_token_bitmask(rb)
            sm.fill_next_token_bitmask(sb)
            r_ids, s_ids = allowed_ids(rb[0].numpy(), V), allowed_ids(sb[0].numpy(), V)
            if r_ids != s_ids:
                judge(done, r_ids, s_ids)
            allowed = sorted(s_ids & r_ids - {GPT2_EOS})
            if step < len(planned):
                token = planned[step]
            elif walk % 2 and allowed:
                token = rng.choice(allowed)
            else:
                break
            assert rm.accept_token(token) and sm.accept_token(token), token_bytes.get(token)
            done += token_bytes[token]
            steps += 1
    return steps


@pytest.mark.parametrize("path", GRAMMAR_FILES, ids=lambda p: p.name)
def test_grammars_mask_as_xgrammar(path: Path, compilers: Compilers) -> None:
    """llama.cpp's grammars, compiled by xgrammar and by the shim, walked along derivations (from
    the independent reader in ``grammar_oracle``) and along random tokens both allow. Masks are
    equal bit for bit but for the listed departure: xgrammar ends a text that is not complete
    (`en-char+` at the start of english.gbnf), which Lark's parser judges."""
    text = path.read_text()
    oracle = Grammar(text)
    ours = compilers[1].compile_grammar(text)
    if path.name in XGRAMMAR_REFUSES:
        with pytest.raises(RuntimeError, match="Expect element"):
            compilers[0].compile_grammar(text)
        return
    theirs = compilers[0].compile_grammar(text)
    assert isinstance(shim.Grammar.from_ebnf(text), shim.Grammar)

    def judge(done: bytes, r_ids: set[int], s_ids: set[int]) -> None:
        assert s_ids <= r_ids and r_ids - s_ids <= {GPT2_EOS}, (path.name, done)
        so_far = _text(done)  # a character split between tokens is never complete
        assert so_far is None or not oracle.accepts(so_far), (path.name, done)

    derive = functools.partial(oracle.derive, budget=40)
    rng = random.Random(path.name)
    assert walk_against_xgrammar((theirs, ours), derive, judge, rng, walks=6) > 30


LARK_FILES = sorted((Path(__file__).parent / "data" / "grammars").glob("*.lark"))


@pytest.mark.parametrize("path", LARK_FILES, ids=lambda p: p.name)
def test_lark_grammars_mask_as_xgrammar(path: Path, compilers: Compilers) -> None:
    """Lark grammars through ``Grammar.from_lark``, by xgrammar and by the shim, walked along
    derivations drawn from Lark's own reading of the grammar and then along random tokens both
    allow. Masks are equal but for two listed xgrammar departures from Lark: it allows no
    ignored text before the first terminal (Lark skips ``%ignore``d text anywhere), and it lets
    ``ESCAPED_STRING`` hold a raw line break (Lark's is ``".*?"`` with a ``.`` that does not
    match one)."""
    text = path.read_text()
    theirs = compilers[0].compile_grammar(real.Grammar.from_lark(text))
    ours = compilers[1].compile_grammar(shim.Grammar.from_lark(text))
    token_bytes = gpt2_token_bytes()

    def judge(done: bytes, r_ids: set[int], s_ids: set[int]) -> None:
        if not done:
            # ignored white space first, which Lark reads too (tests/test_lark_grammar.py holds
            # the shim's language to Lark's)
            assert r_ids <= s_ids, path.name
            for t in s_ids - r_ids:
                assert token_bytes[t][:1].isspace(), (path.name, token_bytes[t])
        else:
            assert s_ids <= r_ids, (path.name, done)
            for t in r_ids - s_ids:  # a raw line break inside a string
                assert b"\n" in token_bytes[t] and b'"' in done, (path.name, done)

    def derive(rng: random.Random) -> str:
        return lark_oracle.derive(text, rng).lstrip(" \t\n\r\f")

    rng = random.Random(path.name)
    assert walk_against_xgrammar((theirs, ours), derive, judge, rng, walks=4) > 20
