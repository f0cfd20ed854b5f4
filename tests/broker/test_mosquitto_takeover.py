"""Cut-over from mosquitto (issue #34): `mqtt serve` on a mosquitto.conf (or `[persistence]`) whose location holds
mosquitto's `mosquitto.db` takes it over at its first start. The file is written by Debian's mosquitto 2.0 in
the test itself: sessions made and messages queued with paho-mqtt and raw sockets, then mosquitto stopped with
SIGTERM (it saves at exit). Damaged files use the one in tests/data/mosquitto/, written the same way."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.subscribeoptions import SubscribeOptions

from mqtt_cli.core.packets import Publish, PubRec, PubRel, SubAck, Subscribe, Subscription
from tests.broker.test_persistence import DEADLINE, client, collect, connect, subscribe_offline
from tests.broker.test_persistence_state import Raw
from tests.brokers import HOST, start_mosquitto, wait_for_port, wait_for_ready

pytestmark = [pytest.mark.slow]

DATA = Path(__file__).parent.parent / "data" / "mosquitto" / "mosquitto-2.0.11.db"
RETAINED = 20
QUEUED = 100


class MosquittoState:
    """What the test put into mosquitto before it stopped: the packet identifiers its QoS 2 flows had."""

    def __init__(self) -> None:
        self.released_pid = 0  # q2's QoS 2 delivery whose PUBREC it sent (mosquitto: waiting for PUBCOMP)
        self.sent_pid = 0  # q2's QoS 2 delivery it never answered (mosquitto: waiting for PUBREC)
        self.v5_left = 0.0  # when v5sub's client left (its session expiry counts from then)


def write_mosquitto_db(workdir: Path, expiry: int = 3600) -> MosquittoState:
    """Debian's mosquitto with persistence in `workdir`: sessions, queued, in-flight and retained messages (half of
    them expiring after `expiry` s), saved to workdir/mosquitto.db by a SIGTERM. (tests/data/mosquitto/
    mosquitto-2.0.11.db was written by it, with an expiry of 4e9 s: one that does not change while it is used.)"""
    mosq = start_mosquitto(workdir, persistence=True)
    state = MosquittoState()
    try:
        port = mosq.port
        subscribe_offline(port, "cutover", "q/#")  # 3.1.1, clean session 0, QoS 1
        subscribe_v5_offline(port)
        state.v5_left = time.time()
        q2 = Raw(port, 4)
        q2.connect("q2")
        q2.send(Subscribe(1, (Subscription("q2/#", 2), Subscription("in/#", 2))))
        assert type(q2.recv()) is SubAck
        pub = client("publisher", version=paho.MQTTv5)
        connect(pub, port)
        info = pub.publish("q2/released", b"A", qos=2)
        a = q2.recv()
        assert type(a) is Publish and a.payload == b"A"
        q2.send(PubRec(a.packet_id))
        assert q2.recv() == PubRel(a.packet_id)  # not completed: mosquitto waits for PUBCOMP
        state.released_pid = a.packet_id
        info.wait_for_publish(DEADLINE)
        info = pub.publish("q2/sent", b"B", qos=2)
        b = q2.recv()
        assert type(b) is Publish and b.payload == b"B"
        state.sent_pid = b.packet_id  # not answered: mosquitto waits for PUBREC
        info.wait_for_publish(DEADLINE)
        q2.close()
        time.sleep(0.2)  # mosquitto sees q2 gone
        infos = [pub.publish("q/n", b"%d" % i, qos=1) for i in range(QUEUED)]
        user = PahoProperties(PacketTypes.PUBLISH)
        user.UserProperty = [("k", "v")]
        infos += [pub.publish("v5/a", b"v5 one", qos=1, properties=user), pub.publish("v5/b", b"v5 two", qos=1)]
        infos.append(pub.publish("q2/queued", b"C", qos=2))
        for i in range(RETAINED):
            props = PahoProperties(PacketTypes.PUBLISH)
            props.ContentType = "text/plain"
            props.UserProperty = [("n", str(i)), ("site", "a")]
            if i % 2:
                props.MessageExpiryInterval = expiry
                props.PayloadFormatIndicator = 1
            infos.append(pub.publish(f"r/{i}", b"retained %d" % i, qos=1, retain=True, properties=props))
        for info in infos:
            info.wait_for_publish(DEADLINE)
        pub.disconnect()
        pub.loop_stop()
        # A QoS 2 message received from a persistent session's client, PUBREC sent, PUBREL not yet come.
        p2 = Raw(port, 4)
        p2.connect("p2")
        p2.send(Publish("in/x", b"incoming", 2, packet_id=7))
        assert p2.recv() == PubRec(7)
        p2.close()
        time.sleep(0.2)
    finally:
        mosq.stop()  # SIGTERM: mosquitto saves its database as it exits
    assert (workdir / "mosquitto.db").is_file(), (workdir / "mosquitto.log").read_text()
    return state


def subscribe_v5_offline(port: int) -> None:
    """A 5.0 session expiring an hour after its client leaves, subscribed with an identifier and no local."""
    c = client("v5sub", version=paho.MQTTv5)
    props = PahoProperties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 3600
    connected = threading.Event()
    c.on_connect = lambda *a: connected.set()
    c.connect(HOST, port, clean_start=False, properties=props)
    c.loop_start()
    assert connected.wait(DEADLINE)
    done = threading.Event()
    c.on_subscribe = lambda *a: done.set()
    sub = PahoProperties(PacketTypes.SUBSCRIBE)
    sub.SubscriptionIdentifier = 42
    c.subscribe("v5/#", options=SubscribeOptions(qos=1, noLocal=True), properties=sub)
    assert done.wait(DEADLINE)
    c.disconnect()
    c.loop_stop()


def collect_v5(port: int) -> list[tuple[bytes, list[int], list[tuple[str, str]]]]:
    """v5sub back (clean start 0): payload, subscription identifiers and user properties of what it gets."""
    got: list[tuple[bytes, list[int], list[tuple[str, str]]]] = []
    c = client("v5sub", version=paho.MQTTv5)
    c.on_message = lambda c, u, m: got.append(
        (m.payload, getattr(m.properties, "SubscriptionIdentifier", []), getattr(m.properties, "UserProperty", []))
    )
    present = []
    connected = threading.Event()
    c.on_connect = lambda cl, u, flags, rc, p: (present.append(flags.session_present), connected.set())
    props = PahoProperties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 3600
    c.connect(HOST, port, clean_start=False, properties=props)
    c.loop_start()
    assert connected.wait(DEADLINE)
    deadline = time.monotonic() + DEADLINE
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    c.disconnect()
    c.loop_stop()
    assert present == [True]
    return got


class Serve:
    """`mqtt serve` with the given arguments; its standard error kept in a file."""

    def __init__(self, workdir: Path, *args: str) -> None:
        self.workdir = workdir
        self.stderr = workdir / f"serve-{time.monotonic_ns()}.log"
        self.args = args
        self.port = 0

    def run(self, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """For a start that fails: its exit code and standard error."""
        return subprocess.run([sys.executable, "-m", "mqtt_cli", "serve", *self.args], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip

    def start(self) -> subprocess.Popen[bytes]:
        """Started on the port its listener names, or the one it chose for port 0 (then `port`, from its ready
        file: no other process can take a port between a check and the bind)."""
        ready = self.workdir / f"ready-{time.monotonic_ns()}.json"
        proc = subprocess.Popen(
            [sys.executable, "-m", "mqtt_cli", "serve", "-v", "--ready-file", str(ready), *self.args],
            stdout=subprocess.DEVNULL,
            stderr=self.stderr.open("wb"),
            stdin=subprocess.DEVNULL,
        )
        self.port = wait_for_ready(ready, proc, DEADLINE, self.stderr)[0]["port"]
        wait_for_port(self.port, proc, DEADLINE, self.stderr)
        return proc

    def log(self) -> str:
        return self.stderr.read_text()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    assert proc.wait(timeout=15) == 0


def digest(path: Path) -> tuple[str, float]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime


def retained_with_properties(port: int) -> dict[str, tuple[bytes, dict[str, object]]]:
    got: dict[str, tuple[bytes, dict[str, object]]] = {}
    done = threading.Event()

    def on_message(c: paho.Client, u: object, m: paho.MQTTMessage) -> None:
        p = m.properties
        props = {"content_type": getattr(p, "ContentType", None), "user": getattr(p, "UserProperty", None),
                 "expiry": getattr(p, "MessageExpiryInterval", None),
                 "format": getattr(p, "PayloadFormatIndicator", None)}  # fmt: skip
        assert m.retain
        got[m.topic] = (m.payload, props)
        if len(got) == RETAINED:
            done.set()

    c = client("reader", version=paho.MQTTv5)
    c.on_message = on_message
    connect(c, port)
    c.subscribe("r/#", 1)
    done.wait(DEADLINE)
    time.sleep(0.3)  # none beyond the 20
    c.disconnect()
    c.loop_stop()
    return got


@pytest.fixture
def mosquitto_dir(tmp_path: Path) -> Iterator[tuple[Path, MosquittoState]]:
    workdir = tmp_path / "mosquitto"
    yield workdir, write_mosquitto_db(workdir)


def test_takeover_of_debian_mosquitto_db(mosquitto_dir: tuple[Path, MosquittoState]) -> None:
    """The issue's "must show": 100 queued QoS 1 messages for a returning client, in order, and 20 retained ones
    with their properties; QoS 2 flows go on where mosquitto left them; mosquitto.db is left as it was; a second
    start uses the broker's own database."""
    workdir, state = mosquitto_dir
    before = digest(workdir / "mosquitto.db")
    conf = workdir / "serve.conf"
    conf.write_text(f"listener 0 {HOST}\nallow_anonymous true\npersistence true\npersistence_location {workdir}\n")
    serve = Serve(workdir, "--mosquitto-conf", str(conf))
    proc = serve.start()
    port = serve.port
    try:
        log = serve.log()
        took = [line for line in log.splitlines() if "took over" in line]
        assert len(took) == 1, log
        assert (
            f"mosquitto's {workdir}/mosquitto.db: 20 retained messages, 4 persistent sessions with 4 subscriptions, "
            "103 queued messages, 2 in flight, 1 QoS 2 message received and published now;"
        ) in took[0]
        assert f"the broker keeps {workdir}/mqtt-cli.db from now on" in took[0]
        # v5sub's expiry counts from when its client left mosquitto (an hour then), not from now.
        with sqlite3.connect(workdir / "mqtt-cli.db") as db:
            interval, expires_at = db.execute("SELECT expiry_interval, expires_at FROM sessions "
                                              "WHERE client_id = 'v5sub'").fetchone()  # fmt: skip
        assert interval == 3600 and state.v5_left + 3599 <= expires_at <= state.v5_left + 3601

        # q2: its QoS 2 flows go on as mosquitto left them: PUBREL for the one it received PUBREC for, the other
        # PUBLISH again with DUP and its identifier; then what was queued, and the incoming message published.
        q2 = Raw(port, 4)
        assert q2.connect("q2").session_present
        assert q2.recv() == PubRel(state.released_pid)
        again = q2.recv()
        assert (again.payload, again.qos, again.dup, again.packet_id) == (b"B", 2, True, state.sent_pid)
        queued = [q2.recv(), q2.recv()]
        assert [(p.topic, p.payload, p.qos) for p in queued] == [("q2/queued", b"C", 2), ("in/x", b"incoming", 2)]
        q2.close()
        # p2: its PUBREL is answered, and the message it stands for is not published a second time.
        p2 = Raw(port, 4)
        assert p2.connect("p2").session_present
        p2.send(PubRel(7))
        assert p2.recv().packet_id == 7
        p2.close()

        assert collect(port, "cutover") == [b"%d" % i for i in range(QUEUED)]  # all 100, in order, once each
        assert collect_v5(port) == [(b"v5 one", [42], [("k", "v")]), (b"v5 two", [42], [])]
        retained = retained_with_properties(port)
        assert sorted(retained) == sorted(f"r/{i}" for i in range(RETAINED))
        for i in range(RETAINED):
            payload, props = retained[f"r/{i}"]
            assert payload == b"retained %d" % i
            assert props["content_type"] == "text/plain"
            assert props["user"] == [("n", str(i)), ("site", "a")]
            if i % 2:
                assert props["format"] == 1
                assert isinstance(props["expiry"], int) and 3500 < props["expiry"] <= 3600
            else:
                assert props["expiry"] is None
    finally:
        stop(proc)
    assert digest(workdir / "mosquitto.db") == before  # never written, never moved

    # The second start reads its own database only: nothing taken over again, the retained messages still there.
    serve = Serve(workdir, "--mosquitto-conf", str(conf))
    proc = serve.start()
    port = serve.port
    try:
        assert "took over" not in serve.log()
        assert len(retained_with_properties(port)) == RETAINED
        assert collect(port, "cutover", idle=0.5) == []  # delivered already: not again
    finally:
        stop(proc)
    assert digest(workdir / "mosquitto.db") == before


