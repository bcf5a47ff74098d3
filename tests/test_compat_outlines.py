"""guided.compat.outlines_core against the real outlines-core, call for call.

Both packages get the same GPT-2 vocabulary map (read independently of either, the way vLLM builds
it) and the same regexes, and are driven through identical call sequences: seeded random walks
that advance, test sequences with ``accepts_tokens``, roll back, and write masks through raw
pointers. Masks must agree bit for bit at every step, and so must every return value whose
meaning both packages share (allowed tokens as sets, finishedness, rollback capacity, errors).

One family of regexes cannot agree: outlines-core refuses a token whose last byte turns a complete
match into an incomplete one (its automaton reports matches one byte late). For those, the shim's
mask must equal outlines-core's plus exactly the tokens that rule predicts, and each extra token
must be a valid continuation by the ``regex`` package's partial matching, an oracle independent of
both.
"""

from __future__ import annotations

import copy
import json
import pickle
import random
from collections import Counter

import numpy as np
import outlines_core as real
import pytest
import regex as regex_oracle
import torch
from compat_support import (
    GPT2_EOS,
    allowed_ids,
    gpt2_hf_tokenizer,
    gpt2_token_bytes,
    gpt2_token_map,
    gpt2_tokenizer_json,
    regex_corpus,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st

import guided
import guided.compat.outlines_core as shim
from regex_strategies import patterns

# Regexes on which outlines-core's masks are exact (no token's last byte can turn a complete
# match into an incomplete one).
EXACT = [
    r"(yes|no|maybe)",
    r"[a-z]{2,5}@[a-z]{2,4}\.(com|org)",
    r'"[^"\\\n]{0,6}"',
    r"(é|è|ü){1,3}x",
    r'\{"a": (true|false), "b": [0-9]{1,3}\}',
    r"[A-Z][a-z]{0,3}",
]
# Regexes where outlines-core drops valid tokens.
DROPPING = [
    r"-?(0|[1-9][0-9]{0,4})(\.[0-9]{1,3})?",
    r"[a-c]+(-[a-c]+)?",
    r"(ab|cd)+",
]


Vocabs = tuple[real.Vocabulary, shim.Vocabulary]


@pytest.fixture(scope="module")
def vocabs() -> Vocabs:
    mapping = gpt2_token_map()
    return real.Vocabulary(GPT2_EOS, mapping), shim.Vocabulary(GPT2_EOS, mapping)


def mask_of(guide: real.Guide | shim.Guide, words: int) -> np.ndarray:
    buf = torch.full((words,), 0x5A5A5A5A, dtype=torch.int32)
    guide.write_mask_into(buf.data_ptr(), buf.numel(), buf.element_size())
    return buf.numpy().copy()


def drive(pattern: str, vocabs: Vocabs, seed: int) -> int:
    """One seeded walk through both packages; returns the number of steps taken."""
    rv, sv = vocabs
    ri, si = real.Index(pattern, rv), shim.Index(pattern, sv)
    rg, sg = real.Guide(ri, max_rollback=4), shim.Guide(si, max_rollback=4)
    words = (len(rv) + 31) // 32
    assert words == (si.token_index.vocab_size + 31) // 32
    assert ri.get_allowed_tokens(ri.get_initial_state()) is not None
    assert set(ri.get_allowed_tokens(ri.get_initial_state())) == set(
        si.get_allowed_tokens(si.get_initial_state()) or []
    )
    rng = random.Random(seed)
    steps = 0
    for _ in range(40):
        r_mask, s_mask = mask_of(rg, words), mask_of(sg, words)
        assert np.array_equal(r_mask, s_mask), (pattern, seed, steps)
        assert set(rg.get_tokens()) == set(sg.get_tokens())
        assert rg.is_finished() == sg.is_finished()
        assert rg.get_allowed_rollback() == sg.get_allowed_rollback()
        choices = sorted(set(sg.get_tokens()) - {GPT2_EOS})
        if not choices:
            break
        probe = [rng.choice(choices), rng.randrange(50000), rng.choice(choices)]
        assert rg.accepts_tokens(probe) == sg.accepts_tokens(probe)
        assert rg.accepts_tokens([GPT2_EOS]) == sg.accepts_tokens([GPT2_EOS]) is False
        move = rng.random()
        if move < 0.15 and sg.get_allowed_rollback():
            n = rng.randint(1, sg.get_allowed_rollback())
            rg.rollback_state(n)
            sg.rollback_state(n)
        else:
            token = rng.choice(choices)
            returned = sg.advance(token, return_tokens=move < 0.5)
            expected = rg.advance(token, return_tokens=move < 0.5)
            if expected is None:
                assert returned is None
            else:
                assert returned is not None and set(returned) == set(expected)
        steps += 1
    return steps


@pytest.mark.parametrize("pattern", EXACT)
def test_walks_match_outlines_core_bit_for_bit(pattern: str, vocabs: Vocabs) -> None:
    total = sum(drive(pattern, vocabs, seed) for seed in range(6))
    assert total > 6  # the walks went somewhere


@pytest.mark.parametrize("pattern", DROPPING)
def test_masks_exceed_outlines_core_by_exactly_its_dropped_tokens(
    pattern: str, vocabs: Vocabs
) -> None:
    rv, sv = vocabs
    token_bytes = gpt2_token_bytes()
    ri, si = real.Index(pattern, rv), shim.Index(pattern, sv)
    words = (len(rv) + 31) // 32
    seen_drop = False
    for seed in range(6):
        rng = random.Random(seed)
        rg, sg = real.Guide(ri), shim.Guide(si)
        text = ""
        for _ in range(12):
            r_ids = allowed_ids(mask_of(rg, words), len(rv))
            s_ids = allowed_ids(mask_of(sg, words), len(rv))
            assert r_ids <= s_ids
            predicted = set()
            for t in s_ids - {GPT2_EOS}:
                data = token_bytes[t].decode("utf-8")
                # a valid continuation, by an oracle that knows neither package
                assert regex_oracle.fullmatch(pattern, text + data, partial=True), (text, data)
                if regex_oracle.fullmatch(pattern, text + data[:-1]) and not (
                    regex_oracle.fullmatch(pattern, text + data)
                ):
                    predicted.add(t)
            assert s_ids - r_ids == predicted, (pattern, text)
            seen_drop |= bool(predicted)
            choices = sorted(r_ids - {GPT2_EOS})
            if not choices:
                break
            token = rng.choice(choices)
            rg.advance(token, return_tokens=False)
            sg.advance(token, return_tokens=False)
            text += token_bytes[token].decode("utf-8")
    assert seen_drop  # the regex does exercise the difference


def test_index_structure_matches(vocabs: Vocabs) -> None:
    """get_transitions / get_final_states describe the same automaton (up to state names):
    walking both from their initial states in lockstep pairs states with equal token sets."""
    rv, sv = vocabs
    for pattern in [r"(yes|no|maybe)", r"[0-9]{2}", r"(é|è|ü){1,3}x"]:
        ri, si = real.Index(pattern, rv), shim.Index(pattern, sv)
        rt, st = ri.get_transitions(), si.get_transitions()
        rf, sf = ri.get_final_states(), si.get_final_states()
        pairs = {(ri.get_initial_state(), si.get_initial_state())}
        todo = list(pairs)
        while todo:
            r, s = todo.pop()
            assert set(rt[r]) == set(st[s]), pattern
            assert (r in rf) == (s in sf) == si.is_final_state(s) == ri.is_final_state(r)
            for token, rn in rt[r].items():
                pair = (rn, st[s][token])
                assert si.get_next_state(s, token) == (None if token == GPT2_EOS else pair[1])
                if pair not in pairs:
                    pairs.add(pair)
                    todo.append(pair)
        assert {r for r, _ in pairs} == set(rt)
        assert {s for _, s in pairs} == set(st)


def test_pickling_and_copies(vocabs: Vocabs) -> None:
    _, sv = vocabs
    index = shim.Index(r"(ab|cd)+", sv)
    guide = shim.Guide(index, max_rollback=3)
    ab = sv.get(b"ab")
    assert ab is not None
    guide.advance(ab[0], return_tokens=False)
    words = (index.token_index.vocab_size + 31) // 32
    index2 = pickle.loads(pickle.dumps(index))
    guide2 = pickle.loads(pickle.dumps(guide))
    assert np.array_equal(mask_of(guide, words), mask_of(guide2, words))
    assert guide2.get_allowed_rollback() == 1
    assert index2.get_allowed_tokens(index2.get_initial_state()) == index.get_allowed_tokens(
        index.get_initial_state()
    )
    assert pickle.loads(pickle.dumps(sv)) == sv
    assert copy.deepcopy(sv) == sv


def test_vocabulary_surface_matches() -> None:
    for module in (real, shim):
        with pytest.raises(TypeError):
            module.Vocabulary(3, {"a": [0], b"b": [1]})
        with pytest.raises(ValueError, match="EOS"):
            module.Vocabulary(3, {"a": [3]})
    results = []
    for module in (real, shim):
        v = module.Vocabulary(9, {"é": [0], "b": [1, 4]})
        got = [v.get_eos_token_id(), len(v), v.get("é"), v.get("é".encode()), v.get(b"b")]
        v.insert("zz", 7)
        got += [v.get("zz"), len(v)]
        v.remove("zz")
        got += [v.get("zz"), len(v)]
        results.append(got)
    assert results[0] == results[1]


def test_mutated_vocabulary_recompiles() -> None:
    v = shim.Vocabulary(5, {b"a": [0]})
    with pytest.raises(ValueError, match="incompatible"):
        shim.Index("b", v)
    v.insert(b"b", 1)
    assert shim.Index("b", v).get_allowed_tokens(1) is not None


def test_from_pretrained_refuses_to_download() -> None:
    with pytest.raises(guided.GuidedError, match="never"):
        shim.Vocabulary.from_pretrained("gpt2")


def test_from_guided_vocabulary(vocabs: Vocabs) -> None:
    _, sv = vocabs
    gv = guided.Vocabulary.from_tokenizer_json(gpt2_tokenizer_json())
    converted = shim.Vocabulary.from_guided(gv)
    assert converted == sv
    index = shim.Index(r"[0-9]+", converted)
    assert index.token_index.vocabulary is gv


def test_write_mask_into_validates_and_clears_the_tail(vocabs: Vocabs) -> None:
    rv, sv = vocabs
    words = (len(rv) + 31) // 32
    guides = [real.Guide(real.Index("(yes|no)", rv)), shim.Guide(shim.Index("(yes|no)", sv))]
    for g in guides:
        buf = torch.zeros(words + 3, dtype=torch.int32)
        ptr = buf.data_ptr()
        for args in [(ptr, words, 8), (0, words, 4), (ptr, words - 1, 4)]:
            with pytest.raises(ValueError):
                g.write_mask_into(*args)
        assert not buf.any()  # nothing written by a refused call
    tails = []
    for g in guides:
        buf = torch.full((words + 3,), -1, dtype=torch.int32)
        g.write_mask_into(buf.data_ptr(), words + 3, 4)
        tails.append(buf.numpy().copy())
    assert np.array_equal(tails[0], tails[1])
    assert not tails[1][words:].any()
    with pytest.raises(ValueError, match="aligned"):
        guides[1].write_mask_into(buf.data_ptr() + 2, words, 4)


def test_max_rollback_zero_keeps_everything(vocabs: Vocabs) -> None:
    """outlines-core keeps the last 4 states for max_rollback=0 (its ring buffer's first
    allocation); the shim keeps all, so every rollback outlines-core allows is allowed."""
    rv, sv = vocabs
    ab = sv.get(b"ab")
    assert ab is not None
    rg = real.Guide(real.Index("(ab)+", rv), max_rollback=0)
    sg = shim.Guide(shim.Index("(ab)+", sv), max_rollback=0)
    for step in range(1, 51):
        rg.advance(ab[0], return_tokens=False)
        sg.advance(ab[0], return_tokens=False)
        assert sg.get_allowed_rollback() == step >= rg.get_allowed_rollback()
    sg.rollback_state(50)
    assert sg.get_state() == shim.Index("(ab)+", sv).get_initial_state()
    with pytest.raises(ValueError):
        sg.rollback_state(1)


def test_reset_forgets_history(vocabs: Vocabs) -> None:
    """A deliberate difference: outlines-core keeps the history across reset()."""
    _, sv = vocabs
    ab = sv.get(b"ab")
    assert ab is not None
    g = shim.Guide(shim.Index("(ab)+", sv), max_rollback=5)
    g.advance(ab[0], return_tokens=False)
    g.reset()
    assert g.get_allowed_rollback() == 0
    with pytest.raises(ValueError):
        g.rollback_state(1)


def test_eos_is_never_advanced(vocabs: Vocabs) -> None:
    rv, sv = vocabs
    ab = sv.get(b"ab")
    assert ab is not None
    for module, v in ((real, rv), (shim, sv)):
        index = module.Index("(ab)+", v)
        g = module.Guide(index)
        g.advance(ab[0], return_tokens=False)
        assert g.is_finished()
        assert GPT2_EOS in g.get_tokens()
        with pytest.raises(ValueError):
            g.advance(GPT2_EOS)
        assert index.get_next_state(g.get_state(), GPT2_EOS) is None
        with pytest.raises(ValueError):
            g.advance(ab[0] + 1 if ab[0] + 1 != GPT2_EOS else ab[0] - 1)


@pytest.mark.skipif(
    not hasattr(guided, "json_schema_to_regex"),
    reason="guided.json_schema_to_regex is not in this build (JSON Schema lands separately)",
)
def test_build_regex_from_schema_constrains_to_the_schema(vocabs: Vocabs) -> None:
    import jsonschema

    from guided.compat.outlines_core.json_schema import build_regex_from_schema

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 5}, "ok": {"type": "boolean"}},
        "required": ["name", "ok"],
    }
    pattern = build_regex_from_schema(json.dumps(schema))
    dfa = guided.DFA(pattern)
    for doc in ({"name": "abc", "ok": True}, {"name": "", "ok": False}):
        jsonschema.validate(doc, schema)
        assert dfa.match(json.dumps(doc))
    assert not dfa.match(json.dumps({"name": "toolong", "ok": True}))
    _, sv = vocabs
    g = shim.Guide(shim.Index(pattern, sv))
    assert g.get_tokens()


