"""JSON Schema to regex: the typed facade over ``guided._lib.json_schema_to_regex``.

The compiler runs in Rust on the schema's JSON text. This module turns a ``dict`` into that text
(``json.dumps``, which is exact for every JSON value), surfaces what non-strict mode ignored as a
:class:`UserWarning` naming each keyword and where it is, and reports a schema that is not JSON at
all as :class:`~guided.UnsupportedSchemaError` rather than a bare ``TypeError``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

from guided import _lib
from guided._errors import SizeLimitError, UnsupportedSchemaError

__all__ = ["json_schema_text", "json_schema_to_regex", "warn_ignored"]


#: The deepest JSON the compiler reads (serde_json's limit, which the compiler reports as
#: ``SizeLimitError(limit="json_nesting")`` for schema text).
JSON_NESTING = 128


def nesting(value: Any) -> int:
    """How deep lists and dicts nest in ``value``, counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)
        else:
            continue
        deepest = max(deepest, depth + 1)
    return deepest


def json_schema_text(schema: Mapping[str, Any] | bool | str) -> str:
    """The JSON text of a schema given as a mapping, a boolean schema, or JSON text."""
    if isinstance(schema, str):
        return schema
    try:
        return json.dumps(schema, allow_nan=False)
    except RecursionError as exc:
        depth = nesting(schema)
        raise SizeLimitError(
            f"size limit exceeded: json_nesting reached {depth}, the maximum is {JSON_NESTING}",
            limit="json_nesting",
            value=depth,
            maximum=JSON_NESTING,
        ) from exc
    except (TypeError, ValueError) as exc:
        raise UnsupportedSchemaError(f"the schema is not JSON: {exc}") from exc


def json_schema_to_regex(
    schema: Mapping[str, Any] | bool | str,
    *,
    whitespace: str | None = None,
    max_recursion_depth: int = 3,
    max_free_depth: int = 4,
    strict: bool = True,
    coerce_one_of: bool = False,
    assert_formats: bool = True,
) -> str:
    """A pattern matching exactly the JSON texts of the schema's instances.

    Texts are compact JSON with ``whitespace`` between tokens (a pattern over space, tab, CR and LF,
    or ``"flexible"``; default ``[ ]?``), object members in the schema's declared order, strings in
    raw UTF-8 or with JSON escapes. Keywords that cannot be enforced exactly raise
    :class:`~guided.UnsupportedSchemaError` naming the keyword and its JSON pointer; with
    ``strict=False`` those that only narrow the set are ignored and listed in a ``UserWarning``.
    ``coerce_one_of`` compiles an overlapping ``oneOf`` as ``anyOf``; ``assert_formats=False`` reads
    ``format`` as an annotation.
    """
    pattern, ignored = _lib.json_schema_to_regex(
        json_schema_text(schema),
        whitespace=whitespace,
        max_recursion_depth=max_recursion_depth,
        max_free_depth=max_free_depth,
        strict=strict,
        coerce_one_of=coerce_one_of,
        assert_formats=assert_formats,
    )
    warn_ignored(ignored, stacklevel=3)
    return pattern


def warn_ignored(ignored: list[str], *, stacklevel: int = 4) -> None:
    """Reports, as one ``UserWarning``, what non-strict mode ignored (or ``depth_bounds``
    bounded), each with its place."""
    if ignored:
        warnings.warn(
            "the JSON Schema compiler did not enforce everything exactly: " + "; ".join(ignored),
            UserWarning,
            stacklevel=stacklevel,
        )
