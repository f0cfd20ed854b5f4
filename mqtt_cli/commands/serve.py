"""``mqtt serve``: run the broker."""

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqtt_cli.commands import fail, say
from mqtt_cli.commands._limit_flags import LIMITS_PANEL, with_limits
from mqtt_cli.exit_codes import EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from mqtt_cli.net.log import BrokerLog
    from mqtt_cli.net.process import PidFile
    from mqtt_cli.net.server import ServeOptions
    from mqtt_cli.net.serving import Serving

FILES = "Configuration"
LOG = "Logging (over the file's log section)"
AUTH = "Authentication (over the file's auth section)"


class LogFormat(StrEnum):
    text = "text"
    json = "json"


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"
    none = "none"


@with_limits
def serve(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Broker configuration (TOML; docs/broker.md). Flags override it.",
            rich_help_panel=FILES,
        ),
    ] = None,
    mosquitto_conf: Annotated[
        Path | None,
        typer.Option(
            help="Run on a mosquitto.conf instead (each line that cannot be honoured is listed).", rich_help_panel=FILES
        ),
    ] = None,
    ignore_unsupported: Annotated[
        bool,
        typer.Option(
            "--ignore-unsupported",
            help="Start even though some mosquitto.conf lines cannot be honoured.",
            rich_help_panel=FILES,
        ),
    ] = False,
    print_config: Annotated[
        bool,
        typer.Option(
            "--print-config", help="Print the effective configuration (TOML) and exit.", rich_help_panel=FILES
        ),
    ] = False,
    host: Annotated[str | None, typer.Option("--host", help="Address of the listener (default 127.0.0.1).")] = None,
    port: Annotated[
        int | None, typer.Option("--port", "-p", help="Port of the listener (default 1883; 0: any free port).")
    ] = None,
    listen: Annotated[
        list[str] | None,
        typer.Option(
            "--listen",
            "-l",
            help=r"A listener URL: mqtt://HOST:PORT, mqtts://HOST:PORT, ws://HOST:PORT\[/PATH], "
            r"wss://HOST:PORT\[/PATH] "
            "or unix:///PATH, with settings as ?versions=3.1.1,5&max_connections=N (unix: &mode=0660); "
            "repeatable. Replaces the file's listeners and --host/--port (docs/broker.md).",
        ),
    ] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="Certificate (PEM) for mqtts:// and wss:// listeners.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Private key (PEM) for mqtts:// and wss:// listeners.")] = None,
    tls_cafile: Annotated[Path | None, typer.Option(help="CA certificates to check client certificates.")] = None,
    require_certificate: Annotated[
        bool, typer.Option("--require-certificate", help="Refuse TLS clients without a valid certificate.")
    ] = False,
    ready_file: Annotated[
        Path | None, typer.Option(help="Write the bound listeners there (JSON) once listening.")
    ] = None,
    metrics_listen: Annotated[
        str | None,
        typer.Option(
            help="Serve GET /metrics (Prometheus), /healthz and /readyz over HTTP at HOST:PORT (0: any free port; "
            "the ready file tells which). Replaces the file's \\[metrics] listen.",
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log connections too (--log-level info).", rich_help_panel=LOG)
    ] = False,
    log_level: Annotated[
        LogLevel | None, typer.Option(help="Least important lines logged (default warning).", rich_help_panel=LOG)
    ] = None,
    log_format: Annotated[
        LogFormat | None, typer.Option(help="Log lines for people or for machines.", rich_help_panel=LOG)
    ] = None,
    log_file: Annotated[
        Path | None, typer.Option(help="Append the log there (SIGUSR2 reopens it).", rich_help_panel=LOG)
    ] = None,
    syslog: Annotated[
        bool, typer.Option("--syslog", help="Also log to syslog (/dev/log).", rich_help_panel=LOG)
    ] = False,
    persistence: Annotated[
        Path | None,
        typer.Option(
            help="Keep retained messages, persistent sessions and their queued messages in this SQLite file "
            "(created if missing): what was acknowledged survives a restart, even kill -9. Default: nothing kept.",
            rich_help_panel=FILES,
        ),
    ] = None,
    skip_mosquitto_db: Annotated[
        bool,
        typer.Option(
            "--skip-mosquitto-db",
            help="Start without taking over mosquitto's persistence file (mosquitto.db beside the database, or "
            "mosquitto.conf's persistence_file) when there is no database yet; the file is left as it is.",
            rich_help_panel=FILES,
        ),
    ] = False,
    sys_interval: Annotated[
        float | None,
        typer.Option(help="Seconds between $SYS updates (0: none; default 10).", rich_help_panel=LIMITS_PANEL),
    ] = None,
    password_file: Annotated[
        Path | None,
        typer.Option(
            help="Users and password hashes, mosquitto's format (made by `mqtt passwd` or mosquitto_passwd).",
            rich_help_panel=AUTH,
        ),
    ] = None,
    acl_file: Annotated[
        Path | None,
        typer.Option(help="Who may read and write which topics, mosquitto's acl_file format.", rich_help_panel=AUTH),
    ] = None,
    allow_anonymous: Annotated[
        bool | None,
        typer.Option(
            "--allow-anonymous/--no-allow-anonymous",
            help="Clients without a user name. Default: allowed on a loopback listener without authentication, "
            "refused otherwise; a listener on another address with no authentication needs it said explicitly.",
            rich_help_panel=AUTH,
        ),
    ] = None,
    use_identity_as_username: Annotated[
        bool,
        typer.Option(
            "--use-identity-as-username",
            help="mqtts/wss: the client certificate's CN is the user name (needs --tls-cafile).",
            rich_help_panel=AUTH,
        ),
    ] = False,
    use_subject_as_username: Annotated[
        bool,
        typer.Option(
            "--use-subject-as-username",
            help="mqtts/wss: the client certificate's whole subject (RFC 2253, as mosquitto) is the user name.",
            rich_help_panel=AUTH,
        ),
    ] = False,
    *,
    limits: dict[str, Any],
) -> None:
    """Run an MQTT 3.1 / 3.1.1 / 5.0 broker.

    Listens on 127.0.0.1:1883 unless told otherwise (--listen, or a --config file: docs/broker.md). SIGINT or SIGTERM shut it down gracefully: the wills of connected clients are published and 5.0 clients told why; a second signal stops it at once. SIGHUP reloads the configuration; SIGUSR2 reopens the log file.

    Exit codes: 0 stopped by a signal, 1 could not start (port in use, a certificate, log or ready file that cannot be read or written, a mosquitto.db to take over that cannot be read), 2 bad usage or configuration.
    """  # noqa: E501 - typer keeps a docstring's line breaks in --help
    import os
    import sys

    from mqtt_cli import version_text
    from mqtt_cli.core.config import (
        BrokerSettings,
        ConfigError,
        Origin,
        override,
        override_listeners,
        parse_metrics_address,
    )
    from mqtt_cli.net.config import ConfigSource, FileProblem, toml_text, writable
    from mqtt_cli.net.log import BrokerLog, LogError
    from mqtt_cli.net.process import PidFile, ProcessError, run_as
    from mqtt_cli.net.server import Listener
    from mqtt_cli.net.serving import Serving, checked_options, unsupported_error

    if config is not None and mosquitto_conf is not None:
        fail("give --config or --mosquitto-conf, not both", EXIT_USAGE)
    source = ConfigSource(config or mosquitto_conf, mosquitto=mosquitto_conf is not None,
                          ignore_unsupported=ignore_unsupported)  # fmt: skip
    if metrics_listen is not None:
        try:
            parse_metrics_address(metrics_listen)
        except ValueError as exc:
            fail(f"command line: --metrics-listen: {exc}", EXIT_USAGE)
    urls = _listen_urls(listen, host, port)

    level = log_level.value if log_level is not None else "info" if verbose else None
    sections = {  # the flags over the file's sections (None: not given)
        "limits": limits, "sys": {"interval": sys_interval}, "metrics": {"listen": metrics_listen},
        "persistence": {"path": _str(persistence), "skip_mosquitto_db": skip_mosquitto_db or None},
        "auth": {"password_file": _str(password_file), "acl_file": _str(acl_file), "allow_anonymous": allow_anonymous,
                 "use_identity_as_username": use_identity_as_username or None,
                 "use_subject_as_username": use_subject_as_username or None},
        "log": {"level": level, "format": log_format.value if log_format else None, "file": _str(log_file),
                "syslog": syslog or None},
    }  # fmt: skip
    tls = {"certfile": _str(tls_cert), "keyfile": _str(tls_key), "cafile": _str(tls_cafile),
           "require_certificate": require_certificate}  # fmt: skip

    def apply_flags(settings: BrokerSettings) -> BrokerSettings:
        """The command line over the file, on start and on every reload."""
        settings = override_listeners(settings, urls, tls)
        for section, values in sections.items():
            settings = override(settings, section, values, _FLAG_NAMES.get(section))
        return settings

    # The flags naming files, by the key they set: an error about such a file names the flag.
    file_flags = {
        "listener[].certfile": ("--tls-cert", tls_cert), "listener[].keyfile": ("--tls-key", tls_key),
        "listener[].cafile": ("--tls-cafile", tls_cafile), "auth.password_file": ("--password-file", password_file),
        "auth.acl_file": ("--acl-file", acl_file), "log.file": ("--log-file", log_file),
        "persistence.path": ("--persistence", persistence),
    }  # fmt: skip
    flags = {key: flag for key, (flag, value) in file_flags.items() if value is not None}

    def listening(bound: list[Listener]) -> None:
        assert serving.log is not None  # opened before the broker starts
        serving.log.status(f"mqtt serve: listening on {', '.join(b.url for b in bound)}")

    try:
        translation = source.read()
        for line in translation.unsupported:
            say(f"mqtt: {'warning' if ignore_unsupported or print_config else 'error'}: {line}")
        if print_config:
            settings = apply_flags(translation.settings)
            # What a start would refuse, refused here too.
            checked_options(settings, source.label, files=False, origin=Origin(source.label, translation.places, flags))
            comments = "".join(f"# not translated: {line}\n" for line in translation.unsupported)
            sys.stdout.write(comments + toml_text(settings))
            raise typer.Exit(EXIT_OK)
        if translation.unsupported and not ignore_unsupported:
            raise unsupported_error(source, len(translation.unsupported))
        if ready_file is not None:
            writable(ready_file, "ready file")
        serving = Serving(source, apply_flags, os.urandom(4).hex(), version_text(), ready_file, listening, flags=flags)
        settings, options = serving.options(translation)
        user = run_as(settings.process.user)  # before anything is written: a user that does not exist stops here
        log = serving.log = BrokerLog(settings.log)  # opened once everything else is known to be good
        serving.wire(options, settings)
        serving.process = settings.process
        pid_file = None if settings.process.pid_file is None else PidFile(Path(settings.process.pid_file))
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except (FileProblem, LogError, ProcessError) as exc:
        fail(str(exc))
    if user is not None:
        options.on_bound = lambda: serving.become(user, settings, pid_file)

    _run(serving, options, log, pid_file)


