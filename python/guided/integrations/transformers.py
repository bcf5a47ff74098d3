"""Constrained ``model.generate()`` in Hugging Face Transformers.

``generate`` calls each ``LogitsProcessor`` once per step with the sequences so far, ``input_ids``
``[rows, length]``, and the next-token scores ``[rows, V]``, and samples (or searches) from what it
gets back. A constraint needs more than that call gives: it needs to know where generation started,
which guide belongs to which row, and what happened to a row that already finished. The processors
here infer all three from ``input_ids`` alone, so they work for every decoding mode ``generate``
offers without hooks into its internals:

- Where generation started. The first call of a generation sees the prompt and nothing else, so
  its length is where the generated tokens begin. Transformers pads decoder-only prompts on the
  left, so that column is the same for every row, whatever each prompt's length. (Right-padded
  prompts put padding between prompt and output; ``generate`` warns about them and so do we: they
  are not supported.)
- Which guide is whose. Rows are identified by their generated tokens, not their position: with
  beam search (``num_beams > 1``, rows are ``batch * beams``) beams are reordered, duplicated and
  dropped at every step, so row ``i`` now may continue what row ``j`` held before. The processor
  keeps a dictionary from a generated-token tuple to its :class:`guided.Guide`. A row's guide is
  found under its tokens; if absent it is its parent's (the tuple minus the last token) copied and
  advanced by that token, and in the unlikely case that the parent is gone too it is rebuilt from
  the start. After each step only the current rows' entries are kept, so the dictionary holds at
  most ``rows`` guides. Rows with the same history share one guide, which is safe because a guide
  is only ever advanced while it is being created under a new key. The cost per step is one
  ``tolist`` of the generated block and a tuple hash per row, linear in the output length; the
  model's forward pass dwarfs it.
- Finished rows. Once a row has emitted EOS, ``generate`` keeps it in the batch and appends the
  pad token. A guide that has accepted EOS ignores what follows, and its mask allows EOS only
  (which ``generate`` replaces by padding anyway). A row stopped by another criterion (a stop
  string, say) is also padded; when the processor knows the pad id (from the tokenizer, or
  ``pad_token_id=``) a pad token where the constraint allows none ends the row the same way.
  Any other token the constraint does not allow means something outside the processor chose it
  (another processor forcing a token, for instance); that raises :class:`guided.InvalidTokenError`
  rather than let an output leave the constraint silently.

The mask is filled for the whole batch in one call (:func:`guided.fill_next_token_bitmask`, GIL
released, rows in parallel), copied to the scores' device and applied there
(:func:`guided.bitmask.apply_token_bitmask_inplace`: a Triton kernel on CUDA). The scores are
cloned first: ``generate`` keeps the tensor it passed in for ``output_logits``. Logit columns past
the vocabulary (models often pad their output layer, Qwen2's is 151,936 wide for 151,646 tokens)
are never allowed.

A processor serves one ``generate`` call at a time. It notices a new call when the batch size
changes or the sequences are not exactly one token longer than at the previous step, and starts
over; the one case it cannot tell apart is a new call whose prompt is exactly the previous call's
whole output, so call :meth:`GuidedLogitsProcessor.reset` (or make a new processor, which is cheap
when it shares a :class:`guided.TokenIndex`) between calls. Assisted (speculative) generation,
which calls processors on candidate positions and then rolls back, is not supported.

Masks cost most the first time a state is seen: an index computes each state's mask on demand
and keeps it. :class:`RegexLogitsProcessor` and :class:`JSONSchemaLogitsProcessor` take their
index from a :class:`guided.IndexCache` kept per tokenizer object (pass ``cache=`` to choose
another), so a processor made for each call finds the index, and the masks, that earlier calls
built; the tokenizer's vocabulary is read once per tokenizer too.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union

import torch
from transformers import LogitsProcessor

from guided import (
    Guide,
    IndexCache,
    InvalidTokenError,
    TokenIndex,
    Vocabulary,
)
from guided._vocab import from_huggingface
from guided.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from guided.bitmask import fill_next_token_bitmask as fill_bitmask

__all__ = [
    "GrammarLogitsProcessor",
    "GuidedLogitsProcessor",
    "JSONSchemaLogitsProcessor",
    "RegexLogitsProcessor",
    "index_cache_of",
    "vocabulary_of",
]

EosIds = Union[int, Iterable[int], None]


@dataclass
class _Row:
    """What the processor knows about one generated history."""

    guide: Guide
    #: The row ended on a pad token the constraint did not allow: it is over, only pads follow.
    padded: bool = False


class GuidedLogitsProcessor(LogitsProcessor):
    """Masks every token the constraint of ``index`` does not allow next (see the module notes).

    ``pad_token_id`` is the id ``generate`` appends to finished rows; give it when rows may stop
    for reasons other than EOS (stop strings, custom stopping criteria). ``threads`` bounds the
    parallelism of the batched mask fill (default: all cores).
    """

    def __init__(
        self, index: TokenIndex, *, pad_token_id: int | None = None, threads: int | None = None
    ) -> None:
        if not isinstance(index, TokenIndex):
            raise TypeError(f"expected a guided.TokenIndex, got {type(index).__name__}")
        self.index = index
        self.pad_token_id = pad_token_id
        self.threads = threads
        self.reset()

    def reset(self) -> None:
        """Forget the current generation; the next call starts a new one."""
        self._prompt_length: int | None = None
        self._rows = -1
        self._length = -1
        self._known: dict[tuple[int, ...], _Row] = {}

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.dim() != 2 or scores.dim() != 2 or input_ids.shape[0] != scores.shape[0]:
            raise ValueError(
                f"expected input_ids [rows, length] and scores [rows, V] with the same rows, got "
                f"{list(input_ids.shape)} and {list(scores.shape)}"
            )
        rows, length = input_ids.shape
        if self._prompt_length is None or rows != self._rows or length != self._length + 1:
            self.reset()
            self._prompt_length = length
            self._known = {(): _Row(Guide(self.index))}
        self._rows, self._length = rows, length

        generated = input_ids[:, self._prompt_length :].tolist()
        current = [self._row(tuple(tokens), r) for r, tokens in enumerate(generated)]
        self._known = {tuple(tokens): row for tokens, row in zip(generated, current)}
        return self._masked(scores, current)

    # ------------------------------------------------------------------------------- tracking

    def _row(self, key: tuple[int, ...], position: int) -> _Row:
        row = self._known.get(key)
        if row is not None:
            return row
        parent = self._known.get(key[:-1]) if key else None
        if parent is None:
            # Not a continuation of a row we saw at the previous step: rebuild from the start.
            row = _Row(Guide(self.index))
            for i, token in enumerate(key):
                self._advance(row, token, position, i)
            return row
        row = _Row(parent.guide.copy(), parent.padded)
        self._advance(row, key[-1], position, len(key) - 1)
        return row

    def _advance(self, row: _Row, token: int, position: int, offset: int) -> None:
        if row.padded or row.guide.is_terminated():
            return  # generate pads a finished row; what follows EOS is not constrained text
        if row.guide.accept_token(token):
            return
        if token == self.pad_token_id:
            row.padded = True
            return
        raise InvalidTokenError(
            f"row {position} of the batch holds token {token} at generated position {offset}, "
            "which the constraint does not allow there; was it forced by another logits "
            "processor? (a GuidedLogitsProcessor must see every generated token; call reset() "
            "between generate() calls)"
        )

    # ---------------------------------------------------------------------------------- masking

    def _masked(self, scores: torch.Tensor, rows: list[_Row]) -> torch.Tensor:
        vocab = self.index.vocab_size
        bitmask = allocate_token_bitmask(len(rows), vocab)
        live = [r for r, row in enumerate(rows) if not row.padded]
        fill_bitmask([rows[r].guide for r in live], bitmask, live, threads=self.threads)
        pad = self.pad_token_id
        for r, row in enumerate(rows):
            if row.padded:
                bitmask[r].zero_()
                if pad is not None and 0 <= pad < vocab:
                    bitmask[r, pad // 32] = _bit(pad % 32)
        out = scores.clone()
        if out.device != bitmask.device:
            bitmask = bitmask.to(out.device, non_blocking=True)
        apply_token_bitmask_inplace(out, bitmask, vocab_size=min(vocab, out.shape[1]))
        if out.shape[1] > vocab:
            out[:, vocab:] = -torch.inf
        return out


def _bit(position: int) -> int:
    """The int32 word with only bit ``position`` set (bit 31 is the sign bit)."""
    return (1 << position) - (1 << 32 if position == 31 else 0)


_CACHES: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], IndexCache]] = (
    weakref.WeakKeyDictionary()
)


def index_cache_of(tokenizer: Any, *, eos_token_ids: EosIds = None) -> IndexCache:
    """The :class:`guided.IndexCache` over a tokenizer's vocabulary, one per tokenizer object and
    EOS choice, so processors built for the same constraint share its index and masks.

    A :class:`guided.Vocabulary` gets a new cache each time (it cannot be weakly referenced, and a
    module-wide table would keep every vocabulary alive): to share indexes, pass ``cache=``.
    """
    if isinstance(tokenizer, Vocabulary):
        return IndexCache(tokenizer)
    eos = (
        eos_token_ids
        if eos_token_ids is None or isinstance(eos_token_ids, int)
        else tuple(eos_token_ids)
    )
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    key = (size, eos)
    try:
        cached = _CACHES.get(tokenizer)
    except TypeError:  # not weakly referenceable: nothing to key a cache on
        return IndexCache(from_huggingface(tokenizer, eos_token_ids=eos))
    if cached is not None and cached[0] == key:
        return cached[1]
    cache = IndexCache(from_huggingface(tokenizer, eos_token_ids=eos))
    _CACHES[tokenizer] = (key, cache)
    return cache


def vocabulary_of(tokenizer: Any, *, eos_token_ids: EosIds = None) -> Vocabulary:
    """The :class:`guided.Vocabulary` of a transformers tokenizer (or a ``tokenizers.Tokenizer``;
    a Vocabulary is returned as is), read once per tokenizer object and EOS choice."""
    if isinstance(tokenizer, Vocabulary):
        return tokenizer
    return index_cache_of(tokenizer, eos_token_ids=eos_token_ids).vocabulary


def _pad_id(tokenizer: Any, pad_token_id: int | None) -> int | None:
    if pad_token_id is not None:
        return pad_token_id
    pad = getattr(tokenizer, "pad_token_id", None)
    return pad if isinstance(pad, int) else None


class RegexLogitsProcessor(GuidedLogitsProcessor):
    """Constrains the generated text to full-match ``pattern`` (guided's regex dialect).

    The index comes from ``cache`` (default: the tokenizer's own, see :func:`index_cache_of`).
    """

    def __init__(
        self,
        pattern: str,
        tokenizer: Any,
        *,
        eos_token_ids: EosIds = None,
        pad_token_id: int | None = None,
        max_states: int = 20_000,
        threads: int | None = None,
        cache: IndexCache | None = None,
    ) -> None:
        if cache is None:
            cache = index_cache_of(tokenizer, eos_token_ids=eos_token_ids)
        index = cache.regex(pattern, max_states=max_states)
        super().__init__(index, pad_token_id=_pad_id(tokenizer, pad_token_id), threads=threads)


class GrammarLogitsProcessor(GuidedLogitsProcessor):
    """Constrains the generated text to what a grammar (``syntax``: GBNF, xgrammar's EBNF or
    Lark) derives from rule ``root`` (see :meth:`guided.TokenIndex.from_grammar`). The index
    comes from ``cache`` (default: the tokenizer's own, see :func:`index_cache_of`).
    """

    def __init__(
        self,
        grammar: str,
        tokenizer: Any,
        *,
        syntax: Literal["gbnf", "ebnf", "lark"] = "gbnf",
        root: str = "root",
        eos_token_ids: EosIds = None,
        pad_token_id: int | None = None,
        max_stack: int = 256,
        threads: int | None = None,
        cache: IndexCache | None = None,
    ) -> None:
        if cache is None:
            cache = index_cache_of(tokenizer, eos_token_ids=eos_token_ids)
        index = cache.grammar(grammar, syntax=syntax, root=root, max_stack=max_stack)
        super().__init__(index, pad_token_id=_pad_id(tokenizer, pad_token_id), threads=threads)


class JSONSchemaLogitsProcessor(GuidedLogitsProcessor):
    """Constrains the generated text to a JSON document valid under ``schema``.

    ``schema`` is a dict, its JSON text, or a pydantic model class. The options are those of
    :func:`guided.json_schema_to_regex` (``whitespace``, ``max_recursion_depth``, ``strict``, ...);
    the index holds exactly the schema's language (that regex's). It comes from
    ``cache`` (default: the tokenizer's own, see :func:`index_cache_of`).
    """

    def __init__(
        self,
        schema: Mapping[str, Any] | str | Any,
        tokenizer: Any,
        *,
        eos_token_ids: EosIds = None,
        pad_token_id: int | None = None,
        max_states: int = 200_000,
        threads: int | None = None,
        cache: IndexCache | None = None,
        **options: Any,
    ) -> None:
        if hasattr(schema, "model_json_schema"):
            schema = schema.model_json_schema()
        if cache is None:
            cache = index_cache_of(tokenizer, eos_token_ids=eos_token_ids)
        # Built from the schema's own expression, not its printed pattern: the expression shares
        # repeated languages, which the printed pattern would spell out once per copy.
        index = cache.json_schema(schema, max_states=max_states, **options)
        super().__init__(index, pad_token_id=_pad_id(tokenizer, pad_token_id), threads=threads)
