"""The clients' `-d`: every packet sent or received, one line each, worded as libmosquitto's debug log (what
`mosquitto_pub -d` and `mosquitto_sub -d` print), so that habits, greps and notes carry over.

The bytes are decoded a second time, apart from the connection's own reading: tracing costs nothing when off and
cannot change what the connection does when on.
"""

from __future__ import annotations

from collections.abc import Callable

from mqtt_cli.core.errors import RemoteProtocolError
from mqtt_cli.core.packets import (
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
    UnsubAck,
    Unsubscribe,
)
from mqtt_cli.core.reader import PacketReader


def describe(packet: object, sending: bool, client_id: str) -> list[str]:
    """libmosquitto's debug lines for one packet (several for a SUBSCRIBE or UNSUBSCRIBE of several filters)."""
    who = f"Client {client_id or '(null)'}"
    verb = "sending" if sending else "received"
    if isinstance(packet, Publish):
        # QoS 0 has no packet identifier on the wire: m0 (libmosquitto shows its own counter when sending).
        return [
            f"{who} {verb} PUBLISH (d{int(packet.dup)}, q{packet.qos}, r{int(packet.retain)}, "
            f"m{packet.packet_id or 0}, '{packet.topic}', ... ({len(packet.payload)} bytes))"
        ]
    if isinstance(packet, PubAck):
        if sending:
            return [f"{who} sending PUBACK (m{packet.packet_id}, rc{packet.reason_code})"]
        return [f"{who} received PUBACK (Mid: {packet.packet_id}, RC:{packet.reason_code})"]
    if isinstance(packet, PubRec):
        if sending:
            return [f"{who} sending PUBREC (m{packet.packet_id}, rc{packet.reason_code})"]
        return [f"{who} received PUBREC (Mid: {packet.packet_id})"]
    if isinstance(packet, PubRel):
        if sending:
            return [f"{who} sending PUBREL (m{packet.packet_id})"]
        return [f"{who} received PUBREL (Mid: {packet.packet_id})"]
    if isinstance(packet, PubComp):
        if sending:
            return [f"{who} sending PUBCOMP (m{packet.packet_id})"]
        return [f"{who} received PUBCOMP (Mid: {packet.packet_id}, RC:{packet.reason_code})"]
    if isinstance(packet, Subscribe):
        return [
            f"{who} {verb} SUBSCRIBE (Mid: {packet.packet_id}, Topic: {sub.topic_filter}, QoS: {sub.qos}, "
            f"Options: 0x{sub.options & 0xFC:02x})"
            for sub in packet.subscriptions
        ]
    if isinstance(packet, Unsubscribe):
        return [f"{who} {verb} UNSUBSCRIBE (Mid: {packet.packet_id}, Topic: {f})" for f in packet.topic_filters]
    if isinstance(packet, SubAck) and not sending:
        codes = ", ".join(str(c) for c in packet.reason_codes)
        # The second line is mosquitto_sub's own (its on_subscribe with -d), right after libmosquitto's.
        return [f"{who} received SUBACK", f"Subscribed (mid: {packet.packet_id}): {codes}"]
    if isinstance(packet, ConnAck):
        return [f"{who} {verb} CONNACK ({packet.reason_code})"]
    if isinstance(packet, Disconnect) and not sending:
        return [f"Received DISCONNECT ({packet.reason_code})"]
    names = {Connect: "CONNECT", Disconnect: "DISCONNECT", PingReq: "PINGREQ", PingResp: "PINGRESP",
             SubAck: "SUBACK", UnsubAck: "UNSUBACK"}  # fmt: skip
    return [f"{who} {verb} {names.get(type(packet), type(packet).__name__.upper())}"]


