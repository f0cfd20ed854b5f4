"""What pub, sub and rr check and work out before connecting, without typer or trio.

The typer commands (pub.py, sub.py, rr.py) and the one-shot fast path (_fast.py) both call these with the
command's own options' values (by parameter name, as its table in _client_options.py names them) and the
connection options' (`conn`), so that a command's usage errors, defaults and settings are the same on either
path. Each function exits 2 (`fail`) on bad usage, before anything is sent; `ctx` tells where a value came from
(typer's Context, or the fast path's parse).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mqtt_cli.core.records import record
from mqtt_cli.exit_codes import EXIT_PUBLISH_FAILED, EXIT_USAGE

from . import fail
from ._dprops import apply_to_settings, merged, parse_properties
from ._settings import client_settings, parse_user_properties, stdin_closed

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import BinaryIO, Protocol

    from mqtt_cli.core.events import PublishAcknowledged
    from mqtt_cli.core.properties import Properties
    from mqtt_cli.net.settings import ClientSettings

    from ._payload import PayloadFormat
    from ._settings import ParameterSources

    class Counted(Protocol):
        """What pub's summaries read of a client (the trio client or the blocking one)."""

        published: int
        written: int
        acknowledged: int
        refused: list[PublishAcknowledged]


class Unsupported(Exception):  # not an error: the caller's `check` declines the settings
    """Raised by a plan's `check` to stop right after the settings are known, before any payload is read."""


# --- pub -------------------------------------------------------------------------------------------------------


@record
class PubPlan:
    settings: ClientSettings
    topic: str | None
    qos: int
    retain: bool
    props: Properties
    payload: bytes  # of -m, -f, -s or -n
    form: PayloadFormat | None  # None: text, as it is
    repeat: int
    repeat_delay: float
    stdin_line: bool
    json_lines: bool


def plan_pub(
    ctx: ParameterSources | None,
    *,
    topic: str | None,
    message: str | None,
    file: Path | None,
    stdin_file: bool,
    stdin_line: bool,
    null_message: bool,
    json_lines: bool,
    encoding: str | None,
    qos: int | None,
    retain: bool,
    repeat: int,
    repeat_delay: float,
    user_property: list[str] | None,
    content_type: str | None,
    response_topic: str | None,
    correlation_data: str | None,
    message_expiry: int | None,
    payload_format: int | None,
    topic_alias: int | None,
    d_property: list[str] | None,
    conn: dict[str, Any],
    check: Callable[[ClientSettings], None] | None = None,
) -> PubPlan:
    sources = [
        name
        for name, given in (
            ("-m", message is not None), ("-f", file is not None), ("-s", stdin_file), ("-l", stdin_line),
            ("-n", null_message), ("--json-lines", json_lines),
        )
        if given
    ]  # fmt: skip
    if len(sources) != 1:
        what = "no message given" if not sources else f"{' and '.join(sources)} both give the message"
        fail(f"{what}: use one of -m, -f, -s, -l, -n or --json-lines", EXIT_USAGE)
    form = None  # text: the bytes as they are (_payload is imported only when there is more to do)
    if encoding is not None:
        from ._payload import PUB_FORMATS, PayloadFormat, parse_format

        form = parse_format(encoding, PUB_FORMATS)
        if json_lines and form is not PayloadFormat.text:
            fail('--json-lines gives each payload with its "encoding": drop --format', EXIT_USAGE)
    if repeat > 1 and (stdin_line or json_lines):
        fail("--repeat works with -m, -f, -s and -n, not with -l or --json-lines", EXIT_USAGE)
    given = parse_properties(d_property)
    resolved = client_settings(conn, ctx)
    settings = resolved.settings
    apply_to_settings(settings, given)
    if check is not None:  # the fast path: may the blocking client run this? (else typer runs it all again)
        check(settings)
    topic = topic or resolved.url_topic
    if topic is None and not json_lines:
        fail("no topic: give -t TOPIC (or a topic in the --url)", EXIT_USAGE)
    if topic is not None:
        from mqtt_cli.core.topics import topic_name_error

        if err := topic_name_error(topic):
            fail(f"-t {topic!r}: {err}", EXIT_USAGE)
    qos_value = qos if qos is not None else int(resolved.profile.get("qos", 0))
    props = merged(
        message_properties(
            user_property, content_type, response_topic, correlation_data, message_expiry, payload_format, topic_alias
        ),
        given.publish,
    )
    if props and settings.version in (3, 4):
        fail("message properties (--content-type, --user-property, -D PUBLISH, ...) need MQTT 5.0 (-V 5)", EXIT_USAGE)

    if (stdin_file or stdin_line or json_lines) and stdin_closed():
        what = "-s" if stdin_file else "-l" if stdin_line else "--json-lines"
        fail(f"{what} reads standard input, but it is closed: pipe the messages in, or use -m or -f", EXIT_USAGE)
    payload = b""
    if message is not None and form is None and len(message) < 65536:
        payload = message.encode()  # within what any PUBLISH carries: nothing to check
    elif message is not None or file is not None or stdin_file:
        from ._payload import PayloadFormat, read_payload

        payload = read_payload(message, file, stdin_file, topic or "", qos_value, props, settings.version,
                               form or PayloadFormat.text)  # fmt: skip

    settings.auto_topic_aliases = stdin_line or json_lines
    return PubPlan(settings, topic, qos_value, retain, props, payload, form, repeat, repeat_delay, stdin_line,
                   json_lines)  # fmt: skip


