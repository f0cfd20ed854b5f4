"""The broker's configuration as typed records, checked with key paths; mosquitto.conf translated to them.

Sans-IO: `load_config` takes the parsed TOML table (the caller reads and parses the file), `to_table` gives
back a table for tomli-w, and `translate_mosquitto` takes mosquitto.conf text (and the text of the files its
`include_dir` lines name, read by the caller) and returns the same records plus the lines it cannot honour.

Every section is a frozen record whose fields are the keys: the field's type and `metadata` (range, help)
are the schema, so checking, `--print-config` and the documentation's key list come from one definition.
Sections later issues fill would be reserved (RESERVED_SECTIONS): named, and refused with the issue that
brings them, never silently ignored.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from .bridge import BridgeRuleError, parse_rule
from .limits import Limits, limit_infos
from .suggest import did_you_mean
from .topics import topic_name_error

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "RESERVED_SECTIONS",
    "AuthSettings",
    "BridgeRemoteSettings",
    "BridgeSettings",
    "BrokerSettings",
    "ConfigError",
    "DynamicSecuritySettings",
    "ListenerSettings",
    "LogFormat",
    "LogLevel",
    "LogSettings",
    "MetricsAddress",
    "MetricsSettings",
    "Origin",
    "PersistenceSettings",
    "ProcessSettings",
    "ProtocolVersion",
    "Scheme",
    "SyncMode",
    "SysSettings",
    "Translation",
    "Transport",
    "Unsupported",
    "include_dirs",
    "listener_from_url",
    "load_config",
    "parse_listener_url",
    "parse_metrics_address",
    "reads_as_mosquitto",
    "to_table",
    "translate_mosquitto",
]


class ConfigError(Exception):
    """One line: the file, the key path, what is wrong and what is allowed."""


class Transport(StrEnum):
    """What a listener's socket is: where it listens, how it is bound and how its peers are named."""

    TCP = "tcp"  # HOST:PORT
    UNIX = "unix"  # a Unix domain socket's file


class Scheme(StrEnum):
    """The kinds of listener, one entry each: URL scheme, default port, transport, whether TLS and WebSocket are
    layered on it, and the other names the scheme goes by. Everything else about a kind is made from these: URLs are
    parsed and printed, mosquitto.conf's listeners translated (here), sockets bound, streams wrapped and peers named
    (net/listeners.py). A kind that combines a transport and layers that exist is one entry here."""

    MQTT = "mqtt", 1883, Transport.TCP, False, False, ("tcp",)
    MQTTS = "mqtts", 8883, Transport.TCP, True, False, ("ssl",)
    WS = "ws", 8080, Transport.TCP, False, True  # MQTT over WebSocket
    WSS = "wss", 8081, Transport.TCP, True, True  # MQTT over WebSocket over TLS
    UNIX = "unix", 0, Transport.UNIX, False, False

    default_port: int  # a URL's port when it gives none
    transport: Transport
    tls: bool
    websocket: bool  # its URL may have a path: the WebSocket resource
    aliases: tuple[str, ...]

    def __new__(
        cls, name: str, default_port: int, transport: Transport, tls: bool, websocket: bool,
        aliases: tuple[str, ...] = (),
    ) -> Scheme:  # fmt: skip
        member = str.__new__(cls, name)
        member._value_ = name
        member.default_port, member.transport, member.tls, member.websocket = default_port, transport, tls, websocket
        member.aliases = aliases
        return member


class ProtocolVersion(StrEnum):
    v31 = "3.1"
    v311 = "3.1.1"
    v5 = "5"

    @property
    def level(self) -> int:
        """The protocol level byte of CONNECT."""
        return {"3.1": 3, "3.1.1": 4, "5": 5}[self.value]


class SyncMode(StrEnum):
    """How hard a commit of the persistence database is pushed to disk (SQLite's `synchronous`)."""

    normal = "normal"  # survives the broker being killed (kill -9): what was acknowledged is in the file
    full = "full"  # also survives power loss and an OS crash: an fsync per commit group


class LogFormat(StrEnum):
    text = "text"
    json = "json"


class LogLevel(StrEnum):
    """What is logged, from the most to the least: each level includes those after it."""

    debug = "debug"
    info = "info"  # connections and disconnections (mosquitto's notice and information)
    warning = "warning"  # refused connections, dropped messages, protocol errors
    error = "error"  # internal errors, failed reloads
    none = "none"

    @property
    def rank(self) -> int:
        return list(LogLevel).index(self)


ALL_VERSIONS = (ProtocolVersion.v31, ProtocolVersion.v311, ProtocolVersion.v5)
#: A TLS listener's lowest version, by mosquitto's names.
TLS_VERSIONS = ("tlsv1.1", "tlsv1.2", "tlsv1.3")
#: Every name a listener URL's scheme may have.
SCHEME_NAMES = {name: scheme for scheme in Scheme for name in (scheme.value, *scheme.aliases)}
#: Protocol versions by the names people use for them (also the CONNECT's protocol level).
VERSION_NAMES = {
    "3.1": ProtocolVersion.v31, "3": ProtocolVersion.v31, "3.1.1": ProtocolVersion.v311, "4": ProtocolVersion.v311,
    "5": ProtocolVersion.v5, "5.0": ProtocolVersion.v5,
}  # fmt: skip


def _key(help: str, lo: float | None = None, hi: float | None = None, **extra: Any) -> dict[str, Any]:
    return {"help": help, "lo": lo, "hi": hi, **extra}


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """One `[[listener]]`: its URL and its own settings."""

    url: str = field(metadata=_key("mqtt://HOST:PORT, mqtts://, ws://HOST:PORT/PATH, wss://, unix:///PATH"))
    versions: tuple[ProtocolVersion, ...] = field(
        default=ALL_VERSIONS, metadata=_key("protocol versions accepted on this listener")
    )
    max_connections: int = field(default=0, metadata=_key("connections at once on this listener (0: no limit)", 0))
    certfile: str | None = field(default=None, metadata=_key("server certificate chain (PEM), for mqtts:// and wss://"))
    keyfile: str | None = field(default=None, metadata=_key("private key (PEM) of certfile"))
    cafile: str | None = field(default=None, metadata=_key("CA certificates client certificates are checked against"))
    require_certificate: bool = field(default=False, metadata=_key("refuse TLS clients without a valid certificate"))
    mode: int | None = field(default=None, metadata=_key("unix:// socket file mode, e.g. 0o660", 0, 0o777))
    # Auth settings of this listener, used when [auth] per_listener_settings is true (else [auth] applies).
    allow_anonymous: bool | None = field(default=None, metadata=_key("clients without a user name are accepted"))
    password_file: str | None = field(default=None, metadata=_key("password file (mosquitto_passwd format)"))
    acl_file: str | None = field(default=None, metadata=_key("ACL file (mosquitto format)"))
    use_identity_as_username: bool = field(
        default=False, metadata=_key("the client certificate's CN is the user name (password not checked)")
    )
    use_subject_as_username: bool = field(
        default=False, metadata=_key("the client certificate's subject is the user name (password not checked)")
    )
    # TLS policy of an mqtts:// or wss:// listener (mosquitto's names; ciphers_tls1.3 is ciphers_tls13 here).
    tls_version: str | None = field(
        default=None, metadata=_key("lowest TLS version accepted (unset: tlsv1.2)", choices=TLS_VERSIONS)
    )
    ciphers: str | None = field(default=None, metadata=_key("TLS 1.2 cipher list, OpenSSL's syntax"))
    ciphers_tls13: str | None = field(
        default=None, metadata=_key("TLS 1.3 cipher suites, colon-separated (e.g. TLS_AES_256_GCM_SHA384)")
    )
    crlfile: str | None = field(
        default=None, metadata=_key("certificate revocation list (PEM): a revoked client certificate is refused")
    )
    capath: str | None = field(
        default=None, metadata=_key("directory of CA certificates (c_rehash'd) client certificates are checked against")
    )

    @property
    def scheme(self) -> Scheme:
        return parse_listener_url(self.url).scheme


