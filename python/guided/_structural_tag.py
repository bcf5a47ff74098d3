"""Building structural tags: tool calls in free text, for `TokenIndex.from_structural_tag`.

A structural tag is xgrammar's JSON description of an output (see that method): this module writes
the two shapes tool calling needs, so a caller with a list of tools does not have to spell the
format out. Schemas may be given as mappings, booleans, JSON text or pydantic model classes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from guided._errors import GuidedError

__all__ = ["structural_tag"]


def _schema(schema: Any) -> Any:
    if isinstance(schema, (str, bytes, bytearray)):
        try:
            return json.loads(schema)
        except ValueError as e:
            raise GuidedError(f"a tag's schema is not valid JSON: {e}") from None
    model_json_schema = getattr(schema, "model_json_schema", None)
    if callable(model_json_schema):
        return model_json_schema()
    return schema


def structural_tag(
    triggers: Sequence[str],
    tags: Sequence[Mapping[str, Any]],
    *,
    required: bool = False,
    separator: str = "\n",
) -> dict[str, Any]:
    """The structural tag of tool calls in free text: each of ``tags`` is a mapping with
    ``begin``, ``schema`` and ``end``; a call's text is its begin, a JSON instance of its schema,
    and its end.

    With ``required=False`` the output is free text, which may hold any number of calls: text
    never contains a trigger except where a call begins, and every begin starts with one of
    ``triggers``. With ``required=True`` the output is calls only, at least one, with
    ``separator`` between them (``triggers`` then only need to be consistent with the begins).
    """
    formats = []
    for i, tag in enumerate(tags):
        missing = {"begin", "schema", "end"} - set(tag)
        if missing:
            raise GuidedError(f"tag {i} lacks {', '.join(sorted(missing))}")
        formats.append(
            {
                "type": "tag",
                "begin": tag["begin"],
                "content": {"type": "json_schema", "json_schema": _schema(tag["schema"])},
                "end": tag["end"],
            }
        )
    for i, tag in enumerate(tags):
        if not any(str(tag["begin"]).startswith(t) for t in triggers):
            raise GuidedError(f"tag {i}'s begin {tag['begin']!r} starts with none of the triggers")
    if required:
        format_: dict[str, Any] = {
            "type": "tags_with_separator",
            "tags": formats,
            "separator": separator,
            "at_least_one": True,
        }
    else:
        format_ = {"type": "triggered_tags", "triggers": list(triggers), "tags": formats}
    return {"type": "structural_tag", "format": format_}
