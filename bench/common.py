"""Shared benchmark plumbing: timing, tables, where the shared data lives, where results go."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def shared_root() -> Path:
    """The shared data folder (``$GUIDED_SHARED`` or ``../shared``)."""
    return Path(os.environ.get("GUIDED_SHARED", ROOT.parent / "shared"))


def time_call(fn: Callable[[], Any], *, repeat: int = 7, min_time: float = 0.05) -> list[float]:
    """Wall-clock seconds of `repeat` timed rounds; each round loops `fn` long enough to measure."""
    fn()
    loops = 1
    while True:
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        if time.perf_counter() - start >= min_time or loops >= 1 << 20:
            break
        loops *= 2
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops)
    return samples


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table with right-aligned numbers."""
    cells = [[str(h) for h in headers]] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if n else c.ljust(w) for c, w in zip(r, widths)))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def write_results(name: str, payload: Any) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2))
    return path
