"""`Inbox`: the receiving half of a client connection's message flows: what the broker's PUBLISH, PUBACK, PUBREC,
PUBREL and PUBCOMP do, and the events the connection hands its owner.

The two kinds of event a busy connection is made of come a read at a time: the messages received go into one
`MessagesReceived`, the plain PUBACKs (success, no properties) into one `Acknowledged`, each holding those that
arrive between two other events (so the owner sees everything in the order received), without an object per
message. A packet that breaks a rule raises RemoteProtocolError saying what the broker sent; the connection
then closes (ClientConnection).
"""

from __future__ import annotations

from typing import Any, Final

from .client_session import ClientSession
from .encoder import encode
from .errors import ProtocolError, RemoteProtocolError
from .events import Acknowledged, Event, MessagesReceived, PublishAcknowledged, PublishReceived, ReleaseReceived
from .ledger import Receipt
from .lifecycle import receive_maximum_exceeded, resolve_topic_alias
from .packets import PubAck, PubComp, Publish, PubRec, PubRel
from .properties import EMPTY_PROPERTIES
from .reasons import ReasonCode
from .records import fast_constructor

__all__ = ["Inbox"]

# Frozen records cost about a microsecond each to build; these build the same objects faster (records.py).
_new_puback = fast_constructor(PubAck)
_new_messages = fast_constructor(MessagesReceived)
_new_acknowledged = fast_constructor(Acknowledged)
_DELIVER: Final = Receipt.DELIVER


