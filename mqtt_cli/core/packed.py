"""A session queue restored from the persistence store, packed: one bytearray instead of objects per message.

A broker restarted with a million messages queued for offline clients would hold, per message, a Delivery, a
Message, its topic and payload objects and a few more: several hundred bytes beyond the payload. Here each
queued message is a 24-byte header (stored row, receive time, shape, payload length) and its payload, appended
to one bytearray; what many messages share (topic, publisher, properties, QoS and retain flags, subscription
identifiers) is a "shape" kept once per queue. Delivery and Message objects are made one at a time as the
client takes them (popleft), so their cost is paid at the client's pace, when it comes back.

PackedQueue offers what Session does with its deque: len, truth, popleft, append (new deliveries go to an
ordinary deque behind the packed ones) and iteration (in order).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from .properties import Properties
from .session import Delivery, Message

__all__ = ["PackedQueue", "Shape"]

_HEAD = struct.Struct("<qdII")  # stored row, received_at (core clock), shape index, payload length


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

    __slots__ = ("_blob", "_count", "_pos", "_shapes", "_tail", "last_row", "payload_bytes", "size")

    def __init__(self, shapes: list[Shape]) -> None:
        self._blob = bytearray()
        self._pos = 0  # where the next packed record starts
        self._count = 0  # packed records not taken yet
        self._shapes = shapes
        self._tail: deque[Delivery] = deque()
        self.last_row = 0  # the highest stored row added
        self.size = 0  # sum of Message.size of the packed records added (what Session.queued_bytes counts)
        self.payload_bytes = 0  # payload bytes of the packed records not yet taken

    def add(self, row: int, received_at: float, shape: int, payload: bytes, size: int) -> None:
        """Appends one restored delivery (the store fills the queue before the core uses it): `shape` indexes
        the shared table, `size` is its message's Message.size."""
        assert not self._tail, "PackedQueue.add after the queue was put to use"
        blob = self._blob
        blob += _HEAD.pack(row, received_at, shape, len(payload))
        blob += payload
        self._count += 1
        if row > self.last_row:
            self.last_row = row
        self.size += size
        self.payload_bytes += len(payload)

    def __len__(self) -> int:
        return self._count + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self._count or self._tail)

    def append(self, delivery: Delivery) -> None:
        self._tail.append(delivery)

    def popleft(self) -> Delivery:
        if not self._count:
            return self._tail.popleft()
        delivery, self._pos = self._unpack(self._pos)
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
        pos = self._pos
        for _ in range(self._count):
            delivery, pos = self._unpack(pos)
            yield delivery
        yield from self._tail

    def tail_payload_bytes(self) -> int:
        return sum(len(d.message.payload) for d in self._tail)

    def _unpack(self, pos: int) -> tuple[Delivery, int]:
        row, received_at, index, length = _HEAD.unpack_from(self._blob, pos)
        start = pos + _HEAD.size
        s = self._shapes[index]
        payload = bytes(self._blob[start : start + length])
        message = Message(s.topic, payload, s.message_qos, s.message_retain, s.properties, s.origin, received_at)
        return Delivery(message, s.qos, s.retain, s.subscription_ids, row), start + length