def message_properties(
    user_property: list[str] | None,
    content_type: str | None,
    response_topic: str | None,
    correlation_data: str | None,
    message_expiry: int | None,
    payload_format: int | None,
    topic_alias: int | None,
) -> Properties:
    from mqtt_cli.core.errors import LocalProtocolError
    from mqtt_cli.core.properties import Properties

    try:
        return Properties(
            user_properties=parse_user_properties(user_property, "--user-property"),
            content_type=content_type,
            response_topic=response_topic,
            correlation_data=correlation_data.encode() if correlation_data is not None else None,
            message_expiry_interval=message_expiry,
            payload_format_indicator=payload_format,
            topic_alias=topic_alias,
        )
    except LocalProtocolError as err:
        fail(str(err), EXIT_USAGE)


def protocol_name(version: int) -> str:
    return {3: "3.1", 4: "3.1.1", 5: "5.0"}.get(version, str(version))


def is_response(item: Any, v5: bool, correlation: bytes) -> bool:
    """rr's rule for what it receives: a message (not a ping) that answers its request. In 5.0 its correlation
    data is the request's (else someone else's response); in 3.x a retained message is stale (3.1.1 brokers
    forward live messages with retain 0)."""
    if not hasattr(item, "topic"):
        return False
    if v5:
        return bool(item.properties.correlation_data == correlation)
    return not item.retain


def publish_counts(client: Counted) -> str:
    """pub's summary in its errors: `N sent, N acknowledged[, N refused]`."""
    done = client.acknowledged + client.written
    return f"{client.published} sent, {done} acknowledged" + (
        f", {len(client.refused)} refused" if client.refused else ""
    )


def fail_refused(client: Counted, then: str = "") -> None:
    """pub: the broker refused messages: exit 7 saying the first one's reason."""
    from mqtt_cli.core.reasons import reason_name

    reason = reason_name(client.refused[0].reason_code, 4)
    refused = f"the broker refused {len(client.refused)} message(s): {reason} ({publish_counts(client)}){then}"
    fail(refused, EXIT_PUBLISH_FAILED)


# --- sub -------------------------------------------------------------------------------------------------------


@record
class SubPlan:
    settings: ClientSettings
    filters: list[str]
    qos: int
    v5_only: list[str]  # the 5.0-only options given
    mode: str  # json, format, verbose or payload
    form: PayloadFormat
    out_file: BinaryIO | None
    subscribe_props: Properties  # --subscription-identifier, -D SUBSCRIBE
    unsubscribe_props: Properties  # -D UNSUBSCRIBE


def plan_sub(
    ctx: ParameterSources | None,
    *,
    topic: list[str] | None,
    exclude: list[str] | None,
    qos: int | None,
    no_local: bool,
    retain_as_published: bool,
    retain_handling: int,
    subscription_identifier: int | None,
    unsubscribe: list[str] | None,
    verbose: bool,
    fmt: str | None,
    json_out: bool,
    encoding: str | None,
    hex_out: bool,
    output: Path | None,
    no_retained: bool,
    retained_only: bool,
    d_property: list[str] | None,
    conn: dict[str, Any],
    check: Callable[[ClientSettings], None] | None = None,
    **_running: Any,  # the options only the run reads (-C, -W, -E, -N, --stats, --remove-retained)
) -> SubPlan:
    outputs = [n for n, given in (("-F", fmt is not None), ("--json", json_out),
                                  ("--format", encoding is not None or hex_out)) if given]  # fmt: skip
    if len(outputs) > 1:
        fail(f"{' and '.join(outputs)} are different output forms: use one", EXIT_USAGE)
    from ._payload import SUB_FORMATS, parse_format

    form = parse_format("hex" if hex_out else encoding, SUB_FORMATS)
    if no_retained and retained_only:
        fail("-R skips retained messages and --retained-only prints only them: use one", EXIT_USAGE)
    given = parse_properties(d_property)
    resolved = client_settings(conn, ctx, reconnect_session_expiry=3600)
    settings = resolved.settings
    apply_to_settings(settings, given)
    if check is not None:  # the fast path: may the blocking client run this? (else typer runs it all again)
        check(settings)
    filters = list(topic or [])
    if not filters and resolved.url_topic:
        filters = [resolved.url_topic]
    if not filters and not unsubscribe:
        fail("no topic: give -t FILTER (or a topic in the --url)", EXIT_USAGE)
    from mqtt_cli.core.topics import topic_filter_error

    for flt in [*filters, *(exclude or []), *(unsubscribe or [])]:
        if err := topic_filter_error(flt):
            fail(f"topic filter {flt!r}: {err}", EXIT_USAGE)
    v5_only = [n for n, on in (("--no-local", no_local), ("--retain-as-published", retain_as_published),
               ("--retain-handling", retain_handling != 0),
               ("--subscription-identifier", subscription_identifier is not None),
               ("-D SUBSCRIBE", bool(given.subscribe)), ("-D UNSUBSCRIBE", bool(given.unsubscribe))) if on]  # fmt: skip
    if v5_only and settings.version in (3, 4):
        fail(f"{', '.join(v5_only)} need MQTT 5.0 (-V 5)", EXIT_USAGE)
    if fmt is not None:
        from ._output import FormatError, check_format

        try:
            check_format(fmt)
        except FormatError as err:
            fail(str(err), EXIT_USAGE)
    qos_value = qos if qos is not None else int(resolved.profile.get("qos", 0))
    if retained_only:
        # The end of the retained burst is found by a PINGREQ sent after SUBSCRIBE: the broker answers it after
        # what it queued before. QoS 1/2 messages beyond its in-flight window would be sent after the PINGRESP.
        qos_value = 0
    mode = "json" if json_out else "format" if fmt is not None else "verbose" if verbose else "payload"
    out_file = None
    if output is not None:
        try:
            out_file = output.open("ab")  # appended to; opened before connecting, so a bad path is a usage error
        except OSError as err:
            fail(f"--output {output}: {err.strerror}", EXIT_USAGE)
    from mqtt_cli.core.properties import Properties

    ident = Properties(subscription_identifiers=[subscription_identifier] if subscription_identifier else [])
    return SubPlan(settings, filters, qos_value, v5_only, mode, form, out_file, merged(ident, given.subscribe),
                   given.unsubscribe)  # fmt: skip


