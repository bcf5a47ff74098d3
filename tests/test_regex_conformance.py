"""Conformance against third-party regex data: rust-lang/regex's TOML suite and RE2's search log.

Those suites describe *searches*; guided answers *full matches*. Each case is translated into the
statements that hold under both meanings:

* an expected match spanning the whole haystack means the pattern full-matches it;
* no expected match anywhere means neither a full match nor ``(?s:.*)(?:p)(?s:.*)`` matches;
* some expected match means ``(?s:.*)(?:p)(?s:.*)`` matches (``(?:p)(?s:.*)`` when anchored).

RE2's log states the full-match result directly, so its cases run as they are.

The Rust suite is read in the Rust dialect (``dialect="rust"``: Unicode classes and case folding,
nested classes, flags anywhere), so its ``compiles = false`` cases must be refused too. RE2's log
is read in the default Python dialect, whose ASCII classes RE2 shares.

A case is skipped only for a reason that is named: a construct the dialect refuses (the parser's
own message is the reason), or a semantic the suite assumes that full match over UTF-8 text does
not have (search bounds, byte-oriented mode, regex sets, ...). The counts are printed, and every
skip carries its reason.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import tomllib

import guided
from conftest import shared_path

if TYPE_CHECKING:
    from guided._lib import RegexDialect

REGEX_DIR = ("corpus", "regex")


@dataclass
class Tally:
    """How many cases ran and passed, and why the others were skipped."""

    ran: int = 0
    passed: int = 0
    failures: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)

    def report(self, title: str) -> str:
        lines = [
            f"{title}: ran {self.ran}, passed {self.passed}, skipped {sum(self.skipped.values())}"
        ]
        for reason, n in self.skipped.most_common():
            lines.append(f"    skipped {n:4d}: {reason}")
        return "\n".join(lines)


def rust_feature_gap(pattern: str, haystack: bytes, case: dict[str, Any]) -> str | None:
    """The reason a rust-lang/regex case has no full-match meaning in our dialect, if any."""
    if isinstance(case["regex"], list):
        return "regex sets (several patterns at once)"
    if case.get("unicode") is False:
        return "unicode=false (byte-oriented matching)"
    if case.get("utf8") is False:
        return "utf8=false (matches may split code points)"
    if "bounds" in case:
        return "search bounds"
    if "line-terminator" in case:
        return "custom line terminator"
    try:
        haystack.decode("utf-8")
    except UnicodeDecodeError:
        return "haystack is not valid UTF-8"
    return None


def re2_feature_gap(pattern: str, haystack: bytes, case_insensitive: bool) -> str | None:
    """Semantics RE2 has that differ from the Python dialect's."""
    if "[[:" in pattern or "[:^" in pattern:
        return "POSIX character classes [[:name:]]"
    if re.search(r"\[[^\]]*(&&|--|~~)", pattern):
        return "class set operations (&&, --, ~~)"
    if re.search(r"\[(?:\^)?[^\]]*\[", pattern):
        return "nested character classes"
    if re.search(r"\\x\{", pattern):
        return "braced hex escape \\x{...}"
    if re.search(r"\\[<>]|\\b\{", pattern):
        return "word boundary assertions \\< \\> \\b{...}"
    if re.search(r"\\[QEC]", pattern):
        return "\\Q...\\E quoting or \\C any-byte"
    if re.search(r"\(\?[a-zA-Z-]*[mU]", pattern):
        return "multi-line (?m) or swap-greed (?U) flags"
    if re.search(r"\(\?[a-z]*-?[a-z]*u", pattern):
        return "(?u)/(?-u) Unicode mode switches"
    try:
        text = haystack.decode("utf-8")
    except UnicodeDecodeError:
        return "haystack is not valid UTF-8"
    if not text.isascii():
        if case_insensitive or re.search(r"\(\?[a-z]*i", pattern):
            return "Unicode case folding on a non-ASCII haystack"
        if re.search(r"\\[wWdDsSbB]", pattern):
            return "Unicode-aware \\w \\d \\s on a non-ASCII haystack"
    if "\v" in text and re.search(r"\\[sS]", pattern):
        return "\\s and vertical tab (RE2 and Rust exclude it; Python includes it)"
    return None


def unescape(text: str) -> bytes:
    r"""The TOML suite's `unescape = true` haystacks spell bytes as \xNN, \n, \t, \r, \0, \\."""
    simple = {ord("n"): 10, ord("t"): 9, ord("r"): 13, ord("0"): 0, ord("\\"): 92}
    out = bytearray()
    raw = text.encode("utf-8")
    i = 0
    while i < len(raw):
        if raw[i] == 92 and i + 1 < len(raw):
            nxt = raw[i + 1]
            if nxt == ord("x") and i + 4 <= len(raw):
                out.append(int(raw[i + 2 : i + 4], 16))
                i += 4
                continue
            if nxt in simple:
                out.append(simple[nxt])
                i += 2
                continue
        out.append(raw[i])
        i += 1
    return bytes(out)


def spans(matches: list[Any]) -> list[tuple[int, int]]:
    """Group-0 spans of a case's expected matches (captures list the overall span first)."""
    out = []
    for m in matches:
        if isinstance(m, dict):
            m = m["span"]
        if m and isinstance(m[0], list):
            m = m[0]
        if m is not None:
            out.append((m[0], m[1]))
    return out


