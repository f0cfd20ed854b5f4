"""The retained-message index (core/retained.py) on its live path, against another commit's in the same run.

    .venv/bin/python benchmarks/retained.py [--retained 100000] [--against main] [--reps 5]

Holds --retained live values (topics state/<site>/<device>/<metric>, as a fleet's last-known states) and times,
per operation: `set` replacing a held topic (every retained PUBLISH), `set` + `discard` of a new topic (a set and
a clear), `match` of an exact topic, of `state/<site>/+/temp` and of `state/<site>/#` (a SUBSCRIBE's lookup), and
`get`. The same operations run on the RetainedStore of the commit --against names (read with `git show`), in
turn, rep by rep; the best of the reps (CPU time: steadier than wall time on a loaded machine) and this tree's
time over the other's are printed. Also the index's own memory
(tracemalloc) per held topic, on both.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import time
import tracemalloc
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import cpu_model  # noqa: E402

from mqtt_cli.core import retained as here  # noqa: E402


def load_other(ref: str) -> types.ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:mqtt_cli/core/retained.py"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    module = types.ModuleType(f"retained_{ref}")
    module.__dict__["__name__"] = module.__name__
    sys.modules[module.__name__] = module  # dataclasses and typing look their module up
    exec(compile(source, f"{ref}:mqtt_cli/core/retained.py", "exec"), module.__dict__)
    return module


def topics(n: int) -> list[str]:
    sites = max(1, n // 1000)
    return [f"state/{i % sites}/dev{i // sites % 100}/{('temp', 'hum', 'co2', 'volt')[i % 4]}{i // (sites * 100)}"
            for i in range(n)]  # fmt: skip


def timed(op: Callable[[], None], count: int) -> float:
    gc.collect()
    t0 = time.process_time()  # CPU time: a loaded machine's preemptions are not counted
    op()
    return (time.process_time() - t0) / count * 1e9


def run(module: types.ModuleType, names: list[str]) -> dict[str, float]:
    store = module.RetainedStore()
    for t in names:
        store.set(t, t)
    n = len(names)
    sample = names[:: max(1, n // 20_000)]
    sites = sorted({t.split("/")[1] for t in names})[:50]
    out: dict[str, float] = {}

    def replace() -> None:
        for t in sample:
            store.set(t, t)

    def set_clear() -> None:
        for t in sample:
            store.set(t + "/x", t)
            store.discard(t + "/x")

    def exact() -> None:
        for t in sample:
            store.match(t)

    def get() -> None:
        for t in sample:
            store.get(t)

    def plus() -> None:
        for s in sites:
            store.match(f"state/{s}/+/temp0")

    def hash_() -> None:
        for s in sites[:5]:
            store.match(f"state/{s}/#")

    out["set (replace)"] = timed(replace, len(sample))
    out["set + discard"] = timed(set_clear, len(sample))
    out["match exact"] = timed(exact, len(sample))
    out["get"] = timed(get, len(sample))
    out["match +"] = timed(plus, len(sites))
    out["match #"] = timed(hash_, 5)
    return out


def memory(module: types.ModuleType, names: list[str]) -> float:
    gc.collect()
    tracemalloc.start()
    store = module.RetainedStore()
    for t in names:
        store.set(t, 1)  # the same small int: the index's own cost, not the values'
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del store
    return size / len(names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--retained", type=int, default=100_000)
    parser.add_argument("--against", default="main")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2,000 retained, one rep, against HEAD (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.retained, args.reps, args.against = 2_000, 1, "HEAD"
    other = load_other(args.against)
    names = topics(args.retained)
    cpu = cpu_model()
    print(f"CPU: {cpu}; load average: {' '.join(f'{x:.2f}' for x in __import__('os').getloadavg())}")
    rows: dict[str, dict[str, list[float]]] = {"here": {}, args.against: {}}
    for rep in range(args.reps):
        order = [("here", here), (args.against, other)]
        for label, module in order if rep % 2 == 0 else order[::-1]:
            for op, ns in run(module, names).items():
                rows[label].setdefault(op, []).append(ns)
    print(f"\n{args.retained:,} retained topics, best of {args.reps} (CPU ns per operation; match +/#: per lookup)")
    print(f"{'operation':<16}{'this tree':>12}{args.against:>12}{'ratio':>8}")
    for op in rows["here"]:
        a, b = min(rows["here"][op]), min(rows[args.against][op])
        print(f"{op:<16}{a:>12,.0f}{b:>12,.0f}{a / b:>8.2f}")
    print(f"{'bytes per topic':<16}{memory(here, names):>12,.0f}{memory(other, names):>12,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
