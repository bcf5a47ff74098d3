"""Type stubs for the private Rust extension. Users import from ``guided``, not from here."""

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, final

import numpy as np
import numpy.typing as npt

__version__: str

RegexDialect = Literal["python", "ecma", "xgrammar", "rust"]
"""How a pattern is read: Python's ``re`` (the default), ECMA-262 (JSON Schema's ``pattern``),
xgrammar's regex converter, or the Rust ``regex`` crate (outlines-core, llguidance)."""

@final
class DFA:
    """A full-match automaton over bytes. State 0 is dead, state 1 the start."""

    def __init__(
        self, pattern: str, *, max_states: int = 20000, dialect: RegexDialect = "python"
    ) -> None: ...
    @property
    def pattern(self) -> str: ...
    @property
    def num_states(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def dead(self) -> int: ...
    @property
    def num_classes(self) -> int: ...
    def next_state(self, state: int, byte: int) -> int: ...
    def is_accepting(self, state: int) -> bool: ...
    def is_final(self, state: int) -> bool: ...
    def match(self, data: bytes | bytearray | str) -> bool: ...
    @property
    def table(self) -> npt.NDArray[np.int32]: ...
    @property
    def accepting(self) -> npt.NDArray[np.bool_]: ...
    @property
    def final(self) -> npt.NDArray[np.bool_]: ...
    def memory_bytes(self) -> int: ...

def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]: ...

_EosIds = int | Iterable[int] | None
_Path = str | os.PathLike[str]

