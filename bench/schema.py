"""JSON Schema compilation side by side: guided, llguidance, xgrammar and outlines-core.

Every schema of the visible JSONSchemaBench sample (``../shared/corpus/jsonschemabench``) and of the
JSON-Schema-Test-Suite (``../shared/corpus/jsts``, one schema per test group) is compiled by each
engine, and each labelled instance is then run through the compiled constraint, serialized twice
(``json.dumps(x)`` and ``json.dumps(x, separators=(",", ":"))``). Every engine here fixes member
order to the schema's, and a model following the schema writes members in that order, so each
instance is offered in the member orders a schema can declare: the order of every schema that
applies at a location (``guided check``'s reading), the order of the ``anyOf``/``oneOf`` branch
and ``if`` side the value takes (found with ``jsonschema``), and the instance's own. A valid
instance counts as accepted when some order is accepted in both spellings, an invalid one as
rejected when every order is. An engine passes a schema when it compiles it, accepts every valid
instance and rejects every invalid one. The suite's ``format.json`` is left out: its labels read
``format`` as an annotation, which every engine here asserts (``tests/test_json_schema_suite.py``
runs it through guided with formats off, the suite's reading).

The table counts, per subset and in total: schemas compiled, schemas passing, invalid instances
wrongly accepted, valid instances wrongly rejected, compile timeouts and crashes, and the compile
time (schema text to first mask) at p50, p95, p99 and its maximum; then the same
percentiles for guided and each peer over the schemas both compile, and guided's slowest schemas
among those llguidance compiles.

All engines run over the same byte-level vocabulary (256 single-byte tokens and an EOS), so the
verdicts are the engines' languages, not accidents of one tokenizer, and the compile time is the
time from schema text to the first token mask, without the vocabulary walk a real tokenizer adds
(``bench/index.py`` measures that). Each engine runs in its own worker process, so a crash or a
hang costs that engine one schema: a schema that takes longer than ``--timeout`` seconds (default
30; compile and instances together) is a timeout, a worker that dies is a crash.

guided uses its defaults (strict mode, formats asserted, ``[ ]?`` whitespace) through
``TokenIndex.from_json_schema``, the path an engine takes; its automaton is built lazily, so a size
limit can be reached while instances are walked, which counts as a refusal. llguidance and
xgrammar use their defaults (flexible whitespace, strict mode); outlines-core its default
whitespace, through ``build_regex_from_schema`` and an ``Index``.

Run ``python bench/schema.py`` (all subsets, all engines; about half an hour on two cores) or
narrow it with ``--subsets``, ``--engines`` and ``--limit``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import median, percentile, shared_root, table, write_results
from guided._canonical import Follows, declared_reorder

JSTS = "JSON-Schema-Test-Suite"


def bench_subsets() -> list[str]:
    """The JSONSchemaBench subsets present in the shared corpus, by name."""
    return sorted(p.stem for p in (shared_root() / "corpus" / "jsonschemabench").glob("*.jsonl"))


ENGINES = ("guided", "llguidance", "xgrammar", "outlines")
EOS = 256


#: Spellings of each member order: ``json.dumps``'s default separators, then compact ones.
SPELLINGS = ((", ", ": "), (",", ":"))


@dataclass
class Instance:
    valid: bool
    #: Each member order in every spelling: ``texts[o * len(SPELLINGS) + s]``.
    texts: list[bytes]

    def judged(self, verdicts: list[bool]) -> bool:
        """Whether an engine's verdicts on ``texts`` agree with the label: a valid instance must be
        accepted in some order in every spelling, an invalid one refused in all."""
        if not self.valid:
            return not any(verdicts)
        n = len(SPELLINGS)
        return all(any(verdicts[s::n]) for s in range(n))


@dataclass
class Case:
    subset: str
    id: str
    schema: Any
    instances: list[Instance]


# --- the corpus -------------------------------------------------------------------------------


def load_cases(subsets: list[str], limit: int | None) -> list[Case]:
    cases: list[Case] = []
    root = shared_root() / "corpus"
    for subset in subsets:
        found: list[Case] = []
        if subset == JSTS:
            for path in sorted((root / "jsts").glob("*.json")):
                if path.name == "format.json":
                    continue
                for n, group in enumerate(json.loads(path.read_text())):
                    tests = [(t["valid"], t["data"]) for t in group["tests"]]
                    found.append(case(subset, f"{JSTS}/{path.stem}/{n}", group["schema"], tests))
        else:
            for line in (root / "jsonschemabench" / f"{subset}.jsonl").read_text().splitlines():
                raw = json.loads(line)
                tests = [(t["valid"], t["data"]) for t in raw.get("tests", [])]
                found.append(case(subset, raw["id"], raw["schema"], tests))
        cases.extend(found[:limit])
    return cases


def case(subset: str, name: str, schema: Any, tests: list[tuple[bool, Any]]) -> Case:
    follows = branch_oracle(schema)
    instances = []
    for valid, value in tests:
        orders = [declared_reorder(value, schema), value]
        if follows is not None:
            orders.insert(1, declared_reorder(value, schema, follows=follows))
        texts: list[bytes] = []
        for order in orders:
            spelled = [json.dumps(order, separators=sep).encode() for sep in SPELLINGS]
            if spelled[0] not in texts:
                texts.extend(spelled)
        instances.append(Instance(bool(valid), texts))
    return Case(subset, name, schema, instances)


def branch_oracle(schema: Any) -> Follows | None:
    """Whether a value satisfies a subschema of ``schema`` (references resolved in it), by the
    ``jsonschema`` validator of the schema's draft; None where it cannot read the schema."""
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        root = cls(schema)
    except Exception:
        return None

    def follows(sub: Any, value: Any) -> bool:
        try:
            return bool(root.evolve(schema=sub).is_valid(value))
        except Exception:
            return False

    return follows


