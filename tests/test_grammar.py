"""Context-free grammars through ``TokenIndex.from_grammar``, against an independent parser.

The grammars in ``tests/data/grammars`` are llama.cpp's example grammars (json, json_arr, list,
arithmetic, c, chess, english, japanese) and an xgrammar-style EBNF grammar with left recursion.
The oracle is ``grammar_oracle``: its own reader of the syntax, a translation to Lark, and Lark's
Earley parser. Three checks, each with the real GPT-2 tokenizer:

* random derivations of each grammar are accepted token by token;
* random walks through guided's masks that end in EOS produce texts the oracle accepts (nothing
  outside the language is ever allowed);
* small edits of derivations are accepted by guided exactly when the oracle accepts them.
"""

from __future__ import annotations

import pickle
import random
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grammar_oracle import Grammar

import guided
from conftest import shared_path

GRAMMARS = sorted(
    p for p in (Path(__file__).parent / "data" / "grammars").iterdir() if p.suffix != ".lark"
)
EOS = 50256


@cache
def gpt2() -> guided.Vocabulary:
    return guided.Vocabulary.from_tokenizer_json(str(shared_path("vocab", "gpt2_tokenizer.json")))


@cache
def tokenizer() -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(shared_path("vocab", "gpt2_tokenizer.json")))


@cache
def compiled(path: Path) -> tuple[guided.TokenIndex, Grammar]:
    text = path.read_text()
    return guided.TokenIndex.from_grammar(text, gpt2()), Grammar(text)


def accepts(index: guided.TokenIndex, text: str) -> bool:
    guide = guided.Guide(index)
    return all(guide.accept_token(t) for t in tokenizer().encode(text).ids) and bool(
        guide.is_accepting()
    )


@pytest.mark.parametrize("path", GRAMMARS, ids=lambda p: p.name)
def test_derivations_are_accepted(path: Path) -> None:
    index, oracle = compiled(path)
    rng = random.Random(path.name)
    for _ in range(25):
        text = oracle.derive(rng)
        assert oracle.accepts(text), text  # the oracle agrees with itself
        assert accepts(index, text), text


@pytest.mark.parametrize("path", GRAMMARS, ids=lambda p: p.name)
def test_walks_end_only_in_the_language(path: Path) -> None:
    index, oracle = compiled(path)
    rng = random.Random(path.name)
    token_bytes = gpt2().token_bytes
    ended = 0
    for _ in range(20):
        guide = guided.Guide(index)
        out = b""
        for step in range(80):
            allowed = [int(t) for t in index.allowed(guide.state).nonzero()[0]]
            assert allowed, (path.name, out)  # a live state always has a way on
            choices = [t for t in allowed if t != EOS]
            if EOS in allowed and (not choices or step > 30 or rng.random() < 0.2):
                ended += 1
                assert oracle.accepts(out.decode("utf-8")), out
                break
            # single characters half the time, so that punctuation closes what words open
            short = [t for t in choices if len(token_bytes(t) or b"") == 1]
            token = rng.choice(short if short and rng.random() < 0.5 else choices)
            if step > 20:  # head for an end: a token after which the text is complete, if any
                after = index.next_states(guide.state)
                done = [s for s in np.unique(after) if s > 0 and index.is_accepting(int(s))]
                ending = np.flatnonzero(np.isin(after, done))
                token = int(rng.choice(list(ending))) if len(ending) else token
            guide.advance(token)
            out += token_bytes(token) or b""
    assert ended >= 2, path.name


def edits(text: str, rng: random.Random) -> list[str]:
    out = []
    for _ in range(8):
        i = rng.randrange(len(text) + 1)
        c = rng.choice('{}[]()",:;=+-*/ \n\tax0é')
        out += [text[:i] + c + text[i:], text[:i] + text[i + 1 :], text[:i] + c + text[i + 1 :]]
    return out


@pytest.mark.parametrize("path", GRAMMARS, ids=lambda p: p.name)
def test_edited_texts_are_accepted_exactly_when_the_oracle_accepts(path: Path) -> None:
    index, oracle = compiled(path)
    rng = random.Random(path.name)
    seen = {True: 0, False: 0}
    for _ in range(6):
        for text in edits(oracle.derive(rng, budget=30), rng):
            expected = oracle.accepts(text)
            assert accepts(index, text) is expected, (path.name, text)
            seen[expected] += 1
    assert seen[False] > 0


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ('root ::= "a', 1, 10, "unclosed string"),
        ("root ::= a", 1, 10, "undefined rule `a`"),
        ('start ::= "a"', 1, 1, "no rule named `root`"),
        ('root ::= x\nx ::= "(" x ")"', 1, 1, "derives no text"),
        ('root ::= a "x" | "z"\na ::= "y"? root', 2, 1, "left-recursive"),
        ('root ::= "a"\n  ( "b"', 2, 3, "unclosed group"),
        ("root ::= [a-", 1, 10, "unclosed character class"),
        ('root ::= "\\q"', 1, 11, "unknown escape"),
        ('root ::= "a"{3,1}', 1, 13, "below the minimum"),
        ('root ::= "a"\nroot ::= "b"', 2, 1, "defined twice"),
    ],
)
def test_malformed_grammars_name_the_place(text: str, line: int, column: int, words: str) -> None:
    with pytest.raises(guided.GrammarSyntaxError, match=words) as raised:
        guided.TokenIndex.from_grammar(text, gpt2())
    assert (raised.value.line, raised.value.column) == (line, column)


