"""Dump records: one dict per MQTT control packet, in the JSON-lines format of docs/dump-format.md.

    builder = RecordBuilder()
    record = builder.build(item, RecordContext(src, dst, stream, client, from_client), version)

Keys: `ts` (decimal string, nanoseconds), `frame`, `src`, `dst`, `type`, `flags`, `remaining_length`, the fields
of the packet's type (every optional key of the format filled in), `error` (and `errors` when several rules
are broken) for a packet that breaks the protocol, and keys of our own: `offset` (of the packet's first byte in
its direction's byte stream), `stream` (the connection's index in the capture), `client` (the connection's
client identifier, once known) and `from_client` (the direction: true from client to server). Bytes that are
not a packet (a capture gap, bytes skipped to re-synchronise, a stream cut inside a packet, broken framing)
give a record of type MALFORMED with an `error` saying what happened.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from hashlib import sha256
from typing import Any

from mqtt_cli.core import (
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
    RemoteProtocolError,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)

from ..core.packets import PACKET_NAMES as NAMES
from .decoder import Item, StreamNote

__all__ = [
    "NO_CONTEXT",
    "PACKET_TYPES",
    "PUBLISH_KEYS_V4",
    "PUBLISH_KEYS_V5",
    "RecordBuilder",
    "RecordContext",
    "format_ts",
]

Record = dict[str, Any]
PACKET_TYPES = (*NAMES, "MALFORMED")
# The keys of a PUBLISH record, in order, before 5.0 and in 5.0 (when the packet breaks no rule).
PUBLISH_KEYS_V4 = (
    "ts", "frame", "src", "dst", "type", "offset", "stream", "client", "from_client", "remaining_length", "flags",
    "qos", "retain", "dup", "packet_id", "topic", "payload_len", "payload_sha256",
)  # fmt: skip
PUBLISH_KEYS_V5 = (*PUBLISH_KEYS_V4, "properties")


# The pieces of compact JSON (",", ":", non-ASCII kept) that build_texts writes with.
_string = json.encoder.encode_basestring
_json_list = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode


# What a PUBLISH's first byte says, as text (for a decoded PUBLISH these are its dup, qos and retain fields).
_PUBLISH_FLAGS = {
    first: f',"flags":{first & 15},"qos":{(first >> 1) & 3},"retain":{"true" if first & 1 else "false"},'
    f'"dup":{"true" if first & 8 else "false"},"packet_id":'
    for first in range(0x30, 0x40)
}
# The acknowledgements of a QoS exchange: type and the record's text up to its offset; in 5.0 (reason code and
# properties) only those without properties are written here.
_ACK_TEXTS: dict[type, str] = {
    kind: f'{name}","offset":'
    for kind, name in ((PubAck, "PUBACK"), (PubRec, "PUBREC"), (PubRel, "PUBREL"), (PubComp, "PUBCOMP"))
}
# Topics repeat: their JSON strings are kept (bounded).
_TOPICS_JSON: dict[str, str] = {}


def _topic_json(topic: str) -> str:
    if len(_TOPICS_JSON) >= 4096:
        _TOPICS_JSON.clear()
    text = _TOPICS_JSON[topic] = _string(topic)
    return text


def format_ts(ts: int | None) -> str | None:
    """Epoch nanoseconds as an exact decimal string of seconds: 1795344994709346000 -> "1795344994.709346000"."""
    if ts is None:
        return None
    if ts < 0:
        sec, frac = divmod(-ts, 1_000_000_000)
        return f"-{sec}.{frac:09d}"
    sec, frac = divmod(ts, 1_000_000_000)
    return f"{sec}.{frac:09d}"


# --- one function per packet class: adds the type's fields to the record ------------------------------------


def _connect(rec: Record, p: Connect, version: int) -> None:
    rec["client_id"] = p.client_id
    rec["proto_name"] = p.protocol_name
    rec["proto_version"] = p.protocol_version | (0x80 if p.bridge else 0)  # the level byte as on the wire
    rec["clean_session"] = p.clean_start
    rec["keepalive"] = p.keepalive
    if p.username is not None:
        rec["username"] = p.username
    if p.password is not None:
        rec["password_len"] = len(p.password)  # never the password itself
    will = p.will
    if will is None:
        rec["will_qos"] = 0
        rec["will_retain"] = False
    else:
        rec["will_topic"] = will.topic
        rec["will_qos"] = will.qos
        rec["will_retain"] = will.retain
        rec["will_payload_len"] = len(will.payload)
        if p.protocol_version == 5:
            rec["will_properties"] = will.properties.as_list()
    if p.protocol_version == 5:
        rec["properties"] = p.properties.as_list()


def _connack(rec: Record, p: ConnAck, version: int) -> None:
    rec["session_present"] = p.session_present
    rec["reason_code"] = p.reason_code
    if version == 5:
        rec["properties"] = p.properties.as_list()


def _publish(rec: Record, p: Publish, version: int) -> None:
    payload = p.payload
    rec["qos"] = p.qos
    rec["retain"] = p.retain
    rec["dup"] = p.dup
    rec["packet_id"] = p.packet_id
    rec["topic"] = p.topic
    rec["payload_len"] = len(payload)
    rec["payload_sha256"] = sha256(payload).hexdigest()
    if version == 5:
        rec["properties"] = p.properties.as_list()


def _ack(rec: Record, p: PubAck, version: int) -> None:
    rec["packet_id"] = p.packet_id
    if version == 5:
        rec["reason_code"] = p.reason_code
        rec["properties"] = p.properties.as_list()
    else:
        rec["reason_code"] = None


def _subscribe(rec: Record, p: Subscribe, version: int) -> None:
    rec["packet_id"] = p.packet_id
    rec["topics"] = [s.topic_filter for s in p.subscriptions]
    rec["sub_options"] = [s.options if version == 5 else s.qos for s in p.subscriptions]
    if version == 5:
        rec["properties"] = p.properties.as_list()


def _suback(rec: Record, p: SubAck, version: int) -> None:
    rec["packet_id"] = p.packet_id
    rec["reason_codes"] = list(p.reason_codes)
    if version == 5:
        rec["properties"] = p.properties.as_list()


def _unsubscribe(rec: Record, p: Unsubscribe, version: int) -> None:
    rec["packet_id"] = p.packet_id
    rec["topics"] = list(p.topic_filters)
    if version == 5:
        rec["properties"] = p.properties.as_list()


def _unsuback(rec: Record, p: UnsubAck, version: int) -> None:
    rec["packet_id"] = p.packet_id
    rec["reason_codes"] = list(p.reason_codes)
    if version == 5:
        rec["properties"] = p.properties.as_list()


def _nothing(rec: Record, p: Any, version: int) -> None:
    pass


def _disconnect_or_auth(rec: Record, p: Disconnect | Auth, version: int) -> None:
    if version == 5:
        rec["reason_code"] = p.reason_code
        rec["properties"] = p.properties.as_list()
    else:
        rec["reason_code"] = None


_FIELDS: dict[type, tuple[str, Callable[[Record, Any, int], None]]] = {
    Connect: ("CONNECT", _connect),
    ConnAck: ("CONNACK", _connack),
    Publish: ("PUBLISH", _publish),
    PubAck: ("PUBACK", _ack),
    PubRec: ("PUBREC", _ack),
    PubRel: ("PUBREL", _ack),
    PubComp: ("PUBCOMP", _ack),
    Subscribe: ("SUBSCRIBE", _subscribe),
    SubAck: ("SUBACK", _suback),
    Unsubscribe: ("UNSUBSCRIBE", _unsubscribe),
    UnsubAck: ("UNSUBACK", _unsuback),
    PingReq: ("PINGREQ", _nothing),
    PingResp: ("PINGRESP", _nothing),
    Disconnect: ("DISCONNECT", _disconnect_or_auth),
    Auth: ("AUTH", _disconnect_or_auth),
}


class RecordContext:
    """What the records of one direction of a connection share: addresses, the connection's number, its
    client identifier, the direction. Changing it means making a new one (its JSON pieces are cached)."""

    __slots__ = ("client", "dst", "from_client", "json", "src", "stream")

    def __init__(
        self,
        src: str | None = None,
        dst: str | None = None,
        stream: int | None = None,
        client: str | None = None,
        from_client: bool | None = None,
    ) -> None:
        self.src = src
        self.dst = dst
        self.stream = stream
        self.client = client
        self.from_client = from_client
        # json_pieces(), once made (read directly on the hot path: a hit costs no call)
        self.json: tuple[str, str] | None = None

    def json_pieces(self) -> tuple[str, str]:
        """(after "frame":N, up to the type's name; after the offset, before the remaining length) of a record's
        text, for the records `RecordBuilder.build_texts` writes."""
        pieces = self.json
        if pieces is None:
            client = self.client
            pieces = self.json = (
                f',"src":{_json_value(self.src)},"dst":{_json_value(self.dst)},"type":"',
                f',"stream":{_json_value(self.stream)},"client":{"null" if client is None else _string(client)},'
                f'"from_client":{_json_value(self.from_client)},"remaining_length":',
            )
        return pieces


NO_CONTEXT = RecordContext()


def _json_value(value: Any) -> str:
    return _json_list(value)


class RecordBuilder:
    """Turns what the decoders give into records; remembers the last timestamp string (packets of a frame
    share it).

    With `keep_objects`, each record also holds the decoded object it was built from under "_obj" (a packet,
    a RemoteProtocolError or a StreamNote), for renderers that show more than the record (payloads).
    `build_texts` is `build_packets` for the fast path of `mqtt dump --json` without filters: PUBLISH records
    come as their JSON text (str), exactly what encoding the dict compactly (",", ":", UTF-8) gives.
    """

    __slots__ = ("_json_ts", "_json_ts_text", "_keep", "_ts", "_ts_text")

    def __init__(self, keep_objects: bool = False) -> None:
        self._keep = keep_objects
        self._ts: int | None = None
        self._ts_text: str | None = None
        self._json_ts: int | None = -1  # build_texts' last timestamp, and its JSON text (true from the start)
        self._json_ts_text = f'"{format_ts(-1)}"'

    def _timestamp(self, ts: int | None) -> str | None:
        """`format_ts`, remembered (packets of a frame share it)."""
        if ts is not None and ts >= 1_000_000_000:
            digits = str(ts)  # the decimal digits, cut before the last nine: cheaper than dividing and padding
            text: str | None = f"{digits[:-9]}.{digits[-9:]}"
        else:
            text = format_ts(ts)
        self._ts = ts
        self._ts_text = text
        return text

    def build(self, item: Item, ctx: RecordContext, version: int) -> Record:
        """The record of one decoder item (a packet, a protocol error or a stream note)."""
        ts, frame, first, length, offset, obj = item
        ts_text = self._ts_text if ts == self._ts and self._ts_text is not None else self._timestamp(ts)
        # "type" is set below: its place in the key order is kept.
        rec: Record = {
            "ts": ts_text, "frame": frame, "src": ctx.src, "dst": ctx.dst, "type": None, "offset": offset,
            "stream": ctx.stream, "client": ctx.client, "from_client": ctx.from_client,
        }  # fmt: skip
        kind = _FIELDS.get(type(obj))
        if kind is not None:
            rec["type"] = kind[0]
            rec["remaining_length"] = length
            rec["flags"] = first & 15
            kind[1](rec, obj, version)
        elif isinstance(obj, RemoteProtocolError):
            self._error(rec, obj, first, length, version)
        else:
            assert isinstance(obj, StreamNote)
            rec["type"] = "MALFORMED"
            if first >= 0:
                rec["packet_type"] = NAMES[first >> 4]
                rec["remaining_length"] = length
                rec["flags"] = first & 15
            rec["error"] = obj.message
            if obj.lost:
                rec["lost_bytes"] = obj.lost
            if obj.skipped:
                rec["skipped_bytes"] = obj.skipped
        if self._keep:
            rec["_obj"] = obj
        return rec

    def build_packets(
        self, heads: list[tuple[int, int, int]], objs: list[Any], ts: int | None, frame: int | None,
        ctx: RecordContext, version: int,
    ) -> list[Record]:  # fmt: skip
        """Records of the packets one capture record completed (`heads` from HeaderWalker, `objs` from
        PacketReader): the hot path, with PUBLISH built in one go; the same records `build` gives."""
        ts_text = self._ts_text if ts == self._ts and self._ts_text is not None else self._timestamp(ts)
        keep = self._keep
        out = []
        for (first, length, offset), obj in zip(heads, objs, strict=True):
            if type(obj) is Publish:
                payload = obj.payload
                rec: Record = {
                    "ts": ts_text, "frame": frame, "src": ctx.src, "dst": ctx.dst, "type": "PUBLISH",
                    "offset": offset, "stream": ctx.stream, "client": ctx.client, "from_client": ctx.from_client,
                    "remaining_length": length, "flags": first & 15, "qos": obj.qos, "retain": obj.retain,
                    "dup": obj.dup, "packet_id": obj.packet_id, "topic": obj.topic, "payload_len": len(payload),
                    "payload_sha256": sha256(payload).hexdigest(),
                }  # fmt: skip
                if version == 5:
                    props = obj.properties
                    rec["properties"] = props.as_list() if props.items else []
                if keep:
                    rec["_obj"] = obj
            else:
                rec = self.build((ts, frame, first, length, offset, obj), ctx, version)
            out.append(rec)
        return out

    def build_texts(
        self, heads: list[tuple[int, int, int]], objs: list[Any], ts: int | None, frame: int | None,
        ctx: RecordContext, version: int,
    ) -> list[Record | str]:  # fmt: skip
        """`build_packets`, with each PUBLISH record and each acknowledgement of a QoS exchange as its JSON text:
        no dict is built for them."""
        if ts == self._json_ts:
            ts_json = self._json_ts_text
        else:  # `_timestamp`, inline and quoted: nearly every frame has a timestamp of its own
            if ts is not None and ts >= 1_000_000_000:
                digits = str(ts)
                ts_json = f'"{digits[:-9]}.{digits[-9:]}"'
            else:
                ts_text = format_ts(ts)
                ts_json = "null" if ts_text is None else f'"{ts_text}"'
            self._json_ts = ts
            self._json_ts_text = ts_json
        after_frame, middle = ctx.json or ctx.json_pieces()
        head = f'{{"ts":{ts_json},"frame":{"null" if frame is None else frame}{after_frame}'
        v5 = version == 5
        topics = _TOPICS_JSON
        acks = _ACK_TEXTS
        out: list[Record | str] = []
        for (first, length, offset), obj in zip(heads, objs):  # noqa: B905 - as long: the dissector aligns them
            kind = type(obj)
            if kind is Publish:
                payload = obj.payload
                pid = obj.packet_id
                topic = topics.get(obj.topic)
                if topic is None:
                    topic = _topic_json(obj.topic)
                text = (
                    f'{head}PUBLISH","offset":{offset}{middle}{length}{_PUBLISH_FLAGS[first]}'
                    f'{"null" if pid is None else pid},"topic":{topic},"payload_len":{len(payload)},'
                    f'"payload_sha256":"{sha256(payload).hexdigest()}'
                )
                if v5:
                    props = obj.properties
                    text += f'","properties":{_json_list(props.as_json()) if props.items else "{}"}}}'
                else:
                    text += '"}'
                out.append(text)
            elif kind in acks and not (v5 and obj.properties.items):
                out.append(
                    f'{head}{acks[kind]}{offset}{middle}{length},"flags":{first & 15},"packet_id":{obj.packet_id},'
                    + (f'"reason_code":{obj.reason_code},"properties":{{}}}}' if v5 else '"reason_code":null}')
                )
            else:
                out.append(self.build((ts, frame, first, length, offset, obj), ctx, version))
        return out

    def _error(self, rec: Record, err: RemoteProtocolError, first: int, length: int, version: int) -> None:
        packet = err.packet
        kind = _FIELDS.get(type(packet)) if packet is not None else None
        ptype = first >> 4 if first >= 0 else err.packet_type
        if kind is not None:
            rec["type"] = kind[0]
            rec["remaining_length"] = length
            rec["flags"] = first & 15
            kind[1](rec, packet, version)
        elif length >= 0 and (ptype == 0 or ptype == 1 or (ptype == 15 and version < 5)):
            # Types with no fields to decode here (reserved type 0; AUTH on a 3.x connection), and a CONNECT
            # whose body cannot be read (its protocol name cut short, ...): the fixed header is all there is, so
            # the packet keeps its type, as Wireshark shows it.
            rec["type"] = NAMES[ptype]
            rec["remaining_length"] = length
            rec["flags"] = first & 15
            details = err.details
            if ptype == 1 and "protocol_name" in details:  # what tshark shows of it too
                rec["proto_name"] = details["protocol_name"]
                if "protocol_level" in details:
                    rec["proto_version"] = details["protocol_level"]
        else:
            rec["type"] = "MALFORMED"
            if ptype is not None:
                rec["packet_type"] = NAMES[ptype]
            if first >= 0:
                rec["flags"] = first & 15
            if length >= 0:
                rec["remaining_length"] = length
        rec["error"] = err.message
        violations = err.details.get("violations")
        if violations and len(violations) > 1:
            rec["errors"] = [v.message for v in violations]
