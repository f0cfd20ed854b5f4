"""The broker's log: text or JSON lines to standard error or a file, and to syslog; reopened for logrotate.

Writes are synchronous and small: one write(2) per line, straight to the descriptor (no buffer of ours that
would keep a line that failed and replay it later). A file is opened in append mode, so `logrotate` can move it
away and SIGUSR2 (`reopen`) starts a new one. A line that cannot be written (a file-size limit, a full disk, a
closed pipe or terminal) is dropped and counted (`LostLines`), never raised into the broker: the next line that
can be written is preceded by one saying how many were lost. Syslog gets the same line through a unix datagram
socket (RFC 3164 framing, as syslog(3) sends it to /dev/log); a syslog that is not there or full loses the
line, never blocks the broker.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from mqtt_cli.core.broker import Notice
from mqtt_cli.core.config import LogFormat, LogLevel, LogSettings

__all__ = [
    "BrokerLog", "LineWriter", "LogError", "LostLines", "log_topic", "notice_level", "stderr_descriptor", "write_all",
]  # fmt: skip

_FACILITIES = {"user": 1, "daemon": 3, **{f"local{i}": 16 + i for i in range(8)}}
_SEVERITY = {LogLevel.debug: 7, LogLevel.info: 6, LogLevel.warning: 4, LogLevel.error: 3}
_STYLES = {"connected": "green", "disconnected": "dim", "refused": "yellow", "error": "red", "reload": "cyan"}


class LogError(Exception):
    """The log file cannot be opened (one line)."""


_INFO_KINDS = frozenset({"connected", "disconnected", "subscribe", "unsubscribe"})
_SUBSCRIPTION_KINDS = frozenset({"subscribe", "unsubscribe"})


def notice_level(kind: str) -> LogLevel:
    """Connections coming and going and subscription changes are information; everything else a client caused
    (refused, dropped, failed) is a warning."""
    return LogLevel.info if kind in _INFO_KINDS else LogLevel.warning


def log_topic(level: LogLevel, event: str) -> str:
    """mosquitto's topic for a log line (log_dest topic): $SYS/broker/log/ and E, W, N (connections), I, D, or
    M/subscribe and M/unsubscribe."""
    if event in _SUBSCRIPTION_KINDS:
        return f"$SYS/broker/log/M/{event}"
    if level is LogLevel.info:
        return "$SYS/broker/log/N" if event in ("connected", "disconnected") else "$SYS/broker/log/I"
    return "$SYS/broker/log/" + {LogLevel.debug: "D", LogLevel.warning: "W"}.get(level, "E")


@dataclass(slots=True)
class LostLines:
    """Log lines that could not be written: since the start (the metric), and since the last one written (said
    before the next that can be, then zero), with the last failure's reason."""

    total: int = 0
    unsaid: int = 0
    reason: str = ""


class LineWriter:
    """Text lines to a descriptor, each text in one write(2) (more if the descriptor takes less: `write_all`), no
    buffer of ours. A line that cannot be written is dropped and counted in `lost`, never raised; the next text that
    can be written is preceded by a line saying how many were lost (the broker's log, a bridge's)."""

    __slots__ = ("_cut", "fd", "lost")

    def __init__(self, fd: int) -> None:
        self.fd = fd  # -1: none (every line is lost)
        self.lost = LostLines()
        self._cut = False  # the last write stopped inside a line: the next starts on a line of its own

    def retarget(self, fd: int) -> None:
        """Lines go to `fd` from now on (a log file opened again); what was lost is still to be said."""
        self.fd = fd
        self._cut = False

    def write(self, text: str, lost_line: Callable[[int, str], str], lead: str = "") -> str | None:
        """Writes `lead` (terminal control), then `lost_line(count, reason)` if lines were lost since the last one
        written, then `text` (a line with its newline, or "" to say only what was lost). Returns why it could not
        be written (None: written)."""
        lost = self.lost
        a_line = bool(text)
        if lost.unsaid:
            text = lost_line(lost.unsaid, lost.reason) + text
        data = (lead + ("\n" if self._cut else "") + text).encode("utf-8", "backslashreplace")
        written, error = write_all(self.fd, data)
        if written:
            self._cut = error is not None
        if error is None:
            lost.unsaid = 0
            return None
        lost.reason = error
        if a_line:
            lost.total += 1
            lost.unsaid += 1
        return error


