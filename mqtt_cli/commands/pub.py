"""``mqtt pub``: publish one message, a file, standard input, or one message per line, and say whether every
message was acknowledged (exit 0 only then).

No `from __future__ import annotations` in command modules: typer would evaluate every string annotation
at start-up (about 1 ms per option).
"""

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import _options as o
from . import fail

if TYPE_CHECKING:
    from mqtt_cli.core.properties import Properties
    from mqtt_cli.net.client import Client

MSG = "Message"
V5 = "MQTT 5.0 message properties"


@o.with_connection
def pub(
    ctx: typer.Context,
    topic: Annotated[
        str | None, typer.Option("-t", "--topic", help="Topic to publish to.", rich_help_panel=MSG)
    ] = None,
    message: Annotated[str | None, typer.Option("-m", "--message", help="The message.", rich_help_panel=MSG)] = None,
    file: Annotated[
        Path | None,
        typer.Option("-f", "--file", help="Send this file as one message (bytes as they are).", rich_help_panel=MSG),
    ] = None,
    stdin_file: Annotated[
        bool, typer.Option("-s", "--stdin-file", help="Send all of standard input as one message.", rich_help_panel=MSG)
    ] = False,
    stdin_line: Annotated[
        bool,
        typer.Option(
            "-l",
            "--stdin-line",
            rich_help_panel=MSG,
            help="One message per line of standard input, on one connection; waits for every acknowledgement.",
        ),
    ] = False,
    null_message: Annotated[
        bool, typer.Option("-n", "--null-message", help="An empty message.", rich_help_panel=MSG)
    ] = False,
    json_lines: Annotated[
        bool,
        typer.Option(
            "--json-lines",
            rich_help_panel=MSG,
            help="Each line of standard input is a message in the JSON form `mqtt sub --json` writes.",
        ),
    ] = False,
    encoding: Annotated[
        str | None,
        typer.Option(
            "--format", metavar="text|hex|base64", rich_help_panel=MSG,
            help="How -m, -f, -s and each -l line give the payload: as it is (text, the default), hex or base64.",
        ),
    ] = None,
    qos: Annotated[
        int | None, typer.Option("-q", "--qos", min=0, max=2, help="QoS (default: 0).", rich_help_panel=MSG)
    ] = None,
    retain: Annotated[bool, typer.Option("-r", "--retain", help="Retain the message.", rich_help_panel=MSG)] = False,
    repeat: Annotated[
        int, typer.Option("--repeat", min=1, help="Publish the message N times.", rich_help_panel=MSG)
    ] = 1,
    repeat_delay: Annotated[
        float, typer.Option("--repeat-delay", min=0, help="Seconds between repeats.", rich_help_panel=MSG)
    ] = 0.0,
    user_property: Annotated[
        list[str] | None, typer.Option("--user-property", help="KEY=VALUE (repeatable).", rich_help_panel=V5)
    ] = None,
    content_type: Annotated[str | None, typer.Option("--content-type", rich_help_panel=V5)] = None,
    response_topic: Annotated[str | None, typer.Option("--response-topic", rich_help_panel=V5)] = None,
    correlation_data: Annotated[str | None, typer.Option("--correlation-data", rich_help_panel=V5)] = None,
    message_expiry: Annotated[
        int | None, typer.Option("--message-expiry", min=0, max=0xFFFFFFFF, help="Seconds.", rich_help_panel=V5)
    ] = None,
    payload_format: Annotated[
        int | None, typer.Option("--payload-format", min=0, max=1, help="0 bytes, 1 UTF-8 text.", rich_help_panel=V5)
    ] = None,
    topic_alias: Annotated[
        int | None, typer.Option("--topic-alias", min=1, max=65535, help="Topic alias to use.", rich_help_panel=V5)
    ] = None,
    d_property: o.DProperty = None,
    *,
    conn: dict[str, Any],
) -> None:
    """Publish messages; exit 0 only when every one was acknowledged at its QoS (QoS 0: written).

    Exit codes: 0 success, 2 bad usage, 3 cannot connect, 4 TLS failure, 5 connection refused, 7 a message was
    refused or not acknowledged, 8 connection lost, 130 interrupted, 143 terminated (docs/exit-codes.md).
    """
    from ._plans import fail_refused, plan_pub, protocol_name, publish_counts

    plan = plan_pub(
        ctx, topic=topic, message=message, file=file, stdin_file=stdin_file, stdin_line=stdin_line,
        null_message=null_message, json_lines=json_lines, encoding=encoding, qos=qos, retain=retain, repeat=repeat,
        repeat_delay=repeat_delay, user_property=user_property, content_type=content_type,
        response_topic=response_topic, correlation_data=correlation_data, message_expiry=message_expiry,
        payload_format=payload_format, topic_alias=topic_alias, d_property=d_property, conn=conn,
    )  # fmt: skip
    settings, topic, qos_value, props, payload, form = (
        plan.settings, plan.topic, plan.qos, plan.props, plan.payload, plan.form
    )
    from ._runner import connected, run_client

    async def main() -> int:

        async with connected(settings) as client:  # stops on SIGINT/SIGTERM, then says goodbye
            if props and client.version != 5:
                spoken = protocol_name(client.version)
                fail(f"the broker speaks MQTT {spoken}: message properties need 5.0", o.EXIT_USAGE)
            state = _Progress()
            try:
                if stdin_line:
                    await _publish_lines(client, topic or "", qos_value, retain, props, state, form or "text")
                elif json_lines:
                    await _publish_json_lines(ctx, client, topic, qos_value, retain, props, state)
                else:
                    import trio

                    for i in range(repeat):
                        if i and repeat_delay:
                            await trio.sleep(repeat_delay)
                        await client.publish(topic or "", payload, qos_value, retain, props)
                await client.wait_acknowledged()
            except _BadLine as err:
                await _settle(client)
                fail(f"{err} ({publish_counts(client)})", o.EXIT_USAGE)
            except Exception as err:
                from mqtt_cli.net.errors import ClientError

                if not isinstance(err, ClientError):
                    raise
                if client.refused:  # the refusal is the cause; mosquitto, for one, then drops the connection
                    fail_refused(client, f"; then: {err}")
                err.args = (f"{err} ({publish_counts(client)})",)
                raise
            if client.refused:
                fail_refused(client)
        return 0

    run_client(main)


