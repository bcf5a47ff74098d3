"""A synthetic byte-level vocabulary the size of Qwen2's, built in code.

The demo must run on a fresh machine with no tokenizer file and no network, yet a constraint over a
toy vocabulary of a few hundred tokens would say nothing about the costs that matter: the token trie
walk and the mask width both scale with the vocabulary. So the demo builds a vocabulary with the
shape of a real one, deterministically, in well under a second:

- the 256 single bytes first, so every byte string can be written (what byte-level BPE guarantees);
- JSON punctuation and whitespace runs, the tokens structured output leans on (``{"``, ``": "``,
  ``"]``, indentation);
- numbers, common English words and the words of typical schemas, each in the variants a BPE
  vocabulary keeps (bare, after a space, capitalised, quoted as a key);
- every two- and three-letter lowercase n-gram, bare and after a space;
- multi-byte UTF-8: accented Latin, Greek, Cyrillic, kana, CJK ideographs and emoji, plus *partial*
  characters (a CJK lead byte pair, an emoji's first three bytes), because real vocabularies have
  tokens that end inside a character and the automaton must handle them;
- pseudo-words from a seeded syllable generator until the regular tokens are used up;
- 32 special tokens (no bytes, never allowed in constrained text); the first and third are EOS, as
  ``<|endoftext|>`` and ``<|im_end|>`` are in Qwen2.

The result has exactly :data:`SYNTHETIC_VOCAB_SIZE` ids and never changes between runs or
machines (``random.Random`` with a fixed seed is stable across Python versions for the calls used
here). :func:`encode_greedy` is a longest-match encoder over any vocabulary's token bytes: not what
a trained tokenizer would produce, but a valid encoding, which is all a demo prompt needs.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from guided._lib import Vocabulary

__all__ = [
    "EOS_NAMES",
    "SPECIAL_TOKENS",
    "SYNTHETIC_VOCAB_SIZE",
    "decode",
    "encode_greedy",
    "special_token_id",
    "synthetic_tokens",
    "synthetic_vocabulary",
]

#: Qwen2's logit width.
SYNTHETIC_VOCAB_SIZE = 151_936

#: The special tokens, at the end of the id range; the EOS ones are marked in :data:`EOS_NAMES`.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    *(f"<|reserved_{i}|>" for i in range(29)),
)
EOS_NAMES = ("<|endoftext|>", "<|im_end|>")

_WORDS = """
a about after again all also an and any are as at back be because been before being between both
but by call can come could data day did do does down each even first for from get give go good
great had has have he her here him his how i if in into is it its just know last like little long
look made make man many may me more most much must my never new no not now of off old on one only
or other our out over own part people place right said same say see she should show small so some
still such take than that the their them then there these they thing think this those three time
to two under up us use very want was way we well were what when where which while who why will
with work world would year you your
name age admin tags id type value key user email phone address city country status role title
description created updated count total price amount items list true false null error message
result query answer text content label score date time version enabled active level code kind
first_name last_name username password token config options settings metadata source target
red green blue black white yellow orange purple gray pink
""".split()

_PUNCTUATION = '{}[]":, '
_JSON_PIECES = (
    '": "',
    '", "',
    '": ',
    '", ',
    '"}',
    '"]',
    '["',
    '{"',
    '"}]',
    '"},',
    '"}, {"',
    "}, {",
    "], [",
    '": [',
    '": {',
    '": ["',
    '": {"',
    '": true',
    '": false',
    '": null',
    "true",
    "false",
    "null",
    " true",
    " false",
    " null",
    "\\n",
    '\\"',
    "\\\\",
    "\\u",
    "\\/",
    "\\t",
)
# Code-point ranges whose characters become tokens (bare, and after a space).
_UNICODE_RANGES = (
    (0x00C0, 0x00FF),  # Latin-1 letters
    (0x0100, 0x017F),  # Latin Extended-A
    (0x0391, 0x03C9),  # Greek
    (0x0410, 0x044F),  # Cyrillic
    (0x3041, 0x3096),  # Hiragana
    (0x30A1, 0x30FA),  # Katakana
    (0x4E00, 0x5DFF),  # CJK ideographs (the most frequent block start)
    (0x1F300, 0x1F64F),  # pictographs and emoticons
)
_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"
_SEED = 20240917


def _variants(word: str) -> Iterable[str]:
    cap = word[:1].upper() + word[1:]
    yield from (word, " " + word, cap, " " + cap, '"' + word, '"' + word + '"', '"' + word + '":')
    yield ' "' + word + '": '


def _regular_tokens(count: int) -> list[bytes]:
    """The first ``count`` regular tokens, in id order (see the module notes)."""
    seen: set[bytes] = set()
    tokens: list[bytes] = []

    def add(token: bytes) -> bool:
        if token not in seen:
            seen.add(token)
            tokens.append(token)
        return len(tokens) >= count

    def add_all(items: Iterable[str | bytes]) -> bool:
        for item in items:
            if add(item.encode("utf-8") if isinstance(item, str) else item):
                return True
        return False

    def punctuation() -> Iterable[str]:
        for a in _PUNCTUATION:
            for b in _PUNCTUATION:
                yield a + b
        for a in _PUNCTUATION:
            for b in _PUNCTUATION:
                for c in _PUNCTUATION:
                    yield a + b + c
        yield from _JSON_PIECES
        for depth in range(1, 17):
            yield " " * depth
            yield "\n" + " " * depth
            yield ",\n" + " " * depth

    def numbers() -> Iterable[str]:
        for n in range(1000):
            yield str(n)
            yield " " + str(n)
        for n in range(100):
            yield f"{n:02d}"

    def ngrams() -> Iterable[str]:
        letters = "abcdefghijklmnopqrstuvwxyz"
        for a in letters:
            for b in letters:
                yield from (a + b, " " + a + b, (a + b).capitalize(), " " + (a + b).capitalize())
        for a in letters:
            for b in letters:
                for c in letters:
                    yield a + b + c
                    yield " " + a + b + c

    def unicode_pieces() -> Iterable[bytes]:
        for lo, hi in _UNICODE_RANGES:
            for cp in range(lo, hi + 1):
                char = chr(cp).encode("utf-8")
                yield char
                yield b" " + char
        for cp in range(0x4E00, 0x4E00 + 64 * 64, 64):
            yield chr(cp).encode("utf-8")[:2]  # a CJK character's first two bytes
        for cp in range(0x1F300, 0x1F650, 16):
            yield chr(cp).encode("utf-8")[:3]  # an emoji's first three bytes

    def pseudo_words() -> Iterable[str]:
        rng = random.Random(_SEED)
        while True:
            syllables = rng.randint(2, 4)
            word = "".join(
                rng.choice(_CONSONANTS) + rng.choice(_VOWELS) + rng.choice(("", "", "n", "r", "s"))
                for _ in range(syllables)
            )
            yield word
            yield " " + word

    if add_all(bytes([b]) for b in range(256)):
        return tokens
    for source in (
        punctuation(),
        numbers(),
        (v for w in _WORDS for v in _variants(w)),
        ngrams(),
        unicode_pieces(),
        pseudo_words(),
    ):
        if add_all(source):
            return tokens
    raise AssertionError("unreachable: pseudo_words() never ends")  # invariant


def synthetic_tokens(vocab_size: int = SYNTHETIC_VOCAB_SIZE) -> list[bytes | None]:
    """Every token's bytes by id; the last ``len(SPECIAL_TOKENS)`` ids are specials (``None``)."""
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (the bytes and the "
            f"special tokens), got {vocab_size}"
        )
    regular: list[bytes | None] = list(_regular_tokens(vocab_size - len(SPECIAL_TOKENS)))
    return regular + [None] * len(SPECIAL_TOKENS)


