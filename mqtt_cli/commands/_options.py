"""The connection options every client command shares (pub, sub, rr): same names, same meaning.

A command lists them in its signature with the `Annotated` aliases below and hands the values to
`client_settings()`, which applies the precedence: flags > environment (MQTT_HOST, MQTT_PORT, ...) >
profile (``--profile``, config.toml) > built-in defaults. Only typer and the standard library are imported
here at module level (the client commands import this module before they run).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mqtt_cli.exit_codes import EXIT_USAGE
from mqtt_cli.profiles import PROTOCOL_VERSIONS

from . import fail

if TYPE_CHECKING:
    from mqtt_cli.net.client import ClientSettings

CONN = "Connection"
CRED = "Credentials"
TLS = "TLS"
WILL = "Will"

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


VERSIONS = PROTOCOL_VERSIONS
_PROMPT_FLAGS = ("-P", "--password")
CLIENT_COMMANDS = ("pub", "sub", "rr")
# The connection options that take a value and those that do not (from their definitions), and the
# options every client command adds: -q/--qos and -t/--topic take a value, --help does not.
_SHARED_VALUES = " ".join(n for _, opt, _ in _CONNECTION if not _is_flag(opt) for n in _option_names(opt))
_SHARED_VALUES += " --qos --topic -q -t"
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


@dataclass
class Resolved:
    """What the options resolve to, beyond the settings: the topic of an mqtt:// URL, the profile's QoS."""

    settings: ClientSettings
    url_topic: str | None
    profile: dict[str, Any]