@dataclass(frozen=True, slots=True)
class ListenerAddress:
    """A listener URL taken apart."""

    scheme: Scheme
    host: str = ""
    port: int = 0
    path: str = ""  # the WebSocket path ("": any) or the Unix socket's file
    query: str = ""  # settings (--listen URLs only; a [[listener]] table has keys)


def parse_listener_url(url: str) -> ListenerAddress:
    """`mqtt://host:port`, `mqtts://`, `ws://host:port/path`, `wss://`, `unix:///path`; ValueError saying why."""
    parts = urlsplit(url)
    scheme = SCHEME_NAMES.get(parts.scheme.lower())
    if scheme is None:
        *others, last = (s.value for s in Scheme)
        raise ValueError(f"the scheme must be {', '.join(others)} or {last}")
    if parts.fragment or parts.username or parts.password:
        raise ValueError("no user name or #fragment in a listener URL")
    if scheme.transport is Transport.UNIX:
        path = unquote(parts.netloc + parts.path)
        if not path.startswith("/") or parts.netloc or path == "/":
            raise ValueError(f"a Unix socket needs an absolute path, {scheme}:///run/mqtt.sock")
        return ListenerAddress(scheme, path=path, query=parts.query)
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the port must be a number from 0 to 65535") from None
    if not scheme.websocket and parts.path not in ("", "/"):
        raise ValueError(f"only {scheme}://host:port is understood (a path is for ws and wss)")
    path = parts.path if scheme.websocket and parts.path not in ("", "/") else ""
    host = parts.hostname or "127.0.0.1"
    return ListenerAddress(scheme, host, scheme.default_port if port is None else port, path, parts.query)


def listener_from_url(url: str) -> ListenerSettings:
    """A `--listen` URL with its settings as query parameters (`?versions=3.1.1,5&max_connections=N`, unix:
    `&mode=0660`) as a listener's settings; ValueError saying why not."""
    address = parse_listener_url(url)
    values: dict[str, Any] = {}
    for key, texts in parse_qs(address.query, keep_blank_values=True).items():
        text = texts[-1]
        if key == "versions":
            values["versions"] = tuple(sorted({_version(name) for name in text.split(",")}, key=ALL_VERSIONS.index))
        elif key == "max_connections":
            if not text.isdigit():
                raise ValueError("max_connections must be a whole number (0: no limit)")
            values["max_connections"] = int(text)
        elif key == "mode" and address.scheme.transport is Transport.UNIX:
            values["mode"] = _mode(text)
        else:
            known = ["versions", "max_connections", *(["mode"] if address.scheme.transport is Transport.UNIX else [])]
            hint = f"{hint} " if (hint := did_you_mean(key, known)) else ""
            raise ValueError(f"unknown setting {key!r}; {hint}known: {', '.join(known)}")
    return ListenerSettings(url.partition("?")[0], **values)


def _version(name: str) -> ProtocolVersion:
    version = VERSION_NAMES.get(name.strip())
    if version is None:
        raise ValueError(f"unknown MQTT version {name.strip()!r}; use 3.1, 3.1.1 or 5, comma-separated")
    return version


def _mode(text: str) -> int:
    """A file mode in octal (0660, 660, 0o660)."""
    try:
        mode = int(text.lower().removeprefix("0o"), 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise ValueError(f"mode {text!r} is not a file mode; give octal digits such as 0660")
    return mode


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """`[auth]`: who may connect and what they may do (every listener, unless per_listener_settings)."""

    allow_anonymous: bool | None = field(
        default=None, metadata=_key("clients without a user name are accepted (unset: on loopback listeners only)")
    )
    password_file: str | None = field(default=None, metadata=_key("password file (mosquitto_passwd format)"))
    acl_file: str | None = field(default=None, metadata=_key("ACL file (mosquitto format)"))
    per_listener_settings: bool = field(
        default=False, metadata=_key("each [[listener]] has its own allow_anonymous, password_file and acl_file")
    )
    use_identity_as_username: bool = field(
        default=False, metadata=_key("on every listener, the client certificate's CN is the user name")
    )
    use_subject_as_username: bool = field(
        default=False, metadata=_key("on every listener, the client certificate's subject is the user name")
    )
    use_username_as_clientid: bool = field(
        default=False, metadata=_key("a client's user name is its client id (a client without one is refused)")
    )
    allow_zero_length_clientid: bool = field(
        default=True, metadata=_key("3.1.1 and 5.0 clients may connect with an empty client id (one is assigned)")
    )
    auto_id_prefix: str = field(default="auto-", metadata=_key("prefix of the client ids the broker assigns"))


@dataclass(frozen=True, slots=True)
class DynamicSecuritySettings:
    """`[dynamic_security]`: mosquitto's dynamic security (clients, groups, roles changed through $CONTROL)."""

    config_file: str | None = field(
        default=None, metadata=_key("its dynamic-security.json (mosquitto's plugin_opt_config_file); unset: off")
    )


@dataclass(frozen=True, slots=True)
class LogSettings:
    """`[log]`: where log lines go and which."""

    level: LogLevel = field(default=LogLevel.warning, metadata=_key("least important lines written"))
    format: LogFormat = field(default=LogFormat.text, metadata=_key("text for people, json (one object a line)"))
    file: str | None = field(default=None, metadata=_key("append to this file (reopened on SIGUSR2); unset: stderr"))
    syslog: bool = field(default=False, metadata=_key("also send every line to syslog"))
    syslog_address: str = field(default="/dev/log", metadata=_key("syslog's unix datagram socket"))
    syslog_facility: str = field(
        default="daemon", metadata=_key("syslog facility", choices=("daemon", "user", *(f"local{i}" for i in range(8))))
    )
    subscriptions: bool = field(
        default=False,
        metadata=_key("SUBSCRIBE and UNSUBSCRIBE logged at info: client, filter, QoS, result (always at debug)"),
    )
    topic: bool = field(
        default=False, metadata=_key("each line also published to $SYS/broker/log/<E|W|N|I|D|M/...> (QoS 0)")
    )
    drop_interval: float = field(
        default=10.0,
        metadata=_key("while a client's messages are dropped (full queue), seconds between the lines counting them",
                      0.1),
    )  # fmt: skip
    timestamp_format: str | None = field(
        default=None, metadata=_key("strftime format of a text line's time (unset: ISO 8601 in a file)")
    )


@dataclass(frozen=True, slots=True)
class ProcessSettings:
    """`[process]`: the broker as a system service."""

    pid_file: str | None = field(default=None, metadata=_key("write the broker's process id there (removed at exit)"))
    user: str | None = field(
        default=None, metadata=_key("started as root: bind the listeners, then run as this user (its group too)")
    )


@dataclass(frozen=True, slots=True)
class SysSettings:
    """`[sys]`: the `$SYS/broker/...` topics."""

    interval: float = field(default=10.0, metadata=_key("seconds between $SYS updates (0: none)", 0))


@dataclass(frozen=True, slots=True)
class MetricsAddress:
    """Where the metrics endpoint listens (or listens now: its real port)."""

    host: str
    port: int
    https: bool = False  # with [metrics] certfile and keyfile

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.https else 'http'}://{host}:{self.port}"


