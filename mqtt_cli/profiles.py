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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

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


#: Ranges of the numeric keys: the same as the command-line flags' (-p, -k, --connect-timeout, -x, -q).
RANGES: dict[str, tuple[float, float]] = {
    "port": (1, 65535),
    "keepalive": (0, 65535),
    "connect_timeout": (0.1, float("inf")),
    "session_expiry": (0, 0xFFFFFFFF),
    "qos": (0, 2),
}
#: What -V (and a profile's or a bridge side's protocol_version) accepts, and the MQTT level each means.
PROTOCOL_VERSIONS: dict[str, int | None] = {"31": 3, "3.1": 3, "311": 4, "3.1.1": 4, "5": 5, "5.0": 5, "auto": None,
                                            "mqttv31": 3, "mqttv311": 4, "mqttv5": 5}  # fmt: skip
#: Values of the keys that take one of a few, --tls-version's as mqtt_cli/net/transports.py reads them.
CHOICES: dict[str, tuple[str, ...]] = {
    "protocol_version": tuple(PROTOCOL_VERSIONS),
    "tls_version": ("tlsv1.2", "tlsv1.3", "1.2", "1.3"),
}


class ProfileError(Exception):
    """The configuration file cannot be read, or a profile or value is not valid."""


def config_path() -> Path:
    from pathlib import Path

    return Path(_config_file())


def _config_file() -> str:
    """config_path() as a string: a one-shot client reads its profile without pathlib (and urllib, ipaddress)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "mqtt-cli", "config.toml")


def load_config(path: Path | str | None = None) -> dict[str, Any]:
    path = path or _config_file()
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below (with f), once tomllib is loaded
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise ProfileError(f"cannot read {path}: {err.strerror}") from None
    import tomllib  # only when there is a file: a one-shot `mqtt pub` without profiles skips it

    try:
        with f:
            data = tomllib.load(f)
    except OSError as err:
        raise ProfileError(f"cannot read {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ProfileError(f"cannot read {path}: {err}") from None
    profiles = data.get("profiles", {})
    if not isinstance(profiles, dict):
        raise ProfileError(f"{path}: [profiles] must be a table")
    return data


def check_value(key: str, value: Any, where: str) -> Any:
    expected = PROFILE_KEYS.get(key)
    if expected is None:
        raise ProfileError(f"{where}: unknown key {key!r}{_hint(key, PROFILE_KEYS)} (known: {', '.join(PROFILE_KEYS)})")
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ProfileError(f"{where}: {key} must be {expected.__name__}, not {value!r}")
    if key in RANGES:
        low, high = RANGES[key]
        assert isinstance(value, int | float)  # the keys with a range are numbers, checked just above
        # `not low <= value` rather than `value < low`: NaN compares false either way and must fail too
        if not (low <= value <= high):
            shown = f"{low:g}.." if high == float("inf") else f"{int(low)}..{int(high)}"
            raise ProfileError(f"{where}: {key} {value!r} is out of range: use {shown}")
    if key in CHOICES and str(value).lower() not in CHOICES[key]:
        raise ProfileError(f"{where}: {key} {value!r} is not valid: use {', '.join(CHOICES[key][:7])}")
    return value


def load_profile(name: str | None, path: Path | str | None = None) -> dict[str, Any]:
    """The named profile's values (checked); `None` means the profile "default" if it exists, else nothing."""
    path = path or _config_file()
    profiles = load_config(path).get("profiles", {})
    if name is None:
        name = "default"
        if name not in profiles:
            return {}
    if name not in profiles:
        known = ", ".join(sorted(profiles)) or "none"
        hint = _hint(name, profiles)
        raise ProfileError(f"no profile {name!r} in {path}{hint} (profiles: {known}); create it with `mqtt config set`")
    profile = profiles[name]
    if not isinstance(profile, dict):
        raise ProfileError(f"{path}: profiles.{name} must be a table")
    return {k: check_value(k, v, f"{path}: profile {name!r}") for k, v in profile.items()}


def _hint(word: str, names: Iterable[str]) -> str:
    """`; did you mean 'host'?` or "" (difflib is imported only for an error)."""
    from mqtt_cli.core.suggest import did_you_mean

    return f"; {hint}" if (hint := did_you_mean(word, names)) else ""


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