class BrokerLog:
    def __init__(self, settings: LogSettings, stderr: TextIO | None = None) -> None:
        self.settings = settings
        self._stderr = stderr_descriptor(stderr or sys.stderr)  # -1: Python found no descriptor 2
        self._file = -1  # the log file's descriptor, -1 when the lines go to standard error
        self._out = LineWriter(self._stderr)
        self._syslog: socket.socket | None = None
        self._console: Any = None
        # log_dest topic: where lines are published (the broker's, once it runs), and whether one is being
        # published now (what that causes is logged, not published again).
        self.topic_sink: Callable[[str, str], None] | None = None
        self._publishing = False
        self._open(settings)

    @property
    def lost(self) -> LostLines:
        return self._out.lost

    def _open(self, settings: LogSettings) -> None:
        file = -1
        if settings.file is not None:
            try:
                file = os.open(settings.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError as exc:
                raise LogError(f"cannot open the log file {settings.file}: {exc.strerror or exc}") from None
        sock = None
        if settings.syslog:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
        self.close()
        self.settings, self._file, self._syslog = settings, file, sock
        self._out.retarget(file if file >= 0 else self._stderr)
        self._console = None
        if file < 0 and settings.format is LogFormat.text and self._stderr >= 0 and os.isatty(self._stderr):
            from rich.console import Console

            # It renders only (to a file of its own, never read): the line goes out as any other, and a terminal
            # gone away (EIO, even on asking its size) cannot fail inside rich.
            self._console = Console(file=io.StringIO(), force_terminal=True, highlight=False)

    def reconfigure(self, settings: LogSettings) -> None:
        """A reload's [log]: the new file is opened before the old one is closed (LogError: nothing changed)."""
        if settings != self.settings:
            self._open(settings)

    def reopen(self) -> None:
        """SIGUSR2: the file was moved away (logrotate); open a new one at the same path."""
        if self.settings.file is not None:
            self._open(self.settings)

    def close(self) -> None:
        if self.lost.unsaid:  # a last try to say how many lines went missing
            self._write("")
        if self._file >= 0:
            os.close(self._file)
            self._file = -1
        if self._syslog is not None:
            self._syslog.close()
            self._syslog = None

    def lines_lost(self) -> int:
        """Lines that could not be written since the start (the metric mqtt_broker_log_lines_lost_total)."""
        return self.lost.total

    def wants(self, level: LogLevel) -> bool:
        return level is not LogLevel.none and level.rank >= self.settings.level.rank

    def notice(self, n: Notice) -> None:
        level = notice_level(n.kind)
        if n.kind in _SUBSCRIPTION_KINDS:  # mosquitto's log_type subscribe/unsubscribe, or everything at debug
            settings = self.settings
            if not (settings.subscriptions or settings.level is LogLevel.debug):
                return
        elif not self.wants(level):
            return
        fields: dict[str, Any] = {"event": n.kind, "client_id": n.client_id, "peer": n.peer}
        if n.detail:
            fields["detail"] = n.detail
        if n.reason_code is not None:
            fields["reason_code"] = n.reason_code
        self._emit(level, fields)

    def packet(self, client_id: str | None, peer: str, line: str) -> None:
        """A packet in or out, at debug (mosquitto's -v lines); asked for only while debug lines are wanted."""
        if self.wants(LogLevel.debug):
            self._emit(LogLevel.debug, {"event": "packet", "client_id": client_id, "peer": peer, "detail": line})

    def message(self, level: LogLevel, event: str, detail: str) -> None:
        """A line about the broker itself (listening, reload, ...)."""
        if self.wants(level):
            self._emit(level, {"event": event, "detail": detail})

    def status(self, text: str) -> None:
        """A line for whoever started the broker (where it listens), on standard error whatever the log's settings;
        lost if standard error cannot be written, as a log line is."""
        write_all(self._stderr, (text + "\n").encode("utf-8", "backslashreplace"))

    def _emit(self, level: LogLevel, fields: dict[str, Any]) -> None:
        now = time.time()
        line = self._plain(level, fields, now)
        self._write(self._shown(fields, line, now))
        sink = self.topic_sink
        # Not debug lines, as mosquitto: a packet line per log message sent to a subscriber would never end.
        if sink is not None and self.settings.topic and level is not LogLevel.debug and not self._publishing:
            self._publishing = True
            try:
                stamp = str(int(now)) if self.settings.timestamp_format is None else self._stamp(now, True)
                text = line if self.settings.format is LogFormat.json else f"{stamp}: {line}"  # (mosquitto's form)
                sink(log_topic(level, fields["event"]), text)
            finally:
                self._publishing = False
        if self._syslog is not None:
            priority = _FACILITIES[self.settings.syslog_facility] * 8 + _SEVERITY[level]
            data = f"<{priority}>{time.strftime('%b %d %H:%M:%S', time.localtime(now))} mqtt-serve[{os.getpid()}]: "
            with contextlib.suppress(OSError):  # no syslog, or its queue full: the line is lost, the broker goes on
                self._syslog.sendto((data + line).encode("utf-8", "replace"), self.settings.syslog_address)

    def _plain(self, level: LogLevel, fields: dict[str, Any], now: float) -> str:
        """The line as syslog gets it: JSON, or text without the time."""
        if self.settings.format is LogFormat.json:
            return json.dumps({"ts": round(now, 6), "level": level.value, **fields})
        return _text(fields)

    def _shown(self, fields: dict[str, Any], line: str, now: float) -> str:
        """The line as the file or standard error gets it: text with the time (a file's with the date too), in
        colours on a terminal."""
        if self._console is not None:
            return self._console_line(fields, now)
        if self.settings.format is LogFormat.json:
            return line + "\n"
        return self._stamp(now, self._file >= 0) + " " + line + "\n"

    def _stamp(self, now: float, dated: bool) -> str:
        """A text line's time: log_timestamp_format's, else ISO 8601 (a terminal's: the time of day only)."""
        fmt = self.settings.timestamp_format
        if fmt is None:
            fmt = "%Y-%m-%dT%H:%M:%S" if dated else "%H:%M:%S"
        return time.strftime(fmt, time.localtime(now))

    def _write(self, text: str) -> None:
        """`text` (a line, or "" to say only what was lost) to the file or standard error (LineWriter: a line that
        cannot be written is dropped and counted, never raised: a log must not stop or hold up the broker; mosquitto
        ignores its log's write errors alike)."""
        error = self._out.write(text, self._lost_line)
        if error is not None and text and self.lost.unsaid == 1 and self._file >= 0:
            # Once an episode, where an operator may look.
            write_all(
                self._stderr,
                f"mqtt serve: cannot write the log file {self.settings.file}: {error}; its "
                "lines are dropped until it can be written again\n".encode("utf-8", "backslashreplace"),
            )

    def _lost_line(self, n: int, reason: str) -> str:
        now = time.time()
        fields = {"event": "log", "detail": f"{n} line{'s' if n != 1 else ''} could not be written ({reason})"}
        return self._shown(fields, self._plain(LogLevel.warning, fields, now), now)

    def _console_line(self, fields: dict[str, Any], now: float) -> str:
        """A terminal's line, in colours: rendered here, written as any other line."""
        from rich.text import Text

        kind = fields["event"]
        line = Text(self._stamp(now, False) + " ", style="dim")
        line.append(f"{kind:<12}", style=_STYLES.get(kind, ""))
        if "peer" in fields:
            client_id = fields["client_id"]
            line.append(f" {client_id if client_id is not None else '-'}", style="bold")
            line.append(f" {fields['peer']}")
        if fields.get("detail"):
            line.append(f" {fields['detail']}")
        if fields.get("reason_code") is not None:
            line.append(f" (0x{fields['reason_code']:02X})", style=_STYLES.get(kind, ""))
        with self._console.capture() as captured:
            self._console.print(line, soft_wrap=True)
        return str(captured.get())


def write_all(fd: int, data: bytes) -> tuple[int, str | None]:
    """`data` in as many write(2) as `fd` takes: the bytes written, and why the rest was not (None: all went)."""
    done = 0
    try:
        while done < len(data):
            n = os.write(fd, data[done:])
            if n == 0:  # no error and no progress (a device's way to say full): as good as one
                return done, "nothing written"
            done += n
    except OSError as exc:
        return done, exc.strerror or str(exc)
    return done, None


def stderr_descriptor(stream: TextIO | None = None) -> int:
    """The descriptor of `stream` (standard error by default), -1 without one (its lines are then counted as lost)."""
    try:
        return (stream or sys.stderr).fileno()
    except (AttributeError, OSError, ValueError):  # None, closed, or not a file
        return -1


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(32), 127)}


def _text(fields: dict[str, Any]) -> str:
    """One line; control characters a client put in its identifier or topic are escaped (no forged lines)."""
    parts = [f"{fields['event']:<12}"]
    if "peer" in fields:
        client_id = fields["client_id"]
        parts.append(f"{client_id.translate(_CONTROL) if client_id is not None else '-'} {fields['peer']}")
    if fields.get("detail"):
        parts.append(str(fields["detail"]).translate(_CONTROL))
    if fields.get("reason_code") is not None:
        parts.append(f"(0x{fields['reason_code']:02X})")
    return " ".join(parts)
