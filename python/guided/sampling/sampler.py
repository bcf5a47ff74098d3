"""The sampler: one batched pass from a batch's logits to its next tokens, whatever each row asked.

An engine's batch mixes requests: greedy and random, truncated by top-k, top-p or min-p or not,
penalised or not, guided by a grammar or free. The sampler serves them all with tensor operations
over groups of rows, in vLLM's order:

1. processors: ``allowed_token_ids``, ``logit_bias``, ``min_tokens`` (EOS and stop ids banned
   until enough tokens were generated), and the grammar: every guided row's bitmask filled in one
   batched call and applied with ``apply_token_bitmask_inplace``;
2. penalties: repetition (prompt or output tokens), frequency and presence (output counts), from
   per-request statistics kept in persistent tensors (see ``penalties``);
3. greedy rows take the argmax;
4. the other rows are divided by their temperature, truncated by top-k, top-p and min-p
   (``filters``: thresholds, not sorts, and only for the rows that use them), and drawn by an
   exponential race (``draw``), each seeded row from its own ``torch.Generator``;
5. ``__call__`` then reports log-probabilities from the raw logits and advances each guide.

Cost is decided by grouping. Before anything else the rows are copied into a persistent float32
buffer *in group order* (greedy, plain random, thresholded, windowed), so every stage works on a
contiguous slice, a view, and touches only the rows that need it; the copy doubles as the dtype
conversion and leaves the caller's logits untouched. The host plans the groups from the requests'
settings (cached per request), never from tensor values, so on CUDA the whole of ``sample_device``
is queued without a single host sync. On the CPU, where a sync costs nothing and a pass over a
152k-wide row is what costs, greedy rows that nothing modifies are read in place, truncation uses
windows of the best scores (found through group maxima) and the draw races over the survivors
only: a top-p row costs a handful of streaming passes (its maximum, its mass, its group maxima)
rather than a sort, a plain row four (maximum, subtraction, exponential, block sums). A top-p row
whose nucleus is too wide for a window (a flat distribution) is cut by a radix selection
(:mod:`guided.sampling.radix`) over the weights its mass already computed, and drawn by a block
race under the cut: a few more passes, still never a sort.

A row with no allowed token (a grammar and ``allowed_token_ids`` that exclude each other, or a
grammar that only allows EOS while ``min_tokens`` bans it) draws ``-1``; ``__call__`` gives it an
empty token list. When a guide reaches a final state its request is finished: ``__call__``
appends the request's first EOS id to that row's tokens (and advances the guide past it), so an
engine's ordinary EOS check ends the request without another forward pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from guided._transfer import to_device
from guided.bitmask import apply_token_bitmask_inplace, bitmask_width, fill_next_token_bitmask
from guided.sampling.draw import block_race, window_race
from guided.sampling.filters import (
    Cut,
    Truncation,
    WindowResult,
    apply_temperature,
    full_thresholds,
    resolve_windows,
)
from guided.sampling.generation import (
    apply_processors,
    apply_warpers,
    uses_processors,
    uses_warpers,
)
from guided.sampling.logprobs import LogprobEntry, token_logprobs
from guided.sampling.params import SamplingParams
from guided.sampling.penalties import PenaltyState
from guided.sampling.request import GuideLike, RequestLike

__all__ = ["Sampler"]

#: Survivor lists longer than this are drawn by the block race instead of the window race.
WINDOW_DRAW_LIMIT = 4096
#: A positive infinity in the logits is read as this (so arithmetic on it stays finite).
_POSITIVE_INFINITY_AS = 1e30


@dataclass
class _Settings:
    """What the sampler derives once from a request's settings."""

    params: SamplingParams
    device: torch.device
    greedy: bool
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    penalized: bool
    banned_early: tuple[int, ...]
    allowed: torch.Tensor | None = None
    allowed_max: int = -1
    bias_ids: torch.Tensor | None = None
    bias_values: torch.Tensor | None = None
    bias_max: int = -1


