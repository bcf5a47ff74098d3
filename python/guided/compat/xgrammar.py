"""xgrammar's Python surface, backed by guided.

vLLM's default structured-output backend, SGLang's, and many serving stacks call xgrammar the same
way: describe the tokenizer once (``TokenizerInfo``), compile each constraint with a
``GrammarCompiler`` (which caches), make a ``GrammarMatcher`` per request, and fill rows of an int32
bitmask every step, one request at a time or a batch at once with ``BatchGrammarMatcher``. This
module offers those classes and the bitmask helpers with xgrammar's names, signatures, return values
and error classes, over guided's :class:`~guided.TokenIndex` and :class:`~guided.Guide`. Masks use
the same bit layout, so buffers pass between the two unchanged.

Errors. xgrammar raises ``RuntimeError`` for a bad grammar, a bad buffer, an impossible rollback or
a call on a terminated matcher, and engines catch exactly that (SGLang logs and skips an invalid
regex on ``RuntimeError``). guided raises :class:`~guided.GuidedError`, a ``ValueError``. Errors
leaving this module are both: the guided class they were, subclassed with ``RuntimeError``, so
``except RuntimeError``, ``except ValueError`` and ``except guided.RegexSyntaxError`` all catch them
and the attributes (position, keyword, ...) survive.

Where the semantics differ, on purpose:

- ``compile_regex`` and ``compile_json_schema`` are exact: regexes are read
  in xgrammar's own dialect (``dialect="xgrammar"``: ``.`` matches newlines, ``\\d \\w`` are ASCII,
  ``\\s`` is ECMA-262's white space, an escaped letter without a meaning is the letter), and
  schemas go through guided's compiler. Where xgrammar leaves a pattern's own language (it drops a
  mid-pattern ``^`` or ``$``, reads ``[\\^]`` as any character, splits ``\\ud83d\\ude00`` into
  two surrogates), the shim keeps the language; README.md lists these cases.
- ``compile_grammar`` reads xgrammar's EBNF (GBNF) with :meth:`guided.TokenIndex.from_grammar`:
  recursive rules become calls, at most 256 open at once. xgrammar's lookahead assertions
  (``(= ...)``) and ``TagDispatch`` raise. ``Grammar.from_lark`` reads Lark as
  ``TokenIndex.from_grammar(syntax="lark")`` does, which is Lark's own reading; xgrammar departs
  from it in two places the shim does not follow: it allows no ``%ignore``d text before the first
  terminal, and its ``ESCAPED_STRING`` may hold a raw line break.
- ``compile_structural_tag`` reads xgrammar's structural tags (and the legacy ``(tags,
  triggers)`` form) with :meth:`guided.TokenIndex.from_structural_tag`: text formats are exact,
  with xgrammar's semantics for free text (no trigger outside a call; ``any_text`` in a tag stops
  at its end); token-level formats (``token``, ``any_tokens``, ``token_triggered_tags``, ...) and
  the XML argument styles raise ``UnsupportedSchemaError``. Free text is UTF-8 text: xgrammar
  also allows tokens there that leave UTF-8 (a lone continuation byte); the shim does not.
  ``compile_builtin_json_grammar`` (any JSON object or array) is such a grammar, masked as
  xgrammar's.
- ``compile_json_schema`` layout options: ``any_whitespace=True`` (the default) allows
  ``[ \\n\\r\\t]*`` between tokens, or ``{0,max_whitespace_cnt}`` of them, exactly as xgrammar.
  ``any_whitespace=False`` is honored only with ``separators=(",", ":")`` (no whitespace at all);
  xgrammar's other fixed layouts (``", "`` after commas but nothing after ``[``, indentation) are
  not expressible through guided's single whitespace pattern, so they raise rather than widen.
  ``any_order=True`` raises: guided emits properties in declared order. ``strict_mode=True`` closes
  every object that declares ``properties`` and every ``prefixItems`` array that says nothing more,
  as xgrammar does; branches of ``allOf`` stay open (closing each would refuse what the others
  declare).
- Special tokens: ``TokenizerInfo.from_huggingface`` reads the tokenizer through
  :func:`guided.Vocabulary.from_huggingface`, which gives added special tokens no text, so they are
  never allowed. xgrammar decodes them as their literal text (only empty tokens count as special),
  so a grammar that admits ``<|im_start|>`` as text admits that token.
- Compilation is lazy (masks are computed when a matcher first needs them), so ``max_threads`` and
  ``enable_dynamic_compilation`` are accepted and have nothing to change.
- Bits past ``vocab_size`` in the last word of a row are always written as 0; xgrammar sometimes
  leaves them as the buffer held them.
- ``accept_string`` spells the string with vocabulary tokens (any spelling: the automaton runs over
  bytes, so every spelling reaches the same state) and counts it as one rollback step, as xgrammar
  does; a string the vocabulary cannot spell at all raises.
- ``max_rollback_tokens`` is unlimited, as in xgrammar since it deprecated the limit.
- ``find_jump_forward_string`` returns whole characters only, as xgrammar documents; guided's
  :meth:`~guided.Guide.forced_bytes` has the raw bytes.
"""

from __future__ import annotations

import bisect
import contextlib
import importlib
import json
import math
import os
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import numpy as np
import numpy.typing as npt

from guided._errors import GuidedError, UnsupportedSchemaError
from guided._lib import Guide, TokenIndex, Vocabulary
from guided._lib import fill_next_token_bitmask as _fill_batch
from guided.cache import IndexCache, IndexRecipe
from guided.compat._support import (
    complete_utf8,
    json_value_grammar,
    resolve_vocabulary,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "BatchGrammarMatcher",
    "CompiledGrammar",
    "Grammar",
    "GrammarCompiler",
    "GrammarMatcher",
    "TokenizerInfo",
    "VocabType",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "get_bitmask_shape",
    "reset_token_bitmask",
]

_JSON_WS = r"[ \n\r\t]"


# ---------------------------------------------------------------------------------------------
# Errors


_RUNTIME_FLAVORS: dict[type[GuidedError], type[GuidedError]] = {}
_FLAVOR_LOCK = threading.Lock()


