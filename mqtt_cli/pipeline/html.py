"""The report as one self-contained HTML page: inline CSS and SVG charts, no script, nothing fetched.

    Path("report.html").write_text(report_html(report))

Charts: PUBLISH rate over time (all traffic and the busiest topics and clients), and the distribution of the
QoS 1 and QoS 2 acknowledgement latencies on a logarithmic axis. Then the report's tables.
"""

from __future__ import annotations

import datetime
from html import escape
from typing import Any

__all__ = ["report_html"]

_W, _H, _PAD = 760, 220, 44
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 820px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; } td, th { padding: 2px 10px; text-align: right; }
td:first-child, th:first-child { text-align: left; } tr:nth-child(even) { background: #f6f6f6; }
th { border-bottom: 1px solid #999; } .figures td { text-align: left; }
svg { background: #fcfcfc; border: 1px solid #e4e4e4; } .legend span { margin-right: 1.2em; }
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


def _axes(x_label: str, y_label: str, y_max: float) -> str:
    out = [
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - 10}" y2="{_H - _PAD}" stroke="#888"/>',
        f'<line x1="{_PAD}" y1="10" x2="{_PAD}" y2="{_H - _PAD}" stroke="#888"/>',
        f'<text x="{_W // 2}" y="{_H - 8}" text-anchor="middle" font-size="12">{escape(x_label)}</text>',
        f'<text x="12" y="{_H // 2}" transform="rotate(-90 12 {_H // 2})" text-anchor="middle" font-size="12">'
        f"{escape(y_label)}</text>",
    ]
    for frac in (0.5, 1.0):
        y = _H - _PAD - frac * (_H - _PAD - 10)
        out.append(f'<text x="{_PAD - 4}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{y_max * frac:,.4g}</text>')
        out.append(f'<line x1="{_PAD}" y1="{y:.1f}" x2="{_W - 10}" y2="{y:.1f}" stroke="#eee"/>')
    return "".join(out)


def _rate_chart(timeline: dict[str, Any]) -> str:
    points = timeline["points"]
    step = timeline["step_seconds"]
    if not points:
        return "<p>No PUBLISH with a timestamp.</p>"
    lines = [("all PUBLISH", [p["messages"] / step for p in points])]
    lines += [(f"{s['kind']} {s['name'] or '(empty)'}", [v / step for v in s["messages"]]) for s in timeline["series"]]
    top = max(max(values) for _, values in lines) or 1.0
    width = _W - 10 - _PAD
    count = max(len(points) - 1, 1)
    svg = [_axes(f"seconds since {_when(timeline['start_ns'])} (buckets of {step} s)", "messages / s", top)]
    legend = []
    for n, (name, values) in enumerate(lines):
        colour = _COLOURS[n % len(_COLOURS)]
        coords = " ".join(
            f"{_PAD + i * width / count:.1f},{_H - _PAD - v / top * (_H - _PAD - 10):.1f}" for i, v in enumerate(values)
        )
        svg.append(f'<polyline fill="none" stroke="{colour}" stroke-width="{2 if n == 0 else 1.3}" points="{coords}"/>')
        legend.append(f'<span style="color:{colour}">■</span> {escape(name)}')
    last = (len(points) - 1) * step
    svg.append(f'<text x="{_W - 10}" y="{_H - _PAD + 14}" text-anchor="end" font-size="10">{last:,}</text>')
    return (
        f'<svg width="{_W}" height="{_H}" role="img" aria-label="PUBLISH rate over time">{"".join(svg)}</svg>'
        f'<div class="legend">{" ".join(legend)}</div>'
    )


def _latency_chart(name: str, bins: list[dict[str, Any]]) -> str:
    if not bins:
        return ""
    top = max(b["count"] for b in bins)
    lo = min(b["from_ms"] for b in bins)
    hi = max(b["to_ms"] for b in bins)
    import math

    span = math.log10(hi) - math.log10(lo) or 1.0
    width = _W - 10 - _PAD
    svg = [_axes("latency, ms (logarithmic)", "messages", top)]
    for b in bins:
        x0 = _PAD + (math.log10(b["from_ms"]) - math.log10(lo)) / span * width
        x1 = _PAD + (math.log10(b["to_ms"]) - math.log10(lo)) / span * width
        h = b["count"] / top * (_H - _PAD - 10)
        svg.append(
            f'<rect x="{x0:.1f}" y="{_H - _PAD - h:.1f}" width="{max(x1 - x0 - 1, 1):.1f}" height="{h:.1f}"'
            f' fill="#1f77b4"><title>{b["from_ms"]:.3g}–{b["to_ms"]:.3g} ms: {b["count"]:,}</title></rect>'
        )
    for b in bins[:: max(1, len(bins) // 6)]:
        x = _PAD + (math.log10(b["from_ms"]) - math.log10(lo)) / span * width
        svg.append(f'<text x="{x:.1f}" y="{_H - _PAD + 14}" font-size="10">{b["from_ms"]:.3g}</text>')
    return f'<h3>{escape(name)}</h3><svg width="{_W}" height="{_H}" role="img">{"".join(svg)}</svg>'


def report_html(report: dict[str, Any]) -> str:
    s = report["summary"]
    lat = report["latency"]
    ses = report["sessions"]
    k = report["keepalive"]
    body = [
        f"<h1>MQTT traffic report</h1><p class=note>{escape(str(report['table']))}: {_when(s['first_ns'])} to"
        f" {_when(s['last_ns'])}</p>",
        _table(
            ["", ""],
            [
                ["captures / sources", s["captures"]],
                ["connections", s["connections"]],
                ["MQTT packets", s["packets"]],
                ["PUBLISH", s["publishes"]],
                ["payload bytes", s["payload_bytes"]],
                ["malformed packets", s["malformed"]],
                ["protocol violations", s["violations"]],
            ],
        ),
        "<h2>PUBLISH rate over time</h2>",
        _rate_chart(report["timeline"]),
        "<h2>Acknowledgement latency</h2>",
        _table(
            ["flow", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"],
            [[name, v["count"], v["p50"], v["p90"], v["p99"], v["max"]] for name, v in lat.items()],
        ),
    ]
    titles = {"qos1_puback": "QoS 1: PUBLISH → PUBACK", "qos2_total": "QoS 2: PUBLISH → PUBCOMP"}
    for step, bins in report["latency_histogram"].items():
        body.append(_latency_chart(titles.get(step, step), bins))
    body += [
        "<h2>QoS 1/2 delivery</h2>",
        _table(
            ["QoS", "unacknowledged", "QoS 2 incomplete", "re-sent"],
            [[r["qos"], r["unacknowledged"], r["incomplete"], r["resent"]] for r in report["unacknowledged"]],
        ),
        _table(
            ["client", "direction", "DUP re-sends"],
            [[r["client"], r["direction"], r["resends"]] for r in report["dup"]],
        ),
        "<h2>Topics</h2>",
        _table(
            ["topic", "messages", "payload bytes", "clients"],
            [[r["topic"], r["messages"], r["payload_bytes"], r["clients"]] for r in report["topics"]],
        ),
        "<h2>Clients</h2>",
        _table(
            ["client", "connections", "published", "bytes", "received", "bytes"],
            [
                [
                    r["client"],
                    r["connections"],
                    r["published"],
                    r["published_bytes"],
                    r["received"],
                    r["received_bytes"],
                ]
                for r in report["clients"]
            ],
        ),
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
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>MQTT traffic report</title>'
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )
