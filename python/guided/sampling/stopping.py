"""Stopping criteria: which rows are done after a step, decided on the device from token ids.

A criterion is a function ``(state, drawn) -> finished``: it sees the
:class:`~guided.sampling.state.DecodeState` after the step's tokens were committed (``drawn``
repeats those tokens, ``[rows]``) and answers with a ``[rows]`` bool tensor, on the state's device,
without a host sync. :func:`criterion` ORs several. They say what the state shows; an engine
combines the answer with the rows it already retired (``state.finish(...)``).

* :class:`EndOfSequence`: the drawn token is one of the EOS ids (shared, or a list per row),
  like Transformers' ``EosTokenCriteria``;
* :class:`MaxNewTokens` and :class:`MaxLength`: the row drew ``count`` tokens, or holds ``length``
  with its prompt (``MaxLengthCriteria`` on the row alone);
* :class:`StopStrings`: a stop string ends in the newest token. Engines usually decode each row's
  tail after every step and search it, a device-to-host copy and a detokenization per row per
  step, which also loses the bytes of a character split between tokens. Here the string work is
  done once, on the host and in Rust (``guided_core::stop``): for every token and stop string,
  where the token's bytes can sit in the string. The per-step check is then a few gathers over the
  last tokens' ids, byte-exact for byte-level and byte-fallback vocabularies alike, so a stop string
  whose character two tokens split still stops. The rule is Transformers' ``StopStringCriteria``
  (only a match that reaches into the newest token counts; an older one would have stopped the row
  already), over bytes instead of decoded text. Tokens without bytes (special tokens) are not text
  and break a match. By default a match may start in the prompt, as Transformers' criterion
  reads the whole sequence; ``include_prompt=False`` searches the drawn tokens only, as vLLM
  does. :meth:`StopStrings.find` also says where each string ended inside the newest token, so
  that a caller can cut the text there (``StopStringCriteria`` answers only yes or no).

How the check runs, for every column ``q`` (a stop string ``s`` of ``m`` bytes and an overlap
``o``): the newest token must allow overlap ``o``; walking back, the ``k``-th older token must sit
where ``o`` plus the lengths of the tokens between leaves off, until those lengths reach ``m``.
All steps are computed at once from the running sum of the older tokens' lengths, as
``[rows, m - 1, columns]`` tensors, which for stop strings of tens of bytes is a few thousand
elements per row.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from guided._lib import Vocabulary, compile_stop_strings
from guided.sampling._params import IntParam, TokenIds, ints, move, rows_of, token_sets
from guided.sampling.state import DecodeState

__all__ = [
    "Criterion",
    "EndOfSequence",
    "MaxLength",
    "MaxNewTokens",
    "StopMatch",
    "StopStrings",
    "StoppingCriterion",
    "criterion",
    "stop_strings",
]


class StoppingCriterion(abc.ABC):
    """``criterion(state, drawn) -> BoolTensor[rows]``: which rows are finished."""

    @abc.abstractmethod
    def __call__(self, state: DecodeState, drawn: torch.Tensor) -> torch.Tensor:
        """The rows the state shows finished (``drawn``: the tokens just committed)."""


def _per_row(param: torch.Tensor, state: DecodeState) -> torch.Tensor:
    param = param.to(state.device)
    if param.dim() == 1 and param.shape[0] != state.rows:
        raise ValueError(f"a per-row parameter has {param.shape[0]} values for {state.rows} rows")
    return param.expand(state.rows)


class EndOfSequence(StoppingCriterion):
    """The drawn token is an EOS id (``eos``: one id, a list for every row, or a list per row)."""

    def __init__(self, eos: TokenIds) -> None:
        self.eos = token_sets("eos", eos)

    def __call__(self, state: DecodeState, drawn: torch.Tensor) -> torch.Tensor:
        ids = rows_of(self.eos, state.rows, state.device)
        drawn = drawn.to(state.device).unsqueeze(1)
        return ((ids == drawn) & (ids >= 0)).any(dim=1)


class MaxNewTokens(StoppingCriterion):
    """The row has drawn at least ``count`` tokens."""

    def __init__(self, count: IntParam) -> None:
        self.count = ints("max_new_tokens", count, 0)

    def __call__(self, state: DecodeState, drawn: torch.Tensor) -> torch.Tensor:
        return state.drawn >= _per_row(self.count, state)


class MaxLength(StoppingCriterion):
    """The row holds at least ``length`` tokens, prompt included (``MaxLengthCriteria``)."""

    def __init__(self, length: IntParam) -> None:
        self.length = ints("max_length", length, 0)

    def __call__(self, state: DecodeState, drawn: torch.Tensor) -> torch.Tensor:
        return state.lengths >= _per_row(self.length, state)


@dataclass(frozen=True)
class StopMatch:
    """Where a stop string ended in each row's newest token (``[rows]`` tensors on the state's
    device), from :meth:`StopStrings.find`.

    Where several strings match, the one that ends first in the token counts (the lower index on
    a tie). ``end`` bytes of the newest token reach up to the string's last byte and ``excess``
    bytes follow it: the text stops ``excess`` bytes before its end, and without the string
    ``excess + len(strings[string])`` bytes before. Rows that did not stop hold ``string = -1``
    and zeros.
    """

    finished: torch.Tensor
    string: torch.Tensor
    end: torch.Tensor
    excess: torch.Tensor


class StopStrings(StoppingCriterion):
    """A stop string ends in the newest token (see the module notes); build with
    :func:`stop_strings`."""

    def __init__(
        self,
        strings: Sequence[bytes],
        slots: torch.Tensor,
        lengths: torch.Tensor,
        ends: torch.Tensor,
        inside: torch.Tensor,
        offsets: Sequence[int],
        first_ends: torch.Tensor,
        *,
        include_prompt: bool = True,
    ) -> None:
        self.strings = tuple(strings)
        self.include_prompt = include_prompt
        self.slots = slots.to(torch.long)
        self.lengths = lengths.to(torch.long)
        self.ends = ends.to(torch.bool)
        self.inside = inside.to(torch.bool)
        self.first_ends = first_ends.to(torch.long)
        sizes = [offsets[i + 1] - offsets[i] for i in range(len(self.strings))]
        # Per column: its string, the string's first column, its length, and the overlap the
        # column stands for.
        self.column_string = torch.tensor(
            [i for i, m in enumerate(sizes) for _ in range(m)], dtype=torch.long
        )
        self.column_offset = torch.tensor(
            [offsets[i] for i, m in enumerate(sizes) for _ in range(m)], dtype=torch.long
        )
        self.column_size = torch.tensor([m for m in sizes for _ in range(m)], dtype=torch.long)
        self.column_overlap = torch.tensor(
            [o for m in sizes for o in range(1, m + 1)], dtype=torch.long
        )
        self.reach = max(sizes, default=1) - 1

    def to(self, device: torch.device | str) -> StopStrings:
        """A copy whose tables live on ``device``."""
        moved = object.__new__(StopStrings)
        for name, value in vars(self).items():
            setattr(moved, name, move(value, device) if isinstance(value, torch.Tensor) else value)
        return moved

    def __call__(self, state: DecodeState, drawn: torch.Tensor) -> torch.Tensor:
        matched, _, _ = self._matches(state)
        return matched.any(dim=1)

    def find(self, state: DecodeState, drawn: torch.Tensor) -> StopMatch:
        """Which rows stop, and where their stop string ended in the newest token."""
        matched, newest, length = self._matches(state)
        device = state.device
        if matched.shape[1] == 0:
            none = torch.zeros(state.rows, dtype=torch.long, device=device)
            return StopMatch(none.bool(), none - 1, none, none)
        overlap = self.column_overlap.to(device)
        size = self.column_size.to(device)
        string = self.column_string.to(device)
        # An overlap below the string's length ends that far into the token; a string wholly
        # inside the token ends where its first occurrence there does.
        inside = self.first_ends.to(device)[newest].gather(1, string.expand_as(matched))
        end = torch.where(overlap < size, overlap, inside)
        never = torch.iinfo(torch.long).max
        earliest = torch.where(matched, end, never)
        best, column = earliest.min(dim=1)
        finished = best < never
        return StopMatch(
            finished=finished,
            string=torch.where(finished, string[column], -1),
            end=torch.where(finished, best, 0),
            excess=torch.where(finished, length - best, 0),
        )

    def _matches(self, state: DecodeState) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[rows, columns]``: the newest token ends the column's string with the column's
        overlap; with the newest token's table row and length."""
        device = state.device
        rows = state.rows
        if self.column_size.numel() == 0:
            empty = torch.zeros(rows, dtype=torch.long, device=device)
            return torch.zeros((rows, 0), dtype=torch.bool, device=device), empty, empty
        slots, lengths = self.slots.to(device), self.lengths.to(device)
        ends, inside = self.ends.to(device), self.inside.to(device)
        offset = self.column_offset.to(device)
        size = self.column_size.to(device)
        overlap = self.column_overlap.to(device)

        # The newest `reach + 1` tokens, newest first; ids that are not text get the empty slot.
        window = state.last(self.reach + 1).flip(1)
        if not self.include_prompt:
            position = state.ends.unsqueeze(1) - 1 - torch.arange(self.reach + 1, device=device)
            window = torch.where(position >= state.prompt_width, window, -1)
        known = (window >= 0) & (window < slots.shape[0])
        safe = torch.where(known, window, 0)
        slot = torch.where(known, slots[safe], 0)
        length = torch.where(known, lengths[safe], 0)

        start = ends[slot[:, 0]]  # [rows, columns]: the newest token may end the string this way
        complete = start & (overlap >= size)
        if self.reach == 0:
            return complete, slot[:, 0], length[:, 0]
        # Bytes matched before the k-th older token (k = 1..reach), per column.
        walked = torch.cumsum(length[:, 1:], dim=1)
        before = overlap + torch.nn.functional.pad(walked[:, :-1], (1, 0)).unsqueeze(2)
        after = overlap + walked.unsqueeze(2)
        done_before = before >= size
        column = (offset + before - 1).clamp(max=inside.shape[1] - 1)
        fits = inside[slot[:, 1:]].gather(2, column)
        # Every step up to k fits (or the string was complete before it).
        holds = torch.cumprod((fits | done_before).to(torch.uint8), dim=1).bool()
        reached = (holds & (after >= size)).any(dim=1)
        return complete | (start & reached), slot[:, 0], length[:, 0]


