"""vLLM's structured-output interface, backed by guided, without importing vLLM.

vLLM's engine core talks to a structured-output backend through two abstract classes in
``vllm.v1.structured_output.backend_types``: a ``StructuredOutputBackend`` compiles each request's
constraint into a ``StructuredOutputGrammar``, and the scheduler drives that grammar every step.
:class:`GuidedGrammar` has exactly the grammar's six methods; :class:`GuidedBackend` has the
backend's three (``compile_grammar``, ``allocate_token_bitmask``, ``destroy``), so a backend class
registered with vLLM can delegate to it in a few lines. Nothing here imports vLLM: the request type
is read by name, so vLLM's ``StructuredOutputOptions`` members and plain strings both work.

The scheduler's step, as the simulated loop in the tests replays it: draft tokens are trimmed with
``validate_tokens``; for each draft position the grammar fills a bitmask row and accepts the draft
token, then rolls all of them back; after sampling, the tokens the target model kept are accepted
for good and the rejected drafts never were. Rollback is unlimited by default (``max_rollback=-1``),
as with vLLM's xgrammar backend.

Semantics, where vLLM's own backends disagree with each other:

- ``accept_tokens`` is all or nothing: a sequence with a refused token leaves the state unchanged
  and returns False (vLLM's xgrammar grammar keeps the prefix it accepted before refusing). After
  termination it returns False, as vLLM's xgrammar grammar does.
- EOS is an ordinary token of the constraint: accepted exactly where the output is complete, after
  which ``is_terminated()`` is True and a filled row allows only EOS. A rollback over the EOS undoes
  the termination.
- Request types: ``JSON`` (schema text), ``JSON_OBJECT`` (any JSON object, see
  :func:`guided.compat._support.json_value_grammar`), ``REGEX`` and
  ``CHOICE`` (a JSON or Python list of strings), ``GRAMMAR`` (EBNF / GBNF text with a ``root``
  rule, or Lark text when no line defines a rule with ``::=``, as vLLM tells them apart; see
  :meth:`guided.TokenIndex.from_grammar`), ``STRUCTURAL_TAG`` (xgrammar's structural
  tag as JSON text, or vLLM's legacy ``structures`` and ``triggers``, read as vLLM's xgrammar
  backend reads them).
- Regexes are read as vLLM's default (``auto``) backend choice reads them: in xgrammar's dialect,
  and a pattern xgrammar refuses (``(?i)``, ``\\p{L}``, ``{,3}``) in the Rust ``regex`` dialect that
  llguidance, vLLM's fallback, reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from guided._errors import GuidedError, RegexSyntaxError
from guided._lib import Guide, TokenIndex
from guided.cache import IndexCache
from guided.compat._support import (
    choice_regex,
    json_value_grammar,
    parse_choices,
    resolve_vocabulary,
)
from guided.compat.xgrammar import allocate_token_bitmask, structural_tag_recipe

if TYPE_CHECKING:
    import torch

__all__ = ["GuidedBackend", "GuidedGrammar"]


def regex_index(cache: IndexCache, pattern: str) -> TokenIndex:
    """The index of a ``REGEX`` request: xgrammar's reading of ``pattern``, or llguidance's (the
    Rust ``regex`` dialect) where xgrammar refuses it, as vLLM's ``auto`` backend falls back."""
    try:
        return cache.regex(pattern, dialect="xgrammar")
    except RegexSyntaxError as xgrammar_refusal:
        try:
            return cache.regex(pattern, dialect="rust")
        except RegexSyntaxError:
            raise xgrammar_refusal from None


def grammar_syntax(text: str) -> str:
    """How vLLM reads a ``GRAMMAR`` request: EBNF if any line (comments aside) defines a rule
    with ``::=``, Lark otherwise."""
    for line in text.split("\n"):
        if "::=" in re.sub(r"(#|//).*$", "", line):
            return "ebnf"
    return "lark"


