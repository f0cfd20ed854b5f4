"""A session queue restored from the persistence store, packed: one bytearray instead of objects per message.

A broker restarted with a million messages queued for offline clients would hold, per message, a Delivery, a
Message, its topic and payload objects and a few more: several hundred bytes beyond the payload. Here each
queued message is a 16-byte header (receive time; stored row as a step from the one before, shape, payload
length, in one 64-bit word) and its payload, appended to one bytearray (a record whose numbers do not fit the
word, rare, takes 16 bytes more); what many messages share (topic, publisher, properties, QoS and retain flags,
subscription identifiers) is a "shape" kept once, in a table the restore's queues share. Delivery and Message
objects are made one at a time as the client takes them (popleft), so their cost is paid at the client's pace,
when it comes back.

PackedQueue offers what Session does with its deque: len, truth, popleft, append (new deliveries go to an
ordinary deque behind the packed ones) and iteration (in order).

PackedRetained does the same for restored retained messages: each is one bytes object (a 14-byte header, its
topic, its payload) held by the retained tree (core/retained.py) in place of a Message, its topic string and its
float; what many share (publisher, properties, QoS) is a RetainedShape kept once. `thaw` makes the Message when
one is asked for (a subscription matching it); a message retained since replaces the frozen one as usual.
"""

from __future__ import annotations

import json
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .properties import Properties
from .session import Delivery, Message

__all__ = ["PackedQueue", "PackedRetained", "QueuePacker", "RetainedShape", "Shape"]

# A record: received_at (core clock) and a word: row - previous record's row (24 bits), shape index (24 bits),
# payload length (16 bits). A word of 0 (no step: impossible in a word) says _LONG follows with the numbers.
_HEAD = struct.Struct("<dQ")
_LONG = struct.Struct("<qII")  # stored row, shape index, payload length
_STEP_MAX = _SHAPE_MAX = 0xFFFFFF
_LENGTH_MAX = 0xFFFF

# The tail of a queue nothing was appended to (most restored queues until their client is back): shared, never
# written to (an empty deque holds a block of 64 slots, some 600 bytes).
_NO_TAIL: deque[Delivery] = deque()
_RETAINED = struct.Struct("<dIH")  # received_at (core clock), shape index, topic length (UTF-8, < 64 KiB)


@dataclass(frozen=True, slots=True)
class Shape:
    """What queued messages have in common besides their payload, row and time: kept once, shared by index."""

    topic: str
    origin: str | None
    properties: Properties
    message_qos: int
    message_retain: bool
    qos: int  # of the delivery
    retain: bool
    subscription_ids: tuple[int, ...]


class PackedQueue:
    """Restored deliveries, oldest first, packed; then those queued since, as Delivery objects. `shapes` is the
    table the restore shares between all its queues (the records hold indexes into it)."""

    __slots__ = ("_added", "_blob", "_count", "_pos", "_row", "_shapes", "_tail", "last_row", "payload_bytes", "size")

    def __init__(self, shapes: list[Shape]) -> None:
        self._blob = bytearray()
        self._pos = 0  # where the next packed record starts
        self._count = 0  # packed records not taken yet
        self._row = 0  # the row of the record before the one at _pos (rows are stored as steps from it)
        self._added = 0  # the row of the last record added
        self._shapes = shapes
        self._tail: deque[Delivery] = _NO_TAIL  # its own deque once something is appended
        self.last_row = 0  # the highest stored row added
        self.size = 0  # sum of Message.size of the packed records added (what Session.queued_bytes counts)
        self.payload_bytes = 0  # payload bytes of the packed records not yet taken

    def add(self, row: int, received_at: float, shape: int, payload: bytes, size: int) -> None:
        """Appends one restored delivery (the store fills the queue before the core uses it): `shape` indexes
        the shared table, `size` is its message's Message.size."""
        assert not self._tail, "PackedQueue.add after the queue was put to use"
        blob = self._blob
        step = row - self._added
        length = len(payload)
        if 0 < step <= _STEP_MAX and shape <= _SHAPE_MAX and length <= _LENGTH_MAX:
            blob += _HEAD.pack(received_at, step | shape << 24 | length << 48)
        else:
            blob += _HEAD.pack(received_at, 0)
            blob += _LONG.pack(row, shape, length)
        blob += payload
        self._added = row
        self._count += 1
        if row > self.last_row:
            self.last_row = row
        self.size += size
        self.payload_bytes += len(payload)

    def trim(self) -> None:
        """Gives back what growing the buffer reserved beyond its records (up to an eighth): once filled."""
        self._blob = bytearray(self._blob)

    def __len__(self) -> int:
        return self._count + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self._count or self._tail)

    def append(self, delivery: Delivery) -> None:
        if self._tail is _NO_TAIL:
            self._tail = deque()
        self._tail.append(delivery)

    def popleft(self) -> Delivery:
        if not self._count:
            return self._tail.popleft()
        delivery, self._pos = self._unpack(self._pos, self._row)
        self._row = delivery.row
        self._count -= 1
        self.payload_bytes -= len(delivery.message.payload)
        blob = self._blob
        if not self._count:
            self._blob = bytearray()
            self._pos = 0
        elif self._pos > 1 << 20 and self._pos > len(blob) // 2:  # give back what was taken, in large steps
            del blob[: self._pos]
            self._pos = 0
        return delivery

    def __iter__(self) -> Iterator[Delivery]:
        pos, row = self._pos, self._row
        for _ in range(self._count):
            delivery, pos = self._unpack(pos, row)
            row = delivery.row
            yield delivery
        yield from self._tail

    def tail_payload_bytes(self) -> int:
        return sum(len(d.message.payload) for d in self._tail)

    def _unpack(self, pos: int, previous_row: int) -> tuple[Delivery, int]:
        """The record at `pos` (the one after `previous_row`'s) and where the next starts."""
        received_at, word = _HEAD.unpack_from(self._blob, pos)
        start = pos + _HEAD.size
        if word:
            row = previous_row + (word & _STEP_MAX)
            index = (word >> 24) & _SHAPE_MAX
            length = word >> 48
        else:
            row, index, length = _LONG.unpack_from(self._blob, start)
            start += _LONG.size
        s = self._shapes[index]
        payload = bytes(self._blob[start : start + length])
        message = Message(s.topic, payload, s.message_qos, s.message_retain, s.properties, s.origin, received_at)
        return Delivery(message, s.qos, s.retain, s.subscription_ids, row), start + length


