"""``mqtt pub``: publish one message, a file, standard input, or one message per line, and say whether every
message was acknowledged (exit 0 only then).

No `from __future__ import annotations` in command modules: typer would evaluate every string annotation
at start-up (about 1 ms per option).
"""

import contextlib
from typing import TYPE_CHECKING, Any

import typer

from . import _options as o
from . import fail

if TYPE_CHECKING:
    from mqtt_cli.core.properties import Properties
    from mqtt_cli.net.client import Client


@o.with_options
def pub(ctx: typer.Context, *, opts: dict[str, Any], conn: dict[str, Any]) -> None:
    """Publish messages; exit 0 only when every one was acknowledged at its QoS (QoS 0: written).

    Exit codes: 0 success, 2 bad usage, 3 cannot connect, 4 TLS failure, 5 connection refused, 7 a message was
    refused or not acknowledged, 8 connection lost, 130 interrupted, 143 terminated (docs/exit-codes.md).
    """
    from ._plans import fail_refused, plan_pub, protocol_name, publish_counts

    plan = plan_pub(ctx, **opts, conn=conn)
    settings, topic, qos_value, retain, props, payload, form = (
        plan.settings, plan.topic, plan.qos, plan.retain, plan.props, plan.payload, plan.form
    )  # fmt: skip
    from ._runner import connected, run_client

    async def main() -> int:

        async with connected(settings) as client:  # stops on SIGINT/SIGTERM, then says goodbye
            if props and client.version != 5:
                spoken = protocol_name(client.version)
                fail(f"the broker speaks MQTT {spoken}: message properties need 5.0", o.EXIT_USAGE)
            state = _Progress()
            try:
                if plan.stdin_line:
                    await _publish_lines(client, topic or "", qos_value, retain, props, state, form or "text")
                elif plan.json_lines:
                    await _publish_json_lines(ctx, client, topic, qos_value, retain, props, state)
                else:
                    import trio

                    for i in range(plan.repeat):
                        if i and plan.repeat_delay:
                            await trio.sleep(plan.repeat_delay)
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
