"""Beam search against brute-force enumeration and greedy decoding on tiny vocabularies.

A beam wider than the number of possible sequences keeps every one of them, so its result must be
the exhaustive ranking of all sequences (ended by EOS, or cut at ``max_tokens``) by
``sum(logprobs) / length ** length_penalty``. A beam of width one must be greedy decoding.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from guided.sampling import beam_search


def markov_model(vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token log-probabilities depending on the last token and on the length."""
    generator = torch.Generator().manual_seed(seed)
    by_last = torch.randn(vocab + 1, vocab, generator=generator) * 2
    by_length = torch.randn(8, vocab, generator=generator)
    return by_last, by_length


LogprobsFn = Callable[[list[list[int]]], torch.Tensor]


def logprobs_of(model: tuple[torch.Tensor, torch.Tensor], prompt_length: int) -> LogprobsFn:
    by_last, by_length = model

    def fn(sequences: list[list[int]]) -> torch.Tensor:
        rows = []
        for sequence in sequences:
            last = sequence[-1] if sequence else by_last.shape[0] - 1
            generated = len(sequence) - prompt_length
            rows.append(torch.log_softmax(by_last[last] + by_length[generated % 8], dim=0))
        return torch.stack(rows)

    return fn


def enumerate_all(
    fn: LogprobsFn, prompt: list[int], vocab: int, max_tokens: int, eos: int | None, penalty: float
) -> list[tuple[float, tuple[int, ...]]]:
    results = []
    for length in range(1, max_tokens + 1):
        for tokens in itertools.product(range(vocab), repeat=length):
            if eos is not None and eos in tokens[:-1]:
                continue
            if length < max_tokens and (eos is None or tokens[-1] != eos):
                continue
            total = 0.0
            for i, token in enumerate(tokens):
                total += float(fn([prompt + list(tokens[:i])])[0, token].to(torch.float64))
            results.append((total / length**penalty, tokens))
    results.sort(key=lambda r: -r[0])
    return results


@settings(max_examples=30, deadline=None)
@given(
    st.integers(2, 3),
    st.integers(1, 3),
    st.integers(0, 1000),
    st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    st.booleans(),
)
def test_wide_beam_equals_enumeration(
    vocab: int, max_tokens: int, seed: int, penalty: float, with_eos: bool
) -> None:
    prompt = [0, 1]
    fn = logprobs_of(markov_model(vocab, seed), len(prompt))
    eos = vocab - 1 if with_eos else None
    expected = enumerate_all(fn, prompt, vocab, max_tokens, eos, penalty)
    width = len(expected) + 1
    got = beam_search(fn, prompt, width, max_tokens, eos_token_id=eos, length_penalty=penalty)
    assert len(got) == len(expected)
    for beam, (score, tokens) in zip(got, expected):
        assert beam.score == pytest.approx(score, rel=1e-9, abs=1e-9)
        assert beam.finished == (eos is not None and tokens[-1] == eos)
    assert sorted(b.tokens for b in got) == sorted(t for _, t in expected)
    # Best first, and the scores are those of the listed tokens.
    for beam in got:
        assert beam.score == pytest.approx(beam.logprob / len(beam.tokens) ** penalty)


@given(st.integers(2, 6), st.integers(1, 6), st.integers(0, 1000))
def test_width_one_is_greedy(vocab: int, max_tokens: int, seed: int) -> None:
    prompt = [1]
    fn = logprobs_of(markov_model(vocab, seed), len(prompt))
    eos = 0
    tokens: list[int] = []
    total = 0.0
    for _ in range(max_tokens):
        row = fn([prompt + tokens])[0].to(torch.float64)
        token = int(row.argmax())
        tokens.append(token)
        total += float(row[token])
        if token == eos:
            break
    (beam,) = beam_search(fn, prompt, 1, max_tokens, eos_token_id=eos)
    assert list(beam.tokens) == tokens
    assert beam.logprob == pytest.approx(total)
    assert beam.finished == (tokens[-1] == eos)


def test_stops_when_enough_beams_finished() -> None:
    calls = []

    def fn(sequences: list[list[int]]) -> torch.Tensor:
        calls.append(len(sequences))
        # EOS (0) is always the likeliest, so two beams finish at the first step.
        return torch.log_softmax(torch.tensor([[3.0, 2.0, 1.0]] * len(sequences)), dim=1)

    beams = beam_search(fn, [], 2, 10, eos_token_id=0)
    assert calls == [1, 2]
    assert [b.tokens for b in beams] == [(0,), (1, 0)]
    assert all(b.finished for b in beams)


def test_banned_tokens_never_enter_a_beam() -> None:
    # A constraint leaves fewer allowed tokens than the beam is wide: the beam narrows, it never
    # takes a token whose log-probability is -inf.
    def fn(sequences: list[list[int]]) -> torch.Tensor:
        scores = torch.full((len(sequences), 6), -math.inf)
        for row, sequence in enumerate(sequences):
            allowed = [1, 2] if not sequence else [0]  # 0 is EOS
            scores[row, allowed] = torch.log_softmax(torch.ones(len(allowed)), dim=0)
        return scores

    beams = beam_search(fn, [], 4, 5, eos_token_id=0)
    assert sorted(b.tokens for b in beams) == [(1, 0), (2, 0)]


def test_bad_arguments() -> None:
    fn = logprobs_of(markov_model(3, 0), 0)
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(fn, [], 0, 3)
    with pytest.raises(ValueError, match="max_tokens"):
        beam_search(fn, [], 1, 0)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(fn, [], 1, 1, length_penalty=math.nan)
    with pytest.raises(ValueError, match="logprobs_fn"):
        beam_search(lambda seqs: torch.zeros(3), [], 1, 1)
