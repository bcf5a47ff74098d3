"""``model.generate()`` under guided's Transformers processors, end to end and row by row.

The model is a 2-layer GPT-2 with random weights built from ``GPT2Config`` (nothing downloaded); the
tokenizer is the real GPT-2 one, read from ``shared/vocab/gpt2_tokenizer.json`` through
``PreTrainedTokenizerFast``. A random model has no idea what JSON is, so every valid output is the
constraint's doing. Outputs are judged by engines independent of guided: Python's ``re`` for
regexes, ``json.loads`` and ``jsonschema`` for schemas. Every constraint here has a bounded
language, and ``max_new_tokens`` is its longest match in bytes plus one (a token carries at least
one byte, EOS is the last), so every generation must end with EOS inside the budget; an output cut
short would fail the test rather than pass unnoticed.

The row-tracking tests call a processor directly with hand-made ``input_ids``: beams reordered and
duplicated, left-padded prompts, finished rows padded, and compare each row's mask with a brute
force oracle, the ``regex`` package's partial matching of the row's text plus each token's text.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
import regex
import torch
import transformers

import guided
from conftest import shared_path
from guided import InvalidTokenError
from guided.integrations.transformers import (
    GrammarLogitsProcessor,
    GuidedLogitsProcessor,
    JSONSchemaLogitsProcessor,
    RegexLogitsProcessor,
    vocabulary_of,
)

EOS = 50256
PATTERN = r"(?:yes|no|maybe), [0-9]{1,3} (?:cats|dogs)\."
# A finite language, so that every generation ends within its longest match (an "integer" would
# not do: JSON Schema counts 5.0, 5.00, ... as integers).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 6},
        "active": {"type": "boolean"},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "owner": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "^[0-9]{1,4}$"},
                "admin": {"type": "boolean"},
            },
            "required": ["id"],
            "additionalProperties": False,
        },
        "note": {"type": ["string", "null"], "maxLength": 4},
    },
    "required": ["name", "color"],
    "additionalProperties": False,
}
PROMPTS = ["Answer:", "Here is a much longer prompt, so the batch needs left padding:"]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(shared_path("vocab", "gpt2_tokenizer.json")),
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="module")
def model(tokenizer: Any) -> Any:
    torch.manual_seed(1234)
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer), n_positions=512, n_embd=32, n_layer=2, n_head=2
    )
    return transformers.GPT2LMHeadModel(config).eval()


def longest_match_bytes(pattern: str) -> int:
    """The length of the longest byte string that fully matches ``pattern`` (finite languages)."""
    dfa = guided.DFA(pattern)
    table, accepting = dfa.table, dfa.accepting
    memo: dict[int, int] = {}
    on_path: set[int] = set()

    def longest(state: int) -> int:  # -1: no accepting state reachable
        if state in memo:
            return memo[state]
        if state in on_path:
            raise ValueError("the language is infinite")
        on_path.add(state)
        best = 0 if accepting[state] else -1
        for successor in set(table[state].tolist()) - {dfa.dead}:
            tail = longest(successor)
            if tail >= 0:
                best = max(best, tail + 1)
        on_path.discard(state)
        memo[state] = best
        return best

    return longest(dfa.start)


def generated_texts(tokenizer: Any, output: torch.Tensor, prompt_length: int) -> list[str]:
    """Each row's generated text; asserts it ended with EOS (followed by padding only)."""
    texts = []
    for row in output[:, prompt_length:].tolist():
        assert EOS in row, f"generation did not end within the budget: {row}"
        end = row.index(EOS)
        assert all(t == EOS for t in row[end:])
        texts.append(tokenizer.decode(row[:end]))
    return texts


def generate(model: Any, tokenizer: Any, processor: Any, budget: int, **kwargs: Any) -> list[str]:
    prompts = kwargs.pop("prompts", PROMPTS[:1])
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    output = model.generate(
        **batch,
        logits_processor=[processor],
        max_new_tokens=budget,
        pad_token_id=EOS,
        eos_token_id=EOS,
        **kwargs,
    )
    return generated_texts(tokenizer, output, batch.input_ids.shape[1])


def assert_valid_json(texts: list[str]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)


# --------------------------------------------------------------------------- end to end: regex


def test_regex_sampling_always_matches(model: Any, tokenizer: Any) -> None:
    budget = longest_match_bytes(PATTERN) + 1
    index = guided.TokenIndex.from_regex(PATTERN, vocabulary_of(tokenizer))
    outputs = []
    for seed in range(8):
        torch.manual_seed(seed)
        outputs += generate(model, tokenizer, GuidedLogitsProcessor(index), budget, do_sample=True)
    assert all(re.fullmatch(PATTERN, text) for text in outputs), outputs
    assert len(set(outputs)) > 1  # the seeds were honoured: sampling, not a fixed answer


def test_regex_beam_search(model: Any, tokenizer: Any) -> None:
    budget = longest_match_bytes(PATTERN) + 1
    processor = RegexLogitsProcessor(PATTERN, tokenizer)
    texts = generate(
        model, tokenizer, processor, budget, num_beams=3, num_return_sequences=3, do_sample=False
    )
    assert len(texts) == 3
    assert all(re.fullmatch(PATTERN, text) for text in texts), texts


