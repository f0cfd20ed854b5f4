"""Remapping and directions of `mqtt bridge`, against mosquitto's own bridge with the same `topic` rules.

Two pairs of Debian mosquittos on 127.0.0.1, started once for the module:

* A bridges to B by itself: A's config has a `connection` section with one `topic` line per rule below;
* C and D are plain, and our `mqtt bridge --local C --remote D` runs between them with the same rules;
* E is our broker (`mqtt serve --mosquitto-conf`) given A's very `connection` section (pointing at F, a plain
  mosquitto): the embedded bridge, from the same `topic` lines through the mosquitto.conf translation.

Every case publishes the same messages on the local side (A and C) and on the remote side (B and D); a
collector on each broker (MQTT 5.0, `#` at QoS 2, retain-as-published) records what arrives as (side, topic,
payload, QoS, retain). The payload names the case, so each case's arrivals are compared on their own, and each
case has topics of its own, so no rule catches another case's messages. What arrives through our bridge must be
what arrives through mosquitto's, duplicates and echoes included.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.subscribeoptions import SubscribeOptions

from tests.broker.conftest import start_ours
from tests.brokers import HOST, Broker, start_mosquitto

ROOT = Path(__file__).resolve().parent.parent.parent

L, R = "local", "remote"


@dataclass(frozen=True)
class Case:
    """One rule and what is published: (side, topic, QoS, retain)."""

    id: str
    rule: str
    pubs: tuple[tuple[str, str, int, bool], ...]
    crosses: bool = True  # at least one message reaches the other side
    extra_rules: tuple[str, ...] = ()


CASES = [
    Case(
        "k01", "k01/# out 0",
        ((L, "k01/a", 0, False), (L, "k01/a/b", 1, False), (L, "k01", 2, False), (L, "k01x/a", 1, False),
         (R, "k01/a", 1, False)),
    ),
    Case(
        "k02", "k02/# out 1",
        ((L, "k02/a", 0, False), (L, "k02/b", 1, False), (L, "k02/c", 2, False), (R, "k02/r", 1, False)),
    ),
    Case(
        "k03", "k03/# in 2",
        ((R, "k03/a", 0, False), (R, "k03/b", 1, False), (R, "k03/c", 2, False), (L, "k03/l", 1, False)),
    ),
    Case(
        "k04", "k04/+ both 1",
        ((L, "k04/a", 2, False), (L, "k04/a/b", 1, False), (R, "k04/b", 2, False), (R, "k04", 1, False)),
    ),
    Case("k05", "k05/# in", ((R, "k05/a", 2, False), (L, "k05/b", 2, False))),  # QoS 0 by default
    Case("k06", "k06/#", ((L, "k06/a", 1, False), (R, "k06/b", 1, False))),  # out 0 by default
    Case(
        "k07", "# out 1 k07/l/ k07/r/",
        ((L, "k07/l/a", 1, False), (L, "k07/l/a/b", 2, False), (L, "k07/x", 1, False), (R, "k07/r/b", 1, False)),
    ),
    Case(
        "k08", "# in 2 k08/l/ k08/r/",
        ((R, "k08/r/a", 2, False), (R, "k08/r/a/b", 1, False), (R, "k08/x", 1, False), (L, "k08/l/b", 1, False)),
    ),
    Case(
        "k09", '"" out 1 k09/local/one k09/remote/other',
        ((L, "k09/local/one", 2, False), (L, "k09/local/one/x", 1, False), (L, "k09/local/two", 1, False),
         (R, "k09/remote/other", 1, False)),
    ),
    Case("k10", '"" both 2 k10/l/t k10/r/t', ((L, "k10/l/t", 2, False), (R, "k10/r/t", 1, False))),
    Case(
        "k11", '"" in 0 k11/l/t k11/r/t',
        ((R, "k11/r/t", 1, False), (R, "k11/r/t/x", 1, False), (L, "k11/l/t", 1, False)),
    ),
    Case(
        "k12", 'k12/# out 1 "" k12r/',
        ((L, "k12/a", 1, False), (L, "k12/b/c", 2, False), (R, "k12r/k12/x", 1, False)),
    ),
    Case("k13", 'k13/# in 1 k13l/ ""', ((R, "k13/a", 2, False), (L, "k13l/k13/b", 1, False))),
    Case(
        "k14", "+/s both 1 k14/l/ k14/r/",
        ((L, "k14/l/x/s", 1, False), (L, "k14/l/s", 1, False), (R, "k14/r/y/s", 2, False), (R, "k14/r/y/t", 1, False)),
    ),
    Case(
        "k15", "k15/# both 1",
        ((L, "k15/a", 1, True), (L, "k15/b", 0, True), (R, "k15/c", 2, True), (R, "k15/d", 1, False)),
    ),
    Case("k16", "k16/# in 0", ((R, "k16/a", 1, True), (R, "k16/b", 2, False))),
    Case(
        "k17", "k17/# both 2 k17/l/ k17/r/",
        ((L, "k17/l/k17/a", 2, True), (L, "k17/l/k17/b", 1, False), (L, "k17/l/b", 1, False),
         (R, "k17/r/k17/c", 2, False), (R, "k17/r/k17/d", 0, True), (R, "k17/r/d", 1, False)),
    ),
    # Overlapping rules: the same message matches two rules of one bridge.
    Case(
        "k18", "k18/# out 0",
        ((L, "k18/a", 2, False), (L, "k18/b", 2, False)),
        extra_rules=("k18/a out 2",),
    ),
    # The prefix's parent: `k19/l/#` matches `k19/l` itself, which does not start with the prefix `k19/l/`.
    Case("k19", "# out 1 k19/l/ k19/r/", ((L, "k19/l", 1, False),)),
    Case("k20", "# in 1 k20/l/ k20/r/", ((R, "k20/r", 1, False),)),
    # A rule without prefixes before one with: mosquitto remaps by the first matching rule that has a prefix.
    Case(
        "k21", "k21/a/# out 1",
        ((L, "k21/a/x", 1, False), (L, "k21/b", 1, False)),
        extra_rules=('k21/# out 1 "" r21/',),
    ),
    Case(
        "k22", "r22/# in 1",
        ((R, "r22/k22/x", 1, False), (R, "r22/y", 1, False)),
        extra_rules=('k22/# in 1 "" r22/',),
    ),
]  # fmt: skip

PROBE_RULE = "kprobe/# both 1"  # last: once a probe crosses both ways, every rule's subscription is in place
SIDES = {"mosquitto": ("A", "B"), "ours": ("C", "D"), "embedded": ("E", "F")}

Arrival = tuple[str, str, str, int, bool]  # side, topic, payload, QoS, retain


def all_rules() -> list[str]:
    rules = []
    for case in CASES:
        rules += [case.rule, *case.extra_rules]
    return [*rules, PROBE_RULE]


class Collector:
    """A 5.0 client on `#` (QoS 2, retain-as-published) recording every message that arrives."""

    def __init__(self, broker: Broker, name: str) -> None:
        self.arrivals: list[tuple[str, bytes, int, bool]] = []
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"collector-{name}", protocol=mqtt.MQTTv5)
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *a: self.subscribed.set()
        self.client.connect(broker.host, broker.port, keepalive=30)
        self.client.loop_start()
        self.client.subscribe("#", options=SubscribeOptions(qos=2, noLocal=False, retainAsPublished=True))
        assert self.subscribed.wait(10), f"collector {name}: no SUBACK"

    def _on_message(self, client: Any, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with self.lock:
            self.arrivals.append((msg.topic, bytes(msg.payload), msg.qos, bool(msg.retain)))

    def snapshot(self) -> list[tuple[str, bytes, int, bool]]:
        with self.lock:
            return list(self.arrivals)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Publisher:
    def __init__(self, broker: Broker, name: str) -> None:
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"publisher-{name}", protocol=mqtt.MQTTv5)
        self.client.connect(broker.host, broker.port, keepalive=30)
        self.client.loop_start()

    def publish(self, topic: str, payload: bytes, qos: int, retain: bool) -> mqtt.MQTTMessageInfo:
        return self.client.publish(topic, payload, qos, retain)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@dataclass
class OurBridge:
    proc: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)

    def pump(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def wait_connected(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = "\n".join(self.lines)
            if "local connected" in text and "remote connected" in text:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"our bridge did not connect both sides:\n{self.text()}")

    def text(self) -> str:
        return "\n".join(self.lines[-30:])


@dataclass
class Setup:
    brokers: dict[str, Broker]
    collectors: dict[str, Collector]
    publishers: dict[str, Publisher]
    bridge: OurBridge
    results: dict[str, dict[str, list[Arrival]]] = field(default_factory=dict)


def _cross(pub: Publisher, col: Collector, topic: str, timeout: float) -> bool:
    """Publishes `topic` until it arrives at `col` (a probe through a bridge)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pub.publish(topic, b"probe", 1, False)
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            if any(t == topic for t, *_ in col.snapshot()):
                return True
            time.sleep(0.01)
    return False