class QueuePacker:
    """Packs the deliveries a restore reads, a row at a time, into PackedQueues by client, with the Shapes they
    share. A row is the store's `deliveries` row: (row, client, topic, payload, message QoS, message retain,
    properties, origin, received, QoS, retain, subscription identifiers as JSON, packet id, released). Those in
    flight (a packet id) are few and made into objects by the store: `add_all` hands them back. (In core/ to be
    compiled: the per-row work is most of a restart's.)"""

    def __init__(self, properties: Callable[[bytes], Properties]) -> None:
        self.queues: dict[str, PackedQueue] = {}
        self.shapes: list[Shape] = []
        self._properties = properties  # a message's stored properties decoded (the store's, which knows errors)
        self._shape_ids: dict[tuple[object, ...], int] = {}
        self._sids: dict[str, tuple[int, ...]] = {}
        self._origins: dict[str | None, str | None] = {}

    def add_all(self, rows: Iterable[tuple[Any, ...]], offset: float) -> list[tuple[Any, ...]]:
        """Packs the queued rows (times minus `offset`: wall clock -> core clock); returns those in flight."""
        in_flight: list[tuple[Any, ...]] = []
        queues = self.queues
        shapes = self.shapes
        shape_ids = self._shape_ids
        for row in rows:
            if row[12] is not None:
                in_flight.append(row)
                continue
            client_id: str = row[1]
            topic: str = row[2]
            payload: bytes = row[3]
            packed = queues.get(client_id)
            if packed is None:
                packed = queues[client_id] = PackedQueue(shapes)
            key = (topic, row[7], row[6], row[4], row[5], row[9], row[10], row[11])
            shape = shape_ids.get(key)
            if shape is None:
                shape = shape_ids[key] = len(shapes)
                shapes.append(self._shape(topic, row))
            received: float = row[8]
            packed.add(row[0], received - offset, shape, payload, len(payload) + len(topic))
        return in_flight

    def _shape(self, topic: str, row: tuple[Any, ...]) -> Shape:
        origin: str | None = row[7]
        origin = self._origins.setdefault(origin, origin)  # one string per publisher, not per shape
        text: str = row[11]
        ids = self._sids.get(text)
        if ids is None:
            ids = self._sids[text] = tuple(json.loads(text))
        return Shape(topic, origin, self._properties(row[6]), row[4], bool(row[5]), row[9], bool(row[10]), ids)

    def finish(self) -> dict[str, PackedQueue]:
        """The queues, each trimmed to what it holds."""
        for packed in self.queues.values():
            packed.trim()
        return self.queues


@dataclass(frozen=True, slots=True)
class RetainedShape:
    """What restored retained messages share besides topic, payload and time: kept once, shared by index."""

    origin: str | None
    properties: Properties
    qos: int


class PackedRetained:
    """Restored retained messages, frozen: `add` packs one (the store fills it), `frozen` holds them in order,
    `thaw` makes one's Message back (given to the retained tree, which calls it when the message is asked for),
    `topic` reads one's topic (the restore indexes them by it)."""

    __slots__ = ("_shapes", "frozen")

    def __init__(self) -> None:
        self._shapes: list[RetainedShape] = []
        self.frozen: list[bytes] = []

    def __len__(self) -> int:
        return len(self.frozen)

    def take(self) -> list[bytes]:
        """The frozen records, handed over once: what is left is the shapes `thaw` needs (it is kept as long as
        one frozen record is held, so it must not keep them all alive: a record replaced is freed)."""
        frozen, self.frozen = self.frozen, []
        return frozen

    def shape(self, origin: str | None, properties: Properties, qos: int) -> int:
        """A new shape's index (the caller keeps which it made for what: it has the stored form as a key)."""
        self._shapes.append(RetainedShape(origin, properties, qos))
        return len(self._shapes) - 1

    def add(self, topic: str, payload: bytes, shape: int, received_at: float) -> None:
        name = topic.encode()
        self.frozen.append(_RETAINED.pack(received_at, shape, len(name)) + name + payload)

    def expires_at(self, shape: int, received_at: float) -> float | None:
        """When a message of this shape received then expires (as Message.expires_at)."""
        props = self._shapes[shape].properties
        expiry = props.message_expiry_interval if props.items else None
        return received_at + expiry if expiry is not None else None

    @staticmethod
    def topic(frozen: bytes) -> str:
        n = _RETAINED.unpack_from(frozen)[2]
        return frozen[_RETAINED.size : _RETAINED.size + n].decode()

    def thaw(self, frozen: bytes) -> Message:
        received_at, index, n = _RETAINED.unpack_from(frozen)
        start = _RETAINED.size + n
        s = self._shapes[index]
        topic = frozen[_RETAINED.size : start].decode()
        return Message(topic, frozen[start:], s.qos, True, s.properties, s.origin, received_at)
