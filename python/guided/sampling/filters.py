"""Temperature, top-k, top-p and min-p as per-row thresholds, without sorting whole rows.

Transformers defines the three truncations through one sort of the row: top-k keeps every token
scoring at least the k-th largest score; top-p sorts ascending, takes the softmax's running sum and
removes the tokens whose running sum is at most ``1 - p``; min-p removes the tokens whose
probability is below ``min_p`` times the largest. They run in that order, after the temperature
division, each on what the previous one left, and the most likely token always survives. Here the
same sets are computed without that sort:

* every rule is a function of a token's score alone, so each leaves the tokens scoring at least
  some value: a per-row *threshold*, and the survivors are a prefix of the row in descending order;
* that prefix is usually short (tens to hundreds of tokens out of 152k), so it is found from a
  *window*, the ``M`` best scores of the row (``top_scores``: group maxima, then a ``topk`` over
  the few groups that can hold them), plus one score beyond it (the sentinel). Top-k reads its
  threshold off the window. Top-p needs, for each window score, the probability mass of the
  strictly better tokens: a running sum over the window, taken at the start of each tie group,
  against ``p`` times the mass of the whole (top-k truncated) row, one reduction over the row.
  Min-p compares ``exp(score - max)`` with ``min_p``;
* the window is enough when the sentinel is removed by some rule: then every token outside the
  window is removed too. Otherwise the window grows (eightfold, or at once to the size the missing
  top-p mass suggests) while it stays cheap to select. A row still unresolved then (a flat
  distribution, whose nucleus is much of the row) is cut by a radix selection over its scores'
  bits (:mod:`guided.sampling.radix`): a few passes over the row, never a sort. Real
  distributions resolve in the first window.

Ties are kept or removed together: a token's fate depends on its score only. Transformers sorts
with an unstable sort, so where a tie group straddles the top-p boundary it keeps an arbitrary part
of it; here the whole group survives. Everywhere else the sets are equal, up to float rounding of
the running sums at the exact boundary. ``top_p = 1`` and ``min_p = 0`` disable their rule
(Transformers' top-p at 1 still drops tokens whose probability underflows to zero; they could not
be drawn either way).

On a CUDA device the window loop would need a host sync per round, so there the rules become
thresholds directly: top-k from one ``topk`` over the batch's largest ``k``, top-p from a full sort
of the rows that use it (the sort is cheap there), min-p applied during the draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from guided._transfer import to_device
from guided.sampling._params import divide_as_by_a_float
from guided.sampling.radix import mass_thresholds

__all__ = [
    "Cut",
    "Truncation",
    "apply_filters",
    "apply_temperature",
    "resolve_windows",
    "selects_from_groups",
    "top_scores",
]

#: First window size for rows without top-k; grown eightfold while a row is unresolved.
FIRST_WINDOW = 64
WINDOW_GROWTH = 8
#: Tokens per group of the group-maximum preselection in ``top_scores``.
_SELECT_GROUP = 64


@dataclass(frozen=True)
class Truncation:
    """Per-row truncation settings (Python lists: the host decides which rows need what)."""

    top_k: Sequence[int]
    top_p: Sequence[float]
    min_p: Sequence[float]

    def __post_init__(self) -> None:
        if not len(self.top_k) == len(self.top_p) == len(self.min_p):
            raise ValueError("top_k, top_p and min_p need one entry per row")

    def __len__(self) -> int:
        return len(self.top_k)

    def rows(self, picked: Sequence[int]) -> Truncation:
        """The settings of the rows ``picked``."""
        return Truncation(
            [self.top_k[i] for i in picked],
            [self.top_p[i] for i in picked],
            [self.min_p[i] for i in picked],
        )

    def uses_top_k(self, i: int, vocab: int) -> bool:
        return 0 < self.top_k[i] < vocab

    def active(self, i: int, vocab: int) -> bool:
        return self.uses_top_k(i, vocab) or self.top_p[i] < 1.0 or self.min_p[i] > 0.0


@dataclass
class WindowResult:
    """Rows resolved by one window round (indices into the rows given to the resolver).

    For row ``rows[j]`` the survivors are ``ids[j, :kept[j]]`` with scores ``scores[j, :kept[j]]``
    (descending), and ``threshold[j]`` is the smallest surviving score: a token survives exactly
    when its score is at least that.
    """

    rows: list[int]
    ids: torch.Tensor
    scores: torch.Tensor
    kept: torch.Tensor
    threshold: torch.Tensor


@dataclass
class Cut:
    """Rows whose survivors are too many for a window (indices into the rows given to the
    resolver): the caller cuts them with ``full_thresholds(..., select=True)``, keeping the scores
    at least the threshold whose weight ``exp(score - best)`` is at least the row's ``min_p``.
    (The caller usually holds those weights already; the cut reuses them.)"""

    rows: list[int]


def apply_temperature(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """``logits / temperature`` per row, in place, as ``TemperatureLogitsWarper`` computes it on
    the logits' device (see :func:`~guided.sampling._params.divide_as_by_a_float`)."""
    return divide_as_by_a_float(logits, temperature.unsqueeze(1), in_place=True)


