"""End to end: a random tiny torch model decodes a mixed batch, guided rows included.

Every guided request's output must be accepted by its guide (the guide raises on a disallowed
token) and, once it ended with EOS, fully match its pattern under Python's ``re``, an engine
independent of the ``regex`` partial matching the toy guide uses. Free rows run beside them with
random settings, so the grammar rows share every batch with penalties, filters and seeds.
"""

from __future__ import annotations

import re

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from toy_guide import EOS, VOCAB, WIDTH, ToyGuide

from guided.sampling import Request, Sampler, SamplingParams

PATTERNS = [
    r"-?[0-9]{1,4}(\.[0-9]{1,2})?",
    r"(ab|ba)+x?",
    r"[ab]{2,5}",
    r"[0-9]+ [ab]+\n",
    r"a\.b|3\.14|12",
]


class TinyModel(torch.nn.Module):
    """Embeds the history, averages it with a recency weight, projects to the logits."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(WIDTH, 16)
        self.mix = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, WIDTH)

    @torch.no_grad()
    def forward(self, histories: list[list[int]]) -> torch.Tensor:
        states = []
        for history in histories:
            ids = torch.tensor(history or [0])
            weights = torch.linspace(0.5, 1.5, ids.shape[0]).unsqueeze(1)
            states.append((self.embed(ids) * weights).mean(0))
        hidden = torch.tanh(self.mix(torch.stack(states)))
        return self.out(hidden) * 3


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.data())
def test_guided_rows_always_produce_accepted_output(seed: int, data: st.DataObject) -> None:
    model = TinyModel(seed)
    sampler = Sampler()
    rows = data.draw(st.integers(1, 6))
    requests: list[Request] = []
    for i in range(rows):
        guided = data.draw(st.booleans())
        params = SamplingParams(
            max_tokens=12,
            temperature=data.draw(st.sampled_from([0.0, 0.7, 1.0, 1.5])),
            top_k=data.draw(st.sampled_from([0, 2, 10])),
            top_p=data.draw(st.sampled_from([1.0, 0.9, 0.5])),
            min_p=data.draw(st.sampled_from([0.0, 0.1])),
            seed=data.draw(st.one_of(st.none(), st.integers(0, 99))),
            repetition_penalty=data.draw(st.sampled_from([1.0, 1.3])),
            frequency_penalty=data.draw(st.sampled_from([0.0, 0.8])),
            min_tokens=data.draw(st.sampled_from([0, 2])),
            logprobs=data.draw(st.sampled_from([None, 2])),
        )
        guide = ToyGuide(data.draw(st.sampled_from(PATTERNS))) if guided else None
        requests.append(Request(f"e{i}", params, [1, 2], eos_token_ids=(EOS,), guide=guide))
    active = list(requests)
    for _ in range(12):
        if not active:
            break
        logits = model([r.prompt_token_ids + r.output_token_ids for r in active])
        tokens, _ = sampler(logits, active)
        still = []
        for request, row in zip(active, tokens):
            request.output_token_ids.extend(row)
            done = not row or EOS in row or len(request.output_token_ids) >= 12
            if done:
                sampler.release(request.request_id)
            else:
                still.append(request)
        active = still
    for request in requests:
        guide = request.guide
        if not isinstance(guide, ToyGuide):
            continue
        pieces = [VOCAB[t] for t in request.output_token_ids if t != EOS]
        assert all(p is not None for p in pieces)
        text = "".join(p for p in pieces if p is not None)
        assert text == guide.text
        if guide.is_terminated():
            assert request.output_token_ids[-1] == EOS
            assert re.fullmatch(guide.pattern.pattern, text), (guide.pattern.pattern, text)
        assert len(request.output_token_ids) <= 13  # a final state may append EOS to the 12th