class Inbox:
    """`out` is the connection's queue of bytes to send (acknowledgements go there); `receive_maximum` and, per
    connection (`reset`), `alias_maximum` are ours, enforced on what the broker sends."""

    __slots__ = ("_acked", "_aliases", "_events", "_flows", "_incoming", "_ledger", "_received", "alias_maximum",
                 "out", "receive_maximum", "session", "version")  # fmt: skip

    def __init__(self, session: ClientSession, out: list[bytes], receive_maximum: int) -> None:
        self.session = session
        self._flows, self._incoming, self._ledger = session.flows, session.incoming, session.ledger
        self.out = out
        self.receive_maximum = receive_maximum
        self.version = 5
        self.alias_maximum = 0
        self._aliases: dict[int, str] = {}  # the broker's topic aliases, this connection
        self._events: list[Event] = []
        # The lists of the MessagesReceived or Acknowledged event that is the last in _events (None: not last).
        self._received: list[Publish] | None = None
        self._acked: list[Any] | None = None

    def reset(self, version: int, alias_maximum: int) -> None:
        """A new connection, speaking `version`, with our Topic Alias Maximum `alias_maximum`."""
        self.version = version
        self.alias_maximum = alias_maximum
        self._aliases.clear()

    def emit(self, event: Event) -> None:
        self._received = self._acked = None  # what comes after this event goes in new batches
        self._events.append(event)

    def events(self) -> list[Event]:
        """The events since the last call, in order."""
        out = self._events
        self._events = []
        self._received = self._acked = None
        return out

    def publish(self, p: Publish) -> None:
        if p.properties.items and self.version == 5:
            alias = p.properties.topic_alias
            if alias is not None:
                try:
                    topic = resolve_topic_alias(self._aliases, self.alias_maximum, alias, p.topic)
                except RemoteProtocolError as err:
                    raise RemoteProtocolError(f"the broker sent PUBLISH: {err}", reason_code=err.reason_code) from None
                p = Publish(
                    topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, p.properties.replace(topic_alias=None)
                )
        elif not p.topic:
            raise RemoteProtocolError("the broker sent a PUBLISH without a topic", reason_code=0x82)
        qos = p.qos
        if qos:
            pid = p.packet_id
            assert pid is not None  # the codec checks: QoS > 0 has one
            ledger = self._ledger
            if ledger is not None:  # manual_ack: deliver once, acknowledge when the owner says so
                receipt = ledger.receive(p)
                if receipt is not _DELIVER:
                    if receipt is Receipt.ACKNOWLEDGE_AGAIN:
                        self.out.append(encode(PubRec(pid), self.version))
                    return
            elif qos == 1:
                # PUBACK as bytes (the same 4 bytes in 3.x and, reason 0 without properties, 5.0): a subscriber's
                # cost per message. The acknowledgements of one read leave together (data_to_send joins them).
                self.out.append(b"\x40\x02" + pid.to_bytes(2, "big"))
            else:
                new = self._incoming.publish_received(p)
                if receive_maximum_exceeded(len(self._incoming), self.receive_maximum):
                    raise RemoteProtocolError(
                        f"the broker sent more than {self.receive_maximum} unacknowledged messages",
                        reason_code=ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
                    )
                self.out.append(encode(PubRec(pid), self.version))
                if not new:
                    return
        received = self._received
        if received is None:
            received = self._open_received()
        received.append(p)

    def acknowledgement(self, packet: PubAck | PubComp | PubRec) -> None:
        """PUBACK, PUBREC or PUBCOMP for one of our messages."""
        pid = packet.packet_id
        if type(packet) is PubRec and packet.reason_code < 0x80 and self._flows.pubrec_again(pid):
            if pid not in self.session.unreleased:  # (a PUBREL still held goes when the owner releases it)
                self.out.append(encode(PubRel(pid), self.version))
            return
        try:
            entry, pubrel = self._flows.acknowledge(packet)
        except ProtocolError as err:
            raise RemoteProtocolError(f"the broker sent {err}", reason_code=err.reason_code) from None
        if pubrel is not None:
            if not self.session.hold_pubrel(pid):  # (held: PUBREL when the owner's store says so, release())
                self.out.append(encode(pubrel, self.version))
            if self._ledger is not None:
                self.emit(PublishReceived(pid, entry.context))
        elif type(packet) is PubAck and not packet.reason_code and not packet.properties.items:
            acked = self._acked
            if acked is None:
                acked = self._open_acked()
            acked.append(entry.context)
        else:
            self.emit(PublishAcknowledged(pid, packet.reason_code, entry.context, packet.properties))

    def release(self, packet: PubRel) -> None:
        """PUBREL for a QoS 2 message of the broker's: PUBCOMP (5.0: 0x92 for an identifier not awaiting one)."""
        known = packet.packet_id in self._incoming
        self.out.append(encode(self._incoming.release(packet, self.version), self.version))
        if known and self._ledger is not None:
            self.emit(ReleaseReceived(packet.packet_id))

    def send_ack(self, packet_id: int, qos: int, reason_code: int) -> None:
        """The owner's acknowledgement (manual_ack) of a message received: PUBACK, or PUBREC (QoS 2)."""
        rc = reason_code if self.version == 5 else 0
        if qos == 1:
            if not rc:  # the common case, as bytes (a 5.0 PUBACK with reason 0 and no properties is 4 bytes too)
                self.out.append(b"\x40\x02" + packet_id.to_bytes(2, "big"))
                return
            self.out.append(encode(PubAck(packet_id, rc), self.version))
        else:
            if rc < 0x80:
                self._incoming.accept(packet_id)
            self.out.append(encode(PubRec(packet_id, rc), self.version))

    def send_owed(self) -> None:
        """The broker kept the session: the acknowledgements the owner gave while disconnected go now."""
        if self._ledger is not None:
            for pid, qos, rc in self._ledger.take_owed():
                self.send_ack(pid, qos, rc)

    def leading_pubacks(self, data: bytes | bytearray) -> bytes | bytearray:
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
                    raise RemoteProtocolError(f"the broker sent {err}", reason_code=err.reason_code) from None
            if acked is None:
                acked = self._open_acked()
            acked.append(entry.context)
        return data[pos:] if pos else data

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
