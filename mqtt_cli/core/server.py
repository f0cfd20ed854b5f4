"""The broker's view of one network connection: its reader, its state in the protocol, its outgoing bytes.

`BrokerCore` (broker.py) drives it; the network layer only moves bytes: it feeds what it reads to
`BrokerCore.receive`, writes out what accumulates in `out`, and closes the socket once `close_requested` is set
and `out` is empty. Where it stands (`state`) follows the table shared with the client (lifecycle.py); `connected`,
`closed` and `close_requested` are views of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .lifecycle import ConnectionState, LifecycleEvent, Role, keepalive_deadline, transition
from .reader import PacketReader

if TYPE_CHECKING:
    from .acl import AclView
    from .aliases import OutgoingAliases
    from .attachment import LocalSink
    from .auth import AuthPolicy, CertificateIdentity
    from .session import Session

__all__ = ["ServerConnection"]

_CONNECTED: Final = ConnectionState.CONNECTED
_CLOSED: Final = ConnectionState.CLOSED
_SERVER: Final = Role.SERVER


class ServerConnection:
    __slots__ = (
        "acl",
        "aliases_in",
        "aliases_out",
        "backlog",
        "backlog_at",
        "bridge",
        "certificate",
        "client_id",
        "client_max_packet_size",
        "context",
        "keepalive",
        "last_received",
        "login_failed",
        "opened_at",
        "out",
        "peer",
        "policy",
        "reader",
        "receive_maximum_announced",
        "retain_available",
        "session",
        "sink",
        "state",
        "topic_alias_maximum",
        "username",
        "version",
        "versions",
        "wants_drain",
    )

    def __init__(
        self,
        peer: str,
        now: float,
        max_packet_size: int | None,
        policy: AuthPolicy | None = None,
        certificate: CertificateIdentity | None = None,
        versions: frozenset[int] | None = None,
    ) -> None:
        self.peer = peer  # "host:port", for logs
        self.versions = versions  # protocol levels its listener allows (3, 4, 5); None: all
        self.policy = policy  # its listener's authentication and ACL (None: anyone may do anything)
        self.certificate = certificate  # the verified TLS client certificate, if any
        self.username: str | None = None  # as authenticated (the certificate's name with use_identity_as_username)
        self.acl: AclView | None = None  # what it may read and write, once connected (None: everything)
        self.login_failed = False  # refused for its credentials: the network layer delays the CONNACK
        self.reader = PacketReader(None, max_packet_size=max_packet_size, plain_acks=True)
        # Packets of the last read not handled yet (BrokerCore.receive with a batch), from `backlog_at` on: the
        # network layer sends what the ones before produced, then calls BrokerCore.receive_rest.
        self.backlog: list[Any] | None = None
        self.backlog_at = 0
        self.receive_maximum_announced = 0  # the Receive Maximum its CONNACK announced (0: none)
        self.retain_available = True  # as its CONNACK said
        self.version = 4  # until the CONNECT says otherwise
        self.client_id: str | None = None
        self.bridge = False  # mosquitto's bridge flag in a 3.x CONNECT: no echo, retain as published
        self.session: Session | None = None
        self.state = ConnectionState.IDLE  # moved by `advance` only
        self.keepalive = 0  # seconds, as granted
        self.last_received = now
        self.opened_at = now  # a CONNECT is due within the network layer's timeout from here
        self.out = bytearray()  # bytes waiting for the writer
        self.wants_drain = False  # deliveries wait for `out` to drain below the broker's limit
        self.aliases_in: dict[int, str] | None = None  # 5.0 topic aliases set by the client (made at the first)
        # Ours towards a 5.0 client that allows them (Topic Alias Maximum in CONNECT). None when it does not, so
        # that deliveries to other clients do not look at it.
        self.aliases_out: OutgoingAliases | None = None
        self.topic_alias_maximum = 0  # ours, as announced in CONNACK
        self.client_max_packet_size: int | None = None  # 5.0: the client's Maximum Packet Size
        self.context: Any = None  # the network layer's own bookkeeping
        # An in-process client (BrokerCore.attach: an embedded bridge's local side): deliveries go to its
        # `deliver`, held acknowledgements to its `taken`, and no bytes are written. None for a network connection.
        self.sink: LocalSink | None = None  # an in-process client's (core/attachment.py)

    def advance(self, event: LifecycleEvent) -> None:
        """Moves `state` by the shared table; raises (state unchanged) where `event` does not fit it."""
        self.state = transition(_SERVER, self.state, event)

    @property
    def connected(self) -> bool:
        """CONNECT accepted, not closed since."""
        return self.state is _CONNECTED

    @property
    def closed(self) -> bool:
        """No more input is processed."""
        return self.state is _CLOSED

    @property
    def close_requested(self) -> bool:
        """The network layer closes the socket once `out` is written (whenever the connection is closed)."""
        return self.state is _CLOSED

    @close_requested.setter
    def close_requested(self, value: bool) -> None:
        # The network layer ending a connection the core has not (a CONNECT that never came): closed here too.
        if not value:
            raise ValueError("a closed connection cannot be reopened")
        self.state = transition(_SERVER, self.state, LifecycleEvent.DISCONNECT_SENT)

    def keepalive_deadline(self) -> float | None:
        """When the connection is to be closed for silence (1.5 times the keep alive, 3.1.2.10)."""
        if not self.keepalive or self.state is _CLOSED:
            return None
        return keepalive_deadline(self.last_received, self.keepalive)

    def __repr__(self) -> str:
        return f"<ServerConnection {self.client_id!r} from {self.peer}>"
