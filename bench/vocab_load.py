"""Vocabulary load time for each shared vocabulary, beside the tokenizer library's own load.

A vocabulary is loaded once per model, so this is a start-up cost, not a per-request one; the
target is "well under a second" for the 200k-token o200k. Each row times guided's loader (file
read, parse, spelling undone to bytes, compact storage) and, for scale, the reference library
reading the same file (``tokenizers.Tokenizer.from_file``, ``tiktoken`` rank loading plus
``Encoding``, ``sentencepiece``). Medians of several runs; results go to
``bench/results/vocab_load.json``.

Run: ``python bench/vocab_load.py``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sentencepiece
import tiktoken
import tiktoken.load
import tokenizers

from guided import Vocabulary

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("GUIDED_SHARED", ROOT.parent / "shared")) / "vocab"
RESULTS = ROOT / "bench" / "results"
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TIKTOKEN_PATTERN = (  # cl100k's split pattern; o200k's costs about the same to compile
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


def timed(fn: Callable[[], Any], repeat: int = 5) -> tuple[float, Any]:
    """Median seconds of `repeat` calls, and the last result."""
    samples = []
    result = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), result


def qwen2_json() -> str:
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers

    folder = SHARED / "qwen2"
    tok = tokenizers.Tokenizer(
        models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt"))
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    added = json.loads((folder / "added_tokens.json").read_text())
    for content, _ in sorted(added.items(), key=lambda kv: kv[1]):
        tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
    return str(tok.to_str())


def tiktoken_reference(path: Path) -> tiktoken.Encoding:
    ranks = tiktoken.load.load_tiktoken_bpe(str(path))
    return tiktoken.Encoding(
        name=path.stem, pat_str=TIKTOKEN_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )


def main() -> None:
    os.environ["TIKTOKEN_CACHE_DIR"] = ""  # tiktoken otherwise caches copies of local files
    gpt2 = SHARED / "gpt2_tokenizer.json"
    neox = SHARED / "neox_20B_tokenizer.json"
    llama2 = SHARED / "llama2_tokenizer.model"
    cl100k = SHARED / "cl100k_base.tiktoken"
    o200k = SHARED / "o200k_base.tiktoken"
    qwen2 = qwen2_json()
    cases: list[tuple[str, Callable[[], Vocabulary], Callable[[], Any], str]] = [
        (
            "gpt2 (tokenizer.json)",
            lambda: Vocabulary.from_tokenizer_json(gpt2),
            lambda: tokenizers.Tokenizer.from_file(str(gpt2)),
            "tokenizers",
        ),
        (
            "neox-20b (tokenizer.json)",
            lambda: Vocabulary.from_tokenizer_json(neox),
            lambda: tokenizers.Tokenizer.from_file(str(neox)),
            "tokenizers",
        ),
        (
            "qwen2 (tokenizer.json text)",
            lambda: Vocabulary.from_tokenizer_json(qwen2, vocab_size=151_936),
            lambda: tokenizers.Tokenizer.from_str(qwen2),
            "tokenizers",
        ),
        (
            "llama-2 (sentencepiece .model)",
            lambda: Vocabulary.from_sentencepiece(llama2),
            lambda: sentencepiece.SentencePieceProcessor(model_file=str(llama2)),
            "sentencepiece",
        ),
        (
            "cl100k_base (.tiktoken)",
            lambda: Vocabulary.from_tiktoken(cl100k),
            lambda: tiktoken_reference(cl100k),
            "tiktoken",
        ),
        (
            "o200k_base (.tiktoken)",
            lambda: Vocabulary.from_tiktoken(o200k),
            lambda: tiktoken_reference(o200k),
            "tiktoken",
        ),
    ]
    rows = []
    header = (
        f"{'vocabulary':32} {'ids':>8} {'guided ms':>10} {'MB':>6} {'reference':>14} {'ref ms':>8}"
    )
    print(header)
    print("-" * len(header))
    for name, ours, reference, ref_name in cases:
        seconds, vocab = timed(ours)
        ref_seconds, _ = timed(reference, repeat=3)
        row = {
            "vocabulary": name,
            "ids": len(vocab),
            "vocab_size": vocab.vocab_size,
            "guided_ms": seconds * 1e3,
            "memory_bytes": vocab.memory_bytes(),
            "reference": ref_name,
            "reference_ms": ref_seconds * 1e3,
        }
        rows.append(row)
        print(
            f"{name:32} {len(vocab):>8} {seconds * 1e3:>10.1f} "
            f"{vocab.memory_bytes() / 1e6:>6.2f} {ref_name:>14} {ref_seconds * 1e3:>8.1f}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "vocab_load.json"
    out.write_text(json.dumps({"benchmark": "vocab_load", "rows": rows}, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
