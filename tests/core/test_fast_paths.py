"""Fast paths against the general paths they shortcut: Message.wire for messages without properties (framed by
hand, not by encode()), PacketReader.feed for short acknowledgements (not decoded by the general decoder), and
the broker's forwarding of a plain QoS 0 message to the one subscription it matched (no Message built)."""

from __future__ import annotations

import copy
import inspect

import pytest

from mqtt_cli.core import broker as broker_module
from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.codec import PacketReader, encode
from mqtt_cli.core.errors import RemoteProtocolError
from mqtt_cli.core.packets import Connect, PubAck, PubComp, Publish, PubRec, PubRel, Subscribe, Subscription
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties
from mqtt_cli.core.server import ServerConnection
from mqtt_cli.core.session import Message

TOPICS = ["a", "bench/0", "säure/€/x", "t" * 300]
PAYLOADS = [b"", b"x" * 64, b"y" * 200, b"z" * 20_000, b"w" * 2_100_000]  # 1, 2, 3 and 4 bytes of length


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("qos", [0, 1, 2])
@pytest.mark.parametrize("retain", [False, True])
def test_fast_path_equals_general_encoder(version: int, qos: int, retain: bool) -> None:
    for topic in TOPICS:
        for payload in PAYLOADS:
            message = Message(topic, payload, 1, False, EMPTY_PROPERTIES, "publisher", 0.0)
            pid = 513 if qos else None
            expected = encode(Publish(topic, payload, qos, retain, False, pid, EMPTY_PROPERTIES), version)
            assert message.wire(version, qos, retain, pid, None) == expected
            # Again from the cache, with another packet identifier spliced in.
            if qos:
                other = encode(Publish(topic, payload, qos, retain, False, 65535, EMPTY_PROPERTIES), version)
                assert message.wire(version, qos, retain, 65535, None) == other


def test_fast_path_decodes_back() -> None:
    message = Message("x/y", b"hello", 1, False, EMPTY_PROPERTIES, None, 0.0)
    reader = PacketReader(version=5)
    [packet] = reader.feed(message.wire(5, 1, True, 7, None))
    assert (packet.topic, packet.payload, packet.qos, packet.retain, packet.packet_id) == ("x/y", b"hello", 1, True, 7)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_short_acknowledgements_equal_general_decoder(version: int) -> None:
    for kind in (PubAck, PubRec, PubRel, PubComp):
        for pid in (1, 255, 256, 65535):
            raw = encode(kind(pid), version)
            assert len(raw) == 4
            fast = PacketReader(version=version).feed(raw * 3)
            assert fast == [kind(pid)] * 3
            assert all(type(p) is kind for p in fast)
            if version == 5:  # the same acknowledgement with its reason code written out takes the general decoder
                general = PacketReader(version=5).feed(bytes((raw[0], 3)) + raw[2:] + b"\x00")
                assert general == fast[:1]


@pytest.mark.parametrize("raw", [b"\x40\x02\x00\x00", b"\x60\x02\x00\x01", b"\x72\x02\x00\x01"])
def test_short_acknowledgements_the_fast_path_refuses(raw: bytes) -> None:
    # Identifier 0, PUBREL without its flags, PUBCOMP with flags: the general decoder's errors, as before.
    with pytest.raises(RemoteProtocolError):
        PacketReader(version=4).feed(raw)


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
        monkeypatch.setattr(broker_module, "Message", lambda *args: built.append("Message") or Message(*args))
    counted = ("messages_sent", "bytes_sent", "publish_sent_qos", "publish_sent_bytes_qos", "messages_received")

    def figures(broker: BrokerCore) -> list[object]:
        return [copy.copy(getattr(broker.stats, name)) for name in counted]

    before = {fast: figures(fast), slow: figures(slow)}  # (their SUBACKs differ)
    for topic in topics:
        for payload in PAYLOADS[:4]:
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
