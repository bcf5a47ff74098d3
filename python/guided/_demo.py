"""The demo behind ``guided demo`` (and ``make demo``): a whole constrained-decoding loop, offline.

It answers a newcomer's first questions with figures from this machine: how long a schema takes to
compile, how big its automaton is, what a mask costs the first time a state is seen and once it is
cached, and whether a model that knows nothing still writes valid JSON under the constraint. The
model is deliberately worthless, a small random torch network (an embedding, a recency-weighted
context and one MLP block, logits tied to the embedding) with a unigram prior that favours ASCII
word pieces so its text reads like text. Whatever it prefers, the constraint decides what may be
written, so every output parses and validates; that is the point being demonstrated.

Without arguments it runs on the synthetic 151,936-token vocabulary of :mod:`guided._synthetic`;
``--tokenizer``/``--tiktoken`` swap in a real one, and the model's logit width follows it. Each
step yields one record (a dict), which the command line prints as a JSON line:

- ``vocabulary``: where the tokens came from, their count, the EOS ids, the load time;
- ``compile``: the schema's regex length, its DFA's state count, the token index's compile time;
- ``mask`` (twice): allowed-token count and first/cached mask time at the start and inside a
  string;
- ``sample`` (three seeds): a seeded constrained generation through
  :class:`guided.sampling.Sampler`, its text and ``valid_json`` (``json.loads`` then
  ``jsonschema``, when installed);
- ``greedy`` and ``beam_search``: the same model decoded greedily and by
  :func:`guided.sampling.beam_search`, each beam constrained by its own guide, with the summed
  log-probability of each output (over the renormalised allowed tokens), so the two are comparable.

Costs: building the synthetic vocabulary takes about a second; the first compile over it also
builds the vocabulary's token trie (tens of milliseconds, once per vocabulary); each generated
token costs one forward pass of a 152k-wide output layer and one mask, most of them cached.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

import guided
from guided import Guide, TokenIndex, Vocabulary
from guided._synthetic import decode, encode_greedy, synthetic_vocabulary
from guided.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace
from guided.sampling import Request, Sampler, SamplingParams, beam_search

__all__ = ["DEMO_SCHEMA", "TinyLM", "is_valid", "run"]

#: The demo's schema: a user record with a bounded name, age and tag list, so documents are short.
DEMO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "admin": {"type": "boolean"},
        "tags": {
            "type": "array",
            "items": {"enum": ["admin", "dev", "ops", "guest", "beta"]},
            "maxItems": 3,
        },
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}

#: The prompt the model continues (its tokens only seed the random model's context).
PROMPT = "Describe a user as JSON: "
#: A token budget well above the longest likely document (about 230 bytes, every token carrying at
#: least one). The language is not finite, since JSON Schema counts 12.0, 12.00, ... as integers,
#: so a generation that reaches the budget is reported with ``finished: false``.
MAX_TOKENS = 300
SEEDS = (0, 1, 2)
BEAM_WIDTH = 4


class TinyLM(torch.nn.Module):
    """A random next-token model over ``vocab_size`` ids (see the module notes)."""

    def __init__(
        self, vocab_size: int, *, prior: torch.Tensor | None = None, dim: int = 64, seed: int = 0
    ) -> None:
        super().__init__()
        with torch.random.fork_rng(
            devices=[]
        ):  # seed the weights without touching the caller's RNG
            torch.manual_seed(seed)
            self.embed = torch.nn.Embedding(vocab_size, dim)
            self.mlp = torch.nn.Sequential(
                torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim)
            )
        self.window = 8
        self.recency = torch.linspace(0.25, 1.0, self.window)
        self.prior = torch.zeros(vocab_size) if prior is None else prior.float()
        # Logits of standard deviation about 2: peaked enough to have preferences, flat enough
        # that seeds differ.
        self.scale = 2.0 / dim**0.5

    @torch.no_grad()
    def forward(self, histories: Sequence[Sequence[int]]) -> torch.Tensor:
        """Next-token logits ``[len(histories), vocab_size]`` (float32) for each token history."""
        rows = len(histories)
        ids = torch.zeros(rows, self.window, dtype=torch.long)
        weights = torch.zeros(rows, self.window)
        for r, history in enumerate(histories):
            tail = list(history[-self.window :])
            if tail:
                ids[r, -len(tail) :] = torch.tensor(tail)
                weights[r, -len(tail) :] = self.recency[-len(tail) :]
        weights = weights / weights.sum(1, keepdim=True).clamp_min(1e-6)
        context = (self.embed(ids) * weights.unsqueeze(2)).sum(1)
        hidden = context + self.mlp(context)
        hidden = hidden / hidden.norm(dim=1, keepdim=True).clamp_min(1e-6) * self.window
        logits: torch.Tensor = hidden @ self.embed.weight.T * self.scale + self.prior
        return logits


def word_prior(vocab: Vocabulary, bonus: float = 3.0) -> torch.Tensor:
    """A unigram prior: ``bonus`` for each ASCII word piece (optionally after a space)."""
    prior = torch.zeros(vocab.vocab_size)
    for i in range(len(vocab)):
        token = vocab.token_bytes(i)
        if token and token.lstrip(b" ").isalpha() and token.isascii():
            prior[i] = bonus
    return prior


def is_valid(text: str, schema: dict[str, Any]) -> tuple[bool, str]:
    """Whether ``text`` parses as JSON and validates against ``schema``, and what checked it."""
    try:
        instance = json.loads(text)
    except ValueError:
        return False, "json.loads"
    try:
        jsonschema: Any = importlib.import_module("jsonschema")  # optional: not a dependency
    except ImportError:
        return True, "json.loads"
    return bool(jsonschema.Draft202012Validator(schema).is_valid(instance)), "jsonschema"


def compile_demo(vocab: Vocabulary) -> tuple[TokenIndex, str]:
    """The demo schema's token index and its regex (the index is built from the regex, which is
    exactly the schema's language)."""
    regex = guided.json_schema_to_regex(DEMO_SCHEMA)
    return TokenIndex.from_regex(regex, vocab), regex


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def _mask_record(where: str, guide: Guide) -> dict[str, Any]:
    index = guide.index
    bitmask = allocate_token_bitmask(1, index.vocab_size)
    start = time.perf_counter()
    guide.fill_bitmask(bitmask)
    first = time.perf_counter() - start
    start = time.perf_counter()
    guide.fill_bitmask(bitmask)
    cached = time.perf_counter() - start
    allowed = int(index.allowed(guide.state).sum())
    return {
        "step": "mask",
        "where": where,
        "allowed_tokens": allowed,
        "first_ms": _ms(first),
        "cached_ms": _ms(cached),
    }


