"""Token masks side by side: guided, xgrammar, llguidance and outlines-core on the same vocabulary.

What it measures. For each vocabulary (GPT-2 50k, Qwen2 152k, o200k 200k) and each workload,
every engine compiles the constraint and is driven along the same valid output, token by token,
filling one packed int32 bitmask row before each token. The workloads: a digits regex, the WHATWG
email regex, an email regex with counted classes (``{1,64}``, ``{1,63}``, ``{2,24}``), a 6-property
JSON schema and a 26-property one with nested objects, arrays and enums (their strings unbounded),
a 7-property schema whose strings carry ``minLength``/``maxLength`` (what pydantic's
``constr(max_length=...)`` writes) beside an enum, bounds and a nested object, and a 40-property
schema with patterns, bounded arrays of objects and bounded strings. Each bounded string is as many
automaton states as its bound, which is what the last three measure. Three context-free grammars
close the list (llama.cpp's JSON, C and arithmetic GBNF grammars, compiled from the grammar text by
every engine but outlines-core, which has no grammars). The figures:

- compile: building the constraint object (median of ``--reps`` compiles);
- TTFM: time to first mask, compile + a fresh matcher + the first mask (median of the same reps);
- first pass: each mask along the output on the freshly compiled object, where lazy engines pay for
  states they have not seen (median and p99 over positions);
- warm: the same walk again with a fresh matcher on the same compiled object (median over positions
  of the per-position median of ``--warm`` passes);
- memory: guided ``index.memory_bytes()`` after the pass, less what every index over the
  vocabulary shares (its token trie and the class slices built so far, reported once per
  vocabulary in the preparation table), xgrammar ``compiled.memory_size_bytes``, and for
  llguidance and outlines-core, which report nothing, the growth of the process's resident set
  around compile + first pass (labelled "rss"; allocator reuse makes it a rough figure);
- batch: 64 guides spread along the large JSON output, one ``fill_next_token_bitmask`` call on 1 and
  on 2 threads, warm, beside xgrammar's ``BatchGrammarMatcher`` and llguidance's ``LLExecutor``.

Why this way. The peers are built from guided's token bytes (``peers.py``) so that every engine
sees the same ids and bytes; the text is tokenized by the model's real tokenizer and every token is
checked with guided and accepted by every peer, and each mask is hashed so the table can say how
often a peer's mask equals guided's (regex workloads must agree everywhere; JSON workloads differ
where the peers' whitespace policies do: guided and outlines-core allow ``[ ]?`` between JSON
tokens, xgrammar and llguidance any JSON whitespace by default). The JSON text is ``json.dumps``
output, one space after ``:`` and ``,``, which all four policies accept.

Each engine fills the buffer its serving integrations fill: guided and xgrammar a CPU
``torch.int32`` tensor (what vLLM and SGLang pass), llguidance and outlines-core a numpy array
through a raw pointer, their own fastest entry.

Every engine compiles the JSON Schema itself; guided through ``TokenIndex.from_json_schema``, the
path engines take (its ``IndexCache`` and integrations call it).

outlines-core compiles eagerly and is slow on large vocabularies (tens of seconds, hundreds of MB
for o200k), so it runs in a subprocess with a wall-clock budget (``--outlines-budget``, 60 s by
default); past it the cells read "timeout", and the vocabulary's remaining, larger workloads are
skipped for it. The full run takes a few minutes on two cores; ``--quick`` (GPT-2 only) under one.

Run: ``python bench/index.py [--quick]``; results go to ``bench/results/index.json``.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import peers

import guided
from common import median, percentile, rss_bytes, table, time_call, write_results

# --- workloads --------------------------------------------------------------------------------


def closed(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


STR, INT, NUM, BOOL = (
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
)


def enum(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


MODERATE_SCHEMA = closed(
    {
        "name": STR,
        "age": INT,
        "role": enum("admin", "editor", "viewer"),
        "active": BOOL,
        "score": NUM,
        "tags": array(STR),
    }
)
MODERATE_VALUE = {
    "name": "Zoë Okonkwo-Hartmann",
    "age": 37,
    "role": "editor",
    "active": True,
    "score": 91.25,
    "tags": ["infra", "on-call", "rust", "métriques"],
}

LARGE_SCHEMA = closed(
    {
        "id": INT,
        "uuid": STR,
        "name": STR,
        "email": STR,
        "age": INT,
        "height_m": NUM,
        "active": BOOL,
        "role": enum("admin", "editor", "viewer", "guest"),
        "status": enum("pending", "approved", "rejected", "archived"),
        "tags": array(STR),
        "scores": array(NUM),
        "address": closed(
            {
                "street": STR,
                "city": STR,
                "postal_code": STR,
                "country": enum("US", "FR", "DE", "JP", "BR", "NG"),
                "geo": closed({"lat": NUM, "lon": NUM}),
            }
        ),
        "phones": array(closed({"kind": enum("home", "work", "mobile"), "number": STR})),
        "created_at": STR,
        "updated_at": STR,
        "priority": INT,
        "ratio": NUM,
        "verified": BOOL,
        "manager": closed({"name": STR, "email": STR, "level": INT}),
        "skills": array(
            closed({"name": STR, "years": INT, "level": enum("junior", "mid", "senior", "staff")})
        ),
        "language": enum("en", "fr", "de", "ja", "pt", "yo"),
        "timezone": STR,
        "notes": STR,
        "nickname": STR,
        "history": array(INT),
        "flags": array(BOOL),
    }
)
LARGE_VALUE = {
    "id": 48213,
    "uuid": "3f2b8c1e-9d4a-4e7b-a6c5-0f1e2d3c4b5a",
    "name": "Łucja Nakamura-Dubois",
    "email": "lucja.nd@example-corp.co.jp",
    "age": 29,
    "height_m": 1.68,
    "active": False,
    "role": "admin",
    "status": "approved",
    "tags": ["platform", "security", "東京", "kubernetes", "on-call"],
    "scores": [88.5, 92.0, 79.75, -3.5e-2, 100],
    "address": {
        "street": "12 Rue de la Roquette, Bât. B",
        "city": "Paris",
        "postal_code": "75011",
        "country": "FR",
        "geo": {"lat": 48.8553, "lon": 2.3755},
    },
    "phones": [
        {"kind": "work", "number": "+33 1 42 68 53 00"},
        {"kind": "mobile", "number": "+81-90-1234-5678"},
    ],
    "created_at": "2023-04-18T09:12:44Z",
    "updated_at": "2024-11-02T17:05:09+01:00",
    "priority": 2,
    "ratio": 0.3333,
    "verified": True,
    "manager": {"name": "Adébáyọ̀ Ògúnlẹ́yẹ", "email": "a.ogunleye@example-corp.com", "level": 7},
    "skills": [
        {"name": "Rust", "years": 6, "level": "senior"},
        {"name": "PostgreSQL", "years": 9, "level": "staff"},
        {"name": "Go", "years": 2, "level": "mid"},
    ],
    "language": "fr",
    "timezone": "Europe/Paris",
    "notes": 'Prefers async reviews; "no meetings" on Fridays. Escalate via #infra-oncall 🚨.',
    "nickname": "lucy",
    "history": [3, 14, 15, 92, 65, 35, 89, 79],
    "flags": [True, False, False, True],
}


def text(max_length: int, min_length: int = 0) -> dict[str, Any]:
    bounds = {"minLength": min_length} if min_length else {}
    return {"type": "string", "maxLength": max_length, **bounds}


def between(low: int, high: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high}


def bounded_array(items: dict[str, Any], max_items: int, min_items: int = 0) -> dict[str, Any]:
    return {"type": "array", "items": items, "minItems": min_items, "maxItems": max_items}


BOUNDED_SCHEMA = closed(
    {
        "username": text(32, 3),
        "display_name": text(64),
        "email": text(40, 6),
        "role": enum("admin", "editor", "viewer"),
        "age": between(13, 120),
        "score": {"type": "number", "minimum": 0, "maximum": 100},
        "address": closed({"city": text(20, 1), "country_code": text(2, 2)}),
    }
)
BOUNDED_VALUE = {
    "username": "zoe_okonkwo",
    "display_name": "Zoë Okonkwo-Hartmann, platform team",
    "email": "zoe.okonkwo@example.org",
    "role": "editor",
    "age": 37,
    "score": 91.25,
    "address": {"city": "Lagos", "country_code": "NG"},
}

DATE = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
FORTY_SCHEMA = closed(
    {
        "id": between(1, 10_000_000),
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4,6}$"},
        "title": text(80, 1),
        "subtitle": text(120),
        "summary": text(200),
        "slug": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$", "maxLength": 60},
        "brand": text(40, 1),
        "category": enum("books", "music", "garden", "toys", "tools"),
        "condition": enum("new", "used", "refurbished"),
        "price": {"type": "number", "minimum": 0, "maximum": 100000},
        "currency": enum("USD", "EUR", "JPY", "NGN", "BRL"),
        "discount_percent": between(0, 90),
        "in_stock": BOOL,
        "stock_count": between(0, 100000),
        "weight_grams": between(1, 50000),
        "color": text(24),
        "material": text(32),
        "origin_country": text(2, 2),
        "release_date": DATE,
        "updated_on": DATE,
        "rating": {"type": "number", "minimum": 0, "maximum": 5},
        "review_count": between(0, 1_000_000),
        "featured": BOOL,
        "gift_wrap": BOOL,
        "age_rating": enum("all", "7+", "12+", "16+", "18+"),
        "language": enum("en", "fr", "de", "ja", "pt", "yo"),
        "isbn": {"type": "string", "pattern": "^(97[89])?[0-9]{9}[0-9X]$"},
        "dimensions": closed({"width_mm": between(1, 5000), "height_mm": between(1, 5000)}),
        "seller": closed(
            {
                "name": text(60, 1),
                "email": text(64, 6),
                "rating": between(1, 5),
                "country": text(2, 2),
            }
        ),
        "tags": bounded_array(text(20, 1), 8),
        "images": bounded_array(
            closed({"url": text(120, 10), "alt": text(80), "primary": BOOL}), 6, 1
        ),
        "variants": bounded_array(
            closed(
                {
                    "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4,6}$"},
                    "color": text(24),
                    "size": enum("XS", "S", "M", "L", "XL"),
                    "price": {"type": "number", "minimum": 0, "maximum": 100000},
                }
            ),
            10,
        ),
        "warehouse_codes": bounded_array({"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"}, 4),
        "shipping_days": bounded_array(between(0, 60), 3, 1),
        "notes": text(300),
        "return_policy": enum("none", "14-days", "30-days", "90-days"),
        "warranty_months": between(0, 120),
        "energy_class": enum("A", "B", "C", "D", "E", "F", "G"),
        "barcode": {"type": "string", "pattern": "^[0-9]{8,14}$"},
        "created_by": text(40, 1),
    }
)
FORTY_VALUE = {
    "id": 4821337,
    "sku": "GRD-20417",
    "title": "Ceramic self-watering planter, 24 cm",
    "subtitle": "Glazed stoneware with a hidden 1.2 L reservoir",
    "summary": 'Keeps herbs and small houseplants watered for up to two weeks; "frost-safe" glaze.',
    "slug": "ceramic-self-watering-planter-24",
    "brand": "Terrakotta & Söhne",
    "category": "garden",
    "condition": "new",
    "price": 34.9,
    "currency": "EUR",
    "discount_percent": 15,
    "in_stock": True,
    "stock_count": 212,
    "weight_grams": 1850,
    "color": "sage green",
    "material": "stoneware",
    "origin_country": "PT",
    "release_date": "2024-03-18",
    "updated_on": "2025-11-02",
    "rating": 4.6,
    "review_count": 1387,
    "featured": False,
    "gift_wrap": True,
    "age_rating": "all",
    "language": "pt",
    "isbn": "9780306406157",
    "dimensions": {"width_mm": 240, "height_mm": 210},
    "seller": {
        "name": "Jardim Atlântico Lda.",
        "email": "vendas@jardim.pt",
        "rating": 5,
        "country": "PT",
    },
    "tags": ["planter", "ceramic", "self-watering", "indoor"],
    "images": [
        {"url": "https://img.example.com/p/4821337/main.jpg", "alt": "Front view", "primary": True},
        {
            "url": "https://img.example.com/p/4821337/side.jpg",
            "alt": "Side, reservoir visible",
            "primary": False,
        },
    ],
    "variants": [
        {"sku": "GRD-20418", "color": "terracotta", "size": "M", "price": 29.9},
        {"sku": "GRD-20419", "color": "midnight blue", "size": "L", "price": 39.9},
    ],
    "warehouse_codes": ["PT01", "ES03"],
    "shipping_days": [2, 5],
    "notes": "Ships in recycled packaging. Não colocar na máquina de lavar loiça.",
    "return_policy": "30-days",
    "warranty_months": 24,
    "energy_class": "A",
    "barcode": "5601234567890",
    "created_by": "catalogue-import",
}

# An e-mail address with counted classes, as validators in the field write it.
EMAIL_COUNTED = r"[a-zA-Z0-9._%+-]{1,64}@(?:[a-zA-Z0-9-]{1,63}\.){1,4}[a-zA-Z]{2,24}"

# The WHATWG (HTML living standard) e-mail address pattern.
EMAIL = (
    r"[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*"
)


# llama.cpp's json.gbnf with its optional white space written `(...)?` instead of an empty
# alternative, which xgrammar's EBNF reader refuses; the language is the same.
JSON_GBNF = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws     ::= (" " | "\n" [ \t]{0,20})?
"""

