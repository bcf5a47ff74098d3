"""outlines-core's Python surface, backed by guided.

vLLM's and SGLang's outlines backends (and outlines itself) drive constrained decoding through three
outlines-core classes: a ``Vocabulary`` built from ``{token bytes: [ids]}``, an ``Index`` compiled
from a regex over it, and one ``Guide`` per request that advances, rolls back and writes a packed
int32 mask into the engine's tensor through a raw pointer. This module offers the same classes,
constructors, methods and errors (``ValueError`` and its subclasses), so code written against
``outlines_core`` runs unchanged after ``import guided.compat.outlines_core as outlines_core`` (or
``sys.modules["outlines_core"] = guided.compat.outlines_core`` before the engine imports it).

What runs underneath is a :class:`guided.TokenIndex`. outlines-core builds its whole index up front,
visiting every reachable state with every token; guided builds the automaton lazily and computes
a state's mask the first time a guide stands there, so ``Index(...)`` costs little and a mask is
paid for only where generation goes. ``get_transitions`` and ``get_final_states`` are the
exceptions: they describe the whole index, so they explore it, once, on first call.

Where the semantics differ, on purpose:

- Regex dialect: outlines-core's. Patterns are read by ``regex-syntax``, the parser under
  outlines-core's ``regex-automata`` (``dialect="rust"``): ``\\d``, ``\\w``, ``\\s`` and ``(?i)``
  are Unicode-aware, classes nest, ``{,3}`` is an error. guided's own boolean groups (``(?&...)``,
  ``(?~...)``), which only ``json_schema.build_regex_from_schema`` writes, are read in guided's
  dialect. Where outlines-core's masks leave the pattern's language, README.md lists it.
- Masks are exact. outlines-core refuses a token whose last byte turns a complete match into an
  incomplete one (``.`` after ``1`` in ``[0-9]+(\\.[0-9]+)?``, ``abc`` at the start of
  ``(ab|cd)+``), because its automaton reports a match one byte late; a longer token over the same
  spot (``.5``) is allowed. guided allows every token that can still lead to a match, and no other.
- ``max_rollback=0`` (what vLLM passes without speculative decoding) keeps every state here. In
  outlines-core it keeps the last four, an accident of its ring buffer's first allocation; any
  rollback that succeeds there succeeds here.
- ``Guide.reset()`` forgets the history. outlines-core keeps it, so that rolling back right after a
  reset would return to the previous generation's states.
- ``Index(...)`` refuses a vocabulary with which the pattern cannot even start (outlines-core's
  "incompatible vocabulary" error). A state deeper in the pattern that no token can leave is found
  when a guide reaches it, not up front: its mask then allows no token.
- ``write_mask_into`` requires room for the highest token id; outlines-core checks the number of
  distinct ids instead, which is the same for a gap-free vocabulary and too small otherwise. Words
  beyond the mask (``numel`` may exceed it) are cleared, as outlines-core does.
- The allowed-token lists are sorted; outlines-core returns them in hash order.
- ``Vocabulary.from_pretrained`` needs the Hugging Face Hub; guided never downloads, so it raises.
  Build a vocabulary from a local tokenizer with :func:`guided.Vocabulary.from_huggingface` and
  :meth:`Vocabulary.from_guided`.
- States are guided's state numbers, not outlines-core's (which are byte offsets into its table);
  both are opaque ints to callers.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from guided._errors import GuidedError, InvalidTokenError, RegexSyntaxError
from guided._lib import Guide as _Guide
from guided._lib import TokenIndex
from guided._lib import Vocabulary as _Vocabulary
from guided.compat.outlines_core import json_schema

__all__ = ["Guide", "Index", "Vocabulary", "json_schema"]

_TokenKey = Union[str, bytes]


def _key_bytes(token: object) -> bytes:
    if isinstance(token, bytes):
        return token
    if isinstance(token, str):
        return token.encode("utf-8")
    raise TypeError(f"a token is str or bytes, got {type(token).__name__}")


class Vocabulary:
    """outlines-core's vocabulary: an EOS id and a map from token text (str, read as UTF-8, or
    bytes) to the ids that spell it."""

    def __init__(
        self, eos_token_id: int, map: Mapping[str, Iterable[int]] | Mapping[bytes, Iterable[int]]
    ) -> None:
        if not isinstance(eos_token_id, int) or eos_token_id < 0:
            raise ValueError(f"eos_token_id must be a non-negative int, got {eos_token_id!r}")
        if not isinstance(map, Mapping):
            raise TypeError(
                "Expected a dict with keys of type str or bytes and values of type list[int]"
            )
        kinds = {type(k) for k in map}
        if kinds - {str, bytes} or len(kinds) > 1:
            raise TypeError(
                "Dict keys or/and values of the wrong types. Expected a dict with keys of type "
                "str or bytes and values of type list[int]"
            )
        self._eos = eos_token_id
        self._map: dict[bytes, list[int]] = {}
        self._lock = threading.Lock()
        self._compiled: _Vocabulary | None = None
        for token, ids in map.items():
            id_list = list(ids)
            if not all(isinstance(i, int) and i >= 0 for i in id_list):
                raise TypeError(f"token ids must be non-negative ints, got {id_list!r}")
            if eos_token_id in id_list:
                raise ValueError("EOS token should not be inserted into Vocabulary")
            self._map.setdefault(_key_bytes(token), []).extend(id_list)

    @staticmethod
    def from_pretrained(model: str, revision: str | None = None, token: str | None = None) -> Any:
        """outlines-core downloads the tokenizer from the Hugging Face Hub; guided never does."""
        raise GuidedError(
            f"Vocabulary.from_pretrained({model!r}) would download from the Hugging Face Hub, "
            "which guided never does; load the tokenizer locally and use "
            "Vocabulary.from_guided(guided.Vocabulary.from_huggingface(tokenizer))"
        )

    @staticmethod
    def from_guided(vocab: _Vocabulary) -> Vocabulary:
        """This vocabulary's form of a ``guided.Vocabulary`` (the first EOS id is the EOS)."""
        if not vocab.eos_token_ids:
            raise GuidedError("the vocabulary names no EOS token id")
        eos = vocab.eos_token_ids[0]
        mapping: dict[bytes, list[int]] = {}
        for i in range(len(vocab)):
            data = vocab.token_bytes(i)
            if data is not None and i not in vocab.eos_token_ids:
                mapping.setdefault(data, []).append(i)
        out = Vocabulary(eos, mapping)
        if vocab.vocab_size == out._width() and tuple(vocab.eos_token_ids) == (eos,):
            out._compiled = vocab
        return out

    def get_eos_token_id(self) -> int:
        """The end-of-sequence id."""
        return self._eos

    def get(self, token: _TokenKey) -> list[int] | None:
        """The ids of ``token``, or None."""
        ids = self._map.get(_key_bytes(token))
        return list(ids) if ids is not None else None

    def insert(self, token: _TokenKey, token_id: int) -> None:
        """Adds ``token_id`` as a spelling of ``token``."""
        if token_id == self._eos:
            raise ValueError("EOS token should not be inserted into Vocabulary")
        with self._lock:
            self._map.setdefault(_key_bytes(token), []).append(token_id)
            self._compiled = None

    def remove(self, token: _TokenKey) -> None:
        """Removes ``token`` and all its ids."""
        with self._lock:
            self._map.pop(_key_bytes(token), None)
            self._compiled = None

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._map.values()) + 1

    def _width(self) -> int:
        return max([self._eos, *(i for ids in self._map.values() for i in ids)]) + 1

    def _guided(self) -> _Vocabulary:
        """The guided vocabulary these tokens make (built once, rebuilt after a change)."""
        with self._lock:
            if self._compiled is None:
                tokens: list[bytes | None] = [None] * self._width()
                for data, ids in self._map.items():
                    for i in ids:
                        tokens[i] = data
                self._compiled = _Vocabulary(tokens, eos_token_ids=[self._eos])
            return self._compiled

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self._eos == other._eos and self._map == other._map

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, tuple[int, dict[bytes, list[int]]]]:
        return (Vocabulary, (self._eos, self._map))

    def __deepcopy__(self, memo: dict[int, Any]) -> Vocabulary:
        return Vocabulary(self._eos, {k: list(v) for k, v in self._map.items()})

    def __repr__(self) -> str:
        return f"Vocabulary(eos_token_id={self._eos}, tokens={len(self._map)})"


