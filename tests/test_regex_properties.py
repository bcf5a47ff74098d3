"""Property tests: ``guided.DFA`` against Python's ``re`` as the oracle.

Random patterns are drawn from the whole dialect (literals with escapes and non-ASCII characters,
``.``, classes with ranges, negation and escapes, ``\\d \\w \\s`` and their negations, hex and
Unicode escapes, every quantifier form and its lazy twin, alternation, capturing, non-capturing,
named and flag-scoped groups, anchors, global flags). Half of the test strings are generated to
match the pattern, so the "accepts" direction is exercised as hard as the "rejects" one. The same
strings are checked as UTF-8 bytes, and corrupted byte strings must never match.
"""

from __future__ import annotations

from hypothesis import assume, given, note, reject
from hypothesis import strategies as st

import guided
from regex_strategies import chars, oracle, patterns


def dfa_within_limits(pattern: str) -> guided.DFA:
    """The pattern's DFA; a pattern whose automaton passes the default state limit (nested
    counted repetitions can) is not an example of these properties, which are about languages:
    the limit itself is tested where it is documented."""
    try:
        return guided.DFA(pattern)
    except guided.SizeLimitError:
        reject()


@given(st.data())
def test_dfa_matches_python_re(data: st.DataObject) -> None:
    pattern, node = data.draw(patterns(), label="pattern")
    compiled = oracle(pattern)
    assume(compiled is not None)
    assert compiled is not None
    dfa = dfa_within_limits(pattern)
    # Half the texts are drawn from the pattern's structure, so most of them match.
    texts = [node.gen(data.draw) for _ in range(4)]
    texts += data.draw(st.lists(st.text(alphabet=chars, max_size=10), min_size=4, max_size=4))
    for s in texts:
        expected = compiled.fullmatch(s) is not None
        note(f"text={s!r} expected={expected}")
        assert dfa.match(s) == expected
        assert dfa.match(s.encode()) == expected


@given(st.data())
def test_invalid_utf8_never_matches(data: st.DataObject) -> None:
    pattern, node = data.draw(patterns(), label="pattern")
    assume(oracle(pattern) is not None)
    dfa = dfa_within_limits(pattern)
    good = node.gen(data.draw).encode()
    junk = data.draw(st.sampled_from([b"\x80", b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80"]))
    at = data.draw(st.integers(0, len(good)))
    corrupted = good[:at] + junk + good[at:]
    assert not dfa.match(corrupted)


@given(st.integers(0, 0x10FFFF), st.integers(0, 3000))
def test_utf8_sequences_cover_exactly(lo: int, width: int) -> None:
    hi = min(lo + width, 0x10FFFF)
    seqs = guided.utf8_sequences(lo, hi)
    expected = [cp for cp in range(lo, hi + 1) if not 0xD800 <= cp <= 0xDFFF]
    # Every scalar value is covered by exactly one sequence ...
    for cp in expected:
        enc = chr(cp).encode()
        hits = [
            s for s in seqs if len(s) == len(enc) and all(a <= b <= z for (a, z), b in zip(s, enc))
        ]
        assert len(hits) == 1, (hex(cp), hits)
    # ... and the sequences spell nothing else: their string counts add up to the scalar values.
    total = 0
    for s in seqs:
        n = 1
        for a, z in s:
            n *= z - a + 1
        total += n
    assert total == len(expected)


def test_utf8_sequences_full_range_counts() -> None:
    seqs = guided.utf8_sequences(0, 0x10FFFF)
    total = 0
    for s in seqs:
        n = 1
        for a, z in s:
            n *= z - a + 1
        total += n
    assert total == 0x110000 - 0x800