def _settle(collectors: dict[str, Collector], quiet: float = 0.6, cap: float = 10.0) -> None:
    """Waits until nothing new has arrived anywhere for `quiet` seconds and our pair has at least as many arrivals
    on each side as mosquitto's (so a bridge held up on a busy machine is not taken for one that lost messages),
    at most `cap` seconds."""
    deadline = time.monotonic() + cap
    last: tuple[int, ...] = ()
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        counts = {name: len(c.arrivals) for name, c in collectors.items()}
        now = time.monotonic()
        if tuple(counts.values()) != last:
            last, stable_since = tuple(counts.values()), now
        elif (
            now - stable_since >= quiet
            and counts["C"] >= counts["A"]
            and counts["D"] >= counts["B"]
            and counts["E"] >= counts["A"]
            and counts["F"] >= counts["B"]
        ):
            return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def bridged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("bridge-vs-mosquitto")
    brokers: dict[str, Broker] = {}
    collectors: dict[str, Collector] = {}
    publishers: dict[str, Publisher] = {}
    bridge: OurBridge | None = None
    rules = all_rules()
    try:
        brokers["B"] = start_mosquitto(tmp / "B")
        conf = [
            "connection cmp",
            f"address {HOST}:{brokers['B'].port}",
            "clientid cmp.A",
            "cleansession false",
            "restart_timeout 1 2",
            *[f"topic {rule}" for rule in rules],
        ]
        brokers["A"] = start_mosquitto(tmp / "A", extra_conf="\n".join(conf))
        brokers["C"] = start_mosquitto(tmp / "C")
        brokers["D"] = start_mosquitto(tmp / "D")
        brokers["F"] = start_mosquitto(tmp / "F")
        embedded_conf = tmp / "E.conf"
        conf_e = [line if not line.startswith("address") else f"address {HOST}:{brokers['F'].port}" for line in conf]
        embedded_conf.write_text("allow_anonymous true\n" + "\n".join(conf_e).replace("cmp.A", "cmp.E") + "\n")
        brokers["E"] = start_ours(tmp / "E", "--mosquitto-conf", str(embedded_conf))
        for name, broker in brokers.items():
            collectors[name] = Collector(broker, name)
            publishers[name] = Publisher(broker, name)
        cmd = [
            sys.executable, "-m", "mqtt_cli", "bridge", "--name", "cmp",
            "--local", brokers["C"].url, "--remote", brokers["D"].url,
            *[arg for rule in rules for arg in ("-t", rule)],
            "--restart-timeout", "0.2", "1", "--state-dir", str(tmp / "state"),
        ]  # fmt: skip
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        bridge = OurBridge(proc)
        threading.Thread(target=bridge.pump, daemon=True).start()
        bridge.wait_connected(20)
        for kind, (local, remote) in SIDES.items():
            for src, dst, topic in ((local, remote, "kprobe/out"), (remote, local, "kprobe/in")):
                assert _cross(publishers[src], collectors[dst], f"{topic}/{kind}", 15), (
                    f"{kind}: a probe on {src} does not reach {dst}" + (f"\n{bridge.text()}" if kind == "ours" else "")
                )
        run_cases(publishers, collectors)
        results: dict[str, dict[str, list[Arrival]]] = {case.id: {} for case in CASES}
        for kind, (local, remote) in SIDES.items():
            for side, name in ((L, local), (R, remote)):
                for topic, payload, qos, retain in collectors[name].snapshot():
                    case_id = payload.decode(errors="replace").split(":", 1)[0]
                    if case_id in results:
                        results[case_id].setdefault(kind, []).append((side, topic, payload.decode(), qos, retain))
        yield Setup(brokers, collectors, publishers, bridge, results)
    finally:
        if bridge is not None and bridge.proc.poll() is None:
            bridge.proc.kill()
            bridge.proc.wait(timeout=5)
        for client in [*collectors.values(), *publishers.values()]:
            with contextlib.suppress(Exception):
                client.close()
        for broker in brokers.values():
            broker.stop()


