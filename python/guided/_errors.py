"""The exception hierarchy.

Every error guided raises on bad input is a :class:`GuidedError`, which is a :class:`ValueError`,
so callers that already guard against ``ValueError`` keep working. The subclasses carry the facts a
caller needs to report or recover (the position in a pattern, the JSON pointer into a schema, the
limit that was crossed) as attributes, not just inside the message.
"""

from __future__ import annotations

__all__ = [
    "GrammarSyntaxError",
    "GuidedError",
    "InvalidTokenError",
    "RegexSyntaxError",
    "SizeLimitError",
    "UnsupportedSchemaError",
    "VocabularyError",
]


class GuidedError(ValueError):
    """Base class of every error guided raises on bad input."""


class RegexSyntaxError(GuidedError):
    """A pattern is malformed or uses a construct outside the dialect."""

    def __init__(self, message: str, *, pattern: str = "", position: int = 0) -> None:
        super().__init__(message)
        self.pattern = pattern
        #: Offset of the offending construct, in code points.
        self.position = position


class GrammarSyntaxError(GuidedError):
    """Grammar text is malformed, or its rules cannot be compiled (an undefined rule, left
    recursion that cannot be rewritten, a root that derives no text)."""

    def __init__(self, message: str, *, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        #: 1-based line and column (in code points) of the offending construct.
        self.line = line
        self.column = column


class UnsupportedSchemaError(GuidedError):
    """A JSON Schema keyword cannot be enforced exactly."""

    def __init__(self, message: str, *, keyword: str = "", pointer: str = "") -> None:
        super().__init__(message)
        self.keyword = keyword
        #: JSON pointer to the schema object that holds the keyword.
        self.pointer = pointer


class SizeLimitError(GuidedError):
    """A configurable size budget (states, depth, memory) was crossed."""

    def __init__(self, message: str, *, limit: str = "", value: int = 0, maximum: int = 0) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.maximum = maximum


class VocabularyError(GuidedError):
    """Tokenizer data is unreadable or inconsistent."""


class InvalidTokenError(GuidedError):
    """A token is not allowed by the constraint in the current state, or is out of range."""

    def __init__(self, message: str, *, token: int = -1, state: int = -1) -> None:
        super().__init__(message)
        self.token = token
        self.state = state