# --- rr --------------------------------------------------------------------------------------------------------


@record
class RrPlan:
    settings: ClientSettings
    topic: str
    response_topic: str
    qos: int
    payload: bytes
    mode: str  # json, verbose or payload
    form: PayloadFormat
    publish_props: Properties  # -D PUBLISH (the response topic and correlation data are added when sending)
    subscribe_props: Properties  # -D SUBSCRIBE


def plan_rr(
    ctx: ParameterSources | None,
    *,
    topic: str | None,
    response_topic: str | None,
    message: str | None,
    file: Path | None,
    stdin_file: bool,
    null_message: bool,
    qos: int | None,
    correlation_data: str | None,
    verbose: bool,
    json_out: bool,
    encoding: str | None,
    hex_out: bool,
    d_property: list[str] | None,
    conn: dict[str, Any],
    check: Callable[[ClientSettings], None] | None = None,
    **_running: Any,  # the options only the run reads (-W, -N)
) -> RrPlan:
    given = [n for n, g in (("-m", message is not None), ("-f", file is not None), ("-s", stdin_file),
                            ("-n", null_message)) if g]  # fmt: skip
    if len(given) != 1:
        what = "no request given" if not given else f"{' and '.join(given)} both give the request"
        fail(f"{what}: use one of -m, -f, -s or -n", EXIT_USAGE)
    if json_out and (hex_out or encoding is not None):
        fail("--json and --format are different output forms: use one", EXIT_USAGE)
    from ._payload import SUB_FORMATS, parse_format

    form = parse_format("hex" if hex_out else encoding, SUB_FORMATS)
    given = parse_properties(d_property)
    resolved = client_settings(conn, ctx)
    settings = resolved.settings
    apply_to_settings(settings, given)
    if (given.publish or given.subscribe) and settings.version in (3, 4):
        fail("-D PUBLISH and -D SUBSCRIBE need MQTT 5.0 (-V 5)", EXIT_USAGE)
    if check is not None:  # the fast path: may the blocking client run this? (else typer runs it all again)
        check(settings)
    topic = topic or resolved.url_topic
    if not topic or not response_topic:
        fail("give the request topic (-t) and the response topic (-e)", EXIT_USAGE)
    from mqtt_cli.core.topics import topic_filter_error, topic_name_error

    if err := topic_name_error(topic):
        fail(f"-t {topic!r}: {err}", EXIT_USAGE)
    if err := topic_name_error(response_topic) or topic_filter_error(response_topic):
        fail(f"-e {response_topic!r}: {err}", EXIT_USAGE)
    if stdin_file and stdin_closed():
        fail("-s reads standard input, but it is closed: pipe the request in, or use -m or -f", EXIT_USAGE)
    qos_value = qos if qos is not None else int(resolved.profile.get("qos", 0))

    from ._payload import read_payload

    # room for the response topic and 16 bytes of correlation data the request carries in 5.0
    room = given.publish.replace(
        response_topic=response_topic, correlation_data=(correlation_data or "").encode() or bytes(16)
    )
    payload = read_payload(message, file, stdin_file, topic, qos_value, room, settings.version)
    mode = "json" if json_out else "verbose" if verbose else "payload"
    return RrPlan(settings, topic, response_topic, qos_value, payload, mode, form, given.publish, given.subscribe)
