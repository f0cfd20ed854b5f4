"""MQTT 5.0 topic aliases in dump records: the topic a PUBLISH is about, also when the wire carries an alias.

    aliases = TopicAliases()
    for rec in records:
        topic = aliases.topic(rec)      # PUBLISH records: the topic, through its alias; None: an alias never set

A PUBLISH with a topic and a Topic Alias sets the alias; a later PUBLISH with an empty topic and that alias
means that topic. Aliases belong to one direction of one connection (each side keeps its own), so they are
kept per (connection number, sender address, alias). Records keep the topic as on the wire; `mqtt dump`'s
filters, its `--stats`, its one-line view and `mqtt analyze ingest` (the `resolved_topic` column) resolve
through this one class.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["MAX_ALIASES", "TopicAliases", "property_value"]

# Aliases remembered at most: a capture of a broken or hostile peer would otherwise grow them without end (the
# protocol bounds them per connection, by Topic Alias Maximum, not per capture).
MAX_ALIASES = 100_000


def property_value(props: Iterable[list[Any] | tuple[Any, ...]] | dict[str, Any] | None, name: str) -> Any:
    """The first value of property `name` in a record's `properties` (None when absent)."""
    if not props:
        return None
    if isinstance(props, dict):
        return props.get(name)
    return next((value for key, value in props if key == name), None)


class TopicAliases:
    """Follows every PUBLISH record it is shown; `topic(rec)` is that PUBLISH's topic, resolved."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[tuple[Any, Any, int], str] = {}

    def topic(self, rec: dict[str, Any]) -> str | None:
        """The topic of PUBLISH record `rec`: its own, or the one its alias was last set to in that direction of
        that connection; None for an empty topic whose alias was never set (set before the capture began)."""
        topic: str | None = rec.get("topic")
        props = rec.get("properties")
        if not props:
            return topic
        alias = property_value(props, "topic_alias")
        if alias is None:
            return topic
        key = (rec.get("stream"), rec.get("src"), alias)
        if topic:
            known = self._known
            if len(known) >= MAX_ALIASES and key not in known:
                known.clear()
            known[key] = topic
            return topic
        return self._known.get(key)
