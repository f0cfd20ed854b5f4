"""``mqtt serve``: run the broker."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from mqtt_cli.commands import fail


class LogFormat(StrEnum):
    text = "text"
    json = "json"


def serve(
    host: Annotated[str, typer.Option("--host", help="Address of the default listener.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", help="Port of the default listener (0: any free port).")] = 1883,
    listen: Annotated[
        list[str] | None,
        typer.Option(
            "--listen",
            "-l",
            help="A listener URL, mqtt://HOST:PORT or mqtts://HOST:PORT; repeatable. Replaces --host/--port.",
        ),
    ] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="Certificate (PEM) for mqtts:// listeners.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Private key (PEM) for mqtts:// listeners.")] = None,
    tls_cafile: Annotated[Path | None, typer.Option(help="CA certificates to check client certificates.")] = None,
    require_certificate: Annotated[
        bool, typer.Option("--require-certificate", help="Refuse TLS clients without a valid certificate.")
    ] = False,
    ready_file: Annotated[
        Path | None, typer.Option(help="Write the bound listeners there (JSON) once listening.")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log connections and errors.")] = False,
    log_format: Annotated[LogFormat, typer.Option(help="Log lines for people or for machines.")] = LogFormat.text,
    max_keepalive: Annotated[
        int,
        typer.Option(
            help="Longest keep alive allowed, seconds (5.0: announced as Server Keep Alive; 3.x: refused above it); "
            "0: no limit, keep alive 0 allowed (mosquitto's meaning)."
        ),
    ] = 65535,
    max_topic_alias: Annotated[int, typer.Option(help="Topic aliases a 5.0 client may set.")] = 10,
    max_queued_messages: Annotated[
        int, typer.Option(help="QoS 1/2 messages queued per client beyond its in-flight window (0: unlimited).")
    ] = 1000,
    max_queued_bytes: Annotated[int, typer.Option(help="Bytes of queued messages per client (0: unlimited).")] = 0,
    queue_drop_oldest: Annotated[
        bool, typer.Option("--queue-drop-oldest", help="When a queue is full, drop its oldest message.")
    ] = False,
    max_inflight: Annotated[
        int,
        typer.Option(
            help="QoS 1/2 messages in flight to a client that states no Receive Maximum (0: 65,535, all identifiers)."
        ),
    ] = 20,
    max_packet_size: Annotated[int, typer.Option(help="Largest packet accepted, bytes (0: no limit).")] = 0,
    max_connections: Annotated[int, typer.Option(help="Connections accepted at once (0: unlimited).")] = 0,
    sys_interval: Annotated[float, typer.Option(help="Seconds between $SYS updates (0: none).")] = 10.0,
    password_file: Annotated[
        Path | None,
        typer.Option(help="Users and password hashes, mosquitto's format (made by `mqtt passwd` or mosquitto_passwd)."),
    ] = None,
    acl_file: Annotated[
        Path | None, typer.Option(help="Who may read and write which topics, mosquitto's acl_file format.")
    ] = None,
    allow_anonymous: Annotated[
        bool | None,
        typer.Option(
            "--allow-anonymous/--no-allow-anonymous",
            help="Clients without a user name. Default: allowed on a loopback listener without authentication, "
            "refused otherwise; a listener on another address with no authentication needs it said explicitly.",
        ),
    ] = None,
    use_identity_as_username: Annotated[
        bool,
        typer.Option(
            "--use-identity-as-username",
            help="mqtts: the client certificate's CN is the user name (needs --tls-cafile).",
        ),
    ] = False,
    use_subject_as_username: Annotated[
        bool,
        typer.Option(
            "--use-subject-as-username",
            help="mqtts: the client certificate's whole subject (RFC 2253, as mosquitto) is the user name.",
        ),
    ] = False,
) -> None:
    """Run an MQTT 3.1 / 3.1.1 / 5.0 broker.

    Listens on 127.0.0.1:1883 unless told otherwise. SIGINT or SIGTERM shut it down gracefully: the wills of connected clients are published and 5.0 clients told why; a second signal stops it at once.

    Exit codes: 0 stopped by a signal, 1 could not start (port in use, certificate unreadable), 2 bad usage (also a bad password or ACL file, or a listener open to the network without authentication).
    """  # noqa: E501 - typer keeps a docstring's line breaks in --help
    import json
    import os
    import signal
    import sys
    import time

    import trio

    from mqtt_cli import version_text
    from mqtt_cli.core.broker import BrokerConfig, Notice
    from mqtt_cli.net.auth_files import AuthFileError, load_policy
    from mqtt_cli.net.server import Listener, ServeOptions, ServerError, listener_policy, parse_listen_url
    from mqtt_cli.net.server import serve as run_server

    for name, value in (("--port", port), ("--max-keepalive", max_keepalive), ("--max-topic-alias", max_topic_alias)):
        if not 0 <= value <= 65535:
            fail(f"{name} {value} is outside 0..65535", 2)
    for name, value in (
        ("--max-queued-messages", max_queued_messages),
        ("--max-queued-bytes", max_queued_bytes),
        ("--max-inflight", max_inflight),
        ("--max-packet-size", max_packet_size),
        ("--max-connections", max_connections),
    ):
        if value < 0:
            fail(f"{name} {value} is negative; 0 means unlimited", 2)
    try:
        specs = [parse_listen_url(url) for url in listen] if listen else [Listener("mqtt", host, port)]
    except ServerError as exc:
        fail(str(exc), 2)
    if use_identity_as_username and use_subject_as_username:
        fail("--use-identity-as-username and --use-subject-as-username exclude each other", 2)
    if (use_identity_as_username or use_subject_as_username) and not any(s.scheme == "mqtts" for s in specs):
        fail("a certificate identity as user name needs an mqtts:// listener", 2)
    if (use_identity_as_username or use_subject_as_username) and tls_cafile is None:
        fail("a certificate identity as user name needs --tls-cafile to check client certificates against", 2)
    try:
        auth = load_policy(
            allow_anonymous=allow_anonymous,
            password_file=password_file,
            acl_file=acl_file,
            use_identity_as_username=use_identity_as_username,
            use_subject_as_username=use_subject_as_username,
        )
    except AuthFileError as exc:
        fail(str(exc), 2)

    console = None
    if verbose and log_format is LogFormat.text:
        from rich.console import Console

        console = Console(stderr=True, highlight=False)  # colour only on a terminal
    styles = {"connected": "green", "disconnected": "dim", "refused": "yellow", "error": "red"}

    def log_text(n: Notice) -> None:
        from rich.text import Text

        assert console is not None
        line = Text(time.strftime("%H:%M:%S "), style="dim")
        line.append(f"{n.kind:<12}", style=styles.get(n.kind, ""))
        line.append(f" {n.client_id if n.client_id is not None else '-'}", style="bold")
        line.append(f" {n.peer} {n.detail}")
        if n.reason_code is not None:
            line.append(f" (0x{n.reason_code:02X})", style=styles.get(n.kind, ""))
        console.print(line, soft_wrap=True)

    def log_json(n: Notice) -> None:
        record = {"ts": round(time.time(), 6), "event": n.kind, "client_id": n.client_id, "peer": n.peer}
        if n.detail:
            record["detail"] = n.detail
        if n.reason_code is not None:
            record["reason_code"] = n.reason_code
        print(json.dumps(record), file=sys.stderr, flush=True)

    def listening(bound: list[Listener]) -> None:
        print(f"mqtt serve: listening on {', '.join(b.url for b in bound)}", file=sys.stderr, flush=True)

    options = ServeOptions(
        listeners=specs,
        broker=BrokerConfig(
            max_keepalive=max_keepalive,
            max_topic_alias=max_topic_alias,
            max_inflight=max_inflight,
            max_queued_messages=max_queued_messages,
            max_queued_bytes=max_queued_bytes,
            queue_drop_oldest=queue_drop_oldest,
            max_packet_size=max_packet_size,
            sys_interval=sys_interval,
            instance=os.urandom(4).hex(),
            version=version_text(),
        ),
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_cafile=tls_cafile,
        require_certificate=require_certificate,
        max_connections=max_connections,
        ready_file=ready_file,
        on_notice=(log_json if log_format is LogFormat.json else log_text) if verbose else None,
        on_listening=listening,
        auth=auth,
    )
    for spec in specs:
        try:
            listener_policy(options, spec)  # a listener open to the network without authentication: refused here
        except ServerError as exc:
            fail(str(exc), 2)

    async def main() -> None:
        stop = trio.Event()
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        if stop.is_set():
                            nursery.cancel_scope.cancel()  # a second signal: stop at once
                            return
                        stop.set()

            nursery.start_soon(watch_signals)
            await run_server(options, stop)
            nursery.cancel_scope.cancel()

    error = None
    try:
        trio.run(main)
    except* ServerError as group:  # raised inside the nursery, hence grouped
        error = str(group.exceptions[0])
    if error is not None:
        fail(error)
