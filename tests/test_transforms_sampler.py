"""Transformers' generation-config settings in SamplingParams and the Sampler.

The settings are validated like the others (a bad value raises ``ValueError`` naming its field).
In the Sampler, greedy rows make the processors checkable exactly: the token drawn must be the
argmax of the row's logits after Transformers' own processors, chained as ``generate`` chains
them, on that row's history. Sampled rows with the extra warpers must only draw tokens that
Transformers' warper chain keeps, and do draw the likely ones.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation import logits_process as L

from guided.sampling import Request, Sampler, SamplingParams

BAD = [
    ("typical_p", 0.0),
    ("typical_p", 1.5),
    ("epsilon_cutoff", 1.0),
    ("epsilon_cutoff", -0.1),
    ("eta_cutoff", 1.0),
    ("eta_cutoff", "x"),
    ("top_h", 0.0),
    ("top_h", 1.2),
    ("min_length", -1),
    ("min_length", 2.0),
    ("no_repeat_ngram_size", -2),
    ("encoder_no_repeat_ngram_size", True),
    ("encoder_repetition_penalty", 0.0),
    ("encoder_repetition_penalty", math.nan),
    ("bad_words_ids", []),
    ("bad_words_ids", [[]]),
    ("bad_words_ids", [[1, -1]]),
    ("bad_words_ids", "abc"),
    ("sequence_bias", {(): 1.0}),
    ("sequence_bias", {(1,): math.nan}),
    ("sequence_bias", [[[1], 1.0, 2.0]]),
    ("sequence_bias", 5),
    ("suppress_tokens", [-3]),
    ("begin_suppress_tokens", "ab"),
    ("forced_bos_token_id", -1),
    ("forced_bos_token_id", 1.5),
    ("forced_eos_token_id", []),
    ("forced_eos_token_id", [1, -2]),
    ("exponential_decay_length_penalty", (1, math.inf)),
    ("exponential_decay_length_penalty", (-1, 1.1)),
    ("exponential_decay_length_penalty", 3),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_bad_setting_raises_naming_the_field(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        SamplingParams(**{name: value})  # type: ignore[arg-type]


def test_settings_are_normalised() -> None:
    params = SamplingParams(
        sequence_bias={(1, 2): 0.5, (3,): -1},
        bad_words_ids=[[4], [5, 6]],
        suppress_tokens=[7],
        forced_eos_token_id=9,
        exponential_decay_length_penalty=(2, 1),
        typical_p=1,
    )
    assert params.sequence_bias == (((1, 2), 0.5), ((3,), -1.0))
    assert params.bad_words_ids == ((4,), (5, 6))
    assert params.suppress_tokens == (7,)
    assert params.forced_eos_token_id == (9,)
    assert params.exponential_decay_length_penalty == (2, 1.0)
    assert params.typical_p == 1.0 and isinstance(params.typical_p, float)
    # Transformers' list form; a sequence given twice keeps its last bias.
    listed = SamplingParams(sequence_bias=[[[1, 2], 0.5], [[1, 2], 2.0]])
    assert listed.sequence_bias == (((1, 2), 2.0),)
    # Normalised values pass validation again (child() rebuilds the settings).
    assert params.child(0) == params


# ----------------------------------------------------------------------------------- processors

VOCAB = 24
EOS = (3, 7)


@st.composite
def processor_settings(draw: st.DrawFn) -> dict[str, Any]:
    ids = st.integers(0, VOCAB - 1)
    chosen: dict[str, Any] = {}
    options: dict[str, st.SearchStrategy[Any]] = {
        "no_repeat_ngram_size": st.integers(1, 3),
        "encoder_no_repeat_ngram_size": st.integers(1, 3),
        "encoder_repetition_penalty": st.floats(0.3, 3.0),
        "bad_words_ids": st.lists(st.lists(ids, min_size=1, max_size=3), min_size=1, max_size=3),
        "sequence_bias": st.dictionaries(
            st.lists(ids, min_size=1, max_size=3).map(tuple),
            st.integers(-20, 20).map(lambda v: v / 4),
            min_size=1,
            max_size=3,
        ),
        "min_length": st.integers(1, 12),
        "forced_bos_token_id": ids,
        "forced_eos_token_id": st.lists(ids, min_size=1, max_size=2),
        "exponential_decay_length_penalty": st.tuples(st.integers(0, 3), st.floats(0.5, 3.0)),
        "suppress_tokens": st.lists(ids, min_size=1, max_size=4),
        "begin_suppress_tokens": st.lists(ids, min_size=1, max_size=4),
    }
    for name in draw(st.sets(st.sampled_from(sorted(options)), max_size=4)):
        chosen[name] = draw(options[name])
    return chosen


def transformers_processors(
    settings_: dict[str, Any], prompt: list[int], max_tokens: int
) -> L.LogitsProcessorList:
    """What Transformers' generate() chains for these settings (decoder-only, EOS = EOS)."""
    s = settings_
    prompt_ids = torch.tensor([prompt], dtype=torch.long).reshape(1, -1)
    out: list[Any] = []
    if "sequence_bias" in s:
        out.append(
            L.SequenceBiasLogitsProcessor({k: float(v) for k, v in s["sequence_bias"].items()})
        )
    if "encoder_repetition_penalty" in s:
        out.append(
            L.EncoderRepetitionPenaltyLogitsProcessor(s["encoder_repetition_penalty"], prompt_ids)
        )
    if "no_repeat_ngram_size" in s:
        out.append(L.NoRepeatNGramLogitsProcessor(s["no_repeat_ngram_size"]))
    if "encoder_no_repeat_ngram_size" in s:
        out.append(
            L.EncoderNoRepeatNGramLogitsProcessor(s["encoder_no_repeat_ngram_size"], prompt_ids)
        )
    if "bad_words_ids" in s:
        out.append(L.NoBadWordsLogitsProcessor(s["bad_words_ids"], list(EOS)))
    if "min_length" in s:
        out.append(L.MinLengthLogitsProcessor(s["min_length"], list(EOS)))
    if "forced_bos_token_id" in s:
        out.append(L.ForcedBOSTokenLogitsProcessor(s["forced_bos_token_id"]))
    if "forced_eos_token_id" in s:
        out.append(
            L.ForcedEOSTokenLogitsProcessor(len(prompt) + max_tokens, s["forced_eos_token_id"])
        )
    if "exponential_decay_length_penalty" in s:
        out.append(
            L.ExponentialDecayLengthPenalty(
                s["exponential_decay_length_penalty"], list(EOS), len(prompt)
            )
        )
    if "suppress_tokens" in s:
        out.append(L.SuppressTokensLogitsProcessor(s["suppress_tokens"]))
    if "begin_suppress_tokens" in s:
        begin = len(prompt) + (1 if "forced_bos_token_id" in s and len(prompt) <= 1 else 0)
        out.append(L.SuppressTokensAtBeginLogitsProcessor(s["begin_suppress_tokens"], begin))
    return L.LogitsProcessorList(out)