def special_token_id(name: str, vocab_size: int = SYNTHETIC_VOCAB_SIZE) -> int:
    """The id of a special token of the synthetic vocabulary."""
    return vocab_size - len(SPECIAL_TOKENS) + SPECIAL_TOKENS.index(name)


def synthetic_vocabulary(vocab_size: int = SYNTHETIC_VOCAB_SIZE) -> Vocabulary:
    """The synthetic vocabulary (see the module notes), with its two EOS ids."""
    eos = [special_token_id(name, vocab_size) for name in EOS_NAMES]
    return Vocabulary(synthetic_tokens(vocab_size), eos_token_ids=eos)


def encode_greedy(vocab: Vocabulary, text: str | bytes, *, max_token_bytes: int = 32) -> list[int]:
    """Token ids for ``text``, longest token first at each position.

    Raises ``ValueError`` when some byte has no token of its own (a vocabulary without all 256
    single bytes may not be able to write every text).
    """
    data = text.encode("utf-8") if isinstance(text, str) else text
    lookup = _token_lookup(vocab)
    longest = min(max_token_bytes, max((len(t) for t in lookup), default=0))
    ids: list[int] = []
    at = 0
    while at < len(data):
        for length in range(min(longest, len(data) - at), 0, -1):
            token = lookup.get(data[at : at + length])
            if token is not None:
                ids.append(token)
                at += length
                break
        else:
            raise ValueError(f"no token of the vocabulary starts with byte {data[at]:#04x}")
    return ids


_LOOKUPS: dict[str, dict[bytes, int]] = {}


def _token_lookup(vocab: Vocabulary) -> dict[bytes, int]:
    """bytes -> lowest id with those bytes, memoised per vocabulary fingerprint."""
    key = vocab.fingerprint
    lookup = _LOOKUPS.get(key)
    if lookup is None:
        lookup = {}
        for i in range(len(vocab)):
            token = vocab.token_bytes(i)
            if token and token not in lookup:
                lookup[token] = i
        _LOOKUPS.clear()  # one vocabulary at a time is all the demo needs
        _LOOKUPS[key] = lookup
    return lookup


def decode(vocab: Vocabulary, ids: Sequence[int]) -> str:
    """The text of ``ids`` (special tokens contribute nothing; bad UTF-8 is replaced)."""
    return b"".join(vocab.token_bytes(i) or b"" for i in ids).decode("utf-8", errors="replace")
