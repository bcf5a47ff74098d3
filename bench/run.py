"""Runs every benchmark in this folder, one after the other (``make bench``)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ["dfa.py", "index.py", "schema.py", "sampler.py", "transforms.py"]

if __name__ == "__main__":
    selected = sys.argv[1:] or BENCHMARKS
    for name in selected:
        print(f"\n=== {name} ===", flush=True)
        sys.argv = [str(HERE / name)]  # each benchmark parses its own (default) options
        runpy.run_path(str(HERE / name), run_name="__main__")
