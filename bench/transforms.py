"""Transforms benchmark: guided's batched transforms against Transformers' processors row by row.

Workload: 64 rows over a 128k vocabulary (CPU by default, ``--device cuda`` for a GPU), logits
shaped like a language model's (a Zipf distribution over a random permutation of the vocabulary,
plus noise), every row with its own settings (a temperature, a k, a p, a penalty, an n-gram size ...
drawn per row) and its own history (a 200-token prompt and 100 drawn tokens with repetitions).
Transformers' processors take one setting for the whole batch, so per-row settings mean one
processor per row, called on that row: the baseline is that loop. Frequency and presence penalties
have no Transformers processor; their baseline is vLLM's formula applied row by row (a bincount and
a subtraction).

Each line times one transform called as a pure function (its copy of the logits included), then a
realistic chain: repetition penalty, no-repeat 3-grams, temperature, top-k, top-p and min-p, and a
second one with typical and eta sampling. The issue's target is 10x. Figures are medians; results
go to ``bench/results/transforms.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from transformers.generation import logits_process as L

from common import median, table, write_results
from guided.sampling import transforms as T
from guided.sampling.state import DecodeState

TARGET = 10.0
EOS = [2, 7]


def lm_logits(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """Zipf-shaped logits over a random permutation of the vocabulary, plus noise."""
    generator = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, vocab + 1, dtype=torch.float32)
    base = -2.4 * torch.log(ranks)
    out = torch.empty(rows, vocab)
    for i in range(rows):
        noisy = base + torch.randn(vocab, generator=generator) * 0.5
        out[i] = noisy[torch.randperm(vocab, generator=generator)]
    return out


class Workload:
    def __init__(self, rows: int, vocab: int, seed: int, device: torch.device) -> None:
        rng = np.random.default_rng(seed)
        self.rows, self.vocab, self.device = rows, vocab, device
        self.logits = lm_logits(rows, vocab, seed).to(device)
        # Histories from a few hundred ids, so tokens and n-grams repeat as in real text.
        self.prompts = [rng.integers(0, 400, 200).tolist() for _ in range(rows)]
        self.outputs = [rng.integers(0, 400, 100).tolist() for _ in range(rows)]
        self.state = DecodeState.from_lists(self.prompts, self.outputs, budget=16, device=device)
        self.ids = [
            torch.tensor([p + o], device=device) for p, o in zip(self.prompts, self.outputs)
        ]
        self.prompt_ids = [torch.tensor([p], device=device) for p in self.prompts]
        pick = lambda values: [values[i % len(values)] for i in range(rows)]  # noqa: E731
        self.temperature = pick([0.7, 0.8, 1.0, 1.2])
        self.top_k = pick([20, 50, 100, 40])
        self.top_p = pick([0.8, 0.9, 0.95, 0.7])
        self.min_p = pick([0.05, 0.1, 0.02, 0.2])
        self.typical = pick([0.9, 0.8, 0.95, 0.5])
        self.epsilon = pick([3e-4, 1e-3, 5e-4, 2e-4])
        self.eta = pick([3e-4, 1e-3, 5e-4, 2e-4])
        self.top_h = pick([0.4, 0.5, 0.6, 0.3])
        self.repetition = pick([1.1, 1.2, 1.05, 1.3])
        self.frequency = pick([0.5, 0.2, 0.0, 1.0])
        self.presence = pick([0.3, 0.0, 0.6, 0.1])
        self.ngram = pick([3, 2, 4, 3])
        self.min_length = pick([320, 250, 400, 310])
        self.bias = [
            [([5, 6], 2.0), ([9], -1.5), ([3, 4, 5], -3.0)],
            [([11], 1.0)],
            [([5, 6], -2.0), ([17, 18], 0.5)],
            [([300], 4.0)],
        ]
        self.bias = pick(self.bias)


def per_row(
    w: Workload, build: Callable[[int], Any], ids: Callable[[int], torch.Tensor]
) -> Callable[[], None]:
    processors = [build(i) for i in range(w.rows)]
    rows = [w.logits[i : i + 1] for i in range(w.rows)]
    inputs = [ids(i) for i in range(w.rows)]

    def run() -> None:
        for processor, row, ids_ in zip(processors, rows, inputs):
            processor(ids_, row)

    return run


def vllm_counts(w: Workload, use: str) -> Callable[[], None]:
    penalties = w.frequency if use == "frequency" else w.presence
    outputs = [torch.tensor(o, device=w.device) for o in w.outputs]
    rows = [w.logits[i : i + 1] for i in range(w.rows)]

    def run() -> None:
        for penalty, out, row in zip(penalties, outputs, rows):
            counts = torch.bincount(out, minlength=w.vocab)[: w.vocab]
            if use == "frequency":
                row - penalty * counts
            else:
                row - penalty * (counts > 0)

    return run


def sequence_bias_batched(w: Workload) -> T.LogitTransform:
    per = [dict((tuple(k), v) for k, v in entries) for entries in w.bias]
    union = list(dict.fromkeys(k for entries in per for k in entries))
    return T.sequence_bias([(list(k), [e.get(k, 0.0) for e in per]) for k in union])


def cases(w: Workload) -> list[tuple[str, T.LogitTransform, Callable[[], None]]]:
    full = lambda i: w.ids[i]  # noqa: E731
    empty = lambda i: w.ids[i][:, :0]  # noqa: E731
    return [
        (
            "temperature",
            T.Temperature(w.temperature),
            per_row(w, lambda i: L.TemperatureLogitsWarper(w.temperature[i]), empty),
        ),
        ("top-k", T.TopK(w.top_k), per_row(w, lambda i: L.TopKLogitsWarper(w.top_k[i]), empty)),
        ("top-p", T.TopP(w.top_p), per_row(w, lambda i: L.TopPLogitsWarper(w.top_p[i]), empty)),
        ("min-p", T.MinP(w.min_p), per_row(w, lambda i: L.MinPLogitsWarper(w.min_p[i]), empty)),
        (
            "typical",
            T.Typical(w.typical),
            per_row(w, lambda i: L.TypicalLogitsWarper(w.typical[i]), empty),
        ),
        (
            "epsilon",
            T.EpsilonCutoff(w.epsilon),
            per_row(w, lambda i: L.EpsilonLogitsWarper(w.epsilon[i]), empty),
        ),
        (
            "eta",
            T.EtaCutoff(w.eta),
            per_row(w, lambda i: L.EtaLogitsWarper(w.eta[i], device=w.device), empty),
        ),
        ("top-h", T.TopH(w.top_h), per_row(w, lambda i: L.TopHLogitsWarper(w.top_h[i]), empty)),
        ("renormalize", T.Renormalize(), per_row(w, lambda i: L.LogitNormalization(), empty)),
        (
            "remove invalid",
            T.RemoveInvalidValues(),
            per_row(w, lambda i: L.InfNanRemoveLogitsProcessor(), empty),
        ),
        (
            "repetition",
            T.RepetitionPenalty(w.repetition),
            per_row(w, lambda i: L.RepetitionPenaltyLogitsProcessor(w.repetition[i]), full),
        ),
        (
            "prompt repetition",
            T.PromptRepetitionPenalty(w.repetition),
            per_row(
                w,
                lambda i: L.EncoderRepetitionPenaltyLogitsProcessor(
                    w.repetition[i], w.prompt_ids[i]
                ),
                full,
            ),
        ),
        ("frequency (vLLM)", T.FrequencyPenalty(w.frequency), vllm_counts(w, "frequency")),
        ("presence (vLLM)", T.PresencePenalty(w.presence), vllm_counts(w, "presence")),
        (
            "no-repeat n-gram",
            T.NoRepeatNGram(w.ngram),
            per_row(w, lambda i: L.NoRepeatNGramLogitsProcessor(w.ngram[i]), full),
        ),
        (
            "prompt no-repeat n-gram",
            T.PromptNoRepeatNGram(w.ngram),
            per_row(
                w,
                lambda i: L.EncoderNoRepeatNGramLogitsProcessor(w.ngram[i], w.prompt_ids[i]),
                full,
            ),
        ),
        (
            "sequence bias",
            sequence_bias_batched(w),
            per_row(
                w, lambda i: L.SequenceBiasLogitsProcessor([[k, v] for k, v in w.bias[i]]), full
            ),
        ),
        (
            "bad words",
            T.bad_words([[5, 6], [9], [3, 4, 5]], EOS),
            per_row(w, lambda i: L.NoBadWordsLogitsProcessor([[5, 6], [9], [3, 4, 5]], EOS), full),
        ),
        (
            "suppress",
            T.SuppressTokens([[1, 5, 9]] * w.rows),
            per_row(w, lambda i: L.SuppressTokensLogitsProcessor([1, 5, 9], device=w.device), full),
        ),
        (
            "min length",
            T.MinLength(w.min_length, EOS),
            per_row(
                w, lambda i: L.MinLengthLogitsProcessor(w.min_length[i], EOS, device=w.device), full
            ),
        ),
        (
            "exponential decay",
            T.ExponentialDecayLengthPenalty(50, 1.05, EOS),
            per_row(w, lambda i: L.ExponentialDecayLengthPenalty((50, 1.05), EOS, 200), full),
        ),
    ]


def chains(w: Workload) -> list[tuple[str, T.LogitTransform, Callable[[], None]]]:
    def realistic(i: int) -> L.LogitsProcessorList:
        return L.LogitsProcessorList(
            [
                L.RepetitionPenaltyLogitsProcessor(w.repetition[i]),
                L.NoRepeatNGramLogitsProcessor(3),
                L.TemperatureLogitsWarper(w.temperature[i]),
                L.TopKLogitsWarper(w.top_k[i]),
                L.TopPLogitsWarper(w.top_p[i]),
                L.MinPLogitsWarper(w.min_p[i]),
            ]
        )

    def typical(i: int) -> L.LogitsProcessorList:
        return L.LogitsProcessorList(
            [
                L.RepetitionPenaltyLogitsProcessor(w.repetition[i]),
                L.TemperatureLogitsWarper(w.temperature[i]),
                L.TypicalLogitsWarper(w.typical[i]),
                L.EtaLogitsWarper(w.eta[i], device=w.device),
            ]
        )

    return [
        (
            "chain: rep+3gram+temp+top-k+top-p+min-p",
            T.chain(
                T.RepetitionPenalty(w.repetition),
                T.NoRepeatNGram(3),
                T.Temperature(w.temperature),
                T.TopK(w.top_k),
                T.TopP(w.top_p),
                T.MinP(w.min_p),
            ),
            per_row(w, realistic, lambda i: w.ids[i]),
        ),
        (
            "chain: rep+temp+typical+eta",
            T.chain(
                T.RepetitionPenalty(w.repetition),
                T.Temperature(w.temperature),
                T.Typical(w.typical),
                T.EtaCutoff(w.eta),
            ),
            per_row(w, typical, lambda i: w.ids[i]),
        ),
    ]


def timed(fn: Callable[[], Any], repeat: int, device: torch.device) -> tuple[float, float]:
    """(wall, CPU) seconds per call, medians of ``repeat`` rounds. The CPU time is the process's
    (all its threads): on a machine shared with other work it is the steadier figure. On a GPU
    each round ends when the device has finished its queued work."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn()
    sync()
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        sync()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return median(wall), median(cpu)


