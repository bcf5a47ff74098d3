"""Compiled-index caches: one in memory per vocabulary, and a durable record of recipes on disk.

Engines see the same constraints again and again: every request of a tool-calling agent carries the
same few schemas, a classifier sends one choice list a million times. :class:`IndexCache` keeps one
shared :class:`~guided.TokenIndex` per constraint, keyed by what determines it (the pattern, or the
schema's canonical text, plus the compile options) over one vocabulary. Sharing matters beyond the
compile: an index computes its masks lazily and keeps them, so the second request for a schema finds
the masks the first one already paid for.

Concurrency. A burst of requests for a new schema must compile it once, not once per request. The
first caller of a key installs a future under the lock, compiles outside it (other keys proceed, and
the extension releases the GIL while it works), and publishes the result; callers arriving meanwhile
wait on that future and share its index, or its exception. A failed compile is not cached: the next
caller tries again.

Eviction. Entries are dropped least recently used first when their memory passes ``max_bytes``.
An index grows after it is cached (masks fill in as guides visit states), so sizes are read afresh
from ``memory_bytes()`` at every insertion and on :meth:`IndexCache.trim`, never remembered. Every
index over a vocabulary also reports the vocabulary's token trie, which they all share; the cache
charges each index only what it holds beyond that trie (the size of an empty index's footprint),
so the budget counts what evicting an entry would actually free. The newest entry is never evicted
by its own insertion: a cache too small for one index still returns it and serves the requests
that arrive while it is the latest.

On disk. :class:`DiskCache` stores one file per constraint and vocabulary. What it stores is the
*recipe* (kind, source text, options, vocabulary fingerprint), not the automaton or its masks: the
extension has no serialized form for a lazily built index (its state numbering depends on the order
states were first visited), and compiling is cheap next to computing masks, which happen on demand
anyway. So a disk hit rebuilds the index from the verified recipe, exactly as a miss would; what the
disk adds is memory across restarts: :meth:`IndexCache.preload` compiles every constraint a previous
run saw for this vocabulary before the first request needs it. The file format leaves room for a
payload kind that carries precomputed tables once the extension can produce them.

A file is trusted only after every check passes: magic bytes, format version, payload kind, the
guided version that wrote it, the key hash it claims (which must be the one asked for), the payload
length (truncation), the payload's SHA-256 (flipped bytes), and finally that the decoded recipe is
the requested one. A file failing any check raises :class:`CacheFileError`; the in-memory cache
turns that into a :class:`CacheWarning`, deletes the file, recompiles and writes a good one. Writers
never expose a partial file: they write a temporary file in the same folder, fsync it and rename it
over the target (atomic on POSIX and Windows), so two processes writing one key race harmlessly to
the same content. The folder is kept under ``max_bytes`` by deleting the least recently used files
(reads refresh a file's modification time); a file deleted under a reader is a plain miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from guided._errors import GuidedError
from guided._lib import TokenIndex, Vocabulary
from guided._lib import __version__ as _guided_version
from guided._pickle import restore_index

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "CacheFileError",
    "CacheStats",
    "CacheWarning",
    "DiskCache",
    "IndexCache",
    "IndexRecipe",
    "decode_entry",
    "encode_entry",
]

#: First bytes of every cache file.
MAGIC = b"GUIDEDIX"
#: Bumped whenever the layout below changes; older files are then rejected, not misread.
FORMAT_VERSION = 1
#: Payload kinds. 1: the recipe as UTF-8 JSON.
PAYLOAD_RECIPE = 1
_PAYLOAD_KINDS = frozenset({PAYLOAD_RECIPE})

# magic, format version, payload kind, length of the guided version string that follows
_HEAD = struct.Struct("<8sHHH")
# key hash (SHA-256), payload length, payload SHA-256
_TAIL = struct.Struct("<32sQ32s")
_SUFFIX = ".gidx"
_TEMP_PREFIX = ".tmp-"
_STALE_TEMP_SECONDS = 3600.0

DEFAULT_MAX_BYTES = 512 * 2**20
DEFAULT_DISK_MAX_BYTES = 64 * 2**20

PathLike = Union[str, "os.PathLike[str]"]


class CacheFileError(GuidedError):
    """A cache file is truncated, corrupt, foreign, stale, or not the entry it was asked for."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class CacheWarning(UserWarning):
    """A cache file was rejected and its index recompiled."""


