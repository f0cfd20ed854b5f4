"""What a `ClientConnection` reports to its owner: one small frozen record per kind of event.

The net layer (or a test) reads them from `ClientConnection.events()` after feeding bytes or time in. The two
kinds a busy connection is made of come a read at a time, not one event per packet: `MessagesReceived` (the
messages received) and `Acknowledged` (our QoS 1 messages acknowledged with a plain PUBACK), each holding
those between two other events of the read, in order.
"""

from __future__ import annotations

from typing import Any

from .packets import ConnAck, Publish
from .properties import EMPTY_PROPERTIES, Properties
from .records import record

__all__ = [
    "Acknowledged",
    "ConnectionAccepted",
    "ConnectionRefused",
    "Disconnected",
    "Event",
    "MessagesReceived",
    "PongReceived",
    "PublishAcknowledged",
    "PublishReceived",
    "ReleaseReceived",
    "SubscribeAcknowledged",
    "UnsubscribeAcknowledged",
]


@record
class ConnectionAccepted:
    """CONNACK with success. `unacknowledged` holds the QoS 1/2 messages of a session the broker no longer has
    (session present unset although we had messages in flight): the owner publishes them again, if it wants."""

    session_present: bool
    connack: ConnAck
    unacknowledged: tuple[tuple[Publish, Any], ...] = ()

    @property
    def properties(self) -> Properties:
        return self.connack.properties


@record
class ConnectionRefused:
    """CONNACK with a failure: the 5.0 reason code (3.x return codes are mapped to it) and what the broker said.

    `return_code` is the code as received (a 3.x return code on a 3.x connection)."""

    reason_code: int
    reason: str
    return_code: int
    properties: Properties = EMPTY_PROPERTIES


@record
class MessagesReceived:
    """Application messages from the broker, in the order received (a QoS 2 message is reported once, however
    often it is re-sent). Topics are resolved where the broker used a topic alias; the properties no longer
    hold the alias."""

    messages: list[Publish]


@record
class Acknowledged:
    """Our QoS 1 messages acknowledged with a plain PUBACK (success: reason 0, no properties), in order: the
    context the owner passed to publish() of each. Other ends of a flow come as PublishAcknowledged."""

    contexts: list[Any]


@record
class PublishAcknowledged:
    """The end of a QoS 1/2 flow that a plain PUBACK (Acknowledged) does not say: a PUBACK with a reason code or
    properties, PUBCOMP, or a PUBREC with a failure code (>= 0x80)."""

    packet_id: int
    reason_code: int
    context: Any = None  # what the owner passed to publish()
    properties: Properties = EMPTY_PROPERTIES

    @property
    def ok(self) -> bool:
        return self.reason_code < 0x80


@record
class PublishReceived:
    """PUBREC with success for our QoS 2 message: the broker owns it now (4.3.3); PUBREL is queued and the flow
    ends with PublishAcknowledged at PUBCOMP. Reported only with `manual_ack` (the bridge journals it)."""

    packet_id: int
    context: Any = None


@record
class ReleaseReceived:
    """PUBREL for a QoS 2 message we received and acknowledged: PUBCOMP is queued and the broker will not send
    that message again. Reported only with `manual_ack`."""

    packet_id: int


@record
class SubscribeAcknowledged:
    packet_id: int
    reason_codes: tuple[int, ...]  # granted QoS (0-2) or a failure (>= 0x80), one per filter
    properties: Properties = EMPTY_PROPERTIES


@record
class UnsubscribeAcknowledged:
    packet_id: int
    reason_codes: tuple[int, ...] = ()  # 5.0 only
    properties: Properties = EMPTY_PROPERTIES


@record
class PongReceived:
    """PINGRESP: the answer to a PINGREQ (a broker sends it after what it queued before, e.g. retained messages)."""


@record
class Disconnected:
    """The connection is over. `by_peer`: the broker sent DISCONNECT or closed; otherwise we decided (a protocol
    error of the broker's, keepalive expired, our own disconnect()). The transport should be closed now."""

    reason_code: int
    reason: str
    by_peer: bool
    properties: Properties = EMPTY_PROPERTIES


Event = (
    ConnectionAccepted | ConnectionRefused | MessagesReceived | Acknowledged | PublishAcknowledged
    | PublishReceived | ReleaseReceived | SubscribeAcknowledged | UnsubscribeAcknowledged | PongReceived
    | Disconnected
)  # fmt: skip
