"""core/changelog.py: a commit's per-message records as one log row, decoded back to what was encoded."""

from __future__ import annotations

import struct

import pytest

from mqtt_cli.core.changelog import (
    IncomingFate,
    Logged,
    LogState,
    LogUnreadable,
    decode,
    encode,
)
from mqtt_cli.core.persistence import (
    Change,
    DeliveryAdded,
    DeliveryDone,
    DeliveryReleased,
    DeliverySent,
    IncomingAdded,
    IncomingReleased,
    RetainedSet,
    SessionRemoved,
)
from mqtt_cli.core.session import Message
from tests.core.test_packed import PROPERTY_KINDS

_FIELDS = ("topic", "payload", "qos", "retain", "properties", "origin", "received_at", "expires_at")


def _records() -> list[Logged]:
    out: list[Logged] = []
    for i, props in enumerate(PROPERTY_KINDS.values()):
        origin = (None, "pub", "")[i % 3]  # the broker itself, a client, an empty client id
        message = Message(f"t/ü/{i}", b"\x00p\xff" * i, i % 3, bool(i % 2), props, origin, 10.5 + i)
        out.append(DeliveryAdded(f"client-é{i % 2}", 1000 + i, message, 2 - i % 3, not i % 2, tuple(range(i))))
    out += [
        DeliverySent("client-é0", 1000, 65535),
        DeliveryReleased("client-é0", 1000),
        DeliveryDone("client-é1", 1 << 40),
        IncomingAdded("pub", 1),
        IncomingReleased("pub", 65535),
        DeliveryAdded("c", 7, Message("x", b"y" * 70_000, 1, False, PROPERTY_KINDS["none"], "p", -3.0), 1, False, ()),
        DeliveryAdded("c", 8, Message("x", b"z", 1, False, PROPERTY_KINDS["none"], "p", 0.0), 1, False, (), 65535),
    ]
    return out


def _comparable(c: Logged) -> tuple[object, ...]:
    if type(c) is DeliveryAdded:
        m = c.message
        return (c.client_id, c.row, c.qos, c.retain, c.subscription_ids, c.packet_id, *(getattr(m, f) for f in _FIELDS))
    if type(c) is DeliverySent:  # a delivery's later steps name its row only
        return (type(c), c.row, c.packet_id)
    if type(c) is DeliveryReleased or type(c) is DeliveryDone:
        return (type(c), c.row)
    return (type(c), c)


def test_decode_gives_back_what_was_encoded_through_the_wall_clock() -> None:
    records = _records()
    data = encode(records, 1000.0)
    back = decode(data, 1000.0)
    assert [type(c) for c in back] == [type(c) for c in records]
    assert [_comparable(c) for c in back] == [_comparable(c) for c in records]
    moved = decode(data, 990.0)[0]  # read by a broker whose clock started 10 s later
    assert type(moved) is DeliveryAdded and moved.message.received_at == records[0].message.received_at + 10  # type: ignore[union-attr]


def test_the_records_of_a_version_4_log_still_decode() -> None:
    """Version 4 wrote a delivery's later steps with its client (tags 2-4); a file killed then is replayed."""
    row = struct.pack("<BqHH", 2, 5, 9, 1) + b"c" + struct.pack("<BqH", 3, 5, 1) + b"c" + struct.pack("<BqH", 4, 5, 1)
    assert decode(row + b"c", 0.0) == [DeliverySent("c", 5, 9), DeliveryReleased("c", 5), DeliveryDone("c", 5)]


def test_an_empty_group_is_an_empty_row() -> None:
    assert encode([], 0.0) == b""
    assert decode(b"", 0.0) == []


@pytest.mark.parametrize("cut", [1, 5, 20, -1])
def test_a_truncated_row_is_unreadable(cut: int) -> None:
    data = encode(_records(), 0.0)
    with pytest.raises(LogUnreadable):
        decode(data[:cut], 0.0)


def test_garbage_is_unreadable() -> None:
    with pytest.raises(LogUnreadable, match="unknown record tag 99"):
        decode(b"\x63garbage", 0.0)
    with pytest.raises(LogUnreadable):
        decode(encode([IncomingAdded("c", 1)], 0.0) + b"\x02", 0.0)


def _added(row: int, packet_id: int = -1) -> DeliveryAdded:
    m = Message("t", b"p", 2, False, PROPERTY_KINDS["none"], "pub", 0.0)
    return DeliveryAdded("c", row, m, 2, False, (), packet_id)


