"""The broker's metrics as Prometheus families, and their text: exposition format 0.0.4 or OpenMetrics 1.0.

Sans-IO: the figures come from BrokerCore's counters (BrokerStats, the same that $SYS publishes) and from what
the caller measured (connections by listener, the process's CPU and memory); `render` gives the text.
Names follow Prometheus's rules: `mqtt_broker_` prefix, base units (`_seconds`, `_bytes`), counters `_total`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from .broker import BrokerCore, refusal_name
from .persistence import COMMIT_BOUNDS, CommitLatency

__all__ = [
    "OPENMETRICS_TYPE",
    "TEXT_TYPE",
    "ConnectedClients",
    "Family",
    "MetricType",
    "ProcessFigures",
    "Sample",
    "broker_families",
    "log_families",
    "process_families",
    "render",
    "wants_openmetrics",
]

TEXT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


class MetricType(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, slots=True)
class Sample:
    value: float
    labels: tuple[tuple[str, str], ...] = ()
    suffix: str = ""  # a histogram's _bucket, _sum or _count


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family. `name` is the family's name: a counter's samples add `_total` to it."""

    name: str
    type: MetricType
    help: str
    samples: tuple[Sample, ...]
    unit: str = ""  # OpenMetrics UNIT (the name ends with it)


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """What the network layer read about its process (/proc/self): the standard `process_` families."""

    cpu_seconds: float
    resident_memory_bytes: int
    virtual_memory_bytes: int
    open_fds: int
    max_fds: int
    start_time_seconds: float  # since the Unix epoch


@dataclass(frozen=True, slots=True)
class ConnectedClients:
    """Connected clients of one listener at one protocol level (3 for 3.1, 4 for 3.1.1, 5)."""

    listener: str
    protocol_level: int
    count: int


_VERSION_NAMES = {3: "3.1", 4: "3.1.1", 5: "5.0"}
_QOS = ("0", "1", "2")


def _one(value: float) -> tuple[Sample, ...]:
    return (Sample(value),)


def _by_qos(values: list[int]) -> tuple[Sample, ...]:
    return tuple(Sample(v, (("qos", q),)) for q, v in zip(_QOS, values, strict=True))


def _by(label: str, values: Mapping[str, int]) -> tuple[Sample, ...]:
    return tuple(Sample(v, ((label, k),)) for k, v in sorted(values.items()))


@dataclass(slots=True)
class _Families:
    items: list[Family] = field(default_factory=list)

    def add(self, name: str, kind: MetricType, help: str, samples: tuple[Sample, ...], unit: str = "") -> None:
        self.items.append(Family(name, kind, help, samples, unit))


