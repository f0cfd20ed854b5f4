"""BrokerCore: the whole broker without I/O. Bytes and time go in; bytes for each connection come out.

The network layer calls `open`, `receive` (and `receive_rest`), `connection_lost`, `drained`, `tick` and
`shutdown`; after each call, the connections in `dirty` have new bytes in their `out` buffer (or want to be
closed). Nothing here awaits or blocks, so a slow subscriber can never hold up a publisher: deliveries go into
buffers and queues that are bounded, and what they drop is counted.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, Final

from .acl import AclView
from .auth import AuthPolicy, CertificateIdentity, authenticate
from .bridge import LinkStats
from .dynsec import CONTROL_TOPIC, RESPONSE_TOPIC, DynamicSecurity
from .encoder import encode, encode_topic_name, frame_publish
from .errors import MalformedPacket, RemoteProtocolError, UnsupportedProtocolVersion
from .flows import OWN_IDS_FROM, FlowState
from .lifecycle import (
    DEFAULT_RECEIVE_MAXIMUM,
    ConnectionState,
    LifecycleEvent,
    next_topic_alias,
    over_maximum_packet_size,
    receive_maximum_exceeded,
    resolve_topic_alias,
)
from .limits import Limits
from .load import LoadAverages
from .packed import PackedQueue, PackedRetained
from .packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
from .persistence import (
    Change,
    CommitLatency,
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    IncomingReleased,
    RetainedCleared,
    RetainedSet,
    SessionRemoved,
    SessionSaved,
    StoredDelivery,
    StoredSession,
)
from .properties import EMPTY_PROPERTIES, Properties
from .queries import (
    PROTOCOLS,
    BridgeInfo,
    BrokerTotals,
    ClientInfo,
    RetainedInfo,
    SessionInfo,
    SubscriptionInfo,
    payload_preview,
)
from .reader import plain_ack_packet
from .reasons import REASONS_BY_PACKET, SERVER_ONLY_DISCONNECT_REASONS, ReasonCode, reason_name, v3_connack_code
from .records import replace
from .retained import RetainedStore
from .server import ServerConnection
from .session import Delivery, Message, QueueLimits, Session, SubscriptionOptions
from .sharing import SharedGroup, SharedGroups
from .topics import TopicTrie, TrieEntry, parse_shared, topic_filter_error
from .wire import control_character

__all__ = ["NEVER_EXPIRES", "BrokerConfig", "BrokerCore", "BrokerStats", "Notice", "NoticeKind", "PolicyEffect"]

NEVER_EXPIRES = 0xFFFFFFFF
MATCH_CACHE_TOPICS = 4096  # topics whose subscription matches are remembered (emptied when full)
_PINGRESP = encode(PingResp())
_V3_SUBACK_FAILURE = 0x80  # 3.1.1 SUBACK return code: refused
# Packet types only a server sends: from a client, a protocol error (0x82) whatever their contents hold.
_SERVER_TO_CLIENT_ONLY = frozenset({2, 9, 11, 13})  # CONNACK, SUBACK, UNSUBACK, PINGRESP
# The per-packet and per-delivery checks read the state itself: `conn.closed` is a property (a call in pure Python).
_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED


@dataclass(slots=True)
class PolicyEffect:
    """What a reload's new authentication policy did to the connections under the old one."""

    disconnected: int = 0  # clients it no longer admits
    unsubscribed: int = 0  # subscriptions its ACL no longer allows


@dataclass(slots=True)
class BrokerConfig:
    """Limits and features; the limits (core/limits.py) with mosquitto's defaults and meaning."""

    limits: Limits = field(default_factory=Limits)
    max_buffered_bytes: int = 1 << 20  # bytes waiting for a slow socket before QoS 0 is dropped for it
    response_information_prefix: str = "response/"  # 5.0 Response Information: prefix + client id + "/"
    sys_interval: float = 10.0  # seconds between $SYS updates (0: none)
    instance: str = "0"  # makes assigned client identifiers unique across broker runs
    version: str = "mqtt-cli"
    use_username_as_clientid: bool = False  # the user name replaces the client id (none: refused, as mosquitto)
    allow_zero_length_clientid: bool = True  # an empty client id gets one assigned (3.1.1 clean, 5.0)
    auto_id_prefix: str = "auto-"  # assigned ids: prefix, instance, number
    drop_log_interval: float = 10.0  # seconds between the notices counting one client's dropped messages


def _by_qos() -> list[int]:
    return [0, 0, 0]


