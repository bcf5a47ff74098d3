"""The Hugging Face generation processors, batched: every row its own settings, one pass for all.

Transformers' logits processors take one setting for the whole batch and read the batch's padded
``input_ids``. An engine whose rows carry different settings (a temperature per request, an n-gram
ban for one of them, a stop token list per model) has to call them row by row, and padding leaks
into what they compute. The transforms here are the same functions, numerically, with three
differences in shape:

* **per-row parameters.** Every numeric parameter is a scalar or a ``[rows]`` tensor, every token
  list is shared or one list per row, and each row is computed as if it were alone, on its own
  unpadded history (a :class:`~guided.sampling.state.DecodeState`);
* **parameters are data.** They live in tensors, never in Python constants a trace would bake in,
  so a chain compiled with ``torch.compile`` or captured in a CUDA graph keeps running when a
  request's settings change. Only structure is static: which transforms, the tensors' shapes, and
  the few size bounds that set how much work there is (``TopK.max_k``, ``NoRepeatNGram.max_size``,
  ``TopH.candidates``). Nothing loops over rows in Python and nothing waits for the device, except
  where the module says so for the CPU, where waiting costs nothing;
* **one copy per chain.** ``transform(state, logits)`` is pure: it returns new logits and leaves
  its argument alone. Internally each transform works in place on a buffer it owns
  (``apply_``), and :func:`chain` copies the logits once for all of its transforms, so a chain of
  ten costs one copy, not ten.

Each transform names the Transformers processor it equals, and takes that processor's arguments.
"Equal" means bit for bit wherever the processor's arithmetic is elementwise or a reduction (the
temperature, the penalties, min-p, epsilon, eta, the bans, the forced tokens); where it sorts a row
and takes running sums (top-p, typical, top-h), the surviving set is the same except for a tie
group straddling the boundary, which Transformers splits in an arbitrary order and which is kept
whole here, and except for running sums that land within rounding of the boundary. Rows with no
distribution (a NaN anywhere, a ``+inf``, or nothing above ``-inf``) pass through the truncations
unchanged, which is what Transformers' arithmetic does to them (where its ``Categorical``
refuses them with an error instead, as for eta and top-h, they pass through here too). Bit for
bit holds on each device against the processor on that device: where a processor divides by a
Python float, PyTorch on CUDA multiplies by the float's reciprocal, and the temperature and the
repetition penalties round the same way there (``divide_as_by_a_float``).

Deliberate differences: :class:`FrequencyPenalty` and :class:`PresencePenalty` follow vLLM's
formula (``logit - frequency * count - presence * (count > 0)`` over the drawn tokens), since
Transformers has neither; a setting that a per-row batch needs to leave a row alone is allowed
where Transformers refuses it (``TopK(0)``, ``TopP(1)``, ``Typical(1)``, ``TopH(0)``, a cutoff of
0, an n-gram size of 0); and a row's padding is never a token.
"""

from __future__ import annotations

import abc
import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

import torch

from guided.sampling._params import (
    FloatParam,
    IntParam,
    TokenIds,
    check,
    column,
    compute_dtype,
    divide_as_by_a_float,
    floats,
    ints,
    move,
    per_row,
    tensor_param,
    token_ids,
    token_sets,
)
from guided.sampling.filters import apply_temperature, top_scores
from guided.sampling.mass import Cut, Window, sorted_thresholds, windows
from guided.sampling.state import DecodeState

__all__ = [
    "BeginSuppressTokens",
    "Chain",
    "EpsilonCutoff",
    "EtaCutoff",
    "ExponentialDecayLengthPenalty",
    "ForcedBOS",
    "ForcedEOS",
    "FrequencyPenalty",
    "Greedy",
    "LogitTransform",
    "MinLength",
    "MinNewTokens",
    "MinP",
    "NoRepeatNGram",
    "PresencePenalty",
    "PromptNoRepeatNGram",
    "PromptRepetitionPenalty",
    "RemoveInvalidValues",
    "Renormalize",
    "RepetitionPenalty",
    "SequenceBias",
    "SuppressTokens",
    "Temperature",
    "TopH",
    "TopK",
    "TopP",
    "Typical",
    "bad_words",
    "chain",
    "sequence_bias",
]

_T = TypeVar("_T", bound="LogitTransform")
_NEG_INF = float("-inf")
#: ``exp`` of anything below this is subnormal in float32.
_SUBNORMAL_EDGE = -87.0


def _windowed(logits: torch.Tensor) -> bool:
    """Whether reading values back costs nothing: eager code on the CPU."""
    return logits.device.type == "cpu" and not torch.compiler.is_compiling()


# --------------------------------------------------------------------------------- sparse writes