def test_a_delivery_added_as_it_was_sent_logs_as_the_pair_did() -> None:
    # The core makes one record where it made DeliveryAdded then DeliverySent: the same bytes on file, so a file
    # written before reads the same, and a restart re-sends what it did.
    one, pair = LogState(), LogState()
    data = one.log([_added(1, 7), IncomingAdded("c", 3)], 0, 0.0).data
    assert data == pair.log([_added(1), DeliverySent("c", 1, 7), IncomingAdded("c", 3)], 0, 0.0).data
    assert (one.added.keys(), one.packet_ids) == (pair.added.keys(), pair.packet_ids) == ({1}, {1: 7})
    assert encode([_added(1, 7)], 0.0) == one.log([_added(1, 7)], 0, 0.0).data  # encode writes it alike


def test_log_takes_a_segment_up_to_a_session_removed_and_cancels_what_ends_in_it() -> None:
    state = LogState()
    retained = RetainedSet(Message("r", b"x", 1, True, PROPERTY_KINDS["none"], "pub", 0.0))
    changes: list[Change] = [
        _added(1), DeliverySent("c", 1, 7),  # sent: logged
        _added(2),  # not sent in the group: queued, straight to its table
        _added(3), DeliveryDone("c", 3),  # queued and done within: nowhere
        retained,
        IncomingAdded("c", 4),
        SessionRemoved("c"),
        DeliveryReleased("c", 1),
    ]  # fmt: skip
    first = state.log(changes, 0, 0.0)
    assert (first.end, first.queued, first.direct) == (7, [changes[2]], [retained])
    assert first.data[0] == 7  # added and sent: one record, which decodes as one added with its identifier
    back = decode(first.data, 0.0)
    assert [type(c) for c in back] == [DeliveryAdded, IncomingAdded] and back[0].packet_id == 7  # type: ignore[union-attr]
    assert set(state.added) == {1} and state.packet_ids == {1: 7}
    assert state.incoming == {("c", 4): IncomingFate.NEW}
    state.clear()  # (the store folds here, then removes the session)
    second = state.log(changes, 8, 0.0)
    assert second.end == len(changes) and state.released == {1} and not state.added


@pytest.mark.parametrize(
    "changes",
    [
        [_added(1), DeliverySent("c", 1, 7), DeliverySent("c", 1, 9), DeliveryReleased("c", 1)],  # sent at once
        [_added(1), IncomingAdded("c", 3), DeliverySent("c", 1, 9), DeliveryReleased("c", 1)],  # sent later on
        [_added(1), DeliverySent("c", 2, 4), DeliveryReleased("c", 1)],  # another row's: not sent in the group
        [_added(1, 7), DeliverySent("c", 1, 9), DeliveryReleased("c", 1)],  # added as sent: one record (the core's)
    ],
    ids=["at-once", "later", "queued", "one-record"],
)
def test_a_delivery_added_and_sent_at_once_is_one_record_and_the_state_is_the_records_one_by_one(
    changes: list[Change],
) -> None:
    logged, apart = LogState(), LogState()
    segment = logged.log(changes, 0, 0.0)
    for c in changes:  # what the records one by one would do (a queued row: on its table, not the log's)
        apart.apply(c)  # type: ignore[arg-type]
    if segment.queued:
        assert segment.queued == [changes[0]] and not logged.added and 1 in apart.added
        return
    assert (logged.added, logged.packet_ids, logged.released) == (apart.added, apart.packet_ids, apart.released)
    assert logged.packet_ids == {1: 9}
    records = decode(segment.data, 0.0)
    assert (segment.data[0] == 7) == (type(changes[1]) is DeliverySent)  # _ADDED_SENT only when sent at once
    replayed = LogState()
    for c in records:
        replayed.apply(c)
    assert (replayed.added.keys(), replayed.packet_ids, replayed.released) == (apart.added.keys(), {1: 9}, {1})


def test_the_state_cancels_a_row_added_and_done_and_keeps_an_identifier_used_again() -> None:
    state = LogState()
    for c in [_added(1), DeliverySent("c", 1, 1), DeliveryReleased("c", 1), DeliveryDone("c", 1)]:
        state.apply(c)
    assert not (state.added or state.packet_ids or state.released or state.done)
    state.apply(DeliveryDone("c", 9))  # a row on the table
    assert state.done == {9}
    state.apply(IncomingAdded("c", 5))
    state.apply(IncomingReleased("c", 5))
    assert state.incoming == {}  # added and released: on no table
    state.apply(IncomingReleased("c", 6))  # on the table: to delete
    state.apply(IncomingAdded("c", 6))  # used again: stays
    assert state.incoming == {("c", 6): IncomingFate.BACK}
    state.apply(IncomingReleased("c", 6))
    assert state.incoming == {("c", 6): IncomingFate.GONE}
