"""The ``guided`` command line.

``guided demo`` compiles the embedded demo constraints and prints their figures as JSON lines, one
object per line, so the output is both readable and easy to feed to other tools. Everything it
needs is embedded: no tokenizer or model is downloaded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from guided import DFA, GuidedError

#: Patterns the demo compiles: small, typical constraints an engine sees.
DEMO_PATTERNS: dict[str, str] = {
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
}


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record, ensure_ascii=False), flush=True)


def run_demo(args: argparse.Namespace) -> int:
    for name, pattern in DEMO_PATTERNS.items():
        start = time.perf_counter()
        dfa = DFA(pattern)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        emit(
            {
                "pattern": name,
                "regex_length": len(pattern),
                "dfa_states": dfa.num_states,
                "byte_classes": dfa.num_classes,
                "compile_ms": round(elapsed_ms, 3),
                "memory_bytes": dfa.memory_bytes(),
            }
        )
    return 0


def run_match(args: argparse.Namespace) -> int:
    dfa = DFA(args.regex)
    matched = dfa.match(args.text)
    emit({"regex": args.regex, "text": args.text, "match": matched})
    return 0 if matched else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="guided", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile the embedded demo constraints, print figures")
    demo.set_defaults(run=run_demo)
    match = sub.add_parser("match", help="full-match TEXT against REGEX (exit 0 on a match)")
    match.add_argument("regex")
    match.add_argument("text")
    match.set_defaults(run=run_match)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except GuidedError as e:
        print(f"guided: error: {e}", file=sys.stderr)
        return 2
    return code