def row_mass(scores: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """``sum(exp(scores - top))`` per row: the softmax denominator relative to the best score."""
    return torch.exp(scores - top.unsqueeze(1)).sum(dim=1)


def resolve_windows(
    scores: torch.Tensor, settings: Truncation, mass: torch.Tensor | None
) -> list[WindowResult | Cut]:
    """Find each row's surviving prefix from windows of its best scores, growing them as needed.

    ``scores`` are temperature-scaled, ``[rows, V]``, not modified. ``mass`` is
    :func:`row_mass` for the rows that use top-p without top-k (any value elsewhere); it may be
    ``None`` when no row needs it. Every row must have a finite best score.

    A row's windows depend on its own settings only (its first window holds ``FIRST_WINDOW``
    scores, or ``k`` with top-k), so its result does not depend on the batch around it. Windows
    grow while a window is cheap to select (:func:`selects_from_groups`); the rows still
    unresolved then come back as one :class:`Cut`, to be cut by :func:`full_thresholds` with
    selection, a few passes over the row whatever its distribution, instead of growing towards a
    sort.
    """
    vocab = scores.shape[1]
    size_of = [
        max(FIRST_WINDOW, settings.top_k[i] if settings.uses_top_k(i, vocab) else 0)
        for i in range(scores.shape[0])
    ]
    pending = list(range(scores.shape[0]))
    results: list[WindowResult | Cut] = []
    cut: list[int] = []
    while pending:
        groups: dict[int, list[int]] = {}
        for i in pending:
            groups.setdefault(min(size_of[i], vocab), []).append(i)
        pending = []
        for size, members in groups.items():
            everything = len(members) == scores.shape[0]
            rows = scores if everything else scores[members]
            sub_mass = mass if mass is None or everything else mass[members]
            result, unresolved = _window_round(rows, settings.rows(members), sub_mass, size)
            result.rows = [members[i] for i in result.rows]
            results.append(result)
            for i, wanted in unresolved:
                row = members[i]
                size_of[row] = max(size * WINDOW_GROWTH, wanted)
                fits = selects_from_groups(min(size_of[row], vocab) + 1, vocab)
                (pending if fits else cut).append(row)
    if cut:
        results.append(Cut(sorted(cut)))
    return results


def _window_round(
    scores: torch.Tensor, settings: Truncation, mass: torch.Tensor | None, size: int
) -> tuple[WindowResult, list[tuple[int, int]]]:
    """One window per row; returns the resolved rows and, for the others, a size to try next."""
    vocab = scores.shape[1]
    has_sentinel = size < vocab
    values, ids = top_scores(scores, size + 1 if has_sentinel else size)
    kept, threshold, resolved = _window_rules(values, settings, mass, size, vocab)
    done = resolved.nonzero().squeeze(1)
    result = WindowResult(
        rows=done.tolist(),
        ids=ids[done, :size],
        scores=values[done, :size],
        kept=kept[done],
        threshold=threshold[done],
    )
    unresolved = (~resolved).nonzero().squeeze(1).tolist()
    share = None
    if unresolved and mass is not None:
        share = torch.exp(values[:, :size] - values[:, :1]).sum(1) / mass.to(values.dtype)
    wanted = []
    for i in unresolved:
        size_wanted = 0
        if share is not None and settings.top_p[i] < 1.0 and not settings.uses_top_k(i, vocab):
            # A top-p row that is missing mass: a flat tail needs about p / (window share) times
            # the window, so jump there instead of growing through every size in between.
            ratio = settings.top_p[i] / max(float(share[i]), 1e-9)
            size_wanted = min(vocab, int(size * ratio * 1.25))
        wanted.append((i, size_wanted))
    return result, wanted


def selects_from_groups(count: int, vocab: int) -> bool:
    """Whether :func:`top_scores` finds ``count`` scores of a ``vocab``-wide row from group maxima
    (a fraction of the row) rather than a ``topk`` over all of it."""
    return count * _SELECT_GROUP * 2 <= vocab


def top_scores(scores: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``count`` best scores of each row, descending, with their ids (``torch.topk``'s answer).

    ``topk`` over a whole row copies it into (value, index) pairs before selecting, which costs
    far more than reading it. Group maxima find the same answer from a fraction of the row: split
    the row into groups of 64 tokens; the ``count`` best scores all lie in groups whose maximum is
    at least the ``count``-th best group maximum (each of them is at least that large). So one
    reduction over the row, a ``topk`` over the maxima and one over the chosen groups suffice.
    Group ``c`` holds tokens ``c, c + n, c + 2n, ...`` (``n`` groups): the maxima are then an
    elementwise maximum of 64 contiguous slices, which vectorises far better than 64-wide blocks.
    Ties among equal scores may come back in another order than ``torch.topk`` gives; callers only
    rely on the values' order.
    """
    rows, vocab = scores.shape
    groups = vocab // _SELECT_GROUP
    if rows == 0 or not selects_from_groups(count, vocab):
        return torch.topk(scores, count, dim=1)
    covered = groups * _SELECT_GROUP
    maxima = scores[:, :covered].view(rows, _SELECT_GROUP, groups).amax(dim=1)
    best, chosen = torch.topk(maxima, count, dim=1)
    # With ties a row may need more than ``count`` groups: take as many as the neediest row. A tie
    # at -inf needs none (a row masked down to a few tokens ties there in nearly every group, and
    # which -inf tokens fill the window changes nothing).
    tied = (maxima >= best[:, -1:]) & (best[:, -1:] > float("-inf"))
    wanted = int(tied.sum(dim=1).max())
    if wanted > count:
        chosen = torch.topk(maxima, wanted, dim=1).indices
    members = torch.arange(_SELECT_GROUP, device=scores.device) * groups
    ids = (chosen.unsqueeze(2) + members).view(rows, -1)
    if covered < vocab:
        tail = torch.arange(covered, vocab, device=scores.device)
        ids = torch.cat([ids, tail.expand(rows, vocab - covered)], dim=1)
    values, picked = torch.topk(scores.gather(1, ids), count, dim=1)
    return values, ids.gather(1, picked)


def _window_rules(
    values: torch.Tensor, settings: Truncation, mass: torch.Tensor | None, size: int, vocab: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Apply the three rules to sorted windows: (kept prefix length, threshold, resolved).

    ``values`` holds each row's ``size`` best scores in descending order, plus the sentinel (the
    next best) when ``size < vocab``. Branches only on host-side settings, so no device sync.
    """
    rows = values.shape[0]
    device = values.device
    has_sentinel = size < vocab
    weights = torch.exp(values - values[:, :1])
    keep = torch.ones_like(values, dtype=torch.bool)
    # The sentinel is the best score outside the window: once a rule removes it, every token
    # outside the window is removed too, and the window holds the whole surviving prefix.
    sentinel_gone = torch.zeros(rows, dtype=torch.bool, device=device)
    mass_known = torch.ones(rows, dtype=torch.bool, device=device)

    k_list = [settings.top_k[i] if settings.uses_top_k(i, vocab) else 0 for i in range(rows)]
    if any(k_list):
        k = to_device(k_list, torch.long, device)
        uses_k = k > 0
        kth = values.gather(1, (k - 1).clamp(min=0).unsqueeze(1))
        keep &= ~uses_k.unsqueeze(1) | (values >= kth)
        if has_sentinel:
            sentinel_gone |= uses_k & (values[:, -1] < kth.squeeze(1))
            # Top-p after top-k normalises over what top-k kept, summed here over the window:
            # right only when top-k removed the sentinel.
            mass_known = ~uses_k | sentinel_gone
    else:
        uses_k = torch.zeros(rows, dtype=torch.bool, device=device)

    if any(p < 1.0 for p in settings.top_p):
        p = to_device(settings.top_p, values.dtype, device)
        uses_p = p < 1.0
        kept_weights = weights * keep
        # Mass strictly above each score: the exclusive running sum at the start of its tie group.
        exclusive = kept_weights.cumsum(1) - kept_weights
        group_start = torch.searchsorted(-values, -values, side="left")
        above = exclusive.gather(1, group_start)
        total = kept_weights[:, :size].sum(1)
        if mass is not None:
            total = torch.where(uses_k, total, mass.to(values.dtype))
        limit = (p * total).unsqueeze(1)
        keep &= ~uses_p.unsqueeze(1) | (above < limit)
        mass_known |= ~uses_p
        if has_sentinel:
            sentinel_gone |= uses_p & (above[:, -1] >= limit.squeeze(1))

    if any(m > 0.0 for m in settings.min_p):
        min_p = to_device(settings.min_p, values.dtype, device)
        uses_min_p = min_p > 0
        keep &= weights >= min_p.unsqueeze(1)
        if has_sentinel:
            sentinel_gone |= uses_min_p & (weights[:, -1] < min_p)

    resolved = mass_known & sentinel_gone if has_sentinel else mass_known
    kept = keep[:, :size].sum(1)
    threshold = values.gather(1, (kept - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    return kept, threshold, resolved


def full_thresholds(
    scores: torch.Tensor,
    settings: Truncation,
    *,
    select: bool = False,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-row score thresholds for top-k and top-p over whole rows.

    Rows using top-k read the k-th score off one batched ``topk``. Rows using top-p are sorted
    (no host sync: the CUDA strategy, where a sort is cheap) or, with ``select``, cut by
    :func:`~guided.sampling.radix.mass_thresholds` over the weights top-k left (a few passes over
    the row whatever its distribution; CPU, eager). ``weights``, when the caller has them, is
    ``exp(scores - best)`` per row (float32, left unchanged). Min-p is left to the caller: it is a
    test on those weights that the draw applies.
    """
    rows, vocab = scores.shape
    device = scores.device
    threshold = torch.full((rows,), float("-inf"), device=device, dtype=scores.dtype)
    sorted_rows = [] if select else [i for i in range(rows) if settings.top_p[i] < 1.0]
    sorted_set = set(sorted_rows)
    k_rows = [i for i in range(rows) if settings.uses_top_k(i, vocab) and i not in sorted_set]
    if k_rows:
        k_max = max(settings.top_k[i] for i in k_rows)
        index = to_device(k_rows, torch.long, device)
        values = torch.topk(scores.index_select(0, index), k_max, dim=1).values
        ks = to_device([settings.top_k[i] - 1 for i in k_rows], torch.long, device)
        threshold[index] = values.gather(1, ks.unsqueeze(1)).squeeze(1)
    if sorted_rows:
        index = to_device(sorted_rows, torch.long, device)
        sub = settings.rows(sorted_rows)
        sub = Truncation(sub.top_k, sub.top_p, [0.0] * len(sorted_rows))
        values = torch.sort(scores.index_select(0, index), dim=1, descending=True).values
        # A window as wide as the row has no sentinel: it always resolves.
        _, row_threshold, _ = _window_rules(values, sub, None, vocab, vocab)
        threshold[index] = row_threshold
    p_rows = [i for i in range(rows) if settings.top_p[i] < 1.0] if select else []
    if p_rows:
        index = to_device(p_rows, torch.long, device)
        everything = len(p_rows) == rows
        rows_p = (scores if everything else scores.index_select(0, index)).float()
        kth = threshold.index_select(0, index).unsqueeze(1)
        if weights is None:
            weights_p = torch.exp(rows_p - rows_p.amax(dim=1, keepdim=True))
        else:
            weights_p = weights if everything else weights.index_select(0, index)
        if any(settings.uses_top_k(i, vocab) for i in p_rows):
            # Top-p after top-k normalises over what top-k kept (weights are finite: a product
            # by the mask is a cheaper masked fill).
            weights_p = weights_p * (rows_p >= kth)
        p = to_device([settings.top_p[i] for i in p_rows], torch.float64, device)
        cut = mass_thresholds(rows_p, weights_p, p * weights_p.sum(dim=1))
        threshold[index] = torch.maximum(kth.squeeze(1), cut.to(threshold.dtype))
    return threshold


def apply_filters(
    logits: torch.Tensor,
    *,
    temperature: float | Sequence[float] | torch.Tensor = 1.0,
    top_k: int | Sequence[int] | torch.Tensor = 0,
    top_p: float | Sequence[float] | torch.Tensor = 1.0,
    min_p: float | Sequence[float] | torch.Tensor = 0.0,
    windows: bool | None = None,
) -> torch.Tensor:
    """Temperature, then top-k, top-p and min-p, per row; removed tokens become ``-inf``.

    Equal to chaining Transformers' ``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
    ``TopPLogitsWarper`` and ``MinPLogitsWarper`` (disabled ones skipped) on each row, with tie
    groups at the top-p boundary kept whole. Each setting is a scalar or one value per row.
    ``windows`` picks the strategy (default: windows on the CPU, thresholds on CUDA); both
    compute the same sets. Returns a new float32 tensor; ``logits`` is left alone. A row with no
    finite score comes back unchanged (all ``-inf``).
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D, got {logits.dim()}-D")
    rows, vocab = logits.shape
    temps = _per_row("temperature", temperature, rows, float)
    if any(not t > 0 for t in temps):
        raise ValueError("temperature must be > 0 (use greedy decoding for 0)")
    settings = Truncation(
        _per_row("top_k", top_k, rows, int),
        _per_row("top_p", top_p, rows, float),
        _per_row("min_p", min_p, rows, float),
    )
    scores = logits.to(torch.float32, copy=True)
    apply_temperature(scores, to_device(temps, torch.float32, scores.device))
    top = scores.amax(dim=1)
    live = [i for i in range(rows) if settings.active(i, vocab) and bool(top[i] > float("-inf"))]
    if not live:
        return scores
    use_windows = scores.device.type == "cpu" if windows is None else windows
    index = to_device(live, torch.long, scores.device)
    sub_scores = scores.index_select(0, index)
    sub = settings.rows(live)
    sub_top = top.index_select(0, index)
    if use_windows:
        # Survivors are materialised from the window prefixes, the lists the sampler races over.
        removed = torch.ones_like(sub_scores, dtype=torch.bool)
        min_p_only = [
            i for i in range(len(live)) if not sub.uses_top_k(i, vocab) and sub.top_p[i] >= 1.0
        ]
        min_p_set = set(min_p_only)
        windowed = [i for i in range(len(live)) if i not in min_p_set]
        if windowed:
            w_index = to_device(windowed, torch.long, scores.device)
            w_scores = sub_scores.index_select(0, w_index)
            mass = row_mass(w_scores, sub_top.index_select(0, w_index))
            w_settings = sub.rows(windowed)
            for result in resolve_windows(w_scores, w_settings, mass):
                if isinstance(result, Cut):
                    cut = w_scores[result.rows]
                    weight = torch.exp(cut - cut.amax(dim=1, keepdim=True))
                    threshold = full_thresholds(
                        cut, w_settings.rows(result.rows), select=True, weights=weight
                    )
                    min_p = to_device(
                        [w_settings.min_p[r] for r in result.rows], torch.float32, cut.device
                    )
                    at = to_device([windowed[r] for r in result.rows], torch.long, cut.device)
                    removed[at] = (cut < threshold.unsqueeze(1)) | (weight < min_p.unsqueeze(1))
                    continue
                for j, row in enumerate(result.rows):
                    survivors = result.ids[j, : int(result.kept[j])]
                    removed[windowed[row]].index_fill_(0, survivors, False)
        for i in min_p_only:
            removed[i] = torch.exp(sub_scores[i] - sub_top[i]) < sub.min_p[i]
    else:
        threshold = full_thresholds(sub_scores, sub)
        min_ps = to_device(sub.min_p, torch.float32, scores.device)
        removed = sub_scores < threshold.unsqueeze(1)
        removed |= torch.exp(sub_scores - sub_top.unsqueeze(1)) < min_ps.unsqueeze(1)
    scores[index] = sub_scores.masked_fill(removed, float("-inf"))
    return scores


def _per_row(
    name: str, value: float | Sequence[float] | torch.Tensor, rows: int, kind: type[Any]
) -> list[Any]:
    if isinstance(value, torch.Tensor):
        values = value.reshape(-1).tolist() if value.dim() else [value.item()] * rows
    elif isinstance(value, (int, float)):
        values = [value] * rows
    else:
        values = list(value)
    if len(values) != rows:
        raise ValueError(f"{name} needs one value per row ({rows}), got {len(values)}")
    return [kind(v) for v in values]
