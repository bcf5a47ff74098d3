"""DFA compile time and state counts.

Reference point from the issue that set the target: a pure-Python subset construction builds a
440-state DFA for the demo schema's regex (an object with a name string, an age integer, an admin
boolean and a tags array of enum strings, some fields optional) in about 22 ms. This prints our
compile time and state count for that pattern and a few others, with the ratio to that figure.

Run: ``make bench`` (all benchmarks) or ``python bench/dfa.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import guided
from common import median, table, time_call, write_results

PURE_PYTHON_REFERENCE_MS = 22.0

PATTERNS: dict[str, str] = {
    "digits": r"[0-9]{1,10}",
    "email": r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}",
    "iso_date": r"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])",
    "json_object": (
        r'\{[ ]?"name"[ ]?:[ ]?"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])*"'
        r'[ ]?,[ ]?"age"[ ]?:[ ]?-?(?:0|[1-9][0-9]*)'
        r'(?:[ ]?,[ ]?"admin"[ ]?:[ ]?(?:true|false))?'
        r'(?:[ ]?,[ ]?"tags"[ ]?:[ ]?\[[ ]?(?:"(?:red|green|blue)"'
        r'(?:[ ]?,[ ]?"(?:red|green|blue)")*)?[ ]?\])?[ ]?\}'
    ),
    "uuid": r"[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
    "ipv4": r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)",
    "unicode_words": r"(?:\p{L}+ ?){1,8}",
    "any_text_64": r".{0,64}",
    "suffix_blowup_12": r"(a|b)*a(a|b){12}",
}
if hasattr(guided, "json_schema_to_regex"):
    from guided._demo import DEMO_SCHEMA

    PATTERNS["demo_schema"] = guided.json_schema_to_regex(DEMO_SCHEMA)


def main() -> None:
    rows = []
    results = []
    for name, pattern in PATTERNS.items():
        dfa = guided.DFA(pattern, max_states=100_000)
        seconds = median(time_call(lambda p=pattern: guided.DFA(p, max_states=100_000)))
        ms = seconds * 1e3
        rows.append(
            [name, len(pattern), dfa.num_states, dfa.num_classes, ms, PURE_PYTHON_REFERENCE_MS / ms]
        )
        results.append(
            {"name": name, "states": dfa.num_states, "classes": dfa.num_classes, "compile_ms": ms}
        )
    print("DFA compile (median of 7 rounds); reference: pure-Python 440 states in 22 ms")
    print(table(["pattern", "len", "states", "classes", "compile ms", "x faster than 22 ms"], rows))
    print(f"results: {write_results('dfa', results)}")


if __name__ == "__main__":
    main()
