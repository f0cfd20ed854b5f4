"""In-process clients: an embedded bridge's local side, attached to the broker without a socket. Its session is an
ordinary one; its deliveries go to a `LocalSink` (net/embedded.py) as messages, not bytes, and what it publishes is
routed as a PUBLISH is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

from .closing import NEVER_EXPIRES, TimerKind
from .flows import OWN_IDS_FROM, FlowState
from .lifecycle import (
    ConnectionState,
    LifecycleEvent,
)
from .outbox import Notice, NoticeKind
from .packets import (
    PubAck,
    PubComp,
    PubRec,
    PubRel,
)
from .persistence import (
    DeliveryReleased,
    IncomingAdded,
    IncomingReleased,
)
from .properties import Properties
from .reasons import ReasonCode
from .server import ServerConnection
from .session import Message, Session, SubscriptionOptions
from .storage import HeldRelease
from .topics import parse_shared

if TYPE_CHECKING:
    from .broker import BrokerCore

_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED

__all__ = ["LocalClients", "LocalSink"]


class LocalSink(Protocol):
    """Where an in-process client's deliveries go instead of bytes (net/embedded.py: an embedded bridge)."""

    def deliver(self, message: Message, qos: int, retain: bool, packet_id: int | None) -> None:
        """A delivery; QoS 1/2 ones stay in flight until LocalClients.acknowledge_internal."""

    def restore_released(self, message: Message, retain: bool, packet_id: int) -> None:
        """A QoS 2 delivery whose PUBREC came before (resume_internal): only its PUBREL is owed."""

    def released(self, packet_id: int) -> None:
        """The PUBREL of a QoS 2 delivery may go (received_internal; with persistence once it is stored)."""

    def taken(self, token: Any) -> None:
        """A message publish_internal did not take at once is stored now: acknowledge it to where it came from."""


