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

    # --- Earley ------------------------------------------------------------------------------

    @cached_property
    def bnf(self) -> Bnf:
        return Bnf(self.rules)

    def chart(self) -> Chart:
        """The chart before any character, from which continuations are tried."""
        return Chart.start(self.bnf)

    def viable(self, text: str) -> bool:
        """Whether some string extends ``text`` into the language."""
        return self.chart().extend(text) is not None

    def recognizes(self, text: str) -> bool:
        """Whether ``text`` is in the language (the Earley reading of ``accepts``)."""
        chart = self.chart().extend(text)
        return chart is not None and chart.accepts


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


# --- a character-level Earley recognizer -------------------------------------------------------

Symbol = Union[int, str, Cls]  # a nonterminal, one literal character, or a class of characters
Item = tuple[int, int, int]  # (production, dot, origin)


class Bnf:
    """The rules as plain BNF productions over single-character terminals.

    Repetitions and groups become helper nonterminals; productions that use a nonterminal with no
    finite derivation are dropped, so every item an Earley chart holds can still be completed and
    a non-empty column means a viable prefix.
    """

    def __init__(self, rules: dict[str, Node]) -> None:
        self.rules = rules
        self.ids = {name: i for i, name in enumerate(rules)}
        self.count = len(rules)
        self.helpers: dict[tuple[str, Node, int], int] = {}
        found: list[tuple[int, tuple[Symbol, ...]]] = []
        self.found = found
        for name, node in rules.items():
            found.append((self.ids[name], tuple(self.symbols(node))))
        productive: set[int] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in found:
                if lhs not in productive and all(
                    not isinstance(s, int) or s in productive for s in rhs
                ):
                    productive.add(lhs)
                    changed = True
        self.productions = [
            (lhs, rhs)
            for lhs, rhs in found
            if lhs in productive and all(not isinstance(s, int) or s in productive for s in rhs)
        ]
        self.by_lhs: dict[int, list[int]] = {}
        for i, (lhs, _) in enumerate(self.productions):
            self.by_lhs.setdefault(lhs, []).append(i)
        self.nullable: set[int] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.productions:
                if lhs not in self.nullable and all(s in self.nullable for s in rhs):
                    self.nullable.add(lhs)
                    changed = True
        self.root = self.ids["root"]

    def helper(self, key: tuple[str, Node, int], bodies: list[list[Symbol]]) -> int:
        if key not in self.helpers:
            self.helpers[key] = self.count
            self.count += 1
            self.found.extend((self.helpers[key], tuple(b)) for b in bodies)
        return self.helpers[key]

    def symbols(self, node: Node) -> list[Symbol]:
        if isinstance(node, Lit):
            return list(node.text)
        if isinstance(node, Cls):
            return [node]
        if isinstance(node, Ref):
            return [self.ids[node.name]]
        if isinstance(node, Seq):
            return [s for item in node.items for s in self.symbols(item)]
        if isinstance(node, Alt):
            return [self.helper(("alt", node, 0), [self.symbols(item) for item in node.items])]
        once = self.symbols(node.node)
        if node.hi is None:
            key = ("star", node.node, 0)
            if key not in self.helpers:
                star = self.helper(key, [[]])
                self.found.append((star, (*once, star)))
            return once * node.lo + [self.helpers[key]]
        # at most k more copies, nested (``x (x (x)?)?)?``) so that no text has two derivations
        tail: list[Symbol] = []
        for k in range(1, node.hi - node.lo + 1):
            tail = [self.helper(("opt", node.node, k), [[], once + tail])]
        return once * node.lo + tail


class Chart:
    """An Earley chart after some text. Charts are persistent: ``extend`` returns a new chart and
    remembers it, so continuations of one prefix share their common prefixes' columns."""

    def __init__(
        self,
        bnf: Bnf,
        columns: tuple[dict[int, list[Item]], ...],
        scanning: list[Item],
        accepts: bool,
    ) -> None:
        self.bnf = bnf
        self.columns = columns  # per column, the items waiting there on each nonterminal
        self.scanning = scanning  # the last column's items waiting on a character
        self.accepts = accepts  # whether the text so far is in the language
        self.children: dict[str, Chart | None] = {}

    @staticmethod
    def start(bnf: Bnf) -> Chart:
        seeds = [(p, 0, 0) for p in bnf.by_lhs.get(bnf.root, [])]
        return Chart._build(bnf, (), seeds)

    def extend(self, text: str) -> Chart | None:
        """The chart after ``text`` more characters, or None when no string continues them."""
        chart: Chart | None = self
        for c in text:
            assert chart is not None
            if c not in chart.children:
                chart.children[c] = chart._step(c)
            chart = chart.children[c]
            if chart is None:
                return None
        return chart

    def _step(self, c: str) -> Chart | None:
        productions = self.bnf.productions
        seeds = []
        for p, dot, origin in self.scanning:
            s = productions[p][1][dot]
            if s == c or (isinstance(s, Cls) and s.contains(c)):
                seeds.append((p, dot + 1, origin))
        return Chart._build(self.bnf, self.columns, seeds) if seeds else None

    @staticmethod
    def _build(bnf: Bnf, earlier: tuple[dict[int, list[Item]], ...], seeds: list[Item]) -> Chart:
        k = len(earlier)
        productions, by_lhs, nullable = bnf.productions, bnf.by_lhs, bnf.nullable
        waiting: dict[int, list[Item]] = {}
        columns = (*earlier, waiting)
        scanning: list[Item] = []
        seen = set(seeds)
        agenda = list(seeds)
        accepts = False

        def add(item: Item) -> None:
            if item not in seen:
                seen.add(item)
                agenda.append(item)

        while agenda:
            item = agenda.pop()
            p, dot, origin = item
            lhs, rhs = productions[p]
            if dot == len(rhs):
                accepts |= lhs == bnf.root and origin == 0
                # an item completed at its own column is handled by the nullable rule below,
                # including for items that start waiting on ``lhs`` after this one completes
                for q, d, o in columns[origin].get(lhs, ()):
                    add((q, d + 1, o))
                continue
            s = rhs[dot]
            if not isinstance(s, int):
                scanning.append(item)
                continue
            if s not in waiting:
                waiting[s] = []
                for q in by_lhs.get(s, ()):
                    add((q, 0, k))
            waiting[s].append(item)
            if s in nullable:  # Aycock and Horspool: step over what may derive nothing
                add((p, dot + 1, origin))
        return Chart(bnf, columns, scanning, accepts)
