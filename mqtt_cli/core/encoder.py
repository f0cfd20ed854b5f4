"""Encoding MQTT 3.1, 3.1.1 and 5.0 control packets: `encode(packet, version)`, and the parts of a PUBLISH for
callers that encode a topic once and frame many messages with it (`encode_topic_name`, `frame_publish`).

    data = encode(Publish("a/b", b"hi", qos=1, packet_id=7), version=5)

`encode` raises `LocalProtocolError` for a packet the protocol forbids. Decoding is decoder.py's, reading a
byte stream reader.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import LocalProtocolError
from .packets import (
    PACKET_NAMES,
    REQUIRED_FLAGS,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
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
)
from .properties import WILL, Properties, encode_properties
from .reasons import REASONS_BY_PACKET, V3_SUBACK_CODES
from .topics import topic_filter_error, topic_name_error
from .wire import MAX_VBI, encode_binary, encode_string, encode_vbi

__all__ = ["encode", "encode_publish", "encode_topic_name", "frame_publish", "max_publish_payload"]

_U16 = tuple(n.to_bytes(2, "big") for n in range(256))  # packet ids < 256 are common; the rest computed


def _u16(n: int) -> bytes:
    return _U16[n] if n < 256 else n.to_bytes(2, "big")


def _packet_id(pid: Any, what: str) -> bytes:
    if type(pid) is not int or not 0 < pid < 65536:
        raise LocalProtocolError(f"{what} needs a packet identifier in 1..65535, not {pid!r}")
    return _u16(pid)


def _check_reason(code: int, ptype: int, what: str) -> None:
    if code not in REASONS_BY_PACKET[ptype]:
        raise LocalProtocolError(f"reason code 0x{code:02X} is not allowed in {what}")


def _props(props: Properties, ptype: int, version: int, what: str) -> bytes:
    if version == 5:
        return encode_properties(props, ptype)
    if props:
        raise LocalProtocolError(f"{what} properties need MQTT 5.0 (this connection speaks level {version})")
    return b""


def _frame(first_byte: int, body: bytes) -> bytes:
    return bytes((first_byte,)) + encode_vbi(len(body)) + body


def _encode_connect(p: Connect, version: int) -> bytes:
    level = p.protocol_version
    if level not in (3, 4, 5):
        raise LocalProtocolError(f"CONNECT protocol_version must be 3, 4 or 5, not {level!r}")
    if p.protocol_name != ("MQIsdp" if level == 3 else "MQTT"):
        raise LocalProtocolError(f"CONNECT protocol name {p.protocol_name!r} does not go with level {level}")
    if not 0 <= p.keepalive <= 65535:
        raise LocalProtocolError(f"keepalive {p.keepalive} is outside 0..65535")
    flags = 0x02 if p.clean_start else 0
    will = p.will
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise LocalProtocolError(f"will QoS must be 0, 1 or 2, not {will.qos!r}")
        if err := topic_name_error(will.topic):
            raise LocalProtocolError(f"will {err}")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if p.username is not None:
        flags |= 0x80
    if p.password is not None:
        if p.username is None and level < 5:
            raise LocalProtocolError("a password needs a user name before MQTT 5.0")
        flags |= 0x40
    if level == 3 and not p.client_id:
        # 3.1 has no zero-length client identifiers (3.1.1 introduced them).
        raise LocalProtocolError("MQTT 3.1 needs a client identifier of 1 to 23 characters")
    if p.properties.authentication_data is not None and p.properties.authentication_method is None:
        raise LocalProtocolError("CONNECT authentication data needs an authentication method")
    parts = [
        encode_string(p.protocol_name, "protocol name"),
        bytes((level | (0x80 if p.bridge else 0), flags)),
        _u16(p.keepalive),
    ]
    if level == 5:
        parts.append(encode_properties(p.properties, 1))
    elif p.properties:
        raise LocalProtocolError("CONNECT properties need MQTT 5.0")
    parts.append(encode_string(p.client_id, "client identifier"))
    if will is not None:
        if level == 5:
            parts.append(encode_properties(will.properties, WILL))
        elif will.properties:
            raise LocalProtocolError("will properties need MQTT 5.0")
        parts.append(encode_string(will.topic, "will topic"))
        parts.append(encode_binary(will.payload, "will payload"))
    if p.username is not None:
        parts.append(encode_string(p.username, "user name"))
    if p.password is not None:
        parts.append(encode_binary(p.password, "password"))
    return _frame(0x10, b"".join(parts))


def _encode_connack(p: ConnAck, version: int) -> bytes:
    code = p.reason_code
    if version == 5:
        _check_reason(code, 2, "CONNACK")
    elif not 0 <= code <= 5:
        raise LocalProtocolError(f"MQTT 3.x CONNACK return code must be 0..5, not {code}")
    if p.session_present and code:
        raise LocalProtocolError("CONNACK refusing a connection cannot have session present set")
    if p.session_present and version == 3:
        raise LocalProtocolError("MQTT 3.1 CONNACK has no session present flag (it came with 3.1.1)")
    body = bytes((1 if p.session_present else 0, code)) + _props(p.properties, 2, version, "CONNACK")
    return _frame(0x20, body)


def encode_topic_name(topic: str) -> bytes:
    """A PUBLISH topic name as it goes on the wire: two length bytes and its UTF-8, checked (no wildcards, no
    NUL, encodable, at most 65535 bytes; emptiness is the caller's, it depends on the version)."""
    if "+" in topic or "#" in topic or "\x00" in topic:
        raise LocalProtocolError(f"PUBLISH {topic_name_error(topic)}")
    try:
        raw_topic = topic.encode()
    except UnicodeEncodeError:
        raise LocalProtocolError("PUBLISH topic name contains a lone surrogate, not encodable as UTF-8") from None
    if len(raw_topic) > 65535:
        raise LocalProtocolError(f"PUBLISH topic name is {len(raw_topic)} bytes long; the maximum is 65535")
    return len(raw_topic).to_bytes(2, "big") + raw_topic


def frame_publish(first: int, topic_name: bytes, packet_id: bytes, properties: bytes, payload: bytes) -> bytes:
    """A PUBLISH from its encoded parts: `first` the fixed header's first byte, `topic_name` as
    encode_topic_name() gives it, `packet_id` two bytes or none, `properties` the encoded block (5.0) or none.
    The parts are the caller's to have checked: a client sending many messages on one topic encodes the topic
    once."""
    length = len(topic_name) + len(packet_id) + len(properties) + len(payload)
    if length < 16_384:  # one or two bytes of remaining length: most messages
        head = bytes((first, length)) if length < 128 else bytes((first, (length & 0x7F) | 0x80, length >> 7))
    elif length > MAX_VBI:
        raise LocalProtocolError(f"PUBLISH of {length} bytes exceeds the maximum remaining length {MAX_VBI}")
    else:
        head = bytes((first,)) + encode_vbi(length)
    return b"".join((head, topic_name, packet_id, properties, payload))


def max_publish_payload(topic: str, qos: int, properties: Properties, version: int | None) -> int:
    """The largest payload a PUBLISH with this topic, QoS and properties can carry (the remaining length is at
    most MAX_VBI bytes); `version` None (not yet known): as 5.0, whose properties take room too."""
    header = len(encode_topic_name(topic)) + (2 if qos else 0)
    if version in (None, 5):
        header += len(encode_properties(properties, 3)) if properties.items else 1
    return MAX_VBI - header


def encode_publish(p: Publish, version: int) -> bytes:
    """encode() for a PUBLISH, without its dispatch: a client's hot path (version must be 3, 4 or 5)."""
    qos = p.qos
    topic_name = encode_topic_name(p.topic)
    first = 0x30 | (qos << 1)
    if p.retain:
        first |= 1
    if qos:
        if qos not in (1, 2):
            raise LocalProtocolError(f"PUBLISH QoS must be 0, 1 or 2, not {qos!r}")
        packet_id = p.packet_id
        if type(packet_id) is int and 0 < packet_id < 65536:
            pid = packet_id.to_bytes(2, "big")
        else:
            pid = _packet_id(packet_id, "PUBLISH QoS > 0")
        if p.dup:
            first |= 8
    else:
        if qos != 0:
            raise LocalProtocolError(f"PUBLISH QoS must be 0, 1 or 2, not {qos!r}")
        if p.packet_id is not None:
            raise LocalProtocolError("PUBLISH with QoS 0 has no packet identifier")
        if p.dup:
            raise LocalProtocolError("PUBLISH with QoS 0 cannot have DUP set")
        pid = b""
    if version == 5:
        props = encode_properties(p.properties, 3) if p.properties.items else b"\x00"
        if len(topic_name) == 2 and p.properties.get(0x23) is None:
            raise LocalProtocolError("PUBLISH with an empty topic name needs a topic alias")
    else:
        if p.properties.items:
            raise LocalProtocolError("PUBLISH properties need MQTT 5.0")
        if len(topic_name) == 2:
            raise LocalProtocolError("PUBLISH topic name is empty")
        props = b""
    return frame_publish(first, topic_name, pid, props, p.payload)


def _encode_ack(p: PubAck | PubRec | PubRel | PubComp, version: int) -> bytes:
    ptype = p.type
    name = PACKET_NAMES[ptype]
    pid = _packet_id(p.packet_id, name)
    first = (ptype << 4) | REQUIRED_FLAGS[ptype]
    if version == 5:
        code = p.reason_code
        if not p.properties.items:
            if code == 0:
                return bytes((first, 2)) + pid  # the short form (3.4.2.1)
            _check_reason(code, ptype, name)
            return bytes((first, 3)) + pid + bytes((code,))
        _check_reason(code, ptype, name)
        return _frame(first, pid + bytes((code,)) + encode_properties(p.properties, ptype))
    if p.reason_code or p.properties:
        raise LocalProtocolError(f"{name} reason codes and properties need MQTT 5.0")
    return bytes((first, 2)) + pid


def _encode_subscribe(p: Subscribe, version: int) -> bytes:
    pid = _packet_id(p.packet_id, "SUBSCRIBE")
    if not p.subscriptions:
        raise LocalProtocolError("SUBSCRIBE needs at least one topic filter")
    parts = [pid, _props(p.properties, 8, version, "SUBSCRIBE")]
    for sub in p.subscriptions:
        if err := topic_filter_error(sub.topic_filter):
            raise LocalProtocolError(f"SUBSCRIBE {err}")
        if sub.qos not in (0, 1, 2):
            raise LocalProtocolError(f"SUBSCRIBE QoS must be 0, 1 or 2, not {sub.qos!r}")
        if version == 5:
            if sub.retain_handling not in (0, 1, 2):
                raise LocalProtocolError(f"retain handling must be 0, 1 or 2, not {sub.retain_handling!r}")
            if sub.no_local and sub.topic_filter.startswith("$share/"):
                raise LocalProtocolError("no-local cannot be set on a shared subscription")
            options = sub.options
        else:
            if sub.no_local or sub.retain_as_published or sub.retain_handling:
                raise LocalProtocolError("subscription options other than QoS need MQTT 5.0")
            options = sub.qos
        parts.append(encode_string(sub.topic_filter, "topic filter"))
        parts.append(bytes((options,)))
    return _frame(0x82, b"".join(parts))


def _encode_suback(p: SubAck, version: int) -> bytes:
    pid = _packet_id(p.packet_id, "SUBACK")
    allowed = REASONS_BY_PACKET[9] if version == 5 else V3_SUBACK_CODES
    for code in p.reason_codes:
        if code not in allowed:
            raise LocalProtocolError(f"SUBACK code 0x{code:02X} is not allowed in MQTT level {version}")
    if not p.reason_codes:
        raise LocalProtocolError("SUBACK needs one reason code per topic filter")
    return _frame(0x90, pid + _props(p.properties, 9, version, "SUBACK") + bytes(p.reason_codes))


def _encode_unsubscribe(p: Unsubscribe, version: int) -> bytes:
    pid = _packet_id(p.packet_id, "UNSUBSCRIBE")
    if not p.topic_filters:
        raise LocalProtocolError("UNSUBSCRIBE needs at least one topic filter")
    parts = [pid, _props(p.properties, 10, version, "UNSUBSCRIBE")]
    for flt in p.topic_filters:
        if err := topic_filter_error(flt):
            raise LocalProtocolError(f"UNSUBSCRIBE {err}")
        parts.append(encode_string(flt, "topic filter"))
    return _frame(0xA2, b"".join(parts))


def _encode_unsuback(p: UnsubAck, version: int) -> bytes:
    pid = _packet_id(p.packet_id, "UNSUBACK")
    if version == 5:
        if not p.reason_codes:
            raise LocalProtocolError("MQTT 5.0 UNSUBACK needs one reason code per topic filter")
        for code in p.reason_codes:
            _check_reason(code, 11, "UNSUBACK")
        return _frame(0xB0, pid + encode_properties(p.properties, 11) + bytes(p.reason_codes))
    if p.reason_codes or p.properties:
        raise LocalProtocolError("UNSUBACK reason codes and properties need MQTT 5.0")
    return b"\xb0\x02" + pid


def _encode_pingreq(p: PingReq, version: int) -> bytes:
    return b"\xc0\x00"


def _encode_pingresp(p: PingResp, version: int) -> bytes:
    return b"\xd0\x00"


def _encode_disconnect_or_auth(p: Disconnect | Auth, version: int) -> bytes:
    ptype = p.type
    name = PACKET_NAMES[ptype]
    first = ptype << 4
    if version == 5:
        _check_reason(p.reason_code, ptype, name)
        if ptype == 15 and (p.reason_code or p.properties) and p.properties.authentication_method is None:
            # 3.15.2.2.2: only AUTH Success without properties may leave the method out.
            raise LocalProtocolError("AUTH needs an authentication method")
        if not p.properties.items:
            return bytes((first, 0)) if p.reason_code == 0 else bytes((first, 1, p.reason_code))
        return _frame(first, bytes((p.reason_code,)) + encode_properties(p.properties, ptype))
    if ptype == 15:
        raise LocalProtocolError("AUTH needs MQTT 5.0")
    if p.reason_code or p.properties:
        raise LocalProtocolError("DISCONNECT reason codes and properties need MQTT 5.0")
    return b"\xe0\x00"


_ENCODERS: dict[type, Callable[[Any, int], bytes]] = {
    Connect: _encode_connect,
    ConnAck: _encode_connack,
    Publish: encode_publish,
    PubAck: _encode_ack,
    PubRec: _encode_ack,
    PubRel: _encode_ack,
    PubComp: _encode_ack,
    Subscribe: _encode_subscribe,
    SubAck: _encode_suback,
    Unsubscribe: _encode_unsubscribe,
    UnsubAck: _encode_unsuback,
    PingReq: _encode_pingreq,
    PingResp: _encode_pingresp,
    Disconnect: _encode_disconnect_or_auth,
    Auth: _encode_disconnect_or_auth,
}


def encode(packet: Packet, version: int = 4) -> bytes:
    """The wire bytes of `packet` for a connection speaking protocol level `version` (3, 4 or 5).

    A CONNECT is encoded at its own `protocol_version`, whatever `version` says.
    """
    try:
        encoder = _ENCODERS[type(packet)]
    except KeyError:
        raise TypeError(f"not an MQTT packet: {packet!r}") from None
    if version not in (3, 4, 5):
        raise LocalProtocolError(f"protocol version must be 3, 4 or 5, not {version!r}")
    return encoder(packet, version)
