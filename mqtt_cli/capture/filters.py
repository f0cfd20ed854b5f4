"""Selecting dump records: `--type`, `--topic FILTER` (MQTT wildcards) and `--client ID` (shell-style globs).

Kinds combine with AND, repeated values of one kind with OR. A topic filter keeps PUBLISH packets whose topic
it matches, CONNECTs whose will topic it matches, and SUBSCRIBE/UNSUBSCRIBE packets with a filter it matches
(or equal to it); packets without a topic go when a topic filter is given. An MQTT 5.0 PUBLISH with an empty
topic and a topic alias is matched by the topic that alias was last set to, in that direction of that
connection (records keep the topic as on the wire; the filter follows every PUBLISH to resolve aliases, through
aliases.TopicAliases).
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any

from mqtt_cli.core import matches, topic_filter_error

from .aliases import TopicAliases
from .records import PACKET_TYPES

__all__ = ["RecordFilter", "parse_types"]


def parse_types(values: Iterable[str]) -> set[str]:
    """Packet type names from `--type` values ("publish", "PUBACK,PUBREC"); ValueError naming a wrong one."""
    types = set()
    for value in values:
        for name in value.split(","):
            name = name.strip().upper()
            if not name:
                continue
            if name not in PACKET_TYPES:
                raise ValueError(f"{name!r} is not a packet type; choose from {', '.join(PACKET_TYPES)}")
            types.add(name)
    return types


class RecordFilter:
    """A predicate over records; `active` is False when it keeps everything (then there is no need to call it)."""

    def __init__(self, types: Iterable[str] = (), topics: Iterable[str] = (), clients: Iterable[str] = ()) -> None:
        self.types = parse_types(types)
        self.topics = list(topics)
        for flt in self.topics:
            if err := topic_filter_error(flt):
                raise ValueError(f"--topic {flt!r}: {err}")
        self.clients = list(clients)
        self._globs = [c for c in self.clients if any(ch in c for ch in "*?[")]
        self._exact = {c for c in self.clients if c not in self._globs}
        self.active = bool(self.types or self.topics or self.clients)
        self._aliases = TopicAliases()

    def __call__(self, rec: dict[str, Any]) -> bool:
        topic = None
        if self.topics and rec.get("type") == "PUBLISH":
            topic = self._aliases.topic(rec)  # first: aliases are learnt from records the other filters drop
        if self.types and rec.get("type") not in self.types:
            return False
        if self.clients and not self._client_ok(rec.get("client")):
            return False
        return not self.topics or self._topic_ok(rec, topic)

    def _client_ok(self, client: str | None) -> bool:
        if client is None:
            return False
        return client in self._exact or any(fnmatchcase(client, glob) for glob in self._globs)

    def _topic_ok(self, rec: dict[str, Any], topic: str | None) -> bool:
        ptype = rec.get("type")
        if ptype == "PUBLISH":
            names = [topic]
        elif ptype == "CONNECT":
            names = [rec.get("will_topic")]
        elif ptype in ("SUBSCRIBE", "UNSUBSCRIBE"):
            names = rec.get("topics") or []
        else:
            return False
        return any(name and (name == flt or matches(flt, name)) for name in names for flt in self.topics)
