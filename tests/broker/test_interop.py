"""Our broker against real clients (Debian's mosquitto_pub / mosquitto_sub, paho-mqtt), and the same scenarios
against Debian's mosquitto broker: what the clients see must be the same (differences the spec allows are
named where they are tolerated)."""

from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import threading
import time
import uuid
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from tests.brokers import Broker

VERSIONS = {"3.1": "mqttv31", "3.1.1": "mqttv311", "5.0": "mqttv5"}
DEADLINE = 15.0


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Sub:
    """mosquitto_sub in the background; the constructor returns once the broker acknowledged the subscription."""

    def __init__(
        self, broker: Broker, *args: str, version: str = "mqttv311", port: int | None = None, ready: str = "SUBACK"
    ) -> None:
        cmd = [
            "stdbuf",
            "-oL",
            "mosquitto_sub",
            "-h",
            broker.host,
            "-p",
            str(port or broker.port),
            "-V",
            version,
            "-d",
            *args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.output: list[str] = []
        self.debug: list[str] = []
        self._wait_for(lambda line: f"received {ready}" in line)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def _take(self, timeout: float) -> str | None:
        line = self.lines.get(timeout=timeout)
        if line is not None:
            if line.startswith(("Client ", "Subscribed (mid")) or line == "Timed out":
                self.debug.append(line)
            else:
                self.output.append(line)
        return line

    def _wait_for(self, found: Any) -> None:
        deadline = time.monotonic() + DEADLINE
        while True:
            line = self._take(max(0.01, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"mosquitto_sub ended early: {self.output + self.debug}")
            if found(line):
                return

    def result(self) -> list[str]:
        """Everything printed (debug lines apart) once the process ends by itself (-C, -W)."""
        self.proc.wait(timeout=DEADLINE)
        while self._take(DEADLINE) is not None:
            pass
        return self.output

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.proc.send_signal(sig)
        self.proc.wait(timeout=5)


def pub(broker: Broker, *args: str, version: str = "mqttv311", port: int | None = None) -> None:
    cmd = ["mosquitto_pub", "-h", broker.host, "-p", str(port or broker.port), "-V", version, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr


# --- mosquitto clients ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS.values())
def test_qos_matrix(any_broker: Broker, version: str) -> None:
    """Every publish QoS to every subscription QoS: delivered at the minimum of the two."""
    topic = uid("qos")
    subs = {q: Sub(any_broker, "-t", f"{topic}/#", "-q", str(q), "-C", "3", "-F", "%t %p %q %r", version=version)
            for q in (0, 1, 2)}  # fmt: skip
    for q in (0, 1, 2):
        pub(any_broker, "-t", f"{topic}/{q}", "-m", f"m{q}", "-q", str(q), version=version)
    for sub_qos, sub in subs.items():
        got = sorted(sub.result())
        assert got == [f"{topic}/{q} m{q} {min(q, sub_qos)} 0" for q in (0, 1, 2)]


@pytest.mark.parametrize("version", VERSIONS.values())
def test_retained(any_broker: Broker, version: str) -> None:
    topic = uid("ret")
    pub(any_broker, "-t", f"{topic}/1", "-m", "one", "-r", "-q", "1", version=version)
    pub(any_broker, "-t", f"{topic}/2", "-m", "two", "-r", version=version)
    pub(any_broker, "-t", f"{topic}/2", "-m", "two again", "-r", version=version)  # replaces
    pub(any_broker, "-t", f"{topic}/1", "-n", "-r", version=version)  # deletes
    sub = Sub(any_broker, "-t", f"{topic}/#", "-q", "1", "-C", "2", "-F", "%t %p %r", version=version)
    pub(any_broker, "-t", f"{topic}/3", "-m", "live", "-r", version=version)
    assert sub.result() == [f"{topic}/2 two again 1", f"{topic}/3 live 0"]
    pub(any_broker, "-t", f"{topic}/2", "-n", "-r", version=version)
    pub(any_broker, "-t", f"{topic}/3", "-n", "-r", version=version)


@pytest.mark.parametrize("version", VERSIONS.values())
def test_will_on_kill_not_on_disconnect(any_broker: Broker, version: str) -> None:
    topic = uid("will")
    watcher = Sub(any_broker, "-t", f"{topic}/#", "-C", "1", "-F", "%t %p", version=version)
    polite = Sub(any_broker, "-t", "nothing", "--will-topic", f"{topic}/polite", "--will-payload", "no",
                 "-i", uid("polite"), "-E", version=version)  # fmt: skip
    polite.result()  # -E: exits with a normal DISCONNECT once subscribed: no will
    dying = Sub(any_broker, "-t", "nothing", "--will-topic", f"{topic}/dying", "--will-payload", "bye",
                "-i", uid("dying"), version=version)  # fmt: skip
    dying.kill()
    assert watcher.result() == [f"{topic}/dying bye"]


@pytest.mark.parametrize("version", VERSIONS.values())
def test_persistent_session_queues_while_offline(any_broker: Broker, version: str) -> None:
    topic, client_id = uid("pers"), uid("pers")
    args = ["-c", "-i", client_id, "-q", "1", "-t", f"{topic}/#"]
    if version == "mqttv5":
        args += ["-x", "60"]
    Sub(any_broker, *args, "-E", version=version).result()  # subscribe, then go away
    for i in range(3):
        pub(any_broker, "-t", f"{topic}/x", "-m", f"q{i}", "-q", "1", version=version)
    pub(any_broker, "-t", f"{topic}/x", "-m", "qos0", "-q", "0", version=version)  # not queued (QoS 0)
    back = Sub(any_broker, *args, "-C", "3", "-F", "%p %q", version=version, ready="CONNACK")
    assert back.result() == ["q0 1", "q1 1", "q2 1"]


@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
def test_shared_subscription(any_broker: Broker, version: str) -> None:
    topic = uid("share")
    a = Sub(any_broker, "-t", f"$share/g/{topic}/#", "-W", "3", "-F", "%p", version=version)
    b = Sub(any_broker, "-t", f"$share/g/{topic}/#", "-W", "3", "-F", "%p", version=version)
    for i in range(10):
        pub(any_broker, "-t", f"{topic}/x", "-m", str(i), "-q", "1", version=version)
    got_a, got_b = a.result(), b.result()
    # One member per message; how they take turns is the broker's choice (ours: round robin).
    assert sorted(got_a + got_b, key=int) == [str(i) for i in range(10)]
    assert got_a and got_b


def test_v5_properties_from_mosquitto_pub(any_broker: Broker) -> None:
    topic = uid("props")
    sub = Sub(any_broker, "-t", topic, "-C", "1", "-F", "%p|%P|%C|%R|%D", version="mqttv5")
    pub(any_broker, "-t", topic, "-m", "body", "-D", "publish", "user-property", "k", "v",
        "-D", "publish", "content-type", "text/x", "-D", "publish", "response-topic", "re/ply",
        "-D", "publish", "correlation-data", "c0ffee", version="mqttv5")  # fmt: skip
    assert sub.result() == ["body|k:v|text/x|re/ply|c0ffee"]


def test_sys_topics(ours: Broker) -> None:
    sub = Sub(ours, "-t", "$SYS/broker/version", "-C", "1", "-F", "%t %p")
    assert sub.result()[0].startswith("$SYS/broker/version mqttkit ")
    hash_sub = Sub(ours, "-t", "#", "-W", "2", "-F", "%t")
    assert not [t for t in hash_sub.result() if t.startswith("$")]  # '#' never matches $ topics


def test_tls_listener(our_factory: Any) -> None:
    broker = our_factory(tls=True)
    tls_port = broker.extra["tls_port"]
    ca = str(broker.ca_path)
    topic = uid("tls")
    sub = Sub(broker, "-t", topic, "-C", "1", "--cafile", ca, "-F", "%p", port=tls_port)
    pub(broker, "-t", topic, "-m", "secret", "--cafile", ca, port=tls_port)
    assert sub.result() == ["secret"]
    wrong = subprocess.run(
        ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(tls_port), "-t", "x", "-m", "y",
         "--cafile", str(broker.workdir / "other-ca.pem")],
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert wrong.returncode != 0  # a certificate from an unknown CA


# --- paho ------------------------------------------------------------------------------------------------


class PahoClient:
    def __init__(self, broker: Broker, protocol: int, client_id: str, clean: bool = True) -> None:
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.acks: queue.Queue[Any] = queue.Queue()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        self.client.on_subscribe = lambda c, u, mid, codes, props: self.acks.put(("sub", mid, codes))
        self.client.on_publish = lambda c, u, mid, rc, props: self.acks.put(("pub", mid, rc))
        connected = threading.Event()
        self.client.on_connect = lambda c, u, flags, rc, props: connected.set()
        if protocol == paho.MQTTv5:
            self.client.connect(broker.host, broker.port, clean_start=clean)
        else:
            self.client._clean_session = clean
            self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        assert connected.wait(DEADLINE)

    def subscribe(self, topic: str, qos: int, **kw: Any) -> list[Any]:
        self.client.subscribe(topic, qos, **kw)
        kind, _, codes = self.acks.get(timeout=DEADLINE)
        assert kind == "sub"
        return list(codes)

    def publish(self, topic: str, payload: bytes, qos: int, **kw: Any) -> None:
        info = self.client.publish(topic, payload, qos, **kw)
        info.wait_for_publish(DEADLINE)
        assert info.is_published()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.mark.parametrize("protocol", [paho.MQTTv311, paho.MQTTv5], ids=["3.1.1", "5.0"])
def test_paho_qos2_round_trip_binary(any_broker: Broker, protocol: int) -> None:
    topic = uid("paho")
    sub = PahoClient(any_broker, protocol, uid("s"))
    pubc = PahoClient(any_broker, protocol, uid("p"))
    try:
        sub.subscribe(topic, 2)
        payloads = [bytes(range(256)), b"", b"\x00" * 70000]
        for p in payloads:
            pubc.publish(topic, p, 2)
        got = [sub.messages.get(timeout=DEADLINE) for _ in payloads]
        assert [(m.payload, m.qos) for m in got] == [(p, 2) for p in payloads]
    finally:
        sub.close()
        pubc.close()


def test_paho_v5_properties_forwarded_untouched(any_broker: Broker) -> None:
    topic = uid("p5")
    sub = PahoClient(any_broker, paho.MQTTv5, uid("s"))
    pubc = PahoClient(any_broker, paho.MQTTv5, uid("p"))
    try:
        sub.subscribe(topic, 1)
        props = PahoProperties(PacketTypes.PUBLISH)
        props.UserProperty = [("a", "1"), ("a", "2"), ("ключ", "значение")]
        props.ContentType = "application/json"
        props.ResponseTopic = "reply/here"
        props.CorrelationData = b"\x00\x01\x02"
        props.PayloadFormatIndicator = 1
        props.MessageExpiryInterval = 3600
        pubc.publish(topic, b"{}", 1, properties=props)
        m = sub.messages.get(timeout=DEADLINE)
        got = m.properties
        assert got.UserProperty == [("a", "1"), ("a", "2"), ("ключ", "значение")]
        assert (got.ContentType, got.ResponseTopic, got.CorrelationData) == (
            "application/json",
            "reply/here",
            b"\x00\x01\x02",
        )
        assert got.PayloadFormatIndicator == 1
        assert 3590 <= got.MessageExpiryInterval <= 3600
    finally:
        sub.close()
        pubc.close()


def test_paho_subscription_identifiers(any_broker: Broker) -> None:
    topic = uid("sid")
    sub = PahoClient(any_broker, paho.MQTTv5, uid("s"))
    pubc = PahoClient(any_broker, paho.MQTTv5, uid("p"))
    try:
        for sid, flt in ((7, f"{topic}/#"), (9, f"{topic}/+")):
            props = PahoProperties(PacketTypes.SUBSCRIBE)
            props.SubscriptionIdentifier = sid
            sub.subscribe(flt, 1, properties=props)
        pubc.publish(f"{topic}/x", b"1", 1)
        got = [sub.messages.get(timeout=DEADLINE)]
        with contextlib.suppress(queue.Empty):
            got.append(sub.messages.get(timeout=0.5))
        # 3.3.4 allows one copy with every identifier (ours: overlapping subscriptions deliver once) or a copy
        # per subscription with its own (mosquitto 2).
        ids = sorted(i for m in got for i in m.properties.SubscriptionIdentifier)
        assert ids == [7, 9]
        if any_broker.kind == "ours":
            assert len(got) == 1
    finally:
        sub.close()
        pubc.close()


def test_port_in_use_is_a_one_line_error(ours: Broker) -> None:
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "serve", "--port", str(ours.port)],
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "cannot listen on" in done.stderr


def test_bad_listener_url_is_a_usage_error() -> None:
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "serve", "--listen", "http://x:1"],
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "scheme must be mqtt, mqtts, ws, wss or unix" in done.stderr


def test_sigterm_publishes_wills_and_exits_0(our_factory: Any) -> None:
    broker = our_factory()
    topic = uid("bye")
    # Wills go out to the subscribers still connected, before the connections close.
    watcher = PahoClient(broker, paho.MQTTv311, uid("w"))
    watcher.subscribe(f"{topic}/#", 1)
    dying = Sub(broker, "-t", "x", "--will-topic", f"{topic}/d", "--will-payload", "server gone", "-i", uid("d"))
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGTERM)
    assert broker.proc.wait(timeout=DEADLINE) == 0
    m = watcher.messages.get(timeout=DEADLINE)
    assert m.payload == b"server gone"
    dying.kill()  # mosquitto_sub would try to reconnect for ever
    watcher.client.loop_stop()


