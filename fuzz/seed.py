"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.

Seeds are real inputs, so that libFuzzer starts from the shapes the library is meant to read
instead of rediscovering JSON or GBNF syntax one byte at a time. They come from the shared test
data (``$GUIDED_SHARED``, by default the ``shared`` folder beside the repository): the
rust-lang/regex and RE2 test patterns, JSON-Schema-Test-Suite and JSONSchemaBench schemas, and the
tokenizer files, cut down to a few hundred tokens each; and from the repository's own grammars in
tests/data/grammars. The data is read at run time and never copied into the repository.

Each seed is named by the hash of its bytes, so running the script again adds nothing twice and
leaves alone what libFuzzer added to the corpus since. The structure-aware targets
(``regex_differential``, ``json_schema_structured``) read their input through ``arbitrary``, which
no file here is written in; they get a few pseudo-random byte strings of a few hundred bytes
instead. Those decode to some tree or other, and their length matters more than their content:
libFuzzer grows inputs from the longest seed, and from nothing it spends minutes below the
twenty-odd bytes a tree with a few keywords needs.

Standard library only; run it from anywhere: ``python3 fuzz/seed.py``. Before Python 3.11 (no
``tomllib``) the rust-lang/regex patterns are skipped and the RE2 ones still written.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None  # type: ignore[assignment]

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent
SHARED = Path(os.environ.get("GUIDED_SHARED", ROOT.parent / "shared"))
CORPUS = FUZZ / "corpus"

# Seeds past this size slow every mutation libFuzzer makes from them (and raise its -max_len);
# the few larger schemas add little the smaller ones do not.
MAX_SEED_BYTES = 32 * 1024
# Tokens kept from each vocabulary file: enough for every byte and some merges, a few KB of text.
VOCAB_TOKENS = 300


def write(target: str, seeds: Iterable[bytes]) -> int:
    """Writes `seeds` into the target's corpus folder; returns how many were new."""
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    new = 0
    for seed in seeds:
        if not seed or len(seed) > MAX_SEED_BYTES:
            continue
        path = folder / f"seed-{hashlib.sha1(seed).hexdigest()}"
        if not path.exists():
            path.write_bytes(seed)
            new += 1
    return new


def regex_patterns() -> Iterator[bytes]:
    """Every pattern of the rust-lang/regex TOML tests and of RE2's search log."""
    folder = SHARED / "corpus" / "regex"
    for path in sorted(folder.rglob("*.toml")) if tomllib else []:
        for test in tomllib.loads(path.read_text(encoding="utf-8")).get("test", []):
            regex = test.get("regex")
            for pattern in regex if isinstance(regex, list) else [regex]:
                if isinstance(pattern, str):
                    yield pattern.encode()
    # The log quotes patterns as Go string literals, which Python's literal syntax reads; the
    # pattern lines are those between a `regexps` header and the next `strings` header that
    # are quoted (the others are results).
    in_regexps = False
    for line in (folder / "re2" / "re2-search.txt").read_text(encoding="utf-8").splitlines():
        if line in ("strings", "regexps"):
            in_regexps = line == "regexps"
        elif in_regexps and line.startswith('"'):
            yield ast.literal_eval(line).encode("utf-8", "surrogatepass")


def schemas() -> Iterator[bytes]:
    """Every schema of the JSON-Schema-Test-Suite files and of the JSONSchemaBench subsets."""
    corpus = SHARED / "corpus"
    for path in sorted((corpus / "jsts").rglob("*.json")):
        if "remotes" in path.parts:
            continue
        for group in json.loads(path.read_text(encoding="utf-8")):
            yield json.dumps(group["schema"], ensure_ascii=False).encode()
    for path in sorted((corpus / "jsonschemabench").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield json.dumps(json.loads(line)["schema"], ensure_ascii=False).encode()


def grammars(*suffixes: str) -> Iterator[bytes]:
    """The repository's own example grammars with the given file suffixes."""
    for path in sorted((ROOT / "tests" / "data" / "grammars").iterdir()):
        if path.suffix in suffixes:
            yield path.read_bytes()


def small_tokenizer_json(path: Path) -> bytes:
    """`path` with its vocabulary cut to the first VOCAB_TOKENS ids: the same decoder, normalizer
    and pre-tokenizer, the merges among the kept tokens, and the added tokens renumbered past the
    kept ids so that they stay added tokens without padding the vocabulary to their real ids."""
    data = json.loads(path.read_text(encoding="utf-8"))
    model = data["model"]
    vocab = {t: i for t, i in model["vocab"].items() if i < VOCAB_TOKENS}
    merges = []
    for merge in model.get("merges", []):
        parts = merge.split(" ") if isinstance(merge, str) else merge
        if all(p in vocab for p in parts) and "".join(parts) in vocab:
            merges.append(merge)
    model["vocab"], model["merges"] = vocab, merges
    added = []
    for n, token in enumerate(data.get("added_tokens", [])):
        if token["id"] >= VOCAB_TOKENS:
            token = {**token, "id": VOCAB_TOKENS + n}
        added.append(token)
    data["added_tokens"] = added
    return json.dumps(data, ensure_ascii=False).encode()


def qwen2_tokenizer_json() -> bytes:
    """A byte-level BPE tokenizer.json from the Qwen2 vocab.json and added_tokens.json (the shared
    folder ships no tokenizer.json for it), cut to VOCAB_TOKENS ids like the others."""
    folder = SHARED / "vocab" / "qwen2"
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    added = json.loads((folder / "added_tokens.json").read_text(encoding="utf-8"))
    kept = {t: i for t, i in vocab.items() if i < VOCAB_TOKENS}
    return json.dumps(
        {
            "version": "1.0",
            "added_tokens": [
                {"id": VOCAB_TOKENS + n, "content": name, "special": True}
                for n, name in enumerate(sorted(added, key=added.get))
            ],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
            "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": kept, "merges": []},
        },
        ensure_ascii=False,
    ).encode()


