"""The radix selection of mass thresholds against a float64 sort of the same rule.

The rule (``guided.sampling.mass``): a token survives when the weight of the strictly larger keys
is below the limit. The oracle sorts the row in float64 and sums each tie group's weight from the
top; the selection must keep exactly the tokens the oracle keeps, except where the weight above a
token lies within float32 rounding of the limit (the selection adds float32 buckets, the oracle
float64 terms). Rows are drawn to hit every path: few or many keys in the chosen bucket (gathered
or kept in place), one tied key, a few tied keys sharing their leading digits, ``-0.0`` beside
``0.0``, ``-inf``, subnormals, negative and huge keys, zero weights.
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from guided.sampling.radix import mass_thresholds

# Float32 sums of up to a few thousand terms are within this share of the row's weight.
ROUNDING = 1e-5


def oracle(keys: torch.Tensor, weights: torch.Tensor, limit: float) -> tuple[torch.Tensor, ...]:
    """(kept, ambiguous) per token, from a float64 sort with tie groups summed whole."""
    k = keys.to(torch.float64)
    w = weights.to(torch.float64)
    values, group = torch.unique(k, return_inverse=True)
    mass = torch.zeros(values.shape[0], dtype=torch.float64).index_add_(0, group, w)
    above = (mass.flip(0).cumsum(0).flip(0) - mass)[group]
    total = float(w.sum())
    limit = min(limit, total)
    kept = (above < limit) | (k == k.max())
    ambiguous = (above - limit).abs() <= ROUNDING * max(total, 1e-30)
    return kept, ambiguous


def check(keys: torch.Tensor, weights: torch.Tensor, shares: list[float]) -> None:
    limits = torch.tensor(shares, dtype=torch.float64) * weights.to(torch.float64).sum(1)
    threshold = mass_thresholds(keys, weights, limits)
    for i in range(keys.shape[0]):
        kept, ambiguous = oracle(keys[i], weights[i], float(limits[i]))
        ours = keys[i] >= threshold[i]
        decided = ~ambiguous
        assert torch.equal(ours[decided], kept[decided]), (i, shares[i], float(threshold[i]))
        assert bool(ours[keys[i].argmax()])
        # The threshold is one of the row's keys.
        assert bool((keys[i] == threshold[i]).any())


KEY = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 1.0000001, 0.9999999, 3.5, -3.5, 1e-40, -1e-40]),
    st.floats(-30, 30, width=32),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)
SHARE = st.one_of(st.sampled_from([0.5, 0.9, 0.99, 1.0, 1e-6]), st.floats(1e-6, 1.0))


@st.composite
def rows(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    count = draw(st.integers(1, 3))
    vocab = draw(st.integers(1, 300))
    palette = draw(st.lists(KEY, min_size=1, max_size=6))
    # Keys from a small palette tie a lot; free keys rarely do.
    keys = torch.tensor(
        draw(
            st.lists(
                st.lists(st.one_of(st.sampled_from(palette), KEY), min_size=vocab, max_size=vocab),
                min_size=count,
                max_size=count,
            )
        ),
        dtype=torch.float32,
    )
    if draw(st.booleans()):
        masked = torch.tensor(draw(st.lists(st.booleans(), min_size=vocab, max_size=vocab)))
        keys[:, masked] = -math.inf
    best = keys.amax(dim=1, keepdim=True)
    keys = torch.where(torch.isfinite(best), keys, torch.zeros_like(keys))
    weights = torch.exp(keys - keys.amax(dim=1, keepdim=True))
    if draw(st.booleans()):
        # Weights need not follow the keys (typical sampling's do not); the best key keeps one.
        scale = torch.tensor(draw(st.lists(st.floats(0, 1), min_size=vocab, max_size=vocab)))
        weights = weights * scale.float()
        weights[torch.arange(count), keys.argmax(dim=1)] = 1.0
    shares = draw(st.lists(SHARE, min_size=count, max_size=count))
    return keys, weights, shares


@settings(max_examples=300)
@given(rows())
def test_equals_a_float64_sort(case: tuple[torch.Tensor, torch.Tensor, list[float]]) -> None:
    check(*case)


def test_wide_rows_take_every_path() -> None:
    generator = torch.Generator().manual_seed(5)
    vocab = 20_000

    def noise(scale: float) -> torch.Tensor:
        return torch.randn(vocab, generator=generator) * scale

    keys = torch.stack(
        [
            noise(1.0),  # flat: a few hundred keys in the chosen bucket, gathered
            noise(4.0) - 2.4 * torch.log(torch.arange(1, vocab + 1).float()),  # peaked
            torch.randint(-2, 3, (vocab,), generator=generator).float(),  # five tied keys
            1.0 + torch.rand(vocab, generator=generator) * 1e-6,  # a few keys, one bucket
            -3.0 - torch.rand(vocab, generator=generator) * 1e-5,  # negative, one bucket
            torch.where(torch.rand(vocab, generator=generator) < 0.5, 0.0, -0.0),  # signed zeros
            torch.where(torch.rand(vocab, generator=generator) < 0.9, -math.inf, noise(1.0)),
            torch.full((vocab,), 7.0),  # one tied key
        ]
    ).contiguous()
    weights = torch.exp(keys - keys.amax(dim=1, keepdim=True))
    for share in (0.9, 0.5, 0.999, 1e-6, 1.0):
        check(keys, weights, [share] * keys.shape[0])
        # Alone, each row takes the same decisions as in the batch.
        limits = torch.full((keys.shape[0],), share, dtype=torch.float64) * weights.sum(1)
        together = mass_thresholds(keys, weights, limits)
        for i in range(keys.shape[0]):
            alone = mass_thresholds(keys[i : i + 1], weights[i : i + 1], limits[i : i + 1])
            assert torch.equal(alone, together[i : i + 1])
