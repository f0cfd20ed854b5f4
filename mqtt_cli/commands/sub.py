"""``mqtt sub``: subscribe and print messages, with bounded waits (-C, -W, -E, --retained-only)."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqtt_cli.exit_codes import EXIT_TIMEOUT

from . import _options as o
from . import fail, say

if TYPE_CHECKING:
    from ._output import Printer

SUB = "Subscription"
OUT = "Output"
STOP = "When to stop"


@o.with_connection
def sub(
    ctx: typer.Context,
    topic: Annotated[
        list[str] | None, typer.Option("-t", "--topic", help="Topic filter (repeatable).", rich_help_panel=SUB)
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "-T", "--filter-out", help="Do not print topics matching this filter (repeatable).", rich_help_panel=SUB
        ),
    ] = None,
    qos: Annotated[
        int | None, typer.Option("-q", "--qos", min=0, max=2, help="QoS (default: 0).", rich_help_panel=SUB)
    ] = None,
    no_local: Annotated[
        bool, typer.Option("--no-local", help="5.0: not our own messages.", rich_help_panel=SUB)
    ] = False,
    retain_as_published: Annotated[
        bool, typer.Option("--retain-as-published", help="5.0: keep the retain flag as published.", rich_help_panel=SUB)
    ] = False,
    retain_handling: Annotated[
        int,
        typer.Option(
            "--retain-handling",
            min=0,
            max=2,
            rich_help_panel=SUB,
            help="5.0: retained messages on subscribing: 0 always, 1 for a new subscription only, 2 never.",
        ),
    ] = 0,
    subscription_identifier: Annotated[
        int | None,
        typer.Option(
            "--subscription-identifier", min=1, max=268435455, help="5.0 subscription identifier.", rich_help_panel=SUB
        ),
    ] = None,
    unsubscribe: Annotated[
        list[str] | None,
        typer.Option(
            "-U", "--unsubscribe", help="Unsubscribe from this filter first (repeatable).", rich_help_panel=SUB
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Print the topic, then the payload.", rich_help_panel=OUT)
    ] = False,
    fmt: Annotated[
        str | None,
        typer.Option(
            "-F",
            "--print-format",
            metavar="TEMPLATE",
            rich_help_panel=OUT,
            help="mosquitto_sub format: %t topic, %p payload, %q %r %m %l %x %X %I %U %j %J %C %D %E %F %P %R %S, @H.",
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            rich_help_panel=OUT,
            help="One JSON object per line, lossless (payload as text or base64, every 5.0 property, receive time).",
        ),
    ] = False,
    encoding: Annotated[
        str | None,
        typer.Option(
            "--format", metavar="text|hex|base64|json", rich_help_panel=OUT,
            help="How to write each payload: as it is (text, the default), hex, base64, or JSON pretty-printed.",
        ),
    ] = None,
    hex_out: Annotated[bool, typer.Option("--hex", help="Same as --format hex.", hidden=True)] = False,
    no_newline: Annotated[
        bool, typer.Option("-N", "--no-newline", help="No newline after each message.", rich_help_panel=OUT)
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", metavar="FILE", rich_help_panel=OUT,
            help="Append the messages to FILE (one a line, in the chosen form) instead of standard output.",
        ),
    ] = None,
    stats: Annotated[
        bool,
        typer.Option(
            "--stats", rich_help_panel=OUT,
            help="On exit, how many messages arrived, per topic and QoS, on standard error.",
        ),
    ] = False,
    count: Annotated[
        int | None, typer.Option("-C", "--count", min=1, help="Exit 0 after N messages.", rich_help_panel=STOP)
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "-W", "--timeout", min=0.001, help="Exit 27 after S seconds (unless done before).", rich_help_panel=STOP
        ),
    ] = None,
    exit_on_suback: Annotated[
        bool, typer.Option("-E", "--exit-on-subscribe", help="Exit once subscribed.", rich_help_panel=STOP)
    ] = False,
    no_retained: Annotated[
        bool, typer.Option("-R", "--no-retained", help="Do not print retained messages.", rich_help_panel=STOP)
    ] = False,
    retained_only: Annotated[
        bool,
        typer.Option(
            "--retained-only",
            rich_help_panel=STOP,
            help="Print the retained messages and exit 0 once all have arrived (subscribes at QoS 0).",
        ),
    ] = False,
    remove_retained: Annotated[
        bool, typer.Option("--remove-retained", help="Clear each retained message received.", rich_help_panel=STOP)
    ] = False,
    d_property: o.DProperty = None,
    *,
    conn: dict[str, Any],
) -> None:
    """Subscribe and print the messages received.

    Exit codes: 0 success, 1 the output cannot be written, 2 bad usage, 3 cannot connect, 4 TLS failure, 5 connection
    refused, 6 subscription refused, 8 connection lost, 27 -W timeout, 130 interrupted, 143 terminated
    (docs/exit-codes.md).
    """
    from ._plans import plan_sub

    plan = plan_sub(
        ctx, topic=topic, exclude=exclude, qos=qos, no_local=no_local, retain_as_published=retain_as_published,
        retain_handling=retain_handling, subscription_identifier=subscription_identifier, unsubscribe=unsubscribe,
        verbose=verbose, fmt=fmt, json_out=json_out, encoding=encoding, hex_out=hex_out, output=output,
        no_retained=no_retained, retained_only=retained_only, d_property=d_property, conn=conn,
    )  # fmt: skip
    settings, filters, qos_value, v5_only, mode, form, out_file = (
        plan.settings, plan.filters, plan.qos, plan.v5_only, plan.mode, plan.form, plan.out_file
    )
    from ._runner import connected, run_client

    async def main() -> int:
        from ._output import Printer

        printer = Printer(mode, fmt, not no_newline, out_file, form)
        counts = _Counts() if stats else None
        try:
            return await receive(printer, counts)
        finally:
            if counts is not None:
                counts.report()
            if out_file is not None:
                out_file.close()

    async def receive(printer: "Printer", counts: "_Counts | None") -> int:
        import time

        import trio

        from mqtt_cli.core.events import PongReceived
        from mqtt_cli.core.packets import Subscription
        from mqtt_cli.core.topics import matches
        from mqtt_cli.net.errors import ConnectionLost, SubscribeRefused

        from ._output import FormatError

        def warn(err: FormatError) -> None:
            say(f"mqtt: warning: {err}")

        excluded = list(exclude or [])
        code = 0
        # -W counts from the connection, as with mosquitto_sub, and ends only the work: leaving `connected`
        # then says goodbye with DISCONNECT (a timeout that ended the connection would publish the will).
        async with connected(settings) as client:  # stops on SIGINT/SIGTERM, then says goodbye
            with trio.move_on_after(timeout if timeout is not None else float("inf")) as waited:
                if v5_only and client.version != 5:
                    fail(f"the broker speaks MQTT 3.1.1: {', '.join(v5_only)} need 5.0", o.EXIT_USAGE)
                if unsubscribe:
                    await client.unsubscribe(unsubscribe, plan.unsubscribe_props)
                if not filters:
                    return 0
                subs = [
                    Subscription(f, qos_value, no_local and client.version == 5, retain_as_published, retain_handling)
                    for f in filters
                ]
                props = plan.subscribe_props
                # Messages can come before SUBACK (a resumed session's queue): they are read and printed while
                # the subscription is answered, or a full message buffer would hold SUBACK back behind them.
                outcome: list[int] = []

                async def subscribe() -> None:
                    codes = await client.subscribe(subs, props, marker=retained_only)
                    refused = [(f, c) for f, c in zip(filters, codes, strict=False) if c >= 0x80]
                    if refused:
                        from mqtt_cli.core.reasons import reason_name

                        what = ", ".join(f"{f!r}: {reason_name(c, 9, client.version)}" for f, c in refused)
                        raise SubscribeRefused(f"the broker refused the subscription ({what})")
                    if exit_on_suback:
                        outcome.append(0)
                        nursery.cancel_scope.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(subscribe)
                    received = 0
                    # Everything a message needs checked; without it, a read's messages are printed as they come.
                    selective = no_retained or retained_only or bool(excluded)
                    receive_batch = client.messages.receive_batch
                    while True:
                        try:
                            batch = await receive_batch()
                        except trio.EndOfChannel:
                            break
                        if type(batch) is PongReceived:
                            if retained_only:
                                await client.wait_acknowledged()
                                outcome.append(0)
                                break
                            continue
                        if selective:
                            batch = [
                                p for p in batch
                                if not (no_retained and p.retain) and not (retained_only and not p.retain)
                                and not (excluded and any(matches(f, p.topic) for f in excluded))
                            ]  # fmt: skip
                        done = count is not None and received + len(batch) >= count
                        if done:
                            batch = batch[: count - received]  # type: ignore[operator]
                        if counts is not None:
                            for p in batch:
                                counts.add(p.topic, p.qos)
                        printer.write(batch, time.time(), warn)
                        received += len(batch)
                        if remove_retained:
                            for p in batch:
                                if p.retain and p.payload:
                                    await client.publish(p.topic, b"", 1, True)
                        if done:
                            await client.wait_acknowledged()
                            outcome.append(0)
                            break
                    nursery.cancel_scope.cancel()
                if outcome:
                    return outcome[0]
                if client.failure is not None:
                    raise client.failure
                raise ConnectionLost("the connection ended")
        if waited.cancelled_caught:
            say(f"mqtt: timed out after {timeout:g} s")
            code = EXIT_TIMEOUT
        return code

    run_client(main)


class _Counts:
    """--stats: messages received per topic and QoS, reported on standard error when `sub` ends."""

    def __init__(self) -> None:
        from collections import Counter

        self.seen: Counter[tuple[str, int]] = Counter()

    def add(self, topic: str, qos: int) -> None:
        self.seen[(topic, qos)] += 1

    def report(self) -> None:

        from mqtt_cli.render import printable

        total = sum(self.seen.values())
        lines = [f"mqtt: {total} message{'s' if total != 1 else ''} received"]
        if self.seen:
            width = len(f"{max(self.seen.values()):,}")
            lines.append(f"  {'count':>{max(width, 5)}}  QoS  topic")
            for (topic, qos), n in sorted(self.seen.items(), key=lambda item: (-item[1], item[0])):
                lines.append(f"  {n:>{max(width, 5)},}  {qos:>3}  {printable(topic)}")
        say("\n".join(lines))
