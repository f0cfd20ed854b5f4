"""The SIGKILL torture of issue #18, shared by tests/broker/test_persistence_torture.py (20 kills, bounded) and
benchmarks/persistence_torture.py (longer runs): any broker that can be killed and started again on its port.

Two persistent subscribers (3.1.1, clean session 0) stay offline: `keeper1` on t/q1 at QoS 1, `keeper2` on t/q2
at QoS 2. Each round sets one retained message (r/N, QoS 1, acknowledged before the flood starts), then floods
QoS 1 messages from a new client and QoS 2 messages from one persistent publisher that lives through every kill
(reconnected once the broker is back, it re-sends what was not complete: PUBLISH again or PUBREL), and the broker
is killed with SIGKILL after a random time and started again.

The QoS 2 publisher is reconnected by hand, not by paho's loop: paho-mqtt 2.2.0 turns a flow whose PUBREL it sent
back into a PUBLISH (DUP 0) when a reconnect attempt fails before one succeeds (`_messages_reconnect_reset_out`
sees `resend_pubrel` on the second attempt, not `wait_for_pubcomp`), which breaks [MQTT-4.3.3-6] and makes a
duplicate no broker can tell from a new message. One attempt, made once the broker listens, avoids that.

Then the QoS 2 publisher finishes its flows, the subscribers come back, and a new client reads the retained
messages.

Acknowledged: QoS 1 PUBACK received, QoS 2 PUBCOMP received (paho's on_publish), retained PUBACK received.
QoS 1 must arrive at least once, QoS 2 exactly once (a duplicate of any QoS 2 message counts, acknowledged or not).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import paho.mqtt.client as paho

from tests.broker.test_persistence import DEADLINE, client, connect, publish_acked
from tests.brokers import HOST

__all__ = ["Tally", "torture"]


@dataclass
class Tally:
    acked_q1: set[bytes] = field(default_factory=set)
    acked_q2: set[bytes] = field(default_factory=set)
    delivered_q1: list[bytes] = field(default_factory=list)
    delivered_q2: list[bytes] = field(default_factory=list)
    retained_acked: dict[str, bytes] = field(default_factory=dict)
    retained_found: dict[str, bytes] = field(default_factory=dict)
    sessions_present: list[bool] = field(default_factory=list)  # each subscriber's CONNACK at the end
    kills: int = 0
    phases: dict[str, float] = field(default_factory=dict)  # seconds spent in each phase

    @property
    def lost_q1(self) -> set[bytes]:
        return self.acked_q1 - set(self.delivered_q1)

    @property
    def lost_q2(self) -> set[bytes]:
        return self.acked_q2 - set(self.delivered_q2)

    @property
    def lost_retained(self) -> list[str]:
        return [t for t, p in self.retained_acked.items() if self.retained_found.get(t) != p]

    @property
    def lost(self) -> int:
        return len(self.lost_q1) + len(self.lost_q2) + len(self.lost_retained)

    @property
    def duplicates_q1(self) -> int:
        return len(self.delivered_q1) - len(set(self.delivered_q1))

    @property
    def duplicates_q2(self) -> int:
        return sum(n - 1 for n in Counter(self.delivered_q2).values() if n > 1)

    def line(self, who: str) -> str:
        return (
            f"{who}: {self.kills} SIGKILLs; QoS 1 acknowledged {len(self.acked_q1)}, delivered "
            f"{len(self.delivered_q1)}, duplicates {self.duplicates_q1}, lost {len(self.lost_q1)}; QoS 2 acknowledged "
            f"{len(self.acked_q2)}, delivered {len(self.delivered_q2)}, duplicates {self.duplicates_q2}, lost "
            f"{len(self.lost_q2)}; retained acknowledged {len(self.retained_acked)}, lost {len(self.lost_retained)}; "
            f"sessions back {sum(self.sessions_present)}/{len(self.sessions_present)} ("
            + ", ".join(f"{k} {v:.1f} s" for k, v in self.phases.items())
            + ")"
        )


class _Q2Publisher:
    """One persistent QoS 2 publisher (3.1.1, clean session 0) that paho reconnects after every kill."""

    def __init__(self, port: int) -> None:
        self.sent: dict[int, bytes] = {}
        self.acked: list[int] = []  # mids, appended by paho's thread
        self.c = c = client("flood-q2", clean=False)
        c.on_publish = lambda cl, u, mid, rc, props: self.acked.append(mid)
        c.max_inflight_messages_set(50)
        connect(c, port)

    def pause(self) -> None:
        """Before a kill: paho's thread stops (no reconnect attempts of its own); the socket stays as it is."""
        self.c.loop_stop()

    def resume(self) -> None:
        """After the restart: one reconnect, which re-sends the incomplete flows."""
        connected = threading.Event()
        self.c.on_connect = lambda *a: connected.set()
        self.c.reconnect()
        self.c.loop_start()
        assert connected.wait(DEADLINE), "no CONNACK"

    def outstanding(self) -> int:
        return len(self.sent) - len(self.acked)

    def publish(self, payload: bytes) -> None:
        self.sent[self.c.publish("t/q2", payload, qos=2).mid] = payload

    def finish(self, tally: Tally, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.outstanding() > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.c.disconnect()
        self.c.loop_stop()
        tally.acked_q2.update(self.sent[mid] for mid in self.acked)


def _flood_round(
    port: int,
    n: int,
    q2: _Q2Publisher,
    kill: Callable[[], None],
    tally: Tally,
    seconds: float,
    seq: list[int],
    cap: int,
    stoppers: list[threading.Thread],
) -> None:
    sent: dict[int, bytes] = {}
    acked: list[int] = []
    c = client(f"flood-q1-{n}")
    c.on_publish = lambda cl, u, mid, rc, props: acked.append(mid)
    c.max_inflight_messages_set(50)
    connect(c, port)
    stop_at = time.monotonic() + seconds
    i = 0
    first_q2 = seq[0]
    while time.monotonic() < stop_at:
        if len(sent) - len(acked) < 200 and i < cap:  # cap < 65,536: QoS 1 mids stay unique within a round
            payload = b"q1-%d-%d" % (n, i)
            sent[c.publish("t/q1", payload, qos=1).mid] = payload
            i += 1
        if q2.outstanding() < 100 and seq[0] - first_q2 < cap and seq[0] < 60_000:  # unique mids over the run
            q2.publish(b"q2-%d" % seq[0])
            seq[0] += 1
        else:
            time.sleep(0.002)
    q2.pause()
    kill()
    tally.kills += 1

    def stop() -> None:  # paho's loop takes up to a second to stop: not waited for here
        c.loop_stop()
        tally.acked_q1.update(sent[mid] for mid in acked)

    stopper = threading.Thread(target=stop)
    stopper.start()
    stoppers.append(stopper)


def _collect(
    port: int, client_id: str, expected: set[bytes], idle: float, patience: float
) -> tuple[list[bytes], bool]:
    """Reconnects a subscriber: what it receives until everything `expected` came and `idle` s passed quietly (or
    `patience` s passed quietly, whatever came: a broker that lost messages)."""
    got: list[bytes] = []
    last = [time.monotonic()]
    present = [False]

    def on_message(c: paho.Client, u: object, m: paho.MQTTMessage) -> None:
        got.append(m.payload)
        last[0] = time.monotonic()

    def on_connect(c: paho.Client, u: object, flags: paho.ConnectFlags, rc: object, props: object) -> None:
        present[0] = flags.session_present
        connected.set()

    connected = threading.Event()
    c = client(client_id, clean=False)
    c.on_message = on_message
    c.on_connect = on_connect
    c.connect(HOST, port, keepalive=30)
    c.loop_start()
    assert connected.wait(DEADLINE), "no CONNACK"
    last[0] = time.monotonic()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        quiet = time.monotonic() - last[0]
        if quiet > patience or (quiet > idle and expected.issubset(got)):
            break
        time.sleep(0.05)
    c.disconnect()
    c.loop_stop()
    return got, present[0]


def _subscribe(port: int, client_id: str, topic: str, qos: int) -> None:
    c = client(client_id, clean=False)
    done = threading.Event()
    c.on_subscribe = lambda *a: done.set()
    connect(c, port)
    c.subscribe(topic, qos)
    assert done.wait(DEADLINE)
    c.disconnect()
    c.loop_stop()


def _retained(port: int, idle: float) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    last = [time.monotonic()]

    def on_message(c: paho.Client, u: object, m: paho.MQTTMessage) -> None:
        found[m.topic] = m.payload
        last[0] = time.monotonic()

    c = client(f"reader-{random.randrange(1 << 30)}")
    c.on_message = on_message
    connect(c, port)
    c.subscribe("r/#", 1)
    last[0] = time.monotonic()
    while time.monotonic() - last[0] < idle:
        time.sleep(0.05)
    c.disconnect()
    c.loop_stop()
    return found


def torture(
    port: int,
    kill: Callable[[], None],
    restart: Callable[[], None],
    rounds: int,
    flood: tuple[float, float] = (0.2, 0.6),
    seed: int = 18,
    finish: float = 10.0,
    cap: int = 60_000,
    patience: float = 5.0,
) -> Tally:
    """`rounds` SIGKILLs (kill, then restart, each round); returns what was acknowledged and what came back.
    `finish`: seconds the QoS 2 publisher is given to complete its flows after the last restart (a broker that
    lost its session may leave some incomplete; only completed ones count as acknowledged). `cap`: at most this
    many QoS 1 and QoS 2 messages a round (a bounded test run). `patience`: seconds of silence after which a
    returning subscriber is taken to have received all it will."""
    rng = random.Random(seed)
    tally = Tally()
    _subscribe(port, "keeper1", "t/q1", 1)
    _subscribe(port, "keeper2", "t/q2", 2)
    time.sleep(0.3)  # the subscriptions' commit: nothing acknowledges a SUBSCRIBE's storage
    q2 = _Q2Publisher(port)
    seq = [0]
    stoppers: list[threading.Thread] = []
    t0 = time.monotonic()
    for n in range(rounds):
        publish_acked(port, f"r/{n}", b"ret-%d" % n, retain=True)
        tally.retained_acked[f"r/{n}"] = b"ret-%d" % n
        _flood_round(port, n, q2, kill, tally, rng.uniform(*flood), seq, cap, stoppers)
        restart()
        q2.resume()
    for stopper in stoppers:
        stopper.join()
    t1 = time.monotonic()
    q2.finish(tally, finish)
    t2 = time.monotonic()
    tally.delivered_q1, present1 = _collect(port, "keeper1", tally.acked_q1, 0.5, patience)
    tally.delivered_q2, present2 = _collect(port, "keeper2", tally.acked_q2, 0.5, patience)
    tally.sessions_present = [present1, present2]
    tally.retained_found = _retained(port, idle=0.5)
    tally.phases = {"kills": t1 - t0, "QoS 2 completion": t2 - t1, "collection": time.monotonic() - t2}
    return tally