def stop_strings(
    vocabulary: Any,
    strings: str | bytes | Iterable[str | bytes],
    *,
    include_prompt: bool = True,
    device: torch.device | str | None = None,
    max_stop_bytes: int = 4096,
    max_table_bytes: int = 256 << 20,
) -> StopStrings:
    """Compile ``strings`` (str, UTF-8 encoded, or bytes) over a ``guided.Vocabulary`` or a
    transformers tokenizer (read with ``Vocabulary.from_huggingface``), once, on the host.

    ``include_prompt`` (default, as Transformers' ``StopStringCriteria``) lets a match start in
    the prompt; ``False`` searches the drawn tokens only, as vLLM does. ``max_stop_bytes`` bounds
    the strings' total length and ``max_table_bytes`` the tables (``SizeLimitError`` beyond
    them).
    """
    vocab = (
        vocabulary
        if isinstance(vocabulary, Vocabulary)
        else Vocabulary.from_huggingface(vocabulary)
    )
    listed = [strings] if isinstance(strings, (str, bytes)) else list(strings)
    encoded: list[bytes] = []
    for i, text in enumerate(listed):
        if isinstance(text, str):
            encoded.append(text.encode("utf-8"))
        elif isinstance(text, bytes):
            encoded.append(text)
        else:
            raise ValueError(f"stop string {i} must be str or bytes, got {text!r}")
        if not encoded[-1]:
            raise ValueError(f"stop string {i} is empty; it would match everywhere")
    slots, lengths, ends, inside, offsets, first_ends = compile_stop_strings(
        vocab, encoded, max_stop_bytes=max_stop_bytes, max_table_bytes=max_table_bytes
    )
    criterion_ = StopStrings(
        encoded,
        torch.from_numpy(slots),
        torch.from_numpy(lengths),
        torch.from_numpy(ends),
        torch.from_numpy(inside),
        offsets.tolist(),
        torch.from_numpy(first_ends),
        include_prompt=include_prompt,
    )
    return criterion_ if device is None else criterion_.to(device)


class Criterion(StoppingCriterion):
    """Several criteria ORed."""

    def __init__(self, criteria: Sequence[StoppingCriterion]) -> None:
        self.criteria = list(criteria)
        for c in self.criteria:
            if not callable(c):
                raise ValueError(f"criterion() takes stopping criteria, got {c!r}")

    def __call__(self, state: DecodeState, drawn: torch.Tensor) -> torch.Tensor:
        finished = torch.zeros(state.rows, dtype=torch.bool, device=state.device)
        for c in self.criteria:
            finished = finished | c(state, drawn)
        return finished


def criterion(*criteria: StoppingCriterion | Iterable[StoppingCriterion]) -> Criterion:
    """The OR of ``criteria`` (given one by one or as a list)."""
    flat: list[StoppingCriterion] = []
    for c in criteria:
        if isinstance(c, StoppingCriterion):
            flat.append(c)
        else:
            flat.extend(c)
    return Criterion(flat)