#: The flags that set a key of another name (the others are `--` and the key, `--max-keepalive`): errors name them.
_FLAG_NAMES = {"sys": {"interval": "--sys-interval"}, "metrics": {"listen": "--metrics-listen"},
               "persistence": {"path": "--persistence"}}  # fmt: skip


def _listen_urls(listen: list[str] | None, host: str | None, port: int | None) -> list[str]:
    """The --listen URLs, or the one --host and --port make (none: the file's listeners)."""
    if listen or (host is None and port is None):
        return list(listen or [])
    if port is not None and not 0 <= port <= 65535:
        fail(f"--port {port} is outside 0..65535", EXIT_USAGE)
    address = host or "127.0.0.1"
    return [f"mqtt://{f'[{address}]' if ':' in address else address}:{1883 if port is None else port}"]


def _run(serving: "Serving", options: "ServeOptions", log: "BrokerLog", pid_file: "PidFile | None") -> None:
    """Runs the broker until a signal stops it; a failure after the start (a port in use) is one line, exit 1."""
    import trio

    from mqtt_cli.net.process import ProcessError
    from mqtt_cli.net.server import ServerError

    error = None
    try:
        trio.run(serving.run, options)
    except* (ServerError, ProcessError) as group:  # raised inside the nursery (or nurseries), hence grouped
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        error = str(first)
    finally:
        log.close()
        if pid_file is not None:
            pid_file.remove()
    if error is not None:
        fail(error)


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)
