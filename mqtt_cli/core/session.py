"""What the broker keeps for a client beyond one connection: subscriptions, QoS 1/2 flows, the offline queue.

A `Message` is one application message inside the broker. It is built once per PUBLISH received and shared by
every subscriber it goes to; its wire form is encoded once per variant (protocol family, QoS, retain flag, extra
properties) and reused, only the packet identifier differing between QoS 1/2 deliveries.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .encoder import encode, encode_topic_name, frame_publish
from .flows import IncomingFlows, OutgoingFlows
from .packets import Publish, Will
from .properties import EMPTY_PROPERTIES, Properties, encode_properties, properties_from_items

if TYPE_CHECKING:
    from .packed import PackedQueue

__all__ = ["Delivery", "Message", "QueueLimits", "Session", "SubscriptionOptions"]


@dataclass(frozen=True, slots=True)
class SubscriptionOptions:
    """What a client asked for with one topic filter."""

    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    subscription_identifier: int | None = None


# Shared by messages with no encoding cached yet (never written to): a million messages restored from the
# persistence store would otherwise hold a million empty dicts.
_NO_WIRE: dict[Any, tuple[bytes, bytes]] = {}
_ONCE: dict[Any, tuple[bytes, bytes]] = {}  # delivered once, framed directly: nothing cached yet


class Message:
    """An application message held by the broker, with its encodings cached per variant."""

    __slots__ = ("_wire", "expires_at", "origin", "payload", "properties", "qos", "received_at", "retain", "topic")

    def __init__(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Properties,
        origin: str | None,
        received_at: float,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties  # as received, minus the topic alias (a per-connection matter)
        self.origin = origin  # client id of the publisher (None: the broker itself, e.g. $SYS)
        self.received_at = received_at
        expiry = properties.message_expiry_interval if properties.items else None
        self.expires_at = received_at + expiry if expiry is not None else None
        self._wire: dict[Any, tuple[bytes, bytes]] = _NO_WIRE  # its own dict once something is cached

    @property
    def size(self) -> int:
        return len(self.payload) + len(self.topic)

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def delivery_properties(self, now: float, subscription_ids: tuple[int, ...]) -> Properties:
        """The properties of this message as sent to one subscriber (5.0 3.3.2.3.3, 3.3.4)."""
        props = self.properties
        if self.expires_at is not None:
            remaining = max(0, int(self.expires_at - now + 0.999999))
            if remaining != props.message_expiry_interval:
                props = props.replace(message_expiry_interval=remaining)
        if subscription_ids:
            props = props.replace(subscription_identifiers=subscription_ids)
        return props

    def wire(self, version: int, qos: int, retain: bool, packet_id: int | None, props: Properties | None) -> bytes:
        """The PUBLISH bytes for one delivery. Encoded once per variant; QoS 1/2 splice in the packet id."""
        v5 = version == 5
        if not v5:
            props = EMPTY_PROPERTIES
        elif props is None:
            props = self.properties
        if self._wire is _NO_WIRE and not props.items:
            # Its first delivery, without properties (most messages have one: fan-in, one subscriber): framed with
            # its packet identifier, nothing cached; from a second delivery on, the parts are cached (fan-out).
            self._wire = _ONCE
            raw_topic = self.topic.encode()
            first = 0x30 | qos << 1 | (1 if retain else 0)
            topic_name = len(raw_topic).to_bytes(2, "big") + raw_topic
            if not qos:
                return frame_publish(first, topic_name, b"", b"\x00" if v5 else b"", self.payload)
            if packet_id is None:
                raise ValueError("a QoS 1 or 2 PUBLISH needs a packet identifier")
            return frame_publish(first, topic_name, packet_id.to_bytes(2, "big"), b"\x00" if v5 else b"", self.payload)
        key = (v5, qos, retain, props.items if props.items else None)
        parts = self._wire.get(key)
        if parts is None:
            if key[3] is None:
                # No properties (most messages): framed here, without a Publish record and the general encoder.
                # The topic was checked when the message was taken, so it is valid and at most 65,535 bytes.
                raw_topic = self.topic.encode()
                block = b"\x00" if v5 else b""
                first = 0x30 | qos << 1 | (1 if retain else 0)
                topic_name = len(raw_topic).to_bytes(2, "big") + raw_topic
                if qos:
                    raw = frame_publish(first, topic_name, b"\xff\xff", block, self.payload)
                    cut = len(raw) - len(self.payload) - len(block) - 2
                    parts = (raw[:cut], raw[cut + 2 :])
                else:
                    parts = (frame_publish(first, topic_name, b"", block, self.payload), b"")
            else:
                # Encode with packet id 0xFFFF and cut around it: the id sits right after the topic.
                publish = Publish(self.topic, self.payload, qos, retain, False, 0xFFFF if qos else None, props)
                raw = encode(publish, version)
                if qos:
                    cut = _topic_end(raw)
                    parts = (raw[:cut], raw[cut + 2 :])
                else:
                    parts = (raw, b"")
            if len(self._wire) < 8:  # a handful of variants; more would be one per subscriber
                if self._wire is _NO_WIRE or self._wire is _ONCE:
                    self._wire = {}
                self._wire[key] = parts
        if qos:
            if packet_id is None:
                raise ValueError("a QoS 1 or 2 PUBLISH needs a packet identifier")
            return b"".join((parts[0], packet_id.to_bytes(2, "big"), parts[1]))
        return parts[0]

    def wire_aliased(
        self, qos: int, retain: bool, packet_id: int | None, props: Properties | None, alias: int, new: bool
    ) -> bytes:
        """The 5.0 PUBLISH bytes for a client that takes topic aliases (3.3.2.3.4): with Topic Alias `alias`, and
        the topic name only when the alias is `new` (empty otherwise). Not cached: the alias is per connection."""
        items = (*(self.properties if props is None else props).items, (_TOPIC_ALIAS, alias))
        block = encode_properties(properties_from_items(items), 3)  # small blocks are encoded once and remembered
        first = 0x30 | qos << 1 | (1 if retain else 0)
        topic = encode_topic_name(self.topic) if new else b"\x00\x00"
        return frame_publish(first, topic, packet_id.to_bytes(2, "big") if packet_id else b"", block, self.payload)


_TOPIC_ALIAS = 0x23


def _topic_end(raw: bytes) -> int:
    """Offset of the byte after the topic name in an encoded PUBLISH."""
    pos = 1
    while raw[pos] & 0x80:
        pos += 1
    pos += 1
    return pos + 2 + ((raw[pos] << 8) | raw[pos + 1])


@dataclass(slots=True)
class Delivery:
    """A message waiting in a session's queue for one client, with what it is to be sent as."""

    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...] = ()
    row: int = 0  # its record in the persistence store (0: not stored)


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """mosquitto's meaning: 0 is unlimited. `drop_oldest` makes room instead of refusing the new message."""

    max_messages: int = 1000
    max_bytes: int = 0
    drop_oldest: bool = False