def _canonical_json(value: Any) -> str:
    """Compact JSON, keys in the order given: the order of a schema's properties is meaningful."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _check_option(name: str, value: Any) -> None:
    if not (value is None or isinstance(value, (bool, int, float, str))):
        raise GuidedError(
            f"compile option {name}={value!r} is not a plain value (None, bool, int, float, str) "
            "and cannot be part of a cache key"
        )


@dataclass(frozen=True)
class IndexRecipe:
    """What determines an index, apart from the vocabulary: ``kind`` ("regex", "json_schema",
    "grammar" or "structural_tag"), ``source`` (the pattern, the grammar text, or the canonical
    JSON text of the schema or tag) and the compile options."""

    kind: str
    source: str
    options: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def regex(pattern: str, **options: Any) -> IndexRecipe:
        """The recipe of ``TokenIndex.from_regex(pattern, vocab, **options)``."""
        if not isinstance(pattern, str):
            raise GuidedError(f"a regex must be a str, got {type(pattern).__name__}")
        return IndexRecipe("regex", pattern, _options(options))

    @staticmethod
    def json_schema(schema: Mapping[str, Any] | str | bool, **options: Any) -> IndexRecipe:
        """The recipe of ``TokenIndex.from_json_schema(schema, vocab, **options)``; the schema is
        keyed by its canonical text (compact, property order kept), so ``{"a": 1}`` and
        ``{ "a" : 1 }`` share an entry."""
        return IndexRecipe("json_schema", _canonical_text(schema, "schema"), _options(options))

    @staticmethod
    def grammar(text: str, **options: Any) -> IndexRecipe:
        """The recipe of ``TokenIndex.from_grammar(text, vocab, **options)``."""
        if not isinstance(text, str):
            raise GuidedError(f"a grammar must be a str, got {type(text).__name__}")
        return IndexRecipe("grammar", text, _options(options))

    @staticmethod
    def structural_tag(tag: Mapping[str, Any] | str, **options: Any) -> IndexRecipe:
        """The recipe of ``TokenIndex.from_structural_tag(tag, vocab, **options)``, keyed by the
        tag's canonical text."""
        return IndexRecipe(
            "structural_tag", _canonical_text(tag, "structural tag"), _options(options)
        )

    def to_json(self, fingerprint: str) -> str:
        """The recipe and the vocabulary fingerprint as canonical JSON (the hashed key)."""
        return _canonical_json(
            {
                "format": FORMAT_VERSION,
                "guided": _guided_version,
                "kind": self.kind,
                "source": self.source,
                "options": [list(kv) for kv in self.options],
                "vocabulary": fingerprint,
            }
        )

    def key_hash(self, fingerprint: str) -> bytes:
        """SHA-256 of :meth:`to_json`: the entry's identity on disk."""
        return hashlib.sha256(self.to_json(fingerprint).encode("utf-8")).digest()

    @staticmethod
    def from_json(text: str) -> tuple[IndexRecipe, str]:
        """Inverse of :meth:`to_json`: the recipe and the vocabulary fingerprint."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a recipe is a JSON object")
        options = data["options"]
        if not isinstance(options, list) or not all(
            isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], str) for kv in options
        ):
            raise ValueError("recipe options must be [name, value] pairs")
        kind, source, vocab = data["kind"], data["source"], data["vocabulary"]
        if not (isinstance(kind, str) and isinstance(source, str) and isinstance(vocab, str)):
            raise ValueError("recipe kind, source and vocabulary must be strings")
        recipe = IndexRecipe(kind, source, tuple((k, v) for k, v in options))
        return recipe, vocab

    def compile(self, vocab: Vocabulary) -> TokenIndex:
        """Builds the index over ``vocab``."""
        if self.kind == "json_schema" and not hasattr(TokenIndex, "from_json_schema"):
            raise GuidedError("this build of guided has no JSON Schema compiler")
        if self.kind not in ("regex", "json_schema", "grammar", "structural_tag"):
            raise GuidedError(f"unknown index recipe kind {self.kind!r}")
        return restore_index(self.kind, self.source, vocab, dict(self.options))


def _canonical_text(value: Any, what: str) -> str:
    """The canonical JSON text of a JSON document given as text or as a value."""
    if isinstance(value, (str, bytes, bytearray)):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise GuidedError(f"the {what} is not valid JSON: {e}") from None
    try:
        return _canonical_json(value)
    except (TypeError, ValueError) as e:
        raise GuidedError(f"the {what} cannot be written as JSON: {e}") from None


def _options(options: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    for name, value in options.items():
        _check_option(name, value)
    return tuple(sorted(options.items()))


# ---------------------------------------------------------------------------------------------
# The file format


def encode_entry(key_hash: bytes, payload: bytes, *, kind: int = PAYLOAD_RECIPE) -> bytes:
    """A cache file's bytes: header, then ``payload``."""
    if len(key_hash) != 32:
        raise GuidedError(f"a key hash is 32 bytes (SHA-256), got {len(key_hash)}")
    version = _guided_version.encode("utf-8")
    return b"".join(
        (
            _HEAD.pack(MAGIC, FORMAT_VERSION, kind, len(version)),
            version,
            _TAIL.pack(key_hash, len(payload), hashlib.sha256(payload).digest()),
            payload,
        )
    )


