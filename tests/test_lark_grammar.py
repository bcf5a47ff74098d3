"""Lark grammars through ``TokenIndex.from_grammar(..., syntax="lark")``, against Lark itself.

The grammars are ``tests/data/grammars/*.lark``: JSON, a calculator with left-recursive rules, an
INI-style configuration language, a SELECT subset of SQL with keywords in any case, and lists of
calls. The oracle is ``lark_oracle``: Lark's Earley parser with its scannerless lexer decides
membership, and random texts are derived from the rules Lark compiles. With the real GPT-2
tokenizer:

* random derivations are accepted token by token, then EOS;
* random walks through guided's masks that end in EOS give texts Lark accepts;
* small edits of derivations are accepted by guided exactly when Lark accepts them;
* ``root`` picks the start rule;
* malformed grammars and the constructs guided refuses raise ``GrammarSyntaxError`` at the place;
* a ``%json`` rule embeds a JSON Schema, whose instances are judged by ``jsonschema``.
"""

from __future__ import annotations

import json
import random
from collections import deque
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import lark
import numpy as np
import pytest
from compat_support import GPT2_EOS
from hypothesis import event, given, settings
from hypothesis import strategies as st
from lark_oracle import accepts, derive, parser

import guided
from conftest import shared_path

GRAMMARS = sorted((Path(__file__).parent / "data" / "grammars").glob("*.lark"))
EOS = GPT2_EOS
# what edits put into a text: the grammars' punctuation, both kinds of space and line break, a
# letter of each case, a digit, and a character of two UTF-8 bytes
EDIT_CHARS = " \t\n\r{}[]()<>\"',:;=+-*/#._aZ0é"


@cache
def gpt2() -> guided.Vocabulary:
    return guided.Vocabulary.from_tokenizer_json(str(shared_path("vocab", "gpt2_tokenizer.json")))


@cache
def tokenizer() -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(shared_path("vocab", "gpt2_tokenizer.json")))


def encode(text: str) -> list[int]:
    """GPT-2's tokens for ``text``, then EOS."""
    return [*tokenizer().encode(text).ids, EOS]


def guided_accepts(index: guided.TokenIndex, text: str) -> bool:
    tokens = encode(text)
    return guided.Guide(index).validate_tokens(tokens) == len(tokens)


def from_lark(text: str, root: str = "start") -> guided.TokenIndex:
    return guided.TokenIndex.from_grammar(text, gpt2(), syntax="lark", root=root)


@dataclass(frozen=True)
class Compiled:
    name: str
    text: str
    index: guided.TokenIndex
    oracle: lark.Lark


@pytest.fixture(scope="module", params=GRAMMARS, ids=lambda p: p.stem)
def grammar(request: pytest.FixtureRequest) -> Compiled:
    path: Path = request.param
    text = path.read_text()
    return Compiled(path.name, text, from_lark(text), parser(text))


def test_the_grammars_are_there() -> None:
    assert len(GRAMMARS) >= 5
    for path in GRAMMARS:
        assert path.read_text().startswith("//"), path.name


# ---------------------------------------------------------------------------------------------
# derivations, walks and edits


def test_derivations_are_accepted_token_by_token(grammar: Compiled) -> None:
    rng = random.Random(grammar.name)
    for budget in (3, 8, 15, 25, 40, 60, 10, 30):
        text = derive(grammar.text, rng, budget=budget)  # Lark accepts it: derive checks
        tokens = encode(text)
        assert guided.Guide(grammar.index).validate_tokens(tokens) == len(tokens), text


def finishing_path(index: guided.TokenIndex, state: int, alphabet: list[int]) -> list[int] | None:
    """A shortest run of ``alphabet`` tokens from ``state`` to one that accepts, if one is found
    among the first few thousand states."""
    parent: dict[int, tuple[int, int] | None] = {state: None}
    queue = deque([state])
    while queue and len(parent) < 3000:
        s = queue.popleft()
        if index.is_accepting(s):
            path = []
            step = parent[s]
            while step is not None:
                s, token = step
                path.append(token)
                step = parent[s]
            return path[::-1]
        for token in alphabet:
            after = index.next_state(s, token)
            if after > 0 and after not in parent:
                parent[after] = (s, token)
                queue.append(after)
    return None


