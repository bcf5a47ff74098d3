"""Stopping criteria against Transformers' criteria and a byte-level definition.

Stop strings are checked on the four real vocabularies in ``../shared/vocab`` (GPT-2 and Qwen2
byte-level BPE, Llama-2 SentencePiece with byte fallback, o200k through a small tiktoken wrapper
that looks like a byte-level tokenizer to Transformers), over token sequences made by encoding
random texts in random chunks, some of them spelled one byte per token so that multi-byte
characters are split. At every step of every sequence, guided's check must equal Transformers'
``StopStringCriteria`` (which reads the whole sequence, so ``include_prompt=True``) and a plain
definition over the tokens' bytes: some stop string occurs in the text with its last byte in the
newest token. With ``include_prompt=False`` only the drawn tokens count.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public
import tokenizers
import torch
from devices import requires_cuda
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode
from transformers.generation.stopping_criteria import (
    EosTokenCriteria,
    MaxLengthCriteria,
    StopStringCriteria,
)

from conftest import shared_path
from guided import SizeLimitError, Vocabulary
from guided.sampling.state import DecodeState
from guided.sampling.stopping import (
    EndOfSequence,
    MaxLength,
    MaxNewTokens,
    StopStrings,
    criterion,
    stop_strings,
)

STOPS = ["\n\n", "stop", "é", "中文", "🚀", "ab"]
PIECES = [
    "stop", "st", "op", "s", "top", "é", "e", "\u0301", "中", "文", "中文", "🚀", "\n", "\n\n",
    "ab", "a", "b", " ", "x", " the", "café", "!", "ü",
]  # fmt: skip

# ----------------------------------------------------------------------------------- tokenizers


class TiktokenTokenizer:
    """What ``StopStringCriteria`` reads from a transformers tokenizer, over a tiktoken encoding:
    the vocabulary spelled in the GPT-2 byte alphabet, a byte-level decoder, and encoding."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        alphabet = bytes_to_unicode()
        self.encoding = encoding
        self.vocab = {
            "".join(alphabet[b] for b in token): rank
            for token, rank in encoding._mergeable_ranks.items()
        }
        self.tokens = {rank: token for token, rank in self.vocab.items()}
        self.backend_tokenizer = SimpleNamespace(decoder=tokenizers.decoders.ByteLevel())
        self.byte_of = {c: b for b, c in alphabet.items()}

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encoding.encode_ordinary(text)}

    def _convert_id_to_token(self, token_id: int) -> str:
        return self.tokens[token_id]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        data = bytes(self.byte_of[c] for token in tokens for c in token)
        return data.decode("utf-8", errors="replace")


def o200k_encoding(path: Path) -> tiktoken.Encoding:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", "")
        patch.setattr(
            openai_public,
            "load_tiktoken_bpe",
            lambda *_a, **_k: tiktoken.load.load_tiktoken_bpe(str(path)),
        )
        spec = openai_public.o200k_base()
    return tiktoken.Encoding(
        name=spec["name"],
        pat_str=spec["pat_str"],
        mergeable_ranks=spec["mergeable_ranks"],
        special_tokens=spec["special_tokens"],
    )


QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def qwen2_tokenizer() -> PreTrainedTokenizerFast:
    """Qwen2 assembled from its vocab.json and merges.txt (see vocab/README.md)."""
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers

    folder = shared_path("vocab", "qwen2")
    tok = tokenizers.Tokenizer(
        models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt"))
    )
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


class Setup:
    """One tokenizer: Transformers' criterion over all of STOPS, guided's, the token bytes."""

    def __init__(self, tokenizer: Any, vocab: Vocabulary) -> None:
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.theirs = StopStringCriteria(tokenizer, STOPS)
        self.ours = stop_strings(vocab, STOPS, include_prompt=True)
        self.generated_only = stop_strings(vocab, STOPS, include_prompt=False)
        self.byte_token: dict[int, int] = {}
        for i in range(len(vocab)):
            data = vocab.token_bytes(i)
            if data is not None and len(data) == 1:
                self.byte_token.setdefault(data[0], i)

    def encode(self, text: str, bytewise: bool) -> list[int]:
        if bytewise:
            return [self.byte_token[b] for b in text.encode()]
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids


@pytest.fixture(scope="module")
def gpt2() -> Setup:
    tok = PreTrainedTokenizerFast(tokenizer_file=str(shared_path("vocab", "gpt2_tokenizer.json")))
    return Setup(tok, Vocabulary.from_huggingface(tok))


@pytest.fixture(scope="module")
def qwen2() -> Setup:
    tok = qwen2_tokenizer()
    return Setup(tok, Vocabulary.from_huggingface(tok))


