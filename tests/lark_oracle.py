"""An oracle for Lark grammars that knows nothing of guided: Lark's own Earley parser decides what a
grammar accepts, and random texts are derived from the rules and terminals Lark compiles.

Membership is ``lark.Lark(text, start=..., parser="earley", lexer="dynamic_complete")``: terminals
are regexes over characters, tried at every length, and ``%ignore`` terminals may stand between
any two terminals and at either end. One terminal is redefined, as guided reads it:
``common.ESCAPED_STRING`` is ``"``, then characters other than ``"``, ``\\`` and a line feed or a
``\\`` and any character but a line feed, then ``"``. Lark's own definition (a lazy ``.*?`` closed
by a lookbehind) also lets a string hold a raw ``"`` when the text around it needs that.

Derivations walk Lark's compiled BNF (``Lark.rules``): each nonterminal picks a random
alternative until a budget of terminals is spent, then an alternative of least height, so that
every derivation ends. Each terminal's text is drawn from its pattern: a literal (cases flipped
at random under the ``i`` flag) or a random string of its regex, generated from the regex's
parse by Python's own ``re`` parser. ``%ignore`` texts are put before terminals and at the end at
random. Every derivation is checked against the parser before it is returned.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import lark
from lark.exceptions import UnexpectedInput
from lark.lexer import Pattern, PatternRE, PatternStr, TerminalDef

try:  # Python 3.11 made these modules private
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

GUIDED_ESCAPED_STRING = r'"(?:[^"\\\n]|\\[^\n])*"'

# Characters for classes given by what they exclude (`.`, `[^...]`, `\S`): printable ASCII, tab,
# line feed, and a few characters of two, three and four UTF-8 bytes.
ALPHABET = [chr(c) for c in range(0x20, 0x7F)] + list("\t\néß€中😀")
MAX_EXTRA_REPEATS = 3
MAX_NESTING = 14


@cache
def _lark_escaped_string() -> Pattern:
    grammar = lark.Lark(
        "start: ESCAPED_STRING\n%import common.ESCAPED_STRING",
        parser="earley",
        lexer="dynamic_complete",
    )
    (term,) = [t for t in grammar.terminals if t.name == "ESCAPED_STRING"]
    return term.pattern


def _as_guided_reads(term: TerminalDef) -> None:
    # matched by pattern, not by name: `%import common.ESCAPED_STRING -> STR` renames it
    if term.pattern == _lark_escaped_string():
        term.pattern = PatternRE(GUIDED_ESCAPED_STRING)


@cache
def parser(text: str, start: str = "start") -> lark.Lark:
    """Lark's scannerless Earley parser for ``text`` (ESCAPED_STRING read as guided reads it)."""
    return lark.Lark(
        text,
        start=start,
        parser="earley",
        lexer="dynamic_complete",
        edit_terminals=_as_guided_reads,
    )


def accepts(grammar: lark.Lark, s: str) -> bool:
    """Whether ``s`` is in the grammar's language."""
    try:
        grammar.parse(s)
    except UnexpectedInput:
        return False
    return True


# --- random strings of a regex --------------------------------------------------------------

_CATEGORIES = {
    sre_constants.CATEGORY_DIGIT: re.compile(r"\d"),
    sre_constants.CATEGORY_NOT_DIGIT: re.compile(r"\D"),
    sre_constants.CATEGORY_SPACE: re.compile(r"\s"),
    sre_constants.CATEGORY_NOT_SPACE: re.compile(r"\S"),
    sre_constants.CATEGORY_WORD: re.compile(r"\w"),
    sre_constants.CATEGORY_NOT_WORD: re.compile(r"\W"),
}
_REPEATS = {
    sre_constants.MAX_REPEAT,
    sre_constants.MIN_REPEAT,
    getattr(sre_constants, "POSSESSIVE_REPEAT", sre_constants.MAX_REPEAT),
}
_IGNORECASE = sre_constants.SRE_FLAG_IGNORECASE
_DOTALL = sre_constants.SRE_FLAG_DOTALL


def _variants(c: str, flags: int) -> set[str]:
    """``c`` and, under the ``i`` flag, its other ASCII case."""
    return {c, c.swapcase()} if flags & _IGNORECASE and c.isascii() and c.isalpha() else {c}


def _flip(c: str, flags: int, rng: random.Random) -> str:
    return rng.choice(sorted(_variants(c, flags)))


def _in_set(c: str, items: list[tuple[Any, Any]], flags: int) -> bool:
    """Whether ``c`` is in a parsed class (its NEGATE item ignored)."""
    for v in _variants(c, flags):
        for op, av in items:
            if op is sre_constants.LITERAL and ord(v) == av:
                return True
            if op is sre_constants.RANGE and av[0] <= ord(v) <= av[1]:
                return True
            if op is sre_constants.CATEGORY and _CATEGORIES[av].fullmatch(v):
                return True
    return False