def test_walks_end_only_in_the_language(grammar: Compiled) -> None:
    index, vocab = grammar.index, gpt2()
    rng = random.Random(grammar.name)
    texts = [derive(grammar.text, rng, budget=b) for b in (5, 10, 20, 30, 40, 50, 60, 80)]
    # the walk favours tokens the derivations use, so that it gets somewhere in the language
    familiar = np.zeros(index.vocab_size, dtype=bool)
    familiar[[t for text in texts for t in encode(text)]] = True
    familiar[EOS] = False
    alphabet = {
        ids[0] for c in "".join(texts) + "\n " if len(ids := tokenizer().encode(c).ids) == 1
    }
    single = np.zeros(index.vocab_size, dtype=bool)
    single[list(alphabet)] = True
    ended = 0
    for _ in range(16):
        guide = guided.Guide(index)
        out = b""
        for step in range(40):
            allowed = index.allowed(guide.state).copy()
            assert allowed.any(), (grammar.name, out)  # a live state always has a way on
            if allowed[EOS] and rng.random() < (0.05 if step < 15 else 0.2):
                break
            allowed[EOS] = False
            if not allowed.any():
                break
            pick = rng.random()
            masks = [allowed & familiar] if pick < 0.5 else []
            masks += [allowed & single] if pick < 0.8 else []
            pool = next(p for p in map(np.flatnonzero, [*masks, allowed]) if len(p))
            token = int(pool[rng.randrange(len(pool))])
            guide.advance(token)
            out += vocab.token_bytes(token) or b""
        if not guide.is_accepting():
            path = finishing_path(index, guide.state, sorted(alphabet))
            if path is None:
                continue
            for token in path:
                guide.advance(token)
                out += vocab.token_bytes(token) or b""
        assert guide.accept_token(EOS), (grammar.name, out)
        ended += 1
        try:
            text = out.decode("utf-8")
        except UnicodeDecodeError:
            pytest.fail(f"{grammar.name}: a walk ended inside a UTF-8 sequence: {out!r}")
        assert accepts(grammar.oracle, text), (grammar.name, text)
    assert ended >= 8, grammar.name


def edits(text: str, rng: random.Random) -> list[str]:
    """Texts one character away from ``text``: inserted, deleted and replaced."""
    out = []
    for _ in range(8):
        i = rng.randrange(len(text) + 1)
        c = rng.choice(EDIT_CHARS)
        out += [text[:i] + c + text[i:], text[:i] + text[i + 1 :], text[:i] + c + text[i + 1 :]]
    return out


def test_edited_texts_are_accepted_exactly_when_lark_accepts(grammar: Compiled) -> None:
    rng = random.Random(grammar.name)
    seen = {True: 0, False: 0}
    for _ in range(6):
        for text in edits(derive(grammar.text, rng, budget=20), rng):
            expected = accepts(grammar.oracle, text)
            assert guided_accepts(grammar.index, text) is expected, (grammar.name, text)
            seen[expected] += 1
    assert seen[True] > 0 and seen[False] > 0, seen


def test_root_picks_the_start_rule() -> None:
    text = (Path(__file__).parent / "data" / "grammars" / "sql.lark").read_text()
    index, oracle = from_lark(text, root="condition"), parser(text, start="condition")
    rng = random.Random("condition")
    for _ in range(4):
        condition = derive(text, rng, start="condition", budget=15)
        assert guided_accepts(index, condition), condition
        for edited in edits(condition, rng)[:6]:
            assert guided_accepts(index, edited) is accepts(oracle, edited), edited
    query = "select a from t where a = 1"
    assert accepts(parser(text), query) and not accepts(oracle, query)
    assert not guided_accepts(index, query)
    with pytest.raises(guided.GrammarSyntaxError):
        from_lark(text, root="no_such_rule")


