"""A chain under ``torch.compile``: one graph, no host syncs, no recompilation for new settings.

``fullgraph=True`` turns any graph break into an error, and a host sync (``.item()``, a
data-dependent shape) is a graph break, so compiling at all shows that the chain's device path never
waits for the device. Then a second chain with different per-row settings and a state with other
tokens run under ``error_on_recompile``: settings are tensor data, not constants of the trace. The
compiled results equal eager ones.

The chain is small (three rows, 64 logits) because inductor compiles C++ on two cores here.
"""

from __future__ import annotations

import pytest
import torch
from devices import DEVICES, requires_cuda

from guided.sampling import transforms as T
from guided.sampling.state import DecodeState

torch_dynamo = pytest.importorskip("torch._dynamo")


def step(chain: T.LogitTransform, state: DecodeState, logits: torch.Tensor) -> torch.Tensor:
    return chain(state, logits)


def make_chain(
    reps: list[float],
    sizes: list[int],
    temps: list[float],
    ks: list[int],
    ps: list[float],
    ms: list[float],
) -> T.LogitTransform:
    return T.chain(
        T.RepetitionPenalty(reps),
        T.NoRepeatNGram(sizes, max_size=3),
        T.Temperature(temps),
        T.TopK(ks, max_k=8),
        T.TopP(ps),
        T.MinP(ms),
    )


def assert_equal(compiled: torch.Tensor, eager: torch.Tensor) -> None:
    """Compiled equals eager: bit for bit on the CPU. On CUDA the generated kernels round
    ``exp`` and division their own way, so the survivors must be the same and their values
    equal to within a few units in the last place."""
    if compiled.device.type == "cpu":
        assert torch.equal(compiled, eager)
        return
    assert torch.equal(compiled.isinf(), eager.isinf())
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=0.0)


@pytest.mark.parametrize("device", DEVICES)
def test_chain_compiles_once_for_any_settings(device: str) -> None:
    torch_dynamo.reset()
    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 64, generator=generator) * 3).to(device)
    state = DecodeState.from_lists(
        [[1, 2, 3, 1, 2], [4, 5], [6]], [[3], [4, 4], []], budget=4, device=device
    )
    compiled = torch.compile(step, fullgraph=True)

    first = make_chain(
        [1.2, 1.0, 0.8], [2, 0, 3], [0.7, 1.0, 1.5], [5, 0, 8], [0.9, 1.0, 0.5], [0.0, 0.1, 0.05]
    ).to(device)
    assert_equal(compiled(first, state, logits), step(first, state, logits))

    second = make_chain(
        [1.0, 2.0, 1.1], [0, 2, 1], [1.3, 0.5, 1.0], [2, 7, 0], [0.3, 0.95, 1.0], [0.2, 0.0, 0.0]
    ).to(device)
    other_state = DecodeState.from_lists(
        [[7, 7, 7, 7, 7], [1, 1], [2]], [[7], [1, 2], []], budget=4, device=device
    )
    other_logits = torch.randn(3, 64, generator=generator).to(device)
    with torch_dynamo.config.patch(error_on_recompile=True):
        got = compiled(second, other_state, other_logits)
        again = compiled(first, state, other_logits)
    assert_equal(got, step(second, other_state, other_logits))
    assert_equal(again, step(first, state, other_logits))
    # The settings did something: the two chains disagree on the same input.
    assert not torch.equal(compiled(second, state, logits), compiled(first, state, logits))


@requires_cuda
def test_chain_replays_in_a_cuda_graph() -> None:
    # Capture refuses any host sync, so a chain that captures at all never waits for the device;
    # replays then follow new logits and new tokens written into the same buffers.
    generator = torch.Generator().manual_seed(1)
    logits = (torch.randn(3, 4096, generator=generator) * 3).cuda()
    state = DecodeState.from_lists(
        [[1, 2, 3, 1, 2], [4, 5], [6]], [[3], [4, 4], []], budget=4, device="cuda"
    )
    chain = make_chain(
        [1.2, 1.0, 0.8], [2, 0, 3], [0.7, 1.0, 1.5], [5, 0, 8], [0.9, 1.0, 0.5], [0.0, 0.1, 0.05]
    ).to("cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm-up allocations outside the capture
            step(chain, state, logits)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(chain, state, logits)
    graph.replay()
    assert torch.equal(out, step(chain, state, logits))

    logits.copy_((torch.randn(3, 4096, generator=generator) * 3).cuda())
    state.commit(
        torch.tensor([2, 5, 6], device="cuda"), torch.ones(3, dtype=torch.bool, device="cuda")
    )
    graph.replay()
    assert torch.equal(out, step(chain, state, logits))