def test_regex_left_padded_batch(model: Any, tokenizer: Any) -> None:
    budget = longest_match_bytes(PATTERN) + 1
    processor = RegexLogitsProcessor(PATTERN, tokenizer)
    torch.manual_seed(7)
    texts = generate(model, tokenizer, processor, budget, prompts=PROMPTS, do_sample=True)
    assert len(texts) == 2
    assert all(re.fullmatch(PATTERN, text) for text in texts), texts


def test_processor_restarts_for_a_new_generate_call(model: Any, tokenizer: Any) -> None:
    budget = longest_match_bytes(PATTERN) + 1
    processor = RegexLogitsProcessor(PATTERN, tokenizer)
    for seed in (1, 2):
        torch.manual_seed(seed)
        texts = generate(model, tokenizer, processor, budget, prompts=PROMPTS, do_sample=True)
        assert all(re.fullmatch(PATTERN, text) for text in texts), texts


def test_logit_columns_past_the_vocabulary_are_never_drawn(tokenizer: Any) -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer) + 64, n_positions=128, n_embd=16, n_layer=1, n_head=2
    )
    wide = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # make the padding columns the model's favourites
        wide.lm_head.weight[len(tokenizer) :] *= 50
    budget = longest_match_bytes(PATTERN) + 1
    texts = generate(wide, tokenizer, RegexLogitsProcessor(PATTERN, tokenizer), budget)
    assert all(re.fullmatch(PATTERN, text) for text in texts), texts


# ---------------------------------------------------------------------- end to end: JSON Schema


def test_json_schema_sampling_is_valid_for_20_seeds(model: Any, tokenizer: Any) -> None:
    budget = longest_match_bytes(guided.json_schema_to_regex(SCHEMA)) + 1
    index = guided.TokenIndex.from_regex(
        guided.json_schema_to_regex(SCHEMA), vocabulary_of(tokenizer)
    )
    texts = []
    for seed in range(20):
        torch.manual_seed(seed)
        processor = GuidedLogitsProcessor(index)
        texts += generate(model, tokenizer, processor, budget, do_sample=True)
    assert_valid_json(texts)
    assert len(set(texts)) > 1


def test_json_schema_processor_beams_and_left_padding(model: Any, tokenizer: Any) -> None:
    budget = longest_match_bytes(guided.json_schema_to_regex(SCHEMA)) + 1
    processor = JSONSchemaLogitsProcessor(SCHEMA, tokenizer)
    texts = generate(
        model, tokenizer, processor, budget, num_beams=3, num_return_sequences=3, do_sample=False
    )
    assert len(texts) == 3
    assert_valid_json(texts)
    torch.manual_seed(3)
    processor = JSONSchemaLogitsProcessor(json.dumps(SCHEMA), tokenizer)
    texts = generate(model, tokenizer, processor, budget, prompts=PROMPTS, do_sample=True)
    assert len(texts) == 2
    assert_valid_json(texts)


def test_grammar_processor_nests_within_its_stack(model: Any, tokenizer: Any) -> None:
    # a recursive rule with four open calls at most: a generation either closes what it opened,
    # or nests past the stack and stops with SizeLimitError; it never gets a narrowed mask
    grammar = 'root ::= "(" root ")" | "[" root "]" | "x"'
    texts, stopped = [], 0
    for seed in range(8):
        torch.manual_seed(seed)
        processor = GrammarLogitsProcessor(grammar, tokenizer, max_stack=4)
        try:
            texts += generate(model, tokenizer, processor, 12, do_sample=True)
        except guided.SizeLimitError as e:
            assert e.limit == "max_stack"
            stopped += 1
    for text in texts:
        inner = text
        while inner != "x":  # peel one matching pair at a time
            assert inner[0] + inner[-1] in ("()", "[]"), text
            inner = inner[1:-1]
        assert len(text) <= 5, text
    assert texts, f"every generation nested past the stack ({stopped})"


# ------------------------------------------------------------------------------ row tracking


def oracle_allowed(tokenizer: Any, pattern: str, text: bytes, width: int) -> np.ndarray:
    """Brute force: token t may follow ``text`` iff text + t can still become a full match."""
    compiled = regex.compile(pattern)
    allowed = np.zeros(width, dtype=bool)
    vocab = vocabulary_of(tokenizer)
    # Latin-1 maps bytes to code points one to one; the pattern is ASCII, so a non-ASCII byte
    # matches nothing, exactly as it does over bytes.
    prefix = text.decode("latin-1")
    for t in range(len(vocab)):
        piece = vocab.token_bytes(t)
        if piece and compiled.fullmatch(prefix + piece.decode("latin-1"), partial=True):
            allowed[t] = True
    if compiled.fullmatch(prefix):
        allowed[EOS] = True
    return allowed


def encode(tokenizer: Any, text: str) -> list[int]:
    ids: list[int] = tokenizer.encode(text)
    return ids


