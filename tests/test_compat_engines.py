"""The vLLM and SGLang adapters, in simulated engine loops, against the engines' xgrammar grammars.

Neither engine is installed, so each test carries a faithful copy of the engine's own grammar
wrapper over the real xgrammar (vLLM's ``XgrammarGrammar``, SGLang's ``XGrammarGrammar``, reduced
to the calls the loop makes) and runs the same loop through it and through guided's adapter:

- vLLM with speculative decoding: draft tokens (some valid, some not) are trimmed with
  ``validate_tokens``; one bitmask row is filled per draft position while each draft token is
  accepted, then all are rolled back; a seeded "target model" samples from the masked rows,
  keeps the drafts it agrees with and adds a bonus token; those are accepted for good.
- SGLang with jump-forward: masks are filled, moved and applied to random logits; the argmax is
  accepted; whenever the grammar forces text, it is appended, the whole output re-tokenized with the
  real GPT-2 tokenizer, and the grammar told to catch up with ``jump_and_retokenize``.

Every mask row, every validated prefix, every accept result, and every termination flag must agree
between the two sides.
"""

from __future__ import annotations

import inspect
import random
from typing import Any

import numpy as np
import pytest
import torch
import xgrammar as xgr
from compat_support import (
    GPT2_EOS,
    GPT2_VOCAB_SIZE,
    allowed_ids,
    gpt2_hf_tokenizer,
    unpack,
)

import guided
from guided.compat.sglang import GuidedGrammarBackend, GuidedGrammarObject
from guided.compat.vllm import GuidedBackend, GuidedGrammar

V = GPT2_VOCAB_SIZE
PATTERNS = [
    r'\{"name": "[a-z]{1,8}", "age": [0-9]{1,2}\}',
    r"(yes|no|maybe)[0-9]{1,3}",
    r"[a-z]{2,5}@[a-z]{2,4}\.(com|org)",
    # where dialects differ: xgrammar's `.` takes a newline, `\s` U+00A0, `\z` is a `z`
    r"(yes|no).\s[a-c]\z",
]


class VllmXgrammarGrammar:
    """vLLM's ``XgrammarGrammar`` (vllm/v1/structured_output/backend_xgrammar.py), as called."""

    def __init__(self, matcher: xgr.GrammarMatcher) -> None:
        self.matcher = matcher
        self.num_processed_tokens = 0
        self._is_terminated = False

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        if self._is_terminated:
            return False
        for token in tokens:
            if not self.matcher.accept_token(token):
                return False
            self.num_processed_tokens += 1
        self._is_terminated = self.matcher.is_terminated()
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        accepted: list[int] = []
        for token in tokens:
            if self.matcher.accept_token(token):
                accepted.append(token)
            else:
                break
        if accepted:
            self.matcher.rollback(len(accepted))
        return accepted

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)
        self.num_processed_tokens -= num_tokens
        self._is_terminated = self.matcher.is_terminated()

    def fill_bitmask(self, bitmask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_next_token_bitmask(bitmask, idx)

    def is_terminated(self) -> bool:
        return self._is_terminated

    def reset(self) -> None:
        self.num_processed_tokens = 0
        self.matcher.reset()


class SglangXgrammarGrammar:
    """SGLang's ``XGrammarGrammar`` (sglang/srt/constrained/xgrammar_backend.py), as called."""

    def __init__(self, matcher: xgr.GrammarMatcher, ctx: xgr.CompiledGrammar) -> None:
        self.matcher = matcher
        self.ctx = ctx
        self.finished = False

    def accept_token(self, token: int) -> None:
        if not self.is_terminated() and not self.matcher.accept_token(token):
            raise ValueError(f"Tokens not accepted: {token}")

    def rollback(self, k: int) -> None:
        self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: object) -> torch.Tensor:
        return xgr.allocate_token_bitmask(batch_size, vocab_size)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: object) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        xgr.apply_token_bitmask_inplace(logits, vocab_mask)

    def copy(self) -> SglangXgrammarGrammar:
        return SglangXgrammarGrammar(xgr.GrammarMatcher(self.ctx), self.ctx)

    def try_jump_forward(self, tokenizer: object) -> tuple[list[int], str] | None:
        s = self.matcher.find_jump_forward_string()
        return ([], s) if s else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        return helper[1], -1

    def jump_and_retokenize(self, old: list[int], new: list[int], next_state: int) -> None:
        k = 0
        for i, old_id in enumerate(old):
            if old_id == new[i]:
                k = i + 1
            else:
                break
        if k < len(old):
            self.matcher.rollback(len(old) - k)
        for i in range(k, len(new)):
            assert self.matcher.accept_token(new[i])


