"""Temperature, top-k, top-p and min-p against Transformers' warpers, row by row.

Two oracles. Transformers' ``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``
and ``MinPLogitsWarper`` (in the order ``generate`` chains them) are the reference. A float64
re-derivation of the same definitions, written with a plain sort, says where a decision sits so
close to a boundary that float32 rounding may legitimately flip it (the mass above a token within
1e-5 of ``top_p``, a probability ratio within 1e-5 of ``min_p``, a probability below 1e-30 that no
sampler can draw); only those tokens may differ. Transformers' unstable sort also keeps an
arbitrary part of a tie group straddling the top-p boundary where guided keeps the whole group:
those tokens may differ from Transformers, never from the float64 definition.

Windows start small here (1 to 3 scores) so the growth path and the sentinel logic run on short
rows; both strategies (CPU windows, CUDA-style thresholds) are checked.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from guided.sampling import apply_filters, filters

TOLERANCE = 1e-5
NEGLIGIBLE = 1e-30


@contextlib.contextmanager
def first_window(size: int) -> Iterator[None]:
    saved = filters.FIRST_WINDOW
    filters.FIRST_WINDOW = size
    try:
        yield
    finally:
        filters.FIRST_WINDOW = saved


def transformers_chain(row: torch.Tensor, t: float, k: int, p: float, m: float) -> torch.Tensor:
    scores = row.unsqueeze(0)
    ids = torch.zeros((1, 1), dtype=torch.long)
    scores = TemperatureLogitsWarper(t)(ids, scores)
    if k > 0:
        scores = TopKLogitsWarper(k)(ids, scores)
    if p < 1.0:
        scores = TopPLogitsWarper(p)(ids, scores)
    if m > 0.0:
        scores = MinPLogitsWarper(m)(ids, scores)
    return scores.squeeze(0)


def float64_definition(
    scaled: torch.Tensor, k: int, p: float, m: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(kept, ambiguous) from the definitions, in float64, ties kept whole."""
    s = scaled.to(torch.float64)
    vocab = s.shape[0]
    kept = torch.ones(vocab, dtype=torch.bool)
    ambiguous = torch.zeros(vocab, dtype=torch.bool)
    top = s.max()
    if not top > -math.inf:
        return kept, ambiguous
    ratio = torch.exp(s - top)
    ambiguous |= ratio < NEGLIGIBLE
    if 0 < k < vocab:
        kth = torch.sort(s, descending=True).values[k - 1]
        kept &= s >= kth
    if p < 1.0:
        masked = torch.where(kept, s, -math.inf)
        probs = torch.softmax(masked, dim=0)
        # Mass of the strictly better tokens: sum each distinct score's mass, then accumulate
        # the groups from the top.
        values, group = torch.unique(masked, return_inverse=True)
        group_mass = torch.zeros(values.shape[0], dtype=torch.float64).index_add_(0, group, probs)
        better = group_mass.flip(0).cumsum(0).flip(0) - group_mass
        above = better[group]
        kept &= above < p
        ambiguous |= (above - p).abs() <= TOLERANCE
    if m > 0.0:
        kept &= ratio >= m
        ambiguous |= (ratio - m).abs() <= TOLERANCE * m
    return kept, ambiguous


def straddled_ties(scaled: torch.Tensor, theirs_kept: torch.Tensor) -> torch.Tensor:
    """Tokens whose tie group Transformers kept only in part."""
    out = torch.zeros_like(theirs_kept)
    for value in scaled.unique():
        group = scaled == value
        if theirs_kept[group].any() and not theirs_kept[group].all():
            out |= group
    return out


def check_rows(
    logits: torch.Tensor,
    got: torch.Tensor,
    temps: list[float],
    ks: list[int],
    ps: list[float],
    ms: list[float],
) -> None:
    for i in range(logits.shape[0]):
        theirs = transformers_chain(logits[i], temps[i], ks[i], ps[i], ms[i])
        scaled = TemperatureLogitsWarper(temps[i])(None, logits[i : i + 1]).squeeze(0)
        kept, ambiguous = float64_definition(scaled, ks[i], ps[i], ms[i])
        ours_kept = got[i] > -math.inf
        theirs_kept = theirs > -math.inf
        live = scaled > -math.inf
        # Surviving values are the temperature-scaled logits, bit for bit.
        assert torch.equal(got[i][ours_kept], scaled[ours_kept])
        assert torch.equal(theirs[theirs_kept], scaled[theirs_kept])
        decided = live & ~ambiguous
        assert torch.equal(ours_kept[decided], kept[decided]), (i, temps[i], ks[i], ps[i], ms[i])
        agreeing = decided & ~straddled_ties(scaled, theirs_kept & live)
        assert torch.equal(theirs_kept[agreeing], kept[agreeing])
        assert torch.equal(ours_kept[agreeing], theirs_kept[agreeing])
        # Whatever the rules, the best token survives.
        if live.any():
            assert ours_kept[scaled.argmax()]


