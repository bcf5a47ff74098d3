"""What the sampler needs to know about a request, and what it needs from a guide.

The sampler does not own requests: an engine does. It reads a handful of attributes (an id, the
settings, the prompt and output token ids, the EOS ids, an optional guide) and appends nothing
itself; the engine appends each step's tokens to ``output_token_ids``. :class:`Request` is a
ready-made container with exactly those attributes, and :class:`RequestLike` says the same thing as
a protocol, so an engine can pass its own request objects unchanged.

A guide is anything that follows :class:`GuideLike`: ``guided.Guide`` does, and so can a test's
hand-written automaton. The sampler asks it to fill its row of the batch bitmask before the draw
and advances it with the drawn token after; it never inspects its state otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from guided.sampling.params import SamplingParams

__all__ = ["GuideLike", "Request", "RequestLike"]


@runtime_checkable
class GuideLike(Protocol):
    """The part of ``guided.Guide`` the sampler uses."""

    @property
    def finished(self) -> bool:
        """EOS was accepted, or a final state was reached: nothing but EOS may follow."""

    def fill_bitmask(self, bitmask: Any, index: int = 0) -> None:
        """Write the allowed next tokens into row ``index`` of an int32 ``[batch, words]`` mask."""

    def advance(self, token: int) -> None:
        """Consume ``token``; raise (leaving the state unchanged) if it is not allowed."""

    def is_terminated(self) -> bool:
        """Whether EOS was accepted."""


class RequestLike(Protocol):
    """The attributes the sampler reads from a request."""

    @property
    def request_id(self) -> str: ...

    @property
    def params(self) -> SamplingParams: ...

    @property
    def prompt_token_ids(self) -> Sequence[int]: ...

    @property
    def output_token_ids(self) -> Sequence[int]: ...

    @property
    def eos_token_ids(self) -> Sequence[int]: ...

    @property
    def guide(self) -> GuideLike | None: ...


@dataclass
class Request:
    """One sequence being decoded: its settings, its tokens so far and its constraint."""

    request_id: str
    params: SamplingParams
    prompt_token_ids: Sequence[int]
    output_token_ids: list[int] = field(default_factory=list)
    eos_token_ids: tuple[int, ...] = ()
    guide: GuideLike | None = None

    @property
    def num_prompt_tokens(self) -> int:
        """Length of the prompt."""
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        """Tokens generated so far."""
        return len(self.output_token_ids)
