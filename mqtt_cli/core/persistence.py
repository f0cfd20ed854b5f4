"""What the broker asks to be stored, as data: the change records BrokerCore appends while persistence is on.

Sans-IO: BrokerCore appends these to `changes` (as it appends to `notices` and each connection's `out`), and the
network layer hands them to net/store.py, which writes them in grouped transactions. Acknowledgements that
promise a message is kept (a QoS 1 PUBACK, a QoS 2 PUBREC, the PUBCOMP that ends an incoming QoS 2 flow) and a
first QoS 2 PUBLISH to a persistent session's client (its packet identifier must be on file before the client can
hold it) wait in `held` until the commit holding what they acknowledge is done. Times are the core's clock;
the store turns them into wall-clock times and back.

`StoredSession` and `StoredDelivery` are what the store gives back at start, for `BrokerCore.restore`.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from .packed import PackedQueue
from .packets import Will
from .session import Message, SubscriptionOptions

__all__ = [
    "COMMIT_BOUNDS",
    "Change",
    "CommitLatency",
    "DeliveryAdded",
    "DeliveryDone",
    "DeliveryReleased",
    "DeliverySent",
    "IncomingAdded",
    "IncomingReleased",
    "RetainedCleared",
    "RetainedSet",
    "SessionRemoved",
    "SessionSaved",
    "StoredDelivery",
    "StoredSession",
]


@dataclass(frozen=True, slots=True)
class RetainedSet:
    message: Message


@dataclass(frozen=True, slots=True)
class RetainedCleared:
    topic: str


@dataclass(frozen=True, slots=True)
class SessionSaved:
    """A persistent session's state beyond its queue: written whole (it changes rarely: CONNECT, SUBSCRIBE...)."""

    client_id: str
    version: int
    expiry_interval: int
    expires_at: float | None  # set while disconnected (core clock)
    subscriptions: tuple[tuple[str, SubscriptionOptions], ...]
    username: str | None = None  # the user it belongs to (an ACL hands it to no other)
    will: Will | None = None  # still due: published if the connection ends other than by DISCONNECT 0x00
    will_at: float | None = None  # a delayed will's time (core clock), once its connection has closed
    bridge: str | None = None  # the embedded bridge whose local side it is (removed at start once not configured)


@dataclass(frozen=True, slots=True)
class SessionRemoved:
    client_id: str


@dataclass(frozen=True, slots=True)
class DeliveryAdded:
    """A QoS 1/2 message for a persistent session, queued or in flight until its client acknowledges it.
    `row` orders a session's deliveries and names this one in DeliveryDone."""

    client_id: str
    row: int
    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DeliveryDone:
    """Acknowledged by its client (or dropped: expired, over a limit): nothing more to keep."""

    client_id: str
    row: int


@dataclass(frozen=True, slots=True)
class DeliverySent:
    """The packet identifier a delivery went out with (re-sent with it, DUP set, after a restart)."""

    client_id: str
    row: int
    packet_id: int


@dataclass(frozen=True, slots=True)
class DeliveryReleased:
    """PUBREC came for a QoS 2 delivery: what is left of its flow is the PUBREL (re-sent after a restart)."""

    client_id: str
    row: int


@dataclass(frozen=True, slots=True)
class IncomingAdded:
    """A QoS 2 PUBLISH received from a persistent session's client and not yet released (PUBREL): its re-send after
    a restart is acknowledged, not delivered again."""

    client_id: str
    packet_id: int


@dataclass(frozen=True, slots=True)
class IncomingReleased:
    client_id: str
    packet_id: int


Change = (
    RetainedSet
    | RetainedCleared
    | SessionSaved
    | SessionRemoved
    | DeliveryAdded
    | DeliveryDone
    | DeliverySent
    | DeliveryReleased
    | IncomingAdded
    | IncomingReleased
)


@dataclass(frozen=True, slots=True)
class StoredDelivery:
    row: int
    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...]
    packet_id: int | None = None  # in flight with this identifier (None: queued, not sent yet)
    released: bool = False  # QoS 2: PUBREC came, PUBREL is what to re-send


@dataclass(frozen=True, slots=True)
class StoredSession:
    client_id: str
    version: int
    expiry_interval: int
    expires_at: float | None
    subscriptions: tuple[tuple[str, SubscriptionOptions], ...]
    deliveries: tuple[StoredDelivery, ...]  # in the order they were queued
    username: str | None = None
    will: Will | None = None
    will_at: float | None = None
    incoming: tuple[int, ...] = ()  # QoS 2 packet identifiers received and not released
    # The store's restore packs the queued deliveries here (core/packed.py: a few bytes beyond each payload);
    # `deliveries` then holds those in flight. Both are restored, `queued` first.
    queued: PackedQueue | None = None
    bridge: str | None = None  # SessionSaved.bridge


#: Upper bounds (seconds) of the commit latency histogram's buckets: an fsync on a disk takes 1-20 ms.
COMMIT_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def _zeros() -> list[int]:
    return [0] * (len(COMMIT_BOUNDS) + 1)


@dataclass(slots=True)
class CommitLatency:
    """How long commits took, as a Prometheus histogram: `counts[i]` commits took at most COMMIT_BOUNDS[i] (and
    more than the bound before); the last count is those over every bound. The network layer measures (it has
    the clock); a failed commit is not counted."""

    counts: list[int] = field(default_factory=_zeros)
    total: float = 0.0  # seconds, summed

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(COMMIT_BOUNDS, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)
