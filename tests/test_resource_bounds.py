"""Resource bounds: hostile input ends in a typed error or a correct result, in stated time and RAM.

Each case runs in a child interpreter that caps its own address space (``RLIMIT_AS``) before it
imports guided, so that a runaway allocation cannot take the test machine with it: it either fails
inside the child or kills the child, and the parent sees which. The child builds the input
(untimed), runs the call under test, and prints one JSON line: the exception's class and
attributes (or the call's result), the seconds the call took and the process's peak RSS. The
parent asserts no crash (exit status 0), no hang (the timeout), the expected outcome, and both
bounds. Bounds are two to four times what the cases measure on a 2-core machine: loose enough for a
slow CI runner, tight enough that an accidental quadratic or a copy of a big input shows up.

Peak RSS is the whole child's, input included (the Python list of a 10-million-token vocabulary
costs more than the vocabulary), so each bound is for the case as written, not for the call alone.
It is read from ``VmHWM``, the high-water mark of the child's own address space. The child's
``ru_maxrss`` is reported too but not asserted: Linux carries it across ``fork`` and ``exec``, so
it starts at the parent's peak (the pytest process, with whatever earlier tests loaded into it).

A case that crashes or overruns would be kept, marked ``xfail(strict=True)`` with the finding, so
that the day it is fixed the test says so; the four found so far (two stack overflows, one
quadratic list, one quadratic pattern printer found by ``make fuzz``) are fixed, and their cases
run as plain tests.

The buffer checks of ``fill_bitmask`` need no cap and run in-process, at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import guided
from conftest import ROOT

GIB = 1 << 30

# What every child starts with. The cap comes first: a bound that only holds once guided is
# imported would miss what the import itself costs.
PRELUDE = """\
import json, os, resource, sys, time

CAP = int(sys.argv[1])
TMP = sys.argv[2]
resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

import guided

# One token per byte, so that any text can be walked and every mask is easy to check by hand.
BYTES = guided.Vocabulary([bytes([b]) for b in range(256)] + [None], eos_token_ids=[256])


def accepts(index, text):
    guide = guided.Guide(index)
    return all(guide.accept_token(b) for b in text) and guide.is_accepting()


def walk(index, text):
    guide = guided.Guide(index)
    for b in text:
        guide.advance(b)
    return guide


# An object schema nesting `n` objects, each with one member "a", around an integer, as JSON text.
def nested_objects(n):
    return '{"type": "object", "properties": {"a": ' * n + '{"type": "integer"}' + "}}" * n


# An object schema of `n` integer members p0, p1, ..., as JSON text.
def many_properties(n, required=False):
    names = [f"p{i}" for i in range(n)]
    schema = {"type": "object", "properties": {p: {"type": "integer"} for p in names}}
    if required:
        schema["required"] = names
    return json.dumps(schema)


def peak_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def maxrss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

"""

EPILOGUE = """

report = {"setup_rss_mib": peak_mib()}
start = time.perf_counter()
try:
    report["result"] = run()
    report["error"] = None
except BaseException as exc:
    report["error"] = type(exc).__name__
    report["typed"] = isinstance(exc, guided.GuidedError)
    report["attrs"] = {
        k: v if not isinstance(v, str) else v[:200]
        for k, v in vars(exc).items()
        if k != "pattern" and isinstance(v, (int, str))
    }
    report["message"] = str(exc)[:400]
