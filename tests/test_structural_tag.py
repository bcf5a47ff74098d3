"""Structural tags (tool calls in free text) against the real xgrammar and against jsonschema.

Each structural tag below is compiled by xgrammar 0.2.9 and by ``guided.compat.xgrammar``; both
are walked with the real GPT-2 tokenizer along texts written for the tag and along random tokens
both allow, and the masks are compared bit for bit at every step. One departure is listed: in
free text xgrammar also allows tokens that leave UTF-8 (a lone continuation byte), which no text
can contain; the shim's language is text, so those are the only tokens xgrammar may add, and the
test checks that each one does leave UTF-8.

Independently of xgrammar, ``guided.structural_tag`` outputs are judged by ``jsonschema``: a
Hypothesis-drawn output of prose and calls is accepted token by token exactly when its prose
holds no trigger and every call's arguments are valid instances of the tool's schema.
"""

from __future__ import annotations

import codecs
import json
import pickle
import random
from typing import Any

import jsonschema
import pytest
import xgrammar as real
from compat_support import (
    GPT2_EOS,
    GPT2_VOCAB_SIZE,
    allowed_ids,
    gpt2_hf_tokenizer,
    gpt2_token_bytes,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st

import guided
import guided.compat.xgrammar as shim
from guided.compat.sglang import GuidedGrammarBackend
from guided.compat.vllm import GuidedBackend

V = GPT2_VOCAB_SIZE

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"],
}
# Numbers and bounded strings are left out of the schemas compared with xgrammar: there its JSON
# Schema converter departs from JSON Schema (it refuses `3.0` for an integer and escapes in a
# string with `maxLength`), which is the schema compiler's business, not the structural tag's.
SEARCH = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "exact": {"type": "boolean"}},
    "required": ["query", "exact"],
}
TREE = {  # recursive: a tool whose argument nests without bound
    "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
    "$ref": "#/$defs/node",
}


def _tag(begin: str, schema: Any, end: str) -> dict[str, Any]:
    return {
        "type": "tag",
        "begin": begin,
        "content": {"type": "json_schema", "json_schema": schema},
        "end": end,
    }


def _structural(format_: dict[str, Any]) -> dict[str, Any]:
    return {"type": "structural_tag", "format": format_}


QWEN_TAGS = [
    _tag(
        "<tool_call>\n",
        {
            "type": "object",
            "properties": {"name": {"const": "weather"}, "arguments": WEATHER},
            "required": ["name", "arguments"],
        },
        "\n</tool_call>",
    ),
]
LLAMA_TAGS = [
    _tag("<function=weather>", WEATHER, "</function>"),
    _tag("<function=search>", SEARCH, "</function>"),
    _tag("<function=tree>", TREE, "</function>"),
]
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "qwen, any number of calls": (
        _structural({"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": QWEN_TAGS}),
        [
            'Checking.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n'
            "</tool_call>\nIt is cold.",
            "No call needed <tool_ca",
        ],
    ),
    "llama functions, three tools": (
        _structural({"type": "triggered_tags", "triggers": ["<function="], "tags": LLAMA_TAGS}),
        [
            'a<function=search>{"query": "rust", "exact": true}</function>b'
            '<function=tree>[[], [[]]]</function><function=weather>{"city":"Rome","unit":"f"}'
            "</function>",
        ],
    ),
    "a call first": (
        _structural(
            {
                "type": "triggered_tags",
                "triggers": ["<function="],
                "tags": LLAMA_TAGS,
                "at_least_one": True,
            }
        ),
        ['<function=weather>{"city": "Lima"}</function> then prose'],
    ),
    "at most one call": (
        _structural(
            {
                "type": "triggered_tags",
                "triggers": ["<function="],
                "tags": LLAMA_TAGS,
                "stop_after_first": True,
                "excludes": ["<|eot|>"],
            }
        ),
        ['Sure: <function=search>{"query": "x", "exact": false}</function>'],
    ),
    "calls only": (
        _structural(
            {
                "type": "tags_with_separator",
                "tags": LLAMA_TAGS,
                "separator": "\n",
                "at_least_one": True,
            }
        ),
        ['<function=tree>[]</function>\n<function=weather>{"city": "Ulm"}</function>'],
    ),
    "thinking, then an answer": (
        _structural(
            {
                "type": "sequence",
                "elements": [
                    {
                        "type": "tag",
                        "begin": "<think>",
                        "content": {"type": "any_text"},
                        "end": "</think>",
                    },
                    {
                        "type": "or",
                        "elements": [
                            {"type": "regex", "pattern": r"Answer: [0-9]{1,4}\."},
                            {"type": "const_string", "value": "No answer."},
                        ],
                    },
                ],
            }
        ),
        ["<think>2+2 is 4, < 5</think>Answer: 4.", "<think></think>No answer."],
    ),
}


def _leaves_utf8(data: bytes) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError:
        return True
    return False


