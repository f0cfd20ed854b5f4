"""Decoding one framed MQTT 3.1, 3.1.1 or 5.0 control packet: `decode_body`, with a decoder per packet type.

Each decoder reads the body data[pos:end] of one framed packet. Breaks of a rule that still let the packet be
read are collected in `errs` (decode_body raises the first, with the packet and the others attached); a body
that cannot be read raises MalformedPacket at once. Framing a byte stream into packets, and the shortcuts for
the common packets, are reader.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import (
    LenientErrors,
    MalformedPacket,
    ProtocolError,
    RemoteProtocolError,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from .packets import (
    PACKET_NAMES,
    REQUIRED_FLAGS,
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
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
    fixed_flags_valid,
)
from .properties import EMPTY_PROPERTIES, WILL, decode_properties
from .reasons import REASONS_BY_PACKET, V3_SUBACK_CODES
from .records import fast_constructor
from .topics import topic_filter_error, topic_name_error
from .wire import read_binary, read_string, read_u16

__all__ = ["ACK_CLASSES", "decode_body"]

_PING_REQ = PingReq()
_PING_RESP = PingResp()

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
        errs.append(ProtocolError(f"reason code 0x{code:02X} is not allowed in {PACKET_NAMES[ptype]}"))


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
    name = PACKET_NAMES[ptype]
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
    return ACK_CLASSES[ptype](pid, code, props)


ACK_CLASSES: dict[int, Callable[..., Any]] = {
    4: fast_constructor(PubAck),
    5: fast_constructor(PubRec),
    6: fast_constructor(PubRel),
    7: fast_constructor(PubComp),
}
# First bytes of PUBACK, PUBREC, PUBREL, PUBCOMP with their required fixed-header flags.


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
    allowed = V3_SUBACK_CODES
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
    _check_end(pos, end, PACKET_NAMES[ptype], errs)
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
    _check_end(pos, end, PACKET_NAMES[ptype], errs)
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


def decode_body(first: int, data: bytes, pos: int, end: int, version: int, lenient: bool = False) -> Any:
    """Decodes one framed packet; raises the first broken rule with the decoded packet attached.

    `lenient` (the tolerant reader's second try at a packet it could not read) replaces invalid UTF-8 and keeps
    an unknown 5.0 property with the rest of its block, so that more of such a packet can be shown.
    """
    ptype = first >> 4
    decoder = _DECODERS[ptype]
    if decoder is None:
        raise MalformedPacket("packet type 0 is reserved", packet_type=0)
    errs: _Errs = LenientErrors() if lenient else []
    if not fixed_flags_valid(ptype, first & 0x0F, version):
        required = REQUIRED_FLAGS[ptype]
        errs.append(
            MalformedPacket(
                f"{PACKET_NAMES[ptype]} fixed-header flags are 0x{first & 15:X}; they must be 0x{required:X}"
            )
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
    name = PACKET_NAMES[ptype]
    if not err.message.startswith(name):
        err.args = (f"{name}: {err.message}", *err.args[1:])