def _class_char(items: list[tuple[Any, Any]], flags: int, rng: random.Random) -> str:
    if items and items[0][0] is sre_constants.NEGATE:
        members = [c for c in ALPHABET if not _in_set(c, items[1:], flags)]
        return rng.choice(members)
    op, av = rng.choice(items)
    if op is sre_constants.LITERAL:
        return _flip(chr(av), flags, rng)
    if op is sre_constants.RANGE:
        lo, hi = av
        if hi - lo > 0x100:  # a wide range: keep to characters a tokenizer has whole
            inside = [c for c in ALPHABET if lo <= ord(c) <= hi]
            return rng.choice(inside) if inside else chr(lo)
        return _flip(chr(rng.randint(lo, hi)), flags, rng)
    assert op is sre_constants.CATEGORY, op
    return rng.choice([c for c in ALPHABET if _CATEGORIES[av].fullmatch(c)])


def _generate(pattern: Any, flags: int, rng: random.Random, out: list[str]) -> None:
    for op, av in pattern:
        if op is sre_constants.LITERAL:
            out.append(_flip(chr(av), flags, rng))
        elif op is sre_constants.NOT_LITERAL:
            banned = _variants(chr(av), flags)
            out.append(rng.choice([c for c in ALPHABET if c not in banned]))
        elif op is sre_constants.ANY:
            out.append(rng.choice([c for c in ALPHABET if flags & _DOTALL or c != "\n"]))
        elif op is sre_constants.IN:
            out.append(_class_char(av, flags, rng))
        elif op is sre_constants.BRANCH:
            _generate(rng.choice(av[1]), flags, rng, out)
        elif op is sre_constants.SUBPATTERN:
            _group, add, remove, sub = av
            _generate(sub, (flags | add) & ~remove, rng, out)
        elif op in _REPEATS:
            lo, hi, sub = av
            hi = lo + MAX_EXTRA_REPEATS if hi == sre_constants.MAXREPEAT else hi
            for _ in range(rng.randint(lo, min(hi, lo + MAX_EXTRA_REPEATS))):
                _generate(sub, flags, rng, out)
        elif op is getattr(sre_constants, "ATOMIC_GROUP", None):
            _generate(av, flags, rng, out)
        else:  # anchors, lookarounds, back references
            raise ValueError(f"cannot generate strings for regex operator {op}")


def random_match(regex: str, rng: random.Random) -> str:
    """A random string that ``regex`` matches in full."""
    parsed = sre_parse.parse(regex)
    for _ in range(100):
        out: list[str] = []
        _generate(parsed, parsed.state.flags, rng, out)
        s = "".join(out)
        if re.fullmatch(regex, s):
            return s
    raise AssertionError(f"no string drawn for {regex!r} matches it")


def terminal_text(pattern: Pattern, rng: random.Random) -> str:
    """A random text of one terminal."""
    if isinstance(pattern, PatternStr):
        flags = _IGNORECASE if "i" in pattern.flags else 0
        return "".join(_flip(c, flags, rng) for c in pattern.value)
    return random_match(pattern.to_regexp(), rng)


# --- derivations ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bnf:
    alternatives: dict[str, list[tuple[Any, ...]]]
    height: dict[str, float]  # of each nonterminal's shortest-height derivation tree
    patterns: dict[str, Pattern]
    ignore: tuple[str, ...]

    def alternative_height(self, alternative: tuple[Any, ...]) -> float:
        return 1 + max((self.height[s.name] for s in alternative if not s.is_term), default=0)


@cache
def _bnf(text: str, start: str) -> _Bnf:
    grammar = parser(text, start)
    alternatives: dict[str, list[tuple[Any, ...]]] = {}
    for rule in grammar.rules:
        alternatives.setdefault(rule.origin.name, []).append(tuple(rule.expansion))
    bnf = _Bnf(
        alternatives,
        {name: float("inf") for name in alternatives},
        {t.name: t.pattern for t in grammar.terminals},
        tuple(grammar.ignore_tokens),
    )
    changed = True
    while changed:  # least fixpoint of the heights
        changed = False
        for name, alts in alternatives.items():
            best = min(bnf.alternative_height(a) for a in alts)
            if best < bnf.height[name]:
                bnf.height[name] = best
                changed = True
    assert bnf.height[start] < float("inf"), f"`{start}` derives no text"
    return bnf


def derive(
    text: str,
    rng: random.Random,
    start: str = "start",
    budget: int = 30,
    ignore_rate: float = 0.3,
) -> str:
    """A random text of the grammar ``text`` from rule ``start``: random alternatives until
    ``budget`` terminals are out, then alternatives of least height; an ``%ignore`` text before
    each terminal and at the end with probability ``ignore_rate``. Lark accepts it."""
    bnf = _bnf(text, start)
    out: list[str] = []
    left = [budget]

    def gap() -> None:
        if bnf.ignore and rng.random() < ignore_rate:
            out.append(terminal_text(bnf.patterns[rng.choice(bnf.ignore)], rng))

    def expand(name: str, depth: int) -> None:
        alts = [a for a in bnf.alternatives[name] if bnf.alternative_height(a) < float("inf")]
        if left[0] <= 0 or depth > MAX_NESTING:
            least = min(bnf.alternative_height(a) for a in alts)
            alts = [a for a in alts if bnf.alternative_height(a) == least]
        for symbol in rng.choice(alts):
            if symbol.is_term:
                gap()
                out.append(terminal_text(bnf.patterns[symbol.name], rng))
                left[0] -= 1
            else:
                expand(symbol.name, depth + 1)

    expand(start, 0)
    gap()
    result = "".join(out)
    assert accepts(parser(text, start), result), (start, result)
    return result