def run_cases(publishers: dict[str, Publisher], collectors: dict[str, Collector]) -> None:
    """Publishes every case's messages on both pairs at once, then waits for the bridges to go quiet."""
    infos = []
    for case in CASES:
        for n, (side, topic, qos, retain) in enumerate(case.pubs):
            payload = f"{case.id}:{side}:{n}".encode()
            for local, remote in SIDES.values():
                infos.append(publishers[local if side == L else remote].publish(topic, payload, qos, retain))
    deadline = time.monotonic() + 10
    for info in infos:
        info.wait_for_publish(max(0.1, deadline - time.monotonic()))
        assert info.is_published(), "a publication was not acknowledged by its broker"
    _settle(collectors)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.id}: {c.rule}" for c in CASES])
def test_same_arrivals_as_mosquitto_bridge(bridged: Setup, case: Case) -> None:
    got = bridged.results[case.id]
    theirs, ours = sorted(got.get("mosquitto", [])), sorted(got.get("ours", []))
    published = {f"{case.id}:{side}:{n}" for n, (side, *_) in enumerate(case.pubs)}
    # Every message reached its own side's collector on both pairs (the setup works) ...
    embedded = sorted(got.get("embedded", []))
    for kind, arrivals in (("mosquitto", theirs), ("ours", ours), ("embedded", embedded)):
        local_or_own = {p for s, _, p, _, _ in arrivals if p.split(":")[1] == s}
        assert local_or_own == published, f"{kind}: not every publication reached its own broker's collector"
    # ... mosquitto's bridge carried something where the rule says it should ...
    crossed = [a for a in theirs if a[2].split(":")[1] != a[0]]
    assert bool(crossed) == case.crosses, f"mosquitto's bridge: unexpected forwards {crossed}"
    # ... and ours delivered exactly what mosquitto's did, on each side.
    assert ours == theirs, (
        f"rule {case.rule!r}{' + ' + repr(case.extra_rules) if case.extra_rules else ''}:\n"
        f"  only through mosquitto's bridge: {sorted(set(theirs) - set(ours))}\n"
        f"  only through ours: {sorted(set(ours) - set(theirs))}\n"
        f"  mosquitto: {theirs}\n  ours:      {ours}"
    )
    # The embedded bridge too: mosquitto.conf's own `connection` section, run inside our broker.
    assert embedded == theirs, (
        f"rule {case.rule!r}{' + ' + repr(case.extra_rules) if case.extra_rules else ''}:\n"
        f"  only through mosquitto's bridge: {sorted(set(theirs) - set(embedded))}\n"
        f"  only through our embedded bridge: {sorted(set(embedded) - set(theirs))}\n"
        f"  mosquitto: {theirs}\n  embedded:  {embedded}"
    )


def test_our_bridge_stops_cleanly_on_sigterm(bridged: Setup) -> None:
    proc = bridged.bridge.proc
    assert proc.poll() is None, f"our bridge exited early:\n{bridged.bridge.text()}"
    # No reconnection while the cases ran (a side dropped and came back would hide behind the comparison).
    assert not [line for line in bridged.bridge.lines if "connection lost" in line], bridged.bridge.text()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
        raise AssertionError(f"our bridge did not stop within 15 s of SIGTERM:\n{bridged.bridge.text()}") from None
    assert code == 0, bridged.bridge.text()
