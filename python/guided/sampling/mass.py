"""Mass thresholds: the smallest key a token needs to stay inside a share of a row's probability.

Top-p and typical sampling keep "the best tokens until they hold a share of the mass". Transformers
computes both with one full sort of the row, a running sum and a comparison; the rule underneath is
the same for both, a function of one key per token (the score for top-p, minus the distance from
the entropy for typical):

    a token stays when the mass of the tokens whose key is strictly larger than its own is below
    ``limit`` (the share times the row's total mass); the tokens with the largest key always stay.

Tokens with equal keys share their fate, so the survivors are exactly the tokens whose key is at
least a per-row *threshold*: the smallest surviving key. (Transformers' sort breaks ties in an
arbitrary order, so where a tie group straddles the boundary it keeps an arbitrary part of it; this
rule keeps the whole group, the one deterministic choice. Elsewhere the two agree, up to the
rounding of running sums that land exactly on the boundary.)

Two ways to find the threshold, with the same answer:

* **sorted**: sort each row's keys, carry the weights along, take the running sum at the start of
  each tie group. No host sync and no data-dependent shape, so it runs under ``torch.compile``, in
  a CUDA graph, and on any device where sorting a row is cheap;
* **windows** (CPU, eager): the survivors are usually a short prefix of the sorted row, so look at
  the ``W`` largest keys plus the next one (the sentinel), from ``filters.top_scores``. If the rule
  removes the sentinel, every key outside the window is removed too and the window holds the answer;
  otherwise the window grows eightfold, up to the whole row. The host reads back which rows were
  resolved, which on a CPU costs nothing, and a typical row is resolved in one round of a
  ``topk``-sized selection instead of a 128k-element sort.
"""

from __future__ import annotations

import torch

from guided.sampling.filters import FIRST_WINDOW, WINDOW_GROWTH, top_scores

__all__ = ["mass_threshold"]


def _prefix(
    keys: torch.Tensor, weights: torch.Tensor, limit: torch.Tensor, size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rule over keys sorted in descending order (``[rows, size]``, plus a sentinel column
    when wider): (threshold, sentinel removed)."""
    # Mass strictly above each key: the exclusive running sum at the start of its tie group.
    exclusive = weights.cumsum(1) - weights
    # (Rows the caller masks out may hold NaN, which searchsorted places past the end.)
    group_start = torch.searchsorted(-keys, -keys, side="left").clamp(max=keys.shape[1] - 1)
    above = exclusive.gather(1, group_start)
    keep = (above < limit.unsqueeze(1)) | (group_start == 0)
    kept = keep[:, :size].sum(1).clamp(min=1)
    threshold = keys.gather(1, (kept - 1).unsqueeze(1)).squeeze(1)
    if keys.shape[1] > size:
        removed = ~keep[:, size]
    else:
        removed = torch.ones_like(kept, dtype=torch.bool)
    return threshold, removed


def _sorted(keys: torch.Tensor, weights: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    values, order = torch.sort(keys, dim=1, descending=True)
    threshold, _ = _prefix(values, weights.gather(1, order), limit, keys.shape[1])
    return threshold


def _windows(keys: torch.Tensor, weights: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    rows, vocab = keys.shape
    threshold = torch.empty(rows, dtype=keys.dtype, device=keys.device)
    pending = torch.arange(rows, device=keys.device)
    size = FIRST_WINDOW
    while pending.numel():
        size = min(size, vocab)
        sub_keys = keys.index_select(0, pending)
        wide = size + 1 if size < vocab else size
        values, ids = top_scores(sub_keys, wide)
        sub_weights = weights.index_select(0, pending).gather(1, ids)
        found, resolved = _prefix(values, sub_weights, limit.index_select(0, pending), size)
        threshold[pending[resolved]] = found[resolved]
        pending = pending[~resolved]
        size *= WINDOW_GROWTH
    return threshold


def mass_threshold(
    keys: torch.Tensor, weights: torch.Tensor, limit: torch.Tensor, *, windows: bool | None = None
) -> torch.Tensor:
    """Per row, the smallest key that survives (see the module notes).

    ``keys`` and ``weights`` are ``[rows, V]`` (weights non-negative, finite); ``limit`` is
    ``[rows]``. ``windows`` picks the strategy; by default windows on the CPU outside of
    ``torch.compile``, the sort elsewhere. Both return the same thresholds.
    """
    if windows is None:
        windows = keys.device.type == "cpu" and not torch.compiler.is_compiling()
    if keys.shape[1] == 0 or keys.shape[0] == 0:
        return torch.full(keys.shape[:1], float("inf"), dtype=keys.dtype, device=keys.device)
    if windows:
        return _windows(keys, weights, limit)
    return _sorted(keys, weights, limit)