def sentencepiece_tokenizer_jsons() -> Iterator[bytes]:
    """Small SentencePiece-style files, one per decoder spelling the loader undoes (Llama-2's
    Replace/ByteFallback/Fuse/Strip sequence, Metaspace, BPEDecoder) and one it refuses
    (WordPiece); the pieces cover `▁` words, `<0xNN>` byte fallback and special tokens."""
    pieces = ["<unk>", "<s>", "</s>"]
    pieces += [f"<0x{b:02X}>" for b in range(256)]
    pieces += ["▁", "▁the", "▁a", "e", "t", "he", "▁▁", "é", "</w>", "the</w>", "##ing"]
    vocab = {p: i for i, p in enumerate(pieces)}
    specials = [{"id": i, "content": p, "special": True} for i, p in enumerate(pieces[:3])]
    decoders = [
        {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ],
        },
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True},
        {"type": "BPEDecoder", "suffix": "</w>"},
        {"type": "WordPiece", "prefix": "##", "cleanup": True},
    ]
    for decoder in decoders:
        yield json.dumps(
            {
                "version": "1.0",
                "added_tokens": specials,
                "normalizer": {
                    "type": "Sequence",
                    "normalizers": [
                        {"type": "Prepend", "prepend": "▁"},
                        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
                    ],
                },
                "pre_tokenizer": None,
                "decoder": decoder,
                "model": {"type": "BPE", "vocab": vocab, "merges": [], "byte_fallback": True},
            },
            ensure_ascii=False,
        ).encode()
    # No decoder: the spelling is inferred from the normalizer and `byte_fallback`.
    yield json.dumps(
        {
            "added_tokens": specials,
            "model": {"type": "Unigram", "vocab": [[p, 0.0] for p in pieces]},
        },
        ensure_ascii=False,
    ).encode()


def tokenizer_jsons() -> Iterator[bytes]:
    for name in ("gpt2_tokenizer.json", "neox_20B_tokenizer.json"):
        yield small_tokenizer_json(SHARED / "vocab" / name)
    yield qwen2_tokenizer_json()
    yield from sentencepiece_tokenizer_jsons()


def tiktokens() -> Iterator[bytes]:
    """The first VOCAB_TOKENS lines of each rank file, and a run of lines from the middle (ranks
    that do not start at 0, multi-byte tokens); plus a few malformed files, since the loader's
    refusals (bad base64, repeated ranks or bytes) are half of what it does."""
    for name in ("cl100k_base.tiktoken", "o200k_base.tiktoken"):
        lines = (SHARED / "vocab" / name).read_bytes().splitlines(keepends=True)
        yield b"".join(lines[:VOCAB_TOKENS])
        yield b"".join(lines[50_000 : 50_000 + 50])
    a, b = base64.b64encode(b"a"), base64.b64encode(b"b")
    yield a + b" 0\n" + b + b" 0\n"
    yield a + b" 0\n" + a + b" 1\n"
    yield a + b" 0\n" + b"not base64! 1\n"
    yield a + b" 0\r\n" + b + b" 2\r\n\n"


def random_bytes() -> Iterator[bytes]:
    """Sixteen pseudo-random strings of 64 to 1,024 bytes, the same on every run."""
    for n in range(16):
        length = 64 << (n % 5) if n % 5 < 4 else 1024
        out = b""
        while len(out) < length:
            out += hashlib.sha256(b"%d:%d" % (n, len(out))).digest()
        yield out[:length]


def main() -> int:
    if not (SHARED / "corpus").is_dir():
        print(f"seed.py: no corpus under {SHARED}; set GUIDED_SHARED", file=sys.stderr)
        return 1
    # Generators: nothing is read before its target's turn.
    sources = {
        "regex_parse": regex_patterns(),
        "json_schema": schemas(),
        "vocab_tokenizer_json": tokenizer_jsons(),
        "vocab_tiktoken": tiktokens(),
        "grammar_gbnf": grammars(".gbnf", ".ebnf"),
        "grammar_lark": grammars(".lark"),
        "regex_differential": random_bytes(),
        "json_schema_structured": random_bytes(),
    }
    for target, seeds in sources.items():
        print(f"seed.py: {target}: {write(target, seeds)} new seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
