"""The clients' -d trace as the connection's `trace` hook (net/trace.py's PacketTrace): what it sees of the bytes
each way, and how a new connection (another protocol version, an assigned client identifier) names its lines."""

from __future__ import annotations

from mqtt_cli.core.client import ClientConnection
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import ConnAck, PubAck, Publish
from mqtt_cli.core.properties import Properties
from mqtt_cli.net.trace import PacketTrace


def test_the_hook_sees_each_packet_both_ways_without_changing_what_the_connection_does() -> None:
    lines: list[str] = []
    traced = ClientConnection("c1", version=5, trace=PacketTrace(lines.append))
    plain = ClientConnection("c1", version=5)
    for conn in (traced, plain):
        conn.connect()
    assert traced.data_to_send(0.0) == plain.data_to_send(0.0)
    for conn in (traced, plain):
        conn.receive_data(encode(ConnAck(), 5), 0.0)
        conn.publish("a/b", b"hi", 1)
    assert traced.events() == plain.events()
    assert traced.data_to_send(1.0) == plain.data_to_send(1.0)
    traced.receive_data(encode(PubAck(1), 5), 1.0)
    assert lines == [
        "Client c1 sending CONNECT",
        "Client c1 received CONNACK (0)",
        "Client c1 sending PUBLISH (d0, q1, r0, m1, 'a/b', ... (2 bytes))",
        "Client c1 received PUBACK (Mid: 1, RC:0)",
    ]


def test_a_new_connection_takes_its_version_and_the_assigned_client_id_from_the_packets() -> None:
    """A 5.0 CONNECT refused, then 3.1.1 (the auto fallback): the second CONNECT's version decodes what follows;
    a client identifier the broker assigns names the lines after its CONNACK."""
    lines: list[str] = []
    conn = ClientConnection("", version=5, trace=PacketTrace(lines.append))
    conn.connect()
    conn.data_to_send(0.0)
    conn.receive_data(b"\x20\x02\x00\x01", 0.0)  # a 3.x CONNACK: unacceptable protocol version
    conn.events()
    conn.connect(version=4)
    conn.data_to_send(0.0)
    conn.receive_data(encode(ConnAck(), 4) + encode(Publish("t", b"x"), 4), 0.0)
    assert lines[-3:] == [
        "Client (null) sending CONNECT",
        "Client (null) received CONNACK (0)",
        "Client (null) received PUBLISH (d0, q0, r0, m0, 't', ... (1 bytes))",
    ]
    lines.clear()
    conn = ClientConnection("", version=5, trace=PacketTrace(lines.append))
    conn.connect()
    conn.data_to_send(0.0)
    conn.receive_data(encode(ConnAck(properties=Properties(assigned_client_identifier="auto-1")), 5), 0.0)
    conn.publish("t", b"x")
    conn.data_to_send(0.0)
    assert lines == [
        "Client (null) sending CONNECT",
        "Client (null) received CONNACK (0)",
        "Client auto-1 sending PUBLISH (d0, q0, r0, m0, 't', ... (1 bytes))",
    ]