def _damaged(kind: str, data: bytes) -> bytes:
    if kind == "truncated":
        return data[: len(data) * 2 // 3]
    if kind == "version":
        return data[:19] + (7).to_bytes(4, "big") + data[23:]
    assert kind == "not-mosquitto"
    return b"\x00" * len(data)


@pytest.mark.parametrize("kind", ["truncated", "version", "not-mosquitto"])
def test_damaged_mosquitto_db_stops_the_start(tmp_path: Path, kind: str) -> None:
    """One line naming the file and what to do, exit code 1, nothing written: not the file, not a database."""
    db = tmp_path / "mosquitto.db"
    db.write_bytes(_damaged(kind, DATA.read_bytes()))
    before = digest(db)
    result = Serve(tmp_path, "--persistence", str(tmp_path / "mqtt-cli.db"), "--port", "0").run()
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"mqtt: error: persistence: mosquitto's {db} cannot be read (at byte "), lines[0]
    assert "--skip-mosquitto-db" in lines[0]
    assert "Traceback" not in result.stderr
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mosquitto.db"]


def test_skip_mosquitto_db_starts_empty_and_says_so(tmp_path: Path) -> None:
    """--skip-mosquitto-db: a warning that the file is not taken over; nothing of it in the broker; file kept. The
    TOML key does the same, and a damaged file is then no obstacle."""
    shutil.copy(DATA, tmp_path / "mosquitto.db")
    (tmp_path / "half.db").write_bytes(DATA.read_bytes()[:100])
    before = digest(tmp_path / "mosquitto.db")
    for args in (
        ("--persistence", str(tmp_path / "mqtt-cli.db"), "--skip-mosquitto-db"),
        ("-c", str(_toml(tmp_path, 'mosquitto_db = "half.db"\nskip_mosquitto_db = true\n', "other.db"))),
    ):
        serve = Serve(tmp_path, "--listen", f"mqtt://{HOST}:0", *args)
        proc = serve.start()
        port = serve.port
        try:
            assert "is not taken over (skip_mosquitto_db): starting without what it holds" in serve.log()
            assert "took over" not in serve.log()
            assert collect(port, "anyone", "#", idle=0.5) == []
        finally:
            stop(proc)
    assert digest(tmp_path / "mosquitto.db") == before


