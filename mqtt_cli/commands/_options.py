"""The connection options every client command shares (pub, sub, rr): same names, same meaning.

A command lists them in its signature with the `Annotated` aliases below and hands the values to
`client_settings()` (in _settings.py, without typer), which applies the precedence: flags > environment
(MQTT_HOST, MQTT_PORT, ...) > profile (``--profile``, config.toml) > built-in defaults. Only typer and the
standard library are imported here at module level (the client commands import this module before they run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from mqtt_cli.exit_codes import EXIT_USAGE

from ._settings import VERSIONS, Resolved, client_settings, parse_user_properties, stdin_closed

CONN = "Connection"
CRED = "Credentials"
TLS = "TLS"
WILL = "Will"

DProperty = Annotated[
    list[str] | None,
    typer.Option(
        "-D", "--property", metavar="COMMAND NAME VALUE", show_default=False,
        help="An MQTT 5.0 property, as mosquitto's clients take it (repeatable): -D PUBLISH user-property KEY VALUE, "
        "-D CONNECT session-expiry-interval 60, ... COMMAND: CONNECT, PUBLISH, SUBSCRIBE, UNSUBSCRIBE, DISCONNECT "
        "or WILL; NAME: the spec's, in lowercase with hyphens.",
    ),
]  # fmt: skip
Host = Annotated[
    str | None,
    typer.Option("-h", "--host", envvar="MQTT_HOST", help="Broker host (default: localhost).", rich_help_panel=CONN),
]
Port = Annotated[
    int | None,
    typer.Option(
        "-p", "--port", envvar="MQTT_PORT", min=1, max=65535, help="Broker port (default: 1883, 8883 with TLS).",
        rich_help_panel=CONN,
    ),
]  # fmt: skip
Url = Annotated[
    str | None,
    typer.Option(
        "-L", "--url", envvar="MQTT_URL", rich_help_panel=CONN,
        help=r"mqtt\[s]://\[user\[:pass]@]host\[:port]\[/topic], ws\[s]://host\[:port]\[/path] or unix:///path.",
    ),
]  # fmt: skip
Unix = Annotated[
    str | None, typer.Option("--unix", envvar="MQTT_UNIX", help="Connect to this Unix socket.", rich_help_panel=CONN)
]
ClientId = Annotated[
    str | None,
    typer.Option(
        "-i", "--id", envvar="MQTT_CLIENT_ID", help="Client identifier (default: random).", rich_help_panel=CONN
    ),
]
IdPrefix = Annotated[
    str | None,
    typer.Option("-I", "--id-prefix", help="Random client identifier with this prefix.", rich_help_panel=CONN),
]
Keepalive = Annotated[
    int | None,
    typer.Option(
        "-k", "--keepalive", min=0, max=65535, help="Keepalive in seconds (default: 60).", rich_help_panel=CONN
    ),
]
ProtocolVersion = Annotated[
    str | None,
    typer.Option(
        "-V", "--protocol-version", envvar="MQTT_PROTOCOL_VERSION", rich_help_panel=CONN,
        help="31, 311, 5 or auto (5, falling back to 3.1.1 when the broker refuses 5.0) (default: auto).",
    ),
]  # fmt: skip
NoClean = Annotated[
    bool | None,
    typer.Option(
        "-c", "--disable-clean-session", rich_help_panel=CONN,
        help="Keep the session (subscriptions, queued messages) when disconnected; needs -i.",
    ),
]  # fmt: skip
SessionExpiry = Annotated[
    int | None,
    typer.Option(
        "-x", "--session-expiry", min=0, max=0xFFFFFFFF, rich_help_panel=CONN,
        help="5.0 session expiry interval in seconds.",
    ),
]  # fmt: skip
ConnectTimeout = Annotated[
    float | None,
    typer.Option("--connect-timeout", min=0.1, help="Seconds to connect (default: 10).", rich_help_panel=CONN),
]
Reconnect = Annotated[
    bool,
    typer.Option(
        "--reconnect", rich_help_panel=CONN,
        help="Reconnect (with backoff, on the same session) when the connection is lost; no loss at QoS 1/2.",
    ),
]  # fmt: skip
Debug = Annotated[
    bool,
    typer.Option(
        "-d", "--debug", rich_help_panel=CONN,
        help="Print each packet sent and received to standard output, in mosquitto_pub/sub -d's words.",
    ),
]  # fmt: skip
#: How every command names a profile (clients, `mqtt config set/show`).
PROFILE_FLAG = "--profile"
PROFILE_ENV = "MQTT_PROFILE"
Profile = Annotated[
    str | None,
    typer.Option(
        PROFILE_FLAG, envvar=PROFILE_ENV, metavar="NAME", help="Defaults from this profile (mqtt config).",
        rich_help_panel=CONN,
    ),
]  # fmt: skip
Username = Annotated[
    str | None, typer.Option("-u", "--username", envvar="MQTT_USERNAME", help="User name.", rich_help_panel=CRED)
]
Password = Annotated[
    str | None,
    typer.Option(
        "-P", "--password", envvar="MQTT_PASSWORD", show_envvar=True, rich_help_panel=CRED,
        help="Password; without a value, asked for on the terminal. Prefer MQTT_PASSWORD or --password-file.",
    ),
]  # fmt: skip
PasswordPrompt = Annotated[bool, typer.Option("--password-prompt", hidden=True)]
PasswordFile = Annotated[
    str | None,
    typer.Option(
        "--password-file", envvar="MQTT_PASSWORD_FILE", rich_help_panel=CRED,
        help="Read the password from this file (its first line).",
    ),
]  # fmt: skip
CaFile = Annotated[
    str | None, typer.Option("--cafile", help="CA certificates to trust (PEM); implies TLS.", rich_help_panel=TLS)
]
CaPath = Annotated[
    str | None, typer.Option("--capath", help="Directory of CA certificates; implies TLS.", rich_help_panel=TLS)
]
Cert = Annotated[str | None, typer.Option("--cert", help="Client certificate (PEM).", rich_help_panel=TLS)]
Key = Annotated[str | None, typer.Option("--key", help="Client private key (PEM).", rich_help_panel=TLS)]
Insecure = Annotated[
    bool | None,
    typer.Option("--insecure", help="TLS without checking the broker's certificate or name.", rich_help_panel=TLS),
]
TlsVersion = Annotated[
    str | None, typer.Option("--tls-version", help="Minimum TLS version: tlsv1.2 or tlsv1.3.", rich_help_panel=TLS)
]
Alpn = Annotated[list[str] | None, typer.Option("--alpn", help="ALPN protocol (repeatable).", rich_help_panel=TLS)]
WillTopic = Annotated[str | None, typer.Option("--will-topic", help="Will message topic.", rich_help_panel=WILL)]
WillPayload = Annotated[str | None, typer.Option("--will-payload", help="Will message payload.", rich_help_panel=WILL)]
WillQos = Annotated[int, typer.Option("--will-qos", min=0, max=2, help="Will QoS.", rich_help_panel=WILL)]
WillRetain = Annotated[bool, typer.Option("--will-retain", help="Retain the will message.", rich_help_panel=WILL)]
WillDelay = Annotated[
    int | None, typer.Option("--will-delay", min=0, help="5.0 will delay interval (s).", rich_help_panel=WILL)
]
WillExpiry = Annotated[
    int | None, typer.Option("--will-message-expiry", min=0, help="5.0 will message expiry (s).", rich_help_panel=WILL)
]
WillContentType = Annotated[
    str | None, typer.Option("--will-content-type", help="5.0 will content type.", rich_help_panel=WILL)
]
WillUserProperty = Annotated[
    list[str] | None,
    typer.Option("--will-user-property", help="5.0 will user property k=v (repeatable).", rich_help_panel=WILL),
]

#: The connection options of every client command, defined once: (parameter name, its option, its default).
#: `with_connection` adds them to a command's signature; the command gets their values as one dict.
_CONNECTION: tuple[tuple[str, Any, Any], ...] = (
    ("host", Host, None), ("port", Port, None), ("url", Url, None), ("unix", Unix, None),
    ("client_id", ClientId, None), ("id_prefix", IdPrefix, None), ("keepalive", Keepalive, None),
    ("protocol_version", ProtocolVersion, None), ("no_clean", NoClean, None), ("session_expiry", SessionExpiry, None),
    ("connect_timeout", ConnectTimeout, None), ("reconnect", Reconnect, False), ("debug", Debug, False),
    ("profile", Profile, None), ("username", Username, None), ("password", Password, None),
    ("password_prompt", PasswordPrompt, False), ("password_file", PasswordFile, None), ("cafile", CaFile, None),
    ("capath", CaPath, None), ("cert", Cert, None), ("key", Key, None), ("insecure", Insecure, None),
    ("tls_version", TlsVersion, None), ("alpn", Alpn, None), ("will_topic", WillTopic, None),
    ("will_payload", WillPayload, None), ("will_qos", WillQos, 0), ("will_retain", WillRetain, False),
    ("will_delay", WillDelay, None), ("will_expiry", WillExpiry, None), ("will_content_type", WillContentType, None),
    ("will_user_property", WillUserProperty, None),
)  # fmt: skip
#: The parameter names of the connection options, as they appear in a command's signature.
CONNECTION_PARAMS = tuple(name for name, _, _ in _CONNECTION)


def with_connection(command: Callable[..., None]) -> Callable[..., None]:
    """A client command with the connection options: typer sees them in the signature (after the command's own),
    and the command receives them as one dict, `conn`, for client_settings()."""
    import functools
    import inspect

    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "conn"]
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=option)
             for name, option, default in _CONNECTION]  # fmt: skip

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        conn = {name: kwargs.pop(name) for name in CONNECTION_PARAMS}
        command(*args, conn=conn, **kwargs)

    run.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
    run.__annotations__ = {**{k: v for k, v in command.__annotations__.items() if k != "conn"},
                           **{p.name: p.annotation for p in added}}  # fmt: skip
    return run


def _option_names(option: Any) -> list[str]:
    from typing import get_args

    info = get_args(option)[1]
    return [d for d in (info.default, *info.param_decls) if isinstance(d, str) and d.startswith("-")]


def _is_flag(option: Any) -> bool:
    from typing import get_args

    return get_args(option)[0] in (bool, bool | None)


_PROMPT_FLAGS = ("-P", "--password")
CLIENT_COMMANDS = ("pub", "sub", "rr")
# The connection options that take a value and those that do not (from their definitions), and the
# options every client command adds: -q/--qos and -t/--topic take a value, --help does not.
_SHARED_VALUES = " ".join(n for _, opt, _ in _CONNECTION if not _is_flag(opt) for n in _option_names(opt))
_SHARED_VALUES += " --qos --topic -q -t --property -D"
_SHARED_FLAGS = " ".join(n for _, opt, _ in _CONNECTION if _is_flag(opt) for n in _option_names(opt)) + " --help"
#: The options of each client command that take a value, and those that do not (tests/test_cli.py checks them
#: against the commands): rewrite_optional_values() must know which tokens are values.
VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "pub": frozenset(f"""{_SHARED_VALUES} --content-type --correlation-data --file --format --message --message-expiry
        --payload-format --repeat --repeat-delay --response-topic --topic-alias --user-property -f -m""".split()),
    "sub": frozenset(f"""{_SHARED_VALUES} --count --filter-out --format --output --print-format --retain-handling
        --subscription-identifier --timeout --unsubscribe -C -F -T -U -W""".split()),
    "rr": frozenset(f"""{_SHARED_VALUES} --correlation-data --file --format --message --response-topic --timeout -W -e
        -f -m""".split()),
}  # fmt: skip
FLAG_OPTIONS: dict[str, frozenset[str]] = {
    "pub": frozenset(f"""{_SHARED_FLAGS} --json-lines --null-message --retain --stdin-file --stdin-line -l -n -r
        -s""".split()),
    "sub": frozenset(f"""{_SHARED_FLAGS} --exit-on-subscribe --hex --json --no-local --no-newline --no-retained
        --remove-retained --retain-as-published --retained-only --stats --verbose -E -N -R -v""".split()),
    "rr": frozenset(f"{_SHARED_FLAGS} --hex --json --no-newline --null-message --stdin-file --verbose -N -n -s -v"
                    .split()),
}  # fmt: skip


def _is_option(token: str, values: frozenset[str], flags: frozenset[str]) -> bool:
    """`token` is one of the command's options: `--name`, `--name=value`, `-x`, `-xVALUE` for an option that
    takes a value, or a cluster of flags (`-vN`)."""
    if token.startswith("--"):
        name = token.partition("=")[0]
        return name in values or name in flags or token == "--"
    if len(token) < 2 or not token.startswith("-"):
        return False
    if token[:2] in values:
        return True
    return all(f"-{c}" in flags for c in token[1:])


def rewrite_optional_values(args: list[str]) -> list[str]:
    """`-P`/`--password` without a value (last, or followed by one of the command's options) asks for the
    password: click options cannot take an optional value, so that spelling becomes the hidden flag
    --password-prompt. Any other token after -P is the password, even one starting with '-' (`-P -secret`), as
    with mosquitto_pub; the value of an option that takes one (`-m -P`) is never rewritten."""
    if not args or args[0] not in CLIENT_COMMANDS or not any(a in _PROMPT_FLAGS for a in args):
        return args
    values, flags = VALUE_OPTIONS[args[0]], FLAG_OPTIONS[args[0]]
    out = list(args)
    i = 1
    while i < len(out):
        arg = out[i]
        if arg == "--":
            break
        if arg in _PROMPT_FLAGS:
            nxt = out[i + 1] if i + 1 < len(out) else None
            if nxt is None or _is_option(nxt, values, flags):
                out[i] = "--password-prompt"
                i += 1
            else:
                i += 2  # the password
        elif arg in values:
            i += 2  # the option's value, whatever it looks like
        else:
            i += 1
    return out


__all__ = ["EXIT_USAGE", "VERSIONS", "Resolved", "client_settings", "parse_user_properties", "stdin_closed"]
