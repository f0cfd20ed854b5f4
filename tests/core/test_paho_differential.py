"""paho-mqtt as an independent oracle for the codec, in both directions.

paho 2.x builds its packets inside `paho.mqtt.client.Client` and writes them to the socket returned by
`Client._create_socket()`; it reads in `loop_read()` and reports through its callbacks. Each test gives a
paho client one end of a `socket.socketpair()` (no network: the test is the broker at the other end, and every
read is non-blocking or bounded by a timeout), then:

* paho -> us: asks paho to send something (connect, publish, subscribe, ...), reads the bytes paho wrote, and
  checks that our decoder gives back exactly what paho was asked to send, field by field (and that re-encoding
  gives paho's bytes back where the encoding is canonical);
* us -> paho: writes our encoding of a packet to paho and checks what paho's callbacks report (`on_connect`,
  `on_message`, `on_subscribe`, `on_unsubscribe`, `on_publish`, `on_disconnect`), and what paho answers.

What paho's client cannot carry (AUTH, the reason codes and properties of PUBREC/PUBREL) is checked with paho's
own parsing pieces: `paho.mqtt._packet` and the `Properties`/`ReasonCode` classes. paho is imported only here.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import paho.mqtt.client as paho_client
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from paho.mqtt import _packet as paho_packet
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)
from mqtt_cli.core.properties import PROPERTY_TABLE, WILL, Properties, PropertyId, encode_properties
from mqtt_cli.core.reader import PacketReader, decode
from mqtt_cli.core.reasons import REASONS_BY_PACKET
from mqtt_cli.core.records import fields, replace

from . import strategies as S

TIMEOUT = 5.0  # seconds: the bound on any blocking socket operation

# paho's property parser rejects U+FEFF in strings ("[MQTT-1.5.4-3] U+FEFF in UTF-8 data"), although 1.5.4 says
# it is a valid character that a receiver MUST NOT skip or strip: strings we send to paho leave it out.
PAHO_FORBID = "\ufeff"

# MQTT_HYPOTHESIS_SCALE=20 multiplies every example count, for a long bug hunt.
SCALE = int(os.environ.get("MQTT_HYPOTHESIS_SCALE", "1"))


def examples(n: int) -> int:
    return n * SCALE


PAHO = settings(deadline=None, max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
SLOW_DATA = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]

# Property identifier -> paho's attribute name ("Maximum QoS" -> "MaximumQoS").
PAHO_NAMES = {pid: name.replace(" ", "") for name, pid in PahoProperties(PacketTypes.PUBLISH).names.items()}


# paho refuses to set (and so to unpack) a Maximum Packet Size above 268435455; 5.0 3.1.2.11.4 and 3.2.2.3.6
# allow any non-zero Four Byte Integer (a limit above the largest possible packet just means no limit).
PAHO_MAX = {PropertyId.MAXIMUM_PACKET_SIZE: 268_435_455}


def paho_can_carry(packet: Any) -> bool:
    """Whether paho accepts the property values of `packet` (and of its will)."""
    blocks = [getattr(packet, "properties", Properties())]
    if isinstance(packet, Connect) and packet.will is not None:
        blocks.append(packet.will.properties)
    return all(value <= PAHO_MAX.get(pid, value) for props in blocks for pid, value in props)


def paho_type(packet_type: int) -> int:
    return PacketTypes.WILLMESSAGE if packet_type == WILL else packet_type


def to_paho(props: Properties, packet_type: int) -> PahoProperties | None:
    """Our properties as a paho Properties (None when empty, as paho's API takes them)."""
    if not props:
        return None
    out = PahoProperties(paho_type(packet_type))
    for pid, value in props:
        setattr(out, PAHO_NAMES[pid], value)  # paho appends repeated user properties and subscription ids
    return out


def from_paho(props: PahoProperties | None) -> Properties:
    """paho's properties as ours (in paho's order: by identifier, repeated ones in the order received)."""
    if props is None:
        return Properties()
    items: list[tuple[int, Any]] = []
    for pid, name in sorted(PAHO_NAMES.items()):
        if not hasattr(props, name):
            continue
        value = getattr(props, name)
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, bytearray):
                v = bytes(v)
            elif isinstance(v, list):
                v = tuple(v)
            items.append((pid, v))
    return Properties(items)


