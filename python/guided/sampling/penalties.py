"""Repetition, frequency and presence penalties from persistent per-request token statistics.

The penalties read which tokens a request has seen (prompt or output, for the repetition penalty)
and how often each appeared in its output (frequency and presence, vLLM's formula:
``logit -= frequency * count + presence * (count > 0)``, after the repetition penalty divides a
positive logit by ``r`` and multiplies a negative one by ``r``). A simple engine rebuilds those
counts every step from its Python lists: with 256 requests of 1,000 tokens that is a quarter of a
million Python ints converted and scattered per step, and a ``[batch, vocab]`` count tensor.

Here each request owns a *slot*: one row of three persistent tensors holding its distinct tokens
(``ids``, ``-1`` past the end), their output counts and how many there are. A row is built once
from the request's lists, then updated on the device with each step's drawn tokens: compare the
token with the row (one vectorised pass over a few hundred entries), bump the count where it
matches, append it where it does not. Nothing is rebuilt and the host never waits for the device.

Applying the penalties touches only those entries: gather the logits at ``row * V + id``, compute
the penalised values, scatter them back. Padding entries point at a sink element one past the
logits (the working buffer is allocated with it), so every row can be handled in the same
vectorised pass without its padding ever writing a real logit. The cost per step is proportional to
the distinct tokens of the penalised rows, not to their vocabulary: on a CPU, where a pass over a
152k-wide row is the expensive thing, that is what makes penalties nearly free.

The host keeps an upper bound of each slot's length (one per step at most), and grows the tensors
by doubling before a step could overflow them, so capacity never needs a sync.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from guided._transfer import to_device

__all__ = ["PenaltyState"]

_INITIAL_SLOTS = 8
_INITIAL_WIDTH = 64


class PenaltyState:
    """Per-slot distinct tokens and output counts, on one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.ids = torch.full((_INITIAL_SLOTS, _INITIAL_WIDTH), -1, dtype=torch.long, device=device)
        self.counts = torch.zeros((_INITIAL_SLOTS, _INITIAL_WIDTH), device=device)
        self.length = torch.zeros(_INITIAL_SLOTS, dtype=torch.long, device=device)
        self._bound = [0] * _INITIAL_SLOTS
        self._free = list(range(_INITIAL_SLOTS - 1, -1, -1))

    @property
    def width(self) -> int:
        return self.ids.shape[1]

    def acquire(self) -> int:
        """A free slot (the tensors grow when none is left)."""
        if not self._free:
            old = self.ids.shape[0]
            self._resize(old * 2, self.width)
            self._free = list(range(old * 2 - 1, old - 1, -1))
        return self._free.pop()

    def release(self, slot: int) -> None:
        """Return a slot to the free list."""
        self._bound[slot] = 0
        self._free.append(slot)

    def reset(
        self,
        slot: int,
        prompt_ids: Sequence[int] | None,
        output_ids: Sequence[int],
        vocab_size: int,
    ) -> None:
        """Rebuild a slot from token lists (prompt ids only matter to the repetition penalty)."""
        output = torch.tensor(list(output_ids), dtype=torch.long)
        output = output[(output >= 0) & (output < vocab_size)]
        out_ids, out_counts = torch.unique(output, return_counts=True)
        if prompt_ids:
            prompt = torch.tensor(list(prompt_ids), dtype=torch.long)
            prompt = prompt[(prompt >= 0) & (prompt < vocab_size)]
            ids, inverse = torch.unique(torch.cat([out_ids, prompt]), return_inverse=True)
            counts = torch.zeros(ids.shape[0])
            counts.index_add_(0, inverse[: out_ids.shape[0]], out_counts.to(torch.float32))
        else:
            ids, counts = out_ids, out_counts.to(torch.float32)
        size = ids.shape[0]
        self.reserve([slot], size)
        self.ids[slot].fill_(-1)
        self.counts[slot].zero_()
        self.ids[slot, :size] = to_device(ids.tolist(), torch.long, self.device)
        self.counts[slot, :size] = to_device(counts.tolist(), torch.float32, self.device)
        self.length[slot] = size
        self._bound[slot] = size

    def extend(self, slot: int, tokens: Sequence[int], vocab_size: int) -> None:
        """Add output tokens the sampler did not draw itself (an engine forced or appended them)."""
        for token in tokens:
            if 0 <= token < vocab_size:
                self.record(
                    to_device([slot], torch.long, self.device),
                    to_device([token], torch.long, self.device),
                    [slot],
                )

    def reserve(self, slots: Sequence[int], extra: int) -> None:
        """Make room for ``extra`` more entries in each of ``slots``."""
        need = max((self._bound[s] for s in slots), default=0) + extra
        if need > self.width:
            width = self.width
            while width < need:
                width *= 2
            self._resize(self.ids.shape[0], width)

    def record(self, slots: torch.Tensor, tokens: torch.Tensor, host_slots: Sequence[int]) -> None:
        """Count one drawn token per slot (``tokens[i] < 0``: nothing drawn), on the device."""
        if not host_slots:
            return
        self.reserve(host_slots, 1)
        for s in host_slots:
            self._bound[s] += 1
        drawn = tokens >= 0
        match = (self.ids.index_select(0, slots) == tokens.unsqueeze(1)) & drawn.unsqueeze(1)
        self.counts.index_add_(0, slots, match.to(self.counts.dtype))
        # A token seen for the first time goes at the end of its row, with a count of one.
        fresh = drawn & ~match.any(dim=1)
        position = self.length.index_select(0, slots)
        self.ids[slots, position] = torch.where(fresh, tokens, self.ids[slots, position])
        self.counts[slots, position] = torch.where(fresh, 1.0, self.counts[slots, position])
        self.length.index_add_(0, slots, fresh.to(self.length.dtype))

    def apply(
        self,
        flat_logits: torch.Tensor,
        rows: Sequence[int],
        slots: Sequence[int],
        vocab_size: int,
        repetition: Sequence[float],
        frequency: Sequence[float],
        presence: Sequence[float],
    ) -> None:
        """Penalise logit rows ``rows`` in place from the statistics of ``slots``.

        ``flat_logits`` is the flattened ``[batch, vocab_size]`` buffer plus one trailing sink
        element; the settings have one entry per row. A term no row uses is skipped.
        """
        if not rows:
            return
        device = self.device
        slot_index = to_device(slots, torch.long, device)
        ids = self.ids.index_select(0, slot_index)
        sink = flat_logits.shape[0] - 1
        row_base = to_device([r * vocab_size for r in rows], torch.long, device).unsqueeze(1)
        flat = torch.where(ids >= 0, row_base + ids, sink)
        values = flat_logits[flat]
        if any(r != 1.0 for r in repetition):
            r = to_device(repetition, torch.float32, device).unsqueeze(1)
            values = torch.where(values > 0, values / r, values * r)
        if any(f != 0.0 for f in frequency) or any(p != 0.0 for p in presence):
            counts = self.counts.index_select(0, slot_index)
            if any(f != 0.0 for f in frequency):
                values = values - to_device(frequency, torch.float32, device).unsqueeze(1) * counts
            if any(p != 0.0 for p in presence):
                present = (counts > 0).to(torch.float32)
                values = values - to_device(presence, torch.float32, device).unsqueeze(1) * present
        flat_logits[flat] = values

    def _resize(self, slots: int, width: int) -> None:
        old_slots, old_width = self.ids.shape
        ids = torch.full((slots, width), -1, dtype=torch.long, device=self.device)
        counts = torch.zeros((slots, width), device=self.device)
        length = torch.zeros(slots, dtype=torch.long, device=self.device)
        ids[:old_slots, :old_width] = self.ids
        counts[:old_slots, :old_width] = self.counts
        length[:old_slots] = self.length
        self.ids, self.counts, self.length = ids, counts, length
        self._bound.extend([0] * (slots - old_slots))