# --- the engines ------------------------------------------------------------------------------
#
# Each engine is a function from schema text to a checker (bytes -> accepted?), built in the worker.
# A raised exception is a refusal; the time to build the checker includes the first mask.

Checker = Callable[[bytes], bool]


def byte_tokens() -> list[bytes | None]:
    return [bytes([b]) for b in range(256)] + [None]


def guided_engine() -> Callable[[str], Checker]:
    # Masks come back as numpy arrays; importing numpy on the first mask would charge one schema
    # with a process's start-up, as the peers' set-ups import theirs before the clock starts.
    import numpy  # noqa: F401

    import guided

    vocab = guided.Vocabulary(byte_tokens(), eos_token_ids=[EOS])

    def compile_schema(text: str) -> Checker:
        index = guided.TokenIndex.from_json_schema(text, vocab)
        index.bitmask(index.initial_state)

        def check(data: bytes) -> bool:
            s = index.initial_state
            for b in data:
                s = index.next_state(s, b)
                if s == 0:
                    return False
            return bool(index.is_accepting(s))

        return check

    return compile_schema


def llguidance_engine() -> Callable[[str], Checker]:
    import llguidance as llg
    import llguidance.numpy as lln
    from peers import llguidance_tokenizer

    import guided

    vocab = guided.Vocabulary(byte_tokens(), eos_token_ids=[EOS])
    tokenizer = llguidance_tokenizer(vocab, byte_tokens())

    def compile_schema(text: str) -> Checker:
        grammar = llg.LLMatcher.grammar_from_json_schema(text)
        matcher = llg.LLMatcher(tokenizer, grammar)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        mask = lln.allocate_token_bitmask(1, tokenizer.vocab_size)
        lln.fill_next_token_bitmask(matcher, mask, 0)

        def check(data: bytes) -> bool:
            m = llg.LLMatcher(tokenizer, grammar)
            return bool(m.consume_tokens(list(data)) and m.is_accepting())

        return check

    return compile_schema


def xgrammar_engine() -> Callable[[str], Checker]:
    import xgrammar as xgr

    info = xgr.TokenizerInfo(
        [b if b is not None else b"" for b in byte_tokens()],
        xgr.VocabType.RAW,
        vocab_size=EOS + 1,
        stop_token_ids=[EOS],
    )
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)

    def compile_schema(text: str) -> Checker:
        compiled = compiler.compile_json_schema(text)
        matcher = xgr.GrammarMatcher(compiled)
        mask = xgr.allocate_token_bitmask(1, info.vocab_size)
        matcher.fill_next_token_bitmask(mask)

        def check(data: bytes) -> bool:
            matcher.reset()
            return bool(matcher.accept_string(data) and matcher.accept_token(EOS))

        return check

    return compile_schema


