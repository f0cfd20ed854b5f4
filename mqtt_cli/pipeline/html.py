"""The report as one self-contained HTML page: inline CSS and SVG charts, no script, nothing fetched.

    Path("report.html").write_text(report_html(report))

Charts: messages (PUBLISH to the broker) and deliveries (PUBLISH to subscribers) over time, with the messages of
the busiest topics and publishers, and the distribution of the QoS 1 and QoS 2 acknowledgement latencies on a
logarithmic axis. Then the report's tables.
"""

from __future__ import annotations

import datetime
from html import escape
from typing import Any

from .report import LATENCY_LABELS, series_label, topic_label

__all__ = ["report_html"]

_W, _H, _PAD = 760, 220, 44
_TOP = 10  # space above the plot area
_RIGHT = 10
# "all messages" is drawn in near-black, "all deliveries" dashed in grey; the busiest topics (solid) and publishers
# (dashed) get one colour each from these ten (Tableau 10: told apart by most readers, colour-blind ones included,
# the dashes helping): at most 5 topics and 5 clients are drawn (report._SERIES), so no two lines share a colour.
_ALL_COLOUR = "#222222"
_DELIVERIES_COLOUR = "#999999"
_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"
)  # fmt: skip
_BAR_COLOUR = "#1f77b4"
_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 820px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; } td, th { padding: 2px 10px; text-align: right; }
td:first-child, th:first-child { text-align: left; } tr:nth-child(even) { background: #f6f6f6; }
th { border-bottom: 1px solid #999; } .figures td { text-align: left; }
svg { background: #fcfcfc; border: 1px solid #e4e4e4; }
.legend { display: flex; flex-wrap: wrap; gap: .3em 1.4em; margin: .4em 0; }
.legend .item { display: inline-flex; align-items: center; gap: .4em; white-space: nowrap; }
.legend .swatch { display: inline-block; width: 14px; height: 14px; }
.legend .swatch.dashed { height: 4px; width: 22px; }
.note { color: #666; font-size: .9em; }
"""


def _when(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return escape(str(value))


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_num(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body or '<tr><td>none</td></tr>'}</table>"


def _nice_step(span: float, ticks: int, integer: bool) -> float:
    """A step of 1, 2 or 5 times a power of ten giving at most `ticks` steps over `span` (at least 1 if integer)."""
    import math

    raw = max(span, 1e-9) / ticks
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return max(1.0, float(round(step))) if integer else step


def _y_axis(label: str, top: float) -> tuple[str, float]:
    """The y axis of a count (integer ticks from 0): its SVG and the value at the top of the plot area."""
    step = _nice_step(top, 4, integer=True)
    y_max = max(step, step * -(-top // step))
    out = [
        f'<line x1="{_PAD}" y1="{_TOP}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#888"/>',
        f'<text x="12" y="{_H // 2}" transform="rotate(-90 12 {_H // 2})" text-anchor="middle" font-size="12">'
        f"{escape(label)}</text>",
    ]
    value = 0.0
    while value <= y_max + 1e-9:
        y = _y(value, y_max)
        out.append(f'<line x1="{_PAD}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(
            f'<text class="ytick" x="{_PAD - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{int(value):,}</text>'
        )
        value += step
    return "".join(out), y_max


def _y(value: float, y_max: float) -> float:
    return _H - _PAD - value / y_max * (_H - _PAD - _TOP)


def _x_axis(label: str, ticks: list[tuple[float, str]]) -> str:
    """The x axis: its line, label, and (x, text) ticks."""
    out = [
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _RIGHT}" y2="{_H - _PAD}" stroke="#888"/>',
        f'<text x="{(_PAD + _W - _RIGHT) // 2}" y="{_H - 8}" text-anchor="middle" font-size="12">'
        f"{escape(label)}</text>",
    ]
    for x, text in ticks:
        # Labels at the ends of the axis lean inwards, so that none is cut by the chart's edge.
        anchor = "start" if x - _PAD < 30 else "end" if _W - _RIGHT - x < 30 else "middle"
        out.append(f'<line x1="{x:.1f}" y1="{_H - _PAD}" x2="{x:.1f}" y2="{_H - _PAD + 4}" stroke="#888"/>')
        out.append(f'<text class="xtick" x="{x:.1f}" y="{_H - _PAD + 16}" text-anchor="{anchor}" font-size="10">'
                   f"{escape(text)}</text>")  # fmt: skip
    return "".join(out)


def _clock(seconds: float, span: float) -> str:
    """A time of day (UTC) for a tick: seconds shown when the span is short, not otherwise."""
    stamp = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return stamp.strftime("%H:%M:%S" if span < 3 * 3600 else "%d %b %H:%M")


def _time_ticks(start_s: float, span: float, width: float) -> list[tuple[float, str]]:
    """Ticks at round times of day (every 1, 2, 5, 10, 15, 30 s, 1, 2, 5, 10, 15, 30 min, 1, 2, 3, 6, 12 h, days)
    between start and start + span: about six."""
    import math

    steps = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
    step = next((s for s in steps if span / s <= 7), steps[-1] * max(1, math.ceil(span / steps[-1] / 7)))
    at = math.ceil(start_s / step) * step
    out = []
    while at <= start_s + span + 1e-9:
        out.append((_PAD + (at - start_s) / span * width, _clock(at, span)))
        at += step
    if len(out) < 3:  # a short capture (a bucket or two): its start and end, to the millisecond
        exact = [_clock_ms(start_s), _clock_ms(start_s + span)]
        out = [(_PAD, exact[0]), *[(x, t) for x, t in out if 60 < x - _PAD < width - 60], (_PAD + width, exact[1])]
    return out


def _clock_ms(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%H:%M:%S.%f")[:-3]


def _legend(items: list[tuple[str, str, bool]]) -> str:
    """(name, colour, dashed) as legend items: each swatch just before its own label."""
    out = []
    for name, colour, dashed in items:
        cls = "swatch dashed" if dashed else "swatch"
        out.append(
            f'<span class="item"><span class="{cls}" style="background:{colour}"></span>'
            f'<span class="label">{escape(name)}</span></span>'
        )
    return f'<div class="legend">{"".join(out)}</div>'


def _rate_chart(timeline: dict[str, Any]) -> str:
    points = timeline["points"]
    step = timeline["step_seconds"]
    if not points:
        return "<p>No PUBLISH with a timestamp.</p>"
    lines = [("all messages", [p["messages"] for p in points], _ALL_COLOUR, False)]
    deliveries = [p["deliveries"] for p in points]
    if any(deliveries):
        lines.append(("all deliveries", deliveries, _DELIVERIES_COLOUR, True))
    topics = [s for s in timeline["series"] if s["kind"] == "topic"]
    clients = [s for s in timeline["series"] if s["kind"] != "topic"]
    for n, series in enumerate(topics + clients):
        lines.append((series_label(series), series["messages"], _COLOURS[n % len(_COLOURS)], series["kind"] != "topic"))
    top = max(max(values) for _, values, _, _ in lines) or 1
    y_axis, y_max = _y_axis(f"PUBLISH per {step} s", top)
    width = _W - _RIGHT - _PAD
    # Each bucket is drawn at its middle; the axis spans the buckets' whole time.
    span = len(points) * step
    start_s = timeline["start_ns"] / 1e9
    svg = [y_axis, _x_axis(f"time (UTC), buckets of {step} s, from {_when(timeline['start_ns'])}",
                           _time_ticks(start_s, span, width))]  # fmt: skip
    for n, (name, values, colour, dashed) in enumerate(lines):
        coords = " ".join(
            f"{_PAD + (i + 0.5) * step / span * width:.1f},{_y(v, y_max):.1f}" for i, v in enumerate(values)
        )
        dash = ' stroke-dasharray="6 3"' if dashed else ""
        svg.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="{2.2 if n == 0 else 1.5}"{dash}'
            f' points="{coords}"><title>{escape(name)}</title></polyline>'
        )
        if len(values) == 1:  # one bucket: a line of one point is not drawn, a dot is
            x, y = coords.split(",")
            svg.append(f'<circle cx="{x}" cy="{y}" r="3" fill="{colour}"/>')
    return (
        f'<svg width="{_W}" height="{_H}" role="img" aria-label="messages and deliveries over time">'
        f'{"".join(svg)}</svg>'
        + _legend([(name, colour, dashed) for name, _, colour, dashed in lines])
    )


def _latency_chart(name: str, bins: list[dict[str, Any]]) -> str:
    """Quarter-decade bins on a logarithmic axis, empty ones included between the first and the last."""
    import math

    if not bins:
        return ""
    counts = {round(math.log10(b["from_ms"]) * 4): b["count"] for b in bins}
    first, last = min(counts), max(counts)
    every = range(first, last + 1)
    top = max(counts.values())
    y_axis, y_max = _y_axis("flows", top)
    width = _W - _RIGHT - _PAD
    slot = width / len(every)
    ticks = []
    svg = [y_axis]
    for n, b in enumerate(every):
        x0 = _PAD + n * slot
        count = counts.get(b, 0)
        lo, hi = 10 ** (b / 4), 10 ** ((b + 1) / 4)
        y = _y(count, y_max)
        svg.append(
            f'<rect class="bin" x="{x0 + 0.5:.1f}" y="{y:.1f}" width="{max(slot - 1, 1):.1f}"'
            f' height="{_H - _PAD - y:.1f}" fill="{_BAR_COLOUR}" data-count="{count}">'
            f"<title>{lo:.3g}–{hi:.3g} ms: {count:,}</title></rect>"
        )
        # Decades (every edge when there are few bins), and the first edge unless a decade is close to it.
        if b % 4 == 0 or len(every) <= 8 or (n == 0 and (-b) % 4 * slot > 40):
            ticks.append((x0, f"{lo:.3g}"))
    ticks.append((_PAD + len(every) * slot, f"{10 ** ((last + 1) / 4):.3g}"))
    svg.append(_x_axis("latency, ms (logarithmic; bars of a quarter decade)", ticks))
    return f'<h3>{escape(name)}</h3><svg width="{_W}" height="{_H}" role="img">{"".join(svg)}</svg>'


def report_html(report: dict[str, Any]) -> str:
    body = [
        *_summary(report),
        "<h2>Messages and deliveries over time</h2>",
        _rate_chart(report["timeline"]),
        *_latency(report),
        *_delivery(report),
        *_topics_and_clients(report),
        *_sessions(report),
        *_problems(report),
    ]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>MQTT traffic report</title>'
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )


def _summary(report: dict[str, Any]) -> list[str]:
    s = report["summary"]
    unknown = s["publishes"] - s["messages"] - s["deliveries"]
    return [
        f"<h1>MQTT traffic report</h1><p class=note>{escape(str(report['table']))}: {_when(s['first_ns'])} to"
        f" {_when(s['last_ns'])}</p>",
        _table(
            ["", ""],
            [
                ["captures / sources", s["captures"]],
                ["connections", s["connections"]],
                ["MQTT packets", s["packets"]],
                ["messages (PUBLISH to the broker)", s["messages"]],
                ["their payload bytes", s["message_bytes"]],
                ["deliveries (PUBLISH to subscribers)", s["deliveries"]],
                ["their payload bytes", s["delivered_bytes"]],
                *([["PUBLISH of unknown direction", unknown]] if unknown else []),
                ["malformed packets", s["malformed"]],
                ["protocol violations", s["violations"]],
            ],
        ),
    ]


def _latency(report: dict[str, Any]) -> list[str]:
    """The latency table, then a histogram chart for each step."""
    parts = [
        "<h2>Acknowledgement latency</h2>",
        _table(
            ["flow", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"],
            [[LATENCY_LABELS.get(name, name), v["count"], v["p50"], v["p90"], v["p99"], v["max"]]
             for name, v in report["latency"].items()],
        ),
    ]  # fmt: skip
    for step, bins in report["latency_histogram"].items():
        parts.append(_latency_chart(LATENCY_LABELS.get(step, step), bins))
    return parts


def _delivery(report: dict[str, Any]) -> list[str]:
    return [
        "<h2>QoS 1/2 delivery</h2>",
        _table(
            ["QoS", "unacknowledged", "QoS 2 incomplete", "re-sent"],
            [[r["qos"], r["unacknowledged"], r["incomplete"], r["resent"]] for r in report["unacknowledged"]],
        ),
        _table(
            ["client", "direction", "DUP re-sends"],
            [[r["client"], r["direction"], r["resends"]] for r in report["dup"]],
        ),
    ]


def _topics_and_clients(report: dict[str, Any]) -> list[str]:
    return [
        "<h2>Topics</h2>",
        _table(
            ["topic", "messages", "payload bytes", "publishers", "deliveries", "receivers"],
            [[topic_label(r["topic"]), r["messages"], r["payload_bytes"], r["publishers"], r["deliveries"],
              r["receivers"]] for r in report["topics"]],
        ),
        "<h2>Clients</h2>",
        _table(
            ["client", "connections", "published", "bytes", "received", "bytes"],
            [[r["client"], r["connections"], r["published"], r["published_bytes"], r["received"],
              r["received_bytes"]] for r in report["clients"]],
        ),
    ]  # fmt: skip


def _sessions(report: dict[str, Any]) -> list[str]:
    """Sessions, then keepalive and pings."""
    ses = report["sessions"]
    k = report["keepalive"]
    return [
        "<h2>Sessions</h2>",
        _table(
            ["", ""],
            [
                ["connections", ses["connections"]],
                ["ended with DISCONNECT", ses["disconnected"]],
                ["ended without DISCONNECT", ses["without_disconnect"]],
                ["refused", ses["refused"]],
                ["duration p50 s", ses["duration"]["p50"]],
                ["duration p99 s", ses["duration"]["p99"]],
                ["duration max s", ses["duration"]["max"]],
            ],
        ),
        "<h2>Keepalive and pings</h2>",
        _table(
            ["", ""],
            [
                ["PINGREQ", k["pings"]],
                ["PINGRESP", k["pongs"]],
                ["PINGREQ without PINGRESP", k["unanswered_pings"]],
                ["silent over 1.5 × keepalive", k["overdue_count"]],
            ],
        ),
    ]


def _problems(report: dict[str, Any]) -> list[str]:
    """Refused connections, malformed packets and protocol violations."""
    return [
        "<h2>Refused connections</h2>",
        _table(
            ["reason", "version", "refusals", "clients"],
            [
                [f"0x{r['reason_code']:02X} {r['reason']}", r["version"], r["refusals"], ", ".join(r["clients"])]
                for r in report["refused"]
            ],
        ),
        "<h2>Malformed packets and protocol violations</h2>",
        _table(
            ["type", "error", "packets", "connections"],
            [[r["packet_type"], r["error"], r["packets"], r["connections"]] for r in report["malformed"]],
        ),
    ]
