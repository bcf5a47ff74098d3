"""guided: exact, fast constrained decoding.

Compile a regex or a JSON Schema into a byte-level automaton, walk a tokenizer's vocabulary through
it, and hand an inference engine packed int32 bitmasks of the tokens that may come next. The heavy
lifting happens in Rust (``guided._lib``); this package is the typed facade over it, plus the torch
helpers that apply masks and sample. ``import guided`` never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guided import _lib
from guided._errors import (
    GrammarSyntaxError,
    GuidedError,
    InvalidTokenError,
    RegexSyntaxError,
    SizeLimitError,
    UnsupportedSchemaError,
    VocabularyError,
)
from guided._json_schema import json_schema_to_regex
from guided._lib import (
    DFA,
    Guide,
    TokenIndex,
    Vocabulary,
    fill_next_token_bitmask,
    utf8_sequences,
)
from guided._structural_tag import structural_tag
from guided.cache import IndexCache

if TYPE_CHECKING:
    from guided.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace

__version__: str = _lib.__version__

# The torch helpers load on first use, so that `import guided` does not import torch.
_TORCH_HELPERS = {"allocate_token_bitmask", "apply_token_bitmask_inplace"}


def __getattr__(name: str) -> Any:
    if name in _TORCH_HELPERS:
        from guided import bitmask

        return getattr(bitmask, name)
    raise AttributeError(f"module 'guided' has no attribute {name!r}")


__all__ = [
    "DFA",
    "GrammarSyntaxError",
    "Guide",
    "GuidedError",
    "IndexCache",
    "InvalidTokenError",
    "RegexSyntaxError",
    "SizeLimitError",
    "TokenIndex",
    "UnsupportedSchemaError",
    "Vocabulary",
    "VocabularyError",
    "__version__",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "fill_next_token_bitmask",
    "json_schema_to_regex",
    "structural_tag",
    "utf8_sequences",
]
