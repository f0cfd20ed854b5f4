"""`mqtt serve`'s flags that set a configuration key under another name: a bad value is named as typed."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--sys-interval", "-1"], "--sys-interval: must be a number >= 0"),
        (["--max-topic-levels", "-1"], "--max-topic-levels:"),
        (["--metrics-listen", "9883"], "--metrics-listen:"),
    ],
)
def test_a_bad_value_names_the_flag_given(args: list[str], named: str) -> None:
    result = subprocess.run([sys.executable, "-m", "mqtt_cli", "serve", "--port", "0", *args],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("mqtt: error: command line: ") and named in result.stderr
    assert result.stderr.count("\n") == 1
