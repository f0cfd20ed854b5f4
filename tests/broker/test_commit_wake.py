"""How the broker learns that a persistence commit is due or done: the core's output (BrokerCore.output) hands
out a group due now, or says when the next is due, which wakes the ticker then (its flush hands the group out); a
commit's end comes through the commit thread's socket pair, which the committer task (BrokerServer._committer)
waits on.

Real `python -m mqtt_cli serve --persistence` processes, spoken to on raw sockets with our codec; and the commit
thread's scheduling policy (it must not preempt the trio thread when handed a group).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest
import trio

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import PubAck, PubComp, Publish, PubRec, PubRel, SubAck, Subscribe, Subscription
from mqtt_cli.net.committer import CommitThread
from tests.broker import test_persistence
from tests.broker.test_persistence import Ours, collect, subscribe_offline
from tests.broker.test_persistence_state import Raw

ours = test_persistence.ours  # the fixture: `mqtt serve --persistence` processes, stopped at the end


@pytest.mark.slow
def test_a_delivery_its_subscriber_holds_is_written_after_the_linger_then_acknowledged(
    ours: Callable[..., Ours],
) -> None:
    """A QoS 1 message to an online persistent subscriber that does not acknowledge it: its PUBACK waits for the
    commit due a linger later, the deadline the core's output gives the ticker; the message was on file by then (it
    is there after a SIGKILL). Three times, each with nothing to write before (the last commit done)."""
    broker = ours()
    sub = Raw(broker.port, version=4)
    sub.connect("holder", clean=False)
    sub.send(Subscribe(1, [Subscription("w/#", 1)]))
    assert type(sub.recv()) is SubAck
    pub = Raw(broker.port, version=4)
    pub.connect("pub", clean=True)
    payloads = [b"kept %d" % n for n in range(3)]
    for n, payload in enumerate(payloads, 1):
        pub.send(Publish("w/x", payload, 1, packet_id=n))
        delivery = sub.recv()
        assert type(delivery) is Publish and delivery.payload == payload  # not acknowledged by the subscriber
        assert pub.recv() == PubAck(n)
    broker.kill()
    sub.close()
    pub.close()
    broker.start()
    again = Raw(broker.port, version=4)
    assert again.connect("holder", clean=False).session_present
    redelivered = [again.recv() for _ in payloads]
    assert [(p.payload, p.dup) for p in redelivered] == [(payload, True) for payload in payloads]
    again.close()


@pytest.mark.slow
def test_qos2_acknowledgements_across_many_commits_go_once_and_in_order(ours: Callable[..., Ours]) -> None:
    """A burst of QoS 2 messages to an offline persistent subscriber: commits follow one another while input keeps
    coming; every PUBREC and PUBCOMP is sent once, in order, and every message is delivered once."""
    broker = ours()
    subscribe_offline(broker.port, "keeper", "q/#")
    pub = Raw(broker.port, version=4)
    pub.connect("burst", clean=True)
    count = 300
    ids = range(1, count + 1)
    pub.sock.sendall(b"".join(encode(Publish("q/x", b"m%d" % i, 2, packet_id=i), 4) for i in ids))  # one write
    assert [pub.recv() for _ in ids] == [PubRec(i) for i in ids]
    assert pub.nothing(0.2)
    pub.sock.sendall(b"".join(encode(PubRel(i), 4) for i in ids))
    assert [pub.recv() for _ in ids] == [PubComp(i) for i in ids]
    assert pub.nothing(0.2)
    pub.close()
    assert sorted(collect(broker.port, "keeper")) == sorted(b"m%d" % i for i in ids)


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no batch scheduling policy here (Linux only)")
def test_the_commit_thread_does_not_preempt_on_wake_up() -> None:
    """The commit thread asks for batch scheduling (no preemption of the trio thread when `start` wakes it)."""
    commits = CommitThread(lambda changes: None)
    try:
        (thread,) = [t for t in threading.enumerate() if t.name == "mqtt persistence commits"]
        assert thread.native_id is not None
        commits.start([])
        trio.run(commits.wait)  # (its policy set before its first group)
        commits.outcome()
        assert os.sched_getscheduler(thread.native_id) == os.SCHED_BATCH
    finally:
        commits.close()