def outlines_engine() -> Callable[[str], Checker]:
    import outlines_core as oc
    from outlines_core.json_schema import build_regex_from_schema

    vocabulary = oc.Vocabulary(EOS, {bytes([b]): [b] for b in range(256)})

    def compile_schema(text: str) -> Checker:
        index = oc.Index(build_regex_from_schema(text), vocabulary)
        index.get_allowed_tokens(index.get_initial_state())

        def check(data: bytes) -> bool:
            s: int | None = index.get_initial_state()
            for b in data:
                s = index.get_next_state(s, b)
                if s is None:
                    return False
            return bool(index.is_final_state(s))

        return check

    return compile_schema


FACTORIES: dict[str, Callable[[], Callable[[str], Checker]]] = {
    "guided": guided_engine,
    "llguidance": llguidance_engine,
    "xgrammar": xgrammar_engine,
    "outlines": outlines_engine,
}


def serve(engine: str, conn: Connection) -> None:
    """Worker loop: (schema text, instance texts) -> (status, compile s, verdicts, message)."""
    compile_schema = FACTORIES[engine]()
    while True:
        job = conn.recv()
        if job is None:
            return
        text, instances = job
        start = time.perf_counter()
        try:
            check = compile_schema(text)
        except Exception as exc:
            conn.send(("refused", time.perf_counter() - start, [], f"{type(exc).__name__}: {exc}"))
            continue
        elapsed = time.perf_counter() - start
        try:
            verdicts = [[check(t) for t in texts] for texts in instances]
        except Exception as exc:
            conn.send(("refused", elapsed, [], f"while matching: {type(exc).__name__}: {exc}"))
            continue
        conn.send(("compiled", elapsed, verdicts, ""))


