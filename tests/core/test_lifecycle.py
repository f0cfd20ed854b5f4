"""The connection-lifecycle table (core/lifecycle.py), every state x event x role, both roles driven through it,
and the limits both roles share."""

from __future__ import annotations

import itertools

import pytest

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.client import ClientConnection
from mqtt_cli.core.encoder import encode
from mqtt_cli.core.errors import LocalProtocolError, RemoteProtocolError
from mqtt_cli.core.events import ConnectionAccepted, ConnectionRefused, Disconnected
from mqtt_cli.core.lifecycle import (
    DEFAULT_RECEIVE_MAXIMUM,
    ConnectionState,
    LifecycleEvent,
    Role,
    keepalive_deadline,
    next_topic_alias,
    over_maximum_packet_size,
    receive_maximum_exceeded,
    resolve_topic_alias,
    transition,
)
from mqtt_cli.core.limits import Limits
from mqtt_cli.core.packets import ConnAck, Connect, Disconnect, PingReq, Publish
from mqtt_cli.core.properties import Properties
from mqtt_cli.core.reader import PacketReader

S = ConnectionState
E = LifecycleEvent
L, R = LocalProtocolError, RemoteProtocolError

# Written out in full, independently of the module's own table: (client, server) outcome per state and event, a
# state or the error class expected.
EXPECTED: dict[tuple[ConnectionState, LifecycleEvent], tuple[object, object]] = {
    (S.IDLE, E.CONNECT): (S.CONNECTING, S.CONNECTING),
    (S.IDLE, E.CONNACK_ACCEPTED): (R, L),
    (S.IDLE, E.CONNACK_REFUSED): (R, L),
    (S.IDLE, E.DISCONNECT_SENT): (S.CLOSED, S.CLOSED),
    (S.IDLE, E.DISCONNECT_RECEIVED): (R, R),
    (S.IDLE, E.PROTOCOL_ERROR): (S.CLOSED, S.CLOSED),
    (S.IDLE, E.TRANSPORT_CLOSED): (S.CLOSED, S.CLOSED),
    (S.CONNECTING, E.CONNECT): (L, R),
    (S.CONNECTING, E.CONNACK_ACCEPTED): (S.CONNECTED, S.CONNECTED),
    (S.CONNECTING, E.CONNACK_REFUSED): (S.CLOSED, S.CLOSED),
    (S.CONNECTING, E.DISCONNECT_SENT): (S.CLOSED, S.CLOSED),
    (S.CONNECTING, E.DISCONNECT_RECEIVED): (R, R),
    (S.CONNECTING, E.PROTOCOL_ERROR): (S.CLOSED, S.CLOSED),
    (S.CONNECTING, E.TRANSPORT_CLOSED): (S.CLOSED, S.CLOSED),
    (S.CONNECTED, E.CONNECT): (L, R),
    (S.CONNECTED, E.CONNACK_ACCEPTED): (R, L),
    (S.CONNECTED, E.CONNACK_REFUSED): (R, L),
    (S.CONNECTED, E.DISCONNECT_SENT): (S.CLOSED, S.CLOSED),
    (S.CONNECTED, E.DISCONNECT_RECEIVED): (S.CLOSED, S.CLOSED),
    (S.CONNECTED, E.PROTOCOL_ERROR): (S.CLOSED, S.CLOSED),
    (S.CONNECTED, E.TRANSPORT_CLOSED): (S.CLOSED, S.CLOSED),
    (S.CLOSED, E.CONNECT): (S.CONNECTING, R),  # a client connects again on its session; a server object is done
    (S.CLOSED, E.CONNACK_ACCEPTED): (R, L),
    (S.CLOSED, E.CONNACK_REFUSED): (R, L),
    (S.CLOSED, E.DISCONNECT_SENT): (S.CLOSED, S.CLOSED),
    (S.CLOSED, E.DISCONNECT_RECEIVED): (R, R),
    (S.CLOSED, E.PROTOCOL_ERROR): (S.CLOSED, S.CLOSED),
    (S.CLOSED, E.TRANSPORT_CLOSED): (S.CLOSED, S.CLOSED),
}


def test_the_expected_table_covers_every_state_and_event() -> None:
    assert set(EXPECTED) == set(itertools.product(S, E))


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
@pytest.mark.parametrize(("state", "event"), list(EXPECTED), ids=lambda x: x.name)
def test_transition(role: Role, state: ConnectionState, event: LifecycleEvent) -> None:
    expected = EXPECTED[(state, event)][0 if role is Role.CLIENT else 1]
    if isinstance(expected, ConnectionState):
        assert transition(role, state, event) is expected
        return
    assert expected is L or expected is R
    with pytest.raises(expected) as caught:
        transition(role, state, event)
    # Local and remote are apart: a RemoteProtocolError is not a LocalProtocolError, and the reverse.
    assert not isinstance(caught.value, R if expected is L else L)
    assert str(caught.value) == f"{event.value} while {state.value}"
    if expected is R:
        assert isinstance(caught.value, RemoteProtocolError) and caught.value.reason_code == 0x82


