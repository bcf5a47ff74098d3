"""The ``guided`` command line (also ``python -m guided``).

Three commands, each printing JSON lines on stdout (one object per line: readable, and easy to feed
to ``jq`` or a notebook) and messages on stderr:

- ``guided demo``: the offline demo of :mod:`guided._demo` (what ``make demo`` runs);
- ``guided compile``: compile a regex, a JSON Schema or a grammar against a tokenizer's
  vocabulary, print the figures, optionally precompute every reachable state's mask (``--warm``,
  with a progress bar on a terminal) and write the index to a file (``--out``);
- ``guided check``: would the constraint of a schema have let a model write this instance? The
  instance is serialized the way the compiler lays documents out (members in declared order, see
  :mod:`guided._canonical`) and walked byte by byte through the constraint; the reply says where it
  stops and what ``jsonschema`` thinks of the instance, when it is installed.

The exit status says what happened, so scripts can branch on it without parsing messages:
:data:`EXIT_OK` (0), :data:`EXIT_NO_MATCH` (1: the text is outside the constraint),
:data:`EXIT_USAGE` (2: bad arguments or an unreadable input file, argparse's own code),
:data:`EXIT_CONSTRAINT` (3: a regex, schema or grammar that cannot be compiled, including one over a
size limit) and :data:`EXIT_VOCABULARY` (4: an unreadable or inconsistent tokenizer file).

``--out`` writes a pickle of the :class:`guided.TokenIndex`. An index pickles as its *recipe* (the
pattern or the schema text with its options, and the vocabulary's token bytes), not as its
cached masks: loading it recompiles the constraint (milliseconds) and masks are computed again on
first use. Like any pickle, only load files you trust.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pickle
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import guided
from guided import DFA, Guide, TokenIndex, Vocabulary
from guided._errors import (
    GrammarSyntaxError,
    GuidedError,
    RegexSyntaxError,
    SizeLimitError,
    UnsupportedSchemaError,
    VocabularyError,
)

__all__ = [
    "EXIT_CONSTRAINT",
    "EXIT_NO_MATCH",
    "EXIT_OK",
    "EXIT_USAGE",
    "EXIT_VOCABULARY",
    "build_parser",
    "main",
]

EXIT_OK = 0
EXIT_NO_MATCH = 1
EXIT_USAGE = 2
EXIT_CONSTRAINT = 3
EXIT_VOCABULARY = 4


class CommandError(Exception):
    """A failure the command reports in one line and an exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def emit(record: dict[str, Any]) -> None:
    """Prints one JSON line."""
    print(json.dumps(record, ensure_ascii=False), flush=True)


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def _read_text(path: str, what: str) -> str:
    """The text of a file, or of stdin for ``-``."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CommandError(f"cannot read {what} {path!r}: {e}", EXIT_USAGE) from None


def _read_schema(path: str) -> Any:
    text = _read_text(path, "schema")
    try:
        return json.loads(text)
    except ValueError as e:
        raise CommandError(f"schema {path!r} is not JSON: {e}", EXIT_CONSTRAINT) from None


def _state_limit(args: argparse.Namespace) -> dict[str, Any]:
    """``max_states`` when given; otherwise the library's default for the constraint's kind."""
    return {} if args.max_states is None else {"max_states": args.max_states}


def _schema_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {
        "max_recursion_depth": args.max_recursion_depth,
        "strict": not args.non_strict,
        **_state_limit(args),
    }
    if args.whitespace is not None:
        options["whitespace"] = args.whitespace
    return options


def _load_vocabulary(args: argparse.Namespace) -> tuple[Vocabulary, str]:
    eos = args.eos if args.eos else None
    size = args.vocab_size
    try:
        if args.tokenizer is not None:
            path = args.tokenizer
            if not os.path.isfile(path):
                raise CommandError(f"tokenizer {path!r} is not a file", EXIT_USAGE)
            if path.endswith(".model"):
                from guided._vocab import from_sentencepiece

                return from_sentencepiece(path, eos_token_ids=eos, vocab_size=size), path
            return Vocabulary.from_tokenizer_json(path, eos_token_ids=eos, vocab_size=size), path
        path = args.tiktoken
        if not os.path.isfile(path):
            raise CommandError(f"tiktoken file {path!r} is not a file", EXIT_USAGE)
        return Vocabulary.from_tiktoken(path, eos_token_ids=eos, vocab_size=size), path
    except VocabularyError as e:
        raise CommandError(str(e), EXIT_VOCABULARY) from None


class _NoProgress:
    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None


def _progress(description: str) -> Any:
    """A tqdm bar on stderr when it is a terminal (and tqdm is installed); else nothing."""
    if not sys.stderr.isatty():
        return _NoProgress()
    try:
        tqdm: Any = importlib.import_module("tqdm")
    except ImportError:
        return _NoProgress()
    return tqdm.tqdm(desc=description, unit="state")


def _reachable_states(index: TokenIndex) -> Iterator[int]:
    """Every state a token sequence can reach from the start, breadth first, each with its mask
    computed (which is what precomputes it)."""
    seen = {index.initial_state}
    frontier = [index.initial_state]
    while frontier:
        following: list[int] = []
        for state in frontier:
            index.bitmask(state)
            yield state
            for successor in set(index.next_states(state).tolist()):
                if successor > 0 and successor not in seen:  # 0 is "not allowed", < 0 after EOS
                    seen.add(successor)
                    following.append(successor)
        frontier = following


def run_compile(args: argparse.Namespace) -> int:
    if args.schema is not None:
        schema = _read_schema(args.schema)
    if args.grammar is not None:
        grammar = _read_text(args.grammar, "grammar")
    vocab, vocab_source = _load_vocabulary(args)
    record: dict[str, Any] = {
        "vocabulary": vocab_source,
        "tokens": len(vocab),
        "vocab_size": vocab.vocab_size,
        "eos_token_ids": list(vocab.eos_token_ids),
    }
    start = time.perf_counter()
    if args.schema is not None:
        # From the schema's own expression: its printed pattern spells out every copy of every
        # shared language, and can be refused where the index builds.
        index = TokenIndex.from_json_schema(schema, vocab, **_schema_options(args))
        record.update(kind="json_schema", source=args.schema)
    elif args.grammar is not None:
        syntax = args.syntax or ("lark" if args.grammar.endswith(".lark") else "gbnf")
        options = {"root": args.root, "syntax": syntax, **_state_limit(args)}
        index = TokenIndex.from_grammar(grammar, vocab, **options)
        record.update(kind="grammar", source=args.grammar)
    else:
        index = TokenIndex.from_regex(args.regex, vocab, **_state_limit(args))
        record.update(kind="regex", source=args.regex, regex_length=len(args.regex))
    record["compile_ms"] = _ms(time.perf_counter() - start)

    start = time.perf_counter()
    allowed = int(index.allowed(index.initial_state).sum())
    record["first_mask_ms"] = _ms(time.perf_counter() - start)
    record["allowed_at_start"] = allowed
    if args.warm:
        start = time.perf_counter()
        with _progress("masks") as bar:
            reachable = 0
            for _ in _reachable_states(index):
                reachable += 1
                bar.update(1)
        record["reachable_states"] = reachable
        record["warm_ms"] = _ms(time.perf_counter() - start)
    record["index_states"] = index.num_states
    record["distinct_masks"] = index.num_masks
    record["memory_bytes"] = index.memory_bytes()
    if args.out is not None:
        try:
            with open(args.out, "wb") as f:
                pickle.dump(index, f, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError as e:
            raise CommandError(f"cannot write {args.out!r}: {e}", EXIT_USAGE) from None
        record["out"] = args.out
        record["out_bytes"] = os.path.getsize(args.out)
    emit(record)
    return EXIT_OK


def _byte_vocabulary() -> Vocabulary:
    """One token per byte plus an EOS: walking it is walking the constraint's byte automaton."""
    return Vocabulary([bytes([b]) for b in range(256)] + [None], eos_token_ids=[256])


