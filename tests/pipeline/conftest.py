"""Fixtures of the pipeline tests: one local SparkSession for all of them, captures, dump records to compare.

Spark start-up costs seconds: the session is shared (session scope), local[2], bound to 127.0.0.1, without UI,
quiet. Tests needing pyspark or Java are skipped when they are missing (`mqtt analyze` itself says so, see
test_cli.py); the tests of splits.py need neither.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mqtt_cli.pipeline.session import missing_requirement

from ..conftest import REPO_ROOT

DATA = REPO_ROOT / "tests" / "data" / "captures"
#: More sample captures with Wireshark's decoding, when MQTT_CAPTURE_CORPUS names a directory of them.
SHARED = Path(os.environ.get("MQTT_CAPTURE_CORPUS") or DATA)
PORTS = ("18841", "18842")


def sample_captures() -> list[Path]:
    """Every sample capture: tests/data/captures, and MQTT_CAPTURE_CORPUS's files not already there."""
    found = {p.name: p for p in sorted(DATA.glob("*.pcap*")) if not p.name.endswith(".jsonl")}
    if SHARED.is_dir():
        for p in sorted(SHARED.glob("*.pcap*")):
            if not p.name.endswith(".jsonl"):
                found.setdefault(p.name, p)
    return sorted(found.values())


def dump_records(path: Path, *args: str) -> list[dict[str, Any]]:
    """What `mqtt dump --json` writes for `path` (the command, run for real)."""
    ports = [a for p in PORTS for a in ("-p", p)] if not args else list(args)
    out = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "dump", "--json", *ports, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode in (0, 1), out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


needs_spark = pytest.mark.skipif(missing_requirement() is not None, reason=str(missing_requirement()))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    problem = missing_requirement()
    if problem is not None:
        pytest.skip(problem)
    from mqtt_cli.pipeline.session import start_session, stop_session

    # It starts from the class-data archive the suite's commands write, and writes none (only at the worker's end).
    session = start_session("local[2]", {"spark.sql.shuffle.partitions": "4"}, dump_classes=False)
    yield session
    stop_session(session)


@pytest.fixture(scope="session")
def samples_table(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], Any]:
    """Every sample capture ingested into one table, each file cut into ranges of 4 KiB."""
    from mqtt_cli.pipeline.dissect import DissectOptions
    from mqtt_cli.pipeline.ingest import ingest

    captures = sample_captures()
    out = tmp_path_factory.mktemp("samples") / "table"
    options = DissectOptions(ports=(18841, 18842))
    result = ingest(spark, [str(p) for p in captures], str(out), options, split_bytes=4096)
    return out, captures, result