def measure(
    w: Workload, items: list[tuple[str, T.LogitTransform, Callable[[], None]]], repeat: int
) -> list[dict[str, Any]]:
    out = []
    for name, transform, baseline in items:
        # Parameter tensors live where the logits do, so a call moves nothing.
        on_device = transform.to(w.device)

        def ours(transform: T.LogitTransform = on_device) -> None:
            transform(w.state, w.logits)

        guided_wall, guided_cpu = timed(ours, repeat, w.device)
        loop_wall, loop_cpu = timed(baseline, repeat, w.device)
        row = {
            "transform": name,
            "guided_ms": guided_wall * 1e3,
            "per_row_ms": loop_wall * 1e3,
            "ratio": loop_wall / guided_wall,
            "guided_cpu_ms": guided_cpu * 1e3,
            "per_row_cpu_ms": loop_cpu * 1e3,
            "cpu_ratio": loop_cpu / guided_cpu,
        }
        row["meets_target"] = row["ratio"] >= TARGET
        out.append(row)
        print(
            f"{name:<42} {guided_wall * 1e3:>9.1f} {loop_wall * 1e3:>10.1f} {row['ratio']:>7.1f}x"
            f" {guided_cpu * 1e3:>9.1f} {loop_cpu * 1e3:>10.1f} {row['cpu_ratio']:>7.1f}x",
            flush=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=128_000)
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds per figure")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:1, ...)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    environment = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_average": os.getloadavg(),
        "device": str(device)
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
    }
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()}")
    print(f"{args.rows} rows x {args.vocab} vocabulary, per-row settings (ms per call, median)")
    print(f"device {environment['device']}")
    w = Workload(args.rows, args.vocab, seed=0, device=device)
    print(
        f"{'':<42} {'--- wall ms (median) ---':>29}  {'--- CPU ms (median) ---':>28}\n"
        f"{'transform':<42} {'guided':>9} {'per-row':>10} {'ratio':>8}"
        f" {'guided':>9} {'per-row':>10}"
        f" {'ratio':>8}"
    )
    single = measure(w, cases(w), args.repeat)
    chained = measure(w, chains(w), args.repeat)
    rows = single + chained
    print()
    print(
        table(
            ["transform", "guided ms", "per-row ms", "ratio", f">= {TARGET:g}x"],
            [
                [
                    r["transform"],
                    r["guided_ms"],
                    r["per_row_ms"],
                    r["ratio"],
                    "yes" if r["meets_target"] else "no",
                ]
                for r in rows
            ],
        )
    )
    path = write_results(
        "transforms",
        {
            "environment": environment,
            "rows": args.rows,
            "vocab": args.vocab,
            "target": TARGET,
            "results": rows,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
