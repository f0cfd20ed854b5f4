"""Hypothesis strategies for *valid* MQTT packets of a given protocol level (3 = 3.1, 4 = 3.1.1, 5 = 5.0).

Everything drawn here is something a conforming peer may send: `encode` must accept it, a strict `PacketReader`
must give it back unchanged. The rules are taken from the specifications, with the tables of the codec
(`PROPERTY_TABLE`, `REASONS_BY_PACKET`) as the source of which property and reason code go in which packet.

Values are small by default (payloads up to 200 bytes, strings of a few characters); about one value in 25 is
big (payloads up to 70 kB, so that remaining lengths take three bytes, strings and topics up to the 65535-byte
limit of a UTF-8 string). Big values are made from a drawn seed rather than drawn byte by byte, which keeps
hypothesis fast and within its buffer.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from hypothesis import strategies as st

from mqtt_cli.core.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from mqtt_cli.core.properties import (
    EMPTY_PROPERTIES,
    PROPERTY_TABLE,
    WILL,
    Properties,
    PropertyId,
    PropertySpec,
    WireType,
)
from mqtt_cli.core.reasons import REASONS_BY_PACKET
from mqtt_cli.core.wire import MAX_VBI

__all__ = [
    "ACK_CLASSES",
    "VERSIONS",
    "auths",
    "big_bytes",
    "binaries",
    "connacks",
    "connects",
    "disconnects",
    "packet_ids",
    "packets",
    "packets_and_versions",
    "payloads",
    "properties",
    "property_values",
    "pubacks",
    "publishes",
    "qos_levels",
    "rarely",
    "reason_codes",
    "subacks",
    "subscribes",
    "subscriptions",
    "topic_filters",
    "topic_names",
    "unsubacks",
    "unsubscribes",
    "utf8_text",
    "versions",
    "wills",
]

T = TypeVar("T")

VERSIONS = (3, 4, 5)
versions = st.sampled_from(VERSIONS)
qos_levels = st.integers(0, 2)
packet_ids = st.integers(1, 65535)

ACK_CLASSES = (PubAck, PubRec, PubRel, PubComp)

# 3.x CONNACK return codes and SUBACK codes (the 5.0 ones come from REASONS_BY_PACKET).
V3_CONNACK_CODES = tuple(range(6))
V3_SUBACK_CODES = (0, 1, 2, 0x80)

_INT_MAX = {
    WireType.BYTE: 0xFF,
    WireType.TWO_BYTE_INT: 0xFFFF,
    WireType.FOUR_BYTE_INT: 0xFFFF_FFFF,
    WireType.VARIABLE_BYTE_INT: MAX_VBI,
}
_MAX_STRING_BYTES = 65535


def rarely(common: st.SearchStrategy[T], rare: st.SearchStrategy[T], one_in: int = 25) -> st.SearchStrategy[T]:
    """`rare` about once in `one_in` draws, else `common`; shrinks towards `common`."""
    return st.integers(0, one_in - 1).flatmap(lambda i: rare if i == one_in - 1 else common)


# --- primitive values ----------------------------------------------------------------------------------------------


@functools.cache
def _chars(forbid: str = "") -> st.SearchStrategy[str]:
    # codec="utf-8" leaves out the surrogates (a lone one is not encodable); U+0000 is forbidden by MQTT 1.5.4.
    return st.characters(codec="utf-8", exclude_characters="\x00" + forbid)


def _seeded(size: st.SearchStrategy[int], make: Callable[[random.Random, int], T]) -> st.SearchStrategy[T]:
    return st.tuples(size, st.integers(0, 2**32 - 1)).map(lambda t: make(random.Random(t[1]), t[0]))


@functools.cache
def big_bytes(min_size: int, max_size: int) -> st.SearchStrategy[bytes]:
    """Random bytes of a size in [min_size, max_size], generated from a seed."""
    return _seeded(st.integers(min_size, max_size), lambda rnd, n: rnd.randbytes(n))


# A few alphabets for big strings: ASCII, 2-, 3- and 4-byte UTF-8 sequences, and U+FEFF (valid, not stripped).
_BIG_ALPHABET = "abcXYZ09 .-_$é߿ࠀ€日本\ufeff\uffff\U00010000\U0001f600\U0010ffff"


@functools.cache
def _big_text(min_bytes: int, max_bytes: int, forbid: str = "") -> st.SearchStrategy[str]:
    """A string whose UTF-8 form has between min_bytes and max_bytes bytes (generated from a seed)."""
    alphabet = [c for c in _BIG_ALPHABET if c not in forbid]

    def make(rnd: random.Random, target: int) -> str:
        raw = "".join(rnd.choices(alphabet, k=target)).encode()[:target]
        text = raw.decode(errors="ignore")  # drops a sequence cut in two at the end
        return text + "a" * (target - len(text.encode()))  # pad to exactly `target` bytes

    return _seeded(st.integers(min_bytes, max_bytes), make)


@functools.cache
def utf8_text(min_size: int = 0, max_size: int = 12, *, forbid: str = "", big: bool = True) -> st.SearchStrategy[str]:
    """Well-formed UTF-8 text without U+0000 (nor the characters in `forbid`); rarely up to 65535 bytes."""
    small = st.text(_chars(forbid), min_size=min_size, max_size=max_size)
    if not big:
        return small
    return rarely(small, _big_text(max(min_size * 4, 100), _MAX_STRING_BYTES, forbid))


@functools.cache
def binaries(max_size: int = 32) -> st.SearchStrategy[bytes]:
    """Binary Data (1.5.6): up to 65535 bytes, usually short."""
    return rarely(st.binary(max_size=max_size), big_bytes(max_size + 1, _MAX_STRING_BYTES))


@functools.cache
def payloads(max_size: int = 200) -> st.SearchStrategy[bytes]:
    """Application messages: up to 200 bytes, rarely up to 70 kB (three-byte remaining lengths)."""
    return rarely(st.binary(max_size=max_size), big_bytes(max_size + 1, 70_000))


# --- topics --------------------------------------------------------------------------------------------------------


@functools.cache
def _level_text(forbid: str = "") -> st.SearchStrategy[str]:
    """One topic level: any text without '/', '+', '#' (empty levels are real levels)."""
    return st.text(_chars("/+#" + forbid), max_size=6)


@functools.cache
def topic_names(*, forbid: str = "") -> st.SearchStrategy[str]:
    """Valid, non-empty topic names (MQTT 4.7): levels of text, no wildcards; rarely up to 65535 bytes."""
    small = st.lists(_level_text(forbid), min_size=1, max_size=5).map(lambda levels: "/".join(levels) or "a")
    big = _big_text(1000, _MAX_STRING_BYTES, forbid="/+#" + forbid)
    return rarely(small, big)


def _filter_levels(levels: list[str], hash_last: bool) -> list[str]:
    if hash_last:
        return [*levels, "#"]  # '#' only as the whole last level; "#" alone is a filter too
    return levels if levels not in ([], [""]) else ["a"]  # a filter has at least one character


@functools.cache
def _plain_filter_levels(forbid: str = "") -> st.SearchStrategy[list[str]]:
    level = st.one_of(_level_text(forbid), st.just("+"))
    return st.tuples(st.lists(level, max_size=5), st.booleans()).map(lambda t: _filter_levels(*t))


@functools.cache
def topic_filters(version: int = 4, *, shared: bool | None = None, forbid: str = "") -> st.SearchStrategy[str]:
    """Valid topic filters (MQTT 4.7.1): '+' as whole levels, '#' as the whole last level.

    In 5.0, sometimes a shared subscription ``$share/{group}/{filter}`` (4.8.2); `shared` forces it on or off.
    """
    levels = _plain_filter_levels(forbid)
    # A first level of "$share" would make the filter a (here malformed) shared subscription.
    small = levels.filter(lambda ls: not (ls[0] == "$share" and len(ls) > 1)).map("/".join)
    big = _big_text(1000, _MAX_STRING_BYTES - 4, forbid="/+#" + forbid).map(lambda s: s + "/+/#")
    plain = rarely(small, big)
    group = st.text(_chars("/+#" + forbid), min_size=1, max_size=6)
    shared_filter = st.tuples(group, small).map(lambda t: f"$share/{t[0]}/{t[1]}")
    if shared is True:
        return shared_filter
    if shared is False or version < 5:
        return plain
    return rarely(plain, shared_filter, 5)


# --- properties ----------------------------------------------------------------------------------------------------


@functools.cache
def property_values(spec: PropertySpec, forbid: str = "") -> st.SearchStrategy[Any]:
    wt = spec.wire_type
    if wt in _INT_MAX:
        low, high = spec.value_range or (0, _INT_MAX[wt])
        return st.integers(low, high)
    if spec.id == PropertyId.RESPONSE_TOPIC:
        return topic_names(forbid=forbid)  # "The Response Topic MUST be a UTF-8 Encoded String" and a topic name
    if wt is WireType.UTF8_STRING:
        return utf8_text(forbid=forbid)
    if wt is WireType.BINARY:
        return binaries()
    assert wt is WireType.UTF8_PAIR
    return st.tuples(utf8_text(max_size=6, forbid=forbid, big=False), utf8_text(forbid=forbid))


@functools.cache
@st.composite
def properties(
    draw: st.DrawFn,
    packet_type: int,
    version: int = 5,
    *,
    require: Iterable[int] = (),
    exclude: Iterable[int] = (),
    forbid: str = "",
) -> Properties:
    """Properties valid in `packet_type` (1-15, or WILL for will properties); empty before 5.0.

    Each property allowed in the packet appears at most once, except the repeatable ones (user properties, and
    subscription identifiers in PUBLISH), which appear one to three times; the order is random (repeated
    properties keep the order drawn). `require` are always present, `exclude` never; `forbid` are characters
    kept out of every string (the paho tests use it for U+FEFF, which paho's parser rejects).
    """
    if version < 5:
        return EMPTY_PROPERTIES
    required = set(require)
    excluded = set(exclude)
    specs = [s for s in PROPERTY_TABLE.values() if packet_type in s.packets and s.id not in excluded]
    # A quarter of the blocks are empty: the short forms of acknowledgements and DISCONNECT depend on it.
    empty = not required and draw(st.integers(0, 3)) == 0
    items: list[tuple[int, Any]] = []
    for spec in specs:
        if empty or not (spec.id in required or draw(st.booleans())):
            continue
        value = property_values(spec, forbid)
        if packet_type in spec.repeatable:
            items.extend((spec.id, v) for v in draw(st.lists(value, min_size=1, max_size=3)))
        else:
            items.append((spec.id, draw(value)))
    return Properties(draw(st.permutations(items)) if len(items) > 1 else items)


def _with_auth_method(draw: st.DrawFn, props: Properties, forbid: str) -> Properties:
    """Authentication Data without an Authentication Method is a Protocol Error (3.1.2.11.10, 3.15.2.2.3)."""
    if props.authentication_data is not None and props.authentication_method is None:
        method = draw(utf8_text(min_size=1, forbid=forbid, big=False))
        return Properties((*props.items, (PropertyId.AUTHENTICATION_METHOD, method)))
    return props


@functools.cache
def reason_codes(packet_type: int) -> st.SearchStrategy[int]:
    """5.0 reason codes allowed in `packet_type` (the tables of chapter 3)."""
    return st.sampled_from(sorted(REASONS_BY_PACKET[packet_type]))


# --- packets -------------------------------------------------------------------------------------------------------


@functools.cache
@st.composite
def _message(draw: st.DrawFn, packet_type: int, version: int, forbid: str) -> tuple[bytes, Properties]:
    """A payload and its properties: a Payload Format Indicator of 1 makes the payload UTF-8 text (3.3.2.3.2).

    A will payload is Binary Data (3.1.3.4): at most 65535 bytes; a PUBLISH payload is only bounded by the
    remaining length.
    """
    props = draw(properties(packet_type, version, forbid=forbid))
    limit = _MAX_STRING_BYTES if packet_type == WILL else 70_000
    if props.payload_format_indicator == 1:
        payload = draw(rarely(st.text(_chars(), max_size=60), _big_text(201, limit))).encode()
    else:
        payload = draw(rarely(st.binary(max_size=200), big_bytes(201, limit)))
    return payload, props


@functools.cache
@st.composite
def wills(draw: st.DrawFn, version: int, *, forbid: str = "") -> Will:
    payload, props = draw(_message(WILL, version, forbid))
    return Will(draw(topic_names(forbid=forbid)), payload, draw(qos_levels), draw(st.booleans()), props)


@functools.cache
@st.composite
def connects(draw: st.DrawFn, version: int, *, forbid: str = "") -> Connect:
    if version == 3:
        # 3.1: "between 1 and 23 characters"; no empty client identifier before 3.1.1.
        client_id = draw(st.text(_chars(forbid), min_size=1, max_size=23))
    else:
        client_id = draw(rarely(st.text(_chars(forbid), max_size=23), utf8_text(24, 100, forbid=forbid), 10))
    clean_start = draw(st.booleans())
    if version == 4 and not client_id:
        clean_start = True  # 3.1.1 [MQTT-3.1.3-7]: a zero-byte client id needs clean session 1
    username = draw(st.none() | utf8_text(forbid=forbid))
    password = draw(st.none() | binaries())
    if version < 5 and username is None:
        password = None  # 3.x [MQTT-3.1.2-22]: no password flag without the user name flag
    will = draw(st.none() | wills(version, forbid=forbid))
    props = _with_auth_method(draw, draw(properties(1, version, forbid=forbid)), forbid)
    return Connect(
        client_id=client_id,
        clean_start=clean_start,
        keepalive=draw(st.integers(0, 65535)),
        username=username,
        password=password,
        will=will,
        properties=props,
        protocol_version=version,
        bridge=draw(rarely(st.just(False), st.just(True), 10)),  # mosquitto's bridge bit: 0x80 in the level
    )


@functools.cache
@st.composite
def connacks(draw: st.DrawFn, version: int, *, forbid: str = "") -> ConnAck:
    code = draw(reason_codes(2) if version == 5 else st.sampled_from(V3_CONNACK_CODES))
    # Session present only when the connection is accepted (3.2.2.1.1), and 3.1 has no such flag at all.
    session_present = code == 0 and version > 3 and draw(st.booleans())
    props = _with_auth_method(draw, draw(properties(2, version, forbid=forbid)), forbid)
    return ConnAck(session_present, code, props)


@functools.cache
@st.composite
def publishes(draw: st.DrawFn, version: int, *, forbid: str = "") -> Publish:
    qos = draw(qos_levels)
    payload, props = draw(_message(3, version, forbid))
    if version == 5 and props.topic_alias is not None and draw(st.booleans()):
        topic = ""  # 5.0 3.3.2.1: a zero-length topic name with a topic alias
    else:
        topic = draw(topic_names(forbid=forbid))
    return Publish(
        topic=topic,
        payload=payload,
        qos=qos,
        retain=draw(st.booleans()),
        dup=qos > 0 and draw(st.booleans()),  # [MQTT-3.3.1-2]: DUP 0 for QoS 0
        packet_id=draw(packet_ids) if qos else None,
        properties=props,
    )


@functools.cache
@st.composite
def pubacks(draw: st.DrawFn, version: int, cls: type | None = None, *, forbid: str = "") -> Any:
    """PUBACK, PUBREC, PUBREL or PUBCOMP (`cls` picks one)."""
    if cls is None:
        cls = draw(st.sampled_from(ACK_CLASSES))
    if version < 5:
        return cls(draw(packet_ids))
    return cls(draw(packet_ids), draw(reason_codes(cls.type)), draw(properties(cls.type, 5, forbid=forbid)))


@functools.cache
@st.composite
def subscriptions(draw: st.DrawFn, version: int, *, forbid: str = "") -> Subscription:
    topic_filter = draw(topic_filters(version, forbid=forbid))
    qos = draw(qos_levels)
    if version < 5:
        return Subscription(topic_filter, qos)
    return Subscription(
        topic_filter,
        qos,
        # [MQTT-3.8.3-4]: no-local on a shared subscription is a Protocol Error.
        no_local=not topic_filter.startswith("$share/") and draw(st.booleans()),
        retain_as_published=draw(st.booleans()),
        retain_handling=draw(st.integers(0, 2)),
    )


@functools.cache
def _some(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[list[T]]:
    """One to four elements, rarely up to 40."""
    return rarely(st.lists(strategy, min_size=1, max_size=4), st.lists(strategy, min_size=5, max_size=40), 20)


@functools.cache
@st.composite
def subscribes(draw: st.DrawFn, version: int, *, forbid: str = "") -> Subscribe:
    # Subscription Identifier: at most once in SUBSCRIBE, 1..268435455 (the property table says so).
    return Subscribe(
        draw(packet_ids),
        tuple(draw(_some(subscriptions(version, forbid=forbid)))),
        draw(properties(8, version, forbid=forbid)),
    )


@functools.cache
@st.composite
def subacks(draw: st.DrawFn, version: int, *, forbid: str = "") -> SubAck:
    code = reason_codes(9) if version == 5 else st.sampled_from(V3_SUBACK_CODES)
    return SubAck(draw(packet_ids), tuple(draw(_some(code))), draw(properties(9, version, forbid=forbid)))


@functools.cache
@st.composite
def unsubscribes(draw: st.DrawFn, version: int, *, forbid: str = "") -> Unsubscribe:
    return Unsubscribe(
        draw(packet_ids),
        tuple(draw(_some(topic_filters(version, forbid=forbid)))),
        draw(properties(10, version, forbid=forbid)),
    )


@functools.cache
@st.composite
def unsubacks(draw: st.DrawFn, version: int, *, forbid: str = "") -> UnsubAck:
    if version < 5:
        return UnsubAck(draw(packet_ids))  # 3.x UNSUBACK is a packet identifier only
    return UnsubAck(draw(packet_ids), tuple(draw(_some(reason_codes(11)))), draw(properties(11, 5, forbid=forbid)))


@functools.cache
@st.composite
def disconnects(draw: st.DrawFn, version: int, *, forbid: str = "") -> Disconnect:
    if version < 5:
        return Disconnect()
    return Disconnect(draw(reason_codes(14)), draw(properties(14, 5, forbid=forbid)))


@functools.cache
@st.composite
def auths(draw: st.DrawFn, version: int = 5, *, forbid: str = "") -> Auth:
    """AUTH (5.0 only). Only Success without properties may leave out the Authentication Method (3.15.2.2)."""
    assert version == 5, "AUTH exists only in MQTT 5.0"
    code = draw(reason_codes(15))
    if code == 0 and draw(st.booleans()):
        return Auth()
    props = draw(properties(15, 5, require=(PropertyId.AUTHENTICATION_METHOD,), forbid=forbid))
    return Auth(code, props)


@functools.cache
def packets(version: int, *, forbid: str = "") -> st.SearchStrategy[Any]:
    """Any valid packet for a connection at `version` (a CONNECT is at that level too)."""
    kinds: list[st.SearchStrategy[Any]] = [
        connects(version, forbid=forbid),
        connacks(version, forbid=forbid),
        publishes(version, forbid=forbid),
        pubacks(version, forbid=forbid),
        subscribes(version, forbid=forbid),
        subacks(version, forbid=forbid),
        unsubscribes(version, forbid=forbid),
        unsubacks(version, forbid=forbid),
        st.just(PingReq()),
        st.just(PingResp()),
        disconnects(version, forbid=forbid),
    ]
    if version == 5:
        kinds.append(auths(version, forbid=forbid))
    return st.one_of(kinds)


@functools.cache
def packets_and_versions() -> st.SearchStrategy[tuple[int, Any]]:
    """(version, packet) pairs over the three protocol levels."""
    return versions.flatmap(lambda v: st.tuples(st.just(v), packets(v)))