@pytest.fixture(scope="module")
def compilers() -> tuple[real.GrammarCompiler, shim.GrammarCompiler]:
    tok = gpt2_hf_tokenizer()
    return (
        real.GrammarCompiler(real.TokenizerInfo.from_huggingface(tok, stop_token_ids=[GPT2_EOS])),
        shim.GrammarCompiler(shim.TokenizerInfo.from_huggingface(tok, stop_token_ids=[GPT2_EOS])),
    )


def _compare(
    compiled: tuple[real.CompiledGrammar, shim.CompiledGrammar], texts: list[str], seed: str
) -> int:
    """Walks both along each text, then along random tokens; returns the steps compared."""
    token_bytes = gpt2_token_bytes()
    tok = gpt2_hf_tokenizer()
    pool = sorted({t for text in texts for t in tok.encode(text)})
    rng = random.Random(seed)
    steps = 0
    for walk in range(2 * len(texts) + 2):
        rm, sm = real.GrammarMatcher(compiled[0]), shim.GrammarMatcher(compiled[1])
        rb, sb = real.allocate_token_bitmask(1, V), shim.allocate_token_bitmask(1, V)
        planned = tok.encode(texts[walk % len(texts)])
        done = b""
        for step in range(90):
            rm.fill_next_token_bitmask(rb)
            sm.fill_next_token_bitmask(sb)
            theirs, ours = allowed_ids(rb[0].numpy(), V), allowed_ids(sb[0].numpy(), V)
            assert ours <= theirs, (seed, done, sorted(ours - theirs)[:5])
            for extra in theirs - ours:  # the listed departure, and only it
                assert extra != GPT2_EOS and _leaves_utf8(done + token_bytes[extra]), (
                    seed,
                    done,
                    token_bytes[extra],
                )
            steps += 1
            # the first walks follow the texts to the end; the others leave them at random
            if walk < len(texts) and step < len(planned):
                token = planned[step]
            elif walk < len(texts):
                assert GPT2_EOS in ours, (seed, done)
                break
            else:
                choices = sorted(ours & set(pool)) if rng.random() < 0.85 else sorted(ours)
                if not choices or (GPT2_EOS in ours and rng.random() < 0.05):
                    break
                token = rng.choice(choices)
            assert rm.accept_token(token) and sm.accept_token(token), token_bytes.get(token)
            if token == GPT2_EOS:
                break
            done += token_bytes[token]
    return steps


@pytest.mark.parametrize("name", list(CASES))
def test_structural_tags_mask_as_xgrammar(
    name: str, compilers: tuple[real.GrammarCompiler, shim.GrammarCompiler]
) -> None:
    tag, texts = CASES[name]
    # xgrammar reads the JSON text; the shim is handed xgrammar's own pydantic object, whose
    # dump spells out every default field
    compiled = (
        compilers[0].compile_structural_tag(json.dumps(tag)),
        compilers[1].compile_structural_tag(real.StructuralTag.from_json(tag)),
    )
    assert _compare(compiled, texts, name) > 20 * len(texts)


def test_legacy_call_forms_mask_as_xgrammar(
    compilers: tuple[real.GrammarCompiler, shim.GrammarCompiler],
) -> None:
    """``compile_structural_tag(tags, triggers)`` with ``StructuralTagItem``s (schemas as text
    and as dicts), xgrammar's deprecated form that SGLang and vLLM still send."""
    items = [
        real.StructuralTagItem(
            begin="<function=weather>", schema=json.dumps(WEATHER), end="</function>"
        ),
        real.StructuralTagItem(begin="<function=search>", schema=SEARCH, end="</function>"),
    ]
    theirs = compilers[0].compile_structural_tag(items, ["<function="])
    ours = compilers[1].compile_structural_tag(items, ["<function="])
    text = 'x<function=search>{"query": "a", "exact": false}</function>y'
    assert _compare((theirs, ours), [text], "legacy") > 20


def test_engine_shims_take_structural_tag_requests() -> None:
    """vLLM's STRUCTURAL_TAG (new and legacy JSON) and SGLang's dispatch_structural_tag."""
    tok = gpt2_hf_tokenizer()
    legacy = json.dumps(
        {
            "type": "structural_tag",
            "structures": [{"begin": "<f=w>", "schema": WEATHER, "end": "</f>"}],
            "triggers": ["<f="],
        }
    )
    modern = json.dumps(
        _structural(
            {
                "type": "triggered_tags",
                "triggers": ["<f="],
                "tags": [_tag("<f=w>", WEATHER, "</f>")],
            }
        )
    )
    good, extra = '<f=w>{"city": "Nice"}</f>', '<f=w>{"city": "Nice", "x": 1}</f>'
    vllm, sglang = GuidedBackend(tok), GuidedGrammarBackend(tok)
    for spec in (legacy, modern):
        for grammar_of in (
            lambda s: vllm.compile_grammar("STRUCTURAL_TAG", s).guide,
            lambda s: sglang.dispatch_structural_tag(s).guide,
        ):
            guide = grammar_of(spec)
            accepted = [*tok.encode("hi " + good), GPT2_EOS]
            assert guide.validate_tokens(accepted) == len(accepted)
            # xgrammar's strict mode closes the object, as the shims do
            refused = [*tok.encode(extra), GPT2_EOS]
            assert guide.validate_tokens(refused) < len(refused)


