"""``mqtt sub``: subscribe and print messages, with bounded waits (-C, -W, -E, --retained-only)."""

from typing import TYPE_CHECKING, Any

import typer

from mqtt_cli.exit_codes import EXIT_TIMEOUT

from . import _options as o
from . import fail, say

if TYPE_CHECKING:
    from mqtt_cli.net.client import Client

    from ._output import Printer
    from ._plans import SubPlan


@o.with_options
def sub(ctx: typer.Context, *, opts: dict[str, Any], conn: dict[str, Any]) -> None:
    """Subscribe and print the messages received.

    Exit codes: 0 success, 1 the output cannot be written, 2 bad usage, 3 cannot connect, 4 TLS failure, 5 connection
    refused, 6 subscription refused, 8 connection lost, 27 -W timeout, 130 interrupted, 143 terminated
    (docs/exit-codes.md).
    """
    from ._plans import plan_sub

    plan = plan_sub(ctx, **opts, conn=conn)
    from ._runner import run_client

    async def main() -> int:
        from ._output import Printer

        printer = Printer(plan.mode, opts["fmt"], not opts["no_newline"], plan.out_file, plan.form)
        counts = _Counts() if opts["stats"] else None
        try:
            return await _receive(plan, opts, printer, counts)
        finally:
            if counts is not None:
                counts.report()
            if plan.out_file is not None:
                plan.out_file.close()

    run_client(main)


async def _receive(plan: "SubPlan", opts: dict[str, Any], printer: "Printer", counts: "_Counts | None") -> int:
    """Connects, unsubscribes (-U), subscribes as `plan` says and prints what arrives until a bound of `opts`
    (-C, -E, --retained-only, -W) is reached; the exit code."""
    import trio

    from mqtt_cli.core.packets import Subscription
    from mqtt_cli.net.errors import ConnectionLost, SubscribeRefused

    from ._runner import connected

    filters, unsubscribe, timeout = plan.filters, opts["unsubscribe"], opts["timeout"]
    # -W counts from the connection, as with mosquitto_sub, and ends only the work: leaving `connected`
    # then says goodbye with DISCONNECT (a timeout that ended the connection would publish the will).
    async with connected(plan.settings) as client:  # stops on SIGINT/SIGTERM, then says goodbye
        with trio.move_on_after(timeout if timeout is not None else float("inf")) as waited:
            if plan.v5_only and client.version != 5:
                fail(f"the broker speaks MQTT 3.1.1: {', '.join(plan.v5_only)} need 5.0", o.EXIT_USAGE)
            if unsubscribe:
                await client.unsubscribe(unsubscribe, plan.unsubscribe_props)
            if not filters:
                return 0
            no_local = opts["no_local"] and client.version == 5
            subs = [Subscription(f, plan.qos, no_local, opts["retain_as_published"], opts["retain_handling"])
                    for f in filters]  # fmt: skip
            # Messages can come before SUBACK (a resumed session's queue): they are read and printed while
            # the subscription is answered, or a full message buffer would hold SUBACK back behind them.
            outcome: list[int] = []

            async def subscribe() -> None:
                codes = await client.subscribe(subs, plan.subscribe_props, marker=opts["retained_only"])
                refused = [(f, c) for f, c in zip(filters, codes, strict=False) if c >= 0x80]
                if refused:
                    from mqtt_cli.core.reasons import reason_name

                    what = ", ".join(f"{f!r}: {reason_name(c, 9, client.version)}" for f, c in refused)
                    raise SubscribeRefused(f"the broker refused the subscription ({what})")
                if opts["exit_on_suback"]:
                    outcome.append(0)
                    nursery.cancel_scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(subscribe)
                if await _print_messages(client, opts, printer, counts):
                    outcome.append(0)
                nursery.cancel_scope.cancel()
            if outcome:
                return outcome[0]
            if client.failure is not None:
                raise client.failure
            raise ConnectionLost("the connection ended")
    if waited.cancelled_caught:
        say(f"mqtt: timed out after {timeout:g} s")
        return EXIT_TIMEOUT
    return 0


async def _print_messages(client: "Client", opts: dict[str, Any], printer: "Printer", counts: "_Counts | None") -> bool:
    """Prints the messages received, each read's at once, until -C's count or --retained-only's end (True) or the
    end of the connection (False); --remove-retained clears each retained message printed."""
    import time

    import trio

    from mqtt_cli.core.events import PongReceived
    from mqtt_cli.core.topics import matches

    from ._output import FormatError

    def warn(err: FormatError) -> None:
        say(f"mqtt: warning: {err}")

    count, remove_retained = opts["count"], opts["remove_retained"]
    no_retained, retained_only, excluded = opts["no_retained"], opts["retained_only"], list(opts["exclude"] or [])
    # Everything a message needs checked; without it, a read's messages are printed as they come.
    selective = no_retained or retained_only or bool(excluded)
    receive_batch = client.messages.receive_batch
    received = 0
    while True:
        try:
            batch = await receive_batch()
        except trio.EndOfChannel:
            return False
        if type(batch) is PongReceived:
            if retained_only:
                await client.wait_acknowledged()
                return True
            continue
        if selective:
            batch = [
                p for p in batch
                if not (no_retained and p.retain) and not (retained_only and not p.retain)
                and not (excluded and any(matches(f, p.topic) for f in excluded))
            ]  # fmt: skip
        done = count is not None and received + len(batch) >= count
        if done:
            batch = batch[: count - received]
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
            return True


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
