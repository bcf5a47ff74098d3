"""Packed token bitmasks in torch: allocate one, fill it from a batch of guides, apply it to logits.

A constraint speaks in sets of token ids. For a 152k vocabulary a set is 4,752 int32 words: token
``t`` is bit ``t % 32`` (least significant first) of word ``t // 32``, and a set bit means allowed.
That layout is the one xgrammar, llguidance and outlines-core use, so a buffer filled by any of them
can be applied here and the other way round.

Applying a mask writes ``-inf`` into the logits of the tokens whose bit is clear. The semantics,
argument checks included, are those of xgrammar's ``apply_token_bitmask_inplace``: 1-D or 2-D
logits and masks, ``vocab_size`` defaulting to the narrower of the two widths (with a warning when
the mask does not cover every logit, because the uncovered tail stays sampleable), ``indices``
naming the rows to touch when a batch mixes guided and free requests.

Two paths do the work. On the CPU the words are unpacked by ``numpy.unpackbits`` in little-endian
bit order, which turns each word into exactly its 32 tokens in order; the resulting byte-per-token
mask feeds one ``masked_fill_``. Rows are processed in chunks sized to stay in cache, so the cost is
two streaming passes per row (unpack, fill) and no temporary the size of the whole batch. On a CUDA
device a Triton kernel does it in one pass: each program owns a block of one row, loads the block's
words once, expands them to bits in registers and stores ``-inf`` where a bit is clear. It never
reads the logits, so it moves the mask plus the masked fraction of the row; on a large batch that
is below the cost of reading and writing the logits once. Triton is imported only when that path
runs (or when a test runs the kernel under ``TRITON_INTERPRET=1`` on the CPU).

``fill_next_token_bitmask`` is a seam: when the Rust extension provides the batched, GIL-releasing
fill it is used for the native guides; any other object with ``fill_bitmask(bitmask, row)`` (the
guide protocol) is filled by calling that method, so engines and tests can bring their own guides.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np
import torch

from guided._transfer import to_device

__all__ = [
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_width",
    "fill_next_token_bitmask",
]

_FULL_WORD = -1  # all 32 bits set: every token allowed
# Tokens per CPU chunk: the byte-per-token mask of one chunk stays in L2.
_CPU_CHUNK_TOKENS = 1 << 18
# Tokens handled by one Triton program.
_TRITON_BLOCK = 4096


def bitmask_width(vocab_size: int) -> int:
    """Number of int32 words a mask over ``vocab_size`` tokens needs: ``ceil(vocab_size / 32)``."""
    if vocab_size < 0:
        raise ValueError(f"vocab_size must be >= 0, got {vocab_size}")
    return (vocab_size + 31) // 32


def allocate_token_bitmask(batch: int, vocab_size: int) -> torch.Tensor:
    """A CPU int32 tensor ``[batch, ceil(vocab_size / 32)]`` with every bit set (all allowed)."""
    if batch < 0:
        raise ValueError(f"batch must be >= 0, got {batch}")
    return torch.full((batch, bitmask_width(vocab_size)), _FULL_WORD, dtype=torch.int32)


def apply_token_bitmask_inplace(
    logits: torch.Tensor,
    bitmask: torch.Tensor,
    *,
    indices: Sequence[int] | torch.Tensor | None = None,
    vocab_size: int | None = None,
) -> None:
    """Set ``logits[i, t] = -inf`` wherever bit ``t`` of ``bitmask[i]`` is clear.

    ``logits`` is ``[batch, V]`` or ``[V]`` (float32, float16, bfloat16 or float64); ``bitmask``
    is int32 ``[batch, W]`` or ``[W]`` on the same device. Only ``logits[..., :vocab_size]`` is
    touched; ``vocab_size`` defaults to ``min(V, 32 * W)``. With ``indices`` only those rows are
    masked (row ``i`` of the logits with row ``i`` of the mask) and the batch sizes may differ.
    """
    logits2d, bitmask2d = _check_shapes(logits, bitmask)
    detected = min(logits2d.shape[1], bitmask2d.shape[1] * 32)
    if vocab_size is None:
        if bitmask2d.shape[1] * 32 < logits2d.shape[1]:
            warnings.warn(
                f"the bitmask covers only {bitmask2d.shape[1] * 32} tokens but the logits have "
                f"{logits2d.shape[1]}, so logits[..., {bitmask2d.shape[1] * 32}:] are left "
                "unmasked; allocate the mask for the full width or pass vocab_size",
                stacklevel=2,
            )
        vocab_size = detected
    elif not 0 <= vocab_size <= detected:
        raise ValueError(
            f"vocab_size must be in [0, {detected}] (the logits are {logits2d.shape[1]} wide and "
            f"the bitmask covers {bitmask2d.shape[1] * 32} tokens), got {vocab_size}"
        )
    rows = _check_indices(indices, logits2d.shape[0], bitmask2d.shape[0])
    if vocab_size == 0 or (rows is not None and len(rows) == 0) or logits2d.shape[0] == 0:
        return
    if logits2d.device.type == "cpu":
        _apply_cpu(logits2d, bitmask2d, rows, vocab_size)
    elif logits2d.device.type == "cuda":
        _apply_triton(logits2d, bitmask2d, rows, vocab_size)
    else:
        _apply_torch(logits2d, bitmask2d, rows, vocab_size)


def fill_next_token_bitmask(
    guides: Sequence[Any],
    bitmask: torch.Tensor,
    indices: Sequence[int] | None = None,
    *,
    threads: int | None = None,
) -> None:
    """Fill row ``indices[i]`` (or ``i``) of ``bitmask`` with the allowed tokens of ``guides[i]``.

    Native guides are filled by the extension in one call with the GIL released (``threads``
    bounds its parallelism); any other object implementing ``fill_bitmask(bitmask, row)`` is
    filled through that method, one call per guide.
    """
    if indices is not None and len(indices) != len(guides):
        raise ValueError(f"indices has {len(indices)} entries for {len(guides)} guides")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    native = _native_fill(guides)
    if native is not None:
        native(guides, bitmask, None if indices is None else list(indices), threads=threads)
        return
    for i, guide in enumerate(guides):
        guide.fill_bitmask(bitmask, i if indices is None else indices[i])


def _native_fill(guides: Sequence[Any]) -> Callable[..., None] | None:
    """The extension's batched fill, when it exists and every guide is one of its own."""
    from guided import _lib

    fill: Callable[..., None] | None = getattr(_lib, "fill_next_token_bitmask", None)
    guide_type: type | None = getattr(_lib, "Guide", None)
    if fill is None or guide_type is None:
        return None
    return fill if all(isinstance(g, guide_type) for g in guides) else None


