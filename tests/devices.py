"""The devices the sampling tests run on: the CPU always, CUDA where a device is present.

The transforms, the sampler and the stop strings take other code paths on a CUDA device (sorts
instead of the CPU's windows, no host syncs, device-side tables), so the tests that compare them
with their oracles run once per device. Without a GPU the CUDA runs are skipped and say why.
"""

from __future__ import annotations

import pytest
import torch

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

#: Parameters for ``@pytest.mark.parametrize("device", DEVICES)``.
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]