def paho_knows(packet_type: int, code: int) -> bool:
    """Whether paho's reason code table has `code` for `packet_type` (it cannot parse or build the others)."""
    names = ReasonCode.names.get(code, {})
    return any(packet_type in types for types in names.values())


def header_len(data: bytes) -> int:
    i = 1
    while data[i] & 0x80:
        i += 1
    return i + 1


def assert_same_fields(decoded: Any, expected: Any) -> None:
    """Field-by-field comparison, so that a failure names the field."""
    assert type(decoded) is type(expected)
    for name in fields(expected):
        got, want = getattr(decoded, name), getattr(expected, name)
        if hasattr(want, "__record_fields__"):
            assert_same_fields(got, want)
        else:
            assert got == want, f"{type(expected).__name__}.{name}: decoded {got!r}, paho was asked {want!r}"


# --- a paho client on a socketpair ---------------------------------------------------------------------------------


class PahoPeer:
    """A paho Client whose socket is one end of a socketpair; the test holds the other end (the "broker")."""

    def __init__(self, version: int, *, client_id: str = "paho", clean_session: bool | None = None) -> None:
        self.version = version
        self.broker, client_end = socket.socketpair()
        self.broker.settimeout(TIMEOUT)
        client_end.settimeout(TIMEOUT)  # paho sets it non-blocking anyway
        self._client_end = client_end
        if version < 5 and clean_session is None:
            clean_session = True
        self.client = paho_client.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=clean_session,
            protocol=MQTTProtocolVersion(version),
            reconnect_on_failure=False,
        )
        # The transport hook: connect() calls _create_socket() and writes CONNECT to what it returns.
        self.client._create_socket = lambda: client_end  # type: ignore[method-assign]
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        self.log: list[str] = []
        self.read_errors: list[MQTTErrorCode] = []
        c = self.client
        c.on_connect = lambda _c, _u, *args: self.events.append(("connect", args))
        c.on_message = lambda _c, _u, *args: self.events.append(("message", args))
        c.on_subscribe = lambda _c, _u, *args: self.events.append(("subscribe", args))
        c.on_unsubscribe = lambda _c, _u, *args: self.events.append(("unsubscribe", args))
        c.on_publish = lambda _c, _u, *args: self.events.append(("publish", args))
        c.on_disconnect = lambda _c, _u, *args: self.events.append(("disconnect", args))
        c.on_log = lambda _c, _u, _level, text: self.log.append(text)

    def close(self) -> None:
        self.broker.close()
        self._client_end.close()

    def connect(self, **kwargs: Any) -> bytes:
        """paho's connect(); returns the CONNECT bytes it wrote."""
        kwargs.setdefault("keepalive", 60)
        self.client.connect("localhost", **kwargs)
        return self.sent()

    def connected(self, **kwargs: Any) -> None:
        """connect() and a CONNACK accepting it, so that paho is in its connected state."""
        self.connect(**kwargs)
        self.receive(encode(ConnAck(), self.version))
        assert self.take("connect"), self.log
        assert self.client.is_connected()

    def sent(self) -> bytes:
        """Every byte paho has written so far (it writes synchronously; what it could not write it retries)."""
        out = bytearray()
        for _ in range(10_000):
            if self.client.want_write():
                self.client.loop_write()
            readable, _, _ = select.select([self.broker], [], [], 0)
            if not readable:
                if self.client.want_write():
                    continue
                break
            chunk = self.broker.recv(1 << 20)
            if not chunk:
                break  # paho closed its end (after DISCONNECT)
            out += chunk
        return bytes(out)

    def sent_packets(self) -> list[Any]:
        return PacketReader(self.version).feed(self.sent())

    def receive(self, data: bytes) -> None:
        """Writes `data` to paho and lets it read every packet in it."""
        self.broker.sendall(data)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            sock = self.client.socket()
            if sock is None:
                return  # paho closed the connection
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return
            rc = self.client.loop_read()
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                self.read_errors.append(rc)
                return
        raise AssertionError("paho did not read everything in time")

    def take(self, name: str) -> list[tuple[Any, ...]]:
        """The arguments of the callbacks `name` called since the last take, oldest first."""
        found = [args for kind, args in self.events if kind == name]
        self.events = [e for e in self.events if e[0] != name]
        return found


@contextmanager
def paho_peer(version: int, **kwargs: Any) -> Iterator[PahoPeer]:
    peer = PahoPeer(version, **kwargs)
    try:
        yield peer
    finally:
        peer.close()


