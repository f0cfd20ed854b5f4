"""Output shared by the commands: rich on a terminal, plain text when piped.

For `mqtt dump`: one line per packet (`PacketLines`), the tree of every field (`packet_tree`), JSON lines
(`JsonLines`, from `mqtt_cli.jsonlines`), the `--stats` summary (`stats_tables`) and a progress bar on
standard error (`with_progress`). Tables of any command are printed by `print_whole`: at the terminal's width
on a terminal, and never cut anywhere else (a file, a pipe).
Records are the dicts of `mqtt_cli.capture.records`; human output also reads the decoded object the record
was built from (`rec["_obj"]`: a packet, a protocol error or a stream note).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from mqtt_cli.capture.aliases import TopicAliases, property_value
from mqtt_cli.core import (
    Connect,
    PacketType,
    Publish,
    RemoteProtocolError,
    Subscribe,
    reason_name,
)
from mqtt_cli.jsonlines import JsonLines

__all__ = [
    "JsonLines",
    "PacketLines",
    "hexdump",
    "packet_tree",
    "payload_preview",
    "print_whole",
    "stats_tables",
    "titled_table",
    "with_progress",
]

T = TypeVar("T")

TYPE_STYLES = {
    "CONNECT": "bold green",
    "CONNACK": "green",
    "PUBLISH": "bold cyan",
    "PUBACK": "cyan",
    "PUBREC": "cyan",
    "PUBREL": "cyan",
    "PUBCOMP": "cyan",
    "SUBSCRIBE": "bold magenta",
    "SUBACK": "magenta",
    "UNSUBSCRIBE": "bold magenta",
    "UNSUBACK": "magenta",
    "PINGREQ": "dim",
    "PINGRESP": "dim",
    "DISCONNECT": "bold yellow",
    "AUTH": "yellow",
    "RESERVED": "bold red",
    "MALFORMED": "bold red",
}
_TYPE_NUMBERS = {t.name: int(t) for t in PacketType}
_PREVIEW = 48


# --- small formatting helpers ------------------------------------------------------------------------------


class _Clock:
    """Local wall-clock time of a record's timestamp string, HH:MM:SS.ffffff (the date changes rarely)."""

    def __init__(self) -> None:
        self._sec = ""
        self._text = ""

    def __call__(self, ts: str | None) -> str:
        if ts is None:
            return "-" * 15
        sec, _, frac = ts.partition(".")
        if sec != self._sec:
            self._sec = sec
            self._text = time.strftime("%H:%M:%S", time.localtime(int(sec)))
        return f"{self._text}.{frac[:6]:0<6}"


