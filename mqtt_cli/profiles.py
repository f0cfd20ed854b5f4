"""Connection profiles: named sets of defaults in ``$XDG_CONFIG_HOME/mqtt-cli/config.toml``.

    [profiles.prod]
    host = "broker.example.com"
    port = 8883
    username = "ops"
    password_file = "~/.config/mqtt-cli/prod.password"
    cafile = "/etc/ssl/certs/ca.pem"

A client command uses ``--profile NAME`` (or ``MQTT_PROFILE``), else the profile named ``default`` when there
is one. Read with tomllib (imported only when the file exists), written with tomli-w (imported only when
writing).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["PROFILE_KEYS", "ProfileError", "config_path", "load_config", "load_profile", "save_config"]

#: Keys a profile may hold, and their types (values are checked when set and when read).
PROFILE_KEYS: dict[str, type] = {
    "host": str,
    "port": int,
    "url": str,
    "unix": str,
    "id": str,
    "id_prefix": str,
    "keepalive": int,
    "protocol_version": str,
    "username": str,
    "password": str,
    "password_file": str,
    "cafile": str,
    "capath": str,
    "cert": str,
    "key": str,
    "insecure": bool,
    "tls_version": str,
    "alpn": str,
    "connect_timeout": float,
    "session_expiry": int,
    "qos": int,
}


class ProfileError(Exception):
    """The configuration file cannot be read, or a profile or value is not valid."""


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "mqtt-cli" / "config.toml"


def load_config(path: Path | None = None) -> dict[str, Any]:
    path = path or config_path()
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise ProfileError(f"cannot read {path}: {err}") from None
    import tomllib  # only when there is a file: a one-shot `mqtt pub` without profiles skips it

    try:
        with f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ProfileError(f"cannot read {path}: {err}") from None
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        raise ProfileError(f"{path}: [profiles] must be a table")
    return data


def check_value(key: str, value: Any, where: str) -> Any:
    expected = PROFILE_KEYS.get(key)
    if expected is None:
        raise ProfileError(f"{where}: unknown key {key!r} (known: {', '.join(PROFILE_KEYS)})")
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ProfileError(f"{where}: {key} must be {expected.__name__}, not {value!r}")
    return value


def load_profile(name: str | None, path: Path | None = None) -> dict[str, Any]:
    """The named profile's values (checked); `None` means the profile "default" if it exists, else nothing."""
    path = path or config_path()
    profiles = load_config(path).get("profiles", {})
    if name is None:
        name = "default"
        if name not in profiles:
            return {}
    if name not in profiles:
        known = ", ".join(sorted(profiles)) or "none"
        raise ProfileError(f"no profile {name!r} in {path} (profiles: {known}); create it with `mqtt config set`")
    profile = profiles[name]
    if not isinstance(profile, dict):
        raise ProfileError(f"{path}: profiles.{name} must be a table")
    return {k: check_value(k, v, f"{path}: profile {name!r}") for k, v in profile.items()}


def save_config(data: dict[str, Any], path: Path | None = None) -> Path:
    """Writes the whole configuration (atomically: a temporary file renamed over the old one)."""
    import tomli_w

    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    # Profiles may hold passwords: readable by the owner only.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        tomli_w.dump(data, f)
    tmp.replace(path)
    return path
