"""Log-probabilities of chosen tokens, their ranks and the top alternatives, as vLLM reports them.

Every entry is computed from the *raw* logits, the model's distribution before any processor,
penalty, mask or temperature touched it (vLLM's default ``raw_logprobs`` mode): it answers "how
likely did the model find this token", which is what an API user asks, and it does not depend on
the sampling settings of the request. An entry is a plain dict, ready for JSON::

    {"token_id": 42, "logprob": -0.31, "rank": 1, "top": {42: -0.31, 7: -1.9}}

``rank`` is 1 plus the number of tokens strictly more likely than the chosen one; ``top`` holds the
``n`` most likely tokens, best first. One ``log_softmax`` and one ``topk`` over the rows that ask,
then a single transfer to the host: the cost is that of reading those rows once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["LogprobEntry", "prompt_logprobs", "token_logprobs"]

LogprobEntry = dict[str, Any]


def token_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, counts: Sequence[int]
) -> list[LogprobEntry | None]:
    """One entry per row: token ``tokens[i]`` under ``log_softmax(logits[i])`` with its top
    ``counts[i]`` alternatives; ``None`` where ``tokens[i] < 0`` (nothing was drawn)."""
    if logits.dim() != 2 or tokens.dim() != 1 or tokens.shape[0] != logits.shape[0]:
        raise ValueError("token_logprobs needs logits [rows, V] and one token per row")
    if len(counts) != logits.shape[0]:
        raise ValueError("token_logprobs needs one top-n count per row")
    if logits.shape[0] == 0:
        return []
    logprobs = torch.log_softmax(logits.to(torch.float32), dim=-1)
    safe = tokens.clamp(min=0, max=logits.shape[1] - 1).unsqueeze(1)
    chosen = logprobs.gather(1, safe)
    ranks = (logprobs > chosen).sum(dim=1) + 1
    top_n = min(max(counts, default=0), logits.shape[1])
    if top_n:
        top_values, top_ids = torch.topk(logprobs, top_n, dim=1)
        top_pairs = list(zip(top_ids.tolist(), top_values.tolist()))
    else:
        top_pairs = [([], [])] * logits.shape[0]
    entries: list[LogprobEntry | None] = []
    for token, value, rank, (ids, values), n in zip(
        tokens.tolist(), chosen.squeeze(1).tolist(), ranks.tolist(), top_pairs, counts
    ):
        if token < 0:
            entries.append(None)
            continue
        entries.append(
            {
                "token_id": token,
                "logprob": value,
                "rank": rank,
                "top": dict(zip(ids[:n], values[:n])),
            }
        )
    return entries


def prompt_logprobs(
    logits: torch.Tensor, prompt_ids: Sequence[int], n: int
) -> list[LogprobEntry | None]:
    """Log-probabilities of a prompt's tokens under the logits the model computed over it.

    ``logits[j]`` is the model's prediction after ``prompt_ids[: j + 1]``, so it scores
    ``prompt_ids[j + 1]``; ``logits`` has ``len(prompt_ids)`` rows (the last, which predicts the
    first generated token, is ignored) or one fewer. The first token has no prediction: its entry
    is ``None``, as in vLLM. Each other entry carries the ``n`` most likely alternatives.
    """
    length = len(prompt_ids)
    if logits.dim() != 2 or logits.shape[0] not in (length, max(length - 1, 0)):
        raise ValueError(
            f"logits must be [len(prompt_ids) or len(prompt_ids) - 1, V] = [{length}, V], "
            f"got {list(logits.shape)}"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    if length == 0:
        return []
    targets = list(prompt_ids[1:])
    for token in targets:
        if not 0 <= token < logits.shape[1]:
            raise ValueError(f"prompt token {token} is out of range [0, {logits.shape[1]})")
    tokens = torch.tensor(targets, dtype=torch.long, device=logits.device)
    scored = token_logprobs(logits[: length - 1], tokens, [n] * (length - 1))
    return [None, *scored]