def _walk(index: TokenIndex, data: bytes) -> tuple[int, bool]:
    """How many leading bytes of ``data`` the constraint accepts, and whether all of it is a
    complete match."""
    guide = Guide(index)
    tokens = list(data)
    accepted = guide.validate_tokens(tokens)
    if accepted < len(tokens):
        return accepted, False
    guide.accept_tokens(tokens)
    return accepted, guide.is_accepting()


def _jsonschema_verdict(instance: Any, schema: Any) -> bool | None:
    try:
        jsonschema: Any = importlib.import_module("jsonschema")  # optional: not a dependency
    except ImportError:
        return None
    try:
        validator = jsonschema.validators.validator_for(schema)
        return bool(validator(schema).is_valid(instance))
    except jsonschema.exceptions.SchemaError:
        return None


def run_check(args: argparse.Namespace) -> int:
    schema = _read_schema(args.schema)
    raw = _read_text(args.instance, "instance")
    instance: Any = None
    candidates: list[str]
    if args.raw:
        candidates = [raw[:-1] if raw.endswith("\n") else raw]
    else:
        try:
            instance = json.loads(raw)
        except ValueError as e:
            raise CommandError(
                f"instance {args.instance!r} is not JSON: {e} (use --raw to check text as is)",
                EXIT_USAGE,
            ) from None
        from guided._canonical import declared_dumps

        separators = (",", ":") if args.compact else (", ", ": ")
        candidates = [
            declared_dumps(instance, schema, compact=args.compact),
            json.dumps(instance, ensure_ascii=False, separators=separators),
        ]
    index = TokenIndex.from_json_schema(schema, _byte_vocabulary(), **_schema_options(args))
    best: tuple[int, bool, str] | None = None
    for text in dict.fromkeys(candidates):
        accepted, complete = _walk(index, text.encode("utf-8"))
        if best is None or complete or accepted > best[0]:
            best = (accepted, complete, text)
        if complete:
            break
    assert best is not None  # invariant: there is at least one candidate
    accepted, complete, text = best
    data = text.encode("utf-8")
    record: dict[str, Any] = {"match": complete, "text": text, "accepted_bytes": accepted}
    if instance is not None:
        record["jsonschema_valid"] = _jsonschema_verdict(instance, schema)
    emit(record)
    if complete:
        return EXIT_OK
    if accepted == len(data):
        where = "the text ends before the constraint is satisfied"
    else:
        before = data[max(0, accepted - 30) : accepted].decode("utf-8", "replace")
        after = data[accepted : accepted + 10].decode("utf-8", "replace")
        where = f"the constraint stops at byte {accepted}: {before!r} then {after!r}"
    print(f"guided: no match: {where}", file=sys.stderr)
    return EXIT_NO_MATCH


