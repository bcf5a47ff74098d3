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

* **sorted** (:func:`sorted_thresholds`): sort each row's keys, carry the weights along, take the
  running sum at the start of each tie group. No host sync and no data-dependent shape, so it runs
  under ``torch.compile``, in a CUDA graph, and on any device where sorting a row is cheap;
* **windows** (:func:`windows`, CPU, eager): the survivors are usually a short prefix of the sorted
  row, so look at the ``W`` largest keys plus the next one (the sentinel), from
  ``filters.top_scores``. If the rule removes the sentinel, every key outside the window is removed
  too and the window holds every survivor; otherwise the window grows eightfold, up to the whole
  row. The host reads back which rows were resolved, which on a CPU costs nothing, and a typical row
  is resolved in one round of a ``topk``-sized selection instead of a 128k-element sort. Each round
  reports its rows' window ids and survivor counts, so a caller can rebuild a row from its
  survivors instead of comparing every score with the threshold. Windows grow only while they are
  cheap to select; a row still unresolved then (a flat distribution, whose survivors are much of
  the row) is cut by :func:`~guided.sampling.radix.mass_thresholds`, a radix selection over the
  keys' bits that costs a few passes over the row, never a sort.

Weights are asked for only where they are needed (``weights_at(ids)``): the window's tokens, or the
sorted row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from guided.sampling.filters import FIRST_WINDOW, WINDOW_GROWTH, selects_from_groups, top_scores
from guided.sampling.radix import mass_thresholds

__all__ = ["Cut", "Window", "sorted_thresholds", "windows"]

#: ``weights_at(rows, ids)``: the weights of tokens ``ids`` (``[len(rows), W]``) of rows ``rows``
#: (``None``: every row, in order; ``ids`` ``None``: every token, in order).
WeightsAt = Callable[[torch.Tensor | None, torch.Tensor | None], torch.Tensor]


@dataclass
class Window:
    """Rows resolved by one round: ``rows`` index the caller's rows; for row ``rows[j]`` the
    survivors are ``ids[j, :kept[j]]``, and ``threshold[j]`` is the smallest surviving key."""

    rows: torch.Tensor
    ids: torch.Tensor
    kept: torch.Tensor
    threshold: torch.Tensor


@dataclass
class Cut:
    """Rows cut by selection: row ``rows[j]`` keeps every key at least ``threshold[j]``."""

    rows: torch.Tensor
    threshold: torch.Tensor


def _prefix(
    keys: torch.Tensor, weights: torch.Tensor, limit: torch.Tensor, size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rule over keys sorted in descending order (``[rows, size]``, plus a sentinel column
    when wider): (survivor count, threshold, sentinel removed)."""
    # Mass strictly above each key: the exclusive running sum at the start of its tie group.
    exclusive = weights.cumsum(1) - weights
    column = torch.arange(keys.shape[1], device=keys.device)
    starts = torch.ones_like(keys, dtype=torch.bool)
    starts[:, 1:] = keys[:, 1:] != keys[:, :-1]
    group_start = torch.where(starts, column, 0).cummax(dim=1).values
    above = exclusive.gather(1, group_start)
    keep = (above < limit.unsqueeze(1)) | (group_start == 0)
    kept = keep[:, :size].sum(1).clamp(min=1)
    threshold = keys.gather(1, (kept - 1).unsqueeze(1)).squeeze(1)
    if keys.shape[1] > size:
        removed = ~keep[:, size]
    else:
        removed = torch.ones_like(kept, dtype=torch.bool)
    return kept, threshold, removed


def sorted_thresholds(
    keys: torch.Tensor, weights_at: WeightsAt, limit: torch.Tensor
) -> torch.Tensor:
    """Per row, the smallest surviving key, from a full sort (no host sync)."""
    values, order = torch.sort(keys, dim=1, descending=True)
    _, threshold, _ = _prefix(values, weights_at(None, order), limit, keys.shape[1])
    return threshold


def windows(keys: torch.Tensor, weights_at: WeightsAt, limit: torch.Tensor) -> list[Window | Cut]:
    """The survivors of every row, from growing windows of its largest keys (CPU, eager).

    ``keys`` is ``[rows, V]``; ``weights_at(rows, ids)`` returns the weights of tokens ``ids`` of
    rows ``rows`` (both index the caller's rows); ``limit`` is ``[rows]``. Every row takes the
    same windows, so a row's result does not depend on the batch around it.
    """
    count, vocab = keys.shape
    pending = torch.arange(count, device=keys.device)
    size = FIRST_WINDOW
    found: list[Window | Cut] = []
    while pending.numel():
        size = min(size, vocab)
        everything = pending.numel() == count
        sub = keys if everything else keys.index_select(0, pending)
        values, ids = top_scores(sub, size + 1 if size < vocab else size)
        kept, threshold, resolved = _prefix(
            values,
            weights_at(None if everything else pending, ids),
            limit.index_select(0, pending),
            size,
        )
        done = resolved.nonzero().squeeze(1)
        found.append(Window(pending[done], ids[done, :size], kept[done], threshold[done]))
        pending = pending[~resolved]
        size *= WINDOW_GROWTH
        cuttable = keys.dtype in (torch.float32, torch.float16, torch.bfloat16)
        if pending.numel() and cuttable and not selects_from_groups(min(size, vocab) + 1, vocab):
            everything = pending.numel() == count
            rows = keys if everything else keys.index_select(0, pending)
            cut = mass_thresholds(
                rows.float(),
                weights_at(None if everything else pending, None).float(),
                limit.index_select(0, pending),
            )
            found.append(Cut(pending, cut))
            break
    return found