def test_client_certificates_required(our_factory: Any) -> None:
    broker = our_factory(tls=True, require_certificate=True)
    tls_port = broker.extra["tls_port"]
    ca, work = str(broker.ca_path), broker.workdir
    topic = uid("cert")
    with_cert = ["--cafile", ca, "--cert", str(work / "client.pem"), "--key", str(work / "client.key")]
    sub = Sub(broker, "-t", topic, "-C", "1", "-F", "%p", *with_cert, port=tls_port)
    pub(broker, "-t", topic, "-m", "signed", *with_cert, port=tls_port)
    assert sub.result() == ["signed"]
    without = subprocess.run(
        ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(tls_port), "-t", "x", "-m", "y", "--cafile", ca],
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert without.returncode != 0


def test_json_logs(our_factory: Any) -> None:
    import json

    broker = our_factory("--log-format", "json")
    pub(broker, "-t", "x", "-m", "y", "-i", "logged-client")
    broker.stop()
    lines = (broker.workdir / "serve.log").read_text().splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    kinds = [(e["event"], e["client_id"]) for e in events]
    assert ("connected", "logged-client") in kinds and ("disconnected", "logged-client") in kinds
    assert all({"ts", "event", "client_id", "peer"} <= e.keys() for e in events)


def _stuck_subscriber(broker: Broker) -> Any:
    """A subscriber that never reads, and enough traffic to it that the broker's writer blocks on its socket."""
    import socket

    sub = socket.create_connection((broker.host, broker.port))
    sub.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sub.sendall(bytes.fromhex("10 0d 00 04 4d 51 54 54 04 02 00 00 00 01 7a"))  # CONNECT "z", no keep alive
    sub.sendall(bytes.fromhex("82 08 00 01 00 03 62 69 67 00"))  # SUBSCRIBE "big" QoS 0
    time.sleep(0.3)
    publisher = socket.create_connection((broker.host, broker.port))
    publisher.sendall(bytes.fromhex("10 0d 00 04 4d 51 54 54 04 02 00 00 00 01 70"))  # CONNECT "p"
    from mqtt_cli.core.encoder import encode
    from mqtt_cli.core.packets import Publish

    packet = encode(Publish("big", b"x" * 60000), 4)
    for _ in range(100):
        publisher.sendall(packet)
    time.sleep(0.5)
    return sub, publisher


