"""The 15 MQTT control packets as frozen, slotted records (records.py) (one set for 3.1, 3.1.1 and 5.0).

Fields that a version does not have keep their defaults there (properties are empty before 5.0, reason codes
of acknowledgements are 0). Building a packet checks nothing; `encode` checks everything it writes.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, ClassVar

from .properties import EMPTY_PROPERTIES, Properties
from .records import record

__all__ = [
    "PACKET_NAMES",
    "PROTOCOL_NAMES",
    "REQUIRED_FLAGS",
    "Auth",
    "ConnAck",
    "Connect",
    "Disconnect",
    "Packet",
    "PacketType",
    "PingReq",
    "PingResp",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "SubAck",
    "Subscribe",
    "Subscription",
    "UnsubAck",
    "Unsubscribe",
    "Will",
    "fixed_flags_valid",
]


class PacketType(IntEnum):
    RESERVED = 0
    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


# Packet type -> its name, for messages (a tuple: the encoder and decoder index it on their paths).
PACKET_NAMES = tuple(t.name for t in PacketType)

# Fixed-header flags every packet but PUBLISH (-1) must carry (2.1.3), by packet type.
REQUIRED_FLAGS = (0, 0, 0, -1, 0, 0, 2, 0, 2, 0, 2, 0, 0, 0, 0, 0)
# MQTT 3.1 (protocol level 3) let a sender set DUP (0x8) on a PUBREL, SUBSCRIBE or UNSUBSCRIBE it sends again
# (3.1 section 2.1); 3.1.1 made their flags fixed [MQTT-2.2.2-1]. Flags 0xA are those of such a resend.
_DUP_IN_31: frozenset[int] = frozenset({int(PacketType.PUBREL), int(PacketType.SUBSCRIBE), int(PacketType.UNSUBSCRIBE)})


def fixed_flags_valid(ptype: int, flags: int, version: int) -> bool:
    """Whether a packet of type `ptype` may carry these fixed-header flags in protocol level `version`: the
    one rule of both roles (what a client and a server read), and of `mqtt dump`."""
    required = REQUIRED_FLAGS[ptype]
    if required < 0 or flags == required:
        return True
    return version == 3 and flags == required | 0x8 and ptype in _DUP_IN_31


# Protocol level -> the protocol name that goes with it (3.1 is "MQIsdp").
PROTOCOL_NAMES = {3: "MQIsdp", 4: "MQTT", 5: "MQTT"}

_EMPTY: Properties = EMPTY_PROPERTIES


@record
class Will:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    properties: Properties = _EMPTY  # 5.0 will properties (will delay interval, message expiry, ...)


@record
class Connect:
    type: ClassVar[PacketType] = PacketType.CONNECT
    client_id: str = ""
    clean_start: bool = True  # "clean session" in 3.x
    keepalive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = _EMPTY
    protocol_version: int = 4  # the protocol level: 3 (3.1), 4 (3.1.1) or 5
    protocol_name: str = ""  # "" means the one that goes with protocol_version
    bridge: bool = False  # mosquitto's bridge flag: 0x80 set in the protocol level

    def __post_init__(self) -> None:
        if not self.protocol_name:
            object.__setattr__(self, "protocol_name", PROTOCOL_NAMES.get(self.protocol_version, "MQTT"))


@record
class ConnAck:
    type: ClassVar[PacketType] = PacketType.CONNACK
    session_present: bool = False
    reason_code: int = 0  # the 3.x return code, or the 5.0 reason code
    properties: Properties = _EMPTY


@record
class Publish:
    type: ClassVar[PacketType] = PacketType.PUBLISH
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = _EMPTY


@record
class _Ack:
    packet_id: int
    reason_code: int = 0
    properties: Properties = _EMPTY


@record
class PubAck(_Ack):
    type: ClassVar[PacketType] = PacketType.PUBACK


@record
class PubRec(_Ack):
    type: ClassVar[PacketType] = PacketType.PUBREC


@record
class PubRel(_Ack):
    type: ClassVar[PacketType] = PacketType.PUBREL


@record
class PubComp(_Ack):
    type: ClassVar[PacketType] = PacketType.PUBCOMP


@record
class Subscription:
    """One topic filter of a SUBSCRIBE with its options (3.x carries only the QoS)."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0  # 0 send retained, 1 only for new subscriptions, 2 never

    @property
    def options(self) -> int:
        """The 5.0 subscription options byte."""
        return self.qos | (self.no_local << 2) | (self.retain_as_published << 3) | (self.retain_handling << 4)


@record
class Subscribe:
    type: ClassVar[PacketType] = PacketType.SUBSCRIBE
    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = _EMPTY

    def __post_init__(self) -> None:
        if not isinstance(self.subscriptions, tuple):
            object.__setattr__(self, "subscriptions", tuple(self.subscriptions))


@record
class SubAck:
    type: ClassVar[PacketType] = PacketType.SUBACK
    packet_id: int
    reason_codes: tuple[int, ...]  # 3.x: granted QoS or 0x80
    properties: Properties = _EMPTY

    def __post_init__(self) -> None:
        if not isinstance(self.reason_codes, tuple):
            object.__setattr__(self, "reason_codes", tuple(self.reason_codes))


@record
class Unsubscribe:
    type: ClassVar[PacketType] = PacketType.UNSUBSCRIBE
    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Properties = _EMPTY

    def __post_init__(self) -> None:
        if not isinstance(self.topic_filters, tuple):
            object.__setattr__(self, "topic_filters", tuple(self.topic_filters))


@record
class UnsubAck:
    type: ClassVar[PacketType] = PacketType.UNSUBACK
    packet_id: int
    reason_codes: tuple[int, ...] = ()  # 5.0 only; empty in 3.x
    properties: Properties = _EMPTY

    def __post_init__(self) -> None:
        if not isinstance(self.reason_codes, tuple):
            object.__setattr__(self, "reason_codes", tuple(self.reason_codes))


@record
class PingReq:
    type: ClassVar[PacketType] = PacketType.PINGREQ


@record
class PingResp:
    type: ClassVar[PacketType] = PacketType.PINGRESP


@record
class Disconnect:
    type: ClassVar[PacketType] = PacketType.DISCONNECT
    reason_code: int = 0
    properties: Properties = _EMPTY


@record
class Auth:
    type: ClassVar[PacketType] = PacketType.AUTH
    reason_code: int = 0
    properties: Properties = _EMPTY


Packet = (
    Connect | ConnAck | Publish | PubAck | PubRec | PubRel | PubComp | Subscribe | SubAck | Unsubscribe
    | UnsubAck | PingReq | PingResp | Disconnect | Auth
)  # fmt: skip

PACKET_CLASSES: dict[int, type[Any]] = {
    cls.type: cls
    for cls in (
        Connect, ConnAck, Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, SubAck, Unsubscribe, UnsubAck,
        PingReq, PingResp, Disconnect, Auth,
    )
}  # fmt: skip
