"""A client's SUBSCRIBE and UNSUBSCRIBE packets awaiting their answers (SUBACK, UNSUBACK)."""

from __future__ import annotations

from .flows import OutgoingFlows
from .packets import SubAck, Subscribe, UnsubAck, Unsubscribe

__all__ = ["PendingRequests"]


class PendingRequests:
    """The requests sent and not yet answered, by packet identifier: identifiers that the message flows do not
    hand out meanwhile (`OutgoingFlows.reserved`)."""

    __slots__ = ("_flows", "_pending")

    def __init__(self, flows: OutgoingFlows) -> None:
        self._flows = flows
        self._pending: dict[int, Subscribe | Unsubscribe] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def next_id(self) -> int:
        """A packet identifier free for a new request."""
        allocate = self._flows.allocate
        pid = allocate()
        while pid in self._pending:
            pid = allocate()
        return pid

    def sent(self, packet: Subscribe | Unsubscribe) -> None:
        self._pending[packet.packet_id] = packet
        self._flows.reserved.add(packet.packet_id)

    def answered(self, answer: SubAck | UnsubAck) -> bool:
        """The answer ends its request; False when no request of that kind waits under its identifier."""
        pid = answer.packet_id
        request = self._pending.get(pid)
        if request is None or (type(request) is Subscribe) != (type(answer) is SubAck):
            return False
        del self._pending[pid]
        self._flows.reserved.discard(pid)
        return True

    def clear(self) -> None:
        """A new connection: the answers to the old one's requests will not come."""
        self._pending.clear()
        self._flows.reserved.clear()
