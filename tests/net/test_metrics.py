"""The metrics endpoint (net/metrics.py) over real loopback sockets: its HTTP answers, readiness, and figures that
follow what the broker did (our client publishing through a BrokerServer in this process)."""

from __future__ import annotations

import re

import trio

from mqtt_cli.core.broker import BrokerCore
from mqtt_cli.core.config import MetricsAddress
from mqtt_cli.core.packets import Subscription
from mqtt_cli.net.client import ClientSettings, open_client
from mqtt_cli.net.metrics import MetricsSource, bind_metrics, open_metrics, process_figures
from mqtt_cli.net.server import BrokerServer, ServeOptions, ServerError, parse_listen_url
from mqtt_cli.net.transports import Endpoint


async def http(address: MetricsAddress, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Sends `request` as it is; the status, headers and body of the answer (read to the close)."""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream(address.host, address.port)
        async with stream:
            await stream.send_all(request)
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


def get(path: str, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()


def sample(text: str, name: str, labels: str = "") -> float:
    """The value of one sample in exposition text (labels as written, e.g. `qos="1"`)."""
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)\n"
    found = re.search("(?m)^" + pattern, text)
    assert found is not None, f"no {name}{{{labels}}} in:\n{text}"
    return float(found.group(1))


async def serve_with_metrics(nursery: trio.Nursery) -> tuple[BrokerServer, MetricsAddress, trio.Event]:
    """A broker on 127.0.0.1 port 0 with its metrics endpoint, run in `nursery` until the event is set."""
    options = ServeOptions(listeners=[parse_listen_url("mqtt://127.0.0.1:0")])
    options.metrics = MetricsAddress("127.0.0.1", 0)
    server = BrokerServer(options)
    stop = trio.Event()
    await nursery.start(server.run, stop)
    assert server.metrics_bound is not None
    return server, server.metrics_bound, stop


async def test_answers_and_readiness() -> None:
    core = BrokerCore()
    ready = False
    source = MetricsSource(lambda: core, lambda: ready, list)
    sockets = await bind_metrics(MetricsAddress("127.0.0.1", 0))
    async with open_metrics(sockets, source) as where:
        assert where is not None and where.port != 0
        status, _, body = await http(where, get("/healthz"))
        assert (status, body) == (200, b"ok\n")
        status, _, body = await http(where, get("/readyz"))
        assert status == 503 and b"not ready" in body
        ready = True
        assert (await http(where, get("/readyz")))[0] == 200
        status, headers, _ = await http(where, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        assert (status, headers["allow"]) == (405, "GET, HEAD")
        assert (await http(where, get("/nothing")))[0] == 404
        assert (await http(where, b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00\r\n\r\n"))[0] == 400
        assert (await http(where, get("/metrics", "X-Big: " + "a" * 10000)))[0] == 431
        status, headers, body = await http(where, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200 and body == b"" and int(headers["content-length"]) > 1000
        status, headers, body = await http(where, get("/metrics"))
        assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert headers["connection"] == "close"
        text = body.decode()
        assert "# TYPE mqtt_broker_publish_received_total counter" in text
        assert sample(text, "process_open_fds") >= 3
        assert not text.endswith("# EOF\n")
        accept = "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        status, headers, body = await http(where, get("/metrics", accept))
        assert headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
        text = body.decode()
        assert text.endswith("# EOF\n")
        assert "# TYPE mqtt_broker_publish_received counter" in text  # OpenMetrics: the family, no _total
        assert "# UNIT mqtt_broker_sent_bytes bytes" in text
        assert 'mqtt_broker_publish_received_total{qos="0"} 0\n' in text


async def test_figures_follow_the_traffic() -> None:
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            server, where, stop = await serve_with_metrics(nursery)
            mqtt = server.bound[0]
            endpoint = Endpoint("mqtt", mqtt.host, mqtt.port)
            async with open_client(ClientSettings(endpoint=endpoint, client_id="sub", version=5)) as sub:
                await sub.subscribe([Subscription("m/#", 1)])
                async with open_client(ClientSettings(endpoint=endpoint, client_id="pub", version=4)) as pub:
                    for _ in range(7):
                        await pub.publish("m/x", b"12345", qos=1)
                    await pub.publish("nobody/here", b"x", qos=0)
                    for _ in range(7):
                        await sub.messages.receive()
                    text = (await http(where, get("/metrics")))[2].decode()
            listener = mqtt.url
            assert sample(text, "mqtt_broker_publish_received_total", 'qos="1"') == 7
            assert sample(text, "mqtt_broker_publish_received_payload_bytes_total", 'qos="1"') == 35
            assert sample(text, "mqtt_broker_publish_sent_total", 'qos="1"') == 7
            assert sample(text, "mqtt_broker_messages_dropped_total", 'reason="no_subscriber"') == 1
            assert sample(text, "mqtt_broker_clients_connected", f'listener="{listener}",protocol_version="5.0"') == 1
            assert sample(text, "mqtt_broker_clients_connected", f'listener="{listener}",protocol_version="3.1.1"') == 1
            assert sample(text, "mqtt_broker_connects_accepted_total") == 2
            assert sample(text, "mqtt_broker_subscriptions") == 1
            assert sample(text, "mqtt_broker_sessions") == 2
            stop.set()


async def test_metrics_port_in_use_stops_the_start() -> None:
    with trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        options = ServeOptions(listeners=[parse_listen_url("mqtt://127.0.0.1:0")])
        options.metrics = MetricsAddress("127.0.0.1", port)
        server = BrokerServer(options)
        with trio.fail_after(10):
            try:
                await server.run(trio.Event())
            except ServerError as exc:
                assert f"metrics endpoint 127.0.0.1:{port}" in str(exc)
            else:
                raise AssertionError("the server started on a port in use")
        assert server.bound == []


def test_process_figures_are_this_process() -> None:
    import os
    import time

    p = process_figures()
    assert p.resident_memory_bytes > 1_000_000
    assert p.open_fds == len(os.listdir("/proc/self/fd"))  # both count the descriptor listdir holds
    with open("/proc/self/stat", "rb"):
        assert process_figures().open_fds == p.open_fds + 1
    assert 0 < p.start_time_seconds <= time.time()
    assert p.cpu_seconds > 0


async def test_reload_keeps_the_endpoint() -> None:
    listeners = [parse_listen_url("mqtt://127.0.0.1:0")]
    server = BrokerServer(ServeOptions(listeners=listeners, metrics=MetricsAddress("127.0.0.1", 0)))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            stop = trio.Event()
            await nursery.start(server.run, stop)
            where = server.metrics_bound
            assert where is not None
            changes = await server.reload(ServeOptions(listeners=listeners, metrics=MetricsAddress("127.0.0.1", 1)))
            assert "metrics.listen changed: takes effect at the next start" in changes
            assert (await http(where, get("/readyz")))[0] == 200
            stop.set()


async def test_not_ready_while_shutting_down() -> None:
    """From the moment a shutdown starts (SIGTERM), /readyz answers 503, while the endpoint still serves: here a
    subscriber that reads nothing keeps the shutdown in its drain (DRAIN_ON_SHUTDOWN) with output still pending."""
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            server, where, stop = await serve_with_metrics(nursery)
            mqtt = server.bound[0]
            # A 3.1.1 subscriber to "big" with a small receive buffer that never reads.
            stuck = trio.socket.socket()
            stuck.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
            await stuck.connect((mqtt.host, mqtt.port))
            await stuck.send(b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x02st")
            await stuck.send(b"\x82\x08\x00\x01\x00\x03big\x00")
            with trio.fail_after(5):
                got = b""
                while len(got) < 9:  # CONNACK and SUBACK
                    got += await stuck.recv(64)
            endpoint = Endpoint("mqtt", mqtt.host, mqtt.port)
            async with open_client(ClientSettings(endpoint=endpoint, client_id="pub", version=4)) as pub:
                for _ in range(16):  # 4 MiB the stuck subscriber cannot take: the broker holds it as output
                    await pub.publish("big", b"x" * 262144, qos=1)
            assert (await http(where, get("/readyz")))[0] == 200
            stop.set()
            await trio.sleep(0.2)  # inside the shutdown's drain, which lasts until DRAIN_ON_SHUTDOWN
            status, _, body = await http(where, get("/readyz"))
            assert (status, body) == (503, b"not ready: starting or shutting down\n")
            stuck.close()
