"""Vocabularies from live tokenizer objects.

The Rust loaders read files; this module reads *objects*: a transformers tokenizer, a
``tokenizers.Tokenizer``, or a SentencePiece model, and turns each into the same
:class:`guided.Vocabulary`. It never guesses a token's bytes from decoded text (``decode`` returns
``str`` and turns a token that ends inside a UTF-8 character into U+FFFD); it reads the
tokenizer's own definition instead:

- ``tokenizers``-backed tokenizers (every "fast" transformers tokenizer) serialize themselves to
  ``tokenizer.json`` text, which the Rust loader reads with the decoder's exact rules.
- SentencePiece models are read piece by piece: control and unknown pieces have no bytes, a byte
  piece ``<0xNN>`` is the single raw byte, and every other piece is its text with ``▁`` read as a
  space (what ``SentencePieceProcessor.decode`` does for a piece that is not first).

End-of-sequence ids come from the tokenizer (``eos_token_id``) when the caller gives none; a
``tokenizers.Tokenizer`` has no such notion, so the loader's inference by name applies there.
``sentencepiece`` is imported only when a SentencePiece model is read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Union

from guided._errors import VocabularyError
from guided._lib import Vocabulary

__all__ = ["from_huggingface", "from_sentencepiece", "sentencepiece_tokens"]

EosIds = Union[int, Iterable[int], None]


def _eos_from(tokenizer: Any) -> tuple[int, ...] | None:
    """The tokenizer's own EOS id(s), or None when it names none."""
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        return None
    if isinstance(eos, int):
        return (eos,)
    if isinstance(eos, (list, tuple)) and all(isinstance(i, int) for i in eos):
        return tuple(eos)
    return None


def sentencepiece_tokens(processor: Any) -> list[bytes | None]:
    """Each piece's bytes, by id, from a loaded ``sentencepiece.SentencePieceProcessor``."""
    size = processor.get_piece_size()
    pieces: list[str] = processor.id_to_piece(list(range(size)))
    is_control, is_unknown = processor.is_control, processor.is_unknown
    is_unused, is_byte = processor.is_unused, processor.is_byte
    tokens: list[bytes | None] = []
    for i, piece in enumerate(pieces):
        if is_control(i) or is_unknown(i) or is_unused(i):
            tokens.append(None)
        elif is_byte(i):
            byte = _byte_piece(piece)
            if byte is None:
                raise VocabularyError(f"SentencePiece byte piece {i} is {piece!r}, not <0xNN>")
            tokens.append(byte)
        else:
            tokens.append(piece.replace("\u2581", " ").encode("utf-8"))
    return tokens


def _byte_piece(piece: str) -> bytes | None:
    """The byte a ``<0xNN>`` piece stands for."""
    hexdigits = piece[3:5]
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        if all(c in "0123456789abcdefABCDEF" for c in hexdigits):
            return bytes([int(hexdigits, 16)])
    return None


def _load_sentencepiece(model: Any) -> Any:
    """A SentencePieceProcessor from a path, serialized model bytes, or a processor."""
    if hasattr(model, "id_to_piece") and hasattr(model, "get_piece_size"):
        return model
    try:
        import sentencepiece
    except ImportError:
        raise VocabularyError(
            "reading a SentencePiece model needs the sentencepiece package "
            "(pip install sentencepiece)"
        ) from None
    processor = sentencepiece.SentencePieceProcessor()
    try:
        if isinstance(model, (bytes, bytearray)):
            processor.LoadFromSerializedProto(bytes(model))
        elif isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            if not os.path.isfile(path):
                raise VocabularyError(f"SentencePiece model {path!r} is not a file")
            processor.Load(path)
        else:
            raise VocabularyError(
                "expected a SentencePiece model path, its bytes, or a SentencePieceProcessor, "
                f"got {type(model).__name__}"
            )
    except (RuntimeError, OSError) as e:
        raise VocabularyError(f"cannot read SentencePiece model: {e}") from None
    return processor


def from_sentencepiece(
    model: Any, *, eos_token_ids: EosIds = None, vocab_size: int | None = None
) -> Vocabulary:
    """A vocabulary from a SentencePiece ``.model`` path, its bytes, or a loaded processor."""
    processor = _load_sentencepiece(model)
    if eos_token_ids is None:
        eos = processor.eos_id()
        eos_token_ids = (eos,) if eos >= 0 else ()
    return Vocabulary(
        sentencepiece_tokens(processor), eos_token_ids=eos_token_ids, vocab_size=vocab_size
    )


def from_huggingface(
    tokenizer: Any, *, eos_token_ids: EosIds = None, vocab_size: int | None = None
) -> Vocabulary:
    """A vocabulary from a transformers tokenizer or a ``tokenizers.Tokenizer``."""
    if eos_token_ids is None:
        eos_token_ids = _eos_from(tokenizer)

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None and callable(getattr(tokenizer, "to_str", None)):
        backend = tokenizer  # a tokenizers.Tokenizer
    if backend is not None:
        text = backend.to_str()
        if not isinstance(text, str):
            raise VocabularyError(f"{type(backend).__name__}.to_str() did not return a str")
        return Vocabulary.from_tokenizer_json(
            text, eos_token_ids=eos_token_ids, vocab_size=vocab_size
        )

    sp_model = getattr(tokenizer, "sp_model", None)
    if sp_model is not None:
        tokens = sentencepiece_tokens(_load_sentencepiece(sp_model))
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        for token_id, token in sorted(added.items()):
            if token_id >= len(tokens):
                tokens.extend([None] * (token_id + 1 - len(tokens)))
            content = getattr(token, "content", str(token))
            special = bool(getattr(token, "special", True))
            tokens[token_id] = None if special else content.encode("utf-8")
        if eos_token_ids is None:
            eos = sp_model.eos_id()
            eos_token_ids = (eos,) if eos >= 0 else ()
        return Vocabulary(tokens, eos_token_ids=eos_token_ids, vocab_size=vocab_size)

    raise VocabularyError(
        f"cannot read a vocabulary from {type(tokenizer).__module__}.{type(tokenizer).__name__}: "
        "expected a transformers tokenizer (backed by `tokenizers` or SentencePiece) or a "
        "tokenizers.Tokenizer; build Vocabulary(tokens) from each token's bytes instead"
    )