def _generation_record(
    step: str, vocab: Vocabulary, tokens: Sequence[int], elapsed: float, **extra: Any
) -> dict[str, Any]:
    eos = set(vocab.eos_token_ids)
    finished = bool(tokens) and tokens[-1] in eos
    text = decode(vocab, [t for t in tokens if t not in eos])
    valid, checker = is_valid(text, DEMO_SCHEMA)
    return {
        "step": step,
        **extra,
        "tokens": len(tokens),
        "ms": _ms(elapsed),
        "finished": finished,
        "valid_json": valid and finished,
        "checked_by": checker,
        "output": text,
    }


def sample(
    model: TinyLM, index: TokenIndex, prompt: list[int], seed: int, temperature: float = 1.0
) -> list[int]:
    """A seeded constrained generation through the batched sampler, EOS included."""
    sampler = Sampler()
    request = Request(
        request_id=f"seed-{seed}",
        params=SamplingParams(max_tokens=MAX_TOKENS, temperature=temperature, seed=seed),
        prompt_token_ids=prompt,
        eos_token_ids=tuple(index.eos_token_ids),
        guide=Guide(index),
    )
    eos = set(index.eos_token_ids)
    while len(request.output_token_ids) < MAX_TOKENS:
        tokens, _ = sampler(model([prompt + request.output_token_ids]), [request])
        request.output_token_ids.extend(tokens[0])
        if not tokens[0] or tokens[0][-1] in eos:
            break
    sampler.release(request.request_id)
    return request.output_token_ids


class _BeamGuides:
    """One guide per generated prefix; a new prefix's guide is its parent's copy, advanced."""

    def __init__(self, index: TokenIndex, prompt_length: int) -> None:
        self.index = index
        self.prompt_length = prompt_length
        self.guides: dict[tuple[int, ...], Guide] = {(): Guide(index)}

    def guide(self, sequence: Sequence[int]) -> Guide:
        key = tuple(sequence[self.prompt_length :])
        found = self.guides.get(key)
        if found is None:
            found = self.guide(sequence[:-1]).copy()
            found.advance(key[-1])
            self.guides[key] = found
        return found