class PacketTrace:
    """A client connection's trace hook (`ClientConnection(trace=...)`): decodes what it sends and receives and
    hands `write` a line per packet. Each CONNECT sent starts a new connection: its protocol version decodes
    what follows, its client identifier (or the one the broker's CONNACK assigns) names the lines."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self.client_id = ""
        self._out = PacketReader(None, strict=False)  # learns the version from the CONNECT
        self._in = PacketReader(None, strict=False)
        self._broken: set[bool] = set()  # directions whose framing broke on this connection: said once

    def sent(self, data: bytes) -> None:
        if data[:1] == b"\x10":  # CONNECT: a new connection, maybe another protocol version
            self._out = PacketReader(None, strict=False)
            self._broken.clear()
        if data:
            self._lines(self._out, data, True)

    def received(self, data: bytes | bytearray) -> None:
        if data:
            self._lines(self._in, data, False)

    def _lines(self, reader: PacketReader, data: bytes | bytearray, sending: bool) -> None:
        if sending in self._broken:
            return
        try:
            packets = reader.feed(data)
        except RemoteProtocolError as err:  # broken framing: said once, then nothing more on this connection
            self._broken.add(sending)
            self.write(f"Client {self.client_id or '(null)'} {'sending' if sending else 'received'} bad data: {err}")
            return
        for packet in packets:
            if isinstance(packet, RemoteProtocolError):
                self.write(
                    f"Client {self.client_id or '(null)'} {'sending' if sending else 'received'} a bad packet: {packet}"
                )
                continue
            if isinstance(packet, Connect):
                self.client_id = packet.client_id
                self._in = PacketReader(packet.protocol_version, strict=False)
            for line in describe(packet, sending, self.client_id):
                self.write(line)
            if isinstance(packet, ConnAck) and packet.properties.assigned_client_identifier:
                self.client_id = packet.properties.assigned_client_identifier


def describe_broker(packet: object, sending: bool, client_id: str) -> list[str]:
    """mosquitto's debug lines (`mosquitto -v`, log_type debug) for one packet the broker sends or receives."""
    if sending:
        head = f"Sending {{}} to {client_id}"
    else:
        head = f"Received {{}} from {client_id}"
    if isinstance(packet, Publish):
        return [
            head.format("PUBLISH") + f" (d{int(packet.dup)}, q{packet.qos}, r{int(packet.retain)}, "
            f"m{packet.packet_id or 0}, '{packet.topic}', ... ({len(packet.payload)} bytes))"
        ]
    if isinstance(packet, (PubAck, PubRec)):
        name = "PUBACK" if isinstance(packet, PubAck) else "PUBREC"
        if sending:
            return [head.format(name) + f" (m{packet.packet_id}, rc{packet.reason_code})"]
        rc = f", RC:{packet.reason_code}" if isinstance(packet, PubAck) else ""
        return [head.format(name) + f" (Mid: {packet.packet_id}{rc})"]
    if isinstance(packet, (PubRel, PubComp)):
        name = "PUBREL" if isinstance(packet, PubRel) else "PUBCOMP"
        if sending:
            return [head.format(name) + f" (m{packet.packet_id})"]
        rc = f", RC:{packet.reason_code}" if isinstance(packet, PubComp) else ""
        return [head.format(name) + f" (Mid: {packet.packet_id}{rc})"]
    if isinstance(packet, Subscribe):
        return [head.format("SUBSCRIBE")] + [f"    {s.topic_filter} (QoS {s.qos})" for s in packet.subscriptions]
    if isinstance(packet, Unsubscribe):
        return [head.format("UNSUBSCRIBE")] + [f"    {f}" for f in packet.topic_filters]
    if isinstance(packet, ConnAck):
        return [head.format("CONNACK") + f" ({int(packet.session_present)}, {packet.reason_code})"]
    if isinstance(packet, Disconnect) and sending:
        return [head.format("DISCONNECT") + f" (rc{packet.reason_code})"]
    names = {Connect: "CONNECT", Disconnect: "DISCONNECT", PingReq: "PINGREQ", PingResp: "PINGRESP",
             SubAck: "SUBACK", UnsubAck: "UNSUBACK"}  # fmt: skip
    return [head.format(names.get(type(packet), type(packet).__name__.upper()))]


class BrokerTrace:
    """One broker connection's packets each way, decoded a second time from the bytes received and sent, as
    `describe_broker` lines to `write(line)`. Made only while the log takes debug lines: off, it costs nothing."""

    __slots__ = ("_broken", "_in", "_out", "write")

    def __init__(self, write: Callable[[str], None]) -> None:
        self.write = write
        self._in = PacketReader(None, strict=False)  # learns the version from the CONNECT
        self._out: PacketReader | None = None  # made at the first bytes sent, with the version of the connection
        self._broken: set[bool] = set()

    def received(self, data: bytes | bytearray, client_id: str | None, peer: str) -> None:
        self._lines(self._in, data, False, client_id, peer)

    def sent(self, data: bytes | bytearray, version: int, client_id: str | None, peer: str) -> None:
        if self._out is None:
            self._out = PacketReader(version, strict=False)
        self._lines(self._out, data, True, client_id, peer)

    def _lines(self, reader: PacketReader, data: bytes | bytearray, sending: bool, client_id: str | None,
               peer: str) -> None:  # fmt: skip
        if not data or sending in self._broken:
            return
        try:
            packets = reader.feed(bytes(data))
        except RemoteProtocolError as err:  # broken framing: said once, then nothing more that way
            self._broken.add(sending)
            self.write(f"{'Sending' if sending else 'Received'} bad data {'to' if sending else 'from'} "
                       f"{client_id or peer}: {err}")  # fmt: skip
            return
        for packet in packets:
            if isinstance(packet, RemoteProtocolError):
                self.write(f"{'Sending' if sending else 'Received'} a bad packet {'to' if sending else 'from'} "
                           f"{client_id or peer}: {packet}")  # fmt: skip
                continue
            who = client_id or (packet.client_id if isinstance(packet, Connect) and packet.client_id else peer)
            for line in describe_broker(packet, sending, who):
                self.write(line)
