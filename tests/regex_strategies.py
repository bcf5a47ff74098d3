"""Hypothesis strategies for patterns, shared by the regex, index and shim tests.

Each generated fragment carries its text and a way to draw a string it probably matches; an
oracle (Python's `re`, or the peer a shim stands in for), never the generator, decides what
actually matches. ``patterns(dialect)`` keeps to the constructs a dialect reads: xgrammar has no
flags, no ``(?P<``, no ``{,n}``, and no ``^`` (it drops one in mid-pattern, a listed departure);
the Rust ``regex`` crate has no ``{,n}``, and gets no anchors, since outlines-core builds no
automaton for a pattern with one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from hypothesis import strategies as st

ALPHABET = [*"abcABC012 _-\n\t.*+?()[]{}|^$\\/é", "α", "€", "😀", "\x00", "\x7f", "ÿ"]
SPECIALS = set(".^$*+?{}[]\\|()")


Gen = Callable[[st.DrawFn], str]


@dataclass(frozen=True)
class Node:
    """A pattern fragment: its text, whether a quantifier may follow it directly, and a way to
    draw a string it (probably) matches. The oracle, not the generator, decides what matches."""

    text: str
    atom: bool
    gen: Gen


def escape_char(c: str, draw_style: int) -> str:
    """One character as a pattern would spell it, in one of several equivalent ways."""
    cp = ord(c)
    if c in SPECIALS:
        return "\\" + c
    if c == "\n":
        return "\\n" if draw_style % 2 else "\n"
    if c == "\t":
        return "\\t"
    if draw_style == 1 and cp < 0x100:
        return f"\\x{cp:02x}"
    if draw_style == 2 and cp < 0x10000:
        return f"\\u{cp:04x}"
    if draw_style == 3:
        return f"\\U{cp:08x}"
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    return c


def class_char(c: str) -> str:
    if c in "]\\^-[":
        return "\\" + c
    if c == "\n":
        return "\\n"
    if c == "\t":
        return "\\t"
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02x}"
    return c


chars = st.sampled_from(ALPHABET)


def single_char_node(text: str) -> Node:
    """An atom matching one character; its generator picks among the alphabet's members."""
    members = [c for c in ALPHABET if re.fullmatch(text, c, re.ASCII)]

    def gen(draw: st.DrawFn) -> str:
        return draw(st.sampled_from(members)) if members else ""

    return Node(text, True, gen)


@st.composite
def literal(draw: st.DrawFn) -> Node:
    c = draw(chars)
    text = escape_char(c, draw(st.integers(0, 4)))
    return Node(text, True, lambda _d: c)


@st.composite
def char_class(draw: st.DrawFn) -> Node:
    items = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 2))
        if kind == 0:
            items.append(class_char(draw(chars)))
        elif kind == 1:
            a, b = sorted([draw(chars), draw(chars)])
            items.append(f"{class_char(a)}-{class_char(b)}")
        else:
            items.append("\\" + draw(st.sampled_from("dwsDWS")))
    negated = "^" if draw(st.booleans()) else ""
    return single_char_node(f"[{negated}{''.join(items)}]")


def atoms(dialect: str) -> st.SearchStrategy[Node]:
    choices = [
        literal(),
        literal(),
        char_class(),
        st.just(single_char_node(".")),
        st.sampled_from("dwsDWS").map(lambda c: single_char_node("\\" + c)),
    ]
    if dialect == "python":
        choices.append(st.just(Node("^", False, lambda _d: "")))
    return st.one_of(*choices)


GROUPS = {
    "python": ["(", "(?:", "(?P<g>", "(?i:", "(?s:"],
    "rust": ["(", "(?:", "(?P<g>", "(?i:", "(?s:"],
    "xgrammar": ["(", "(?:", "(?<g>"],
}


def group(inner: Node, prefix: str) -> Node:
    return Node(f"{prefix}{inner.text})", True, inner.gen)


def concat(xs: list[Node]) -> Node:
    return Node("".join(x.text for x in xs), False, lambda d: "".join(x.gen(d) for x in xs))


def alternation(xs: list[Node]) -> Node:
    def gen(draw: st.DrawFn) -> str:
        return draw(st.sampled_from(xs)).gen(draw)

    return Node("(?:" + "|".join(x.text for x in xs) + ")", True, gen)


@st.composite
def quantified(draw: st.DrawFn, sub: Node, dialect: str) -> Node:
    if not sub.atom:
        sub = Node(f"(?:{sub.text})", True, sub.gen)
    m = draw(st.integers(0, 3))
    n = m + draw(st.integers(0, 3))
    forms = [
        ("*", 0, 3),
        ("+", 1, 3),
        ("?", 0, 1),
        (f"{{{m}}}", m, m),
        (f"{{{m},}}", m, m + 2),
        (f"{{{m},{n}}}", m, n),
    ]
    if dialect == "python":
        forms.append((f"{{,{n}}}", 0, n))
    q, lo, hi = draw(st.sampled_from(forms))
    lazy = "?" if draw(st.booleans()) else ""

    def gen(d: st.DrawFn) -> str:
        return "".join(sub.gen(d) for _ in range(d(st.integers(lo, hi))))

    return Node(sub.text + q + lazy, False, gen)


@cache
def nodes(dialect: str) -> st.SearchStrategy[Node]:
    def extend(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
        return st.one_of(
            st.lists(children, min_size=2, max_size=4).map(concat),
            st.lists(children, min_size=2, max_size=3).map(alternation),
            st.tuples(children, st.sampled_from(GROUPS[dialect])).map(lambda t: group(*t)),
            children.flatmap(lambda c: quantified(c, dialect)),
        )

    return st.recursive(atoms(dialect), extend, max_leaves=12)


@st.composite
def patterns(draw: st.DrawFn, dialect: str = "python") -> tuple[str, Node]:
    """A pattern in ``dialect`` ("python", "xgrammar" or "rust") and a node that draws texts."""
    branches = [draw(nodes(dialect)) for _ in range(draw(st.integers(1, 2)))]
    texts = []
    for b in branches:
        # `$` only at the end of a top-level branch: Python's `$` also matches before a final
        # newline, which is not a full-match assertion about the end of the text.
        # outlines-core (the Rust dialect's peer) builds no automaton for a pattern with an anchor.
        dollar = dialect != "rust" and draw(st.integers(0, 4)) == 0
        texts.append(b.text + ("$" if dollar else ""))
    flags = ""
    if dialect != "xgrammar":
        flags = draw(st.sampled_from(["", "", "", "(?i)", "(?s)", "(?is)"]))
    return flags + "|".join(texts), alternation(branches)


def oracle(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern, re.ASCII)
    except re.error:
        return None
