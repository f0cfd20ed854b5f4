"""The report (report.build_report) as rich tables for a terminal. Builds renderables; printing is the command's."""

from __future__ import annotations

import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table

from mqtt_cli.render import titled_table as _table

from .report import LATENCY_LABELS, series_label, topic_label

__all__ = ["report_tables", "sparkline", "when"]

_BARS = " ▁▂▃▄▅▆▇█"


def sparkline(values: list[int], width: int = 32) -> str:
    """Values as a line of block characters, resampled to at most `width` (maximum of each slice)."""
    if not values:
        return ""
    if len(values) > width:
        size = len(values) / width
        values = [max(values[int(i * size) : max(int((i + 1) * size), int(i * size) + 1)]) for i in range(width)]
    top = max(values) or 1
    return "".join(_BARS[min(8, -(-v * 8 // top))] for v in values)


def when(ns: int | None) -> str:
    if ns is None:
        return "-"
    stamp = datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}"


def _unknown_direction(summary: dict[str, Any]) -> list[tuple[str, int]]:
    """The PUBLISH packets that are neither (no CONNECT nor broker port told their direction), when there are any."""
    unknown = summary["publishes"] - summary["messages"] - summary["deliveries"]
    return [("PUBLISH of unknown direction", unknown)] if unknown else []


def report_tables(report: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = [
        _summary(report["summary"]),
        *_timeline(report["timeline"]),
        _topics(report["topics"]),
        _clients(report["clients"]),
        _latency(report["latency"]),
        *_delivery(report),
        *_sessions(report["sessions"]),
        *_keepalive(report["keepalive"]),
        _refused(report["refused"]),
        _malformed(report["malformed"]),
    ]
    spaced: list[RenderableType] = []
    for part in parts:
        spaced += [part, ""]
    return Group(*spaced[:-1])


def _summary(s: dict[str, Any]) -> Table:
    t = _table("Summary", "", "")
    for label, value in (
        ("captures / sources", s["captures"]),
        ("connections", s["connections"]),
        ("MQTT packets", s["packets"]),
        ("messages (PUBLISH to the broker)", s["messages"]),
        ("their payload bytes", s["message_bytes"]),
        ("deliveries (PUBLISH to subscribers)", s["deliveries"]),
        ("their payload bytes", s["delivered_bytes"]),
        *_unknown_direction(s),
        ("first", when(s["first_ns"])),
        ("last", when(s["last_ns"])),
        ("malformed", s["malformed"]),
        ("protocol violations", s["violations"]),
    ):
        t.add_row(label, f"{value:,}" if isinstance(value, int) else str(value))
    return t


def _timeline(timeline: dict[str, Any]) -> list[Table]:
    """The rates over time as sparklines: none when the capture has no time points."""
    if not timeline["points"]:
        return []
    step = timeline["step_seconds"]
    t = _table(
        f"Messages and deliveries over time (one bar: {step} s, from {when(timeline['start_ns'])} UTC)",
        "", "peak /s", "",
    )  # fmt: skip
    t.columns[2].justify = "left"
    for name in ("messages", "deliveries"):
        total = [p[name] for p in timeline["points"]]
        t.add_row(f"all {name}", f"{max(total) / step:,.1f}", sparkline(total))
    for series in timeline["series"]:
        name = series_label(series)
        t.add_row(name, f"{max(series['messages']) / step:,.1f}", sparkline(series["messages"]))
    return [t]


def _topics(topics: list[dict[str, Any]]) -> Table:
    t = _table("Topics", "topic", "messages", "payload bytes", "publishers", "deliveries", "receivers", "first",
               "last")  # fmt: skip
    for row in topics:
        t.add_row(topic_label(row["topic"]), f"{row['messages']:,}", f"{row['payload_bytes']:,}",
                  f"{row['publishers']:,}", f"{row['deliveries']:,}", f"{row['receivers']:,}", when(row["first_ns"]),
                  when(row["last_ns"]))  # fmt: skip
    return t


def _clients(clients: list[dict[str, Any]]) -> Table:
    t = _table("Clients", "client", "connections", "published", "bytes", "received", "bytes")
    for row in clients:
        t.add_row(row["client"] or "(unknown)", str(row["connections"]), f"{row['published']:,}",
                  f"{row['published_bytes']:,}", f"{row['received']:,}", f"{row['received_bytes']:,}")  # fmt: skip
    return t


def _latency(latency: dict[str, Any]) -> Table:
    t = _table("Acknowledgement latency (ms)", "flow", "count", "p50", "p90", "p99", "max")
    for name, label in LATENCY_LABELS.items():
        row = latency[name]
        t.add_row(label, f"{row['count']:,}", _ms(row["p50"]), _ms(row["p90"]), _ms(row["p99"]), _ms(row["max"]))
    return t


def _delivery(report: dict[str, Any]) -> list[Table]:
    """QoS 1/2 delivery, then the DUP re-sends when there are any."""
    t = _table("QoS 1/2 delivery", "QoS", "unacknowledged", "QoS 2 flows incomplete", "re-sent (DUP follows)")
    for row in report["unacknowledged"]:
        t.add_row(str(row["qos"]), f"{row['unacknowledged']:,}", f"{row['incomplete']:,}" if row["qos"] == 2 else "-",
                  f"{row['resent']:,}")  # fmt: skip
    tables = [t]
    if report["dup"]:
        t = _table("DUP re-sends", "client", "direction", "PUBLISH with DUP")
        for row in report["dup"]:
            t.add_row(row["client"] or "(unknown)", row["direction"] or "?", f"{row['resends']:,}")
        tables.append(t)
    return tables


def _sessions(ses: dict[str, Any]) -> list[Table]:
    """The sessions' figures, then the longest ten."""
    d = ses["duration"]
    t = _table("Sessions", "", "")
    for label, value in (
        ("connections", f"{ses['connections']:,}"),
        ("with CONNECT", f"{ses['with_connect']:,}"),
        ("ended with DISCONNECT", f"{ses['disconnected']:,}"),
        ("ended without DISCONNECT (or still open)", f"{ses['without_disconnect']:,}"),
        ("refused", f"{ses['refused']:,}"),
        ("duration p50 / p90 / p99 / max (s)", " / ".join(_ms(d[k]) for k in ("p50", "p90", "p99", "max"))),
    ):
        t.add_row(label, value)
    longest = _table("Longest sessions", "client", "capture", "connection", "version", "started", "seconds", "packets")
    for row in ses["longest"][:10]:
        longest.add_row(row["client"] or "(unknown)", row["capture_file"], str(row["stream"]), str(row["version"]),
                        when(row["start_ns"]), f"{row['seconds']:,.3f}", f"{row['packets']:,}")  # fmt: skip
    return [t, longest]


def _keepalive(k: dict[str, Any]) -> list[Table]:
    """Keepalive and pings, then the clients silent for too long when there are any."""
    t = _table("Keepalive and pings", "", "")
    for label, value in (
        ("connections with a keepalive", k["connections"] - k["without_keepalive"]),
        ("keepalive 0 (off)", k["without_keepalive"]),
        ("PINGREQ / PINGRESP", f"{k['pings']:,} / {k['pongs']:,}"),
        ("PINGREQ without PINGRESP", k["unanswered_pings"]),
        ("silent for over 1.5 × keepalive", k["overdue_count"]),
    ):
        t.add_row(label, str(value))
    tables = [t]
    if k["overdue"]:
        t = _table("Clients silent for over 1.5 × keepalive", "client", "capture", "connection", "keepalive",
                   "longest silence (s)")  # fmt: skip
        for row in k["overdue"]:
            t.add_row(row["client"] or "(unknown)", row["capture_file"], str(row["stream"]), str(row["keepalive"]),
                      f"{row['max_gap']:,.3f}")  # fmt: skip
        tables.append(t)
    return tables


def _refused(refused: list[dict[str, Any]]) -> Table:
    t = _table("Refused connections", "reason", "version", "refusals", "clients")
    for row in refused:
        t.add_row(f"0x{row['reason_code']:02X} {row['reason']}", str(row["version"]), f"{row['refusals']:,}",
                  ", ".join(c or "(empty)" for c in row["clients"]))  # fmt: skip
    if not refused:
        t.add_row("none", "", "", "")
    return t


def _malformed(malformed: list[dict[str, Any]]) -> Table:
    t = _table("Malformed packets and protocol violations", "type", "error", "packets", "connections")
    for row in malformed:
        t.add_row(row["packet_type"], row["error"], f"{row['packets']:,}", f"{row['connections']:,}")
    if not malformed:
        t.add_row("none", "", "", "")
    return t
