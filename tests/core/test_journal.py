"""The bridge's QoS 2 journal: records, the state they add up to, compaction, torn tails and damage."""

from __future__ import annotations

import pytest

from mqtt_cli.core.journal import (
    HEADER,
    Completed,
    Forwarded,
    JournalCorrupt,
    JournalState,
    Released,
    SourceLost,
    SourceReleased,
    parse,
    record,
)
from mqtt_cli.core.packets import Publish
from mqtt_cli.core.properties import Properties


def pub(pid: int, payload: bytes = b"x") -> Publish:
    return Publish("a/b", payload, 2, False, False, pid, Properties(user_properties=[("k", "v")]))


def load(*records: bytes) -> JournalState:
    state = JournalState()
    state.load(HEADER + b"".join(records))
    return state


def test_entry_lives_until_completed_and_source_released() -> None:
    f = record(Forwarded(1, 1, 10, 0, 7, pub(10)))
    state = load(f)
    (e,) = state.entries.values()
    assert (e.dst_side, e.dst_pid, e.src_side, e.src_pid, e.released) == (1, 10, 0, 7, False)
    assert e.publish == pub(10) and state.by_src == {(0, 7): 1}
    assert load(f, record(Released(1))).entries[1].released
    assert 1 in load(f, record(Released(1)), record(Completed(1))).entries  # the source may still re-send
    assert 1 in load(f, record(SourceReleased(0, 7))).entries  # the destination has not completed
    assert load(f, record(Released(1)), record(Completed(1)), record(SourceReleased(0, 7))).entries == {}
    assert load(f, record(Completed(1)), record(SourceLost(0))).entries == {}


def test_rehanded_forward_takes_the_new_packet_id() -> None:
    first, again = record(Forwarded(5, 1, 10, 0, 7, pub(10))), record(Forwarded(5, 1, 3, 0, 7, pub(3)))
    state = load(first, record(Released(5)), again)
    e = state.entries[5]
    assert (e.dst_pid, e.released, state.max_seq) == (3, False, 5)


def test_snapshot_keeps_exactly_the_live_state() -> None:
    recs = [record(Forwarded(i, 1, i, 0, 100 + i, pub(i, bytes([i])))) for i in range(1, 6)]
    recs += [record(Released(2)), record(Completed(2)), record(SourceReleased(0, 102))]
    recs += [record(Released(3)), record(SourceReleased(0, 104))]
    state = load(*recs)
    again = JournalState()
    again.load(state.snapshot())
    assert again.entries == state.entries and again.by_src == state.by_src
    assert sorted(again.entries) == [1, 3, 4, 5]


def test_torn_tail_is_ignored() -> None:
    data = HEADER + record(Forwarded(1, 1, 10, 0, 7, pub(10))) + record(Released(1))[:-3]
    state = JournalState()
    good = state.load(data)
    assert good == len(data) - len(record(Released(1))) + 3 and not state.entries[1].released


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b"garbage!", 0),
        (HEADER + record(Released(1))[:-1] + b"\xff" + record(Completed(1)), len(HEADER)),  # bit rot: CRC mismatch
        (HEADER + record(Completed(1)) + b"\x00\x00\x00\x01" + b"\x00" * 4 + b"Z", len(HEADER) + 17),
    ],
)
def test_damage_is_reported_not_skipped(data: bytes, where: int) -> None:
    with pytest.raises(JournalCorrupt) as info:
        list(parse(data))
    assert info.value.offset == where
