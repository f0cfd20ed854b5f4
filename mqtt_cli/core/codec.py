"""Encoding and incremental, strict decoding of MQTT 3.1, 3.1.1 and 5.0 control packets.

    data = encode(Publish("a/b", b"hi", qos=1, packet_id=7), version=5)
    reader = PacketReader()              # learns the version from the CONNECT it reads, or is told it
    for packet in reader.feed(chunk): ...

`encode` raises `LocalProtocolError` for a packet the protocol forbids. `PacketReader` raises
`RemoteProtocolError` subclasses carrying the 5.0 reason code to answer with; in tolerant mode
(`strict=False`, for `mqtt dump`) it returns those errors in line with the packets and goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from .errors import (
    LenientErrors,
    LocalProtocolError,
    MalformedPacket,
    PacketTooLarge,
    ProtocolError,
    RemoteProtocolError,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from .packets import (
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
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from .properties import (
    EMPTY_PROPERTIES,
    SEEN_PROPERTIES,
    WILL,
    Properties,
    decode_properties,
    encode_properties,
)
from .reasons import REASONS_BY_PACKET
from .records import fast_constructor, mutable_twin
from .topics import topic_filter_error, topic_name_error
from .wire import (
    MAX_VBI,
    encode_binary,
    encode_string,
    encode_vbi,
    read_binary,
    read_string,
    read_u16,
)

__all__ = ["PacketReader", "decode", "encode", "encode_publish", "encode_topic_name", "frame_publish"]

_NAMES = (
    "RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL", "PUBCOMP", "SUBSCRIBE",
    "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "AUTH",
)  # fmt: skip

# Fixed-header flags every packet but PUBLISH must carry (2.1.3).
_REQUIRED_FLAGS = (0, 0, 0, -1, 0, 0, 2, 0, 2, 0, 2, 0, 0, 0, 0, 0)

_V3_SUBACK_CODES = frozenset({0, 1, 2, 0x80})
_PING_REQ = PingReq()
_PING_RESP = PingResp()
_U16 = tuple(n.to_bytes(2, "big") for n in range(256))  # packet ids < 256 are common; the rest computed


def _u16(n: int) -> bytes:
    return _U16[n] if n < 256 else n.to_bytes(2, "big")


# --- encoding ----------------------------------------------------------------------------------------------


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
    name = _NAMES[ptype]
    pid = _packet_id(p.packet_id, name)
    first = (ptype << 4) | _REQUIRED_FLAGS[ptype]
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
    allowed = REASONS_BY_PACKET[9] if version == 5 else _V3_SUBACK_CODES
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
    name = _NAMES[ptype]
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


# --- decoding ----------------------------------------------------------------------------------------------
# Each decoder reads the body data[pos:end] of one framed packet. Breaks of a rule that still let the packet be
# read are collected in `errs` (the reader raises or returns them with the packet attached); a body that
# cannot be read raises MalformedPacket at once.

_Errs = list[RemoteProtocolError]


def _str(data: bytes, pos: int, end: int, what: str, errs: _Errs) -> tuple[str, int]:
    try:
        return read_string(data, pos, end, what)
    except MalformedPacket as exc:
        if type(errs) is not LenientErrors or pos + 2 > end:
            raise
        stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
        if stop > end:
            raise
        errs.append(exc)
        return str(data[pos + 2 : stop], "utf-8", "replace"), stop


def _check_pid(pid: int, name: str, errs: _Errs) -> None:
    if pid == 0:
        errs.append(ProtocolError(f"{name} has packet identifier 0 (it must be 1..65535)"))


def _check_end(pos: int, end: int, name: str, errs: _Errs) -> None:
    if pos != end:
        errs.append(MalformedPacket(f"{name} has {end - pos} unexpected bytes at its end (at byte {pos})"))


def _check_reason_code(code: int, ptype: int, errs: _Errs) -> None:
    if code not in REASONS_BY_PACKET[ptype]:
        errs.append(ProtocolError(f"reason code 0x{code:02X} is not allowed in {_NAMES[ptype]}"))


def _decode_connect(first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs) -> Connect:
    name, pos = _str(data, pos, end, "protocol name", errs)
    if pos >= end:
        raise MalformedPacket("CONNECT ends before its protocol level", protocol_name=name)
    raw_level = data[pos]
    pos += 1
    level = raw_level & 0x7F
    if (name, level) not in (("MQTT", 4), ("MQTT", 5), ("MQIsdp", 3)):
        unsupported = UnsupportedProtocolVersion(
            f"CONNECT asks for protocol {name!r} level {raw_level}; supported: MQIsdp 3, MQTT 4 and MQTT 5",
            protocol_name=name,
            protocol_level=level,
        )
        if type(errs) is not LenientErrors:
            raise unsupported
        # The tolerant reader's second try: read on, as Wireshark does (by the level byte; a level it does not
        # know as 3.1.1), so that the CONNECT is shown with its fields and this error first.
        errs.insert(0, unsupported)
    if pos + 3 > end:
        raise MalformedPacket(
            "CONNECT ends before its connect flags and keep alive", protocol_name=name, protocol_level=raw_level
        )
    cflags = data[pos]
    keepalive = (data[pos + 1] << 8) | data[pos + 2]
    pos += 3
    if cflags & 0x01 and level > 3:  # 3.1 left the bit unused without forbidding it (mosquitto accepts it)
        errs.append(MalformedPacket("CONNECT reserved flag (bit 0 of the connect flags) is set"))
    will_flag = cflags & 0x04
    will_qos = (cflags >> 3) & 3
    will_retain = bool(cflags & 0x20)
    if will_flag:
        if will_qos == 3:
            errs.append(MalformedPacket("CONNECT will QoS is 3"))
    elif will_qos or will_retain:
        errs.append(MalformedPacket("CONNECT has will QoS or will retain set without the will flag"))
    has_password = cflags & 0x40
    has_username = cflags & 0x80
    if has_password and not has_username and level < 5:
        errs.append(MalformedPacket("CONNECT has the password flag without the user name flag (MQTT 3.x)"))
    props = EMPTY_PROPERTIES
    if level == 5:
        props, pos = decode_properties(data, pos, end, 1, errs)
        if props.authentication_data is not None and props.authentication_method is None:
            errs.append(ProtocolError("CONNECT has authentication data without an authentication method"))
    client_id, pos = _str(data, pos, end, "client identifier", errs)
    will = None
    if will_flag:
        will_props = EMPTY_PROPERTIES
        if level == 5:
            will_props, pos = decode_properties(data, pos, end, WILL, errs)
        will_topic, pos = _str(data, pos, end, "will topic", errs)
        if err := topic_name_error(will_topic):
            errs.append(TopicNameInvalid(f"CONNECT will {err}"))
        will_payload, pos = read_binary(data, pos, end, "will payload")
        will = Will(will_topic, will_payload, will_qos, will_retain, will_props)
    username = password = None
    # 3.1 clients set the user name and password flags with the fields left out: mosquitto ignores the flags then.
    if has_username and not (level == 3 and pos == end):
        username, pos = _str(data, pos, end, "user name", errs)
    if has_password and not (level == 3 and pos == end):
        password, pos = read_binary(data, pos, end, "password")
    _check_end(pos, end, "CONNECT", errs)
    return _new_connect(  # as read: an empty protocol name stays empty
        client_id,
        bool(cflags & 0x02),
        keepalive,
        username,
        password,
        will,
        props,
        level,
        name,
        bool(raw_level & 0x80),
    )


_new_connect = fast_constructor(Connect)


def _decode_connack(first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs) -> ConnAck:
    if end - pos < 2:
        raise MalformedPacket(f"CONNACK is {end - pos} bytes long; it needs at least 2")
    ack_flags = data[pos]
    code = data[pos + 1]
    pos += 2
    if ack_flags & 0xFE:
        errs.append(MalformedPacket(f"CONNACK reserved acknowledge flags are set (0x{ack_flags:02X})"))
    props = EMPTY_PROPERTIES
    if version == 5:
        props, pos = decode_properties(data, pos, end, 2, errs)
        _check_reason_code(code, 2, errs)
    elif code > 5:
        errs.append(ProtocolError(f"CONNACK return code {code} is reserved (MQTT 3.x defines 0..5)"))
    session_present = bool(ack_flags & 1) and version != 3  # 3.1's first byte is unused: 3.1.1 added the flag
    if session_present and code:
        errs.append(ProtocolError("CONNACK refuses the connection but has session present set"))
    _check_end(pos, end, "CONNACK", errs)
    return ConnAck(session_present, code, props)


def _decode_publish(first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs) -> Publish:
    qos = (first >> 1) & 3
    topic, pos = _str(data, pos, end, "topic name", errs)
    pid = None
    if qos:
        pid, pos = read_u16(data, pos, end, "packet identifier")
        if qos == 3:
            errs.append(MalformedPacket("PUBLISH has QoS 3 (both QoS bits set)"))
        _check_pid(pid, "PUBLISH", errs)
    elif first & 8:
        errs.append(MalformedPacket("PUBLISH with QoS 0 has DUP set"))
    props = EMPTY_PROPERTIES
    if version == 5:
        props, pos = decode_properties(data, pos, end, 3, errs)
    if not topic:
        if version < 5:
            errs.append(TopicNameInvalid("PUBLISH topic name is empty"))
        elif props.topic_alias is None:
            errs.append(ProtocolError("PUBLISH topic name is empty and there is no topic alias"))
    elif "+" in topic or "#" in topic:
        errs.append(TopicNameInvalid(f"PUBLISH {topic_name_error(topic)}"))
    return _new_publish(topic, data[pos:end], qos, bool(first & 1), bool(first & 8), pid, props)


def _decode_ack(first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs) -> Any:
    ptype = first >> 4  # the caller passes the whole first byte to acknowledgements
    name = _NAMES[ptype]
    pid, pos = read_u16(data, pos, end, f"{name} packet identifier")
    _check_pid(pid, name, errs)
    code = 0
    props = EMPTY_PROPERTIES
    if version == 5 and pos < end:  # 5.0 may leave out the reason code (then 0) and the properties
        code = data[pos]
        pos += 1
        _check_reason_code(code, ptype, errs)
        if pos < end:
            props, pos = decode_properties(data, pos, end, ptype, errs)
    _check_end(pos, end, name, errs)
    return _ACK_CLASSES[ptype](pid, code, props)


_ACK_CLASSES: dict[int, Callable[..., Any]] = {
    4: fast_constructor(PubAck),
    5: fast_constructor(PubRec),
    6: fast_constructor(PubRel),
    7: fast_constructor(PubComp),
}
# First bytes of PUBACK, PUBREC, PUBREL, PUBCOMP with their required fixed-header flags.
_PLAIN_ACKS = frozenset({0x40, 0x50, 0x62, 0x70})


def _decode_subscribe(first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs) -> Subscribe:
    pid, pos = read_u16(data, pos, end, "SUBSCRIBE packet identifier")
    _check_pid(pid, "SUBSCRIBE", errs)
    props = EMPTY_PROPERTIES
    if version == 5:
        props, pos = decode_properties(data, pos, end, 8, errs)
    subs = []
    while pos < end:
        flt, pos = _str(data, pos, end, "topic filter", errs)
        if pos >= end:
            raise MalformedPacket(f"SUBSCRIBE ends before the options of {flt!r}")
        options = data[pos]
        pos += 1
        qos = options & 3
        if qos == 3:
            # 5.0 3.8.3.1 calls it a protocol error (0x82); 3.1.1 a malformed packet [MQTT-3.8.3-4].
            errs.append((ProtocolError if version == 5 else MalformedPacket)(f"SUBSCRIBE asks QoS 3 for {flt!r}"))
        if err := topic_filter_error(flt):
            errs.append(RemoteProtocolError(f"SUBSCRIBE {err}", reason_code=0x8F))
        if version == 5:
            if options & 0xC0:
                errs.append(MalformedPacket(f"SUBSCRIBE reserved option bits are set for {flt!r}"))
            retain_handling = (options >> 4) & 3
            if retain_handling == 3:
                errs.append(ProtocolError(f"SUBSCRIBE retain handling 3 for {flt!r}"))
            no_local = bool(options & 4)
            if no_local and flt.startswith("$share/"):
                errs.append(ProtocolError(f"SUBSCRIBE sets no-local on the shared subscription {flt!r}"))
            subs.append(Subscription(flt, qos, no_local, bool(options & 8), retain_handling))
        else:
            if options & 0xFC:
                errs.append(MalformedPacket(f"SUBSCRIBE reserved bits of the requested QoS are set for {flt!r}"))
            subs.append(Subscription(flt, qos))
    if not subs:
        errs.append(ProtocolError("SUBSCRIBE has no topic filter"))
    return Subscribe(pid, tuple(subs), props)


def _decode_suback(first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs) -> SubAck:
    pid, pos = read_u16(data, pos, end, "SUBACK packet identifier")
    _check_pid(pid, "SUBACK", errs)
    props = EMPTY_PROPERTIES
    allowed = _V3_SUBACK_CODES
    if version == 5:
        props, pos = decode_properties(data, pos, end, 9, errs)
        allowed = REASONS_BY_PACKET[9]
    codes = tuple(data[pos:end])
    for code in codes:
        if code not in allowed:
            errs.append(ProtocolError(f"SUBACK code 0x{code:02X} is not allowed"))
    if not codes:
        errs.append(ProtocolError("SUBACK has no reason code"))
    return SubAck(pid, codes, props)


def _decode_unsubscribe(first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs) -> Unsubscribe:
    pid, pos = read_u16(data, pos, end, "UNSUBSCRIBE packet identifier")
    _check_pid(pid, "UNSUBSCRIBE", errs)
    props = EMPTY_PROPERTIES
    if version == 5:
        props, pos = decode_properties(data, pos, end, 10, errs)
    filters = []
    while pos < end:
        flt, pos = _str(data, pos, end, "topic filter", errs)
        if err := topic_filter_error(flt):
            errs.append(RemoteProtocolError(f"UNSUBSCRIBE {err}", reason_code=0x8F))
        filters.append(flt)
    if not filters:
        errs.append(ProtocolError("UNSUBSCRIBE has no topic filter"))
    return Unsubscribe(pid, tuple(filters), props)


def _decode_unsuback(first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs) -> UnsubAck:
    pid, pos = read_u16(data, pos, end, "UNSUBACK packet identifier")
    _check_pid(pid, "UNSUBACK", errs)
    if version < 5:
        _check_end(pos, end, "UNSUBACK", errs)
        return UnsubAck(pid)
    props, pos = decode_properties(data, pos, end, 11, errs)
    codes = tuple(data[pos:end])
    for code in codes:
        _check_reason_code(code, 11, errs)
    if not codes:
        errs.append(ProtocolError("UNSUBACK has no reason code"))
    return UnsubAck(pid, codes, props)


def _decode_ping(first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs) -> PingReq | PingResp:
    ptype = first >> 4
    _check_end(pos, end, _NAMES[ptype], errs)
    return _PING_REQ if ptype == 12 else _PING_RESP


def _decode_disconnect_or_auth(
    first: int, data: bytes, pos: int, end: int, version: int, errs: _Errs
) -> Disconnect | Auth:
    ptype = first >> 4
    cls = Disconnect if ptype == 14 else Auth
    if version < 5:
        if ptype == 15:
            errs.append(ProtocolError("AUTH is not part of MQTT 3.x (packet type 15 is reserved)"))
        else:
            _check_end(pos, end, "DISCONNECT", errs)
            return Disconnect()
    code = 0
    props = EMPTY_PROPERTIES
    if pos < end:
        code = data[pos]
        pos += 1
        _check_reason_code(code, ptype, errs)
        if pos < end:
            props, pos = decode_properties(data, pos, end, ptype, errs)
    _check_end(pos, end, _NAMES[ptype], errs)
    if ptype == 15 and (code or props) and props.authentication_method is None:
        errs.append(ProtocolError("AUTH with a reason code or properties needs an authentication method"))
    return cls(code, props)


_Decoder = Callable[[int, bytes, int, int, int, _Errs], Any]
_DECODERS: tuple[_Decoder | None, ...] = (
    None,
    _decode_connect,
    _decode_connack,
    _decode_publish,
    _decode_ack,
    _decode_ack,
    _decode_ack,
    _decode_ack,
    _decode_subscribe,
    _decode_suback,
    _decode_unsubscribe,
    _decode_unsuback,
    _decode_ping,
    _decode_ping,
    _decode_disconnect_or_auth,
    _decode_disconnect_or_auth,
)

_new_publish = fast_constructor(Publish)

# Topic names repeat: remember the ones already decoded and checked, by their bytes. Bounded; shared by all
# readers, since whether bytes are a valid topic name does not depend on the connection. Handing out the same
# str object for the same topic also lets later lookups keyed by topic reuse its cached hash.
_TOPICS_SEEN: dict[bytes, str] = {}
_TOPICS_SEEN_MAX = 4096


def _valid_topic(raw: bytes) -> str:
    """The topic name in `raw` if it is a valid, non-empty one (then remembered), else ""."""
    try:
        topic = raw.decode()
    except UnicodeDecodeError:
        return ""
    if not topic or "+" in topic or "#" in topic or "\x00" in topic:
        return ""
    if len(_TOPICS_SEEN) >= _TOPICS_SEEN_MAX:
        _TOPICS_SEEN.clear()
    _TOPICS_SEEN[raw] = topic
    return topic


_MutablePublish = mutable_twin(Publish)
_SEEN_PUBLISH_PROPERTIES = SEEN_PROPERTIES[3]
_EMPTY = EMPTY_PROPERTIES


def _decode_body(first: int, data: bytes, pos: int, end: int, version: int, lenient: bool = False) -> Any:
    """Decodes one framed packet; raises the first broken rule with the decoded packet attached.

    `lenient` (the tolerant reader's second try at a packet it could not read) replaces invalid UTF-8 and keeps
    an unknown 5.0 property with the rest of its block, so that more of such a packet can be shown.
    """
    ptype = first >> 4
    decoder = _DECODERS[ptype]
    if decoder is None:
        raise MalformedPacket("packet type 0 is reserved", packet_type=0)
    errs: _Errs = LenientErrors() if lenient else []
    required = _REQUIRED_FLAGS[ptype]
    if required >= 0 and first & 0x0F != required:
        errs.append(
            MalformedPacket(f"{_NAMES[ptype]} fixed-header flags are 0x{first & 15:X}; they must be 0x{required:X}")
        )
    try:
        packet = decoder(first, data, pos, end, version, errs)
    except RemoteProtocolError as exc:
        _name_it(exc, ptype)
        raise
    if errs:
        for err in errs:
            _name_it(err, ptype)
        err = errs[0]
        err.packet = packet
        err.details["violations"] = errs
        raise err
    return packet


def _name_it(err: RemoteProtocolError, ptype: int) -> None:
    """Makes the message say which packet it is about: "PUBLISH: topic name is not valid UTF-8 (byte 4)"."""
    err.packet_type = ptype
    name = _NAMES[ptype]
    if not err.message.startswith(name):
        err.args = (f"{name}: {err.message}", *err.args[1:])


class PacketReader:
    """Turns a byte stream, in any chunking, into packets.

    `version` is the protocol level the stream speaks (3, 4 or 5); None until a CONNECT tells it (other packets
    are read as 3.1.1 until then). `max_packet_size` bounds whole packets (fixed header included):
    a larger one raises PacketTooLarge before its body is buffered.

    `strict=True` (brokers, clients): a packet that breaks a rule raises its RemoteProtocolError; the packets
    decoded before it in the same `feed` are in `error.packets`. `strict=False` (capture decoders): such errors
    come back in the list in place of the packet (with `error.packet` set when it could be decoded) and
    reading goes on. Either way, an error with `fatal` set (the framing itself is broken) ends the stream: the
    reader raises it again on every later `feed`.
    """

    __slots__ = ("_chunks", "_error", "_have", "_need", "max_packet_size", "strict", "version")

    def __init__(self, version: int | None = None, *, max_packet_size: int | None = None, strict: bool = True):
        if version not in (None, 3, 4, 5):
            raise ValueError(f"version must be 3, 4, 5 or None, not {version!r}")
        self.version = version
        self.max_packet_size = max_packet_size
        self.strict = strict
        self._chunks: list[bytes] = []  # bytes of an incomplete packet
        self._have = 0
        self._need = 0  # bytes needed before decoding is worth trying again
        self._error: RemoteProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole packet."""
        return self._have

    def feed(self, received: bytes | bytearray | memoryview) -> list[Any]:
        """Adds received bytes; returns the packets they complete (and, when not strict, errors in line)."""
        if self._error is not None:
            raise self._error
        # Kept and sliced into payloads: must not change under us (and bytes is what a compiled reader works on).
        data = received if type(received) is bytes else bytes(received)
        if self._have:
            self._chunks.append(data)
            self._have += len(data)
            if self._have < self._need:
                return []
            data = b"".join(self._chunks)
            self._chunks.clear()
            self._have = 0
        elif not data:
            return []
        out: list[Any] = []
        n = len(data)
        pos = 0
        version = self.version or 4
        limit = self.max_packet_size
        twin = _MutablePublish
        topics_seen = _TOPICS_SEEN
        seen_props = _SEEN_PUBLISH_PROPERTIES
        publish = Publish
        acks = _ACK_CLASSES
        while pos < n:
            # Fixed header: type and flags, then the Remaining Length (1.5.5) in at most four bytes.
            if pos + 1 >= n:
                self._need = 2
                break
            first = data[pos]
            length = data[pos + 1]
            body = pos + 2
            minimal = True
            if length & 0x80:
                length &= 0x7F
                shift = 7
                while body < n:
                    byte = data[body]
                    body += 1
                    length |= (byte & 0x7F) << shift
                    if not byte & 0x80:
                        minimal = byte != 0
                        break
                    shift += 7
                    if shift == 28:
                        self._fail(
                            MalformedPacket(
                                f"remaining length of a {_NAMES[first >> 4]} packet is longer than four bytes",
                                packet_type=first >> 4,
                                fatal=True,
                            ),
                            out,
                        )
                else:
                    self._need = body - pos + 1
                    break
            end = body + length
            if limit is not None and end - pos > limit:
                self._fail(
                    PacketTooLarge(
                        f"{_NAMES[first >> 4]} of {end - pos} bytes exceeds the maximum packet size {limit}",
                        packet_type=first >> 4,
                        fatal=True,
                    ),
                    out,
                )
            if end > n:
                self._need = end - pos
                break
            if first & 0xF0 == 0x30 and minimal:
                # Fast path for the common PUBLISH: valid flags, a valid topic, no properties or ones seen before.
                # Anything else takes the general decoder, which checks the same rules and says what is wrong.
                qos = (first >> 1) & 3
                if body + 2 <= end and qos != 3 and (qos or not first & 8):
                    topic_end = body + 2 + ((data[body] << 8) | data[body + 1])
                    rest = topic_end + 2 if qos else topic_end
                    props: Properties | None = _EMPTY
                    if version == 5:
                        # Only an empty or an already seen (hence valid) short property block is taken here.
                        plen = data[rest] if rest < end else 128
                        if plen:
                            props = seen_props.get(data[rest + 1 : rest + 1 + plen]) if plen < 128 else None
                            if props is None:
                                plen = end
                        rest += 1 + plen
                    if rest <= end:
                        raw_topic = data[body + 2 : topic_end]
                        topic = topics_seen.get(raw_topic)
                        if topic is None:
                            topic = _valid_topic(raw_topic)
                        if topic:
                            if not qos:
                                packet = twin(topic, data[rest:end], 0, first & 1 == 1, False, None, props)
                                packet.__class__ = publish
                                out.append(packet)
                                pos = end
                                continue
                            pid = (data[topic_end] << 8) | data[topic_end + 1]
                            if pid:
                                packet = twin(topic, data[rest:end], qos, first & 1 == 1, first & 8 == 8, pid, props)
                                packet.__class__ = publish
                                out.append(packet)
                                pos = end
                                continue
            elif length == 2 and first in _PLAIN_ACKS:
                # Fast path for an acknowledgement of a QoS exchange with nothing but its packet identifier (in 5.0:
                # reason code 0, no properties); identifier 0 takes the general decoder, which says what is wrong.
                pid = (data[body] << 8) | data[body + 1]
                if pid:
                    out.append(acks[first >> 4](pid, 0, _EMPTY))
                    pos = end
                    continue
            try:
                # Decoded from its own bytes, so that the positions errors name count from the packet's start.
                packet = _decode_body(first, data[pos:end] if pos or end != n else data, body - pos, end - pos, version)
                if not minimal and version == 5:
                    raise MalformedPacket(
                        "remaining length is not minimally encoded", packet=packet, packet_type=first >> 4
                    )
            except RemoteProtocolError as err:
                if not self.strict and err.packet is None and first >> 4:
                    # Tolerant: try again, reading bad texts with replacements; keep whichever says more.
                    try:
                        _decode_body(first, data[pos:end], body - pos, end - pos, version, lenient=True)
                    except RemoteProtocolError as again:
                        if again.packet is not None:
                            err = again
                pos = end
                if self.strict:
                    self._need = 0  # what is left may hold whole packets: look at it on the next feed
                    self._keep(data, pos, n)
                    err.packets = out
                    raise
                out.append(err)
                packet = err.packet
            else:
                out.append(packet)
                pos = end
            if type(packet) is Connect and packet.protocol_version in (3, 4, 5):
                version = self.version = packet.protocol_version
        if pos < n:
            self._keep(data, pos, n)
        else:
            self._need = 0  # `_keep` for the common case, without the call
        return out

    def _keep(self, data: bytes, pos: int, n: int) -> None:
        if pos < n:
            rest = data[pos:] if pos else data
            self._chunks.append(rest)
            self._have = n - pos
        else:
            self._need = 0

    def _fail(self, err: RemoteProtocolError, out: list[Any]) -> NoReturn:
        self._error = err
        self._chunks.clear()
        self._have = 0
        err.packets = out
        raise err


def decode(data: bytes | bytearray | memoryview, version: int | None = None) -> Packet:
    """Decodes exactly one whole packet (strict); raises MalformedPacket when `data` is not exactly one."""
    reader = PacketReader(version)
    packets = reader.feed(data)
    if len(packets) != 1 or reader.buffered:
        raise MalformedPacket(
            f"expected exactly one whole packet, got {len(packets)} and {reader.buffered} bytes left over"
        )
    packet: Packet = packets[0]
    return packet
