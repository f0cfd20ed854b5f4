"""`mqtt serve --persistence`: what the broker acknowledged survives SIGKILL (issue #18), tested on real sockets
with `python -m mqtt_cli serve` processes and paho-mqtt clients. The torture (20 SIGKILLs, ours and mosquitto) is
in test_persistence_torture.py, the state of schema 2 (QoS 2, wills, migration) in test_persistence_state.py."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.brokers import HOST, wait_for_port, wait_for_ready

pytestmark = [pytest.mark.slow]

DEADLINE = 20.0


class Ours:
    """`mqtt serve --persistence DB`, restartable after a SIGKILL on the port it chose first (port 0, told by its
    ready file: no other process can take it between a check and the bind)."""

    def __init__(self, workdir: Path, *extra: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.db = workdir / "broker.db"
        self.port = 0
        self.stderr = workdir / "stderr.log"
        self.ready = workdir / "ready.json"
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.ready.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mqtt_cli", "serve", "--listen", f"mqtt://{HOST}:{self.port}",
             "--persistence", str(self.db), "--max-queued-messages", "0", "--ready-file", str(self.ready),
             *self.extra],
            stdout=subprocess.DEVNULL, stderr=self.stderr.open("ab"), stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.port = wait_for_ready(self.ready, self.proc, DEADLINE, self.stderr)[0]["port"]
        wait_for_port(self.port, self.proc, DEADLINE, self.stderr)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


@pytest.fixture
def ours(tmp_path: Path) -> Iterator[Callable[..., Ours]]:
    made: list[Ours] = []

    def make(*extra: str) -> Ours:
        broker = Ours(tmp_path / f"ours{len(made)}", *extra)
        made.append(broker)
        return broker

    yield make
    for broker in made:
        broker.stop()


def client(client_id: str, clean: bool = True, version: int = paho.MQTTv311) -> paho.Client:
    if version == paho.MQTTv5:
        return paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version)
    return paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean, protocol=version)


def connect(c: paho.Client, port: int, **kwargs: object) -> None:
    connected = threading.Event()
    c.on_connect = lambda *a: connected.set()
    c.connect(HOST, port, keepalive=30, **kwargs)  # type: ignore[arg-type]
    c.loop_start()
    assert connected.wait(DEADLINE), "no CONNACK"


def subscribe_offline(port: int, client_id: str, topic: str) -> None:
    """A persistent subscription (clean session 0), then the client goes away."""
    c = client(client_id, clean=False)
    done = threading.Event()
    c.on_subscribe = lambda *a: done.set()
    connect(c, port)
    c.subscribe(topic, 1)
    assert done.wait(DEADLINE)
    c.disconnect()
    c.loop_stop()


def collect(port: int, client_id: str, topic: str | None = None, idle: float = 1.5) -> list[bytes]:
    """Reconnects `client_id` (clean session 0) and returns the payloads received until `idle` s pass quietly."""
    got: list[bytes] = []
    last = [time.monotonic()]

    def on_message(c: paho.Client, u: object, m: paho.MQTTMessage) -> None:
        got.append(m.payload)
        last[0] = time.monotonic()

    c = client(client_id, clean=False)
    c.on_message = on_message
    connect(c, port)
    if topic is not None:
        c.subscribe(topic, 1)
    last[0] = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() - last[0] < idle and time.monotonic() < deadline:
        time.sleep(0.05)
    c.disconnect()
    c.loop_stop()
    return got


def online_subscriber(port: int, client_id: str, topic: str, qos: int) -> tuple[paho.Client, list[bytes]]:
    """A persistent subscriber (clean session 0), connected and subscribed; the payloads it gets."""
    got: list[bytes] = []
    sub = client(client_id, clean=False)
    sub.on_message = lambda c, u, m: got.append(m.payload)
    subscribed = threading.Event()
    sub.on_subscribe = lambda *a: subscribed.set()
    connect(sub, port)
    sub.subscribe(topic, qos)
    assert subscribed.wait(DEADLINE)
    return sub, got


def publish_acked(port: int, topic: str, payload: bytes, retain: bool = False) -> None:
    c = client(f"pub-{random.randrange(1 << 30)}")
    connect(c, port)
    info = c.publish(topic, payload, qos=1, retain=retain)
    info.wait_for_publish(DEADLINE)
    assert info.is_published()
    c.disconnect()
    c.loop_stop()


# --- SIGKILL once --------------------------------------------------------------------------------------------


def test_retained_and_queued_messages_survive_sigkill(ours: Callable[..., Ours]) -> None:
    broker = ours()
    subscribe_offline(broker.port, "keeper", "q/#")
    payloads = [b"m%d" % i for i in range(5)]
    for payload in payloads:
        publish_acked(broker.port, "q/x", payload)
    publish_acked(broker.port, "r/one", b"kept", retain=True)
    broker.kill()
    broker.start()
    assert collect(broker.port, "keeper") == payloads  # in order, once each
    assert collect(broker.port, "anyone", "r/#") == [b"kept"]
    # The persistent subscription itself is back: a new message reaches the subscriber after a restart.
    broker.kill()
    broker.start()
    publish_acked(broker.port, "q/y", b"after")
    assert collect(broker.port, "keeper") == [b"after"]


def test_sigkill_during_a_flood_to_an_online_subscriber_loses_nothing_acknowledged(ours: Callable[..., Ours]) -> None:
    """Messages the online persistent subscriber acknowledges quickly are never written (persistence.Pending): the
    publisher's PUBACK then goes out without a commit. Whatever was acknowledged to the publisher reached the
    subscriber, before the kill or, from the file, after the restart."""
    broker = ours()
    sub, got = online_subscriber(broker.port, "online", "o/#", 1)
    acked: set[int] = set()
    pub = client("flood")
    pub.on_publish = lambda c, u, mid, rc, props: acked.add(mid)
    connect(pub, broker.port)
    sent = {pub.publish("o/x", b"m%d" % i, qos=1).mid: b"m%d" % i for i in range(3000)}
    time.sleep(random.uniform(0.1, 0.4))
    broker.kill()
    time.sleep(0.2)
    for c in (pub, sub):
        c.loop_stop()
    acknowledged = {sent[mid] for mid in acked}
    broker.start()
    after = collect(broker.port, "online")
    assert len(acknowledged) > 10
    assert not acknowledged - set(got) - set(after), sorted(acknowledged - set(got) - set(after))[:5]


def test_expired_session_is_removed_from_the_file(ours: Callable[..., Ours]) -> None:
    broker = ours()
    c = client("brief", version=paho.MQTTv5)
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 1
    connect(c, broker.port, clean_start=False, properties=props)
    c.subscribe("e/#", 1)
    time.sleep(0.3)
    c.disconnect()
    c.loop_stop()
    time.sleep(0.3)
    broker.stop()
    with sqlite3.connect(broker.db) as db:
        assert db.execute("SELECT client_id, expiry_interval FROM sessions").fetchall() == [("brief", 1)]
    time.sleep(1.2)
    broker.start()
    time.sleep(0.5)
    with sqlite3.connect(broker.db) as db:
        assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM subscriptions").fetchone() == (0,)


# --- a file that cannot be read ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["garbage", "truncated", "newer"])
def test_unreadable_file_is_moved_aside(ours: Callable[..., Ours], tmp_path: Path, kind: str) -> None:
    broker = ours()
    publish_acked(broker.port, "r/one", b"kept", retain=True)
    broker.stop()
    if kind == "garbage":
        broker.db.write_bytes(b"this is not a database, " * 100)
    elif kind == "truncated":
        data = broker.db.read_bytes()
        broker.db.write_bytes(data[: len(data) // 2 + 100])
    else:
        with sqlite3.connect(broker.db) as db:
            db.execute("UPDATE schema_version SET version = 99")
    before = broker.stderr.read_text()
    broker.start()
    publish_acked(broker.port, "r/two", b"new", retain=True)  # it runs, on a new file
    log = broker.stderr.read_text()[len(before) :]
    warnings = [line for line in log.splitlines() if "cannot be read" in line]
    assert len(warnings) == 1, log
    aside = [p for p in broker.db.parent.iterdir() if p.name.startswith("broker.db.unreadable-")]
    assert [p for p in aside if not p.name.endswith(("-wal", "-shm"))], list(broker.db.parent.iterdir())
    assert str(broker.db) in warnings[0] and str(aside[0]).removesuffix("-wal").removesuffix("-shm") in warnings[0]
    broker.stop()
    with sqlite3.connect(broker.db) as db:
        assert db.execute("SELECT topic FROM retained").fetchall() == [("r/two",)]


# --- a file that cannot be written ---------------------------------------------------------------------------


def test_a_change_file_that_cannot_grow_withholds_qos2_acknowledgements_until_there_is_room(
    ours: Callable[..., Ours],
) -> None:
    """QoS 2 to an online persistent subscriber is the group the broker's trio thread commits itself (one frame of
    the change file): with the change file at a file-size limit that write fails, the PUBREC is withheld and the
    commit thread's retries take over; once the limit is lifted the message is acknowledged, and after a SIGKILL
    nothing was delivered twice or lost."""
    import resource

    broker = ours()
    sub, got = online_subscriber(broker.port, "online2", "q2/#", 2)
    pub = client("pub2", clean=False)
    connect(pub, broker.port)
    first = pub.publish("q2/a", b"first", qos=2)
    first.wait_for_publish(DEADLINE)
    assert broker.proc is not None
    changes = broker.db.with_name(broker.db.name + "-changes")
    size = changes.stat().st_size
    resource.prlimit(broker.proc.pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    second = pub.publish("q2/a", b"second", qos=2)
    time.sleep(2.0)
    assert not second.is_published()  # no PUBREC/PUBCOMP for what is not on file
    assert changes.stat().st_size == size  # the frame that did not fit was cut off again
    resource.prlimit(broker.proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    second.wait_for_publish(DEADLINE)
    # (The limit held the broker's stderr file too: the failure's line was cut, the recovery's is whole.)
    assert "written again after" in broker.stderr.read_text()
    deadline = time.monotonic() + DEADLINE
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()
    for c in (pub, sub):
        c.loop_stop()
    broker.start()
    after = collect(broker.port, "online2")
    assert got + after == [b"first", b"second"]


def test_a_full_disk_withholds_acknowledgements_until_there_is_room(ours: Callable[..., Ours]) -> None:
    """A file-size limit stands for a full disk: the commit fails, the PUBACK is withheld (never sent for what is
    not stored), and once the limit is lifted ("space is back") the same changes are committed and acknowledged;
    after a SIGKILL every message acknowledged is delivered."""
    import resource

    broker = ours()
    subscribe_offline(broker.port, "keeper", "d/#")
    publish_acked(broker.port, "d/first", b"first")
    assert broker.proc is not None
    pid = broker.proc.pid
    size = broker.db.stat().st_size + (broker.db.with_name(broker.db.name + "-wal").stat().st_size)
    # No file of it may grow past what it is now (the soft limit: lifting it again needs no privilege).
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    c = client("filler")
    connect(c, broker.port)
    big = b"x" * 200_000
    info = c.publish("d/big", big, qos=1)
    time.sleep(2.0)
    assert not info.is_published()  # withheld: not stored
    assert "acknowledgements withheld" in broker.stderr.read_text()
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    info.wait_for_publish(DEADLINE)
    assert info.is_published()  # the retried commit went through: acknowledged now
    c.disconnect()
    c.loop_stop()
    broker.kill()
    broker.start()
    assert collect(broker.port, "keeper") == [b"first", big]