# llama.cpp's c.gbnf and arithmetic.gbnf, as tests/data/grammars holds them.
GRAMMARS = Path(__file__).resolve().parent.parent / "tests" / "data" / "grammars"

C_PROGRAM = (
    "int main(){int total = 0;int i = 0;while(i<10){total = total+i*2;i = i+1;}"
    "if(total>50){print (total);}return total;}"
)


# Tool calling: free text with calls of three tools, as a structural tag (xgrammar's format;
# objects closed and any JSON white space, which is how xgrammar reads the schemas in it).
TOOLS = {
    "get_weather": closed(
        {"city": {"type": "string"}, "unit": enum("celsius", "fahrenheit"), "days": between(1, 14)}
    ),
    "search": closed({"query": {"type": "string"}, "top_k": between(1, 50), "safe": BOOL}),
    "create_event": closed(
        {
            "title": {"type": "string"},
            "start": {"type": "string", "format": "date-time"},
            "attendees": array({"type": "string", "format": "email"}),
        }
    ),
}
ANY_WS = r"[ \n\r\t]*"
TOOL_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<function="],
        "tags": [
            {
                "type": "tag",
                "begin": f"<function={name}>",
                "content": {"type": "json_schema", "json_schema": schema},
                "end": "</function>",
            }
            for name, schema in TOOLS.items()
        ],
    },
}
TOOL_TEXT = (
    "Let me look that up for you.\n"
    '<function=get_weather>{"city": "Lisbon", "unit": "celsius", "days": 3}</function>\n'
    "Then I will book it: "
    '<function=create_event>{"title": "Trip planning", "start": "2026-12-04T09:30:00Z", '
    '"attendees": ["ana@example.org", "bo@example.com"]}</function> Done.'
)


