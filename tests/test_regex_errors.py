"""Bad input: every malformed or unsupported pattern raises the right class, at the right place.

Positions are code-point offsets of the offending construct; where Python's ``re`` reports the
same construct, the table below agrees with its ``re.error.pos``, which the last test checks.
"""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

import guided

# pattern, position, a word the message must contain
UNSUPPORTED = [
    ("a(?=b)", 1, "lookahead"),
    ("a(?!b)", 1, "negative lookahead"),
    ("(?<=a)b", 0, "lookbehind"),
    ("(?<!a)b", 0, "negative lookbehind"),
    ("(a)\\1", 3, "backreference"),
    ("(?P<x>a)(?P=x)", 8, "backreference"),
    ("\\bword", 0, "word boundary"),
    ("a\\B", 1, "non-word boundary"),
    ("a*+", 1, "possessive"),
    ("a{1,2}+", 1, "possessive"),
    ("(?>ab)", 0, "atomic group"),
    ("(?m)^a$", 2, "multiline"),
    ("(?(1)a|b)", 0, "conditional"),
    ("\\N{DIGIT ONE}", 0, "named character"),
]

MALFORMED = [
    ("(ab", 0, "unclosed group"),
    ("a(b(c)", 1, "unclosed group"),
    ("ab)", 2, "unbalanced parenthesis"),
    ("[ab", 0, "unclosed character class"),
    ("[z-a]", 1, "bad character range"),
    ("[a-\\d]", 1, "bad character range"),
    ("\\q", 0, "bad escape"),
    ("\\x4", 0, "incomplete escape"),
    ("\\u12g", 0, "incomplete escape"),
    ("*a", 0, "nothing to repeat"),
    ("a|?", 2, "nothing to repeat"),
    ("{2}", 0, "nothing to repeat"),
    ("^*", 1, "nothing to repeat"),
    ("a**", 2, "multiple repeat"),
    ("a{2}{3}", 4, "multiple repeat"),
    ("a{3,2}", 1, "min repeat greater than max repeat"),
    ("a{99999999999}", 1, "too large"),
    ("a(?i)b", 1, "global flags not at the start"),
    ("(?<1a>x)", 3, "bad group name"),
    ("\\p{NoSuchProperty}", 0, "unknown Unicode property"),
    ("a\\", 1, "trailing backslash"),
    ("(?Z)", 2, "unknown flag"),
]


@pytest.mark.parametrize(("pattern", "position", "word"), UNSUPPORTED + MALFORMED)
def test_bad_patterns_raise_with_position(pattern: str, position: int, word: str) -> None:
    with pytest.raises(guided.RegexSyntaxError) as info:
        guided.DFA(pattern)
    err = info.value
    assert isinstance(err, guided.GuidedError) and isinstance(err, ValueError)
    assert err.pattern == pattern
    assert err.position == position
    assert word in str(err)


@pytest.mark.parametrize(("pattern", "position", "word"), MALFORMED)
def test_positions_agree_with_python_re(pattern: str, position: int, word: str) -> None:
    """Where Python's `re` also rejects the pattern, it names a position; ours must be within the
    construct it names (Python points at different ends of some constructs)."""
    try:
        re.compile(pattern, re.ASCII)
    except OverflowError:
        return  # Python reports huge counts without a position
    except re.error as e:
        assert e.pos is not None
        assert abs(e.pos - position) <= 3, (e.pos, position, e.msg)


def test_exponential_pattern_hits_the_state_limit() -> None:
    with pytest.raises(guided.SizeLimitError) as info:
        guided.DFA("(a|b)*a(a|b){40}")
    assert info.value.limit == "max_states"
    assert info.value.maximum == 20_000
    assert info.value.value > info.value.maximum


def test_state_limit_is_configurable() -> None:
    dfa = guided.DFA("(a|b)*a(a|b){5}", max_states=100)
    assert dfa.num_states <= 100
    with pytest.raises(guided.SizeLimitError):
        guided.DFA("(a|b)*a(a|b){10}", max_states=100)


def test_huge_repetition_is_a_limit_not_an_oom() -> None:
    with pytest.raises(guided.SizeLimitError):
        guided.DFA("(?:a{1000}){1000}b{1000}")


def test_deep_nesting_is_a_limit_not_a_crash() -> None:
    with pytest.raises(guided.SizeLimitError):
        guided.DFA("(" * 5000 + "a" + ")" * 5000)


def test_object_stays_usable_after_errors() -> None:
    dfa = guided.DFA("ab|cd")
    for bad in [(-1, 0), (dfa.num_states, 0), (1, 256), (1, -1)]:
        with pytest.raises(guided.GuidedError):
            dfa.next_state(*bad)
    with pytest.raises(guided.GuidedError):
        dfa.is_accepting(10**6)
    with pytest.raises(TypeError):
        dfa.match(123)  # type: ignore[arg-type]
    assert dfa.match("cd")


class TestDfaMembers:
    def test_walking_the_table_agrees_with_match(self) -> None:
        dfa = guided.DFA("(?:[a-c]+|é)[0-9]{1,3}")
        table = dfa.table
        assert table.dtype == np.int32 and table.shape == (dfa.num_states, 256)
        assert dfa.dead == 0 and dfa.start == 1
        assert (table[0] == 0).all(), "the dead state leads nowhere"
        for text in ["a1", "abc123", "é7", "é", "", "a1234", "x1"]:
            state = dfa.start
            for b in text.encode():
                nxt = int(table[state, b])
                assert nxt == dfa.next_state(state, b)
                state = nxt
            assert bool(dfa.accepting[state]) == dfa.match(text) == dfa.is_accepting(state)

    def test_final_means_accepting_with_no_way_on(self) -> None:
        dfa = guided.DFA("ab?")
        table, accepting, final = dfa.table, dfa.accepting, dfa.final
        for s in range(dfa.num_states):
            way_on = bool((table[s] != 0).any())
            assert final[s] == (accepting[s] and not way_on) == dfa.is_final(s)
        after_ab = dfa.next_state(dfa.next_state(1, ord("a")), ord("b"))
        assert dfa.is_final(after_ab)
        assert not dfa.is_final(dfa.next_state(1, ord("a")))

    def test_minimal_state_counts_for_equal_languages(self) -> None:
        assert guided.DFA("(a|b)*").num_states == guided.DFA("(a*b*)*").num_states == 2
        assert guided.DFA("a+").num_states == guided.DFA("aa*").num_states
        assert guided.DFA("[0-9]{2}|[0-9]{2}").num_states == guided.DFA("\\d\\d").num_states

    def test_anchors_refer_to_the_whole_text(self) -> None:
        dfa = guided.DFA("^a$|^b$")
        assert dfa.match("a") and dfa.match("b") and not dfa.match("ab")
        assert not guided.DFA("a^b").match("ab")
        assert not guided.DFA("a$b").match("ab")

    def test_str_bytes_and_bytearray(self) -> None:
        dfa = guided.DFA("é+")
        assert dfa.match("éé") and dfa.match("éé".encode()) and dfa.match(bytearray("é".encode()))
        assert not dfa.match(b"\xc3")
        assert not dfa.match("\ud800")

    def test_pickle_round_trip(self) -> None:
        dfa = guided.DFA("[a-f]{2,4}x?", max_states=500)
        clone = pickle.loads(pickle.dumps(dfa))
        assert clone.pattern == dfa.pattern
        assert (clone.table == dfa.table).all()
        assert clone.num_states == dfa.num_states

    def test_repr_names_the_pattern(self) -> None:
        assert "abc" in repr(guided.DFA("abc"))
