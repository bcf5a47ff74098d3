"""Counted character runs (``maxLength`` strings, ``.{0,40}``) and runs of ASCII classes
(identifiers, numbers, ``[a-z0-9.-]{1,63}``) on a real tokenizer, by brute force.

Inside a string with ``maxLength: n`` every position is its own automaton state, and the index
takes most of each state's mask from a token slice filtered by how many characters each token
spells (``rust/guided-core/src/slice.rs``). That shortcut is only worth having if it never changes
an answer, so here it is checked where it matters: GPT-2's real tokens (multi-character,
multi-byte, partial UTF-8, quotes and backslashes inside tokens), random bounds on either side of
the slice's dense lengths, and texts walked from random allowed tokens. Runs of narrower classes
take the same shortcut through class slices (``rust/guided-core/src/class_slice.rs``), found from
each state's own moves, also after a leading space, where half of GPT-2's tokens hang. The oracle
walks every token's bytes through the complete DFA of the same language (``guided.DFA`` of the
printed regex, itself tested against Python's ``re``), vectorized over the vocabulary.
"""

from __future__ import annotations

import json
from functools import cache

import numpy as np
from hypothesis import given, reject, settings
from hypothesis import strategies as st
from test_index import gpt2

import guided


@cache
def token_matrix() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPT-2's token bytes as a zero-padded matrix, their lengths, and which ids are text."""
    vocab = gpt2()
    data = [vocab.token_bytes(t) or b"" for t in range(vocab.vocab_size)]
    lengths = np.array([len(d) for d in data])
    matrix = np.zeros((len(data), int(lengths.max())), dtype=np.uint8)
    for i, d in enumerate(data):
        matrix[i, : len(d)] = np.frombuffer(d, dtype=np.uint8)
    eos = np.zeros(len(data), dtype=bool)
    eos[list(vocab.eos_token_ids)] = True
    return matrix, lengths, (lengths > 0) & ~eos


def brute_allowed(dfa: guided.DFA, prefix: bytes) -> np.ndarray:
    """Token t is allowed after `prefix` iff the DFA is alive after `prefix + bytes(t)`; EOS iff
    it accepts `prefix`."""
    matrix, lengths, text = token_matrix()
    table = np.asarray(dfa.table)
    state = dfa.start
    for b in prefix:
        state = int(table[state, b])
    states = np.full(len(lengths), state, dtype=np.int64)
    for j in range(matrix.shape[1]):
        live = lengths > j
        states[live] = table[states[live], matrix[live, j]]
    allowed = text & (states != 0) & (state != 0)
    vocab = gpt2()
    for e in vocab.eos_token_ids:
        allowed[e] = state != 0 and dfa.is_accepting(state)
    return allowed


def walk_and_compare(
    index: guided.TokenIndex, dfa: guided.DFA, data: st.DataObject, steps: int
) -> None:
    vocab = index.vocabulary
    state, prefix = index.initial_state, b""
    for _ in range(steps):
        want = brute_allowed(dfa, prefix)
        got = index.allowed(state)
        assert (got == want).all(), (prefix, np.flatnonzero(got != want)[:10])
        choices = [int(t) for t in np.flatnonzero(want) if t not in vocab.eos_token_ids]
        if not choices:
            return
        # Long tokens are few; draw them often enough to reach the far end of the bound.
        token = data.draw(st.sampled_from(choices), label="token")
        state = index.next_state(state, token)
        prefix += vocab.token_bytes(token) or b""


bounds = st.integers(0, 24).flatmap(lambda low: st.tuples(st.just(low), st.integers(low, 80)))


@given(data=st.data(), bound=bounds, nested=st.booleans())
@settings(max_examples=25)
def test_bounded_strings_equal_brute_force(
    data: st.DataObject, bound: tuple[int, int], nested: bool
) -> None:
    low, high = bound
    string = {"type": "string", "minLength": low, "maxLength": high}
    schema: dict = string
    if nested:
        schema = {
            "type": "object",
            "properties": {"name": string, "tag": {"type": "string", "maxLength": 3}},
            "required": ["name", "tag"],
            "additionalProperties": False,
        }
    index = guided.TokenIndex.from_json_schema(schema, gpt2())
    dfa = guided.DFA(guided.json_schema_to_regex(json.dumps(schema)), max_states=200_000)
    walk_and_compare(index, dfa, data, steps=8)


