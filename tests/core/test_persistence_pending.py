"""persistence.Pending: which held acknowledgements may go out without a commit (their messages' QoS 1 deliveries
acknowledged by their subscribers, nothing else to write before them), which wait for one, and when one is due.
With the broker core on real sockets: tests/broker/test_persistence.py."""

from __future__ import annotations

import math

from mqtt_cli.core.persistence import (
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    Pending,
    RetainedSet,
    coalesce,
)
from mqtt_cli.core.properties import EMPTY_PROPERTIES
from mqtt_cli.core.session import Message

LINGER, IDLE = 0.002, 0.1


def _sent(row: int, qos: int = 1) -> list[DeliveryAdded | DeliverySent]:
    return [_added(row, qos), DeliverySent("sub", row, row)]


def _added(row: int, qos: int = 1) -> DeliveryAdded:
    return DeliveryAdded("sub", row, Message("t", b"p", qos, False, EMPTY_PROPERTIES, "pub", 0.0), qos, False, ())


def test_acknowledgements_go_once_their_qos1_deliveries_are_done_and_nothing_is_written() -> None:
    pending = Pending()
    assert pending.add(_sent(1), [("pub", b"ack1")], 0.0) == []
    assert pending.add(_sent(2), [("pub", b"ack2")], 0.0) == []
    assert pending.due(LINGER, IDLE) == LINGER  # the subscribers have until then
    # The second delivery is done first: its acknowledgement still waits for the first (order).
    assert pending.add([DeliveryDone("sub", 2)], [], 0.001) == []
    assert pending.add([DeliveryDone("sub", 1)], [], 0.001) == [("pub", b"ack1"), ("pub", b"ack2")]
    assert pending.due(LINGER, IDLE) is None  # the pairs write nothing: no commit at all


def test_a_delivery_not_done_in_time_is_written_and_its_acknowledgement_waits_for_the_commit() -> None:
    pending = Pending()
    pending.add(_sent(1), [("pub", b"ack1")], 0.0)
    pending.add(_sent(2), [("pub", b"ack2")], 0.0005)
    pending.add([DeliveryDone("sub", 2)], [], 0.001)
    assert pending.due(LINGER, IDLE) == LINGER
    changes, held = pending.take(1.0, LINGER)
    assert [c.row for c in changes if isinstance(c, DeliveryAdded)] == [1]  # 2 elided
    assert held == [("pub", b"ack1"), ("pub", b"ack2")]
    # While it is written, nothing held after it goes, even with nothing to wait for.
    assert pending.due(LINGER, IDLE) is None
    assert pending.add([], [("pub", b"ack3")], 0.002) == []
    assert pending.committed() == [("pub", b"ack3")]


def test_a_change_that_must_be_written_holds_everything_after_it_until_the_commit() -> None:
    pending = Pending()
    retained = RetainedSet(Message("r", b"x", 1, True, EMPTY_PROPERTIES, "pub", 0.0))
    assert pending.add(_sent(1), [("a", 1)], 0.0) == []
    assert pending.add([retained], [("a", 2)], 0.0) == []
    assert pending.due(LINGER, IDLE) == -math.inf
    assert pending.add([DeliveryDone("sub", 1)], [("a", 3)], 0.0) == [("a", 1)]  # before the retained one: free
    changes, held = pending.take(1.0, LINGER)
    assert changes == [retained] and held == [("a", 2), ("a", 3)]
    assert pending.committed() == []


def test_qos2_deliveries_incoming_identifiers_and_queued_deliveries_are_written_at_once() -> None:
    for changes in (
        _sent(1, qos=2),
        [IncomingAdded("pub", 7)],
        [DeliverySent("sub", 9, 3)],
        [DeliveryReleased("sub", 9)],
    ):
        pending = Pending()
        assert pending.add(changes, [("pub", b"rec")], 0.0) == []
        assert pending.due(LINGER, IDLE) == -math.inf
    pending = Pending()
    assert pending.add([_added(1), *_sent(2)], [("pub", b"ack")], 0.0) == []  # 1 queued: its subscriber is away
    assert pending.due(LINGER, IDLE) == -math.inf


def test_a_failed_commit_goes_back_in_front() -> None:
    pending = Pending()
    pending.add(_sent(1), [("a", 1)], 0.0)
    changes, held = pending.take(1.0, LINGER)
    pending.add([DeliveryDone("sub", 1)], [("a", 2)], 0.01)
    pending.failed(changes, held, 0.01)
    assert pending.due(LINGER, IDLE) == -math.inf
    changes, held = pending.take(1.0, LINGER)
    assert coalesce(changes) == [] and held == [("a", 1), ("a", 2)]  # the pair met again: the store writes nothing


def test_coalesce_drops_pairs_and_the_updates_of_rows_deleted_later() -> None:
    changes = [_added(1), DeliverySent("sub", 1, 4), DeliveryReleased("sub", 2), DeliverySent("sub", 3, 5),
               DeliveryDone("sub", 2), DeliveryDone("sub", 1)]  # fmt: skip
    assert coalesce(changes) == [DeliverySent("sub", 3, 5), DeliveryDone("sub", 2)]


def test_a_commit_takes_the_batches_due_and_keeps_the_young_ones_for_their_subscribers() -> None:
    pending = Pending()
    pending.add(_sent(1), [("a", 1)], 0.0)
    pending.add(_sent(2), [("a", 2)], 0.0015)
    assert pending.due(LINGER, IDLE) == LINGER
    changes, held = pending.take(LINGER, LINGER)
    assert [c.row for c in changes if isinstance(c, DeliveryAdded)] == [1] and held == [("a", 1)]
    assert pending.add([DeliveryDone("sub", 2)], [], 0.0025) == []  # written first: the commit in hand
    assert pending.committed() == [("a", 2)]
    pending.add([DeliveryDone("sub", 1)], [], 0.003)  # its row is on file now: deleted by the next commit
    changes, held = pending.take(1.0, LINGER)
    assert changes == [DeliveryDone("sub", 1)] and held == []
