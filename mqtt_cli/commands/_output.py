"""How `mqtt sub` and `mqtt rr` print a message: payload (--format text, hex, base64, json), -v, -F format strings,
--json.

Bytes go to standard output as they are (binary payloads intact), straight to the descriptor with one write(2)
for the messages of one read (`Printer.write`; more if the descriptor takes less), so a pipe sees every message
as soon as it arrived, at a cost per read rather than per message. On a terminal, -v colours the topic with
rich; piped output has no colour.

An output that cannot be written (a full disk, a file-size limit, a terminal gone) raises OutputFailed: one line
and exit 1, as cat and tee do; a closed pipe stays a BrokenPipeError, which ends the command quietly with 0.

json and datetime are imported where a form needs them: a one-shot `mqtt sub -C 1` printing payloads does not.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from mqtt_cli.core.packets import Publish
from mqtt_cli.core.properties import Properties
from mqtt_cli.exit_codes import EXIT_OUTPUT_FAILED
from mqtt_cli.net.errors import ClientError

__all__ = [
    "FormatError", "OutputFailed", "Printer", "check_format", "compile_format", "format_message", "output_failed"
]  # fmt: skip

_ESCAPES = {"\\": b"\\", "0": b"\0", "a": b"\a", "e": b"\x1b", "n": b"\n", "r": b"\r", "t": b"\t", "v": b"\v"}
_FIELDS = "%AtpqrmiICDEFlPRSxXjJU"


class FormatError(ValueError):
    pass


class OutputFailed(ClientError):
    """Standard output or --output FILE cannot be written (not a closed pipe: see the module's docstring)."""

    exit_code = EXIT_OUTPUT_FAILED


#: What to do about an output error, for the common ones.
_REMEDIES = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space within the quota",
    errno.EFBIG: "the file-size limit (ulimit -f) is reached: raise it or write elsewhere",
}


def check_format(fmt: str) -> None:
    """Raises FormatError for an unknown %, @ or \\ sequence, before anything is received."""
    compile_format(fmt)