@given(
    data=st.data(),
    bound=bounds,
    body=st.sampled_from([".", '[^"\\\\]', "[^\\n]", "[a-zé ]"]),
)
@settings(max_examples=25)
def test_counted_classes_equal_brute_force(
    data: st.DataObject, bound: tuple[int, int], body: str
) -> None:
    low, high = bound
    pattern = f'"{body}{{{low},{high}}}"'
    index = guided.TokenIndex.from_regex(pattern, gpt2())
    walk_and_compare(index, guided.DFA(pattern), data, steps=8)


ASCII_CLASSES = ["[a-z]", "[a-zA-Z0-9_]", "[0-9]", "[a-z0-9._%+-]", "[0-9a-f]", "[A-Za-z-]"]


@st.composite
def class_runs(draw: st.DrawFn) -> str:
    """A regex of runs of ASCII classes, counted or not, joined by separators (a space among
    them, so that runs start after GPT-2's leading space), sometimes with keywords that part the
    run's letters into keyword prefixes."""

    def run() -> str:
        body = draw(st.sampled_from(ASCII_CLASSES))
        low = draw(st.integers(0, 20))
        quantifier = draw(
            st.sampled_from(["+", "*", f"{{{low},{draw(st.integers(max(low, 1), 70))}}}"])
        )
        piece = body + quantifier
        if draw(st.booleans()):
            piece = f"(?:if|int|{piece})"
        return piece

    pieces = [run() for _ in range(draw(st.integers(1, 3)))]
    separators = [draw(st.sampled_from([" ", "@", "\\.", " ?", "(?: |, )", ""])) for _ in pieces]
    return "".join(sep + piece for sep, piece in zip(separators, pieces, strict=True))


@given(data=st.data(), pattern=class_runs())
@settings(max_examples=25)
def test_class_runs_equal_brute_force(data: st.DataObject, pattern: str) -> None:
    walk_against_oracle(pattern, data)


def walk_against_oracle(pattern: str, data: st.DataObject) -> None:
    r"""GPT-2's index of `pattern` walked against the pattern's complete DFA. A run that may end
    where a counted one of overlapping bytes begins (`[a-z.]+\.[a-z.]{18}`) has an exponential
    complete DFA: the oracle cannot be built, so the draw is passed over."""
    try:
        oracle = guided.DFA(pattern, max_states=200_000)
    except guided.SizeLimitError:
        reject()
    index = guided.TokenIndex.from_regex(pattern, gpt2())
    walk_and_compare(index, oracle, data, steps=8)


WIDE_CLASSES = ["[^<]", '[^"\\\\@]', "[^\\n<>]", "(?s:.)", "[^ <]", "[^\\x00-\\x1f=]"]


@st.composite
def wide_runs(draw: st.DrawFn) -> str:
    """Runs of classes that hold the characters past ASCII (free text before a trigger, a
    pattern's string body), counted or not, ended by a trigger or separator, sometimes beside a
    run of ASCII letters, where the characters past ASCII lead elsewhere."""

    def run() -> str:
        body = draw(st.sampled_from(WIDE_CLASSES))
        low = draw(st.integers(0, 20))
        high = draw(st.integers(max(low, 1), 40))
        piece = body + draw(st.sampled_from(["*", "+", f"{{{low},{high}}}"]))
        if draw(st.booleans()):
            piece = f"(?:[a-z]{{1,{draw(st.integers(1, 6))}}}|{piece})"
        return piece

    pieces = [run() for _ in range(draw(st.integers(1, 2)))]
    ends = [draw(st.sampled_from(["<f=", "@", "\\n", '"', ""])) for _ in pieces]
    return "".join(piece + end for piece, end in zip(pieces, ends, strict=True))


@given(data=st.data(), pattern=wide_runs())
@settings(max_examples=25)
def test_wide_class_runs_equal_brute_force(data: st.DataObject, pattern: str) -> None:
    walk_against_oracle(pattern, data)