report["elapsed_s"] = time.perf_counter() - start
report["peak_rss_mib"] = peak_mib()
report["ru_maxrss_mib"] = maxrss_mib()
print(json.dumps(report))
"""


@dataclass(frozen=True)
class Case:
    """One hostile input. ``code`` builds the input at module level (untimed) and defines
    ``run()``, the timed call; its return value must be JSON."""

    id: str
    code: str
    #: The exception class expected, by name; None when the input is legitimately accepted.
    error: str | None
    #: ``SizeLimitError.limit`` expected.
    limit: str | None = None
    #: What ``run()`` returns when the input is accepted.
    result: Any = None
    seconds: float = 2.0
    rss_mib: int = 256
    cap: int = 2 * GIB
    #: Time the child may spend outside ``run()``: interpreter start and building the input.
    slack: float = 5.0
    marks: tuple[Any, ...] = field(default=())


def sparse_file(name: str, head: bytes, size: int, call: str) -> str:
    """Child code for a sparse file at ``PATH``: ``head``, then zero bytes to ``size`` (nothing on
    disk); ``run()`` times ``call`` on it and removes the file."""
    return (
        f"PATH = os.path.join(TMP, {name!r})\n"
        'with open(PATH, "wb") as f:\n'
        f"    f.write({head!r})\n"
        f"    f.truncate({size})\n"
        "def run():\n"
        "    try:\n"
        f"        {call}\n"
        "    finally:\n"
        "        os.remove(PATH)\n"
    )


def deep_walk(compile_call: str, opener: bytes, sample: bytes) -> str:
    """Child code that walks 10,000 ``opener`` tokens (each opening a call) through the index
    ``compile_call`` builds; past ``max_stack`` the index must still accept ``sample``."""
    return (
        "def run():\n"
        f"    index = {compile_call}\n"
        "    try:\n"
        f"        walk(index, {opener!r} * 10_000)\n"
        "    except guided.SizeLimitError:\n"
        f'        assert accepts(index, {sample!r}), "the index must stay usable"\n'
        "        raise\n"
    )


TOKENIZER_HEAD = b'{"model": {"type": "BPE", "vocab": {"a": 0, '

CASES = [
    # --- regular expressions of a megabyte --------------------------------------------------------
    Case(
        "regex-1mb-alternation-dfa",
        """
        P = "(a|b)" * 200_000
        def run():
            guided.DFA(P)
        """,
        "SizeLimitError",
        "max_states",
        seconds=2,
        rss_mib=512,
    ),
    # The index determinizes lazily, so the pattern compiles; the budget is met by the walk, at
    # the state past max_states (two bytes a token: 10,000 tokens in).
    Case(
        "regex-1mb-alternation-index-walk",
        """
        P = "(a|b)" * 200_000
        def run():
            index = guided.TokenIndex.from_regex(P, BYTES)
            walk(index, b"ab" * 100_000)
        """,
        "SizeLimitError",
        "max_states",
        seconds=2,
        rss_mib=512,
    ),
    Case(
        "regex-1mb-literal-dfa",
        """
        P = "a" * 1_000_000
        def run():
            guided.DFA(P)
        """,
        "SizeLimitError",
        "nfa_states",
        seconds=1,
        rss_mib=384,
    ),
    Case(
        "regex-1mb-literal-index",
        """
        P = "a" * 1_000_000
        def run():
            guided.TokenIndex.from_regex(P, BYTES)
        """,
        "SizeLimitError",
        "nfa_states",
        seconds=1,
        rss_mib=384,
    ),
    Case(
        "regex-100k-open-groups-dfa",
        """
        P = "(" * 100_000
        def run():
            guided.DFA(P)
        """,
        "SizeLimitError",
        "nest_limit",
        seconds=1,
        rss_mib=128,
    ),
    # regex-syntax parses the whole text before it checks nesting, so the unclosed group is what
    # it reports.
    Case(
        "regex-100k-open-groups-rust-dialect",
        """
        P = "(" * 100_000
        def run():
            guided.DFA(P, dialect="rust")
        """,
        "RegexSyntaxError",
        seconds=1,
        rss_mib=256,
    ),
    Case(
        "regex-100k-balanced-groups-index",
        """
        P = "(" * 100_000 + "a" + ")" * 100_000
        def run():
            guided.TokenIndex.from_regex(P, BYTES)
        """,
        "SizeLimitError",
        "nest_limit",
        seconds=1,
        rss_mib=128,
    ),
    # --- a schema nested 10,000 deep --------------------------------------------------------------
    Case(
        "schema-10k-deep-text-index",
        """
        S = nested_objects(10_000)
        def run():
            guided.TokenIndex.from_json_schema(S, BYTES)
        """,
        "SizeLimitError",
        "json_nesting",
        seconds=1,
        rss_mib=128,
    ),
    Case(
        "schema-10k-deep-text-regex",
        """
        S = nested_objects(10_000)
        def run():
            guided.json_schema_to_regex(S)
        """,
        "SizeLimitError",
        "json_nesting",
        seconds=1,
        rss_mib=128,
    ),
    # A dict that deep cannot be serialized by Python's json; the facade must say so as a size
    # limit, not let RecursionError out.
    Case(
        "schema-10k-deep-dict-index",
        """
        S = {"type": "integer"}
        for _ in range(10_000):
            S = {"type": "object", "properties": {"a": S}}
        def run():
            guided.TokenIndex.from_json_schema(S, BYTES)
        """,
        "SizeLimitError",
        "json_nesting",
        seconds=1,
        rss_mib=128,
    ),
    # Just inside the parser's nesting limit the schema is legitimate and must work end to end.
    Case(
        "schema-63-deep-index-walk",
        """
        S = nested_objects(63)
        T = b'{"a":' * 63 + b"7" + b"}" * 63
        def run():
            index = guided.TokenIndex.from_json_schema(S, BYTES)
            return [accepts(index, T), accepts(index, T[:-1])]
        """,
        None,
        result=[True, False],
        seconds=1,
        rss_mib=128,
    ),
    # The printed pattern spells out every optional member at every level, so the regular form
    # refuses the same schema by its pattern budget.
    Case(
        "schema-63-deep-regex",
        """
        S = nested_objects(63)
        def run():
            guided.json_schema_to_regex(S)
        """,
        "SizeLimitError",
        "max_pattern_nodes",
        seconds=1,
        rss_mib=128,
    ),
    # --- a schema with 100,000 properties ---------------------------------------------------------
    Case(
        "schema-100k-properties-index",
        """
        S = many_properties(100_000)
        def run():
            guided.TokenIndex.from_json_schema(S, BYTES)
        """,
        "SizeLimitError",
        "max_work",
        seconds=8,
        rss_mib=1536,
    ),
    Case(
        "schema-100k-properties-regex",
        """
        S = many_properties(100_000)
        def run():
            guided.json_schema_to_regex(S)
        """,
        "SizeLimitError",
        "max_work",
        seconds=4,
        rss_mib=1536,
    ),
    # The same schema with every member required is refused as fast: required names are a set
    # (a list searched per name made this quadratic, 18 s).
    Case(
        "schema-100k-required-properties-index",
        """
        S = many_properties(100_000, required=True)
        def run():
            guided.TokenIndex.from_json_schema(S, BYTES)
        """,
        "SizeLimitError",
        "max_work",
        seconds=8,
        rss_mib=1536,
    ),
    # An object's optional members nest its expression once per member, so passes that recurse
    # per level (the NFA builder, copies, drops) need stack in proportion: they grow it on the
    # heap as they go, and 20,000 members compile on a thread's 8 MiB (they crashed it at 11,500).
    Case(
        "schema-20k-properties-index",
        """
        S = many_properties(20_000)
        def run():
            index = guided.TokenIndex.from_json_schema(S, BYTES)
            return accepts(index, b'{"p19999":1}')
        """,
        None,
        result=True,
        seconds=6,
        rss_mib=1024,
    ),
    # The expression of 40,000 members fits the expression budget; printed as one regex, with
    # every shared language written out where it stands, it does not.
    Case(
        "schema-40k-properties-regex",
        """
        S = many_properties(40_000)
        def run():
            guided.json_schema_to_regex(S)
        """,
        "SizeLimitError",
        "max_pattern_nodes",
        seconds=5,
        rss_mib=1536,
    ),
    # --- $ref chains and cycles -------------------------------------------------------------------
    Case(
        "ref-chain-10k-index",
        """
        N = 10_000
        defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(N)}
        defs[f"d{N}"] = {"type": "integer"}
        S = json.dumps({"$ref": "#/$defs/d0", "$defs": defs})
        def run():
            index = guided.TokenIndex.from_json_schema(S, BYTES)
            return [accepts(index, b"-12"), accepts(index, b'"x"')]
        """,
        None,
        result=[True, False],
        seconds=1,
        rss_mib=256,
    ),
    Case(
        "ref-chain-10k-regex",
        """
        N = 10_000
        defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(N)}
        defs[f"d{N}"] = {"type": "integer"}
        S = json.dumps({"$ref": "#/$defs/d0", "$defs": defs})
        def run():
            integer = guided.json_schema_to_regex({"type": "integer"})
            return guided.json_schema_to_regex(S) == integer
        """,
        None,
        result=True,
        seconds=1,
        rss_mib=256,
    ),
    # Each link nests an object, so the chain is a 10,000-deep document and meets the nesting
    # budget rather than the stack.
    Case(
        "ref-chain-10k-nested-objects-index",
        """
        N = 10_000
        defs = {
            f"d{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}}}
            for i in range(N)
        }
        defs[f"d{N}"] = {"type": "integer"}
        S = json.dumps({"$ref": "#/$defs/d0", "$defs": defs})
        def run():
            guided.TokenIndex.from_json_schema(S, BYTES)
        """,
        "SizeLimitError",
        "max_nesting",
        seconds=1,
        rss_mib=256,
    ),
    # A cycle of bare references constrains nothing (the specification leaves its meaning
    # undefined); guided reads it as the empty schema: any JSON value. It must not loop.
    Case(
        "ref-cycle-a-b-a-index",
        """
        S = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}
        def run():
            index = guided.TokenIndex.from_json_schema(S, BYTES)
            texts = [b"null", b'[1,{"k":"v"}]', b"[" * 100 + b"]" * 100, b"nul", b"[1,]"]
            return [accepts(index, t) for t in texts]
        """,
        None,
        result=[True, True, True, False, False],
        seconds=1,
        rss_mib=128,
    ),
    Case(
        "ref-cycle-a-b-a-regex",
        """
        S = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}
        def run():
            index = guided.TokenIndex.from_regex(guided.json_schema_to_regex(S), BYTES)
            return [accepts(index, t) for t in [b"null", b'[1,{"k":"v"}]', b"nul", b"[1,]"]]
        """,
        None,
        result=[True, True, False, False],
        seconds=2,
        rss_mib=384,
    ),
    Case(
        "ref-self-index",
        """
        def run():
            index = guided.TokenIndex.from_json_schema({"$ref": "#"}, BYTES)
            texts = [b"null", b'[1,{"k":"v"}]', b"[" * 100 + b"]" * 100, b"nul", b"[1,]"]
            return [accepts(index, t) for t in texts]
        """,
        None,
        result=[True, True, True, False, False],
        seconds=1,
        rss_mib=128,
    ),
    Case(
        "ref-self-regex",
        """
        def run():
            index = guided.TokenIndex.from_regex(guided.json_schema_to_regex({"$ref": "#"}), BYTES)
            return [accepts(index, t) for t in [b"null", b'[1,{"k":"v"}]', b"nul", b"[1,]"]]
        """,
        None,
        result=[True, True, False, False],
        seconds=2,
        rss_mib=384,
    ),
    # Sixty levels, each an anyOf of two references to the next: 2^60 paths if references were
    # expanded rather than shared.
    Case(
        "ref-bomb-anyof-60-index",
        """
        N = 60
        defs = {
            f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
            for i in range(N)
        }
        defs[f"d{N}"] = {"type": "integer"}
        S = json.dumps({"$ref": "#/$defs/d0", "$defs": defs})
        def run():
            guided.TokenIndex.from_json_schema(S, BYTES)
        """,
        "SizeLimitError",
        "max_work",
        seconds=8,
        rss_mib=128,
    ),
    # Generation, not compilation, is what nests here: every "[" opens a call.
    Case(
        "schema-recursion-walk-10k",
        deep_walk(
            'guided.TokenIndex.from_json_schema({"type": "array", "items": {"$ref": "#"}}, BYTES)',
            b"[",
            b"[[[]]]",
        ),
        "SizeLimitError",
        "max_stack",
        seconds=1,
        rss_mib=128,
    ),
    # --- number automata printed as a pattern ---------------------------------------------------
    # multipleOf is a residue automaton; a few of them intersected, and a few more under `not`,
    # make one of a few thousand states, which has no printable expression within the budget.
    # Found by fuzzing: state elimination rescanned every edge and re-measured every expression
    # at each step and took five minutes to refuse this; now the refusal takes milliseconds. The
    # token index never prints it, and compiles it.
    Case(
        "schema-residue-automata-printed",
        """
        S = {
            "type": "number",
            "allOf": [{"multipleOf": 19}, {"multipleOf": 9.0}, {"multipleOf": 2.125}],
            "not": {"anyOf": [{"multipleOf": m} for m in (2, 6.5, 5, 7, 11, 37)]},
        }
        def run():
            guided.TokenIndex.from_json_schema(S, BYTES)
            guided.json_schema_to_regex(S)
        """,
        "SizeLimitError",
        "max_pattern_nodes",
        seconds=2,
        rss_mib=256,
    ),
    # --- vocabularies -----------------------------------------------------------------------------
    # Ten million tokens fit under the maximum of 2^24 ids: accepted, and usable. The Python
    # list alone is ~560 MiB and the constructor's transient peak adds ~800 MiB (for a vocabulary
    # of ~100 MB once built), so the cap is wider than elsewhere.
    Case(
        "vocab-10m-tokens",
        """
        import numpy as np
        TOKENS = [b"%x" % i for i in range(10_000_000)]
        def run():
            vocab = guided.Vocabulary(TOKENS, eos_token_ids=[0])
            guide = guided.Guide(guided.TokenIndex.from_regex("[0-9a-f]{1,3}", vocab))
            mask = np.zeros((1, (vocab.vocab_size + 31) // 32), dtype=np.int32)
            guide.fill_bitmask(mask)
            # The hex spellings of 1..0xfff; id 0 ("0") is EOS, not allowed at the start.
            return [len(vocab), int(np.unpackbits(mask.view(np.uint8)).sum())]
        """,
        None,
        result=[10_000_000, 4095],
        seconds=10,
        rss_mib=3072,
        cap=4 * GIB,
    ),
    Case(
        "vocab-size-2pow40",
        """
        def run():
            guided.Vocabulary([b"a"], vocab_size=1 << 40)
        """,
        "VocabularyError",
        seconds=1,
        rss_mib=64,
    ),
    # A serialized vocabulary (what a pickle carries) whose header claims 2^24 tokens and 4 GiB
    # of bytes that are not there: refused before anything that size is allocated.
    Case(
        "vocab-from-bytes-lying-header",
        """
        import struct
        DATA = (
            b"GDVOCAB\\x00" + struct.pack("<I", 1)
            + struct.pack("<QQQQ", 1 << 24, 1 << 24, 0, (1 << 32) - 1) + b"\\x00" * 64
        )
        def run():
            guided.Vocabulary.from_bytes(DATA)
        """,
        "VocabularyError",
        seconds=1,
        rss_mib=64,
    ),
    # Two lines can ask for the largest id allowed: the vocabulary is then 2^24 slots (64 MiB of
    # offsets), which is the price the id limit sets.
    Case(
        "tiktoken-rank-at-maximum",
        """
        PATH = os.path.join(TMP, "max.tiktoken")
        with open(PATH, "w") as f:
            f.write("YQ== 0\\nYg== %d\\n" % ((1 << 24) - 1))
        def run():
            vocab = guided.Vocabulary.from_tiktoken(PATH)
            return [len(vocab), vocab.token_bytes((1 << 24) - 1).decode()]
        """,
        None,
        result=[1 << 24, "b"],
        seconds=3,
        rss_mib=768,
    ),
    Case(
        "tiktoken-rank-2pow40",
        """
        PATH = os.path.join(TMP, "huge.tiktoken")
        with open(PATH, "w") as f:
            f.write("YQ== 0\\nYg== %d\\n" % (1 << 40))
        def run():
            guided.Vocabulary.from_tiktoken(PATH)
        """,
        "VocabularyError",
        seconds=1,
        rss_mib=64,
    ),
    # --- a malformed tokenizer.json of 500 MB -----------------------------------------------------
    # Sparse: a valid-looking start, then zero bytes to 500 MB that cost nothing on disk. Past
    # max_file_bytes (256 MiB by default) the file is refused by its size, before a byte is read.
    Case(
        "tokenizer-json-500mb-sparse",
        sparse_file(
            "tokenizer.json",
            TOKENIZER_HEAD,
            500_000_000,
            "guided.Vocabulary.from_tokenizer_json(PATH)",
        ),
        "SizeLimitError",
        "max_file_bytes",
        seconds=1,
        rss_mib=64,
    ),
    # With the bound raised the file is read whole (peak RSS ~ file size) and the parser stops at
    # the first zero byte.
    Case(
        "tokenizer-json-500mb-sparse-bound-raised",
        sparse_file(
            "tokenizer.json",
            TOKENIZER_HEAD,
            500_000_000,
            "guided.Vocabulary.from_tokenizer_json(PATH, max_file_bytes=1 << 30)",
        ),
        "VocabularyError",
        seconds=8,
        rss_mib=1280,
    ),
    # Larger than the address-space cap, with the bound raised past it: the read fails as an
    # error, not an abort on a failed allocation.
    Case(
        "tokenizer-json-4gb-sparse-over-cap",
        sparse_file(
            "tokenizer.json",
            TOKENIZER_HEAD,
            4_000_000_000,
            "guided.Vocabulary.from_tokenizer_json(PATH, max_file_bytes=1 << 40)",
        ),
        "VocabularyError",
        seconds=1,
        rss_mib=64,
    ),
    Case(
        "tiktoken-500mb-sparse",
        sparse_file(
            "o200k_base.tiktoken", b"IQ== 0\n", 500_000_000, "guided.Vocabulary.from_tiktoken(PATH)"
        ),
        "SizeLimitError",
        "max_file_bytes",
        seconds=1,
        rss_mib=64,
    ),
    # --- grammars and structural tags nested deep -------------------------------------------------
    Case(
        "gbnf-10k-nested-parens",
        """
        G = "root ::= " + "(" * 10_000 + '"a"' + ")" * 10_000
        def run():
            guided.TokenIndex.from_grammar(G, BYTES, syntax="gbnf")
        """,
        "SizeLimitError",
        "grammar_nesting",
        seconds=1,
        rss_mib=128,
    ),
    Case(
        "lark-10k-nested-parens",
        """
        G = "start: " + "(" * 10_000 + '"a"' + ")" * 10_000
        def run():
            guided.TokenIndex.from_grammar(G, BYTES, syntax="lark", root="start")
        """,
        "SizeLimitError",
        "grammar_nesting",
        seconds=1,
        rss_mib=128,
    ),
    Case(
        "lark-10k-nested-regex-terminal",
        """
        G = "start: /" + "(" * 10_000 + "a" + ")" * 10_000 + "/"
        def run():
            guided.TokenIndex.from_grammar(G, BYTES, syntax="lark", root="start")
        """,
        "GrammarSyntaxError",
        seconds=1,
        rss_mib=128,
    ),
    # Rules that only call the next one are inlined; a chain of 10,000 meets the inlining depth.
    Case(
        "gbnf-10k-rule-chain",
        """
        N = 10_000
        G = "root ::= r0\\n" + "".join(f"r{i} ::= r{i + 1}\\n" for i in range(N))
        G += f'r{N} ::= "a"\\n'
        def run():
            guided.TokenIndex.from_grammar(G, BYTES)
        """,
        "SizeLimitError",
        "grammar_inline_depth",
        seconds=1,
        rss_mib=192,
    ),
    Case(
        "gbnf-recursion-walk-10k",
        deep_walk(
            """guided.TokenIndex.from_grammar('root ::= "(" root ")" | "a"', BYTES)""",
            b"(",
            b"((a))",
        ),
        "SizeLimitError",
        "max_stack",
        seconds=1,
        rss_mib=128,
    ),
    Case(
        "structural-tag-10k-nested-text",
        """
        N = 10_000
        T = (
            '{"type": "structural_tag", "format": '
            + '{"type": "optional", "content": ' * N
            + '{"type": "const_string", "value": "a"}'
            + "}" * N
            + "}"
        )
        def run():
            guided.TokenIndex.from_structural_tag(T, BYTES)
        """,
        "SizeLimitError",
        "json_nesting",
        seconds=1,
        rss_mib=128,
    ),
    Case(
        "structural-tag-10k-nested-dict",
        """
        F = {"type": "const_string", "value": "a"}
        for _ in range(10_000):
            F = {"type": "optional", "content": F}
        def run():
            guided.TokenIndex.from_structural_tag({"type": "structural_tag", "format": F}, BYTES)
        """,
        "SizeLimitError",
        "json_nesting",
        seconds=1,
        rss_mib=128,
    ),
    Case(
        "structural-tag-30-nested-sequence-walk",
        """
        N = 30
        PART = '{"type": "const_string", "value": "%s"}'
        F = '{"type": "sequence", "elements": [' + PART % "(" + ", "
        T = (
            '{"type": "structural_tag", "format": '
            + F * N + PART % "a" + (", " + PART % ")" + "]}") * N
            + "}"
        )
        def run():
            index = guided.TokenIndex.from_structural_tag(T, BYTES)
            return [accepts(index, b"(" * N + b"a" + b")" * N), accepts(index, b"(a)")]
        """,
        None,
        result=[True, False],
        seconds=1,
        rss_mib=128,
    ),
    Case(
        "structural-tag-grammar-10k-nested-parens",
        """
        G = "root ::= " + "(" * 10_000 + '"a"' + ")" * 10_000
        def run():
            guided.TokenIndex.from_structural_tag(
                {"type": "structural_tag", "format": {"type": "grammar", "grammar": G}}, BYTES
            )
        """,
        "SizeLimitError",
        "grammar_nesting",
        seconds=1,
        rss_mib=128,
    ),
    # 100,000 optional "ab"s in a row: after k tokens the automaton is in any of ~100,000
    # positions, so state sets grow with every step until their budget (1024 entries per allowed
    # state) refuses the walk. max_states is cut to 20,000 to keep the case short; at the default
    # 200,000 the same walk refuses only at ~1.9 GB peak RSS after ~8.5 s.
    Case(
        "structural-tag-100k-optional-walk",
        """
        ELEMENT = {"type": "optional", "content": {"type": "const_string", "value": "ab"}}
        FORMAT = {"type": "sequence", "elements": [ELEMENT] * 100_000}
        TAG = {"type": "structural_tag", "format": FORMAT}
        def run():
            index = guided.TokenIndex.from_structural_tag(TAG, BYTES, max_states=20_000)
            walk(index, b"ab" * 2_000)
        """,
        "SizeLimitError",
        "dfa_state_sets",
        seconds=4,
        rss_mib=768,
    ),
]


def run_child(case: Case, tmp_path: Path) -> dict[str, Any]:
    program = PRELUDE + textwrap.dedent(case.code) + EPILOGUE
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "python"), env.get("PYTHONPATH", "")) if p
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", program, str(case.cap), str(tmp_path)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=case.seconds + case.slack,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case.id}: no outcome within {case.seconds + case.slack:g} s (a hang)")
    # A negative status is the signal that killed the child: a crash, not an error.
    assert proc.returncode == 0, (
        f"{case.id}: the child died with status {proc.returncode}\n{proc.stderr[-2000:]}"
    )
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and VmHWM are Linux's")
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_hostile_input_is_bounded(case: Case, tmp_path: Path) -> None:
    report = run_child(case, tmp_path)
    detail = json.dumps(report, indent=1)
    if case.error is None:
        assert report["error"] is None, f"{case.id}: expected acceptance, got {detail}"
        assert report["result"] == case.result, detail
    else:
        assert report["error"] == case.error, f"{case.id}: expected {case.error}, got {detail}"
        assert report["typed"], detail
        if case.limit is not None:
            assert report["attrs"].get("limit") == case.limit, detail
        if case.error == "SizeLimitError":
            # a size limit says what it met and what it allows
            assert report["attrs"]["value"] > report["attrs"]["maximum"] > 0, detail
    assert report["elapsed_s"] < case.seconds, f"{case.id}: over {case.seconds} s: {detail}"
    assert report["peak_rss_mib"] < case.rss_mib, f"{case.id}: over {case.rss_mib} MiB: {detail}"


# --- bitmask buffers of the wrong shape, from every entry point that fills one --------------------

VOCAB = guided.Vocabulary([bytes([b]) for b in range(256)] + [None], eos_token_ids=[256])
WIDTH = (VOCAB.vocab_size + 31) // 32


def _torch() -> Any:
    return pytest.importorskip("torch")


def _unreadable_tensor(width: int) -> Any:
    """A tensor subclass whose shape cannot be read: the fill must refuse it with its own error,
    not let the subclass's exception through."""
    torch = _torch()

    class Unreadable(torch.Tensor):  # type: ignore[misc]
        @property
        def shape(self) -> Any:
            raise RuntimeError("this tensor has no shape to read")

    return torch.zeros((2, width), dtype=torch.int32).as_subclass(Unreadable)


def _read_only(width: int) -> np.ndarray:
    buf = np.zeros((2, width), dtype=np.int32)
    buf.flags.writeable = False
    return buf


def _misaligned(width: int) -> np.ndarray:
    raw = np.zeros(2 * width * 4 + 1, dtype=np.uint8)
    return np.ndarray((2, width), dtype=np.int32, buffer=raw.data, offset=1)


BAD_BUFFERS: dict[str, Callable[[int], Any]] = {
    "int64": lambda w: np.zeros((2, w), dtype=np.int64),
    "uint32": lambda w: np.zeros((2, w), dtype=np.uint32),
    "float32": lambda w: np.zeros((2, w), dtype=np.float32),
    "bool-per-token": lambda w: np.zeros((2, 32 * w), dtype=bool),
    # Same width and kind, but the bytes of each word reversed: a silent misreading if accepted.
    "big-endian-int32": lambda w: np.zeros((2, w), dtype=">i4"),
    "one-word-narrow": lambda w: np.zeros((2, w - 1), dtype=np.int32),
    "one-word-wide": lambda w: np.zeros((2, w + 1), dtype=np.int32),
    "1-d": lambda w: np.zeros(w, dtype=np.int32),
    "3-d": lambda w: np.zeros((1, 2, w), dtype=np.int32),
    "0-d": lambda w: np.array(0, dtype=np.int32),
    "no-rows": lambda w: np.zeros((0, w), dtype=np.int32),
    "column-strided": lambda w: np.zeros((2, 2 * w), dtype=np.int32)[:, ::2],
    "row-strided": lambda w: np.zeros((4, w), dtype=np.int32)[::2],
    "reversed-rows": lambda w: np.zeros((2, w), dtype=np.int32)[::-1],
    "fortran-order": lambda w: np.asfortranarray(np.zeros((2, w), dtype=np.int32)),
    "broadcast": lambda w: np.broadcast_to(np.zeros((1, w), dtype=np.int32), (2, w)),
    "read-only": _read_only,
    "misaligned": _misaligned,
    "list": lambda w: [[0] * w, [0] * w],
    "bytes": lambda w: bytes(8 * w),
    "memoryview": lambda w: memoryview(np.zeros((2, w), dtype=np.int32)),
    "none": lambda w: None,
    "torch-int64": lambda w: _torch().zeros((2, w), dtype=_torch().int64),
    "torch-one-word-narrow": lambda w: _torch().zeros((2, w - 1), dtype=_torch().int32),
    "torch-1-d": lambda w: _torch().zeros(w, dtype=_torch().int32),
    "torch-column-strided": lambda w: _torch().zeros((2, 2 * w), dtype=_torch().int32)[:, ::2],
    "torch-transposed": lambda w: _torch().zeros((w, 2), dtype=_torch().int32).t(),
    "torch-expanded": lambda w: _torch().zeros((1, w), dtype=_torch().int32).expand(2, w),
    "torch-meta-device": lambda w: _torch().zeros((2, w), dtype=_torch().int32, device="meta"),
    "torch-row-strided": lambda w: _torch().zeros((4, w), dtype=_torch().int32)[::2],
    "torch-sparse": lambda w: _torch().zeros((2, w), dtype=_torch().int32).to_sparse(),
    "torch-unreadable-subclass": _unreadable_tensor,
}


def _fill_guide(guide: guided.Guide, buf: Any) -> None:
    guide.fill_bitmask(buf, 0)


def _fill_batch(guide: guided.Guide, buf: Any) -> None:
    guided.fill_next_token_bitmask([guide], buf)


def _fill_torch_helper(guide: guided.Guide, buf: Any) -> None:
    _torch()
    from guided.bitmask import fill_next_token_bitmask

    fill_next_token_bitmask([guide], buf)


# TokenIndex takes no buffer (its bitmask() returns a new array), so these three are all of them;
# the torch helper is listed because it hands native guides to the extension's fill unchecked.
ENTRY_POINTS: dict[str, Callable[[guided.Guide, Any], None]] = {
    "Guide.fill_bitmask": _fill_guide,
    "guided.fill_next_token_bitmask": _fill_batch,
    "guided.bitmask.fill_next_token_bitmask": _fill_torch_helper,
}


def _snapshot(buf: Any) -> Any:
    """A copy to compare against after the call, where the buffer's contents can be read."""
    if isinstance(buf, np.ndarray):
        return np.array(buf, copy=True)
    if type(buf).__module__.startswith("torch") and buf.device.type == "cpu":
        return buf.to_dense().clone()
    return None


def _allowed(words: np.ndarray) -> list[int]:
    bits = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[: VOCAB.vocab_size]).tolist()


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("make", list(BAD_BUFFERS))
def test_bad_bitmask_is_refused_and_guide_stays_usable(make: str, entry: str) -> None:
    index = guided.TokenIndex.from_regex("ab|cd", VOCAB)
    guide = guided.Guide(index)
    guide.advance(ord("a"))
    buf = BAD_BUFFERS[make](WIDTH)
    before = _snapshot(buf)
    with pytest.raises(guided.GuidedError):
        ENTRY_POINTS[entry](guide, buf)
    if before is not None:
        after = buf.to_dense() if hasattr(buf, "to_dense") else buf
        assert (np.asarray(after) == np.asarray(before)).all(), "a refused buffer was written"
    # Nothing moved: the next fill is the mask after "a", and the walk goes on.
    good = np.full((1, WIDTH), -1, dtype=np.int32)
    ENTRY_POINTS[entry](guide, good)
    assert _allowed(good[0]) == [ord("b")]
    assert (good[0] == index.bitmask(guide.state)).all()
    guide.advance(ord("b"))
    ENTRY_POINTS[entry](guide, good)
    assert _allowed(good[0]) == [256]


@pytest.mark.parametrize(
    "call",
    [
        lambda g, h, buf: g.fill_bitmask(buf, -1),
        lambda g, h, buf: g.fill_bitmask(buf, 2),
        lambda g, h, buf: g.fill_bitmask(buf, 1 << 62),
        lambda g, h, buf: guided.fill_next_token_bitmask([g, g], buf, [1, 1]),
        lambda g, h, buf: guided.fill_next_token_bitmask([g, g], buf, [0]),
        lambda g, h, buf: guided.fill_next_token_bitmask([g], buf, [-(1 << 62)]),
        lambda g, h, buf: guided.fill_next_token_bitmask([g, g], buf, threads=0),
        lambda g, h, buf: guided.fill_next_token_bitmask([g, h], buf),
    ],
    ids=[
        "row-negative",
        "row-past-end",
        "row-2pow62",
        "row-named-twice",
        "indices-too-few",
        "index-negative-2pow62",
        "zero-threads",
        "guides-of-different-widths",
    ],
)
def test_bad_fill_arguments_are_refused_and_write_nothing(call: Callable[..., None]) -> None:
    guide = guided.Guide(guided.TokenIndex.from_regex("ab|cd", VOCAB))
    # A guide over a vocabulary whose masks are one word wider.
    other = guided.Guide(guided.TokenIndex.from_regex("a", guided.Vocabulary([b"a"] * 300)))
    buf = np.full((2, WIDTH), 7, dtype=np.int32)
    with pytest.raises(guided.GuidedError):
        call(guide, other, buf)
    assert (buf == 7).all()
    guide.fill_bitmask(buf, 1)
    assert _allowed(buf[1]) == [ord("a"), ord("c")]


# --- deep inputs on a thread with a small stack ---------------------------------------------------


def test_deep_inputs_compile_on_a_small_thread_stack() -> None:
    """Servers call guided from worker threads whose stacks are far smaller than the main
    thread's 8 MiB. Passes that recurse as deep as the input (an object's optional members nest
    its expression once per member; locations of a schema nest in one another) grow their stack
    on the heap, so neither a wide object nor a deep schema can overflow a 256 KiB thread."""
    import threading

    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(3000)}}
    deep: dict[str, Any] = {"type": "integer"}
    for _ in range(60):
        deep = {"type": "object", "properties": {"a": deep}}
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            index = guided.TokenIndex.from_json_schema(wide, VOCAB)
            guide = guided.Guide(index)
            outcome["wide"] = all(guide.accept_token(b) for b in b'{"p2999":7}') and (
                guide.is_accepting()
            )
            outcome["wide_regex"] = len(guided.json_schema_to_regex(wide)) > 0
            index = guided.TokenIndex.from_json_schema(deep, VOCAB)
            text = '{"a":' * 60 + "1" + "}" * 60
            guide = guided.Guide(index)
            outcome["deep"] = all(guide.accept_token(b) for b in text.encode())
        except BaseException as exc:  # reported to the test thread
            outcome["error"] = repr(exc)

    previous = threading.stack_size(256 * 1024)
    try:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    finally:
        threading.stack_size(previous)
    assert outcome == {"wide": True, "wide_regex": True, "deep": True}, outcome
