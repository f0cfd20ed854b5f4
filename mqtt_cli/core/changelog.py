"""The persistence log's records: the per-message change records of one commit, packed into one bytes object.

net/store.py writes a commit's per-message records (core/persistence.py: a delivery's life, an incoming QoS 2
identifier's) as one row of its `log` table instead of a statement each, and folds them into its tables later
(most cancel out first: a QoS 2 message is added, released and done within a few commits). This is that row's
encoding, sans-IO: `encode` and `decode` are inverse, up to the clock offset the store gives them (the file holds
wall-clock times, the core its own clock's) and the client of a delivery's later steps (sent, released, done: the
row names the delivery, and decodes with client "").

`LogState` is the log's net effect on the tables since they were last brought up to date (folded): what the store
writes when it folds. `LogState.log` encodes a group's records and applies them in one pass.

Each record is a tag byte and fixed little-endian fields, then its strings (UTF-8) and bytes, lengths given in
the fixed fields. Nothing else is framed: a log row is whole or, once it does not decode, unreadable.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

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

_PUBLISH: Final = 3  # packet type whose properties a message keeps

#: The change records the log holds; the others (sessions, retained messages) go straight to their tables.
Logged = DeliveryAdded | DeliverySent | DeliveryReleased | DeliveryDone | IncomingAdded | IncomingReleased

# Tags, and what follows each (then the strings in this order). (Final: compiled, a constant, not a lookup of the
# module's dictionary per use.)
_ADDED: Final = 1  # row, received_at, message qos, flags, qos, len client, topic, origin, properties, payload, ids
_SENT: Final = 2  # row, packet id, len client
_RELEASED: Final = 3  # row, len client
_DONE: Final = 4  # row, len client
_INCOMING_ADDED: Final = 5  # packet id, len client
_INCOMING_RELEASED: Final = 6
# Schema 5: a delivery added and sent in one group is one record, and a delivery's later steps name its row only
# (rows are never reused: the row is the delivery). 2-4 are still read, from the log of a version 4 file.
_ADDED_SENT: Final = 7  # as _ADDED, then the packet id
_SENT_ROW: Final = 8  # row, packet id
_RELEASED_ROW: Final = 9  # row
_DONE_ROW: Final = 10  # row

_A: Final = struct.Struct("<BqdBBBHHHIIH")
_AS: Final = struct.Struct("<BqdBBBHHHIIHH")
_S: Final = struct.Struct("<BqHH")
_R: Final = struct.Struct("<BqH")  # also _DONE
_I: Final = struct.Struct("<BHH")  # both incoming records
_SR: Final = struct.Struct("<BqH")  # _SENT_ROW
_RR: Final = struct.Struct("<Bq")  # _RELEASED_ROW, _DONE_ROW

_MESSAGE_RETAIN: Final = 1  # flags
_RETAIN: Final = 2
_ORIGIN: Final = 4  # an origin is given (None otherwise: the broker itself)

_EMPTY: Final = EMPTY_PROPERTIES  # (compiled: a static, where the imported name is a dictionary lookup)
# The tags of a delivery's later steps as bytes of their own: their row follows, made once per LogState entry.
_TAG_SENT_ROW: Final = bytes((_SENT_ROW,))
_TAG_RELEASED_ROW: Final = bytes((_RELEASED_ROW,))
_TAG_DONE_ROW: Final = bytes((_DONE_ROW,))


class LogUnreadable(ValueError):
    """A log row that does not decode (truncated, not written by `encode`)."""


def encode(changes: list[Logged], offset: float) -> bytes:
    """`changes`, in order, as one bytes object; times plus `offset` (core clock -> wall clock)."""
    parts: list[bytes] = []
    names: dict[str, bytes] = {}
    for c in changes:
        if type(c) is DeliveryAdded:
            _put_added(parts, c, _utf8(names, c.client_id), names, offset, c.packet_id)
        elif type(c) is DeliverySent:
            parts.append(_TAG_SENT_ROW)
            parts.append(_row_bytes(c.row))
            parts.append(c.packet_id.to_bytes(2, "little"))
        elif type(c) is DeliveryReleased or type(c) is DeliveryDone:
            parts.append(_TAG_RELEASED_ROW if type(c) is DeliveryReleased else _TAG_DONE_ROW)
            parts.append(_row_bytes(c.row))
        elif type(c) is IncomingAdded or type(c) is IncomingReleased:
            tag = _INCOMING_ADDED if type(c) is IncomingAdded else _INCOMING_RELEASED
            _put_incoming(parts, tag, c.packet_id, _utf8(names, c.client_id))
    return b"".join(parts)


def _utf8(names: dict[str, bytes], s: str) -> bytes:
    """`s` encoded; `names`: the strings seen so far (a group's records name few clients, topics and publishers,
    many times each)."""
    b = names.get(s)
    if b is None:
        b = names[s] = s.encode()
    return b


def _row_bytes(row: int) -> bytes:
    return row.to_bytes(8, "little", signed=True)


def _put_incoming(parts: list[bytes], tag: int, packet_id: int, cid: bytes) -> None:
    n = len(cid)
    if (packet_id | n) >> 16:  # (each its own two bytes: one too big may not run into the next)
        raise OverflowError(f"log record: packet identifier {packet_id} or client identifier length {n} too big")
    parts.append((tag | packet_id << 8 | n << 24).to_bytes(5, "little"))
    parts.append(cid)


def _put_added(
    parts: list[bytes], c: DeliveryAdded, cid: bytes, names: dict[str, bytes], offset: float, packet_id: int
) -> bytes:
    """A DeliveryAdded, with the packet identifier it was sent with in the same group (-1: not sent there).
    Returns the record's fixed part (its bytes 1-8 are the row's)."""
    m = c.message
    topic = m.topic.encode()  # (a new string per message, its hash not made yet: a lookup costs more)
    flags = (_MESSAGE_RETAIN if m.retain else 0) | (_RETAIN if c.retain else 0)
    origin = b""
    if m.origin is not None:
        flags |= _ORIGIN
        origin = _utf8(names, m.origin)
    props = b""
    if m.properties is not _EMPTY and m.properties.items:
        props = encode_properties(m.properties, _PUBLISH)
    sids = c.subscription_ids
    if packet_id < 0:
        fixed = _A.pack(_ADDED, c.row, m.received_at + offset, m.qos, flags, c.qos, len(cid), len(topic),
                        len(origin), len(props), len(m.payload), len(sids))  # fmt: skip
    else:
        fixed = _AS.pack(_ADDED_SENT, c.row, m.received_at + offset, m.qos, flags, c.qos, len(cid), len(topic),
                         len(origin), len(props), len(m.payload), len(sids), packet_id)  # fmt: skip
    parts.append(fixed)
    parts.append(cid)
    parts.append(topic)
    if len(origin):
        parts.append(origin)
    if len(props):
        parts.append(props)
    parts.append(m.payload)
    if sids:
        parts.append(struct.pack(f"<{len(sids)}I", *sids))
    return fixed


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
        if tag in (_ADDED, _ADDED_SENT):
            pid = -1
            if tag == _ADDED:
                _, row, received, mqos, flags, qos, ncid, ntopic, norigin, nprops, npayload, nsids = _A.unpack_from(
                    data, pos
                )
                pos += _A.size
            else:
                _, row, received, mqos, flags, qos, ncid, ntopic, norigin, nprops, npayload, nsids, pid = (
                    _AS.unpack_from(data, pos)
                )
                pos += _AS.size
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
            out.append(DeliveryAdded(cid, row, message, qos, bool(flags & _RETAIN), sids, pid))
        elif tag == _SENT_ROW:
            _, row, pid = _SR.unpack_from(data, pos)
            pos += _SR.size
            out.append(DeliverySent("", row, pid))  # (the row names the delivery: its client is the row's)
        elif tag in (_RELEASED_ROW, _DONE_ROW):
            _, row = _RR.unpack_from(data, pos)
            pos += _RR.size
            out.append(DeliveryReleased("", row) if tag == _RELEASED_ROW else DeliveryDone("", row))
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


_NEW: Final = IncomingFate.NEW  # (module constants: no attribute lookup on the enum class per record)
_GONE: Final = IncomingFate.GONE
_BACK: Final = IncomingFate.BACK


@dataclass(slots=True)
class Segment:
    """What `LogState.log` made of a group's changes from `start` to `end` (a SessionRemoved there, or the end)."""

    end: int
    data: bytes  # the log records of the changes in it (already applied to the LogState)
    queued: list[DeliveryAdded]  # added and not sent in the group: straight to their table
    direct: list[Change]  # retained messages and sessions saved: to their tables (no log record touches them)


