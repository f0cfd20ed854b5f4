"""The outbox: what the core hands out besides state. Bytes go into each connection's `out` buffer and the
connection is marked dirty (in the order it got them); notices are what is worth logging.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .encoder import encode
from .lifecycle import (
    over_maximum_packet_size,
)
from .packets import (
    ConnAck,
    Disconnect,
    Publish,
)
from .reasons import ReasonCode
from .records import replace
from .server import ServerConnection

if TYPE_CHECKING:
    from .broker import BrokerCore
    from .dynsec import DynamicSecurity
    from .persistence import Change


__all__ = ["Notice", "NoticeKind", "Outbox", "Output"]


class NoticeKind(StrEnum):
    """What a Notice is about (its value is the log's `event`)."""

    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    REFUSED = "refused"
    ERROR = "error"  # a protocol error closed the connection, or the broker failed at something (persistence)
    DROPPED = "dropped"
    UNSUBSCRIBED = "unsubscribed"  # a subscription the broker removed (an ACL after a reload)
    SUBSCRIBE = "subscribe"  # a client's SUBSCRIBE, one notice a filter with its result
    UNSUBSCRIBE = "unsubscribe"  # a client's UNSUBSCRIBE, one notice a filter with its result
    PERSISTENCE = "persistence"
    BRIDGE = "bridge"  # an embedded bridge's connection to its remote broker
    DYNSEC = "dynsec"  # a change made through $CONTROL/dynamic-security (who, what)


@dataclass(frozen=True, slots=True)
class Notice:
    """Something worth logging."""

    kind: NoticeKind
    client_id: str | None
    peer: str
    detail: str = ""
    reason_code: int | None = None


class Output:
    """What the core hands the network layer in one pass (BrokerCore.output): the connections with bytes in `out`
    (in the order they got them), the notices to log, a group of changes to commit now, and when to call `tick`
    next. One record, refilled each pass: the network layer is done with it before it asks again."""

    __slots__ = ("commit", "deadline", "dynsec", "notices", "retrying", "sends")

    def __init__(self, notices: deque[Notice]) -> None:
        self.sends: dict[ServerConnection, None] = {}
        self.notices = notices  # the outbox's own: taken (popleft) as they are logged
        self.commit: list[Change] | None = None  # to write now; then BrokerCore.commit_done or commit_failed
        self.retrying = False  # `commit` is a failed group tried again (in the commit thread, not inline)
        self.deadline = math.inf  # when something is due next (a will, an expiry, $SYS, a keep alive, a commit)
        self.dynsec: DynamicSecurity | None = None  # its state changed by a $CONTROL request: to be saved


class Outbox:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.stats = core.stats
        # Connections with output to send, in the order they got it: a publisher's subscribers come before its
        # own acknowledgement, so the network layer writes the deliveries first (the latency path).
        self.dirty: dict[ServerConnection, None] = {}
        self.notices: deque[Notice] = deque(maxlen=10_000)

    def send(self, conn: ServerConnection, packet: Any) -> None:
        data = encode(packet, conn.version)
        limit = conn.client_max_packet_size
        if limit is not None and over_maximum_packet_size(len(data), limit):
            smaller = self.within(conn, packet, limit)
            if smaller is None:
                return
            data = smaller
        self.write(conn, data)

    def within(self, conn: ServerConnection, packet: Any, limit: int) -> bytes | None:
        """A control packet over the client's Maximum Packet Size [MQTT-3.1.2-24]: sent without its optional
        properties (reason string and user properties may not make it too large, 3.14.2.2.3; response
        information is a courtesy), or not at all; the connection then closes (0x95), unless it is closing."""
        if isinstance(packet, Publish):
            # A re-send to a client whose maximum is now smaller: dropped as if delivered [MQTT-3.1.2-25].
            session = conn.session
            if session is not None and packet.packet_id is not None:
                session.outgoing.discard(packet.packet_id)
                self.core.storage.delivery_done(session, packet.packet_id)
            self.stats.dropped_too_large += 1
            return None
        props = getattr(packet, "properties", None)
        if props is not None and props.items:
            lean = props.replace(reason_string=None, user_properties=(), response_information=None)
            data = encode(replace(packet, properties=lean), conn.version)
            if len(data) <= limit:
                return data
        if not isinstance(packet, Disconnect) and not conn.closed:
            what = type(packet).__name__.upper()
            detail = f"{what} over the client's maximum packet size {limit}"
            # A CONNACK that cannot go leaves nothing to talk about: closed without a word (as mosquitto).
            self.core.closing.close(
                conn,
                self.core.clock,
                reason=None if isinstance(packet, ConnAck) else ReasonCode.PACKET_TOO_LARGE,
                detail=detail,
            )
        return None

    def write(self, conn: ServerConnection, data: bytes) -> None:
        conn.out += data
        self.stats.messages_sent += 1
        self.stats.bytes_sent += len(data)
        self.dirty[conn] = None