def _write(
    logits: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor, values: torch.Tensor
) -> None:
    """``logits[r, ids[r, j]] = values[r, j]`` where ``valid[r, j]``, in one scatter.

    Valid slots of one row that name the same id must carry the same value. Invalid slots are sent
    to the row's first valid slot, with its value, so the scatter never writes two values to one
    place; a row without a valid slot writes its own column 0 back to itself.
    """
    if ids.shape[1] == 0:
        return
    first = valid.to(torch.uint8).argmax(dim=1, keepdim=True)
    has = valid.any(dim=1, keepdim=True)
    safe = torch.where(valid, ids, 0)
    anchor = torch.where(has, safe.gather(1, first), 0)
    anchor_value = torch.where(has, values.gather(1, first), logits[:, :1])
    logits.scatter_(1, torch.where(valid, ids, anchor), torch.where(valid, values, anchor_value))


def _ban(logits: torch.Tensor, ids: torch.Tensor, banned: torch.Tensor) -> None:
    """``-inf`` at ``ids[r, j]`` where ``banned[r, j]`` (banned ids must lie inside the logits)."""
    _write(
        logits,
        ids,
        banned,
        torch.full(ids.shape, _NEG_INF, dtype=logits.dtype, device=logits.device),
    )


def _keep_survivors(logits: torch.Tensor, index: torch.Tensor, found: list[Window]) -> None:
    """Rows ``index[w.rows]`` keep only their window survivors (``-inf`` elsewhere): one write of
    each row and a scatter of a few values, instead of comparing every score with a threshold.
    ``logits`` must be contiguous."""
    vocab = logits.shape[1]
    flat = logits.view(-1)
    for window in found:
        if window.rows.numel() == 0:
            continue
        rows = index.index_select(0, window.rows)
        inside = torch.arange(window.ids.shape[1], device=logits.device) < window.kept.unsqueeze(1)
        positions = (rows.unsqueeze(1) * vocab + window.ids)[inside]
        values = flat[positions]
        logits.index_fill_(0, rows, _NEG_INF)
        flat[positions] = values


def _keep_found(
    logits: torch.Tensor, index: torch.Tensor, found: list[Window | Cut], keys: torch.Tensor
) -> None:
    """Rows ``index[...]`` keep what :func:`~guided.sampling.mass.windows` found: their window
    survivors, or the tokens whose key (``keys``, rows as given to ``windows``) is at least the
    cut. ``logits`` must be contiguous."""
    _keep_survivors(logits, index, [w for w in found if isinstance(w, Window)])
    for cut in found:
        if not isinstance(cut, Cut) or cut.rows.numel() == 0:
            continue
        if cut.rows.numel() == logits.shape[0] == keys.shape[0]:
            logits.masked_fill_(keys < cut.threshold.unsqueeze(1), _NEG_INF)
            continue
        rows = index.index_select(0, cut.rows)
        below = keys.index_select(0, cut.rows) < cut.threshold.unsqueeze(1)
        logits.index_copy_(0, rows, logits.index_select(0, rows).masked_fill_(below, _NEG_INF))


def _gather(logits: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return logits.gather(1, torch.where(valid, ids, 0))


def _history(ids: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return ids, (ids >= 0) & (ids < logits.shape[1])


# --------------------------------------------------------------------------------- the base


class LogitTransform(abc.ABC):
    """A batched logits transform: ``transform(state, logits) -> new logits``.

    Subclasses implement :meth:`apply_`, which may overwrite the logits it is given and returns
    the result (the same tensor or a new one). ``__call__`` runs it on a copy.
    """

    def __call__(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        _check_batch(state, logits)
        return self.apply_(state, logits.clone(memory_format=torch.contiguous_format))

    @abc.abstractmethod
    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        """Transform ``logits`` (``[rows, V]``, owned by the caller for this call) in place."""

    def to(self: _T, device: torch.device | str) -> _T:
        """A copy whose parameter tensors live on ``device`` (so a call moves nothing)."""
        moved = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, torch.Tensor):
                setattr(moved, name, move(value, device))
        return moved

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{k}={v.tolist() if isinstance(v, torch.Tensor) and v.numel() <= 8 else v!r}"
            for k, v in vars(self).items()
            if not k.startswith("_")
        )
        return f"{type(self).__name__}({fields})"


def _check_batch(state: DecodeState, logits: torch.Tensor) -> None:
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(f"logits must be a 2-D float tensor, got {logits.dim()}-D {logits.dtype}")
    if logits.shape[0] != state.rows:
        raise ValueError(f"logits have {logits.shape[0]} rows, the state has {state.rows}")
    if logits.shape[1] == 0:
        raise ValueError("logits must have at least one column")


class Chain(LogitTransform):
    """Transforms applied in order, on one copy of the logits."""

    def __init__(self, transforms: Sequence[LogitTransform]) -> None:
        self.transforms = list(transforms)
        for t in self.transforms:
            if not isinstance(t, LogitTransform):
                raise ValueError(f"chain() takes transforms, got {t!r}")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        for transform in self.transforms:
            logits = transform.apply_(state, logits)
        return logits

    def to(self, device: torch.device | str) -> Chain:
        return Chain([t.to(device) for t in self.transforms])

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.transforms))})"


