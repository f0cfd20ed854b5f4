"""`ClientSession`: what a client's session holds across its connections (MQTT 4.1) and what becomes of it when
a CONNACK finds the session again or not: our QoS 1/2 messages in flight (flows.OutgoingFlows), the QoS 2
messages received and awaiting PUBREL (flows.IncomingFlows), and with manual acknowledgement the messages the
owner holds (ledger.AckLedger)."""

from __future__ import annotations

from typing import Any

from .flows import OWN_IDS_FROM, FlowState, IncomingFlows, OutgoingFlows
from .ledger import AckLedger
from .packets import Publish, PubRel

__all__ = ["ClientSession"]


class ClientSession:
    """`owner_ids`: the owner names its messages' packet identifiers, below OWN_IDS_FROM, and releases each QoS 2
    one's PUBREL itself (`release`) once its store holds the PUBREC."""

    __slots__ = ("flows", "incoming", "ledger", "owner_ids", "unreleased")

    def __init__(self, max_inflight: int | None, manual_ack: bool, owner_ids: bool) -> None:
        self.flows = OutgoingFlows(max_inflight)
        if owner_ids:  # the owner names its messages' identifiers; the connection's own come from above them
            self.flows.use_ids(OWN_IDS_FROM, 65535)
        self.incoming = IncomingFlows()
        self.ledger = AckLedger(self.incoming) if manual_ack else None
        self.owner_ids = owner_ids
        self.unreleased: set[int] = set()  # owner_ids: PUBREC came, PUBREL waits for release()

    def hold_pubrel(self, packet_id: int) -> bool:
        """PUBREC came for our QoS 2 message `packet_id`: True when its PUBREL waits for the owner's release()."""
        if self.owner_ids and packet_id < OWN_IDS_FROM:
            self.unreleased.add(packet_id)
            return True
        return False

    def release(self, packet_id: int) -> bool:
        """The owner releases `packet_id`'s PUBREL: True when one was waiting (send it now, if connected)."""
        if packet_id not in self.unreleased:
            return False
        self.unreleased.discard(packet_id)
        return True

    def restore_incoming(self, packet_id: int, qos: int, acknowledged: bool) -> None:
        if acknowledged:
            if qos == 2:
                self.incoming.accept(packet_id)
        elif self.ledger is not None:
            self.ledger.restore(packet_id, qos)

    def resend(self) -> list[Publish | PubRel]:
        """The broker kept the session: what to send again, in order (PUBLISH with DUP, PUBREL but for those the
        owner has not released)."""
        unreleased = self.unreleased
        return [p for p in self.flows.resend() if type(p) is Publish or p.packet_id not in unreleased]

    def restart(self) -> tuple[list[tuple[int, Any]], list[tuple[Publish, Any]]]:
        """The broker started a new session: everything is forgotten. Returns our messages past PUBREC, which the
        broker owned (4.3.3): delivered, (packet id, context) each; and the others, as new messages to publish
        again (under the identifier the owner gave, with owner_ids, else none yet), with their contexts."""
        self.incoming.clear()
        if self.ledger is not None:
            self.ledger.forget()  # nothing to acknowledge, no re-send to hold back
        self.unreleased.clear()
        delivered: list[tuple[int, Any]] = []
        again: list[tuple[Publish, Any]] = []
        for entry in self.flows.clear():
            p = entry.publish
            if entry.state is FlowState.AWAIT_PUBCOMP:
                delivered.append((p.packet_id or 0, entry.context))
            else:
                given = p.packet_id if self.owner_ids and (p.packet_id or 0) < OWN_IDS_FROM else None
                again.append((Publish(p.topic, p.payload, p.qos, p.retain, False, given, p.properties), entry.context))
        return delivered, again
