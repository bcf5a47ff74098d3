"""Sampler benchmark: guided's batched Sampler against what a simple engine does.

Workload: batches of 1, 64 and 256 rows over vocabularies of 32k and 152k, every fifth row of
each kind: greedy; temperature 0.8 + top-p 0.9; temperature 0.7 + top-k 50 + min-p 0.05;
repetition 1.1 + frequency 0.5 + presence 0.3 penalties over a 200-token prompt and a growing
output; a grammar mask (half of the guided rows allow about 1% of the vocabulary in short runs,
as a number or a keyword does, half about 90%, as string content does). Logits look like a
language model's: a Zipf-shaped distribution over a random permutation of the vocabulary, plus
noise. Both contenders run the same decoding steps, appending each step's tokens.

The baseline is the per-row loop an engine writes around Transformers: for each row, the row's
Transformers processors (``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``,
``MinPLogitsWarper``, ``RepetitionPenaltyLogitsProcessor``, with frequency and presence counted
from the Python lists), xgrammar's ``apply_token_bitmask_inplace`` for guided rows, then
``torch.multinomial`` on the softmax (``argmax`` for greedy rows).

A distributions table runs the issue-sized case, 64 x 128,000 with four kinds of request (greedy;
temperature 0.8 + top-p 0.9; top-k 50 + min-p 0.05; penalties), on three kinds of logits: flat
(a standard normal, as at high temperature or early in a creative sample, where the top-p nucleus
holds most of the vocabulary), peaked (the Zipf-shaped logits above) and mixed (half of each). It
prints the whole step against the per-row loop, then each filter alone over 16 rows of the same
logits (the Sampler's kinds, and the batched ``TopP``, ``Typical``, ``MinP``, ``TopK``,
``EpsilonCutoff`` and ``EtaCutoff`` transforms) beside one batched ``torch.sort`` of those rows: a
filter that finds a threshold should never cost more than sorting.

A second table isolates the penalties at 256 requests with 1,000-token outputs: guided's
persistent per-slot statistics (one device-side update with the step's tokens, then a gather and
scatter of the penalised entries) against rebuilding the counts from the Python lists every step
(pad, convert, scatter-add into a ``[batch, vocab]`` count tensor, apply densely), as vLLM's V0
sampler did.

On a CUDA device a third table reports the Triton bitmask apply at 256 x 152k against the time of
reading and writing those logits once (a device copy of the tensor, the memory-bandwidth floor
the issue sets: within 1.5x), xgrammar's Triton kernel on the same input, and the full
``sample_device`` step time.

Figures are medians over repeated steps. Torch runs on one CPU thread unless ``--threads`` says
otherwise: on a shared machine a multi-threaded op waits at every parallel region for whichever of
its threads the scheduler parked, which swamps the figures (the per-row loop's small ops fall
under torch's parallel grain size and escape it), and one thread is the fair comparison of the
work each side does. The load average is recorded with the results.
Results go to ``bench/results/sampler.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from guided.bitmask import apply_token_bitmask_inplace, bitmask_width
from guided.sampling import Request, Sampler, SamplingParams
from guided.sampling.penalties import PenaltyState
from guided.sampling.state import DecodeState
from guided.sampling.transforms import (
    EpsilonCutoff,
    EtaCutoff,
    LogitTransform,
    MinP,
    TopK,
    TopP,
    Typical,
)

try:
    import xgrammar
except ImportError:  # the baseline then applies masks with guided's own helper
    xgrammar = None

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = ["greedy", "top-p", "top-k+min-p", "penalties", "guided"]
PROMPT = 200


def settings_for(kind: str) -> SamplingParams:
    if kind == "greedy":
        return SamplingParams(temperature=0.0, max_tokens=None)
    if kind == "top-p":
        return SamplingParams(temperature=0.8, top_p=0.9, max_tokens=None)
    if kind == "top-k+min-p":
        return SamplingParams(temperature=0.7, top_k=50, min_p=0.05, max_tokens=None)
    if kind == "penalties":
        return SamplingParams(
            repetition_penalty=1.1, frequency_penalty=0.5, presence_penalty=0.3, max_tokens=None
        )
    return SamplingParams(max_tokens=None)


def lm_logits(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Zipf-shaped logits over a random permutation of the vocabulary, plus noise."""
    generator = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, vocab + 1, dtype=torch.float32)
    base = -1.1 * torch.log(ranks) * 2.2
    out = torch.empty(rows, vocab)
    for i in range(rows):
        noisy = base + torch.randn(vocab, generator=generator) * 0.5
        out[i] = noisy[torch.randperm(vocab, generator=generator)]
    return out


