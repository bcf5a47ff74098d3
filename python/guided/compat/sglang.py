"""SGLang's grammar-object interface, backed by guided, without importing SGLang.

SGLang's scheduler drives constrained requests through ``BaseGrammarObject`` (in
``sglang.srt.constrained.base_grammar_backend``): it allocates a bitmask for the batch, each
request's grammar fills its row, the mask moves to the logits' device and is applied, the sampled
token is accepted, and from time to time the scheduler jumps forward over text the grammar forces,
re-tokenizes, and asks the grammar to catch up. :class:`GuidedGrammarObject` has that method set,
with the semantics of SGLang's xgrammar grammar object; :class:`GuidedGrammarBackend` has the
``dispatch_*`` methods a ``BaseGrammarBackend`` subclass delegates to.

Semantics worth knowing:

- ``copy()`` returns a *fresh* grammar at the start of the same constraint, as SGLang's grammar
  objects do: SGLang caches one object per constraint and copies it for each new request.
- ``accept_token`` raises :class:`guided.InvalidTokenError` (a ``ValueError``, like SGLang's) for a
  token the grammar refuses, and ignores tokens after termination.
- ``try_jump_forward`` returns ``([], text)`` with the forced text cut to whole characters, or
  None; ``jump_forward_str_state`` returns that text and -1; ``jump_and_retokenize`` rolls back to
  the longest common prefix of the old and new token ids and accepts the rest.
- The ``dispatch_*`` methods raise :class:`guided.GuidedError` for an invalid or unsupported
  constraint, where SGLang's backends log it and return an invalid-grammar marker: the caller
  decides. ``"$$ANY$$"`` as a JSON key means any JSON object or array.
- Regexes are read in xgrammar's dialect (SGLang's default grammar backend): ``.`` matches
  newlines, ``\\d \\w`` are ASCII; see :mod:`guided.compat.xgrammar`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guided._errors import InvalidTokenError
from guided._lib import Guide, TokenIndex
from guided.cache import IndexCache
from guided.compat._support import (
    complete_utf8,
    json_value_grammar,
    resolve_vocabulary,
)
from guided.compat.xgrammar import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    structural_tag_recipe,
)

if TYPE_CHECKING:
    import torch

__all__ = ["GuidedGrammarBackend", "GuidedGrammarObject"]


class GuidedGrammarObject:
    """One request's grammar, with the methods of SGLang's ``BaseGrammarObject``."""

    def __init__(self, index: TokenIndex, *, max_rollback: int = -1) -> None:
        self._index = index
        self._max_rollback = max_rollback
        self._guide = Guide(index, max_rollback=max_rollback)
        self._finished = False
        self.accepted_tokens: list[int] = []

    @property
    def guide(self) -> Guide:
        """The guided guide underneath."""
        return self._guide

    @property
    def finished(self) -> bool:
        """Set by the scheduler when the request is done."""
        return self._finished

    @finished.setter
    def finished(self, finished: bool) -> None:
        self._finished = finished

    def accept_token(self, token: int) -> None:
        """Consumes ``token``; raises ``InvalidTokenError`` if the grammar refuses it."""
        if self._guide.is_terminated():
            return
        if not self._guide.accept_token(token):
            raise InvalidTokenError(
                f"token {token} is not allowed in state {self._guide.state}",
                token=token,
                state=self._guide.state,
            )
        self.accepted_tokens.append(token)

    def rollback(self, k: int) -> None:
        """Undoes the last ``k`` accepted tokens."""
        if k <= 0:
            return
        self._guide.rollback(k)
        del self.accepted_tokens[-k:]

    def is_terminated(self) -> bool:
        """Whether EOS was accepted."""
        return self._guide.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        """A CPU int32 bitmask ``[batch_size, ceil(vocab_size / 32)]`` (filled on the CPU, then
        moved with :meth:`move_vocab_mask`)."""
        return allocate_token_bitmask(batch_size, vocab_size)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        """Writes this request's mask into row ``idx``."""
        self._guide.fill_bitmask(vocab_mask, idx)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        """The mask on ``device``."""
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        """Sets disallowed logits to ``-inf`` in place."""
        apply_token_bitmask_inplace(logits, vocab_mask)

    def copy(self) -> GuidedGrammarObject:
        """A fresh grammar for the same constraint, at its start."""
        return GuidedGrammarObject(self._index, max_rollback=self._max_rollback)

    def try_jump_forward(self, tokenizer: Any) -> tuple[list[int], str] | None:
        """``([], text)`` where ``text`` is forced next, or None if nothing is."""
        if self._guide.is_terminated():
            return None
        text = complete_utf8(self._guide.forced_bytes())
        return ([], text) if text else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        """The jump-forward text and -1 (no state to carry)."""
        return helper[1], -1

    def jump_and_retokenize(
        self, old_output_ids: list[int], new_output_ids: list[int], next_state: int
    ) -> None:
        """Catches up after a jump: rolls back what re-tokenization changed, accepts the rest."""
        common = 0
        for old, new in zip(old_output_ids, new_output_ids):
            if old != new:
                break
            common += 1
        self.rollback(len(old_output_ids) - common)
        for token in new_output_ids[common:]:
            self.accept_token(token)

    def __repr__(self) -> str:
        return f"GuidedGrammarObject(state={self._guide.state}, finished={self._finished})"


class GuidedGrammarBackend:
    """Compiles SGLang constraint keys into :class:`GuidedGrammarObject` objects.

    ``tokenizer`` is a transformers tokenizer or a ``guided.Vocabulary``; ``vocab_size`` the model's
    logit width.
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int | None = None,
        *,
        cache: IndexCache | None = None,
        max_rollback: int = -1,
        whitespace: str | None = None,
    ) -> None:
        self.cache = cache or IndexCache(resolve_vocabulary(tokenizer, vocab_size))
        self.vocab_size = self.cache.vocabulary.vocab_size
        self.max_rollback = max_rollback
        self.whitespace = whitespace

    def _grammar(self, index: TokenIndex) -> GuidedGrammarObject:
        return GuidedGrammarObject(index, max_rollback=self.max_rollback)

    def dispatch_json(self, key_string: str) -> GuidedGrammarObject:
        """A grammar for a JSON Schema (``"$$ANY$$"``: any JSON object or array)."""
        if key_string == "$$ANY$$":
            return self._grammar(self.cache.grammar(json_value_grammar()))
        options = {} if self.whitespace is None else {"whitespace": self.whitespace}
        return self._grammar(self.cache.json_schema(key_string, **options))

    def dispatch_regex(self, key_string: str) -> GuidedGrammarObject:
        """A grammar for a regex."""
        return self._grammar(self.cache.regex(key_string, dialect="xgrammar"))

    def dispatch_ebnf(self, key_string: str) -> GuidedGrammarObject:
        """A grammar for EBNF (GBNF) text, root rule ``root``, as SGLang's xgrammar backend reads
        it."""
        return self._grammar(self.cache.grammar(key_string, syntax="ebnf"))

    def dispatch_structural_tag(self, key_string: str) -> GuidedGrammarObject:
        """A grammar for a structural tag's JSON text (xgrammar's format, or the legacy
        ``structures`` and ``triggers``), as SGLang's xgrammar backend reads it."""
        return self._grammar(self.cache.get(structural_tag_recipe(key_string)))

    def reset(self) -> None:
        """Drops the cached indexes."""
        self.cache.clear()
