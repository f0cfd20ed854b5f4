"""How the broker's committer task learns that a persistence commit is done or that one falls due later
(net/committer.py, BrokerServer._committer): the commit thread's byte is a wake-up, a poke from `_collect` wakes a
committer waiting with nothing to write, and a byte with nothing done behind it costs one harmless turn.

The thread and its socket pair are real (under trio.run; the store's commit stands in as a function); the broker
tests run `python -m mqtt_cli serve --persistence` processes and speak to them on raw sockets with our codec.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import trio

from mqtt_cli.core.encoder import encode
from mqtt_cli.core.packets import PubAck, PubComp, Publish, PubRec, PubRel, SubAck, Subscribe, Subscription
from mqtt_cli.core.persistence import Change, DeliveryDone
from mqtt_cli.net.committer import CommitThread
from tests.broker import test_persistence
from tests.broker.test_persistence import DEADLINE, Ours, collect, subscribe_offline
from tests.broker.test_persistence_state import Raw

ours = test_persistence.ours  # the fixture: `mqtt serve --persistence` processes, stopped at the end


class Gated:
    """A commit that waits, in the commit thread, until the test lets it go on; what it wrote, in order."""

    def __init__(self) -> None:
        self.written: list[list[Change]] = []
        self.go_on = threading.Event()

    def __call__(self, changes: list[Change]) -> None:
        assert self.go_on.wait(DEADLINE)
        self.written.append(changes)


def test_a_poke_wakes_the_waiter_with_no_group_done() -> None:
    trio.run(_a_poke_wakes_the_waiter)


async def _a_poke_wakes_the_waiter() -> None:
    commit = Gated()
    commits = CommitThread(commit)
    group: list[Change] = [DeliveryDone("c", 1)]
    with trio.fail_after(DEADLINE):
        commits.start(group)
        commits.poke()
        await trio.lowlevel.wait_readable(commits.fd)
        commits.drain()
        assert commits.busy and not commits.done  # woken for something else: the group is still being written
        commit.go_on.set()
        await commits.wait()
        commits.outcome()
    assert not commits.busy
    commits.close()
    assert commit.written == [group]


def test_a_byte_left_after_its_outcome_was_taken_does_not_end_the_next_wait() -> None:
    """The outcome taken before its byte was read (the byte still on the socket): the next group's wait wakes once
    for that byte, sees nothing done and waits on; each group's outcome is taken once, in order."""
    trio.run(_a_byte_left)


async def _a_byte_left() -> None:
    commit = Gated()
    commits = CommitThread(commit)
    first: list[Change] = [DeliveryDone("c", 1)]
    second: list[Change] = [DeliveryDone("c", 2)]
    with trio.fail_after(DEADLINE):
        commit.go_on.set()
        commits.start(first)
        await trio.lowlevel.wait_readable(commits.fd)  # its byte is there; not drained
        assert commits.done
        commits.outcome()
        commit.go_on.clear()
        commits.start(second)
        await trio.lowlevel.wait_readable(commits.fd)  # at once: the first group's byte
        commits.drain()
        assert commits.busy and not commits.done
        assert commit.written == [first]
        commit.go_on.set()
        await commits.wait()
        commits.outcome()
    commits.close()
    assert commit.written == [first, second]


@pytest.mark.slow
def test_a_delivery_its_subscriber_holds_is_written_after_the_linger_then_acknowledged(
    ours: Callable[..., Ours],
) -> None:
    """A QoS 1 message to an online persistent subscriber that does not acknowledge it: its PUBACK waits for the
    commit due a linger later, which `_collect` wakes the idle committer for; the message was on file by then (it
    is there after a SIGKILL). Three times, each with the committer idle before (its last commit done)."""
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
