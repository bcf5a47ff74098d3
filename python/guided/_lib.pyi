"""Type stubs for the private Rust extension. Users import from ``guided``, not from here."""

import os
from collections.abc import Iterable, Mapping
from typing import Any, final

__version__: str

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
        path_or_text: _Path, *, eos_token_ids: _EosIds = None, vocab_size: int | None = None
    ) -> Vocabulary: ...
    @staticmethod
    def from_tiktoken(
        path: _Path,
        *,
        special_tokens: Mapping[str, int] | None = None,
        eos_token_ids: _EosIds = None,
        vocab_size: int | None = None,
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
