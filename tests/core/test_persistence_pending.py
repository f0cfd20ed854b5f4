"""persistence.Pending: which held acknowledgements may go out without a commit (their messages' QoS 1 deliveries
acknowledged by their subscribers, nothing else to write before them), which wait for one, and when one is due.
With the broker core on real sockets: tests/broker/test_persistence.py."""

from __future__ import annotations

import math
import random
import tracemalloc
from typing import Any

import pytest

from mqtt_cli.core.persistence import (
    Change,
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    IncomingReleased,
    Pending,
    RetainedCleared,
    RetainedSet,
    SessionRemoved,
    SessionSaved,
    log_only,
)
from mqtt_cli.core.properties import EMPTY_PROPERTIES
from mqtt_cli.core.session import Message

LINGER, IDLE = 0.002, 0.1


def _added(row: int, qos: int = 1) -> DeliveryAdded:
    return DeliveryAdded("sub", row, Message("t", b"p", qos, False, EMPTY_PROPERTIES, "pub", 0.0), qos, False, ())


def _sent(row: int, qos: int = 1) -> list[DeliveryAdded | DeliverySent]:
    return [_added(row, qos), DeliverySent("sub", row, row)]


def _added_sent(row: int, qos: int = 1) -> DeliveryAdded:
    """As the core makes a delivery sent as it is added: one record, with its packet identifier."""
    m = Message("t", b"p", qos, False, EMPTY_PROPERTIES, "pub", 0.0)
    return DeliveryAdded("sub", row, m, qos, False, (), row)


_DELIVERY_STEPS = (DeliveryAdded, DeliverySent, DeliveryReleased, DeliveryDone)
_UPDATES = (DeliverySent, DeliveryReleased)


def coalesce(changes: list[Change]) -> list[Change]:
    """The model of what a commit of `changes` leaves on file (net/store.py's log cancels the same records):
    without a delivery both added and done within them, and without the updates of a row deleted later in them.
    Rows are never reused."""
    done = {c.row for c in changes if type(c) is DeliveryDone}
    if not done:
        return changes
    gone = {c.row for c in changes if type(c) is DeliveryAdded and c.row in done}
    return [
        c
        for c in changes
        if not (isinstance(c, _DELIVERY_STEPS) and c.row in gone) and not (isinstance(c, _UPDATES) and c.row in done)
    ]


def _rows(changes: list[object]) -> list[int]:
    return [c.row for c in changes if isinstance(c, DeliveryAdded)]


def test_acknowledgements_go_once_their_qos1_deliveries_are_done_and_nothing_is_written() -> None:
    pending = Pending()
    assert pending.add(_sent(1), [("pub", b"ack1")], 0.0) == []
    assert pending.add(_sent(2), [("pub", b"ack2")], 0.0) == []
    assert pending.due(LINGER, IDLE) == LINGER  # the subscribers have until then
    # The second delivery is done first: its acknowledgement still waits for the first (order).
    assert pending.add([DeliveryDone("sub", 2)], [], 0.001) == []
    assert pending.add([DeliveryDone("sub", 1)], [], 0.001) == [("pub", b"ack1"), ("pub", b"ack2")]
    assert pending.due(LINGER, IDLE) is None  # the pairs write nothing: no commit at all


def test_deliveries_added_as_they_are_sent_one_record_each_are_dropped_once_done() -> None:
    pending = Pending()
    assert pending.add([_added_sent(1)], [("pub", b"ack1")], 0.0) == []
    assert pending.add([_added_sent(2), _added_sent(3)], [("pub", b"ack2")], 0.0) == []
    assert pending.count == 3 and pending.due(LINGER, IDLE) == LINGER
    assert pending.add([DeliveryDone("sub", 1)], [], 0.001) == [("pub", b"ack1")]
    assert pending.add([DeliveryDone("sub", 3), DeliveryDone("sub", 2)], [], 0.001) == [("pub", b"ack2")]
    assert pending.count == 0 and pending.due(LINGER, IDLE) is None  # nothing to write, no commit
    # One not done in time is written with its packet identifier, and its end later.
    pending.add([_added_sent(4)], [("pub", b"ack4")], 0.002)
    (taken,) = pending.take(1.0, LINGER)
    assert type(taken) is DeliveryAdded and (taken.row, taken.packet_id) == (4, 4)
    assert pending.committed() == [("pub", b"ack4")]


def test_a_delivery_not_done_in_time_is_written_and_its_acknowledgement_goes_at_the_first_of_commit_or_done() -> None:
    pending = Pending()
    pending.add(_sent(1), [("pub", b"ack1")], 0.0)
    pending.add(_sent(2), [("pub", b"ack2")], 0.0005)
    pending.add([DeliveryDone("sub", 2)], [], 0.001)
    assert pending.due(LINGER, IDLE) == LINGER
    changes = pending.take(1.0, LINGER)
    assert _rows(changes) == [1]  # 2 elided
    assert pending.due(LINGER, IDLE) is None  # being written
    # Done while it is written: nothing waits for the commit any more (its DELETE goes in the next one).
    assert pending.add([DeliveryDone("sub", 1)], [("pub", b"ack3")], 0.002) == [
        ("pub", b"ack1"), ("pub", b"ack2"), ("pub", b"ack3")
    ]  # fmt: skip
    assert pending.committed() == []
    assert pending.take(1.0, LINGER) == [DeliveryDone("sub", 1)]