# --- paho -> us: CONNECT -------------------------------------------------------------------------------------------


def send_connect_with_paho(packet: Connect) -> bytes:
    """Has paho send `packet` (as far as paho's API can express it); returns paho's bytes."""
    version = packet.protocol_version
    clean_session = packet.clean_start if version < 5 else None
    with paho_peer(version, client_id=packet.client_id, clean_session=clean_session) as peer:
        c = peer.client
        if packet.username is not None:
            c.username_pw_set(packet.username, packet.password)  # type: ignore[arg-type]  # bytes work too
        if packet.will is not None:
            will = packet.will
            c.will_set(will.topic, will.payload, will.qos, will.retain, to_paho(will.properties, WILL))
        if packet.bridge:
            c.enable_bridge_mode()
        kwargs: dict[str, Any] = {"keepalive": packet.keepalive}
        if version == 5:
            kwargs.update(clean_start=packet.clean_start, properties=to_paho(packet.properties, 1))
        return peer.connect(**kwargs)


def paho_expressible(packet: Connect) -> Connect:
    # paho sends a password only after a user name (5.0 allows one alone).
    if packet.username is None and packet.password is not None:
        return replace(packet, password=None)
    return packet


@settings(PAHO, max_examples=examples(150), suppress_health_check=SLOW_DATA)
@given(S.versions.flatmap(S.connects).map(paho_expressible).filter(paho_can_carry))
def test_paho_connect_decodes_to_what_paho_was_asked(packet: Connect) -> None:
    data = send_connect_with_paho(packet)
    decoded = decode(data)  # the reader learns the level from the CONNECT itself
    assert_same_fields(decoded, packet)
    # paho writes properties by identifier; in that order our encoder gives paho's bytes back exactly.
    assert encode(decoded, decoded.protocol_version) == data


@pytest.mark.parametrize("version", [3, 4, 5])
def test_paho_connect_with_everything(version: int) -> None:
    will_props = Properties(
        will_delay_interval=10, payload_format_indicator=1, message_expiry_interval=3600,
        content_type="text/plain", response_topic="replies/x", correlation_data=b"\x00\x01",
        user_properties=[("a", "1"), ("a", "2"), ("b", "")],
    ) if version == 5 else Properties()  # fmt: skip
    props = Properties(
        session_expiry_interval=0xFFFFFFFF, receive_maximum=20, maximum_packet_size=1 << 20,
        topic_alias_maximum=10, request_response_information=1, request_problem_information=0,
        authentication_method="SCRAM-SHA-1", authentication_data=b"\xff" * 3, user_properties=[("k", "v")],
    ) if version == 5 else Properties()  # fmt: skip
    packet = Connect(
        client_id="client-é",
        clean_start=False,
        keepalive=65535,
        username="user",
        password=b"\x00pass\xff",
        will=Will("last/will", b"adieu", 2, True, will_props),
        properties=props,
        protocol_version=version,
    )
    data = send_connect_with_paho(packet)
    assert_same_fields(decode(data), packet)
    assert encode(decode(data), version) == data


def test_paho_connect_bridge_flag() -> None:
    packet = Connect("bridge", protocol_version=4, bridge=True)
    data = send_connect_with_paho(packet)
    assert data[8] == 0x84  # mosquitto's bridge bit on the protocol level
    assert decode(data) == packet


# --- paho -> us: PUBLISH, SUBSCRIBE, UNSUBSCRIBE, DISCONNECT, PINGREQ ----------------------------------------------


@settings(PAHO, max_examples=examples(150), suppress_health_check=SLOW_DATA)
@given(S.versions.flatmap(lambda v: st.tuples(st.just(v), S.publishes(v))))
def test_paho_publish_decodes_to_what_paho_was_asked(vp: tuple[int, Publish]) -> None:
    version, packet = vp
    with paho_peer(version) as peer:
        peer.connect()
        info = peer.client.publish(
            packet.topic, packet.payload, packet.qos, packet.retain, to_paho(packet.properties, 3)
        )
        assert info.rc == MQTTErrorCode.MQTT_ERR_SUCCESS
        data = peer.sent()
    # paho picks the packet identifier (and never sets DUP on a first send).
    expected = replace(packet, dup=False, packet_id=info.mid if packet.qos else None)
    decoded = decode(data, version)
    assert_same_fields(decoded, expected)
    assert encode(decoded, version) == data