@pytest.fixture(scope="module")
def xgr_compiler() -> xgr.GrammarCompiler:
    info = xgr.TokenizerInfo.from_huggingface(gpt2_hf_tokenizer(), stop_token_ids=[GPT2_EOS])
    return xgr.GrammarCompiler(info)


@pytest.fixture(scope="module")
def vllm_backend() -> GuidedBackend:
    return GuidedBackend(gpt2_hf_tokenizer(), V)


def rows_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(np.array_equal(unpack(a.numpy(), V), unpack(b.numpy(), V)))


def test_vllm_grammar_has_exactly_the_abstract_methods() -> None:
    public = {n for n, f in inspect.getmembers(GuidedGrammar, inspect.isfunction) if n[0] != "_"}
    assert public == {
        "accept_tokens",
        "validate_tokens",
        "rollback",
        "fill_bitmask",
        "is_terminated",
        "reset",
    }
    backend = {n for n, f in inspect.getmembers(GuidedBackend, inspect.isfunction) if n[0] != "_"}
    assert {"compile_grammar", "allocate_token_bitmask", "destroy"} <= backend


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("num_spec", [1, 3])
def test_vllm_speculative_loop_matches(
    pattern: str, num_spec: int, xgr_compiler: xgr.GrammarCompiler, vllm_backend: GuidedBackend
) -> None:
    ctx = xgr_compiler.compile_regex(pattern)
    trimmed = finished = 0
    for seed in range(6):
        rng = random.Random(seed)
        theirs = VllmXgrammarGrammar(xgr.GrammarMatcher(ctx))
        ours = vllm_backend.compile_grammar("REGEX", pattern)
        tb = xgr.allocate_token_bitmask(num_spec + 1, V)
        ob = vllm_backend.allocate_token_bitmask(num_spec + 1)
        for _ in range(30):
            assert theirs.is_terminated() == ours.is_terminated()
            if ours.is_terminated():
                assert (
                    theirs.accept_tokens("r", [GPT2_EOS]) is ours.accept_tokens("r", [5]) is False
                )
                finished += 1
                break
            # a draft model: mostly grammatical guesses, sometimes a wrong one
            draft: list[int] = []
            walker = ours.guide.copy()
            for _ in range(num_spec):
                allowed = sorted(guided_allowed(walker))
                if not allowed or rng.random() < 0.2:
                    draft.append(rng.randrange(V))
                    break
                token = rng.choice(allowed)
                draft.append(token)
                if token == GPT2_EOS:
                    break
                walker.advance(token)
            valid = theirs.validate_tokens(draft)
            assert ours.validate_tokens(draft) == valid
            trimmed += len(valid) < len(draft)
            # the scheduler's bitmask pass: a row per position, accepting drafts as it goes
            advanced = 0
            for pos, token in enumerate([*valid, -1]):
                assert theirs.is_terminated() == ours.is_terminated()
                for grammar, bitmask in ((theirs, tb), (ours, ob)):
                    if grammar.is_terminated():  # vLLM fills a full row for a finished request
                        bitmask[pos].fill_(-1)
                    else:
                        grammar.fill_bitmask(bitmask, pos)
                assert rows_equal(tb[pos], ob[pos]), (pattern, seed, pos)
                if token >= 0 and not ours.is_terminated():
                    assert theirs.accept_tokens("r", [token]) is ours.accept_tokens("r", [token])
                    advanced += 1
            if advanced:
                theirs.rollback(advanced)
                ours.rollback(advanced)
            # the target model: agrees with a draft token at random, then draws a bonus token
            kept: list[int] = []
            for pos in range(len(valid) + 1):
                row = sorted(allowed_ids(ob[pos].numpy(), V))
                if pos < len(valid) and rng.random() < 0.7:
                    kept.append(valid[pos])
                    if valid[pos] == GPT2_EOS:
                        break
                    continue
                if row:
                    kept.append(rng.choice(row))
                break
            assert theirs.accept_tokens("r", kept) is ours.accept_tokens("r", kept) is True
            assert theirs.num_processed_tokens == ours.num_processed_tokens
    assert trimmed and finished  # the loop met wrong drafts and finished requests


def guided_allowed(guide: guided.Guide) -> set[int]:
    return {int(t) for t in np.flatnonzero(guide.index.allowed(guide.state))}