def parse_metrics_address(text: str) -> MetricsAddress:
    """`HOST:PORT` or `[V6]:PORT` (port 0: any free one); ValueError saying what is wrong."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or "/" in text:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9883)")
    if not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r}: the port must be a number from 0 to 65535")
    return MetricsAddress(host, int(port))


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """`[metrics]`: the HTTP endpoint for monitoring systems (GET /metrics, /healthz, /readyz)."""

    listen: str | None = field(
        default=None, metadata=_key("HOST:PORT of the HTTP endpoint, e.g. 127.0.0.1:9883 (port 0: any free port)")
    )
    admin_users: tuple[str, ...] | None = field(
        default=None, metadata=_key("users (password file or dynamic security) who may use /api/v1/ and the dashboard")
    )
    readonly_users: tuple[str, ...] | None = field(default=None, metadata=_key("users who may only read /api/v1/"))
    admin_role: str | None = field(
        default="admin", metadata=_key("dynamic-security role whose clients may use /api/v1/ and the dashboard")
    )
    readonly_role: str | None = field(default=None, metadata=_key("dynamic-security role that may only read"))
    certfile: str | None = field(default=None, metadata=_key("certificate (PEM): the endpoint speaks HTTPS"))
    keyfile: str | None = field(default=None, metadata=_key("private key of certfile (PEM)"))

    def __post_init__(self) -> None:
        if self.listen is not None:
            parse_metrics_address(self.listen)
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("certfile and keyfile go together (HTTPS needs both)")


#: mosquitto's persistence file name (its `persistence_file` default).
DEFAULT_MOSQUITTO_DB = "mosquitto.db"


@dataclass(frozen=True, slots=True)
class PersistenceSettings:
    """`[persistence]`: what the broker acknowledged survives a restart (off while `path` is unset)."""

    path: str | None = field(default=None, metadata=_key("database file (SQLite); unset: nothing is kept"))
    synchronous: SyncMode = field(
        default=SyncMode.normal, metadata=_key("normal: survives kill -9; full: also survives power loss")
    )
    mosquitto_db: str = field(
        default=DEFAULT_MOSQUITTO_DB,
        metadata=_key("mosquitto's persistence file, taken over at a start without the database (a name: beside it)"),
    )
    skip_mosquitto_db: bool = field(default=False, metadata=_key("start without taking over mosquitto_db"))


@dataclass(frozen=True, slots=True)
class BridgeRemoteSettings:
    """`[bridge.remote]`: the remote broker of an embedded bridge, with `mqtt bridge`'s keys of the same names."""

    url: tuple[str, ...] = field(
        metadata=_key("broker URLs (mqtt[s]://[user@]host[:port], ws[s]://, unix://), tried in turn", bridge_url=True)
    )
    client_id: str | None = field(default=None, metadata=_key("client id there (default: HOSTNAME.NAME)"))
    username: str | None = field(default=None, metadata=_key("user name"))
    password: str | None = field(default=None, metadata=_key("password (prefer password_file)"))
    password_file: str | None = field(default=None, metadata=_key("file whose first line is the password"))
    protocol_version: str = field(
        default="auto", metadata=_key("MQTT version: 5, 3.1.1, 3.1, or auto (5, then 3.1.1)",
                                      choices=("auto", "5", "5.0", "3.1.1", "311", "3.1", "31"))
    )  # fmt: skip
    keepalive: int = field(default=60, metadata=_key("keep alive, s", 0, 65535))
    clean_start: bool = field(default=False, metadata=_key("no session kept there (mosquitto's cleansession)"))
    session_expiry: int = field(
        default=0xFFFFFFFF, metadata=_key("5.0 session expiry there, s (default: never)", 0, 0xFFFFFFFF)
    )
    try_private: bool = field(default=True, metadata=_key("3.x: connect with the bridge flag (no echo)"))
    round_robin: bool = field(
        default=False,
        metadata=_key("false: the first url is the main one, gone back to once it answers; true: rotate on failure"),
    )
    cafile: str | None = field(default=None, metadata=_key("CA certificates to check the remote's (implies TLS)"))
    capath: str | None = field(default=None, metadata=_key("directory of CA certificates (implies TLS)"))
    cert: str | None = field(default=None, metadata=_key("client certificate (PEM)"))
    key: str | None = field(default=None, metadata=_key("private key of cert (PEM)"))
    insecure: bool = field(default=False, metadata=_key("do not check the remote's host name (implies TLS)"))
    tls_version: str | None = field(default=None, metadata=_key("lowest TLS version", choices=("tlsv1.2", "tlsv1.3")))
    alpn: str | None = field(default=None, metadata=_key("TLS ALPN protocol"))


@dataclass(frozen=True, slots=True)
class BridgeSettings:
    """One `[[bridge]]`: a bridge the broker runs itself (its local side is the broker), in `mqtt bridge`'s terms."""

    name: str = field(metadata=_key("the bridge's name: default client ids, $SYS/broker/connection/NAME/state"))
    topics: tuple[str, ...] = field(
        metadata=_key("rules in mosquitto's grammar: 'PATTERN [in|out|both [QOS [LOCAL_PREFIX REMOTE_PREFIX]]]'",
                      bridge_rule=True)
    )  # fmt: skip
    remote: BridgeRemoteSettings = field(metadata=_key("the remote broker"))
    local_client_id: str | None = field(
        default=None, metadata=_key("its session's id in this broker (default: local.HOSTNAME.NAME)")
    )
    restart_timeout: tuple[float, ...] = field(
        default=(0.5, 30.0), metadata=_key("reconnect backoff: first delay and cap, s (jittered, doubling)", 0)
    )
    notification_topic: str | None = field(
        default=None, metadata=_key("retained 1 on both brokers while linked, 0 otherwise (unset: none)")
    )
    qos0_queue: int = field(default=10_000, metadata=_key("QoS 0 messages held for a slow remote before dropping", 0))
    receive_maximum: int = field(default=1000, metadata=_key("QoS 1/2 messages unacknowledged each way", 1, 65535))

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in "/+#\0") or self.name.startswith("$"):
            raise ValueError(f"name {self.name!r}: use letters, digits, - _ . (it is a topic level in $SYS)")
        if len(self.restart_timeout) != 2 or not 0 < self.restart_timeout[0] <= self.restart_timeout[1]:
            raise ValueError(f"restart_timeout {list(self.restart_timeout)}: give [BASE, CAP] with 0 < BASE <= CAP")
        if self.notification_topic is not None and (err := topic_name_error(self.notification_topic)):
            raise ValueError(f"notification_topic {self.notification_topic!r}: {err}")


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """The whole file: `[[listener]]`, `[limits]`, `[auth]`, `[log]`, `[sys]`, `[metrics]`, `[persistence]`."""

    listener: tuple[ListenerSettings, ...] = field(
        default=(ListenerSettings("mqtt://127.0.0.1:1883"),), metadata=_key("the listeners")
    )
    limits: Limits = field(default_factory=Limits, metadata=_key("limits"))
    auth: AuthSettings = field(default_factory=AuthSettings, metadata=_key("authentication and ACL"))
    dynamic_security: DynamicSecuritySettings = field(
        default_factory=DynamicSecuritySettings, metadata=_key("users, groups and roles changed at run time")
    )
    log: LogSettings = field(default_factory=LogSettings, metadata=_key("logging"))
    sys: SysSettings = field(default_factory=SysSettings, metadata=_key("$SYS topics"))
    metrics: MetricsSettings = field(default_factory=MetricsSettings, metadata=_key("metrics and health endpoint"))
    persistence: PersistenceSettings = field(
        default_factory=PersistenceSettings, metadata=_key("what survives a restart")
    )
    bridge: tuple[BridgeSettings, ...] = field(default=(), metadata=_key("bridges to other brokers"))
    process: ProcessSettings = field(default_factory=ProcessSettings, metadata=_key("pid file and user"))


