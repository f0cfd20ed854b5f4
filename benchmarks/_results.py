"""Where the benchmarks write their raw results: benchmarks/results/ (kept with the figures they gave in
docs/PERFORMANCE.md), or the directory MQTT_BENCH_RESULTS names (`make bench-quick` points it at a temporary
directory, so that a quick check of a machine leaves the checked-in results alone); and the CPU model every
figure is recorded with."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ENV_RESULTS = "MQTT_BENCH_RESULTS"


def results_dir() -> Path:
    path = Path(os.environ.get(ENV_RESULTS) or Path(__file__).resolve().parent / "results")
    path.mkdir(parents=True, exist_ok=True)
    return path


def cpu_model() -> str:
    """`lscpu`'s model name (a ratio holds only for the CPU that gave it), else what Python knows, else "unknown"."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    found = (line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    return next(found, None) or platform.processor() or "unknown"
