"""Beam search over a log-probability function: the ``beam_width`` best continuations.

A beam is a generated token list with the sum of its tokens' log-probabilities. Each step scores
every extension of every live beam by that sum (all extensions of one step have the same length,
so the sum ranks them as the length-normalised score would), walks them best first and sorts each
into a finished list (it ends with EOS) or the next live set, until ``beam_width`` beams are live.
The search stops once ``beam_width`` beams have finished or after ``max_tokens`` steps; finished
and live beams are then ranked by ``sum / length ** length_penalty`` (length counts the generated
tokens, EOS included) and the best ``beam_width`` returned. With ties, the lower beam index and
then the lower token id come first, so the result is deterministic.

``logprobs_fn`` is called once per step with the full sequences (prompt plus generated tokens) of
the live beams and returns their next-token log-probabilities, ``[beams, V]``: one batched forward
pass per step. Ranking takes the ``2 * beam_width`` best of the flattened ``[beams * V]`` scores
(enough: at most ``beam_width`` of them can finish before ``beam_width`` live ones are found),
plus any tied with the last of them, so which ties survive does not depend on ``topk``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["Beam", "beam_search"]


@dataclass(frozen=True)
class Beam:
    """One hypothesis: its generated tokens, summed log-probability and length-penalised score."""

    tokens: tuple[int, ...]
    logprob: float
    score: float
    finished: bool


def _score(logprob: float, length: int, penalty: float) -> float:
    return logprob / (length**penalty) if length else 0.0


def beam_search(
    logprobs_fn: Callable[[list[list[int]]], torch.Tensor],
    prompt_ids: Sequence[int],
    beam_width: int,
    max_tokens: int,
    eos_token_id: int | None = None,
    length_penalty: float = 1.0,
) -> list[Beam]:
    """The best ``beam_width`` continuations of ``prompt_ids``, best first (see module notes)."""
    for name, value in (("beam_width", beam_width), ("max_tokens", max_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty must be finite, got {length_penalty!r}")
    prompt = list(prompt_ids)
    live: list[tuple[list[int], float]] = [([], 0.0)]
    finished: list[tuple[list[int], float]] = []
    for _ in range(max_tokens):
        scores = logprobs_fn([prompt + tokens for tokens, _ in live])
        if scores.dim() != 2 or scores.shape[0] != len(live):
            raise ValueError(
                f"logprobs_fn must return [{len(live)}, V] log-probabilities, "
                f"got {list(scores.shape)}"
            )
        vocab = scores.shape[1]
        base = torch.tensor([logprob for _, logprob in live], dtype=torch.float64)
        totals = (scores.detach().to("cpu", torch.float64) + base.unsqueeze(1)).flatten()
        totals = torch.nan_to_num(totals, nan=-math.inf, neginf=-math.inf)  # keep bans banned
        count = min(2 * beam_width, totals.numel())
        cutoff = torch.topk(totals, count).values[-1]
        flat = ((totals >= cutoff) & (totals > -math.inf)).nonzero().squeeze(1)
        candidates = sorted(zip((-totals[flat]).tolist(), flat.tolist()))
        next_live: list[tuple[list[int], float]] = []
        for negative, index in candidates:
            beam, token = divmod(index, vocab)
            extended = (live[beam][0] + [token], -negative)
            if eos_token_id is not None and token == eos_token_id:
                finished.append(extended)
            else:
                next_live.append(extended)
            if len(next_live) == beam_width:
                break
        live = next_live
        if len(finished) >= beam_width or not live:
            break
    ranked = [
        Beam(tuple(t), lp, _score(lp, len(t), length_penalty), True) for t, lp in finished
    ] + [Beam(tuple(t), lp, _score(lp, len(t), length_penalty), False) for t, lp in live]
    ranked.sort(key=lambda b: -b.score)
    return ranked[:beam_width]