def _check_shapes(logits: torch.Tensor, bitmask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if bitmask.device != logits.device:
        raise ValueError(
            f"logits and bitmask must be on the same device, got {logits.device} and "
            f"{bitmask.device}"
        )
    if bitmask.dtype != torch.int32:
        raise ValueError(f"bitmask must be int32, got {bitmask.dtype}")
    if not logits.dtype.is_floating_point:
        raise ValueError(f"logits must be a floating-point tensor, got {logits.dtype}")
    if logits.dim() not in (1, 2):
        raise ValueError(f"logits must be 1-D or 2-D, got {logits.dim()}-D")
    if bitmask.dim() not in (1, 2):
        raise ValueError(f"bitmask must be 1-D or 2-D, got {bitmask.dim()}-D")
    logits2d = logits.unsqueeze(0) if logits.dim() == 1 else logits
    bitmask2d = bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask
    return logits2d, bitmask2d


def _check_indices(
    indices: Sequence[int] | torch.Tensor | None, logits_rows: int, mask_rows: int
) -> list[int] | None:
    if indices is None:
        if logits_rows != mask_rows:
            raise ValueError(
                "without indices the logits and the bitmask must have the same number of rows, "
                f"got {logits_rows} and {mask_rows}"
            )
        return None
    if isinstance(indices, torch.Tensor):
        if indices.dim() != 1 or indices.dtype.is_floating_point or indices.dtype == torch.bool:
            raise ValueError("indices must be a 1-D integer tensor or a sequence of ints")
        rows = [int(i) for i in indices.tolist()]
    else:
        rows = [int(i) for i in indices]
    bound = min(logits_rows, mask_rows)
    for i in rows:
        if not 0 <= i < bound:
            raise ValueError(f"index {i} is out of range [0, {bound})")
    return rows


def _row_runs(rows: list[int] | None, count: int, per_chunk: int) -> list[tuple[int, int]]:
    """Half-open row ranges covering ``rows`` (or all ``count`` rows), none over ``per_chunk``."""
    if rows is None:
        return [(r, min(r + per_chunk, count)) for r in range(0, count, per_chunk)]
    runs: list[tuple[int, int]] = []
    for r in sorted(set(rows)):
        if runs and runs[-1][1] == r and r - runs[-1][0] < per_chunk:
            runs[-1] = (runs[-1][0], r + 1)
        else:
            runs.append((r, r + 1))
    return runs


def _apply_cpu(
    logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int] | None, vocab_size: int
) -> None:
    words_needed = bitmask_width(vocab_size)
    words = bitmask[:, :words_needed].numpy()
    if sys.byteorder != "little":
        words = words.astype("<i4")
    per_chunk = max(1, _CPU_CHUNK_TOKENS // vocab_size)
    for start, stop in _row_runs(rows, logits.shape[0], per_chunk):
        # Inverted words unpack to 1 exactly where a token is disallowed: the fill mask itself.
        inverted = np.ascontiguousarray(np.invert(words[start:stop]))
        banned = np.unpackbits(
            inverted.view(np.uint8), axis=1, count=vocab_size, bitorder="little"
        ).view(np.bool_)
        logits[start:stop, :vocab_size].masked_fill_(torch.from_numpy(banned), -math.inf)


def _apply_torch(
    logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int] | None, vocab_size: int
) -> None:
    """Device-agnostic fallback for accelerators other than CUDA: unpack with shifts."""
    words = bitmask[:, : bitmask_width(vocab_size)]
    if rows is not None:
        index = to_device(sorted(set(rows)), torch.long, logits.device)
        words = words.index_select(0, index)
    shifts = torch.arange(32, device=words.device, dtype=torch.int32)
    banned = ((words.unsqueeze(-1) >> shifts) & 1).eq(0).flatten(1)[:, :vocab_size]
    if rows is None:
        logits[:, :vocab_size].masked_fill_(banned, -math.inf)
    else:
        view = logits[index, :vocab_size].masked_fill_(banned, -math.inf)
        logits[index, :vocab_size] = view


def _apply_triton(
    logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int] | None, vocab_size: int
) -> None:
    if logits.stride(1) != 1 or bitmask.stride(1) != 1:
        raise ValueError("the Triton path needs logits and bitmask rows to be contiguous")
    if vocab_size == 0 or (rows is not None and not rows):
        return
    from guided._bitmask_triton import apply_kernel

    if rows is None:
        num_rows = logits.shape[0]
        index_tensor = None
    else:
        num_rows = len(rows)
        index_tensor = to_device(rows, torch.int32, logits.device)
    grid = (num_rows, (vocab_size + _TRITON_BLOCK - 1) // _TRITON_BLOCK)
    apply_kernel[grid](
        logits,
        bitmask,
        index_tensor,
        vocab_size,
        logits.stride(0),
        bitmask.stride(0),
        HAS_INDICES=index_tensor is not None,
        BLOCK=_TRITON_BLOCK,
        num_warps=8,
    )