def _runtime_flavor(error: GuidedError) -> GuidedError:
    """The same error as an instance of its class subclassed with ``RuntimeError``."""
    cls = type(error)
    if issubclass(cls, RuntimeError):
        return error
    with _FLAVOR_LOCK:
        flavor = _RUNTIME_FLAVORS.get(cls)
        if flavor is None:
            flavor = type(cls.__name__, (cls, RuntimeError), {"__module__": cls.__module__})
            _RUNTIME_FLAVORS[cls] = flavor
    out = flavor.__new__(flavor)
    out.args = error.args
    out.__dict__.update(error.__dict__)
    return out


@contextlib.contextmanager
def _xgrammar_errors() -> Iterator[None]:
    try:
        yield
    except GuidedError as e:
        raise _runtime_flavor(e) from None


def _fail(message: str) -> NoReturn:
    raise _runtime_flavor(GuidedError(message))


# ---------------------------------------------------------------------------------------------
# Tokenizer


class VocabType(Enum):
    """How ``encoded_vocab`` spells tokens: as they are (RAW), with ``<0xNN>`` byte pieces and
    ``▁`` for space (BYTE_FALLBACK), or in GPT-2's byte-to-unicode alphabet (BYTE_LEVEL)."""

    RAW = 0
    BYTE_FALLBACK = 1
    BYTE_LEVEL = 2


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's unicode-to-byte table: printable bytes stand for themselves, the rest are shifted
    to U+0100 and up in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in kept}
    shifted = 0
    for b in range(256):
        if b not in table.values():
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


_BYTE_LEVEL = _byte_level_decoder()
_HEX = frozenset("0123456789abcdefABCDEF")


def _decode_token(token: str | bytes, vocab_type: VocabType) -> bytes:
    if isinstance(token, bytes):
        return token
    if vocab_type is VocabType.BYTE_LEVEL:
        out = bytearray()
        for ch in token:
            b = _BYTE_LEVEL.get(ch)
            if b is None:
                out += ch.encode("utf-8")
            else:
                out.append(b)
        return bytes(out)
    if vocab_type is VocabType.BYTE_FALLBACK:
        if len(token) == 6 and token.startswith("<0x") and token[5] == ">":
            if set(token[3:5]) <= _HEX:
                return bytes([int(token[3:5], 16)])
        return token.replace("\u2581", " ").encode("utf-8")
    return token.encode("utf-8")


# xgrammar's guesses when no stop token is named.
_STOP_NAMES = frozenset(
    {
        b"</s>",
        b"<|end_of_text|>",
        b"<|eot_id|>",
        b"<|endoftext|>",
        b"<eos>",
        b"<|eos|>",
        b"<end_of_turn>",
        "<｜end▁of▁sentence｜>".encode(),
    }
)