@dataclass(slots=True)
class Session:
    client_id: str
    version: int = 4
    subscriptions: dict[str, SubscriptionOptions] = field(default_factory=dict)
    outgoing: OutgoingFlows = field(default_factory=OutgoingFlows)
    incoming: IncomingFlows = field(default_factory=IncomingFlows)
    # Empty most of the time: a shared empty tuple until something is queued (an empty deque is 600 bytes,
    # and a broker holds a session per connected client).
    # Restored from the store: a PackedQueue (core/packed.py), which offers what is used of the deque here.
    queue: deque[Delivery] | PackedQueue | tuple[()] = ()
    queued_bytes: int = 0
    dropped: int = 0  # messages this session lost to its limits (also counted broker-wide)
    expiry_interval: int = 0  # seconds the session outlives its connection; 0xFFFFFFFF: never expires
    expires_at: float | None = None  # set while disconnected
    will: Will | None = None
    will_at: float | None = None  # a delayed will pending since the connection closed
    connection: Any = None  # the ServerConnection while connected
    rows: dict[int, int] | None = None  # persistence on: packet id in flight -> its delivery's stored row
    username: str | None = None  # the user it was granted to (ACLs: not handed to another user; persisted)
    bridge: str | None = None  # an embedded bridge's local side: that bridge's name (persisted)

    def enqueue(self, delivery: Delivery, limits: QueueLimits) -> Delivery | None:
        """Queues a delivery within the limits; returns the delivery dropped to respect them, if any."""
        size = delivery.message.size
        queue = self.queue
        if isinstance(queue, tuple) or not queue:  # the shared empty tuple (or an emptied queue)
            queue = self.queue = deque()
        over_count = limits.max_messages and len(queue) >= limits.max_messages
        over_bytes = limits.max_bytes and self.queued_bytes + size > limits.max_bytes
        if over_count or over_bytes:
            if not limits.drop_oldest or not queue:
                self.dropped += 1
                return delivery
            oldest = queue.popleft()
            self.queued_bytes -= oldest.message.size
            self.dropped += 1
            queue.append(delivery)
            self.queued_bytes += size
            return oldest
        queue.append(delivery)
        self.queued_bytes += size
        return None

    def dequeue(self) -> Delivery:
        queue = self.queue
        if isinstance(queue, tuple):
            raise IndexError("dequeue from an empty session queue")
        delivery = queue.popleft()
        self.queued_bytes -= delivery.message.size
        if not queue:
            self.queue = ()
        return delivery
