"""`ClientConnection`: the client side of MQTT 3.1, 3.1.1 and 5.0 as a sans-IO state machine (after h11/wsproto).

    conn = ClientConnection(client_id="c1", version=5, keepalive=30)
    conn.connect()
    transport.send(conn.data_to_send(now))
    conn.receive_data(chunk, now)          # b"" means the peer closed
    for event in conn.events(): ...        # ConnectionAccepted, MessagesReceived, Acknowledged, ...
    conn.publish("a/b", b"hi", qos=2)      # checks the broker's limits; returns the packet identifier
    conn.handle_timeout(now)               # at next_deadline(): PINGREQ due, or the broker stopped answering

No sockets, no clock: time comes in as a number (seconds, any origin). One object lives for a whole *session*:
`connect()` may be called again after `Disconnected`, and the messages in flight are re-sent with DUP when the
broker still has the session, or handed back in `ConnectionAccepted.unacknowledged` when it does not.

Its parts: `options` (ClientOptions) and the broker's `limits` (BrokerLimits), client_options.py; the session
(client_session.py, with the manual acknowledgements of ledger.py); the receiving half of the message flows and
the events (client_inbox.py), the sending half (client_outbox.py, with our topic aliases, aliases.py); the
SUBSCRIBE/UNSUBSCRIBE awaiting answers (requests.py); keep alive (keepalive.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from .client_inbox import Inbox
from .client_options import BrokerLimits, ClientOptions, Tracer
from .client_outbox import Outbox
from .client_session import ClientSession
from .encoder import encode
from .errors import LocalProtocolError, RemoteProtocolError
from .events import (
    ConnectionAccepted,
    ConnectionRefused,
    Disconnected,
    Event,
    PongReceived,
    PublishAcknowledged,
    SubscribeAcknowledged,
    UnsubscribeAcknowledged,
)
from .keepalive import Due, KeepaliveTimer
from .lifecycle import (
    ConnectionState,
    LifecycleEvent,
    Role,
    transition,
)
from .packets import (
    Auth,
    ConnAck,
    Disconnect,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
)
from .properties import EMPTY_PROPERTIES, Properties
from .reader import PacketReader
from .reasons import REASONS_BY_PACKET, ReasonCode, reason_name, v5_connack_reason
from .records import replace
from .requests import PendingRequests
from .topics import topic_filter_error

__all__ = ["ClientConnection"]

_PINGREQ_BYTES = b"\xc0\x00"

_IDLE: Final = ConnectionState.IDLE
_CONNECTING: Final = ConnectionState.CONNECTING
_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED
_E = LifecycleEvent


class ClientConnection:
    """One MQTT client session over any number of successive connections; `options` are ClientOptions's fields.

    With `manual_ack` (the bridge), QoS 1/2 messages received are acknowledged only when the owner calls
    `acknowledge()`, a re-send of one not yet acknowledged is not delivered again, and PUBREC and PUBREL are
    reported (PublishReceived, ReleaseReceived) so that an owner can journal the QoS 2 flows. With `owner_ids`
    (an embedded bridge), the owner names its messages' packet identifiers and sends each QoS 2 one's PUBREL with
    release() once it has stored the PUBREC (ClientSession). Messages received and plain PUBACKs come out a read
    at a time (MessagesReceived, Acknowledged); `trace` sees the bytes each way (data_to_send's, receive_data's).
    """

    def __init__(self, client_id: str = "", *, trace: Tracer | None = None, **options: Any) -> None:
        o = self.options = ClientOptions(client_id, **options)
        self.version = o.version  # of this connection (or the next): connect() may change it
        self.state = _IDLE  # moved by _advance only, along the table shared with the server (lifecycle.py)
        self.session_present = False
        self.connack: ConnAck | None = None
        self._trace = trace
        session = self._session = ClientSession(o.max_inflight, o.manual_ack, o.owner_ids)
        self._flows, self._ledger = session.flows, session.ledger  # (hot paths: publish, relay, acknowledge)
        self._requests = PendingRequests(self._flows)
        self._timer = KeepaliveTimer(o.keepalive)  # its period: ours, or the broker's server keep alive
        self._reader = PacketReader(o.version, max_packet_size=o.maximum_packet_size)
        self._out: list[bytes] = []  # (cleared, never replaced: the inbox queues acknowledgements in it too)
        self._inbox = Inbox(session, self._out, o.receive_maximum)
        self._outbox = Outbox(self._flows, self._out, o.auto_topic_aliases)
        #: Sessions the broker started us: a packet identifier received in an earlier one may name another message.
        self.session_epoch = 0
        #: Packets received so far (all connections): what one read brought, for a reader that paces itself.
        self.packets_received = 0

    # --- state --------------------------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """Ours: as given, or as the broker assigned it (kept for the next connection)."""
        return self.options.client_id

    @property
    def limits(self) -> BrokerLimits:
        """The broker's limits on what we send, from its CONNACK."""
        return self._outbox.limits

    @property
    def connected(self) -> bool:
        return self.state is _CONNECTED

    def _advance(self, event: LifecycleEvent) -> None:
        self.state = transition(Role.CLIENT, self.state, event)

    @property
    def inflight(self) -> int:
        """Our QoS 1/2 messages not yet acknowledged (including those waiting for PUBCOMP)."""
        return len(self._flows)

    @property
    def window_open(self) -> bool:
        """True when a QoS 1/2 message may be published now without exceeding the broker's receive maximum."""
        return self._flows.window_open

    def close_window(self) -> None:
        """No further QoS 1/2 message goes on this connection (the window stays closed until the next CONNACK sets
        it again): what is in flight can be drained before the client leaves for another address."""
        self._flows.receive_maximum = 0  # window_open and try_send: fewer than 0 in flight never holds

    @property
    def pending_requests(self) -> int:
        """SUBSCRIBE and UNSUBSCRIBE packets still waiting for their answer."""
        return len(self._requests)

    @property
    def pings_sent(self) -> int:
        """PINGREQ packets sent on this connection (keepalive's and ping()'s): PINGRESPs answer them in order."""
        return self._timer.pings_sent

    @property
    def keepalive(self) -> int:
        """This connection's keep alive: ours, or the broker's server keep alive."""
        return self._timer.period

    @property
    def held(self) -> int:
        """manual_ack: messages delivered and not yet acknowledged."""
        return self._ledger.held if self._ledger is not None else 0

    def unacknowledged(self) -> list[tuple[Publish, Any]]:
        """Our messages in flight with their contexts, in the order they were sent."""
        return [(e.publish, e.context) for e in self._flows.entries()]

    # --- commands (they queue bytes) ----------------------------------------------------------------------

    def connect(self, *, clean_start: bool | None = None, version: int | None = None, client_id: str | None = None,
                bridge: bool | None = None) -> None:  # fmt: skip
        """Queues CONNECT for a new connection (the first, or one after `Disconnected`); what is given replaces
        the option of that name from now on."""
        connecting = transition(Role.CLIENT, self.state, _E.CONNECT)  # raises (while connecting or connected)
        changes = {"clean_start": clean_start, "version": version, "client_id": client_id, "bridge": bridge}
        changed = {k: v for k, v in changes.items() if v is not None}
        o = replace(self.options, **changed) if changed else self.options  # raises for a bad version
        v = o.version
        packet = o.connect_packet()  # raises for 3.1 without a client identifier
        data = encode(packet, v)  # raises before any state changes
        self.options = o
        self.version = v
        self._reader = PacketReader(v, max_packet_size=o.maximum_packet_size)
        self._out.clear()
        self._inbox.reset(v, o.topic_alias_maximum)
        self._requests.clear()
        self._timer.restart(o.keepalive)
        self.connack = None
        self.state = connecting
        self._out.append(data)

    def publish(
        self,
        topic: str,
        payload: bytes = b"",
        qos: int = 0,
        retain: bool = False,
        properties: Properties = EMPTY_PROPERTIES,
        *,
        context: Any = None,
        packet_id: int = 0,
    ) -> int | None:
        """Queues a PUBLISH; returns its packet identifier (None for QoS 0): `packet_id` when given (an owner that
        keeps its own, see `owner_ids`), else a free one.

        Raises LocalProtocolError when the message breaks the protocol or the broker's limits (maximum QoS,
        retain available, maximum packet size, topic alias maximum) or when the window is closed (check
        `window_open` first for QoS 1/2). A topic alias in `properties` is used as MQTT 5.0 says: the topic
        goes on the wire only when the alias is new or points elsewhere.
        """
        self._require_connected("publish()")
        return self._outbox.publish(topic, payload, qos, retain, properties, context, packet_id)

    def relay(self, topic: str, payload: bytes, qos: int, retain: bool, context: Any = None, packet_id: int = 0) -> int:
        """publish() for a relay's hot path (the bridge): a QoS 1/2 message without properties, queued only when
        nothing needs checking for it: connected, the window open, a topic published before (so known valid), its
        QoS and retain flag within the broker's limits, no maximum packet size or automatic topic aliases to apply.
        Returns its packet identifier, or 0 when it was not queued: publish() then queues it or says why not."""
        if self.state is not _CONNECTED:
            return 0
        return self._outbox.relay(topic, payload, qos, retain, context, packet_id)

    def acknowledge(self, packet_id: int, reason_code: int = 0) -> bool:
        """With `manual_ack`: acknowledges a QoS 1/2 message received (PUBACK or PUBREC, with `reason_code` on
        5.0). False when the broker no longer expects it (its session ended); while disconnected the
        acknowledgement is kept and sent after the next CONNACK that finds the session."""
        ledger = self._ledger
        if ledger is None:
            return False
        qos = ledger.settle(packet_id, reason_code, self.state is _CONNECTED)
        if qos is None:
            return False
        if qos == 1 and not reason_code:  # _send_ack's common case, inline: the bridge's path for every message
            self._out.append(b"\x40\x02" + packet_id.to_bytes(2, "big"))
        elif qos:
            self._inbox.send_ack(packet_id, qos, reason_code)
        return True

    def restore_incoming(self, packet_id: int, qos: int, *, acknowledged: bool) -> None:
        """Before connect(), from the owner's journal: a message received in an earlier process that is still
        the owner's (not acknowledged: a re-send is not delivered again; manual_ack) or, QoS 2 acknowledged,
        awaiting PUBREL."""
        self._session.restore_incoming(packet_id, qos, acknowledged)

    def release(self, packet_id: int) -> None:
        """owner_ids: the PUBREL of a QoS 2 message whose PUBREC came (PublishReceived) goes now that the owner
        has stored the PUBREC (sent earlier, a restart would re-send the PUBLISH, which a broker that completed the
        flow takes for a new message). While disconnected it goes with the re-sends after the next CONNACK."""
        if self._session.release(packet_id) and self.state is _CONNECTED:
            self._out.append(encode(PubRel(packet_id), self.version))

    def restore_outgoing(self, publish: Publish, *, released: bool, context: Any = None) -> None:
        """Before connect(), from the owner's journal: one of our QoS 1/2 messages in flight in an earlier
        process (`released`: PUBREC came, PUBREL is what to re-send). The broker's session decides the rest."""
        self._flows.restore(publish, released, context)

    def subscribe(self, subscriptions: Iterable[Subscription], properties: Properties = EMPTY_PROPERTIES) -> int:
        """Queues a SUBSCRIBE; returns its packet identifier (answered by SubscribeAcknowledged)."""
        self._require_connected("subscribe()")
        subs = tuple(subscriptions)
        for sub in subs:
            if err := topic_filter_error(sub.topic_filter):
                raise LocalProtocolError(f"SUBSCRIBE {err}")
        return self._request(Subscribe(self._requests.next_id(), subs, properties))

    def unsubscribe(self, topic_filters: Iterable[str], properties: Properties = EMPTY_PROPERTIES) -> int:
        """Queues an UNSUBSCRIBE; returns its packet identifier (answered by UnsubscribeAcknowledged)."""
        self._require_connected("unsubscribe()")
        return self._request(Unsubscribe(self._requests.next_id(), tuple(topic_filters), properties))

    def _request(self, packet: Subscribe | Unsubscribe) -> int:
        data = encode(packet, self.version)
        self._outbox.check_size(data)
        self._requests.sent(packet)
        self._out.append(data)
        return packet.packet_id

    def ping(self, now: float | None = None) -> None:
        """Queues a PINGREQ (keepalive sends its own; this one is for callers that want a PINGRESP as a marker)."""
        self._require_connected("ping()")
        self._out.append(_PINGREQ_BYTES)
        self._timer.ping(now)

    def disconnect(self, reason_code: int = 0, properties: Properties = EMPTY_PROPERTIES) -> None:
        """Queues DISCONNECT and ends the connection (reason code and properties: 5.0 only)."""
        if self.state is not _CONNECTED:
            self._advance(_E.DISCONNECT_SENT)  # nothing to send: the connection is dropped (or was never made)
            return
        packet = Disconnect(reason_code, properties) if self.version == 5 else Disconnect()
        self._out.append(encode(packet, self.version))
        self._close(reason_code, "disconnected by the client", _E.DISCONNECT_SENT)

    # --- I/O and time -------------------------------------------------------------------------------------

    def data_to_send(self, now: float | None = None) -> bytes:
        """The bytes queued so far (and forgets them). `now` tells keepalive when we last sent something."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        if now is not None:
            self._timer.last_sent = now
        if self._trace is not None:
            self._trace.sent(data)
        return data

    def receive_data(self, data: bytes | bytearray, now: float) -> None:
        """Feeds bytes from the broker (b"" when it closed the connection); events() tells what happened."""
        if self._trace is not None:
            self._trace.received(data)
        state = self.state  # a local: the handlers below change self.state, which mypy must not take as narrowed
        if state is _IDLE or state is _CLOSED:
            return
        if not data:
            self._close(ReasonCode.UNSPECIFIED_ERROR, "the broker closed the connection", _E.TRANSPORT_CLOSED)
            return
        self._timer.last_received = now
        if self.state is _CONNECTING and self.version == 5 and data[:2] == b"\x20\x02":
            # A 3.x CONNACK (two bytes, no property block) in answer to a 5.0 CONNECT: a 3.1.1 broker saying
            # "unacceptable protocol version" the only way it knows (3.1.1 section 3.1.2.2).
            code = data[3] if len(data) >= 4 else 1
            unsupported = ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
            self._refuse(v5_connack_reason(code, unsupported) if code else unsupported, code)
            return
        try:
            self._receive(data, now)
        except RemoteProtocolError as err:  # the inbox's: a message flow broken
            self._protocol_error(err.reason_code, str(err))

    def _receive(self, data: bytes | bytearray, now: float) -> None:
        if self.state is _CONNECTED and data[0] == 0x40 and not self._reader.buffered:
            rest = self._inbox.leading_pubacks(data)
            self.packets_received += (len(data) - len(rest)) >> 2
            data = rest
            if not data:
                return
        try:
            packets = self._reader.feed(data)
        except RemoteProtocolError as err:
            for packet in err.packets:
                if self.state is not _CLOSED:
                    self._handle(packet, now)
            if self.state is not _CLOSED:
                self._protocol_error(err.reason_code, f"the broker sent a bad packet: {err}")
            return
        self.packets_received += len(packets)
        handle = self._handle
        on_publish = self._inbox.publish
        connected = _CONNECTED
        for packet in packets:
            state = self.state
            if state is connected and type(packet) is Publish:
                on_publish(packet)  # most of what a subscriber or a bridge reads
            elif state is _CLOSED:
                break
            else:
                handle(packet, now)

    def connection_lost(self, reason: str) -> None:
        """The transport ended without the broker's close reaching receive_data() (a write failed first, say):
        the connection is over; a Disconnected event says why. Nothing happens when it was over already."""
        if self.state in (_CONNECTING, _CONNECTED):
            self._close(ReasonCode.UNSPECIFIED_ERROR, reason, _E.TRANSPORT_CLOSED)

    def events(self) -> list[Event]:
        """The events since the last call, in order."""
        return self._inbox.events()

    def next_deadline(self) -> float | None:
        """When handle_timeout() must be called next (None: no timer is running)."""
        return self._timer.deadline() if self.state is _CONNECTED else None

    def handle_timeout(self, now: float) -> None:
        """Sends PINGREQ when nothing was sent or received for a keepalive period; ends the connection when the
        broker has said nothing for 1.5 keepalive periods (so a PINGREQ went unanswered for half a period)."""
        due = self._timer.due(now) if self.state is _CONNECTED else None
        if due is Due.PING:
            self._out.append(_PINGREQ_BYTES)
        elif due is Due.EXPIRED:
            reason = f"no answer from the broker for {1.5 * self.keepalive:g} s (keepalive)"
            self._close(ReasonCode.KEEP_ALIVE_TIMEOUT, reason, _E.DISCONNECT_SENT)

    # --- internals ----------------------------------------------------------------------------------------

    def _require_connected(self, what: str) -> None:
        if self.state is not _CONNECTED:
            raise LocalProtocolError(f"{what} while {self.state.value}")

    def _close(
        self, reason_code: int, reason: str, event: LifecycleEvent, properties: Properties = EMPTY_PROPERTIES
    ) -> None:
        self._advance(event)
        self._timer.ping_sent = None
        by_peer = event is _E.DISCONNECT_RECEIVED or event is _E.TRANSPORT_CLOSED
        self._inbox.emit(Disconnected(reason_code, reason, by_peer, properties))

    def _protocol_error(self, reason_code: int, reason: str) -> None:
        """The broker broke the protocol: say why (5.0 DISCONNECT) and end the connection."""
        if self.version == 5 and self.state is _CONNECTED:
            # Some reasons (0x92 for a PUBCOMP) have no DISCONNECT code of their own: Protocol Error says it.
            wire_code = reason_code if reason_code in REASONS_BY_PACKET[14] else ReasonCode.PROTOCOL_ERROR
            self._out.append(encode(Disconnect(wire_code), 5))
        self._close(reason_code, reason, _E.PROTOCOL_ERROR)

    def _refuse(self, reason_code: int, return_code: int, properties: Properties = EMPTY_PROPERTIES) -> None:
        reason = reason_name(reason_code, 2, 5)
        if properties.reason_string:
            reason = f"{reason}: {properties.reason_string}"
        self._advance(_E.CONNACK_REFUSED)
        self._inbox.emit(ConnectionRefused(reason_code, reason, return_code, properties))

    def _handle(self, packet: Any, now: float) -> None:
        t = type(packet)
        if self.state is _CONNECTING:
            if t is ConnAck:
                self._on_connack(packet)
            else:
                self._protocol_error(ReasonCode.PROTOCOL_ERROR, f"the broker sent {t.__name__.upper()} before CONNACK")
            return
        if t is Publish:
            self._inbox.publish(packet)
        elif t is PubAck or t is PubComp or t is PubRec:
            self._inbox.acknowledgement(packet)
        elif t is PubRel:
            self._inbox.release(packet)
        elif t is SubAck or t is UnsubAck:
            if not self._requests.answered(packet):
                self._protocol_error(
                    ReasonCode.PROTOCOL_ERROR,
                    f"the broker sent {t.__name__.upper()} for unknown packet identifier {packet.packet_id}",
                )
                return
            answer = SubscribeAcknowledged if t is SubAck else UnsubscribeAcknowledged
            self._inbox.emit(answer(packet.packet_id, packet.reason_codes, packet.properties))
        elif t is PingResp:
            self._timer.ping_sent = None
            self._inbox.emit(PongReceived())
        elif t is Disconnect:
            reason = reason_name(packet.reason_code, 14, self.version)
            if packet.properties.reason_string:
                reason = f"{reason}: {packet.properties.reason_string}"
            self._close(
                packet.reason_code, f"the broker disconnected: {reason}", _E.DISCONNECT_RECEIVED, packet.properties
            )
        elif t is ConnAck:
            try:
                self._advance(_E.CONNACK_ACCEPTED if not packet.reason_code else _E.CONNACK_REFUSED)
            except RemoteProtocolError as err:  # (it always raises: only CONNECTING takes a CONNACK)
                self._protocol_error(err.reason_code, f"the broker sent {err}")
        elif t is Auth:
            self._protocol_error(
                ReasonCode.PROTOCOL_ERROR, "the broker sent AUTH, but no authentication method was asked for"
            )
        else:
            self._protocol_error(
                ReasonCode.PROTOCOL_ERROR, f"the broker sent {t.__name__.upper()}, which only clients send"
            )

    def _on_connack(self, p: ConnAck) -> None:
        self.connack = p
        o = self.options
        if p.reason_code:
            if self.version == 5:
                self._refuse(p.reason_code, p.reason_code, p.properties)
            else:
                self._refuse(v5_connack_reason(p.reason_code), p.reason_code)
            return
        props = p.properties
        self._advance(_E.CONNACK_ACCEPTED)
        # 3.1 has no session present flag: a broker keeps a session we asked it to keep.
        present = p.session_present if self.version != 3 else not o.clean_start
        self.session_present = present
        limits = BrokerLimits.of(props)
        self._outbox.accepted(self.version, limits)
        cap = o.max_inflight
        self._flows.receive_maximum = min(limits.receive_maximum, cap) if cap else limits.receive_maximum
        if props.server_keep_alive is not None:
            self._timer.period = props.server_keep_alive
        if props.assigned_client_identifier:
            # Kept for the next connection: the session is found again by this identifier.
            self.options = replace(o, client_id=props.assigned_client_identifier)
        unacknowledged: list[tuple[Publish, Any]] = []
        if present:
            self._inbox.send_owed()
            for packet in self._session.resend():
                wire = self._outbox.on_wire(packet) if type(packet) is Publish else packet
                self._out.append(encode(wire, self.version))
        else:
            delivered, unacknowledged = self._session.restart()
            self.session_epoch += 1
            for pid, context in delivered:  # past PUBREC: the broker owned them, only the release is lost
                self._inbox.emit(PublishAcknowledged(pid, 0, context))
        self._inbox.emit(ConnectionAccepted(present, p, tuple(unacknowledged)))
