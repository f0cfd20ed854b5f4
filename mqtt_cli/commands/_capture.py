"""The options that decide what decoding a capture looks at, shared by `mqtt dump` and `mqtt analyze ingest`."""

from typing import Annotated

import typer

from mqtt_cli.commands import fail
from mqtt_cli.exit_codes import EXIT_USAGE

DEFAULT_PORTS = (1883,)
DEFAULT_TLS_PORTS = (8883,)
CAPTURE_VERSIONS = {"3": 3, "3.1": 3, "31": 3, "4": 4, "3.1.1": 4, "311": 4, "5": 5, "5.0": 5}

Ports = Annotated[
    list[int] | None,
    typer.Option("--port", "-p", help="MQTT port (repeatable). Default: 1883.", show_default=False),
]
TlsPorts = Annotated[
    list[int] | None,
    typer.Option(
        "--tls-port",
        help="Port of MQTT over TLS, reported as encrypted (repeatable). Default: 8883, unless given as --port.",
        show_default=False,
    ),
]
Detect = Annotated[
    bool, typer.Option("--detect/--no-detect", help="Also decode connections on any port that begin with CONNECT.")
]
ProtocolVersion = Annotated[
    str | None,
    typer.Option(
        "--protocol-version", help="Protocol of streams without a CONNECT: 3.1, 3.1.1 or 5.", show_default=False
    ),
]


def checked(protocol_version: str | None, ports: list[int] | None, tls_ports: list[int] | None) -> int | None:
    """The protocol level --protocol-version asks for (None: not given); a bad version or port exits with 2."""
    version = None
    if protocol_version is not None:
        version = CAPTURE_VERSIONS.get(protocol_version.strip())
        if version is None:
            fail(f"--protocol-version {protocol_version!r}: use 31, 311 or 5 (or 3.1, 3.1.1, 5.0)", EXIT_USAGE)
    for number in (*(ports or ()), *(tls_ports or ())):
        if not 0 < number < 65536:
            fail(f"port {number} is outside 1..65535", EXIT_USAGE)
    both = sorted(set(ports or ()) & set(tls_ports or ()))
    if both:
        fail(f"port {both[0]} given as both --port and --tls-port: choose one", EXIT_USAGE)
    return version


def capture_ports(ports: list[int] | None, tls_ports: list[int] | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(MQTT ports, TLS ports) to decode with. A port the user names with --port is plain MQTT even when it is
    a default TLS port (`-p 8883`: someone runs MQTT without TLS there); --tls-port given explicitly is kept."""
    plain = tuple(ports) if ports else DEFAULT_PORTS
    if tls_ports is not None:
        return plain, tuple(tls_ports)
    return plain, tuple(p for p in DEFAULT_TLS_PORTS if p not in plain)
