"""Mass thresholds by radix selection: the top-p cut of a flat row in a few passes, never a sort.

Top-p and typical sampling keep the tokens whose key (the score, or the closeness to the entropy)
is at least a per-row threshold: the smallest key such that the weight of the strictly larger keys
is below a share of the row's weight (see :mod:`guided.sampling.mass`). Transformers finds it by
sorting the row. The window search there finds it from the few best keys when the survivors are
few, as they are for a peaked distribution; when the survivors are most of the row (a flat
distribution: high temperature, or a model unsure of itself) a window grows to the whole row and
costs more than the sort. This module finds the same threshold in a bounded number of passes
whatever the distribution.

A float32's bits, read as an integer, order the floats: positives in the same order, negatives in
the reverse one. So the threshold is found a digit of its bits at a time, as a radix select does:

1. Histogram each row's weight by the top 12 bits of its keys (sign, exponent and three mantissa
   bits: 4,096 buckets, one ``scatter_add`` over the row). Reordering the *histogram* into
   descending key order costs a gather over 4,096 entries, not a transform of every key. The
   running sum from the top finds the one bucket where the weight above first reaches the limit:
   every key in a higher bucket survives, every key in a lower one is removed, the threshold is
   inside that bucket, and the weight of the higher buckets is carried down.
2. Only that bucket's keys take part in the rest, found by one comparison over the row. On a flat
   row it holds a few hundred keys (a bucket is one eighth of a power of two), gathered into a
   short list; when it holds a large share of the row (keys packed into a narrow range) they are
   kept in place, with the other weights zeroed, so no pass ever moves more than the row.
3. Two more 10-bit digits of the remaining 20 bits, over that set, pin the threshold to one key.

Three histogram passes and a comparison in the worst case; on a typical flat row, one pass over
the row and two over a few hundred keys. A bucket kept in place is usually a few tied keys (a
constant row, or keys a few ulps apart): the digits its largest and smallest keys share are known
without a histogram, and one tied key is the threshold at once.

Ties need no care: the threshold is a key value, and every key equal to it survives, so tie groups
are kept whole (``-0.0`` and ``0.0`` fall in different buckets but compare equal, so they survive
together too).

Sums: histograms add float32 weights, as the sorted running sum does, and their running sums
are taken in float64. Sums of the same weights in different orders may differ in the last bits,
so a bucket chosen for reaching the limit may hold digits none of which reaches it on its own;
then every key of the bucket survives (the decision was within rounding of the limit either way).
Per row the work and its order do not depend on the other rows, so a row's threshold is the same
alone or in any batch.
"""

from __future__ import annotations

import torch

__all__ = ["mass_thresholds"]

