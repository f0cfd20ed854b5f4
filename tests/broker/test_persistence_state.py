"""`mqtt serve --persistence`, schema 2 (issue #18): QoS 2 state in both directions, wills, the migration of a
version-1 file, a full disk told to 5.0 publishers (0x97), and a file bounded by the queue limits.

Real `python -m mqtt_cli serve` processes killed with SIGKILL; the MQTT side is a raw socket speaking our codec
(so that each packet, its identifier and its DUP flag can be seen and withheld at will) or paho-mqtt.
"""

from __future__ import annotations

import resource
import socket
import sqlite3
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mqtt_cli.core.config import SyncMode
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import (
    ConnAck,
    Connect,
    Disconnect,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    Will,
)
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader
from mqtt_cli.net.store import SCHEMA_VERSION, Store
from tests.broker import test_persistence
from tests.broker.test_persistence import (
    DEADLINE,
    Ours,
    client,
    collect,
    connect,
    publish_acked,
    subscribe_offline,
)
from tests.brokers import HOST

pytestmark = [pytest.mark.slow]

ours = test_persistence.ours  # the fixture: `mqtt serve --persistence` processes, stopped at the end


class Raw:
    """One MQTT connection on a plain socket: packets in and out exactly as written."""

    def __init__(self, port: int, version: int = 5) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=DEADLINE)
        self.version = version
        self.reader = PacketReader(version)
        self.pending: deque[Any] = deque()

    def send(self, packet: Any) -> None:
        self.sock.sendall(encode(packet, self.version))

    def recv(self, timeout: float = DEADLINE) -> Any:
        self.sock.settimeout(timeout)
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the broker closed the connection")
            self.pending.extend(self.reader.feed(data))
        return self.pending.popleft()

    def nothing(self, seconds: float) -> bool:
        """True when no packet comes within `seconds`."""
        try:
            packet = self.recv(seconds)
        except TimeoutError:
            return True
        self.pending.appendleft(packet)
        return False

    def connect(self, client_id: str, *, clean: bool = False, will: Will | None = None) -> ConnAck:
        props = Properties(session_expiry_interval=300) if self.version == 5 and not clean else Properties()
        self.send(Connect(client_id, clean, 30, will=will, properties=props, protocol_version=self.version))
        ack = self.recv()
        assert type(ack) is ConnAck and ack.reason_code == 0, ack
        return ack

    def close(self) -> None:
        self.sock.close()


def settle() -> None:
    """Time for a commit that nothing waits for (a SUBSCRIBE's, a CONNECT's will) to be written."""
    time.sleep(0.5)


# --- incoming QoS 2: identifiers received and not released ---------------------------------------------------


def test_incoming_qos2_is_delivered_once_across_sigkill(ours: Callable[..., Ours]) -> None:
    broker = ours()
    subscribe_offline(broker.port, "keeper", "x/#")
    pub = Raw(broker.port)
    pub.connect("pub2")
    pub.send(Publish("x/once", b"once", 2, packet_id=7))
    assert pub.recv() == PubRec(7)  # stored: the file holds the message and identifier 7
    pub.send(Publish("x/twice", b"released", 2, packet_id=8))
    assert pub.recv() == PubRec(8)
    pub.send(PubRel(8))
    assert pub.recv() == PubComp(8)  # the release is on file before this
    broker.kill()
    pub.close()
    # Read as the broker reads it at start (the identifiers may still be in the log, not yet in their table).
    store, restored = Store.open(broker.db, SyncMode.normal, 0.0)
    store.close()
    assert [(s.client_id, s.incoming) for s in restored.sessions if s.incoming] == [("pub2", (7,))]
    broker.start()
    pub = Raw(broker.port)
    assert pub.connect("pub2").session_present
    # The publisher did not see PUBREC 7 (say): it sends the PUBLISH again, DUP set. Acknowledged, not delivered.
    pub.send(Publish("x/once", b"once", 2, dup=True, packet_id=7))
    assert pub.recv() == PubRec(7)
    pub.send(PubRel(7))
    assert pub.recv() == PubComp(7)  # 0x00: identifier 7 was known (0x92 if it had been lost)
    # Identifier 8 was released before the kill: a new message under it is a new message.
    pub.send(Publish("x/new", b"new under 8", 2, packet_id=8))
    assert pub.recv() == PubRec(8)
    pub.send(PubRel(8))
    assert pub.recv() == PubComp(8)
    pub.send(Disconnect())
    pub.close()
    assert sorted(collect(broker.port, "keeper")) == [b"new under 8", b"once", b"released"]