def test_paho_publish_with_every_property() -> None:
    props = Properties(
        payload_format_indicator=1, message_expiry_interval=60, topic_alias=3, response_topic="r/1",
        correlation_data=bytes(range(256)), content_type="application/json",
        user_properties=[("z", "1"), ("a", "2"), ("z", "3")], subscription_identifiers=[1, 268_435_455, 128],
    )  # fmt: skip
    packet = Publish("", b'{"x": 1}', qos=2, retain=True, properties=props)  # empty topic + topic alias
    with paho_peer(5) as peer:
        peer.connect()
        info = peer.client.publish("", packet.payload, 2, True, to_paho(props, 3))
        data = peer.sent()
    assert_same_fields(decode(data, 5), replace(packet, packet_id=info.mid))


@settings(PAHO, max_examples=examples(100), suppress_health_check=SLOW_DATA)
@given(S.versions.flatmap(lambda v: st.tuples(st.just(v), S.subscribes(v))))
def test_paho_subscribe_decodes_to_what_paho_was_asked(vp: tuple[int, Subscribe]) -> None:
    version, packet = vp
    with paho_peer(version) as peer:
        peer.connect()
        if version == 5:
            topics: list[Any] = [
                (s.topic_filter, SubscribeOptions(s.qos, s.no_local, s.retain_as_published, s.retain_handling))
                for s in packet.subscriptions
            ]
        else:
            topics = [(s.topic_filter, s.qos) for s in packet.subscriptions]
        rc, mid = peer.client.subscribe(topics, properties=to_paho(packet.properties, 8))
        assert rc == MQTTErrorCode.MQTT_ERR_SUCCESS
        data = peer.sent()
    decoded = decode(data, version)
    assert_same_fields(decoded, replace(packet, packet_id=mid))
    assert encode(decoded, version) == data


@settings(PAHO, max_examples=examples(80), suppress_health_check=SLOW_DATA)
@given(S.versions.flatmap(lambda v: st.tuples(st.just(v), S.unsubscribes(v))))
def test_paho_unsubscribe_decodes_to_what_paho_was_asked(vp: tuple[int, Unsubscribe]) -> None:
    version, packet = vp
    with paho_peer(version) as peer:
        peer.connect()
        rc, mid = peer.client.unsubscribe(list(packet.topic_filters), properties=to_paho(packet.properties, 10))
        assert rc == MQTTErrorCode.MQTT_ERR_SUCCESS
        data = peer.sent()
    decoded = decode(data, version)
    assert_same_fields(decoded, replace(packet, packet_id=mid))
    assert encode(decoded, version) == data


@settings(PAHO, max_examples=examples(80), suppress_health_check=SLOW_DATA)
@given(S.disconnects(5, forbid=PAHO_FORBID), st.booleans())
def test_paho_disconnect_decodes_to_what_paho_was_asked(packet: Disconnect, bare: bool) -> None:
    with paho_peer(5) as peer:
        peer.connected()
        if bare and packet == Disconnect():
            peer.client.disconnect()  # no reason code at all: the two-byte form
        else:
            reason = ReasonCode(PacketTypes.DISCONNECT, identifier=packet.reason_code)
            peer.client.disconnect(reason, to_paho(packet.properties, 14))
        data = peer.sent()
    assert_same_fields(decode(data, 5), packet)


@pytest.mark.parametrize("version", [3, 4])
def test_paho_disconnect_3x(version: int) -> None:
    with paho_peer(version) as peer:
        peer.connected()
        peer.client.disconnect()
        assert peer.sent() == encode(Disconnect(), version) == b"\xe0\x00"


