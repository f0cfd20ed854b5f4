"""MQTT 5.0 properties (spec 2.2.2): the table, an immutable `Properties` value, and their wire form.

`Properties` keeps the properties in wire order, duplicates included (user properties must keep their order,
and a PUBLISH may carry several subscription identifiers); equality ignores the order between *different*
properties, which the spec does not give any meaning to.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from enum import IntEnum
from typing import Any

from .errors import LenientErrors, LocalProtocolError, MalformedPacket, ProtocolError, RemoteProtocolError
from .records import record
from .topics import topic_name_error
from .wire import (
    MAX_VBI,
    encode_binary,
    encode_string,
    encode_vbi,
    read_binary,
    read_string,
    read_u16,
    read_u32,
    read_vbi,
)

__all__ = [
    "EMPTY_PROPERTIES",
    "PROPERTY_BY_NAME",
    "PROPERTY_TABLE",
    "WILL",
    "Properties",
    "PropertiesJsonError",
    "PropertyId",
    "PropertySpec",
    "WireType",
    "decode_properties",
    "encode_properties",
    "properties_from_json",
]

# A pseudo packet type for the will properties inside CONNECT (real types are 0-15).
WILL = 16

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, DISCONNECT, AUTH = 8, 9, 10, 11, 14, 15

_PACKET_NAMES = {
    1: "CONNECT", 2: "CONNACK", 3: "PUBLISH", 4: "PUBACK", 5: "PUBREC", 6: "PUBREL", 7: "PUBCOMP",
    8: "SUBSCRIBE", 9: "SUBACK", 10: "UNSUBSCRIBE", 11: "UNSUBACK", 12: "PINGREQ", 13: "PINGRESP",
    14: "DISCONNECT", 15: "AUTH", WILL: "will properties",
}  # fmt: skip


class WireType(IntEnum):
    BYTE = 1
    TWO_BYTE_INT = 2
    FOUR_BYTE_INT = 4
    VARIABLE_BYTE_INT = 5
    UTF8_STRING = 6
    BINARY = 7
    UTF8_PAIR = 8


class PropertyId(IntEnum):
    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


@record
class PropertySpec:
    id: int
    name: str  # the spec's name in snake_case, as `mqtt dump --json` writes it
    wire_type: WireType
    packets: frozenset[int]  # packet types (and WILL) that may carry it
    repeatable: frozenset[int]  # packet types in which it may appear more than once
    # Allowed values when the spec restricts them beyond the wire type: (min, max); 0/1 flags are (0, 1).
    value_range: tuple[int, int] | None = None


def _spec(
    pid: PropertyId,
    wire_type: WireType,
    packets: Iterable[int],
    repeatable: Iterable[int] = (),
    value_range: tuple[int, int] | None = None,
) -> PropertySpec:
    return PropertySpec(int(pid), pid.name.lower(), wire_type, frozenset(packets), frozenset(repeatable), value_range)


_W = WireType
_P = PropertyId
_ACKS = (PUBACK, PUBREC, PUBREL, PUBCOMP)
_ALL = (CONNECT, CONNACK, PUBLISH, WILL, *_ACKS, SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, DISCONNECT, AUTH)
PROPERTY_TABLE: dict[int, PropertySpec] = {
    s.id: s
    for s in (
        _spec(_P.PAYLOAD_FORMAT_INDICATOR, _W.BYTE, (PUBLISH, WILL), value_range=(0, 1)),
        _spec(_P.MESSAGE_EXPIRY_INTERVAL, _W.FOUR_BYTE_INT, (PUBLISH, WILL)),
        _spec(_P.CONTENT_TYPE, _W.UTF8_STRING, (PUBLISH, WILL)),
        _spec(_P.RESPONSE_TOPIC, _W.UTF8_STRING, (PUBLISH, WILL)),
        _spec(_P.CORRELATION_DATA, _W.BINARY, (PUBLISH, WILL)),
        _spec(_P.SUBSCRIPTION_IDENTIFIER, _W.VARIABLE_BYTE_INT, (PUBLISH, SUBSCRIBE), (PUBLISH,), (1, MAX_VBI)),
        _spec(_P.SESSION_EXPIRY_INTERVAL, _W.FOUR_BYTE_INT, (CONNECT, CONNACK, DISCONNECT)),
        _spec(_P.ASSIGNED_CLIENT_IDENTIFIER, _W.UTF8_STRING, (CONNACK,)),
        _spec(_P.SERVER_KEEP_ALIVE, _W.TWO_BYTE_INT, (CONNACK,)),
        _spec(_P.AUTHENTICATION_METHOD, _W.UTF8_STRING, (CONNECT, CONNACK, AUTH)),
        _spec(_P.AUTHENTICATION_DATA, _W.BINARY, (CONNECT, CONNACK, AUTH)),
        _spec(_P.REQUEST_PROBLEM_INFORMATION, _W.BYTE, (CONNECT,), value_range=(0, 1)),
        _spec(_P.WILL_DELAY_INTERVAL, _W.FOUR_BYTE_INT, (WILL,)),
        _spec(_P.REQUEST_RESPONSE_INFORMATION, _W.BYTE, (CONNECT,), value_range=(0, 1)),
        _spec(_P.RESPONSE_INFORMATION, _W.UTF8_STRING, (CONNACK,)),
        _spec(_P.SERVER_REFERENCE, _W.UTF8_STRING, (CONNACK, DISCONNECT)),
        _spec(_P.REASON_STRING, _W.UTF8_STRING, (CONNACK, *_ACKS, SUBACK, UNSUBACK, DISCONNECT, AUTH)),
        _spec(_P.RECEIVE_MAXIMUM, _W.TWO_BYTE_INT, (CONNECT, CONNACK), value_range=(1, 65535)),
        _spec(_P.TOPIC_ALIAS_MAXIMUM, _W.TWO_BYTE_INT, (CONNECT, CONNACK)),
        _spec(_P.TOPIC_ALIAS, _W.TWO_BYTE_INT, (PUBLISH,), value_range=(1, 65535)),
        _spec(_P.MAXIMUM_QOS, _W.BYTE, (CONNACK,), value_range=(0, 1)),
        _spec(_P.RETAIN_AVAILABLE, _W.BYTE, (CONNACK,), value_range=(0, 1)),
        _spec(
            _P.USER_PROPERTY,
            _W.UTF8_PAIR,
            _ALL,
            _ALL,
        ),
        _spec(_P.MAXIMUM_PACKET_SIZE, _W.FOUR_BYTE_INT, (CONNECT, CONNACK), value_range=(1, 0xFFFFFFFF)),
        _spec(_P.WILDCARD_SUBSCRIPTION_AVAILABLE, _W.BYTE, (CONNACK,), value_range=(0, 1)),
        _spec(_P.SUBSCRIPTION_IDENTIFIER_AVAILABLE, _W.BYTE, (CONNACK,), value_range=(0, 1)),
        _spec(_P.SHARED_SUBSCRIPTION_AVAILABLE, _W.BYTE, (CONNACK,), value_range=(0, 1)),
    )
}
PROPERTY_BY_NAME: dict[str, PropertySpec] = {s.name: s for s in PROPERTY_TABLE.values()}

_TYPE_MAX = {
    _W.BYTE: 0xFF,
    _W.TWO_BYTE_INT: 0xFFFF,
    _W.FOUR_BYTE_INT: 0xFFFFFFFF,
    _W.VARIABLE_BYTE_INT: MAX_VBI,
}
_USER_PROPERTY = int(_P.USER_PROPERTY)
_USER_PROPERTY_PACKETS = PROPERTY_TABLE[_USER_PROPERTY].packets  # also repeatable in each of them
_SUBSCRIPTION_IDENTIFIER = int(_P.SUBSCRIPTION_IDENTIFIER)
_RESPONSE_TOPIC = int(_P.RESPONSE_TOPIC)


def _check_value(spec: PropertySpec, value: Any) -> None:
    """Raises LocalProtocolError when `value` is not a valid value of `spec` (used when building)."""
    wt = spec.wire_type
    if wt is _W.UTF8_STRING:
        if not isinstance(value, str):
            raise LocalProtocolError(f"property {spec.name} must be a str, not {type(value).__name__}")
        if spec.id == _RESPONSE_TOPIC and (err := topic_name_error(value)):
            raise LocalProtocolError(f"property {spec.name}: {err}")
    elif wt is _W.BINARY:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise LocalProtocolError(f"property {spec.name} must be bytes, not {type(value).__name__}")
    elif wt is _W.UTF8_PAIR:
        if not (isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value)):
            raise LocalProtocolError(f"property {spec.name} must be a (str, str) pair, not {value!r}")
    else:
        if not isinstance(value, int) or isinstance(value, bool):
            raise LocalProtocolError(f"property {spec.name} must be an int, not {type(value).__name__}")
        low, high = spec.value_range or (0, _TYPE_MAX[wt])
        if not low <= value <= high:
            raise LocalProtocolError(f"property {spec.name} = {value} is outside {low}..{high}")


class Properties:
    """An immutable list of MQTT 5.0 properties in wire order.

    Build one with keyword arguments named as in the spec (snake_case), with `user_properties` (pairs, order
    kept) and `subscription_identifiers` for the repeatable ones::

        Properties(content_type="text/plain", user_properties=[("k", "v"), ("k", "w")])

    or from `(PropertyId, value)` items. Read them back as attributes (None when absent):
    ``props.content_type``, ``props.user_properties`` (a tuple of pairs), ``props.subscription_identifiers``.
    """

    __slots__ = ("_index", "items")
    items: tuple[tuple[int, Any], ...]
    _index: dict[int, Any]  # set on first lookup in a long list (_first_values)

    def __init__(self, items: Iterable[tuple[int, Any]] = (), /, **named: Any) -> None:
        pairs = [(int(pid), _normalise(PROPERTY_TABLE.get(int(pid)), value)) for pid, value in items]
        for name, value in named.items():
            if name == "user_properties":
                pairs.extend((_USER_PROPERTY, _normalise(PROPERTY_TABLE[_USER_PROPERTY], kv)) for kv in value)
            elif name == "subscription_identifiers":
                pairs.extend((_SUBSCRIPTION_IDENTIFIER, v) for v in value)
            elif name in PROPERTY_BY_NAME:
                if value is not None:
                    spec = PROPERTY_BY_NAME[name]
                    pairs.append((spec.id, _normalise(spec, value)))
            else:
                raise TypeError(f"unknown MQTT 5.0 property {name!r}")
        for pid, value in pairs:
            known = PROPERTY_TABLE.get(pid)
            if known is None:
                raise LocalProtocolError(f"unknown property identifier 0x{pid:02X}")
            _check_value(known, value)
        _set_items(self, tuple(pairs))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Properties are immutable")

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return iter(self.items)

    def _canonical(self) -> tuple[tuple[int, Any], ...]:
        # Stable sort: repeated properties keep their relative order, which is what carries meaning.
        return tuple(sorted(self.items, key=_first))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Properties):
            return NotImplemented
        return self.items == other.items or self._canonical() == other._canonical()

    def __hash__(self) -> int:
        return hash(self._canonical())

    def __repr__(self) -> str:
        parts = [f"{_name(pid)}={value!r}" for pid, value in self.items]
        return f"Properties({', '.join(parts)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Properties, (self.items,))

    def get(self, pid: int, default: Any = None) -> Any:
        """The first value of property `pid`, or `default`."""
        if len(self.items) > _INDEX_FROM:
            return _first_values(self).get(pid, default)
        for key, value in self.items:
            if key == pid:
                return value
        return default

    def get_all(self, pid: int) -> tuple[Any, ...]:
        return tuple(value for key, value in self.items if key == pid)

    def replace(self, **named: Any) -> Properties:
        """A copy with the named properties set (None removes one); repeatable ones are replaced whole."""
        drop = set()
        for name in named:
            if name == "user_properties":
                drop.add(_USER_PROPERTY)
            elif name == "subscription_identifiers":
                drop.add(_SUBSCRIPTION_IDENTIFIER)
            elif name in PROPERTY_BY_NAME:
                drop.add(PROPERTY_BY_NAME[name].id)
            else:
                raise TypeError(f"unknown MQTT 5.0 property {name!r}")
        kept = [(pid, value) for pid, value in self.items if pid not in drop]
        return Properties(kept, **{k: v for k, v in named.items() if v is not None})

    def as_list(self) -> list[list[Any]]:
        """`[name, value]` pairs in wire order, as `mqtt dump --json` writes them (bytes as lowercase hex)."""
        out: list[list[Any]] = []
        for pid, value in self.items:
            if isinstance(value, bytes):
                value = value.hex()
            elif isinstance(value, tuple):
                value = list(value)
            out.append([_name(pid), value])
        return out

    def as_json(self) -> dict[str, Any]:
        """The JSON object of `mqtt sub --json`, `mqtt dump --json` and `pub --json-lines` (properties_json)."""
        return properties_json(self.as_list())

    # Attribute access to named properties is generated below.
    user_properties: tuple[tuple[str, str], ...]
    subscription_identifiers: tuple[int, ...]
    payload_format_indicator: int | None
    message_expiry_interval: int | None
    content_type: str | None
    response_topic: str | None
    correlation_data: bytes | None
    subscription_identifier: int | None
    session_expiry_interval: int | None
    assigned_client_identifier: str | None
    server_keep_alive: int | None
    authentication_method: str | None
    authentication_data: bytes | None
    request_problem_information: int | None
    will_delay_interval: int | None
    request_response_information: int | None
    response_information: str | None
    server_reference: str | None
    reason_string: str | None
    receive_maximum: int | None
    topic_alias_maximum: int | None
    topic_alias: int | None
    maximum_qos: int | None
    retain_available: int | None
    maximum_packet_size: int | None
    wildcard_subscription_available: int | None
    subscription_identifier_available: int | None
    shared_subscription_available: int | None


#: The JSON names of the repeatable properties: lists, as the attributes of Properties.
_JSON_LISTS = {"user_property": "user_properties", "subscription_identifier": "subscription_identifiers"}


def properties_json(pairs: list[list[Any]]) -> dict[str, Any]:
    """`[name, value]` pairs (Properties.as_list()) as one JSON object named as the attributes of Properties:
    `user_properties` a list of `[key, value]`, `subscription_identifiers` a list, both in wire order; binary
    values as lowercase hex. A property that may appear once but is repeated (a broken packet, as `mqtt dump`
    shows it) has the list of its values."""
    out: dict[str, Any] = {}
    repeated: set[str] = set()
    for name, value in pairs:
        listed = _JSON_LISTS.get(name)
        if listed is not None:
            out.setdefault(listed, []).append(value)
        elif name in repeated:
            out[name].append(value)
        elif name in out:
            out[name] = [out[name], value]
            repeated.add(name)
        else:
            out[name] = value
    return out


class PropertiesJsonError(ValueError):
    """JSON that is not properties in the form Properties.as_json() writes; the message says which and why."""


#: The JSON lists of the repeatable properties, and the property each of their items is.
_JSON_ITEMS = {listed: name for name, listed in _JSON_LISTS.items()}
#: The PUBLISH properties that belong to one connection (topic_alias) or one delivery (the subscription
#: identifiers): a client never sends them (spec 3.3.4), so a message published on from JSON leaves them out.
_NOT_REPUBLISHED = frozenset({"topic_alias", "subscription_identifier", "subscription_identifiers"})


def properties_from_json(obj: Any, *, to_publish: bool = False) -> Properties:
    """Properties from their JSON form (the parsed value): the object as_json() writes, or the `[[name, value],
    ...]` list of as_list() (what `mqtt dump --json` wrote until 0.1.0). A null, for the whole or for any property
    in it, means absent. `to_publish`: only what a client may send in PUBLISH (the connection's and the
    delivery's own properties are left out, whatever their value; any other raises). Raises PropertiesJsonError.
    """
    if obj is None:
        return EMPTY_PROPERTIES
    if isinstance(obj, list):
        if not all(isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) for pair in obj):
            raise PropertiesJsonError("properties must be a JSON object (or a list of [name, value] pairs)")
        obj = properties_json(obj)
    if not isinstance(obj, dict):
        raise PropertiesJsonError(f"properties must be a JSON object, not {_json_type(obj)}")
    items: list[tuple[int, Any]] = []
    for name, value in obj.items():
        if value is None or (to_publish and name in _NOT_REPUBLISHED):
            continue
        item_name = _JSON_ITEMS.get(name)
        spec = PROPERTY_BY_NAME.get(item_name or name)
        if spec is None:
            raise PropertiesJsonError(f"unknown MQTT 5.0 property {name!r}")
        if to_publish and PUBLISH not in spec.packets:
            raise PropertiesJsonError(f"property {name!r} cannot be published")
        if item_name is None:
            items.append((spec.id, _json_value(spec, name, value)))
        elif isinstance(value, list):
            items.extend((spec.id, _json_value(spec, name, item)) for item in value)
        else:
            raise PropertiesJsonError(f"property {name!r} must be a list")
    try:
        return Properties(items)
    except LocalProtocolError as err:
        raise PropertiesJsonError(str(err)) from None


def _json_value(spec: PropertySpec, name: str, value: Any) -> Any:
    """One property's value from JSON (hex text for bytes, `[key, value]` for a user property); the rest is
    checked by Properties."""
    if spec.wire_type is _W.BINARY:
        try:
            return bytes.fromhex(value)
        except (TypeError, ValueError):
            raise PropertiesJsonError(f"property {name!r} must be hex text") from None
    if spec.wire_type is _W.UTF8_PAIR:
        if not (isinstance(value, list) and len(value) == 2 and all(isinstance(x, str) for x in value)):
            raise PropertiesJsonError(f"property {name!r} must be [key, value] string pairs, not {value!r}")
        return tuple(value)
    return value


def _json_type(value: Any) -> str:
    names = {str: "a string", bool: "true or false", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _name(pid: int) -> str:
    spec = PROPERTY_TABLE.get(pid)
    return spec.name if spec is not None else f"unknown_0x{pid:02x}"  # kept by tolerant decoding only


def _first(item: tuple[int, Any]) -> int:
    return item[0]


def _normalise(spec: PropertySpec | None, value: Any) -> Any:
    if spec is not None:
        if spec.wire_type is _W.BINARY and isinstance(value, bytearray | memoryview):
            return bytes(value)
        if spec.wire_type is _W.UTF8_PAIR and isinstance(value, list):
            return tuple(value)
    return value


_set_items = vars(Properties)["items"].__set__  # the slot's descriptor, bypassing immutability


# Past this many items (thousands of user properties, say), looking a property up goes through an index of first
# values, built once: a scan per lookup would make reading a packet's few named properties cost n each.
_INDEX_FROM = 16
_set_index = vars(Properties)["_index"].__set__


def _first_values(props: Properties) -> dict[int, Any]:
    try:
        return props._index
    except AttributeError:
        first: dict[int, Any] = {}
        for key, value in reversed(props.items):
            first[key] = value
        _set_index(props, first)
        return first


def _getter(pid: int) -> property:
    def get(self: Properties) -> Any:
        if len(self.items) > _INDEX_FROM:
            return _first_values(self).get(pid)
        for key, value in self.items:
            if key == pid:
                return value
        return None

    return property(get)


def _all_getter(pid: int) -> property:
    def get(self: Properties) -> tuple[Any, ...]:
        return tuple(value for key, value in self.items if key == pid)

    return property(get)


for _s in PROPERTY_TABLE.values():
    setattr(Properties, _s.name, _getter(_s.id))
for _attr, _pid in (("user_properties", _USER_PROPERTY), ("subscription_identifiers", _SUBSCRIPTION_IDENTIFIER)):
    setattr(Properties, _attr, _all_getter(_pid))

EMPTY_PROPERTIES = Properties()


def properties_from_items(items: tuple[tuple[int, Any], ...]) -> Properties:
    """Wraps already-validated items without checking them again (the decoder's fast path)."""
    props = object.__new__(Properties)
    _set_items(props, items)
    return props


# --- wire form ---------------------------------------------------------------------------------------------


def encode_properties(props: Properties, packet_type: int) -> bytes:
    """The property block of a packet: Variable Byte Integer length, then the properties."""
    items = props.items
    if not items:
        return b"\x00"
    cache = _ENCODED[packet_type]
    known = cache.get(items)
    if known is not None:
        return known
    block = _encode_properties(props, packet_type)
    if len(block) <= _SEEN_MAX_BYTES:
        if len(cache) >= _SEEN_MAX_ENTRIES:
            cache.clear()
        cache[items] = block
    return block


def _encode_properties(props: Properties, packet_type: int) -> bytes:
    out = bytearray()
    seen: set[int] = set()
    where = _PACKET_NAMES.get(packet_type, str(packet_type))
    for pid, value in props.items:
        spec = PROPERTY_TABLE.get(pid)
        if spec is None:
            raise LocalProtocolError(f"unknown property identifier 0x{pid:02X}")
        if packet_type not in spec.packets:
            raise LocalProtocolError(f"property {spec.name} is not allowed in {where}")
        if pid in seen and packet_type not in spec.repeatable:
            raise LocalProtocolError(f"property {spec.name} may appear only once in {where}")
        seen.add(pid)
        _check_value(spec, value)  # decoded properties are not checked when built
        out.append(pid)
        wt = spec.wire_type
        if wt is _W.BYTE:
            out.append(value)
        elif wt is _W.TWO_BYTE_INT:
            out += value.to_bytes(2, "big")
        elif wt is _W.FOUR_BYTE_INT:
            out += value.to_bytes(4, "big")
        elif wt is _W.VARIABLE_BYTE_INT:
            out += encode_vbi(value)
        elif wt is _W.UTF8_STRING:
            out += encode_string(value, spec.name)
        elif wt is _W.BINARY:
            out += encode_binary(value, spec.name)
        else:
            out += encode_string(value[0], f"{spec.name} name")
            out += encode_string(value[1], f"{spec.name} value")
    return encode_vbi(len(out)) + out


def _text(data: bytes, pos: int, end: int, what: str, errors: list[RemoteProtocolError]) -> tuple[str, int]:
    """A UTF-8 string; in a tolerant re-decode, invalid text is read with replacements and reported."""
    try:
        return read_string(data, pos, end, what)
    except MalformedPacket as exc:
        if type(errors) is not LenientErrors or pos + 2 > end:
            raise
        stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
        if stop > end:
            raise
        errors.append(exc)
        return str(data[pos + 2 : stop], "utf-8", "replace"), stop


def decode_properties(
    data: bytes, pos: int, end: int, packet_type: int, errors: list[RemoteProtocolError]
) -> tuple[Properties, int]:
    """Reads a property block at `pos`; returns (properties, position after it).

    Breaks that leave the block readable (a property not allowed in this packet, a repeated one, a value out of
    range) are appended to `errors` and reading goes on; a block that cannot be read raises MalformedPacket.
    """
    length, pos, minimal = read_vbi(data, pos, end, "property length")
    if not minimal:
        errors.append(MalformedPacket(f"property length at byte {pos} is not minimally encoded"))
    if length == 0:
        return EMPTY_PROPERTIES, pos
    stop = pos + length
    if stop > end:
        raise MalformedPacket(f"property length {length} runs past the end of the packet (at byte {pos})")
    cache = SEEN_PROPERTIES[packet_type]
    if length <= _SEEN_MAX_BYTES:
        raw = data[pos:stop]
        known = cache.get(raw)
        if known is not None:
            return known, stop
    where = _PACKET_NAMES.get(packet_type, str(packet_type))
    errors_before = len(errors)
    items: list[tuple[int, Any]] = []
    append = items.append
    user_ok = packet_type in _USER_PROPERTY_PACKETS
    seen: set[int] = set()
    while pos < stop:
        at = pos
        pid = data[pos]
        pos += 1
        if pid == 0x26 and user_ok and pos + 2 <= stop:
            # User properties come by the thousand in some packets: read a well-formed pair here, in one step;
            # anything odd about it (cut short, bad UTF-8, U+0000) takes the general path below, which says what.
            key_end = pos + 2 + ((data[pos] << 8) | data[pos + 1])
            if key_end + 2 <= stop:
                value_end = key_end + 2 + ((data[key_end] << 8) | data[key_end + 1])
                if value_end <= stop:
                    try:
                        key = data[pos + 2 : key_end].decode()
                        val = data[key_end + 2 : value_end].decode()
                    except UnicodeDecodeError:
                        pass
                    else:
                        if "\x00" not in key and "\x00" not in val:
                            append((0x26, (key, val)))
                            pos = value_end
                            continue
        spec = PROPERTY_TABLE.get(pid)
        if spec is None:
            # An unknown identifier leaves the rest of the block unreadable.
            err = MalformedPacket(
                f"unknown property identifier 0x{pid:02X} in {where} (at byte {at})", unknown_property=pid
            )
            if type(errors) is not LenientErrors:
                raise err
            # Tolerant decoding keeps the identifier with the rest of the block, as `unknown_0xNN` in dumps.
            errors.append(err)
            items.append((pid, bytes(data[pos:stop])))
            pos = stop
            break
        name = spec.name
        wt = spec.wire_type
        value: Any
        if wt is _W.BYTE:
            if pos >= stop:
                raise MalformedPacket(f"property {name} runs past the property block (at byte {at})")
            value = data[pos]
            pos += 1
        elif wt is _W.TWO_BYTE_INT:
            value, pos = read_u16(data, pos, stop, f"property {name}")
        elif wt is _W.FOUR_BYTE_INT:
            value, pos = read_u32(data, pos, stop, f"property {name}")
        elif wt is _W.VARIABLE_BYTE_INT:
            value, pos, minimal = read_vbi(data, pos, stop, f"property {name}")
            if not minimal:
                errors.append(MalformedPacket(f"property {name} at byte {at} is not minimally encoded"))
        elif wt is _W.UTF8_STRING:
            value, pos = _text(data, pos, stop, f"property {name}", errors)
        elif wt is _W.BINARY:
            value, pos = read_binary(data, pos, stop, f"property {name}")
        else:
            key, pos = _text(data, pos, stop, f"property {name} name", errors)
            val, pos = _text(data, pos, stop, f"property {name} value", errors)
            value = (key, val)
        if pid == _RESPONSE_TOPIC and (problem := topic_name_error(value)):
            errors.append(ProtocolError(f"property {name} in {where}: {problem} (at byte {at})"))
        if packet_type not in spec.packets:
            errors.append(MalformedPacket(f"property {name} is not allowed in {where} (at byte {at})"))
        if pid in seen and packet_type not in spec.repeatable:
            errors.append(ProtocolError(f"property {name} appears more than once in {where} (at byte {at})"))
        seen.add(pid)
        if spec.value_range is not None and not spec.value_range[0] <= value <= spec.value_range[1]:
            low, high = spec.value_range
            errors.append(
                ProtocolError(f"property {name} = {value} in {where} is outside {low}..{high} (at byte {at})")
            )
        items.append((pid, value))
    props = properties_from_items(tuple(items))
    if length <= _SEEN_MAX_BYTES and len(errors) == errors_before:
        if len(cache) >= _SEEN_MAX_ENTRIES:
            cache.clear()
        cache[raw] = props
    return props, pos


# Property blocks repeat (the same content type, user properties, ... on every message of a device): remember
# the valid ones already decoded, by packet type and bytes. Properties are immutable, so sharing them is safe.
_SEEN_MAX_BYTES = 256
_SEEN_MAX_ENTRIES = 1024
SEEN_PROPERTIES: dict[int, dict[bytes, Properties]] = {t: {} for t in _PACKET_NAMES}
_ENCODED: dict[int, dict[tuple[tuple[int, Any], ...], bytes]] = {t: {} for t in _PACKET_NAMES}