# --- outgoing QoS 1/2 in flight --------------------------------------------------------------------------------


def test_outgoing_qos2_in_flight_resumes_with_its_packet_identifier(ours: Callable[..., Ours]) -> None:
    broker = ours()
    sub = Raw(broker.port)
    sub.connect("sub2")
    sub.send(Subscribe(1, (Subscription("y/#", 2),)))
    assert type(sub.recv()) is SubAck
    publish_acked(broker.port, "y/a", b"a")  # QoS 1 publisher, QoS 2 subscription: delivered at QoS 1
    first = sub.recv()
    assert type(first) is Publish and first.qos == 1 and not first.dup
    c = client("pub-y")
    connect(c, broker.port)
    c.publish("y/b", b"b", qos=2).wait_for_publish(DEADLINE)
    second = sub.recv()
    assert type(second) is Publish and second.qos == 2 and second.payload == b"b"
    c.disconnect()
    c.loop_stop()
    settle()
    broker.kill()  # neither acknowledged
    sub.close()
    broker.start()
    sub = Raw(broker.port)
    assert sub.connect("sub2").session_present
    again = [sub.recv(), sub.recv()]
    assert [(p.payload, p.packet_id, p.dup) for p in again] == [
        (b"a", first.packet_id, True),
        (b"b", second.packet_id, True),
    ]  # in order, with their identifiers, DUP set [MQTT-4.4.0-1]
    sub.send(PubAck(first.packet_id))
    sub.send(PubRec(second.packet_id))
    assert sub.recv() == PubRel(second.packet_id)  # sent once PUBREC is on file
    broker.kill()
    sub.close()
    broker.start()
    sub = Raw(broker.port)
    sub.connect("sub2")
    assert sub.recv() == PubRel(second.packet_id)  # PUBREC came before the kill: PUBREL, not the PUBLISH again
    sub.send(PubComp(second.packet_id))
    assert sub.nothing(1.0)
    broker.kill()
    sub.close()
    broker.start()
    sub = Raw(broker.port)
    sub.connect("sub2")
    assert sub.nothing(1.0)  # the flow is over, on file too
    sub.close()
    with sqlite3.connect(broker.db) as db:
        assert db.execute("SELECT count(*) FROM deliveries").fetchone() == (0,)


# --- wills --------------------------------------------------------------------------------------------------------


def test_wills_of_connections_ended_by_sigkill_are_published(ours: Callable[..., Ours]) -> None:
    """The broker's death ended these connections without a DISCONNECT: their wills are due (MQTT-3.1.2-8 removes
    a will only once published or after DISCONNECT 0x00), published after the restart, a will delay counted from
    it. A client that disconnected normally leaves no will behind."""
    broker = ours()
    subscribe_offline(broker.port, "keeper", "will/#")
    clean311 = Raw(broker.port, 4)
    clean311.connect("w-clean", clean=True, will=Will("will/clean", b"gone-clean", 1))
    delayed = Raw(broker.port, 5)
    delayed.connect("w-delayed", will=Will("will/delayed", b"gone-delayed", 1, True, Properties(will_delay_interval=1)))
    polite = Raw(broker.port, 4)
    polite.connect("w-polite", clean=True, will=Will("will/polite", b"never", 1))
    polite.send(Disconnect())
    polite.close()
    settle()
    broker.kill()
    for c in (clean311, delayed):
        c.close()
    broker.start()
    time.sleep(1.5)  # the delayed one's second
    assert sorted(collect(broker.port, "keeper")) == [b"gone-clean", b"gone-delayed"]
    assert collect(broker.port, "reader", "will/delayed") == [b"gone-delayed"]  # retained, as it asked
    with sqlite3.connect(broker.db) as db:
        assert db.execute("SELECT count(*) FROM sessions WHERE will_topic IS NOT NULL").fetchone() == (0,)