def parse_user_properties(values: list[str] | None, flag: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values or ():
        key, sep, val = value.partition("=")
        if not sep or not key:
            fail(f"{flag} {value!r}: expected KEY=VALUE", EXIT_USAGE)
        pairs.append((key, val))
    return pairs


def client_settings(
    params: dict[str, Any], ctx: typer.Context | None = None, *, reconnect_session_expiry: int = 3600
) -> Resolved:
    """ClientSettings from a command's connection options (its `locals()`); exits 2 on bad values.

    `ctx` tells where each value came from (command line or environment), for the password's precedence."""
    from mqtt_cli.core.packets import Will
    from mqtt_cli.core.properties import Properties
    from mqtt_cli.net.client import ClientSettings, _random_id
    from mqtt_cli.net.transports import Endpoint, TLSOptions, make_ssl_context, parse_url
    from mqtt_cli.profiles import ProfileError, load_profile

    p = dict(params)
    sources = {name: _source(ctx, name) for name in ("password", "password_file")}
    try:
        profile = load_profile(p["profile"])
    except ProfileError as err:
        fail(str(err), EXIT_USAGE)

    def pick(name: str, key: str | None = None, default: Any = None) -> Any:
        value = p.get(name)
        if value is not None and value != []:
            return value
        return profile.get(key or name, default)

    # Where the broker is: the highest level (command line > environment > profile) naming any of url, unix,
    # host or port decides alone: a -p on the command line replaces a profile's url or unix as a whole (the
    # host it leaves out comes from lower levels' host, never from their url).
    levels = _target_levels(p, ctx, profile)
    level, target = next(((lv, t) for lv, t in levels if t), ("default", {}))
    where = {"cmd": "", "env": "MQTT_", "profile": f"profile {p['profile'] or 'default'!r}: "}.get(level, "")
    url = target.get("url")
    unix = target.get("unix")
    if url and unix:
        fail(f"{_names(level, 'url')} and {_names(level, 'unix')} both say where the broker is: give one", EXIT_USAGE)
    tls_files = any(pick(k) for k in ("cafile", "capath", "cert")) or bool(pick("insecure"))
    url_topic = None
    url_user = url_pass = None
    if url:
        try:
            parsed = parse_url(url)
        except ValueError as err:
            fail(f"{where if level == 'profile' else ''}{_names(level, 'url')}: {err}", EXIT_USAGE)
        endpoint = parsed.endpoint
        url_topic, url_user, url_pass = parsed.topic, parsed.username, parsed.password
        if level != "profile" and ("host" in target or "port" in target):
            fail(f"{_names(level, 'url')} already names the host and port: drop {_names(level, 'host')}/"
                 f"{_names(level, 'port')} or {_names(level, 'url')}", EXIT_USAGE)  # fmt: skip
        if tls_files and endpoint.scheme in ("mqtt", "ws"):
            endpoint = Endpoint("mqtts" if endpoint.scheme == "mqtt" else "wss", endpoint.host, endpoint.port,
                                endpoint.path, True)  # fmt: skip
    elif unix:
        endpoint = Endpoint("unix", "", 0, unix)
    else:
        lower = [t for lv, t in levels if lv != level and t] if level != "default" else []
        host = target.get("host") or next((t["host"] for t in lower if "host" in t), "localhost")
        tls = tls_files
        port = target.get("port") or next((t["port"] for t in lower if "port" in t), 8883 if tls else 1883)
        endpoint = Endpoint("mqtts" if tls else "mqtt", host, port, "/mqtt", tls)

    ssl_context = None
    if endpoint.tls:
        try:
            ssl_context = make_ssl_context(
                TLSOptions(
                    cafile=_expand(pick("cafile")),
                    capath=_expand(pick("capath")),
                    cert=_expand(pick("cert")),
                    key=_expand(pick("key")),
                    insecure=bool(pick("insecure", default=False)),
                    version=pick("tls_version"),
                    alpn=tuple(p.get("alpn") or ([profile["alpn"]] if "alpn" in profile else [])),
                )
            )
        except ValueError as err:
            fail(str(err), EXIT_USAGE)

    raw_version = str(pick("protocol_version", default="auto")).lower()
    if raw_version not in VERSIONS:
        fail(f"-V/--protocol-version {raw_version!r}: use 31, 311, 5 or auto", EXIT_USAGE)
    version = VERSIONS[raw_version]

    # A URL's user and password go together: its user beats -u/MQTT_USERNAME of lower levels, and its
    # password is used only with its user.
    username = url_user
    user_level = _level(p, ctx, "username")
    order = ("cmd", "env", "profile")
    if user_level is not None and (level not in order or order.index(user_level) <= order.index(level)):
        username = p["username"]
    elif username is None:
        username = pick("username")
    if url_user is not None and username != url_user:
        url_pass = None  # another user's password
    password = _password(p, sources, profile, url_pass, level)
    if password is not None and username is None and version in (3, 4):
        fail("a password needs a user name (-u) before MQTT 5.0", EXIT_USAGE)

    if version in (3, 4):
        v5_only = [flag for flag, name in (("-x/--session-expiry", "session_expiry"), ("--will-delay", "will_delay"),
                   ("--will-message-expiry", "will_expiry"), ("--will-content-type", "will_content_type"),
                   ("--will-user-property", "will_user_property")) if p.get(name) not in (None, [])]  # fmt: skip
        if v5_only:
            fail(f"{', '.join(v5_only)} need MQTT 5.0: drop them or use -V 5", EXIT_USAGE)

    client_id = pick("client_id", "id")
    if client_id is None and p.get("no_clean"):
        # A kept session under a random identifier would never be resumed, nor ever expire (mosquitto_sub -c
        # refuses too).
        fail("-c keeps the session under the client identifier: give one with -i ID", EXIT_USAGE)
    if client_id is None:
        client_id = _random_id(pick("id_prefix", default="mqtt-cli-"))
    if len(client_id.encode()) > 23 and version == 3:
        fail(f"-i {client_id!r}: MQTT 3.1 client identifiers have at most 23 characters", EXIT_USAGE)

    will = None
    will_topic = p.get("will_topic")
    if will_topic is not None:
        from mqtt_cli.core.topics import topic_name_error

        if err := topic_name_error(will_topic):
            fail(f"--will-topic {will_topic!r}: {err}", EXIT_USAGE)
        will_props = Properties(
            will_delay_interval=p.get("will_delay"),
            message_expiry_interval=p.get("will_expiry"),
            content_type=p.get("will_content_type"),
            user_properties=parse_user_properties(p.get("will_user_property"), "--will-user-property"),
        )
        will = Will(will_topic, (p.get("will_payload") or "").encode(), p.get("will_qos") or 0,
                    bool(p.get("will_retain")), will_props)  # fmt: skip
    else:
        given = [flag for flag, name in (("--will-payload", "will_payload"), ("--will-qos", "will_qos"),
                 ("--will-retain", "will_retain"), ("--will-delay", "will_delay"),
                 ("--will-message-expiry", "will_expiry"), ("--will-content-type", "will_content_type"),
                 ("--will-user-property", "will_user_property"))
                 if p.get(name) or (name in ("will_qos", "will_retain") and _level(p, ctx, name) == "cmd")]  # fmt: skip
        if given:
            fail(f"{', '.join(given)}: will options need --will-topic", EXIT_USAGE)

    reconnect = bool(p.get("reconnect"))
    session_expiry = pick("session_expiry")
    if session_expiry is None and p.get("no_clean"):
        session_expiry = 0xFFFFFFFF  # -c on 5.0: a session that outlives the connection (as mosquitto_sub -c)
    if reconnect and session_expiry is None:
        session_expiry = reconnect_session_expiry  # the session must outlive a lost connection
    settings = ClientSettings(
        endpoint=endpoint,
        ssl_context=ssl_context,
        client_id=client_id,
        version=version,
        keepalive=pick("keepalive", default=60),
        clean_start=not bool(p.get("no_clean")),
        session_expiry=session_expiry,
        username=username,
        password=password,
        will=will,
        connect_timeout=float(pick("connect_timeout", default=10.0)),
        tls_client_cert=bool(pick("cert")),
        reconnect=reconnect,
        trace=_debug_line if p.get("debug") else None,
    )
    return Resolved(settings, url_topic, profile)


def _debug_line(line: str) -> None:
    """-d: to standard output, as mosquitto's clients print it, in order with the messages (same buffer)."""
    sys.stdout.flush()  # what rich or print() wrote first
    out = sys.stdout.buffer
    out.write(line.encode("utf-8", "replace") + b"\n")
    out.flush()


def stdin_closed() -> bool:
    """Standard input is closed (`<&-`): Python then sets sys.stdin to None."""
    return sys.stdin is None or getattr(sys.stdin, "buffer", None) is None


def _expand(path: str | None) -> str | None:
    return os.path.expanduser(path) if path else path


def _source(ctx: typer.Context | None, name: str) -> str | None:
    """ "cmd", "env" or None (default) for parameter `name`."""
    if ctx is None:
        return None
    source = ctx.get_parameter_source(name)
    if source is None:
        return None
    return {"COMMANDLINE": "cmd", "ENVIRONMENT": "env"}.get(source.name)


_TARGET = ("url", "unix", "host", "port")
_ENV_NAMES = {"url": "MQTT_URL", "unix": "MQTT_UNIX", "host": "MQTT_HOST", "port": "MQTT_PORT"}
_FLAG_NAMES = {"url": "--url", "unix": "--unix", "host": "-h", "port": "-p"}


def _names(level: str, key: str) -> str:
    return {"cmd": _FLAG_NAMES, "env": _ENV_NAMES}.get(level, {}).get(key, key)


def _level(p: dict[str, Any], ctx: typer.Context | None, name: str) -> str | None:
    """ "cmd" or "env" for an option given on the command line or in the environment, else None."""
    if p.get(name) is None or p.get(name) == []:
        return None
    return "cmd" if ctx is None else _source(ctx, name)


def _target_levels(
    p: dict[str, Any], ctx: typer.Context | None, profile: dict[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """The broker's address as each level gives it (url, unix, host, port), highest level first."""
    out: list[tuple[str, dict[str, Any]]] = []
    for level in ("cmd", "env"):
        out.append((level, {k: p[k] for k in _TARGET if _level(p, ctx, k) == level}))
    out.append(("profile", {k: profile[k] for k in _TARGET if k in profile}))
    return out


def _password(
    p: dict[str, Any],
    sources: dict[str, str | None],
    profile: dict[str, Any],
    url_pass: str | None,
    url_level: str = "cmd",
) -> bytes | None:
    """The password by precedence: prompt, flags (--password, --password-file, the URL's), environment
    (MQTT_PASSWORD, MQTT_PASSWORD_FILE, MQTT_URL's), profile (password_file, password, its url's)."""
    if p.get("password_prompt"):
        if not sys.stdin.isatty():
            fail("-P/--password needs a value: there is no terminal to ask on (or use MQTT_PASSWORD)", EXIT_USAGE)
        import getpass

        return getpass.getpass("Password: ").encode()
    for level in ("cmd", "env"):
        if p.get("password") is not None and sources["password"] == level:
            if p.get("password_file") is not None and sources["password_file"] == level:
                fail("--password and --password-file both give the password: use one", EXIT_USAGE)
            return str(p["password"]).encode()
        if p.get("password_file") is not None and sources["password_file"] == level:
            return _read_password_file(p["password_file"])
        if level == url_level and url_pass is not None:
            return url_pass.encode()
    if p.get("password") is not None:  # no context: a value is a value
        return str(p["password"]).encode()
    if p.get("password_file") is not None:
        return _read_password_file(p["password_file"])
    if url_pass is not None and url_level not in ("cmd", "env"):
        return url_pass.encode()
    if "password_file" in profile:
        return _read_password_file(profile["password_file"])
    if "password" in profile:
        return str(profile["password"]).encode()
    return None


def _read_password_file(file: str) -> bytes:
    path = os.path.expanduser(file)
    try:
        with open(path, "rb") as f:
            return f.readline().rstrip(b"\r\n")
    except OSError as err:
        fail(f"--password-file {file}: {err.strerror}", EXIT_USAGE)
