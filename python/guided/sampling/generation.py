"""Transformers' generation-config settings inside the Sampler, as batched transforms.

``SamplingParams`` carries, besides vLLM's settings, Transformers' names for its other processors
(``sequence_bias``, ``bad_words_ids``, ``encoder_repetition_penalty``, ``no_repeat_ngram_size``,
``encoder_no_repeat_ngram_size``, ``min_length``, ``forced_bos_token_id``, ``forced_eos_token_id``,
``exponential_decay_length_penalty``, ``suppress_tokens``, ``begin_suppress_tokens``) and warpers
(``top_h``, ``typical_p``, ``epsilon_cutoff``, ``eta_cutoff``). The Sampler applies them in two
places of its pipeline:

* **processors**, after its own (allowed ids, logit bias, ``min_tokens``) and before the grammar
  mask and the penalties, in the order ``generate`` chains them: for each setting, one transform
  over the rows that use it, with per-row parameters. The rows' histories come from the requests'
  token lists, gathered into a :class:`~guided.sampling.state.DecodeState` once per step for those
  rows only (the n-gram bans and prompt penalties read all of it; a request that uses none of these
  settings costs nothing);
* **warpers**, for sampled rows that use one of the four: such a row leaves the Sampler's own
  truncation path and gets, after its temperature, Transformers' whole warper chain as transforms
  (top-h, top-k, top-p, min-p, typical, epsilon, eta, in ``generate``'s order), then a draw over its
  whole row. Greedy rows ignore warpers, as ``generate`` does.

EOS-dependent settings (``min_length``, the decay penalty) use the request's own EOS ids; a
request's end, for ``forced_eos_token_id``, is its prompt plus ``max_tokens``, so the last token it
may draw is forced to be an EOS.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from guided.sampling import transforms as T
from guided.sampling._params import move
from guided.sampling.params import SamplingParams
from guided.sampling.request import RequestLike
from guided.sampling.state import DecodeState

__all__ = ["apply_processors", "apply_warpers", "uses_processors", "uses_warpers"]

_NO_END = 2**62


@dataclass(frozen=True)
class _Processor:
    uses: Callable[[SamplingParams], bool]
    build: Callable[[Sequence[RequestLike]], T.LogitTransform]


def _sequence_bias(
    pairs_per_row: Sequence[Sequence[tuple[tuple[int, ...], float]]],
) -> T.SequenceBias:
    """One entry per sequence any row uses, biased per row (0 where a row does not use it)."""
    per_row = [dict(pairs) for pairs in pairs_per_row]
    union = list(dict.fromkeys(key for pairs in per_row for key in pairs))
    return T.sequence_bias(
        [(list(key), [pairs.get(key, 0.0) for pairs in per_row]) for key in union]
    )


def _bad_words(requests: Sequence[RequestLike]) -> T.SequenceBias:
    rows = []
    for r in requests:
        eos = set(r.eos_token_ids)
        words = r.params.bad_words_ids or ()
        rows.append([(tuple(w), float("-inf")) for w in words if not (len(w) == 1 and w[0] in eos)])
    return _sequence_bias(rows)


def _params(requests: Sequence[RequestLike]) -> list[SamplingParams]:
    return [r.params for r in requests]


def _eos(requests: Sequence[RequestLike]) -> list[list[int]]:
    return [list(r.eos_token_ids) for r in requests]


def _limit(request: RequestLike) -> int:
    max_tokens = request.params.max_tokens
    return _NO_END if max_tokens is None else len(request.prompt_token_ids) + max_tokens


def _begin_offset(request: RequestLike) -> int:
    # generate() starts the suppression one token later when it forces a BOS after a prompt of
    # at most one token.
    prompt = len(request.prompt_token_ids)
    return 1 if request.params.forced_bos_token_id is not None and prompt <= 1 else 0


#: The processors, in the order Transformers' generate() applies them.
_PROCESSORS: list[_Processor] = [
    _Processor(
        lambda p: bool(p.sequence_bias),
        lambda rs: _sequence_bias([r.params.sequence_bias or () for r in rs]),  # type: ignore[misc]
    ),
    _Processor(
        lambda p: p.encoder_repetition_penalty != 1.0,
        lambda rs: T.PromptRepetitionPenalty([p.encoder_repetition_penalty for p in _params(rs)]),
    ),
    _Processor(
        lambda p: p.no_repeat_ngram_size > 0,
        lambda rs: T.NoRepeatNGram([p.no_repeat_ngram_size for p in _params(rs)]),
    ),
    _Processor(
        lambda p: p.encoder_no_repeat_ngram_size > 0,
        lambda rs: T.PromptNoRepeatNGram([p.encoder_no_repeat_ngram_size for p in _params(rs)]),
    ),
    _Processor(lambda p: bool(p.bad_words_ids), _bad_words),
    _Processor(
        lambda p: p.min_length > 0,
        lambda rs: T.MinLength([p.min_length for p in _params(rs)], _eos(rs)),
    ),
    _Processor(
        lambda p: p.forced_bos_token_id is not None,
        lambda rs: T.ForcedBOS([p.forced_bos_token_id or 0 for p in _params(rs)]),
    ),
    _Processor(
        lambda p: p.forced_eos_token_id is not None and p.max_tokens is not None,
        lambda rs: T.ForcedEOS(
            [list(p.forced_eos_token_id or ()) for p in _params(rs)],  # type: ignore[arg-type]
            [_limit(r) for r in rs],
        ),
    ),
    _Processor(
        lambda p: p.exponential_decay_length_penalty is not None,
        lambda rs: T.ExponentialDecayLengthPenalty(
            [(p.exponential_decay_length_penalty or (0, 1.0))[0] for p in _params(rs)],
            [(p.exponential_decay_length_penalty or (0, 1.0))[1] for p in _params(rs)],
            _eos(rs),
        ),
    ),
    _Processor(
        lambda p: bool(p.suppress_tokens),
        lambda rs: T.SuppressTokens([list(p.suppress_tokens or ()) for p in _params(rs)]),
    ),
    _Processor(
        lambda p: bool(p.begin_suppress_tokens),
        lambda rs: T.BeginSuppressTokens(
            [list(p.begin_suppress_tokens or ()) for p in _params(rs)],
            [_begin_offset(r) for r in rs],
        ),
    ),
]


def uses_processors(params: SamplingParams) -> bool:
    """Whether a request sets any of Transformers' processor settings."""
    return any(p.uses(params) for p in _PROCESSORS)


