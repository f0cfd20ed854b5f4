"""What a client connection is to be: `ClientSettings`, without trio (the one-shot fast path, net/blocking.py,
uses them as net/client.py does)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mqtt_cli.core.client import ClientConnection
from mqtt_cli.core.client_options import Tracer
from mqtt_cli.core.packets import Will
from mqtt_cli.core.properties import EMPTY_PROPERTIES, Properties
from mqtt_cli.core.records import record

from .endpoints import Endpoint

if TYPE_CHECKING:
    import ssl

__all__ = ["ClientSettings", "new_connection", "random_client_id", "version_name"]


# A mutable record rather than a dataclass: dataclasses (and the inspect module it loads) and the class's
# generated methods cost a one-shot client several ms.
@record(frozen=False)
class ClientSettings:
    endpoint: Endpoint = Endpoint()  # (a frozen record: one instance can be every settings' default)
    ssl_context: ssl.SSLContext | None = None
    client_id: str = ""
    version: int | None = None  # 3, 4 or 5; None: 5, falling back to 3.1.1 when the broker refuses 5.0
    keepalive: int = 60
    clean_start: bool = True
    session_expiry: int | None = None  # 5.0; None: not sent (the session ends with the connection)
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = EMPTY_PROPERTIES  # further CONNECT properties (5.0): user properties, ...
    connect_timeout: float = 10.0
    # A client certificate is in ssl_context: a TLS connection reset in answer to CONNECT is then not taken for
    # a broker wanting one (TLS 1.3 says so in an alert after the handshake, often lost in the reset).
    tls_client_cert: bool = False
    reconnect: bool = False
    reconnect_delay: float = 0.25  # first backoff; doubles up to reconnect_max_delay, with jitter
    reconnect_max_delay: float = 5.0
    reconnect_timeout: float = 300.0  # give up after this long without a connection
    ack_timeout: float = 60.0  # no acknowledgement for this long while waiting for one: give up
    receive_maximum: int = 65535
    maximum_packet_size: int | None = None  # 5.0: the largest packet we take (None: not said, the protocol's)
    disconnect_properties: Properties = EMPTY_PROPERTIES  # 5.0: what our DISCONNECT carries
    max_inflight: int = 1024  # our cap on unacknowledged QoS 1/2 messages (3.x brokers state none)
    topic_alias_maximum: int = 64
    auto_topic_aliases: bool = False
    message_buffer: int = 64  # reads (each one list of messages) waiting for the owner before the reader waits
    # For the bridge:
    alternates: tuple[Endpoint, ...] = ()  # further addresses, tried in turn when the current one fails
    # False: `endpoint` is the main address (mosquitto's round_robin false): while on an alternate, the main one is
    # tried every `primary_retry` seconds and, once it answers, the client drains what is in flight and moves back.
    round_robin: bool = True
    primary_retry: float = 5.0
    drain_timeout: float = 10.0  # at most this long waiting for acknowledgements before moving back
    # Called when the main address answers again while on an alternate: (it, messages in flight to drain first).
    on_primary_back: Callable[[Endpoint, int], None] | None = None
    retry_first: bool = False  # with reconnect: keep trying the first connection too (open_client returns at once)
    manual_ack: bool = False  # QoS 1/2 messages received are acknowledged by Client.acknowledge()
    owner_ids: bool = False  # the owner names its QoS 1/2 messages' packet identifiers (ClientConnection's)
    bridge_flag: bool = False  # 3.x: mosquitto's bridge flag in CONNECT
    # Called synchronously with every batch of events, before anything else sees them (no await in between, so
    # nothing is written to the network first), after every read even when it produced none; when set, messages
    # go to it instead of `messages`.
    observer: Callable[[list[Any]], None] | None = None
    # Called synchronously when a QoS 2 message gets its packet identifier, before its bytes can be written:
    # (packet id, topic, payload, retain, properties, context). The bridge journals its QoS 2 forwards there.
    on_qos2_hand_over: Callable[[int, str, bytes, bool, Properties, Any], None] | None = None
    # Called when a reconnect attempt failed: (what went wrong, seconds until the next attempt).
    on_retry: Callable[[str, float], None] | None = None
    # The reader reads on only while this says True (the bridge: while the other side keeps up with QoS 0).
    read_gate: Callable[[], bool] | None = None
    # Seconds the reader may wait after a busy read before reading again (0: never); see _reader.
    linger: float = 0.0
    # The clients' -d: a line for every packet sent and received, in libmosquitto's words (net/trace.py).
    trace: Callable[[str], None] | None = None


def new_connection(s: ClientSettings) -> ClientConnection:
    """The sans-IO connection for `s`, for either driver (net/client.py with trio, net/blocking.py without)."""
    props = s.properties
    if s.session_expiry is not None:
        props = props.replace(session_expiry_interval=s.session_expiry)
    # With reconnect on 3.x the session must outlive each connection: clean session 0 from the start.
    return ClientConnection(
        s.client_id,
        version=s.version or 5,
        keepalive=s.keepalive,
        clean_start=s.clean_start,
        username=s.username,
        password=s.password,
        will=s.will,
        properties=props,
        receive_maximum=s.receive_maximum,
        maximum_packet_size=s.maximum_packet_size,
        topic_alias_maximum=s.topic_alias_maximum,
        max_inflight=s.max_inflight,
        auto_topic_aliases=s.auto_topic_aliases,
        manual_ack=s.manual_ack,
        owner_ids=s.owner_ids,
        bridge=s.bridge_flag,
        trace=_packet_trace(s.trace) if s.trace is not None else None,
    )


def _packet_trace(write: Callable[[str], None]) -> Tracer:
    from .trace import PacketTrace  # (only with -d: a one-shot client without it does not load it)

    return PacketTrace(write)


def version_name(version: int) -> str:
    return {3: "3.1", 4: "3.1.1", 5: "5.0"}[version]


_ID_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"


def random_client_id(prefix: str = "mqtt-cli-") -> str:
    """`prefix` and 10 random letters and digits. os.urandom rather than the random module: one-shot clients
    then load neither it nor what it brings (math, bisect, hashes); the slight bias of `% 36` does not matter."""
    return prefix + "".join(_ID_CHARS[b % 36] for b in os.urandom(10))