class GuidedGrammar:
    """One request's grammar, with the methods of vLLM's ``StructuredOutputGrammar``."""

    def __init__(self, index: TokenIndex, *, max_rollback: int = -1) -> None:
        self._guide = Guide(index, max_rollback=max_rollback)
        #: Tokens accepted and not rolled back (vLLM's counter of the same name).
        self.num_processed_tokens = 0

    @property
    def guide(self) -> Guide:
        """The guided guide underneath."""
        return self._guide

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Consumes all of ``tokens`` if each is allowed in turn; else none, and False."""
        if self._guide.is_terminated():
            return False
        if not self._guide.accept_tokens(tokens):
            return False
        self.num_processed_tokens += len(tokens)
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts from here; the state is kept."""
        if self._guide.is_terminated():
            return []
        return list(tokens[: self._guide.validate_tokens(tokens)])

    def rollback(self, num_tokens: int) -> None:
        """Undoes the last ``num_tokens`` accepted tokens."""
        if num_tokens <= 0:
            return
        self._guide.rollback(num_tokens)
        self.num_processed_tokens -= num_tokens

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        """Writes the next-token mask into row ``batch_index`` of a CPU int32 bitmask."""
        self._guide.fill_bitmask(bitmask, batch_index)

    def is_terminated(self) -> bool:
        """Whether EOS was accepted."""
        return self._guide.is_terminated()

    def reset(self) -> None:
        """Back to the start."""
        self._guide.reset()
        self.num_processed_tokens = 0

    def __repr__(self) -> str:
        return f"GuidedGrammar(state={self._guide.state}, processed={self.num_processed_tokens})"


_KINDS = ("JSON", "JSON_OBJECT", "REGEX", "CHOICE", "GRAMMAR", "STRUCTURAL_TAG")


class GuidedBackend:
    """Compiles vLLM structured-output requests into :class:`GuidedGrammar` objects.

    ``tokenizer`` is a transformers tokenizer or a ``guided.Vocabulary``; ``vocab_size`` is the
    model's logit width (vLLM's ``vocab_size``), which bitmask rows must cover. Indexes are shared
    through ``cache`` (one per vocabulary; made if not given).
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
        if cache is not None:
            if vocab_size is not None and cache.vocabulary.vocab_size != vocab_size:
                raise GuidedError(
                    f"the cache's vocabulary has {cache.vocabulary.vocab_size} logits, "
                    f"the model {vocab_size}"
                )
            self.cache = cache
        else:
            self.cache = IndexCache(resolve_vocabulary(tokenizer, vocab_size))
        self.vocab_size = self.cache.vocabulary.vocab_size
        self.max_rollback = max_rollback
        self.whitespace = whitespace

    def compile_index(self, request_type: Any, grammar_spec: str | Sequence[str]) -> TokenIndex:
        """The shared index of one request's constraint."""
        kind = str(getattr(request_type, "name", request_type)).upper()
        if kind not in _KINDS:
            raise GuidedError(f"unknown structured-output request type {request_type!r}")
        if kind == "JSON":
            options = {} if self.whitespace is None else {"whitespace": self.whitespace}
            if not isinstance(grammar_spec, str):
                raise GuidedError("a JSON request carries its schema as JSON text")
            return self.cache.json_schema(grammar_spec, **options)
        if kind == "JSON_OBJECT":
            return self.cache.grammar(json_value_grammar(roots=("object",)))
        if kind == "REGEX":
            if not isinstance(grammar_spec, str):
                raise GuidedError("a REGEX request carries its pattern as text")
            return regex_index(self.cache, grammar_spec)
        if kind == "CHOICE":
            return self.cache.regex(choice_regex(parse_choices(grammar_spec)))
        if kind == "GRAMMAR":
            if not isinstance(grammar_spec, str):
                raise GuidedError("a GRAMMAR request carries its grammar as text")
            return self.cache.grammar(grammar_spec, syntax=grammar_syntax(grammar_spec))
        if not isinstance(grammar_spec, str):
            raise GuidedError("a STRUCTURAL_TAG request carries its tag as JSON text")
        return self.cache.get(structural_tag_recipe(grammar_spec))

    def compile_grammar(self, request_type: Any, grammar_spec: str) -> GuidedGrammar:
        """A fresh grammar for one request."""
        return GuidedGrammar(
            self.compile_index(request_type, grammar_spec), max_rollback=self.max_rollback
        )

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        """An int32 CPU bitmask ``[max_num_seqs, ceil(vocab_size / 32)]``, every bit set."""
        return allocate_token_bitmask(max_num_seqs, self.vocab_size)

    def destroy(self) -> None:
        """Drops the cached indexes."""
        self.cache.clear()
