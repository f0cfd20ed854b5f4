"""Topic checks the broker adds to the protocol's: no control characters, at most `max_topic_levels` levels.
Topics found fine are remembered (bounded), so a topic seen before costs one set lookup.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .reasons import ReasonCode
from .server import ServerConnection
from .wire import control_character

if TYPE_CHECKING:
    from .broker import BrokerCore


__all__ = ["TopicCheck"]


class TopicCheck:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.ok: set[str] = set()  # topics and filters that passed `problem` (bounded)

    def filters_problem(self, conn: ServerConnection, filters: Iterable[str], what: str, now: float) -> bool:
        """Closes the connection (True) when a filter holds a control character or too many levels (mosquitto:
        0x81 for both in SUBSCRIBE and UNSUBSCRIBE)."""
        for flt in filters:
            if flt not in self.ok:
                why = self.problem(flt)
                if why is not None:
                    self.core.closing.close(
                        conn, now, reason=ReasonCode.MALFORMED_PACKET, detail=f"{what} topic filter: {why[1]}"
                    )
                    return True
        return False

    def problem(self, topic: str) -> tuple[int, str] | None:
        """Why the broker refuses a topic name or filter that the protocol allows: a control character (a MAY of
        1.5.4, a log-injection risk) or more levels than `max_topic_levels`. (reason code, detail) or None; topics
        found fine are remembered, so a topic seen before costs one set lookup."""
        at = control_character(topic)
        if at >= 0:
            return ReasonCode.MALFORMED_PACKET, f"control character U+{ord(topic[at]):04X} at character {at}"
        limit = self.core.config.limits.max_topic_levels
        # Counted as mosquitto does (TOPIC_HIERARCHY_LIMIT): separators, so 201 levels pass and 202 do not.
        if limit and topic.count("/") > limit:
            return ReasonCode.PROTOCOL_ERROR, f"{topic.count('/') + 1} levels, over the limit of {limit}"
        ok = self.ok
        if len(ok) >= 4096:
            ok.clear()
        ok.add(topic)
        return None