def payload_preview(payload: bytes, limit: int = _PREVIEW) -> str:
    """Text in quotes when the payload is printable UTF-8, else its first bytes in hex."""
    if not payload:
        return "(empty)"
    head = payload[: limit * 4]
    try:
        text = head.decode()
    except UnicodeDecodeError:
        text = None if len(head) == len(payload) else _decode_prefix(head)
    if text is not None and text.isprintable():
        shown = text[:limit]
        cut = len(shown) < len(text) or len(head) < len(payload)
        return json.dumps(shown, ensure_ascii=False) + ("…" if cut else "")
    shown = payload[: limit // 2].hex(" ")
    return f"0x {shown}" + (" …" if len(payload) > limit // 2 else "")


def _decode_prefix(data: bytes) -> str | None:
    """UTF-8 text of a prefix cut by a byte limit (possibly inside a character)."""
    for cut in range(len(data), max(len(data) - 4, 0), -1):
        try:
            return data[:cut].decode()
        except UnicodeDecodeError:
            continue
    return None


def hexdump(data: bytes, limit: int = 512) -> str:
    """Offset, hex and ASCII columns, 16 bytes a line; at most `limit` bytes."""
    lines = []
    for at in range(0, min(len(data), limit), 16):
        row = data[at : at + 16]
        hexes = " ".join(f"{b:02x}" for b in row)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:08x}  {hexes:<47}  |{text}|")
    if len(data) > limit:
        lines.append(f"… {len(data) - limit} more bytes")
    return "\n".join(lines)


def _code(code: int | None, ptype: str, v5: bool) -> str:
    if code is None:
        return ""
    number = _TYPE_NUMBERS.get(ptype)
    return f"0x{code:02X} {reason_name(code, number, 5 if v5 else 4)}"


def _prop_text(name: str, value: Any) -> str:
    if name == "user_property":
        return f"{value[0]}:{value[1]}"
    return f"{name}={value}"


# --- one line per packet -----------------------------------------------------------------------------------


def _details(rec: dict[str, Any], aliases: TopicAliases) -> list[tuple[str, str]]:
    """The fields that matter for the record's type, as (text, style) parts. `aliases` remembers topic aliases."""
    ptype = rec.get("type")
    obj = rec.get("_obj")
    packet = getattr(obj, "packet", obj)
    v5 = "properties" in rec
    parts: list[tuple[str, str]] = []
    if ptype == "CONNECT":
        parts.append((f"{rec.get('proto_name')} v{rec.get('proto_version')} id={rec.get('client_id')!r}", ""))
        parts.append((f" keepalive={rec.get('keepalive')}", "dim"))
        if rec.get("clean_session"):
            parts.append((" clean", "dim"))
        if "username" in rec:
            parts.append((f" user={rec['username']!r}", ""))
        if "will_topic" in rec:
            parts.append((f" will={rec['will_topic']} q{rec['will_qos']}{' r' if rec['will_retain'] else ''}", ""))
    elif ptype == "CONNACK":
        parts.append((_code(rec.get("reason_code"), "CONNACK", v5), "" if not rec.get("reason_code") else "red"))
        if rec.get("session_present"):
            parts.append((" session-present", "dim"))
    elif ptype == "PUBLISH":
        topic = rec.get("topic") or ""
        alias = property_value(rec.get("properties"), "topic_alias")
        # A 5.0 topic alias: set by a PUBLISH with a topic, used by later ones with an empty topic (per direction
        # of a connection). Shown resolved; the record keeps the topic as on the wire.
        resolved = aliases.topic(rec)
        if alias is None:
            parts.append((topic or "(empty)", "bold"))
        elif topic:
            parts.append((topic, "bold"))
            parts.append((f" alias={alias}", "dim"))
        else:
            parts.append((resolved or "(unknown alias)", "bold"))
            parts.append((f" via alias {alias}", "dim"))
        flags = f" q{rec.get('qos')}"
        if rec.get("packet_id") is not None:
            flags += f" id={rec['packet_id']}"
        if rec.get("retain"):
            flags += " retain"
        if rec.get("dup"):
            flags += " dup"
        parts.append((flags, ""))
        parts.append((f" {rec.get('payload_len')} B", "dim"))
        if isinstance(packet, Publish):
            parts.append((" " + payload_preview(packet.payload), "green"))
    elif ptype in ("PUBACK", "PUBREC", "PUBREL", "PUBCOMP"):
        parts.append((f"id={rec.get('packet_id')}", ""))
        if rec.get("reason_code"):
            parts.append((" " + _code(rec["reason_code"], ptype, v5), "yellow"))
    elif ptype in ("SUBSCRIBE", "UNSUBSCRIBE"):
        parts.append((f"id={rec.get('packet_id')} ", ""))
        topics = rec.get("topics") or []
        if ptype == "SUBSCRIBE" and isinstance(packet, Subscribe):
            shown = []
            for sub in packet.subscriptions:
                extra = " nl" * sub.no_local + " rap" * sub.retain_as_published
                extra += f" rh{sub.retain_handling}" if sub.retain_handling else ""
                shown.append(f"{sub.topic_filter} (q{sub.qos}{extra})")
            parts.append((", ".join(shown), "bold"))
        else:
            parts.append((", ".join(topics), "bold"))
    elif ptype in ("SUBACK", "UNSUBACK"):
        parts.append((f"id={rec.get('packet_id')}", ""))
        codes = rec.get("reason_codes") or []
        if codes:
            parts.append(
                (
                    " [" + ", ".join(f"0x{c:02X}" if c >= 0x80 or ptype == "UNSUBACK" else str(c) for c in codes) + "]",
                    "yellow" if any(c >= 0x80 for c in codes) else "",
                )
            )
    elif ptype in ("DISCONNECT", "AUTH"):
        if rec.get("reason_code") is not None:
            parts.append((_code(rec["reason_code"], ptype, v5), ""))
    elif ptype == "MALFORMED":
        what = rec.get("packet_type")
        if what:
            parts.append((f"{what} ", "bold"))
    props = rec.get("properties")
    if props and ptype not in ("CONNACK",):
        shown = [_prop_text(n, v) for n, v in props if n != "topic_alias"]
        if shown:
            parts.append(("  {" + ", ".join(shown)[:120] + "}", "dim"))
    error = rec.get("error")
    if error:
        parts.append((f"  ! {error}", "bold red"))
    return parts


def printable(text: str) -> str:
    """`text` with every non-printable character as its Python escape (ESC as \\x1b, a newline as \\n): client
    ids and topics are the peer's bytes, and an escape sequence must not reach the terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class PacketLines:
    """One line per record: time, who, direction, type, fields. Coloured through rich on a terminal."""

    def __init__(self, out: IO[str] | None = None, console: Console | None = None, flush: bool = False) -> None:
        self._out = out or sys.stdout
        self._console = console
        self._flush = flush  # after every record (a live capture)
        self._clock = _Clock()
        self._aliases = TopicAliases()

    def parts(self, rec: dict[str, Any]) -> list[tuple[str, str]]:
        return self.head(rec) + [(printable(text), style) for text, style in _details(rec, self._aliases)]

    def head(self, rec: dict[str, Any]) -> list[tuple[str, str]]:
        """Time, who, direction and type."""
        ptype = rec.get("type") or "?"
        from_client = rec.get("from_client")
        client = rec.get("client")
        ts = rec.get("ts")
        parts: list[tuple[str, str]] = [(self._clock(ts), "dim"), (" ", "")] if ts is not None else []
        if from_client is None:
            if rec.get("src"):
                parts.append((f"{rec.get('src')} → {rec.get('dst')}", "blue"))
            elif rec.get("offset") is not None:
                parts.append((f"@{rec['offset']}", "blue"))
        else:
            side = client or (rec.get("src") if from_client else rec.get("dst")) or "?"
            parts.append((printable(side), "blue"))
            parts.append((" → " if from_client else " ← ", "bold"))
        parts.append((" " + ptype.ljust(11), TYPE_STYLES.get(ptype, "")))
        return parts

    def write(self, rec: dict[str, Any]) -> None:
        parts = self.parts(rec)
        if self._console is not None:
            self._console.print(Text.assemble(*parts), soft_wrap=True, overflow="ignore", crop=False)
        else:
            self._out.write("".join(text for text, _ in parts) + "\n")
            if self._flush:
                self._out.flush()

    def close(self) -> None:
        self._out.flush()


# --- the tree of every field (-v) --------------------------------------------------------------------------


def _props_branch(tree: Tree, title: str, props: list[list[Any]] | None) -> None:
    if props is None:
        return
    if not props:
        tree.add(f"{title}: none")
        return
    branch = tree.add(title)
    for name, value in props:
        if name == "user_property":
            branch.add(f"user_property: {value[0]!r} = {value[1]!r}")
        elif isinstance(value, str) and name in ("correlation_data", "authentication_data"):
            branch.add(f"{name}: {value or '(empty)'} (hex)")
        else:
            branch.add(f"{name}: {value!r}" if isinstance(value, str) else f"{name}: {value}")


def _payload_branch(tree: Tree, title: str, payload: bytes) -> None:
    branch = tree.add(f"{title} ({len(payload)} bytes)")
    if not payload:
        return
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        text = None
    if text is not None and (text.isprintable() or all(c.isprintable() or c in "\r\n\t" for c in text)):
        shown = text if len(text) <= 2000 else text[:2000] + f"… ({len(text) - 2000} more characters)"
        branch.add(Text(shown))
    branch.add(Text(hexdump(payload), style="dim"))


def packet_tree(rec: dict[str, Any], title: Text) -> Tree:
    """Every field and property of the record's packet, with hex/text views of payloads."""
    tree = Tree(title)
    obj = rec.get("_obj")
    packet = getattr(obj, "packet", obj)
    where = f"frame {rec.get('frame')}" if rec.get("frame") is not None else "stream"
    if rec.get("src"):
        where += f", {rec.get('src')} → {rec.get('dst')}"
    if rec.get("offset") is not None and rec["offset"] >= 0:
        where += f", stream offset {rec['offset']}"
    tree.add(Text(where, style="dim"))
    if rec.get("flags") is not None:
        flags = rec["flags"]
        tree.add(f"fixed header: flags 0x{flags:X} ({flags:04b}), remaining length {rec.get('remaining_length')}")
    skip = {
        "ts",
        "frame",
        "src",
        "dst",
        "type",
        "flags",
        "remaining_length",
        "offset",
        "stream",
        "client",
        "from_client",
        "_obj",
        "properties",
        "will_properties",
        "error",
        "errors",
        "payload_sha256",
    }
    for key, value in rec.items():
        if key in skip or value is None:
            continue
        if key == "reason_code":
            value = _code(value, rec.get("type") or "", "properties" in rec)
        elif key == "reason_codes":
            value = ", ".join(_code(c, rec.get("type") or "", "properties" in rec) for c in value) or "none"
        tree.add(f"{key}: {value!r}" if isinstance(value, str) and key != "reason_code" else f"{key}: {value}")
    _props_branch(tree, "properties", rec.get("properties"))
    if isinstance(packet, Connect):
        if packet.password is not None:
            tree.add(f"password: ({len(packet.password)} bytes, not shown)")
        if packet.will is not None:
            retain = " retain" if packet.will.retain else ""
            will = tree.add(f"will: {packet.will.topic!r} QoS {packet.will.qos}{retain}")
            _props_branch(will, "will properties", rec.get("will_properties"))
            _payload_branch(will, "will payload", packet.will.payload)
    elif isinstance(packet, Subscribe):
        subs = tree.add("subscriptions")
        for sub in packet.subscriptions:
            subs.add(
                f"{sub.topic_filter!r}: QoS {sub.qos}, no local {sub.no_local}, retain as published "
                f"{sub.retain_as_published}, retain handling {sub.retain_handling}"
            )
    elif isinstance(packet, Publish):
        tree.add(f"payload_sha256: {rec.get('payload_sha256')}")
        _payload_branch(tree, "payload", packet.payload)
    if isinstance(obj, RemoteProtocolError):
        violations = obj.details.get("violations") or [obj]
        errors = tree.add(Text(f"breaks {len(violations)} rule(s)", style="bold red"))
        for err in violations:
            errors.add(Text(f"{err.message} (reason code 0x{err.reason_code:02X})", style="red"))
    elif rec.get("error"):
        tree.add(Text(rec["error"], style="bold red"))
    return tree


class PacketTrees(PacketLines):
    """-v: the record's line, then the tree of all its fields."""

    def write(self, rec: dict[str, Any]) -> None:
        title = Text.assemble(*self.head(rec))
        tree = packet_tree(rec, title)
        console = self._console or Console(file=self._out, color_system=None, width=200, soft_wrap=True)
        self._console = console
        console.print(tree)
        if self._flush:
            console.file.flush()


# --- --stats -----------------------------------------------------------------------------------------------


def titled_table(title: str, *columns: str) -> Table:
    """A table of the commands' summaries: its title on the left, the first column left-aligned, the others right.
    At least as wide as its title, which rich would otherwise wrap to the width of narrow columns."""
    from rich.cells import cell_len

    table = Table(title=title, title_justify="left", title_style="bold", show_edge=False, pad_edge=False,
                  min_width=cell_len(title))  # fmt: skip
    for n, col in enumerate(columns):
        table.add_column(col, justify="right" if n else "left")
    return table


def print_whole(renderable: RenderableType, *, stderr: bool = False) -> None:
    """Prints `renderable` to standard output (or error): on a terminal at its width, as rich does; anywhere else
    (`> report.txt`, `| less`) as wide as it needs, where rich would cut it to 80 columns."""
    from rich.measure import Measurement

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        wide = Console(stderr=stderr, highlight=False, width=_UNBOUNDED)
        needed = Measurement.get(wide, wide.options, renderable).maximum
        console = Console(stderr=stderr, highlight=False, width=max(1, min(needed, _UNBOUNDED)))
    console.print(renderable)


_UNBOUNDED = 1 << 20  # columns: wider than any table of ours, small enough for rich's measuring


def stats_tables(stats: Any, capture: dict[str, int] | None = None, top: int = 15) -> RenderableType:
    """The `--stats` summary: `stats` is a capture.stats.DumpStats, `capture` the dissector's counters."""
    parts: list[RenderableType] = []
    summary = titled_table("Summary", "", "count")
    if capture:
        summary.add_row("frames", f"{capture['frames']:,}")
        summary.add_row("MQTT connections", f"{capture['connections']:,}")
        if capture.get("encrypted"):
            summary.add_row("encrypted connections (not decoded)", f"{capture['encrypted']:,}")
        if capture.get("gaps"):
            summary.add_row("capture gaps", f"{capture['gaps']:,} ({capture['lost_bytes']:,} bytes lost)")
        if capture.get("skipped_bytes"):
            summary.add_row("bytes skipped to re-synchronise", f"{capture['skipped_bytes']:,}")
    summary.add_row("packets", f"{stats.packets:,}")
    summary.add_row("malformed or breaking a rule", f"{stats.malformed:,}")
    summary.add_row("PUBLISH payload bytes", f"{stats.payload_bytes:,}")
    parts.append(summary)
    by_type = titled_table("Packets by type", "type", "packets")
    for name, count in sorted(stats.by_type.items(), key=lambda kv: (-kv[1], kv[0])):
        by_type.add_row(Text(name, style=TYPE_STYLES.get(name, "")), f"{count:,}")
    parts.append(by_type)
    for title, counter, col in (("Clients", stats.by_client, "client"), ("Topics (PUBLISH)", stats.by_topic, "topic")):
        if counter:
            more = f", top {top}" if len(counter) > top else ""
            table = titled_table(f"{title}: {len(counter):,}{more}", col, "packets")
            for name, count in counter.most_common(top):
                label = "(unknown topic alias)" if name is None else Text(printable(name)) if name else "(empty)"
                table.add_row(label, f"{count:,}")  # no markup
            parts.append(table)
    if stats.errors:
        table = titled_table("Rule breaks and malformed data", "error", "packets")
        for name, count in stats.errors.most_common(top):
            table.add_row(Text(printable(name), style="red"), f"{count:,}")
        parts.append(table)
    flows = stats.open_flows
    title = f"QoS flows left unacknowledged: {len(flows):,}"
    if stats.flows_dropped:
        title += f" (and {stats.flows_dropped:,} older ones not kept)"
    if flows:
        table = titled_table(
            title + (f", first {top}" if len(flows) > top else ""), "client", "packet id", "QoS", "topic", "waiting for"
        )
        for flow in flows[:top]:
            client, topic = Text(printable(flow.client)), Text(printable(flow.topic))
            table.add_row(client, str(flow.packet_id), str(flow.qos), topic, flow.waiting)
        parts.append(table)
    else:
        parts.append(Text(title, style="bold"))
    return Group(*[item for part in parts for item in (part, Text(""))])


# --- progress ----------------------------------------------------------------------------------------------


def with_progress(
    items: Iterable[T], position: Callable[[], int], total: int, label: str, every: int = 4096
) -> Iterator[T]:
    """Yields `items`, showing on standard error how far `position()` is through `total` bytes."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    with progress:
        task = progress.add_task(label, total=total)
        count = 0
        for item in items:
            yield item
            count += 1
            if count >= every:
                count = 0
                progress.update(task, completed=position())