@pytest.fixture(scope="module")
def llama2(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("google.protobuf")
    folder = tmp_path_factory.mktemp("llama2")
    shutil.copy(shared_path("vocab", "llama2_tokenizer.model"), folder / "tokenizer.model")
    tok = transformers.LlamaTokenizer.from_pretrained(str(folder))
    return Setup(tok, Vocabulary.from_huggingface(tok))


@pytest.fixture(scope="module")
def o200k() -> Setup:
    path = shared_path("vocab", "o200k_base.tiktoken")
    return Setup(TiktokenTokenizer(o200k_encoding(path)), Vocabulary.from_tiktoken(path))


# ----------------------------------------------------------------------------------- definition


def text_of(vocab: Vocabulary, tokens: Sequence[int]) -> tuple[bytes, int] | None:
    """The tokens' text, cut at the last token without bytes (it is not text), and where the
    last token starts in it; ``None`` when the last token has no bytes."""
    if not tokens:
        return None
    last = vocab.token_bytes(tokens[-1]) if tokens[-1] < vocab.vocab_size else None
    if last is None:
        return None
    before = b""
    for token in reversed(tokens[:-1]):
        data = vocab.token_bytes(token) if token < vocab.vocab_size else None
        if data is None:
            break
        before = data + before
    return before + last, len(before)


def definition(vocab: Vocabulary, strings: Sequence[bytes], tokens: Sequence[int]) -> bool:
    """Some string occurs in the tokens' text with its last byte in the last token."""
    found = text_of(vocab, tokens)
    if found is None:
        return False
    text, start = found
    return any(s in text[max(0, start - len(s) + 1) :] for s in strings)


def where_it_ends(
    vocab: Vocabulary, strings: Sequence[bytes], tokens: Sequence[int]
) -> tuple[int, int] | None:
    """(string, end): among the strings that occur with their last byte in the last token, the
    one that ends first there (the lower index on a tie), and how many of the last token's bytes
    reach up to its end."""
    found = text_of(vocab, tokens)
    if found is None:
        return None
    text, start = found
    for end in range(start + 1, len(text) + 1):
        for i, s in enumerate(strings):
            if end >= len(s) and text[end - len(s) : end] == s:
                return i, end - start
    return None


@st.composite
def sequences(draw: st.DrawFn, setup: Setup) -> list[int]:
    ids: list[int] = []
    for _ in range(draw(st.integers(1, 6))):
        text = "".join(draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=4)))
        ids += setup.encode(text, bytewise=draw(st.booleans()))
    return ids[:40]


def check_every_step(setup: Setup, ids: list[int], splits: list[int], device: str = "cpu") -> None:
    """Every prefix of ``ids`` as one row, its prompt the first ``splits[k]`` tokens."""
    rows = len(ids)
    prompts = [ids[: min(splits[k], k)] for k in range(rows)]
    outputs = [ids[len(prompts[k]) : k + 1] for k in range(rows)]
    state = DecodeState.from_lists(prompts, outputs, budget=1, device=device)
    drawn = torch.tensor(ids, device=device)
    whole = setup.ours.to(device)(state, drawn).cpu()
    found = setup.ours.to(device).find(state, drawn)
    generated = setup.generated_only.to(device)(state, drawn).cpu()
    stops = [s.encode() for s in STOPS]
    for k in range(rows):
        theirs = bool(setup.theirs(torch.tensor([ids[: k + 1]]), None)[0])
        assert bool(whole[k]) == theirs == definition(setup.vocab, stops, ids[: k + 1]), k
        assert bool(generated[k]) == definition(setup.vocab, stops, outputs[k]), k
        where = where_it_ends(setup.vocab, stops, ids[: k + 1])
        assert bool(found.finished[k]) == (where is not None)
        if where is not None:
            newest = setup.vocab.token_bytes(ids[k])
            assert newest is not None
            assert (int(found.string[k]), int(found.end[k])) == where, k
            assert int(found.excess[k]) == len(newest) - where[1]


def run_tokenizer(setup: Setup, data: st.DataObject, device: str = "cpu") -> None:
    ids = data.draw(sequences(setup))
    splits = data.draw(st.lists(st.integers(0, 40), min_size=len(ids), max_size=len(ids)))
    check_every_step(setup, ids, splits, device)


# Each example calls Transformers' criterion once per step (up to 40): 120 examples per
# tokenizer keep the four within the suite's time.
TOKENIZER_EXAMPLES = settings(max_examples=120)


@TOKENIZER_EXAMPLES
@given(data=st.data())
def test_gpt2(gpt2: Setup, data: st.DataObject) -> None:
    run_tokenizer(gpt2, data)


@TOKENIZER_EXAMPLES
@given(data=st.data())
def test_qwen2(qwen2: Setup, data: st.DataObject) -> None:
    run_tokenizer(qwen2, data)


