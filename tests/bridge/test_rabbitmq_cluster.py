"""`mqtt serve` at the edge of a real 3-node RabbitMQ cluster (Debian's rabbitmq-server, quorum MQTT queues), its
`[[bridge]]` listing the three nodes: the node the bridge is on is killed (SIGKILL) mid-flow and started again.
Nothing is lost, the move back to the first node (mid-flow too) doubles nothing, and the bridge is back there
soon after that node answers.

A QoS 1 message in flight when the node is killed can arrive twice: the cluster stored it but the node died
before its PUBACK, so the bridge sends it again to the next node (MQTT's at least once; no broker can tell the
copy from a new message). Such duplicates are allowed only among the messages in flight at the kill, at most
the bridge's window (receive_maximum, 1,000) before it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.brokers import Broker, RabbitCluster

from .helpers import Watcher
from .test_embedded import log_of, start_with_bridges, wait_log

pytestmark = [pytest.mark.interop, pytest.mark.slow]

RATE = 500  # QoS 1 messages a second into our broker
KILL_AT = 2000  # the bridge's node is killed after this many, and started again after RESTART_AT
RESTART_AT = 2400
AFTER_BACK = 2.0  # seconds of flow after the bridge is back on the first node


class PacedPublisher:
    """QoS 1 messages d/x with payloads 0, 1, 2... at RATE a second into our broker (paho), until stopped."""

    def __init__(self, broker: Broker) -> None:
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="paced")
        self.client.max_inflight_messages_set(100)
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        self.sent = 0
        self.infos: list[paho.MQTTMessageInfo] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            due = start + self.sent / RATE
            if (pause := due - time.monotonic()) > 0:
                time.sleep(pause)
            self.infos.append(self.client.publish("d/x", b"%d" % self.sent, 1))
            self.sent += 1

    def wait_sent(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.sent < n:
            assert time.monotonic() < deadline, f"only {self.sent} of {n} published"
            time.sleep(0.01)

    def finish(self) -> int:
        """Stops, waits until our broker acknowledged everything; how many were published."""
        self.stop.set()
        self.thread.join(10)
        for info in self.infos:
            info.wait_for_publish(timeout=30)
            assert info.is_published()
        self.client.loop_stop()
        self.client.disconnect()
        return self.sent


def test_bridge_node_killed_and_back_nothing_lost_or_doubled(tmp_path: Path, rabbitmq_cluster: RabbitCluster) -> None:
    cluster = rabbitmq_cluster
    first, second, third = cluster.nodes
    # The sink is on the node that stays: its session's quorum queue has its leader there and copies on the others.
    sink = Watcher(third, "r/#", qos=1, client_id="sink", clean=False)
    queues = cluster.ctl(third, "list_queues", "name", "type", "--quiet")
    assert any("sink" in line and "quorum" in line for line in queues.splitlines()), queues
    urls = ", ".join(f'"{node.url}"' for node in cluster.nodes)
    ours = start_with_bridges(
        tmp_path / "ours",
        '[[bridge]]\nname = "cluster"\ntopics = [\'d/# out 1 "" r/\']\nrestart_timeout = [0.2, 1.0]\n'
        f"[bridge.remote]\nurl = [{urls}]\n",
        "--sys-interval", "1",
    )  # fmt: skip
    try:
        wait_log(ours, f"bridge cluster: connected to {first.url}", timeout=60)
        publisher = PacedPublisher(ours)
        publisher.wait_sent(KILL_AT)
        cluster.kill(first)
        killed_at = publisher.sent
        publisher.wait_sent(RESTART_AT)
        wait_log(ours, f"bridge cluster: connected to {second.url}", timeout=60)
        cluster.restart(first)  # returns once its MQTT port answers
        back = time.monotonic()
        wait_log(ours, f"bridge cluster: connected to {first.url}", count=2, timeout=30)
        back_after = time.monotonic() - back
        time.sleep(AFTER_BACK)
        n = publisher.finish()
        assert n > RESTART_AT
        deadline = time.monotonic() + 60
        while len(sink.messages) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # a late duplicate shows up too
        got = sink.payloads()
        missing = [i for i in range(n) if b"%d" % i not in got]
        doubled = {int(p): k for p, k in got.items() if k > 1}
        print(f"{n} published, {len(got)} distinct at the sink, {len(missing)} lost, "
              f"{sum(doubled.values()) - len(doubled)} duplicates {sorted(doubled)[:10]} (killed after "
              f"{killed_at}); back on the first node {back_after:.1f} s after it answered")  # fmt: skip
        assert missing == [], (missing[:10], log_of(ours)[-3000:])
        in_flight_at_kill = range(killed_at - 1000, killed_at + 1)
        assert all(i in in_flight_at_kill for i in doubled), (sorted(doubled)[:10], killed_at)
        assert f"bridge cluster: left {second.url} for the main address" in log_of(ours)
    finally:
        sink.close()