@settings(max_examples=200)  # each example runs the Sampler and Transformers on up to 5 rows
@given(data=st.data())
def test_greedy_rows_take_the_argmax_after_transformers_processors(data: st.DataObject) -> None:
    rows = data.draw(st.integers(1, 5))
    logits = torch.tensor(
        data.draw(
            st.lists(
                st.lists(st.floats(-8, 8, width=32), min_size=VOCAB, max_size=VOCAB),
                min_size=rows,
                max_size=rows,
            )
        )
    )
    requests = []
    chosen = []
    for i in range(rows):
        s = data.draw(processor_settings())
        chosen.append(s)
        prompt = data.draw(st.lists(st.integers(0, 6), max_size=6))
        output = data.draw(st.lists(st.integers(0, 6), max_size=5))
        greedy = data.draw(st.booleans()) or i == 0
        params = SamplingParams(
            temperature=0.0 if greedy else 1.0, max_tokens=len(output) + 3, seed=i, **s
        )
        requests.append(Request(f"r{i}", params, prompt, output, eos_token_ids=EOS))
    drawn = Sampler().sample_device(logits, requests).tolist()
    for i, request in enumerate(requests):
        processors = transformers_processors(
            chosen[i], list(request.prompt_token_ids), request.params.max_tokens or 0
        )
        history = torch.tensor(
            [list(request.prompt_token_ids) + request.output_token_ids], dtype=torch.long
        ).reshape(1, -1)
        expected = processors(history, logits[i : i + 1].clone())[0]
        if not bool((expected > -math.inf).any()):
            assert drawn[i] == -1
        elif request.params.greedy:
            assert drawn[i] == int(torch.argmax(expected)), (chosen[i], request)
        else:
            assert expected[drawn[i]] > -math.inf


