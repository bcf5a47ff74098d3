"""What a transform or a stopping criterion may read about a batch: every row's tokens so far.

Transformers hands its processors ``input_ids``, one ``[batch, length]`` tensor in which every row
has the same length, and rows of different lengths are padded (on the left, by convention). Its
processors then treat the padding as tokens: a repetition penalty counts the pad id, an n-gram ban
matches windows that run into the padding, and ``cur_len`` is the padded width, not the row's own.
:class:`DecodeState` keeps what a batched transform needs to treat each row as if it were alone:

* ``tokens``, ``[rows, prompt_width + capacity]``: each row's prompt ends at column
  ``prompt_width`` (shorter prompts are padded on the left) and its drawn tokens follow from
  there, so a row's history is one contiguous run of columns and its newest token sits just before
  column ``prompt_width + drawn``. Padding and unused slots hold ``-1``, which is never a token id,
  so a comparison between a padding slot and a real token is always false;
* ``prompt_lengths`` and ``drawn`` (tokens drawn so far), per row, from which ``lengths``,
  ``starts`` and the real-slot mask follow; ``limits``, each row's maximum total length (its
  prompt plus what it may draw), for the transforms that force the end of a sequence;
* ``active``: the rows still decoding. :meth:`commit` appends only to them.

Every field is a tensor on one device, and nothing here reads a tensor's value back on the host:
the host only tracks an upper bound of the longest row (it grows by at most one per
:meth:`commit`) to know when the buffer must grow. ``budget`` reserves that room up front, so a
decode loop that fits its budget never reallocates, and a compiled or graph-captured step sees the
same shapes every time.

Views: :meth:`history` is the whole buffer (each row's real slots are its own history),
:meth:`prompt_history` the prompt columns, :meth:`generated` the drawn columns, all with ``-1``
outside a row's own tokens; :meth:`real` says which slots hold tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from guided.sampling._params import move

__all__ = ["DecodeState"]


def _check_ids(name: str, rows: Sequence[Sequence[int]]) -> list[list[int]]:
    checked: list[list[int]] = []
    for i, row in enumerate(rows):
        if isinstance(row, (str, bytes)):
            raise ValueError(f"{name}[{i}] must be a sequence of token ids, got {row!r}")
        ids = [int(t) for t in row]
        for token, original in zip(ids, row):
            if isinstance(original, bool) or token < 0 or token != original:
                raise ValueError(f"{name}[{i}] must hold token ids (ints >= 0), got {original!r}")
        checked.append(ids)
    return checked


class DecodeState:
    """The tokens of a batch of rows: prompts, drawn tokens, lengths, limits and active rows."""

    tokens: torch.Tensor
    prompt_lengths: torch.Tensor
    drawn: torch.Tensor
    limits: torch.Tensor
    active: torch.Tensor
    prompt_width: int

    def __init__(
        self,
        tokens: torch.Tensor,
        prompt_lengths: torch.Tensor,
        drawn: torch.Tensor,
        *,
        prompt_width: int,
        limits: torch.Tensor | None = None,
        active: torch.Tensor | None = None,
    ) -> None:
        """Wraps existing tensors (see :meth:`from_lists` for the usual way to build one).

        ``tokens`` is ``[rows, width]`` long with the layout of the module notes; the host bound
        of the longest row starts at ``width`` (nothing is read back to learn the real one).
        """
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"tokens must be a 2-D long tensor, got {tokens.dim()}-D {tokens.dtype}"
            )
        rows, width = tokens.shape
        if not 0 <= prompt_width <= width:
            raise ValueError(f"prompt_width must be in [0, {width}], got {prompt_width}")
        for name, value in (("prompt_lengths", prompt_lengths), ("drawn", drawn)):
            if value.shape != (rows,):
                raise ValueError(f"{name} must have shape ({rows},), got {tuple(value.shape)}")
        device = tokens.device
        self.tokens = tokens
        self.prompt_lengths = move(prompt_lengths.to(torch.long), device)
        self.drawn = move(drawn.to(torch.long), device)
        self.prompt_width = prompt_width
        if limits is None:
            limits = self.prompt_lengths + (width - prompt_width)
        self.limits = move(limits.to(torch.long), device)
        if active is None:
            active = torch.ones(rows, dtype=torch.bool, device=device)
        self.active = move(active.to(torch.bool), device)
        self._bound = width

    @classmethod
    def from_lists(
        cls,
        prompt_ids: Sequence[Sequence[int]],
        output_ids: Sequence[Sequence[int]] | None = None,
        budget: int | Sequence[int] = 0,
        device: torch.device | str | None = None,
    ) -> DecodeState:
        """A state from token lists: each row's prompt, the tokens it drew already, and how many
        more it may draw (``budget``, one for all rows or one per row).

        The buffer holds the longest prompt, then room for the most tokens any row may end up
        with; ``limits`` is each row's prompt plus its outputs plus its budget.
        """
        prompts = _check_ids("prompt_ids", prompt_ids)
        rows = len(prompts)
        outputs = _check_ids("output_ids", output_ids) if output_ids is not None else [[]] * rows
        if len(outputs) != rows:
            raise ValueError(f"output_ids has {len(outputs)} rows, prompt_ids has {rows}")
        if isinstance(budget, int) and not isinstance(budget, bool):
            budgets = [budget] * rows
        else:
            budgets = [int(b) for b in budget]  # type: ignore[union-attr]
        if len(budgets) != rows or any(b < 0 for b in budgets):
            raise ValueError(f"budget must be one int >= 0 or one per row ({rows}), got {budget!r}")
        prompt_width = max((len(p) for p in prompts), default=0)
        room = max((len(o) + b for o, b in zip(outputs, budgets)), default=0)
        width = prompt_width + room
        host = torch.full((rows, width), -1, dtype=torch.long)
        for i, (prompt, output) in enumerate(zip(prompts, outputs)):
            if prompt:
                host[i, prompt_width - len(prompt) : prompt_width] = torch.tensor(prompt)
            if output:
                host[i, prompt_width : prompt_width + len(output)] = torch.tensor(output)
        prompt_lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long)
        drawn = torch.tensor([len(o) for o in outputs], dtype=torch.long)
        limits = prompt_lengths + drawn + torch.tensor(budgets, dtype=torch.long)
        state = cls(
            host if device is None else move(host, device),
            prompt_lengths,
            drawn,
            prompt_width=prompt_width,
            limits=limits,
        )
        state._bound = prompt_width + max((len(o) for o in outputs), default=0)
        return state

    # ----------------------------------------------------------------------------- shape

    @property
    def rows(self) -> int:
        """Number of rows."""
        return int(self.tokens.shape[0])

    @property
    def width(self) -> int:
        """Columns of the token buffer (prompt columns plus drawn-token capacity)."""
        return int(self.tokens.shape[1])

    @property
    def device(self) -> torch.device:
        """Where the tensors live."""
        return self.tokens.device

    # ----------------------------------------------------------------------------- derived

    @property
    def lengths(self) -> torch.Tensor:
        """Tokens per row, prompt included (Transformers' ``cur_len`` of the row alone)."""
        return self.prompt_lengths + self.drawn

    @property
    def starts(self) -> torch.Tensor:
        """Column of each row's first token."""
        return self.prompt_width - self.prompt_lengths

    @property
    def ends(self) -> torch.Tensor:
        """Column just after each row's newest token."""
        return self.prompt_width + self.drawn

    def real(self) -> torch.Tensor:
        """``[rows, width]`` bool: the slots that hold one of the row's tokens."""
        column = torch.arange(self.width, device=self.device)
        return (column >= self.starts.unsqueeze(1)) & (column < self.ends.unsqueeze(1))

    def history(self) -> torch.Tensor:
        """``[rows, width]``: each row's prompt and drawn tokens, contiguous, ``-1`` elsewhere."""
        return self.tokens

    def prompt_history(self) -> torch.Tensor:
        """``[rows, prompt_width]``: each row's prompt, right-aligned, ``-1`` before it."""
        return self.tokens[:, : self.prompt_width]

    def generated(self) -> torch.Tensor:
        """``[rows, width - prompt_width]``: each row's drawn tokens from column 0, ``-1`` after."""
        return self.tokens[:, self.prompt_width :]

    def last(self, count: int) -> torch.Tensor:
        """``[rows, count]``: each row's newest ``count`` tokens, oldest first, ``-1`` where the
        row has fewer."""
        if self.width == 0:
            return torch.full((self.rows, count), -1, dtype=torch.long, device=self.device)
        offsets = torch.arange(-count, 0, device=self.device)
        columns = self.ends.unsqueeze(1) + offsets
        valid = columns >= self.starts.unsqueeze(1)
        picked = self.tokens.gather(1, columns.clamp(min=0, max=max(self.width - 1, 0)))
        return torch.where(valid, picked, -1)

    # ----------------------------------------------------------------------------- updates

    def commit(self, tokens: torch.Tensor, drawn: torch.Tensor | None = None) -> None:
        """Append ``tokens[i]`` to row ``i`` where ``drawn[i]`` (default: the active rows whose
        token is an id, ``>= 0``). Grows the buffer when a row could run out of room."""
        if tokens.shape != (self.rows,):
            raise ValueError(f"tokens must have shape ({self.rows},), got {tuple(tokens.shape)}")
        tokens = tokens.to(device=self.device, dtype=torch.long)
        if drawn is None:
            take = self.active & (tokens >= 0)
        else:
            take = drawn.to(device=self.device, dtype=torch.bool) & (tokens >= 0)
        if self._bound + 1 > self.width:
            self._grow(max(self.width - self.prompt_width, 8) * 2)
        self._bound += 1
        column = self.ends.unsqueeze(1)
        current = self.tokens.gather(1, column)
        self.tokens.scatter_(
            1, column, torch.where(take.unsqueeze(1), tokens.unsqueeze(1), current)
        )
        self.drawn += take.long()

    def select(self, rows: torch.Tensor) -> DecodeState:
        """A state holding only ``rows`` (a long index tensor), in that order; copies."""
        rows = move(rows, self.device)
        picked = DecodeState(
            self.tokens.index_select(0, rows),
            self.prompt_lengths.index_select(0, rows),
            self.drawn.index_select(0, rows),
            prompt_width=self.prompt_width,
            limits=self.limits.index_select(0, rows),
            active=self.active.index_select(0, rows),
        )
        picked._bound = self._bound
        return picked

    def finish(self, finished: torch.Tensor) -> None:
        """Mark rows as done: they stop drawing (``commit`` skips them)."""
        self.active &= ~finished.to(device=self.device, dtype=torch.bool)

    def _grow(self, room: int) -> None:
        extra = torch.full(
            (self.rows, self.prompt_width + room - self.width),
            -1,
            dtype=torch.long,
            device=self.device,
        )
        self.tokens = torch.cat([self.tokens, extra], dim=1)

    def __repr__(self) -> str:
        return (
            f"DecodeState(rows={self.rows}, prompt_width={self.prompt_width}, width={self.width}, "
            f"device={self.device})"
        )
