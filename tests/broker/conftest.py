"""Our broker as a real process (`mqtt serve`), started like the mosquitto fixtures of tests/brokers.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.brokers import HOST, Broker, start_mosquitto, wait_for_port, wait_for_ready


def start_ours(
    workdir: Path, *args: str, tls: bool = False, require_certificate: bool = False, tls_args: tuple[str, ...] = ()
) -> Broker:
    """`mqtt serve` in `workdir` on ports it chose (port 0: no other process can take them between a check and
    the bind), told by its ready file; `restart()` brings it back on the same ports. With `tls` (certificates made
    here) or `tls_args` (the caller's), an mqtts:// listener too."""
    workdir.mkdir(parents=True, exist_ok=True)
    ca_path = None
    extra: dict[str, Any] = {}
    if tls and not tls_args:
        from tests.brokers import _make_certs

        ca_path = _make_certs(workdir)
        tls_args = ("--tls-cert", str(workdir / "server.pem"), "--tls-key", str(workdir / "server.key"))
        if require_certificate:
            tls_args += ("--tls-cafile", str(ca_path), "--require-certificate")
    tls = bool(tls_args)

    def listen(ports: list[int]) -> list[str]:
        if not tls:
            return ["--port", str(ports[0])]
        return ["--listen", f"mqtt://{HOST}:{ports[0]}", "--listen", f"mqtts://{HOST}:{ports[1]}", *tls_args]

    ports = [0, 0] if tls else [0]
    ready = workdir / "ready.json"

    def launch() -> subprocess.Popen[Any]:
        ready.unlink(missing_ok=True)
        log = (workdir / "serve.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "mqtt_cli", "serve", *listen(ports), "--ready-file", str(ready), "-v", *args],
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        # Ours first, in order; a configuration file's listeners follow.
        bound = [listener["port"] for listener in wait_for_ready(ready, proc, 20, workdir / "serve.log")][: len(ports)]
        assert all(n in (0, b) for n, b in zip(ports, bound, strict=True)), (ports, bound)
        ports[:] = bound
        wait_for_port(bound[0], proc, 5)
        return proc

    proc = launch()
    if tls:
        extra["tls_port"] = ports[1]
    return Broker("ours", HOST, ports[0], workdir, launch, proc, ca_path=ca_path, extra=extra)


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = start_ours(tmp_path_factory.mktemp("ours"), "--sys-interval", "1")
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def mosq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A mosquitto of this module's own (sessions and retained messages do not leak between modules)."""
    broker = start_mosquitto(tmp_path_factory.mktemp("mosq"))
    yield broker
    broker.stop()


@pytest.fixture(params=["ours", "mosquitto"])
def any_broker(request: pytest.FixtureRequest, ours: Broker, mosq: Broker) -> Broker:
    """Each test runs against our broker and against mosquitto: the same scenario, the same result."""
    return ours if request.param == "ours" else mosq


@pytest.fixture
def our_factory(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    started: list[Broker] = []

    def factory(*args: str, **kw: Any) -> Broker:
        broker = start_ours(tmp_path / f"ours{len(started)}", *args, **kw)
        started.append(broker)
        return broker

    yield factory
    for broker in started:
        broker.stop()


class Served:
    """`mqtt serve` with the listener URLs given (ports 0); `urls` are the bound ones, from its ready file."""

    def __init__(self, workdir: Path, *args: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        ready = workdir / "ready.json"
        ready.unlink(missing_ok=True)
        self.log = workdir / "serve.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mqtt_cli", "serve", "--ready-file", str(ready), "-v", *args],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
            stdin=subprocess.DEVNULL,
        )
        self.listeners: list[dict[str, Any]] = wait_for_ready(ready, self.proc, 20, self.log)

    def url(self, scheme: str) -> str:
        return next(str(b["url"]) for b in self.listeners if b["scheme"] == scheme)

    def port(self, scheme: str) -> int:
        return next(int(b["port"]) for b in self.listeners if b["scheme"] == scheme)

    def stop(self) -> int:
        """SIGTERM, as a service manager would; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def serve_with() -> Iterator[Callable[..., Served]]:
    """Starts `mqtt serve` with the arguments given; stopped at the end of the test."""
    started: list[Served] = []

    def start(workdir: Path, *args: str) -> Served:
        served = Served(workdir, *args)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()
