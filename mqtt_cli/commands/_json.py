"""The JSON form of a message, one object per line: what `sub --json` writes and `pub --json-lines` reads.

    {"topic": "a/b", "qos": 1, "retain": false, "dup": false, "payload": "hi", "encoding": "utf-8",
     "properties": {"content_type": "text/plain", "user_properties": [["k", "v"]]},
     "received": "2026-11-22T13:07:03.123456Z"}

Lossless: the payload is text when it is valid UTF-8 ("encoding": "utf-8"), else base64 ("encoding":
"base64"); every 5.0 property is kept under its spec name in snake_case, binary ones (correlation_data) as
lowercase hex, repeated ones (user_properties, subscription_identifiers) as lists in wire order.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import json
from typing import Any

from mqtt_cli.core.packets import Publish
from mqtt_cli.core.properties import Properties, PropertiesJsonError, properties_from_json

__all__ = ["MessageFormatError", "message_from_json", "message_to_json"]


class MessageFormatError(ValueError):
    pass


@functools.lru_cache(maxsize=8)
def _utc_text(received: float) -> str:
    """The receive time as written; formatted once for the messages of a read, which share it (`sub`)."""
    return datetime.datetime.fromtimestamp(received, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def message_to_json(p: Publish, received: float) -> str:
    try:
        payload, encoding = p.payload.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(p.payload).decode("ascii"), "base64"
    obj = {
        "topic": p.topic,
        "qos": p.qos,
        "retain": p.retain,
        "dup": p.dup,
        "payload": payload,
        "encoding": encoding,
        "properties": p.properties.as_json(),
        "received": _utc_text(received),
    }
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def _properties(obj: Any) -> Properties:
    """The "properties" member (Properties.as_json(), or the `[[name, value], ...]` list that `mqtt dump --json`
    wrote until 0.1.0), as a client may publish them: a connection's and a delivery's own are left out."""
    try:
        return properties_from_json(obj, to_publish=True)
    except PropertiesJsonError as err:
        raise MessageFormatError(str(err)) from None


def _given(obj: dict[str, Any], name: str, default: Any) -> Any:
    """A member's value, `default` when it is absent or null."""
    value = obj.get(name)
    return default if value is None else value


def message_from_json(line: str | bytes) -> dict[str, Any]:
    """topic (or None), payload, qos, retain (None when absent) and properties of one line. Every member is
    optional, and a null member is an absent one ("correlation_data": null is no correlation data)."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise MessageFormatError(f"not valid JSON: {err}") from None
    if not isinstance(obj, dict):
        raise MessageFormatError("expected a JSON object")
    topic = obj.get("topic")
    if topic is not None and not isinstance(topic, str):
        raise MessageFormatError('"topic" must be a string')
    payload = _given(obj, "payload", "")
    encoding = _given(obj, "encoding", "utf-8")
    if not isinstance(payload, str):
        raise MessageFormatError('"payload" must be a string')
    if encoding == "utf-8":
        data = payload.encode("utf-8", "surrogatepass")
    elif encoding == "base64":
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise MessageFormatError('"payload" is not valid base64') from None
    else:
        raise MessageFormatError(f'"encoding" must be "utf-8" or "base64", not {encoding!r}')
    qos = obj.get("qos")
    if qos is not None and qos not in (0, 1, 2):
        raise MessageFormatError('"qos" must be 0, 1 or 2')
    retain = obj.get("retain")
    if retain is not None and not isinstance(retain, bool):
        raise MessageFormatError('"retain" must be true or false')
    props = _properties(obj.get("properties"))
    return {"topic": topic, "payload": data, "qos": qos, "retain": retain, "properties": props}