def test_a_will_is_not_published_when_its_client_is_back_within_the_delay(ours: Callable[..., Ours]) -> None:
    broker = ours()
    subscribe_offline(broker.port, "keeper", "will/#")
    delayed = Raw(broker.port, 5)
    delayed.connect("w-back", will=Will("will/back", b"gone", 1, False, Properties(will_delay_interval=3)))
    settle()
    broker.kill()
    delayed.close()
    broker.start()
    back = Raw(broker.port, 5)
    assert back.connect("w-back").session_present  # within 3 s of the restart [MQTT-3.1.2-8]
    back.send(Disconnect())
    back.close()
    time.sleep(3.5)
    assert collect(broker.port, "keeper") == []


# --- schema version 1 -> 2 -------------------------------------------------------------------------------------

# The first released schema, as `mqtt serve` 0.x wrote it (mqtt_cli/net/store.py, SCHEMA_VERSION 1).
V1_DDL = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE retained (
    topic TEXT PRIMARY KEY, payload BLOB NOT NULL, qos INTEGER NOT NULL, properties BLOB NOT NULL,
    origin TEXT, received_at REAL NOT NULL
);
CREATE TABLE sessions (
    client_id TEXT PRIMARY KEY, version INTEGER NOT NULL, expiry_interval INTEGER NOT NULL, expires_at REAL,
    username TEXT
);
CREATE TABLE subscriptions (
    client_id TEXT NOT NULL, filter TEXT NOT NULL, qos INTEGER NOT NULL, no_local INTEGER NOT NULL,
    retain_as_published INTEGER NOT NULL, retain_handling INTEGER NOT NULL, identifier INTEGER,
    PRIMARY KEY (client_id, filter)
);
CREATE TABLE deliveries (
    row INTEGER PRIMARY KEY, client_id TEXT NOT NULL, topic TEXT NOT NULL, payload BLOB NOT NULL,
    message_qos INTEGER NOT NULL, message_retain INTEGER NOT NULL, properties BLOB NOT NULL, origin TEXT,
    received_at REAL NOT NULL, qos INTEGER NOT NULL, retain INTEGER NOT NULL, subscription_ids TEXT NOT NULL
);
CREATE INDEX deliveries_by_client ON deliveries (client_id, row);
INSERT INTO schema_version VALUES (1);
"""


def test_a_version_1_file_is_migrated_and_keeps_its_data(ours: Callable[..., Ours], tmp_path: Path) -> None:
    broker = ours()
    broker.stop()
    for extra in ("", "-wal", "-shm"):
        broker.db.with_name(broker.db.name + extra).unlink(missing_ok=True)
    now = time.time()
    with sqlite3.connect(broker.db) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(V1_DDL)
        db.execute("INSERT INTO retained VALUES ('r/v1', x'6b657074', 1, x'00', 'old-pub', ?)", (now,))
        db.execute("INSERT INTO sessions VALUES ('old', 4, 4294967295, NULL, NULL)")
        db.execute("INSERT INTO subscriptions VALUES ('old', 'q/#', 1, 0, 0, 0, NULL)")
        for row, payload in ((1, b"queued-1"), (2, b"queued-2")):
            db.execute(
                "INSERT INTO deliveries VALUES (?, 'old', 'q/x', ?, 1, 0, x'00', 'old-pub', ?, 1, 0, '[]')",
                (row, payload, now),
            )
    broker.start()
    assert collect(broker.port, "old") == [b"queued-1", b"queued-2"]
    assert collect(broker.port, "reader", "r/#") == [b"kept"]
    publish_acked(broker.port, "q/y", b"after")  # the migrated session's subscription is back
    assert collect(broker.port, "old") == [b"after"]
    broker.stop()
    with sqlite3.connect(broker.db) as db:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        columns = [r[1] for r in db.execute("PRAGMA table_info(deliveries)")]
        assert columns[-2:] == ["packet_id", "released"]
        assert [r[1] for r in db.execute("PRAGMA table_info(sessions)")][-1] == "bridge"  # schema 3
        assert db.execute("SELECT count(*) FROM incoming").fetchone() == (0,)


# --- a file that cannot be written: 5.0 publishers are told ----------------------------------------------------


def test_a_full_disk_refuses_5_0_publishes_with_quota_exceeded(ours: Callable[..., Ours]) -> None:
    """While no commit can be written, a 5.0 publisher's QoS 1/2 PUBLISH is answered 0x97 at once (not stored,
    not delivered: the publisher keeps it), the failure is logged once; when space is back, 0x00 again."""
    broker = ours()
    subscribe_offline(broker.port, "keeper", "d/#")
    publish_acked(broker.port, "d/first", b"first")
    assert broker.proc is not None
    pid = broker.proc.pid
    size = broker.db.stat().st_size + broker.db.with_name(broker.db.name + "-wal").stat().st_size
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
    filler = client("filler")
    connect(filler, broker.port)
    withheld = filler.publish("d/big", b"x" * 200_000, qos=1)  # its commit fails: the episode starts
    deadline = time.monotonic() + DEADLINE
    while "refused (0x97)" not in broker.stderr.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    pub = Raw(broker.port)
    pub.connect("pub5", clean=True)
    pub.send(Publish("d/q1", b"q1", 1, packet_id=1))
    assert pub.recv() == PubAck(1, 0x97)
    pub.send(Publish("d/q2", b"q2", 2, packet_id=2))
    assert pub.recv() == PubRec(2, 0x97)  # the QoS 2 flow ends there (4.3.3)
    time.sleep(1.5)  # a retry or two, still failing: no second log line
    assert broker.stderr.read_text().count("refused (0x97)") == 1
    assert not withheld.is_published()
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    withheld.wait_for_publish(DEADLINE)
    assert "written again after" in broker.stderr.read_text()
    pub.send(Publish("d/q1", b"q1 again", 1, packet_id=3))
    assert pub.recv() == PubAck(3)  # space is back: stored and acknowledged
    pub.send(Disconnect())
    pub.close()
    filler.disconnect()
    filler.loop_stop()
    broker.kill()
    broker.start()
    assert collect(broker.port, "keeper") == [b"first", b"x" * 200_000, b"q1 again"]  # nothing refused got in


# --- the file stays bounded by the queue limits ----------------------------------------------------------------


def test_the_file_holds_at_most_a_queue_per_session(ours: Callable[..., Ours]) -> None:
    broker = ours("--max-queued-messages", "5")
    subscribe_offline(broker.port, "never-back", "b/#")
    c = client("pub-b")
    connect(c, broker.port)
    for i in range(40):
        c.publish("b/x", b"m%d" % i, qos=1).wait_for_publish(DEADLINE)
    c.disconnect()
    c.loop_stop()
    with sqlite3.connect(broker.db) as db:  # read beside the running broker (WAL)
        rows = db.execute("SELECT payload FROM deliveries WHERE client_id = 'never-back' ORDER BY row").fetchall()
    assert [r[0] for r in rows] == [b"m0", b"m1", b"m2", b"m3", b"m4"]  # the others were refused, not kept


def test_a_session_that_expires_while_the_broker_runs_leaves_the_file(ours: Callable[..., Ours]) -> None:
    broker = ours()
    brief = Raw(broker.port)
    brief.send(Connect("brief", False, 30, properties=Properties(session_expiry_interval=1), protocol_version=5))
    assert type(brief.recv()) is ConnAck
    brief.send(Subscribe(1, (Subscription("e/#", 1),)))
    assert type(brief.recv()) is SubAck
    brief.send(Disconnect())
    brief.close()
    for i in range(3):
        publish_acked(broker.port, "e/x", b"e%d" % i)
    with sqlite3.connect(broker.db) as db:
        assert db.execute("SELECT count(*) FROM deliveries WHERE client_id = 'brief'").fetchone() == (3,)
    time.sleep(2.0)  # its second passes, the broker's timer ends it
    with sqlite3.connect(broker.db) as db:
        assert db.execute("SELECT count(*) FROM sessions").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM subscriptions").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM deliveries").fetchone() == (0,)

