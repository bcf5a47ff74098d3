# mypy: ignore-errors
# Triton ships no type information and its kernels take no annotations.
"""The Triton kernel behind ``apply_token_bitmask_inplace`` on CUDA.

Kept apart from ``guided.bitmask`` so that importing the torch helpers never imports Triton: this
module is loaded the first time a CUDA tensor is masked (or by a test that runs the kernel under
``TRITON_INTERPRET=1``).

Program ``(r, b)`` owns tokens ``[b * BLOCK, (b + 1) * BLOCK)`` of row ``r`` (or of row
``indices[r]``). It loads the block's ``BLOCK / 32`` words with one vector load, expands them to a
``[BLOCK / 32, 32]`` grid of bits by shifting each word by 0..31, flattens that grid in row-major
order (word ``w``, bit ``j`` is token ``32 w + j``, the shared layout) and stores ``-inf`` where a
bit is clear and the token is below ``vocab_size``. The logits are written, never read.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["apply_kernel"]


@triton.jit
def apply_kernel(
    logits_ptr,
    bitmask_ptr,
    indices_ptr,
    vocab_size,
    logits_stride,
    bitmask_stride,
    HAS_INDICES: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    block = tl.program_id(1)
    if HAS_INDICES:
        row = tl.load(indices_ptr + row)
    row = row.to(tl.int64)
    word_offsets = block * (BLOCK // 32) + tl.arange(0, BLOCK // 32)
    words = tl.load(
        bitmask_ptr + row * bitmask_stride + word_offsets,
        mask=word_offsets * 32 < vocab_size,
        other=-1,
    )
    bits = (words[:, None] >> tl.arange(0, 32)[None, :]) & 1
    banned = tl.reshape(bits == 0, (BLOCK,))
    offsets = block * BLOCK + tl.arange(0, BLOCK)
    tl.store(
        logits_ptr + row * logits_stride + offsets,
        float("-inf"),
        mask=banned & (offsets < vocab_size),
    )