def _passes_a_match(dfa: guided.DFA, data: bytes) -> bool:
    """Whether a proper prefix of ``data`` (the text so far and a token's bytes, or the text so
    far for EOS) is a complete match: the only tokens on which outlines-core's masks can depart
    from the language (a late match, or a leftmost-first automaton dropping the lower-priority
    branches once an earlier one matched, an empty match at the start included)."""
    state = dfa.start
    for byte in data[:-1]:
        if dfa.is_accepting(state):
            return True
        state = dfa.next_state(state, byte)
    return bool(data) and dfa.is_accepting(state)


def compare_with_outlines_core(pattern: str, text: str, vocabs: Vocabs) -> str:
    """Compiles ``pattern`` with outlines-core and the shim and walks both along ``text``'s
    tokens, comparing masks at every step until outlines-core refuses a token. Masks must be
    equal but for the departures README.md lists: outlines-core may refuse a token whose text
    passes through a complete match, and may allow one into a dead end (`.*[^\\s\\S]A|B`), both
    judged by the pattern's automaton. Returns what happened, for the tallies."""
    rv, sv = vocabs
    try:
        ri = real.Index(pattern, rv)
    except ValueError as e:
        # outlines-core also refuses patterns its automaton cannot be built for, and those no
        # token can start; a syntax error is refused by both, which read with regex-syntax
        if "error building NFA" not in str(e):
            return "outlines-core builds no automaton"
        with pytest.raises(guided.RegexSyntaxError):
            shim.Index(pattern, sv)
        return "refused by both"
    try:
        si = shim.Index(pattern, sv)
    except guided.RegexSyntaxError:
        return "refused by the shim"
    dfa = guided.DFA(pattern, dialect="rust", max_states=200_000)
    rg, sg = real.Guide(ri), shim.Guide(si)
    words = (len(rv) + 31) // 32
    token_bytes = gpt2_token_bytes()
    outcome = "equal"
    done = b""
    for token in [*gpt2_hf_tokenizer().encode(text), None]:
        r_ids = allowed_ids(mask_of(rg, words), len(rv))
        s_ids = allowed_ids(mask_of(sg, words), len(rv))
        for t in r_ids - s_ids:
            outcome = "departed as listed"
            assert t != GPT2_EOS and _walk(dfa, done + token_bytes[t]) == 0, (pattern, done, t)
        for t in s_ids - r_ids:
            outcome = "departed as listed"
            after = done if t == GPT2_EOS else done + token_bytes[t]
            assert _passes_a_match(dfa, after), (pattern, done, t)
        if token is None or token not in r_ids or token not in s_ids:
            break
        rg.advance(token, return_tokens=False)
        sg.advance(token, return_tokens=False)
        done += token_bytes[token]
    return outcome


