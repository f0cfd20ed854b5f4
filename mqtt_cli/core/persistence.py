"""What the broker asks to be stored, as data: the change records BrokerCore appends while persistence is on.

Sans-IO: BrokerCore appends these to `changes` (as it appends to `notices` and each connection's `out`), and the
network layer hands them to net/store.py, which writes them in grouped transactions. Acknowledgements that
promise a message is kept (a QoS 1 PUBACK, a QoS 2 PUBREC) wait in `held` until the commit holding what they
acknowledge is done. Times are the core's clock; the store turns them into wall-clock times and back.

`StoredSession` and `StoredDelivery` are what the store gives back at start, for `BrokerCore.restore`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .session import Message, SubscriptionOptions

__all__ = [
    "Change",
    "DeliveryAdded",
    "DeliveryDone",
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


Change = RetainedSet | RetainedCleared | SessionSaved | SessionRemoved | DeliveryAdded | DeliveryDone


@dataclass(frozen=True, slots=True)
class StoredDelivery:
    row: int
    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StoredSession:
    client_id: str
    version: int
    expiry_interval: int
    expires_at: float | None
    subscriptions: tuple[tuple[str, SubscriptionOptions], ...]
    deliveries: tuple[StoredDelivery, ...]  # in the order they were queued
    username: str | None = None
