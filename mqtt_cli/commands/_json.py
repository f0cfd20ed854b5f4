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
from mqtt_cli.core.properties import PROPERTY_BY_NAME, Properties, WireType

__all__ = ["MessageFormatError", "message_from_json", "message_to_json"]

# Properties a client may not send in PUBLISH, or that belong to one connection: dropped when publishing.
_NOT_REPUBLISHED = ("topic_alias", "subscription_identifiers")


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


def properties_from_json(obj: Any) -> Properties:
    """The "properties" object (Properties.as_json()); the `[[name, value], ...]` list that `mqtt dump --json`
    wrote until 0.1.0 is read too. A null, for the object or any property in it, means absent."""
    if obj is None:
        return Properties()
    if isinstance(obj, list):
        obj = _from_pairs(obj)
    if not isinstance(obj, dict):
        raise MessageFormatError('"properties" must be an object')
    named: dict[str, Any] = {}
    for name, value in obj.items():
        if name in _NOT_REPUBLISHED or value is None:
            continue
        if name == "user_properties":
            if not isinstance(value, list) or not all(
                isinstance(kv, list) and len(kv) == 2 and all(isinstance(x, str) for x in kv) for kv in value
            ):
                raise MessageFormatError('"user_properties" must be a list of [name, value] string pairs')
            named[name] = [tuple(kv) for kv in value]
            continue
        spec = PROPERTY_BY_NAME.get(name)
        if spec is None or 3 not in spec.packets:
            raise MessageFormatError(f"property {name!r} cannot be published")
        if spec.wire_type is WireType.BINARY:
            try:
                value = bytes.fromhex(value)
            except (TypeError, ValueError):
                raise MessageFormatError(f"property {name!r} must be hex") from None
        named[name] = value
    try:
        return Properties(**named)
    except (TypeError, ValueError) as err:
        raise MessageFormatError(str(err)) from None


def _from_pairs(pairs: list[Any]) -> dict[str, Any]:
    if not all(isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) for pair in pairs):
        raise MessageFormatError('"properties" must be an object (or a list of [name, value] pairs)')
    from mqtt_cli.core.properties import properties_json

    return properties_json(pairs)


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
    props = properties_from_json(obj.get("properties"))
    return {"topic": topic, "payload": data, "qos": qos, "retain": retain, "properties": props}