def test_a_change_that_must_be_written_holds_everything_after_it_until_the_commit() -> None:
    pending = Pending()
    retained = RetainedSet(Message("r", b"x", 1, True, EMPTY_PROPERTIES, "pub", 0.0))
    assert pending.add(_sent(1), [("a", 1)], 0.0) == []
    assert pending.add([retained], [("a", 2)], 0.0) == []
    assert pending.due(LINGER, IDLE) == -math.inf
    assert pending.add([DeliveryDone("sub", 1)], [("a", 3)], 0.0) == [("a", 1)]  # before the retained one: free
    assert pending.take(0.0, LINGER) == [retained]
    assert pending.add([], [("a", 4)], 0.0) == []  # after it: waits for it
    assert pending.committed() == [("a", 2), ("a", 3), ("a", 4)]


def test_qos2_deliveries_incoming_identifiers_and_queued_deliveries_are_written_at_once() -> None:
    for changes in (
        _sent(1, qos=2),
        [IncomingAdded("pub", 7)],
        [DeliverySent("sub", 9, 3)],
        [DeliveryReleased("sub", 9)],
        [_added(1), *_sent(2)],  # 1 queued: its subscriber is away
    ):
        pending = Pending()
        assert pending.add(changes, [("pub", b"rec")], 0.0) == []
        assert pending.due(LINGER, IDLE) == -math.inf
        assert pending.add(_sent(5), [("pub", b"next")], 0.0) == []
        assert pending.add([DeliveryDone("sub", 5)], [], 0.0) == []  # behind the hard one
        pending.take(0.0, LINGER)
        assert pending.committed() == [("pub", b"rec"), ("pub", b"next")]


def test_a_failed_commit_goes_back_in_front() -> None:
    pending = Pending()
    pending.add(_sent(1), [("a", 1)], 0.0)
    retained = RetainedSet(Message("r", b"x", 1, True, EMPTY_PROPERTIES, "pub", 0.0))
    pending.add([retained], [("a", 2)], 0.0)
    changes = pending.take(0.01, LINGER)
    pending.failed(changes, 0.01)
    assert pending.add([DeliveryDone("sub", 1)], [("a", 3)], 0.01) == []  # the failed group holds all
    assert pending.due(LINGER, IDLE) == -math.inf
    changes = pending.take(0.02, LINGER)
    assert coalesce(changes) == [retained]  # the pair met again: the store writes only the retained message
    assert pending.committed() == [("a", 1), ("a", 2), ("a", 3)]


def test_a_commit_takes_the_batches_due_and_keeps_the_young_ones_for_their_subscribers() -> None:
    pending = Pending()
    pending.add(_sent(1), [("a", 1)], 0.0)
    pending.add(_sent(2), [("a", 2)], 0.0015)
    assert pending.due(LINGER, IDLE) == LINGER
    assert _rows(pending.take(LINGER, LINGER)) == [1]
    assert pending.add([DeliveryDone("sub", 2)], [], 0.0025) == []  # 1 first: on file or done
    assert pending.committed() == [("a", 1), ("a", 2)]
    pending.add([DeliveryDone("sub", 1)], [], 0.003)  # its row is on file: deleted by the next commit
    assert pending.due(LINGER, IDLE) == 0.003 + IDLE
    assert pending.take(1.0, LINGER) == [DeliveryDone("sub", 1)]


def test_coalesce_drops_pairs_and_the_updates_of_rows_deleted_later() -> None:
    changes = [_added(1), DeliverySent("sub", 1, 4), DeliveryReleased("sub", 2), DeliverySent("sub", 3, 5),
               DeliveryDone("sub", 2), DeliveryDone("sub", 1)]  # fmt: skip
    assert coalesce(changes) == [DeliverySent("sub", 3, 5), DeliveryDone("sub", 2)]


