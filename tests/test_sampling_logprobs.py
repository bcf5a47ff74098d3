"""Prompt log-probabilities against ``log_softmax`` of the model's logits over the prompt."""

from __future__ import annotations

import pytest
import torch

from guided.sampling import prompt_logprobs, token_logprobs


@pytest.mark.parametrize("extra_row", [True, False])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_prompt_logprobs(extra_row: bool, n: int) -> None:
    generator = torch.Generator().manual_seed(1)
    prompt = [5, 0, 9, 9, 3]
    logits = torch.randn(len(prompt) if extra_row else len(prompt) - 1, 12, generator=generator)
    entries = prompt_logprobs(logits, prompt, n)
    assert len(entries) == len(prompt) and entries[0] is None
    expected = torch.log_softmax(logits.to(torch.float64), dim=1)
    for position in range(1, len(prompt)):
        entry = entries[position]
        assert entry is not None
        token = prompt[position]
        row = expected[position - 1]
        assert entry["token_id"] == token
        assert entry["logprob"] == pytest.approx(float(row[token]), abs=1e-5)
        assert entry["rank"] == 1 + int((row > row[token]).sum())
        assert list(entry["top"]) == torch.topk(row, n).indices.tolist()


def test_prompt_logprobs_edges() -> None:
    assert prompt_logprobs(torch.zeros(0, 4), [], 2) == []
    assert prompt_logprobs(torch.zeros(1, 4), [2], 2) == [None]
    with pytest.raises(ValueError, match="out of range"):
        prompt_logprobs(torch.zeros(2, 4), [1, 4], 1)
    with pytest.raises(ValueError, match="logits must be"):
        prompt_logprobs(torch.zeros(5, 4), [1, 2], 1)
    with pytest.raises(ValueError, match="n must be"):
        prompt_logprobs(torch.zeros(1, 4), [1, 2], -1)


def test_token_logprobs_skip_rows_without_a_token() -> None:
    logits = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    entries = token_logprobs(logits, torch.tensor([-1, 0]), [1, 1])
    assert entries[0] is None
    assert entries[1] is not None and entries[1]["rank"] == 1
