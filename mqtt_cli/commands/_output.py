"""How `mqtt sub` and `mqtt rr` print a message: payload, -v, --hex, -F format strings, --json.

Bytes go to standard output as they are (binary payloads intact), one write and one flush per message, so a
pipe sees every message at once. On a terminal, -v colours the topic with rich; piped output has no colour.
"""

from __future__ import annotations

import datetime
import json
import re
import sys
import time
from typing import Any, BinaryIO

from mqtt_cli.core.packets import Publish

__all__ = ["FormatError", "Printer", "check_format", "format_message"]

_ESCAPES = {"\\": b"\\", "0": b"\0", "a": b"\a", "e": b"\x1b", "n": b"\n", "r": b"\r", "t": b"\t", "v": b"\v"}
_FIELDS = "%AtpqrmiICDEFlPRSxXjJU"


class FormatError(ValueError):
    pass


def check_format(fmt: str) -> None:
    """Raises FormatError for an unknown %, @ or \\ sequence, before anything is received."""
    format_message(fmt, Publish("check", b"{}", 0), time.time())


def _iso(now: float) -> str:
    return datetime.datetime.fromtimestamp(now).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")


def _json_helper(p: Publish, now: float, raw_payload: bool) -> bytes:
    tst = datetime.datetime.fromtimestamp(now).astimezone().strftime("%Y-%m-%dT%H:%M:%S.%f%z")
    # mosquitto_sub 2.0's fields, in its order: payloadlen, mid (QoS 1/2), and "payload": null when empty
    head: dict[str, Any] = {"tst": tst, "topic": p.topic, "qos": p.qos, "retain": int(p.retain),
                            "payloadlen": len(p.payload)}  # fmt: skip
    if p.qos:
        head["mid"] = p.packet_id
    if not p.payload:
        head["payload"] = None
        return json.dumps(head).encode()
    if raw_payload:
        try:
            json.loads(p.payload)
        except ValueError:
            raise FormatError(f"message payload is not valid JSON on topic {p.topic}") from None
        return json.dumps(head)[:-1].encode() + b', "payload":' + p.payload + b"}"
    head["payload"] = p.payload.decode("utf-8", "replace")
    return json.dumps(head).encode()


_WIDTH = re.compile(r"-?\d*(\.\d+)?")


def _pad(value: bytes, width: str) -> bytes:
    if not width:
        return value
    left = width.startswith("-")
    spec = width.lstrip("-")
    minimum, _, maximum = spec.partition(".")
    if maximum:
        value = value[: int(maximum)]
    if minimum:
        value = value.ljust(int(minimum)) if left else value.rjust(int(minimum))
    return value