class _Row:
    """What the log's records since the last fold say of one delivery row. (A plain class: native when compiled,
    so a record costs one dict lookup and attribute stores, not one dict or set operation per table column.)"""

    __slots__ = ("added", "done", "packet_id", "released", "row_bytes")

    def __init__(self, added: DeliveryAdded | None, packet_id: int = -1, row_bytes: bytes = b"") -> None:
        self.added = added  # the log's own row (on no table yet); None: a row the tables hold
        self.packet_id = packet_id  # -1: none since the last fold
        self.released = False
        self.done = False  # a table row to delete
        # The row as the records write it, made once for the later steps' records (a slice of the added record's
        # bytes costs less than an int.to_bytes per record); b"": not made yet.
        self.row_bytes = row_bytes

    def written(self, row: int) -> bytes:
        """`row_bytes`, made if need be (`row`: this entry's)."""
        if not len(self.row_bytes):
            self.row_bytes = _row_bytes(row)
        return self.row_bytes


class _Client:
    """What the log's records since the last fold say of one client's incoming identifiers, and its identifier as
    the records write it (one lookup per record gives both)."""

    __slots__ = ("cid", "ids")

    def __init__(self, client_id: str) -> None:
        self.cid = client_id.encode()
        self.ids: dict[int, IncomingFate] = {}