LOGIT = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 0.5, 3.0, 20.0, -20.0, -math.inf]),
    st.floats(-40, 40, width=32),
)


@st.composite
def batches(
    draw: st.DrawFn,
) -> tuple[torch.Tensor, list[float], list[int], list[float], list[float]]:
    rows = draw(st.integers(1, 4))
    vocab = draw(st.integers(1, 48))
    logits = torch.tensor(
        draw(
            st.lists(st.lists(LOGIT, min_size=vocab, max_size=vocab), min_size=rows, max_size=rows)
        ),
        dtype=torch.float32,
    )
    temps = draw(
        st.lists(
            st.one_of(st.sampled_from([1.0, 0.5, 0.7, 2.0]), st.floats(0.05, 4.0)),
            min_size=rows,
            max_size=rows,
        )
    )
    ks = draw(
        st.lists(st.one_of(st.just(0), st.integers(1, vocab + 2)), min_size=rows, max_size=rows)
    )
    ps = draw(
        st.lists(
            st.one_of(st.sampled_from([1.0, 0.5, 0.9, 0.3]), st.floats(0.001, 1.0)),
            min_size=rows,
            max_size=rows,
        )
    )
    ms = draw(
        st.lists(
            st.one_of(st.sampled_from([0.0, 0.05, 0.5, 1.0]), st.floats(0.0, 1.0)),
            min_size=rows,
            max_size=rows,
        )
    )
    return logits, temps, ks, ps, ms


@given(batches(), st.sampled_from([1, 2, 3, 64]), st.booleans())
def test_chain_equals_transformers(
    batch: tuple[torch.Tensor, list[float], list[int], list[float], list[float]],
    window: int,
    windows: bool,
) -> None:
    logits, temps, ks, ps, ms = batch
    with first_window(window):
        got = apply_filters(
            logits, temperature=temps, top_k=ks, top_p=ps, min_p=ms, windows=windows
        )
        # Alone, a row's window is sized by its own top-k, not by the batch's largest.
        alone = torch.cat(
            [
                apply_filters(
                    logits[i : i + 1],
                    temperature=temps[i],
                    top_k=ks[i],
                    top_p=ps[i],
                    min_p=ms[i],
                    windows=windows,
                )
                for i in range(logits.shape[0])
            ]
        )
    check_rows(logits, got, temps, ks, ps, ms)
    assert torch.equal(got, alone)


@settings(max_examples=200)
@given(batches(), st.sampled_from([1, 2, 3]))
def test_window_prefix_is_the_threshold_set(
    batch: tuple[torch.Tensor, list[float], list[int], list[float], list[float]], window: int
) -> None:
    # The sampler races over a window's prefix or, when it is long, masks by the threshold:
    # both must describe the same tokens.
    logits, _, ks, ps, ms = batch
    top = logits.amax(dim=1)
    vocab = logits.shape[1]
    rows = [
        i
        for i in range(logits.shape[0])
        if top[i] > -math.inf and (0 < ks[i] < vocab or ps[i] < 1.0)
    ]
    if not rows:
        return
    truncation = filters.Truncation(
        [ks[i] for i in rows], [ps[i] for i in rows], [ms[i] for i in rows]
    )
    scores = logits[rows]
    with first_window(window):
        results = filters.resolve_windows(scores, truncation, filters.row_mass(scores, top[rows]))
    seen = sorted(r for result in results for r in result.rows)
    assert seen == list(range(len(rows)))
    for result in results:
        if isinstance(result, filters.Cut):
            continue  # no prefix: the cut is checked against Transformers by the chain test
        for j, row in enumerate(result.rows):
            prefix = set(result.ids[j, : int(result.kept[j])].tolist())
            by_threshold = set((scores[row] >= result.threshold[j]).nonzero().squeeze(1).tolist())
            assert prefix == by_threshold


