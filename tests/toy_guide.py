"""A pure-Python guide over a toy vocabulary, for testing the sampler without the Rust index.

It follows the guide protocol (``fill_bitmask``, ``advance``, ``finished``, ``is_terminated``).
A token is allowed when the text so far plus the token can still be extended into a full match of
the pattern, which the ``regex`` package answers directly (``fullmatch(..., partial=True)``); EOS
is allowed once the text is a full match. The tests that use it check the outputs with Python's
``re``, a different engine.
"""

from __future__ import annotations

import numpy as np
import regex
import torch

from guided import InvalidTokenError

#: Token id -> text; ``None`` marks special tokens (the last one is EOS).
VOCAB: list[str | None] = [
    *"0123456789",
    ".",
    "-",
    "a",
    "b",
    "ab",
    "ba",
    "12",
    "3.",
    " ",
    "x",
    "\n",
    "99",
    "-1",
    "aa",
    "a.",
    None,
    None,
]
EOS = len(VOCAB) - 1
#: The model's logit width: wider than the vocabulary, as real models often are.
WIDTH = len(VOCAB) + 5


class ToyGuide:
    """Constrains generation to full matches of ``pattern`` over :data:`VOCAB`."""

    def __init__(self, pattern: str) -> None:
        self.pattern = regex.compile(pattern)
        self.text = ""
        self.terminated = False

    def allowed(self) -> list[int]:
        if self.terminated:
            return []
        tokens = [
            i
            for i, piece in enumerate(VOCAB)
            if piece and self.pattern.fullmatch(self.text + piece, partial=True) is not None
        ]
        complete = self.pattern.fullmatch(self.text)
        if complete is not None:
            tokens.append(EOS)
        return tokens

    @property
    def finished(self) -> bool:
        return self.terminated or self.allowed() == [EOS]

    def is_terminated(self) -> bool:
        return self.terminated

    def fill_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> None:
        bits = np.zeros(bitmask.shape[1] * 32, dtype=np.uint8)
        bits[self.allowed()] = 1
        bitmask[index] = torch.from_numpy(np.packbits(bits, bitorder="little").view(np.int32))

    def advance(self, token: int) -> None:
        if token not in self.allowed():
            raise InvalidTokenError(f"token {token} not allowed after {self.text!r}", token=token)
        if token == EOS:
            self.terminated = True
        else:
            piece = VOCAB[token]
            assert piece is not None
            self.text += piece