def compile_or_reason(
    pattern: str, dialect: RegexDialect = "python"
) -> tuple[guided.DFA | None, str | None]:
    try:
        return guided.DFA(pattern, max_states=50_000, dialect=dialect), None
    except guided.RegexSyntaxError as e:
        construct = str(e).split(": ", 1)[-1].split(" (in pattern ")[0]
        return None, f"refused by the dialect: {construct}"
    except guided.SizeLimitError as e:
        return None, f"size limit: {e.limit}"


def search_form(pattern: str, anchored: bool) -> str:
    """The full-match pattern that accepts a text iff `pattern` matches somewhere in it. Global
    flags stay in front, where the dialect requires them."""
    flags = re.match(r"(?:\(\?[a-zA-Z]+\))*", pattern)
    prefix = flags.group(0) if flags else ""
    body = pattern[len(prefix) :]
    return prefix + ("" if anchored else "(?s:.*)") + f"(?:{body})(?s:.*)"


def run_rust_case(case: dict[str, Any], tally: Tally) -> None:
    pattern = case["regex"]
    haystack_text = case["haystack"]
    haystack = unescape(haystack_text) if case.get("unescape") else haystack_text.encode("utf-8")
    if case.get("compiles") is False:
        dfa, reason = compile_or_reason(pattern, "rust")
        tally.ran += 1
        if dfa is None:
            tally.passed += 1
        else:
            tally.failures.append(f"{case['name']}: {pattern!r} compiled; Rust's regex refuses it")
        return
    gap = rust_feature_gap(pattern, haystack, case)
    if gap:
        tally.skipped[gap] += 1
        return
    if case.get("case-insensitive"):
        pattern = "(?i)" + pattern
    full, reason = compile_or_reason(pattern, "rust")
    search_pattern = search_form(pattern, bool(case.get("anchored")))
    search, search_reason = compile_or_reason(search_pattern, "rust")
    if full is None or search is None:
        tally.skipped[str(reason or search_reason)] += 1
        return
    found = spans(case["matches"])
    tally.ran += 1
    checks = [(search, haystack, bool(found), "search")]
    if not found:
        checks.append((full, haystack, False, "full"))
    elif (0, len(haystack)) in found:
        checks.append((full, haystack, True, "full"))
    bad = [f"{kind} expected {want}" for dfa, hay, want, kind in checks if dfa.match(hay) != want]
    if bad:
        tally.failures.append(f"{case['name']}: {pattern!r} on {haystack!r}: {', '.join(bad)}")
    else:
        tally.passed += 1


def toml_files() -> list[Path]:
    root = shared_path(*REGEX_DIR)
    return sorted(root.glob("*.toml")) + sorted(root.glob("fowler/*.toml"))


def test_rust_regex_suite(capsys: pytest.CaptureFixture[str]) -> None:
    total = Tally()
    lines = []
    for path in toml_files():
        tally = Tally()
        for case in tomllib.loads(path.read_text())["test"]:
            if path.name == "regex-lite.toml":
                # regex-lite is another engine, with ASCII classes and case folding
                tally.skipped["regex-lite's ASCII-only semantics"] += 1
                continue
            run_rust_case(case, tally)
        name = f"{path.parent.name}/{path.name}" if path.parent.name == "fowler" else path.name
        skipped = sum(tally.skipped.values())
        lines.append(f"  {name}: ran {tally.ran}, passed {tally.passed}, skipped {skipped}")
        total.ran += tally.ran
        total.passed += tally.passed
        total.failures += tally.failures
        total.skipped.update(tally.skipped)
    with capsys.disabled():
        print("\nrust-lang/regex conformance (full-match meaning)")
        print("\n".join(lines))
        print(total.report("total"))
    assert total.ran > 500, "too few cases ran to mean anything"
    assert not total.failures, "\n".join(total.failures[:30])


def parse_re2_log(text: str) -> list[tuple[str, list[str], list[str]]]:
    """(pattern, strings, results) triples from RE2's search log."""
    cases = []
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    i = 0
    strings: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line == "strings":
            strings = []
            i += 1
            while lines[i] != "regexps":
                strings.append(ast.literal_eval(lines[i]))
                i += 1
            i += 1
            continue
        if line.startswith('"'):
            pattern = ast.literal_eval(line)
            results = lines[i + 1 : i + 1 + len(strings)]
            cases.append((pattern, strings, results))
            i += 1 + len(strings)
            continue
        i += 1
    return cases


def test_re2_search_log(capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_path(*REGEX_DIR, "re2", "re2-search.txt")
    tally = Tally()
    for pattern, strings, results in parse_re2_log(path.read_text()):
        dfa, reason = compile_or_reason(pattern)
        for text, result in zip(strings, results):
            haystack = text.encode("utf-8", "surrogatepass")
            gap = re2_feature_gap(pattern, haystack, False)
            if gap:
                tally.skipped[gap] += 1
                continue
            if dfa is None:
                tally.skipped[str(reason)] += 1
                continue
            tally.ran += 1
            want = result.split(";")[0] != "-"
            if dfa.match(haystack) == want:
                tally.passed += 1
            else:
                tally.failures.append(f"{pattern!r} on {text!r}: full match expected {want}")
    with capsys.disabled():
        print("\n" + tally.report("RE2 search log (full-match column)"))
    assert tally.ran > 800
    assert not tally.failures, "\n".join(tally.failures[:30])