def constrained_logprobs(
    model: TinyLM, index: TokenIndex, prompt_length: int
) -> Callable[[list[list[int]]], torch.Tensor]:
    """A ``logprobs_fn`` for ``beam_search`` that masks each beam by its own guide.

    Only the first EOS id stays allowed: ``beam_search`` ends a beam on one EOS id, and a second
    one would leave a finished guide emitting EOS until the token budget runs out.
    """
    guides = _BeamGuides(index, prompt_length)
    other_eos = list(index.eos_token_ids[1:])

    def logprobs(sequences: list[list[int]]) -> torch.Tensor:
        logits = model(sequences)
        bitmask = allocate_token_bitmask(len(sequences), index.vocab_size)
        guided.fill_next_token_bitmask([guides.guide(s) for s in sequences], bitmask)
        apply_token_bitmask_inplace(logits, bitmask, vocab_size=index.vocab_size)
        logits[:, index.vocab_size :] = -torch.inf
        logits[:, other_eos] = -torch.inf
        return torch.log_softmax(logits, dim=1)

    return logprobs


def greedy(model: TinyLM, index: TokenIndex, prompt: list[int]) -> tuple[list[int], float]:
    """Argmax decoding under the constraint; the tokens and their summed log-probability."""
    logprobs_fn = constrained_logprobs(model, index, len(prompt))
    eos = set(index.eos_token_ids)
    tokens: list[int] = []
    total = 0.0
    while len(tokens) < MAX_TOKENS:
        scores = logprobs_fn([prompt + tokens])[0]
        best = int(torch.argmax(scores))
        total += float(scores[best])
        tokens.append(best)
        if best in eos:
            break
    return tokens, total


def load_vocabulary(
    tokenizer: str | None = None, tiktoken: str | None = None
) -> tuple[Vocabulary, str]:
    """The vocabulary to run on and a word for where it came from."""
    if tokenizer is not None:
        if tokenizer.endswith(".model"):
            from guided._vocab import from_sentencepiece

            return from_sentencepiece(tokenizer), tokenizer
        return Vocabulary.from_tokenizer_json(tokenizer), tokenizer
    if tiktoken is not None:
        return Vocabulary.from_tiktoken(tiktoken), tiktoken
    return synthetic_vocabulary(), "synthetic"


def run(tokenizer: str | None = None, tiktoken: str | None = None) -> Iterator[dict[str, Any]]:
    """The demo's records, one per step (see the module notes)."""
    # The model is tiny: one torch thread runs it fastest, and several on a busy machine run it
    # over ten times slower. The caller's setting is restored afterwards.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield from _steps(tokenizer, tiktoken)
    finally:
        torch.set_num_threads(threads)


def _steps(tokenizer: str | None, tiktoken: str | None) -> Iterator[dict[str, Any]]:
    start = time.perf_counter()
    vocab, source = load_vocabulary(tokenizer, tiktoken)
    if not vocab.eos_token_ids:
        raise guided.VocabularyError(
            f"the vocabulary from {source} names no EOS token, so no generation could end"
        )
    yield {
        "step": "vocabulary",
        "source": source,
        "tokens": len(vocab),
        "vocab_size": vocab.vocab_size,
        "eos_token_ids": list(vocab.eos_token_ids),
        "load_ms": _ms(time.perf_counter() - start),
    }

    start = time.perf_counter()
    index, regex = compile_demo(vocab)
    compile_seconds = time.perf_counter() - start
    yield {
        "step": "compile",
        "schema": DEMO_SCHEMA,
        "regex_length": len(regex),
        "dfa_states": guided.DFA(regex).num_states,
        "compile_ms": _ms(compile_seconds),
    }

    guide = Guide(index)
    yield _mask_record("start", guide)
    for token in encode_greedy(vocab, '{"name": "'):
        guide.advance(token)
    yield _mask_record("inside a string", guide)

    prompt = encode_greedy(vocab, PROMPT)
    model = TinyLM(vocab.vocab_size, prior=word_prior(vocab))
    for seed in SEEDS:
        start = time.perf_counter()
        tokens = sample(model, index, prompt, seed)
        yield _generation_record("sample", vocab, tokens, time.perf_counter() - start, seed=seed)

    start = time.perf_counter()
    tokens, logprob = greedy(model, index, prompt)
    yield _generation_record(
        "greedy", vocab, tokens, time.perf_counter() - start, logprob=round(logprob, 4)
    )

    start = time.perf_counter()
    logprobs_fn = constrained_logprobs(model, index, len(prompt))
    eos = index.eos_token_ids[0]
    best = beam_search(logprobs_fn, prompt, BEAM_WIDTH, MAX_TOKENS, eos_token_id=eos)[0]
    yield _generation_record(
        "beam_search",
        vocab,
        list(best.tokens),
        time.perf_counter() - start,
        beam_width=BEAM_WIDTH,
        logprob=round(best.logprob, 4),
    )
