"""One `mqtt serve` on its defaults and one Debian mosquitto per test module; `broker` runs a test on both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.broker.conftest import start_ours
from tests.brokers import Broker, start_mosquitto


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_ours(tmp_path_factory.mktemp("ours"))
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def mosq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_mosquitto(tmp_path_factory.mktemp("mosq"))
    yield broker
    broker.stop()


@pytest.fixture(params=["ours", "mosquitto"])
def broker(request: pytest.FixtureRequest) -> Broker:
    """The same wire sequence against our broker and against mosquitto 2 (differences asserted per broker)."""
    name = "ours" if request.param == "ours" else "mosq"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spec(v311, v5): the MQTT normative statements a conformance test checks")