class TokenizerInfo:
    """The vocabulary, its stop tokens and the model's logit width, as xgrammar describes them."""

    def __init__(
        self,
        encoded_vocab: Sequence[bytes] | Sequence[str],
        vocab_type: VocabType = VocabType.RAW,
        *,
        vocab_size: int | None = None,
        stop_token_ids: Sequence[int] | int | None = None,
        add_prefix_space: bool = False,
    ) -> None:
        if isinstance(stop_token_ids, int):
            stop_token_ids = [stop_token_ids]
        decoded = [_decode_token(t, vocab_type) for t in encoded_vocab]
        size = len(decoded) if vocab_size is None else vocab_size
        if size <= 0:
            _fail(f"vocab_size must be positive, got {size}")
        decoded = decoded[:size]
        if stop_token_ids is None:
            stops = [i for i, t in enumerate(decoded) if t in _STOP_NAMES]
            if not stops:
                warnings.warn(
                    "no stop token was given and none of the vocabulary's tokens has a known "
                    "end-of-sequence name; the matcher will never allow ending",
                    stacklevel=2,
                )
        else:
            stops = list(stop_token_ids)
            bad = [i for i in stops if not 0 <= i < size]
            if bad:
                _fail(f"stop token ids {bad} are outside the vocabulary (size {size})")
        stop_set = set(stops)
        tokens: list[bytes | None] = [
            None if (i in stop_set or not t) else t for i, t in enumerate(decoded)
        ]
        with _xgrammar_errors():
            vocab = Vocabulary(tokens, eos_token_ids=stops, vocab_size=size)
        self._init(vocab, vocab_type, add_prefix_space, decoded)

    def _init(
        self,
        vocab: Vocabulary,
        vocab_type: VocabType,
        add_prefix_space: bool,
        decoded: list[bytes] | None,
    ) -> None:
        self._vocab = vocab
        self._vocab_type = vocab_type
        self._add_prefix_space = add_prefix_space
        self._decoded = decoded
        self._lock = threading.Lock()
        self._spelling: tuple[dict[bytes, int], list[bytes], int] | None = None
        self._variants: dict[tuple[int, ...], Vocabulary] = {}

    @staticmethod
    def from_guided(
        vocab: Vocabulary,
        vocab_type: VocabType = VocabType.RAW,
        add_prefix_space: bool = False,
    ) -> TokenizerInfo:
        """The description of a ``guided.Vocabulary`` (its EOS ids are the stop tokens)."""
        info = TokenizerInfo.__new__(TokenizerInfo)
        info._init(vocab, vocab_type, add_prefix_space, None)
        return info

    @staticmethod
    def from_huggingface(
        tokenizer: Any,
        *,
        vocab_size: int | None = None,
        stop_token_ids: Sequence[int] | int | None = None,
    ) -> TokenizerInfo:
        """The description of a transformers tokenizer (or ``tokenizers.Tokenizer``), read by
        :func:`guided.Vocabulary.from_huggingface`; ``vocab_size`` is the model's logit width."""
        if isinstance(stop_token_ids, int):
            stop_token_ids = [stop_token_ids]
        if stop_token_ids is not None and len(stop_token_ids) == 0:
            raise ValueError("stop_token_ids cannot be empty")
        with _xgrammar_errors():
            vocab = Vocabulary.from_huggingface(tokenizer, eos_token_ids=stop_token_ids)
            vocab = resolve_vocabulary(vocab, vocab_size)
        kind = VocabType.RAW
        backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        to_str = getattr(backend, "to_str", None)
        if callable(to_str):
            decoder = json.loads(to_str()).get("decoder") or {}
            names = json.dumps(decoder)
            if '"ByteLevel"' in names:
                kind = VocabType.BYTE_LEVEL
            elif '"ByteFallback"' in names:
                kind = VocabType.BYTE_FALLBACK
        return TokenizerInfo.from_guided(vocab, kind)

    @property
    def vocabulary(self) -> Vocabulary:
        """The guided vocabulary underneath."""
        return self._vocab

    @property
    def vocab_type(self) -> VocabType:
        """How the encoded vocabulary spelled tokens."""
        return self._vocab_type

    @property
    def vocab_size(self) -> int:
        """The model's logit width (the bitmask covers this many ids)."""
        return self._vocab.vocab_size

    @property
    def add_prefix_space(self) -> bool:
        """Whether the tokenizer prepends a space to the text it encodes."""
        return self._add_prefix_space

    @property
    def decoded_vocab(self) -> list[bytes]:
        """Each token's bytes (empty for special tokens and ids past the tokenizer's)."""
        if self._decoded is not None:
            return list(self._decoded) + [b""] * (self.vocab_size - len(self._decoded))
        out = []
        for i in range(self.vocab_size):
            data = self._vocab.token_bytes(i) if i < len(self._vocab) else None
            out.append(data or b"")
        return out

    @property
    def stop_token_ids(self) -> list[int]:
        """The ids that end generation (allowed exactly where the grammar is complete)."""
        return list(self._vocab.eos_token_ids)

    @property
    def special_token_ids(self) -> list[int]:
        """Ids that never stand for text: tokens without bytes that are not stop tokens."""
        stops = set(self._vocab.eos_token_ids)
        return [
            i
            for i in range(self.vocab_size)
            if i not in stops and (i >= len(self._vocab) or not self._vocab.token_bytes(i))
        ]

    def _with_stop_tokens(self, stops: tuple[int, ...]) -> Vocabulary:
        """This vocabulary with other stop tokens (the old ones become ids without text)."""
        with self._lock:
            vocab = self._variants.get(stops)
            if vocab is None:
                old = set(self._vocab.eos_token_ids)
                tokens = [
                    None if i in old or i in stops else self._vocab.token_bytes(i)
                    for i in range(len(self._vocab))
                ]
                with _xgrammar_errors():
                    vocab = Vocabulary(tokens, eos_token_ids=stops, vocab_size=self.vocab_size)
                self._variants[stops] = vocab
            return vocab

    def _spelling_tables(self) -> tuple[dict[bytes, int], list[bytes], int]:
        """Ordinary tokens by their bytes (lowest id first), all of them sorted, the longest
        length: what spelling a string with tokens needs."""
        with self._lock:
            if self._spelling is None:
                by_bytes: dict[bytes, int] = {}
                stops = set(self._vocab.eos_token_ids)
                for i in range(len(self._vocab)):
                    data = self._vocab.token_bytes(i)
                    if data and i not in stops:
                        by_bytes.setdefault(data, i)
                longest = max((len(b) for b in by_bytes), default=0)
                self._spelling = (by_bytes, sorted(by_bytes), longest)
            return self._spelling

    def _spell(self, data: bytes) -> list[int] | None:
        """Token ids whose bytes concatenate to ``data`` (as few as possible), or None."""
        by_bytes, _, longest = self._spelling_tables()
        n = len(data)
        # back[i]: (tokens needed to spell data[:i], length of the last one), None if impossible
        back: list[tuple[int, int] | None] = [None] * (n + 1)
        back[0] = (0, 0)
        for i in range(1, n + 1):
            for length in range(1, min(longest, i) + 1):
                prev = back[i - length]
                if prev is None or data[i - length : i] not in by_bytes:
                    continue
                current = back[i]
                if current is None or prev[0] + 1 < current[0]:
                    back[i] = (prev[0] + 1, length)
        out: list[int] = []
        i = n
        while i > 0:
            entry = back[i]
            if entry is None:
                return None
            out.append(by_bytes[data[i - entry[1] : i]])
            i -= entry[1]
        out.reverse()
        return out

    def _jump_tokens(self, data: bytes) -> list[int]:
        """xgrammar's jump-forward tokenization: longest tokens first, left to right, stopping
        where no token fits; the last token is dropped if a longer ordinary token extends it."""
        by_bytes, ordered, longest = self._spelling_tables()
        out: list[int] = []
        last = b""
        i = 0
        while i < len(data):
            for length in range(min(longest, len(data) - i), 0, -1):
                token = by_bytes.get(data[i : i + length])
                if token is not None:
                    out.append(token)
                    last = data[i : i + length]
                    i += length
                    break
            else:
                break
        if out:
            at = bisect.bisect_right(ordered, last)
            if at < len(ordered) and ordered[at].startswith(last):
                out.pop()
        return out

    def __repr__(self) -> str:
        return (
            f"TokenizerInfo(vocab_type={self._vocab_type.name}, vocab_size={self.vocab_size}, "
            f"stop_token_ids={self.stop_token_ids})"
        )


# ---------------------------------------------------------------------------------------------
# Compilation


_SERIAL_VERSION = "guided-compat-xgrammar-1"