class Worker:
    """One engine in a child process that can be killed on a timeout and restarted."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.proc: Any = None
        self.conn: Connection | None = None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(self.engine, child), daemon=True)
        self.proc.start()
        self.conn = parent

    def run(
        self, text: str, instances: list[list[bytes]], timeout: float
    ) -> tuple[str, float, list[list[bool]], str]:
        if self.proc is None or not self.proc.is_alive():
            self.start()
        assert self.conn is not None
        self.conn.send((text, instances))
        try:
            if self.conn.poll(timeout):
                result: tuple[str, float, list[list[bool]], str] = self.conn.recv()
                return result
            status, message = "timeout", f"over {timeout:g} s"
        except (EOFError, ConnectionError):
            status, message = "crash", f"worker exit code {self.proc.exitcode}"
        self.stop()
        return status, float("nan"), [], message

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()
        self.proc = None


# --- scoring ----------------------------------------------------------------------------------


@dataclass
class Tally:
    schemas: int = 0
    compiled: int = 0
    passing: int = 0
    invalid_accepted: int = 0
    valid_rejected: int = 0
    timeouts: int = 0
    crashes: int = 0
    compile_s: list[float] = field(default_factory=list)

    def add(
        self, case: Case, status: str, elapsed: float, verdicts: list[list[bool]]
    ) -> tuple[int, int]:
        self.schemas += 1
        self.timeouts += status == "timeout"
        self.crashes += status == "crash"
        if status != "compiled":
            return 0, 0
        self.compiled += 1
        self.compile_s.append(elapsed)
        wrong = [i for i, v in zip(case.instances, verdicts) if not i.judged(v)]
        bad_invalid = sum(1 for i in wrong if not i.valid)
        bad_valid = sum(1 for i in wrong if i.valid)
        self.invalid_accepted += bad_invalid
        self.valid_rejected += bad_valid
        self.passing += bad_invalid == 0 and bad_valid == 0
        return bad_invalid, bad_valid

    def row(self, name: str, engine: str) -> list[Any]:
        ms = [t * 1e3 for t in self.compile_s]
        return [
            name,
            engine,
            self.schemas,
            self.compiled,
            self.passing,
            self.invalid_accepted,
            self.valid_rejected,
            self.timeouts,
            self.crashes,
            median(ms) if ms else float("nan"),
            percentile(ms, 95),
            percentile(ms, 99),
            max(ms) if ms else float("nan"),
        ]


HEADERS = [
    "subset",
    "engine",
    "schemas",
    "compiled",
    "passing",
    "invalid acc.",
    "valid rej.",
    "timeouts",
    "crashes",
    "compile ms p50",
    "p95",
    "p99",
    "max",
]

PAIR_HEADERS = ["peer", "schemas both compile", "engine", "p50", "p95", "p99", "max"]


def ttfm_pairs(records: list[dict[str, Any]], engines: list[str]) -> list[list[Any]]:
    """Time to first mask of guided and of each peer over the schemas both compile: per-engine
    percentiles over different sets would compare different schemas."""
    compiled: dict[str, dict[str, float]] = {}
    for r in records:
        if r["status"] == "compiled":
            compiled.setdefault(r["engine"], {})[r["id"]] = r["compile_s"] * 1e3
    rows: list[list[Any]] = []
    mine = compiled.get("guided", {})
    for peer in engines:
        if peer == "guided" or peer not in compiled:
            continue
        both = sorted(set(mine) & set(compiled[peer]))
        for engine, times in (("guided", mine), (peer, compiled[peer])):
            ms = [times[i] for i in both]
            rows.append(
                [
                    peer,
                    len(both),
                    engine,
                    median(ms) if ms else float("nan"),
                    percentile(ms, 95),
                    percentile(ms, 99),
                    max(ms) if ms else float("nan"),
                ]
            )
    return rows


def slowest(records: list[dict[str, Any]], reference: str, threshold_ms: float) -> list[str]:
    """guided's first masks above `threshold_ms` among the schemas `reference` compiles, slowest
    first."""
    theirs = {r["id"] for r in records if r["engine"] == reference and r["status"] == "compiled"}
    mine = [
        r
        for r in records
        if r["engine"] == "guided" and r["id"] in theirs and r["compile_s"] * 1e3 > threshold_ms
    ]
    mine.sort(key=lambda r: -r["compile_s"])
    return [f"{r['compile_s'] * 1e3:9.0f} ms  {r['id']} ({r['status']})" for r in mine]


def progress(cases: list[Case]) -> Iterator[Case]:
    try:
        from tqdm import tqdm
    except ImportError:
        yield from cases
        return
    yield from tqdm(cases, desc="schemas", unit="schema", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subsets", nargs="*", default=None, help="default: all, and the suite")
    parser.add_argument("--engines", nargs="*", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--limit", type=int, default=None, help="schemas per subset")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per schema and engine")
    parser.add_argument("--failures", type=int, default=20, help="failures listed per engine")
    args = parser.parse_args()

    if args.subsets is None:
        args.subsets = [*bench_subsets(), JSTS]
    cases = load_cases(args.subsets, args.limit)
    workers = {e: Worker(e) for e in args.engines}
    tallies: dict[tuple[str, str], Tally] = {}
    failures: dict[str, list[str]] = {e: [] for e in args.engines}
    records = []
    try:
        for c in progress(cases):
            text = json.dumps(c.schema)
            texts = [i.texts for i in c.instances]
            for engine, worker in workers.items():
                status, elapsed, verdicts, message = worker.run(text, texts, args.timeout)
                for key in ((c.subset, engine), ("total", engine)):
                    bad_invalid, bad_valid = tallies.setdefault(key, Tally()).add(
                        c, status, elapsed, verdicts
                    )
                if bad_invalid or bad_valid or status in ("timeout", "crash"):
                    failures[engine].append(
                        f"{c.id}: {status} {message[:120]} "
                        f"invalid accepted {bad_invalid}, valid rejected {bad_valid}"
                    )
                records.append(
                    {
                        "subset": c.subset,
                        "id": c.id,
                        "engine": engine,
                        "status": status,
                        "compile_s": elapsed,
                        "invalid_accepted": bad_invalid,
                        "valid_rejected": bad_valid,
                        "message": message[:300],
                    }
                )
    finally:
        for w in workers.values():
            w.stop()

    rows = []
    for subset in [*args.subsets, "total"]:
        for engine in args.engines:
            if (subset, engine) in tallies:
                rows.append(tallies[subset, engine].row(subset, engine))
    print(table(HEADERS, rows))
    pairs = ttfm_pairs(records, args.engines)
    if pairs:
        print("\nTime to first mask (ms) on the schemas guided and each peer both compile")
        print(table(PAIR_HEADERS, pairs))
    if "llguidance" in args.engines and "guided" in args.engines:
        slow = slowest(records, "llguidance", 250.0)
        print(f"\nguided above 250 ms on schemas llguidance compiles: {len(slow)}; the worst ten")
        print("\n".join("  " + line for line in slow[:10]))
    for engine, lines in failures.items():
        if lines:
            print(f"\n{engine}: {len(lines)} schemas wrong, timed out or crashed; first few:")
            print("\n".join("  " + line for line in lines[: args.failures]))
    path = write_results(
        "schema",
        {
            "rows": [dict(zip(HEADERS, r)) for r in rows],
            "ttfm_pairs": [dict(zip(PAIR_HEADERS, r)) for r in pairs],
            "schemas": records,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
