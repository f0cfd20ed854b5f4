"""The codec's errors, split the h11 way: what the peer got wrong, and what we were asked to do wrong.

A `RemoteProtocolError` carries the MQTT 5.0 reason code to answer with (in DISCONNECT or CONNACK) and, when the
packet could still be framed and decoded, the decoded packet itself, so that a tolerant reader (``mqtt dump``)
can show it with its fields and the rule it breaks, and a broker can still answer, say, SUBACK 0x8F.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .packets import Packet

__all__ = [
    "LenientErrors",
    "LocalProtocolError",
    "MQTTError",
    "MalformedPacket",
    "PacketTooLarge",
    "ProtocolError",
    "RemoteProtocolError",
    "TopicNameInvalid",
    "UnsupportedProtocolVersion",
]


class MQTTError(Exception):
    """Base of every error the protocol core raises."""


class LocalProtocolError(MQTTError, ValueError):
    """We were asked to build or send something the protocol forbids (a bug or bad input on our side)."""


class RemoteProtocolError(MQTTError):
    """The peer sent bytes that break the protocol.

    `reason_code` is the MQTT 5.0 reason code to close with; `packet` is the decoded packet when the bytes could
    be framed and decoded despite the broken rule (None otherwise); `packet_type` the fixed header's type (0-15)
    when known; `fatal` is True when the byte stream cannot be followed any further (framing is lost).
    `packets` holds the packets that a strict `PacketReader.feed` decoded before this error in the same call,
    so a caller can act on them before closing the connection.
    """

    reason_code: int = 0x81

    def __init__(
        self,
        message: str,
        *,
        reason_code: int | None = None,
        packet: Packet | None = None,
        packet_type: int | None = None,
        fatal: bool = False,
        **details: Any,
    ) -> None:
        super().__init__(message)
        if reason_code is not None:
            self.reason_code = reason_code
        self.packet = packet
        self.packet_type = packet_type
        self.fatal = fatal
        self.details = details
        self.packets: list[Packet] = []

    @property
    def message(self) -> str:
        return str(self.args[0])


class MalformedPacket(RemoteProtocolError):
    """0x81: the packet cannot be parsed according to the specification."""

    reason_code = 0x81


class ProtocolError(RemoteProtocolError):
    """0x82: the packet parses but holds data the protocol does not allow."""

    reason_code = 0x82


class UnsupportedProtocolVersion(RemoteProtocolError):
    """0x84 (3.x CONNACK return code 1): a CONNECT with a protocol name or level we do not speak.

    `details` holds `protocol_name` and `protocol_level` as read, so a server can answer in the right format.
    """

    reason_code = 0x84


class TopicNameInvalid(RemoteProtocolError):
    """0x90: a PUBLISH (or will) topic name that is not a valid topic name, e.g. one holding a wildcard."""

    reason_code = 0x90


class PacketTooLarge(RemoteProtocolError):
    """0x95: the packet is larger than the maximum packet size this side accepts."""

    reason_code = 0x95


class LenientErrors(list[RemoteProtocolError]):
    """The violations list of a tolerant re-decode: texts that are not valid UTF-8 (or hold U+0000) are read with
    U+FFFD replacements and reported, instead of ending the decode (what tshark shows, and what dump wants).
    Here, not in the codec, because a compiled module cannot define a subclass of list."""