def test_toml_persistence_takes_over_the_file_beside_it(tmp_path: Path) -> None:
    """`[persistence] path` in a directory holding mosquitto.db: taken over as from a mosquitto.conf. What a start
    killed while taking over left (the database being made, under its own name) is made again."""
    shutil.copy(DATA, tmp_path / "mosquitto.db")
    (tmp_path / "broker.db.taking-over").write_bytes(b"half-made")
    (tmp_path / "broker.db.taking-over-wal").write_bytes(b"half-made")
    serve = Serve(tmp_path, "--listen", f"mqtt://{HOST}:0", "-c", str(_toml(tmp_path, "", "broker.db")))
    proc = serve.start()
    port = serve.port
    try:
        assert f"took over mosquitto's {tmp_path}/mosquitto.db: 20 retained messages" in serve.log(), serve.log()
        assert len(collect(port, "anyone", "r/#", idle=0.5)) == RETAINED
    finally:
        stop(proc)
    assert not [p.name for p in tmp_path.iterdir() if ".taking-over" in p.name]


def test_a_database_of_ours_where_mosquittos_file_should_be_is_named(tmp_path: Path) -> None:
    """A mosquitto.conf's persistence_file names mosquitto's file: where it names this broker's database instead,
    the line says to rename it."""
    sqlite3.connect(tmp_path / "b.db").execute("CREATE TABLE t (x)").connection.close()
    conf = tmp_path / "m.conf"
    conf.write_text(
        f"listener 0 {HOST}\nallow_anonymous true\npersistence true\npersistence_location {tmp_path}\n"
        "persistence_file b.db\n"
    )
    result = Serve(tmp_path, "--mosquitto-conf", str(conf)).run()
    assert result.returncode == 1
    assert result.stderr == (
        f"mqtt: error: persistence: {tmp_path}/b.db is an SQLite database, not mosquitto's file: if it is this "
        f"broker's database, rename it to {tmp_path}/mqtt-cli.db; else move it away or start with --skip-mosquitto-db\n"
    )


def test_our_database_named_as_mosquittos_file_is_refused(tmp_path: Path) -> None:
    """A persistence path that is mosquitto's file itself would be moved aside as unreadable: refused instead."""
    shutil.copy(DATA, tmp_path / "mosquitto.db")
    result = Serve(tmp_path, "--persistence", str(tmp_path / "mosquitto.db"), "--port", "0").run()
    assert result.returncode == 1
    assert "is mosquitto's persistence file, not this broker's database" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mosquitto.db"]


def _toml(directory: Path, extra: str, name: str) -> Path:
    path = directory / f"broker-{name}.toml"
    path.write_text(f'[persistence]\npath = "{directory / name}"\n{extra}')
    return path