@TOKENIZER_EXAMPLES
@given(data=st.data())
def test_llama2(llama2: Setup, data: st.DataObject) -> None:
    run_tokenizer(llama2, data)


@TOKENIZER_EXAMPLES
@given(data=st.data())
def test_o200k(o200k: Setup, data: st.DataObject) -> None:
    run_tokenizer(o200k, data)


@requires_cuda
# The device path of the same check, on a byte-level BPE and a byte-fallback vocabulary.
@settings(max_examples=60)
@given(data=st.data())
def test_gpt2_and_llama2_on_cuda(gpt2: Setup, llama2: Setup, data: st.DataObject) -> None:
    run_tokenizer(gpt2, data, "cuda")
    run_tokenizer(llama2, data, "cuda")


def test_a_string_that_ends_inside_the_newest_token(gpt2: Setup) -> None:
    # "ENDE" is GPT-2 "EN" + "DE": "END" ends one byte into "DE". With "EN" in the prompt,
    # Transformers' criterion stops (it reads the whole sequence), and so does the default here;
    # searching the drawn tokens only, as vLLM does, it does not.
    ids = gpt2.encode("ENDE", bytewise=False)
    assert [gpt2.vocab.token_bytes(i) for i in ids] == [b"EN", b"DE"]
    state = DecodeState.from_lists([ids[:1]], [ids[1:]])
    drawn = torch.tensor(ids[1:])
    assert bool(StopStringCriteria(gpt2.tokenizer, ["END"])(torch.tensor([ids]), None)[0])
    stop = stop_strings(gpt2.vocab, ["END", "DE"])
    found = stop.find(state, drawn)
    assert bool(stop(state, drawn)[0])
    # "END" ends after one byte of "DE", before "DE" itself does: the text keeps "END".
    assert (found.string.item(), found.end.item(), found.excess.item()) == (0, 1, 1)
    assert not bool(stop_strings(gpt2.vocab, ["END"], include_prompt=False)(state, drawn)[0])


def test_split_code_points_stop_on_every_vocabulary(
    gpt2: Setup, qwen2: Setup, llama2: Setup, o200k: Setup
) -> None:
    # "é" and "中文" spelled one byte per token: the string ends inside the last byte's token.
    for setup in (gpt2, qwen2, llama2, o200k):
        ids = setup.encode("caf", bytewise=False) + setup.encode("é", bytewise=True)
        check_every_step(setup, ids, [0] * len(ids))
        state = DecodeState.from_lists([[]], [ids])
        assert bool(setup.ours(state, torch.tensor(ids[-1:]))[0])
        half = DecodeState.from_lists([[]], [ids[:-1]])
        assert not bool(setup.ours(half, torch.tensor(ids[-2:-1]))[0])
        ids = setup.encode("中", bytewise=False) + setup.encode("文", bytewise=True)
        check_every_step(setup, ids, [0] * len(ids))


@st.composite
def stop_sets(draw: st.DrawFn) -> list[str]:
    text = st.one_of(
        st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map("".join),
        st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=4),
    )
    return draw(st.lists(text, min_size=1, max_size=3))


@settings(max_examples=200)  # compiles a table over the 50k GPT-2 tokens per example
@given(strings=stop_sets(), data=st.data())
def test_random_stop_strings_equal_the_definition(
    gpt2: Setup, strings: list[str], data: st.DataObject
) -> None:
    ours = stop_strings(gpt2.vocab, strings, include_prompt=True)
    ids: list[int] = []
    for _ in range(data.draw(st.integers(1, 5))):
        text = "".join(data.draw(st.lists(st.sampled_from(PIECES + strings), max_size=3)))
        ids += gpt2.encode(text, bytewise=data.draw(st.booleans()))
    ids = ids[:40]
    if not ids:
        return
    state = DecodeState.from_lists([[]] * len(ids), [ids[: k + 1] for k in range(len(ids))])
    got = ours(state, torch.tensor(ids))
    stops = [s.encode() for s in strings]
    for k in range(len(ids)):
        assert bool(got[k]) == definition(gpt2.vocab, stops, ids[: k + 1]), (strings, k)


# ----------------------------------------------------------------------------------- details


def small_vocab() -> Vocabulary:
    # 0 "ab", 1 special, 2 "c", 3 "\xc3", 4 "\xa9", 5 "x"; ids 6..7 exist in the logits only.
    return Vocabulary([b"ab", None, b"c", b"\xc3", b"\xa9", b"x"], vocab_size=8)


