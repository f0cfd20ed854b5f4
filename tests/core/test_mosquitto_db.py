"""core/mosquitto_db.py and core/mosquitto_takeover.py: mosquitto's persistence file read, and its records as this
broker's change records. The file in tests/data/mosquitto/ was written by Debian's mosquitto 2.0.11
(tests/broker/test_mosquitto_takeover.py write_mosquitto_db: 100 queued QoS 1 messages for `cutover`, QoS 2 flows
of `q2` in two states, a QoS 2 message of `p2` waiting for PUBREL, a 5.0 session `v5sub` with a subscription
identifier and two messages queued, 20 retained messages with properties)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqtt_cli.core.mosquitto_db import (
    MAGIC,
    ClientMessage,
    ClientRecord,
    Direction,
    MessageState,
    MosquittoDb,
    MosquittoDbError,
    StoredMessage,
    SubscriptionRecord,
    parse,
)
from mqtt_cli.core.mosquitto_takeover import take_over
from mqtt_cli.core.persistence import (
    DeliveryAdded,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    RetainedSet,
    SessionSaved,
)
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties

DATA = (Path(__file__).parent.parent / "data" / "mosquitto" / "mosquitto-2.0.11.db").read_bytes()
#: The wall clock at the take-over: half an hour after v5sub's client left (its session expires an hour after; the
#: file's messages that expire do so in about 127 years).
WALL = float(next(c.session_expiry_time for c in parse(DATA).clients if c.client_id == "v5sub") - 1800)


def test_reads_the_file_debians_mosquitto_wrote() -> None:
    db = parse(DATA)
    assert (db.version, db.shutdown, db.skipped_chunks) == (6, True, 0)
    assert [(c.client_id, c.session_expiry_interval, c.session_expiry_time) for c in db.clients] == [
        ("cutover", 0xFFFFFFFF, 0), ("v5sub", 3600, WALL + 1800), ("q2", 0xFFFFFFFF, 0), ("p2", 0xFFFFFFFF, 0)
    ]  # fmt: skip
    by_id = {m.store_id: m for m in db.messages}
    cutover = [by_id[c.store_id].payload for c in db.client_messages if c.client_id == "cutover"]
    assert cutover == [b"%d" % i for i in range(100)]
    others = [(c.client_id, by_id[c.store_id].payload, c.qos, c.state, c.mid, c.direction)
              for c in db.client_messages if c.client_id != "cutover"]  # fmt: skip
    assert others == [
        ("v5sub", b"v5 one", 1, MessageState.QUEUED, 1, Direction.OUT),
        ("v5sub", b"v5 two", 1, MessageState.QUEUED, 2, Direction.OUT),
        ("q2", b"A", 2, MessageState.WAIT_FOR_PUBCOMP, 1, Direction.OUT),
        ("q2", b"B", 2, MessageState.WAIT_FOR_PUBREC, 2, Direction.OUT),
        ("q2", b"C", 2, MessageState.QUEUED, 3, Direction.OUT),
        ("p2", b"incoming", 2, MessageState.WAIT_FOR_PUBREL, 7, Direction.IN),
    ]
    retained = sorted((by_id[i] for i in db.retained), key=lambda m: int(m.topic[2:]))
    assert [m.topic for m in retained] == [f"r/{i}" for i in range(20)]
    r1 = retained[1]
    assert (r1.payload, r1.retain, r1.qos, r1.source_id) == (b"retained 1", True, 1, "publisher")
    assert r1.properties == Properties(payload_format_indicator=1, content_type="text/plain",
                                       user_properties=(("n", "1"), ("site", "a")))  # fmt: skip
    assert r1.expiry_time > 5_000_000_000 and retained[0].expiry_time == 0
    assert [(s.client_id, s.topic, s.qos, s.identifier, s.no_local) for s in db.subscriptions] == [
        ("cutover", "q/#", 1, 0, False), ("v5sub", "v5/#", 1, 42, True), ("q2", "q2/#", 2, 0, False),
        ("q2", "in/#", 2, 0, False)
    ]  # fmt: skip
    v5 = [c.properties for c in db.client_messages if c.client_id == "v5sub"]
    assert v5 == [Properties(subscription_identifiers=(42,))] * 2


def test_takeover_records_of_the_file() -> None:
    t = take_over(parse(DATA), 100.0, WALL)
    assert (t.retained, t.sessions, t.subscriptions, t.queued, t.inflight, t.incoming) == (20, 4, 4, 103, 2, 1)
    assert not t.left_out
    sessions = [c for c in t.changes if type(c) is SessionSaved]
    assert [(s.client_id, s.version, s.expiry_interval, s.expires_at) for s in sessions] == [
        ("cutover", 4, 0xFFFFFFFF, None), ("v5sub", 5, 3600, 1900.0), ("q2", 4, 0xFFFFFFFF, None),
        ("p2", 4, 0xFFFFFFFF, None)
    ]  # fmt: skip
    v5 = [c for c in t.changes if type(c) is DeliveryAdded and c.client_id == "v5sub"]
    assert [(d.message.payload, d.subscription_ids) for d in v5] == [(b"v5 one", (42,)), (b"v5 two", (42,))]
    assert v5[0].message.properties == Properties(user_properties=(("k", "v"),))
    q2 = [c for c in t.changes if getattr(c, "client_id", None) == "q2" and type(c) is not SessionSaved]
    rows = [c.row for c in q2 if type(c) is DeliveryAdded]
    assert [type(c) for c in q2] == [DeliveryAdded, DeliverySent, DeliveryReleased, DeliveryAdded, DeliverySent,
                                     DeliveryAdded, DeliveryAdded]  # fmt: skip
    assert [(c.packet_id, c.row) for c in q2 if type(c) is DeliverySent] == [(1, rows[0]), (2, rows[1])]
    last = q2[-1]
    assert type(last) is DeliveryAdded
    assert (last.message.topic, last.message.payload, last.qos, last.message.origin) == ("in/x", b"incoming", 2, "p2")
    assert rows == sorted(rows) and len(set(rows)) == len(rows)
    assert [c for c in t.changes if type(c) is IncomingAdded] == [IncomingAdded("p2", 7)]
    r1 = next(c.message for c in t.changes if type(c) is RetainedSet and c.message.topic == "r/1")
    assert r1.received_at == 100.0
    assert r1.properties.content_type == "text/plain"
    stored = next(m for m in parse(DATA).messages if m.topic == "r/1")
    assert r1.properties.message_expiry_interval == int(stored.expiry_time - WALL)  # what is left of it


def test_what_expired_while_mosquitto_was_down_is_left_out_and_counted() -> None:
    later = 6_000_000_000.0  # after the odd retained messages' expiry, and v5sub's
    t = take_over(parse(DATA), 0.0, later)
    assert t.retained == 10 and t.left_out.expired_messages == 10  # each once, however many refer to it
    assert not t.left_out.orphans
    assert t.sessions == 3 and t.left_out.expired_sessions == 1
    msg = StoredMessage(1, 0, "t", b"x", 1, False, EMPTY_PROPERTIES, None, None, 0, 0)
    db = MosquittoDb(
        6, 1, True, (msg,),
        (
            ClientRecord("gone", 1000, 60, 0, None, 0),  # its client left; its expiry passed
            ClientRecord("going", 2000, 600, 0, "alice", 0),  # its client left; still due
            ClientRecord("ended", 0, 0, 0, None, 0),  # 5.0, expiry 0: ended with the connection the stop closed
            ClientRecord("online", 0, 300, 0, None, 0),  # connected at the stop: its expiry starts at the start
        ),
        tuple(ClientMessage(c, 1, 1, 1, MessageState.QUEUED, False, False, Direction.OUT, EMPTY_PROPERTIES)
              for c in ("gone", "going", "nobody")),
        (), (SubscriptionRecord("going", "t", 1, 5, True, False),), 0,
    )  # fmt: skip
    t = take_over(db, 10.0, 1500.0)
    saved = {c.client_id: c for c in t.changes if type(c) is SessionSaved}
    assert sorted(saved) == ["going", "online"]
    going = saved["going"]
    assert (going.version, going.expires_at, going.username) == (5, 510.0, "alice")  # 2000 on the wall is 510 here
    assert going.subscriptions[0][1].subscription_identifier == 5 and going.subscriptions[0][1].no_local
    assert saved["online"].expires_at is None
    assert [c.client_id for c in t.changes if type(c) is DeliveryAdded] == ["going"]
    assert (t.left_out.expired_sessions, t.left_out.orphans) == (2, 1)


def test_odd_records_of_a_damaged_file_do_not_break_the_broker() -> None:
    """Values mosquitto would not write but a damaged file may hold, each made safe: an expiry beyond any
    interval (dropped, as mosquitto drops it), a packet identifier in flight twice (the second queued), a topic
    alias or subscription identifier among a message's own properties (removed), a retained entry naming no
    message (counted)."""
    odd = Properties(topic_alias=3, subscription_identifiers=(9,), content_type="x")
    msgs = (StoredMessage(1, int(WALL) + (1 << 40), "t", b"far", 1, False, EMPTY_PROPERTIES, None, None, 0, 0),
            StoredMessage(2, 0, "t", b"odd", 1, False, odd, None, None, 0, 0))  # fmt: skip
    sent = [ClientMessage("c", 2, 5, 1, MessageState.WAIT_FOR_PUBACK, False, True, Direction.OUT, EMPTY_PROPERTIES)]
    clients = (ClientRecord("c", 0, 0xFFFFFFFF, 0, None, 0),)
    db = MosquittoDb(6, 2, True, msgs, clients, tuple(sent * 2), (1, 77), (), 0)  # (no message 77 in the file)
    t = take_over(db, 0.0, WALL)
    assert (t.retained, t.left_out.expired_messages, t.left_out.orphans, t.inflight, t.queued) == (0, 1, 1, 1, 1)
    added = [c.message.properties for c in t.changes if type(c) is DeliveryAdded]
    assert added == [Properties(content_type="x")] * 2


def test_qos0_and_unacknowledged_incoming_are_counted() -> None:
    msg = StoredMessage(1, 0, "t", b"x", 0, False, EMPTY_PROPERTIES, "c", None, 0, 0)
    db = MosquittoDb(
        6, 1, True, (msg,), (ClientRecord("c", 0, 0xFFFFFFFF, 0, None, 0),),
        (ClientMessage("c", 1, 0, 0, MessageState.PUBLISH_QOS0, False, False, Direction.OUT, EMPTY_PROPERTIES),
         ClientMessage("c", 1, 3, 2, MessageState.SEND_PUBREC, False, False, Direction.IN, EMPTY_PROPERTIES)),
        (), (), 0,
    )  # fmt: skip
    t = take_over(db, 0.0, 0.0)
    assert (t.queued, t.left_out.qos0_messages, t.left_out.unacknowledged_incoming) == (0, 1, 1)


# --- malformed files ------------------------------------------------------------------------------------------


def _chunk(kind: int, body: bytes) -> bytes:
    return struct.pack(">II", kind, len(body)) + body


def _file(*chunks: bytes, version: int = 6) -> bytes:
    return MAGIC + b"\x00" * 4 + version.to_bytes(4, "big") + b"".join(chunks)


def _cfg(last: int, order: str = "<") -> bytes:
    return _chunk(1, struct.pack(order + "Q", last) + b"\x01\x08" + b"\x00" * 6)


def _msg(store_id: int, topic: bytes, payload: bytes, order: str = "<", expiry: int = 0, qos: int = 1) -> bytes:
    fixed = struct.pack(order + "Qq", store_id, expiry) + struct.pack(">IHHHHHBB", len(payload), 1, 0, 0,
                                                                         len(topic), 0, qos, 1)  # fmt: skip
    return _chunk(2, fixed + topic + payload + b"\x00")


def test_byte_order_of_the_64_bit_fields_comes_from_the_cfg_chunk() -> None:
    """mosquitto writes store ids and times as they lie in memory: a big-endian machine's file reads as well."""
    for order in "<>":
        db = parse(_file(_cfg(2, order), _msg(2, b"a/b", b"hi", order, expiry=5_000_000_000),
                         _chunk(4, struct.pack(order + "Q", 2))))  # fmt: skip
        assert db.last_db_id == 2 and db.retained == (2,)
        assert (db.messages[0].store_id, db.messages[0].expiry_time) == (2, 5_000_000_000)


