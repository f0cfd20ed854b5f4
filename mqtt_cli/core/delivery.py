"""Delivery: a message on its way to one session. Sent at once while the client's window, our send buffer and its
maximum packet size allow (topic aliases applied), else queued within the queue limits; what is dropped is counted
and logged in episodes, never one line a message. `pump` moves the queue on as windows open and buffers drain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .lifecycle import (
    ConnectionState,
    over_maximum_packet_size,
)
from .outbox import Notice, NoticeKind
from .persistence import (
    DeliveryAdded,
    DeliveryDone,
    DeliverySent,
)
from .properties import EMPTY_PROPERTIES
from .server import ServerConnection
from .session import Delivery, Message, QueueLimits, Session
from .storage import HeldDelivery

if TYPE_CHECKING:
    from .broker import BrokerCore

_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED

__all__ = ["Deliverer"]


class _DropEpisode:
    """Messages dropped for one client since dropping started, and since its last notice."""

    __slots__ = ("last_notice", "since", "total", "unsaid")

    def __init__(self, now: float) -> None:
        self.since = self.last_notice = now
        self.total = 1
        self.unsaid = 0


class Deliverer:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.out = core.out
        self.storage = core.storage
        self.stats = core.stats
        c = core.config
        self.limits = QueueLimits(c.limits.max_queued_messages, c.limits.max_queued_bytes, c.limits.queue_drop_oldest)
        # Clients whose messages are being dropped (a full queue or buffer): logged when it starts, counted while
        # it goes on, and when it stops (mosquitto: "Outgoing messages are being dropped for client X").
        self.dropping: dict[str, _DropEpisode] = {}

    def deliver(
        self, session: Session, message: Message, qos: int, retain: bool, sids: tuple[int, ...], now: float
    ) -> None:
        row = 0
        if qos and self.storage.changes is not None and session.expiry_interval:
            # Its DeliveryAdded: made here when it is queued, by send_message when it goes at once (with its packet
            # identifier: one record, not a DeliverySent after it).
            self.storage.row = row = self.storage.row + 1
        conn = session.connection
        if conn is None or conn.state is _CLOSED:
            if qos:
                self.queue_new(session, Delivery(message, qos, retain, sids, row))
            return
        if conn.wants_drain or len(conn.out) >= self.core.config.max_buffered_bytes:
            conn.wants_drain = True
            if qos:
                self.queue_new(session, Delivery(message, qos, retain, sids, row))
            else:
                self.stats.dropped_buffer_full += 1
                session.dropped += 1
                self.dropped(session, "its connection's send buffer is full", "")
            return
        if qos and (session.queue or not session.outgoing.window_open):
            self.queue_new(session, Delivery(message, qos, retain, sids, row))
            return
        self.send_message(conn, session, message, qos, retain, sids, now, row, True)

    def queue_new(self, session: Session, delivery: Delivery) -> None:
        """A new delivery queued (its DeliveryAdded first, when it is stored)."""
        if delivery.row:
            assert self.storage.changes is not None  # rows only with persistence on
            d = delivery
            self.storage.changes.append(
                DeliveryAdded(session.client_id, d.row, d.message, d.qos, d.retain, d.subscription_ids)
            )
        self.enqueue(session, delivery)

    def send_message(
        self,
        conn: ServerConnection,
        session: Session,
        message: Message,
        qos: int,
        retain: bool,
        sids: tuple[int, ...],
        now: float,
        row: int = 0,
        new: bool = False,
    ) -> None:
        """`row`: its stored delivery (0: none); `new`: its DeliveryAdded is still to be made (with the packet
        identifier), else a DeliverySent says which identifier it went with."""
        version = conn.version
        props = None
        if version == 5 and (sids or message.expires_at is not None):
            props = message.delivery_properties(now, sids)
        pid = None
        if qos:
            kept = (props or message.properties) if version == 5 else EMPTY_PROPERTIES  # 3.x has no properties
            pid = session.outgoing.send_fields_lazily(message.topic, message.payload, qos, retain, kept, message)
            assert pid, "the window is open (the callers check)"
            if row:
                if session.rows is None:
                    session.rows = {}
                session.rows[pid] = row
                assert self.storage.changes is not None  # rows only with persistence on
                if new:
                    self.storage.changes.append(DeliveryAdded(session.client_id, row, message, qos, retain, sids, pid))
                else:
                    self.storage.changes.append(DeliverySent(session.client_id, row, pid))
        sink = conn.sink
        if sink is not None:  # an in-process client: the message itself, no bytes
            self.stats.publish_sent_qos[qos] += 1
            self.stats.publish_sent_bytes_qos[qos] += len(message.payload)
            if row and qos == 2:
                assert pid is not None  # QoS 2 has one
                self.storage.held.append((conn, HeldDelivery(message, qos, retain, pid)))
                return
            sink.deliver(message, qos, retain, pid)
            return
        held = row and qos == 2  # written after the commit of its packet identifier (below)
        # A held PUBLISH names its topic in full: packets written meanwhile must not rely on an alias it would set.
        aliases = conn.aliases_out if not held else None
        new_alias = 0
        if aliases is None:
            data = message.wire(version, qos, retain, pid, props)
        else:
            # The client takes topic aliases: a topic sent before goes as its alias and an empty topic name.
            alias = aliases.alias_of(message.topic)
            if not alias:
                alias = new_alias = aliases.free()
            if alias:
                data = message.wire_aliased(qos, retain, pid, props, alias, new_alias != 0)
            else:  # all aliases taken: the topic in full
                data = message.wire(version, qos, retain, pid, props)
        limit = conn.client_max_packet_size
        if limit is not None and over_maximum_packet_size(len(data), limit):  # (the call only when there is one)
            # 3.1.2.11.4: a packet over the client's maximum is not sent, as if it had been delivered.
            if pid is not None:
                session.outgoing.discard(pid)
                self.storage.delivery_done(session, pid)
            self.stats.dropped_too_large += 1
            session.dropped += 1
            return
        if new_alias and aliases is not None:  # (new_alias implies aliases)
            aliases.point(new_alias, message.topic)  # only once the client has it
        stats = self.stats
        stats.publish_sent_qos[qos] += 1
        stats.publish_sent_bytes_qos[qos] += len(message.payload)
        if held:
            # Exactly once across a restart: the client may hold this packet identifier only once the file does
            # (a re-send under another one would be a second message to it). QoS 1 may arrive twice: not held.
            self.storage.held.append((conn, data))
            return
        self.out.write(conn, data)

    def enqueue(self, session: Session, delivery: Delivery) -> None:
        dropped = session.enqueue(delivery, self.limits)
        if dropped is not None:
            self.stats.dropped_queue_full += 1
            self.dropped(session, "its queue is full", f" ({self.queue_limits_text()})")
            if dropped.row and self.storage.changes is not None:
                self.storage.changes.append(DeliveryDone(session.client_id, dropped.row))
        elif self.dropping and (session.connection is None or not session.connection.wants_drain):
            self.drops_end(session)

    def dropped(self, session: Session, why: str, limits: str) -> None:
        """A message dropped for `session`: a notice when dropping starts, then at most one per drop_log_interval
        with the count (never one per message: a flood would flood the log too)."""
        episode = self.dropping.get(session.client_id)
        now = self.core.clock
        if episode is None:
            self.dropping[session.client_id] = _DropEpisode(now)
            detail = f"outgoing messages are being dropped: {why}{limits}"
            self.out.notices.append(Notice(NoticeKind.DROPPED, session.client_id, _peer_of(session), detail))
            return
        episode.total += 1
        episode.unsaid += 1
        if now - episode.last_notice >= self.core.config.drop_log_interval:
            detail = (
                f"{episode.unsaid} more outgoing messages dropped in {now - episode.last_notice:.0f} s "
                f"({episode.total} since dropping started): {why}"
            )
            episode.unsaid = 0
            episode.last_notice = now
            self.out.notices.append(Notice(NoticeKind.DROPPED, session.client_id, _peer_of(session), detail))

    def drops_end(self, session: Session) -> None:
        """The client's queue and buffer take messages again: the end of its dropping, if it was dropping."""
        episode = self.dropping.pop(session.client_id, None)
        if episode is not None:
            detail = (
                f"outgoing messages are no longer dropped: {episode.total} dropped in "
                f"{self.core.clock - episode.since:.0f} s"
            )
            self.out.notices.append(Notice(NoticeKind.DROPPED, session.client_id, _peer_of(session), detail))

    def queue_limits_text(self) -> str:
        limits = self.limits
        parts = [f"max_queued_messages {limits.max_messages}"] if limits.max_messages else []
        if limits.max_bytes:
            parts.append(f"max_queued_bytes {limits.max_bytes}")
        return ", ".join(parts) or "no queue limit"

    def pump(self, session: Session, now: float) -> None:
        """Sends queued deliveries while the client's window and our buffer allow."""
        conn = session.connection
        if conn is None or conn.state is _CLOSED:
            return
        queue = session.queue
        outgoing = session.outgoing
        limit = self.core.config.max_buffered_bytes
        while queue and outgoing.window_open:
            if len(conn.out) >= limit:
                conn.wants_drain = True
                return
            d = session.dequeue()
            if d.message.expired(now):
                self.stats.expired += 1
                if d.row and self.storage.changes is not None:
                    self.storage.changes.append(DeliveryDone(session.client_id, d.row))
                continue
            self.send_message(conn, session, d.message, d.qos, d.retain, d.subscription_ids, now, d.row)
        if self.dropping and not conn.wants_drain and session.client_id in self.dropping and self.has_room(session):
            self.drops_end(session)

    def has_room(self, session: Session) -> bool:
        limits = self.limits
        queue = session.queue
        return (not limits.max_messages or len(queue) < limits.max_messages) and (
            not limits.max_bytes or session.queued_bytes < limits.max_bytes
        )


def _peer_of(session: Session) -> str:
    conn = session.connection
    return conn.peer if conn is not None else "-"
