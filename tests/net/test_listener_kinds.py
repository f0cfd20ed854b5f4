"""Each kind of listener is one entry of core.config.Scheme; everything else about it follows from that entry's facts
(transport, TLS, WebSocket, default port), so no code outside the registry names a kind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mqtt_cli.core.config import SCHEME_NAMES, Scheme, Transport, parse_listener_url, translate_mosquitto
from mqtt_cli.net.listeners import Listener, parse_listen_url

PACKAGE = Path(__file__).resolve().parents[2] / "mqtt_cli"


@pytest.mark.parametrize("scheme", list(Scheme), ids=str)
def test_every_kind_parses_and_prints_its_urls(scheme: Scheme) -> None:
    if scheme.transport is Transport.UNIX:
        url = f"{scheme}:///run/mqtt.sock"
        assert parse_listen_url(url) == Listener(scheme, "", 0, "/run/mqtt.sock")
    else:
        address = parse_listener_url(f"{scheme}://h")
        assert (address.host, address.port) == ("h", scheme.default_port)
        url = f"{scheme}://h:1" + ("/mqtt" if scheme.websocket else "")
        assert parse_listen_url(url).path == ("/mqtt" if scheme.websocket else None)
    assert parse_listen_url(url).url == url
    for name in (scheme.value, *scheme.aliases):
        assert SCHEME_NAMES[name] is scheme


def test_an_unknown_scheme_is_told_every_kind() -> None:
    with pytest.raises(ValueError, match=r"the scheme must be mqtt, mqtts, ws, wss or unix$") as info:
        parse_listener_url("http://h")
    assert all(f" {s.value}" in str(info.value) for s in Scheme)


@pytest.mark.parametrize(
    ("lines", "scheme"),
    [
        ("listener 1884\n", Scheme.MQTT),
        ("listener 8883\ncertfile c\nkeyfile k\n", Scheme.MQTTS),
        ("listener 9001\nprotocol websockets\n", Scheme.WS),
        ("listener 9002\nprotocol websockets\ncertfile c\nkeyfile k\n", Scheme.WSS),
        ("listener 0 /run/m.sock\n", Scheme.UNIX),
    ],
)
def test_a_mosquitto_listener_gets_the_kind_its_options_describe(lines: str, scheme: Scheme) -> None:
    result = translate_mosquitto(lines, "m.conf")
    assert [lst.scheme for lst in result.settings.listener] == [scheme]


def test_no_code_outside_the_registry_names_a_kind() -> None:
    """A branch on `Scheme.WSS` would be a second description of that kind: code asks the kind's facts instead."""
    named = re.compile(r"\bScheme\.(" + "|".join(s.name for s in Scheme) + r")\b")
    found = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in PACKAGE.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if named.search(line)
    ]
    assert found == []
