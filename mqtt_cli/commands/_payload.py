"""The one message of `pub`/`rr` (-m, -f, -s), and the payload forms of `pub --format` and `sub --format`.

Imported inside command functions only.
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from mqtt_cli.exit_codes import EXIT_USAGE

from . import fail

if TYPE_CHECKING:
    from mqtt_cli.core.properties import Properties


class PayloadFormat(StrEnum):
    """How a payload is written on a line: as it is (text), hexadecimal, base64; `sub` also pretty-prints JSON."""

    text = "text"
    hex = "hex"
    base64 = "base64"
    json = "json"


#: What `pub --format` reads and `sub --format` writes.
PUB_FORMATS = (PayloadFormat.text, PayloadFormat.hex, PayloadFormat.base64)
SUB_FORMATS = tuple(PayloadFormat)


def parse_format(value: str | None, allowed: tuple[PayloadFormat, ...], flag: str = "--format") -> PayloadFormat:
    """The format named by `value` (default text); exits 2 naming the choices."""
    if value is None:
        return PayloadFormat.text
    try:
        chosen = PayloadFormat(value.lower())
    except ValueError:
        chosen = None
    if chosen not in allowed:
        fail(f"{flag} {value!r}: use {', '.join(allowed)}", EXIT_USAGE)
    assert chosen is not None
    return chosen


def decode_payload(data: bytes, form: PayloadFormat) -> bytes:
    """The bytes `data` stands for in `form` (pub --format); raises ValueError saying what is wrong."""
    import base64
    import binascii

    if form is PayloadFormat.hex:
        try:
            return bytes.fromhex(data.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            raise ValueError("not hexadecimal (pairs of 0-9, a-f; spaces allowed between bytes)") from None
    if form is PayloadFormat.base64:
        try:
            return base64.b64decode(data.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("not valid base64") from None
    return data


def encode_payload(data: bytes, form: PayloadFormat, pretty: bool = True) -> bytes:
    """`data` written in `form` (sub --format); with json, a payload that is not JSON is written as it is."""
    import base64
    import json

    if form is PayloadFormat.hex:
        return data.hex().encode()
    if form is PayloadFormat.base64:
        return base64.b64encode(data)
    if form is PayloadFormat.json and data:
        try:
            parsed = json.loads(data)
        except ValueError:
            return data
        return json.dumps(parsed, indent=2 if pretty else None, ensure_ascii=False).encode()
    return data


def read_payload(
    message: str | None,
    file: Path | None,
    stdin: bool,
    topic: str,
    qos: int,
    props: Properties,
    version: int | None,
    form: PayloadFormat = PayloadFormat.text,
) -> bytes:
    """The one message of -m, -f or -s (in `form`); exits 2, before connecting, for one that no PUBLISH can
    carry, without reading more of it than a PUBLISH can carry."""
    from mqtt_cli.core.encoder import max_publish_payload

    limit = max_publish_payload(topic or "t", qos, props, version)
    # hex takes two characters a byte, base64 four for three: read that much of the text form
    read_limit = limit if form is PayloadFormat.text else 2 * limit + 2
    what = "-m" if message is not None else f"-f {file}" if file is not None else "-s (standard input)"
    size = None
    if message is not None:
        data = message.encode()
    elif file is not None:
        try:
            with file.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = f.read(read_limit + 1) if size <= read_limit else b""
        except OSError as err:
            fail(f"-f {file}: {err.strerror}", EXIT_USAGE)
    elif stdin:
        data = sys.stdin.buffer.read(read_limit + 1)
    else:
        return b""
    if (size or 0) > read_limit or len(data) > read_limit:
        shown = f"{size:,} bytes" if size else f"more than {read_limit:,} bytes"
        fail(f"{what}: {shown}, more than one MQTT message can carry ({limit:,} bytes with this topic)", EXIT_USAGE)
    if form is PayloadFormat.text:
        return data
    try:
        payload = decode_payload(data, form)
    except ValueError as err:
        fail(f"{what}: --format {form}: {err}", EXIT_USAGE)
    if len(payload) > limit:
        fail(f"{what}: {len(payload):,} bytes, more than one MQTT message can carry ({limit:,} bytes)", EXIT_USAGE)
    return payload
