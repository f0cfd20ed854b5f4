"""The broker's configuration files: broker.toml and mosquitto.conf read into core.config records, the
effective TOML written, files a start-up or reload needs checked, and the records mapped onto the server's.

Everything here raises ConfigError (a usage error: exit 2) for what the files say, and FileProblem (exit 1)
for files that cannot be read or written; both are one line.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from mqtt_cli.core.admin import AdminUsers
from mqtt_cli.core.auth import AuthPolicy
from mqtt_cli.core.bridge import parse_rule
from mqtt_cli.core.broker import BrokerConfig
from mqtt_cli.core.config import (
    BridgeSettings,
    BrokerSettings,
    ConfigError,
    Translation,
    check,
    include_dirs,
    load_config,
    parse_metrics_address,
    to_table,
    translate_mosquitto,
)
from mqtt_cli.net.auth_files import AuthFileError, load_dynsec_file, load_policy
from mqtt_cli.net.bridge import side_config
from mqtt_cli.net.embedded import EmbeddedConfig
from mqtt_cli.net.server import ListenerTLS, ServeOptions, ServerError, listener_policy, listener_record, tls_context

__all__ = [
    "ConfigSource",
    "FileProblem",
    "check_files",
    "read_config",
    "read_mosquitto",
    "serve_options",
    "toml_text",
    "writable",
]


class FileProblem(Exception):
    """A file named by the configuration cannot be read or written (one line; exit 1)."""


@dataclass(frozen=True, slots=True)
class ConfigSource:
    """Where the configuration comes from, to read it again on SIGHUP."""

    path: Path | None = None
    mosquitto: bool = False
    ignore_unsupported: bool = False

    @property
    def label(self) -> str:
        """How errors name it."""
        return str(self.path or "command line")

    def read(self) -> Translation:
        if self.path is None:
            return Translation(BrokerSettings(), ())
        if self.mosquitto:
            return read_mosquitto(self.path)
        return Translation(read_config(self.path), ())


def read_config(path: Path) -> BrokerSettings:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FileProblem(f"cannot read the configuration {path}: {exc.strerror or exc}") from None
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return load_config(table, str(path))


def read_mosquitto(path: Path) -> Translation:
    """mosquitto.conf and the `*.conf` files of its include_dir lines (sorted by name, as mosquitto reads them)."""
    main = _read_text(path)
    included: dict[str, list[tuple[str, str]]] = {}
    pending = include_dirs(main)
    while pending:
        directory = pending.pop()
        if directory in included:
            continue
        try:
            names = sorted(p for p in Path(directory).iterdir() if p.suffix == ".conf" and p.is_file())
        except OSError as exc:
            raise FileProblem(f"{path}: include_dir {directory}: {exc.strerror or exc}") from None
        included[directory] = [(str(p), _read_text(p)) for p in names]
        for _, text in included[directory]:
            pending.extend(include_dirs(text))
    try:
        return translate_mosquitto(main, str(path), included)
    except ValueError as exc:  # a value the records refuse (e.g. a listener address that is not one)
        raise ConfigError(f"{path}: {exc}") from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise FileProblem(f"cannot read the configuration {path}: {exc.strerror or exc}") from None


def toml_text(settings: BrokerSettings) -> str:
    return tomli_w.dumps(to_table(settings))


def writable(path: Path, what: str) -> None:
    """FileProblem unless a file can be created at `path` (tried with a scratch file beside it)."""
    probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
    try:
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise FileProblem(f"cannot write the {what} {path}: {exc.strerror or exc}") from None


def check_files(settings: BrokerSettings) -> None:
    """The TLS files of every listener load (FileProblem naming the listener otherwise); the log file can be
    opened. Done before anything listens, and before a reload applies anything."""
    for lst in settings.listener:
        record = listener_record(lst)
        if record.scheme.tls:
            try:
                tls_context(record.tls or ListenerTLS(), f"listener {lst.url}")
            except ServerError as exc:
                raise FileProblem(f"listener {lst.url}: {exc}") from None
    if settings.log.file is not None:
        try:
            with open(settings.log.file, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise FileProblem(f"cannot open the log file {settings.log.file}: {exc.strerror or exc}") from None


def serve_options(settings: BrokerSettings, source: str, *, instance: str, version: str) -> ServeOptions:
    """The server's records for `settings` (callbacks and the ready file are the caller's to set).

    The one place where the configuration meets the network layer: what the server cannot do yet is refused
    here, naming the key, rather than dropped.
    """
    settings = check(settings, source)
    broker_policy, policies = _policies(settings, source)
    listeners = [listener_record(lst, policy) for lst, policy in zip(settings.listener, policies, strict=True)]
    limits = settings.limits
    options = ServeOptions(
        listeners=listeners,
        broker=BrokerConfig(
            max_keepalive=limits.max_keepalive,
            max_topic_alias=limits.max_topic_alias,
            max_inflight=limits.max_inflight,
            max_queued_messages=limits.max_queued_messages,
            max_queued_bytes=limits.max_queued_bytes,
            queue_drop_oldest=limits.queue_drop_oldest,
            max_packet_size=limits.max_packet_size,
            message_size_limit=limits.message_size_limit,
            retain_available=limits.retain_available,
            reason_strings=limits.reason_strings,
            max_topic_levels=limits.max_topic_levels,
            sys_interval=settings.sys.interval,
            persistent_client_expiration=limits.persistent_client_expiration,
            use_username_as_clientid=settings.auth.use_username_as_clientid,
            allow_zero_length_clientid=settings.auth.allow_zero_length_clientid,
            auto_id_prefix=settings.auth.auto_id_prefix,
            drop_log_interval=settings.log.drop_interval,
            instance=instance,
            version=version,
        ),
        max_connections=limits.max_connections,
        auth=broker_policy,
        metrics=None if settings.metrics.listen is None else parse_metrics_address(settings.metrics.listen),
        persistence=settings.persistence,
        dynsec_file=_path(settings.dynamic_security.config_file),
        admin_users=_admin_users(settings),
        metrics_tls=_metrics_tls(settings),
    )
    for i, spec in enumerate(listeners):
        try:
            listener_policy(options, spec)  # one open to the network without authentication: refused here
        except ServerError as exc:
            raise ConfigError(f"{source}: listener[{i}]: {exc}") from None
    options.bridges = [_bridge(b, f"{source}: bridge[{i}]") for i, b in enumerate(settings.bridge)]
    return options


def _admin_users(settings: BrokerSettings) -> AdminUsers:
    m = settings.metrics
    return AdminUsers(frozenset(m.admin_users or ()), frozenset(m.readonly_users or ()), m.admin_role, m.readonly_role)


def _metrics_tls(settings: BrokerSettings) -> ListenerTLS | None:
    m = settings.metrics
    return None if m.certfile is None else ListenerTLS(Path(m.certfile), _path(m.keyfile))


def _bridge(b: BridgeSettings, where: str) -> EmbeddedConfig:
    """An embedded bridge's records: its remote side made as `mqtt bridge` makes one (side_config: URLs, password
    file, TLS context), its rules parsed (checked when the file was loaded)."""
    host = socket.gethostname().split(".")[0] or "localhost"
    table = to_table(b.remote)
    table.setdefault("client_id", f"{host}.{b.name}")
    if table["protocol_version"] in ("3.1", "3.1.1", "5.0"):
        table["protocol_version"] = {"3.1": "31", "3.1.1": "311", "5.0": "5"}[table["protocol_version"]]
    try:
        remote = side_config(table, table["client_id"])
    except ValueError as exc:
        raise ConfigError(f"{where}.remote: {exc}") from None
    return EmbeddedConfig(
        name=b.name,
        remote=remote,
        rules=[parse_rule(text) for text in b.topics],
        local_client_id=b.local_client_id or f"local.{host}.{b.name}",
        restart_base=b.restart_timeout[0],
        restart_cap=b.restart_timeout[1],
        notification_topic=b.notification_topic,
        qos0_queue=b.qos0_queue,
        receive_maximum=b.receive_maximum,
        source=b,
    )


def _policies(settings: BrokerSettings, source: str) -> tuple[AuthPolicy, list[AuthPolicy | None]]:
    """The broker's policy and each listener's own (None: the broker's), with their files read (AuthFileError is
    a ConfigError here: exit 2, as for the flags). With per_listener_settings, a listener's unset key is taken
    from [auth]; without it, a listener setting one is an error rather than ignored."""
    auth = settings.auth
    try:
        dynsec_file = _path(settings.dynamic_security.config_file)
        # One state for every listener (mosquitto's plugin is global), read again on reload.
        dynsec = load_dynsec_file(dynsec_file) if dynsec_file is not None else None
        broker = load_policy(
            allow_anonymous=auth.allow_anonymous, password_file=_path(auth.password_file),
            acl_file=_path(auth.acl_file), use_identity_as_username=auth.use_identity_as_username,
            use_subject_as_username=auth.use_subject_as_username, dynsec=dynsec,
        )  # fmt: skip
        own: list[AuthPolicy | None] = []
        for i, lst in enumerate(settings.listener):
            keys = [k for k in ("allow_anonymous", "password_file", "acl_file") if getattr(lst, k) is not None]
            if keys and not auth.per_listener_settings:
                raise ConfigError(f"{source}: listener[{i}].{keys[0]}: needs [auth] per_listener_settings = true")
            identity = {
                "use_identity_as_username": lst.use_identity_as_username or auth.use_identity_as_username,
                "use_subject_as_username": lst.use_subject_as_username or auth.use_subject_as_username,
            }
            if keys:
                own.append(load_policy(
                    allow_anonymous=lst.allow_anonymous if lst.allow_anonymous is not None else auth.allow_anonymous,
                    password_file=_path(lst.password_file or auth.password_file),
                    acl_file=_path(lst.acl_file or auth.acl_file), dynsec=dynsec, **identity,
                ))  # fmt: skip
            elif lst.use_identity_as_username or lst.use_subject_as_username:
                own.append(dataclasses.replace(broker, **identity))
            else:
                own.append(None)
    except AuthFileError as exc:
        raise ConfigError(str(exc)) from None
    return broker, own


def _path(name: str | None) -> Path | None:
    return None if name is None else Path(name)
