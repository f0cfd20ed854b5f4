"""What can go wrong for a client, one class per documented exit code (docs/exit-codes.md).

The net layer raises them; commands turn them into `mqtt: error: ...` and the exit code they carry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mqtt_cli.exit_codes import (
    EXIT_BROKER_REFUSED,
    EXIT_CONNECT_FAILED,
    EXIT_CONNECTION_LOST,
    EXIT_FAILURE,
    EXIT_PUBLISH_FAILED,
    EXIT_SUBSCRIBE_REFUSED,
    EXIT_TLS_FAILED,
)

if TYPE_CHECKING:
    from mqtt_cli.core.events import ConnectionRefused, Disconnected

    from .endpoints import Endpoint

__all__ = [
    "BrokerRefused",
    "ClientError",
    "ConnectFailed",
    "ConnectionLost",
    "PublishFailed",
    "SubscribeRefused",
    "TLSFailed",
    "refused_error",
]


class ClientError(Exception):
    """Base class; `exit_code` is what a client command exits with."""

    exit_code = EXIT_FAILURE


class ConnectFailed(ClientError):
    """No connection: DNS, refused, unreachable, no CONNACK in time."""

    exit_code = EXIT_CONNECT_FAILED


class TLSFailed(ClientError):
    """The TLS handshake failed (certificate, version, ALPN)."""

    exit_code = EXIT_TLS_FAILED


class BrokerRefused(ClientError):
    """CONNACK with a failure code."""

    exit_code = EXIT_BROKER_REFUSED

    def __init__(self, message: str, reason_code: int = 0x80, *, tls_reset: bool = False) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.tls_reset = tls_reset  # a TLS connection reset without a word in answer to CONNECT (reason_code -1)


class SubscribeRefused(ClientError):
    exit_code = EXIT_SUBSCRIBE_REFUSED


class PublishFailed(ClientError):
    """A publish was refused, or not every message was acknowledged."""

    exit_code = EXIT_PUBLISH_FAILED


class ConnectionLost(ClientError):
    """The connection ended before the work was done."""

    exit_code = EXIT_CONNECTION_LOST



def refused_error(
    endpoint: Endpoint, version_text: str, event: ConnectionRefused | Disconnected, received: int, reset: bool
) -> BrokerRefused:
    """The error for a CONNECT answered with a refusal or a close: one wording for the trio client
    (net/client.py) and the one-shot fast path (net/blocking.py)."""
    from mqtt_cli.core.events import ConnectionRefused

    if isinstance(event, ConnectionRefused):
        return BrokerRefused(
            f"{endpoint} refused the connection (MQTT {version_text}): {event.reason}", event.reason_code
        )
    # Nothing at all in answer, on a plain connection: most often a TLS port.
    plain_tcp = not endpoint.tls and endpoint.scheme != "unix"
    hint = "; is it a TLS port? use mqtts:// or --cafile" if not received and plain_tcp else ""
    return BrokerRefused(
        f"{endpoint} closed the connection in answer to CONNECT (MQTT {version_text}): {event.reason}{hint}",
        -1,
        tls_reset=reset and not received and endpoint.tls,
    )
