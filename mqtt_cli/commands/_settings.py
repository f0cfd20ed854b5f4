"""What the client commands' connection options resolve to: `client_settings()` applies the precedence flags >
environment (MQTT_HOST, MQTT_PORT, ...) > profile (``--profile``, config.toml) > built-in defaults.

No typer here: the one-shot fast path (``_fast``) resolves the options through this module as the typer
commands do. A command's context (typer's, or the fast path's) is only asked where each value came from.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from mqtt_cli.core.records import record
from mqtt_cli.exit_codes import EXIT_USAGE
from mqtt_cli.profiles import PROTOCOL_VERSIONS

from . import fail

if TYPE_CHECKING:
    from typing import Protocol

    from mqtt_cli.core.packets import Will
    from mqtt_cli.net.endpoints import Endpoint
    from mqtt_cli.net.settings import ClientSettings

    class _Source(Protocol):
        name: str  # COMMANDLINE, ENVIRONMENT, DEFAULT, ... (click's ParameterSource)

    class ParameterSources(Protocol):
        """Where each parameter's value came from: typer's Context, or the fast path's parse."""

        def get_parameter_source(self, name: str) -> _Source | None: ...


VERSIONS = PROTOCOL_VERSIONS


@record
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
    params: dict[str, Any], ctx: ParameterSources | None = None, *, reconnect_session_expiry: int = 3600
) -> Resolved:
    """ClientSettings from a command's connection options (`conn`, by parameter name); exits 2 on bad values.

    `ctx` tells where each value came from (command line or environment), for the password's precedence."""
    from mqtt_cli.net.settings import ClientSettings, random_client_id
    from mqtt_cli.profiles import ProfileError, load_profile

    p = dict(params)
    try:
        profile = load_profile(p["profile"])
    except ProfileError as err:
        fail(str(err), EXIT_USAGE)

    def pick(name: str, key: str | None = None, default: Any = None) -> Any:
        value = p.get(name)
        if value is not None and value != []:
            return value
        return profile.get(key or name, default)

    target = _target(p, ctx, profile, pick)
    endpoint = target.endpoint
    ssl_context = _ssl_context(p, profile, pick) if endpoint.tls else None

    raw_version = str(pick("protocol_version", default="auto")).lower()
    if raw_version not in VERSIONS:
        fail(f"-V/--protocol-version {raw_version!r}: use 31, 311, 5 or auto", EXIT_USAGE)
    version = VERSIONS[raw_version]

    # A URL's user and password go together: its user beats -u/MQTT_USERNAME of lower levels, and its
    # password is used only with its user.
    username = target.url_user
    user_level = _level(p, ctx, "username")
    order = ("cmd", "env", "profile")
    if user_level is not None and (target.level not in order or order.index(user_level) <= order.index(target.level)):
        username = p["username"]
    elif username is None:
        username = pick("username")
    url_pass = target.url_pass if target.url_user is None or username == target.url_user else None
    sources = {name: _source(ctx, name) for name in ("password", "password_file")}
    password = _password(p, sources, profile, url_pass, target.level)
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
        client_id = random_client_id(pick("id_prefix", default="mqtt-cli-"))
    if len(client_id.encode()) > 23 and version == 3:
        fail(f"-i {client_id!r}: MQTT 3.1 client identifiers have at most 23 characters", EXIT_USAGE)

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
        will=_will(p, ctx),
        connect_timeout=float(pick("connect_timeout", default=10.0)),
        tls_client_cert=bool(pick("cert")),
        reconnect=reconnect,
        trace=_debug_line if p.get("debug") else None,
    )
    return Resolved(settings, target.url_topic, profile)


@record
class _Target:
    """Where the broker is, and what an mqtt:// URL gave beside (its topic, user and password)."""

    endpoint: Endpoint
    level: str  # the level that named it: cmd, env, profile or default
    url_topic: str | None
    url_user: str | None
    url_pass: str | None


