"""Matching JSON instances against a schema's DFA, whatever the order of their members.

A schema's language fixes the order of object members (the declared order, see
``guided.json_schema_to_regex``). Test instances come in any order, so the harness asks the DFA
directly whether *some* ordering of every object's members, serialized the way ``json.dumps``
does, is accepted: a dynamic program over the sets of DFA states reachable after each subset of
an object's members. That is the right question for both halves of the oracle: a valid instance
must be accepted in (at least) its declared order, and an invalid instance must be rejected in
every order, a stronger check than any single ordering.

Three serializations are tried: ``json.dumps(x)``, ``json.dumps(x, separators=(",", ":"))`` and
``json.dumps(x, ensure_ascii=False)``; they differ in whitespace and in how non-ASCII characters
are written.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from jsonschema import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
)
from jsonschema.protocols import Validator

import guided
from guided._canonical import declared_reorder

#: Each JSON-Schema-Test-Suite draft folder's validator, oldest first.
DRAFTS: dict[str, type[Validator]] = {
    "draft4": Draft4Validator,
    "draft6": Draft6Validator,
    "draft7": Draft7Validator,
    "draft2019-09": Draft201909Validator,
    "draft2020-12": Draft202012Validator,
}

#: (item separator, key separator, ensure_ascii) of each serialization tried.
STYLES: tuple[tuple[str, str, bool], ...] = (
    (", ", ": ", True),
    (",", ":", True),
    (", ", ": ", False),
)

#: The member-order search explores only the orders the DFA can follow (a declared order leaves
#: about one at each step); past this many live prefixes (undeclared members in any order) an
#: object is tried in its own order only.
MAX_ORDER_PREFIXES = 2048


class Automaton(Protocol):
    """What the matcher steps: a DFA, or a token index over single-byte tokens."""

    def next_state(self, state: int, byte: int, /) -> int: ...


class Accepting(Protocol):
    def __getitem__(self, state: int, /) -> bool: ...


class IndexAutomaton:
    """A token index over the 256 single-byte tokens, read like a DFA: its automaton (lazy, and
    for a recursive schema a pushdown one) grows as the matcher visits it."""

    def __init__(self, index: guided.TokenIndex) -> None:
        self.index = index

    def next_state(self, state: int, byte: int) -> int:
        return self.index.next_state(state, byte)

    def __getitem__(self, state: int) -> bool:
        return self.index.is_accepting(state)


#: Every single byte as a token, and EOS.
BYTE_VOCAB = guided.Vocabulary([bytes([b]) for b in range(256)] + [None], eos_token_ids=[256])


@dataclass
class Matcher:
    """Steps a DFA over bytes from sets of states."""

    dfa: Automaton
    accepting: Accepting
    #: (id of a value, its state set) -> states after it, for one ``accepts`` call: the member-order
    #: search writes the same value from the same states many times.
    memo: dict[tuple[int, frozenset[int]], frozenset[int]]
    #: Write non-integral numbers in plain decimal (``0.0001``), never with an exponent.
    plain: bool = False

    @classmethod
    def of(cls, dfa: guided.DFA) -> Matcher:
        return cls(dfa, dfa.accepting.tolist(), {})

    @classmethod
    def of_index(cls, index: guided.TokenIndex) -> Matcher:
        automaton = IndexAutomaton(index)
        return cls(automaton, automaton, {})

    def feed(self, states: frozenset[int], data: bytes) -> frozenset[int]:
        out = set()
        step = self.dfa.next_state
        for s in states:
            for b in data:
                s = step(s, b)
                if s == 0:
                    break
            else:
                out.add(s)
        return frozenset(out)

    def emit(
        self, value: Any, states: frozenset[int], style: tuple[str, str, bool]
    ) -> frozenset[int]:
        """States reachable after writing ``value`` (members in any order) from ``states``."""
        if not states:
            return states
        if isinstance(value, (dict, list)):
            key = (id(value), states)
            hit = self.memo.get(key)
            if hit is None:
                hit = self.memo[key] = self._emit_container(value, states, style)
            return hit
        if self.plain and isinstance(value, float) and math.isfinite(value):
            text = plain_decimal(value)
        else:
            text = json.dumps(value, ensure_ascii=style[2])
        return self.feed(states, text.encode())

    def _emit_container(
        self,
        value: dict[str, Any] | list[Any],
        states: frozenset[int],
        style: tuple[str, str, bool],
    ) -> frozenset[int]:
        item_sep, key_sep, ascii_only = style
        if isinstance(value, dict):
            states = self.feed(states, b"{")
            keys = list(value)
            if not keys:
                return self.feed(states, b"}")
            orders: dict[frozenset[str], frozenset[int]] = {frozenset(): states}
            for _ in keys:
                nxt: dict[frozenset[str], frozenset[int]] = {}
                for used, sts in orders.items():
                    for k in keys:
                        if k in used:
                            continue
                        head = (
                            (item_sep if used else "")
                            + json.dumps(k, ensure_ascii=ascii_only)
                            + key_sep
                        )
                        after = self.emit(value[k], self.feed(sts, head.encode()), style)
                        if after:
                            key = used | {k}
                            nxt[key] = nxt.get(key, frozenset()) | after
                if len(nxt) > MAX_ORDER_PREFIXES:
                    return self._in_own_order(value, states, style)
                orders = nxt
                if not orders:
                    return frozenset()
            return self.feed(orders.get(frozenset(keys), frozenset()), b"}")
        states = self.feed(states, b"[")
        for i, x in enumerate(value):
            if i:
                states = self.feed(states, item_sep.encode())
            states = self.emit(x, states, style)
        return self.feed(states, b"]")

    def _in_own_order(
        self, value: dict[str, Any], states: frozenset[int], style: tuple[str, str, bool]
    ) -> frozenset[int]:
        """States after the members of ``value`` in its own order (``states`` is after ``{``)."""
        item_sep, key_sep, ascii_only = style
        for i, k in enumerate(value):
            head = (item_sep if i else "") + json.dumps(k, ensure_ascii=ascii_only) + key_sep
            states = self.emit(value[k], self.feed(states, head.encode()), style)
        return self.feed(states, b"}")

    def accepts(self, value: Any, style: tuple[str, str, bool], *, plain: bool = False) -> bool:
        """Whether some member order of ``value``, written in ``style``, is accepted; ``plain``
        writes numbers without exponents (the only spelling where ``multipleOf`` or an integer type
        may apply, see ``json_schema::layout``)."""
        self.memo.clear()
        self.plain = plain
        return any(self.accepting[s] for s in self.emit(value, frozenset([1]), style))


def plain_decimal(x: float) -> str:
    """The shortest round-tripping digits of ``x`` in positional notation (``5e-324`` becomes
    ``0.000…005``)."""
    text = format(Decimal(repr(x)), "f")
    return text


def compile_matcher(schema: Any, **options: Any) -> Matcher | None:
    """The matcher of ``schema``'s DFA (``guided._lib.schema_dfa`` with ``options``), or ``None``
    when guided refuses the schema with one of its typed errors, the only refusal exact-or-error
    allows. Any other exception propagates: it is a bug."""
    try:
        return Matcher.of(guided._lib.schema_dfa(json.dumps(schema), **options))
    except (guided.UnsupportedSchemaError, guided.SizeLimitError):
        return None


def compile_index_matcher(schema: Any, **options: Any) -> Matcher | None:
    """The matcher of ``schema``'s token index (``TokenIndex.from_json_schema`` with
    ``options``), the path an engine takes: recursion stays recursion there. ``None`` on a typed
    refusal, as in :func:`compile_matcher`."""
    try:
        return Matcher.of_index(
            guided.TokenIndex.from_json_schema(json.dumps(schema), BYTE_VOCAB, **options)
        )
    except (guided.UnsupportedSchemaError, guided.SizeLimitError):
        return None


def outcome(matcher: Matcher, value: Any, valid: bool, schema: Any = None) -> str | None:
    """``None`` when the DFA agrees with the label in every style, else what went wrong. With the
    ``schema``, a valid instance is first tried with its members in the declared order, the one
    order the search cannot find when an object has many optional members."""
    for style in STYLES:
        got = matcher.accepts(value, style)
        if valid and not got and schema is not None:
            got = matcher.accepts(declared_reorder(value, schema), style)
        if got != valid:
            wrong = "valid instance rejected" if valid else "invalid instance accepted"
            return f"{wrong} in style {style}"
    return None
