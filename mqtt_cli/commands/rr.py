"""``mqtt rr``: request/response. Publish a request with a response topic and correlation data, wait (bounded)
for the matching response, print it, exit 0.

With MQTT 3.1.1 (no properties) the request carries neither: the first message published on the response
topic after the request is taken as the answer (retained messages are skipped: they are older), so the
responder must know where to answer by convention.
"""

from typing import Any

import typer

from mqtt_cli.exit_codes import EXIT_TIMEOUT

from . import _options as o
from . import say


@o.with_options
def rr(ctx: typer.Context, *, opts: dict[str, Any], conn: dict[str, Any]) -> None:
    """Send a request and print the matching response (MQTT 5.0 response topic and correlation data).

    With -V 311 (no correlation data) the answer is the first message on the response topic that is not
    retained.

    Exit codes: 0 success, 1 the output cannot be written, 2 bad usage, 3 cannot connect, 4 TLS failure, 5 connection
    refused, 6 subscription refused, 7 request refused, 8 connection lost, 27 no response within -W, 130 interrupted,
    143 terminated.
    """
    from ._plans import is_response, plan_rr

    plan = plan_rr(ctx, **opts, conn=conn)
    settings, topic, response_topic, qos_value, payload, mode, form = (
        plan.settings, plan.topic, plan.response_topic, plan.qos, plan.payload, plan.mode, plan.form
    )  # fmt: skip
    correlation_data, timeout = opts["correlation_data"], opts["timeout"]
    from ._runner import connected, run_client

    async def main() -> int:
        import os
        import time

        import trio

        from mqtt_cli.core.packets import Subscription
        from mqtt_cli.core.properties import EMPTY_PROPERTIES
        from mqtt_cli.core.reasons import reason_name
        from mqtt_cli.net.errors import ConnectionLost, PublishFailed, SubscribeRefused

        from ._output import Printer

        printer = Printer(mode, None, not opts["no_newline"], form=form)
        correlation = correlation_data.encode() if correlation_data is not None else os.urandom(16)
        # -W counts from the connection and ends only the wait: DISCONNECT still goes out (no will).
        async with connected(settings) as client:  # stops on SIGINT/SIGTERM, then says goodbye
            with trio.move_on_after(timeout) as waited:
                v5 = client.version == 5
                sub_props = plan.subscribe_props if v5 else EMPTY_PROPERTIES
                codes = await client.subscribe([Subscription(response_topic, qos_value)], sub_props)
                if codes[0] >= 0x80:
                    why = reason_name(codes[0], 9, client.version)
                    raise SubscribeRefused(f"the broker refused the subscription to {response_topic!r}: {why}")
                props = (
                    plan.publish_props.replace(response_topic=response_topic, correlation_data=correlation)
                    if v5
                    else EMPTY_PROPERTIES
                )
                await client.publish(topic, payload, qos_value, False, props)
                await client.wait_acknowledged()
                if client.refused:
                    raise PublishFailed(
                        f"the broker refused the request: {reason_name(client.refused[0].reason_code, 4)}"
                    )
                async for item in client.messages:
                    if is_response(item, v5, correlation):
                        printer(item, time.time())
                        return 0
                if client.failure is not None:
                    raise client.failure
                raise ConnectionLost("the connection ended before the response")
        if waited.cancelled_caught:
            say(f"mqtt: no response within {timeout:g} s")
        return EXIT_TIMEOUT

    run_client(main)
