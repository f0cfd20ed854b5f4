"""The broker's log: text or JSON lines to standard error or a file, and to syslog; reopened for logrotate.

Writes are synchronous and small (one line per event); a file is opened in append mode, line-buffered, so
`logrotate` can move it away and SIGUSR2 (`reopen`) starts a new one. Syslog gets the same line through a
unix datagram socket (RFC 3164 framing, as syslog(3) sends it to /dev/log); a syslog that is not there or
full loses the line, never blocks the broker.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from typing import Any, TextIO

from mqtt_cli.core.broker import Notice
from mqtt_cli.core.config import LogFormat, LogLevel, LogSettings

__all__ = ["BrokerLog", "LogError", "notice_level"]

_FACILITIES = {"user": 1, "daemon": 3, **{f"local{i}": 16 + i for i in range(8)}}
_SEVERITY = {LogLevel.debug: 7, LogLevel.info: 6, LogLevel.warning: 4, LogLevel.error: 3}
_STYLES = {"connected": "green", "disconnected": "dim", "refused": "yellow", "error": "red", "reload": "cyan"}


class LogError(Exception):
    """The log file cannot be opened (one line)."""


def notice_level(kind: str) -> LogLevel:
    """Connections coming and going are information; everything else a client caused is a warning."""
    return LogLevel.info if kind in ("connected", "disconnected") else LogLevel.warning


class BrokerLog:
    def __init__(self, settings: LogSettings, stderr: TextIO | None = None) -> None:
        self.settings = settings
        self._stderr = stderr or sys.stderr
        self._file: TextIO | None = None
        self._syslog: socket.socket | None = None
        self._console: Any = None
        self._open(settings)

    def _open(self, settings: LogSettings) -> None:
        file = None
        if settings.file is not None:
            try:
                file = open(settings.file, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - kept open
            except OSError as exc:
                raise LogError(f"cannot open the log file {settings.file}: {exc.strerror or exc}") from None
        sock = None
        if settings.syslog:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
        self.close()
        self.settings, self._file, self._syslog = settings, file, sock
        self._console = None
        if file is None and settings.format is LogFormat.text and self._stderr.isatty():
            from rich.console import Console

            self._console = Console(file=self._stderr, highlight=False)

    def reconfigure(self, settings: LogSettings) -> None:
        """A reload's [log]: the new file is opened before the old one is closed (LogError: nothing changed)."""
        if settings != self.settings:
            self._open(settings)

    def reopen(self) -> None:
        """SIGUSR2: the file was moved away (logrotate); open a new one at the same path."""
        if self.settings.file is not None:
            self._open(self.settings)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._syslog is not None:
            self._syslog.close()
            self._syslog = None

    def wants(self, level: LogLevel) -> bool:
        return level is not LogLevel.none and level.rank >= self.settings.level.rank

    def notice(self, n: Notice) -> None:
        level = notice_level(n.kind)
        if not self.wants(level):
            return
        fields: dict[str, Any] = {"event": n.kind, "client_id": n.client_id, "peer": n.peer}
        if n.detail:
            fields["detail"] = n.detail
        if n.reason_code is not None:
            fields["reason_code"] = n.reason_code
        self._emit(level, fields)

    def message(self, level: LogLevel, event: str, detail: str) -> None:
        """A line about the broker itself (listening, reload, ...)."""
        if self.wants(level):
            self._emit(level, {"event": event, "detail": detail})

    def _emit(self, level: LogLevel, fields: dict[str, Any]) -> None:
        now = time.time()
        if self.settings.format is LogFormat.json:
            line = json.dumps({"ts": round(now, 6), "level": level.value, **fields})
        else:
            line = _text(fields)
        if self._file is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
            self._file.write(f"{stamp} {line}\n" if self.settings.format is LogFormat.text else line + "\n")
        elif self._console is not None:
            self._rich(fields)
        else:
            stamp = time.strftime("%H:%M:%S ", time.localtime(now))
            print(stamp + line if self.settings.format is LogFormat.text else line, file=self._stderr, flush=True)
        if self._syslog is not None:
            priority = _FACILITIES[self.settings.syslog_facility] * 8 + _SEVERITY[level]
            data = f"<{priority}>{time.strftime('%b %d %H:%M:%S', time.localtime(now))} mqtt-serve[{os.getpid()}]: "
            with contextlib.suppress(OSError):  # no syslog, or its queue full: the line is lost, the broker goes on
                self._syslog.sendto((data + line).encode("utf-8", "replace"), self.settings.syslog_address)

    def _rich(self, fields: dict[str, Any]) -> None:
        from rich.text import Text

        kind = fields["event"]
        line = Text(time.strftime("%H:%M:%S "), style="dim")
        line.append(f"{kind:<12}", style=_STYLES.get(kind, ""))
        if "peer" in fields:
            client_id = fields["client_id"]
            line.append(f" {client_id if client_id is not None else '-'}", style="bold")
            line.append(f" {fields['peer']}")
        if fields.get("detail"):
            line.append(f" {fields['detail']}")
        if fields.get("reason_code") is not None:
            line.append(f" (0x{fields['reason_code']:02X})", style=_STYLES.get(kind, ""))
        self._console.print(line, soft_wrap=True)


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
