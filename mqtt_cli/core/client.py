"""`ClientConnection`: the client side of MQTT 3.1, 3.1.1 and 5.0 as a sans-IO state machine (after h11/wsproto).

    conn = ClientConnection(client_id="c1", version=5, keepalive=30)
    conn.connect()
    transport.send(conn.data_to_send(now))
    conn.receive_data(chunk, now)          # b"" means the peer closed
    for event in conn.events(): ...        # ConnectionAccepted, MessageReceived, PublishAcknowledged, ...
    conn.publish("a/b", b"hi", qos=2)      # checks the broker's limits; returns the packet identifier
    conn.handle_timeout(now)               # at next_deadline(): PINGREQ due, or the broker stopped answering

No sockets, no clock: time comes in as a number (seconds, any origin). One object lives for a whole *session*:
`connect()` may be called again after `Disconnected`, and the messages in flight are re-sent with DUP when the
broker still has the session, or handed back in `ConnectionAccepted.unacknowledged` when it does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from .encoder import encode, encode_publish, encode_topic_name, frame_publish
from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from .events import (
    ConnectionAccepted,
    ConnectionRefused,
    Disconnected,
    Event,
    MessageReceived,
    PongReceived,
    PublishAcknowledged,
    PublishReceived,
    ReleaseReceived,
    SubscribeAcknowledged,
    UnsubscribeAcknowledged,
)
from .flows import OWN_IDS_FROM, FlowState, IncomingFlows, OutgoingFlows
from .lifecycle import (
    DEFAULT_RECEIVE_MAXIMUM,
    ConnectionState,
    LifecycleEvent,
    Role,
    keepalive_deadline,
    next_topic_alias,
    over_maximum_packet_size,
    receive_maximum_exceeded,
    resolve_topic_alias,
    transition,
)
from .packets import (
    Auth,
    ConnAck,
    Connect,
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
    Will,
)
from .properties import EMPTY_PROPERTIES, Properties
from .reader import PacketReader
from .reasons import REASONS_BY_PACKET, ReasonCode, reason_name
from .records import fast_constructor
from .topics import topic_filter_error, topic_name_error

__all__ = ["ClientConnection"]

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
_new_acknowledged = fast_constructor(PublishAcknowledged)


_IDLE: Final = ConnectionState.IDLE
_CONNECTING: Final = ConnectionState.CONNECTING
_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED
_E = LifecycleEvent


class ClientConnection:
    """One MQTT client session over any number of successive connections.

    `version`: 3 (3.1), 4 (3.1.1) or 5. `receive_maximum`, `maximum_packet_size` and `topic_alias_maximum` are
    this side's limits, announced in CONNECT (5.0) and enforced on what the broker sends. `max_inflight` caps
    our unacknowledged QoS 1/2 messages when the broker states no (or a larger) receive maximum, as 3.x brokers
    never do. `auto_topic_aliases` lets publish() use the broker's topic aliases for repeated topics by itself.

    `manual_ack` (the bridge): QoS 1/2 messages received are acknowledged only when the owner calls
    `acknowledge()`, and a re-send of one not yet acknowledged is not delivered again; PUBREC and PUBREL are
    reported (PublishReceived, ReleaseReceived) so that an owner can journal the QoS 2 flows. `bridge` sets
    mosquitto's bridge flag in a 3.x CONNECT (protocol level | 0x80: the broker does not echo our own messages).

    `on_message` and `on_acknowledged` are a relay's hot path (the bridge): an event object per message and the
    owner's loop over the events cost a good part of what forwarding a message costs (docs/ARCHITECTURE.md, "The
    bridge", says how much and why these stay callbacks). With `manual_ack`, a
    QoS 1/2 message received while no event of the same read is waiting goes to `on_message(publish)` instead
    of a MessageReceived event (so the order of what the owner sees is the order received); a plain PUBACK (reason
    0, no properties) goes to `on_acknowledged(context)` instead of a PublishAcknowledged event. Both are called
    synchronously from receive_data(); an exception from one leaves that read half applied and propagates, and
    the owner must then drop the connection (the bridge's process ends).

    `owner_ids` (an embedded bridge): the owner names the packet identifier of each QoS 1/2 message it publishes,
    below OWN_IDS_FROM (its broker session's, which a restart keeps), and sends the PUBREL of each QoS 2 one with
    release() once it has stored the PUBREC; the connection's own packets take identifiers from OWN_IDS_FROM up.
    """

    def __init__(
        self,
        client_id: str = "",
        *,
        version: int = 5,
        keepalive: int = 60,
        clean_start: bool = True,
        username: str | None = None,
        password: bytes | None = None,
        will: Will | None = None,
        properties: Properties = EMPTY_PROPERTIES,
        receive_maximum: int = 65535,
        maximum_packet_size: int | None = None,
        topic_alias_maximum: int = 0,
        max_inflight: int | None = None,
        auto_topic_aliases: bool = False,
        manual_ack: bool = False,
        bridge: bool = False,
        on_message: Callable[[Publish], None] | None = None,
        on_acknowledged: Callable[[Any], None] | None = None,
        owner_ids: bool = False,
    ) -> None:
        if version not in (3, 4, 5):
            raise ValueError(f"version must be 3, 4 or 5, not {version!r}")
        if not 0 <= keepalive <= 65535:
            raise ValueError(f"keepalive must be 0..65535 seconds, not {keepalive}")
        if not 1 <= receive_maximum <= 65535:
            raise ValueError(f"receive maximum must be 1..65535, not {receive_maximum}")
        self.client_id = client_id
        self.version = version
        self.keepalive = keepalive
        self.requested_keepalive = keepalive
        self.clean_start = clean_start
        self.username = username
        self.password = password
        self.will = will
        self.properties = properties
        self.receive_maximum = receive_maximum
        self.maximum_packet_size = maximum_packet_size
        self.topic_alias_maximum = topic_alias_maximum
        self.max_inflight = max_inflight
        self.auto_topic_aliases = auto_topic_aliases
        self.manual_ack = manual_ack
        self.bridge = bridge
        self.on_message = on_message if manual_ack else None
        self.on_acknowledged = on_acknowledged
        self.owner_ids = owner_ids

        self.state = _IDLE  # moved by _advance only, along the table shared with the server (lifecycle.py)
        self.session_present = False
        self.connack: ConnAck | None = None
        # The broker's limits, from CONNACK.
        self.server_receive_maximum = 65535
        self.server_maximum_packet_size: int | None = None
        self.server_topic_alias_maximum = 0
        self.server_maximum_qos = 2
        self.server_retain_available = True

        self._flows = OutgoingFlows(max_inflight)
        if owner_ids:  # the owner names its messages' identifiers (publish's packet_id); ours come from above them
            self._flows.use_ids(OWN_IDS_FROM, 65535)
        self._incoming = IncomingFlows()
        # manual_ack: messages delivered and not yet acknowledged by the owner (packet id -> QoS), and those the
        # owner acknowledged while disconnected (packet id -> (QoS, reason code)), sent after the next CONNACK.
        self._held: dict[int, int] = {}
        self._owed: dict[int, tuple[int, int]] = {}
        # QoS 1 identifiers the broker gave to another new message while we still held them (packet id -> how
        # many more), and the acknowledgements of such copies owed while disconnected: one PUBACK per message.
        self._held_copies: dict[int, int] = {}
        self._owed_copies: list[tuple[int, int]] = []  # (packet id, reason code)
        self._pending_subscribe: dict[int, Subscribe] = {}
        self._unreleased: set[int] = set()  # owner_ids: PUBREC came, PUBREL waits for release()
        self._pending_unsubscribe: dict[int, Unsubscribe] = {}
        self._reader = PacketReader(version, max_packet_size=maximum_packet_size)
        self._out: list[bytes] = []
        self._events: list[Event] = []
        self._aliases_in: dict[int, str] = {}  # the broker's aliases, this connection
        self._aliases_out: dict[int, str] = {}  # ours, this connection: alias -> topic
        self._auto_alias: dict[str, int] = {}  # topic -> alias, for auto_topic_aliases
        self._with_alias: dict[tuple[Properties, int], Properties] = {}  # properties + alias, built once
        self._last_aliased: tuple[Properties, int, Properties] | None = None
        self._topic_names: dict[str, bytes] = {}  # topics found valid, encoded
        self._last_sent: float | None = None
        self._last_received: float | None = None
        self._ping_sent: float | None = None
        #: Sessions the broker started us (CONNACK without a session present): a packet identifier received in an
        #: earlier one may name another message now, so an owner acknowledging late compares this first.
        self.session_epoch = 0
        #: Packets received so far (all connections): what one read brought, for a reader that paces itself.
        self.packets_received = 0
        #: PINGREQ packets sent on this connection (keepalive's and ping()'s): PINGRESPs answer them in order.
        self.pings_sent = 0

    # --- state --------------------------------------------------------------------------------------------

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
        return len(self._pending_subscribe) + len(self._pending_unsubscribe)

    def unacknowledged(self) -> list[tuple[Publish, Any]]:
        """Our messages in flight with their contexts, in the order they were sent."""
        return [(e.publish, e.context) for e in self._flows.entries()]

    # --- commands (they queue bytes) ----------------------------------------------------------------------

    def connect(self, *, clean_start: bool | None = None, version: int | None = None) -> None:
        """Queues CONNECT for a new connection (the first, or one after `Disconnected`)."""
        connecting = transition(Role.CLIENT, self.state, _E.CONNECT)  # raises (while connecting or connected)
        if version is not None:
            if version not in (3, 4, 5):
                raise ValueError(f"version must be 3, 4 or 5, not {version!r}")
            self.version = version
        if clean_start is not None:
            self.clean_start = clean_start
        v = self.version
        if v == 3 and not self.client_id:
            raise LocalProtocolError("MQTT 3.1 needs a client identifier (1 to 23 characters)")
        props = self.properties
        if v == 5:
            extra: dict[str, Any] = {}
            if self.receive_maximum != 65535:
                extra["receive_maximum"] = self.receive_maximum
            if self.maximum_packet_size is not None:
                extra["maximum_packet_size"] = self.maximum_packet_size
            if self.topic_alias_maximum:
                extra["topic_alias_maximum"] = self.topic_alias_maximum
            if extra:
                props = props.replace(**extra)
        else:
            props = EMPTY_PROPERTIES
        will = self.will
        if will is not None and v != 5 and will.properties:
            will = Will(will.topic, will.payload, will.qos, will.retain)
        packet = Connect(
            self.client_id,
            self.clean_start,
            self.requested_keepalive,
            self.username,
            self.password,
            will,
            props,
            v,
            bridge=self.bridge and v != 5,
        )
        data = encode(packet, v)  # raises before any state changes
        self._reader = PacketReader(v, max_packet_size=self.maximum_packet_size)
        self._out.clear()
        self._aliases_in.clear()
        self._aliases_out.clear()
        self._auto_alias.clear()
        self._pending_subscribe.clear()
        self._pending_unsubscribe.clear()
        self._flows.reserved.clear()
        self._ping_sent = None
        self.pings_sent = 0
        self._last_received = None
        self.keepalive = self.requested_keepalive
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
        if qos > self.server_maximum_qos:
            raise LocalProtocolError(f"the broker accepts QoS {self.server_maximum_qos} at most, not QoS {qos}")
        if retain and not self.server_retain_available:
            raise LocalProtocolError("the broker does not support retained messages")
        if properties.items:
            if self.version != 5:
                raise LocalProtocolError("message properties need MQTT 5.0")
            alias = properties.topic_alias
            if alias is not None and alias > self.server_topic_alias_maximum:
                raise LocalProtocolError(
                    f"topic alias {alias} is above the broker's topic alias maximum ({self.server_topic_alias_maximum})"
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
        if self.server_maximum_packet_size is not None:
            self._check_size(encode(Publish(topic, payload, qos, retain, False, 1, properties), self.version))
        sent = self._flows.send_fields(topic, payload, qos, retain, properties, context, packet_id)  # raises: closed
        version = self.version
        if properties.items or (version == 5 and self.auto_topic_aliases):
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
        if (
            topic_name is None
            or self.state is not _CONNECTED
            or not 0 < qos <= self.server_maximum_qos
            or (retain and not self.server_retain_available)
            or self.server_maximum_packet_size is not None
            or self.auto_topic_aliases
        ):
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
        copies = self._held_copies
        if copies and packet_id in copies:
            return self._acknowledge_copy(packet_id, reason_code)
        qos = self._held.pop(packet_id, None)
        if qos is None:
            return False
        if self.state is not _CONNECTED:
            self._owed[packet_id] = (qos, reason_code)
            return True
        if qos == 1 and not reason_code:  # _send_ack's common case, inline: the bridge's path for every message
            self._out.append(b"\x40\x02" + packet_id.to_bytes(2, "big"))
            return True
        self._send_ack(packet_id, qos, reason_code)
        return True

    def _acknowledge_copy(self, packet_id: int, reason_code: int) -> bool:
        """acknowledge() for a QoS 1 identifier held more than once: one PUBACK, the identifier still held."""
        copies = self._held_copies
        left = copies[packet_id] - 1
        if left:
            copies[packet_id] = left
        else:
            del copies[packet_id]
        if self.state is not _CONNECTED:
            self._owed_copies.append((packet_id, reason_code))
        else:
            self._send_ack(packet_id, 1, reason_code)
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

    @property
    def held(self) -> int:
        """manual_ack: messages delivered and not yet acknowledged."""
        return len(self._held) + (sum(self._held_copies.values()) if self._held_copies else 0)

    def restore_incoming(self, packet_id: int, qos: int, *, acknowledged: bool) -> None:
        """Before connect(), from the owner's journal: a message received in an earlier process that is still
        the owner's (not acknowledged: a re-send is not delivered again) or, QoS 2 acknowledged, awaiting
        PUBREL."""
        if acknowledged:
            if qos == 2:
                self._incoming.accept(packet_id)
        else:
            self._held[packet_id] = qos

    def release(self, packet_id: int) -> None:
        """owner_ids: the PUBREL of a QoS 2 message whose PUBREC came (PublishReceived) goes now that the owner
        has stored the PUBREC (sent earlier, a restart would re-send the PUBLISH, which a broker that completed the
        flow takes for a new message). While disconnected it goes with the re-sends after the next CONNACK."""
        if packet_id not in self._unreleased:
            return
        self._unreleased.discard(packet_id)
        if self.state is _CONNECTED:
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
        pid = self._allocate_request_id()
        packet = Subscribe(pid, subs, properties)
        data = encode(packet, self.version)
        self._check_size(data)
        self._flows.reserved.add(pid)
        self._pending_subscribe[pid] = packet
        self._out.append(data)
        return pid

    def unsubscribe(self, topic_filters: Iterable[str], properties: Properties = EMPTY_PROPERTIES) -> int:
        """Queues an UNSUBSCRIBE; returns its packet identifier (answered by UnsubscribeAcknowledged)."""
        self._require_connected("unsubscribe()")
        pid = self._allocate_request_id()
        packet = Unsubscribe(pid, tuple(topic_filters), properties)
        data = encode(packet, self.version)
        self._check_size(data)
        self._flows.reserved.add(pid)
        self._pending_unsubscribe[pid] = packet
        self._out.append(data)
        return pid

    def ping(self, now: float | None = None) -> None:
        """Queues a PINGREQ (keepalive sends its own; this one is for callers that want a PINGRESP as a marker)."""
        self._require_connected("ping()")
        self._out.append(_PINGREQ_BYTES)
        self.pings_sent += 1
        if self._ping_sent is None:
            self._ping_sent = now if now is not None else (self._last_sent or self._last_received or 0.0)

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
            self._last_sent = now
        return data

    def receive_data(self, data: bytes | bytearray, now: float) -> None:
        """Feeds bytes from the broker (b"" when it closed the connection); events() tells what happened."""
        state = self.state  # a local: the handlers below change self.state, which mypy must not take as narrowed
        if state is _IDLE or state is _CLOSED:
            return
        if not data:
            self._close(ReasonCode.UNSPECIFIED_ERROR, "the broker closed the connection", _E.TRANSPORT_CLOSED)
            return
        self._last_received = now
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
        append = self._events.append
        sink = self.on_acknowledged
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
            if sink is not None:
                sink(entry.context)
            else:
                append(_new_acknowledged(pid, 0, entry.context, EMPTY_PROPERTIES))
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
        return out

    def next_deadline(self) -> float | None:
        """When handle_timeout() must be called next (None: no timer is running)."""
        ka = self.keepalive
        if self.state is not _CONNECTED or not ka or self._last_received is None:
            return None
        dead = keepalive_deadline(self._last_received, ka)
        if self._ping_sent is not None:
            return dead
        last = self._last_received if self._last_sent is None else min(self._last_sent, self._last_received)
        return min(last + ka, dead)

    def handle_timeout(self, now: float) -> None:
        """Sends PINGREQ when nothing was sent or received for a keepalive period; ends the connection when the
        broker has said nothing for 1.5 keepalive periods (so a PINGREQ went unanswered for half a period)."""
        deadline = self.next_deadline()
        if deadline is None or now < deadline:
            return
        assert self._last_received is not None
        if now >= keepalive_deadline(self._last_received, self.keepalive):
            self._close(
                ReasonCode.KEEP_ALIVE_TIMEOUT,
                f"no answer from the broker for {1.5 * self.keepalive:g} s (keepalive)",
                _E.DISCONNECT_SENT,
            )
            return
        self._out.append(_PINGREQ_BYTES)
        self.pings_sent += 1
        self._ping_sent = now

    # --- internals ----------------------------------------------------------------------------------------

    def _require_connected(self, what: str) -> None:
        if self.state is not _CONNECTED:
            raise LocalProtocolError(f"{what} while {self.state.value}")

    def _allocate_request_id(self) -> int:
        pid = self._flows._allocate()
        while pid in self._pending_subscribe or pid in self._pending_unsubscribe:
            pid = self._flows._allocate()
        return pid

    def _check_size(self, data: bytes) -> None:
        limit = self.server_maximum_packet_size
        if over_maximum_packet_size(len(data), limit):
            raise LocalProtocolError(
                f"a packet of {len(data)} bytes exceeds the broker's maximum packet size ({limit} bytes)"
            )

    def _on_wire(self, p: Publish) -> Publish:
        """The packet as it goes on this connection: with the topic replaced by an alias where one is set."""
        if self.version != 5 or not self.server_topic_alias_maximum:
            return p
        props = p.properties
        alias = props.topic_alias if props else None
        if alias is None:
            if not self.auto_topic_aliases:
                return p
            alias = self._auto_alias.get(p.topic)
            if alias is None:
                alias = next_topic_alias(self._aliases_out, self.server_topic_alias_maximum)
                if not alias:
                    return p  # every alias is taken: the topic goes in full
                self._auto_alias[p.topic] = alias
                self._aliases_out[alias] = p.topic
                return _new_publish(
                    p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, self._aliased(props, alias)
                )
            return _new_publish("", p.payload, p.qos, p.retain, p.dup, p.packet_id, self._aliased(props, alias))
        if self._aliases_out.get(alias) == p.topic:
            return Publish("", p.payload, p.qos, p.retain, p.dup, p.packet_id, props)
        old = self._aliases_out.get(alias)
        if old is not None:
            self._auto_alias.pop(old, None)
        self._aliases_out[alias] = p.topic
        return p

    def _aliased(self, props: Properties, alias: int) -> Properties:
        last = self._last_aliased
        if last is not None and last[0] is props and last[1] == alias:
            return last[2]  # `pub -l`: the same properties object every time; skip hashing it
        found = self._aliased_lookup(props, alias)
        self._last_aliased = (props, alias, found)
        return found

    def _aliased_lookup(self, props: Properties, alias: int) -> Properties:
        key = (props, alias)
        found = self._with_alias.get(key)
        if found is None:
            if len(self._with_alias) > 1024:
                self._with_alias.clear()
            found = self._with_alias[key] = props.replace(topic_alias=alias)
        return found

    def _close(
        self, reason_code: int, reason: str, event: LifecycleEvent, properties: Properties = EMPTY_PROPERTIES
    ) -> None:
        self._advance(event)
        self._ping_sent = None
        by_peer = event is _E.DISCONNECT_RECEIVED or event is _E.TRANSPORT_CLOSED
        self._events.append(Disconnected(reason_code, reason, by_peer, properties))

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
        self._events.append(ConnectionRefused(reason_code, reason, return_code, properties))

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
            try:
                entry, pubrel = self._flows.acknowledge(packet)
            except ProtocolError as err:
                self._protocol_error(err.reason_code, f"the broker sent {err}")
                return
            if pubrel is not None:
                if self.owner_ids and packet.packet_id < OWN_IDS_FROM:
                    self._unreleased.add(packet.packet_id)  # PUBREL when the owner's store says so: release()
                else:
                    self._out.append(encode(pubrel, self.version))
                if self.manual_ack:
                    self._events.append(PublishReceived(packet.packet_id, entry.context))
            else:
                self._events.append(
                    PublishAcknowledged(packet.packet_id, packet.reason_code, entry.context, packet.properties)
                )
        elif t is PubRel:
            known = packet.packet_id in self._incoming
            self._out.append(encode(self._incoming.release(packet, self.version), self.version))
            if known and self.manual_ack:
                self._events.append(ReleaseReceived(packet.packet_id))
        elif t is SubAck:
            if self._pending_subscribe.pop(packet.packet_id, None) is None:
                self._protocol_error(
                    ReasonCode.PROTOCOL_ERROR,
                    f"the broker sent SUBACK for unknown packet identifier {packet.packet_id}",
                )
                return
            self._flows.reserved.discard(packet.packet_id)
            self._events.append(SubscribeAcknowledged(packet.packet_id, packet.reason_codes, packet.properties))
        elif t is UnsubAck:
            if self._pending_unsubscribe.pop(packet.packet_id, None) is None:
                self._protocol_error(
                    ReasonCode.PROTOCOL_ERROR,
                    f"the broker sent UNSUBACK for unknown packet identifier {packet.packet_id}",
                )
                return
            self._flows.reserved.discard(packet.packet_id)
            self._events.append(UnsubscribeAcknowledged(packet.packet_id, packet.reason_codes, packet.properties))
        elif t is PingResp:
            self._ping_sent = None
            self._events.append(PongReceived())
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
        if p.reason_code:
            if self.version == 5:
                self._refuse(p.reason_code, p.reason_code, p.properties)
            else:
                self._refuse(_V3_TO_V5_CONNACK.get(p.reason_code, ReasonCode.UNSPECIFIED_ERROR), p.reason_code)
            return
        props = p.properties
        self._advance(_E.CONNACK_ACCEPTED)
        # 3.1 has no session present flag: a broker keeps a session we asked it to keep.
        present = p.session_present if self.version != 3 else not self.clean_start
        self.session_present = present
        receive_max = props.receive_maximum or DEFAULT_RECEIVE_MAXIMUM
        self.server_receive_maximum = receive_max
        cap = self.max_inflight
        self._flows.receive_maximum = min(receive_max, cap) if cap else receive_max
        self.server_maximum_packet_size = props.maximum_packet_size
        self.server_topic_alias_maximum = props.topic_alias_maximum or 0
        self.server_maximum_qos = 2 if props.maximum_qos is None else props.maximum_qos
        self.server_retain_available = props.retain_available != 0
        if props.server_keep_alive is not None:
            self.keepalive = props.server_keep_alive
        if props.assigned_client_identifier:
            # Kept for the next connection: the session is found again by this identifier.
            self.client_id = props.assigned_client_identifier
        unacknowledged: list[tuple[Publish, Any]] = []
        if present:
            if self._owed:
                for pid, (qos, rc) in self._owed.items():
                    self._send_ack(pid, qos, rc)
                self._owed.clear()
            for pid, rc in self._owed_copies:
                self._send_ack(pid, 1, rc)
            self._owed_copies.clear()
            unreleased = self._unreleased
            for packet in self._flows.resend():
                if type(packet) is Publish:
                    self._out.append(encode(self._on_wire(packet), self.version))
                elif packet.packet_id not in unreleased:
                    self._out.append(encode(packet, self.version))
        else:
            self._incoming.clear()
            self._held.clear()  # the broker forgot these: nothing to acknowledge, no re-send to hold back
            self._owed.clear()
            self._held_copies.clear()
            self._owed_copies.clear()
            self.session_epoch += 1
            self._unreleased.clear()
            for entry in self._flows.clear():
                p0 = entry.publish
                if entry.state is FlowState.AWAIT_PUBCOMP:
                    # PUBREC said the broker owns the message (4.3.3): it was delivered, only the release is lost.
                    self._events.append(PublishAcknowledged(p0.packet_id or 0, 0, entry.context))
                else:
                    # A new message now, under the identifier the owner gave it (owner_ids) or a new one.
                    given = p0.packet_id if self.owner_ids and (p0.packet_id or 0) < OWN_IDS_FROM else None
                    fresh = Publish(p0.topic, p0.payload, p0.qos, p0.retain, False, given, p0.properties)
                    unacknowledged.append((fresh, entry.context))
        self._events.append(ConnectionAccepted(present, p, tuple(unacknowledged)))

    def _on_publish(self, p: Publish) -> None:
        if p.properties.items and self.version == 5:
            alias = p.properties.topic_alias
            if alias is not None:
                try:
                    topic = resolve_topic_alias(self._aliases_in, self.topic_alias_maximum, alias, p.topic)
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
        if qos == 0:
            self._events.append(MessageReceived(p))
        elif self.manual_ack:
            self._on_held_publish(p)
        elif qos == 1:
            assert p.packet_id is not None  # the codec checks: QoS > 0 has one
            # PUBACK as bytes (the same 4 bytes in 3.x and, reason 0 without properties, 5.0): a subscriber's
            # cost per message. The acknowledgements of one read leave together (data_to_send joins them).
            self._out.append(b"\x40\x02" + p.packet_id.to_bytes(2, "big"))
            self._events.append(MessageReceived(p))
        else:
            new = self._incoming.publish_received(p)
            if receive_maximum_exceeded(len(self._incoming), self.receive_maximum):
                self._protocol_error(
                    ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
                    f"the broker sent more than {self.receive_maximum} unacknowledged messages",
                )
                return
            assert p.packet_id is not None
            self._out.append(encode(PubRec(p.packet_id), self.version))
            if new:
                self._events.append(MessageReceived(p))

    def _on_held_publish(self, p: Publish) -> None:
        """manual_ack: deliver once, acknowledge when the owner says so."""
        pid = p.packet_id
        assert pid is not None  # the codec checks: QoS > 0 has one
        held = self._held
        if pid in held:
            if p.dup or p.qos != 1 or held[pid] != 1:
                return  # a re-send of a message the owner has not finished with
            # DUP 0: a new message under an identifier still in flight to us. A broker should not reuse it, but
            # mosquitto does with max_inflight_messages 0 once 65,535 messages await our acknowledgement (a
            # bridge whose other side stalls). Dropping it as a re-send left it unacknowledged and the broker's
            # queue stuck behind it; at QoS 1 it is delivered, and acknowledged once per message.
            self._held_copies[pid] = self._held_copies.get(pid, 0) + 1
        elif p.qos == 2 and pid in self._incoming and p.dup:
            # Already ours: acknowledge again only. DUP 0 under a known identifier is a new message (a re-send
            # has DUP set, 3.3.1.1): the flow before it ended with a PUBREL whose mark an owner restoring from its
            # journal (restore_incoming) had not written yet; taking it for a re-send would lose it.
            self._out.append(encode(PubRec(pid), self.version))
            return
        elif pid in self._owed:
            return  # acknowledged while disconnected; the acknowledgement goes out after CONNACK
        else:
            # Receive maximum is not enforced here: after a reconnect, a re-send that crossed our acknowledgement
            # looks new and is held again, so our count runs ahead of the broker's (seen with mosquitto). The
            # broker's own send quota bounds what it sends.
            held[pid] = p.qos
        sink = self.on_message
        if sink is not None and not self._events:
            sink(p)
        else:
            self._events.append(MessageReceived(p))
