"""DecodeState: each row's history is its own tokens, whatever padding the batch needed.

Hypothesis builds batches of prompts and outputs of mixed lengths, commits random steps (some rows
idle, some finished, the buffer outgrowing its budget), and checks every view against the plain
lists it should show.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from guided.sampling.state import DecodeState

ids = st.lists(st.integers(0, 50), max_size=6)


def real_tokens(row: list[int]) -> list[int]:
    return [t for t in row if t >= 0]


def check(state: DecodeState, prompts: list[list[int]], outputs: list[list[int]]) -> None:
    history = state.history().tolist()
    real = state.real().tolist()
    for i, (prompt, output) in enumerate(zip(prompts, outputs)):
        assert real_tokens(history[i]) == prompt + output
        # The real slots are one contiguous run holding exactly those tokens.
        assert [t for t, r in zip(history[i], real[i]) if r] == prompt + output
        assert all(t == -1 for t, r in zip(history[i], real[i]) if not r)
        assert real_tokens(state.prompt_history()[i].tolist()) == prompt
        assert real_tokens(state.generated()[i].tolist()) == output
        assert state.generated()[i, : len(output)].tolist() == output
        for count in (1, 3, 8):
            want = ([-1] * count + prompt + output)[-count:]
            assert state.last(count)[i].tolist() == want
    assert state.lengths.tolist() == [len(p) + len(o) for p, o in zip(prompts, outputs)]
    assert state.drawn.tolist() == [len(o) for o in outputs]
    assert state.prompt_lengths.tolist() == [len(p) for p in prompts]


@given(
    st.lists(st.tuples(ids, ids), min_size=1, max_size=4),
    st.integers(0, 3),
    st.lists(
        st.lists(st.tuples(st.integers(-1, 50), st.booleans()), min_size=4, max_size=4), max_size=8
    ),
)
def test_views_follow_the_lists_through_commits(
    rows: list[tuple[list[int], list[int]]], budget: int, steps: list[list[tuple[int, bool]]]
) -> None:
    prompts = [list(p) for p, _ in rows]
    outputs = [list(o) for _, o in rows]
    state = DecodeState.from_lists(prompts, outputs, budget=budget)
    assert state.width == max(map(len, prompts)) + max(len(o) for o in outputs) + budget
    assert state.limits.tolist() == [len(p) + len(o) + budget for p, o in rows]
    check(state, prompts, outputs)
    for step in steps:
        tokens = [t for t, _ in step[: len(rows)]]
        drawn = [d for _, d in step[: len(rows)]]
        state.commit(torch.tensor(tokens), torch.tensor(drawn))
        for i, (t, d) in enumerate(zip(tokens, drawn)):
            if d and t >= 0:
                outputs[i].append(t)
        check(state, prompts, outputs)
    # Retired rows no longer take tokens by default.
    state.finish(torch.tensor([True] + [False] * (len(rows) - 1)))
    state.commit(torch.full((len(rows),), 7))
    for i in range(1, len(rows)):
        outputs[i].append(7)
    check(state, prompts, outputs)


def test_construction_checks() -> None:
    with pytest.raises(ValueError, match="prompt_ids"):
        DecodeState.from_lists([[1, -2]])
    with pytest.raises(ValueError, match="output_ids"):
        DecodeState.from_lists([[1]], [[True]])
    with pytest.raises(ValueError, match="rows"):
        DecodeState.from_lists([[1]], [[1], [2]])
    with pytest.raises(ValueError, match="budget"):
        DecodeState.from_lists([[1], [2]], budget=[1])
    with pytest.raises(ValueError, match="budget"):
        DecodeState.from_lists([[1]], budget=-1)
    state = DecodeState.from_lists([[1, 2], []], [[3], []], budget=[0, 2])
    assert state.limits.tolist() == [3, 2]
    assert state.rows == 2 and state.prompt_width == 2 and state.device.type == "cpu"
    with pytest.raises(ValueError, match="shape"):
        state.commit(torch.tensor([1, 2, 3]))
    empty = DecodeState.from_lists([[], []])
    assert empty.width == 0 and empty.last(2).tolist() == [[-1, -1], [-1, -1]]
    empty.commit(torch.tensor([4, 5]))
    assert empty.generated()[:, :1].tolist() == [[4], [5]]
