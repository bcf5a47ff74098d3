"""An instance written the way a JSON Schema constraint expects to see it.

A regular language cannot admit every permutation of an object's members without a factorial blow
up, so the schema compiler fixes one order: the *declared order* of each location, the order in
which property names first appear in a depth-first walk of the schemas that apply there (each schema
read as its ``properties`` keys, then in its own key order: ``required`` entries,
``dependentRequired`` and draft-4 ``dependencies`` keys and values, ``dependentSchemas`` keys, the
keys of object values in ``const`` and ``enum``; then the subschemas applied in place: ``$ref``,
``allOf``, ``anyOf``, ``oneOf``, ``if``, ``then``, ``else``, ``not``, ``dependentSchemas``). Members
with undeclared names follow the declared ones. ``guided check`` uses :func:`declared_dumps` to ask
"would the constraint have let a model write this value?" rather than "is this text in that order?".

Keywords the schema's draft does not have (``const`` under draft 4, ``prefixItems`` under draft
7) are skipped, as the compiler skips them (see ``json_schema::drafts`` in ``guided-core``).

The walk here follows the compiler's strict reading, which unions the names of every alternative;
inside an ``anyOf`` branch the compiler may use the branch's own order instead (its loose
reading, see ``json_schema::layout`` in ``guided-core``), so ``guided check`` also tries the
instance's own member order before it reports a mismatch. Given a ``follows`` predicate (does this
value satisfy this subschema?), :func:`declared_reorder` takes the loose reading: at an ``anyOf``
or ``oneOf`` it walks only the first alternative the value follows, and at an ``if`` the side the
value takes. Only references within the document (``#``, ``#/json/pointer`` and ``#anchor``) are
followed; anything else contributes no names, and the check against the constraint remains the
judge.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Follows", "declared_dumps", "declared_reorder"]

#: Whether a value satisfies a subschema of the document (references resolved against its root).
Follows = Callable[[Any, Any], bool]

_IN_PLACE_SINGLE = ("not", "if", "then", "else")
_IN_PLACE_ARRAYS = ("allOf", "anyOf", "oneOf")
_LEGACY_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")

_FROM_2019 = (
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedItems",
    "unevaluatedProperties",
    "minContains",
    "maxContains",
)
_FROM_2020 = ("prefixItems", "$dynamicRef")
_FROM_7 = ("if", "then", "else")
_FROM_6 = ("const", "contains", "propertyNames")
#: The keywords each draft lacks, by a substring of its ``$schema``; no match means 2020-12.
_LACKS: tuple[tuple[str, frozenset[str]], ...] = (
    ("draft-03", frozenset((*_FROM_6, *_FROM_7, *_FROM_2019, *_FROM_2020, "$recursiveRef"))),
    ("draft-04", frozenset((*_FROM_6, *_FROM_7, *_FROM_2019, *_FROM_2020, "$recursiveRef"))),
    ("draft-06", frozenset((*_FROM_7, *_FROM_2019, *_FROM_2020, "$recursiveRef"))),
    ("draft-07", frozenset((*_FROM_2019, *_FROM_2020, "$recursiveRef"))),
    ("2019-09", frozenset(_FROM_2020)),
)


class _Document:
    """The root schema, for resolving in-document references."""

    def __init__(self, root: Any, follows: Follows | None = None) -> None:
        self.root = root
        self.follows = follows
        schema_uri = root.get("$schema", "") if isinstance(root, dict) else ""
        # Before 2019-09 a `$ref` made its siblings ignored.
        self.ref_overrides_siblings = any(d in str(schema_uri) for d in _LEGACY_DRAFTS)
        self.lacks = next(
            (lacks for d, lacks in _LACKS if d in str(schema_uri)), frozenset({"$recursiveRef"})
        )
        self.anchors: dict[str, Any] = {}
        self._collect_anchors(root)

    def _collect_anchors(self, node: Any) -> None:
        if isinstance(node, dict):
            anchor = node.get("$anchor")
            if isinstance(anchor, str):
                self.anchors.setdefault(anchor, node)
            for value in node.values():
                self._collect_anchors(value)
        elif isinstance(node, list):
            for value in node:
                self._collect_anchors(value)

    def view(self, schema: Any) -> Any:
        """``schema`` without the keywords its draft lacks."""
        if not isinstance(schema, dict) or not self.lacks.intersection(schema):
            return schema
        return {k: v for k, v in schema.items() if k not in self.lacks}

    def resolve(self, ref: str) -> Any:
        """The schema a local reference names, or None."""
        if not ref.startswith("#"):
            return None
        fragment = ref[1:]
        if not fragment.startswith("/"):
            return self.root if fragment == "" else self.anchors.get(fragment)
        node = self.root
        for raw in fragment[1:].split("/"):
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node


def _in_place(doc: _Document, schema: Any, instance: Any) -> Iterator[Any]:
    """The subschemas applied to the same instance, in the schema's key order; with
    ``doc.follows``, only the alternatives ``instance`` takes."""
    if not isinstance(schema, dict):
        return
    ref_only = doc.ref_overrides_siblings and "$ref" in schema
    for key, value in schema.items():
        if ref_only and key != "$ref":
            continue
        if key in ("$ref", "$dynamicRef", "$recursiveRef"):
            target = doc.resolve(value) if isinstance(value, str) else None
            if target is not None:
                yield target
        elif doc.follows is not None and key in ("then", "else"):
            condition = schema.get("if", True)
            if doc.follows(condition, instance) == (key == "then"):
                yield value
        elif key in _IN_PLACE_SINGLE:
            yield value
        elif key in _IN_PLACE_ARRAYS and isinstance(value, list):
            if doc.follows is not None and key != "allOf":
                taken = next((b for b in value if doc.follows(b, instance)), None)
                yield from value if taken is None else (taken,)
            else:
                yield from value
        elif key in ("dependentSchemas", "dependencies") and isinstance(value, dict):
            yield from (v for v in value.values() if isinstance(v, (dict, bool)))


def _own_names(doc: _Document, schema: Any) -> Iterator[str]:
    if not isinstance(schema, dict) or (doc.ref_overrides_siblings and "$ref" in schema):
        return
    if isinstance(schema.get("properties"), dict):
        yield from schema["properties"]
    for key, value in schema.items():
        if key in ("dependentSchemas", "const") and isinstance(value, dict):
            yield from value
        elif key == "required" and isinstance(value, list):
            yield from (v for v in value if isinstance(v, str))
        elif key in ("dependentRequired", "dependencies") and isinstance(value, dict):
            for name, deps in value.items():
                yield name
                if isinstance(deps, list):
                    yield from (v for v in deps if isinstance(v, str))
        elif key == "enum" and isinstance(value, list):
            for member in value:
                if isinstance(member, dict):
                    yield from member


def _closure(doc: _Document, schemas: list[Any], instance: Any = None) -> list[Any]:
    """The schemas and everything they apply in place to ``instance``, once each, in depth-first
    key order."""
    out: list[Any] = []
    seen: set[int] = set()
    stack = list(reversed(schemas))
    while stack:
        schema = stack.pop()
        if id(schema) in seen:
            continue
        seen.add(id(schema))
        view = doc.view(schema)
        out.append(view)
        stack.extend(reversed(list(_in_place(doc, view, instance))))
    return out


def declared_order(doc: _Document, schemas: list[Any], instance: Any = None) -> list[str]:
    """The declared member order of ``instance`` at a location where ``schemas`` apply."""
    names: dict[str, None] = {}
    for schema in _closure(doc, schemas, instance):
        for name in _own_names(doc, schema):
            names.setdefault(name, None)
    return list(names)


def _member_schemas(doc: _Document, schemas: list[Any], name: str, instance: Any) -> list[Any]:
    """The schemas that apply to member ``name`` of ``instance``, an object where ``schemas``
    apply."""
    out: list[Any] = []
    for schema in _closure(doc, schemas, instance):
        if not isinstance(schema, dict):
            continue
        properties = schema.get("properties")
        declared = isinstance(properties, dict) and name in properties
        if declared and isinstance(properties, dict):
            out.append(properties[name])
        matched = False
        patterns = schema.get("patternProperties")
        if isinstance(patterns, dict):
            for pattern, sub in patterns.items():
                try:
                    if re.search(pattern, name):
                        out.append(sub)
                        matched = True
                except re.error:
                    continue
        if not declared and not matched and "additionalProperties" in schema:
            out.append(schema["additionalProperties"])
        for constant in _constants(schema):
            if isinstance(constant, dict) and name in constant:
                out.append({"const": constant[name]})
    return out


def _item_schemas(doc: _Document, schemas: list[Any], position: int, instance: Any) -> list[Any]:
    """The schemas that apply to item ``position`` of ``instance``, an array where ``schemas``
    apply."""
    out: list[Any] = []
    for schema in _closure(doc, schemas, instance):
        if not isinstance(schema, dict):
            continue
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(prefix, list) and position < len(prefix):
            out.append(prefix[position])
        elif isinstance(items, list):  # draft-4 tuple form
            if position < len(items):
                out.append(items[position])
            elif "additionalItems" in schema:
                out.append(schema["additionalItems"])
        elif items is not None:
            out.append(items)
        if "contains" in schema:
            out.append(schema["contains"])
        for constant in _constants(schema):
            if isinstance(constant, list) and position < len(constant):
                out.append({"const": constant[position]})
    return out


def _constants(schema: dict[str, Any]) -> Iterator[Any]:
    if "const" in schema:
        yield schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list):
        yield from enum


def _reorder(doc: _Document, value: Any, schemas: list[Any]) -> Any:
    if isinstance(value, dict):
        order = declared_order(doc, schemas, value)
        rank = {name: i for i, name in enumerate(order)}
        names = sorted(value, key=lambda n: (0, rank[n]) if n in rank else (1, 0))
        return {n: _reorder(doc, value[n], _member_schemas(doc, schemas, n, value)) for n in names}
    if isinstance(value, list):
        return [
            _reorder(doc, v, _item_schemas(doc, schemas, i, value)) for i, v in enumerate(value)
        ]
    return value


def declared_reorder(instance: Any, schema: Any, *, follows: Follows | None = None) -> Any:
    """``instance`` with every object's members in the declared order (a copy): the strict
    reading, or with ``follows`` the loose one (see the module's documentation)."""
    return _reorder(_Document(schema, follows), instance, [schema])


def declared_dumps(instance: Any, schema: Any, *, compact: bool = False) -> str:
    """``json.dumps`` of ``instance`` with every object's members in the declared order.

    Non-ASCII characters are written raw (UTF-8), as a model writes them; ``compact`` drops the
    spaces after ``:`` and ``,``.
    """
    separators = (",", ":") if compact else (", ", ": ")
    return json.dumps(declared_reorder(instance, schema), ensure_ascii=False, separators=separators)