def _target(p: dict[str, Any], ctx: ParameterSources | None, profile: dict[str, Any], pick: Any) -> _Target:
    """Where the broker is: the highest level (command line > environment > profile) naming any of url, unix,
    host or port decides alone: a -p on the command line replaces a profile's url or unix as a whole (the host
    it leaves out comes from lower levels' host, never from their url)."""
    from mqtt_cli.net.endpoints import Endpoint, parse_url

    levels = _target_levels(p, ctx, profile)
    level, target = next(((lv, t) for lv, t in levels if t), ("default", {}))
    where = {"cmd": "", "env": "MQTT_", "profile": f"profile {p['profile'] or 'default'!r}: "}.get(level, "")
    url = target.get("url")
    unix = target.get("unix")
    if url and unix:
        fail(f"{_names(level, 'url')} and {_names(level, 'unix')} both say where the broker is: give one", EXIT_USAGE)
    tls_files = any(pick(k) for k in ("cafile", "capath", "cert")) or bool(pick("insecure"))
    if url:
        try:
            parsed = parse_url(url)
        except ValueError as err:
            fail(f"{where if level == 'profile' else ''}{_names(level, 'url')}: {err}", EXIT_USAGE)
        endpoint = parsed.endpoint
        if level != "profile" and ("host" in target or "port" in target):
            fail(f"{_names(level, 'url')} already names the host and port: drop {_names(level, 'host')}/"
                 f"{_names(level, 'port')} or {_names(level, 'url')}", EXIT_USAGE)  # fmt: skip
        if tls_files and endpoint.scheme in ("mqtt", "ws"):
            endpoint = Endpoint("mqtts" if endpoint.scheme == "mqtt" else "wss", endpoint.host, endpoint.port,
                                endpoint.path, True)  # fmt: skip
        return _Target(endpoint, level, parsed.topic, parsed.username, parsed.password)
    if unix:
        return _Target(Endpoint("unix", "", 0, unix), level, None, None, None)
    lower = [t for lv, t in levels if lv != level and t] if level != "default" else []
    host = target.get("host") or next((t["host"] for t in lower if "host" in t), "localhost")
    port = target.get("port") or next((t["port"] for t in lower if "port" in t), 8883 if tls_files else 1883)
    return _Target(Endpoint("mqtts" if tls_files else "mqtt", host, port, "/mqtt", tls_files), level, None, None, None)


def _ssl_context(p: dict[str, Any], profile: dict[str, Any], pick: Any) -> Any:
    from mqtt_cli.net.endpoints import TLSOptions, make_ssl_context

    try:
        return make_ssl_context(
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


def _will(p: dict[str, Any], ctx: ParameterSources | None) -> Will | None:
    """The will of --will-topic and the options beside it (which need it)."""
    will_topic = p.get("will_topic")
    if will_topic is None:
        given = [flag for flag, name in (("--will-payload", "will_payload"), ("--will-qos", "will_qos"),
                 ("--will-retain", "will_retain"), ("--will-delay", "will_delay"),
                 ("--will-message-expiry", "will_expiry"), ("--will-content-type", "will_content_type"),
                 ("--will-user-property", "will_user_property"))
                 if p.get(name) or (name in ("will_qos", "will_retain") and _level(p, ctx, name) == "cmd")]  # fmt: skip
        if given:
            fail(f"{', '.join(given)}: will options need --will-topic", EXIT_USAGE)
        return None
    from mqtt_cli.core.packets import Will
    from mqtt_cli.core.properties import Properties
    from mqtt_cli.core.topics import topic_name_error

    if err := topic_name_error(will_topic):
        fail(f"--will-topic {will_topic!r}: {err}", EXIT_USAGE)
    will_props = Properties(
        will_delay_interval=p.get("will_delay"),
        message_expiry_interval=p.get("will_expiry"),
        content_type=p.get("will_content_type"),
        user_properties=parse_user_properties(p.get("will_user_property"), "--will-user-property"),
    )
    return Will(will_topic, (p.get("will_payload") or "").encode(), p.get("will_qos") or 0,
                bool(p.get("will_retain")), will_props)  # fmt: skip


def _debug_line(line: str) -> None:
    """-d: to standard output, as mosquitto's clients print it, in order with the messages (same buffer)."""
    out = sys.stdout.buffer
    try:
        sys.stdout.flush()  # what rich or print() wrote first
        out.write(line.encode("utf-8", "replace") + b"\n")
        out.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:  # raised as OutputFailed: the connection would take an OSError for its own (a socket's)
        from ._output import output_failed

        raise output_failed(exc, out, "standard output", "a -d line lost, the command stopped") from None


def stdin_closed() -> bool:
    """Standard input is closed (`<&-`): Python then sets sys.stdin to None."""
    return sys.stdin is None or getattr(sys.stdin, "buffer", None) is None


def _expand(path: str | None) -> str | None:
    return os.path.expanduser(path) if path else path


def _source(ctx: ParameterSources | None, name: str) -> str | None:
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


def _level(p: dict[str, Any], ctx: ParameterSources | None, name: str) -> str | None:
    """ "cmd" or "env" for an option given on the command line or in the environment, else None."""
    if p.get(name) is None or p.get(name) == []:
        return None
    return "cmd" if ctx is None else _source(ctx, name)


def _target_levels(
    p: dict[str, Any], ctx: ParameterSources | None, profile: dict[str, Any]
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