# ---------------------------------------------------------------------------------------------
# guided.structural_tag, judged by jsonschema

TOOLS = {
    "weather": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
    "search": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "top": {"type": "integer", "minimum": 1}},
        "required": ["query", "top"],
    },
}
TRIGGER = "<tool_call>"


def _call_text(name: str, args: dict[str, Any]) -> str:
    # guided writes members in the order the schema declares them
    args = {k: args[k] for k in TOOLS[name]["properties"] if k in args}
    return f'{TRIGGER}{{"name": "{name}", "arguments": {json.dumps(args)}}}</tool_call>'


@pytest.fixture(scope="module")
def tool_index() -> guided.TokenIndex:
    tags = [
        {
            "begin": TRIGGER,
            "schema": {
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": schema},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            },
            "end": "</tool_call>",
        }
        for name, schema in TOOLS.items()
    ]
    vocab = shim.TokenizerInfo.from_huggingface(gpt2_hf_tokenizer(), stop_token_ids=[GPT2_EOS])
    return guided.TokenIndex.from_structural_tag(
        guided.structural_tag([TRIGGER], tags), vocab.vocabulary
    )


PROSE = st.text(st.sampled_from('ab <>/_\n\u00e9{}"tool_call'), max_size=14)
ARGS = st.one_of(
    st.fixed_dictionaries(
        {"city": st.text("xyz ", max_size=14)}, optional={"unit": st.sampled_from(["c", "f", "k"])}
    ),
    st.fixed_dictionaries({"query": st.text("qr", max_size=5), "top": st.integers(-2, 20)}),
)


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(
        st.tuples(PROSE, st.one_of(st.none(), st.tuples(st.sampled_from(list(TOOLS)), ARGS))),
        max_size=3,
    )
)
def test_tool_call_outputs_are_accepted_exactly_when_valid(
    tool_index: guided.TokenIndex, parts: list[tuple[str, tuple[str, dict[str, Any]] | None]]
) -> None:
    text, free, valid = "", "", True
    for prose, call in parts:
        text, free = text + prose, free + prose
        if call is not None:
            name, args = call
            text += _call_text(name, args)
            valid &= jsonschema.Draft202012Validator(TOOLS[name]).is_valid(args)
            valid &= TRIGGER not in free  # text between calls never holds the trigger
            free = ""
    valid &= TRIGGER not in free
    event("valid" if valid else "invalid")
    tokens = [*gpt2_hf_tokenizer().encode(text), GPT2_EOS]
    guide = guided.Guide(tool_index)
    assert (guide.validate_tokens(tokens) == len(tokens)) is valid, text


def test_recipes_pickles_and_refusals(tool_index: guided.TokenIndex) -> None:
    vocab = tool_index.vocabulary
    clone = pickle.loads(pickle.dumps(tool_index))
    text = "ok " + _call_text("search", {"query": "q", "top": 2})
    tokens = [*gpt2_hf_tokenizer().encode(text), GPT2_EOS]
    assert guided.Guide(clone).validate_tokens(tokens) == len(tokens)
    cache = guided.IndexCache(vocab)
    tag = guided.structural_tag(
        ["<a>"], [{"begin": "<a>", "schema": {"type": "integer"}, "end": "</a>"}]
    )
    assert cache.structural_tag(tag) is cache.structural_tag(json.dumps(tag))
    required = guided.structural_tag(
        ["<a>"], [{"begin": "<a>", "schema": {"type": "integer"}, "end": "</a>"}], required=True
    )
    only_calls = guided.TokenIndex.from_structural_tag(required, vocab)
    tok = gpt2_hf_tokenizer()
    calls = [*tok.encode("<a>1</a>\n<a>2</a>"), GPT2_EOS]
    assert guided.Guide(only_calls).validate_tokens(calls) == len(calls)
    assert guided.Guide(only_calls).validate_tokens(tok.encode("x<a>1</a>")) == 0
    with pytest.raises(guided.UnsupportedSchemaError) as token_format:
        guided.TokenIndex.from_structural_tag(
            _structural({"type": "sequence", "elements": [{"type": "token", "token": 3}]}), vocab
        )
    assert token_format.value.pointer == "/format/elements/0"
    with pytest.raises(guided.UnsupportedSchemaError) as nested:
        guided.TokenIndex.from_structural_tag(
            _structural(_tag("<a>", {"type": "string", "format": "no-such-format"}, "</a>")),
            vocab,
        )
    assert nested.value.pointer.startswith("/format/content/json_schema")
    with pytest.raises(guided.GuidedError, match="none of the triggers"):
        guided.structural_tag(["<b>"], [{"begin": "<a>", "schema": {}, "end": "</a>"}])
    with pytest.raises(guided.GuidedError, match="none of the triggers"):
        guided.TokenIndex.from_structural_tag(
            _structural(
                {"type": "triggered_tags", "triggers": ["<b>"], "tags": [_tag("<a>", {}, "</a>")]}
            ),
            vocab,
        )
