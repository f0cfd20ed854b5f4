"""What the admin API shows of the broker: typed records, filled by BrokerCore's query methods (one section of
broker.py, "queries"), so that nothing outside core reads its private state."""

from __future__ import annotations

import base64
from dataclasses import dataclass

__all__ = ["BridgeInfo", "BrokerTotals", "ClientInfo", "RetainedInfo", "SessionInfo", "SubscriptionInfo"]

PREVIEW_BYTES = 256  # of a retained payload shown (the API is for looking, not for copying messages)


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """A connected client."""

    client_id: str
    address: str
    username: str | None
    protocol: str  # "3.1", "3.1.1" or "5.0"
    keepalive: int
    inflight: int  # QoS 1/2 messages sent and not yet acknowledged
    queued: int  # messages waiting behind them
    subscriptions: int
    bridge: bool  # a 3.x bridge (mosquitto's bridge flag)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    client_id: str
    connected: bool
    username: str | None
    expiry_interval: int  # seconds after the connection; 4294967295: never
    subscriptions: int
    inflight: int
    queued: int


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    client_id: str
    topic_filter: str
    qos: int
    no_local: bool
    retain_as_published: bool
    retain_handling: int


@dataclass(frozen=True, slots=True)
class RetainedInfo:
    topic: str
    qos: int
    size: int  # payload bytes
    payload: str  # the first PREVIEW_BYTES: as text when UTF-8, else base64
    encoding: str  # "utf-8" or "base64"
    truncated: bool


@dataclass(frozen=True, slots=True)
class BridgeInfo:
    """An embedded bridge, from its figures (core/bridge.py LinkStats)."""

    name: str
    connected: bool
    forwarded_out: int
    forwarded_in: int
    dropped_out: int
    dropped_in: int
    reconnects: int


@dataclass(frozen=True, slots=True)
class BrokerTotals:
    """Counters the dashboard turns into rates."""

    connected: int
    sessions: int
    subscriptions: int
    retained: int
    messages_received: int
    messages_sent: int
    bytes_received: int
    bytes_sent: int
    uptime: float


PROTOCOLS = {3: "3.1", 4: "3.1.1", 5: "5.0"}


def payload_preview(payload: bytes) -> tuple[str, str, bool]:
    """(text, encoding, truncated): the payload as text when it is UTF-8 (its first PREVIEW_BYTES characters),
    else its first PREVIEW_BYTES bytes in base64."""
    truncated = len(payload) > PREVIEW_BYTES
    try:
        return payload.decode("utf-8")[:PREVIEW_BYTES], "utf-8", truncated
    except UnicodeDecodeError:
        return base64.b64encode(payload[:PREVIEW_BYTES]).decode(), "base64", truncated
