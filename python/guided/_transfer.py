"""Small host lists onto a device without stalling the host.

``torch.tensor(values, device="cuda")`` copies from pageable memory, and a copy from pageable
memory returns only once it has executed, which is after every kernel queued before it: a hidden
host sync. The sampler moves a handful of tiny lists per step (row indices, per-row settings), so
it stages them in pinned memory and copies asynchronously instead; the pinned staging tensor stays
alive with the copy that reads it, as PyTorch's caching host allocator guarantees. On the CPU the
list simply becomes a tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["to_device"]


def to_device(values: Sequence[Any], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``values`` as a 1-D tensor on ``device``, copied asynchronously when it is an accelerator."""
    if device.type == "cpu":
        return torch.tensor(values, dtype=dtype)
    return torch.tensor(values, dtype=dtype).pin_memory().to(device, non_blocking=True)
