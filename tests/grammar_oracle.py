"""An oracle for GBNF grammars that knows nothing of guided: a small reader of the syntax, a
mechanical translation into a Lark grammar parsed by Lark's Earley parser, and random derivations.

The reader is written from the syntax's description (llama.cpp's grammars/README.md), not from
guided's Rust front end, so a misreading in one is caught by the other. Line breaks are white
space and a rule starts where a name is followed by ``::=``; that is the only liberty taken.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Union

from lark import Lark

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "b": "\b"}
ESCAPES |= {"e": "\x1b", "0": "\0"}


@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Cls:
    negated: bool
    ranges: tuple[tuple[int, int], ...]

    def contains(self, c: str) -> bool:
        inside = any(lo <= ord(c) <= hi for lo, hi in self.ranges)
        return inside != self.negated


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Rep:
    node: Node
    lo: int
    hi: int | None


Node = Union[Lit, Cls, Ref, Seq, Alt, Rep]
ANY = Cls(True, ())
TOKEN = re.compile(
    r"""(?P<space>\s+|\#[^\n]*)|(?P<define>::=)|(?P<name>[A-Za-z0-9_-]+)|(?P<string>"(?:\\.|[^"\\])*")
    |(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<op>[().|*+?])|(?P<count>\{\s*\d*\s*(?:,\s*\d*\s*)?\})""",
    re.X | re.S,
)


def unescape(body: str) -> list[str]:
    """The characters of a literal's or class's body, escapes decoded."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width:
            out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        else:
            out.append(ESCAPES.get(e, e))
            i += 2
    return out


def parse_class(text: str) -> Cls:
    body = text[1:-1]
    negated = body.startswith("^")
    chars = unescape(body[1:] if negated else body)
    ranges, i = [], 0
    while i < len(chars):
        if i + 2 < len(chars) and chars[i + 1] == "-":
            ranges.append((ord(chars[i]), ord(chars[i + 2])))
            i += 3
        else:
            ranges.append((ord(chars[i]), ord(chars[i])))
            i += 1
    return Cls(negated, tuple(ranges))


class Grammar:
    """A GBNF grammar: its rules, its Lark translation, and derivations."""

    def __init__(self, text: str) -> None:
        tokens = [(m.lastgroup, m.group()) for m in TOKEN.finditer(text) if m.lastgroup != "space"]
        self.tokens = tokens
        self.pos = 0
        self.rules: dict[str, Node] = {}
        while self.pos < len(tokens):
            kind, name = tokens[self.pos]
            assert kind == "name" and tokens[self.pos + 1][0] == "define", tokens[self.pos]
            self.pos += 2
            self.rules[name] = self.alternation()

    def peek(self, offset: int = 0) -> tuple[str | None, str]:
        i = self.pos + offset
        return self.tokens[i] if i < len(self.tokens) else (None, "")

    def alternation(self) -> Node:
        items = [self.sequence()]
        while self.peek() == ("op", "|"):
            self.pos += 1
            items.append(self.sequence())
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def sequence(self) -> Node:
        items: list[Node] = []
        while True:
            kind, value = self.peek()
            if kind is None or value in ("|", ")"):
                break
            if kind == "name" and self.peek(1)[0] == "define":
                break
            self.pos += 1
            node: Node
            if kind == "string":
                node = Lit("".join(unescape(value[1:-1])))
            elif kind == "cls":
                node = parse_class(value)
            elif kind == "name":
                node = Ref(value)
            elif value == ".":
                node = ANY
            else:
                assert value == "(", value
                node = self.alternation()
                assert self.peek() == ("op", ")")
                self.pos += 1
            while self.peek()[1] in ("*", "+", "?") or self.peek()[0] == "count":
                op = self.peek()[1]
                self.pos += 1
                if op in ("*", "+", "?"):
                    node = Rep(node, 1 if op == "+" else 0, 1 if op == "?" else None)
                else:
                    lo_text, _, hi_text = op[1:-1].replace(" ", "").partition(",")
                    lo = int(lo_text or 0)
                    hi = (int(hi_text) if hi_text else None) if "," in op else lo
                    node = Rep(node, lo, hi)
            items.append(node)
        return items[0] if len(items) == 1 else Seq(tuple(items))

    # --- Lark ------------------------------------------------------------------------------

    @staticmethod
    def lark_name(name: str) -> str:
        return "r_" + name.lower().replace("-", "_")

    def lark(self, node: Node) -> str:
        if isinstance(node, Lit):
            return _lark_literal(node.text) if node.text else "_e"
        if isinstance(node, Cls):
            inner = "".join(f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in node.ranges)
            if node.negated and not node.ranges:
                return "/(?s:.)/"
            return f"/[{'^' if node.negated else ''}{inner}]/"
        if isinstance(node, Ref):
            return self.lark_name(node.name)
        if isinstance(node, Seq):
            return "(" + " ".join(self.lark(i) for i in node.items) + ")" if node.items else "_e"
        if isinstance(node, Alt):
            return "(" + " | ".join(self.lark(i) for i in node.items) + ")"
        sub = self.lark(node.node)
        if (node.lo, node.hi) == (0, None):
            return f"({sub})*"
        if (node.lo, node.hi) == (1, None):
            return f"({sub})+"
        if (node.lo, node.hi) == (0, 1):
            return f"({sub})?"
        if node.hi is None:
            return f"(({sub}) ~ {node.lo} ({sub})*)"
        if node.hi == 0:
            return "_e"
        return f"(({sub}) ~ {node.lo}..{node.hi})" if node.lo else f"((({sub}) ~ 1..{node.hi})?)"

    @cached_property
    def parser(self) -> Lark:
        lines = ["_e: "]  # the empty string
        lines += [f"{self.lark_name(name)}: {self.lark(node)}" for name, node in self.rules.items()]
        return Lark(
            "\n".join(lines), start=self.lark_name("root"), parser="earley", lexer="dynamic"
        )

    def accepts(self, text: str) -> bool:
        try:
            self.parser.parse(text)
        except Exception:
            return False
        return True

    # --- derivations -------------------------------------------------------------------------

    @cached_property
    def rule_cost(self) -> dict[str, float]:
        """The length of each rule's shortest derivation (a fixpoint)."""
        cost = {name: float("inf") for name in self.rules}
        changed = True
        while changed:
            changed = False
            for name, node in self.rules.items():
                c = self.cost(node, cost)
                if c < cost[name]:
                    cost[name] = c
                    changed = True
        return cost

    def cost(self, node: Node, rules: dict[str, float] | None = None) -> float:
        rules = self.rule_cost if rules is None else rules
        if isinstance(node, Lit):
            return len(node.text)
        if isinstance(node, Cls):
            return 1
        if isinstance(node, Ref):
            return rules[node.name]
        if isinstance(node, Seq):
            return sum(self.cost(i, rules) for i in node.items)
        if isinstance(node, Alt):
            return min(self.cost(i, rules) for i in node.items)
        return node.lo * self.cost(node.node, rules)

    def derive(self, rng: random.Random, budget: int = 60) -> str:
        """A random text of the root rule, steering to short branches once ``budget`` runs out."""
        out: list[str] = []
        self._derive(self.rules["root"], rng, [budget], out, 0)
        return "".join(out)

    def _derive(
        self, node: Node, rng: random.Random, budget: list[int], out: list[str], depth: int
    ) -> None:
        tight = budget[0] <= 0 or depth > 40
        if isinstance(node, Lit):
            out.append(node.text)
            budget[0] -= len(node.text)
        elif isinstance(node, Cls):
            out.append(sample_char(node, rng))
            budget[0] -= 1
        elif isinstance(node, Ref):
            self._derive(self.rules[node.name], rng, budget, out, depth + 1)
        elif isinstance(node, Seq):
            for item in node.items:
                self._derive(item, rng, budget, out, depth)
        elif isinstance(node, Alt):
            finite = [i for i in node.items if self.cost(i) < float("inf")]
            pick = min(finite, key=self.cost) if tight else rng.choice(finite)
            self._derive(pick, rng, budget, out, depth)
        else:
            hi = node.lo + 3 if node.hi is None else node.hi
            n = node.lo if tight else rng.randint(node.lo, min(hi, node.lo + 3))
            for _ in range(n):
                self._derive(node.node, rng, budget, out, depth)


ALPHABET = [chr(c) for c in range(0x20, 0x7F)] + list("\n\té€😀ぁァ一、ü")


def sample_char(cls: Cls, rng: random.Random) -> str:
    if not cls.negated:
        lo, hi = rng.choice(cls.ranges)
        return chr(rng.randint(lo, min(hi, lo + 200)))
    members = [c for c in ALPHABET if cls.contains(c)]
    return rng.choice(members)


def _lark_literal(text: str) -> str:
    escaped = "".join(
        c if c.isalnum() or c in " !#$%&'()*+,-./:;<=>?@[]^_`{|}~" else f"\\U{ord(c):08x}"
        for c in text
    )
    return f'"{escaped}"'


def _class_char(code: int) -> str:
    """One class member for a Lark regex, which decodes escapes like ``\\U...`` itself before
    the regex engine sees them: the class syntax characters stay escaped, the rest go raw."""
    c = chr(code)
    if c in "\\]^-[/":
        return "\\" + c
    return c if c.isprintable() and not c.isspace() else f"\\U{code:08x}"
