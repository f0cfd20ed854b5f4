"""What a `ClientConnection` is asked to be (`ClientOptions`, and a `Tracer` to see its bytes) and what the broker
allows it (`BrokerLimits`).

Frozen records (records.py: a dataclass's semantics at a tenth of its cost to define, which a one-shot client
pays at start): a change is a new record (`replace`), so what a connection was made with stays readable whole.
"""

from __future__ import annotations

from typing import Protocol

from .errors import LocalProtocolError
from .lifecycle import DEFAULT_RECEIVE_MAXIMUM
from .packets import Connect, Will
from .properties import EMPTY_PROPERTIES, Properties
from .records import record

__all__ = ["BrokerLimits", "ClientOptions", "Tracer"]


class Tracer(Protocol):
    """Sees a connection's bytes each way (`ClientConnection(trace=...)`): the clients' -d, net/trace.py."""

    def sent(self, data: bytes) -> None: ...

    def received(self, data: bytes | bytearray) -> None: ...


@record
class ClientOptions:
    """`version`: 3 (3.1), 4 (3.1.1) or 5. `receive_maximum`, `maximum_packet_size` and `topic_alias_maximum`
    are this side's limits, announced in CONNECT (5.0) and enforced on what the broker sends. `max_inflight`
    caps our unacknowledged QoS 1/2 messages when the broker states no (or a larger) receive maximum, as 3.x
    brokers never do. `auto_topic_aliases`: publish() uses the broker's topic aliases for repeated topics by
    itself. `manual_ack`: messages received are acknowledged when the owner says so (core/ledger.py). `bridge`:
    mosquitto's bridge flag in a 3.x CONNECT (protocol level | 0x80: the broker does not echo our messages).
    `owner_ids`: the owner names its messages' packet identifiers (ClientConnection.publish's packet_id)."""

    client_id: str = ""
    version: int = 5
    keepalive: int = 60
    clean_start: bool = True
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = EMPTY_PROPERTIES
    receive_maximum: int = 65535
    maximum_packet_size: int | None = None
    topic_alias_maximum: int = 0
    max_inflight: int | None = None
    auto_topic_aliases: bool = False
    manual_ack: bool = False
    bridge: bool = False
    owner_ids: bool = False

    def __post_init__(self) -> None:
        if self.version not in (3, 4, 5):
            raise ValueError(f"version must be 3, 4 or 5, not {self.version!r}")
        if not 0 <= self.keepalive <= 65535:
            raise ValueError(f"keepalive must be 0..65535 seconds, not {self.keepalive}")
        if not 1 <= self.receive_maximum <= 65535:
            raise ValueError(f"receive maximum must be 1..65535, not {self.receive_maximum}")

    def connect_packet(self) -> Connect:
        """The CONNECT these options make. Raises LocalProtocolError for 3.1 without a client identifier."""
        v = self.version
        if v == 3 and not self.client_id:
            raise LocalProtocolError("MQTT 3.1 needs a client identifier (1 to 23 characters)")
        will = self.will
        props = EMPTY_PROPERTIES
        if v == 5:  # the owner's properties, with this side's limits where they are not the defaults
            extra: dict[str, int] = {}
            if self.receive_maximum != 65535:
                extra["receive_maximum"] = self.receive_maximum
            if self.maximum_packet_size is not None:
                extra["maximum_packet_size"] = self.maximum_packet_size
            if self.topic_alias_maximum:
                extra["topic_alias_maximum"] = self.topic_alias_maximum
            props = self.properties.replace(**extra) if extra else self.properties
        elif will is not None and will.properties:
            will = Will(will.topic, will.payload, will.qos, will.retain)
        return Connect(self.client_id, self.clean_start, self.keepalive, self.username, self.password, will, props, v,
                       bridge=self.bridge and v != 5)  # fmt: skip


@record
class BrokerLimits:
    """The broker's limits on what we send, from its CONNACK (the protocol's defaults before one)."""

    receive_maximum: int = 65535
    maximum_packet_size: int | None = None
    topic_alias_maximum: int = 0
    maximum_qos: int = 2
    retain_available: bool = True

    @classmethod
    def of(cls, props: Properties) -> BrokerLimits:
        """The limits a CONNACK's properties state (absent ones: the protocol's defaults)."""
        return cls(
            props.receive_maximum or DEFAULT_RECEIVE_MAXIMUM,
            props.maximum_packet_size,
            props.topic_alias_maximum or 0,
            2 if props.maximum_qos is None else props.maximum_qos,
            props.retain_available != 0,
        )
