"""``outlines_core.json_schema``: JSON Schema to regex, by guided's compiler.

outlines' engines turn a schema into a regex with ``build_regex_from_schema`` and compile that regex
into an ``Index``. The regex returned here is guided's (:func:`guided.json_schema_to_regex`), which
enforces the schema exactly or raises :class:`guided.UnsupportedSchemaError` naming the keyword,
where outlines-core ignores some keywords. Its layout is guided's: properties in declared order,
``whitespace_pattern`` (default ``[ ]?``, as in outlines-core) between tokens. outlines-core's
building-block constants (``STRING``, ``INTEGER``, ...) are its own regex fragments and are not
repeated here.
"""

from __future__ import annotations

import guided
from guided._errors import GuidedError

__all__ = ["build_regex_from_schema"]


def build_regex_from_schema(
    json_schema: str, whitespace_pattern: str | None = None, max_recursion_depth: int = 3
) -> str:
    """The regex of the JSON documents ``json_schema`` (a JSON string) accepts."""
    convert = getattr(guided, "json_schema_to_regex", None)
    if convert is None:
        raise GuidedError("this build of guided has no JSON Schema compiler")
    regex: str = convert(
        json_schema, whitespace=whitespace_pattern, max_recursion_depth=max_recursion_depth
    )
    return regex
