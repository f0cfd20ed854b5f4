"""Raw packet sequences over TCP against `mqtt serve` and Debian's mosquitto 2.0.11, side by side.

Naming as in tests/core/test_broker_conformance.py: `MQTT_3_1_2_8` in a test's name is [MQTT-3.1.2-8]. Where the
two brokers are meant to answer alike, one test runs against both (`any_broker`); where we follow the spec and
mosquitto does not, the test says so and checks each.
"""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

import pytest

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import (
    ConnAck,
    Connect,
    Disconnect,
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
from mqtt_cli.core.wire import encode_vbi
from tests.brokers import Broker

pytestmark = pytest.mark.interop
DEADLINE = 10.0


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + encode_vbi(len(body)) + body


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


class Raw:
    """One TCP connection speaking packets, with a deadline on every wait."""

    def __init__(self, broker: Broker, version: int = 4) -> None:
        self.sock = socket.create_connection((broker.host, broker.port), timeout=DEADLINE)
        self.version = version
        self.reader = PacketReader(version, strict=False)
        self.pending: list[Any] = []
        self.closed = False

    def send(self, packet: Any) -> None:
        self.send_raw(encode(packet, packet.protocol_version if isinstance(packet, Connect) else self.version))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read(self, timeout: float) -> bool:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.pending += self.reader.feed(data)
        return True

    def next(self, timeout: float = DEADLINE) -> Any:
        """The next packet; None when the connection closed or nothing came in time."""
        end = time.monotonic() + timeout
        while not self.pending:
            left = end - time.monotonic()
            if left <= 0 or self.closed or not self._read(left):
                return None
        return self.pending.pop(0)

    def quiet(self, seconds: float = 0.5) -> list[Any]:
        """Whatever arrives within `seconds` (the connection may close meanwhile)."""
        end = time.monotonic() + seconds
        while not self.closed and time.monotonic() < end:
            self._read(max(0.01, end - time.monotonic()))
        got, self.pending = self.pending, []
        return got

    def until_closed(self, timeout: float = DEADLINE) -> list[Any]:
        end = time.monotonic() + timeout
        while not self.closed and time.monotonic() < end:
            self._read(max(0.01, end - time.monotonic()))
        assert self.closed, "the broker kept the connection open"
        got, self.pending = self.pending, []
        return got

    def connect(self, client_id: str, **kw: Any) -> ConnAck:
        self.send(Connect(client_id, protocol_version=self.version, **kw))
        ack = self.next()
        assert isinstance(ack, ConnAck) and ack.reason_code == 0, ack
        return ack

    def subscribe(self, flt: str, qos: int = 0) -> None:
        self.send(Subscribe(1, (Subscription(flt, qos),)))
        assert isinstance(self.next(), SubAck)

    def kill(self) -> None:
        """Gone without DISCONNECT: the broker sees the connection reset."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.sock.close()
        self.closed = True

    def close(self) -> None:
        self.sock.close()


def persistent(version: int) -> dict[str, Any]:
    if version == 5:
        return {"clean_start": False, "properties": Properties(session_expiry_interval=300)}
    return {"clean_start": False}


# --- #2: QoS 2 from a client across reconnects ----------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("how", ["reconnect", "take-over"])
def test_pubrel_is_always_answered_across_reconnects_MQTT_4_3_3_11(any_broker: Broker, version: int, how: str) -> None:
    cid = uid("q2")
    c = Raw(any_broker, version)
    c.connect(cid, **persistent(version))
    c.send(Publish("conf/q2", b"x", 2, packet_id=5))
    assert c.next() == PubRec(5)
    if how == "reconnect":
        c.close()
        time.sleep(0.2)
    c2 = Raw(any_broker, version)
    assert c2.connect(cid, **persistent(version)).session_present
    c2.send(Publish("conf/q2", b"x", 2, dup=True, packet_id=5))
    assert c2.next() == PubRec(5)
    c2.send(PubRel(5))
    assert c2.next() == PubComp(5)
    c2.close()
    time.sleep(0.2)
    c3 = Raw(any_broker, version)
    c3.connect(cid, **persistent(version))
    c3.send(PubRel(5))
    comp = c3.next()
    assert isinstance(comp, PubComp) and comp.packet_id == 5
    # 5.0: the identifier is unknown by now (0x92, 3.7.2.1); mosquitto answers 0x00, which the spec does not allow.
    expected = 0x92 if version == 5 and any_broker.kind == "ours" else 0x00
    assert comp.reason_code == expected
    c3.send(Disconnect(0, Properties(session_expiry_interval=0)) if version == 5 else Disconnect())
    c3.close()


@pytest.mark.parametrize("version", [4, 5])
def test_a_subscriber_owing_a_pubrec_across_a_reconnect_gets_pubrel_for_both_of_its_pubrecs(
    any_broker: Broker, version: int
) -> None:
    """A subscriber reconnects owing the PUBREC of a QoS 2 delivery: it sends it right after CONNACK, while the
    broker re-sends the PUBLISH (DUP), which it answers with PUBREC again. Both get a PUBREL; the connection stays."""
    cid, topic = uid("owed"), uid("conf/owed")
    sub = Raw(any_broker, version)
    sub.connect(cid, **persistent(version))
    sub.subscribe(topic, 2)
    pub = Raw(any_broker, version)
    pub.connect(uid("p"))
    pub.send(Publish(topic, b"x", 2, packet_id=1))
    assert pub.next() == PubRec(1)
    pub.send(PubRel(1))  # (mosquitto delivers at PUBREL)
    assert pub.next() == PubComp(1)
    delivered = sub.next()
    assert isinstance(delivered, Publish) and delivered.packet_id is not None
    pid = delivered.packet_id
    sub.kill()
    time.sleep(0.2)
    sub = Raw(any_broker, version)
    sub.send(Connect(cid, protocol_version=version, **persistent(version)))
    sub.send(PubRec(pid))  # owed, sent before the CONNACK is read
    assert isinstance(sub.next(), ConnAck)
    got = sub.quiet(0.5)
    resent = [p for p in got if isinstance(p, Publish)]
    assert resent and resent[0].dup and resent[0].packet_id == pid
    sub.send(PubRec(pid))  # the answer to the re-sent PUBLISH
    got += sub.quiet(0.5)
    assert [p for p in got if isinstance(p, PubRel)] == [PubRel(pid), PubRel(pid)]
    assert not sub.closed
    sub.send(PubComp(pid))
    assert sub.quiet(0.3) == [] and not sub.closed
    sub.send(Disconnect(0, Properties(session_expiry_interval=0)) if version == 5 else Disconnect())
    sub.close()
    pub.close()


# --- #3, #4: wills on take-over and will delay ------------------------------------------------------------------


def _with_will(broker: Broker, cid: str, topic: str, version: int, expiry: int, delay: int | None = None) -> Raw:
    will_props = Properties(will_delay_interval=delay) if delay is not None else Properties()
    c = Raw(broker, version)
    props = Properties(session_expiry_interval=expiry) if version == 5 else Properties()
    c.connect(cid, clean_start=expiry == 0, will=Will(topic, b"gone", 0, False, will_props), properties=props)
    return c


@pytest.mark.parametrize("version", [4, 5])
def test_take_over_of_a_kept_session_does_not_publish_the_will_MQTT_3_1_4_3(any_broker: Broker, version: int) -> None:
    topic = uid("conf/will")
    watcher = Raw(any_broker, 5)
    watcher.connect(uid("w"))
    watcher.subscribe(topic)
    cid = uid("c")
    old = _with_will(any_broker, cid, topic, version, expiry=300)
    new = Raw(any_broker, version)
    new.connect(cid, **persistent(version))
    assert old.until_closed() in ([], [Disconnect(0x8E)])
    assert watcher.quiet(0.5) == []
    # Now the new connection starts clean: the session ends, so the will of the one taken over goes out.
    old = _with_will(any_broker, cid, topic, version, expiry=300)
    newer = Raw(any_broker, version)
    newer.connect(cid, clean_start=True)
    got = watcher.next(3.0)
    assert isinstance(got, Publish) and got.topic == topic
    for c in (old, new, newer, watcher):
        c.close()


def test_a_will_delay_of_3_s_publishes_after_3_s_MQTT_3_1_2_8(any_broker: Broker) -> None:
    topic = uid("conf/will")
    watcher = Raw(any_broker, 5)
    watcher.connect(uid("w"))
    watcher.subscribe(topic)
    c = _with_will(any_broker, uid("c"), topic, 5, expiry=10, delay=3)
    start = time.monotonic()
    c.kill()
    got = watcher.next(8.0)
    elapsed = time.monotonic() - start
    assert isinstance(got, Publish) and got.topic == topic
    assert 2.5 <= elapsed <= 5.0, elapsed
    watcher.close()


@pytest.mark.parametrize("clean", [False, True])
def test_a_reconnect_within_the_will_delay_cancels_it_MQTT_3_1_3_9(any_broker: Broker, clean: bool) -> None:
    topic = uid("conf/will")
    watcher = Raw(any_broker, 5)
    watcher.connect(uid("w"))
    watcher.subscribe(topic)
    cid = uid("c")
    c = _with_will(any_broker, cid, topic, 5, expiry=10, delay=2)
    c.kill()
    time.sleep(0.5)
    again = Raw(any_broker, 5)
    again.connect(cid, clean_start=clean, properties=Properties(session_expiry_interval=10))
    assert watcher.quiet(3.0) == []
    again.close()
    watcher.close()


# --- #5: a message over the client's Maximum Packet Size --------------------------------------------------------


def test_a_message_too_large_for_a_client_is_skipped_not_stalled_MQTT_3_1_2_25(ours: Broker) -> None:
    """Ours only: mosquitto 2.0.11 sends nothing more at QoS 1/2 to that client after such a message (the stall
    the issue describes)."""
    from mqtt_cli.core.packets import PubAck

    any_broker = ours

    topic = uid("conf/big")
    sub = Raw(any_broker, 5)
    sub.connect(uid("s"), properties=Properties(maximum_packet_size=64, receive_maximum=2))
    sub.subscribe(topic, 2)
    pub = Raw(any_broker, 5)
    pub.connect(uid("p"))
    sequence = [(q, b"." * 100) for q in (1, 2, 1, 2, 1, 2)] + [(q, b"small %d" % q) for q in (1, 2, 0, 1, 2)]
    for pid, (qos, payload) in enumerate(sequence, 1):
        pub.send(Publish(topic, payload, qos, packet_id=pid if qos else None))
        if qos == 2:  # mosquitto passes a QoS 2 message on at PUBREL
            assert pub.next() == PubRec(pid)
            pub.send(PubRel(pid))
            assert pub.next() == PubComp(pid)
        elif qos == 1:
            assert isinstance(pub.next(), PubAck)
    got = []
    while len(got) < 5:
        p = sub.next(5.0)
        if isinstance(p, PubRel):
            sub.send(PubComp(p.packet_id))
            continue
        assert isinstance(p, Publish), (p, got)
        got.append(p.payload)
        if p.qos == 1:
            sub.send(PubAck(p.packet_id))  # type: ignore[arg-type]
        elif p.qos == 2:
            sub.send(PubRec(p.packet_id))  # type: ignore[arg-type]
    assert got == [b"small 1", b"small 2", b"small 0", b"small 1", b"small 2"]
    for c in (sub, pub):
        c.close()


# --- #6: message expiry while the subscriber is offline -------------------------------------------------------


def test_queued_messages_expire_offline_and_carry_what_is_left_MQTT_3_3_2_5_MQTT_3_3_2_6(any_broker: Broker) -> None:
    from mqtt_cli.core.packets import PubAck

    topic = uid("conf/expire")
    cid = uid("s")
    sub = Raw(any_broker, 5)
    sub.connect(cid, properties=Properties(session_expiry_interval=300))
    sub.subscribe(topic, 2)
    sub.send(Disconnect())
    sub.close()
    pub = Raw(any_broker, 5)
    pub.connect(uid("p"))
    pub.send(Publish(topic, b"short", 1, packet_id=1, properties=Properties(message_expiry_interval=1)))
    assert isinstance(pub.next(), PubAck)
    pub.send(Publish(topic, b"long", 1, packet_id=2, properties=Properties(message_expiry_interval=60)))
    assert isinstance(pub.next(), PubAck)
    time.sleep(2.2)
    sub = Raw(any_broker, 5)
    assert sub.connect(cid, clean_start=False, properties=Properties(session_expiry_interval=0)).session_present
    got = sub.quiet(1.0)
    assert [p.payload for p in got] == [b"long"]
    assert 55 <= got[0].properties.message_expiry_interval <= 58
    for c in (sub, pub):
        c.close()


# --- #11: outgoing topic aliases ----------------------------------------------------------------------------------


def test_server_topic_aliases_MQTT_3_3_2_11(ours: Broker) -> None:
    """Ours only: mosquitto 2.0.11 never sends topic aliases (they are optional, 3.3.2.3.4)."""
    from mqtt_cli.core.packets import PubAck

    topic = uid("conf/alias")
    c = Raw(ours, 5)
    c.connect(uid("a"), properties=Properties(topic_alias_maximum=1))
    c.subscribe(topic, 2)
    for i in range(3):
        c.send(
            Publish(
                topic,
                b"topic alias %d" % i,
                1,
                packet_id=i + 1,
                properties=Properties(user_properties=[("user", "prop")]),
            )
        )
    got = []
    while len(got) < 3:
        p = c.next(5.0)
        if isinstance(p, Publish):
            got.append(p)
            c.send(PubAck(p.packet_id))  # type: ignore[arg-type]
    assert [(p.topic, p.properties.topic_alias) for p in got] == [(topic, 1), ("", 1), ("", 1)]
    assert all(p.properties.user_properties == (("user", "prop"),) for p in got)
    c.close()


# --- choices: what both brokers send, byte for byte --------------------------------------------------------------


def _v5_connect(client_id: str, flags: int = 0x02, props: bytes = b"\x00", rest: bytes = b"") -> bytes:
    return frame(0x10, s("MQTT") + bytes((5, flags, 0, 60)) + props + s(client_id) + rest)


@pytest.mark.parametrize(
    "connect",
    [
        _v5_connect("c", flags=0x03),  # reserved flag
        _v5_connect("c", props=b"\x02\x17\x02"),  # request problem information 2
        _v5_connect("c", flags=0x06, rest=b"\x00" + s("") + s("p")),  # empty will topic
        _v5_connect("c", flags=0x06, rest=b"\x00" + s("w/#") + s("p")),  # wildcard will topic
        _v5_connect("c\x01"),  # control character in the client id
        _v5_connect("c", flags=0x82, rest=s("u\x1f")),  # ... in the user name
        _v5_connect("c", flags=0x06, rest=b"\x00" + s("w\x7f") + s("p")),  # ... in the will topic
        frame(0x10, s("MQTT") + bytes((4, 0x06, 0, 60)) + s("c") + s("") + s("p")),  # 3.1.1, empty will topic
        frame(0x10, s("MQTT") + bytes((4, 0x02, 0, 60)) + s("c\x9f")),  # 3.1.1, control character
        frame(0x10, s("MQTTX") + bytes((4, 0x02, 0, 60)) + s("c")),  # not MQTT
        frame(0x10, s("") + bytes((4, 0x02, 0, 60)) + s("c")),
    ],
    ids=[
        "reserved-flag",
        "rpi-2",
        "empty-will-topic",
        "wildcard-will-topic",
        "ctrl-client-id",
        "ctrl-user-name",
        "ctrl-will-topic",
        "v4-empty-will-topic",
        "v4-ctrl-client-id",
        "protocol-name-long",
        "protocol-name-empty",
    ],
)
def test_a_broken_connect_is_closed_without_an_answer_like_mosquitto_MQTT_3_1_4_1(
    any_broker: Broker, connect: bytes
) -> None:
    c = Raw(any_broker, 5)
    c.send_raw(connect)
    assert c.until_closed() == []


@pytest.mark.parametrize("version", [4, 5])
def test_connack_and_disconnect_bytes_match_mosquitto(ours: Broker, mosq: Broker, version: int) -> None:
    """No Reason String, no User Property, the same properties in the same order."""
    seen = {}
    for broker in (ours, mosq):
        c = Raw(broker, version)
        c.send(Connect("same-id", protocol_version=version))
        c.sock.settimeout(DEADLINE)
        connack = c.sock.recv(100)
        c.send(Connect("same-id", protocol_version=version))  # a second CONNECT: a protocol error
        rest = b""
        while True:
            data = c.sock.recv(100)
            if not data:
                break
            rest += data
        seen[broker.kind] = (connack, rest)
    assert seen["ours"][0] == seen["mosquitto"][0]
    # 5.0: we send DISCONNECT 0x82 (a SHOULD of 4.13); mosquitto 2.0.11 closes without one.
    assert seen["ours"][1] == (b"\xe0\x01\x82" if version == 5 else b"")
    assert seen["mosquitto"][1] == b""


@pytest.mark.parametrize("version", [4, 5])
def test_qos2_pubrec_is_0_before_delivery_like_mosquitto(any_broker: Broker, version: int) -> None:
    c = Raw(any_broker, version)
    c.connect(uid("q2"))
    topic = uid("conf/nosub")
    c.send(Publish(topic, b"x", 2, packet_id=3))
    assert c.next() == PubRec(3)
    c.subscribe(topic, 2)
    c.send(Publish(topic, b"y", 2, packet_id=4))
    assert c.next() == PubRec(4)
    c.send(PubRel(4))
    got = c.quiet(1.0)
    assert PubComp(4) in got and any(isinstance(p, Publish) and p.payload == b"y" for p in got)
    c.close()


def test_receive_maximum_20_is_announced_like_mosquitto(any_broker: Broker) -> None:
    c = Raw(any_broker, 5)
    assert c.connect(uid("rm")).properties.receive_maximum == 20
    c.close()


def test_more_qos2_than_the_receive_maximum_is_0x93_MQTT_3_3_4_7(ours: Broker) -> None:
    """Ours only: mosquitto 2.0.11 answers the 21st with PUBREC 0x97 (quota exceeded), no DISCONNECT."""
    c = Raw(ours, 5)
    c.connect(uid("rm"))
    topic = uid("conf/rm")
    for pid in range(1, 21):
        c.send(Publish(topic, b"", 2, packet_id=pid))
        assert c.next() == PubRec(pid)
    c.send(Publish(topic, b"", 2, packet_id=21))
    assert c.until_closed() == [Disconnect(0x93)]


@pytest.mark.parametrize(
    "raw", [b"\x20\x02\x00\x00", b"\x90\x03\x00\x01\x00", b"\xb0\x02\x00\x01", b"\xd0\x00", b"\xd0\x01\x00"]
)
def test_packets_only_a_server_sends_are_a_protocol_error_MQTT_4_13_1_1(ours: Broker, raw: bytes) -> None:
    """Ours: DISCONNECT 0x82 and close. mosquitto 2.0.11 closes without DISCONNECT on CONNACK, SUBACK and UNSUBACK,
    and ignores a PINGRESP, with or without a body (the connection stays open)."""
    c = Raw(ours, 5)
    c.connect(uid("srv"))
    c.send_raw(raw)
    assert c.until_closed() == [Disconnect(0x82)]


@pytest.mark.parametrize("version", [4, 5])
def test_control_characters_in_topics_close_like_mosquitto(any_broker: Broker, version: int) -> None:
    pp = b"\x00" if version == 5 else b""
    for packet in (
        frame(0x82, b"\x00\x01" + pp + s("a\x01") + b"\x00"),
        frame(0xA2, b"\x00\x01" + pp + s("a\x1f")),
        frame(0x32, s("a\x7f") + b"\x00\x01" + pp + b"x"),
    ):
        c = Raw(any_broker, version)
        c.connect(uid("ctrl"))
        c.send_raw(packet)
        got = c.until_closed()
        assert got in ([], [Disconnect(0x81)]), got


@pytest.mark.parametrize("flt", ["a#", "+a", "a/#/b", ""])
@pytest.mark.parametrize("version", [4, 5])
def test_invalid_topic_filters_close_like_mosquitto_MQTT_4_7_1_1(any_broker: Broker, version: int, flt: str) -> None:
    pp = b"\x00" if version == 5 else b""
    for packet in (frame(0x82, b"\x00\x01" + pp + s(flt) + b"\x00"), frame(0xA2, b"\x00\x01" + pp + s(flt))):
        c = Raw(any_broker, version)
        c.connect(uid("flt"))
        c.send_raw(packet)
        assert c.until_closed() == ([Disconnect(0x81)] if version == 5 else [])