def grammar_mask(vocab: int, dense: bool, seed: int) -> torch.Tensor:
    """A packed mask shaped like a grammar's: short runs of allowed ids, sparse or dense."""
    rng = np.random.default_rng(seed)
    allowed = np.zeros(vocab, dtype=bool)
    share = 0.9 if dense else 0.01
    while allowed.mean() < share:
        start = int(rng.integers(0, vocab))
        allowed[start : start + int(rng.integers(1, 64 if dense else 8))] = True
    bits = np.zeros(bitmask_width(vocab) * 32, dtype=np.uint8)
    bits[:vocab] = allowed
    return torch.from_numpy(np.packbits(bits, bitorder="little").view(np.int32).copy())


class FixedMaskGuide:
    """Stands in for a compiled guide: filling its row is a copy of a precomputed mask."""

    def __init__(self, mask: torch.Tensor) -> None:
        self.mask = mask

    @property
    def finished(self) -> bool:
        return False

    def is_terminated(self) -> bool:
        return False

    def fill_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> None:
        bitmask[index].copy_(self.mask)

    def advance(self, token: int) -> None:
        return None


def make_requests(rows: int, vocab: int, seed: int) -> list[Request]:
    rng = np.random.default_rng(seed)
    masks = [grammar_mask(vocab, dense, seed + i) for i, dense in enumerate((False, True))]
    requests = []
    for i in range(rows):
        kind = KINDS[i % len(KINDS)]
        guide = FixedMaskGuide(masks[(i // len(KINDS)) % 2]) if kind == "guided" else None
        prompt = rng.integers(0, vocab, PROMPT).tolist()
        requests.append(Request(f"{kind}-{i}", settings_for(kind), prompt, guide=guide))
    return requests


def baseline_step(logits: torch.Tensor, requests: list[Request]) -> list[int]:
    """The per-row loop over Transformers' processors."""
    tokens = []
    for i, request in enumerate(requests):
        params = request.params
        row = logits[i : i + 1].clone()
        if request.guide is not None:
            mask = request.guide.mask.unsqueeze(0)  # type: ignore[attr-defined]
            if xgrammar is not None:
                xgrammar.apply_token_bitmask_inplace(row, mask)
            else:
                apply_token_bitmask_inplace(row, mask)
        if params.needs_penalties:
            history = torch.tensor([list(request.prompt_token_ids) + request.output_token_ids])
            row = RepetitionPenaltyLogitsProcessor(params.repetition_penalty)(history, row)
            counts = Counter(request.output_token_ids)
            if counts:
                ids = torch.tensor(list(counts))
                values = torch.tensor(list(counts.values()), dtype=torch.float32)
                row[0, ids] -= params.frequency_penalty * values + params.presence_penalty
        if params.greedy:
            tokens.append(int(row.argmax()))
            continue
        row = TemperatureLogitsWarper(params.temperature)(None, row)
        if params.top_k:
            row = TopKLogitsWarper(params.top_k)(None, row)
        if params.top_p < 1.0:
            row = TopPLogitsWarper(params.top_p)(None, row)
        if params.min_p:
            row = MinPLogitsWarper(params.min_p)(None, row)
        tokens.append(int(torch.multinomial(torch.softmax(row, dim=-1), 1)))
    return tokens


def run_steps(
    step: Callable[[torch.Tensor, list[Request]], list[int]],
    logits: torch.Tensor,
    requests: list[Request],
    steps: int,
    sync: Callable[[], None] = lambda: None,
) -> float:
    """Median milliseconds per decoding step (after one warm-up step)."""
    times = []
    for i in range(steps + 1):
        sync()
        start = time.perf_counter()
        drawn = step(logits, requests)
        sync()
        if i:
            times.append((time.perf_counter() - start) * 1e3)
        for request, token in zip(requests, drawn):
            if token >= 0:
                request.output_token_ids.append(token)
    return statistics.median(times)


def guided_step(sampler: Sampler) -> Callable[[torch.Tensor, list[Request]], list[int]]:
    def step(logits: torch.Tensor, requests: list[Request]) -> list[int]:
        tokens, _ = sampler(logits, requests)
        return [row[0] if row else -1 for row in tokens]

    return step


def bench_sampler(batches: list[int], vocabs: list[int], steps: int) -> list[dict[str, Any]]:
    rows = []
    for vocab in vocabs:
        pool = lm_logits(max(batches), vocab, seed=vocab)
        for batch in batches:
            logits = pool[:batch].contiguous()
            ours = run_steps(guided_step(Sampler()), logits, make_requests(batch, vocab, 1), steps)
            theirs = run_steps(baseline_step, logits, make_requests(batch, vocab, 1), steps)
            rows.append(
                {
                    "device": "cpu",
                    "batch": batch,
                    "vocab": vocab,
                    "guided_ms": ours,
                    "per_row_loop_ms": theirs,
                    "speedup": theirs / ours,
                }
            )
            print(
                f"{'cpu':>6} {batch:>6} {vocab:>7} {ours:>11.2f} {theirs:>14.2f} "
                f"{theirs / ours:>8.1f}x",
                flush=True,
            )
    return rows


DISTRIBUTION_KINDS = ["greedy", "top-p", "top-k+min-p", "penalties"]


def distribution_logits(name: str, rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Flat (standard normal), peaked (:func:`lm_logits`) or mixed (alternating blocks)."""
    flat = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed))
    if name == "flat":
        return flat
    peaked = lm_logits(rows, vocab, seed)
    if name == "peaked":
        return peaked
    # Alternate blocks of one row per kind of request, so every kind sees both.
    block = torch.arange(rows) // len(DISTRIBUTION_KINDS)
    return torch.where((block % 2 == 0).unsqueeze(1), flat, peaked)


def kind_requests(kinds: list[str], rows: int, vocab: int, seed: int) -> list[Request]:
    rng = np.random.default_rng(seed)
    return [
        Request(
            f"{kinds[i % len(kinds)]}-{i}",
            settings_for(kinds[i % len(kinds)]),
            rng.integers(0, vocab, PROMPT).tolist(),
        )
        for i in range(rows)
    ]


def median_ms(fn: Callable[[], object], steps: int) -> float:
    fn()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def bench_distributions(steps: int, batch: int = 64, vocab: int = 128_000) -> list[dict[str, Any]]:
    alone = batch // len(DISTRIBUTION_KINDS)
    filters: list[tuple[str, LogitTransform]] = [
        ("TopP(0.9)", TopP(0.9)),
        ("Typical(0.9)", Typical(0.9)),
        ("MinP(0.05)", MinP(0.05)),
        ("TopK(50)", TopK(50)),
        ("EpsilonCutoff(3e-4)", EpsilonCutoff(3e-4)),
        ("EtaCutoff(3e-4)", EtaCutoff(3e-4)),
    ]
    results = []
    for name in ("flat", "peaked", "mixed"):
        logits = distribution_logits(name, batch, vocab, seed=11)
        ours = run_steps(
            guided_step(Sampler()),
            logits,
            kind_requests(DISTRIBUTION_KINDS, batch, vocab, 1),
            steps,
        )
        theirs = run_steps(
            baseline_step, logits, kind_requests(DISTRIBUTION_KINDS, batch, vocab, 1), steps
        )
        part = logits[:alone].contiguous() / 0.8
        sort_ms = median_ms(lambda part=part: torch.sort(part, dim=1, descending=True), steps)
        row: dict[str, Any] = {
            "distribution": name,
            "batch": batch,
            "vocab": vocab,
            "guided_ms": ours,
            "per_row_loop_ms": theirs,
            "speedup": theirs / ours,
            "sort_rows": alone,
            "sort_ms": sort_ms,
        }
        print(
            f"{name:>8} {batch:>6} {vocab:>7} {ours:>10.2f} {theirs:>14.2f} {theirs / ours:>8.1f}x"
            f"   sort of {alone} rows {sort_ms:.1f} ms"
        )
        for kind in DISTRIBUTION_KINDS:
            sampler = Sampler()
            requests = kind_requests([kind], alone, vocab, 2)
            block = logits[:alone].contiguous()
            ms = median_ms(
                lambda s=sampler, r=requests, b=block: s.sample_device(b.clone(), r), steps
            )
            row[f"sampler {kind}_ms"] = ms
            print(f"{'':>8}   Sampler, {alone} {kind} rows: {ms:8.2f} ms ({ms / sort_ms:.2f} sort)")
        state = DecodeState.from_lists([[0]] * alone)
        for label, transform in filters:
            ms = median_ms(lambda t=transform, p=part, s=state: t(s, p), steps)
            row[f"{label}_ms"] = ms
            print(f"{'':>8}   {label:<20} {alone} rows: {ms:8.2f} ms ({ms / sort_ms:.2f} sort)")
        results.append(row)
    return results


def rebuild_penalties(
    logits: torch.Tensor,
    prompts: list[list[int]],
    outputs: list[list[int]],
    rep: torch.Tensor,
    freq: torch.Tensor,
    pres: torch.Tensor,
) -> None:
    """Counts rebuilt from the Python lists, applied densely (vLLM V0's sampler)."""
    batch, vocab = logits.shape
    width = max(len(o) for o in outputs)
    padded = torch.tensor([o + [vocab] * (width - len(o)) for o in outputs])
    counts = torch.zeros(batch, vocab + 1, dtype=torch.long)
    counts.scatter_add_(1, padded, torch.ones_like(padded))
    counts = counts[:, :vocab]
    prompt_width = max(len(p) for p in prompts)
    prompt_ids = torch.tensor([p + [vocab] * (prompt_width - len(p)) for p in prompts])
    seen = torch.zeros(batch, vocab + 1, dtype=torch.bool)
    seen.scatter_(1, prompt_ids, True)
    seen = seen[:, :vocab] | (counts > 0)
    r = rep.unsqueeze(1).expand(-1, vocab)
    penalised = torch.where(logits > 0, logits / r, logits * r)
    logits.copy_(torch.where(seen, penalised, logits))
    logits -= freq.unsqueeze(1) * counts
    logits -= pres.unsqueeze(1) * (counts > 0)


def bench_penalties(vocabs: list[int], steps: int) -> list[dict[str, Any]]:
    batch, length = 256, 1000
    rows = []
    for vocab in vocabs:
        rng = np.random.default_rng(vocab)
        prompts = [rng.integers(0, vocab, PROMPT).tolist() for _ in range(batch)]
        # Text-like outputs: Zipf-distributed ids repeat, as words do.
        outputs = [(rng.zipf(1.3, length) % vocab).tolist() for _ in range(batch)]
        rep, freq, pres = [1.1] * batch, [0.5] * batch, [0.3] * batch
        settings = torch.tensor(rep), torch.tensor(freq), torch.tensor(pres)
        logits = lm_logits(batch, vocab, seed=3)
        state = PenaltyState(torch.device("cpu"))
        slots = [state.acquire() for _ in range(batch)]
        for slot, prompt, output in zip(slots, prompts, outputs):
            state.reset(slot, prompt, output, vocab)
        slot_tensor = torch.tensor(slots)
        row_list = list(range(batch))
        flat = torch.empty(batch * vocab + 1)
        ours, theirs = [], []
        for _ in range(steps):
            new = torch.from_numpy(rng.integers(0, vocab, batch))
            for output, token in zip(outputs, new.tolist()):
                output.append(token)
            flat[:-1].copy_(logits.flatten())
            start = time.perf_counter()
            state.record(slot_tensor, new, slots)
            state.apply(flat, row_list, slots, vocab, rep, freq, pres)
            ours.append((time.perf_counter() - start) * 1e3)
            work = logits.clone()
            start = time.perf_counter()
            rebuild_penalties(work, prompts, outputs, *settings)
            theirs.append((time.perf_counter() - start) * 1e3)
            assert torch.allclose(work, flat[:-1].view(batch, vocab), atol=1e-4)
        mine, base = statistics.median(ours), statistics.median(theirs)
        rows.append(
            {
                "batch": batch,
                "output_tokens": length,
                "vocab": vocab,
                "persistent_ms": mine,
                "rebuild_ms": base,
                "speedup": base / mine,
            }
        )
        print(f"{batch:>6} {length:>7} {vocab:>7} {mine:>14.3f} {base:>12.2f} {base / mine:>8.1f}x")
    return rows


def bench_cuda(steps: int) -> dict[str, Any]:
    device = torch.device("cuda")
    batch, vocab = 256, 152_064

    def timed(fn: Callable[[], object], repeat: int = 50) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    logits = lm_logits(batch, vocab, seed=5).to(device)
    work = logits.clone()
    masks = [grammar_mask(vocab, dense, i) for i, dense in enumerate((False, True))]
    bitmask = torch.stack([masks[i % 2] for i in range(batch)]).to(device)
    copy_ms = timed(lambda: work.copy_(logits))
    apply_ms = timed(lambda: apply_token_bitmask_inplace(work, bitmask))
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "batch": batch,
        "vocab": vocab,
        "read_write_once_ms": copy_ms,
        "apply_ms": apply_ms,
        "apply_over_read_write": apply_ms / copy_ms,
        "bandwidth_gb_s": 2 * logits.numel() * 4 / copy_ms / 1e6,
    }
    if xgrammar is not None:
        result["xgrammar_apply_ms"] = timed(
            lambda: xgrammar.apply_token_bitmask_inplace(work, bitmask)
        )
    # Whole decoding steps as an engine runs them: sample, bring the tokens to the host, append.
    sync = torch.cuda.synchronize
    result["step_mixed_ms"] = run_steps(
        guided_step(Sampler()), logits, make_requests(batch, vocab, 1), steps, sync
    )
    greedy = [Request(f"g{i}", SamplingParams(temperature=0.0), []) for i in range(batch)]
    result["step_greedy_ms"] = run_steps(guided_step(Sampler()), logits, greedy, steps, sync)
    # The device work alone: what sample_device queues, timed with events.
    sampler = Sampler()
    plain = [Request(f"p{i}", SamplingParams(top_p=0.9), []) for i in range(batch)]
    result["sample_device_top_p_ms"] = timed(lambda: sampler.sample_device(logits, plain), steps)
    print(
        f"CUDA {result['device']}, {batch} x {vocab}: apply {apply_ms * 1e3:.1f} us vs "
        f"read+write once {copy_ms * 1e3:.1f} us ({apply_ms / copy_ms:.2f}x, target <= 1.5x)\n"
        f"  full step (sample, sync, append): mixed {result['step_mixed_ms']:.3f} ms, "
        f"greedy {result['step_greedy_ms']:.3f} ms; "
        f"sample_device device time, all top-p: {result['sample_device_top_p_ms']:.3f} ms"
    )
    if "xgrammar_apply_ms" in result:
        print(f"  xgrammar Triton apply: {result['xgrammar_apply_ms'] * 1e3:.1f} us")
    return result


def bench_apply_cpu(steps: int) -> list[dict[str, Any]]:
    rows = []
    for batch, vocab in ((64, 152_064), (256, 152_064)):
        logits = lm_logits(batch, vocab, seed=7)
        masks = [grammar_mask(vocab, dense, i) for i, dense in enumerate((False, True))]
        bitmask = torch.stack([masks[i % 2] for i in range(batch)])

        def timed(
            apply: Callable[[torch.Tensor, torch.Tensor], None],
            logits: torch.Tensor = logits,
            bitmask: torch.Tensor = bitmask,
        ) -> float:
            times = []
            for _ in range(steps):
                work = logits.clone()
                start = time.perf_counter()
                apply(work, bitmask)
                times.append((time.perf_counter() - start) * 1e3)
            return statistics.median(times)

        ours = timed(apply_token_bitmask_inplace)
        row: dict[str, Any] = {"batch": batch, "vocab": vocab, "guided_ms": ours}
        line = f"{batch:>6} {vocab:>7} {ours:>10.2f}"
        if xgrammar is not None:
            theirs = timed(xgrammar.apply_token_bitmask_inplace)
            row["xgrammar_ms"] = theirs
            line += f" {theirs:>12.2f} {theirs / ours:>8.2f}x"
        rows.append(row)
        print(line)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed decoding steps per case")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--vocabs", type=int, nargs="+", default=[32_000, 152_064])
    parser.add_argument("--no-cuda", action="store_true", help="skip the CUDA section")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    environment = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_average": os.getloadavg(),
    }
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()}")
    print("\nSampler step, mixed batch (ms per step, median)")
    print(
        f"{'device':>6} {'batch':>6} {'vocab':>7} {'guided':>11} {'per-row loop':>14} {'ratio':>9}"
    )
    sampler_rows = bench_sampler(args.batches, args.vocabs, args.steps)
    print(
        "\nDistributions: 64 x 128,000, four kinds of request (ms per step, median); each filter"
        " alone on 16 rows, against one batched torch.sort of them"
    )
    print(
        f"{'logits':>8} {'batch':>6} {'vocab':>7} {'guided':>10} {'per-row loop':>14} {'ratio':>9}"
    )
    distribution_rows = bench_distributions(args.steps)
    print("\nPenalties, 256 requests x 1,000-token outputs (host ms per step, median)")
    print(
        f"{'batch':>6} {'outputs':>7} {'vocab':>7} {'persistent':>14} {'rebuild':>12} {'ratio':>9}"
    )
    penalty_rows = bench_penalties(args.vocabs, max(args.steps, 5))
    print("\nBitmask apply on CPU, grammar-shaped masks (ms, median)")
    print(f"{'batch':>6} {'vocab':>7} {'guided':>10} {'xgrammar':>12} {'ratio':>9}")
    apply_rows = bench_apply_cpu(max(args.steps, 5))
    cuda = None
    if torch.cuda.is_available() and not args.no_cuda:
        print()
        cuda = bench_cuda(max(args.steps, 20))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "sampler.json"
    out.write_text(
        json.dumps(
            {
                "environment": environment,
                "sampler": sampler_rows,
                "distributions": distribution_rows,
                "penalties": penalty_rows,
                "apply_cpu": apply_rows,
                "cuda": cuda,
            },
            indent=2,
        )
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