#: Bits of the first digit (sign, exponent, 3 mantissa bits) and of each later one.
_FIRST_BITS = 12
_LATER_BITS = 10
_REST_BITS = 32 - _FIRST_BITS
_BUCKETS = 1 << _FIRST_BITS
#: The first digit's buckets (raw top bits offset by half, to index from 0) in descending key
#: order: positive keys from the largest pattern down, then negative ones from -0.0 outwards.
_DESCENDING = torch.cat(
    [torch.arange(_BUCKETS - 1, _BUCKETS // 2 - 1, -1), torch.arange(0, _BUCKETS // 2)]
)
#: When the chosen bucket holds more than this share of the row, it is kept in place instead of
#: gathered.
_GATHER_SHARE = 0.125


def _reaching(
    hist: torch.Tensor, carried: torch.Tensor, limit: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For histograms in descending key order (``[rows, B]``): the first column where the weight
    above plus the column's own reaches ``limit``, the weight above that column, and whether any
    column reached."""
    hist = hist.to(torch.float64)
    inclusive = hist.cumsum(1).add_(carried.unsqueeze(1))
    reach = inclusive >= limit.unsqueeze(1)
    column = reach.to(torch.uint8).argmax(1)
    above = (inclusive - hist).gather(1, column.unsqueeze(1)).squeeze(1)
    return column, above, reach.any(1)


def mass_thresholds(keys: torch.Tensor, weights: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
    """Per row, the smallest key whose strictly larger keys weigh less than ``limit``.

    ``keys`` is float32 ``[rows, V]`` without NaN; ``weights`` is finite, non-negative float32 of
    the same shape (zero for tokens already removed), positive at the largest key; ``limit``
    ``[rows]`` is positive (a share of the row's weight: a limit above the row's weight counts
    as all of it). A token survives exactly when its key is at least the threshold, so the
    largest key always survives. CPU, eager: it reads back which rows take which path.
    """
    rows, vocab = keys.shape
    keys = keys.contiguous()
    weights = weights.contiguous()
    device = keys.device
    bits = keys.view(torch.int32)
    # The top bits of the raw patterns, offset to index from 0; a 2-D scatter runs its rows in
    # parallel.
    digit = (bits >> _REST_BITS).add_(_BUCKETS // 2)
    first = torch.zeros(rows, _BUCKETS, dtype=torch.float32, device=device)
    first.scatter_add_(1, digit.long(), weights)
    order = _DESCENDING.to(device)
    first = first.index_select(1, order).to(torch.float64)
    # Clamped to the running sum it is compared with, so that all of the row reaches it.
    limit = torch.minimum(limit.to(torch.float64), first.cumsum(1)[:, -1])
    column, carried, _ = _reaching(first, torch.zeros_like(limit), limit)
    high = order[column]
    negative = high < _BUCKETS // 2
    inside = digit == high.to(torch.int32)[:, None]

    # Inside the bucket, the rank of a key's remaining bits ascends as the key descends.
    rest = (1 << _REST_BITS) - 1
    flip = torch.where(negative, 0, rest).to(torch.int32)
    steps = 1 << _LATER_BITS
    if int(inside.count_nonzero()) > _GATHER_SHARE * rows * vocab:
        # Kept in place: per-row values broadcast over the row.
        def spread(per_row: torch.Tensor) -> torch.Tensor:
            return per_row[:, None]

        rank = (bits & rest) ^ flip[:, None]
        member = inside
        weight = weights * inside  # finite weights: a product is a cheaper masked fill
        owner = torch.arange(rows, device=device)[:, None].expand(rows, vocab)
    else:
        at = inside.view(-1).nonzero().squeeze(1)
        owner = at // vocab

        def spread(per_row: torch.Tensor) -> torch.Tensor:
            return per_row[owner]

        rank = (bits.view(-1)[at] & rest) ^ flip[owner]
        member = torch.ones_like(rank, dtype=torch.bool)
        weight = weights.view(-1)[at]
    value = torch.zeros(rows, dtype=torch.int32, device=device)
    settled = torch.zeros(rows, dtype=torch.bool, device=device)
    spread_ranks: tuple[torch.Tensor, torch.Tensor] | None = None
    if rank.dim() == 2:
        # A bucket that holds much of the row is often a few tied keys: the digits its largest
        # and smallest ranks share need no histogram (and one tied key is the threshold).
        largest = rank.masked_fill(~member, -1).amax(1)
        smallest = rank.masked_fill(~member, rest + 1).amin(1)
        settled = largest == smallest
        value = torch.where(settled, largest, value)
        spread_ranks = (largest, smallest)
    for shift in (_REST_BITS - _LATER_BITS, 0):
        if bool(settled.all()):
            break
        if spread_ranks is not None:
            top_digit, bottom_digit = (r >> shift for r in spread_ranks)
            if bool(((top_digit == bottom_digit) | settled).all()):
                known = (top_digit & (steps - 1)).to(torch.int32)
                value = torch.where(settled, value, (value << _LATER_BITS) | known)
                continue
        part = (rank >> shift) & (steps - 1)
        hist = torch.zeros(rows, steps, dtype=weight.dtype, device=device)
        if part.dim() == 2:
            hist.scatter_add_(1, part.long(), weight)
        else:
            hist.view(-1).scatter_add_(0, (part + owner * steps).long(), weight)
        column, carried, reached = _reaching(hist, carried, limit)
        missed = ~reached & ~settled
        if bool(missed.any()):
            # The set reached the limit at the digit above but its parts, summed in another
            # order, do not: it survives whole, down to its smallest key (largest rank).
            last = torch.full((rows,), -1, dtype=torch.int32, device=device)
            last.scatter_reduce_(
                0, owner.reshape(-1), rank.masked_fill(~member, -1).reshape(-1), "amax"
            )
            value = torch.where(missed, last, value)
            settled |= missed
        value = torch.where(settled, value, (value << _LATER_BITS) | column.to(torch.int32))
        if shift:
            member = member & (part == spread(column.to(torch.int32)))
            weight = weight * member
    low = value ^ flip
    raw = ((high.to(torch.int32) - _BUCKETS // 2) << _REST_BITS) | low
    return raw.view(torch.float32)