# The time fields are formatted once for the messages of a read, which share their receive time.
@functools.lru_cache(maxsize=8)
def _iso(now: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(now).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")


#: The PUBLISH properties mosquitto_sub 2.0 prints in %j/%J, under libmosquitto's names (user properties are
#: gathered in one "user-properties" object where the first one is).
_MOSQUITTO_NAMES = {0x01: "payload-format-indicator", 0x02: "message-expiry-interval", 0x03: "content-type",
                    0x08: "response-topic", 0x09: "correlation-data", 0x0B: "subscription-identifier",
                    0x23: "topic-alias"}  # fmt: skip
_USER_PROPERTY = 0x26


def _dumps(value: Any) -> str:
    import json

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


@functools.lru_cache(maxsize=8)
def _tst(now: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(now).astimezone().strftime("%Y-%m-%dT%H:%M:%S.%f%z")


def _json_helper(p: Publish, now: float, raw_payload: bool) -> bytes:
    tst = _tst(now)
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
        import json

        try:
            parsed = json.loads(p.payload, object_pairs_hook=_Members)
        except ValueError:
            raise FormatError(f"message payload is not valid JSON on topic {p.topic}") from None
        return (head + f',"payload":{_cjson(parsed)}}}').encode()
    return (head + f',"payload":{_dumps(p.payload.decode("utf-8", "replace"))}}}').encode()


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
    return compile_format(fmt)(p, now)


_Field = Callable[[Publish, float], bytes]


def _optional(value: object) -> bytes:
    return str(value).encode() if value is not None else b""


#: What each -F field writes.
_FIELD_VALUES: dict[str, _Field] = {
    "%": lambda p, now: b"%",
    "t": lambda p, now: p.topic.encode(),
    "p": lambda p, now: p.payload,
    "q": lambda p, now: str(p.qos).encode(),
    "r": lambda p, now: b"1" if p.retain else b"0",
    "m": lambda p, now: str(p.packet_id or 0).encode(),
    "i": lambda p, now: str(p.packet_id or 0).encode(),
    "l": lambda p, now: str(len(p.payload)).encode(),
    "x": lambda p, now: p.payload.hex().encode(),
    "X": lambda p, now: p.payload.hex().upper().encode(),
    "I": lambda p, now: _iso(now).encode(),
    "U": lambda p, now: f"{now:.9f}".encode(),
    "j": lambda p, now: _json_helper(p, now, False),
    "J": lambda p, now: _json_helper(p, now, True),
    "A": lambda p, now: _optional(p.properties.topic_alias),
    "C": lambda p, now: (p.properties.content_type or "").encode(),
    "D": lambda p, now: p.properties.correlation_data or b"",
    "E": lambda p, now: _optional(p.properties.message_expiry_interval),
    "F": lambda p, now: _optional(p.properties.payload_format_indicator),
    "P": lambda p, now: b" ".join(f"{k}:{v}".encode() for k, v in p.properties.user_properties),
    "R": lambda p, now: (p.properties.response_topic or "").encode(),
    "S": lambda p, now: b",".join(str(s).encode() for s in p.properties.subscription_identifiers),
}


def _padded(field: _Field, width: str) -> _Field:
    return lambda p, now: _pad(field(p, now), width)


def _strftime(fmt: str, code: str) -> _Field:
    import datetime

    def field(p: Publish, now: float) -> bytes:
        try:
            return datetime.datetime.fromtimestamp(now).strftime("%" + code).encode()
        except ValueError:
            raise FormatError(f"-F {fmt!r}: unknown time field @{code}") from None

    field(Publish("check", b"", 0), 0.0)  # an unknown field is a usage error, before anything is received
    return field


@functools.lru_cache(maxsize=64)
def compile_format(fmt: str) -> Callable[[Publish, float], bytes]:
    """-F `fmt` (see format_message) parsed once: a function writing one message (raises FormatError for a %J
    payload that is not JSON). Raises FormatError for an unknown %, @ or \\ sequence."""
    parts: list[bytes | _Field] = []
    i = 0
    n = len(fmt)
    while i < n:
        c = fmt[i]
        if c == "%":
            j = i + 1
            while j < n and (fmt[j].isdigit() or fmt[j] in "-."):
                j += 1
            if j >= n:
                raise FormatError(f"-F {fmt!r}: a % at the end")
            width, code = fmt[i + 1 : j], fmt[j]
            if not re.fullmatch(r"-?\d*(\.\d+)?", width):  # (compiled when -F is used, and cached by re)
                raise FormatError(
                    f"-F {fmt!r}: bad field width %{width}{code}: use %10{code}, %-10{code} or %10.5{code}"
                )
            i = j + 1
            field = _FIELD_VALUES.get(code)
            if field is None:
                raise FormatError(f"-F {fmt!r}: unknown field %{code} (known: %{' %'.join(_FIELDS)})")
            if code == "%":
                parts.append(_pad(b"%", width))
            else:
                parts.append(_padded(field, width) if width else field)
        elif c == "@":
            if i + 1 >= n:
                raise FormatError(f"-F {fmt!r}: an @ at the end")
            code = fmt[i + 1]
            i += 2
            parts.append(b"@" if code == "@" else _strftime(fmt, code))
        elif c == "\\":
            if i + 1 >= n or fmt[i + 1] not in _ESCAPES:
                raise FormatError(f"-F {fmt!r}: unknown escape \\{fmt[i + 1 : i + 2]}")
            parts.append(_ESCAPES[fmt[i + 1]])
            i += 2
        else:
            j = i
            while j < n and fmt[j] not in "%@\\":
                j += 1
            parts.append(fmt[i:j].encode())
            i = j
    # Adjacent constants joined: the function then does the least per message.
    merged: list[bytes | _Field] = []
    for part in parts:
        if type(part) is bytes and merged and type(merged[-1]) is bytes:
            merged[-1] += part  # type: ignore[operator]
        else:
            merged.append(part)
    if not merged:
        return lambda p, now: b""
    if len(merged) == 1:
        only = merged[0]
        return only if not isinstance(only, bytes) else lambda p, now: only
    fields = tuple(merged)
    return lambda p, now: b"".join([f if type(f) is bytes else f(p, now) for f in fields])  # type: ignore[operator, misc]


def output_failed(exc: OSError, out: BinaryIO, where: str, lost: str) -> OutputFailed:
    """The error for a write to `out` (`where`: "standard output") that failed, saying what was `lost`; `out` is
    set aside (/dev/null on its descriptor): what Python still buffers for it would fail again when it is closed
    or at exit (exit code 120 and a second complaint)."""
    with contextlib.suppress(OSError, ValueError):  # no descriptor (a stream of a test), or closed
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, out.fileno())
        os.close(devnull)
    name = errno.errorcode.get(exc.errno or 0)
    why = f"{exc.strerror or exc}" + (f" ({name})" if name else "")
    remedy = _REMEDIES.get(exc.errno or 0, "check where the output goes")
    return OutputFailed(f"cannot write {where}: {why}; {lost}: {remedy}")


class Printer:
    """Writes messages in one of the output forms; `mode`: payload, verbose (topic first), format (-F), json
    (--json); `form`: how the payload is written in payload and verbose modes (sub --format).

    `write()` takes the messages of one read and writes them with one write(2); `__call__` one message.
    """

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
        self.where = "standard output" if stream is None else f"--output {getattr(stream, 'name', 'FILE')}"
        try:
            self.out.flush()  # nothing of Python's left to come after ours: the bytes go straight to the descriptor
            self.fd = self.out.fileno()
        except (OSError, ValueError, AttributeError):  # not a file (a test's stream), or closed
            self.fd = -1
        self.console: Any = None
        self.pretty = stream is None  # a file gets one message per line
        if mode == "verbose" and form == "text" and stream is None and sys.stdout.isatty():
            from rich.console import Console

            self.console = Console(highlight=False, soft_wrap=True)
        self._topics: dict[str, bytes] = {}  # -v: topic -> its encoded prefix
        self.render = self._renderer()

    def _payload(self, p: Publish) -> bytes:
        if self.form == "text":
            return p.payload
        from ._payload import PayloadFormat, encode_payload

        return encode_payload(p.payload, PayloadFormat(self.form), self.pretty)

    def _renderer(self) -> Callable[[Publish, float], bytes]:
        """The function writing one message as bytes (rich's coloured -v aside), chosen once."""
        mode, end = self.mode, self.end
        if mode == "payload":
            if self.form == "text":
                return lambda p, now: p.payload + end
            payload = self._payload
            return lambda p, now: payload(p) + end
        if mode == "verbose":
            topics = self._topics
            payload = self._payload

            def verbose(p: Publish, now: float) -> bytes:
                prefix = topics.get(p.topic)
                if prefix is None:
                    if len(topics) >= 4096:
                        topics.clear()
                    prefix = topics[p.topic] = p.topic.encode() + b" "
                # an empty payload shows as "(null)", as with mosquitto_sub -v
                return prefix + (payload(p) or b"(null)") + end

            return verbose
        if mode == "format":
            assert self.fmt is not None
            fmt = compile_format(self.fmt)
            return lambda p, now: fmt(p, now) + end
        from ._json import message_to_json

        return lambda p, now: message_to_json(p, now).encode() + b"\n"

    def write(self, messages: list[Publish], now: float, warn: Callable[[FormatError], None] | None = None) -> None:
        """Writes `messages` (received at `now`) with one write(2). A message that cannot be written
        (FormatError: -F %J of a payload that is not JSON) goes to `warn`, the others are written in order;
        without `warn` the error is raised."""
        if not messages:
            return
        try:
            if self.console is not None:
                self._print_rich(messages)
                return
            if self.mode == "payload" and self.form == "text":
                end = self.end
                data = end.join([p.payload for p in messages]) + end
            else:
                render = self.render
                try:
                    data = b"".join([render(p, now) for p in messages])
                except FormatError:
                    if warn is None:
                        raise
                    data = self._write_each(messages, now, warn)
            self._put(data)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc, len(messages)) from None

    def _put(self, data: bytes) -> None:
        """`data` in as many write(2) as the descriptor takes: a BufferedWriter reports a write cut short by a
        file-size limit as a success (the rest kept, to fail later); a stream without one (tests) as it is."""
        fd = self.fd
        if fd < 0:
            self.out.write(data)
            self.out.flush()
            return
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            if n == 0:  # no error and no progress: as good as one
                raise OSError(errno.EIO, "the output took nothing")
            view = view[n:]

    def _failed(self, exc: OSError, count: int) -> OutputFailed:
        lost = f"{count} message{'s' if count != 1 else ''} lost, nothing more received"
        return output_failed(exc, self.out, self.where, lost)

    def _write_each(self, messages: list[Publish], now: float, warn: Callable[[FormatError], None]) -> bytes:
        """write() when a message fails: what comes before a failure is written before its warning."""
        render = self.render
        chunk: list[bytes] = []
        for p in messages:
            try:
                chunk.append(render(p, now))
            except FormatError as err:
                if chunk:
                    self._put(b"".join(chunk))
                    chunk = []
                warn(err)
        return b"".join(chunk)

    def _print_rich(self, messages: list[Publish]) -> None:
        """-v on a terminal: the topic coloured by rich; one Text for the whole read."""
        from rich.text import Text

        end = self.end.decode()
        # -N: one print per message, or rich would join the messages' colours into one (the same on the screen,
        # other bytes).
        for chunk in [messages] if end else [[p] for p in messages]:
            text = Text()
            for p in chunk:  # the whole message styled, as Text(topic, style) styles what is appended to it
                line = p.topic + " " + (p.payload.decode("utf-8", "replace") if p.payload else "(null)")
                text.append(line, "bold cyan")
                text.append(end)
            self.console.print(text, end="")

    def __call__(self, p: Publish, now: float) -> None:
        self.write([p], now)
