"""A bounded fuzz run in the suite: hypothesis over the same targets as scripts/fuzz.py (derandomized, no
example database: the same inputs every run), and a short atheris run of the script itself."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..conftest import REPO_ROOT
from .harness import broker_input, codec_input
from .seeds import seeds

BOUNDED = settings(
    derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=1000
)


@pytest.mark.parametrize("target", ["codec", "broker"])
def test_seeds_pass(target: str) -> None:
    func = codec_input if target == "codec" else broker_input
    for data in seeds(target):
        func(data)


@BOUNDED
@given(st.binary(max_size=600))
def test_codec_random_bytes(data: bytes) -> None:
    codec_input(data)


@BOUNDED
@given(st.sampled_from(seeds("codec")), st.integers(0, 10_000), st.binary(min_size=1, max_size=8))
def test_codec_mutated_sessions(seed: bytes, at: int, patch: bytes) -> None:
    # Valid sessions with a few bytes overwritten: deeper into the decoders than random bytes get.
    at %= len(seed)
    codec_input(seed[:at] + patch + seed[at + len(patch) :])


@settings(BOUNDED, max_examples=600)
@given(st.binary(min_size=16, max_size=800))
def test_broker_random_programs(data: bytes) -> None:
    broker_input(data)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed (Linux x86-64)")
def test_atheris_short_run(tmp_path: Path) -> None:
    """The long-run script itself, for two seconds per target from its seeds: it runs, counts, finds nothing."""
    summary = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "fuzz.py"), "--seconds", "2", "--seed", "7", "--work",
         str(tmp_path), "--json", str(summary), "--quiet"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(summary.read_text())
    assert [r["target"] for r in results] == ["codec", "broker"]
    for r in results:
        assert r["inputs"] > 100 and r["failures"] == 0 and r["stopped"] is None, r
