"""Reading the password and ACL files (the parsing is core's: core/passwords.py, core/acl.py).

Used at start-up and on reload: a file that is missing, unreadable or wrong raises `AuthFileError` with one line
naming the file, the line and what is wrong, and nothing is applied.
"""

from __future__ import annotations

from pathlib import Path

from mqtt_cli.core.acl import Acl, AclFileError, parse_acl_file
from mqtt_cli.core.auth import AuthPolicy
from mqtt_cli.core.passwords import PasswordFileError, PasswordTable, parse_password_file

__all__ = ["AuthFileError", "load_acl_file", "load_password_file", "load_policy"]


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


def load_policy(
    *,
    allow_anonymous: bool | None = None,
    password_file: Path | None = None,
    acl_file: Path | None = None,
    use_identity_as_username: bool = False,
    use_subject_as_username: bool = False,
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
    )
