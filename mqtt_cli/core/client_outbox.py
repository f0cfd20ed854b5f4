"""`Outbox`: the sending half of a client connection's message flows: our PUBLISH packets, checked against the
broker's limits (client_options.BrokerLimits), given packet identifiers and kept until acknowledged
(flows.OutgoingFlows), with our topic aliases applied (aliases.OutgoingAliases), queued as bytes."""

from __future__ import annotations

from typing import Any

from .aliases import OutgoingAliases
from .client_options import BrokerLimits
from .encoder import encode, encode_publish, encode_topic_name, frame_publish
from .errors import LocalProtocolError
from .flows import OutgoingFlows
from .lifecycle import over_maximum_packet_size
from .packets import Publish
from .properties import EMPTY_PROPERTIES, Properties
from .records import fast_constructor
from .topics import topic_name_error

__all__ = ["Outbox"]

_TOPIC_NAMES_MAX = 1024
_new_publish = fast_constructor(Publish)  # (a frozen record's checks cost about a microsecond)


class Outbox:
    """`out` is the connection's queue of bytes to send; `auto_aliases`: topics get the broker's topic aliases
    by themselves. `limits` are the broker's, set at each CONNACK (`accepted`)."""

    __slots__ = ("_aliases", "_flows", "_relay_checks", "_topic_names", "auto_aliases", "limits", "out", "version")

    def __init__(self, flows: OutgoingFlows, out: list[bytes], auto_aliases: bool) -> None:
        self._flows = flows
        self.out = out
        self.auto_aliases = auto_aliases
        self.version = 5
        self.limits = BrokerLimits()
        self._aliases = OutgoingAliases()  # ours, this connection
        self._relay_checks = False  # relay() declines: a maximum packet size or automatic aliases to apply
        self._topic_names: dict[str, bytes] = {}  # topics found valid, encoded

    def accepted(self, version: int, limits: BrokerLimits) -> None:
        """A CONNACK accepted a connection speaking `version`, with the broker's `limits`."""
        self.version = version
        self.limits = limits
        self._aliases.reset(limits.topic_alias_maximum)
        self._relay_checks = limits.maximum_packet_size is not None or self.auto_aliases

    def publish(
        self, topic: str, payload: bytes, qos: int, retain: bool, properties: Properties, context: Any, packet_id: int
    ) -> int | None:
        """ClientConnection.publish, once connected."""
        limits = self.limits
        if qos > limits.maximum_qos:
            raise LocalProtocolError(f"the broker accepts QoS {limits.maximum_qos} at most, not QoS {qos}")
        if retain and not limits.retain_available:
            raise LocalProtocolError("the broker does not support retained messages")
        if properties.items:
            self._check_properties(properties)
        topic_name = self._topic_names.get(topic)
        if topic_name is None:
            # Checked and encoded once per topic: `-l` and a bridge publish to few topics many times.
            if err := topic_name_error(topic):
                raise LocalProtocolError(f"PUBLISH {err}")
            topic_name = encode_topic_name(topic)
            if len(self._topic_names) >= _TOPIC_NAMES_MAX:
                self._topic_names.clear()
            self._topic_names[topic] = topic_name
        version = self.version
        if qos == 0:
            wire, alias = self.prepare(_new_publish(topic, payload, 0, retain, False, None, properties))
            data = encode(wire, version)
            self.check_size(data)
            self.out.append(data)
            if alias:  # only once the packet goes: a refused one sets nothing
                self._aliases.point(alias, topic)
            return None
        if limits.maximum_packet_size is not None:
            self.check_size(encode(Publish(topic, payload, qos, retain, False, 1, properties), version))
        sent = self._flows.send_fields(topic, payload, qos, retain, properties, context, packet_id)  # raises: closed
        if properties.items or (version == 5 and self.auto_aliases):
            self.out.append(encode_publish(self.on_wire(sent) if version == 5 else sent, version))
        else:  # no properties, no alias: the parts are known good
            pid = sent.packet_id
            assert pid is not None  # send_fields gave it one
            first = 0x31 | (qos << 1) if retain else 0x30 | (qos << 1)
            props = b"\x00" if version == 5 else b""
            self.out.append(frame_publish(first, topic_name, pid.to_bytes(2, "big"), props, payload))
        return sent.packet_id

    def _check_properties(self, properties: Properties) -> None:
        if self.version != 5:
            raise LocalProtocolError("message properties need MQTT 5.0")
        alias = properties.topic_alias
        maximum = self.limits.topic_alias_maximum
        if alias is not None and alias > maximum:
            raise LocalProtocolError(f"topic alias {alias} is above the broker's topic alias maximum ({maximum})")
        if properties.subscription_identifiers:
            raise LocalProtocolError("a client must not send subscription identifiers in PUBLISH")

    def relay(self, topic: str, payload: bytes, qos: int, retain: bool, context: Any, packet_id: int) -> int:
        """ClientConnection.relay, once connected."""
        topic_name = self._topic_names.get(topic)
        if topic_name is None or self._relay_checks:
            return 0
        limits = self.limits
        if not 0 < qos <= limits.maximum_qos or (retain and not limits.retain_available):
            return 0
        sent = self._flows.try_send(topic, payload, qos, retain, EMPTY_PROPERTIES, context, packet_id)
        if sent is None:
            return 0
        pid = sent.packet_id
        assert pid is not None  # try_send gave it one
        first = 0x31 | (qos << 1) if retain else 0x30 | (qos << 1)
        self.out.append(
            frame_publish(first, topic_name, pid.to_bytes(2, "big"), b"\x00" if self.version == 5 else b"", payload)
        )
        return pid

    def check_size(self, data: bytes) -> None:
        """Raises LocalProtocolError for a packet over the broker's maximum packet size."""
        limit = self.limits.maximum_packet_size
        if over_maximum_packet_size(len(data), limit):
            raise LocalProtocolError(
                f"a packet of {len(data)} bytes exceeds the broker's maximum packet size ({limit} bytes)"
            )

    def on_wire(self, p: Publish) -> Publish:
        """The packet as it goes on this connection: with the topic replaced by an alias where one is set."""
        if self.version != 5 or not self._aliases.maximum:
            return p
        return self._aliases.apply(p, self.auto_aliases)

    def prepare(self, p: Publish) -> tuple[Publish, int]:
        """`on_wire` for a packet that may yet be refused: the alias to point once it goes (0: none) apart."""
        if self.version != 5 or not self._aliases.maximum:
            return p, 0
        return self._aliases.prepare(p, self.auto_aliases)