def test_empty_file_holds_nothing_and_unknown_chunks_are_skipped() -> None:
    assert parse(b"").messages == ()  # mosquitto starts on an empty file as on none
    assert parse(_file(_cfg(0), _chunk(99, b"future"))).skipped_chunks == 1


@pytest.mark.parametrize(
    ("data", "offset", "what"),
    [
        (b"SQLite format 3\x00" + b"\x00" * 100, 0, "an SQLite file"),
        (b"hello world, not a db", 0, "no mosquitto db magic"),
        (MAGIC + b"\x00\x00", 17, "ends inside its header"),
        (_file(version=4), 19, "db format version 4; this broker reads versions 5 and 6"),
        (_file(_cfg(1))[:-3], 23, "chunk 1 of 16 bytes runs past the end of the file"),
        (_file(_cfg(1), b"\x00\x00\x00"), 47, "ends inside a chunk header"),
        (_file(_chunk(1, b"\x00" * 10)), 23, "CFG chunk of 10 bytes (its fixed part is 16)"),
        (_file(_msg(1, b"a/+", b"x")), 63, "topic 'a/+': topic name contains wildcard '+'"),
        (_file(_msg(1, b"a/\xff", b"x")), 65, "topic is not UTF-8"),
        (_file(_msg(1, b"a", b"x", qos=3)), 61, "message QoS 3"),
        (_file(_chunk(5, struct.pack(">IHHBB", 0, 1, 3, 1, 0) + b"\x00\x00cab#")), 44, "topic filter 'ab#'"),
        (_file(_chunk(3, struct.pack("<QHHBBBB", 1, 1, 1, 1, 12, 0, 1) + b"c")), 44, "client message state 12"),
    ],
)
def test_malformed_files_name_the_offset_and_what(data: bytes, offset: int, what: str) -> None:
    with pytest.raises(MosquittoDbError) as caught:
        parse(data)
    assert caught.value.offset == offset, caught.value
    assert what in caught.value.what
    assert str(caught.value).startswith(f"at byte {offset}: ")


@settings(max_examples=300, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(cut=st.integers(0, len(DATA)), edits=st.lists(st.tuples(st.integers(0, len(DATA) - 1), st.integers(0, 255)),
                                                     max_size=4))  # fmt: skip
def test_damaged_files_raise_only_the_typed_error(cut: int, edits: list[tuple[int, int]]) -> None:
    """Any truncation of the real file, with any bytes changed: MosquittoDbError or records, never another
    exception; and the records, taken over, raise nothing either."""
    data = bytearray(DATA)
    for pos, value in edits:
        data[pos] = value
    try:
        db = parse(bytes(data[:cut]))
    except MosquittoDbError:
        return
    take_over(db, 0.0, WALL)