#: Sections later issues add: named so that a file using them is told when, not "unknown section".
RESERVED_SECTIONS: dict[str, str] = {}


# --- checking a table against the records --------------------------------------------------------------------


def load_config(table: Mapping[str, Any], source: str) -> BrokerSettings:
    """The records for a parsed TOML table; ConfigError naming `source`, the key path and what is allowed."""
    return _build(BrokerSettings, table, "", source)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_R = TypeVar("_R", bound="DataclassInstance")  # the record class _build makes


def _build(cls: type[_R], table: Any, path: str, source: str) -> _R:
    where = path or "the top level"
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: {where}: must be a table, not {_shown(table)}")
    hints = _hints(cls)
    known = {f.name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        key_path = f"{path}.{key}" if path else key
        f = known.get(key)
        if f is None:
            if not path and key in RESERVED_SECTIONS:
                raise ConfigError(f"{source}: [{key}] is not supported yet (issue {RESERVED_SECTIONS[key]})")
            hint = f"{hint} " if (hint := did_you_mean(key, known)) else ""
            where_in = f"in [{path}]" if path else "at the top level"
            raise ConfigError(f"{source}: {key_path}: unknown key; {hint}known {where_in}: {', '.join(known)}")
        values[key] = _value(hints[key], f.metadata, value, key_path, source)
    for name, f in known.items():
        if name not in values and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(f"{source}: {path}.{name}: missing; {f.metadata['help']}")
    try:
        return cls(**values)
    except ValueError as exc:
        raise ConfigError(f"{source}: {where}: {exc}") from None


def _shown(value: Any) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}
    name = kind.get(type(value), "a table" if isinstance(value, Mapping) else type(value).__name__)
    return f"{name} ({value!r})" if not isinstance(value, (Mapping, list)) else name