class Grammar:
    """A constraint not yet compiled for a tokenizer, as xgrammar's ``Grammar`` is: made from
    EBNF text, a regex or a JSON Schema, compiled by :meth:`GrammarCompiler.compile_grammar`."""

    def __init__(self, recipe: IndexRecipe) -> None:
        self.recipe = recipe

    @staticmethod
    def from_ebnf(ebnf_string: str, *, root_rule_name: str = "root") -> Grammar:
        """The grammar of EBNF (GBNF) text; malformed text raises at compile time, with a line."""
        with _xgrammar_errors():
            return Grammar(IndexRecipe.grammar(ebnf_string, syntax="ebnf", root=root_rule_name))

    @staticmethod
    def from_lark(
        lark_string: str,
        *,
        tokenizer_info: TokenizerInfo | None = None,
        named_grammars: Mapping[str, Any] | None = None,
    ) -> Grammar:
        """The grammar of Lark text (rule ``start``), as :meth:`guided.TokenIndex.from_grammar`
        reads it with ``syntax="lark"``; ``named_grammars`` (``@name`` references) raise."""
        if named_grammars:
            _fail("named grammars (`@name` in Lark text) are not supported by guided")
        with _xgrammar_errors():
            return Grammar(IndexRecipe.grammar(lark_string, syntax="lark", root="start"))

    @staticmethod
    def from_regex(regex_string: str) -> Grammar:
        """The grammar of a regex, in xgrammar's dialect."""
        with _xgrammar_errors():
            return Grammar(IndexRecipe.regex(regex_string, dialect="xgrammar"))

    @staticmethod
    def from_json_schema(
        schema: str | Mapping[str, Any] | Any,
        *,
        any_whitespace: bool = True,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        strict_mode: bool = True,
        max_whitespace_cnt: int | None = None,
        any_order: bool = False,
    ) -> Grammar:
        """The grammar of the JSON documents ``schema`` (text, dict or pydantic model) accepts,
        with xgrammar's layout options (see :meth:`GrammarCompiler.compile_json_schema`)."""
        if any_order:
            raise _runtime_flavor(
                UnsupportedSchemaError(
                    "any_order=True is not supported: guided writes properties in declared order",
                    keyword="any_order",
                )
            )
        if any_whitespace:
            if max_whitespace_cnt is not None and max_whitespace_cnt <= 0:
                _fail(f"max_whitespace_cnt must be positive, got {max_whitespace_cnt}")
            count = "*" if max_whitespace_cnt is None else f"{{0,{max_whitespace_cnt}}}"
            whitespace = _JSON_WS + count
        elif indent is None and separators is not None and tuple(separators) == (",", ":"):
            whitespace = ""
        else:
            raise _runtime_flavor(
                UnsupportedSchemaError(
                    "any_whitespace=False is supported only with separators=(',', ':') and no "
                    f"indent (got indent={indent!r}, separators={separators!r}): guided allows "
                    "one whitespace pattern between all tokens",
                    keyword="any_whitespace",
                )
            )
        value = _schema_value(schema)
        if strict_mode:
            value = _close_objects(value)
        with _xgrammar_errors():
            return Grammar(IndexRecipe.json_schema(value, whitespace=whitespace))

    @staticmethod
    def builtin_json_grammar() -> Grammar:
        """Any JSON object or array, nested without bound."""
        return Grammar(IndexRecipe.grammar(json_value_grammar()))

    @staticmethod
    def from_structural_tag(*args: Any, **kwargs: Any) -> Grammar:
        """The grammar of a structural tag, called as xgrammar's ``Grammar.from_structural_tag``
        is: one structural tag (object, JSON text or dict) or the legacy ``(tags, triggers)``."""
        with _xgrammar_errors():
            return Grammar(structural_tag_recipe(*args, **kwargs))

    def __str__(self) -> str:
        return self.recipe.source


class CompiledGrammar:
    """A compiled constraint over one tokenizer; made by :class:`GrammarCompiler`."""

    def __init__(self, recipe: IndexRecipe, index: TokenIndex, tokenizer_info: TokenizerInfo):
        self._recipe = recipe
        self._index = index
        self._info = tokenizer_info
        self._lock = threading.Lock()
        self._variants: dict[tuple[int, ...], TokenIndex] = {}
        self._full: dict[tuple[int, int], bool] = {}  # (index id, state) -> every token allowed

    def _allows_all(self, index: TokenIndex, state: int) -> bool:
        """Whether ``state`` allows every token (xgrammar's "no need to apply"), once per state."""
        key = (id(index), state)
        full = self._full.get(key)
        if full is None:
            full = _row_is_full(index.bitmask(state), index.vocab_size)
            self._full[key] = full
        return full

    @property
    def grammar(self) -> str:
        """The constraint's source: the regex, or the schema's canonical JSON text."""
        return self._recipe.source

    @property
    def tokenizer_info(self) -> TokenizerInfo:
        """The tokenizer it was compiled for."""
        return self._info

    @property
    def token_index(self) -> TokenIndex:
        """The guided index underneath."""
        return self._index

    @property
    def memory_size_bytes(self) -> int:
        """Bytes the index holds now (it grows as masks are computed)."""
        return self._index.memory_bytes()

    def _index_for_stops(self, stops: tuple[int, ...]) -> TokenIndex:
        if stops == tuple(sorted(self._index.eos_token_ids)):
            return self._index
        with self._lock:
            index = self._variants.get(stops)
        if index is None:
            vocab = self._info._with_stop_tokens(stops)
            with _xgrammar_errors():
                index = self._recipe.compile(vocab)
            with self._lock:
                index = self._variants.setdefault(stops, index)
        return index

    def serialize_json(self) -> str:
        """The recipe as JSON (the index rebuilds from it; masks recompute on demand)."""
        return json.dumps(
            {
                "__VERSION__": _SERIAL_VERSION,
                "recipe": json.loads(self._recipe.to_json(self._info.vocabulary.fingerprint)),
            }
        )

    @staticmethod
    def deserialize_json(json_str: str, tokenizer_info: TokenizerInfo) -> CompiledGrammar:
        """Rebuilds a grammar from :meth:`serialize_json` output, for the same vocabulary."""
        try:
            data = json.loads(json_str)
            version = data["__VERSION__"]
            recipe, fingerprint = IndexRecipe.from_json(json.dumps(data["recipe"]))
        except (ValueError, KeyError, TypeError) as e:
            _fail(f"not a serialized compiled grammar: {e}")
        if version != _SERIAL_VERSION:
            _fail(f"serialized by format {version!r}, this reads {_SERIAL_VERSION!r}")
        if fingerprint != tokenizer_info.vocabulary.fingerprint:
            _fail("the grammar was compiled for a different vocabulary")
        with _xgrammar_errors():
            index = recipe.compile(tokenizer_info.vocabulary)
        return CompiledGrammar(recipe, index, tokenizer_info)

    def __repr__(self) -> str:
        return f"CompiledGrammar({self._recipe.kind}={self._recipe.source[:60]!r})"