def run_demo(args: argparse.Namespace) -> int:
    if args.tokenizer is not None and not os.path.isfile(args.tokenizer):
        raise CommandError(f"tokenizer {args.tokenizer!r} is not a file", EXIT_USAGE)
    if args.tiktoken is not None and not os.path.isfile(args.tiktoken):
        raise CommandError(f"tiktoken file {args.tiktoken!r} is not a file", EXIT_USAGE)
    from guided import _demo  # imports torch: only for this command

    try:
        for record in _demo.run(tokenizer=args.tokenizer, tiktoken=args.tiktoken):
            emit(record)
    except VocabularyError as e:
        raise CommandError(str(e), EXIT_VOCABULARY) from None
    return EXIT_OK


def run_match(args: argparse.Namespace) -> int:
    matched = DFA(args.regex, max_states=args.max_states).match(args.text)
    emit({"regex": args.regex, "text": args.text, "match": matched})
    return EXIT_OK if matched else EXIT_NO_MATCH


def _add_vocabulary_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="a Hugging Face tokenizer.json (or a SentencePiece .model)",
    )
    source.add_argument("--tiktoken", metavar="PATH", help="a tiktoken .tiktoken ranks file")


def _add_schema_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--whitespace", metavar="REGEX", help='whitespace between JSON tokens (default "[ ]?")'
    )
    parser.add_argument("--max-recursion-depth", type=int, default=3, metavar="N")
    parser.add_argument(
        "--non-strict",
        action="store_true",
        help="ignore (with a warning) keywords whose omission only widens the language",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guided",
        description="Exact, fast constrained decoding: regexes and JSON Schemas to token masks.",
        epilog="exit status: 0 ok, 1 no match, 2 usage or unreadable input, 3 invalid constraint, "
        "4 unreadable vocabulary",
    )
    parser.add_argument("--version", action="version", version=f"guided {guided.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="an offline end-to-end demo on an embedded vocabulary")
    _add_vocabulary_options(demo, required=False)
    demo.set_defaults(run=run_demo)

    compile_ = sub.add_parser(
        "compile",
        help="compile a regex, JSON Schema or grammar against a vocabulary, print figures",
    )
    constraint = compile_.add_mutually_exclusive_group(required=True)
    constraint.add_argument("--regex", metavar="R", help="a full-match regex")
    constraint.add_argument("--schema", metavar="FILE", help="a JSON Schema file")
    constraint.add_argument("--grammar", metavar="FILE", help="a GBNF, EBNF or Lark grammar file")
    compile_.add_argument("--root", default="root", help="the grammar's start rule (root)")
    compile_.add_argument(
        "--syntax",
        choices=["gbnf", "ebnf", "lark"],
        help="the grammar's syntax (default: lark for a .lark file, else gbnf)",
    )
    _add_vocabulary_options(compile_, required=True)
    compile_.add_argument(
        "--eos",
        type=int,
        action="append",
        metavar="ID",
        help="EOS token id (repeatable; default: the tokenizer's)",
    )
    compile_.add_argument(
        "--vocab-size",
        type=int,
        metavar="N",
        help="the model's logit width, when wider than the tokenizer",
    )
    compile_.add_argument(
        "--max-states",
        type=int,
        metavar="N",
        help="DFA state limit (default: 20,000 for a regex, 200,000 for a schema)",
    )
    _add_schema_options(compile_)
    compile_.add_argument(
        "--warm", action="store_true", help="precompute the mask of every reachable state"
    )
    compile_.add_argument(
        "--out", metavar="FILE", help="write the index (a pickle: the recipe, recompiled on load)"
    )
    compile_.set_defaults(run=run_compile)

    check = sub.add_parser("check", help="would the constraint of a schema accept this instance?")
    check.add_argument("--schema", metavar="FILE", required=True, help="a JSON Schema file")
    check.add_argument("instance", metavar="INSTANCE", help="a JSON file, or - for stdin")
    check.add_argument(
        "--max-states", type=int, metavar="N", help="DFA state limit (default: 200,000)"
    )
    check.add_argument(
        "--compact", action="store_true", help='serialize without spaces after ":" and ","'
    )
    check.add_argument(
        "--raw",
        action="store_true",
        help="check the file's text as it is (one trailing newline dropped)",
    )
    _add_schema_options(check)
    check.set_defaults(run=run_check)

    match = sub.add_parser("match", help="full-match TEXT against REGEX")
    match.add_argument("regex")
    match.add_argument("text")
    match.add_argument("--max-states", type=int, default=20_000, metavar="N")
    match.set_defaults(run=run_match)
    return parser


def _fail(message: str, code: int) -> int:
    print(f"guided: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except CommandError as e:
        return _fail(str(e), e.code)
    except (RegexSyntaxError, GrammarSyntaxError, UnsupportedSchemaError, SizeLimitError) as e:
        return _fail(str(e), EXIT_CONSTRAINT)
    except VocabularyError as e:
        return _fail(str(e), EXIT_VOCABULARY)
    except GuidedError as e:
        return _fail(str(e), EXIT_USAGE)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`guided demo | head`): stop quietly, as Unix tools do, and keep
        # the interpreter's final flush from failing again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return code