@pytest.mark.parametrize("rule", ["top_k", "top_p", "min_p", "temperature"])
@settings(max_examples=100)
@given(batch=batches())
def test_each_warper_alone(
    rule: str, batch: tuple[torch.Tensor, list[float], list[int], list[float], list[float]]
) -> None:
    logits, temps, ks, ps, ms = batch
    rows = logits.shape[0]
    temps = temps if rule == "temperature" else [1.0] * rows
    ks = ks if rule == "top_k" else [0] * rows
    ps = ps if rule == "top_p" else [1.0] * rows
    ms = ms if rule == "min_p" else [0.0] * rows
    with first_window(2):
        got = apply_filters(logits, temperature=temps, top_k=ks, top_p=ps, min_p=ms)
    check_rows(logits, got, temps, ks, ps, ms)


@pytest.mark.parametrize("windows", [True, False])
def test_wide_rows(windows: bool) -> None:
    # Real widths: peaked, flat, heavily tied and sparse rows, so windows grow to the full row.
    generator = torch.Generator().manual_seed(3)
    vocab = 3000
    logits = torch.stack(
        [
            torch.randn(vocab, generator=generator) * 4,
            torch.randn(vocab, generator=generator) * 0.01,
            torch.randint(0, 3, (vocab,), generator=generator).float(),
            torch.where(torch.rand(vocab, generator=generator) < 0.97, -math.inf, 1.0),
            -torch.arange(vocab, dtype=torch.float32) / 300,
        ]
    )
    temps = [0.8, 1.0, 1.0, 1.3, 0.6]
    ks = [0, 2500, 0, 40, 0]
    ps = [0.9, 0.95, 0.5, 1.0, 0.999]
    ms = [0.01, 0.0, 0.0, 0.3, 0.0]
    got = apply_filters(logits, temperature=temps, top_k=ks, top_p=ps, min_p=ms, windows=windows)
    check_rows(logits, got, temps, ks, ps, ms)


@pytest.mark.parametrize(
    ("row", "k", "p", "m"),
    [
        # The k-th score is tied beyond the window: top-p must normalise over the whole tie.
        ([2.0, 0.0, 0.0, 0.0], 2, 0.8, 0.0),
        ([2.0, 0.0, 0.0, 0.0, 0.0, -1.0], 1, 0.8, 0.0),
        ([3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0], 2, 0.99, 0.0),
        # A tie group straddling the top-p boundary survives whole.
        ([1.0, 1.0, 1.0, 1.0], 0, 0.5, 0.0),
        ([5.0, 1.0, 1.0, 1.0, 1.0, -3.0], 0, 0.9, 0.0),
        # Min-p keeps more than the first window holds.
        ([0.0, -0.1, -0.2, -0.3, -0.4, -5.0], 0, 0.99, 0.5),
        ([0.0, -0.1, -0.2, -0.3, -0.4, -5.0], 4, 1.0, 0.5),
    ],
)
@pytest.mark.parametrize("windows", [True, False])
def test_edge_rows(row: list[float], k: int, p: float, m: float, windows: bool) -> None:
    logits = torch.tensor([row])
    with first_window(1):
        got = apply_filters(logits, top_k=k, top_p=p, min_p=m, windows=windows)
    check_rows(logits, got, [1.0], [k], [p], [m])


def test_scalar_and_tensor_settings_broadcast() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    by_scalar = apply_filters(logits, temperature=0.7, top_k=5, top_p=0.8)
    by_tensor = apply_filters(
        logits,
        temperature=torch.full((3,), 0.7),
        top_k=torch.tensor([5, 5, 5]),
        top_p=torch.tensor(0.8),
    )
    assert torch.equal(by_scalar, by_tensor)
    check_rows(logits, by_scalar, [0.7] * 3, [5] * 3, [0.8] * 3, [0.0] * 3)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="temperature"):
        apply_filters(torch.zeros(2, 3), temperature=0.0)
    with pytest.raises(ValueError, match="top_k needs one value per row"):
        apply_filters(torch.zeros(2, 3), top_k=[1])
    with pytest.raises(ValueError, match="2-D"):
        apply_filters(torch.zeros(3))
