"""Reading the password and ACL files and dynamic security's JSON, writing the latter (the parsing is core's:
core/passwords.py, core/acl.py, core/dynsec.py).

Used at start-up and on reload: a file that is missing, unreadable or wrong raises `AuthFileError` with one line
naming the file, the line and what is wrong, and nothing is applied.
"""

from __future__ import annotations

import os
from pathlib import Path

from mqtt_cli.core.acl import Acl, AclFileError, parse_acl_file
from mqtt_cli.core.auth import AuthPolicy
from mqtt_cli.core.dynsec import DynamicSecurity, DynsecError
from mqtt_cli.core.passwords import PasswordFileError, PasswordTable, parse_password_file

__all__ = [
    "AuthFileError",
    "load_acl_file",
    "load_dynsec_file",
    "load_password_file",
    "load_policy",
    "save_dynsec_file",
]


class AuthFileError(Exception):
    """A password or ACL file that cannot be used; the message is the one line to show, `path` the file (for the
    caller to name the setting that gave it)."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def _read(path: Path, what: str) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise AuthFileError(f"{what} {path} does not exist", path) from None
    except OSError as exc:
        raise AuthFileError(f"cannot read the {what} {path}: {exc.strerror or exc}", path) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise AuthFileError(f"{what} {path}, line {line}: not UTF-8 text", path) from None


def load_password_file(path: Path) -> PasswordTable:
    text = _read(path, "password file")
    try:
        return parse_password_file(text)
    except PasswordFileError as exc:
        raise AuthFileError(f"password file {path}, {exc}", path) from None


def load_acl_file(path: Path) -> Acl:
    text = _read(path, "ACL file")
    try:
        return parse_acl_file(text)
    except AclFileError as exc:
        raise AuthFileError(f"ACL file {path}, {exc}", path) from None


def load_dynsec_file(path: Path) -> DynamicSecurity:
    """A dynamic-security.json (mosquitto's format), salts for new passwords from os.urandom."""
    if not path.exists():
        raise AuthFileError(
            f"dynamic security file {path} does not exist: make one with `mosquitto_ctrl dynsec init {path} admin`",
            path,
        )
    text = _read(path, "dynamic security file")
    try:
        return DynamicSecurity.from_json(text, os.urandom)
    except DynsecError as exc:
        raise AuthFileError(f"dynamic security file {path}: {exc}", path) from None


def save_dynsec_file(path: Path, dynsec: DynamicSecurity) -> None:
    """Writes the state as mosquitto does: to PATH.new readable by its owner only, then renamed over PATH (a crash
    leaves the old file or the new one). OSError to the caller."""
    new = path.with_name(path.name + ".new")
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(dynsec.dumps())
    os.replace(new, path)


def load_policy(
    *,
    allow_anonymous: bool | None = None,
    password_file: Path | None = None,
    acl_file: Path | None = None,
    use_identity_as_username: bool = False,
    use_subject_as_username: bool = False,
    dynsec: DynamicSecurity | None = None,
) -> AuthPolicy:
    """An AuthPolicy with its files read (both read before anything is returned: all or nothing)."""
    passwords = load_password_file(password_file) if password_file is not None else None
    acl = load_acl_file(acl_file) if acl_file is not None else None
    return AuthPolicy(
        allow_anonymous=allow_anonymous,
        passwords=passwords,
        acl=acl,
        use_identity_as_username=use_identity_as_username,
        use_subject_as_username=use_subject_as_username,
        password_file=str(password_file) if password_file is not None else None,
        acl_file=str(acl_file) if acl_file is not None else None,
        dynsec=dynsec,
    )
