"""``guided.json_schema_to_regex``: its surface, its errors, and its output read by Python's ``re``.

The error table lists schemas that must be refused, with the exception class, the keyword and the
JSON pointer each must carry. The ``re`` tests hold the printed pattern to an independent engine:
for schemas without boolean keywords the text is plain Python ``re`` syntax, and ``re.fullmatch``
must agree with guided's own DFA of the same schema on every sample.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from typing import Any

import pytest

import guided

ERRORS: list[tuple[Any, type[Exception], str, str]] = [
    ({"$ref": "http://example.com/other.json"}, guided.UnsupportedSchemaError, "$ref", ""),
    ({"$ref": "#/$defs/missing"}, guided.UnsupportedSchemaError, "$ref", ""),
    (
        {"properties": {"a": {"pattern": "(?<=x)y"}}},
        guided.UnsupportedSchemaError,
        "pattern",
        "/properties/a",
    ),
    (
        {"properties": {"a": {"pattern": "(a)\\1"}}},
        guided.UnsupportedSchemaError,
        "pattern",
        "/properties/a",
    ),
    ({"patternProperties": {"(?=a)": {}}}, guided.UnsupportedSchemaError, "patternProperties", ""),
    ({"format": "int32"}, guided.UnsupportedSchemaError, "format", ""),
    ({"items": {"format": "regex"}}, guided.UnsupportedSchemaError, "format", "/items"),
    (
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        guided.UnsupportedSchemaError,
        "uniqueItems",
        "",
    ),
    ({"type": "strng"}, guided.UnsupportedSchemaError, "type", ""),
    ({"minLength": -1}, guided.UnsupportedSchemaError, "minLength", ""),
    ({"maxItems": 1.5}, guided.UnsupportedSchemaError, "maxItems", ""),
    ({"multipleOf": 0}, guided.UnsupportedSchemaError, "multipleOf", ""),
    ({"multipleOf": 123456789}, guided.UnsupportedSchemaError, "multipleOf", ""),
    ({"allOf": []}, guided.UnsupportedSchemaError, "allOf", ""),
    ({"anyOf": {"type": "string"}}, guided.UnsupportedSchemaError, "anyOf", ""),
    ({"properties": []}, guided.UnsupportedSchemaError, "properties", ""),
    ({"required": [1]}, guided.UnsupportedSchemaError, "required", ""),
    ({"dependentRequired": {"a": "b"}}, guided.UnsupportedSchemaError, "dependentRequired", ""),
    ({"$schema": "http://example.com/my-metaschema"}, guided.UnsupportedSchemaError, "$schema", ""),
    (
        {"unevaluatedProperties": False, "anyOf": [{"properties": {"a": {}}}]},
        guided.UnsupportedSchemaError,
        "unevaluatedProperties",
        "",
    ),
    (
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": 5}, "$ref": "#/$defs/a"},
        guided.UnsupportedSchemaError,
        "",
        "/$defs/b",
    ),
    (
        {"type": "object", "required": ["next"], "properties": {"next": {"$ref": "#"}}},
        guided.SizeLimitError,
        "max_recursion_depth",
        "",
    ),
]


@pytest.mark.parametrize(
    ("schema", "cls", "keyword", "pointer"), ERRORS, ids=[json.dumps(e[0])[:50] for e in ERRORS]
)
def test_error_table(schema: Any, cls: type[Exception], keyword: str, pointer: str) -> None:
    with pytest.raises(cls) as info:
        guided.json_schema_to_regex(schema)
    err = info.value
    assert isinstance(err, guided.GuidedError)
    if isinstance(err, guided.UnsupportedSchemaError):
        assert (err.keyword, err.pointer) == (keyword, pointer)
    else:
        assert isinstance(err, guided.SizeLimitError)
        assert err.limit == keyword


def test_schemas_that_are_not_json() -> None:
    with pytest.raises(guided.UnsupportedSchemaError):
        guided.json_schema_to_regex("{not json")
    with pytest.raises(guided.UnsupportedSchemaError):
        guided.json_schema_to_regex({"minimum": float("nan")})
    with pytest.raises(guided.UnsupportedSchemaError):
        guided.json_schema_to_regex({"const": object()})  # type: ignore[dict-item]
    deep: Any = {"type": "integer"}
    for _ in range(400):
        deep = {"items": deep}
    with pytest.raises(guided.SizeLimitError):
        guided.json_schema_to_regex(deep)


def test_bad_whitespace_is_a_regex_error() -> None:
    with pytest.raises(guided.RegexSyntaxError):
        guided.json_schema_to_regex({"type": "object"}, whitespace="x*")
    with pytest.raises(guided.RegexSyntaxError):
        guided.json_schema_to_regex({"type": "object"}, whitespace="(")


def test_non_strict_mode_warns_and_names_what_it_ignored() -> None:
    schema = {"type": "array", "items": {"type": "string", "format": "int32"}, "uniqueItems": True}
    with pytest.warns(UserWarning) as record:
        pattern = guided.json_schema_to_regex(schema, strict=False)
    message = str(record[0].message)
    assert "uniqueItems" in message and "format" in message and "/items" in message
    assert re.fullmatch(pattern, '["a", "a"]')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guided.json_schema_to_regex({"type": "string"}, strict=False)


def test_str_and_dict_schemas_compile_alike() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert guided.json_schema_to_regex(schema) == guided.json_schema_to_regex(json.dumps(schema))
    assert guided.json_schema_to_regex(True) == guided.json_schema_to_regex({})


PLAIN_SCHEMAS: list[tuple[dict[str, Any], list[Any]]] = [
    (
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 5},
                "age": {"type": "integer", "minimum": 0, "maximum": 130},
                "admin": {"type": "boolean"},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
        [
            {"name": "ann"},
            {"name": "ann", "age": 131},
            {"name": "annabel"},
            {"name": "é", "age": 0, "admin": True, "tags": ["a", "b"]},
            {"name": "x", "tags": ["c"]},
            {"age": 3},
        ],
    ),
    (
        {
            "type": "array",
            "prefixItems": [{"type": "number", "exclusiveMinimum": -1.5}, {"const": 'x\n"y'}],
        },
        [[-1.4], [-1.5], [0.25, 'x\n"y'], [1e-7, "x"], [], [2, 'x\n"y', None]],
    ),
    (
        {
            "anyOf": [
                {"type": "string", "pattern": "^a+$"},
                {"type": "null"},
                {"type": "number", "multipleOf": 0.25},
            ]
        },
        ["aaa", "ab", None, 0.75, 0.3, -2],
    ),
]


@pytest.mark.parametrize(("schema", "samples"), PLAIN_SCHEMAS)
def test_printed_pattern_agrees_with_python_re(schema: dict[str, Any], samples: list[Any]) -> None:
    pattern = guided.json_schema_to_regex(schema)
    assert "(?&" not in pattern and "(?~" not in pattern
    compiled = re.compile(pattern)
    dfa = guided._lib.schema_dfa(json.dumps(schema))
    for value in samples:
        for text in (
            json.dumps(value),
            json.dumps(value, separators=(",", ":")),
            json.dumps(value, ensure_ascii=False),
        ):
            assert (compiled.fullmatch(text) is not None) == dfa.match(text), text


def test_whitespace_presets() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
    }
    flexible = re.compile(guided.json_schema_to_regex(schema, whitespace="flexible"))
    assert flexible.fullmatch(json.dumps({"a": [1, 2]}, indent=2))
    tight = re.compile(guided.json_schema_to_regex(schema, whitespace=""))
    assert tight.fullmatch('{"a":[1,2]}') and not tight.fullmatch('{"a": [1, 2]}')


def test_large_free_values_stay_within_bounded_memory() -> None:
    """Thirty members, each an object whose extras nest six levels deep. The expression shares one
    free-value language among all of them, so compiling it is cheap; spelled out as a pattern it
    is far past the node limit, and its full automaton past the state limit. In a child process
    capped at 3 GiB of address space, each path must end in a result or ``SizeLimitError``, never
    an allocation failure: the pattern is refused by name, the full DFA by its state limit, and the
    lazy index builds."""
    script = (
        "import json, resource, guided\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "members = {f'p{i}': {'type': 'object'} for i in range(30)}\n"
        "schema = {'type': 'object', 'properties': members}\n"
        "try:\n"
        "    guided.json_schema_to_regex(schema, max_free_depth=6)\n"
        "except guided.SizeLimitError as e:\n"
        "    print('pattern', e.limit)\n"
        "try:\n"
        "    guided._lib.schema_dfa(json.dumps(schema), max_free_depth=6)\n"
        "except guided.SizeLimitError as e:\n"
        "    print('dfa', e.limit)\n"
        "tokens = [bytes([b]) for b in range(256)] + [None]\n"
        "vocab = guided.Vocabulary(tokens, eos_token_ids=[256])\n"
        "index = guided.TokenIndex.from_json_schema(schema, vocab, max_free_depth=6)\n"
        "state = index.initial_state\n"
        'for b in b\'{"p3": {"x": [[[[{}]]]]}, "z": 1}\':\n'
        "    state = index.next_state(state, b)\n"
        "print('index', index.is_accepting(state))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == [
        "pattern max_pattern_nodes",
        "dfa max_states",
        "index True",
    ], done.stdout


def test_members_follow_the_properties_order_whatever_key_comes_first() -> None:
    """``required`` listed before ``properties`` (common in the wild) does not reorder members."""
    names = [f"p{i}" for i in range(12)]
    schema = {"type": "object", "required": ["p5", "p1"], "properties": {n: {} for n in names}}
    dfa = guided._lib.schema_dfa(json.dumps(schema))
    assert dfa.match(json.dumps(dict.fromkeys(names, 1)))
    assert not dfa.match(json.dumps({"p5": 1, "p1": 1}))
    assert dfa.match(json.dumps({"p1": 1, "p5": 1}))
