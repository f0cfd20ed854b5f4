"""Topic aliases we set towards a peer on one connection (MQTT 5.0, 3.3.2.3.4), for either side.

`OutgoingAliases` holds which of our aliases names which topic, within the peer's Topic Alias Maximum: a topic
keeps the alias it got, and an alias the owner points at another topic forgets the old one. An alias is pointed
only once the packet that sets it goes (one refused as too large sets nothing). The client applies it to a PUBLISH
with `prepare()` (then `point()`) or `apply()` (both at once). The broker's deliveries build their bytes
themselves and use the map alone: `alias_of(topic)` (0: none yet), `free()` (the next alias to hand out, 0 when
all are taken), and `point(alias, topic)` once the packet that sets it is written. Compiled with the broker
(mypyc): those are direct C calls on its delivery path.
"""

from __future__ import annotations

from .lifecycle import next_topic_alias
from .packets import Publish
from .properties import Properties
from .records import fast_constructor

__all__ = ["OutgoingAliases"]

_new_publish = fast_constructor(Publish)  # (the fields come from a checked Publish)
_PROPS_CACHE_MAX = 1024


class OutgoingAliases:
    """Our topic aliases on one connection. `maximum`: the peer's Topic Alias Maximum (0: it takes none)."""

    __slots__ = ("_by_alias", "_by_topic", "_last", "_with_alias", "maximum")

    def __init__(self, maximum: int = 0) -> None:
        self.maximum = maximum
        self._by_alias: dict[int, str] = {}
        self._by_topic: dict[str, int] = {}
        # Properties plus an alias, built once per (properties, alias); the last one looked up, by identity.
        self._with_alias: dict[tuple[Properties, int], Properties] = {}
        self._last: tuple[Properties, int, Properties] | None = None

    def reset(self, maximum: int) -> None:
        """A new connection: no alias is set, the peer takes `maximum`."""
        self.maximum = maximum
        self._by_alias.clear()
        self._by_topic.clear()

    def alias_of(self, topic: str) -> int:
        """The alias `topic` was sent under on this connection, 0 when none."""
        return self._by_topic.get(topic, 0)

    def topic_of(self, alias: int) -> str | None:
        return self._by_alias.get(alias)

    def free(self) -> int:
        """The alias to give a topic that has none: the lowest free one, 0 when all are taken."""
        by_alias = self._by_alias
        if len(by_alias) >= self.maximum:  # (all taken, the common case once a client has them all: no call)
            return 0
        return next_topic_alias(by_alias, self.maximum)

    def point(self, alias: int, topic: str) -> None:
        """`alias` names `topic` from now on (the packet saying so is on its way)."""
        by_topic = self._by_topic
        old = self._by_alias.get(alias)
        if old is not None and by_topic.get(old) == alias:
            del by_topic[old]
        self._by_alias[alias] = topic
        by_topic[topic] = alias

    def apply(self, p: Publish, auto: bool) -> Publish:
        """`p` as it goes on the wire (see `prepare`), its alias pointed at once: for a packet that surely goes."""
        wire, alias = self.prepare(p, auto)
        if alias:
            self.point(alias, p.topic)
        return wire

    def prepare(self, p: Publish, auto: bool) -> tuple[Publish, int]:
        """`p` as it goes on the wire: the topic replaced by its alias where one is set; and the alias to `point` at
        its topic once the packet has gone (0: none), not before (one refused, too large, must set nothing). An
        alias in `p`'s properties is the owner's (the topic goes only when the alias is new or points elsewhere);
        without one, `auto` gives the topic an alias of its own while any is free."""
        props = p.properties
        alias = props.topic_alias if props else None
        if alias is None:
            if not auto:
                return p, 0
            alias = self._by_topic.get(p.topic)
            if alias is not None:  # the alias alone
                return _new_publish("", p.payload, p.qos, p.retain, p.dup, p.packet_id, self._aliased(props, alias)), 0
            alias = self.free()
            if not alias:
                return p, 0  # every alias is taken: the topic goes in full
            props = self._aliased(props, alias)
            return _new_publish(p.topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, props), alias
        if self._by_alias.get(alias) == p.topic:
            return Publish("", p.payload, p.qos, p.retain, p.dup, p.packet_id, props), 0
        return p, alias

    def _aliased(self, props: Properties, alias: int) -> Properties:
        last = self._last
        if last is not None and last[0] is props and last[1] == alias:
            return last[2]  # `pub -l`: the same properties object every time; skip hashing it
        key = (props, alias)
        found = self._with_alias.get(key)
        if found is None:
            if len(self._with_alias) >= _PROPS_CACHE_MAX:
                self._with_alias.clear()
            found = self._with_alias[key] = props.replace(topic_alias=alias)
        self._last = (props, alias, found)
        return found
