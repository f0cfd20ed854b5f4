"""Every fast path of the codec and the connections against the general path it shortcuts, case by case.

As MQTT.js's mqtt-packet tests do: one table of cases (PUBLISH_CASES; BAD_CASES for what breaks a rule), each case
run through both paths, which must give identical bytes, packets, errors and events:

    fast path                                              general path
    encoder.encode_publish, frame_publish (ClientConnection)  encoder.encode
    session.Message.wire / wire_aliased (BrokerCore's delivery)  encoder.encode
    reader.PacketReader: the inlined PUBLISH decode           decoder.decode_body (its PUBLISH decoder)
    reader.PacketReader: bare PUBACK/PUBREC/PUBREL/PUBCOMP    decoder.decode_body
    ClientConnection.receive_data: leading plain PUBACKs      its reader and general handler
    BrokerCore: PUBACK / PUBREC / PUBREL / PUBCOMP written by hand  encoder.encode
    records.fast_constructor(cls)                             cls(...)
    BrokerCore: a plain QoS 0 message forwarded as bytes      its general delivery (a Message per match)

The reader takes its fast path only for a PUBLISH whose property block it has seen before (5.0): each case is fed
three times to one reader, so the first copy may take the general path and the others take the fast one.
The one-shot command path (commands/_fast.py against typer) has its own tests (tests/commands).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqtt_cli.core import publishing as publishing_module
from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.client import ClientConnection
from mqtt_cli.core.decoder import decode_body
from mqtt_cli.core.encoder import encode, encode_publish, encode_topic_name, frame_publish
from mqtt_cli.core.errors import RemoteProtocolError
from mqtt_cli.core.events import Acknowledged, PongReceived, PublishAcknowledged
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.packets import (
    ConnAck,
    Connect,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
    Subscription,
)
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties
from mqtt_cli.core.reader import PacketReader, plain_ack_packet
from mqtt_cli.core.records import FrozenInstanceError, fast_constructor, fields, replace
from mqtt_cli.core.server import ServerConnection
from mqtt_cli.core.session import Message

from . import strategies as S

ACKS = (PubAck, PubRec, PubRel, PubComp)


class Case(NamedTuple):
    id: str
    version: int
    packet: Publish


def _publish_cases() -> Iterator[Case]:
    # Payload sizes that put the remaining length on both sides of its 1/2, 2/3 and 3/4-byte boundaries for the
    # shorter topics (the exact byte depends on the topic, the packet identifier and the property block).
    sizes = [0, 1, 64, 120, 121, 122, 123, 124, 125, 126, 127, 16_375, 16_378, 16_381, 2_097_140, 2_097_148]
    topics = ["a", "säure/€/x", "t" * 65_535]  # the last: the longest topic name
    v5_props = [
        EMPTY_PROPERTIES,
        Properties(content_type="text/plain", user_property=("k", "v")),
        Properties(message_expiry_interval=60, payload_format_indicator=1),
        Properties(topic_alias=3),
    ]
    for version in (3, 4, 5):
        for qos in (0, 1, 2):
            for retain in (False, True):
                for dup in (False, True) if qos else (False,):
                    for topic in topics:
                        for size in sizes if topic == "a" else (0, 125, 16_378) if len(topic) < 100 else (0, 64):
                            if size > 100_000 and (retain or dup):
                                continue  # the 3- and 4-byte lengths: once per version, QoS and property block
                            for props in v5_props if version == 5 else (EMPTY_PROPERTIES,):
                                pid = 0xFFFF if size % 2 else 1 + size % 300
                                p = Publish(topic, b"p" * size, qos, retain, dup, pid if qos else None, props)
                                name = f"v{version}-q{qos}{'-r' if retain else ''}{'-d' if dup else ''}-t{len(topic)}"
                                yield Case(f"{name}-{size}B-{len(props.items)}props", version, p)
                                if props.topic_alias is not None and len(topic) < 100 and size < 200:
                                    # 5.0: the topic name left out, the alias standing for it
                                    p = Publish("", b"p" * size, qos, retain, dup, pid if qos else None, props)
                                    yield Case(f"{name}-{size}B-alias-only", version, p)


PUBLISH_CASES = list(_publish_cases())


def _header_length(raw: bytes) -> int:
    n = 2
    while raw[n - 1] & 0x80:
        n += 1
    return n


def _general(raw: bytes, version: int, *, strict: bool = True) -> Any:
    """The general decoder's answer for one whole packet: the packet, or the error it raises. Tolerant (as a
    tolerant reader does with any packet it cannot read): a second, lenient try that may read the packet."""
    start = _header_length(raw)
    try:
        return decode_body(raw[0], raw, start, len(raw), version)
    except RemoteProtocolError as err:
        if strict or err.packet is not None:
            return err
        try:
            decode_body(raw[0], raw, start, len(raw), version, lenient=True)
        except RemoteProtocolError as again:
            if again.packet is not None:
                return again
        return err


def _same(fast: Any, general: Any) -> None:
    assert type(fast) is type(general)
    if isinstance(general, RemoteProtocolError):
        assert (str(fast), fast.reason_code, fast.packet_type) == (
            str(general),
            general.reason_code,
            general.packet_type,
        )
        assert type(fast.packet) is type(general.packet) and fast.packet == general.packet
    else:
        assert fast == general and hash(fast) == hash(general)
        if not isinstance(general, Publish) or len(general.payload) < 1000:
            assert repr(fast) == repr(general)
        if isinstance(general, Publish):  # a frozen record like the general decoder's, not its mutable twin
            with pytest.raises(FrozenInstanceError):
                fast.topic = "x"  # type: ignore[misc]


def _cuts(raw: bytes) -> Iterator[int]:
    """Where to cut `raw` in two: every byte of a short packet; of a long one, the header and the ends."""
    if len(raw) <= 300:
        yield from range(1, len(raw))
    else:
        yield from (*range(1, 8), len(raw) // 2, len(raw) - 1)


def _feed_cut(raw: bytes, version: int, cut: int, *, strict: bool = True) -> list[Any]:
    reader = PacketReader(version, strict=strict)
    out = reader.feed(raw[:cut])
    out += reader.feed(raw[cut:])
    assert not reader.buffered
    return out


# --- encoding -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", PUBLISH_CASES, ids=lambda c: c.id)
def test_publish_encoders_agree(case: Case) -> None:
    p, version = case.packet, case.version
    raw = encode(p, version)
    assert encode_publish(p, version) == raw
    # frame_publish from the parts, as ClientConnection.publish/relay put them together
    first = 0x30 | p.qos << 1 | (8 if p.dup else 0) | (1 if p.retain else 0)
    pid = p.packet_id.to_bytes(2, "big") if p.packet_id else b""
    props = b"" if version < 5 else encode(Publish("a", b"", 0, properties=p.properties), 5)[5:]
    topic = encode_topic_name(p.topic) if p.topic else b"\x00\x00"
    assert frame_publish(first, topic, pid, props, p.payload) == raw
    if p.dup:
        return  # the broker's deliveries are first sends
    # BrokerCore's deliveries: the message's properties without a topic alias, which wire_aliased adds per connection
    alias = p.properties.topic_alias
    kept = Properties(item for item in p.properties.items if item[0] != 0x23) if alias is not None else p.properties
    message = Message(p.topic or "x/y", p.payload, 2, False, kept, "publisher", 0.0)
    if alias is None and p.topic:
        plain = Publish(
            p.topic, p.payload, p.qos, p.retain, False, p.packet_id, kept if version == 5 else EMPTY_PROPERTIES
        )
        assert message.wire(version, p.qos, p.retain, p.packet_id, None) == encode(plain, version)
        if p.qos:  # again (framed once more and cached), then from its cache: other identifiers spliced in
            other = encode(replace(plain, packet_id=7), version)
            assert message.wire(version, p.qos, p.retain, 7, None) == other
            assert message.wire(version, p.qos, p.retain, 9, None) == encode(replace(plain, packet_id=9), version)
        else:
            assert message.wire(version, 0, p.retain, None, None) == encode(plain, version)
    elif alias is not None and version == 5:
        new = bool(p.topic)
        wired = message.wire_aliased(p.qos, p.retain, p.packet_id, None, alias, new)
        assert wired == encode(replace(p, topic=message.topic if new else ""), 5)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("props", [EMPTY_PROPERTIES, Properties(content_type="a/b")], ids=["plain", "props"])
def test_client_publish_bytes_are_the_encoders(version: int, qos: int, props: Properties) -> None:
    if props.items and version < 5:
        return
    client, _ = _connected_client(version)
    for retain in (False, True):
        for topic, payload in (("a", b""), ("säure/€", b"x" * 200), ("a", b"y" * 20_000)):
            pid = client.publish(topic, payload, qos, retain, props)
            expected = encode(Publish(topic, payload, qos, retain, False, pid, props), version)
            assert client.data_to_send(0.0) == expected
            if qos and not props.items:  # the bridge's relay(): the topic known, framed from parts
                pid = client.relay(topic, payload, qos, retain)
                assert pid and client.data_to_send(0.0) == encode(
                    Publish(topic, payload, qos, retain, False, pid), version
                )


# --- decoding -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", PUBLISH_CASES, ids=lambda c: c.id)
def test_publish_reader_agrees_with_the_general_decoder(case: Case) -> None:
    raw = encode(case.packet, case.version)
    general = _general(raw, case.version)
    assert general == case.packet
    for strict in (True, False):
        packets = PacketReader(case.version, strict=strict).feed(raw * 3)
        assert len(packets) == 3
        for packet in packets:
            _same(packet, general)
    for cut in _cuts(raw):
        (packet,) = _feed_cut(raw, case.version, cut)
        _same(packet, general)


def _packet(first: int, body: bytes) -> bytes:
    return bytes((first, len(body))) + body


def _bad_cases() -> Iterator[tuple[str, int, bytes]]:
    """(name, version, one whole packet) that break a rule: the reader must say what the general decoder says."""
    for version in (3, 4, 5):
        v5 = b"\x00" if version == 5 else b""  # the empty property block
        yield "publish-qos3", version, _packet(0x36, b"\x00\x01a\x00\x01" + v5 + b"x")
        yield "publish-qos0-dup", version, _packet(0x38, b"\x00\x01a" + v5 + b"x")
        yield "publish-pid0", version, _packet(0x32, b"\x00\x01a\x00\x00" + v5 + b"x")
        yield "publish-empty-topic", version, _packet(0x30, b"\x00\x00" + v5 + b"x")
        yield "publish-plus", version, _packet(0x30, b"\x00\x03a/+" + v5 + b"x")
        yield "publish-hash", version, _packet(0x30, b"\x00\x01#" + v5 + b"x")
        yield "publish-bad-utf8", version, _packet(0x30, b"\x00\x01\xff" + v5 + b"x")
        yield "publish-nul", version, _packet(0x30, b"\x00\x03a\x00b" + v5 + b"x")
        yield "publish-topic-past-end", version, _packet(0x30, b"\x00\x09a" + v5)
        yield "publish-pid-past-end", version, _packet(0x32, b"\x00\x01a\x00")
        for cls in ACKS:
            first = cls.type << 4 | (2 if cls is PubRel else 0)
            name = cls.__name__
            yield f"{name}-pid0", version, _packet(first, b"\x00\x00")
            yield f"{name}-flags", version, _packet(first ^ 2 if cls is PubRel else first | 1, b"\x00\x05")
            yield f"{name}-short", version, _packet(first, b"\x00")
            yield f"{name}-trailing", version, _packet(first, b"\x00\x05\x00\x00" + v5)
            if version == 5:
                yield f"{name}-code", version, _packet(first, b"\x00\x05" + (b"\x10" if cls is PubComp else b"\x93"))
    yield "publish-v5-unknown-property", 5, _packet(0x30, b"\x00\x01a\x02\xff\x00x")
    yield "publish-v5-alias-0", 5, _packet(0x30, b"\x00\x01a\x03\x23\x00\x00x")
    yield "publish-v5-empty-topic-no-alias", 5, _packet(0x30, b"\x00\x00\x02\x01\x00x")
    yield "publish-v5-props-past-end", 5, _packet(0x30, b"\x00\x01a\x09\x01")


BAD_CASES = list(_bad_cases())


@pytest.mark.parametrize(("name", "version", "raw"), BAD_CASES, ids=[f"v{c[1]}-{c[0]}" for c in BAD_CASES])
def test_rule_breaks_the_reader_reports_as_the_general_decoder(name: str, version: int, raw: bytes) -> None:
    general = _general(raw, version)
    assert isinstance(general, RemoteProtocolError)
    lenient = _general(raw, version, strict=False)
    (tolerant,) = PacketReader(version, strict=False).feed(raw)
    _same(tolerant, lenient)
    good = encode(PubAck(9), version)
    try:
        packets = PacketReader(version).feed(good + raw)
    except RemoteProtocolError as err:
        _same(err, general)
        assert err.packets == [PubAck(9)]
    else:
        assert packets[0] == PubAck(9)
        _same(packets[1], general)
    for cut in _cuts(raw):
        (tolerant,) = _feed_cut(raw, version, cut, strict=False)
        _same(tolerant, lenient)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("cls", ACKS)
def test_bare_acknowledgements_take_the_general_decoders_answer(version: int, cls: type) -> None:
    for pid in (1, 255, 256, 0x1234, 65535):
        raw = encode(cls(pid), version)
        assert len(raw) == 4
        general = _general(raw, version)
        assert general == cls(pid)
        for packet in PacketReader(version).feed(raw * 3):
            _same(packet, general)
        for cut in _cuts(raw * 2):
            for packet in _feed_cut(raw * 2, version, cut):
                _same(packet, general)
        if version == 5:  # reason code 0 written out: the general decoder, the same packet
            _same(PacketReader(5).feed(bytes((raw[0], 3)) + raw[2:] + b"\x00")[0], general)


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("first", [0x30, 0x32, 0x40, 0x50, 0x62, 0x70])
def test_a_remaining_length_longer_than_needed(version: int, first: int) -> None:
    # 0x82 0x00 for 2: the fast paths take one-byte lengths only; 5.0 refuses the long form (1.5.5), 3.x reads it.
    if first >> 4 == 3:  # PUBLISH: topic, packet identifier (QoS 1), property block (5.0)
        body = b"\x00\x01a" + (b"\x00\x05" if first & 6 else b"") + (b"\x00" if version == 5 else b"")
    else:
        body = b"\x00\x05"
    raw = bytes((first, 0x80 | len(body), 0)) + body
    general = _general(raw, version)
    assert not isinstance(general, RemoteProtocolError)
    if version < 5:
        assert PacketReader(version).feed(raw) == [general]
        return
    with pytest.raises(RemoteProtocolError, match="remaining length is not minimally encoded") as err:
        PacketReader(version).feed(raw)
    assert err.value.packet == general


# --- the connections' shortcuts -------------------------------------------------------------------------------


def _connected_client(version: int) -> tuple[ClientConnection, PacketReader]:
    client = ClientConnection("c1", version=version)
    client.connect()
    reader = PacketReader()
    (connect,) = reader.feed(client.data_to_send(0.0))
    assert isinstance(connect, Connect)
    client.receive_data(encode(ConnAck(), version), 0.0)
    client.events()
    return client, reader


@pytest.mark.parametrize("version", [3, 4, 5])
def test_client_leading_pubacks_give_the_general_paths_events(version: int) -> None:
    """ClientConnection.receive_data takes plain PUBACKs at the start of a read itself; a read that starts with
    anything else (here a PINGRESP) goes through the reader and the general handler."""
    acks = [PubAck(2), PubAck(1), PubAck(3)]
    tails: list[list[Any]] = [[], [PubRel(9)], [Publish("t", b"m", 1, packet_id=4)], [PubAck(3)]]  # the last: unknown
    for tail in tails:
        data = b"".join(encode(p, version) for p in acks + tail)
        fast, _ = _connected_client(version)
        general, _ = _connected_client(version)
        for c in (fast, general):
            for n in range(3):
                c.publish(f"t/{n}", b"x", 1, context=n)
            c.data_to_send(0.0)
        fast.receive_data(data, 1.0)
        general.receive_data(encode(PingResp(), version) + data, 1.0)
        fast_events, general_events = fast.events(), general.events()
        assert general_events[0] == PongReceived()
        assert fast_events == general_events[1:]
        assert fast_events[0] == Acknowledged([1, 0, 2])  # one event for the read's plain PUBACKs, in order
        assert (fast.state, fast.data_to_send(1.0)) == (general.state, general.data_to_send(1.0))
        for cut in range(1, len(data)):  # split reads: the cut ack, and all after it, take the general path
            split, _ = _connected_client(version)
            for n in range(3):
                split.publish(f"t/{n}", b"x", 1, context=n)
            split.data_to_send(0.0)
            split.receive_data(data[:cut], 1.0)
            split.receive_data(data[cut:], 1.0)
            assert split.events() == fast_events
            assert split.state == fast.state


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("qos", [1, 2])
@pytest.mark.parametrize("subscribed", [False, True])
@pytest.mark.parametrize("size_limited", [False, True])
def test_broker_acknowledgements_are_the_encoders(version: int, qos: int, subscribed: bool, size_limited: bool) -> None:
    """BrokerCore writes PUBACK / PUBREC bytes by hand (taken, no subscribers in 5.0, dropped as too big)."""
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(message_size_limit=10 if size_limited else 0)))
    if subscribed:
        sub = broker.open("127.0.0.1:2", 0.0)
        broker.receive(sub, encode(Connect("sub", protocol_version=version)), 0.0)
        broker.receive(sub, encode(Subscribe(1, (Subscription("x/#", 0),)), version), 0.0)
    conn = broker.open("127.0.0.1:1", 0.0)
    broker.receive(conn, encode(Connect("pub", protocol_version=version)), 0.0)
    conn.out.clear()
    for pid in (1, 300, 65535):
        broker.receive(conn, encode(Publish("x/y", b"p" * 20, qos, False, False, pid), version), 0.0)
        out = bytes(conn.out)
        conn.out.clear()
        if size_limited:
            code = 0x97 if version == 5 else 0
        else:
            code = 0x10 if version == 5 and not subscribed and qos == 1 else 0
        expected = encode((PubAck if qos == 1 else PubRec)(pid, code), version)
        assert out == expected
        if qos == 2:
            broker.receive(conn, encode(PubRel(pid), version), 0.0)
            conn.out.clear()


@pytest.mark.parametrize("version", [3, 4, 5])
def test_broker_qos2_answers_are_the_encoders(version: int) -> None:
    """BrokerCore writes PUBREL (to a subscriber's PUBREC) and PUBCOMP (to a publisher's PUBREL) by hand, and a
    PUBCOMP ends the flow and sends what waited for the window; an unknown identifier and a failed PUBREC still take
    the general path (5.0: PUBCOMP 0x92; no PUBREL)."""
    # A window of 1 towards the subscriber: 3.x the broker's max_inflight, 5.0 its own Receive Maximum (the broker's
    # would limit the publisher's unreleased QoS 2 messages too).
    broker = BrokerCore(BrokerConfig(sys_interval=0, limits=Limits(max_inflight=1 if version < 5 else 0)))
    sub = broker.open("127.0.0.1:2", 0.0)
    window = Properties(receive_maximum=1) if version == 5 else EMPTY_PROPERTIES
    broker.receive(sub, encode(Connect("sub", properties=window, protocol_version=version)), 0.0)
    broker.receive(sub, encode(Subscribe(1, (Subscription("x/#", 2),)), version), 0.0)
    sub.out.clear()
    pub = broker.open("127.0.0.1:1", 0.0)
    broker.receive(pub, encode(Connect("pub", protocol_version=version)), 0.0)
    pub.out.clear()
    reader = PacketReader(version)
    session = sub.session
    assert session is not None
    for pid in (1, 300, 65535):
        both = encode(Publish("x/y", b"a", 2, False, False, pid), version)
        both += encode(Publish("x/y", b"b", 2, False, False, pid - 1 or 2), version)
        broker.receive(pub, both, 0.0)
        pub.out.clear()
        (first,) = reader.feed(bytes(sub.out))  # the second waits for the window (1)
        sub.out.clear()
        assert isinstance(first, Publish) and first.packet_id is not None
        broker.receive(sub, encode(PubRec(first.packet_id), version), 0.0)
        assert bytes(sub.out) == encode(PubRel(first.packet_id), version)
        sub.out.clear()
        broker.receive(sub, encode(PubComp(first.packet_id), version), 0.0)
        (second,) = reader.feed(bytes(sub.out))  # the flow ended: the window let the queued one go
        sub.out.clear()
        assert isinstance(second, Publish) and second.payload == b"b" and second.packet_id is not None
        assert first.packet_id not in session.outgoing
        if version == 5:  # a failed PUBREC ends the flow, no PUBREL
            broker.receive(sub, encode(PubRec(second.packet_id, 0x80), version), 0.0)
            assert not sub.out and second.packet_id not in session.outgoing
        else:
            broker.receive(sub, encode(PubRec(second.packet_id), version), 0.0)
            broker.receive(sub, encode(PubComp(second.packet_id), version), 0.0)
            sub.out.clear()
        for released in (pid, pid - 1 or 2):
            broker.receive(pub, encode(PubRel(released), version), 0.0)
            assert bytes(pub.out) == encode(PubComp(released), version)
            pub.out.clear()
        broker.receive(pub, encode(PubRel(pid), version), 0.0)  # released already: unknown now
        assert bytes(pub.out) == encode(PubComp(pid, 0x92 if version == 5 else 0), version)
        pub.out.clear()
    assert not sub.closed and not pub.closed


# --- fast construction ----------------------------------------------------------------------------------------

RECORDS: list[tuple[type, tuple[Any, ...]]] = [
    (Publish, ("a/b", b"x", 1, True, True, 7, Properties(content_type="c"))),
    (Publish, ("a/b", b"", 0, False, False, None, EMPTY_PROPERTIES)),
    (Connect, ("id", True, 60, "u", b"p", None, EMPTY_PROPERTIES, 5, "MQTT", False)),
    *((cls, (5, 0x10, Properties(reason_string="r"))) for cls in ACKS),
    *((cls, (65535, 0, EMPTY_PROPERTIES)) for cls in ACKS),
    (PublishAcknowledged, (3, 0, object(), EMPTY_PROPERTIES)),
]


@pytest.mark.parametrize(("cls", "args"), RECORDS, ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(RECORDS)])
def test_fast_constructor_builds_what_the_constructor_builds(cls: type, args: tuple[Any, ...]) -> None:
    fast, ordinary = fast_constructor(cls)(*args), cls(*args)
    assert type(fast) is cls and fast == ordinary and hash(fast) == hash(ordinary) and repr(fast) == repr(ordinary)
    assert [getattr(fast, f) for f in fields(cls)] == list(args)
    with pytest.raises(FrozenInstanceError):
        setattr(fast, fields(cls)[0], args[0])


# --- the same, property-based ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([3, 4, 5]).flatmap(lambda v: st.tuples(st.just(v), S.publishes(v))), st.integers(1, 10_000))
def test_any_publish_takes_both_paths_alike(case: tuple[int, Publish], cut: int) -> None:
    version, p = case
    raw = encode(p, version)
    assert encode_publish(p, version) == raw
    general = _general(raw, version)
    assert general == p
    for packet in PacketReader(version).feed(raw * 3):
        _same(packet, general)
    (packet,) = _feed_cut(raw, version, min(cut, len(raw) - 1))
    _same(packet, general)
    if not p.dup and p.topic and p.properties.topic_alias is None:
        message = Message(p.topic, p.payload, 2, False, p.properties, None, 0.0)
        assert message.wire(version, p.qos, p.retain, p.packet_id, None) == raw


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([3, 4, 5]), st.binary(min_size=2, max_size=40))
def test_any_bytes_after_a_publish_or_ack_header_get_the_general_answer(version: int, tail: bytes) -> None:
    # First bytes the fast paths look at (PUBLISH of each QoS and flag, the four acknowledgements), any body.
    for first in (0x30, 0x31, 0x32, 0x33, 0x34, 0x38, 0x3A, 0x3C, 0x36, 0x40, 0x50, 0x62, 0x70):
        raw = bytes((first, len(tail))) + tail
        (fast,) = PacketReader(version, strict=False).feed(raw)
        _same(fast, _general(raw, version, strict=False))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([3, 4, 5]), st.binary(min_size=2, max_size=40), st.integers(1, 6))
def test_a_broker_reader_gives_plain_acks_as_ints_standing_for_the_general_packet(
    version: int, tail: bytes, cut: int
) -> None:
    # The broker's reader (plain_acks): a bare acknowledgement comes back as plain_ack(first, packet id), any other
    # packet as the general decoder's; in any chunking.
    for first in (0x40, 0x50, 0x62, 0x70, 0x32):
        raw = bytes((first, len(tail))) + tail
        reader = PacketReader(version, strict=False, plain_acks=True)
        got = reader.feed(raw[:cut]) + reader.feed(raw[cut:])
        (fast,) = got
        general = _general(raw, version, strict=False)
        if type(fast) is int:
            assert first != 0x32 and len(tail) == 2 and tail != b"\0\0"
            assert fast == first << 16 | int.from_bytes(tail, "big")
            fast = plain_ack_packet(fast)
        _same(fast, general)


FORWARD_PAYLOADS = [b"", b"x" * 64, b"y" * 200, b"z" * 20_000]  # 1, 2, 3 bytes of remaining length


# --- the broker's direct forwarding of a plain QoS 0 message (BrokerCore._forward) -------------------------------


def _subscriber(broker: BrokerCore, client_id: str, version: int, *filters: str, sid: int = 0) -> ServerConnection:
    conn = broker.open(f"127.0.0.1:{len(broker.connections) + 1}", 0.0)
    broker.receive(conn, encode(Connect(client_id, protocol_version=version), version), 0.0)
    props = Properties(subscription_identifier=sid) if sid else EMPTY_PROPERTIES
    subs = tuple(Subscription(f, 1, no_local=f.endswith("/own")) for f in filters)
    if subs:
        broker.receive(conn, encode(Subscribe(1, subs, props), version), 0.0)
    conn.out.clear()
    return conn


@pytest.mark.parametrize("sub_version", [3, 4, 5])
@pytest.mark.parametrize("pub_version", [4, 5])
def test_forwarded_bytes_equal_the_general_path(
    sub_version: int, pub_version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = ("a/b", "säure/€/x", "t" * 300)
    # Two brokers: one where each message matches one subscription (forwarded), one where it matches two of the
    # same client (merged by the general path, which builds a Message).
    fast, slow = BrokerCore(BrokerConfig(sys_interval=0)), BrokerCore(BrokerConfig(sys_interval=0))
    direct = _subscriber(fast, "sub", sub_version, *topics)
    general = _subscriber(slow, "sub", sub_version, *topics, "#")
    publishers = {fast: _subscriber(fast, "pub", pub_version), slow: _subscriber(slow, "pub", pub_version)}
    if inspect.isfunction(BrokerCore.receive):  # pure Python: check that the fast broker really builds no Message
        built: list[str] = []
        monkeypatch.setattr(publishing_module, "Message", lambda *args: built.append("Message") or Message(*args))
    counted = ("messages_sent", "bytes_sent", "publish_sent_qos", "publish_sent_bytes_qos", "messages_received")

    def figures(broker: BrokerCore) -> list[object]:
        return [copy.copy(getattr(broker.stats, name)) for name in counted]

    before = {fast: figures(fast), slow: figures(slow)}  # (their SUBACKs differ)
    for topic in topics:
        for payload in FORWARD_PAYLOADS:
            for broker in (fast, slow):
                broker.receive(publishers[broker], encode(Publish(topic, payload), pub_version), 1.0)
            assert bytes(direct.out) == bytes(general.out) == encode(Publish(topic, payload), sub_version)
            direct.out.clear()
            general.out.clear()
    for name, a0, a1, b0, b1 in zip(counted, before[fast], figures(fast), before[slow], figures(slow), strict=True):
        if isinstance(a0, list):
            assert [y - x for x, y in zip(a0, a1, strict=True)] == [y - x for x, y in zip(b0, b1, strict=True)], name  # type: ignore[arg-type]
        else:
            assert a1 - a0 == b1 - b0, name  # type: ignore[operator]
    if inspect.isfunction(BrokerCore.receive):
        assert built == ["Message"] * len(topics) * 4  # the slow broker's, none of the fast one's


@pytest.mark.parametrize("case", ["subscription identifier", "no local", "packet size", "retained", "offline"])
def test_messages_the_forwarding_leaves_to_the_general_path(case: str) -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    sid = 7 if case == "subscription identifier" else 0
    sub = _subscriber(broker, "sub", 5, "x/own" if case == "no local" else "x/y", sid=sid)
    if case == "packet size":
        sub.client_max_packet_size = 20
    pub = sub if case == "no local" else _subscriber(broker, "pub", 5)
    topic = "x/own" if case == "no local" else "x/y"
    if case == "offline":
        broker.connection_lost(sub, 1.0)
    broker.receive(pub, encode(Publish(topic, b"p" * 30, retain=case == "retained"), 5), 1.0)
    got = PacketReader(5).feed(bytes(sub.out))
    if case == "subscription identifier":
        assert [p.properties.subscription_identifiers for p in got] == [(7,)]
    elif case in ("no local", "offline"):
        assert got == []
    elif case == "packet size":
        assert got == [] and broker.stats.dropped_too_large == 1
    else:
        assert [(p.payload, p.retain) for p in got] == [(b"p" * 30, False)]


def test_forwarded_fan_out_equals_the_general_path() -> None:
    # Three subscribers of each protocol level; in the slow broker one of them has a second, overlapping
    # subscription, which sends the whole message through the general path.
    fast, slow = BrokerCore(BrokerConfig(sys_interval=0)), BrokerCore(BrokerConfig(sys_interval=0))
    subs = {
        broker: [
            _subscriber(broker, f"s{v}{i}", v, "f/x", *(["f/#"] if broker is slow and i == 0 else []))
            for v in (3, 4, 5)
            for i in range(3)
        ]
        for broker in (fast, slow)
    }
    for broker in (fast, slow):
        broker.receive(_subscriber(broker, "pub", 4), encode(Publish("f/x", b"m" * 100), 4), 1.0)
    for a, b in zip(subs[fast], subs[slow], strict=True):
        assert bytes(a.out) == bytes(b.out) == encode(Publish("f/x", b"m" * 100), a.version)
    assert fast.stats.publish_sent_qos == slow.stats.publish_sent_qos