@dataclass
class _Track:
    """Penalty bookkeeping of one request: its slot and the output length expected next step."""

    slot: int
    expected: int
    with_prompt: bool


@dataclass
class _Plan:
    """Row groups of one step.

    ``direct`` rows (greedy, nothing to modify, CPU) are read straight from the caller's logits.
    The others are copied into the work buffer in ``order``: greedy | plain | thresholded |
    windowed, so each group is a contiguous slice. Lists of rows index the work buffer.
    """

    direct: list[int]
    order: list[int]
    settings: list[_Settings]
    generators: list[torch.Generator | None]
    greedy: int = 0
    plain: int = 0
    thresholded: int = 0
    #: Leading windowed rows that use top-p without top-k (they need their row's total mass).
    massed: int = 0
    #: Runs ``[a, b)`` of work rows whose temperature is not 1.
    scaled: list[tuple[int, int]] = field(default_factory=list)
    processed: list[int] = field(default_factory=list)
    penalized: list[int] = field(default_factory=list)
    guided: list[int] = field(default_factory=list)
    #: Rows with Transformers' processor settings, and plain rows drawn after its warper chain.
    extended: list[int] = field(default_factory=list)
    warped: list[int] = field(default_factory=list)


def _rows(tensor: torch.Tensor, picked: list[int]) -> torch.Tensor:
    """Rows ``picked`` (ascending) of ``tensor``: a view when they are consecutive, a copy
    otherwise."""
    if picked == list(range(picked[0], picked[0] + len(picked))):
        return tensor[picked[0] : picked[0] + len(picked)]
    return tensor[picked]