# --- the client driven through it ------------------------------------------------------------------------------


def _connack(version: int = 5, code: int = 0) -> bytes:
    return encode(ConnAck(False, code), version)


def test_client_lifecycle_through_the_table() -> None:
    c = ClientConnection("c1", version=5)
    assert c.state is S.IDLE and not c.connected
    with pytest.raises(LocalProtocolError, match="publish"):
        c.publish("a", b"x")
    c.connect()
    assert c.state is S.CONNECTING
    with pytest.raises(LocalProtocolError, match="CONNECT while connecting"):
        c.connect()
    c.receive_data(_connack(), 0.0)
    assert c.state is S.CONNECTED and c.connected
    assert isinstance(c.events()[0], ConnectionAccepted)
    with pytest.raises(LocalProtocolError, match="CONNECT while connected"):
        c.connect()
    c.disconnect()
    assert c.state is S.CLOSED
    [gone] = c.events()
    assert isinstance(gone, Disconnected) and not gone.by_peer
    c.connect()  # again, on the same session
    assert c.state is S.CONNECTING


def test_client_refused_then_closed() -> None:
    c = ClientConnection("c1", version=4)
    c.connect()
    c.receive_data(_connack(4, 5), 0.0)
    assert c.state is S.CLOSED
    assert isinstance(c.events()[0], ConnectionRefused)


def test_client_a_second_connack_is_the_brokers_protocol_error() -> None:
    c = ClientConnection("c1", version=5)
    c.connect()
    c.receive_data(_connack(), 0.0)
    c.events()
    c.data_to_send()
    c.receive_data(_connack(), 1.0)
    assert c.state is S.CLOSED
    [gone] = c.events()
    assert isinstance(gone, Disconnected) and not gone.by_peer
    assert gone.reason_code == 0x82 and "CONNACK accepting while connected" in gone.reason
    [sent] = PacketReader(5).feed(c.data_to_send())
    assert isinstance(sent, Disconnect) and sent.reason_code == 0x82


@pytest.mark.parametrize(
    ("how", "by_peer"),
    [("transport", True), ("disconnect", True), ("lost", True), ("keepalive", False), ("bad packet", False)],
)
def test_client_every_way_to_end_is_closed(how: str, by_peer: bool) -> None:
    c = ClientConnection("c1", version=5, keepalive=10)
    c.connect()
    c.receive_data(_connack(), 0.0)
    c.events()
    if how == "transport":
        c.receive_data(b"", 1.0)
    elif how == "disconnect":
        c.receive_data(encode(Disconnect(0x8B), 5), 1.0)
    elif how == "lost":
        c.connection_lost("write failed")
    elif how == "keepalive":
        c.handle_timeout(15.0)  # nothing heard for 1.5 x 10 s
    else:
        c.receive_data(encode(PingReq(), 5), 1.0)  # only clients send PINGREQ
    assert c.state is S.CLOSED
    [gone] = c.events()
    assert isinstance(gone, Disconnected) and gone.by_peer is by_peer
    c.connection_lost("again")  # ending twice is ending once
    assert c.events() == [] and c.state is S.CLOSED


def test_client_disconnect_before_connack_drops_it_unsent() -> None:
    c = ClientConnection("c1", version=5)
    c.connect()
    c.data_to_send()
    c.disconnect()
    assert c.state is S.CLOSED and c.data_to_send() == b""


# --- the server driven through it ------------------------------------------------------------------------------


def _broker() -> BrokerCore:
    return BrokerCore(BrokerConfig())


def test_server_lifecycle_through_the_table() -> None:
    core = _broker()
    conn = core.open("peer:1", 0.0)
    assert conn.state is S.IDLE and not conn.connected and not conn.closed and not conn.close_requested
    core.receive(conn, encode(Connect("s1", protocol_version=5), 5), 0.0)
    assert conn.state is S.CONNECTED and conn.connected and not conn.closed
    core.receive(conn, encode(Disconnect(), 5), 1.0)
    assert conn.state is S.CLOSED and conn.closed and conn.close_requested and not conn.connected


def test_server_second_connect_is_the_clients_protocol_error() -> None:
    core = _broker()
    conn = core.open("peer:1", 0.0)
    connect = encode(Connect("s1", protocol_version=5), 5)
    core.receive(conn, connect, 0.0)
    conn.out.clear()
    core.receive(conn, connect, 1.0)
    assert conn.state is S.CLOSED
    [sent] = PacketReader(5).feed(bytes(conn.out))
    assert isinstance(sent, Disconnect) and sent.reason_code == 0x82


def test_server_refused_connect_is_closed() -> None:
    core = _broker()
    conn = core.open("peer:1", 0.0)
    core.receive(conn, encode(Connect("", clean_start=False, protocol_version=4), 4), 0.0)
    assert conn.state is S.CLOSED and conn.close_requested
    [sent] = PacketReader(4).feed(bytes(conn.out))
    assert isinstance(sent, ConnAck) and sent.reason_code == 2


