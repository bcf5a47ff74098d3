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
from dataclasses import dataclass
from typing import Any

import guided

#: (item separator, key separator, ensure_ascii) of each serialization tried.
STYLES: tuple[tuple[str, str, bool], ...] = (
    (", ", ": ", True),
    (",", ":", True),
    (", ", ": ", False),
)

#: Objects with more members than this are tried in their own order only.
MAX_PERMUTED_MEMBERS = 10


@dataclass
class Matcher:
    """Steps a DFA over bytes from sets of states."""

    table: list[list[int]]
    accepting: list[bool]

    @classmethod
    def of(cls, dfa: guided.DFA) -> Matcher:
        return cls(dfa.table.tolist(), dfa.accepting.tolist())

    def feed(self, states: frozenset[int], data: bytes) -> frozenset[int]:
        out = set()
        table = self.table
        for s in states:
            for b in data:
                s = table[s][b]
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
        item_sep, key_sep, ascii_only = style
        if isinstance(value, dict):
            states = self.feed(states, b"{")
            keys = list(value)
            if not keys:
                return self.feed(states, b"}")
            orders: dict[frozenset[str], frozenset[int]] = {frozenset(): states}
            if len(keys) > MAX_PERMUTED_MEMBERS:
                cur = states
                for i, k in enumerate(keys):
                    head = (
                        (item_sep if i else "") + json.dumps(k, ensure_ascii=ascii_only) + key_sep
                    )
                    cur = self.emit(value[k], self.feed(cur, head.encode()), style)
                return self.feed(cur, b"}")
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
                orders = nxt
                if not orders:
                    return frozenset()
            return self.feed(orders.get(frozenset(keys), frozenset()), b"}")
        if isinstance(value, list):
            states = self.feed(states, b"[")
            for i, x in enumerate(value):
                if i:
                    states = self.feed(states, item_sep.encode())
                states = self.emit(x, states, style)
            return self.feed(states, b"]")
        text = json.dumps(value, ensure_ascii=ascii_only)
        return self.feed(states, text.encode())

    def accepts(self, value: Any, style: tuple[str, str, bool]) -> bool:
        """Whether some member order of ``value``, written in ``style``, is accepted."""
        return any(self.accepting[s] for s in self.emit(value, frozenset([1]), style))


def outcome(matcher: Matcher, value: Any, valid: bool) -> str | None:
    """``None`` when the DFA agrees with the label in every style, else what went wrong."""
    for style in STYLES:
        got = matcher.accepts(value, style)
        if got != valid:
            wrong = "valid instance rejected" if valid else "invalid instance accepted"
            return f"{wrong} in style {style}"
    return None
