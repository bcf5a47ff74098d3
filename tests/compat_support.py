"""Helpers shared by the shim tests: the GPT-2 vocabulary read independently of guided, bit
unpacking, and a seeded walk policy.

The peers are fed the vocabulary the way vLLM feeds outlines-core: every token of ``tokenizer.json``
decoded through GPT-2's byte-to-unicode table (rebuilt here from its definition, not imported from
guided or xgrammar), special tokens and EOS left out.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import numpy as np

from conftest import shared_path

GPT2_EOS = 50256
GPT2_VOCAB_SIZE = 50257


def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's ``bytes_to_unicode`` inverted: printable bytes map to themselves, the other bytes
    to U+0100 onwards in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars = list(printable)
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


@cache
def gpt2_tokenizer_json() -> str:
    return str(shared_path("vocab", "gpt2_tokenizer.json"))


@cache
def gpt2_token_map() -> dict[bytes, list[int]]:
    """``{token bytes: [ids]}`` of GPT-2 without special tokens and EOS."""
    with open(gpt2_tokenizer_json(), encoding="utf-8") as f:
        data = json.load(f)
    special = {t["id"] for t in data["added_tokens"] if t["special"]}
    decoder = gpt2_byte_decoder()
    out: dict[bytes, list[int]] = {}
    for token, token_id in data["model"]["vocab"].items():
        if token_id in special or token_id == GPT2_EOS:
            continue
        out.setdefault(bytes(decoder[c] for c in token), []).append(token_id)
    return out


@cache
def gpt2_token_bytes() -> dict[int, bytes]:
    return {i: b for b, ids in gpt2_token_map().items() for i in ids}


def unpack(words: np.ndarray, vocab_size: int) -> np.ndarray:
    """One bool per token id from a packed int32 row (bit ``t % 32`` of word ``t // 32``)."""
    bits = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), bitorder="little")
    return bits[:vocab_size].astype(bool)


def allowed_ids(words: np.ndarray, vocab_size: int) -> set[int]:
    return {int(t) for t in np.flatnonzero(unpack(words, vocab_size))}


def gpt2_hf_tokenizer() -> Any:
    """The GPT-2 tokenizer as a transformers fast tokenizer, from the local file."""
    return _hf_tokenizer(gpt2_tokenizer_json())


@cache
def _hf_tokenizer(path: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=path)


@cache
def regex_corpus() -> list[tuple[str, str]]:
    """(pattern, text) pairs from rust-lang/regex's TOML suite in ``../shared/corpus/regex``:
    single patterns over UTF-8 text, in the suite's order, each pair once."""
    import tomllib

    root = shared_path("corpus", "regex")
    pairs: dict[tuple[str, str], None] = {}
    for path in sorted(root.glob("*.toml")) + sorted(root.glob("fowler/*.toml")):
        for case in tomllib.loads(path.read_text())["test"]:
            if isinstance(case["regex"], list) or case.get("unescape"):
                continue
            if case.get("unicode") is False or case.get("utf8") is False or "bounds" in case:
                continue
            pairs[(case["regex"], case["haystack"])] = None
    return list(pairs)
