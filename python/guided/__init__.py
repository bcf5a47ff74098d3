"""guided: exact, fast constrained decoding.

Compile a regex or a JSON Schema into a byte-level automaton, walk a tokenizer's vocabulary through
it, and hand an inference engine packed int32 bitmasks of the tokens that may come next. The heavy
lifting happens in Rust (``guided._lib``); this package is the typed facade over it, plus the torch
helpers that apply masks and sample. ``import guided`` never imports torch.
"""

from __future__ import annotations

from guided import _lib
from guided._errors import (
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

__version__: str = _lib.__version__

__all__ = [
    "DFA",
    "Guide",
    "GuidedError",
    "InvalidTokenError",
    "RegexSyntaxError",
    "SizeLimitError",
    "TokenIndex",
    "UnsupportedSchemaError",
    "Vocabulary",
    "VocabularyError",
    "__version__",
    "fill_next_token_bitmask",
    "json_schema_to_regex",
    "utf8_sequences",
]
