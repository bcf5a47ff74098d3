"""The JSONSchemaBench sample: real-world schemas with labelled instances.

Every schema must compile or be refused with ``UnsupportedSchemaError`` / ``SizeLimitError``
(never another error, never past the limits). For a compiled schema every invalid instance must be
rejected in every member order and serialization, and every valid one accepted. The labels come
from ``jsonschema`` with format assertion, so strict mode applies formats too.

The whole sample goes through ``TokenIndex.from_json_schema`` over the 256 single-byte tokens,
the path an engine takes. The index keeps recursion and free values as calls, so no depth bound
narrows its language: a valid instance it rejects is a failure, with no "bound" excuse. Its
automaton is built lazily, so a long instance may reach ``max_states`` while it is walked; that
raises ``SizeLimitError``, a typed refusal counted in the "limit" column.

The regular form (``guided.DFA``, ``json_schema_to_regex``) bounds what is not regular: values the
schema leaves free nest at most ``max_free_depth`` containers, recursive references unroll
``max_recursion_depth`` times. It is checked on every fourth schema. There a valid instance that
only those bounds reject is counted in the "bound" column, and only after the same schema,
compiled with wider bounds, accepts it: the rejection is then exactly the documented bound, not an
error (``BEYOND_LIMITS`` lists the few whose wider compilation is itself past the size limits).
Anything else is a failure.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from schema_harness import Matcher, compile_index_matcher, compile_matcher, outcome

import guided
from conftest import shared_path

#: The regular form's options: a whole-schema DFA needs more states than its default allows for
#: the larger schemas. The token index runs on its defaults, as an engine would.
REGULAR_OPTIONS: dict[str, Any] = {"max_states": 100_000}
#: Wider bounds to try, one at a time, on a valid instance the default bounds reject.
WIDER: list[dict[str, Any]] = [
    {"max_states": 200_000, "max_free_depth": 5},
    {"max_states": 200_000, "max_recursion_depth": 5},
    {"max_states": 200_000, "max_free_depth": 5, "max_recursion_depth": 4},
]
COLUMNS = (
    "schemas",
    "compiled",
    "refused",
    "valid_ok",
    "valid",
    "invalid_ok",
    "invalid",
    "limit",
    "bound",
)
#: The regular form is checked on every this-many-th schema of each subset.
REGULAR_SAMPLE = 4

#: Valid instances past the default bounds whose wider compilation exceeds the size limits, so
#: that the rejection cannot be shown to be the bound alone by compiling the whole schema wider.
#: Each was shrunk (members and items deleted while the instance stayed valid and rejected) to a
#: part that the schema compiled with ``max_free_depth=3`` accepts.
BEYOND_LIMITS = {
    "Github_trivial/o47165": "expressions nested five deep in a fourteen-way recursive anyOf",
    "Github_trivial/o47153": "free link objects nest seven deep",
    "Github_easy/o17543": "a free uiSchema nests five deep",
    "Github_ultra/o68588": "a free properties value (the schema, restated) nests seven deep",
    "JsonSchemaStore/noodl.schema": "free values under additionalProperties nest four deep",
    "Kubernetes/kb_760_Normalized": "free managedFields entries nest six deep",
    "Snowplow/sp_17_Normalized": "a free properties tree nests four deep",
}


def rejected_only_by_bounds(schema: Any, value: Any) -> bool:
    for options in WIDER:
        wide = compile_matcher(schema, **options)
        if wide is not None and outcome(wide, value, True, schema) is None:
            return True
    return False


def run_subset(name: str, *, regular: bool) -> tuple[dict[str, int], list[str]]:
    """Runs one subset through the token index, or (``regular``) a sample of it through the
    regular form."""
    counts = dict.fromkeys(COLUMNS, 0)
    failures: list[str] = []
    path = shared_path("corpus", "jsonschemabench", f"{name}.jsonl")
    compile_ = compile_matcher if regular else compile_index_matcher
    for i, line in enumerate(path.read_text().splitlines()):
        if regular and i % REGULAR_SAMPLE:
            continue
        case = json.loads(line)
        counts["schemas"] += 1
        try:
            matcher = compile_(case["schema"], **(REGULAR_OPTIONS if regular else {}))
        except Exception as exc:
            failures.append(f"{case['id']}: {type(exc).__name__}: {exc}")
            continue
        if matcher is None:
            counts["refused"] += 1
            continue
        counts["compiled"] += 1
        for test in case.get("tests", []):
            valid = bool(test["valid"])
            counts["valid" if valid else "invalid"] += 1
            problem = check(matcher, case, test, regular)
            if problem in ("ok", "limit", "bound"):
                counts[{"ok": "valid_ok" if valid else "invalid_ok"}.get(problem, problem)] += 1
            else:
                failures.append(f"{case['id']} / {test['description']}: {problem}")
    return counts, failures


def check(matcher: Matcher, case: dict[str, Any], test: dict[str, Any], regular: bool) -> str:
    """``ok``, ``limit`` (the lazy index reached ``max_states``), ``bound`` (the regular form's
    documented bounds alone reject a valid instance), or what went wrong."""
    valid = bool(test["valid"])
    try:
        problem = outcome(matcher, test["data"], valid, case["schema"])
    except guided.SizeLimitError:
        return "limit"
    if problem is None:
        return "ok"
    if (
        regular
        and valid
        and (case["id"] in BEYOND_LIMITS or rejected_only_by_bounds(case["schema"], test["data"]))
    ):
        return "bound"
    return problem


SUBSETS = [
    "Github_trivial",
    "Github_easy",
    "Github_medium",
    "Github_hard",
    "Github_ultra",
    "Glaiveai2K",
    "JsonSchemaStore",
    "Kubernetes",
    "Snowplow",
    "WashingtonPost",
    "MaskBench_BFCL",
    "MaskBench_Handwritten",
    "MaskBench_JME",
    "MaskBench_MCPspec",
    "MaskBench_Synthesized",
]


def row(name: str, c: dict[str, int]) -> str:
    return (
        f"{name:<22} {c['schemas']:>7} {c['compiled']:>8} {c['refused']:>7} "
        f"{c['valid_ok']:>5}/{c['valid']:<5} {c['invalid_ok']:>5}/{c['invalid']:<5} "
        f"{c['limit']:>5} {c['bound']:>5}"
    )


def run_corpus(regular: bool, title: str, capsys: pytest.CaptureFixture[str]) -> None:
    head = (
        f"{'subset':<22} {'schemas':>7} {'compiled':>8} {'refused':>7} "
        f"{'valid ok':>11} {'invalid ok':>11} {'limit':>5} {'bound':>5}"
    )
    lines = [title, head, "-" * len(head)]
    total = dict.fromkeys(COLUMNS, 0)
    failures: list[str] = []
    for name in SUBSETS:
        c, fails = run_subset(name, regular=regular)
        failures.extend(fails)
        for k, v in c.items():
            total[k] += v
        lines.append(row(name, c))
    lines.append(row("total", total))
    with capsys.disabled():  # the table is the point of the run: shown in CI logs too
        print("\n" + "\n".join(lines))
    assert not failures, f"{len(failures)} mismatches:\n" + "\n".join(failures[:40])


def test_jsonschemabench_sample(capsys: pytest.CaptureFixture[str]) -> None:
    run_corpus(False, "token index (TokenIndex.from_json_schema, byte tokens)", capsys)


def test_jsonschemabench_regular_form(capsys: pytest.CaptureFixture[str]) -> None:
    run_corpus(True, f"regular form (schema DFA), every {REGULAR_SAMPLE}th schema", capsys)