def broker_families(core: BrokerCore, connected: Iterable[ConnectedClients], now: float) -> list[Family]:
    """Every broker family, from `core`'s counters at `now` (the clock BrokerCore is given)."""
    s = core.stats
    c, g = MetricType.COUNTER, MetricType.GAUGE
    f = _Families()
    version = (Sample(1, (("version", core.config.version),)),)
    f.add("mqtt_broker_build_info", g, "The broker's version (value 1).", version)
    f.add("mqtt_broker_uptime_seconds", g, "Seconds since the broker started.", _one(now - s.started), "seconds")
    by_listener = tuple(
        Sample(x.count, (("listener", x.listener), ("protocol_version", _VERSION_NAMES[x.protocol_level])))
        for x in connected
    )
    f.add("mqtt_broker_clients_connected", g, "Clients connected now, by listener and protocol version.", by_listener)
    f.add("mqtt_broker_clients_maximum", g, "Most clients connected at once since the start.", _one(s.clients_maximum))
    f.add("mqtt_broker_connections", c, "Network connections accepted (whether or not they sent CONNECT).",
          _one(s.sockets_total))  # fmt: skip
    f.add("mqtt_broker_connects_accepted", c, "CONNECT packets accepted.", _one(s.clients_total))
    refused = dict(s.refused)
    for code in (0x84, 0x85, 0x86, 0x87, 0x95):  # the usual ones shown at 0 so that rate() has a start
        refused.setdefault(refusal_name(code), 0)
    refused.setdefault("not_mqtt", 0)
    f.add("mqtt_broker_connects_refused", c, "CONNECTs refused, by reason (the CONNACK reason's name).",
          _by("reason", refused))  # fmt: skip
    f.add("mqtt_broker_sessions", g, "Sessions held, connected or not.", _one(len(core.sessions)))
    f.add("mqtt_broker_sessions_expired", c, "Sessions ended by their expiry interval.", _one(s.sessions_expired))
    f.add("mqtt_broker_packets_received", c, "MQTT packets received, of every type.", _one(s.messages_received))
    f.add("mqtt_broker_packets_sent", c, "MQTT packets sent, of every type.", _one(s.messages_sent))
    f.add("mqtt_broker_received_bytes", c, "Bytes received from clients (every packet).", _one(s.bytes_received),
          "bytes")  # fmt: skip
    f.add("mqtt_broker_sent_bytes", c, "Bytes sent to clients (every packet).", _one(s.bytes_sent), "bytes")
    f.add("mqtt_broker_publish_received", c, "PUBLISH packets received from clients, by QoS.",
          _by_qos(s.publish_received_qos))  # fmt: skip
    f.add("mqtt_broker_publish_sent", c, "PUBLISH packets sent to clients, by QoS (re-sends not counted).",
          _by_qos(s.publish_sent_qos))  # fmt: skip
    f.add("mqtt_broker_publish_received_payload_bytes", c, "Payload bytes of the PUBLISH packets received, by QoS.",
          _by_qos(s.publish_received_bytes_qos), "bytes")  # fmt: skip
    f.add("mqtt_broker_publish_sent_payload_bytes", c, "Payload bytes of the PUBLISH packets sent, by QoS.",
          _by_qos(s.publish_sent_bytes_qos), "bytes")  # fmt: skip
    dropped = {
        "queue_full": s.dropped_queue_full,
        "buffer_full": s.dropped_buffer_full,
        "too_large": s.dropped_too_large,
        "expired": s.expired,
        "no_subscriber": s.dropped_no_subscriber,
        "not_authorized": s.dropped_not_authorized,
    }
    f.add("mqtt_broker_messages_dropped", c,
          "Messages not delivered, by reason: queue_full (a session's queue limit), buffer_full (QoS 0 to a client "
          "that does not read), too_large (over the client's maximum packet size), expired, no_subscriber (QoS 0 "
          "that matched no subscription), not_authorized (queued, then not readable under the ACL in force when its "
          "client came back).", _by("reason", dropped))  # fmt: skip
    rejected = {refusal_name(code): n for code, n in s.rejected.items()}
    f.add("mqtt_broker_publish_rejected", c, "PUBLISH packets not taken (ACL, size, $SYS), by reason.",
          _by("reason", rejected))  # fmt: skip
    queued, queued_bytes = core.queries.queued()
    inflight = sum(len(x.outgoing) for x in core.sessions.values())
    f.add("mqtt_broker_messages_queued", g, "QoS 1/2 messages queued for sessions, beyond their in-flight windows.",
          _one(queued))  # fmt: skip
    f.add("mqtt_broker_queued_payload_bytes", g, "Payload bytes of the queued messages.", _one(queued_bytes), "bytes")
    f.add("mqtt_broker_messages_inflight", g, "QoS 1/2 messages sent and not yet acknowledged.", _one(inflight))
    f.add("mqtt_broker_retained_messages", g, "Retained messages held.", _one(len(core.router.retained)))
    f.add("mqtt_broker_subscriptions", g, "Subscriptions (shared ones included).", _one(len(core.router.subscriptions)))
    f.add("mqtt_broker_shared_subscriptions", g, "Shared subscriptions ($share/...).",
          _one(core.queries.shared_subscriptions()))  # fmt: skip
    if core.storage.changes is not None:  # persistence on
        f.add("mqtt_broker_persistence_commit_seconds", MetricType.HISTOGRAM,
              "Time each persistence commit took (one transaction holding a group of changes).",
              _histogram(s.commit_latency), "seconds")  # fmt: skip
        f.add("mqtt_broker_persistence_failures", c,
              "Episodes during which the persistence file could not be written (a full disk, say).",
              _one(s.store_failures))  # fmt: skip
        f.add("mqtt_broker_persistence_failing", g,
              "1 while the persistence file cannot be written (QoS 1/2 not acknowledged), 0 otherwise.",
              _one(1 if core.storage.failing else 0))  # fmt: skip
    if core.links:
        links = sorted(core.links.values(), key=lambda x: x.name)
        f.add("mqtt_bridge_up", g, "1 while an embedded bridge is connected to its remote broker, else 0 (as "
              "$SYS/broker/connection/NAME/state).", tuple(Sample(int(x.connected), (("bridge", x.name),))
              for x in links))  # fmt: skip
        f.add("mqtt_bridge_address_index", g, "The position of the remote address an embedded bridge uses (or used "
              "last) in its list: 0 the first (main) one; the address is a label.",
              tuple(Sample(x.address_index, (("bridge", x.name), ("address", x.address)))
              for x in links if x.address))  # fmt: skip
        f.add("mqtt_bridge_forwarded_messages", c, "Messages an embedded bridge forwarded, by direction (out: to the "
              "remote broker, in: from it).", tuple(Sample(x.forwarded[i], (("bridge", x.name), ("direction", d)))
              for x in links for i, d in enumerate(("out", "in"))))  # fmt: skip
        f.add("mqtt_bridge_resent_messages", c, "Messages in flight handed to the remote broker again after a "
              "reconnect.", tuple(Sample(x.resent, (("bridge", x.name),)) for x in links))  # fmt: skip
        f.add("mqtt_bridge_dropped_messages", c, "QoS 0 messages an embedded bridge dropped (remote down or its "
              "queue full).", tuple(Sample(sum(x.dropped), (("bridge", x.name),)) for x in links))  # fmt: skip
        f.add("mqtt_bridge_refused_messages", c, "QoS 1/2 messages the remote broker refused (PUBACK or PUBREC with a "
              "reason code of 0x80 or more, as 0x97 quota exceeded); the bridge drops them.",
              tuple(Sample(x.refused, (("bridge", x.name),)) for x in links))  # fmt: skip
        f.add("mqtt_bridge_reconnects", c, "Times an embedded bridge connected to its remote broker again.",
              tuple(Sample(x.reconnects, (("bridge", x.name),)) for x in links))  # fmt: skip
        f.add("mqtt_bridge_messages_queued", g, "QoS 1/2 messages held for the remote broker (in flight or queued "
              "in the bridge's session).", tuple(Sample(core.queries.link_queued(x), (("bridge", x.name),))
              for x in links))  # fmt: skip
    return f.items


