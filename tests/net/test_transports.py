"""Broker URLs, TLS contexts, and every transport against a real mosquitto (TCP, TLS, WebSocket, Unix)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trio

from mqtt_cli.core.packets import Subscription
from mqtt_cli.net.client import ClientSettings, open_client
from mqtt_cli.net.errors import ConnectFailed, TLSFailed
from mqtt_cli.net.transports import Endpoint, TLSOptions, make_ssl_context, open_transport, parse_url

from ..brokers import Broker, free_port


@pytest.mark.parametrize(
    ("url", "endpoint", "user", "password", "topic"),
    [
        ("mqtt://broker", Endpoint("mqtt", "broker", 1883), None, None, None),
        ("mqtts://u:p%40ss@broker:9000/a/b", Endpoint("mqtts", "broker", 9000, tls=True), "u", "p@ss", "a/b"),
        ("mqtt://[::1]:1884/", Endpoint("mqtt", "::1", 1884), None, None, None),
        ("ws://h/mqtt", Endpoint("ws", "h", 80, "/mqtt"), None, None, None),
        ("wss://u@h:8443/ws?x=1", Endpoint("wss", "h", 8443, "/ws?x=1", True), "u", None, None),
        ("unix:///run/m.sock", Endpoint("unix", "", 0, "/run/m.sock"), None, None, None),
    ],
)
def test_parse_url(url: str, endpoint: Endpoint, user: str | None, password: str | None, topic: str | None) -> None:
    parsed = parse_url(url)
    assert (parsed.endpoint, parsed.username, parsed.password, parsed.topic) == (endpoint, user, password, topic)


@pytest.mark.parametrize(
    ("url", "message"),
    [("http://x", "scheme"), ("mqtt://x:99999", "port"), ("mqtt://:1883", "host"), ("unix://", "socket path")],
)
def test_parse_url_errors_say_what(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url)


def test_ssl_context_options(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--cafile .*nope\.pem: No such file or directory"):
        make_ssl_context(TLSOptions(cafile=str(tmp_path / "nope.pem")))
    with pytest.raises(ValueError, match=r"--cafile .*: Is a directory"):
        make_ssl_context(TLSOptions(cafile=str(tmp_path)))
    with pytest.raises(ValueError, match=r"tlsv1\.2 or tlsv1\.3"):
        make_ssl_context(TLSOptions(version="sslv3"))
    ctx = make_ssl_context(TLSOptions(insecure=True, version="tlsv1.3", alpn=("mqtt",)))
    assert ctx.verify_mode is ssl.CERT_NONE and not ctx.check_hostname
    assert ctx.minimum_version is ssl.TLSVersion.TLSv1_3


async def roundtrip(endpoint: Endpoint, ctx: ssl.SSLContext | None = None, version: int | None = None) -> int:
    with trio.fail_after(10):
        async with open_client(
            ClientSettings(endpoint=endpoint, ssl_context=ctx, version=version, client_id="rt")
        ) as c:
            await c.subscribe([Subscription("rt/#", 1)])
            await c.publish("rt/x", b"\x00\x01payload\xff", 1)
            await c.wait_acknowledged()
            message = await c.messages.receive()
            assert message.payload == b"\x00\x01payload\xff"
            return c.version


async def test_tcp_websocket_and_unix(mosquitto: Broker) -> None:
    assert await roundtrip(Endpoint("mqtt", mosquitto.host, mosquitto.port)) == 5
    assert mosquitto.ws_port and mosquitto.unix_path
    assert await roundtrip(Endpoint("ws", mosquitto.host, mosquitto.ws_port, "/mqtt"), version=4) == 4
    assert await roundtrip(Endpoint("unix", "", 0, mosquitto.unix_path), version=3) == 3


async def test_tls(mosquitto_tls: Broker) -> None:
    workdir = mosquitto_tls.workdir
    endpoint = Endpoint("mqtts", "localhost", mosquitto_tls.port, tls=True)
    ctx = make_ssl_context(TLSOptions(cafile=str(workdir / "ca.pem")))
    assert await roundtrip(endpoint, ctx) == 5
    with_cert = make_ssl_context(
        TLSOptions(cafile=str(workdir / "ca.pem"), cert=str(workdir / "client.pem"), key=str(workdir / "client.key"))
    )
    assert await roundtrip(endpoint, with_cert, version=4) == 4
    with pytest.raises(TLSFailed, match=r"TLS handshake .* failed: .*certificate"):
        await roundtrip(endpoint, make_ssl_context(TLSOptions(cafile=str(workdir / "other-ca.pem"))))
    # By IP address the certificate's name (localhost, 127.0.0.1) matches; a wrong name does not.
    wrong_name = Endpoint("mqtts", "127.0.0.2", mosquitto_tls.port, tls=True)
    with pytest.raises((TLSFailed, ConnectFailed)):
        await roundtrip(wrong_name, ctx)
    insecure = make_ssl_context(TLSOptions(insecure=True))
    assert await roundtrip(Endpoint("mqtts", "127.0.0.1", mosquitto_tls.port, tls=True), insecure) == 5


async def test_tls_to_a_plain_listener_is_a_tls_failure(mosquitto: Broker) -> None:
    ctx = make_ssl_context(TLSOptions(insecure=True))
    with trio.fail_after(10), pytest.raises(TLSFailed):
        await open_transport(Endpoint("mqtts", mosquitto.host, mosquitto.port, tls=True), ctx)


async def test_nothing_listening_is_connect_failed() -> None:
    with trio.fail_after(10), pytest.raises(ConnectFailed, match="refused"):
        await open_transport(Endpoint("mqtt", "127.0.0.1", free_port()))


async def test_websocket_upgrade_refused(mosquitto: Broker) -> None:
    # A plain MQTT listener does not speak HTTP: it closes, which is a failed upgrade.
    with trio.fail_after(10), pytest.raises(ConnectFailed, match="WebSocket"):
        await open_transport(Endpoint("ws", mosquitto.host, mosquitto.port, "/mqtt"))