@dataclass(slots=True)
class BrokerStats:
    """The broker's counters, the one source of $SYS and of the metrics endpoint (core/metrics.py). Only
    increments on paths that run anyway; sums and gauges are worked out when asked for."""

    started: float = 0.0
    sockets_total: int = 0  # connections opened (CONNECT or not)
    clients_total: int = 0  # CONNECTs accepted
    clients_maximum: int = 0
    sessions_expired: int = 0  # sessions ended by their expiry interval while disconnected
    messages_received: int = 0  # every packet, as mosquitto counts
    messages_sent: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    # PUBLISH by QoS (index 0..2); bytes are payload bytes, as mosquitto's $SYS/broker/publish/bytes/...
    publish_received_qos: list[int] = field(default_factory=_by_qos)
    publish_received_bytes_qos: list[int] = field(default_factory=_by_qos)
    publish_sent_qos: list[int] = field(default_factory=_by_qos)
    publish_sent_bytes_qos: list[int] = field(default_factory=_by_qos)
    # Messages lost, by why: a full queue, QoS 0 to a client whose buffer is full, over the client's maximum
    # packet size, expired before delivery, QoS 0 that matched no subscription, and queued for a session whose
    # ACL, applied when its client came back, no longer lets it read them (restored sessions, reloads).
    dropped_queue_full: int = 0
    dropped_buffer_full: int = 0
    dropped_too_large: int = 0
    expired: int = 0
    dropped_no_subscriber: int = 0
    dropped_not_authorized: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # CONNECTs refused, by reason (snake_case name)
    rejected: dict[int, int] = field(default_factory=dict)  # PUBLISHes not taken (ACL, size...), by reason code
    # Persistence: commits and how long each took (the network layer measures), and the episodes during which no
    # commit could be written (a full disk).
    commit_latency: CommitLatency = field(default_factory=CommitLatency)
    store_failures: int = 0

    @property
    def publish_received(self) -> int:
        return sum(self.publish_received_qos)

    @property
    def publish_sent(self) -> int:
        return sum(self.publish_sent_qos)

    @property
    def publish_dropped(self) -> int:
        """As $SYS/broker/publish/messages/dropped: lost to a queue or buffer limit, or too large for the client."""
        return self.dropped_queue_full + self.dropped_buffer_full + self.dropped_too_large

    def count_refused(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1


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


class _HeldDelivery:
    """A QoS 2 delivery to an in-process client (a bridge) waiting in `held` for the commit of its packet
    identifier, as a network client's first QoS 2 PUBLISH does: the remote broker may hold the message under that
    identifier only once a restart would re-send it under the same one."""

    __slots__ = ("message", "packet_id", "qos", "retain")

    def __init__(self, message: Message, qos: int, retain: bool, packet_id: int) -> None:
        self.message = message
        self.qos = qos
        self.retain = retain
        self.packet_id = packet_id


class _HeldRelease:
    """The PUBREL of an in-process client's QoS 2 delivery (a bridge's, to the remote broker) waiting in `held` for
    the commit saying its PUBREC came, as a network client's PUBREL does."""

    __slots__ = ("packet_id",)

    def __init__(self, packet_id: int) -> None:
        self.packet_id = packet_id


class _DropEpisode:
    """Messages dropped for one client since dropping started, and since its last notice."""

    __slots__ = ("last_notice", "since", "total", "unsaid")

    def __init__(self, now: float) -> None:
        self.since = self.last_notice = now
        self.total = 1
        self.unsaid = 0


class _TimerKind(Enum):
    WILL = "will"  # a will's delay ends
    EXPIRE = "expire"  # a session's expiry interval ends


@dataclass(order=True, slots=True)
class _Timer:
    when: float
    seq: int
    kind: _TimerKind = field(compare=False)
    client_id: str = field(compare=False)


class BrokerCore:
    def __init__(self, config: BrokerConfig | None = None, now: float = 0.0) -> None:
        self.config = config or BrokerConfig()
        c = self.config
        self.sessions: dict[str, Session] = {}
        # Match results cached per topic: a publisher's topic recurs, and a hit is one dict lookup where a walk of
        # the trie was a tenth of a fan-in message's time. Any subscription change empties it.
        self.subscriptions: TopicTrie[str, SubscriptionOptions] = TopicTrie(cache_size=MATCH_CACHE_TOPICS)
        self.retained: RetainedStore[Message] = RetainedStore()
        self.stats = BrokerStats(started=now)
        self.connections: set[ServerConnection] = set()
        self.connected = 0  # sessions with a connection
        self.timers_changed = False  # set when the earliest timer moved earlier; the caller resets it
        # Connections with output to send, in the order they got it: a publisher's subscribers come before its
        # own acknowledgement, so the network layer writes the deliveries first (the latency path).
        self.dirty: dict[ServerConnection, None] = {}
        self.notices: deque[Notice] = deque(maxlen=10_000)
        self.limits = QueueLimits(c.limits.max_queued_messages, c.limits.max_queued_bytes, c.limits.queue_drop_oldest)
        self._timers: list[_Timer] = []
        self._seq = 0
        self._assigned = 0
        self.shared = SharedGroups()  # the $share/ groups, kept as subscriptions change; their policy picks
        self._next_sys = now + c.sys_interval if c.sys_interval else None
        self._clock = now  # the latest time given by the network layer (for _send, which is not given one)
        self._topics_ok: set[str] = set()  # topics and filters that passed _topic_problem (bounded)
        self._views: dict[str, AclView] = {}  # client id -> its ACL, while its session lasts (auth hook)
        self.load = LoadAverages(now)  # $SYS/broker/load/..., updated with $SYS
        # Persistence (core/persistence.py): None while off, so the hot paths pay one None check. When on, what
        # is to be stored, and the acknowledgements that must wait for the commit holding it (conn, bytes).
        self.changes: list[Change] | None = None
        self.held: list[tuple[ServerConnection, Any]] = []  # bytes, or an in-process client's token
        self.links: dict[str, LinkStats] = {}  # embedded bridges by name: $SYS/broker/connection/... and metrics
        self._row = 0  # the last delivery row handed out
        # Set by the network layer while no commit can be written: 5.0 publishers are told 0x97 (not stored).
        self.store_failing = False
        # The dynamic security whose state a $CONTROL request changed (the network layer saves it, then resets it).
        self.dynsec_changed: DynamicSecurity | None = None
        # Clients whose messages are being dropped (a full queue or buffer): logged when it starts, counted while
        # it goes on, and when it stops (mosquitto: "Outgoing messages are being dropped for client X").
        self._dropping: dict[str, _DropEpisode] = {}

    # --- persistence ----------------------------------------------------------------------------------------

    def enable_persistence(self) -> None:
        """From now on, changes worth keeping go to `changes`, and PUBACK/PUBREC to `held` (see persistence)."""
        if self.changes is None:
            self.changes = []

    def restore(
        self, sessions: Iterable[StoredSession], retained: Iterable[Message] | PackedRetained, now: float
    ) -> None:
        """What the store kept, before any connection: retained messages, and sessions with their
        subscriptions and the deliveries not yet acknowledged (those that were in flight go first again, as new
        sends). A session whose client was connected when the broker stopped starts its expiry now."""
        if isinstance(retained, PackedRetained):  # from the store: kept frozen, thawed when delivered
            for frozen in retained.take():
                self.retained.set_frozen(retained.topic(frozen), frozen, retained.thaw)
        else:
            for message in retained:
                self.retained.set(message.topic, message)
        due: list[Session] = []  # wills of connections the stop ended, published once every session is back
        for stored in sessions:
            session = Session(stored.client_id, stored.version)
            session.will = stored.will
            if stored.expiry_interval == 0:
                # Kept only for its will: the stop ended its connection and its session, so the will is due.
                if stored.will is not None:
                    due.append(session)
                if self.changes is not None:
                    self.changes.append(SessionRemoved(stored.client_id))
                continue
            session.username = stored.username
            session.bridge = stored.bridge
            session.expiry_interval = stored.expiry_interval
            session.expires_at = stored.expires_at
            connected = session.expires_at is None and stored.will_at is None
            idle = self._idle_expiry(session)
            if session.expires_at is None and idle is not None:
                session.expires_at = now + idle
            if session.expires_at is not None:
                self._schedule(session.expires_at, _TimerKind.EXPIRE, session.client_id)
            if stored.will is not None:
                if stored.will_at is not None:  # its connection had closed; the will delay was running
                    session.will_at = stored.will_at
                    self._schedule(stored.will_at, _TimerKind.WILL, session.client_id)
                elif connected:
                    # Its connection was ended by the stop, not by a DISCONNECT: the will is due [MQTT-3.1.2-8],
                    # after its delay counted from now (as the session's expiry is).
                    delay = (stored.will.properties.will_delay_interval or 0) if stored.version == 5 else 0
                    if delay and session.expiry_interval:
                        session.will_at = now + delay
                        self._schedule(session.will_at, _TimerKind.WILL, session.client_id)
                    else:
                        due.append(session)
            for pid in stored.incoming:
                session.incoming.accept(pid)
            for flt, opts in stored.subscriptions:
                self._subscribe(flt, session.client_id, opts)
                session.subscriptions[flt] = opts
            if stored.queued:
                session.queue = stored.queued
                session.queued_bytes = stored.queued.size
                self._row = max(self._row, stored.queued.last_row)
            if stored.deliveries:
                queue: deque[Delivery] | PackedQueue = session.queue or deque()
                for d in stored.deliveries:
                    self._row = max(self._row, d.row)
                    if d.packet_id is not None:
                        # In flight when the broker stopped: re-sent after the next CONNACK with its packet
                        # identifier and DUP, or as PUBREL once PUBREC came (4.4).
                        self._restore_inflight(session, d, now)
                        continue
                    queue.append(Delivery(d.message, d.qos, d.retain, d.subscription_ids, d.row))
                    session.queued_bytes += d.message.size
                if queue:
                    session.queue = queue
            self.sessions[session.client_id] = session
            if connected:  # its expiry (and will delay) start now: on file
                self._save_session(session)
        for session in due:
            self._publish_will(session, now)
            if session.expiry_interval:
                self._save_session(session)

    def _restore_inflight(self, session: Session, d: StoredDelivery, now: float) -> None:
        m = d.message
        props = m.delivery_properties(now, d.subscription_ids) if session.version == 5 else EMPTY_PROPERTIES
        publish = Publish(m.topic, m.payload, d.qos, d.retain, True, d.packet_id, props)
        session.outgoing.restore(publish, d.released, m)
        if session.rows is None:
            session.rows = {}
        assert d.packet_id is not None  # a stored delivery in flight has its packet identifier
        session.rows[d.packet_id] = d.row

    def release(self, held: list[tuple[ServerConnection, Any]]) -> None:
        """The commit holding what these acknowledgements promise is done: they go out (to open connections; an
        in-process client's `taken` is told, with the token its publish_internal gave)."""
        for conn, data in held:
            if conn.state is not _CLOSED:
                if conn.sink is not None:
                    kind = type(data)
                    if kind is _HeldDelivery:
                        conn.sink.deliver(data.message, data.qos, data.retain, data.packet_id)
                    elif kind is _HeldRelease:
                        conn.sink.released(data.packet_id)
                    else:
                        conn.sink.taken(data)
                else:
                    self._write(conn, data)

    def _save_session(self, session: Session) -> None:
        """A persistent session as it is now; a session that ends with its connection only while it has a will
        (the will is due if the broker stops before the client disconnects)."""
        changes = self.changes
        if changes is not None and (session.expiry_interval or session.will is not None):
            subs = tuple(session.subscriptions.items())
            changes.append(
                SessionSaved(
                    session.client_id,
                    session.version,
                    session.expiry_interval,
                    session.expires_at,
                    subs,
                    session.username,
                    session.will,
                    session.will_at,
                    session.bridge,
                )
            )

    def _delivery_done(self, session: Session, packet_id: int) -> None:
        rows = session.rows
        if rows:
            key: Any = packet_id  # (boxed once; get + del: compiled, cheaper than the pop method call)
            row = rows.get(key, 0)
            if row:
                del rows[key]
                if self.changes is not None:
                    self.changes.append(DeliveryDone(session.client_id, row))

    # --- in-process clients (an embedded bridge's local side) ----------------------------------------------------

    def attach(
        self,
        client_id: str,
        sink: Any,
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
            self._close(old.connection, now, reason=ReasonCode.SESSION_TAKEN_OVER, detail="session taken over")
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
        self._save_session(session)
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
            self._end_session(session, now)
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
                sink.restore_released(message, p.retain, p.packet_id)
            else:
                sink.deliver(message, p.qos, p.retain, p.packet_id)
        self._pump(session, now)

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
            self._end_session(session, now)
            return
        if session.expiry_interval != NEVER_EXPIRES:
            session.expires_at = now + session.expiry_interval
            self._schedule(session.expires_at, _TimerKind.EXPIRE, session.client_id)
        self._save_session(session)

    def subscribe_internal(self, conn: ServerConnection, filters: dict[str, SubscriptionOptions], now: float) -> None:
        """Sets an in-process client's subscriptions to exactly `filters` (others it had are removed); the
        retained messages of new filters are delivered, as to a SUBSCRIBE."""
        session = conn.session
        assert session is not None and conn.sink is not None
        for flt in [f for f in session.subscriptions if f not in filters]:
            del session.subscriptions[flt]
            self._unsubscribe(flt, session.client_id)
        retained: list[tuple[Message, int]] = []
        for flt, opts in filters.items():
            is_new = flt not in session.subscriptions
            self._subscribe(flt, session.client_id, opts)
            session.subscriptions[flt] = opts
            if is_new and parse_shared(flt)[0] is None:
                retained += [(m, min(m.qos, opts.qos)) for m in self.retained.match(flt)]
        self._save_session(session)
        for message, qos in retained:
            if not message.expired(now):
                self._deliver(session, message, qos, True, (), now)

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
        self._clock = now
        stats = self.stats
        stats.publish_received_qos[qos] += 1
        stats.publish_received_bytes_qos[qos] += len(payload)
        problem = None
        if topic not in self._topics_ok and (why := self._topic_problem(topic)) is not None:
            problem = why
        elif not system and (topic[:5] == "$SYS/" or topic == "$SYS"):
            problem = (ReasonCode.NOT_AUTHORIZED, "$SYS is the broker's")
        elif self.config.limits.message_size_limit and len(payload) > self.config.limits.message_size_limit:
            problem = (ReasonCode.QUOTA_EXCEEDED, f"{len(payload)} bytes over message_size_limit")
        elif retain and not self.config.limits.retain_available:
            problem = (ReasonCode.RETAIN_NOT_SUPPORTED, "retain is not available")
        if problem is not None:
            detail = f"PUBLISH to {topic!r}: {problem[1]}"
            self.notices.append(Notice(NoticeKind.DROPPED, conn.client_id, conn.peer, detail))
            stats.rejected[problem[0]] = stats.rejected.get(problem[0], 0) + 1
            return True
        props = properties
        if props.items and (props.topic_alias is not None or props.subscription_identifiers):
            props = props.replace(topic_alias=None, subscription_identifiers=())
        matched = self._route(Message(topic, payload, qos, retain, props, conn.client_id, now), now)
        if not matched and not qos:
            stats.dropped_no_subscriber += 1
        changes = self.changes
        if changes is None:
            return True
        if incoming_id is not None and conn.session is not None:
            conn.session.incoming.accept(incoming_id)
            changes.append(IncomingAdded(conn.client_id, incoming_id))  # type: ignore[arg-type]
        elif not qos:
            return True
        self.held.append((conn, token))
        return False

    def release_internal(self, conn: ServerConnection, packet_id: int) -> None:
        """The origin released a QoS 2 identifier given to publish_internal (a bridge's remote sent PUBREL)."""
        session = conn.session
        if session is None or packet_id not in session.incoming:
            return
        session.incoming.release(PubRel(packet_id))
        if self.changes is not None:
            self.changes.append(IncomingReleased(session.client_id, packet_id))

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
        if session is None or conn.state is _CLOSED:
            return True
        if session.outgoing.pubrec(packet_id) is None:  # no flow of ours awaits that PUBREC
            return False
        row = session.rows.get(packet_id, 0) if session.rows else 0
        if row and self.changes is not None:
            self.changes.append(DeliveryReleased(session.client_id, row))
            self.held.append((conn, _HeldRelease(packet_id)))
            return True
        conn.sink.released(packet_id)
        return True

    def acknowledge_internal(self, conn: ServerConnection, packet_id: int, now: float) -> None:
        """An in-process client has dealt with a QoS 1/2 delivery (a bridge: the remote broker's PUBACK, PUBCOMP,
        or a PUBREC refusing it): its flow ends, and queued deliveries move up."""
        session = conn.session
        if session is None or conn.state is _CLOSED:
            return
        self._clock = now
        entry = session.outgoing.get(packet_id)
        if entry is None:
            return
        if entry.state is FlowState.AWAIT_PUBACK:
            session.outgoing.acknowledge(PubAck(packet_id))
        else:
            if entry.state is FlowState.AWAIT_PUBREC:
                session.outgoing.acknowledge(PubRec(packet_id))
            session.outgoing.acknowledge(PubComp(packet_id))
        self._delivery_done(session, packet_id)
        self._pump(session, now)

    # --- the network layer's entry points ------------------------------------------------------------------

    def open(
        self,
        peer: str,
        now: float,
        policy: AuthPolicy | None = None,
        certificate: CertificateIdentity | None = None,
        *,
        versions: frozenset[int] | None = None,
    ) -> ServerConnection:
        """A new connection from `peer`: the protocol levels its listener allows (None: all), its listener's auth
        policy (None: no checks) and its TLS client certificate."""
        conn = ServerConnection(peer, now, self.config.limits.max_packet_size or None, policy, certificate, versions)
        self.connections.add(conn)
        self.stats.sockets_total += 1
        return conn

    def receive(
        self, conn: ServerConnection, received: bytes | bytearray | memoryview, now: float, batch: int = 0
    ) -> None:
        """Handles bytes read from `conn`. With `batch`, stops after that many packets that get an answer or free a
        window (all but QoS 0 PUBLISH) and keeps the rest in `conn.backlog`: the network layer sends what those
        produced, so that a client with a small window gets its acknowledgements and sends more while the rest is
        handled, then calls `receive_rest`."""
        if conn.closed:  # (the view, once a read: `conn.state` itself would stay narrowed below, where it moves)
            return
        if conn.backlog is not None:  # (the network layer handles it all before reading again)
            self.receive_rest(conn, now)
            if conn.closed:
                return
        data = received if type(received) is bytes else bytes(received)  # a WebSocket's may be a bytearray
        conn.last_received = self._clock = now
        self.stats.bytes_received += len(data)
        if conn.state is not _CONNECTED and data and data[0] != 0x10 and not conn.reader.buffered:
            # [MQTT-3.1.0-1]: the first packet is CONNECT. Anything else (an HTTP request, TLS to a plain port) is
            # not waited for: its "remaining length" could keep the connection open until the timeout.
            what = "a TLS handshake" if data[0] == 0x16 else f"first byte 0x{data[0]:02X}"
            self._close(conn, now, reason=None, detail=f"not MQTT: {what} where CONNECT was due")
            return
        while True:
            try:
                packets = conn.reader.feed(data)
            except RemoteProtocolError as err:
                for packet in err.packets:
                    self._handle(conn, packet, now)
                    if conn.state is _CLOSED:
                        return
                self._protocol_error(conn, err, now)
                if conn.state is _CLOSED or not conn.reader.buffered:
                    return
                # Every protocol error closes the connection today; should one ever be answered and the connection
                # go on, what came after that packet in the same read waits in the reader: read on (the fuzzer found
                # that hang when an invalid filter was answered SUBACK 0x8F).
                data = b""
                continue
            self._handle_from(conn, packets, 0, now, batch)
            return

    def receive_rest(self, conn: ServerConnection, now: float, batch: int = 0) -> None:
        """Handles what `receive` kept in `conn.backlog` (the next `batch`, as there; 0: all of it)."""
        packets = conn.backlog
        if packets is None:
            return
        conn.backlog = None
        if conn.state is not _CLOSED:
            self._handle_from(conn, packets, conn.backlog_at, now, batch)

    def _handle_from(self, conn: ServerConnection, packets: list[Any], start: int, now: float, batch: int) -> None:
        n = len(packets)
        i = start
        answered = 0
        while i < n:
            packet = packets[i]
            i += 1
            self._handle(conn, packet, now)
            if conn.state is _CLOSED:
                return
            if batch and (type(packet) is not Publish or packet.qos):
                answered += 1
                if answered == batch and i < n:
                    conn.backlog = packets
                    conn.backlog_at = i
                    return

    def connection_lost(self, conn: ServerConnection, now: float) -> None:
        """The socket closed or failed. Not a normal DISCONNECT unless one was received first."""
        if not conn.closed:
            self._close(conn, now, reason=None, detail="connection lost", event=LifecycleEvent.TRANSPORT_CLOSED)
        conn.backlog = None
        self.connections.discard(conn)
        self.dirty.pop(conn, None)

    def reconfigure(self, config: BrokerConfig, now: float) -> None:
        """A reload's new limits. Queue limits and $SYS apply at once to every session; the keep alive, topic
        alias maximum, in-flight window and packet size to connections made from now on (a connection's were
        agreed in its CONNACK). `instance` and `version` stay as they were."""
        config = dataclasses.replace(config, instance=self.config.instance, version=self.config.version)
        if config.sys_interval != self.config.sys_interval:
            self._next_sys = now + config.sys_interval if config.sys_interval else None
            self.timers_changed = True
        self.config = config
        self.limits = QueueLimits(
            config.limits.max_queued_messages, config.limits.max_queued_bytes, config.limits.queue_drop_oldest
        )
        self._topics_ok.clear()  # checked again against the new max_topic_levels

    def internal_error(self, conn: ServerConnection, now: float, detail: str) -> None:
        """Handling this connection's input failed unexpectedly: close it (5.0: 0x83), keep everything else."""
        if not conn.closed:
            self._close(conn, now, reason=ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, detail=f"internal error: {detail}")

    def disconnect(self, conn: ServerConnection, now: float, reason: int, detail: str) -> None:
        """The server ends this connection (its listener closed, say): 5.0 clients get DISCONNECT `reason`, and
        the will is published as for any close that is not the client's DISCONNECT."""
        if not conn.closed:
            self._close(conn, now, reason=reason, detail=detail)

    def keepalive_expired(self, conn: ServerConnection, now: float) -> None:
        if not conn.closed:
            self._close(conn, now, reason=ReasonCode.KEEP_ALIVE_TIMEOUT, detail="keep alive timeout")

    def drained(self, conn: ServerConnection, now: float) -> None:
        """The writer emptied `out`: deliveries held back for this connection can go on."""
        if conn.wants_drain and conn.state is not _CLOSED and conn.session is not None:
            conn.wants_drain = False
            self._pump(conn.session, now)

    def tick(self, now: float) -> float | None:
        """Runs what is due (delayed wills, session expiry, $SYS); returns when to call again."""
        self._clock = now
        timers = self._timers
        while timers and timers[0].when <= now:
            timer = heapq.heappop(timers)
            session = self.sessions.get(timer.client_id)
            if session is None or session.connection is not None:
                continue
            if timer.kind is _TimerKind.WILL and session.will_at == timer.when:
                session.will_at = None
                self._publish_will(session, now)
                self._save_session(session)  # the file forgets the will
            elif timer.kind is _TimerKind.EXPIRE and session.expires_at == timer.when:
                self.stats.sessions_expired += 1
                self._end_session(session, now)
        if self._next_sys is not None and now >= self._next_sys:
            self._publish_sys(now)
            self._next_sys = now + self.config.sys_interval
        deadlines = [t for t in (timers[0].when if timers else None, self._next_sys) if t is not None]
        return min(deadlines) if deadlines else None

    def shutdown(self, now: float) -> None:
        """Server shutting down: wills are published (the close is not normal), then 5.0 clients get 0x8B.

        Wills go first, while every subscriber is still connected to receive them; sessions end with the server,
        so will delays do not apply.
        """
        for session in list(self.sessions.values()):
            if session.will is not None:
                self._publish_will(session, now)
        for conn in list(self.connections):
            if not conn.closed:
                self._close(conn, now, reason=ReasonCode.SERVER_SHUTTING_DOWN, detail="server shutting down")

    def take_dirty(self) -> dict[ServerConnection, None]:
        """The connections with output, in the order they got it (iterate over it), and none from now on."""
        dirty = self.dirty
        self.dirty = {}
        return dirty

    # --- dispatch ---------------------------------------------------------------------------------------------

    def _handle(self, conn: ServerConnection, packet: Any, now: float) -> None:
        self.stats.messages_received += 1
        kind = type(packet)
        if kind is int:  # a plain acknowledgement (the reader's plain_acks)
            if conn.state is _CONNECTED and self._on_plain_ack(conn, packet, now):
                return
            packet = plain_ack_packet(packet)  # anything else: the packet's general path
            kind = type(packet)
        if kind is Publish:
            if conn.state is _CONNECTED:
                self._on_publish(conn, packet, now)
                return
        elif kind is Connect:
            self._on_connect(conn, packet, now)
            return
        if conn.state is not _CONNECTED:
            self._close(conn, now, reason=None, detail=f"{kind.__name__.upper()} before CONNECT")
            return
        handler = _HANDLERS.get(kind)
        if handler is None:
            self._close(
                conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail=f"a client does not send {kind.__name__.upper()}"
            )
            return
        handler(self, conn, packet, now)

    def _protocol_error(self, conn: ServerConnection, err: RemoteProtocolError, now: float) -> None:
        packet = err.packet
        if isinstance(err, UnsupportedProtocolVersion) and not conn.connected:
            level = err.details.get("protocol_level", 0)
            if err.details.get("protocol_name") not in ("MQTT", "MQIsdp"):
                # Not MQTT at all [MQTT-3.1.2-1]: closed without an answer in any version's format (mosquitto).
                self._close(conn, now, reason=None, detail=str(err), refused="not_mqtt")
                return
            if level >= 5:
                conn.version = 5
                self._send(conn, ConnAck(False, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION))
            else:
                conn.version = 4
                self._send(conn, ConnAck(False, 1))
            self._close(conn, now, reason=None, detail=str(err), refused="unsupported_protocol_version")
            return
        if err.reason_code == ReasonCode.TOPIC_FILTER_INVALID and isinstance(packet, Subscribe | Unsubscribe):
            # Not a topic filter at all (a misplaced wildcard, an empty filter, a broken $share/): a malformed
            # packet (4.7, 4.13), closed with 0x81 as mosquitto does. 0x8F is for a filter "correctly formed" but
            # not allowed (3.9.3), which this broker has none of.
            self._close(conn, now, reason=ReasonCode.MALFORMED_PACKET, detail=str(err))
            return
        if isinstance(packet, Connect) and not conn.connected:
            conn.version = packet.protocol_version
            if conn.version == 5:
                conn.client_max_packet_size = packet.properties.maximum_packet_size
            if conn.version == 5 and err.reason_code in REASONS_BY_PACKET[2] and self.config.limits.reason_strings:
                # The CONNACK is a MAY (5.0 3.1.4, 4.13); mosquitto closes without one.
                self._send(conn, ConnAck(False, err.reason_code, Properties(reason_string=str(err)[:200])))
            self._close(
                conn,
                now,
                reason=None,
                detail=str(err),
                refused=refusal_name(err.reason_code or ReasonCode.MALFORMED_PACKET),
            )
            return
        if err.packet_type in _SERVER_TO_CLIENT_ONLY:
            # Its type alone breaks the protocol: that is the error to report, before whatever its body breaks.
            self._close(
                conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail=f"a client does not send this packet type: {err}"
            )
            return
        self._close(conn, now, reason=err.reason_code, detail=str(err))

    # --- CONNECT ------------------------------------------------------------------------------------------

    def _on_connect(self, conn: ServerConnection, p: Connect, now: float) -> None:
        try:
            conn.advance(LifecycleEvent.CONNECT)
        except RemoteProtocolError:
            self._close(conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail="second CONNECT")
            return
        c = self.config
        conn.version = version = p.protocol_version
        if conn.versions is not None and version not in conn.versions:
            self._refuse(
                conn,
                ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
                f"MQTT level {version} is not allowed on this listener",
                now,
            )
            return
        conn.bridge = p.bridge and version != 5
        props = p.properties
        client_id = p.client_id
        problem = _text_problem(client_id, "client identifier") or _text_problem(p.username, "user name")
        if problem is None and p.will is not None:
            why = self._topic_problem(p.will.topic)
            problem = f"will topic: {why[1]}" if why is not None else None
        if problem is not None:
            self._protocol_error(conn, MalformedPacket(f"CONNECT {problem}", packet=p, packet_type=1), now)
            return
        assigned = None
        if not client_id and not c.use_username_as_clientid:
            if version == 3 or (version == 4 and not p.clean_start):
                # 3.1 has no empty ids; 3.1.1 allows one only with a clean session [MQTT-3.1.3-8].
                self._refuse(
                    conn, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "empty client identifier without a clean session", now
                )
                return
            if not c.allow_zero_length_clientid:
                self._refuse(
                    conn, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "empty client identifier (allow_zero_length_clientid "
                    "is false)", now,
                )  # fmt: skip
                return
            self._assigned += 1
            client_id = f"{c.auto_id_prefix}{c.instance}-{self._assigned}"
            if version == 5:
                assigned = client_id
        if version == 5 and (props.maximum_packet_size or 5) < 5:
            # Not even a CONNACK (5 bytes) or a PUBACK fits in it, and nothing may go over it [MQTT-3.1.2-24]:
            # refused, the CONNACK tried within it (so not sent), and closed.
            conn.client_max_packet_size = props.maximum_packet_size
            self._refuse(
                conn,
                ReasonCode.PACKET_TOO_LARGE,
                f"maximum packet size {props.maximum_packet_size} fits no answer",
                now,
            )
            return
        if version == 5 and props.authentication_method is not None:
            self._refuse(
                conn,
                ReasonCode.BAD_AUTHENTICATION_METHOD,
                f"authentication method {props.authentication_method!r} not supported",
                now,
            )
            return
        keepalive = p.keepalive
        server_keepalive = None
        max_keepalive = c.limits.max_keepalive
        if max_keepalive and (keepalive > max_keepalive or (keepalive == 0 and max_keepalive < 65535)):
            if version < 5:
                self._refuse(
                    conn,
                    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                    f"keep alive {keepalive} s is over the maximum {c.limits.max_keepalive} s",
                    now,
                )
                return
            keepalive = server_keepalive = c.limits.max_keepalive
        if conn.policy is not None and not self._admit(conn, p, client_id, now):
            return
        if c.use_username_as_clientid:
            # After authentication, as mosquitto: the user name it logged in with (or its certificate's identity).
            username = conn.username if conn.policy is not None else p.username
            if not username:
                conn.client_id = client_id or None  # for the log line
                self._refuse(conn, ReasonCode.NOT_AUTHORIZED, "no user name to use as the client id "
                             "(use_username_as_clientid)", now)  # fmt: skip
                return
            client_id = username
        conn.client_id = client_id
        conn.keepalive = keepalive
        self.stats.clients_total += 1
        # Session take-over (3.1.4-3): the old connection goes, its will according to its delay.
        session = self.sessions.get(client_id)
        if session is not None and session.connection is not None:
            if not p.clean_start and session.expiry_interval:
                # The session goes on with the new connection: the old will is replaced, not published; it is
                # published when the take-over ends the session (5.0 3.1.2.5; mosquitto).
                session.will = None
            self._close(session.connection, now, reason=ReasonCode.SESSION_TAKEN_OVER, detail="session taken over")
            session = self.sessions.get(client_id)  # gone if it was to end with its connection
        elif session is not None and session.will_at is not None:
            # A new connection before the will delay passed: the will is not published, whether or not this
            # connection starts clean [MQTT-3.1.3-9] (5.0 3.1.2.5 [MQTT-3.1.2-8]).
            session.will = None
            session.will_at = None
        if session is not None and (p.clean_start or self._other_user(client_id, conn)):
            self._end_session(session, now)
            session = None
        session_present = session is not None
        if session is None:
            session = Session(client_id, version)
            self.sessions[client_id] = session
        else:
            # A reconnection in time cancels a delayed will (3.1.3.2.2).
            session.will_at = None
            session.expires_at = None
        session.version = version
        if version == 5:
            expiry = props.session_expiry_interval or 0
        else:
            expiry = 0 if p.clean_start else NEVER_EXPIRES
        session.expiry_interval = expiry
        session.will = p.will
        session.connection = conn
        session.username = conn.username
        if self.changes is not None:
            if expiry or p.will is not None:
                self._save_session(session)
            elif session_present:
                self.changes.append(SessionRemoved(client_id))  # kept no longer than this connection
        self._attach_acl(conn, client_id)
        self.connected += 1
        conn.session = session
        receive_maximum = props.receive_maximum if version == 5 else None
        # No limit still means 65,535: past that every packet identifier is in flight (2.2.1).
        session.outgoing.receive_maximum = receive_maximum or c.limits.max_inflight or DEFAULT_RECEIVE_MAXIMUM
        # What the CONNACK announces holds for this connection, whatever a reload changes later.
        conn.receive_maximum_announced = c.limits.max_inflight if 0 < c.limits.max_inflight < 65535 else 0
        conn.retain_available = c.limits.retain_available
        if version == 5:
            conn.client_max_packet_size = props.maximum_packet_size
            conn.topic_alias_maximum = c.limits.max_topic_alias
            if props.topic_alias_maximum:
                conn.aliases_out = {}
                conn.alias_out_maximum = props.topic_alias_maximum
            conn.reader.version = 5
        conn.advance(LifecycleEvent.CONNACK_ACCEPTED)
        ack_props = EMPTY_PROPERTIES
        if version == 5:
            # In mosquitto's order, for those who compare packets byte by byte.
            named: dict[str, Any] = {}
            if c.limits.max_topic_alias:
                named["topic_alias_maximum"] = c.limits.max_topic_alias
            if server_keepalive is not None:
                named["server_keep_alive"] = server_keepalive
            if assigned is not None:
                named["assigned_client_identifier"] = assigned
            if not c.limits.retain_available:
                named["retain_available"] = 0
            if c.limits.max_packet_size:
                named["maximum_packet_size"] = c.limits.max_packet_size
            if 0 < c.limits.max_inflight < 65535:
                named["receive_maximum"] = c.limits.max_inflight
            if props.request_response_information == 1 and c.response_information_prefix:
                # 4.10: a topic tree of the client's own for its response topics.
                named["response_information"] = f"{c.response_information_prefix}{client_id}/"
            ack_props = Properties(**named)
        self._send(conn, ConnAck(session_present and version > 3, 0, ack_props))  # 3.1 has no such flag
        if conn.closed:  # not even the CONNACK fits the client's Maximum Packet Size
            return
        self.stats.clients_maximum = max(self.stats.clients_maximum, self.connected)
        self.notices.append(Notice(NoticeKind.CONNECTED, client_id, conn.peer, f"MQTT level {version}"))
        if session_present:
            self._expire_inflight(session, version, now)
            for packet in session.outgoing.resend():
                self._send(conn, _strip(packet) if version < 5 and isinstance(packet, Publish) else packet)
        self._pump(session, now)

    # --- authentication and ACL (core/auth.py, core/acl.py) ----------------------------------------------------

    def _admit(self, conn: ServerConnection, p: Connect, client_id: str, now: float) -> bool:
        """Checks the CONNECT's credentials against the listener's policy; refuses it (not authorized) if wrong."""
        assert conn.policy is not None
        result = authenticate(conn.policy, p.username, p.password, conn.certificate, client_id)
        if result.refusal is None:
            conn.username = result.username
            return True
        conn.client_id = client_id  # for the log line
        conn.login_failed = True  # the network layer makes the client wait for its CONNACK
        who = f"user {result.username!r}" if result.username is not None else "no user name"
        self._refuse(conn, ReasonCode.NOT_AUTHORIZED, f"login failed ({who}): {result.refusal.value}", now)
        return False

    def _other_user(self, client_id: str, conn: ServerConnection) -> bool:
        """Whether a session kept under an ACL was another user's: it is not handed over (its subscriptions and
        queued messages were granted to that user), the client starts afresh as with a clean start."""
        view = self._views.get(client_id)
        if view is not None:
            return view.username != conn.username
        # No view: a session restored from the store, or kept from before an ACL was configured. Under an ACL it
        # goes only to the user it was granted to.
        session = self.sessions.get(client_id)
        checked = conn.policy is not None and conn.policy.controls_access
        return checked and session is not None and session.username != conn.username

    def _attach_acl(self, conn: ServerConnection, client_id: str) -> None:
        policy = conn.policy
        view = policy.view(conn.username, client_id) if policy is not None else None
        if view is None:
            conn.acl = None
            self._views.pop(client_id, None)
        else:
            conn.acl = self._views[client_id] = view
            session = self.sessions.get(client_id)
            if session is not None:
                self._apply_view(session, view, conn)

    def _apply_view(self, session: Session, view: AclView, conn: ServerConnection) -> None:
        """A session resumed under an ACL: what it kept that the ACL does not let its user read goes. Messages
        queued while no view or an older ACL applied (restored from the store, queued before a reload) are checked
        here, before any is sent; so are its subscriptions, as a reload checks a connected client's."""
        queue = session.queue
        if queue:
            kept: deque[Delivery] = deque()
            for d in queue:
                if view.can_read(d.message.topic):
                    kept.append(d)
                    continue
                session.queued_bytes -= d.message.size
                self.stats.dropped_not_authorized += 1
                if d.row and self.changes is not None:
                    self.changes.append(DeliveryDone(session.client_id, d.row))
            session.queue = kept
        gone = [f for f in session.subscriptions if not view.may_subscribe(f)]
        for flt in gone:
            del session.subscriptions[flt]
            self._unsubscribe(flt, session.client_id)
            why = f"{flt!r}: not allowed by the ACL"
            self.notices.append(Notice(NoticeKind.UNSUBSCRIBED, conn.client_id, conn.peer, why))
        if gone:
            self._save_session(session)

    def replace_policy(
        self, old: AuthPolicy, new: AuthPolicy, now: float, effect: PolicyEffect | None = None
    ) -> PolicyEffect:
        """A reload: every connection under `old` goes on under `new` (see apply_policy); what that did, added to
        `effect` when given (a reload of several listeners counts once)."""
        effect = effect if effect is not None else PolicyEffect()
        for conn in [c for c in self.connections if c.policy is old]:
            self.apply_policy(conn, new, now, effect)
        return effect

    def apply_policy(
        self, conn: ServerConnection, new: AuthPolicy, now: float, effect: PolicyEffect | None = None
    ) -> None:
        """A reload, for one connection. A client the new policy would not admit (its user gone from the password
        file or given another password hash, anonymous access now refused) is disconnected (5.0: 0x98
        administrative action, as mosquitto); otherwise it gets the new ACL at once, and loses the subscriptions
        the new ACL no longer lets it read from (the filters SUBSCRIBE would now refuse). Counted in `effect`."""
        old = conn.policy
        conn.policy = new
        if old is None or not conn.connected or conn.closed or conn.client_id is None:
            return
        if not _still_admitted(old, new, conn):
            self._close(
                conn, now, reason=ReasonCode.ADMINISTRATIVE_ACTION, detail="no longer authorized after a reload"
            )
            if effect is not None:
                effect.disconnected += 1
            return
        session = conn.session
        had = len(session.subscriptions) if session is not None else 0
        self._attach_acl(conn, conn.client_id)
        view = conn.acl
        if session is None or view is None:
            return
        for flt in [f for f in session.subscriptions if not view.may_subscribe(f)]:
            del session.subscriptions[flt]
            self._unsubscribe(flt, session.client_id)
            why = f"{flt!r}: ACL after a reload"
            self.notices.append(Notice(NoticeKind.UNSUBSCRIBED, conn.client_id, conn.peer, why))
            self._save_session(session)
        if effect is not None:
            effect.unsubscribed += had - len(session.subscriptions)  # here or by _attach_acl's _apply_view

    def _control(self, conn: ServerConnection, dynsec: DynamicSecurity, topic: str, payload: bytes, now: float) -> None:
        """A request on a $CONTROL topic: dynamic security's are answered on its response topic (QoS 0, as
        mosquitto), then the clients whose rights changed are disconnected (5.0: 0x98 administrative action), as
        mosquitto kicks them; other $CONTROL topics are taken and dropped."""
        if topic != CONTROL_TOPIC:
            return
        result = dynsec.handle(payload, conn.client_id or "", conn.username)
        for line in result.log:
            self.notices.append(Notice(NoticeKind.DYNSEC, conn.client_id, conn.peer, line))
        if result.changed:
            self.dynsec_changed = dynsec
        self._route(Message(RESPONSE_TOPIC, result.response, 0, False, EMPTY_PROPERTIES, None, now), now)
        if result.kick or result.kick_anonymous:
            self.kick(dynsec, result.kick, result.kick_anonymous, now)

    def kick(self, dynsec: DynamicSecurity, usernames: frozenset[str], anonymous: bool, now: float) -> None:
        """Disconnects the clients under `dynsec` logged in as one of `usernames` (or without a user name, when
        `anonymous`), without their wills (mosquitto_kick_client_by_username): they log in again under the new
        rules."""
        for other in list(self.connections):
            policy = other.policy
            if policy is None or policy.dynsec is not dynsec or not other.connected or other.closed:
                continue
            if (other.username is None and anonymous) or (other.username is not None and other.username in usernames):
                if other.session is not None:
                    other.session.will = None
                self._close(
                    other, now, reason=ReasonCode.ADMINISTRATIVE_ACTION, detail="dynamic security changed its rights"
                )

    def _expire_inflight(self, session: Session, version: int, now: float) -> None:
        """Before re-sending after a reconnect (5.0 3.3.2.3.3): a PUBLISH carries the expiry interval it has left,
        not the one it had at its first send [MQTT-3.3.2-6]. An expired QoS 1 message is dropped, as mosquitto
        does; an expired QoS 2 one goes with 0 (the client may hold its packet identifier already, and a new
        message under that identifier would look like a duplicate)."""
        outgoing = session.outgoing
        for entry in outgoing.entries():
            message = entry.context
            if type(message) is not Message or message.expires_at is None or entry.state is FlowState.AWAIT_PUBCOMP:
                continue
            p = entry.publish
            if p.qos == 1 and message.expired(now):
                assert p.packet_id is not None  # in flight: it has one
                outgoing.discard(p.packet_id)
                self._delivery_done(session, p.packet_id)
                self.stats.expired += 1
            elif version == 5:
                remaining = max(0, int(message.expires_at - now + 0.999999))
                props = p.properties.replace(message_expiry_interval=remaining)
                entry.publish = Publish(p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, props)

    def _refuse(self, conn: ServerConnection, reason_v5: int, detail: str, now: float) -> None:
        code = reason_v5 if conn.version == 5 else v3_connack_code(reason_v5)
        self._send(conn, ConnAck(False, code))
        self._close(
            conn, now, reason=None, detail=detail, refused=refusal_name(reason_v5), event=LifecycleEvent.CONNACK_REFUSED
        )

    # --- PUBLISH and its flows --------------------------------------------------------------------------------

    def _on_publish(self, conn: ServerConnection, p: Publish, now: float) -> None:
        stats = self.stats
        stats.publish_received_qos[p.qos] += 1
        stats.publish_received_bytes_qos[p.qos] += len(p.payload)
        topic = p.topic
        props = p.properties
        if props.items:  # 5.0 only: the codec refuses properties before
            alias = props.topic_alias
            if alias is not None:
                aliases = conn.aliases_in
                if aliases is None:  # made at the first alias: most connections never use one
                    aliases = conn.aliases_in = {}
                try:
                    topic = resolve_topic_alias(aliases, conn.topic_alias_maximum, alias, topic)
                except RemoteProtocolError as err:
                    self._close(conn, now, reason=err.reason_code, detail=str(err))
                    return
                props = props.replace(topic_alias=None)
            if props.subscription_identifier is not None:
                self._close(
                    conn,
                    now,
                    reason=ReasonCode.PROTOCOL_ERROR,
                    detail="PUBLISH from a client with a subscription identifier",
                )
                return
        if topic not in self._topics_ok:
            why = self._topic_problem(topic)
            if why is not None:
                self._close(conn, now, reason=why[0], detail=f"PUBLISH topic name: {why[1]}")
                return
        if p.retain and not conn.retain_available:  # as its CONNACK said (a reload changes it for new ones)
            self._close(conn, now, reason=ReasonCode.RETAIN_NOT_SUPPORTED, detail="retain is not available")
            return
        qos = p.qos
        denied = None
        if topic[:5] == "$SYS/" or topic == "$SYS":
            denied = "$SYS is the broker's"  # its own figures: a client cannot publish or retain there (as mosquitto)
        elif conn.acl is not None and not conn.acl.can_write(topic):
            denied = "the ACL does not let it write there"
        if denied is not None:
            self._drop_publish(conn, p, ReasonCode.NOT_AUTHORIZED, f"PUBLISH to {topic!r}: {denied}")
            return
        limit = self.config.limits.message_size_limit
        if limit and len(p.payload) > limit:
            # mosquitto answers 0x95, which PUBACK and PUBREC may not carry; 0x97 (quota exceeded) may.
            self._drop_publish(
                conn,
                p,
                ReasonCode.QUOTA_EXCEEDED,
                f"PUBLISH to {topic!r}: {len(p.payload)} bytes over message_size_limit",
            )
            return
        # Nothing can be stored: a 5.0 publisher is told so (0x97) and keeps the message (not taken, not delivered);
        # a re-send of a QoS 2 message stored before still gets its plain PUBREC below.
        if qos and self.store_failing and conn.version == 5 and (qos == 1 or not self._stored_before(conn, p)):
            self._unstored(conn, p)
            return
        if qos == 2:
            session = conn.session
            assert session is not None and p.packet_id is not None  # the codec checks: QoS > 0 has a packet id
            if not session.incoming.publish_received(p):
                # A re-send: acknowledge only; with persistence, after the commit that holds the first one.
                self._acknowledge(conn, encode(PubRec(p.packet_id), conn.version))
                return
            limit = conn.receive_maximum_announced
            if receive_maximum_exceeded(len(session.incoming), limit) and conn.version == 5:
                self._close(
                    conn, now, reason=ReasonCode.RECEIVE_MAXIMUM_EXCEEDED, detail=f"receive maximum {limit} exceeded"
                )
                return
            # PUBREC first, 0x00 whether anyone subscribed or not, as mosquitto: the message is ours from here, and
            # the publisher hears so before its own subscription (if any) hears the message. With persistence, it
            # waits for the commit of what the message changed (held), as a PUBACK does.
            pubrec = b"\x50\x02" + p.packet_id.to_bytes(2, "big")
            if self.changes is None:
                self._write(conn, pubrec)
            elif session.expiry_interval:
                # Its re-send after a restart must find the identifier: acknowledged, not delivered again.
                self.changes.append(IncomingAdded(session.client_id, p.packet_id))
        if topic[:1] == "$" and topic[:9] == "$CONTROL/" and conn.policy is not None and conn.policy.dynsec is not None:
            # Requests to the broker, not messages: answered, never routed (mosquitto's control topics).
            self._control(conn, conn.policy.dynsec, topic, p.payload, now)
            if conn.closed:  # the request changed its own rights
                return
            matched = True
        elif not qos and not p.retain and not props.items:
            # A plain QoS 0 message (fan-in, fan-out): when nothing about its subscriptions and their clients
            # needs more than the bytes, they are written without building the broker's Message.
            entries = self.subscriptions.match(topic)
            if not entries:
                stats.dropped_no_subscriber += 1
                return
            if self._forward(entries, topic, p.payload, conn.client_id):
                return
            message = Message(topic, p.payload, qos, False, props, conn.client_id, now)
            if not self._route_to(entries, message, now):
                stats.dropped_no_subscriber += 1
            return
        else:
            message = Message(topic, p.payload, qos, p.retain, props, conn.client_id, now)
            matched = self._route(message, now)
            if not matched and not qos:
                stats.dropped_no_subscriber += 1
        if qos == 1:
            # PUBACK written directly: the short form is the same in every version.
            assert p.packet_id is not None  # the codec checks: QoS > 0 has a packet id
            pid = p.packet_id.to_bytes(2, "big")
            if matched or conn.version < 5:
                ack = b"\x40\x02" + pid
            else:
                ack = b"\x40\x03" + pid + b"\x10"  # no matching subscribers
            if self.changes is None:
                self._write(conn, ack)
            else:
                self.held.append((conn, ack))
        elif qos == 2 and self.changes is not None:
            self.held.append((conn, pubrec))

    def _drop_publish(self, conn: ServerConnection, p: Publish, reason: int, detail: str) -> None:
        """A PUBLISH not taken, the connection kept: acknowledged so the client's flow ends (3.x: as if taken, as
        mosquitto does); 5.0 is told why in PUBACK / PUBREC."""
        self.notices.append(Notice(NoticeKind.DROPPED, conn.client_id, conn.peer, detail))
        self.stats.rejected[reason] = self.stats.rejected.get(reason, 0) + 1
        qos = p.qos
        if qos:
            assert p.packet_id is not None  # the codec checks: QoS > 0 has a packet id
            pid = p.packet_id.to_bytes(2, "big")
            kind = b"\x40" if qos == 1 else b"\x50"
            if conn.version == 5:
                self._acknowledge(conn, kind + b"\x03" + pid + bytes((reason,)))  # a failed PUBREC ends QoS 2 too
            elif qos == 1:
                self._acknowledge(conn, kind + b"\x02" + pid)
            else:
                session = conn.session
                assert session is not None
                session.incoming.publish_received(p)  # 3.x: the flow goes on to PUBREL / PUBCOMP
                self._acknowledge(conn, kind + b"\x02" + pid)

    def _stored_before(self, conn: ServerConnection, p: Publish) -> bool:
        pid = p.packet_id
        return conn.session is not None and pid is not None and pid in conn.session.incoming

    def _unstored(self, conn: ServerConnection, p: Publish) -> None:
        """The store cannot be written: PUBACK/PUBREC 0x97 at once (held acknowledgements wait for a commit that
        cannot come now). Counted, not logged one by one: the network layer logs the failure."""
        self.stats.rejected[0x97] = self.stats.rejected.get(0x97, 0) + 1
        kind = b"\x40" if p.qos == 1 else b"\x50"
        assert p.packet_id is not None  # QoS 1/2: the codec checks
        self._write(conn, kind + b"\x03" + p.packet_id.to_bytes(2, "big") + b"\x97")

    def _acknowledge(self, conn: ServerConnection, data: bytes) -> None:
        """A PUBACK/PUBREC: at once, or with persistence behind the held ones, so acknowledgements keep the order
        of their PUBLISHes [MQTT-4.6.0-2] and none goes before the commit of what came before it."""
        if self.changes is None:
            self._write(conn, data)
        else:
            self.held.append((conn, data))

    def _on_puback(self, conn: ServerConnection, p: PubAck | PubRec | PubComp, now: float) -> None:
        session = conn.session
        assert session is not None
        kind = type(p)
        if kind is PubAck or kind is PubComp:
            if self._flow_ended(session, p.packet_id, kind is PubAck, now):
                return
        elif p.reason_code < 0x80 and self._pubrec_taken(conn, session, p.packet_id):
            return
        held = False
        try:
            _, pubrel = session.outgoing.acknowledge(p)
            if session.rows is not None:
                if pubrel is None:
                    # PUBACK, PUBCOMP or a failed PUBREC: the flow is over, nothing more to re-send from the file.
                    self._delivery_done(session, p.packet_id)
                else:
                    row = session.rows.get(p.packet_id, 0)
                    if row and self.changes is not None:
                        # PUBREL waits for the commit saying so: sent before it, a restart would re-send the
                        # PUBLISH, which a client that completed the flow takes for a new message.
                        self.changes.append(DeliveryReleased(session.client_id, row))
                        held = True
        except RemoteProtocolError as err:
            if p.packet_id not in session.outgoing:
                # An acknowledgement for nothing in flight (a client acknowledging twice, or after our restart)
                # is ignored, as mosquitto does; a PUBREC is answered so the client's flow can end (5.0: 0x92,
                # 4.3.3). Neither version calls it a protocol error. A wrong kind of acknowledgement for a message
                # in flight still is one.
                if isinstance(p, PubRec):
                    self._send(
                        conn, PubRel(p.packet_id, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if conn.version == 5 else 0)
                    )
                return
            self._close(conn, now, reason=err.reason_code, detail=str(err))
            return
        if pubrel is not None:
            if held:
                self.held.append((conn, encode(pubrel, conn.version)))
            else:
                self._send(conn, pubrel)
        else:
            self._pump(session, now)

    def _on_pubrel(self, conn: ServerConnection, p: PubRel, now: float) -> None:
        session = conn.session
        assert session is not None
        if not self._pubrel_taken(conn, session, p.packet_id):
            # Not awaiting PUBREL (a re-send after its PUBCOMP, or never received): 5.0 answers 0x92.
            self._send(conn, session.incoming.release(p, conn.version))

    # The common cases of the acknowledgements, from the packet identifier alone (a `plain_acks` reader gives the
    # broker most of them as ints: `_on_plain_ack`). Each returns False, having changed nothing, when it is not the
    # common case: the caller then takes the packet's general path.

    def _on_plain_ack(self, conn: ServerConnection, ack: int, now: float) -> bool:
        """A PUBACK, PUBREC, PUBREL or PUBCOMP with reason 0 and no properties, as `plain_ack(first, packet id)`."""
        session = conn.session
        if session is None:
            return False
        first = ack >> 16
        pid = ack & 0xFFFF
        if first == 0x40 or first == 0x70:
            return self._flow_ended(session, pid, first == 0x40, now)
        if first == 0x50:
            return self._pubrec_taken(conn, session, pid)
        return self._pubrel_taken(conn, session, pid)

    def _flow_ended(self, session: Session, pid: int, puback: bool, now: float) -> bool:
        """PUBACK or PUBCOMP (any reason code) ending a QoS 1 or 2 flow in flight: what acknowledge() would do."""
        outgoing = session.outgoing
        if (outgoing.puback(pid) if puback else outgoing.pubcomp(pid)) is None:
            return False
        if session.rows is not None:
            self._delivery_done(session, pid)
        self._pump(session, now)
        return True

    def _pubrec_taken(self, conn: ServerConnection, session: Session, pid: int) -> bool:
        """A successful PUBREC for a QoS 2 message in flight: PUBREL written directly, the short form is the same in
        every version; with persistence after the commit saying so when the message is on file (sent before it, a
        restart would re-send the PUBLISH, which a client that completed the flow takes for a new message)."""
        if not session.outgoing.pubrec(pid):
            return False
        release = b"\x62\x02" + pid.to_bytes(2, "big")
        rows = session.rows
        row = rows.get(pid, 0) if rows is not None else 0
        if row and self.changes is not None:
            self.changes.append(DeliveryReleased(session.client_id, row))
            self.held.append((conn, release))
        else:
            self._write(conn, release)
        return True

    def _pubrel_taken(self, conn: ServerConnection, session: Session, pid: int) -> bool:
        """A PUBREL for an identifier awaiting it: PUBCOMP written directly, the short form is the same in every
        version. With persistence, the end of the flow goes after the commit of the release: sent before it, a
        restart would keep the identifier, and the publisher's next message under it would be taken for a re-send
        and lost."""
        if not session.incoming.released(pid):
            return False
        pubcomp = b"\x70\x02" + pid.to_bytes(2, "big")
        if self.changes is not None and session.expiry_interval:
            self.changes.append(IncomingReleased(session.client_id, pid))
            self.held.append((conn, pubcomp))
        else:
            self._write(conn, pubcomp)
        return True

    def _route(self, message: Message, now: float) -> bool:
        """Stores a retained message and delivers to every matching subscription; True when any matched."""
        topic = message.topic
        if message.retain:
            if message.payload:
                self.retained.set(topic, message)
            else:
                self.retained.discard(topic)
            if self.changes is not None and message.origin is not None:  # $SYS figures (origin None) are not kept
                self.changes.append(RetainedSet(message) if message.payload else RetainedCleared(topic))
        return self._route_to(self.subscriptions.match(topic), message, now)

    def _forward(
        self, entries: list[TrieEntry[str, SubscriptionOptions]], topic: str, payload: bytes, origin: str | None
    ) -> bool:
        """_route_to for a plain QoS 0 message (no properties, not retained), written as bytes to each subscriber
        (one encoding per protocol family). False, with nothing done, when any subscription needs the general
        path: shared, under an ACL, several of one client (merged), a 5.0 subscription identifier; or when any
        receiver does: topic aliases, an in-process client, a full buffer, a packet over its maximum, offline."""
        if self._views:
            return False
        if len(entries) > 1 and len({entry[1] for entry in entries}) < len(entries):
            return False
        sessions = self.sessions
        buffered = self.config.max_buffered_bytes
        v3 = v5 = b""
        receivers: list[tuple[ServerConnection, bytes]] = []
        for entry in entries:
            client_id = entry[1]
            opts = entry[2]
            if entry[0][:7] == "$share/":
                return False
            session = sessions.get(client_id)
            if session is None or (opts.no_local and client_id == origin):
                continue  # nothing to send (as _route_to)
            conn = session.connection
            if (
                conn is None
                or conn.state is _CLOSED
                or conn.wants_drain
                or conn.sink is not None
                or conn.aliases_out is not None
            ):
                return False
            if len(conn.out) >= buffered:
                return False
            # What Message.wire frames for this variant (QoS 0, no retain flag, no properties).
            if conn.version == 5:
                if opts.subscription_identifier:
                    return False
                data = v5 = v5 or frame_publish(0x30, encode_topic_name(topic), b"", b"\x00", payload)
            else:
                data = v3 = v3 or frame_publish(0x30, encode_topic_name(topic), b"", b"", payload)
            limit = conn.client_max_packet_size
            if limit is not None and len(data) > limit:
                return False
            receivers.append((conn, data))
        stats = self.stats
        for conn, data in receivers:
            stats.publish_sent_qos[0] += 1
            stats.publish_sent_bytes_qos[0] += len(payload)
            self._write(conn, data)
        return True

    def _route_to(self, entries: list[TrieEntry[str, SubscriptionOptions]], message: Message, now: float) -> bool:
        """Delivers `message` to the matched subscriptions `entries`; True when there are any."""
        if not entries:
            return False
        topic = message.topic
        origin = message.origin
        views = self._views  # empty unless an ACL is in force: then every delivery is checked for read access
        if len(entries) == 1 and entries[0][0][:7] != "$share/":
            # The common case: one subscription matches, nothing to merge.
            _, client_id, opts = entries[0]
            session = self.sessions.get(client_id)
            if views and not _may_read(views, client_id, topic):
                return True
            if session is not None and not (opts.no_local and client_id == origin):
                sid = (opts.subscription_identifier,) if opts.subscription_identifier else ()
                qos = message.qos if message.qos < opts.qos else opts.qos
                self._deliver(session, message, qos, message.retain and opts.retain_as_published, sid, now)
            return True
        targets: dict[str, tuple[int, bool, tuple[int, ...]]] = {}
        groups: dict[str, None] = {}  # the $share/ filters matched (one entry per member), each group once
        for flt, client_id, opts in entries:
            if flt[:7] == "$share/":
                groups[flt] = None
                continue
            if opts.no_local and client_id == origin:
                continue
            if views and not _may_read(views, client_id, topic):
                continue
            if client_id in targets:  # overlapping subscriptions of one client
                _merge(targets, client_id, opts)
            else:  # what _merge does for a client's first one, without the call (fan-out's hot loop)
                ident = opts.subscription_identifier
                targets[client_id] = (opts.qos, opts.retain_as_published, (ident,) if ident else ())
        for flt in groups:
            # Shared subscriptions: one member per group, the policy's pick.
            group = self.shared.groups[flt]
            chosen = self._shared_member(group, topic, views)
            if chosen:
                _merge(targets, chosen, group.options[chosen])
        sessions = self.sessions
        mqos = message.qos
        mretain = message.retain
        for client_id, (sub_qos, rap, sids) in targets.items():
            session = sessions.get(client_id)
            if session is None:
                continue
            self._deliver(session, message, mqos if mqos < sub_qos else sub_qos, mretain and rap, sids, now)
        return True

    def _shared_member(self, group: SharedGroup, topic: str, views: dict[str, AclView]) -> str:
        """The member of a shared group `topic` goes to: the policy's pick among those allowed to read it, the
        connected ones when there are any; "" when none may read it."""
        sessions = self.sessions
        members = group.members
        if views:
            members = [c for c in members if _may_read(views, c, topic)]
            if not members:
                return ""
        online: list[str] = []
        for client_id in members:
            session = sessions.get(client_id)
            if session is not None and session.connection is not None:
                online.append(client_id)
        # All offline: one of them still takes it, queued in its session for when it is back.
        return self.shared.policy.pick(group, online if online else members)

    def _subscribe(self, flt: str, client_id: str, opts: SubscriptionOptions) -> bool:
        """Indexes a subscription (True when new): the trie matches it, a $share/ one joins its group too."""
        is_new = self.subscriptions.add(flt, client_id, opts)
        if flt[:7] == "$share/":
            self.shared.add(flt, client_id, opts)
        return is_new

    def _unsubscribe(self, flt: str, client_id: str) -> None:
        self.subscriptions.remove(flt, client_id)
        if flt[:7] == "$share/":
            self.shared.remove(flt, client_id)

    def _deliver(
        self, session: Session, message: Message, qos: int, retain: bool, sids: tuple[int, ...], now: float
    ) -> None:
        row = 0
        if qos and self.changes is not None and session.expiry_interval:
            self._row = row = self._row + 1
            self.changes.append(DeliveryAdded(session.client_id, row, message, qos, retain, sids))
        conn = session.connection
        if conn is None or conn.state is _CLOSED:
            if qos:
                self._enqueue(session, Delivery(message, qos, retain, sids, row))
            return
        if conn.wants_drain or len(conn.out) >= self.config.max_buffered_bytes:
            conn.wants_drain = True
            if qos:
                self._enqueue(session, Delivery(message, qos, retain, sids, row))
            else:
                self.stats.dropped_buffer_full += 1
                session.dropped += 1
                self._dropped(session, "its connection's send buffer is full", "")
            return
        if qos and (session.queue or not session.outgoing.window_open):
            self._enqueue(session, Delivery(message, qos, retain, sids, row))
            return
        self._send_message(conn, session, message, qos, retain, sids, now, row)

    def _send_message(
        self,
        conn: ServerConnection,
        session: Session,
        message: Message,
        qos: int,
        retain: bool,
        sids: tuple[int, ...],
        now: float,
        row: int = 0,
    ) -> None:
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
                assert self.changes is not None  # rows only with persistence on
                self.changes.append(DeliverySent(session.client_id, row, pid))
        sink = conn.sink
        if sink is not None:  # an in-process client: the message itself, no bytes
            self.stats.publish_sent_qos[qos] += 1
            self.stats.publish_sent_bytes_qos[qos] += len(message.payload)
            if row and qos == 2:
                assert pid is not None  # QoS 2 has one
                self.held.append((conn, _HeldDelivery(message, qos, retain, pid)))
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
            alias = aliases.get(message.topic, 0)
            if not alias and len(aliases) < conn.alias_out_maximum:  # (the call only when one is left)
                alias = new_alias = next_topic_alias(aliases.values(), conn.alias_out_maximum)
            if alias:
                data = message.wire_aliased(qos, retain, pid, props, alias, new_alias != 0)
            else:  # all aliases taken: the topic in full
                data = message.wire(version, qos, retain, pid, props)
        limit = conn.client_max_packet_size
        if limit is not None and over_maximum_packet_size(len(data), limit):  # (the call only when there is one)
            # 3.1.2.11.4: a packet over the client's maximum is not sent, as if it had been delivered.
            if pid is not None:
                session.outgoing.discard(pid)
                self._delivery_done(session, pid)
            self.stats.dropped_too_large += 1
            session.dropped += 1
            return
        if new_alias and aliases is not None:  # (new_alias implies aliases)
            aliases[message.topic] = new_alias  # only once the client has it
        stats = self.stats
        stats.publish_sent_qos[qos] += 1
        stats.publish_sent_bytes_qos[qos] += len(message.payload)
        if held:
            # Exactly once across a restart: the client may hold this packet identifier only once the file does
            # (a re-send under another one would be a second message to it). QoS 1 may arrive twice: not held.
            self.held.append((conn, data))
            return
        self._write(conn, data)

    def _enqueue(self, session: Session, delivery: Delivery) -> None:
        dropped = session.enqueue(delivery, self.limits)
        if dropped is not None:
            self.stats.dropped_queue_full += 1
            self._dropped(session, "its queue is full", f" ({self._queue_limits_text()})")
            if dropped.row and self.changes is not None:
                self.changes.append(DeliveryDone(session.client_id, dropped.row))
        elif self._dropping and (session.connection is None or not session.connection.wants_drain):
            self._drops_end(session)

    def _dropped(self, session: Session, why: str, limits: str) -> None:
        """A message dropped for `session`: a notice when dropping starts, then at most one per drop_log_interval
        with the count (never one per message: a flood would flood the log too)."""
        episode = self._dropping.get(session.client_id)
        now = self._clock
        if episode is None:
            self._dropping[session.client_id] = _DropEpisode(now)
            detail = f"outgoing messages are being dropped: {why}{limits}"
            self.notices.append(Notice(NoticeKind.DROPPED, session.client_id, _peer_of(session), detail))
            return
        episode.total += 1
        episode.unsaid += 1
        if now - episode.last_notice >= self.config.drop_log_interval:
            detail = (
                f"{episode.unsaid} more outgoing messages dropped in {now - episode.last_notice:.0f} s "
                f"({episode.total} since dropping started): {why}"
            )
            episode.unsaid = 0
            episode.last_notice = now
            self.notices.append(Notice(NoticeKind.DROPPED, session.client_id, _peer_of(session), detail))

    def _drops_end(self, session: Session) -> None:
        """The client's queue and buffer take messages again: the end of its dropping, if it was dropping."""
        episode = self._dropping.pop(session.client_id, None)
        if episode is not None:
            detail = (
                f"outgoing messages are no longer dropped: {episode.total} dropped in "
                f"{self._clock - episode.since:.0f} s"
            )
            self.notices.append(Notice(NoticeKind.DROPPED, session.client_id, _peer_of(session), detail))

    def _queue_limits_text(self) -> str:
        limits = self.limits
        parts = [f"max_queued_messages {limits.max_messages}"] if limits.max_messages else []
        if limits.max_bytes:
            parts.append(f"max_queued_bytes {limits.max_bytes}")
        return ", ".join(parts) or "no queue limit"

    def _pump(self, session: Session, now: float) -> None:
        """Sends queued deliveries while the client's window and our buffer allow."""
        conn = session.connection
        if conn is None or conn.state is _CLOSED:
            return
        queue = session.queue
        outgoing = session.outgoing
        limit = self.config.max_buffered_bytes
        while queue and outgoing.window_open:
            if len(conn.out) >= limit:
                conn.wants_drain = True
                return
            d = session.dequeue()
            if d.message.expired(now):
                self.stats.expired += 1
                if d.row and self.changes is not None:
                    self.changes.append(DeliveryDone(session.client_id, d.row))
                continue
            self._send_message(conn, session, d.message, d.qos, d.retain, d.subscription_ids, now, d.row)
        if self._dropping and not conn.wants_drain and session.client_id in self._dropping and self._has_room(session):
            self._drops_end(session)

    def _has_room(self, session: Session) -> bool:
        limits = self.limits
        queue = session.queue
        return (not limits.max_messages or len(queue) < limits.max_messages) and (
            not limits.max_bytes or session.queued_bytes < limits.max_bytes
        )

    # --- SUBSCRIBE / UNSUBSCRIBE --------------------------------------------------------------------------

    def _filters_problem(self, conn: ServerConnection, filters: Iterable[str], what: str, now: float) -> bool:
        """Closes the connection (True) when a filter holds a control character or too many levels (mosquitto:
        0x81 for both in SUBSCRIBE and UNSUBSCRIBE)."""
        for flt in filters:
            if flt not in self._topics_ok:
                why = self._topic_problem(flt)
                if why is not None:
                    self._close(conn, now, reason=ReasonCode.MALFORMED_PACKET, detail=f"{what} topic filter: {why[1]}")
                    return True
        return False

    def _topic_problem(self, topic: str) -> tuple[int, str] | None:
        """Why the broker refuses a topic name or filter that the protocol allows: a control character (a MAY of
        1.5.4, a log-injection risk) or more levels than `max_topic_levels`. (reason code, detail) or None; topics
        found fine are remembered, so a topic seen before costs one set lookup."""
        at = control_character(topic)
        if at >= 0:
            return ReasonCode.MALFORMED_PACKET, f"control character U+{ord(topic[at]):04X} at character {at}"
        limit = self.config.limits.max_topic_levels
        # Counted as mosquitto does (TOPIC_HIERARCHY_LIMIT): separators, so 201 levels pass and 202 do not.
        if limit and topic.count("/") > limit:
            return ReasonCode.PROTOCOL_ERROR, f"{topic.count('/') + 1} levels, over the limit of {limit}"
        ok = self._topics_ok
        if len(ok) >= 4096:
            ok.clear()
        ok.add(topic)
        return None

    def _on_subscribe(self, conn: ServerConnection, p: Subscribe, now: float) -> None:
        session = conn.session
        assert session is not None
        if self._filters_problem(conn, (sub.topic_filter for sub in p.subscriptions), "SUBSCRIBE", now):
            return
        version = conn.version
        sid = p.properties.subscription_identifier if version == 5 else None
        codes = []
        retained: list[tuple[Message, int, bool, tuple[int, ...]]] = []
        notices = self.notices
        for sub in p.subscriptions:
            flt = sub.topic_filter
            if topic_filter_error(flt) is not None:
                code = ReasonCode.TOPIC_FILTER_INVALID if version == 5 else _V3_SUBACK_FAILURE
                codes.append(code)
                detail = f"SUBSCRIBE {flt!r} QoS {sub.qos}: refused, not a valid topic filter"
                notices.append(Notice(NoticeKind.REFUSED, conn.client_id, conn.peer, detail, code))
                continue
            if conn.acl is not None and not conn.acl.may_subscribe(flt):
                # Our one difference from mosquitto's acl_file (which grants and then filters every delivery).
                code = ReasonCode.NOT_AUTHORIZED if version == 5 else _V3_SUBACK_FAILURE
                detail = f"SUBSCRIBE {flt!r} QoS {sub.qos}: refused by the ACL"
                notices.append(Notice(NoticeKind.REFUSED, conn.client_id, conn.peer, detail, code))
                codes.append(code)
                continue
            if conn.bridge:
                # A 3.x bridge has no subscription options: the flag asks for what 5.0 bridges ask for (mosquitto).
                opts = SubscriptionOptions(sub.qos, True, True, sub.retain_handling, sid)
            else:
                opts = SubscriptionOptions(sub.qos, sub.no_local, sub.retain_as_published, sub.retain_handling, sid)
            is_new = self._subscribe(flt, session.client_id, opts)
            session.subscriptions[flt] = opts
            codes.append(sub.qos)
            replaced = "" if is_new else ", replacing the one it had"
            detail = f"SUBSCRIBE {flt!r} QoS {sub.qos}: granted QoS {sub.qos}{replaced}"
            notices.append(Notice(NoticeKind.SUBSCRIBE, conn.client_id, conn.peer, detail))
            group, real = parse_shared(flt)
            if group is not None or sub.retain_handling == 2 or (sub.retain_handling == 1 and not is_new):
                continue  # no retained messages for shared subscriptions (4.8.2) or when not asked for
            for message in self.retained.match(real):
                if conn.acl is not None and not conn.acl.can_read(message.topic):
                    continue
                retained.append((message, min(message.qos, sub.qos), True, (sid,) if sid else ()))
        self._save_session(session)
        self._send(conn, SubAck(p.packet_id, tuple(codes)))
        for message, qos, retain, sids in retained:
            if message.expired(now):
                self.retained.discard(message.topic)
                self.stats.expired += 1
                continue
            self._deliver(session, message, qos, retain, sids, now)

    def _on_unsubscribe(self, conn: ServerConnection, p: Unsubscribe, now: float) -> None:
        session = conn.session
        assert session is not None
        if self._filters_problem(conn, p.topic_filters, "UNSUBSCRIBE", now):
            return
        codes: list[int] = []
        for flt in p.topic_filters:
            if conn.acl is not None and not conn.acl.may_unsubscribe(flt):
                # Dynamic security's unsubscribe ACLs (mosquitto): the subscription stays.
                codes.append(ReasonCode.NOT_AUTHORIZED)
                continue
            existed = session.subscriptions.pop(flt, None) is not None
            if existed:
                self._unsubscribe(flt, session.client_id)
            codes.append(0x00 if existed else 0x11)
            detail = f"UNSUBSCRIBE {flt!r}: {'removed' if existed else 'no such subscription (0x11)'}"
            self.notices.append(Notice(NoticeKind.UNSUBSCRIBE, conn.client_id, conn.peer, detail))
        self._save_session(session)
        self._send(conn, UnsubAck(p.packet_id, tuple(codes) if conn.version == 5 else ()))

    def _on_pingreq(self, conn: ServerConnection, p: PingReq, now: float) -> None:
        self._write(conn, _PINGRESP)

    def _on_disconnect(self, conn: ServerConnection, p: Disconnect, now: float) -> None:
        session = conn.session
        assert session is not None
        if conn.version == 5:
            if p.reason_code in SERVER_ONLY_DISCONNECT_REASONS:
                # [MQTT-3.14.2-1]: not a code a client may send; an abnormal end, so the will is published.
                self._close(
                    conn,
                    now,
                    reason=ReasonCode.PROTOCOL_ERROR,
                    detail=f"DISCONNECT with 0x{p.reason_code:02X}, a server's code",
                )
                return
            expiry = p.properties.session_expiry_interval
            if expiry is not None:
                if session.expiry_interval == 0 and expiry != 0:
                    # [MQTT-3.14.2-2]
                    self._close(
                        conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail="DISCONNECT sets a session expiry after 0"
                    )
                    return
                session.expiry_interval = expiry
        if p.reason_code == 0x04:
            # "Disconnect with Will Message": closed as if abnormally, for the will's sake.
            self._close(
                conn, now, reason=None, detail="DISCONNECT with will message", event=LifecycleEvent.DISCONNECT_RECEIVED
            )
            return
        session.will = None  # a normal disconnection discards the will [MQTT-3.1.2-10]
        self._close(
            conn, now, reason=None, detail=f"DISCONNECT 0x{p.reason_code:02X}", event=LifecycleEvent.DISCONNECT_RECEIVED
        )

    def _on_auth(self, conn: ServerConnection, p: Auth, now: float) -> None:
        self._close(
            conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail="AUTH without an authentication method in CONNECT"
        )

    # --- closing, wills, session ends -------------------------------------------------------------------------

    def _close(
        self,
        conn: ServerConnection,
        now: float,
        *,
        reason: int | None,
        detail: str,
        refused: str | None = None,
        event: LifecycleEvent = LifecycleEvent.DISCONNECT_SENT,
    ) -> None:
        """Ends a connection: 5.0 DISCONNECT with `reason` when there is one, then the session is detached.
        `refused`: a CONNECT refused, why (counted by that name). `event`: what ends it, for the state table (the
        broker's own decision unless said otherwise)."""
        if conn.closed:
            return
        if refused is not None:
            self.stats.count_refused(refused)
        if reason is not None and conn.connected and conn.version == 5 and reason in REASONS_BY_PACKET[14]:
            say_why = detail and self.config.limits.reason_strings
            why = Properties(reason_string=detail[:200]) if say_why else EMPTY_PROPERTIES
            self._send(conn, Disconnect(reason, why))
        conn.advance(event)
        self.dirty[conn] = None
        kind = NoticeKind.REFUSED if refused else NoticeKind.DISCONNECTED if reason is None else NoticeKind.ERROR
        self.notices.append(Notice(kind, conn.client_id, conn.peer, detail, reason))
        session = conn.session
        if session is None or session.connection is not conn:
            return
        session.connection = None
        self.connected -= 1
        if session.will is not None:
            delay = (session.will.properties.will_delay_interval or 0) if conn.version == 5 else 0
            if delay and session.expiry_interval:
                session.will_at = now + delay
                self._schedule(session.will_at, _TimerKind.WILL, session.client_id)
            else:
                self._publish_will(session, now)
        if session.expiry_interval == 0:
            self._end_session(session, now)
            return
        idle = self._idle_expiry(session)
        if idle is not None:
            session.expires_at = now + idle
            self._schedule(session.expires_at, _TimerKind.EXPIRE, session.client_id)
        self._save_session(session)

    def _idle_expiry(self, session: Session) -> float | None:
        """Seconds a disconnected client's session is kept: its expiry interval, or for one that never expires,
        persistent_client_expiration (None: for ever). An embedded bridge's local session is the broker's own."""
        if session.expiry_interval != NEVER_EXPIRES:
            return session.expiry_interval
        limit = self.config.limits.persistent_client_expiration
        return limit if limit and session.bridge is None else None

    def _end_session(self, session: Session, now: float) -> None:
        if self._dropping:
            self._drops_end(session)
        if session.will is not None and session.connection is None and session.will_at is not None:
            # A delayed will goes out at once when the session ends first (3.1.3.2.2).
            session.will_at = None
            self._publish_will(session, now)
        for flt in session.subscriptions:
            self._unsubscribe(flt, session.client_id)
        session.subscriptions.clear()
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
            self._views.pop(session.client_id, None)
            if self.changes is not None:
                self.changes.append(SessionRemoved(session.client_id))

    def _publish_will(self, session: Session, now: float) -> None:
        will = session.will
        session.will = None
        if will is None:
            return
        view = self._views.get(session.client_id)
        if view is not None and not view.can_write(will.topic):
            # Checked when it goes out, against the ACL then in force (as mosquitto 2.0.11: CONNECT is accepted).
            self.notices.append(Notice(NoticeKind.DROPPED, session.client_id, "-", f"will to {will.topic!r}: ACL"))
            return
        props = will.properties.replace(will_delay_interval=None) if will.properties.items else EMPTY_PROPERTIES
        self._route(Message(will.topic, will.payload, will.qos, will.retain, props, session.client_id, now), now)

    def _schedule(self, when: float, kind: _TimerKind, client_id: str) -> None:
        self._seq += 1
        timers = self._timers
        if not timers or when < timers[0].when:
            self.timers_changed = True  # the network layer's timer must wake earlier
        heapq.heappush(timers, _Timer(when, self._seq, kind, client_id))

    # --- output ---------------------------------------------------------------------------------------------

    def _send(self, conn: ServerConnection, packet: Any) -> None:
        data = encode(packet, conn.version)
        limit = conn.client_max_packet_size
        if limit is not None and over_maximum_packet_size(len(data), limit):
            smaller = self._within(conn, packet, limit)
            if smaller is None:
                return
            data = smaller
        self._write(conn, data)

    def _within(self, conn: ServerConnection, packet: Any, limit: int) -> bytes | None:
        """A control packet over the client's Maximum Packet Size [MQTT-3.1.2-24]: sent without its optional
        properties (reason string and user properties may not make it too large, 3.14.2.2.3; response
        information is a courtesy), or not at all; the connection then closes (0x95), unless it is closing."""
        if isinstance(packet, Publish):
            # A re-send to a client whose maximum is now smaller: dropped as if delivered [MQTT-3.1.2-25].
            session = conn.session
            if session is not None and packet.packet_id is not None:
                session.outgoing.discard(packet.packet_id)
                self._delivery_done(session, packet.packet_id)
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
            self._close(
                conn,
                self._clock,
                reason=None if isinstance(packet, ConnAck) else ReasonCode.PACKET_TOO_LARGE,
                detail=detail,
            )
        return None

    def _write(self, conn: ServerConnection, data: bytes) -> None:
        conn.out += data
        self.stats.messages_sent += 1
        self.stats.bytes_sent += len(data)
        self.dirty[conn] = None

    # --- $SYS ---------------------------------------------------------------------------------------------------

    # --- queries: what the admin API shows (core/queries.py records; read here, nowhere else) --------------

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
        for topic, message in self.retained.items():
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
            for link in sorted(self.links.values(), key=lambda link: link.name)
        ]

    def totals(self, now: float) -> BrokerTotals:
        s = self.stats
        return BrokerTotals(
            self.connected,
            len(self.sessions),
            sum(len(session.subscriptions) for session in self.sessions.values()),
            len(self.retained),
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
        self._close(conn, now, reason=ReasonCode.ADMINISTRATIVE_ACTION, detail=detail)
        return True

    def delete_retained(self, topic: str, detail: str) -> bool:
        """Clears a retained message as an empty retained PUBLISH would (stored too), logged with `detail` (who);
        False when there is none."""
        if not self.retained.discard(topic):
            return False
        self.notices.append(Notice(NoticeKind.DROPPED, None, "-", f"retained message on {topic!r} cleared {detail}"))
        if self.changes is not None:
            self.changes.append(RetainedCleared(topic))
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

    def load_counters(self) -> dict[str, int]:
        """What $SYS/broker/load/NAME/... averages, by NAME (mosquitto's names)."""
        s = self.stats
        return {
            "messages/received": s.messages_received,
            "messages/sent": s.messages_sent,
            "publish/dropped": s.publish_dropped,
            "publish/received": s.publish_received,
            "publish/sent": s.publish_sent,
            "bytes/received": s.bytes_received,
            "bytes/sent": s.bytes_sent,
            "sockets": s.sockets_total,
            "connections": s.clients_total,
        }

    def sys_figures(self, now: float) -> dict[str, str]:
        """The $SYS/broker/... topics and their values, mosquitto 2.0's names (its heap/... has no counterpart in
        Python: the metrics endpoint gives the process's resident memory instead)."""
        s = self.stats
        connected = self.connected
        queued, queued_bytes = self.queued()
        figures = {
            "$SYS/broker/version": self.config.version,
            "$SYS/broker/uptime": f"{int(now - s.started)} seconds",
            "$SYS/broker/clients/connected": str(connected),
            "$SYS/broker/clients/disconnected": str(len(self.sessions) - connected),
            "$SYS/broker/clients/total": str(len(self.sessions)),
            "$SYS/broker/clients/maximum": str(s.clients_maximum),
            "$SYS/broker/clients/active": str(connected),  # mosquitto's older names, still published by 2.0
            "$SYS/broker/clients/inactive": str(len(self.sessions) - connected),
            "$SYS/broker/clients/expired": str(s.sessions_expired),
            "$SYS/broker/messages/received": str(s.messages_received),
            "$SYS/broker/messages/sent": str(s.messages_sent),
            "$SYS/broker/messages/stored": str(queued),
            "$SYS/broker/publish/messages/received": str(s.publish_received),
            "$SYS/broker/publish/messages/sent": str(s.publish_sent),
            "$SYS/broker/publish/messages/dropped": str(s.publish_dropped),
            "$SYS/broker/publish/bytes/received": str(sum(s.publish_received_bytes_qos)),
            "$SYS/broker/publish/bytes/sent": str(sum(s.publish_sent_bytes_qos)),
            "$SYS/broker/bytes/received": str(s.bytes_received),
            "$SYS/broker/bytes/sent": str(s.bytes_sent),
            "$SYS/broker/subscriptions/count": str(len(self.subscriptions)),
            "$SYS/broker/shared_subscriptions/count": str(self.shared_subscriptions()),
            "$SYS/broker/retained messages/count": str(len(self.retained)),
            "$SYS/broker/store/messages/count": str(queued),
            "$SYS/broker/store/messages/bytes": str(queued_bytes),
        }
        for name, link in self.links.items():
            figures[f"$SYS/broker/connection/{name}/state"] = "1" if link.connected else "0"
            if link.address:
                figures[f"$SYS/broker/connection/{name}/address"] = link.address
        figures.update(self.load.topics())
        return figures

    def publish_log(self, topic: str, line: str, now: float) -> None:
        """A log line to its `$SYS/broker/log/...` topic (mosquitto's log_dest topic): QoS 0, not retained, so a
        log never fills a queue or the store."""
        payload = line.encode("utf-8", "backslashreplace")
        self._route(Message(topic, payload, 0, False, EMPTY_PROPERTIES, None, now), now)

    def _publish_sys(self, now: float) -> None:
        self.load.update(self.load_counters(), now)
        for topic, value in self.sys_figures(now).items():
            old = self.retained.get(topic)
            if old is not None and old.payload == value.encode():
                continue  # unchanged: no traffic, as mosquitto
            self._route(Message(topic, value.encode(), 0, True, EMPTY_PROPERTIES, None, now), now)


def _peer_of(session: Session) -> str:
    conn = session.connection
    return conn.peer if conn is not None else "-"


def refusal_name(code: int) -> str:
    """A CONNACK reason code's name as a metric label: "Bad User Name or Password" -> bad_user_name_or_password."""
    return "_".join("".join(c if c.isalnum() else " " for c in reason_name(code, 2).lower()).split())


def _merge(targets: dict[str, tuple[int, bool, tuple[int, ...]]], client_id: str, opts: SubscriptionOptions) -> None:
    """Adds one matching subscription to a client's delivery: overlapping subscriptions deliver once, at the
    highest QoS, with every subscription identifier (3.3.4)."""
    sid = (opts.subscription_identifier,) if opts.subscription_identifier else ()
    prev = targets.get(client_id)
    if prev is None:
        targets[client_id] = (opts.qos, opts.retain_as_published, sid)
    else:
        sids = prev[2] + sid if sid and sid[0] not in prev[2] else prev[2]  # one SUBSCRIBE's filters share one id
        targets[client_id] = (max(prev[0], opts.qos), prev[1] or opts.retain_as_published, sids)


def _text_problem(text: str | None, what: str) -> str | None:
    if text is None:
        return None
    at = control_character(text)
    return None if at < 0 else f"{what} holds control character U+{ord(text[at]):04X} at character {at}"


def _may_read(views: dict[str, AclView], client_id: str, topic: str) -> bool:
    view = views.get(client_id)
    return view is None or view.can_read(topic)


def _still_admitted(old: AuthPolicy, new: AuthPolicy, conn: ServerConnection) -> bool:
    """Whether `new` would admit a client `old` admitted. Passwords are not kept: a user whose hash changed (a new
    password, or the same one hashed again) must log in again."""
    if new.uses_certificates:
        return conn.certificate is not None
    if new.dynsec is not None and conn.username is not None:
        before = old.dynsec.password_of(conn.username) if old.dynsec is not None else None
        if before is None or new.dynsec.password_of(conn.username) != before:
            return False
        return new.dynsec.still_admitted(conn.username, conn.client_id or "")
    if conn.username is None or new.passwords is None:
        return new.allow_anonymous is not False
    entry = new.passwords.get(conn.username)
    return entry is not None and old.passwords is not None and old.passwords.get(conn.username) == entry


def _strip(publish: Publish) -> Publish:
    """3.x has no properties: what is kept for re-sending must encode at 3.x."""
    if not publish.properties.items:
        return publish
    p = publish
    return Publish(p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id)


# The handlers of what a connected client sends besides PUBLISH and CONNECT, by packet type. A module-level table,
# not a class attribute built from the methods in the class body: that is what a compiled (mypyc) class allows.
_HANDLERS: dict[type, Callable[[BrokerCore, ServerConnection, Any, float], None]] = {
    PubAck: BrokerCore._on_puback,
    PubRec: BrokerCore._on_puback,
    PubComp: BrokerCore._on_puback,
    PubRel: BrokerCore._on_pubrel,
    Subscribe: BrokerCore._on_subscribe,
    Unsubscribe: BrokerCore._on_unsubscribe,
    PingReq: BrokerCore._on_pingreq,
    Disconnect: BrokerCore._on_disconnect,
    Auth: BrokerCore._on_auth,
}