def test_deliveries_acknowledged_in_time_leave_nothing_behind_however_many() -> None:
    # No commit comes while every delivery is acknowledged before the linger: what Pending keeps of them must not
    # grow with their number (it once remembered every such row until a commit).
    pending = Pending()
    message = Message("t", b"p", 1, False, EMPTY_PROPERTIES, "pub", 0.0)

    def flow(first: int, n: int) -> None:
        for row in range(first, first + n):
            changes: list[Change] = [
                DeliveryAdded("sub", row, message, 1, False, ()), DeliverySent("sub", row, row % 65535 + 1)
            ]  # fmt: skip
            assert pending.add(changes, [("pub", row)], 0.0) == []
            assert pending.add([DeliveryDone("sub", row)], [], 0.0) == [("pub", row)]

    tracemalloc.start()
    try:
        flow(1_000_000, 5_000)
        before = tracemalloc.get_traced_memory()[0]
        flow(2_000_000, 50_000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 50_000  # bytes; remembering each row costs over 1 MB here
    assert pending.due(LINGER, IDLE) is None
    assert pending.take(1.0, LINGER) == []


@pytest.mark.parametrize("seed", range(30))
def test_random_flows_against_a_model_of_the_file(seed: int) -> None:
    # QoS 1 and QoS 2 deliveries added, acknowledged by their subscriber and committed in random order, with random
    # cuts (linger): every acknowledgement released has what came before it on file or done, every record written
    # applies to a row that is there, and at the end the file holds exactly the rows not done.
    rnd = random.Random(seed)
    message = Message("t", b"p", 1, False, EMPTY_PROPERTIES, "pub", 0.0)
    pending = Pending()
    file: set[int] = set()
    qos_of: dict[int, int] = {}
    added_before: dict[int, list[int]] = {}  # acknowledgement -> the rows added up to its batch
    live: list[int] = []  # rows added, not done
    done: set[int] = set()
    taken: list[Change] | None = None
    row = ack = 0
    now = 0.0

    def released(acks: list[tuple[Any, Any]]) -> None:
        for _, n in acks:
            for r in added_before.pop(n):
                assert r in file or r in done, (n, r)  # (a QoS 2 row is done only once on file)

    def write(changes: list[Change]) -> None:
        for c in coalesce(changes):
            if type(c) is DeliveryAdded:
                assert c.row not in file
                file.add(c.row)
            elif type(c) is DeliveryDone:
                assert c.row in file, c
                file.discard(c.row)
            else:
                assert getattr(c, "row", None) in file, c

    for _ in range(400):
        now += rnd.choice((0.0, 0.0005, 0.001))
        step = rnd.random()
        if step < 0.45:
            changes: list[Change] = []
            for _ in range(rnd.randint(1, 3)):
                row += 1
                qos_of[row] = rnd.choice((1, 1, 2))
                if rnd.random() < 0.5:  # as the core makes it: one record
                    changes.append(DeliveryAdded("sub", row, message, qos_of[row], False, (), row))
                else:  # added, then sent (queued and sent within the batch)
                    changes += [
                        DeliveryAdded("sub", row, message, qos_of[row], False, ()),
                        DeliverySent("sub", row, row),
                    ]
                live.append(row)
            ack += 1
            added_before[ack] = list(qos_of)
            released(pending.add(changes, [("pub", ack)], now))
        elif step < 0.8 and live:
            r = live[rnd.randrange(len(live))]
            if qos_of[r] == 2 and r not in file:  # its PUBLISH waits for the commit: no PUBCOMP yet
                continue
            live.remove(r)
            done.add(r)
            released(pending.add([DeliveryDone("sub", r)], [], now))
        elif taken is None:
            due = pending.due(LINGER, IDLE)
            if due is not None and due <= now:
                taken = pending.take(now, LINGER)
        else:
            write(taken)
            taken = None
            released(pending.committed())
    if taken is not None:
        write(taken)
        released(pending.committed())
    write(pending.take(math.inf, 0.0))
    released(pending.committed())
    assert file == set(live)  # what is not done, and only that
    for r in live:
        released(pending.add([DeliveryDone("sub", r)], [], now))
    write(pending.take(math.inf, 0.0))
    released(pending.committed())
    assert file == set()
    assert not added_before  # every acknowledgement went


# --- log_only: the groups the store writes as one frame, nothing else --------------------------------------------

_LOG_ONLY: list[tuple[str, list[Change], bool]] = [
    ("nothing", [], True),
    ("a QoS 2 message's first commit", [IncomingAdded("pub", 1), *_sent(1, 2)], True),
    ("its second", [IncomingReleased("pub", 1), DeliveryReleased("sub", 1)], True),
    ("its end", [DeliveryDone("sub", 1)], True),
    ("deliveries added as they were sent", [_added_sent(1), _added_sent(2, 2), IncomingAdded("pub", 1)], True),
    ("several messages", [*_sent(1, 2), *_sent(2, 2), DeliveryReleased("sub", 1), DeliveryDone("sub", 0)], True),
    ("a delivery queued (not sent)", [_added(1)], False),
    ("a delivery queued, the last change", [*_sent(1), _added(2)], False),
    ("sent later in the group", [_added(1), IncomingAdded("pub", 1), DeliverySent("sub", 1, 1)], False),
    ("another row's send after it", [_added(1), DeliverySent("sub", 2, 2)], False),
    ("a session saved", [*_sent(1), SessionSaved("sub", 4, 60, None, ())], False),
    ("a session removed", [SessionRemoved("sub")], False),
    ("a retained message", [RetainedSet(Message("t", b"r", 1, True, EMPTY_PROPERTIES, "pub", 0.0))], False),
    ("a retained message cleared", [RetainedCleared("t")], False),
]


@pytest.mark.parametrize(("changes", "expected"), [(c, e) for _, c, e in _LOG_ONLY], ids=[n for n, _, _ in _LOG_ONLY])
def test_log_only_says_which_groups_are_per_message_records_only(changes: list[Change], expected: bool) -> None:
    assert log_only(changes) is expected
