"""An embedded bridge with several remote addresses: mosquitto's `round_robin` semantics. With round_robin false
(the default) the first address is the main one: on another, the bridge tries it every 5 s and, once it answers,
drains what is in flight and moves back, so no message changes connection half-way (nothing lost or doubled).
With round_robin true it stays where it is until that address fails."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.brokers import Broker, start_mosquitto

from .helpers import RUNNING, BridgeProcess, Watcher
from .test_embedded import log_of, produce, start_with_bridges, wait_log

pytestmark = pytest.mark.interop


def two_address_toml(main: Broker, other: Broker, round_robin: bool | None = None) -> str:
    text = (
        '[[bridge]]\nname = "cloud"\ntopics = [\'q1/# out 1 "" r/\', \'q2/# out 2 "" r/\']\n'
        "restart_timeout = [0.1, 0.5]\n"
        f'[bridge.remote]\nurl = ["{main.url}", "{other.url}"]\n'
    )
    if round_robin is not None:
        text += f"round_robin = {'true' if round_robin else 'false'}\n"
    return text


def offline_sink(broker: Broker) -> None:
    """A persistent session subscribed to r/# at QoS 2, left offline: the broker keeps what comes for it."""
    Watcher(broker, "r/#", qos=2, client_id="sink", clean=False).close()


def test_back_on_the_main_address_with_nothing_lost_or_doubled(tmp_path: Path) -> None:
    main = start_mosquitto(tmp_path / "main", persistence=True)
    other = start_mosquitto(tmp_path / "other", persistence=True)
    RUNNING.extend([main, other])
    offline_sink(main)
    offline_sink(other)
    main.stop()  # the main address is down when the bridge starts: it goes to the other one
    ours = start_with_bridges(tmp_path / "ours", two_address_toml(main, other), "--sys-interval", "1")
    wait_log(ours, f"bridge cloud: connected to {other.url}")
    n = 3000
    producer = produce(ours, n, pace=0.15)  # QoS 1 and 2, about 5 s
    time.sleep(1.0)
    assert main.proc is not None
    main.proc = main.start()
    wait_log(ours, f"bridge cloud: connected to {main.url}", timeout=30)
    assert f"bridge cloud: left {other.url} for the main address" in log_of(ours)
    states = Watcher(ours, "$SYS/broker/connection/cloud/#")
    producer.join(timeout=120)
    assert not producer.is_alive(), "the producer did not finish"
    time.sleep(1.5)
    try:
        got = {m[0].rsplit("/", 1)[1]: m[1] for m in states.messages}
        assert got.get("address") == main.url.encode() and got.get("state") == b"1", got
    finally:
        states.close()
    # What each broker kept for the sink: together every message, once.
    totals: dict[bytes, int] = {}
    for broker in (main, other):
        sink = Watcher(broker, "r/#", qos=2, client_id="sink", clean=False)
        deadline = time.monotonic() + 30
        before = -1
        while time.monotonic() < deadline and len(sink.messages) != before:
            before = len(sink.messages)
            time.sleep(1.0)
        sink.close()
        for payload, k in sink.payloads().items():
            totals[payload] = totals.get(payload, 0) + k
    expected = {b"%d:%d" % (q, i) for q in (1, 2) for i in range(n)}
    missing = sorted(expected - set(totals))
    doubled = {p: k for p, k in totals.items() if k > 1}
    assert missing == [] and doubled == {}, (missing[:10], list(doubled.items())[:10], log_of(ours)[-2000:])


def test_round_robin_stays_on_the_address_that_works(tmp_path: Path) -> None:
    main = start_mosquitto(tmp_path / "main")
    other = start_mosquitto(tmp_path / "other")
    RUNNING.extend([main, other])
    main.stop()
    ours = start_with_bridges(tmp_path / "ours", two_address_toml(main, other, round_robin=True))
    wait_log(ours, f"bridge cloud: connected to {other.url}")
    assert main.proc is not None
    main.proc = main.start()
    time.sleep(7)  # beyond the 5 s after which round_robin false goes back to the main address
    assert f"connected to {main.url}" not in log_of(ours)
    assert "for the main address" not in log_of(ours)
    other.stop()  # a failure: on to the next address, the first one
    wait_log(ours, f"bridge cloud: connected to {main.url}", timeout=30)


def test_mqtt_bridge_goes_back_to_its_first_remote_and_round_robin_does_not(tmp_path: Path) -> None:
    """`mqtt bridge`, the same client: --remote twice, the first down at start and back later."""
    local = start_mosquitto(tmp_path / "local")
    main = start_mosquitto(tmp_path / "main")
    other = start_mosquitto(tmp_path / "other")
    RUNNING.extend([local, main, other])
    main.stop()
    default = BridgeProcess(tmp_path / "default", local, main, "--remote", other.url, "-t", "a/# out 1", name="d")
    rotating = BridgeProcess(tmp_path / "rr", local, main, "--remote", other.url, "--remote-round-robin",
                             "-t", "a/# out 1", name="r")  # fmt: skip
    for bridge in (default, rotating):
        bridge.wait_for(f"remote connected to {other.url}")
    assert main.proc is not None
    main.proc = main.start()
    default.wait_for(f"remote connected to {main.url}", timeout=20)
    assert f"remote left {other.url} for the main address" in default.text()
    assert f"connected to {main.url}" not in rotating.text()