def _walk(dfa: guided.DFA, data: bytes) -> int:
    state = dfa.start
    for byte in data:
        state = dfa.next_state(state, byte)
    return state


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_rust_dialect_masks_equal_outlines_core(data: st.DataObject, vocabs: Vocabs) -> None:
    """Patterns in the Rust `regex` dialect, compiled by both; masks equal at every step of a
    text but for the listed departures."""
    pattern, node = data.draw(patterns("rust"), label="pattern")
    outcome = compare_with_outlines_core(pattern, node.gen(data.draw), vocabs)
    assert outcome != "refused by the shim", pattern
    event(outcome)


def test_corpus_patterns_mask_as_outlines_core(
    vocabs: Vocabs, capsys: pytest.CaptureFixture[str]
) -> None:
    """rust-lang/regex's patterns and haystacks, through outlines-core and the shim."""
    tally: Counter[str] = Counter()
    for pattern, text in regex_corpus():
        outcome = compare_with_outlines_core(pattern, text, vocabs)
        if outcome == "refused by the shim":
            # multi-line anchors, which guided refuses and outlines-core reads
            with pytest.raises(guided.RegexSyntaxError, match="multiline"):
                guided.DFA(pattern, dialect="rust")
        tally[outcome] += 1
    with capsys.disabled():
        print("\nrust-lang/regex patterns, outlines-core and guided.compat.outlines_core:")
        print(f"  {dict(tally)}")
    assert tally["equal"] > 300
