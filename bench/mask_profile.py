"""Instructions per first-pass mask under callgrind: guided alone, on `index.py`'s workloads.

What it measures. The workload's constraint is compiled and driven along its output as
``index.py`` drives it, ``--compiles`` times in one process; the last compile's first pass is
reported, so that work done once per vocabulary (its token trie, its class slices) is out of it.
Every call of ``TokenIndex::mask`` (the Rust function behind a mask that is not cached yet) is
counted alone: valgrind's callgrind collects instructions only inside it and writes a profile
after each call. The tool prints, per workload, the pass's instructions, how many of its positions
computed a mask, the median and p99 over those, and the most expensive positions with the text
before them and the functions of guided that took most of each.

Why this way. A first-pass mask takes 2 to 200 microseconds, and on a shared two-core machine the
same pass measured twice differs by a third or more (whole bench runs have moved every row
together), which is larger than most changes one would want to judge. An instruction count is the
same for the same binary and input whatever else the machine does, so an A/B of two builds (two
``PYTHONPATH`` s, each with its own ``guided._lib``) reads the change alone. It is not time: a mask
that reads memory nobody read lately (a large trie's scattered nodes, a freshly grown table) costs
more per instruction, which only ``index.py``'s wall-clock figures show. And it overstates
copies: glibc copies and clears blocks of a few kilobytes to a few megabytes with ``rep movsb``
and ``rep stosb``, which callgrind counts once per byte (ten 1 MB ``memmove`` calls count ten
million) where the hardware moves tens of bytes a cycle, so a table's growth or a mask's
zeroing weighs here up to thirty times what it costs in time. Positions whose mask is cached
cost no instructions here (the copy into the caller's buffer is outside ``TokenIndex::mask``).

Cost: valgrind runs the process 30 to 60 times slower; one workload takes 10 seconds to a few
minutes (o200k's first compile builds its trie under valgrind).

Run: ``python bench/mask_profile.py o200k tool-calls json-26 [--top 8] [--json out.json]``
(valgrind on the ``PATH``; the build to profile is the ``guided`` that Python imports).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import index
import peers

MASK_FUNCTION = "guided_core::index::TokenIndex::mask"


def drive(vocab_name: str, workload: str, compiles: int) -> dict[str, Any]:
    """Compiles and drives `workload` `compiles` times; says which positions of the last pass
    met a state whose mask was not computed yet (one ``TokenIndex::mask`` call each) and the
    text each position's mask is asked after."""
    loaded = peers.load(vocab_name)
    w = {x.name: x for x in index.workloads()}[workload]
    tokens = loaded.encode(w.text)
    engine = index.Guided((loaded.vocab.vocab_size + 31) // 32, loaded.vocab)
    fresh: list[int] = []
    calls = 0
    for _ in range(compiles):
        guide = engine.matcher(engine.compile(w))
        fill = engine.filler(guide)
        seen: set[int] = set()
        fresh = []
        for k in range(len(tokens) + 1):
            if k:
                engine.advance(guide, tokens[k - 1])
            if guide.state not in seen:
                seen.add(guide.state)
                fresh.append(k)
            fill()
        calls += len(fresh)
    before = [
        b"".join(loaded.vocab.token_bytes(t) or b"" for t in tokens[:k]).decode(errors="replace")
        for k in range(len(tokens) + 1)
    ]
    return {"positions": len(tokens) + 1, "fresh": fresh, "calls": calls, "before": before}


def profiles(folder: Path) -> list[Path]:
    """The profiles callgrind wrote into `folder` (``cg.out.1``, ``cg.out.2``, ...), in the
    order written."""
    return sorted(folder.glob("cg.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))


def instructions(dump: Path) -> int:
    """The instructions one profile counted."""
    with dump.open() as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise SystemExit(f"{dump}: no totals line")


def heaviest_functions(dump: Path, k: int) -> list[tuple[str, int]]:
    """The `k` functions of guided with the most instructions inside them (callees included) in
    one profile, the mask function itself left out."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: list[tuple[str, int]] = []
    for line in out.splitlines():
        # `Ir (share)  file:function [object]`; a function's name may hold spaces (`<impl ...>`).
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+\S*?:(guided_core::.+?)(?: \[|$)", line)
        if m and m.group(2) != MASK_FUNCTION:
            found.append(
                (m.group(2).removeprefix("guided_core::"), int(m.group(1).replace(",", "")))
            )
    return sorted(found, key=lambda f: -f[1])[:k]


def profile(vocab_name: str, workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """Runs `drive` under callgrind and reads its profiles back, one per computed mask."""
    with tempfile.TemporaryDirectory(prefix="guided-mask-profile-") as tmp:
        folder = Path(tmp)
        report = folder / "drive.json"
        cmd = [
            "valgrind",
            "--tool=callgrind",
            f"--toggle-collect={MASK_FUNCTION}",
            f"--dump-after={MASK_FUNCTION}",
            f"--callgrind-out-file={folder / 'cg.out'}",
            sys.executable,
            __file__,
            "--drive",
            str(report),
            "--compiles",
            str(args.compiles),
            vocab_name,
            workload,
        ]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0 or not report.exists():
            raise SystemExit(
                f"{vocab_name}/{workload}: the profiled run failed:\n{run.stderr[-2000:]}"
            )
        driven = json.loads(report.read_text())
        dumps = profiles(folder)
        totals = [instructions(p) for p in dumps]
        fresh: list[int] = driven["fresh"]
        if len(totals) != driven["calls"]:
            raise SystemExit(
                f"{vocab_name}/{workload}: {len(totals)} profiles written for "
                f"{driven['calls']} masks computed"
            )
        last = totals[len(totals) - len(fresh) :]
        dumps = dumps[len(dumps) - len(fresh) :]
        order = sorted(range(len(fresh)), key=lambda i: -last[i])[: args.top]
        top = [
            {
                "position": fresh[i],
                "instructions": last[i],
                "before": driven["before"][fresh[i]][-40:],
                "functions": heaviest_functions(dumps[i], args.functions),
            }
            for i in order
        ]
    ranked = sorted(last)
    return {
        "vocab": vocab_name,
        "workload": workload,
        "positions": driven["positions"],
        "masks_computed": len(fresh),
        "pass_instructions": sum(last),
        "median": ranked[len(ranked) // 2] if ranked else 0,
        "p99": ranked[max(0, math.ceil(0.99 * len(ranked)) - 1)] if ranked else 0,
        "per_position": dict(zip(fresh, last)),
        "top": top,
    }


def show(r: dict[str, Any]) -> None:
    print(
        f"{r['vocab']} {r['workload']}: {r['pass_instructions']:,} instructions in "
        f"{r['masks_computed']} masks computed of {r['positions']} positions; per computed mask "
        f"median {r['median']:,}, p99 {r['p99']:,}"
    )
    for t in r["top"]:
        funcs = ", ".join(f"{name} {n:,}" for name, n in t["functions"])
        print(f"  position {t['position']:4d}: {t['instructions']:>10,}  after {t['before']!r}")
        if funcs:
            print(f"      {funcs}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("vocab", choices=peers.VOCAB_NAMES)
    ap.add_argument("workload", nargs="+", choices=[w.name for w in index.workloads()])
    ap.add_argument("--compiles", type=int, default=2, help="compiles and passes; the last counts")
    ap.add_argument("--top", type=int, default=8, help="most expensive positions shown")
    ap.add_argument("--functions", type=int, default=4, help="functions shown per position")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--drive", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.drive:
        # The process under valgrind: drive the first workload and report what it met.
        args.drive.write_text(json.dumps(drive(args.vocab, args.workload[0], args.compiles)))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (Debian: apt-get install valgrind)")
    results = []
    for workload in args.workload:
        r = profile(args.vocab, workload, args)
        show(r)
        results.append(r)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