def test_vllm_accept_tokens_is_all_or_nothing(vllm_backend: GuidedBackend) -> None:
    tok = gpt2_hf_tokenizer()
    grammar = vllm_backend.compile_grammar("REGEX", "(yes|no)[0-9]")
    before = vllm_backend.allocate_token_bitmask(1)
    grammar.fill_bitmask(before, 0)
    yes, bad = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    assert grammar.accept_tokens("r", [yes, bad]) is False
    after = vllm_backend.allocate_token_bitmask(1)
    grammar.fill_bitmask(after, 0)
    assert torch.equal(before, after) and grammar.num_processed_tokens == 0
    assert grammar.validate_tokens([yes, bad]) == [yes]
    assert grammar.accept_tokens("r", [yes, tok.convert_tokens_to_ids("7"), GPT2_EOS])
    assert grammar.is_terminated()
    grammar.rollback(1)
    assert not grammar.is_terminated() and grammar.num_processed_tokens == 2
    grammar.reset()
    assert grammar.num_processed_tokens == 0


def test_vllm_request_types(xgr_compiler: xgr.GrammarCompiler, vllm_backend: GuidedBackend) -> None:
    tok = gpt2_hf_tokenizer()
    choices = ["cat", "dog food", "a|b"]
    ours = vllm_backend.compile_grammar("CHOICE", '["cat", "dog food", "a|b"]')
    theirs = xgr.GrammarMatcher(xgr_compiler.compile_regex("cat|dog food|a\\|b"))
    tb, ob = xgr.allocate_token_bitmask(1, V), vllm_backend.allocate_token_bitmask(1)
    theirs.fill_next_token_bitmask(tb)
    ours.fill_bitmask(ob, 0)
    assert rows_equal(tb[0], ob[0])
    for choice in choices:
        grammar = vllm_backend.compile_grammar("CHOICE", choices.__repr__())
        assert grammar.accept_tokens("r", [*tok.encode(choice), GPT2_EOS]), choice

    class Options:  # vLLM's StructuredOutputOptions members are read by name
        name = "JSON_OBJECT"

    obj = vllm_backend.compile_grammar(Options(), "")
    assert obj.accept_tokens("r", [*tok.encode('{"a": [1, {"b": null}]}'), GPT2_EOS])
    assert not vllm_backend.compile_grammar(Options(), "").accept_tokens("r", tok.encode("[1]"))
    for kind in ("STRUCTURAL_TAG", "nonsense"):
        with pytest.raises(guided.GuidedError):
            vllm_backend.compile_grammar(kind, 'root ::= "a"')
    nested = vllm_backend.compile_grammar("GRAMMAR", 'root ::= "a" | "(" root ")"')
    assert nested.accept_tokens("r", [*tok.encode("((a))"), GPT2_EOS])
    # no `::=` on any line: Lark, as vLLM tells them apart (`::=` in a comment does not count)
    lark = vllm_backend.compile_grammar("GRAMMAR", '// not ::= ebnf\nstart: "a" | "(" start ")"')
    assert lark.accept_tokens("r", [*tok.encode("((a))"), GPT2_EOS])
    with pytest.raises(guided.GrammarSyntaxError):
        vllm_backend.compile_grammar("GRAMMAR", "root ::= undefined")
    assert vllm_backend.compile_index("REGEX", "ab") is vllm_backend.compile_index("regex", "ab")
    padded = GuidedBackend(gpt2_hf_tokenizer(), 50304)
    assert padded.allocate_token_bitmask(2).shape == (2, 50304 // 32)
    padded.compile_grammar("REGEX", "ab").fill_bitmask(padded.allocate_token_bitmask(1), 0)


def test_regex_requests_read_their_default_backends_dialect(vllm_backend: GuidedBackend) -> None:
    tok = gpt2_hf_tokenizer()

    def accepts(grammar: Any, text: str) -> bool:
        ids = [*tok.encode(text), GPT2_EOS]
        return bool(grammar.accept_tokens("r", ids))

    # xgrammar's reading: `.` matches a newline, `\z` is the letter
    assert accepts(vllm_backend.compile_grammar("REGEX", "a.b"), "a\nb")
    assert accepts(vllm_backend.compile_grammar("REGEX", "a\\z"), "az")
    # xgrammar refuses `(?i)` and `\p{..}`; vLLM's `auto` falls back to llguidance's Rust reading
    assert accepts(vllm_backend.compile_grammar("REGEX", "(?i)straße"), "STRASSE") is False
    assert accepts(vllm_backend.compile_grammar("REGEX", "(?i)k\\d"), "\u212a\u0663")
    with pytest.raises(guided.RegexSyntaxError, match="lookahead"):
        vllm_backend.compile_grammar("REGEX", "a(?=b)")
    # SGLang's default backend is xgrammar alone
    sglang = GuidedGrammarBackend(tok)
    grammar = sglang.dispatch_regex("a.b")
    for token in [*tok.encode("a\nb"), GPT2_EOS]:
        grammar.accept_token(token)
    assert grammar.guide.is_terminated()
    with pytest.raises(guided.RegexSyntaxError):
        sglang.dispatch_regex("(?i)ab")


def argmax_after_mask(grammar: Any, logits: torch.Tensor, mask: torch.Tensor) -> int:
    moved = grammar.move_vocab_mask(mask, logits.device)
    grammar.apply_vocab_mask(logits, moved)
    return int(torch.argmax(logits[0]))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_sglang_loop_with_jump_forward_matches(
    pattern: str, xgr_compiler: xgr.GrammarCompiler
) -> None:
    tok = gpt2_hf_tokenizer()
    backend = GuidedGrammarBackend(tok, V)
    ctx = xgr_compiler.compile_regex(pattern)
    template_theirs = SglangXgrammarGrammar(xgr.GrammarMatcher(ctx), ctx)
    template_ours = backend.dispatch_regex(pattern)
    jumps = 0
    for seed in range(4):
        gen = torch.Generator().manual_seed(seed)
        theirs, ours = template_theirs.copy(), template_ours.copy()
        tmask = theirs.allocate_vocab_mask(V, 1, "cpu")
        omask = ours.allocate_vocab_mask(V, 1, "cpu")
        output: list[int] = []
        for _ in range(40):
            assert theirs.is_terminated() == ours.is_terminated()
            if ours.is_terminated():
                break
            jump_theirs = theirs.try_jump_forward(tok)
            jump_ours = ours.try_jump_forward(tok)
            assert jump_ours == jump_theirs
            if jump_ours is not None:
                text, state = ours.jump_forward_str_state(jump_ours)
                assert (text, state) == theirs.jump_forward_str_state(jump_theirs)
                new_output = tok.encode(tok.decode(output) + text)
                theirs.jump_and_retokenize(output, new_output, state)
                ours.jump_and_retokenize(output, new_output, state)
                output = new_output
                jumps += 1
                continue
            theirs.fill_vocab_mask(tmask, 0)
            ours.fill_vocab_mask(omask, 0)
            assert rows_equal(tmask[0], omask[0])
            logits = torch.randn(1, V, generator=gen)
            token = argmax_after_mask(theirs, logits.clone(), tmask)
            assert argmax_after_mask(ours, logits.clone(), omask) == token
            theirs.accept_token(token)
            ours.accept_token(token)
            if token != GPT2_EOS:
                output.append(token)
    assert jumps > 0


def test_sglang_object_semantics() -> None:
    tok = gpt2_hf_tokenizer()
    backend = GuidedGrammarBackend(tok, V)
    grammar = backend.dispatch_regex("(yes|no)!")
    yes = tok.convert_tokens_to_ids("yes")
    grammar.accept_token(yes)
    with pytest.raises(guided.InvalidTokenError):
        grammar.accept_token(yes)
    fresh = grammar.copy()
    assert fresh.guide.state == fresh.guide.index.initial_state != grammar.guide.state
    assert grammar.try_jump_forward(tok) == ([], "!")
    grammar.accept_token(tok.convert_tokens_to_ids("!"))
    grammar.accept_token(GPT2_EOS)
    assert grammar.is_terminated()
    grammar.accept_token(yes)  # ignored after termination, as SGLang's grammars do
    grammar.rollback(2)
    assert not grammar.is_terminated() and grammar.accepted_tokens == [yes]
    assert grammar.finished is False
    grammar.finished = True
    assert grammar.finished
    anything = backend.dispatch_json("$$ANY$$")
    for token in tok.encode('[{"k": 1.5e3}, "x"]'):
        anything.accept_token(token)
    anything.accept_token(GPT2_EOS)
    assert anything.is_terminated()
    with pytest.raises(guided.GuidedError):
        backend.dispatch_structural_tag('{"type": "structural_tag"}')
    with pytest.raises(guided.GrammarSyntaxError):
        backend.dispatch_ebnf("root ::= 'a'")  # single quotes are not GBNF
    ebnf = backend.dispatch_ebnf('root ::= "<" root ">" | "x"')
    for token in [*tok.encode("<<x>>"), GPT2_EOS]:
        ebnf.accept_token(token)
    assert ebnf.is_terminated()
    assert isinstance(grammar, GuidedGrammarObject)
