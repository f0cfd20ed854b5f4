"""A summary of dump records for `mqtt dump --stats`: packets by type, client and topic, malformed packets,
and QoS 1/2 flows whose acknowledgements never appeared in the capture.

Topics are counted resolved: a 5.0 PUBLISH that names its topic by a topic alias counts for the topic that alias
stands for in its connection and direction (aliases.TopicAliases); one whose alias was set before the capture
began counts under None ("unknown alias")."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .aliases import TopicAliases

__all__ = ["DumpStats", "OpenFlow"]

# Unacknowledged flows kept at most (a capture of one direction only would otherwise grow them without end).
MAX_OPEN_FLOWS = 100_000

# What the sender of a PUBLISH (or a PUBREL) waits for next, by what was just seen.
_NEXT = {"PUBACK": None, "PUBREC": "PUBREL", "PUBREL": "PUBCOMP", "PUBCOMP": None}


@dataclass
class OpenFlow:
    """A QoS 1/2 flow still waiting for `waiting` when the capture ended."""

    stream: int
    client: str
    packet_id: int
    qos: int
    topic: str
    waiting: str
    ts: str | None


@dataclass
class DumpStats:
    packets: int = 0
    by_type: Counter[str] = field(default_factory=Counter)
    by_client: Counter[str] = field(default_factory=Counter)
    by_topic: Counter[str | None] = field(default_factory=Counter)  # None: an alias set before the capture
    malformed: int = 0  # MALFORMED records and packets breaking a rule
    errors: Counter[str] = field(default_factory=Counter)
    payload_bytes: int = 0
    flows_dropped: int = 0
    # (stream, publisher is the client, packet id) -> (flow, who sends the awaited packet: the client?)
    _flows: dict[tuple[int, bool, int], tuple[OpenFlow, bool]] = field(default_factory=dict)
    _aliases: TopicAliases = field(default_factory=TopicAliases)

    def add(self, rec: dict[str, Any], shown: bool = True) -> None:
        """Counts `rec` when `shown` (it passed the filters); follows QoS flows with every record either way."""
        ptype = rec.get("type")
        # Every PUBLISH, shown or not, teaches its topic alias (filters drop records that set one).
        topic = self._aliases.topic(rec) if ptype == "PUBLISH" else None
        if rec.get("stream") is not None and rec.get("from_client") is not None:
            self._follow(rec, ptype, topic)
        if not shown:
            return
        self.packets += 1
        if ptype is not None:  # (every record the dissector builds has its type)
            self.by_type[ptype] += 1
        who = rec.get("client") or _client_side(rec)
        if who:
            self.by_client[who] += 1
        if ptype == "PUBLISH":
            self.by_topic[topic] += 1
            self.payload_bytes += rec.get("payload_len") or 0
        error = rec.get("error")
        if ptype == "MALFORMED" or error:
            self.malformed += 1
            if error:
                self.errors[_error_kind(error)] += 1

    @property
    def open_flows(self) -> list[OpenFlow]:
        return [flow for flow, _ in self._flows.values()]

    def _follow(self, rec: dict[str, Any], ptype: Any, topic: str | None) -> None:
        pid = rec.get("packet_id")
        if pid is None:
            return
        stream = rec["stream"]
        from_client = rec["from_client"]
        flows = self._flows
        if ptype == "PUBLISH":
            qos = rec.get("qos")
            if qos not in (1, 2):
                return
            if len(flows) >= MAX_OPEN_FLOWS:
                flows.pop(next(iter(flows)))
                self.flows_dropped += 1
            who = rec.get("client") or _client_side(rec) or "?"
            flow = OpenFlow(
                stream, who, pid, qos, topic or "", "PUBACK" if qos == 1 else "PUBREC", rec.get("ts")
            )
            flows[(stream, from_client, pid)] = (flow, not from_client)
        elif ptype in _NEXT:
            # An acknowledgement goes the other way from the PUBLISH; a PUBREL the same way.
            publisher = from_client if ptype == "PUBREL" else not from_client
            key = (stream, publisher, pid)
            entry = flows.get(key)
            if entry is None or entry[0].waiting != ptype:
                return
            following = _NEXT[ptype]
            if following is None:
                del flows[key]
            else:
                entry[0].waiting = following


def _client_side(rec: dict[str, Any]) -> str | None:
    from_client = rec.get("from_client")
    if from_client is None:
        return None
    return rec.get("src") if from_client else rec.get("dst")


def _error_kind(message: str) -> str:
    """The error message without its positions and values, so that alike errors count together."""
    head = message.split(" (at byte", 1)[0].split(" (byte", 1)[0]
    return head if len(head) <= 100 else head[:97] + "..."
