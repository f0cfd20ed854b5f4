"""Bridge topic rules in mosquitto's grammar, and the remapping they imply (sans-IO: strings in, strings out).

    topic PATTERN [[[ out | in | both ] QOS] LOCAL_PREFIX REMOTE_PREFIX]

Direction `out` and QoS 0 by default. `""` stands for an empty field. With prefixes, the bridge subscribes on
the source side to PREFIX + PATTERN and replaces the source prefix by the other side's prefix when forwarding.
An empty PATTERN with both prefixes given is mosquitto's single-topic remap: LOCAL_PREFIX and REMOTE_PREFIX
are then whole topic names, mapped to each other.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Literal

from .topics import matches, topic_filter_error

__all__ = ["BridgeRule", "BridgeRuleError", "LinkStats", "Route", "parse_rule", "route", "source_filters"]

Direction = Literal["out", "in", "both"]
_DIRECTIONS: dict[str, Direction] = {"out": "out", "in": "in", "both": "both"}


class BridgeRuleError(ValueError):
    """A rule that cannot be used; the message names the part that is wrong."""


@dataclass(frozen=True, slots=True)
class BridgeRule:
    pattern: str
    direction: Direction = "out"
    qos: int = 0
    local_prefix: str = ""
    remote_prefix: str = ""

    @property
    def local_filter(self) -> str:
        """What the bridge subscribes to on the local broker (for `out` and `both`)."""
        return self.local_prefix + self.pattern

    @property
    def remote_filter(self) -> str:
        """What the bridge subscribes to on the remote broker (for `in` and `both`)."""
        return self.remote_prefix + self.pattern

    @property
    def outgoing(self) -> bool:
        return self.direction in ("out", "both")

    @property
    def incoming(self) -> bool:
        return self.direction in ("in", "both")

    def to_remote(self, topic: str) -> str | None:
        """The remote topic for a local message on `topic`, or None when this rule does not forward it."""
        if not self.outgoing or not matches(self.local_filter, topic):
            return None
        return self.remote_prefix + _strip(topic, self.local_prefix)

    def to_local(self, topic: str) -> str | None:
        """The local topic for a remote message on `topic`, or None when this rule does not forward it."""
        if not self.incoming or not matches(self.remote_filter, topic):
            return None
        return self.local_prefix + _strip(topic, self.remote_prefix)

    def __str__(self) -> str:
        def q(text: str) -> str:
            return shlex.quote(text) if text else '""'

        parts = [q(self.pattern), self.direction, str(self.qos)]
        if self.local_prefix or self.remote_prefix:
            parts += [q(self.local_prefix), q(self.remote_prefix)]
        return " ".join(parts)


def _strip(topic: str, prefix: str) -> str:
    """mosquitto removes a prefix only from a topic that starts with it: `k/#` with prefix `k/` also matches
    `k` itself, which keeps its whole name (and gets the other side's prefix in front)."""
    return topic[len(prefix) :] if topic.startswith(prefix) else topic


def parse_rule(text: str) -> BridgeRule:
    """Parses the arguments of one mosquitto `topic` line: `'a/# both 1 local/ remote/'`."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise BridgeRuleError(f"topic rule {text!r}: {exc}") from None
    if not 1 <= len(words) <= 5 or len(words) == 4:
        raise BridgeRuleError(f"topic rule {text!r}: expected PATTERN [in|out|both [QOS [LOCAL_PREFIX REMOTE_PREFIX]]]")
    pattern = words[0]
    word = words[1] if len(words) > 1 else "out"
    direction = _DIRECTIONS.get(word)
    if direction is None:
        raise BridgeRuleError(f"topic rule {text!r}: direction {word!r} is not in, out or both")
    qos = 0
    if len(words) > 2:
        if words[2] not in ("0", "1", "2"):
            raise BridgeRuleError(f"topic rule {text!r}: QoS {words[2]!r} is not 0, 1 or 2")
        qos = int(words[2])
    local_prefix, remote_prefix = (words[3], words[4]) if len(words) == 5 else ("", "")
    for name, prefix in (("local prefix", local_prefix), ("remote prefix", remote_prefix)):
        if "+" in prefix or "#" in prefix:
            raise BridgeRuleError(f"topic rule {text!r}: the {name} {prefix!r} may not hold wildcards")
    if not pattern:
        # The single-topic remap form: both prefixes are whole topic names.
        if not local_prefix or not remote_prefix:
            raise BridgeRuleError(f"topic rule {text!r}: an empty pattern needs both a local and a remote topic")
    else:
        # Each side's filter is checked, as mosquitto does: `pre` + `#` would be subscribed to as `pre#`.
        for name, flt in (
            ("pattern", pattern),
            ("local prefix and pattern", local_prefix + pattern),
            ("remote prefix and pattern", remote_prefix + pattern),
        ):
            if err := topic_filter_error(flt):
                raise BridgeRuleError(f"topic rule {text!r}: the {name} {flt!r} is not a valid filter: {err}")
    return BridgeRule(pattern, direction, qos, local_prefix, remote_prefix)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a message on one topic goes: the topic on the other side, the highest QoS of the matching rules,
    and the source filter of the rule that gave that QoS (to tell overlapping copies apart)."""

    topic: str
    qos: int
    source_filter: str


def route(rules: list[BridgeRule], incoming: bool, topic: str) -> Route | None:
    """Where a local message (`incoming` False) or a remote one goes, or None when no rule forwards it: at the
    highest QoS of the matching rules (mosquitto's one copy at the highest subscription QoS), remapped as
    mosquitto does (send__publish, handle__publish): by the first matching rule that has a prefix; unchanged when
    none has."""
    mapped = None
    matched = False
    cap = -1
    best = ""
    for rule in rules:
        out = rule.to_local(topic) if incoming else rule.to_remote(topic)
        if out is None:
            continue
        matched = True
        if mapped is None and (rule.local_prefix or rule.remote_prefix):
            mapped = out
        if rule.qos > cap:
            cap = rule.qos
            best = rule.remote_filter if incoming else rule.local_filter
    if not matched:
        return None
    return Route(mapped if mapped is not None else topic, cap, best)


def source_filters(rules: list[BridgeRule], remote: bool) -> dict[str, int]:
    """The filters to subscribe to on one side (the local one, or the remote one), each once at the highest QoS
    its rules ask for, in the rules' order."""
    best: dict[str, int] = {}
    for rule in rules:
        if remote and rule.incoming:
            flt = rule.remote_filter
        elif not remote and rule.outgoing:
            flt = rule.local_filter
        else:
            continue
        best[flt] = max(best.get(flt, 0), rule.qos)
    return best


def _pair() -> list[int]:
    return [0, 0]


@dataclass(slots=True)
class LinkStats:
    """An embedded bridge's figures, kept by the bridge and read by $SYS and the metrics (one source of truth).
    Pairs are by direction: [0] local to remote (out), [1] remote to local (in)."""

    name: str
    client_id: str  # of its session in the broker: what waits there for the remote is counted from it
    connected: bool = False
    address: str = ""  # the remote address in use (or used last): $SYS/broker/connection/NAME/address
    address_index: int = -1  # its position in the bridge's list, 0 the main one; -1 before the first connection
    forwarded: list[int] = field(default_factory=_pair)
    resent: int = 0  # messages in flight handed to the remote again after a reconnect
    dropped: list[int] = field(default_factory=_pair)  # QoS 0 while the other side was down or its queue full
    refused: int = 0  # QoS 1/2 forwards the remote refused (PUBACK/PUBREC >= 0x80): dropped, as the spec leaves them
    reconnects: int = 0
