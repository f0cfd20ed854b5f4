"""BrokerCore: the whole broker without I/O. Bytes and time go in; bytes for each connection come out.

The network layer calls `open`, `receive` (and `receive_rest`), `connection_lost`, `drained`, `tick` and
`shutdown`; after each call, the connections in `out.dirty` have new bytes in their `out` buffer (or want to be
closed). Nothing here awaits or blocks, so a slow subscriber can never hold up a publisher: deliveries go into
buffers and queues that are bounded, and what they drop is counted.

BrokerCore is the dispatcher: it takes packets and hands them to its components, each a class of its own module
(docs/ARCHITECTURE.md): admission (CONNECT, authentication, ACL), publishing (PUBLISH and its acknowledgements),
routing (subscriptions, retained messages, shared groups), delivery (queues, windows, limits), closing (wills,
session ends, timers), storage (what persistence keeps, and the acknowledgements that wait for it), the outbox
(bytes and notices out), in-process clients (an embedded bridge's local side), $SYS and the admin API's queries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from .admission import Admission, PolicyEffect, refusal_name
from .attachment import LocalClients
from .auth import AuthPolicy, CertificateIdentity
from .bridge import LinkStats
from .closing import NEVER_EXPIRES, SWEEP_INTERVAL, Closing
from .delivery import Deliverer
from .dynsec import DynamicSecurity
from .encoder import encode
from .errors import RemoteProtocolError, UnsupportedProtocolVersion
from .lifecycle import ConnectionState, LifecycleEvent
from .limits import Limits
from .outbox import Notice, NoticeKind, Outbox, Output
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
    Subscribe,
    Unsubscribe,
)
from .persistence import CommitLatency
from .properties import Properties
from .publishing import Publishing
from .queries import BrokerQueries
from .reader import plain_ack_packet
from .reasons import REASONS_BY_PACKET, SERVER_ONLY_DISCONNECT_REASONS, ReasonCode
from .routing import Router
from .server import ServerConnection
from .session import QueueLimits, Session
from .storage import Storage, StoreRecovered
from .systopics import SysTopics
from .topiccheck import TopicCheck

__all__ = [
    "NEVER_EXPIRES",
    "BrokerConfig",
    "BrokerCore",
    "BrokerStats",
    "Notice",
    "NoticeKind",
    "PolicyEffect",
    "refusal_name",
]

_PINGRESP = encode(PingResp())
_V3_SUBACK_FAILURE = 0x80  # 3.1.1 SUBACK return code: refused
# Packet types only a server sends: from a client, a protocol error (0x82) whatever their contents hold.
_SERVER_TO_CLIENT_ONLY = frozenset({2, 9, 11, 13})  # CONNACK, SUBACK, UNSUBACK, PINGRESP
# The per-packet and per-delivery checks read the state itself: `conn.closed` is a property (a call in pure Python).
_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED


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


class BrokerCore:
    """The broker without I/O: the network layer feeds it bytes (`receive`), time (`tick`) and connection ends, and
    asks `output` what to do after each. It dispatches packets to its components, one job each: `admission`
    (CONNECT, auth, ACL), `publishing` (PUBLISH and the acknowledgements), `router` (subscriptions, retained,
    shared groups), `delivery` (sending and queueing to one session), `closing` (ends, wills, expiry, timers),
    `storage` (persistence's records and held acknowledgements), `out` (bytes and notices), `local` (in-process
    clients), `sys` ($SYS), `queries` (what the admin API reads), `topics` (topic checks)."""

    def __init__(self, config: BrokerConfig | None = None, now: float = 0.0) -> None:
        self.config = config or BrokerConfig()
        self.sessions: dict[str, Session] = {}
        self.stats = BrokerStats(started=now)
        self.connections: set[ServerConnection] = set()
        self.connected = 0  # sessions with a connection
        self.clock = now  # the latest time given by the network layer (for what is not given one)
        self.links: dict[str, LinkStats] = {}  # embedded bridges by name: $SYS/broker/connection/... and metrics
        # The dynamic security whose state a $CONTROL request changed (handed out with the next output, to be saved).
        self.dynsec_changed: DynamicSecurity | None = None
        self.next_sweep = now + SWEEP_INTERVAL  # keep alive and CONNECT timeouts are checked then (tick)
        # The components, in the order they refer to each other (each keeps those it calls on its hot path).
        self.out = Outbox(self)
        self.storage = Storage(self)
        self.topics = TopicCheck(self)
        self.delivery = Deliverer(self)
        self.router = Router(self)
        self.closing = Closing(self)
        self.admission = Admission(self)
        self.publishing = Publishing(self)
        self.local = LocalClients(self)
        self.sys = SysTopics(self, now)
        self.queries = BrokerQueries(self)
        self._output = Output(self.out.notices)

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
        conn.last_received = self.clock = now
        self.stats.bytes_received += len(data)
        if conn.state is not _CONNECTED and data and data[0] != 0x10 and not conn.reader.buffered:
            # [MQTT-3.1.0-1]: the first packet is CONNECT. Anything else (an HTTP request, TLS to a plain port) is
            # not waited for: its "remaining length" could keep the connection open until the timeout.
            what = "a TLS handshake" if data[0] == 0x16 else f"first byte 0x{data[0]:02X}"
            self.closing.close(conn, now, reason=None, detail=f"not MQTT: {what} where CONNECT was due")
            return
        while True:
            try:
                packets = conn.reader.feed(data)
            except RemoteProtocolError as err:
                for packet in err.packets:
                    self._handle(conn, packet, now)
                    if conn.state is _CLOSED:
                        return
                self.protocol_error(conn, err, now)
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
            self.closing.close(conn, now, reason=None, detail="connection lost", event=LifecycleEvent.TRANSPORT_CLOSED)
        conn.backlog = None
        self.connections.discard(conn)
        self.out.dirty.pop(conn, None)

    def reconfigure(self, config: BrokerConfig, now: float) -> None:
        """A reload's new limits. Queue limits and $SYS apply at once to every session; the keep alive, topic
        alias maximum, in-flight window and packet size to connections made from now on (a connection's were
        agreed in its CONNACK). `instance` and `version` stay as they were."""
        config = dataclasses.replace(config, instance=self.config.instance, version=self.config.version)
        if config.sys_interval != self.config.sys_interval:
            self.sys.next_sys = now + config.sys_interval if config.sys_interval else None
        self.config = config
        self.delivery.limits = QueueLimits(
            config.limits.max_queued_messages, config.limits.max_queued_bytes, config.limits.queue_drop_oldest
        )
        self.topics.ok.clear()  # checked again against the new max_topic_levels

    def internal_error(self, conn: ServerConnection, now: float, detail: str) -> None:
        """Handling this connection's input failed unexpectedly: close it (5.0: 0x83), keep everything else."""
        if not conn.closed:
            self.closing.close(
                conn, now, reason=ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR, detail=f"internal error: {detail}"
            )

    def disconnect(self, conn: ServerConnection, now: float, reason: int, detail: str) -> None:
        """The server ends this connection (its listener closed, say): 5.0 clients get DISCONNECT `reason`, and
        the will is published as for any close that is not the client's DISCONNECT."""
        if not conn.closed:
            self.closing.close(conn, now, reason=reason, detail=detail)

    def keepalive_expired(self, conn: ServerConnection, now: float) -> None:
        if not conn.closed:
            self.closing.close(conn, now, reason=ReasonCode.KEEP_ALIVE_TIMEOUT, detail="keep alive timeout")

    def drained(self, conn: ServerConnection, now: float) -> None:
        """The writer emptied `out`: deliveries held back for this connection can go on."""
        if conn.wants_drain and conn.state is not _CLOSED and conn.session is not None:
            conn.wants_drain = False
            self.delivery.pump(conn.session, now)

    def tick(self, now: float) -> float | None:
        """Runs what is due (delayed wills, session expiry, $SYS, keep alive and CONNECT timeouts); returns when
        the next will or expiry or $SYS is due (`output` says when anything is)."""
        self.clock = now
        if now >= self.next_sweep:
            self.closing.sweep(now)
            self.next_sweep = now + SWEEP_INTERVAL
        deadlines = [t for t in (self.closing.run_due(now), self.sys.tick(now)) if t is not None]
        return min(deadlines) if deadlines else None

    def output(self, now: float) -> Output:
        """What the network layer is to do now, in one record: send what the connections in `sends` hold, log
        the notices, write the commit (then `commit_done` or `commit_failed`), save dynamic security, and call
        `tick` by `deadline`. Before it, the acknowledgements held for commits that are done or no longer needed
        are released. The record is the same object each pass: done with before the next call."""
        record = self._output
        storage = self.storage
        record.commit = storage.collect(now) if storage.changes is not None else None
        record.retrying = storage.failing
        out = self.out
        sends = record.sends
        sends.clear()  # (the last pass's, sent)
        record.sends = out.dirty
        out.dirty = sends
        record.dynsec = self.dynsec_changed
        self.dynsec_changed = None
        deadline = storage.commit_at
        timers = self.closing.timers
        if timers and timers[0].when < deadline:
            deadline = timers[0].when
        next_sys = self.sys.next_sys
        if next_sys is not None and next_sys < deadline:
            deadline = next_sys
        if self.next_sweep < deadline:  # (a connection opened since, silent, is not seen by an output)
            deadline = self.next_sweep
        record.deadline = deadline
        return record

    def commit_done(self, now: float, took: float) -> StoreRecovered | None:
        """The commit the last output handed out is written (in `took` seconds): what it held goes out with the
        next output. After failures, what ended them (to log)."""
        return self.storage.commit_done(now, took)

    def commit_failed(self, now: float) -> int | None:
        """The commit the last output handed out could not be written: tried again later; meanwhile 5.0
        publishers are told 0x97. At the first failure, how many acknowledgements are withheld (to log)."""
        return self.storage.commit_failed(now)

    def shutdown(self, now: float) -> None:
        """Server shutting down: wills are published (the close is not normal), then 5.0 clients get 0x8B.

        Wills go first, while every subscriber is still connected to receive them; sessions end with the server,
        so will delays do not apply.
        """
        for session in list(self.sessions.values()):
            if session.will is not None:
                self.closing.publish_will(session, now)
        for conn in list(self.connections):
            if not conn.closed:
                self.closing.close(conn, now, reason=ReasonCode.SERVER_SHUTTING_DOWN, detail="server shutting down")

    # --- dispatch ---------------------------------------------------------------------------------------------

    def _handle(self, conn: ServerConnection, packet: Any, now: float) -> None:
        self.stats.messages_received += 1
        kind = type(packet)
        if kind is int:  # a plain acknowledgement (the reader's plain_acks)
            if conn.state is _CONNECTED and self.publishing.on_plain_ack(conn, packet, now):
                return
            packet = plain_ack_packet(packet)  # anything else: the packet's general path
            kind = type(packet)
        if kind is Publish:
            if conn.state is _CONNECTED:
                self.publishing.on_publish(conn, packet, now)
                return
        elif kind is Connect:
            self.admission.on_connect(conn, packet, now)
            return
        if conn.state is not _CONNECTED:
            self.closing.close(conn, now, reason=None, detail=f"{kind.__name__.upper()} before CONNECT")
            return
        handler = _HANDLERS.get(kind)
        if handler is None:
            self.closing.close(
                conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail=f"a client does not send {kind.__name__.upper()}"
            )
            return
        handler(self, conn, packet, now)

    def protocol_error(self, conn: ServerConnection, err: RemoteProtocolError, now: float) -> None:
        packet = err.packet
        if isinstance(err, UnsupportedProtocolVersion) and not conn.connected:
            level = err.details.get("protocol_level", 0)
            if err.details.get("protocol_name") not in ("MQTT", "MQIsdp"):
                # Not MQTT at all [MQTT-3.1.2-1]: closed without an answer in any version's format (mosquitto).
                self.closing.close(conn, now, reason=None, detail=str(err), refused="not_mqtt")
                return
            if level >= 5:
                conn.version = 5
                self.out.send(conn, ConnAck(False, ReasonCode.UNSUPPORTED_PROTOCOL_VERSION))
            else:
                conn.version = 4
                self.out.send(conn, ConnAck(False, 1))
            self.closing.close(conn, now, reason=None, detail=str(err), refused="unsupported_protocol_version")
            return
        if err.reason_code == ReasonCode.TOPIC_FILTER_INVALID and isinstance(packet, Subscribe | Unsubscribe):
            # Not a topic filter at all (a misplaced wildcard, an empty filter, a broken $share/): a malformed
            # packet (4.7, 4.13), closed with 0x81 as mosquitto does. 0x8F is for a filter "correctly formed" but
            # not allowed (3.9.3), which this broker has none of.
            self.closing.close(conn, now, reason=ReasonCode.MALFORMED_PACKET, detail=str(err))
            return
        if isinstance(packet, Connect) and not conn.connected:
            conn.version = packet.protocol_version
            if conn.version == 5:
                conn.client_max_packet_size = packet.properties.maximum_packet_size
            if conn.version == 5 and err.reason_code in REASONS_BY_PACKET[2] and self.config.limits.reason_strings:
                # The CONNACK is a MAY (5.0 3.1.4, 4.13); mosquitto closes without one.
                self.out.send(conn, ConnAck(False, err.reason_code, Properties(reason_string=str(err)[:200])))
            self.closing.close(
                conn,
                now,
                reason=None,
                detail=str(err),
                refused=refusal_name(err.reason_code or ReasonCode.MALFORMED_PACKET),
            )
            return
        if err.packet_type in _SERVER_TO_CLIENT_ONLY:
            # Its type alone breaks the protocol: that is the error to report, before whatever its body breaks.
            self.closing.close(
                conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail=f"a client does not send this packet type: {err}"
            )
            return
        self.closing.close(conn, now, reason=err.reason_code, detail=str(err))

    def _on_pingreq(self, conn: ServerConnection, p: PingReq, now: float) -> None:
        self.out.write(conn, _PINGRESP)

    def _on_disconnect(self, conn: ServerConnection, p: Disconnect, now: float) -> None:
        session = conn.session
        assert session is not None
        if conn.version == 5:
            if p.reason_code in SERVER_ONLY_DISCONNECT_REASONS:
                # [MQTT-3.14.2-1]: not a code a client may send; an abnormal end, so the will is published.
                self.closing.close(
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
                    self.closing.close(
                        conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail="DISCONNECT sets a session expiry after 0"
                    )
                    return
                session.expiry_interval = expiry
        if p.reason_code == 0x04:
            # "Disconnect with Will Message": closed as if abnormally, for the will's sake.
            self.closing.close(
                conn, now, reason=None, detail="DISCONNECT with will message", event=LifecycleEvent.DISCONNECT_RECEIVED
            )
            return
        session.will = None  # a normal disconnection discards the will [MQTT-3.1.2-10]
        self.closing.close(
            conn, now, reason=None, detail=f"DISCONNECT 0x{p.reason_code:02X}", event=LifecycleEvent.DISCONNECT_RECEIVED
        )

    def _on_auth(self, conn: ServerConnection, p: Auth, now: float) -> None:
        self.closing.close(
            conn, now, reason=ReasonCode.PROTOCOL_ERROR, detail="AUTH without an authentication method in CONNECT"
        )


# The handlers of what a connected client sends besides PUBLISH and CONNECT, by packet type. A module-level table,
# not a class attribute built from the methods in the class body: that is what a compiled (mypyc) class allows.
def _on_ack(core: BrokerCore, conn: ServerConnection, p: Any, now: float) -> None:
    core.publishing.on_puback(conn, p, now)


def _on_pubrel(core: BrokerCore, conn: ServerConnection, p: Any, now: float) -> None:
    core.publishing.on_pubrel(conn, p, now)


def _on_subscribe(core: BrokerCore, conn: ServerConnection, p: Any, now: float) -> None:
    core.router.on_subscribe(conn, p, now)


def _on_unsubscribe(core: BrokerCore, conn: ServerConnection, p: Any, now: float) -> None:
    core.router.on_unsubscribe(conn, p, now)


_HANDLERS: dict[type, Callable[[BrokerCore, ServerConnection, Any, float], None]] = {
    PubAck: _on_ack,
    PubRec: _on_ack,
    PubComp: _on_ack,
    PubRel: _on_pubrel,
    Subscribe: _on_subscribe,
    Unsubscribe: _on_unsubscribe,
    PingReq: BrokerCore._on_pingreq,
    Disconnect: BrokerCore._on_disconnect,
    Auth: BrokerCore._on_auth,
}