def _compile(regex: str, vocabulary: _Vocabulary) -> TokenIndex:
    """``regex`` as outlines-core reads it; guided's printed boolean groups in guided's dialect."""
    try:
        return TokenIndex.from_regex(regex, vocabulary, dialect="rust")
    except RegexSyntaxError:
        if "(?&" not in regex and "(?~" not in regex:
            raise
    return TokenIndex.from_regex(regex, vocabulary)


class Index:
    """outlines-core's index: the allowed tokens and transitions of ``regex`` over ``vocabulary``.

    Picklable (as its pattern and vocabulary) and shareable between guides and threads.
    """

    def __init__(self, regex: str, vocabulary: Vocabulary) -> None:
        if not isinstance(vocabulary, Vocabulary):
            raise TypeError(f"expected a Vocabulary, got {type(vocabulary).__name__}")
        self._regex = regex
        self._vocabulary = vocabulary
        self._index = _compile(regex, vocabulary._guided())
        self._eos = vocabulary.get_eos_token_id()
        self._explored: tuple[dict[int, dict[int, int]], set[int]] | None = None
        self._explore_lock = threading.Lock()
        start = self._index.initial_state
        if not self._index.is_accepting(start) and not self._index.allowed(start).any():
            raise ValueError(
                f"The vocabulary provided is incompatible with the regex {regex!r}: no token "
                "can start a match. This may be due to an encoding issue in your vocabulary."
            )

    @property
    def token_index(self) -> TokenIndex:
        """The guided index underneath."""
        return self._index

    def get_initial_state(self) -> int:
        """The start state."""
        return self._index.initial_state

    def get_final_states(self) -> set[int]:
        """Every reachable accepting state (explores the whole index on first call)."""
        return set(self._explore()[1])

    def is_final_state(self, state: int) -> bool:
        """Whether ``state`` accepts (EOS allowed)."""
        return self._index.is_accepting(state)

    def get_allowed_tokens(self, state: int) -> list[int] | None:
        """The tokens allowed in ``state`` (EOS included where it accepts), sorted; None for a
        state with none."""
        allowed = np.flatnonzero(self._index.allowed(state))
        return [int(t) for t in allowed] if allowed.size else None

    def get_next_state(self, state: int, token_id: int) -> int | None:
        """The state ``token_id`` leads to, or None (EOS never leads anywhere, as in
        outlines-core)."""
        if token_id == self._eos or token_id < 0 or token_id >= self._index.vocab_size:
            return None
        nxt = self._index.next_state(state, token_id)
        return nxt if nxt > 0 else None

    def get_transitions(self) -> dict[int, dict[int, int]]:
        """``{state: {token: next state}}`` over every reachable state, EOS looping on accepting
        states as in outlines-core (explores the whole index on first call)."""
        return {s: dict(t) for s, t in self._explore()[0].items()}

    def _explore(self) -> tuple[dict[int, dict[int, int]], set[int]]:
        with self._explore_lock:
            if self._explored is None:
                transitions: dict[int, dict[int, int]] = {}
                finals: set[int] = set()
                todo = [self._index.initial_state]
                while todo:
                    state = todo.pop()
                    if state in transitions:
                        continue
                    nxt: npt.NDArray[np.int32] = self._index.next_states(state)
                    tokens = np.flatnonzero(nxt > 0)
                    row = {int(t): int(nxt[t]) for t in tokens}
                    if self._index.is_accepting(state):
                        finals.add(state)
                        row[self._eos] = state
                    transitions[state] = row
                    todo.extend(s for s in set(row.values()) if s not in transitions)
                self._explored = (transitions, finals)
            return self._explored

    def __reduce__(self) -> tuple[Any, tuple[str, Vocabulary]]:
        return (Index, (self._regex, self._vocabulary))

    def __deepcopy__(self, memo: dict[int, Any]) -> Index:
        return self  # immutable

    def __repr__(self) -> str:
        return f"Index(regex={self._regex!r}, vocab_size={self._index.vocab_size})"