def _value(kind: Any, meta: Mapping[str, Any], value: Any, path: str, source: str) -> Any:
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):  # X | None: the key is left out for None
        kind = next(a for a in args if a is not type(None))
        return _value(kind, meta, value, path, source)
    if origin is tuple:
        item = args[0]
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {path}: must be an array, not {_shown(value)}")
        if isinstance(item, type) and hasattr(item, "__dataclass_fields__"):
            return tuple(_build(item, v, f"{path}[{i}]", source) for i, v in enumerate(value))
        out = tuple(_value(item, meta, v, f"{path}[{i}]", source) for i, v in enumerate(value))
        if not out:
            raise ConfigError(f"{source}: {path}: must not be empty")
        return out
    if isinstance(kind, type) and hasattr(kind, "__dataclass_fields__"):
        return _build(kind, value, path, source)
    if isinstance(kind, type) and issubclass(kind, Enum):
        allowed = [m.value for m in kind]
        if not isinstance(value, str) or value not in allowed:
            hint = f"; {hint}" if (hint := did_you_mean(str(value), allowed)) else ""
            raise ConfigError(f"{source}: {path}: must be one of {', '.join(map(repr, allowed))}, not {value!r}{hint}")
        return kind(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {path}: must be true or false, not {_shown(value)}")
        return value
    if kind in (int, float):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if kind is float:
            ok = ok or isinstance(value, float)
        lo, hi = meta.get("lo"), meta.get("hi")
        if not ok or (lo is not None and value < lo) or (hi is not None and value > hi):
            rng = f" from {lo} to {hi}" if hi is not None else f" >= {lo}" if lo is not None else ""
            what = "an integer" if kind is int else "a number"
            shown = repr(value) if ok else _shown(value)
            raise ConfigError(f"{source}: {path}: must be {what}{rng}, not {shown}")
        return float(value) if kind is float else value
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {path}: must be a string, not {_shown(value)}")
        choices = meta.get("choices")
        if choices and value not in choices:
            hint = f"; {hint}" if (hint := did_you_mean(value, choices)) else ""
            raise ConfigError(f"{source}: {path}: must be one of {', '.join(choices)}, not {value!r}{hint}")
        if meta.get("bridge_rule"):
            try:
                parse_rule(value)
            except BridgeRuleError as exc:
                raise ConfigError(f"{source}: {path}: {exc}") from None
            return value
        if meta.get("bridge_url"):
            # The rest (port, TLS files) is checked with the other remote keys when the bridge is built.
            parts = urlsplit(value)
            if parts.scheme.lower() not in ("mqtt", "mqtts", "ws", "wss", "unix") or not (parts.hostname or parts.path):
                raise ConfigError(
                    f"{source}: {path}: {value!r}: give mqtt://HOST[:PORT], mqtts://, ws://, wss:// or unix:///PATH"
                )
            return value
        if path.endswith(".url") or path == "url":
            try:
                address = parse_listener_url(value)
            except ValueError as exc:
                raise ConfigError(f"{source}: {path}: {value!r}: {exc}") from None
            if address.query:
                raise ConfigError(f"{source}: {path}: {value!r}: settings are keys of the [[listener]] table here")
        return value
    raise TypeError(f"no check for {kind!r}")  # a schema field of a type this module does not know: a bug


def override(
    settings: BrokerSettings, section: str, values: Mapping[str, Any], flags: Mapping[str, str] | None = None
) -> BrokerSettings:
    """`settings` with the command line's values for keys of `[section]` (None: not given), checked as the
    file's are; errors name the flag: `--` and the key's name (`--max-keepalive`) unless `flags` names it."""
    record = getattr(settings, section)
    hints = _hints(type(record))
    meta = {f.name: f.metadata for f in fields(record)}
    flags = flags or {}
    given = {
        key: _value(hints[key], meta[key], value, flags.get(key, "--" + key.replace("_", "-")), "command line")
        for key, value in values.items()
        if value is not None
    }
    return replace(settings, **{section: replace(record, **given)}) if given else settings


def override_listeners(settings: BrokerSettings, urls: Sequence[str], tls: Mapping[str, Any]) -> BrokerSettings:
    """`--listen` URLs replace the file's listeners (keeping none of their settings); `--tls-*` flags set the
    TLS files of every mqtts:// and wss:// listener."""
    listeners = settings.listener
    if urls:
        parsed = []
        for url in urls:
            try:
                parsed.append(listener_from_url(url))
            except ValueError as exc:
                raise ConfigError(f"command line: --listen: listener {url!r}: {exc}") from None
        listeners = tuple(parsed)
    given = {key: value for key, value in tls.items() if value is not None and value is not False}
    if given:
        listeners = tuple(replace(lst, **given) if lst.scheme.tls else lst for lst in listeners)
    return replace(settings, listener=listeners)


def check(settings: BrokerSettings, source: str) -> BrokerSettings:
    """Rules across keys (a TLS listener needs its files, ...), after the flags were applied."""
    if not settings.listener:
        raise ConfigError(f"{source}: listener: at least one [[listener]] is needed")
    for i, lst in enumerate(settings.listener):
        path = f"listener[{i}]"
        address = parse_listener_url(lst.url)
        if address.scheme.tls and (lst.certfile is None or lst.keyfile is None):
            raise ConfigError(f"{source}: {path}: {lst.url} needs certfile and keyfile (or --tls-cert and --tls-key)")
        if lst.require_certificate and lst.cafile is None and lst.capath is None:
            raise ConfigError(f"{source}: {path}.require_certificate: needs cafile to check client certificates")
        tls_keys = [k for k in _LISTENER_TLS_POLICY if getattr(lst, k) is not None]
        if tls_keys and not address.scheme.tls:
            raise ConfigError(f"{source}: {path}.{tls_keys[0]}: only for mqtts:// and wss:// listeners")
        if lst.crlfile is not None and lst.cafile is None and lst.capath is None:
            raise ConfigError(f"{source}: {path}.crlfile: needs cafile (or capath) to check client certificates")
        if lst.mode is not None and address.scheme.transport is not Transport.UNIX:
            raise ConfigError(f"{source}: {path}.mode: only for unix:// listeners")
        if (lst.use_identity_as_username or lst.use_subject_as_username) and not address.scheme.tls:
            raise ConfigError(f"{source}: {path}: use_identity/subject_as_username need a TLS listener")
        if lst.use_identity_as_username and lst.use_subject_as_username:
            raise ConfigError(
                f"{source}: {path}: use_identity_as_username and use_subject_as_username exclude each other"
            )
    names: set[str] = set()
    for i, bridge in enumerate(settings.bridge):
        if bridge.name in names:
            raise ConfigError(f"{source}: bridge[{i}].name: {bridge.name!r} is the name of an earlier bridge")
        names.add(bridge.name)
    auth = settings.auth
    if auth.use_identity_as_username and auth.use_subject_as_username:
        raise ConfigError(f"{source}: auth: use_identity_as_username and use_subject_as_username exclude each other")
    if (auth.use_identity_as_username or auth.use_subject_as_username) and not any(
        parse_listener_url(lst.url).scheme.tls for lst in settings.listener
    ):
        raise ConfigError(f"{source}: auth: a certificate identity as user name needs an mqtts:// or wss:// listener")
    for i, lst in enumerate(settings.listener):
        identity = lst.use_identity_as_username or lst.use_subject_as_username
        identity = identity or auth.use_identity_as_username or auth.use_subject_as_username
        if identity and parse_listener_url(lst.url).scheme.tls and lst.cafile is None and lst.capath is None:
            raise ConfigError(
                f"{source}: listener[{i}]: a certificate identity as user name needs cafile (--tls-cafile) to check "
                "client certificates against"
            )
    return settings


# --- records to a table (for tomli-w) --------------------------------------------------------------------------


def to_table(record: Any) -> dict[str, Any]:
    """The TOML table of a record: every key (None ones left out: TOML has no null), enums by value."""
    out: dict[str, Any] = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if value is None:
            continue
        out[f.name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return to_table(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


def key_docs() -> list[tuple[str, str, str, str]]:
    """(key path, type, default, help) of every key, for docs/broker.md and its test."""
    rows: list[tuple[str, str, str, str]] = []

    def walk(cls: type, prefix: str) -> None:
        hints = _hints(cls)
        for f in fields(cls):
            kind = hints[f.name]
            inner = typing.get_args(kind)[0] if typing.get_origin(kind) is tuple else kind
            if isinstance(inner, type) and hasattr(inner, "__dataclass_fields__"):
                walk(inner, f"{prefix}{f.name}{'[]' if inner is not kind else ''}.")
                continue
            default = f.default if f.default is not MISSING else None
            rows.append(
                (
                    prefix + f.name,
                    _type_name(kind),
                    "" if default is None else repr(_plain(default)),
                    f.metadata["help"],
                )
            )

    walk(BrokerSettings, "")
    return rows


def _type_name(kind: Any) -> str:
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) is tuple:
        return f"array of {_type_name(args[0])}"
    if args:
        return _type_name(args[0])
    if isinstance(kind, type) and issubclass(kind, Enum):
        return " | ".join(repr(m.value) for m in kind)
    return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(kind, str(kind))


# --- mosquitto.conf ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A mosquitto.conf line we cannot honour."""

    source: str
    line: int
    text: str
    why: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.text!r}: {self.why}"


@dataclass(frozen=True, slots=True)
class Translation:
    settings: BrokerSettings
    unsupported: tuple[Unsupported, ...]
    #: The mosquitto.conf line that gave each key naming a file (key path: "auth.password_file",
    #: "listener[1].certfile", "bridge[0].remote.cafile"), for errors about that file.
    places: Mapping[str, Unsupported] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where each key of a configuration was given, for errors about it: `command line: --FLAG` for a key a flag
    set, `FILE:LINE: OPTION` for one a mosquitto.conf line gave, `FILE: KEY.PATH` otherwise."""

    source: str
    places: Mapping[str, Unsupported] = field(default_factory=dict)
    #: The flags given, by the key path they set (`listener[].certfile`: every listener's).
    flags: Mapping[str, str] = field(default_factory=dict)

    def of(self, path: str) -> str:
        flag = self.flags.get(re.sub(r"\[\d+\]", "[]", path))
        if flag is not None:
            return f"command line: {flag}"
        line = self.places.get(path)
        if line is None:
            return f"{self.source}: {path}"
        return f"{line.source}:{line.line}: {line.text.split()[0]}"


_INCLUDE = re.compile(r"^\s*include_dir\s+(.+?)\s*$")
_OPTION_LINE = re.compile(r"[a-z_]+(\s+\S.*)?")


def reads_as_mosquitto(text: str) -> bool:
    """Whether `text` (which is not TOML) is a mosquitto.conf: every line an `option value` one, most of the
    options ones mosquitto has."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not lines or not all(_OPTION_LINE.fullmatch(line) for line in lines):
        return False
    known = [line for line in lines if line.split()[0] in MOSQUITTO_OPTIONS]
    return len(known) * 2 > len(lines)


def include_dirs(text: str) -> list[str]:
    """The directories a mosquitto.conf's `include_dir` lines name (the caller reads their *.conf files)."""
    return [m.group(1) for line in text.splitlines() if (m := _INCLUDE.match(line))]


#: The mosquitto.conf options that set a limit, by option (`max_inflight_messages` sets `limits.max_inflight`).
_LIMIT_OPTIONS = {info.mosquitto: info for info in limit_infos() if info.mosquitto is not None}
_LISTENER_FILES = {
    "cafile": "cafile", "certfile": "certfile", "keyfile": "keyfile", "capath": "capath", "crlfile": "crlfile",
    "ciphers": "ciphers", "ciphers_tls1.3": "ciphers_tls13",
}  # fmt: skip
_LISTENER_TLS_POLICY = ("tls_version", "ciphers", "ciphers_tls13", "crlfile", "capath")
_LISTENER_BOOLS = ("require_certificate", "use_identity_as_username", "use_subject_as_username")
_AUTH_KEYS = ("allow_anonymous", "password_file", "acl_file")
_LOG_TYPES = {
    "debug": LogLevel.debug,
    "all": LogLevel.debug,
    "websockets": LogLevel.debug,
    "information": LogLevel.info,
    "notice": LogLevel.info,
    "warning": LogLevel.warning,
    "error": LogLevel.error,
    "none": LogLevel.none,
}
#: Options whose one value we honour: it is what this broker does anyway (mosquitto's default, mostly).
_OUR_BEHAVIOUR = {
    "max_inflight_bytes": "0",
    "max_qos": "2",
    "memory_limit": "0",
    "upgrade_outgoing_qos": "false",
    "set_tcp_nodelay": "true",  # trio sets TCP_NODELAY on every connection
    "queue_qos0_messages": "false",  # QoS 0 is not queued for an offline client (mosquitto's default)
    "allow_duplicate_messages": "false",  # overlapping subscriptions deliver once, at the highest QoS
    "check_retain_source": "false",  # a retained message is not checked again against its publisher's ACL
}
_BRIDGE_KEYS = frozenset(
    [
        "address",
        "addresses",
        "bridge_attempt_unsubscribe",
        "bridge_bind_address",
        "bridge_cafile",
        "bridge_capath",
        "bridge_certfile",
        "bridge_keyfile",
        "bridge_identity",
        "bridge_insecure",
        "bridge_max_packet_size",
        "bridge_outgoing_retain",
        "bridge_protocol_version",
        "bridge_psk",
        "bridge_require_ocsp",
        "bridge_alpn",
        "bridge_tls_version",
        "cleansession",
        "local_cleansession",
        "clientid",
        "local_clientid",
        "idle_timeout",
        "keepalive_interval",
        "local_password",
        "local_username",
        "notifications",
        "notifications_local_only",
        "notification_topic",
        "password",
        "remote_clientid",
        "remote_password",
        "remote_username",
        "restart_timeout",
        "round_robin",
        "start_type",
        "threshold",
        "topic",
        "try_private",
        "username",
    ]
)
#: Every option mosquitto 2.0 has (mosquitto.conf(5)), honoured here or not: an unknown name is a typo, and gets a
#: "did you mean" (and a file of such lines reads as a mosquitto.conf).
MOSQUITTO_OPTIONS = _BRIDGE_KEYS | frozenset(
    [
        "acl_file", "allow_anonymous", "allow_duplicate_messages", "allow_zero_length_clientid", "auth_opt_",
        "auth_plugin", "auth_plugin_deny_special_chars", "auto_id_prefix", "autosave_interval", "autosave_on_changes",
        "bind_address", "bind_interface", "cafile", "capath", "certfile", "check_retain_source", "ciphers",
        "ciphers_tls1.3", "clientid_prefixes", "connection", "connection_messages", "crlfile", "dhparamfile",
        "http_dir", "include_dir", "keyfile", "listener", "log_dest", "log_facility", "log_timestamp",
        "log_timestamp_format", "log_type", "max_connections", "max_inflight_bytes", "max_inflight_messages",
        "max_keepalive", "max_packet_size", "max_qos", "max_queued_bytes", "max_queued_messages", "max_topic_alias",
        "memory_limit", "message_size_limit", "mount_point", "password_file", "per_listener_settings", "persistence",
        "persistence_file", "persistence_location", "persistent_client_expiration", "pid_file", "plugin",
        "plugin_opt_", "port", "protocol", "psk_file", "psk_hint", "queue_qos0_messages", "require_certificate",
        "retain_available", "set_tcp_nodelay", "socket_domain", "sys_interval", "tls_engine", "tls_engine_kpass_sha1",
        "tls_keyform", "tls_version", "upgrade_outgoing_qos", "use_identity_as_username", "use_subject_as_username",
        "use_username_as_clientid", "user", "websockets_headers_size", "websockets_log_level",
    ]
)  # fmt: skip
# Snapshot timing: this broker commits what it acknowledges, so there is no snapshot to time.
_SNAPSHOT_KEYS = frozenset(["autosave_interval", "autosave_on_changes"])
#: The database file in mosquitto.conf's persistence_location: never mosquitto's own file (its persistence_file),
#: whose format is not ours: that one is taken over at the first start, and left as it is.
DEFAULT_PERSISTENCE_FILE = "mqtt-cli.db"


def translate_mosquitto(
    text: str, source: str, included: Mapping[str, Sequence[tuple[str, str]]] | None = None
) -> Translation:
    """mosquitto.conf (2.0) as our records, and every line we cannot honour (file, line number, why).

    `included` maps each `include_dir` argument to its files' (name, text), in the order mosquitto reads
    them (sorted by name); they are read where the line stands, as mosquitto does.
    """
    t = _Translator()
    t.feed(text, source, included or {})
    return t.finish()


class _Translator:
    def __init__(self) -> None:
        self.limits: dict[str, Any] = {}
        self.auth: dict[str, Any] = {}
        self.log: dict[str, Any] = {}
        self.process: dict[str, Any] = {}
        self.sys: dict[str, Any] = {}
        self.persistence: dict[str, Any] = {}  # "_on", "_location", "_file" as mosquitto.conf gave them
        self.dynsec: dict[str, Any] = {}  # "_line" (the plugin line), "config_file"
        self.listeners: list[dict[str, Any]] = []  # each with "_port", "_address", "_protocol", "_domain"
        self.default: dict[str, Any] = {}  # settings given before any `listener` line (the default listener's)
        self.unsupported: list[Unsupported] = []
        self.per_listener = False
        self.in_bridge = False
        self.bridges: list[dict[str, Any]] = []  # `connection` blocks, with "_line" (the connection line)
        self.log_dests: list[str] = []
        self.log_types: list[LogLevel] = []
        self.here = Unsupported("", 0, "", "")  # the line being read
        self.default_lines: list[Unsupported] = []  # lines that set the default listener's settings
        self.places: dict[str, Unsupported] = {}  # key path -> its line, for the keys that are not in a listener

    def feed(self, text: str, source: str, included: Mapping[str, Sequence[tuple[str, str]]]) -> None:
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, _, rest = line.partition(" ")
            value = rest.strip()
            self.here = Unsupported(source, number, line, "")
            try:
                done = self.line(key, value)
            except ValueError as exc:
                done = str(exc)
            if key == "include_dir" and done is True:
                for name, sub in included.get(value, ()):
                    self.feed(sub, name, included)
            elif done is not True:
                self.unsupported.append(Unsupported(source, number, line, done or f"{key} is not supported"))

    def _target(self) -> dict[str, Any]:
        if self.listeners:
            return self.listeners[-1]
        self.default_lines.append(self.here)
        return self.default

    def line(self, key: str, value: str) -> bool | str:
        """True when honoured, else why not."""
        if not value:
            return f"{key} needs a value"
        if self.in_bridge and key in _BRIDGE_KEYS:
            return self._bridge_line(self.bridges[-1], key, value)
        handler = _OPTION_HANDLERS.get(key)
        if handler is not None:
            return handler(self, key, value)
        if key not in MOSQUITTO_OPTIONS and not key.startswith(("auth_opt_", "plugin_opt_")):
            hint = f"; {hint}" if (hint := did_you_mean(key, MOSQUITTO_OPTIONS)) else ""
            return f"{key} is not a mosquitto option{hint}"
        return f"{key} is not supported"

    # One handler per option (or family of options), each (key, value) -> True when honoured, else why not;
    # _OPTION_HANDLERS maps the option names to them.

    def _honoured(self, key: str, value: str) -> bool | str:
        return True  # include_dir (read by `feed`), and what this broker does anyway (_SNAPSHOT_KEYS)

    def _not_supported(self, key: str, value: str) -> bool | str:
        return f"{key} is not supported"

    def _our_behaviour(self, key: str, value: str) -> bool | str:
        ours = _OUR_BEHAVIOUR[key]
        return True if value == ours else f"only {key} {ours} (this broker's behaviour)"

    def _process(self, key: str, value: str) -> bool | str:
        self.process[key] = value
        return True

    # --- clients and authentication

    def _auth_flag(self, key: str, value: str) -> bool | str:
        self.auth[key] = _bool(value, key)
        return True

    def _auth_text(self, key: str, value: str) -> bool | str:
        self.auth[key] = value
        return True

    def _per_listener_settings(self, key: str, value: str) -> bool | str:
        self.per_listener = _bool(value, key)
        self.auth["per_listener_settings"] = self.per_listener
        return True

    def _auth_key(self, key: str, value: str) -> bool | str:
        """allow_anonymous, password_file, acl_file: the last listener's with per_listener_settings, else global."""
        parsed: Any = _bool(value, key) if key == "allow_anonymous" else value
        if self.per_listener and self.listeners:
            self.listeners[-1][key] = parsed
            self.listeners[-1].setdefault("_places", {})[key] = self.here
        else:
            self.auth[key] = parsed
            self.places[f"auth.{key}"] = self.here
        return True

    def _plugin(self, key: str, value: str) -> bool | str:
        if not value.rsplit("/", 1)[-1].startswith("mosquitto_dynamic_security"):
            return f"{key} {value}: only mosquitto's dynamic security plugin is built in"
        self.dynsec["_line"] = self.here
        return True

    def _plugin_config_file(self, key: str, value: str) -> bool | str:
        if "_line" not in self.dynsec:
            return f"{key} is not supported"  # an option of a plugin we do not have
        self.dynsec["config_file"] = value
        return True

    # --- listeners

    def _listener(self, key: str, value: str) -> bool | str:
        self.in_bridge = False
        port, _, address = value.partition(" ")
        self.listeners.append({"_port": _int(port, key, 0, 65535), "_address": address.strip()})
        return True

    def _default_listener(self, key: str, value: str) -> bool | str:
        """port, bind_address: mosquitto's default listener (which a `port` line starts)."""
        self.default["_port" if key == "port" else "_address"] = _int(value, key, 0, 65535) if key == "port" else value
        return True

    def _tls_version(self, key: str, value: str) -> bool | str:
        if value not in TLS_VERSIONS:
            return f"tls_version is one of {', '.join(TLS_VERSIONS)}"
        self._target()[key] = value
        return True

    def _protocol(self, key: str, value: str) -> bool | str:
        if value not in ("mqtt", "websockets"):
            return f"protocol {value} is not supported (mqtt or websockets)"
        self._target()["_protocol"] = value
        return True

    def _socket_domain(self, key: str, value: str) -> bool | str:
        if value not in ("ipv4", "ipv6"):
            return "socket_domain is ipv4 or ipv6"
        self._target()["_domain"] = value
        return True

    def _listener_file(self, key: str, value: str) -> bool | str:
        target = self._target()
        target[_LISTENER_FILES[key]] = value
        target.setdefault("_places", {})[_LISTENER_FILES[key]] = self.here
        return True

    def _listener_flag(self, key: str, value: str) -> bool | str:
        self._target()[key] = _bool(value, key)
        return True

    def _max_connections(self, key: str, value: str) -> bool | str:
        n = int(value) if re.fullmatch(r"-?\d+", value) else _int(value, key, 0)
        self._target()["max_connections"] = max(n, 0)  # mosquitto's -1: unlimited
        return True

    # --- limits

    def _limit(self, key: str, value: str) -> bool | str:
        limit = _LIMIT_OPTIONS[key]
        if limit.kind is bool:
            parsed: bool | int | float = _bool(value, key)
        else:
            parsed = _duration(value, key) if limit.mosquitto_period else _int(value, key, 0, limit.hi)
        self.limits[limit.name] = parsed
        return True

    def _sys_interval(self, key: str, value: str) -> bool | str:
        self.sys["interval"] = float(_int(value, key, 0))
        return True

    # --- logging

    def _log_timestamp_format(self, key: str, value: str) -> bool | str:
        self.log["timestamp_format"] = value
        return True

    def _log_type(self, key: str, value: str) -> bool | str:
        if value in ("subscribe", "unsubscribe", "all"):
            self.log["subscriptions"] = True
            if value != "all":
                return True
        level = _LOG_TYPES.get(value)
        if level is None:
            return f"log_type {value} is not known"
        self.log_types.append(level)
        return True

    def _log_timestamp(self, key: str, value: str) -> bool | str:
        return True if _bool(value, key) else "log lines always carry a time stamp"

    def _connection_messages(self, key: str, value: str) -> bool | str:
        if not _bool(value, key):
            self.log.setdefault("_no_connections", True)
        return True

    def _log_facility(self, key: str, value: str) -> bool | str:
        n = _int(value, key, 0, 7)
        self.log["syslog_facility"] = f"local{n}"
        return True

    # --- persistence

    def _persistence(self, key: str, value: str) -> bool | str:
        self.persistence["_on"] = _bool(value, key)
        return True

    def _persistence_location(self, key: str, value: str) -> bool | str:
        self.persistence["_location"] = value
        self.places["persistence.path"] = self.here
        return True

    def _persistence_file(self, key: str, value: str) -> bool | str:
        if "/" in value:
            return "persistence_file is a file name; give the directory with persistence_location"
        self.persistence["_file"] = value
        self.places.setdefault("persistence.path", self.here)
        return True

    # --- bridges

    def _connection(self, key: str, value: str) -> bool | str:
        self.in_bridge = True
        self.bridges.append({"name": value, "_line": self.here, "topics": [], "remote": {}})
        return True

    def _bridge_line(self, b: dict[str, Any], key: str, value: str) -> bool | str:
        """One line of a `connection` block, onto the [[bridge]] keys (see docs/bridge.md for the mapping)."""
        remote = b["remote"]
        if key in ("address", "addresses"):
            urls = []
            for item in value.split():
                host, sep, port = item.rpartition(":") if not item.endswith("]") else (item, "", "")
                if not sep:
                    host, port = item, "1883"
                good_host = re.fullmatch(r"[\w.-]+|\[[0-9a-fA-F:.]+\]", host)
                if not port.isdigit() or not 0 < int(port) < 65536 or not good_host:
                    return f"{key}: {item!r} is not HOST[:PORT]"
                urls.append(f"mqtt://{host}:{port}")
            remote["url"] = remote.get("url", []) + urls
            return True
        if key == "topic":
            try:
                parse_rule(value)
            except BridgeRuleError as exc:
                return str(exc)
            b["topics"].append(value)
            return True
        simple = {
            "remote_username": "username", "username": "username", "remote_password": "password",
            "password": "password", "remote_clientid": "client_id", "clientid": "client_id", "bridge_cafile": "cafile",
            "bridge_capath": "capath", "bridge_certfile": "cert", "bridge_keyfile": "key", "bridge_alpn": "alpn",
        }  # fmt: skip
        if key in simple:
            remote[simple[key]] = value
            b.setdefault("_places", {})[simple[key]] = self.here
            return True
        if key == "bridge_tls_version":
            if value not in ("tlsv1.2", "tlsv1.3"):
                return "bridge_tls_version: tlsv1.2 or tlsv1.3"
            remote["tls_version"] = value
            return True
        if key in ("cleansession", "try_private", "bridge_insecure", "round_robin"):
            name = {"cleansession": "clean_start", "bridge_insecure": "insecure"}.get(key, key)
            remote[name] = _bool(value, key)
            return True
        if key == "keepalive_interval":
            remote["keepalive"] = _int(value, key, 0, 65535)
            return True
        if key == "bridge_protocol_version":
            versions = {"mqttv31": "3.1", "mqttv311": "3.1.1", "mqttv50": "5"}
            if value not in versions:
                return "bridge_protocol_version: mqttv31, mqttv311 or mqttv50"
            remote["protocol_version"] = versions[value]
            return True
        if key == "local_clientid":
            b["local_client_id"] = value
            return True
        if key == "notifications":
            b["_notifications"] = _bool(value, key)
            return True
        if key == "notification_topic":
            b["notification_topic"] = value
            return True
        if key == "restart_timeout":
            words = value.split()
            if not 1 <= len(words) <= 2 or not all(w.isdigit() and int(w) > 0 for w in words):
                return "restart_timeout: one or two whole numbers of seconds (BASE [CAP])"
            b["restart_timeout"] = (float(words[0]), float(words[-1]))
            return True
        if key == "start_type":
            return True if value == "automatic" else "only start_type automatic: an embedded bridge always runs"
        if key in ("local_username", "local_password"):
            return f"{key}: the embedded bridge is inside the broker: no local login, and no ACL applies to it"
        return f"{key} is not supported in a bridge"

    def _log_dest(self, key: str, value: str) -> bool | str:
        kind, _, arg = value.partition(" ")
        if kind == "file" and arg.strip():
            if "file" in self.log:
                return "only one log file"
            self.log["file"] = arg.strip()
            self.places["log.file"] = self.here
        elif kind == "syslog":
            self.log["syslog"] = True
        elif kind == "topic":
            self.log["topic"] = True
        elif kind in ("stderr", "none"):
            pass
        else:
            return f"log_dest {kind} is not supported (file, syslog, topic, stderr, none)"
        return True

    def finish(self) -> Translation:
        default = self.default
        if not self.listeners:
            if "_port" not in default and "_address" not in default:
                default["_address"] = "127.0.0.1"  # mosquitto 2 with no listener: local only, port 1883
            specs = [default]
        elif "_port" in default or "_address" in default:
            specs = [default, *self.listeners]  # `port` beside `listener` lines: both listen
        else:
            specs = list(self.listeners)
            for where in self.default_lines:
                self.unsupported.append(
                    replace(where, why="set for mosquitto's default listener, which no `port` line starts")
                )
        records = [
            ListenerSettings(url=_mosquitto_url(spec), **{k: v for k, v in spec.items() if not k.startswith("_")})
            for spec in specs
        ]
        for i, spec in enumerate(specs):
            self.places.update({f"listener[{i}].{k}": line for k, line in spec.get("_places", {}).items()})
        level = LogLevel.warning
        if self.log_types:
            level = min(self.log_types, key=lambda lvl: lvl.rank)
        elif not self.log.pop("_no_connections", False):
            level = LogLevel.info  # mosquitto logs connections by default
        self.log.pop("_no_connections", None)
        log = LogSettings(**self.log, level=level)
        bridges: list[BridgeSettings] = []
        for b in self.bridges:
            bridge_line: Unsupported = b.pop("_line")
            places = {f"bridge[{len(bridges)}].remote.{k}": line for k, line in b.pop("_places", {}).items()}
            wants_notifications = b.pop("_notifications", True)
            if not wants_notifications:
                b.pop("notification_topic", None)
            remote = b.pop("remote")
            remote.setdefault("protocol_version", "3.1.1")  # mosquitto's default for a bridge
            if "url" in remote:
                remote["url"] = tuple(remote["url"])
            b["topics"] = tuple(b["topics"])
            try:
                if not remote.get("url") or not b["topics"]:
                    raise ValueError("a connection needs an address and at least one topic line")
                bridges.append(BridgeSettings(remote=BridgeRemoteSettings(**remote), **b))
                self.places.update(places)
            except ValueError as exc:
                self.unsupported.append(replace(bridge_line, why=f"bridge left out: {exc}"))
        dynsec_line = self.dynsec.pop("_line", None)
        if dynsec_line is not None and "config_file" not in self.dynsec:
            self.unsupported.append(replace(dynsec_line, why="the plugin needs plugin_opt_config_file (left off)"))
        settings = BrokerSettings(
            dynamic_security=DynamicSecuritySettings(**self.dynsec),
            bridge=tuple(bridges),
            listener=tuple(records),
            limits=Limits(**self.limits),
            auth=AuthSettings(**self.auth),
            log=log,
            sys=SysSettings(**self.sys),
            persistence=_persistence_of(self.persistence),
            process=ProcessSettings(**self.process),
        )
        return Translation(settings, tuple(self.unsupported), self.places)


_Handler = Callable[[_Translator, str, str], bool | str]
#: The mosquitto.conf options _Translator.line honours (or answers for), and the handler of each. A bridge's own
#: options (_BRIDGE_KEYS) go to _Translator._bridge_line inside a `connection` block.
_OPTION_HANDLERS: dict[str, _Handler] = {
    **dict.fromkeys(_OUR_BEHAVIOUR, _Translator._our_behaviour),
    **dict.fromkeys(("user", "pid_file"), _Translator._process),
    **dict.fromkeys(("use_username_as_clientid", "allow_zero_length_clientid"), _Translator._auth_flag),
    "auto_id_prefix": _Translator._auth_text,
    "per_listener_settings": _Translator._per_listener_settings,
    **dict.fromkeys(_AUTH_KEYS, _Translator._auth_key),
    **dict.fromkeys(("plugin", "auth_plugin"), _Translator._plugin),
    "plugin_opt_config_file": _Translator._plugin_config_file,
    "listener": _Translator._listener,
    **dict.fromkeys(("port", "bind_address"), _Translator._default_listener),
    "tls_version": _Translator._tls_version,
    "protocol": _Translator._protocol,
    "socket_domain": _Translator._socket_domain,
    "http_dir": _Translator._not_supported,
    **dict.fromkeys(_LISTENER_FILES, _Translator._listener_file),
    **dict.fromkeys(_LISTENER_BOOLS, _Translator._listener_flag),
    "max_connections": _Translator._max_connections,
    **dict.fromkeys(_LIMIT_OPTIONS, _Translator._limit),
    "sys_interval": _Translator._sys_interval,
    "log_dest": _Translator._log_dest,
    "log_type": _Translator._log_type,
    "log_timestamp": _Translator._log_timestamp,
    "log_timestamp_format": _Translator._log_timestamp_format,
    "connection_messages": _Translator._connection_messages,
    "log_facility": _Translator._log_facility,
    "persistence": _Translator._persistence,
    "persistence_location": _Translator._persistence_location,
    "persistence_file": _Translator._persistence_file,
    **dict.fromkeys(_SNAPSHOT_KEYS, _Translator._honoured),  # every acknowledged change is committed at once
    "include_dir": _Translator._honoured,
    "connection": _Translator._connection,
}


def _persistence_of(p: dict[str, Any]) -> PersistenceSettings:
    if not p.get("_on"):
        return PersistenceSettings()  # persistence_location without `persistence true` keeps nothing (mosquitto)
    location = p.get("_location", "")
    name = DEFAULT_PERSISTENCE_FILE
    return PersistenceSettings(
        path=location.rstrip("/") + "/" + name if location else name,
        mosquitto_db=p.get("_file", DEFAULT_MOSQUITTO_DB),
    )


def _mosquitto_url(spec: dict[str, Any]) -> str:
    port = spec.get("_port", 1883)
    address = spec.get("_address", "")
    ws = spec.get("_protocol") == "websockets"
    tls = "certfile" in spec or "keyfile" in spec
    transport = Transport.UNIX if port == 0 and address.startswith("/") else Transport.TCP
    scheme = next(s for s in Scheme if (s.transport, s.tls, s.websocket) == (transport, tls, ws))
    if transport is Transport.UNIX:
        return f"{scheme}://{address}"
    if not address:
        address = "::" if spec.get("_domain") == "ipv6" else "0.0.0.0"
    host = f"[{address}]" if ":" in address else address
    return f"{scheme}://{host}:{port}"


def _int(value: str, key: str, lo: int, hi: int | None = None) -> int:
    if not re.fullmatch(r"\d+", value) or int(value) < lo or (hi is not None and int(value) > hi):
        rng = f"from {lo} to {hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{key} must be an integer {rng}, not {value!r}")
    return int(value)


_DURATION_UNITS = {"h": 3600, "d": 86400, "w": 7 * 86400, "m": 30 * 86400, "y": 365 * 86400}


def _duration(value: str, key: str) -> int:
    """mosquitto's period: a whole number and a unit, h(ours), d(ays), w(eeks), m(onths: 30 days), y(ears)."""
    if not re.fullmatch(r"\d+[hdwmy]", value):
        raise ValueError(f"{key} must be a whole number and a unit h, d, w, m or y (e.g. 14d), not {value!r}")
    return int(value[:-1]) * _DURATION_UNITS[value[-1]]


def _bool(value: str, key: str) -> bool:
    if value not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, not {value!r}")
    return value == "true"
