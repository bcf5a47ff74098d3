"""The README's promises: its examples run, its set-up commands exist, its figures are generated.

Every fenced ```` ```python ```` block of README.md is executed as written, in a fresh namespace.
The Transformers example loads a checkpoint by name; here ``from_pretrained`` is pointed at a
2-layer GPT-2 with random weights and the real GPT-2 tokenizer from ``shared/vocab`` (the hub is
never contacted), and the example's own ``json.loads`` is the check that the output is JSON.

The benchmark section is produced by ``bench/readme.py`` from ``bench/results/*.json``; the
renderer is tested on a small results document: the numbers land in the tables, the text outside
the markers is untouched, and rendering twice changes nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from conftest import ROOT, shared_path

README = ROOT / "README.md"


def python_blocks() -> list[tuple[int, str]]:
    """(line number, code) of each ```python block."""
    text = README.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```$", text, flags=re.S | re.M):
        blocks.append((text.count("\n", 0, match.start()) + 1, match.group(1)))
    return blocks


BLOCKS = python_blocks()


def test_the_readme_has_examples_and_the_two_setup_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(BLOCKS) >= 3
    assert "make demo" in text and "make test" in text
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert text.count("<!-- bench:begin -->") == 1 and text.count("<!-- bench:end -->") == 1


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """``from_pretrained`` of any name returns a tiny random GPT-2 and the real GPT-2 tokenizer."""
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(shared_path("vocab", "gpt2_tokenizer.json")),
        eos_token="<|endoftext|>",
    )
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer), n_positions=256, n_embd=32, n_layer=2, n_head=2
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tokenizer)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)


@pytest.mark.parametrize(("line", "code"), BLOCKS, ids=[f"line{line}" for line, _ in BLOCKS])
def test_python_example_runs(line: int, code: str, request: pytest.FixtureRequest) -> None:
    if "from_pretrained" in code:
        request.getfixturevalue("offline_hub")
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(code, f"{README}:{line}", "exec"), namespace)
    assert output.getvalue(), "every example prints what it shows"


def test_quick_start_prints_what_its_comment_says() -> None:
    line, code = BLOCKS[0]
    claim = re.search(r"print\(text\.decode\(\)\)  # (\{.*?\}):", code)
    assert claim is not None, "the quick start shows its output in a comment"
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(code, f"{README}:{line}", "exec"), {"__name__": "__readme__"})
    assert output.getvalue().strip() == claim.group(1)


# ---------------------------------------------------------------------------- bench/readme.py


def bench_readme() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_readme", ROOT / "bench" / "readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def engine(status: str = "ok", **figures: Any) -> dict[str, Any]:
    return {"status": status, **figures}


RESULTS: dict[str, Any] = {
    "index": {
        "cpus": 2,
        "load_average": {"before": [1.5, 1.0, 0.5], "after": [2.25, 1.0, 0.5]},
        "problems": ["gpt2/email: outlines-core rejected token 12 (id 13)"],
        "vocabularies": {
            "gpt2": {
                "vocab_size": 50257,
                "workloads": {
                    "digits": {
                        "tokens": 13,
                        "engines": {
                            "guided": engine(
                                compile_ms=0.0265,
                                ttfm_ms=0.0487,
                                first_median_us=10.4,
                                first_p99_us=22.2,
                                warm_median_us=0.461,
                                memory_own_bytes=32460,
                                masks=14,
                                masks_equal_guided=14,
                            ),
                            "xgrammar": engine(
                                compile_ms=4.36,
                                ttfm_ms=4.87,
                                first_median_us=4.2,
                                first_p99_us=70.9,
                                warm_median_us=3.09,
                                memory_own_bytes=145752,
                                masks=14,
                                masks_equal_guided=13,
                            ),
                            "outlines-core": engine("timeout"),
                        },
                    }
                },
                "batch": {
                    "workload": "digits",
                    "rows": [
                        {
                            "engine": "guided",
                            "mode": "warm",
                            "one_thread_ms": 0.0307,
                            "two_threads_ms": 0.0205,
                            "speedup": 1.5,
                        }
                    ],
                },
            }
        },
    },
    "dfa": [{"name": "uuid", "states": 38, "classes": 5, "compile_ms": 0.0835}],
    "schema": {
        "rows": [
            {
                "subset": s,
                "engine": e,
                "schemas": 75,
                "compiled": c,
                "passing": p,
                "invalid acc.": ia,
                "valid rej.": vr,
                "timeouts": 0,
                "crashes": cr,
                "compile ms p50": ms,
                "p95": ms * 10,
                "p99": ms * 20,
                "max": ms * 40,
            }
            for s in ("Glaiveai2K", "total")
            for e, c, p, ia, vr, cr, ms in (
                ("guided", 75, 74, 0, 1, 0, 12.5),
                ("xgrammar", 73, 70, 3, 0, 2, 4.0),
            )
        ],
        "ttfm_pairs": [
            {
                "peer": "xgrammar",
                "schemas both compile": 72,
                "engine": e,
                "p50": ms,
                "p95": ms * 3,
                "p99": ms * 5,
                "max": ms * 7,
            }
            for e, ms in (("guided", 1.5), ("xgrammar", 3.25))
        ],
    },
}