@dataclass
class Workload:
    """A constraint and a valid output: a regex, a JSON Schema (``regex`` empty), a GBNF
    grammar or a structural tag (``regex`` empty)."""

    name: str
    text: str
    regex: str
    schema: dict[str, Any] | None = None
    grammar: str | None = None
    tag: dict[str, Any] | None = None
    syntax: str = "gbnf"


def workloads() -> list[Workload]:
    return [
        Workload("digits", "31415926535897932384626433832795", r"[0-9]{1,32}"),
        Workload("email", "jane.doe+bench-2024@mail.example-corp.co.uk", EMAIL),
        Workload("email-counted", "jane.doe+bench-2024@mail.example-corp.co.uk", EMAIL_COUNTED),
        Workload("json-6", json.dumps(MODERATE_VALUE, ensure_ascii=False), "", MODERATE_SCHEMA),
        Workload("json-26", json.dumps(LARGE_VALUE, ensure_ascii=False), "", LARGE_SCHEMA),
        Workload(
            "json-7-bounded", json.dumps(BOUNDED_VALUE, ensure_ascii=False), "", BOUNDED_SCHEMA
        ),
        Workload("json-40", json.dumps(FORTY_VALUE, ensure_ascii=False), "", FORTY_SCHEMA),
        Workload("gbnf-json", json.dumps(LARGE_VALUE, ensure_ascii=False), "", grammar=JSON_GBNF),
        Workload("gbnf-c", C_PROGRAM, "", grammar=(GRAMMARS / "c.gbnf").read_text()),
        Workload(
            "gbnf-arith",
            "(total+12)*rate/4=x1\nvalue_2*(a-b)=(c+d*3)\n",
            "",
            grammar=(GRAMMARS / "arithmetic.gbnf").read_text(),
        ),
        Workload(
            "lark-json",
            json.dumps(LARGE_VALUE, ensure_ascii=False),
            "",
            grammar=(GRAMMARS / "json.lark").read_text(),
            syntax="lark",
        ),
        Workload("tool-calls", TOOL_TEXT, "", tag=TOOL_TAG),
    ]


# --- engines ----------------------------------------------------------------------------------