def test_rows_follow_their_own_history_when_beams_reorder(tokenizer: Any) -> None:
    pattern = r"(?:ab|cd)[0-9]{1,2}x"
    processor = RegexLogitsProcessor(pattern, tokenizer)
    vocab = vocabulary_of(tokenizer)
    prompt = [464, 3290, 25]
    width = len(tokenizer) + 7  # a padded output layer
    ab, cd, one = encode(tokenizer, "ab"), encode(tokenizer, "cd"), encode(tokenizer, "1")
    assert len(ab) == len(cd) == len(one) == 1
    # Step by step the rows hold these histories in changing order, as beams do.
    steps = [
        [[], [], []],
        [ab, cd, ab],
        [cd + one, ab + one, ab + one],  # row 0 continues old row 1; rows 1 and 2 share a history
        [ab + one + one, cd + one + one, ab + one + one],
    ]
    for rows in steps:
        input_ids = torch.tensor([prompt + r for r in rows])
        scores = torch.randn(len(rows), width)
        before = scores.clone()
        out = processor(input_ids, scores)
        assert torch.equal(scores, before), "the caller's scores must not be modified"
        for r, row in enumerate(rows):
            text = b"".join(vocab.token_bytes(t) or b"" for t in row)
            expected = oracle_allowed(tokenizer, pattern, text, width)
            got = (out[r] > -torch.inf).numpy()
            np.testing.assert_array_equal(got, expected, err_msg=f"row {r} after {text!r}")
            assert torch.equal(out[r][expected], before[r][expected])


def test_finished_rows_allow_only_eos_and_ignore_padding(tokenizer: Any) -> None:
    pattern = r"ab"
    processor = RegexLogitsProcessor(pattern, tokenizer)
    ab = encode(tokenizer, "ab")
    prompt = [50256, 50256, 464]  # left padding, then the prompt
    width = len(tokenizer)
    processor(torch.tensor([prompt, prompt]), torch.zeros(2, width))
    # Row 0 wrote "ab" and is final: only EOS may follow.
    out = processor(torch.tensor([prompt + ab, prompt + ab]), torch.zeros(2, width))
    assert (out > -torch.inf).sum(1).tolist() == [1, 1]
    assert out[0, EOS] == 0
    # Row 0 took EOS, then generate pads it (pad = EOS here): still EOS only, no error.
    out = processor(torch.tensor([prompt + ab + [EOS], prompt + ab + [EOS]]), torch.zeros(2, width))
    out = processor(
        torch.tensor([prompt + ab + [EOS, EOS], prompt + ab + [EOS, EOS]]), torch.zeros(2, width)
    )
    assert (out > -torch.inf).sum(1).tolist() == [1, 1]


def test_a_row_stopped_by_another_criterion_is_padded(tokenizer: Any) -> None:
    pad = 0  # "!" as the pad token: a row padded before the constraint is satisfied
    processor = RegexLogitsProcessor(r"[a-z]{1,20}", tokenizer, pad_token_id=pad)
    prompt = [464]
    a = encode(tokenizer, "a")
    processor(torch.tensor([prompt, prompt]), torch.zeros(2, len(tokenizer)))
    processor(torch.tensor([prompt + a, prompt + a]), torch.zeros(2, len(tokenizer)))
    out = processor(
        torch.tensor([prompt + a + [pad], prompt + a + a]), torch.zeros(2, len(tokenizer))
    )
    assert (out[0] > -torch.inf).nonzero().flatten().tolist() == [pad]
    assert (out[1] > -torch.inf).sum() > 1


def test_a_token_outside_the_constraint_raises(tokenizer: Any) -> None:
    processor = RegexLogitsProcessor(r"[0-9]+", tokenizer)
    prompt = [464, 3290]
    processor(torch.tensor([prompt]), torch.zeros(1, len(tokenizer)))
    with pytest.raises(InvalidTokenError, match="does not allow"):
        processor(torch.tensor([prompt + encode(tokenizer, "x")]), torch.zeros(1, len(tokenizer)))


def test_bad_shapes_and_arguments_are_rejected(tokenizer: Any) -> None:
    processor = RegexLogitsProcessor(r"a", tokenizer)
    with pytest.raises(ValueError, match="same rows"):
        processor(torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, len(tokenizer)))
    with pytest.raises(TypeError, match="TokenIndex"):
        GuidedLogitsProcessor("a")  # type: ignore[arg-type]
    with pytest.raises(guided.RegexSyntaxError):
        RegexLogitsProcessor(r"(?<=a)b", tokenizer)


def test_vocabulary_and_indexes_are_shared_per_tokenizer(tokenizer: Any) -> None:
    assert vocabulary_of(tokenizer) is vocabulary_of(tokenizer)
    first, second = (RegexLogitsProcessor(r"[ab]+", tokenizer) for _ in range(2))
    assert first.index is second.index
    own = guided.IndexCache(vocabulary_of(tokenizer))
    assert RegexLogitsProcessor(r"[ab]+", tokenizer, cache=own).index is not first.index
    assert vocabulary_of(tokenizer).eos_token_ids == (EOS,)
    assert vocabulary_of(tokenizer, eos_token_ids=[0]).eos_token_ids == (0,)