def test_right_recursion_opens_no_frames() -> None:
    # `unary` ends with its recursive call: the call runs under its caller's frame, so fifty
    # dashes fit a stack of four, and the language is still exactly the grammar's.
    text = 'root ::= unary ";"\nunary ::= "-" unary | [0-9]+'
    index = guided.TokenIndex.from_grammar(text, gpt2(), max_stack=4)
    assert accepts(index, "-" * 50 + "7;")
    assert not accepts(index, "-" * 50 + ";") and not accepts(index, "7-;")
    nested = guided.TokenIndex.from_grammar(
        'root ::= paren ";"\nparen ::= "(" paren ")" | [0-9]+', gpt2(), max_stack=4
    )
    with pytest.raises(guided.SizeLimitError, match="max_stack"):
        accepts(nested, "(" * 50 + "7" + ")" * 50 + ";")


def test_options_pickling_and_the_cache() -> None:
    vocab = gpt2()
    text = 'greeting ::= "hi " name\nname ::= [a-z]+ | "(" name ")"'
    index = guided.TokenIndex.from_grammar(text, vocab, root="greeting", syntax="ebnf")
    assert accepts(index, "hi ((bob))") and not accepts(index, "hi ((bob)")
    clone = pickle.loads(pickle.dumps(index))
    assert accepts(clone, "hi (x)") and "grammar" in repr(clone)
    # nesting past max_stack is an error at the step that needs it, never a narrower language
    shallow = guided.TokenIndex.from_grammar(text, vocab, root="greeting", max_stack=4)
    assert accepts(shallow, "hi ((x))")
    with pytest.raises(guided.SizeLimitError, match="max_stack") as raised:
        accepts(shallow, "hi ((((((x))))))")
    assert raised.value.maximum == 4
    assert accepts(shallow, "hi (y)") and not accepts(shallow, "hi (y")  # still usable
    cache = guided.IndexCache(vocab)
    assert cache.grammar(text, root="greeting") is cache.grammar(text, root="greeting")
    with pytest.raises(guided.GuidedError, match="unknown grammar syntax"):
        guided.TokenIndex.from_grammar(text, vocab, syntax="yacc")  # type: ignore[arg-type]


@cache
def one_byte_tokens() -> list[int]:
    vocab = gpt2()
    return [t for t in range(len(vocab)) if len(vocab.token_bytes(t) or b"") == 1]


@pytest.mark.parametrize("path", GRAMMARS, ids=lambda p: p.name)
def test_masks_equal_a_brute_force_check(path: Path) -> None:
    """At a few prefixes of derivations, guided allows a token exactly when a character-level
    Earley recognizer finds the prefix and the token's text still viable."""
    index, oracle = compiled(path)
    rng = random.Random(path.name)
    token_bytes = gpt2().token_bytes
    # the recognizer is trusted below only as far as it agrees with the Lark translation
    for _ in range(3):
        text = oracle.derive(rng, budget=30)
        for variant in [text, *edits(text, rng)[:6]]:
            assert oracle.recognizes(variant) is oracle.accepts(variant), (path.name, variant)
    checked = {True: 0, False: 0}
    for walk in range(2):
        ids = tokenizer().encode(oracle.derive(rng)).ids
        # the start, the end (where EOS must be allowed) and one place between, per walk
        where = {0 if walk == 0 else len(ids), rng.randrange(1, len(ids) + 1)}
        guide = guided.Guide(index)
        out = b""
        for i in range(len(ids) + 1):
            if i in where:
                checked_here = check_mask(index, oracle, guide.state, out, rng)
                checked[True] += checked_here[True]
                checked[False] += checked_here[False]
            if i < len(ids):
                guide.advance(ids[i])
                out += token_bytes(ids[i]) or b""
    assert checked[True] > 0 and checked[False] > 0, (path.name, checked)


def check_mask(
    index: guided.TokenIndex, oracle: Grammar, state: int, out: bytes, rng: random.Random
) -> dict[bool, int]:
    checked = {True: 0, False: 0}
    try:
        prefix = out.decode("utf-8")
    except UnicodeDecodeError:  # a character split between tokens has no character-level chart
        return checked
    chart = oracle.chart().extend(prefix)
    assert chart is not None, prefix
    allowed = index.allowed(state)
    assert bool(allowed[EOS]) is chart.accepts, prefix
    yes = [int(t) for t in np.flatnonzero(allowed) if t != EOS]
    no = [int(t) for t in np.flatnonzero(~allowed)]
    candidates = set(rng.sample(yes, min(400, len(yes))) + rng.sample(no, min(400, len(no))))
    token_bytes = gpt2().token_bytes
    for token in sorted(candidates | set(one_byte_tokens())):
        data = token_bytes(token)
        if token == EOS or data is None:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:  # guided may allow it for a character the next token ends
            continue
        viable = chart.extend(text) is not None
        assert bool(allowed[token]) is viable, (prefix, text)
        checked[viable] += 1
    return checked