def _close_objects(node: Any, in_all_of: bool = False) -> Any:
    """The schema with xgrammar's strict mode spelled out: objects that declare ``properties``
    and arrays that declare ``prefixItems`` admit nothing undeclared unless they say so."""
    if isinstance(node, list):
        return [_close_objects(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
            out[key] = (
                {k: _close_objects(v) for k, v in value.items()}
                if isinstance(value, dict)
                else value
            )
        elif key in (
            "items",
            "additionalItems",
            "additionalProperties",
            "unevaluatedItems",
            "unevaluatedProperties",
            "contains",
            "propertyNames",
            "not",
            "if",
            "then",
            "else",
        ):
            out[key] = _close_objects(value)
        elif key in ("prefixItems", "anyOf", "oneOf"):
            out[key] = [_close_objects(x) for x in value] if isinstance(value, list) else value
        elif key == "allOf":
            branches = value if isinstance(value, list) else None
            out[key] = [_close_objects(x, True) for x in branches] if branches else value
        else:
            out[key] = value  # data (const, enum, default, ...) or a plain keyword
    if not in_all_of and "allOf" not in node:
        if "properties" in node and not (
            {"additionalProperties", "unevaluatedProperties", "patternProperties"} & node.keys()
        ):
            out["additionalProperties"] = False
        if "prefixItems" in node and not ({"items", "unevaluatedItems"} & node.keys()):
            out["items"] = False
    return out


def _legacy_item(item: Any) -> dict[str, Any]:
    """A legacy ``StructuralTagItem`` (or a mapping with its fields) as a ``tag`` format."""
    if isinstance(item, Mapping):
        begin, end = item.get("begin"), item.get("end")
        schema = item.get("schema", item.get("schema_"))
    else:
        begin, end = getattr(item, "begin", None), getattr(item, "end", None)
        schema = getattr(item, "schema_", getattr(item, "schema", None))
    if not isinstance(begin, str) or not isinstance(end, str) or schema is None:
        _fail(f"a structural tag item needs a begin, a schema and an end, got {item!r}")
    return {
        "type": "tag",
        "begin": begin,
        "content": {"type": "json_schema", "json_schema": _schema_value(schema)},
        "end": end,
    }


def _close_formats(node: Any) -> Any:
    """A structural tag with every ``json_schema`` format read in strict mode, as xgrammar reads
    them."""
    if isinstance(node, list):
        return [_close_formats(x) for x in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema" and "json_schema" in node:
        return {**node, "json_schema": _close_objects(_schema_value(node["json_schema"]))}
    return {k: _close_formats(v) for k, v in node.items()}


def structural_tag_recipe(*args: Any, **kwargs: Any) -> IndexRecipe:
    """The recipe of a structural tag given as xgrammar takes one: ``(structural_tag)`` (a
    pydantic ``StructuralTag``, JSON text or a dict, legacy ``structures`` included) or
    ``(tags, triggers)`` with ``StructuralTagItem``s. Schemas are read in xgrammar's strict mode
    with its whitespace, regexes in its dialect."""
    if "tags" in kwargs or "triggers" in kwargs or len(args) == 2:
        tags = kwargs.get("tags", args[0] if args else None)
        triggers = kwargs.get("triggers", args[1] if len(args) > 1 else None)
        if not isinstance(tags, Sequence) or not isinstance(triggers, Sequence):
            _fail("compile_structural_tag(tags, triggers) takes two lists")
        value: Any = {
            "type": "structural_tag",
            "format": {
                "type": "triggered_tags",
                "triggers": list(triggers),
                "tags": [_legacy_item(t) for t in tags],
            },
        }
    elif len(args) + len(kwargs) == 1:
        value = args[0] if args else kwargs.get("structural_tag")
        model_dump = getattr(value, "model_dump", None)
        if callable(model_dump):
            value = model_dump(mode="json", by_alias=True)
        elif isinstance(value, (str, bytes, bytearray)):
            try:
                value = json.loads(value)
            except ValueError as e:
                _fail(f"the structural tag is not valid JSON: {e}")
        if isinstance(value, Mapping) and "structures" in value:  # vLLM's legacy request
            structures, triggers = value["structures"], value.get("triggers")
            if not isinstance(structures, Sequence) or not isinstance(triggers, Sequence):
                _fail("a legacy structural tag has lists of structures and triggers")
            value = {
                "type": "structural_tag",
                "format": {
                    "type": "triggered_tags",
                    "triggers": list(triggers),
                    "tags": [_legacy_item(t) for t in structures],
                },
            }
    else:
        _fail("compile_structural_tag takes a structural tag, or tags and triggers")
    return IndexRecipe.structural_tag(
        _close_formats(value), whitespace=_JSON_WS + "*", dialect="xgrammar"
    )


def _schema_value(schema: Any) -> Any:
    if isinstance(schema, (str, bytes, bytearray)):
        try:
            return json.loads(schema)
        except ValueError as e:
            _fail(f"the JSON schema is not valid JSON: {e}")
    model_json_schema = getattr(schema, "model_json_schema", None)
    if callable(model_json_schema):  # a pydantic model class
        return model_json_schema()
    return schema


class GrammarCompiler:
    """Compiles constraints for one tokenizer, caching each by its source and options."""

    def __init__(
        self,
        tokenizer_info: TokenizerInfo,
        *,
        max_threads: int = 8,
        cache_enabled: bool = True,
        cache_limit_bytes: int = -1,
        enable_dynamic_compilation: bool = False,
    ) -> None:
        if not isinstance(tokenizer_info, TokenizerInfo):
            raise ValueError(
                "Please convert the tokenizer to TokenizerInfo before passing it to "
                "GrammarCompiler."
            )
        self._info = tokenizer_info
        self._limit = cache_limit_bytes
        self._cache: IndexCache | None = None
        if cache_enabled:
            budget = cache_limit_bytes if cache_limit_bytes > 0 else 2**62
            self._cache = IndexCache(tokenizer_info.vocabulary, max_bytes=budget)

    def _compile(self, recipe: IndexRecipe) -> CompiledGrammar:
        with _xgrammar_errors():
            if self._cache is not None:
                index = self._cache.get(recipe)
            else:
                index = recipe.compile(self._info.vocabulary)
        return CompiledGrammar(recipe, index, self._info)

    def compile_regex(self, regex: str) -> CompiledGrammar:
        """The grammar of ``regex`` (xgrammar's dialect, full match)."""
        return self._compile(IndexRecipe.regex(regex, dialect="xgrammar"))

    def compile_json_schema(
        self,
        schema: str | Mapping[str, Any] | Any,
        *,
        any_whitespace: bool = True,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        strict_mode: bool = True,
        max_whitespace_cnt: int | None = None,
        any_order: bool = False,
    ) -> CompiledGrammar:
        """The grammar of the JSON documents ``schema`` (text, dict or pydantic model) accepts."""
        return self._compile(
            Grammar.from_json_schema(
                schema,
                any_whitespace=any_whitespace,
                indent=indent,
                separators=separators,
                strict_mode=strict_mode,
                max_whitespace_cnt=max_whitespace_cnt,
                any_order=any_order,
            ).recipe
        )

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        """Any JSON object or array."""
        return self._compile(Grammar.builtin_json_grammar().recipe)

    def compile_grammar(
        self, grammar: str | Grammar, *, root_rule_name: str = "root"
    ) -> CompiledGrammar:
        """The grammar of EBNF text (rule ``root_rule_name`` first), or of a :class:`Grammar`."""
        if isinstance(grammar, Grammar):
            return self._compile(grammar.recipe)
        if not isinstance(grammar, str):
            _fail(f"compile_grammar takes EBNF text or a Grammar, got {type(grammar).__name__}")
        return self._compile(Grammar.from_ebnf(grammar, root_rule_name=root_rule_name).recipe)

    def compile_structural_tag(self, *args: Any, **kwargs: Any) -> CompiledGrammar:
        """The grammar of a structural tag: ``compile_structural_tag(structural_tag)`` (a
        ``StructuralTag``, its JSON text or a dict), or the legacy
        ``compile_structural_tag(tags, triggers)``."""
        return self._compile(Grammar.from_structural_tag(*args, **kwargs).recipe)

    def clear_cache(self) -> None:
        """Drops every cached grammar."""
        if self._cache is not None:
            self._cache.clear()

    def get_cache_size_bytes(self) -> int:
        """Bytes held by cached grammars beyond the vocabulary's shared trie."""
        return self._cache.memory_bytes() if self._cache is not None else 0

    @property
    def cache_limit_bytes(self) -> int:
        """The cache budget, -1 if unlimited."""
        return self._limit if self._limit > 0 else -1


# ---------------------------------------------------------------------------------------------
# Matching


def _row(bitmask: Any, index: int) -> npt.NDArray[np.int32]:
    """Row ``index`` of a CPU int32 buffer, as a numpy view."""
    row = bitmask[index]
    if hasattr(row, "numpy"):
        row = row.numpy()
    return np.asarray(row)


def _row_is_full(row: npt.NDArray[np.int32], vocab_size: int) -> bool:
    full, rest = divmod(vocab_size, 32)
    if not bool(np.all(row[:full] == -1)):
        return False
    if rest == 0:
        return True
    want = (1 << rest) - 1
    return (int(row[full]) & want) == want


class GrammarMatcher:
    """One request's position in a compiled grammar."""

    def __init__(
        self,
        compiled_grammar: CompiledGrammar,
        *,
        override_stop_tokens: int | Sequence[int] | None = None,
        terminate_without_stop_token: bool = False,
        max_rollback_tokens: int = -1,
        default_temperature: float | None = None,
    ) -> None:
        if not isinstance(compiled_grammar, CompiledGrammar):
            raise ValueError("The grammar should be compiled before passing it to GrammarMatcher.")
        if max_rollback_tokens != -1:
            warnings.warn(
                "max_rollback_tokens is deprecated. You don't need to set it and it's always "
                "unlimited (-1).",
                DeprecationWarning,
                stacklevel=2,
            )
        if isinstance(override_stop_tokens, int):
            override_stop_tokens = [override_stop_tokens]
        index = compiled_grammar.token_index
        if override_stop_tokens is not None:
            index = compiled_grammar._index_for_stops(tuple(sorted(set(override_stop_tokens))))
        self._compiled = compiled_grammar
        self._index = index
        self._guide = Guide(index, max_rollback=-1)
        self._stops = frozenset(index.eos_token_ids)
        self._terminate_without_stop = terminate_without_stop_token
        self._temperature = None if default_temperature is None else float(default_temperature)
        self._steps: list[int] = []  # tokens consumed per step, for rollback

    @classmethod
    def _forked(cls, other: GrammarMatcher) -> GrammarMatcher:
        out = cls.__new__(cls)
        out._compiled = other._compiled
        out._index = other._index
        out._guide = other._guide.copy()
        out._stops = other._stops
        out._terminate_without_stop = other._terminate_without_stop
        out._temperature = other._temperature
        out._steps = list(other._steps)
        return out

    @property
    def guide(self) -> Guide:
        """The guided guide underneath."""
        return self._guide

    def accept_token(self, token_id: int, *, debug_print: bool = False) -> bool:
        """Consumes ``token_id`` if the grammar allows it now; False otherwise (also after the
        stop token, for an out-of-range id, or a special token). With
        ``terminate_without_stop_token`` stop tokens are refused and a complete output may still
        grow, as in xgrammar."""
        if self._guide.is_terminated():
            return False
        if self._terminate_without_stop and token_id in self._stops:
            return False
        try:
            accepted = self._guide.accept_token(token_id)
        except GuidedError:
            return False
        if accepted:
            self._steps.append(1)
        return accepted

    def accept_string(self, input_str: str | bytes, *, debug_print: bool = False) -> bool:
        """Consumes ``input_str`` as one rollback step if the grammar allows it now."""
        if self._guide.is_terminated():
            return False
        data = input_str.encode("utf-8") if isinstance(input_str, str) else bytes(input_str)
        tokens = self._compiled.tokenizer_info._spell(data)
        if tokens is None:
            _fail(f"the vocabulary cannot spell {data!r} with its tokens")
        with _xgrammar_errors():
            accepted = self._guide.accept_tokens(tokens)
        if accepted:
            self._steps.append(len(tokens))
        return accepted

    def fill_next_token_bitmask(
        self, bitmask: Any, index: int = 0, *, debug_print: bool = False
    ) -> bool:
        """Writes the next-token mask into ``bitmask[index]`` (a CPU int32 tensor or array of
        width ``ceil(vocab_size / 32)``); returns whether it forbids anything."""
        if self._guide.is_terminated():
            _fail(
                "GrammarMatcher has terminated after accepting the stop token, but is trying to "
                "find the next token mask"
            )
        try:
            self._guide.fill_bitmask(bitmask, index)
        except GuidedError as e:
            raise _runtime_flavor(e) from None
        if self._terminate_without_stop:
            row = _row(bitmask, index)
            _clear_bits(row, self._stops)
            return not _row_is_full(row, self._index.vocab_size)
        return not self._compiled._allows_all(self._index, self._guide.state)

    def find_jump_forward_string(self) -> str:
        """The longest text every valid continuation starts with (whole characters only)."""
        if self._guide.is_terminated():
            _fail(
                "GrammarMatcher has terminated after accepting the stop token, but is trying to "
                "get the jump forward string"
            )
        with _xgrammar_errors():
            return complete_utf8(self._guide.forced_bytes())

    def find_jump_forward_tokens(self) -> list[int]:
        """Token ids spelling the forced continuation, longest tokens first; the last is left out
        if a longer token extends it. Empty once complete or terminated."""
        if self.is_completed():
            return []
        with _xgrammar_errors():
            forced = self._guide.forced_bytes()
        return self._compiled.tokenizer_info._jump_tokens(forced)

    def rollback(self, num_tokens: int = 1) -> None:
        """Undoes the last ``num_tokens`` steps (a string accepted at once is one step)."""
        if num_tokens < 0 or num_tokens > len(self._steps):
            _fail(
                f"Intended to rollback {num_tokens} tokens, but only the last {len(self._steps)} "
                "steps of history are saved"
            )
        if num_tokens == 0:
            return
        consumed = sum(self._steps[-num_tokens:])
        with _xgrammar_errors():
            self._guide.rollback(consumed)
        del self._steps[-num_tokens:]

    def is_terminated(self) -> bool:
        """Whether the stop token was accepted (or, with ``terminate_without_stop_token``,
        whether the output is complete)."""
        if self._terminate_without_stop:
            return self._guide.is_accepting()
        return self._guide.is_terminated()

    def is_completed(self) -> bool:
        """Whether the output so far is a complete match."""
        return self._guide.is_terminated() or self._guide.is_accepting()

    def reset(self) -> None:
        """Back to the start, history forgotten."""
        self._guide.reset()
        self._steps.clear()

    def fork(self) -> GrammarMatcher:
        """An independent matcher in the same state, with the same history."""
        return GrammarMatcher._forked(self)

    @property
    def max_rollback_tokens(self) -> int:
        """-1: rollback is unlimited."""
        return -1

    @property
    def stop_token_ids(self) -> list[int]:
        """The ids that end generation for this matcher."""
        return sorted(self._stops)

    @property
    def temperature(self) -> float | None:
        """The sampling temperature for the next token (regular grammars set none of their own,
        so this is ``default_temperature``)."""
        return self._temperature

    def __repr__(self) -> str:
        return f"GrammarMatcher(state={self._guide.state}, terminated={self.is_terminated()})"


def _clear_bits(row: npt.NDArray[np.int32], tokens: frozenset[int]) -> None:
    words = row.view(np.uint32)
    for t in tokens:
        words[t // 32] &= np.uint32(~(1 << (t % 32)) & 0xFFFFFFFF)


class BatchGrammarMatcher:
    """Fills the masks of many matchers in one call, rows in parallel with the GIL released."""

    def __init__(self, max_threads: int | Literal["auto"] = "auto") -> None:
        if max_threads == "auto":
            self._threads = max(1, (os.cpu_count() or 2) // 2)
        elif isinstance(max_threads, int) and max_threads >= 1:
            self._threads = max_threads
        else:
            raise ValueError(f"max_threads must be a positive int or 'auto', got {max_threads!r}")

    def batch_fill_next_token_bitmask(
        self,
        matchers: Sequence[GrammarMatcher],
        bitmask: Any,
        indices: Sequence[int] | None = None,
        debug_print: bool = False,
    ) -> None:
        """Row ``indices[i]`` (or ``i``) of ``bitmask`` receives matcher ``i``'s mask."""
        for m in matchers:
            if m._guide.is_terminated():
                _fail(
                    "GrammarMatcher has terminated after accepting the stop token, but is trying "
                    "to find the next token mask"
                )
        with _xgrammar_errors():
            _fill_batch(
                [m._guide for m in matchers],
                bitmask,
                None if indices is None else list(indices),
                threads=self._threads,
            )
        for i, m in enumerate(matchers):
            if m._terminate_without_stop:
                _clear_bits(_row(bitmask, i if indices is None else indices[i]), m._stops)

    @staticmethod
    def batch_fill_temperature(
        matchers: Sequence[GrammarMatcher],
        temperatures: Any,
        indices: Sequence[int] | None = None,
    ) -> None:
        """``temperatures[indices[i]]`` (or ``[i]``) receives matcher ``i``'s temperature, -1 if
        it has none."""
        if indices is not None and len(indices) != len(matchers):
            _fail(f"{len(indices)} indices for {len(matchers)} matchers")
        for i, m in enumerate(matchers):
            t = m.temperature
            temperatures[i if indices is None else indices[i]] = -1.0 if t is None else t

    @staticmethod
    def batch_accept_token(
        matchers: Sequence[GrammarMatcher], tokens: Sequence[int], debug_print: bool = False
    ) -> list[bool]:
        """Matcher ``i`` accepts ``tokens[i]``; whether each did."""
        if len(matchers) != len(tokens):
            _fail(f"{len(tokens)} tokens for {len(matchers)} matchers")
        return [m.accept_token(t) for m, t in zip(matchers, tokens)]

    @staticmethod
    def batch_accept_string(
        matchers: Sequence[GrammarMatcher],
        strings: Sequence[str | bytes],
        debug_print: bool = False,
    ) -> list[bool]:
        """Matcher ``i`` accepts ``strings[i]``; whether each did."""
        if len(matchers) != len(strings):
            _fail(f"{len(strings)} strings for {len(matchers)} matchers")
        return [m.accept_string(s) for m, s in zip(matchers, strings)]

    @staticmethod
    def batch_rollback(
        matchers: Sequence[GrammarMatcher], num_tokens: int | Sequence[int] = 1
    ) -> None:
        """Matcher ``i`` rolls back ``num_tokens`` (or ``num_tokens[i]``) steps."""
        counts = [num_tokens] * len(matchers) if isinstance(num_tokens, int) else list(num_tokens)
        if len(counts) != len(matchers):
            _fail(f"{len(counts)} rollback counts for {len(matchers)} matchers")
        for m, n in zip(matchers, counts):
            m.rollback(n)


# ---------------------------------------------------------------------------------------------
# Bitmask helpers (torch, imported when first used)


def get_bitmask_shape(batch_size: int, vocab_size: int) -> tuple[int, int]:
    """``(batch_size, ceil(vocab_size / 32))``."""
    return (batch_size, math.ceil(vocab_size / 32))


def _guided_bitmask() -> Any:
    """``guided.bitmask`` when this build has it, else None."""
    try:
        return importlib.import_module("guided.bitmask")
    except ImportError:
        return None


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> torch.Tensor:
    """An int32 CPU tensor ``[batch_size, ceil(vocab_size / 32)]`` with every bit set."""
    module = _guided_bitmask()
    if module is not None:
        tensor: torch.Tensor = module.allocate_token_bitmask(batch_size, vocab_size)
        return tensor
    import torch

    return torch.full(get_bitmask_shape(batch_size, vocab_size), -1, dtype=torch.int32)


def reset_token_bitmask(bitmask: torch.Tensor) -> None:
    """Sets every bit (every token allowed)."""
    bitmask.fill_(-1)


_BACKENDS = ("auto", "cpu", "cuda", "triton", "torch_compile", "torch_native")


def apply_token_bitmask_inplace(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    *,
    vocab_size: int | None = None,
    indices: Sequence[int] | None = None,
    backend: Literal["auto", "cpu", "cuda", "triton", "torch_compile", "torch_native"] = "auto",
) -> None:
    """Sets ``logits[i, t]`` to ``-inf`` where bit ``t`` of ``bitmask[i]`` is 0, for every row
    ``i`` (or those in ``indices``), over the first ``vocab_size`` tokens (default: as many as
    both cover). ``backend`` is accepted for compatibility; guided picks its kernel by device."""
    if backend not in _BACKENDS:
        raise ValueError(f"Unknown backend: {backend}. It should be one of {list(_BACKENDS)}")
    if bitmask.device != logits.device:
        raise ValueError(
            "logits and bitmask should be on the same device. "
            f"But got logits.device: {logits.device}, bitmask.device: {bitmask.device}"
        )
    if vocab_size is None and bitmask.shape[-1] * 32 < logits.shape[-1]:
        warnings.warn(
            f"The bitmask covers only {bitmask.shape[-1] * 32} tokens but logits have "
            f"{logits.shape[-1]}, so logits[..., {bitmask.shape[-1] * 32}:] are left unmasked. "
            "Allocate the bitmask with the full vocab size, or pass vocab_size explicitly.",
            stacklevel=2,
        )
    module = _guided_bitmask()
    if module is not None:
        width = min(logits.shape[-1], bitmask.shape[-1] * 32) if vocab_size is None else vocab_size
        module.apply_token_bitmask_inplace(
            logits,
            bitmask,
            indices=None if indices is None else list(indices),
            vocab_size=width,
        )
        return
    _apply_bitmask_torch(logits, bitmask, vocab_size, indices)


def _apply_bitmask_torch(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    vocab_size: int | None,
    indices: Sequence[int] | None,
) -> None:
    """Plain torch masking, for builds without ``guided.bitmask``."""
    import torch

    if bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must be int32, got {bitmask.dtype}")
    rows_logits = logits.unsqueeze(0) if logits.dim() == 1 else logits
    rows_mask = bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask
    if rows_logits.dim() != 2 or rows_mask.dim() != 2:
        raise ValueError("logits and bitmask must be 1-D or 2-D")
    width = (
        min(rows_logits.shape[-1], rows_mask.shape[-1] * 32) if vocab_size is None else vocab_size
    )
    if width > rows_logits.shape[-1] or math.ceil(width / 32) > rows_mask.shape[-1]:
        raise ValueError(
            f"vocab_size {width} exceeds the logits ({rows_logits.shape[-1]}) or the bitmask "
            f"({rows_mask.shape[-1] * 32} tokens)"
        )
    if indices is None:
        if rows_logits.shape[0] != rows_mask.shape[0]:
            raise ValueError(
                f"logits have {rows_logits.shape[0]} rows and the bitmask {rows_mask.shape[0]}"
            )
        rows = torch.arange(rows_logits.shape[0], device=logits.device)
    else:
        rows = torch.as_tensor(list(indices), dtype=torch.long, device=logits.device)
    words = rows_mask.index_select(0, rows)[:, : math.ceil(width / 32)]
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    allowed = ((words.unsqueeze(-1) >> shifts) & 1).bool().reshape(rows.numel(), -1)[:, :width]
    view = rows_logits[:, :width]
    masked = view.index_select(0, rows).masked_fill(~allowed, float("-inf"))
    view.index_copy_(0, rows, masked)


def __getattr__(name: str) -> Any:
    if name == "bitmask_dtype":  # torch.int32, without importing torch on module import
        import torch

        return torch.int32
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
