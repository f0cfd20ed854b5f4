"""The core's one output channel (BrokerCore.output) and what the network layer reports back (commit_done,
commit_failed), without I/O: held acknowledgements released by the core itself, commits handed out when due and
again after a failure, and the timers the network layer only has to wake for (wills, keep alive, CONNECT)."""

from __future__ import annotations

import math

from mqtt_cli.core.broker import BrokerConfig, BrokerCore
from mqtt_cli.core.closing import CONNECT_TIMEOUT
from mqtt_cli.core.packets import PubAck, Publish, Subscription
from mqtt_cli.core.persistence import DeliveryAdded, RetainedSet
from mqtt_cli.core.storage import COMMIT_LINGER, RETRY_COMMIT
from tests.core.test_broker import Client


def _persistent() -> tuple[BrokerCore, Client]:
    """A broker with persistence, a persistent subscriber to q/# that went offline, and a connected publisher."""
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    broker.storage.enable_persistence()
    sub = Client(broker)
    sub.connect("keeper", clean_start=False)
    sub.subscribe(Subscription("q/#", 1))
    sub.lose()
    pub = Client(broker, version=5)
    pub.connect("p")
    first = broker.output(0.0)  # the sessions' records: a commit of their own
    assert first.commit is not None
    broker.commit_done(0.0, 0.001)
    assert broker.output(0.0).commit is None
    return broker, pub


def test_a_held_puback_goes_out_in_the_output_after_commit_done() -> None:
    broker, pub = _persistent()
    pub.conn.out.clear()
    assert pub.send(Publish("q/x", b"m", 1, True, packet_id=3)) == []  # held: nothing written yet
    out = broker.output(1.0)
    assert out.commit is not None and [type(c) for c in out.commit] == [RetainedSet, DeliveryAdded]
    assert pub.conn not in out.sends and not pub.conn.out  # still held while the commit is written
    assert broker.output(1.0).commit is None  # one commit at a time
    assert broker.commit_done(1.1, 0.1) is None  # (no failure ended)
    out = broker.output(1.1)
    assert pub.conn in out.sends and pub.received() == [PubAck(3)]
    assert broker.stats.commit_latency.count == 2


def test_a_failed_commit_is_handed_out_again_after_the_pause_and_5_0_publishers_hear_0x97() -> None:
    broker, pub = _persistent()
    pub.send(Publish("q/x", b"m", 1, True, packet_id=3))
    assert broker.output(1.0).commit is not None
    assert broker.commit_failed(1.0) == 1  # an episode starts: one acknowledgement withheld
    assert broker.stats.store_failures == 1
    broker.tick(1.0)  # (the keep-alive sweep is due next at 1.5: later than the commit's retry below)
    broker.next_sweep = math.inf
    out = broker.output(1.0)
    assert out.commit is None and out.deadline == 1.0 + RETRY_COMMIT  # the ticker comes back then
    pub.conn.out.clear()
    assert pub.send(Publish("q/y", b"n", 1, packet_id=4)) == [PubAck(4, 0x97)]  # not stored, not taken
    again = broker.output(1.0 + RETRY_COMMIT)
    assert again.commit is not None and again.retrying
    assert broker.commit_failed(2.0 + RETRY_COMMIT) is None  # the same episode
    retried = broker.output(1.0 + 3 * RETRY_COMMIT)
    assert retried.commit is not None
    recovered = broker.commit_done(5.0, 0.01)
    assert recovered is not None and recovered.withheld == 1 and recovered.after == 4.0
    assert pub.conn in broker.output(5.0).sends and pub.received() == [PubAck(3)]


def test_a_qos1_delivery_acknowledged_within_the_linger_needs_no_commit() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    broker.storage.enable_persistence()
    sub = Client(broker)
    sub.connect("keeper", clean_start=False)
    sub.subscribe(Subscription("q/#", 1))
    pub = Client(broker)
    pub.connect("p")
    assert broker.output(0.0).commit is not None
    broker.commit_done(0.0, 0.0)
    broker.output(0.0)
    assert pub.send(Publish("q/x", b"m", 1, packet_id=5), 1.0) == []
    broker.tick(1.0)  # (the keep-alive sweep is due next at 1.5, after the linger)
    out = broker.output(1.0)
    assert out.commit is None and out.deadline == 1.0 + COMMIT_LINGER  # written only if not acknowledged by then
    (delivery,) = sub.received()
    sub.send(PubAck(delivery.packet_id), 1.001)
    broker.output(1.001)
    assert pub.received() == [PubAck(5)]
    assert broker.output(1.002).commit is None  # the delivery's records cancelled out: nothing to write


def test_keep_alive_and_connect_timeouts_are_the_cores_timers() -> None:
    broker = BrokerCore(BrokerConfig(sys_interval=0))
    quiet = Client(broker)
    quiet.connect("quiet", keepalive=10)
    silent = broker.open("silent-peer", 0.0)  # never sends its CONNECT
    assert broker.output(0.0).deadline == 0.5  # the keep-alive and CONNECT sweep is due
    broker.tick(CONNECT_TIMEOUT - 0.5)
    assert not quiet.closed and not silent.closed
    broker.tick(CONNECT_TIMEOUT)  # no CONNECT in time: closed, and the network layer is told to close it
    assert silent.closed and silent.close_requested and silent in broker.output(CONNECT_TIMEOUT).sends
    broker.tick(14.0)
    assert not quiet.closed
    broker.tick(15.0)  # 1.5 x its keep alive without a packet
    assert quiet.closed


def test_the_last_commit_at_shutdown_holds_everything_not_written() -> None:
    broker, pub = _persistent()
    pub.send(Publish("q/x", b"m", 1, True, packet_id=3))  # due at once (a retained message, a queued delivery)
    last = broker.storage.last_commit(2.0)
    assert [type(c) for c in last] == [RetainedSet, DeliveryAdded]
