"""The life of one MQTT connection, one state machine for both roles (as h11 has one for client and server).

    state = transition(Role.CLIENT, state, LifecycleEvent.CONNECT)   # IDLE -> CONNECTING, or raises

A connection starts IDLE (the client has not sent CONNECT; the server's socket is open and a CONNECT is due),
is CONNECTING once CONNECT is on its way (the client waits for CONNACK; the server decides, within one call),
CONNECTED once a CONNACK accepts it, and CLOSED when it ends, however it ends (refused, DISCONNECT either way,
a protocol error, keep alive, the transport gone). CLOSED processes no more input; the server's network layer
closes the socket once what is queued is written. Ending events are accepted in every state (a connection may
drop at any moment, and twice is once); the others only where the table lists them.

The roles differ in two things only: who may cause an event (an event the other side causes that does not fit
the state is a RemoteProtocolError, our own a LocalProtocolError, as h11 splits them), and reuse: a client's
object lives for a session and connects again from CLOSED, a server's lives for one socket.

QoS 1/2 message flows have their own tables (flows.py); this is the connection around them.

Below the table, the limits both roles agree on in CONNECT and CONNACK and apply alike to what the other sends or
to what they send it: keep alive, topic aliases (in and out), receive maximum, maximum packet size. Compiled with
the broker (mypyc), so its per-message calls stay direct C calls.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import Enum
from typing import Final

from .errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "DEFAULT_RECEIVE_MAXIMUM",
    "ConnectionState",
    "LifecycleEvent",
    "Role",
    "keepalive_deadline",
    "next_topic_alias",
    "over_maximum_packet_size",
    "receive_maximum_exceeded",
    "resolve_topic_alias",
    "transition",
]


class Role(Enum):
    CLIENT = "client"
    SERVER = "server"


class ConnectionState(Enum):
    IDLE = "idle"  # no CONNECT yet: before connect() (client), socket open with a CONNECT due (server)
    CONNECTING = "connecting"  # CONNECT sent (client: waiting for CONNACK) or received (server: deciding)
    CONNECTED = "connected"  # a CONNACK accepted it
    CLOSED = "closed"  # ended: no more input; a client may connect() again on the same session


class LifecycleEvent(Enum):
    CONNECT = "CONNECT"  # the client sent it (the server received it)
    CONNACK_ACCEPTED = "CONNACK accepting"  # the server sent it (the client received it)
    CONNACK_REFUSED = "CONNACK refusing"
    DISCONNECT_SENT = "DISCONNECT sent"  # this side ends the connection (with DISCONNECT where it may send one)
    DISCONNECT_RECEIVED = "DISCONNECT received"  # the peer ended it
    PROTOCOL_ERROR = "protocol error"  # the peer broke the protocol: this side ends the connection
    TRANSPORT_CLOSED = "transport closed"  # the socket closed or failed


_S = ConnectionState
_E = LifecycleEvent

# (state, event) -> next state, for both roles. Pairs not listed are protocol errors.
_TRANSITIONS: Final[dict[tuple[ConnectionState, LifecycleEvent], ConnectionState]] = {
    (_S.IDLE, _E.CONNECT): _S.CONNECTING,
    (_S.CONNECTING, _E.CONNACK_ACCEPTED): _S.CONNECTED,
    (_S.CONNECTING, _E.CONNACK_REFUSED): _S.CLOSED,
    (_S.CONNECTED, _E.DISCONNECT_RECEIVED): _S.CLOSED,
    **{
        (state, event): _S.CLOSED
        for state in _S
        for event in (_E.DISCONNECT_SENT, _E.PROTOCOL_ERROR, _E.TRANSPORT_CLOSED)
    },
}
# A client's object outlives its connections: connect() again after one ended.
_CLIENT_ONLY: Final[dict[tuple[ConnectionState, LifecycleEvent], ConnectionState]] = {
    (_S.CLOSED, _E.CONNECT): _S.CONNECTING,
}
# The events each role causes itself: out of place, they are its own mistake (LocalProtocolError).
_CAUSED_BY: Final[dict[Role, frozenset[LifecycleEvent]]] = {
    Role.CLIENT: frozenset({_E.CONNECT, _E.DISCONNECT_SENT, _E.PROTOCOL_ERROR, _E.TRANSPORT_CLOSED}),
    Role.SERVER: frozenset(
        {_E.CONNACK_ACCEPTED, _E.CONNACK_REFUSED, _E.DISCONNECT_SENT, _E.PROTOCOL_ERROR, _E.TRANSPORT_CLOSED}
    ),
}


def transition(role: Role, state: ConnectionState, event: LifecycleEvent) -> ConnectionState:
    """The state after `event`; raises LocalProtocolError when this side may not cause it now, RemoteProtocolError
    (reason code 0x82, Protocol Error) when the peer may not. Pure: the caller stores the result."""
    key = (state, event)
    nxt = _TRANSITIONS.get(key)
    if nxt is None and role is Role.CLIENT:
        nxt = _CLIENT_ONLY.get(key)
    if nxt is not None:
        return nxt
    if event in _CAUSED_BY[role]:
        raise LocalProtocolError(f"{event.value} while {state.value}")
    raise RemoteProtocolError(f"{event.value} while {state.value}", reason_code=0x82)


# --- the limits both roles apply ----------------------------------------------------------------------------------

#: A Receive Maximum not stated is 65,535 (3.1.2.11.3, 3.2.2.3.3): every packet identifier may be in flight.
DEFAULT_RECEIVE_MAXIMUM: Final = 65535


def keepalive_deadline(last_received: float, keepalive: int) -> float:
    """When a peer silent since `last_received` is taken as gone: one and a half keep alive periods (3.1.2.10;
    the server closes then, the client too, its PINGREQ unanswered). `keepalive` 0 (none) is the caller's case."""
    return last_received + 1.5 * keepalive