def uses_warpers(params: SamplingParams) -> bool:
    """Whether a request sets one of the warpers the Sampler's own truncation does not cover."""
    return (
        params.typical_p < 1.0
        or params.epsilon_cutoff > 0.0
        or params.eta_cutoff > 0.0
        or params.top_h is not None
    )


def _index(rows: Sequence[int], device: torch.device) -> torch.Tensor:
    return move(torch.tensor(list(rows), dtype=torch.long), device)


def apply_processors(
    work: torch.Tensor, rows: Sequence[int], requests: Sequence[RequestLike]
) -> None:
    """Apply the processor settings of ``requests`` to their rows ``rows`` of ``work``, in place."""
    if not rows:
        return
    device = work.device
    index = _index(rows, device)
    logits = work.index_select(0, index)
    state = DecodeState.from_lists(
        [r.prompt_token_ids for r in requests],
        [r.output_token_ids for r in requests],
        device=device,
    )
    state.limits = move(torch.tensor([_limit(r) for r in requests], dtype=torch.long), device)
    params = _params(requests)
    for processor in _PROCESSORS:
        picked = [j for j, p in enumerate(params) if processor.uses(p)]
        if not picked:
            continue
        transform = processor.build([requests[j] for j in picked]).to(device)
        if len(picked) == len(rows):
            logits = transform.apply_(state, logits)
            continue
        sub = _index(picked, device)
        logits.index_copy_(0, sub, transform.apply_(state.select(sub), logits.index_select(0, sub)))
    work.index_copy_(0, index, logits)


def apply_warpers(
    work: torch.Tensor, rows: Sequence[int], params: Sequence[SamplingParams]
) -> None:
    """Transformers' warper chain after the temperature, for rows ``rows`` of ``work``, in place;
    a setting no row uses is skipped."""
    if not rows:
        return
    device = work.device
    vocab = work.shape[1]
    index = _index(rows, device)
    chain: list[T.LogitTransform] = []
    if any(p.top_h is not None for p in params):
        chain.append(T.TopH([p.top_h or 0.0 for p in params]))
    if any(0 < p.top_k < vocab for p in params):
        chain.append(T.TopK([p.top_k for p in params]))
    if any(p.top_p < 1.0 for p in params):
        chain.append(T.TopP([p.top_p for p in params]))
    if any(p.min_p > 0.0 for p in params):
        chain.append(T.MinP([p.min_p for p in params]))
    if any(p.typical_p < 1.0 for p in params):
        chain.append(T.Typical([p.typical_p for p in params]))
    if any(p.epsilon_cutoff > 0.0 for p in params):
        chain.append(T.EpsilonCutoff([p.epsilon_cutoff for p in params]))
    if any(p.eta_cutoff > 0.0 for p in params):
        chain.append(T.EtaCutoff([p.eta_cutoff for p in params]))
    state = DecodeState.from_lists([[]] * len(rows), device=device)
    warped = T.chain(chain).to(device).apply_(state, work.index_select(0, index))
    work.index_copy_(0, index, warped)