def test_tokens_without_bytes_break_a_match_and_prompts_count_only_when_asked() -> None:
    vocab = small_vocab()
    whole = stop_strings(vocab, ["abc", "é"])
    generated = stop_strings(vocab, ["abc", "é"], include_prompt=False)
    rows = [
        ([], [0, 2]),  # "abc"
        ([], [0, 1, 2]),  # a special token between: no match
        ([], [0, 7, 2]),  # an id without bytes: no match
        ([0], [2]),  # starts in the prompt
        ([3], [4]),  # "é" split, its lead byte in the prompt
        ([], [3, 4]),
        ([], [3, 4, 5]),  # the match is older than the newest token
        ([5], []),  # nothing drawn yet
    ]
    state = DecodeState.from_lists([p for p, _ in rows], [o for _, o in rows], budget=2)
    drawn = torch.tensor([(p + o)[-1] for p, o in rows])
    assert whole(state, drawn).tolist() == [True, False, False, True, True, True, False, False]
    assert generated(state, drawn).tolist() == [
        True,
        False,
        False,
        False,
        False,
        True,
        False,
        False,
    ]


def test_end_of_sequence_and_lengths_equal_transformers() -> None:
    ids = [[5, 1, 2], [3, 4, 9], [7, 8, 1]]
    state = DecodeState.from_lists([[5], [3, 4], []], [[1, 2], [9], [7, 8, 1]], budget=3)
    drawn = torch.tensor([2, 9, 1])
    for eos in ([2], [1, 9], [6]):
        theirs = torch.cat([EosTokenCriteria(eos)(torch.tensor([row]), None) for row in ids])
        assert torch.equal(EndOfSequence(eos)(state, drawn), theirs)
    # Per-row EOS lists.
    assert EndOfSequence([[2], [4], [1, 3]])(state, drawn).tolist() == [True, False, True]
    for length in (2, 3, 4):
        theirs = torch.cat([MaxLengthCriteria(length)(torch.tensor([row]), None) for row in ids])
        assert torch.equal(MaxLength(length)(state, drawn), theirs)
    assert MaxNewTokens(2)(state, drawn).tolist() == [True, False, True]
    assert MaxNewTokens([3, 1, 4])(state, drawn).tolist() == [False, True, False]
    either = criterion(MaxNewTokens([3, 1, 4]), [EndOfSequence(2)])
    assert either(state, drawn).tolist() == [True, True, False]
    assert criterion()(state, drawn).tolist() == [False, False, False]


def test_a_decode_loop() -> None:
    # Commit tokens step by step; retire rows as the criterion says; finished rows stop growing.
    vocab = small_vocab()
    done = criterion(
        stop_strings(vocab, ["abc"], include_prompt=False), EndOfSequence(5), MaxNewTokens(4)
    )
    state = DecodeState.from_lists([[2], [2], [2]])
    script = [[0, 0, 0], [2, 5, 0], [0, 0, 0], [2, 2, 2]]
    finished_at = [-1, -1, -1]
    for step, tokens in enumerate(script):
        drawn = torch.tensor(tokens)
        state.commit(drawn)
        finished = done(state, drawn) & state.active
        for i in range(3):
            if bool(finished[i]):
                finished_at[i] = step
        state.finish(finished)
    assert finished_at == [1, 1, 3]
    assert state.generated().tolist()[0][:2] == [0, 2]
    assert state.drawn.tolist() == [2, 2, 4]


def test_accepts_a_transformers_tokenizer(gpt2: Setup) -> None:
    direct = stop_strings(gpt2.tokenizer, STOPS, include_prompt=True)
    for name in ("slots", "lengths", "ends", "inside"):
        assert torch.equal(getattr(direct, name), getattr(gpt2.ours, name))
    moved = gpt2.ours.to("cpu")
    assert isinstance(moved, StopStrings) and moved.strings == gpt2.ours.strings


def test_bad_stop_strings_and_limits() -> None:
    vocab = small_vocab()
    with pytest.raises(ValueError, match="empty"):
        stop_strings(vocab, ["ab", ""])
    with pytest.raises(ValueError, match="str or bytes"):
        stop_strings(vocab, [b"ab", 3])  # type: ignore[list-item]
    with pytest.raises(SizeLimitError) as raised:
        stop_strings(vocab, ["abc", "abcd"], max_stop_bytes=5)
    assert raised.value.limit == "max_stop_bytes"
    with pytest.raises(SizeLimitError) as raised:
        stop_strings(vocab, ["abc"], max_table_bytes=10)
    assert raised.value.limit == "max_table_bytes"
    # A string no token can end is allowed: it never matches.
    never = stop_strings(vocab, ["zz"])
    state = DecodeState.from_lists([[]], [[5, 5]])
    assert not bool(never(state, torch.tensor([5]))[0])
    # One string, as str or bytes.
    assert stop_strings(vocab, "abc").strings == stop_strings(vocab, [b"abc"]).strings == (b"abc",)