@final
class Vocabulary:
    """Token id -> bytes for one tokenizer, with its EOS ids and the model's logit width."""

    def __init__(
        self,
        tokens: Iterable[bytes | bytearray | None],
        *,
        eos_token_ids: _EosIds = (),
        vocab_size: int | None = None,
    ) -> None: ...
    @staticmethod
    def from_tokenizer_json(
        path_or_text: _Path,
        *,
        eos_token_ids: _EosIds = None,
        vocab_size: int | None = None,
        max_file_bytes: int = 268435456,
    ) -> Vocabulary: ...
    @staticmethod
    def from_tiktoken(
        path: _Path,
        *,
        special_tokens: Mapping[str, int] | None = None,
        eos_token_ids: _EosIds = None,
        vocab_size: int | None = None,
        max_file_bytes: int = 268435456,
    ) -> Vocabulary: ...
    @staticmethod
    def from_huggingface(
        tokenizer: Any, *, eos_token_ids: _EosIds = None, vocab_size: int | None = None
    ) -> Vocabulary: ...
    @staticmethod
    def from_sentencepiece(
        model: Any, *, eos_token_ids: _EosIds = None, vocab_size: int | None = None
    ) -> Vocabulary: ...
    @staticmethod
    def from_bytes(data: bytes) -> Vocabulary: ...
    def to_bytes(self) -> bytes: ...
    def __len__(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...
    def token_bytes(self, token_id: int) -> bytes | None: ...
    def memory_bytes(self) -> int: ...
    @property
    def fingerprint(self) -> str: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[Any, tuple[bytes]]: ...

@final
class TokenIndex:
    """Which tokens may follow each state of a constraint, over one vocabulary."""

    def __init__(self, dfa: DFA, vocab: Vocabulary) -> None: ...
    @staticmethod
    def from_grammar(
        text: str,
        vocab: Vocabulary,
        *,
        syntax: Literal["gbnf", "ebnf", "lark"] = "gbnf",
        root: str = "root",
        max_stack: int = 256,
        max_states: int = 200000,
    ) -> TokenIndex: ...
    @staticmethod
    def from_structural_tag(
        tag: Mapping[str, Any] | str,
        vocab: Vocabulary,
        *,
        whitespace: str | None = None,
        max_recursion_depth: int = 3,
        max_free_depth: int = 4,
        strict: bool = True,
        assert_formats: bool = True,
        dialect: RegexDialect = "xgrammar",
        max_stack: int = 256,
        max_states: int = 200000,
    ) -> TokenIndex: ...
    @staticmethod
    def from_regex(
        pattern: str,
        vocab: Vocabulary,
        *,
        max_states: int = 20000,
        dialect: RegexDialect = "python",
    ) -> TokenIndex: ...
    @staticmethod
    def from_json_schema(
        schema: Mapping[str, Any] | bool | str,
        vocab: Vocabulary,
        *,
        whitespace: str | None = None,
        max_recursion_depth: int = 3,
        max_free_depth: int = 4,
        strict: bool = True,
        coerce_one_of: bool = False,
        assert_formats: bool = True,
        max_states: int = 200000,
        depth_bounds: bool = False,
    ) -> TokenIndex: ...
    @property
    def initial_state(self) -> int: ...
    @property
    def num_states(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def eos_token_ids(self) -> list[int]: ...
    @property
    def vocabulary(self) -> Vocabulary: ...
    @property
    def num_masks(self) -> int: ...
    def next_state(self, state: int, token: int) -> int: ...
    def next_states(self, state: int) -> npt.NDArray[np.int32]: ...
    def bitmask(self, state: int) -> npt.NDArray[np.int32]: ...
    def allowed(self, state: int) -> npt.NDArray[np.bool_]: ...
    def is_accepting(self, state: int) -> bool: ...
    def is_final(self, state: int) -> bool: ...
    def memory_bytes(self) -> int: ...

class Guide:
    """One request's position in a constraint."""

    def __init__(self, index: TokenIndex, *, max_rollback: int = 0) -> None: ...
    @property
    def index(self) -> TokenIndex: ...
    @property
    def state(self) -> int: ...
    @property
    def finished(self) -> bool: ...
    def is_terminated(self) -> bool: ...
    def is_accepting(self) -> bool: ...
    def advance(self, token: int) -> None: ...
    def accept_token(self, token: int) -> bool: ...
    def accept_tokens(self, tokens: Sequence[int]) -> bool: ...
    def validate_tokens(self, tokens: Sequence[int]) -> int: ...
    def rollback(self, n: int = 1) -> None: ...
    def reset(self) -> None: ...
    def copy(self) -> Guide: ...
    def fill_bitmask(self, bitmask: Any, index: int = 0) -> None: ...
    def allowed(self, device: Any = None) -> Any: ...
    def forced_bytes(self) -> bytes: ...

def fill_next_token_bitmask(
    guides: Sequence[Guide],
    bitmask: Any,
    indices: Sequence[int] | None = None,
    *,
    threads: int | None = None,
) -> None: ...
def json_schema_to_regex(
    schema: str,
    *,
    whitespace: str | None = None,
    max_recursion_depth: int = 3,
    max_free_depth: int = 4,
    strict: bool = True,
    coerce_one_of: bool = False,
    assert_formats: bool = True,
) -> tuple[str, list[str]]: ...
def schema_dfa(
    schema: str,
    *,
    whitespace: str | None = None,
    max_recursion_depth: int = 3,
    max_free_depth: int = 4,
    strict: bool = True,
    coerce_one_of: bool = False,
    assert_formats: bool = True,
    max_states: int = 200000,
) -> DFA: ...
def compile_stop_strings(
    vocab: Vocabulary,
    strings: Sequence[str | bytes],
    *,
    max_stop_bytes: int = 4096,
    max_table_bytes: int = 268435456,
) -> tuple[
    npt.NDArray[np.int32],
    npt.NDArray[np.int32],
    npt.NDArray[np.bool_],
    npt.NDArray[np.bool_],
    npt.NDArray[np.int64],
    npt.NDArray[np.int32],
]:
    """Where each token's bytes can sit inside each stop string: (slots, lengths, ends, inside,
    offsets, first_ends); see ``guided_core::stop``."""
