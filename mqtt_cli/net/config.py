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
from typing import Any

import tomli_w

from mqtt_cli.core.admin import AdminUsers
from mqtt_cli.core.auth import AuthPolicy
from mqtt_cli.core.bridge import parse_rule
from mqtt_cli.core.broker import BrokerConfig
from mqtt_cli.core.config import (
    AuthSettings,
    BridgeSettings,
    BrokerSettings,
    ConfigError,
    Origin,
    Translation,
    check,
    include_dirs,
    load_config,
    parse_metrics_address,
    reads_as_mosquitto,
    to_table,
    translate_mosquitto,
)
from mqtt_cli.net.auth_files import AuthFileError, load_dynsec_file, load_policy
from mqtt_cli.net.bridge import side_config
from mqtt_cli.net.embedded import EmbeddedConfig
from mqtt_cli.net.listeners import ListenerTLS, ServerError, listener_policy, listener_record, tls_context
from mqtt_cli.net.server import ServeOptions

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
        text = data.decode("utf-8")
        table = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        if reads_as_mosquitto(text):  # mosquitto's own `-c`: the habit is worth an answer
            raise ConfigError(
                f"{path}: not TOML but a mosquitto.conf; run it with --mosquitto-conf {path}, or translate it once "
                f"with --mosquitto-conf {path} --print-config"
            ) from None
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


#: Heads the sections --print-config comments out.
_DEFAULTS_NOTE = "# Sections at their defaults are commented out: uncomment or add one (docs/broker.md) to change it.\n"


def toml_text(settings: BrokerSettings) -> str:
    """The configuration as a file: every section, those at their defaults commented out. A user can then
    add any documented section (an empty `bridge = []` or `[metrics]` would make a `[[bridge]]` or `[metrics]`
    added below it invalid TOML); read back, it gives the same records."""
    defaults, table = BrokerSettings(), to_table(settings)
    parts = [_DEFAULTS_NOTE]
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        text = tomli_w.dumps({f.name: table[f.name]}) if value != () else f"[[{f.name}]]\n"
        if value == getattr(defaults, f.name):
            text = "".join(f"# {line}\n" if line else "\n" for line in text.splitlines())
        parts.append(text.rstrip("\n") + "\n\n")
    return "".join(parts).rstrip("\n") + "\n"


def writable(path: Path, what: str) -> None:
    """FileProblem unless a file can be created at `path` (tried with a scratch file beside it)."""
    probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
    try:
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise FileProblem(f"cannot write the {what} {path}: {exc.strerror or exc}") from None


#: What each key naming a file to read holds, as errors say it.
_LISTENER_FILES = {"certfile": "certificate", "keyfile": "private key", "cafile": "CA file"}
_REMOTE_FILES = {"password_file": "password file", "cafile": "CA file", "capath": "CA directory",
                 "cert": "certificate", "key": "private key"}  # fmt: skip


def _readable(name: str, what: str, place: str) -> str | None:
    """Why the file (or directory) `name` cannot be read, as one line starting with `place`; None if it can."""
    path = os.path.expanduser(name)
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb"):
                pass
    except OSError as exc:
        return f"{place}: cannot read the {what} {name}: {exc.strerror or exc}"
    return None


