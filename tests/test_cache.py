"""IndexCache and DiskCache: compile once under contention, evict by size, never trust a bad file.

Contention is made real by slowing the compile step down (every racing thread must still get the
one index the single compile produced). Eviction is checked against sizes measured from the
indexes themselves. Every way a cache file can be wrong is produced on disk by hand: truncated,
bytes flipped in the header and in the payload, a foreign file, another entry renamed into place,
a different format version and a different guided version; each must be rejected with a
:class:`~guided.cache.CacheWarning`, recompiled, and replaced by a good file. Two processes write
the same entries at once while two others read them, and no reader may ever see a partial file.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import guided
from guided.cache import (
    FORMAT_VERSION,
    MAGIC,
    CacheFileError,
    CacheWarning,
    DiskCache,
    IndexCache,
    IndexRecipe,
    decode_entry,
    encode_entry,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def vocab() -> guided.Vocabulary:
    tokens = [bytes([b]) for b in range(32, 127)] + [b"ab", b"abc", b"12", b'{"', b'":', None]
    return guided.Vocabulary(tokens, eos_token_ids=[len(tokens) - 1])


def masks(index: guided.TokenIndex, walk: bytes = b"") -> np.ndarray:
    """The initial mask and the masks along ``walk`` (one token per byte)."""
    state = index.initial_state
    out = [index.bitmask(state)]
    for b in walk:
        state = index.next_state(state, b - 32)
        out.append(index.bitmask(state))
    return np.stack(out)


def test_one_index_per_key(vocab: guided.Vocabulary) -> None:
    cache = IndexCache(vocab)
    a = cache.regex("[a-z]+")
    assert cache.regex("[a-z]+") is a
    assert cache.regex("[a-z]+", max_states=100) is not a
    assert cache.regex("[a-z]*") is not a
    assert cache.stats.hits == 1 and cache.stats.compiles == 3
    assert guided.IndexCache is IndexCache
    assert np.array_equal(
        masks(a, b"ab"), masks(guided.TokenIndex.from_regex("[a-z]+", vocab), b"ab")
    )


def test_schema_keys_are_canonical_but_keep_property_order() -> None:
    a = IndexRecipe.json_schema('{ "type" : "object", "properties": {"a": {}, "b": {}} }')
    b = IndexRecipe.json_schema({"type": "object", "properties": {"a": {}, "b": {}}})
    c = IndexRecipe.json_schema({"type": "object", "properties": {"b": {}, "a": {}}})
    assert a == b and a != c
    assert IndexRecipe.json_schema("{}", whitespace="") != IndexRecipe.json_schema("{}")
    with pytest.raises(guided.GuidedError):
        IndexRecipe.json_schema("{not json")
    with pytest.raises(guided.GuidedError):
        IndexRecipe.regex("a", max_states=[1])


def test_racing_threads_compile_once(
    vocab: guided.Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real_compile = IndexRecipe.compile

    def slow_compile(self: IndexRecipe, v: guided.Vocabulary) -> guided.TokenIndex:
        calls.append(self)
        time.sleep(0.2)
        return real_compile(self, v)

    monkeypatch.setattr(IndexRecipe, "compile", slow_compile)
    cache = IndexCache(vocab)
    start = threading.Barrier(16)
    results: list[guided.TokenIndex] = []
    lock = threading.Lock()

    def worker(pattern: str) -> None:
        start.wait()
        index = cache.regex(pattern)
        with lock:
            results.append(index)

    threads = [
        threading.Thread(target=worker, args=("[0-9]+" if i % 4 else "x+",)) for i in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 2  # one compile per key, however many threads asked at once
    by_pattern = {id(i) for i in results}
    assert len(results) == 16 and len(by_pattern) == 2
    assert cache.stats.misses == 2 and cache.stats.compiles == 2


def test_failed_compile_reaches_every_waiter_and_is_retried(
    vocab: guided.Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real_compile = IndexRecipe.compile

    def slow_compile(self: IndexRecipe, v: guided.Vocabulary) -> guided.TokenIndex:
        calls.append(self)
        time.sleep(0.1)
        return real_compile(self, v)

    monkeypatch.setattr(IndexRecipe, "compile", slow_compile)
    cache = IndexCache(vocab)
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def worker() -> None:
        start.wait()
        try:
            cache.regex("a(?=b)")
        except guided.RegexSyntaxError as e:
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 6 and len(calls) == 1
    with pytest.raises(guided.RegexSyntaxError):
        cache.regex("a(?=b)")
    assert len(calls) == 2 and len(cache) == 0


def test_eviction_is_least_recently_used_by_size(vocab: guided.Vocabulary) -> None:
    probe = IndexCache(vocab)
    sizes = {}
    for pattern, walk in (
        ("[a-c]{1,9}", b"abcab"),
        ("[0-9]{1,9}", b"12345"),
        ("[x-z]{1,9}", b"xyzxy"),
    ):
        index = probe.regex(pattern)
        masks(index, walk)
        sizes[pattern] = probe._charged(index)
    assert all(s > 0 for s in sizes.values())
    a, b, c = sizes
    cache = IndexCache(vocab, max_bytes=sizes[a] + sizes[b] + min(sizes.values()) // 2)
    for pattern, walk in ((a, b"abcab"), (b, b"12345")):
        masks(cache.regex(pattern), walk)
    cache.regex(a)  # a is now more recent than b
    masks(cache.regex(c), b"xyzxy")
    cache.trim()
    assert IndexRecipe.regex(a) in cache and IndexRecipe.regex(c) in cache
    assert IndexRecipe.regex(b) not in cache
    assert cache.stats.evictions == 1
    assert cache.memory_bytes() <= cache.max_bytes
    tiny = IndexCache(vocab, max_bytes=1)
    first = tiny.regex(a)
    masks(first, b"abc")
    assert tiny.regex(a) is first  # the newest entry stays, even over budget
    tiny.regex(b)
    assert len(tiny) == 1 and IndexRecipe.regex(b) in tiny


def test_disk_cache_round_trip_and_preload(vocab: guided.Vocabulary, tmp_path: Path) -> None:
    disk = DiskCache(tmp_path)
    first = IndexCache(vocab, disk=disk)
    first.regex("[a-z]+")
    first.regex("[0-9]{2}", max_states=50)
    assert len(list(tmp_path.glob("*.gidx"))) == 2
    second = IndexCache(vocab, disk=tmp_path)
    index = second.regex("[a-z]+")
    assert second.stats.disk_hits == 1
    assert np.array_equal(
        masks(index, b"ab"), masks(guided.TokenIndex.from_regex("[a-z]+", vocab), b"ab")
    )
    third = IndexCache(vocab, disk=disk)
    assert third.preload() == 2 and len(third) == 2
    assert IndexRecipe.regex("[0-9]{2}", max_states=50) in third
    other_vocab = guided.Vocabulary([b"a", b"b", None], eos_token_ids=[2])
    assert IndexCache(other_vocab, disk=disk).preload() == 0  # entries are per vocabulary


def corruptions(good: bytes, other: bytes) -> dict[str, bytes]:
    head = struct.calcsize("<8sHHH")
    version_len = struct.unpack_from("<8sHHH", good)[3]
    payload_at = head + version_len + struct.calcsize("<32sQ32s")
    bumped = bytearray(good)
    struct.pack_into("<H", bumped, 8, FORMAT_VERSION + 1)
    stale = bytearray(good)
    stale[head] ^= 0x01  # a different guided version string
    flipped = bytearray(good)
    flipped[payload_at + 5] ^= 0x40
    header_flip = bytearray(good)
    header_flip[head + version_len + 3] ^= 0xFF  # inside the key hash
    return {
        "empty": b"",
        "truncated header": good[:10],
        "truncated payload": good[:-7],
        "trailing bytes": good + b"\0",
        "flipped payload byte": bytes(flipped),
        "flipped key hash byte": bytes(header_flip),
        "wrong format version": bytes(bumped),
        "other guided version": bytes(stale),
        "foreign file": b"\x89PNG\r\n\x1a\n" + os.urandom(200),
        "other entry renamed here": other,
    }


def test_bad_files_are_rejected_and_recompiled(vocab: guided.Vocabulary, tmp_path: Path) -> None:
    disk = DiskCache(tmp_path)
    recipe, other = IndexRecipe.regex("[a-z]+"), IndexRecipe.regex("[0-9]+")
    path = disk.store(recipe, vocab.fingerprint)
    good = path.read_bytes()
    other_bytes = disk.store(other, vocab.fingerprint).read_bytes()
    expected = masks(guided.TokenIndex.from_regex("[a-z]+", vocab), b"abc")
    for name, data in corruptions(good, other_bytes).items():
        path.write_bytes(data)
        with pytest.raises(CacheFileError):
            disk.load(recipe, vocab.fingerprint)
        cache = IndexCache(vocab, disk=disk)
        with pytest.warns(CacheWarning, match="rejected"):
            index = cache.regex("[a-z]+")
        assert cache.stats.disk_rejects == 1, name
        assert np.array_equal(masks(index, b"abc"), expected), name
        assert disk.load(recipe, vocab.fingerprint) == recipe, name  # rewritten, good again
        assert path.read_bytes() == good, name


def test_decode_entry_names_each_check() -> None:
    key = b"k" * 32
    good = encode_entry(key, b'{"x":1}')
    assert decode_entry(good, key) == (1, b'{"x":1}')
    checks = {
        "magic": b"NOTGUIDE" + good[8:],
        "truncated": good[:5],
        "different entry": good,
        "checksum": good[:-1] + b"2",
        "payload is": good[:-1],
    }
    for why, data in checks.items():
        with pytest.raises(CacheFileError, match=why):
            decode_entry(data, b"z" * 32 if why == "different entry" else key)
    unknown_kind = bytearray(good)
    struct.pack_into("<H", unknown_kind, 10, 99)
    with pytest.raises(CacheFileError, match="payload kind"):
        decode_entry(bytes(unknown_kind), key)
    assert good.startswith(MAGIC)
    with pytest.raises(guided.GuidedError):
        encode_entry(b"short", b"")


def test_disk_budget_drops_least_recently_used(vocab: guided.Vocabulary, tmp_path: Path) -> None:
    probe = DiskCache(tmp_path / "probe")
    size = probe.store(IndexRecipe.regex("a{1}"), vocab.fingerprint).stat().st_size
    disk = DiskCache(tmp_path / "budget", max_bytes=3 * size + size // 2)
    paths = []
    for i in range(3):
        path = disk.store(IndexRecipe.regex(f"a{{{i + 1}}}"), vocab.fingerprint)
        os.utime(path, (1000 + i, 1000 + i))
        paths.append(path)
    assert disk.load(IndexRecipe.regex("a{1}"), vocab.fingerprint) is not None  # refreshes a{1}
    newest = disk.store(IndexRecipe.regex("a{4}"), vocab.fingerprint)
    assert newest.exists() and paths[0].exists()
    assert not paths[1].exists()  # a{2} was the least recently used
    assert disk.size_bytes() <= disk.max_bytes
    stale = tmp_path / "budget" / ".tmp-crashed.gidx"
    stale.write_bytes(b"partial")
    os.utime(stale, (1, 1))
    disk.evict()
    assert not stale.exists()
    listed = list(disk.entries(vocab.fingerprint))
    assert IndexRecipe.regex("a{4}") == listed[0] and len(listed) == 3
    (tmp_path / "budget" / ("0" * 64 + ".gidx")).write_bytes(b"junk")
    with pytest.warns(CacheWarning):
        assert len(list(disk.entries())) == 3


_WRITER = """
import sys, time
from guided.cache import DiskCache, IndexRecipe
import guided
folder, role, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
vocab = guided.Vocabulary([bytes([b]) for b in range(32, 127)] + [None], eos_token_ids=[95])
disk = DiskCache(folder)
recipes = [IndexRecipe.regex(f"[a-z]{{{i}}}") for i in range(1, 5)]
seen = n = 0
deadline = time.monotonic() + 20
while (n < rounds) if role == "writer" else (seen < rounds and time.monotonic() < deadline):
    recipe = recipes[n % len(recipes)]
    n += 1
    if role == "writer":
        disk.store(recipe, vocab.fingerprint)
    else:
        got = disk.load(recipe, vocab.fingerprint)  # raises CacheFileError on a torn file
        seen += got is not None
