"""Rebuilding pickled indexes.

A token index pickles as the recipe that built it (pattern or schema, options, vocabulary), not as
its caches: the recipe is small, compilation is deterministic, and masks recompute on demand.
"""

from __future__ import annotations

from typing import Any

from guided._lib import TokenIndex, Vocabulary


def restore_index(kind: str, source: str, vocab: Vocabulary, options: dict[str, Any]) -> TokenIndex:
    """Recompiles an index from its recipe (the target of ``TokenIndex.__reduce__``)."""
    if kind == "regex":
        return TokenIndex.from_regex(source, vocab, **options)
    if kind == "json_schema":
        return TokenIndex.from_json_schema(source, vocab, **options)
    if kind == "grammar":
        return TokenIndex.from_grammar(source, vocab, **options)
    if kind == "structural_tag":
        return TokenIndex.from_structural_tag(source, vocab, **options)
    raise ValueError(f"unknown index recipe {kind!r}")
