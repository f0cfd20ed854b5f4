"""What can go wrong for a client, one class per documented exit code (docs/exit-codes.md).

The net layer raises them; commands turn them into `mqtt: error: ...` and the exit code they carry.
"""

from __future__ import annotations

__all__ = [
    "BrokerRefused",
    "ClientError",
    "ConnectFailed",
    "ConnectionLost",
    "PublishFailed",
    "SubscribeRefused",
    "TLSFailed",
]


class ClientError(Exception):
    """Base class; `exit_code` is what a client command exits with."""

    exit_code = 1


class ConnectFailed(ClientError):
    """No connection: DNS, refused, unreachable, no CONNACK in time."""

    exit_code = 3


class TLSFailed(ClientError):
    """The TLS handshake failed (certificate, version, ALPN)."""

    exit_code = 4


class BrokerRefused(ClientError):
    """CONNACK with a failure code."""

    exit_code = 5

    def __init__(self, message: str, reason_code: int = 0x80, *, tls_reset: bool = False) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.tls_reset = tls_reset  # a TLS connection reset without a word in answer to CONNECT (reason_code -1)


class SubscribeRefused(ClientError):
    exit_code = 6


class PublishFailed(ClientError):
    """A publish was refused, or not every message was acknowledged."""

    exit_code = 7


class ConnectionLost(ClientError):
    """The connection ended before the work was done."""

    exit_code = 8
