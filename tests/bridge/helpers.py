"""Running `mqtt bridge` as a real process for tests, and paho clients to feed and watch brokers."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.brokers import Broker

#: What a test started (brokers, bridges, processes): tests/bridge/conftest.py stops it all after each test.
RUNNING: list[Any] = []


def stop_all() -> None:
    while RUNNING:
        thing = RUNNING.pop()
        if isinstance(thing, Broker):
            thing.stop()
            continue
        proc = thing.proc if isinstance(thing, BridgeProcess) else thing
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


class BridgeProcess:
    def __init__(self, workdir: Path, local: Broker, remote: Broker, *args: str, name: str = "t") -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.args = [
            sys.executable, "-m", "mqtt_cli", "bridge", "--local", local.url, "--remote", remote.url,
            "--name", name, "--state-dir", str(workdir / "state"), "--restart-timeout", "0.1", "0.5", *args,
        ]  # fmt: skip
        self.log = workdir / "bridge.log"
        self.proc: subprocess.Popen[Any] | None = None
        RUNNING.append(self)
        self.start()

    def start(self) -> None:
        self._seen = self.log.read_text().count("connected to") if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, what: str, count: int = 1, timeout: float = 20) -> None:
        """Waits until `what` appears `count` more times in the log than before start()."""
        deadline = time.monotonic() + timeout
        base = self._seen if what == "connected to" else 0
        while self.text().count(what) < base + count:
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"bridge: no {what!r} x{count}; log:\n{self.text()[-3000:]}")
            time.sleep(0.02)

    def wait_connected(self, timeout: float = 20) -> None:
        self.wait_for("connected to", 2, timeout)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)


class Watcher:
    """A paho subscriber that records what arrives: (topic, payload, qos, retain)."""

    def __init__(self, broker: Broker, *filters: str, qos: int = 2, client_id: str = "", clean: bool = True,
                 version: int = paho.MQTTv311) -> None:  # fmt: skip
        self.messages: list[tuple[str, bytes, int, bool]] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean,
                                  protocol=version)  # fmt: skip
        self.client.on_message = self._on_message
        self.client.on_connect = lambda c, u, f, rc, p: c.subscribe([(f_, qos) for f_ in filters])
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.connect(broker.host, broker.port, keepalive=30)
        self.client.loop_start()
        assert self.subscribed.wait(10), "no SUBACK"

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        with self.lock:
            self.messages.append((msg.topic, bytes(msg.payload), msg.qos, bool(msg.retain)))

    def payloads(self) -> Counter[bytes]:
        with self.lock:
            return Counter(m[1] for m in self.messages)

    def wait_count(self, n: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while len(self.messages) < n and time.monotonic() < deadline:
            time.sleep(0.02)

    def wait_last(self, payload: bytes, timeout: float = 20) -> tuple[str, bytes, int, bool]:
        """Waits until the latest message has `payload`; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.messages and self.messages[-1][1] == payload:
                    return self.messages[-1]
            time.sleep(0.02)
        raise AssertionError(f"the last message is not {payload!r}: {self.messages[-5:]}")

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def publish(broker: Broker, messages: list[tuple[str, bytes, int, bool]], client_id: str = "") -> None:
    """Publishes and waits for every acknowledgement (bounded)."""
    c = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
    c.max_inflight_messages_set(200)
    c.connect(broker.host, broker.port)
    c.loop_start()
    try:
        infos = [c.publish(t, p, q, r) for t, p, q, r in messages]
        for info in infos:
            info.wait_for_publish(timeout=20)
            assert info.is_published()
    finally:
        c.loop_stop()
        c.disconnect()
