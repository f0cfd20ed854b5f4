"""Where the benchmarks write their raw results: benchmarks/results/ (kept with the figures they gave in
docs/PERFORMANCE.md), or the directory MQTT_BENCH_RESULTS names (`make bench-quick` points it at a temporary
directory, so that a quick check of a machine leaves the checked-in results alone)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_RESULTS = "MQTT_BENCH_RESULTS"


def results_dir() -> Path:
    path = Path(os.environ.get(ENV_RESULTS) or Path(__file__).resolve().parent / "results")
    path.mkdir(parents=True, exist_ok=True)
    return path
