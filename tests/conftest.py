"""Fixtures shared by the whole suite (tests/core has its own conftest where it needs one)."""

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent

# CI runs on 2 busy cores: a slow example is not a failure there.
settings.register_profile("ci", deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

Run = Callable[..., subprocess.CompletedProcess[str]]
#: In a parametrized case, a path that does not exist: `missing_path` puts the test's own tmp_path there (an
#: absolute path such as /nonexistent may exist: on Debian it is the home of system users).
MISSING = "{missing}"


def missing_path(text: str, tmp_path: Path) -> str:
    """`text` with MISSING replaced by a path under `tmp_path` that does not exist."""
    return text.replace(MISSING, str(tmp_path / "missing"))


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for running ``mqtt``: plain output, wide enough not to wrap, no completion request."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("_MQTT_", "_TYPER_", "COMP_"))}
    env.update({"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"})
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def mqtt_exe() -> Path:
    """The installed console script (``pip install -e .`` put it beside the interpreter)."""
    exe = VENV_BIN / "mqtt"
    assert exe.is_file(), f"no console script at {exe}: run `make install`"
    return exe


@pytest.fixture(params=["console-script", "python-m"])
def mqtt_cmd(request: pytest.FixtureRequest, mqtt_exe: Path) -> list[str]:
    """How to start ``mqtt``: the console script, or ``python -m mqtt_cli``."""
    if request.param == "console-script":
        return [str(mqtt_exe)]
    return [sys.executable, "-m", "mqtt_cli"]


@pytest.fixture
def run() -> Run:
    """Run a command with :func:`cli_env` from the repository root; never raises on exit status."""

    def _run(
        cmd: Sequence[str | Path], *, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(c) for c in cmd],
            cwd=REPO_ROOT,
            env=cli_env() if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    return _run

@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the groups into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test`), keep the tests of one heavy session-wide peer on one worker."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if any(name.startswith("rabbitmq") for name in names):
            item.add_marker(pytest.mark.xdist_group("rabbitmq"))
        elif "pyz" in names:  # the zipapp, built once per worker that needs it (about 25 s)
            item.add_marker(pytest.mark.xdist_group("zipapp"))


# Real brokers (mosquitto, rabbitmq) on free loopback ports: fixtures in tests/brokers.py.
pytest_plugins = ["tests.brokers"]
