"""$SYS: the broker's figures as retained messages under $SYS/broker/..., mosquitto 2.0's names, every
`sys_interval` seconds (only those that changed); the load averages; log lines to $SYS/broker/log/... topics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .load import LoadAverages
from .properties import EMPTY_PROPERTIES
from .session import Message

if TYPE_CHECKING:
    from .broker import BrokerCore


__all__ = ["SysTopics"]


class SysTopics:
    def __init__(self, core: BrokerCore, now: float) -> None:
        self.core = core
        self.router = core.router
        self.stats = core.stats
        interval = core.config.sys_interval
        self.next_sys = now + interval if interval else None
        self.load = LoadAverages(now)  # $SYS/broker/load/..., updated with $SYS

    def tick(self, now: float) -> float | None:
        """Publishes the $SYS figures when they are due; returns when they are due next (None: never)."""
        if self.next_sys is not None and now >= self.next_sys:
            self.publish_sys(now)
            self.next_sys = now + self.core.config.sys_interval
        return self.next_sys

    def load_counters(self) -> dict[str, int]:
        """What $SYS/broker/load/NAME/... averages, by NAME (mosquitto's names)."""
        s = self.stats
        return {
            "messages/received": s.messages_received,
            "messages/sent": s.messages_sent,
            "publish/dropped": s.publish_dropped,
            "publish/received": s.publish_received,
            "publish/sent": s.publish_sent,
            "bytes/received": s.bytes_received,
            "bytes/sent": s.bytes_sent,
            "sockets": s.sockets_total,
            "connections": s.clients_total,
        }

    def sys_figures(self, now: float) -> dict[str, str]:
        """The $SYS/broker/... topics and their values, mosquitto 2.0's names (its heap/... has no counterpart in
        Python: the metrics endpoint gives the process's resident memory instead)."""
        s = self.stats
        connected = self.core.connected
        queued, queued_bytes = self.core.queries.queued()
        figures = {
            "$SYS/broker/version": self.core.config.version,
            "$SYS/broker/uptime": f"{int(now - s.started)} seconds",
            "$SYS/broker/clients/connected": str(connected),
            "$SYS/broker/clients/disconnected": str(len(self.core.sessions) - connected),
            "$SYS/broker/clients/total": str(len(self.core.sessions)),
            "$SYS/broker/clients/maximum": str(s.clients_maximum),
            "$SYS/broker/clients/active": str(connected),  # mosquitto's older names, still published by 2.0
            "$SYS/broker/clients/inactive": str(len(self.core.sessions) - connected),
            "$SYS/broker/clients/expired": str(s.sessions_expired),
            "$SYS/broker/messages/received": str(s.messages_received),
            "$SYS/broker/messages/sent": str(s.messages_sent),
            "$SYS/broker/messages/stored": str(queued),
            "$SYS/broker/publish/messages/received": str(s.publish_received),
            "$SYS/broker/publish/messages/sent": str(s.publish_sent),
            "$SYS/broker/publish/messages/dropped": str(s.publish_dropped),
            "$SYS/broker/publish/bytes/received": str(sum(s.publish_received_bytes_qos)),
            "$SYS/broker/publish/bytes/sent": str(sum(s.publish_sent_bytes_qos)),
            "$SYS/broker/bytes/received": str(s.bytes_received),
            "$SYS/broker/bytes/sent": str(s.bytes_sent),
            "$SYS/broker/subscriptions/count": str(len(self.router.subscriptions)),
            "$SYS/broker/shared_subscriptions/count": str(self.core.queries.shared_subscriptions()),
            "$SYS/broker/retained messages/count": str(len(self.router.retained)),
            "$SYS/broker/store/messages/count": str(queued),
            "$SYS/broker/store/messages/bytes": str(queued_bytes),
        }
        for name, link in self.core.links.items():
            figures[f"$SYS/broker/connection/{name}/state"] = "1" if link.connected else "0"
            if link.address:
                figures[f"$SYS/broker/connection/{name}/address"] = link.address
        figures.update(self.load.topics())
        return figures

    def publish_log(self, topic: str, line: str, now: float) -> None:
        """A log line to its `$SYS/broker/log/...` topic (mosquitto's log_dest topic): QoS 0, not retained, so a
        log never fills a queue or the store."""
        payload = line.encode("utf-8", "backslashreplace")
        self.router.route(Message(topic, payload, 0, False, EMPTY_PROPERTIES, None, now), now)

    def publish_sys(self, now: float) -> None:
        self.load.update(self.load_counters(), now)
        for topic, value in self.sys_figures(now).items():
            old = self.router.retained.get(topic)
            if old is not None and old.payload == value.encode():
                continue  # unchanged: no traffic, as mosquitto
            self.router.route(Message(topic, value.encode(), 0, True, EMPTY_PROPERTIES, None, now), now)