def test_graceful_shutdown_waits_for_writers_but_a_second_signal_does_not(our_factory: Any) -> None:
    for signals, at_least, at_most in ((1, 1.5, 6.0), (2, 0.0, 1.2)):
        broker = our_factory()
        sockets = _stuck_subscriber(broker)
        assert broker.proc is not None
        start = time.monotonic()
        for _ in range(signals):
            broker.proc.send_signal(signal.SIGINT)
            time.sleep(0.05)
        assert broker.proc.wait(timeout=DEADLINE) == 0
        assert at_least <= time.monotonic() - start <= at_most
        for sock in sockets:
            sock.close()


def test_unreadable_certificate_is_a_one_line_error(tmp_path: Any) -> None:
    import sys

    missing = tmp_path / "nope.pem"
    done = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "serve", "--listen", "mqtts://127.0.0.1:0",
         "--tls-cert", str(missing), "--tls-key", str(missing)],
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"command line: --tls-cert: cannot read the certificate {missing}: No such file" in done.stderr
    missing.write_text("not PEM")  # there, but no certificate: OpenSSL's reason, with the listener
    done = subprocess.run(
        [sys.executable, "-m", "mqtt_cli", "serve", "--listen", "mqtts://127.0.0.1:0",
         "--tls-cert", str(missing), "--tls-key", str(missing)],
        capture_output=True, text=True, timeout=DEADLINE,
    )  # fmt: skip
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "mqtts://127.0.0.1:0: cannot load TLS certificate" in done.stderr


def test_max_connections(our_factory: Any) -> None:
    broker = our_factory("--max-connections", "1")
    first = PahoClient(broker, paho.MQTTv311, uid("first"))
    try:
        done = subprocess.run(
            ["mosquitto_pub", "-h", broker.host, "-p", str(broker.port), "-t", "x", "-m", "y"],
            capture_output=True, text=True, timeout=DEADLINE,
        )  # fmt: skip
        assert done.returncode != 0  # the second connection is closed at once
    finally:
        first.close()
