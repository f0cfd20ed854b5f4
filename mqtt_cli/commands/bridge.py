"""``mqtt bridge``: link two brokers with mosquitto's topic rules; lose nothing at QoS 1/2.

Flags describe one bridge; ``--config FILE`` (TOML) describes one or more, in the same terms: every flag
``--local-X`` / ``--remote-X`` is key ``X`` of the ``[bridge.local]`` / ``[bridge.remote]`` table (dashes as
underscores), the others are keys of ``[[bridge]]``. ``--print-config`` writes what the flags say as that TOML.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from mqtt_cli.exit_codes import EXIT_USAGE

from . import fail, say

BRIDGE = "Bridge"
LOCAL = "Local broker"
REMOTE = "Remote broker"
OUT = "Output"
_ROUND_ROBIN = (
    "Rotate through the --{side} addresses on each failure (default: the first is the main one, gone back to "
    "once it answers)."
)

SIDE_KEYS = (
    "url",
    "client_id",
    "username",
    "password",
    "password_file",
    "protocol_version",
    "keepalive",
    "session_expiry",
    "cafile",
    "capath",
    "cert",
    "key",
    "insecure",
    "tls_version",
    "alpn",
    "round_robin",
)
BRIDGE_KEYS = (
    "name",
    "topics",
    "restart_timeout",
    "notification_topic",
    "journal",
    "state_dir",
    "linger",
    "local",
    "remote",
)
LINGER_MS = 5.0


def bridge(
    ctx: typer.Context,
    local: Annotated[
        list[str] | None,
        typer.Option(
            "--local",
            help="Local broker URL (mqtt[s]://[user[:pass]@]host[:port], ws[s]://, unix://); repeat for addresses "
            "tried in turn.",
            rich_help_panel=LOCAL,
        ),
    ] = None,
    remote: Annotated[
        list[str] | None,
        typer.Option("--remote", help="Remote broker URL; repeat for addresses tried in turn.", rich_help_panel=REMOTE),
    ] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "-t",
            "--topic",
            metavar="RULE",
            help="A rule in mosquitto's grammar: 'PATTERN [in|out|both [QOS [LOCAL_PREFIX REMOTE_PREFIX]]]' "
            '(out and QoS 0 by default; "" for an empty field). Repeatable.',
            rich_help_panel=BRIDGE,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The bridge's name: default client ids and journal file (default: bridge).",
            rich_help_panel=BRIDGE,
        ),
    ] = None,
    restart_timeout: Annotated[
        tuple[float, float] | None,
        typer.Option(
            "--restart-timeout",
            metavar="FIRST CAP",
            help="Reconnect backoff: first delay and cap, seconds (jittered, doubling; default 0.5 30).",
            rich_help_panel=BRIDGE,
        ),
    ] = None,
    notification_topic: Annotated[
        str | None,
        typer.Option(
            "--notification-topic",
            help="Retained 1 on both brokers while the bridge links them, 0 otherwise (a will when it vanishes).",
            rich_help_panel=BRIDGE,
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Where the QoS 2 journal lives (default: $XDG_STATE_HOME/mqtt-cli/bridges).",
            rich_help_panel=BRIDGE,
        ),
    ] = None,
    no_journal: Annotated[
        bool,
        typer.Option(
            "--no-journal",
            help="No QoS 2 journal: a bridge killed mid-flow may then deliver a QoS 2 message twice.",
            rich_help_panel=BRIDGE,
        ),
    ] = False,
    linger: Annotated[
        float | None,
        typer.Option(
            "--linger",
            min=0,
            max=1000,
            help="Milliseconds a busy side waits to read more at once: fewer, larger reads and writes for every "
            "process on the path. A lone message is not delayed, nor a flow its window limits; 0: never "
            f"(default {LINGER_MS:g}).",
            rich_help_panel=BRIDGE,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="Bridges described in a TOML file (see --print-config).", rich_help_panel=BRIDGE),
    ] = None,
    print_config: Annotated[
        bool,
        typer.Option("--print-config", help="Write the TOML equivalent of the flags and exit.", rich_help_panel=BRIDGE),
    ] = False,
    json_status: Annotated[
        bool,
        typer.Option(
            "--json-status", help="One JSON status object per interval on standard output.", rich_help_panel=OUT
        ),
    ] = False,
    status_interval: Annotated[
        float, typer.Option("--status-interval", min=0.05, help="Seconds between status updates.", rich_help_panel=OUT)
    ] = 1.0,
    quiet: Annotated[
        bool, typer.Option("--quiet", help="No log lines on standard error (errors still are).", rich_help_panel=OUT)
    ] = False,
    local_id: Annotated[
        str | None, typer.Option("--local-id", help="Client id (default: local.HOSTNAME.NAME).", rich_help_panel=LOCAL)
    ] = None,
    local_username: Annotated[str | None, typer.Option("--local-username", rich_help_panel=LOCAL)] = None,
    local_password: Annotated[
        str | None, typer.Option("--local-password", help="Better: --local-password-file.", rich_help_panel=LOCAL)
    ] = None,
    local_password_file: Annotated[str | None, typer.Option("--local-password-file", rich_help_panel=LOCAL)] = None,
    local_protocol_version: Annotated[
        str | None, typer.Option("--local-protocol-version", help="31, 311, 5 or auto.", rich_help_panel=LOCAL)
    ] = None,
    local_keepalive: Annotated[
        int | None, typer.Option("--local-keepalive", min=0, max=65535, rich_help_panel=LOCAL)
    ] = None,
    local_session_expiry: Annotated[
        int | None,
        typer.Option(
            "--local-session-expiry",
            min=0,
            max=0xFFFFFFFF,
            help="5.0, seconds (default: never).",
            rich_help_panel=LOCAL,
        ),
    ] = None,
    local_cafile: Annotated[str | None, typer.Option("--local-cafile", rich_help_panel=LOCAL)] = None,
    local_capath: Annotated[str | None, typer.Option("--local-capath", rich_help_panel=LOCAL)] = None,
    local_cert: Annotated[str | None, typer.Option("--local-cert", rich_help_panel=LOCAL)] = None,
    local_key: Annotated[str | None, typer.Option("--local-key", rich_help_panel=LOCAL)] = None,
    local_insecure: Annotated[bool, typer.Option("--local-insecure", rich_help_panel=LOCAL)] = False,
    local_tls_version: Annotated[str | None, typer.Option("--local-tls-version", rich_help_panel=LOCAL)] = None,
    local_alpn: Annotated[list[str] | None, typer.Option("--local-alpn", rich_help_panel=LOCAL)] = None,
    local_round_robin: Annotated[
        bool,
        typer.Option("--local-round-robin", help=_ROUND_ROBIN.format(side="local"), rich_help_panel=LOCAL),
    ] = False,
    remote_id: Annotated[
        str | None, typer.Option("--remote-id", help="Client id (default: HOSTNAME.NAME).", rich_help_panel=REMOTE)
    ] = None,
    remote_username: Annotated[str | None, typer.Option("--remote-username", rich_help_panel=REMOTE)] = None,
    remote_password: Annotated[
        str | None, typer.Option("--remote-password", help="Better: --remote-password-file.", rich_help_panel=REMOTE)
    ] = None,
    remote_password_file: Annotated[str | None, typer.Option("--remote-password-file", rich_help_panel=REMOTE)] = None,
    remote_protocol_version: Annotated[
        str | None, typer.Option("--remote-protocol-version", help="31, 311, 5 or auto.", rich_help_panel=REMOTE)
    ] = None,
    remote_keepalive: Annotated[
        int | None, typer.Option("--remote-keepalive", min=0, max=65535, rich_help_panel=REMOTE)
    ] = None,
    remote_session_expiry: Annotated[
        int | None,
        typer.Option(
            "--remote-session-expiry",
            min=0,
            max=0xFFFFFFFF,
            help="5.0, seconds (default: never).",
            rich_help_panel=REMOTE,
        ),
    ] = None,
    remote_cafile: Annotated[str | None, typer.Option("--remote-cafile", rich_help_panel=REMOTE)] = None,
    remote_capath: Annotated[str | None, typer.Option("--remote-capath", rich_help_panel=REMOTE)] = None,
    remote_cert: Annotated[str | None, typer.Option("--remote-cert", rich_help_panel=REMOTE)] = None,
    remote_key: Annotated[str | None, typer.Option("--remote-key", rich_help_panel=REMOTE)] = None,
    remote_insecure: Annotated[bool, typer.Option("--remote-insecure", rich_help_panel=REMOTE)] = False,
    remote_tls_version: Annotated[str | None, typer.Option("--remote-tls-version", rich_help_panel=REMOTE)] = None,
    remote_alpn: Annotated[list[str] | None, typer.Option("--remote-alpn", rich_help_panel=REMOTE)] = None,
    remote_round_robin: Annotated[
        bool,
        typer.Option("--remote-round-robin", help=_ROUND_ROBIN.format(side="remote"), rich_help_panel=REMOTE),
    ] = False,
) -> None:
    """Link two brokers: copy messages between them by topic rules, losing nothing at QoS 1/2.

    mqtt bridge --local mqtt://localhost --remote mqtts://cloud.example:8883 -t 'sensors/# out 1' -t 'cmd/# in 2'
    """
    params = ctx.params
    flags: dict[str, Any] = {"local": {}, "remote": {}}
    for key, value in params.items():
        # Identity, not equality: 0 (--local-keepalive 0) is a value; False is an unset switch.
        if (
            value is None
            or value is False
            or value == []
            or value == ()
            or key
            in (
                "config",
                "print_config",
                "json_status",
                "status_interval",
                "quiet",
                "local",
                "remote",
                "topic",
                "no_journal",
                "linger",
            )
        ):
            continue
        for side in ("local", "remote"):
            if key.startswith(side + "_"):
                sub = key[len(side) + 1 :]
                flags[side]["client_id" if sub == "id" else sub] = list(value) if isinstance(value, list) else value
                break
        else:
            flags[key] = list(value) if isinstance(value, tuple | list) else value
    if local:
        flags["local"]["url"] = list(local)
    if remote:
        flags["remote"]["url"] = list(remote)
    if topic:
        flags["topics"] = list(topic)
    if no_journal:
        flags["journal"] = False
    if state_dir is not None:
        flags["state_dir"] = str(state_dir)
    if linger is not None:
        flags["linger"] = linger

    if config is not None:
        if any(k not in ("local", "remote") for k in flags) or flags["local"] or flags["remote"]:
            fail("--config describes the bridges: give either --config or bridge flags, not both", EXIT_USAGE)
        bridges = _read_config(config)
    else:
        if not flags["local"].get("url") or not flags["remote"].get("url") or not flags.get("topics"):
            fail("a bridge needs --local URL, --remote URL and at least one -t RULE (or --config FILE)", EXIT_USAGE)
        bridges = [flags]

    if print_config:
        _print_config(bridges)
        return

    from mqtt_cli.net.bridge import BridgeConfig

    configs: list[BridgeConfig] = []
    names: set[str] = set()
    for i, b in enumerate(bridges):
        where = f"--config {config}: bridge {i + 1}" if config is not None else "bridge"
        cfg = _build(b, where, from_flags=config is None)
        if cfg.name in names:
            fail(f"{where}: two bridges named {cfg.name!r}: give each its own name", EXIT_USAGE)
        names.add(cfg.name)
        configs.append(cfg)

    from ._bridge_run import run

    run(configs, json_status=json_status, interval=status_interval, quiet=quiet)


# --- configuration -------------------------------------------------------------------------------------------


def _hint(key: str, names: Any) -> str:
    """`; did you mean 'topics'?` or ""."""
    from mqtt_cli.core.suggest import did_you_mean

    return f"; {hint}" if (hint := did_you_mean(key, names)) else ""


def _read_config(path: Path) -> list[dict[str, Any]]:
    import tomllib

    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        fail(f"--config {path}: {err.strerror}", EXIT_USAGE)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        from mqtt_cli.core.config import reads_as_mosquitto

        if isinstance(err, tomllib.TOMLDecodeError) and reads_as_mosquitto(path.read_text()):
            fail(f"--config {path}: not TOML but a mosquitto.conf; its bridges (connection blocks) run inside the "
                 f"broker: mqtt serve --mosquitto-conf {path}", EXIT_USAGE)  # fmt: skip
        fail(f"--config {path}: not valid TOML: {err}", EXIT_USAGE)
    bridges = data.get("bridge")
    unknown = sorted(set(data) - {"bridge"})
    if unknown:
        why = f"unknown top-level key {unknown[0]!r}{_hint(unknown[0], ['bridge'])}"
        fail(f"--config {path}: {why} (bridges go in [[bridge]] tables)", EXIT_USAGE)
    if not isinstance(bridges, list) or not bridges or not all(isinstance(b, dict) for b in bridges):
        fail(f"--config {path}: no [[bridge]] table", EXIT_USAGE)
    for i, b in enumerate(bridges):
        where = f"--config {path}: bridge {i + 1}"
        for key in b:
            if key not in BRIDGE_KEYS:
                known = f"{_hint(key, BRIDGE_KEYS)} (known: {', '.join(BRIDGE_KEYS)})"
                fail(f"{where}: unknown key {key!r}{known}", EXIT_USAGE)
        for side in ("local", "remote"):
            table = b.get(side)
            if not isinstance(table, dict):
                fail(f"{where}: no [bridge.{side}] table", EXIT_USAGE)
            for key in table:
                if key not in SIDE_KEYS:
                    known = f"{_hint(key, SIDE_KEYS)} (known: {', '.join(SIDE_KEYS)})"
                    fail(f"{where}: [bridge.{side}]: unknown key {key!r}{known}", EXIT_USAGE)
            _check_types(table, SIDE_TYPES, f"{where}: [bridge.{side}]")
        _check_types(b, BRIDGE_TYPES, where)
    return bridges


_STR, _STRS, _INT, _BOOL, _NUMBER, _NUMBERS = "str", "strs", "int", "bool", "number", "numbers"
_EXPECTED = {
    _STR: "a string",
    _STRS: "a string or a list of strings",
    _INT: "an integer",
    _BOOL: "true or false",
    _NUMBER: "a number",
    _NUMBERS: "a number or a list of two numbers",
}
BRIDGE_TYPES = {
    "name": _STR,
    "topics": _STRS,
    "restart_timeout": _NUMBERS,
    "notification_topic": _STR,
    "journal": _BOOL,
    "state_dir": _STR,
    "linger": _NUMBER,
}
SIDE_TYPES = {
    "url": _STRS,
    "client_id": _STR,
    "username": _STR,
    "password": _STR,
    "password_file": _STR,
    "protocol_version": _STR,  # "5", "311", "auto"; an integer (5, 311) is taken too
    "keepalive": _INT,
    "session_expiry": _INT,
    "cafile": _STR,
    "capath": _STR,
    "cert": _STR,
    "key": _STR,
    "insecure": _BOOL,
    "tls_version": _STR,
    "alpn": _STRS,
    "round_robin": _BOOL,
}


def _check_types(table: dict[str, Any], types: dict[str, str], where: str) -> None:
    """A TOML value of the wrong type is a usage error naming the key: `insecure = "false"` must not mean true."""

    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    for key, kind in types.items():
        if key not in table:
            continue
        v = table[key]
        if kind == _STR:
            ok = isinstance(v, str) or (key == "protocol_version" and isinstance(v, int) and not isinstance(v, bool))
        elif kind == _STRS:
            ok = isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))
        elif kind == _INT:
            ok = isinstance(v, int) and not isinstance(v, bool)
        elif kind == _BOOL:
            ok = isinstance(v, bool)
        elif kind == _NUMBER:
            ok = number(v)
        else:
            ok = number(v) or (isinstance(v, list) and len(v) == 2 and all(number(x) for x in v))
        if not ok:
            fail(f"{where}: {key} = {_toml_repr(v)}: expected {_EXPECTED[kind]}", EXIT_USAGE)


def _toml_repr(value: Any) -> str:
    import tomli_w

    try:
        return tomli_w.dumps({"v": value}).strip()[4:]
    except (TypeError, ValueError):
        return repr(value)


def _print_config(bridges: list[dict[str, Any]]) -> None:
    import tomli_w

    out = []
    for b in bridges:
        b = {k: v for k, v in b.items() if k not in ("local", "remote")} | {"local": b["local"], "remote": b["remote"]}
        for side in ("local", "remote"):
            table = dict(b[side])
            urls = table.get("url") or []
            bare = [_without_password(u) for u in ([urls] if isinstance(urls, str) else urls)]
            in_url = bare != ([urls] if isinstance(urls, str) else list(urls))
            if in_url:
                table["url"] = bare
            if "password" in table or in_url:
                table.pop("password", None)
                say(f"mqtt: note: the {side} password is not written out; put it in a file and set password_file")
            b[side] = table
        out.append(b)
    sys.stdout.write(tomli_w.dumps({"bridge": out}))


def _without_password(url: str) -> str:
    """`mqtt://user:secret@host` as `mqtt://user@host`."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}@{host}" if parts.username else host))


