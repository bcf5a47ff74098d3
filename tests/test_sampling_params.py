"""SamplingParams: every bad setting raises ValueError naming its field; the derived properties."""

from __future__ import annotations

import math

import pytest

from guided.sampling import Request, SamplingParams

BAD = [
    ("n", 0),
    ("n", 1.5),
    ("n", True),
    ("max_tokens", 0),
    ("max_tokens", -3),
    ("max_tokens", "16"),
    ("temperature", -0.1),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("temperature", "hot"),
    ("temperature", None),
    ("top_p", 0.0),
    ("top_p", 1.01),
    ("top_p", -0.5),
    ("top_p", math.nan),
    ("top_k", -1),
    ("top_k", 2.0),
    ("top_k", False),
    ("min_p", -0.01),
    ("min_p", 1.5),
    ("seed", 1.0),
    ("seed", 2**64),
    ("seed", -(2**63) - 1),
    ("stop", ""),
    ("stop", ["ok", ""]),
    ("stop", [1]),
    ("stop", 5),
    ("stop_token_ids", [-1]),
    ("stop_token_ids", "abc"),
    ("stop_token_ids", [1.0]),
    ("include_stop_str_in_output", 1),
    ("ignore_eos", "no"),
    ("skip_special_tokens", None),
    ("min_tokens", -1),
    ("min_tokens", 17),
    ("presence_penalty", 2.5),
    ("presence_penalty", -2.01),
    ("frequency_penalty", 3),
    ("frequency_penalty", math.inf),
    ("repetition_penalty", 0.0),
    ("repetition_penalty", -1.0),
    ("repetition_penalty", math.nan),
    ("logit_bias", {5: 101.0}),
    ("logit_bias", {5: -100.5}),
    ("logit_bias", {-1: 1.0}),
    ("logit_bias", {"x": 1.0}),
    ("logit_bias", {5: math.nan}),
    ("logit_bias", [(5, 1.0)]),
    ("allowed_token_ids", []),
    ("allowed_token_ids", [3, -2]),
    ("allowed_token_ids", "12"),
    ("logprobs", -1),
    ("logprobs", 1.0),
    ("prompt_logprobs", -1),
    ("guided_regex", 12),
    ("guided_json", 12),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_bad_setting_raises_naming_the_field(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        SamplingParams(**{name: value})  # type: ignore[arg-type]


def test_exclusive_guides() -> None:
    with pytest.raises(ValueError, match="guided_regex and guided_json"):
        SamplingParams(guided_regex="a+", guided_json={"type": "string"})


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"temperature": 0.0},
        {"top_p": 1.0, "top_k": 0, "min_p": 1.0},
        {"top_p": 1e-9},
        {"max_tokens": None, "min_tokens": 100},
        {"seed": -(2**63)},
        {"seed": 2**64 - 1},
        {"presence_penalty": -2, "frequency_penalty": 2},
        {"logit_bias": {"12": 100, 3: -100}},
        {"stop": "END", "stop_token_ids": [2, 3]},
        {"guided_json": True},
        {"guided_json": '{"type": "integer"}'},
        {"logprobs": 0, "prompt_logprobs": 20},
    ],
)
def test_good_settings_are_accepted(kwargs: dict[str, object]) -> None:
    SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_normalisation() -> None:
    params = SamplingParams(stop="END", stop_token_ids=[4, 2], logit_bias={"7": 1}, top_p=1)
    assert params.stop_strings == ("END",)
    assert params.stop_token_ids == (4, 2)
    assert params.logit_bias == {7: 1.0}
    assert isinstance(params.top_p, float)
    assert SamplingParams(stop=["a", "b"]).stop_strings == ("a", "b")


def test_greedy_and_needs_penalties() -> None:
    assert SamplingParams(temperature=0.0).greedy
    assert SamplingParams(temperature=1e-6).greedy
    assert not SamplingParams(temperature=1e-5).greedy
    assert not SamplingParams().needs_penalties
    assert SamplingParams(repetition_penalty=1.1).needs_penalties
    assert SamplingParams(frequency_penalty=-0.5).needs_penalties
    assert SamplingParams(presence_penalty=0.1).needs_penalties


def test_child_offsets_the_seed() -> None:
    params = SamplingParams(n=3, seed=10, temperature=0.5)
    children = [params.child(i) for i in range(3)]
    assert [c.seed for c in children] == [10, 11, 12]
    assert all(c.n == 1 and c.temperature == 0.5 for c in children)
    assert SamplingParams(n=2).child(1).seed is None
    assert SamplingParams(n=2, seed=2**64 - 1).child(1).seed == 0  # wraps around 2**64
    with pytest.raises(ValueError, match=r"^i\b"):
        params.child(3)
    with pytest.raises(ValueError, match=r"^i\b"):
        params.child(-1)


def test_params_are_frozen() -> None:
    params = SamplingParams()
    with pytest.raises(AttributeError):
        params.temperature = 2.0  # type: ignore[misc]


def test_request_counts() -> None:
    request = Request("a", SamplingParams(), [1, 2, 3], [4])
    assert request.num_prompt_tokens == 3 and request.num_output_tokens == 1
    assert Request("b", SamplingParams(), []).output_token_ids == []
