"""How `mqtt sub` and `mqtt rr` print a message: payload (--format text, hex, base64, json), -v, -F format strings,
--json.

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
from mqtt_cli.core.properties import Properties

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


#: The PUBLISH properties mosquitto_sub 2.0 prints in %j/%J, under libmosquitto's names (user properties are
#: gathered in one "user-properties" object where the first one is).
_MOSQUITTO_NAMES = {0x01: "payload-format-indicator", 0x02: "message-expiry-interval", 0x03: "content-type",
                    0x08: "response-topic", 0x09: "correlation-data", 0x0B: "subscription-identifier",
                    0x23: "topic-alias"}  # fmt: skip
_USER_PROPERTY = 0x26


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _mosquitto_properties(props: Properties) -> str:
    """The "properties" object as mosquitto_sub 2.0 writes it with cJSON: members in wire order, a repeated
    property (subscription identifiers, user properties with one name) repeated as a key, correlation data as
    a string (up to its first NUL, as a C string)."""
    members: list[str] = []
    users: list[str] | None = None
    for pid, value in props.items:
        if pid == _USER_PROPERTY:
            if users is None:
                users = []
                members.append("")  # its place: filled in below
                at = len(members) - 1
            users.append(f"{_dumps(value[0])}:{_dumps(value[1])}")
        elif pid in _MOSQUITTO_NAMES:
            if isinstance(value, bytes):
                value = value.split(b"\0", 1)[0].decode("utf-8", "replace")
            members.append(f'"{_MOSQUITTO_NAMES[pid]}":{_dumps(value)}')
    if users is not None:
        members[at] = '"user-properties":{' + ",".join(users) + "}"
    return "{" + ",".join(members) + "}"


class _Members(list):  # type: ignore[type-arg]
    """A JSON object's members in order, repeated names kept (as cJSON keeps them)."""


def _cjson(value: Any) -> str:
    """`value` (parsed JSON) as cJSON_PrintUnformatted prints it: %J re-prints the payload it parsed."""
    if isinstance(value, _Members):
        return "{" + ",".join(f"{_dumps(k)}:{_cjson(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_cjson(v) for v in value) + "]"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return _dumps(value)
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        return "null"
    if number.is_integer() and -(2**31) <= number <= 2**31 - 1:
        return str(int(number))
    text = f"{number:1.15g}"
    return text if float(text) == number else f"{number:1.17g}"


def _json_helper(p: Publish, now: float, raw_payload: bool) -> bytes:
    tst = datetime.datetime.fromtimestamp(now).astimezone().strftime("%Y-%m-%dT%H:%M:%S.%f%z")
    # mosquitto_sub 2.0's fields, in its order, as cJSON prints them (no spaces): payloadlen, mid (QoS 1/2),
    # properties (5.0, when there are any), and "payload": null when empty
    head = (f'{{"tst":{_dumps(tst)},"topic":{_dumps(p.topic)},"qos":{p.qos},"retain":{int(p.retain)},'
            f'"payloadlen":{len(p.payload)}')  # fmt: skip
    if p.qos:
        head += f',"mid":{p.packet_id}'
    if p.properties.items:
        head += f',"properties":{_mosquitto_properties(p.properties)}'
    if not p.payload:
        return (head + ',"payload":null}').encode()
    if raw_payload:
        try:
            parsed = json.loads(p.payload, object_pairs_hook=_Members)
        except ValueError:
            raise FormatError(f"message payload is not valid JSON on topic {p.topic}") from None
        return (head + f',"payload":{_cjson(parsed)}}}').encode()
    return (head + f',"payload":{_dumps(p.payload.decode("utf-8", "replace"))}}}').encode()


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
    """Writes messages in one of the output forms; `mode`: payload, verbose (topic first), format (-F), json
    (--json); `form`: how the payload is written in payload and verbose modes (sub --format)."""

    def __init__(
        self,
        mode: str,
        fmt: str | None = None,
        newline: bool = True,
        stream: BinaryIO | None = None,
        form: str = "text",
    ):
        self.mode = mode
        self.fmt = fmt
        self.form = form
        self.end = b"\n" if newline else b""
        self.out = stream or sys.stdout.buffer
        self.console: Any = None
        self.pretty = stream is None  # a file gets one message per line
        if mode == "verbose" and form == "text" and stream is None and sys.stdout.isatty():
            from rich.console import Console

            self.console = Console(highlight=False, soft_wrap=True)

    def _payload(self, p: Publish) -> bytes:
        if self.form == "text":
            return p.payload
        from ._payload import PayloadFormat, encode_payload

        return encode_payload(p.payload, PayloadFormat(self.form), self.pretty)

    def __call__(self, p: Publish, now: float) -> None:
        mode = self.mode
        if mode == "payload":
            data = self._payload(p) + self.end
        elif mode == "verbose":
            if self.console is not None:
                from rich.text import Text

                text = Text(p.topic, style="bold cyan")
                text.append(" " + (p.payload.decode("utf-8", "replace") if p.payload else "(null)"))
                self.console.print(text, end=self.end.decode())
                return
            # an empty payload shows as "(null)", as with mosquitto_sub -v
            data = p.topic.encode() + b" " + (self._payload(p) or b"(null)") + self.end
        elif mode == "format":
            assert self.fmt is not None
            data = format_message(self.fmt, p, now) + self.end
        else:
            from ._json import message_to_json

            data = message_to_json(p, now).encode() + b"\n"
        self.out.write(data)
        self.out.flush()