def _state_home() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "mqtt-cli" / "bridges"


def _build(b: dict[str, Any], where: str, *, from_flags: bool = False) -> Any:
    """A BridgeConfig from one [[bridge]] table (flags come as one too); one-line errors, exit 2."""
    from mqtt_cli.core.bridge import BridgeRuleError, parse_rule
    from mqtt_cli.net.bridge import DEFAULT_NAME, BridgeConfig

    name = str(b.get("name", DEFAULT_NAME))
    if not name or any(c in name for c in "/\\\0") or name.startswith("."):
        fail(f"{where}: name {name!r} cannot be a file name: use letters, digits, - _ .", EXIT_USAGE)
    topics = b.get("topics")
    if isinstance(topics, str):
        topics = [topics]
    if not topics or not isinstance(topics, list):
        fail(f"{where}: no topic rules (-t 'PATTERN [in|out|both [QOS [LOCAL_PREFIX REMOTE_PREFIX]]]')", EXIT_USAGE)
    rules = []
    for text in topics:
        try:
            rules.append(parse_rule(str(text)))
        except BridgeRuleError as err:
            fail(f"{where}: {err}", EXIT_USAGE)  # it quotes the rule
    restart = b.get("restart_timeout", [0.5, 30.0])
    if isinstance(restart, int | float):
        restart = [restart, max(float(restart), 30.0)]
    try:
        base, cap = (float(x) for x in restart)
    except (TypeError, ValueError):
        fail(f"{where}: restart_timeout must be two numbers, BASE and CAP seconds", EXIT_USAGE)
    if not 0 < base <= cap:
        fail(f"{where}: restart timeout BASE {base:g} and CAP {cap:g}: need 0 < BASE <= CAP", EXIT_USAGE)
    notification = b.get("notification_topic")
    if notification is not None:
        from mqtt_cli.core.topics import topic_name_error

        if err := topic_name_error(str(notification)):
            fail(f"{where}: notification topic {notification!r}: {err}", EXIT_USAGE)
    linger = b.get("linger", LINGER_MS)
    if isinstance(linger, bool) or not isinstance(linger, int | float) or not 0 <= linger <= 1000:
        fail(f"{where}: linger {linger!r}: give milliseconds from 0 to 1000", EXIT_USAGE)
    host = socket.gethostname().split(".")[0] or "localhost"
    sides = {}
    for side in ("local", "remote"):
        default_id = f"local.{host}.{name}" if side == "local" else f"{host}.{name}"
        place = f"{where}: {side}" if from_flags else f"{where}: [bridge.{side}]"
        sides[side] = _side(b.get(side) or {}, place, default_id, f"--{side}-" if from_flags else "")
    journal = None
    if b.get("journal", True):
        journal = (Path(os.path.expanduser(str(b["state_dir"]))) if b.get("state_dir") else _state_home()) / (
            f"{name}.journal"
        )
    return BridgeConfig(
        name=name,
        local=sides["local"],
        remote=sides["remote"],
        rules=rules,
        restart_base=base,
        restart_cap=cap,
        notification_topic=notification,
        journal=journal,
        linger=linger / 1000,
    )


def _side(t: dict[str, Any], where: str, default_id: str, flag_prefix: str = "") -> Any:
    """One side's SideConfig (net.bridge.side_config, shared with the broker's embedded bridges); exit 2 on errors."""
    from mqtt_cli.net.bridge import side_config

    try:
        return side_config(t, default_id, flag_prefix)
    except ValueError as err:
        fail(f"{where}: {err}", EXIT_USAGE)


def _option_name(option: str, flag_prefix: str) -> str:
    """`cafile` as this side's flag (`--remote-cafile`) or its TOML key (`cafile`)."""
    return f"{flag_prefix}{option}" if flag_prefix else option.replace("-", "_")
