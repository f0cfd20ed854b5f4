"""`AckLedger`: a client's manual acknowledgements (`ClientConnection(manual_ack=True)`, what bridges use).

A QoS 1/2 message received is delivered once and acknowledged only when the owner says so; until then a
re-send of it is not delivered again. An acknowledgement given while disconnected is owed, and sent after the
next CONNACK that finds the session; a session the broker lost takes everything with it.
"""

from __future__ import annotations

from enum import Enum

from .flows import IncomingFlows
from .packets import Publish

__all__ = ["AckLedger", "Receipt"]


class Receipt(Enum):
    """What to do with a QoS 1/2 message received (AckLedger.receive)."""

    DELIVER = "deliver"  # to the owner, who acknowledges it later
    IGNORE = "ignore"  # a re-send of one the owner has not finished with, or acknowledged while away
    ACKNOWLEDGE_AGAIN = "acknowledge again"  # a QoS 2 re-send of one acknowledged: PUBREC again, nothing delivered


_DELIVER = Receipt.DELIVER
_IGNORE = Receipt.IGNORE


class AckLedger:
    """Messages delivered and not yet acknowledged (packet id -> QoS), and acknowledgements owed (given while
    disconnected). `incoming` is the connection's QoS 2 flows awaiting PUBREL (acknowledged ones go there)."""

    __slots__ = ("_copies", "_held", "_incoming", "_owed", "_owed_copies")

    def __init__(self, incoming: IncomingFlows) -> None:
        self._incoming = incoming
        self._held: dict[int, int] = {}
        self._owed: dict[int, tuple[int, int]] = {}  # packet id -> (QoS, reason code)
        # QoS 1 identifiers the broker gave to another new message while we still held them (packet id -> how many
        # more), and the acknowledgements of such copies owed while disconnected: one PUBACK per message.
        self._copies: dict[int, int] = {}
        self._owed_copies: list[tuple[int, int]] = []  # (packet id, reason code)

    @property
    def held(self) -> int:
        """Messages delivered and not yet acknowledged."""
        return len(self._held) + (sum(self._copies.values()) if self._copies else 0)

    def receive(self, p: Publish) -> Receipt:
        """A QoS 1/2 PUBLISH from the broker: deliver it (and hold it), or not."""
        pid = p.packet_id
        assert pid is not None  # the codec checks: QoS > 0 has one
        held = self._held
        if pid in held:
            if p.dup or p.qos != 1 or held[pid] != 1:
                return _IGNORE  # a re-send of a message the owner has not finished with
            # DUP 0: a new message under an identifier still in flight to us. A broker should not reuse it, but
            # mosquitto does with max_inflight_messages 0 once 65,535 messages await our acknowledgement (a
            # bridge whose other side stalls). Dropping it as a re-send left it unacknowledged and the broker's
            # queue stuck behind it; at QoS 1 it is delivered, and acknowledged once per message.
            self._copies[pid] = self._copies.get(pid, 0) + 1
            return _DELIVER
        if p.qos == 2 and p.dup and pid in self._incoming:
            # Already ours. DUP 0 under a known identifier is a new message (a re-send has DUP set, 3.3.1.1): the
            # flow before it ended with a PUBREL whose mark an owner restoring from its journal (restore) had not
            # written yet; taking it for a re-send would lose it.
            return Receipt.ACKNOWLEDGE_AGAIN
        if pid in self._owed:
            return _IGNORE  # acknowledged while disconnected; the acknowledgement goes out after CONNACK
        # Receive maximum is not enforced here: after a reconnect, a re-send that crossed our acknowledgement looks
        # new and is held again, so our count runs ahead of the broker's (seen with mosquitto). The broker's own
        # send quota bounds what it sends.
        held[pid] = p.qos
        return _DELIVER

    def settle(self, packet_id: int, reason_code: int, connected: bool) -> int | None:
        """The owner acknowledges `packet_id`: the QoS of the acknowledgement to send now, 0 when it is owed
        (disconnected: sent after the next CONNACK), None when nothing is held under it (the session ended)."""
        copies = self._copies
        if copies and packet_id in copies:
            left = copies[packet_id] - 1
            if left:
                copies[packet_id] = left
            else:
                del copies[packet_id]
            if connected:
                return 1
            self._owed_copies.append((packet_id, reason_code))
            return 0
        qos = self._held.pop(packet_id, None)
        if qos is None or connected:
            return qos
        self._owed[packet_id] = (qos, reason_code)
        return 0

    def take_owed(self) -> list[tuple[int, int, int]]:
        """The acknowledgements owed, to send now that the session is back: (packet id, QoS, reason code)."""
        out = [(pid, qos, rc) for pid, (qos, rc) in self._owed.items()]
        out += [(pid, 1, rc) for pid, rc in self._owed_copies]
        self._owed.clear()
        self._owed_copies.clear()
        return out

    def restore(self, packet_id: int, qos: int) -> None:
        """From the owner's journal, before connecting: a message of an earlier process still the owner's."""
        self._held[packet_id] = qos

    def forget(self) -> None:
        """The broker lost the session: nothing to acknowledge, no re-send to hold back."""
        self._held.clear()
        self._owed.clear()
        self._copies.clear()
        self._owed_copies.clear()
