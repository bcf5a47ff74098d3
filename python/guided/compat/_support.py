"""What the engine-facing shims share.

The outlines-core, xgrammar, vLLM and SGLang shims all speak to the same few guided objects, and
they keep needing the same small translations: a vocabulary from whatever the engine hands over
(a ``guided.Vocabulary`` or a tokenizer), the regex for a list of choices, the grammar of "any JSON
value" that xgrammar, vLLM and SGLang offer without a schema, and the text of a jump-forward that
must end on a character boundary. They live here, once, so each shim stays a thin mapping of names.

"Any JSON value" is not a regular language: brackets nest without bound. :func:`json_value_grammar`
writes it as a grammar, whose value, object and array rules call one another on the index's stack
(256 containers deep by default), so nothing but the stack bounds the nesting.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from guided._errors import GuidedError
from guided._lib import Vocabulary

__all__ = [
    "JSON_WHITESPACE",
    "choice_regex",
    "complete_utf8",
    "json_value_grammar",
    "resolve_vocabulary",
]

#: JSON's insignificant whitespace (RFC 8259), as xgrammar's built-in JSON grammar spells it.
JSON_WHITESPACE = r"[ \n\r\t]*"

_JSON_RULES = r"""
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \n\r\t]*
"""


def json_value_grammar(roots: Iterable[str] = ("object", "array")) -> str:
    """A grammar (GBNF) of the JSON documents whose root is one of ``roots`` ("object", "array",
    "value"): containers nest without bound, and whitespace may stand between tokens inside
    containers, never around the root, as in xgrammar's built-in grammar."""
    roots = tuple(roots)
    unknown = set(roots) - {"object", "array", "value"}
    if not roots or unknown:
        raise GuidedError(
            f"JSON roots must be drawn from 'object', 'array', 'value'; got {list(roots)}"
        )
    return f"root ::= {' | '.join(roots)}\n{_JSON_RULES}"


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
