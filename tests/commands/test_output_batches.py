"""`mqtt sub`'s output: a read's messages written at once (Printer.write: one join, one write) give the same
bytes as the general path, each message rendered on its own (Printer.render, format_message), in every output
form; the PUBACK-first, list-a-read delivery of net.client gives the same items one at a time and in batches."""

from __future__ import annotations

import io
import json
import re

import pytest
import trio

from mqtt_cli.commands._output import FormatError, Printer, compile_format, format_message
from mqtt_cli.core.events import PongReceived
from mqtt_cli.core.packets import Publish
from mqtt_cli.core.properties import Properties
from mqtt_cli.net.client import MessageStream

from ..brokers import Broker
from .conftest import Mqtt
from .test_pub_sub import at

NOW = 1_795_000_000.123456

PROPS = Properties(
    content_type="text/plain",
    correlation_data=b"abc\0def",
    message_expiry_interval=60,
    payload_format_indicator=1,
    response_topic="re/ply",
    user_properties=[("k", "v"), ("k", "w")],
    subscription_identifiers=[3, 7],
)
MESSAGES = [
    Publish("a/b", b"hello", 0),
    Publish("a/b", b"", 1, False, False, 17),
    Publish("caf\u00e9/\u00fc", "gr\u00fc\u00dfe".encode(), 2, True, False, 65535),
    Publish("bin", bytes(range(256)), 1, False, False, 2),
    Publish("j", b'{"a": [1, 2.5, true, null], "b": {"c": "d"}}', 1, False, False, 3),
    Publish("j", b"[1,2]", 0, True),
    Publish("p", b"with properties", 1, False, False, 4, PROPS),
    Publish("nl", b"line\nbreak\r\n", 0),
]
NOT_JSON = Publish("j", b"not json", 0)

FORMATS = [
    "%t %p",
    "%p",
    r"%t|%p|%q|%r|%m|%i|%l|%x|%X|%%|\t|\n|\\|\e|%5l|%-5q|%10.3t|%-6.2p|@@",
    "%I %U @Y-@m-@d @H:@M:@S",
    "%j",
    "%J",
    "%A|%C|%D|%E|%F|%P|%R|%S",
    "plain text only",
    "",
]


def write(printer: Printer, messages: list[Publish], warn: object = None) -> bytes:
    out = io.BytesIO()
    printer.out = out
    printer.write(messages, NOW, warn)  # type: ignore[arg-type]
    return out.getvalue()


def one_at_a_time(printer: Printer, messages: list[Publish]) -> bytes:
    out = io.BytesIO()
    printer.out = out
    for p in messages:
        printer(p, NOW)
    return out.getvalue()


CASES = [
    *(("payload", None, form) for form in ("text", "hex", "base64", "json")),
    *(("verbose", None, form) for form in ("text", "hex", "base64", "json")),
    *(("format", fmt, "text") for fmt in FORMATS if fmt != "%J"),
    ("json", None, "text"),
]


@pytest.mark.parametrize("newline", [True, False])
@pytest.mark.parametrize(("mode", "fmt", "form"), CASES)
def test_a_batch_writes_what_each_message_writes(mode: str, fmt: str | None, form: str, newline: bool) -> None:
    printer = Printer(mode, fmt, newline, io.BytesIO(), form)
    batch = write(printer, MESSAGES)
    assert batch == one_at_a_time(printer, MESSAGES)
    assert batch == b"".join(printer.render(p, NOW) for p in MESSAGES)
    if mode == "format":
        assert fmt is not None
        end = b"\n" if newline else b""
        assert batch == b"".join(format_message(fmt, p, NOW) + end for p in MESSAGES)
    if mode == "payload" and form == "text":  # the join fast path, against the plain definition
        assert batch == b"".join(p.payload + (b"\n" if newline else b"") for p in MESSAGES)
    assert batch == b"".join(reference(mode, fmt, form, newline, p) for p in MESSAGES)
    if mode == "verbose" and form == "text" and newline:
        assert batch.split(b"\n")[1] == b"a/b (null)"  # mosquitto_sub -v's empty payload
    if mode == "json":
        assert [json.loads(line)["topic"] for line in batch.splitlines()] == [p.topic for p in MESSAGES]


def reference(mode: str, fmt: str | None, form: str, newline: bool, p: Publish) -> bytes:
    """One message as each output form defines it, written out plainly (the general path)."""
    from mqtt_cli.commands._json import message_to_json
    from mqtt_cli.commands._payload import PayloadFormat, encode_payload

    end = b"\n" if newline else b""
    payload = encode_payload(p.payload, PayloadFormat(form), False)
    if mode == "payload":
        return payload + end
    if mode == "verbose":
        return p.topic.encode() + b" " + (payload or b"(null)") + end
    if mode == "format":
        assert fmt is not None
        return format_message(fmt, p, NOW) + end
    return message_to_json(p, NOW).encode() + b"\n"


