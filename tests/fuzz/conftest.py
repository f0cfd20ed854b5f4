"""Every fuzz test has a deadline: a hang fails it (with its traceback) instead of holding up the suite."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

DEADLINE = 180.0  # seconds, for a test that normally takes a few


@pytest.fixture(autouse=True)
def deadline() -> Iterator[None]:
    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"fuzz test still running after {DEADLINE:.0f} s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, DEADLINE)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