# ---------------------------------------------------------------------------------------------
# refusals


@pytest.mark.parametrize(
    ("text", "places"),
    [
        # priorities, at the `.` that starts them
        ('start: A\nA.2: "a"', {(2, 2)}),
        ('start: a\na.2: "a"', {(2, 2)}),
        # undefined names, where they are used or imported
        ('start: "a" missing', {(1, 12)}),
        ('start: "a" MISSING', {(1, 12)}),
        ("start: NOPE\n%import common.NOPE", {(2, 16)}),
        # templates, at the `{` of their parameters
        ('_pair{x}: x x\nstart: _pair{"a"}', {(1, 6)}),
        # an import from another module than `common`, at the module's name
        ("start: X\n%import foo.X", {(2, 9)}),
        ("start: A\n%declare A", {(2, 1)}),
        # unbalanced groups, at the bracket left open or the one that closes nothing
        ('start: "a"\n  ("b" | "c"', {(2, 3)}),
        ('start: ["a"', {(1, 8)}),
        ('start: "a" "b")', {(1, 15)}),
        # unterminated literals, at their opening delimiter
        ('start: "abc', {(1, 8)}),
        ('start: "a"\n  | /ab', {(2, 5)}),
        # indirect left recursion: either rule of the cycle may be named
        ('start: a\na: b "x" | "y"\nb: a "z"', {(2, 1), (3, 1)}),
    ],
)
def test_malformed_grammars_name_the_place(text: str, places: set[tuple[int, int]]) -> None:
    with pytest.raises(guided.GrammarSyntaxError) as raised:
        from_lark(text)
    assert (raised.value.line, raised.value.column) in places, str(raised.value)


def test_direct_left_recursion_is_read_as_iteration() -> None:
    text = '?sum: NUMBER | sum "+" NUMBER | sum "-" NUMBER\n%import common.NUMBER'
    index, oracle = from_lark(text, root="sum"), parser(text, start="sum")
    for s in ["1", "1+2", "1+2-3.5", "1+", "+1", "1++2", "12"]:
        assert guided_accepts(index, s) is accepts(oracle, s), s


# ---------------------------------------------------------------------------------------------
# %json

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}
CALL = f'start: "<call>" args "</call>"\nargs: %json {json.dumps(SCHEMA)}\n'


@pytest.fixture(scope="module")
def call_index() -> guided.TokenIndex:
    return from_lark(CALL)


def test_an_embedded_schema_holds_in_its_rule(call_index: guided.TokenIndex) -> None:
    assert guided_accepts(call_index, '<call>{"n": 5}</call>')
    assert guided_accepts(call_index, '<call>{"n": -12}</call>')
    assert not guided_accepts(call_index, '<call>{"n": "x"}</call>')
    assert not guided_accepts(call_index, "<call>{}</call>")
    assert not guided_accepts(call_index, '<call>{"n": 5, "m": 1}</call>')
    assert not guided_accepts(call_index, '{"n": 5}')
    assert not guided_accepts(call_index, '<call>{"n": 5}')


VALUES = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer()),
    st.text('ab"\\ 1', max_size=4),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=2),
)
OBJECTS = st.one_of(
    st.builds(lambda n: {"n": n}, st.integers(-(10**12), 10**12)),
    st.builds(lambda v: {"n": v}, VALUES),
    st.dictionaries(st.sampled_from(["n", "m", "N", ""]), VALUES, max_size=2),
)


@settings(max_examples=40, deadline=None)
@given(obj=OBJECTS)
def test_embedded_json_is_judged_by_jsonschema(
    call_index: guided.TokenIndex, obj: dict[str, Any]
) -> None:
    valid = jsonschema.Draft202012Validator(SCHEMA).is_valid(obj)
    event("valid" if valid else "invalid")
    # guided writes `": "` and `", "`, as json.dumps does
    assert guided_accepts(call_index, f"<call>{json.dumps(obj)}</call>") is valid, obj