class LogState:
    """The net effect on the tables of the log's records since the last fold. Rows are never reused, so a row is
    either the log's own (`added`: on no table yet) or one the tables hold; `packet_ids` and `released` hold what
    came since for both, `done` the table rows to delete (a row of the log's own that is done is simply dropped).
    An incoming identifier is added only when its client does not hold it (core/broker.py): an add then a release
    cancel, unless the identifier was on the table before (released, then used again)."""

    __slots__ = ("_incoming", "rows", "size")

    def __init__(self) -> None:
        self.rows: dict[int, _Row] = {}
        # Client -> identifier -> fate: per record a lookup by a string whose hash is cached and one by an int, not
        # a tuple made, hashed twice and compared per record (`incoming` is the table's view).
        self._incoming: dict[str, _Client] = {}
        self.size = 0  # log bytes written since the last fold (the caller counts them; 0: nothing to fold)

    # What the store folds (and tests read): views of `rows` and `_incoming`, made when asked.
    @property
    def added(self) -> dict[int, DeliveryAdded]:
        return {row: r.added for row, r in self.rows.items() if r.added is not None}

    @property
    def packet_ids(self) -> dict[int, int]:
        """Row -> its packet identifier now."""
        return {row: r.packet_id for row, r in self.rows.items() if r.packet_id >= 0}

    @property
    def released(self) -> set[int]:
        """Rows whose PUBREC came."""
        return {row for row, r in self.rows.items() if r.released}

    @property
    def done(self) -> set[int]:
        """Table rows to delete."""
        return {row for row, r in self.rows.items() if r.done}

    @property
    def incoming(self) -> dict[tuple[str, int], IncomingFate]:
        """(Client, packet identifier) -> what to do with it on the table."""
        return {(cid, pid): fate for cid, client in self._incoming.items() for pid, fate in client.ids.items()}

    def clear(self) -> None:
        """Folded: the tables hold it all."""
        self.rows = {}
        self._incoming = {}
        self.size = 0

    def apply(self, c: Logged) -> None:
        if type(c) is DeliveryAdded:
            self.rows[c.row] = _Row(c, c.packet_id)
        elif type(c) is DeliverySent:
            self._row(c.row).packet_id = c.packet_id
        elif type(c) is DeliveryReleased:
            self._row(c.row).released = True
        elif type(c) is DeliveryDone:
            self._done(c.row)
        elif type(c) is IncomingAdded:
            _identifier_added(self._client(c.client_id).ids, c.packet_id)
        elif type(c) is IncomingReleased:
            _identifier_released(self._client(c.client_id).ids, c.packet_id)

    # What a record does, shared by `apply` and `log`. (A row boxed once, for the lookup and the store or delete:
    # compiled, an int is boxed anew at each dict operation.)

    def _row(self, row: int) -> _Row:
        key: Any = row
        r = self.rows.get(key)
        if r is None:
            r = self.rows[key] = _Row(None)
        return r

    def _done(self, row: int) -> _Row:
        """Returns the row's entry (dropped when it is the log's own)."""
        key: Any = row
        r = self.rows.get(key)
        if r is None:
            r = self.rows[key] = _Row(None)
        elif r.added is not None:
            del self.rows[key]  # the log's own row: nothing to write
            return r
        r.packet_id = -1
        r.released = False
        r.done = True
        return r

    def _client(self, client_id: str) -> _Client:
        client = self._incoming.get(client_id)
        if client is None:
            client = self._incoming[client_id] = _Client(client_id)
        return client

    def log(self, changes: list[Change], start: int, offset: float) -> Segment:
        """Takes `changes` from `start` up to the first SessionRemoved (whose deletes need the tables folded
        first) or their end: the per-message records are applied and encoded, except deliveries added and not
        sent in the group, likely to stay, which go to their table, as do the changes no log record touches. A
        delivery queued and done within the segment goes nowhere; one added and sent at once (with its packet
        identifier, as the core makes them, or its DeliverySent right after it) is one record (_ADDED_SENT)."""
        parts: list[bytes] = []
        names: dict[str, bytes] = {}
        queued: dict[int, DeliveryAdded] = {}
        direct: list[Change] = []
        sent: set[int] | None = None  # the rows sent in the group, looked up only for one not sent at once
        n = len(changes)
        i = start
        # The kinds in the order a QoS 2 flow makes them most (each message: an identifier in, a delivery added and
        # sent, released, done, the identifier out); `apply`'s work done here, each record's type tested once.
        while i < n:
            c = changes[i]
            i += 1
            if type(c) is DeliveryReleased:
                r = self._row(c.row)
                r.released = True
                parts.append(_TAG_RELEASED_ROW)
                parts.append(r.written(c.row))
            elif type(c) is DeliveryDone:
                if queued and c.row in queued:
                    del queued[c.row]
                    continue
                parts.append(_TAG_DONE_ROW)
                parts.append(self._done(c.row).written(c.row))
            elif type(c) is IncomingAdded:
                client = self._client(c.client_id)
                _put_incoming(parts, _INCOMING_ADDED, c.packet_id, client.cid)
                _identifier_added(client.ids, c.packet_id)
            elif type(c) is IncomingReleased:
                client = self._client(c.client_id)
                _put_incoming(parts, _INCOMING_RELEASED, c.packet_id, client.cid)
                _identifier_released(client.ids, c.packet_id)
            elif type(c) is DeliveryAdded:
                row = c.row
                pid = c.packet_id  # (-1: not sent as it was added)
                if pid < 0:
                    after = changes[i] if i < n else None
                    if type(after) is DeliverySent and after.row == row:
                        pid = after.packet_id
                        i += 1
                    else:
                        if sent is None:
                            sent = {d.row for d in changes if type(d) is DeliverySent}
                        if row not in sent:
                            queued[row] = c
                            continue
                fixed = _put_added(parts, c, _utf8(names, c.client_id), names, offset, pid)
                self.rows[row] = _Row(c, pid, fixed[1:9])  # (its later DeliverySent, if any: a record of its own)
            elif type(c) is DeliverySent:
                r = self._row(c.row)
                r.packet_id = c.packet_id
                parts.append(_TAG_SENT_ROW)
                parts.append(r.written(c.row))
                parts.append(c.packet_id.to_bytes(2, "little"))
            elif type(c) is SessionRemoved:
                i -= 1
                break
            elif type(c) is RetainedSet or type(c) is RetainedCleared or type(c) is SessionSaved:
                direct.append(c)  # (no log record touches them)
        return Segment(i, b"".join(parts), list(queued.values()), direct)


def _identifier_added(ids: dict[int, IncomingFate], packet_id: int) -> None:
    key: Any = packet_id
    ids[key] = _NEW if ids.get(key) is None else _BACK


def _identifier_released(ids: dict[int, IncomingFate], packet_id: int) -> None:
    key: Any = packet_id
    if ids.get(key) is _NEW:
        del ids[key]  # on no table: nothing to do
    else:
        ids[key] = _GONE
