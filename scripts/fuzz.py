"""Coverage-guided fuzzing of the codec and of BrokerCore with atheris (libFuzzer), for as long as asked.

    .venv/bin/python scripts/fuzz.py [--seconds 600] [--target codec,broker] [--seed 1] [--work DIR]
                                     [--max-len 4096] [--quiet]

Each target (tests/fuzz/harness.py) runs in a child process for --seconds, instrumented by atheris, its corpus
kept in WORK/corpus-TARGET (so that a later run goes on from there) and seeded with valid sessions. A failing
input does not stop the run: each distinct failure (exception type and where it was raised) is written once
to WORK/crashes/TARGET-SHA1.bin with its traceback beside it (.txt); replay one with --replay FILE. A hang
(libFuzzer's -timeout, 10 s per input) or running out of memory (-rss_limit_mb) ends that target's run and is
reported with libFuzzer's artifact. The last lines say, per target, the inputs tried and the failures found;
exit status 1 when there were any, 2 when atheris is not installed (`pip install -e '.[test]'` on Linux x86-64).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS = ("codec", "broker")


def _signature(exc: BaseException) -> str:
    """One per defect: the type of the failure and where it was raised (the innermost frame of the project; for
    a broken invariant, the harness's check and the first packet type its message names)."""
    tb = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, AssertionError):
        named = re.search(r"\b([A-Z][A-Za-z]+)\(", str(exc))
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
        return f"AssertionError at {where}" + (f" ({named.group(1)})" if named else "")
    frames = [f for f in tb if "mqtt_cli" in f.filename] or tb
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    return f"{type(exc).__name__} at {where}"


def worker(target: str, work: Path, libfuzzer_args: list[str]) -> None:
    """The child: atheris over one target, counting inputs and writing each new failure once."""
    import atheris

    with atheris.instrument_imports(include=["mqtt_cli"]):
        from tests.fuzz import harness
    func = {"codec": harness.codec_input, "broker": harness.broker_input}[target]
    crashes = work / "crashes"
    crashes.mkdir(parents=True, exist_ok=True)
    stats_path = work / f"stats-{target}.json"
    seen: dict[str, str] = {}
    state = {"inputs": 0, "failures": 0, "last": time.monotonic()}

    def write_stats() -> None:
        stats_path.write_text(json.dumps({"inputs": state["inputs"], "failures": state["failures"], "distinct": seen}))

    def one_input(data: bytes) -> None:
        state["inputs"] += 1
        try:
            func(data)
        except Exception as exc:
            state["failures"] += 1
            sig = _signature(exc)
            if sig not in seen:
                name = f"{target}-{hashlib.sha1(data).hexdigest()[:16]}"
                seen[sig] = name
                (crashes / f"{name}.bin").write_bytes(data)
                (crashes / f"{name}.txt").write_text(f"{sig}\n\n{traceback.format_exc()}")
                write_stats()
        now = time.monotonic()
        if now - state["last"] > 2:
            state["last"] = now
            write_stats()

    write_stats()
    atheris.Setup([sys.argv[0], *libfuzzer_args], one_input)
    atheris.Fuzz()


def seed_corpus(target: str, corpus: Path) -> None:
    from tests.fuzz.seeds import seeds

    corpus.mkdir(parents=True, exist_ok=True)
    if any(corpus.iterdir()):
        return
    for n, data in enumerate(seeds(target)):
        (corpus / f"seed-{n}").write_bytes(data)


def run_target(target: str, args: argparse.Namespace) -> dict[str, object]:
    work: Path = args.work
    corpus = work / f"corpus-{target}"
    seed_corpus(target, corpus)
    stats_path = work / f"stats-{target}.json"
    stats_path.unlink(missing_ok=True)
    libfuzzer = [
        f"-max_total_time={args.seconds}", f"-seed={args.seed}", f"-max_len={args.max_len}", "-timeout=10",
        "-rss_limit_mb=2048", f"-artifact_prefix={work}/crashes/{target}-", "-print_final_stats=1", str(corpus),
    ]  # fmt: skip
    (work / "crashes").mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", target, "--work", str(work), "--", *libfuzzer]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.seconds + 300)
    elapsed = time.monotonic() - started
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {"inputs": 0, "failures": 0, "distinct": {}}
    # libFuzzer's own count is final (ours is written every 2 s): the larger of the two.
    executed = re.search(r"stat::number_of_executed_units: (\d+)", proc.stderr)
    if executed:
        stats["inputs"] = max(stats["inputs"], int(executed.group(1)))
    tail = proc.stderr.strip().splitlines()[-12:]
    if not args.quiet:
        sys.stderr.write("\n".join(f"  [{target}] {line}" for line in tail) + "\n")
    stopped = None
    if proc.returncode != 0:
        # libFuzzer ends the run on a hang (timeout), out of memory or a crash of the interpreter itself.
        why = [line for line in tail if "ERROR" in line or "timeout" in line.lower()] or tail[-1:] or ["?"]
        stopped = f"exit status {proc.returncode}: {why[-1]}"
    return {
        "target": target,
        "inputs": stats["inputs"],
        "seconds": round(elapsed, 1),
        "failures": stats["failures"],
        "distinct": stats["distinct"],
        "stopped": stopped,
        "corpus": sum(1 for _ in corpus.iterdir()),
    }


def replay(path: Path) -> int:
    from tests.fuzz import harness

    target = path.name.split("-", 1)[0]
    func = {"codec": harness.codec_input, "broker": harness.broker_input}[target]
    func(path.read_bytes())
    print(f"{path}: no failure")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=600, help="per target (default 600)")
    parser.add_argument("--target", default=",".join(TARGETS), help="codec, broker or both (default)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=ROOT / ".fuzz", help="corpus and crashes (default .fuzz/)")
    parser.add_argument("--max-len", type=int, default=4096, help="longest input tried")
    parser.add_argument("--json", type=Path, help="also write the summary there")
    parser.add_argument("--quiet", action="store_true", help="no libFuzzer output")
    parser.add_argument("--replay", type=Path, help="run one saved input (crashes/TARGET-*.bin) and exit")
    parser.add_argument("--worker", choices=TARGETS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("fuzz.py: atheris is not installed: pip install -e '.[test]' (Linux x86-64)", file=sys.stderr)
        return 2
    if args.worker:
        worker(args.worker, args.work, extra)
        return 0
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}: choose from {', '.join(TARGETS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    results = [run_target(t, args) for t in targets]
    bad = 0
    for r in results:
        rate = r["inputs"] / r["seconds"] if r["seconds"] else 0  # type: ignore[operator]
        print(f"{r['target']}: {r['inputs']} inputs in {r['seconds']} s ({rate:.0f}/s), corpus {r['corpus']}, "
              f"{r['failures']} failing inputs, {len(r['distinct'])} distinct")  # type: ignore[arg-type]  # fmt: skip
        for sig, name in r["distinct"].items():  # type: ignore[attr-defined]
            print(f"  {sig}  ({args.work / 'crashes' / name}.bin)")
        if r["stopped"]:
            print(f"  stopped early: {r['stopped']}")
        bad += bool(r["failures"] or r["stopped"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
