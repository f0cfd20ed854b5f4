"""What the admin API shows of the broker: typed records, filled by BrokerCore's query methods (one section of
broker.py, "queries"), so that nothing outside core reads its private state."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .bridge import LinkStats
from .outbox import Notice, NoticeKind
from .packed import PackedQueue
from .persistence import RetainedCleared
from .reasons import ReasonCode

if TYPE_CHECKING:
    from .broker import BrokerCore

__all__ = [
    "BridgeInfo",
    "BrokerQueries",
    "BrokerTotals",
    "ClientInfo",
    "RetainedInfo",
    "SessionInfo",
    "SubscriptionInfo",
]

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


class BrokerQueries:
    """What the admin API and the metrics read from the broker (the records above), and the two actions the admin
    API takes: disconnecting a client, clearing a retained message."""

    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.router = core.router
        self.stats = core.stats
        self.sessions = core.sessions

    def client_infos(self) -> list[ClientInfo]:
        """The connected clients, by client id."""
        out = []
        for session in self.sessions.values():
            conn = session.connection
            if conn is None or conn.closed or not conn.connected:
                continue
            out.append(
                ClientInfo(
                    session.client_id,
                    conn.peer,
                    conn.username,
                    PROTOCOLS.get(conn.version, str(conn.version)),
                    conn.keepalive,
                    len(session.outgoing),
                    len(session.queue),
                    len(session.subscriptions),
                    conn.bridge,
                )
            )
        return sorted(out, key=lambda c: c.client_id)

    def session_infos(self) -> list[SessionInfo]:
        out = [
            SessionInfo(
                s.client_id,
                s.connection is not None,
                s.username,
                s.expiry_interval,
                len(s.subscriptions),
                len(s.outgoing),
                len(s.queue),
            )
            for s in self.sessions.values()
        ]
        return sorted(out, key=lambda s: s.client_id)

    def subscription_infos(self) -> list[SubscriptionInfo]:
        out = [
            SubscriptionInfo(s.client_id, flt, o.qos, o.no_local, o.retain_as_published, o.retain_handling)
            for s in self.sessions.values()
            for flt, o in s.subscriptions.items()
        ]
        return sorted(out, key=lambda s: (s.client_id, s.topic_filter))

    def retained_infos(self) -> list[RetainedInfo]:
        out = []
        for topic, message in self.router.retained.items():
            text, encoding, truncated = payload_preview(message.payload)
            out.append(RetainedInfo(topic, message.qos, len(message.payload), text, encoding, truncated))
        return sorted(out, key=lambda r: r.topic)

    def bridge_infos(self) -> list[BridgeInfo]:
        return [
            BridgeInfo(
                link.name,
                link.connected,
                link.forwarded[0],
                link.forwarded[1],
                link.dropped[0],
                link.dropped[1],
                link.reconnects,
            )
            for link in sorted(self.core.links.values(), key=lambda link: link.name)
        ]

    def totals(self, now: float) -> BrokerTotals:
        s = self.stats
        return BrokerTotals(
            self.core.connected,
            len(self.sessions),
            sum(len(session.subscriptions) for session in self.sessions.values()),
            len(self.router.retained),
            s.publish_received,
            s.publish_sent,
            sum(s.publish_received_bytes_qos),
            sum(s.publish_sent_bytes_qos),
            now - s.started,
        )

    def disconnect_client(self, client_id: str, now: float, detail: str) -> bool:
        """An operator's disconnection (5.0: DISCONNECT 0x98, administrative action); False when not connected."""
        session = self.sessions.get(client_id)
        conn = session.connection if session is not None else None
        if conn is None or conn.closed:
            return False
        self.core.closing.close(conn, now, reason=ReasonCode.ADMINISTRATIVE_ACTION, detail=detail)
        return True

    def delete_retained(self, topic: str, detail: str) -> bool:
        """Clears a retained message as an empty retained PUBLISH would (stored too), logged with `detail` (who);
        False when there is none."""
        if not self.router.retained.discard(topic):
            return False
        self.core.out.notices.append(
            Notice(NoticeKind.DROPPED, None, "-", f"retained message on {topic!r} cleared {detail}")
        )
        if self.core.storage.changes is not None:
            self.core.storage.changes.append(RetainedCleared(topic))
        return True

    def queued(self) -> tuple[int, int]:
        """Messages queued for sessions (beyond their in-flight windows), and their payload bytes."""
        count = size = 0
        for session in self.sessions.values():
            queue = session.queue
            if queue:
                count += len(queue)
                if type(queue) is PackedQueue:  # not unpacked for a count
                    size += queue.payload_bytes + queue.tail_payload_bytes()
                else:
                    size += sum(len(d.message.payload) for d in queue)
        return count, size

    def link_queued(self, link: LinkStats) -> int:
        """QoS 1/2 messages an embedded bridge holds for its remote: in flight to it, or queued in its session."""
        session = self.sessions.get(link.client_id)
        return 0 if session is None else len(session.queue) + len(session.outgoing)

    def shared_subscriptions(self) -> int:
        return sum(flt[:7] == "$share/" for s in self.sessions.values() for flt in s.subscriptions)
