"""MQTT 5.0 reason codes (spec 2.4), which packets may carry each, and the 3.x CONNACK return codes."""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "REASONS_BY_PACKET",
    "SERVER_ONLY_DISCONNECT_REASONS",
    "V3_SUBACK_CODES",
    "ConnackReturnCode",
    "ReasonCode",
    "reason_name",
    "v3_connack_code",
    "v5_connack_reason",
]


class ReasonCode(IntEnum):
    SUCCESS = 0x00  # also "Normal disconnection" and "Granted QoS 0"
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


class ConnackReturnCode(IntEnum):
    """MQTT 3.1 / 3.1.1 CONNACK return codes."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USER_NAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


# The spec's own names (2.4, and the tables of each packet), for people.
_NAMES: dict[int, str] = {
    0x00: "Success",
    0x01: "Granted QoS 1",
    0x02: "Granted QoS 2",
    0x04: "Disconnect with Will Message",
    0x10: "No matching subscribers",
    0x11: "No subscription existed",
    0x18: "Continue authentication",
    0x19: "Re-authenticate",
    0x80: "Unspecified error",
    0x81: "Malformed Packet",
    0x82: "Protocol Error",
    0x83: "Implementation specific error",
    0x84: "Unsupported Protocol Version",
    0x85: "Client Identifier not valid",
    0x86: "Bad User Name or Password",
    0x87: "Not authorized",
    0x88: "Server unavailable",
    0x89: "Server busy",
    0x8A: "Banned",
    0x8B: "Server shutting down",
    0x8C: "Bad authentication method",
    0x8D: "Keep Alive timeout",
    0x8E: "Session taken over",
    0x8F: "Topic Filter invalid",
    0x90: "Topic Name invalid",
    0x91: "Packet Identifier in use",
    0x92: "Packet Identifier not found",
    0x93: "Receive Maximum exceeded",
    0x94: "Topic Alias invalid",
    0x95: "Packet too large",
    0x96: "Message rate too high",
    0x97: "Quota exceeded",
    0x98: "Administrative action",
    0x99: "Payload format invalid",
    0x9A: "Retain not supported",
    0x9B: "QoS not supported",
    0x9C: "Use another server",
    0x9D: "Server moved",
    0x9E: "Shared Subscriptions not supported",
    0x9F: "Connection rate exceeded",
    0xA0: "Maximum connect time",
    0xA1: "Subscription Identifiers not supported",
    0xA2: "Wildcard Subscriptions not supported",
}

_V3_CONNACK_NAMES = {
    0: "Connection Accepted",
    1: "Connection Refused: unacceptable protocol version",
    2: "Connection Refused: identifier rejected",
    3: "Connection Refused: server unavailable",
    4: "Connection Refused: bad user name or password",
    5: "Connection Refused: not authorized",
}

_V3_SUBACK_NAMES = {0: "Granted QoS 0", 1: "Granted QoS 1", 2: "Granted QoS 2", 0x80: "Failure"}
# The SUBACK return codes MQTT 3.x allows.
V3_SUBACK_CODES = frozenset(_V3_SUBACK_NAMES)

# Which reason codes each packet type may carry in 5.0 (the tables in 3.2.2.2, 3.4.2.1, ... 3.15.2.1),
# keyed by packet type number.
REASONS_BY_PACKET: dict[int, frozenset[int]] = {
    2: frozenset({0x00, *range(0x80, 0x8B), 0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F}),
    4: frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}),
    5: frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}),
    6: frozenset({0x00, 0x92}),
    7: frozenset({0x00, 0x92}),
    9: frozenset({0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}),
    11: frozenset({0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}),
    # DISCONNECT: the table of 3.14.2.1, plus 0x8C (Bad authentication method), which the overview table of
    # 2.4 allows in DISCONNECT and clients such as paho send.
    14: frozenset(
        {0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8C, 0x8D, 0x8E, 0x8F, 0x90} | set(range(0x93, 0xA3))
    ),
    15: frozenset({0x00, 0x18, 0x19}),
}

# DISCONNECT reason codes that the table of 3.14.2.1 gives to the Server alone: a client sending one breaks
# [MQTT-3.14.2-1] (a protocol error).
SERVER_ONLY_DISCONNECT_REASONS = frozenset(
    {0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2}
)

# 5.0 reason code -> nearest 3.x CONNACK return code, for a server answering a 3.x client.
_V5_TO_V3_CONNACK = {
    0x00: 0,
    0x84: 1,
    0x85: 2,
    0x88: 3,
    0x89: 3,
    0x9C: 3,
    0x9D: 3,
    0x9F: 3,
    0x86: 4,
    0x8C: 4,
    0x87: 5,
    0x8A: 5,
}


def v3_connack_code(reason_code: int) -> int:
    """The 3.x CONNACK return code that best conveys a 5.0 CONNACK reason code (3, server unavailable, else)."""
    return _V5_TO_V3_CONNACK.get(reason_code, 3)


# The other way (a client reading a 3.x broker's refusal): each return code's 5.0 reason code.
_V3_TO_V5_CONNACK = {
    1: ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
    2: ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
    3: ReasonCode.SERVER_UNAVAILABLE,
    4: ReasonCode.BAD_USER_NAME_OR_PASSWORD,
    5: ReasonCode.NOT_AUTHORIZED,
}


def v5_connack_reason(return_code: int, unknown: int = ReasonCode.UNSPECIFIED_ERROR) -> int:
    """The 5.0 CONNACK reason code that means what the 3.x return code `return_code` (1-5) says, else `unknown`."""
    return _V3_TO_V5_CONNACK.get(return_code, unknown)


def reason_name(code: int, packet_type: int | None = None, version: int = 5) -> str:
    """The spec's name for `code` as carried by `packet_type` (2 CONNACK, 9 SUBACK, 14 DISCONNECT, ...)."""
    if version < 5:
        if packet_type == 2:
            return _V3_CONNACK_NAMES.get(code, f"Reserved ({code})")
        if packet_type == 9:
            return _V3_SUBACK_NAMES.get(code, f"Reserved (0x{code:02X})")
    if code == 0x00:
        if packet_type == 14:
            return "Normal disconnection"
        if packet_type == 9:
            return "Granted QoS 0"
    return _NAMES.get(code, f"Unknown reason code 0x{code:02X}")