@pytest.mark.parametrize("how", ["lost", "not mqtt", "before connect", "keepalive", "net closes"])
def test_server_every_way_to_end_is_closed(how: str) -> None:
    core = _broker()
    conn = core.open("peer:1", 0.0)
    if how == "lost":
        core.connection_lost(conn, 1.0)
    elif how == "not mqtt":
        core.receive(conn, b"GET / HTTP/1.1\r\n", 1.0)
    elif how == "before connect":
        core.receive(conn, b"\x10\x01\x00", 1.0)  # a CONNECT too short to read: malformed
    elif how == "keepalive":
        core.receive(conn, encode(Connect("s1", keepalive=10, protocol_version=5), 5), 0.0)
        assert conn.keepalive_deadline() == keepalive_deadline(0.0, 10) == 15.0
        core.keepalive_expired(conn, 15.0)
    else:
        conn.close_requested = True  # the network layer gives up on a CONNECT that never came
    assert conn.state is S.CLOSED and conn.closed and conn.close_requested
    assert conn.keepalive_deadline() is None
    core.connection_lost(conn, 2.0)  # ending twice is ending once
    assert conn.state is S.CLOSED
    with pytest.raises(ValueError, match="reopened"):
        conn.close_requested = False


def test_server_in_process_client_through_the_table() -> None:
    class Sink:
        def deliver(self, *args: object) -> None: ...

        def taken(self, data: object) -> None: ...

    core = _broker()
    conn = core.local.attach("inner", Sink(), 0.0, receive_maximum=10)
    assert conn.state is S.CONNECTED
    core.local.detach(conn, 1.0)
    assert conn.state is S.CLOSED


# --- the limits both roles apply -------------------------------------------------------------------------------


def test_keepalive_deadline_is_one_and_a_half_periods() -> None:
    assert keepalive_deadline(100.0, 60) == 190.0
    assert keepalive_deadline(0.5, 1) == 2.0


def test_over_maximum_packet_size() -> None:
    assert not over_maximum_packet_size(10**6, None)
    assert not over_maximum_packet_size(100, 100)
    assert over_maximum_packet_size(101, 100)


def test_receive_maximum_exceeded() -> None:
    assert not receive_maximum_exceeded(10**6, 0)  # none announced
    assert not receive_maximum_exceeded(5, 5)
    assert receive_maximum_exceeded(6, 5)
    assert DEFAULT_RECEIVE_MAXIMUM == 65535


def test_resolve_topic_alias() -> None:
    aliases: dict[int, str] = {}
    assert resolve_topic_alias(aliases, 3, 1, "a/b") == "a/b" and aliases == {1: "a/b"}
    assert resolve_topic_alias(aliases, 3, 1, "") == "a/b"
    assert resolve_topic_alias(aliases, 3, 1, "c") == "c" and aliases == {1: "c"}  # moved
    with pytest.raises(RemoteProtocolError, match="was never set") as never:
        resolve_topic_alias(aliases, 3, 2, "")
    assert never.value.reason_code == 0x82
    for bad in (0, 4):
        with pytest.raises(RemoteProtocolError, match="over the maximum") as over:
            resolve_topic_alias(aliases, 3, bad, "x")
        assert over.value.reason_code == 0x94
    assert aliases == {1: "c"}


def test_next_topic_alias() -> None:
    assert next_topic_alias({}, 0) == 0
    assert next_topic_alias({}, 2) == 1
    assert next_topic_alias({1: "a"}, 2) == 2
    assert next_topic_alias({1: "a", 2: "b"}, 2) == 0
    assert next_topic_alias({2: "b"}, 3) == 1  # set out of order by the owner: the lowest free one
    assert next_topic_alias({"t": 1}.values(), 3) == 2  # the broker's: topic -> alias


def test_both_roles_refuse_an_unknown_alias_alike() -> None:
    """The same rule on both sides: an alias never set ends the connection with Protocol Error (0x82)."""
    c = ClientConnection("c1", version=5, topic_alias_maximum=5)
    c.connect()
    c.receive_data(_connack(), 0.0)
    c.events()
    c.receive_data(encode(Publish("", b"x", properties=Properties(topic_alias=2)), 5), 1.0)
    [gone] = c.events()
    assert isinstance(gone, Disconnected) and gone.reason_code == 0x82 and "was never set" in gone.reason

    core = BrokerCore(BrokerConfig(limits=Limits(max_topic_alias=5)))
    conn = core.open("peer:1", 0.0)
    core.receive(conn, encode(Connect("s1", protocol_version=5), 5), 0.0)
    conn.out.clear()
    core.receive(conn, encode(Publish("", b"x", properties=Properties(topic_alias=2)), 5), 1.0)
    assert conn.closed
    [sent] = PacketReader(5).feed(bytes(conn.out))
    assert isinstance(sent, Disconnect) and sent.reason_code == 0x82
