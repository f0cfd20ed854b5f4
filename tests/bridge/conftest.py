"""Everything a bridge test starts is stopped after it, whatever happened (tests/bridge/helpers.py: RUNNING)."""

from collections.abc import Iterator

import pytest

from .helpers import stop_all


@pytest.fixture(autouse=True)
def _stop_what_the_test_started() -> Iterator[None]:
    yield
    stop_all()
