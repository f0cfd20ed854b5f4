"""``mqtt passwd``: create and update mosquitto password files, as mosquitto_passwd does."""

from __future__ import annotations

import contextlib
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mqtt_cli.commands import fail
from mqtt_cli.exit_codes import EXIT_USAGE

if TYPE_CHECKING:
    from mqtt_cli.core.passwords import HashKind


class HashName(StrEnum):
    sha512_pbkdf2 = "sha512-pbkdf2"
    sha512 = "sha512"


def passwd(
    file: Annotated[Path, typer.Argument(help="The password file.", show_default=False)],
    username: Annotated[
        str | None, typer.Argument(help="The user to add, update or delete.", show_default=False)
    ] = None,
    password: Annotated[
        str | None,
        typer.Argument(help="With -b only: the password (seen in the process list).", show_default=False),
    ] = None,
    create: Annotated[bool, typer.Option("-c", help="Create a new file (replacing one that exists).")] = False,
    batch: Annotated[bool, typer.Option("-b", help="Take the password from the command line.")] = False,
    delete: Annotated[bool, typer.Option("-D", help="Delete the user.")] = False,
    update: Annotated[
        bool, typer.Option("-U", help="Hash every password of a file of USER:PASSWORD in clear.")
    ] = False,
    hash_name: Annotated[HashName, typer.Option("-H", help="Hash: sha512-pbkdf2 (mosquitto 2) or sha512 (1.x).")] = (
        HashName.sha512_pbkdf2
    ),
) -> None:
    """Create or update a password file for `mqtt serve --password-file` and mosquitto's password_file.

    Without -b the password is asked twice on the terminal, without echo. A new file is readable by its owner only (0600); an updated one keeps its mode and owner. Every write goes to a temporary file that then replaces FILE, so a broker never reads half a file.

    Exit codes: 0 done, 1 failed (file missing or unreadable, user not found for -D, passwords differ), 2 bad usage.
    """  # noqa: E501 - typer keeps a docstring's line breaks in --help
    from mqtt_cli.core.passwords import HashKind, PasswordFileError

    kind = HashKind.SHA512 if hash_name is HashName.sha512 else HashKind.PBKDF2_SHA512
    _check_usage(username, password, create=create, batch=batch, delete=delete, update=update)
    try:
        if update:
            _hash_every_password(file, kind)
        else:
            assert username is not None
            _set_user(file, username, password, kind, create=create, delete=delete)
    except PasswordFileError as exc:
        fail(f"password file {file}, {exc}")


def _check_usage(
    username: str | None, password: str | None, *, create: bool, batch: bool, delete: bool, update: bool
) -> None:
    """Exits with EXIT_USAGE on a combination of arguments that does not make sense."""
    if sum((create, delete, update)) > 1:
        fail("-c, -D and -U exclude each other", EXIT_USAGE)
    if update:
        if username is not None or batch:
            fail("-U takes the password file only: mqtt passwd -U FILE", EXIT_USAGE)
    elif username is None:
        fail("a user name is needed: mqtt passwd [-c] FILE USER", EXIT_USAGE)
    if batch and delete:
        fail("-b and -D exclude each other", EXIT_USAGE)
    if batch and password is None:
        fail("-b needs the password after the user name: mqtt passwd -b FILE USER PASSWORD", EXIT_USAGE)
    if not batch and password is not None:
        fail("a password on the command line needs -b (without it, the password is asked for)", EXIT_USAGE)
    if username is not None and (":" in username or not username.strip() or username != username.strip()):
        fail(f"user name {username!r}: no colon, no blank at either end, not empty", EXIT_USAGE)


def _hash_every_password(file: Path, kind: HashKind) -> None:
    """-U: a file of USER:PASSWORD in clear, each password replaced by its hash."""
    from mqtt_cli.core.passwords import format_password_file, hash_password, parse_plain_password_file

    text, st = _read(file)
    plain = parse_plain_password_file(text)
    hashed = [name for name, value in plain.items() if value.startswith(("$6$", "$7$"))]
    if hashed:
        fail(f"password file {file}: user {hashed[0]!r} already has a hash; -U is for passwords in clear")
    table = {name: hash_password(name, value, _salt(), kind) for name, value in plain.items()}
    _write(file, format_password_file(table), st)


def _set_user(file: Path, username: str, password: str | None, kind: HashKind, *, create: bool, delete: bool) -> None:
    """Adds, updates (`password`, or asked for when None) or deletes one user, in a new file with `create`."""
    from mqtt_cli.core.passwords import format_password_file, hash_password, parse_password_file

    st: os.stat_result | None
    if create:
        table, st = {}, None
    else:
        text, st = _read(file)
        table = parse_password_file(text)
    if delete:
        if table.pop(username, None) is None:
            fail(f"user {username!r} is not in {file}")
    else:
        secret = password if password is not None else _ask()
        table[username] = hash_password(username, secret, _salt(), kind)
    _write(file, format_password_file(table), st)


def _read(file: Path) -> tuple[str, os.stat_result]:
    try:
        text = file.read_text(encoding="utf-8")
        st = file.stat()
    except FileNotFoundError:
        fail(f"password file {file} does not exist (-c creates it)")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read the password file {file}: {getattr(exc, 'strerror', None) or exc}")
    return text, st


def _ask() -> str:
    import getpass

    if not sys.stdin.isatty():
        fail("no terminal to ask for the password on (use -b, or run it in a terminal)", EXIT_USAGE)
    try:
        first = getpass.getpass("Password: ")
        second = getpass.getpass("Reenter password: ")
    except EOFError:
        fail("no password given")
    if first != second:
        fail("the passwords do not match")
    return first


def _write(file: Path, text: str, st: os.stat_result | None) -> None:
    """Atomically; a file that existed keeps its mode and (when we may) its owner, a new one is 0600."""
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if st is not None:
            os.chmod(tmp, st.st_mode & 0o7777)
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                with contextlib.suppress(PermissionError):
                    os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, file)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        fail(f"cannot write the password file {file}: {exc.strerror or exc}")


def _salt() -> bytes:
    from mqtt_cli.core.passwords import SALT_LENGTH

    return os.urandom(SALT_LENGTH)