def _histogram(h: CommitLatency) -> tuple[Sample, ...]:
    out = []
    running = 0
    for bound, n in zip((*COMMIT_BOUNDS, math.inf), h.counts, strict=True):
        running += n
        out.append(Sample(running, (("le", "+Inf" if bound == math.inf else repr(bound)),), "_bucket"))
    out.append(Sample(h.total, (), "_sum"))
    out.append(Sample(running, (), "_count"))
    return tuple(out)


def log_families(lines_lost: int) -> list[Family]:
    """The broker's log (net/log.py): what it could not write, the broker serving on without it."""
    f = _Families()
    f.add("mqtt_broker_log_lines_lost", MetricType.COUNTER, "Log lines that could not be written (a file-size "
          "limit, a full disk, standard error gone); the broker served on without them.", _one(lines_lost))  # fmt: skip
    return f.items


def process_families(p: ProcessFigures) -> list[Family]:
    """The families every Prometheus client library exports for its process (same names and meaning)."""
    c, g = MetricType.COUNTER, MetricType.GAUGE
    f = _Families()
    f.add("process_cpu_seconds", c, "Total user and system CPU time spent in seconds.", _one(p.cpu_seconds), "seconds")
    f.add("process_resident_memory_bytes", g, "Resident memory size in bytes.", _one(p.resident_memory_bytes),
          "bytes")  # fmt: skip
    f.add("process_virtual_memory_bytes", g, "Virtual memory size in bytes.", _one(p.virtual_memory_bytes), "bytes")
    f.add("process_open_fds", g, "Number of open file descriptors.", _one(p.open_fds))
    f.add("process_max_fds", g, "Maximum number of open file descriptors.", _one(p.max_fds))
    f.add("process_start_time_seconds", g, "Start time of the process since unix epoch in seconds.",
          _one(p.start_time_seconds), "seconds")  # fmt: skip
    return f.items


def wants_openmetrics(accept: str) -> bool:
    """Whether an Accept header asks for OpenMetrics (as Prometheus does when it scrapes)."""
    return any(part.split(";")[0].strip().lower() == "application/openmetrics-text" for part in accept.split(","))


def render(families: Iterable[Family], openmetrics: bool = False) -> str:
    """The exposition text: Prometheus 0.0.4, or OpenMetrics 1.0 (family names without `_total`, UNIT, # EOF)."""
    lines: list[str] = []
    for fam in families:
        suffix = "_total" if fam.type is MetricType.COUNTER else ""
        shown = fam.name if openmetrics else fam.name + suffix
        lines.append(f"# HELP {shown} {_escape_help(fam.help)}")
        lines.append(f"# TYPE {shown} {fam.type}")
        if openmetrics and fam.unit:
            lines.append(f"# UNIT {shown} {fam.unit}")
        for sample in fam.samples:
            labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sample.labels)
            name = fam.name + (sample.suffix or suffix)
            lines.append(f"{name}{{{labels}}} {_number(sample.value)}" if labels else
                         f"{name} {_number(sample.value)}")  # fmt: skip
    if openmetrics:
        lines.append("# EOF")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    if isinstance(value, int) or (math.isfinite(value) and value == int(value) and abs(value) < 2**53):
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
