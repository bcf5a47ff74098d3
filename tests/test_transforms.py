"""The batched transforms against Transformers' processors, row by row, on each row's own history.

The oracle for every transform is the Transformers processor it names, built with the row's own
settings and called on that row alone: ``input_ids`` is the row's prompt followed by its drawn
tokens (no padding), ``scores`` the row's logits. Hypothesis draws the logits (ties, ``-inf``,
rows with nothing left, NaN and ``+inf``), the histories (from a small alphabet, so n-grams and
sequences repeat, with some ids past the logits) and one setting per row. Three further checks run
on every example: the batch's row equals the same transform applied to that row alone (per-row
settings are independent), the input is never modified, and the CPU's window strategy equals the
sync-free sort.

Most transforms must equal their processor bit for bit. Top-p, typical and top-h sort a row and
take running sums; for them a float64 re-derivation of the rule says where a token sits so close to
the boundary (within 1e-5 of the mass) that float32 rounding may flip it, and Transformers' unstable
sort may keep part of a tie group where guided keeps the whole group: only those tokens may differ.
Frequency and presence penalties have no Transformers processor; they are checked against vLLM's
formula, written out densely here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch
from devices import DEVICES
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation import logits_process as L

from guided.sampling import transforms as T
from guided.sampling.state import DecodeState

INF = math.inf
TOLERANCE = 1e-5

# ----------------------------------------------------------------------------------- strategies


@st.composite
def logit_rows(draw: st.DrawFn, vocab: int) -> list[float]:
    finite = st.one_of(
        st.floats(-30, 30, width=32),
        st.sampled_from([0.0, 1.0, -1.0, 2.5, 20.0, -20.0]),  # ties
    )
    kind = draw(st.sampled_from(["finite", "finite", "finite", "removed", "special"]))
    if kind == "finite":
        values = finite
    elif kind == "removed":
        values = st.one_of(finite, st.just(-INF))
    else:
        values = st.one_of(finite, st.sampled_from([-INF, INF, math.nan]))
    return draw(st.lists(values, min_size=vocab, max_size=vocab))


@dataclass
class Batch:
    logits: torch.Tensor
    prompts: list[list[int]]
    outputs: list[list[int]]
    budget: int
    device: str = "cpu"

    @property
    def rows(self) -> int:
        return self.logits.shape[0]

    @property
    def vocab(self) -> int:
        return self.logits.shape[1]

    def on(self, device: str) -> Batch:
        return replace(self, logits=self.logits.to(device), device=device)

    def state(self) -> DecodeState:
        return DecodeState.from_lists(
            self.prompts, self.outputs, budget=self.budget, device=self.device
        )

    def alone(self, i: int) -> DecodeState:
        return DecodeState.from_lists(
            [self.prompts[i]], [self.outputs[i]], budget=self.budget, device=self.device
        )

    def ids(self, tokens: list[int]) -> torch.Tensor:
        return torch.tensor([tokens], dtype=torch.long, device=self.device).reshape(1, -1)

    def input_ids(self, i: int) -> torch.Tensor:
        return self.ids(self.prompts[i] + self.outputs[i])


@st.composite
def batches(draw: st.DrawFn, max_vocab: int = 40) -> Batch:
    rows = draw(st.integers(1, 4))
    vocab = draw(st.integers(1, max_vocab))
    logits = torch.tensor(
        [draw(logit_rows(vocab)) for _ in range(rows)], dtype=torch.float32
    ).reshape(rows, vocab)
    # A small alphabet (plus ids past the logits) so that tokens, n-grams and sequences repeat.
    ids = st.integers(0, min(vocab + 1, 6))
    prompts = [draw(st.lists(ids, max_size=7)) for _ in range(rows)]
    outputs = [draw(st.lists(ids, max_size=7)) for _ in range(rows)]
    return Batch(logits, prompts, outputs, draw(st.integers(0, 3)))


# ----------------------------------------------------------------------------------- comparisons


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality, NaN equal to NaN."""
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(
        torch.where(nan, 0.0, a), torch.where(b.isnan(), 0.0, b)
    )


def has_distribution(row: torch.Tensor) -> bool:
    top = row.amax()
    return bool(torch.isfinite(top))


