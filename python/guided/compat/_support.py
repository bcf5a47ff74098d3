"""What the engine-facing shims share.

The outlines-core, xgrammar, vLLM and SGLang shims all speak to the same few guided objects, and
they keep needing the same small translations: a vocabulary from whatever the engine hands over
(a ``guided.Vocabulary`` or a tokenizer), the regex for a list of choices, the regex for "any JSON
value" that xgrammar and vLLM offer without a schema, and the text of a jump-forward that must end
on a character boundary. They live here, once, so each shim stays a thin mapping of names.

"Any JSON value" is not a regular language: brackets nest without bound. guided compiles regular
languages only, so :func:`json_value_regex` writes the grammar out to a fixed nesting depth. Every
document it admits is valid JSON; a valid document nested deeper than ``max_depth`` containers is
refused, never accepted wrongly. The regex text grows fourfold per level (each level embeds the
one below twice in objects and twice in arrays) while the automaton stays small (a few hundred
states per level, because only the kind of each open container needs remembering), so the cost
of depth is parse time: about 60 KB of pattern and 30 ms at depth 4, 250 KB and 100 ms at depth 5.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from guided._errors import GuidedError
from guided._lib import Vocabulary

__all__ = [
    "DEFAULT_JSON_DEPTH",
    "JSON_WHITESPACE",
    "choice_regex",
    "complete_utf8",
    "json_value_regex",
    "resolve_vocabulary",
]

#: Container nesting the "any JSON" constraints allow by default.
DEFAULT_JSON_DEPTH = 5

#: JSON's insignificant whitespace (RFC 8259), as xgrammar's built-in JSON grammar spells it.
JSON_WHITESPACE = r"[ \n\r\t]*"

_STRING = r'"([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'
_NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_SCALAR = rf"{_STRING}|{_NUMBER}|true|false|null"
_MAX_JSON_DEPTH = 6


def _object(value: str, ws: str) -> str:
    member = rf"{_STRING}{ws}:{ws}({value})"
    return rf"\{{{ws}({member}({ws},{ws}{member})*)?{ws}\}}"


def _array(value: str, ws: str) -> str:
    return rf"\[{ws}(({value})({ws},{ws}({value}))*)?{ws}\]"


def json_value_regex(
    max_depth: int = DEFAULT_JSON_DEPTH,
    *,
    roots: Iterable[str] = ("object", "array"),
    whitespace: str = JSON_WHITESPACE,
) -> str:
    """A regex for JSON documents whose root is one of ``roots`` ("object", "array", "scalar").

    Containers nest at most ``max_depth`` deep (the root container counts as one). Whitespace may
    stand between tokens inside containers, never around the root, as in xgrammar's built-in
    grammar.
    """
    roots = tuple(roots)
    unknown = set(roots) - {"object", "array", "scalar"}
    if not roots or unknown:
        raise GuidedError(
            f"JSON roots must be drawn from 'object', 'array', 'scalar'; got {list(roots)}"
        )
    if not 1 <= max_depth <= _MAX_JSON_DEPTH:
        raise GuidedError(
            f"max_depth must be between 1 and {_MAX_JSON_DEPTH} (the pattern grows fourfold per "
            f"level), got {max_depth}"
        )
    value = _SCALAR  # what may stand inside a container at the innermost level
    for _ in range(max_depth - 1):
        value = f"{_SCALAR}|{_object(value, whitespace)}|{_array(value, whitespace)}"
    parts = []
    if "object" in roots:
        parts.append(_object(value, whitespace))
    if "array" in roots:
        parts.append(_array(value, whitespace))
    if "scalar" in roots:
        parts.append(_SCALAR)
    return "|".join(f"({p})" for p in parts)


def choice_regex(choices: Iterable[Any]) -> str:
    """The regex matching exactly one of ``choices`` (each taken as literal text)."""
    texts = [str(c) for c in choices]
    if not texts:
        raise GuidedError("a choice constraint needs at least one choice")
    return "|".join(f"({re.escape(t)})" for t in texts)


def complete_utf8(data: bytes) -> str:
    """The longest prefix of ``data`` made of whole UTF-8 characters, decoded.

    Forced bytes can stop inside a character (the grammar allows both "é" and "è": only their
    shared first byte is forced) or start inside one (a token split a character). A jump-forward
    string must not do either, so such a tail is dropped, and a split head yields nothing.
    """
    if data and 0x80 <= data[0] <= 0xBF:
        return ""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


def resolve_vocabulary(source: Any, vocab_size: int | None = None) -> Vocabulary:
    """A ``Vocabulary`` from a ``Vocabulary`` or a tokenizer, fitted to ``vocab_size`` logits.

    Engines size their logits (and so their bitmasks) by the model, which may pad the tokenizer's
    vocabulary (extra ids are never allowed) or leave out some of its trailing added tokens (those
    ids can never be sampled, so they are dropped); the vocabulary must agree with that width or no
    bitmask row would fit.
    """
    vocab = source if isinstance(source, Vocabulary) else Vocabulary.from_huggingface(source)
    if vocab_size is None or vocab_size == vocab.vocab_size:
        return vocab
    if vocab_size <= 0:
        raise GuidedError(f"vocab_size must be positive, got {vocab_size}")
    tokens = [vocab.token_bytes(i) for i in range(min(len(vocab), vocab_size))]
    eos = [i for i in vocab.eos_token_ids if i < vocab_size]
    return Vocabulary(tokens, eos_token_ids=eos, vocab_size=vocab_size)


def parse_choices(spec: str | Iterable[Any]) -> list[str]:
    """The choices of a choice request: a list, or its JSON or Python literal text."""
    if not isinstance(spec, str):
        return [str(c) for c in spec]
    import ast
    import json

    try:
        value = json.loads(spec)
    except ValueError:
        try:
            value = ast.literal_eval(spec)
        except (ValueError, SyntaxError) as e:
            raise GuidedError(f"choices must be a JSON or Python list, got {spec!r}: {e}") from None
    if not isinstance(value, (list, tuple)):
        raise GuidedError(f"choices must be a list, got {type(value).__name__}")
    return [str(c) for c in value]