@pytest.mark.parametrize("version", [3, 4, 5])
def test_paho_pingreq_and_our_pingresp(version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    with paho_peer(version) as peer:
        peer.connected(keepalive=1)
        later = time.monotonic() + 100
        monkeypatch.setattr(paho_client, "time_func", lambda: later)  # the keepalive has long expired
        peer.client.loop_misc()
        assert peer.sent_packets() == [PingReq()]
        assert peer.client._ping_t == later  # paho waits for a PINGRESP
        peer.receive(encode(PingResp(), version))
        assert peer.client._ping_t == 0, peer.log  # ... and got it
        assert not peer.read_errors


@pytest.mark.parametrize("version", [3, 4, 5])
def test_our_pingreq_gets_a_pingresp_from_paho(version: int) -> None:
    # Not something a broker sends, but paho answers it: our PINGREQ read by paho, paho's PINGRESP read by us.
    with paho_peer(version) as peer:
        peer.connected()
        peer.receive(encode(PingReq(), version))
        assert peer.sent_packets() == [PingResp()]


# --- us -> paho: CONNACK -------------------------------------------------------------------------------------------

V3_CONNACK_NAMES = {
    0: "Success",
    1: "Unsupported protocol version",
    2: "Client identifier not valid",
    3: "Server unavailable",
    4: "Bad user name or password",
    5: "Not authorized",
}


def _paho_can_take_connack(vc: tuple[int, ConnAck]) -> bool:
    version, ack = vc
    if version == 5:
        return paho_knows(2, ack.reason_code)
    # 3.1.1 return code 1 makes paho retry at 3.1 (a new connection) instead of reporting it.
    return not (version == 4 and ack.reason_code == 1)


@settings(PAHO, max_examples=examples(100), suppress_health_check=SLOW_DATA)
@given(
    S.versions.flatmap(lambda v: st.tuples(st.just(v), S.connacks(v, forbid=PAHO_FORBID)))
    .filter(_paho_can_take_connack)
    .filter(lambda vc: paho_can_carry(vc[1]))
)
def test_paho_reads_our_connack(vc: tuple[int, ConnAck]) -> None:
    version, ack = vc
    with paho_peer(version) as peer:
        peer.connect()
        peer.receive(encode(ack, version))
        [(flags, reason, props)] = peer.take("connect")
        assert flags.session_present == ack.session_present
        if version == 5:
            assert reason.value == ack.reason_code
            assert from_paho(props) == ack.properties
        else:
            assert reason.getName() == V3_CONNACK_NAMES[ack.reason_code]
        assert peer.client.is_connected() == (ack.reason_code == 0)


# --- us -> paho: PUBLISH and the QoS 1/2 flows ---------------------------------------------------------------------


def _check_message(message: Any, packet: Publish, version: int) -> None:
    assert message.topic == packet.topic
    assert message.payload == packet.payload
    assert message.qos == packet.qos
    assert message.retain == packet.retain
    assert message.dup == packet.dup
    assert message.mid == (packet.packet_id or 0)
    if version == 5:
        assert from_paho(message.properties) == packet.properties
    else:
        assert message.properties is None


@settings(PAHO, max_examples=examples(150), suppress_health_check=SLOW_DATA)
@given(
    S.versions.flatmap(lambda v: st.tuples(st.just(v), S.publishes(v, forbid=PAHO_FORBID))),
    st.data(),
)
def test_paho_reads_our_publish(vp: tuple[int, Publish], data: st.DataObject) -> None:
    """Our PUBLISH reaches paho's on_message intact; paho's PUBACK/PUBREC/PUBCOMP come back as we expect."""
    version, packet = vp
    with paho_peer(version) as peer:
        peer.connected()
        peer.receive(encode(packet, version))
        assert not peer.read_errors, peer.log
        pid = packet.packet_id
        if packet.qos == 0:
            assert peer.sent() == b""
        elif packet.qos == 1:
            assert peer.sent_packets() == [PubAck(pid)]
        else:
            assert peer.sent_packets() == [PubRec(pid)]
            assert peer.take("message") == []  # delivered on PUBREL (paho's choice of method B, 4.3.3)
            pubrel = data.draw(S.pubacks(version, PubRel, forbid=PAHO_FORBID), label="pubrel")
            peer.receive(encode(replace(pubrel, packet_id=pid), version))
            assert peer.sent_packets() == [PubComp(pid)]
        [(message,)] = peer.take("message")
        _check_message(message, packet, version)


@settings(PAHO, max_examples=examples(100), suppress_health_check=SLOW_DATA)
@given(
    S.versions.flatmap(
        lambda v: st.tuples(
            st.just(v),
            S.qos_levels.filter(bool),
            S.pubacks(v, PubAck, forbid=PAHO_FORBID),
            S.pubacks(v, PubRec, forbid=PAHO_FORBID),
            S.pubacks(v, PubComp, forbid=PAHO_FORBID),
        )
    )
)
def test_paho_reads_our_acknowledgements(case: tuple[int, int, PubAck, PubRec, PubComp]) -> None:
    """paho publishes; our PUBACK, or PUBREC then PUBCOMP, complete the flow with reason codes and properties."""
    version, qos, puback, pubrec, pubcomp = case
    with paho_peer(version) as peer:
        peer.connected()
        info = peer.client.publish("t", b"x", qos)
        mid = info.mid
        [sent] = peer.sent_packets()
        assert sent == Publish("t", b"x", qos, packet_id=mid)
        if qos == 1:
            final = replace(puback, packet_id=mid)
            peer.receive(encode(final, version))
        else:
            peer.receive(encode(replace(pubrec, packet_id=mid), version))
            assert peer.sent_packets() == [PubRel(mid)]
            assert peer.take("publish") == []
            final = replace(pubcomp, packet_id=mid)
            peer.receive(encode(final, version))
        [(got_mid, reason, props)] = peer.take("publish")
        assert got_mid == mid
        assert reason.value == final.reason_code
        assert from_paho(props) == final.properties
        assert info.is_published()
        assert not peer.read_errors, peer.log


# --- us -> paho: SUBACK, UNSUBACK, DISCONNECT ----------------------------------------------------------------------


@pytest.mark.parametrize(("acks", "callback"), [(S.subacks, "subscribe"), (S.unsubacks, "unsubscribe")])
@settings(PAHO, max_examples=examples(100), suppress_health_check=SLOW_DATA)
@given(data=st.data())
def test_paho_reads_our_suback_and_unsuback(acks: Any, callback: str, data: st.DataObject) -> None:
    version = data.draw(S.versions)
    ack: SubAck | UnsubAck = data.draw(acks(version, forbid=PAHO_FORBID))
    with paho_peer(version) as peer:
        peer.connected()
        peer.receive(encode(ack, version))
        [(mid, codes, props)] = peer.take(callback)
        assert mid == ack.packet_id
        assert [c.value for c in codes] == list(ack.reason_codes)
        assert from_paho(props) == ack.properties
        assert not peer.read_errors, peer.log


@settings(PAHO, max_examples=examples(100), suppress_health_check=SLOW_DATA)
@given(S.disconnects(5, forbid=PAHO_FORBID))
def test_paho_reads_our_disconnect(packet: Disconnect) -> None:
    with paho_peer(5) as peer:
        peer.connected()
        peer.receive(encode(packet, 5))
        [(flags, reason, props)] = peer.take("disconnect")
        assert flags.is_disconnect_packet_from_server
        assert reason.value == packet.reason_code
        assert from_paho(props) == packet.properties
        assert peer.client.socket() is None  # paho closed the connection, as it must


# --- paho's parsing pieces: acknowledgements, AUTH, property blocks ------------------------------------------------

_PAHO_DECODERS = {
    2: paho_packet.decode_connack,
    3: paho_packet.decode_publish,
    4: paho_packet.decode_puback,
    5: paho_packet.decode_pubrec,
    6: paho_packet.decode_pubrel,
    7: paho_packet.decode_pubcomp,
    9: paho_packet.decode_suback,
    11: paho_packet.decode_unsuback,
    14: paho_packet.decode_disconnect,
}


def paho_parse(data: bytes, version: int) -> Any:
    """paho's own parser (paho.mqtt._packet) on one packet of ours."""
    body = bytearray(data[header_len(data) :])
    return _PAHO_DECODERS[data[0] >> 4](data[0], body, MQTTProtocolVersion(version))


@settings(PAHO, max_examples=examples(150), suppress_health_check=SLOW_DATA)
@given(S.versions.flatmap(lambda v: st.tuples(st.just(v), S.pubacks(v, forbid=PAHO_FORBID))))
def test_paho_parses_our_acknowledgement_reason_codes_and_properties(vp: tuple[int, Any]) -> None:
    """PUBREC and PUBREL reason codes and properties never reach paho's callbacks: check paho's parser."""
    version, ack = vp
    parsed = paho_parse(encode(ack, version), version)
    assert parsed.mid == ack.packet_id
    assert parsed.reason.value == ack.reason_code
    assert parsed.reason.packetType == ack.type
    assert from_paho(parsed.properties) == ack.properties


@settings(PAHO, max_examples=examples(100), suppress_health_check=SLOW_DATA)
@given(S.auths(5, forbid=PAHO_FORBID))
def test_paho_parses_our_auth(packet: Auth) -> None:
    """paho's client does not handle AUTH at all; its ReasonCode and Properties classes read ours."""
    data = encode(packet, 5)
    assert data[0] == 0xF0
    body = data[header_len(data) :]
    if not body:
        assert packet == Auth()
        return
    reason = ReasonCode(PacketTypes.AUTH)
    reason.unpack(body)
    assert reason.value == packet.reason_code
    props = PahoProperties(PacketTypes.AUTH)
    props.unpack(body[1:])
    assert from_paho(props) == packet.properties


def test_paho_client_does_not_take_auth() -> None:
    """A documented limitation of paho 2.x (so the test above uses its parsing classes instead)."""
    with paho_peer(5) as peer:
        peer.connected()
        peer.receive(encode(Auth(0x18, Properties(authentication_method="m")), 5))
        assert peer.read_errors == [MQTTErrorCode.MQTT_ERR_PROTOCOL]


_PROPERTY_PACKETS = sorted({t for spec in PROPERTY_TABLE.values() for t in spec.packets})


@settings(PAHO, max_examples=examples(200), suppress_health_check=SLOW_DATA)
@given(st.sampled_from(_PROPERTY_PACKETS).flatmap(lambda t: st.tuples(st.just(t), S.properties(t, forbid=PAHO_FORBID))))
def test_property_blocks_match_paho_byte_for_byte(tp: tuple[int, Properties]) -> None:
    """Any packet's property block: paho packs it (by identifier) to the bytes we write in that order, and
    paho's unpack of our block gives the same properties."""
    packet_type, props = tp
    assume(paho_can_carry(ConnAck(properties=props)))
    by_id = Properties(sorted(props.items, key=lambda item: item[0]))
    ours = encode_properties(by_id, packet_type)
    theirs = to_paho(props, packet_type)
    assert ours == (theirs.pack() if theirs is not None else b"\x00")
    parsed = PahoProperties(paho_type(packet_type))
    _, length = parsed.unpack(bytearray(encode_properties(props, packet_type)))
    assert length == len(ours)
    assert from_paho(parsed) == props


# --- where paho and we disagree ------------------------------------------------------------------------------------


def test_reason_code_tables_differ_from_paho_only_where_the_spec_does() -> None:
    """Our REASONS_BY_PACKET against paho's ReasonCode table; the differences are pinned and explained.

    * CONNACK 0x99 (Payload format invalid): in the CONNACK table of 5.0 (3.2.2.2) for a will payload that is
      not UTF-8; paho does not know it there (it cannot parse such a CONNACK).
    DISCONNECT 0x8C (Bad authentication method) is listed for DISCONNECT in the overview table 2.4 but not in
    the DISCONNECT table 3.14.2.1; we accept it as paho (which follows 2.4) can send it.
    """
    differences = set()
    for ptype, codes in REASONS_BY_PACKET.items():
        paho = {code for code in ReasonCode.names if paho_knows(ptype, code)}
        differences |= {("ours only", ptype, code) for code in codes - paho}
        differences |= {("paho only", ptype, code) for code in paho - codes}
    assert differences == {("ours only", 2, 0x99)}


def test_u_feff_is_kept_although_paho_refuses_it() -> None:
    """[MQTT-1.5.4-3]: U+FEFF MUST NOT be skipped or stripped; paho's property parser rejects it outright."""
    props = Properties(reason_string="\ufeffok")
    packet = Disconnect(0x80, props)
    assert decode(encode(packet, 5), 5) == packet
    with pytest.raises(Exception, match="FEFF"):
        PahoProperties(PacketTypes.DISCONNECT).unpack(bytearray(encode_properties(props, 14)))


def test_paho_sends_plain_acknowledgements_only() -> None:
    """paho acknowledges with the two-byte forms: its PUBACK/PUBREC/PUBCOMP carry no reason code or property,
    so the 5.0 forms with them are only checked in the other direction (paho reading ours)."""
    with paho_peer(5) as peer:
        peer.connected()
        peer.receive(encode(Publish("t", b"", 1, packet_id=9, properties=Properties(user_properties=[("a", "b")])), 5))
        data = peer.sent()
    assert data == b"\x40\x02\x00\x09"
    assert decode(data, 5) == PubAck(9)
