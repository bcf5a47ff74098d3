"""The draw: an exponential race, run over a short candidate list or over blocks of a whole row.

To draw token ``i`` with probability ``w_i / sum(w)``, give every token an independent
exponential variate ``E_i`` and take ``argmax w_i / E_i``: the minimum of ``E_i / w_i`` falls on
``i`` with exactly that probability. It needs no normalisation, no running sum and no host sync,
it is one pass on any device, and a row that owns its ``torch.Generator`` draws the same token
whatever else is in the batch, which is how seeded requests stay reproducible.

Its cost is the variates: one per token. On a GPU that is bandwidth and does not matter; on a CPU
a variate costs more than everything else the sampler does to a logit (they are made by inverting
uniforms, ``-log(1 - U)``, several times cheaper than ``exponential_``, and still the dearest
step). Two shapes of the race keep their count small without changing the distribution:

* **window race** - when truncation left a short list of survivors (top-k, top-p: usually tens of
  tokens), race over that list only. The survivors are ordered by token id first, so the variate
  a seeded row gives to each token does not depend on how the window happened to order ties;
* **block race** - otherwise, split the row into blocks of 1024 tokens, race the blocks by their
  total weights, then race the tokens of the winning block. The minimum of the ``E_i / w_i`` of a
  block is exponential with rate equal to the block's total weight, independently across blocks,
  so picking the block by a race over block totals and then the token by a race inside it is the
  same distribution as the flat race. It costs one pass to sum the blocks and ``blocks + 1024``
  variates per row instead of ``V``.

Weights of excluded tokens are exactly zero and are scored below every candidate, so an excluded
token is never drawn, even when a variate is zero or a tiny weight underflows. A row with no
candidate at all draws ``-1``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from guided._transfer import to_device

__all__ = ["BLOCK", "block_race", "exponentials", "window_race"]

#: Tokens per block of the block race.
BLOCK = 1024


def exponentials(
    rows: int,
    width: int,
    device: torch.device,
    generators: Sequence[torch.Generator | None],
    widths: Sequence[int] | None = None,
) -> torch.Tensor:
    """Standard exponential variates ``[rows, width]``.

    Rows with a generator draw from it (only their first ``widths[i]`` variates when ``widths`` is
    given, so what they consume depends on the row alone); the others share one call to the
    default generator.
    """
    variates = torch.empty((rows, width), device=device, dtype=torch.float32)
    if rows and width:
        variates.uniform_()
        for i, generator in enumerate(generators):
            if generator is not None:
                count = width if widths is None else widths[i]
                variates[i, :count].uniform_(generator=generator)
        # -log(1 - U) for U uniform on [0, 1): exponential, by inversion. On a CPU this is several
        # times cheaper than exponential_, and 1 - U is never 0, so no variate is infinite.
        torch.log1p(variates.neg_(), out=variates).neg_()
    return variates


def window_race(
    scores: torch.Tensor,
    ids: torch.Tensor,
    kept: Sequence[int],
    generators: Sequence[torch.Generator | None],
) -> torch.Tensor:
    """Draw from each row's first ``kept[i]`` candidates, weighted by ``exp(score)``.

    ``scores`` and ``ids`` are ``[rows, W]`` (scores in any order; ``-inf`` never wins). Returns
    the drawn token ids, ``-1`` for a row without a finite candidate.
    """
    rows, width = scores.shape
    device = scores.device
    if rows == 0:
        return torch.empty(0, dtype=torch.long, device=device)
    width = min(width, max(kept))
    scores, ids = scores[:, :width], ids[:, :width]
    kept_t = to_device(kept, torch.long, device)
    inside = torch.arange(width, device=device) < kept_t.unsqueeze(1)
    # Order the candidates by token id so a seeded row's variates land on the same tokens
    # whatever order the window listed its ties in.
    key = torch.where(inside, ids, torch.iinfo(torch.long).max)
    order = torch.argsort(key, dim=1)
    ids = ids.gather(1, order)
    scores = scores.gather(1, order)
    inside = inside.gather(1, order)
    variates = exponentials(rows, width, device, generators, kept)
    live = inside & (scores > float("-inf"))
    race = torch.where(live, scores - variates.log(), float("-inf"))
    winner = race.argmax(dim=1, keepdim=True)
    drawn = ids.gather(1, winner).squeeze(1)
    return torch.where(live.any(dim=1), drawn, -1)


def block_race(weights: torch.Tensor, generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """Draw token ``i`` of each row with probability ``weights[i] / weights.sum()``.

    ``weights`` is ``[rows, V]``, non-negative, zero for excluded tokens. Returns the drawn ids,
    ``-1`` for a row whose weights are all zero.
    """
    rows, vocab = weights.shape
    device = weights.device
    if rows == 0:
        return torch.empty(0, dtype=torch.long, device=device)
    full, tail = divmod(vocab, BLOCK)
    blocks = full + (1 if tail else 0)
    block_mass = torch.empty((rows, blocks), device=device, dtype=weights.dtype)
    if full:
        block_mass[:, :full] = weights[:, : full * BLOCK].view(rows, full, BLOCK).sum(dim=2)
    if tail:
        block_mass[:, full] = weights[:, full * BLOCK :].sum(dim=1)
    variates = exponentials(rows, blocks + BLOCK, device, generators)
    block_race_ = torch.where(block_mass > 0, block_mass / variates[:, :blocks], -1.0)
    block = block_race_.argmax(dim=1, keepdim=True)
    index = block * BLOCK + torch.arange(BLOCK, device=device)
    inside = index < vocab
    in_block = weights.gather(1, index.clamp(max=vocab - 1))
    in_block = torch.where(inside, in_block, 0.0)
    token_race = torch.where(in_block > 0, in_block / variates[:, blocks:], -1.0)
    drawn = index.gather(1, token_race.argmax(dim=1, keepdim=True)).squeeze(1)
    return torch.where(block_mass.amax(dim=1) > 0, drawn, -1)
