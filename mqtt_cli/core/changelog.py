"""The persistence log's records: the per-message change records of one commit, packed into one bytes object.

net/store.py writes a commit's per-message records (core/persistence.py: a delivery's life, an incoming QoS 2
identifier's) as one row of its `log` table instead of a statement each, and folds them into its tables later
(most cancel out first: a QoS 2 message is added, released and done within a few commits). This is that row's
encoding, sans-IO: `encode` and `decode` are inverse, up to the clock offset the store gives them (the file holds
wall-clock times, the core its own clock's).

`LogState` is the log's net effect on the tables since they were last brought up to date (folded): what the store
writes when it folds. `LogState.log` encodes a group's records and applies them in one pass.

Each record is a tag byte and fixed little-endian fields, then its strings (UTF-8) and bytes, lengths given in
the fixed fields. Nothing else is framed: a log row is whole or, once it does not decode, unreadable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum

from .errors import RemoteProtocolError
from .persistence import (
    Change,
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    IncomingReleased,
    RetainedCleared,
    RetainedSet,
    SessionRemoved,
    SessionSaved,
)
from .properties import EMPTY_PROPERTIES, decode_properties, encode_properties
from .session import Message

__all__ = [
    "IncomingFate",
    "LogState",
    "LogUnreadable",
    "Logged",
    "Segment",
    "decode",
    "encode",
]

_PUBLISH = 3  # packet type whose properties a message keeps

#: The change records the log holds; the others (sessions, retained messages) go straight to their tables.
Logged = DeliveryAdded | DeliverySent | DeliveryReleased | DeliveryDone | IncomingAdded | IncomingReleased

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
    names: dict[str, bytes] = {}
    for c in changes:
        _put(parts, c, names, offset)
    return b"".join(parts)


def _put(parts: list[bytes], c: Logged, names: dict[str, bytes], offset: float) -> None:
    """One record onto `parts`. `names`: the UTF-8 of the strings seen so far (a group's records name few
    clients, topics and publishers, many times each)."""
    cid = names.get(c.client_id)
    if cid is None:
        cid = names[c.client_id] = c.client_id.encode()
    if type(c) is DeliveryAdded:
        m = c.message
        topic = names.get(m.topic)
        if topic is None:
            topic = names[m.topic] = m.topic.encode()
        flags = (_MESSAGE_RETAIN if m.retain else 0) | (_RETAIN if c.retain else 0)
        origin = b""
        if m.origin is not None:
            flags |= _ORIGIN
            known = names.get(m.origin)
            origin = names[m.origin] = m.origin.encode() if known is None else known
        props = encode_properties(m.properties, _PUBLISH) if m.properties.items else b""
        sids = c.subscription_ids
        parts.append(_A.pack(_ADDED, c.row, m.received_at + offset, m.qos, flags, c.qos, len(cid), len(topic),
                             len(origin), len(props), len(m.payload), len(sids)))  # fmt: skip
        parts.append(cid)
        parts.append(topic)
        parts.append(origin)
        parts.append(props)
        parts.append(m.payload)
        if sids:
            parts.append(struct.pack(f"<{len(sids)}I", *sids))
        return
    if type(c) is DeliverySent:
        parts.append(_S.pack(_SENT, c.row, c.packet_id, len(cid)))
    elif type(c) is DeliveryReleased:
        parts.append(_R.pack(_RELEASED, c.row, len(cid)))
    elif type(c) is DeliveryDone:
        parts.append(_R.pack(_DONE, c.row, len(cid)))
    elif type(c) is IncomingAdded:
        parts.append(_I.pack(_INCOMING_ADDED, c.packet_id, len(cid)))
    elif type(c) is IncomingReleased:
        parts.append(_I.pack(_INCOMING_RELEASED, c.packet_id, len(cid)))
    parts.append(cid)


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
    while pos < end:
        tag = data[pos]
        if tag == _ADDED:
            _, row, received, mqos, flags, qos, ncid, ntopic, norigin, nprops, npayload, nsids = _A.unpack_from(
                data, pos
            )
            pos += _A.size
            cid = _text(view, pos, ncid, end, names)
            pos += ncid
            topic = _text(view, pos, ntopic, end, names)
            pos += ntopic
            origin = _text(view, pos, norigin, end, names) if flags & _ORIGIN else None
            pos += norigin
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
            out.append(DeliverySent(_text(view, pos, ncid, end, names), row, pid))
            pos += ncid
        elif tag in (_RELEASED, _DONE):
            _, row, ncid = _R.unpack_from(data, pos)
            pos += _R.size
            cid = _text(view, pos, ncid, end, names)
            pos += ncid
            out.append(DeliveryReleased(cid, row) if tag == _RELEASED else DeliveryDone(cid, row))
        elif tag in (_INCOMING_ADDED, _INCOMING_RELEASED):
            _, pid, ncid = _I.unpack_from(data, pos)
            pos += _I.size
            cid = _text(view, pos, ncid, end, names)
            pos += ncid
            out.append(IncomingAdded(cid, pid) if tag == _INCOMING_ADDED else IncomingReleased(cid, pid))
        else:
            raise LogUnreadable(f"log row: unknown record tag {tag} at byte {pos}")
    if pos != end:
        raise LogUnreadable(f"log row: {pos - end} bytes missing at its end")
    return out


def _text(view: memoryview, pos: int, n: int, end: int, names: dict[bytes, str]) -> str:
    raw = _take(view, pos, n, end)
    s = names.get(raw)
    if s is None:
        s = names[raw] = raw.decode()
    return s


def _take(view: memoryview, pos: int, n: int, end: int) -> bytes:
    if pos + n > end:
        raise LogUnreadable(f"log row: {pos + n - end} bytes missing at its end")
    return bytes(view[pos : pos + n])


# --- the log's net effect on the tables -------------------------------------------------------------------------


class IncomingFate(Enum):
    """What the log did to an incoming identifier since the last fold."""

    NEW = 1  # added: on no table
    GONE = 2  # released (it was on the table, or added, released, added, released...)
    BACK = 3  # released, then added again: on the table, to stay


@dataclass(slots=True)
class Segment:
    """What `LogState.log` made of a group's changes from `start` to `end` (a SessionRemoved there, or the end)."""

    end: int
    data: bytes  # the log records of the changes in it (already applied to the LogState)
    queued: list[DeliveryAdded]  # added and not sent in the group: straight to their table
    direct: list[Change]  # retained messages and sessions saved: to their tables (no log record touches them)


