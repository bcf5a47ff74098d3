"""Batched sampling in torch: settings, requests, the sampler, filters, logprobs, beam search.

Importing this package imports torch (``import guided`` alone does not). The pieces, one concept
per module: ``params`` (validated settings), ``request`` (what the sampler reads from a request and
a guide), ``filters`` (temperature, top-k, top-p, min-p as thresholds), ``penalties`` (persistent
token statistics), ``draw`` (the exponential race), ``logprobs``, ``beam``, and ``sampler``, which
runs them in order over a mixed batch. Beside it: ``state`` (a batch's token histories),
``transforms`` (Transformers' logits processors, batched with per-row settings), ``mass`` (the
top-p / typical thresholds they share), ``stopping`` (stopping criteria, stop strings on the
device) and ``generation`` (those transforms inside the Sampler).
"""

from __future__ import annotations

from guided.sampling.beam import Beam, beam_search
from guided.sampling.filters import apply_filters
from guided.sampling.logprobs import prompt_logprobs, token_logprobs
from guided.sampling.params import SamplingParams
from guided.sampling.request import GuideLike, Request, RequestLike
from guided.sampling.sampler import Sampler
from guided.sampling.state import DecodeState
from guided.sampling.stopping import criterion, stop_strings
from guided.sampling.transforms import bad_words, chain, sequence_bias

__all__ = [
    "Beam",
    "DecodeState",
    "GuideLike",
    "Request",
    "RequestLike",
    "Sampler",
    "SamplingParams",
    "apply_filters",
    "bad_words",
    "beam_search",
    "chain",
    "criterion",
    "prompt_logprobs",
    "sequence_bias",
    "stop_strings",
    "token_logprobs",
]