def decode_entry(
    data: bytes, key_hash: bytes | None = None, *, path: str = ""
) -> tuple[int, bytes]:
    """The payload kind and payload of a cache file, after every check on its header and body.

    Raises :class:`CacheFileError` naming the first check that failed.
    """

    def fail(why: str) -> CacheFileError:
        where = f"cache file {path}" if path else "cache entry"
        return CacheFileError(f"{where} rejected: {why}", path=path)

    if len(data) < _HEAD.size:
        raise fail(f"truncated header ({len(data)} bytes)")
    magic, fmt, kind, vlen = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise fail(f"not a guided cache file (magic {magic!r})")
    if fmt != FORMAT_VERSION:
        raise fail(f"format version {fmt}, this guided reads version {FORMAT_VERSION}")
    if kind not in _PAYLOAD_KINDS:
        raise fail(f"unknown payload kind {kind}")
    offset = _HEAD.size
    if len(data) < offset + vlen + _TAIL.size:
        raise fail("truncated header")
    version = data[offset : offset + vlen].decode("utf-8", errors="replace")
    if version != _guided_version:
        raise fail(f"written by guided {version}, this is guided {_guided_version}")
    offset += vlen
    stored_key, length, digest = _TAIL.unpack_from(data, offset)
    offset += _TAIL.size
    if key_hash is not None and stored_key != key_hash:
        raise fail("it holds a different entry than its name says")
    if len(data) - offset != length:
        raise fail(f"payload is {len(data) - offset} bytes, the header says {length}")
    payload = data[offset:]
    if hashlib.sha256(payload).digest() != digest:
        raise fail("payload checksum mismatch")
    return kind, payload


