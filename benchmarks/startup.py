"""Start-up time of the ``mqtt`` command: whole-process wall time, median of N runs.

    .venv/bin/python benchmarks/startup.py [-n 30] [--max-ms 150]

Measures ``mqtt --version`` through the installed console script (.venv/bin/mqtt) and through
``python -m mqtt_cli``, with a bare ``python -c pass`` as the floor, and for comparison ``--version``
answered by typer (``mqtt --version completions bash`` skips the fast path) and ``mqtt --help`` (typer and
rich), then the import cost of the libraries the CLI stands on
(``python -X importtime``). With --max-ms, exits 1 when a ``--version`` median is above it.

mqtt_cli is byte-compiled first, as pip does when it installs a wheel (with PYTHONDONTWRITEBYTECODE set, an
editable install would otherwise compile its modules from source on every run).
"""

import argparse
import compileall
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def wall_ms(cmd: list[str], runs: int) -> list[float]:
    """Wall time in ms of ``runs`` runs of ``cmd`` (after one warm-up run), output discarded."""
    env = {**os.environ, "COLUMNS": "80"}
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append((time.perf_counter() - start) * 1000)
    return times


def import_ms(module: str) -> float:
    """Cumulative import time in ms of ``module`` in a fresh interpreter (``-X importtime``)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        check=True,
        capture_output=True,
        text=True,
    )
    pattern = re.compile(rf"^import time:\s+\d+ \|\s+(\d+) \| {re.escape(module)}$", re.MULTILINE)
    match = pattern.search(proc.stderr)
    if match is None:  # already imported by site: costs nothing more
        return 0.0
    return int(match.group(1)) / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("-n", "--runs", type=int, default=30, help="runs per command (default 30)")
    parser.add_argument("--max-ms", type=float, help="fail when a --version median exceeds this")
    args = parser.parse_args()

    mqtt = BIN / "mqtt"
    if not mqtt.exists():
        print(f"no console script at {mqtt}: run `make install` first", file=sys.stderr)
        return 1
    compileall.compile_dir(ROOT / "mqtt_cli", quiet=1)
    cases = [
        ("python -c pass (floor)", [sys.executable, "-c", "pass"], False),
        ("mqtt --version (console script)", [str(mqtt), "--version"], True),
        ("python -m mqtt_cli --version", [sys.executable, "-m", "mqtt_cli", "--version"], True),
        ("--version through typer (no fast path)", [str(mqtt), "--version", "completions", "bash"], False),
        ("mqtt --help (loads typer + rich)", [str(mqtt), "--help"], False),
    ]
    pyz = ROOT / "dist" / "mqtt.pyz"
    if pyz.exists():
        cases.append(("dist/mqtt.pyz --version", [sys.executable, str(pyz), "--version"], False))

    print(f"start-up, wall time of the whole process, {args.runs} runs each (ms)")
    print(f"{'command':<40} {'median':>8} {'min':>8} {'max':>8}")
    over = []
    for name, cmd, checked in cases:
        times = wall_ms(cmd, args.runs)
        median = statistics.median(times)
        print(f"{name:<40} {median:8.1f} {min(times):8.1f} {max(times):8.1f}")
        if checked and args.max_ms is not None and median > args.max_ms:
            over.append(f"{name}: median {median:.1f} ms > {args.max_ms} ms")

    print()
    print("import cost, python -X importtime, cumulative (ms)")
    for module in ("typer", "rich", "trio", "mqtt_cli", "mqtt_cli.app"):
        print(f"{'import ' + module:<40} {import_ms(module):8.1f}")

    for line in over:
        print(line, file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
