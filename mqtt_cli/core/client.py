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
broker still has the session, or handed back in `ConnectionAccepted.unacknowledged` when it does not. What it
is asked to be is a `ClientOptions` record (`options`), what the broker allows a `BrokerLimits` (`limits`);
manual acknowledgement is core/ledger.py's, our topic aliases core/aliases.py's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Protocol

from .aliases import OutgoingAliases
from .client_options import BrokerLimits, ClientOptions
from .client_session import ClientSession
from .encoder import encode, encode_publish, encode_topic_name, frame_publish
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .events import (
    Acknowledged,
    ConnectionAccepted,
    ConnectionRefused,
    Disconnected,
    Event,
    MessagesReceived,
    PongReceived,
    PublishAcknowledged,
    PublishReceived,
    ReleaseReceived,
    SubscribeAcknowledged,
    UnsubscribeAcknowledged,
)
from .keepalive import Due, KeepaliveTimer
from .ledger import Receipt
from .lifecycle import (
    ConnectionState,
    LifecycleEvent,
    Role,
    over_maximum_packet_size,
    receive_maximum_exceeded,
    resolve_topic_alias,
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
from .reasons import REASONS_BY_PACKET, ReasonCode, reason_name
from .records import fast_constructor, replace
from .requests import PendingRequests
from .topics import topic_filter_error, topic_name_error

__all__ = ["ClientConnection", "Tracer"]

# 3.x CONNACK return code -> the 5.0 reason code that means the same.
_V3_TO_V5_CONNACK = {
    1: ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
    2: ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
    3: ReasonCode.SERVER_UNAVAILABLE,
    4: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
    5: ReasonCode.NOT_AUTHORIZED,
}
_PINGREQ_BYTES = b"\xc0\x00"
_TOPIC_NAMES_MAX = 1024
# Frozen records cost about a microsecond each to build; these build the same objects faster (records.py).
_new_publish = fast_constructor(Publish)
_new_puback = fast_constructor(PubAck)
_new_messages = fast_constructor(MessagesReceived)
_new_acknowledged = fast_constructor(Acknowledged)
_NO_LIMITS = BrokerLimits()

_IDLE: Final = ConnectionState.IDLE
_CONNECTING: Final = ConnectionState.CONNECTING
_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED
_E = LifecycleEvent
_DELIVER: Final = Receipt.DELIVER


class Tracer(Protocol):
    """Sees a connection's bytes each way (`ClientConnection(trace=...)`): the clients' -d, net/trace.py."""

    def sent(self, data: bytes) -> None: ...

    def received(self, data: bytes | bytearray) -> None: ...


class ClientConnection:
    """One MQTT client session over any number of successive connections; `options` are ClientOptions's fields.

    With `manual_ack` (the bridge), QoS 1/2 messages received are acknowledged only when the owner calls
    `acknowledge()`, a re-send of one not yet acknowledged is not delivered again, and PUBREC and PUBREL are
    reported (PublishReceived, ReleaseReceived) so that an owner can journal the QoS 2 flows. With `owner_ids`
    (an embedded bridge), the owner names the packet identifier of each QoS 1/2 message it publishes, below
    OWN_IDS_FROM (its broker session's, which a restart keeps), and sends the PUBREL of each QoS 2 one with
    release() once it has stored the PUBREC; the connection's own packets take identifiers from OWN_IDS_FROM up.

    Messages received and plain PUBACKs come out a read at a time (MessagesReceived, Acknowledged): no event
    object per message, which a relay forwarding each message would pay for (docs/ARCHITECTURE.md, "The bridge").
    `trace` sees the bytes each way (data_to_send's, receive_data's).
    """

    def __init__(self, client_id: str = "", *, trace: Tracer | None = None, **options: Any) -> None:
        o = self.options = ClientOptions(client_id, **options)
        self.version = o.version  # of this connection (or the next): connect() may change it
        self.limits = _NO_LIMITS  # the broker's, from CONNACK
        self.state = _IDLE  # moved by _advance only, along the table shared with the server (lifecycle.py)
        self.session_present = False
        self.connack: ConnAck | None = None
        self._trace = trace
        session = self._session = ClientSession(o.max_inflight, o.manual_ack, o.owner_ids)
        self._flows, self._incoming, self._ledger = session.flows, session.incoming, session.ledger  # (hot paths)
        self._requests = PendingRequests(self._flows)
        self._timer = KeepaliveTimer(o.keepalive)  # its period: ours, or the broker's server keep alive
        self._reader = PacketReader(o.version, max_packet_size=o.maximum_packet_size)
        self._out: list[bytes] = []
        self._events: list[Event] = []
        # The lists of the MessagesReceived or Acknowledged event that is the last in _events (None: not last).
        self._received: list[Publish] | None = None
        self._acked: list[Any] | None = None
        self._aliases_in: dict[int, str] = {}  # the broker's aliases, this connection
        self._aliases = OutgoingAliases()  # ours, this connection
        self._relay_checks = False  # relay() declines: a maximum packet size or automatic aliases to apply
        self._topic_names: dict[str, bytes] = {}  # topics found valid, encoded
        #: Packets received so far (all connections): what one read brought, for a reader that paces itself.
        self.packets_received = 0

    # --- state --------------------------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """Ours: as given, or as the broker assigned it (kept for the next connection)."""
        return self.options.client_id

    @property
    def session_epoch(self) -> int:
        """Sessions the broker started us (ClientSession.epoch): an owner acknowledging late compares it first."""
        return self._session.epoch

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

    def connect(
        self,
        *,
        clean_start: bool | None = None,
        version: int | None = None,
        client_id: str | None = None,
        bridge: bool | None = None,
    ) -> None:
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
        self._aliases_in.clear()
        self._aliases.reset(0)
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
        if self.state is not _CONNECTED:
            raise LocalProtocolError(f"publish() while {self.state.value}")
        limits = self.limits
        if qos > limits.maximum_qos:
            raise LocalProtocolError(f"the broker accepts QoS {limits.maximum_qos} at most, not QoS {qos}")
        if retain and not limits.retain_available:
            raise LocalProtocolError("the broker does not support retained messages")
        if properties.items:
            if self.version != 5:
                raise LocalProtocolError("message properties need MQTT 5.0")
            alias = properties.topic_alias
            if alias is not None and alias > limits.topic_alias_maximum:
                raise LocalProtocolError(
                    f"topic alias {alias} is above the broker's topic alias maximum ({limits.topic_alias_maximum})"
                )
            if properties.subscription_identifiers:
                raise LocalProtocolError("a client must not send subscription identifiers in PUBLISH")
        topic_name = self._topic_names.get(topic)
        if topic_name is None:
            # Checked and encoded once per topic: `-l` and a bridge publish to few topics many times.
            if err := topic_name_error(topic):
                raise LocalProtocolError(f"PUBLISH {err}")
            topic_name = encode_topic_name(topic)
            if len(self._topic_names) >= _TOPIC_NAMES_MAX:
                self._topic_names.clear()
            self._topic_names[topic] = topic_name
        if qos == 0:
            packet = _new_publish(topic, payload, 0, retain, False, None, properties)
            data = encode(self._on_wire(packet), self.version)
            self._check_size(data)
            self._out.append(data)
            return None
        if limits.maximum_packet_size is not None:
            self._check_size(encode(Publish(topic, payload, qos, retain, False, 1, properties), self.version))
        sent = self._flows.send_fields(topic, payload, qos, retain, properties, context, packet_id)  # raises: closed
        version = self.version
        if properties.items or (version == 5 and self.options.auto_topic_aliases):
            self._out.append(encode_publish(self._on_wire(sent) if version == 5 else sent, version))
        else:  # no properties, no alias: the parts are known good
            pid = sent.packet_id
            assert pid is not None  # send_fields gave it one
            first = 0x31 | (qos << 1) if retain else 0x30 | (qos << 1)
            props = b"\x00" if version == 5 else b""
            self._out.append(frame_publish(first, topic_name, pid.to_bytes(2, "big"), props, payload))
        return sent.packet_id

    def relay(self, topic: str, payload: bytes, qos: int, retain: bool, context: Any = None, packet_id: int = 0) -> int:
        """publish() for a relay's hot path (the bridge): a QoS 1/2 message without properties, queued only when
        nothing needs checking for it: connected, the window open, a topic published before (so known valid), its
        QoS and retain flag within the broker's limits, no maximum packet size or automatic topic aliases to apply.
        Returns its packet identifier, or 0 when it was not queued: publish() then queues it or says why not."""
        topic_name = self._topic_names.get(topic)
        if topic_name is None or self.state is not _CONNECTED or self._relay_checks:
            return 0
        limits = self.limits
        if not 0 < qos <= limits.maximum_qos or (retain and not limits.retain_available):
            return 0
        sent = self._flows.try_send(topic, payload, qos, retain, EMPTY_PROPERTIES, context, packet_id)
        if sent is None:
            return 0
        pid = sent.packet_id
        assert pid is not None  # try_send gave it one
        first = 0x31 | (qos << 1) if retain else 0x30 | (qos << 1)
        self._out.append(
            frame_publish(first, topic_name, pid.to_bytes(2, "big"), b"\x00" if self.version == 5 else b"", payload)
        )
        return pid

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
            self._send_ack(packet_id, qos, reason_code)
        return True

    def _send_ack(self, packet_id: int, qos: int, reason_code: int) -> None:
        rc = reason_code if self.version == 5 else 0
        if qos == 1:
            if not rc:  # the common case, as bytes (a 5.0 PUBACK with reason 0 and no properties is 4 bytes too)
                self._out.append(b"\x40\x02" + packet_id.to_bytes(2, "big"))
                return
            self._out.append(encode(PubAck(packet_id, rc), self.version))
        else:
            if rc < 0x80:
                self._incoming.accept(packet_id)
            self._out.append(encode(PubRec(packet_id, rc), self.version))

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
        self._check_size(data)
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
            self._refuse(_V3_TO_V5_CONNACK.get(code, unsupported) if code else unsupported, code)
            return
        if self.state is _CONNECTED and data[0] == 0x40 and not self._reader.buffered:
            data = self._leading_pubacks(data)
            if not data or self.state is not _CONNECTED:
                return
        try:
            packets = self._reader.feed(data)
            self.packets_received += len(packets)
        except RemoteProtocolError as err:
            for packet in err.packets:
                if self.state is not _CLOSED:
                    self._handle(packet, now)
            if self.state is not _CLOSED:
                self._protocol_error(err.reason_code, f"the broker sent a bad packet: {err}")
            return
        handle = self._handle
        on_publish = self._on_publish
        connected = _CONNECTED
        for packet in packets:
            state = self.state
            if state is connected and type(packet) is Publish:
                on_publish(packet)  # most of what a subscriber or a bridge reads
            elif state is _CLOSED:
                break
            else:
                handle(packet, now)

    def _leading_pubacks(self, data: bytes | bytearray) -> bytes | bytearray:
        """Handles the plain PUBACKs (40 02 id id) at the start of `data`; returns the rest. A publisher at QoS 1
        receives little else, and this skips the general decoder for them."""
        pos = 0
        n = len(data)
        puback = self._flows.puback
        acked = self._acked
        while pos + 4 <= n and data[pos] == 0x40 and data[pos + 1] == 2:
            pid = (data[pos + 2] << 8) | data[pos + 3]
            pos += 4
            entry = puback(pid)
            if entry is None:
                try:  # not a QoS 1 message in flight: the general path says which error
                    entry, _ = self._flows.acknowledge(_new_puback(pid, 0, EMPTY_PROPERTIES))
                except ProtocolError as err:
                    self._protocol_error(err.reason_code, f"the broker sent {err}")
                    return b""
            if acked is None:
                acked = self._open_acked()
            acked.append(entry.context)
        self.packets_received += pos >> 2
        return data[pos:] if pos else data

    def connection_lost(self, reason: str) -> None:
        """The transport ended without the broker's close reaching receive_data() (a write failed first, say):
        the connection is over; a Disconnected event says why. Nothing happens when it was over already."""
        if self.state in (_CONNECTING, _CONNECTED):
            self._close(ReasonCode.UNSPECIFIED_ERROR, reason, _E.TRANSPORT_CLOSED)

    def events(self) -> list[Event]:
        """The events since the last call, in order."""
        out = self._events
        self._events = []
        self._received = self._acked = None
        return out

    def _emit(self, event: Event) -> None:
        self._received = self._acked = None  # what comes after this event goes in new batches
        self._events.append(event)

    def _open_received(self) -> list[Publish]:
        received: list[Publish] = []
        self._events.append(_new_messages(received))
        self._received, self._acked = received, None
        return received

    def _open_acked(self) -> list[Any]:
        acked: list[Any] = []
        self._events.append(_new_acknowledged(acked))
        self._received, self._acked = None, acked
        return acked

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

    def _check_size(self, data: bytes) -> None:
        limit = self.limits.maximum_packet_size
        if over_maximum_packet_size(len(data), limit):
            raise LocalProtocolError(
                f"a packet of {len(data)} bytes exceeds the broker's maximum packet size ({limit} bytes)"
            )

    def _on_wire(self, p: Publish) -> Publish:
        """The packet as it goes on this connection: with the topic replaced by an alias where one is set."""
        if self.version != 5 or not self._aliases.maximum:
            return p
        return self._aliases.apply(p, self.options.auto_topic_aliases)

    def _close(
        self, reason_code: int, reason: str, event: LifecycleEvent, properties: Properties = EMPTY_PROPERTIES
    ) -> None:
        self._advance(event)
        self._timer.ping_sent = None
        by_peer = event is _E.DISCONNECT_RECEIVED or event is _E.TRANSPORT_CLOSED
        self._emit(Disconnected(reason_code, reason, by_peer, properties))

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
        self._emit(ConnectionRefused(reason_code, reason, return_code, properties))

    def _handle(self, packet: Any, now: float) -> None:
        t = type(packet)
        if self.state is _CONNECTING:
            if t is ConnAck:
                self._on_connack(packet)
            else:
                self._protocol_error(ReasonCode.PROTOCOL_ERROR, f"the broker sent {t.__name__.upper()} before CONNACK")
            return
        if t is Publish:
            self._on_publish(packet)
        elif t is PubAck or t is PubComp or t is PubRec:
            self._on_acknowledgement(packet)
        elif t is PubRel:
            known = packet.packet_id in self._incoming
            self._out.append(encode(self._incoming.release(packet, self.version), self.version))
            if known and self._ledger is not None:
                self._emit(ReleaseReceived(packet.packet_id))
        elif t is SubAck or t is UnsubAck:
            if not self._requests.answered(packet):
                self._protocol_error(
                    ReasonCode.PROTOCOL_ERROR,
                    f"the broker sent {t.__name__.upper()} for unknown packet identifier {packet.packet_id}",
                )
                return
            answer = SubscribeAcknowledged if t is SubAck else UnsubscribeAcknowledged
            self._emit(answer(packet.packet_id, packet.reason_codes, packet.properties))
        elif t is PingResp:
            self._timer.ping_sent = None
            self._emit(PongReceived())
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

    def _on_acknowledgement(self, packet: PubAck | PubComp | PubRec) -> None:
        try:
            entry, pubrel = self._flows.acknowledge(packet)
        except ProtocolError as err:
            self._protocol_error(err.reason_code, f"the broker sent {err}")
            return
        pid = packet.packet_id
        if pubrel is not None:
            if not self._session.hold_pubrel(pid):  # (held: PUBREL when the owner's store says so, release())
                self._out.append(encode(pubrel, self.version))
            if self._ledger is not None:
                self._emit(PublishReceived(pid, entry.context))
        elif type(packet) is PubAck and not packet.reason_code and not packet.properties.items:
            acked = self._acked
            if acked is None:
                acked = self._open_acked()
            acked.append(entry.context)
        else:
            self._emit(PublishAcknowledged(pid, packet.reason_code, entry.context, packet.properties))

    def _on_connack(self, p: ConnAck) -> None:
        self.connack = p
        o = self.options
        if p.reason_code:
            if self.version == 5:
                self._refuse(p.reason_code, p.reason_code, p.properties)
            else:
                self._refuse(_V3_TO_V5_CONNACK.get(p.reason_code, ReasonCode.UNSPECIFIED_ERROR), p.reason_code)
            return
        props = p.properties
        self._advance(_E.CONNACK_ACCEPTED)
        # 3.1 has no session present flag: a broker keeps a session we asked it to keep.
        present = p.session_present if self.version != 3 else not o.clean_start
        self.session_present = present
        limits = self.limits = BrokerLimits.of(props)
        cap = o.max_inflight
        self._flows.receive_maximum = min(limits.receive_maximum, cap) if cap else limits.receive_maximum
        self._aliases.reset(limits.topic_alias_maximum)
        self._relay_checks = limits.maximum_packet_size is not None or o.auto_topic_aliases
        if props.server_keep_alive is not None:
            self._timer.period = props.server_keep_alive
        if props.assigned_client_identifier:
            # Kept for the next connection: the session is found again by this identifier.
            self.options = replace(o, client_id=props.assigned_client_identifier)
        unacknowledged: list[tuple[Publish, Any]] = []
        if present:
            if self._ledger is not None:
                for pid, qos, rc in self._ledger.take_owed():
                    self._send_ack(pid, qos, rc)
            for packet in self._session.resend():
                self._out.append(encode(self._on_wire(packet) if type(packet) is Publish else packet, self.version))
        else:
            delivered, unacknowledged = self._session.restart()
            for pid, context in delivered:  # past PUBREC: the broker owned them, only the release is lost
                self._emit(PublishAcknowledged(pid, 0, context))
        self._emit(ConnectionAccepted(present, p, tuple(unacknowledged)))

    def _on_publish(self, p: Publish) -> None:
        if p.properties.items and self.version == 5:
            alias = p.properties.topic_alias
            if alias is not None:
                try:
                    topic = resolve_topic_alias(self._aliases_in, self.options.topic_alias_maximum, alias, p.topic)
                except RemoteProtocolError as err:
                    self._protocol_error(err.reason_code, f"the broker sent PUBLISH: {err}")
                    return
                p = Publish(
                    topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, p.properties.replace(topic_alias=None)
                )
        elif not p.topic:
            self._protocol_error(ReasonCode.PROTOCOL_ERROR, "the broker sent a PUBLISH without a topic")
            return
        qos = p.qos
        if qos:
            pid = p.packet_id
            assert pid is not None  # the codec checks: QoS > 0 has one
            ledger = self._ledger
            if ledger is not None:  # manual_ack: deliver once, acknowledge when the owner says so
                receipt = ledger.receive(p)
                if receipt is not _DELIVER:
                    if receipt is Receipt.ACKNOWLEDGE_AGAIN:
                        self._out.append(encode(PubRec(pid), self.version))
                    return
            elif qos == 1:
                # PUBACK as bytes (the same 4 bytes in 3.x and, reason 0 without properties, 5.0): a subscriber's
                # cost per message. The acknowledgements of one read leave together (data_to_send joins them).
                self._out.append(b"\x40\x02" + pid.to_bytes(2, "big"))
            else:
                new = self._incoming.publish_received(p)
                if receive_maximum_exceeded(len(self._incoming), self.options.receive_maximum):
                    self._protocol_error(
                        ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
                        f"the broker sent more than {self.options.receive_maximum} unacknowledged messages",
                    )
                    return
                self._out.append(encode(PubRec(pid), self.version))
                if not new:
                    return
        received = self._received
        if received is None:
            received = self._open_received()
        received.append(p)