class _BadLine(ValueError):
    pass


class _Progress:
    line = 0


async def _settle(client: "Client") -> None:
    """Before failing on bad input: let what was already handed over be acknowledged (nothing lost)."""
    from mqtt_cli.net.errors import ClientError

    with contextlib.suppress(ClientError):
        await client.wait_acknowledged()


async def _stdin_chunks() -> Any:
    """Standard input in large chunks, read in a worker thread (a pipe, a file or a terminal alike)."""
    import sys

    import trio

    read = sys.stdin.buffer.raw.read if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer.read
    while True:
        # abandon_on_cancel: Ctrl-C must not wait for a terminal read that may never return
        chunk = await trio.to_thread.run_sync(read, 1 << 18, abandon_on_cancel=True)
        if not chunk:
            return
        yield chunk


async def _lines() -> Any:
    rest = b""
    async for chunk in _stdin_chunks():
        data = rest + chunk if rest else chunk
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line
    if rest:
        yield rest


async def _publish_lines(
    client: "Client", topic: str, qos: int, retain: bool, props: "Properties", state: "_Progress", form: Any
) -> None:
    publish = client.publish
    if form == "text":
        async for line in _lines():
            state.line += 1
            await publish(topic, line, qos, retain, props)
        return
    from ._payload import decode_payload

    async for line in _lines():
        state.line += 1
        try:
            payload = decode_payload(line, form)
        except ValueError as err:
            raise _BadLine(f"standard input line {state.line}: --format {form}: {err}") from None
        await publish(topic, payload, qos, retain, props)


async def _publish_json_lines(
    ctx: typer.Context,
    client: "Client",
    topic: str | None,
    qos: int,
    retain: bool,
    props: "Properties",
    state: "_Progress",
) -> None:
    from mqtt_cli.core.topics import topic_name_error

    from ._json import MessageFormatError, message_from_json

    source = ctx.get_parameter_source("qos")
    qos_given = source is not None and source.name == "COMMANDLINE"
    async for line in _lines():
        state.line += 1
        if not line.strip():
            continue
        try:
            msg = message_from_json(line)
        except MessageFormatError as err:
            raise _BadLine(f"standard input line {state.line}: {err}") from None
        msg_topic = msg["topic"] or topic
        if not msg_topic:
            raise _BadLine(f'standard input line {state.line}: no "topic" and no -t')
        if err := topic_name_error(msg_topic):  # a usage error like any bad line, not a refused publish
            raise _BadLine(f"standard input line {state.line}: topic {msg_topic!r}: {err}")
        msg_qos = qos if qos_given or msg["qos"] is None else msg["qos"]
        msg_retain = retain or bool(msg["retain"])
        msg_props = msg["properties"] if msg["properties"] else props
        if msg_props and client.version != 5:
            from mqtt_cli.core.properties import EMPTY_PROPERTIES

            msg_props = EMPTY_PROPERTIES  # 3.x carries no properties: the topic, payload and flags still go
        await client.publish(msg_topic, msg["payload"], msg_qos, msg_retain, msg_props)
