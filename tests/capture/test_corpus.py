"""The sample captures (real mosquitto, MQTT.js and paho traffic) against what tshark decodes in them.

For each capture in tests/data/captures (copied from a corpus of sample captures with their oracles and its
comparison script), `mqtt dump --json --port 18841 --port 18842` must give 0 failed in compare_dump.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO_ROOT, Run

DATA = REPO_ROOT / "tests" / "data" / "captures"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
SAMPLES = [(f["capture"], f["oracle"], f["mqtt_packets"]) for s in MANIFEST["scenarios"] for f in s["files"]]


def test_every_sample_is_here() -> None:
    assert len(SAMPLES) == 6
    for capture, oracle, _ in SAMPLES:
        assert (DATA / capture).is_file() and (DATA / oracle).is_file()


@pytest.mark.parametrize(("capture", "oracle", "packets"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_sample_decodes_as_tshark_does(
    run: Run, mqtt_exe: Path, tmp_path: Path, capture: str, oracle: str, packets: int
) -> None:
    result = run([mqtt_exe, "dump", "--json", "--port", "18841", "--port", "18842", DATA / capture], timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    candidate = tmp_path / "candidate.jsonl"
    candidate.write_text(result.stdout)
    compare = subprocess.run(
        [sys.executable, DATA / "compare_dump.py", DATA / oracle, candidate],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    last = compare.stdout.strip().splitlines()[-1]
    assert re.fullmatch(rf"{packets} passed, 0 failed", last), compare.stdout
    assert compare.returncode == 0
    # The optional keys were given, so they were compared too (those of every packet type at least).
    for field in ("flags", "remaining_length", "frame"):
        assert re.search(rf"^{field}\s+\d+\s+\d+\s+0$", compare.stdout, re.MULTILINE), (field, compare.stdout)