class Guide:
    """outlines-core's guide: one request's position in an :class:`Index`.

    ``max_rollback`` bounds how many steps :meth:`rollback_state` can undo; 0 keeps them all.
    """

    def __init__(self, index: Index, max_rollback: int = 32) -> None:
        if not isinstance(index, Index):
            raise TypeError(f"expected an Index, got {type(index).__name__}")
        if max_rollback < 0:
            raise OverflowError("can't convert negative int to unsigned")
        self._index = index
        self._max_rollback = max_rollback
        self._guide = _Guide(index.token_index, max_rollback=max_rollback or -1)
        self._eos = index._eos
        self._history: list[int] = []  # tokens since reset, for pickling
        self._rollback = 0  # steps rollback_state can undo (outlines-core's stored states)
        self._words = (index.token_index.vocab_size + 31) // 32

    def get_state(self) -> int:
        """The current state."""
        return self._guide.state

    def get_tokens(self) -> list[int]:
        """The tokens allowed now, sorted."""
        allowed = self._index.get_allowed_tokens(self._guide.state)
        return allowed if allowed is not None else []

    def advance(self, token_id: int, return_tokens: bool | None = None) -> list[int] | None:
        """Consumes ``token_id``; raises ``ValueError`` if it is not allowed (EOS included: the
        guide stays in its accepting state). Returns the tokens allowed next unless
        ``return_tokens`` is False."""
        if token_id == self._eos:
            raise ValueError(
                f"No next state found for the current state: {self._guide.state} "
                f"with token ID: {token_id}"
            )
        try:
            self._guide.advance(token_id)
        except InvalidTokenError:
            raise InvalidTokenError(
                f"No next state found for the current state: {self._guide.state} "
                f"with token ID: {token_id}",
                token=token_id,
                state=self._guide.state,
            ) from None
        self._history.append(token_id)
        self._rollback += 1
        if self._max_rollback:
            self._rollback = min(self._rollback, self._max_rollback)
        return None if return_tokens is False else self.get_tokens()

    def accepts_tokens(self, sequence: Iterable[int]) -> bool:
        """Whether every token of ``sequence`` is allowed in turn (EOS never is); the state does
        not change."""
        tokens = list(sequence)
        if self._eos in tokens:
            return False
        return self._guide.validate_tokens(tokens) == len(tokens)

    def is_finished(self) -> bool:
        """Whether the current state accepts (EOS allowed)."""
        return self._guide.is_accepting()

    def get_allowed_rollback(self) -> int:
        """How many steps :meth:`rollback_state` can undo now."""
        return self._rollback

    def rollback_state(self, n: int) -> None:
        """Undoes the last ``n`` steps; ``ValueError`` if fewer are remembered."""
        if n < 0:
            raise OverflowError("can't convert negative int to unsigned")
        if n > self.get_allowed_rollback():
            raise ValueError(
                f"Cannot roll back {n} step(s): only {self.get_allowed_rollback()} states stored "
                f"(max_rollback = {self._max_rollback})."
            )
        self._guide.rollback(n)
        self._rollback -= n
        if n:
            del self._history[-n:]

    def reset(self) -> None:
        """Back to the initial state, history forgotten."""
        self._guide.reset()
        self._history.clear()
        self._rollback = 0

    def write_mask_into(self, data_ptr: int, numel: int, element_size: int) -> None:
        """Writes the mask of allowed tokens into ``numel`` 4-byte words at address ``data_ptr``
        (``tensor.data_ptr()`` of a contiguous CPU int32 tensor or array): the mask in the first
        ``ceil(vocab_size / 32)`` words, zeros in the rest."""
        if element_size != 4:
            raise ValueError(
                f"Invalid element size: got {element_size} bytes per element, expected 4 bytes "
                "(32-bit integer)."
            )
        if not isinstance(data_ptr, int) or data_ptr == 0:
            raise ValueError("Invalid data pointer: received a null pointer.")
        if data_ptr % 4:
            raise ValueError(f"Invalid data pointer: {data_ptr:#x} is not 4-byte aligned.")
        if numel < self._words:
            raise ValueError(
                f"Invalid buffer size: got {numel} elements ({numel * 4} bytes), expected "
                f"{self._words} elements ({self._words * 4} bytes). Ensure that the mask tensor "
                "has shape (1, (vocab_size + 31) // 32) and uses 32-bit integers."
            )
        words = (ctypes.c_int32 * numel).from_address(data_ptr)
        view = np.frombuffer(memoryview(words), dtype=np.int32)
        if numel > self._words:
            view[self._words :] = 0
        self._guide.fill_bitmask(view[: self._words].reshape(1, self._words), 0)

    def __reduce__(self) -> tuple[Any, tuple[Index, int, list[int], int]]:
        history = list(self._history)
        return (_restore_guide, (self._index, self._max_rollback, history, self._rollback))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Guide):
            return NotImplemented
        return self._index is other._index and self._guide.state == other._guide.state

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Guide(state={self._guide.state}, index={self._index!r})"


def _restore_guide(index: Index, max_rollback: int, history: list[int], rollback: int) -> Guide:
    guide = Guide(index, max_rollback)
    for token in history:
        guide.advance(token, return_tokens=False)
    guide._rollback = min(rollback, guide._rollback)
    return guide
