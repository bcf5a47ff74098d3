"""Differential test: guided's token index against the ``jsonschema`` validator of each draft.

Hypothesis draws a draft, a schema written in that draft (every keyword the compiler supports,
plus keywords of *other* drafts, which must stay inert, and references back to the root, which
make it recursive), and JSON values from the small domain the
schemas speak about (names ``a``-``d``, short strings over ``abxy0``, small numbers, whole floats
such as ``3.0``). Each value is written as JSON text, tokenized by the real GPT-2 tokenizer, and
walked token by token through ``TokenIndex.from_json_schema``; the index must accept it exactly
when the draft's validator accepts the value.

A schema's language fixes the order of object members (the declared order), so a value counts as
accepted when its own member order or its declared order (``guided._canonical.declared_reorder``)
is. Numbers are drawn so that ``json.dumps`` writes them plainly: the output policy admits no
exponent at integer locations, a documented choice rather than a language difference.

The draws keep to schemas each draft's metaschema accepts, and leave out the two places where
guided deliberately reads more than the validators do (``dependencies`` in 2019-09 and later, and
array ``items``/``additionalItems`` in 2020-12, kept for compatibility; see ``json_schema::drafts``)
and ``format`` (its own suites cover it). Refusals (``UnsupportedSchemaError``,
``SizeLimitError``) are allowed and counted, never a wrong verdict.

Run it long with ``HYPOTHESIS_PROFILE=long`` (see ``conftest``) to search beyond the CI budget.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from schema_harness import DRAFTS

import guided
from conftest import shared_path
from guided._canonical import declared_reorder

ORDER = list(DRAFTS)

NAMES = ["a", "b", "c", "d"]
#: A reference to the drawn schema itself, which makes it recursive (the index keeps it a call).
NODE = {"$ref": "#/definitions/node"}
PATTERNS = ["^a", "[0-9]", "^[a-c]*$", "x|y", "^(ab)+$"]

# -- values -------------------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.sampled_from([0.5, 2.5, -1.5, 3.0, 4.0, -2.0, 10.0, 1.25]),
    st.text("abxy0", max_size=4),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from([*NAMES, "ab", "x"]), inner, max_size=3),
    ),
    max_leaves=6,
)

# -- schemas ------------------------------------------------------------------------------------


def at_least(draft: str, first: str) -> bool:
    return ORDER.index(draft) >= ORDER.index(first)


def schemas(draft: str) -> st.SearchStrategy[Any]:
    """Schemas valid under ``draft``'s metaschema, up to three levels deep; a leaf may refer
    back to the root (see :data:`NODE`)."""
    leaf = keyword_schemas(draft, st.just({})) | st.just(NODE)
    return st.recursive(leaf, lambda inner: keyword_schemas(draft, inner), max_leaves=5)


def keyword_schemas(draft: str, sub: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    subs = st.lists(sub, min_size=1, max_size=3)
    small = st.integers(0, 4)
    number = st.integers(-2, 10)
    kw: dict[str, st.SearchStrategy[Any]] = {
        "type": st.one_of(
            st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"]),
            st.lists(
                st.sampled_from(["integer", "number", "string", "object", "null"]),
                min_size=1,
                max_size=2,
                unique=True,
            ),
        ),
        "enum": st.lists(SCALARS | st.lists(SCALARS, max_size=2), min_size=1, max_size=3),
        "minimum": number,
        "maximum": number,
        "multipleOf": st.sampled_from([0.5, 2, 3]),
        "minLength": small,
        "maxLength": small,
        "pattern": st.sampled_from(PATTERNS),
        "items": sub,
        "minItems": small,
        "maxItems": small,
        "uniqueItems": st.booleans(),
        "properties": st.dictionaries(st.sampled_from(NAMES), sub, max_size=3),
        "patternProperties": st.dictionaries(st.sampled_from(["^a", "b"]), sub, max_size=1),
        "additionalProperties": st.booleans() | sub,
        "required": st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True),
        "minProperties": small,
        "maxProperties": small,
        "allOf": subs,
        "anyOf": subs,
        "oneOf": subs,
        "not": sub,
    }
    if draft == "draft4":
        kw["exclusiveMinimum"] = st.booleans()
        kw["exclusiveMaximum"] = st.booleans()
    else:
        kw["exclusiveMinimum"] = number
        kw["exclusiveMaximum"] = number
    if draft != "draft2020-12":
        kw["items"] = sub | st.lists(sub, min_size=1, max_size=2)
        kw["additionalItems"] = sub
    if not at_least(draft, "draft2019-09"):
        kw["dependencies"] = st.dictionaries(
            st.sampled_from(NAMES),
            st.lists(st.sampled_from(NAMES), max_size=2, unique=True) | sub,
            min_size=1,
            max_size=2,
        )
    # Keywords of every draft are drawn everywhere: where the draft lacks one it must be inert.
    kw["const"] = SCALARS
    kw["contains"] = sub
    kw["propertyNames"] = st.fixed_dictionaries({"maxLength": st.integers(0, 1)})
    kw["if"] = sub
    kw["then"] = sub
    kw["else"] = sub
    kw["dependentRequired"] = st.dictionaries(
        st.sampled_from(NAMES), st.lists(st.sampled_from(NAMES), max_size=2), max_size=2
    )
    kw["dependentSchemas"] = st.dictionaries(st.sampled_from(NAMES), sub, max_size=2)
    kw["minContains"] = small
    kw["maxContains"] = small
    if draft == "draft2020-12":
        kw["prefixItems"] = st.lists(sub, min_size=1, max_size=2)
    if at_least(draft, "draft6"):
        # Boolean subschemas arrived in draft 6.
        for k in ("not", "items", "contains"):
            kw[k] = kw[k] | st.booleans()
    picked = st.lists(st.sampled_from(sorted(kw)), min_size=1, max_size=3, unique=True)
    return picked.flatmap(lambda keys: st.fixed_dictionaries({k: kw[k] for k in keys}))


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, dict[str, Any], list[Any]]:
    draft = draw(st.sampled_from(ORDER))
    body = draw(schemas(draft))
    if not isinstance(body, dict):
        body = {"allOf": [body]}
    meta = DRAFTS[draft].META_SCHEMA["$schema"]
    if "#/definitions/node" in json.dumps(body):
        schema = {"$schema": meta, "definitions": {"node": body}, **NODE}
    else:
        schema = {"$schema": meta, **body}
    values = draw(st.lists(VALUES, min_size=4, max_size=8))
    # Constants the schema names are likelier to sit on a boundary than random values.
    values += [v for v in constants(schema) if isinstance(v, (int, float, str, list))][:4]
    return draft, schema, values


def constants(schema: Any) -> list[Any]:
    out: list[Any] = []
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "enum" and isinstance(v, list):
                out.extend(v)
            elif k == "const":
                out.append(v)
            else:
                out.extend(constants(v))
    elif isinstance(schema, list):
        for x in schema:
            out.extend(constants(x))
    return out


# -- the walk -----------------------------------------------------------------------------------


@cache
def gpt2() -> tuple[guided.Vocabulary, Any]:
    from tokenizers import Tokenizer

    path = str(shared_path("vocab", "gpt2_tokenizer.json"))
    return guided.Vocabulary.from_tokenizer_json(path), Tokenizer.from_file(path)


def accepts(index: guided.TokenIndex, tokenizer: Any, text: str) -> bool:
    state = index.initial_state
    for token in tokenizer.encode(text).ids:
        state = index.next_state(state, token)
        if state == 0:
            return False
    return index.is_accepting(state)


def written(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


STATS = {"compiled": 0, "refused": 0, "valid": 0, "invalid": 0}


def verdict(validator: Any, value: Any) -> bool | None:
    """The validator's verdict, or None where it has none: a reference loop that never consumes
    input recurses until Python stops it (``RecursionError``, which the registry's Rust-backed
    maps re-raise as a panic when it strikes inside them), and draft 6/7's ``additionalItems``
    beside a boolean ``items`` raises ``TypeError`` in ``jsonschema``."""
    try:
        return bool(validator.is_valid(value))
    except (RecursionError, TypeError):
        return None
    except BaseException as e:
        if type(e).__name__ == "PanicException" and "RecursionError" in str(e):
            return None
        raise


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@given(cases())
def test_token_index_agrees_with_each_drafts_validator(
    case: tuple[str, dict[str, Any], list[Any]],
) -> None:
    draft, schema, values = case
    note(json.dumps(schema))
    vocab, tokenizer = gpt2()
    validator = DRAFTS[draft](schema)
    try:
        index = guided.TokenIndex.from_json_schema(json.dumps(schema), vocab)
    except (guided.UnsupportedSchemaError, guided.SizeLimitError):
        STATS["refused"] += 1
        return
    STATS["compiled"] += 1
    for value in values:
        expected = verdict(validator, value)
        if expected is None:
            continue
        try:
            got = accepts(index, tokenizer, written(value)) or accepts(
                index, tokenizer, written(declared_reorder(value, schema))
            )
        except guided.SizeLimitError:
            continue
        STATS["valid" if expected else "invalid"] += 1
        assert got == expected, (
            f"{draft}: {json.dumps(schema)}\n{written(value)}: "
            f"jsonschema says {'valid' if expected else 'invalid'}, the index "
            f"{'accepts' if got else 'rejects'}"
        )


def test_draws_exercise_both_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    """The differential test means something only if it compiled schemas and saw both verdicts
    (runs after it in file order)."""
    with capsys.disabled():
        print(f"\ndifferential draws: {STATS}")
    if STATS["compiled"]:
        assert STATS["valid"] > 0 and STATS["invalid"] > 0, STATS