class Sampler:
    """Batched sampling for requests with mixed settings (see the module notes)."""

    def __init__(self, max_logprobs: int = 20) -> None:
        if isinstance(max_logprobs, bool) or not isinstance(max_logprobs, int):
            raise ValueError(f"max_logprobs must be an int, got {max_logprobs!r}")
        if max_logprobs < 0:
            raise ValueError(f"max_logprobs must be >= 0, got {max_logprobs}")
        self.max_logprobs = max_logprobs
        self._settings: dict[str, _Settings] = {}
        self._tracks: dict[str, _Track] = {}
        self._generators: dict[str, torch.Generator] = {}
        self._penalties: PenaltyState | None = None
        self._vocab: int | None = None
        self._buffers: dict[str, torch.Tensor] = {}
        self._mask_copied: torch.Event | None = None
        #: Whether to plan without host syncs; ``None`` decides by device (CUDA: yes). Forcing it
        #: on the CPU runs the device code paths, which is how the tests cover them.
        self._sync_free_override: bool | None = None

    # ----------------------------------------------------------------------------- public API

    def release(self, request_id: str) -> None:
        """Forget a finished request: its penalty slot, its generator, its cached settings."""
        track = self._tracks.pop(request_id, None)
        if track is not None and self._penalties is not None:
            self._penalties.release(track.slot)
        self._generators.pop(request_id, None)
        self._settings.pop(request_id, None)

    def __call__(
        self,
        logits: torch.Tensor,
        requests: Sequence[RequestLike],
        generators: Mapping[str, torch.Generator] | None = None,
    ) -> tuple[list[list[int]], list[list[LogprobEntry] | None] | None]:
        """Sample, then report log-probabilities and advance guides.

        Returns ``(tokens, logprobs)``: ``tokens[i]`` is the list of tokens to append to request
        ``i`` (empty when no token was allowed; the drawn token followed by EOS when it brought
        the request's guide to a final state). ``logprobs`` is ``None`` when no request asked
        for them; otherwise ``logprobs[i]`` is ``None`` for a request that did not ask, else a list
        with the entry of the drawn token (see ``guided.sampling.logprobs``).
        """
        drawn = self.sample_device(logits, requests, generators)
        host = drawn.tolist()
        logprobs = self._logprobs(logits, requests, drawn)
        tokens: list[list[int]] = []
        for request, token in zip(requests, host):
            if token < 0:
                tokens.append([])
                continue
            row = [token]
            guide = request.guide
            if guide is not None:
                guide.advance(token)
                if self._ends_with_eos(request, guide):
                    eos = request.eos_token_ids[0]
                    guide.advance(eos)
                    row.append(eos)
            tokens.append(row)
        return tokens, logprobs

    def sample_device(
        self,
        logits: torch.Tensor,
        requests: Sequence[RequestLike],
        generators: Mapping[str, torch.Generator] | None = None,
    ) -> torch.Tensor:
        """Draw one token per row; a LongTensor ``[batch]`` on the logits' device, ``-1`` where no
        token is allowed. Guides are not advanced (that needs the tokens on the host)."""
        if logits.dim() != 2 or not logits.dtype.is_floating_point:
            raise ValueError(
                f"logits must be a 2-D float tensor, got {logits.dim()}-D {logits.dtype}"
            )
        batch, vocab = logits.shape
        if len(requests) != batch:
            raise ValueError(f"{len(requests)} requests for {batch} rows of logits")
        if vocab == 0:
            raise ValueError("logits must have at least one column")
        device = logits.device
        if self._vocab != vocab:
            self._reset_vocabulary(vocab)
        plan = self._plan(requests, vocab, device, generators or {})
        tokens = torch.full((batch,), -1, dtype=torch.long, device=device)
        if plan.direct:
            self._greedy_direct(logits, plan.direct, tokens)
        rows = len(plan.order)
        if rows:
            flat = self._buffer("work", rows * vocab + 1, device)
            work = flat[: rows * vocab].view(rows, vocab)
            identity = rows == batch and plan.order == list(range(batch))
            order = None if identity else to_device(plan.order, torch.long, device)
            if order is None:
                work.copy_(logits)
            elif logits.dtype == torch.float32:
                torch.index_select(logits, 0, order, out=work)
            else:
                work.copy_(logits.index_select(0, order))
            if self._sync_free(device):
                # No host checks on a device: make every row safe up front (cheap there).
                torch.nan_to_num_(
                    work, nan=-math.inf, posinf=_POSITIVE_INFINITY_AS, neginf=-math.inf
                )
            self._processors(work, plan, requests, vocab)
            if plan.penalized:
                self._apply_penalties(flat[: rows * vocab + 1], plan, requests, vocab)
            drawn = torch.full((rows,), -1, dtype=torch.long, device=device)
            if plan.greedy:
                self._greedy(work[: plan.greedy], drawn[: plan.greedy])
            if plan.greedy < rows:
                self._sample_random(work, drawn, plan, vocab)
            if order is None:
                tokens = drawn
            else:
                tokens[order] = drawn
        if plan.penalized:
            self._record(plan, requests, tokens)
        return tokens

    # ----------------------------------------------------------------------------- planning

    def _plan(
        self,
        requests: Sequence[RequestLike],
        vocab: int,
        device: torch.device,
        generators: Mapping[str, torch.Generator],
    ) -> _Plan:
        if len({r.request_id for r in requests}) != len(requests):
            raise ValueError("a request appears twice in the batch (request ids must be unique)")
        host_checks = not self._sync_free(device)
        direct: list[int] = []
        greedy: list[int] = []
        plain: list[int] = []
        thresholded: list[int] = []
        windowed: list[int] = []
        all_settings: list[_Settings] = []
        processed: set[int] = set()
        extended: set[int] = set()
        warped: set[int] = set()
        for i, request in enumerate(requests):
            settings = self._settings_of(request, vocab, device)
            all_settings.append(settings)
            if uses_processors(settings.params):
                extended.add(i)
            has_processors = (
                i in extended
                or settings.allowed is not None
                or settings.bias_ids is not None
                or (
                    bool(settings.banned_early)
                    and len(request.output_token_ids) < settings.params.min_tokens
                )
            )
            if has_processors:
                processed.add(i)
            if settings.greedy:
                untouched = not (has_processors or settings.penalized or request.guide is not None)
                (direct if host_checks and untouched else greedy).append(i)
                continue
            if uses_warpers(settings.params):
                # Transformers' whole warper chain runs on these rows, then a full-row draw.
                warped.add(i)
                plain.append(i)
                continue
            uses_k = 0 < settings.top_k < vocab
            if not (uses_k or settings.top_p < 1.0 or settings.min_p > 0.0):
                plain.append(i)
            elif host_checks and (uses_k or settings.top_p < 1.0):
                windowed.append(i)
            else:
                thresholded.append(i)

        def unscaled(i: int) -> bool:
            return all_settings[i].temperature == 1.0

        def massless(i: int) -> bool:
            s = all_settings[i]
            return not (s.top_p < 1.0 and not 0 < s.top_k < vocab)

        plain.sort(key=unscaled)
        thresholded.sort(key=unscaled)
        windowed.sort(key=lambda i: (massless(i), unscaled(i)))
        order = greedy + plain + thresholded + windowed
        plan = _Plan(
            direct=direct,
            order=order,
            settings=[all_settings[i] for i in order],
            generators=[self._generator_of(requests[i], generators, device) for i in order],
            greedy=len(greedy),
            plain=len(plain),
            thresholded=len(thresholded),
            massed=sum(1 for i in windowed if not massless(i)),
        )
        start = None
        for row, i in enumerate(order):
            settings = plan.settings[row]
            if row >= plan.greedy and settings.temperature != 1.0:
                start = row if start is None else start
            elif start is not None:
                plan.scaled.append((start, row))
                start = None
            if i in processed:
                plan.processed.append(row)
            if settings.penalized:
                plan.penalized.append(row)
            if requests[i].guide is not None:
                plan.guided.append(row)
            if i in extended:
                plan.extended.append(row)
            if i in warped:
                plan.warped.append(row)
        if start is not None:
            plan.scaled.append((start, len(order)))
        return plan

    def _settings_of(self, request: RequestLike, vocab: int, device: torch.device) -> _Settings:
        cached = self._settings.get(request.request_id)
        params = request.params
        if cached is None or cached.params is not params or cached.device != device:
            cached = self._derive(request, device)
            self._settings[request.request_id] = cached
        if cached.allowed_max >= vocab:
            raise ValueError(
                f"allowed_token_ids of request {request.request_id!r} holds token "
                f"{cached.allowed_max}, outside the vocabulary of {vocab} tokens"
            )
        if cached.bias_max >= vocab:
            raise ValueError(
                f"logit_bias of request {request.request_id!r} names token {cached.bias_max}, "
                f"outside the vocabulary of {vocab} tokens"
            )
        return cached

    def _derive(self, request: RequestLike, device: torch.device) -> _Settings:
        params = request.params
        for name, count in (
            ("logprobs", params.logprobs),
            ("prompt_logprobs", params.prompt_logprobs),
        ):
            if count is not None and count > self.max_logprobs:
                raise ValueError(
                    f"{name} of request {request.request_id!r} asks for {count} alternatives, "
                    f"more than max_logprobs ({self.max_logprobs})"
                )
        banned = set(params.stop_token_ids)
        if not params.ignore_eos:
            banned.update(request.eos_token_ids)
        settings = _Settings(
            params=params,
            device=device,
            greedy=params.greedy,
            temperature=params.temperature,
            top_k=params.top_k,
            top_p=params.top_p,
            min_p=params.min_p,
            penalized=params.needs_penalties,
            banned_early=tuple(sorted(banned)) if params.min_tokens > 0 else (),
        )
        if params.allowed_token_ids is not None:
            ids = sorted(set(params.allowed_token_ids))
            settings.allowed = to_device(ids, torch.long, device)
            settings.allowed_max = ids[-1]
        if params.logit_bias:
            keys = list(params.logit_bias)
            settings.bias_ids = to_device(keys, torch.long, device)
            settings.bias_values = to_device(
                [params.logit_bias[k] for k in keys], torch.float32, device
            )
            settings.bias_max = max(keys)
        return settings

    def _generator_of(
        self,
        request: RequestLike,
        given: Mapping[str, torch.Generator],
        device: torch.device,
    ) -> torch.Generator | None:
        if request.params.greedy:
            return None
        generator = given.get(request.request_id)
        if generator is not None:
            return generator
        seed = request.params.seed
        if seed is None:
            return None
        generator = self._generators.get(request.request_id)
        if generator is None or generator.device != device:
            generator = torch.Generator(device=device)
            generator.manual_seed(seed)
            self._generators[request.request_id] = generator
        return generator

    # ----------------------------------------------------------------------------- stages

    @staticmethod
    def _sanitized(rows: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
        """Repair rows whose maximum shows a NaN or a +inf (CPU); returns the corrected maxima.

        A NaN never wins and never poisons a row: it becomes -inf. A +inf becomes a large finite
        score, so arithmetic on it stays finite and it still dominates its row.
        """
        bad = (top.isnan() | (top == math.inf)).nonzero().squeeze(1).tolist()
        if not bad:
            return top
        top = top.clone()
        for row in bad:
            line = rows[row]
            torch.nan_to_num_(line, nan=-math.inf, posinf=_POSITIVE_INFINITY_AS, neginf=-math.inf)
            top[row] = line.max()
        return top

    def _greedy_direct(self, logits: torch.Tensor, rows: list[int], tokens: torch.Tensor) -> None:
        """Argmax of rows nothing modifies, read in place from the caller's logits (CPU)."""
        picked: list[int] = []
        for i in rows:
            line = logits[i]
            # max() with indices is the first maximum, like argmax, and about twice as fast.
            best_value, best_index = line.max(dim=0)
            value, best = float(best_value), int(best_index)
            if math.isnan(value):
                line = torch.nan_to_num(line.float(), nan=-math.inf, posinf=_POSITIVE_INFINITY_AS)
                best_value, best_index = line.max(dim=0)
                value, best = float(best_value), int(best_index)
            picked.append(best if value > -math.inf else -1)
        tokens[to_device(rows, torch.long, tokens.device)] = to_device(
            picked, torch.long, tokens.device
        )

    def _greedy(self, rows: torch.Tensor, out: torch.Tensor) -> None:
        value, best = rows.max(dim=1)
        if not self._sync_free(rows.device) and bool(value.isnan().any()):
            self._sanitized(rows, value)
            value, best = rows.max(dim=1)
        out.copy_(torch.where(value > -math.inf, best, -1))

    def _processors(
        self, work: torch.Tensor, plan: _Plan, requests: Sequence[RequestLike], vocab: int
    ) -> None:
        for row in plan.processed:
            settings = plan.settings[row]
            request = requests[plan.order[row]]
            line = work[row]
            if settings.allowed is not None:
                keep = line.index_select(0, settings.allowed)
                line.fill_(-math.inf)
                line.index_copy_(0, settings.allowed, keep)
            if settings.bias_ids is not None and settings.bias_values is not None:
                line.index_add_(0, settings.bias_ids, settings.bias_values)
            if settings.banned_early and len(request.output_token_ids) < settings.params.min_tokens:
                banned = [t for t in settings.banned_early if t < vocab]
                if banned:
                    line.index_fill_(0, to_device(banned, torch.long, work.device), -math.inf)
        if plan.extended:
            apply_processors(work, plan.extended, [requests[plan.order[r]] for r in plan.extended])
        if plan.guided:
            self._apply_grammar(work, plan, requests, vocab)

    def _apply_grammar(
        self, work: torch.Tensor, plan: _Plan, requests: Sequence[RequestLike], vocab: int
    ) -> None:
        width = bitmask_width(vocab)
        batch = work.shape[0]
        host = self._buffer("bitmask", batch * width, torch.device("cpu"), torch.int32)
        bitmask = host[: batch * width].view(batch, width)
        guides: list[GuideLike] = []
        for row in plan.guided:
            guide = requests[plan.order[row]].guide
            if guide is None:  # invariant: plan.guided lists rows with a guide
                raise AssertionError("planned a guided row without a guide")
            guides.append(guide)
        if self._mask_copied is not None:
            # The pinned buffer is about to be refilled: its last upload must have landed.
            self._mask_copied.synchronize()
            self._mask_copied = None
        fill_next_token_bitmask(guides, bitmask, plan.guided)
        if work.device.type != "cpu":
            device_mask = self._buffer("bitmask_device", batch * width, work.device, torch.int32)
            uploaded = device_mask[: batch * width].view(batch, width)
            uploaded.copy_(bitmask, non_blocking=True)
            bitmask = uploaded
            self._mask_copied = torch.Event(device=work.device)
            self._mask_copied.record()
        apply_token_bitmask_inplace(work, bitmask, indices=plan.guided, vocab_size=vocab)

    def _apply_penalties(
        self, flat: torch.Tensor, plan: _Plan, requests: Sequence[RequestLike], vocab: int
    ) -> None:
        state = self._penalty_state(flat.device)
        slots: list[int] = []
        for row in plan.penalized:
            slots.append(self._sync_track(requests[plan.order[row]], state, vocab))
        params = [plan.settings[row].params for row in plan.penalized]
        state.apply(
            flat,
            plan.penalized,
            slots,
            vocab,
            [p.repetition_penalty for p in params],
            [p.frequency_penalty for p in params],
            [p.presence_penalty for p in params],
        )

    def _sync_track(self, request: RequestLike, state: PenaltyState, vocab: int) -> int:
        """Bring a request's slot up to date with its output list; returns the slot."""
        track = self._tracks.get(request.request_id)
        outputs = request.output_token_ids
        if track is None:
            with_prompt = request.params.repetition_penalty != 1.0
            track = _Track(state.acquire(), len(outputs), with_prompt)
            self._tracks[request.request_id] = track
            state.reset(
                track.slot, request.prompt_token_ids if with_prompt else None, outputs, vocab
            )
        elif len(outputs) > track.expected:
            state.extend(track.slot, outputs[track.expected :], vocab)
        elif len(outputs) < track.expected:
            # Rolled back, or the last drawn token was dropped: the lists are the truth.
            prompt = request.prompt_token_ids if track.with_prompt else None
            state.reset(track.slot, prompt, outputs, vocab)
        track.expected = len(outputs)
        return track.slot

    def _record(self, plan: _Plan, requests: Sequence[RequestLike], drawn: torch.Tensor) -> None:
        state = self._penalties
        if state is None:  # invariant: _apply_penalties ran first
            raise AssertionError("penalty state missing after applying penalties")
        rows = [plan.order[row] for row in plan.penalized]
        slots = []
        for i in rows:
            track = self._tracks[requests[i].request_id]
            track.expected += 1
            slots.append(track.slot)
        device = drawn.device
        state.record(
            to_device(slots, torch.long, device),
            drawn.index_select(0, to_device(rows, torch.long, device)),
            slots,
        )

    def _sample_random(
        self, work: torch.Tensor, tokens: torch.Tensor, plan: _Plan, vocab: int
    ) -> None:
        device = work.device
        for a, b in plan.scaled:
            temps = [plan.settings[row].temperature for row in range(a, b)]
            apply_temperature(work[a:b], to_device(temps, torch.float32, device))
        if plan.warped:
            apply_warpers(work, plan.warped, [plan.settings[row].params for row in plan.warped])
        start = plan.greedy
        full = plan.plain + plan.thresholded
        if full:
            self._draw_full(work[start : start + full], tokens[start : start + full], plan, vocab)
        if start + full < work.shape[0]:
            first = start + full
            self._draw_windows(work[first:], tokens[first:], plan, first, vocab)

    def _draw_full(self, scores: torch.Tensor, out: torch.Tensor, plan: _Plan, vocab: int) -> None:
        rows = scores.shape[0]
        device = scores.device
        first = plan.greedy
        top = scores.amax(dim=1)
        sync_free = self._sync_free(device)
        if not sync_free:
            top = self._sanitized(scores, top)
        weights = self._buffer("weights", rows * vocab, device)[: rows * vocab].view(rows, vocab)
        torch.sub(scores, torch.where(top > -math.inf, top, 0.0).unsqueeze(1), out=weights)
        weights.exp_()
        if plan.thresholded:
            lo = plan.plain
            sub = [plan.settings[first + lo + i] for i in range(plan.thresholded)]
            truncation = Truncation(
                [s.top_k for s in sub], [s.top_p for s in sub], [s.min_p for s in sub]
            )
            part = weights[lo:]
            if sync_free:
                threshold = full_thresholds(scores[lo:], truncation)
                part.masked_fill_(scores[lo:] < threshold.unsqueeze(1), 0.0)
            min_p = to_device(list(truncation.min_p), torch.float32, device)
            part.masked_fill_(part < min_p.unsqueeze(1), 0.0)
        out.copy_(block_race(weights, plan.generators[first : first + rows]))

    def _draw_windows(
        self, scores: torch.Tensor, out: torch.Tensor, plan: _Plan, first: int, vocab: int
    ) -> None:
        rows = scores.shape[0]
        top = self._sanitized(scores, scores.amax(dim=1))
        mass = torch.zeros(rows)
        weights: torch.Tensor | None = None
        if plan.massed:
            massed = scores[: plan.massed]
            weights = self._buffer("weights", plan.massed * vocab, scores.device)
            weights = weights[: plan.massed * vocab].view(plan.massed, vocab)
            safe_top = torch.where(top[: plan.massed] > -math.inf, top[: plan.massed], 0.0)
            torch.sub(massed, safe_top.unsqueeze(1), out=weights)
            mass[: plan.massed] = weights.exp_().sum(dim=1)
        live = (top > -math.inf).nonzero().squeeze(1).tolist()
        if not live:
            return
        if len(live) < rows:
            scores, mass = scores[live], mass[live]
        settings = [plan.settings[first + i] for i in live]
        truncation = Truncation(
            [s.top_k for s in settings], [s.top_p for s in settings], [s.min_p for s in settings]
        )
        generators = [plan.generators[first + i] for i in live]
        for result in resolve_windows(scores, truncation, mass):
            if isinstance(result, Cut):
                cut = result.rows
                rows_cut = _rows(scores, cut)
                originals = [live[r] for r in cut]
                if weights is not None and originals[-1] < plan.massed:
                    # Rows that needed the mass (they lead the batch): their weights are computed.
                    cut_weights = _rows(weights, originals)
                else:
                    top_cut = rows_cut.amax(dim=1, keepdim=True)
                    cut_weights = torch.exp(rows_cut - top_cut)
                threshold = full_thresholds(
                    rows_cut, truncation.rows(cut), select=True, weights=cut_weights
                )
                min_ps = [truncation.min_p[r] for r in cut]
                min_p = to_device(min_ps, torch.float32, out.device) if any(min_ps) else None
                out[originals] = self._race_under(
                    rows_cut, cut_weights, threshold, min_p, [generators[r] for r in cut]
                )
            else:
                self._draw_resolved(result, scores, live, generators, out)

    def _draw_resolved(
        self,
        result: WindowResult,
        scores: torch.Tensor,
        live: list[int],
        generators: list[torch.Generator | None],
        out: torch.Tensor,
    ) -> None:
        """Draw the rows one window round resolved: a race over short survivor lists, a block
        race under the threshold for long ones."""
        kept = result.kept.tolist()
        short = [j for j, k in enumerate(kept) if k <= WINDOW_DRAW_LIMIT]
        long = [j for j, k in enumerate(kept) if k > WINDOW_DRAW_LIMIT]
        if short:
            drawn = window_race(
                result.scores[short],
                result.ids[short],
                [kept[j] for j in short],
                [generators[result.rows[j]] for j in short],
            )
            out[[live[result.rows[j]] for j in short]] = drawn
        if long:
            rows = [result.rows[j] for j in long]
            sub = scores[rows]
            weights = torch.exp(sub - sub.amax(dim=1, keepdim=True))
            out[[live[r] for r in rows]] = self._race_under(
                sub, weights, result.threshold[long], None, [generators[r] for r in rows]
            )

    @staticmethod
    def _race_under(
        scores: torch.Tensor,
        weights: torch.Tensor,
        threshold: torch.Tensor,
        min_p: torch.Tensor | None,
        generators: list[torch.Generator | None],
    ) -> torch.Tensor:
        """A block race over the scores at least ``threshold`` (and, with ``min_p``, whose
        weight relative to the best is at least it). ``weights`` is ``exp(scores - best)``; it is
        overwritten."""
        # Weights are finite: a product by the mask is a cheaper masked fill.
        weights *= scores >= threshold.unsqueeze(1)
        if min_p is not None:
            weights *= weights >= min_p.unsqueeze(1)
        return block_race(weights, generators)

    # ----------------------------------------------------------------------------- helpers

    def _logprobs(
        self, logits: torch.Tensor, requests: Sequence[RequestLike], drawn: torch.Tensor
    ) -> list[list[LogprobEntry] | None] | None:
        rows = [i for i, r in enumerate(requests) if r.params.logprobs is not None]
        if not rows:
            return None
        index = to_device(rows, torch.long, logits.device)
        counts: list[int] = []
        for i in rows:
            count = requests[i].params.logprobs
            counts.append(0 if count is None else count)
        entries = token_logprobs(
            logits.index_select(0, index), drawn.index_select(0, index), counts
        )
        result: list[list[LogprobEntry] | None] = [None] * len(requests)
        for i, entry in zip(rows, entries):
            result[i] = [] if entry is None else [entry]
        return result

    @staticmethod
    def _ends_with_eos(request: RequestLike, guide: GuideLike) -> bool:
        if not guide.finished or guide.is_terminated() or not request.eos_token_ids:
            return False
        params = request.params
        return not params.ignore_eos and len(request.output_token_ids) + 1 >= params.min_tokens

    def _sync_free(self, device: torch.device) -> bool:
        if self._sync_free_override is not None:
            return self._sync_free_override
        return device.type != "cpu"

    def _reset_vocabulary(self, vocab: int) -> None:
        """Token statistics are tied to a vocabulary width: start them over when it changes."""
        self._vocab = vocab
        self._tracks.clear()
        self._penalties = None

    def _penalty_state(self, device: torch.device) -> PenaltyState:
        if self._penalties is None or self._penalties.device != device:
            self._penalties = PenaltyState(device)
            self._tracks.clear()
        return self._penalties

    def _buffer(
        self, name: str, size: int, device: torch.device, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """A persistent flat scratch buffer of at least ``size`` elements."""
        key = f"{name}:{device}"
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < size:
            pin = name == "bitmask" and torch.cuda.is_available()
            buffer = torch.empty(size, dtype=dtype, device=device, pin_memory=pin)
            self._buffers[key] = buffer
        return buffer