def test_a_message_that_cannot_be_written_is_warned_about_in_its_place() -> None:
    """%J of a payload that is not JSON: the others are written, in order, what came before it first."""
    printer = Printer("format", "%J", True, io.BytesIO())
    good = [p for p in MESSAGES if p.topic == "j"]
    warned: list[str] = []
    out = io.BytesIO()
    printer.out = out
    order: list[bytes] = []

    def warn(err: FormatError) -> None:
        warned.append(str(err))
        order.append(out.getvalue())

    printer.write([good[0], NOT_JSON, good[1]], NOW, warn)
    expected = [printer.render(p, NOW) for p in good]
    assert warned == ["message payload is not valid JSON on topic j"]
    assert order == [expected[0]]  # written before the warning
    assert out.getvalue() == b"".join(expected)
    with pytest.raises(FormatError):
        printer.write([NOT_JSON], NOW)  # no warn: the caller hears of it


@pytest.mark.parametrize(
    ("fmt", "error"),
    [
        ("%", "a % at the end"),
        ("%z", "unknown field %z"),
        ("%1-2t", "bad field width %1-2t"),
        ("@", "an @ at the end"),
        ("\\q", "unknown escape \\q"),
        ("ok %t then %Z", "unknown field %Z"),
    ],
)
def test_a_bad_format_is_refused_when_compiled(fmt: str, error: str) -> None:
    with pytest.raises(FormatError, match=re.escape(error)):
        compile_format(fmt)


def test_rich_verbose_one_text_per_read_prints_what_one_print_per_message_prints() -> None:
    """-v on a terminal: the read's messages in one rich Text, against one console.print per message."""
    from rich.console import Console
    from rich.text import Text

    def console() -> tuple[Console, io.StringIO]:
        sink = io.StringIO()
        return Console(file=sink, force_terminal=True, color_system="standard", highlight=False, soft_wrap=True), sink

    for newline in (True, False):
        printer = Printer("verbose", None, newline, io.BytesIO())
        printer.console, batched = console()
        printer.write(MESSAGES, NOW)
        each, single = console()
        for p in MESSAGES:  # the general path: what Printer did per message
            text = Text(p.topic, style="bold cyan")
            text.append(" " + (p.payload.decode("utf-8", "replace") if p.payload else "(null)"))
            each.print(text, end="\n" if newline else "")
        assert batched.getvalue() == single.getvalue()
        assert "\x1b[" in batched.getvalue()  # coloured


def test_message_stream_gives_the_same_items_one_at_a_time_and_in_batches() -> None:
    reads: list[list[Publish] | PongReceived] = [MESSAGES[:3], [MESSAGES[3]], PongReceived(), MESSAGES[4:]]

    async def collect(mode: str) -> list[object]:
        send, receive = trio.open_memory_channel[list[Publish] | PongReceived](10)
        stream = MessageStream(receive)
        for item in reads:
            send.send_nowait(item)
        await send.aclose()
        got: list[object] = []
        with trio.fail_after(5):
            if mode == "each":
                got = [item async for item in stream]
            elif mode == "batches":
                while True:
                    try:
                        batch = await stream.receive_batch()
                    except trio.EndOfChannel:
                        break
                    got += batch if isinstance(batch, list) else [batch]
            else:  # mixed: a batch after part of a read was taken one at a time gives the rest of that read
                got.append(await stream.receive())
                rest = await stream.receive_batch()
                assert rest == MESSAGES[1:3]
                got += rest
                got += [item async for item in stream]
        return got

    expected = [*MESSAGES[:4], PongReceived(), *MESSAGES[4:]]
    for mode in ("each", "batches", "mixed"):
        assert trio.run(collect, mode) == expected, mode


@pytest.mark.parametrize("form", [[], ["-v"], ["-F", r"%t|%p|%q|%r|%l|%x"], ["-N", "-v"]])
def test_sub_prints_a_queued_burst_the_same_on_both_paths(mqtt: Mqtt, mosquitto: Broker, topic: str,
                                                          form: list[str]) -> None:  # fmt: skip
    """300 QoS 1 messages waiting in a session arrive many to a read: `sub -C` on the one-shot fast path (blocking
    client) and on trio (`--stats` sends it there) print them alike, and as each message alone would be printed."""
    lines = [b"line %d" % i for i in range(299)] + [b""]  # an empty payload last: (null) with -v
    expected = b""
    for path in ("fast", "trio"):
        name = f"{topic}-{path}"
        assert mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "-q", "1", "-c", "-i", name, "-E").returncode == 0
        sent = mqtt("pub", *at(mosquitto), "-t", f"{topic}/x", "-q", "1", "-l", input=b"\n".join(lines) + b"\n")
        assert sent.returncode == 0, sent.stderr
        extra = ["--stats"] if path == "trio" else []
        out = mqtt("sub", *at(mosquitto), "-t", f"{topic}/#", "-q", "1", "-c", "-i", name, "-C", "300", "-W", "60",
                   *form, *extra)  # fmt: skip
        assert out.returncode == 0, out.stderr
        if path == "trio":
            assert "300 messages received" in out.stderr
            assert out.stdout == expected
        else:
            printer = Printer("format" if "-F" in form else "verbose" if "-v" in form else "payload",
                              form[1] if "-F" in form else None, "-N" not in form, io.BytesIO())  # fmt: skip
            each = [Publish(f"{topic}/x", payload, 1, False, False, 1) for payload in lines]
            expected = b"".join(printer.render(p, NOW) for p in each)
            assert out.stdout == expected