def test_forced_eos_ends_at_max_tokens() -> None:
    params = SamplingParams(temperature=0.0, max_tokens=3, forced_eos_token_id=[9, 8])
    request = Request("r", params, [1, 2], [], eos_token_ids=(9,))
    sampler = Sampler()
    logits = torch.zeros(1, 12)
    logits[0, 4] = 5.0
    logits[0, 8] = 1.0
    for _ in range(3):
        tokens, _ = sampler(logits, [request])
        request.output_token_ids.extend(tokens[0])
    assert request.output_token_ids == [4, 4, 8]


# ----------------------------------------------------------------------------------- warpers


def test_warped_rows_draw_only_what_transformers_keeps() -> None:
    generator = torch.Generator().manual_seed(11)
    vocab = 40
    # Distinct, well-separated scores: no ties, no set boundary within rounding.
    base = torch.linspace(4.0, -4.0, vocab)
    logits = torch.stack([base[torch.randperm(vocab, generator=generator)] for _ in range(5)])
    settings_ = [
        {"typical_p": 0.6, "temperature": 0.8},
        {"epsilon_cutoff": 0.02, "top_k": 10},
        {"eta_cutoff": 0.05, "top_p": 0.95},
        {"top_h": 0.5},
        {"typical_p": 0.9, "min_p": 0.1, "epsilon_cutoff": 0.01},
    ]
    kept = []
    for i, s in enumerate(settings_):
        chain: list[Any] = []
        if "temperature" in s:
            chain.append(L.TemperatureLogitsWarper(s["temperature"]))
        if "top_h" in s:
            chain.append(L.TopHLogitsWarper(s["top_h"]))
        if "top_k" in s:
            chain.append(L.TopKLogitsWarper(s["top_k"]))
        if "top_p" in s:
            chain.append(L.TopPLogitsWarper(s["top_p"]))
        if "min_p" in s:
            chain.append(L.MinPLogitsWarper(s["min_p"]))
        if "typical_p" in s:
            chain.append(L.TypicalLogitsWarper(s["typical_p"]))
        if "epsilon_cutoff" in s:
            chain.append(L.EpsilonLogitsWarper(s["epsilon_cutoff"]))
        if "eta_cutoff" in s:
            chain.append(L.EtaLogitsWarper(s["eta_cutoff"]))
        warped = L.LogitsProcessorList(chain)(
            torch.zeros((1, 0), dtype=torch.long), logits[i : i + 1].clone()
        )[0]
        kept.append(torch.softmax(warped, dim=0))
    sampler = Sampler()
    counts = [Counter[int]() for _ in settings_]
    for step in range(150):
        requests = [
            Request(f"r{i}-{step}", SamplingParams(seed=step * 10 + i, **s), [])
            for i, s in enumerate(settings_)
        ]
        for i, token in enumerate(sampler.sample_device(logits, requests).tolist()):
            counts[i][token] += 1
    for i, probs in enumerate(kept):
        drawn = set(counts[i])
        allowed = set((probs > 0).nonzero().squeeze(1).tolist())
        assert drawn <= allowed, (settings_[i], drawn - allowed)
        # Every token worth 8% or more was drawn (missing one in 150 draws: below 4e-6).
        assert set((probs > 0.08).nonzero().squeeze(1).tolist()) <= drawn