class LogState:
    """The net effect on the tables of the log's records since the last fold. Rows are never reused, so a row is
    either the log's own (`added`: on no table yet) or one the tables hold; `packet_ids` and `released` hold what
    came since for both, `done` the table rows to delete (a row of the log's own that is done is simply dropped).
    An incoming identifier is added only when its client does not hold it (core/broker.py): an add then a release
    cancel, unless the identifier was on the table before (released, then used again)."""

    __slots__ = ("added", "done", "incoming", "packet_ids", "released", "size")

    def __init__(self) -> None:
        self.added: dict[int, DeliveryAdded] = {}
        self.packet_ids: dict[int, int] = {}  # row -> its packet identifier now
        self.released: set[int] = set()  # rows whose PUBREC came
        self.done: set[int] = set()  # table rows to delete
        self.incoming: dict[tuple[str, int], IncomingFate] = {}
        self.size = 0  # log bytes written since the last fold (the caller counts them; 0: nothing to fold)

    def clear(self) -> None:
        """Folded: the tables hold it all."""
        self.added = {}
        self.packet_ids = {}
        self.released = set()
        self.done = set()
        self.incoming = {}
        self.size = 0

    def apply(self, c: Logged) -> None:
        if type(c) is DeliveryAdded:
            self.added[c.row] = c
        elif type(c) is DeliverySent:
            self.packet_ids[c.row] = c.packet_id
        elif type(c) is DeliveryReleased:
            self.released.add(c.row)
        elif type(c) is DeliveryDone:
            row = c.row
            if self.added.pop(row, None) is None:
                self.done.add(row)
            self.packet_ids.pop(row, None)
            self.released.discard(row)
        elif type(c) is IncomingAdded:
            key = (c.client_id, c.packet_id)
            self.incoming[key] = IncomingFate.NEW if key not in self.incoming else IncomingFate.BACK
        elif type(c) is IncomingReleased:
            key = (c.client_id, c.packet_id)
            if self.incoming.get(key) is IncomingFate.NEW:
                del self.incoming[key]  # on no table: nothing to do
            else:
                self.incoming[key] = IncomingFate.GONE

    def log(self, changes: list[Change], start: int, offset: float, sent: set[int]) -> Segment:
        """Takes `changes` from `start` up to the first SessionRemoved (whose deletes need the tables folded
        first) or their end: the per-message records are applied and encoded, except deliveries added and not
        sent in the group (`sent`: the rows DeliverySent names), likely to stay, which go to their table, as do
        the changes no log record touches. A delivery queued and done within the segment goes nowhere."""
        parts: list[bytes] = []
        names: dict[str, bytes] = {}
        queued: dict[int, DeliveryAdded] = {}
        direct: list[Change] = []
        n = len(changes)
        i = start
        while i < n:
            c = changes[i]
            if type(c) is SessionRemoved:
                break
            i += 1
            if type(c) is RetainedSet or type(c) is RetainedCleared or type(c) is SessionSaved:
                direct.append(c)
                continue
            if type(c) is DeliveryAdded and c.row not in sent:
                queued[c.row] = c
                continue
            if type(c) is DeliveryDone and queued.pop(c.row, None) is not None:
                continue
            _put(parts, c, names, offset)  # type: ignore[arg-type]
            self.apply(c)  # type: ignore[arg-type]
        return Segment(i, b"".join(parts), list(queued.values()), direct)
