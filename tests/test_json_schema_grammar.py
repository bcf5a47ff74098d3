"""Recursive schemas through the token index, where recursion stays recursion.

``TokenIndex.from_json_schema`` keeps a ``$ref`` cycle as a call of a rule, and a free value as
a rule that calls itself, and its automaton follows the calls with a stack (up to 256 calls open
at once). So a tree nests as deep as its instances do, not ``max_recursion_depth`` levels. The
oracles are the ``jsonschema`` package, on random recursive schemas and random values, and
explicit depths on both sides of the stack bound.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from schema_harness import BYTE_VOCAB, Matcher, compile_index_matcher
from test_json_schema_properties import (
    assert_follows_jsonschema,
    containers,
    json_values,
    scalar_schemas,
)

import guided

NODE = {"$ref": "#/$defs/node"}

#: Schemas whose locations may refer back to the definition they stand in.
recursive_bodies = st.recursive(st.one_of(scalar_schemas, st.just(NODE)), containers, max_leaves=6)


def guarded(schema: Any, inside: bool = False) -> bool:
    """Whether every reference to the node stands inside a container's member or item: one at
    the node's own location (`{"if": node}`) is a loop that reads nothing, which jsonschema
    follows forever (guided refuses it at ``max_nesting``)."""
    if not isinstance(schema, dict):
        return True
    if "$ref" in schema and not inside:
        return False
    children = list(schema.get("properties", {}).values()) + list(schema.get("prefixItems", []))
    children += [schema[k] for k in ("items", "additionalProperties") if k in schema]
    here = [schema[k] for k in ("not", "if", "then", "else") if k in schema]
    for k in ("anyOf", "oneOf", "allOf"):
        here += schema.get(k, [])
    return all(guarded(c, True) for c in children) and all(guarded(c, inside) for c in here)


def recursive_schema(body: dict[str, Any]) -> dict[str, Any]:
    return {"$defs": {"node": body}, "$ref": "#/$defs/node"}


def index_or_skip(schema: dict[str, Any]) -> Matcher:
    matcher = compile_index_matcher(schema, max_states=200_000)
    assume(matcher is not None)
    assert matcher is not None
    return matcher


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` lists around ``leaf``."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


STYLES = ((", ", ": ", True), (",", ":", False))


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(recursive_bodies, st.lists(json_values, min_size=1, max_size=8))
def test_random_values_follow_jsonschema(body: dict[str, Any], values: list[Any]) -> None:
    assume(guarded(body))
    schema = recursive_schema(body)
    assert_follows_jsonschema(index_or_skip(schema), schema, values)


TREE = {
    "$defs": {
        "tree": {
            "type": "object",
            "properties": {
                "label": {"type": "string", "maxLength": 3},
                "children": {"type": "array", "items": {"$ref": "#/$defs/tree"}},
            },
            "required": ["label"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/tree",
}


def chain(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"label": "x"}
    for _ in range(depth - 1):
        node = {"label": "y", "children": [node, {"label": "z"}]}
    return node


def accepts_text(index: guided.TokenIndex, text: str) -> bool:
    """Whether the index accepts ``text`` (single-byte tokens), walked without recursion."""
    state = index.initial_state
    for byte in text.encode():
        state = index.next_state(state, byte)
        if state == 0:
            return False
    return index.is_accepting(state)


def test_recursion_nests_as_deep_as_the_call_stack() -> None:
    matcher = compile_index_matcher(TREE)
    assert matcher is not None
    index = guided.TokenIndex.from_json_schema(TREE, BYTE_VOCAB)
    checker = jsonschema.Draft202012Validator(TREE)
    for depth in (1, 4, 40, 256):
        value = chain(depth)
        # jsonschema's own recursion (and the harness's) runs out past a few dozen levels.
        if depth <= 40:
            assert checker.is_valid(value) and matcher.accepts(value, STYLES[0]), depth
        assert accepts_text(index, json.dumps(value)), depth
    # Past 256 open calls the step that needs one more fails with a typed error (the documented
    # bound), and the index stays usable.
    with pytest.raises(guided.SizeLimitError, match="max_stack") as raised:
        accepts_text(index, json.dumps(chain(300)))
    assert raised.value.limit == "max_stack" and raised.value.maximum == 256
    assert accepts_text(index, json.dumps(chain(4)))
    # The regular form unrolls instead, so the DFA stops at max_recursion_depth.
    dfa = Matcher.of(guided._lib.schema_dfa(json.dumps(TREE), max_recursion_depth=3))
    assert dfa.accepts(chain(2), STYLES[0]) and not dfa.accepts(chain(10), STYLES[0])
    # Invalid anywhere, however deep: rejected.
    bad = chain(30)
    leaf = bad
    while "children" in leaf:
        leaf = leaf["children"][0]
    leaf["label"] = "long"
    assert not checker.is_valid(bad) and not matcher.accepts(bad, STYLES[0])


def test_nesting_past_the_call_stack_is_an_error_not_a_narrower_language() -> None:
    """Every prefix the schema allows stays live whatever its depth: the step that would open one
    call too many raises SizeLimitError, and every state built before it still closes."""
    index = guided.TokenIndex.from_json_schema(
        {"type": "array", "items": {"$ref": "#"}}, BYTE_VOCAB
    )
    state, depth = index.initial_state, 0
    with pytest.raises(guided.SizeLimitError, match="max_stack"):
        while depth < 1000:
            after = index.next_state(state, ord("["))
            assert after != 0, depth
            state, depth = after, depth + 1
    assert 255 <= depth <= 256
    # The deepest state's mask is the language's: it still allows the opening bracket whose step
    # fails, and the index stays usable after the failure.
    allowed = index.allowed(state)
    assert allowed[ord("[")] and allowed[ord("]")] and not allowed[ord("x")]
    # The deepest live prefix still closes.
    for _ in range(depth):
        state = index.next_state(state, ord("]"))
        assert state != 0
    assert index.is_accepting(state)


def test_free_values_nest_past_max_free_depth() -> None:
    matcher = compile_index_matcher({"type": "object"}, max_free_depth=2)
    assert matcher is not None
    for depth in (1, 3, 20, 100):
        assert matcher.accepts({"a": nested(depth, {"b": None})}, STYLES[1]), depth
    index = guided.TokenIndex.from_json_schema({"type": "object"}, BYTE_VOCAB, max_free_depth=2)
    assert accepts_text(index, json.dumps({"a": nested(250)}))
    # The regular form keeps the bound.
    dfa = Matcher.of(guided._lib.schema_dfa('{"type": "object"}', max_free_depth=2))
    assert not dfa.accepts({"a": nested(3)}, STYLES[1])


def test_recursion_under_not_is_refused_or_bounded_on_request() -> None:
    """A recursive language under ``not`` needs its depth bounded to be exact, and a bound would
    refuse valid documents: the index refuses the schema, naming the keyword and its place.
    ``depth_bounds=True`` asks for the bounded language instead, with a warning."""
    schema = {
        "$defs": {"list": {"type": "array", "items": {"$ref": "#/$defs/list"}}},
        "allOf": [{"$ref": "#/$defs/list"}, {"not": {"type": "array", "maxItems": 0}}],
    }
    with pytest.raises(guided.UnsupportedSchemaError, match='not at "/allOf/1/not"'):
        guided.TokenIndex.from_json_schema(schema, BYTE_VOCAB)
    with pytest.warns(UserWarning, match="bounded"):
        matcher = compile_index_matcher(schema, depth_bounds=True)
    assert matcher is not None
    checker = jsonschema.Draft202012Validator(schema)
    for value in ([], [[]], [[[]]], [[], [[]]], [[[], []]]):
        assert matcher.accepts(value, STYLES[0]) == checker.is_valid(value), value
    deep = nested(8, [])
    assert checker.is_valid(deep) and not matcher.accepts(deep, STYLES[0])


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        ({"contains": {"type": "string"}}, "contains"),
        ({"not": {"type": "object", "required": ["a", "b"]}}, "not"),
        ({"type": "array", "contains": {"type": "integer"}, "minContains": 2}, "contains"),
        ({"type": "object", "minProperties": 1, "patternProperties": {"^a": {}}}, None),
    ],
)
def test_free_values_are_never_bounded_silently(
    schema: dict[str, Any], keyword: str | None
) -> None:
    """Free values under a keyword that needs their depth: refused with that keyword, or (where
    the index can keep them unbounded) accepted at any depth."""
    deep = nested(7)
    value: Any = ["a", 1, 2, deep] if "contains" in schema else {"a": deep}
    assert jsonschema.Draft202012Validator(schema).is_valid(value)
    if keyword is None:
        matcher = compile_index_matcher(schema)
        assert matcher is not None and matcher.accepts(value, STYLES[1])
        return
    with pytest.raises(guided.UnsupportedSchemaError, match=keyword):
        guided.TokenIndex.from_json_schema(schema, BYTE_VOCAB)
