"""Sampling settings of one request, with the OpenAI / vLLM names and their validation.

An engine receives these settings from users, so they are checked once, here, when the object is
built: every bad value raises ``ValueError`` whose message starts with the field's name, and
nothing downstream has to re-check them. The checks follow vLLM where it is stricter than OpenAI
(``top_k`` and ``min_p`` exist only there) and OpenAI where vLLM silently clamps (a ``logit_bias``
outside [-100, 100] is an error, not a clamp). A temperature below 1e-5 means greedy decoding, as in
vLLM: dividing logits by a smaller number overflows float32 long before it changes the argmax.

The object is frozen: the sampler caches what it derives from a request's settings, keyed by the
object's identity, so settings must not change under it. ``child(i)`` builds the settings of sample
``i`` of an ``n > 1`` request (``n = 1``, seed offset by ``i``, so siblings draw different
tokens and a seeded request stays reproducible).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GREEDY_TEMPERATURE", "SamplingParams"]

#: Temperatures below this are greedy decoding (vLLM's ``_SAMPLING_EPS``).
GREEDY_TEMPERATURE = 1e-5
_SEED_MIN = -(2**63)
_SEED_MAX = 2**64 - 1


def _fail(name: str, expectation: str, value: object) -> ValueError:
    return ValueError(f"{name} must be {expectation}, got {value!r}")


def _int(name: str, value: object, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, "an int", value)
    if minimum is not None and value < minimum:
        raise _fail(name, f">= {minimum}", value)
    return value


def _float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, "a number", value)
    number = float(value)
    if not math.isfinite(number):
        raise _fail(name, "finite", value)
    return number


def _token_ids(name: str, values: object) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise _fail(name, "a sequence of token ids", values)
    ids = tuple(values)
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise _fail(name, "a sequence of token ids (ints >= 0)", values)
    return ids


@dataclass(frozen=True)
class SamplingParams:
    """How one request is sampled. Field names and defaults follow vLLM."""

    n: int = 1
    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | tuple[str, ...] | list[str] | None = None
    stop_token_ids: tuple[int, ...] | list[int] = ()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: Mapping[int, float] | None = None
    allowed_token_ids: tuple[int, ...] | list[int] | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    guided_regex: str | None = None
    guided_json: Mapping[str, Any] | str | bool | None = None
    skip_special_tokens: bool = True
    # Transformers' generation-config names for its other processors and warpers, applied by the
    # Sampler as batched transforms (``guided.sampling.generation``). Defaults leave them off.
    typical_p: float = 1.0
    epsilon_cutoff: float = 0.0
    eta_cutoff: float = 0.0
    top_h: float | None = None
    min_length: int = 0
    no_repeat_ngram_size: int = 0
    encoder_no_repeat_ngram_size: int = 0
    encoder_repetition_penalty: float = 1.0
    bad_words_ids: Sequence[Sequence[int]] | None = None
    sequence_bias: Mapping[tuple[int, ...], float] | Sequence[Sequence[Any]] | None = None
    suppress_tokens: Sequence[int] | None = None
    begin_suppress_tokens: Sequence[int] | None = None
    forced_bos_token_id: int | None = None
    forced_eos_token_id: int | Sequence[int] | None = None
    exponential_decay_length_penalty: tuple[int, float] | None = None
    #: Normalised ``stop``: always a tuple of non-empty strings.
    stop_strings: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        _int("n", self.n, minimum=1)
        if self.max_tokens is not None:
            _int("max_tokens", self.max_tokens, minimum=1)
        temperature = _float("temperature", self.temperature)
        if temperature < 0:
            raise _fail("temperature", ">= 0", self.temperature)
        set_(self, "temperature", temperature)
        top_p = _float("top_p", self.top_p)
        if not 0 < top_p <= 1:
            raise _fail("top_p", "in (0, 1]", self.top_p)
        set_(self, "top_p", top_p)
        _int("top_k", self.top_k, minimum=0)
        min_p = _float("min_p", self.min_p)
        if not 0 <= min_p <= 1:
            raise _fail("min_p", "in [0, 1]", self.min_p)
        set_(self, "min_p", min_p)
        if self.seed is not None:
            _int("seed", self.seed)
            if not _SEED_MIN <= self.seed <= _SEED_MAX:
                raise _fail("seed", f"in [{_SEED_MIN}, {_SEED_MAX}]", self.seed)
        set_(self, "stop_strings", self._check_stop())
        set_(self, "stop_token_ids", _token_ids("stop_token_ids", self.stop_token_ids))
        for flag in ("include_stop_str_in_output", "ignore_eos", "skip_special_tokens"):
            if not isinstance(getattr(self, flag), bool):
                raise _fail(flag, "a bool", getattr(self, flag))
        _int("min_tokens", self.min_tokens, minimum=0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise _fail("min_tokens", f"<= max_tokens ({self.max_tokens})", self.min_tokens)
        for name in ("presence_penalty", "frequency_penalty"):
            value = _float(name, getattr(self, name))
            if not -2 <= value <= 2:
                raise _fail(name, "in [-2, 2]", getattr(self, name))
            set_(self, name, value)
        repetition = _float("repetition_penalty", self.repetition_penalty)
        if repetition <= 0:
            raise _fail("repetition_penalty", "> 0", self.repetition_penalty)
        set_(self, "repetition_penalty", repetition)
        set_(self, "logit_bias", self._check_logit_bias())
        if self.allowed_token_ids is not None:
            allowed = _token_ids("allowed_token_ids", self.allowed_token_ids)
            if not allowed:
                raise _fail("allowed_token_ids", "non-empty", self.allowed_token_ids)
            set_(self, "allowed_token_ids", allowed)
        if self.logprobs is not None:
            _int("logprobs", self.logprobs, minimum=0)
        if self.prompt_logprobs is not None:
            _int("prompt_logprobs", self.prompt_logprobs, minimum=0)
        if self.guided_regex is not None and not isinstance(self.guided_regex, str):
            raise _fail("guided_regex", "a str", self.guided_regex)
        if self.guided_json is not None and not isinstance(self.guided_json, (str, Mapping, bool)):
            raise _fail("guided_json", "a JSON Schema (dict, bool or JSON text)", self.guided_json)
        if self.guided_regex is not None and self.guided_json is not None:
            raise ValueError("guided_regex and guided_json are exclusive: set at most one")
        self._check_generation_config()

    def _check_generation_config(self) -> None:
        """Transformers' ranges; a setting at its default is off."""
        set_ = object.__setattr__
        for name, low, high, closed in (
            ("typical_p", 0.0, 1.0, "(]"),
            ("epsilon_cutoff", 0.0, 1.0, "[)"),
            ("eta_cutoff", 0.0, 1.0, "[)"),
        ):
            value = _float(name, getattr(self, name))
            above = value > low if closed[0] == "(" else value >= low
            below = value <= high if closed[1] == "]" else value < high
            if not (above and below):
                raise _fail(name, f"in {closed[0]}{low}, {high}{closed[1]}", getattr(self, name))
            set_(self, name, value)
        if self.top_h is not None:
            top_h = _float("top_h", self.top_h)
            if not 0 < top_h <= 1:
                raise _fail("top_h", "in (0, 1]", self.top_h)
            set_(self, "top_h", top_h)
        for name in ("min_length", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size"):
            _int(name, getattr(self, name), minimum=0)
        encoder = _float("encoder_repetition_penalty", self.encoder_repetition_penalty)
        if encoder <= 0:
            raise _fail("encoder_repetition_penalty", "> 0", self.encoder_repetition_penalty)
        set_(self, "encoder_repetition_penalty", encoder)
        if self.bad_words_ids is not None:
            words = self.bad_words_ids
            if isinstance(words, (str, bytes)) or not isinstance(words, Iterable):
                raise _fail("bad_words_ids", "a list of token id lists", words)
            checked = tuple(_token_ids("bad_words_ids", w) for w in words)
            if not checked or not all(checked):
                raise _fail("bad_words_ids", "a non-empty list of non-empty token id lists", words)
            set_(self, "bad_words_ids", checked)
        if self.sequence_bias is not None:
            set_(self, "sequence_bias", self._check_sequence_bias())
        for name in ("suppress_tokens", "begin_suppress_tokens"):
            if getattr(self, name) is not None:
                set_(self, name, _token_ids(name, getattr(self, name)))
        if self.forced_bos_token_id is not None:
            _int("forced_bos_token_id", self.forced_bos_token_id, minimum=0)
        forced_eos = self.forced_eos_token_id
        if forced_eos is not None:
            ids = (forced_eos,) if isinstance(forced_eos, int) else forced_eos
            checked_eos = _token_ids("forced_eos_token_id", ids)
            if not checked_eos:
                raise _fail("forced_eos_token_id", "a token id or a non-empty list", forced_eos)
            set_(self, "forced_eos_token_id", checked_eos)
        decay = self.exponential_decay_length_penalty
        if decay is not None:
            if not isinstance(decay, (tuple, list)) or len(decay) != 2:
                raise _fail("exponential_decay_length_penalty", "a (start, factor) pair", decay)
            start = _int("exponential_decay_length_penalty", decay[0], minimum=0)
            factor = _float("exponential_decay_length_penalty", decay[1])
            set_(self, "exponential_decay_length_penalty", (start, factor))

    def _check_sequence_bias(self) -> tuple[tuple[tuple[int, ...], float], ...]:
        bias = self.sequence_bias
        if isinstance(bias, Mapping):
            pairs: list[Any] = list(bias.items())
        elif isinstance(bias, (str, bytes)) or not isinstance(bias, Iterable):
            raise _fail(
                "sequence_bias", "a dict of token id tuples to biases, or [ids, bias] pairs", bias
            )
        else:
            pairs = list(bias)
        checked: dict[tuple[int, ...], float] = {}
        for pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise _fail("sequence_bias", "made of (token ids, bias) pairs", pair)
            ids = _token_ids("sequence_bias", pair[0])
            if not ids:
                raise _fail("sequence_bias", "keyed by non-empty token id sequences", pair[0])
            value = pair[1]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise _fail("sequence_bias", "valued by numbers (-inf bans a sequence)", value)
            # As in Transformers, a sequence given twice keeps its last bias.
            checked[ids] = float(value)
        return tuple(checked.items())

    def _check_stop(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        strings = (self.stop,) if isinstance(self.stop, str) else self.stop
        if not isinstance(strings, (list, tuple)):
            raise _fail("stop", "a string or a sequence of strings", self.stop)
        for text in strings:
            if not isinstance(text, str) or not text:
                raise _fail("stop", "a string or a sequence of non-empty strings", self.stop)
        return tuple(strings)

    def _check_logit_bias(self) -> dict[int, float] | None:
        if self.logit_bias is None:
            return None
        if not isinstance(self.logit_bias, Mapping):
            raise _fail("logit_bias", "a mapping of token id to bias", self.logit_bias)
        checked: dict[int, float] = {}
        for token, bias in self.logit_bias.items():
            # JSON objects have string keys: accept "42" as OpenAI does.
            key = int(token) if isinstance(token, str) and token.strip().isdigit() else token
            if isinstance(key, bool) or not isinstance(key, int) or key < 0:
                raise _fail("logit_bias", "keyed by token ids (ints >= 0)", token)
            value = _float("logit_bias", bias)
            if not -100 <= value <= 100:
                raise _fail("logit_bias", "valued in [-100, 100]", bias)
            checked[key] = value
        return checked

    @property
    def greedy(self) -> bool:
        """Whether the request takes the most likely token (temperature below 1e-5)."""
        return self.temperature < GREEDY_TEMPERATURE

    @property
    def needs_penalties(self) -> bool:
        """Whether repetition, frequency or presence penalties change any logit."""
        return (
            self.repetition_penalty != 1.0
            or self.frequency_penalty != 0.0
            or self.presence_penalty != 0.0
        )

    def child(self, i: int) -> SamplingParams:
        """Settings of sample ``i`` (``0 <= i < n``) of this request: ``n = 1``, seed ``+ i``."""
        _int("i", i, minimum=0)
        if i >= self.n:
            raise _fail("i", f"< n ({self.n})", i)
        seed = None if self.seed is None else self._wrap_seed(self.seed + i)
        return dataclasses.replace(self, n=1, seed=seed)

    @staticmethod
    def _wrap_seed(seed: int) -> int:
        return seed if seed <= _SEED_MAX else seed - 2**64
