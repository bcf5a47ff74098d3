"""The Sampler end to end on random batches: what it draws, from which distribution, reproducibly.

The oracle for "which tokens may be drawn" is rebuilt here from the definitions, step by step:
the processors (allowed ids, logit bias, min_tokens, the grammar mask unpacked bit by bit),
the penalties (vLLM's formula over Python lists), then Transformers' warpers with the float64
boundary margins of ``test_sampling_filters``. Distributions are checked by chi-square tests with
fixed seeds and a significance of 1e-6 (generous enough never to flake, while 20,000 draws still
expose a bias of a few percent on any candidate).
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
import torch
from devices import requires_cuda
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sampling_filters import float64_definition
from toy_guide import EOS, VOCAB, WIDTH, ToyGuide
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from guided.sampling import Request, Sampler, SamplingParams
from guided.sampling import sampler as sampler_module
from guided.sampling.draw import BLOCK

SIGNIFICANCE = 1e-6


def make_sampler(sync_free: bool | None = False) -> Sampler:
    """A sampler; ``sync_free`` runs, on the CPU, the code paths it takes on a CUDA device
    (``None``: the paths of the logits' own device)."""
    sampler = Sampler()
    sampler._sync_free_override = sync_free
    return sampler


@contextlib.contextmanager
def patched(module: object, name: str, value: object) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


class MaskGuide:
    """A guide that always allows the same tokens (and never finishes)."""

    def __init__(self, allowed: torch.Tensor) -> None:
        self.allowed = allowed
        self.advanced: list[int] = []

    @property
    def finished(self) -> bool:
        return False

    def is_terminated(self) -> bool:
        return False

    def fill_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> None:
        bits = np.zeros(bitmask.shape[1] * 32, dtype=np.uint8)
        bits[: self.allowed.shape[0]] = self.allowed.numpy()
        bitmask[index] = torch.from_numpy(np.packbits(bits, bitorder="little").view(np.int32))

    def advance(self, token: int) -> None:
        assert self.allowed[token], f"drew disallowed token {token}"
        self.advanced.append(token)


def processed_oracle(raw: torch.Tensor, request: Request) -> torch.Tensor:
    """The logits after processors and penalties, from the definitions (one row)."""
    x = raw.to(torch.float32).clone()
    params = request.params
    vocab = x.shape[0]
    if params.allowed_token_ids is not None:
        keep = torch.zeros(vocab, dtype=torch.bool)
        keep[list(params.allowed_token_ids)] = True
        x[~keep] = -math.inf
    for token, bias in (params.logit_bias or {}).items():
        x[token] = x[token] + torch.tensor(bias, dtype=torch.float32)
    if len(request.output_token_ids) < params.min_tokens:
        banned = set(params.stop_token_ids)
        if not params.ignore_eos:
            banned |= set(request.eos_token_ids)
        for token in banned:
            if token < vocab:
                x[token] = -math.inf
    if isinstance(request.guide, MaskGuide):
        x[~request.guide.allowed] = -math.inf
    if params.needs_penalties:
        seen = {t for t in request.output_token_ids if t < vocab}
        if params.repetition_penalty != 1.0:
            seen |= {t for t in request.prompt_token_ids if t < vocab}
        counts = Counter(t for t in request.output_token_ids if t < vocab)
        r = torch.tensor(params.repetition_penalty, dtype=torch.float32)
        f = torch.tensor(params.frequency_penalty, dtype=torch.float32)
        p = torch.tensor(params.presence_penalty, dtype=torch.float32)
        for token in seen:
            value = x[token]
            value = value / r if value > 0 else value * r
            count = torch.tensor(float(counts[token]), dtype=torch.float32)
            value = value - f * count
            value = value - p * (count > 0).to(torch.float32)
            x[token] = value
    return x


def check_draw(raw: torch.Tensor, request: Request, token: int) -> None:
    """``token`` is one the definitions allow for this row (or -1 when none is)."""
    x = processed_oracle(raw, request)
    params = request.params
    if not (x > -math.inf).any():
        assert token == -1
        return
    assert 0 <= token < x.shape[0] and x[token] > -math.inf, token
    if params.greedy:
        assert token == int(x.argmax())
        return
    scaled = TemperatureLogitsWarper(params.temperature)(None, x.unsqueeze(0)).squeeze(0)
    kept, ambiguous = float64_definition(scaled, params.top_k, params.top_p, params.min_p)
    assert kept[token] or ambiguous[token], (token, params)


@st.composite
def requests_and_logits(draw: st.DrawFn) -> tuple[torch.Tensor, list[Request]]:
    rows = draw(st.integers(1, 6))
    vocab = draw(st.sampled_from([7, 50, BLOCK + 300, 2 * BLOCK + 5]))
    seed = draw(st.integers(0, 2**31))
    generator = torch.Generator().manual_seed(seed)
    scale = draw(st.sampled_from([0.1, 1.0, 4.0, 20.0]))
    logits = torch.randn(rows, vocab, generator=generator) * scale
    if draw(st.booleans()):
        # Ties and masked entries straight from the model.
        logits = logits.round()
        logits[torch.rand(rows, vocab, generator=generator) < 0.3] = -math.inf
    requests = []
    for i in range(rows):
        temperature = draw(st.sampled_from([0.0, 0.5, 1.0, 1.7]))
        params = SamplingParams(
            temperature=temperature,
            top_k=draw(st.sampled_from([0, 1, 3, 40, vocab + 1])),
            top_p=draw(st.sampled_from([1.0, 0.95, 0.5, 0.1])),
            min_p=draw(st.sampled_from([0.0, 0.05, 0.3])),
            seed=draw(st.one_of(st.none(), st.integers(0, 1000))),
            repetition_penalty=draw(st.sampled_from([1.0, 1.3, 0.8])),
            frequency_penalty=draw(st.sampled_from([0.0, 0.5, -1.0])),
            presence_penalty=draw(st.sampled_from([0.0, 1.5])),
            min_tokens=draw(st.sampled_from([0, 3])),
            stop_token_ids=[vocab - 1],
            logit_bias=draw(st.sampled_from([None, {0: 5.0, 3 % vocab: -100.0}])),
            allowed_token_ids=draw(st.sampled_from([None, [0, 1, 2, vocab - 1]])),
        )
        guide = None
        if draw(st.booleans()):
            density = draw(st.sampled_from([0.0, 0.01, 0.5, 1.0]))
            guide = MaskGuide(torch.rand(vocab, generator=generator) < density)
        prompt = torch.randint(0, vocab, (draw(st.integers(0, 8)),), generator=generator)
        output = torch.randint(0, vocab, (draw(st.integers(0, 6)),), generator=generator)
        requests.append(
            Request(
                f"r{i}",
                params,
                prompt.tolist(),
                output.tolist(),
                eos_token_ids=(vocab - 2,),
                guide=guide,
            )
        )
    return logits, requests


@settings(max_examples=120)
@given(requests_and_logits(), st.booleans())
def test_draws_only_what_the_definitions_allow(
    batch: tuple[torch.Tensor, list[Request]], sync_free: bool
) -> None:
    check_draws(batch, sync_free, "cpu")


@requires_cuda
@settings(max_examples=120)
@given(requests_and_logits())
def test_draws_on_cuda_only_what_the_definitions_allow(
    batch: tuple[torch.Tensor, list[Request]],
) -> None:
    check_draws(batch, None, "cuda")


def check_draws(
    batch: tuple[torch.Tensor, list[Request]], sync_free: bool | None, device: str
) -> None:
    logits, requests = batch
    raw = logits.clone()
    on_device = logits.to(device)
    sampler = make_sampler(sync_free)
    for _ in range(3):
        drawn = sampler.sample_device(on_device, requests).tolist()
        assert torch.equal(on_device.cpu(), raw), "the caller's logits must not change"
        for i, request in enumerate(requests):
            check_draw(logits[i], request, drawn[i])
            if drawn[i] >= 0:
                request.output_token_ids.append(drawn[i])


@settings(max_examples=100)
@given(
    st.lists(
        st.lists(
            st.one_of(st.sampled_from([0.0, 1.0, -math.inf, 7.5]), st.floats(-1e4, 1e4, width=32)),
            min_size=5,
            max_size=5,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_greedy_is_the_first_argmax(rows: list[list[float]]) -> None:
    logits = torch.tensor(rows)
    requests = [Request(f"g{i}", SamplingParams(temperature=0.0), []) for i in range(len(rows))]
    for sync_free in (False, True):
        drawn = make_sampler(sync_free).sample_device(logits, requests).tolist()
        for row, token in zip(rows, drawn):
            if max(row) == -math.inf:
                assert token == -1
            else:
                assert token == row.index(max(row))


def _chi_square(counts: Sequence[int], probs: Sequence[float]) -> float:
    """p-value of observed counts against probabilities (categories with p > 0 only)."""
    total = sum(counts)
    statistic = 0.0
    for c, p in zip(counts, probs):
        expected = total * p
        statistic += (c - expected) ** 2 / expected
    dof = len(counts) - 1
    q = torch.special.gammaincc(
        torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(statistic / 2, dtype=torch.float64)
    )
    return float(q)


def _expected(raw: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    scores = raw.unsqueeze(0)
    scores = TemperatureLogitsWarper(params.temperature)(None, scores)
    if params.top_k:
        scores = TopKLogitsWarper(params.top_k)(None, scores)
    if params.top_p < 1:
        scores = TopPLogitsWarper(params.top_p)(None, scores)
    if params.min_p:
        scores = MinPLogitsWarper(params.min_p)(None, scores)
    return torch.softmax(scores.squeeze(0).to(torch.float64), dim=0)


def _buckets(probs: torch.Tensor, draws: Counter[int], size: int) -> tuple[list[int], list[float]]:
    """Group tokens by id into runs of ``size`` so every category expects enough draws."""
    counts: list[int] = []
    masses: list[float] = []
    for start in range(0, probs.shape[0], size):
        mass = float(probs[start : start + size].sum())
        count = sum(draws[t] for t in range(start, min(start + size, probs.shape[0])))
        if mass > 0:
            counts.append(count)
            masses.append(mass)
        else:
            assert count == 0, f"drew from tokens {start}..{start + size} of probability zero"
    return counts, masses


def _peaked(vocab: int, support: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.full((vocab,), -math.inf)
    ids = torch.randperm(vocab, generator=generator)[:support]
    logits[ids] = torch.randn(support, generator=generator)
    return logits


CASES = [
    # Plain sampling over a row of three blocks: the block race.
    ("block race", _peaked(2 * BLOCK + 700, 40, 1), SamplingParams(), 1),
    (
        "block race, wide support",
        torch.randn(3000, generator=torch.Generator().manual_seed(2)) * 0.3,
        SamplingParams(temperature=0.8),
        150,
    ),
    # Truncated rows: the window race over survivors.
    ("top-p window", _peaked(3000, 60, 3), SamplingParams(top_p=0.8, temperature=1.3), 1),
    ("top-k + min-p window", _peaked(3000, 60, 4), SamplingParams(top_k=12, min_p=0.1), 1),
    (
        "ties",
        torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, -1.0, -1.0, -1.0]),
        SamplingParams(top_p=0.9),
        1,
    ),
    # Min-p alone: thresholded weights, block race.
    ("min-p alone", _peaked(3000, 80, 5), SamplingParams(min_p=0.2, temperature=0.7), 1),
    # More survivors than a window race takes (the limit is lowered to 64 for this case): a
    # threshold mask and the block race.
    ("long top-p", _peaked(3000, 400, 6), SamplingParams(top_p=0.95), 100),
]


# Every case on the host path, seeded and not; the truncated ones also on the sync-free path
# (the block race is the same code on both).
FREQUENCY_RUNS = [
    pytest.param(*case, seeded, False, id=f"{case[0]}{'-seeded' if seeded else ''}")
    for case in CASES
    for seeded in (False, True)
] + [
    pytest.param(*case, False, True, id=f"{case[0]}-sync-free")
    for case in CASES
    if not case[0].startswith("block race")
]


@pytest.mark.parametrize(("name", "raw", "params", "bucket", "seeded", "sync_free"), FREQUENCY_RUNS)
def test_draw_frequencies_match_the_distribution(
    name: str, raw: torch.Tensor, params: SamplingParams, bucket: int, seeded: bool, sync_free: bool
) -> None:
    check_frequencies(name, raw, params, bucket, seeded, sync_free, "cpu")


@requires_cuda
@pytest.mark.parametrize(("name", "raw", "params", "bucket"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seeded", [False, True])
def test_draw_frequencies_on_cuda(
    name: str, raw: torch.Tensor, params: SamplingParams, bucket: int, seeded: bool
) -> None:
    check_frequencies(name, raw, params, bucket, seeded, None, "cuda")


def check_frequencies(
    name: str,
    raw: torch.Tensor,
    params: SamplingParams,
    bucket: int,
    seeded: bool,
    sync_free: bool | None,
    device: str,
) -> None:
    rows, steps = 2000, 10
    torch.manual_seed(12345)
    logits = raw.unsqueeze(0).expand(rows, -1).contiguous().to(device)
    sampler = make_sampler(sync_free)
    requests = [
        Request(f"c{i}", SamplingParams(**{**_fields(params), "seed": i if seeded else None}), [])
        for i in range(rows)
    ]
    draws: Counter[int] = Counter()
    limit = 64 if name == "long top-p" else sampler_module.WINDOW_DRAW_LIMIT
    with patched(sampler_module, "WINDOW_DRAW_LIMIT", limit):
        for _ in range(steps):
            draws.update(sampler.sample_device(logits, requests).tolist())
    probs = _expected(raw, params)
    counts, masses = _buckets(probs, draws, bucket)
    assert sum(counts) == rows * steps
    assert _chi_square(counts, masses) > SIGNIFICANCE, name


def _fields(params: SamplingParams) -> dict[str, object]:
    return {
        "temperature": params.temperature,
        "top_k": params.top_k,
        "top_p": params.top_p,
        "min_p": params.min_p,
    }


def test_chi_square_detects_a_wrong_distribution() -> None:
    # The statistic itself: draws from a distribution 5% off on one token fail at 20,000 draws.
    generator = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    skewed = torch.tensor([0.45, 0.35, 0.2], dtype=torch.float64)
    drawn = torch.multinomial(skewed, 20_000, replacement=True, generator=generator)
    counts = [int((drawn == i).sum()) for i in range(3)]
    assert _chi_square(counts, probs.tolist()) < SIGNIFICANCE
    fair = torch.multinomial(probs, 20_000, replacement=True, generator=generator)
    assert _chi_square([int((fair == i).sum()) for i in range(3)], probs.tolist()) > SIGNIFICANCE


def _bigram_logits(histories: Sequence[Sequence[int]], vocab: int, ties: bool) -> torch.Tensor:
    """A deterministic toy model that is exactly batch-invariant (a table lookup)."""
    table = torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(99)) * 2
    position = torch.randn(16, vocab, generator=torch.Generator().manual_seed(98))
    rows = torch.stack([table[h[-1] if h else 0] + position[len(h) % 16] for h in histories])
    # Coarse scores tie often, so windows of different sizes may list ties in different orders.
    return rows.mul(2).round() if ties else rows


SEEDED = [
    SamplingParams(seed=7, temperature=0.9),
    SamplingParams(seed=7, top_p=0.7),
    SamplingParams(seed=8, top_k=5, min_p=0.02),
    SamplingParams(seed=9, min_p=0.1, frequency_penalty=0.4, repetition_penalty=1.2),
]


@pytest.mark.parametrize(
    ("vocab", "ties", "sync_free"),
    [(300, False, False), (300, True, False), (2 * BLOCK + 11, False, False), (300, True, True)],
)
@pytest.mark.parametrize("target", SEEDED, ids=["plain", "top-p", "top-k+min-p", "min-p+penalties"])
def test_seeded_request_draws_the_same_alone_or_in_a_batch(
    target: SamplingParams, vocab: int, ties: bool, sync_free: bool
) -> None:
    steps = 12

    def run(batch_sizes: Sequence[int], seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        sampler = make_sampler(sync_free)
        mine = Request("mine", target, [1, 2, 3])
        for step in range(steps):
            others = [
                Request(
                    f"o{seed}-{step}-{j}",
                    SamplingParams(
                        seed=int(rng.integers(100)) if rng.random() < 0.5 else None,
                        top_k=int(rng.choice([0, 1, 50, 400])),
                        top_p=float(rng.choice([1.0, 0.5, 0.99])),
                        temperature=float(rng.choice([0.0, 1.0, 0.6])),
                    ),
                    [],
                    rng.integers(0, vocab, int(rng.integers(0, 4))).tolist(),
                )
                for j in range(batch_sizes[step])
            ]
            batch = others[:]
            batch.insert(int(rng.integers(0, len(others) + 1)), mine)
            histories = [r.prompt_token_ids + r.output_token_ids for r in batch]
            logits = _bigram_logits(histories, vocab, ties)
            drawn = sampler.sample_device(logits, batch).tolist()
            mine.output_token_ids.append(drawn[batch.index(mine)])
        return mine.output_token_ids

    alone = run([0] * steps, 0)
    assert len(set(alone)) > 1
    for seed in (1, 2):
        sizes = np.random.default_rng(seed).integers(0, 9, steps).tolist()
        assert run(sizes, seed) == alone


def test_seeded_requests_differ_by_seed_and_use_given_generators() -> None:
    logits = torch.zeros(3, 500)
    params = [SamplingParams(seed=1), SamplingParams(seed=2), SamplingParams(seed=1)]
    requests = [Request(f"s{i}", p, []) for i, p in enumerate(params)]
    drawn = [Sampler().sample_device(logits, requests).tolist() for _ in range(2)]
    assert drawn[0] == drawn[1] and drawn[0][0] == drawn[0][2] != drawn[0][1]
    given_generators = {"s1": torch.Generator().manual_seed(1)}
    again = Sampler().sample_device(logits, requests, given_generators).tolist()
    assert again[1] == drawn[0][0]


@pytest.mark.parametrize("count", [0, 1, 5])
def test_logprobs_come_from_the_raw_logits(count: int) -> None:
    generator = torch.Generator().manual_seed(4)
    logits = torch.randn(4, 300, generator=generator) * 3
    mask = torch.rand(300, generator=generator) < 0.2
    requests = [
        Request("a", SamplingParams(logprobs=count, temperature=0.0, logit_bias={5: 30.0}), []),
        Request("b", SamplingParams(logprobs=count, top_p=0.9, repetition_penalty=2.0), [1, 2]),
        Request("c", SamplingParams(), []),
        Request("d", SamplingParams(logprobs=count), [], guide=MaskGuide(mask)),
    ]
    tokens, logprobs = Sampler()(logits, requests)
    assert logprobs is not None and logprobs[2] is None
    expected = torch.log_softmax(logits.to(torch.float64), dim=1)
    for i in (0, 1, 3):
        entries = logprobs[i]
        assert entries is not None and len(entries) == 1
        entry = entries[0]
        token = tokens[i][0]
        assert entry["token_id"] == token
        assert entry["logprob"] == pytest.approx(float(expected[i, token]), abs=1e-5)
        assert entry["rank"] == 1 + int((expected[i] > expected[i, token] + 1e-6).sum())
        top = torch.topk(expected[i], count).indices.tolist() if count else []
        assert list(entry["top"]) == top
        for token_id, value in entry["top"].items():
            assert value == pytest.approx(float(expected[i, token_id]), abs=1e-5)
    assert tokens[0] == [5]  # the bias decided the greedy draw, not the logprobs
    assert Sampler()(logits[2:3], requests[2:3])[1] is None


def test_penalty_state_follows_the_outputs() -> None:
    # Greedy rows expose the penalised logits through their argmax, step after step, while the
    # engine appends tokens, forces extra ones and rolls back.
    vocab = 40
    generator = torch.Generator().manual_seed(5)
    params = SamplingParams(
        temperature=0.0, repetition_penalty=1.4, frequency_penalty=0.7, presence_penalty=0.3
    )
    requests = [Request(f"p{i}", params, [1, 2, 3, i]) for i in range(3)]
    sampler = Sampler()
    for step in range(30):
        logits = torch.randn(3, vocab, generator=generator)
        drawn = sampler.sample_device(logits, requests).tolist()
        for i, request in enumerate(requests):
            assert drawn[i] == int(processed_oracle(logits[i], request).argmax())
            request.output_token_ids.append(drawn[i])
        if step % 7 == 3:
            requests[0].output_token_ids.extend([7, 7, 8])  # forced tokens
        if step % 9 == 4:
            del requests[1].output_token_ids[-3:]  # rollback
        if step == 15:
            sampler.release("p2")


def test_penalties_equal_the_vllm_formula_and_transformers() -> None:
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    from guided.sampling.penalties import PenaltyState

    vocab = 64
    generator = torch.Generator().manual_seed(11)
    state = PenaltyState(torch.device("cpu"))
    histories = [
        ([1, 2, 2, 9], [4, 4, 4, 5, 1]),
        ([], [0, 63, 63]),
        ([5, 6, 7] * 40, []),
        ([], []),
    ]
    slots = [state.acquire() for _ in histories]
    for slot, (prompt, output) in zip(slots, histories):
        state.reset(slot, prompt, output, vocab)
    # Grow past the initial capacity with device-side updates.
    extra = torch.randint(0, vocab, (150, len(slots)), generator=generator)
    for tokens in extra:
        state.record(torch.tensor(slots), tokens, slots)
    rep = [1.3, 1.0, 0.7, 2.0]
    freq = [0.5, -1.2, 0.0, 2.0]
    pres = [0.25, 1.0, -0.5, 0.0]
    logits = torch.randn(len(slots), vocab, generator=generator) * 5
    flat = torch.cat([logits.flatten(), torch.zeros(1)])
    state.apply(flat, list(range(len(slots))), slots, vocab, rep, freq, pres)
    got = flat[:-1].view(len(slots), vocab)
    for i, (prompt, output) in enumerate(histories):
        outputs = output + extra[:, i].tolist()
        # vLLM: repetition over prompt and output tokens, then
        # logit -= frequency * count; logit -= presence * (count > 0)
        want = RepetitionPenaltyLogitsProcessor(rep[i])(
            torch.tensor([prompt + outputs]), logits[i : i + 1].clone()
        )[0]
        counts = torch.bincount(torch.tensor(outputs, dtype=torch.long), minlength=vocab)
        want = want - torch.tensor(freq[i]) * counts.to(torch.float32)
        want = want - torch.tensor(pres[i]) * (counts > 0).to(torch.float32)
        assert torch.equal(got[i], want)


@pytest.mark.parametrize("sync_free", [False, True])
def test_processors(sync_free: bool) -> None:
    vocab = 30
    logits = torch.zeros(4, vocab)
    logits[:, 5] = 10.0  # the model's favourite is token 5, which is also EOS and a stop id
    requests = [
        Request("min", SamplingParams(temperature=0.0, min_tokens=2), [], [], eos_token_ids=(5,)),
        Request("stop", SamplingParams(temperature=0.0, min_tokens=1, stop_token_ids=[5]), []),
        Request(
            "ignore", SamplingParams(temperature=0.0, min_tokens=3, ignore_eos=True), [], [], (5,)
        ),
        Request("allowed", SamplingParams(allowed_token_ids=[17, 29]), []),
    ]
    sampler = make_sampler(sync_free)
    drawn = sampler.sample_device(logits, requests).tolist()
    assert drawn[0] != 5 and drawn[1] != 5 and drawn[2] == 5 and drawn[3] in (17, 29)
    requests[0].output_token_ids.extend([0, 0])
    assert sampler.sample_device(logits, requests).tolist()[0] == 5


def test_settings_checked_against_the_batch() -> None:
    logits = torch.zeros(1, 10)
    with pytest.raises(ValueError, match="logit_bias"):
        Sampler().sample_device(logits, [Request("a", SamplingParams(logit_bias={10: 1}), [])])
    with pytest.raises(ValueError, match="allowed_token_ids"):
        Sampler().sample_device(logits, [Request("a", SamplingParams(allowed_token_ids=[12]), [])])
    with pytest.raises(ValueError, match="max_logprobs"):
        Sampler(max_logprobs=3).sample_device(
            logits, [Request("a", SamplingParams(logprobs=4), [])]
        )
    with pytest.raises(ValueError, match="requests"):
        Sampler().sample_device(logits, [])
    twice = [Request("a", SamplingParams(), []), Request("a", SamplingParams(), [])]
    with pytest.raises(ValueError, match="twice"):
        Sampler().sample_device(torch.zeros(2, 10), twice)
    with pytest.raises(ValueError, match="2-D"):
        Sampler().sample_device(logits[0], [Request("a", SamplingParams(), [])])
    with pytest.raises(ValueError, match="max_logprobs"):
        Sampler(max_logprobs=-1)


@pytest.mark.parametrize("sync_free", [False, True])
def test_bad_logits_never_leak_through_a_mask(sync_free: bool) -> None:
    logits = torch.full((4, 50), math.nan)
    logits[1, 3] = math.inf
    logits[2, 7] = 1.0
    logits[3] = math.inf
    mask = torch.zeros(50, dtype=torch.bool)
    mask[[10, 20]] = True
    requests = [
        Request("nan", SamplingParams(), []),
        Request("inf", SamplingParams(), []),
        Request("guided", SamplingParams(), [], guide=MaskGuide(mask)),
        Request("all-inf", SamplingParams(top_p=0.5), [], guide=MaskGuide(mask)),
    ]
    drawn = make_sampler(sync_free).sample_device(logits, requests).tolist()
    assert drawn[0] == -1 and drawn[1] == 3 and drawn[2] == -1 and drawn[3] in (10, 20)


def test_guides_are_advanced_and_finished_with_eos() -> None:
    logits = torch.zeros(3, WIDTH)
    logits[:, EOS] = -5.0  # the model never wants to stop
    guides = [ToyGuide("[ab]{2}"), ToyGuide("x"), ToyGuide("[0-9]+")]
    requests = [
        Request(f"t{i}", SamplingParams(seed=i), [], [], eos_token_ids=(EOS,), guide=g)
        for i, g in enumerate(guides)
    ]
    requests[2] = Request("t2", SamplingParams(seed=2, min_tokens=5), [], [], (EOS,), guides[2])
    sampler = Sampler()
    for step in range(4):
        tokens, _ = sampler(logits, requests)
        if step == 0:
            # "x" is a final state: the request ends in the same step, without another pass.
            assert tokens[1] == [VOCAB.index("x"), EOS]
        for request, row in zip(requests, tokens):
            request.output_token_ids.extend(row)
    texts = ["".join(VOCAB[t] or "" for t in r.output_token_ids if t != EOS) for r in requests]
    assert requests[1].output_token_ids == [VOCAB.index("x"), EOS]
    assert guides[1].is_terminated()
    assert len(texts[0]) == 2 and set(texts[0]) <= {"a", "b"}
    assert requests[0].output_token_ids[-1] == EOS and guides[0].is_terminated()
    assert texts[2].isdigit() and EOS not in requests[2].output_token_ids
    # A terminated guide allows nothing: the sampler draws nothing for it.
    tokens, _ = sampler(logits, requests)
    assert tokens[0] == [] and tokens[1] == []