def over_maximum_packet_size(size: int, maximum: int | None) -> bool:
    """Whether a packet of `size` bytes may not go to a peer that announced `maximum` (None: no limit but the
    protocol's). Nothing over it is sent [MQTT-3.1.2-24] [MQTT-3.2.2-15]."""
    return maximum is not None and size > maximum


def receive_maximum_exceeded(unacknowledged: int, maximum: int) -> bool:
    """Whether the peer sent more QoS 2 messages not yet released than the Receive Maximum we announced
    (`maximum`; 0: none announced, nothing to check): a protocol error, 0x93 [MQTT-3.3.4-7] [MQTT-3.3.4-9]."""
    return 0 < maximum < unacknowledged


def resolve_topic_alias(aliases: dict[int, str], maximum: int, alias: int, topic: str) -> str:
    """The topic of an incoming 5.0 PUBLISH with Topic Alias `alias` (3.3.2.3.4), on either side: a topic name
    sets the alias (or moves it) and is the topic; an empty one is the topic the alias was set to. `aliases` are
    the peer's on this connection (alias -> topic, updated here); `maximum` is the Topic Alias Maximum we
    announced. Raises RemoteProtocolError: 0x94 for an alias of 0 or over our maximum, 0x82 for one never set."""
    if not 0 < alias <= maximum:
        raise RemoteProtocolError(f"topic alias {alias} is over the maximum ({maximum})", reason_code=0x94)
    if topic:
        aliases[alias] = topic
        return topic
    known = aliases.get(alias)
    if known is None:
        raise RemoteProtocolError(f"topic alias {alias} was never set", reason_code=0x82)
    return known


def next_topic_alias(taken: Collection[int], maximum: int) -> int:
    """An alias of ours for a topic not aliased yet, towards a peer whose Topic Alias Maximum is `maximum`: the
    lowest free one (`taken`: those in use; handed out 1, 2, 3... it is len(taken) + 1), 0 when all are taken
    (the topic then goes in full; aliases are never re-pointed, so a topic keeps its alias)."""
    n = len(taken)
    if n >= maximum:
        return 0
    alias = n + 1
    if alias in taken:  # the owner set some itself, out of order
        alias = 1
        while alias in taken:
            alias += 1
    return alias
