"""Renders the benchmark results into the marked section of README.md.

Figures typed by hand go stale the day they are typed. ``make bench`` runs the benchmarks, which
write ``bench/results/*.json``, and then this script, which turns whatever results exist into
Markdown tables and puts them between ``<!-- bench:begin -->`` and ``<!-- bench:end -->`` in the
README; everything outside the markers is left byte for byte. Run it alone
(``python bench/readme.py``) to re-render from existing results, or with ``--check`` to fail when
the README is out of date with them.

What is shown, when present:

- ``index.json`` (``bench/index.py``): per vocabulary and workload, each engine's compile time, time
  to first mask, per-mask times on the first pass and warm, memory, and how many masks equal
  guided's; then guided's time and memory as a fraction of each peer's, and the batch fill;
- ``dfa.json`` (``bench/dfa.py``): DFA compile times and sizes;
- ``schema.json`` (``bench/schema.py``): per subset, the schemas each engine passes; in total, what
  each engine compiled, passed, got wrong, and how long it took;
- ``vocab_load.json`` and ``sampler.json`` (their benchmarks): as recorded.

Numbers keep three significant digits. The conditions of the run (CPUs, load average) are printed
above the tables, because on a shared machine they move the figures more than any code change.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"
PEERS = ("xgrammar", "llguidance", "outlines-core")


def fmt(value: Any) -> str:
    """A table cell: three significant digits for floats, ``-`` for missing values."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return "-"
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        digits = max(0, 2 - math.floor(math.log10(abs(value))))
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table; columns holding numbers are right-aligned."""

    def numeric(column: int) -> bool:
        return any(
            isinstance(row[column], (int, float)) and not isinstance(row[column], bool)
            for row in rows
        )

    rule = [" ---: " if numeric(i) else " --- " for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _mb(value: Any) -> float | None:
    return value / 1e6 if isinstance(value, (int, float)) else None


def _ratio(ours: Any, theirs: Any) -> float | None:
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and theirs > 0:
        return float(ours) / float(theirs)
    return None


def render_index(results: dict[str, Any]) -> str:
    parts = ["### Token masks: guided and its peers on the same vocabulary and outputs", ""]
    parts.append(
        "Each engine compiles the constraint, then fills one packed mask per token along the same "
        "valid output (`bench/index.py`). *compile* and *TTFM* (time to first mask) are medians "
        "of repeated compiles; *1st pass* is per mask on the freshly compiled object, where lazy "
        "engines pay for unseen states (per position, the median over the compiles, which the "
        "engines take in turns so that a slow spell of the machine falls on all of them); *warm* "
        "is per mask when the states were seen before. "
        "guided and xgrammar fill a CPU `torch.int32` tensor, as serving engines do; llguidance "
        "fills a numpy array through a raw pointer. "
        "*masks = guided* counts positions where the peer's mask is identical to guided's (JSON "
        "workloads differ by design where the peers allow more whitespace). Memory is what each "
        "engine reports (guided: the index beyond what the vocabulary's indexes share, the token "
        "trie and class slices; llguidance reports "
        "nothing, so its figure is resident-set growth)."
    )
    for vocab, data in results.get("vocabularies", {}).items():
        rows = []
        ratio_rows = []
        for workload, entry in data.get("workloads", {}).items():
            engines = entry.get("engines", {})
            for name, e in engines.items():
                if e.get("status") != "ok":
                    rows.append(
                        [workload, name, None, None, None, None, None, None, e.get("status")]
                    )
                    continue
                equal = e.get("masks_equal_guided")
                masks = e.get("masks")
                rows.append(
                    [
                        workload,
                        name,
                        e.get("compile_ms"),
                        e.get("ttfm_ms"),
                        e.get("first_median_us"),
                        e.get("first_p99_us"),
                        e.get("warm_median_us"),
                        _mb(e.get("memory_own_bytes", e.get("memory_bytes"))),
                        f"{equal}/{masks}" if equal is not None and masks else "-",
                    ]
                )
            ours = engines.get("guided", {})
            for peer in PEERS:
                theirs = engines.get(peer)
                if not theirs or theirs.get("status") != "ok" or ours.get("status") != "ok":
                    continue
                ratio_rows.append(
                    [
                        workload,
                        peer,
                        _ratio(ours.get("ttfm_ms"), theirs.get("ttfm_ms")),
                        _ratio(ours.get("first_median_us"), theirs.get("first_median_us")),
                        _ratio(ours.get("first_p99_us"), theirs.get("first_p99_us")),
                        _ratio(ours.get("warm_median_us"), theirs.get("warm_median_us")),
                        _ratio(ours.get("memory_own_bytes"), theirs.get("memory_own_bytes")),
                    ]
                )
        size = data.get("vocab_size")
        parts += ["", f"**{vocab}** ({fmt(size)} tokens)", ""]
        parts.append(
            markdown_table(
                [
                    "workload",
                    "engine",
                    "compile ms",
                    "TTFM ms",
                    "1st pass median µs",
                    "1st pass p99 µs",
                    "warm median µs",
                    "memory MB",
                    "masks = guided",
                ],
                rows,
            )
        )
        if ratio_rows:
            parts += ["", f"guided ÷ peer on {vocab} (below 1: guided is faster or smaller)", ""]
            parts.append(
                markdown_table(
                    ["workload", "peer", "TTFM", "1st median", "1st p99", "warm median", "memory"],
                    ratio_rows,
                )
            )
        batch = data.get("batch")
        if batch and batch.get("rows"):
            parts += [
                "",
                f"Batch fill on {vocab}: 64 matchers at varied states of "
                f"`{batch.get('workload')}`, one call (ms)",
                "",
            ]
            parts.append(
                markdown_table(
                    ["engine", "masks", "1 thread", "2 threads", "speedup"],
                    [
                        [
                            r.get("engine"),
                            r.get("mode"),
                            r.get("one_thread_ms"),
                            r.get("two_threads_ms"),
                            r.get("speedup"),
                        ]
                        for r in batch["rows"]
                    ],
                )
            )
    problems = results.get("problems") or []
    if problems:
        parts += ["", "Problems the run recorded:", ""]
        parts += [f"- {p}" for p in problems]
    return "\n".join(parts)


def render_dfa(results: list[dict[str, Any]]) -> str:
    return "\n".join(
        [
            "### Regex to DFA (`bench/dfa.py`)",
            "",
            markdown_table(
                ["pattern", "DFA states", "byte classes", "compile ms"],
                [
                    [r.get("name"), r.get("states"), r.get("classes"), r.get("compile_ms")]
                    for r in results
                ],
            ),
        ]
    )


def render_schema(results: dict[str, Any]) -> str:
    rows = [r for r in results.get("rows", []) if isinstance(r, dict)]
    engines = list(dict.fromkeys(r.get("engine") for r in rows))
    subsets = list(dict.fromkeys(r.get("subset") for r in rows if r.get("subset") != "total"))
    cell = {(r.get("subset"), r.get("engine")): r for r in rows}
    per_subset = []
    for subset in subsets:
        first = cell.get((subset, engines[0]), {}) if engines else {}
        per_subset.append(
            [subset, first.get("schemas")]
            + [cell.get((subset, e), {}).get("passing") for e in engines]
        )
    totals = [
        [
            e,
            r.get("schemas"),
            r.get("compiled"),
            r.get("passing"),
            r.get("invalid acc."),
            r.get("valid rej."),
            r.get("timeouts"),
            r.get("crashes"),
            r.get("compile ms p50"),
            r.get("p95"),
            r.get("p99"),
            r.get("max"),
        ]
        for e in engines
        if (r := cell.get(("total", e)))
    ]
    pairs = [
        [p.get(k) for k in ("peer", "schemas both compile", "engine", "p50", "p95", "p99", "max")]
        for p in results.get("ttfm_pairs", [])
        if isinstance(p, dict)
    ]
    return "\n".join(
        [
            "### JSON Schema: schemas passing, per subset (`bench/schema.py`)",
            "",
            "A schema passes when the engine compiles it, accepts every valid instance and rejects "
            "every invalid one (each instance in the member orders a schema can declare, two "
            "serializations, a byte-level vocabulary; compile time is schema text to first mask).",
            "",
            markdown_table(["subset", "schemas", *engines], per_subset),
            "",
            markdown_table(
                [
                    "engine",
                    "schemas",
                    "compiled",
                    "passing",
                    "invalid accepted",
                    "valid rejected",
                    "timeouts",
                    "crashes",
                    "compile ms p50",
                    "p95",
                    "p99",
                    "max",
                ],
                totals,
            ),
            *(
                [
                    "",
                    "Time to first mask (ms) over the schemas guided and each peer both compile "
                    "(per-engine percentiles above compare different sets of schemas):",
                    "",
                    markdown_table(
                        ["peer", "schemas", "engine", "p50", "p95", "p99", "max"], pairs
                    ),
                ]
                if pairs
                else []
            ),
        ]
    )


def render_rows(title: str, rows: list[dict[str, Any]]) -> str:
    """A table of recorded rows, columns in the order the benchmark wrote them."""
    headers: list[str] = []
    for row in rows:
        headers += [k for k in row if k not in headers]
    return "\n".join(
        [title, "", markdown_table(headers, [[row.get(h) for h in headers] for row in rows])]
    )


def conditions(results: dict[str, Any]) -> str:
    index = results.get("index")
    if not isinstance(index, dict):
        return ""
    load = index.get("load_average") or {}

    def one_minute(value: Any) -> Any:  # os.getloadavg() gives the 1, 5 and 15 minute figures
        return value[0] if isinstance(value, list) and value else value

    cpus = index.get("cpus")
    vocabs = ", ".join(index.get("vocabularies", {})) or "none"
    note = (
        f"Measured on {fmt(cpus)} CPUs (load average {fmt(one_minute(load.get('before')))} "
        f"before, {fmt(one_minute(load.get('after')))} after; other work on a shared machine "
        f"inflates times); vocabularies: {vocabs}."
    )
    source = index.get("guided_json_path")
    if source:
        note += f" guided's JSON workloads were compiled from {source}."
    return note


def render(results: dict[str, Any]) -> str:
    """The README section for the loaded results (``{"index": ..., "dfa": ..., ...}``)."""
    parts = [
        "_Generated by `make bench` (`bench/readme.py` from `bench/results/*.json`); "
        "do not edit by hand._",
    ]
    note = conditions(results)
    if note:
        parts += ["", note]
    if isinstance(results.get("index"), dict):
        parts += ["", render_index(results["index"])]
    if isinstance(results.get("dfa"), list):
        parts += ["", render_dfa(results["dfa"])]
    if isinstance(results.get("schema"), dict):
        parts += ["", render_schema(results["schema"])]
    vocab_load = results.get("vocab_load")
    if isinstance(vocab_load, dict) and vocab_load.get("rows"):
        parts += [
            "",
            render_rows("### Loading vocabularies (`bench/vocab_load.py`)", vocab_load["rows"]),
        ]
    sampler = results.get("sampler")
    if isinstance(sampler, dict):
        environment = sampler.get("environment") or {}
        if environment.get("threads"):
            parts += [
                "",
                f"Sampler tables: torch {environment.get('torch')} on "
                f"{fmt(environment.get('threads'))} CPU threads.",
            ]
        for key, title in (
            ("sampler", "### Sampler step, mixed batch (`bench/sampler.py`)"),
            (
                "distributions",
                "### Sampler on flat, peaked and mixed logits; each filter alone on 16 rows "
                "beside one batched sort (`bench/sampler.py`)",
            ),
            ("apply_cpu", "### Bitmask apply on CPU (`bench/sampler.py`)"),
        ):
            if sampler.get(key):
                parts += ["", render_rows(title, sampler[key])]
    if not any(k in results for k in ("index", "dfa", "schema", "vocab_load", "sampler")):
        parts += ["", "No results yet: run `make bench`."]
    return "\n".join(parts)


def splice(readme: str, section: str) -> str:
    """``readme`` with the text between the markers replaced by ``section``."""
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise ValueError(f"README must contain {BEGIN} and {END} exactly once each")
    if readme.index(BEGIN) > readme.index(END):
        raise ValueError(f"{BEGIN} must come before {END}")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{section}\n{END}{tail}"


def load_results(folder: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            results[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            print(f"skipping {path}: {e}", file=sys.stderr)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--readme", type=Path, default=README)
    ap.add_argument("--check", action="store_true", help="fail if the README is out of date")
    args = ap.parse_args(argv)
    readme = args.readme.read_text(encoding="utf-8")
    updated = splice(readme, render(load_results(args.results)))
    if args.check:
        if updated != readme:
            print(f"{args.readme} is out of date with {args.results}", file=sys.stderr)
            return 1
        return 0
    if updated != readme:
        args.readme.write_text(updated, encoding="utf-8")
    print(f"README benchmark section rendered from {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
