"""core/passwords.py: mosquitto's password file, parsed, checked and written (files from Debian's mosquitto_passwd
are read in tests/broker/test_auth.py)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib

import pytest

from mqtt_cli.core.passwords import (
    HashKind,
    PasswordFileError,
    format_password_file,
    hash_password,
    parse_password_file,
    parse_plain_password_file,
    verify_password,
)

# Made by Debian's mosquitto_passwd 2.0.11: alice/secret with -H sha512-pbkdf2 (the default), bob/pw with -H sha512.
MOSQUITTO_FILE = (
    "alice:$7$101$uBOarvHYfK48mlEA$2PrYXD6Z7et1MR1VNyQ6QgH03PF0VsMTLDdpEFlfebbKXZpqGQ6JGKYMqJz/kts/OvMu4u6vbpgatCinE"
    "e2lhg==\n"
    "bob:$6$Cy6MbZ9vHM/s6W57$3rfYfFBQRD/bhNuiY7w4zmm3A/0hMp5IsMPT8+MB2uq8kJUTfHx+hg6GXIxScOrWf140baZxCIZfw1dOAZGxXg==\n"
)


def test_both_kinds_written_by_mosquitto_passwd_verify() -> None:
    table = parse_password_file(MOSQUITTO_FILE)
    assert table["alice"].kind is HashKind.PBKDF2_SHA512 and table["alice"].iterations == 101
    assert table["bob"].kind is HashKind.SHA512
    assert verify_password(table["alice"], b"secret")
    assert not verify_password(table["alice"], b"Secret")
    assert verify_password(table["bob"], b"pw")
    assert not verify_password(table["bob"], b"pw ")
    assert format_password_file(table) == MOSQUITTO_FILE  # read and written back byte for byte


def test_hash_is_the_documented_construction() -> None:
    salt = bytes(range(12))
    e7 = hash_password("u", "pässword", salt, HashKind.PBKDF2_SHA512, 1000)
    assert e7.digest == hashlib.pbkdf2_hmac("sha512", "pässword".encode(), salt, 1000, 64)
    assert e7.line() == f"u:$7$1000${base64.b64encode(salt).decode()}${base64.b64encode(e7.digest).decode()}"
    e6 = hash_password("u", "pw", salt, HashKind.SHA512)
    assert e6.digest == hashlib.sha512(b"pw" + salt).digest()
    assert e6.line().startswith("u:$6$AAECAwQFBgcICQoL$")
    assert parse_password_file(e7.line() + "\n" + e6.line().replace("u:", "v:"))["v"] == dataclasses.replace(
        e6, username="v"
    )


def test_comments_blank_lines_and_blanks_around_fields() -> None:
    line = MOSQUITTO_FILE.splitlines()[0]
    text = f"# users\n\n  {line.replace(':', ' : ', 1)}  \n"
    assert verify_password(parse_password_file(text)["alice"], b"secret")


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("alice\n", 1, "no colon"),
        ("# x\nalice:\n", 2, "no password hash"),
        (":$6$abc$def\n", 1, "empty user name"),
        ("alice:secret\n", 1, "plain-text password"),
        ("alice:$5$abc$def\n", 1, "unknown hash type"),
        ("alice:$7$$uBOarvHYfK48mlEA$AAAA\n", 1, "iteration count"),
        ("alice:$7$101$uBOarvHYfK48mlEA\n", 1, "$7$ITERATIONS$SALT$HASH"),
        ("alice:$6$uBOarvHYfK48mlEA\n", 1, "$6$SALT$HASH"),
        ("alice:$6$not*base64$AAAA\n", 1, "not base64"),
        ("alice:$6$AAAA$AAAA\n", 1, "salt is 3 bytes"),
        (MOSQUITTO_FILE[: MOSQUITTO_FILE.index("bob:") + 24 + 44] + "\n", 2, "truncated"),  # bob's hash cut short
        (MOSQUITTO_FILE + MOSQUITTO_FILE.splitlines()[1] + "\n", 3, "already on line 2"),
    ],
)
def test_bad_lines_name_their_number(text: str, line: int, words: str) -> None:
    with pytest.raises(PasswordFileError) as err:
        parse_password_file(text)
    assert err.value.line == line
    assert words in str(err.value)
    assert str(err.value).startswith(f"line {line}: ")


def test_plain_file_for_update() -> None:
    assert parse_plain_password_file("a:x\n# c\nb: y z \n") == {"a": "x", "b": "y z"}