def straddled(row: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """Tokens whose tie group is kept only in part."""
    _, group = torch.unique(row, return_inverse=True)
    size = torch.bincount(group)
    kept_count = torch.bincount(group, weights=kept.double(), minlength=size.shape[0])
    partial = (kept_count > 0) & (kept_count < size)
    return partial[group]


def mass_above(keys: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """Per token, the probability of the tokens whose key is strictly larger."""
    order = torch.argsort(keys, descending=True)
    ordered = keys[order]
    exclusive = torch.cumsum(probs[order], 0) - probs[order]
    first = torch.searchsorted(-ordered, -keys, side="left")
    return torch.where(first < keys.shape[0], exclusive[first.clamp(max=keys.shape[0] - 1)], 0.0)


def check_top_p(row: torch.Tensor, ours: torch.Tensor, theirs: torch.Tensor, p: float) -> None:
    live = row > -INF
    x = row.double()
    above = mass_above(x, torch.softmax(x, dim=0))
    kept = (above < p) | (x == x.max())
    decided = live & ((above - p).abs() > TOLERANCE)
    ours_kept, theirs_kept = ours > -INF, theirs > -INF
    assert torch.equal(ours_kept[decided], kept[decided])
    agreeing = decided & ~straddled(row, theirs_kept & live)
    assert torch.equal(theirs_kept[agreeing], kept[agreeing])


def check_typical(row: torch.Tensor, ours: torch.Tensor, theirs: torch.Tensor, mass: float) -> None:
    live = row > -INF
    normalized = torch.log_softmax(row, dim=0)
    p = torch.exp(normalized)
    shifted = torch.abs((-normalized) - (-(normalized * p).nansum()))
    below = mass_above(-shifted.double(), torch.softmax(row.double(), dim=0))
    kept = (below < mass) | (shifted == shifted.min())
    decided = live & ((below - mass).abs() > TOLERANCE)
    assert torch.equal((ours > -INF)[decided], kept[decided])
    assert torch.equal((theirs > -INF)[decided], kept[decided])


def check_top_h(row: torch.Tensor, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    ours_kept, theirs_kept = ours > -INF, theirs > -INF
    assert not (theirs_kept & ~ours_kept).any()
    extra = ours_kept & ~theirs_kept
    if extra.any():
        # Only the tie group at Transformers' boundary, which its sort split.
        boundary = row[theirs_kept].min()
        assert bool((row[extra] == boundary).all())


# ----------------------------------------------------------------------------------- the cases

Reference = Callable[[Any, Batch, int], Any]


@dataclass
class Case:
    """One transform: a per-row setting, how to batch settings, and the row's Transformers
    processor (``None``: the row is left alone)."""

    setting: Callable[[Batch], st.SearchStrategy[Any]]
    batched: Callable[[list[Any]], T.LogitTransform]
    reference: Reference
    compare: str = "exact"
    max_vocab: int = 40
    #: Call the processor on logits widened to every id in the row's history (it indexes them
    #: without checking), then cut back to the row's width.
    widen: bool = False


def unzip(settings_: list[Any]) -> list[list[Any]]:
    return [list(column) for column in zip(*settings_)]


def eos_lists(b: Batch, inside: bool = False) -> st.SearchStrategy[list[int]]:
    top = b.vocab - 1 if inside else b.vocab + 1
    return st.lists(st.integers(0, top), min_size=1, max_size=3)


def sequence_entries(b: Batch) -> st.SearchStrategy[list[tuple[list[int], float]]]:
    # Biases are dyadic so that sums of several are exact in any order; +-inf included.
    bias = st.one_of(st.integers(-40, 40).map(lambda v: v / 4), st.sampled_from([-INF, INF]))
    ids = st.lists(st.integers(0, min(b.vocab - 1, 6)), min_size=1, max_size=4)
    return st.lists(st.tuples(ids, bias), max_size=5)


def batched_sequence_bias(settings_: list[list[tuple[list[int], float]]]) -> T.LogitTransform:
    # One entry per sequence any row uses, with a bias per row (0 where a row does not use it).
    per_row = [{tuple(ids): bias for ids, bias in entries} for entries in settings_]
    union = list(dict.fromkeys(key for entries in per_row for key in entries))
    return T.sequence_bias(
        [(list(key), [entries.get(key, 0.0) for entries in per_row]) for key in union]
    )


def reference_sequence_bias(entries: list[tuple[list[int], float]], b: Batch, i: int) -> Any:
    if not entries:
        return None
    return L.SequenceBiasLogitsProcessor([[ids, float(bias)] for ids, bias in entries])


def vllm_frequency(penalty: float, b: Batch, i: int) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    def apply(_: Any, scores: torch.Tensor) -> torch.Tensor:
        counts = torch.zeros(scores.shape[1] + 1, dtype=torch.long, device=scores.device)
        for t in b.outputs[i]:
            counts[min(t, scores.shape[1])] += 1
        return (
            scores
            - torch.tensor([penalty], dtype=scores.dtype, device=scores.device).unsqueeze(1)
            * counts[:-1]
        )

    return apply


def vllm_presence(penalty: float, b: Batch, i: int) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    def apply(_: Any, scores: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(scores.shape[1] + 1, dtype=torch.bool, device=scores.device)
        for t in b.outputs[i]:
            mask[min(t, scores.shape[1])] = True
        return (
            scores
            - torch.tensor([penalty], dtype=scores.dtype, device=scores.device).unsqueeze(1)
            * mask[:-1]
        )

    return apply


PROBABILITY = st.one_of(st.sampled_from([0.0, 0.5, 0.9, 1.0]), st.floats(0.0, 1.0))
PENALTY = st.one_of(st.sampled_from([1.0, 0.5, 1.3, 2.0]), st.floats(0.05, 4.0))

CASES: dict[str, Case] = {
    "temperature": Case(
        lambda b: st.one_of(st.sampled_from([1.0, 0.7, 2.0]), st.floats(0.05, 4.0)),
        T.Temperature,
        lambda t, b, i: L.TemperatureLogitsWarper(float(t)),
    ),
    "top_k": Case(
        lambda b: st.integers(0, b.vocab + 2),
        T.TopK,
        lambda k, b, i: L.TopKLogitsWarper(k) if k > 0 else None,
    ),
    "top_p": Case(
        lambda b: PROBABILITY,
        T.TopP,
        lambda p, b, i: L.TopPLogitsWarper(p) if p < 1 else None,
        compare="top_p",
    ),
    "min_p": Case(lambda b: PROBABILITY, T.MinP, lambda p, b, i: L.MinPLogitsWarper(p)),
    "typical": Case(
        lambda b: st.one_of(st.sampled_from([0.2, 0.5, 0.9, 1.0]), st.floats(0.01, 1.0)),
        T.Typical,
        lambda m, b, i: L.TypicalLogitsWarper(m) if m < 1 else None,
        compare="typical",
    ),
    "epsilon": Case(
        lambda b: st.one_of(st.sampled_from([0.0, 0.01, 0.3]), st.floats(0.0, 0.99)),
        T.EpsilonCutoff,
        lambda e, b, i: L.EpsilonLogitsWarper(e) if e > 0 else None,
    ),
    "eta": Case(
        lambda b: st.one_of(st.sampled_from([0.0, 0.01, 0.3]), st.floats(0.0, 0.99)),
        T.EtaCutoff,
        lambda e, b, i: L.EtaLogitsWarper(e, device=b.device) if e > 0 else None,
        compare="raises_without_distribution",
    ),
    "top_h": Case(
        lambda b: st.one_of(st.sampled_from([0.0, 0.4, 1.0]), st.floats(0.0, 1.0)),
        T.TopH,
        lambda f, b, i: L.TopHLogitsWarper(f) if f > 0 else None,
        compare="top_h",
        max_vocab=140,  # wider than its 100 candidates
    ),
    "renormalize": Case(
        lambda b: st.none(), lambda _: T.Renormalize(), lambda _, b, i: L.LogitNormalization()
    ),
    "remove_invalid": Case(
        lambda b: st.none(),
        lambda _: T.RemoveInvalidValues(),
        lambda _, b, i: L.InfNanRemoveLogitsProcessor(),
    ),
    "repetition": Case(
        lambda b: PENALTY,
        T.RepetitionPenalty,
        lambda r, b, i: L.RepetitionPenaltyLogitsProcessor(float(r)),
    ),
    "prompt_repetition": Case(
        lambda b: PENALTY,
        T.PromptRepetitionPenalty,
        lambda r, b, i: L.EncoderRepetitionPenaltyLogitsProcessor(float(r), b.ids(b.prompts[i])),
        widen=True,
    ),
    "frequency": Case(lambda b: st.floats(-2.0, 2.0), T.FrequencyPenalty, vllm_frequency),
    "presence": Case(lambda b: st.floats(-2.0, 2.0), T.PresencePenalty, vllm_presence),
    "no_repeat_ngram": Case(
        lambda b: st.integers(0, 5),
        T.NoRepeatNGram,
        lambda n, b, i: L.NoRepeatNGramLogitsProcessor(n) if n > 0 else None,
    ),
    "prompt_no_repeat_ngram": Case(
        lambda b: st.integers(0, 5),
        T.PromptNoRepeatNGram,
        lambda n, b, i: (
            L.EncoderNoRepeatNGramLogitsProcessor(n, b.ids(b.prompts[i])) if n > 0 else None
        ),
        widen=True,
    ),
    "sequence_bias": Case(sequence_entries, batched_sequence_bias, reference_sequence_bias),
    "suppress": Case(
        lambda b: st.lists(st.integers(0, b.vocab + 1), max_size=4),
        T.SuppressTokens,
        lambda ids, b, i: L.SuppressTokensLogitsProcessor(ids, device=b.device) if ids else None,
    ),
    "begin_suppress": Case(
        lambda b: st.tuples(
            st.lists(st.integers(0, b.vocab + 1), min_size=1, max_size=4), st.integers(0, 3)
        ),
        lambda s: T.BeginSuppressTokens(*unzip(s)),
        lambda s, b, i: L.SuppressTokensAtBeginLogitsProcessor(
            s[0], len(b.prompts[i]) + s[1], device=b.device
        ),
    ),
    "min_length": Case(
        lambda b: st.tuples(st.integers(0, 12), eos_lists(b)),
        lambda s: T.MinLength(*unzip(s)),
        lambda s, b, i: L.MinLengthLogitsProcessor(s[0], s[1], device=b.device),
    ),
    "min_new_tokens": Case(
        lambda b: st.tuples(st.integers(0, 8), eos_lists(b)),
        lambda s: T.MinNewTokens(*unzip(s)),
        lambda s, b, i: L.MinNewTokensLengthLogitsProcessor(
            len(b.prompts[i]), s[0], s[1], device=b.device
        ),
    ),
    "forced_bos": Case(
        lambda b: st.integers(0, b.vocab - 1),
        T.ForcedBOS,
        lambda t, b, i: L.ForcedBOSTokenLogitsProcessor(t),
    ),
    "forced_eos": Case(
        lambda b: st.tuples(eos_lists(b, inside=True), st.integers(0, 14)),
        lambda s: T.ForcedEOS(*unzip(s)),
        lambda s, b, i: L.ForcedEOSTokenLogitsProcessor(s[1], s[0], device=b.device),
    ),
    "exponential_decay": Case(
        lambda b: st.tuples(st.integers(0, 6), st.floats(0.5, 2.0), eos_lists(b, inside=True)),
        lambda s: T.ExponentialDecayLengthPenalty(*unzip(s)),
        lambda s, b, i: L.ExponentialDecayLengthPenalty((s[0], s[1]), s[2], len(b.prompts[i])),
    ),
}


def reference_row(case: Case, setting: Any, b: Batch, i: int) -> tuple[torch.Tensor | None, bool]:
    """The processor's output for row ``i`` alone (``None`` when it refuses the row), and whether
    the setting leaves the row alone."""
    processor = case.reference(setting, b, i)
    scores = b.logits[i : i + 1].clone()
    if processor is None:
        return scores[0], True
    vocab = b.vocab
    if case.widen:
        width = max([vocab] + [t + 1 for t in b.prompts[i] + b.outputs[i]])
        scores = torch.nn.functional.pad(scores, (0, width - vocab))
    try:
        return processor(b.input_ids(i), scores)[0, :vocab], False
    except ValueError:
        if case.compare in ("raises_without_distribution", "top_h"):
            return None, False
        raise


def check_case(case: Case, b: Batch, settings_: list[Any], got: torch.Tensor) -> None:
    for i in range(b.rows):
        row = b.logits[i]
        theirs, off = reference_row(case, settings_[i], b, i)
        if theirs is None:
            # Transformers' Categorical refuses a row without a distribution; it passes here.
            assert not has_distribution(row)
            assert same(got[i], row)
            continue
        exact = case.compare in ("exact", "raises_without_distribution")
        if exact or off or not has_distribution(row):
            assert same(got[i], theirs), (i, settings_[i], got[i], theirs)
            continue
        # Truncations: survivors keep their exact value, the rest are -inf.
        kept = got[i] > -INF
        assert torch.equal(got[i][kept], row[kept])
        if case.compare == "top_p":
            check_top_p(row, got[i], theirs, settings_[i])
        elif case.compare == "typical":
            check_typical(row, got[i], theirs, settings_[i])
        else:
            check_top_h(row, got[i], theirs)


def run_case(name: str, data: st.DataObject, device: str = "cpu") -> None:
    case = CASES[name]
    b = data.draw(batches(case.max_vocab)).on(device)
    settings_ = [data.draw(case.setting(b)) for _ in range(b.rows)]
    transform = case.batched(settings_).to(device)
    before = b.logits.clone()
    got = transform(b.state(), b.logits)
    assert same(b.logits, before), "the input was modified"
    check_case(case, b, settings_, got)
    # Each row of the batch equals the row alone.
    for i in range(b.rows):
        alone = case.batched([settings_[i]]).to(device)(b.alone(i), b.logits[i : i + 1])
        assert same(alone[0], got[i]), (i, settings_[i])


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("device", DEVICES)
# 24 transforms, each example running Transformers on every row and every row alone again: 150
# examples a transform keeps the file within its share of the suite's time.
@settings(max_examples=150)
@given(data=st.data())
def test_equals_transformers_row_by_row(name: str, device: str, data: st.DataObject) -> None:
    # On CUDA, Transformers runs on the device too: the oracle is the processor on the same
    # device, whose reductions and transcendental functions are the device's.
    run_case(name, data, device)


@pytest.mark.parametrize("name", ["top_k", "top_p", "typical"])
@settings(max_examples=150)  # the sort strategy re-runs three cases already covered above
@given(data=st.data())
def test_sorted_strategy_equals_windows(name: str, data: st.DataObject) -> None:
    case = CASES[name]
    b = data.draw(batches(case.max_vocab))
    settings_ = [data.draw(case.setting(b)) for _ in range(b.rows)]
    windowed = case.batched(settings_)(b.state(), b.logits)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(T, "_windowed", lambda logits: False)
        sorted_ = case.batched(settings_)(b.state(), b.logits)
    assert same(windowed, sorted_)


@pytest.mark.parametrize("device", DEVICES)
@given(batches())
def test_greedy(device: str, b: Batch) -> None:
    b = b.on(device)
    got = T.Greedy()(b.state(), b.logits)
    for i in range(b.rows):
        row = b.logits[i]
        if row.isnan().any() or not (row > -INF).any():
            assert same(got[i], row)
            continue
        expected = torch.full_like(row, -INF)
        expected[int(torch.argmax(row))] = 0.0
        assert torch.equal(got[i], expected)


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=200)  # a chain of five over the same batches as above
@given(data=st.data())
def test_chain_equals_transformers_in_order(device: str, data: st.DataObject) -> None:
    b = data.draw(batches()).on(device)
    rows = b.rows
    reps = [data.draw(PENALTY) for _ in range(rows)]
    sizes = [data.draw(st.integers(0, 4)) for _ in range(rows)]
    temps = [data.draw(st.floats(0.2, 3.0)) for _ in range(rows)]
    ks = [data.draw(st.integers(0, b.vocab)) for _ in range(rows)]
    ms = [data.draw(PROBABILITY) for _ in range(rows)]
    chained = T.chain(
        T.RepetitionPenalty(reps),
        T.NoRepeatNGram(sizes),
        T.Temperature(temps),
        [T.TopK(ks), T.MinP(ms)],
    ).to(device)
    got = chained(b.state(), b.logits)
    for i in range(rows):
        processors = [L.RepetitionPenaltyLogitsProcessor(reps[i])]
        if sizes[i]:
            processors.append(L.NoRepeatNGramLogitsProcessor(sizes[i]))
        processors.append(L.TemperatureLogitsWarper(temps[i]))
        if ks[i]:
            processors.append(L.TopKLogitsWarper(ks[i]))
        processors.append(L.MinPLogitsWarper(ms[i]))
        expected = L.LogitsProcessorList(processors)(b.input_ids(i), b.logits[i : i + 1].clone())
        assert same(got[i], expected[0])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_exact_in_double_precision_too(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(5)
    logits = (torch.randn(3, 64, generator=generator) * 4).to(dtype)
    prompts, outputs = [[1, 2, 3, 1, 2], [4, 4], []], [[3, 1], [5, 6, 5], [7]]
    state = DecodeState.from_lists(prompts, outputs, budget=2)
    checks: list[tuple[T.LogitTransform, Callable[[int], Any]]] = [
        (T.Temperature([0.7, 1.3, 0.1]), lambda i: L.TemperatureLogitsWarper([0.7, 1.3, 0.1][i])),
        (T.MinP([0.05, 0.3, 0.9]), lambda i: L.MinPLogitsWarper([0.05, 0.3, 0.9][i])),
        (T.EpsilonCutoff([0.01, 0.02, 0.3]), lambda i: L.EpsilonLogitsWarper([0.01, 0.02, 0.3][i])),
        (T.EtaCutoff([0.01, 0.02, 0.3]), lambda i: L.EtaLogitsWarper([0.01, 0.02, 0.3][i])),
        (
            T.RepetitionPenalty([1.1, 1.7, 0.3]),
            lambda i: L.RepetitionPenaltyLogitsProcessor([1.1, 1.7, 0.3][i]),
        ),
        (
            T.PromptRepetitionPenalty([1.1, 1.7, 0.3]),
            lambda i: L.EncoderRepetitionPenaltyLogitsProcessor(
                [1.1, 1.7, 0.3][i], torch.tensor([prompts[i]], dtype=torch.long).reshape(1, -1)
            ),
        ),
        (
            T.ExponentialDecayLengthPenalty(0, [1.1, 1.7, 0.3], [3, 5]),
            lambda i: L.ExponentialDecayLengthPenalty(
                (0, [1.1, 1.7, 0.3][i]), [3, 5], len(prompts[i])
            ),
        ),
        (
            T.sequence_bias([([1, 3], 0.7), ([5], -1.3)]),
            lambda i: L.SequenceBiasLogitsProcessor([[[1, 3], 0.7], [[5], -1.3]]),
        ),
    ]
    for transform, reference in checks:
        got = transform(state, logits)
        for i in range(3):
            ids = torch.tensor([prompts[i] + outputs[i]], dtype=torch.long)
            expected = reference(i)(ids, logits[i : i + 1].clone())[0]
            assert got.dtype == dtype
            assert same(got[i], expected), type(transform).__name__


# ----------------------------------------------------------------------------------- details


def test_bad_words_drop_single_token_eos_and_ban_the_rest() -> None:
    logits = torch.zeros(2, 10)
    state = DecodeState.from_lists([[1, 2], [4]], [[3], []])
    words = [[2], [7], [3, 9], [2, 3, 8], [5, 6]]
    got = T.bad_words(words, eos_id=[2, 9])(state, logits)
    for i, ids in enumerate(([1, 2, 3], [4])):
        expected = L.NoBadWordsLogitsProcessor(words, [2, 9])(
            torch.tensor([ids]), logits[i : i + 1].clone()
        )
        assert same(got[i], expected[0])
    # EOS 2 stays allowed (its one-token word was dropped); 7 and, after [2, 3], 8 are banned.
    assert got[0, 2] == 0 and got[0, 7] == -INF and got[0, 8] == -INF and got[1, 8] == 0
    with pytest.raises(ValueError, match="non-empty"):
        T.bad_words([])
    with pytest.raises(ValueError):
        T.bad_words([[1], []])


def test_sequence_bias_forms_and_limits() -> None:
    state = DecodeState.from_lists([[1, 2]], [[3]])
    logits = torch.zeros(1, 6)
    as_list = T.sequence_bias([([3, 4], 1.0), ([5], -2.0), ([3, 4], 3.0)])
    as_dict = T.sequence_bias({(3, 4): 3.0, (5,): -2.0})
    assert same(as_list(state, logits), as_dict(state, logits))
    assert as_dict(state, logits).tolist() == [[0.0, 0.0, 0.0, 0.0, 3.0, -2.0]]
    with pytest.raises(ValueError, match="outside"):
        T.sequence_bias([([9], 1.0)])(state, logits)
    with pytest.raises(ValueError, match="pair"):
        T.sequence_bias([([1], 1.0, 2.0)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="non-empty"):
        T.sequence_bias([([], 1.0)])
    with pytest.raises(ValueError, match="NaN"):
        T.sequence_bias([([1], math.nan)])


def test_forced_eos_defaults_to_each_rows_own_limit() -> None:
    # Row 0 may draw 2 more tokens, row 1 one more: the last one must be EOS.
    state = DecodeState.from_lists([[1, 2], [3]], [[4], [5, 6]], budget=[2, 1])
    logits = torch.zeros(2, 8)
    got = T.ForcedEOS([7])(state, logits)
    assert torch.equal(got[0], logits[0])
    assert got[1, 7] == 0 and bool((got[1, :7] == -INF).all())
    state.commit(torch.tensor([3, 0]), torch.tensor([True, False]))
    got = T.ForcedEOS([7])(state, logits)
    assert got[0, 7] == 0 and bool((got[0, :7] == -INF).all())


def test_bad_settings_are_refused_with_their_name() -> None:
    for make, name in [
        (lambda: T.Temperature(0.0), "temperature"),
        (lambda: T.Temperature([1.0, -1.0]), "temperature"),
        (lambda: T.TopP(1.5), "top_p"),
        (lambda: T.MinP(-0.1), "min_p"),
        (lambda: T.Typical(0.0), "typical_p"),
        (lambda: T.EpsilonCutoff(1.0), "epsilon_cutoff"),
        (lambda: T.EtaCutoff(-0.5), "eta_cutoff"),
        (lambda: T.TopH(2.0), "top_h"),
        (lambda: T.RepetitionPenalty(0.0), "repetition_penalty"),
        (lambda: T.NoRepeatNGram(-1), "no_repeat_ngram_size"),
        (lambda: T.NoRepeatNGram([1.5]), "no_repeat_ngram_size"),  # type: ignore[list-item]
        (lambda: T.TopK(5, max_k=3), "max_k"),
        (lambda: T.SuppressTokens([-1]), "suppress_tokens"),
        (lambda: T.SuppressTokens("abc"), "suppress_tokens"),  # type: ignore[arg-type]
        (lambda: T.ForcedBOS(True), "forced_bos_token_id"),  # type: ignore[arg-type]
        (lambda: T.MinLength(2, [[1], [2.5]]), "eos"),  # type: ignore[list-item]
    ]:
        with pytest.raises(ValueError, match=name):
            make()
    state = DecodeState.from_lists([[1], [2]])
    with pytest.raises(ValueError, match="per-row"):
        T.Temperature([1.0, 2.0, 3.0])(state, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="rows"):
        T.Temperature(1.0)(state, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="outside"):
        T.ForcedBOS(9)(state, torch.zeros(2, 4))


def test_tensor_parameters_are_data() -> None:
    # A parameter given as a tensor is used as is: changing it in place changes the result, so a
    # compiled or captured chain can be re-aimed without being rebuilt.
    temperature = torch.tensor([1.0, 2.0], dtype=torch.float64)
    transform = T.Temperature(temperature)
    assert transform.value is temperature
    state = DecodeState.from_lists([[1], [2]])
    logits = torch.ones(2, 3)
    assert transform(state, logits)[1, 0] == 0.5
    temperature.fill_(4.0)
    assert transform(state, logits)[1, 0] == 0.25
    assert T.Temperature(torch.tensor(2.0)).to("cpu").value.device.type == "cpu"


@pytest.mark.parametrize("rows,vocab", [(3, 2000), (2, 30000)])
def test_wide_rows_with_real_shapes(rows: int, vocab: int) -> None:
    # Peaked, flat and tied rows of real widths, so that the CPU windows grow to the whole row.
    generator = torch.Generator().manual_seed(vocab)
    logits = torch.stack(
        [
            torch.randn(vocab, generator=generator) * 4,
            torch.randn(vocab, generator=generator) * 0.001,
            torch.randint(0, 3, (vocab,), generator=generator).float(),
        ][:rows]
    )
    state = DecodeState.from_lists([[]] * rows)
    for p in (0.3, 0.9, 0.999):
        got = T.TopP(p)(state, logits)
        for i in range(rows):
            theirs = L.TopPLogitsWarper(p)(None, logits[i : i + 1].clone())[0]
            check_top_p(logits[i], got[i], theirs, p)
    for mass in (0.2, 0.95):
        got = T.Typical(mass)(state, logits)
        for i in range(rows):
            theirs = L.TypicalLogitsWarper(mass)(None, logits[i : i + 1].clone())[0]
            check_typical(logits[i], got[i], theirs, mass)
    got = T.TopK([5, 1000, 2][:rows])(state, logits)
    for i, k in enumerate([5, 1000, 2][:rows]):
        assert same(got[i], L.TopKLogitsWarper(k)(None, logits[i : i + 1].clone())[0])
