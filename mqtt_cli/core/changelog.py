"""The persistence log's records: the per-message change records of one commit, packed into one bytes object.

net/store.py writes a commit's per-message records (core/persistence.py: a delivery's life, an incoming QoS 2
identifier's) as one row of its `log` table instead of a statement each, and folds them into its tables later
(most cancel out first: a QoS 2 message is added, released and done within a few commits). This is that row's
encoding, sans-IO: `encode` and `decode` are inverse, up to the clock offset the store gives them (the file holds
wall-clock times, the core its own clock's).

Each record is a tag byte and fixed little-endian fields, then its strings (UTF-8) and bytes, lengths given in
the fixed fields. Nothing else is framed: a log row is whole or, once it does not decode, unreadable.
"""

from __future__ import annotations

import struct

from .errors import RemoteProtocolError
from .persistence import (
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    IncomingReleased,
)
from .properties import EMPTY_PROPERTIES, decode_properties, encode_properties
from .session import Message

__all__ = ["LOGGED", "LogUnreadable", "Logged", "decode", "encode"]

_PUBLISH = 3  # packet type whose properties a message keeps

Logged = DeliveryAdded | DeliverySent | DeliveryReleased | DeliveryDone | IncomingAdded | IncomingReleased
#: The change records the log holds; the others (sessions, retained messages) go straight to their tables.
LOGGED = (DeliveryAdded, DeliverySent, DeliveryReleased, DeliveryDone, IncomingAdded, IncomingReleased)

# Tags, and what follows each (then the strings in this order).
_ADDED = 1  # row, received_at, message qos, flags, qos, len client, topic, origin, properties, payload, ids
_SENT = 2  # row, packet id, len client
_RELEASED = 3  # row, len client
_DONE = 4  # row, len client
_INCOMING_ADDED = 5  # packet id, len client
_INCOMING_RELEASED = 6

_A = struct.Struct("<BqdBBBHHHIIH")
_S = struct.Struct("<BqHH")
_R = struct.Struct("<BqH")  # also _DONE
_I = struct.Struct("<BHH")  # both incoming records

_MESSAGE_RETAIN = 1  # flags
_RETAIN = 2
_ORIGIN = 4  # an origin is given (None otherwise: the broker itself)


class LogUnreadable(ValueError):
    """A log row that does not decode (truncated, not written by `encode`)."""


def encode(changes: list[Logged], offset: float) -> bytes:
    """`changes`, in order, as one bytes object; times plus `offset` (core clock -> wall clock)."""
    parts: list[bytes] = []
    put = parts.append
    names: dict[str, bytes] = {}  # a group's records name few clients, topics and publishers, many times each
    for c in changes:
        kind = type(c)
        cid = names.get(c.client_id)
        if cid is None:
            cid = names[c.client_id] = c.client_id.encode()
        if kind is DeliveryAdded:
            a: DeliveryAdded = c  # type: ignore[assignment]
            m = a.message
            topic = names.get(m.topic)
            if topic is None:
                topic = names[m.topic] = m.topic.encode()
            flags = (_MESSAGE_RETAIN if m.retain else 0) | (_RETAIN if a.retain else 0)
            origin = b""
            if m.origin is not None:
                flags |= _ORIGIN
                known = names.get(m.origin)
                origin = names[m.origin] = m.origin.encode() if known is None else known
            props = encode_properties(m.properties, _PUBLISH) if m.properties.items else b""
            sids = a.subscription_ids
            put(_A.pack(_ADDED, a.row, m.received_at + offset, m.qos, flags, a.qos, len(cid), len(topic), len(origin),
                        len(props), len(m.payload), len(sids)))  # fmt: skip
            put(cid)
            put(topic)
            put(origin)
            put(props)
            put(m.payload)
            if sids:
                put(struct.pack(f"<{len(sids)}I", *sids))
        elif kind is DeliverySent:
            put(_S.pack(_SENT, c.row, c.packet_id, len(cid)))  # type: ignore[union-attr]
            put(cid)
        elif kind is DeliveryReleased or kind is DeliveryDone:
            put(_R.pack(_RELEASED if kind is DeliveryReleased else _DONE, c.row, len(cid)))  # type: ignore[union-attr]
            put(cid)
        else:
            tag = _INCOMING_ADDED if kind is IncomingAdded else _INCOMING_RELEASED
            put(_I.pack(tag, c.packet_id, len(cid)))  # type: ignore[union-attr]
            put(cid)
    return b"".join(parts)


def decode(data: bytes, offset: float) -> list[Logged]:
    """The records `encode` made of `data`, times minus `offset` (wall clock -> core clock). LogUnreadable if
    `data` is not such a row."""
    try:
        return _decode(data, offset)
    except (struct.error, UnicodeDecodeError, IndexError) as exc:
        raise LogUnreadable(f"log row: {exc}") from None


def _decode(data: bytes, offset: float) -> list[Logged]:
    out: list[Logged] = []
    view = memoryview(data)
    names: dict[bytes, str] = {}
    end = len(data)
    pos = 0

    def text(n: int) -> str:
        nonlocal pos
        raw = _take(view, pos, n, end)
        pos += n
        s = names.get(raw)
        if s is None:
            s = names[raw] = raw.decode()
        return s

    while pos < end:
        tag = data[pos]
        if tag == _ADDED:
            _, row, received, mqos, flags, qos, ncid, ntopic, norigin, nprops, npayload, nsids = _A.unpack_from(
                data, pos
            )
            pos += _A.size
            cid = text(ncid)
            topic = text(ntopic)
            origin = text(norigin) if flags & _ORIGIN else None
            raw_props = _take(view, pos, nprops, end)
            pos += nprops
            payload = _take(view, pos, npayload, end)
            pos += npayload
            sids: tuple[int, ...] = ()
            if nsids:
                sids = struct.unpack_from(f"<{nsids}I", data, pos)
                pos += 4 * nsids
            properties = EMPTY_PROPERTIES
            if raw_props:
                errors: list[RemoteProtocolError] = []
                properties, _ = decode_properties(raw_props, 0, len(raw_props), _PUBLISH, errors)
                if errors:
                    raise LogUnreadable(f"log row: properties: {errors[0]}")
            message = Message(
                topic, payload, mqos, bool(flags & _MESSAGE_RETAIN), properties, origin, received - offset
            )
            out.append(DeliveryAdded(cid, row, message, qos, bool(flags & _RETAIN), sids))
        elif tag == _SENT:
            _, row, pid, ncid = _S.unpack_from(data, pos)
            pos += _S.size
            out.append(DeliverySent(text(ncid), row, pid))
        elif tag in (_RELEASED, _DONE):
            _, row, ncid = _R.unpack_from(data, pos)
            pos += _R.size
            out.append((DeliveryReleased if tag == _RELEASED else DeliveryDone)(text(ncid), row))
        elif tag in (_INCOMING_ADDED, _INCOMING_RELEASED):
            _, pid, ncid = _I.unpack_from(data, pos)
            pos += _I.size
            out.append((IncomingAdded if tag == _INCOMING_ADDED else IncomingReleased)(text(ncid), pid))
        else:
            raise LogUnreadable(f"log row: unknown record tag {tag} at byte {pos}")
    if pos != end:
        raise LogUnreadable(f"log row: {pos - end} bytes missing at its end")
    return out


def _take(view: memoryview, pos: int, n: int, end: int) -> bytes:
    if pos + n > end:
        raise LogUnreadable(f"log row: {pos + n - end} bytes missing at its end")
    return bytes(view[pos : pos + n])
