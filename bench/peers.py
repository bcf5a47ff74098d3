"""The shared vocabularies, and the peers (xgrammar, llguidance, outlines-core) built over them.

A side-by-side benchmark is only fair if every engine sees the same token ids with the same bytes.
Each peer has its own loader for Hugging Face and tiktoken files, and each reads special tokens,
byte fallback and padding ids a little differently, so here the peers are built from guided's
decoded token bytes instead: xgrammar gets a RAW byte vocabulary, llguidance a ``TokenizerWrapper``
over a small shim, outlines-core its ``{bytes: [ids]}`` map. Ids with no bytes (special tokens,
padding up to the model's width) become what each peer uses for "never text": an empty string for
xgrammar, a ``0xFF``-prefixed special token for llguidance, absence from outlines-core's map.

Texts are tokenized by the real tokenizer of each vocabulary (``tokenizers`` for GPT-2 and Qwen2,
``tiktoken`` for o200k), so a benchmark walks the token boundaries a model would produce; the
benchmark still checks every token against guided before driving anyone with it.

Loading costs a second or two per vocabulary (Qwen2's tokenizer is rebuilt from its BPE files);
peer construction is timed by the caller, since it is a per-vocabulary, not per-constraint, cost.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import guided
from common import shared_root

VOCAB = shared_root() / "vocab"

# o200k's pre-tokenization pattern, as tiktoken_ext.openai_public writes it (that module only
# builds the encoding from a download URL, so the pattern is restated here for offline use).
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

VOCAB_NAMES = ("gpt2", "qwen2", "o200k")


@dataclass
class Loaded:
    """A vocabulary and the real tokenizer of the model it belongs to."""

    name: str
    vocab: guided.Vocabulary
    encode: Callable[[str], list[int]]


def load(name: str) -> Loaded:
    """One of ``VOCAB_NAMES``, as a guided vocabulary plus its real tokenizer."""
    if name == "gpt2":
        import tokenizers

        path = VOCAB / "gpt2_tokenizer.json"
        hf = tokenizers.Tokenizer.from_file(str(path))
        return Loaded(name, guided.Vocabulary.from_tokenizer_json(path), lambda t: hf.encode(t).ids)
    if name == "qwen2":
        import tokenizers
        from vocab_load import qwen2_json

        text = qwen2_json()
        hf = tokenizers.Tokenizer.from_str(text)
        vocab = guided.Vocabulary.from_tokenizer_json(text, vocab_size=151_936)
        return Loaded(name, vocab, lambda t: hf.encode(t).ids)
    if name == "o200k":
        import tiktoken
        import tiktoken.load

        os.environ.setdefault("TIKTOKEN_CACHE_DIR", "")
        path = VOCAB / "o200k_base.tiktoken"
        enc = tiktoken.Encoding(
            name="o200k_base",
            pat_str=O200K_PATTERN,
            mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(path)),
            special_tokens={"<|endoftext|>": 199_999, "<|endofprompt|>": 200_018},
        )
        return Loaded(name, guided.Vocabulary.from_tiktoken(path), enc.encode_ordinary)
    raise ValueError(f"unknown vocabulary {name!r}; expected one of {VOCAB_NAMES}")


def token_bytes(vocab: guided.Vocabulary) -> list[bytes | None]:
    """Every id's bytes up to the model's width; None for ids that are never text."""
    return [vocab.token_bytes(i) for i in range(vocab.vocab_size)]


# --- xgrammar ---------------------------------------------------------------------------------


def xgrammar_info(vocab: guided.Vocabulary, tokens: Sequence[bytes | None]) -> Any:
    """An ``xgrammar.TokenizerInfo`` over exactly these bytes (empty = special, never allowed)."""
    import xgrammar as xgr

    return xgr.TokenizerInfo(
        [b if b is not None else b"" for b in tokens],
        xgr.VocabType.RAW,
        vocab_size=vocab.vocab_size,
        stop_token_ids=list(vocab.eos_token_ids),
    )


# --- llguidance -------------------------------------------------------------------------------


class _LlgShim:
    """What ``llguidance.TokenizerWrapper`` reads: token bytes, EOS/BOS, special ids, and a
    tokenizer (greedy longest match; llguidance only uses it to re-tokenize forced text)."""

    def __init__(self, vocab: guided.Vocabulary, tokens: Sequence[bytes | None]) -> None:
        self.eos_token_id = vocab.eos_token_ids[0]
        self.bos_token_id = None
        self.tokens: list[bytes] = []
        self.special_token_ids: list[int] = []
        for i, b in enumerate(tokens):
            if b is None:
                self.tokens.append(b"\xff<|special_%d|>" % i)
                self.special_token_ids.append(i)
            else:
                self.tokens.append(b)
        self._lookup = {b: i for i, b in enumerate(tokens) if b}
        self._longest = max(len(b) for b in self._lookup)

    def __call__(self, data: bytes | str) -> list[int]:
        if isinstance(data, str):
            data = data.encode("utf-8")
        return greedy_tokenize(data, self._lookup, self._longest)


def llguidance_tokenizer(vocab: guided.Vocabulary, tokens: Sequence[bytes | None]) -> Any:
    import llguidance as llg

    return llg.LLTokenizer(
        llg.TokenizerWrapper(_LlgShim(vocab, tokens)),
        n_vocab=vocab.vocab_size,
        eos_token=list(vocab.eos_token_ids),
    )


# --- outlines-core ----------------------------------------------------------------------------


def outlines_vocabulary(vocab: guided.Vocabulary, tokens: Sequence[bytes | None]) -> Any:
    """outlines-core's vocabulary: one EOS id, every other text token in the bytes -> ids map."""
    import outlines_core as oc

    eos = set(vocab.eos_token_ids)
    by_bytes: dict[bytes, list[int]] = {}
    for i, b in enumerate(tokens):
        if b and i not in eos:
            by_bytes.setdefault(b, []).append(i)
    return oc.Vocabulary(vocab.eos_token_ids[0], by_bytes)


# --- helpers ----------------------------------------------------------------------------------


def greedy_tokenize(data: bytes, lookup: dict[bytes, int], longest: int) -> list[int]:
    """Longest-match tokenization over a bytes -> id map."""
    out = []
    i = 0
    while i < len(data):
        for n in range(min(longest, len(data) - i), 0, -1):
            t = lookup.get(data[i : i + n])
            if t is not None:
                out.append(t)
                i += n
                break
        else:
            raise ValueError(f"no token spells the bytes at offset {i} of {data[:40]!r}...")
    return out
