"""mosquitto's password file, sans-IO: text in, a table of hashed passwords out; hashing and checking.

One line per user, ``USER:HASH``, where HASH is one of the two kinds mosquitto writes (src/password_mosq.c):

* ``$6$SALT$DIGEST``: mosquitto 1.x, SHA-512 over the password then the salt;
* ``$7$ITERATIONS$SALT$DIGEST``: mosquitto 2.x (its default), PBKDF2-HMAC-SHA512 with a 64-byte key.

SALT and DIGEST are standard base64 (with padding); mosquitto makes 12-byte salts and, by default, 101 PBKDF2
iterations. Lines starting with ``#`` and blank lines are skipped, as mosquitto does. Where mosquitto logs a line
it cannot decode and starts without that user, we refuse the whole file with the line's number: a broker that
silently lost a user is harder to debug than one that does not start.

The salt is always given by the caller: this module has no randomness of its own (core is deterministic).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "DEFAULT_ITERATIONS",
    "SALT_LENGTH",
    "HashKind",
    "PasswordEntry",
    "PasswordFileError",
    "PasswordTable",
    "format_password_file",
    "hash_password",
    "parse_password_file",
    "parse_plain_password_file",
    "verify_password",
]

DEFAULT_ITERATIONS = 101  # mosquitto_passwd's PBKDF2 iteration count
SALT_LENGTH = 12  # bytes of salt mosquitto_passwd makes
_DIGEST_LENGTH = 64  # SHA-512
_SALT_LENGTHS = (SALT_LENGTH, _DIGEST_LENGTH)  # the salt sizes mosquitto accepts when it reads a file


class HashKind(IntEnum):
    """The number between the first two ``$`` of a hash."""

    SHA512 = 6  # mosquitto 1.x
    PBKDF2_SHA512 = 7  # mosquitto 2.x


class PasswordFileError(ValueError):
    """A line of a password file that is not ``USER:HASH`` with a hash we can read; `line` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


@dataclass(frozen=True, slots=True)
class PasswordEntry:
    username: str
    kind: HashKind
    salt: bytes
    digest: bytes
    iterations: int = 0  # PBKDF2 only

    def line(self) -> str:
        """The entry as mosquitto writes it (without the newline)."""
        salt = base64.b64encode(self.salt).decode()
        digest = base64.b64encode(self.digest).decode()
        if self.kind is HashKind.SHA512:
            return f"{self.username}:$6${salt}${digest}"
        return f"{self.username}:$7${self.iterations}${salt}${digest}"


#: user name -> entry, in file order.
PasswordTable = dict[str, PasswordEntry]


def _digest(password: bytes, salt: bytes, kind: HashKind, iterations: int) -> bytes:
    if kind is HashKind.SHA512:
        return hashlib.sha512(password + salt).digest()
    return hashlib.pbkdf2_hmac("sha512", password, salt, iterations, _DIGEST_LENGTH)


def hash_password(
    username: str,
    password: str,
    salt: bytes,
    kind: HashKind = HashKind.PBKDF2_SHA512,
    iterations: int = DEFAULT_ITERATIONS,
) -> PasswordEntry:
    """A new entry for `username`; `salt` comes from the caller (os.urandom(SALT_LENGTH) in the command)."""
    if kind is HashKind.SHA512:
        iterations = 0
    elif iterations < 1:
        raise ValueError("PBKDF2 needs at least 1 iteration")
    return PasswordEntry(username, kind, salt, _digest(password.encode(), salt, kind, iterations), iterations)


def verify_password(entry: PasswordEntry, password: bytes) -> bool:
    """True when `password` (as the client sent it: MQTT passwords are binary data) matches `entry`."""
    return hmac.compare_digest(_digest(password, entry.salt, entry.kind, entry.iterations), entry.digest)


def _b64(text: str, what: str, line: int) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise PasswordFileError(line, f"the {what} is not base64") from None


def _parse_hash(username: str, text: str, line: int) -> PasswordEntry:
    fields = text.split("$")
    if not text.startswith("$") or len(fields) < 2 or fields[1] not in ("6", "7"):
        if not text.startswith("$"):
            raise PasswordFileError(
                line, f"user {username!r} has a plain-text password, not a hash: hash the file with `mqtt passwd -U`"
            )
        raise PasswordFileError(line, f"user {username!r}: unknown hash type (mosquitto writes $6$ and $7$)")
    kind = HashKind(int(fields[1]))
    iterations = 0
    rest = fields[2:]
    if kind is HashKind.PBKDF2_SHA512:
        if len(rest) != 3:
            raise PasswordFileError(line, f"user {username!r}: a $7$ hash is $7$ITERATIONS$SALT$HASH")
        if not rest[0].isdigit() or int(rest[0]) < 1:
            raise PasswordFileError(line, f"user {username!r}: the iteration count {rest[0]!r} is not a number >= 1")
        iterations = int(rest[0])
        rest = rest[1:]
    elif len(rest) != 2:
        raise PasswordFileError(line, f"user {username!r}: a $6$ hash is $6$SALT$HASH")
    salt = _b64(rest[0], f"salt of user {username!r}", line)
    if len(salt) not in _SALT_LENGTHS:
        raise PasswordFileError(line, f"user {username!r}: the salt is {len(salt)} bytes, not 12 or 64")
    digest = _b64(rest[1], f"hash of user {username!r}", line)
    if len(digest) != _DIGEST_LENGTH:
        raise PasswordFileError(line, f"user {username!r}: the hash is {len(digest)} bytes, not 64 (truncated?)")
    return PasswordEntry(username, kind, salt, digest, iterations)


def _user_lines(text: str) -> Iterator[tuple[int, str, str]]:
    """(line number, user name, what follows the colon) for each user line; comments and blank lines skipped."""
    lines_of: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        username, colon, value = raw.partition(":")
        username = username.strip()
        value = value.strip()
        if not colon:
            raise PasswordFileError(number, "not USER:HASH (no colon)")
        if not username:
            raise PasswordFileError(number, "an empty user name")
        if username in lines_of:
            raise PasswordFileError(number, f"user {username!r} is already on line {lines_of[username]}")
        if not value:
            raise PasswordFileError(number, f"user {username!r} has no password hash")
        lines_of[username] = number
        yield number, username, value


def parse_password_file(text: str) -> PasswordTable:
    """Reads a password file of hashes; PasswordFileError names the first bad line."""
    return {username: _parse_hash(username, value, number) for number, username, value in _user_lines(text)}


def parse_plain_password_file(text: str) -> dict[str, str]:
    """Reads a file of USER:PASSWORD in clear (what `mqtt passwd -U` hashes), user name -> password."""
    return dict((username, value) for _, username, value in _user_lines(text))


def format_password_file(table: PasswordTable) -> str:
    return "".join(entry.line() + "\n" for entry in table.values())