print(seen)
"""


def test_concurrent_processes_never_expose_partial_files(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path), role, "300"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in ("writer", "writer", "reader", "reader")
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err
    assert [int(out) for out, _ in outputs[2:]] == [300, 300]  # readers read while writers wrote
    files = sorted(tmp_path.iterdir())
    assert len(files) == 4 and all(
        f.suffix == ".gidx" and not f.name.startswith(".") for f in files
    )
    vocab = guided.Vocabulary([bytes([b]) for b in range(32, 127)] + [None], eos_token_ids=[95])
    disk = DiskCache(tmp_path)
    for i in range(1, 5):
        assert disk.load(IndexRecipe.regex(f"[a-z]{{{i}}}"), vocab.fingerprint) is not None


def test_recipe_json_round_trip(vocab: guided.Vocabulary) -> None:
    recipe = IndexRecipe.json_schema(
        {"type": "string", "é": [1, 2]}, whitespace="[ ]?", strict=True
    )
    text = recipe.to_json(vocab.fingerprint)
    assert json.loads(text)["vocabulary"] == vocab.fingerprint
    assert IndexRecipe.from_json(text) == (recipe, vocab.fingerprint)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert recipe.key_hash(vocab.fingerprint) != recipe.key_hash("0" * 64)


@pytest.mark.skipif(
    not hasattr(guided.TokenIndex, "from_json_schema"),
    reason="guided.TokenIndex.from_json_schema is not in this build (JSON Schema lands separately)",
)
def test_json_schema_entries(vocab: guided.Vocabulary, tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    cache = IndexCache(vocab, disk=tmp_path)
    index = cache.json_schema(schema)
    assert cache.json_schema(json.dumps(schema, indent=2)) is index
    assert IndexCache(vocab, disk=tmp_path).preload() == 1
    direct = guided.TokenIndex.from_json_schema(json.dumps(schema), vocab)
    assert np.array_equal(masks(index, b'{"'), masks(direct, b'{"'))


def test_json_schema_needs_the_compiler(vocab: guided.Vocabulary) -> None:
    if hasattr(guided.TokenIndex, "from_json_schema"):
        pytest.skip("this build has the JSON Schema compiler")
    with pytest.raises(guided.GuidedError, match="JSON Schema"):
        IndexCache(vocab).json_schema({"type": "string"})