def format_message(fmt: str, p: Publish, now: float) -> bytes:
    """mosquitto_sub's -F: %t topic, %p payload, %q QoS, %r retain, %m/%i packet id, %l length, %x/%X hex,
    %I ISO time, %U Unix time, %j/%J JSON, %A %C %D %E %F %P %R %S 5.0 properties; @X strftime; \\n escapes;
    a field width like %10t or %-10.10t."""
    out = bytearray()
    i = 0
    n = len(fmt)
    props = p.properties
    while i < n:
        c = fmt[i]
        if c == "%":
            j = i + 1
            while j < n and (fmt[j].isdigit() or fmt[j] in "-."):
                j += 1
            if j >= n:
                raise FormatError(f"-F {fmt!r}: a % at the end")
            width, code = fmt[i + 1 : j], fmt[j]
            if not _WIDTH.fullmatch(width):
                raise FormatError(
                    f"-F {fmt!r}: bad field width %{width}{code}: use %10{code}, %-10{code} or %10.5{code}"
                )
            i = j + 1
            value: Any
            if code == "%":
                value = b"%"
            elif code == "t":
                value = p.topic.encode()
            elif code == "p":
                value = p.payload
            elif code == "q":
                value = str(p.qos).encode()
            elif code == "r":
                value = b"1" if p.retain else b"0"
            elif code in "mi":
                value = str(p.packet_id or 0).encode()
            elif code == "l":
                value = str(len(p.payload)).encode()
            elif code == "x":
                value = p.payload.hex().encode()
            elif code == "X":
                value = p.payload.hex().upper().encode()
            elif code == "I":
                value = _iso(now).encode()
            elif code == "U":
                value = f"{now:.9f}".encode()
            elif code == "j":
                value = _json_helper(p, now, False)
            elif code == "J":
                value = _json_helper(p, now, True)
            elif code == "A":
                value = str(props.topic_alias).encode() if props.topic_alias is not None else b""
            elif code == "C":
                value = (props.content_type or "").encode()
            elif code == "D":
                value = props.correlation_data or b""
            elif code == "E":
                value = (
                    str(props.message_expiry_interval).encode() if props.message_expiry_interval is not None else b""
                )
            elif code == "F":
                value = (
                    str(props.payload_format_indicator).encode() if props.payload_format_indicator is not None else b""
                )
            elif code == "P":
                value = b" ".join(f"{k}:{v}".encode() for k, v in props.user_properties)
            elif code == "R":
                value = (props.response_topic or "").encode()
            elif code == "S":
                value = b",".join(str(s).encode() for s in props.subscription_identifiers)
            else:
                raise FormatError(f"-F {fmt!r}: unknown field %{code} (known: %{' %'.join(_FIELDS)})")
            out += _pad(value, width)
        elif c == "@":
            if i + 1 >= n:
                raise FormatError(f"-F {fmt!r}: an @ at the end")
            code = fmt[i + 1]
            i += 2
            if code == "@":
                out += b"@"
            else:
                try:
                    out += datetime.datetime.fromtimestamp(now).strftime("%" + code).encode()
                except ValueError:
                    raise FormatError(f"-F {fmt!r}: unknown time field @{code}") from None
        elif c == "\\":
            if i + 1 >= n or fmt[i + 1] not in _ESCAPES:
                raise FormatError(f"-F {fmt!r}: unknown escape \\{fmt[i + 1 : i + 2]}")
            out += _ESCAPES[fmt[i + 1]]
            i += 2
        else:
            j = i
            while j < n and fmt[j] not in "%@\\":
                j += 1
            out += fmt[i:j].encode()
            i = j
    return bytes(out)


class Printer:
    """Writes messages in one of the output forms; `mode`: payload, verbose, hex, format, json."""

    def __init__(self, mode: str, fmt: str | None = None, newline: bool = True, stream: BinaryIO | None = None):
        self.mode = mode
        self.fmt = fmt
        self.end = b"\n" if newline else b""
        self.out = stream or sys.stdout.buffer
        self.console: Any = None
        if mode == "verbose" and stream is None and sys.stdout.isatty():
            from rich.console import Console

            self.console = Console(highlight=False, soft_wrap=True)

    def __call__(self, p: Publish, now: float) -> None:
        mode = self.mode
        if mode == "payload":
            data = p.payload + self.end
        elif mode == "verbose":
            if self.console is not None:
                from rich.text import Text

                text = Text(p.topic, style="bold cyan")
                text.append(" " + (p.payload.decode("utf-8", "replace") if p.payload else "(null)"))
                self.console.print(text, end=self.end.decode())
                return
            # an empty payload shows as "(null)", as with mosquitto_sub -v
            data = p.topic.encode() + b" " + (p.payload or b"(null)") + self.end
        elif mode == "hex":
            data = p.payload.hex().encode() + self.end
        elif mode == "verbose-hex":
            data = p.topic.encode() + b" " + p.payload.hex().encode() + self.end
        elif mode == "format":
            assert self.fmt is not None
            data = format_message(self.fmt, p, now) + self.end
        else:
            from ._json import message_to_json

            data = message_to_json(p, now).encode() + b"\n"
        self.out.write(data)
        self.out.flush()