def test_bench_tables_carry_the_recorded_numbers() -> None:
    module = bench_readme()
    section = module.render(RESULTS)
    assert "| digits | guided | 0.0265 | 0.0487 | 10.4 | 22.2 | 0.461 | 0.0325 | 14/14 |" in section
    assert "| digits | xgrammar | 4.36 | 4.87 | 4.20 | 70.9 | 3.09 | 0.146 | 13/14 |" in section
    assert "| digits | outlines-core | - | - | - | - | - | - | timeout |" in section
    # guided / xgrammar: 0.0487 / 4.87 = 0.01 of the time to first mask.
    assert "| digits | xgrammar | 0.0100 | 2.48 | 0.313 | 0.149 | 0.223 |" in section
    assert "| guided | warm | 0.0307 | 0.0205 | 1.50 |" in section
    assert "| uuid | 38 | 5 | 0.0835 |" in section
    assert "| Glaiveai2K | 75 | 74 | 70 |" in section
    assert "| xgrammar | 75 | 73 | 70 | 3 | 0 | 0 | 2 | 4.00 | 40.0 | 80.0 | 160 |" in section
    assert "| xgrammar | 72 | guided | 1.50 | 4.50 | 7.50 | 10.5 |" in section
    assert "| xgrammar | 72 | xgrammar | 3.25 | 9.75 | 16.2 | 22.8 |" in section
    assert "2 CPUs (load average 1.50 before, 2.25 after" in section
    assert "outlines-core rejected token 12" in section


def test_bench_section_is_spliced_between_the_markers_only(tmp_path: Path) -> None:
    module = bench_readme()
    readme = "# title\n\nintro\n\n<!-- bench:begin -->\nold figures\n<!-- bench:end -->\n\nrest\n"
    section = module.render(RESULTS)
    once = module.splice(readme, section)
    assert once.startswith("# title\n\nintro\n\n<!-- bench:begin -->\n")
    assert once.endswith("<!-- bench:end -->\n\nrest\n")
    assert "old figures" not in once and section in once
    assert module.splice(once, section) == once
    with pytest.raises(ValueError, match="exactly once"):
        module.splice("no markers here", section)
    with pytest.raises(ValueError, match="before"):
        module.splice("<!-- bench:end --> x <!-- bench:begin -->", section)
    # The command: render from a results folder into a README file, then --check agrees.
    results = tmp_path / "results"
    results.mkdir()
    (results / "dfa.json").write_text('[{"name": "uuid", "states": 38, "classes": 5}]')
    (results / "broken.json").write_text("{")
    target = tmp_path / "README.md"
    target.write_text(readme)
    assert module.main(["--results", str(results), "--readme", str(target)]) == 0
    assert "| uuid | 38 | 5 | - |" in target.read_text()
    assert module.main(["--results", str(results), "--readme", str(target), "--check"]) == 0
    target.write_text(readme)
    assert module.main(["--results", str(results), "--readme", str(target), "--check"]) == 1


def test_no_results_says_how_to_get_them() -> None:
    assert "run `make bench`" in bench_readme().render({})