def check_files(settings: BrokerSettings, origin: Origin | None = None) -> None:
    """Every file the configuration names can be used (FileProblem naming the file's key and, for
    mosquitto.conf, its line): the TLS files of every listener load, the log file can be opened, the
    persistence database can be created. Done before anything listens, and before a reload applies anything."""
    origin = origin or Origin("command line")
    for i, lst in enumerate(settings.listener):
        record = listener_record(lst)
        if not record.scheme.tls:
            continue
        for key, what in _LISTENER_FILES.items():
            name = getattr(lst, key)
            if name is not None and (problem := _readable(name, what, origin.of(f"listener[{i}].{key}"))):
                raise FileProblem(problem)
        try:
            tls_context(record.tls or ListenerTLS(), f"listener {lst.url}")
        except ServerError as exc:
            raise FileProblem(f"{origin.of(f'listener[{i}]')}: {lst.url}: {exc}") from None
    if settings.log.file is not None:
        try:
            with open(settings.log.file, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise FileProblem(
                f"{origin.of('log.file')}: cannot open the log file {settings.log.file}: {exc.strerror or exc}"
            ) from None
    if settings.persistence.path is not None:
        path = Path(settings.persistence.path)
        if not path.exists():
            try:
                writable(path, "persistence database")
            except FileProblem as exc:
                raise FileProblem(f"{origin.of('persistence.path')}: {exc}") from None


def serve_options(
    settings: BrokerSettings, source: str, *, instance: str, version: str, origin: Origin | None = None
) -> ServeOptions:
    """The server's records for `settings` (callbacks and the ready file are the caller's to set); `origin`
    names where each key came from (mosquitto.conf lines), `source` otherwise.

    The one place where the configuration meets the network layer: what the server cannot do yet is refused
    here, naming the key, rather than dropped.
    """
    origin = origin or Origin(source)
    settings = check(settings, source)
    broker_policy, policies = _policies(settings, origin)
    listeners = [listener_record(lst, policy) for lst, policy in zip(settings.listener, policies, strict=True)]
    options = ServeOptions(
        listeners=listeners,
        broker=BrokerConfig(
            limits=settings.limits,
            sys_interval=settings.sys.interval,
            use_username_as_clientid=settings.auth.use_username_as_clientid,
            allow_zero_length_clientid=settings.auth.allow_zero_length_clientid,
            auto_id_prefix=settings.auth.auto_id_prefix,
            drop_log_interval=settings.log.drop_interval,
            instance=instance,
            version=version,
        ),
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
    options.bridges = [_bridge(b, f"bridge[{i}]", origin) for i, b in enumerate(settings.bridge)]
    return options


def _admin_users(settings: BrokerSettings) -> AdminUsers:
    m = settings.metrics
    return AdminUsers(frozenset(m.admin_users or ()), frozenset(m.readonly_users or ()), m.admin_role, m.readonly_role)


def _metrics_tls(settings: BrokerSettings) -> ListenerTLS | None:
    m = settings.metrics
    return None if m.certfile is None else ListenerTLS(Path(m.certfile), _path(m.keyfile))


def _bridge(b: BridgeSettings, path: str, origin: Origin) -> EmbeddedConfig:
    """An embedded bridge's records: its remote side made as `mqtt bridge` makes one (side_config: URLs, password
    file, TLS context), its rules parsed (checked when the file was loaded)."""
    host = socket.gethostname().split(".")[0] or "localhost"
    for key, what in _REMOTE_FILES.items():
        name = getattr(b.remote, key)
        if name is not None and (problem := _readable(name, what, origin.of(f"{path}.remote.{key}"))):
            raise ConfigError(problem)
    where = f"{origin.source}: {path}"
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


def _policies(settings: BrokerSettings, origin: Origin) -> tuple[AuthPolicy, list[AuthPolicy | None]]:
    """The broker's policy and each listener's own (None: the broker's), with their files read (AuthFileError is
    a ConfigError here, naming the key that gives the file: exit 2, as for the flags). With
    per_listener_settings, a listener's unset key is taken from [auth]; without it, a listener setting one is an
    error rather than ignored."""
    auth = settings.auth
    dynsec_file = _path(settings.dynamic_security.config_file)
    try:
        # One state for every listener (mosquitto's plugin is global), read again on reload.
        dynsec = load_dynsec_file(dynsec_file) if dynsec_file is not None else None
    except AuthFileError as exc:
        raise ConfigError(f"{origin.of('dynamic_security.config_file')}: {exc}") from None
    broker = _policy(
        origin, "auth", dynsec=dynsec, allow_anonymous=auth.allow_anonymous, password_file=auth.password_file,
        acl_file=auth.acl_file, use_identity_as_username=auth.use_identity_as_username,
        use_subject_as_username=auth.use_subject_as_username,
    )  # fmt: skip
    own: list[AuthPolicy | None] = []
    for i, lst in enumerate(settings.listener):
        keys = [k for k in ("allow_anonymous", "password_file", "acl_file") if getattr(lst, k) is not None]
        if keys and not auth.per_listener_settings:
            raise ConfigError(f"{origin.of(f'listener[{i}].{keys[0]}')}: needs [auth] per_listener_settings = true")
        identity = lst.use_identity_as_username or auth.use_identity_as_username
        subject = lst.use_subject_as_username or auth.use_subject_as_username
        if keys:
            own.append(_policy(
                origin, f"listener[{i}]", auth, dynsec=dynsec,
                allow_anonymous=lst.allow_anonymous if lst.allow_anonymous is not None else auth.allow_anonymous,
                password_file=lst.password_file, acl_file=lst.acl_file,
                use_identity_as_username=identity, use_subject_as_username=subject,
            ))  # fmt: skip
        elif lst.use_identity_as_username or lst.use_subject_as_username:
            own.append(dataclasses.replace(broker, use_identity_as_username=identity, use_subject_as_username=subject))
        else:
            own.append(None)
    return broker, own


def _policy(
    origin: Origin, section: str, inherited: AuthSettings | None = None, *, password_file: str | None,
    acl_file: str | None, **settings: Any,
) -> AuthPolicy:  # fmt: skip
    """load_policy for the files `section` names (or, unset there, `inherited` [auth]'s); an error names the key."""
    files = {"password_file": password_file, "acl_file": acl_file}
    places = {key: f"{section}.{key}" for key in files}
    for key, name in files.items():
        if name is None and inherited is not None and getattr(inherited, key) is not None:
            files[key], places[key] = getattr(inherited, key), f"auth.{key}"
    try:
        return load_policy(password_file=_path(files["password_file"]), acl_file=_path(files["acl_file"]), **settings)
    except AuthFileError as exc:
        key = "password_file" if exc.path == _path(files["password_file"]) else "acl_file"
        raise ConfigError(f"{origin.of(places[key])}: {exc}") from None


def _path(name: str | None) -> Path | None:
    return None if name is None else Path(name)