def chain(*transforms: LogitTransform | Iterable[LogitTransform]) -> Chain:
    """Compose transforms, left to right: ``chain(a, b)(s, x) == b(s, a(s, x))``, one copy."""
    flat: list[LogitTransform] = []
    for t in transforms:
        if isinstance(t, Chain):
            flat.extend(t.transforms)
        elif isinstance(t, LogitTransform):
            flat.append(t)
        else:
            flat.extend(t)
    return Chain(flat)


# --------------------------------------------------------------------------------- value transforms


class Temperature(LogitTransform):
    """``TemperatureLogitsWarper``: ``logits / value`` (``value > 0``)."""

    def __init__(self, value: FloatParam) -> None:
        self.value = floats("temperature", value, 0.0, math.inf, closed="()")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        return apply_temperature(logits, per_row(self.value, logits, compute_dtype(logits)))


class Renormalize(LogitTransform):
    """``LogitNormalization``: ``log_softmax`` of each row."""

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits, dim=-1)


class RemoveInvalidValues(LogitTransform):
    """``InfNanRemoveLogitsProcessor``: NaN to 0, ``±inf`` to the dtype's largest finite values."""

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        info = torch.finfo(logits.dtype)
        return torch.nan_to_num_(logits, nan=0.0, posinf=info.max, neginf=info.min)


class Greedy(LogitTransform):
    """Zero on each row's best token (the first, among ties) and ``-inf`` elsewhere.

    A row with no distribution (a NaN, or nothing above ``-inf``) passes through unchanged, and a
    draw refuses it.
    """

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        top = logits.amax(dim=1, keepdim=True)
        ok = top > _NEG_INF  # false for NaN too: amax propagates it
        best = logits.argmax(dim=1, keepdim=True)
        kept = torch.where(ok, 0.0, logits.gather(1, best)).to(logits.dtype)
        logits.masked_fill_(ok, _NEG_INF)
        return logits.scatter_(1, best, kept)


# --------------------------------------------------------------------------------- truncations