class LocalClients:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.out = core.out
        self.storage = core.storage
        self.delivery = core.delivery
        self.router = core.router
        self.closing = core.closing
        self.topics = core.topics
        self.stats = core.stats
        self.sessions = core.sessions

    def attach(
        self,
        client_id: str,
        sink: LocalSink,
        now: float,
        *,
        receive_maximum: int,
        expiry: int = NEVER_EXPIRES,
        bridge: str | None = None,
    ) -> ServerConnection:
        """A client inside the process: a session under `client_id` (resumed if it exists, `expiry` seconds after
        detach; NEVER_EXPIRES by default) whose deliveries go to `sink.deliver(message, qos, retain, packet_id)`
        instead of bytes, at most `receive_maximum` QoS 1/2 unacknowledged (acknowledge_internal). Nothing is
        delivered before resume_internal. `bridge`: the embedded bridge it is the local side of (kept with the
        session, see forget_bridges)."""
        old = self.sessions.get(client_id)
        if old is not None and old.connection is not None:
            self.closing.close(old.connection, now, reason=ReasonCode.SESSION_TAKEN_OVER, detail="session taken over")
            old = self.sessions.get(client_id)
        conn = ServerConnection(f"in-process:{client_id}", now, None)
        conn.sink = sink
        conn.version = 5
        conn.client_id = client_id
        conn.advance(LifecycleEvent.CONNECT)
        conn.advance(LifecycleEvent.CONNACK_ACCEPTED)
        session = old if old is not None else Session(client_id, 5)
        session.version = 5
        session.expiry_interval = expiry
        session.expires_at = None
        session.will = None
        session.will_at = None
        session.bridge = bridge
        session.connection = conn
        session.outgoing.receive_maximum = receive_maximum
        if bridge is not None:
            # The bridge's remote client sends these identifiers as they are (a restart re-sends each message
            # under the one the remote broker knows it by); its own packets use those from OWN_IDS_FROM up.
            session.outgoing.use_ids(1, OWN_IDS_FROM - 1)
        self.sessions[client_id] = session
        conn.session = session
        self.storage.save_session(session)
        return conn

    def forget_bridges(self, configured: dict[str, str], now: float) -> list[Session]:
        """Ends the stored sessions of embedded bridges no longer configured (`configured`: name -> the local
        client identifier each bridge uses now; a bridge whose identifier changed left its old session too), with
        their queues. Called at start, after restore; returns the sessions ended."""
        gone = [
            s for s in self.sessions.values()
            if s.bridge is not None and s.connection is None and configured.get(s.bridge) != s.client_id
        ]  # fmt: skip
        for session in gone:
            self.closing.end_session(session, now)
        return gone

    def resume_internal(self, conn: ServerConnection, now: float) -> None:
        """After attach (and subscribe_internal): what the session holds goes to the sink, in flight first (with
        the same packet identifiers; a QoS 2 one whose PUBREC came to `sink.restore_released`, which owes only
        its PUBREL), then the queue as the window allows."""
        session = conn.session
        assert session is not None and conn.sink is not None
        sink = conn.sink
        client_id = session.client_id
        for entry in session.outgoing.entries():
            p = entry.publish
            message = (
                entry.context
                if type(entry.context) is Message
                else Message(p.topic, p.payload, p.qos, p.retain, p.properties, client_id, now)
            )
            if entry.state is FlowState.AWAIT_PUBCOMP:
                assert p.packet_id is not None  # in flight: it has one
                sink.restore_released(message, p.retain, p.packet_id)
            else:
                sink.deliver(message, p.qos, p.retain, p.packet_id)
        self.delivery.pump(session, now)

    def detach(self, conn: ServerConnection, now: float, *, forget: bool = False) -> None:
        """An in-process client goes: its session stays (deliveries queue for its next attach), or with `forget`
        ends with its subscriptions and queue."""
        if conn.closed:
            return
        conn.advance(LifecycleEvent.DISCONNECT_RECEIVED)  # the in-process client's own going
        session = conn.session
        if session is None or session.connection is not conn:
            return
        session.connection = None
        if forget or not session.expiry_interval:
            self.closing.end_session(session, now)
            return
        if session.expiry_interval != NEVER_EXPIRES:
            session.expires_at = now + session.expiry_interval
            self.closing.schedule(session.expires_at, TimerKind.EXPIRE, session.client_id)
        self.storage.save_session(session)

    def subscribe_internal(self, conn: ServerConnection, filters: dict[str, SubscriptionOptions], now: float) -> None:
        """Sets an in-process client's subscriptions to exactly `filters` (others it had are removed); the
        retained messages of new filters are delivered, as to a SUBSCRIBE."""
        session = conn.session
        assert session is not None and conn.sink is not None
        for flt in [f for f in session.subscriptions if f not in filters]:
            del session.subscriptions[flt]
            self.router.unsubscribe(flt, session.client_id)
        retained: list[tuple[Message, int]] = []
        for flt, opts in filters.items():
            is_new = flt not in session.subscriptions
            self.router.subscribe(flt, session.client_id, opts)
            session.subscriptions[flt] = opts
            if is_new and parse_shared(flt)[0] is None:
                retained += [(m, min(m.qos, opts.qos)) for m in self.router.retained.match(flt)]
        self.storage.save_session(session)
        for message, qos in retained:
            if not message.expired(now):
                self.delivery.deliver(session, message, qos, True, (), now)

    def publish_internal(
        self,
        conn: ServerConnection,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Properties,
        now: float,
        token: Any = None,
        *,
        system: bool = False,
        incoming_id: int | None = None,
    ) -> bool:
        """A message from an in-process client, routed as a PUBLISH is. True: taken (acknowledge it now). False
        with persistence on: `conn.sink.taken(token)` follows once the commit holding what it changed is done
        (acknowledged means stored). A message the broker refuses ($SYS, a name it cannot take, over
        message_size_limit) is dropped, counted, and reported taken, as a PUBACK with a failure ends a flow.
        `system`: the bridge's own notification, which may go to $SYS/...
        `incoming_id`: the packet identifier a QoS 2 message came with from where the client took it (a bridge's
        remote). With persistence on it is kept in the session, in the commit that stores the message, until
        release_internal: after a restart, the origin's re-send under it is known (unreleased_internal) and is
        acknowledged, not published twice."""
        self.core.clock = now
        stats = self.stats
        stats.publish_received_qos[qos] += 1
        stats.publish_received_bytes_qos[qos] += len(payload)
        problem = None
        if topic not in self.topics.ok and (why := self.topics.problem(topic)) is not None:
            problem = why
        elif not system and (topic[:5] == "$SYS/" or topic == "$SYS"):
            problem = (ReasonCode.NOT_AUTHORIZED, "$SYS is the broker's")
        elif self.core.config.limits.message_size_limit and len(payload) > self.core.config.limits.message_size_limit:
            problem = (ReasonCode.QUOTA_EXCEEDED, f"{len(payload)} bytes over message_size_limit")
        elif retain and not self.core.config.limits.retain_available:
            problem = (ReasonCode.RETAIN_NOT_SUPPORTED, "retain is not available")
        if problem is not None:
            detail = f"PUBLISH to {topic!r}: {problem[1]}"
            self.out.notices.append(Notice(NoticeKind.DROPPED, conn.client_id, conn.peer, detail))
            stats.rejected[problem[0]] = stats.rejected.get(problem[0], 0) + 1
            return True
        props = properties
        if props.items and (props.topic_alias is not None or props.subscription_identifiers):
            props = props.replace(topic_alias=None, subscription_identifiers=())
        matched = self.router.route(Message(topic, payload, qos, retain, props, conn.client_id, now), now)
        if not matched and not qos:
            stats.dropped_no_subscriber += 1
        changes = self.storage.changes
        if changes is None:
            return True
        if incoming_id is not None and conn.session is not None:
            conn.session.incoming.accept(incoming_id)
            changes.append(IncomingAdded(conn.client_id, incoming_id))  # type: ignore[arg-type]
        elif not qos:
            return True
        self.storage.held.append((conn, token))
        return False

    def release_internal(self, conn: ServerConnection, packet_id: int) -> None:
        """The origin released a QoS 2 identifier given to publish_internal (a bridge's remote sent PUBREL)."""
        session = conn.session
        if session is None or packet_id not in session.incoming:
            return
        session.incoming.release(PubRel(packet_id))
        if self.storage.changes is not None:
            self.storage.changes.append(IncomingReleased(session.client_id, packet_id))

    def unreleased_internal(self, conn: ServerConnection) -> list[int]:
        """The QoS 2 identifiers publish_internal kept and release_internal has not ended (restored ones too)."""
        return conn.session.incoming.ids() if conn.session is not None else []

    def received_internal(self, conn: ServerConnection, packet_id: int) -> bool:
        """The remote broker's PUBREC for an in-process client's QoS 2 delivery (a bridge's): the flow awaits
        PUBCOMP (acknowledge_internal), and `sink.released(packet_id)` says the PUBREL may go: with persistence
        once the commit saying PUBREC came is done (sent before it, a restart would re-send the PUBLISH, which a
        remote that completed the flow takes for a new message), else at once. False when the session has no
        such flow awaiting PUBREC (the caller sends the PUBREL itself); True while detached (the next attach
        resumes the flow)."""
        session = conn.session
        sink = conn.sink
        if session is None or sink is None or conn.state is _CLOSED:
            return True
        if session.outgoing.pubrec(packet_id) is None:  # no flow of ours awaits that PUBREC
            return False
        row = session.rows.get(packet_id, 0) if session.rows else 0
        if row and self.storage.changes is not None:
            self.storage.changes.append(DeliveryReleased(session.client_id, row))
            self.storage.held.append((conn, HeldRelease(packet_id)))
            return True
        sink.released(packet_id)
        return True

    def acknowledge_internal(self, conn: ServerConnection, packet_id: int, now: float) -> None:
        """An in-process client has dealt with a QoS 1/2 delivery (a bridge: the remote broker's PUBACK, PUBCOMP,
        or a PUBREC refusing it): its flow ends, and queued deliveries move up."""
        session = conn.session
        if session is None or conn.state is _CLOSED:
            return
        self.core.clock = now
        entry = session.outgoing.get(packet_id)
        if entry is None:
            return
        if entry.state is FlowState.AWAIT_PUBACK:
            session.outgoing.acknowledge(PubAck(packet_id))
        else:
            if entry.state is FlowState.AWAIT_PUBREC:
                session.outgoing.acknowledge(PubRec(packet_id))
            session.outgoing.acknowledge(PubComp(packet_id))
        self.storage.delivery_done(session, packet_id)
        self.delivery.pump(session, now)
