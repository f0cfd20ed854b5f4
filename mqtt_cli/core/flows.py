"""QoS 1 and 2 message flows (spec 4.3), the same on both sides of a connection.

`OutgoingFlows` is the sender's half: it hands out packet identifiers, keeps every unacknowledged PUBLISH and
PUBREL in order, bounds them by the peer's Receive Maximum, and gives back what to re-send after a reconnect.
`IncomingFlows` is the receiver's half: it remembers the QoS 2 packet identifiers received and not yet released,
so a re-sent PUBLISH is acknowledged again but delivered only once.

The transitions are tables: an acknowledgement that does not fit the state of its packet identifier (a PUBACK
for a QoS 2 message, a PUBCOMP before PUBREC, an unknown identifier) raises ProtocolError with the reason code
the spec gives, and leaves the state unchanged.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from .errors import LocalProtocolError, ProtocolError
from .packets import PubAck, PubComp, Publish, PubRec, PubRel
from .properties import Properties
from .records import mutable_twin

__all__ = ["OWN_IDS_FROM", "FlowState", "IncomingFlows", "Inflight", "OutgoingFlows"]

# An embedded bridge's remote client sends the broker session's packet identifiers (the ones the store keeps, so a
# restart re-sends each message under the identifier the remote broker holds it by): the session gives those below
# this, the client its own packets' (SUBSCRIBE, UNSUBSCRIBE, its notification message) from here up.
OWN_IDS_FROM = 65280


class FlowState(Enum):
    AWAIT_PUBACK = "awaiting PUBACK"  # QoS 1 PUBLISH sent
    AWAIT_PUBREC = "awaiting PUBREC"  # QoS 2 PUBLISH sent
    AWAIT_PUBCOMP = "awaiting PUBCOMP"  # QoS 2 PUBREL sent


# (state, acknowledgement type) -> next state; None ends the flow. Pairs not listed are protocol errors.
_TRANSITIONS: dict[tuple[FlowState, type], FlowState | None] = {
    (FlowState.AWAIT_PUBACK, PubAck): None,
    (FlowState.AWAIT_PUBREC, PubRec): FlowState.AWAIT_PUBCOMP,
    (FlowState.AWAIT_PUBCOMP, PubComp): None,
}


_NO_IDS: frozenset[int] = frozenset()
_AWAIT_PUBACK = FlowState.AWAIT_PUBACK
_AWAIT_PUBREC = FlowState.AWAIT_PUBREC
_AWAIT_PUBCOMP = FlowState.AWAIT_PUBCOMP
# Publish without its __init__ checks (the fields come from a checked publish()): built as its plain twin, then
# given its class, inline in try_send (a delivery's hot path) as the codec does.
_PublishTwin = mutable_twin(Publish)


class Inflight:
    """One unacknowledged outgoing message. `publish` is what was sent (kept for re-sending with DUP).

    An entry made by `OutgoingFlows.send_fields_lazily` (the broker's deliveries) keeps the fields and builds its
    Publish only when asked for it: most flows end without anyone asking, and building a packet record costs
    more than the rest of the flow's bookkeeping."""

    # A plain class, not a dataclass: every client imports this module, and dataclasses (with the inspect
    # module it loads) cost a one-shot `mqtt pub` several ms.
    __slots__ = ("_packet_id", "_payload", "_properties", "_publish", "_qos", "_retain", "_topic", "context", "state")

    def __init__(self, publish: Publish | None, state: FlowState, context: Any = None) -> None:
        self._publish = publish
        self.state = state
        self.context = context  # the owner's bookkeeping (e.g. the broker's message record), returned on completion
        # The fields of a Publish not built yet (publish None).
        self._topic = ""
        self._payload = b""
        self._qos = 0
        self._retain = False
        self._packet_id = 0
        self._properties: Properties | None = None

    @property
    def publish(self) -> Publish:
        p = self._publish
        if p is None:
            props = self._properties
            assert props is not None  # (made lazily: send_fields_lazily sets the fields)
            twin = _PublishTwin(self._topic, self._payload, self._qos, self._retain, False, self._packet_id, props)
            twin.__class__ = Publish
            p = twin
            self._publish = p
        return p

    @publish.setter
    def publish(self, value: Publish) -> None:
        self._publish = value


def _unbuilt(
    topic: str, payload: bytes, qos: int, retain: bool, pid: int, properties: Properties, state: FlowState, context: Any
) -> Inflight:
    """An entry whose Publish is built when asked for (Inflight.publish)."""
    entry = Inflight(None, state, context)
    entry._topic = topic
    entry._payload = payload
    entry._qos = qos
    entry._retain = retain
    entry._packet_id = pid
    entry._properties = properties
    return entry


class OutgoingFlows:
    """Packet identifiers and unacknowledged QoS 1/2 messages of one sender.

    `receive_maximum` is the peer's (65535 when it states none); `None` or 0 means unlimited (a broker's
    `--max-inflight 0`). Entries keep the order they were sent in, which is the order of re-sending.
    """

    __slots__ = ("_first_id", "_inflight", "_last_id", "_next_id", "_reserved", "receive_maximum")

    def __init__(self, receive_maximum: int | None = 65535) -> None:
        self.receive_maximum = receive_maximum or None
        self._inflight: dict[int, Inflight] = {}
        self._next_id = 1
        self._first_id = 1  # the identifiers this side hands out itself (use_ids)
        self._last_id = 65535
        self._reserved: set[int] | None = None  # made at the first use (`reserved`): a broker's sessions never do

    def __len__(self) -> int:
        return len(self._inflight)

    @property
    def reserved(self) -> set[int]:
        """Identifiers the owner uses for other packets in flight (a client's SUBSCRIBE/UNSUBSCRIBE awaiting their
        answer: 2.2.1, one identifier space per direction): never given to a message."""
        reserved = self._reserved
        if reserved is None:
            reserved = self._reserved = set()
        return reserved

    def __contains__(self, packet_id: int) -> bool:
        return packet_id in self._inflight

    def get(self, packet_id: int) -> Inflight | None:
        return self._inflight.get(packet_id)

    @property
    def window_open(self) -> bool:
        """True when one more QoS 1/2 PUBLISH may be sent now."""
        limit = self.receive_maximum
        n = len(self._inflight)
        return (limit is None or n < limit) and n + len(self._reserved or _NO_IDS) < 65535

    def use_ids(self, first: int, last: int) -> None:
        """Hands out identifiers from `first` to `last` only (an embedded bridge's two halves share one space, see
        OWN_IDS_FROM); identifiers given with a message (`packet_id`) may be any."""
        self._first_id = first
        self._last_id = last
        if not first <= self._next_id <= last:
            self._next_id = first

    def allocate(self) -> int:
        """A free packet identifier, taken, for a packet that is no message flow (SUBSCRIBE, UNSUBSCRIBE)."""
        return self._allocate()

    def _allocate(self) -> int:
        reserved = self._reserved or _NO_IDS
        if len(self._inflight) + len(reserved) >= 65535:
            raise LocalProtocolError("all 65,535 packet identifiers are in use")
        first = self._first_id
        last = self._last_id
        pid = self._next_id
        inflight = self._inflight
        left = last - first + 1
        while pid in inflight or pid in reserved:
            pid = pid + 1 if pid < last else first
            left -= 1
            if not left:
                raise LocalProtocolError(f"all packet identifiers from {first} to {last} are in use")
        self._next_id = pid + 1 if pid < last else first
        return pid

    def send(self, publish: Publish, context: Any = None) -> Publish:
        """Gives `publish` (QoS 1 or 2) a free packet identifier and records it; returns the packet to send.

        Callers check `window_open` first (the spec forbids exceeding the peer's Receive Maximum); this raises
        LocalProtocolError when it is closed.
        """
        p = publish
        return self.send_fields(p.topic, p.payload, p.qos, p.retain, p.properties, context)

    def send_fields(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Properties,
        context: Any = None,
        packet_id: int = 0,
    ) -> Publish:
        """`send` for a message not yet built as a Publish (the broker's fan-out): one Publish, the one kept.
        `packet_id`: the identifier the owner chose (0: one is handed out)."""
        if qos not in (1, 2):
            raise LocalProtocolError(f"only QoS 1 and 2 messages have flows, not QoS {qos}")
        packet = self.try_send(topic, payload, qos, retain, properties, context, packet_id)
        if packet is None:
            raise LocalProtocolError(
                f"{len(self._inflight)} messages are in flight: the window is closed (receive maximum)"
            )
        return packet

    def try_send(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Properties,
        context: Any = None,
        packet_id: int = 0,
    ) -> Publish | None:
        """send_fields() without the checks that raise, for a caller that knows `qos` is 1 or 2: None (nothing
        recorded) when the window is closed. A `packet_id` given that is in use raises LocalProtocolError."""
        inflight = self._inflight
        limit = self.receive_maximum
        if limit is not None and len(inflight) >= limit:
            return None
        if packet_id:
            if packet_id in inflight or not 0 < packet_id <= 65535:
                raise LocalProtocolError(f"packet identifier {packet_id} is in use or out of range")
            pid = packet_id
        else:
            pid = self._take_id()
        twin = _PublishTwin(topic, payload, qos, retain, False, pid, properties)
        twin.__class__ = Publish
        packet: Publish = twin  # typed once it is one (a compiled build checks the type here)
        inflight[pid] = Inflight(packet, _AWAIT_PUBACK if qos == 1 else _AWAIT_PUBREC, context)
        return packet

    def send_fields_lazily(
        self, topic: str, payload: bytes, qos: int, retain: bool, properties: Properties, context: Any = None
    ) -> int:
        """try_send for a caller that needs only the packet identifier (the broker's deliveries): 0 when the window
        is closed (nothing recorded). The entry builds its Publish only if asked for it (Inflight.publish)."""
        inflight = self._inflight
        limit = self.receive_maximum
        if limit is not None and len(inflight) >= limit:
            return 0
        pid = self._take_id()
        state = _AWAIT_PUBACK if qos == 1 else _AWAIT_PUBREC
        inflight[pid] = _unbuilt(topic, payload, qos, retain, pid, properties, state, context)
        return pid

    def _take_id(self) -> int:
        """The next free packet identifier, taken: the common case here, the search in _allocate."""
        pid = self._next_id
        reserved = self._reserved
        if pid in self._inflight or (reserved is not None and pid in reserved):
            return self._allocate()
        self._next_id = pid + 1 if pid < self._last_id else self._first_id
        return pid

    def puback(self, packet_id: int) -> Inflight | None:
        """The common case of acknowledge(): a plain PUBACK (reason 0, no properties) for a QoS 1 message in
        flight ends its flow; returns the entry. None when it is anything else: call acknowledge() for the answer
        (a protocol error)."""
        entry = self._inflight.get(packet_id)
        if entry is None or entry.state is not _AWAIT_PUBACK:
            return None
        del self._inflight[packet_id]
        return entry

    def pubrec(self, packet_id: int) -> Inflight | None:
        """The common case of acknowledge() for a PUBREC with a success reason code (the caller checks): its QoS 2
        message in flight now awaits PUBCOMP, and the caller sends PUBREL; returns the entry. None when it is
        anything else: call acknowledge() for the answer."""
        entry = self._inflight.get(packet_id)
        if entry is None or entry.state is not _AWAIT_PUBREC:
            return None
        entry.state = _AWAIT_PUBCOMP
        return entry

    def pubrec_again(self, packet_id: int) -> bool:
        """A PUBREC for a QoS 2 message whose PUBREL was sent already: True, and the caller sends PUBREL again
        (nothing else changes). The peer answered a PUBLISH re-sent on reconnect after it had acknowledged it
        (its owed PUBREC went first): a repeat, not a protocol error; mosquitto answers it the same way."""
        entry = self._inflight.get(packet_id)
        return entry is not None and entry.state is _AWAIT_PUBCOMP

    def pubcomp(self, packet_id: int) -> Inflight | None:
        """puback() for PUBCOMP: ends a QoS 2 flow whose PUBREL was sent (any reason code); returns the entry. None
        when it is anything else: call acknowledge() for the answer."""
        entry = self._inflight.get(packet_id)
        if entry is None or entry.state is not _AWAIT_PUBCOMP:
            return None
        del self._inflight[packet_id]
        return entry

    def acknowledge(self, ack: PubAck | PubRec | PubComp) -> tuple[Inflight, PubRel | None]:
        """Applies PUBACK, PUBREC or PUBCOMP. Returns the flow's entry and the PUBREL to send (after PUBREC).

        The flow ends (the identifier is free again) on PUBACK, on PUBCOMP, and on a PUBREC whose reason code is
        a failure (>= 0x80, 5.0 4.3.3: no PUBREL then). `entry.state` tells where it stood.
        """
        pid = ack.packet_id
        entry = self._inflight.get(pid)
        if entry is None:
            raise ProtocolError(
                f"{type(ack).__name__.upper()} for packet identifier {pid}, which has no message in flight",
                reason_code=0x92 if isinstance(ack, PubComp) else 0x82,
            )
        try:
            nxt = _TRANSITIONS[(entry.state, type(ack))]
        except KeyError:
            name = type(ack).__name__.upper()
            raise ProtocolError(f"{name} for packet identifier {pid}, which is {entry.state.value}") from None
        if nxt is None or ack.reason_code >= 0x80:
            del self._inflight[pid]
            return entry, None
        entry.state = nxt
        return entry, PubRel(pid)

    def restore(self, publish: Publish, released: bool, context: Any = None) -> None:
        """Records a flow carried over from an earlier process (a journal): the PUBLISH as sent, with its packet
        identifier, and whether PUBREC came already. Re-sent after the next CONNACK like any other."""
        pid = publish.packet_id
        if not pid or publish.qos not in (1, 2):
            raise LocalProtocolError("only QoS 1/2 messages with a packet identifier have flows")
        if released and publish.qos != 2:
            raise LocalProtocolError("only QoS 2 flows are released")
        state = (
            FlowState.AWAIT_PUBCOMP
            if released
            else (FlowState.AWAIT_PUBACK if publish.qos == 1 else FlowState.AWAIT_PUBREC)
        )
        self._inflight[pid] = Inflight(publish, state, context)

    def discard(self, packet_id: int) -> Inflight | None:
        """Ends a flow without an acknowledgement (a message that turned out not to be sendable)."""
        return self._inflight.pop(packet_id, None)

    def resend(self) -> list[Publish | PubRel]:
        """What to send again, in order, after a reconnect: PUBLISH with DUP set, or PUBREL (4.4)."""
        out: list[Publish | PubRel] = []
        for pid, entry in self._inflight.items():
            if entry.state is FlowState.AWAIT_PUBCOMP:
                out.append(PubRel(pid))
            else:
                p = entry.publish
                if not p.dup:
                    p = entry.publish = Publish(p.topic, p.payload, p.qos, p.retain, True, pid, p.properties)
                out.append(p)
        return out

    def entries(self) -> list[Inflight]:
        return list(self._inflight.values())

    def clear(self) -> list[Inflight]:
        """Drops every flow (a clean start); returns what was in flight."""
        gone = list(self._inflight.values())
        self._inflight.clear()
        return gone


class IncomingFlows:
    """QoS 2 packet identifiers received and not yet released by PUBREL (exactly-once delivery)."""

    __slots__ = ("_awaiting_pubrel",)

    def __init__(self) -> None:
        self._awaiting_pubrel: set[int] | None = None  # created on first use: most clients never send QoS 2

    def __len__(self) -> int:
        return len(self._awaiting_pubrel) if self._awaiting_pubrel else 0

    def __contains__(self, packet_id: int) -> bool:
        awaiting = self._awaiting_pubrel
        return awaiting is not None and packet_id in awaiting

    def publish_received(self, publish: Publish) -> bool:
        """Records a QoS 2 PUBLISH; True when it is new (deliver it), False for a re-send (acknowledge only)."""
        pid = publish.packet_id
        assert pid is not None, "a QoS 2 PUBLISH has a packet identifier (the codec checks)"
        awaiting = self._awaiting_pubrel
        if awaiting is None:
            awaiting = self._awaiting_pubrel = set()
        elif pid in awaiting:
            return False
        awaiting.add(pid)
        return True

    def ids(self) -> list[int]:
        """The identifiers awaiting PUBREL."""
        return sorted(self._awaiting_pubrel) if self._awaiting_pubrel else []

    def accept(self, packet_id: int) -> None:
        """Records a QoS 2 identifier as received and acknowledged (PUBREC sent), awaiting PUBREL."""
        if self._awaiting_pubrel is None:
            self._awaiting_pubrel = set()
        self._awaiting_pubrel.add(packet_id)

    def released(self, packet_id: int) -> bool:
        """release() without the PUBCOMP: True when `packet_id` was awaiting PUBREL (no longer), else False (the
        caller answers with release(), 5.0: 0x92)."""
        awaiting = self._awaiting_pubrel
        if awaiting and packet_id in awaiting:
            awaiting.discard(packet_id)
            return True
        return False

    def release(self, pubrel: PubRel, version: int = 5) -> PubComp:
        """Applies PUBREL; returns the PUBCOMP to send (5.0: 0x92 when the identifier was unknown)."""
        pid = pubrel.packet_id
        awaiting = self._awaiting_pubrel
        if awaiting and pid in awaiting:
            awaiting.discard(pid)
            return PubComp(pid)
        return PubComp(pid, 0x92 if version == 5 else 0)

    def clear(self) -> None:
        self._awaiting_pubrel = None