class TopK(LogitTransform):
    """``TopKLogitsWarper``: keep the scores at least each row's ``k``-th largest.

    ``k <= 0`` leaves a row alone. ``max_k`` bounds the per-row ``k`` (it sets how many scores are
    selected); it defaults to the largest ``k`` given.
    """

    def __init__(self, k: IntParam, max_k: int | None = None) -> None:
        self.k = tensor_param("top_k", k, torch.long)
        largest = int(self.k.max()) if self.k.numel() else 0
        self.max_k = max(largest, 1) if max_k is None else int(max_k)
        if largest > self.max_k:
            raise ValueError(f"top_k holds {largest}, above max_k ({self.max_k})")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        vocab = logits.shape[1]
        k = per_row(self.k, logits, torch.long).clamp(max=vocab)
        count = min(self.max_k, vocab)
        use = (k > 0) & (k < vocab)
        if not _windowed(logits):
            kth = torch.topk(logits, count, dim=1).values.gather(
                1, (k - 1).clamp(min=0).unsqueeze(1)
            )
            return logits.masked_fill_((logits < kth) & use.unsqueeze(1), _NEG_INF)
        # One more score than any row keeps: where it is below the k-th, nothing outside the
        # selection ties with it, and the row is rebuilt from its k survivors.
        values, ids = top_scores(logits.contiguous(), min(count + 1, vocab))
        kth = values.gather(1, (k - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        after = values.gather(1, k.clamp(max=values.shape[1] - 1).unsqueeze(1)).squeeze(1)
        fast = use & (after < kth) & logits.is_contiguous()
        rows = fast.nonzero().squeeze(1)
        if rows.numel():
            picked = [Window(rows, ids[rows], k[rows], kth[rows])]
            _keep_survivors(logits, torch.arange(logits.shape[0], device=logits.device), picked)
        slow = (use & ~fast).nonzero().squeeze(1)
        if slow.numel():
            sub = logits.index_select(0, slow)
            cut = kth.index_select(0, slow).unsqueeze(1)
            logits.index_copy_(0, slow, sub.masked_fill_(sub < cut, _NEG_INF))
        return logits


class TopP(LogitTransform):
    """``TopPLogitsWarper``: keep the best tokens until they hold ``p`` of the mass.

    A token stays when the mass of the strictly better tokens is below ``p``; the best tokens
    always stay. ``p >= 1`` leaves a row alone (``generate`` adds no warper then).
    """

    def __init__(self, p: FloatParam) -> None:
        self.p = floats("top_p", p, 0.0, 1.0)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        p = per_row(self.p, logits, torch.float32)
        top = logits.amax(dim=1)
        # "Off" is decided on the value given, before it is rounded to float32.
        use = torch.isfinite(top) & (per_row(self.p, logits, torch.float64) < 1.0)
        if not _windowed(logits) or not logits.is_contiguous():
            safe_top = torch.where(use, top, 0.0).float().unsqueeze(1)
            weights = torch.exp(logits.float() - safe_top).masked_fill_(~use.unsqueeze(1), 0.0)

            def weights_at(rows: torch.Tensor | None, ids: torch.Tensor | None) -> torch.Tensor:
                return weights if ids is None else weights.gather(1, ids)

            threshold = sorted_thresholds(logits, weights_at, p * weights.sum(dim=1))
            return logits.masked_fill_(
                use.unsqueeze(1) & (logits < threshold.unsqueeze(1)), _NEG_INF
            )
        index = use.nonzero().squeeze(1)
        if index.numel() == 0:
            return logits
        sub = logits if index.numel() == logits.shape[0] else logits.index_select(0, index)
        sub_top = top.index_select(0, index).float().unsqueeze(1)
        # Scores more than 87 below the best would give subnormal weights, which a CPU computes
        # dozens of times slower; counted as exp(-87) ~ 1.6e-38 each instead, they change the
        # total by less than 1e-32 of the best token's weight.
        total = (sub.float() - sub_top).clamp_(min=_SUBNORMAL_EDGE).exp_().sum(dim=1)

        def window_weights(rows: torch.Tensor | None, ids: torch.Tensor | None) -> torch.Tensor:
            picked = sub if rows is None else sub.index_select(0, rows)
            top = sub_top if rows is None else sub_top[rows]
            return torch.exp((picked if ids is None else picked.gather(1, ids)).float() - top)

        found = windows(sub, window_weights, p.index_select(0, index) * total)
        _keep_found(logits, index, found, sub)
        return logits


class MinP(LogitTransform):
    """``MinPLogitsWarper``: remove tokens less likely than ``p`` times the best one."""

    def __init__(self, p: FloatParam) -> None:
        self.p = floats("min_p", p, 0.0, 1.0)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits, dim=-1)
        top = probs.amax(dim=-1, keepdim=True)
        # Transformers also re-admits the single most likely token; with p <= 1 it never fails
        # the test (p * top <= top), so that step changes nothing and is left out.
        return logits.masked_fill_(probs < column(self.p, probs) * top, _NEG_INF)


class Typical(LogitTransform):
    """``TypicalLogitsWarper``: keep the tokens whose surprise is closest to the entropy until they
    hold ``mass`` of the probability. ``mass >= 1`` leaves a row alone."""

    def __init__(self, mass: FloatParam) -> None:
        self.mass = floats("typical_p", mass, 0.0, 1.0, closed="(]")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        mass = per_row(self.mass, logits, torch.float32)
        off = per_row(self.mass, logits, torch.float64) >= 1.0
        use = torch.isfinite(logits.amax(dim=1)) & ~off
        windowed = _windowed(logits) and logits.is_contiguous()
        if windowed:
            index = use.nonzero().squeeze(1)
            if index.numel() == 0:
                return logits
            everything = index.numel() == logits.shape[0]
            rows = logits if everything else logits.index_select(0, index)
            mass = mass.index_select(0, index)
        else:
            rows = logits
        # Transformers' arithmetic, op for op, so that keys tie exactly where its keys tie.
        normalized = torch.log_softmax(rows, dim=-1)
        p = torch.exp(normalized)
        entropy = -(normalized * p).nansum(-1, keepdim=True)
        key = normalized.neg_().sub_(entropy).abs_().neg_()
        total = p.float().sum(dim=1)

        def weights_at(at: torch.Tensor | None, ids: torch.Tensor | None) -> torch.Tensor:
            picked = p if at is None else p.index_select(0, at)
            return (picked if ids is None else picked.gather(1, ids)).float()

        if windowed:
            _keep_found(logits, index, windows(key, weights_at, mass * total), key)
            return logits
        threshold = sorted_thresholds(key, weights_at, mass * total)
        return logits.masked_fill_(use.unsqueeze(1) & (key < threshold.unsqueeze(1)), _NEG_INF)


class EpsilonCutoff(LogitTransform):
    """``EpsilonLogitsWarper``: remove tokens with probability below ``epsilon`` (the best stay).
    ``epsilon = 0`` leaves a row alone."""

    def __init__(self, epsilon: FloatParam) -> None:
        self.epsilon = floats("epsilon_cutoff", epsilon, 0.0, 1.0, closed="[)")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        probs = logits.softmax(dim=-1)
        removed = (probs < column(self.epsilon, probs)) & (
            logits < logits.amax(dim=-1, keepdim=True)
        )
        return logits.masked_fill_(removed, _NEG_INF)


class EtaCutoff(LogitTransform):
    """``EtaLogitsWarper``: remove tokens with probability below
    ``min(epsilon, sqrt(epsilon) * exp(-entropy))`` (the best stay). ``epsilon = 0`` leaves a row
    alone."""

    def __init__(self, epsilon: FloatParam) -> None:
        self.epsilon = floats("eta_cutoff", epsilon, 0.0, 1.0, closed="[)")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        probs = logits.softmax(dim=-1)
        entropy = _entropy(logits)
        # Transformers holds epsilon in a float32 tensor, whatever the logits' dtype.
        epsilon = per_row(self.epsilon, logits, torch.float32)
        eta = torch.minimum(epsilon, torch.sqrt(epsilon) * torch.exp(-entropy)).unsqueeze(1)
        removed = (probs < eta) & (logits < logits.amax(dim=-1, keepdim=True))
        return logits.masked_fill_(removed, _NEG_INF)


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    """``torch.distributions.Categorical(logits=logits).entropy()``, op for op, without its
    argument validation (which raises on a row without a distribution; such a row gives NaN)."""
    normalized = logits - logits.logsumexp(dim=-1, keepdim=True)
    probs = torch.softmax(normalized, dim=-1)
    clamped = normalized.clamp(min=torch.finfo(normalized.dtype).min)
    return -(clamped * probs).sum(-1)


class TopH(LogitTransform):
    """``TopHLogitsWarper``: among the ``candidates`` best tokens, keep the most likely until their
    running entropy passes ``fraction`` of the candidates' entropy. ``fraction = 0`` leaves a row
    alone."""

    def __init__(self, fraction: FloatParam, candidates: int = 100) -> None:
        self.fraction = floats("top_h", fraction, 0.0, 1.0)
        if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 1:
            raise ValueError(f"candidates must be an int >= 1, got {candidates!r}")
        self.candidates = candidates

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        count = min(self.candidates, logits.shape[1])
        top_logits = torch.topk(logits, count, dim=-1, largest=True, sorted=True).values
        normalized = top_logits - top_logits.logsumexp(dim=-1, keepdim=True)
        probs = torch.softmax(normalized, dim=-1)
        entropy = -(normalized.clamp(min=torch.finfo(normalized.dtype).min) * probs).sum(-1)
        tau = (entropy * per_row(self.fraction, logits)).unsqueeze(-1)
        cumulative = torch.cumsum(-probs * torch.log(probs), dim=-1)
        # The running entropy only grows, so the selection is a prefix; the best token is always
        # in it.
        selected = (cumulative <= tau).sum(dim=-1).clamp(min=1)
        threshold = top_logits.gather(1, (selected - 1).unsqueeze(1))
        on = per_row(self.fraction, logits, torch.float64) > 0
        use = (torch.isfinite(top_logits[:, 0]) & on).unsqueeze(1)
        return logits.masked_fill_(use & (logits < threshold), _NEG_INF)


# --------------------------------------------------------------------------------- penalties


class RepetitionPenalty(LogitTransform):
    """``RepetitionPenaltyLogitsProcessor``: every token of the row's history (prompt and drawn)
    has a negative logit multiplied by ``penalty`` and a positive one divided by it."""

    def __init__(self, penalty: FloatParam) -> None:
        self.penalty = floats("repetition_penalty", penalty, 0.0, math.inf, closed="()")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid = _history(state.history(), logits)
        return _penalize(logits, ids, valid, column(self.penalty, logits, compute_dtype(logits)))


class PromptRepetitionPenalty(LogitTransform):
    """``EncoderRepetitionPenaltyLogitsProcessor``: the prompt's tokens are made *more* likely
    (a positive logit multiplied by ``penalty``, a negative one divided by it)."""

    def __init__(self, penalty: FloatParam) -> None:
        self.penalty = floats("encoder_repetition_penalty", penalty, 0.0, math.inf, closed="()")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid = _history(state.prompt_history(), logits)
        # Transformers stores 1 / penalty as a Python float and applies it like a penalty.
        inverse = column(1.0 / self.penalty.to(torch.float64), logits, compute_dtype(logits))
        return _penalize(logits, ids, valid, inverse)


def _penalize(
    logits: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor, penalty: torch.Tensor
) -> torch.Tensor:
    score = _gather(logits, ids, valid)
    _write(logits, ids, valid, repetition_formula(score, penalty).to(logits.dtype))
    return logits


def repetition_formula(score: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """Transformers' repetition arithmetic: ``score * penalty`` below zero, ``score / penalty``
    otherwise (a division by a Python float there, rounded as on the score's device)."""
    return torch.where(score < 0, score * penalty, divide_as_by_a_float(score, penalty))


def _drawn_counts(
    state: DecodeState, logits: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The drawn tokens sorted per row, whether each is a token inside the logits, and how many
    times each occurs in its row."""
    vocab = logits.shape[1]
    generated = state.generated()
    ids = torch.where((generated >= 0) & (generated < vocab), generated, vocab)
    ids = torch.sort(ids, dim=1).values
    counts = torch.searchsorted(ids, ids, side="right") - torch.searchsorted(ids, ids, side="left")
    return ids, ids < vocab, counts


class FrequencyPenalty(LogitTransform):
    """vLLM's frequency penalty: ``logit - penalty * count`` for each token drawn ``count > 0``
    times (the prompt does not count)."""

    def __init__(self, penalty: FloatParam) -> None:
        self.penalty = floats("frequency_penalty", penalty, -math.inf, math.inf, closed="()")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid, counts = _drawn_counts(state, logits)
        score = _gather(logits, ids, valid)
        _write(logits, ids, valid, score - column(self.penalty, logits) * counts.to(logits.dtype))
        return logits


class PresencePenalty(LogitTransform):
    """vLLM's presence penalty: ``logit - penalty`` for each token drawn at least once."""

    def __init__(self, penalty: FloatParam) -> None:
        self.penalty = floats("presence_penalty", penalty, -math.inf, math.inf, closed="()")

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid = _history(state.generated(), logits)
        score = _gather(logits, ids, valid)
        _write(logits, ids, valid, score - column(self.penalty, logits))
        return logits


# --------------------------------------------------------------------------------- n-grams


def _ngram_size(name: str, size: IntParam, max_size: int | None) -> tuple[torch.Tensor, int]:
    tensor = ints(name, size, 0)
    largest = int(tensor.max()) if tensor.numel() else 0
    bound = max(largest, 1) if max_size is None else int(max_size)
    if largest > bound:
        raise ValueError(f"{name} holds {largest}, above max_size ({bound})")
    return tensor, bound


def _suffix_matches(
    windows: torch.Tensor, suffix: torch.Tensor, size: torch.Tensor, reach: int
) -> torch.Tensor:
    """``[rows, W]``: whether the ``size - 1`` tokens before each column equal the row's last
    ``size - 1`` tokens (``suffix``, ``[rows, reach]``, oldest first)."""
    matched = windows >= 0
    width = windows.shape[1]
    for k in range(1, reach + 1):
        before = torch.full_like(windows, -1)
        if k < width:
            before[:, k:] = windows[:, : width - k]
        same = before == suffix[:, reach - k].unsqueeze(1)
        matched &= same | (size <= k).unsqueeze(1)
    return matched


class NoRepeatNGram(LogitTransform):
    """``NoRepeatNGramLogitsProcessor``: ban the tokens that would repeat an n-gram of the row's
    history. ``size = 0`` leaves a row alone; ``max_size`` bounds the per-row sizes."""

    def __init__(self, size: IntParam, max_size: int | None = None) -> None:
        self.size, self.max_size = _ngram_size("no_repeat_ngram_size", size, max_size)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        size = per_row(self.size, logits, torch.long)
        reach = self.max_size - 1
        history = state.history()
        matched = _suffix_matches(history, state.last(reach), size, reach)
        # No complete n-gram before the row holds `size` tokens (the newest n-1 tokens never
        # match themselves: the window they start runs past the row's end).
        matched &= ((size > 0) & (state.lengths >= size)).unsqueeze(1)
        _ban(logits, history, matched & (history < logits.shape[1]))
        return logits


class PromptNoRepeatNGram(LogitTransform):
    """``EncoderNoRepeatNGramLogitsProcessor``: ban the tokens that would repeat an n-gram of the
    row's *prompt*. ``size = 0`` leaves a row alone; ``max_size`` bounds the per-row sizes."""

    def __init__(self, size: IntParam, max_size: int | None = None) -> None:
        self.size, self.max_size = _ngram_size("encoder_no_repeat_ngram_size", size, max_size)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        size = per_row(self.size, logits, torch.long)
        reach = self.max_size - 1
        prompt = state.prompt_history()
        matched = _suffix_matches(prompt, state.last(reach), size, reach)
        matched &= ((size > 0) & (state.lengths >= size - 1)).unsqueeze(1)
        _ban(logits, prompt, matched & (prompt < logits.shape[1]))
        return logits


# --------------------------------------------------------------------------------- sequence bias


class SequenceBias(LogitTransform):
    """``SequenceBiasLogitsProcessor``: add a bias to a sequence's last token wherever the row
    ends with the rest of it (a one-token sequence: always). Each bias is a float or one per row
    (``0`` where a row does not use the sequence). Build it with :func:`sequence_bias` or
    :func:`bad_words`.

    Several sequences ending in one token add up in Transformers' order (one-token biases first,
    then by prefix length in order of first appearance), so the sums round the same way.
    """

    def __init__(self, entries: Sequence[tuple[Sequence[int], FloatParam]]) -> None:
        # Transformers keeps the last bias given for a sequence, at its first position.
        merged: dict[tuple[int, ...], torch.Tensor] = {}
        for i, entry in enumerate(entries):
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise ValueError(
                    f"sequence_bias entry {i} must be a (token ids, bias) pair, got {entry!r}"
                )
            ids, bias = entry
            if isinstance(ids, (int, str, bytes)) or not isinstance(ids, Iterable):
                raise ValueError(
                    f"sequence_bias entry {i} must start with a list of token ids, got {ids!r}"
                )
            key = tuple(ids)
            if not key or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in key):
                raise ValueError(
                    f"sequence_bias entry {i} needs a non-empty list of token ids (>= 0): {ids!r}"
                )
            value = tensor_param(f"sequence_bias entry {i} bias", bias, torch.float64)
            check(f"sequence_bias entry {i} bias", value, ~value.isnan(), "a number (not NaN)")
            merged[key] = value
        sequences = list(merged)
        biases = list(merged.values())
        self.max_id = max((max(s) for s in sequences), default=-1)
        rows = {int(b.shape[0]) for b in biases if b.dim() == 1}
        if len(rows) > 1:
            raise ValueError(f"per-row biases disagree on the number of rows: {sorted(rows)}")
        width = rows.pop() if rows else None
        stacked = [b if width is None or b.dim() == 1 else b.expand(width) for b in biases]
        #: ``[E]`` or ``[E, rows]`` biases, float64.
        self.bias = torch.stack(stacked) if stacked else torch.zeros(0, dtype=torch.float64)
        self.reach = max((len(s) - 1 for s in sequences), default=0)
        # Prefixes right-aligned in a [E, reach] matrix; -2 marks "before the prefix".
        self.prefix = torch.full((len(sequences), self.reach), -2, dtype=torch.long)
        for e, s in enumerate(sequences):
            if len(s) > 1:
                self.prefix[e, self.reach - (len(s) - 1) :] = torch.tensor(s[:-1])
        # Per distinct last token, its sequences in the order Transformers adds them.
        lengths_in_order = list(dict.fromkeys(len(s) - 1 for s in sequences if len(s) > 1))
        order = sorted(
            range(len(sequences)),
            key=lambda e: (
                0 if len(sequences[e]) == 1 else 1 + lengths_in_order.index(len(sequences[e]) - 1),
                e,
            ),
        )
        by_token: dict[int, list[int]] = {}
        for e in order:
            by_token.setdefault(sequences[e][-1], []).append(e)
        self.tokens = torch.tensor(list(by_token), dtype=torch.long)
        depth = max((len(v) for v in by_token.values()), default=0)
        self.members = torch.tensor(
            [v + [-1] * (depth - len(v)) for v in by_token.values()], dtype=torch.long
        ).reshape(len(by_token), depth)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        if self.tokens.numel() == 0:
            return logits
        if self.max_id >= logits.shape[1]:
            raise ValueError(
                f"sequence_bias names token {self.max_id}, outside the {logits.shape[1]} logits"
            )
        device = logits.device
        rows = logits.shape[0]
        prefix = self.prefix.to(device)
        if self.reach:
            last = state.last(self.reach)
            fits = (last.unsqueeze(1) == prefix.unsqueeze(0)) | (prefix == -2).unsqueeze(0)
            matches = fits.all(dim=2)  # [rows, E]
        else:
            matches = torch.ones((rows, prefix.shape[0]), dtype=torch.bool, device=device)
        # Transformers keeps biases in float32 whatever the logits' dtype.
        bias = self.bias.to(torch.float32).to(device=device, dtype=logits.dtype)
        bias = bias.unsqueeze(0).expand(rows, -1) if bias.dim() == 1 else bias.transpose(0, 1)
        if bias.shape[0] != rows:
            raise ValueError(f"per-row biases have {bias.shape[0]} rows for {rows} rows")
        applied = torch.where(matches, bias, 0.0)
        tokens = self.tokens.to(device)
        members = self.members.to(device)
        total = torch.zeros((rows, tokens.shape[0]), dtype=logits.dtype, device=device)
        for rank in range(members.shape[1]):
            member = members[:, rank]
            part = applied.index_select(1, member.clamp(min=0))
            total = total + torch.where(member >= 0, part, 0.0)
        logits.index_copy_(1, tokens, logits.index_select(1, tokens) + total)
        return logits


def sequence_bias(
    entries: Sequence[tuple[Sequence[int], FloatParam]] | Mapping[tuple[int, ...], FloatParam],
) -> SequenceBias:
    """A :class:`SequenceBias` from ``[(ids, bias), ...]`` or ``{ids: bias}`` (Transformers' two
    forms); each bias a float or one per row."""
    items = list(entries.items()) if isinstance(entries, Mapping) else list(entries)
    return SequenceBias(items)


def bad_words(
    ids: Sequence[Sequence[int]], eos_id: int | Sequence[int] | None = None
) -> SequenceBias:
    """``NoBadWordsLogitsProcessor``: never complete any of the token sequences ``ids``. One-token
    sequences that are an EOS id are dropped, so that banning words never bans the end of the
    text."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise ValueError(f"bad_words needs a list of token id lists, got {ids!r}")
    listed = [list(w) if isinstance(w, Iterable) else w for w in ids]
    if not listed or any(not isinstance(w, list) for w in listed):
        raise ValueError(f"bad_words needs a non-empty list of token id lists, got {ids!r}")
    eos = {eos_id} if isinstance(eos_id, int) else set(eos_id or ())
    kept = [w for w in listed if not (len(w) == 1 and w[0] in eos)]
    return SequenceBias([(w, _NEG_INF) for w in kept])


# --------------------------------------------------------------------------------- token bans


class SuppressTokens(LogitTransform):
    """``SuppressTokensLogitsProcessor``: ``-inf`` on ``ids`` (shared, or one list per row)."""

    def __init__(self, ids: TokenIds) -> None:
        self.ids = token_sets("suppress_tokens", ids)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid = token_ids(self.ids, logits)
        _ban(logits, ids, valid)
        return logits


class BeginSuppressTokens(LogitTransform):
    """``SuppressTokensAtBeginLogitsProcessor``: ``-inf`` on ``ids`` while a row has drawn
    exactly ``offset`` tokens (Transformers' ``begin_index`` is the prompt length plus it)."""

    def __init__(self, ids: TokenIds, offset: IntParam = 0) -> None:
        self.ids = token_sets("begin_suppress_tokens", ids)
        self.offset = ints("offset", offset, 0)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid = token_ids(self.ids, logits)
        now = state.drawn == per_row(self.offset, logits, torch.long)
        _ban(logits, ids, valid & now.unsqueeze(1))
        return logits


class MinLength(LogitTransform):
    """``MinLengthLogitsProcessor``: ``-inf`` on the EOS ids while a row (prompt included) is
    shorter than ``length``."""

    def __init__(self, length: IntParam, eos: TokenIds) -> None:
        self.length = ints("min_length", length, 0)
        self.eos = token_sets("eos", eos)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid = token_ids(self.eos, logits)
        early = state.lengths < per_row(self.length, logits, torch.long)
        _ban(logits, ids, valid & early.unsqueeze(1))
        return logits


class MinNewTokens(LogitTransform):
    """``MinNewTokensLengthLogitsProcessor``: ``-inf`` on the EOS ids while a row has drawn fewer
    than ``count`` tokens."""

    def __init__(self, count: IntParam, eos: TokenIds) -> None:
        self.count = ints("min_new_tokens", count, 0)
        self.eos = token_sets("eos", eos)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid = token_ids(self.eos, logits)
        early = state.drawn < per_row(self.count, logits, torch.long)
        _ban(logits, ids, valid & early.unsqueeze(1))
        return logits


class ForcedBOS(LogitTransform):
    """``ForcedBOSTokenLogitsProcessor``: a row holding exactly one token must draw ``token``
    next (``0`` there, ``-inf`` elsewhere)."""

    def __init__(self, token: IntParam) -> None:
        self.token = ints("forced_bos_token_id", token, 0)
        self.max_id = int(self.token.max()) if self.token.numel() else -1

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        if self.max_id >= logits.shape[1]:
            raise ValueError(
                f"forced_bos_token_id {self.max_id} is outside the {logits.shape[1]} logits"
            )
        token = per_row(self.token, logits, torch.long).unsqueeze(1)
        now = (state.lengths == 1).unsqueeze(1)
        kept = torch.where(now, 0.0, logits.gather(1, token)).to(logits.dtype)
        logits.masked_fill_(now, _NEG_INF)
        return logits.scatter_(1, token, kept)


class ForcedEOS(LogitTransform):
    """``ForcedEOSTokenLogitsProcessor``: when a row reaches ``max_length - 1`` tokens, only its
    EOS ids may follow (``0`` there, ``-inf`` elsewhere). ``max_length`` defaults to each row's own
    limit in the state (its prompt plus what it may draw)."""

    def __init__(self, eos: TokenIds, max_length: IntParam | None = None) -> None:
        self.eos = token_sets("forced_eos_token_id", eos)
        self.max_length = None if max_length is None else ints("max_length", max_length, 0)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid = token_ids(self.eos, logits)
        if self.max_length is None:
            limit = state.limits
        else:
            limit = per_row(self.max_length, logits, torch.long)
        now = (state.lengths == limit - 1).unsqueeze(1)
        logits.masked_fill_(now, _NEG_INF)
        zeros = torch.zeros(ids.shape, dtype=logits.dtype, device=logits.device)
        _write(logits, ids, valid & now, zeros)
        return logits


class ExponentialDecayLengthPenalty(LogitTransform):
    """``ExponentialDecayLengthPenalty``: once a row has drawn more than ``start`` tokens, each EOS
    logit gains ``|logit| * (factor ** (drawn - start) - 1)``; a removed (``-inf``) EOS stays
    removed."""

    def __init__(self, start: IntParam, factor: FloatParam, eos: TokenIds) -> None:
        self.start = ints("start", start, 0)
        self.factor = floats("factor", factor, -math.inf, math.inf, closed="()")
        self.eos = token_sets("eos", eos)

    def apply_(self, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
        ids, valid = token_ids(self.eos, logits)
        steps = state.drawn - per_row(self.start, logits, torch.long)
        now = (steps > 0).unsqueeze(1)
        # Transformers computes the factor's power in Python (double precision), then uses it as a
        # scalar of the logits' dtype.
        factor = per_row(self.factor, logits, torch.float64)
        scale = (torch.pow(factor, steps.to(torch.float64)) - 1.0).to(logits.dtype).unsqueeze(1)
        score = _gather(logits, ids, valid)
        boost = torch.where(torch.isfinite(score), torch.abs(score) * scale, 0.0)
        _write(logits, ids, valid & now, score + boost)
        return logits