def mask_hash(words: np.ndarray, ignore: Sequence[int] = ()) -> str:
    """A short digest of a mask, with the bits of `ignore` cleared (EOS ids a peer cannot take)."""
    if ignore:
        words = words.view(np.uint32).copy()
        for t in ignore:
            words[t // 32] &= ~np.uint32(1 << (t % 32))
    return hashlib.blake2b(words.tobytes(), digest_size=8).hexdigest()


class Engine(ABC):
    """One engine's calls behind the same verbs; the filler writes row 0 of the engine's buffer,
    which ``words()`` reads."""

    name = ""
    memory_label = ""

    def __init__(self, width: int) -> None:
        self.buf = np.zeros((1, width), dtype=np.int32)

    @abstractmethod
    def compile(self, w: Workload) -> Any: ...

    @abstractmethod
    def matcher(self, compiled: Any) -> Any: ...

    @abstractmethod
    def filler(self, m: Any) -> Callable[[], Any]: ...

    @abstractmethod
    def advance(self, m: Any, token: int) -> bool: ...

    def words(self) -> np.ndarray:
        return self.buf[0]

    def memory(self, compiled: Any) -> int | None:
        return None


class Guided(Engine):
    name = "guided"
    memory_label = "index"

    def __init__(self, width: int, vocab: guided.Vocabulary) -> None:
        import torch

        super().__init__(width)
        self.vocab = vocab
        self.tbuf = torch.zeros((1, width), dtype=torch.int32)

    def compile(self, w: Workload) -> Any:
        if w.schema is not None:
            return guided.TokenIndex.from_json_schema(w.schema, self.vocab)
        if w.grammar is not None:
            return guided.TokenIndex.from_grammar(w.grammar, self.vocab, syntax=w.syntax)
        if w.tag is not None:
            return guided.TokenIndex.from_structural_tag(w.tag, self.vocab, whitespace=ANY_WS)
        return guided.TokenIndex.from_regex(w.regex, self.vocab)

    def matcher(self, compiled: Any) -> Any:
        return guided.Guide(compiled)

    def filler(self, m: Any) -> Callable[[], Any]:
        fill, buf = m.fill_bitmask, self.tbuf
        return lambda: fill(buf, 0)

    def words(self) -> np.ndarray:
        return np.asarray(self.tbuf.numpy()[0])

    def advance(self, m: Any, token: int) -> bool:
        return bool(m.accept_token(token))

    def memory(self, compiled: Any) -> int | None:
        return int(compiled.memory_bytes())


class Xgrammar(Engine):
    name = "xgrammar"
    memory_label = "compiled"

    def __init__(self, width: int, info: Any) -> None:
        import torch
        import xgrammar as xgr

        super().__init__(width)
        self.xgr = xgr
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        self.tbuf = torch.zeros((1, width), dtype=torch.int32)

    def compile(self, w: Workload) -> Any:
        if w.schema is not None:
            return self.compiler.compile_json_schema(json.dumps(w.schema))
        if w.grammar is not None and w.syntax == "lark":
            return self.compiler.compile_grammar(self.xgr.Grammar.from_lark(w.grammar))
        if w.grammar is not None:
            return self.compiler.compile_grammar(w.grammar)
        if w.tag is not None:
            return self.compiler.compile_structural_tag(json.dumps(w.tag))
        return self.compiler.compile_regex(w.regex)

    def matcher(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def filler(self, m: Any) -> Callable[[], Any]:
        fill, buf = m.fill_next_token_bitmask, self.tbuf
        return lambda: fill(buf, 0)

    def advance(self, m: Any, token: int) -> bool:
        return bool(m.accept_token(token))

    def words(self) -> np.ndarray:
        return np.asarray(self.tbuf.numpy()[0])

    def memory(self, compiled: Any) -> int | None:
        return int(compiled.memory_size_bytes)


class Llguidance(Engine):
    """The compiled object is a pristine ``LLMatcher``; each walk runs on a ``deep_copy``."""

    name = "llguidance"
    memory_label = "rss"

    def __init__(self, width: int, tokenizer: Any) -> None:
        import llguidance as llg

        super().__init__(width)
        self.llg = llg
        self.tokenizer = tokenizer

    def compile(self, w: Workload) -> Any:
        M = self.llg.LLMatcher
        if w.schema is not None:
            grammar = M.grammar_from_json_schema(w.schema)
        elif w.grammar is not None:
            grammar = self.llg.grammar_from(w.syntax, w.grammar)
        elif w.tag is not None:
            raise NotImplementedError("llguidance takes no structural tags")
        else:
            grammar = M.grammar_from_regex(w.regex)
        m = M(self.tokenizer, grammar, log_level=0)
        if m.is_error():
            raise RuntimeError(f"llguidance: {m.get_error()}")
        return m

    def matcher(self, compiled: Any) -> Any:
        return compiled.deep_copy()

    def filler(self, m: Any) -> Callable[[], Any]:
        fill, ptr, size = m.unsafe_compute_mask_ptr, self.buf.ctypes.data, self.buf.nbytes
        return lambda: fill(ptr, size)

    def advance(self, m: Any, token: int) -> bool:
        return bool(m.consume_token(token)) and not m.is_error()


class Outlines(Engine):
    """Memory is the pickled index (outlines-core's own serialization of its state and
    transition tables), a lower bound on what the index holds in memory."""

    name = "outlines-core"
    memory_label = "pickled"

    def __init__(self, width: int, vocabulary: Any) -> None:
        import outlines_core as oc

        super().__init__(width)
        self.oc = oc
        self.vocabulary = vocabulary

    def compile(self, w: Workload) -> Any:
        regex = w.regex
        if w.schema is not None:
            regex = self.oc.json_schema.build_regex_from_schema(json.dumps(w.schema))
        return self.oc.Index(regex, self.vocabulary)

    def matcher(self, compiled: Any) -> Any:
        return self.oc.Guide(compiled)

    def filler(self, m: Any) -> Callable[[], Any]:
        fill, ptr, size = m.write_mask_into, self.buf.ctypes.data, self.buf.shape[1]
        return lambda: fill(ptr, size, 4)

    def advance(self, m: Any, token: int) -> bool:
        try:
            m.advance(token, return_tokens=False)
        except ValueError:
            return False
        return True

    def memory(self, compiled: Any) -> int | None:
        import pickle

        return len(pickle.dumps(compiled))


# --- measurement ------------------------------------------------------------------------------


@dataclass
class Result:
    engine: str
    compile_s: list[float] = field(default_factory=list)
    ttfm_s: list[float] = field(default_factory=list)
    first_s: list[float] = field(default_factory=list)
    warm_s: list[float] = field(default_factory=list)
    memory: int | None = None
    memory_label: str = ""
    rss_delta: int = 0
    hashes: list[str] = field(default_factory=list)
    covers_reference: int | None = None
    rejected: str | None = None
    eos_allowed_at_end: bool | None = None
    status: str = "ok"
    error: str | None = None
    # The engine's first compiled object, which the warm passes and batch scaling reuse.
    compiled: Any = None

    def summary(self) -> dict[str, Any]:
        ok = self.status == "ok"
        return {
            "engine": self.engine,
            "status": self.status,
            "compile_ms": median(self.compile_s) * 1e3 if ok else None,
            "ttfm_ms": median(self.ttfm_s) * 1e3 if ok else None,
            "first_median_us": median(self.first_s) * 1e6 if ok else None,
            "first_p99_us": percentile(self.first_s, 99) * 1e6 if ok else None,
            "first_max_us": max(self.first_s) * 1e6 if ok else None,
            "warm_median_us": median(self.warm_s) * 1e6 if ok and self.warm_s else None,
            "memory_bytes": self.memory if self.memory_label != "rss" else self.rss_delta,
            "memory_label": self.memory_label,
            "rss_delta_bytes": self.rss_delta,
            "masks": len(self.first_s),
            "rejected": self.rejected,
            "eos_allowed_at_end": self.eos_allowed_at_end,
            "first_pass_us": [round(t * 1e6, 1) for t in self.first_s],
            "masks_covering_guided": self.covers_reference,
        }


def release_freed_memory() -> None:
    """Hands glibc's free lists back to the system, so that a resident-set delta measured from
    here counts new allocations instead of reused ones."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def measure(
    engines: Sequence[Engine],
    w: Workload,
    tokens: Sequence[int],
    eos_ids: Sequence[int],
    reps: int,
    warm: int,
    keep: list[np.ndarray] | None = None,
) -> dict[str, Result]:
    """`reps` rounds, in each of which every engine in turn compiles and makes a first pass
    along `tokens` on the fresh object (per-position median over the rounds, which keeps one
    preempted call from posing as a slow mask); then, per engine, `warm` passes with fresh
    matchers on its first compiled object, which its result holds.

    The rounds interleave the engines so that a slow spell of a shared machine (another job,
    a throttled core) lands on all of them alike instead of on whichever engine was measuring
    then. With each engine's reps back to back, xgrammar's first-pass median on gpt2
    ``digits`` went from 6.6-8.7 us in three runs to 12.4 us in a fourth, on unchanged code,
    and the row's ratio with it.

    Masks are hashed for comparison with the first EOS id kept and the others cleared, since
    outlines-core takes a single EOS id. The first engine's last first pass is appended to
    `keep` if given (guided's, as the reference); every other engine's result counts the
    positions where its mask allows every token the reference allows. An engine that raises is
    reported as failed and left out of the rounds after."""
    eos, ignore = eos_ids[0], list(eos_ids[1:])
    results = {e.name: Result(e.name, memory_label=e.memory_label) for e in engines}
    passes: dict[str, list[list[float]]] = {e.name: [] for e in engines}
    gc.collect()
    gc.disable()
    try:
        for rep in range(reps):
            for engine in engines:
                res = results[engine.name]
                if res.status != "ok":
                    continue
                # Snapshots and comparisons on the last round only: round 0 measures memory.
                last, first = rep == reps - 1, engine is engines[0]
                snapshots = keep if last and first else None
                reference = keep if last and not first else None
                try:
                    c, times = first_pass(
                        engine, w, tokens, eos, ignore, res, rep, snapshots, reference
                    )
                except Exception as e:  # a peer refusing a workload is a finding, not a crash
                    res.status = f"error: {type(e).__name__}"
                    res.error = str(e)
                    continue
                passes[engine.name].append(times)
                if rep == 0:
                    res.compiled = c
                del c
        for engine in engines:
            res = results[engine.name]
            if res.status != "ok":
                continue
            res.first_s = [median(col) for col in zip(*passes[engine.name])]
            if res.rejected is None:
                res.warm_s = warm_passes(engine, res.compiled, tokens, warm)
    finally:
        gc.enable()
    return results


def first_pass(
    engine: Engine,
    w: Workload,
    tokens: Sequence[int],
    eos: int,
    ignore: list[int],
    res: Result,
    rep: int,
    snapshots: list[np.ndarray] | None,
    reference: Sequence[np.ndarray] | None,
) -> tuple[Any, list[float]]:
    """One compile of `w` by `engine` and a first pass on it, recorded in `res`: the compiled
    object and the pass's per-mask times. Round 0 also measures memory (so that its resident-set
    growth counts only the engine); with `snapshots`, the pass's masks are appended to it, and
    with `reference`, the positions where this engine allows all the reference allows are
    counted."""
    clock = time.perf_counter
    if rep == 0:
        release_freed_memory()
    rss0 = rss_bytes()
    t0 = clock()
    c = engine.compile(w)
    t1 = clock()
    m = engine.matcher(c)
    fill = engine.filler(m)
    fill()
    t2 = clock()
    res.compile_s.append(t1 - t0)
    res.ttfm_s.append(t2 - t0)
    times = [t2 - t1]  # the first mask, with the matcher's creation
    hashes = [mask_hash(engine.words(), ignore)]
    if snapshots is not None:
        snapshots.append(engine.words().copy())
    covers = 0
    if reference:
        covers += bool(np.array_equal(engine.words() & reference[0], reference[0]))
    for k, tok in enumerate(tokens):
        if not engine.advance(m, tok):
            res.rejected = f"token {k} (id {tok})"
            break
        s = clock()
        fill()
        times.append(clock() - s)
        hashes.append(mask_hash(engine.words(), ignore))
        if snapshots is not None:
            snapshots.append(engine.words().copy())
        if reference and k + 1 < len(reference):
            ref = reference[k + 1]
            covers += bool(np.array_equal(engine.words() & ref, ref))
    else:
        words = engine.words()
        res.eos_allowed_at_end = bool((int(words[eos // 32]) >> (eos % 32)) & 1)
    if rep == 0:
        res.rss_delta = rss_bytes() - rss0
        res.memory = engine.memory(c)
        res.hashes = hashes
    if reference:
        res.covers_reference = covers
    del m, fill
    return c, times


def warm_passes(engine: Engine, compiled: Any, tokens: Sequence[int], warm: int) -> list[float]:
    """Per-position median of `warm` passes along `tokens`, each with a fresh matcher on
    `compiled`, whose states the first passes have seen."""
    clock = time.perf_counter
    passes = []
    for _ in range(warm):
        m = engine.matcher(compiled)
        fill = engine.filler(m)
        times = []
        s = clock()
        fill()
        times.append(clock() - s)
        for tok in tokens:
            engine.advance(m, tok)
            s = clock()
            fill()
            times.append(clock() - s)
        passes.append(times)
    return [median(col) for col in zip(*passes)]


def parallel_ceiling() -> float:
    """This machine's 2-thread speedup right now on an embarrassingly parallel job (SHA-256 of
    two 64 MB buffers; hashlib releases the GIL): the most any 2-thread figure can show."""
    import threading

    data = bytes(64 << 20)

    def work() -> None:
        hashlib.sha256(data).digest()

    work()
    t = time.perf_counter()
    work()
    work()
    one = time.perf_counter() - t
    threads = [threading.Thread(target=work) for _ in range(2)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return one / (time.perf_counter() - t)


# --- outlines-core in a subprocess ------------------------------------------------------------


def outlines_worker() -> None:
    """Reads a job on stdin, prints "ready" once the vocabulary is built, then the result."""
    job = json.loads(sys.stdin.readline())
    loaded = peers.load(job["vocab"])
    tokens = peers.token_bytes(loaded.vocab)
    t0 = time.perf_counter()
    vocabulary = peers.outlines_vocabulary(loaded.vocab, tokens)
    prep = time.perf_counter() - t0
    print(json.dumps({"ready": True, "vocab_prep_s": prep}), flush=True)
    w = Workload(**job["workload"])
    engine = Outlines((loaded.vocab.vocab_size + 31) // 32, vocabulary)
    res = measure([engine], w, job["tokens"], loaded.vocab.eos_token_ids, 1, job["warm"])[
        engine.name
    ]
    out = {k: v for k, v in res.__dict__.items() if k != "compiled"}
    print(json.dumps(out), flush=True)


def run_outlines(
    vocab: str, w: Workload, tokens: list[int], warm: int, budget: float
) -> tuple[Result, float | None]:
    """outlines-core's result for one workload, or a "timeout" result past the compile budget."""
    job = {"vocab": vocab, "workload": w.__dict__, "tokens": tokens, "warm": warm}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--outlines-worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(job) + "\n")
    proc.stdin.flush()
    ready = json.loads(proc.stdout.readline() or "{}")
    prep = ready.get("vocab_prep_s")
    try:
        # The budget bounds the compile; the passes after it take well under a second.
        out, _ = proc.communicate(timeout=budget + 15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return Result("outlines-core", status="timeout"), prep
    if proc.returncode != 0 or not out.strip():
        return Result("outlines-core", status=f"error {proc.returncode}"), prep
    res = Result(**json.loads(out.strip().splitlines()[-1]))
    if res.compile_s and res.compile_s[0] > budget:
        res.status = "timeout"
    return res, prep


# --- batch fill -------------------------------------------------------------------------------


def batch_scaling(
    vocab: guided.Vocabulary,
    tokens: list[int],
    compiled: dict[str, Any],
    engines: dict[str, Engine],
    workload: Workload,
    cold_reps: int = 5,
) -> list[dict[str, Any]]:
    """64 matchers spread along `tokens`, one batched fill on 1 and 2 threads, warm; and guided
    cold (fresh index, no mask cached yet)."""
    width = (vocab.vocab_size + 31) // 32
    positions = [round(i * len(tokens) / 64) for i in range(64)]
    rows = []

    def advanced(engine: Engine, c: Any) -> list[Any]:
        out = []
        for p in positions:
            m = engine.matcher(c)
            for tok in tokens[:p]:
                engine.advance(m, tok)
            out.append(m)
        return out

    import torch

    buf = torch.zeros((64, width), dtype=torch.int32)
    guides = advanced(engines["guided"], compiled["guided"])
    fills: dict[str, dict[int, Callable[[], Any]]] = {
        "guided": {
            n: (lambda n=n: guided.fill_next_token_bitmask(guides, buf, threads=n)) for n in (1, 2)
        }
    }
    if "xgrammar" in compiled:
        import xgrammar as xgr

        tbuf = torch.zeros((64, width), dtype=torch.int32)
        xms = advanced(engines["xgrammar"], compiled["xgrammar"])
        batchers = {n: xgr.BatchGrammarMatcher(max_threads=n) for n in (1, 2)}
        fills["xgrammar"] = {
            n: (lambda n=n: batchers[n].batch_fill_next_token_bitmask(xms, tbuf)) for n in (1, 2)
        }
    if "llguidance" in compiled:
        import llguidance as llg
        import llguidance.numpy as llnp

        lms = advanced(engines["llguidance"], compiled["llguidance"])
        pairs = [(m, i) for i, m in enumerate(lms)]
        executors = {n: llg.LLExecutor(num_threads=n) for n in (1, 2)}
        lbuf = np.zeros((64, width), dtype=np.int32)
        fills["llguidance"] = {
            n: (lambda n=n: llnp.fill_next_token_bitmask_par(executors[n], pairs, lbuf))
            for n in (1, 2)
        }
    for name, by_threads in fills.items():
        ms = {}
        for n, fn in by_threads.items():
            fn()  # warm: every state's mask computed once
            ms[n] = median(time_call(fn, repeat=7, min_time=0.05)) * 1e3
        rows.append(
            {
                "engine": name,
                "mode": "warm",
                "one_thread_ms": ms[1],
                "two_threads_ms": ms[2],
                "speedup": ms[1] / ms[2],
            }
        )
    # Cold: a fresh index each time, so the call computes every row's mask (trie walks, and
    # lazy determinization of the states those walks reach).
    cold = {}
    for n in (1, 2):
        samples = []
        for _ in range(cold_reps):
            c = engines["guided"].compile(workload)
            gs = advanced(engines["guided"], c)
            gc.collect()
            s = time.perf_counter()
            guided.fill_next_token_bitmask(gs, buf, threads=n)
            samples.append(time.perf_counter() - s)
        cold[n] = median(samples) * 1e3
    rows.append(
        {
            "engine": "guided",
            "mode": "cold",
            "one_thread_ms": cold[1],
            "two_threads_ms": cold[2],
            "speedup": cold[1] / cold[2],
        }
    )
    return rows


# --- driver -----------------------------------------------------------------------------------


@dataclass
class Report:
    """The rows of every printed table, and the JSON payload."""

    prep: list[list[Any]] = field(default_factory=list)
    main: list[list[Any]] = field(default_factory=list)
    ratios: list[list[Any]] = field(default_factory=list)
    targets: list[list[Any]] = field(default_factory=list)
    batch: list[list[Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=lambda: {"vocabularies": {}})


def cell(summary: dict[str, Any], key: str, scale: float = 1.0) -> Any:
    if summary["status"] != "ok":
        return summary["status"]
    v = summary.get(key)
    return float("nan") if v is None else v * scale


def ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or b == 0:
        return float("nan")
    return a / b


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def known(x: float) -> bool:
    return x == x  # not NaN


def check_workload(loaded: peers.Loaded, w: Workload, tokens: list[int]) -> None:
    """The driven text must be a valid instance (by ``jsonschema``, or Python's ``re``), and every
    token allowed by guided."""
    if w.schema is not None:
        import jsonschema

        jsonschema.validate(json.loads(w.text), w.schema)
        index = guided.TokenIndex.from_json_schema(w.schema, loaded.vocab)
    elif w.grammar is not None:
        # tests/test_grammar.py holds the grammar path to an independent parser
        index = guided.TokenIndex.from_grammar(w.grammar, loaded.vocab, syntax=w.syntax)
    elif w.tag is not None:
        # tests/test_structural_tag.py holds the tag path to xgrammar and jsonschema
        index = guided.TokenIndex.from_structural_tag(w.tag, loaded.vocab, whitespace=ANY_WS)
    elif re.fullmatch(w.regex, w.text) is None:
        raise SystemExit(f"{loaded.name}/{w.name}: the driven text does not match its regex")
    else:
        index = guided.TokenIndex.from_regex(w.regex, loaded.vocab)
    if guided.Guide(index).validate_tokens(tokens) != len(tokens):
        raise SystemExit(f"{loaded.name}/{w.name}: guided refuses the driven text")


def summarize(
    rep: Report,
    vname: str,
    w: Workload,
    tokens: list[int],
    by_engine: dict[str, Result],
    trie_bytes: int,
    vocab_size: int,
) -> dict[str, dict[str, Any]]:
    """Adds one workload's rows to every table; returns the per-engine summaries."""
    summaries: dict[str, dict[str, Any]] = {}
    ref = by_engine["guided"].hashes
    for name, r in by_engine.items():
        s = r.summary()
        if r.status == "ok":
            s["masks_equal_guided"] = sum(a == b for a, b in zip(ref, r.hashes))
            if r.rejected:
                rep.problems.append(f"{vname}/{w.name}: {name} rejected {r.rejected}")
            if r.eos_allowed_at_end is False:
                rep.problems.append(f"{vname}/{w.name}: {name} does not allow EOS at the end")
        # guided's trie is built once per vocabulary and shared by every index over it, like
        # the peers' tokenizer objects; the per-constraint figure leaves it out.
        mem = s["memory_bytes"]
        s["memory_own_bytes"] = mem - trie_bytes if name == "guided" and mem is not None else mem
        summaries[name] = s
        ok = r.status == "ok"
        rep.main.append(
            [
                vname,
                w.name,
                name,
                cell(s, "compile_ms"),
                cell(s, "ttfm_ms"),
                cell(s, "first_median_us"),
                cell(s, "first_p99_us"),
                cell(s, "warm_median_us"),
                s["memory_own_bytes"] / 2**20 if ok and mem is not None else "",
                s["memory_label"] if ok else "",
                s["rss_delta_bytes"] / 2**20 if ok else "",
                f"{s.get('masks_equal_guided', '-')}/{len(tokens) + 1}" if ok else "",
                "-" if s["masks_covering_guided"] is None else s["masks_covering_guided"],
                f"rejects {r.rejected}" if r.rejected else "",
            ]
        )
    g = summaries["guided"]
    metrics = (
        "compile_ms",
        "ttfm_ms",
        "first_median_us",
        "first_p99_us",
        "warm_median_us",
        "memory_own_bytes",
    )
    for name, s in summaries.items():
        if name != "guided":
            ok = s["status"] == "ok"
            rep.ratios.append(
                [vname, w.name, name] + [ratio(g[k], s[k]) if ok else s["status"] for k in metrics]
            )
    llg = summaries.get("llguidance", {})
    xgr = summaries.get("xgrammar", {})
    oc = summaries.get("outlines-core", {})
    r_ttfm = ratio(g["ttfm_ms"], llg.get("ttfm_ms"))
    r_med = ratio(g["first_median_us"], xgr.get("first_median_us"))
    r_p99 = ratio(g["first_p99_us"], llg.get("first_p99_us"))
    r_mem = ratio(g["memory_own_bytes"], oc.get("memory_own_bytes"))
    warm_ok = verdict(g["warm_median_us"] < 3)
    oc_status = oc.get("status", "skipped")
    rep.targets.append(
        [
            vname,
            w.name,
            r_ttfm,
            verdict(r_ttfm <= 1 if known(r_ttfm) else None),
            r_med,
            verdict(r_med <= 1 if known(r_med) else None),
            r_p99,
            verdict(r_p99 <= 0.5 if known(r_p99) else None),
            g["warm_median_us"],
            warm_ok if vocab_size >= 150_000 else f"({warm_ok})",
            r_mem if known(r_mem) else oc_status,
            "PASS*" if oc_status == "timeout" else verdict(r_mem <= 0.1 if known(r_mem) else None),
        ]
    )
    return summaries


BATCH_WORKLOAD = "json-26"


def run_vocabulary(vname: str, work: list[Workload], args: argparse.Namespace, rep: Report) -> None:
    """Every workload on one vocabulary, with the batch figures on ``json-26`` (or on the last
    workload, when it is not run)."""
    started = time.perf_counter()
    loaded = peers.load(vname)
    vocab = loaded.vocab
    width = (vocab.vocab_size + 31) // 32
    tbytes = peers.token_bytes(vocab)
    prep: dict[str, float] = {}
    t = time.perf_counter()
    keeper = guided.TokenIndex.from_regex("a", vocab)  # builds, and holds, the shared trie
    prep["guided token trie"] = time.perf_counter() - t
    trie_bytes = keeper.memory_bytes()
    t = time.perf_counter()
    info = peers.xgrammar_info(vocab, tbytes)
    prep["xgrammar TokenizerInfo"] = time.perf_counter() - t
    t = time.perf_counter()
    lltok = peers.llguidance_tokenizer(vocab, tbytes)
    prep["llguidance LLTokenizer"] = time.perf_counter() - t
    engines: dict[str, Engine] = {
        "guided": Guided(width, vocab),
        "xgrammar": Xgrammar(width, info),
        "llguidance": Llguidance(width, lltok),
    }
    vres: dict[str, Any] = {
        "vocab_size": vocab.vocab_size,
        "trie_bytes": trie_bytes,
        "workloads": {},
    }
    outlines_gave_up = False
    for w in work:
        tokens = loaded.encode(w.text)
        check_workload(loaded, w, tokens)
        print(
            f"  {vname} {w.name}: {len(w.text.encode())} bytes, {len(tokens)} tokens "
            f"[{time.perf_counter() - started:.0f} s]",
            flush=True,
        )
        compiled: dict[str, Any] = {}
        guided_masks: list[np.ndarray] = []
        # guided first: its masks are the reference the peers' are compared with.
        by_engine = measure(
            list(engines.values()),
            w,
            tokens,
            vocab.eos_token_ids,
            args.reps,
            args.warm,
            keep=guided_masks,
        )
        for name, r in by_engine.items():
            if r.error is not None:
                rep.problems.append(f"{vname}/{w.name}: {name} failed: {r.error}")
            elif r.status == "ok":
                compiled[name] = r.compiled
        # outlines-core has no grammars or structural tags
        if not args.no_outlines and w.grammar is None and w.tag is None:
            if outlines_gave_up:
                r = Result("outlines-core", status="timeout")
            else:
                r, oprep = run_outlines(vname, w, tokens, args.warm, args.outlines_budget)
                if oprep is not None:
                    prep["outlines-core Vocabulary"] = oprep
                outlines_gave_up = r.status == "timeout"
            by_engine["outlines-core"] = r
        # The keeper holds what every index over the vocabulary shares: the token trie, and the
        # class slices the workloads so far had built (kept per vocabulary, not per index).
        shared = keeper.memory_bytes()
        summaries = summarize(rep, vname, w, tokens, by_engine, shared, vocab.vocab_size)
        vres["workloads"][w.name] = {"tokens": len(tokens), "engines": summaries}
        if w.name == BATCH_WORKLOAD or (w is work[-1] and "batch" not in vres):
            rows = batch_scaling(vocab, tokens, compiled, engines, w)
            for b in rows:
                rep.batch.append(
                    [
                        vname,
                        w.name,
                        b["engine"],
                        b["mode"],
                        b["one_thread_ms"],
                        b["two_threads_ms"],
                        b["speedup"],
                    ]
                )
            vres["batch"] = {"workload": w.name, "rows": rows}
        del compiled
    for k, v in prep.items():
        rep.prep.append([vname, vocab.vocab_size, k, v * 1e3])
    rep.prep.append([vname, vocab.vocab_size, "guided token trie, MB", trie_bytes / 2**20])
    rep.prep.append(
        [
            vname,
            vocab.vocab_size,
            "guided class slices after all workloads, MB",
            (keeper.memory_bytes() - trie_bytes) / 2**20,
        ]
    )
    vres["prep_s"] = prep
    rep.results["vocabularies"][vname] = vres
    del keeper


def print_report(rep: Report, args: argparse.Namespace) -> None:
    print("\nPer-vocabulary preparation, not counted in compile times (ms; rows in MB say so)")
    print(table(["vocab", "size", "what", "ms"], rep.prep))
    print(
        f"\nMasks along the same output. compile, TTFM: median of {args.reps}; 1st: per mask on "
        f"the fresh object (per-position median of {args.reps} passes); warm: per mask, fresh "
        "matcher, same object.\nmemory: guided index.memory_bytes() less the shared trie and "
        "class slices, xgrammar memory_size_bytes, outlines-core its pickled index, llguidance "
        "none (see rss: resident-set growth over compile + first pass).\nmasks = guided: positions "
        "where the peer's mask equals guided's; covers guided: where the peer allows every token "
        "guided allows (guided's JSON whitespace is a subset of xgrammar's and llguidance's)"
    )
    headers = [
        "vocab",
        "workload",
        "engine",
        "compile ms",
        "TTFM ms",
        "1st med us",
        "1st p99 us",
        "warm med us",
        "memory MB",
        "kind",
        "rss MB",
        "masks = guided",
        "covers guided",
        "note",
    ]
    print(table(headers, rep.main))
    print("\nguided / peer (below 1: guided is faster or smaller)")
    headers = ["vocab", "workload", "peer", "compile", "TTFM", "1st med", "1st p99", "warm med"]
    print(table([*headers, "memory"], rep.ratios))
    print(
        "\nTargets: TTFM <= llguidance; 1st-pass median <= xgrammar; 1st-pass p99 <= 0.5 x "
        "llguidance; warm median < 3 us at 200k tokens (in parentheses: smaller vocabularies); "
        "memory <= 0.1 x outlines-core (PASS*: outlines-core did not finish within its budget)"
    )
    headers = ["vocab", "workload", "TTFM/llg", "", "med/xgr", "", "p99/llg", "", "warm us", ""]
    print(table([*headers, "mem/oc", ""], rep.targets))
    ceiling = parallel_ceiling()
    rep.results["parallel_ceiling"] = ceiling
    print(
        "\nBatch fill, 64 matchers at varied states of the last workload (ms per call); this "
        f"machine's 2-thread ceiling right now (SHA-256 on 2 threads): {ceiling:.2f}x"
    )
    headers = ["vocab", "workload", "engine", "masks", "1 thread", "2 threads", "speedup"]
    print(table(headers, rep.batch))
    for b in rep.batch:
        if b[2] == "guided":
            print(
                f"  {b[0]}: guided {b[3]} 2-thread speedup {b[6]:.2f}x -> "
                f"{verdict(b[6] >= 1.7)} (target >= 1.7x)"
            )
    if rep.problems:
        print("\nProblems:")
        for p in rep.problems:
            print("  " + p)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="GPT-2 only (about a minute)")
    ap.add_argument("--vocab", nargs="*", choices=peers.VOCAB_NAMES)
    ap.add_argument("--workload", nargs="*", choices=[w.name for w in workloads()])
    ap.add_argument("--reps", type=int, default=5, help="compiles and first passes per engine")
    ap.add_argument("--warm", type=int, default=3, help="warm passes per engine")
    ap.add_argument("--outlines-budget", type=float, default=60.0, help="seconds per compile")
    ap.add_argument("--no-outlines", action="store_true")
    ap.add_argument("--outlines-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.outlines_worker:
        outlines_worker()
        return
    # Imported before any timing, so that none pays for an import (the outlines-core worker
    # process imports only what it uses).
    import llguidance  # noqa: F401
    import torch  # noqa: F401
    import xgrammar  # noqa: F401

    vocab_names = args.vocab or (["gpt2"] if args.quick else list(peers.VOCAB_NAMES))
    work = [w for w in workloads() if not args.workload or w.name in args.workload]
    rep = Report()
    started = time.perf_counter()
    load_before = os.getloadavg()
    schema_source = "guided.TokenIndex.from_json_schema"
    for vname in vocab_names:
        run_vocabulary(vname, work, args, rep)
    print_report(rep, args)
    load_after = os.getloadavg()
    rep.results["problems"] = rep.problems
    rep.results["elapsed_s"] = time.perf_counter() - started
    rep.results["load_average"] = {"before": load_before, "after": load_after}
    rep.results["cpus"] = os.cpu_count()
    rep.results["guided_json_path"] = schema_source
    print(
        f"\nload average {load_before[0]:.1f} before, {load_after[0]:.1f} after, on "
        f"{os.cpu_count()} CPUs (other work on the machine inflates times and caps 2-thread "
        f"speedups); elapsed {rep.results['elapsed_s']:.0f} s; "
        f"results: {write_results('index', rep.results)}"
    )


if __name__ == "__main__":
    main()