class DiskCache:
    """One file per (recipe, vocabulary) under ``directory``, at most ``max_bytes`` in all."""

    def __init__(self, directory: PathLike, *, max_bytes: int = DEFAULT_DISK_MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise GuidedError(f"max_bytes must be positive, got {max_bytes}")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise GuidedError(f"cannot create cache folder {self.directory}: {e}") from None

    def path_for(self, recipe: IndexRecipe, fingerprint: str) -> Path:
        """Where the entry for ``recipe`` over the vocabulary ``fingerprint`` lives."""
        return self.directory / (recipe.key_hash(fingerprint).hex() + _SUFFIX)

    def load(self, recipe: IndexRecipe, fingerprint: str) -> IndexRecipe | None:
        """The stored recipe, verified to be ``recipe``; None if there is no entry.

        Raises :class:`CacheFileError` if a file is there but fails a check.
        """
        path = self.path_for(recipe, fingerprint)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CacheFileError(f"cache file {path} unreadable: {e}", path=str(path)) from None
        stored = self._decode(data, recipe.key_hash(fingerprint), str(path))
        if stored != (recipe, fingerprint):
            raise CacheFileError(
                f"cache file {path} rejected: it holds another recipe", path=str(path)
            )
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass
        return stored[0]

    @staticmethod
    def _decode(data: bytes, key_hash: bytes | None, path: str) -> tuple[IndexRecipe, str]:
        _, payload = decode_entry(data, key_hash, path=path)
        try:
            return IndexRecipe.from_json(payload.decode("utf-8"))
        except (ValueError, KeyError, UnicodeDecodeError) as e:
            raise CacheFileError(
                f"cache file {path} rejected: unreadable recipe ({e})", path=path
            ) from None

    def store(self, recipe: IndexRecipe, fingerprint: str) -> Path:
        """Writes the entry atomically, then trims the folder to its budget."""
        path = self.path_for(recipe, fingerprint)
        payload = recipe.to_json(fingerprint).encode("utf-8")
        data = encode_entry(recipe.key_hash(fingerprint), payload)
        fd, tmp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=_SUFFIX, dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self.evict(keep=path)
        return path

    def discard(self, recipe: IndexRecipe, fingerprint: str) -> None:
        """Deletes the entry, if any."""
        try:
            self.path_for(recipe, fingerprint).unlink()
        except FileNotFoundError:
            pass

    def entries(self, fingerprint: str | None = None) -> Iterator[IndexRecipe]:
        """The valid recipes stored (for one vocabulary if ``fingerprint`` is given), most recently
        used first. Files that fail a check are skipped with a :class:`CacheWarning`."""
        for path, _, _ in sorted(self._files(), key=lambda f: -f[1]):
            try:
                recipe, vocab = self._decode(path.read_bytes(), None, str(path))
                if path.name != recipe.key_hash(vocab).hex() + _SUFFIX:
                    raise CacheFileError(
                        f"cache file {path} rejected: its name does not match its entry",
                        path=str(path),
                    )
            except FileNotFoundError:
                continue
            except (CacheFileError, OSError) as e:
                warnings.warn(str(e), CacheWarning, stacklevel=2)
                continue
            if fingerprint is None or vocab == fingerprint:
                yield recipe

    def size_bytes(self) -> int:
        """Bytes held by the entries."""
        return sum(size for _, _, size in self._files())

    def evict(self, keep: Path | None = None) -> None:
        """Deletes least recently used entries until the folder fits ``max_bytes`` (``keep`` stays),
        and temporary files that a crashed writer left behind."""
        now = time.time()
        for tmp in self.directory.glob(_TEMP_PREFIX + "*"):
            try:
                if now - tmp.stat().st_mtime > _STALE_TEMP_SECONDS:
                    tmp.unlink()
            except OSError:
                pass
        files = sorted(self._files(), key=lambda f: f[1])
        total = sum(size for _, _, size in files)
        for path, _, size in files:
            if total <= self.max_bytes:
                break
            if keep is not None and path == keep:
                continue
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                continue
            total -= size

    def clear(self) -> None:
        """Deletes every entry."""
        for path, _, _ in self._files():
            try:
                path.unlink()
            except OSError:
                pass

    def _files(self) -> list[tuple[Path, float, int]]:
        out = []
        for path in self.directory.glob("*" + _SUFFIX):
            if path.name.startswith(_TEMP_PREFIX):
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            out.append((path, st.st_mtime, st.st_size))
        return out


# ---------------------------------------------------------------------------------------------
# The in-memory cache


@dataclass
class CacheStats:
    """Counters since the cache was made."""

    hits: int = 0
    misses: int = 0
    compiles: int = 0
    evictions: int = 0
    disk_hits: int = 0
    disk_rejects: int = 0


class IndexCache:
    """Shared token indexes over one vocabulary, compiled once per key, evicted LRU by size."""

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        disk: DiskCache | PathLike | None = None,
    ) -> None:
        if not isinstance(vocab, Vocabulary):
            raise GuidedError(f"IndexCache needs a guided.Vocabulary, got {type(vocab).__name__}")
        if max_bytes <= 0:
            raise GuidedError(f"max_bytes must be positive, got {max_bytes}")
        self._vocab = vocab
        self._fingerprint = vocab.fingerprint
        self.max_bytes = max_bytes
        self.disk = disk if disk is None or isinstance(disk, DiskCache) else DiskCache(disk)
        self.stats = CacheStats()
        self._lock = threading.Lock()
        self._entries: OrderedDict[IndexRecipe, TokenIndex] = OrderedDict()
        self._pending: dict[IndexRecipe, Future[TokenIndex]] = {}
        self._baseline: TokenIndex | None = None

    @property
    def vocabulary(self) -> Vocabulary:
        """The vocabulary every index of this cache is built over."""
        return self._vocab

    def regex(self, pattern: str, **options: Any) -> TokenIndex:
        """The shared index of ``pattern`` (options as for ``TokenIndex.from_regex``)."""
        return self.get(IndexRecipe.regex(pattern, **options))

    def json_schema(self, schema: Mapping[str, Any] | str | bool, **options: Any) -> TokenIndex:
        """The shared index of ``schema`` (options as for ``TokenIndex.from_json_schema``)."""
        return self.get(IndexRecipe.json_schema(schema, **options))

    def grammar(self, text: str, **options: Any) -> TokenIndex:
        """The shared index of a grammar (options as for ``TokenIndex.from_grammar``)."""
        return self.get(IndexRecipe.grammar(text, **options))

    def structural_tag(self, tag: Mapping[str, Any] | str, **options: Any) -> TokenIndex:
        """The shared index of a structural tag (options as for
        ``TokenIndex.from_structural_tag``)."""
        return self.get(IndexRecipe.structural_tag(tag, **options))

    def get(self, recipe: IndexRecipe) -> TokenIndex:
        """The shared index of ``recipe``, compiled by the first caller and awaited by the rest."""
        with self._lock:
            index = self._entries.get(recipe)
            if index is not None:
                self._entries.move_to_end(recipe)
                self.stats.hits += 1
                return index
            pending = self._pending.get(recipe)
            if pending is None:
                future: Future[TokenIndex] = Future()
                self._pending[recipe] = future
                self.stats.misses += 1
        if pending is not None:
            return pending.result()
        try:
            index = self._build(recipe)
        except BaseException as e:
            with self._lock:
                del self._pending[recipe]
            future.set_exception(e)
            raise
        self._charge_baseline()
        with self._lock:
            del self._pending[recipe]
            self._entries[recipe] = index
            self._evict_locked(keep=recipe)
        future.set_result(index)
        return index

    def _build(self, recipe: IndexRecipe) -> TokenIndex:
        disk = self.disk
        if disk is not None:
            try:
                if disk.load(recipe, self._fingerprint) is not None:
                    with self._lock:
                        self.stats.disk_hits += 1
            except CacheFileError as e:
                warnings.warn(f"{e}; recompiling", CacheWarning, stacklevel=4)
                with self._lock:
                    self.stats.disk_rejects += 1
                disk.discard(recipe, self._fingerprint)
        index = recipe.compile(self._vocab)
        with self._lock:
            self.stats.compiles += 1
        if disk is not None and not disk.path_for(recipe, self._fingerprint).exists():
            try:
                disk.store(recipe, self._fingerprint)
            except OSError as e:
                warnings.warn(f"cannot write cache file: {e}", CacheWarning, stacklevel=4)
        return index

    def preload(self, limit: int | None = None) -> int:
        """Compiles the constraints the disk cache remembers for this vocabulary (most recently
        used first, at most ``limit``); returns how many were loaded. Entries that no longer
        compile are skipped."""
        if self.disk is None:
            return 0
        loaded = 0
        for recipe in self.disk.entries(self._fingerprint):
            if limit is not None and loaded >= limit:
                break
            try:
                self.get(recipe)
            except GuidedError:
                continue
            loaded += 1
        return loaded

    def _charge_baseline(self) -> None:
        """Keeps an index that holds nothing of its own, to read what every index shares."""
        if self._baseline is None:
            self._baseline = TokenIndex.from_regex("", self._vocab)

    def _charged(self, index: TokenIndex) -> int:
        # The vocabulary's tries and the class slices built over them so far are shared by
        # every index, and grow as indexes are used: read them now, not once.
        shared = self._baseline.memory_bytes() if self._baseline is not None else 0
        return max(index.memory_bytes() - shared, 0)

    def _evict_locked(self, keep: IndexRecipe | None) -> None:
        sizes = {recipe: self._charged(index) for recipe, index in self._entries.items()}
        total = sum(sizes.values())
        for recipe in list(self._entries):
            if total <= self.max_bytes:
                break
            if recipe == keep:
                continue
            del self._entries[recipe]
            total -= sizes[recipe]
            self.stats.evictions += 1

    def trim(self) -> None:
        """Re-reads every entry's size (masks grow after insertion) and evicts to the budget."""
        with self._lock:
            self._evict_locked(keep=next(reversed(self._entries), None))

    def memory_bytes(self) -> int:
        """Bytes the cached indexes hold beyond the vocabulary's shared trie."""
        with self._lock:
            return sum(self._charged(index) for index in self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, recipe: object) -> bool:
        with self._lock:
            return recipe in self._entries

    def clear(self) -> None:
        """Drops every entry (indexes in use stay alive where they are used)."""
        with self._lock:
            self._entries.clear()

    def __repr__(self) -> str:
        disk = self.disk.directory if self.disk else None
        return (
            f"IndexCache(entries={len(self)}, max_bytes={self.max_bytes}, "
            f"vocab_size={self._vocab.vocab_size}, disk={disk})"
        )
